//! [`Watches`]: one watch per kind, feeding every index that keeps the kind (upstream's index
//! list), and the readiness of the whole.
//!
//! Each index declares the kinds it reads ([`Sink`]); a kind read by several indexes (Services
//! by discovery, outbound policy and route status) is watched once, each object is decoded
//! once, and the indexes get the same `Arc` of it, each applying it under its own lock.

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
    tasks: Vec<tokio::task::JoinHandle<()>>,
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
    readiness: Arc<Readiness>,
    metrics: IndexMetrics,
    type_key: (String, String),
}

/// The kinds that have not delivered their initial list yet.
struct Readiness {
    pending: AtomicUsize,
    ready: watch::Sender<bool>,
}

trait PendingKind: Send {
    fn kind_id(&self) -> TypeId;
    fn as_any(&mut self) -> &mut dyn Any;
    fn as_any_ref(&self) -> &dyn Any;
    fn start(
        self: Box<Self>,
        readiness: Arc<Readiness>,
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
    /// as a source does, and delivers it ([`Watches::deliver`]). An object that does not
    /// decode is logged and counted in `index_invalid_objects_total`, and left out (an `Apply`
    /// of it is dropped, or, for kinds whose invalid updates remove, becomes a `Delete`).
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

    /// Starts watching every kind added, from `source`. In offline mode the state directory is
    /// read, and every kind's initial list delivered, before this returns; in kube mode the
    /// lists arrive later: [`Started::ready`] says when.
    pub async fn start(self, source: &ClusterSource) -> Started {
        let (ready, ready_rx) = watch::channel(self.kinds.is_empty());
        let readiness = Arc::new(Readiness {
            pending: AtomicUsize::new(self.kinds.len()),
            ready,
        });
        let kinds: Vec<Arc<dyn StartedKind>> = self
            .kinds
            .into_iter()
            .map(|k| k.start(readiness.clone(), self.metrics.clone()))
            .collect();
        let tasks = match source {
            ClusterSource::Kube(kube) => kinds.into_iter().map(|k| k.spawn_kube(kube)).collect(),
            ClusterSource::Offline(offline) => {
                let feeds = kinds.into_iter().map(|k| k as Arc<dyn KindFeed>).collect();
                vec![offline.start(feeds).await]
            }
        };
        Started {
            ready: ready_rx,
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

    /// Stops every watch.
    pub fn abort(&self) {
        for task in &self.tasks {
            task.abort();
        }
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

    fn start(
        self: Box<Self>,
        readiness: Arc<Readiness>,
        metrics: IndexMetrics,
    ) -> Arc<dyn StartedKind> {
        let scope = common_scope(&self.scopes);
        Arc::new(KindWatch::<K> {
            sinks: self.sinks,
            scope,
            synced: AtomicBool::new(false),
            readiness,
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
            if self.readiness.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                self.readiness.ready.send_replace(true);
            }
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

    fn invalid_removes(&self) -> bool {
        K::INVALID_REMOVES
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
        let mut events = source.events_in::<K>(&self.scope);
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
    let readiness = Arc::new(Readiness {
        pending: AtomicUsize::new(1),
        ready: watch::channel(false).0,
    });
    Box::new(KindSinks::<K> {
        sinks: vec![Arc::new(sink)],
        scopes: vec![WatchScope::default()],
    })
    .start(readiness, metrics)
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
