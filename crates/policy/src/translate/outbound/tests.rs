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
