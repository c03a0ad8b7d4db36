//! Numpy-style multidirectional broadcasting over symbolic shapes.

use super::fact::Fact;
use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::{Dim, Shape};

/// Broadcasts one column of dimensions (already right-aligned; missing dims are 1).
///
/// # Errors
/// [`OpError::Shape`] when two known sizes differ and neither is 1.
pub fn broadcast_dims(dims: &[&Dim]) -> Result<Dim, OpError> {
    let mut known: Option<usize> = None;
    let mut sym: Option<&Dim> = None;
    let mut unknown = false;
    for d in dims {
        match d {
            Dim::Known(1) => {}
            Dim::Known(n) => match known {
                Some(k) if k != *n => {
                    return Err(OpError::Shape(format!("cannot broadcast dimensions {k} and {n}")));
                }
                _ => known = Some(*n),
            },
            Dim::Sym(_) => match sym {
                Some(s) if s != *d => unknown = true,
                _ => sym = Some(d),
            },
            Dim::Unknown => unknown = true,
        }
    }
    Ok(match (known, sym, unknown) {
        // A known size > 1 decides; symbols must equal it or be 1 at run time.
        (Some(k), _, _) => Dim::Known(k),
        (None, Some(s), false) => s.clone(),
        (None, None, false) => Dim::Known(1),
        _ => Dim::Unknown,
    })
}

/// Broadcasts several shapes together.
///
/// # Errors
/// [`OpError::Shape`] for incompatible shapes.
pub fn broadcast_shapes(shapes: &[&Shape]) -> Result<Shape, OpError> {
    let rank = shapes.iter().map(|s| s.rank()).max().unwrap_or(0);
    let one = Dim::Known(1);
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let column: Vec<&Dim> = shapes
            .iter()
            .map(|s| {
                let offset = rank - s.rank();
                if i < offset { &one } else { &s.0[i - offset] }
            })
            .collect();
        out.push(broadcast_dims(&column).map_err(|e| {
            let all: Vec<String> = shapes.iter().map(|s| s.to_string()).collect();
            OpError::Shape(format!("{e} (shapes {})", all.join(", ")))
        })?);
    }
    Ok(Shape(out))
}

/// The broadcast result fact of several inputs.
///
/// # Errors
/// [`OpError::Shape`] for incompatible shapes.
pub fn broadcast_fact(dtype: DType, inputs: &[&Fact]) -> Result<Fact, OpError> {
    let shapes: Option<Vec<&Shape>> = inputs.iter().map(|f| f.shape.as_ref()).collect();
    Ok(match shapes {
        Some(shapes) => Fact::new(dtype, broadcast_shapes(&shapes)?),
        None => Fact::unranked(dtype),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_shapes_broadcast_like_numpy() {
        let a = Shape::known(&[2, 1, 4]);
        let b = Shape::known(&[3, 1]);
        assert_eq!(broadcast_shapes(&[&a, &b]).unwrap(), Shape::known(&[2, 3, 4]));
        assert!(broadcast_shapes(&[&Shape::known(&[2]), &Shape::known(&[3])]).is_err());
    }

    #[test]
    fn symbols_survive_broadcasting_with_one() {
        let a = Shape(vec![Dim::Sym("n".into()), Dim::Known(4)]);
        let b = Shape::known(&[1, 4]);
        assert_eq!(broadcast_shapes(&[&a, &b]).unwrap(), a);
        let c = Shape(vec![Dim::Sym("m".into()), Dim::Known(4)]);
        assert_eq!(broadcast_shapes(&[&a, &c]).unwrap().0[0], Dim::Unknown);
    }
}
