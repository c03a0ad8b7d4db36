#!/usr/bin/env bash
# Builds the browser package: web/pkg/onyx_web.{js,d.ts} + onyx_web_bg.wasm,
# and copies the bundled example model next to the demo page.
#
#   web/build.sh            # release build (what CI and the demo use)
#
# Needs the wasm32-unknown-unknown target and wasm-bindgen-cli at the version
# of the wasm-bindgen crate in Cargo.lock (installed here when missing). No
# binaryen/wasm-opt download: nothing outside the registries.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target_dir=${CARGO_TARGET_DIR:-$root/target}

want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
have=$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)
if [ "$have" != "$want" ]; then
    echo "installing wasm-bindgen-cli $want (found '${have:-none}')"
    # No --locked: it fails against this registry (see shared/TOOLCHAIN.md).
    cargo install wasm-bindgen-cli --version "$want"
fi
rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown \
    || rustup target add wasm32-unknown-unknown

cargo build --release --target wasm32-unknown-unknown -p onyx-web
rm -rf web/pkg
wasm-bindgen --target web --out-dir web/pkg \
    "$target_dir/wasm32-unknown-unknown/release/onyx_web.wasm"
# wasm-bindgen drops the `?` of optional parameters whose TypeScript type is
# given explicitly; restore it for the options objects.
sed -i -e 's/options: SessionOptions)/options?: SessionOptions)/' \
       -e 's/options: RunOptions)/options?: RunOptions)/' \
       -e 's/dims: Record<string, number>, seed/dims?: Record<string, number>, seed/' \
       web/pkg/onyx_web.d.ts

mkdir -p web/www/models
cp examples/tiny_cnn.onnx web/www/models/

wasm=web/pkg/onyx_web_bg.wasm
raw=$(stat -c %s "$wasm")
gz=$(gzip -9 -c "$wasm" | wc -c)
awk -v r="$raw" -v g="$gz" 'BEGIN { printf "onyx_web_bg.wasm: %d bytes raw, %d bytes gzipped (%.2f MB)\n", r, g, g / 1e6 }'
