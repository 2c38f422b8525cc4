//! `controller`: the entrypoint of the drop-in image (`docker/controller.Dockerfile`).
//!
//! Upstream's chart runs two containers of the `linkerd-destination` pod from its controller
//! image as `/controller destination -addr=:8086 ...` and `/controller sp-validator ...`
//! (spec/sp-validator-and-pod.md §c.2). This binary stands in that place: it replaces itself
//! (`exec`) with the `destination` or `sp-validator` binary that lies beside it, passing the
//! remaining arguments unchanged, so that the process the kubelet signals and whose exit it
//! watches is the server itself. Those binaries read upstream's Go-style flags
//! (`linkerd_runtime::go_flags`).
//!
//! Exit codes: 2 for a missing or unknown subcommand, 1 when the binary cannot be run.

#![forbid(unsafe_code)]

use std::{
    ffi::OsString,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Command, ExitCode},
};

/// The subcommands, each the name of the binary it runs.
const SUBCOMMANDS: [&str; 2] = ["destination", "sp-validator"];

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Dispatch {
    /// Run this binary (a name of [`SUBCOMMANDS`]) with these arguments.
    Run(&'static str, Vec<OsString>),
    Help,
    Version,
    /// No subcommand, or one this image does not have.
    Unknown(Option<OsString>),
}

fn main() -> ExitCode {
    match dispatch(std::env::args_os().skip(1)) {
        Dispatch::Run(name, args) => {
            let path = beside_this_binary(name);
            // `exec` returns only when it fails.
            let error = Command::new(&path).arg0(name).args(args).exec();
            eprintln!("error: cannot run {}: {error}", path.display());
            ExitCode::FAILURE
        }
        Dispatch::Help => {
            println!("{}", usage());
            ExitCode::SUCCESS
        }
        Dispatch::Version => {
            println!("controller {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Dispatch::Unknown(subcommand) => {
            match subcommand {
                None => eprintln!("error: no subcommand\n\n{}", usage()),
                Some(name) => eprintln!(
                    "error: unknown subcommand {:?}: this image runs only destination and \
                     sp-validator (upstream's identity, proxy-injector and heartbeat are not \
                     part of it)\n\n{}",
                    name.to_string_lossy(),
                    usage()
                ),
            }
            ExitCode::from(2)
        }
    }
}

/// Reads the arguments after the program name.
fn dispatch(mut args: impl Iterator<Item = OsString>) -> Dispatch {
    let Some(first) = args.next() else {
        return Dispatch::Unknown(None);
    };
    match first.to_str() {
        Some("-h" | "-help" | "--help" | "help") => Dispatch::Help,
        Some("-version" | "--version" | "-V") => Dispatch::Version,
        Some(name) => match SUBCOMMANDS.iter().find(|s| **s == name) {
            Some(binary) => Dispatch::Run(binary, args.collect()),
            None => Dispatch::Unknown(Some(first)),
        },
        None => Dispatch::Unknown(Some(first)),
    }
}

/// `name` in this binary's directory (`/destination` beside `/controller` in the image).
fn beside_this_binary(name: &str) -> PathBuf {
    let dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("/"));
    dir.join(name)
}

fn usage() -> String {
    format!(
        "usage: controller <{}> [FLAGS...]\n\nRuns the subcommand's binary from this binary's \
         directory with the flags (see `controller destination --help`).",
        SUBCOMMANDS.join("|")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Dispatch {
        dispatch(args.iter().map(OsString::from))
    }

    #[test]
    fn subcommands_take_the_rest_of_the_line_unchanged() {
        assert_eq!(
            parse(&["destination", "-addr=:8086", "--", "x"]),
            Dispatch::Run(
                "destination",
                vec!["-addr=:8086".into(), "--".into(), "x".into()]
            )
        );
        assert_eq!(
            parse(&["sp-validator"]),
            Dispatch::Run("sp-validator", vec![])
        );
    }

    #[test]
    fn help_version_and_unknown_subcommands() {
        assert_eq!(parse(&["-help"]), Dispatch::Help);
        assert_eq!(parse(&["--version"]), Dispatch::Version);
        assert_eq!(parse(&[]), Dispatch::Unknown(None));
        assert_eq!(
            parse(&["identity", "-addr=:8080"]),
            Dispatch::Unknown(Some("identity".into()))
        );
        // Only the first argument names the subcommand.
        assert_eq!(
            parse(&["-addr=:8086", "destination"]),
            Dispatch::Unknown(Some("-addr=:8086".into()))
        );
    }
}
