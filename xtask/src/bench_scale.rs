//! `cargo xtask bench-scale`: how much memory the index of a large meshed cluster takes and how
//! long a binary takes to be ready on it, in offline mode and in kube mode.
//!
//! 1. Generates N Services × M meshed pods with their ReplicaSets, EndpointSlices, Nodes and
//!    Namespaces ([`crate::scale_gen`]).
//! 2. Offline mode: writes them into a state directory as `kubectl get -o yaml` (or `-o json`)
//!    prints them and starts the release binary with `--cluster-state DIR`.
//! 3. Kube mode: serves them from a loopback API server ([`crate::static_kube`]), which
//!    answers the binary's list requests in pages from responses prepared beforehand, and
//!    starts the release binary with `--kubeconfig` pointing at it.
//! 4. For each (mode, binary), one after another: the time from spawn to `/ready` answering
//!    200 (polled every 20 ms), in kube mode also from the last list page the API server sent
//!    to `/ready` ("ready after the lists arrive"); `VmRSS` once ready and after the settle
//!    time, and `VmHWM` (the peak); the server's CPU time until ready. A binary that passes the
//!    RSS limit or the ready timeout while loading is stopped and reported as such.
//! 5. Checks the index is complete: `destination` must answer a `Get` of the last Service with
//!    its M endpoints, each with a TLS identity (the pods are meshed); in kube mode every pod
//!    must have been listed.
//! 6. With `--streams S`, `destination` only: opens S `Get` streams of the last Service at once,
//!    round robin over `--connections` HTTP/2 connections, waits until each has all M
//!    endpoints, and reads the RSS again: what a stream costs on this cluster, in each mode.

use anyhow::{Context, bail, ensure};
use linkerd2_proxy_api::destination::{
    GetDestination, destination_client::DestinationClient, update,
};
use std::{
    collections::BTreeSet,
    ffi::OsString,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};
use tonic::transport::Endpoint;

use crate::{
    bench,
    scale_gen::{Format, Generator, Kind, ScaleSpec},
    server::{self, CHART_FLAGS, Memory, Output, POLICY_CHART_FLAGS, ServerProcess},
    static_kube::{self, StaticKube},
};

/// How often `/ready` is polled: the resolution of the time to ready.
const READY_POLL: Duration = Duration::from_millis(20);
/// `--connections` when not given (or `--streams`, when fewer).
const DEFAULT_CONNECTIONS: usize = 200;
/// How long the completeness check waits for the endpoints of a `Get`.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);
/// The policy controller's Lease claimant (`HOSTNAME`) in kube mode.
const CLAIMANT: &str = "policy-bench-scale-0";
/// Kinds the API server serves that the generated cluster has none of: the binaries list them
/// and must find them empty, not missing.
const EMPTY_COLLECTIONS: [(&str, &str, &str); 2] = [
    ("/apis/batch/v1/jobs", "batch/v1", "Job"),
    // No Gateway API CRD is installed: the policy controller serves those kinds empty.
    (
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
    ),
];

/// `cargo xtask bench-scale [--services N] [--pods-per-service M] [--mode offline|kube|both]
/// [--binary destination|policy-controller|both] [--format yaml|json] [--keep]`
#[derive(Debug, clap::Args)]
pub struct BenchScaleArgs {
    /// Services in the generated cluster, each with a Deployment's ReplicaSet of meshed pods.
    #[arg(long, default_value_t = 5000)]
    services: usize,

    /// Pods per Service.
    #[arg(long, default_value_t = 10)]
    pods_per_service: usize,

    /// Where the binaries read the cluster from: a state directory (offline), a loopback API
    /// server (kube), or one after the other.
    #[arg(long, value_enum, default_value_t = ModeArg::Both)]
    mode: ModeArg,

    /// The binaries measured, one at a time.
    #[arg(long, value_enum, default_value_t = BinaryArg::Destination)]
    binary: BinaryArg,

    /// The state directory's files in offline mode.
    #[arg(long, value_enum, default_value_t = Format::Yaml)]
    format: Format,

    /// `destination` only: `Get` streams of the last Service opened after the check, to
    /// measure what a stream costs (0: none).
    #[arg(long, default_value_t = 0)]
    streams: usize,

    /// HTTP/2 connections the `--streams` are spread over (round robin); by default 200, or
    /// one per stream when there are fewer.
    #[arg(long)]
    connections: Option<usize>,

    /// Seconds between the RSS read at ready and the settled one.
    #[arg(long, default_value_t = 2.0)]
    settle: f64,

    /// Seconds a binary has to become ready before it is stopped.
    #[arg(long, default_value_t = 300.0)]
    ready_timeout: f64,

    /// A binary whose RSS passes this many MiB while loading is stopped.
    #[arg(long, default_value_t = 6144)]
    max_rss_mib: u64,

    /// The binaries' `--log-level` (their logs are in the temporary directory: see `--keep`).
    #[arg(long, default_value = "warn")]
    server_log_level: String,

    /// Build and run the release binaries; `--release=false` runs debug builds.
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    release: bool,

    /// Keep the temporary directory (state directory, kubeconfig, server logs).
    #[arg(long)]
    keep: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ModeArg {
    Offline,
    Kube,
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum BinaryArg {
    Destination,
    PolicyController,
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Offline,
    Kube,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Binary {
    Destination,
    PolicyController,
}

/// Where a run's binary reads the cluster from.
enum Source<'a> {
    Offline(&'a Path),
    Kube {
        api: &'a StaticKube,
        kubeconfig: &'a Path,
    },
}

/// One (mode, binary) measurement.
struct Run {
    mode: Mode,
    binary: Binary,
    /// Objects the binary was given: in the state directory, or listed by the API server.
    objects: usize,
    /// Average bytes of JSON per pod as the binary read it.
    pod_bytes: f64,
    outcome: Outcome,
}

enum Outcome {
    Ready(Figures),
    /// Stopped while loading: why, after how long, and its memory then.
    Stopped {
        why: String,
        after: Duration,
        memory: Memory,
    },
}

struct Figures {
    /// `/proc/loadavg`'s 1, 5 and 15 minute load averages when the binary was started: the
    /// machine is shared, so the times are only as good as it was quiet.
    load: String,
    ready: Duration,
    /// Kube mode: from the last list page sent to `/ready`.
    after_lists: Option<Duration>,
    at_ready: Memory,
    settled: Memory,
    cpu_to_ready: Duration,
    /// Offline mode: how the first read's time split between parsing and indexing (from the
    /// binary's log), or why that could not be read.
    first_read: Option<Result<String, String>>,
    /// The completeness check: what it found, or why it failed.
    check: Result<String, String>,
    /// `--streams`: what opening them cost, or why it failed.
    streams: Option<Result<StreamFigures, String>>,
}

/// `--streams` on one run.
struct StreamFigures {
    streams: usize,
    /// From the first request until every stream had all M endpoints.
    opened_in: Duration,
    /// RSS with the connections open, before the first stream, and with every stream open.
    rss_before: u64,
    rss_open: u64,
}

/// What was generated, for the report.
#[derive(Default)]
struct Generated {
    offline: Option<OfflineFiles>,
    kube: Option<KubeData>,
}

struct OfflineFiles {
    files: usize,
    bytes: u64,
    objects: usize,
    pod_bytes: f64,
    took: Duration,
}

struct KubeData {
    objects: usize,
    pod_bytes: f64,
    took: Duration,
}

/// Runs the benchmark and prints its parameters and figures.
///
/// Errors when the build, the generation or the fake API server fails, or a binary exits
/// before becoming ready; a binary stopped at the RSS limit or the ready timeout is reported,
/// not an error.
pub fn run(root: &Path, args: BenchScaleArgs) -> anyhow::Result<()> {
    args.validate()?;
    if cfg!(debug_assertions) && args.release {
        return bench::rerun_optimized(root);
    }
    let binaries = args.binaries();
    let builds: Vec<(&str, &str)> = binaries.iter().map(|b| b.package_and_name()).collect();
    let exes = server::build_binaries(root, &builds, args.release)?;
    let tmp = bench::temp_dir("xtask-bench-scale-", &[])?;
    let spec = ScaleSpec {
        services: args.services,
        pods_per_service: args.pods_per_service,
    };
    let generator = Generator::new(spec)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the Tokio runtime")?;
    let result = runtime.block_on(bench(&generator, &binaries, &exes, tmp.path(), &args));
    runtime.shutdown_timeout(Duration::from_secs(5));
    if args.keep {
        let kept = tmp.keep();
        eprintln!("kept {}", kept.display());
    }
    let (generated, runs) = result?;
    print(&args, &spec, &generated, &runs);
    Ok(())
}

async fn bench(
    generator: &Generator,
    binaries: &[Binary],
    exes: &[PathBuf],
    dir: &Path,
    args: &BenchScaleArgs,
) -> anyhow::Result<(Generated, Vec<Run>)> {
    let spec = generator.spec();
    let mut generated = Generated::default();
    let mut runs = Vec::new();
    if args.mode != ModeArg::Kube {
        let state = dir.join("state");
        std::fs::create_dir(&state)
            .with_context(|| format!("cannot create {}", state.display()))?;
        eprintln!(
            "writing {} Services x {} pods ({} objects) into {}...",
            spec.services,
            spec.pods_per_service,
            spec.objects(),
            state.display()
        );
        let started = Instant::now();
        let written = generator.write_state_dir(&state, args.format)?;
        let files = OfflineFiles {
            files: written.files,
            bytes: written.bytes,
            objects: written.objects,
            pod_bytes: written.pod_json_bytes as f64 / spec.pods() as f64,
            took: started.elapsed(),
        };
        for (binary, exe) in binaries.iter().zip(exes) {
            let outcome = measure(*binary, exe, Source::Offline(&state), dir, &spec, args).await?;
            runs.push(Run {
                mode: Mode::Offline,
                binary: *binary,
                objects: files.objects,
                pod_bytes: files.pod_bytes,
                outcome,
            });
        }
        generated.offline = Some(files);
    }
    if args.mode != ModeArg::Offline {
        eprintln!(
            "preparing the API server's answers for {} objects...",
            spec.objects()
        );
        let started = Instant::now();
        let (api, pod_bytes) = serve(generator).await?;
        let data = KubeData {
            objects: api.objects(),
            pod_bytes,
            took: started.elapsed(),
        };
        eprintln!(
            "API server on http://{} ready in {:.1} s",
            api.addr(),
            data.took.as_secs_f64()
        );
        let kubeconfig = dir.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig)?;
        for (binary, exe) in binaries.iter().zip(exes) {
            let source = Source::Kube {
                api: &api,
                kubeconfig: &kubeconfig,
            };
            let outcome = measure(*binary, exe, source, dir, &spec, args).await?;
            let stats = api.take_stats();
            runs.push(Run {
                mode: Mode::Kube,
                binary: *binary,
                objects: stats.listed.values().sum::<u64>() as usize,
                pod_bytes,
                outcome,
            });
        }
        generated.kube = Some(data);
    }
    Ok((generated, runs))
}

/// The fake API server with every generated object, and the average bytes of a pod as it
/// lists them.
async fn serve(generator: &Generator) -> anyhow::Result<(StaticKube, f64)> {
    let spec = generator.spec();
    let mut builder = static_kube::Builder::default();
    for kind in Kind::ALL {
        builder.serve(kind.path(), kind.api_version(), kind.name());
    }
    for (path, api_version, kind) in EMPTY_COLLECTIONS {
        builder.serve(path, api_version, kind);
    }
    for (kind, object) in generator.cluster_objects() {
        builder.insert(kind.path(), &object)?;
    }
    let mut pod_bytes = 0;
    for s in 0..spec.services {
        for (kind, object) in generator.service_objects(s) {
            let bytes = builder.insert(kind.path(), &object)?;
            if kind == Kind::Pod {
                pod_bytes += bytes;
            }
        }
    }
    let api = builder.start().await?;
    Ok((api, pod_bytes as f64 / spec.pods() as f64))
}

/// Starts `binary` on `source`, waits for `/ready`, reads its memory at ready and after the
/// settle time, checks the index is complete, and stops it.
async fn measure(
    binary: Binary,
    exe: &Path,
    source: Source<'_>,
    dir: &Path,
    spec: &ScaleSpec,
    args: &BenchScaleArgs,
) -> anyhow::Result<Outcome> {
    let mode = match source {
        Source::Offline(_) => Mode::Offline,
        Source::Kube { .. } => Mode::Kube,
    };
    let addr = server::free_local_addr()?;
    let admin_addr = server::free_local_addr()?;
    let log = dir.join(format!("{}-{}.log", binary.name(), mode.name()));
    let output = Output::File(log.clone());
    // Offline, the first read's log line splits its time into parsing and indexing.
    let level = match mode {
        Mode::Offline => format!("{},{FIRST_READ_TARGET}=info", args.server_log_level),
        Mode::Kube => args.server_log_level.clone(),
    };
    let quiet = [format!("--log-level={level}")];
    eprintln!("starting {} in {} mode...", binary.name(), mode.name());
    let load = load_average();
    let started = Instant::now();
    let mut server = match (binary, &source) {
        (Binary::Destination, Source::Offline(state)) => {
            ServerProcess::spawn(exe, state, addr, admin_addr, &quiet, output)?
        }
        (Binary::PolicyController, Source::Offline(state)) => {
            ServerProcess::spawn_policy(exe, state, addr, admin_addr, &quiet, output)?
        }
        (Binary::Destination, Source::Kube { kubeconfig, .. }) => {
            let mut flags: Vec<OsString> = vec![
                format!("--addr={addr}").into(),
                format!("--admin-addr={admin_addr}").into(),
                "--kubeconfig".into(),
                kubeconfig.into(),
            ];
            flags.extend(server::flags_with_overrides(CHART_FLAGS, &quiet));
            ServerProcess::spawn_args(exe, &flags, admin_addr, output)?
        }
        (Binary::PolicyController, Source::Kube { kubeconfig, .. }) => {
            let mut flags: Vec<OsString> = vec![
                format!("--grpc-addr={addr}").into(),
                format!("--admin-addr={admin_addr}").into(),
                "--kubeconfig".into(),
                kubeconfig.into(),
            ];
            flags.extend(POLICY_CHART_FLAGS.iter().map(OsString::from));
            flags.extend(quiet.iter().map(OsString::from));
            // The status writer's Lease names its holder after HOSTNAME.
            let env = [("HOSTNAME", CLAIMANT)];
            ServerProcess::spawn_args_env(exe, &flags, &env, admin_addr, output)?
        }
    };
    let pid = server.pid();
    let limit = args.max_rss_mib * 1024 * 1024;
    let deadline = started + Duration::from_secs_f64(args.ready_timeout);
    loop {
        if let Some(status) = server.try_wait()? {
            bail!(
                "{} exited before becoming ready ({status}){}",
                binary.name(),
                server.log_tail()
            );
        }
        let memory = server::memory(pid)?;
        let why = if memory.rss > limit {
            Some(format!("RSS passed {} MiB", args.max_rss_mib))
        } else if Instant::now() >= deadline {
            Some(format!("not ready within {} s", args.ready_timeout))
        } else {
            None
        };
        if let Some(why) = why {
            let after = started.elapsed();
            eprintln!(
                "stopping {}: {why} ({:.1} s after spawn)",
                binary.name(),
                after.as_secs_f64()
            );
            server.stop(Duration::from_secs(5)).await?;
            return Ok(Outcome::Stopped { why, after, memory });
        }
        if let Ok((200, _)) = server::http_get(admin_addr, "/ready").await {
            break;
        }
        tokio::time::sleep(READY_POLL).await;
    }
    let ready_at = Instant::now();
    let ready = ready_at.duration_since(started);
    let at_ready = server::memory(pid)?;
    let cpu_to_ready = server::cpu_time(pid)?;
    let after_lists = match &source {
        Source::Kube { api, .. } => api
            .stats()
            .last_page_sent
            .map(|sent| ready_at.saturating_duration_since(sent)),
        Source::Offline(_) => None,
    };
    let first_read = match mode {
        Mode::Offline => Some(first_read(&log)),
        Mode::Kube => None,
    };
    eprintln!(
        "{} ready after {:.2} s; settling for {} s...",
        binary.name(),
        ready.as_secs_f64(),
        args.settle
    );
    tokio::time::sleep(Duration::from_secs_f64(args.settle)).await;
    let settled = server::memory(pid)?;
    let mut check = match binary {
        Binary::Destination => check_endpoints(addr, spec).await,
        Binary::PolicyController => Ok("ready".to_string()),
    };
    let streams = match binary {
        Binary::Destination if args.streams > 0 && check.is_ok() => {
            Some(open_streams(addr, pid, spec, args).await)
        }
        _ => None,
    };
    if let Source::Kube { api, .. } = &source {
        let listed = api
            .stats()
            .listed
            .get(Kind::Pod.path())
            .copied()
            .unwrap_or_default();
        if (listed as usize) < spec.pods() {
            check = Err(format!("only {listed} of {} pods listed", spec.pods()));
        } else if let Ok(found) = &mut check {
            found.push_str(&format!("; {listed} pods listed"));
        }
    }
    if let Some(status) = server.try_wait()? {
        bail!(
            "{} exited during the benchmark ({status}){}",
            binary.name(),
            server.log_tail()
        );
    }
    server.stop(Duration::from_secs(5)).await?;
    Ok(Outcome::Ready(Figures {
        load,
        ready,
        after_lists,
        at_ready,
        settled,
        cpu_to_ready,
        first_read,
        check,
        streams,
    }))
}

/// The module whose `info` line reports the offline first read.
const FIRST_READ_TARGET: &str = "linkerd_index::source::offline";

/// The offline first read's split, from the binary's log line `cluster state directory read`
/// (`parse_ms=`, `index_ms=`): `parse P s, index I s`, or why it is missing.
fn first_read(log: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let line = text
        .lines()
        .find(|l| l.contains("cluster state directory read"))
        .ok_or_else(|| format!("no first-read line in {}", log.display()))?;
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
            .and_then(|value| value.parse::<u64>().ok())
            .ok_or_else(|| format!("no {name} in {line:?}"))
    };
    let seconds = |ms: u64| ms as f64 / 1000.0;
    Ok(format!(
        "parse {:.2} s, index {:.2} s",
        seconds(field("parse_ms")?),
        seconds(field("index_ms")?)
    ))
}

/// `--streams`: opens them all at once over `--connections` connections, waits until each has
/// the last Service's M endpoints, reads the RSS, and closes them.
async fn open_streams(
    addr: SocketAddr,
    pid: u32,
    spec: &ScaleSpec,
    args: &BenchScaleArgs,
) -> Result<StreamFigures, String> {
    let connections = args.connections();
    let channels = bench::connect(addr, connections)
        .await
        .map_err(|e| format!("{e:#}"))?
        .channels;
    let rss = || server::rss_bytes(pid).map_err(|e| format!("{e:#}"));
    let rss_before = rss()?;
    let request = GetDestination {
        scheme: "k8s".to_string(),
        path: spec.authority(spec.services - 1),
        context_token: String::new(),
    };
    let endpoints = spec.pods_per_service;
    eprintln!(
        "opening {} Get streams of {} over {} connections...",
        args.streams, request.path, connections
    );
    let started = Instant::now();
    let opened = (0..args.streams).map(|i| {
        let mut client = DestinationClient::new(channels[i % channels.len()].clone());
        let request = request.clone();
        async move {
            let mut updates = client
                .get(request)
                .await
                .map_err(|e| format!("stream {i}: Get refused: {e}"))?
                .into_inner();
            let mut got = 0;
            while got < endpoints {
                match updates.message().await {
                    Ok(Some(update)) => match update.update {
                        Some(update::Update::Add(set)) => got += set.addrs.len(),
                        other => return Err(format!("stream {i}: unexpected update {other:?}")),
                    },
                    Ok(None) => return Err(format!("stream {i}: ended")),
                    Err(e) => return Err(format!("stream {i}: {e}")),
                }
            }
            Ok(updates)
        }
    });
    let timeout = CHECK_TIMEOUT.max(Duration::from_millis(5 * args.streams as u64));
    let open = tokio::time::timeout(timeout, futures::future::try_join_all(opened))
        .await
        .map_err(|_| format!("not every stream had its endpoints within {timeout:?}"))??;
    let opened_in = started.elapsed();
    let rss_open = rss()?;
    drop(open);
    drop(channels);
    Ok(StreamFigures {
        streams: args.streams,
        opened_in,
        rss_before,
        rss_open,
    })
}

/// A `Get` of the last Service's HTTP port must bring its M pods' addresses, each with a TLS
/// identity.
async fn check_endpoints(addr: SocketAddr, spec: &ScaleSpec) -> Result<String, String> {
    let last = spec.services - 1;
    let authority = spec.authority(last);
    let expected: BTreeSet<SocketAddr> = (0..spec.pods_per_service)
        .map(|j| spec.endpoint(last, j))
        .collect();
    let get = async {
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| format!("invalid address: {e}"))?
            .connect()
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let mut client = DestinationClient::new(channel);
        let request = GetDestination {
            scheme: "k8s".to_string(),
            path: authority.clone(),
            context_token: String::new(),
        };
        let mut updates = client
            .get(request)
            .await
            .map_err(|e| format!("Get refused: {e}"))?
            .into_inner();
        let (mut got, mut with_identity) = (BTreeSet::new(), 0);
        while got.len() < expected.len() {
            let update = updates
                .message()
                .await
                .map_err(|e| format!("Get failed: {e}"))?
                .ok_or("the Get stream ended")?;
            match update.update {
                Some(update::Update::Add(set)) => {
                    for weighted in set.addrs {
                        with_identity += usize::from(weighted.tls_identity.is_some());
                        if let Some(a) = weighted.addr.and_then(|a| SocketAddr::try_from(a).ok()) {
                            got.insert(a);
                        }
                    }
                }
                other => return Err(format!("unexpected update {other:?}")),
            }
        }
        Ok::<_, String>((got, with_identity))
    };
    let (got, with_identity) = tokio::time::timeout(CHECK_TIMEOUT, get)
        .await
        .map_err(|_| format!("no {} endpoints within {CHECK_TIMEOUT:?}", expected.len()))??;
    if got != expected {
        return Err(format!(
            "{authority}: endpoints {got:?}, expected {expected:?}"
        ));
    }
    if with_identity != expected.len() {
        return Err(format!(
            "{authority}: {with_identity} of {} endpoints have a TLS identity",
            expected.len()
        ));
    }
    Ok(format!("{authority}: {} meshed endpoints", got.len()))
}

/// The 1, 5 and 15 minute load averages, or `?` when they cannot be read.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".to_string())
}

// === impl BenchScaleArgs ===

impl BenchScaleArgs {
    fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.services >= 1, "--services must be at least 1");
        ensure!(
            self.pods_per_service >= 1,
            "--pods-per-service must be at least 1"
        );
        ensure!(
            self.settle >= 0.0 && self.settle.is_finite(),
            "--settle must not be negative"
        );
        ensure!(
            self.ready_timeout > 0.0 && self.ready_timeout.is_finite(),
            "--ready-timeout must be positive"
        );
        ensure!(self.max_rss_mib > 0, "--max-rss-mib must be positive");
        if self.streams > 0 {
            ensure!(
                self.binary != BinaryArg::PolicyController,
                "--streams opens Get streams: it needs --binary destination or both"
            );
            ensure!(
                (1..=self.streams).contains(&self.connections()),
                "--connections must be between 1 and --streams ({})",
                self.streams
            );
        } else {
            ensure!(
                self.connections.is_none(),
                "--connections spreads the --streams: give --streams too"
            );
        }
        Ok(())
    }

    /// The connections `--streams` are spread over.
    fn connections(&self) -> usize {
        self.connections
            .unwrap_or(DEFAULT_CONNECTIONS.min(self.streams))
    }

    fn binaries(&self) -> Vec<Binary> {
        match self.binary {
            BinaryArg::Destination => vec![Binary::Destination],
            BinaryArg::PolicyController => vec![Binary::PolicyController],
            BinaryArg::Both => vec![Binary::Destination, Binary::PolicyController],
        }
    }
}

// === impl Mode, Binary ===

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Offline => "offline",
            Mode::Kube => "kube",
        }
    }
}

impl Binary {
    fn name(self) -> &'static str {
        self.package_and_name().1
    }

    /// The cargo package and binary target.
    fn package_and_name(self) -> (&'static str, &'static str) {
        match self {
            Binary::Destination => ("destination", "destination"),
            Binary::PolicyController => ("policy", "policy-controller"),
        }
    }
}

// === the report ===

fn print(args: &BenchScaleArgs, spec: &ScaleSpec, generated: &Generated, runs: &[Run]) {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let format = match args.format {
        Format::Yaml => "yaml",
        Format::Json => "json",
    };
    println!();
    println!("== cargo xtask bench-scale ==");
    println!(
        "parameters: --services {} --pods-per-service {} --mode {} --binary {} --format {format} --streams {} --connections {} --settle {} --ready-timeout {} --max-rss-mib {} --release={}",
        args.services,
        args.pods_per_service,
        format!("{:?}", args.mode).to_lowercase(),
        match args.binary {
            BinaryArg::Destination => "destination",
            BinaryArg::PolicyController => "policy-controller",
            BinaryArg::Both => "both",
        },
        args.streams,
        args.connections(),
        args.settle,
        args.ready_timeout,
        args.max_rss_mib,
        args.release
    );
    println!(
        "cluster: {} Services x {} meshed pods = {} pods, {} ReplicaSets, {} EndpointSlices, {} Nodes in 3 zones, {} Namespaces: {} objects",
        spec.services,
        spec.pods_per_service,
        spec.pods(),
        spec.count(Kind::ReplicaSet),
        spec.count(Kind::EndpointSlice),
        spec.nodes(),
        spec.namespaces(),
        spec.objects()
    );
    if let Some(files) = &generated.offline {
        println!(
            "offline: {} {format} files, {:.1} MiB, written in {:.1} s; a pod is {:.0} bytes of JSON as kubectl prints it (managedFields hidden)",
            files.files,
            mib(files.bytes),
            files.took.as_secs_f64(),
            files.pod_bytes
        );
    }
    if let Some(kube) = &generated.kube {
        println!(
            "kube: {} objects served from prepared answers (ready in {:.1} s); a pod is {:.0} bytes of JSON as the API server lists it (managedFields included)",
            kube.objects,
            kube.took.as_secs_f64(),
            kube.pod_bytes
        );
    }
    println!();
    println!(
        "| cluster | mode | binary | objects | JSON B/pod | ready from spawn | ready after lists | RSS at ready | RSS settled | peak (VmHWM) | CPU to ready |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let cluster = format!("{}x{}", spec.services, spec.pods_per_service);
    for run in runs {
        let head = format!(
            "| {cluster} | {} | {} | {} | {:.0} |",
            run.mode.name(),
            run.binary.name(),
            run.objects,
            run.pod_bytes
        );
        match &run.outcome {
            Outcome::Ready(f) => println!(
                "{head} {:.2} s | {} | {:.0} MiB | {:.0} MiB | {:.0} MiB | {:.1} s |",
                f.ready.as_secs_f64(),
                f.after_lists
                    .map_or("-".to_string(), |d| format!("{:.2} s", d.as_secs_f64())),
                mib(f.at_ready.rss),
                mib(f.settled.rss),
                mib(f.settled.peak),
                f.cpu_to_ready.as_secs_f64()
            ),
            Outcome::Stopped { why, after, memory } => println!(
                "{head} stopped at {:.1} s: {why} | - | {:.0} MiB (then) | - | {:.0} MiB | - |",
                after.as_secs_f64(),
                mib(memory.rss),
                mib(memory.peak)
            ),
        }
    }
    println!();
    for run in runs {
        if let Outcome::Ready(f) = &run.outcome {
            let (mark, text) = match &f.check {
                Ok(found) => ("ok", found.as_str()),
                Err(why) => ("FAILED", why.as_str()),
            };
            let first_read = match &f.first_read {
                Some(Ok(split)) => format!("; first read: {split}"),
                Some(Err(why)) => format!("; first read: {why}"),
                None => String::new(),
            };
            println!(
                "{} {}: load average {} at spawn; check {mark}: {text}{first_read}",
                run.mode.name(),
                run.binary.name(),
                f.load
            );
            match &f.streams {
                Some(Ok(s)) => {
                    let grown = s.rss_open.saturating_sub(s.rss_before);
                    println!(
                        "{} {}: {} Get streams of {} endpoints over {} connections, all with their endpoints after {:.2} s; RSS {:.1} -> {:.1} MiB: {:.2} KiB per stream",
                        run.mode.name(),
                        run.binary.name(),
                        s.streams,
                        spec.pods_per_service,
                        args.connections(),
                        s.opened_in.as_secs_f64(),
                        mib(s.rss_before),
                        mib(s.rss_open),
                        grown as f64 / 1024.0 / s.streams as f64
                    );
                }
                Some(Err(why)) => println!(
                    "{} {}: --streams FAILED: {why}",
                    run.mode.name(),
                    run.binary.name()
                ),
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> BenchScaleArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            scale: BenchScaleArgs,
        }
        let argv = std::iter::once("bench-scale").chain(extra.iter().copied());
        <Cli as clap::Parser>::parse_from(argv).scale
    }

    #[test]
    fn the_first_read_split_is_read_from_the_offline_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("destination-offline.log");
        std::fs::write(
            &log,
            "2026-12-07T04:26:50.86Z  INFO linkerd_index::source::offline: cluster state directory read dir=/s files=51 bytes=1915748352 objects=66100 served=66100 parse_ms=2871 index_ms=634\n",
        )
        .unwrap();
        assert_eq!(first_read(&log).unwrap(), "parse 2.87 s, index 0.63 s");
        std::fs::write(&log, "2026-12-07T04:26:50.86Z  WARN other line\n").unwrap();
        assert!(
            first_read(&log)
                .unwrap_err()
                .starts_with("no first-read line")
        );
        std::fs::write(&log, "cluster state directory read parse_ms=12\n").unwrap();
        assert!(first_read(&log).unwrap_err().starts_with("no index_ms"));
    }

    #[test]
    fn streams_are_opened_only_on_destination_and_over_at_most_one_connection_each() {
        assert!(args(&[]).validate().is_ok());
        assert!(
            args(&["--streams", "100", "--connections", "100"])
                .validate()
                .is_ok()
        );
        assert!(
            args(&[
                "--streams",
                "100",
                "--connections",
                "10",
                "--binary",
                "both"
            ])
            .validate()
            .is_ok()
        );
        let policy = args(&[
            "--streams",
            "100",
            "--connections",
            "10",
            "--binary",
            "policy-controller",
        ]);
        assert!(
            policy
                .validate()
                .unwrap_err()
                .to_string()
                .contains("--binary destination or both")
        );
        // 200 connections by default, or one per stream when there are fewer.
        let few = args(&["--streams", "10"]);
        assert!(few.validate().is_ok());
        assert_eq!(few.connections(), 10);
        assert_eq!(args(&["--streams", "10000"]).connections(), 200);
        let too_many = args(&["--streams", "100", "--connections", "101"])
            .validate()
            .unwrap_err();
        assert!(
            too_many
                .to_string()
                .contains("--connections must be between 1")
        );
        let alone = args(&["--connections", "5"]).validate().unwrap_err();
        assert!(alone.to_string().contains("give --streams too"), "{alone}");
        assert!(
            args(&["--streams", "10", "--connections", "0"])
                .validate()
                .is_err()
        );
    }
}
