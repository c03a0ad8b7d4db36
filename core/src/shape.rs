//! Shapes with symbolic dimensions, as ONNX `TensorShapeProto` describes them.

use std::fmt;
use std::sync::Arc;

/// One dimension: a known size, a named symbol (`batch`, `seq_len`) or unknown.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A fixed size.
    Known(usize),
    /// A named symbolic size; two equal names denote the same size within one model.
    Sym(Arc<str>),
    /// No information.
    Unknown,
}

impl Dim {
    /// The size, when known.
    pub fn known(&self) -> Option<usize> {
        match self {
            Dim::Known(n) => Some(*n),
            _ => None,
        }
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Self {
        Dim::Known(n)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// A tensor shape whose dimensions may be symbolic.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    /// A shape whose every dimension is known.
    pub fn known(dims: &[usize]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::Known(d)).collect())
    }

    /// A shape of `rank` unknown dimensions.
    pub fn unknown(rank: usize) -> Shape {
        Shape(vec![Dim::Unknown; rank])
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The concrete dimensions, if every one is known.
    pub fn concrete(&self) -> Option<Vec<usize>> {
        self.0.iter().map(Dim::known).collect()
    }

    /// The element count, if every dimension is known.
    pub fn numel(&self) -> Option<usize> {
        self.concrete().map(|d| d.iter().product())
    }

    /// The dimensions.
    pub fn dims(&self) -> &[Dim] {
        &self.0
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Formats a concrete shape as `[1, 3, 224, 224]`.
pub fn fmt_dims(dims: &[usize]) -> String {
    format!("{dims:?}")
}

/// Row-major strides, in elements, for a concrete shape.
pub fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// Normalizes a possibly negative axis against `rank`; `None` when out of range.
pub fn normalize_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_are_row_major() {
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(strides(&[]), Vec::<usize>::new());
    }

    #[test]
    fn negative_axes_count_from_the_end() {
        assert_eq!(normalize_axis(-1, 3), Some(2));
        assert_eq!(normalize_axis(3, 3), None);
        assert_eq!(normalize_axis(-4, 3), None);
    }

    #[test]
    fn symbolic_shapes_print_their_names() {
        let s = Shape(vec![Dim::Sym("batch".into()), Dim::Known(3), Dim::Unknown]);
        assert_eq!(s.to_string(), "[batch, 3, ?]");
        assert_eq!(s.concrete(), None);
    }
}
