//! `QuantizeLinear`, `DequantizeLinear` and `DynamicQuantizeLinear` as
//! arithmetic, rounding, clipping and casts: 16-, 8-, 4- and 2-bit integers
//! and the float8/float4 formats (whose casts a backend must support).

use super::builder::{Builder, attrs, cast_to, decline, fact, input};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::{Attribute, Node, ValueId};
use crate::ops::Fact;
use crate::ops::quant::{DequantizeLinear, DynamicQuantizeLinear, QuantizeLinear, ScaleLayout};
use crate::tensor::Tensor;

fn known(f: &Fact) -> Result<Vec<usize>, OpError> {
    f.dims().ok_or_else(|| decline("a quantization with unknown shapes"))
}

/// The range of an integer quantized type.
fn int_range(d: DType) -> Option<(f32, f32)> {
    Some(match d {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::U16 => (0.0, 65535.0),
        DType::I16 => (-32768.0, 32767.0),
        DType::U4 => (0.0, 15.0),
        DType::I4 => (-8.0, 7.0),
        DType::U2 => (0.0, 3.0),
        DType::I2 => (-2.0, 1.0),
        _ => return None,
    })
}

/// Float quantized types: the quotient is cast into them, saturating as asked.
fn small_float(d: DType) -> bool {
    matches!(
        d,
        DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F4E2M1
    )
}

/// A scale or zero point broadcast against `x`: per-axis vectors reshaped
/// onto their axis, blocked ones repeated `block` times along it.
fn spread(b: &mut Builder, v: ValueId, layout: ScaleLayout, xd: &[usize], vd: &[usize]) -> ValueId {
    match layout {
        ScaleLayout::PerTensor => v,
        ScaleLayout::PerAxis { axis } => {
            let mut shape = vec![1i64; xd.len()];
            shape[axis] = -1;
            b.reshape(v, &shape)
        }
        ScaleLayout::Blocked { axis, block } => {
            let blocks = vd[axis];
            let u = b.unsqueeze(v, &[axis as i64 + 1]);
            let mut wide: Vec<i64> = vd.iter().map(|&d| d as i64).collect();
            wide.insert(axis + 1, block as i64);
            let wide = b.ints(&wide);
            let e = b.op0("Expand", &[u, wide]);
            let mut flat: Vec<i64> = xd.iter().map(|&d| d as i64).collect();
            flat[axis] = (blocks * block) as i64;
            let r = b.reshape(e, &flat);
            if blocks * block == xd[axis] {
                return r;
            }
            let (starts, ends, axes) =
                (b.ints(&[0]), b.ints(&[xd[axis] as i64]), b.ints(&[axis as i64]));
            b.op0("Slice", &[r, starts, ends, axes])
        }
    }
}

fn float_scalar(b: &mut Builder, v: f32) -> ValueId {
    b.constant(Tensor::scalar(v))
}

/// `y = clip(round(x / scale) + zero_point)` (float formats: a cast of
/// `x / scale + zero_point`), the quotient in the dtype numpy
/// would use (or `precision`), the rest in f32.
pub fn quantize(
    op: &QuantizeLinear,
    node: &Node,
    inputs: &[Option<Fact>],
    b: &mut Builder,
) -> Result<(), OpError> {
    let (xf, sf) = (fact(inputs, 0)?, fact(inputs, 1)?);
    let zp = node.input(2);
    let to = op.output(zp.and(inputs.get(2).and_then(Option::as_ref)).map(|f| f.dtype))?;
    let range = int_range(to);
    if range.is_none() && !small_float(to) {
        return Err(decline(&format!("QuantizeLinear to {to}")));
    }
    let (xd, sd) = (known(xf)?, known(sf)?);
    let layout = ScaleLayout::resolve(&xd, &sd, op.axis, op.block_size)?;
    let x = input(node, 0)?;
    let scale = input(node, 1)?;
    let calc = match op.precision {
        Some(p) => p,
        None if xf.dtype == sf.dtype && xf.dtype.is_float() => xf.dtype,
        None => DType::F32,
    };
    let xc = if xf.dtype == calc { x } else { b.cast(x, calc) };
    let s = spread(b, scale, layout, &xd, &sd);
    let s = if sf.dtype == calc { s } else { b.cast(s, calc) };
    let q = b.op0("Div", &[xc, s]);
    let q = if range.is_some() { b.op0("Round", &[q]) } else { q };
    let mut q = if calc == DType::F32 { q } else { b.cast(q, DType::F32) };
    if let Some(z) = zp {
        let zd = known(fact(inputs, 2)?)?;
        let z = spread(b, z, layout, &xd, &zd);
        let z = b.cast(z, DType::F32);
        q = b.op0("Add", &[q, z]);
    }
    let out = b.output(node, 0);
    let to_attr = |saturate: bool| {
        attrs(vec![
            ("to", Attribute::Int(i64::from(to.to_onnx()))),
            ("saturate", Attribute::Int(i64::from(saturate))),
        ])
    };
    match range {
        Some((lo, hi)) => {
            let (lo, hi) = (float_scalar(b, lo), float_scalar(b, hi));
            let clipped = b.op0("Clip", &[q, lo, hi]);
            b.emit("Cast", &[Some(clipped)], to_attr(true), vec![Some(out)]);
        }
        // Float formats round in the cast itself.
        None => b.emit("Cast", &[Some(q)], to_attr(op.saturate), vec![Some(out)]),
    }
    Ok(())
}

/// `y = (x - zero_point) · scale`: the difference exact in f32, the product
/// in the scale's dtype, as the reference computes it.
pub fn dequantize(
    op: &DequantizeLinear,
    node: &Node,
    inputs: &[Option<Fact>],
    b: &mut Builder,
) -> Result<(), OpError> {
    let (xf, sf) = (fact(inputs, 0)?, fact(inputs, 1)?);
    if !(int_range(xf.dtype).is_some() || small_float(xf.dtype) || xf.dtype == DType::I32) {
        return Err(decline(&format!("DequantizeLinear from {}", xf.dtype)));
    }
    let (xd, sd) = (known(xf)?, known(sf)?);
    let layout = ScaleLayout::resolve(&xd, &sd, op.axis, op.block_size)?;
    let x = input(node, 0)?;
    let scale = input(node, 1)?;
    let mut d = b.cast(x, DType::F32);
    if let Some(z) = node.input(2) {
        let zd = known(fact(inputs, 2)?)?;
        let z = spread(b, z, layout, &xd, &zd);
        let z = b.cast(z, DType::F32);
        d = b.op0("Sub", &[d, z]);
    }
    if sf.dtype != DType::F32 {
        d = b.cast(d, sf.dtype);
    }
    let s = spread(b, scale, layout, &xd, &sd);
    let to = op.output_dtype.unwrap_or(sf.dtype);
    let out = b.output(node, 0);
    if to == sf.dtype {
        b.emit("Mul", &[Some(d), Some(s)], attrs(vec![]), vec![Some(out)]);
    } else {
        let y = b.op0("Mul", &[d, s]);
        b.emit("Cast", &[Some(y)], cast_to(to), vec![Some(out)]);
    }
    Ok(())
}

/// The range of `x` widened to include 0 gives a uint8 scale and zero point;
/// `x` is then quantized with them.
pub fn dynamic_quantize(
    _op: &DynamicQuantizeLinear,
    node: &Node,
    inputs: &[Option<Fact>],
    b: &mut Builder,
) -> Result<(), OpError> {
    let xf = fact(inputs, 0)?;
    if xf.dtype != DType::F32 {
        return Err(decline(&format!("DynamicQuantizeLinear of {}", xf.dtype)));
    }
    let x = input(node, 0)?;
    let zero = float_scalar(b, 0.0);
    let lo = b.reduce_all("ReduceMin", x);
    let lo = b.op0("Min", &[lo, zero]);
    let hi = b.reduce_all("ReduceMax", x);
    let hi = b.op0("Max", &[hi, zero]);
    let range = b.op0("Sub", &[hi, lo]);
    let qmax = float_scalar(b, 255.0);
    let scale = b.output(node, 1);
    b.emit("Div", &[Some(range), Some(qmax)], attrs(vec![]), vec![Some(scale)]);
    let shift = b.op0("Div", &[lo, scale]);
    let zp = b.op0("Sub", &[zero, shift]);
    let zp = b.op0("Round", &[zp]);
    let zp = b.op0("Clip", &[zp, zero, qmax]);
    let zp_out = b.output(node, 2);
    b.emit("Cast", &[Some(zp)], cast_to(DType::U8), vec![Some(zp_out)]);
    let q = b.op0("Div", &[x, scale]);
    let q = b.op0("Round", &[q]);
    let q = b.op0("Add", &[q, zp]);
    let q = b.op0("Clip", &[q, zero, qmax]);
    let y = b.output(node, 0);
    b.emit("Cast", &[Some(q)], cast_to(DType::U8), vec![Some(y)]);
    Ok(())
}
