//! The `kube` source: kube-runtime watchers (list + watch, resourceVersion resume, exponential
//! backoff, and a relist after `410 Gone`), turned into [`Event`]s.
//!
//! Two robustness rules sit between the watcher and the index:
//!
//! - Objects are listed and watched untyped ([`kube::core::DynamicObject`]) and decoded into `K` one by
//!   one, so a malformed object is logged with its namespace/name, counted in
//!   `index_invalid_objects_total{cluster,kind}` and skipped, and never fails the list of every object
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

use futures::{Stream, StreamExt, stream::BoxStream};
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, Client,
    api::ApiResource,
    core::{DynamicResourceScope, ObjectMeta},
    runtime::watcher,
};
use prometheus_client::metrics::histogram::Histogram;
use serde::{Deserialize, Deserializer, de::Error as _};
use serde_json::value::RawValue;
use std::{
    borrow::Cow,
    collections::{HashMap, HashSet},
    hash::{BuildHasher, RandomState},
    sync::Arc,
    time::Duration,
};

use super::Event;
use crate::{
    metrics::IndexMetrics,
    model::{DecodeError, Kind, ObjectRef, decode_json},
    watches::{WatchErrors, WatchScope},
};

mod crd;

/// Watches a Kubernetes API server with a [`kube::Client`].
#[derive(Clone)]
pub struct KubeSource {
    client: Client,
    metrics: IndexMetrics,
}

/// One object as the API server sent it, decoded into its kind's object as it arrives: the
/// document itself is dropped at once, whatever the rest of its page holds.
///
/// It stands for the kind in kube-runtime's watcher, which needs a [`kube::Resource`] with
/// metadata: that is the object's namespace, name and resource version only.
struct Received<K: Kind> {
    metadata: ObjectMeta,
    /// When the object was last updated: the latest `managedFields` entry of an `Update`.
    updated: Option<Timestamp>,
    decoded: Result<Arc<K::Object>, DecodeError>,
}

/// What is read of every received document besides its kind's fields.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Header {
    metadata: HeaderMetadata,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct HeaderMetadata {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    managed_fields: Option<Vec<ManagedField>>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct ManagedField {
    operation: Option<String>,
    time: Option<Timestamp>,
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
struct WatchState<K: Kind> {
    /// The objects of a relist in progress (between `Init` and `InitDone`).
    relist: Option<Vec<Arc<K::Object>>>,
    served: Served,
    /// Whether a `404` while `served` is `Unknown` yields nothing instead of an empty `Reset`.
    keep_until_listed: bool,
    /// For a kind with an informer-lag histogram: what it takes to observe it.
    lag: Option<LagTracker>,
    /// Where errors other than `404` go besides the log: readiness's reason.
    errors: Option<WatchErrors>,
    /// Objects skipped as invalid, with why, so that a relist does not log them again.
    invalid: HashMap<ObjectRef, DecodeError>,
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
///
/// It starts over once the watch gets an answer: an object, the end of a list, a watch event.
/// Not on `Event::Init`, which the watcher yields before each list it tries: kube-runtime's
/// stream backoff resets on every item, so through it the delay never grew past 800 ms, and an
/// API server that refused connections got every kind's error logged about once a second
/// (newcomer finding). [`with_backoff`] applies it.
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

    /// The events of kind `K` (only objects matching `label_selector`, when given), decoded
    /// object by object.
    ///
    /// - An object that does not decode or convert is logged (kind, namespace/name, why),
    ///   counted and skipped: a relist's `Reset` carries the others, so an earlier good version
    ///   of it is dropped; an `Apply` of it is dropped, so the index keeps the earlier version,
    ///   except for kinds whose invalid updates remove ([`Kind::INVALID_REMOVES`]), which get a
    ///   `Delete`. A `Delete` needs only the namespace/name, so it is always delivered.
    /// - Kinds that only feed owner and zone lookups ([`Kind::METADATA_ONLY`]) are listed and
    ///   watched as `PartialObjectMetadata`: the API server sends their metadata only.
    /// - A `404` on a list or watch (a CRD not installed, or removed) yields one
    ///   `Reset(vec![])`, so the index counts the kind as synced and empty; the watcher keeps
    ///   retrying within 30 s, and the first successful list yields the usual `Reset`. Each
    ///   change (missing, appeared, removed) is logged once.
    /// - Other errors are logged as warnings and retried with the same backoff.
    /// - A Gateway API kind (group `gateway.networking.k8s.io`) follows its
    ///   CustomResourceDefinition instead (spec/policy.md "Project decisions" 2): it is listed
    ///   and watched at the version the CRD serves, from when the CRD appears, again from the
    ///   first list when the version changes, and served empty at once when the CRD goes.
    pub fn events<K: Kind>(
        &self,
        label_selector: Option<&str>,
    ) -> BoxStream<'static, Event<Arc<K::Object>>> {
        self.events_in::<K>(&WatchScope {
            labels: label_selector.map(str::to_string),
            ..WatchScope::default()
        })
    }

    /// The events of kind `K` in `scope` (a namespace, label and field selectors), as
    /// [`KubeSource::events`] describes. Gateway API kinds ignore the scope.
    pub fn events_in<K: Kind>(
        &self,
        scope: &WatchScope,
    ) -> BoxStream<'static, Event<Arc<K::Object>>> {
        self.events_reporting::<K>(scope, None)
    }

    /// [`KubeSource::events_in`], reporting each error the watch retries after (not a `404`,
    /// which is an answer) to `errors` as well as logging it: `/ready` names it.
    pub(crate) fn events_reporting<K: Kind>(
        &self,
        scope: &WatchScope,
        errors: Option<WatchErrors>,
    ) -> BoxStream<'static, Event<Arc<K::Object>>> {
        if K::group(&()) == crd::GATEWAY_GROUP {
            return crd::follow::<K>(self.client.clone(), self.metrics.clone(), errors);
        }
        let resource = ApiResource::erase::<K>(&());
        watch_resource::<K>(
            &self.client,
            resource,
            scope,
            self.metrics.clone(),
            false,
            errors,
        )
    }
}

/// The events of kind `K` listed and watched at `resource` (the kind's group, plural and one
/// of its served versions), decoded as [`KubeSource::events`] describes.
///
/// With `keep_until_listed`, a `404` before the first successful list yields nothing (the
/// consumer keeps what it has, e.g. the objects of the version watched before) rather than an
/// empty `Reset`; the list is retried with the same backoff. Errors other than `404` go to
/// `errors` too.
fn watch_resource<K: Kind>(
    client: &Client,
    resource: ApiResource,
    scope: &WatchScope,
    metrics: IndexMetrics,
    keep_until_listed: bool,
    errors: Option<WatchErrors>,
) -> BoxStream<'static, Event<Arc<K::Object>>> {
    let api = match &scope.namespace {
        Some(namespace) => {
            Api::<Received<K>>::namespaced_with(client.clone(), namespace, &resource)
        }
        None => Api::<Received<K>>::all_with(client.clone(), &resource),
    };
    let mut config = watcher::Config::default();
    if let Some(selector) = &scope.labels {
        config = config.labels(selector);
    }
    if let Some(selector) = &scope.fields {
        config = config.fields(selector);
    }
    let events = with_backoff(watcher(api, config).boxed());
    let state = WatchState::<K> {
        relist: None,
        served: Served::Unknown,
        keep_until_listed,
        lag: metrics.informer_lag(K::LABEL).map(LagTracker::new),
        errors,
        invalid: HashMap::new(),
    };
    events
        .scan(state, move |state, event| {
            let out = state.step(event, &metrics);
            futures::future::ready(Some(out))
        })
        .filter_map(futures::future::ready)
        .boxed()
}

// === impl Received ===

impl<K: Kind> Received<K> {
    fn key(&self) -> Option<ObjectRef> {
        Some(ObjectRef {
            namespace: self.metadata.namespace.clone().unwrap_or_default(),
            name: self.metadata.name.clone()?,
        })
    }
}

impl<K: Kind> Clone for Received<K> {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            updated: self.updated,
            decoded: self.decoded.clone(),
        }
    }
}

impl<K: Kind> std::fmt::Debug for Received<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Received")
            .field("kind", &K::LABEL)
            .field("namespace", &self.metadata.namespace)
            .field("name", &self.metadata.name)
            .field("decoded", &self.decoded.as_ref().map(|_| ()))
            .finish()
    }
}

impl<'de, K: Kind> Deserialize<'de> for Received<K> {
    /// Takes the document as text (serde_json's `RawValue`), reads its header, and decodes it
    /// into `K`'s object: a document that does not fit its kind fails alone, not its page.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let document = Box::<RawValue>::deserialize(deserializer)?;
        let header: Header = serde_json::from_str(document.get()).map_err(D::Error::custom)?;
        let metadata = header.metadata;
        let updated = metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|entry| entry.operation.as_deref() == Some("Update"))
            .filter_map(|entry| entry.time)
            .max();
        let decoded = decode_json::<K>(document.get()).map(Arc::new);
        Ok(Self {
            metadata: ObjectMeta {
                name: metadata.name,
                namespace: metadata.namespace,
                resource_version: metadata.resource_version,
                ..ObjectMeta::default()
            },
            updated,
            decoded,
        })
    }
}

impl<K: Kind> kube::Resource for Received<K> {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn metadata_api() -> bool {
        K::METADATA_ONLY
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

// === impl WatchState ===

impl<K: Kind> WatchState<K> {
    /// Folds one watcher event into at most one [`Event`]. A relist arrives as `Init`,
    /// `InitApply`..., `InitDone`: it is buffered into one `Reset` so the index can tell what
    /// vanished while the watch was down.
    fn step(
        &mut self,
        event: Result<watcher::Event<Received<K>>, watcher::Error>,
        metrics: &IndexMetrics,
    ) -> Option<Event<Arc<K::Object>>> {
        let kind = K::LABEL;
        // An error status (a CRD not installed, RBAC) is an answer too; only an error without
        // one (connection refused or reset, a timeout) says the API server is unreachable.
        metrics.api_answered(
            event
                .as_ref()
                .map_or_else(|e| status_code(e).is_some(), |_| true),
        );
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
                if let Some(errors) = &self.errors {
                    errors.failed(&error);
                }
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
            watcher::Event::InitApply(obj) => {
                if let Some(lag) = &mut self.lag {
                    lag.seen.insert(lag.key(&obj.metadata));
                }
                if let Some(decoded) = self.decoded(obj, metrics) {
                    self.relist.get_or_insert_with(Vec::new).push(decoded);
                }
                None
            }
            watcher::Event::InitDone => {
                let objects = self.relist.take().unwrap_or_default();
                Some(Event::Reset(objects))
            }
            watcher::Event::Apply(obj) => {
                if let Some(lag) = &mut self.lag {
                    lag.applied(&obj.metadata, obj.updated, Timestamp::now());
                }
                let key = obj.key();
                match self.decoded(obj, metrics) {
                    Some(decoded) => Some(Event::Apply(decoded)),
                    None if K::INVALID_REMOVES => key.map(Event::Delete),
                    None => None,
                }
            }
            watcher::Event::Delete(obj) => {
                if let Some(lag) = &mut self.lag {
                    lag.seen.remove(&lag.key(&obj.metadata));
                }
                let key = obj.key()?;
                self.invalid.remove(&key);
                Some(Event::Delete(key))
            }
        }
    }

    /// The object `obj` decoded into, or `None` when it did not: then it is logged and counted,
    /// once per distinct problem (a relist delivers it again unchanged).
    fn decoded(&mut self, obj: Received<K>, metrics: &IndexMetrics) -> Option<Arc<K::Object>> {
        let key = obj.key();
        match obj.decoded {
            Ok(decoded) => {
                if let Some(key) = key {
                    self.invalid.remove(&key);
                }
                Some(decoded)
            }
            Err(error) => {
                let namespace = obj.metadata.namespace.as_deref().unwrap_or_default();
                let name = obj.metadata.name.as_deref().unwrap_or_default();
                let repeated = key
                    .map(|key| self.invalid.insert(key, error.clone()))
                    .is_some_and(|old| old.as_ref() == Some(&error));
                if !repeated {
                    tracing::warn!(kind = %K::LABEL, %namespace, %name, %error, "skipping object");
                    metrics.invalid_object(K::LABEL);
                }
                None
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

    /// A watch `Apply` at `now` of an object last updated at `updated`: observed when the
    /// object was already seen (an update); a creation is only remembered.
    fn applied(&mut self, metadata: &ObjectMeta, updated: Option<Timestamp>, now: Timestamp) {
        if !self.seen.insert(self.key(metadata))
            && let Some(lag) = informer_lag(updated, now)
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

    fn reset(&mut self) {
        self.base = BACKOFF_MIN;
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

/// `events` (a kind's watcher) with a [`WatchBackoff`] delay before each retry that follows an
/// error, started over once the watch gets an answer (not on `Event::Init`).
fn with_backoff<K: Send + 'static>(
    events: BoxStream<'static, watcher::Result<watcher::Event<K>>>,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send {
    let state = (events, WatchBackoff::new(), None::<Duration>);
    futures::stream::unfold(state, |(mut events, mut backoff, delay)| async move {
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        let event = events.next().await?;
        let delay = match &event {
            Err(_) => backoff.next(),
            Ok(watcher::Event::Init) => None,
            Ok(_) => {
                backoff.reset();
                None
            }
        };
        Some((event, (events, backoff, delay)))
    })
}

/// Seconds from `updated` (an object's latest `managedFields` `Update`) to `now`: how late the
/// watch delivers the update. `None` without an update time. A time ahead of `now` (clock skew
/// with the API server) counts as no lag.
fn informer_lag(updated: Option<Timestamp>, now: Timestamp) -> Option<f64> {
    Some(now.duration_since(updated?).as_secs_f64().max(0.0))
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    /// A failing watch waits longer each retry even though the watcher yields `Event::Init`
    /// before each list it tries, and starts over once it gets an answer (newcomer finding: the
    /// delay stayed at 800 ms, and a refused API server got about one error line a second per
    /// kind).
    #[tokio::test(start_paused = true)]
    async fn a_failing_watch_waits_longer_each_retry() {
        type Item = watcher::Result<watcher::Event<()>>;
        let failure = || -> Item { Err(watcher::Error::NoResourceVersion) };
        let mut items: Vec<Item> = Vec::new();
        for _ in 0..7 {
            items.push(Ok(watcher::Event::Init));
            items.push(failure());
        }
        // Answered: a list that ends, then one more failure.
        items.push(Ok(watcher::Event::Init));
        items.push(Ok(watcher::Event::InitDone));
        items.push(failure());
        items.push(Ok(watcher::Event::Init));
        let mut events = Box::pin(with_backoff(futures::stream::iter(items).boxed()));
        let mut waits = Vec::new();
        let mut last = tokio::time::Instant::now();
        while let Some(item) = events.next().await {
            if matches!(item, Ok(watcher::Event::Init)) {
                waits.push(last.elapsed());
            }
            last = tokio::time::Instant::now();
        }
        // Before each `Init`: nothing first, then each failure's delay (its base plus up to
        // half again): 0.8, 1.6, 3.2, 6.4, 12.8, 20, 20 s; after the answered list, 0.8 s again.
        let bases = [0, 800, 1_600, 3_200, 6_400, 12_800, 20_000, 20_000, 800];
        assert_eq!(waits.len(), bases.len(), "{waits:?}");
        for (wait, base_ms) in waits.iter().zip(bases) {
            let base = Duration::from_millis(base_ms);
            assert!(*wait >= base && *wait <= base.mul_f64(1.5), "{waits:?}");
        }
    }

    fn at(time: &str) -> Timestamp {
        time.parse().expect("an RFC 3339 timestamp")
    }

    /// A pod document with these `managedFields` entries, received.
    fn received(entries: serde_json::Value) -> Received<Pod> {
        let pod = json!({
            "metadata": {
                "namespace": "emojivoto",
                "name": "web",
                "resourceVersion": "42",
                "managedFields": entries,
            },
        });
        serde_json::from_value(pod).expect("a received document")
    }

    fn entry(operation: &str, time: Option<&str>) -> serde_json::Value {
        json!({"manager": "kubectl", "operation": operation, "time": time})
    }

    #[test]
    fn lag_is_from_the_latest_update_entry() {
        let now = at("2026-11-02T10:00:30Z");
        let pod = received(json!([
            entry("Update", Some("2026-11-02T10:00:00Z")),
            entry("Update", Some("2026-11-02T10:00:27Z")),
            // Server-side apply is not an informer's `Update`.
            entry("Apply", Some("2026-11-02T10:00:29Z")),
            entry("Update", None),
        ]));
        assert_eq!(informer_lag(pod.updated, now), Some(3.0));
        assert_eq!(pod.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(pod.key().unwrap().name, "web");
        assert_eq!(pod.decoded.unwrap().name, "web");
    }

    #[test]
    fn no_lag_without_an_update_time() {
        let now = at("2026-11-02T10:00:30Z");
        assert_eq!(informer_lag(received(json!(null)).updated, now), None);
        assert_eq!(informer_lag(received(json!([])).updated, now), None);
        let only_apply = received(json!([entry("Apply", Some("2026-11-02T10:00:00Z"))]));
        assert_eq!(informer_lag(only_apply.updated, now), None);
        let no_time = received(json!([entry("Update", None)]));
        assert_eq!(informer_lag(no_time.updated, now), None);
    }

    #[test]
    fn a_future_update_time_is_no_lag() {
        let now = at("2026-11-02T10:00:30Z");
        let skewed = received(json!([entry("Update", Some("2026-11-02T10:00:40Z"))]));
        assert_eq!(informer_lag(skewed.updated, now), Some(0.0));
    }

    #[test]
    fn a_document_that_does_not_decode_fails_alone() {
        let list = r#"{"metadata": {"resourceVersion": "7"}, "items": [
            {"metadata": {"name": "good", "namespace": "ns"}, "spec": {"nodeName": "n1"}},
            {"metadata": {"name": "bad", "namespace": "ns"}, "spec": {"containers": [{"name": "app", "ports": [{"containerPort": "eighty"}]}]}}
        ]}"#;
        let list: kube::core::ObjectList<Received<Pod>> =
            serde_json::from_str(list).expect("the list decodes");
        assert_eq!(list.items.len(), 2);
        let good = list.items[0].decoded.as_ref().expect("the good pod");
        assert_eq!(good.node_name.as_deref(), Some("n1"));
        match &list.items[1].decoded {
            Err(DecodeError::Malformed(why)) => {
                assert!(
                    why.contains("spec.containers[0].ports[0].containerPort"),
                    "{why}"
                )
            }
            other => panic!("expected a decode error, got {other:?}"),
        }
        assert_eq!(list.items[1].key().unwrap().name, "bad");
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
        let pod = received(json!([entry("Update", Some("2026-11-02T10:00:28Z"))]));
        lag.applied(&pod.metadata, pod.updated, now);
        assert_eq!(observed(), ["lag_sum 0.0", "lag_count 0"], "a creation");
        lag.applied(&pod.metadata, pod.updated, now);
        assert_eq!(observed(), ["lag_sum 2.0", "lag_count 1"], "an update");
    }
}
