//! String ops, run on the host (no device holds string tensors): StringConcat,
//! StringSplit, StringNormalizer, RegexFullMatch, Equal over strings, and
//! `ai.onnx.ml` LabelEncoder (every key and value type). Each implements
//! [`Op::eval_host`]; the executor calls it with the inputs read back.

use std::sync::Arc;

use super::broadcast::broadcast_fact;
use super::domains::ML_DOMAIN;
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::{Attribute, Node};
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;

fn strings_in(inputs: &[Option<Tensor>], i: usize) -> Result<&[String], OpError> {
    let t = inputs.get(i).and_then(Option::as_ref).ok_or(OpError::MissingInput(i))?;
    t.strings().map_err(|e| e.into())
}

fn tensor_in(inputs: &[Option<Tensor>], i: usize) -> Result<&Tensor, OpError> {
    inputs.get(i).and_then(Option::as_ref).ok_or(OpError::MissingInput(i))
}

fn require_strings(f: &Fact, index: usize) -> Result<(), OpError> {
    if f.dtype != DType::String {
        return Err(OpError::InputDType { index, dtype: f.dtype, expected: "string".into() });
    }
    Ok(())
}

/// The broadcast dims, and for each of its elements the index in each operand.
type Pairs = (Vec<usize>, Vec<(usize, usize)>);

/// For each element of the broadcast of `a` and `b`, its index in each.
fn broadcast_pairs(a: &[usize], b: &[usize]) -> Result<Pairs, OpError> {
    let rank = a.len().max(b.len());
    let pad = |d: &[usize]| {
        let mut v = vec![1; rank - d.len()];
        v.extend_from_slice(d);
        v
    };
    let (a, b) = (pad(a), pad(b));
    let mut out = Vec::with_capacity(rank);
    for (&x, &y) in a.iter().zip(&b) {
        out.push(match (x, y) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(OpError::Shape(format!("cannot broadcast {a:?} with {b:?}"))),
        });
    }
    let strides = |d: &[usize]| {
        let mut s = vec![0; rank];
        let mut acc = 1;
        for i in (0..rank).rev() {
            s[i] = if d[i] == 1 { 0 } else { acc };
            acc *= d[i];
        }
        s
    };
    let (sa, sb) = (strides(&a), strides(&b));
    let n: usize = out.iter().product();
    let mut pairs = Vec::with_capacity(n);
    let mut pos = vec![0usize; rank];
    for _ in 0..n {
        let ia = pos.iter().zip(&sa).map(|(p, s)| p * s).sum();
        let ib = pos.iter().zip(&sb).map(|(p, s)| p * s).sum();
        pairs.push((ia, ib));
        for d in (0..rank).rev() {
            pos[d] += 1;
            if pos[d] < out[d] {
                break;
            }
            pos[d] = 0;
        }
    }
    Ok((out, pairs))
}

/// Elementwise string equality with broadcasting (the `Equal` op on strings).
///
/// # Errors
/// Non-string or unbroadcastable inputs.
pub fn strings_equal(inputs: &[Option<Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let (a, b) = (tensor_in(inputs, 0)?, tensor_in(inputs, 1)?);
    let (sa, sb) = (strings_in(inputs, 0)?, strings_in(inputs, 1)?);
    let (dims, pairs) = broadcast_pairs(a.shape(), b.shape())?;
    let v: Vec<bool> = pairs.iter().map(|&(i, j)| sa[i] == sb[j]).collect();
    Ok(vec![Tensor::from_bools(dims, &v)?])
}

/// `StringConcat(X, Y)`: elementwise concatenation with broadcasting.
#[derive(Debug, Clone)]
pub struct StringConcat;

impl Op for StringConcat {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (a, b) = (inputs.get(0)?, inputs.get(1)?);
        require_strings(a, 0)?;
        require_strings(b, 1)?;
        Ok(vec![broadcast_fact(DType::String, &[a, b])?])
    }

    fn runs_on_host(&self, _inputs: &[Option<Fact>]) -> bool {
        true
    }

    fn eval_host(&self, inputs: &[Option<Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (a, b) = (tensor_in(inputs, 0)?, tensor_in(inputs, 1)?);
        let (sa, sb) = (strings_in(inputs, 0)?, strings_in(inputs, 1)?);
        let (dims, pairs) = broadcast_pairs(a.shape(), b.shape())?;
        let v = pairs.iter().map(|&(i, j)| format!("{}{}", sa[i], sb[j])).collect();
        Ok(vec![Tensor::from_strings(dims, v)?])
    }
}

/// `StringSplit(X)`: substrings padded with `""` along a new last axis, and their counts.
#[derive(Debug, Clone)]
pub struct StringSplit {
    /// The separator; `None` (or empty) splits on runs of whitespace.
    pub delimiter: Option<String>,
    /// At most this many splits per element.
    pub maxsplit: Option<usize>,
}

impl StringSplit {
    fn split(&self, s: &str) -> Vec<String> {
        let limit = self.maxsplit.map_or(usize::MAX, |m| m.saturating_add(1));
        match self.delimiter.as_deref().filter(|d| !d.is_empty()) {
            Some(d) => s.splitn(limit, d).map(str::to_string).collect(),
            None => {
                let mut parts = Vec::new();
                let mut rest = s.trim_start();
                while !rest.is_empty() {
                    if parts.len() + 1 == limit {
                        parts.push(rest.trim_end().to_string());
                        break;
                    }
                    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                    parts.push(rest[..end].to_string());
                    rest = rest[end..].trim_start();
                }
                parts
            }
        }
    }
}

impl Op for StringSplit {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        require_strings(x, 0)?;
        let (y, z) = match &x.shape {
            Some(s) => {
                let mut d = s.0.clone();
                let z = Fact::new(DType::I64, Shape(d.clone()));
                d.push(Dim::Unknown);
                (Fact::new(DType::String, Shape(d)), z)
            }
            None => (Fact::unranked(DType::String), Fact::unranked(DType::I64)),
        };
        Ok(vec![y, z])
    }

    fn runs_on_host(&self, _inputs: &[Option<Fact>]) -> bool {
        true
    }

    fn eval_host(&self, inputs: &[Option<Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = tensor_in(inputs, 0)?;
        let parts: Vec<Vec<String>> =
            strings_in(inputs, 0)?.iter().map(|s| self.split(s)).collect();
        let width = parts.iter().map(Vec::len).max().unwrap_or(0);
        let counts: Vec<i64> = parts.iter().map(|p| p.len() as i64).collect();
        let mut flat = Vec::with_capacity(parts.len() * width);
        for mut p in parts {
            p.resize(width, String::new());
            flat.extend(p);
        }
        let mut dims = x.shape().to_vec();
        let z = Tensor::from_vec(dims.clone(), counts)?;
        dims.push(width);
        Ok(vec![Tensor::from_strings(dims, flat)?, z])
    }
}

/// Case change of `StringNormalizer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseChange {
    /// Leave as is.
    None,
    /// Lowercase.
    Lower,
    /// Uppercase.
    Upper,
}

/// `StringNormalizer(X)`: drops stopwords, then changes case; `[C]` or `[1, C]` input.
#[derive(Debug, Clone)]
pub struct StringNormalizer {
    /// The case change applied to what remains.
    pub case: CaseChange,
    /// Whether stopwords match case-sensitively.
    pub case_sensitive: bool,
    /// Words to remove.
    pub stopwords: Vec<String>,
}

impl Op for StringNormalizer {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        require_strings(x, 0)?;
        Ok(vec![match x.rank() {
            Some(1) => Fact::new(DType::String, Shape(vec![Dim::Unknown])),
            Some(2) => Fact::new(DType::String, Shape(vec![Dim::Known(1), Dim::Unknown])),
            Some(r) => return Err(OpError::Shape(format!("expected [C] or [1, C], got rank {r}"))),
            None => Fact::unranked(DType::String),
        }])
    }

    fn runs_on_host(&self, _inputs: &[Option<Fact>]) -> bool {
        true
    }

    fn eval_host(&self, inputs: &[Option<Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = tensor_in(inputs, 0)?;
        let rank = x.shape().len();
        if !(rank == 1 || (rank == 2 && x.shape()[0] == 1)) {
            return Err(OpError::Shape(format!("expected [C] or [1, C], got {:?}", x.shape())));
        }
        let stop = |s: &str| {
            self.stopwords.iter().any(|w| {
                if self.case_sensitive { w == s } else { w.to_lowercase() == s.to_lowercase() }
            })
        };
        let mut kept: Vec<String> = strings_in(inputs, 0)?
            .iter()
            .filter(|s| !stop(s))
            .map(|s| match self.case {
                CaseChange::None => s.clone(),
                CaseChange::Lower => s.to_lowercase(),
                CaseChange::Upper => s.to_uppercase(),
            })
            .collect();
        if kept.is_empty() {
            kept.push(String::new());
        }
        let dims = if rank == 1 { vec![kept.len()] } else { vec![1, kept.len()] };
        Ok(vec![Tensor::from_strings(dims, kept)?])
    }
}

/// `RegexFullMatch(X)`: whether each string matches `pattern` entirely.
#[derive(Debug, Clone)]
pub struct RegexFullMatch {
    /// The pattern, anchored at both ends.
    pub regex: Arc<regex::Regex>,
}

impl Op for RegexFullMatch {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        require_strings(x, 0)?;
        Ok(vec![x.with_dtype(DType::Bool)])
    }

    fn runs_on_host(&self, _inputs: &[Option<Fact>]) -> bool {
        true
    }

    fn eval_host(&self, inputs: &[Option<Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = tensor_in(inputs, 0)?;
        let v: Vec<bool> = strings_in(inputs, 0)?.iter().map(|s| self.regex.is_match(s)).collect();
        Ok(vec![Tensor::from_bools(x.shape().to_vec(), &v)?])
    }
}

/// `ai.onnx.ml` `LabelEncoder`: maps each element through parallel key and value lists.
#[derive(Debug, Clone)]
pub struct LabelEncoder {
    /// The keys, as a tensor of the input's dtype.
    pub keys: Tensor,
    /// The values, as a tensor of the output's dtype.
    pub values: Tensor,
    /// The value for keys not found (one element of the values' dtype).
    pub default: Tensor,
}

/// One element of a tensor as a comparable key (floats by bits, NaN equal to NaN).
fn key_at(t: &Tensor, i: usize) -> Result<String, OpError> {
    Ok(match t.dtype() {
        DType::String => t.strings()?[i].clone(),
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => {
            let v = t.to_f64_vec()?[i];
            if v.is_nan() { "nan".into() } else { format!("f{v}") }
        }
        _ => format!("i{}", t.to_i64_vec()?[i]),
    })
}

/// Picks elements `idx` of `t` (`None` takes element 0 of `default`).
fn gather(
    t: &Tensor,
    default: &Tensor,
    idx: &[Option<usize>],
    dims: Vec<usize>,
) -> Result<Tensor, OpError> {
    if t.dtype() == DType::String {
        let (s, d) = (t.strings()?, default.strings()?);
        let v = idx.iter().map(|i| i.map_or_else(|| d[0].clone(), |i| s[i].clone())).collect();
        return Ok(Tensor::from_strings(dims, v)?);
    }
    let eb = t
        .dtype()
        .byte_size(1)
        .ok_or_else(|| OpError::Unsupported(format!("{} values", t.dtype())))?;
    let (s, d) = (t.bytes()?, default.bytes()?);
    let mut out = Vec::with_capacity(idx.len() * eb);
    for i in idx {
        match i {
            Some(i) => out.extend_from_slice(&s[i * eb..(i + 1) * eb]),
            None => out.extend_from_slice(&d[..eb]),
        }
    }
    Ok(Tensor::from_bytes(t.dtype(), dims, out.into())?)
}

impl Op for LabelEncoder {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        if x.dtype != self.keys.dtype() {
            return Err(OpError::InputDType {
                index: 0,
                dtype: x.dtype,
                expected: self.keys.dtype().to_string(),
            });
        }
        Ok(vec![x.with_dtype(self.values.dtype())])
    }

    fn runs_on_host(&self, _inputs: &[Option<Fact>]) -> bool {
        true
    }

    fn eval_host(&self, inputs: &[Option<Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = tensor_in(inputs, 0)?;
        let mut map = std::collections::HashMap::new();
        for i in 0..self.keys.numel() {
            map.entry(key_at(&self.keys, i)?).or_insert(i);
        }
        let idx: Vec<Option<usize>> = (0..x.numel())
            .map(|i| Ok(map.get(&key_at(x, i)?).copied()))
            .collect::<Result<_, OpError>>()?;
        Ok(vec![gather(&self.values, &self.default, &idx, x.shape().to_vec())?])
    }
}

fn label_encoder(n: &Node) -> Result<LabelEncoder, OpError> {
    let attr = |name: &str| n.attrs.get(name);
    let list = |prefix: &str| -> Result<Option<Tensor>, OpError> {
        Ok(
            match (
                attr(&format!("{prefix}_strings")),
                attr(&format!("{prefix}_int64s")),
                attr(&format!("{prefix}_floats")),
                attr(&format!("{prefix}_tensor")),
            ) {
                (Some(Attribute::Strings(s)), ..) => {
                    Some(Tensor::from_strings(vec![s.len()], s.clone())?)
                }
                (_, Some(Attribute::Ints(v)), ..) => {
                    Some(Tensor::from_vec(vec![v.len()], v.clone())?)
                }
                (_, _, Some(Attribute::Floats(v)), _) => {
                    Some(Tensor::from_vec(vec![v.len()], v.clone())?)
                }
                (_, _, _, Some(Attribute::Tensor(t))) => Some(t.reshaped(vec![t.numel()])?),
                _ => None,
            },
        )
    };
    let missing = |name: &str| OpError::BadAttribute {
        name: name.into(),
        reason: "one of the keys_*/values_* attributes is required".into(),
    };
    let keys = list("keys")?.ok_or_else(|| missing("keys_*"))?;
    let values = list("values")?.ok_or_else(|| missing("values_*"))?;
    if keys.numel() != values.numel() {
        return Err(OpError::BadAttribute {
            name: "values_*".into(),
            reason: format!("{} keys but {} values", keys.numel(), values.numel()),
        });
    }
    let default = match (values.dtype(), attr("default_tensor")) {
        (_, Some(Attribute::Tensor(t))) if t.numel() >= 1 && t.dtype() == values.dtype() => {
            t.clone()
        }
        (DType::String, _) => Tensor::from_strings(
            vec![1],
            vec![n.attrs.string_or("default_string", "_Unused".into())?],
        )?,
        (DType::I64, _) => Tensor::from_vec(vec![1], vec![n.attrs.int_or("default_int64", -1)?])?,
        (DType::F32, _) => {
            Tensor::from_vec(vec![1], vec![n.attrs.float_or("default_float", -0.0)?])?
        }
        (d, _) => Tensor::zeros(d, vec![1]),
    };
    Ok(LabelEncoder { keys, values, default })
}

/// Registers the string ops and LabelEncoder.
pub fn register_all(r: &mut OpRegistry) {
    r.register("StringConcat", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(StringConcat))
    });
    r.register("StringSplit", |n| {
        check_inputs(n, 1, 1)?;
        let maxsplit = n.attrs.int("maxsplit")?.map(|m| usize::try_from(m).unwrap_or(0));
        Ok(Box::new(StringSplit { delimiter: n.attrs.string("delimiter")?, maxsplit }))
    });
    r.register("StringNormalizer", |n| {
        check_inputs(n, 1, 1)?;
        let case = match n.attrs.string_or("case_change_action", "NONE".into())?.as_str() {
            "NONE" => CaseChange::None,
            "LOWER" => CaseChange::Lower,
            "UPPER" => CaseChange::Upper,
            other => {
                return Err(OpError::BadAttribute {
                    name: "case_change_action".into(),
                    reason: format!("'{other}' is not NONE, LOWER or UPPER"),
                });
            }
        };
        Ok(Box::new(StringNormalizer {
            case,
            case_sensitive: n.attrs.flag_or("is_case_sensitive", false)?,
            stopwords: n.attrs.strings_or("stopwords", vec![])?,
        }))
    });
    r.register("RegexFullMatch", |n| {
        check_inputs(n, 1, 1)?;
        let pattern = n.attrs.req_string("pattern")?;
        let regex = regex::Regex::new(&format!("^(?:{pattern})$"))
            .map_err(|e| OpError::BadAttribute { name: "pattern".into(), reason: e.to_string() })?;
        Ok(Box::new(RegexFullMatch { regex: Arc::new(regex) }))
    });
    r.register_in(ML_DOMAIN, "LabelEncoder", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(label_encoder(n)?))
    });
}
