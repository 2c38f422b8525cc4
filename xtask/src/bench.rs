//! `cargo xtask bench`: memory per `Get` stream and change-to-delivery latency.
//!
//! 1. Generates a cluster (see [`crate::cluster_gen`]) and starts the release `destination` on it
//!    in offline mode.
//! 2. Reads the server's RSS, opens S `Get` streams on the churning service over C HTTP/2
//!    connections, waits until every stream has its initial `Add`, reads the RSS again.
//! 3. Applies K changes to the churning service's EndpointSlice, one at a time: even changes
//!    make one endpoint not ready (every stream must receive a `Remove` of that address), odd
//!    ones make it ready again (an `Add` of it). Each change is written to a staging file and
//!    renamed into the state directory, so the server never reads a half-written file; t0 is
//!    taken just before the rename. The next change starts once every stream has received the
//!    current one, or after the per-change timeout.
//!
//! Latency is measured per (stream, change) pair, from t0 to the moment the client read the
//! message (one task per connection reads all of its streams); the client shares the machine
//! with the server, so it is an upper bound. The client allocates with mimalloc (see `main.rs`),
//! the server with the system allocator.

use anyhow::{Context, bail, ensure};
use futures::StreamExt;
use linkerd2_proxy_api::destination::{
    GetDestination, Update, destination_client::DestinationClient, update,
};
use std::{
    net::SocketAddr,
    os::fd::{AsRawFd, RawFd},
    path::Path,
    sync::{Arc, Mutex},
    task::Poll,
    time::{Duration, Instant},
};
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

use crate::{
    bench_slow::{SlowReaders, SlowReport},
    cluster_gen::{self, ChurnSlice, ClusterSpec},
    server::{self, Output, ServerProcess},
};

/// How long the server has to load the generated cluster.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// The destination server's `max_concurrent_streams` per connection.
const SERVER_MAX_STREAMS_PER_CONNECTION: usize = 10_000;
/// Client HTTP/2 windows: large, so that flow control never delays a message.
const CONNECTION_WINDOW: u32 = 64 << 20;
const STREAM_WINDOW: u32 = 1 << 20;
/// Worker threads of the bench client's runtime.
const CLIENT_THREADS: usize = 2;
/// How long the server is watched for CPU use after the last change, when it has nothing to do.
const IDLE_CHECK: Duration = Duration::from_secs(3);

/// `cargo xtask bench [--services N] [--endpoints M] [--streams S] [--connections C] [--changes K]`
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Services in the generated cluster, each with one EndpointSlice.
    #[arg(long, default_value_t = 1000)]
    services: usize,

    /// Ready endpoints per service, each a meshed pod (at least 2: one is flipped, the others
    /// keep the service from becoming empty).
    #[arg(long, default_value_t = 10)]
    endpoints: usize,

    /// `Get` streams opened on the churning service.
    #[arg(long, default_value_t = 1000)]
    streams: usize,

    /// HTTP/2 connections the streams are spread over (round robin).
    #[arg(long, default_value_t = 200)]
    connections: usize,

    /// Endpoint changes applied, one at a time.
    #[arg(long, default_value_t = 200)]
    changes: usize,

    /// Build and run the release binary; `--release=false` runs a debug build.
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    release: bool,

    /// Seconds every stream has to receive a change before its delivery counts as timed out.
    #[arg(long, default_value_t = 10.0)]
    change_timeout: f64,

    /// Keep the generated cluster directory and the server log instead of deleting them.
    #[arg(long)]
    keep: bool,

    /// Also open this many slow `Get` streams on the churning service, each read once a
    /// second through a 65,535-byte window ([`crate::bench_slow`]); each change then makes one
    /// more endpoint not ready (so --changes must be below --endpoints).
    #[arg(long, default_value_t = 0)]
    slow_readers: usize,

    /// Slow readers take one message per read instead of all they have received.
    #[arg(long)]
    slow_take_one: bool,
}

/// What one stream's task read, and when.
#[derive(Debug)]
struct Delivery {
    stream: u32,
    at: Instant,
    what: Received,
}

#[derive(Debug)]
pub(crate) enum Received {
    Add {
        addrs: Vec<SocketAddr>,
        /// How many of them carry a TLS identity (meshed endpoints).
        with_identity: usize,
    },
    Remove(Vec<SocketAddr>),
    NoEndpoints {
        #[expect(dead_code, reason = "shown through Debug in the report")]
        exists: bool,
    },
    Empty,
    /// The stream ended with `OK`.
    End,
    /// The RPC or stream failed.
    Error(String),
}

/// What the change phase expects every stream to receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expected {
    Add(SocketAddr),
    Remove(SocketAddr),
}

/// Everything measured, for printing.
struct Report {
    ready_after: Duration,
    bulk_file_bytes: u64,
    open_time: Duration,
    rss_before: u64,
    rss_after_open: u64,
    rss_after_changes: u64,
    initial_messages: usize,
    changes: ChangeStats,
    /// CPU time used during the change phase by the server and by this process (the clients).
    server_cpu: Duration,
    client_cpu: Duration,
    /// TCP segments the client received during the change phase.
    segments: u64,
    /// CPU time the server used during [`IDLE_CHECK`] after the last change.
    idle_cpu: Duration,
    /// The slow readers' figures, with `--slow-readers`.
    slow: Option<SlowReport>,
    /// The server's own `stream_convergence_seconds{api="Get"}`, read after the changes.
    convergence: Option<Convergence>,
}

/// Quantiles of the server's `stream_convergence_seconds` histogram of one API: the upper
/// bound of the bucket each falls in (the histogram keeps no finer figure).
#[derive(Debug, PartialEq)]
pub(crate) struct Convergence {
    pub count: u64,
    /// Seconds; `f64::INFINITY` past the last bucket.
    pub p50: f64,
    pub p99: f64,
}

impl Convergence {
    /// Reads the `api` histogram from a `/metrics` text; `None` when it has no observation.
    pub(crate) fn read(metrics: &str, api: &str) -> Option<Self> {
        let label = format!("api=\"{api}\"");
        let mut buckets: Vec<(f64, u64)> = metrics
            .lines()
            .filter(|line| {
                line.starts_with("stream_convergence_seconds_bucket{") && line.contains(&label)
            })
            .filter_map(|line| {
                let le = line.split("le=\"").nth(1)?.split('"').next()?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                let count = line.rsplit_once(' ')?.1.parse().ok()?;
                Some((le, count))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let count = buckets.last()?.1;
        if count == 0 {
            return None;
        }
        let quantile = |q: f64| {
            let rank = (q * count as f64).ceil() as u64;
            buckets
                .iter()
                .find(|(_, cumulative)| *cumulative >= rank)
                .map_or(f64::INFINITY, |(le, _)| *le)
        };
        Some(Self {
            count,
            p50: quantile(0.5),
            p99: quantile(0.99),
        })
    }
}

#[derive(Default)]
struct ChangeStats {
    /// Nanoseconds from t0 to delivery, one per (stream, change) pair delivered in time.
    latencies: Vec<u64>,
    /// Per change: t0 to the first delivery, and first to last delivery (nanoseconds).
    first_delivery: Vec<u64>,
    fan_out: Vec<u64>,
    /// Update messages read during the change phase.
    messages: usize,
    timed_out_changes: usize,
    missing_deliveries: usize,
    /// Messages that were not the expected one (a second message for a change, a stale one).
    unexpected: usize,
    first_unexpected: Option<String>,
    failed_streams: usize,
    first_failure: Option<String>,
    elapsed: Duration,
}

/// Runs the benchmark and prints its parameters and figures.
///
/// Errors when the build, the cluster generation or the server start fails, or when the
/// streams cannot all be opened; timeouts during the change phase are counted, not errors.
pub fn run(root: &Path, args: BenchArgs) -> anyhow::Result<()> {
    args.validate()?;
    if cfg!(debug_assertions) && args.release {
        return rerun_optimized(root);
    }
    let exe = server::build_destination(root, args.release)?;

    let tmp = temp_dir("xtask-bench-", &["state", "staging"])?;
    let state = tmp.path().join("state");
    let spec = ClusterSpec {
        services: args.services,
        endpoints: args.endpoints,
    };
    eprintln!(
        "generating {} services x {} endpoints in {}...",
        spec.services,
        spec.endpoints,
        state.display()
    );
    let churn = spec.write(&state)?;

    // Two threads, one per core, as the server has: one thread alone took longer to read a
    // change's updates than the server took to send them. (When the server wrote each update
    // on its own, a second thread cost the clients half again as much CPU per update; with the
    // updates of a connection batched it costs about the same.)
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(CLIENT_THREADS)
        .enable_all()
        .build()
        .context("cannot start the Tokio runtime")?;
    let log = tmp.path().join("destination.log");
    let result = runtime.block_on(bench(&exe, tmp.path(), &spec, &churn, &args));
    // Stream tasks still hold connections; end them before the directory goes.
    runtime.shutdown_timeout(Duration::from_secs(5));
    if args.keep {
        let kept = tmp.keep();
        eprintln!("kept {} (server log: {})", kept.display(), log.display());
    }
    let report = result?;
    report.print(&args, &spec);
    Ok(())
}

/// A temporary directory named `PREFIX…` (removed when dropped) holding the empty
/// subdirectories `dirs`: where a bench writes its generated cluster (`state`) and the files it
/// renames into it (`staging`).
pub(crate) fn temp_dir(prefix: &str, dirs: &[&str]) -> anyhow::Result<tempfile::TempDir> {
    let tmp = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .context("cannot create a temporary directory")?;
    for dir in dirs {
        let dir = tmp.path().join(dir);
        std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    Ok(tmp)
}

/// Runs this same command again from an optimized build of xtask: a debug build of the client
/// (tonic, h2, prost) costs more CPU per message than the server does, and the two share the
/// machine, so it would mostly measure itself. Returns only when the re-run cannot start.
pub(crate) fn rerun_optimized(root: &Path) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let (cargo, mut cmd) = server::cargo_command();
    eprintln!("building xtask (release) to run the bench client optimized...");
    let error = cmd
        .current_dir(root)
        .args(["run", "--quiet", "--release", "--package", "xtask", "--"])
        .args(std::env::args_os().skip(1))
        .exec();
    Err(error).with_context(|| format!("cannot run {}", cargo.to_string_lossy()))
}

async fn bench(
    exe: &Path,
    dir: &Path,
    spec: &ClusterSpec,
    churn: &ChurnSlice,
    args: &BenchArgs,
) -> anyhow::Result<Report> {
    let state = dir.join("state");
    let bulk_file_bytes = std::fs::metadata(state.join(cluster_gen::BULK_FILE))
        .map(|m| m.len())
        .unwrap_or_default();
    let addr = server::free_local_addr()?;
    let admin_addr = server::free_local_addr()?;
    let started = Instant::now();
    let mut server = ServerProcess::spawn(
        exe,
        &state,
        addr,
        admin_addr,
        &["--log-level=warn".to_string()],
        Output::File(dir.join("destination.log")),
    )?;
    server.wait_ready(READY_TIMEOUT).await?;
    let ready_after = started.elapsed();
    let pid = server.pid();
    let rss_before = server::rss_bytes(pid)?;

    eprintln!(
        "server ready in {:.2} s; opening {} streams over {} connections...",
        ready_after.as_secs_f64(),
        args.streams,
        args.connections
    );
    let connections = connect(addr, args.connections).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let mut rx = Deliveries::new(rx);
    let opened = Instant::now();
    let request = GetDestination {
        scheme: "k8s".to_string(),
        path: spec.churn_authority(),
        context_token: format!(
            r#"{{"ns":"{}","nodeName":"bench-node-0","pod":"bench-client"}}"#,
            cluster_gen::NAMESPACE
        ),
    };
    let mut tasks = tokio::task::JoinSet::new();
    for (connection, channel) in connections.channels.iter().enumerate() {
        // Round robin: stream i is on connection i % C.
        let streams = (connection..args.streams).step_by(connections.channels.len());
        tasks.spawn(watch_connection(
            DestinationClient::new(channel.clone()),
            streams.map(|s| s as u32).collect(),
            request.clone(),
            tx.clone(),
        ));
    }
    drop(tx);
    let initial_messages = wait_initial(&mut rx, args.streams, spec, &mut server).await?;
    let open_time = opened.elapsed();
    let rss_after_open = server::rss_bytes(pid)?;

    eprintln!(
        "all streams open in {:.2} s; applying {} changes...",
        open_time.as_secs_f64(),
        args.changes
    );
    let (server_cpu, client_cpu) = (
        server::cpu_time(pid)?,
        server::cpu_time(std::process::id())?,
    );
    let segments = connections.segments_in()?;
    let slow = if args.slow_readers > 0 {
        eprintln!("opening {} slow streams...", args.slow_readers);
        let readers =
            SlowReaders::open(addr, &request, args.slow_readers, args.slow_take_one, pid).await?;
        Some(readers)
    } else {
        None
    };
    let changes = apply_changes(&mut rx, dir, spec, churn, args).await?;
    let slow = match slow {
        Some(readers) => {
            eprintln!("waiting for the slow streams to hold the final state...");
            let final_addrs = spec.endpoints - args.changes;
            Some(
                readers
                    .finish(Instant::now(), final_addrs, args.slow_take_one)
                    .await,
            )
        }
        None => None,
    };
    let server_cpu = server::cpu_time(pid)?.saturating_sub(server_cpu);
    let client_cpu = server::cpu_time(std::process::id())?.saturating_sub(client_cpu);
    let segments = connections.segments_in()?.saturating_sub(segments);
    let rss_after_changes = server::rss_bytes(pid)?;
    let idle_cpu = server::cpu_while_idle(pid, IDLE_CHECK).await?;
    let convergence = match server::http_get(admin_addr, "/metrics").await {
        Ok((200, text)) => Convergence::read(&text, "Get"),
        _ => None,
    };
    if let Some(status) = server.try_wait()? {
        bail!(
            "destination exited during the benchmark ({status}){}",
            server.log_tail()
        );
    }

    tasks.abort_all();
    drop(connections);
    server.stop(Duration::from_secs(5)).await?;
    Ok(Report {
        ready_after,
        bulk_file_bytes,
        open_time,
        rss_before,
        rss_after_open,
        rss_after_changes,
        initial_messages,
        changes,
        server_cpu,
        client_cpu,
        segments,
        idle_cpu,
        slow,
        convergence,
    })
}

/// The bench client's HTTP/2 connections, and their sockets for counting what arrived.
pub(crate) struct Connections {
    pub channels: Vec<Channel>,
    sockets: Arc<Mutex<Vec<RawFd>>>,
}

impl Connections {
    /// TCP segments received so far on all connections (`tcpi_segs_in` of `TCP_INFO`): the
    /// server's writes, as on loopback each write of less than 64 KiB is one segment, plus
    /// its ACKs of what the client sent.
    pub(crate) fn segments_in(&self) -> anyhow::Result<u64> {
        let sockets = self
            .sockets
            .lock()
            .expect("the socket list is never poisoned");
        sockets
            .iter()
            .try_fold(0, |sum, fd| Ok(sum + u64::from(segments_in(*fd)?)))
    }
}

fn segments_in(fd: RawFd) -> anyhow::Result<u32> {
    // SAFETY: tcp_info is plain integers, valid when zeroed.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `fd` is a socket the client keeps open; `info` and `len` are valid for writes
    // of the size passed.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    ensure!(
        rc == 0,
        "TCP_INFO of a client socket: {}",
        std::io::Error::last_os_error()
    );
    Ok(info.tcpi_segs_in)
}

/// Connects over TCP with `TCP_NODELAY` and records each socket in `sockets`.
#[derive(Clone)]
struct RecordingConnector {
    addr: SocketAddr,
    sockets: Arc<Mutex<Vec<RawFd>>>,
}

impl tonic::codegen::Service<tonic::transport::Uri> for RecordingConnector {
    type Response = hyper_util::rt::TokioIo<tokio::net::TcpStream>;
    type Error = std::io::Error;
    type Future = futures::future::BoxFuture<'static, std::io::Result<Self::Response>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: tonic::transport::Uri) -> Self::Future {
        let (addr, sockets) = (self.addr, self.sockets.clone());
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            tcp.set_nodelay(true)?;
            sockets
                .lock()
                .expect("the socket list is never poisoned")
                .push(tcp.as_raw_fd());
            Ok(hyper_util::rt::TokioIo::new(tcp))
        })
    }
}

/// Opens `count` HTTP/2 connections to `addr` (with `TCP_NODELAY`), each with windows large
/// enough that the client never throttles the server.
pub(crate) async fn connect(addr: SocketAddr, count: usize) -> anyhow::Result<Connections> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .context("invalid server URI")?
        .initial_connection_window_size(CONNECTION_WINDOW)
        .initial_stream_window_size(STREAM_WINDOW)
        .http2_adaptive_window(false);
    let sockets = Arc::new(Mutex::new(Vec::with_capacity(count)));
    let mut channels = Vec::with_capacity(count);
    for _ in 0..count {
        let connector = RecordingConnector {
            addr,
            sockets: sockets.clone(),
        };
        let channel = endpoint
            .connect_with_connector(connector)
            .await
            .with_context(|| format!("cannot connect to destination at {addr}"))?;
        channels.push(channel);
    }
    Ok(Connections { channels, sockets })
}

/// The `Get` streams of one connection, read by one task: a task per stream would make the
/// client pay a task wake-up per message, on the cores the server needs. Each stream's reader
/// is a long-lived future of the task (no per-message allocation, as `SelectAll` has) that
/// records what it read; each time the task has polled every ready reader, it reports the
/// messages read (and streams ended), each with the time it was read.
async fn watch_connection(
    client: DestinationClient<Channel>,
    streams: Vec<u32>,
    request: GetDestination,
    tx: mpsc::UnboundedSender<Vec<Delivery>>,
) {
    let opened = streams.into_iter().map(|stream| {
        let (mut client, request) = (client.clone(), request.clone());
        async move { (stream, client.get(request).await) }
    });
    let read = Arc::new(Mutex::new(Vec::new()));
    let mut readers = futures::stream::FuturesUnordered::new();
    let mut failed = Vec::new();
    for (stream, response) in futures::future::join_all(opened).await {
        match response {
            Ok(response) => readers.push(read_stream(stream, response.into_inner(), read.clone())),
            Err(status) => failed.push(Delivery {
                stream,
                at: Instant::now(),
                what: Received::Error(status.to_string()),
            }),
        }
    }
    if !failed.is_empty() && tx.send(failed).is_err() {
        return;
    }
    std::future::poll_fn(|cx| {
        // `Ready(None)`: every stream has ended.
        let ended = loop {
            match readers.poll_next_unpin(cx) {
                Poll::Ready(Some(())) => continue,
                Poll::Ready(None) => break true,
                Poll::Pending => break false,
            }
        };
        let batch = std::mem::take(&mut *read.lock().expect("never poisoned"));
        if !batch.is_empty() && tx.send(batch).is_err() {
            return Poll::Ready(());
        }
        if ended {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

/// Reads one stream to its end, recording each message in `read`.
async fn read_stream(
    stream: u32,
    mut updates: tonic::Streaming<Update>,
    read: Arc<Mutex<Vec<Delivery>>>,
) {
    loop {
        let message = updates.message().await;
        let at = Instant::now();
        let (what, more) = match message {
            Ok(Some(update)) => (Received::from(update), true),
            Ok(None) => (Received::End, false),
            Err(status) => (Received::Error(status.to_string()), false),
        };
        read.lock()
            .expect("never poisoned")
            .push(Delivery { stream, at, what });
        if !more {
            return;
        }
    }
}

/// The deliveries of every connection's task, one at a time.
struct Deliveries {
    rx: mpsc::UnboundedReceiver<Vec<Delivery>>,
    batch: std::vec::IntoIter<Delivery>,
}

impl Deliveries {
    fn new(rx: mpsc::UnboundedReceiver<Vec<Delivery>>) -> Self {
        Self {
            rx,
            batch: Vec::new().into_iter(),
        }
    }

    /// The next delivery; `None` once every connection's task has ended.
    async fn recv(&mut self) -> Option<Delivery> {
        loop {
            if let Some(delivery) = self.batch.next() {
                return Some(delivery);
            }
            self.batch = self.rx.recv().await?.into_iter();
        }
    }
}

/// Waits until every stream has received its first message, which must be an `Add` of every
/// endpoint of the churning service. Returns the number of messages read.
async fn wait_initial(
    rx: &mut Deliveries,
    streams: usize,
    spec: &ClusterSpec,
    server: &mut ServerProcess,
) -> anyhow::Result<usize> {
    // Generous: opening 100,000 streams on a shared 2-core machine takes a while.
    let timeout = Duration::from_secs(60).max(Duration::from_millis(2 * streams as u64));
    let deadline = tokio::time::Instant::now() + timeout;
    let mut expected = spec.churn_addrs();
    expected.sort();
    let mut seen = vec![false; streams];
    let (mut opened, mut messages) = (0, 0);
    while opened < streams {
        let delivery = match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(delivery)) => delivery,
            Ok(None) => bail!("every stream task ended before the streams were open"),
            Err(_) => bail!(
                "only {opened} of {streams} streams received their initial Add within {} s{}",
                timeout.as_secs(),
                server.log_tail()
            ),
        };
        match delivery.what {
            Received::Add {
                mut addrs,
                with_identity,
            } => {
                messages += 1;
                addrs.sort();
                ensure!(
                    addrs == expected,
                    "stream {} started with an Add of {addrs:?}, expected {expected:?}",
                    delivery.stream
                );
                // Unmeshed endpoints would make smaller messages than proxies really get.
                ensure!(
                    with_identity == addrs.len(),
                    "stream {}: only {with_identity} of {} endpoints have a TLS identity; the generated pods should be meshed",
                    delivery.stream,
                    addrs.len()
                );
                let first = !std::mem::replace(&mut seen[delivery.stream as usize], true);
                ensure!(
                    first,
                    "stream {} received a second Add before any change",
                    delivery.stream
                );
                opened += 1;
            }
            Received::Error(error) => bail!(
                "stream {} failed while opening: {error}{}",
                delivery.stream,
                server.log_tail()
            ),
            other => bail!(
                "stream {} started with {other:?}, expected an Add",
                delivery.stream
            ),
        }
    }
    Ok(messages)
}

/// Applies the changes one at a time and records when each stream receives each of them.
async fn apply_changes(
    rx: &mut Deliveries,
    dir: &Path,
    spec: &ClusterSpec,
    churn: &ChurnSlice,
    args: &BenchArgs,
) -> anyhow::Result<ChangeStats> {
    let staged = dir.join("staging").join(cluster_gen::CHURN_FILE);
    let target = dir.join("state").join(cluster_gen::CHURN_FILE);
    let addrs = spec.churn_addrs();
    let timeout = Duration::from_secs_f64(args.change_timeout);
    let mut stats = ChangeStats {
        latencies: Vec::with_capacity(args.streams * args.changes),
        ..ChangeStats::default()
    };
    let mut ready = vec![true; spec.endpoints];
    // The change number (from 1) each stream last received.
    let mut received = vec![0usize; args.streams];
    let started = Instant::now();

    for change in 1..=args.changes {
        // With slow readers every state differs (one more endpoint not ready each time);
        // otherwise endpoints go out and back in turn.
        let flipped = if args.slow_readers > 0 {
            change - 1
        } else {
            ((change - 1) / 2) % spec.endpoints
        };
        ready[flipped] = !ready[flipped];
        let expected = if ready[flipped] {
            Expected::Add(addrs[flipped])
        } else {
            Expected::Remove(addrs[flipped])
        };
        std::fs::write(&staged, churn.render(&ready))
            .with_context(|| format!("cannot write {}", staged.display()))?;
        let t0 = Instant::now();
        std::fs::rename(&staged, &target).with_context(|| {
            format!("cannot rename {} to {}", staged.display(), target.display())
        })?;

        let deadline = tokio::time::Instant::from_std(t0 + timeout);
        let (mut delivered, mut first, mut last) = (0, None, t0);
        while delivered < args.streams - stats.failed_streams {
            let delivery = match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(delivery)) => delivery,
                Ok(None) => bail!("every stream task ended during the changes"),
                Err(_) => break,
            };
            let matches = match (&delivery.what, expected) {
                (Received::Add { addrs: got, .. }, Expected::Add(addr))
                | (Received::Remove(got), Expected::Remove(addr)) => got.as_slice() == [addr],
                (Received::End | Received::Error(_), _) => {
                    stats.failed_streams += 1;
                    stats.first_failure.get_or_insert_with(|| {
                        format!("stream {}: {:?}", delivery.stream, delivery.what)
                    });
                    continue;
                }
                _ => false,
            };
            stats.messages += 1;
            let slot = &mut received[delivery.stream as usize];
            if !matches || *slot == change {
                stats.unexpected += 1;
                stats.first_unexpected.get_or_insert_with(|| {
                    format!(
                        "change {change} (expected {expected:?}): stream {} got {:?}",
                        delivery.stream, delivery.what
                    )
                });
                continue;
            }
            *slot = change;
            delivered += 1;
            let latency = delivery.at.saturating_duration_since(t0);
            stats.latencies.push(latency.as_nanos() as u64);
            first.get_or_insert(delivery.at);
            last = last.max(delivery.at);
        }
        let missing = args
            .streams
            .saturating_sub(stats.failed_streams + delivered);
        if missing > 0 {
            stats.timed_out_changes += 1;
            stats.missing_deliveries += missing;
        }
        if let Some(first) = first {
            stats
                .first_delivery
                .push(first.duration_since(t0).as_nanos() as u64);
            stats
                .fan_out
                .push(last.duration_since(first).as_nanos() as u64);
        }
    }
    stats.elapsed = started.elapsed();
    Ok(stats)
}

// === impl BenchArgs ===

impl BenchArgs {
    fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.services >= 1, "--services must be at least 1");
        ensure!(
            self.endpoints >= 2,
            "--endpoints must be at least 2 (one flips, one stays)"
        );
        ensure!(self.streams >= 1, "--streams must be at least 1");
        ensure!(
            (1..=self.streams).contains(&self.connections),
            "--connections must be between 1 and --streams"
        );
        ensure!(
            self.streams.div_ceil(self.connections) <= SERVER_MAX_STREAMS_PER_CONNECTION,
            "--streams / --connections must not exceed the server's {SERVER_MAX_STREAMS_PER_CONNECTION} streams per connection"
        );
        ensure!(
            self.change_timeout > 0.0,
            "--change-timeout must be positive"
        );
        ensure!(
            self.slow_readers == 0 || self.changes < self.endpoints,
            "with --slow-readers, --changes must be below --endpoints (each change takes one endpoint out)"
        );
        Ok(())
    }
}

// === impl Received ===

impl From<Update> for Received {
    fn from(update: Update) -> Self {
        let addrs = |addrs: Vec<linkerd2_proxy_api::net::TcpAddress>| -> Vec<SocketAddr> {
            addrs
                .into_iter()
                .filter_map(|a| SocketAddr::try_from(a).ok())
                .collect()
        };
        match update.update {
            Some(update::Update::Add(set)) => Received::Add {
                with_identity: set
                    .addrs
                    .iter()
                    .filter(|a| a.tls_identity.is_some())
                    .count(),
                addrs: addrs(set.addrs.into_iter().filter_map(|a| a.addr).collect()),
            },
            Some(update::Update::Remove(set)) => Received::Remove(addrs(set.addrs)),
            Some(update::Update::NoEndpoints(no)) => Received::NoEndpoints { exists: no.exists },
            None => Received::Empty,
        }
    }
}

// === impl Report ===

impl Report {
    fn print(&self, args: &BenchArgs, spec: &ClusterSpec) {
        let c = &self.changes;
        let mut latencies = c.latencies.clone();
        latencies.sort_unstable();
        let mut first = c.first_delivery.clone();
        first.sort_unstable();
        let mut fan_out = c.fan_out.clone();
        fan_out.sort_unstable();
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let grown = self.rss_after_open.saturating_sub(self.rss_before);

        println!();
        println!("== cargo xtask bench ==");
        println!(
            "parameters: --services {} --endpoints {} --streams {} --connections {} --changes {} --release={} --change-timeout {}",
            args.services,
            args.endpoints,
            args.streams,
            args.connections,
            args.changes,
            args.release,
            args.change_timeout
        );
        println!(
            "cluster: {} services, {} meshed pods ({:.1} MiB of YAML); streams watch {}",
            spec.services,
            spec.services * spec.endpoints,
            mib(self.bulk_file_bytes),
            spec.churn_authority()
        );
        println!("server ready after {:.2} s", self.ready_after.as_secs_f64());
        println!(
            "streams: {} opened in {:.2} s, each got its initial Add of {} addresses",
            args.streams,
            self.open_time.as_secs_f64(),
            spec.endpoints
        );
        println!(
            "server RSS: {:.1} MiB before streams, {:.1} MiB with all streams open (+{:.1} MiB), {:.1} MiB after the changes",
            mib(self.rss_before),
            mib(self.rss_after_open),
            mib(grown),
            mib(self.rss_after_changes)
        );
        println!(
            "memory per stream: {:.2} KiB",
            grown as f64 / 1024.0 / args.streams as f64
        );
        println!(
            "changes: {} in {:.2} s; {} timed out ({} missing deliveries), {} unexpected messages, {} streams failed",
            args.changes,
            c.elapsed.as_secs_f64(),
            c.timed_out_changes,
            c.missing_deliveries,
            c.unexpected,
            c.failed_streams
        );
        if let Some(example) = &c.first_unexpected {
            println!("  first unexpected message: {example}");
        }
        if let Some(example) = &c.first_failure {
            println!("  first failed stream: {example}");
        }
        println!(
            "change-to-delivery latency over {} (stream, change) pairs: p50 {}  p99 {}  max {}",
            latencies.len(),
            ms(percentile(&latencies, 50.0)),
            ms(percentile(&latencies, 99.0)),
            ms(latencies.last().copied())
        );
        println!(
            "  t0 to first delivery per change (file watch, re-read, index): p50 {}  p99 {}  max {}",
            ms(percentile(&first, 50.0)),
            ms(percentile(&first, 99.0)),
            ms(first.last().copied())
        );
        println!(
            "  first to last delivery per change (fan-out to {} streams): p50 {}  p99 {}  max {}",
            args.streams,
            ms(percentile(&fan_out, 50.0)),
            ms(percentile(&fan_out, 99.0)),
            ms(fan_out.last().copied())
        );
        let deliveries = c.latencies.len().max(1) as f64;
        println!(
            "CPU during the changes: server {:.2} s ({:.1} us per delivered update), clients {:.2} s ({:.1} us per update)",
            self.server_cpu.as_secs_f64(),
            self.server_cpu.as_secs_f64() * 1e6 / deliveries,
            self.client_cpu.as_secs_f64(),
            self.client_cpu.as_secs_f64() * 1e6 / deliveries,
        );
        println!(
            "TCP segments the clients received during the changes (the server's writes, and its ACKs): {} ({:.3} per delivered update)",
            self.segments,
            self.segments as f64 / deliveries,
        );
        println!(
            "server CPU while idle for {} s after the last change: {:.2} s{}",
            IDLE_CHECK.as_secs(),
            self.idle_cpu.as_secs_f64(),
            if self.idle_cpu > IDLE_CHECK / 20 {
                "  <-- busy while idle"
            } else {
                ""
            }
        );
        println!(
            "messages received: {} ({} initial Adds + {} during the changes)",
            self.initial_messages + c.messages,
            self.initial_messages,
            c.messages
        );
        match &self.convergence {
            Some(c) => println!(
                "server's stream_convergence_seconds{{api=\"Get\"}} over {} observations: p50 <= {} s  p99 <= {} s (bucket bounds)",
                c.count, c.p50, c.p99
            ),
            None => println!("server's stream_convergence_seconds: no observation"),
        }
        if let Some(slow) = &self.slow {
            slow.print();
        }
    }
}

/// The nearest-rank `p`th percentile of sorted `values`.
pub(crate) fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Nanoseconds as milliseconds with two decimals, or `-` when there is no value.
pub(crate) fn ms(nanos: Option<u64>) -> String {
    match nanos {
        Some(n) => format!("{:.2} ms", n as f64 / 1e6),
        None => "-".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn convergence_quantiles_are_bucket_bounds() {
        let metrics = "# TYPE stream_convergence_seconds histogram\n\
            stream_convergence_seconds_bucket{le=\"0.001\",api=\"Get\"} 10\n\
            stream_convergence_seconds_bucket{le=\"0.005\",api=\"Get\"} 60\n\
            stream_convergence_seconds_bucket{le=\"0.05\",api=\"Get\"} 99\n\
            stream_convergence_seconds_bucket{le=\"+Inf\",api=\"Get\"} 100\n\
            stream_convergence_seconds_bucket{le=\"+Inf\",api=\"GetProfile\"} 0\n";
        assert_eq!(
            Convergence::read(metrics, "Get"),
            Some(Convergence {
                count: 100,
                p50: 0.005,
                p99: 0.05
            })
        );
        assert_eq!(Convergence::read(metrics, "GetProfile"), None);
    }
}
