//! Fusion over inferred facts, on a real transformer encoder: the CPU behind
//! a provider that asks for every fused form (as CUDA does) runs the fused
//! graph, and its outputs match the graph as written.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use onyx::Value;
use onyx::core::ep::{
    BoxFuture, DeviceBuffer, DeviceId, EpError, ExecutionProvider, Fusions, KernelId, KernelSpec,
    Launch, MemoryStats,
};
use onyx_cpu::CpuProvider;

/// The CPU, asking for every fused form.
struct FusingCpu(CpuProvider);

impl ExecutionProvider for FusingCpu {
    fn name(&self) -> String {
        self.0.name()
    }
    fn device(&self) -> DeviceId {
        self.0.device()
    }
    fn allocate(&self, size: u64, align: u32) -> Result<DeviceBuffer, EpError> {
        self.0.allocate(size, align)
    }
    fn deallocate(&self, b: DeviceBuffer) -> Result<(), EpError> {
        self.0.deallocate(b)
    }
    fn arena_alignment(&self) -> Option<u64> {
        self.0.arena_alignment()
    }
    fn allocate_arena(&self, size: u64) -> Result<DeviceBuffer, EpError> {
        self.0.allocate_arena(size)
    }
    fn view(&self, arena: DeviceBuffer, offset: u64, size: u64) -> Result<DeviceBuffer, EpError> {
        self.0.view(arena, offset, size)
    }
    fn upload(&self, b: DeviceBuffer, data: &[u8]) -> Result<(), EpError> {
        self.0.upload(b, data)
    }
    fn download(&self, b: DeviceBuffer, len: usize) -> BoxFuture<'_, Result<Vec<u8>, EpError>> {
        self.0.download(b, len)
    }
    fn copy(&self, s: DeviceBuffer, d: DeviceBuffer, len: u64) -> Result<(), EpError> {
        self.0.copy(s, d, len)
    }
    fn supports_op(&self, domain: &str, op: &str) -> bool {
        self.0.supports_op(domain, op)
    }
    fn fusions(&self) -> Fusions {
        Fusions {
            conv_batch_norm: true,
            conv_activation: true,
            gelu: true,
            bias_gelu: true,
            attention: true,
            skip_layer_norm: true,
            biased_gemm: true,
            gated_matmul_nbits: true,
        }
    }
    fn prepare(&self, spec: &KernelSpec<'_>) -> Result<KernelId, EpError> {
        self.0.prepare(spec)
    }
    fn launch(&self, k: KernelId, a: &Launch<'_>) -> Result<(), EpError> {
        self.0.launch(k, a)
    }
    fn synchronize(&self) -> BoxFuture<'_, Result<(), EpError>> {
        self.0.synchronize()
    }
    fn memory_stats(&self) -> MemoryStats {
        self.0.memory_stats()
    }
    fn reset_peak(&self) {
        self.0.reset_peak()
    }
}

/// The cached real model, fetched first if needed.
fn model_file(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir =
        std::env::var_os("ONYX_MODELS").map(PathBuf::from).unwrap_or(root.join("target/models"));
    let status = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
        .arg(root.join("tests/scripts/fetch_models.py"))
        .arg(&dir)
        .arg(name)
        .status()
        .expect("python3 runs");
    assert!(status.success(), "fetching {name} failed");
    dir.join(format!("{name}.onnx"))
}

fn outputs(s: &onyx::Session, inputs: &[(String, Value)]) -> Vec<Vec<f64>> {
    let o = s.run(inputs.to_vec()).unwrap();
    o.values.iter().map(|(_, v)| v.as_tensor().unwrap().to_f64_vec().unwrap()).collect()
}

#[test]
fn every_fusion_applies_to_a_real_encoder_and_changes_nothing_but_rounding() {
    let path = model_file("paraphrase_minilm_l3_v2");
    let fused = onyx::Session::builder()
        .with_provider(Arc::new(FusingCpu(CpuProvider::default())))
        .with_strict(true)
        .commit_from_file(&path)
        .unwrap();
    let plain = onyx::Session::builder().with_fusion(false).commit_from_file(&path).unwrap();
    let ops: Vec<String> = fused.placement().into_iter().map(|(n, _)| n.op_type).collect();
    let count = |op: &str| ops.iter().filter(|o| *o == op).count();
    // MiniLM-L3: three layers, each with one attention, two skip norms, a
    // Gelu of a bias add, and the Q, K, V projections' biases in Gemms.
    assert_eq!(count("Attention"), 3, "{ops:?}");
    assert_eq!(count("SkipLayerNormalization"), 6, "{ops:?}");
    assert_eq!(count("BiasGelu"), 3, "{ops:?}");
    assert_eq!(count("Gemm"), 9, "{ops:?}");
    let dims = [("batch_size".to_string(), 2), ("sequence_length".to_string(), 16)].into();
    let mut inputs = onyx::inputs::random_inputs(&plain.inputs(), &dims, 3).unwrap();
    for (name, v) in &mut inputs {
        if name == "input_ids" {
            let t = v.as_tensor().unwrap();
            let ids: Vec<i64> = (0..t.numel() as i64).map(|i| (i * 7919) % 30522).collect();
            *v = Value::Tensor(onyx::Tensor::from_vec(t.shape().to_vec(), ids).unwrap());
        } else if name == "attention_mask" {
            let t = v.as_tensor().unwrap();
            *v = Value::Tensor(
                onyx::Tensor::from_vec(t.shape().to_vec(), vec![1i64; t.numel()]).unwrap(),
            );
        }
    }
    // Twice each: the second run follows the schedule.
    for _ in 0..2 {
        let (a, b) = (outputs(&fused, &inputs), outputs(&plain, &inputs));
        for (x, y) in a.iter().zip(&b) {
            let scale = y.iter().fold(0f64, |m, v| m.max(v.abs()));
            let worst = x.iter().zip(y).fold(0f64, |m, (p, q)| m.max((p - q).abs()));
            assert!(worst <= 1e-4 * scale.max(1.0), "fused differs by {worst} (scale {scale})");
        }
    }
}
