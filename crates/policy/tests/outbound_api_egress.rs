//! OutboundPolicies for addresses in EgressNetworks through a real tonic client, in offline
//! mode (spec/policy.md §5.2, §5.5, §5.6, §5.8): the EgressNetwork policy with its default
//! routes, a route with an EgressNetwork parent and backend, and Watch streams that end when
//! the EgressNetworks change.

#![allow(deprecated)] // `requestTimeout` is deprecated in the API but still sent (spec §5.6).

use linkerd2_proxy_api::{
    destination, http_route, meta,
    outbound::{
        self as api, OutboundPolicy, TrafficSpec, backend, proxy_protocol, traffic_spec::Target,
    },
};
use serde_json::{Value, json};
use std::{net::SocketAddr, path::Path, time::Duration};

mod support;

use support::outbound::Outbound;

async fn start(dir: &Path) -> Outbound {
    support::outbound::start_offline(dir).await
}

fn egress_network(traffic_policy: &str) -> Value {
    json!({
        "apiVersion": "policy.linkerd.io/v1alpha1",
        "kind": "EgressNetwork",
        "metadata": {"name": "internet", "namespace": "linkerd-egress"},
        "spec": {"trafficPolicy": traffic_policy},
    })
}

fn api_route() -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "api", "namespace": "linkerd-egress", "creationTimestamp": "2026-05-04T10:00:00Z"},
        "spec": {
            "parentRefs": [{"group": "policy.linkerd.io", "kind": "EgressNetwork", "name": "internet", "port": 443}],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": "/api"}}],
                "backendRefs": [{"group": "policy.linkerd.io", "kind": "EgressNetwork", "name": "internet"}],
            }],
        },
    })
}

fn addr(a: &str) -> TrafficSpec {
    let sa: SocketAddr = a.parse().unwrap();
    TrafficSpec {
        source_workload: "app:client-5d8d6b8d5c-abcde".into(),
        target: Some(Target::Addr(sa.into())),
    }
}

fn pd(secs: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: secs,
        nanos: 0,
    })
}

fn egress_meta(port: u32) -> Option<meta::Metadata> {
    Some(meta::Metadata {
        kind: Some(meta::metadata::Kind::Resource(meta::Resource {
            group: "policy.linkerd.io".into(),
            kind: "EgressNetwork".into(),
            name: "internet".into(),
            namespace: "linkerd-egress".into(),
            section: String::new(),
            port,
        })),
    })
}

fn default_meta(name: &str) -> Option<meta::Metadata> {
    Some(meta::Metadata {
        kind: Some(meta::metadata::Kind::Default(name.into())),
    })
}

fn forward(dst: &str, port: u32, weight: u32) -> api::Backend {
    api::Backend {
        metadata: egress_meta(port),
        queue: Some(api::Queue {
            capacity: 100,
            failfast_timeout: pd(3),
        }),
        kind: Some(backend::Kind::Forward(destination::WeightedAddr {
            addr: Some(dst.parse::<SocketAddr>().unwrap().into()),
            weight,
            ..destination::WeightedAddr::default()
        })),
    }
}

/// The egress default HTTP route `name`, forwarding to `dst`, failing with 403 when `deny`.
fn egress_http_route(name: &str, dst: &str, port: u32, deny: bool) -> api::HttpRoute {
    api::HttpRoute {
        metadata: default_meta(name),
        hosts: vec![],
        rules: vec![api::http_route::Rule {
            matches: vec![http_route::HttpRouteMatch {
                path: Some(http_route::PathMatch {
                    kind: Some(http_route::path_match::Kind::Prefix("/".into())),
                }),
                ..http_route::HttpRouteMatch::default()
            }],
            filters: if deny {
                vec![api::http_route::Filter {
                    kind: Some(api::http_route::filter::Kind::FailureInjector(
                        http_route::HttpFailureInjector {
                            status: 403,
                            message: "traffic not allowed".into(),
                            ratio: None,
                        },
                    )),
                }]
            } else {
                vec![]
            },
            backends: Some(api::http_route::Distribution {
                kind: Some(api::http_route::distribution::Kind::FirstAvailable(
                    api::http_route::distribution::FirstAvailable {
                        backends: vec![api::http_route::RouteBackend {
                            backend: Some(forward(dst, port, 1)),
                            filters: vec![],
                            request_timeout: None,
                        }],
                    },
                )),
            }),
            request_timeout: None,
            timeouts: Some(http_route::Timeouts::default()),
            retry: None,
            allow_l5d_request_headers: false,
        }],
    }
}

fn detect(policy: &OutboundPolicy) -> &proxy_protocol::Detect {
    match policy.protocol.as_ref().and_then(|p| p.kind.as_ref()) {
        Some(proxy_protocol::Kind::Detect(d)) => d,
        other => panic!("not Detect: {other:?}"),
    }
}

#[tokio::test]
async fn an_address_in_an_egress_network_gets_its_policy() {
    let state = support::StateDir::new();
    state.write("egress.yaml", &[egress_network("Deny")]);
    state.write("route.yaml", &[api_route()]);
    let mut h = start(state.path()).await;

    let policy = h
        .client
        .get(addr("203.0.113.9:80"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(policy.metadata, egress_meta(80));
    let d = detect(&policy);
    assert_eq!(d.timeout, pd(10));
    let http = vec![egress_http_route(
        "http-egress-deny",
        "203.0.113.9:80",
        80,
        true,
    )];
    assert_eq!(d.http1.as_ref().unwrap().routes, http);
    assert_eq!(d.http2.as_ref().unwrap().routes, http);
    assert_eq!(
        d.opaque.as_ref().unwrap().routes,
        vec![api::OpaqueRoute {
            metadata: default_meta("tcp-egress-deny"),
            rules: vec![api::opaque_route::Rule {
                backends: Some(api::opaque_route::Distribution {
                    kind: Some(api::opaque_route::distribution::Kind::FirstAvailable(
                        api::opaque_route::distribution::FirstAvailable {
                            backends: vec![api::opaque_route::RouteBackend {
                                backend: Some(forward("203.0.113.9:80", 80, 1)),
                                filters: vec![],
                            }],
                        },
                    )),
                }),
                filters: vec![api::opaque_route::Filter {
                    kind: Some(api::opaque_route::filter::Kind::Forbidden(
                        linkerd2_proxy_api::opaque_route::Forbidden {},
                    )),
                }],
            }],
        }]
    );

    // Port 443: the route with the EgressNetwork parent, then the egress default.
    let policy = h
        .client
        .get(addr("203.0.113.9:443"))
        .await
        .unwrap()
        .into_inner();
    let routes = &detect(&policy).http1.as_ref().unwrap().routes;
    assert_eq!(routes.len(), 2);
    assert_eq!(
        routes[0].metadata,
        Some(meta::Metadata {
            kind: Some(meta::metadata::Kind::Resource(meta::Resource {
                group: "gateway.networking.k8s.io".into(),
                kind: "HTTPRoute".into(),
                name: "api".into(),
                namespace: "linkerd-egress".into(),
                ..meta::Resource::default()
            })),
        })
    );
    assert_eq!(
        routes[0].rules[0].backends,
        Some(api::http_route::Distribution {
            kind: Some(api::http_route::distribution::Kind::RandomAvailable(
                api::http_route::distribution::RandomAvailable {
                    backends: vec![api::http_route::WeightedRouteBackend {
                        backend: Some(api::http_route::RouteBackend {
                            backend: Some(forward("203.0.113.9:443", 443, 1)),
                            filters: vec![],
                            request_timeout: None,
                        }),
                        weight: 1,
                    }],
                },
            )),
        })
    );
    assert_eq!(
        routes[1],
        egress_http_route("http-egress-deny", "203.0.113.9:443", 443, true)
    );

    // Inside the cluster networks the EgressNetwork (defaulted networks) does not apply.
    let err = h.client.get(addr("10.1.2.3:80")).await.unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (tonic::Code::NotFound, "No such service")
    );
}

#[tokio::test]
async fn watches_end_when_the_egress_network_changes() {
    let state = support::StateDir::new();
    state.write("egress.yaml", &[egress_network("Deny")]);
    let mut h = start(state.path()).await;
    let mut stream = h
        .client
        .watch(addr("203.0.113.9:80"))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(
        detect(&first).http1.as_ref().unwrap().routes,
        vec![egress_http_route(
            "http-egress-deny",
            "203.0.113.9:80",
            80,
            true
        )]
    );

    state.write("egress.yaml", &[egress_network("Allow")]);
    let end = tokio::time::timeout(Duration::from_secs(15), stream.message())
        .await
        .expect("the stream ends in time");
    assert_eq!(end.unwrap(), None, "the stream ends with OK, no new policy");

    // Resolving again yields the new policy.
    let policy = h
        .client
        .get(addr("203.0.113.9:80"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        detect(&policy).http1.as_ref().unwrap().routes,
        vec![egress_http_route(
            "http-egress-allow",
            "203.0.113.9:80",
            80,
            false
        )]
    );
}

/// A TLSRoute or TCPRoute in `linkerd-egress` on the EgressNetwork `internet` port `port`
/// with one rule forwarding to it; `hostnames` (TLS only) when not null.
fn l4_route(kind: &str, name: &str, port: u16, hostnames: Value) -> Value {
    let mut route = json!({
        "apiVersion": "gateway.networking.k8s.io/v1alpha2",
        "kind": kind,
        "metadata": {"name": name, "namespace": "linkerd-egress", "creationTimestamp": "2026-05-04T10:00:00Z"},
        "spec": {
            "parentRefs": [{"group": "policy.linkerd.io", "kind": "EgressNetwork", "name": "internet", "port": port}],
            "rules": [{
                "backendRefs": [{"group": "policy.linkerd.io", "kind": "EgressNetwork", "name": "internet"}],
            }],
        },
    });
    if !hostnames.is_null() {
        route["spec"]["hostnames"] = hostnames;
    }
    route
}

fn l4_route_meta(kind: &str, name: &str) -> Option<meta::Metadata> {
    Some(meta::Metadata {
        kind: Some(meta::metadata::Kind::Resource(meta::Resource {
            group: "gateway.networking.k8s.io".into(),
            kind: kind.into(),
            name: name.into(),
            namespace: "linkerd-egress".into(),
            ..meta::Resource::default()
        })),
    })
}

/// §5.5: under an EgressNetwork a TLSRoute makes the port `Tls` with the egress default TLS
/// route last; a TCPRoute on an opaque port is its only opaque route (no `tcp-egress-*`).
#[tokio::test]
async fn tls_and_tcp_routes_on_an_egress_network() {
    use api::{opaque_route, tls_route};
    let state = support::StateDir::new();
    state.write("egress.yaml", &[egress_network("Deny")]);
    state.write(
        "routes.yaml",
        &[
            l4_route("TLSRoute", "api-tls", 443, json!(["api.example.com"])),
            // 5432 is a default opaque port.
            l4_route("TCPRoute", "pg", 5432, Value::Null),
        ],
    );
    let mut h = start(state.path()).await;

    let policy = h
        .client
        .get(addr("203.0.113.9:443"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(policy.metadata, egress_meta(443));
    let tls_forward = |dst: &str, port: u32, weight: u32, filters: Vec<tls_route::Filter>| {
        tls_route::Distribution {
            kind: Some(if weight == 0 {
                tls_route::distribution::Kind::FirstAvailable(
                    tls_route::distribution::FirstAvailable {
                        backends: vec![tls_route::RouteBackend {
                            backend: Some(forward(dst, port, 1)),
                            filters,
                        }],
                    },
                )
            } else {
                tls_route::distribution::Kind::RandomAvailable(
                    tls_route::distribution::RandomAvailable {
                        backends: vec![tls_route::WeightedRouteBackend {
                            backend: Some(tls_route::RouteBackend {
                                backend: Some(forward(dst, port, weight)),
                                filters,
                            }),
                            weight,
                        }],
                    },
                )
            }),
        }
    };
    assert_eq!(
        policy.protocol.and_then(|p| p.kind),
        Some(proxy_protocol::Kind::Tls(proxy_protocol::Tls {
            routes: vec![
                api::TlsRoute {
                    metadata: l4_route_meta("TLSRoute", "api-tls"),
                    snis: vec![linkerd2_proxy_api::tls_route::SniMatch {
                        r#match: Some(linkerd2_proxy_api::tls_route::sni_match::Match::Exact(
                            "api.example.com".into()
                        )),
                    }],
                    rules: vec![tls_route::Rule {
                        backends: Some(tls_forward("203.0.113.9:443", 443, 1, vec![])),
                        filters: vec![],
                    }],
                },
                api::TlsRoute {
                    metadata: default_meta("tls-egress-deny"),
                    snis: vec![],
                    rules: vec![tls_route::Rule {
                        backends: Some(tls_forward("203.0.113.9:443", 443, 0, vec![])),
                        filters: vec![tls_route::Filter {
                            kind: Some(tls_route::filter::Kind::Forbidden(
                                linkerd2_proxy_api::opaque_route::Forbidden {},
                            )),
                        }],
                    }],
                },
            ],
        }))
    );

    let policy = h
        .client
        .get(addr("203.0.113.9:5432"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(policy.metadata, egress_meta(5432));
    assert_eq!(
        policy.protocol.and_then(|p| p.kind),
        Some(proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {
            routes: vec![api::OpaqueRoute {
                metadata: l4_route_meta("TCPRoute", "pg"),
                rules: vec![opaque_route::Rule {
                    backends: Some(opaque_route::Distribution {
                        kind: Some(opaque_route::distribution::Kind::RandomAvailable(
                            opaque_route::distribution::RandomAvailable {
                                backends: vec![opaque_route::WeightedRouteBackend {
                                    backend: Some(opaque_route::RouteBackend {
                                        backend: Some(forward("203.0.113.9:5432", 5432, 1)),
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
        }))
    );
}

/// The backend of an EgressNetwork route that cannot forward: it names the EgressNetwork
/// `name` and fails its requests with `message` (§5.6, as a missing Service backend does).
fn failing_egress_backend(
    name: &str,
    port: u32,
    weight: u32,
    message: &str,
) -> api::http_route::WeightedRouteBackend {
    api::http_route::WeightedRouteBackend {
        backend: Some(api::http_route::RouteBackend {
            backend: Some(api::Backend {
                metadata: Some(meta::Metadata {
                    kind: Some(meta::metadata::Kind::Resource(meta::Resource {
                        group: "policy.linkerd.io".into(),
                        kind: "EgressNetwork".into(),
                        name: name.into(),
                        namespace: "linkerd-egress".into(),
                        section: String::new(),
                        port,
                    })),
                }),
                queue: Some(api::Queue {
                    capacity: 100,
                    failfast_timeout: pd(3),
                }),
                kind: None,
            }),
            filters: vec![api::http_route::Filter {
                kind: Some(api::http_route::filter::Kind::FailureInjector(
                    http_route::HttpFailureInjector {
                        status: 500,
                        message: message.into(),
                        ratio: None,
                    },
                )),
            }],
            request_timeout: None,
        }),
        weight,
    }
}

#[tokio::test]
async fn backends_another_or_a_missing_egress_network_name_it() {
    let state = support::StateDir::new();
    let mut partners = egress_network("Allow");
    partners["metadata"]["name"] = json!("partners");
    partners["spec"]["networks"] = json!([{"cidr": "192.0.2.0/24"}]);
    state.write("egress.yaml", &[egress_network("Allow"), partners]);
    let mut route = api_route();
    route["spec"]["rules"][0]["backendRefs"] = json!([
        {"group": "policy.linkerd.io", "kind": "EgressNetwork", "name": "internet", "weight": 2},
        {"group": "policy.linkerd.io", "kind": "EgressNetwork", "name": "partners"},
        {"group": "policy.linkerd.io", "kind": "EgressNetwork", "name": "gone", "port": 8443},
    ]);
    state.write("route.yaml", &[route]);
    let mut h = start(state.path()).await;

    let policy = h
        .client
        .get(addr("203.0.113.9:443"))
        .await
        .unwrap()
        .into_inner();
    let routes = &detect(&policy).http1.as_ref().unwrap().routes;
    let Some(api::http_route::Distribution {
        kind: Some(api::http_route::distribution::Kind::RandomAvailable(backends)),
    }) = &routes[0].rules[0].backends
    else {
        panic!("{:?}", routes[0].rules[0].backends)
    };
    assert_eq!(
        backends.backends,
        [
            api::http_route::WeightedRouteBackend {
                backend: Some(api::http_route::RouteBackend {
                    backend: Some(forward("203.0.113.9:443", 443, 2)),
                    filters: vec![],
                    request_timeout: None,
                }),
                weight: 2,
            },
            failing_egress_backend(
                "partners",
                443,
                1,
                "Route with EgressNetwork backend needs to have the same EgressNetwork as a parent",
            ),
            failing_egress_backend("gone", 8443, 1, "EgressNetwork not found gone"),
        ]
    );
}
