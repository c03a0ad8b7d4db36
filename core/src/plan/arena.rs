//! Static offsets for a run's intermediates: one arena per provider, each
//! buffer placed at an offset chosen once per input signature.
//!
//! The placement is greedy by size (Pisarchyk and Lee, "Efficient Memory
//! Management for Deep Neural Net Inference", 2020; TFLite's
//! `GreedyBySizePlanner`): buffers are placed largest first, each into the
//! smallest gap, among the buffers already placed whose lifetimes overlap its
//! own, that holds it, else above the highest of them. Large buffers decide
//! the arena's size and small ones fill the holes they leave, so the arena
//! comes within a few percent of the peak live set (the lower bound) on real
//! models.

/// One buffer to place: its size, and the span of events over which it is live.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Lifetime {
    /// Bytes.
    pub size: u64,
    /// The event at which it is allocated.
    pub start: u32,
    /// The event at which it is freed (after `start`); live in `start..end`.
    pub end: u32,
}

impl Lifetime {
    fn overlaps(&self, other: &Lifetime) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// Offsets for each lifetime (aligned to `align`, a power of two) and the
/// arena's size: no two buffers live at the same time share a byte.
pub fn greedy_by_size(lifetimes: &[Lifetime], align: u64) -> (Vec<u64>, u64) {
    let align = align.max(1);
    let round = |x: u64| x.div_ceil(align) * align;
    let mut order: Vec<usize> = (0..lifetimes.len()).collect();
    // Largest first; equal sizes in allocation order, so plans are deterministic.
    order.sort_by(|&a, &b| {
        lifetimes[b].size.cmp(&lifetimes[a].size).then(lifetimes[a].start.cmp(&lifetimes[b].start))
    });
    let mut offsets = vec![0u64; lifetimes.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(lifetimes.len());
    let mut arena = 0u64;
    let mut busy: Vec<(u64, u64)> = Vec::new();
    for &i in &order {
        let me = &lifetimes[i];
        let size = round(me.size.max(1));
        busy.clear();
        busy.extend(
            placed
                .iter()
                .filter(|&&j| lifetimes[j].overlaps(me))
                .map(|&j| (offsets[j], offsets[j] + round(lifetimes[j].size.max(1)))),
        );
        busy.sort_unstable();
        // The smallest gap that holds it; the space above every busy range otherwise.
        let mut best: Option<(u64, u64)> = None;
        let mut cursor = 0u64;
        for &(lo, hi) in &busy {
            if lo >= cursor + size {
                let gap = lo - cursor;
                if best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, cursor));
                }
            }
            cursor = cursor.max(hi);
        }
        let offset = best.map_or(cursor, |(_, at)| at);
        offsets[i] = offset;
        arena = arena.max(offset + size);
        placed.push(i);
    }
    (offsets, arena)
}

/// The most bytes live at once over `lifetimes` (each rounded up to `align`):
/// the least any arena for them can hold.
pub fn peak_live(lifetimes: &[Lifetime], align: u64) -> u64 {
    let align = align.max(1);
    let mut events: Vec<(u32, i64)> = Vec::with_capacity(lifetimes.len() * 2);
    for l in lifetimes {
        let size = (l.size.max(1).div_ceil(align) * align) as i64;
        events.push((l.start, size));
        events.push((l.end, -size));
    }
    // Frees before allocations at the same event.
    events.sort_unstable_by_key(|&(t, d)| (t, d));
    let (mut live, mut peak) = (0i64, 0i64);
    for (_, d) in events {
        live += d;
        peak = peak.max(live);
    }
    peak as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lt(size: u64, start: u32, end: u32) -> Lifetime {
        Lifetime { size, start, end }
    }

    fn assert_disjoint(ls: &[Lifetime], offsets: &[u64], arena: u64) {
        for i in 0..ls.len() {
            assert!(offsets[i] + ls[i].size <= arena);
            for j in 0..i {
                if ls[i].overlaps(&ls[j]) {
                    let (a, b) =
                        (offsets[i]..offsets[i] + ls[i].size, offsets[j]..offsets[j] + ls[j].size);
                    assert!(
                        a.end <= b.start || b.end <= a.start,
                        "{i} {a:?} and {j} {b:?} collide"
                    );
                }
            }
        }
    }

    #[test]
    fn buffers_that_never_live_together_share_offset_zero() {
        let ls = [lt(100, 0, 2), lt(80, 2, 4), lt(120, 4, 6)];
        let (offsets, arena) = greedy_by_size(&ls, 1);
        assert_eq!(offsets, vec![0, 0, 0]);
        assert_eq!(arena, 120);
    }

    #[test]
    fn buffers_that_live_together_get_disjoint_ranges() {
        let ls = [lt(100, 0, 3), lt(80, 1, 4), lt(50, 2, 5)];
        let (offsets, arena) = greedy_by_size(&ls, 1);
        assert_disjoint(&ls, &offsets, arena);
        assert_eq!(arena, 230);
    }

    #[test]
    fn a_small_buffer_fills_the_hole_a_dead_one_left() {
        // A chain a → b → c with a long-lived d beside it: c fits where a was.
        let ls = [lt(64, 0, 2), lt(64, 1, 3), lt(64, 2, 4), lt(32, 0, 4)];
        let (offsets, arena) = greedy_by_size(&ls, 1);
        assert_disjoint(&ls, &offsets, arena);
        assert_eq!(arena, peak_live(&ls, 1));
    }

    #[test]
    fn offsets_respect_the_alignment() {
        let ls = [lt(10, 0, 3), lt(7, 1, 4), lt(300, 2, 5)];
        let (offsets, arena) = greedy_by_size(&ls, 256);
        assert!(offsets.iter().all(|o| o % 256 == 0));
        assert_disjoint(&ls, &offsets, arena);
        assert_eq!(arena, 256 + 256 + 512);
    }

    #[test]
    fn random_plans_never_collide_and_stay_near_the_peak() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..200 {
            let n = rng.usize(1..60);
            let ls: Vec<Lifetime> = (0..n)
                .map(|_| {
                    let start = rng.u32(0..100);
                    lt(rng.u64(1..5000), start, start + rng.u32(1..30))
                })
                .collect();
            let (offsets, arena) = greedy_by_size(&ls, 64);
            assert_disjoint(&ls, &offsets, arena);
            assert!(arena >= peak_live(&ls, 64));
        }
    }
}
