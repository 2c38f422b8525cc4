//! `cargo xtask dev`: the whole linkerd-destination pod on this machine, in offline mode.
//!
//! The four containers of `deploy/base/destination.yaml` run as processes wired as in the pod:
//! `destination` and `policy-controller` serve gRPC in plaintext on loopback ports that only the
//! `mtls-shim` sidecar reaches, and the shim terminates mesh TLS in front of them on the ports
//! proxies use (8086, 8090), with an identity certificate issued by a trust anchor generated for
//! the run; `sp-validator` and the policy admission webhook serve HTTPS with certificates of
//! their own. A client certificate for a mesh identity is written too, so that a client can talk
//! mTLS to the shim as a proxy does.
//!
//! Without `--cluster-state`, the bundled clusters are served: a copy of
//! `tests/fixtures/emojivoto` with the link to a second cluster (`tests/fixtures/east-link/`),
//! and a copy of that cluster, `east` (`tests/fixtures/east/`, `--linked-cluster-state`), so
//! that remote discovery and federated Services resolve too.

use anyhow::{Context, bail};
use serde::Serialize;
use std::{
    ffi::OsString,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::{Path, PathBuf},
    time::Duration,
};
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    certs,
    server::{self, CHART_FLAGS, Output, ServerProcess},
};

/// How long each process has to answer `/ready` after it starts.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the processes have to shut down gracefully after Ctrl-C before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Validity of the certificates generated for a run.
const CERT_DAYS: i64 = 7;
/// The mesh identity of the client certificate written for the run: the emojivoto `web`
/// workload's, so that what a client sees through the shim is what that proxy would.
pub const CLIENT_IDENTITY: &str = "web.emojivoto.serviceaccount.identity.linkerd.cluster.local";
/// The binaries of the pod, as `(package, binary)`.
const BINARIES: [(&str, &str); 4] = [
    ("destination", "destination"),
    ("policy", "policy-controller"),
    ("sp-validator", "sp-validator"),
    ("mtls-shim", "mtls-shim"),
];

/// `cargo xtask dev [--release] [--cluster-state DIR] [--free-ports] [--out DIR] [--bin-dir DIR] [-- FLAGS]`
#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Build and run the release binaries.
    #[arg(long)]
    release: bool,

    /// The manifests to serve; defaults to a copy of tests/fixtures/emojivoto linked to the
    /// bundled cluster `east` (a copy of tests/fixtures/east).
    #[arg(long, value_name = "DIR")]
    cluster_state: Option<PathBuf>,

    /// Listen on free loopback ports picked for the run instead of the pod's own (8086, 8090,
    /// the in-pod gRPC ports 18086 and 18090, 4191, 9996, 9990, 9443, 8443, 9997, and the
    /// introspection APIs' 9986 and 9980); the banner and `pod.json` say which.
    #[arg(long)]
    free_ports: bool,

    /// Where the run's certificates, logs and `pod.json` (every address, and the certificate
    /// files a client needs) are written, relative to the workspace root. Default
    /// `target/xtask-dev`; with `--free-ports`, `target/xtask-dev-PID`, so that a second pod
    /// started next to the first neither truncates its logs nor replaces its certificates
    /// (those of runs that have ended are removed when the next such run starts).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,

    // The help names the directory `cargo build` fills, `$CARGO_TARGET_DIR` too.
    #[arg(long, value_name = "DIR", help = bin_dir_help())]
    bin_dir: Option<PathBuf>,

    /// More `destination` flags, after `--` (e.g. `-- --log-level=debug`); one the chart also
    /// sets replaces the chart's value (`-- --enable-ipv6=true`).
    #[arg(last = true, value_name = "FLAGS")]
    extra: Vec<String>,
}

/// The `destination` flags that `dev` sets itself from the pod's addresses: another value
/// after `--` would move the server away from where the mtls-shim and the banner point.
const POD_ADDRESS_FLAGS: [&str; 4] = ["addr", "admin-addr", "metrics-addr", "introspection-addr"];

/// Refuses an `extra` flag of [`POD_ADDRESS_FLAGS`] (written `--name`, `-name`, with or
/// without `=value`), pointing at `--free-ports`.
fn refuse_pod_addresses(extra: &[String]) -> anyhow::Result<()> {
    for flag in extra {
        let name = flag.trim_start_matches('-');
        let name = name.split_once('=').map_or(name, |(name, _)| name);
        if flag.starts_with('-') && POD_ADDRESS_FLAGS.contains(&name) {
            bail!(
                "{flag}: the dev pod sets destination's addresses itself (the mtls-shim forwards to \
                 them); use --free-ports to move the pod's ports"
            );
        }
    }
    Ok(())
}

/// Every address of a running dev pod, as written to `pod.json`.
#[derive(Debug, Serialize)]
pub struct PodAddrs {
    /// The shim's mTLS port in front of `destination` (the pod's 8086).
    pub destination_mtls: SocketAddr,
    /// The shim's mTLS port in front of `policy-controller` (the pod's 8090).
    pub policy_mtls: SocketAddr,
    /// `destination` itself, plaintext (what the shim forwards to).
    pub destination_grpc: SocketAddr,
    /// `policy-controller` itself, plaintext.
    pub policy_grpc: SocketAddr,
    pub destination_admin: SocketAddr,
    pub policy_admin: SocketAddr,
    /// The policy admission webhook (HTTPS).
    pub policy_webhook: SocketAddr,
    /// The ServiceProfile admission webhook (HTTPS).
    pub sp_validator: SocketAddr,
    pub sp_validator_admin: SocketAddr,
    pub shim_admin: SocketAddr,
    /// `destination`'s introspection API (`dst-diag streams --introspection`).
    pub destination_introspection: SocketAddr,
    /// `policy-controller`'s introspection API.
    pub policy_introspection: SocketAddr,
}

/// What a client needs to talk to the shim as a proxy does, as written to `pod.json`.
#[derive(Debug, Serialize)]
struct PodInfo<'a> {
    addrs: &'a PodAddrs,
    /// The TLS server name (SNI) the shim answers to: the destination's mesh identity.
    server_name: &'a str,
    /// PEM files: the trust anchor, and the client's chain and key.
    trust_anchors: PathBuf,
    client_identity: &'static str,
    client_cert: PathBuf,
    client_key: PathBuf,
    logs: PathBuf,
}

/// Builds the pod's binaries (unless `--bin-dir`), writes the run's certificates, starts the
/// four processes, waits until each is ready, prints how to talk to them, and runs until Ctrl-C
/// (SIGINT) or SIGTERM, which stops them (gracefully, then by force after 10 s) and returns `Ok`.
///
/// Errors when a build fails, a port is taken, a process does not become ready within 60 s
/// (with the tail of its log), or one exits on its own (the others are then stopped).
pub fn run(root: &Path, args: DevArgs) -> anyhow::Result<()> {
    let uses_fixture = args.cluster_state.is_none();
    let out = out_dir(
        root,
        args.out.as_deref(),
        args.free_ports,
        std::process::id(),
    );
    if args.free_ports && args.out.is_none() {
        remove_dirs_of_ended_runs(&root.join("target"), |pid| {
            Path::new("/proc").join(pid.to_string()).exists()
        });
    }
    refuse_pod_addresses(&args.extra)?;
    let addrs = if args.free_ports {
        free_addrs()?
    } else {
        pod_addrs()
    };
    for (role, addr) in [
        ("the mtls-shim's destination port", addrs.destination_mtls),
        ("the mtls-shim's policy port", addrs.policy_mtls),
        ("destination's gRPC port", addrs.destination_grpc),
        ("policy-controller's gRPC port", addrs.policy_grpc),
        ("destination's admin port", addrs.destination_admin),
        ("policy-controller's admin port", addrs.policy_admin),
        ("the policy admission webhook", addrs.policy_webhook),
        ("the sp-validator webhook", addrs.sp_validator),
        ("sp-validator's admin port", addrs.sp_validator_admin),
        ("the mtls-shim's admin port", addrs.shim_admin),
        (
            "destination's introspection API",
            addrs.destination_introspection,
        ),
        (
            "policy-controller's introspection API",
            addrs.policy_introspection,
        ),
    ] {
        server::ensure_free(addr, role)
            .context("another dev pod may be running; --free-ports picks free ports")?;
    }
    // Only now that the ports are known to be free: a pod already running on them serves the
    // bundled state from the same `out`, and must not see it replaced.
    let (dir, linked) = match &args.cluster_state {
        Some(dir) => (dir.clone(), Vec::new()),
        None => bundled_clusters(root, &out)?,
    };
    if dir.is_file() {
        bail!(
            "--cluster-state {} is a file: give the directory that holds it",
            dir.display()
        );
    }
    if !dir.is_dir() {
        bail!("cluster state directory {} does not exist", dir.display());
    }
    let files = write_certs(&out)?;
    let exes = match &args.bin_dir {
        Some(bin_dir) => BINARIES
            .iter()
            .map(|(_, bin)| {
                let exe = bin_dir.join(bin);
                anyhow::ensure!(exe.is_file(), "--bin-dir: {} does not exist", exe.display());
                Ok(exe)
            })
            .collect::<anyhow::Result<Vec<_>>>()?,
        None => server::build_binaries(root, &BINARIES, args.release)?,
    };
    let exes = Exes {
        destination: exes[0].clone(),
        policy: exes[1].clone(),
        sp_validator: exes[2].clone(),
        shim: exes[3].clone(),
    };
    let info = PodInfo {
        addrs: &addrs,
        server_name: &files.server_name,
        trust_anchors: files.trust_anchors.clone(),
        client_identity: CLIENT_IDENTITY,
        client_cert: files.client_cert.clone(),
        client_key: files.client_key.clone(),
        logs: out.clone(),
    };
    let pod_json = out.join("pod.json");
    // A stale file from an earlier run must not describe this one before it is ready.
    let _ = std::fs::remove_file(&pod_json);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the Tokio runtime")?;
    runtime.block_on(async {
        // Signals are taken over before the children start, so that Ctrl-C at any moment stops
        // them.
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
        let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
        let mut pod = Vec::new();
        let started = tokio::select! {
            started = start(&mut pod, &exes, &dir, &linked, &addrs, &files, &out, &args.extra) => started,
            _ = interrupt.recv() => return stop(&mut pod).await,
            _ = terminate.recv() => return stop(&mut pod).await,
        };
        if let Err(error) = started {
            let _ = stop(&mut pod).await;
            return Err(error);
        }
        let json = serde_json::to_string_pretty(&info)?;
        std::fs::write(&pod_json, json)
            .with_context(|| format!("writing {}", pod_json.display()))?;
        print_banner(&dir, &info, uses_fixture);

        tokio::select! {
            exited = first_exit(&mut pod) => {
                let (name, status, tail) = exited?;
                let _ = stop(&mut pod).await;
                bail!("{name} exited on its own ({status}){tail}")
            }
            _ = interrupt.recv() => stop(&mut pod).await,
            _ = terminate.recv() => stop(&mut pod).await,
        }
    })
}

/// The run's output directory: `out` (relative to `root`), else one of its own per run
/// when the ports are free ones (another dev pod may be running), else `target/xtask-dev`.
fn out_dir(root: &Path, out: Option<&Path>, free_ports: bool, pid: u32) -> PathBuf {
    match out {
        Some(dir) if dir.is_absolute() => dir.to_path_buf(),
        Some(dir) => root.join(dir),
        None if free_ports => root.join(format!("target/xtask-dev-{pid}")),
        None => root.join("target/xtask-dev"),
    }
}

/// Removes the `xtask-dev-PID` directories under `target` of runs on free ports whose process
/// has ended (`running(pid)` is false): each such run writes one, and they would pile up. A
/// run's directory is kept until then, so its logs can be read after it stops. Failures to
/// remove are ignored: the directory is only a leftover.
fn remove_dirs_of_ended_runs(target: &Path, running: impl Fn(u32) -> bool) {
    let Ok(entries) = std::fs::read_dir(target) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("xtask-dev-"))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !running(pid) && entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The bundled clusters: `out/state`, a fresh copy of emojivoto with the link Secret, mirror
/// and federated Services of `tests/fixtures/east-link/`, and `out/east`, a fresh copy of the
/// linked cluster `east` (`tests/fixtures/east/`): edits to try deltas stay out of the
/// checked-in fixtures.
fn bundled_clusters(root: &Path, out: &Path) -> anyhow::Result<(PathBuf, Vec<(String, PathBuf)>)> {
    let (state, east) = (out.join("state"), out.join("east"));
    for (file, dir) in [
        ("tests/fixtures/emojivoto/cluster.yaml", &state),
        ("tests/fixtures/east-link/link.yaml", &state),
        ("tests/fixtures/east/cluster.yaml", &east),
    ] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let from = root.join(file);
        let name = from.file_name().context("fixture file name")?;
        std::fs::copy(&from, dir.join(name))
            .with_context(|| format!("copying {} to {}", from.display(), dir.display()))?;
    }
    Ok((state, vec![("east".to_string(), east)]))
}

/// The pod's executables.
struct Exes {
    destination: PathBuf,
    policy: PathBuf,
    sp_validator: PathBuf,
    shim: PathBuf,
}

/// The certificate files of a run.
struct CertFiles {
    server_name: String,
    trust_anchors: PathBuf,
    identity_cert: PathBuf,
    identity_key: PathBuf,
    /// `(cert, key)` of the policy webhook and of sp-validator.
    policy_webhook: (PathBuf, PathBuf),
    sp_validator: (PathBuf, PathBuf),
    client_cert: PathBuf,
    client_key: PathBuf,
}

/// The pod's own ports on loopback, as `deploy/base/destination.yaml` has them.
fn pod_addrs() -> PodAddrs {
    let local = |port| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port);
    PodAddrs {
        destination_mtls: local(8086),
        policy_mtls: local(8090),
        destination_grpc: local(18086),
        policy_grpc: local(18090),
        destination_admin: local(9996),
        policy_admin: local(9990),
        policy_webhook: local(9443),
        sp_validator: local(8443),
        sp_validator_admin: local(9997),
        shim_admin: local(4191),
        destination_introspection: local(9986),
        policy_introspection: local(9980),
    }
}

fn free_addrs() -> anyhow::Result<PodAddrs> {
    // Held until all are picked, so that no two are the same port.
    let listeners = (0..12)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .context("cannot bind 127.0.0.1:0 to pick free ports")?;
    let a = listeners
        .iter()
        .map(std::net::TcpListener::local_addr)
        .collect::<std::io::Result<Vec<_>>>()?;
    Ok(PodAddrs {
        destination_mtls: a[0],
        policy_mtls: a[1],
        destination_grpc: a[2],
        policy_grpc: a[3],
        destination_admin: a[4],
        policy_admin: a[5],
        policy_webhook: a[6],
        sp_validator: a[7],
        sp_validator_admin: a[8],
        shim_admin: a[9],
        destination_introspection: a[10],
        policy_introspection: a[11],
    })
}

/// Generates the run's trust anchor, identities and webhook certificates into `out`.
fn write_certs(out: &Path) -> anyhow::Result<CertFiles> {
    let dir = out.join("certs");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let validity = time::Duration::days(CERT_DAYS);
    let generated = certs::generate(certs::DEPLOY_NAMESPACE, "cluster.local", validity, None)?;
    let client = certs::client_identity(&generated, CLIENT_IDENTITY, validity)?;
    let write = |name: &str, contents: &str| -> anyhow::Result<PathBuf> {
        let path = dir.join(name);
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    };
    let webhook = |stem: &str| -> anyhow::Result<(PathBuf, PathBuf)> {
        let w = generated
            .webhooks
            .iter()
            .find(|w| w.webhook.file_stem == stem)
            .with_context(|| format!("no {stem} webhook certificate"))?;
        // The CA that signed it, as the webhook configuration's `caBundle` holds it: what a
        // client verifying the server needs (the serving certificate is not self-signed).
        write(&format!("{stem}-ca.crt"), &w.ca_pem)?;
        Ok((
            write(&format!("{stem}.crt"), &w.serving.cert_pem)?,
            write(&format!("{stem}.key"), &w.serving.key_pem)?,
        ))
    };
    Ok(CertFiles {
        server_name: generated.identity_name.clone(),
        trust_anchors: write("trust-anchor.crt", &generated.trust_anchors_pem)?,
        identity_cert: write("identity.crt", &generated.identity_chain_pem)?,
        identity_key: write("identity.key", &generated.identity_key_pem)?,
        policy_webhook: webhook("policy-validator")?,
        sp_validator: webhook("sp-validator")?,
        client_cert: write("client.crt", &client.cert_pem)?,
        client_key: write("client.key", &client.key_pem)?,
    })
}

/// Starts the controllers, waits for them, then the shim in front of them (its `/ready` needs
/// the local ports to answer), pushing each onto `pod` as it starts.
#[allow(clippy::too_many_arguments)]
async fn start(
    pod: &mut Vec<ServerProcess>,
    exes: &Exes,
    dir: &Path,
    linked: &[(String, PathBuf)],
    a: &PodAddrs,
    files: &CertFiles,
    out: &Path,
    extra: &[String],
) -> anyhow::Result<()> {
    let state = dir.as_os_str();
    let mut destination: Vec<OsString> = vec![
        format!("--addr={}", a.destination_grpc).into(),
        format!("--admin-addr={}", a.destination_admin).into(),
        format!("--introspection-addr={}", a.destination_introspection).into(),
        "--cluster-state".into(),
        state.into(),
    ];
    for (name, linked_dir) in linked {
        let mut arg = OsString::from(format!("--linked-cluster-state={name}="));
        arg.push(linked_dir);
        destination.push(arg);
    }
    destination.extend(server::flags_with_overrides(CHART_FLAGS, extra));

    let policy: Vec<OsString> = vec![
        format!("--grpc-addr={}", a.policy_grpc).into(),
        format!("--admin-addr={}", a.policy_admin).into(),
        format!("--server-addr={}", a.policy_webhook).into(),
        format!("--introspection-addr={}", a.policy_introspection).into(),
        flag_path("--server-tls-certs", &files.policy_webhook.0),
        flag_path("--server-tls-key", &files.policy_webhook.1),
        "--cluster-state".into(),
        state.into(),
        "--control-plane-namespace=linkerd".into(),
        "--cluster-networks=10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8".into(),
        "--identity-domain=cluster.local".into(),
        "--cluster-domain=cluster.local".into(),
        "--default-policy=all-unauthenticated".into(),
        "--default-opaque-ports=25,587,3306,4444,5432,6379,9300,11211".into(),
        "--probe-networks=0.0.0.0/0,::/0".into(),
    ];
    let sp_validator: Vec<OsString> = vec![
        format!("--addr={}", a.sp_validator).into(),
        format!("--admin-addr={}", a.sp_validator_admin).into(),
        flag_path("--server-tls-certs", &files.sp_validator.0),
        flag_path("--server-tls-key", &files.sp_validator.1),
    ];
    let controllers = [
        (&exes.destination, destination, a.destination_admin),
        (&exes.policy, policy, a.policy_admin),
        (&exes.sp_validator, sp_validator, a.sp_validator_admin),
    ];
    for (exe, args, admin) in controllers {
        let log = log_path(out, exe);
        pod.push(ServerProcess::spawn_args(
            exe,
            &args,
            admin,
            Output::File(log),
        )?);
    }
    for process in pod.iter_mut() {
        process.wait_ready(READY_TIMEOUT).await?;
    }

    let shim: Vec<OsString> = vec![
        format!("--forward={}={}", a.destination_mtls, a.destination_grpc).into(),
        format!("--forward={}={}", a.policy_mtls, a.policy_grpc).into(),
        flag_path("--identity-cert", &files.identity_cert),
        flag_path("--identity-key", &files.identity_key),
        flag_path("--trust-anchors", &files.trust_anchors),
        format!("--admin-addr={}", a.shim_admin).into(),
        "--control-plane-namespace=linkerd".into(),
        "--identity-trust-domain=cluster.local".into(),
    ];
    let log = log_path(out, &exes.shim);
    pod.push(ServerProcess::spawn_args(
        &exes.shim,
        &shim,
        a.shim_admin,
        Output::File(log),
    )?);
    pod.last_mut()
        .context("the shim was just started")?
        .wait_ready(READY_TIMEOUT)
        .await
}

fn flag_path(flag: &str, path: &Path) -> OsString {
    let mut arg = OsString::from(format!("{flag}="));
    arg.push(path);
    arg
}

fn log_path(out: &Path, exe: &Path) -> PathBuf {
    let name = exe
        .file_name()
        .map_or_else(|| "process".into(), |n| n.to_string_lossy().into_owned());
    out.join(format!("{name}.log"))
}

/// Waits until one of the processes exits; returns its name, status and log tail.
async fn first_exit(
    pod: &mut [ServerProcess],
) -> anyhow::Result<(String, std::process::ExitStatus, String)> {
    loop {
        for process in pod.iter_mut() {
            if let Some(status) = process.try_wait()? {
                return Ok((process.name().to_string(), status, process.log_tail()));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Stops the pod as Kubernetes stops it: SIGTERM to every container at once, and to the
/// mtls-shim, a native sidecar, only once they have exited, so that the streams it relays end
/// with the controllers' `OK` rather than with a closed connection.
async fn stop(pod: &mut Vec<ServerProcess>) -> anyhow::Result<()> {
    if pod.is_empty() {
        return Ok(());
    }
    eprintln!("stopping the pod...");
    let (sidecars, mut containers): (Vec<_>, Vec<_>) = std::mem::take(pod)
        .into_iter()
        .partition(|p| p.name() == "mtls-shim");
    let stopped = futures::future::join_all(containers.iter_mut().map(|process| async move {
        (process.name().to_string(), process.stop(STOP_GRACE).await)
    }))
    .await;
    for (name, status) in stopped {
        eprintln!("{name} stopped ({})", status?);
    }
    for mut process in sidecars {
        let status = process.stop(STOP_GRACE).await?;
        eprintln!("{} stopped ({status})", process.name());
    }
    Ok(())
}

fn print_banner(dir: &Path, info: &PodInfo<'_>, uses_fixture: bool) {
    let a = info.addrs;
    let authority = if uses_fixture {
        "web-svc.emojivoto.svc.cluster.local:80"
    } else {
        "SERVICE.NAMESPACE.svc.cluster.local:PORT"
    };
    let dst = reachable(a.destination_grpc);
    println!();
    println!(
        "the linkerd-destination pod is ready, serving {} (offline mode)",
        dir.display()
    );
    println!(
        "  Destination gRPC, mTLS (mtls-shim)   {}",
        reachable(a.destination_mtls)
    );
    println!(
        "  policy gRPC, mTLS (mtls-shim)        {}",
        reachable(a.policy_mtls)
    );
    println!("  Destination gRPC, in the pod         http://{dst}");
    println!(
        "  policy gRPC, in the pod              http://{}",
        reachable(a.policy_grpc)
    );
    println!(
        "  webhooks (HTTPS)                     policy {}, sp-validator {}",
        reachable(a.policy_webhook),
        reachable(a.sp_validator)
    );
    println!(
        "  admin (/ready /live /metrics)        destination {}, policy {}, sp-validator {}, shim {}",
        reachable(a.destination_admin),
        reachable(a.policy_admin),
        reachable(a.sp_validator_admin),
        reachable(a.shim_admin)
    );
    println!(
        "  introspection (dst-diag streams)     destination {}, policy {}",
        reachable(a.destination_introspection),
        reachable(a.policy_introspection)
    );
    println!(
        "  mTLS as a proxy: server name {}, trust anchor {}, client {} ({}, {})",
        info.server_name,
        info.trust_anchors.display(),
        info.client_identity,
        info.client_cert.display(),
        info.client_key.display()
    );
    println!("  logs and pod.json in {}", info.logs.display());
    println!();
    println!("Try:");
    println!(
        "  cargo run -q -p diag --bin dst-diag -- endpoints {authority} --destination http://{dst}"
    );
    println!(
        "  cargo run -q -p diag --bin dst-diag -- profile {authority} --destination http://{dst}"
    );
    if uses_fixture {
        // The linked cluster east: a mirror Service (remote discovery) and a federated one.
        for authority in [
            "web-svc-east.emojivoto.svc.cluster.local:80",
            "web-svc-federated.emojivoto.svc.cluster.local:80",
        ] {
            println!(
                "  cargo run -q -p diag --bin dst-diag -- endpoints {authority} --destination http://{dst}"
            );
        }
    }
    let policy = reachable(a.policy_grpc);
    let (workload, port) = if uses_fixture {
        ("emojivoto:voting-qbtpmtmk74-gdg57", "8080")
    } else {
        ("NAMESPACE:POD", "PORT")
    };
    println!(
        "  cargo run -q -p diag --bin dst-diag -- policy inbound {workload} {port} --policy http://{policy}"
    );
    println!(
        "  cargo run -q -p diag --bin dst-diag -- policy outbound {authority} --policy http://{policy}"
    );
    println!(
        "  cargo run -q -p diag --bin dst-diag -- streams --introspection {}",
        reachable(a.destination_introspection)
    );
    println!("  curl http://{}/metrics", reachable(a.shim_admin));
    // The webhooks' certificates name their Services: reached under those names, trusting
    // the CA that signed each (what the README's examples do at the default ports).
    let cert_dir = info.trust_anchors.parent().unwrap_or(Path::new("."));
    for (webhook, addr, review) in [
        ("sp-validator", a.sp_validator, "serviceprofile-review.json"),
        ("policy-validator", a.policy_webhook, "server-review.json"),
    ] {
        let addr = reachable(addr);
        let host = format!("linkerd-{webhook}.{}.svc", certs::DEPLOY_NAMESPACE);
        println!(
            "  curl --cacert {} --resolve {host}:{}:{} https://{host}:{}/ -d @examples/admission/{review}",
            cert_dir.join(format!("{webhook}-ca.crt")).display(),
            addr.port(),
            addr.ip(),
            addr.port(),
        );
    }
    println!("(the first dst-diag run compiles it, a few minutes on a small machine)");
    println!();
    let hint = if uses_fixture {
        format!(
            " and in the linked cluster east's {} (both copied afresh each run; pass \
             --cluster-state DIR to serve your own)",
            dir.with_file_name("east").display()
        )
    } else {
        String::new()
    };
    println!(
        "It follows edits to the files in {}{hint}; Ctrl-C stops it.",
        dir.display()
    );
}

/// Where `cargo build` puts the debug binaries: `$CARGO_TARGET_DIR/debug` when that is set
/// (cargo's own rule; empty counts as unset), else `target/debug`.
fn debug_bin_dir(target_dir: Option<OsString>) -> PathBuf {
    match target_dir {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("debug"),
        _ => PathBuf::from("target/debug"),
    }
}

/// `--bin-dir`'s help, naming [`debug_bin_dir`] for this environment as the example.
fn bin_dir_help() -> String {
    format!(
        "Take the four binaries from DIR (e.g. {} after `cargo build`) instead of building them",
        debug_bin_dir(std::env::var_os("CARGO_TARGET_DIR")).display()
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: `-- --addr=...` moved destination away from the shim's upstream, and the
    /// run failed 60 s later with an mtls-shim readiness error.
    #[test]
    fn address_overrides_after_the_separator_are_refused() {
        let extra = |flags: &[&str]| flags.iter().map(|f| f.to_string()).collect::<Vec<_>>();
        for flag in [
            "--addr=127.0.0.1:1",
            "-addr=:1",
            "--admin-addr",
            "-metrics-addr=:2",
        ] {
            let error = refuse_pod_addresses(&extra(&["--log-level=debug", flag])).unwrap_err();
            assert!(error.to_string().starts_with(flag), "{error}");
            assert!(error.to_string().contains("--free-ports"), "{error}");
        }
        refuse_pod_addresses(&extra(&["--enable-ipv6=true", "--log-level=debug"])).unwrap();
        // A value that happens to read like one of the names is not a flag.
        refuse_pod_addresses(&extra(&["--log-level", "addr"])).unwrap();
    }

    /// Tester finding: `--help` suggested `--bin-dir target/debug` while `CARGO_TARGET_DIR`
    /// put the binaries elsewhere.
    #[test]
    fn bin_dir_help_names_the_target_dir_cargo_builds_into() {
        assert_eq!(debug_bin_dir(None), Path::new("target/debug"));
        assert_eq!(debug_bin_dir(Some("".into())), Path::new("target/debug"));
        assert_eq!(
            debug_bin_dir(Some("/work/t".into())),
            Path::new("/work/t/debug")
        );
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            dev: DevArgs,
        }
        let help = <Cli as clap::CommandFactory>::command()
            .render_help()
            .to_string();
        let example = debug_bin_dir(std::env::var_os("CARGO_TARGET_DIR"));
        assert!(
            help.contains(&format!(
                "Take the four binaries from DIR (e.g. {} after `cargo build`)",
                example.display()
            )),
            "{help}"
        );
    }

    #[test]
    fn the_directories_of_ended_runs_on_free_ports_are_removed() {
        let target = tempfile::tempdir().unwrap();
        for name in [
            "xtask-dev-10",
            "xtask-dev-11",
            "xtask-dev",
            "xtask-dev-x",
            "other-12",
        ] {
            std::fs::create_dir(target.path().join(name)).unwrap();
            std::fs::write(target.path().join(name).join("pod.json"), "{}").unwrap();
        }
        // A file with a run's name is not a run's directory.
        std::fs::write(target.path().join("xtask-dev-13"), "").unwrap();
        remove_dirs_of_ended_runs(target.path(), |pid| pid == 11);
        let mut left: Vec<_> = std::fs::read_dir(target.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "other-12",
                "xtask-dev",
                "xtask-dev-11",
                "xtask-dev-13",
                "xtask-dev-x"
            ]
        );
    }

    #[test]
    fn a_pod_on_free_ports_writes_to_a_directory_of_its_own() {
        let root = Path::new("/ws");
        assert_eq!(
            out_dir(root, None, false, 7),
            PathBuf::from("/ws/target/xtask-dev")
        );
        assert_eq!(
            out_dir(root, None, true, 7),
            PathBuf::from("/ws/target/xtask-dev-7")
        );
        assert_eq!(
            out_dir(root, Some(Path::new("run")), true, 7),
            PathBuf::from("/ws/run")
        );
        assert_eq!(
            out_dir(root, Some(Path::new("/tmp/run")), false, 7),
            PathBuf::from("/tmp/run")
        );
    }
}
