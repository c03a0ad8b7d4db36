//! The `onyx` command line: run a model, describe it, time it, run the
//! conformance suites. A crate of its own, so that programs using the `onyx`
//! library get none of its dependencies (clap, indicatif, env_logger,
//! mimalloc, regex, serde_json, the conformance harness).

mod args;
mod bench;
mod conformance;
mod generate;
mod info;
mod io;
mod run;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of the system allocator: the executor makes a few small
/// allocations per step (shapes, argument lists), and on a model of
/// sub-millisecond runs glibc's malloc and free were over a tenth of the
/// time (ARCHITECTURE.md, the crates table). Only the CLI chooses this;
/// programs using the library keep their own allocator.
#[cfg(not(target_arch = "wasm32"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Lets a closed stdout end the process quietly, as it ends other Unix
/// tools: Rust ignores SIGPIPE, so `onyx info m.onnx | head` would panic on
/// its next `println!` ("failed printing to stdout") instead.
#[cfg(unix)]
fn default_sigpipe() {
    // SAFETY: called first in `main`, before any other thread exists;
    // SIG_DFL is a valid disposition for SIGPIPE.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

fn main() -> ExitCode {
    #[cfg(unix)]
    default_sigpipe();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = args::Cli::parse();
    match args::dispatch(args) {
        Ok(code) => code,
        Err(e) => {
            // The whole chain: what the CLI was doing, then every layer down to the cause.
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
