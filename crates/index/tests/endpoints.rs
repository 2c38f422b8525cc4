//! The index's endpoint views, driven by events applied directly (no source): what a view holds
//! after each kind of change, and when its topic publishes.

use k8s_openapi::api::{
    apps::v1::ReplicaSet,
    core::v1::{Pod, Service},
    discovery::v1::EndpointSlice,
};
use linkerd_index::{
    AddressId, EndpointsKey, Event, IndexMetrics, ObjectRef, Workload, model::AddressType,
};

mod support;
use serde_json::json;
use std::net::SocketAddr;
use support::Discovery;

fn mk_service(name: &str, ports: &[(&str, u16)]) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"clusterIP": "10.96.0.1", "ports": ports.iter().map(|(n, p)| json!({"name": n, "port": p})).collect::<Vec<_>>()},
    }))
    .unwrap()
}

fn mk_pod(name: &str, ip: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs", "uid": "1"}]},
        "spec": {"containers": [{"name": "app", "ports": [{"name": "http", "containerPort": 8080}]}]},
        "status": {"phase": "Running", "podIPs": [{"ip": ip}]},
    }))
    .unwrap()
}

fn mk_slice(
    name: &str,
    svc: &str,
    port: (&str, u16),
    eps: &[(&str, &str, Option<bool>)],
) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "ns", "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": port.0, "port": port.1}],
        "endpoints": eps.iter().map(|(pod, ip, ready)| json!({
            "addresses": [ip],
            "conditions": {"ready": ready},
            "targetRef": {"kind": "Pod", "name": pod, "namespace": "ns"},
        })).collect::<Vec<_>>(),
    }))
    .unwrap()
}

fn key(svc: &str, port: u16) -> EndpointsKey {
    EndpointsKey {
        service: ObjectRef {
            namespace: "ns".into(),
            name: svc.into(),
        },
        port,
        hostname: None,
    }
}

fn addrs(view: &linkerd_index::EndpointsView) -> Vec<SocketAddr> {
    let mut a: Vec<_> = view.endpoints.values().map(|e| e.addr).collect();
    a.sort();
    a
}

fn index() -> Discovery {
    support::discovery(IndexMetrics::default())
}

#[tokio::test]
async fn pod_indexed_after_its_slice_is_published() {
    // Regression: a pod that arrives after the slice naming it was never published, because only
    // changes to already-known pods touched their services.
    let index = index();
    index.apply(Event::Apply(mk_service("web", &[("http", 80)])));
    index.apply(Event::Apply(mk_slice(
        "web-1",
        "web",
        ("http", 8080),
        &[("web-a", "10.0.0.1", Some(true))],
    )));
    // The endpoint is skipped, and the log says why (spec §C.3; newcomer finding: a typo in
    // a `targetRef` was silent).
    let (mut rx, log) = support::logged(|| index.endpoints(key("web", 80)));
    assert!(rx.borrow_and_update().endpoints.is_empty());
    assert!(
        log.contains("WARN")
            && log.contains("skipping an endpoint whose pod is not indexed (yet)")
            && log.contains("pod=ns/web-a slice=ns/web-1 addr=10.0.0.1:8080"),
        "{log}"
    );
    index.apply(Event::Apply(mk_pod("web-a", "10.0.0.1")));
    assert!(rx.has_changed().unwrap());
    assert_eq!(
        addrs(&rx.borrow_and_update()),
        ["10.0.0.1:8080".parse::<SocketAddr>().unwrap()]
    );
}

#[tokio::test]
async fn readiness_absent_counts_as_ready() {
    let index = index();
    index.apply(Event::Apply(mk_service("web", &[("http", 80)])));
    index.apply(Event::Apply(mk_pod("a", "10.0.0.1")));
    index.apply(Event::Apply(mk_pod("b", "10.0.0.2")));
    index.apply(Event::Apply(mk_pod("c", "10.0.0.3")));
    index.apply(Event::Apply(mk_slice(
        "web-1",
        "web",
        ("http", 8080),
        &[
            ("a", "10.0.0.1", None),
            ("b", "10.0.0.2", Some(false)),
            ("c", "10.0.0.3", Some(true)),
        ],
    )));
    let rx = index.endpoints(key("web", 80));
    let view = rx.borrow();
    assert_eq!(
        addrs(&view),
        [
            "10.0.0.1:8080".parse::<SocketAddr>().unwrap(),
            "10.0.0.3:8080".parse().unwrap()
        ]
    );
    let ids: Vec<_> = view.endpoints.keys().cloned().collect();
    assert_eq!(
        ids[0],
        AddressId::Pod {
            namespace: "ns".into(),
            name: "a".into(),
            family: AddressType::IPv4
        }
    );
}

#[tokio::test]
async fn unrelated_changes_are_not_published() {
    let index = index();
    index.apply(Event::Apply(mk_service("web", &[("http", 80)])));
    index.apply(Event::Apply(mk_pod("a", "10.0.0.1")));
    index.apply(Event::Apply(mk_slice(
        "web-1",
        "web",
        ("http", 8080),
        &[("a", "10.0.0.1", Some(true))],
    )));
    let mut rx = index.endpoints(key("web", 80));
    rx.borrow_and_update();
    // Another service and its slice.
    index.apply(Event::Apply(mk_service("api", &[("http", 80)])));
    index.apply(Event::Apply(mk_slice("api-1", "api", ("http", 8080), &[])));
    // The same slice again.
    index.apply(Event::Apply(mk_slice(
        "web-1",
        "web",
        ("http", 8080),
        &[("a", "10.0.0.1", Some(true))],
    )));
    assert!(!rx.has_changed().unwrap());
}

#[tokio::test]
async fn owner_resolves_through_the_replica_set() {
    let index = index();
    index.apply(Event::Apply(mk_service("web", &[("http", 80)])));
    index.apply(Event::Apply(mk_pod("a", "10.0.0.1")));
    let rs: ReplicaSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-rs", "namespace": "ns", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "2"}]},
    }))
    .unwrap();
    index.apply(Event::Apply(rs));
    index.apply(Event::Apply(mk_slice(
        "web-1",
        "web",
        ("http", 8080),
        &[("a", "10.0.0.1", Some(true))],
    )));
    let rx = index.endpoints(key("web", 80));
    let view = rx.borrow();
    let Workload::Pod { owner, .. } = &view.endpoints.values().next().unwrap().workload else {
        panic!("pod workload")
    };
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Deployment", "web")
    );
}

#[tokio::test]
async fn reset_removes_what_is_not_listed() {
    let index = index();
    index.apply(Event::Reset(vec![mk_service("web", &[("http", 80)])]));
    index.apply(Event::Reset(vec![
        mk_pod("a", "10.0.0.1"),
        mk_pod("b", "10.0.0.2"),
    ]));
    index.apply(Event::Reset(vec![mk_slice(
        "web-1",
        "web",
        ("http", 8080),
        &[("a", "10.0.0.1", Some(true)), ("b", "10.0.0.2", Some(true))],
    )]));
    let mut rx = index.endpoints(key("web", 80));
    assert_eq!(rx.borrow_and_update().endpoints.len(), 2);
    // A relist in which b and its slice entry vanished.
    index.apply(Event::Reset(vec![mk_slice(
        "web-1",
        "web",
        ("http", 8080),
        &[("a", "10.0.0.1", Some(true))],
    )]));
    index.apply(Event::Reset(vec![mk_pod("a", "10.0.0.1")]));
    assert_eq!(
        addrs(&rx.borrow_and_update()),
        ["10.0.0.1:8080".parse::<SocketAddr>().unwrap()]
    );
    // A relist without the service.
    index.apply(Event::Reset(Vec::<Service>::new()));
    assert!(!rx.borrow_and_update().exists());
}

#[tokio::test]
async fn topics_end_with_their_last_subscriber() {
    let index = index();
    index.apply(Event::Apply(mk_service("web", &[("http", 80)])));
    let a = index.endpoints(key("web", 80));
    let b = index.endpoints(key("web", 80));
    let _other = index.endpoints(key("web", 81));
    assert_eq!(index.endpoint_topic_count(), 2);
    drop(a);
    tokio::task::yield_now().await;
    assert_eq!(index.endpoint_topic_count(), 2);
    drop(b);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(index.endpoint_topic_count(), 1);
}

#[tokio::test]
async fn invalid_objects_are_skipped() {
    let index = index();
    // A port out of range cannot be indexed; a good service next to it still is.
    let bad: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "bad", "namespace": "ns"},
        "spec": {"ports": [{"port": 70000}]},
    }))
    .unwrap();
    index.apply(Event::Reset(vec![bad, mk_service("web", &[("http", 80)])]));
    assert!(index.service("ns", "bad").is_none());
    assert!(index.service("ns", "web").is_some());
}

fn mk_external_workload(name: &str, ips: &[&str]) -> linkerd_k8s_api::ExternalWorkload {
    serde_json::from_value(json!({
        "apiVersion": "workload.linkerd.io/v1beta1", "kind": "ExternalWorkload",
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": "vm"}},
        "spec": {
            "meshTLS": {"identity": format!("spiffe://root.linkerd.cluster.local/{name}"), "serverName": format!("{name}.ns.external.identity.linkerd.cluster.local")},
            "ports": [{"name": "http", "port": 8080}],
            "workloadIPs": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap()
}

/// A slice of ExternalWorkload endpoints: (workload, address, conditions.ready).
fn mk_external_slice(
    name: &str,
    labels: serde_json::Value,
    address_type: &str,
    eps: &[(&str, &str, Option<bool>)],
) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "addressType": address_type,
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": eps.iter().map(|(ew, ip, ready)| json!({
            "addresses": [ip],
            "conditions": {"ready": ready},
            "targetRef": {"kind": "ExternalWorkload", "name": ew, "namespace": "ns"},
        })).collect::<Vec<_>>(),
    }))
    .unwrap()
}

#[tokio::test]
async fn external_workload_endpoints_follow_readiness() {
    let index = index();
    index.apply(Event::Apply(mk_service("vm", &[("http", 80)])));
    index.apply(Event::Apply(mk_external_workload("vm-a", &["10.1.0.1"])));
    index.apply(Event::Apply(mk_external_workload("vm-b", &["10.1.0.2"])));
    index.apply(Event::Apply(mk_external_workload("vm-c", &["10.1.0.3"])));
    let labels = json!({"kubernetes.io/service-name": "vm"});
    index.apply(Event::Apply(mk_external_slice(
        "vm-1",
        labels.clone(),
        "IPv4",
        &[
            ("vm-a", "10.1.0.1", Some(true)),
            ("vm-b", "10.1.0.2", Some(false)),
            ("vm-c", "10.1.0.3", None),
        ],
    )));
    let mut rx = index.endpoints(key("vm", 80));
    {
        let view = rx.borrow_and_update();
        assert_eq!(
            addrs(&view),
            [
                "10.1.0.1:8080".parse::<SocketAddr>().unwrap(),
                "10.1.0.3:8080".parse().unwrap()
            ]
        );
        let ids: Vec<_> = view.endpoints.keys().cloned().collect();
        assert_eq!(
            ids[0],
            AddressId::External {
                namespace: "ns".into(),
                name: "vm-a".into(),
                family: AddressType::IPv4,
            }
        );
    }
    // vm-a turns not ready: it is removed.
    index.apply(Event::Apply(mk_external_slice(
        "vm-1",
        labels,
        "IPv4",
        &[
            ("vm-a", "10.1.0.1", Some(false)),
            ("vm-b", "10.1.0.2", Some(false)),
            ("vm-c", "10.1.0.3", None),
        ],
    )));
    assert!(rx.has_changed().unwrap());
    assert_eq!(
        addrs(&rx.borrow_and_update()),
        ["10.1.0.3:8080".parse::<SocketAddr>().unwrap()]
    );
}

#[tokio::test]
async fn external_workload_slices_without_the_service_label_are_ignored() {
    let index = index();
    index.apply(Event::Apply(mk_service("vm", &[("http", 80)])));
    index.apply(Event::Apply(mk_external_workload("vm-a", &["10.1.0.1"])));
    index.apply(Event::Apply(mk_external_slice(
        "vm-1",
        json!({"endpointslice.kubernetes.io/managed-by": "linkerd.io/external-workloads-controller"}),
        "IPv4",
        &[("vm-a", "10.1.0.1", Some(true))],
    )));
    let mut rx = index.endpoints(key("vm", 80));
    assert!(rx.borrow_and_update().endpoints.is_empty());
    // The same slice once labelled is attached.
    index.apply(Event::Apply(mk_external_slice(
        "vm-1",
        json!({"kubernetes.io/service-name": "vm"}),
        "IPv4",
        &[("vm-a", "10.1.0.1", Some(true))],
    )));
    assert_eq!(
        addrs(&rx.borrow_and_update()),
        ["10.1.0.1:8080".parse::<SocketAddr>().unwrap()]
    );
}

#[tokio::test]
async fn dual_stack_external_workloads_have_one_id_per_family() {
    let index = index();
    index.apply(Event::Apply(mk_service("vm", &[("http", 80)])));
    index.apply(Event::Apply(mk_external_workload(
        "vm-a",
        &["10.1.0.1", "fd00::1"],
    )));
    let labels = json!({"kubernetes.io/service-name": "vm"});
    index.apply(Event::Apply(mk_external_slice(
        "vm-v4",
        labels.clone(),
        "IPv4",
        &[("vm-a", "10.1.0.1", Some(true))],
    )));
    index.apply(Event::Apply(mk_external_slice(
        "vm-v6",
        labels,
        "IPv6",
        &[("vm-a", "fd00::1", Some(true))],
    )));
    let rx = index.endpoints(key("vm", 80));
    let view = rx.borrow();
    let ids: Vec<_> = view
        .endpoints
        .iter()
        .map(|(id, ep)| (id.clone(), ep.addr))
        .collect();
    let id = |family| AddressId::External {
        namespace: "ns".into(),
        name: "vm-a".into(),
        family,
    };
    assert_eq!(
        ids,
        [
            (id(AddressType::IPv4), "10.1.0.1:8080".parse().unwrap()),
            (id(AddressType::IPv6), "[fd00::1]:8080".parse().unwrap()),
        ]
    );
}

/// A mirrored slice (no target refs) of `svc` with annotation
/// `mirror.linkerd.io/remote-svc-fq-name` set to `fq_name`.
fn mk_mirrored_slice(svc: &str, fq_name: &str) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{svc}-1"), "namespace": "ns",
            "labels": {"kubernetes.io/service-name": svc, "mirror.linkerd.io/cluster-name": "east"},
            "annotations": {
                "mirror.linkerd.io/remote-svc-fq-name": fq_name,
                "mirror.linkerd.io/remote-gateway-identity": "gateway.linkerd-multicluster.serviceaccount.identity.linkerd.cluster.local",
            },
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 4143}],
        "endpoints": [{"addresses": ["172.18.0.5"], "conditions": {"ready": true}}],
    }))
    .unwrap()
}

fn authority_override(view: &linkerd_index::EndpointsView) -> Vec<Option<String>> {
    view.endpoints
        .values()
        .map(|ep| match &ep.workload {
            Workload::Address {
                authority_override, ..
            } => authority_override.clone(),
            other => panic!("not a bare address: {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn empty_remote_service_name_sets_no_authority_override() {
    let index = index();
    index.apply(Event::Apply(mk_service("web-east", &[("http", 8080)])));
    index.apply(Event::Apply(mk_service("api-east", &[("http", 8080)])));
    index.apply(Event::Apply(mk_mirrored_slice("web-east", "")));
    index.apply(Event::Apply(mk_mirrored_slice(
        "api-east",
        "api.ns.svc.cluster.local",
    )));
    let web = index.endpoints(key("web-east", 8080));
    assert_eq!(authority_override(&web.borrow()), [None]);
    assert_eq!(web.borrow().labels.get("target_service"), None);
    let api = index.endpoints(key("api-east", 8080));
    assert_eq!(
        authority_override(&api.borrow()),
        [Some("api.ns.svc.cluster.local:8080".to_string())]
    );
}
