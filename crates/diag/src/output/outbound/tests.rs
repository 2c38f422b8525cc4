//! `dst-diag policy outbound` output of TLS routes: SNIs, rule filters and backends.

use super::*;
use linkerd2_proxy_api::{
    destination::WeightedAddr,
    meta::{Metadata, Resource, metadata},
    net::{IpAddress, TcpAddress, ip_address},
    outbound::{OpaqueRoute, ProxyProtocol, TlsRoute, opaque_route, tls_route},
};

fn resource(group: &str, kind: &str, name: &str, port: u32) -> Option<Metadata> {
    Some(Metadata {
        kind: Some(metadata::Kind::Resource(Resource {
            group: group.into(),
            kind: kind.into(),
            namespace: "linkerd-egress".into(),
            name: name.into(),
            port,
            ..Resource::default()
        })),
    })
}

fn default(name: &str) -> Option<Metadata> {
    Some(Metadata {
        kind: Some(metadata::Kind::Default(name.into())),
    })
}

/// A Forward backend to 8.8.8.8:443 named as the EgressNetwork `internet`.
fn forward() -> Backend {
    Backend {
        metadata: resource("policy.linkerd.io", "EgressNetwork", "internet", 443),
        queue: None,
        kind: Some(backend::Kind::Forward(WeightedAddr {
            addr: Some(TcpAddress {
                ip: Some(IpAddress {
                    ip: Some(ip_address::Ip::Ipv4(0x0808_0808)),
                }),
                port: 443,
            }),
            weight: 1,
            ..WeightedAddr::default()
        })),
    }
}

/// `Tls{[TLSRoute api-tls (SNIs api.example.com, *.example.org; Forward weight 2 and an
/// invalid backend), tls-egress-deny]}` as the policy controller sends it for an
/// EgressNetwork.
fn tls_policy() -> OutboundPolicy {
    use linkerd2_proxy_api::tls_route::{SniMatch, sni_match};
    use tls_route::{
        Distribution, Filter, RouteBackend, Rule, WeightedRouteBackend, distribution, filter,
    };
    let api_tls = TlsRoute {
        metadata: resource("gateway.networking.k8s.io", "TLSRoute", "api-tls", 0),
        snis: vec![
            SniMatch {
                r#match: Some(sni_match::Match::Exact("api.example.com".into())),
            },
            SniMatch {
                r#match: Some(sni_match::Match::Suffix(sni_match::Suffix {
                    reverse_labels: vec!["org".into(), "example".into()],
                })),
            },
        ],
        rules: vec![Rule {
            backends: Some(Distribution {
                kind: Some(distribution::Kind::RandomAvailable(
                    distribution::RandomAvailable {
                        backends: vec![
                            WeightedRouteBackend {
                                backend: Some(RouteBackend {
                                    backend: Some(forward()),
                                    filters: vec![],
                                }),
                                weight: 2,
                            },
                            WeightedRouteBackend {
                                backend: Some(RouteBackend {
                                    backend: Some(Backend {
                                        metadata: default("invalid"),
                                        queue: None,
                                        kind: None,
                                    }),
                                    filters: vec![Filter {
                                        kind: Some(filter::Kind::Invalid(
                                            linkerd2_proxy_api::opaque_route::Invalid {
                                                message: "EgressNetwork not found gone".into(),
                                            },
                                        )),
                                    }],
                                }),
                                weight: 1,
                            },
                        ],
                    },
                )),
            }),
            filters: vec![],
        }],
    };
    let deny = TlsRoute {
        metadata: default("tls-egress-deny"),
        snis: vec![],
        rules: vec![Rule {
            backends: Some(Distribution {
                kind: Some(distribution::Kind::FirstAvailable(
                    distribution::FirstAvailable {
                        backends: vec![RouteBackend {
                            backend: Some(forward()),
                            filters: vec![],
                        }],
                    },
                )),
            }),
            filters: vec![Filter {
                kind: Some(filter::Kind::Forbidden(
                    linkerd2_proxy_api::opaque_route::Forbidden {},
                )),
            }],
        }],
    };
    OutboundPolicy {
        metadata: resource("policy.linkerd.io", "EgressNetwork", "internet", 443),
        protocol: Some(ProxyProtocol {
            kind: Some(proxy_protocol::Kind::Tls(proxy_protocol::Tls {
                routes: vec![api_tls, deny],
            })),
        }),
    }
}

#[test]
fn tls_routes_table() {
    assert_eq!(
        outbound_policy_table(&tls_policy()),
        "\
policy:   EgressNetwork.policy.linkerd.io linkerd-egress/internet:443
protocol: tls
route:    [tls] TLSRoute.gateway.networking.k8s.io linkerd-egress/api-tls
  match:  sni api.example.com | sni *.example.org
  backend: weight 2 EgressNetwork.policy.linkerd.io linkerd-egress/internet:443 -> forward 8.8.8.8:443
  backend: weight 1 default:invalid -> none fails: invalid EgressNetwork not found gone
route:    [tls] default:tls-egress-deny
  filter: forbidden
  backend: weight 1 EgressNetwork.policy.linkerd.io linkerd-egress/internet:443 -> forward 8.8.8.8:443"
    );
}

#[test]
fn tls_routes_json() {
    let internet = json!({
        "weight": 1,
        "backend": "EgressNetwork.policy.linkerd.io linkerd-egress/internet:443",
        "target": "forward 8.8.8.8:443",
        "failures": [],
    });
    let mut weighted = internet.clone();
    weighted["weight"] = json!(2);
    assert_eq!(
        outbound_policy_json(&tls_policy()),
        json!({
            "metadata": "EgressNetwork.policy.linkerd.io linkerd-egress/internet:443",
            "protocol": "tls",
            "routes": [
                {
                    "kind": "tls",
                    "route": "TLSRoute.gateway.networking.k8s.io linkerd-egress/api-tls",
                    "rules": [{
                        "matches": ["sni api.example.com", "sni *.example.org"],
                        "filters": [],
                        "backends": [weighted, {
                            "weight": 1,
                            "backend": "default:invalid",
                            "target": "none",
                            "failures": ["invalid EgressNetwork not found gone"],
                        }],
                    }],
                },
                {
                    "kind": "tls",
                    "route": "default:tls-egress-deny",
                    "rules": [{
                        "matches": [],
                        "filters": ["forbidden"],
                        "backends": [internet],
                    }],
                },
            ],
        })
    );
}

/// A rule's own filters are shown for every kind: an undefined port's opaque rule forbids
/// without a backend, and an egress deny HTTP rule fails every request before its backend.
#[test]
fn rule_filters_of_every_kind_are_shown() {
    use linkerd2_proxy_api::http_route::HttpFailureInjector;
    use linkerd2_proxy_api::outbound::{HttpRoute, http_route};
    let opaque = OutboundPolicy {
        metadata: default("undefined-port"),
        protocol: Some(ProxyProtocol {
            kind: Some(proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {
                routes: vec![OpaqueRoute {
                    metadata: default("undefined-port"),
                    rules: vec![opaque_route::Rule {
                        backends: None,
                        filters: vec![opaque_route::Filter {
                            kind: Some(opaque_route::filter::Kind::Forbidden(
                                linkerd2_proxy_api::opaque_route::Forbidden {},
                            )),
                        }],
                    }],
                }],
            })),
        }),
    };
    assert_eq!(
        outbound_policy_table(&opaque),
        "\
policy:   default:undefined-port
protocol: opaque
route:    [opaque] default:undefined-port
  filter: forbidden"
    );
    let http = OutboundPolicy {
        metadata: default("egress"),
        protocol: Some(ProxyProtocol {
            kind: Some(proxy_protocol::Kind::Http1(proxy_protocol::Http1 {
                routes: vec![HttpRoute {
                    metadata: default("http-egress-deny"),
                    rules: vec![http_route::Rule {
                        filters: vec![http_route::Filter {
                            kind: Some(http_route::filter::Kind::FailureInjector(
                                HttpFailureInjector {
                                    status: 403,
                                    message: "traffic not allowed".into(),
                                    ratio: None,
                                },
                            )),
                        }],
                        ..http_route::Rule::default()
                    }],
                    ..HttpRoute::default()
                }],
                failure_accrual: None,
            })),
        }),
    };
    let json = outbound_policy_json(&http);
    assert_eq!(
        json["routes"][0]["rules"][0]["filters"],
        json!(["fail 403 traffic not allowed"])
    );
    assert!(
        outbound_policy_table(&http).contains("\n  filter: fail 403 traffic not allowed"),
        "{}",
        outbound_policy_table(&http)
    );
}

/// An HTTP rule's timeouts and retry policy are shown, as the README promises (newcomer
/// finding: only `explain outbound` showed them); unset ones are left out of the table.
#[test]
fn http_rule_timeouts_and_retries_are_shown() {
    use linkerd2_proxy_api::http_route::Timeouts;
    use linkerd2_proxy_api::outbound::{HttpRoute, http_route};
    let seconds = |seconds| prost_types::Duration { seconds, nanos: 0 };
    let rule = |timeouts, retry| http_route::Rule {
        timeouts,
        retry,
        ..http_route::Rule::default()
    };
    let policy = OutboundPolicy {
        metadata: default("web-svc"),
        protocol: Some(ProxyProtocol {
            kind: Some(proxy_protocol::Kind::Http1(proxy_protocol::Http1 {
                routes: vec![HttpRoute {
                    metadata: default("web-route"),
                    rules: vec![
                        rule(
                            Some(Timeouts {
                                request: Some(seconds(3)),
                                ..Timeouts::default()
                            }),
                            Some(http_route::Retry {
                                max_retries: 2,
                                conditions: Some(http_route::retry::Conditions {
                                    status_ranges: vec![
                                        http_route::retry::conditions::StatusRange {
                                            start: 500,
                                            end: 599,
                                        },
                                    ],
                                }),
                                ..http_route::Retry::default()
                            }),
                        ),
                        rule(None, None),
                    ],
                    ..HttpRoute::default()
                }],
                failure_accrual: None,
            })),
        }),
    };
    let json = outbound_policy_json(&policy);
    let rules = &json["routes"][0]["rules"];
    assert_eq!(rules[0]["timeouts"], json!("request 3s"));
    assert_eq!(rules[0]["retry"], json!("up to 2 on status 500-599"));
    assert_eq!(rules[1]["timeouts"], json!("none"));
    assert_eq!(rules[1]["retry"], json!("none"));
    assert_eq!(
        outbound_policy_table(&policy),
        "\
policy:   default:web-svc
protocol: http1
route:    [http1] default:web-route
  timeouts: request 3s
  retry: up to 2 on status 500-599"
    );
}
