//! Command lines as upstream's chart writes them, so the binaries can replace upstream's
//! containers with the chart's arguments unchanged.
//!
//! Upstream's `destination` and `sp-validator` are Go programs: their flags are written with
//! one dash or two (`-addr=:8086`, `--meshed-http2-client-params=...`), a boolean alone means
//! true (`-enable-pprof`), and a flag given twice takes its last value (the chart's
//! `additionalArgs` come after its own, so a user's override wins). clap wants two dashes and
//! refuses repeats; [`try_parse_from`] rewrites a command line into clap's form first, against
//! the binary's own clap [`Command`], and drops the upstream flags this binary accepts without
//! implementing them ([`Unimplemented`]), returning a warning for each that says what it means
//! here. A flag that is neither known nor listed still fails the parse, as it fails upstream.

use crate::args::parse_bool;
use clap::{Command, Parser, error::ErrorKind};
use std::ffi::OsString;

/// An upstream flag that this binary accepts and does not implement.
#[derive(Clone, Copy, Debug)]
pub struct Unimplemented {
    /// The name without dashes: `enable-pprof`.
    pub name: &'static str,
    /// Whether it takes a value (`-trace-collector=ADDR`, `-trace-collector ADDR`); `false` for
    /// a Go boolean (`-enable-pprof`, `-enable-pprof=false`), whose value must then be one Go
    /// accepts.
    pub takes_value: bool,
    /// What the flag means here, for the warning: `no /debug/pprof endpoints are served`.
    pub meaning: &'static str,
}

/// A parsed command line and the warnings to log once logging is set up.
#[derive(Debug)]
pub struct CommandLine<T> {
    /// The parsed flags.
    pub args: T,
    /// One line per [`Unimplemented`] flag given: the flag as written, then what it means here.
    pub warnings: Vec<String>,
}

impl<T> CommandLine<T> {
    /// Logs each warning at `warn` (call after the subscriber is installed).
    pub fn log_warnings(&self) {
        for warning in &self.warnings {
            tracing::warn!("{warning}");
        }
    }
}

/// Parses the process's command line as [`try_parse_from`] does; on an error (or `--help`,
/// `--version`) prints clap's message and exits, as [`Parser::parse`] does.
pub fn parse<T: Parser>(unimplemented: &[Unimplemented]) -> CommandLine<T> {
    match try_parse_from(std::env::args_os(), unimplemented) {
        Ok(line) => line,
        Err(error) => error.exit(),
    }
}

/// Parses `argv` (program name first) into `T` after rewriting it into clap's form:
///
/// - `-name[=value]` of a long flag of `T` becomes `--name[=value]`; one-letter flags (`-h`,
///   `-V`) are left alone;
/// - a flag that needs a value and has none after `=` takes the next argument, even one that
///   starts with `-` (as Go does);
/// - a flag listed in `unimplemented` is removed (with its value) and reported in
///   [`CommandLine::warnings`];
/// - a flag given more than once takes its last value; flags that collect a list keep every
///   value;
/// - arguments after `--`, and arguments that are not flags, are passed as they are.
///
/// Errors are clap's, formatted for `T`'s command: unknown flags, bad values, and an
/// unimplemented boolean with a value Go would refuse (`-enable-pprof=maybe`).
pub fn try_parse_from<T, I, A>(
    argv: I,
    unimplemented: &[Unimplemented],
) -> Result<CommandLine<T>, clap::Error>
where
    T: Parser,
    I: IntoIterator<Item = A>,
    A: Into<OsString>,
{
    let mut command = T::command().args_override_self(true);
    command.build();
    let given: Vec<OsString> = argv.into_iter().map(Into::into).collect();
    let (argv, warnings) = normalize(&command, given.iter().cloned(), unimplemented)
        .map_err(|message| command.error(ErrorKind::InvalidValue, message))?;
    let matches = command
        .try_get_matches_from_mut(argv)
        .map_err(|error| as_written(error, &given, &mut command))?;
    let args = T::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
    Ok(CommandLine { args, warnings })
}

/// `error` naming an unknown flag as the user wrote it: `-bogus`, not the `--bogus` that
/// [`normalize`] made of it.
fn as_written(error: clap::Error, given: &[OsString], command: &mut Command) -> clap::Error {
    use clap::error::{ContextKind, ContextValue};
    if error.kind() != ErrorKind::UnknownArgument {
        return error;
    }
    let Some(ContextValue::String(rewritten)) = error.get(ContextKind::InvalidArg) else {
        return error;
    };
    // `-enable-ipv6 false`: a boolean flag takes its value after `=` (in Go too), so the value
    // was read as an argument of its own.
    if matches!(rewritten.as_str(), "true" | "false") {
        let written: Vec<&str> = given.iter().skip(1).filter_map(|a| a.to_str()).collect();
        if let Some(flag) = written
            .windows(2)
            .find(|w| w[1] == rewritten && w[0].starts_with('-') && !w[0].contains('='))
            .map(|w| w[0])
        {
            return command.error(
                ErrorKind::UnknownArgument,
                format!(
                    "unexpected argument '{rewritten}' found: a boolean flag takes its value after '=' ({flag}={rewritten})"
                ),
            );
        }
    }
    let Some(name) = rewritten.strip_prefix("--") else {
        return error;
    };
    let single = format!("-{name}");
    let written_so = given.iter().skip(1).filter_map(|a| a.to_str()).any(|a| {
        a == single
            || a.strip_prefix(single.as_str())
                .is_some_and(|rest| rest.starts_with('='))
    });
    if !written_so {
        return error;
    }
    command.error(
        ErrorKind::UnknownArgument,
        format!("unexpected argument '{single}' found"),
    )
}

/// The rewriting of [`try_parse_from`]; `command` must be built.
fn normalize(
    command: &Command,
    argv: impl Iterator<Item = OsString>,
    unimplemented: &[Unimplemented],
) -> Result<(Vec<OsString>, Vec<String>), String> {
    let mut argv = argv.peekable();
    let mut out: Vec<OsString> = argv.next().into_iter().collect();
    let mut warnings = Vec::new();
    while let Some(arg) = argv.next() {
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            out.push(arg);
            out.extend(argv.by_ref());
            break;
        }
        let single = !text.starts_with("--");
        let Some(body) = text.strip_prefix("--").or_else(|| text.strip_prefix('-')) else {
            out.push(arg);
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (body, None),
        };
        if name.is_empty() || (single && name.chars().count() == 1) {
            out.push(arg);
            continue;
        }
        if let Some(flag) = unimplemented.iter().find(|f| f.name == name) {
            let value = match inline {
                Some(value) => Some(value.to_string()),
                None if flag.takes_value => argv.next().map(|v| v.to_string_lossy().into_owned()),
                None => None,
            };
            if !flag.takes_value
                && let Some(value) = &value
            {
                parse_bool(value).map_err(|e| format!("-{name}: {e}"))?;
            }
            let written = match &value {
                Some(value) => format!("-{name}={value}"),
                None => format!("-{name}"),
            };
            warnings.push(format!(
                "{written}: accepted as upstream's chart passes it, not implemented here: {}",
                flag.meaning
            ));
            continue;
        }
        let needs_value = command
            .get_arguments()
            .find(|a| {
                a.get_long() == Some(name)
                    || a.get_all_aliases().is_some_and(|all| all.contains(&name))
            })
            .and_then(|a| a.get_num_args())
            .is_some_and(|range| range.min_values() > 0);
        match (inline, needs_value) {
            // `--name=value` keeps a value that starts with `-` from being read as a flag.
            (None, true) => match argv.next() {
                Some(value) => {
                    let mut joined = OsString::from(format!("--{name}="));
                    joined.push(value);
                    out.push(joined);
                }
                None => out.push(format!("--{name}").into()),
            },
            _ => out.push(format!("--{body}").into()),
        }
    }
    Ok((out, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command line of the shapes the binaries have.
    #[derive(Debug, Parser)]
    #[command(name = "example", version)]
    struct Example {
        #[arg(long, default_value = "0.0.0.0:8086")]
        addr: String,
        #[arg(long, alias = "metrics-addr", default_value = "0.0.0.0:9996")]
        admin_addr: String,
        #[arg(long, default_value = "true", value_parser = parse_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
        enable_h2_upgrade: bool,
        #[arg(long, default_value = "")]
        default_opaque_ports: String,
        #[arg(long)]
        linked: Vec<String>,
    }

    const UNIMPLEMENTED: &[Unimplemented] = &[
        Unimplemented {
            name: "enable-pprof",
            takes_value: false,
            meaning: "no /debug/pprof endpoints are served",
        },
        Unimplemented {
            name: "trace-collector",
            takes_value: true,
            meaning: "no traces are exported",
        },
    ];

    fn parse(argv: &[&str]) -> Result<CommandLine<Example>, clap::Error> {
        try_parse_from(argv.iter().copied(), UNIMPLEMENTED)
    }

    #[test]
    fn single_dash_flags_as_go_writes_them() {
        let line = parse(&[
            "example",
            "-addr=:8086",
            "-metrics-addr",
            "127.0.0.1:1",
            "-enable-h2-upgrade=false",
            "--default-opaque-ports=25,587",
        ])
        .unwrap();
        assert_eq!(line.args.addr, ":8086");
        assert_eq!(line.args.admin_addr, "127.0.0.1:1");
        assert!(!line.args.enable_h2_upgrade);
        assert_eq!(line.args.default_opaque_ports, "25,587");
        assert!(line.warnings.is_empty());

        // A boolean alone is true; a separate value may start with a dash.
        let line = parse(&["example", "-enable-h2-upgrade", "-addr", "-x"]).unwrap();
        assert!(line.args.enable_h2_upgrade);
        assert_eq!(line.args.addr, "-x");
    }

    #[test]
    fn the_last_value_wins_and_lists_keep_every_value() {
        let line = parse(&[
            "example",
            "-addr=:8086",
            "-enable-h2-upgrade=false",
            "--linked=a",
            "-linked=b",
            "--addr=127.0.0.1:0",
            "-enable-h2-upgrade=true",
        ])
        .unwrap();
        assert_eq!(line.args.addr, "127.0.0.1:0");
        assert!(line.args.enable_h2_upgrade);
        assert_eq!(line.args.linked, ["a", "b"]);
    }

    #[test]
    fn unimplemented_flags_are_dropped_with_a_warning() {
        let line = parse(&[
            "example",
            "-enable-pprof=false",
            "-trace-collector",
            "collector.linkerd-jaeger:55678",
            "--enable-pprof",
            "-addr=:1",
        ])
        .unwrap();
        assert_eq!(line.args.addr, ":1");
        assert_eq!(
            line.warnings,
            [
                "-enable-pprof=false: accepted as upstream's chart passes it, not implemented here: no /debug/pprof endpoints are served",
                "-trace-collector=collector.linkerd-jaeger:55678: accepted as upstream's chart passes it, not implemented here: no traces are exported",
                "-enable-pprof: accepted as upstream's chart passes it, not implemented here: no /debug/pprof endpoints are served",
            ]
        );
    }

    #[test]
    fn unknown_flags_and_bad_values_are_refused() {
        // Named as written: one dash stays one dash.
        let err = parse(&["example", "-no-such-flag=1"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnknownArgument);
        assert!(err.to_string().contains("'-no-such-flag'"), "{err}");
        let err = parse(&["example", "-bogus"]).unwrap_err();
        assert!(err.to_string().contains("'-bogus'"), "{err}");
        let err = parse(&["example", "--bogus"]).unwrap_err();
        assert!(err.to_string().contains("'--bogus'"), "{err}");

        // A boolean's value given as an argument of its own: the hint says how to write it.
        for flag in ["-enable-h2-upgrade", "--enable-h2-upgrade"] {
            let err = parse(&["example", flag, "false"]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::UnknownArgument);
            assert!(
                err.to_string().contains(&format!(
                    "unexpected argument 'false' found: a boolean flag takes its value after '=' ({flag}=false)"
                )),
                "{err}"
            );
        }

        let err = parse(&["example", "-enable-pprof=maybe"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidValue);
        assert!(err.to_string().contains("\"maybe\""), "{err}");

        let err = parse(&["example", "-enable-h2-upgrade=maybe"]).unwrap_err();
        assert!(err.to_string().contains("\"maybe\""), "{err}");
    }

    #[test]
    fn short_flags_positionals_and_the_end_of_flags_pass_through() {
        let err = parse(&["example", "-h"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DisplayHelp);
        let err = parse(&["example", "-version"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DisplayVersion);
        // After `--`, `-addr` is not rewritten: a positional the command does not take.
        let err = parse(&["example", "--", "-addr=:1"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnknownArgument);
    }
}
