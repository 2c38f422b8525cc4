//! `cargo xtask ...`: workspace tasks that are programs rather than tests.
//!
//! - `cargo xtask dev`: build the pod's four binaries and run them, wired as in the pod (mTLS
//!   through the shim), in offline mode on the emojivoto fixture.
//! - `cargo xtask bench`: measure per-stream memory and change-to-delivery latency of
//!   `Destination.Get` on a generated cluster.
//! - `cargo xtask bench-profiles`: a storm of `GetProfile` streams on a generated cluster with
//!   ServiceProfiles: time to every stream's first profile, memory, and idle CPU after closing.
//! - `cargo xtask bench-storm`: 5,000 `GetProfile` and 5,000 `Get` streams opened at once on
//!   500 Services: time to first message, peak RSS, CPU during the storm and after it.
//! - `cargo xtask bench-inbound`: 10,000 `WatchPort` streams on the policy controller and one
//!   AuthorizationPolicy change that reaches them all: latency, memory per stream, CPU.
//! - `cargo xtask bench-outbound`: 10,000 `OutboundPolicies.Watch` streams over 500 Services
//!   with 1,000 HTTPRoutes, served by a fake Kubernetes API server so that the route status
//!   writer runs; route churn at 10 changes/s: delivery latency, memory, status patches sent.
//! - `cargo xtask bench-scale`: 5,000 Services × 10 meshed pods, read from a state directory
//!   (offline mode) and from a loopback list/watch API server (kube mode): time to ready and
//!   the binary's memory once ready, settled, and at its peak.
//! - `cargo xtask gen-crds [--check]`: deploy/crds/ from the Rust types of crates/k8s-api.
//! - `cargo xtask gen-certs`: trust anchor, issuer, the pod's identity and webhook certificates,
//!   as PEM files and a kustomize overlay of deploy/ with the Secrets and caBundles.
//! - `cargo xtask check-deploy`: every manifest of deploy/ decodes into its Kubernetes type, and
//!   the custom resources of deploy/examples/ and tests/fixtures/ match the generated CRDs.
//! - `cargo xtask soak --minutes N`: 100,000 streams of each gRPC API opened and closed while
//!   the state churns: each server's RSS and open file descriptors at start, middle and end.
//! - `cargo xtask fuzz [--inputs N] [--seconds S]`: every fuzz target of fuzz/ under libFuzzer
//!   (cargo-fuzz, stable toolchain) for N inputs each (1,000,000) or at most S seconds (600):
//!   inputs executed per target, and failures.
//!
//! The alias lives in `.cargo/config.toml`; nothing in the workspace depends on this crate.

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// The bench clients share the machine with the server they measure: glibc's allocator, with
/// its arena locks and frees from the other thread, made a quarter of the `Get` client's CPU.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod bench_inbound;
mod bench_outbound;
mod bench_profiles;
mod bench_scale;
mod bench_slow;
mod bench_storm;
mod certs;
mod check_deploy;
mod cluster_gen;
mod crds;
mod dev;
mod fake_kube;
mod fuzz;
mod inbound_gen;
mod outbound_gen;
mod scale_gen;
mod server;
#[cfg(test)]
mod shim_deps;
mod soak;
mod static_kube;

/// Workspace tasks for the linkerd-destination rebuild.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build the pod's four binaries and run them as the pod does, in offline mode on
    /// tests/fixtures/emojivoto (or --cluster-state DIR), with the gRPC ports behind the
    /// mtls-shim and certificates generated for the run, until Ctrl-C.
    Dev(dev::DevArgs),
    /// Generate a cluster, run `destination` on it, open many `Get` streams on one service and
    /// churn its endpoints: prints memory per stream and change-to-delivery latency.
    Bench(bench::BenchArgs),
    /// Generate a cluster with a ServiceProfile per service, run `destination` on it, open
    /// thousands of `GetProfile` streams at once, close them: prints first-profile latency,
    /// memory, and the server's CPU once idle.
    BenchProfiles(bench_profiles::BenchProfilesArgs),
    /// 5,000 `GetProfile` and 5,000 `Get` streams opened at once on 500 Services (linkerd2
    /// #15583): time to first message, peak RSS, CPU during the storm and after it.
    BenchStorm(bench_storm::BenchStormArgs),
    /// Generate pods with Servers and one namespace-wide AuthorizationPolicy, run
    /// `policy-controller` on it, open a `WatchPort` stream per pod port, change the policy:
    /// prints change-to-delivery latency, memory per stream and the server's CPU per change.
    BenchInbound(bench_inbound::BenchInboundArgs),
    /// Write the CRDs of deploy/crds/ from the Rust types of crates/k8s-api (`--check`: fail
    /// when they differ instead).
    GenCrds(crds::GenCrdsArgs),
    /// Generate the trust anchor, identity issuer, the destination's identity certificate and
    /// the webhooks' serving certificates, with a kustomize overlay of deploy/ that installs
    /// them: `kubectl apply -k DIR`.
    GenCerts(certs::GenCertsArgs),
    /// Check the manifests of deploy/ against the Kubernetes types and the custom resources of
    /// deploy/examples/ and tests/fixtures/ against the generated CRDs.
    CheckDeploy(check_deploy::CheckDeployArgs),
    /// Serve Services and HTTPRoutes from a fake Kubernetes API server, run `policy-controller`
    /// on it in kube mode (status writer included), open many `OutboundPolicies.Watch` streams
    /// and churn the routes: prints change-to-delivery latency, memory per stream, the server's
    /// CPU and the status patches it sent.
    BenchOutbound(bench_outbound::BenchOutboundArgs),
    /// Generate N Services x M meshed pods shaped like an injected cluster, run `destination`
    /// (or `policy-controller`) on them in offline mode (a state directory) and in kube mode (a
    /// loopback list/watch API server): prints time to ready and RSS at ready, settled and at
    /// its peak.
    BenchScale(bench_scale::BenchScaleArgs),
    /// Run every fuzz target of fuzz/ under libFuzzer (`cargo install cargo-fuzz --locked`)
    /// for --inputs each, at most --seconds: prints inputs executed per target and fails on any
    /// failing input.
    Fuzz(fuzz::FuzzArgs),
    /// Run `destination` and `policy-controller` offline on emojivoto plus a churned Service,
    /// open and close --streams streams of each gRPC API over --minutes: prints the servers'
    /// RSS and open file descriptors at start, middle and end.
    Soak(soak::SoakArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let root = workspace_root()?;
    match cli.command {
        Command::Dev(args) => dev::run(&root, args),
        Command::Bench(args) => bench::run(&root, args),
        Command::BenchProfiles(args) => bench_profiles::run(&root, args),
        Command::BenchStorm(args) => bench_storm::run(&root, args),
        Command::BenchInbound(args) => bench_inbound::run(&root, args),
        Command::GenCrds(args) => crds::run(&root, args),
        Command::GenCerts(args) => certs::run(&root, args),
        Command::CheckDeploy(args) => check_deploy::run(&root, args),
        Command::BenchOutbound(args) => bench_outbound::run(&root, args),
        Command::BenchScale(args) => bench_scale::run(&root, args),
        Command::Fuzz(args) => fuzz::run(&root, args),
        Command::Soak(args) => soak::run(&root, args),
    }
}

/// The workspace root: the parent of this crate's manifest directory.
fn workspace_root() -> anyhow::Result<PathBuf> {
    root_of(std::env::var_os("CARGO_MANIFEST_DIR"))
}

/// The workspace above xtask's manifest directory: the one `cargo run` names at run time
/// (`running`), else the one xtask was compiled in. With a target directory shared by two
/// checkouts (a global `CARGO_TARGET_DIR`), the binary cargo runs may have been compiled in the
/// other one, whose path may no longer exist.
fn root_of(running: Option<std::ffi::OsString>) -> anyhow::Result<PathBuf> {
    let manifest_dir = running
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let root = manifest_dir
        .parent()
        .with_context(|| format!("{} has no parent directory", manifest_dir.display()))?;
    Ok(root.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checkout `cargo run` names wins over the one xtask was compiled in (finding: with a
    /// shared target directory, `cargo xtask bench-inbound` ran in a checkout that had been
    /// removed, and failed with "cannot run cargo: No such file or directory").
    #[test]
    fn the_running_checkout_is_the_root() {
        assert_eq!(
            root_of(Some("/src/other-clone/xtask".into())).unwrap(),
            PathBuf::from("/src/other-clone")
        );
        let compiled = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        assert_eq!(root_of(None).unwrap(), compiled.parent().unwrap());
    }
}
