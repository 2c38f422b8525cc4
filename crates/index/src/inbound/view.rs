//! What the policy controller serves for one workload port (spec/policy.md §4.4–§4.8), in
//! protocol-agnostic form: the policy binary turns an [`InboundServer`] into the proxy API's
//! `inbound.Server`.

use k8s_openapi::jiff::Timestamp;
use std::{collections::BTreeMap, sync::Arc, time::Duration};

pub use crate::model::Network;
use crate::routes::{GrpcRule, HostMatch, HttpRule};

/// The protocol-detection timeout of `Detect` servers (§1.2 constants).
pub const DETECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The policy of one workload port. Equal policies of different workload ports share one
/// allocation in the index (`Hash`: see `topic::SharedViews`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InboundServer {
    pub reference: ServerRef,
    pub protocol: InboundProtocol,
    /// Server-level authorizations, by reference (order on the wire is unspecified). Shared,
    /// like the route lists, by the views that have equal ones (every Server of a namespace
    /// under one AuthorizationPolicy, every port with the default routes).
    pub authorizations: Arc<BTreeMap<AuthorizationRef, ClientAuthorization>>,
    /// HTTP routes, sorted as §4.8 says; the default (and probe) routes when none attached.
    pub http_routes: Arc<Vec<InboundRoute<HttpRule>>>,
    /// gRPC routes (Servers only), sorted; the default route when none attached.
    pub grpc_routes: Arc<Vec<InboundRoute<GrpcRule>>>,
    pub rate_limit: Option<RateLimit>,
}

/// Which Server (or default policy) a port is served by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServerRef {
    /// A default server, named after its policy (`all-unauthenticated`, ...).
    Default(String),
    /// A `policy.linkerd.io` Server, by name.
    Server(String),
}

/// The protocol a server's port speaks (§4.5).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum InboundProtocol {
    Detect { timeout: Duration },
    Http1,
    Http2,
    Grpc,
    Opaque,
    Tls,
}

/// What an authorization (or route) is: the wire metadata and `labels` come from it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AuthorizationRef {
    /// A default authorization, named after its policy (`all-unauthenticated`, `probe`).
    Default(String),
    ServerAuthorization(String),
    AuthorizationPolicy(String),
}

/// Which clients an authorization admits.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientAuthorization {
    /// Client networks; empty means the cluster networks (§4.8).
    pub networks: Vec<Network>,
    pub authentication: ClientAuthentication,
}

/// How clients must authenticate.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ClientAuthentication {
    /// Any client, TLS or not.
    Unauthenticated,
    /// Mesh TLS without a required identity.
    TlsUnauthenticated,
    /// Mesh TLS with one of these identities.
    TlsAuthenticated(Vec<IdentityMatch>),
}

/// A client identity match (§3.2).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IdentityMatch {
    Exact(String),
    /// `*.a.b` → `["a", "b"]`; `*` → `[]` (any identity).
    Suffix(Vec<String>),
}

/// A route attached to a server, with its own authorizations.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InboundRoute<R> {
    pub reference: RouteRef,
    /// Creation time; routes with one sort first, oldest first (§4.8).
    pub creation_timestamp: Option<Timestamp>,
    pub hostnames: Vec<HostMatch>,
    pub rules: Vec<R>,
    pub authorizations: BTreeMap<AuthorizationRef, ClientAuthorization>,
}

/// What a route is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteRef {
    /// A resource (`HTTPRoute`, `GRPCRoute`) of a group.
    Resource {
        group: String,
        kind: String,
        name: String,
    },
    /// A default route: `default` or `probe`.
    Default(String),
}

/// A local rate limit (§4.7).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// The HTTPLocalRateLimitPolicy's name.
    pub name: String,
    /// Requests per second for all clients together.
    pub total: Option<u32>,
    /// Requests per second per client identity.
    pub identity: Option<u32>,
    pub overrides: Vec<RateLimitOverride>,
}

/// A rate limit for some client identities.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RateLimitOverride {
    pub requests_per_second: u32,
    /// Exact identities of the ServiceAccounts named.
    pub identities: Vec<String>,
}
