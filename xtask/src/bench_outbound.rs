//! `cargo xtask bench-outbound`: thousands of `OutboundPolicies.Watch` streams over hundreds of
//! Services with HTTPRoutes, steady route churn, and the route status writer at work.
//!
//! 1. Generates S Services and R HTTPRoutes round robin over them, with their accepted status
//!    in place, plus P routes without a status (see [`crate::outbound_gen`]), and serves them
//!    from a fake Kubernetes API server on loopback ([`crate::fake_kube`]). Starts the release
//!    `policy-controller` in kube mode on it (`--kubeconfig`), so that it runs its status
//!    writer behind the Lease as in a cluster. Waits for `/ready`, for the Lease, and for the
//!    P status patches the pending routes need.
//! 2. Reads the server's RSS, opens N `Watch` streams at once, stream `k` on Service `k % S`,
//!    spread round robin over C HTTP/2 connections, and waits until every stream has its first
//!    policy (checked: every route of its Service, at version 0). Reads the RSS again.
//! 3. Churns: every 1/rate s, for the duration, one route (picked by a fixed stride) is
//!    replaced with its next version (another request timeout and weight split) and sent to
//!    the controller's route watch as `MODIFIED`; t0 is taken just before. Each stream
//!    watching that route's Service must receive a policy carrying the new version; latency is
//!    per (stream, change), from t0 to the moment the stream's task read the message. After
//!    the last change, deliveries are awaited for a grace period.
//! 4. Counts the status patches the fake API server received during the churn: the churn only
//!    edits backends and timeouts, so the statuses in place stay right and none is due.
//!
//! The client, the fake API server and the controller share the machine, so latencies are an
//! upper bound.

use anyhow::{Context, bail, ensure};
use linkerd2_proxy_api::{
    meta::metadata,
    outbound::{
        OutboundPolicy, TrafficSpec, outbound_policies_client::OutboundPoliciesClient,
        proxy_protocol, traffic_spec,
    },
};
use std::{
    collections::HashMap,
    ffi::OsString,
    path::Path,
    time::{Duration, Instant},
};
use tokio::{sync::mpsc, task::JoinSet};
use tonic::transport::Channel;

use crate::{
    bench::{self, READY_TIMEOUT, ms, percentile},
    bench_profiles::metric_sum,
    fake_kube::{FakeKube, Patches},
    outbound_gen::{self, OutboundSpec},
    server::{self, Output, POLICY_CHART_FLAGS, ServerProcess},
};

/// The policy controller's `max_concurrent_streams` per connection.
const SERVER_MAX_STREAMS_PER_CONNECTION: usize = 10_000;
/// The controller's Lease claimant (`HOSTNAME`).
const CLAIMANT: &str = "policy-bench-0";
/// How long the controller has to win the Lease and patch the pending routes.
const STATUS_TIMEOUT: Duration = Duration::from_secs(60);
/// The step between the routes of consecutive changes (a prime, so changes spread over every
/// route before one repeats when R is not a multiple of it).
const ROUTE_STRIDE: usize = 7919;

/// `cargo xtask bench-outbound [--services S] [--routes R] [--streams N] [--rate F] [--duration D]`
#[derive(Debug, clap::Args)]
pub struct BenchOutboundArgs {
    /// Services in the generated cluster (each with one HTTP port and a cluster IP).
    #[arg(long, default_value_t = 500)]
    services: usize,

    /// HTTPRoutes, round robin over the Services, each with its accepted status in place.
    #[arg(long, default_value_t = 1000)]
    routes: usize,

    /// Extra HTTPRoutes without a status, which the status writer must patch once each.
    #[arg(long, default_value_t = 10)]
    pending_routes: usize,

    /// `OutboundPolicies.Watch` streams, round robin over the Services.
    #[arg(long, default_value_t = 10_000)]
    streams: usize,

    /// HTTP/2 connections the streams are spread over (round robin).
    #[arg(long, default_value_t = 200)]
    connections: usize,

    /// Route changes per second.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,

    /// Seconds of churn.
    #[arg(long, default_value_t = 60.0)]
    duration: f64,

    /// Seconds after the last change to wait for its deliveries.
    #[arg(long, default_value_t = 10.0)]
    grace: f64,

    /// Build and run the release binary; `--release=false` runs a debug build.
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    release: bool,

    /// Keep the temporary directory (kubeconfig, server log) instead of deleting it.
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
    /// A policy with these (churned route, version) pairs.
    Routes(Vec<(usize, u64)>),
    /// A policy that cannot be read as the generated routes.
    Unexpected(String),
    /// The stream ended with `OK`.
    End,
    /// The RPC or stream failed.
    Error(#[expect(dead_code, reason = "shown through Debug in the report")] String),
}

/// One change applied during the churn.
struct Change {
    t0: Instant,
    expected: usize,
    delivered: usize,
}

/// Everything measured, for printing.
struct Report {
    ready_after: Duration,
    leader_after: Duration,
    initial_patches: Patches,
    open_latencies: Vec<u64>,
    open_total: Duration,
    rss_before: u64,
    rss_open: u64,
    rss_end: u64,
    churn: ChurnStats,
    churn_patches: Patches,
    /// `resource_status_patches_total` on the controller at the end.
    patches_metric: f64,
}

#[derive(Default)]
struct ChurnStats {
    changes: usize,
    elapsed: Duration,
    server_cpu: Duration,
    /// Nanoseconds from t0 to delivery, one per (stream, change) delivered.
    latencies: Vec<u64>,
    expected: usize,
    /// Changes every stream watching their route's Service received.
    complete_changes: usize,
    messages: usize,
    /// Messages that carried no newer version of any route.
    no_news: usize,
    /// Route versions older than one the stream had already seen.
    regressions: usize,
    unexpected: usize,
    first_unexpected: Option<String>,
    failed_streams: usize,
    first_failure: Option<String>,
}

/// Runs the benchmark and prints its parameters and figures.
///
/// Errors when the build, the fake API server or the controller fails to start, when the
/// controller does not patch the pending routes in time, or when a stream fails or starts
/// without its Service's routes; delivery timeouts during the churn are counted, not errors.
pub fn run(root: &Path, args: BenchOutboundArgs) -> anyhow::Result<()> {
    args.validate()?;
    if cfg!(debug_assertions) && args.release {
        return bench::rerun_optimized(root);
    }
    let exe = server::build_binary(root, "policy", "policy-controller", args.release)?;
    let tmp = bench::temp_dir("xtask-bench-outbound-", &[])?;
    let spec = OutboundSpec {
        services: args.services,
        routes: args.routes,
        pending: args.pending_routes,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the Tokio runtime")?;
    let log = tmp.path().join("policy-controller.log");
    let result = runtime.block_on(bench(&exe, tmp.path(), &spec, &args));
    runtime.shutdown_timeout(Duration::from_secs(5));
    if args.keep {
        let kept = tmp.keep();
        eprintln!("kept {} (server log: {})", kept.display(), log.display());
    }
    let report = result?;
    report.print(&args, &spec);
    Ok(())
}

async fn bench(
    exe: &Path,
    dir: &Path,
    spec: &OutboundSpec,
    args: &BenchOutboundArgs,
) -> anyhow::Result<Report> {
    eprintln!(
        "serving {} Services and {} HTTPRoutes (+{} without status) from a fake API server...",
        spec.services, spec.routes, spec.pending
    );
    let api = FakeKube::start(spec.services(), spec.routes()).await?;
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig)?;

    let addr = server::free_local_addr()?;
    let admin_addr = server::free_local_addr()?;
    let mut server_args: Vec<OsString> = vec![
        format!("--grpc-addr={addr}").into(),
        format!("--admin-addr={admin_addr}").into(),
        "--kubeconfig".into(),
        kubeconfig.into(),
        "--log-level=warn".into(),
    ];
    server_args.extend(POLICY_CHART_FLAGS.iter().map(OsString::from));
    let started = Instant::now();
    let mut server = ServerProcess::spawn_args_env(
        exe,
        &server_args,
        &[("HOSTNAME", CLAIMANT)],
        admin_addr,
        Output::File(dir.join("policy-controller.log")),
    )?;
    server.wait_ready(READY_TIMEOUT).await?;
    let ready_after = started.elapsed();

    // The Lease, then one patch per pending route, before any stream opens.
    let deadline = Instant::now() + STATUS_TIMEOUT;
    while api.lease_holder().as_deref() != Some(CLAIMANT)
        || api.patches().total < spec.pending as u64
    {
        if Instant::now() >= deadline {
            bail!(
                "after {} s the Lease holder is {:?} and {} of {} pending routes were patched{}",
                STATUS_TIMEOUT.as_secs(),
                api.lease_holder(),
                api.patches().total,
                spec.pending,
                server.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let leader_after = started.elapsed();

    let pid = server.pid();
    let channels = bench::connect(addr, args.connections).await?.channels;
    let rss_before = server::rss_bytes(pid)?;
    eprintln!(
        "server ready in {:.2} s, leader with the pending routes patched at {:.2} s; opening {} Watch streams over {} connections at once...",
        ready_after.as_secs_f64(),
        leader_after.as_secs_f64(),
        args.streams,
        args.connections
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let opened = Instant::now();
    let mut tasks = JoinSet::new();
    for stream in 0..args.streams {
        let client = OutboundPoliciesClient::new(channels[stream % channels.len()].clone());
        let request = TrafficSpec {
            source_workload: format!(r#"{{"ns":"{}","pod":"client-0"}}"#, outbound_gen::NAMESPACE),
            target: Some(traffic_spec::Target::Authority(
                spec.authority(stream % spec.services),
            )),
        };
        tasks.spawn(watch_stream(stream, client, request, tx.clone()));
    }
    drop(tx);

    // The route versions each stream has seen: its Service's routes, at 0.
    let mut seen: Vec<Vec<(usize, u64)>> = (0..args.streams)
        .map(|k| {
            spec.routes_of(k % spec.services)
                .into_iter()
                .map(|r| (r, 0))
                .collect()
        })
        .collect();
    let timeout = Duration::from_secs(60).max(Duration::from_millis(5 * args.streams as u64));
    let open_deadline = tokio::time::Instant::now() + timeout;
    let mut open_latencies = Vec::with_capacity(args.streams);
    let mut first = vec![false; args.streams];
    let mut last = opened;
    while open_latencies.len() < args.streams {
        let delivery = match tokio::time::timeout_at(open_deadline, rx.recv()).await {
            Ok(Some(delivery)) => delivery,
            Ok(None) => bail!("every stream task ended before all streams had their policy"),
            Err(_) => bail!(
                "only {} of {} streams received their first policy within {} s{}",
                open_latencies.len(),
                args.streams,
                timeout.as_secs(),
                server.log_tail()
            ),
        };
        let k = delivery.stream;
        if first[k] {
            continue;
        }
        match &delivery.what {
            Received::Routes(routes) => {
                let mut got: Vec<(usize, u64)> = routes.clone();
                got.sort_unstable();
                if got != seen[k] {
                    bail!(
                        "stream {k} ({}): first policy has routes {got:?}, expected {:?} at version 0{}",
                        spec.authority(k % spec.services),
                        seen[k],
                        server.log_tail()
                    );
                }
            }
            other => bail!(
                "stream {k}: first message {other:?}, expected its Service's routes{}",
                server.log_tail()
            ),
        }
        first[k] = true;
        open_latencies.push(delivery.at.duration_since(opened).as_nanos() as u64);
        last = last.max(delivery.at);
    }
    let open_total = last.duration_since(opened);
    open_latencies.sort_unstable();
    let rss_open = server::rss_bytes(pid)?;

    // Late or repeated patches of the pending routes count as initial ones.
    let initial_patches = api.patches();
    eprintln!(
        "all streams have their policy after {:.2} s; churning {} route changes/s for {} s...",
        open_total.as_secs_f64(),
        args.rate,
        args.duration
    );
    let churn = churn(&api, spec, args, &mut rx, &mut seen, pid).await?;
    let patches_after = api.patches();
    let rss_end = server::rss_bytes(pid)?;
    let patches_metric = match server::http_get(admin_addr, "/metrics").await {
        Ok((200, body)) => metric_sum(&body, "resource_status_patches_total", ""),
        _ => f64::NAN,
    };
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
        ready_after,
        leader_after,
        initial_patches,
        open_latencies,
        open_total,
        rss_before,
        rss_open,
        rss_end,
        churn,
        churn_patches: Patches {
            total: patches_after.total - initial_patches.total,
            redundant: patches_after.redundant - initial_patches.redundant,
        },
        patches_metric,
    })
}

/// One `Watch` stream: reports every policy (as its route versions) and the stream's end, with
/// the time it was read.
async fn watch_stream(
    stream: usize,
    mut client: OutboundPoliciesClient<Channel>,
    request: TrafficSpec,
    tx: mpsc::UnboundedSender<Delivery>,
) {
    let report = |what| {
        let _ = tx.send(Delivery {
            stream,
            at: Instant::now(),
            what,
        });
    };
    let mut policies = match client.watch(request).await {
        Ok(response) => response.into_inner(),
        Err(status) => return report(Received::Error(format!("Watch refused: {status}"))),
    };
    loop {
        match policies.message().await {
            Ok(Some(policy)) => report(match route_versions(&policy) {
                Ok(routes) => Received::Routes(routes),
                Err(why) => Received::Unexpected(why),
            }),
            Ok(None) => return report(Received::End),
            Err(status) => return report(Received::Error(status.to_string())),
        }
    }
}

/// The (route index, version) of every churned route in `policy`'s HTTP/1 routes (they are
/// the same for HTTP/2); other routes (pending, default) are skipped.
fn route_versions(policy: &OutboundPolicy) -> Result<Vec<(usize, u64)>, String> {
    use proxy_protocol::Kind;
    let routes = match policy.protocol.as_ref().and_then(|p| p.kind.as_ref()) {
        Some(Kind::Detect(detect)) => detect.http1.as_ref().map(|h| &h.routes),
        Some(Kind::Http1(http)) => Some(&http.routes),
        Some(Kind::Http2(http)) => Some(&http.routes),
        other => return Err(format!("protocol {other:?}")),
    };
    let mut out = Vec::new();
    for route in routes.into_iter().flatten() {
        let name = match route.metadata.as_ref().and_then(|m| m.kind.as_ref()) {
            Some(metadata::Kind::Resource(resource)) => resource.name.as_str(),
            _ => continue,
        };
        let Some(index) = outbound_gen::route_index(name) else {
            continue;
        };
        let timeout = route
            .rules
            .first()
            .and_then(|rule| rule.timeouts.as_ref())
            .and_then(|t| t.request)
            .and_then(|d| Duration::try_from(d).ok())
            .and_then(outbound_gen::version_of_timeout);
        match timeout {
            Some(version) => out.push((index, version)),
            None => return Err(format!("{name}: no version in its first rule's timeout")),
        }
    }
    Ok(out)
}

/// Applies the churn and records each stream's deliveries of each change.
async fn churn(
    api: &FakeKube,
    spec: &OutboundSpec,
    args: &BenchOutboundArgs,
    rx: &mut mpsc::UnboundedReceiver<Delivery>,
    seen: &mut [Vec<(usize, u64)>],
    pid: u32,
) -> anyhow::Result<ChurnStats> {
    let total = (args.rate * args.duration).round().max(1.0) as usize;
    let streams_on = |service: usize| {
        args.streams / spec.services + usize::from(service < args.streams % spec.services)
    };
    let mut stats = ChurnStats::default();
    let mut versions = vec![0u64; spec.routes];
    let mut changes: HashMap<(usize, u64), Change> = HashMap::with_capacity(total);
    let mut delivered = 0;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let cpu0 = server::cpu_time(pid)?;
    let started = Instant::now();
    let mut grace_end = None;

    loop {
        if stats.changes == total && delivered >= stats.expected {
            break;
        }
        let grace = async {
            match grace_end {
                Some(end) => tokio::time::sleep_until(end).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = ticker.tick(), if stats.changes < total => {
                let route = (stats.changes * ROUTE_STRIDE + 1) % spec.routes;
                versions[route] += 1;
                let object = spec.route(route, versions[route]);
                let expected = streams_on(spec.service_of(route));
                let t0 = Instant::now();
                api.update_route(object);
                changes.insert((route, versions[route]), Change { t0, expected, delivered: 0 });
                stats.expected += expected;
                stats.changes += 1;
                if stats.changes == total {
                    grace_end = Some(tokio::time::Instant::now() + Duration::from_secs_f64(args.grace));
                }
            }
            delivery = rx.recv() => {
                let Some(delivery) = delivery else {
                    bail!("every stream task ended during the churn");
                };
                delivered += record(&mut stats, &mut changes, seen, delivery);
            }
            () = grace => break,
        }
    }
    stats.elapsed = started.elapsed();
    stats.complete_changes = changes
        .values()
        .filter(|c| c.delivered >= c.expected)
        .count();
    stats.server_cpu = server::cpu_time(pid)?.saturating_sub(cpu0);
    stats.latencies.sort_unstable();
    Ok(stats)
}

/// Folds one delivery into the stats; returns the number of (stream, change) deliveries it
/// completes.
fn record(
    stats: &mut ChurnStats,
    changes: &mut HashMap<(usize, u64), Change>,
    seen: &mut [Vec<(usize, u64)>],
    delivery: Delivery,
) -> usize {
    let k = delivery.stream;
    let routes = match delivery.what {
        Received::Routes(routes) => routes,
        Received::Unexpected(why) => {
            stats.messages += 1;
            stats.unexpected += 1;
            stats
                .first_unexpected
                .get_or_insert_with(|| format!("stream {k}: {why}"));
            return 0;
        }
        Received::End | Received::Error(_) => {
            stats.failed_streams += 1;
            stats
                .first_failure
                .get_or_insert_with(|| format!("stream {k}: {:?}", delivery.what));
            return 0;
        }
    };
    stats.messages += 1;
    let mut completed = 0;
    let mut news = false;
    for (route, version) in routes {
        let Some(slot) = seen[k].iter_mut().find(|(r, _)| *r == route) else {
            stats.unexpected += 1;
            stats
                .first_unexpected
                .get_or_insert_with(|| format!("stream {k}: route-{route} of another Service"));
            continue;
        };
        if version < slot.1 {
            stats.regressions += 1;
            continue;
        }
        for v in slot.1 + 1..=version {
            news = true;
            if let Some(change) = changes.get_mut(&(route, v)) {
                change.delivered += 1;
                completed += 1;
                stats
                    .latencies
                    .push(delivery.at.saturating_duration_since(change.t0).as_nanos() as u64);
            }
        }
        slot.1 = version;
    }
    if !news {
        stats.no_news += 1;
    }
    completed
}

// === impl BenchOutboundArgs ===

impl BenchOutboundArgs {
    fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.services >= 1, "--services must be at least 1");
        ensure!(self.routes >= 1, "--routes must be at least 1");
        ensure!(self.streams >= 1, "--streams must be at least 1");
        ensure!(
            (1..=self.streams).contains(&self.connections),
            "--connections must be between 1 and --streams"
        );
        ensure!(
            self.streams.div_ceil(self.connections) <= SERVER_MAX_STREAMS_PER_CONNECTION,
            "streams per connection must not exceed the server's {SERVER_MAX_STREAMS_PER_CONNECTION}"
        );
        ensure!(
            self.rate > 0.0 && self.rate.is_finite(),
            "--rate must be positive"
        );
        ensure!(
            self.duration > 0.0 && self.duration.is_finite(),
            "--duration must be positive"
        );
        ensure!(
            self.grace >= 0.0 && self.grace.is_finite(),
            "--grace must not be negative"
        );
        Ok(())
    }
}

// === impl Report ===

impl Report {
    fn print(&self, args: &BenchOutboundArgs, spec: &OutboundSpec) {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let c = &self.churn;
        let grown = self.rss_open.saturating_sub(self.rss_before);

        println!();
        println!("== cargo xtask bench-outbound ==");
        println!(
            "parameters: --services {} --routes {} --pending-routes {} --streams {} --connections {} --rate {} --duration {} --grace {} --release={}",
            args.services,
            args.routes,
            args.pending_routes,
            args.streams,
            args.connections,
            args.rate,
            args.duration,
            args.grace,
            args.release
        );
        println!(
            "cluster (fake API server, kube mode): {} Services, {} HTTPRoutes with status Accepted ({:.1} per Service), {} without status, namespace {}",
            spec.services,
            spec.routes,
            spec.routes as f64 / spec.services as f64,
            spec.pending,
            outbound_gen::NAMESPACE
        );
        println!(
            "server ready after {:.2} s; Lease held and pending routes patched after {:.2} s",
            self.ready_after.as_secs_f64(),
            self.leader_after.as_secs_f64()
        );
        println!(
            "open: {} Watch streams at once over {} connections; all had their first policy {:.1} ms after the first request",
            args.streams,
            args.connections,
            self.open_total.as_secs_f64() * 1e3
        );
        println!(
            "  first-policy latency per stream: p50 {}  p99 {}  max {}",
            ms(percentile(&self.open_latencies, 50.0)),
            ms(percentile(&self.open_latencies, 99.0)),
            ms(self.open_latencies.last().copied())
        );
        println!(
            "server RSS: {:.1} MiB before, {:.1} MiB with all streams open (+{:.1} MiB, {:.2} KiB per stream), {:.1} MiB after the churn",
            mib(self.rss_before),
            mib(self.rss_open),
            mib(grown),
            grown as f64 / 1024.0 / args.streams as f64,
            mib(self.rss_end)
        );
        println!(
            "churn: {} route changes in {:.1} s ({:.2}/s; each a new request timeout and weight split of one HTTPRoute); server CPU {:.0} ms ({:.1}% of one core)",
            c.changes,
            c.elapsed.as_secs_f64(),
            c.changes as f64 / c.elapsed.as_secs_f64().max(1e-9),
            c.server_cpu.as_secs_f64() * 1e3,
            100.0 * c.server_cpu.as_secs_f64() / c.elapsed.as_secs_f64().max(1e-9)
        );
        println!(
            "  change-to-delivery latency per (stream, change): p50 {}  p99 {}  max {}",
            ms(percentile(&c.latencies, 50.0)),
            ms(percentile(&c.latencies, 99.0)),
            ms(c.latencies.last().copied())
        );
        println!(
            "  changes delivered to every stream watching their Service: {} of {}",
            c.complete_changes, c.changes
        );
        println!(
            "  delivered {} of {} expected; messages {}, of which {} carried no newer route version; regressions {}; unexpected {}; failed streams {}",
            c.latencies.len(),
            c.expected,
            c.messages,
            c.no_news,
            c.regressions,
            c.unexpected,
            c.failed_streams
        );
        if let Some(example) = &c.first_unexpected {
            println!("  first unexpected: {example}");
        }
        if let Some(example) = &c.first_failure {
            println!("  first failure: {example}");
        }
        println!(
            "status patches sent: {} before the churn (expected {}, one per route without status; {} redundant), {} during the churn (expected 0: the statuses in place stay right; {} redundant); the controller's resource_status_patches_total: {}",
            self.initial_patches.total,
            spec.pending,
            self.initial_patches.redundant,
            self.churn_patches.total,
            self.churn_patches.redundant,
            self.patches_metric
        );
    }
}
