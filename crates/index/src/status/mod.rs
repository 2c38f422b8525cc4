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

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use linkerd_k8s_api::{
    HttpLocalRateLimitPolicy, HttpRoute as PolicyHttpRoute,
    gateway_api::{
        experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute},
        grpcroutes::GrpcRoute,
        httproutes::HttpRoute as GatewayHttpRoute,
    },
    http_route::POLICY_CONTROLLER_NAME,
};
use serde::Serialize;
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use crate::{
    inbound::objects::ref_is,
    model::ObjectRef,
    outbound::routes::{GATEWAY_GROUP, POLICY_GROUP, RouteKey},
    store::{Cluster, Touched},
};
use k8s_openapi::jiff::Timestamp;

/// The `Accepted` condition type.
pub const ACCEPTED: &str = "Accepted";
/// The `ResolvedRefs` condition type and reason.
pub const RESOLVED_REFS: &str = "ResolvedRefs";
/// Reason: the parent does not exist or cannot take routes.
pub const NO_MATCHING_PARENT: &str = "NoMatchingParent";
/// Reason: a route of a more specific kind has the same parent (GEP-1426).
pub const ROUTE_REASON_CONFLICTED: &str = "RouteReasonConflicted";
/// Reason: a Service backend that is not indexed.
pub const BACKEND_NOT_FOUND: &str = "BackendNotFound";
/// Reason: a backend of a kind no proxy can reach.
pub const INVALID_KIND: &str = "InvalidKind";
/// Reason: the rate limit's target Server does not exist (§7.3).
pub const NO_MATCHING_TARGET: &str = "NoMatchingTarget";
/// Reason: an older rate limit targets the same Server (§7.3).
pub const RATE_LIMIT_ALREADY_EXISTS: &str = "RateLimitReasonAlreadyExists";
/// The message of a Service parent without a cluster IP (headless or ExternalName).
pub const NO_CLUSTER_IP: &str = "parent service must have a ClusterIP";
/// The message of an EgressNetwork parent whose status is not `Accepted=True`.
pub const EGRESS_NOT_ACCEPTED: &str = "EgressNetwork parent has not been accepted";
/// The message of an EgressNetwork backend on a route without that EgressNetwork as parent.
pub const EGRESS_BACKEND_WRONG_PARENT: &str =
    "EgressNetwork backend needs to be on a route that has an EgressNetwork parent";
/// Reason: an EgressNetwork's networks overlap the cluster networks (§7.4).
pub const EGRESS_NETWORK_OVERLAP: &str = "EgressReasonNetworkOverlap";
/// The message of [`EGRESS_NETWORK_OVERLAP`].
pub const EGRESS_NETWORK_OVERLAP_MESSAGE: &str = "networks overlap with clusterNetworks";

/// The route kinds the index holds, most specific first: a route is conflicted by a route of
/// an earlier kind on the identical parent (GEP-1426: GRPCRoute over HTTPRoute over TLSRoute
/// over TCPRoute).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    Grpc,
    /// A Gateway API HTTPRoute.
    GatewayHttp,
    /// A policy.linkerd.io HTTPRoute.
    PolicyHttp,
    Tls,
    Tcp,
}

/// The parent kinds that get an entry from this controller (§7.2).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ParentKind {
    Server,
    Service,
    EgressNetwork,
}

/// A supported parent reference: kind, namespace (the route's when absent), name and port.
/// Two routes conflict only on the identical `ParentKey`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ParentKey {
    pub kind: ParentKind,
    pub namespace: String,
    pub name: String,
    /// Always `None` for Servers.
    pub port: Option<u16>,
}

/// A backendRef as the status reads it (namespace defaults to the route's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendRef {
    Service(ObjectRef),
    EgressNetwork(ObjectRef),
    /// Any other group/kind.
    Other,
}

/// One `status.parents[]` entry, serialized as the API has it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentStatus {
    pub parent_ref: StatusParentRef,
    pub controller_name: String,
    pub conditions: Vec<Condition>,
}

/// `status.parents[].parentRef`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusParentRef {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// What the status computation keeps of a route: its supported parents, its backends (all
/// rules, in order) and the `status.parents` it carries now.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusRoute {
    pub key: RouteKey,
    pub kind: RouteKind,
    /// Supported parent refs in spec order; refs of other kinds, or with a port outside
    /// 1..=65535, are left out.
    pub parents: Vec<ParentKey>,
    pub backends: Vec<BackendRef>,
    /// The observed `status.parents`, every controller's.
    pub observed: Vec<ParentStatus>,
}

/// The routes the status computation reads, by key and by parent.
#[derive(Debug, Default)]
pub struct StatusRoutes {
    pub(crate) by_key: BTreeMap<RouteKey, Arc<StatusRoute>>,
    pub(crate) by_parent: BTreeMap<ParentKey, BTreeSet<RouteKey>>,
}

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

// === impl RouteKind ===

impl RouteKind {
    /// The kind of a stored route key; `None` for kinds the status does not cover.
    pub fn of(key: &RouteKey) -> Option<Self> {
        match (key.group, key.kind) {
            (GATEWAY_GROUP, "GRPCRoute") => Some(Self::Grpc),
            (GATEWAY_GROUP, "HTTPRoute") => Some(Self::GatewayHttp),
            (POLICY_GROUP, "HTTPRoute") => Some(Self::PolicyHttp),
            (GATEWAY_GROUP, "TLSRoute") => Some(Self::Tls),
            (GATEWAY_GROUP, "TCPRoute") => Some(Self::Tcp),
            _ => None,
        }
    }

    /// Whether a route of this kind is conflicted by a route of `other` kind on the same
    /// parent (GEP-1426): GRPCRoutes never; HTTPRoutes (both groups) by GRPCRoutes;
    /// TLSRoutes by GRPCRoutes and HTTPRoutes; TCPRoutes by any of those and TLSRoutes.
    pub fn conflicted_by(self, other: RouteKind) -> bool {
        let rank = |k: RouteKind| match k {
            RouteKind::Grpc => 0,
            RouteKind::GatewayHttp | RouteKind::PolicyHttp => 1,
            RouteKind::Tls => 2,
            RouteKind::Tcp => 3,
        };
        rank(other) < rank(self)
    }

    fn api(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Self::Grpc => (GATEWAY_GROUP, "v1", "GRPCRoute", "grpcroutes"),
            Self::GatewayHttp => (GATEWAY_GROUP, "v1", "HTTPRoute", "httproutes"),
            Self::PolicyHttp => (POLICY_GROUP, "v1beta3", "HTTPRoute", "httproutes"),
            Self::Tls => (GATEWAY_GROUP, "v1alpha2", "TLSRoute", "tlsroutes"),
            Self::Tcp => (GATEWAY_GROUP, "v1alpha2", "TCPRoute", "tcproutes"),
        }
    }
}

// === impl ParentKey ===

impl ParentKey {
    /// The entry's `parentRef` as this controller writes it (§7.2).
    fn status_ref(&self) -> StatusParentRef {
        let (group, kind) = match self.kind {
            ParentKind::Server => (POLICY_GROUP, "Server"),
            ParentKind::Service => ("core", "Service"),
            ParentKind::EgressNetwork => (POLICY_GROUP, "EgressNetwork"),
        };
        StatusParentRef {
            group: Some(group.to_string()),
            kind: Some(kind.to_string()),
            namespace: Some(self.namespace.clone()),
            name: self.name.clone(),
            port: self.port.map(i32::from),
            section_name: None,
        }
    }

    fn object(&self) -> ObjectRef {
        ObjectRef {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
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

// === conversion ===

fn port(port: Option<i32>) -> Result<Option<u16>, ()> {
    match port {
        None => Ok(None),
        Some(p) => u16::try_from(p)
            .ok()
            .filter(|p| *p != 0)
            .map(Some)
            .ok_or(()),
    }
}

/// The route kinds' generated types differ but share the fields read here.
macro_rules! status_route {
    ($r:expr, $kind:expr) => {{
        let r = $r;
        let kind: RouteKind = $kind;
        let (group, _, kind_name, _) = kind.api();
        let namespace = r.metadata.namespace.clone().unwrap_or_default();
        let name = r.metadata.name.clone().filter(|n| !n.is_empty())?;
        let parents = r
            .spec
            .parent_refs
            .iter()
            .flatten()
            .filter_map(|p| {
                let k = p.kind.as_deref()?;
                let kind = if ref_is(p.group.as_deref(), k, POLICY_GROUP, "Server") {
                    ParentKind::Server
                } else if ref_is(p.group.as_deref(), k, "core", "Service") {
                    ParentKind::Service
                } else if ref_is(p.group.as_deref(), k, POLICY_GROUP, "EgressNetwork") {
                    ParentKind::EgressNetwork
                } else {
                    return None;
                };
                let port = match kind {
                    ParentKind::Server => None,
                    _ => port(p.port).ok()?,
                };
                Some(ParentKey {
                    kind,
                    namespace: p.namespace.clone().unwrap_or_else(|| namespace.clone()),
                    name: p.name.clone(),
                    port,
                })
            })
            .collect();
        let backends = r
            .spec
            .rules
            .items()
            .iter()
            .flat_map(|rule| rule.backend_refs.items())
            .map(|b| {
                let object = ObjectRef {
                    namespace: b.namespace.clone().unwrap_or_else(|| namespace.clone()),
                    name: b.name.clone(),
                };
                let k = b.kind.as_deref().unwrap_or("Service");
                if ref_is(b.group.as_deref(), k, "core", "Service") {
                    BackendRef::Service(object)
                } else if ref_is(b.group.as_deref(), k, POLICY_GROUP, "EgressNetwork") {
                    BackendRef::EgressNetwork(object)
                } else {
                    BackendRef::Other
                }
            })
            .collect();
        let observed = r
            .status
            .iter()
            .flat_map(|s| &s.parents)
            .map(|s| ParentStatus {
                parent_ref: StatusParentRef {
                    group: s.parent_ref.group.clone(),
                    kind: s.parent_ref.kind.clone(),
                    namespace: s.parent_ref.namespace.clone(),
                    name: s.parent_ref.name.clone(),
                    port: s.parent_ref.port,
                    section_name: s.parent_ref.section_name.clone(),
                },
                controller_name: s.controller_name.clone(),
                conditions: s.conditions.clone(),
            })
            .collect();
        Some(StatusRoute {
            key: RouteKey {
                group,
                kind: kind_name,
                namespace,
                name,
            },
            kind,
            parents,
            backends,
            observed,
        })
    }};
}

/// A list field that is optional in some route kinds' generated types and required in others
/// (TLSRoute and TCPRoute rules and backendRefs).
trait Items<T> {
    fn items(&self) -> &[T];
}

impl<T> Items<T> for Vec<T> {
    fn items(&self) -> &[T] {
        self
    }
}

impl<T> Items<T> for Option<Vec<T>> {
    fn items(&self) -> &[T] {
        self.as_deref().unwrap_or_default()
    }
}

/// A route kind the status computation reads.
pub trait StatusSource {
    /// The route's status inputs; `None` without a name.
    fn status_route(&self) -> Option<StatusRoute>;
}

impl StatusSource for PolicyHttpRoute {
    fn status_route(&self) -> Option<StatusRoute> {
        status_route!(self, RouteKind::PolicyHttp)
    }
}

impl StatusSource for GatewayHttpRoute {
    fn status_route(&self) -> Option<StatusRoute> {
        status_route!(self, RouteKind::GatewayHttp)
    }
}

impl StatusSource for GrpcRoute {
    fn status_route(&self) -> Option<StatusRoute> {
        status_route!(self, RouteKind::Grpc)
    }
}

impl StatusSource for TlsRoute {
    fn status_route(&self) -> Option<StatusRoute> {
        status_route!(self, RouteKind::Tls)
    }
}

impl StatusSource for TcpRoute {
    fn status_route(&self) -> Option<StatusRoute> {
        status_route!(self, RouteKind::Tcp)
    }
}

// === store updates ===

/// Stores `obj`'s status inputs under `key` (replacing the previous ones); marks the status
/// as touched, and the parents' inbound namespaces and outbound Services, when they changed,
/// since acceptance (and so offline policy) may follow.
pub(crate) fn apply_route<R: StatusSource>(
    cluster: &mut Cluster,
    key: &RouteKey,
    obj: &R,
    touched: &mut Touched,
) {
    let Some(route) = obj.status_route() else {
        return;
    };
    if cluster
        .status_routes
        .by_key
        .get(key)
        .is_some_and(|old| **old == route)
    {
        return;
    }
    delete_route(cluster, key, touched);
    for parent in &route.parents {
        touch_parent(touched, parent);
        cluster
            .status_routes
            .by_parent
            .entry(parent.clone())
            .or_default()
            .insert(key.clone());
    }
    touched.status = true;
    cluster
        .status_routes
        .by_key
        .insert(key.clone(), Arc::new(route));
}

/// Drops route `key` from the status inputs.
pub(crate) fn delete_route(cluster: &mut Cluster, key: &RouteKey, touched: &mut Touched) {
    let Some(old) = cluster.status_routes.by_key.remove(key) else {
        return;
    };
    for parent in &old.parents {
        touch_parent(touched, parent);
        if let Some(keys) = cluster.status_routes.by_parent.get_mut(parent) {
            keys.remove(key);
            if keys.is_empty() {
                cluster.status_routes.by_parent.remove(parent);
            }
        }
    }
    touched.status = true;
}

fn touch_parent(touched: &mut Touched, parent: &ParentKey) {
    match parent.kind {
        ParentKind::Server => {
            touched.inbound_namespaces.insert(parent.namespace.clone());
        }
        ParentKind::Service => {
            touched.outbound_services.insert(parent.object());
        }
        ParentKind::EgressNetwork => {
            touched.outbound_egress_networks.insert(parent.object());
        }
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

impl Cluster {
    /// The `Accepted` condition of `route` for `parent` as (status, reason, message) (§7.2);
    /// `None` when it cannot be decided (never, today).
    fn parent_acceptance(
        &self,
        route: &StatusRoute,
        parent: &ParentKey,
    ) -> Option<(bool, &'static str, &'static str)> {
        let exists = match parent.kind {
            ParentKind::Server => self.servers.contains_key(&parent.object()),
            ParentKind::Service => match self.services.get(&parent.object()) {
                None => false,
                Some(svc) if svc.cluster_ips.is_empty() || svc.external_name => {
                    return Some((false, NO_MATCHING_PARENT, NO_CLUSTER_IP));
                }
                Some(_) => true,
            },
            ParentKind::EgressNetwork => match self.egress_network_accepted(&parent.object()) {
                None => false,
                Some(false) => return Some((false, NO_MATCHING_PARENT, EGRESS_NOT_ACCEPTED)),
                Some(true) => true,
            },
        };
        if !exists {
            return Some((false, NO_MATCHING_PARENT, ""));
        }
        let conflicted = self
            .status_routes
            .by_parent
            .get(parent)
            .into_iter()
            .flatten()
            .filter(|k| **k != route.key)
            .filter_map(RouteKind::of)
            .any(|other| route.kind.conflicted_by(other));
        Some(if conflicted {
            (false, ROUTE_REASON_CONFLICTED, "")
        } else {
            (true, ACCEPTED, "")
        })
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
            let (accepted, reason, message) = self.parent_acceptance(route, parent)?;
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

    /// Whether the status controller accepts route `key` for `parent` (offline mode's
    /// acceptance, spec §11): the parent is one of its refs and its `Accepted` would be True.
    pub(crate) fn status_accepts(&self, key: &RouteKey, parent: &ParentKey) -> bool {
        let Some(route) = self.status_routes.by_key.get(key) else {
            return false;
        };
        route.parents.contains(parent)
            && self
                .parent_acceptance(route, parent)
                .is_some_and(|(accepted, _, _)| accepted)
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
        let Some(config) = &self.outbound_config else {
            return Vec::new();
        };
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
                desired.push(if en.overlaps_cluster_networks(&config.cluster_networks) {
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
        self.status_routes
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
        for rl in self.status_rate_limits.values() {
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
            let exists = self.servers.contains_key(&server);
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

// === rate limit store updates ===

/// Stores the status inputs of an HTTPLocalRateLimitPolicy (§7.3).
pub(crate) fn apply_rate_limit(
    cluster: &mut Cluster,
    obj: &HttpLocalRateLimitPolicy,
    touched: &mut Touched,
) {
    let Some(name) = obj.metadata.name.clone().filter(|n| !n.is_empty()) else {
        return;
    };
    let key = ObjectRef {
        namespace: obj.metadata.namespace.clone().unwrap_or_default(),
        name,
    };
    let target = &obj.spec.target_ref;
    let rl = StatusRateLimit {
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
        key: key.clone(),
    };
    if cluster
        .status_rate_limits
        .get(&key)
        .is_some_and(|old| **old == rl)
    {
        return;
    }
    cluster.status_rate_limits.insert(key, Arc::new(rl));
    touched.status = true;
}

/// The names of the rate limits with status inputs.
pub(crate) fn rate_limit_keys(cluster: &Cluster) -> Vec<ObjectRef> {
    cluster.status_rate_limits.keys().cloned().collect()
}

/// Drops a rate limit's status inputs.
pub(crate) fn delete_rate_limit(cluster: &mut Cluster, key: &ObjectRef, touched: &mut Touched) {
    if cluster.status_rate_limits.remove(key).is_some() {
        touched.status = true;
    }
}

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
