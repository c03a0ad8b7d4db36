#!/usr/bin/env bash
# The CUDA results of BENCHMARKS.md, as run on the H200 device machine. It expects,
# in the repository root, .dev/ with binaries built here (x86-64) by
#   cargo build --release --features cuda && cargo build --release -p onyx-cuda --example cuda_kernel_bench (copied to .dev/kernel_bench)
#   cargo test --release --features cuda --test cuda --no-run   (copied to .dev/cuda_tests)
# and, for STEPS=attention, optionally .dev/attention_harness (benches/cuda/attention_harness.cu built
# with nvcc: the pip wheels nvidia-cuda-nvcc, nvidia-nvvm, nvidia-cuda-runtime and nvidia-cuda-crt
# give a CUDA 13 nvcc here; with -cudart static the binary needs only the driver there)
# and STEPS (space-separated) choosing what to run: probe tests kernels attention models gputrace ncu conformance.
# Results go to /tmp/res as JSON lines and logs, packed into $OUT/results.tgz at the end.
set -u
OUT=${OUT:-/tmp/out}
RES=/tmp/res
BIN=.dev
mkdir -p "$OUT" "$RES"
trap 'tar czf "$OUT/results.tgz" -C "$RES" .' EXIT
STEPS=${STEPS:-"probe tests kernels models conformance"}
has() { [[ " $STEPS " == *" $1 "* ]]; }

# NVRTC and cuBLAS: the system CUDA if the loader knows it, else the toolkit folders.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export ONYX_CUDA_CACHE=/tmp/onyx-cuda-cache
# Why a run was not recorded as a CUDA graph, if one is not.
export RUST_LOG=${RUST_LOG:-warn,onyx_core::exec::replay=debug}

if has probe; then
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv,noheader
    ldconfig -p | grep -E "libnvrtc|libcublas\.so" | head -4
    $BIN/onyx info --device cuda
    $BIN/onyx info --device cuda:7 || echo "(cuda:7 refused, as it should be)"
fi

if has tests; then
    ONYX_REQUIRE_CUDA=1 $BIN/cuda_tests --test-threads 1 --nocapture 2>&1 | tee "$RES/cuda_tests.log" | grep -E "^test |release |test result|panicked|assert"
fi

if has kernels; then
    python3 benches/torch_cuda.py | tee "$RES/torch_kernels.json"
    $BIN/kernel_bench --add-elems $((256 << 20)) --runs 20 --reps 10 | tee "$RES/onyx_kernels.json"
fi

if has attention; then
    python3 benches/attention_bench.py | tee "$RES/attention_torch.jsonl"
    # Onyx's attention kernels alone: .dev/attention_harness if carried (built here with the
    # pip CUDA 13 nvcc), else built with the machine's nvcc.
    H=$BIN/attention_harness
    [ -x "$H" ] || { H=/tmp/attention_harness; nvcc -O3 -std=c++17 -arch=sm_90 -I kernels/cuda -o $H benches/cuda/attention_harness.cu; }
    $H | tee "$RES/attention_onyx.jsonl"
    # Registers and spills of the attention kernels (NVRTC compiles the same source for sm_90).
    nvcc --resource-usage -arch=sm_90 -c -o /tmp/attention.o kernels/cuda/attention.cu 2>&1 \
        | grep -E "Function properties|registers|spill" | tee "$RES/attention_resources.txt"
fi

if has models; then
    M=/tmp/models
    mkdir -p "$M"
    python3 benches/export_models.py "$M" --fp16 2>&1 | grep -v Warning
    python3 benches/bert_torch.py "$M" | tee "$RES/bert_torch.jsonl"
    for seq in 128 512; do
        ins="--input input_ids=$M/bert_ids_8x$seq.npy --input attention_mask=$M/bert_mask_8x$seq.npy"
        for release in "" "--no-release"; do
            rm -rf /tmp/o
            $BIN/onyx run "$M/bert_base_fp16.onnx" --device cuda --strict --json $release $ins --output-dir /tmp/o \
                | python3 -c "import json,sys; r=json.load(sys.stdin); m=r['memory']; print(json.dumps({'case': 'bert_fp16_8x$seq', 'release': '$release' == '', 'peak': m['peak_bytes'], 'no_release': m['no_release_bytes'], 'bound': m['live_set_bound_bytes'], 'weights': m['weight_bytes']}))" \
                | tee -a "$RES/bert_memory.jsonl"
        done
        python3 -c "import numpy as np; a=np.load('/tmp/o/last_hidden_state.npy').astype(np.float32); b=np.load('$M/bert_torch_8x$seq.npy'); print({'case': 'bert_fp16_8x$seq', 'max_abs_diff_vs_torch': float(np.abs(a-b).max()), 'rel_l2': float(np.linalg.norm(a-b)/np.linalg.norm(b))})" | tee -a "$RES/bert_check.jsonl"
        # --profile adds one run synchronized after every node: device time by op type.
        $BIN/onyx bench "$M/bert_base_fp16.onnx" --device cuda --strict --runs 30 --warmup 5 --json --profile $ins \
            > "$RES/bert_bench_8x$seq.json"
        python3 -c "import json,sys; r=json.load(open('$RES/bert_bench_8x$seq.json')); print(json.dumps({'case': 'bert_fp16_8x$seq', 'device': r['device'], 'cuda_graphs': r.get('cuda_graphs'), **{k: round(v,3) for k,v in r['warm'].items() if k.endswith('ms')}}))" \
            | tee -a "$RES/bert_onyx.jsonl"
        # Node by node from the host, as before CUDA graphs, on the same machine.
        $BIN/onyx bench "$M/bert_base_fp16.onnx" --device cuda --strict --runs 30 --warmup 5 --json --no-cuda-graph $ins \
            | python3 -c "import json,sys; r=json.load(sys.stdin); print(json.dumps({'case': 'bert_fp16_8x$seq', 'cuda_graphs': False, **{k: round(v,3) for k,v in r['warm'].items() if k.endswith('ms')}}))" \
            | tee -a "$RES/bert_onyx.jsonl"
        # The graph as written (no fused attention, Gelu or skip normalization), same machine.
        $BIN/onyx bench "$M/bert_base_fp16.onnx" --device cuda --strict --runs 30 --warmup 5 --json --no-fusion $ins \
            | python3 -c "import json,sys; r=json.load(sys.stdin); print(json.dumps({'case': 'bert_fp16_8x$seq', 'fusion': False, **{k: round(v,3) for k,v in r['warm'].items() if k.endswith('ms')}}))" \
            | tee -a "$RES/bert_onyx.jsonl"
    done
    # PyTorch again after Onyx: the machine's speed drifts, so Onyx's runs are bracketed.
    python3 benches/bert_torch.py "$M" | tee "$RES/bert_torch_after.jsonl"
fi

if has gputrace; then
    # GPU time per kernel over warm runs of BERT (after the models step), from
    # Nsight Systems if the machine has it: graph replays traced node by node.
    M=/tmp/models
    NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
    if [ -n "$NSYS" ]; then
        for seq in 128 512; do
            ins="--input input_ids=$M/bert_ids_8x$seq.npy --input attention_mask=$M/bert_mask_8x$seq.npy"
            "$NSYS" profile -o /tmp/bert_$seq -f true -t cuda --cuda-graph-trace=node \
                $BIN/onyx bench "$M/bert_base_fp16.onnx" --device cuda --strict --runs 20 --warmup 3 $ins > /dev/null 2>&1
            "$NSYS" stats -q -r cuda_gpu_kern_sum -f csv -o "$RES/kernels_8x$seq" /tmp/bert_$seq.nsys-rep > /dev/null 2>&1
            echo "== GPU kernels, BERT 8x$seq (24 runs) =="
            python3 -c "
import csv,glob
f=glob.glob('$RES/kernels_8x$seq*.csv')[0]
rows=list(csv.DictReader(open(f)))
tot=sum(float(r['Total Time (ns)']) for r in rows)
print('total %.3f ms per run over %d kernels' % (tot/24e6, sum(int(r['Instances']) for r in rows)//24))
for r in rows[:14]: print('%6.3f ms/run %5d/run  %s' % (float(r['Total Time (ns)'])/24e6, int(r['Instances'])//24, r['Name'][:90]))
"
        done
    else
        echo "no nsys here:"; ls /usr/local/cuda/bin | tr '\n' ' '
    fi
fi

if has ncu; then
    # GPU time per kernel of one run node by node (Nsight Compute), beside
    # PyTorch's per-kernel CUDA time (torch.profiler), after the models step.
    M=/tmp/models
    NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    for seq in 128 512; do
        ins="--input input_ids=$M/bert_ids_8x$seq.npy --input attention_mask=$M/bert_mask_8x$seq.npy"
        "$NCU" --csv --metrics gpu__time_duration.sum --log-file "$RES/ncu_8x$seq.csv" \
            $BIN/onyx run "$M/bert_base_fp16.onnx" --device cuda --strict --no-cuda-graph $ins > /dev/null 2>&1
        echo "== Onyx kernels, BERT 8x$seq (one run) =="
        python3 benches/ncu_summary.py "$RES/ncu_8x$seq.csv" 16
    done
    # Where the attention kernel's warps wait, on one of BERT's launches at 8 x 512.
    ins="--input input_ids=$M/bert_ids_8x512.npy --input attention_mask=$M/bert_mask_8x512.npy"
    "$NCU" --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        -k regex:attention_mma -c 1 $BIN/onyx run "$M/bert_base_fp16.onnx" --device cuda --strict --no-cuda-graph $ins 2>&1 \
        | grep -vE "^\s*(----|$)" | grep -E "Duration|Throughput|Registers|Occupancy|Stall|stall|Warp Cycles|Issued|Block Limit|Shared Memory|Eligible|Active Warps|One or More|No Eligible|SM Frequency" \
        | tee "$RES/ncu_attention.txt" | head -40
    python3 benches/bert_torch.py "$M" --profile | grep -v '^{'
fi

if has conformance; then
    export ONYX_TESTDATA=/tmp/testdata
    for suite in node ort; do
        timeout ${CONF_TIMEOUT:-300} $BIN/onyx conformance --suite "$suite" --backend cuda --no-fallback \
            --report "$RES/conf-$suite" --manifest "tests/manifests/$suite-cuda.txt" > "$RES/conformance-$suite.txt" 2>&1
        tail -5 "$RES/conformance-$suite.txt"
    done
fi

