//! EgressNetworks in outbound policy (spec/policy.md §5.2–§5.6, §5.8, §7.4): the store, the
//! resolution of an address to an EgressNetwork, and the policy of an address in one.
//!
//! Decisions on the quirks of §12 (project decision 1, each named in a test):
//! - deleting an EgressNetwork drops it, parent information included: nothing resolves to a
//!   deleted EgressNetwork, and its routes' EgressNetwork backends become "not found";
//! - a change to the EgressNetworks of namespace `N` ends the egress watches whose parent is in
//!   `N` AND those of clients in `N` (their resolution may change: `N` may have gained its first
//!   EgressNetwork or lost its last one); a change in the global namespace ends every egress
//!   watch. Upstream ends only the former, leaving clients on a stale parent.
//! - resolution tries the client's namespace's EgressNetworks first and the global ones when
//!   none of those matches the address: upstream ignores the global EgressNetworks as soon as
//!   the client's namespace has any, even one that does not match, so adding a namespace's
//!   first EgressNetwork silently sends its other external traffic to the fallback.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use super::{
    AttachedRoutes, Outbound, OutboundConfig, OutboundPolicy, OutboundProtocol, RouteTimeouts,
    RuleContext, annotations,
    routes::OutboundRouteInfo,
    view::{DETECT_TIMEOUT, EgressPolicy},
};
use crate::model::{ObjectRef, TrafficPolicy};

// === impl Outbound ===

impl Outbound {
    /// The EgressNetwork `ip` belongs to for clients in `source_namespace` (§5.2): among the
    /// source namespace's EgressNetworks, else (none of them matches `ip`) the global
    /// namespace's, the one whose smallest network containing `ip` is smallest; ties go to the
    /// older (no creation time counts as oldest), then by namespace and name. Status is not
    /// consulted.
    pub(crate) fn resolve_egress_network(
        &self,
        config: &OutboundConfig,
        source_namespace: &str,
        ip: IpAddr,
    ) -> Option<ObjectRef> {
        self.resolve_egress_network_in(config, source_namespace, ip)
            .or_else(|| {
                self.resolve_egress_network_in(config, &config.global_egress_network_namespace, ip)
            })
    }

    /// The best match for `ip` among the EgressNetworks of `namespace` alone.
    fn resolve_egress_network_in(
        &self,
        config: &OutboundConfig,
        namespace: &str,
        ip: IpAddr,
    ) -> Option<ObjectRef> {
        self.egress_by_namespace
            .get(namespace)
            .into_iter()
            .flatten()
            .filter_map(|k| self.egress_networks.get(k))
            .filter_map(|en| {
                let size = en.smallest_match(&config.cluster_networks, ip)?;
                Some(((size, en.created, &en.namespace, &en.name), en))
            })
            .min_by(|(a, _), (b, _)| a.cmp(b))
            .map(|(_, en)| en.object_ref())
    }

    /// Whether the EgressNetwork `key` takes routes (§7.2): it exists and is accepted, by its
    /// observed status, or in offline mode by the status controller's rule (§7.4).
    pub(crate) fn egress_network_accepted(&self, key: &ObjectRef) -> Option<bool> {
        let en = self.egress_networks.get(key)?;
        Some(if self.config.compute_route_acceptance {
            !en.overlaps_cluster_networks(&self.config.cluster_networks)
        } else {
            en.observed_accepted()
        })
    }

    /// The policy of `original_dst` in the EgressNetwork `network` for clients in
    /// `source_namespace` (§5.3–§5.6). An EgressNetwork that is not indexed denies.
    pub(crate) fn outbound_egress_policy(
        &self,
        config: &OutboundConfig,
        network: &ObjectRef,
        original_dst: SocketAddr,
        source_namespace: &str,
    ) -> OutboundPolicy {
        let en = self.egress_networks.get(network);
        let empty = BTreeMap::new();
        let annotations = en.map_or(&empty, |e| &e.annotations);
        // Warned once when the EgressNetwork is indexed (`annotations::problems`).
        let warn = |what: &str, error: String| {
            tracing::debug!(egress_network = %format!("{}/{}", network.namespace, network.name), %error, "ignoring {what} annotations");
        };
        let default_timeouts = annotations::timeouts(annotations).unwrap_or_else(|e| {
            warn("timeout", e);
            RouteTimeouts::default()
        });
        let default_retry = annotations::retry(annotations).unwrap_or_else(|e| {
            warn("retry", e);
            None
        });
        let failure_accrual =
            annotations::failure_accrual(annotations, |e| warn("failure accrual", e))
                .unwrap_or_else(|e| {
                    warn("failure accrual", e);
                    None
                });
        let port = original_dst.port();
        let opaque = en
            .and_then(|e| e.opaque_ports.as_ref())
            .unwrap_or(&config.default_opaque_ports)
            .contains(port);

        let ctx = RuleContext {
            cluster: self,
            config,
            parent_timeouts: &default_timeouts,
            parent_retry: default_retry.as_ref(),
            egress_parent: Some((network, original_dst)),
        };
        let AttachedRoutes {
            http: http_routes,
            grpc: grpc_routes,
            tls: tls_routes,
            tcp: tcp_routes,
        } = self.attached_egress_routes(config, network, port, source_namespace);
        // As for Services (§12 quirk kept), only the first TCP route carries opaque traffic,
        // and it replaces the egress default opaque route.
        let opaque_protocol = || {
            tcp_routes
                .first()
                .and_then(|r| ctx.plain_route(r))
                .map_or(OutboundProtocol::Opaque, |r| {
                    OutboundProtocol::OpaqueRoute(Box::new(r))
                })
        };
        // No appProtocol on an EgressNetwork (§5.5): gRPC > HTTP > TLS > TCP > Detect.
        let protocol = if opaque {
            opaque_protocol()
        } else if !grpc_routes.is_empty() {
            OutboundProtocol::Grpc(
                grpc_routes
                    .iter()
                    .filter_map(|r| ctx.grpc_route(r))
                    .collect(),
            )
        } else if http_routes.is_empty() && !tls_routes.is_empty() {
            OutboundProtocol::Tls(
                tls_routes
                    .iter()
                    .filter_map(|r| ctx.plain_route(r))
                    .collect(),
            )
        } else if http_routes.is_empty() && !tcp_routes.is_empty() {
            opaque_protocol()
        } else {
            OutboundProtocol::Detect {
                timeout: DETECT_TIMEOUT,
                http_routes: http_routes
                    .iter()
                    .filter_map(|r| ctx.http_route(r))
                    .collect(),
            }
        };
        OutboundPolicy::Egress(EgressPolicy {
            namespace: network.namespace.clone(),
            name: network.name.clone(),
            original_dst,
            traffic_policy: en.map_or(TrafficPolicy::Deny, |e| e.traffic_policy),
            protocol,
            failure_accrual,
            default_timeouts,
            default_retry,
        })
    }

    /// The routes attached to `network:port` for `source_namespace`, by kind, each sorted:
    /// as for Services, a consumer route (in the client's namespace, not the network's)
    /// replaces the producer routes for its namespace.
    fn attached_egress_routes(
        &self,
        config: &OutboundConfig,
        network: &ObjectRef,
        port: u16,
        source_namespace: &str,
    ) -> AttachedRoutes {
        let attached: Vec<&Arc<OutboundRouteInfo>> = self
            .outbound_routes
            .by_egress_parent
            .get(network)
            .into_iter()
            .flatten()
            .filter_map(|k| self.outbound_routes.by_key.get(k))
            .filter(|r| self.egress_route_attaches(config, r, network, port))
            .collect();
        AttachedRoutes::select(attached, &network.namespace, source_namespace)
    }

    /// Whether one of `route`'s EgressNetwork parent refs names `network` (on `port`, or
    /// without a port) and the route is accepted for it (§5.4): by an `Accepted=True` status
    /// entry, or in offline mode by the status controller's rule (§7.2).
    fn egress_route_attaches(
        &self,
        config: &OutboundConfig,
        route: &OutboundRouteInfo,
        network: &ObjectRef,
        port: u16,
    ) -> bool {
        route.egress_parents.iter().any(|p| {
            if p.namespace != network.namespace || p.name != network.name {
                return false;
            }
            if p.port.is_some_and(|pp| pp != port) {
                return false;
            }
            if config.compute_route_acceptance {
                let parent = crate::routes::parents::ParentKey {
                    kind: crate::routes::parents::ParentKind::EgressNetwork,
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    port: p.port,
                };
                return self.route_parents.accepts(&route.key, &parent, self);
            }
            route.egress_accepted.iter().any(|a| {
                a.name == network.name
                    && match p.port {
                        Some(pp) => a.port.is_none_or(|ap| ap == pp),
                        None => true,
                    }
            })
        })
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tls_tcp_tests;
