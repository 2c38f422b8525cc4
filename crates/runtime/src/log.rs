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
                .with(fmt::layer().with_writer(std::io::stderr))
                .try_init()?,
            LogFormat::Json => registry
                .with(fmt::layer().json().with_writer(std::io::stderr))
                .try_init()?,
        }
        Ok(())
    }
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
}
