//! Route statuses (spec/policy.md §7.1, §7.2): what the status controller writes in a route's
//! `status.parents`, computed from the indexed routes, Servers and Services, and compared with
//! what the route carries now.
//!
//! The same computation decides route acceptance in offline mode (no status writer runs there),
//! so offline acceptance is what the Lease holder would write (spec §11).
//!
//! HTTPLocalRateLimitPolicy statuses (§7.3) and EgressNetwork statuses (§7.4) are computed
//! here too.
//!

use ipnet::IpNet;
use k8s_openapi::{
    api::core::v1::Service,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use linkerd_k8s_api::{
    EgressNetwork, HttpLocalRateLimitPolicy, HttpRoute as PolicyHttpRoute, Server,
    gateway_api::{
        experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute},
        grpcroutes::GrpcRoute,
        httproutes::HttpRoute as GatewayHttpRoute,
    },
    http_route::POLICY_CONTROLLER_NAME,
};
use parking_lot::Mutex;
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};
use tokio::sync::watch;

pub use crate::routes::parents::{
    ACCEPTED, BackendRef, EGRESS_NOT_ACCEPTED, NO_CLUSTER_IP, NO_MATCHING_PARENT, ParentKey,
    ParentKind, ParentStatus, ROUTE_REASON_CONFLICTED, RouteKind, StatusParentRef, StatusRoute,
    StatusRoutes, StatusSource,
};
use crate::{
    model::{EgressNetworkInfo, Kind, ObjectRef, ServerInfo, ServiceInfo},
    routes::{
        GATEWAY_GROUP, POLICY_GROUP, RouteKey,
        parents::{ParentLookup, ParentState},
        ref_is,
    },
    source::Event,
    store::apply_event,
    watches::{Sink, Watches},
};

/// The route-status index: what the status controller writes, computed from routes, the
/// Services, Servers and EgressNetworks they name, and HTTPLocalRateLimitPolicies. Cheap to
/// clone; every clone is the same index.
#[derive(Clone)]
pub struct StatusIndex {
    state: Arc<Mutex<Status>>,
    /// Bumped whenever an input of the statuses changes (§7.1).
    changes: watch::Sender<u64>,
}

/// The status index's stores.
struct Status {
    /// `--cluster-networks`: an EgressNetwork overlapping them is not accepted (§7.4).
    cluster_networks: Vec<IpNet>,
    /// Every route's status inputs (§7), whether or not it converts for policy.
    routes: StatusRoutes,
    /// Every HTTPLocalRateLimitPolicy's status inputs (§7.3).
    rate_limits: HashMap<ObjectRef, Arc<StatusRateLimit>>,
    services: HashMap<ObjectRef, Arc<ServiceInfo>>,
    servers: HashSet<ObjectRef>,
    egress_networks: HashMap<ObjectRef, Arc<EgressNetworkInfo>>,
}

/// The `ResolvedRefs` condition type and reason.
pub const RESOLVED_REFS: &str = "ResolvedRefs";
/// Reason: a Service backend that is not indexed.
pub const BACKEND_NOT_FOUND: &str = "BackendNotFound";
/// Reason: a backend of a kind no proxy can reach.
pub const INVALID_KIND: &str = "InvalidKind";
/// Reason: the rate limit's target Server does not exist (§7.3).
pub const NO_MATCHING_TARGET: &str = "NoMatchingTarget";
/// Reason: an older rate limit targets the same Server (§7.3).
pub const RATE_LIMIT_ALREADY_EXISTS: &str = "RateLimitReasonAlreadyExists";
/// The message of an EgressNetwork backend on a route without that EgressNetwork as parent.
pub const EGRESS_BACKEND_WRONG_PARENT: &str =
    "EgressNetwork backend needs to be on a route that has an EgressNetwork parent";
/// Reason: an EgressNetwork's networks overlap the cluster networks (§7.4).
pub const EGRESS_NETWORK_OVERLAP: &str = "EgressReasonNetworkOverlap";
/// The message of [`EGRESS_NETWORK_OVERLAP`].
pub const EGRESS_NETWORK_OVERLAP_MESSAGE: &str = "networks overlap with clusterNetworks";

/// What the status computation keeps of an HTTPLocalRateLimitPolicy (§7.3).
#[derive(Clone, Debug, PartialEq)]
pub struct StatusRateLimit {
    pub key: ObjectRef,
    pub created: Option<Timestamp>,
    /// The target Server's name; `None` when the target is not a Server (no status then).
    pub server: Option<String>,
    /// The observed `status.conditions`.
    pub observed: Vec<Condition>,
}

/// A status patch for one object: JSON merge patch of its status subresource (§7.1).
#[derive(Clone, Debug, PartialEq)]
pub struct StatusPatch {
    /// API group: `policy.linkerd.io` or `gateway.networking.k8s.io`.
    pub group: &'static str,
    /// The version patched (§7.1): policy HTTPRoute `v1beta3`, Gateway API HTTPRoutes and
    /// GRPCRoutes `v1`, TLSRoutes and TCPRoutes `v1alpha2`, HTTPLocalRateLimitPolicy and
    /// EgressNetwork `v1alpha1`.
    pub version: &'static str,
    /// `HTTPRoute`, `GRPCRoute`, `TLSRoute`, `TCPRoute`, `HTTPLocalRateLimitPolicy` or
    /// `EgressNetwork`.
    pub kind: &'static str,
    /// The resource's plural name (`httproutes`, `grpcroutes`, `tlsroutes`, `tcproutes`,
    /// `httplocalratelimitpolicies`, `egressnetworks`).
    pub plural: &'static str,
    pub namespace: String,
    pub name: String,
    /// The whole desired `status`: for routes `{parents}` (other controllers' entries first,
    /// as observed, then ours); for rate limits `{conditions, targetRef}`; for EgressNetworks
    /// `{conditions}`.
    pub status: serde_json::Value,
}

// === impl StatusPatch ===

impl StatusPatch {
    /// The merge patch body: `{apiVersion, kind, metadata: {name}, status}`.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": format!("{}/{}", self.group, self.version),
            "kind": self.kind,
            "metadata": { "name": self.name },
            "status": self.status,
        })
    }
}

// === impl StatusIndex ===

impl StatusIndex {
    /// An empty index; EgressNetworks overlapping `cluster_networks` are not accepted.
    pub fn new(cluster_networks: Vec<IpNet>) -> Self {
        Self {
            state: Arc::new(Mutex::new(Status {
                cluster_networks,
                routes: StatusRoutes::default(),
                rate_limits: HashMap::new(),
                services: HashMap::new(),
                servers: HashSet::new(),
                egress_networks: HashMap::new(),
            })),
            changes: watch::channel(0).0,
        }
    }

    /// Feeds the index from `watches`: the route kinds, HTTPLocalRateLimitPolicies, Services,
    /// Servers and EgressNetworks.
    pub fn watch(&self, watches: &mut Watches) {
        watches
            .add::<PolicyHttpRoute>(self.clone())
            .add::<GatewayHttpRoute>(self.clone())
            .add::<GrpcRoute>(self.clone())
            .add::<TlsRoute>(self.clone())
            .add::<TcpRoute>(self.clone())
            .add::<HttpLocalRateLimitPolicy>(self.clone())
            .add::<Service>(self.clone())
            .add::<Server>(self.clone())
            .add::<EgressNetwork>(self.clone());
    }

    /// Changes whenever an input of the statuses does (a route, rate limit, Service, Server
    /// or EgressNetwork); the value is a counter with no meaning of its own. For the status
    /// controller (§7.1).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// A patch for every indexed route whose desired `status.parents` (spec/policy.md §7.2,
    /// condition times `now`) differs from the status it carries, in (group, kind, namespace,
    /// name) order; then the same for HTTPLocalRateLimitPolicies (§7.3), by namespace/name,
    /// and EgressNetworks (§7.4).
    pub fn status_patches(&self, now: &Time) -> Vec<StatusPatch> {
        self.state.lock().status_patches(now)
    }

    /// Runs `change` on the stores; when it says it changed something, the statuses may have.
    fn update(&self, change: impl FnOnce(&mut Status) -> (bool, usize)) -> usize {
        let (changed, count) = change(&mut self.state.lock());
        if changed {
            self.changes.send_modify(|n| *n = n.wrapping_add(1));
        }
        count
    }
}

// === computation ===

fn condition(type_: &str, accepted: bool, reason: &str, message: &str, now: &Time) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if accepted { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

impl ParentLookup for Status {
    fn parent_state(&self, parent: &ParentKey) -> ParentState {
        match parent.kind {
            ParentKind::Server if self.servers.contains(&parent.object()) => ParentState::Exists,
            ParentKind::Server => ParentState::Missing,
            ParentKind::Service => match self.services.get(&parent.object()) {
                None => ParentState::Missing,
                Some(svc) if svc.cluster_ips.is_empty() || svc.external_name => {
                    ParentState::NoClusterIp
                }
                Some(_) => ParentState::Exists,
            },
            // The status controller reads an EgressNetwork's acceptance from its status, as it
            // reads it from the Lease holder's own earlier patch.
            ParentKind::EgressNetwork => match self.egress_networks.get(&parent.object()) {
                None => ParentState::Missing,
                Some(en) if !en.observed_accepted() => ParentState::EgressNetworkNotAccepted,
                Some(_) => ParentState::Exists,
            },
        }
    }
}

impl Status {
    /// The `Accepted` condition of `route` for `parent` as (status, reason, message) (§7.2).
    fn parent_acceptance(
        &self,
        route: &StatusRoute,
        parent: &ParentKey,
    ) -> (bool, &'static str, &'static str) {
        self.routes.acceptance(route, parent, self)
    }

    /// The `ResolvedRefs` condition of `route` for `parent` as (status, reason, message)
    /// (§7.2): backends of all rules in order; an EgressNetwork backend resolves only under
    /// that same EgressNetwork as parent.
    fn resolved_refs(
        &self,
        route: &StatusRoute,
        parent: &ParentKey,
    ) -> (bool, &'static str, &'static str) {
        for backend in &route.backends {
            match backend {
                BackendRef::Other => return (false, INVALID_KIND, ""),
                BackendRef::Service(svc) if !self.services.contains_key(svc) => {
                    return (false, BACKEND_NOT_FOUND, "");
                }
                BackendRef::Service(_) => {}
                BackendRef::EgressNetwork(en) if !self.egress_networks.contains_key(en) => {
                    return (false, BACKEND_NOT_FOUND, "");
                }
                BackendRef::EgressNetwork(en) => {
                    if parent.kind != ParentKind::EgressNetwork || parent.object() != *en {
                        return (false, INVALID_KIND, EGRESS_BACKEND_WRONG_PARENT);
                    }
                }
            }
        }
        (true, RESOLVED_REFS, "")
    }

    /// The `status.parents` the status controller wants on `route` (§7.2), with condition
    /// times `now`; `None` when it cannot be decided (never, today).
    pub(crate) fn desired_route_parents(
        &self,
        route: &StatusRoute,
        now: &Time,
    ) -> Option<Vec<ParentStatus>> {
        let mut parents: Vec<ParentStatus> = route
            .observed
            .iter()
            .filter(|s| s.controller_name != POLICY_CONTROLLER_NAME)
            .cloned()
            .collect();
        for parent in &route.parents {
            let (accepted, reason, message) = self.parent_acceptance(route, parent);
            let mut conditions = vec![condition(ACCEPTED, accepted, reason, message, now)];
            if parent.kind != ParentKind::Server {
                let (ok, reason, message) = self.resolved_refs(route, parent);
                conditions.push(condition(RESOLVED_REFS, ok, reason, message, now));
            }
            parents.push(ParentStatus {
                parent_ref: parent.status_ref(),
                controller_name: POLICY_CONTROLLER_NAME.to_string(),
                conditions,
            });
        }
        Some(parents)
    }

    /// A patch for every route whose desired `status.parents` differs from the observed one
    /// (§7.1), in key order, then for every such HTTPLocalRateLimitPolicy (§7.3).
    pub(crate) fn status_patches(&self, now: &Time) -> Vec<StatusPatch> {
        let mut patches = self.route_status_patches(now);
        patches.extend(self.rate_limit_status_patches(now));
        patches.extend(self.egress_network_status_patches(now));
        patches
    }

    /// §7.4: an EgressNetwork keeps its conditions other than `Accepted`, followed by
    /// `Accepted`: False/EgressReasonNetworkOverlap when one of its (defaulted) networks
    /// overlaps the cluster networks, else True/Accepted. By namespace/name.
    fn egress_network_status_patches(&self, now: &Time) -> Vec<StatusPatch> {
        let mut patches: Vec<StatusPatch> = self
            .egress_networks
            .values()
            .filter_map(|en| {
                let mut desired: Vec<Condition> = en
                    .conditions
                    .iter()
                    .filter(|c| c.type_ != ACCEPTED)
                    .cloned()
                    .collect();
                desired.push(if en.overlaps_cluster_networks(&self.cluster_networks) {
                    condition(
                        ACCEPTED,
                        false,
                        EGRESS_NETWORK_OVERLAP,
                        EGRESS_NETWORK_OVERLAP_MESSAGE,
                        now,
                    )
                } else {
                    condition(ACCEPTED, true, ACCEPTED, "", now)
                });
                if same_conditions(&desired, &en.conditions) {
                    return None;
                }
                Some(StatusPatch {
                    group: POLICY_GROUP,
                    version: "v1alpha1",
                    kind: "EgressNetwork",
                    plural: "egressnetworks",
                    namespace: en.namespace.clone(),
                    name: en.name.clone(),
                    status: serde_json::json!({ "conditions": desired }),
                })
            })
            .collect();
        patches.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        patches
    }

    fn route_status_patches(&self, now: &Time) -> Vec<StatusPatch> {
        self.routes
            .by_key
            .values()
            .filter_map(|route| {
                let parents = self.desired_route_parents(route, now)?;
                if same_parents(&parents, &route.observed) {
                    return None;
                }
                let (group, version, kind, plural) = route.kind.api();
                Some(StatusPatch {
                    group,
                    version,
                    kind,
                    plural,
                    namespace: route.key.namespace.clone(),
                    name: route.key.name.clone(),
                    status: serde_json::json!({ "parents": parents }),
                })
            })
            .collect()
    }

    /// §7.3: among the policies targeting one Server, the oldest (with a creation time before
    /// those without, then by name) is accepted and the others refused; a missing Server
    /// refuses all. Only the conditions are compared with the observed status.
    fn rate_limit_status_patches(&self, now: &Time) -> Vec<StatusPatch> {
        let mut by_server: BTreeMap<ObjectRef, Vec<&StatusRateLimit>> = BTreeMap::new();
        for rl in self.rate_limits.values() {
            if let Some(server) = &rl.server {
                let target = ObjectRef {
                    namespace: rl.key.namespace.clone(),
                    name: server.clone(),
                };
                by_server.entry(target).or_default().push(rl);
            }
        }
        let mut patches = Vec::new();
        for (server, mut policies) in by_server {
            policies.sort_by(|a, b| {
                (a.created.is_none(), a.created, &a.key.name).cmp(&(
                    b.created.is_none(),
                    b.created,
                    &b.key.name,
                ))
            });
            let exists = self.servers.contains(&server);
            for (i, rl) in policies.into_iter().enumerate() {
                let (accepted, reason) = match (exists, i) {
                    (false, _) => (false, NO_MATCHING_TARGET),
                    (true, 0) => (true, ACCEPTED),
                    (true, _) => (false, RATE_LIMIT_ALREADY_EXISTS),
                };
                let desired = [condition(ACCEPTED, accepted, reason, "", now)];
                if same_conditions(&desired, &rl.observed) {
                    continue;
                }
                patches.push(StatusPatch {
                    group: POLICY_GROUP,
                    version: "v1alpha1",
                    kind: "HTTPLocalRateLimitPolicy",
                    plural: "httplocalratelimitpolicies",
                    namespace: rl.key.namespace.clone(),
                    name: rl.key.name.clone(),
                    status: serde_json::json!({
                        "conditions": desired,
                        "targetRef": {"group": POLICY_GROUP, "kind": "Server", "name": server.name},
                    }),
                });
            }
        }
        patches.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        patches
    }
}

/// Conditions compare type, status, reason, message and observedGeneration, in order.
fn same_conditions(a: &[Condition], b: &[Condition]) -> bool {
    let key = |c: &Condition| {
        (
            c.type_.clone(),
            c.status.clone(),
            c.reason.clone(),
            c.message.clone(),
            c.observed_generation,
        )
    };
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| key(a) == key(b))
}

// === how each kind's events update the stores ===

fn object_key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ObjectRef {
    ObjectRef {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

/// What the status computation keeps of an HTTPLocalRateLimitPolicy (§7.3).
fn status_rate_limit(obj: &HttpLocalRateLimitPolicy) -> StatusRateLimit {
    let target = &obj.spec.target_ref;
    StatusRateLimit {
        created: obj.metadata.creation_timestamp.as_ref().map(|t| t.0),
        server: ref_is(
            target.group.as_deref(),
            &target.kind,
            POLICY_GROUP,
            "Server",
        )
        .then(|| target.name.clone()),
        observed: obj
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default(),
        key: object_key(&obj.metadata),
    }
}

/// Stores `value` under `key`; whether that changed the store.
fn put<V: PartialEq>(map: &mut HashMap<ObjectRef, V>, key: ObjectRef, value: V) -> bool {
    if map.get(&key) == Some(&value) {
        return false;
    }
    map.insert(key, value);
    true
}

impl Sink<Service> for StatusIndex {
    fn apply(&self, events: &[Event<Arc<ServiceInfo>>]) -> usize {
        self.update(|s| {
            let mut changed = false;
            apply_event(
                s,
                events,
                &mut changed,
                ServiceInfo::object_ref,
                |s| s.services.keys().cloned().collect(),
                |s, svc, changed| *changed |= put(&mut s.services, svc.object_ref(), svc.clone()),
                |s, key, changed| *changed |= s.services.remove(key).is_some(),
            );
            (changed, s.services.len())
        })
    }
}

impl Sink<Server> for StatusIndex {
    fn apply(&self, events: &[Event<Arc<ServerInfo>>]) -> usize {
        self.update(|s| {
            let mut changed = false;
            apply_event(
                s,
                events,
                &mut changed,
                ServerInfo::object_ref,
                |s| s.servers.iter().cloned().collect(),
                |s, srv, changed| *changed |= s.servers.insert(srv.object_ref()),
                |s, key, changed| *changed |= s.servers.remove(key),
            );
            (changed, s.servers.len())
        })
    }
}

impl Sink<EgressNetwork> for StatusIndex {
    fn apply(&self, events: &[Event<Arc<EgressNetworkInfo>>]) -> usize {
        self.update(|s| {
            let mut changed = false;
            apply_event(
                s,
                events,
                &mut changed,
                EgressNetworkInfo::object_ref,
                |s| s.egress_networks.keys().cloned().collect(),
                |s, en, changed| {
                    *changed |= put(&mut s.egress_networks, en.object_ref(), en.clone())
                },
                |s, key, changed| *changed |= s.egress_networks.remove(key).is_some(),
            );
            (changed, s.egress_networks.len())
        })
    }
}

impl Sink<HttpLocalRateLimitPolicy> for StatusIndex {
    fn apply(&self, events: &[Event<Arc<HttpLocalRateLimitPolicy>>]) -> usize {
        self.update(|s| {
            let mut changed = false;
            apply_event(
                s,
                events,
                &mut changed,
                |rl: &HttpLocalRateLimitPolicy| object_key(&rl.metadata),
                |s| s.rate_limits.keys().cloned().collect(),
                |s, rl, changed| {
                    let rl = status_rate_limit(rl);
                    *changed |= put(&mut s.rate_limits, rl.key.clone(), Arc::new(rl))
                },
                |s, key, changed| *changed |= s.rate_limits.remove(key).is_some(),
            );
            (changed, s.rate_limits.len())
        })
    }
}

/// A route kind whose statuses the index computes.
trait StatusRouteKind: Kind<Object = Self> + StatusSource {
    const GROUP: &'static str;
    const KIND: &'static str;
}

fn apply_route_event<K: StatusRouteKind>(index: &StatusIndex, events: &[Event<Arc<K>>]) -> usize {
    let route_key = |key: &ObjectRef| RouteKey {
        group: K::GROUP,
        kind: K::KIND,
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    };
    index.update(|s| {
        let mut changed = false;
        apply_event(
            s,
            events,
            &mut changed,
            |r: &K| object_key(r.meta()),
            |s| s.routes.keys_of(K::GROUP, K::KIND).collect(),
            |s, route, changed| match route.status_route() {
                Some(route) => *changed |= s.routes.apply(route).is_some(),
                None => {
                    let key = route_key(&object_key(route.meta()));
                    *changed |= s.routes.delete(&key).is_some();
                }
            },
            |s, key, changed| *changed |= s.routes.delete(&route_key(key)).is_some(),
        );
        (changed, s.routes.by_key.len())
    })
}

macro_rules! status_route_kind {
    ($ty:ty, $group:expr, $kind:literal) => {
        impl StatusRouteKind for $ty {
            const GROUP: &'static str = $group;
            const KIND: &'static str = $kind;
        }

        impl Sink<$ty> for StatusIndex {
            fn apply(&self, events: &[Event<Arc<$ty>>]) -> usize {
                apply_route_event::<$ty>(self, events)
            }
        }
    };
}

status_route_kind!(PolicyHttpRoute, POLICY_GROUP, "HTTPRoute");
status_route_kind!(GatewayHttpRoute, GATEWAY_GROUP, "HTTPRoute");
status_route_kind!(GrpcRoute, GATEWAY_GROUP, "GRPCRoute");
status_route_kind!(TlsRoute, GATEWAY_GROUP, "TLSRoute");
status_route_kind!(TcpRoute, GATEWAY_GROUP, "TCPRoute");

/// Whether two `status.parents` lists say the same, ignoring entry order and condition times
/// (conditions compare type, status, reason, message and observedGeneration, in order).
pub fn same_parents(a: &[ParentStatus], b: &[ParentStatus]) -> bool {
    type Cond<'a> = (&'a str, &'a str, &'a str, &'a str, Option<i64>);
    fn normalize(list: &[ParentStatus]) -> Vec<(&StatusParentRef, &str, Vec<Cond<'_>>)> {
        let mut v: Vec<_> = list
            .iter()
            .map(|s| {
                let conditions = s
                    .conditions
                    .iter()
                    .map(|c| {
                        (
                            c.type_.as_str(),
                            c.status.as_str(),
                            c.reason.as_str(),
                            c.message.as_str(),
                            c.observed_generation,
                        )
                    })
                    .collect();
                (&s.parent_ref, s.controller_name.as_str(), conditions)
            })
            .collect();
        v.sort();
        v
    }
    a.len() == b.len() && normalize(a) == normalize(b)
}

#[cfg(test)]
mod tests;
