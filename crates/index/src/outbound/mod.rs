//! Outbound policy: per (Service, port, client namespace), the protocol, routes and backends a
//! client proxy uses (spec/policy.md §5).
//!
//! - [`view`]: the [`OutboundPolicy`] served, protocol-agnostic.
//! - [`routes`]: HTTPRoutes, GRPCRoutes, TLSRoutes and TCPRoutes in outbound form, stored by
//!   parent Service.
//! - [`annotations`]: retries, timeouts, failure accrual and load bias from annotations.
//! - [`egress`]: EgressNetworks: resolution of addresses to them and their policy.
//! - this module: target resolution (§5.1) and the computation of a policy from the stores
//!   (§5.3–§5.5); the index publishes one topic per subscribed (Service, port, namespace).

pub mod annotations;
pub mod egress;
mod index;
pub mod routes;
pub mod view;

use ipnet::IpNet;
use std::{net::SocketAddr, sync::Arc};

pub(crate) use self::index::Outbound;
pub use self::index::OutboundIndex;
use crate::{
    model::{ObjectRef, PortSet},
    routes::{
        HttpRouteMatch, PathMatch,
        parents::{ParentKey, ParentKind},
    },
};

use self::routes::{BackendSpec, OutboundRouteInfo, OutboundRules, RuleSpec};
pub use self::view::*;

/// The policy controller's settings that shape outbound answers (its flags, §1.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboundConfig {
    /// `--cluster-domain`: Service authorities end in `.svc.<cluster-domain>`.
    pub cluster_domain: String,
    /// `--cluster-networks`: an unknown address inside them is `NotFound`, outside them the
    /// fallback policy (§5.1).
    pub cluster_networks: Vec<IpNet>,
    /// `--default-opaque-ports`: opaque ports of Services without the annotation.
    pub default_opaque_ports: PortSet,
    /// Offline mode: route acceptance is computed in-process by the status writer's rules
    /// (spec §7.2, [`crate::routes::parents`]) instead of read from `status.parents` (no
    /// status writer runs there).
    pub compute_route_acceptance: bool,
    /// `--global-egress-network-namespace`: its EgressNetworks apply to clients of every
    /// namespace that has none of its own (§5.2).
    pub global_egress_network_namespace: String,
}

/// What a client asks about (§5.1), once its request is parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutboundTarget {
    /// A Service by name (an authority target), whether or not it exists.
    Service { service: ObjectRef, port: u16 },
    /// An address (a `TcpAddress` target).
    Addr(SocketAddr),
}

/// What a lookup yields: a subscribed topic, or a policy that never changes (undefined port),
/// which a watch sends once and then holds open. The external fallback is a topic: it ends
/// when the EgressNetworks change (§5.8).
#[derive(Debug)]
pub enum OutboundLookup {
    Watch(crate::topic::Receiver<OutboundPolicy>),
    Fixed(Arc<OutboundPolicy>),
}

/// Why a target has no outbound policy: `NOT_FOUND` on the wire (§9).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OutboundError {
    /// An address inside the cluster networks that no Service claims.
    #[error("No such service")]
    NoSuchService,
}

/// What an address target resolves to (§5.1 step 4).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ResolvedAddr {
    /// A declared port of a Service's cluster IP.
    Service(ObjectRef, u16),
    /// An address in an EgressNetwork.
    Egress {
        network: ObjectRef,
        original_dst: SocketAddr,
    },
    /// Outside the cluster networks and every EgressNetwork.
    Fallback(SocketAddr),
    /// A fixed policy (an undefined port of a Service).
    Fixed(Box<OutboundPolicy>),
}

/// Which appProtocol a Service port declares (§5.3).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum AppProtocol {
    Http1,
    Http2,
    /// `linkerd.io/tcp`, `linkerd.io/opaque`, or anything unknown.
    Opaque,
}

impl AppProtocol {
    fn parse(value: &str) -> Self {
        if value.eq_ignore_ascii_case("http") {
            Self::Http1
        } else if value.eq_ignore_ascii_case("kubernetes.io/h2c") {
            Self::Http2
        } else {
            Self::Opaque
        }
    }
}

// === impl Outbound ===

impl Outbound {
    /// Resolves an address target of a client in `source_namespace` (§5.1 step 4): a Service
    /// cluster IP (with a declared port, or the undefined-port policy), else an EgressNetwork
    /// (§5.2), else the fallback outside the cluster networks.
    pub(crate) fn resolve_outbound_addr(
        &self,
        config: &OutboundConfig,
        addr: SocketAddr,
        source_namespace: &str,
    ) -> Result<ResolvedAddr, OutboundError> {
        let service = self
            .services_by_ip
            .get(&addr.ip())
            .and_then(|keys| keys.iter().next())
            .and_then(|k| self.services.get(k));
        if let Some(svc) = service {
            if svc.ports.iter().any(|p| p.port == addr.port()) {
                return Ok(ResolvedAddr::Service(svc.object_ref(), addr.port()));
            }
            return Ok(ResolvedAddr::Fixed(Box::new(
                OutboundPolicy::UndefinedPort {
                    namespace: svc.namespace.clone(),
                    name: svc.name.clone(),
                    port: addr.port(),
                },
            )));
        }
        if let Some(network) = self.resolve_egress_network(config, source_namespace, addr.ip()) {
            return Ok(ResolvedAddr::Egress {
                network,
                original_dst: addr,
            });
        }
        if config
            .cluster_networks
            .iter()
            .any(|net| net.contains(&addr.ip()))
        {
            return Err(OutboundError::NoSuchService);
        }
        Ok(ResolvedAddr::Fallback(addr))
    }

    /// The policy of `service`'s `port` for clients in `source_namespace` (§5.3–§5.5). A
    /// Service that is not indexed has no annotations and no appProtocol.
    pub(crate) fn outbound_service_policy(
        &self,
        config: &OutboundConfig,
        service: &ObjectRef,
        port: u16,
        source_namespace: &str,
    ) -> OutboundPolicy {
        let svc = self.services.get(service);
        let empty = Default::default();
        let annotations = svc.map_or(&empty, |s| &s.annotations);
        // Warned once when the Service is indexed (`annotations::problems`); policies are
        // computed per port and client namespace.
        let warn = |what: &str, error: String| {
            tracing::debug!(service = %format!("{}/{}", service.namespace, service.name), %error, "ignoring {what} annotations");
        };
        let parent_timeouts = annotations::timeouts(annotations).unwrap_or_else(|e| {
            warn("timeout", e);
            RouteTimeouts::default()
        });
        let parent_retry = annotations::retry(annotations).unwrap_or_else(|e| {
            warn("retry", e);
            None
        });
        let failure_accrual =
            annotations::failure_accrual(annotations, |e| warn("failure accrual", e))
                .unwrap_or_else(|e| {
                    warn("failure accrual", e);
                    None
                });
        let load = annotations::load_estimator(annotations).unwrap_or_else(|e| {
            warn("load biaser", e);
            LoadEstimator::PeakEwma
        });

        let app_protocol = svc
            .and_then(|s| s.ports.iter().find(|p| p.port == port))
            .and_then(|p| p.app_protocol.as_deref())
            .map(AppProtocol::parse);
        let opaque_port = svc
            .and_then(|s| s.opaque_ports.as_ref())
            .unwrap_or(&config.default_opaque_ports)
            .contains(port);

        let ctx = RuleContext {
            cluster: self,
            config,
            parent_timeouts: &parent_timeouts,
            parent_retry: parent_retry.as_ref(),
            egress_parent: None,
        };
        let AttachedRoutes {
            http: http_routes,
            grpc: grpc_routes,
            tls: tls_routes,
            tcp: tcp_routes,
        } = self.attached_routes(config, service, port, source_namespace);
        let http = |routes: Vec<Arc<OutboundRouteInfo>>| {
            if routes.is_empty() {
                vec![ctx.default_http_route()]
            } else {
                routes.iter().filter_map(|r| ctx.http_route(r)).collect()
            }
        };
        let grpc = |routes: Vec<Arc<OutboundRouteInfo>>| {
            routes.iter().filter_map(|r| ctx.grpc_route(r)).collect()
        };
        // §12 quirk kept: only the first TCP route (by creation time, then namespace and
        // name) carries a port's opaque traffic. A TCPRoute has no matches, so a second one
        // could only conflict with the first; the Gateway API resolves such conflicts in
        // favour of the oldest route, which is the first.
        let first_tcp = || {
            tcp_routes
                .first()
                .and_then(|r| ctx.plain_route(r))
                .map(Box::new)
        };
        let opaque = || first_tcp().map_or(OutboundProtocol::Opaque, OutboundProtocol::OpaqueRoute);
        let protocol = match app_protocol {
            Some(AppProtocol::Http1) => OutboundProtocol::Http1(http(http_routes)),
            Some(AppProtocol::Http2) if !grpc_routes.is_empty() => {
                OutboundProtocol::Grpc(grpc(grpc_routes))
            }
            Some(AppProtocol::Http2) => OutboundProtocol::Http2(http(http_routes)),
            Some(AppProtocol::Opaque) => opaque(),
            None if opaque_port => opaque(),
            None if !grpc_routes.is_empty() => OutboundProtocol::Grpc(grpc(grpc_routes)),
            None if http_routes.is_empty() && !tls_routes.is_empty() => OutboundProtocol::Tls(
                tls_routes
                    .iter()
                    .filter_map(|r| ctx.plain_route(r))
                    .collect(),
            ),
            None if http_routes.is_empty() && !tcp_routes.is_empty() => opaque(),
            None => OutboundProtocol::Detect {
                timeout: DETECT_TIMEOUT,
                http_routes: http(http_routes),
            },
        };
        OutboundPolicy::Service(ServicePolicy {
            authority: authority(&service.name, &service.namespace, config, port),
            namespace: service.namespace.clone(),
            name: service.name.clone(),
            port,
            protocol,
            failure_accrual,
            load,
        })
    }

    /// The routes attached to `service:port` for `source_namespace`, by kind, each sorted.
    ///
    /// Routes of the Service's namespace (producer routes) apply to every client; a route in
    /// the client's own namespace (a consumer route) applies to that namespace only and, as the
    /// Gateway API (GAMMA) says, REPLACES the producer routes for it (§12 quirk decided:
    /// upstream merges them).
    fn attached_routes(
        &self,
        config: &OutboundConfig,
        service: &ObjectRef,
        port: u16,
        source_namespace: &str,
    ) -> AttachedRoutes {
        let attached: Vec<&Arc<OutboundRouteInfo>> = self
            .outbound_routes
            .by_parent
            .get(service)
            .into_iter()
            .flatten()
            .filter_map(|k| self.outbound_routes.by_key.get(k))
            .filter(|r| self.route_attaches(config, r, service, port))
            .collect();
        AttachedRoutes::select(attached, &service.namespace, source_namespace)
    }

    /// Whether one of `route`'s parent refs names `service` (on `port`, or on every port) and
    /// the route is accepted for it (§5.4): by its status, or in offline mode when the status
    /// writer would accept it (§7.2: the Service exists with a cluster IP, and no GRPCRoute
    /// conflicts an HTTPRoute on the same parent ref).
    fn route_attaches(
        &self,
        config: &OutboundConfig,
        route: &OutboundRouteInfo,
        service: &ObjectRef,
        port: u16,
    ) -> bool {
        route.parents.iter().any(|p| {
            if p.namespace != service.namespace || p.name != service.name {
                return false;
            }
            if p.port.is_some_and(|pp| pp != port) {
                return false;
            }
            if config.compute_route_acceptance {
                let parent = ParentKey {
                    kind: ParentKind::Service,
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    port: p.port,
                };
                return self.route_parents.accepts(&route.key, &parent, self);
            }
            route.accepted.iter().any(|a| {
                a.name == service.name
                    && match p.port {
                        Some(pp) => a.port.is_none_or(|ap| ap == pp),
                        None => true,
                    }
            })
        })
    }
}

/// `<name>.<namespace>.svc.<cluster-domain>:<port>`.
pub fn authority(name: &str, namespace: &str, config: &OutboundConfig, port: u16) -> String {
    format!("{name}.{namespace}.svc.{}:{port}", config.cluster_domain)
}

/// Routes with a creation time first, oldest first; then by namespace and name (§12 quirk
/// decided: the Gateway API orders by `{namespace}/{name}`; upstream compares names only).
fn sort_routes(routes: &mut [Arc<OutboundRouteInfo>]) {
    routes.sort_by(|a, b| {
        let key = |r: &Arc<OutboundRouteInfo>| {
            (
                r.created.is_none(),
                r.created,
                r.key.namespace.clone(),
                r.key.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
}

/// The routes attached to one parent port, by kind.
#[derive(Default)]
struct AttachedRoutes {
    http: Vec<Arc<OutboundRouteInfo>>,
    grpc: Vec<Arc<OutboundRouteInfo>>,
    tls: Vec<Arc<OutboundRouteInfo>>,
    tcp: Vec<Arc<OutboundRouteInfo>>,
}

impl AttachedRoutes {
    /// The routes of `attached` (all attached to one port of a parent in `parent_namespace`)
    /// that apply to a client in `source_namespace`, by kind, each sorted: a consumer route
    /// (in the client's namespace, not the parent's) replaces the producer routes (the
    /// parent's namespace) for that namespace.
    fn select(
        attached: Vec<&Arc<OutboundRouteInfo>>,
        parent_namespace: &str,
        source_namespace: &str,
    ) -> Self {
        let consumer = |r: &&Arc<OutboundRouteInfo>| {
            r.key.namespace != parent_namespace && r.key.namespace == source_namespace
        };
        let has_consumer = attached.iter().any(consumer);
        let mut routes = Self::default();
        for route in attached.into_iter().filter(|r| {
            if has_consumer {
                consumer(r)
            } else {
                r.key.namespace == parent_namespace
            }
        }) {
            let list = match route.rules {
                OutboundRules::Http(_) => &mut routes.http,
                OutboundRules::Grpc(_) => &mut routes.grpc,
                OutboundRules::Tls(_) => &mut routes.tls,
                OutboundRules::Tcp(_) => &mut routes.tcp,
            };
            list.push(route.clone());
        }
        for list in [
            &mut routes.http,
            &mut routes.grpc,
            &mut routes.tls,
            &mut routes.tcp,
        ] {
            sort_routes(list);
        }
        routes
    }
}

/// What turning a stored route into a served one needs.
struct RuleContext<'a> {
    cluster: &'a Outbound,
    config: &'a OutboundConfig,
    parent_timeouts: &'a RouteTimeouts,
    parent_retry: Option<&'a RouteRetry>,
    /// The EgressNetwork parent and the client's original destination; `None` for a Service
    /// parent.
    egress_parent: Option<(&'a ObjectRef, SocketAddr)>,
}

impl RuleContext<'_> {
    /// The `http` default route of a Service port without HTTP routes (§5.6).
    fn default_http_route(&self) -> OutboundRoute<HttpRouteMatch> {
        OutboundRoute {
            reference: OutboundRouteRef::Default("http".into()),
            creation_timestamp: None,
            hostnames: vec![],
            rules: vec![OutboundRule {
                matches: vec![HttpRouteMatch {
                    path: Some(PathMatch::Prefix("/".into())),
                    ..HttpRouteMatch::default()
                }],
                filters: vec![],
                backends: vec![],
                timeouts: self.parent_timeouts.clone(),
                retry: self.parent_retry.cloned(),
            }],
        }
    }

    fn http_route(&self, route: &OutboundRouteInfo) -> Option<OutboundRoute<HttpRouteMatch>> {
        match &route.rules {
            OutboundRules::Http(rules) => Some(self.route(route, rules)),
            _ => None,
        }
    }

    fn grpc_route(
        &self,
        route: &OutboundRouteInfo,
    ) -> Option<OutboundRoute<crate::routes::GrpcRouteMatch>> {
        match &route.rules {
            OutboundRules::Grpc(rules) => Some(self.route(route, rules)),
            _ => None,
        }
    }

    /// A TLSRoute or TCPRoute: its one rule with resolved backends, and no timeouts or retry
    /// of the parent's (the proxy applies none to TLS or opaque routes, §5.6).
    fn plain_route(&self, route: &OutboundRouteInfo) -> Option<OutboundRoute<NoMatch>> {
        let rule = match &route.rules {
            OutboundRules::Tls(rule) | OutboundRules::Tcp(rule) => rule,
            _ => return None,
        };
        Some(OutboundRoute {
            reference: OutboundRouteRef::Resource {
                group: route.key.group.to_string(),
                kind: route.key.kind.to_string(),
                namespace: route.key.namespace.clone(),
                name: route.key.name.clone(),
            },
            creation_timestamp: route.created,
            hostnames: route.hostnames.clone(),
            rules: vec![OutboundRule {
                matches: Vec::new(),
                filters: Vec::new(),
                backends: rule.backends.iter().map(|b| self.backend(b)).collect(),
                timeouts: RouteTimeouts::default(),
                retry: None,
            }],
        })
    }

    fn route<M: Clone>(
        &self,
        route: &OutboundRouteInfo,
        rules: &[RuleSpec<M>],
    ) -> OutboundRoute<M> {
        OutboundRoute {
            reference: OutboundRouteRef::Resource {
                group: route.key.group.to_string(),
                kind: route.key.kind.to_string(),
                namespace: route.key.namespace.clone(),
                name: route.key.name.clone(),
            },
            creation_timestamp: route.created,
            hostnames: route.hostnames.clone(),
            rules: rules.iter().map(|rule| self.rule(rule)).collect(),
        }
    }

    /// A rule with resolved backends; without timeouts of its own it takes the parent's
    /// wholesale, without a retry the parent's (§5.4 "Rule inheritance").
    fn rule<M: Clone>(&self, rule: &RuleSpec<M>) -> OutboundRule<M> {
        let timeouts = if rule.timeouts == RouteTimeouts::default() {
            self.parent_timeouts.clone()
        } else {
            rule.timeouts.clone()
        };
        OutboundRule {
            matches: rule.matches.clone(),
            filters: rule.filters.clone(),
            backends: rule.backends.iter().map(|b| self.backend(b)).collect(),
            timeouts,
            retry: rule.retry.clone().or_else(|| self.parent_retry.cloned()),
        }
    }

    fn backend(&self, backend: &BackendSpec) -> Backend {
        match backend {
            BackendSpec::Service {
                weight,
                namespace,
                name,
                port,
                filters,
            } => Backend::Service {
                weight: *weight,
                authority: authority(name, namespace, self.config, *port),
                exists: self.cluster.services.contains_key(&ObjectRef {
                    namespace: namespace.clone(),
                    name: name.clone(),
                }),
                namespace: namespace.clone(),
                name: name.clone(),
                port: *port,
                filters: filters.clone(),
            },
            BackendSpec::Invalid { weight, message } => Backend::Invalid {
                weight: *weight,
                message: message.clone(),
            },
            BackendSpec::EgressNetwork {
                weight,
                namespace,
                name,
                port,
            } => {
                let key = ObjectRef {
                    namespace: namespace.clone(),
                    name: name.clone(),
                };
                let exists = self.cluster.egress_networks.contains_key(&key);
                let Some((parent, original_dst)) = self.egress_parent else {
                    let message = if exists {
                        "EgressNetwork backends attach to EgressNetwork parents only".to_string()
                    } else {
                        format!("EgressNetwork not found {name}")
                    };
                    return Backend::Invalid {
                        weight: *weight,
                        message,
                    };
                };
                let port = port.unwrap_or(original_dst.port());
                let failing = |message: String| Backend::InvalidEgressNetwork {
                    weight: *weight,
                    namespace: namespace.clone(),
                    name: name.clone(),
                    port,
                    message,
                };
                if !exists {
                    failing(format!("EgressNetwork not found {name}"))
                } else if *parent == key {
                    Backend::Forward {
                        weight: *weight,
                        namespace: namespace.clone(),
                        name: name.clone(),
                        port,
                        addr: original_dst,
                    }
                } else {
                    failing(
                        "Route with EgressNetwork backend needs to have the same EgressNetwork as a parent".into(),
                    )
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tls_tcp_tests;
