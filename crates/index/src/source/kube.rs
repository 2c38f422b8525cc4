//! The `kube` source: kube-runtime watchers (list + watch, resourceVersion resume, exponential
//! backoff, and a relist after `410 Gone`), turned into [`Event`]s.
//!
//! Two robustness rules sit between the watcher and the index:
//!
//! - Objects are listed and watched untyped ([`DynamicObject`]) and decoded into `K` one by
//!   one, so a malformed object is logged with its namespace/name, counted in
//!   `index_invalid_objects_total{kind}` and skipped, and never fails the list of every object
//!   of its kind (DESIGN.md "Conventions").
//! - A kind the API server does not serve (`404`: a CRD that is not installed, or was removed)
//!   is served as empty until it appears, logged once per change (issue 3 item 4).
//! - A Gateway API kind instead follows its CustomResourceDefinition (`kube/crd.rs`): it is
//!   watched at the version the CRD serves, started, restarted and stopped as the CRD is
//!   installed, upgraded and removed (issue 5 item 2).
//!
//! It also observes the informer-lag histograms (`pods_informer_lag_seconds`, ...): on each
//! watch event that updates an object already seen, the time since the object's latest
//! `managedFields` `Update` (spec/destination.md §F).

use futures::{StreamExt, stream::BoxStream};
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject},
    core::ObjectMeta,
    runtime::{WatchStreamExt, utils::Backoff, watcher},
};
use prometheus_client::metrics::histogram::Histogram;
use serde_json::{Map, Value};
use std::{
    collections::HashSet,
    hash::{BuildHasher, RandomState},
    time::Duration,
};

use super::{Event, Source, Watched};
use crate::metrics::IndexMetrics;

mod crd;

/// Watches a Kubernetes API server with a [`kube::Client`].
#[derive(Clone)]
pub struct KubeSource {
    client: Client,
    metrics: IndexMetrics,
}

/// Whether the API server serves a kind, as far as its last list or watch request showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Served {
    /// Nothing answered yet.
    Unknown,
    Yes,
    /// The last request got `404`: the kind is served as empty.
    NotFound,
}

/// The state a kind's event stream carries between watcher events.
struct WatchState<K> {
    /// The objects of a relist in progress (between `Init` and `InitDone`).
    relist: Option<Vec<K>>,
    served: Served,
    /// Whether a `404` while `served` is `Unknown` yields nothing instead of an empty `Reset`.
    keep_until_listed: bool,
    /// For a kind with an informer-lag histogram: what it takes to observe it.
    lag: Option<LagTracker>,
}

/// The informer-lag histogram of one kind and the objects its watch has delivered, so that an
/// update (an `Apply` of an object already seen) is told from a creation, as an informer's
/// `UpdateFunc` is.
struct LagTracker {
    histogram: Histogram,
    /// A hash of the namespace/name of every object the API server has now: 8 bytes per object
    /// rather than its name; a collision costs at most one observation.
    seen: HashSet<u64>,
    hasher: RandomState,
}

/// The retry delay of a failing watch: 800 ms doubling up to 20 s, plus up to half again of
/// jitter, so every retry comes within 30 s. kube-runtime's default backoff caps at 30 s
/// *before* its jitter (up to 60 s), too slow to pick up a CRD that appears (issue 3 item 4).
struct WatchBackoff {
    base: Duration,
}

const BACKOFF_MIN: Duration = Duration::from_millis(800);
const BACKOFF_MAX_BASE: Duration = Duration::from_secs(20);

// === impl KubeSource ===

impl KubeSource {
    /// A source over `client` (built from in-cluster config, `KUBECONFIG` or `--kubeconfig`);
    /// objects that do not decode are counted in `metrics` (`index_invalid_objects_total`).
    pub fn new(client: Client, metrics: IndexMetrics) -> Self {
        Self { client, metrics }
    }

    /// The client it watches through (the policy controller's status writer shares it).
    pub fn client(&self) -> Client {
        self.client.clone()
    }
}

impl Source for KubeSource {
    /// The events of kind `K`, decoded object by object.
    ///
    /// - An object that does not decode into `K` is logged (kind, namespace/name, the decode
    ///   error), counted and skipped: a relist's `Reset` carries the others, so an earlier good
    ///   version of it is dropped; an `Apply` of it is dropped, so the index keeps the earlier
    ///   version. A `Delete` of it is still delivered, as a `K` built from its metadata alone
    ///   when `K` allows that (every k8s-openapi kind, whose absent fields default); otherwise
    ///   (a CRD kind, whose `spec` is required) it is skipped and the next relist removes it.
    /// - A `404` on a list or watch (a CRD not installed, or removed) yields one
    ///   `Reset(vec![])`, so the index counts the kind as synced and empty; the watcher keeps
    ///   retrying within 30 s, and the first successful list yields the usual `Reset`. Each
    ///   change (missing, appeared, removed) is logged once.
    /// - Other errors are logged as warnings and retried with the same backoff.
    /// - A Gateway API kind (group `gateway.networking.k8s.io`) follows its
    ///   CustomResourceDefinition instead (spec/policy.md "Project decisions" 2): it is listed
    ///   and watched at the version the CRD serves, from when the CRD appears, again from the
    ///   first list when the version changes, and served empty at once when the CRD goes.
    fn events<K: Watched>(&self) -> BoxStream<'static, Event<K>> {
        if K::group(&()) == crd::GATEWAY_GROUP {
            return crd::follow::<K>(self.client.clone(), self.metrics.clone());
        }
        let resource = ApiResource::erase::<K>(&());
        watch_resource::<K>(&self.client, resource, self.metrics.clone(), false)
    }
}

/// The events of kind `K` listed and watched at `resource` (the kind's group, plural and one
/// of its served versions), decoded into `K` as [`KubeSource::events`] describes.
///
/// With `keep_until_listed`, a `404` before the first successful list yields nothing (the
/// consumer keeps what it has, e.g. the objects of the version watched before) rather than an
/// empty `Reset`; the list is retried with the same backoff.
fn watch_resource<K: Watched>(
    client: &Client,
    resource: ApiResource,
    metrics: IndexMetrics,
    keep_until_listed: bool,
) -> BoxStream<'static, Event<K>> {
    let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
    let events = watcher(api, watcher::Config::default()).backoff(WatchBackoff::new());
    let state = WatchState {
        relist: None,
        served: Served::Unknown,
        keep_until_listed,
        lag: metrics.informer_lag(&K::kind(&())).map(LagTracker::new),
    };
    events
        .scan(state, move |state, event| {
            let out = state.step(event, &metrics);
            futures::future::ready(Some(out))
        })
        .filter_map(futures::future::ready)
        .boxed()
}

// === impl WatchState ===

impl<K: Watched> WatchState<K> {
    /// Folds one watcher event into at most one [`Event`]. A relist arrives as `Init`,
    /// `InitApply`..., `InitDone`: it is buffered into one `Reset` so the index can tell what
    /// vanished while the watch was down.
    fn step(
        &mut self,
        event: Result<watcher::Event<DynamicObject>, watcher::Error>,
        metrics: &IndexMetrics,
    ) -> Option<Event<K>> {
        let kind = K::kind(&());
        let event = match event {
            Ok(event) => event,
            Err(error) if is_not_found(&error) => {
                self.relist = None;
                if let Some(lag) = &mut self.lag {
                    lag.seen.clear();
                }
                let was = std::mem::replace(&mut self.served, Served::NotFound);
                return match was {
                    Served::Unknown if self.keep_until_listed => {
                        tracing::info!(%kind, "version not served yet; retrying with backoff");
                        None
                    }
                    Served::Unknown => {
                        tracing::info!(%kind, "CRD not installed; serving none until it appears");
                        Some(Event::Reset(Vec::new()))
                    }
                    Served::Yes => {
                        tracing::warn!(%kind, "CRD removed; serving none until it reappears");
                        Some(Event::Reset(Vec::new()))
                    }
                    Served::NotFound => {
                        tracing::debug!(%kind, "still not served; retrying with backoff");
                        None
                    }
                };
            }
            Err(error) => {
                tracing::warn!(%kind, %error, "watch failed; retrying with backoff");
                return None;
            }
        };
        // `Init` comes before the list request, so only what follows it proves the kind served.
        if !matches!(event, watcher::Event::Init) {
            if self.served == Served::NotFound {
                tracing::info!(%kind, "CRD installed; serving its objects");
            }
            self.served = Served::Yes;
        }
        match event {
            watcher::Event::Init => {
                self.relist = Some(Vec::new());
                if let Some(lag) = &mut self.lag {
                    lag.seen.clear();
                }
                None
            }
            watcher::Event::InitApply(DynamicObject { metadata, data, .. }) => {
                if let Some(lag) = &mut self.lag {
                    lag.seen.insert(lag.key(&metadata));
                }
                if let Some(obj) = decode(&metadata, data, metrics) {
                    self.relist.get_or_insert_with(Vec::new).push(obj);
                }
                None
            }
            watcher::Event::InitDone => Some(Event::Reset(self.relist.take().unwrap_or_default())),
            watcher::Event::Apply(DynamicObject { metadata, data, .. }) => {
                if let Some(lag) = &mut self.lag {
                    lag.applied(&metadata, Timestamp::now());
                }
                decode(&metadata, data, metrics).map(Event::Apply)
            }
            watcher::Event::Delete(DynamicObject { metadata, data, .. }) => {
                if let Some(lag) = &mut self.lag {
                    lag.seen.remove(&lag.key(&metadata));
                }
                // The index deletes by namespace/name, so metadata alone is enough.
                decode(&metadata, data, metrics)
                    .or_else(|| from_parts(&metadata, Value::Object(Map::new())).ok())
                    .map(Event::Delete)
            }
        }
    }
}

// === impl LagTracker ===

impl LagTracker {
    fn new(histogram: Histogram) -> Self {
        Self {
            histogram,
            seen: HashSet::new(),
            hasher: RandomState::new(),
        }
    }

    fn key(&self, metadata: &ObjectMeta) -> u64 {
        self.hasher
            .hash_one((metadata.namespace.as_deref(), metadata.name.as_deref()))
    }

    /// A watch `Apply` at `now`: observed when the object was already seen (an update) and says
    /// when it was last updated; a creation is only remembered.
    fn applied(&mut self, metadata: &ObjectMeta, now: Timestamp) {
        if !self.seen.insert(self.key(metadata))
            && let Some(lag) = informer_lag(metadata, now)
        {
            self.histogram.observe(lag);
        }
    }
}

// === impl WatchBackoff ===

impl WatchBackoff {
    fn new() -> Self {
        Self { base: BACKOFF_MIN }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let base = self.base;
        self.base = (base * 2).min(BACKOFF_MAX_BASE);
        // A fresh `RandomState` hashes with new keys: good enough randomness to spread retries.
        let jitter = RandomState::new().hash_one(()) as f64 / u64::MAX as f64;
        Some(base + base.mul_f64(jitter / 2.0))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.base = BACKOFF_MIN;
    }
}

/// Seconds from the latest `metadata.managedFields[]` entry whose `operation` is `Update` to
/// `now`: how late the watch delivers the update. `None` when no such entry has a `time`.
/// A timestamp ahead of `now` (clock skew with the API server) counts as no lag.
fn informer_lag(metadata: &ObjectMeta, now: Timestamp) -> Option<f64> {
    let latest = metadata
        .managed_fields
        .as_deref()?
        .iter()
        .filter(|entry| entry.operation.as_deref() == Some("Update"))
        .filter_map(|entry| entry.time.as_ref())
        .map(|time| time.0)
        .max()?;
    Some(now.duration_since(latest).as_secs_f64().max(0.0))
}

/// Whether a watcher error is the API server answering `404 Not Found` for the kind's
/// collection: to the list, or to the watch that resumes after a closed one.
fn is_not_found(error: &watcher::Error) -> bool {
    status_code(error) == Some(404)
}

/// The HTTP status code of a watcher error the API server answered with a Status: to the list,
/// to the watch request, or as the first item of the watch stream (how kube reports a watch
/// request's error status).
fn status_code(error: &watcher::Error) -> Option<u16> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => Some(status.code),
        _ => None,
    }
}

/// Decodes one untyped object (its metadata and other fields) into `K`; one that does not
/// decode is logged and counted.
fn decode<K: Watched>(metadata: &ObjectMeta, fields: Value, metrics: &IndexMetrics) -> Option<K> {
    match from_parts::<K>(metadata, fields) {
        Ok(obj) => Some(obj),
        Err(error) => {
            let kind = K::kind(&());
            let namespace = metadata.namespace.as_deref().unwrap_or_default();
            let name = metadata.name.as_deref().unwrap_or_default();
            tracing::warn!(%kind, %namespace, %name, %error, "object does not decode as its kind; skipped");
            metrics.invalid_object(&kind);
            None
        }
    }
}

/// `K` from its metadata and its other fields. List items come without `apiVersion`/`kind`,
/// so both are set from `K`.
fn from_parts<K: Watched>(metadata: &ObjectMeta, fields: Value) -> Result<K, serde_json::Error> {
    let mut fields = match fields {
        Value::Object(fields) => fields,
        _ => Map::new(),
    };
    fields.insert("apiVersion".into(), K::api_version(&()).into());
    fields.insert("kind".into(), K::kind(&()).into());
    fields.insert("metadata".into(), serde_json::to_value(metadata)?);
    let mut object = Value::Object(fields);
    super::fill_defaults::<K>(&mut object);
    serde_json::from_value(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};

    fn at(time: &str) -> Timestamp {
        time.parse().expect("an RFC 3339 timestamp")
    }

    fn entry(operation: &str, time: Option<&str>) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            operation: Some(operation.into()),
            time: time.map(|t| Time(at(t))),
            ..ManagedFieldsEntry::default()
        }
    }

    fn meta(entries: Vec<ManagedFieldsEntry>) -> ObjectMeta {
        ObjectMeta {
            namespace: Some("emojivoto".into()),
            name: Some("web".into()),
            managed_fields: Some(entries),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn lag_is_from_the_latest_update_entry() {
        let now = at("2026-11-02T10:00:30Z");
        let metadata = meta(vec![
            entry("Update", Some("2026-11-02T10:00:00Z")),
            entry("Update", Some("2026-11-02T10:00:27Z")),
            // Server-side apply is not an informer's `Update`.
            entry("Apply", Some("2026-11-02T10:00:29Z")),
            entry("Update", None),
        ]);
        assert_eq!(informer_lag(&metadata, now), Some(3.0));
    }

    #[test]
    fn no_lag_without_an_update_time() {
        let now = at("2026-11-02T10:00:30Z");
        assert_eq!(informer_lag(&ObjectMeta::default(), now), None);
        assert_eq!(informer_lag(&meta(vec![]), now), None);
        let only_apply = meta(vec![entry("Apply", Some("2026-11-02T10:00:00Z"))]);
        assert_eq!(informer_lag(&only_apply, now), None);
        assert_eq!(informer_lag(&meta(vec![entry("Update", None)]), now), None);
    }

    #[test]
    fn a_future_update_time_is_no_lag() {
        let now = at("2026-11-02T10:00:30Z");
        let skewed = meta(vec![entry("Update", Some("2026-11-02T10:00:40Z"))]);
        assert_eq!(informer_lag(&skewed, now), Some(0.0));
    }

    #[test]
    fn only_updates_of_seen_objects_are_observed() {
        let histogram = Histogram::new([1.0]);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("lag", "", histogram.clone());
        let observed = || {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
            text.lines()
                .filter(|l| l.starts_with("lag_sum") || l.starts_with("lag_count"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let mut lag = LagTracker::new(histogram.clone());
        let now = at("2026-11-02T10:00:30Z");
        let metadata = meta(vec![entry("Update", Some("2026-11-02T10:00:28Z"))]);
        lag.applied(&metadata, now);
        assert_eq!(observed(), ["lag_sum 0.0", "lag_count 0"], "a creation");
        lag.applied(&metadata, now);
        assert_eq!(observed(), ["lag_sum 2.0", "lag_count 1"], "an update");
    }
}
