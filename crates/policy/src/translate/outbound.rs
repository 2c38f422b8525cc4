#![allow(deprecated)] // `requestTimeout` is deprecated in the API but still sent (spec §5.6).

//! [`OutboundPolicy`] → `io.linkerd.proxy.outbound.OutboundPolicy` (spec/policy.md §5.6, §5.7).
//!
//! Every backend carries metadata and a queue; balancers name the `Destination.Get` path the
//! proxy resolves (`<svc>.<ns>.svc.<domain>:<port>`).

use linkerd_index::{
    outbound::{
        Backend, Backoff, DETECT_TIMEOUT, EgressPolicy, FailureAccrual, GrpcRetryConditions,
        LoadEstimator, NoMatch, OutboundPolicy, OutboundProtocol, OutboundRoute, OutboundRouteRef,
        OutboundRule, RouteTimeouts, ServicePolicy, TrafficPolicy,
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
/// gRPC PERMISSION_DENIED: the code of `grpc-egress-deny` (§5.6).
pub const GRPC_PERMISSION_DENIED: u32 = 7;
/// The message of the egress deny routes' failures (§5.6).
pub const EGRESS_DENIED: &str = "traffic not allowed";
/// The API group of EgressNetworks.
const POLICY_GROUP: &str = "policy.linkerd.io";

/// Turns outbound views into the proxy API's `OutboundPolicy`.
#[derive(Clone, Debug, Default)]
pub struct OutboundTranslator {
    /// `--allow-l5d-request-headers`, set on every HTTP and gRPC rule.
    pub allow_l5d_request_headers: bool,
}

// === impl OutboundTranslator ===

/// The one rule of a TLSRoute or TCPRoute (`$api`: `tls_route` or `opaque_route`, whose
/// generated types have the same shape): its backends, or the default backend when it names
/// none; a backend that cannot be served carries an `Invalid` filter that says why (§5.6).
macro_rules! opaque_rule {
    ($this:expr, $rule:expr, $api:ident) => {{
        use api::$api::{
            Distribution, Filter as F, RouteBackend, Rule, WeightedRouteBackend, distribution,
            filter::Kind,
        };
        let backends = if $rule.backends.is_empty() {
            distribution::Kind::FirstAvailable(distribution::FirstAvailable {
                backends: vec![RouteBackend {
                    backend: Some($this.default_backend(&LoadEstimator::PeakEwma)),
                    filters: vec![],
                }],
            })
        } else {
            distribution::Kind::RandomAvailable(distribution::RandomAvailable {
                backends: $rule
                    .backends
                    .iter()
                    .map(|b| {
                        let (weight, backend, filters) =
                            $this.backend_with(b, &LoadEstimator::PeakEwma);
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
    }};
}

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
            OutboundPolicy::Egress(egress) => self.egress(egress),
        }
    }

    fn service(&self, svc: &ServicePolicy) -> api::OutboundPolicy {
        let ctx = Ctx {
            parent: Parent::Service(svc),
            allow_l5d: self.allow_l5d_request_headers,
        };
        api::OutboundPolicy {
            metadata: Some(service_metadata(&svc.namespace, &svc.name, svc.port)),
            protocol: Some(ctx.protocol(&svc.protocol, svc.failure_accrual.as_ref())),
        }
    }

    /// An address in an EgressNetwork (§5.6): its routes end with the egress default routes.
    fn egress(&self, egress: &EgressPolicy) -> api::OutboundPolicy {
        let ctx = Ctx {
            parent: Parent::Egress(egress),
            allow_l5d: self.allow_l5d_request_headers,
        };
        api::OutboundPolicy {
            metadata: Some(egress_metadata(egress, egress.original_dst.port())),
            protocol: Some(ctx.protocol(&egress.protocol, egress.failure_accrual.as_ref())),
        }
    }
}

/// The parent of the policy being encoded.
#[derive(Copy, Clone)]
enum Parent<'a> {
    Service(&'a ServicePolicy),
    Egress(&'a EgressPolicy),
}

/// One policy being encoded.
struct Ctx<'a> {
    parent: Parent<'a>,
    allow_l5d: bool,
}

impl Ctx<'_> {
    fn protocol(
        &self,
        protocol: &OutboundProtocol,
        accrual: Option<&FailureAccrual>,
    ) -> api::ProxyProtocol {
        let accrual = accrual.map(failure_accrual);
        let ctx = self;
        let kind = match protocol {
            OutboundProtocol::Detect {
                timeout,
                http_routes,
            } => {
                let routes = ctx.http_routes(http_routes);
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
                routes: ctx.http_routes(routes),
                failure_accrual: accrual,
            }),
            OutboundProtocol::Http2(routes) => proxy_protocol::Kind::Http2(proxy_protocol::Http2 {
                routes: ctx.http_routes(routes),
                failure_accrual: accrual,
            }),
            OutboundProtocol::Grpc(routes) => proxy_protocol::Kind::Grpc(proxy_protocol::Grpc {
                routes: ctx.grpc_routes(routes),
                failure_accrual: accrual,
            }),
            OutboundProtocol::Opaque => proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {
                routes: vec![ctx.default_opaque_route()],
            }),
            OutboundProtocol::Tls(routes) => {
                let mut routes: Vec<_> = routes.iter().map(|r| ctx.tls_route(r)).collect();
                // Under an EgressNetwork the TLS routes end with its default (§5.5).
                if let Parent::Egress(egress) = ctx.parent {
                    routes.push(egress_tls_route(egress));
                }
                proxy_protocol::Kind::Tls(proxy_protocol::Tls { routes })
            }
            // A TCP route replaces the egress default TCP route (§5.5, §12).
            OutboundProtocol::OpaqueRoute(route) => {
                proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {
                    routes: vec![ctx.opaque_route(route)],
                })
            }
        };
        api::ProxyProtocol { kind: Some(kind) }
    }

    /// The load estimator of the default backend and of Service backends of HTTP and gRPC
    /// routes: the Service's; plain PeakEWMA under an EgressNetwork (§5.7).
    fn load(&self) -> &LoadEstimator {
        match self.parent {
            Parent::Service(svc) => &svc.load,
            Parent::Egress(_) => &LoadEstimator::PeakEwma,
        }
    }

    /// The parent itself: a balancer over the Service's authority with `load`, or a forward
    /// to the original destination of an EgressNetwork address (never balanced, §5.7).
    fn default_backend(&self, load: &LoadEstimator) -> api::Backend {
        match self.parent {
            Parent::Service(svc) => balancer(
                service_metadata(&svc.namespace, &svc.name, svc.port),
                &svc.authority,
                load,
            ),
            Parent::Egress(egress) => forward(
                egress_metadata(egress, egress.original_dst.port()),
                egress.original_dst,
                1,
            ),
        }
    }

    /// The HTTP routes, followed under an EgressNetwork by its default route (§5.5).
    fn http_routes(&self, routes: &[OutboundRoute<HttpRouteMatch>]) -> Vec<api::HttpRoute> {
        let mut out: Vec<_> = routes.iter().map(|r| self.http_route(r)).collect();
        if let Parent::Egress(egress) = self.parent {
            out.push(self.egress_http_route(egress));
        }
        out
    }

    /// The gRPC routes, followed under an EgressNetwork by its default route (§5.5).
    fn grpc_routes(&self, routes: &[OutboundRoute<GrpcRouteMatch>]) -> Vec<api::GrpcRoute> {
        let mut out: Vec<_> = routes.iter().map(|r| self.grpc_route(r)).collect();
        if let Parent::Egress(egress) = self.parent {
            out.push(self.egress_grpc_route(egress));
        }
        out
    }

    /// The default opaque route: `opaq` (FirstAvailable over the Service with plain PeakEWMA)
    /// or `tcp-egress-allow` / `tcp-egress-deny` (Forbidden) (§5.6, §5.7).
    fn default_opaque_route(&self) -> api::OpaqueRoute {
        use api::opaque_route::{Distribution, RouteBackend, Rule, distribution};
        let (name, filters) = match self.parent {
            Parent::Service(_) => ("opaq".to_string(), vec![]),
            Parent::Egress(egress) => (
                egress_route_name("tcp", egress.traffic_policy),
                match egress.traffic_policy {
                    TrafficPolicy::Allow => vec![],
                    TrafficPolicy::Deny => vec![api::opaque_route::Filter {
                        kind: Some(api::opaque_route::filter::Kind::Forbidden(
                            opaque_route::Forbidden {},
                        )),
                    }],
                },
            ),
        };
        api::OpaqueRoute {
            metadata: Some(default_metadata(&name)),
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
                filters,
            }],
        }
    }

    /// `http-egress-allow`, or `http-egress-deny` failing with 403 "traffic not allowed":
    /// prefix `/`, FirstAvailable over the original destination, the EgressNetwork's
    /// timeouts and retry (§5.6).
    fn egress_http_route(&self, egress: &EgressPolicy) -> api::HttpRoute {
        use api::http_route::{Distribution, RouteBackend, Rule, distribution};
        let filters = match egress.traffic_policy {
            TrafficPolicy::Allow => vec![],
            TrafficPolicy::Deny => vec![api::http_route::Filter {
                kind: Some(api::http_route::filter::Kind::FailureInjector(
                    http_route::HttpFailureInjector {
                        status: 403,
                        message: EGRESS_DENIED.into(),
                        ratio: None,
                    },
                )),
            }],
        };
        api::HttpRoute {
            metadata: Some(default_metadata(&egress_route_name(
                "http",
                egress.traffic_policy,
            ))),
            hosts: vec![],
            rules: vec![Rule {
                matches: vec![http_route::HttpRouteMatch {
                    path: Some(http_route::PathMatch {
                        kind: Some(http_route::path_match::Kind::Prefix("/".into())),
                    }),
                    ..http_route::HttpRouteMatch::default()
                }],
                filters,
                backends: Some(Distribution {
                    kind: Some(distribution::Kind::FirstAvailable(
                        distribution::FirstAvailable {
                            backends: vec![RouteBackend {
                                backend: Some(self.default_backend(self.load())),
                                filters: vec![],
                                request_timeout: None,
                            }],
                        },
                    )),
                }),
                request_timeout: egress.default_timeouts.request.map(duration),
                timeouts: Some(timeouts(&egress.default_timeouts)),
                retry: egress.default_retry.as_ref().map(http_retry),
                allow_l5d_request_headers: false,
            }],
        }
    }

    /// `grpc-egress-allow`, or `grpc-egress-deny` failing with PERMISSION_DENIED "traffic not
    /// allowed": no matches, FirstAvailable over the original destination, the
    /// EgressNetwork's timeouts and retry (§5.6).
    fn egress_grpc_route(&self, egress: &EgressPolicy) -> api::GrpcRoute {
        use api::grpc_route::{Distribution, RouteBackend, Rule, distribution};
        let filters = match egress.traffic_policy {
            TrafficPolicy::Allow => vec![],
            TrafficPolicy::Deny => vec![api::grpc_route::Filter {
                kind: Some(api::grpc_route::filter::Kind::FailureInjector(
                    grpc_api::GrpcFailureInjector {
                        code: GRPC_PERMISSION_DENIED,
                        message: EGRESS_DENIED.into(),
                        ratio: None,
                    },
                )),
            }],
        };
        api::GrpcRoute {
            metadata: Some(default_metadata(&egress_route_name(
                "grpc",
                egress.traffic_policy,
            ))),
            hosts: vec![],
            rules: vec![Rule {
                matches: vec![],
                filters,
                backends: Some(Distribution {
                    kind: Some(distribution::Kind::FirstAvailable(
                        distribution::FirstAvailable {
                            backends: vec![RouteBackend {
                                backend: Some(self.default_backend(self.load())),
                                filters: vec![],
                                request_timeout: None,
                            }],
                        },
                    )),
                }),
                request_timeout: egress.default_timeouts.request.map(duration),
                timeouts: Some(timeouts(&egress.default_timeouts)),
                retry: egress.default_retry.as_ref().map(grpc_retry),
                allow_l5d_request_headers: false,
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
                        backend: Some(self.default_backend(self.load())),
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
                retry: rule.retry.as_ref().map(http_retry),
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
                        backend: Some(self.default_backend(self.load())),
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
                retry: rule.retry.as_ref().map(grpc_retry),
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
        api::TlsRoute {
            metadata: Some(route_metadata(&route.reference)),
            snis: route.hostnames.iter().map(sni_match).collect(),
            rules: route
                .rules
                .iter()
                .map(|rule| opaque_rule!(self, rule, tls_route))
                .collect(),
        }
    }

    /// A TCPRoute as an opaque route: its one rule (§5.6).
    fn opaque_route(&self, route: &OutboundRoute<NoMatch>) -> api::OpaqueRoute {
        api::OpaqueRoute {
            metadata: Some(route_metadata(&route.reference)),
            rules: route
                .rules
                .iter()
                .map(|rule| opaque_rule!(self, rule, opaque_route))
                .collect(),
        }
    }

    /// A rule backend of an HTTP or gRPC route, balanced with the parent's load estimator.
    fn backend<'b>(&self, b: &'b Backend) -> (u32, api::Backend, Result<&'b [Filter], String>) {
        self.backend_with(b, self.load())
    }

    /// A rule backend: its weight, the backend (an existing Service balanced with `load`), and
    /// its filters or the message of the failure that replaces them (a missing Service, an
    /// EgressNetwork backend that cannot forward, an invalid backend).
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
            Backend::InvalidEgressNetwork {
                weight,
                namespace,
                name,
                port,
                message,
            } => (
                *weight,
                api::Backend {
                    metadata: Some(resource_metadata(
                        POLICY_GROUP,
                        "EgressNetwork",
                        namespace,
                        name,
                        *port,
                    )),
                    queue: Some(queue()),
                    kind: None,
                },
                Err(message.clone()),
            ),
            Backend::Forward {
                weight,
                namespace,
                name,
                port,
                addr,
            } => (
                *weight,
                forward(
                    resource_metadata(POLICY_GROUP, "EgressNetwork", namespace, name, *port),
                    *addr,
                    *weight,
                ),
                Ok(&[]),
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

/// The egress default TLS route of `egress` (§5.6): `tls-egress-allow`, or `tls-egress-deny`
/// with a Forbidden filter; no SNIs; FirstAvailable over the original destination. For the
/// `Tls` protocol, which appends it after the TLS routes (§5.5).
fn egress_tls_route(egress: &EgressPolicy) -> api::TlsRoute {
    use api::tls_route::{Distribution, Filter, RouteBackend, Rule, distribution, filter};
    let filters = match egress.traffic_policy {
        TrafficPolicy::Allow => vec![],
        TrafficPolicy::Deny => vec![Filter {
            kind: Some(filter::Kind::Forbidden(opaque_route::Forbidden {})),
        }],
    };
    api::TlsRoute {
        metadata: Some(default_metadata(&egress_route_name(
            "tls",
            egress.traffic_policy,
        ))),
        snis: vec![],
        rules: vec![Rule {
            backends: Some(Distribution {
                kind: Some(distribution::Kind::FirstAvailable(
                    distribution::FirstAvailable {
                        backends: vec![RouteBackend {
                            backend: Some(forward(
                                egress_metadata(egress, egress.original_dst.port()),
                                egress.original_dst,
                                1,
                            )),
                            filters: vec![],
                        }],
                    },
                )),
            }),
            filters,
        }],
    }
}

/// `Resource{policy.linkerd.io, EgressNetwork, name, namespace, port}`.
fn egress_metadata(egress: &EgressPolicy, port: u16) -> meta::Metadata {
    resource_metadata(
        POLICY_GROUP,
        "EgressNetwork",
        &egress.namespace,
        &egress.name,
        port,
    )
}

fn resource_metadata(
    group: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    port: u16,
) -> meta::Metadata {
    meta::Metadata {
        kind: Some(meta::metadata::Kind::Resource(meta::Resource {
            group: group.into(),
            kind: kind.into(),
            name: name.to_string(),
            namespace: namespace.to_string(),
            section: String::new(),
            port: u32::from(port),
        })),
    }
}

/// `<protocol>-egress-allow` or `<protocol>-egress-deny`.
fn egress_route_name(protocol: &str, policy: TrafficPolicy) -> String {
    match policy {
        TrafficPolicy::Allow => format!("{protocol}-egress-allow"),
        TrafficPolicy::Deny => format!("{protocol}-egress-deny"),
    }
}

/// A backend forwarding to `addr` as is (no discovery, no balancer).
fn forward(metadata: meta::Metadata, addr: SocketAddr, weight: u32) -> api::Backend {
    api::Backend {
        metadata: Some(metadata),
        queue: Some(queue()),
        kind: Some(backend::Kind::Forward(destination::WeightedAddr {
            addr: Some(addr.into()),
            weight,
            ..destination::WeightedAddr::default()
        })),
    }
}

fn http_retry(r: &linkerd_index::outbound::RouteRetry) -> api::http_route::Retry {
    api::http_route::Retry {
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
    }
}

fn grpc_retry(r: &linkerd_index::outbound::RouteRetry) -> api::grpc_route::Retry {
    api::grpc_route::Retry {
        max_retries: u32::from(r.limit),
        max_request_bytes: RETRY_MAX_REQUEST_BYTES,
        conditions: r.grpc.as_ref().map(grpc_conditions),
        timeout: r.timeout.map(duration),
        backoff: Some(retry_backoff()),
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
