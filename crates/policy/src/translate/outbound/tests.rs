use super::*;
use linkerd_index::{
    outbound::{OutboundRouteRef, RouteRetry},
    routes::GrpcRouteMatch,
};

fn svc(protocol: OutboundProtocol) -> ServicePolicy {
    ServicePolicy {
        namespace: "ns".into(),
        name: "web".into(),
        port: 80,
        authority: "web.ns.svc.cluster.local:80".into(),
        protocol,
        failure_accrual: None,
        load: LoadEstimator::PeakEwma,
    }
}

fn rule<M>(matches: Vec<M>, backends: Vec<Backend>) -> OutboundRule<M> {
    OutboundRule {
        matches,
        filters: vec![],
        backends,
        timeouts: RouteTimeouts {
            request: Some(Duration::from_secs(5)),
            ..RouteTimeouts::default()
        },
        retry: Some(RouteRetry {
            limit: 2,
            timeout: None,
            http: Some(vec![500..=599]),
            grpc: Some(GrpcRetryConditions {
                unavailable: true,
                ..GrpcRetryConditions::default()
            }),
        }),
    }
}

fn missing() -> Backend {
    Backend::Service {
        weight: 2,
        namespace: "ns".into(),
        name: "gone".into(),
        port: 80,
        authority: "gone.ns.svc.cluster.local:80".into(),
        filters: vec![],
        exists: false,
    }
}

fn route<M>(rules: Vec<OutboundRule<M>>) -> OutboundRoute<M> {
    OutboundRoute {
        reference: OutboundRouteRef::Resource {
            group: "gateway.networking.k8s.io".into(),
            kind: "GRPCRoute".into(),
            namespace: "ns".into(),
            name: "r".into(),
        },
        creation_timestamp: None,
        hostnames: vec![],
        rules,
    }
}

/// §12 "gRPC failure injector for a missing Service backend uses code 500 (not a gRPC code)":
/// decided for the GRPCRoute documentation, UNAVAILABLE (14).
#[test]
fn quirk_grpc_missing_backend_fails_with_unavailable() {
    let policy = OutboundTranslator::new(true).policy(&OutboundPolicy::Service(svc(
        OutboundProtocol::Grpc(vec![route(vec![rule(
            vec![GrpcRouteMatch::default()],
            vec![missing()],
        )])]),
    )));
    let Some(proxy_protocol::Kind::Grpc(grpc)) = policy.protocol.unwrap().kind else {
        panic!()
    };
    let rule = &grpc.routes[0].rules[0];
    assert!(rule.allow_l5d_request_headers);
    assert_eq!(rule.request_timeout, Some(duration(Duration::from_secs(5))));
    let retry = rule.retry.unwrap();
    assert_eq!(retry.max_retries, 2);
    assert_eq!(retry.max_request_bytes, 65_536);
    assert!(retry.conditions.unwrap().unavailable);
    let Some(api::grpc_route::distribution::Kind::RandomAvailable(ra)) =
        rule.backends.clone().unwrap().kind
    else {
        panic!()
    };
    let backend = ra.backends[0].backend.clone().unwrap();
    assert_eq!(ra.backends[0].weight, 2);
    assert_eq!(backend.backend.unwrap().kind, None);
    assert_eq!(
        backend.filters,
        vec![api::grpc_route::Filter {
            kind: Some(api::grpc_route::filter::Kind::FailureInjector(
                grpc_api::GrpcFailureInjector {
                    code: 14,
                    message: "Service not found gone".into(),
                    ratio: None,
                }
            )),
        }]
    );
}

#[test]
fn http_missing_and_invalid_backends_fail_with_500() {
    let policy = OutboundTranslator::default().policy(&OutboundPolicy::Service(svc(
        OutboundProtocol::Http1(vec![route(vec![rule(
            vec![HttpRouteMatch::default()],
            vec![
                missing(),
                Backend::Invalid {
                    weight: 1,
                    message: "unsupported backend type core Pod".into(),
                },
            ],
        )])]),
    )));
    let Some(proxy_protocol::Kind::Http1(http)) = policy.protocol.unwrap().kind else {
        panic!()
    };
    let rule = &http.routes[0].rules[0];
    assert_eq!(
        rule.retry
            .clone()
            .unwrap()
            .conditions
            .unwrap()
            .status_ranges,
        vec![api::http_route::retry::conditions::StatusRange {
            start: 500,
            end: 599
        }]
    );
    let Some(api::http_route::distribution::Kind::RandomAvailable(ra)) =
        rule.backends.clone().unwrap().kind
    else {
        panic!()
    };
    let failures: Vec<_> = ra
        .backends
        .iter()
        .map(|b| {
            let b = b.backend.clone().unwrap();
            (b.backend.unwrap().metadata, b.filters)
        })
        .collect();
    let injector = |message: &str| {
        vec![api::http_route::Filter {
            kind: Some(api::http_route::filter::Kind::FailureInjector(
                http_route::HttpFailureInjector {
                    status: 500,
                    message: message.into(),
                    ratio: None,
                },
            )),
        }]
    };
    assert_eq!(
        failures,
        vec![
            (
                Some(service_metadata("ns", "gone", 80)),
                injector("Service not found gone")
            ),
            (
                Some(default_metadata("invalid")),
                injector("unsupported backend type core Pod")
            ),
        ]
    );
}

#[test]
fn accrual_and_penalty_load() {
    let mut s = svc(OutboundProtocol::Opaque);
    s.failure_accrual = Some(FailureAccrual::Consecutive {
        max_failures: 7,
        backoff: Backoff {
            min: Duration::from_secs(1),
            max: Duration::from_secs(60),
            jitter: 0.5,
            respect_retry_after: false,
        },
    });
    let accrual = failure_accrual(s.failure_accrual.as_ref().unwrap());
    assert_eq!(
        accrual.kind,
        Some(api::failure_accrual::Kind::ConsecutiveFailures(
            api::failure_accrual::ConsecutiveFailures {
                max_failures: 7,
                backoff: Some(api::ExponentialBackoff {
                    min_backoff: Some(duration(Duration::from_secs(1))),
                    max_backoff: Some(duration(Duration::from_secs(60))),
                    jitter_ratio: 0.5,
                    respect_retry_after_hint: false,
                }),
            }
        ))
    );
    let b = balancer(
        service_metadata("ns", "web", 80),
        "web.ns.svc.cluster.local:80",
        &LoadEstimator::PenaltyPeakEwma {
            penalty: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(300),
        },
    );
    let Some(backend::Kind::Balancer(bal)) = b.kind else {
        panic!()
    };
    assert!(matches!(
        bal.load,
        Some(backend::balance_p2c::Load::PenaltyPeakEwma(ref p))
            if p.penalty == Some(duration(Duration::from_secs(5)))
                && p.penalty_decay == Some(duration(Duration::from_secs(10)))
    ));
}

// === EgressNetwork policies (§5.6) ===

fn egress_policy(traffic_policy: TrafficPolicy, protocol: OutboundProtocol) -> OutboundPolicy {
    OutboundPolicy::Egress(EgressPolicy {
        namespace: "linkerd-egress".into(),
        name: "internet".into(),
        original_dst: "192.0.2.1:443".parse().unwrap(),
        traffic_policy,
        protocol,
        failure_accrual: None,
        default_timeouts: RouteTimeouts {
            request: Some(Duration::from_secs(5)),
            ..RouteTimeouts::default()
        },
        default_retry: None,
    })
}

fn egress_meta() -> Option<meta::Metadata> {
    Some(meta::Metadata {
        kind: Some(meta::metadata::Kind::Resource(meta::Resource {
            group: "policy.linkerd.io".into(),
            kind: "EgressNetwork".into(),
            name: "internet".into(),
            namespace: "linkerd-egress".into(),
            section: String::new(),
            port: 443,
        })),
    })
}

/// `Forward{192.0.2.1:443, weight}` with EgressNetwork metadata.
fn forward_backend(weight: u32) -> api::Backend {
    api::Backend {
        metadata: egress_meta(),
        queue: Some(api::Queue {
            capacity: 100,
            failfast_timeout: Some(duration(Duration::from_secs(3))),
        }),
        kind: Some(backend::Kind::Forward(destination::WeightedAddr {
            addr: Some("192.0.2.1:443".parse::<SocketAddr>().unwrap().into()),
            weight,
            ..destination::WeightedAddr::default()
        })),
    }
}

#[test]
fn egress_deny_detect_policy() {
    let policy = OutboundTranslator::new(true).policy(&egress_policy(
        TrafficPolicy::Deny,
        OutboundProtocol::Detect {
            timeout: DETECT_TIMEOUT,
            http_routes: vec![],
        },
    ));
    let http = api::HttpRoute {
        metadata: Some(default_metadata("http-egress-deny")),
        hosts: vec![],
        rules: vec![api::http_route::Rule {
            matches: vec![http_route::HttpRouteMatch {
                path: Some(http_route::PathMatch {
                    kind: Some(http_route::path_match::Kind::Prefix("/".into())),
                }),
                ..http_route::HttpRouteMatch::default()
            }],
            filters: vec![api::http_route::Filter {
                kind: Some(api::http_route::filter::Kind::FailureInjector(
                    http_route::HttpFailureInjector {
                        status: 403,
                        message: "traffic not allowed".into(),
                        ratio: None,
                    },
                )),
            }],
            backends: Some(api::http_route::Distribution {
                kind: Some(api::http_route::distribution::Kind::FirstAvailable(
                    api::http_route::distribution::FirstAvailable {
                        backends: vec![api::http_route::RouteBackend {
                            backend: Some(forward_backend(1)),
                            filters: vec![],
                            request_timeout: None,
                        }],
                    },
                )),
            }),
            request_timeout: Some(duration(Duration::from_secs(5))),
            timeouts: Some(http_route::Timeouts {
                request: Some(duration(Duration::from_secs(5))),
                response: None,
                idle: None,
            }),
            retry: None,
            allow_l5d_request_headers: false,
        }],
    };
    let opaque = api::OpaqueRoute {
        metadata: Some(default_metadata("tcp-egress-deny")),
        rules: vec![api::opaque_route::Rule {
            backends: Some(api::opaque_route::Distribution {
                kind: Some(api::opaque_route::distribution::Kind::FirstAvailable(
                    api::opaque_route::distribution::FirstAvailable {
                        backends: vec![api::opaque_route::RouteBackend {
                            backend: Some(forward_backend(1)),
                            filters: vec![],
                        }],
                    },
                )),
            }),
            filters: vec![api::opaque_route::Filter {
                kind: Some(api::opaque_route::filter::Kind::Forbidden(
                    opaque_route::Forbidden {},
                )),
            }],
        }],
    };
    assert_eq!(
        policy,
        api::OutboundPolicy {
            metadata: egress_meta(),
            protocol: Some(api::ProxyProtocol {
                kind: Some(proxy_protocol::Kind::Detect(proxy_protocol::Detect {
                    timeout: Some(duration(Duration::from_secs(10))),
                    opaque: Some(proxy_protocol::Opaque {
                        routes: vec![opaque],
                    }),
                    http1: Some(proxy_protocol::Http1 {
                        routes: vec![http.clone()],
                        failure_accrual: None,
                    }),
                    http2: Some(proxy_protocol::Http2 {
                        routes: vec![http],
                        failure_accrual: None,
                    }),
                })),
            }),
        }
    );
}

#[test]
fn egress_allow_grpc_and_opaque_policies() {
    // A resource route first, the egress default last; its Forward backend keeps its weight.
    let policy = OutboundTranslator::default().policy(&egress_policy(
        TrafficPolicy::Allow,
        OutboundProtocol::Grpc(vec![route(vec![rule(
            vec![GrpcRouteMatch::default()],
            vec![Backend::Forward {
                weight: 7,
                namespace: "linkerd-egress".into(),
                name: "internet".into(),
                port: 443,
                addr: "192.0.2.1:443".parse().unwrap(),
            }],
        )])]),
    ));
    let Some(proxy_protocol::Kind::Grpc(grpc)) = policy.protocol.unwrap().kind else {
        panic!()
    };
    let Some(api::grpc_route::distribution::Kind::RandomAvailable(ra)) =
        grpc.routes[0].rules[0].backends.clone().unwrap().kind
    else {
        panic!()
    };
    assert_eq!(
        ra.backends,
        vec![api::grpc_route::WeightedRouteBackend {
            backend: Some(api::grpc_route::RouteBackend {
                backend: Some(forward_backend(7)),
                filters: vec![],
                request_timeout: None,
            }),
            weight: 7,
        }]
    );
    assert_eq!(
        grpc.routes[1],
        api::GrpcRoute {
            metadata: Some(default_metadata("grpc-egress-allow")),
            hosts: vec![],
            rules: vec![api::grpc_route::Rule {
                matches: vec![],
                filters: vec![],
                backends: Some(api::grpc_route::Distribution {
                    kind: Some(api::grpc_route::distribution::Kind::FirstAvailable(
                        api::grpc_route::distribution::FirstAvailable {
                            backends: vec![api::grpc_route::RouteBackend {
                                backend: Some(forward_backend(1)),
                                filters: vec![],
                                request_timeout: None,
                            }],
                        },
                    )),
                }),
                request_timeout: Some(duration(Duration::from_secs(5))),
                timeouts: Some(http_route::Timeouts {
                    request: Some(duration(Duration::from_secs(5))),
                    response: None,
                    idle: None,
                }),
                retry: None,
                allow_l5d_request_headers: false,
            }],
        }
    );
    assert_eq!(grpc.routes.len(), 2);

    // The deny gRPC default fails with PERMISSION_DENIED.
    let deny = OutboundTranslator::default().policy(&egress_policy(
        TrafficPolicy::Deny,
        OutboundProtocol::Grpc(vec![]),
    ));
    let Some(proxy_protocol::Kind::Grpc(grpc)) = deny.protocol.unwrap().kind else {
        panic!()
    };
    assert_eq!(grpc.routes.len(), 1);
    assert_eq!(
        grpc.routes[0].metadata,
        Some(default_metadata("grpc-egress-deny"))
    );
    assert_eq!(
        grpc.routes[0].rules[0].filters,
        vec![api::grpc_route::Filter {
            kind: Some(api::grpc_route::filter::Kind::FailureInjector(
                grpc_api::GrpcFailureInjector {
                    code: 7,
                    message: "traffic not allowed".into(),
                    ratio: None,
                }
            )),
        }]
    );

    let opaque = OutboundTranslator::default().policy(&egress_policy(
        TrafficPolicy::Allow,
        OutboundProtocol::Opaque,
    ));
    let Some(proxy_protocol::Kind::Opaque(opaque)) = opaque.protocol.unwrap().kind else {
        panic!()
    };
    assert_eq!(
        opaque.routes,
        vec![api::OpaqueRoute {
            metadata: Some(default_metadata("tcp-egress-allow")),
            rules: vec![api::opaque_route::Rule {
                backends: Some(api::opaque_route::Distribution {
                    kind: Some(api::opaque_route::distribution::Kind::FirstAvailable(
                        api::opaque_route::distribution::FirstAvailable {
                            backends: vec![api::opaque_route::RouteBackend {
                                backend: Some(forward_backend(1)),
                                filters: vec![],
                            }],
                        },
                    )),
                }),
                filters: vec![],
            }],
        }]
    );
}

#[test]
fn egress_tls_default_routes() {
    let allow = egress_policy(TrafficPolicy::Allow, OutboundProtocol::Opaque);
    let OutboundPolicy::Egress(allow) = allow else {
        unreachable!()
    };
    let deny = EgressPolicy {
        traffic_policy: TrafficPolicy::Deny,
        ..allow.clone()
    };
    let route = |name: &str, filters: Vec<api::tls_route::Filter>| api::TlsRoute {
        metadata: Some(default_metadata(name)),
        snis: vec![],
        rules: vec![api::tls_route::Rule {
            backends: Some(api::tls_route::Distribution {
                kind: Some(api::tls_route::distribution::Kind::FirstAvailable(
                    api::tls_route::distribution::FirstAvailable {
                        backends: vec![api::tls_route::RouteBackend {
                            backend: Some(forward_backend(1)),
                            filters: vec![],
                        }],
                    },
                )),
            }),
            filters,
        }],
    };
    assert_eq!(egress_tls_route(&allow), route("tls-egress-allow", vec![]));
    assert_eq!(
        egress_tls_route(&deny),
        route(
            "tls-egress-deny",
            vec![api::tls_route::Filter {
                kind: Some(api::tls_route::filter::Kind::Forbidden(
                    opaque_route::Forbidden {}
                )),
            }]
        )
    );
}

// === TLSRoutes and TCPRoutes under EgressNetworks (§5.5, §5.6) ===

/// A TLS or TCP route `ns/name` of `kind` with one rule forwarding to the original
/// destination with weight 2.
fn egress_plain_route(kind: &str, hostnames: Vec<HostMatch>) -> OutboundRoute<NoMatch> {
    OutboundRoute {
        reference: OutboundRouteRef::Resource {
            group: "gateway.networking.k8s.io".into(),
            kind: kind.into(),
            namespace: "linkerd-egress".into(),
            name: "r".into(),
        },
        creation_timestamp: None,
        hostnames,
        rules: vec![OutboundRule {
            matches: vec![],
            filters: vec![],
            backends: vec![Backend::Forward {
                weight: 2,
                namespace: "linkerd-egress".into(),
                name: "internet".into(),
                port: 443,
                addr: "192.0.2.1:443".parse().unwrap(),
            }],
            timeouts: RouteTimeouts::default(),
            retry: None,
        }],
    }
}

fn route_resource(kind: &str) -> Option<meta::Metadata> {
    Some(meta::Metadata {
        kind: Some(meta::metadata::Kind::Resource(meta::Resource {
            group: "gateway.networking.k8s.io".into(),
            kind: kind.into(),
            name: "r".into(),
            namespace: "linkerd-egress".into(),
            section: String::new(),
            port: 0,
        })),
    })
}

#[test]
fn egress_tls_routes_end_with_the_egress_default() {
    use api::tls_route::{
        Distribution, Filter, RouteBackend, Rule, WeightedRouteBackend, distribution, filter,
    };
    use linkerd2_proxy_api::tls_route::{SniMatch, sni_match};
    let tls = OutboundProtocol::Tls(vec![egress_plain_route(
        "TLSRoute",
        vec![HostMatch::Exact("api.example.com".into())],
    )]);
    let default_route = |name: &str, filters: Vec<Filter>| api::TlsRoute {
        metadata: Some(default_metadata(name)),
        snis: vec![],
        rules: vec![Rule {
            backends: Some(Distribution {
                kind: Some(distribution::Kind::FirstAvailable(
                    distribution::FirstAvailable {
                        backends: vec![RouteBackend {
                            backend: Some(forward_backend(1)),
                            filters: vec![],
                        }],
                    },
                )),
            }),
            filters,
        }],
    };
    let resource_route = api::TlsRoute {
        metadata: route_resource("TLSRoute"),
        snis: vec![SniMatch {
            r#match: Some(sni_match::Match::Exact("api.example.com".into())),
        }],
        rules: vec![Rule {
            backends: Some(Distribution {
                kind: Some(distribution::Kind::RandomAvailable(
                    distribution::RandomAvailable {
                        backends: vec![WeightedRouteBackend {
                            backend: Some(RouteBackend {
                                backend: Some(forward_backend(2)),
                                filters: vec![],
                            }),
                            weight: 2,
                        }],
                    },
                )),
            }),
            filters: vec![],
        }],
    };
    for (traffic_policy, default) in [
        (
            TrafficPolicy::Allow,
            default_route("tls-egress-allow", vec![]),
        ),
        (
            TrafficPolicy::Deny,
            default_route(
                "tls-egress-deny",
                vec![Filter {
                    kind: Some(filter::Kind::Forbidden(opaque_route::Forbidden {})),
                }],
            ),
        ),
    ] {
        let policy =
            OutboundTranslator::default().policy(&egress_policy(traffic_policy, tls.clone()));
        assert_eq!(policy.metadata, egress_meta());
        assert_eq!(
            policy.protocol.unwrap().kind,
            Some(proxy_protocol::Kind::Tls(proxy_protocol::Tls {
                routes: vec![resource_route.clone(), default]
            }))
        );
    }
}

/// §5.5/§12: with an EgressNetwork parent and a TCP route, no `tcp-egress-allow`/`-deny`
/// default route is appended: the TCP route is the only opaque route.
#[test]
fn egress_tcp_route_replaces_the_egress_default() {
    use api::opaque_route::{Distribution, RouteBackend, Rule, WeightedRouteBackend, distribution};
    let expected = api::OpaqueRoute {
        metadata: route_resource("TCPRoute"),
        rules: vec![Rule {
            backends: Some(Distribution {
                kind: Some(distribution::Kind::RandomAvailable(
                    distribution::RandomAvailable {
                        backends: vec![WeightedRouteBackend {
                            backend: Some(RouteBackend {
                                backend: Some(forward_backend(2)),
                                filters: vec![],
                            }),
                            weight: 2,
                        }],
                    },
                )),
            }),
            filters: vec![],
        }],
    };
    for traffic_policy in [TrafficPolicy::Allow, TrafficPolicy::Deny] {
        let policy = OutboundTranslator::default().policy(&egress_policy(
            traffic_policy,
            OutboundProtocol::OpaqueRoute(Box::new(egress_plain_route("TCPRoute", vec![]))),
        ));
        assert_eq!(
            policy.protocol.unwrap().kind,
            Some(proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {
                routes: vec![expected.clone()]
            }))
        );
    }
}
