//! The HTTPS server of the pod's admission webhooks (the policy validator, spec/policy.md §6, and
//! the ServiceProfile validator, spec/sp-validator-and-pod.md §b.2).
//!
//! [`ServerTls`] loads a PEM certificate chain and private key (`--server-tls-certs`,
//! `--server-tls-key`; PKCS#1 RSA, SEC1 EC or PKCS#8 keys) with rustls' `ring` provider, the
//! one kube uses. The certificate is picked per handshake, so a reload takes effect for the next
//! connection: [`ServerTls::spawn_reloader`] re-reads both files when their directories change
//! (Kubernetes updates a mounted Secret by swapping a `..data` symlink, so the directories are
//! watched rather than the files). A missing or unusable file at start is an error that names
//! it; an unusable one on reload is logged and the previous certificate keeps being served.
//!
//! [`HttpsServer`] serves an axum [`Router`] over HTTP/1.1 on TLS until a shutdown future
//! resolves, then lets open requests finish (for up to [`DRAIN_TIMEOUT`]). It closes a
//! connection in stages (RFC 9112 §9.6): after the last answer it sends TLS `close_notify` and
//! a TCP FIN, then reads and discards what the client still sends for up to
//! [`LINGER_TIMEOUT`]. Closing at once would reset the connection while a client is still
//! sending a body the server answered early (`413`), and the reset loses the answer: clients
//! that send the whole body before reading (Python's `http.client`, ...) saw only a broken
//! connection. [`read_body`] reads a request body up to a limit.
//!
//! [`ServerTls::load_mtls`] configures mesh TLS instead, as the pod's sidecar terminates it
//! (spec/sp-validator-and-pod.md §d.2, §d.6): TLS 1.3, ALPN `h2` offered but not required, and
//! client certificates verified against [`TrustAnchors`].

use axum::{
    Router,
    body::{Body, Bytes},
    http::{HeaderMap, header},
};
use futures::StreamExt;
use rustls::{
    RootCertStore, ServerConfig,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier, danger::ClientCertVerifier},
    sign::CertifiedKey,
};
use std::{
    collections::HashMap,
    future::Future,
    io,
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError, RwLock},
    time::Duration,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
};
use tokio_rustls::TlsAcceptor;

use crate::http;

#[cfg(test)]
mod tests;

/// How long a client may take to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub use crate::http::{DRAIN_TIMEOUT, HEADER_READ_TIMEOUT};

/// How long a closed connection keeps reading what its client still sends (see the module
/// docs). At the bandwidth of a pod network this is far more than any body a webhook client
/// sends needs; a client still sending after it is reset.
pub const LINGER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why [`read_body`] did not return a body.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The body is longer than the limit (by its `content-length`, or as read).
    #[error("the request body is larger than {limit} bytes")]
    TooLarge {
        /// The limit passed to [`read_body`], in bytes.
        limit: usize,
    },
    /// The client broke off or sent a malformed body.
    #[error("cannot read the request body: {0}")]
    Read(#[from] axum::Error),
    /// The body did not arrive within [`BODY_READ_TIMEOUT`], waiting for room included
    /// ([`BodyBudget::read`]).
    #[error("the request body did not arrive within {:?}", BODY_READ_TIMEOUT)]
    Timeout,
    /// The body held its share of a [`BodyBudget`] longer than a body of its size may
    /// ([`body_hold_time`]): a client trickling a large body must not keep the others waiting.
    #[error(
        "the request body ({size} bytes) did not arrive within {allowed:?} of its turn (1s, and 1s more per 4 MiB)"
    )]
    TooSlow {
        /// The bytes the body held: its declared size, or the per-body limit.
        size: usize,
        /// What [`body_hold_time`] allowed it.
        allowed: Duration,
    },
}

/// How long a body read through a [`BodyBudget`] may take: 10 s, the API server's default
/// webhook timeout (after it the API server no longer waits for the answer). A client
/// trickling its body must not keep its share of the budget from the others for longer.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The slowest a body that holds its share of a [`BodyBudget`] may arrive, in bytes per
/// second: 4 MiB/s, far below what a cluster network carries.
pub const MIN_BODY_RATE: usize = 4 * 1024 * 1024;

/// How long a body of `size` bytes may hold its share of a [`BodyBudget`] before all of it has
/// arrived: 1 s, plus 1 s per [`MIN_BODY_RATE`] bytes (3.5 s for the 10 MiB of the webhooks'
/// limit). The API server sends a review of a few KiB in one write; without this bound, three
/// clients that declare 10 MiB and then stall kept reviews waiting for the whole
/// [`BODY_READ_TIMEOUT`], and the API server would have given up on them.
///
/// Rounded to whole milliseconds, as error messages show it (`3.384s`, not `3.384185791s`).
pub fn body_hold_time(size: usize) -> Duration {
    let millis = 1_000.0 + 1_000.0 * size as f64 / MIN_BODY_RATE as f64;
    Duration::from_millis(millis.round() as u64)
}

/// The memory a server's request bodies take at once, by size: the bytes of the bodies being
/// read and answered, and what decoding them takes ([`BodyBudget::decoding`]). A body takes its
/// share (its declared `content-length`, or the per-body limit when it declares none) when its
/// first bytes arrive, so a client that declares a large body and sends nothing holds
/// nothing; a body that does not fit waits (first come, first served) until others are
/// answered, for at most [`BODY_READ_TIMEOUT`]. Once it holds its share, the rest of it must
/// arrive within [`body_hold_time`]. Without it, 60 webhook calls of 9 MiB took a
/// validator over 450 MB. Small bodies may have a pool of their own
/// ([`BodyBudget::with_small_bodies`]). Cheap to clone; clones share the budget.
#[derive(Clone, Debug)]
pub struct BodyBudget {
    bytes: Arc<tokio::sync::Semaphore>,
    per_body: usize,
    /// Bodies of at most `.0` bytes take their share from `.1` rather than from `bytes`.
    small: Option<(usize, Arc<tokio::sync::Semaphore>)>,
    /// Each client's turns ([`BODIES_PER_PEER`]), by IP address; idle ones are dropped as the
    /// map grows.
    peers: Arc<Mutex<HashMap<IpAddr, Arc<tokio::sync::Semaphore>>>>,
    decoded: Arc<tokio::sync::Semaphore>,
    decoded_total: usize,
    /// Decodings of at most `.0` bytes take their share from `.1` rather than from `decoded`.
    cheap_decoded: Option<(usize, Arc<tokio::sync::Semaphore>)>,
}

/// Where a webhook judges its reviews: on tokio's blocking threads, at most a fixed number at
/// once (one per core, at least two: [`ReviewWorkers::per_core`]), never on the runtime's
/// workers.
/// Judging can take seconds of CPU: a review of 1,000 short regexes that compile large
/// (`\w{20}0`, `\w{20}1`, ...) takes 4.6 s to judge in a release build. On a runtime worker
/// it stalled all the process served for that long: the policy controller's gRPC streams and
/// both admin ports' probes (newcomer finding: `/ready` answered after 20 s, in a debug
/// build). Work holds its slot until it ends, even when its client has gone, so clients that
/// leave cannot pile up work; reviews waiting for a slot wait without a thread. Cheap reviews
/// may have slots of their own ([`ReviewWorkers::with_cheap_lane`]). Cheap to clone; clones
/// share the slots.
#[derive(Clone, Debug)]
pub struct ReviewWorkers {
    slots: Arc<tokio::sync::Semaphore>,
    slot_count: usize,
    cheap: Option<CheapLane>,
    /// How long a review waits for a slot before it is answered unjudged; `None`: for ever.
    max_wait: Option<Duration>,
    /// Where a review takes its decoding share once it has a slot; `None`: it takes none.
    decoding: Option<BodyBudget>,
    /// How long past its time a review is judged before it is answered [`Judging::Overran`];
    /// `None`: until judging ends.
    overrun: Option<Duration>,
}

/// What [`ReviewWorkers::run`] asks of a review's judge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judging {
    /// Judge the review within this time.
    Within(Duration),
    /// No slot was free for this long ([`ReviewWorkers::with_max_wait`]): answer without
    /// judging.
    Unjudged {
        /// How long the review waited for a slot.
        waited: Duration,
    },
    /// Judging went on past this time and more ([`ReviewWorkers::with_overrun`]): answer
    /// without waiting for it to end.
    Overran {
        /// The time judging was given.
        time: Duration,
    },
}

/// The slots of [`ReviewWorkers::with_cheap_lane`].
#[derive(Clone, Debug)]
struct CheapLane {
    /// Reviews that cost at most this take their slot from `slots`.
    max_cost: usize,
    slots: Arc<tokio::sync::Semaphore>,
    /// The time a review is judged for in this lane before it is judged again in the others.
    time: Duration,
}

/// The slots a review waits for in [`ReviewWorkers::run`], and the decoding it takes there.
struct Lane<'a> {
    slots: &'a Arc<tokio::sync::Semaphore>,
    /// Whether the decoding share may come from the cheap pool.
    cheap_pool: bool,
    memory: usize,
}

/// What judging a review gave ([`ReviewWorkers::run`]): its answer, and whether judging
/// stopped short because its time budget had passed (the answer then says only that).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Judged<T> {
    /// The review's answer.
    pub answer: T,
    /// Judging stopped short for lack of time.
    pub out_of_time: bool,
}

impl<T> Judged<T> {
    /// An answer judging reached within its time.
    pub fn done(answer: T) -> Self {
        Self {
            answer,
            out_of_time: false,
        }
    }
}

impl ReviewWorkers {
    /// At most `slots` reviews judged at once (at least one).
    pub fn new(slots: usize) -> Self {
        let slot_count = slots.max(1);
        Self {
            slots: Arc::new(tokio::sync::Semaphore::new(slot_count)),
            slot_count,
            cheap: None,
            max_wait: None,
            decoding: None,
            overrun: None,
        }
    }

    /// The same workers, with a review still being judged `grace` after its time answered
    /// [`Judging::Overran`] (on a blocking thread without a slot), as one that ran out of time
    /// ([`Judged::out_of_time`]: a cheap review is judged again among the costly ones). The
    /// judging goes on, holding its slot and share, until it ends: only its answer is not
    /// waited for. A judge checks its time between steps, and one step can take seconds (one
    /// 8 KiB regex of `(?i)\p{Any}` took 4.7 s to translate), which kept reviews from being
    /// answered before the API server's 10 s timeout (tester finding: three reviews of two
    /// such regexes were answered after 12 to 18 s).
    pub fn with_overrun(mut self, grace: Duration) -> Self {
        self.overrun = Some(grace);
        self
    }

    /// The same workers, with a review taking its share of `budget`'s decoding budget
    /// ([`BodyBudget::decoding`]) once it has a slot, for as long as it is judged there: a
    /// cheap review from the cheap pool, and again from the costly reviews' pool when it is
    /// judged again among them. Taken before waiting for a slot, as it was, the shares of
    /// cheap reviews waiting for a costly slot filled the cheap pool, and an ordinary review
    /// waited for them (tester finding: with 18 profiles of 250 slow regexes it waited 1.9 s,
    /// with 32, 24 s).
    pub fn with_decoding(mut self, budget: BodyBudget) -> Self {
        self.decoding = Some(budget);
        self
    }

    /// The same workers, with a review that has waited `max_wait` for a slot of its lane
    /// answered unjudged ([`Judging::Unjudged`]) at once, on a blocking thread without a slot:
    /// past some wait, the client (the API server, which gives up after 10 s) would be gone
    /// before the answer, and slow reviews sent faster than they are judged would queue
    /// without end (tester finding: of sixteen slow ServiceProfiles sent at once, the last
    /// were answered after 24 s).
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// The same workers, with reviews whose cost (as the webhook estimates it before decoding,
    /// `linkerd_admission::decode_cost`) is at most `max_cost` judged first in as many slots
    /// again, of their own, for at most `time`: one that needs longer gives its cheap slot up
    /// and is judged again from the start in the costly reviews' slots, with their budget. A
    /// review of a few KiB then waits for no costly one, however many wait, and at most for
    /// `time` per cheap review ahead of it. Without a lane of their own, eight ServiceProfiles
    /// of 1,000 slow regexes sent at once kept an ordinary review waiting 11.6 s (newcomer
    /// finding), past the API server's 10 s timeout; without the time bound, ten profiles of
    /// 250 such regexes, cheap to decode but each judged for 3 s, kept it waiting 15 s.
    pub fn with_cheap_lane(mut self, max_cost: usize, time: Duration) -> Self {
        self.cheap = Some(CheapLane {
            max_cost,
            slots: Arc::new(tokio::sync::Semaphore::new(self.slot_count)),
            time,
        });
        self
    }

    /// One slot per core, and at least two: one slow review does not hold up the others
    /// (newcomer finding: with one slot on 2 cores, every review waited for it). The rest of
    /// the process (gRPC streams, probes, the index) runs on other threads, which the OS
    /// gives their share of the cores.
    pub fn per_core() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Self::new(cores.max(2))
    }

    /// Judges a review that costs `cost` (the cheap lane's unit) on a blocking thread once a
    /// slot of its lane is free (and `memory` bytes of decoding, [`Self::with_decoding`]), by
    /// calling `judge` with the time it may take ([`Judging::Within`] `budget`), and returns
    /// its answer. A cheap review is first judged with the cheap lane's time (at most
    /// `budget`); when that ran out (`out_of_time`), it gives its slot and share back and
    /// `judge` is called again, in a costly slot, with `budget`, and that answer is returned
    /// whatever it says. A review that waits longer than [`ReviewWorkers::with_max_wait`]
    /// allows gets [`Judging::Unjudged`] instead, on a blocking thread, without slot or share.
    ///
    /// Errors: `judge` panicked (the panic is caught by tokio and returned here, so the
    /// caller answers the review with an error instead of losing the connection's task).
    pub async fn run<T: Send + 'static>(
        &self,
        cost: usize,
        memory: usize,
        budget: Duration,
        judge: impl Fn(Judging) -> Judged<T> + Send + Sync + 'static,
    ) -> Result<T, tokio::task::JoinError> {
        let judge = Arc::new(judge);
        let start = tokio::time::Instant::now();
        if let Some(cheap) = self.cheap.as_ref().filter(|lane| cost <= lane.max_cost) {
            let time = cheap.time.min(budget);
            let lane = Lane {
                slots: &cheap.slots,
                cheap_pool: true,
                memory,
            };
            let judged = self.judge_in(lane, start, time, judge.clone()).await?;
            if !judged.out_of_time || time >= budget {
                return Ok(judged.answer);
            }
            tracing::debug!(
                ?time,
                "a cheap review took longer than its lane allows; judging it again"
            );
        }
        let lane = Lane {
            slots: &self.slots,
            cheap_pool: false,
            memory,
        };
        let judged = self.judge_in(lane, start, budget, judge).await?;
        Ok(judged.answer)
    }

    /// Calls `judge` with `time` on a blocking thread once one of the lane's slots is free and
    /// the review's decoding share is taken, holding both until it returns, or unjudged once
    /// the review, which began waiting at `start`, has waited the longest allowed (in all,
    /// when it waits for a second lane).
    async fn judge_in<T: Send + 'static>(
        &self,
        lane: Lane<'_>,
        start: tokio::time::Instant,
        time: Duration,
        judge: Arc<impl Fn(Judging) -> Judged<T> + Send + Sync + 'static>,
    ) -> Result<Judged<T>, tokio::task::JoinError> {
        let waiting = async {
            let slot = lane
                .slots
                .clone()
                .acquire_owned()
                .await
                .expect("the review slots' semaphore is never closed");
            let share = match &self.decoding {
                Some(budget) => Some(budget.decoding_from(lane.cheap_pool, lane.memory).await),
                None => None,
            };
            (slot, share)
        };
        let held = match self.max_wait {
            Some(max_wait) => match tokio::time::timeout_at(start + max_wait, waiting).await {
                Ok(held) => held,
                Err(_) => {
                    let waited = Judging::Unjudged {
                        waited: start.elapsed(),
                    };
                    return tokio::task::spawn_blocking(move || judge(waited)).await;
                }
            },
            None => waiting.await,
        };
        let judging = {
            let judge = judge.clone();
            tokio::task::spawn_blocking(move || {
                let _held = held;
                judge(Judging::Within(time))
            })
        };
        let Some(grace) = self.overrun else {
            return judging.await;
        };
        match tokio::time::timeout(time + grace, judging).await {
            Ok(judged) => judged,
            Err(_) => {
                tracing::debug!(?time, "judging overran its time; answering without it");
                let overran = Judging::Overran { time };
                let answer = tokio::task::spawn_blocking(move || judge(overran).answer).await?;
                Ok(Judged {
                    answer,
                    out_of_time: true,
                })
            }
        }
    }

    /// How many slots are free now, not counting the cheap lane's (tests, diagnostics).
    pub fn available(&self) -> usize {
        self.slots.available_permits()
    }

    /// How many of the cheap lane's slots are free now; 0 without one.
    pub fn cheap_available(&self) -> usize {
        self.cheap
            .as_ref()
            .map_or(0, |lane| lane.slots.available_permits())
    }
}

/// A request body read through a [`BodyBudget`], holding its share until dropped.
#[derive(Debug)]
pub struct HeldBody {
    bytes: Bytes,
    _share: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// The address of the client that sent a request to an [`HttpsServer`], in the request's
/// extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

impl PeerAddr {
    /// The address of the client that sent `extensions`' request, when an [`HttpsServer`]
    /// served it.
    pub fn ip_of(extensions: &axum::http::Extensions) -> Option<IpAddr> {
        extensions.get::<PeerAddr>().map(|peer| peer.0.ip())
    }
}

/// A share of a [`BodyBudget`]'s decoding budget, held until dropped.
#[derive(Debug)]
pub struct DecodingShare {
    _share: tokio::sync::OwnedSemaphorePermit,
}

/// Bodies one client (an IP address) may have in a [`BodyBudget`] at once, holding their share
/// or waiting for it; its others wait for a turn of their own, outside the budget's queue. So
/// clients of one address that declare bodies and stall take at most 8 of the 16 largest small
/// bodies' shares ([`BodyBudget::with_small_bodies`] in the webhooks), and the API server's
/// reviews are not queued behind them: 200 such clients kept every review waiting 9–10 s.
pub const BODIES_PER_PEER: usize = 8;

/// Changes to the files are applied once they have been quiet this long: a Secret update, or
/// an editor writing the certificate and then the key, is several events.
const RELOAD_DEBOUNCE: Duration = Duration::from_millis(200);

/// How often the files are re-read when their directories cannot be watched.
const RELOAD_POLL: Duration = Duration::from_secs(10);

/// The two PEM files of a server certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first (`--server-tls-certs`).
    pub certs: PathBuf,
    /// The private key of the leaf (`--server-tls-key`).
    pub key: PathBuf,
}

/// Why a certificate and key cannot be served. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {error}", path.display())]
    Read { path: PathBuf, error: io::Error },
    #[error("no PEM certificate in {}", path.display())]
    NoCertificate { path: PathBuf },
    #[error("invalid PEM certificate in {}: {reason}", path.display())]
    InvalidCertificate { path: PathBuf, reason: String },
    #[error("no PEM private key in {}", path.display())]
    NoKey { path: PathBuf },
    #[error("unusable private key in {}: {reason}", path.display())]
    InvalidKey { path: PathBuf, reason: String },
    #[error(
        "the key in {} does not match the certificate in {}: {reason}",
        key.display(),
        certs.display()
    )]
    Mismatch {
        certs: PathBuf,
        key: PathBuf,
        reason: String,
    },
    #[error("no PEM certificate in the trust anchors {}", path.display())]
    NoTrustAnchor { path: PathBuf },
    #[error("invalid trust anchors in {}: {reason}", path.display())]
    InvalidTrustAnchor { path: PathBuf, reason: String },
    #[error("cannot build the TLS configuration: {0}")]
    Config(rustls::Error),
    /// A reloaded certificate that the server's check refused ([`ServerTls::with_reload_check`]).
    #[error("the certificate in {} is refused: {reason}", certs.display())]
    Refused { certs: PathBuf, reason: String },
}

/// Decides whether a reloaded certificate chain (leaf first) may be served; the error says why
/// not.
pub type ChainCheck =
    Arc<dyn Fn(&[CertificateDer<'static>]) -> Result<(), String> + Send + Sync + 'static>;

/// The roots that client (and peer) certificates must chain to: the mesh's trust anchors
/// (`ca-bundle.crt` of the `linkerd-identity-trust-roots` ConfigMap, spec §d.4). Read once;
/// as for the proxy, changing them needs a restart.
#[derive(Clone, Debug)]
pub struct TrustAnchors {
    path: PathBuf,
    roots: Arc<RootCertStore>,
}

/// Whether a mesh-TLS server ([`ServerTls::load_mtls`]) admits clients without a certificate.
/// A presented certificate is verified either way.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// The handshake fails (alert `certificate_required`) when the client presents none.
    Required,
    /// Clients without a certificate are admitted, as the proxy does (spec §d.2).
    Optional,
}

/// A server certificate loaded from [`TlsFiles`], and the rustls configuration that serves it.
/// Clones share the certificate: a reload through one is seen by all.
#[derive(Clone)]
pub struct ServerTls {
    files: TlsFiles,
    resolver: Arc<Resolver>,
    config: Arc<ServerConfig>,
    /// What a reloaded certificate must pass before it is served.
    reload_check: Option<ChainCheck>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .field("reload_check", &self.reload_check.is_some())
            .finish_non_exhaustive()
    }
}

/// Whether [`ServerTls::reload`] found new contents.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// Both files hold what is already served.
    Unchanged,
    /// The new certificate is served from the next handshake on.
    Changed,
}

/// Keeps [`ServerTls::spawn_reloader`]'s task alive; dropping it stops the reloads.
#[derive(Debug)]
pub struct Reloader {
    task: tokio::task::JoinHandle<()>,
}

/// A bound HTTPS listener with its certificate.
#[derive(Debug)]
pub struct HttpsServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    tls: ServerTls,
}

/// Picks the current certificate for each handshake.
#[derive(Debug)]
struct Resolver {
    current: RwLock<Loaded>,
}

/// A certificate as served, with the file contents it came from (to tell a real change from a
/// touch).
#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    certs_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

// === impl ServerTls ===

impl ServerTls {
    /// Loads the certificate chain and key, accepting TLS 1.2 and 1.3 with ALPN `http/1.1`.
    pub fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        Self::load_with_versions(files, rustls::ALL_VERSIONS)
    }

    /// Like [`ServerTls::load`], accepting only TLS 1.3 (the sp-validator's minimum, spec
    /// §b.2).
    pub fn load_tls13_only(files: &TlsFiles) -> Result<Self, TlsError> {
        Self::load_with_versions(files, &[&rustls::version::TLS13])
    }

    /// Loads the certificate chain and key for mesh TLS (spec §d.2, §d.6): TLS 1.3 only, client
    /// certificates verified against `trust_anchors` (and required or not as `client_auth`
    /// says), ALPN `h2` advertised while a client that offers no ALPN is still accepted (the
    /// proxy's control-plane clients offer none and speak HTTP/2, spec Z.5). The certificate
    /// follows reloads as with [`ServerTls::load`]; the trust anchors do not.
    ///
    /// A client that presents no certificate when one is required fails with
    /// [`rustls::Error::NoCertificatesPresented`]; one whose certificate does not verify (self
    /// signed, unknown issuer, expired, not a client certificate) with
    /// [`rustls::Error::InvalidCertificate`]. Both send the client a TLS alert.
    pub fn load_mtls(
        files: &TlsFiles,
        trust_anchors: &TrustAnchors,
        client_auth: ClientAuth,
    ) -> Result<Self, TlsError> {
        let builder =
            WebPkiClientVerifier::builder_with_provider(trust_anchors.roots.clone(), provider());
        let builder = match client_auth {
            ClientAuth::Required => builder,
            ClientAuth::Optional => builder.allow_unauthenticated(),
        };
        let verifier = builder.build().map_err(|e| TlsError::InvalidTrustAnchor {
            path: trust_anchors.path.clone(),
            reason: e.to_string(),
        })?;
        Self::build(
            files,
            &[&rustls::version::TLS13],
            Some(verifier),
            vec![b"h2".to_vec()],
        )
    }

    fn load_with_versions(
        files: &TlsFiles,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Result<Self, TlsError> {
        Self::build(files, versions, None, vec![b"http/1.1".to_vec()])
    }

    fn build(
        files: &TlsFiles,
        versions: &[&'static rustls::SupportedProtocolVersion],
        client_verifier: Option<Arc<dyn ClientCertVerifier>>,
        alpn_protocols: Vec<Vec<u8>>,
    ) -> Result<Self, TlsError> {
        let loaded = read(files)?;
        let resolver = Arc::new(Resolver {
            current: RwLock::new(loaded),
        });
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .map_err(TlsError::Config)?;
        let builder = match client_verifier {
            Some(verifier) => builder.with_client_cert_verifier(verifier),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(resolver.clone());
        // rustls refuses a client whose ALPN list shares nothing with this one, and accepts a
        // client that offers no ALPN at all.
        config.alpn_protocols = alpn_protocols;
        Ok(Self {
            files: files.clone(),
            resolver,
            config: Arc::new(config),
            reload_check: None,
        })
    }

    /// The same certificate, whose reloads (through this value and its clones made after)
    /// serve a new certificate only if `check` accepts its chain: otherwise [`Self::reload`]
    /// fails with [`TlsError::Refused`] and the previous certificate stays. The mtls-shim
    /// checks that a certificate is valid for its identity, as proxies do: one that is not
    /// would cut every proxy off.
    pub fn with_reload_check(
        mut self,
        check: impl Fn(&[CertificateDer<'static>]) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.reload_check = Some(Arc::new(check));
        self
    }

    /// The rustls configuration; its certificate follows reloads.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }

    /// The files the certificate is read from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// The certificate chain served now, leaf first.
    pub fn current_chain(&self) -> Vec<CertificateDer<'static>> {
        self.resolver.current().cert.clone()
    }

    /// Re-reads both files and serves their certificate if it changed and passes the reload
    /// check ([`Self::with_reload_check`]). On an error the previous certificate stays.
    pub fn reload(&self) -> Result<Reloaded, TlsError> {
        let certs_pem = read_file(&self.files.certs)?;
        let key_pem = read_file(&self.files.key)?;
        {
            let current = self
                .resolver
                .current
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if current.certs_pem == certs_pem && current.key_pem == key_pem {
                return Ok(Reloaded::Unchanged);
            }
        }
        let loaded = parse(&self.files, certs_pem, key_pem)?;
        if let Some(check) = &self.reload_check {
            check(&loaded.key.cert).map_err(|reason| TlsError::Refused {
                certs: self.files.certs.clone(),
                reason,
            })?;
        }
        *self
            .resolver
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = loaded;
        Ok(Reloaded::Changed)
    }

    /// Reloads the certificate whenever the files' directories change (or every
    /// `RELOAD_POLL` when they cannot be watched), logging each outcome. Must be called
    /// within a tokio runtime.
    pub fn spawn_reloader(&self) -> Reloader {
        let changed = Arc::new(tokio::sync::Notify::new());
        let watcher = self.watch(changed.clone());
        let tls = self.clone();
        let task = tokio::spawn(async move {
            // Owned by the task: dropping the watcher ends the notifications.
            let _watcher = watcher;
            let polling = _watcher.is_none();
            loop {
                if polling {
                    tokio::time::sleep(RELOAD_POLL).await;
                } else {
                    changed.notified().await;
                    // Wait for the burst of events to end.
                    while tokio::time::timeout(RELOAD_DEBOUNCE, changed.notified())
                        .await
                        .is_ok()
                    {}
                }
                match tls.reload() {
                    Ok(Reloaded::Unchanged) => {}
                    Ok(Reloaded::Changed) => tracing::info!(
                        certs = %tls.files.certs.display(),
                        "reloaded the TLS certificate"
                    ),
                    Err(error) => tracing::warn!(
                        %error,
                        "cannot reload the TLS certificate; serving the previous one"
                    ),
                }
            }
        });
        Reloader { task }
    }

    /// Watches the directories of both files; `None` (logged) when that is impossible.
    fn watch(&self, changed: Arc<tokio::sync::Notify>) -> Option<notify::RecommendedWatcher> {
        use notify::Watcher;
        let mut dirs = vec![parent(&self.files.certs), parent(&self.files.key)];
        dirs.dedup();
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if res.is_ok_and(|event| is_content_change(&event.kind)) {
                changed.notify_one();
            }
        })
        .inspect_err(|error| {
            tracing::warn!(%error, "cannot watch the TLS files; polling them instead");
        })
        .ok()?;
        for dir in dirs {
            if let Err(error) = watcher.watch(&dir, notify::RecursiveMode::NonRecursive) {
                tracing::warn!(dir = %dir.display(), %error, "cannot watch the TLS files; polling them instead");
                return None;
            }
        }
        Some(watcher)
    }
}

// === impl TrustAnchors ===

impl TrustAnchors {
    /// Reads every PEM certificate in `path` as a trust anchor. Errors name the file: it
    /// cannot be read, holds no certificate, or holds one that cannot be an anchor.
    pub fn load(path: &Path) -> Result<Self, TlsError> {
        let pem = read_file(path)?;
        let invalid = |reason: String| TlsError::InvalidTrustAnchor {
            path: path.to_path_buf(),
            reason,
        };
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(e.to_string()))?;
        if certs.is_empty() {
            return Err(TlsError::NoTrustAnchor {
                path: path.to_path_buf(),
            });
        }
        let mut roots = RootCertStore::empty();
        for cert in certs {
            roots.add(cert).map_err(|e| invalid(e.to_string()))?;
        }
        Ok(Self {
            path: path.to_path_buf(),
            roots: Arc::new(roots),
        })
    }

    /// The file the anchors were read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The anchors, for building verifiers.
    pub fn roots(&self) -> Arc<RootCertStore> {
        self.roots.clone()
    }
}

// === impl Reloader ===

impl Drop for Reloader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// === impl HttpsServer ===

impl HttpsServer {
    /// Binds `addr` (port 0 picks a free port, see [`HttpsServer::local_addr`]).
    pub async fn bind(addr: SocketAddr, tls: ServerTls) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        Ok(Self {
            listener,
            local_addr,
            tls,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves `router` to every client until `shutdown` resolves, reloading the certificate
    /// as its files change. Then stops accepting, lets open connections finish their current
    /// request (closing idle keep-alive connections), and returns once they are closed or
    /// [`DRAIN_TIMEOUT`] has passed.
    ///
    /// A failed handshake or connection concerns one client only: it is logged at debug level
    /// and the server goes on.
    pub async fn serve(self, router: Router, shutdown: impl Future<Output = ()> + Send) {
        let _reloader = self.tls.spawn_reloader();
        let acceptor = TlsAcceptor::from(self.tls.config());
        http::accept_until(self.listener, "HTTPS", shutdown, |tcp, peer, stop| {
            serve_connection(acceptor.clone(), tcp, peer, router.clone(), stop)
        })
        .await;
    }
}

// === impl BodyBudget ===

impl BodyBudget {
    /// A budget of `total` bytes of bodies (at least `per_body`, so that every body can be
    /// read) of at most `per_body` bytes each, and of `decoded` bytes of decoding.
    pub fn new(total: usize, per_body: usize, decoded: usize) -> Self {
        // tokio's semaphores count at most `usize::MAX >> 3` permits, and take `u32` at once.
        let max = (u32::MAX as usize).min(tokio::sync::Semaphore::MAX_PERMITS);
        let per_body = per_body.min(max);
        let total = total.max(per_body).min(tokio::sync::Semaphore::MAX_PERMITS);
        let decoded = decoded.clamp(1, max);
        Self {
            bytes: Arc::new(tokio::sync::Semaphore::new(total)),
            per_body,
            small: None,
            peers: Arc::default(),
            decoded: Arc::new(tokio::sync::Semaphore::new(decoded)),
            decoded_total: decoded,
            cheap_decoded: None,
        }
    }

    /// The same budget, with decodings of at most `max` bytes taking their share from a pool
    /// of their own of `total` bytes (at least `max`) rather than from the decoding budget:
    /// a review of a few KiB then never waits behind a costly review's share. Without it, the
    /// shares are handed out first come, first served, and an ordinary review waited 2.5 s
    /// behind a 953 KB ServiceProfile that waited for room (newcomer finding).
    pub fn with_cheap_decoding(mut self, max: usize, total: usize) -> Self {
        let max = max.min(self.decoded_total);
        let total = total.max(max).clamp(
            1,
            (u32::MAX as usize).min(tokio::sync::Semaphore::MAX_PERMITS),
        );
        self.cheap_decoded = Some((max, Arc::new(tokio::sync::Semaphore::new(total))));
        self
    }

    /// The same budget, with the bodies that declare at most `max` bytes taking their share
    /// from a pool of their own of `total` bytes (at least `max`) rather than from the
    /// budget's: larger bodies waiting for room, or stalled while they hold it, then never
    /// hold up the small ones. Without it, clients that declared 10 MiB and stalled after a
    /// few bytes kept the API server's reviews of a few KiB waiting up to 9.5 s, when the API
    /// server gives up at 10 s. A body that declares no length is not small.
    pub fn with_small_bodies(mut self, max: usize, total: usize) -> Self {
        let max = max.min(self.per_body);
        let total = total.max(max).min(tokio::sync::Semaphore::MAX_PERMITS);
        self.small = Some((max, Arc::new(tokio::sync::Semaphore::new(total))));
        self
    }

    /// Reads a body of at most the per-body limit, as [`read_body`] does, once its size fits in
    /// the budget; one sent from `peer` (the client's address, [`PeerAddr`]) also waits for one
    /// of that address's [`BODIES_PER_PEER`] turns, which it gives back once read: a review
    /// being judged holds its share of the budget, not its turn, or slow reviews from the API
    /// server, every review's one address, would keep its others from being read.
    ///
    /// Errors: those of [`read_body`], [`BodyError::Timeout`] when the body has not arrived
    /// within [`BODY_READ_TIMEOUT`] (waiting for room included), and [`BodyError::TooSlow`]
    /// when it held its share longer than [`body_hold_time`].
    pub async fn read(
        &self,
        peer: Option<IpAddr>,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<HeldBody, BodyError> {
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > self.per_body as u64) {
            return Err(BodyError::TooLarge {
                limit: self.per_body,
            });
        }
        let limit = self.per_body;
        let read = async {
            let mut frames = body.into_data_stream();
            let Some(first) = frames.next().await else {
                return Ok(HeldBody {
                    bytes: Bytes::new(),
                    _share: None,
                });
            };
            let turn = match peer {
                Some(ip) => Some(
                    self.peer_turns(ip)
                        .acquire_owned()
                        .await
                        // A peer's semaphore is never closed.
                        .map_err(|_| BodyError::Timeout)?,
                ),
                None => None,
            };
            // The whole declared size at once, when the body starts to arrive: taken a part
            // at a time, two bodies that together overflow the budget would each wait for
            // what the other holds.
            let size = declared.map_or(limit, |len| len as usize);
            let pool = match &self.small {
                Some((max, small)) if declared.is_some() && size <= *max => small,
                _ => &self.bytes,
            };
            let share = pool
                .clone()
                // At most the per-body limit: fits in `u32` (see `new`).
                .acquire_many_owned(size as u32)
                .await
                // The budget's semaphore is never closed.
                .map_err(|_| BodyError::Timeout)?;
            let rest = futures::stream::once(async { first }).chain(frames);
            let allowed = body_hold_time(size);
            let bytes =
                tokio::time::timeout(allowed, read_body(headers, Body::from_stream(rest), limit))
                    .await
                    .map_err(|_| BodyError::TooSlow { size, allowed })??;
            drop(turn);
            Ok(HeldBody {
                bytes,
                _share: Some(share),
            })
        };
        tokio::time::timeout(BODY_READ_TIMEOUT, read)
            .await
            .map_err(|_| BodyError::Timeout)?
    }

    /// The turns of the bodies sent from `ip`. Entries nobody holds or waits for (only the map
    /// refers to them) are dropped once the map has 64 or more.
    fn peer_turns(&self, ip: IpAddr) -> Arc<tokio::sync::Semaphore> {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        if peers.len() >= 64 {
            peers.retain(|_, turns| Arc::strong_count(turns) > 1);
        }
        peers
            .entry(ip)
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(BODIES_PER_PEER)))
            .clone()
    }

    /// Waits until `cost` bytes of decoding (at most the whole decoding budget) fit beside the
    /// bodies being decoded, and holds them until the share drops: decoding a body can take
    /// many times its size (see `linkerd_admission::decode_cost`). A cost of at most the cheap
    /// pool's limit ([`Self::with_cheap_decoding`]) is taken from that pool.
    pub async fn decoding(&self, cost: usize) -> DecodingShare {
        self.decoding_from(true, cost).await
    }

    /// [`Self::decoding`], from the cheap pool only when `cheap_pool` allows it: a cheap review
    /// judged again among the costly ones takes its share from theirs.
    async fn decoding_from(&self, cheap_pool: bool, cost: usize) -> DecodingShare {
        let pool = match &self.cheap_decoded {
            Some((max, cheap)) if cheap_pool && cost <= *max => cheap,
            _ => &self.decoded,
        };
        let cost = cost.clamp(1, self.decoded_total) as u32;
        let share = pool
            .clone()
            .acquire_many_owned(cost)
            .await
            .expect("the decoding semaphore is never closed");
        DecodingShare { _share: share }
    }

    /// Bytes of the body budget no body holds now (not counting the small bodies' pool).
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    /// Bytes of the small bodies' pool ([`Self::with_small_bodies`]) no body holds now; 0
    /// without one.
    pub fn small_available(&self) -> usize {
        self.small
            .as_ref()
            .map_or(0, |(_, s)| s.available_permits())
    }

    /// Bytes of the decoding budget no decoding holds now (not counting the cheap pool).
    pub fn decoding_available(&self) -> usize {
        self.decoded.available_permits()
    }

    /// Bytes of the cheap decodings' pool ([`Self::with_cheap_decoding`]) no decoding holds
    /// now; 0 without one.
    pub fn cheap_decoding_available(&self) -> usize {
        self.cheap_decoded
            .as_ref()
            .map_or(0, |(_, s)| s.available_permits())
    }
}

impl std::ops::Deref for HeldBody {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Reads a request body of at most `limit` bytes. A body whose `content-length` is larger is
/// refused before any of it is read, so that no client makes the server buffer `limit` bytes
/// only to refuse them; what the client goes on sending is discarded when the connection
/// closes (see the module docs).
///
/// Errors: [`BodyError::TooLarge`] over the limit, [`BodyError::Read`] when the body breaks
/// off.
pub async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(BodyError::TooLarge { limit });
    }
    // Preallocated from the declared length (at most the limit), else grown as read.
    let mut read = Vec::with_capacity(declared.map_or(0, |len| len as usize));
    let mut frames = body.into_data_stream();
    while let Some(frame) = frames.next().await {
        let frame = frame?;
        if read.len() + frame.len() > limit {
            return Err(BodyError::TooLarge { limit });
        }
        read.extend_from_slice(&frame);
    }
    Ok(Bytes::from(read))
}

async fn serve_connection(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
    router: Router,
    stop: watch::Receiver<bool>,
) {
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    // Handlers learn the client's address from the request ([`PeerAddr`]).
    let router = router.layer(axum::Extension(PeerAddr(peer)));
    // Not hyper's shutdown of the stream, which would close it at once: `linger` does.
    match http::drive(tls, router, HEADER_READ_TIMEOUT, stop).await {
        Ok(tls) => linger(tls).await,
        Err(error) => tracing::debug!(%peer, %error, "HTTPS connection failed"),
    }
}

/// Closes a connection whose answers are all written: `close_notify` and FIN, then what the
/// client still sends is read and dropped (undecrypted) until it closes or [`LINGER_TIMEOUT`]
/// passes. See the module docs for why.
async fn linger(mut tls: tokio_rustls::server::TlsStream<TcpStream>) {
    if tls.shutdown().await.is_err() {
        // The client is gone.
        return;
    }
    let (mut tcp, _) = tls.into_inner();
    let mut discard = vec![0; 16 * 1024];
    let _ = tokio::time::timeout(LINGER_TIMEOUT, async {
        while let Ok(1..) = tcp.read(&mut discard).await {}
    })
    .await;
}

// === impl Resolver ===

impl Resolver {
    fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .key
            .clone()
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The `ring` provider, as kube's client uses.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        path: path.to_path_buf(),
        error,
    })
}

fn read(files: &TlsFiles) -> Result<Loaded, TlsError> {
    let certs_pem = read_file(&files.certs)?;
    let key_pem = read_file(&files.key)?;
    parse(files, certs_pem, key_pem)
}

fn parse(files: &TlsFiles, certs_pem: Vec<u8>, key_pem: Vec<u8>) -> Result<Loaded, TlsError> {
    let chain = CertificateDer::pem_slice_iter(&certs_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::InvalidCertificate {
            path: files.certs.clone(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: files.certs.clone(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
            path: files.key.clone(),
        },
        e => TlsError::InvalidKey {
            path: files.key.clone(),
            reason: e.to_string(),
        },
    })?;
    let key = CertifiedKey::from_der(chain, key, &provider()).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => TlsError::Mismatch {
            certs: files.certs.clone(),
            key: files.key.clone(),
            reason: e.to_string(),
        },
        rustls::Error::InvalidCertificate(_) => TlsError::InvalidCertificate {
            path: files.certs.clone(),
            reason: e.to_string(),
        },
        e => TlsError::InvalidKey {
            path: files.key.clone(),
            reason: e.to_string(),
        },
    })?;
    Ok(Loaded {
        key: Arc::new(key),
        certs_pem,
        key_pem,
    })
}

/// The directory to watch for a file: its parent, or `.` for a bare file name.
fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Whether a file event may have changed contents (our own reads must not trigger reloads).
fn is_content_change(kind: &notify::EventKind) -> bool {
    use notify::event::{EventKind, ModifyKind};
    match kind {
        EventKind::Access(_) | EventKind::Modify(ModifyKind::Metadata(_)) | EventKind::Other => {
            false
        }
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) | EventKind::Any => true,
    }
}
