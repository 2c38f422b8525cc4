//! `cargo xtask bench --slow-readers N`: `Get` streams whose readers stay slow while the
//! churning Service's slice is rewritten, as a proxy that is busy reads them.
//!
//! Each slow stream has its own HTTP/2 connection with a stream window of 65,535 bytes (the
//! HTTP/2 default, which linkerd2-proxy keeps). Once a second its reader takes what the stream
//! has received (a "read"; with `--slow-take-one`, one message instead) and applies it to its
//! address set. In this mode every change makes one more endpoint not ready, so each state
//! has its own number of addresses and a reader holds the final state exactly when its set
//! has `endpoints - changes` addresses. Reported: per slow stream, the reads after the last
//! change it took to hold the final state (max, p50), and the server's RSS while they ran.

use futures::FutureExt;
use linkerd2_proxy_api::destination::{GetDestination, destination_client::DestinationClient};
use std::{
    collections::HashSet,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};
use tonic::{Streaming, transport::Endpoint};

use crate::bench::percentile;

/// A proxy's HTTP/2 stream window: the protocol's default.
const PROXY_STREAM_WINDOW: u32 = 65_535;
/// How often a slow reader reads.
const READ_INTERVAL: Duration = Duration::from_secs(1);
/// How long the slow readers have, after the last change, to hold the final state.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the server's RSS is sampled while the slow readers run.
const RSS_INTERVAL: Duration = Duration::from_millis(200);

/// One slow reader's reads: when, and how many addresses its set had after it.
type Reads = Arc<Mutex<Vec<(Instant, usize)>>>;

/// The slow streams, reading in their tasks, and the server's RSS sampled meanwhile.
pub(crate) struct SlowReaders {
    reads: Vec<Reads>,
    tasks: tokio::task::JoinSet<()>,
    max_rss: Arc<Mutex<u64>>,
}

/// What the slow readers showed.
pub(crate) struct SlowReport {
    pub streams: usize,
    pub take_one: bool,
    /// Reads after the last change until the final state, one per stream that got there.
    pub reads_to_final: Vec<u64>,
    /// Streams that did not hold the final state within [`CONVERGE_TIMEOUT`].
    pub not_converged: usize,
    pub max_rss: u64,
}

impl SlowReaders {
    /// Opens `count` slow streams for `request`, each on its own connection, and waits for
    /// their initial `Add`s. Errors when a connection or a stream cannot be opened.
    pub(crate) async fn open(
        addr: SocketAddr,
        request: &GetDestination,
        count: usize,
        take_one: bool,
        server_pid: u32,
    ) -> anyhow::Result<Self> {
        let mut readers = Self {
            reads: Vec::with_capacity(count),
            tasks: tokio::task::JoinSet::new(),
            max_rss: Arc::new(Mutex::new(crate::server::rss_bytes(server_pid)?)),
        };
        for _ in 0..count {
            let channel = Endpoint::from_shared(format!("http://{addr}"))?
                .initial_stream_window_size(PROXY_STREAM_WINDOW)
                .initial_connection_window_size(64 << 20)
                .connect()
                .await?;
            let mut stream = DestinationClient::new(channel)
                .get(request.clone())
                .await?
                .into_inner();
            let mut addrs = HashSet::new();
            let first = stream
                .message()
                .await?
                .ok_or_else(|| anyhow::anyhow!("a slow stream ended before its first Add"))?;
            apply(&mut addrs, first);
            let reads = Reads::default();
            readers.reads.push(reads.clone());
            readers
                .tasks
                .spawn(read_slowly(stream, addrs, reads, take_one));
        }
        let max_rss = readers.max_rss.clone();
        readers.tasks.spawn(async move {
            loop {
                tokio::time::sleep(RSS_INTERVAL).await;
                let Ok(rss) = crate::server::rss_bytes(server_pid) else {
                    return;
                };
                let mut max = max_rss.lock().unwrap_or_else(|e| e.into_inner());
                *max = (*max).max(rss);
            }
        });
        Ok(readers)
    }

    /// Waits until every slow stream holds `final_addrs` addresses (or [`CONVERGE_TIMEOUT`])
    /// and counts, per stream, its reads after `last_change` up to the first that held them.
    pub(crate) async fn finish(
        mut self,
        last_change: Instant,
        final_addrs: usize,
        take_one: bool,
    ) -> SlowReport {
        let converged = |reads: &Reads| -> Option<u64> {
            let reads = reads.lock().unwrap_or_else(|e| e.into_inner());
            let after = reads.iter().filter(|(at, _)| *at > last_change);
            let mut count = 0;
            for (_, len) in after {
                count += 1;
                if *len == final_addrs {
                    return Some(count);
                }
            }
            None
        };
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        while Instant::now() < deadline && !self.reads.iter().all(|r| converged(r).is_some()) {
            tokio::time::sleep(READ_INTERVAL / 2).await;
        }
        self.tasks.abort_all();
        let mut reads_to_final: Vec<u64> = self.reads.iter().filter_map(converged).collect();
        reads_to_final.sort_unstable();
        let max_rss = *self.max_rss.lock().unwrap_or_else(|e| e.into_inner());
        SlowReport {
            streams: self.reads.len(),
            take_one,
            not_converged: self.reads.len() - reads_to_final.len(),
            reads_to_final,
            max_rss,
        }
    }
}

/// Reads `stream` once a [`READ_INTERVAL`], recording each read in `reads`.
async fn read_slowly(
    mut stream: Streaming<linkerd2_proxy_api::destination::Update>,
    mut addrs: HashSet<SocketAddr>,
    reads: Reads,
    take_one: bool,
) {
    loop {
        tokio::time::sleep(READ_INTERVAL).await;
        // What has arrived is ready at once; a message not yet received is not waited for.
        while let Some(message) = stream.message().now_or_never() {
            match message {
                Ok(Some(update)) => apply(&mut addrs, update),
                Ok(None) | Err(_) => return,
            }
            if take_one {
                break;
            }
        }
        reads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((Instant::now(), addrs.len()));
    }
}

/// Applies one update to a proxy's address set.
fn apply(addrs: &mut HashSet<SocketAddr>, update: linkerd2_proxy_api::destination::Update) {
    use crate::bench::Received;
    match Received::from(update) {
        Received::Add { addrs: added, .. } => addrs.extend(added),
        Received::Remove(removed) => {
            for addr in removed {
                addrs.remove(&addr);
            }
        }
        Received::NoEndpoints { .. } => addrs.clear(),
        Received::Empty | Received::End | Received::Error(_) => {}
    }
}

impl SlowReport {
    pub(crate) fn print(&self) {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let p50 = percentile(&self.reads_to_final, 50.0);
        let show = |r: Option<u64>| r.map_or_else(|| "-".to_string(), |r| r.to_string());
        println!(
            "slow readers: {} streams (window {} bytes, one read a second taking {}): reads after the last change to hold the final state: max {}  p50 {}; {} did not within {} s",
            self.streams,
            PROXY_STREAM_WINDOW,
            if self.take_one {
                "one message"
            } else {
                "all it has received"
            },
            show(self.reads_to_final.last().copied()),
            show(p50),
            self.not_converged,
            CONVERGE_TIMEOUT.as_secs(),
        );
        println!(
            "  server RSS while the slow readers ran: max {:.1} MiB",
            mib(self.max_rss)
        );
    }
}
