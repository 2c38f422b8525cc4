//! `cargo xtask bench-storm`: the subscribe storm of linkerd2 #15583 (about 1,300 simultaneous
//! `GetProfile` opens drove upstream's destination into a CPU spiral), at 5,000 `GetProfile`
//! and 5,000 `Get` streams opened at once on 500 Services.
//!
//! 1. Generates a cluster (see [`crate::cluster_gen`]) with one ServiceProfile per Service and
//!    starts the release `destination` on it in offline mode.
//! 2. Opens every stream at once, spread round robin over C HTTP/2 connections: stream `i` of
//!    each API asks for service `i mod N`. A stream's time to first message runs from just
//!    before its request to the moment its task read the message; each first message is
//!    checked (the generated profile; an `Add` of the service's endpoints). The server's RSS is
//!    sampled every 10 ms during the storm for its peak.
//! 3. Closes every stream (`RST_STREAM`) and polls `/metrics` until the server counts no
//!    subscriber, then watches the server's CPU for `--idle-secs` with the connections open.
//!
//! No stream may fail, end early, or receive anything but its first message while nothing
//! changes. The client shares the machine with the server, so latencies are upper bounds.

use anyhow::{Context, bail, ensure};
use linkerd2_proxy_api::destination::{
    GetDestination, destination_client::DestinationClient, update,
};
use std::{
    net::SocketAddr,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};
use tokio::{
    sync::{mpsc, watch},
    task::JoinSet,
};
use tonic::transport::Channel;

use crate::{
    bench::{self, READY_TIMEOUT, ms, percentile},
    bench_profiles::{self, First, Held, metric_sum},
    cluster_gen::{self, ClusterSpec},
    server::{self, Output, ServerProcess},
};

/// How long the server has to end every stream after the clients closed them.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the server's RSS is sampled during the storm, and `/metrics` read after it.
const POLL: Duration = Duration::from_millis(10);
/// Idle CPU above this share of the idle window is flagged in the report.
const BUSY_SHARE: f64 = 0.01;

/// `cargo xtask bench-storm [--services N] [--profile-streams P] [--get-streams G] [--connections C]`
#[derive(Debug, clap::Args)]
pub struct BenchStormArgs {
    /// Services in the generated cluster, each with one ServiceProfile.
    #[arg(long, default_value_t = 500)]
    services: usize,

    /// `GetProfile` streams opened at once (stream `i` on service `i mod N`).
    #[arg(long, default_value_t = 5000)]
    profile_streams: usize,

    /// `Get` streams opened at once, with the `GetProfile` ones.
    #[arg(long, default_value_t = 5000)]
    get_streams: usize,

    /// HTTP/2 connections the streams are spread over (round robin), as that many proxies.
    #[arg(long, default_value_t = 100)]
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
}

/// Everything measured, for printing.
struct Report {
    ready_after: Duration,
    /// Time to first message per stream, nanoseconds, sorted: all, `Get`, `GetProfile`.
    all: Vec<u64>,
    get: Vec<u64>,
    profile: Vec<u64>,
    storm_total: Duration,
    storm_server_cpu: Duration,
    rss_before: u64,
    rss_peak: u64,
    rss_open: u64,
    rss_after: u64,
    extra_messages: usize,
    ended_early: usize,
    first_ended_early: Option<String>,
    server_closed: Result<Duration, f64>,
    idle: Duration,
    idle_cpu: Duration,
}

/// Runs the storm and prints its figures. Errors when the build or the server fails, or when
/// a stream fails or its first message is not what the cluster holds.
pub fn run(root: &Path, args: BenchStormArgs) -> anyhow::Result<()> {
    ensure!(args.services >= 1, "--services must be at least 1");
    ensure!(args.endpoints >= 1, "--endpoints must be at least 1");
    ensure!(args.connections >= 1, "--connections must be at least 1");
    if cfg!(debug_assertions) && args.release {
        return bench::rerun_optimized(root);
    }
    let exe = server::build_destination(root, args.release)?;
    let tmp = bench::temp_dir("xtask-bench-storm-", &["state"])?;
    let state = tmp.path().join("state");
    let spec = ClusterSpec {
        services: args.services,
        endpoints: args.endpoints,
    };
    eprintln!(
        "generating {} services x {} endpoints with a ServiceProfile each...",
        spec.services, spec.endpoints
    );
    spec.write(&state)?;
    spec.write_service_profiles(&state)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the Tokio runtime")?;
    let result = runtime.block_on(storm(&exe, tmp.path(), &spec, &args));
    runtime.shutdown_timeout(Duration::from_secs(5));
    result?.print(&args, &spec);
    Ok(())
}

async fn storm(
    exe: &Path,
    dir: &Path,
    spec: &ClusterSpec,
    args: &BenchStormArgs,
) -> anyhow::Result<Report> {
    let addr = server::free_local_addr()?;
    let admin_addr = server::free_local_addr()?;
    let introspection_addr = server::free_local_addr()?;
    let started_at = Instant::now();
    let mut server = ServerProcess::spawn(
        exe,
        &dir.join("state"),
        addr,
        admin_addr,
        &[
            "--log-level=warn".to_string(),
            format!("--introspection-addr={introspection_addr}"),
        ],
        Output::File(dir.join("destination.log")),
    )?;
    server.wait_ready(READY_TIMEOUT).await?;
    let ready_after = started_at.elapsed();
    let pid = server.pid();
    let channels = bench::connect(addr, args.connections).await?.channels;
    let rss_before = server::rss_bytes(pid)?;
    let streams = args.profile_streams + args.get_streams;
    eprintln!(
        "server ready in {:.2} s; opening {} GetProfile and {} Get streams over {} connections at once...",
        ready_after.as_secs_f64(),
        args.profile_streams,
        args.get_streams,
        args.connections
    );

    // The RSS peak, sampled until the storm is over.
    let peak = Arc::new(AtomicU64::new(rss_before));
    let (done_tx, mut done_rx) = watch::channel(false);
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                if let Ok(rss) = server::rss_bytes(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                tokio::select! {
                    _ = tokio::time::sleep(POLL) => {}
                    _ = done_rx.wait_for(|d| *d) => return,
                }
            }
        })
    };

    let (first_tx, mut first_rx) = mpsc::unbounded_channel();
    let (close_tx, close_rx) = watch::channel(false);
    let server_cpu0 = server::cpu_time(pid)?;
    let t0 = Instant::now();
    let mut tasks = JoinSet::new();
    // Interleaved, so that both APIs storm the server together.
    for i in 0..args.profile_streams.max(args.get_streams) {
        let service = i % args.services;
        if i < args.profile_streams {
            let client = DestinationClient::new(channels[(2 * i) % channels.len()].clone());
            tasks.spawn(bench_profiles::profile_stream(
                i,
                service,
                spec.service_authority(service),
                client,
                first_tx.clone(),
                close_rx.clone(),
            ));
        }
        if i < args.get_streams {
            let client = DestinationClient::new(channels[(2 * i + 1) % channels.len()].clone());
            tasks.spawn(get_stream(
                args.profile_streams + i,
                spec.service_authority(service),
                spec.endpoints,
                client,
                first_tx.clone(),
                close_rx.clone(),
            ));
        }
    }
    drop(first_tx);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let (mut all, mut get, mut profile) = (Vec::new(), Vec::new(), Vec::new());
    let mut last = t0;
    while all.len() < streams {
        let first: First = match tokio::time::timeout_at(deadline, first_rx.recv()).await {
            Ok(Some(first)) => first,
            Ok(None) => bail!("every stream task ended before all streams had a first message"),
            Err(_) => bail!(
                "only {} of {streams} streams had their first message within 120 s{}",
                all.len(),
                server.log_tail()
            ),
        };
        if let Some(problem) = first.problem {
            bail!("stream {}: {problem}{}", first.stream, server.log_tail());
        }
        let nanos = first.latency.as_nanos() as u64;
        all.push(nanos);
        if first.stream < args.profile_streams {
            profile.push(nanos);
        } else {
            get.push(nanos);
        }
        last = last.max(first.at);
    }
    let storm_total = last.duration_since(t0);
    let storm_server_cpu = server::cpu_time(pid)?.saturating_sub(server_cpu0);
    done_tx.send_replace(true);
    let _ = sampler.await;
    let rss_open = server::rss_bytes(pid)?;
    let rss_peak = peak.load(Ordering::Relaxed).max(rss_open);
    for v in [&mut all, &mut get, &mut profile] {
        v.sort_unstable();
    }
    let open = subscribers(admin_addr).await?;
    ensure!(
        open == streams as f64,
        "the server counts {open} subscribers, expected {streams}"
    );

    eprintln!(
        "all {streams} streams served after {:.2} s; closing them all...",
        storm_total.as_secs_f64()
    );
    let closing = Instant::now();
    close_tx.send_replace(true);
    let (mut extra_messages, mut ended_early, mut first_ended_early) = (0, 0, None);
    while let Some(joined) = tasks.join_next().await {
        let held: Held = joined.context("a stream task panicked")?;
        extra_messages += held.extra_messages;
        if let Some(why) = held.ended_early {
            ended_early += 1;
            first_ended_early.get_or_insert(why);
        }
    }
    let close_deadline = Instant::now() + CLOSE_TIMEOUT;
    let server_closed = loop {
        let left = subscribers(admin_addr).await?;
        if left == 0.0 {
            break Ok(closing.elapsed());
        }
        if Instant::now() >= close_deadline {
            break Err(left);
        }
        tokio::time::sleep(POLL).await;
    };
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
        ready_after,
        all,
        get,
        profile,
        storm_total,
        storm_server_cpu,
        rss_before,
        rss_peak,
        rss_open,
        rss_after,
        extra_messages,
        ended_early,
        first_ended_early,
        server_closed,
        idle,
        idle_cpu,
    })
}

/// Open `Get` and `GetProfile` streams on services, as the server's `/metrics` counts them.
async fn subscribers(admin_addr: SocketAddr) -> anyhow::Result<f64> {
    let (code, body) = server::http_get(admin_addr, "/metrics")
        .await
        .with_context(|| format!("cannot read http://{admin_addr}/metrics"))?;
    ensure!(
        code == 200,
        "GET http://{admin_addr}/metrics answered {code}"
    );
    Ok(metric_sum(&body, "profile_subscribers", "")
        + metric_sum(&body, "endpoints_subscribers", ""))
}

/// One `Get` stream: reports its first message (an `Add` of the service's `endpoints`
/// addresses), then holds the stream, counting further messages, until `close`.
async fn get_stream(
    stream: usize,
    authority: String,
    endpoints: usize,
    mut client: DestinationClient<Channel>,
    first_tx: mpsc::UnboundedSender<First>,
    mut close: watch::Receiver<bool>,
) -> Held {
    let request = GetDestination {
        scheme: "k8s".to_string(),
        path: authority.clone(),
        context_token: format!(
            r#"{{"ns":"{}","pod":"client-{stream}"}}"#,
            cluster_gen::NAMESPACE
        ),
    };
    let sent = Instant::now();
    let (updates, problem) = match client.get(request).await {
        Ok(response) => {
            let mut updates = response.into_inner();
            let problem = match updates.message().await {
                Ok(Some(u)) => match u.update {
                    Some(update::Update::Add(set)) if set.addrs.len() == endpoints => None,
                    other => Some(format!(
                        "{authority}: first update {other:?}, expected an Add of {endpoints}"
                    )),
                },
                Ok(None) => Some("the stream ended before its first update".to_string()),
                Err(status) => Some(format!("failed before its first update: {status}")),
            };
            (Some(updates), problem)
        }
        Err(status) => (None, Some(format!("Get refused: {status}"))),
    };
    let at = Instant::now();
    let ok = problem.is_none();
    let _ = first_tx.send(First {
        stream,
        latency: at.duration_since(sent),
        at,
        problem,
    });
    drop(first_tx);
    let (Some(mut updates), true) = (updates, ok) else {
        return Held::default();
    };
    let mut held = Held::default();
    loop {
        tokio::select! {
            _ = close.wait_for(|closed| *closed) => return held,
            message = updates.message() => match message {
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

impl Report {
    fn print(&self, args: &BenchStormArgs, spec: &ClusterSpec) {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let millis = |d: Duration| d.as_secs_f64() * 1e3;
        let line = |v: &[u64]| {
            format!(
                "p50 {}  p99 {}  max {}",
                ms(percentile(v, 50.0)),
                ms(percentile(v, 99.0)),
                ms(v.last().copied())
            )
        };
        println!();
        println!("== cargo xtask bench-storm ==");
        println!(
            "parameters: --services {} --profile-streams {} --get-streams {} --connections {} --endpoints {} --idle-secs {} --release={}",
            args.services,
            args.profile_streams,
            args.get_streams,
            args.connections,
            args.endpoints,
            args.idle_secs,
            args.release
        );
        println!(
            "cluster: {} services x {} meshed pods, a ServiceProfile each; server ready after {:.2} s",
            spec.services,
            spec.endpoints,
            self.ready_after.as_secs_f64()
        );
        println!(
            "storm: every stream had its first message {:.1} ms after the first request",
            millis(self.storm_total)
        );
        println!("  time to first message, all:        {}", line(&self.all));
        println!("  time to first message, Get:        {}", line(&self.get));
        println!(
            "  time to first message, GetProfile: {}",
            line(&self.profile)
        );
        println!(
            "  server CPU during the storm: {:.0} ms",
            millis(self.storm_server_cpu)
        );
        println!(
            "server RSS: {:.1} MiB before, peak {:.1} MiB during the storm, {:.1} MiB with all open, {:.1} MiB after closing and {} s idle",
            mib(self.rss_before),
            mib(self.rss_peak),
            mib(self.rss_open),
            mib(self.rss_after),
            self.idle.as_secs()
        );
        match self.server_closed {
            Ok(after) => println!(
                "close: the server counted no subscriber {:.1} ms after the clients closed",
                millis(after)
            ),
            Err(left) => println!(
                "close: the server still counted {left} subscribers after {} s  <-- not released",
                CLOSE_TIMEOUT.as_secs()
            ),
        }
        println!(
            "messages after the first: {}; streams ended or reset by the server: {}",
            self.extra_messages, self.ended_early
        );
        if let Some(example) = &self.first_ended_early {
            println!("  first: {example}");
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
