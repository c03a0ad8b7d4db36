//! The tensor-algebra ops: `Einsum` (its equation parsed into labelled
//! operand axes) and `Det`.

use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::error::OpError;
use crate::shape::Shape;

/// Label ids: `a`–`z` are 0–25, `A`–`Z` 26–51, ellipsis axes 52 and up.
const ELLIPSIS_BASE: usize = 52;

/// `Einsum` with its equation, spaces removed.
#[derive(Debug, Clone)]
pub struct Einsum {
    /// The equation, e.g. `bij,bjk->bik` or `ii` (implicit output).
    pub equation: String,
}

/// An equation resolved against concrete operand dims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EinsumPlan {
    /// For each operand, the label of each of its axes (labels may repeat: diagonals).
    pub inputs: Vec<Vec<usize>>,
    /// The label of each output axis.
    pub output: Vec<usize>,
    /// The size of each label (indexed by label id; 0 for unused labels).
    pub sizes: Vec<usize>,
}

/// One term of the equation: labels, with the ellipsis (if any) at `ellipsis`.
struct Term {
    labels: Vec<usize>,
    ellipsis: Option<usize>,
}

fn bad(equation: &str, why: &str) -> OpError {
    OpError::BadAttribute { name: "equation".into(), reason: format!("'{equation}': {why}") }
}

fn parse_term(equation: &str, t: &str) -> Result<Term, OpError> {
    let mut labels = Vec::new();
    let mut ellipsis = None;
    let mut rest = t;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("...") {
            if ellipsis.replace(labels.len()).is_some() {
                return Err(bad(equation, "two ellipses in one term"));
            }
            rest = &rest[3..];
            continue;
        }
        labels.push(match c {
            'a'..='z' => c as usize - 'a' as usize,
            'A'..='Z' => c as usize - 'A' as usize + 26,
            _ => return Err(bad(equation, &format!("unexpected '{c}'"))),
        });
        rest = &rest[c.len_utf8()..];
    }
    Ok(Term { labels, ellipsis })
}

impl Einsum {
    fn terms(&self) -> Result<(Vec<Term>, Option<Term>), OpError> {
        let eq = &self.equation;
        let (lhs, rhs) = match eq.split_once("->") {
            Some((l, r)) => (l, Some(r)),
            None => (eq.as_str(), None),
        };
        let inputs = lhs.split(',').map(|t| parse_term(eq, t)).collect::<Result<Vec<_>, _>>()?;
        Ok((inputs, rhs.map(|r| parse_term(eq, r)).transpose()?))
    }

    /// The number of operands the equation names.
    ///
    /// # Errors
    /// [`OpError::BadAttribute`] for a malformed equation.
    pub fn operands(&self) -> Result<usize, OpError> {
        Ok(self.terms()?.0.len())
    }

    /// Labels the axes of operands of the given ranks: the ellipsis of each
    /// expands to its missing axes, right-aligned with the widest one.
    fn label(&self, ranks: &[usize]) -> Result<(Vec<Vec<usize>>, Vec<usize>), OpError> {
        let eq = &self.equation;
        let (terms, out) = self.terms()?;
        if terms.len() != ranks.len() {
            return Err(bad(eq, &format!("{} terms for {} inputs", terms.len(), ranks.len())));
        }
        let mut ell_rank = 0;
        let mut inputs = Vec::with_capacity(terms.len());
        for (t, &rank) in terms.iter().zip(ranks) {
            let n = t.labels.len();
            let e = match t.ellipsis {
                Some(_) if rank >= n => rank - n,
                None if rank == n => 0,
                _ => return Err(bad(eq, &format!("a term of {n} labels for rank {rank}"))),
            };
            ell_rank = ell_rank.max(e);
            inputs.push((t, e));
        }
        let expand = |t: &Term, e: usize| -> Vec<usize> {
            let mut v = t.labels.clone();
            if let Some(at) = t.ellipsis {
                let ell = (ell_rank - e..ell_rank).map(|k| ELLIPSIS_BASE + k);
                v.splice(at..at, ell);
            }
            v
        };
        let inputs: Vec<Vec<usize>> = inputs.into_iter().map(|(t, e)| expand(t, e)).collect();
        let output = match out {
            Some(t) if t.ellipsis.is_none() && ell_rank > 0 => {
                return Err(bad(eq, "the inputs have an ellipsis and the output none"));
            }
            Some(t) => expand(&t, ell_rank),
            None => {
                let mut counts = [0usize; ELLIPSIS_BASE];
                for &l in inputs.iter().flatten().filter(|&&l| l < ELLIPSIS_BASE) {
                    counts[l] += 1;
                }
                // Ellipsis axes first, then the labels seen once in ASCII order (A–Z, a–z).
                let mut out: Vec<usize> = (0..ell_rank).map(|k| ELLIPSIS_BASE + k).collect();
                out.extend((26..52).chain(0..26).filter(|&l| counts[l] == 1));
                out
            }
        };
        let mut seen = [false; ELLIPSIS_BASE];
        for &l in output.iter().filter(|&&l| l < ELLIPSIS_BASE) {
            if std::mem::replace(&mut seen[l], true) {
                return Err(bad(eq, "a label repeats in the output"));
            }
            if !inputs.iter().flatten().any(|&x| x == l) {
                return Err(bad(eq, "an output label appears in no input"));
            }
        }
        Ok((inputs, output))
    }

    /// Resolves the equation against concrete operand dims; size-1 axes broadcast.
    ///
    /// # Errors
    /// [`OpError::BadAttribute`] for a malformed equation, [`OpError::Shape`]
    /// when a label has two different sizes.
    pub fn plan(&self, dims: &[Vec<usize>]) -> Result<EinsumPlan, OpError> {
        let ranks: Vec<usize> = dims.iter().map(Vec::len).collect();
        let (inputs, output) = self.label(&ranks)?;
        let width = inputs.iter().flatten().chain(&output).max().map_or(0, |m| m + 1);
        let mut sizes = vec![0usize; width];
        let mut set = vec![false; width];
        for (labels, d) in inputs.iter().zip(dims) {
            for (&l, &n) in labels.iter().zip(d) {
                if !set[l] || sizes[l] == 1 {
                    sizes[l] = n;
                    set[l] = true;
                } else if n != sizes[l] && n != 1 {
                    return Err(OpError::Shape(format!(
                        "Einsum '{}': an axis of {n} where the same label has {}",
                        self.equation, sizes[l]
                    )));
                }
            }
        }
        Ok(EinsumPlan { inputs, output, sizes })
    }
}

impl Op for Einsum {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let facts: Vec<&Fact> = inputs.present().collect();
        let first = facts.first().ok_or(OpError::MissingInput(0))?;
        if let Some((i, f)) = facts.iter().enumerate().find(|(_, f)| f.dtype != first.dtype) {
            return Err(OpError::InputDType {
                index: i,
                dtype: f.dtype,
                expected: format!("{} like input 0", first.dtype),
            });
        }
        if let Some(dims) = facts.iter().map(|f| f.dims()).collect::<Option<Vec<_>>>() {
            let p = self.plan(&dims)?;
            let out: Vec<usize> = p.output.iter().map(|&l| p.sizes[l]).collect();
            return Ok(vec![Fact::known(first.dtype, &out)]);
        }
        match facts.iter().map(|f| f.rank()).collect::<Option<Vec<_>>>() {
            Some(ranks) => {
                let (_, output) = self.label(&ranks)?;
                Ok(vec![Fact::new(first.dtype, Shape::unknown(output.len()))])
            }
            None => Ok(vec![Fact::unranked(first.dtype)]),
        }
    }
}

/// `Det`: the determinants of the square matrices in the last two dims.
#[derive(Debug, Clone)]
pub struct Det;

impl Op for Det {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some(s) = &x.shape else { return Ok(vec![Fact::unranked(x.dtype)]) };
        let r = s.rank();
        let square = r >= 2
            && match (s.0[r - 2].known(), s.0[r - 1].known()) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
        if !square {
            return Err(OpError::Shape(format!("Det needs [*, M, M], got {s}")));
        }
        Ok(vec![Fact::new(x.dtype, Shape(s.0[..r - 2].to_vec()))])
    }
}

/// Registers Einsum and Det.
pub fn register_all(r: &mut OpRegistry) {
    r.register("Det", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(Det))
    });
    r.register("Einsum", |n| {
        let equation: String =
            n.attrs.req_string("equation")?.chars().filter(|c| !c.is_whitespace()).collect();
        let e = Einsum { equation };
        let operands = e.operands()?;
        check_inputs(n, operands, operands)?;
        Ok(Box::new(e))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(eq: &str, dims: &[&[usize]]) -> Result<EinsumPlan, OpError> {
        let dims: Vec<Vec<usize>> = dims.iter().map(|d| d.to_vec()).collect();
        Einsum { equation: eq.into() }.plan(&dims)
    }

    #[test]
    fn an_implicit_output_keeps_the_labels_seen_once_in_ascii_order() {
        let p = plan("ij,jk", &[&[2, 3], &[3, 4]]).unwrap();
        assert_eq!(p.output, vec![8, 10]);
        let p = plan("ba", &[&[2, 3]]).unwrap();
        assert_eq!(p.output, vec![0, 1], "implicit output is sorted: ab");
        assert!(plan("ii", &[&[3, 3]]).unwrap().output.is_empty());
    }

    #[test]
    fn ellipses_expand_right_aligned_and_lead_an_implicit_output() {
        let p = plan("...ii->...i", &[&[3, 5, 5]]).unwrap();
        assert_eq!(p.inputs[0], vec![52, 8, 8]);
        assert_eq!(p.output, vec![52, 8]);
        let p = plan("...j,j", &[&[2, 4, 3], &[3]]).unwrap();
        assert_eq!(p.output, vec![52, 53]);
        assert_eq!((p.sizes[52], p.sizes[53]), (2, 4));
    }

    #[test]
    fn mismatched_label_sizes_and_unknown_output_labels_are_errors() {
        assert!(plan("ij,jk->ik", &[&[2, 3], &[4, 5]]).is_err());
        assert!(plan("ij->k", &[&[2, 3]]).is_err());
        assert!(plan("ij->ii", &[&[2, 3]]).is_err());
        assert!(plan("ij", &[&[2]]).is_err());
        assert!(plan("i,i", &[&[1], &[4]]).is_ok(), "size 1 broadcasts");
    }
}
