//! HTTPLocalRateLimitPolicies in inbound policy (spec/policy.md §4.7, §7.3): the accepted policy
//! of a Server is its `rate_limit`; acceptance is read from the status in kube mode and computed
//! in-process in offline mode, where the oldest policy (then by name) of a Server wins.

use k8s_openapi::api::core::v1::Pod;
use linkerd_index::{
    Event, Fed, IndexMetrics,
    inbound::{DefaultPolicy, InboundConfig, InboundIndex, InboundServer, WorkloadRef},
};
use linkerd_k8s_api::{HttpLocalRateLimitPolicy, Server};
use serde_json::json;

fn index(offline: bool) -> Fed<InboundIndex> {
    let config = InboundConfig {
        cluster_networks: vec!["10.0.0.0/8".parse().unwrap()],
        default_policy: DefaultPolicy::AllUnauthenticated,
        probe_networks: vec![],
        identity_domain: "cluster.local".into(),
        control_plane_namespace: "linkerd".into(),
        compute_route_acceptance: offline,
    };
    let metrics = IndexMetrics::default();
    Fed::new(
        InboundIndex::new(config, metrics.clone()),
        InboundIndex::watch,
        metrics,
    )
}

fn mk_pod() -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-a", "namespace": "ns", "labels": {"app": "web", "linkerd.io/control-plane-ns": "linkerd"}},
        "spec": {"containers": [{"name": "app", "ports": [{"name": "http", "containerPort": 8080}]}]},
        "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}]},
    }))
    .unwrap()
}

fn mk_server() -> Server {
    serde_json::from_value(json!({
        "apiVersion": "policy.linkerd.io/v1beta3", "kind": "Server",
        "metadata": {"name": "web-http", "namespace": "ns"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "port": 8080, "proxyProtocol": "HTTP/1"},
    }))
    .unwrap()
}

/// A policy on Server `web-http` allowing `total` requests per second; `accepted` is its
/// observed `Accepted` condition (`None`: no status).
fn mk_rate_limit(
    name: &str,
    created: Option<&str>,
    total: u32,
    accepted: Option<bool>,
) -> HttpLocalRateLimitPolicy {
    let mut metadata = json!({"name": name, "namespace": "ns"});
    if let Some(t) = created {
        metadata["creationTimestamp"] = json!(t);
    }
    let mut obj = json!({
        "apiVersion": "policy.linkerd.io/v1alpha1", "kind": "HTTPLocalRateLimitPolicy",
        "metadata": metadata,
        "spec": {
            "targetRef": {"group": "policy.linkerd.io", "kind": "Server", "name": "web-http"},
            "total": {"requestsPerSecond": total},
        },
    });
    if let Some(accepted) = accepted {
        let (status, reason) = if accepted {
            ("True", "Accepted")
        } else {
            ("False", "RateLimitReasonAlreadyExists")
        };
        obj["status"] = json!({
            "conditions": [{"type": "Accepted", "status": status, "reason": reason, "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "targetRef": {"group": "policy.linkerd.io", "kind": "Server", "name": "web-http"},
        });
    }
    serde_json::from_value(obj).unwrap()
}

fn server(index: &InboundIndex) -> InboundServer {
    let workload = WorkloadRef::Pod {
        namespace: "ns".into(),
        name: "web-a".into(),
    };
    (**index.inbound_server(workload, 8080).unwrap().borrow()).clone()
}

/// The applied policy's name and total rate, if any.
fn rate_limit(index: &InboundIndex) -> Option<(String, Option<u32>)> {
    server(index).rate_limit.map(|r| (r.name, r.total))
}

#[tokio::test]
async fn kube_mode_applies_the_accepted_policy() {
    let index = index(false);
    index.apply(Event::Apply(mk_pod()));
    index.apply(Event::Apply(mk_server()));
    index.apply(Event::Apply(mk_rate_limit(
        "b-old",
        Some("2026-01-01T00:00:00Z"),
        100,
        Some(true),
    )));
    index.apply(Event::Apply(mk_rate_limit(
        "a-new",
        Some("2026-02-01T00:00:00Z"),
        5,
        Some(false),
    )));
    assert_eq!(rate_limit(&index), Some(("b-old".into(), Some(100))));
    // Without an Accepted status (not yet written), none applies.
    let index = self::index(false);
    index.apply(Event::Apply(mk_pod()));
    index.apply(Event::Apply(mk_server()));
    index.apply(Event::Apply(mk_rate_limit(
        "b-old",
        Some("2026-01-01T00:00:00Z"),
        100,
        None,
    )));
    assert_eq!(rate_limit(&index), None);
}

#[tokio::test]
async fn kube_mode_prefers_the_oldest_when_two_are_accepted() {
    // A stale status may show two policies Accepted until the status controller catches up:
    // the one it will keep (the older, then by name) is applied meanwhile.
    let index = index(false);
    index.apply(Event::Apply(mk_pod()));
    index.apply(Event::Apply(mk_server()));
    index.apply(Event::Apply(mk_rate_limit(
        "a-new",
        Some("2026-02-01T00:00:00Z"),
        5,
        Some(true),
    )));
    index.apply(Event::Apply(mk_rate_limit(
        "b-old",
        Some("2026-01-01T00:00:00Z"),
        100,
        Some(true),
    )));
    assert_eq!(rate_limit(&index), Some(("b-old".into(), Some(100))));
}

#[tokio::test]
async fn offline_mode_accepts_the_oldest_then_by_name() {
    let index = index(true);
    index.apply(Event::Apply(mk_pod()));
    index.apply(Event::Apply(mk_server()));
    index.apply(Event::Apply(mk_rate_limit(
        "a-new",
        Some("2026-02-01T00:00:00Z"),
        5,
        None,
    )));
    index.apply(Event::Apply(mk_rate_limit(
        "c-old",
        Some("2026-01-01T00:00:00Z"),
        100,
        None,
    )));
    assert_eq!(rate_limit(&index), Some(("c-old".into(), Some(100))));
    // Same age: by name.
    index.apply(Event::Apply(mk_rate_limit(
        "b-old",
        Some("2026-01-01T00:00:00Z"),
        50,
        None,
    )));
    assert_eq!(rate_limit(&index), Some(("b-old".into(), Some(50))));
    // The winner deleted: the next one applies.
    index.delete(&mk_rate_limit("b-old", None, 50, None));
    assert_eq!(rate_limit(&index), Some(("c-old".into(), Some(100))));
}
