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

use futures::{StreamExt, stream::BoxStream};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject},
    core::ObjectMeta,
    runtime::{WatchStreamExt, utils::Backoff, watcher},
};
use serde_json::{Map, Value};
use std::{
    hash::{BuildHasher, RandomState},
    time::Duration,
};

use super::{Event, Source, Watched};
use crate::metrics::IndexMetrics;

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
    fn events<K: Watched>(&self) -> BoxStream<'static, Event<K>> {
        let resource = ApiResource::erase::<K>(&());
        let api = Api::<DynamicObject>::all_with(self.client.clone(), &resource);
        let metrics = self.metrics.clone();
        let events = watcher(api, watcher::Config::default()).backoff(WatchBackoff::new());
        let state = WatchState {
            relist: None,
            served: Served::Unknown,
        };
        events
            .scan(state, move |state, event| {
                let out = state.step(event, &metrics);
                futures::future::ready(Some(out))
            })
            .filter_map(futures::future::ready)
            .boxed()
    }
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
                let was = std::mem::replace(&mut self.served, Served::NotFound);
                return match was {
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
                None
            }
            watcher::Event::InitApply(DynamicObject { metadata, data, .. }) => {
                if let Some(obj) = decode(&metadata, data, metrics) {
                    self.relist.get_or_insert_with(Vec::new).push(obj);
                }
                None
            }
            watcher::Event::InitDone => Some(Event::Reset(self.relist.take().unwrap_or_default())),
            watcher::Event::Apply(DynamicObject { metadata, data, .. }) => {
                decode(&metadata, data, metrics).map(Event::Apply)
            }
            watcher::Event::Delete(DynamicObject { metadata, data, .. }) => {
                // The index deletes by namespace/name, so metadata alone is enough.
                decode(&metadata, data, metrics)
                    .or_else(|| from_parts(&metadata, Value::Object(Map::new())).ok())
                    .map(Event::Delete)
            }
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

/// Whether a watcher error is the API server answering `404 Not Found` for the kind's
/// collection: to the list, or to the watch that resumes after a closed one (kube reports a
/// watch request's error status as the first item of its stream).
fn is_not_found(error: &watcher::Error) -> bool {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status,
        _ => return false,
    };
    status.code == 404
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
    serde_json::from_value(Value::Object(fields))
}
