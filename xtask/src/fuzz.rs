//! `cargo xtask fuzz [--inputs N] [--seconds S] [--target NAME]...`: every fuzz target of
//! `fuzz/` under libFuzzer until it has run N inputs (1,000,000 by default) or for S seconds
//! (600 by default), whichever comes first, then a table of inputs executed per target.
//!
//! A budget in inputs rather than in seconds: the targets differ fiftyfold in speed (on two busy
//! cores, from about 4,000 inputs/s for `state_file`, whose inputs are whole YAML files, and
//! 6,000 for the ServiceProfile targets, which compile regexes, to over 100,000 for the small
//! parsers; libFuzzer also scans every coverage counter after each input, up to half a million
//! in the admission targets), so a common time gives the fast ones tens of millions of inputs
//! and the slow ones a few hundred thousand. One run takes about 14 minutes on such a machine;
//! `--inputs 0 --seconds 60` fuzzes every target for 60 s instead.
//!
//! The engine is cargo-fuzz's libFuzzer (`cargo install cargo-fuzz --locked`), built with
//! `--sanitizer none`: the coverage instrumentation (`-Cpasses=sancov-module`) is a stable
//! rustc flag and only the sanitizers need nightly, so this runs on the stable toolchain. A
//! debug build's overflow checks and assertions stay on (cargo-fuzz's default).
//!
//! Each target starts from its seeds (`fuzz/corpus/<target>/`, committed) and past failures
//! (`fuzz/regressions/<target>/`); what libFuzzer adds goes to `target/fuzz/corpus/<target>/`,
//! kept between runs and never committed. A failing input is written to
//! `target/fuzz/artifacts/<target>/`; copy it to `fuzz/regressions/<target>/` once fixed.

use anyhow::{Context, bail};
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use crate::server::cargo_command;

#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// Inputs to run per target (libFuzzer's `-runs`, the seeds included); 0 for no limit.
    #[arg(long, default_value_t = 1_000_000)]
    inputs: u64,
    /// Seconds of fuzzing per target at most (the whole time with `--inputs 0`).
    #[arg(long, default_value_t = 600)]
    seconds: u64,
    /// Only this target (repeatable); all of `cargo fuzz list` by default.
    #[arg(long = "target")]
    targets: Vec<String>,
    /// libFuzzer's limit per input, in seconds: an input slower than this is a failure
    /// (a pathological parse), saved like a crash.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

/// What one target's run did.
struct Outcome {
    target: String,
    seconds: f64,
    inputs: u64,
    corpus: usize,
    failure: Option<String>,
}

pub fn run(root: &Path, args: FuzzArgs) -> anyhow::Result<()> {
    let has_cargo_fuzz = cargo_command()
        .1
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_cargo_fuzz {
        bail!("cargo-fuzz is not installed: `cargo install cargo-fuzz --locked` (crates.io)");
    }
    let targets = if args.targets.is_empty() {
        list_targets(root)?
    } else {
        args.targets.clone()
    };
    eprintln!(
        "building {} fuzz targets (cargo fuzz build, release, SanitizerCoverage)",
        targets.len()
    );
    let status = build_command(root).status().context("cargo fuzz build")?;
    if !status.success() {
        bail!("cargo fuzz build failed: {status}");
    }
    let bin_dir = root.join("target").join(host_triple()?).join("release");
    let mut outcomes = Vec::new();
    for target in &targets {
        let outcome = fuzz_one(root, &bin_dir, target, &args)?;
        eprintln!(
            "{target}: {} inputs in {:.0} s{}",
            outcome.inputs,
            outcome.seconds,
            outcome
                .failure
                .as_deref()
                .map(|f| format!(", FAILED: {f}"))
                .unwrap_or_default()
        );
        outcomes.push(outcome);
    }
    println!(
        "{:<24} {:>8} {:>14} {:>12} {:>8}  result",
        "target", "seconds", "inputs", "inputs/s", "corpus"
    );
    for o in &outcomes {
        println!(
            "{:<24} {:>8.0} {:>14} {:>12.0} {:>8}  {}",
            o.target,
            o.seconds,
            o.inputs,
            o.inputs as f64 / o.seconds.max(0.001),
            o.corpus,
            o.failure.as_deref().unwrap_or("0 crashes")
        );
    }
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.failure.is_some())
        .map(|o| o.target.as_str())
        .collect();
    if !failed.is_empty() {
        bail!(
            "fuzz targets failed: {} (inputs under target/fuzz/artifacts/)",
            failed.join(", ")
        );
    }
    Ok(())
}

/// `cargo fuzz build` of every target, without the variables `cargo run` set for xtask: `ring`'s
/// build script fingerprints `CARGO_MANIFEST_DIR`, so inheriting it rebuilt `ring` and every
/// crate above it (the whole fuzz build, tens of minutes) on each switch between `cargo xtask
/// fuzz` and `cargo fuzz` typed in a shell. `CARGO_BUILD_JOBS` in the environment still limits
/// the build's jobs.
fn build_command(root: &Path) -> Command {
    let (_, mut command) = cargo_command();
    command
        .args([
            "fuzz",
            "build",
            "--features",
            "libfuzzer",
            "--sanitizer",
            "none",
        ])
        .current_dir(root)
        .env("CARGO_INCREMENTAL", "0");
    command
}

/// libFuzzer's options for one target's run, before the corpus directories.
fn libfuzzer_options(args: &FuzzArgs, artifacts: &Path) -> Vec<String> {
    let mut options = vec![
        format!("-max_total_time={}", args.seconds),
        format!("-timeout={}", args.timeout),
        "-rss_limit_mb=4096".to_string(),
        "-print_final_stats=1".to_string(),
        format!("-artifact_prefix={}/", artifacts.display()),
    ];
    if args.inputs > 0 {
        options.push(format!("-runs={}", args.inputs));
    }
    options
}

/// The targets `cargo fuzz list` names (the `[[bin]]`s of fuzz/Cargo.toml).
fn list_targets(root: &Path) -> anyhow::Result<Vec<String>> {
    let out = cargo_command()
        .1
        .args(["fuzz", "list"])
        .current_dir(root)
        .output()
        .context("cargo fuzz list")?;
    if !out.status.success() {
        bail!("cargo fuzz list: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// The host's target triple, which cargo-fuzz builds for (`rustc -vV`).
fn host_triple() -> anyhow::Result<String> {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .context("rustc -vV")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .context("rustc -vV names no host")
}

fn fuzz_one(root: &Path, bin_dir: &Path, target: &str, args: &FuzzArgs) -> anyhow::Result<Outcome> {
    let work = root.join("target/fuzz/corpus").join(target);
    let artifacts = root.join("target/fuzz/artifacts").join(target);
    std::fs::create_dir_all(&work)?;
    std::fs::create_dir_all(&artifacts)?;
    let seeds = root.join("fuzz/corpus").join(target);
    let regressions = root.join("fuzz/regressions").join(target);
    let mut command = Command::new(bin_dir.join(target));
    command
        .args(libfuzzer_options(args, &artifacts))
        .arg(&work)
        .arg(&seeds);
    if regressions.is_dir() {
        command.arg(&regressions);
    }
    let started = Instant::now();
    let out = command
        .stdout(Stdio::null())
        .output()
        .with_context(|| format!("running {}", bin_dir.join(target).display()))?;
    let seconds = started.elapsed().as_secs_f64();
    let log = String::from_utf8_lossy(&out.stderr);
    let inputs = stat(&log, "stat::number_of_executed_units:")
        .or_else(|| done_runs(&log))
        .unwrap_or(0);
    let failure = (!out.status.success()).then(|| {
        let reason = log
            .lines()
            .find(|l| l.contains("panicked at") || l.starts_with("==") || l.contains("ERROR:"))
            .unwrap_or("libFuzzer failed")
            .to_string();
        let saved = newest_file(&artifacts)
            .map(|p| format!(" (input: {})", p.display()))
            .unwrap_or_default();
        format!("{reason}{saved}")
    });
    if let Some(failure) = &failure {
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        eprintln!("--- {target} ---");
        for line in tail.into_iter().rev() {
            eprintln!("{line}");
        }
        eprintln!("--- {failure}");
    }
    let corpus = std::fs::read_dir(&work).map(|d| d.count()).unwrap_or(0);
    Ok(Outcome {
        target: target.to_string(),
        seconds,
        inputs,
        corpus,
        failure,
    })
}

/// A `-print_final_stats` line: `stat::number_of_executed_units: 123`.
fn stat(log: &str, name: &str) -> Option<u64> {
    log.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
}

/// libFuzzer's last line: `Done 123 runs in 30 second(s)`.
fn done_runs(log: &str) -> Option<u64> {
    log.lines()
        .find_map(|l| l.strip_prefix("Done "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

fn newest_file(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()
        .map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_libfuzzer_counts() {
        let log = "#1048576\tpulse  cov: 6\nDone 9675517 runs in 6 second(s)\nstat::number_of_executed_units: 9675518\nstat::average_exec_per_sec:     1612586\n";
        assert_eq!(
            stat(log, "stat::number_of_executed_units:"),
            Some(9_675_518)
        );
        assert_eq!(done_runs(log), Some(9_675_517));
        assert_eq!(stat("", "stat::number_of_executed_units:"), None);
    }

    fn args(extra: &[&str]) -> FuzzArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            fuzz: FuzzArgs,
        }
        let argv = std::iter::once("fuzz").chain(extra.iter().copied());
        <Cli as clap::Parser>::parse_from(argv).fuzz
    }

    #[test]
    fn each_target_runs_a_million_inputs_within_ten_minutes_by_default() {
        let artifacts = Path::new("/tmp/a");
        assert_eq!(
            libfuzzer_options(&args(&[]), artifacts),
            [
                "-max_total_time=600",
                "-timeout=10",
                "-rss_limit_mb=4096",
                "-print_final_stats=1",
                "-artifact_prefix=/tmp/a/",
                "-runs=1000000",
            ]
        );
        let timed = libfuzzer_options(&args(&["--inputs", "0", "--seconds", "60"]), artifacts);
        assert_eq!(timed[0], "-max_total_time=60");
        assert!(!timed.iter().any(|o| o.starts_with("-runs")), "{timed:?}");
    }

    /// Found rebuilding the whole fuzz build on every switch between `cargo xtask fuzz` and
    /// `cargo fuzz`: the build inherited `cargo run`'s `CARGO_MANIFEST_DIR`.
    #[test]
    fn the_fuzz_build_does_not_inherit_the_package_variables() {
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let command = build_command(Path::new("/repo"));
        let removed: Vec<String> = command
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        assert!(
            removed.iter().any(|name| name == "CARGO_MANIFEST_DIR"),
            "{removed:?}"
        );
        let args: Vec<_> = command.get_args().collect();
        assert_eq!(
            args,
            [
                "fuzz",
                "build",
                "--features",
                "libfuzzer",
                "--sanitizer",
                "none"
            ]
        );
    }
}
