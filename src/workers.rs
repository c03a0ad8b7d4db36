//! Where a session's CPU kernels run: the caller's thread, the session's own
//! rayon pool (with spinning workers during a run), or rayon's global pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
#[cfg(not(target_arch = "wasm32"))]
use std::time::Instant;

#[cfg(target_arch = "wasm32")]
use web_time::Instant;

/// Where a session's CPU kernels run.
pub(crate) enum Workers {
    /// No thread count given: rayon's global pool (all cores), entered from the caller.
    Global,
    /// One thread: the caller's own. Kernels loop serially ([`onyx_cpu::serial`]),
    /// so a run hands nothing to another thread and never waits for one to wake.
    Caller,
    /// The session's own pool. A run goes to it unless the previous run was
    /// short (see [`SERIAL_BELOW`]); then it stays on the caller, serially.
    Pool {
        /// The threads.
        pool: Arc<rayon::ThreadPool>,
        /// Wall time of the last run, in microseconds (0 before the first).
        last_us: AtomicU64,
    },
}

/// Runs that took less than this stay on the caller's thread. Handing a run to
/// a pool and back costs two thread wake-ups, tens of microseconds each (more
/// on a virtual machine), and a second thread saves at most half of a run; a
/// sub-millisecond model such as a voice-activity detector ran 1.8× slower in
/// a two-thread pool than serially on the caller. The rule looks at the last
/// run, so a session whose inputs grow goes back to the pool.
const SERIAL_BELOW: Duration = Duration::from_millis(1);

/// Keeps the pool's other threads awake and stealing work for as long as it
/// lives (a run), as onnxruntime's pool spins between parallel sections.
///
/// Without it, a worker that finds no work goes to sleep within microseconds,
/// and the next kernel that splits its loop must wake it: on a virtual machine
/// that costs tens of microseconds per kernel, and a CNN of 60 kernels ran
/// only 1.2× faster on two threads than on one.
///
/// A spinner also gives up after [`SPIN_IDLE`] without work. It is a rayon
/// job, and rayon stacks jobs: a worker that stole half of a kernel's split
/// loop and waits for the other half picks up whatever job is queued, which
/// can be the run's own spinner. A spinner that returned only at the end of
/// the run then sat on top of the stolen half the run was waiting for, and
/// both threads waited for each other forever. That happened within a few
/// hundred runs of the CNN at two threads while other processes kept the
/// cores busy; now such a stack unwinds after [`SPIN_IDLE`].
struct Spinners(Arc<AtomicBool>);

/// How long a [`Spinners`] thread keeps looking for work without finding
/// any before it returns (and its thread may go to sleep). Longer than the
/// gaps between a run's parallel kernels, short enough that a spinner
/// stacked on top of work the run waits for (see [`Spinners`]) costs a
/// fraction of a millisecond, not a hang.
const SPIN_IDLE: Duration = Duration::from_micros(500);

impl Spinners {
    /// Starts a spinner on every thread of the current pool but this one.
    fn start() -> Spinners {
        let done = Arc::new(AtomicBool::new(false));
        let me = rayon::current_thread_index();
        let flag = done.clone();
        rayon::spawn_broadcast(move |ctx| {
            // Our own copy returns at once: this thread runs the model.
            if Some(ctx.index()) == me {
                return;
            }
            let mut idle_since = Instant::now();
            while !flag.load(Ordering::Acquire) {
                if rayon::yield_now() == Some(rayon::Yield::Executed) {
                    idle_since = Instant::now();
                } else if idle_since.elapsed() > SPIN_IDLE {
                    return;
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        Spinners(done)
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

impl Workers {
    /// A session's own pool of threads.
    pub(crate) fn pool(pool: rayon::ThreadPool) -> Workers {
        Workers::Pool { pool: Arc::new(pool), last_us: AtomicU64::new(0) }
    }

    /// Runs `f` (a session run) on these workers.
    pub(crate) fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match self {
            Workers::Global => f(),
            Workers::Caller => onyx_cpu::serial(f),
            Workers::Pool { pool, last_us } => {
                let start = Instant::now();
                let last = last_us.load(Ordering::Relaxed);
                let r = if last > 0 && last < SERIAL_BELOW.as_micros() as u64 {
                    onyx_cpu::serial(f)
                } else {
                    pool.install(|| {
                        let _spinning = Spinners::start();
                        f()
                    })
                };
                last_us.store(start.elapsed().as_micros().max(1) as u64, Ordering::Relaxed);
                r
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits `0..n` in halves down to single items, as a kernel's parallel
    /// loop does, so that another worker can steal either half at each level.
    #[allow(clippy::disallowed_methods)] // A split loop of rayon's own, on purpose.
    fn split(n: usize) -> usize {
        if n <= 1 {
            return (0..5000).fold(n, |a, i| std::hint::black_box(a ^ i));
        }
        let (a, b) = rayon::join(|| split(n / 2), || split(n - n / 2));
        a.wrapping_add(b)
    }

    #[test]
    fn runs_on_a_spinning_pool_finish_while_other_threads_keep_the_cores_busy() {
        // A spinner that returned only at the end of its run could end up on
        // top of a stolen half of a split that the run waits for (rayon
        // stacks jobs), and the run never finished: with the cores kept busy
        // that happened within a few hundred runs of a CNN. Probabilistic:
        // with spinners that never gave up, this test failed in 4 of 6 tries
        // on a 2-core machine; with the bound it passed every time (1–8 s).
        const RUNS: usize = 10_000;
        let stop = Arc::new(AtomicBool::new(false));
        let hogs: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let workers =
            Workers::pool(rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap());
        let (done, finished) = std::sync::mpsc::channel();
        // Detached: a deadlocked run never returns, and the test fails below
        // instead of hanging.
        std::thread::spawn(move || {
            for i in 0..RUNS {
                // Through the pool every time (the short-run rule would keep
                // later runs on the caller).
                if let Workers::Pool { last_us, .. } = &workers {
                    last_us.store(0, Ordering::Relaxed);
                }
                workers.run(|| split(64));
                done.send(i).unwrap();
            }
        });
        let hung = (0..RUNS).find(|_| finished.recv_timeout(Duration::from_secs(30)).is_err());
        stop.store(true, Ordering::Relaxed);
        for h in hogs {
            h.join().unwrap();
        }
        assert_eq!(hung, None, "a run did not finish in 30 s: the pool deadlocked");
    }
}
