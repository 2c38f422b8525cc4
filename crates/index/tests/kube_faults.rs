//! The `kube` source under API server faults, end to end against the scripted loopback API
//! server (`fake_apiserver`): a watch cut mid-event, `410 Gone` with objects added and
//! deleted while disconnected, the API server down at start, lists that take seconds, and a
//! CRD deleted and recreated.
//!
//! Each scenario ends the same way: a fresh index is started over the server's final state,
//! and every subscription of the index that lived through the faults must converge to what
//! the fresh index's subscriber of the same key sees. A failure names each key's stale
//! addresses (served but no longer in the cluster) and missing ones (in the cluster but not
//! served), or the profile that differs. Waits are bounded by [`TIMEOUT`], never sleeps.

mod fake_apiserver;

use fake_apiserver::{FakeApi, PODS, RESOURCES, SERVICE_PROFILES, SERVICES, SLICES, TIMEOUT};
use linkerd_index::{
    ClusterSource, DiscoveryIndex, EndpointsKey, EndpointsView, IndexMetrics, ObjectRef, Readiness,
    ServiceProfileKey, Started, Watches, discovery::profiles::ServiceProfileView,
    source::kube::KubeSource,
};
use serde_json::{Value, json};
use std::{collections::BTreeSet, net::SocketAddr, time::Duration};

const NS: &str = "shop";

/// The Services of the scenarios, each with a port 80 → 8080.
const SERVICE_NAMES: [&str; 3] = ["web", "api", "db"];

/// Every subscription a proxy of the scenarios would hold: each Service's endpoints and
/// profile.
struct Subscriptions {
    endpoints: Vec<(EndpointsKey, linkerd_index::topic::Receiver<EndpointsView>)>,
    profiles: Vec<(
        ServiceProfileKey,
        linkerd_index::topic::Receiver<ServiceProfileView>,
    )>,
}

impl Subscriptions {
    fn new(index: &DiscoveryIndex) -> Self {
        Self {
            endpoints: SERVICE_NAMES
                .iter()
                .map(|name| {
                    let key = endpoints_key(name);
                    (key.clone(), index.endpoints(key))
                })
                .collect(),
            profiles: SERVICE_NAMES
                .iter()
                .map(|name| {
                    let key = profile_key(name);
                    (key.clone(), index.service_profile(key))
                })
                .collect(),
        }
    }

    /// How these subscriptions differ from `fresh`'s (same keys), one line per key; empty
    /// when equal.
    fn differences(&self, fresh: &Self) -> Vec<String> {
        let mut out = Vec::new();
        for ((key, rx), (_, fresh_rx)) in self.endpoints.iter().zip(&fresh.endpoints) {
            let (served, wanted) = (rx.borrow().clone(), fresh_rx.borrow().clone());
            if served != wanted {
                let (served_addrs, wanted_addrs) = (addrs(&served), addrs(&wanted));
                let stale: Vec<_> = served_addrs.difference(&wanted_addrs).collect();
                let missing: Vec<_> = wanted_addrs.difference(&served_addrs).collect();
                out.push(format!(
                    "endpoints of {}: stale {stale:?}, missing {missing:?}, service exists {} (fresh: {})",
                    key.service.name,
                    served.exists(),
                    wanted.exists(),
                ));
            }
        }
        for ((key, rx), (_, fresh_rx)) in self.profiles.iter().zip(&fresh.profiles) {
            let (served, wanted) = (rx.borrow().clone(), fresh_rx.borrow().clone());
            if served != wanted {
                out.push(format!(
                    "profile of {}: served {served:?}, fresh {wanted:?}",
                    key.service.name
                ));
            }
        }
        out
    }

    /// Waits until any subscription publishes a new view.
    async fn changed(&mut self) {
        let endpoints = self.endpoints.iter_mut().map(|(_, rx)| {
            Box::pin(async {
                let _ = rx.changed().await;
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>
        });
        let profiles = self.profiles.iter_mut().map(|(_, rx)| {
            Box::pin(async {
                let _ = rx.changed().await;
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>
        });
        futures::future::select_all(endpoints.chain(profiles)).await;
    }
}

/// Starts a fresh index over `api`'s current state and waits until `subs` (of the index that
/// lived through the faults) equal its subscriptions; fails naming every difference left after
/// [`TIMEOUT`].
async fn assert_converges_to_fresh_index(api: &FakeApi, subs: &mut Subscriptions) {
    let fresh = DiscoveryIndex::new();
    let _fresh_watches = start_ready(&fresh, api).await;
    let fresh_subs = Subscriptions::new(&fresh);
    let converged = tokio::time::timeout(TIMEOUT, async {
        loop {
            if subs.differences(&fresh_subs).is_empty() {
                return;
            }
            subs.changed().await;
        }
    })
    .await;
    if converged.is_err() {
        panic!(
            "the served state differs from a fresh index over the final state:\n{}",
            subs.differences(&fresh_subs).join("\n")
        );
    }
    // The fresh index saw what the scenario left: a scenario that ends with nothing served
    // would compare nothing.
    assert!(
        fresh_subs
            .endpoints
            .iter()
            .any(|(_, rx)| !rx.borrow().endpoints.is_empty()),
        "the final state serves no endpoints"
    );
}

#[tokio::test]
async fn watch_cut_mid_event_resumes_and_applies_the_event() {
    let api = start_api().await;
    let index = DiscoveryIndex::new();
    let _watches = start_ready(&index, &api).await;
    let mut subs = Subscriptions::new(&index);
    let before_cut = api.requests_to(SLICES, true).len();

    // web's slice gains web-3 in an event the watch sees only half of.
    api.apply(PODS, mk_pod("web-3", "10.244.0.13"));
    api.apply_cut(
        SLICES,
        mk_slice("web", &[("web-1", "10.244.0.11"), ("web-3", "10.244.0.13")]),
    );
    api.wait_for_watches(SLICES, before_cut + 1).await;
    // And a change after the watch resumed.
    api.delete(PODS, NS, "db-1");
    api.apply(SLICES, mk_slice("db", &[]));

    assert_converges_to_fresh_index(&api, &mut subs).await;
    let web = subs.endpoints[0].1.borrow().clone();
    assert_eq!(
        addrs(&web),
        BTreeSet::from([sock("10.244.0.11"), sock("10.244.0.13")])
    );
}

#[tokio::test]
async fn gone_after_an_outage_relists_what_changed_meanwhile() {
    let api = start_api().await;
    let index = DiscoveryIndex::new();
    let _watches = start_ready(&index, &api).await;
    let mut subs = Subscriptions::new(&index);
    let lists_before: Vec<usize> = RESOURCES
        .iter()
        .map(|(path, _, _)| api.requests_to(path, false).len())
        .collect();

    api.go_down();
    // While disconnected: a Service deleted, one added back under another slice, pods come
    // and go, a profile changes.
    api.delete(SERVICES, NS, "api");
    api.delete(SLICES, NS, "api");
    api.delete(PODS, NS, "web-2");
    api.apply(PODS, mk_pod("web-4", "10.244.0.14"));
    api.apply(
        SLICES,
        mk_slice("web", &[("web-1", "10.244.0.11"), ("web-4", "10.244.0.14")]),
    );
    api.apply(SERVICE_PROFILES, mk_profile("web", "/v2/"));
    // ... and the history they were in is compacted: every watch resumes into `410 Gone`.
    for (path, _, _) in RESOURCES {
        api.expire(path);
    }
    api.expire(SERVICE_PROFILES);
    api.come_back();
    for ((path, _, _), before) in RESOURCES.iter().zip(lists_before) {
        api.wait_for_requests(&format!("a relist of {path}"), |reqs| {
            reqs.iter()
                .filter(|r| r.path == *path && !r.is_watch())
                .count()
                > before
        })
        .await;
    }

    assert_converges_to_fresh_index(&api, &mut subs).await;
    let (web, api_svc) = (
        subs.endpoints[0].1.borrow().clone(),
        subs.endpoints[1].1.borrow().clone(),
    );
    assert_eq!(
        addrs(&web),
        BTreeSet::from([sock("10.244.0.11"), sock("10.244.0.14")])
    );
    assert!(!api_svc.exists(), "api was deleted while disconnected");
}

#[tokio::test]
async fn api_server_down_at_start_is_not_ready_then_serves() {
    let api = start_api().await;
    api.go_down();
    let index = DiscoveryIndex::new();
    let started = start(&index, &api).await;
    let mut subs = Subscriptions::new(&index);
    let mut ready = started.ready();
    // Not ready while every request is refused: the watchers keep retrying with backoff
    // (each failure is logged with the kind and the connection error).
    // Every kind has tried and failed at least twice (its first try, and one after backoff).
    api.wait_for_refused(2 * RESOURCES.len() + 2).await;
    assert!(!*ready.borrow(), "ready with the API server down");
    assert!(subs.endpoints.iter().all(|(_, rx)| !rx.borrow().exists()));
    // `/ready`'s reason names the kinds (none has listed, the first five by name) and the
    // connection error each watch retried after: the server closes every connection at once
    // (the client sees it closed, or reset).
    let readiness = started.readiness();
    let reason = wait_for_reason(&readiness, |r| last_errors(r).1.len() == 5).await;
    let (masked, errors) = last_errors(&reason);
    assert_eq!(
        masked,
        "waiting for the initial list of 9 kinds: v1/Service (last error: E), \
         discovery.k8s.io/v1/EndpointSlice (last error: E), v1/Pod (last error: E), \
         v1/Node (last error: E), apps/v1/ReplicaSet (last error: E), and 4 more"
    );
    for error in errors {
        assert!(
            error.starts_with(
                "failed to perform initial object list: ServiceError: client error (SendRequest): "
            ) && error.to_lowercase().contains("connection"),
            "{error}"
        );
    }

    api.come_back();
    tokio::time::timeout(Duration::from_secs(60), ready.wait_for(|r| *r))
        .await
        .expect("ready once the API server is back")
        .expect("the watches own the sender");
    assert_eq!(started.readiness().reason(), None);
    assert_converges_to_fresh_index(&api, &mut subs).await;
}

#[tokio::test]
async fn slow_lists_end_with_the_state_at_their_answer() {
    let api = start_api().await;
    api.hold_lists(SLICES);
    api.hold_lists(PODS);
    let index = DiscoveryIndex::new();
    let started = start(&index, &api).await;
    let mut subs = Subscriptions::new(&index);
    api.wait_for_requests("the held lists", |reqs| {
        [SLICES, PODS]
            .iter()
            .all(|path| reqs.iter().any(|r| r.path == *path && !r.is_watch()))
    })
    .await;
    // While the lists are outstanding (they take seconds), the cluster changes.
    api.apply(PODS, mk_pod("api-3", "10.244.1.13"));
    api.apply(
        SLICES,
        mk_slice("api", &[("api-1", "10.244.1.11"), ("api-3", "10.244.1.13")]),
    );
    api.delete(PODS, NS, "api-2");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !*started.ready().borrow(),
        "ready before the slow lists answered"
    );
    api.release_lists(SLICES);
    api.release_lists(PODS);
    tokio::time::timeout(TIMEOUT, started.ready().wait_for(|r| *r))
        .await
        .expect("ready once the lists answer")
        .expect("the watches own the sender");

    assert_converges_to_fresh_index(&api, &mut subs).await;
    let api_svc = subs.endpoints[1].1.borrow().clone();
    assert_eq!(
        addrs(&api_svc),
        BTreeSet::from([sock("10.244.1.11"), sock("10.244.1.13")])
    );
}

#[tokio::test]
async fn crd_deleted_and_recreated_serves_only_the_new_objects() {
    let api = start_api().await;
    let index = DiscoveryIndex::new();
    let _watches = start_ready(&index, &api).await;
    let mut subs = Subscriptions::new(&index);
    let web_profile = |subs: &Subscriptions| subs.profiles[0].1.borrow().clone();
    let wait_profile = async |subs: &mut Subscriptions, want: Option<&str>| {
        tokio::time::timeout(TIMEOUT, async {
            while route_paths(&web_profile(subs))
                != want.map(|w| vec![w.to_string()]).unwrap_or_default()
            {
                subs.changed().await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "web's profile never became {want:?}: {:?}",
                web_profile(subs)
            )
        });
    };
    wait_profile(&mut subs, Some("/v1/")).await;

    // The CRD goes with its objects, then comes back with other objects: the old profile
    // must not come back with it.
    api.remove_crd(SERVICE_PROFILES);
    wait_profile(&mut subs, None).await;
    api.apply(SERVICE_PROFILES, mk_profile("api", "/api/"));
    api.install_crd(SERVICE_PROFILES);
    tokio::time::timeout(TIMEOUT, async {
        while route_paths(&subs.profiles[1].1.borrow().clone()).is_empty() {
            subs.changed().await;
        }
    })
    .await
    .expect("api's profile once the CRD is back");
    assert!(
        route_paths(&web_profile(&subs)).is_empty(),
        "web's profile came back"
    );

    assert_converges_to_fresh_index(&api, &mut subs).await;
}

// === helpers ===

async fn start(index: &DiscoveryIndex, api: &FakeApi) -> Started {
    let metrics = IndexMetrics::default();
    let mut watches = Watches::new(metrics.clone());
    index.watch(&mut watches);
    let source = ClusterSource::Kube(KubeSource::new(api.client(), metrics));
    watches.start(&source).await
}

/// `readiness`'s reason once `done` holds of it; fails showing the last one after [`TIMEOUT`].
async fn wait_for_reason(readiness: &Readiness, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let reason = readiness.reason().unwrap_or_default();
        if done(&reason) {
            return reason;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the reason never got there: {reason:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `reason` with each `(last error: ...)` masked as `(last error: E)`, and the errors masked.
fn last_errors(reason: &str) -> (String, Vec<String>) {
    const OPEN: &str = "(last error: ";
    let (mut masked, mut errors, mut rest) = (String::new(), Vec::new(), reason);
    while let Some(at) = rest.find(OPEN) {
        masked.push_str(&rest[..at + OPEN.len()]);
        rest = &rest[at + OPEN.len()..];
        // The error ends at the `)` that closes the parenthesis (errors hold some).
        let mut depth = 1;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map_or(rest.len(), |(i, _)| i);
        errors.push(rest[..end].to_string());
        masked.push('E');
        rest = &rest[end..];
    }
    masked.push_str(rest);
    (masked, errors)
}

/// `index` over `api`, once every kind's initial list is applied.
async fn start_ready(index: &DiscoveryIndex, api: &FakeApi) -> Started {
    let started = start(index, api).await;
    tokio::time::timeout(TIMEOUT, started.ready().wait_for(|r| *r))
        .await
        .expect("ready after the initial lists")
        .expect("the watches own the sender");
    started
}

fn endpoints_key(service: &str) -> EndpointsKey {
    EndpointsKey {
        service: ObjectRef {
            namespace: NS.to_string(),
            name: service.to_string(),
        },
        port: 80,
        hostname: None,
    }
}

fn profile_key(service: &str) -> ServiceProfileKey {
    ServiceProfileKey {
        service: ObjectRef {
            namespace: NS.to_string(),
            name: service.to_string(),
        },
        port: 80,
        profile_name: format!("{service}.{NS}.svc.cluster.local"),
        client_namespace: None,
    }
}

fn addrs(view: &EndpointsView) -> BTreeSet<SocketAddr> {
    view.endpoints.values().map(|e| e.addr).collect()
}

fn sock(ip: &str) -> SocketAddr {
    SocketAddr::new(ip.parse().expect("IP"), 8080)
}

/// The path regexes of a profile view's routes, in order.
fn route_paths(view: &ServiceProfileView) -> Vec<String> {
    let text = format!("{view:?}");
    // The view's routes hold their regexes as written; read them back from the debug form
    // rather than depending on the route model's shape.
    text.split("Path(\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_string)
        .collect()
}

/// The API server serving [`cluster`], the ServiceProfile CRD installed.
async fn start_api() -> FakeApi {
    let api = FakeApi::start(cluster()).await;
    api.install_crd(SERVICE_PROFILES);
    api
}

/// Three Services with their pods and slices, and a profile for `web`.
fn cluster() -> Vec<Value> {
    vec![
        mk_service("web", "10.96.0.10"),
        mk_service("api", "10.96.0.11"),
        mk_service("db", "10.96.0.12"),
        mk_pod("web-1", "10.244.0.11"),
        mk_pod("web-2", "10.244.0.12"),
        mk_pod("api-1", "10.244.1.11"),
        mk_pod("api-2", "10.244.1.12"),
        mk_pod("db-1", "10.244.2.11"),
        mk_slice("web", &[("web-1", "10.244.0.11"), ("web-2", "10.244.0.12")]),
        mk_slice("api", &[("api-1", "10.244.1.11"), ("api-2", "10.244.1.12")]),
        mk_slice("db", &[("db-1", "10.244.2.11")]),
        mk_profile("web", "/v1/"),
    ]
}

fn mk_service(name: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "clusterIP": ip,
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    })
}

fn mk_pod(name: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name.split('-').next()}},
        "spec": {"containers": [{"name": "main", "image": "app:v1"}]},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
    })
}

/// The one slice of `service` (named after it), one ready endpoint per (pod, IP).
fn mk_slice(service: &str, pods: &[(&str, &str)]) -> Value {
    let endpoints: Vec<Value> = pods
        .iter()
        .map(|(pod, ip)| {
            json!({
                "addresses": [ip],
                "conditions": {"ready": true},
                "targetRef": {"kind": "Pod", "namespace": NS, "name": pod},
            })
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": service,
            "namespace": NS,
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    })
}

fn mk_profile(service: &str, path_regex: &str) -> Value {
    json!({
        "apiVersion": "linkerd.io/v1alpha2",
        "kind": "ServiceProfile",
        "metadata": {"name": format!("{service}.{NS}.svc.cluster.local"), "namespace": NS},
        "spec": {"routes": [{"name": "route", "condition": {"method": "GET", "pathRegex": path_regex}}]},
    })
}
