//! `dst-diag`: see the `diag` library for what it prints.

use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let args = diag::Args::parse();
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
