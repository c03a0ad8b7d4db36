//! The recurrent family: `RNN`, `GRU` and `LSTM`, with every direction,
//! layout, activation list, clip, peephole and sequence-length option; and
//! onnxruntime's `DynamicQuantizeLSTM` (an LSTM with 8-bit weights).

use super::defaults;
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Node;
use crate::shape::{Dim, Shape};

/// Which cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell {
    /// `H = f(X W^T + H R^T + b)`.
    Rnn,
    /// Gated recurrent unit (gates z, r, h).
    Gru {
        /// Apply the reset gate after multiplying by R (onnxruntime's cuDNN-style variant).
        linear_before_reset: bool,
    },
    /// Long short-term memory (gates i, o, f, c).
    Lstm {
        /// Couple the forget gate to the input gate: `f = 1 - i`.
        input_forget: bool,
    },
}

impl Cell {
    /// Gates per direction (rows of W and R, in units of the hidden size).
    pub fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 3,
            Cell::Lstm { .. } => 4,
        }
    }

    /// Activation functions per direction.
    pub fn activations(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 2,
            Cell::Lstm { .. } => 3,
        }
    }
}

/// An activation function of a recurrent cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// `max(0, x)`.
    Relu,
    /// `tanh(x)`.
    Tanh,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `alpha x + beta`.
    Affine(f64, f64),
    /// `x` if positive, else `alpha x`.
    LeakyRelu(f64),
    /// `x` if above `alpha`, else 0.
    ThresholdedRelu(f64),
    /// `alpha tanh(beta x)`.
    ScaledTanh(f64, f64),
    /// `clamp(alpha x + beta, 0, 1)`.
    HardSigmoid(f64, f64),
    /// `x` if positive, else `alpha (e^x - 1)`.
    Elu(f64),
    /// `x / (1 + |x|)`.
    Softsign,
    /// `ln(1 + e^x)`.
    Softplus,
}

impl Activation {
    /// Applies the function.
    pub fn apply(self, x: f64) -> f64 {
        match self {
            Activation::Relu => x.max(0.0),
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Activation::Affine(a, b) => a * x + b,
            Activation::LeakyRelu(a) => {
                if x < 0.0 {
                    a * x
                } else {
                    x
                }
            }
            Activation::ThresholdedRelu(a) => {
                if x > a {
                    x
                } else {
                    0.0
                }
            }
            Activation::ScaledTanh(a, b) => a * (b * x).tanh(),
            Activation::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
            Activation::Elu(a) => {
                if x < 0.0 {
                    a * (x.exp() - 1.0)
                } else {
                    x
                }
            }
            Activation::Softsign => x / (1.0 + x.abs()),
            Activation::Softplus => x.exp().ln_1p(),
        }
    }

    /// Parses a name, taking `alpha` and `beta` from the lists when the
    /// function uses them (onnxruntime's order: only such functions consume values).
    fn parse(
        name: &str,
        alphas: &mut impl Iterator<Item = f32>,
        betas: &mut impl Iterator<Item = f32>,
    ) -> Result<Activation, OpError> {
        let mut a = |d: f64| alphas.next().map_or(d, f64::from);
        let lower = name.to_ascii_lowercase();
        Ok(match lower.as_str() {
            "relu" => Activation::Relu,
            "tanh" => Activation::Tanh,
            "sigmoid" => Activation::Sigmoid,
            "affine" => Activation::Affine(a(1.0), betas.next().map_or(0.0, f64::from)),
            "leakyrelu" => Activation::LeakyRelu(a(f64::from(defaults::LEAKY_RELU_ALPHA))),
            "thresholdedrelu" => {
                Activation::ThresholdedRelu(a(f64::from(defaults::THRESHOLDED_RELU_ALPHA)))
            }
            "scaledtanh" => Activation::ScaledTanh(a(1.0), betas.next().map_or(1.0, f64::from)),
            "hardsigmoid" => Activation::HardSigmoid(
                a(f64::from(defaults::HARD_SIGMOID_ALPHA)),
                betas.next().map_or(f64::from(defaults::HARD_SIGMOID_BETA), f64::from),
            ),
            "elu" => Activation::Elu(a(f64::from(defaults::ELU_ALPHA))),
            "softsign" => Activation::Softsign,
            "softplus" => Activation::Softplus,
            _ => {
                return Err(OpError::BadAttribute {
                    name: "activations".into(),
                    reason: format!("unknown activation '{name}'"),
                });
            }
        })
    }
}

/// Which way(s) the sequence is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// First to last.
    Forward,
    /// Last to first.
    Reverse,
    /// Both, as two directions of the outputs.
    Bidirectional,
}

/// `RNN`, `GRU` or `LSTM`.
#[derive(Debug, Clone)]
pub struct Recurrent {
    /// The cell.
    pub cell: Cell,
    /// The direction(s).
    pub direction: Direction,
    /// Hidden size.
    pub hidden: usize,
    /// Activations: [`Cell::activations`] per direction, forward first.
    pub activations: Vec<Activation>,
    /// Clip of the gates' pre-activations.
    pub clip: Option<f64>,
    /// `layout = 1`: batch-major X, Y, and states.
    pub batch_major: bool,
}

impl Recurrent {
    /// Number of directions.
    pub fn directions(&self) -> usize {
        if self.direction == Direction::Bidirectional { 2 } else { 1 }
    }

    /// Whether direction `d` reads the sequence backwards.
    pub fn reversed(&self, d: usize) -> bool {
        self.direction == Direction::Reverse || d == 1
    }
}

impl Op for Recurrent {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        if !x.dtype.is_float() {
            return Err(OpError::InputDType {
                index: 0,
                dtype: x.dtype,
                expected: "a float type".into(),
            });
        }
        let outputs = if matches!(self.cell, Cell::Lstm { .. }) { 3 } else { 2 };
        let Some(s) = &x.shape else {
            return Ok((0..outputs).map(|_| Fact::unranked(x.dtype)).collect());
        };
        if s.rank() != 3 {
            return Err(OpError::Shape(format!("X must be rank 3, not {}", s.rank())));
        }
        let (seq, batch) = if self.batch_major {
            (s.0[1].clone(), s.0[0].clone())
        } else {
            (s.0[0].clone(), s.0[1].clone())
        };
        let (d, h) = (Dim::Known(self.directions()), Dim::Known(self.hidden));
        let (y, state) = if self.batch_major {
            (vec![batch.clone(), seq, d.clone(), h.clone()], vec![batch, d, h])
        } else {
            (vec![seq, d.clone(), batch.clone(), h.clone()], vec![d, batch, h])
        };
        let mut out = vec![Fact::new(x.dtype, Shape(y)), Fact::new(x.dtype, Shape(state.clone()))];
        if outputs == 3 {
            out.push(Fact::new(x.dtype, Shape(state)));
        }
        Ok(out)
    }
}

fn parse(n: &Node, cell: Cell) -> Result<Recurrent, OpError> {
    let max_inputs = if matches!(cell, Cell::Lstm { .. }) { 8 } else { 6 };
    check_inputs(n, 3, max_inputs)?;
    parse_attributes(n, cell)
}

fn parse_attributes(n: &Node, cell: Cell) -> Result<Recurrent, OpError> {
    let a = &n.attrs;
    let direction = match a.string_or("direction", "forward".into())?.as_str() {
        "forward" => Direction::Forward,
        "reverse" => Direction::Reverse,
        "bidirectional" => Direction::Bidirectional,
        other => {
            return Err(OpError::BadAttribute {
                name: "direction".into(),
                reason: format!("'{other}'"),
            });
        }
    };
    let hidden = a.req_int("hidden_size")?;
    let hidden = usize::try_from(hidden).ok().filter(|&h| h > 0).ok_or_else(|| {
        OpError::BadAttribute { name: "hidden_size".into(), reason: format!("{hidden}") }
    })?;
    let dirs = if direction == Direction::Bidirectional { 2 } else { 1 };
    let defaults: &[&str] = match cell {
        Cell::Rnn => &["Tanh"],
        Cell::Gru { .. } => &["Sigmoid", "Tanh"],
        Cell::Lstm { .. } => &["Sigmoid", "Tanh", "Tanh"],
    };
    let names: Vec<String> = match a.strings("activations")? {
        Some(v) => v,
        None => {
            defaults.iter().cycle().take(defaults.len() * dirs).map(|s| s.to_string()).collect()
        }
    };
    if names.len() != cell.activations() * dirs {
        return Err(OpError::BadAttribute {
            name: "activations".into(),
            reason: format!(
                "{} functions for {} per direction × {dirs}",
                names.len(),
                cell.activations()
            ),
        });
    }
    let mut alphas = a.floats("activation_alpha")?.unwrap_or_default().into_iter();
    let mut betas = a.floats("activation_beta")?.unwrap_or_default().into_iter();
    let activations = names
        .iter()
        .map(|s| Activation::parse(s, &mut alphas, &mut betas))
        .collect::<Result<_, _>>()?;
    Ok(Recurrent {
        cell,
        direction,
        hidden,
        activations,
        clip: a.float("clip")?.map(f64::from),
        batch_major: a.int_or("layout", 0)? != 0,
    })
}

/// onnxruntime's `DynamicQuantizeLSTM` (`com.microsoft`): an `LSTM` whose W
/// `[dirs, input, 4·hidden]` and R `[dirs, hidden, 4·hidden]` (transposed
/// against LSTM's) are int8 or uint8 with scales and zero points (inputs 8 to
/// 11: W_scale, W_zero_point, R_scale, R_zero_point; one per direction, or
/// per output channel `[dirs, 4·hidden]`).
#[derive(Debug, Clone)]
pub struct DynamicQuantizeLstm {
    /// The LSTM's attributes.
    pub lstm: Recurrent,
}

impl Op for DynamicQuantizeLstm {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        for i in [1, 2, 9, 11] {
            let f = inputs.get(i)?;
            if !matches!(f.dtype, DType::I8 | DType::U8) {
                return Err(OpError::InputDType {
                    index: i,
                    dtype: f.dtype,
                    expected: "int8 or uint8".into(),
                });
            }
        }
        for i in [8, 10] {
            let f = inputs.get(i)?;
            if f.dtype != DType::F32 {
                return Err(OpError::InputDType {
                    index: i,
                    dtype: f.dtype,
                    expected: "float".into(),
                });
            }
        }
        self.lstm.infer(inputs)
    }
}

/// Registers RNN, GRU and LSTM, and onnxruntime's DynamicQuantizeLSTM.
pub fn register_all(r: &mut OpRegistry) {
    r.register_in(crate::graph::MICROSOFT_DOMAIN, "DynamicQuantizeLSTM", |n| {
        check_inputs(n, 12, 12)?;
        let input_forget = n.attrs.int_or("input_forget", 0)? != 0;
        Ok(Box::new(DynamicQuantizeLstm {
            lstm: parse_attributes(n, Cell::Lstm { input_forget })?,
        }))
    });
    r.register("RNN", |n| Ok(Box::new(parse(n, Cell::Rnn)?)));
    r.register("GRU", |n| {
        let lbr = n.attrs.int_or("linear_before_reset", 0)? != 0;
        Ok(Box::new(parse(n, Cell::Gru { linear_before_reset: lbr })?))
    });
    r.register("LSTM", |n| {
        let input_forget = n.attrs.int_or("input_forget", 0)? != 0;
        Ok(Box::new(parse(n, Cell::Lstm { input_forget })?))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_activations_that_take_parameters_consume_them() {
        let mut alphas = vec![0.5f32, 2.0].into_iter();
        let mut betas = vec![0.25f32].into_iter();
        let names = ["Sigmoid", "LeakyRelu", "Tanh", "ScaledTanh"];
        let parsed: Vec<Activation> =
            names.iter().map(|n| Activation::parse(n, &mut alphas, &mut betas).unwrap()).collect();
        assert_eq!(parsed[1], Activation::LeakyRelu(0.5));
        assert_eq!(parsed[3], Activation::ScaledTanh(2.0, 0.25));
        assert_eq!(Activation::HardSigmoid(0.2, 0.5).apply(10.0), 1.0);
    }
}
