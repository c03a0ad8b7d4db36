//! Schedules: everything the host decides for one input signature, computed
//! by the first run with that signature and replayed by the later ones.
//!
//! A graph run decides, step by step, what to fold on the host, the shape of
//! every output, which buffer an output takes over in place, and the memory
//! figures. All of that follows from the inputs' dtypes and shapes (the
//! *signature*) and the model's constants, except where a step reads a device
//! value on the host: a data-dependent `If` condition, a `Loop`'s trip count,
//! a shape argument a kernel computed. So the first run with a signature runs
//! the executor as always and records each step's decision; later runs with
//! that signature only bind inputs, launch, and release:
//!
//! - [`Decision::Folded`]: a step computed on the host, whose outputs are
//!   the same every run;
//! - [`Decision::Launch`]: a kernel with its output shapes, its value
//!   inputs' host copies, and each output's place: a fresh buffer, an input's
//!   buffer taken over in place, or an offset in the run's arena;
//! - [`Decision::View`]: a view's new shape;
//! - [`Decision::Eager`]: a step that depends on device data (or runs
//!   subgraphs, sequences, host ops) runs as always, and its outputs are
//!   then checked against the recorded ones (dtype, shape, host values). A
//!   mismatch means the signature did not decide this run: the rest of the
//!   run is eager and the schedule is dropped for that signature.
//!
//! Intermediates that the recording freed within the run are placed in an
//! arena per provider (where the provider has arenas) at offsets planned
//! greedily by size over their recorded lifetimes (`plan::arena`). Each stays
//! a buffer of its own, a view that counts in use from its allocation to its
//! release, so the measured peak is still the live set; the arena is the
//! memory really held. Before a view is made, the executor checks that no
//! live view overlaps it, so a run that strays from the recording can never
//! have two live tensors share bytes.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::dtype::DType;
use crate::ep::ExecutionProvider;
use crate::graph::ValueId;
use crate::plan::{Lifetime, MemoryFigures, greedy_by_size};
use crate::tensor::Tensor;

use super::value::Val;

/// Schedules a graph keeps by default (least recently used first out).
pub const DEFAULT_SCHEDULES: usize = 8;

/// The dtypes and shapes a graph run was given: the key of its schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Signature(Vec<Part>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Tensor(DType, Vec<usize>),
    Seq(DType, Vec<Vec<usize>>),
    Empty(DType, bool),
}

impl Signature {
    /// The signature of a run's bindings; `None` when a binding's contents
    /// (not only its shape) can decide the run: a host-only tensor (strings).
    pub(super) fn of<'v>(vals: impl Iterator<Item = &'v Val>) -> Option<Signature> {
        let mut parts = Vec::new();
        for v in vals {
            parts.push(match v {
                Val::Tensor(s) => Part::Tensor(s.dtype, s.shape.clone()),
                Val::Seq(d, items) => {
                    Part::Seq(*d, items.iter().map(|s| s.shape.clone()).collect())
                }
                Val::Empty(d, seq) => Part::Empty(*d, *seq),
                Val::Host(_) => return None,
            });
        }
        Some(Signature(parts))
    }
}

/// Where an output's buffer comes from.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Place {
    /// A fresh allocation.
    Alloc,
    /// The buffer of this dying input, taken over in place.
    Over(ValueId),
    /// A view at this offset of the provider's arena.
    Arena(u64),
    /// The buffer of this graph input, which the caller shares with the output.
    Shared(ValueId),
}

/// One output of a launch.
#[derive(Clone, Debug)]
pub(super) struct OutPlan {
    pub(super) value: ValueId,
    pub(super) dtype: DType,
    pub(super) dims: Vec<usize>,
    pub(super) bytes: u64,
    pub(super) place: Place,
    /// The value inference computed for it, when it did (kept on the host).
    pub(super) known: Option<Tensor>,
}

/// A kernel launch as the recording made it.
#[derive(Clone, Debug)]
pub(super) struct LaunchPlan {
    /// Host copies of the value inputs, by slot.
    pub(super) values: Vec<Option<Tensor>>,
    /// Outputs by slot (`None` for those the model does not use).
    pub(super) outputs: Vec<Option<OutPlan>>,
}

/// What an eager step's output must be for the schedule to still hold.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Expect {
    /// No output in this slot.
    Absent,
    /// A device tensor of this dtype and shape.
    Tensor(DType, Vec<usize>),
    /// A sequence with elements of these shapes.
    Seq(DType, Vec<Vec<usize>>),
    /// An empty optional.
    Empty(DType, bool),
    /// This host value.
    Host(Tensor),
}

impl Expect {
    pub(super) fn of(val: Option<&Val>) -> Expect {
        match val {
            None => Expect::Absent,
            Some(Val::Tensor(s)) => Expect::Tensor(s.dtype, s.shape.clone()),
            Some(Val::Seq(d, items)) => {
                Expect::Seq(*d, items.iter().map(|s| s.shape.clone()).collect())
            }
            Some(Val::Empty(d, seq)) => Expect::Empty(*d, *seq),
            Some(Val::Host(t)) => Expect::Host(t.clone()),
        }
    }

    /// Whether `val` is what was recorded (host tensors compared by contents).
    pub(super) fn matches(&self, val: Option<&Val>) -> bool {
        match (self, val) {
            (Expect::Absent, None) => true,
            (Expect::Tensor(d, dims), Some(Val::Tensor(s))) => *d == s.dtype && *dims == s.shape,
            (Expect::Seq(d, shapes), Some(Val::Seq(e, items))) => {
                d == e
                    && shapes.len() == items.len()
                    && shapes.iter().zip(items).all(|(a, b)| *a == b.shape)
            }
            (Expect::Empty(d, seq), Some(Val::Empty(e, q))) => d == e && seq == q,
            (Expect::Host(t), Some(Val::Host(u))) => same_tensor(t, u),
            _ => false,
        }
    }
}

/// Equal dtype, shape and contents.
pub(super) fn same_tensor(a: &Tensor, b: &Tensor) -> bool {
    if a.dtype() != b.dtype() || a.shape() != b.shape() {
        return false;
    }
    match (a.bytes(), b.bytes()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a.strings().ok() == b.strings().ok(),
    }
}

/// The outputs an eager step produced in the recording.
#[derive(Clone, Debug)]
pub(super) struct Expected {
    /// Per node output slot: the value and what inference knew of it on the host.
    pub(super) outputs: Vec<(Expect, Option<Tensor>)>,
    /// The memory figures of the subgraphs it ran.
    pub(super) inner: Option<MemoryFigures>,
}

/// One step's decision.
#[derive(Clone, Debug)]
pub(super) enum Decision {
    /// Computed on the host: the outputs' values.
    Folded(Vec<(ValueId, Tensor)>),
    /// Launch the step's kernel.
    Launch(Box<LaunchPlan>),
    /// Output 0 views the step's input with this dtype and shape.
    View { dtype: DType, dims: Vec<usize>, known: Option<Tensor> },
    /// Run as always, then check the outputs.
    Eager(Box<Expected>),
    /// Nothing: a fold whose outputs only later folds and shape arguments
    /// read, and those decisions already hold what they need.
    Skip,
}

/// What the recording run gathers, step by step.
#[derive(Default)]
pub(super) struct Recorder {
    pub(super) decisions: Vec<Decision>,
    /// Buffers launches allocated: `(step, output slot, buffer key)`.
    pub(super) allocs: Vec<(usize, usize, usize)>,
}

/// Everything the host decides for one signature of one graph.
#[derive(Debug)]
pub struct Schedule {
    pub(super) decisions: Vec<Decision>,
    /// Arena bytes per provider (0: none).
    pub(super) arenas: Vec<u64>,
    /// The memory figures of a run that follows the schedule.
    pub(super) figures: MemoryFigures,
}

/// A recorded allocation, as the arena planner needs it.
pub(super) struct AllocLife {
    pub(super) step: usize,
    pub(super) output: usize,
    pub(super) provider: usize,
    pub(super) life: Lifetime,
}

impl Schedule {
    /// A schedule from a recording: `lives` are the launches' allocations that
    /// were freed within the run, which go to arenas where providers have them.
    pub(super) fn new(
        mut decisions: Vec<Decision>,
        lives: &[AllocLife],
        providers: &[&dyn ExecutionProvider],
        figures: MemoryFigures,
    ) -> Schedule {
        let mut arenas = vec![0u64; providers.len()];
        for (p, ep) in providers.iter().enumerate() {
            let Some(align) = ep.arena_alignment() else { continue };
            let mine: Vec<&AllocLife> = lives.iter().filter(|a| a.provider == p).collect();
            if mine.len() < 2 {
                continue;
            }
            let spans: Vec<Lifetime> = mine.iter().map(|a| a.life).collect();
            let (offsets, size) = greedy_by_size(&spans, align);
            arenas[p] = size;
            for (a, offset) in mine.iter().zip(offsets) {
                if let Decision::Launch(l) = &mut decisions[a.step] {
                    if let Some(Some(o)) = l.outputs.get_mut(a.output) {
                        o.place = Place::Arena(offset);
                    }
                }
            }
        }
        Schedule { decisions, arenas, figures }
    }

    /// Bytes of arena per provider that a run of this schedule holds.
    pub fn arena_bytes(&self) -> &[u64] {
        &self.arenas
    }
}

enum Slot {
    /// Being recorded by a run now; others run eagerly meanwhile.
    Recording,
    Ready(Arc<Schedule>),
    /// A run with this signature strayed from the recording: always eager.
    Unstable,
}

/// What a run does about its schedule.
pub(super) enum Use {
    /// Follow this schedule.
    Follow(Arc<Schedule>),
    /// Run eagerly and record a schedule.
    Record,
    /// Run eagerly.
    Eager,
}

/// A graph's schedules, by signature, least recently used first out.
pub struct Schedules {
    capacity: usize,
    slots: Mutex<Vec<(Signature, Slot)>>,
}

impl Schedules {
    /// An empty cache holding at most `capacity` signatures (0: never schedule).
    pub fn new(capacity: usize) -> Self {
        Schedules { capacity, slots: Mutex::new(Vec::new()) }
    }

    fn slots(&self) -> MutexGuard<'_, Vec<(Signature, Slot)>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many signatures have a schedule now.
    pub fn len(&self) -> usize {
        self.slots().iter().filter(|(_, s)| matches!(s, Slot::Ready(_))).count()
    }

    /// Whether no signature has a schedule.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What a run with `sig` does, most recent first.
    pub(super) fn start(&self, sig: &Signature) -> Use {
        if self.capacity == 0 {
            return Use::Eager;
        }
        let mut slots = self.slots();
        match slots.iter().position(|(s, _)| s == sig) {
            Some(i) => {
                let entry = slots.remove(i);
                let use_ = match &entry.1 {
                    Slot::Ready(s) => Use::Follow(s.clone()),
                    Slot::Recording | Slot::Unstable => Use::Eager,
                };
                slots.insert(0, entry);
                use_
            }
            None => {
                slots.insert(0, (sig.clone(), Slot::Recording));
                slots.truncate(self.capacity);
                Use::Record
            }
        }
    }

    /// Stores a recorded schedule (`None`: the recording failed; the next run records again).
    pub(super) fn finish(&self, sig: &Signature, schedule: Option<Schedule>) {
        let mut slots = self.slots();
        let Some(i) = slots.iter().position(|(s, _)| s == sig) else { return };
        match schedule {
            Some(s) => slots[i].1 = Slot::Ready(Arc::new(s)),
            None => {
                slots.remove(i);
            }
        }
    }

    /// Marks a signature as not deciding its runs.
    pub(super) fn unstable(&self, sig: &Signature) {
        let mut slots = self.slots();
        if let Some(i) = slots.iter().position(|(s, _)| s == sig) {
            slots[i].1 = Slot::Unstable;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(n: usize) -> Signature {
        Signature(vec![Part::Tensor(DType::F32, vec![n])])
    }

    fn ready() -> Schedule {
        Schedule { decisions: vec![], arenas: vec![], figures: MemoryFigures::default() }
    }

    #[test]
    fn the_first_run_records_and_the_next_follows() {
        let c = Schedules::new(4);
        assert!(matches!(c.start(&sig(1)), Use::Record));
        // Another run while recording goes eager.
        assert!(matches!(c.start(&sig(1)), Use::Eager));
        c.finish(&sig(1), Some(ready()));
        assert!(matches!(c.start(&sig(1)), Use::Follow(_)));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn the_least_recently_used_signature_goes_first() {
        let c = Schedules::new(2);
        for n in [1, 2] {
            let _ = c.start(&sig(n));
            c.finish(&sig(n), Some(ready()));
        }
        let _ = c.start(&sig(1)); // 1 is now the most recent
        let _ = c.start(&sig(3)); // evicts 2
        c.finish(&sig(3), Some(ready()));
        assert!(matches!(c.start(&sig(1)), Use::Follow(_)));
        assert!(matches!(c.start(&sig(2)), Use::Record));
    }

    #[test]
    fn an_unstable_signature_stays_eager_and_a_failed_recording_retries() {
        let c = Schedules::new(2);
        let _ = c.start(&sig(1));
        c.finish(&sig(1), Some(ready()));
        c.unstable(&sig(1));
        assert!(matches!(c.start(&sig(1)), Use::Eager));
        let _ = c.start(&sig(2));
        c.finish(&sig(2), None);
        assert!(matches!(c.start(&sig(2)), Use::Record));
    }

    #[test]
    fn expectations_compare_host_values_by_contents() {
        let t = Tensor::from_vec(vec![2], vec![1i64, 2]).unwrap();
        let e = Expect::of(Some(&Val::Host(t.clone())));
        assert!(e.matches(Some(&Val::Host(t))));
        let u = Tensor::from_vec(vec![2], vec![1i64, 3]).unwrap();
        assert!(!e.matches(Some(&Val::Host(u))));
        assert!(!e.matches(None));
    }
}
