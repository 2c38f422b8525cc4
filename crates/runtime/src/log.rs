//! Logging with `tracing`: plain or JSON lines on stderr.

use clap::{Args, ValueEnum};
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// `--log-level` and `--log-format`, as upstream names them.
#[derive(Clone, Debug, Args)]
pub struct LogArgs {
    /// Log level: trace, debug, info, warn, error (upstream's panic and fatal mean error), or a
    /// tracing filter such as `info,linkerd_index=debug`. `RUST_LOG` overrides it.
    #[arg(long, env = "LINKERD_LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    /// Log format.
    #[arg(long, env = "LINKERD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
}

/// How log lines are written.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

impl LogArgs {
    /// Installs the global subscriber. Errors when the level is not a valid filter (upstream
    /// exits on an invalid level too).
    pub fn init(&self) -> anyhow::Result<()> {
        let level = match self.log_level.as_str() {
            "panic" | "fatal" => "error",
            other => other,
        };
        // A bare word must be a level: `inf0` would otherwise be a target filter that silently
        // turns every log line off. Directives (`info,linkerd_index=debug`) are taken as given.
        let bare = !level.contains(['=', ',', ':', '[']);
        if bare
            && !matches!(
                level.to_ascii_lowercase().as_str(),
                "trace" | "debug" | "info" | "warn" | "error" | "off"
            )
        {
            anyhow::bail!(
                "invalid --log-level {:?}: expected trace, debug, info, warn or error",
                self.log_level
            );
        }
        let filter = match std::env::var("RUST_LOG") {
            Ok(env) if !env.is_empty() => EnvFilter::try_new(env)?,
            _ => EnvFilter::try_new(level)
                .map_err(|e| anyhow::anyhow!("invalid --log-level {:?}: {e}", self.log_level))?,
        };
        let registry = tracing_subscriber::registry().with(filter);
        match self.log_format {
            LogFormat::Plain => registry
                .with(
                    fmt::layer()
                        .with_writer(std::io::stderr)
                        // Colours only on a terminal, never in a log file or a pipe.
                        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
                )
                .try_init()?,
            LogFormat::Json => registry
                .with(fmt::layer().json().with_writer(std::io::stderr))
                .try_init()?,
        }
        Ok(())
    }
}

/// Ends a binary's `main`: `Ok` exits 0; an error is reported once, as one line with its causes
/// joined by `: ` (a cause already quoted by the message before it is not repeated), and exits 1.
///
/// The line goes through the installed subscriber when logging has started, so it has the
/// level, timestamp and `--log-format` of every other line (a JSON object with `json`), and to
/// stderr as `error: ...` when it has not (a bad `--log-level`). Never anyhow's multi-line report
/// or a backtrace: log collectors take one line per event.
pub fn exit_code(result: anyhow::Result<()>) -> std::process::ExitCode {
    let Err(error) = result else {
        return std::process::ExitCode::SUCCESS;
    };
    let message = error_chain(&error);
    if tracing::dispatcher::has_been_set() {
        tracing::error!(error = %message, "exiting");
    } else {
        eprintln!("error: {message}");
    }
    std::process::ExitCode::FAILURE
}

/// `error` and its causes on one line, skipping a cause whose text the line already holds
/// (errors that print their source as well as returning it).
fn error_chain(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_word_that_is_not_a_level_is_refused() {
        let args = |level: &str| LogArgs {
            log_level: level.into(),
            log_format: LogFormat::Plain,
        };
        let err = args("inf0").init().unwrap_err().to_string();
        assert!(err.contains("inf0"), "{err}");
        assert!(args("nonsense").init().is_err());
    }

    #[test]
    fn an_error_chain_is_one_line_without_repeats() {
        #[derive(Debug, thiserror::Error)]
        #[error("dir /x: {0}")]
        struct Quoting(#[source] std::io::Error);
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        // A cause the message already prints is not repeated.
        let quoted = anyhow::Error::new(Quoting(io())).context("cannot start");
        assert_eq!(
            error_chain(&quoted),
            "cannot start: dir /x: No such file or directory"
        );
        let nested = anyhow::Error::new(io())
            .context("reading /x")
            .context("cannot start");
        assert_eq!(
            error_chain(&nested),
            "cannot start: reading /x: No such file or directory"
        );
        assert_eq!(exit_code(Ok(())), std::process::ExitCode::SUCCESS);
    }
}
