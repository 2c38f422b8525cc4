//! OutboundPolicies for Service ports with TLSRoutes and TCPRoutes, through a real tonic client
//! in offline mode (spec/policy.md §5.5, §5.6): a `Tls` policy routed by SNI, an `Opaque` policy
//! carrying a TCPRoute, and `Watch` updates when the TCPRoute's backends change.

use linkerd2_proxy_api::{
    meta, opaque_route,
    outbound::{
        self as api, OutboundPolicy, TrafficSpec, backend, proxy_protocol, traffic_spec::Target,
    },
    tls_route,
};
use std::{path::Path, time::Duration};

mod support;

use support::outbound::Outbound;

/// Services of namespace `shop`: `ingress` (443, no appProtocol), `db` (5432, opaque),
/// `db-primary` and `db-replica` (5432), all with cluster IPs. `ingress-backend` (8443) too.
const SERVICES: &str = r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: ingress, namespace: shop}
  spec: {clusterIP: 10.96.1.1, clusterIPs: [10.96.1.1], ports: [{name: tls, port: 443}]}
- apiVersion: v1
  kind: Service
  metadata: {name: ingress-backend, namespace: shop}
  spec: {clusterIP: 10.96.1.2, clusterIPs: [10.96.1.2], ports: [{name: tls, port: 8443}]}
- apiVersion: v1
  kind: Service
  metadata: {name: db, namespace: shop}
  spec: {clusterIP: 10.96.1.3, clusterIPs: [10.96.1.3], ports: [{name: pg, port: 5432, appProtocol: linkerd.io/opaque}]}
- apiVersion: v1
  kind: Service
  metadata: {name: db-primary, namespace: shop}
  spec: {clusterIP: 10.96.1.4, clusterIPs: [10.96.1.4], ports: [{name: pg, port: 5432}]}
- apiVersion: v1
  kind: Service
  metadata: {name: db-replica, namespace: shop}
  spec: {clusterIP: 10.96.1.5, clusterIPs: [10.96.1.5], ports: [{name: pg, port: 5432}]}
"#;

/// A TLSRoute on `ingress:443` by SNI, to `ingress-backend:8443`, as `kubectl get -o yaml`
/// prints a v1alpha2 route (no status: offline mode decides acceptance).
const TLS_ROUTE: &str = r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata:
  name: ingress-sni
  namespace: shop
  creationTimestamp: "2026-05-04T10:00:00Z"
spec:
  parentRefs:
  - {kind: Service, name: ingress, port: 443}
  hostnames: [shop.example.com, "*.shop.example.com"]
  rules:
  - backendRefs:
    - {name: ingress-backend, port: 8443}
"#;

/// A TCPRoute on `db:5432` with `backends` (a YAML flow list).
fn tcp_route(backends: &str) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata:
  name: db-split
  namespace: shop
  creationTimestamp: "2026-05-04T10:00:00Z"
spec:
  parentRefs:
  - {{kind: Service, name: db, port: 5432}}
  rules:
  - backendRefs: {backends}
"#
    )
}

async fn start(dir: &Path) -> Outbound {
    support::outbound::start_offline(dir).await
}

fn authority(a: &str) -> TrafficSpec {
    TrafficSpec {
        source_workload: "shop:web-6d8d6b8d5c-abcde".into(),
        target: Some(Target::Authority(a.into())),
    }
}

fn pd(secs: i64, nanos: i32) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: secs,
        nanos,
    })
}

fn service_meta(name: &str, port: u32) -> Option<meta::Metadata> {
    Some(meta::Metadata {
        kind: Some(meta::metadata::Kind::Resource(meta::Resource {
            group: "core".into(),
            kind: "Service".into(),
            name: name.into(),
            namespace: "shop".into(),
            section: String::new(),
            port,
        })),
    })
}

fn route_meta(kind: &str, name: &str) -> Option<meta::Metadata> {
    Some(meta::Metadata {
        kind: Some(meta::metadata::Kind::Resource(meta::Resource {
            group: "gateway.networking.k8s.io".into(),
            kind: kind.into(),
            name: name.into(),
            namespace: "shop".into(),
            ..Default::default()
        })),
    })
}

fn queue() -> Option<api::Queue> {
    Some(api::Queue {
        capacity: 100,
        failfast_timeout: pd(3, 0),
    })
}

/// A balancer over Service `name:port` with plain PeakEWMA (TLS and TCP route backends).
fn balancer(name: &str, port: u32) -> api::Backend {
    api::Backend {
        metadata: service_meta(name, port),
        queue: queue(),
        kind: Some(backend::Kind::Balancer(backend::BalanceP2c {
            discovery: Some(backend::EndpointDiscovery {
                kind: Some(backend::endpoint_discovery::Kind::Dst(
                    backend::endpoint_discovery::DestinationGet {
                        path: format!("{name}.shop.svc.cluster.local:{port}"),
                    },
                )),
            }),
            load: Some(backend::balance_p2c::Load::PeakEwma(
                backend::balance_p2c::PeakEwma {
                    default_rtt: pd(0, 30_000_000),
                    decay: pd(10, 0),
                },
            )),
        })),
    }
}

fn policy(meta: Option<meta::Metadata>, kind: proxy_protocol::Kind) -> OutboundPolicy {
    OutboundPolicy {
        metadata: meta,
        protocol: Some(api::ProxyProtocol { kind: Some(kind) }),
    }
}

/// The `db:5432` policy: the TCPRoute with weighted opaque backends.
fn opaque_policy(backends: Vec<api::opaque_route::WeightedRouteBackend>) -> OutboundPolicy {
    use api::opaque_route::{Distribution, Rule, distribution};
    policy(
        service_meta("db", 5432),
        proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {
            routes: vec![api::OpaqueRoute {
                metadata: route_meta("TCPRoute", "db-split"),
                rules: vec![Rule {
                    backends: Some(Distribution {
                        kind: Some(distribution::Kind::RandomAvailable(
                            distribution::RandomAvailable { backends },
                        )),
                    }),
                    filters: vec![],
                }],
            }],
        }),
    )
}

fn weighted(
    backend: api::Backend,
    weight: u32,
    filters: Vec<api::opaque_route::Filter>,
) -> api::opaque_route::WeightedRouteBackend {
    api::opaque_route::WeightedRouteBackend {
        backend: Some(api::opaque_route::RouteBackend {
            backend: Some(backend),
            filters,
        }),
        weight,
    }
}

fn state_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("services.yaml"), SERVICES).unwrap();
    std::fs::write(dir.path().join("tls.yaml"), TLS_ROUTE).unwrap();
    std::fs::write(
        dir.path().join("tcp.yaml"),
        tcp_route("[{name: db-primary, port: 5432}]"),
    )
    .unwrap();
    dir
}

#[tokio::test]
async fn a_tls_route_gives_a_tls_policy_routed_by_sni() {
    use api::tls_route::{Distribution, Rule, WeightedRouteBackend, distribution};
    let dir = state_dir();
    let mut h = start(dir.path()).await;
    let got = h
        .client
        .get(authority("ingress.shop.svc.cluster.local:443"))
        .await
        .unwrap()
        .into_inner();
    let expected = policy(
        service_meta("ingress", 443),
        proxy_protocol::Kind::Tls(proxy_protocol::Tls {
            routes: vec![api::TlsRoute {
                metadata: route_meta("TLSRoute", "ingress-sni"),
                snis: vec![
                    tls_route::SniMatch {
                        r#match: Some(tls_route::sni_match::Match::Exact(
                            "shop.example.com".into(),
                        )),
                    },
                    tls_route::SniMatch {
                        r#match: Some(tls_route::sni_match::Match::Suffix(
                            tls_route::sni_match::Suffix {
                                reverse_labels: vec!["com".into(), "example".into(), "shop".into()],
                            },
                        )),
                    },
                ],
                rules: vec![Rule {
                    backends: Some(Distribution {
                        kind: Some(distribution::Kind::RandomAvailable(
                            distribution::RandomAvailable {
                                backends: vec![WeightedRouteBackend {
                                    backend: Some(api::tls_route::RouteBackend {
                                        backend: Some(balancer("ingress-backend", 8443)),
                                        filters: vec![],
                                    }),
                                    weight: 1,
                                }],
                            },
                        )),
                    }),
                    filters: vec![],
                }],
            }],
        }),
    );
    assert_eq!(got, expected);
}

#[tokio::test]
async fn a_tcp_route_gives_an_opaque_policy_and_watch_follows_its_backends() {
    let dir = state_dir();
    let mut h = start(dir.path()).await;
    let mut stream = h
        .client
        .watch(authority("db.shop.svc.cluster.local:5432"))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(
        first,
        opaque_policy(vec![weighted(balancer("db-primary", 5432), 1, vec![])])
    );

    // The backends change: a weighted split, one Service that does not exist.
    std::fs::write(
        dir.path().join("tcp.yaml"),
        tcp_route(
            "[{name: db-primary, port: 5432, weight: 3}, {name: db-replica, port: 5432}, {name: db-gone, port: 5432}]",
        ),
    )
    .unwrap();
    let update = tokio::time::timeout(Duration::from_secs(15), stream.message())
        .await
        .expect("an update in time")
        .unwrap()
        .unwrap();
    let missing = api::Backend {
        metadata: service_meta("db-gone", 5432),
        queue: queue(),
        kind: None,
    };
    let invalid = api::opaque_route::Filter {
        kind: Some(api::opaque_route::filter::Kind::Invalid(
            opaque_route::Invalid {
                message: "Service not found db-gone".into(),
            },
        )),
    };
    assert_eq!(
        update,
        opaque_policy(vec![
            weighted(balancer("db-primary", 5432), 3, vec![]),
            weighted(balancer("db-replica", 5432), 1, vec![]),
            weighted(missing, 1, vec![invalid]),
        ])
    );
}
