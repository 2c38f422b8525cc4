#![allow(deprecated)] // `requestTimeout` is deprecated in the API but still sent (spec §5.6).

//! [`OutboundPolicy`] → `io.linkerd.proxy.outbound.OutboundPolicy` (spec/policy.md §5.6, §5.7).
//!
//! Every backend carries metadata and a queue; balancers name the `Destination.Get` path the
//! proxy resolves (`<svc>.<ns>.svc.<domain>:<port>`).

use linkerd_index::{
    outbound::{
        Backend, Backoff, DETECT_TIMEOUT, FailureAccrual, GrpcRetryConditions, LoadEstimator,
        NoMatch, OutboundPolicy, OutboundProtocol, OutboundRoute, OutboundRouteRef, OutboundRule,
        RouteTimeouts, ServicePolicy,
    },
    routes::{Filter, GrpcRouteMatch, HostMatch, HttpRouteMatch},
};
use linkerd2_proxy_api::{
    destination, grpc_route as grpc_api, http_route, meta, opaque_route,
    outbound::{self as api, backend, proxy_protocol},
    tls_route,
};
use std::{net::SocketAddr, time::Duration};

use super::{duration, grpc_match, header_modifier, host_match, http_match, redirect};

/// Queue of every backend (§5.6).
const QUEUE_CAPACITY: u32 = 100;
const QUEUE_FAILFAST: Duration = Duration::from_secs(3);
/// PeakEWMA parameters (§5.6).
const EWMA_DEFAULT_RTT: Duration = Duration::from_millis(30);
const EWMA_DECAY: Duration = Duration::from_secs(10);
const PENALTY_DECAY: Duration = Duration::from_secs(10);
/// Retry constants (§5.6).
const RETRY_MAX_REQUEST_BYTES: u32 = 65_536;
const RETRY_MIN_BACKOFF: Duration = Duration::from_millis(25);
const RETRY_MAX_BACKOFF: Duration = Duration::from_millis(250);

/// gRPC code of requests sent to a backend Service that does not exist. Upstream sends 500, not
/// a gRPC code (§12); the GRPCRoute documentation asks for UNAVAILABLE, which we send.
pub const GRPC_BACKEND_NOT_FOUND_CODE: u32 = 14;

/// Turns outbound views into the proxy API's `OutboundPolicy`.
#[derive(Clone, Debug, Default)]
pub struct OutboundTranslator {
    /// `--allow-l5d-request-headers`, set on every HTTP and gRPC rule.
    pub allow_l5d_request_headers: bool,
}

// === impl OutboundTranslator ===

impl OutboundTranslator {
    /// A translator with `--allow-l5d-request-headers`.
    pub fn new(allow_l5d_request_headers: bool) -> Self {
        Self {
            allow_l5d_request_headers,
        }
    }

    /// The wire form of `policy`.
    pub fn policy(&self, policy: &OutboundPolicy) -> api::OutboundPolicy {
        match policy {
            OutboundPolicy::Service(svc) => self.service(svc),
            OutboundPolicy::UndefinedPort {
                namespace,
                name,
                port,
            } => api::OutboundPolicy {
                metadata: Some(service_metadata(namespace, name, *port)),
                protocol: Some(api::ProxyProtocol {
                    kind: Some(proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {
                        routes: vec![api::OpaqueRoute {
                            metadata: Some(default_metadata("undefined-port")),
                            rules: vec![api::opaque_route::Rule {
                                backends: Some(api::opaque_route::Distribution {
                                    kind: Some(api::opaque_route::distribution::Kind::Empty(
                                        api::opaque_route::distribution::Empty {},
                                    )),
                                }),
                                filters: vec![api::opaque_route::Filter {
                                    kind: Some(api::opaque_route::filter::Kind::Forbidden(
                                        opaque_route::Forbidden {},
                                    )),
                                }],
                            }],
                        }],
                    })),
                }),
            },
            OutboundPolicy::Fallback { original_dst } => fallback(*original_dst),
        }
    }

    fn service(&self, svc: &ServicePolicy) -> api::OutboundPolicy {
        let accrual = svc.failure_accrual.as_ref().map(failure_accrual);
        let ctx = Ctx {
            svc,
            allow_l5d: self.allow_l5d_request_headers,
        };
        let kind = match &svc.protocol {
            OutboundProtocol::Detect {
                timeout,
                http_routes,
            } => {
                let routes: Vec<_> = http_routes.iter().map(|r| ctx.http_route(r)).collect();
                proxy_protocol::Kind::Detect(proxy_protocol::Detect {
                    timeout: Some(duration(*timeout)),
                    opaque: Some(proxy_protocol::Opaque {
                        routes: vec![ctx.default_opaque_route()],
                    }),
                    http1: Some(proxy_protocol::Http1 {
                        routes: routes.clone(),
                        failure_accrual: accrual,
                    }),
                    http2: Some(proxy_protocol::Http2 {
                        routes,
                        failure_accrual: accrual,
                    }),
                })
            }
            OutboundProtocol::Http1(routes) => proxy_protocol::Kind::Http1(proxy_protocol::Http1 {
                routes: routes.iter().map(|r| ctx.http_route(r)).collect(),
                failure_accrual: accrual,
            }),
            OutboundProtocol::Http2(routes) => proxy_protocol::Kind::Http2(proxy_protocol::Http2 {
                routes: routes.iter().map(|r| ctx.http_route(r)).collect(),
                failure_accrual: accrual,
            }),
            OutboundProtocol::Grpc(routes) => proxy_protocol::Kind::Grpc(proxy_protocol::Grpc {
                routes: routes.iter().map(|r| ctx.grpc_route(r)).collect(),
                failure_accrual: accrual,
            }),
            OutboundProtocol::Opaque => proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {
                routes: vec![ctx.default_opaque_route()],
            }),
            OutboundProtocol::Tls(routes) => proxy_protocol::Kind::Tls(proxy_protocol::Tls {
                routes: routes.iter().map(|r| ctx.tls_route(r)).collect(),
            }),
            OutboundProtocol::OpaqueRoute(route) => {
                proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {
                    routes: vec![ctx.opaque_route(route)],
                })
            }
        };
        api::OutboundPolicy {
            metadata: Some(service_metadata(&svc.namespace, &svc.name, svc.port)),
            protocol: Some(api::ProxyProtocol { kind: Some(kind) }),
        }
    }
}

/// One Service policy being encoded.
struct Ctx<'a> {
    svc: &'a ServicePolicy,
    allow_l5d: bool,
}

impl Ctx<'_> {
    /// The parent itself: a balancer over its authority, with `load`.
    fn default_backend(&self, load: &LoadEstimator) -> api::Backend {
        balancer(
            service_metadata(&self.svc.namespace, &self.svc.name, self.svc.port),
            &self.svc.authority,
            load,
        )
    }

    /// `opaq`: FirstAvailable over the parent with plain PeakEWMA (§5.6, §5.7).
    fn default_opaque_route(&self) -> api::OpaqueRoute {
        use api::opaque_route::{Distribution, RouteBackend, Rule, distribution};
        api::OpaqueRoute {
            metadata: Some(default_metadata("opaq")),
            rules: vec![Rule {
                backends: Some(Distribution {
                    kind: Some(distribution::Kind::FirstAvailable(
                        distribution::FirstAvailable {
                            backends: vec![RouteBackend {
                                backend: Some(self.default_backend(&LoadEstimator::PeakEwma)),
                                filters: vec![],
                            }],
                        },
                    )),
                }),
                filters: vec![],
            }],
        }
    }

    fn http_route(&self, route: &OutboundRoute<HttpRouteMatch>) -> api::HttpRoute {
        use api::http_route::{
            Distribution, Filter as F, RouteBackend, Rule, WeightedRouteBackend, distribution,
            filter::Kind,
        };
        let rule = |rule: &OutboundRule<HttpRouteMatch>| {
            let backends = if rule.backends.is_empty() {
                distribution::Kind::FirstAvailable(distribution::FirstAvailable {
                    backends: vec![RouteBackend {
                        backend: Some(self.default_backend(&self.svc.load)),
                        filters: vec![],
                        request_timeout: None,
                    }],
                })
            } else {
                distribution::Kind::RandomAvailable(distribution::RandomAvailable {
                    backends: rule
                        .backends
                        .iter()
                        .map(|b| {
                            let (weight, backend, filters) = self.backend(b);
                            let failure = |message: String, status: u32| F {
                                kind: Some(Kind::FailureInjector(
                                    http_route::HttpFailureInjector {
                                        status,
                                        message,
                                        ratio: None,
                                    },
                                )),
                            };
                            let filters = match filters {
                                Ok(filters) => filters.iter().filter_map(http_filter).collect(),
                                Err(message) => vec![failure(message, 500)],
                            };
                            WeightedRouteBackend {
                                backend: Some(RouteBackend {
                                    backend: Some(backend),
                                    filters,
                                    request_timeout: None,
                                }),
                                weight,
                            }
                        })
                        .collect(),
                })
            };
            Rule {
                matches: rule.matches.iter().map(http_match).collect(),
                filters: rule.filters.iter().filter_map(http_filter).collect(),
                backends: Some(Distribution {
                    kind: Some(backends),
                }),
                request_timeout: rule.timeouts.request.map(duration),
                timeouts: Some(timeouts(&rule.timeouts)),
                retry: rule.retry.as_ref().map(|r| api::http_route::Retry {
                    max_retries: u32::from(r.limit),
                    max_request_bytes: RETRY_MAX_REQUEST_BYTES,
                    conditions: r
                        .http
                        .as_ref()
                        .map(|ranges| api::http_route::retry::Conditions {
                            status_ranges: ranges
                                .iter()
                                .map(|r| api::http_route::retry::conditions::StatusRange {
                                    start: u32::from(*r.start()),
                                    end: u32::from(*r.end()),
                                })
                                .collect(),
                        }),
                    timeout: r.timeout.map(duration),
                    backoff: Some(retry_backoff()),
                }),
                allow_l5d_request_headers: self.allow_l5d,
            }
        };
        api::HttpRoute {
            metadata: Some(route_metadata(&route.reference)),
            hosts: route.hostnames.iter().map(host_match).collect(),
            rules: route.rules.iter().map(rule).collect(),
        }
    }

    fn grpc_route(&self, route: &OutboundRoute<GrpcRouteMatch>) -> api::GrpcRoute {
        use api::grpc_route::{
            Distribution, Filter as F, RouteBackend, Rule, WeightedRouteBackend, distribution,
            filter::Kind,
        };
        let rule = |rule: &OutboundRule<GrpcRouteMatch>| {
            let backends = if rule.backends.is_empty() {
                distribution::Kind::FirstAvailable(distribution::FirstAvailable {
                    backends: vec![RouteBackend {
                        backend: Some(self.default_backend(&self.svc.load)),
                        filters: vec![],
                        request_timeout: None,
                    }],
                })
            } else {
                distribution::Kind::RandomAvailable(distribution::RandomAvailable {
                    backends: rule
                        .backends
                        .iter()
                        .map(|b| {
                            let (weight, backend, filters) = self.backend(b);
                            let filters = match filters {
                                Ok(filters) => filters.iter().filter_map(grpc_filter).collect(),
                                Err(message) => vec![F {
                                    kind: Some(Kind::FailureInjector(
                                        grpc_api::GrpcFailureInjector {
                                            code: GRPC_BACKEND_NOT_FOUND_CODE,
                                            message,
                                            ratio: None,
                                        },
                                    )),
                                }],
                            };
                            WeightedRouteBackend {
                                backend: Some(RouteBackend {
                                    backend: Some(backend),
                                    filters,
                                    request_timeout: None,
                                }),
                                weight,
                            }
                        })
                        .collect(),
                })
            };
            Rule {
                matches: rule.matches.iter().map(grpc_match).collect(),
                filters: rule.filters.iter().filter_map(grpc_filter).collect(),
                backends: Some(Distribution {
                    kind: Some(backends),
                }),
                request_timeout: rule.timeouts.request.map(duration),
                timeouts: Some(timeouts(&rule.timeouts)),
                retry: rule.retry.as_ref().map(|r| api::grpc_route::Retry {
                    max_retries: u32::from(r.limit),
                    max_request_bytes: RETRY_MAX_REQUEST_BYTES,
                    conditions: r.grpc.as_ref().map(grpc_conditions),
                    timeout: r.timeout.map(duration),
                    backoff: Some(retry_backoff()),
                }),
                allow_l5d_request_headers: self.allow_l5d,
            }
        };
        api::GrpcRoute {
            metadata: Some(route_metadata(&route.reference)),
            hosts: route.hostnames.iter().map(host_match).collect(),
            rules: route.rules.iter().map(rule).collect(),
        }
    }

    /// A TLSRoute: SNIs from its hostnames, its one rule (§5.6).
    fn tls_route(&self, route: &OutboundRoute<NoMatch>) -> api::TlsRoute {
        use api::tls_route::{
            Distribution, Filter as F, RouteBackend, Rule, WeightedRouteBackend, distribution,
            filter::Kind,
        };
        let rule = |rule: &OutboundRule<NoMatch>| {
            let backends = if rule.backends.is_empty() {
                distribution::Kind::FirstAvailable(distribution::FirstAvailable {
                    backends: vec![RouteBackend {
                        backend: Some(self.default_backend(&LoadEstimator::PeakEwma)),
                        filters: vec![],
                    }],
                })
            } else {
                distribution::Kind::RandomAvailable(distribution::RandomAvailable {
                    backends: rule
                        .backends
                        .iter()
                        .map(|b| {
                            let (weight, backend, filters) =
                                self.backend_with(b, &LoadEstimator::PeakEwma);
                            let filters = match filters {
                                Ok(_) => vec![],
                                Err(message) => vec![F {
                                    kind: Some(Kind::Invalid(opaque_route::Invalid { message })),
                                }],
                            };
                            WeightedRouteBackend {
                                backend: Some(RouteBackend {
                                    backend: Some(backend),
                                    filters,
                                }),
                                weight,
                            }
                        })
                        .collect(),
                })
            };
            Rule {
                backends: Some(Distribution {
                    kind: Some(backends),
                }),
                filters: vec![],
            }
        };
        api::TlsRoute {
            metadata: Some(route_metadata(&route.reference)),
            snis: route.hostnames.iter().map(sni_match).collect(),
            rules: route.rules.iter().map(rule).collect(),
        }
    }

    /// A TCPRoute as an opaque route: its one rule (§5.6).
    fn opaque_route(&self, route: &OutboundRoute<NoMatch>) -> api::OpaqueRoute {
        use api::opaque_route::{
            Distribution, Filter as F, RouteBackend, Rule, WeightedRouteBackend, distribution,
            filter::Kind,
        };
        let rule = |rule: &OutboundRule<NoMatch>| {
            let backends = if rule.backends.is_empty() {
                distribution::Kind::FirstAvailable(distribution::FirstAvailable {
                    backends: vec![RouteBackend {
                        backend: Some(self.default_backend(&LoadEstimator::PeakEwma)),
                        filters: vec![],
                    }],
                })
            } else {
                distribution::Kind::RandomAvailable(distribution::RandomAvailable {
                    backends: rule
                        .backends
                        .iter()
                        .map(|b| {
                            let (weight, backend, filters) =
                                self.backend_with(b, &LoadEstimator::PeakEwma);
                            let filters = match filters {
                                Ok(_) => vec![],
                                Err(message) => vec![F {
                                    kind: Some(Kind::Invalid(opaque_route::Invalid { message })),
                                }],
                            };
                            WeightedRouteBackend {
                                backend: Some(RouteBackend {
                                    backend: Some(backend),
                                    filters,
                                }),
                                weight,
                            }
                        })
                        .collect(),
                })
            };
            Rule {
                backends: Some(Distribution {
                    kind: Some(backends),
                }),
                filters: vec![],
            }
        };
        api::OpaqueRoute {
            metadata: Some(route_metadata(&route.reference)),
            rules: route.rules.iter().map(rule).collect(),
        }
    }

    /// A rule backend of an HTTP or gRPC route, balanced with the parent's load estimator.
    fn backend<'b>(&self, b: &'b Backend) -> (u32, api::Backend, Result<&'b [Filter], String>) {
        self.backend_with(b, &self.svc.load)
    }

    /// A rule backend: its weight, the backend (an existing Service balanced with `load`), and
    /// its filters or the message of the failure that replaces them (a missing Service, an
    /// invalid backend).
    fn backend_with<'b>(
        &self,
        b: &'b Backend,
        load: &LoadEstimator,
    ) -> (u32, api::Backend, Result<&'b [Filter], String>) {
        match b {
            Backend::Service {
                weight,
                namespace,
                name,
                port,
                authority,
                filters,
                exists: true,
            } => (
                *weight,
                balancer(service_metadata(namespace, name, *port), authority, load),
                Ok(filters),
            ),
            Backend::Service {
                weight,
                namespace,
                name,
                port,
                exists: false,
                ..
            } => (
                *weight,
                api::Backend {
                    metadata: Some(service_metadata(namespace, name, *port)),
                    queue: Some(queue()),
                    kind: None,
                },
                Err(format!("Service not found {name}")),
            ),
            Backend::Invalid { weight, message } => (
                *weight,
                api::Backend {
                    metadata: Some(default_metadata("invalid")),
                    queue: Some(queue()),
                    kind: None,
                },
                Err(message.clone()),
            ),
        }
    }
}

/// The fallback for an address outside the cluster: forward to it as is (§5.6).
fn fallback(original_dst: SocketAddr) -> api::OutboundPolicy {
    let backend = api::Backend {
        metadata: Some(default_metadata("egress-fallback")),
        queue: Some(queue()),
        kind: Some(backend::Kind::Forward(destination::WeightedAddr {
            addr: Some(original_dst.into()),
            weight: 1,
            ..destination::WeightedAddr::default()
        })),
    };
    let http_routes = vec![api::HttpRoute {
        metadata: Some(default_metadata("egress-fallback")),
        hosts: vec![],
        rules: vec![api::http_route::Rule {
            matches: vec![http_route::HttpRouteMatch::default()],
            filters: vec![],
            backends: Some(api::http_route::Distribution {
                kind: Some(api::http_route::distribution::Kind::FirstAvailable(
                    api::http_route::distribution::FirstAvailable {
                        backends: vec![api::http_route::RouteBackend {
                            backend: Some(backend.clone()),
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
    }];
    api::OutboundPolicy {
        metadata: Some(default_metadata("egress-fallback")),
        protocol: Some(api::ProxyProtocol {
            kind: Some(proxy_protocol::Kind::Detect(proxy_protocol::Detect {
                timeout: Some(duration(DETECT_TIMEOUT)),
                opaque: Some(proxy_protocol::Opaque {
                    routes: vec![api::OpaqueRoute {
                        metadata: Some(default_metadata("egress-fallback")),
                        rules: vec![api::opaque_route::Rule {
                            backends: Some(api::opaque_route::Distribution {
                                kind: Some(api::opaque_route::distribution::Kind::FirstAvailable(
                                    api::opaque_route::distribution::FirstAvailable {
                                        backends: vec![api::opaque_route::RouteBackend {
                                            backend: Some(backend),
                                            filters: vec![],
                                        }],
                                    },
                                )),
                            }),
                            filters: vec![],
                        }],
                    }],
                }),
                http1: Some(proxy_protocol::Http1 {
                    routes: http_routes.clone(),
                    failure_accrual: None,
                }),
                http2: Some(proxy_protocol::Http2 {
                    routes: http_routes,
                    failure_accrual: None,
                }),
            })),
        }),
    }
}

fn default_metadata(name: &str) -> meta::Metadata {
    meta::Metadata {
        kind: Some(meta::metadata::Kind::Default(name.to_string())),
    }
}

/// `Resource{core, Service, name, namespace, port}`.
fn service_metadata(namespace: &str, name: &str, port: u16) -> meta::Metadata {
    meta::Metadata {
        kind: Some(meta::metadata::Kind::Resource(meta::Resource {
            group: "core".into(),
            kind: "Service".into(),
            name: name.to_string(),
            namespace: namespace.to_string(),
            section: String::new(),
            port: u32::from(port),
        })),
    }
}

fn route_metadata(reference: &OutboundRouteRef) -> meta::Metadata {
    match reference {
        OutboundRouteRef::Default(name) => default_metadata(name),
        OutboundRouteRef::Resource {
            group,
            kind,
            namespace,
            name,
        } => meta::Metadata {
            kind: Some(meta::metadata::Kind::Resource(meta::Resource {
                group: group.clone(),
                kind: kind.clone(),
                name: name.clone(),
                namespace: namespace.clone(),
                ..meta::Resource::default()
            })),
        },
    }
}

fn queue() -> api::Queue {
    api::Queue {
        capacity: QUEUE_CAPACITY,
        failfast_timeout: Some(duration(QUEUE_FAILFAST)),
    }
}

/// A balancer resolving `authority` with `Destination.Get`.
fn balancer(metadata: meta::Metadata, authority: &str, load: &LoadEstimator) -> api::Backend {
    use backend::balance_p2c::{Load, PeakEwma, PenaltyPeakEwma};
    let load = match load {
        LoadEstimator::PeakEwma => Load::PeakEwma(PeakEwma {
            default_rtt: Some(duration(EWMA_DEFAULT_RTT)),
            decay: Some(duration(EWMA_DECAY)),
        }),
        LoadEstimator::PenaltyPeakEwma {
            penalty,
            max_retry_after,
        } => Load::PenaltyPeakEwma(PenaltyPeakEwma {
            default_rtt: Some(duration(EWMA_DEFAULT_RTT)),
            decay: Some(duration(EWMA_DECAY)),
            penalty: Some(duration(*penalty)),
            max_retry_after: Some(duration(*max_retry_after)),
            penalty_decay: Some(duration(PENALTY_DECAY)),
        }),
    };
    api::Backend {
        metadata: Some(metadata),
        queue: Some(queue()),
        kind: Some(backend::Kind::Balancer(backend::BalanceP2c {
            discovery: Some(backend::EndpointDiscovery {
                kind: Some(backend::endpoint_discovery::Kind::Dst(
                    backend::endpoint_discovery::DestinationGet {
                        path: authority.to_string(),
                    },
                )),
            }),
            load: Some(load),
        })),
    }
}

fn timeouts(t: &RouteTimeouts) -> http_route::Timeouts {
    http_route::Timeouts {
        response: t.response.map(duration),
        request: t.request.map(duration),
        idle: t.idle.map(duration),
    }
}

fn retry_backoff() -> api::ExponentialBackoff {
    api::ExponentialBackoff {
        min_backoff: Some(duration(RETRY_MIN_BACKOFF)),
        max_backoff: Some(duration(RETRY_MAX_BACKOFF)),
        jitter_ratio: 1.0,
        respect_retry_after_hint: false,
    }
}

fn grpc_conditions(c: &GrpcRetryConditions) -> api::grpc_route::retry::Conditions {
    api::grpc_route::retry::Conditions {
        cancelled: c.cancelled,
        deadine_exceeded: c.deadline_exceeded,
        resource_exhausted: c.resource_exhausted,
        internal: c.internal,
        unavailable: c.unavailable,
    }
}

fn backoff(b: &Backoff) -> api::ExponentialBackoff {
    api::ExponentialBackoff {
        min_backoff: Some(duration(b.min)),
        max_backoff: Some(duration(b.max)),
        jitter_ratio: b.jitter,
        respect_retry_after_hint: b.respect_retry_after,
    }
}

fn failure_accrual(a: &FailureAccrual) -> api::FailureAccrual {
    use api::failure_accrual::{ConsecutiveFailures, Kind, Unified};
    let kind = match a {
        FailureAccrual::Consecutive {
            max_failures,
            backoff: b,
        } => Kind::ConsecutiveFailures(ConsecutiveFailures {
            max_failures: *max_failures,
            backoff: Some(backoff(b)),
        }),
        FailureAccrual::Unified {
            max_consecutive_failures,
            success_rate_threshold,
            window,
            min_requests,
            backoff: b,
        } => Kind::Unified(Unified {
            success_rate_threshold: *success_rate_threshold,
            decay: Some(duration(*window)),
            min_requests: *min_requests,
            max_consecutive_failures: *max_consecutive_failures,
            backoff: Some(backoff(b)),
        }),
    };
    api::FailureAccrual {
        ejection: None,
        kind: Some(kind),
    }
}

/// Outbound HTTP filters: header modifiers (request and response) and redirects.
fn http_filter(f: &Filter) -> Option<api::http_route::Filter> {
    use api::http_route::filter::Kind;
    let kind = match f {
        Filter::RequestHeaderModifier(m) => Kind::RequestHeaderModifier(header_modifier(m)),
        Filter::ResponseHeaderModifier(m) => {
            let m = header_modifier(m);
            Kind::ResponseHeaderModifier(http_route::ResponseHeaderModifier {
                add: m.add,
                set: m.set,
                remove: m.remove,
            })
        }
        Filter::RequestRedirect(r) => Kind::Redirect(redirect(r)),
    };
    Some(api::http_route::Filter { kind: Some(kind) })
}

/// Outbound gRPC filters: request header modifiers (the API has no response modifier).
fn grpc_filter(f: &Filter) -> Option<api::grpc_route::Filter> {
    match f {
        Filter::RequestHeaderModifier(m) => Some(api::grpc_route::Filter {
            kind: Some(api::grpc_route::filter::Kind::RequestHeaderModifier(
                header_modifier(m),
            )),
        }),
        Filter::ResponseHeaderModifier(_) | Filter::RequestRedirect(_) => None,
    }
}

/// A TLSRoute hostname as an SNI match (§5.4).
fn sni_match(host: &HostMatch) -> tls_route::SniMatch {
    let m = match host {
        HostMatch::Exact(name) => tls_route::sni_match::Match::Exact(name.clone()),
        HostMatch::Suffix { reverse_labels } => {
            tls_route::sni_match::Match::Suffix(tls_route::sni_match::Suffix {
                reverse_labels: reverse_labels.clone(),
            })
        }
    };
    tls_route::SniMatch { r#match: Some(m) }
}

#[cfg(test)]
mod tests;
