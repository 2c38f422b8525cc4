//! Generates the cluster of `cargo xtask bench-outbound` as Kubernetes API objects (JSON, as an
//! API server serves them): S Services in one namespace, each with one HTTP port and a cluster
//! IP, and R Gateway API HTTPRoutes spread round robin over them (route `r` has Service
//! `r % S` as its parent, with the port), each with two rules: one splitting traffic between
//! its own Service and the next one by weight, with a request timeout, and a catch-all.
//!
//! A route's *version* `v` (0 when generated, +1 per churn change) is carried by its first
//! rule's request timeout, `1000 + v` ms, and moves its weights: a stream reads which version
//! of a route it was sent from the timeout alone ([`version_of_timeout`]).
//!
//! Routes carry the `status.parents` entry the policy controller's status writer wants for
//! them (spec/policy.md §7.2: `Accepted` and `ResolvedRefs`, both True), so that they attach
//! at once and no status patch is due for them; the `pending` extra routes carry none, so the
//! status writer must patch each of them exactly once.

use serde_json::{Value, json};
use std::{net::Ipv4Addr, time::Duration};

/// The namespace of every generated object.
pub const NAMESPACE: &str = "bench-outbound";
/// The Services' port.
pub const PORT: u16 = 8080;
/// The status writer's `controllerName` (spec/policy.md §7.2).
pub const CONTROLLER_NAME: &str = "linkerd.io/policy-controller";
/// The Gateway API HTTPRoute `apiVersion` served.
pub const HTTP_ROUTE_API_VERSION: &str = "gateway.networking.k8s.io/v1";
/// The request timeout of version 0 of a route, in milliseconds.
const BASE_TIMEOUT_MS: u64 = 1000;
/// The first condition time of every generated status.
const CREATED: &str = "2026-05-04T10:00:00Z";

/// What to generate.
#[derive(Clone, Copy, Debug)]
pub struct OutboundSpec {
    /// Number of Services.
    pub services: usize,
    /// Number of churned HTTPRoutes (with their status in place), round robin over the Services.
    pub routes: usize,
    /// Number of extra HTTPRoutes without a status (never churned), round robin over the
    /// Services: the status writer has to patch each once.
    pub pending: usize,
}

// === impl OutboundSpec ===

impl OutboundSpec {
    /// Every Service, in order.
    pub fn services(&self) -> Vec<Value> {
        (0..self.services).map(|s| self.service(s)).collect()
    }

    /// Every route at version 0: the `routes` churned ones, then the `pending` ones.
    pub fn routes(&self) -> Vec<Value> {
        (0..self.routes)
            .map(|r| self.route(r, 0))
            .chain((0..self.pending).map(|p| self.pending_route(p)))
            .collect()
    }

    /// The index of the Service route `route` (from 0) is attached to.
    pub fn service_of(&self, route: usize) -> usize {
        route % self.services
    }

    /// The routes attached to Service `service`, in increasing order.
    pub fn routes_of(&self, service: usize) -> Vec<usize> {
        (service..self.routes).step_by(self.services).collect()
    }

    /// The authority a client names Service `service` by: `<name>.<ns>.svc.cluster.local:PORT`.
    pub fn authority(&self, service: usize) -> String {
        format!(
            "{}.{NAMESPACE}.svc.cluster.local:{PORT}",
            service_name(service)
        )
    }

    /// Service `service` (from 0): `svc-<n>`, port `http` [`PORT`], cluster IP from 10.96.0.1.
    pub fn service(&self, service: usize) -> Value {
        let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 1)) + service as u32);
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": service_name(service),
                "namespace": NAMESPACE,
                "uid": uid(1, service as u64),
                "creationTimestamp": CREATED,
            },
            "spec": {
                "type": "ClusterIP",
                "clusterIP": ip.to_string(),
                "clusterIPs": [ip.to_string()],
                "ports": [{"name": "http", "port": PORT, "protocol": "TCP", "targetPort": PORT}],
                "selector": {"app": service_name(service)},
            },
        })
    }

    /// Route `route` (from 0) at version `version`, with its accepted status.
    pub fn route(&self, route: usize, version: u64) -> Value {
        let service = self.service_of(route);
        let next = (service + 1) % self.services;
        // The split moves with the version; the weights stay positive.
        let own = 10 + (version % 80);
        let mut object = self.route_object(
            &route_name(route),
            uid(2, route as u64),
            service,
            json!([
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": format!("/api/{route}")}}],
                    "backendRefs": [
                        {"name": service_name(service), "port": PORT, "weight": own},
                        {"name": service_name(next), "port": PORT, "weight": 100 - own},
                    ],
                    "timeouts": {"request": format!("{}ms", BASE_TIMEOUT_MS + version)},
                },
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": format!("/r{route}")}}],
                    "backendRefs": [{"name": service_name(service), "port": PORT}],
                },
            ]),
        );
        object["metadata"]["generation"] = json!(version + 1);
        object["status"] = json!({
            "parents": [{
                "parentRef": {
                    "group": "core",
                    "kind": "Service",
                    "namespace": NAMESPACE,
                    "name": service_name(service),
                    "port": PORT,
                },
                "controllerName": CONTROLLER_NAME,
                "conditions": [
                    condition("Accepted"),
                    condition("ResolvedRefs"),
                ],
            }],
        });
        object
    }

    /// Pending route `pending` (from 0): one rule to its Service, no status.
    fn pending_route(&self, pending: usize) -> Value {
        let service = pending % self.services;
        self.route_object(
            &format!("pending-{pending}"),
            uid(3, pending as u64),
            service,
            json!([{
                "matches": [{"path": {"type": "PathPrefix", "value": format!("/pending/{pending}")}}],
                "backendRefs": [{"name": service_name(service), "port": PORT}],
            }]),
        )
    }

    fn route_object(&self, name: &str, uid: String, service: usize, rules: Value) -> Value {
        json!({
            "apiVersion": HTTP_ROUTE_API_VERSION,
            "kind": "HTTPRoute",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "uid": uid,
                "generation": 1,
                "creationTimestamp": CREATED,
            },
            "spec": {
                "parentRefs": [{
                    "group": "core",
                    "kind": "Service",
                    "name": service_name(service),
                    "port": PORT,
                }],
                "rules": rules,
            },
        })
    }
}

/// The name of churned route `route`: `route-<n>`.
pub fn route_name(route: usize) -> String {
    format!("route-{route}")
}

/// The index of a churned route from its name; `None` for any other name.
pub fn route_index(name: &str) -> Option<usize> {
    name.strip_prefix("route-")?.parse().ok()
}

/// The version a route's first-rule request timeout says, when it is one [`OutboundSpec::route`]
/// writes.
pub fn version_of_timeout(timeout: Duration) -> Option<u64> {
    u64::try_from(timeout.as_millis())
        .ok()?
        .checked_sub(BASE_TIMEOUT_MS)
}

fn service_name(service: usize) -> String {
    format!("svc-{service}")
}

fn condition(type_: &str) -> Value {
    json!({
        "type": type_,
        "status": "True",
        "reason": type_,
        "message": "",
        "lastTransitionTime": CREATED,
    })
}

/// A UUID-shaped, deterministic UID: `kind` tells object kinds apart, `n` objects of one kind.
fn uid(kind: u32, n: u64) -> String {
    format!("{kind:08x}-0000-4000-8000-{n:012x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: OutboundSpec = OutboundSpec {
        services: 500,
        routes: 1000,
        pending: 3,
    };

    #[test]
    fn counts_and_spread() {
        assert_eq!(SPEC.services().len(), 500);
        let routes = SPEC.routes();
        assert_eq!(routes.len(), 1003);
        assert_eq!(SPEC.routes_of(7), [7, 507]);
        assert_eq!(SPEC.service_of(507), 7);
        assert_eq!(routes[1000]["metadata"]["name"], "pending-0");
        assert_eq!(routes[1000].get("status"), None);
        assert_eq!(
            SPEC.authority(7),
            "svc-7.bench-outbound.svc.cluster.local:8080"
        );
        assert_eq!(SPEC.service(257)["spec"]["clusterIP"], "10.96.1.2");
    }

    #[test]
    fn a_route_at_version_3() {
        let route = SPEC.route(499, 3);
        assert_eq!(
            route,
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "HTTPRoute",
                "metadata": {
                    "name": "route-499",
                    "namespace": "bench-outbound",
                    "uid": "00000002-0000-4000-8000-0000000001f3",
                    "generation": 4,
                    "creationTimestamp": "2026-05-04T10:00:00Z",
                },
                "spec": {
                    "parentRefs": [{"group": "core", "kind": "Service", "name": "svc-499", "port": 8080}],
                    "rules": [
                        {
                            "matches": [{"path": {"type": "PathPrefix", "value": "/api/499"}}],
                            "backendRefs": [
                                {"name": "svc-499", "port": 8080, "weight": 13},
                                {"name": "svc-0", "port": 8080, "weight": 87},
                            ],
                            "timeouts": {"request": "1003ms"},
                        },
                        {
                            "matches": [{"path": {"type": "PathPrefix", "value": "/r499"}}],
                            "backendRefs": [{"name": "svc-499", "port": 8080}],
                        },
                    ],
                },
                "status": {"parents": [{
                    "parentRef": {"group": "core", "kind": "Service", "namespace": "bench-outbound", "name": "svc-499", "port": 8080},
                    "controllerName": "linkerd.io/policy-controller",
                    "conditions": [
                        {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "", "lastTransitionTime": "2026-05-04T10:00:00Z"},
                        {"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs", "message": "", "lastTransitionTime": "2026-05-04T10:00:00Z"},
                    ],
                }]},
            })
        );
        assert_eq!(version_of_timeout(Duration::from_millis(1003)), Some(3));
        assert_eq!(version_of_timeout(Duration::from_millis(999)), None);
        assert_eq!(route_index("route-499"), Some(499));
        assert_eq!(route_index("pending-1"), None);
    }
}
