//! `dst-diag`: see the `diag` library for what it prints.

use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let args = diag::Args::parse();
    // `explain --cluster-state` builds the index in this process: the files and objects it
    // skips are logged (to stderr, as the pod logs them), so that an answer from incomplete
    // state says so. `RUST_LOG` chooses other levels.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("linkerd_index=warn"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .with_env_filter(filter)
        .try_init();
    // Ctrl-C is the ordinary way to stop watching a stream, so it is a success. If the
    // handler cannot be installed that branch is disabled and only the run ends the process.
    let result = tokio::select! {
        result = args.run() => result,
        Ok(()) = tokio::signal::ctrl_c() => Ok(()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("dst-diag: {}", diag::error_line(&error));
            ExitCode::from(error.exit_code())
        }
    }
}
