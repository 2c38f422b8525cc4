//! `cargo xtask dev`: run the destination server locally in offline mode.

use anyhow::{Context, bail};
use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::{Path, PathBuf},
    time::Duration,
};
use tokio::signal::unix::{SignalKind, signal};

use crate::server::{self, Output, ServerProcess};

/// How long the server has to answer `/ready` after it starts.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the server has to shut down gracefully after Ctrl-C before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// `cargo xtask dev [--release] [--addr ADDR] [--admin-addr ADDR] [--cluster-state DIR] [-- FLAGS]`
#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Build and run the release binary.
    #[arg(long)]
    release: bool,

    /// gRPC listen address of the Destination service.
    #[arg(long, default_value = "127.0.0.1:8086")]
    addr: SocketAddr,

    /// Admin listen address (`/ready`, `/live`, `/metrics`).
    #[arg(long, default_value = "127.0.0.1:9996")]
    admin_addr: SocketAddr,

    /// The manifests to serve; defaults to tests/fixtures/emojivoto in the workspace.
    #[arg(long, value_name = "DIR")]
    cluster_state: Option<PathBuf>,

    /// More `destination` flags, after `--` (e.g. `-- --log-level=debug`).
    #[arg(last = true, value_name = "FLAGS")]
    extra: Vec<String>,
}

/// Builds `destination`, starts it, waits until it is ready, prints how to talk to it, and
/// waits for it to exit. Ctrl-C (SIGINT) or SIGTERM stops the server (gracefully, then by
/// force after 10 s) and returns `Ok`.
///
/// Errors when the build fails, a port is taken, the server does not become ready within 60 s,
/// or it exits on its own with a failure.
pub fn run(root: &Path, args: DevArgs) -> anyhow::Result<()> {
    let uses_fixture = args.cluster_state.is_none();
    let dir = args
        .cluster_state
        .clone()
        .unwrap_or_else(|| root.join("tests/fixtures/emojivoto"));
    if !dir.is_dir() {
        bail!("cluster state directory {} does not exist", dir.display());
    }
    server::ensure_free(args.addr, "--addr")?;
    server::ensure_free(args.admin_addr, "--admin-addr")?;
    let exe = server::build_destination(root, args.release)?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the Tokio runtime")?;
    runtime.block_on(serve(&exe, &dir, &args, uses_fixture))
}

async fn serve(exe: &Path, dir: &Path, args: &DevArgs, uses_fixture: bool) -> anyhow::Result<()> {
    // Signals are taken over before the child starts, so that Ctrl-C at any moment stops it.
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;

    let mut server = ServerProcess::spawn(
        exe,
        dir,
        args.addr,
        args.admin_addr,
        &args.extra,
        Output::Inherit,
    )?;
    let ready = tokio::select! {
        ready = server.wait_ready(READY_TIMEOUT) => ready,
        _ = interrupt.recv() => return stopped(&mut server).await,
        _ = terminate.recv() => return stopped(&mut server).await,
    };
    if let Err(error) = ready {
        let _ = server.stop(Duration::from_secs(2)).await;
        return Err(error);
    }

    print_banner(dir, server.addr, server.admin_addr, uses_fixture);

    tokio::select! {
        status = server.wait() => {
            let status = status?;
            if status.success() {
                Ok(())
            } else {
                bail!("destination exited with {status}")
            }
        }
        _ = interrupt.recv() => stopped(&mut server).await,
        _ = terminate.recv() => stopped(&mut server).await,
    }
}

async fn stopped(server: &mut ServerProcess) -> anyhow::Result<()> {
    eprintln!("stopping destination...");
    let status = server.stop(STOP_GRACE).await?;
    eprintln!("destination stopped ({status})");
    Ok(())
}

fn print_banner(dir: &Path, addr: SocketAddr, admin_addr: SocketAddr, uses_fixture: bool) {
    let addr = reachable(addr);
    let admin_addr = reachable(admin_addr);
    let authority = if uses_fixture {
        "web-svc.emojivoto.svc.cluster.local:80"
    } else {
        "SERVICE.NAMESPACE.svc.cluster.local:PORT"
    };
    println!();
    println!(
        "destination is ready, serving {} (offline mode)",
        dir.display()
    );
    println!("  Destination gRPC  http://{addr}");
    println!("  admin             http://{admin_addr}  (/ready /live /metrics)");
    println!();
    println!("Try:");
    println!(
        "  cargo run -p diag --bin dst-diag -- endpoints {authority} --destination http://{addr}"
    );
    println!("  curl http://{admin_addr}/metrics");
    println!();
    println!(
        "It follows edits to the files in {} (pass --cluster-state DIR to serve a copy you can edit); Ctrl-C stops it.",
        dir.display()
    );
}

/// The address a local client connects to for a listen address (`0.0.0.0` means loopback here).
fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port())
        }
        _ => addr,
    }
}
