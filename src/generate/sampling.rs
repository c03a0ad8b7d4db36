//! Choosing the next token from one row of logits: greedy, or sampled with
//! temperature, top-k and top-p, after a repetition penalty; seeded, so a
//! seed gives the same tokens on every run and platform.

/// How the next token is chosen. The default is greedy decoding.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    /// Divides the logits before sampling; 0 picks the most likely token (greedy).
    pub temperature: f32,
    /// Samples among the `top_k` most likely tokens only (0: all).
    pub top_k: usize,
    /// Samples among the fewest most likely tokens whose probabilities sum
    /// to at least `top_p` (1: all).
    pub top_p: f32,
    /// CTRL's penalty on tokens already in the sequence, prompt included:
    /// positive logits are divided by it, negative ones multiplied (1: off).
    pub repetition_penalty: f32,
    /// The random generator's seed.
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling { temperature: 0.0, top_k: 0, top_p: 1.0, repetition_penalty: 1.0, seed: 0 }
    }
}

impl Sampling {
    /// Whether this picks the most likely token with no randomness.
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }

    /// Checks the settings: a reason for the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(format!("temperature {} must be 0 or more", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p {} must be in (0, 1]", self.top_p));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return Err(format!("repetition penalty {} must be above 0", self.repetition_penalty));
        }
        Ok(())
    }
}

/// Applies the repetition penalty to `logits` for every token in `seen`.
pub(crate) fn penalize(logits: &mut [f32], seen: &[i64], penalty: f32) {
    if penalty == 1.0 {
        return;
    }
    let mut done = vec![false; logits.len()];
    for &t in seen {
        let Some(i) = usize::try_from(t).ok().filter(|&i| i < logits.len()) else { continue };
        if std::mem::replace(&mut done[i], true) {
            continue;
        }
        let l = &mut logits[i];
        *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
    }
}

/// The index of the largest logit (the first of equals); NaNs are never chosen.
pub(crate) fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] || logits[best].is_nan() {
            best = i;
        }
    }
    best
}

/// Chooses a token from `logits` (already penalized) with `s`, drawing from `rng`.
pub(crate) fn choose(logits: &[f32], s: &Sampling, rng: &mut fastrand::Rng) -> usize {
    if s.is_greedy() || logits.len() == 1 {
        return argmax(logits);
    }
    // Candidates in descending order of logit, cut to top-k.
    let mut order: Vec<usize> = (0..logits.len()).filter(|&i| !logits[i].is_nan()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if s.top_k > 0 {
        order.truncate(s.top_k);
    }
    let Some(&first) = order.first() else { return argmax(logits) };
    let max = logits[first] as f64;
    let t = s.temperature as f64;
    let mut probs: Vec<f64> = order.iter().map(|&i| ((logits[i] as f64 - max) / t).exp()).collect();
    let sum: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= sum);
    // Top-p: the shortest prefix whose mass reaches top_p.
    if s.top_p < 1.0 {
        let mut mass = 0.0;
        let mut keep = probs.len();
        for (n, p) in probs.iter().enumerate() {
            mass += p;
            if mass >= s.top_p as f64 {
                keep = n + 1;
                break;
            }
        }
        probs.truncate(keep);
        order.truncate(keep);
    }
    let total: f64 = probs.iter().sum();
    let mut draw = rng.f64() * total;
    for (n, p) in probs.iter().enumerate() {
        draw -= p;
        if draw < 0.0 {
            return order[n];
        }
    }
    order[probs.len() - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_the_first_largest_logit() {
        assert_eq!(argmax(&[0.1, 3.0, 3.0, -1.0]), 1);
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(choose(&[0.1, 3.0, 2.0], &Sampling::default(), &mut rng), 1);
    }

    #[test]
    fn the_repetition_penalty_lowers_seen_tokens_once() {
        let mut l = vec![2.0, -2.0, 1.0];
        penalize(&mut l, &[0, 1, 0], 2.0);
        assert_eq!(l, vec![1.0, -4.0, 1.0]);
    }

    #[test]
    fn top_k_of_one_and_tiny_top_p_are_greedy() {
        let logits = [0.5, 0.4, 2.0, 1.9];
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..50 {
            let k1 = Sampling { temperature: 1.0, top_k: 1, ..Sampling::default() };
            assert_eq!(choose(&logits, &k1, &mut rng), 2);
            let p = Sampling { temperature: 1.0, top_p: 0.01, ..Sampling::default() };
            assert_eq!(choose(&logits, &p, &mut rng), 2);
        }
    }

    #[test]
    fn sampling_follows_the_softmax_and_top_k_cuts_the_tail() {
        // Two tokens of logit 0 and ln 3: probabilities 1/4 and 3/4.
        let logits = [0.0, 3f32.ln(), -100.0];
        let s = Sampling { temperature: 1.0, top_k: 2, seed: 3, ..Sampling::default() };
        let mut rng = fastrand::Rng::with_seed(s.seed);
        let mut counts = [0usize; 3];
        for _ in 0..20_000 {
            counts[choose(&logits, &s, &mut rng)] += 1;
        }
        assert_eq!(counts[2], 0);
        let share = counts[1] as f64 / 20_000.0;
        assert!((share - 0.75).abs() < 0.02, "share of the likelier token: {share}");
    }

    #[test]
    fn the_same_seed_gives_the_same_draws() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let s = Sampling { temperature: 0.8, top_p: 0.9, seed: 42, ..Sampling::default() };
        let draw = || {
            let mut rng = fastrand::Rng::with_seed(s.seed);
            (0..20).map(|_| choose(&logits, &s, &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(), draw());
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(Sampling { temperature: -1.0, ..Sampling::default() }.validate().is_err());
        assert!(Sampling { top_p: 0.0, ..Sampling::default() }.validate().is_err());
        assert!(Sampling { repetition_penalty: 0.0, ..Sampling::default() }.validate().is_err());
        assert!(Sampling::default().validate().is_ok());
    }
}
