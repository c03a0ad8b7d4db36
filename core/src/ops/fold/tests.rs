use super::*;
use crate::dtype::DType;
use crate::error::OpError;
use crate::ops::InferInputs;
use crate::ops::elementwise::{BinaryKind, Unary, UnaryKind};
use crate::ops::movement::{Gather, Transpose};
use crate::ops::shape::{Reshape, ShapeOf};
use crate::shape::{Dim, Shape};

fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec()).unwrap()
}

fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec()).unwrap()
}

fn one(r: Option<Result<Vec<Tensor>, OpError>>) -> Tensor {
    r.expect("folds").expect("valid").remove(0)
}

#[test]
fn gather_picks_rows_and_counts_negative_indices_from_the_end() {
    let x = i64s(&[3, 2], &[1, 2, 3, 4, 5, 6]);
    let t = one(gather(&x, &i64s(&[2], &[-1, 0]), 0));
    assert_eq!(t.shape(), &[2, 2]);
    assert_eq!(t.to_i64_vec().unwrap(), vec![5, 6, 1, 2]);
    let t = one(gather(&x, &Tensor::scalar(1i64), 1));
    assert_eq!(t.shape(), &[3]);
    assert_eq!(t.to_i64_vec().unwrap(), vec![2, 4, 6]);
    assert!(gather(&x, &Tensor::scalar(3i64), 0).unwrap().is_err());
}

#[test]
fn concat_joins_along_an_inner_axis() {
    let (a, b) = (i64s(&[2, 1], &[1, 2]), i64s(&[2, 2], &[3, 4, 5, 6]));
    let t = one(concat(&[&a, &b], -1));
    assert_eq!(t.shape(), &[2, 3]);
    assert_eq!(t.to_i64_vec().unwrap(), vec![1, 3, 4, 2, 5, 6]);
}

#[test]
fn slice_steps_backwards_and_clamps() {
    let x = f32s(&[2, 4], &[0., 1., 2., 3., 4., 5., 6., 7.]);
    let t = one(slice(&x, &[-1, 10], &[-100, 0], Some(&[1, 0]), Some(&[-2, 1])));
    assert_eq!(t.shape(), &[0, 2]);
    let t = one(slice(&x, &[3], &[i64::MIN], Some(&[1]), Some(&[-2])));
    assert_eq!(t.shape(), &[2, 2]);
    assert_eq!(t.to_f64_vec().unwrap(), vec![3., 1., 7., 5.]);
}

#[test]
fn transpose_expand_and_where_move_elements_bit_for_bit() {
    let x = f32s(&[2, 3], &[0., 1., 2., 3., 4., 5.]);
    let t = one(transpose(&x, &[1, 0]));
    assert_eq!(t.shape(), &[3, 2]);
    assert_eq!(t.to_f64_vec().unwrap(), vec![0., 3., 1., 4., 2., 5.]);
    let t = one(expand(&i64s(&[2, 1], &[7, 8]), &i64s(&[3], &[1, 2, 3])));
    assert_eq!(t.shape(), &[1, 2, 3]);
    assert_eq!(t.to_i64_vec().unwrap(), vec![7, 7, 7, 8, 8, 8]);
    let c = Tensor::from_bools(vec![3], &[true, false, true]).unwrap();
    let t = one(where_(&c, &i64s(&[3], &[1, 2, 3]), &Tensor::scalar(-1i64)));
    assert_eq!(t.to_i64_vec().unwrap(), vec![1, -1, 3]);
}

#[test]
fn integer_arithmetic_wraps_and_divides_toward_zero_as_the_kernels_do() {
    let a = Tensor::from_vec(vec![3], vec![i32::MIN, -7, 7]).unwrap();
    let b = Tensor::from_vec(vec![3], vec![-1i32, 2, 0]).unwrap();
    let t = one(binary(BinaryKind::Div, &a, &b));
    assert_eq!(t.to_vec::<i32>().unwrap(), vec![i32::MIN, -3, 0]);
    let t = one(binary(BinaryKind::Add, &a, &Tensor::scalar(-1i32)));
    assert_eq!(t.to_vec::<i32>().unwrap(), vec![i32::MAX, -8, 6]);
    let t = one(binary(BinaryKind::Less, &a, &b));
    assert_eq!(t.to_i64_vec().unwrap(), vec![1, 1, 0]);
    assert!(binary(BinaryKind::Pow, &a, &b).is_none());
    let (p, q) = (i64s(&[2], &[-7, 7]), i64s(&[2], &[3, -3]));
    let t = one(binary(BinaryKind::Mod { fmod: false }, &p, &q));
    assert_eq!(t.to_i64_vec().unwrap(), vec![2, -2]);
    let t = one(binary(BinaryKind::Mod { fmod: true }, &p, &q));
    assert_eq!(t.to_i64_vec().unwrap(), vec![-1, 1]);
}

#[test]
fn float_arithmetic_rounds_once_to_the_operands_dtype() {
    let a = f32s(&[2], &[0.1, 1.0]);
    let b = f32s(&[2], &[0.2, 3.0]);
    let t = one(binary(BinaryKind::Add, &a, &b));
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![0.1f32 + 0.2f32, 4.0]);
    let t = one(binary(BinaryKind::Div, &a, &b));
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![0.1f32 / 0.2f32, 1.0f32 / 3.0f32]);
    let t = one(unary(UnaryKind::Neg, &a));
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![-0.1, -1.0]);
    assert!(unary(UnaryKind::Exp, &a).is_none());
}

#[test]
fn casts_convert_between_integers_bools_and_floats() {
    let t = one(cast(&f32s(&[3], &[2.7, -2.7, 0.0]), DType::I64));
    assert_eq!(t.to_i64_vec().unwrap(), vec![2, -2, 0]);
    let t = one(cast(&i64s(&[2], &[300, -1]), DType::U8));
    assert_eq!(t.to_i64_vec().unwrap(), vec![44, 255]);
    let t = one(cast(&i64s(&[2], &[0, 5]), DType::Bool));
    assert_eq!(t.dtype(), DType::Bool);
    assert_eq!(t.to_i64_vec().unwrap(), vec![0, 1]);
    let t = one(cast(&i64s(&[1], &[3]), DType::F16));
    assert_eq!(t.to_f64_vec().unwrap(), vec![3.0]);
}

#[test]
fn generators_fill_and_count() {
    let t = one(constant_of_shape(&Tensor::scalar(1.5f32), &i64s(&[2], &[2, 3])));
    assert_eq!(t.shape(), &[2, 3]);
    assert_eq!(t.to_f64_vec().unwrap(), vec![1.5; 6]);
    let t = one(range(&Tensor::scalar(10i64), &Tensor::scalar(3i64), &Tensor::scalar(-3i64)));
    assert_eq!(t.to_i64_vec().unwrap(), vec![10, 7, 4]);
    assert!(
        range(&Tensor::scalar(0.0f32), &Tensor::scalar(1.0f32), &Tensor::scalar(0.5f32)).is_none()
    );
}

fn fact(t: &Tensor) -> Option<Fact> {
    Some(Fact::from_tensor(t))
}

#[test]
fn shape_of_a_static_input_folds_from_inference_alone() {
    let op = ShapeOf { start: 0, end: None };
    let x = Some(Fact::known(DType::F32, &[2, 5]));
    let outs = op.infer(&InferInputs::new(std::slice::from_ref(&x))).unwrap();
    let v = fold(&op, &[x], &outs, RUN_LIMIT).unwrap();
    assert_eq!(v[0].to_i64_vec().unwrap(), vec![2, 5]);
    // A symbolic dim leaves it to the kernel.
    let x = Some(Fact::new(DType::F32, Shape(vec![Dim::Sym("n".into()), Dim::Known(5)])));
    let outs = op.infer(&InferInputs::new(std::slice::from_ref(&x))).unwrap();
    assert!(fold(&op, &[x], &outs, RUN_LIMIT).is_none());
}

#[test]
fn a_view_of_a_known_value_folds_to_that_value_reshaped() {
    let op = Reshape { shape_attr: None, allowzero: false };
    let inputs = [fact(&i64s(&[4], &[1, 2, 3, 4])), fact(&i64s(&[2], &[2, -1]))];
    let outs = op.infer(&InferInputs::new(&inputs)).unwrap();
    let v = fold(&op, &inputs, &outs, RUN_LIMIT).unwrap();
    assert_eq!(v[0].shape(), &[2, 2]);
}

#[test]
fn folding_needs_every_input_known_and_outputs_within_the_limit() {
    let op = Gather { axis: 0 };
    let data = i64s(&[4], &[5, 6, 7, 8]);
    let idx = i64s(&[2], &[3, 0]);
    let inputs = [fact(&data), fact(&idx)];
    let outs = op.infer(&InferInputs::new(&inputs)).unwrap();
    assert_eq!(fold(&op, &inputs, &outs, RUN_LIMIT).unwrap()[0].to_i64_vec().unwrap(), vec![8, 5]);
    assert!(fold(&op, &inputs, &outs, 1).is_none());
    let unknown = [Some(Fact::known(DType::I64, &[4])), fact(&idx)];
    assert!(fold(&op, &unknown, &outs, RUN_LIMIT).is_none());
    // Known inputs the op does not fold exactly are left to its kernel.
    let exp = Unary { kind: UnaryKind::Exp };
    let inputs = [fact(&f32s(&[1], &[1.0]))];
    let outs = exp.infer(&InferInputs::new(&inputs)).unwrap();
    assert!(fold(&exp, &inputs, &outs, RUN_LIMIT).is_none());
    let t = Transpose { perm: None };
    let inputs = [fact(&i64s(&[1, 2], &[1, 2]))];
    let outs = t.infer(&InferInputs::new(&inputs)).unwrap();
    assert_eq!(fold(&t, &inputs, &outs, RUN_LIMIT).unwrap()[0].shape(), &[2, 1]);
}
