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
    let mut rx = index.endpoints(key("web", 80));
    assert!(rx.borrow_and_update().endpoints.is_empty());
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
