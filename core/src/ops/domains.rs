//! Training and classic-ML ops: the `ai.onnx.preview.training` optimizers
//! (Adagrad, Adam, Momentum), the `ai.onnx.ml` Binarizer,
//! ArrayFeatureExtractor and TreeEnsemble, and TfIdfVectorizer (integer pools).

use std::collections::HashMap;

use super::{Fact, InferInputs, Op, OpRegistry};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Node;
use crate::shape::{Dim, Shape};

/// The `ai.onnx.preview.training` domain.
pub const TRAINING_DOMAIN: &str = "ai.onnx.preview.training";
/// The `ai.onnx.ml` domain.
pub const ML_DOMAIN: &str = "ai.onnx.ml";

/// An optimizer's update rule and coefficients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    /// `Adagrad`: inputs X, G, H; outputs X, H.
    Adagrad {
        /// Learning-rate decay per step.
        decay_factor: f32,
        /// Added to the root of the accumulated squares.
        epsilon: f32,
        /// L2 regularization.
        norm_coefficient: f32,
    },
    /// `Adam`: inputs X, G, V, H; outputs X, V, H.
    Adam {
        /// First-moment decay.
        alpha: f32,
        /// Second-moment decay.
        beta: f32,
        /// Added to the root of the second moment.
        epsilon: f32,
        /// L2 regularization of the gradient.
        norm_coefficient: f32,
        /// Weight decay after the update.
        norm_coefficient_post: f32,
    },
    /// `Momentum`: inputs X, G, V; outputs X, V.
    Momentum {
        /// Momentum decay.
        alpha: f32,
        /// Gradient scale (1 on the first step).
        beta: f32,
        /// L2 regularization.
        norm_coefficient: f32,
        /// Nesterov's variant.
        nesterov: bool,
    },
}

/// A training optimizer over `R` (learning rate), `T` (step) and groups of
/// tensors; each output group has the shape of the input group it updates.
#[derive(Debug, Clone)]
pub struct Optimizer {
    /// The rule.
    pub rule: Rule,
}

impl Optimizer {
    /// For each output group, the input group it follows (X, then the states).
    pub fn output_groups(&self) -> &'static [usize] {
        match self.rule {
            Rule::Adagrad { .. } => &[0, 2],
            Rule::Adam { .. } => &[0, 2, 3],
            Rule::Momentum { .. } => &[0, 2],
        }
    }

    /// The number of input groups (X, G and the states).
    pub fn input_groups(&self) -> usize {
        match self.rule {
            Rule::Adam { .. } => 4,
            _ => 3,
        }
    }

    /// Tensors per group for `inputs` node inputs.
    ///
    /// # Errors
    /// [`OpError::InputCount`] when the inputs do not split into whole groups.
    pub fn tensors(&self, inputs: usize) -> Result<usize, OpError> {
        let g = self.input_groups();
        match inputs.checked_sub(2) {
            Some(n) if n > 0 && n % g == 0 => Ok(n / g),
            _ => Err(OpError::InputCount {
                expected: format!("2 + a multiple of {g}"),
                actual: inputs,
            }),
        }
    }
}

impl Op for Optimizer {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let n = self.tensors(inputs.len())?;
        let mut out = Vec::new();
        for &g in self.output_groups() {
            for i in 0..n {
                let f = inputs.get(2 + g * n + i)?;
                if !matches!(f.dtype, DType::F32 | DType::F64) {
                    return Err(OpError::InputDType {
                        index: 2 + g * n + i,
                        dtype: f.dtype,
                        expected: "float or double".into(),
                    });
                }
                out.push(f.with_dtype(f.dtype));
            }
        }
        Ok(out)
    }
}

/// `Binarizer`: 1 where `x > threshold`, else 0, in the input's type.
#[derive(Debug, Clone)]
pub struct Binarizer {
    /// The threshold.
    pub threshold: f32,
}

impl Op for Binarizer {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        Ok(vec![x.with_dtype(x.dtype)])
    }
}

/// `ArrayFeatureExtractor`: `x[..., indices]` over the last axis (a 1-D input
/// gives one row).
#[derive(Debug, Clone)]
pub struct ArrayFeatureExtractor;

impl Op for ArrayFeatureExtractor {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, idx) = (inputs.get(0)?, inputs.get(1)?);
        let count = idx.shape.as_ref().and_then(Shape::numel).map_or(Dim::Unknown, Dim::Known);
        let Some(s) = &x.shape else { return Ok(vec![Fact::unranked(x.dtype)]) };
        let mut out = match s.rank() {
            0 => return Err(OpError::Shape("ArrayFeatureExtractor needs a tensor".into())),
            1 => vec![Dim::Known(1)],
            r => s.0[..r - 1].to_vec(),
        };
        out.push(count);
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }
}

/// How TfIdfVectorizer weighs the n-gram counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TfIdfMode {
    /// The counts.
    Tf,
    /// The weight (or 1) where the count is positive.
    Idf,
    /// Weight times count.
    TfIdf,
}

/// One trie node: the id of the n-gram ending here (0: none) and its continuations.
#[derive(Debug, Clone, Default)]
struct GramNode {
    id: usize,
    next: HashMap<i64, usize>,
}

/// `TfIdfVectorizer` over an integer pool of n-grams, kept as a trie.
#[derive(Debug, Clone)]
pub struct TfIdfVectorizer {
    /// Shortest counted n-gram.
    pub min_gram: usize,
    /// Longest counted n-gram.
    pub max_gram: usize,
    /// Most items skipped between an n-gram's items.
    pub max_skip: usize,
    /// The weighting.
    pub mode: TfIdfMode,
    /// Output column of each n-gram (by id − 1).
    pub ngram_indexes: Vec<usize>,
    /// Per-column weights (may be empty).
    pub weights: Vec<f32>,
    trie: Vec<GramNode>,
}

impl TfIdfVectorizer {
    /// Output columns: the largest n-gram index plus one.
    pub fn columns(&self) -> usize {
        self.ngram_indexes.iter().max().map_or(0, |m| m + 1)
    }

    fn build(n: &Node) -> Result<TfIdfVectorizer, OpError> {
        let a = &n.attrs;
        let bad =
            |name: &str, why: &str| OpError::BadAttribute { name: name.into(), reason: why.into() };
        let count = |name: &str| -> Result<usize, OpError> {
            usize::try_from(a.req_int(name)?).map_err(|_| bad(name, "negative"))
        };
        if a.has("pool_strings") {
            return Err(OpError::Unsupported("TfIdfVectorizer over strings".into()));
        }
        let mode = match a.req_string("mode")?.as_str() {
            "TF" => TfIdfMode::Tf,
            "IDF" => TfIdfMode::Idf,
            "TFIDF" => TfIdfMode::TfIdf,
            m => return Err(bad("mode", &format!("unknown mode '{m}'"))),
        };
        let pool = a.ints_or("pool_int64s", vec![])?;
        let counts = a.req_ints("ngram_counts")?;
        let ngram_indexes = a
            .req_ints("ngram_indexes")?
            .into_iter()
            .map(|i| usize::try_from(i).map_err(|_| bad("ngram_indexes", "negative")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut v = TfIdfVectorizer {
            min_gram: count("min_gram_length")?,
            max_gram: count("max_gram_length")?,
            max_skip: count("max_skip_count")?,
            mode,
            weights: a.floats_or("weights", vec![])?,
            ngram_indexes,
            trie: vec![GramNode::default()],
        };
        // Gram size `i + 1` occupies pool[counts[i]..counts[i + 1]].
        let mut id = 1;
        for (i, &start) in counts.iter().enumerate() {
            let size = i + 1;
            let end = counts.get(i + 1).copied().unwrap_or(pool.len() as i64);
            let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
                return Err(bad("ngram_counts", "negative offset"));
            };
            let items =
                pool.get(start..end).ok_or_else(|| bad("ngram_counts", "outside the pool"))?;
            if !(v.min_gram..=v.max_gram).contains(&size) {
                id += items.len() / size;
                continue;
            }
            for gram in items.chunks_exact(size) {
                let mut at = 0;
                for &item in gram {
                    let next = v.trie.len();
                    at = *v.trie[at].next.entry(item).or_insert(next);
                    if at == next {
                        v.trie.push(GramNode::default());
                    }
                }
                v.trie[at].id = id;
                id += 1;
            }
        }
        if v.ngram_indexes.len() + 1 < id {
            return Err(bad("ngram_indexes", "fewer entries than n-grams"));
        }
        Ok(v)
    }

    /// The weighted n-gram counts of one row, one per output column.
    pub fn row(&self, items: &[i64]) -> Vec<f32> {
        let mut freq = vec![0u32; self.columns()];
        let mut start_size = self.min_gram.max(1);
        for skip in 1..=self.max_skip + 1 {
            for start in 0..items.len() {
                if start + skip * (start_size - 1) >= items.len() {
                    break;
                }
                let (mut at, mut size, mut item) = (0, 1, start);
                while !self.trie[at].next.is_empty() && size <= self.max_gram && item < items.len()
                {
                    let Some(&next) = self.trie[at].next.get(&items[item]) else { break };
                    let id = self.trie[next].id;
                    if size >= start_size && id != 0 {
                        freq[self.ngram_indexes[id - 1]] += 1;
                    }
                    (at, size, item) = (next, size + 1, item + skip);
                }
            }
            // Unigrams do not depend on the skip: count them once.
            if start_size == 1 {
                start_size = 2;
                if start_size > self.max_gram {
                    break;
                }
            }
        }
        freq.iter()
            .enumerate()
            .map(|(i, &f)| {
                let w = self.weights.get(i).copied();
                match self.mode {
                    TfIdfMode::Tf => f as f32,
                    TfIdfMode::Idf if f > 0 => w.unwrap_or(1.0),
                    TfIdfMode::Idf => 0.0,
                    TfIdfMode::TfIdf => w.unwrap_or(1.0) * f as f32,
                }
            })
            .collect()
    }
}

impl Op for TfIdfVectorizer {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        if !matches!(x.dtype, DType::I32 | DType::I64) {
            return Err(OpError::InputDType {
                index: 0,
                dtype: x.dtype,
                expected: "int32 or int64".into(),
            });
        }
        let cols = Dim::Known(self.columns());
        Ok(vec![match x.rank() {
            Some(0 | 1) => Fact::new(DType::F32, Shape(vec![cols])),
            Some(2) => Fact::new(DType::F32, Shape(vec![x.dim(0), cols])),
            Some(r) => return Err(OpError::Shape(format!("TfIdfVectorizer input of rank {r}"))),
            None => Fact::unranked(DType::F32),
        }])
    }
}

/// A decision-tree node, built from TreeEnsemble's flat attribute arrays.
#[derive(Debug, Clone)]
enum TreeNode {
    Leaf {
        weight: f64,
        target: usize,
    },
    Split {
        mode: i64,
        value: f64,
        members: Vec<f64>,
        feature: usize,
        nan_true: bool,
        yes: Box<TreeNode>,
        no: Box<TreeNode>,
    },
}

impl TreeNode {
    fn leaf(&self, x: &[f64]) -> Result<(f64, usize), OpError> {
        let mut at = self;
        loop {
            match at {
                TreeNode::Leaf { weight, target } => return Ok((*weight, *target)),
                TreeNode::Split { mode, value, members, feature, nan_true, yes, no } => {
                    let v = *x.get(*feature).ok_or_else(|| {
                        OpError::Shape(format!("TreeEnsemble feature {feature} is missing"))
                    })?;
                    let hit = match mode {
                        0 => v <= *value,
                        1 => v < *value,
                        2 => v >= *value,
                        3 => v > *value,
                        4 => v == *value,
                        5 => v != *value,
                        _ => members.contains(&v),
                    };
                    at = if hit || (*nan_true && v.is_nan()) { yes } else { no };
                }
            }
        }
    }
}

/// `TreeEnsemble` (ai.onnx.ml 5): sums (or averages, min, max) the leaf
/// weights each tree reaches, per target, then applies `post_transform`.
#[derive(Debug, Clone)]
pub struct TreeEnsemble {
    trees: Vec<TreeNode>,
    /// Outputs per sample.
    pub targets: usize,
    /// 0 average, 1 sum, 2 min, 3 max.
    pub aggregate: i64,
    /// 0 none, 1 softmax, 2 logistic, 3 softmax ignoring zeros, 4 probit.
    pub post_transform: i64,
}

/// TreeEnsemble's flat node arrays, while the trees are being built.
struct Flat<'a> {
    modes: &'a [i64],
    splits: &'a [f64],
    features: &'a [i64],
    yes: &'a [i64],
    no: &'a [i64],
    yes_leaf: &'a [i64],
    no_leaf: &'a [i64],
    nan_true: &'a [i64],
    weights: &'a [f64],
    targets: &'a [i64],
    members: std::vec::IntoIter<f64>,
}

fn bad_node(name: &str, why: String) -> OpError {
    OpError::BadAttribute { name: name.into(), reason: why }
}

impl Flat<'_> {
    fn int(&self, v: &[i64], name: &str, i: usize) -> Result<i64, OpError> {
        v.get(i).copied().ok_or_else(|| bad_node(name, format!("no entry {i}")))
    }

    fn index(&self, v: &[i64], name: &str, i: usize) -> Result<usize, OpError> {
        let x = self.int(v, name, i)?;
        usize::try_from(x).map_err(|_| bad_node(name, format!("negative entry {x}")))
    }

    /// Builds node (or leaf) `i` depth-first, true branch first, consuming
    /// membership sets in that order as the reference does.
    fn node(&mut self, i: usize, leaf: bool, depth: usize) -> Result<TreeNode, OpError> {
        if depth > self.modes.len() + 1 {
            return Err(bad_node("nodes_truenodeids", "the trees have a cycle".into()));
        }
        if leaf {
            let weight = *self
                .weights
                .get(i)
                .ok_or_else(|| bad_node("leaf_weights", format!("no leaf {i}")))?;
            return Ok(TreeNode::Leaf {
                weight,
                target: self.index(self.targets, "leaf_targetids", i)?,
            });
        }
        let mode = self.int(self.modes, "nodes_modes", i)?;
        let members: Vec<f64> = if mode == 6 {
            self.members.by_ref().take_while(|m| !m.is_nan()).collect()
        } else {
            vec![]
        };
        let value =
            *self.splits.get(i).ok_or_else(|| bad_node("nodes_splits", format!("no entry {i}")))?;
        let feature = self.index(self.features, "nodes_featureids", i)?;
        let nan_true = self.nan_true.get(i).is_some_and(|&v| v != 0);
        let (ty, fy) = (
            self.index(self.yes, "nodes_truenodeids", i)?,
            self.index(self.no, "nodes_falsenodeids", i)?,
        );
        let (tl, fl) = (
            self.int(self.yes_leaf, "nodes_trueleafs", i)? != 0,
            self.int(self.no_leaf, "nodes_falseleafs", i)? != 0,
        );
        let yes = Box::new(self.node(ty, tl, depth + 1)?);
        let no = Box::new(self.node(fy, fl, depth + 1)?);
        Ok(TreeNode::Split { mode, value, members, feature, nan_true, yes, no })
    }
}

impl TreeEnsemble {
    fn build(n: &Node) -> Result<TreeEnsemble, OpError> {
        let a = &n.attrs;
        let floats =
            |name: &str| -> Result<Vec<f64>, OpError> { Ok(a.req_tensor(name)?.to_f64_vec()?) };
        let (splits, weights) = (floats("nodes_splits")?, floats("leaf_weights")?);
        let modes = a.req_tensor("nodes_modes")?.to_i64_vec()?;
        let members =
            a.tensor("membership_values")?.map(|t| t.to_f64_vec()).transpose()?.unwrap_or_default();
        let (yes, no) = (a.req_ints("nodes_truenodeids")?, a.req_ints("nodes_falsenodeids")?);
        let (yes_leaf, no_leaf) = (a.req_ints("nodes_trueleafs")?, a.req_ints("nodes_falseleafs")?);
        let (features, targets) = (a.req_ints("nodes_featureids")?, a.req_ints("leaf_targetids")?);
        let nan_true = a.ints_or("nodes_missing_value_tracks_true", vec![])?;
        let mut flat = Flat {
            modes: &modes,
            splits: &splits,
            features: &features,
            yes: &yes,
            no: &no,
            yes_leaf: &yes_leaf,
            no_leaf: &no_leaf,
            nan_true: &nan_true,
            weights: &weights,
            targets: &targets,
            members: members.into_iter(),
        };
        let mut trees = Vec::new();
        for root in a.req_ints("tree_roots")? {
            let r = usize::try_from(root)
                .map_err(|_| bad_node("tree_roots", format!("negative root {root}")))?;
            // A root whose branches both lead to the same leaf is that leaf.
            let leaf = flat.int(&yes_leaf, "nodes_trueleafs", r)? != 0
                && flat.int(&no_leaf, "nodes_falseleafs", r)? != 0
                && flat.int(&yes, "nodes_truenodeids", r)?
                    == flat.int(&no, "nodes_falsenodeids", r)?;
            trees.push(flat.node(r, leaf, 0)?);
        }
        let max_target = targets.iter().max().map_or(0, |&t| t.max(-1) + 1) as usize;
        let n_targets = a.int("n_targets")?.map_or(Ok(max_target), |t| {
            usize::try_from(t).map_err(|_| bad_node("n_targets", "negative".into()))
        })?;
        if max_target > n_targets {
            return Err(bad_node(
                "leaf_targetids",
                format!("a target beyond n_targets = {n_targets}"),
            ));
        }
        let (aggregate, post_transform) =
            (a.int_or("aggregate_function", 1)?, a.int_or("post_transform", 0)?);
        if !(0..=3).contains(&aggregate) || !(0..=4).contains(&post_transform) {
            return Err(bad_node(
                "aggregate_function",
                format!("{aggregate} / post_transform {post_transform}"),
            ));
        }
        Ok(TreeEnsemble { trees, targets: n_targets, aggregate, post_transform })
    }

    /// The aggregated leaf weights for one sample, before `post_transform`,
    /// given the dtype's largest finite value (the start of a min/max aggregate).
    ///
    /// # Errors
    /// [`OpError::Shape`] when a node reads a feature the sample lacks.
    pub fn aggregate(&self, x: &[f64], finite_max: f64) -> Result<Vec<f64>, OpError> {
        let start = match self.aggregate {
            2 => finite_max,
            3 => -finite_max,
            _ => 0.0,
        };
        let mut out = vec![start; self.targets];
        for tree in &self.trees {
            let (w, t) = tree.leaf(x)?;
            let o = &mut out[t];
            *o = match self.aggregate {
                0 => *o + w / self.trees.len() as f64,
                2 => o.min(w),
                3 => o.max(w),
                _ => *o + w,
            };
        }
        Ok(out)
    }
}

impl Op for TreeEnsemble {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16) {
            return Err(OpError::InputDType {
                index: 0,
                dtype: x.dtype,
                expected: "a float type".into(),
            });
        }
        if x.rank().is_some_and(|r| r != 2) {
            return Err(OpError::Shape("TreeEnsemble needs X [N, features]".into()));
        }
        Ok(vec![Fact::new(x.dtype, Shape(vec![x.dim(0), Dim::Known(self.targets)]))])
    }
}

fn rule(n: &Node) -> Result<Rule, OpError> {
    let a = &n.attrs;
    Ok(match n.op_type.as_str() {
        "Adagrad" => Rule::Adagrad {
            decay_factor: a.float_or("decay_factor", 0.0)?,
            epsilon: a.float_or("epsilon", 1e-6)?,
            norm_coefficient: a.float_or("norm_coefficient", 0.0)?,
        },
        "Adam" => Rule::Adam {
            alpha: a.float_or("alpha", 0.9)?,
            beta: a.float_or("beta", 0.999)?,
            epsilon: a.float_or("epsilon", 1e-6)?,
            norm_coefficient: a.float_or("norm_coefficient", 0.0)?,
            norm_coefficient_post: a.float_or("norm_coefficient_post", 0.0)?,
        },
        _ => Rule::Momentum {
            alpha: a.req_float("alpha")?,
            beta: a.req_float("beta")?,
            norm_coefficient: a.req_float("norm_coefficient")?,
            nesterov: match a.req_string("mode")?.as_str() {
                "standard" => false,
                "nesterov" => true,
                m => {
                    return Err(OpError::BadAttribute {
                        name: "mode".into(),
                        reason: format!("unknown mode '{m}'"),
                    });
                }
            },
        },
    })
}

/// Registers the family.
pub fn register_all(r: &mut OpRegistry) {
    for name in ["Adagrad", "Adam", "Momentum"] {
        r.register_in(TRAINING_DOMAIN, name, |n| {
            let op = Optimizer { rule: rule(n)? };
            op.tensors(n.inputs.len())?;
            Ok(Box::new(op))
        });
    }
    r.register("TfIdfVectorizer", |n| {
        super::check_inputs(n, 1, 1)?;
        Ok(Box::new(TfIdfVectorizer::build(n)?))
    });
    r.register_in(ML_DOMAIN, "TreeEnsemble", |n| {
        super::check_inputs(n, 1, 1)?;
        Ok(Box::new(TreeEnsemble::build(n)?))
    });
    r.register_in(ML_DOMAIN, "Binarizer", |n| {
        super::check_inputs(n, 1, 1)?;
        Ok(Box::new(Binarizer { threshold: n.attrs.float_or("threshold", 0.0)? }))
    });
    r.register_in(ML_DOMAIN, "ArrayFeatureExtractor", |n| {
        super::check_inputs(n, 2, 2)?;
        Ok(Box::new(ArrayFeatureExtractor))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optimizer_inputs_split_into_whole_groups() {
        let adam = Optimizer {
            rule: Rule::Adam {
                alpha: 0.9,
                beta: 0.999,
                epsilon: 1e-6,
                norm_coefficient: 0.0,
                norm_coefficient_post: 0.0,
            },
        };
        assert_eq!(adam.tensors(10).unwrap(), 2);
        assert!(adam.tensors(9).is_err());
        assert!(adam.tensors(2).is_err());
    }
}
