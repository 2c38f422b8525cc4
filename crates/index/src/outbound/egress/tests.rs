//! EgressNetwork resolution (§5.2), policy (§5.3–§5.6) and watch ending (§5.8).

use super::*;
use crate::{
    inbound::{DefaultPolicy, InboundConfig},
    model::{EgressNetworkInfo, Network, PortSet},
    outbound::{
        Backend, OutboundLookup, OutboundRoute, OutboundRouteRef, OutboundRule, OutboundTarget,
        RouteRetry,
    },
    routes::{HttpRouteMatch, PathMatch},
    source::Event,
    testing::Policy as Index,
};
use ipnet::IpNet;
use linkerd_k8s_api::{EgressNetwork, gateway_api::httproutes::HttpRoute};
use serde_json::{Value, json};
use std::time::Duration;

pub(super) const GLOBAL: &str = "linkerd-egress";

/// An index with cluster networks 10.0.0.0/8 and fd00::/8, computing route acceptance in
/// process when `offline`.
pub(super) fn index(offline: bool) -> Index {
    let cluster_networks: Vec<IpNet> =
        vec!["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()];
    Index::new(
        InboundConfig {
            cluster_networks: cluster_networks.clone(),
            default_policy: DefaultPolicy::AllUnauthenticated,
            probe_networks: vec![],
            identity_domain: "cluster.local".into(),
            control_plane_namespace: "linkerd".into(),
            compute_route_acceptance: offline,
        },
        OutboundConfig {
            cluster_domain: "cluster.local".into(),
            cluster_networks,
            default_opaque_ports: PortSet::parse("3306").0,
            compute_route_acceptance: offline,
            global_egress_network_namespace: GLOBAL.into(),
        },
    )
}

/// EgressNetwork `ns/name`: `spec` is merged over `{trafficPolicy: Allow}`, `metadata` over
/// `{name, namespace}`.
fn mk_egress(ns: &str, name: &str, metadata: Value, spec: Value) -> EgressNetwork {
    let mut meta = json!({"name": name, "namespace": ns});
    let mut s = json!({"trafficPolicy": "Allow"});
    for (base, extra) in [(&mut meta, metadata), (&mut s, spec)] {
        if let Value::Object(extra) = extra {
            base.as_object_mut().unwrap().extend(extra);
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "policy.linkerd.io/v1alpha1",
        "kind": "EgressNetwork",
        "metadata": meta,
        "spec": s,
    }))
    .unwrap()
}

fn networks(cidrs: &[&str]) -> Value {
    json!({"networks": cidrs.iter().map(|c| json!({"cidr": c})).collect::<Vec<_>>()})
}

fn created(t: &str) -> Value {
    json!({"creationTimestamp": t})
}

/// The EgressNetwork `addr` resolves to for a client in `source`, as `ns/name`; `fallback`
/// or `NoSuchService` otherwise.
fn resolve(index: &Index, source: &str, addr: &str) -> String {
    match index.outbound_policy(OutboundTarget::Addr(addr.parse().unwrap()), source) {
        Ok(OutboundLookup::Watch(rx)) => match &**rx.borrow() {
            OutboundPolicy::Egress(e) => format!("{}/{}", e.namespace, e.name),
            OutboundPolicy::Fallback { .. } => "fallback".into(),
            other => panic!("{other:?}"),
        },
        Ok(OutboundLookup::Fixed(p)) => panic!("{p:?}"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn candidates_are_the_source_namespace_s_else_the_global_ones() {
    let index = index(false);
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "internet",
        json!({}),
        json!({}),
    )));
    assert_eq!(
        resolve(&index, "app", "8.8.8.8:443"),
        "linkerd-egress/internet"
    );
    // Another namespace's EgressNetworks are never candidates.
    index.apply(Event::Apply(mk_egress(
        "other",
        "dns",
        json!({}),
        networks(&["8.8.8.8/32"]),
    )));
    assert_eq!(
        resolve(&index, "app", "8.8.8.8:443"),
        "linkerd-egress/internet"
    );
    assert_eq!(resolve(&index, "other", "8.8.8.8:443"), "other/dns");
}

#[tokio::test]
async fn global_egress_networks_apply_when_the_source_namespace_s_do_not_match() {
    let index = index(false);
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "internet",
        json!({}),
        json!({}),
    )));
    index.apply(Event::Apply(mk_egress(
        "app",
        "partners",
        json!({}),
        networks(&["192.0.2.0/24"]),
    )));
    assert_eq!(resolve(&index, "app", "192.0.2.7:443"), "app/partners");
    // Upstream's quirk (§12) is not kept: a namespace's own EgressNetworks take precedence
    // where they match, and the global ones still apply to addresses they do not cover.
    assert_eq!(
        resolve(&index, "app", "8.8.8.8:443"),
        "linkerd-egress/internet"
    );
    assert_eq!(
        resolve(&index, "web", "8.8.8.8:443"),
        "linkerd-egress/internet"
    );
}

#[tokio::test]
async fn the_smallest_matching_network_wins() {
    let index = index(false);
    for (name, spec) in [
        ("everything", networks(&["0.0.0.0/0"])),
        ("google", networks(&["8.8.0.0/16", "1.0.0.0/8"])),
        // A /15 less a /16 is as small as a /16, but older: it wins the tie.
        (
            "carved",
            json!({"networks": [{"cidr": "8.8.0.0/15", "except": ["8.9.0.0/16"]}]}),
        ),
        ("host", networks(&["8.8.4.4"])),
    ] {
        let meta = if name == "carved" {
            created("2026-01-01T00:00:00Z")
        } else {
            created("2026-02-01T00:00:00Z")
        };
        index.apply(Event::Apply(mk_egress(GLOBAL, name, meta, spec)));
    }
    assert_eq!(resolve(&index, "app", "8.8.4.4:53"), "linkerd-egress/host");
    assert_eq!(
        resolve(&index, "app", "8.8.8.8:53"),
        "linkerd-egress/carved"
    );
    // Outside `carved` (its exception), inside `google`'s /16.
    assert_eq!(
        resolve(&index, "app", "8.9.1.1:53"),
        "linkerd-egress/everything"
    );
    assert_eq!(
        resolve(&index, "app", "1.1.1.1:53"),
        "linkerd-egress/google"
    );
    assert_eq!(
        resolve(&index, "app", "9.9.9.9:53"),
        "linkerd-egress/everything"
    );
    // Networks covering a cluster network still apply to addresses there without a Service.
    assert_eq!(
        resolve(&index, "app", "10.1.2.3:80"),
        "linkerd-egress/everything"
    );
    // IPv6: nothing covers it, outside the cluster networks.
    assert_eq!(resolve(&index, "app", "[2001:db8::1]:443"), "fallback");
}

#[tokio::test]
async fn ties_go_to_the_oldest_then_by_name() {
    let index = index(false);
    let net = || networks(&["192.0.2.0/24"]);
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "b-new",
        created("2026-03-01T00:00:00Z"),
        net(),
    )));
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "c-old",
        created("2026-01-01T00:00:00Z"),
        net(),
    )));
    assert_eq!(
        resolve(&index, "app", "192.0.2.1:80"),
        "linkerd-egress/c-old"
    );
    // Without a creation time counts as oldest.
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "z-untimed",
        json!({}),
        net(),
    )));
    assert_eq!(
        resolve(&index, "app", "192.0.2.1:80"),
        "linkerd-egress/z-untimed"
    );
    // Equal times: by name.
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "y-untimed",
        json!({}),
        net(),
    )));
    assert_eq!(
        resolve(&index, "app", "192.0.2.1:80"),
        "linkerd-egress/y-untimed"
    );
}

#[tokio::test]
async fn absent_networks_are_everything_but_the_cluster_networks() {
    let index = index(false);
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "internet",
        json!({}),
        json!({}),
    )));
    assert_eq!(
        resolve(&index, "app", "192.0.2.1:80"),
        "linkerd-egress/internet"
    );
    assert_eq!(
        resolve(&index, "app", "[2001:db8::1]:443"),
        "linkerd-egress/internet"
    );
    assert_eq!(resolve(&index, "app", "10.1.2.3:80"), "No such service");
    assert_eq!(resolve(&index, "app", "[fd00::1]:80"), "No such service");
    let info =
        EgressNetworkInfo::from_egress_network(&mk_egress(GLOBAL, "i", json!({}), json!({})))
            .unwrap();
    let cluster: Vec<IpNet> = vec![
        "10.0.0.0/8".parse().unwrap(),
        "fd00::/8".parse().unwrap(),
        "172.16.0.0/12".parse().unwrap(),
    ];
    assert_eq!(
        info.networks(&cluster),
        vec![
            Network {
                net: "0.0.0.0/0".parse().unwrap(),
                except: vec![
                    "10.0.0.0/8".parse().unwrap(),
                    "172.16.0.0/12".parse().unwrap()
                ],
            },
            Network {
                net: "::/0".parse().unwrap(),
                except: vec!["fd00::/8".parse().unwrap()],
            },
        ]
    );
    assert!(!info.overlaps_cluster_networks(&cluster));
}

fn egress(index: &Index, source: &str, addr: &str) -> EgressPolicy {
    match index.outbound_policy(OutboundTarget::Addr(addr.parse().unwrap()), source) {
        Ok(OutboundLookup::Watch(rx)) => match &**rx.borrow() {
            OutboundPolicy::Egress(e) => e.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// A Gateway HTTPRoute in `linkerd-egress` with parent EgressNetwork `internet` port 443,
/// accepted by its status, with `backends`.
fn mk_egress_route(name: &str, backends: &str) -> HttpRoute {
    serde_saphyr::from_str(&format!(
        r#"
metadata: {{name: {name}, namespace: linkerd-egress, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  parentRefs: [{{group: policy.linkerd.io, kind: EgressNetwork, name: internet, port: 443}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /api}}}}]
    backendRefs: {backends}
status:
  parents:
  - controllerName: linkerd.io/policy-controller
    parentRef: {{group: policy.linkerd.io, kind: EgressNetwork, name: internet, port: 443}}
    conditions: [{{type: Accepted, status: "True", reason: Accepted, message: "", lastTransitionTime: "2026-01-01T00:00:00Z"}}]
"#
    ))
    .unwrap()
}

#[tokio::test]
async fn egress_policy_routes_and_backends() {
    let index = index(false);
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "internet",
        json!({"annotations": {"timeout.linkerd.io/request": "5s", "retry.linkerd.io/http": "5xx"}}),
        json!({"trafficPolicy": "Deny"}),
    )));
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "partners",
        json!({}),
        networks(&["192.0.2.0/24"]),
    )));
    index.apply(Event::Apply(mk_egress_route(
        "api",
        "[{group: policy.linkerd.io, kind: EgressNetwork, name: internet, weight: 3}, \
          {group: policy.linkerd.io, kind: EgressNetwork, name: partners}, \
          {group: policy.linkerd.io, kind: EgressNetwork, name: gone, port: 8443}]",
    )));
    let dst: SocketAddr = "8.8.8.8:443".parse().unwrap();
    let timeouts = RouteTimeouts {
        request: Some(Duration::from_secs(5)),
        ..RouteTimeouts::default()
    };
    let retry = RouteRetry {
        limit: 1,
        timeout: None,
        http: Some(vec![500..=599]),
        grpc: None,
    };
    let policy = egress(&index, "app", "8.8.8.8:443");
    assert_eq!(
        policy,
        EgressPolicy {
            namespace: GLOBAL.into(),
            name: "internet".into(),
            original_dst: dst,
            traffic_policy: TrafficPolicy::Deny,
            protocol: OutboundProtocol::Detect {
                timeout: DETECT_TIMEOUT,
                http_routes: vec![OutboundRoute {
                    reference: OutboundRouteRef::Resource {
                        group: "gateway.networking.k8s.io".into(),
                        kind: "HTTPRoute".into(),
                        namespace: GLOBAL.into(),
                        name: "api".into(),
                    },
                    creation_timestamp: Some("2026-01-01T00:00:00Z".parse().unwrap()),
                    hostnames: vec![],
                    rules: vec![OutboundRule {
                        matches: vec![HttpRouteMatch {
                            path: Some(PathMatch::Prefix("/api".into())),
                            ..HttpRouteMatch::default()
                        }],
                        filters: vec![],
                        backends: vec![
                            Backend::Forward {
                                weight: 3,
                                namespace: GLOBAL.into(),
                                name: "internet".into(),
                                port: 443,
                                addr: dst,
                            },
                            Backend::InvalidEgressNetwork {
                                weight: 1,
                                namespace: GLOBAL.into(),
                                name: "partners".into(),
                                port: 443,
                                message: "Route with EgressNetwork backend needs to have the same EgressNetwork as a parent".into(),
                            },
                            Backend::InvalidEgressNetwork {
                                weight: 1,
                                namespace: GLOBAL.into(),
                                name: "gone".into(),
                                port: 8443,
                                message: "EgressNetwork not found gone".into(),
                            },
                        ],
                        timeouts: timeouts.clone(),
                        retry: Some(retry.clone()),
                    }],
                }],
            },
            failure_accrual: None,
            default_timeouts: timeouts,
            default_retry: Some(retry),
        }
    );
    // The route's parent port is 443 only; an opaque port is opaque.
    let other_port = egress(&index, "app", "8.8.8.8:80");
    assert_eq!(
        other_port.protocol,
        OutboundProtocol::Detect {
            timeout: DETECT_TIMEOUT,
            http_routes: vec![]
        }
    );
    assert_eq!(
        egress(&index, "app", "8.8.8.8:3306").protocol,
        OutboundProtocol::Opaque
    );
}

#[tokio::test]
async fn egress_backends_on_a_service_parent_are_invalid() {
    let index = index(false);
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "internet",
        json!({}),
        json!({}),
    )));
    let svc: k8s_openapi::api::core::v1::Service = serde_saphyr::from_str(
        "metadata: {name: web, namespace: linkerd-egress}\nspec: {clusterIP: 10.96.0.1, ports: [{port: 80, appProtocol: http}]}\n",
    )
    .unwrap();
    index.apply(Event::Apply(svc));
    let route: HttpRoute = serde_saphyr::from_str(
        r#"
metadata: {name: r, namespace: linkerd-egress}
spec:
  parentRefs: [{kind: Service, name: web, port: 80}]
  rules: [{backendRefs: [{group: policy.linkerd.io, kind: EgressNetwork, name: internet}]}]
status:
  parents:
  - controllerName: linkerd.io/policy-controller
    parentRef: {kind: Service, name: web, port: 80}
    conditions: [{type: Accepted, status: "True", reason: Accepted, message: "", lastTransitionTime: "2026-01-01T00:00:00Z"}]
"#,
    )
    .unwrap();
    index.apply(Event::Apply(route));
    let target = OutboundTarget::Service {
        service: ObjectRef {
            namespace: GLOBAL.into(),
            name: "web".into(),
        },
        port: 80,
    };
    let Ok(OutboundLookup::Watch(rx)) = index.outbound_policy(target, "app") else {
        panic!()
    };
    let OutboundPolicy::Service(svc) = &**rx.borrow() else {
        panic!()
    };
    let OutboundProtocol::Http1(routes) = &svc.protocol else {
        panic!("{:?}", svc.protocol)
    };
    assert_eq!(
        routes[0].rules[0].backends,
        vec![Backend::Invalid {
            weight: 1,
            message: "EgressNetwork backends attach to EgressNetwork parents only".into()
        }]
    );
}

/// Waits until `rx`'s channel closes (the watch ended), failing after a second.
async fn ends(rx: &mut crate::topic::Receiver<OutboundPolicy>) -> bool {
    let closed = async { while rx.changed().await.is_ok() {} };
    tokio::time::timeout(Duration::from_secs(1), closed)
        .await
        .is_ok()
}

fn watch(index: &Index, source: &str, addr: &str) -> crate::topic::Receiver<OutboundPolicy> {
    match index.outbound_policy(OutboundTarget::Addr(addr.parse().unwrap()), source) {
        Ok(OutboundLookup::Watch(rx)) => rx,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn egress_and_fallback_watches_end_when_egress_networks_change() {
    let index = index(false);
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "partners",
        json!({}),
        networks(&["192.0.2.0/24"]),
    )));
    let mut in_global = watch(&index, "app", "192.0.2.1:443");
    let mut fallback = watch(&index, "app", "8.8.8.8:443");
    // A status-only change of a global EgressNetwork ends every egress and fallback watch.
    let mut accepted = mk_egress(GLOBAL, "partners", json!({}), networks(&["192.0.2.0/24"]));
    accepted.status = Some(linkerd_k8s_api::egress_network::EgressNetworkStatus {
        conditions: vec![serde_json::from_value(json!({"type": "Accepted", "status": "True", "reason": "Accepted", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})).unwrap()],
    });
    index.apply(Event::Apply(accepted));
    assert!(ends(&mut in_global).await);
    assert!(ends(&mut fallback).await);
    assert_eq!(index.egress_topic_count(), 0);
}

#[tokio::test]
async fn quirk_egress_invalidation_covers_client_namespaces_too() {
    let index = index(false);
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "internet",
        json!({}),
        json!({}),
    )));
    let mut app = watch(&index, "app", "8.8.8.8:443");
    let mut web = watch(&index, "web", "8.8.8.8:443");
    // `app` gains an EgressNetwork of its own covering the address: its clients must resolve
    // again (upstream only ends watches whose parent is in `app`); `web`'s are unaffected.
    index.apply(Event::Apply(mk_egress(
        "app",
        "own",
        json!({}),
        networks(&["8.8.8.0/24"]),
    )));
    assert!(ends(&mut app).await);
    assert!(!ends(&mut web).await);
    assert_eq!(resolve(&index, "app", "8.8.8.8:443"), "app/own");
    assert_eq!(
        resolve(&index, "web", "8.8.8.8:443"),
        "linkerd-egress/internet"
    );
}

#[tokio::test]
async fn offline_routes_attach_to_egress_networks_without_overlap() {
    let index = index(true);
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "internet",
        json!({}),
        json!({}),
    )));
    index.apply(Event::Apply(mk_egress(
        GLOBAL,
        "overlap",
        json!({}),
        networks(&["192.0.2.0/24", "10.0.0.0/16"]),
    )));
    let route = |name: &str, parent: &str| -> HttpRoute {
        serde_saphyr::from_str(&format!(
            "metadata: {{name: {name}, namespace: linkerd-egress}}\nspec:\n  parentRefs: [{{group: policy.linkerd.io, kind: EgressNetwork, name: {parent}, port: 443}}]\n  rules: [{{}}]\n"
        ))
        .unwrap()
    };
    index.apply(Event::Apply(route("to-internet", "internet")));
    index.apply(Event::Apply(route("to-overlap", "overlap")));
    let names = |p: EgressPolicy| match p.protocol {
        OutboundProtocol::Detect { http_routes, .. } => http_routes
            .into_iter()
            .map(|r| r.reference)
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    let resource = |name: &str| OutboundRouteRef::Resource {
        group: "gateway.networking.k8s.io".into(),
        kind: "HTTPRoute".into(),
        namespace: GLOBAL.into(),
        name: name.into(),
    };
    assert_eq!(
        names(egress(&index, "app", "8.8.8.8:443")),
        vec![resource("to-internet")]
    );
    // Overlapping the cluster networks: not accepted (§7.4), so its route does not attach.
    assert_eq!(names(egress(&index, "app", "192.0.2.1:443")), vec![]);
}

#[tokio::test]
async fn quirk_egress_network_deletion_drops_its_parent_info() {
    let index = index(false);
    let internet = mk_egress(
        GLOBAL,
        "internet",
        json!({}),
        json!({"trafficPolicy": "Deny"}),
    );
    index.apply(Event::Apply(internet.clone()));
    let mut rx = watch(&index, "app", "8.8.8.8:443");
    index.delete(&internet);
    // Decided: nothing of it stays; its watches end and the address falls back.
    assert!(ends(&mut rx).await);
    assert_eq!(resolve(&index, "app", "8.8.8.8:443"), "fallback");
}
