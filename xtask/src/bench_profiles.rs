//! `cargo xtask bench-profiles`: a storm of `GetProfile` streams, then a quiet server.
//!
//! 1. Generates a cluster (see [`crate::cluster_gen`]) with one ServiceProfile per Service and
//!    starts the release `destination` on it in offline mode, as `cargo xtask bench` does.
//! 2. Reads the server's RSS, then opens every stream at once: K `GetProfile` streams per
//!    service (stream `i` asks for service `i mod N`), spread round robin over C HTTP/2
//!    connections. Each stream's first-profile latency runs from just before its request to the
//!    moment its task read the first `DestinationProfile`; the storm's total runs from before
//!    the first request to the last first profile. Every first profile is checked (name, routes,
//!    retry budget).
//! 3. Reads the RSS with every stream open, then closes them all (each client drops its stream:
//!    `RST_STREAM`), and polls the server's `/metrics` until its `profile_subscribers` series
//!    are gone: that is "the last stream closed" as the server sees it.
//! 4. Watches the server's CPU time (`/proc/PID/stat`, utime + stime) for `--idle-secs` after
//!    that, with the connections still open as a proxy keeps them: a server with no streams
//!    should use (almost) none. Reads the RSS once more.
//!
//! The client shares the machine with the server, so latencies are upper bounds.

use anyhow::{Context, bail, ensure};
use linkerd2_proxy_api::destination::{
    DestinationProfile, GetDestination, destination_client::DestinationClient,
};
use std::{
    net::SocketAddr,
    path::Path,
    time::{Duration, Instant},
};
use tokio::{
    sync::{mpsc, watch},
    task::JoinSet,
};
use tonic::transport::Channel;

use crate::{
    bench::{self, READY_TIMEOUT, ms, percentile},
    cluster_gen::{self, ClusterSpec},
    server::{self, Output, ServerProcess},
};

/// The destination server's `max_concurrent_streams` per connection.
const SERVER_MAX_STREAMS_PER_CONNECTION: usize = 10_000;
/// How long the server has to end every stream after the clients closed them.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often `/metrics` is read while waiting for the streams to be gone.
const METRICS_POLL: Duration = Duration::from_millis(20);
/// Idle CPU above this share of the idle window is flagged in the report.
const BUSY_SHARE: f64 = 0.01;

/// `cargo xtask bench-profiles [--services N] [--streams-per-service K] [--connections C]`
#[derive(Debug, clap::Args)]
pub struct BenchProfilesArgs {
    /// Services in the generated cluster, each with one ServiceProfile.
    #[arg(long, default_value_t = 500)]
    services: usize,

    /// `GetProfile` streams opened on each service.
    #[arg(long, default_value_t = 10)]
    streams_per_service: usize,

    /// HTTP/2 connections the streams are spread over (round robin).
    #[arg(long, default_value_t = 40)]
    connections: usize,

    /// Ready endpoints (meshed pods) per service.
    #[arg(long, default_value_t = 3)]
    endpoints: usize,

    /// Seconds the server's CPU use is watched after the last stream closed.
    #[arg(long, default_value_t = 5)]
    idle_secs: u64,

    /// Build and run the release binary; `--release=false` runs a debug build.
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    release: bool,

    /// Keep the generated cluster directory and the server log instead of deleting them.
    #[arg(long)]
    keep: bool,
}

/// One stream's first message, as its task read it.
#[derive(Debug)]
pub(crate) struct First {
    pub(crate) stream: usize,
    /// From just before the request to the first profile.
    pub(crate) latency: Duration,
    pub(crate) at: Instant,
    /// Why the stream failed or its first profile is not the generated one.
    pub(crate) problem: Option<String>,
}

/// How a stream's task ended.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Messages after the first, while nothing changed (should be none).
    pub(crate) extra_messages: usize,
    /// The server ended the stream before the client closed it.
    pub(crate) ended_early: Option<String>,
}

/// Everything measured, for printing.
struct Report {
    streams: usize,
    yaml_bytes: u64,
    profiles_bytes: u64,
    ready_after: Duration,
    /// Per-stream first-profile latencies, nanoseconds, sorted.
    latencies: Vec<u64>,
    storm_total: Duration,
    storm_server_cpu: Duration,
    storm_client_cpu: Duration,
    rss_before: u64,
    rss_open: u64,
    rss_after: u64,
    extra_messages: usize,
    ended_early: usize,
    first_ended_early: Option<String>,
    /// From the close signal until every client task dropped its stream.
    client_closed: Duration,
    /// From the close signal until the server had no `profile_subscribers` left, or how many
    /// were left after [`CLOSE_TIMEOUT`].
    server_closed: Result<Duration, f64>,
    started: f64,
    handled: f64,
    close_server_cpu: Duration,
    idle: Duration,
    idle_cpu: Duration,
}

/// Runs the storm and prints its parameters and figures.
///
/// Errors when the build, the cluster generation or the server start fails, or when a stream
/// fails or starts with anything but the generated profile of its service.
pub fn run(root: &Path, args: BenchProfilesArgs) -> anyhow::Result<()> {
    args.validate()?;
    if cfg!(debug_assertions) && args.release {
        return bench::rerun_optimized(root);
    }
    let exe = server::build_destination(root, args.release)?;

    let tmp = bench::temp_dir("xtask-bench-profiles-", &["state"])?;
    let state = tmp.path().join("state");
    let spec = ClusterSpec {
        services: args.services,
        endpoints: args.endpoints,
    };
    eprintln!(
        "generating {} services x {} endpoints with a ServiceProfile each in {}...",
        spec.services,
        spec.endpoints,
        state.display()
    );
    spec.write(&state)?;
    let profiles_bytes = spec.write_service_profiles(&state)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the Tokio runtime")?;
    let log = tmp.path().join("destination.log");
    let result = runtime.block_on(storm(&exe, tmp.path(), &spec, &args, profiles_bytes));
    runtime.shutdown_timeout(Duration::from_secs(5));
    if args.keep {
        let kept = tmp.keep();
        eprintln!("kept {} (server log: {})", kept.display(), log.display());
    }
    let report = result?;
    report.print(&args, &spec);
    Ok(())
}

async fn storm(
    exe: &Path,
    dir: &Path,
    spec: &ClusterSpec,
    args: &BenchProfilesArgs,
    profiles_bytes: u64,
) -> anyhow::Result<Report> {
    let state = dir.join("state");
    let yaml_bytes = [
        cluster_gen::BULK_FILE,
        cluster_gen::CHURN_FILE,
        cluster_gen::PROFILES_FILE,
    ]
    .iter()
    .filter_map(|f| std::fs::metadata(state.join(f)).ok())
    .map(|m| m.len())
    .sum();
    let addr = server::free_local_addr()?;
    let admin_addr = server::free_local_addr()?;
    let started_at = Instant::now();
    let mut server = ServerProcess::spawn(
        exe,
        &state,
        addr,
        admin_addr,
        &["--log-level=warn".to_string()],
        Output::File(dir.join("destination.log")),
    )?;
    server.wait_ready(READY_TIMEOUT).await?;
    let ready_after = started_at.elapsed();
    let pid = server.pid();
    let streams = args.services * args.streams_per_service;
    let channels = bench::connect(addr, args.connections).await?.channels;
    let rss_before = server::rss_bytes(pid)?;

    eprintln!(
        "server ready in {:.2} s; opening {streams} GetProfile streams over {} connections at once...",
        ready_after.as_secs_f64(),
        args.connections
    );
    let (first_tx, mut first_rx) = mpsc::unbounded_channel();
    let (close_tx, close_rx) = watch::channel(false);
    let (server_cpu0, client_cpu0) = (
        server::cpu_time(pid)?,
        server::cpu_time(std::process::id())?,
    );
    let t0 = Instant::now();
    let mut tasks = JoinSet::new();
    for stream in 0..streams {
        let service = stream % args.services;
        let client = DestinationClient::new(channels[stream % channels.len()].clone());
        tasks.spawn(profile_stream(
            stream,
            service,
            spec.service_authority(service),
            client,
            first_tx.clone(),
            close_rx.clone(),
        ));
    }
    drop(first_tx);

    let timeout = Duration::from_secs(60).max(Duration::from_millis(5 * streams as u64));
    let deadline = tokio::time::Instant::now() + timeout;
    let mut latencies = Vec::with_capacity(streams);
    let mut last = t0;
    while latencies.len() < streams {
        let first = match tokio::time::timeout_at(deadline, first_rx.recv()).await {
            Ok(Some(first)) => first,
            Ok(None) => bail!("every stream task ended before all streams had their profile"),
            Err(_) => bail!(
                "only {} of {streams} streams received their first profile within {} s{}",
                latencies.len(),
                timeout.as_secs(),
                server.log_tail()
            ),
        };
        if let Some(problem) = first.problem {
            bail!("stream {}: {problem}{}", first.stream, server.log_tail());
        }
        latencies.push(first.latency.as_nanos() as u64);
        last = last.max(first.at);
    }
    let storm_total = last.duration_since(t0);
    let storm_server_cpu = server::cpu_time(pid)?.saturating_sub(server_cpu0);
    let storm_client_cpu = server::cpu_time(std::process::id())?.saturating_sub(client_cpu0);
    latencies.sort_unstable();
    let rss_open = server::rss_bytes(pid)?;
    let open = metrics(admin_addr).await?;
    ensure!(
        open.subscribers == streams as f64,
        "the server counts {} open GetProfile streams on services, expected {streams}",
        open.subscribers
    );

    eprintln!(
        "all {streams} streams have their profile after {:.2} s; closing them all...",
        storm_total.as_secs_f64()
    );
    let close_cpu0 = server::cpu_time(pid)?;
    let closing = Instant::now();
    close_tx.send_replace(true);
    let (mut extra_messages, mut ended_early, mut first_ended_early) = (0, 0, None);
    while let Some(joined) = tasks.join_next().await {
        let held = joined.context("a stream task panicked")?;
        extra_messages += held.extra_messages;
        if let Some(why) = held.ended_early {
            ended_early += 1;
            first_ended_early.get_or_insert(why);
        }
    }
    let client_closed = closing.elapsed();
    let close_deadline = Instant::now() + CLOSE_TIMEOUT;
    let (server_closed, after) = loop {
        let now = metrics(admin_addr).await?;
        if now.subscribers == 0.0 {
            break (Ok(closing.elapsed()), now);
        }
        if Instant::now() >= close_deadline {
            break (Err(now.subscribers), now);
        }
        tokio::time::sleep(METRICS_POLL).await;
    };
    let close_server_cpu = server::cpu_time(pid)?.saturating_sub(close_cpu0);

    let idle = Duration::from_secs(args.idle_secs);
    eprintln!(
        "streams closed; watching the server's CPU for {} s...",
        idle.as_secs()
    );
    let idle_cpu = server::cpu_while_idle(pid, idle).await?;
    let rss_after = server::rss_bytes(pid)?;
    if let Some(status) = server.try_wait()? {
        bail!(
            "destination exited during the benchmark ({status}){}",
            server.log_tail()
        );
    }
    drop(channels);
    server.stop(Duration::from_secs(5)).await?;

    Ok(Report {
        streams,
        yaml_bytes,
        profiles_bytes,
        ready_after,
        latencies,
        storm_total,
        storm_server_cpu,
        storm_client_cpu,
        rss_before,
        rss_open,
        rss_after,
        extra_messages,
        ended_early,
        first_ended_early,
        client_closed,
        server_closed,
        started: after.started,
        handled: after.handled,
        close_server_cpu,
        idle,
        idle_cpu,
    })
}

/// One `GetProfile` stream: reports its first profile (checked against the generated one),
/// then holds the stream, counting any further message, until `close` turns true; dropping
/// the stream then resets it.
pub(crate) async fn profile_stream(
    stream: usize,
    service: usize,
    authority: String,
    mut client: DestinationClient<Channel>,
    first_tx: mpsc::UnboundedSender<First>,
    mut close: watch::Receiver<bool>,
) -> Held {
    let request = GetDestination {
        scheme: "k8s".to_string(),
        path: authority,
        context_token: format!(r#"{{"ns":"{}"}}"#, cluster_gen::NAMESPACE),
    };
    let sent = Instant::now();
    let first = match client.get_profile(request).await {
        Ok(response) => {
            let mut profiles = response.into_inner();
            let message = profiles.message().await;
            let at = Instant::now();
            let problem = match &message {
                Ok(Some(profile)) => check_profile(profile, service).err(),
                Ok(None) => Some("the stream ended before its first profile".to_string()),
                Err(status) => Some(format!("failed before its first profile: {status}")),
            };
            let ok = problem.is_none();
            let _ = first_tx.send(First {
                stream,
                latency: at.duration_since(sent),
                at,
                problem,
            });
            ok.then_some(profiles)
        }
        Err(status) => {
            let _ = first_tx.send(First {
                stream,
                latency: sent.elapsed(),
                at: Instant::now(),
                problem: Some(format!("GetProfile refused: {status}")),
            });
            None
        }
    };
    let Some(mut profiles) = first else {
        return Held::default();
    };
    drop(first_tx);
    let mut held = Held::default();
    loop {
        tokio::select! {
            _ = close.wait_for(|closed| *closed) => return held,
            message = profiles.message() => match message {
                Ok(Some(_)) => held.extra_messages += 1,
                Ok(None) => {
                    held.ended_early = Some(format!("stream {stream}: ended by the server"));
                    return held;
                }
                Err(status) => {
                    held.ended_early = Some(format!("stream {stream}: {status}"));
                    return held;
                }
            },
        }
    }
}

/// The first profile of a stream on `service` must be its generated ServiceProfile.
fn check_profile(profile: &DestinationProfile, service: usize) -> Result<(), String> {
    let fqn = cluster_gen::service_fqn(service);
    if profile.fully_qualified_name != fqn {
        return Err(format!(
            "first profile is for {:?}, expected {fqn:?}",
            profile.fully_qualified_name
        ));
    }
    let routes: Vec<&str> = profile
        .routes
        .iter()
        .map(|r| r.metrics_labels.get("route").map_or("", String::as_str))
        .collect();
    if routes != cluster_gen::PROFILE_ROUTES {
        return Err(format!(
            "{fqn}: routes {routes:?}, expected {:?}",
            cluster_gen::PROFILE_ROUTES
        ));
    }
    let (ratio, min_retries, ttl) = cluster_gen::PROFILE_RETRY_BUDGET;
    let budget = profile.retry_budget.as_ref().map(|b| {
        (
            b.retry_ratio,
            b.min_retries_per_second,
            b.ttl.as_ref().map(|t| (t.seconds, t.nanos)),
        )
    });
    if budget != Some((ratio, min_retries, Some((ttl, 0)))) {
        return Err(format!("{fqn}: retry budget {:?}", profile.retry_budget));
    }
    Ok(())
}

/// The series of the server's `/metrics` this bench reads.
struct ServerCounts {
    /// Sum of `profile_subscribers`: open `GetProfile` streams on services.
    subscribers: f64,
    /// `GetProfile` RPCs started and handled (ended) so far.
    started: f64,
    handled: f64,
}

async fn metrics(admin_addr: SocketAddr) -> anyhow::Result<ServerCounts> {
    let (code, body) = server::http_get(admin_addr, "/metrics")
        .await
        .with_context(|| format!("cannot read http://{admin_addr}/metrics"))?;
    ensure!(
        code == 200,
        "GET http://{admin_addr}/metrics answered {code}"
    );
    let get_profile = r#"grpc_method="GetProfile""#;
    Ok(ServerCounts {
        subscribers: metric_sum(&body, "profile_subscribers", ""),
        started: metric_sum(&body, "grpc_server_started_total", get_profile),
        handled: metric_sum(&body, "grpc_server_handled_total", get_profile),
    })
}

/// The sum of every sample of `name` whose labels contain `label` (Prometheus text format).
pub(crate) fn metric_sum(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let metric = series.split('{').next()?;
            (metric == name && series.contains(label))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

// === impl BenchProfilesArgs ===

impl BenchProfilesArgs {
    fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.services >= 1, "--services must be at least 1");
        ensure!(
            self.streams_per_service >= 1,
            "--streams-per-service must be at least 1"
        );
        ensure!(self.endpoints >= 1, "--endpoints must be at least 1");
        let streams = self.services * self.streams_per_service;
        ensure!(
            (1..=streams).contains(&self.connections),
            "--connections must be between 1 and the number of streams ({streams})"
        );
        ensure!(
            streams.div_ceil(self.connections) <= SERVER_MAX_STREAMS_PER_CONNECTION,
            "streams per connection must not exceed the server's {SERVER_MAX_STREAMS_PER_CONNECTION}"
        );
        Ok(())
    }
}

// === impl Report ===

impl Report {
    fn print(&self, args: &BenchProfilesArgs, spec: &ClusterSpec) {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let millis = |d: Duration| d.as_secs_f64() * 1e3;
        let grown = self.rss_open.saturating_sub(self.rss_before);

        println!();
        println!("== cargo xtask bench-profiles ==");
        println!(
            "parameters: --services {} --streams-per-service {} --connections {} --endpoints {} --idle-secs {} --release={}",
            args.services,
            args.streams_per_service,
            args.connections,
            args.endpoints,
            args.idle_secs,
            args.release
        );
        println!(
            "cluster: {} services, {} meshed pods, {} ServiceProfiles of {} routes ({:.1} MiB of YAML, {:.2} MiB of it ServiceProfiles)",
            spec.services,
            spec.services * spec.endpoints,
            spec.services,
            cluster_gen::PROFILE_ROUTES.len(),
            mib(self.yaml_bytes),
            mib(self.profiles_bytes)
        );
        println!("server ready after {:.2} s", self.ready_after.as_secs_f64());
        println!(
            "storm: {} GetProfile streams opened at once; all had their first profile {:.1} ms after the first request",
            self.streams,
            millis(self.storm_total)
        );
        println!(
            "  first-profile latency per stream: p50 {}  p99 {}  max {}",
            ms(percentile(&self.latencies, 50.0)),
            ms(percentile(&self.latencies, 99.0)),
            ms(self.latencies.last().copied())
        );
        println!(
            "  CPU during the storm: server {:.0} ms ({:.1} us per stream), clients {:.0} ms",
            millis(self.storm_server_cpu),
            self.storm_server_cpu.as_secs_f64() * 1e6 / self.streams.max(1) as f64,
            millis(self.storm_client_cpu)
        );
        println!(
            "server RSS: {:.1} MiB before, {:.1} MiB with all streams open (+{:.1} MiB, {:.2} KiB per stream), {:.1} MiB after closing and {} s idle",
            mib(self.rss_before),
            mib(self.rss_open),
            mib(grown),
            grown as f64 / 1024.0 / self.streams.max(1) as f64,
            mib(self.rss_after),
            self.idle.as_secs()
        );
        match self.server_closed {
            Ok(after) => println!(
                "close: clients dropped every stream in {:.1} ms; the server had no profile subscriber left after {:.1} ms (server CPU {:.0} ms)",
                millis(self.client_closed),
                millis(after),
                millis(self.close_server_cpu)
            ),
            Err(left) => println!(
                "close: clients dropped every stream in {:.1} ms; the server still counted {left} profile subscribers after {} s  <-- streams not released",
                millis(self.client_closed),
                CLOSE_TIMEOUT.as_secs()
            ),
        }
        println!(
            "  GetProfile RPCs on the server: {} started, {} handled",
            self.started, self.handled
        );
        println!(
            "  messages after the first: {}; streams ended by the server before the close: {}",
            self.extra_messages, self.ended_early
        );
        if let Some(example) = &self.first_ended_early {
            println!("  first stream ended early: {example}");
        }
        let busy = self.idle_cpu.as_secs_f64() > self.idle.as_secs_f64() * BUSY_SHARE;
        println!(
            "server CPU in the {} s after the last stream closed: {:.0} ms{}",
            self.idle.as_secs(),
            millis(self.idle_cpu),
            if busy { "  <-- busy while idle" } else { "" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sum_filters_by_name_and_label() {
        let text = "\
# HELP profile_subscribers Open GetProfile streams per service profile.
# TYPE profile_subscribers gauge
profile_subscribers{namespace=\"bench\",profile=\"svc-0.bench.svc.cluster.local\"} 10
profile_subscribers{namespace=\"bench\",profile=\"svc-1.bench.svc.cluster.local\"} 7
profile_subscribers_other 99
grpc_server_handled_total{grpc_type=\"server_stream\",grpc_service=\"io.linkerd.proxy.destination.Destination\",grpc_method=\"GetProfile\",grpc_code=\"OK\"} 5000
grpc_server_handled_total{grpc_type=\"server_stream\",grpc_service=\"io.linkerd.proxy.destination.Destination\",grpc_method=\"Get\",grpc_code=\"OK\"} 3
# EOF
";
        assert_eq!(metric_sum(text, "profile_subscribers", ""), 17.0);
        assert_eq!(
            metric_sum(
                text,
                "grpc_server_handled_total",
                r#"grpc_method="GetProfile""#
            ),
            5000.0
        );
        assert_eq!(metric_sum(text, "workload_subscribers", ""), 0.0);
    }
}
