use super::*;
use crate::output::timeouts_text;
use linkerd2_proxy_api::{
    http_route::{HttpRouteMatch, PathMatch, Timeouts, path_match},
    meta::{Metadata, metadata},
    outbound::{ProxyProtocol, http_route::retry::Conditions},
};

fn duration(millis: i32) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::from(millis / 1000),
        nanos: (millis % 1000) * 1_000_000,
    }
}

/// A rule's backends: one per weight, each forwarding to 10.0.0.1:80, named `b0`, `b1`...
fn forwarding(weights: &[u32]) -> http_route::Distribution {
    use linkerd2_proxy_api::outbound::{Backend, backend};
    http_route::Distribution {
        kind: Some(http_route::distribution::Kind::RandomAvailable(
            http_route::distribution::RandomAvailable {
                backends: weights
                    .iter()
                    .enumerate()
                    .map(|(i, weight)| http_route::WeightedRouteBackend {
                        weight: *weight,
                        backend: Some(http_route::RouteBackend {
                            backend: Some(Backend {
                                metadata: Some(Metadata {
                                    kind: Some(metadata::Kind::Default(format!("b{i}"))),
                                }),
                                kind: Some(backend::Kind::Forward(
                                    linkerd2_proxy_api::destination::WeightedAddr {
                                        addr: Some(
                                            "10.0.0.1:80"
                                                .parse::<std::net::SocketAddr>()
                                                .unwrap()
                                                .into(),
                                        ),
                                        ..Default::default()
                                    },
                                )),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                    })
                    .collect(),
            },
        )),
    }
}

/// A policy, `default:test`, whose HTTP/1 protocol has one route, `default:<route>`, with one
/// rule.
fn http1_policy(route: &str, rule: http_route::Rule) -> OutboundPolicy {
    OutboundPolicy {
        metadata: Some(Metadata {
            kind: Some(metadata::Kind::Default("test".into())),
        }),
        protocol: Some(ProxyProtocol {
            kind: Some(proxy_protocol::Kind::Http1(proxy_protocol::Http1 {
                routes: vec![HttpRoute {
                    metadata: Some(Metadata {
                        kind: Some(metadata::Kind::Default(route.into())),
                    }),
                    hosts: vec![],
                    rules: vec![rule],
                }],
                failure_accrual: None,
            })),
        }),
    }
}

#[test]
fn target_hosts() {
    assert_eq!(
        target_host("web-svc.emojivoto.svc.cluster.local:80"),
        "web-svc.emojivoto.svc.cluster.local"
    );
    assert_eq!(
        target_host("web-svc.emojivoto.svc"),
        "web-svc.emojivoto.svc"
    );
    assert_eq!(target_host("10.96.0.1:80"), "10.96.0.1");
    assert_eq!(target_host("[fd00::1]:80"), "fd00::1");
}

#[test]
fn retries_and_timeouts() {
    let retry = http_route::Retry {
        max_retries: 2,
        max_request_bytes: 0,
        conditions: Some(Conditions {
            status_ranges: vec![
                http_route::retry::conditions::StatusRange {
                    start: 500,
                    end: 599,
                },
                http_route::retry::conditions::StatusRange {
                    start: 429,
                    end: 429,
                },
            ],
        }),
        timeout: Some(duration(300)),
        backoff: None,
    };
    assert_eq!(
        http_retry_text(Some(&retry)),
        "up to 2 on status 500-599,429, each try 300ms"
    );
    assert_eq!(http_retry_text(None), "none");
    let timeouts = Timeouts {
        request: Some(duration(3000)),
        response: None,
        idle: Some(duration(60_000)),
    };
    assert_eq!(timeouts_text(Some(&timeouts), None), "request 3s, idle 60s");
    assert_eq!(timeouts_text(None, Some(&duration(1500))), "request 1.5s");
    assert_eq!(timeouts_text(None, None), "none");
}

#[test]
fn a_request_no_route_matches_is_not_routed() {
    let policy = http1_policy(
        "api",
        http_route::Rule {
            matches: vec![HttpRouteMatch {
                path: Some(PathMatch {
                    kind: Some(path_match::Kind::Prefix("/api".into())),
                }),
                ..Default::default()
            }],
            ..Default::default()
        },
    );
    let request = Request {
        method: "GET".into(),
        path: "/web".into(),
        ..Default::default()
    };
    let (text, decision) = explain_policy(&policy, &request).unwrap();
    assert_eq!(
        decision,
        Decision::Denied("no route matches the request (the proxy fails it)".into())
    );
    assert_eq!(
        text,
        [
            "policy:     default:test",
            "protocol:   http1",
            "request:    GET /web",
            "route default:api: does not match: rule 1: path is not under /api",
            "decision:   denied: no route matches the request (the proxy fails it)",
        ]
        .join("\n")
    );
    let request = Request {
        path: "/api/x".into(),
        ..request
    };
    let (text, decision) = explain_policy(&policy, &request).unwrap();
    assert_eq!(
        decision,
        Decision::Denied(format!("route default:api rule 1 {NO_BACKEND}"))
    );
    assert!(
        text.contains("backends:   none (the proxy fails what this rule matches)"),
        "{text}"
    );
}

/// The proxy leaves out backends of weight 0: a rule whose backends all have weight 0 fails
/// what it matches, and is not "routed" (newcomer finding); one backend of weight above 0
/// routes, and a weight-0 backend beside it is shown as taking no traffic.
#[test]
fn a_rule_whose_backends_all_have_weight_0_denies() {
    let policy = |weights: &[u32]| {
        http1_policy(
            "canary",
            http_route::Rule {
                matches: vec![HttpRouteMatch::default()],
                backends: Some(forwarding(weights)),
                ..Default::default()
            },
        )
    };
    let request = Request {
        method: "GET".into(),
        path: "/".into(),
        ..Default::default()
    };
    for weights in [&[0][..], &[0, 0]] {
        let (text, decision) = explain_policy(&policy(weights), &request).unwrap();
        assert_eq!(
            decision,
            Decision::Denied(format!("route default:canary rule 1 {NO_BACKEND}")),
            "{weights:?}"
        );
        assert!(
            text.contains("backend:    weight 0 (no traffic) default:b0 -> forward 10.0.0.1:80"),
            "{text}"
        );
    }
    let (text, decision) = explain_policy(&policy(&[0, 3]), &request).unwrap();
    assert_eq!(
        decision,
        Decision::Allowed("routed by route default:canary rule 1".into())
    );
    assert!(text.contains("weight 0 (no traffic) default:b0"), "{text}");
    assert!(text.contains("weight 3 (100%) default:b1"), "{text}");
}

/// A redirect answers before any backend is chosen (newcomer finding: a redirect rule without
/// a backend was "denied", one without backendRefs "routed" without a word of the redirect),
/// and says where to (newcomer finding: it did not);
/// a rule whose only backend the controller could not resolve fails every request (newcomer
/// finding: it was "routed").
#[test]
fn redirects_answer_and_backends_that_fail_everything_deny() {
    use linkerd2_proxy_api::http_route::{HttpFailureInjector, RequestRedirect};
    let request = Request {
        method: "GET".into(),
        path: "/".into(),
        ..Default::default()
    };
    let redirect = |backends: &[u32]| {
        http1_policy(
            "redir",
            http_route::Rule {
                matches: vec![HttpRouteMatch::default()],
                backends: Some(forwarding(backends)),
                filters: vec![http_route::Filter {
                    kind: Some(http_route::filter::Kind::Redirect(RequestRedirect {
                        host: "example.com".into(),
                        port: 8443,
                        path: Some(linkerd2_proxy_api::http_route::PathModifier {
                            replace: Some(
                                linkerd2_proxy_api::http_route::path_modifier::Replace::Prefix(
                                    "/new".into(),
                                ),
                            ),
                        }),
                        status: 301,
                        ..Default::default()
                    })),
                }],
                ..Default::default()
            },
        )
    };
    for backends in [&[][..], &[0], &[1]] {
        let (_, decision) = explain_policy(&redirect(backends), &request).unwrap();
        assert_eq!(
            decision,
            Decision::Allowed(
                "redirected by route default:redir rule 1: the proxy answers HTTP 301 to \
                 example.com:8443, the matched path prefix replaced by /new (no backend is called)"
                    .into()
            ),
            "{backends:?}"
        );
    }

    let mut missing = forwarding(&[1]);
    if let Some(http_route::distribution::Kind::RandomAvailable(ra)) = &mut missing.kind {
        ra.backends[0].backend.as_mut().unwrap().filters = vec![http_route::Filter {
            kind: Some(http_route::filter::Kind::FailureInjector(
                HttpFailureInjector {
                    status: 500,
                    message: "Service not found missing-svc".into(),
                    ratio: None,
                },
            )),
        }];
    }
    let policy = http1_policy(
        "missing",
        http_route::Rule {
            matches: vec![HttpRouteMatch::default()],
            backends: Some(missing),
            ..Default::default()
        },
    );
    let (text, decision) = explain_policy(&policy, &request).unwrap();
    assert_eq!(
        decision,
        Decision::Denied(format!("route default:missing rule 1 {NO_BACKEND}"))
    );
    assert!(
        text.contains("fails 500 Service not found missing-svc"),
        "{text}"
    );
}

/// An EgressNetwork's `Deny` routes fail what they match: the proxy answers the request itself,
/// so the request is denied, not routed; a failure injector that fails only some requests
/// still routes.
#[test]
fn a_rule_that_fails_every_request_denies_it() {
    use linkerd2_proxy_api::{
        http_route::{HttpFailureInjector, Ratio},
        opaque_route::Forbidden,
        outbound::{OpaqueRoute, opaque_route},
    };
    let http = |ratio: Option<Ratio>| {
        http1_policy(
            "http-egress-deny",
            http_route::Rule {
                matches: vec![HttpRouteMatch::default()],
                backends: Some(forwarding(&[1])),
                filters: vec![http_route::Filter {
                    kind: Some(http_route::filter::Kind::FailureInjector(
                        HttpFailureInjector {
                            status: 403,
                            message: "traffic not allowed".into(),
                            ratio,
                        },
                    )),
                }],
                ..Default::default()
            },
        )
    };

    let request = Request {
        method: "GET".into(),
        path: "/".into(),
        ..Default::default()
    };
    let denied = Decision::Denied(
        "route default:http-egress-deny rule 1 fails every request it matches: HTTP 403 \
         \"traffic not allowed\" (the proxy answers it)"
            .into(),
    );
    for ratio in [
        None,
        Some(Ratio {
            numerator: 1,
            denominator: 1,
        }),
    ] {
        let (text, decision) = explain_policy(&http(ratio), &request).unwrap();
        assert_eq!(decision, denied);
        assert!(
            text.ends_with(&format!(
                "decision:   denied: {}",
                match &denied {
                    Decision::Denied(reason) => reason,
                    Decision::Allowed(_) => unreachable!(),
                }
            )),
            "{text}"
        );
    }
    let half = Some(Ratio {
        numerator: 1,
        denominator: 2,
    });
    let (_, decision) = explain_policy(&http(half), &request).unwrap();
    assert_eq!(
        decision,
        Decision::Allowed("routed by route default:http-egress-deny rule 1".into())
    );

    let opaque = OutboundPolicy {
        metadata: Some(Metadata {
            kind: Some(metadata::Kind::Default("egress".into())),
        }),
        protocol: Some(ProxyProtocol {
            kind: Some(proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {
                routes: vec![OpaqueRoute {
                    metadata: Some(Metadata {
                        kind: Some(metadata::Kind::Default("tcp-egress-deny".into())),
                    }),
                    rules: vec![opaque_route::Rule {
                        backends: None,
                        filters: vec![opaque_route::Filter {
                            kind: Some(opaque_route::filter::Kind::Forbidden(Forbidden {})),
                        }],
                    }],
                }],
            })),
        }),
    };
    let (_, decision) = explain_policy(&opaque, &request).unwrap();
    assert_eq!(
        decision,
        Decision::Denied(
            "route default:tcp-egress-deny forbids every connection (the proxy closes it)".into()
        )
    );
}

/// The proxy converts the whole policy before routing anything, and replaces a policy with one
/// match it cannot convert by one that fails every request (`ClientPolicy::invalid`): a
/// request that a valid route would take is denied too, and the bad match is named (before,
/// the bad route was only reported as not matching and the request routed by another).
#[test]
fn a_match_the_proxy_cannot_convert_fails_the_whole_policy() {
    use linkerd2_proxy_api::http_route::{
        HeaderMatch, QueryParamMatch, header_match, query_param_match,
    };
    let prefix = |p: &str| PathMatch {
        kind: Some(path_match::Kind::Prefix(p.into())),
    };
    let policy = |bad: HttpRouteMatch| {
        let mut policy = http1_policy(
            "web",
            http_route::Rule {
                matches: vec![HttpRouteMatch {
                    path: Some(prefix("/")),
                    ..Default::default()
                }],
                backends: Some(forwarding(&[1])),
                ..Default::default()
            },
        );
        let Some(proxy_protocol::Kind::Http1(h)) =
            policy.protocol.as_mut().and_then(|p| p.kind.as_mut())
        else {
            unreachable!("http1_policy builds an HTTP/1 policy")
        };
        h.routes.push(HttpRoute {
            metadata: Some(Metadata {
                kind: Some(metadata::Kind::Default("broken".into())),
            }),
            hosts: vec![],
            rules: vec![http_route::Rule {
                matches: vec![
                    HttpRouteMatch {
                        path: Some(prefix("/ok")),
                        ..Default::default()
                    },
                    bad,
                ],
                backends: Some(forwarding(&[1])),
                ..Default::default()
            }],
        });
        policy
    };
    let request = Request {
        method: "GET".into(),
        path: "/home".into(),
        ..Default::default()
    };
    let valid = policy(HttpRouteMatch {
        path: Some(prefix("/api")),
        ..Default::default()
    });
    assert_eq!(
        explain_policy(&valid, &request).unwrap().1,
        Decision::Allowed("routed by route default:web rule 1".into())
    );
    let header = |value| HttpRouteMatch {
        headers: vec![HeaderMatch {
            name: "X-Env".into(),
            value,
        }],
        ..Default::default()
    };
    let cases = [
        (
            HttpRouteMatch {
                path: Some(PathMatch {
                    kind: Some(path_match::Kind::Regex("/a(".into())),
                }),
                ..Default::default()
            },
            "regex \"/a(\" is invalid: unclosed group",
        ),
        (
            HttpRouteMatch {
                path: Some(PathMatch { kind: None }),
                ..Default::default()
            },
            "its path match is empty",
        ),
        (header(None), "header x-env has no value to match"),
        (
            header(Some(header_match::Value::Regex(r"\w{1000}\w{1000}".into()))),
            "regex \"\\\\w{1000}\\\\w{1000}\" is invalid: ",
        ),
        (
            HttpRouteMatch {
                query_params: vec![QueryParamMatch {
                    name: "v".into(),
                    value: None,
                }],
                ..Default::default()
            },
            "query parameter v has no value to match",
        ),
        // Tester findings: an empty query parameter name, and a header name that is none.
        (
            HttpRouteMatch {
                query_params: vec![QueryParamMatch {
                    name: String::new(),
                    value: Some(query_param_match::Value::Exact("1".into())),
                }],
                ..Default::default()
            },
            "a query parameter match has no name",
        ),
        (
            HttpRouteMatch {
                headers: vec![HeaderMatch {
                    name: "bad header".into(),
                    value: Some(header_match::Value::Exact(b"x".to_vec())),
                }],
                ..Default::default()
            },
            "header name \"bad header\" is invalid",
        ),
    ];
    for (bad, why) in cases {
        let (text, decision) = explain_policy(&policy(bad), &request).unwrap();
        assert_eq!(decision, Decision::Denied(INVALID_POLICY.into()), "{why}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[2], "request:    GET /home", "{text}");
        assert!(
            lines[3].starts_with(&format!(
                "invalid:    route default:broken rule 1 match 2: {why}"
            )),
            "{text}"
        );
        assert_eq!(
            lines[4],
            format!("decision:   denied: {INVALID_POLICY}"),
            "{text}"
        );
        assert_eq!(lines.len(), 5, "{text}");
    }
}

/// A `Detect` target's HTTP/2 routes are converted too: a bad match there alone fails the
/// policy, though the explanation routes as HTTP/1.
#[test]
fn a_detect_policy_is_invalid_for_a_bad_http2_route() {
    let mut policy = http1_policy(
        "web",
        http_route::Rule {
            backends: Some(forwarding(&[1])),
            ..Default::default()
        },
    );
    let Some(proxy_protocol::Kind::Http1(h)) = policy.protocol.take().and_then(|p| p.kind) else {
        unreachable!("http1_policy builds an HTTP/1 policy")
    };
    let mut http2 = h.routes.clone();
    http2[0].rules[0].matches = vec![HttpRouteMatch {
        path: Some(PathMatch {
            kind: Some(path_match::Kind::Regex("[".into())),
        }),
        ..Default::default()
    }];
    policy.protocol = Some(ProxyProtocol {
        kind: Some(proxy_protocol::Kind::Detect(proxy_protocol::Detect {
            timeout: Some(duration(10_000)),
            opaque: None,
            http1: Some(proxy_protocol::Http1 {
                routes: h.routes,
                failure_accrual: None,
            }),
            http2: Some(proxy_protocol::Http2 {
                routes: http2,
                failure_accrual: None,
            }),
        })),
    });
    let request = Request {
        method: "GET".into(),
        path: "/".into(),
        ..Default::default()
    };
    let (text, decision) = explain_policy(&policy, &request).unwrap();
    assert_eq!(decision, Decision::Denied(INVALID_POLICY.into()));
    assert!(
        text.contains("invalid:    route default:web rule 1 match 1: regex \"[\" is invalid"),
        "{text}"
    );
}

/// A redirect the proxy cannot convert (a host that is no URI authority) fails the whole
/// policy; a redirect that replaces a matched prefix after an exact path match fails the
/// request (tester findings: both were explained as routed or redirected).
#[test]
fn redirects_the_proxy_cannot_follow_are_denials() {
    use linkerd2_proxy_api::http_route::{PathModifier, RequestRedirect, path_modifier};
    let policy = |host: &str, path: PathMatch, replace: path_modifier::Replace| {
        http1_policy(
            "moved",
            http_route::Rule {
                matches: vec![HttpRouteMatch {
                    path: Some(path),
                    ..Default::default()
                }],
                filters: vec![http_route::Filter {
                    kind: Some(http_route::filter::Kind::Redirect(RequestRedirect {
                        host: host.into(),
                        port: 8443,
                        path: Some(PathModifier {
                            replace: Some(replace),
                        }),
                        ..Default::default()
                    })),
                }],
                ..Default::default()
            },
        )
    };
    let exact = || PathMatch {
        kind: Some(path_match::Kind::Exact("/old".into())),
    };
    let prefix = || PathMatch {
        kind: Some(path_match::Kind::Prefix("/old".into())),
    };
    let new_prefix = || path_modifier::Replace::Prefix("/new".into());
    let request = Request {
        method: "GET".into(),
        path: "/old".into(),
        ..Default::default()
    };

    let (text, decision) =
        explain_policy(&policy("new host/x", prefix(), new_prefix()), &request).unwrap();
    assert_eq!(decision, Decision::Denied(INVALID_POLICY.into()));
    assert!(
        text.contains(
            "invalid:    route default:moved rule 1: its redirect's authority \"new host/x:8443\" is invalid"
        ),
        "{text}"
    );

    let (_, decision) =
        explain_policy(&policy("new.example.com", exact(), new_prefix()), &request).unwrap();
    assert_eq!(
        decision,
        Decision::Denied(
            "route default:moved rule 1 redirects by replacing the matched path prefix, but \
             the request matched a path that is not a prefix: the proxy fails it with an error \
             (HTTP 5xx)"
                .into()
        )
    );
    // A path that is no URI path fails the request too (second tester's finding).
    let (_, decision) = explain_policy(
        &policy(
            "new.example.com",
            prefix(),
            path_modifier::Replace::Full("/new path".into()),
        ),
        &request,
    )
    .unwrap();
    assert_eq!(
        decision,
        Decision::Denied(
            "route default:moved rule 1 redirects to \"/new path\", which is no URI path: the \
             proxy fails it with an error (HTTP 5xx)"
                .into()
        )
    );
    // After a prefix match, or replacing the full path, it redirects.
    for (path, replace) in [
        (prefix(), new_prefix()),
        (exact(), path_modifier::Replace::Full("/new".into())),
    ] {
        let (_, decision) =
            explain_policy(&policy("new.example.com", path, replace), &request).unwrap();
        assert!(
            matches!(&decision, Decision::Allowed(text) if text.starts_with("redirected by route default:moved rule 1")),
            "{decision:?}"
        );
    }
}
