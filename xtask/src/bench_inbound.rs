//! `cargo xtask bench-inbound`: thousands of `WatchPort` streams, and one policy change that
//! reaches all of them.
//!
//! 1. Generates a cluster (see [`crate::inbound_gen`]): P meshed pods over D Deployments in one
//!    namespace, one Server per (Deployment, port) for each of the pods' 5 ports, and one
//!    AuthorizationPolicy targeting the namespace that requires one MeshTLSAuthentication, so
//!    every Server carries that authorization. Starts the release `policy-controller` on it in
//!    offline mode with the chart's flags.
//! 2. Warms up: opens one `WatchPort` stream per connection, reads its first `Server` and
//!    closes it, so the code that serves a stream is paged in and the per-thread caches exist
//!    before the measurement (the first run of that code costs the process about 0.8 MiB of
//!    RSS, once). Reads the server's RSS, opens one `WatchPort` stream per (pod, port) at once,
//!    spread round robin over C HTTP/2 connections, and waits until every stream has its first
//!    `Server` (checked: the generated Server's name and the authorization's identities). Reads
//!    the RSS again: the difference is what the streams and their topics hold.
//! 3. Applies K changes, one at a time: the MeshTLSAuthentication's file is rewritten (written
//!    to a staging file and renamed into the state directory, t0 just before the rename) with
//!    the rotating identity replaced, which changes the policy of every Server at once. Each
//!    stream must receive exactly one `Server` carrying the new identity. The next change starts
//!    once every stream has received the current one, or after the per-change timeout.
//!
//! Latency is measured per (stream, change) pair, from t0 to the moment the stream's task read
//! the message; it includes the offline source's file-settle delay (15 ms), and the client
//! shares the machine with the server, so it is an upper bound. The server's CPU for a change
//! runs from t0 until every stream received it.

use anyhow::{Context, bail, ensure};
use linkerd2_proxy_api::inbound::{
    PortSpec, Server, authn, inbound_server_policies_client::InboundServerPoliciesClient,
};
use std::{
    net::SocketAddr,
    path::Path,
    time::{Duration, Instant},
};
use tokio::{sync::mpsc, task::JoinSet};
use tonic::transport::Channel;

use crate::{
    bench::{self, READY_TIMEOUT, ms, percentile},
    bench_profiles::metric_sum,
    inbound_gen::{self, InboundSpec, PORTS},
    server::{self, Output, ServerProcess},
};

/// The policy controller's `max_concurrent_streams` per connection.
const SERVER_MAX_STREAMS_PER_CONNECTION: usize = 10_000;
/// The prefix of the identity that changes with each version of the MeshTLSAuthentication.
const ROTATED: &str = "rotated-";

/// `cargo xtask bench-inbound [--pods P] [--deployments D] [--connections C] [--changes K]
/// [--rounds N]`
#[derive(Debug, clap::Args)]
pub struct BenchInboundArgs {
    /// Meshed pods in the generated cluster; each gets one `WatchPort` stream per port (5).
    #[arg(long, default_value_t = 2000)]
    pods: usize,

    /// Deployments the pods are spread over; each has one Server per port.
    #[arg(long, default_value_t = 200)]
    deployments: usize,

    /// HTTP/2 connections the streams are spread over (round robin).
    #[arg(long, default_value_t = 40)]
    connections: usize,

    /// Policy changes applied, one at a time.
    #[arg(long, default_value_t = 5)]
    changes: usize,

    /// Times the whole benchmark runs, each with a fresh server; with more than one, a last
    /// line gives the RSS per stream's minimum, median and maximum (it varies by about
    /// ±0.3 KiB from run to run with how the burst's requests interleave).
    #[arg(long, default_value_t = 1)]
    rounds: usize,

    /// Seconds every stream has to receive a change before its delivery counts as timed out.
    #[arg(long, default_value_t = 30.0)]
    change_timeout: f64,

    /// Build and run the release binary; `--release=false` runs a debug build.
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    release: bool,

    /// Keep the generated cluster directory and the server log instead of deleting them.
    #[arg(long)]
    keep: bool,
}

/// What one stream's task read, and when.
#[derive(Debug)]
struct Delivery {
    stream: usize,
    at: Instant,
    what: Received,
}

#[derive(Debug)]
enum Received {
    /// A `Server` carrying MeshTLSAuthentication version `n` (the `rotated-<n>` identity).
    Version(usize),
    /// A `Server` that is not the generated one, or carries no readable version.
    Unexpected(String),
    /// The stream ended with `OK`.
    End,
    /// The RPC or stream failed.
    Error(#[expect(dead_code, reason = "shown through Debug in the report")] String),
}

/// Everything measured, for printing.
struct Report {
    streams: usize,
    bulk_bytes: u64,
    ready_after: Duration,
    /// Per-stream first-message latencies (nanoseconds, sorted) and the storm's total.
    open_latencies: Vec<u64>,
    open_total: Duration,
    open_server_cpu: Duration,
    rss_before: server::Memory,
    rss_open: server::Memory,
    rss_after: server::Memory,
    subscribers: f64,
    changes: ChangeStats,
}

#[derive(Default)]
struct ChangeStats {
    /// Nanoseconds from t0 to delivery, one per (stream, change) pair delivered in time.
    latencies: Vec<u64>,
    /// Per change: t0 to the first and to the last delivery, and the server's CPU time.
    first_delivery: Vec<Duration>,
    last_delivery: Vec<Duration>,
    server_cpu: Vec<Duration>,
    messages: usize,
    timed_out_changes: usize,
    missing_deliveries: usize,
    unexpected: usize,
    first_unexpected: Option<String>,
    failed_streams: usize,
    first_failure: Option<String>,
}

/// Runs the benchmark and prints its parameters and figures.
///
/// Errors when the build, the cluster generation or the server start fails, or when a stream
/// fails or starts with anything but its generated Server; timeouts during the change phase
/// are counted, not errors.
pub fn run(root: &Path, args: BenchInboundArgs) -> anyhow::Result<()> {
    args.validate()?;
    if cfg!(debug_assertions) && args.release {
        return bench::rerun_optimized(root);
    }
    let exe = server::build_binary(root, "policy", "policy-controller", args.release)?;
    let spec = InboundSpec {
        deployments: args.deployments,
        pods: args.pods,
    };
    let mut per_stream = Vec::with_capacity(args.rounds);
    for round in 1..=args.rounds {
        if args.rounds > 1 {
            eprintln!("round {round} of {}", args.rounds);
        }
        let report = run_round(&exe, &args, &spec)?;
        report.print(&args, &spec);
        per_stream.push(report.rss_per_stream_kib());
    }
    if args.rounds > 1 {
        per_stream.sort_by(f64::total_cmp);
        let kib = |k: f64| format!("{k:.2}");
        println!();
        println!(
            "RSS per open stream over {} rounds (KiB): min {}  median {}  max {}  (each: {})",
            args.rounds,
            kib(per_stream[0]),
            kib(per_stream[per_stream.len() / 2]),
            kib(per_stream[per_stream.len() - 1]),
            per_stream
                .iter()
                .map(|&k| kib(k))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    Ok(())
}

/// One round: a fresh cluster directory and server, the streams opened, the changes applied.
fn run_round(exe: &Path, args: &BenchInboundArgs, spec: &InboundSpec) -> anyhow::Result<Report> {
    let tmp = bench::temp_dir("xtask-bench-inbound-", &["state", "staging"])?;
    let state = tmp.path().join("state");
    eprintln!(
        "generating {} pods over {} deployments with {} Servers in {}...",
        spec.pods,
        spec.deployments,
        spec.deployments * PORTS.len(),
        state.display()
    );
    let (bulk_bytes, _) = spec.write(&state)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the Tokio runtime")?;
    let log = tmp.path().join("policy-controller.log");
    let result = runtime.block_on(bench(exe, tmp.path(), spec, args, bulk_bytes));
    // Stream tasks still hold connections; end them before the directory goes.
    runtime.shutdown_timeout(Duration::from_secs(5));
    if args.keep {
        let kept = tmp.keep();
        eprintln!("kept {} (server log: {})", kept.display(), log.display());
    }
    result
}

async fn bench(
    exe: &Path,
    dir: &Path,
    spec: &InboundSpec,
    args: &BenchInboundArgs,
    bulk_bytes: u64,
) -> anyhow::Result<Report> {
    let addr = server::free_local_addr()?;
    let admin_addr = server::free_local_addr()?;
    let started = Instant::now();
    let mut server = ServerProcess::spawn_policy(
        exe,
        &dir.join("state"),
        addr,
        admin_addr,
        &["--log-level=warn".to_string()],
        Output::File(dir.join("policy-controller.log")),
    )?;
    server.wait_ready(READY_TIMEOUT).await?;
    let ready_after = started.elapsed();
    let pid = server.pid();
    let channels = bench::connect(addr, args.connections).await?.channels;
    warm_up(&channels, spec)
        .await
        .with_context(|| format!("warm-up stream failed{}", server.log_tail()))?;
    let rss_before = server::memory(pid)?;

    let streams = spec.pods * PORTS.len();
    eprintln!(
        "server ready in {:.2} s; opening {streams} WatchPort streams over {} connections at once...",
        ready_after.as_secs_f64(),
        args.connections
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cpu0 = server::cpu_time(pid)?;
    let opened = Instant::now();
    let mut tasks = JoinSet::new();
    for stream in 0..streams {
        let (pod, port) = (stream / PORTS.len(), stream % PORTS.len());
        let client = InboundServerPoliciesClient::new(channels[stream % channels.len()].clone());
        let request = PortSpec {
            workload: spec.workload(pod),
            port: u32::from(PORTS[port].1),
        };
        tasks.spawn(watch_stream(
            stream,
            spec.server_name(pod, port),
            client,
            request,
            tx.clone(),
        ));
    }
    drop(tx);

    let timeout = Duration::from_secs(60).max(Duration::from_millis(5 * streams as u64));
    let deadline = tokio::time::Instant::now() + timeout;
    let mut open_latencies = Vec::with_capacity(streams);
    let mut last = opened;
    while open_latencies.len() < streams {
        let delivery = match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(delivery)) => delivery,
            Ok(None) => bail!("every stream task ended before all streams had their Server"),
            Err(_) => bail!(
                "only {} of {streams} streams received their first Server within {} s{}",
                open_latencies.len(),
                timeout.as_secs(),
                server.log_tail()
            ),
        };
        match delivery.what {
            Received::Version(0) => {}
            other => bail!(
                "stream {}: first message {other:?}, expected its Server with version 0{}",
                delivery.stream,
                server.log_tail()
            ),
        }
        open_latencies.push(delivery.at.duration_since(opened).as_nanos() as u64);
        last = last.max(delivery.at);
    }
    let open_total = last.duration_since(opened);
    let open_server_cpu = server::cpu_time(pid)?.saturating_sub(cpu0);
    open_latencies.sort_unstable();
    let rss_open = server::memory(pid)?;
    let subscribers = subscribers(admin_addr).await?;

    eprintln!(
        "all {streams} streams have their Server after {:.2} s; applying {} policy changes...",
        open_total.as_secs_f64(),
        args.changes
    );
    let changes = apply_changes(&mut rx, dir, streams, args, pid).await?;
    let rss_after = server::memory(pid)?;
    if let Some(status) = server.try_wait()? {
        bail!(
            "policy-controller exited during the benchmark ({status}){}",
            server.log_tail()
        );
    }
    tasks.abort_all();
    drop(channels);
    server.stop(Duration::from_secs(5)).await?;
    Ok(Report {
        streams,
        bulk_bytes,
        ready_after,
        open_latencies,
        open_total,
        open_server_cpu,
        rss_before,
        rss_open,
        rss_after,
        subscribers,
        changes,
    })
}

/// Opens one `WatchPort` stream per connection (on the first pods' ports), reads its first
/// `Server` and closes it, then waits for the server to drop them.
async fn warm_up(channels: &[Channel], spec: &InboundSpec) -> anyhow::Result<()> {
    let mut warming = JoinSet::new();
    for (stream, channel) in channels.iter().enumerate() {
        let (pod, port) = (stream / PORTS.len() % spec.pods, stream % PORTS.len());
        let mut client = InboundServerPoliciesClient::new(channel.clone());
        let request = PortSpec {
            workload: spec.workload(pod),
            port: u32::from(PORTS[port].1),
        };
        warming.spawn(async move {
            let mut servers = client.watch_port(request).await?.into_inner();
            servers
                .message()
                .await?
                .context("the stream ended before its first Server")
        });
    }
    while let Some(first) = warming.join_next().await {
        first.context("warm-up task")??;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}

/// One `WatchPort` stream: reports every message (and the stream's end) with the time it was
/// read, as the MeshTLSAuthentication version it carries.
async fn watch_stream(
    stream: usize,
    server_name: String,
    mut client: InboundServerPoliciesClient<Channel>,
    request: PortSpec,
    tx: mpsc::UnboundedSender<Delivery>,
) {
    let report = |what| {
        let _ = tx.send(Delivery {
            stream,
            at: Instant::now(),
            what,
        });
    };
    let mut servers = match client.watch_port(request).await {
        Ok(response) => response.into_inner(),
        Err(status) => return report(Received::Error(format!("WatchPort refused: {status}"))),
    };
    loop {
        match servers.message().await {
            Ok(Some(server)) => report(version(&server, &server_name)),
            Ok(None) => return report(Received::End),
            Err(status) => return report(Received::Error(status.to_string())),
        }
    }
}

/// The MeshTLSAuthentication version `server` carries, when it is Server `expected` with the
/// generated authorization.
fn version(server: &Server, expected: &str) -> Received {
    let name = server.labels.get("name").map_or("", String::as_str);
    if name != expected {
        return Received::Unexpected(format!("Server {name:?}, expected {expected:?}"));
    }
    let authz = server
        .authorizations
        .iter()
        .find(|a| a.labels.get("name").map(String::as_str) == Some(inbound_gen::AUTHZ_NAME));
    let Some(authz) = authz else {
        return Received::Unexpected(format!(
            "{expected}: no authorization {}",
            inbound_gen::AUTHZ_NAME
        ));
    };
    use authn::permit_mesh_tls::Clients;
    let ids = match authz
        .authentication
        .as_ref()
        .and_then(|a| a.permit.as_ref())
    {
        Some(authn::Permit::MeshTls(tls)) => match &tls.clients {
            Some(Clients::Identities(ids)) => &ids.identities,
            other => return Received::Unexpected(format!("{expected}: clients {other:?}")),
        },
        other => return Received::Unexpected(format!("{expected}: permit {other:?}")),
    };
    let rotated = ids
        .iter()
        .filter_map(|id| id.name.strip_prefix(ROTATED))
        .filter_map(|rest| rest.split('.').next()?.parse::<usize>().ok())
        .collect::<Vec<_>>();
    match rotated.as_slice() {
        [version] if ids.len() == InboundSpec::identities(*version).len() => {
            Received::Version(*version)
        }
        _ => Received::Unexpected(format!(
            "{expected}: identities {:?}",
            ids.iter().map(|i| &i.name).collect::<Vec<_>>()
        )),
    }
}

/// Applies the changes one at a time and records when each stream receives each of them.
async fn apply_changes(
    rx: &mut mpsc::UnboundedReceiver<Delivery>,
    dir: &Path,
    streams: usize,
    args: &BenchInboundArgs,
    pid: u32,
) -> anyhow::Result<ChangeStats> {
    let staged = dir.join("staging").join(inbound_gen::POLICY_FILE);
    let target = dir.join("state").join(inbound_gen::POLICY_FILE);
    let timeout = Duration::from_secs_f64(args.change_timeout);
    let mut stats = ChangeStats {
        latencies: Vec::with_capacity(streams * args.changes),
        ..ChangeStats::default()
    };
    // The version each stream last received.
    let mut received = vec![0usize; streams];

    for change in 1..=args.changes {
        std::fs::write(&staged, InboundSpec::render_policy(change))
            .with_context(|| format!("cannot write {}", staged.display()))?;
        let cpu0 = server::cpu_time(pid)?;
        let t0 = Instant::now();
        std::fs::rename(&staged, &target).with_context(|| {
            format!("cannot rename {} to {}", staged.display(), target.display())
        })?;

        let deadline = tokio::time::Instant::from_std(t0 + timeout);
        let (mut delivered, mut first, mut last) = (0, None, t0);
        while delivered < streams - stats.failed_streams {
            let delivery = match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(delivery)) => delivery,
                Ok(None) => bail!("every stream task ended during the changes"),
                Err(_) => break,
            };
            let version = match delivery.what {
                Received::Version(v) => v,
                Received::End | Received::Error(_) => {
                    stats.failed_streams += 1;
                    stats.first_failure.get_or_insert_with(|| {
                        format!("stream {}: {:?}", delivery.stream, delivery.what)
                    });
                    continue;
                }
                Received::Unexpected(why) => {
                    stats.messages += 1;
                    stats.unexpected += 1;
                    stats
                        .first_unexpected
                        .get_or_insert_with(|| format!("stream {}: {why}", delivery.stream));
                    continue;
                }
            };
            stats.messages += 1;
            let slot = &mut received[delivery.stream];
            if version != change || *slot == change {
                stats.unexpected += 1;
                stats.first_unexpected.get_or_insert_with(|| {
                    format!(
                        "change {change}: stream {} got version {version} (had {})",
                        delivery.stream, *slot
                    )
                });
                continue;
            }
            *slot = change;
            delivered += 1;
            stats
                .latencies
                .push(delivery.at.saturating_duration_since(t0).as_nanos() as u64);
            first.get_or_insert(delivery.at);
            last = last.max(delivery.at);
        }
        stats
            .server_cpu
            .push(server::cpu_time(pid)?.saturating_sub(cpu0));
        let missing = streams.saturating_sub(stats.failed_streams + delivered);
        if missing > 0 {
            stats.timed_out_changes += 1;
            stats.missing_deliveries += missing;
        }
        if let Some(first) = first {
            stats.first_delivery.push(first.duration_since(t0));
            stats.last_delivery.push(last.duration_since(t0));
        }
    }
    stats.latencies.sort_unstable();
    Ok(stats)
}

/// The server's `inbound_port_subscribers`: open `WatchPort` streams.
async fn subscribers(admin_addr: SocketAddr) -> anyhow::Result<f64> {
    let (code, body) = server::http_get(admin_addr, "/metrics")
        .await
        .with_context(|| format!("cannot read http://{admin_addr}/metrics"))?;
    ensure!(
        code == 200,
        "GET http://{admin_addr}/metrics answered {code}"
    );
    Ok(metric_sum(&body, "inbound_port_subscribers", ""))
}

// === impl BenchInboundArgs ===

impl BenchInboundArgs {
    fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.pods >= 1, "--pods must be at least 1");
        ensure!(
            (1..=self.pods).contains(&self.deployments),
            "--deployments must be between 1 and --pods"
        );
        ensure!(self.changes >= 1, "--changes must be at least 1");
        ensure!(self.rounds >= 1, "--rounds must be at least 1");
        let streams = self.pods * PORTS.len();
        ensure!(
            (1..=streams).contains(&self.connections),
            "--connections must be between 1 and the number of streams ({streams})"
        );
        ensure!(
            streams.div_ceil(self.connections) <= SERVER_MAX_STREAMS_PER_CONNECTION,
            "streams per connection must not exceed the server's {SERVER_MAX_STREAMS_PER_CONNECTION}"
        );
        ensure!(
            self.change_timeout > 0.0,
            "--change-timeout must be positive"
        );
        Ok(())
    }
}

// === impl Report ===

impl Report {
    /// What the open streams added to the server's RSS, per stream, in KiB.
    fn rss_per_stream_kib(&self) -> f64 {
        let grown = self.rss_open.rss.saturating_sub(self.rss_before.rss);
        grown as f64 / 1024.0 / self.streams.max(1) as f64
    }

    fn print(&self, args: &BenchInboundArgs, spec: &InboundSpec) {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let millis = |d: Duration| d.as_secs_f64() * 1e3;
        let grown = self.rss_open.rss.saturating_sub(self.rss_before.rss);
        let grown_anon = self.rss_open.anon.saturating_sub(self.rss_before.anon);
        let c = &self.changes;

        println!();
        println!("== cargo xtask bench-inbound ==");
        println!(
            "parameters: --pods {} --deployments {} --connections {} --changes {} --change-timeout {} --release={}",
            args.pods,
            args.deployments,
            args.connections,
            args.changes,
            args.change_timeout,
            args.release
        );
        println!(
            "cluster: {} meshed pods x {} ports in namespace {}, {} Deployments, {} Servers, 1 AuthorizationPolicy (targetRef Namespace) + 1 MeshTLSAuthentication ({:.1} MiB of YAML)",
            spec.pods,
            PORTS.len(),
            inbound_gen::NAMESPACE,
            spec.deployments,
            spec.deployments * PORTS.len(),
            mib(self.bulk_bytes)
        );
        println!("server ready after {:.2} s", self.ready_after.as_secs_f64());
        println!(
            "open: {} WatchPort streams at once over {} connections; all had their first Server {:.1} ms after the first request (server CPU {:.0} ms, {:.1} us per stream)",
            self.streams,
            args.connections,
            millis(self.open_total),
            millis(self.open_server_cpu),
            self.open_server_cpu.as_secs_f64() * 1e6 / self.streams.max(1) as f64
        );
        println!(
            "  first-message latency per stream: p50 {}  p99 {}  max {}",
            ms(percentile(&self.open_latencies, 50.0)),
            ms(percentile(&self.open_latencies, 99.0)),
            ms(self.open_latencies.last().copied())
        );
        println!(
            "server RSS: {:.1} MiB before (after a warm-up stream per connection), {:.1} MiB with all streams open (+{:.1} MiB, {:.2} KiB per stream), {:.1} MiB after the changes; the server counted {} open WatchPort streams",
            mib(self.rss_before.rss),
            mib(self.rss_open.rss),
            mib(grown),
            self.rss_per_stream_kib(),
            mib(self.rss_after.rss),
            self.subscribers
        );
        println!(
            "  of which anonymous (RssAnon: heap and stacks, without the executable's pages): {:.1} -> {:.1} MiB (+{:.1} MiB, {:.2} KiB per stream)",
            mib(self.rss_before.anon),
            mib(self.rss_open.anon),
            mib(grown_anon),
            grown_anon as f64 / 1024.0 / self.streams.max(1) as f64,
        );
        println!(
            "changes: {} rewrites of the MeshTLSAuthentication, each changing the policy of all {} streams",
            args.changes, self.streams
        );
        println!(
            "  change-to-delivery latency per stream: p50 {}  p99 {}  max {}  ({} deliveries)",
            ms(percentile(&c.latencies, 50.0)),
            ms(percentile(&c.latencies, 99.0)),
            ms(c.latencies.last().copied()),
            c.latencies.len()
        );
        for (i, cpu) in c.server_cpu.iter().enumerate() {
            let first = c.first_delivery.get(i).copied();
            let last = c.last_delivery.get(i).copied();
            println!(
                "  change {}: first delivery {}, last {}; server CPU {:.0} ms ({:.1} us per stream)",
                i + 1,
                first.map_or("-".into(), |d| format!("{:.1} ms", millis(d))),
                last.map_or("-".into(), |d| format!("{:.1} ms", millis(d))),
                millis(*cpu),
                cpu.as_secs_f64() * 1e6 / self.streams.max(1) as f64
            );
        }
        println!(
            "  messages: {} (expected {}); unexpected: {}; changes timed out: {} ({} deliveries missing); failed streams: {}",
            c.messages,
            self.streams * args.changes,
            c.unexpected,
            c.timed_out_changes,
            c.missing_deliveries,
            c.failed_streams
        );
        if let Some(example) = &c.first_unexpected {
            println!("  first unexpected: {example}");
        }
        if let Some(example) = &c.first_failure {
            println!("  first failure: {example}");
        }
    }
}
