//! The policy kinds as the inbound index keeps them (spec/policy.md §2.1, §4.5–§4.7): each
//! resolved once per watch event into what server computation needs.

use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeSet;

use super::view::{ClientAuthorization, IdentityMatch, Network};
use crate::{
    model::Selector,
    routes::{GrpcRule, HostMatch, HttpRule},
};

/// A ServerAuthorization: which Servers of its namespace it applies to, and whom it admits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerAuthorizationInfo {
    pub namespace: String,
    pub name: String,
    pub servers: ServerSelection,
    pub authorization: ClientAuthorization,
}

/// `spec.server` of a ServerAuthorization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerSelection {
    Name(String),
    /// Matched against the Servers' metadata labels.
    Selector(Selector),
}

/// An AuthorizationPolicy: its target and the authentications it requires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthorizationPolicyInfo {
    pub namespace: String,
    pub name: String,
    pub target: PolicyTarget,
    pub authentications: Vec<AuthenticationRef>,
}

/// `spec.targetRef` of an AuthorizationPolicy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyTarget {
    /// A Server of the policy's namespace, by exact name.
    Server(String),
    /// Every Server of the policy's namespace.
    Namespace,
    /// A route, matched case-insensitively by group, kind and name.
    Route {
        group: String,
        kind: String,
        name: String,
    },
}

/// One `requiredAuthenticationRefs` entry, its namespace defaulted.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AuthenticationRef {
    MeshTls {
        namespace: String,
        name: String,
    },
    Network {
        namespace: String,
        name: String,
    },
    /// Already an exact identity.
    ServiceAccount {
        identity: String,
    },
}

/// A MeshTLSAuthentication: the identities it accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeshTlsAuthenticationInfo {
    pub namespace: String,
    pub name: String,
    pub identities: Vec<IdentityMatch>,
}

/// A NetworkAuthentication: the networks it accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkAuthenticationInfo {
    pub namespace: String,
    pub name: String,
    pub networks: Vec<Network>,
}

/// An HTTPLocalRateLimitPolicy targeting a Server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitPolicyInfo {
    pub namespace: String,
    pub name: String,
    /// `metadata.creationTimestamp`: of the policies of a Server, the oldest is accepted.
    pub created: Option<Timestamp>,
    pub server: String,
    /// `status.conditions` has `Accepted=True`.
    pub accepted: bool,
    pub total: Option<u32>,
    pub identity: Option<u32>,
    /// `(requests per second, exact ServiceAccount identities)`.
    pub overrides: Vec<(u32, Vec<String>)>,
}

/// A route (policy or Gateway API HTTPRoute, or GRPCRoute) as inbound policy reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboundRouteInfo {
    pub namespace: String,
    pub name: String,
    /// API group (`policy.linkerd.io`, `gateway.networking.k8s.io`).
    pub group: String,
    /// `HTTPRoute` or `GRPCRoute`.
    pub kind: String,
    /// Creation time (a time, not its text: `00.5Z` sorts after `00Z`).
    pub created: Option<Timestamp>,
    /// The Servers (of the route's namespace) its parent refs name.
    pub parents: BTreeSet<String>,
    /// The Servers for which `status.parents` has `Accepted=True` from the policy controller.
    pub accepted: BTreeSet<String>,
    pub hostnames: Vec<HostMatch>,
    pub rules: RouteRules,
}

/// The rules of a route, by protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteRules {
    Http(Vec<HttpRule>),
    Grpc(Vec<GrpcRule>),
}
