//! Every dtype `onyx run --output-dir` writes loads in numpy without pickle.
//! Needs python3 with numpy.

use std::process::Command;

use bytes::Bytes;
use half::{bf16, f16};
use onyx::{DType, Tensor};

#[test]
fn numpy_loads_every_output_dtype_without_pickle() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, Tensor, &str)> = vec![
        ("f32", Tensor::from_vec(vec![2], vec![1.5f32, -2.0]).unwrap(), "float32 [1.5, -2.0]"),
        (
            "f16",
            Tensor::from_vec(vec![2], vec![f16::from_f32(0.5), f16::from_f32(-1.0)]).unwrap(),
            "float16 [0.5, -1.0]",
        ),
        (
            "bf16",
            Tensor::from_vec(vec![2], vec![bf16::from_f32(1.0), bf16::from_f32(-2.0)]).unwrap(),
            "uint16 [16256, 49152]",
        ),
        (
            "f8",
            Tensor::from_bytes(DType::F8E4M3FN, vec![2], Bytes::from(vec![0x38u8, 0x7E])).unwrap(),
            "uint8 [56, 126]",
        ),
        (
            "i4",
            Tensor::from_bytes(DType::I4, vec![3], Bytes::from(vec![0xF1u8, 0x07])).unwrap(),
            "uint8 [1, 15, 7]",
        ),
        ("b", Tensor::from_bools(vec![2], &[true, false]).unwrap(), "bool [True, False]"),
        (
            "i64",
            Tensor::from_vec(vec![1, 2], vec![i64::MAX, -1]).unwrap(),
            "int64 [[9223372036854775807, -1]]",
        ),
        (
            "s",
            Tensor::from_strings(vec![2], vec!["héllo".into(), "".into()]).unwrap(),
            "<U5 ['héllo', '']",
        ),
    ];
    let mut script = String::from("import numpy as np, sys\n");
    for (name, t, expect) in &cases {
        let path = dir.path().join(format!("{name}.npy"));
        onyx::npy::write_npy(std::fs::File::create(&path).unwrap(), t).unwrap();
        script += &format!(
            "a = np.load({:?}, allow_pickle=False)\ngot = f'{{a.dtype.str if a.dtype.kind == \"U\" else a.dtype}} {{a.tolist()}}'\nassert got == {:?}, ({name:?}, got)\n",
            path.display().to_string(),
            expect
        );
    }
    let out = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
        .args(["-c", &script])
        .output()
        .expect("python3 with numpy runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
