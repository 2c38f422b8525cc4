//! Logging with `tracing`: plain or JSON lines on stderr.

use clap::{Args, ValueEnum};
use tracing_subscriber::{
    EnvFilter,
    field::RecordFields,
    fmt::{
        self, FormatFields,
        format::{DefaultFields, Writer},
    },
    prelude::*,
};

/// `--log-level` and `--log-format`, as upstream names them.
#[derive(Clone, Debug, Args)]
pub struct LogArgs {
    /// Log level: trace, debug, info, warn, error (upstream's panic and fatal mean error), or a
    /// tracing filter such as `info,linkerd_index=debug`. `RUST_LOG` overrides it.
    #[arg(long, env = "LINKERD_LOG_LEVEL", default_value = "info", value_parser = log_level)]
    pub log_level: String,

    /// Log format.
    #[arg(long, env = "LINKERD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
}

/// The filter of a bare `level`: that level, except that
/// - at `info` the `notify` crate's own info lines (a watch it could not remove from a deleted
///   state directory) are left out;
/// - below `debug` kube-client's line for each failed request is left out: it is an `ERROR`
///   that names neither the resource nor the cause (`failed with error client error
///   (Connect)`), and the index's own warning for the same failure says which watch or Lease
///   failed, why, and when it retries (newcomer finding: the pair made every retry two lines).
fn bare_filter(level: &str) -> String {
    let mut filter = level.to_string();
    if level.eq_ignore_ascii_case("info") {
        filter.push_str(",notify=warn");
    }
    if !(level.eq_ignore_ascii_case("debug") || level.eq_ignore_ascii_case("trace")) {
        filter.push_str(",kube_client::client::builder=off");
    }
    filter
}

/// `--log-level` (or `RUST_LOG`) read as [`LogArgs::init`] uses it: upstream's `panic` and
/// `fatal` mean `error`, alone or as one directive of several, in any case.
///
/// Errors (for `--log-level`, a usage error: exit status 2, before anything starts) on a
/// directive that is one word and no level: `inf0` or `verbose`, alone or in
/// `inf0,linkerd_index=debug`, would otherwise be a target filter that silently turns every
/// other log line off, warnings included. A target's level is written `target=level`.
/// Other directives are taken when tracing's filter reads them.
fn log_level(value: &str) -> Result<String, String> {
    const EXPECTED: &str = "expected trace, debug, info, warn or error";
    let mut directives = Vec::new();
    for directive in value.split(',') {
        let word = directive.trim();
        if !is_bare(word) {
            directives.push(directive.to_string());
            continue;
        }
        let lower = word.to_ascii_lowercase();
        match lower.as_str() {
            "panic" | "fatal" => directives.push("error".into()),
            "trace" | "debug" | "info" | "warn" | "error" | "off" => {
                directives.push(directive.to_string())
            }
            // `a,,b` and a trailing comma: tracing skips empty directives.
            "" if value.contains(',') => {}
            "" => return Err(EXPECTED.into()),
            _ if value.contains(',') => {
                return Err(format!(
                    "{word:?} is no level: {EXPECTED} (a target's level is written target=level)"
                ));
            }
            _ => return Err(EXPECTED.into()),
        }
    }
    let level = directives.join(",");
    if !is_bare(&level)
        && let Err(e) = EnvFilter::try_new(&level)
    {
        return Err(e.to_string());
    }
    Ok(level)
}

/// Whether `level` is one word (a level), not tracing filter directives.
fn is_bare(level: &str) -> bool {
    !level.contains(['=', ',', ':', '['])
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
        let level = log_level(&self.log_level)
            .map_err(|e| anyhow::anyhow!("invalid --log-level {:?}: {e}", self.log_level))?;
        let bare = is_bare(&level);
        let filter = match std::env::var("RUST_LOG") {
            Ok(env) if !env.is_empty() => rust_log_filter(&env)?,
            _ => EnvFilter::try_new(if bare { bare_filter(&level) } else { level })
                .map_err(|e| anyhow::anyhow!("invalid --log-level {:?}: {e}", self.log_level))?,
        };
        let registry = tracing_subscriber::registry().with(filter);
        match self.log_format {
            LogFormat::Plain => registry
                .with(
                    fmt::layer()
                        .fmt_fields(EscapedFields::default())
                        .with_writer(std::io::stderr)
                        // Colours only on a terminal, never in a log file or a pipe.
                        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
                )
                .try_init()?,
            LogFormat::Json => registry
                .with(
                    fmt::layer()
                        .json()
                        .with_writer(|| CutJsonLines(std::io::stderr())),
                )
                .try_init()?,
        }
        Ok(())
    }
}

/// The filter `RUST_LOG` sets, read as `--log-level` is ([`log_level`]: a word that is no
/// level is refused); its error names the variable (final tester's finding:
/// `RUST_LOG='garbage[[['` printed only `invalid filter directive`).
fn rust_log_filter(env: &str) -> anyhow::Result<EnvFilter> {
    log_level(env)
        .and_then(|filter| EnvFilter::try_new(filter).map_err(|e| e.to_string()))
        .map_err(|e| anyhow::anyhow!("invalid RUST_LOG {env:?}: {e}"))
}

/// The fields of a plain log line (the message among them) with control characters escaped
/// (`\n`, `\r`, `\t`, `\u{1b}`, ...): names and paths from requests, files and the cluster
/// are logged, and one holding a line break or a terminal escape would otherwise forge a log
/// line or recolour a terminal. The JSON format escapes them already. Field names are not
/// styled, even on a terminal. Fields longer than [`MAX_LOG_FIELDS_BYTES`] are cut in the
/// middle ([`cut_middle`]).
#[derive(Debug, Default)]
pub struct EscapedFields(DefaultFields);

/// The most of a plain log line's fields written, in bytes: 8 KiB. An object's name or route
/// name may be megabytes (a tester's 100,000-character route name made a 100 KB log line), and
/// log collectors split or drop long lines (Docker's at 16 KiB).
pub const MAX_LOG_FIELDS_BYTES: usize = 8192;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> std::fmt::Result {
        let mut text = String::new();
        self.0.format_fields(Writer::new(&mut text), fields)?;
        let text = escape_controls_owned(text);
        writer.write_str(&cut_middle(text, MAX_LOG_FIELDS_BYTES))
    }
}

/// A writer of JSON log lines that cuts a line over [`MAX_LOG_FIELDS_BYTES`]: its longest
/// string values are cut in the middle ([`cut_middle`]), each to the same length, until their
/// sum is within the bound, so the line stays one JSON object that collectors can parse (a
/// line split by a collector is not). tracing's JSON format writes each line with one
/// `write_all`, which this writer receives whole; a buffer that is not one JSON value is
/// written as it is.
#[derive(Debug)]
pub struct CutJsonLines<W>(pub W);

impl<W: std::io::Write> std::io::Write for CutJsonLines<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match cut_json_line(buf) {
            Some(line) => self.0.write_all(line.as_bytes())?,
            None => self.0.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// `buf`, one JSON line, with its strings cut as [`CutJsonLines`] says; `None` when it is
/// short enough already or not JSON.
fn cut_json_line(buf: &[u8]) -> Option<String> {
    if buf.len() <= MAX_LOG_FIELDS_BYTES {
        return None;
    }
    let mut value: serde_json::Value = serde_json::from_slice(buf).ok()?;
    // Lengths as written, escapes included: a control character takes six bytes (`\u0001`),
    // so a string cut to 8 KiB of text could still write 48 KiB (tester finding). Cutting in
    // proportion assumes escapes spread evenly; a few more passes settle uneven ones.
    let mut line = String::new();
    for _ in 0..4 {
        let mut lengths = Vec::new();
        visit_strings(&mut value, &mut |s| lengths.push(escaped_len(s)));
        let cap = equal_cut(lengths, MAX_LOG_FIELDS_BYTES);
        visit_strings(&mut value, &mut |s| {
            let written = escaped_len(s);
            if written > cap {
                let keep = (s.len() as u128 * cap as u128 / written as u128) as usize;
                *s = cut_middle(std::mem::take(s), keep.max(64));
            }
        });
        line = serde_json::to_string(&value).ok()?;
        if line.len() <= MAX_LOG_FIELDS_BYTES + MAX_LOG_FIELDS_BYTES / 8 {
            break;
        }
    }
    line.push('\n');
    Some(line)
}

/// The bytes `s` takes in a JSON string, without its quotes.
fn escaped_len(s: &str) -> usize {
    serde_json::to_string(s).map_or(s.len(), |written| written.len() - 2)
}

/// The length to cut every longer string to so that `lengths` sum to at most `total`, never
/// below 64 bytes (a line of thousands of short fields stays whole rather than unreadable).
fn equal_cut(mut lengths: Vec<usize>, total: usize) -> usize {
    lengths.sort_unstable();
    let mut left = total;
    for (i, len) in lengths.iter().enumerate() {
        let rest = lengths.len() - i;
        if len * rest > left {
            return (left / rest).max(64);
        }
        left -= len;
    }
    usize::MAX
}

fn visit_strings(value: &mut serde_json::Value, f: &mut impl FnMut(&mut String)) {
    match value {
        serde_json::Value::String(s) => f(s),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| visit_strings(v, f)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| visit_strings(v, f)),
        _ => {}
    }
}

/// `text` if it is at most `max` bytes long; else its first three quarters of `max` and its
/// last quarter (where a reason usually is: `...: more than the 8192 allowed`), cut at
/// character boundaries, and how much was left out between them: `<head>… (N bytes left out)
/// …<tail>`. Used where text the cluster or a client chose is written whole otherwise: log
/// lines ([`EscapedFields`]), webhook denials.
pub fn cut_middle(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let head = text.floor_char_boundary(max * 3 / 4);
    let tail = text.ceil_char_boundary(text.len() - max / 4);
    format!(
        "{}… ({} bytes left out) …{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

/// `text` with each control character and line separator written as its Rust escape (`\n`, `\r`, `\t`,
/// `\u{1b}`), borrowed when it has none: how plain log lines ([`EscapedFields`]) and
/// `dst-diag`'s tables show names that clients and the cluster chose.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(breaks_lines) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if breaks_lines(c) {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// Whether `c` is escaped in a plain line: a control character, or Unicode's line and
/// paragraph separators (U+2028, U+2029), which some log viewers and JavaScript pipelines
/// take for line breaks (tester finding: a Pod IP ending in U+2028 was written raw).
fn breaks_lines(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

/// [`escape_controls`] of an owned `text`: `text` itself, not a copy, when it has none.
pub fn escape_controls_owned(text: String) -> String {
    match escape_controls(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(escaped) => escaped,
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

    /// What a subscriber writes, shared with the test.
    #[derive(Clone, Default)]
    struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Lines {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// The JSON log lines, as `--log-format json` writes them ([`CutJsonLines`]), written
    /// while `f` runs.
    fn json_lines(f: impl FnOnce()) -> String {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_writer(move || CutJsonLines(writer.clone()))
            .without_time()
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        lines.text()
    }

    /// The plain log lines (fields as [`EscapedFields`] writes them) written while `f` runs.
    fn plain_lines(f: impl FnOnce()) -> String {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(EscapedFields::default())
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        lines.text()
    }

    #[test]
    fn control_characters_in_plain_lines_are_escaped() {
        let text = plain_lines(|| {
            let name = "web\n2026-01-01T00:00:00Z INFO forged";
            tracing::info!(name = %name, kind = "\u{1b}[31mServer\t", "denied {}\r", "x\u{7f}");
        });
        // One line, with no control character left in it.
        assert_eq!(text.matches('\n').count(), 1, "{text:?}");
        assert!(!text.trim_end().chars().any(char::is_control), "{text:?}");
        assert!(
            text.contains(r"name=web\n2026-01-01T00:00:00Z INFO forged kind="),
            "{text:?}"
        );
        assert!(text.contains(r"denied x\x7f\r name="), "{text:?}");
        let text = plain_lines(|| tracing::info!(address = %"1.2.3.4\u{2028}x\u{2029}", "ip"));
        assert!(
            text.contains(r"address=1.2.3.4\u{2028}x\u{2029}"),
            "{text:?}"
        );

        // A field of 100,000 characters is cut in the middle (tester finding: a route name
        // that long made a 100 KB line); the end of the line, and the line, stay.
        let long = "r".repeat(100_000);
        let text = plain_lines(|| {
            tracing::warn!(error = %format!("route \"{long}\": invalid"), "skipping object");
        });
        assert!(text.len() < MAX_LOG_FIELDS_BYTES + 100, "{}", text.len());
        assert!(
            text.ends_with("\": invalid\n"),
            "{}",
            &text[text.len() - 40..]
        );
        assert!(text.contains(" bytes left out) …"), "{text}");
    }

    /// A JSON line with a field of 100,000 characters (a route name) is cut to about 8 KiB
    /// and stays one JSON object with every field; short lines are written as they are
    /// (tester finding: only plain lines were cut).
    #[test]
    fn long_json_lines_are_cut_and_stay_json() {
        let long = "r".repeat(100_000);
        let middle = "m".repeat(3_000);
        let text = json_lines(|| {
            tracing::warn!(kind = "HTTPRoute", name = %middle, error = %format!("route \"{long}\": invalid"), "skipping object");
            tracing::info!(name = "web", "short");
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].len() < MAX_LOG_FIELDS_BYTES + 300,
            "{}",
            lines[0].len()
        );
        let cut: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        let fields = &cut["fields"];
        assert_eq!(fields["kind"], "HTTPRoute");
        assert_eq!(fields["message"], "skipping object");
        let error = fields["error"].as_str().unwrap();
        assert!(error.starts_with("route \"rrr"), "{error}");
        assert!(error.ends_with("\": invalid"), "{error}");
        assert!(error.contains(" bytes left out) …"), "{error}");
        // Only strings past the common length are cut: the 3,000-byte name fits.
        assert_eq!(fields["name"].as_str(), Some(middle.as_str()));
        assert!((4_900..5_300).contains(&error.len()), "{}", error.len());
        let short: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(short["fields"]["name"], "web");

        // Escapes count: 100,000 control characters (six bytes each as JSON), or `"\` pairs
        // (two each), still make a line of about 8 KiB (tester finding: 47,666 bytes).
        for name in ["\u{1}".repeat(100_000), "\"\\".repeat(30_000)] {
            let text = json_lines(|| {
                tracing::warn!(kind = "Service", name = %name, "skipping object");
            });
            assert_eq!(text.lines().count(), 1);
            assert!(
                text.len() < MAX_LOG_FIELDS_BYTES + MAX_LOG_FIELDS_BYTES / 8,
                "{}",
                text.len()
            );
            let line: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert!(
                line["fields"]["name"]
                    .as_str()
                    .unwrap()
                    .contains(" bytes left out) …")
            );
        }

        assert_eq!(equal_cut(vec![10, 20, 30], 100), usize::MAX);
        assert_eq!(equal_cut(vec![10, 1000, 5000], 1010), 500);
        assert_eq!(equal_cut(vec![1000; 1000], 1000), 64);
    }

    #[test]
    fn long_text_is_cut_in_the_middle() {
        assert_eq!(cut_middle("short".into(), 8), "short");
        let text = format!("{}{}", "a".repeat(100), "z".repeat(100));
        assert_eq!(
            cut_middle(text, 40),
            format!(
                "{}… (160 bytes left out) …{}",
                "a".repeat(30),
                "z".repeat(10)
            )
        );
        // At character boundaries.
        let cut = cut_middle("é".repeat(100), 41);
        assert!(
            cut.starts_with(&"é".repeat(15)) && cut.ends_with(&"é".repeat(5)),
            "{cut}"
        );
    }

    #[test]
    fn bare_levels_leave_out_noisy_library_lines() {
        let quiet_kube = "kube_client::client::builder=off";
        assert_eq!(
            bare_filter("info"),
            format!("info,notify=warn,{quiet_kube}")
        );
        assert_eq!(
            bare_filter("INFO"),
            format!("INFO,notify=warn,{quiet_kube}")
        );
        assert_eq!(bare_filter("debug"), "debug");
        assert_eq!(bare_filter("trace"), "trace");
        assert_eq!(bare_filter("warn"), format!("warn,{quiet_kube}"));
        assert_eq!(bare_filter("error"), format!("error,{quiet_kube}"));
        assert!(EnvFilter::try_new(bare_filter("info")).is_ok());
    }

    #[test]
    fn a_bad_rust_log_is_named() {
        let error = rust_log_filter("garbage[[[").unwrap_err().to_string();
        assert!(
            error.starts_with("invalid RUST_LOG \"garbage[[[\": "),
            "{error}"
        );
        assert!(rust_log_filter("info,linkerd_index=debug").is_ok());
        // A word that is no level would turn every line off, warnings included.
        for bad in ["verbose", "inf0,linkerd_index=debug"] {
            let error = rust_log_filter(bad).unwrap_err().to_string();
            assert!(
                error.starts_with(&format!("invalid RUST_LOG {bad:?}: ")),
                "{error}"
            );
        }
        assert!(rust_log_filter("Fatal").is_ok());
    }

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

    /// A level that is none is a usage error, exit status 2, as clap reports other bad flags
    /// (tester finding: `--log-level verbose` exited 1 after the binary had started).
    #[test]
    fn a_bad_log_level_is_a_usage_error() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            log: LogArgs,
        }
        let parse = |args: &[&str]| {
            <Cli as clap::Parser>::try_parse_from(
                std::iter::once("bin").chain(args.iter().copied()),
            )
        };
        for bad in [
            "verbose",
            "info,x=loud",
            "inf0",
            "inf0,linkerd_index=debug",
            "linkerd_index=debug,verbose",
            "",
        ] {
            let Err(error) = parse(&["--log-level", bad]) else {
                panic!("{bad} accepted");
            };
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{bad}"
            );
            assert_eq!(error.exit_code(), 2, "{bad}");
            assert!(error.to_string().contains(bad), "{error}");
        }
        // One word of several that is no level is named (final tester's finding: it turned
        // every other log line off without a word).
        let error = parse(&["--log-level", "inf0,linkerd_index=debug"])
            .err()
            .unwrap();
        assert!(
            error.to_string().contains("\"inf0\" is no level"),
            "{error}"
        );
        let error = parse(&["--log-level", "verbose"])
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains("expected trace, debug, info, warn or error"),
            "{error}"
        );
        for (good, read) in [
            ("warn", "warn"),
            ("INFO", "INFO"),
            ("fatal", "error"),
            ("FATAL", "error"),
            ("info,linkerd_index=debug", "info,linkerd_index=debug"),
            ("fatal,linkerd_index=debug", "error,linkerd_index=debug"),
            ("info,,linkerd_index=debug,", "info,linkerd_index=debug"),
        ] {
            let cli = parse(&["--log-level", good]).unwrap_or_else(|e| panic!("{good}: {e}"));
            assert_eq!(cli.log.log_level, read);
        }
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
