//! Folding: shape arithmetic computed on the host at run time, and nodes over
//! constants computed once when the session is built. Both are checked by the
//! provider's own count of allocations, which a kernel launch would raise.

mod common;

use common::*;
use onyx::{DType, Tensor, Value};

fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec()).unwrap()
}

/// Allocations one run makes on the session's provider, and its output `y`.
fn run_counting(s: &onyx::Session, x: Tensor) -> (u64, Tensor) {
    let before = s.provider().memory_stats();
    let out = s.run([("x", Value::Tensor(x))]).unwrap();
    let after = s.provider().memory_stats();
    let y = out.get("y").and_then(Value::as_tensor).unwrap().clone();
    (after.allocations - before.allocations, y)
}

/// x: f32[n, 6] → Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [2, 3])) → Relu → y.
fn reshape_by_shape_arithmetic() -> Vec<u8> {
    model(
        graph(
            vec![
                node("Shape", "shape", &["x"], &["s"], vec![]),
                node("Gather", "batch", &["s", "zero"], &["n"], vec![("axis", A::I(0))]),
                node("Unsqueeze", "as_vector", &["n", "axes"], &["n1"], vec![]),
                node("Concat", "target", &["n1", "rest"], &["t"], vec![("axis", A::I(0))]),
                node("Reshape", "reshape", &["x", "t"], &["r"], vec![]),
                node("Relu", "relu", &["r"], &["y"], vec![]),
            ],
            vec![value("x", DType::F32, &[-1, 6])],
            vec![value("y", DType::F32, &[-1, 2, 3])],
            vec![
                ("zero", Tensor::scalar(0i64)),
                ("axes", i64s(&[1], &[0])),
                ("rest", i64s(&[2], &[2, 3])),
            ],
        ),
        13,
    )
}

#[test]
fn shape_arithmetic_runs_on_the_host_and_only_real_data_is_allocated() {
    let s = session(reshape_by_shape_arithmetic(), true);
    for n in [4usize, 1] {
        let x = f32s(&[n, 6], |i| i as f32 - 5.0);
        let (allocations, y) = run_counting(&s, x);
        // The uploaded input and Relu's output: Shape, Gather and Concat launch nothing.
        assert_eq!(allocations, 2, "batch {n}");
        assert_eq!(y.shape(), &[n, 2, 3]);
        let want: Vec<f32> = (0..n * 6).map(|i| (i as f32 - 5.0).max(0.0)).collect();
        assert_eq!(y.to_vec::<f32>().unwrap(), want);
    }
}

/// y = x · Slice(Transpose(w)): the weight is rebuilt from an initializer.
fn weight_rebuilt_from_an_initializer() -> Vec<u8> {
    model(
        graph(
            vec![
                node("Transpose", "wt", &["w"], &["w_t"], vec![]),
                node("Slice", "cols", &["w_t", "starts", "ends", "axes"], &["w2"], vec![]),
                node("MatMul", "mm", &["x", "w2"], &["y"], vec![]),
            ],
            vec![value("x", DType::F32, &[1, 4])],
            vec![value("y", DType::F32, &[1, 2])],
            vec![
                ("w", f32s(&[3, 4], |i| i as f32)),
                ("starts", i64s(&[1], &[1])),
                ("ends", i64s(&[1], &[3])),
                ("axes", i64s(&[1], &[1])),
            ],
        ),
        13,
    )
}

#[test]
fn nodes_over_initializers_are_computed_once_when_the_session_is_built() {
    let s = session(weight_rebuilt_from_an_initializer(), true);
    let x = f32s(&[1, 4], |i| 1.0 + i as f32);
    let (allocations, y) = run_counting(&s, x);
    // The uploaded input and MatMul's output: Transpose and Slice no longer run.
    assert_eq!(allocations, 2);
    // w_t[k][j] = w[j][k] = 4j + k; columns 1 and 2.
    let want: Vec<f32> =
        [1, 2].iter().map(|&j| (0..4).map(|k| (1 + k) as f32 * (4 * j + k) as f32).sum()).collect();
    assert_eq!(y.to_vec::<f32>().unwrap(), want);
}
