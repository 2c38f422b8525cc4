//! What the watch streams of a server hold and sent: the stream registry behind the
//! introspection API (`proto/introspection.proto`), and the metrics that show whether the
//! streams keep up with the index.
//!
//! A server opens a [`StreamRecord`] for each watch stream it serves ([`StreamRegistry::open`]
//! and its variants for streams that follow a topic, or several that the stream itself
//! tracks) and tells it what it wrote ([`StreamRecord::sent`]) and which view of its topic it
//! has written out ([`StreamRecord::caught_up`]). The record goes when the stream ends. From the
//! records the registry answers [`StreamRegistry::list`] and [`StreamRegistry::get`], and it
//! exports:
//!
//! - `stream_convergence_seconds{api}`: histogram of the time from the index seeing the change
//!   (a watch event, a state-directory read) to a stream writing the message the change
//!   causes, one observation per stream per change it sends (buckets 1 ms to 60 s). The
//!   first message of a stream is not a change and is not observed.
//! - `streams_behind{api}`: gauge of the open streams with a topic (their one, or one of those
//!   they follow) holding a newer view than they have written out (computed when scraped).
//!
//! Upstream has neither metric; these names are the project's (README, "Metrics").
//!
//! A record costs its stream one short, uncontended lock per message, and the registry's lock
//! once when the stream opens and once when it closes.

use parking_lot::Mutex;
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric},
    metrics::{family::Family, gauge::ConstGauge, histogram::Histogram},
    registry::Registry,
};
use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Instant, SystemTime, UNIX_EPOCH},
};

mod service;

pub use self::service::{IntrospectionService, serve};

/// The APIs whose streams are recorded, as [`StreamMeta::api`] names them.
pub const APIS: [&str; 4] = ["Get", "GetProfile", "WatchPort", "Watch"];

/// Buckets of `stream_convergence_seconds`, in seconds: 1 ms to 60 s.
const CONVERGENCE_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The open watch streams of one server, and their metrics. Cheap to clone; every clone sees
/// the same streams.
#[derive(Clone, Debug)]
pub struct StreamRegistry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The APIs whose `streams_behind` series are there even with no stream open: the
    /// server's ([`StreamRegistry::register`]), or all of [`APIS`].
    apis: Vec<&'static str>,
    next_id: AtomicU64,
    streams: Mutex<BTreeMap<u64, Arc<Entry<dyn Progress>>>>,
    convergence: Family<ApiLabels, Histogram, fn() -> Histogram>,
}

/// The `api` label of the stream metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    pub api: &'static str,
}

/// What a stream is, as its request says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamMeta {
    /// One of [`APIS`].
    pub api: &'static str,
    /// The TCP peer (the mtls-shim's loopback address when the shim relays).
    pub peer: Option<SocketAddr>,
    /// The client's mesh identity, when the connection carries it (the mtls-shim does not
    /// forward it: it relays bytes).
    pub client_identity: Option<String>,
    /// What the stream watches: a path, `namespace/pod port N` (a `WatchPort`), an authority.
    pub target: String,
    /// The client pod, `namespace/name`, when the request names it.
    pub pod: Option<String>,
    /// The request's context token, verbatim.
    pub context_token: String,
}

/// One stream, as the introspection API shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamSummary {
    pub id: u64,
    pub meta: StreamMeta,
    pub opened_at: SystemTime,
    pub messages_sent: u64,
    pub last_sent_at: Option<SystemTime>,
    pub behind: bool,
}

/// A proxy API message a stream sent, encoded when asked for: `type_name` is its protobuf
/// name (`io.linkerd.proxy.destination.Update`, ...).
pub struct LastSent {
    pub type_name: &'static str,
    encode: Box<dyn Fn() -> Vec<u8> + Send + Sync>,
}

/// A proxy API message's protobuf name and its encoding.
pub type EncodedMessage = (&'static str, Vec<u8>);

/// The filters of [`StreamRegistry::list`]; each unset one matches every stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamFilter {
    pub api: Option<String>,
    pub pod: Option<String>,
    pub peer_ip: Option<IpAddr>,
    pub target_contains: Option<String>,
    pub behind_only: bool,
}

/// A stream's record, shared by the stream and the registry; `P` is its progress ([`NoTopic`],
/// a [`TopicProgress`] or a [`SelfJudged`]), last so that one allocation holds both.
#[derive(Debug)]
struct Entry<P: ?Sized> {
    meta: PackedMeta,
    /// Unix milliseconds: what the introspection API shows.
    opened_at_ms: u64,
    sent: SentCounts,
    progress: P,
}

/// The most of each [`StreamMeta`] string an entry keeps, in bytes: a longer one is cut at a
/// character boundary and ends with [`CUT`]. A real target or context token is well under it
/// (an authority is at most 259 bytes); the request itself may carry 64 KiB
/// ([`crate::grpc::MAX_REQUEST_BYTES`]), which a stream would otherwise hold for its life and
/// the introspection API would send back.
pub const MAX_META_BYTES: usize = 512;

/// What ends a [`StreamMeta`] string cut to [`MAX_META_BYTES`].
pub const CUT: &str = "…";

/// A [`StreamMeta`] as its entry keeps it for the stream's life: the strings, each at most
/// [`MAX_META_BYTES`], in one allocation (a `WatchPort` stream's two strings and their
/// `String`s cost 100 bytes more), the API as its place in [`APIS`] and the peer in 19
/// bytes. 48 bytes, against 88 with the API's name, a `SocketAddr` and `u32` ends: with the
/// entry's other fields, a `WatchPort` stream's entry then fits glibc's 128-byte chunks
/// (with its ID in the [`StreamRecord`]) rather than its 192-byte ones.
#[derive(Debug)]
struct PackedMeta {
    /// The index of [`StreamMeta::api`] in [`APIS`].
    api: u8,
    peer: PackedPeer,
    /// `target`, `pod`, `context_token` and `client_identity`, one after the other.
    text: Box<str>,
    /// Where each of the four ends in `text`: each is at most [`MAX_META_BYTES`] and [`CUT`],
    /// so four of them end well below `u16::MAX`.
    ends: [u16; 4],
    /// Whether `pod` and `client_identity` are set (to tell `Some("")` from `None`).
    has_pod: bool,
    has_client_identity: bool,
    /// When not 0, `pod` is this many bytes at the start of `target` (`namespace/pod port N`),
    /// and its own part of `text` is empty: kept once, a `WatchPort` stream's text is about 30
    /// bytes shorter (for a typical pod name, glibc's 48-byte chunks rather than its 80-byte
    /// ones).
    pod_in_target: u16,
}

/// Messages a stream wrote, and when it wrote the last one (Unix milliseconds, 0 before the
/// first): two atomics rather than a lock, as tens of thousands of entries hold them.
#[derive(Debug, Default)]
struct SentCounts {
    count: AtomicU64,
    at_ms: AtomicU64,
}

/// Whether a stream has written out the newest view of its topic, and the last message it sent:
/// the one it reported ([`StreamRecord::sent`]), or the translation of the view it wrote out.
trait Progress: Send + Sync + std::fmt::Debug {
    fn behind(&self) -> bool;
    fn last_message(&self) -> Option<EncodedMessage>;
    /// Keeps `last` as the last message (a stream whose messages are its views' translations
    /// reports none).
    fn keep_last(&self, last: LastSent);
}

/// A [`Progress`] that a stream of views of `V` tells which view it wrote out.
trait Follows<V>: Progress {
    /// `None` for a stream that follows no single topic.
    fn written(&self) -> Option<&Mutex<Option<Arc<V>>>>;
}

/// The progress of a stream that follows no single topic: never behind; the last message it
/// reported.
#[derive(Debug, Default)]
struct NoTopic(Reported);

/// The progress of a stream that follows several topics and tells itself whether it has
/// written out their newest views: `behind` asks it (a closure over what it shares with the
/// stream, held inline as [`TopicProgress`]'s); the last message it reported.
struct SelfJudged<F> {
    behind: F,
    last: Reported,
}

/// How to read the stream's topic without advancing the stream (`current`, a closure over
/// the topic's shared state), the view the stream last wrote out, and its last message (`E`:
/// the one it [`Reported`], or a [`ViewEncoder`] of the view written out). Closures are held
/// inline: a boxed one costs each of tens of thousands of streams an allocation.
struct TopicProgress<V, R, E> {
    current: R,
    written: Mutex<Option<Arc<V>>>,
    last: E,
}

/// How a [`TopicProgress`] shows the last message: [`Reported`] or a [`ViewEncoder`].
trait LastMessage<V>: Send + Sync {
    fn last(&self, written: Option<&Arc<V>>) -> Option<EncodedMessage>;
    fn keep(&self, last: LastSent);
}

/// The last message the stream reported ([`StreamRecord::sent`]).
#[derive(Default)]
struct Reported(Mutex<Option<LastSent>>);

/// The stream's messages are its views' translations: the last one is made again from the
/// view written out when the introspection API asks, so the stream holds no message.
struct ViewEncoder<F>(F);

/// A stream's entry in its registry, removed when dropped (the stream ended).
#[derive(Debug)]
pub struct StreamRecord<V = ()> {
    /// Kept here and as the registry's key, not in the entry: 8 bytes fewer put a `WatchPort`
    /// stream's entry in glibc's 128-byte chunks rather than its 144-byte ones, and the
    /// stream's body stays in its chunk.
    id: u64,
    entry: Arc<Entry<dyn Follows<V>>>,
    registry: StreamRegistry,
}

// === impl StreamRegistry ===

impl Default for StreamRegistry {
    fn default() -> Self {
        Self::new()
    }
}

fn convergence_histogram() -> Histogram {
    Histogram::new(CONVERGENCE_BUCKETS)
}

impl StreamRegistry {
    /// A registry of a server of every API, whose metrics are registered nowhere (tests, tools).
    pub fn new() -> Self {
        Self::serving(&APIS)
    }

    /// A registry of a server of `apis` (of [`APIS`]), whose metrics are registered nowhere
    /// (tests): a listing of another API's streams is refused, as [`Self::serves`] says.
    pub fn serving(apis: &[&'static str]) -> Self {
        Self {
            inner: Arc::new(Inner {
                apis: apis.to_vec(),
                next_id: AtomicU64::new(1),
                streams: Mutex::default(),
                convergence: Family::new_with_constructor(convergence_histogram),
            }),
        }
    }

    /// Whether this server serves streams of `api`: a `ListStreams` of another API's streams
    /// asked the wrong server (destination serves `Get` and `GetProfile`, policy-controller
    /// `WatchPort` and `Watch`), which an empty listing would not say.
    pub fn serves(&self, api: &str) -> bool {
        self.inner.apis.contains(&api)
    }

    /// The APIs whose streams this server serves, in the order given.
    pub fn apis(&self) -> &[&'static str] {
        &self.inner.apis
    }

    /// A registry whose `stream_convergence_seconds` and `streams_behind` are in `registry`,
    /// with the histogram of each of `apis` (the server's, of [`APIS`]) there from the start,
    /// empty: a series that appears only with its first observation hides it from `increase()`.
    pub fn register(registry: &mut Registry, apis: &[&'static str]) -> Self {
        let this = Self::serving(apis);
        for api in apis {
            this.convergence(api);
        }
        registry.register(
            "stream_convergence_seconds",
            "Time from the index seeing a change to a watch stream writing the message it causes",
            this.inner.convergence.clone(),
        );
        registry.register_collector(Box::new(BehindCollector(this.clone())));
        this
    }

    /// Records a new stream of `meta` that follows no single topic (never shown behind); it
    /// reports its messages ([`StreamRecord::sent`]). Keep the record as long as the stream.
    pub fn open(&self, meta: StreamMeta) -> StreamRecord {
        self.insert(meta, NoTopic::default())
    }

    /// Records a new stream of `meta` following several topics (a multicluster `Get`: its
    /// Service's, its members', the linked clusters), which says itself whether it is behind:
    /// `behind` is true while one of them holds a newer view than the stream has written out,
    /// and before its first message. It reports its messages ([`StreamRecord::sent`]); its
    /// [`StreamRecord::caught_up`] keeps no view. Keep the record as long as the stream.
    pub fn open_following_several(
        &self,
        meta: StreamMeta,
        behind: impl Fn() -> bool + Send + Sync + 'static,
    ) -> StreamRecord {
        self.insert(
            meta,
            SelfJudged {
                behind,
                last: Reported::default(),
            },
        )
    }

    /// Records a new stream of `meta` following the topic whose current view `current` reads
    /// (the index's `Receiver::current_view`); it reports its messages
    /// ([`StreamRecord::sent`]). Keep the record as long as the stream.
    pub fn open_following<V: Send + Sync + 'static>(
        &self,
        meta: StreamMeta,
        current: impl Fn() -> Arc<V> + Send + Sync + 'static,
    ) -> StreamRecord<V> {
        self.insert(meta, TopicProgress::new(current, Reported::default()))
    }

    /// Records a new stream of `meta` whose messages are its topic's views translated (a
    /// policy watch): `current` reads the topic's current view, and the last message shown is
    /// `encode` of the view the stream last wrote out ([`StreamRecord::caught_up`]), made
    /// when asked for. Keep the record as long as the stream.
    pub fn open_views<V: Send + Sync + 'static>(
        &self,
        meta: StreamMeta,
        current: impl Fn() -> Arc<V> + Send + Sync + 'static,
        encode: impl Fn(&V) -> EncodedMessage + Send + Sync + 'static,
    ) -> StreamRecord<V> {
        self.insert(meta, TopicProgress::new(current, ViewEncoder(encode)))
    }

    fn insert<V, P: Follows<V> + 'static>(&self, meta: StreamMeta, progress: P) -> StreamRecord<V> {
        let meta = PackedMeta::new(meta);
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed).max(1);
        let entry = Arc::new(Entry {
            meta,
            opened_at_ms: u64::try_from(unix_ms(SystemTime::now())).unwrap_or(0),
            sent: SentCounts::default(),
            progress,
        });
        self.inner.streams.lock().insert(id, entry.clone());
        StreamRecord {
            id,
            entry,
            registry: self.clone(),
        }
    }

    /// The open streams that pass `filter`, oldest first.
    pub fn list(&self, filter: &StreamFilter) -> Vec<StreamSummary> {
        let entries: Vec<(u64, Arc<Entry<dyn Progress>>)> = self
            .inner
            .streams
            .lock()
            .iter()
            .map(|(id, e)| (*id, e.clone()))
            .collect();
        entries
            .iter()
            .filter(|(_, e)| filter.matches(&e.meta))
            .map(|(id, e)| e.summary(*id))
            .filter(|s| !filter.behind_only || s.behind)
            .collect()
    }

    /// Stream `id` and what it last sent (`None` before its first message); `None` when no
    /// open stream has that ID.
    pub fn get(&self, id: u64) -> Option<(StreamSummary, Option<EncodedMessage>)> {
        let entry = self.inner.streams.lock().get(&id).cloned()?;
        let summary = entry.summary(id);
        let last = entry.progress.last_message();
        Some((summary, last))
    }

    /// The number of open streams.
    pub fn len(&self) -> usize {
        self.inner.streams.lock().len()
    }

    /// Whether no stream is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `stream_convergence_seconds` histogram of `api`.
    pub fn convergence(&self, api: &'static str) -> Histogram {
        self.inner
            .convergence
            .get_or_create(&ApiLabels { api })
            .clone()
    }

    /// Open streams that are behind, by API: each API the registry serves (0 with none behind),
    /// and the API of each open stream.
    pub fn behind_counts(&self) -> BTreeMap<&'static str, i64> {
        let entries: Vec<Arc<Entry<dyn Progress>>> =
            self.inner.streams.lock().values().cloned().collect();
        let mut counts: BTreeMap<&'static str, i64> =
            self.inner.apis.iter().map(|a| (*a, 0)).collect();
        for entry in entries {
            let count = counts.entry(entry.meta.api()).or_default();
            *count += i64::from(entry.behind());
        }
        counts
    }
}

// === impl Entry ===

impl Entry<dyn Progress> {
    fn behind(&self) -> bool {
        self.progress.behind()
    }

    fn summary(&self, id: u64) -> StreamSummary {
        let messages_sent = self.sent.count.load(Ordering::Relaxed);
        let last_sent_at = match self.sent.at_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(UNIX_EPOCH + std::time::Duration::from_millis(ms)),
        };
        StreamSummary {
            id,
            meta: self.meta.unpack(),
            opened_at: UNIX_EPOCH + std::time::Duration::from_millis(self.opened_at_ms),
            messages_sent,
            last_sent_at,
            behind: self.behind(),
        }
    }
}

impl std::fmt::Debug for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let last = self.0.lock();
        f.debug_tuple("Reported")
            .field(&last.as_ref().map(|l| l.type_name))
            .finish()
    }
}

// === impl NoTopic ===

impl Progress for NoTopic {
    fn behind(&self) -> bool {
        false
    }

    fn last_message(&self) -> Option<EncodedMessage> {
        LastMessage::<()>::last(&self.0, None)
    }

    fn keep_last(&self, last: LastSent) {
        LastMessage::<()>::keep(&self.0, last)
    }
}

impl<V> Follows<V> for NoTopic {
    fn written(&self) -> Option<&Mutex<Option<Arc<V>>>> {
        None
    }
}

// === impl SelfJudged ===

impl<F: Fn() -> bool + Send + Sync> Progress for SelfJudged<F> {
    fn behind(&self) -> bool {
        (self.behind)()
    }

    fn last_message(&self) -> Option<EncodedMessage> {
        LastMessage::<()>::last(&self.last, None)
    }

    fn keep_last(&self, last: LastSent) {
        LastMessage::<()>::keep(&self.last, last)
    }
}

impl<V, F: Fn() -> bool + Send + Sync> Follows<V> for SelfJudged<F> {
    /// None: the stream keeps what it wrote out itself.
    fn written(&self) -> Option<&Mutex<Option<Arc<V>>>> {
        None
    }
}

impl<F> std::fmt::Debug for SelfJudged<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelfJudged")
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

// === impl TopicProgress ===

impl<V, R, E> TopicProgress<V, R, E> {
    fn new(current: R, last: E) -> Self {
        Self {
            current,
            written: Mutex::new(None),
            last,
        }
    }
}

impl<V, R, E> Progress for TopicProgress<V, R, E>
where
    V: Send + Sync,
    R: Fn() -> Arc<V> + Send + Sync,
    E: LastMessage<V>,
{
    fn behind(&self) -> bool {
        let current = (self.current)();
        match &*self.written.lock() {
            Some(written) => !Arc::ptr_eq(written, &current),
            // Before its first message a stream is behind: it has a view to send.
            None => true,
        }
    }

    fn last_message(&self) -> Option<EncodedMessage> {
        let written = self.written.lock().clone();
        self.last.last(written.as_ref())
    }

    fn keep_last(&self, last: LastSent) {
        self.last.keep(last)
    }
}

impl<V, R, E> Follows<V> for TopicProgress<V, R, E>
where
    V: Send + Sync,
    R: Fn() -> Arc<V> + Send + Sync,
    E: LastMessage<V>,
{
    fn written(&self) -> Option<&Mutex<Option<Arc<V>>>> {
        Some(&self.written)
    }
}

impl<V> LastMessage<V> for Reported {
    fn last(&self, _: Option<&Arc<V>>) -> Option<EncodedMessage> {
        let last = self.0.lock();
        last.as_ref().map(|l| (l.type_name, (l.encode)()))
    }

    fn keep(&self, last: LastSent) {
        *self.0.lock() = Some(last);
    }
}

impl<V, F: Fn(&V) -> EncodedMessage + Send + Sync> LastMessage<V> for ViewEncoder<F> {
    fn last(&self, written: Option<&Arc<V>>) -> Option<EncodedMessage> {
        written.map(|view| (self.0)(view))
    }

    /// Never called: such a stream reports no message.
    fn keep(&self, _: LastSent) {}
}

impl<V, R, E> std::fmt::Debug for TopicProgress<V, R, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicProgress").finish_non_exhaustive()
    }
}

// === impl StreamRecord ===

impl<V> StreamRecord<V> {
    /// The stream's ID in the introspection API.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The stream wrote `messages` messages; `last`, if given, is what its client holds now.
    pub fn sent(&self, messages: u64, last: Option<LastSent>) {
        let sent = &self.entry.sent;
        sent.count.fetch_add(messages, Ordering::Relaxed);
        // At least 1: 0 means nothing sent yet.
        let now = u64::try_from(unix_ms(SystemTime::now()))
            .unwrap_or(0)
            .max(1);
        sent.at_ms.store(now, Ordering::Relaxed);
        if let Some(last) = last {
            self.entry.progress.keep_last(last);
        }
    }

    /// The stream has written out everything `view` causes. When it wrote something for it
    /// and the index saw the change at `seen`, the delay is observed in
    /// `stream_convergence_seconds`.
    pub fn caught_up(&self, view: &Arc<V>, wrote: bool, seen: Option<Instant>) {
        if let Some(written) = self.entry.progress.written() {
            *written.lock() = Some(view.clone());
        }
        if wrote && let Some(seen) = seen {
            self.observe(seen);
        }
    }

    /// Observes the delay since `seen` in `stream_convergence_seconds` (a stream without a
    /// single topic, which has no view to report).
    pub fn observe(&self, seen: Instant) {
        self.registry
            .convergence(self.entry.meta.api())
            .observe(seen.elapsed().as_secs_f64());
    }
}

impl<V> Drop for StreamRecord<V> {
    fn drop(&mut self) {
        self.registry.inner.streams.lock().remove(&self.id);
    }
}

// === impl LastSent ===

impl LastSent {
    /// `message`, encoded when asked for.
    pub fn message<M: prost::Message + Send + Sync + 'static>(
        type_name: &'static str,
        message: M,
    ) -> Self {
        Self::lazy(type_name, move || message.encode_to_vec())
    }

    /// The message `encode` makes when asked for (a whole endpoint set, made from the view
    /// the stream last sent from).
    pub fn lazy(
        type_name: &'static str,
        encode: impl Fn() -> Vec<u8> + Send + Sync + 'static,
    ) -> Self {
        Self {
            type_name,
            encode: Box::new(encode),
        }
    }
}

// === impl PackedMeta ===

impl PackedMeta {
    fn new(meta: StreamMeta) -> Self {
        let pod = meta.pod.as_deref().unwrap_or_default();
        // Only a whole pod name at the start of a target that is not cut.
        let pod_in_target =
            match meta.target.len() <= MAX_META_BYTES && meta.target.starts_with(pod) {
                true => u16::try_from(pod.len()).unwrap_or(0),
                false => 0,
            };
        let parts = [
            meta.target.as_str(),
            if pod_in_target > 0 { "" } else { pod },
            meta.context_token.as_str(),
            meta.client_identity.as_deref().unwrap_or_default(),
        ];
        let parts = parts.map(cut);
        let mut text = String::with_capacity(parts.iter().map(|(p, c)| p.len() + c.len()).sum());
        let mut ends = [0; 4];
        for ((part, cut), end) in parts.iter().zip(&mut ends) {
            text.push_str(part);
            text.push_str(cut);
            // At most four cut parts: far below `u16::MAX`.
            *end = u16::try_from(text.len()).unwrap_or(u16::MAX);
        }
        // `meta.api` is one of `APIS` (the servers name their own APIs).
        let api = APIS.iter().position(|api| *api == meta.api);
        debug_assert!(api.is_some(), "{} is not one of {APIS:?}", meta.api);
        Self {
            api: api.and_then(|i| u8::try_from(i).ok()).unwrap_or(u8::MAX),
            peer: PackedPeer::new(meta.peer),
            text: text.into_boxed_str(),
            ends,
            has_pod: meta.pod.is_some(),
            has_client_identity: meta.client_identity.is_some(),
            pod_in_target,
        }
    }

    /// The stream's API: one of [`APIS`] ("unknown" for a name that was not, which the
    /// servers never give).
    fn api(&self) -> &'static str {
        APIS.get(usize::from(self.api))
            .copied()
            .unwrap_or("unknown")
    }

    /// Part `i` of `text` (see [`Self::ends`]).
    fn part(&self, i: usize) -> &str {
        let start = i.checked_sub(1).map_or(0, |before| self.ends[before]) as usize;
        self.text
            .get(start..self.ends[i] as usize)
            .unwrap_or_default()
    }

    fn target(&self) -> &str {
        self.part(0)
    }

    fn pod(&self) -> Option<&str> {
        self.has_pod.then(|| match self.pod_in_target {
            0 => self.part(1),
            len => self.target().get(..usize::from(len)).unwrap_or_default(),
        })
    }

    fn unpack(&self) -> StreamMeta {
        StreamMeta {
            api: self.api(),
            peer: self.peer.get(),
            client_identity: self.has_client_identity.then(|| self.part(3).to_string()),
            target: self.target().to_string(),
            pod: self.pod().map(str::to_string),
            context_token: self.part(2).to_string(),
        }
    }
}

/// A stream's TCP peer in 19 bytes rather than an `Option<SocketAddr>`'s 32: the address
/// (an IPv4 one in the first four bytes), the port, and which family, if any. An IPv6 peer's
/// flow label and scope ID are dropped: the introspection API shows `address:port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PackedPeer {
    ip: [u8; 16],
    port: [u8; 2],
    /// 0: no peer; 4 or 6: its IP family.
    family: u8,
}

impl PackedPeer {
    fn new(peer: Option<SocketAddr>) -> Self {
        let mut ip = [0; 16];
        let family = match peer.map(|p| p.ip()) {
            None => 0,
            Some(IpAddr::V4(v4)) => {
                ip[..4].copy_from_slice(&v4.octets());
                4
            }
            Some(IpAddr::V6(v6)) => {
                ip = v6.octets();
                6
            }
        };
        Self {
            ip,
            port: peer.map_or(0, |p| p.port()).to_be_bytes(),
            family,
        }
    }

    fn get(&self) -> Option<SocketAddr> {
        let ip = match self.family {
            4 => IpAddr::from([self.ip[0], self.ip[1], self.ip[2], self.ip[3]]),
            6 => IpAddr::from(self.ip),
            _ => return None,
        };
        Some(SocketAddr::new(ip, u16::from_be_bytes(self.port)))
    }
}

/// `part`, or its first [`MAX_META_BYTES`] (less [`CUT`], at a character boundary) and `CUT`.
fn cut(part: &str) -> (&str, &'static str) {
    if part.len() <= MAX_META_BYTES {
        return (part, "");
    }
    (
        &part[..part.floor_char_boundary(MAX_META_BYTES - CUT.len())],
        CUT,
    )
}

// === impl StreamFilter ===

impl StreamFilter {
    fn matches(&self, meta: &PackedMeta) -> bool {
        self.api.as_deref().is_none_or(|api| api == meta.api())
            && self
                .pod
                .as_deref()
                .is_none_or(|pod| meta.pod() == Some(pod))
            && self
                .peer_ip
                .is_none_or(|ip| meta.peer.get().is_some_and(|p| p.ip() == ip))
            && self
                .target_contains
                .as_deref()
                .is_none_or(|t| meta.target().contains(t))
    }
}

/// `streams_behind{api}`, counted when scraped.
#[derive(Debug)]
struct BehindCollector(StreamRegistry);

impl Collector for BehindCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let counts = self.0.behind_counts();
        let mut metric = encoder.encode_descriptor(
            "streams_behind",
            "Open watch streams with a topic holding a newer view than they have written out",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (api, count) in counts {
            let gauge = ConstGauge::new(count);
            gauge.encode(metric.encode_family(&ApiLabels { api })?)?;
        }
        Ok(())
    }
}

/// Binds `addr` and serves the introspection API of `streams` on it until `shutdown`, in a
/// task of its own. A bind failure is logged, not returned: the API is for operators, and a
/// taken port must not stop the server from serving proxies. Returns the bound address.
pub async fn spawn(
    addr: SocketAddr,
    streams: StreamRegistry,
    shutdown: crate::shutdown::Shutdown,
) -> Option<SocketAddr> {
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%addr, %error, "cannot listen on --introspection-addr; serving without the introspection API");
            return None;
        }
    };
    let local = listener.local_addr().ok()?;
    tracing::info!(addr = %local, "serving the introspection API");
    tokio::spawn(serve(listener, streams, shutdown.signaled()));
    Some(local)
}

/// Milliseconds since the Unix epoch (0 for times before it).
pub fn unix_ms(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
