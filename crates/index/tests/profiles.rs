//! The index's profile views, driven by events applied directly: which ServiceProfile a client
//! gets, what an invalid one does, and how often it is reported.

use k8s_openapi::api::core::v1::{Pod, Service};
use linkerd_index::{
    ClusterSource, DiscoveryIndex, EndpointProfileKey, Event, IndexMetrics, ObjectRef, PodInfo,
    ServiceProfileKey, Sink, Watches, Workload,
    discovery::profiles::{EndpointProfileView, ServiceProfileView},
    source::offline::OfflineSource,
    topic::Receiver,
};
use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

mod support;
use linkerd_k8s_api::ServiceProfile;
use prometheus_client::{encoding::text::encode, registry::Registry};
use serde_json::json;

const NAME: &str = "web.ns.svc.cluster.local";

fn service() -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "http", "port": 80}]},
    }))
    .unwrap()
}

fn profile(namespace: &str, path_regex: &str) -> ServiceProfile {
    serde_json::from_value(json!({
        "apiVersion": "linkerd.io/v1alpha2", "kind": "ServiceProfile",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {"routes": [{"name": "r", "condition": {"pathRegex": path_regex}}]},
    }))
    .unwrap()
}

fn key(client: Option<&str>) -> ServiceProfileKey {
    ServiceProfileKey {
        service: ObjectRef {
            namespace: "ns".into(),
            name: "web".into(),
        },
        port: 80,
        profile_name: NAME.into(),
        client_namespace: client.map(Into::into),
    }
}

fn route_regex(view: &ServiceProfileView) -> Option<String> {
    let route = view.profile.as_ref()?.routes.first()?;
    match &route.condition {
        linkerd_index::model::profile::RequestMatch::Path(p) => Some(p.clone()),
        other => panic!("unexpected condition {other:?}"),
    }
}

fn invalid_count(registry: &Registry) -> String {
    let mut text = String::new();
    encode(&mut text, registry).unwrap();
    text.lines()
        .find(|l| {
            l.starts_with("index_invalid_objects_total{cluster=\"local\",kind=\"ServiceProfile\"}")
        })
        .map(|l| l.rsplit(' ').next().unwrap_or_default().to_string())
        .unwrap_or_else(|| "absent".into())
}

#[tokio::test]
async fn client_namespace_first_then_service_namespace() {
    let index = support::discovery(IndexMetrics::default());
    index.apply(Event::Reset(vec![service()]));
    index.apply(Event::Reset(vec![profile("ns", "/server")]));
    let mut client = index.service_profile(key(Some("client")));
    assert_eq!(route_regex(&client.borrow()).as_deref(), Some("/server"));

    index.apply(Event::Apply(profile("client", "/client")));
    assert!(client.has_changed().unwrap());
    assert_eq!(
        route_regex(&client.borrow_and_update()).as_deref(),
        Some("/client")
    );
    // Another client's namespace still gets the service namespace's profile.
    let other = index.service_profile(key(Some("other")));
    assert_eq!(route_regex(&other.borrow()).as_deref(), Some("/server"));

    index.delete(&profile("client", "/client"));
    assert_eq!(
        route_regex(&client.borrow_and_update()).as_deref(),
        Some("/server")
    );
}

/// A state file holding the Service and, in namespace `ns`, a profile routing `path_regex`.
fn state(path_regex: &str) -> String {
    let svc = serde_json::to_string(&service()).unwrap();
    let sp = serde_json::to_string(&profile("ns", path_regex)).unwrap();
    format!("{svc}\n{sp}\n")
}

#[tokio::test]
async fn invalid_update_falls_back_to_the_default_and_is_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    support::write(dir.path(), "state.json", &state("/ok"));
    let mut registry = Registry::default();
    let metrics = IndexMetrics::register(&mut registry);
    let (index, _watches) = support::offline(dir.path(), metrics).await;
    let mut rx = index.service_profile(key(None));
    assert_eq!(route_regex(&rx.borrow_and_update()).as_deref(), Some("/ok"));

    // An edit that does not translate removes the profile rather than keeping a stale one.
    support::write(dir.path(), "state.json", &state("/books/([0-9]+"));
    rx.changed().await.unwrap();
    assert_eq!(route_regex(&rx.borrow_and_update()), None);
    assert_eq!(invalid_count(&registry), "1");
    // Read again unchanged (a new file next to it makes the directory be read): not counted
    // (or logged) again.
    support::write(dir.path(), "other.json", "");
    support::write(dir.path(), "state.json", &state("/books/([0-9]+"));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(invalid_count(&registry), "1");
    // Fixed, then broken again: a new report.
    support::write(dir.path(), "state.json", &state("/fixed"));
    rx.changed().await.unwrap();
    assert_eq!(
        route_regex(&rx.borrow_and_update()).as_deref(),
        Some("/fixed")
    );
    support::write(dir.path(), "state.json", &state("("));
    rx.changed().await.unwrap();
    assert_eq!(invalid_count(&registry), "2");
    assert!(rx.borrow().service.is_some(), "the Service is still served");
}

#[tokio::test]
async fn external_workload_address_resolves_to_the_workload() {
    let index = support::discovery(IndexMetrics::default());
    let ew: linkerd_k8s_api::ExternalWorkload = serde_json::from_value(json!({
        "apiVersion": "workload.linkerd.io/v1beta1", "kind": "ExternalWorkload",
        "metadata": {"name": "vm-01", "namespace": "ns"},
        "spec": {
            "meshTLS": {"identity": "spiffe://root/vm-01", "serverName": "vm-01.cluster.local"},
            "ports": [{"name": "http", "port": 8080}],
            "workloadIPs": [{"ip": "10.20.0.5"}],
        },
    }))
    .unwrap();
    index.apply(Event::Reset(vec![ew.clone()]));
    let key = linkerd_index::EndpointProfileKey {
        ip: "10.20.0.5".parse().unwrap(),
        port: 8080,
    };
    let mut rx = index.endpoint_profile(key).unwrap();
    assert!(
        matches!(&rx.borrow_and_update().endpoint.workload, linkerd_index::Workload::External(w) if w.name == "vm-01"),
        "{:?}",
        rx.borrow().endpoint
    );
    index.delete(&ew);
    assert!(rx.has_changed().unwrap(), "the deletion is published");
    assert!(matches!(
        rx.borrow_and_update().endpoint.workload,
        linkerd_index::Workload::Address { .. }
    ));
}

/// A dstOverride with an empty authority is served as upstream serves it (`:<port>`, which
/// resolves nowhere), and logged with the profile, so that the operator finds why its traffic
/// fails.
#[test]
fn an_empty_dst_override_authority_is_logged() {
    let document = json!({
        "apiVersion": "linkerd.io/v1alpha2", "kind": "ServiceProfile",
        "metadata": {"name": NAME, "namespace": "ns"},
        "spec": {"dstOverrides": [
            {"authority": "web-v2.ns.svc.cluster.local:80", "weight": "1"},
            {"authority": "", "weight": "1"},
        ]},
    });
    let (decoded, log) = support::logged(|| {
        linkerd_index::model::decode_json::<ServiceProfile>(&document.to_string())
    });
    let profile = decoded.expect("the profile decodes");
    let authorities: Vec<&str> = profile
        .dst_overrides
        .iter()
        .map(|d| d.authority.as_str())
        .collect();
    assert_eq!(authorities, ["web-v2.ns.svc.cluster.local:80", ""]);
    assert!(
        log.contains(&format!("ns/{NAME}"))
            && log.contains("dstOverrides[1] has an empty authority"),
        "{log}"
    );
    assert!(!log.contains("dstOverrides[0]"), "{log}");
}

/// A dstOverride authority no proxy can resolve is served as the destination sends it (spec
/// §D.3), and logged with the profile and what proxies are sent (tester findings:
/// `web:99999` was sent without a word, then logged as if sent with port 99999; `web:http`
/// and `fd00::1:99999` were not logged). Hosts, ports and IPv6 addresses that may resolve are
/// not logged.
#[test]
fn an_unresolvable_dst_override_authority_is_logged() {
    let authorities = [
        "web-v2.ns.svc.cluster.local:65535",
        "web-v2.ns.svc.cluster.local:99999",
        "web-v3:0",
        "[fd00::1]:123456789012345678901234567890",
        "fd00::0",
        "web-v4",
        "web-v5:http",
        "web-v6:+80",
        "fd00::1:99999",
        "[fd00::1]:0",
        "[fd00::1]",
        "web-v7:",
        "[fd00::1]:8080",
    ];
    let document = json!({
        "apiVersion": "linkerd.io/v1alpha2", "kind": "ServiceProfile",
        "metadata": {"name": NAME, "namespace": "ns"},
        "spec": {"dstOverrides": authorities.iter()
            .map(|a| json!({"authority": a, "weight": "1"}))
            .collect::<Vec<_>>()},
    });
    let (decoded, log) = support::logged(|| {
        linkerd_index::model::decode_json::<ServiceProfile>(&document.to_string())
    });
    assert_eq!(
        decoded.expect("the profile decodes").dst_overrides.len(),
        authorities.len()
    );
    let as_host = |a: &str, port: &str| {
        format!(
            "authority {a:?} ends in {port:?}, no port 1-65535: proxies are sent it as a host, \"[{a}]:<port>\", which resolves nowhere"
        )
    };
    for line in [
        as_host("web-v2.ns.svc.cluster.local:99999", "99999"),
        "authority \"web-v3:0\" has port 0: proxies are sent it as written".into(),
        as_host(
            "[fd00::1]:123456789012345678901234567890",
            "123456789012345678901234567890",
        ),
        as_host("web-v5:http", "http"),
        as_host("web-v6:+80", "+80"),
        "authority \"fd00::1:99999\" is neither host:port nor an IPv6 address: proxies are sent it as a host, \"[fd00::1:99999]:<port>\"".into(),
        "authority \"[fd00::1]:0\" has port 0".into(),
    ] {
        assert!(log.contains(&line), "{line}\n{log}");
    }
    for i in [0, 4, 5, 10, 11, 12] {
        assert!(!log.contains(&format!("dstOverrides[{i}]")), "{i}: {log}");
    }
    assert_eq!(log.matches("which resolves nowhere").count(), 7, "{log}");
}

/// Negative values a profile is served without (a route timeout and a retry-budget TTL sent as
/// none, a dst override weight sent as 0) are logged with the profile and what was dropped;
/// zero and positive ones are not.
#[test]
fn negative_timeouts_ttls_and_weights_are_logged() {
    let document = json!({
        "apiVersion": "linkerd.io/v1alpha2", "kind": "ServiceProfile",
        "metadata": {"name": NAME, "namespace": "ns"},
        "spec": {
            "routes": [
                {"name": "slow", "condition": {"method": "GET"}, "timeout": "-5s"},
                {"name": "fast", "condition": {"method": "GET"}, "timeout": "250ms"},
            ],
            "retryBudget": {"retryRatio": 0.2, "minRetriesPerSecond": 10, "ttl": "-10s"},
            "dstOverrides": [
                {"authority": "web-v1.ns.svc.cluster.local:80", "weight": "-1"},
                {"authority": "web-v2.ns.svc.cluster.local:80", "weight": "-0"},
                {"authority": "web-v3.ns.svc.cluster.local:80", "weight": "500m"},
            ],
        },
    });
    let (decoded, log) = support::logged(|| {
        linkerd_index::model::decode_json::<ServiceProfile>(&document.to_string())
    });
    let profile = decoded.expect("the profile decodes");
    assert_eq!(profile.routes[0].timeout, None);
    assert_eq!(profile.retry_budget.as_ref().unwrap().ttl, None);
    assert_eq!(profile.dst_overrides[0].weight, 0);
    assert_eq!(log.lines().count(), 3, "{log}");
    assert!(
        log.contains("route timeout \"-5s\" is negative: the route is served without a timeout")
            && log.contains("route=slow"),
        "{log}"
    );
    assert!(
        log.contains("retryBudget ttl \"-10s\" is negative"),
        "{log}"
    );
    assert!(
        log.contains("dstOverrides[0] weight \"-1\" is negative: it is sent as 0"),
        "{log}"
    );
    assert!(log.contains(&format!("ns/{NAME}")), "{log}");
}

/// After each batch of Pods the discovery index applies, records which pod the endpoint
/// profile of `10.1.0.1:8080` holds (`None`: no workload): a Pod sink added after the index's
/// sees every state a stream could read, where a stream itself may skip one.
#[derive(Clone, Default)]
struct AttachedPods(Arc<Mutex<Attached>>);

#[derive(Default)]
struct Attached {
    /// The topic to read, once the test subscribed.
    rx: Option<Receiver<EndpointProfileView>>,
    /// The pod attached after each batch.
    seen: Vec<Option<String>>,
}

impl Sink<Pod> for AttachedPods {
    fn apply(&self, _: &[Event<Arc<PodInfo>>]) -> usize {
        let mut state = self.0.lock().unwrap();
        if let Some(rx) = &state.rx {
            let pod = match &rx.borrow().endpoint.workload {
                Workload::Pod { pod, .. } => Some(pod.name.clone()),
                _ => None,
            };
            state.seen.push(pod);
        }
        0
    }
}

fn pods(names: &[&str]) -> String {
    let items: Vec<_> = names
        .iter()
        .map(|name| {
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"containers": [{"name": "app", "ports": [{"containerPort": 8080}]}]},
                "status": {"phase": "Running", "podIP": "10.1.0.1", "podIPs": [{"ip": "10.1.0.1"}]},
            })
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// A pod replaced on its IP by a pod of another name in one offline write (the old deleted,
/// the new created) passes from one to the other without a moment where the address has no
/// workload (tester finding: the write's new Pods reach the index before its deleted ones, so
/// both claimed the IP in between, and the endpoint profile dropped its pod).
#[tokio::test]
async fn a_pod_renamed_on_its_ip_is_never_detached_in_between() {
    let dir = tempfile::tempdir().unwrap();
    support::write(dir.path(), "pods.json", &pods(&["web-a"]));
    let index = DiscoveryIndex::new();
    let attached = AttachedPods::default();
    let mut watches = Watches::new(IndexMetrics::default());
    index.watch(&mut watches);
    watches.add::<Pod>(attached.clone());
    let source = OfflineSource::new(dir.path(), IndexMetrics::default()).unwrap();
    let started = watches.start(&ClusterSource::Offline(source)).await;
    let mut ready = started.ready();
    tokio::time::timeout(Duration::from_secs(10), ready.wait_for(|r| *r))
        .await
        .unwrap()
        .unwrap();
    let key = EndpointProfileKey {
        ip: "10.1.0.1".parse().unwrap(),
        port: 8080,
    };
    let mut rx = index.endpoint_profile(key.clone()).unwrap();
    let pod_of = |view: &EndpointProfileView| match &view.endpoint.workload {
        Workload::Pod { pod, .. } => Some(pod.name.clone()),
        _ => None,
    };
    assert_eq!(pod_of(&rx.borrow_and_update()).as_deref(), Some("web-a"));
    attached.0.lock().unwrap().rx = Some(index.endpoint_profile(key).unwrap());

    support::write(dir.path(), "pods.json", &pods(&["web-a2"]));
    let seen = || attached.0.lock().unwrap().seen.clone();
    tokio::time::timeout(Duration::from_secs(5), async {
        while seen().last() != Some(&Some("web-a2".to_string())) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("web-a2 not attached within 5s: {:?}", seen()));
    // The new pod's batch, then the old one's deletion.
    assert_eq!(
        seen(),
        [Some("web-a".to_string()), Some("web-a2".to_string())]
    );
    assert_eq!(pod_of(&rx.borrow_and_update()).as_deref(), Some("web-a2"));
}
