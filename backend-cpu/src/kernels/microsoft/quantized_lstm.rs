//! `com.microsoft` `DynamicQuantizeLSTM`: the 8-bit W and R are dequantized
//! (and transposed to LSTM's `[dirs, 4·hidden, rows]` layout), then the layer
//! runs as a float LSTM. onnxruntime also quantizes X and H to uint8 at run
//! time; the float layer differs from it by about that quantization error.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::recurrent::DynamicQuantizeLstm;

use super::super::attention::store;
use std::borrow::Cow;

use super::super::recurrent::{Layer, run_layer, sequence_lens};
use super::super::{CpuKernel, KernelIo, KernelRegistry};
use super::{kernel_err, load_f32, load_opt};

/// Quantized `[dirs, rows, cols]` (cols = 4·hidden output channels) with
/// scales and zero points per direction or per `(direction, channel)`,
/// dequantized and transposed to `[dirs, cols, rows]`.
fn dequantize(
    io: &KernelIo,
    (q, scale, zp): (usize, usize, usize),
    (dirs, rows, cols): (usize, usize, usize),
) -> Result<Vec<f64>, EpError> {
    let view = io.in_view(q)?;
    if view.shape != [dirs, rows, cols] {
        return Err(kernel_err(format!(
            "DynamicQuantizeLSTM: weights {:?}, expected {:?}",
            view.shape,
            [dirs, rows, cols]
        )));
    }
    let values: Vec<f64> = match view.dtype {
        DType::I8 => io.input::<i8>(q)?.iter().map(|&v| f64::from(v)).collect(),
        _ => io.input::<u8>(q)?.iter().map(|&v| f64::from(v)).collect(),
    };
    let zero: Vec<f64> = match io.in_view(zp)?.dtype {
        DType::I8 => io.input::<i8>(zp)?.iter().map(|&v| f64::from(v)).collect(),
        _ => io.input::<u8>(zp)?.iter().map(|&v| f64::from(v)).collect(),
    };
    let scales = load_f32(io, scale)?;
    let per_channel = match (scales.len(), zero.len()) {
        (s, z) if s == dirs && z == dirs => false,
        (s, z) if s == dirs * cols && z == dirs * cols => true,
        (s, z) => {
            return Err(kernel_err(format!(
                "DynamicQuantizeLSTM: {s} scales and {z} zero points for {dirs} directions of {cols} channels"
            )));
        }
    };
    let mut out = vec![0f64; dirs * rows * cols];
    for d in 0..dirs {
        for r in 0..rows {
            for c in 0..cols {
                let p = if per_channel { d * cols + c } else { d };
                let v = values[(d * rows + r) * cols + c];
                out[(d * cols + c) * rows + r] = (v - zero[p]) * f64::from(scales[p]);
            }
        }
    }
    Ok(out)
}

struct QuantizedLstmKernel {
    op: DynamicQuantizeLstm,
}

impl CpuKernel for QuantizedLstmKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let r = &self.op.lstm;
        let xs = io.in_view(0)?.shape.clone();
        let [a, b, input] = xs[..] else {
            return Err(kernel_err(format!("DynamicQuantizeLSTM: X {xs:?} is not 3-D")));
        };
        let (seq, batch) = if r.batch_major { (b, a) } else { (a, b) };
        let (dirs, h) = (r.directions(), r.hidden);
        let f64s = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<f64>>();
        let opt = |i: usize, len: usize| -> Result<Option<Cow<'static, [f64]>>, EpError> {
            match load_opt(io, i)? {
                Some(v) if v.len() != len => Err(kernel_err(format!(
                    "DynamicQuantizeLSTM: input {i} has {} elements, expected {len}",
                    v.len()
                ))),
                v => Ok(v.map(|v| Cow::Owned(f64s(v)))),
            }
        };
        let layer = Layer {
            x: Cow::Owned(f64s(load_f32(io, 0)?)),
            w: Cow::Owned(dequantize(io, (1, 8, 9), (dirs, input, 4 * h))?),
            r: Cow::Owned(dequantize(io, (2, 10, 11), (dirs, h, 4 * h))?),
            bias: opt(3, dirs * 8 * h)?.unwrap_or_else(|| Cow::Owned(vec![0.0; dirs * 8 * h])),
            lens: sequence_lens(io, 4, seq, batch)?,
            h0: opt(5, dirs * batch * h)?,
            c0: opt(6, dirs * batch * h)?,
            peep: opt(7, dirs * 3 * h)?,
        };
        let outputs = run_layer(r, &xs, &layer);
        for (o, v) in outputs.iter().enumerate() {
            if io.has_output(o) {
                let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                store(io, o, &v, "DynamicQuantizeLSTM")?;
            }
        }
        Ok(())
    }
}

fn build(s: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    Ok(Box::new(QuantizedLstmKernel { op: s.op_as::<DynamicQuantizeLstm>()?.clone() }))
}

/// Registers `DynamicQuantizeLSTM` in `com.microsoft`.
pub(super) fn register_all(r: &mut KernelRegistry) {
    r.register_in(MICROSOFT_DOMAIN, "DynamicQuantizeLSTM", build);
}
