//! OutboundPolicies through a real tonic client against the emojivoto fixture in offline mode
//! (spec/policy.md §5): Service targets by authority and by cluster IP, the undefined-port and
//! fallback policies, bad requests, and Watch updates when a route's backends change.

use linkerd2_proxy_api::{
    meta, net,
    outbound::{
        self as api, OutboundPolicy, TrafficSpec, backend, proxy_protocol, traffic_spec::Target,
    },
};
use std::{path::Path, time::Duration};

mod support;

use support::outbound::Outbound;

const WEB: &str = "web-svc.emojivoto.svc.cluster.local:80";

async fn start(dir: &Path) -> Outbound {
    support::outbound::start_offline(dir).await
}

fn authority(a: &str) -> TrafficSpec {
    TrafficSpec {
        source_workload: "emojivoto:vote-bot-6d8d6b8d5c-abcde".into(),
        target: Some(Target::Authority(a.into())),
    }
}

fn addr(a: &str) -> TrafficSpec {
    let sa: std::net::SocketAddr = a.parse().unwrap();
    TrafficSpec {
        source_workload: "emojivoto:vote-bot-6d8d6b8d5c-abcde".into(),
        target: Some(Target::Addr(sa.into())),
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
            namespace: "emojivoto".into(),
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

/// The balancer the proxy resolves with `Destination.Get <path>`.
fn balancer(name: &str, port: u32, path: &str) -> api::Backend {
    api::Backend {
        metadata: service_meta(name, port),
        queue: Some(api::Queue {
            capacity: 100,
            failfast_timeout: pd(3, 0),
        }),
        kind: Some(backend::Kind::Balancer(backend::BalanceP2c {
            discovery: Some(backend::EndpointDiscovery {
                kind: Some(backend::endpoint_discovery::Kind::Dst(
                    backend::endpoint_discovery::DestinationGet { path: path.into() },
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

fn detect(policy: &OutboundPolicy) -> &proxy_protocol::Detect {
    match policy.protocol.as_ref().and_then(|p| p.kind.as_ref()) {
        Some(proxy_protocol::Kind::Detect(d)) => d,
        other => panic!("not Detect: {other:?}"),
    }
}

#[allow(deprecated)]
#[tokio::test]
async fn web_svc_by_authority_and_by_cluster_ip() {
    let mut h = start(&support::fixture_dir("emojivoto")).await;
    let policy = h.client.get(authority(WEB)).await.unwrap().into_inner();
    assert_eq!(policy.metadata, service_meta("web-svc", 80));
    let d = detect(&policy);
    assert_eq!(d.timeout, pd(10, 0));
    let opaque = d.opaque.as_ref().unwrap();
    assert_eq!(
        opaque.routes,
        vec![api::OpaqueRoute {
            metadata: default_meta("opaq"),
            rules: vec![api::opaque_route::Rule {
                backends: Some(api::opaque_route::Distribution {
                    kind: Some(api::opaque_route::distribution::Kind::FirstAvailable(
                        api::opaque_route::distribution::FirstAvailable {
                            backends: vec![api::opaque_route::RouteBackend {
                                backend: Some(balancer("web-svc", 80, WEB)),
                                filters: vec![],
                            }],
                        },
                    )),
                }),
                filters: vec![],
            }],
        }]
    );
    // The emojivoto HTTPRoutes are parented to a Server (inbound): none attaches outbound, so
    // the port gets the `http` default route.
    let http1 = d.http1.as_ref().unwrap();
    assert_eq!(http1.failure_accrual, None);
    let expected_route = api::HttpRoute {
        metadata: default_meta("http"),
        hosts: vec![],
        rules: vec![api::http_route::Rule {
            matches: vec![linkerd2_proxy_api::http_route::HttpRouteMatch {
                path: Some(linkerd2_proxy_api::http_route::PathMatch {
                    kind: Some(linkerd2_proxy_api::http_route::path_match::Kind::Prefix(
                        "/".into(),
                    )),
                }),
                ..Default::default()
            }],
            filters: vec![],
            backends: Some(api::http_route::Distribution {
                kind: Some(api::http_route::distribution::Kind::FirstAvailable(
                    api::http_route::distribution::FirstAvailable {
                        backends: vec![api::http_route::RouteBackend {
                            backend: Some(balancer("web-svc", 80, WEB)),
                            filters: vec![],
                            request_timeout: None,
                        }],
                    },
                )),
            }),
            request_timeout: None,
            timeouts: Some(Default::default()),
            retry: None,
            allow_l5d_request_headers: false,
        }],
    };
    assert_eq!(http1.routes, vec![expected_route.clone()]);
    assert_eq!(d.http2.as_ref().unwrap().routes, vec![expected_route]);

    // The same Service by its cluster IP.
    let by_ip = h
        .client
        .get(addr("10.96.34.218:80"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_ip, policy);
    // And as an IPv4-mapped IPv6 address, as a dual-stack socket reports it.
    let by_mapped_ip = h
        .client
        .get(addr("[::ffff:10.96.34.218]:80"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_mapped_ip, policy);

    // emoji-svc:8080 (named grpc, no appProtocol) is detected too, with its own authority.
    let emoji = h
        .client
        .get(addr("10.96.112.47:8080"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(emoji.metadata, service_meta("emoji-svc", 8080));
    let opaque = detect(&emoji).opaque.as_ref().unwrap();
    let Some(api::opaque_route::distribution::Kind::FirstAvailable(fa)) = opaque.routes[0].rules[0]
        .backends
        .as_ref()
        .unwrap()
        .kind
        .as_ref()
    else {
        panic!()
    };
    assert_eq!(
        fa.backends[0].backend,
        Some(balancer(
            "emoji-svc",
            8080,
            "emoji-svc.emojivoto.svc.cluster.local:8080"
        ))
    );
}

#[tokio::test]
async fn undefined_port_and_fallback() {
    let mut h = start(&support::fixture_dir("emojivoto")).await;
    let undefined = h
        .client
        .get(addr("10.96.34.218:9999"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        undefined,
        OutboundPolicy {
            metadata: service_meta("web-svc", 9999),
            protocol: Some(api::ProxyProtocol {
                kind: Some(proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {
                    routes: vec![api::OpaqueRoute {
                        metadata: default_meta("undefined-port"),
                        rules: vec![api::opaque_route::Rule {
                            backends: Some(api::opaque_route::Distribution {
                                kind: Some(api::opaque_route::distribution::Kind::Empty(
                                    api::opaque_route::distribution::Empty {}
                                )),
                            }),
                            filters: vec![api::opaque_route::Filter {
                                kind: Some(api::opaque_route::filter::Kind::Forbidden(
                                    linkerd2_proxy_api::opaque_route::Forbidden {}
                                )),
                            }],
                        }],
                    }],
                })),
            }),
        }
    );

    let fallback = h
        .client
        .get(addr("192.0.2.10:443"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fallback.metadata, default_meta("egress-fallback"));
    let d = detect(&fallback);
    let route = &d.http1.as_ref().unwrap().routes[0];
    assert_eq!(route.metadata, default_meta("egress-fallback"));
    let Some(api::http_route::distribution::Kind::FirstAvailable(fa)) =
        route.rules[0].backends.as_ref().unwrap().kind.as_ref()
    else {
        panic!()
    };
    let backend = fa.backends[0].backend.as_ref().unwrap();
    assert_eq!(backend.metadata, default_meta("egress-fallback"));
    let Some(backend::Kind::Forward(forward)) = &backend.kind else {
        panic!("{backend:?}")
    };
    assert_eq!(
        forward.addr,
        Some(net::TcpAddress::from(
            "192.0.2.10:443".parse::<std::net::SocketAddr>().unwrap()
        ))
    );
    assert_eq!(forward.weight, 1);

    // A fixed policy's Watch sends it once and stays open.
    let mut stream = h
        .client
        .watch(addr("10.96.34.218:9999"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stream.message().await.unwrap(), Some(undefined));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), stream.message())
            .await
            .is_err(),
        "the stream stays open"
    );
}

#[tokio::test]
async fn bad_requests_name_the_problem() {
    let mut h = start(&support::fixture_dir("emojivoto")).await;
    let err = |status: tonic::Status| (status.code(), status.message().to_string());
    let no_target = TrafficSpec {
        source_workload: "emojivoto:x".into(),
        target: None,
    };
    assert_eq!(
        err(h.client.get(no_target).await.unwrap_err()),
        (tonic::Code::InvalidArgument, "target is required".into())
    );
    let mut spec = addr("10.96.34.218:80");
    spec.source_workload = "nocolon".into();
    let (code, message) = err(h.client.get(spec).await.unwrap_err());
    assert_eq!(code, tonic::Code::InvalidArgument);
    assert!(
        message.starts_with("Invalid workload: nocolon"),
        "{message}"
    );
    let mut spec = addr("10.96.34.218:80");
    if let Some(Target::Addr(a)) = &mut spec.target {
        a.port = 0;
    }
    assert_eq!(
        err(h.client.get(spec).await.unwrap_err()),
        (tonic::Code::InvalidArgument, "port cannot be zero".into())
    );
    let mut spec = addr("10.96.34.218:80");
    if let Some(Target::Addr(a)) = &mut spec.target {
        a.port = 70_000;
    }
    assert_eq!(
        err(h.client.get(spec).await.unwrap_err()),
        (
            tonic::Code::InvalidArgument,
            "port outside valid range".into()
        )
    );
    let mut spec = addr("10.96.34.218:80");
    if let Some(Target::Addr(a)) = &mut spec.target {
        a.ip = None;
    }
    assert_eq!(
        err(h.client.get(spec).await.unwrap_err()),
        (
            tonic::Code::InvalidArgument,
            "traffic target must have an IP".into()
        )
    );
    assert_eq!(
        err(h.client.get(addr("10.1.2.3:80")).await.unwrap_err()),
        (tonic::Code::NotFound, "No such service".into())
    );
    assert_eq!(
        err(h.client.get(authority("example.com:80")).await.unwrap_err()),
        (
            tonic::Code::NotFound,
            "authority must be of the form <name>.<namespace>.svc.<domain>".into()
        )
    );
}

fn split_route(weight: u32) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: web-split
  namespace: emojivoto
  creationTimestamp: "2026-05-04T10:00:00Z"
spec:
  parentRefs:
  - {{kind: Service, name: web-svc, port: 80}}
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /api}}}}]
    backendRefs:
    - {{name: web-svc, port: 80, weight: {weight}}}
    - {{name: emoji-svc, port: 8080, weight: 1}}
"#
    )
}

async fn next(stream: &mut tonic::Streaming<OutboundPolicy>) -> OutboundPolicy {
    tokio::time::timeout(Duration::from_secs(15), stream.message())
        .await
        .expect("an update in time")
        .unwrap()
        .unwrap()
}

/// The weights a policy's first HTTP/1 route sends to each backend path.
fn weights(policy: &OutboundPolicy) -> Vec<(String, u32)> {
    let route = &detect(policy).http1.as_ref().unwrap().routes[0];
    let Some(api::http_route::distribution::Kind::RandomAvailable(ra)) =
        route.rules[0].backends.as_ref().unwrap().kind.as_ref()
    else {
        panic!("{route:?}")
    };
    ra.backends
        .iter()
        .map(|b| {
            let backend = b.backend.as_ref().unwrap().backend.as_ref().unwrap();
            let Some(backend::Kind::Balancer(bal)) = &backend.kind else {
                panic!()
            };
            let Some(backend::endpoint_discovery::Kind::Dst(dst)) =
                bal.discovery.as_ref().unwrap().kind.as_ref()
            else {
                panic!()
            };
            (dst.path.clone(), b.weight)
        })
        .collect()
}

#[tokio::test]
async fn watch_follows_route_edits() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        support::fixture_dir("emojivoto").join("cluster.yaml"),
        dir.path().join("cluster.yaml"),
    )
    .unwrap();
    let mut h = start(dir.path()).await;
    let mut stream = h.client.watch(authority(WEB)).await.unwrap().into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(
        detect(&first).http1.as_ref().unwrap().routes[0].metadata,
        default_meta("http")
    );

    std::fs::write(dir.path().join("route.yaml"), split_route(9)).unwrap();
    let update = next(&mut stream).await;
    assert_eq!(
        detect(&update).http1.as_ref().unwrap().routes[0].metadata,
        Some(meta::Metadata {
            kind: Some(meta::metadata::Kind::Resource(meta::Resource {
                group: "gateway.networking.k8s.io".into(),
                kind: "HTTPRoute".into(),
                name: "web-split".into(),
                namespace: "emojivoto".into(),
                ..Default::default()
            })),
        })
    );
    assert_eq!(
        weights(&update),
        vec![
            (WEB.to_string(), 9),
            ("emoji-svc.emojivoto.svc.cluster.local:8080".to_string(), 1)
        ]
    );

    // A weight edit reaches the open stream.
    std::fs::write(dir.path().join("route.yaml"), split_route(2)).unwrap();
    let update = next(&mut stream).await;
    assert_eq!(
        weights(&update),
        vec![
            (WEB.to_string(), 2),
            ("emoji-svc.emojivoto.svc.cluster.local:8080".to_string(), 1)
        ]
    );
}
