//! [`Watches`]: one watch per kind, feeding every index that keeps the kind (upstream's index
//! list), and the readiness of the whole.
//!
//! Each index declares the kinds it reads ([`Sink`]); a kind read by several indexes (Services
//! by discovery, outbound policy and route status) is watched once, each object is decoded
//! once, and the indexes get the same `Arc` of it, each applying it under its own lock.

use parking_lot::Mutex;
use std::{
    any::{Any, TypeId},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};
use tokio::sync::watch;

use crate::{
    metrics::IndexMetrics,
    model::{DecodeError, Kind, decode_json, decode_value},
    source::{AnyObject, ClusterSource, Event, KindFeed, kube::KubeSource, type_key},
};

/// An index that keeps objects of kind `K`.
pub trait Sink<K: Kind>: Send + Sync + 'static {
    /// Applies `events` in order, under one hold of the index's lock, then republishes the
    /// views they change, once: a batch (one read of a state file, a relist) reaches streams
    /// whole. Returns how many objects of the kind the index holds afterwards (the kind's
    /// `*_cache_size` gauge), an O(1) count.
    ///
    /// An object the index cannot use is logged, counted and skipped by the index itself; it
    /// never affects the others.
    fn apply(&self, events: &[Event<Arc<K::Object>>]) -> usize;
}

/// The kinds to watch and the indexes each feeds, until [`Watches::start`].
#[derive(Default)]
pub struct Watches {
    kinds: Vec<Box<dyn PendingKind>>,
    metrics: IndexMetrics,
}

/// A started set of watches: whether every kind has delivered its initial list, and the tasks
/// that keep watching.
pub struct Started {
    ready: watch::Receiver<bool>,
    readiness: Readiness,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Why a started set of watches is not ready yet: the kinds whose initial list has not been
/// applied, each with the last error its watch retried after (issue 19 item 3). A cheap handle
/// (one `Arc`) for the admin server's `/ready`; it never changes when ready is reported.
#[derive(Clone)]
pub struct Readiness {
    state: Arc<ReadinessState>,
}

/// The indexes of one kind, before the watches start.
struct KindSinks<K: Kind> {
    sinks: Vec<Arc<dyn Sink<K>>>,
    /// Each index's scope; the watch uses one only when every index asks for the same.
    scopes: Vec<WatchScope>,
}

/// Which objects of a kind an index needs, so that kube mode lists and watches no more:
/// a namespace, a label selector and a field selector (Kubernetes syntax), each `None` for
/// no restriction. Offline mode delivers every object: sinks still check what they receive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchScope {
    pub namespace: Option<String>,
    pub labels: Option<String>,
    pub fields: Option<String>,
}

/// One kind's watch: its indexes, and whether its initial list was delivered.
struct KindWatch<K: Kind> {
    sinks: Vec<Arc<dyn Sink<K>>>,
    scope: WatchScope,
    synced: AtomicBool,
    readiness: Arc<ReadinessState>,
    /// The kind's place in `readiness.kinds`.
    at: usize,
    metrics: IndexMetrics,
    type_key: (String, String),
}

/// The kinds that have not delivered their initial list yet.
struct ReadinessState {
    pending: AtomicUsize,
    ready: watch::Sender<bool>,
    /// Every kind, in the order added; read only to say why not ready.
    kinds: Mutex<Vec<KindStatus>>,
}

/// One kind as `/ready` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct KindStatus {
    /// `apiVersion/Kind`, as manifests name it: `v1/Pod`, `discovery.k8s.io/v1/EndpointSlice`.
    name: String,
    synced: bool,
    /// The last error the kind's watch hit before its initial list; cleared once synced.
    last_error: Option<String>,
}

/// How many pending kinds `/ready` names; the others are counted.
const REASON_KINDS: usize = 5;

/// How much of an error's text `/ready` keeps (a Status message can be long).
const REASON_ERROR_CHARS: usize = 300;

/// Where a kind's watch reports the errors it retries after (the `kube` source): they are kept
/// as the kind's last error until its initial list is applied.
#[derive(Clone)]
pub(crate) struct WatchErrors {
    readiness: Arc<ReadinessState>,
    at: usize,
}

trait PendingKind: Send {
    fn kind_id(&self) -> TypeId;
    fn as_any(&mut self) -> &mut dyn Any;
    fn as_any_ref(&self) -> &dyn Any;
    /// The kind's name in `/ready`'s reason (`apiVersion/Kind`).
    fn name(&self) -> String;
    fn start(
        self: Box<Self>,
        readiness: Arc<ReadinessState>,
        at: usize,
        metrics: IndexMetrics,
    ) -> Arc<dyn StartedKind>;
}

trait StartedKind: KindFeed {
    fn spawn_kube(self: Arc<Self>, source: &KubeSource) -> tokio::task::JoinHandle<()>;
}

// === impl Watches ===

impl Watches {
    /// No watches yet; invalid objects and cache sizes are counted in `metrics`.
    pub fn new(metrics: IndexMetrics) -> Self {
        Self {
            kinds: Vec::new(),
            metrics,
        }
    }

    /// Feeds kind `K` to `sink` (every object of the kind).
    pub fn add<K: Kind>(&mut self, sink: impl Sink<K>) -> &mut Self {
        self.add_selected::<K>(sink, None)
    }

    /// Feeds kind `K` to `sink`, which needs only the objects matching `label_selector` (a
    /// Kubernetes label selector, `linkerd.io/control-plane-ns` for meshed pods): in kube mode
    /// the kind is listed and watched with it when no other index needs more. The sink must
    /// still ignore objects the selector would not match (offline mode delivers them all).
    pub fn add_selected<K: Kind>(
        &mut self,
        sink: impl Sink<K>,
        label_selector: Option<&str>,
    ) -> &mut Self {
        self.add_scoped::<K>(
            sink,
            WatchScope {
                labels: label_selector.map(str::to_string),
                ..WatchScope::default()
            },
        )
    }

    /// Feeds kind `K` to `sink`, which needs only the objects in `scope` (the link Secrets of
    /// the control-plane namespace): in kube mode the kind is listed and watched in that scope
    /// when no other index needs more. The sink must still ignore objects outside it (offline
    /// mode delivers them all).
    pub fn add_scoped<K: Kind>(&mut self, sink: impl Sink<K>, scope: WatchScope) -> &mut Self {
        let id = TypeId::of::<K>();
        let kind = match self.kinds.iter_mut().position(|k| k.kind_id() == id) {
            Some(at) => &mut self.kinds[at],
            None => {
                self.kinds.push(Box::new(KindSinks::<K> {
                    sinks: Vec::new(),
                    scopes: Vec::new(),
                }));
                self.kinds.last_mut().expect("just pushed")
            }
        };
        if let Some(kind) = kind.as_any().downcast_mut::<KindSinks<K>>() {
            kind.sinks.push(Arc::new(sink));
            kind.scopes.push(scope);
        }
        self
    }

    /// Delivers `event` straight to the indexes of kind `K`, as a source does once it has
    /// decoded the objects: for tests, and tools that hold objects already. Nothing is counted
    /// and readiness is not tracked.
    pub fn deliver<K: Kind>(&self, event: Event<Arc<K::Object>>) {
        let id = TypeId::of::<K>();
        let Some(kind) = self.kinds.iter().find(|k| k.kind_id() == id) else {
            return;
        };
        if let Some(kind) = kind.as_any_ref().downcast_ref::<KindSinks<K>>() {
            let _seen = crate::topic::ChangeSeen::now();
            let events = [event];
            for sink in &kind.sinks {
                sink.apply(&events);
            }
        }
    }

    /// Decodes the objects of `event` (typed Kubernetes objects, as a manifest writes them)
    /// as a source does, and delivers it ([`Watches::deliver`]). Each is written out as JSON
    /// first, and k8s-openapi writes times to the second ([`Watches::apply_json`] keeps a
    /// fraction). An object that does not decode is logged and counted in
    /// `index_invalid_objects_total`, and left out (an `Apply` of it is dropped, or, for kinds
    /// whose invalid updates remove, becomes a `Delete`).
    pub fn apply<K: Kind + serde::Serialize>(&self, event: Event<K>) {
        let decode = |obj: &K| -> Option<Arc<K::Object>> {
            let document = match serde_json::to_value(obj) {
                Ok(document) => document,
                Err(error) => {
                    tracing::warn!(kind = K::LABEL, %error, "skipping object that does not serialize");
                    return None;
                }
            };
            match decode_value::<K>(&document) {
                Ok(object) => Some(Arc::new(object)),
                Err(error) => {
                    let meta = obj.meta();
                    tracing::warn!(kind = K::LABEL, namespace = ?meta.namespace, name = ?meta.name, %error, "skipping object");
                    self.metrics.invalid_object(K::LABEL);
                    None
                }
            }
        };
        let event = match event {
            Event::Apply(obj) => match decode(&obj) {
                Some(object) => Event::Apply(object),
                None if K::INVALID_REMOVES => Event::Delete(crate::model::ObjectRef {
                    namespace: obj.meta().namespace.clone().unwrap_or_default(),
                    name: obj.meta().name.clone().unwrap_or_default(),
                }),
                None => return,
            },
            Event::Delete(key) => Event::Delete(key),
            Event::Reset(objs) => Event::Reset(objs.iter().filter_map(decode).collect()),
        };
        self.deliver::<K>(event);
    }

    /// Decodes the object of kind `K` that the JSON text `json` defines, as a source decodes
    /// it (a time keeps its fraction of a second), and delivers its `Apply`. Errors,
    /// delivering nothing, when it does not decode.
    pub fn apply_json<K: Kind>(&self, json: &str) -> Result<(), crate::model::DecodeError> {
        let object = crate::model::decode_json::<K>(json)?;
        self.deliver::<K>(Event::Apply(Arc::new(object)));
        Ok(())
    }

    /// Starts watching every kind added, from `source`. In offline mode the state directory is
    /// read, and every kind's initial list delivered, before this returns; in kube mode the
    /// lists arrive later: [`Started::ready`] says when.
    pub async fn start(self, source: &ClusterSource) -> Started {
        let (ready, ready_rx) = watch::channel(self.kinds.is_empty());
        let statuses = self
            .kinds
            .iter()
            .map(|k| KindStatus {
                name: k.name(),
                synced: false,
                last_error: None,
            })
            .collect();
        let readiness = Arc::new(ReadinessState {
            pending: AtomicUsize::new(self.kinds.len()),
            ready,
            kinds: Mutex::new(statuses),
        });
        let kinds: Vec<Arc<dyn StartedKind>> = self
            .kinds
            .into_iter()
            .enumerate()
            .map(|(at, k)| k.start(readiness.clone(), at, self.metrics.clone()))
            .collect();
        let watched = matches!(source, ClusterSource::Kube(_));
        for kind in &kinds {
            self.metrics.expose_kind(kind.label(), watched);
        }
        let tasks = match source {
            ClusterSource::Kube(kube) => kinds.into_iter().map(|k| k.spawn_kube(kube)).collect(),
            ClusterSource::Offline(offline) => {
                let feeds = kinds.into_iter().map(|k| k as Arc<dyn KindFeed>).collect();
                vec![offline.start(feeds).await]
            }
        };
        Started {
            ready: ready_rx,
            readiness: Readiness { state: readiness },
            tasks,
        }
    }
}

// === impl Started ===

impl Started {
    /// Whether every kind has delivered its initial list; `/ready` reports this.
    pub fn ready(&self) -> watch::Receiver<bool> {
        self.ready.clone()
    }

    /// Why not ready yet ([`Readiness::reason`]), for `/ready`'s body.
    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    /// Stops every watch.
    pub fn abort(&self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

// === impl Readiness ===

impl Readiness {
    /// Why the watches are not ready, or `None` once ready: the kinds whose initial list has
    /// not been applied, in the order they were added, the first five by name (`v1/Pod`), each
    /// with the last error its watch retried after, the rest counted. For example
    /// `waiting for the initial list of 7 kinds: v1/Pod (last error: ...), v1/Service, ...,
    /// and 2 more`.
    pub fn reason(&self) -> Option<String> {
        if *self.state.ready.borrow() {
            return None;
        }
        pending_reason(&self.state.kinds.lock())
    }
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("pending", &self.state.pending.load(Ordering::Acquire))
            .finish()
    }
}

/// The reason text of [`Readiness::reason`] over `kinds`; `None` when none is pending.
fn pending_reason(kinds: &[KindStatus]) -> Option<String> {
    use std::fmt::Write;
    let pending: Vec<&KindStatus> = kinds.iter().filter(|k| !k.synced).collect();
    if pending.is_empty() {
        return None;
    }
    let plural = if pending.len() == 1 { "kind" } else { "kinds" };
    let mut out = format!(
        "waiting for the initial list of {} {plural}: ",
        pending.len()
    );
    for (i, kind) in pending.iter().take(REASON_KINDS).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&kind.name);
        if let Some(error) = &kind.last_error {
            let _ = write!(out, " (last error: {error})");
        }
    }
    if pending.len() > REASON_KINDS {
        let _ = write!(out, ", and {} more", pending.len() - REASON_KINDS);
    }
    Some(out)
}

// === impl ReadinessState ===

impl ReadinessState {
    /// Notes kind `at`'s initial list applied; the last kind to sync makes the whole ready.
    fn synced(&self, at: usize) {
        if let Some(kind) = self.kinds.lock().get_mut(at) {
            kind.synced = true;
            kind.last_error = None;
        }
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.ready.send_replace(true);
        }
    }
}

// === impl WatchErrors ===

impl WatchErrors {
    /// Keeps `error` (its text and its sources') as the kind's last error, unless the kind has
    /// synced already: after that, readiness no longer depends on it.
    pub(crate) fn failed(&self, error: &(dyn std::error::Error + 'static)) {
        let mut kinds = self.readiness.kinds.lock();
        if let Some(kind) = kinds.get_mut(self.at)
            && !kind.synced
        {
            kind.last_error = Some(error_text(error));
        }
    }
}

/// `error` and its sources on one line, each source only when its text is not already part of
/// what comes before (kube's errors often repeat their source), cut at
/// [`REASON_ERROR_CHARS`].
fn error_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    // One line: a Status message or an io error may hold newlines.
    let text = text.replace(['\n', '\r'], " ");
    match text.char_indices().nth(REASON_ERROR_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

// === impl KindSinks ===

impl<K: Kind> PendingKind for KindSinks<K> {
    fn kind_id(&self) -> TypeId {
        TypeId::of::<K>()
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }

    fn as_any_ref(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> String {
        format!("{}/{}", K::api_version(&()), K::kind(&()))
    }

    fn start(
        self: Box<Self>,
        readiness: Arc<ReadinessState>,
        at: usize,
        metrics: IndexMetrics,
    ) -> Arc<dyn StartedKind> {
        let scope = common_scope(&self.scopes);
        Arc::new(KindWatch::<K> {
            sinks: self.sinks,
            scope,
            synced: AtomicBool::new(false),
            readiness,
            at,
            metrics,
            type_key: type_key::<K>(),
        })
    }
}

/// The scope a kind is watched in: the one every index asks for, else everything.
fn common_scope(scopes: &[WatchScope]) -> WatchScope {
    match scopes.split_first() {
        Some((first, rest)) if rest.iter().all(|s| s == first) => first.clone(),
        _ => WatchScope::default(),
    }
}

// === impl KindWatch ===

impl<K: Kind> KindWatch<K> {
    /// Applies `events` to every index of the kind, then counts them and notes the initial
    /// list.
    fn deliver_typed(&self, events: Vec<Event<Arc<K::Object>>>) {
        if events.is_empty() {
            return;
        }
        // The views these events change are stamped with now: when the index saw them.
        let _seen = crate::topic::ChangeSeen::now();
        let mut stored = None;
        for sink in &self.sinks {
            let count = sink.apply(&events);
            stored.get_or_insert(count);
        }
        if let Some(count) = stored {
            self.metrics.set_cache_size(K::LABEL, count);
        }
        let reset = events.iter().any(|e| matches!(e, Event::Reset(_)));
        if reset && self.synced.load(Ordering::Acquire) {
            // A relist after the initial one: the watch started over (an error, 410 Gone).
            self.metrics.watch_restarted(K::LABEL);
        }
        if reset && !self.synced.swap(true, Ordering::AcqRel) {
            tracing::debug!(kind = K::LABEL, "initial list applied");
            self.readiness.synced(self.at);
        }
    }
}

impl<K: Kind> KindFeed for KindWatch<K> {
    fn type_key(&self) -> (&str, &str) {
        (&self.type_key.0, &self.type_key.1)
    }

    fn label(&self) -> &'static str {
        K::LABEL
    }

    fn namespaced(&self) -> bool {
        K::NAMESPACED
    }

    fn decode_json(&self, document: &str) -> Result<AnyObject, DecodeError> {
        decode_json::<K>(document).map(|o| Arc::new(o) as AnyObject)
    }

    fn deliver(&self, events: Vec<Event<AnyObject>>) {
        let typed = |object: AnyObject| object.downcast::<K::Object>().ok();
        let events = events
            .into_iter()
            .filter_map(|event| {
                Some(match event {
                    Event::Apply(object) => Event::Apply(typed(object)?),
                    Event::Delete(key) => Event::Delete(key),
                    Event::Reset(objects) => {
                        Event::Reset(objects.into_iter().filter_map(typed).collect())
                    }
                })
            })
            .collect();
        self.deliver_typed(events);
    }
}

impl<K: Kind> StartedKind for KindWatch<K> {
    fn spawn_kube(self: Arc<Self>, source: &KubeSource) -> tokio::task::JoinHandle<()> {
        use futures::StreamExt;
        use tracing::Instrument;
        let errors = WatchErrors {
            readiness: self.readiness.clone(),
            at: self.at,
        };
        let mut events = source.events_reporting::<K>(&self.scope, Some(errors));
        // In the caller's span: a linked cluster's watches log with its name.
        tokio::spawn(
            async move {
                while let Some(event) = events.next().await {
                    let relisted = matches!(event, Event::Reset(_));
                    self.deliver_typed(vec![event]);
                    if relisted {
                        crate::source::release_freed_memory();
                    }
                }
                tracing::debug!(kind = K::LABEL, "watch ended");
            }
            .in_current_span(),
        )
    }
}

/// An index fed objects directly instead of by a source: for tests, and tools that hold
/// objects already. They are decoded as a source decodes them ([`Watches::apply`]).
pub struct Fed<I> {
    watches: Watches,
    index: I,
}

impl<I> Fed<I> {
    /// `index`, fed from the watches `watch` adds it to (its `watch` method), counting invalid
    /// objects in `metrics`.
    pub fn new(index: I, watch: impl FnOnce(&I, &mut Watches), metrics: IndexMetrics) -> Self {
        let mut watches = Watches::new(metrics);
        watch(&index, &mut watches);
        Self { watches, index }
    }

    /// Decodes the objects of `event` and applies it ([`Watches::apply`]).
    pub fn apply<K: Kind + serde::Serialize>(&self, event: Event<K>) {
        self.watches.apply(event);
    }

    /// Decodes the object that the JSON text `json` defines and applies it
    /// ([`Watches::apply_json`]: a time keeps its fraction of a second).
    pub fn apply_json<K: Kind>(&self, json: &str) -> Result<(), crate::model::DecodeError> {
        self.watches.apply_json::<K>(json)
    }

    /// Deletes the object of `obj`'s kind, namespace and name.
    pub fn delete<K: Kind + serde::Serialize>(&self, obj: &K) {
        let meta = obj.meta();
        self.watches
            .apply(Event::<K>::Delete(crate::model::ObjectRef {
                namespace: meta.namespace.clone().unwrap_or_default(),
                name: meta.name.clone().unwrap_or_default(),
            }));
    }

    /// The index.
    pub fn index(&self) -> &I {
        &self.index
    }
}

impl<I> std::ops::Deref for Fed<I> {
    type Target = I;

    fn deref(&self) -> &I {
        &self.index
    }
}

/// The feed of kind `K` that delivers to `sink` alone: what a source sees of a kind (tests).
#[cfg(test)]
pub(crate) fn feed<K: Kind>(sink: impl Sink<K>, metrics: IndexMetrics) -> Arc<dyn KindFeed> {
    let readiness = Arc::new(ReadinessState {
        pending: AtomicUsize::new(1),
        ready: watch::channel(false).0,
        kinds: Mutex::new(Vec::new()),
    });
    Box::new(KindSinks::<K> {
        sinks: vec![Arc::new(sink)],
        scopes: vec![WatchScope::default()],
    })
    .start(readiness, 0, metrics)
}

/// A channel end is a sink (tests, and tools that watch a kind themselves): it forwards every
/// event and stores nothing.
impl<K: Kind> Sink<K> for tokio::sync::mpsc::UnboundedSender<Event<Arc<K::Object>>> {
    fn apply(&self, events: &[Event<Arc<K::Object>>]) -> usize {
        for event in events {
            let _ = self.send(event.clone());
        }
        0
    }
}

#[cfg(test)]
mod scope_tests {
    use super::*;

    #[test]
    fn a_kind_is_watched_in_the_scope_every_index_asks_for() {
        let links = WatchScope {
            namespace: Some("linkerd".into()),
            labels: Some("multicluster.linkerd.io/cluster-name".into()),
            fields: Some("type=mirror.linkerd.io/remote-kubeconfig".into()),
        };
        assert_eq!(common_scope(std::slice::from_ref(&links)), links);
        assert_eq!(common_scope(&[links.clone(), links.clone()]), links);
        // An index that needs more widens the watch to every object.
        assert_eq!(
            common_scope(&[links, WatchScope::default()]),
            WatchScope::default()
        );
        assert_eq!(common_scope(&[]), WatchScope::default());
    }
}

#[cfg(test)]
mod readiness_tests {
    use super::*;

    fn status(name: &str, synced: bool, last_error: Option<&str>) -> KindStatus {
        KindStatus {
            name: name.to_string(),
            synced,
            last_error: last_error.map(str::to_string),
        }
    }

    #[test]
    fn the_reason_names_the_first_pending_kinds_and_counts_the_rest() {
        let refused = "failed to perform initial object list: HyperError: tcp connect error: Connection refused (os error 111)";
        let kinds = [
            status("v1/Service", true, None),
            status("v1/Pod", false, Some(refused)),
            status("discovery.k8s.io/v1/EndpointSlice", false, None),
            status("v1/Node", false, Some("forbidden")),
            status("apps/v1/ReplicaSet", false, None),
            status("batch/v1/Job", true, None),
            status("linkerd.io/v1alpha2/ServiceProfile", false, None),
            status("policy.linkerd.io/v1beta3/Server", false, None),
            status("workload.linkerd.io/v1beta1/ExternalWorkload", false, None),
        ];
        assert_eq!(
            pending_reason(&kinds).as_deref(),
            Some(
                "waiting for the initial list of 7 kinds: \
                 v1/Pod (last error: failed to perform initial object list: HyperError: tcp connect error: Connection refused (os error 111)), \
                 discovery.k8s.io/v1/EndpointSlice, \
                 v1/Node (last error: forbidden), \
                 apps/v1/ReplicaSet, \
                 linkerd.io/v1alpha2/ServiceProfile, \
                 and 2 more"
            )
        );
    }

    #[test]
    fn one_pending_kind_is_named_alone_and_none_is_no_reason() {
        let mut kinds = vec![
            status("v1/Pod", true, None),
            status("v1/Service", false, None),
        ];
        assert_eq!(
            pending_reason(&kinds).as_deref(),
            Some("waiting for the initial list of 1 kind: v1/Service")
        );
        kinds[1].synced = true;
        assert_eq!(pending_reason(&kinds), None);
        assert_eq!(pending_reason(&[]), None);
    }

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn an_error_is_one_line_with_the_sources_it_does_not_repeat() {
        let refused = Layer("Connection refused (os error 111)", None);
        let connect = Layer(
            "tcp connect error: Connection refused (os error 111)",
            Some(Box::new(refused)),
        );
        let list = Layer(
            "failed to perform initial object list",
            Some(Box::new(Layer(
                "HyperError:\nclient error",
                Some(Box::new(connect)),
            ))),
        );
        assert_eq!(
            error_text(&list),
            "failed to perform initial object list: HyperError: client error: \
             tcp connect error: Connection refused (os error 111)"
        );
        let long = Layer(Box::leak("é".repeat(400).into_boxed_str()), None);
        let text = error_text(&long);
        assert_eq!(text, format!("{}...", "é".repeat(REASON_ERROR_CHARS)));
    }

    #[tokio::test]
    async fn a_kind_keeps_its_last_error_until_it_syncs() {
        let (ready, _ready_rx) = watch::channel(false);
        let state = Arc::new(ReadinessState {
            pending: AtomicUsize::new(2),
            ready,
            kinds: Mutex::new(vec![
                status("v1/Pod", false, None),
                status("v1/Service", false, None),
            ]),
        });
        let readiness = Readiness {
            state: state.clone(),
        };
        let pods = WatchErrors {
            readiness: state.clone(),
            at: 0,
        };
        pods.failed(&Layer("connection reset", None));
        pods.failed(&Layer("connection refused", None));
        assert_eq!(
            readiness.reason().as_deref(),
            Some(
                "waiting for the initial list of 2 kinds: \
                 v1/Pod (last error: connection refused), v1/Service"
            )
        );
        state.synced(0);
        // An error after the initial list no longer holds readiness back.
        pods.failed(&Layer("connection reset", None));
        assert_eq!(
            readiness.reason().as_deref(),
            Some("waiting for the initial list of 1 kind: v1/Service")
        );
        state.synced(1);
        assert_eq!(readiness.reason(), None);
        assert!(*state.ready.borrow());
    }
}
