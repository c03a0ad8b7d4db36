#!/usr/bin/env bash
# Checks the CUDA backend on a machine with an NVIDIA GPU. Any change to
# core/src/exec, core/src/plan or backend-cuda is checked with it before it is
# called done (CI has no GPU).
#
#   tools/gpu-check.sh build   here (x86-64 Linux, Rust): builds the release CLI with
#                              the CUDA backend and the CUDA test binaries, stripped,
#                              into .dev/gpu-check.tar.xz (about 20 MB) to carry
#   tools/gpu-check.sh run     on the GPU machine (no Rust needed), in the repository
#                              root with .dev/ carried along; unpacks the tarball
#
# `run` needs python3 with onnx 1.23.0 and ml_dtypes 0.7.0, or their wheels carried
# in .whl/ (it generates the node suite into $ONYX_TESTDATA), and runs, all on
# every core:
#   1. the ONNX node suite on CUDA with no CPU fallback, in one process, against
#      tests/manifests/node-cuda.txt (a regression fails the check);
#   2. the concurrency test on CUDA and the CPU: a sample of cases
#      (ONYX_CONCURRENT_CASES, all of the manifest by default) on 8 threads sharing
#      one provider, outputs equal to a one-thread run, memory back where it started;
#   3. the CUDA integration tests (tests/facade/cuda.rs);
#   4. generation on CUDA (tests/facade/generate.rs): greedy tokens and logits equal
#      an onnxruntime CPU loop on the Optimum and onnxruntime-genai layouts, and the
#      KV cache never crosses to the host (needs python3 with onnx, onnxruntime and
#      numpy).
# Any warning that a recording left buffers behind fails the check too.
# Logs go to $OUT (or /tmp/gpu-check).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.dev

build() {
    set -e
    mkdir -p "$BIN"
    local tmp
    tmp=$(mktemp -d)
    # One cargo call for everything, so that the binary and the tests share one
    # feature set (a plain `cargo build` unifies without the dev-dependencies
    # and would compile the workspace twice); it builds the CLI too.
    cargo test --release --features cuda -p onyx-cli -p onyx --test concurrency --test cuda \
        --test generation --no-run --message-format=json > "$tmp/build.json"
    cp target/release/onyx "$tmp/onyx"
    # Each test binary's path, from cargo's report.
    test_bin() {
        python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, open(sys.argv[1])) if m.get("executable") and m["target"]["name"] == sys.argv[2]][-1])' "$tmp/build.json" "$1"
    }
    cp "$(test_bin concurrency)" "$tmp/concurrency"
    cp "$(test_bin cuda)" "$tmp/cuda_tests"
    cp "$(test_bin generation)" "$tmp/generate_tests"
    rm "$tmp/build.json"
    strip "$tmp"/*
    # Only the tarball is carried (the device tool takes 64 MiB a call).
    rm -f "$BIN/onyx" "$BIN/concurrency" "$BIN/cuda_tests" "$BIN/generate_tests"
    tar cJf "$BIN/gpu-check.tar.xz" -C "$tmp" onyx concurrency cuda_tests generate_tests
    rm -rf "$tmp"
    ls -l "$BIN/gpu-check.tar.xz"
}

run() {
    local out=${OUT:-/tmp/gpu-check}
    mkdir -p "$out"
    tar xJf "$BIN/gpu-check.tar.xz" -C "$BIN" || { echo "no $BIN/gpu-check.tar.xz: run '$0 build' first"; return 1; }
    # NVRTC and cuBLAS: the system CUDA if the loader knows it, else the toolkit folders.
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
        [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    done
    export ONYX_TESTDATA=${ONYX_TESTDATA:-/tmp/testdata-ci}
    export ONYX_CUDA_CACHE=${ONYX_CUDA_CACHE:-/tmp/onyx-cuda-cache}
    export ONYX_REQUIRE_CUDA=1
    export ONYX_CONCURRENT_CASES=${ONYX_CONCURRENT_CASES:-all}
    export RUST_LOG=${RUST_LOG:-warn}
    # wgpu needs the Vulkan loader packages there (../shared/TOOLCHAIN.md); CI runs it.
    export ONYX_SKIP_WGPU=1
    local failed=0
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    echo "cores: $(nproc)"
    # The manifests follow the data CI makes, with onnx 1.23.0 and ml_dtypes
    # 0.7.0: older ml_dtypes wrap out-of-range floats cast to int4/int2 where
    # 0.7.0 gives 0, which changes the expected outputs of 24 Cast cases.
    # Where the machine has other versions, wheels carried in .whl/ are used
    # (`pip download --no-deps --python-version 3.12 --only-binary=:all:
    # --platform manylinux_2_28_x86_64 -d .whl onnx==1.23.0 ml_dtypes==0.7.0`).
    if [ ! -f "$ONYX_TESTDATA/node/SUITE.json" ]; then
        local py=()
        if ! python3 -c 'import onnx, ml_dtypes, sys; sys.exit((onnx.__version__, ml_dtypes.__version__) != ("1.23.0", "0.7.0"))' 2>/dev/null; then
            python3 -m pip install -q --no-deps --no-index --target /tmp/suite-site .whl/onnx-1.23.0-*.whl .whl/ml_dtypes-0.7.0-*.whl \
                || { echo "onnx 1.23.0 and ml_dtypes 0.7.0 are needed: carry their wheels in .whl/"; return 1; }
            py=(env PYTHONPATH=/tmp/suite-site)
        fi
        "${py[@]}" python3 tests/scripts/fetch_node_suite.py "$ONYX_TESTDATA/node" > "$out/fetch.log" 2>&1 \
            || { echo "generating the node suite failed:"; tail "$out/fetch.log"; return 1; }
    fi
    head -1 "$out/fetch.log" 2>/dev/null

    echo "== 1. the node suite on CUDA, no fallback, one process"
    "$BIN/onyx" conformance --suite node --backend cuda --no-fallback \
        --manifest tests/manifests/node-cuda.txt --report "$out/node-cuda" > "$out/conformance.log" 2>&1 || failed=1
    tail -4 "$out/conformance.log"

    echo "== 2. sessions on 8 threads sharing one provider"
    "$BIN/concurrency" --nocapture --test-threads 1 > "$out/concurrency.log" 2>&1 || failed=1
    grep -E "^cuda|^test |test result|panicked" "$out/concurrency.log"

    echo "== 3. the CUDA integration tests"
    "$BIN/cuda_tests" --test-threads 1 > "$out/cuda_tests.log" 2>&1 || failed=1
    grep -E "test result|FAILED|panicked" "$out/cuda_tests.log"

    echo "== 4. generation on CUDA against onnxruntime"
    # The onnxruntime CPU loop is the oracle here; CI also checks the genai
    # folders against onnxruntime-genai, which this machine need not have.
    # Generating the references here takes minutes (the float16 ones search
    # for prompts with a wide margin): carry a local run's folders as .dev/gen
    # (`cp -r target/tmp/generate .dev/gen`) to reuse them.
    local gen=/tmp/onyx-generate
    [ -d "$BIN/gen" ] && gen="$PWD/$BIN/gen"
    ONYX_SOURCE_DIR="$PWD" ONYX_GENERATE_DIR="$gen" \
        ONYX_NO_ORT_GENAI=${ONYX_NO_ORT_GENAI:-1} \
        "$BIN/generate_tests" --test-threads 1 cuda > "$out/generate.log" 2>&1 || failed=1
    grep -E "^test |test result|panicked" "$out/generate.log"

    if grep -l "neither freed nor" "$out"/*.log; then
        echo "a recording left buffers behind (above)"
        failed=1
    fi
    [ "$failed" = 0 ] && echo "gpu-check: all passed" || echo "gpu-check: FAILED (logs in $out)"
    return "$failed"
}

case "${1:-}" in
    build) build ;;
    run) run ;;
    *) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
