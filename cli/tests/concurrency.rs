//! Many sessions at once on one shared provider, as a server that holds
//! several models, or runs one model from several threads, would use it.
//!
//! A sample of the node-suite cases a backend's manifest says it passes is
//! first run on one thread (each case three times, so that schedules and, on
//! CUDA, graph recordings are made and used). Then eight threads build, run
//! (three times) and drop sessions of the same cases at once on the same
//! provider. Every output must equal the one-thread run's bit for bit, and
//! once every session is gone the provider must hold what it held before.
//!
//! `ONYX_CONCURRENT_CASES=N` changes the sample's size (64 by default; `all`
//! takes every case of the manifest). The CUDA test needs a GPU: without one
//! it prints why and returns, unless `ONYX_REQUIRE_CUDA=1` is set
//! (`tools/gpu-check.sh` sets it).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use onyx::core::ep::ExecutionProvider;
use onyx::{Session, Value};
use onyx_conformance::{Case, discover, ensure_node_suite, load_case_data, parse_manifest};

/// Threads that share the provider.
const THREADS: usize = 8;
/// Runs of each session: the first records a schedule, the second a replay.
const RUNS: usize = 3;

type Outputs = Vec<(String, Value)>;

/// One case of the sample: its model, one data set's inputs and the outputs
/// of the one-thread run.
struct Sampled {
    case: Case,
    inputs: Outputs,
    expected: Outputs,
}

/// An evenly spaced sample of the suite's cases named in `manifest`, so that
/// the sample spans the alphabet (and so most op families).
fn sample(manifest: &str) -> Vec<Case> {
    let dir = ensure_node_suite().unwrap_or_else(|e| panic!("{e}"));
    let names = parse_manifest(manifest);
    let cases: Vec<Case> =
        discover(&dir, None).unwrap().into_iter().filter(|c| names.contains(&c.name)).collect();
    let want = match std::env::var("ONYX_CONCURRENT_CASES").as_deref() {
        Ok("all") => cases.len(),
        Ok(n) => n.parse().expect("ONYX_CONCURRENT_CASES is a number or `all`"),
        Err(_) => 64,
    };
    let step = (cases.len() / want.max(1)).max(1);
    cases.into_iter().step_by(step).take(want).collect()
}

fn session(provider: &Arc<dyn ExecutionProvider>, case: &Case) -> Session {
    Session::builder()
        .with_provider(provider.clone())
        .with_strict(true)
        .commit_from_file(&case.model)
        .unwrap_or_else(|e| panic!("{}: {}", case.name, onyx::error_chain(&e)))
}

fn run(session: &Session, case: &Case, inputs: &Outputs) -> Outputs {
    session
        .run(inputs.clone())
        .unwrap_or_else(|e| panic!("{}: {}", case.name, onyx::error_chain(&e)))
        .values
}

/// Runs the sample on one thread. Cases whose three runs differ from each
/// other (random ops) are left out: they cannot be compared.
fn reference(provider: &Arc<dyn ExecutionProvider>, cases: Vec<Case>) -> Vec<Sampled> {
    let mut sampled = Vec::new();
    for case in cases {
        let data = load_case_data(&case).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let Some(set) = data.sets.into_iter().next() else { continue };
        let s = session(provider, &case);
        let runs: Vec<Outputs> = (0..RUNS).map(|_| run(&s, &case, &set.inputs)).collect();
        if runs.windows(2).all(|w| w[0] == w[1]) {
            let expected = runs.into_iter().next().expect("RUNS > 0");
            sampled.push(Sampled { case, inputs: set.inputs, expected });
        } else {
            eprintln!("{}: not deterministic on one thread; left out", case.name);
        }
    }
    sampled
}

/// Runs the sample on [`THREADS`] threads at once, in an order unlike the
/// reference's, and returns the mismatches.
fn concurrently(provider: &Arc<dyn ExecutionProvider>, sampled: &[Sampled]) -> Vec<String> {
    let next = AtomicUsize::new(0);
    let mismatches = std::sync::Mutex::new(Vec::new());
    // Each case twice, the second pass backwards: different neighbours in time.
    let order: Vec<usize> = (0..sampled.len()).chain((0..sampled.len()).rev()).collect();
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let s = &sampled[i];
                    let session = session(provider, &s.case);
                    for k in 0..RUNS {
                        if run(&session, &s.case, &s.inputs) != s.expected {
                            mismatches.lock().unwrap().push(format!(
                                "{} (run {}): outputs differ",
                                s.case.name,
                                k + 1
                            ));
                        }
                    }
                }
            });
        }
    });
    mismatches.into_inner().unwrap()
}

fn check(provider: Arc<dyn ExecutionProvider>, manifest: &str) {
    let before = provider.memory_stats();
    let started = std::time::Instant::now();
    let sampled = reference(&provider, sample(manifest));
    assert!(sampled.len() >= 50, "only {} comparable cases in the sample", sampled.len());
    let mismatches = concurrently(&provider, &sampled);
    let after = provider.memory_stats();
    println!(
        "{}: {} cases x {RUNS} runs, on 1 thread then twice over on {THREADS} threads, in {:.1} s; \
         {} mismatches; in use {} -> {} bytes; {} recordings left holding buffers",
        provider.name(),
        sampled.len(),
        started.elapsed().as_secs_f64(),
        mismatches.len(),
        before.in_use_bytes,
        after.in_use_bytes,
        after.recording_leaks,
    );
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert_eq!(after.in_use_bytes, before.in_use_bytes, "the sessions left buffers behind");
    assert_eq!(
        after.recording_leaks, 0,
        "a recording kept buffers that were neither freed nor outputs"
    );
}

fn open(device: &str) -> Option<Arc<dyn ExecutionProvider>> {
    let resolved = onyx::device::resolve(
        device.parse().unwrap(),
        true,
        onyx_cpu::CpuOptions::default(),
        onyx::device::GpuOptions::default(),
    );
    match resolved {
        Ok(r) => Some(r.provider),
        Err(e) if device == "cuda" && std::env::var_os("ONYX_REQUIRE_CUDA").is_none() => {
            eprintln!("skipping: no CUDA device ({})", onyx::error_chain(&e));
            None
        }
        Err(e) => panic!("{device}: {}", onyx::error_chain(&e)),
    }
}

#[test]
fn cpu_sessions_on_eight_threads_sharing_one_provider_match_a_one_thread_run() {
    check(open("cpu").unwrap(), include_str!("../../tests/manifests/node-cpu.txt"));
}

/// On Mesa lavapipe in CI; set `ONYX_SKIP_WGPU=1` on a machine with no adapter.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_sessions_on_eight_threads_sharing_one_provider_match_a_one_thread_run() {
    if std::env::var_os("ONYX_SKIP_WGPU").is_some() {
        eprintln!("ONYX_SKIP_WGPU is set: skipping");
        return;
    }
    check(open("wgpu").unwrap(), include_str!("../../tests/manifests/node-wgpu.txt"));
}

/// Sessions record CUDA graphs while others run: the case that crashed.
#[cfg(feature = "cuda")]
#[test]
fn cuda_sessions_on_eight_threads_sharing_one_provider_match_a_one_thread_run() {
    if let Some(p) = open("cuda") {
        check(p, include_str!("../../tests/manifests/node-cuda.txt"));
    }
}
