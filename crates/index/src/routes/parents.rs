//! What a route's parents decide (spec/policy.md §7.2): which parents a route names, the
//! `status.parents` it carries, and whether the status controller accepts it for a parent.
//!
//! The status index writes these decisions; in offline mode (no status writer runs) the
//! inbound and outbound indexes compute acceptance the same way, each from its own copy of the
//! routes' parents ([`StatusRoutes`]) and its own parents ([`ParentLookup`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use linkerd_k8s_api::{
    HttpRoute as PolicyHttpRoute,
    gateway_api::{
        experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute},
        grpcroutes::GrpcRoute,
        httproutes::HttpRoute as GatewayHttpRoute,
    },
};
use serde::Serialize;
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use super::{GATEWAY_GROUP, POLICY_GROUP, RouteKey, ref_is};
use crate::model::ObjectRef;

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

/// Routes' status inputs, by key and by parent.
#[derive(Debug, Default)]
pub struct StatusRoutes {
    pub(crate) by_key: BTreeMap<RouteKey, Arc<StatusRoute>>,
    pub(crate) by_parent: BTreeMap<ParentKey, BTreeSet<RouteKey>>,
}

/// What a parent is, for acceptance (§7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParentState {
    /// It does not exist (or is not known to the index asking).
    Missing,
    /// A Service without a cluster IP (headless or ExternalName).
    NoClusterIp,
    /// An EgressNetwork whose status is not `Accepted=True`.
    EgressNetworkNotAccepted,
    Exists,
}

/// The parents an index knows, for acceptance.
pub trait ParentLookup {
    fn parent_state(&self, parent: &ParentKey) -> ParentState;
}

/// The reason of an `Accepted=False` condition: the parent does not exist or cannot take
/// routes.
pub const NO_MATCHING_PARENT: &str = "NoMatchingParent";
/// The reason of an `Accepted=False` condition: a route of a more specific kind has the same
/// parent (GEP-1426).
pub const ROUTE_REASON_CONFLICTED: &str = "RouteReasonConflicted";
/// The `Accepted` condition type and reason.
pub const ACCEPTED: &str = "Accepted";
/// The message of a Service parent without a cluster IP (headless or ExternalName).
pub const NO_CLUSTER_IP: &str = "parent service must have a ClusterIP";
/// The message of an EgressNetwork parent whose status is not `Accepted=True`.
pub const EGRESS_NOT_ACCEPTED: &str = "EgressNetwork parent has not been accepted";

// === impl StatusRoutes ===

impl StatusRoutes {
    /// Stores `route` (replacing the previous version of its key); returns the parents of the
    /// old and new versions, whose acceptance may follow, or `None` when nothing changed.
    pub(crate) fn apply(&mut self, route: StatusRoute) -> Option<Vec<ParentKey>> {
        if self
            .by_key
            .get(&route.key)
            .is_some_and(|old| **old == route)
        {
            return None;
        }
        let mut touched = self.delete(&route.key).unwrap_or_default();
        for parent in &route.parents {
            touched.push(parent.clone());
            self.by_parent
                .entry(parent.clone())
                .or_default()
                .insert(route.key.clone());
        }
        self.by_key.insert(route.key.clone(), Arc::new(route));
        Some(touched)
    }

    /// Drops route `key`; returns its parents, or `None` when it was not stored.
    pub(crate) fn delete(&mut self, key: &RouteKey) -> Option<Vec<ParentKey>> {
        let old = self.by_key.remove(key)?;
        for parent in &old.parents {
            if let Some(keys) = self.by_parent.get_mut(parent) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_parent.remove(parent);
                }
            }
        }
        Some(old.parents.clone())
    }

    /// The routes of one kind.
    pub(crate) fn keys_of<'a>(
        &'a self,
        group: &'a str,
        kind: &'a str,
    ) -> impl Iterator<Item = ObjectRef> + 'a {
        super::names_of_kind(&self.by_key, group, kind)
    }

    /// The `Accepted` condition of `route` for `parent` as (status, reason, message) (§7.2):
    /// the parent must exist (a Service with a cluster IP, an accepted EgressNetwork) and no
    /// route of a more specific kind may name the identical parent.
    pub(crate) fn acceptance(
        &self,
        route: &StatusRoute,
        parent: &ParentKey,
        parents: &impl ParentLookup,
    ) -> (bool, &'static str, &'static str) {
        match parents.parent_state(parent) {
            ParentState::Missing => return (false, NO_MATCHING_PARENT, ""),
            ParentState::NoClusterIp => return (false, NO_MATCHING_PARENT, NO_CLUSTER_IP),
            ParentState::EgressNetworkNotAccepted => {
                return (false, NO_MATCHING_PARENT, EGRESS_NOT_ACCEPTED);
            }
            ParentState::Exists => {}
        }
        let conflicted = self
            .by_parent
            .get(parent)
            .into_iter()
            .flatten()
            .filter(|k| **k != route.key)
            .filter_map(RouteKind::of)
            .any(|other| route.kind.conflicted_by(other));
        if conflicted {
            (false, ROUTE_REASON_CONFLICTED, "")
        } else {
            (true, ACCEPTED, "")
        }
    }

    /// Whether the status controller accepts route `key` for `parent` (offline mode's
    /// acceptance, spec §11): the parent is one of its refs and its `Accepted` would be True.
    pub(crate) fn accepts(
        &self,
        key: &RouteKey,
        parent: &ParentKey,
        parents: &impl ParentLookup,
    ) -> bool {
        let Some(route) = self.by_key.get(key) else {
            return false;
        };
        route.parents.contains(parent) && self.acceptance(route, parent, parents).0
    }
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

    /// The (group, version, kind, plural) a status patch of this kind is sent to (§7.1).
    pub(crate) fn api(self) -> (&'static str, &'static str, &'static str, &'static str) {
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
    pub(crate) fn status_ref(&self) -> StatusParentRef {
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

    pub fn object(&self) -> ObjectRef {
        ObjectRef {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

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
