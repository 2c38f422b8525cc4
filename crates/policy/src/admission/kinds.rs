//! The resource types the webhook judges, and the types references may name (spec/policy.md
//! §3.1, §6).

use linkerd_k8s_api::shared::kind_matches;

use linkerd_admission::GroupVersionKind;

/// The Linkerd policy API group.
pub const POLICY_GROUP: &str = "policy.linkerd.io";
/// The Gateway API group.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// A resource type `(group, kind)`; the core group is `""`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TypeRef {
    /// The API group, `""` for core.
    pub group: &'static str,
    /// The kind, as the API server spells it.
    pub kind: &'static str,
}

/// `policy.linkerd.io` Server.
pub const SERVER: TypeRef = TypeRef::new(POLICY_GROUP, "Server");
/// `policy.linkerd.io` MeshTLSAuthentication.
pub const MESH_TLS_AUTHENTICATION: TypeRef = TypeRef::new(POLICY_GROUP, "MeshTLSAuthentication");
/// `policy.linkerd.io` NetworkAuthentication.
pub const NETWORK_AUTHENTICATION: TypeRef = TypeRef::new(POLICY_GROUP, "NetworkAuthentication");
/// `policy.linkerd.io` HTTPRoute.
pub const POLICY_HTTP_ROUTE: TypeRef = TypeRef::new(POLICY_GROUP, "HTTPRoute");
/// `policy.linkerd.io` EgressNetwork.
pub const EGRESS_NETWORK: TypeRef = TypeRef::new(POLICY_GROUP, "EgressNetwork");
/// `gateway.networking.k8s.io` HTTPRoute.
pub const GATEWAY_HTTP_ROUTE: TypeRef = TypeRef::new(GATEWAY_GROUP, "HTTPRoute");
/// `gateway.networking.k8s.io` GRPCRoute.
pub const GRPC_ROUTE: TypeRef = TypeRef::new(GATEWAY_GROUP, "GRPCRoute");
/// core Namespace.
pub const NAMESPACE: TypeRef = TypeRef::new("", "Namespace");
/// core ServiceAccount.
pub const SERVICE_ACCOUNT: TypeRef = TypeRef::new("", "ServiceAccount");
/// core Service.
pub const SERVICE: TypeRef = TypeRef::new("", "Service");

/// A kind the webhook validates, by `request.kind` (group and kind compared
/// case-insensitively, any version).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    AuthorizationPolicy,
    MeshTlsAuthentication,
    NetworkAuthentication,
    Server,
    ServerAuthorization,
    PolicyHttpRoute,
    EgressNetwork,
    HttpLocalRateLimitPolicy,
    GatewayHttpRoute,
    GrpcRoute,
    TlsRoute,
    TcpRoute,
}

const KINDS: [(TypeRef, Kind); 12] = [
    (
        TypeRef::new(POLICY_GROUP, "AuthorizationPolicy"),
        Kind::AuthorizationPolicy,
    ),
    (MESH_TLS_AUTHENTICATION, Kind::MeshTlsAuthentication),
    (NETWORK_AUTHENTICATION, Kind::NetworkAuthentication),
    (SERVER, Kind::Server),
    (
        TypeRef::new(POLICY_GROUP, "ServerAuthorization"),
        Kind::ServerAuthorization,
    ),
    (POLICY_HTTP_ROUTE, Kind::PolicyHttpRoute),
    (EGRESS_NETWORK, Kind::EgressNetwork),
    (
        TypeRef::new(POLICY_GROUP, "HTTPLocalRateLimitPolicy"),
        Kind::HttpLocalRateLimitPolicy,
    ),
    (GATEWAY_HTTP_ROUTE, Kind::GatewayHttpRoute),
    (GRPC_ROUTE, Kind::GrpcRoute),
    (TypeRef::new(GATEWAY_GROUP, "TLSRoute"), Kind::TlsRoute),
    (TypeRef::new(GATEWAY_GROUP, "TCPRoute"), Kind::TcpRoute),
];

// === impl TypeRef ===

impl TypeRef {
    /// The type `kind` of `group` (`""` for core).
    pub const fn new(group: &'static str, kind: &'static str) -> Self {
        Self { group, kind }
    }

    /// Whether a reference's `(group?, kind)` names this type (§3.1: case-insensitive, an
    /// absent or empty group is `core`).
    pub fn matches(self, group: Option<&str>, kind: &str) -> bool {
        kind_matches(group, kind, self.group, self.kind)
    }

    /// Like [`TypeRef::matches`] for references whose kind is optional: no kind names nothing.
    pub fn matches_opt(self, group: Option<&str>, kind: Option<&str>) -> bool {
        kind.is_some_and(|kind| self.matches(group, kind))
    }
}

// === impl Kind ===

impl Kind {
    /// The kind of `request.kind`, if the webhook validates it.
    pub fn of(gvk: &GroupVersionKind) -> Option<Self> {
        KINDS
            .iter()
            .find(|(t, _)| {
                gvk.group.eq_ignore_ascii_case(t.group) && gvk.kind.eq_ignore_ascii_case(t.kind)
            })
            .map(|(_, kind)| *kind)
    }

    /// Whether the kind is a Gateway API kind, whose spec is decoded leniently.
    pub fn is_gateway_api(self) -> bool {
        matches!(
            self,
            Self::GatewayHttpRoute | Self::GrpcRoute | Self::TlsRoute | Self::TcpRoute
        )
    }
}
