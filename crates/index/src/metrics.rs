//! Metrics of the index: cache sizes, informer lag and objects skipped as invalid.
//!
//! Names follow upstream's informer metrics (spec/destination.md §F: `<kind>_cache_size{cluster}`,
//! `<kind>_informer_lag_seconds`) so existing dashboards keep working.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use crate::model::{InvalidObject, ObjectRef};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// The informer-lag histogram of each watched kind that upstream measures, by Kubernetes kind.
/// Upstream's `endpoints_informer_lag_seconds` is left out: it is for the Endpoints API, which
/// this index does not watch.
const INFORMER_LAG: [(&str, &str); 6] = [
    ("EndpointSlice", "endpointslices_informer_lag_seconds"),
    ("Service", "services_informer_lag_seconds"),
    ("Server", "servers_informer_lag_seconds"),
    ("Pod", "pods_informer_lag_seconds"),
    ("ExternalWorkload", "externalworkload_informer_lag_seconds"),
    ("ServiceProfile", "serviceprofiles_informer_lag_seconds"),
];

/// Buckets of the informer-lag histograms, in seconds (as upstream's).
const INFORMER_LAG_BUCKETS: [f64; 10] =
    [0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0];

/// Labels of the cache-size gauges: `cluster` is always `local` for this process's own cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    pub cluster: String,
}

/// Labels of `index_watch_restarts_total`: the Kubernetes kind whose watch started over.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// Labels of `index_invalid_objects_total`: the cluster that sent the object (`local`, or a
/// linked cluster's name) and its Kubernetes kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InvalidObjectLabels {
    pub cluster: String,
    pub kind: String,
}

/// A counter of one cluster: a series of a family labelled `{cluster}`, so that the linked
/// clusters' indexes count in the same family as the local one, each in its own series.
#[derive(Clone, Debug)]
pub(crate) struct ClusterCounter {
    family: Family<ClusterLabels, Counter>,
    labels: ClusterLabels,
}

/// The cache-size gauge of each kind that upstream has one for, by [`Kind::LABEL`](crate::model::Kind::LABEL).
const CACHE_SIZE: [(&str, &str); 9] = [
    ("Pod", "pod_cache_size"),
    ("Service", "service_cache_size"),
    ("EndpointSlice", "endpointslices_cache_size"),
    ("Node", "node_cache_size"),
    ("ReplicaSet", "replicaset_cache_size"),
    ("Job", "job_cache_size"),
    ("Server", "server_cache_size"),
    ("ExternalWorkload", "externalworkload_cache_size"),
    ("ServiceProfile", "serviceprofile_cache_size"),
];

/// Handles to the index's metrics. Cheap to clone; every clone updates the same series.
#[derive(Clone, Debug)]
pub struct IndexMetrics {
    /// Cache-size gauges by kind label.
    pub(crate) cache_size: Vec<(&'static str, Family<ClusterLabels, Gauge>)>,
    /// The `cluster` label of the cache-size gauges: `local`, or a linked cluster's name.
    cluster: ClusterLabels,
    /// Informer-lag histograms by Kubernetes kind; empty unless registered.
    pub(crate) informer_lag: Arc<[InformerLag]>,
    pub(crate) invalid_objects: Family<InvalidObjectLabels, Counter>,
    pub(crate) invalid_files: ClusterCounter,
    pub(crate) conflicting_objects: ClusterCounter,
    pub(crate) offline_reloads: ClusterCounter,
    /// `offline_stale_files{cluster}`: see [`IndexMetrics::register`].
    stale_files: Family<ClusterLabels, Gauge>,
    /// Relists after a kind's initial list, by kind.
    pub(crate) watch_restarts: Family<KindLabels, Counter>,
    /// Whether the API server answers this cluster's watches: the last watch event was a
    /// success or an error status (`true`), or an error without one (`false`: connection
    /// refused or reset, a timeout). Set only for linked clusters.
    pub(crate) api_reachable: Option<Arc<tokio::sync::watch::Sender<bool>>>,
    /// The objects the indexes sharing these metrics skipped as invalid. Shared, so that an
    /// object two indexes skip for the same reason (a Gateway API HTTPRoute, read by the
    /// inbound and the outbound index) is logged and counted once.
    skipped: Arc<parking_lot::Mutex<Skipped>>,
}

/// The informer-lag histogram of one kind, exported only once the kind is watched from an API
/// server: a binary that does not watch the kind (policy-controller and EndpointSlices), or
/// reads a state directory, has no lag to show, and an empty histogram would say it had none.
#[derive(Debug)]
pub(crate) struct InformerLag {
    kind: &'static str,
    name: &'static str,
    histogram: Histogram,
    watched: AtomicBool,
}

/// Encodes the informer-lag histograms of the kinds watched.
#[derive(Debug)]
struct InformerLagCollector(Arc<[InformerLag]>);

impl Collector for InformerLagCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        for lag in self.0.iter().filter(|l| l.watched.load(Ordering::Relaxed)) {
            let metric = encoder.encode_descriptor(
                lag.name,
                "Delay from an object's last update (its latest managedFields Update time) to its watch event",
                None,
                lag.histogram.metric_type(),
            )?;
            lag.histogram.encode(metric)?;
        }
        Ok(())
    }
}

/// The `cluster` label of the local cluster's series; a linked cluster cannot be named so
/// ([`crate::model::LinkSecretError::ReservedClusterName`]).
pub const LOCAL_CLUSTER: &str = "local";

impl Default for IndexMetrics {
    /// Metrics registered nowhere (tests).
    fn default() -> Self {
        let cluster = ClusterLabels {
            cluster: LOCAL_CLUSTER.to_string(),
        };
        let counter = || ClusterCounter {
            family: Family::default(),
            labels: cluster.clone(),
        };
        Self {
            cache_size: Vec::new(),
            informer_lag: Arc::new([]),
            invalid_objects: Family::default(),
            invalid_files: counter(),
            conflicting_objects: counter(),
            offline_reloads: counter(),
            stale_files: Family::default(),
            watch_restarts: Family::default(),
            api_reachable: None,
            skipped: Arc::default(),
            cluster,
        }
    }
}

impl IndexMetrics {
    /// Registers the index's metrics in `registry`:
    /// `pod_cache_size`, `service_cache_size`, `endpointslices_cache_size`, `node_cache_size`,
    /// `replicaset_cache_size`, `job_cache_size`, `server_cache_size`,
    /// `externalworkload_cache_size`, `serviceprofile_cache_size` (gauges, `{cluster}`),
    /// `endpointslices_informer_lag_seconds`, `services_informer_lag_seconds`,
    /// `servers_informer_lag_seconds`, `pods_informer_lag_seconds`,
    /// `externalworkload_informer_lag_seconds`, `serviceprofiles_informer_lag_seconds`
    /// (histograms of the delay from an object's last update to its watch event; observed by the
    /// `kube` source only, and exported once it watches the kind),
    /// `index_invalid_objects_total{cluster,kind}` (objects that could not be decoded or
    /// indexed, by the cluster that sent them), `offline_invalid_files_total{cluster}`,
    /// `offline_reloads_total{cluster}` and `offline_conflicting_objects_total{cluster}`
    /// (offline source), and the gauge `offline_stale_files{cluster}`: files whose objects are
    /// served from an earlier read because their contents now cannot be used (they do not
    /// parse, are empty, or cannot be read), which a fresh start would not serve.
    /// `cluster` is `local`, or a linked cluster's name
    /// ([`IndexMetrics::for_cluster`]).
    /// `index_watch_restarts_total{kind}` (relists after a kind's initial list: its watch
    /// started over after an error or an expired resourceVersion; upstream has no such metric).
    pub fn register(registry: &mut Registry) -> Self {
        let mut metrics = Self::default();
        for (kind, name) in CACHE_SIZE {
            let family = Family::<ClusterLabels, Gauge>::default();
            registry.register(
                name,
                "Number of objects in the index's cache",
                family.clone(),
            );
            metrics.cache_size.push((kind, family));
        }
        metrics.informer_lag = INFORMER_LAG
            .into_iter()
            .map(|(kind, name)| InformerLag {
                kind,
                name,
                histogram: Histogram::new(INFORMER_LAG_BUCKETS),
                watched: AtomicBool::new(false),
            })
            .collect();
        registry.register_collector(Box::new(InformerLagCollector(metrics.informer_lag.clone())));
        registry.register(
            "index_invalid_objects",
            "Objects skipped because they could not be decoded or indexed",
            metrics.invalid_objects.clone(),
        );
        registry.register(
            "index_watch_restarts",
            "Times a kind's watch started over with a new list after its initial one",
            metrics.watch_restarts.clone(),
        );
        registry.register(
            "offline_invalid_files",
            "State-directory files skipped because they could not be parsed",
            metrics.invalid_files.family.clone(),
        );
        registry.register(
            "offline_reloads",
            "Times the state directory was re-read after a change (not counting retries that could not list it)",
            metrics.offline_reloads.family.clone(),
        );
        registry.register(
            "offline_stale_files",
            "State-directory files whose objects are served from an earlier read because their contents cannot be used now; a restart would not serve them",
            metrics.stale_files.clone(),
        );
        registry.register(
            "offline_conflicting_objects",
            "Objects defined differently in two state-directory files (the last file in path order wins)",
            metrics.conflicting_objects.family.clone(),
        );
        metrics
    }

    /// The same metrics, with the series of cache sizes, invalid objects and offline files
    /// labelled `cluster="<name>"` (a linked cluster's discovery index).
    pub fn for_cluster(&self, name: &str) -> Self {
        let cluster = ClusterLabels {
            cluster: name.to_string(),
        };
        Self {
            invalid_files: self.invalid_files.for_cluster(&cluster),
            conflicting_objects: self.conflicting_objects.for_cluster(&cluster),
            offline_reloads: self.offline_reloads.for_cluster(&cluster),
            // Another cluster's objects: the same name is another object.
            skipped: Arc::default(),
            cluster,
            ..self.clone()
        }
    }

    /// The `cluster` label of this metrics' series: `local`, or a linked cluster's name.
    pub fn cluster(&self) -> &str {
        &self.cluster.cluster
    }

    /// The same metrics, reporting through `reachable` whether the API server answers the
    /// watches (a linked cluster's health).
    pub(crate) fn with_reachability(
        &self,
        reachable: Arc<tokio::sync::watch::Sender<bool>>,
    ) -> Self {
        Self {
            api_reachable: Some(reachable),
            ..self.clone()
        }
    }

    /// Notes that a watch got an answer (`true`) or failed (`false`): in offline mode, that the
    /// state directory could be listed or not.
    pub(crate) fn api_answered(&self, answered: bool) {
        if let Some(reachable) = &self.api_reachable {
            reachable.send_if_modified(|r| std::mem::replace(r, answered) != answered);
        }
    }

    /// Removes the cache-size and stale-file series of this metrics' cluster (a linked
    /// cluster unlinked): gauges of what it no longer serves. Its counters stay: a counter
    /// that vanished and came back would read as a reset.
    pub(crate) fn forget_cache_sizes(&self) {
        for (_, family) in &self.cache_size {
            family.remove(&self.cluster);
        }
        self.stale_files.remove(&self.cluster);
    }

    /// Sets `offline_stale_files` of this metrics' cluster.
    pub(crate) fn set_stale_files(&self, files: usize) {
        self.stale_files
            .get_or_create(&self.cluster)
            .set(files as i64);
    }

    /// `offline_stale_files` of this metrics' cluster (tests, diagnostics).
    pub fn stale_files(&self) -> i64 {
        self.stale_files.get_or_create(&self.cluster).get()
    }

    /// Sets the cache-size gauge of the kind labelled `kind`, if it has one.
    pub(crate) fn set_cache_size(&self, kind: &str, size: usize) {
        if let Some((_, family)) = self.cache_size.iter().find(|(k, _)| *k == kind) {
            family.get_or_create(&self.cluster).set(size as i64);
        }
    }

    /// The informer-lag histogram of `kind`, if it has one and it is registered, for a watch of
    /// `kind` from an API server: from then on it is exported.
    pub(crate) fn informer_lag(&self, kind: &str) -> Option<Histogram> {
        let lag = self.informer_lag.iter().find(|lag| lag.kind == kind)?;
        lag.watched.store(true, Ordering::Relaxed);
        Some(lag.histogram.clone())
    }

    /// Creates the series of `kind` at 0 (`index_invalid_objects_total{cluster,kind}`, and
    /// `index_watch_restarts_total{kind}` when `watched` from an API server): a series that
    /// appears only with its first increment hides that increment from `increase()`.
    pub(crate) fn expose_kind(&self, kind: &str, watched: bool) {
        drop(self.invalid_objects.get_or_create(&InvalidObjectLabels {
            cluster: self.cluster.cluster.clone(),
            kind: kind.to_string(),
        }));
        if watched {
            drop(self.watch_restarts.get_or_create(&KindLabels {
                kind: kind.to_string(),
            }));
        }
    }

    /// Creates the offline source's series of this cluster at 0 (see [`Self::expose_kind`]).
    pub(crate) fn expose_offline(&self) {
        for counter in [
            &self.invalid_files,
            &self.conflicting_objects,
            &self.offline_reloads,
        ] {
            drop(counter.family.get_or_create(&counter.labels));
        }
        drop(self.stale_files.get_or_create(&self.cluster));
    }

    pub(crate) fn watch_restarted(&self, kind: &str) {
        self.watch_restarts
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    pub(crate) fn invalid_object(&self, kind: &str) {
        self.invalid_objects
            .get_or_create(&InvalidObjectLabels {
                cluster: self.cluster.cluster.clone(),
                kind: kind.to_string(),
            })
            .inc();
    }

    /// How many objects of `kind` from this metrics' cluster were skipped as invalid (tests,
    /// diagnostics).
    pub fn invalid_objects(&self, kind: &str) -> u64 {
        self.invalid_objects
            .get_or_create(&InvalidObjectLabels {
                cluster: self.cluster.cluster.clone(),
                kind: kind.to_string(),
            })
            .get()
    }
}

// === impl ClusterCounter ===

impl ClusterCounter {
    /// The same family, counting in `labels`' series.
    fn for_cluster(&self, labels: &ClusterLabels) -> Self {
        Self {
            family: self.family.clone(),
            labels: labels.clone(),
        }
    }

    pub(crate) fn inc(&self) {
        self.family.get_or_create(&self.labels).inc();
    }

    #[cfg(test)]
    pub(crate) fn get(&self) -> u64 {
        self.family.get_or_create(&self.labels).get()
    }
}

/// An object an index skipped as invalid, while its source defers the log line
/// ([`deferring_skips`]).
#[derive(Debug)]
pub(crate) struct SkippedObject {
    pub(crate) kind: &'static str,
    pub(crate) key: Option<ObjectRef>,
    pub(crate) reason: String,
}

impl SkippedObject {
    /// Logs the object as skipped, with its kind, namespace and name as fields (as the sources
    /// log the objects they cannot decode), and `file`, the one that defines it, when known.
    pub(crate) fn log(&self, file: Option<&std::path::Path>) {
        let (namespace, name) = self
            .key
            .as_ref()
            .map_or(("", ""), |key| (key.namespace.as_str(), key.name.as_str()));
        let (kind, error) = (self.kind, &self.reason);
        match file {
            Some(file) => tracing::warn!(
                file = %file.display(), %kind, %namespace, %name, %error, "skipping object"
            ),
            None => tracing::warn!(%kind, %namespace, %name, %error, "skipping object"),
        }
    }
}

thread_local! {
    /// The objects skipped on this thread while a source runs [`deferring_skips`].
    static DEFERRED_SKIPS: std::cell::RefCell<Option<Vec<SkippedObject>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `deliver` (a source handing events to the indexes), and returns the objects the
/// indexes skipped as invalid on this thread meanwhile instead of logging them, so that the
/// source can log each with where it came from (the offline source: its file). They are
/// counted as ever.
pub(crate) fn deferring_skips(deliver: impl FnOnce()) -> Vec<SkippedObject> {
    /// Puts back what was deferred before, also if `deliver` panics.
    struct Restore(Option<Option<Vec<SkippedObject>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(outer) = self.0.take() {
                DEFERRED_SKIPS.set(outer);
            }
        }
    }
    let mut restore = Restore(Some(DEFERRED_SKIPS.replace(Some(Vec::new()))));
    deliver();
    let outer = restore.0.take().unwrap_or_default();
    DEFERRED_SKIPS.replace(outer).unwrap_or_default()
}

/// Keeps `skipped` for the source running [`deferring_skips`] on this thread, or gives it back
/// to be logged here.
fn defer_skip(skipped: SkippedObject) -> Option<SkippedObject> {
    DEFERRED_SKIPS.with_borrow_mut(|deferred| match deferred {
        Some(deferred) => {
            deferred.push(skipped);
            None
        }
        None => Some(skipped),
    })
}

/// Which index reports an invalid object ([`IndexMetrics::skip_invalid`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reporter {
    Inbound,
    Outbound,
}

/// The objects indexes skipped as invalid, with why, so that an object applied again
/// unchanged (a relist, an offline re-read), or skipped by a second index for the same reason,
/// is not logged and counted again.
#[derive(Debug, Default)]
struct Skipped {
    reasons: HashMap<(&'static str, ObjectRef), Vec<(Reporter, String)>>,
}

impl IndexMetrics {
    /// Logs and counts `error` for the object `key` of `kind`, skipped by index `by`, unless
    /// an index already reports the same problem for it. An object without a key (no name) is
    /// reported every time.
    pub(crate) fn skip_invalid(
        &self,
        by: Reporter,
        kind: &'static str,
        key: Option<ObjectRef>,
        error: &InvalidObject,
    ) {
        let reason = error.to_string();
        let deferred_key = key.clone();
        let reported = key.is_some_and(|key| {
            let mut skipped = self.skipped.lock();
            let reports = skipped.reasons.entry((kind, key)).or_default();
            let reported = reports.iter().any(|(_, r)| *r == reason);
            reports.retain(|(who, _)| *who != by);
            reports.push((by, reason.clone()));
            reported
        });
        if !reported {
            self.invalid_object(kind);
            let skipped = SkippedObject {
                kind,
                key: deferred_key,
                reason,
            };
            if let Some(skipped) = defer_skip(skipped) {
                skipped.log(None);
            }
        }
    }

    /// The object `key` of `kind` is valid for index `by` again, or gone.
    pub(crate) fn valid_again(&self, by: Reporter, kind: &'static str, key: &ObjectRef) {
        let mut skipped = self.skipped.lock();
        let entry = (kind, key.clone());
        if let Some(reports) = skipped.reasons.get_mut(&entry) {
            reports.retain(|(who, _)| *who != by);
            if reports.is_empty() {
                skipped.reasons.remove(&entry);
            }
        }
    }
}
