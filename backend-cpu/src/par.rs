//! Parallel loops that can also run serially on the calling thread.
//!
//! Every parallel loop of the CPU kernels goes through [`Loop`]. Inside
//! [`serial`] those loops take rayon's producer and iterate it in place, on
//! the calling thread: no pool, no task hand-off, and no touch of rayon's
//! global pool. Elsewhere they are plain rayon loops, on whatever pool the
//! caller installed.
//!
//! Why: a session limited to one thread used to run inside a one-thread rayon
//! pool, so every run handed itself to the pool's worker and the caller slept
//! until it came back. Waking a sleeping thread costs tens of microseconds on a
//! virtual machine, which was a third of a small model's run. onnxruntime runs
//! a one-thread session on the caller's thread; so does Onyx now.

use std::cell::Cell;
use std::marker::PhantomData;

use rayon::iter::plumbing::{Producer, ProducerCallback};
use rayon::iter::{FromParallelIterator, IndexedParallelIterator, ParallelIterator};

thread_local! {
    static SERIAL: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with every CPU kernel it launches on this thread kept on this
/// thread: their loops run serially, and matrix products use no threads.
///
/// Use it for a one-thread session instead of a one-thread pool. Nested calls
/// are fine; the previous setting comes back when `f` returns or unwinds.
pub fn serial<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SERIAL.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SERIAL.with(|s| s.replace(true)));
    f()
}

/// Whether kernels on this thread run serially (inside [`serial`]).
pub(crate) fn is_serial() -> bool {
    SERIAL.with(Cell::get)
}

/// The loops the kernels run: rayon's when parallel, a plain iterator over
/// rayon's producer when [`serial`]. The workspace's `clippy.toml` forbids
/// calling rayon's loops directly anywhere else.
#[allow(clippy::disallowed_methods)]
pub(crate) trait Loop: IndexedParallelIterator {
    /// `for_each`.
    fn each<F>(self, f: F)
    where
        F: Fn(Self::Item) + Sync + Send,
    {
        if is_serial() { self.with_producer(Each(f)) } else { self.for_each(f) }
    }

    /// `for_each_init`: in a serial run, one `init` for the whole loop.
    fn each_init<T, I, F>(self, init: I, f: F)
    where
        I: Fn() -> T + Sync + Send,
        F: Fn(&mut T, Self::Item) + Sync + Send,
    {
        if is_serial() {
            self.with_producer(EachInit(init, f))
        } else {
            self.for_each_init(init, f)
        }
    }

    /// `try_for_each`: the first error (in a serial run, in order) stops the loop.
    fn try_each<E, F>(self, f: F) -> Result<(), E>
    where
        E: Send,
        F: Fn(Self::Item) -> Result<(), E> + Sync + Send,
    {
        if is_serial() { self.with_producer(TryEach(f)) } else { self.try_for_each(f) }
    }

    /// `map(f).collect()`, in order.
    fn map_collect<R, C, F>(self, f: F) -> C
    where
        R: Send,
        C: FromIterator<R> + FromParallelIterator<R>,
        F: Fn(Self::Item) -> R + Sync + Send,
    {
        if is_serial() {
            self.with_producer(Collect(f, PhantomData))
        } else {
            ParallelIterator::collect(self.map(f))
        }
    }
}

impl<P: IndexedParallelIterator> Loop for P {}

// Producer callbacks that iterate the producer on this thread, one per loop
// kind (a closure cannot be generic over the producer's iterator type).

struct Each<F>(F);

impl<T, F: Fn(T)> ProducerCallback<T> for Each<F> {
    type Output = ();
    fn callback<P: Producer<Item = T>>(self, producer: P) {
        producer.into_iter().for_each(self.0)
    }
}

struct EachInit<I, F>(I, F);

impl<T, S, I: Fn() -> S, F: Fn(&mut S, T)> ProducerCallback<T> for EachInit<I, F> {
    type Output = ();
    fn callback<P: Producer<Item = T>>(self, producer: P) {
        let mut state = (self.0)();
        producer.into_iter().for_each(|x| (self.1)(&mut state, x))
    }
}

struct TryEach<F>(F);

impl<T, E, F: Fn(T) -> Result<(), E>> ProducerCallback<T> for TryEach<F> {
    type Output = Result<(), E>;
    fn callback<P: Producer<Item = T>>(self, producer: P) -> Result<(), E> {
        producer.into_iter().try_for_each(self.0)
    }
}

struct Collect<F, C>(F, PhantomData<fn() -> C>);

impl<T, R, C: FromIterator<R>, F: Fn(T) -> R> ProducerCallback<T> for Collect<F, C> {
    type Output = C;
    fn callback<P: Producer<Item = T>>(self, producer: P) -> C {
        producer.into_iter().map(self.0).collect()
    }
}

#[cfg(test)]
mod tests {
    use rayon::prelude::*;

    use super::*;

    #[test]
    fn a_serial_loop_runs_every_item_in_order_on_the_calling_thread() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let me = std::thread::current().id();
        let mut out = vec![0usize; 1000];
        let seen = std::sync::Mutex::new(Vec::new());
        serial(|| {
            out.par_chunks_mut(10).enumerate().with_min_len(1).each(|(i, c)| {
                assert_eq!(std::thread::current().id(), me);
                seen.lock().unwrap().push(i);
                c.fill(i);
            })
        });
        assert_eq!(seen.into_inner().unwrap(), (0..100).collect::<Vec<_>>());
        assert!(out.iter().enumerate().all(|(j, &v)| v == j / 10));
        // Outside `serial` the same loop runs on the pool's threads.
        let threads = std::sync::Mutex::new(std::collections::HashSet::new());
        pool.install(|| {
            out.par_chunks_mut(1).each(|_| {
                threads.lock().unwrap().insert(std::thread::current().id());
            })
        });
        assert!(!threads.into_inner().unwrap().contains(&me));
        assert!(!is_serial());
    }

    #[test]
    fn serial_loops_stop_at_the_first_error_and_collect_in_order() {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let r: Result<(), usize> = serial(|| {
            (0..100usize).into_par_iter().try_each(|i| {
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i == 3 { Err(i) } else { Ok(()) }
            })
        });
        assert_eq!(r, Err(3));
        assert_eq!(calls.into_inner(), 4);
        let squares: Vec<usize> = serial(|| (0..5usize).into_par_iter().map_collect(|i| i * i));
        assert_eq!(squares, vec![0, 1, 4, 9, 16]);
        let mut inits = 0;
        let counter = std::sync::Mutex::new(&mut inits);
        serial(|| {
            (0..50usize).into_par_iter().each_init(|| **counter.lock().unwrap() += 1, |_, _| {})
        });
        assert_eq!(inits, 1);
    }

    #[test]
    fn serial_restores_the_previous_setting_when_its_closure_panics() {
        let r = std::panic::catch_unwind(|| serial(|| panic!("boom")));
        assert!(r.is_err());
        assert!(!is_serial());
        serial(|| serial(|| assert!(is_serial())));
        assert!(!is_serial());
    }
}
