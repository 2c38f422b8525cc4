//! Gateway API kinds are optional at run time (spec/policy.md "Project decisions" 2, §1.5): a
//! kind's objects are listed and watched only while its CustomResourceDefinition exists, at a
//! version the CRD serves, and the watch follows the CRD as it is installed, upgraded and
//! removed, without a restart and without touching any other kind's stream.
//!
//! The CRD itself is listed and watched (never polled) by name
//! (`fieldSelector=metadata.name=<plural>.<group>`), untyped and decoded like any object, so a
//! CRD that does not decode is skipped as absent rather than stopping the watch.

use futures::{
    StreamExt,
    stream::{self, BoxStream},
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject},
    core::Version,
    runtime::watcher,
};
use std::{cmp::Reverse, sync::Arc};

use super::{status_code, watch_resource, with_backoff};
use crate::{metrics::IndexMetrics, model::Kind, source::Event, watches::WatchErrors};

/// The API group whose kinds follow their CRDs.
pub(super) const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// The object events of the version watched.
type ObjectEvents<T> = BoxStream<'static, Event<Arc<T>>>;

/// The events of the CRD watch: one CRD at most, selected by name.
type CrdEvents = BoxStream<'static, Result<watcher::Event<DynamicObject>, watcher::Error>>;

/// The state of one kind that follows its CRD, between the events it yields.
struct Follower<K: Kind> {
    client: Client,
    metrics: IndexMetrics,
    /// Where the CRD watch's and the object watch's errors go besides the log.
    errors: Option<WatchErrors>,
    /// `<plural>.<group>`: the CRD's name.
    crd_name: String,
    crds: CrdEvents,
    /// The CRD of a CRD relist in progress (between `Init` and `InitDone`), if it is listed.
    relist: Option<Option<CustomResourceDefinition>>,
    /// The version watched and its object events; `None` while the CRD is absent.
    watching: Option<(String, ObjectEvents<K::Object>)>,
    /// Whether any event was yielded yet: the first one must be a `Reset`, so that the index
    /// counts the kind as synced (and empty) while its CRD is absent.
    started: bool,
}

/// What woke the follower.
// Lives on the stack for one wake-up and is matched at once: boxing would only add allocations.
#[allow(clippy::large_enum_variant)]
enum Step<T> {
    Crd(Option<Result<watcher::Event<DynamicObject>, watcher::Error>>),
    Objects(Option<Event<T>>),
}

/// The events of Gateway API kind `K`, following its CRD:
///
/// - CRD absent (or not `Established`, or serving no version): one `Reset(vec![])`, so the
///   index counts the kind as synced and empty; nothing is watched until the CRD appears.
/// - CRD present: `K` is listed and watched (as [`super::KubeSource`] watches any kind) at the
///   served version that `K` is written for, else the highest-priority served one
///   (v1 > v1beta1 > v1alpha2, Kubernetes version priority); its first list is a `Reset`.
/// - CRD changed to serve another version: the old watch stops and one starts at the new
///   version; its first list is a `Reset`, so anything gone meanwhile is removed.
/// - CRD removed: the watch stops and `Reset(vec![])` is yielded at once.
///
/// If the CRDs cannot be listed (`403`: RBAC without `customresourcedefinitions`; `404`: an API
/// server without `apiextensions.k8s.io/v1`), the kind is watched at `K`'s own version instead,
/// served empty while that answers `404`, as before CRDs were followed.
pub(super) fn follow<K: Kind>(
    client: Client,
    metrics: IndexMetrics,
    errors: Option<WatchErrors>,
) -> BoxStream<'static, Event<Arc<K::Object>>> {
    let crd_name = format!("{}.{}", K::plural(&()), K::group(&()));
    let crds = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::erase::<CustomResourceDefinition>(&()),
    );
    let config = watcher::Config::default().fields(&format!("metadata.name={crd_name}"));
    let crds = with_backoff(watcher(crds, config).boxed()).boxed();
    let follower = Follower::<K> {
        client,
        metrics,
        errors,
        crd_name,
        crds,
        relist: None,
        watching: None,
        started: false,
    };
    stream::unfold(follower, |mut follower| async move {
        let event = follower.next().await;
        Some((event, follower))
    })
    .boxed()
}

/// The version of `K` to watch as `crd` defines it, or why there is none.
fn served_version<K: Kind>(crd: &CustomResourceDefinition) -> Result<String, String> {
    let spec = &crd.spec;
    if spec.group != K::group(&()) || spec.names.kind != K::kind(&()) {
        return Err(format!(
            "defines {}.{}, not {}",
            spec.names.kind,
            spec.group,
            K::kind(&())
        ));
    }
    let established = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Established"));
    if let Some(condition) = established
        && condition.status != "True"
    {
        return Err(format!("not established ({})", condition.status));
    }
    let served: Vec<&str> = spec
        .versions
        .iter()
        .filter(|v| v.served)
        .map(|v| v.name.as_str())
        .collect();
    let own = K::version(&());
    if served.contains(&own.as_ref()) {
        return Ok(own.into_owned());
    }
    served
        .into_iter()
        .min_by_key(|v| Reverse(Version::parse(v).priority()))
        .map(str::to_string)
        .ok_or_else(|| "serves no version".to_string())
}

// === impl Follower ===

impl<K: Kind> Follower<K> {
    /// The next event of `K`. CRD events are handled first, so that a removal stops the
    /// object watch before anything more of it is delivered.
    async fn next(&mut self) -> Event<Arc<K::Object>> {
        loop {
            let step = match &mut self.watching {
                Some((_, objects)) => tokio::select! {
                    biased;
                    event = self.crds.next() => Step::Crd(event),
                    event = objects.next() => Step::Objects(event),
                },
                None => Step::Crd(self.crds.next().await),
            };
            match step {
                Step::Crd(Some(event)) => {
                    if let Some(event) = self.crd_event(event) {
                        self.started = true;
                        return event;
                    }
                }
                // A watcher does not end; if it did, keep watching what is watched now.
                Step::Crd(None) => self.crds = stream::pending().boxed(),
                Step::Objects(Some(event)) => {
                    self.started = true;
                    return event;
                }
                Step::Objects(None) => {
                    tracing::warn!(kind = %K::LABEL, "object watch ended");
                    self.watching = None;
                }
            }
        }
    }

    /// Folds one CRD watcher event; a relist is buffered until `InitDone`.
    fn crd_event(
        &mut self,
        event: Result<watcher::Event<DynamicObject>, watcher::Error>,
    ) -> Option<Event<Arc<K::Object>>> {
        let kind = K::LABEL;
        match event {
            Err(error) if matches!(status_code(&error), Some(403 | 404)) => {
                tracing::warn!(
                    %kind, crd = %self.crd_name, %error,
                    "cannot watch CustomResourceDefinitions; watching the kind at its own version"
                );
                self.crds = stream::pending().boxed();
                self.watch(K::version(&()).into_owned(), false);
                None
            }
            Err(error) => {
                tracing::warn!(%kind, crd = %self.crd_name, %error, "CRD watch failed; retrying with backoff");
                if let Some(errors) = &self.errors {
                    errors.failed(&error);
                }
                None
            }
            Ok(watcher::Event::Init) => {
                self.relist = Some(None);
                None
            }
            Ok(watcher::Event::InitApply(crd)) => {
                let crd = self.decode(crd);
                self.relist = Some(crd);
                None
            }
            Ok(watcher::Event::InitDone) => {
                let crd = self.relist.take().flatten();
                self.crd_changed(crd.as_ref())
            }
            Ok(watcher::Event::Apply(crd)) => {
                let crd = self.decode(crd);
                self.crd_changed(crd.as_ref())
            }
            Ok(watcher::Event::Delete(_)) => self.crd_changed(None),
        }
    }

    /// The CRD of the kind's own name, if it is one and decodes; one that does not is logged
    /// and counted, and treated as absent.
    fn decode(&self, crd: DynamicObject) -> Option<CustomResourceDefinition> {
        if crd.metadata.name.as_deref() != Some(self.crd_name.as_str()) {
            return None;
        }
        let document = serde_json::to_value(&crd).ok()?;
        match serde_path_to_error::deserialize::<_, CustomResourceDefinition>(&document) {
            Ok(crd) => Some(crd),
            Err(error) => {
                tracing::warn!(crd = %self.crd_name, %error, "CRD does not decode; treating it as absent");
                self.metrics.invalid_object("CustomResourceDefinition");
                None
            }
        }
    }

    /// Starts, restarts or stops the object watch for the CRD as it is now (`None`: absent).
    fn crd_changed(
        &mut self,
        crd: Option<&CustomResourceDefinition>,
    ) -> Option<Event<Arc<K::Object>>> {
        let kind = K::LABEL;
        let crd_name = &self.crd_name;
        let version = match crd.map(served_version::<K>) {
            Some(Ok(version)) => Some(version),
            Some(Err(why)) => {
                tracing::warn!(%kind, crd = %crd_name, %why, "CRD unusable; serving none");
                None
            }
            None => None,
        };
        let watched = self.watching.as_ref().map(|(v, _)| v.clone());
        match (watched, version) {
            (Some(old), Some(new)) if old == new => None,
            (old, Some(new)) => {
                match old {
                    None => {
                        tracing::info!(%kind, crd = %crd_name, version = %new, "CRD installed; watching")
                    }
                    Some(old) => {
                        tracing::info!(%kind, crd = %crd_name, %old, %new, "CRD serves another version; watching it")
                    }
                }
                // Until the new version lists, keep what the old one delivered: the same
                // objects, converted by the API server.
                let keep = self.started;
                self.watch(new, keep);
                None
            }
            (Some(_), None) => {
                tracing::info!(%kind, crd = %crd_name, "CRD removed or unusable; serving none until it is back");
                self.watching = None;
                Some(Event::Reset(Vec::new()))
            }
            (None, None) if !self.started => {
                tracing::info!(%kind, crd = %crd_name, "CRD not installed; serving none until it appears");
                Some(Event::Reset(Vec::new()))
            }
            (None, None) => None,
        }
    }

    /// Lists and watches `K` at `version` from now on; a previous watch stops when dropped.
    /// With `keep_until_listed`, a `404` before the first list yields nothing (the CRD said
    /// the version is served; the API server may lag behind it for a moment).
    fn watch(&mut self, version: String, keep_until_listed: bool) {
        let mut resource = ApiResource::erase::<K>(&());
        resource.api_version = format!("{}/{version}", resource.group);
        resource.version = version.clone();
        let objects = watch_resource::<K>(
            &self.client,
            resource,
            &crate::watches::WatchScope::default(),
            self.metrics.clone(),
            keep_until_listed,
            self.errors.clone(),
        );
        self.watching = Some((version, objects));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linkerd_k8s_api::gateway_api::{experimental::tlsroutes::TlsRoute, httproutes::HttpRoute};
    use serde_json::json;

    fn mk_crd(
        kind: &str,
        plural: &str,
        versions: &[(&str, bool)],
        established: Option<&str>,
    ) -> CustomResourceDefinition {
        let versions: Vec<_> = versions
            .iter()
            .map(|(name, served)| json!({"name": name, "served": served, "storage": false}))
            .collect();
        let mut crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{GATEWAY_GROUP}")},
            "spec": {
                "group": GATEWAY_GROUP,
                "names": {"kind": kind, "plural": plural},
                "scope": "Namespaced",
                "versions": versions,
            },
        });
        if let Some(status) = established {
            crd["status"] = json!({"conditions": [
                {"type": "NamesAccepted", "status": "True"},
                {"type": "Established", "status": status},
            ]});
        }
        serde_json::from_value(crd).expect("a CRD")
    }

    #[test]
    fn the_typed_version_is_preferred_when_served() {
        let crd = mk_crd(
            "HTTPRoute",
            "httproutes",
            &[("v1beta1", true), ("v1", true)],
            Some("True"),
        );
        assert_eq!(served_version::<HttpRoute>(&crd), Ok("v1".to_string()));
    }

    #[test]
    fn otherwise_the_highest_priority_served_version() {
        let crd = mk_crd(
            "HTTPRoute",
            "httproutes",
            &[("v1alpha2", true), ("v1beta1", true), ("v1", false)],
            None,
        );
        assert_eq!(served_version::<HttpRoute>(&crd), Ok("v1beta1".to_string()));
        // TLSRoute is typed at v1 (gateway-api 0.22); an older CRD is watched at its newest.
        let crd = mk_crd(
            "TLSRoute",
            "tlsroutes",
            &[("v1alpha2", true), ("v1alpha3", true)],
            None,
        );
        assert_eq!(served_version::<TlsRoute>(&crd), Ok("v1alpha3".to_string()));
        let crd = mk_crd(
            "TLSRoute",
            "tlsroutes",
            &[("v1alpha2", false), ("v1alpha3", true), ("v1", true)],
            None,
        );
        assert_eq!(served_version::<TlsRoute>(&crd), Ok("v1".to_string()));
    }

    #[test]
    fn unusable_crds_are_absent() {
        let none_served = mk_crd("HTTPRoute", "httproutes", &[("v1", false)], None);
        assert_eq!(
            served_version::<HttpRoute>(&none_served),
            Err("serves no version".to_string())
        );
        let pending = mk_crd("HTTPRoute", "httproutes", &[("v1", true)], Some("False"));
        assert_eq!(
            served_version::<HttpRoute>(&pending),
            Err("not established (False)".to_string())
        );
        let other = mk_crd("GRPCRoute", "httproutes", &[("v1", true)], None);
        assert_eq!(
            served_version::<HttpRoute>(&other),
            Err("defines GRPCRoute.gateway.networking.k8s.io, not HTTPRoute".to_string())
        );
    }
}
