//! The `onyx` command line: run a model, describe it, run the conformance suite.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = cli::Cli::parse();
    match cli::dispatch(args) {
        Ok(code) => code,
        Err(e) => {
            // The whole chain: what the CLI was doing, then every layer down to the cause.
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
