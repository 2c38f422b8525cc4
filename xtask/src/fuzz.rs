//! `cargo xtask fuzz [--seconds N] [--target NAME]...`: every fuzz target of `fuzz/` under
//! libFuzzer for N seconds each, then a table of inputs executed per target.
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

#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// Seconds of fuzzing per target.
    #[arg(long, default_value_t = 60)]
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
    let has_cargo_fuzz = Command::new("cargo")
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
    let status = Command::new("cargo")
        .args([
            "fuzz",
            "build",
            "--features",
            "libfuzzer",
            "--sanitizer",
            "none",
        ])
        .current_dir(root)
        .env("CARGO_INCREMENTAL", "0")
        .status()
        .context("cargo fuzz build")?;
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

/// The targets `cargo fuzz list` names (the `[[bin]]`s of fuzz/Cargo.toml).
fn list_targets(root: &Path) -> anyhow::Result<Vec<String>> {
    let out = Command::new("cargo")
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
        .arg(format!("-max_total_time={}", args.seconds))
        .arg(format!("-timeout={}", args.timeout))
        .arg("-rss_limit_mb=4096")
        .arg("-print_final_stats=1")
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
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
}
