//! What the policy controller serves for one outbound target (spec/policy.md §5.5–§5.7), in
//! protocol-agnostic form: the policy binary turns an [`OutboundPolicy`] into the proxy API's
//! `outbound.OutboundPolicy`.

use k8s_openapi::jiff::Timestamp;
use std::{net::SocketAddr, ops::RangeInclusive, time::Duration};

use crate::routes::{Filter, GrpcRouteMatch, HostMatch, HttpRouteMatch};

/// The protocol-detection timeout of `Detect` policies (§5.5).
pub const DETECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The policy of one outbound target.
#[derive(Clone, Debug, PartialEq)]
pub enum OutboundPolicy {
    /// A port of a Service (§5.5).
    Service(ServicePolicy),
    /// A Service cluster IP with a port the Service does not declare: traffic is refused
    /// (§5.6 "Undefined port").
    UndefinedPort {
        namespace: String,
        name: String,
        port: u16,
    },
    /// An address outside the cluster networks that no Service claims: forwarded as is
    /// (§5.6 "External fallback").
    Fallback { original_dst: SocketAddr },
    /// An address in an EgressNetwork (§5.2, §5.6).
    Egress(EgressPolicy),
}

/// The policy of one address in an EgressNetwork, for clients of one namespace.
///
/// Route lists hold the resource routes only: the encoder appends the egress default routes
/// (§5.5: HTTP and gRPC always, opaque when no TCP route) named after `traffic_policy`, with
/// `default_timeouts` and `default_retry`.
#[derive(Clone, Debug, PartialEq)]
pub struct EgressPolicy {
    pub namespace: String,
    pub name: String,
    /// The address the client asked about: what the default backend forwards to.
    pub original_dst: SocketAddr,
    pub traffic_policy: TrafficPolicy,
    pub protocol: OutboundProtocol,
    /// From the EgressNetwork's annotations (§5.7).
    pub failure_accrual: Option<FailureAccrual>,
    /// The EgressNetwork's timeout annotations: those of the egress default routes.
    pub default_timeouts: RouteTimeouts,
    /// The EgressNetwork's retry annotations: the retry of the egress default routes.
    pub default_retry: Option<RouteRetry>,
}

pub use crate::model::TrafficPolicy;

/// The policy of one Service port for clients of one namespace.
#[derive(Clone, Debug, PartialEq)]
pub struct ServicePolicy {
    pub namespace: String,
    pub name: String,
    pub port: u16,
    /// `<name>.<namespace>.svc.<cluster-domain>:<port>`: the `Destination.Get` path of the
    /// default backend.
    pub authority: String,
    pub protocol: OutboundProtocol,
    /// From the Service's annotations (§5.7); carried by HTTP and gRPC protocols.
    pub failure_accrual: Option<FailureAccrual>,
    /// The balancer load estimator of the default backend (non-opaque ports) and of Service
    /// backends of HTTP and gRPC routes (§5.7).
    pub load: LoadEstimator,
}

/// The protocol of a Service port and the routes it carries (§5.5). Route lists are sorted
/// and already hold the default route where one applies.
#[derive(Clone, Debug, PartialEq)]
pub enum OutboundProtocol {
    /// No appProtocol and no gRPC routes: detect HTTP, with these routes for HTTP/1 and HTTP/2,
    /// or forward opaquely.
    Detect {
        timeout: Duration,
        http_routes: Vec<OutboundRoute<HttpRouteMatch>>,
    },
    Http1(Vec<OutboundRoute<HttpRouteMatch>>),
    Http2(Vec<OutboundRoute<HttpRouteMatch>>),
    Grpc(Vec<OutboundRoute<GrpcRouteMatch>>),
    /// Opaque or unknown appProtocol, or an opaque port: the default opaque route.
    Opaque,
    /// No appProtocol, no gRPC or HTTP routes, and TLS routes (§5.5): routed by SNI. Sorted.
    Tls(Vec<OutboundRoute<NoMatch>>),
    /// Opaque traffic carried by the first TCP route (§5.5, §12: only the first by creation
    /// time then name): an opaque or unknown appProtocol (or an opaque port) with TCP routes, or
    /// no appProtocol and only TCP routes.
    OpaqueRoute(Box<OutboundRoute<NoMatch>>),
}

/// The matches of a TLS or TCP rule: there are none. A TLS route matches by its `hostnames`
/// (SNIs); a TCP route matches all traffic of its parent port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoMatch;

/// What a route is: the wire metadata comes from it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OutboundRouteRef {
    /// A default route: `http` for a Service port without routes.
    Default(String),
    /// A route resource.
    Resource {
        group: String,
        kind: String,
        namespace: String,
        name: String,
    },
}

/// A route attached to a Service port.
#[derive(Clone, Debug, PartialEq)]
pub struct OutboundRoute<M> {
    pub reference: OutboundRouteRef,
    /// Creation time; routes with one sort first, oldest first.
    pub creation_timestamp: Option<Timestamp>,
    pub hostnames: Vec<HostMatch>,
    pub rules: Vec<OutboundRule<M>>,
}

/// One rule of an outbound route.
#[derive(Clone, Debug, PartialEq)]
pub struct OutboundRule<M> {
    /// Empty matches nothing on the wire; routes get at least one from conversion.
    pub matches: Vec<M>,
    pub filters: Vec<Filter>,
    /// Empty: the parent itself (the default backend, FirstAvailable); else weighted.
    pub backends: Vec<Backend>,
    pub timeouts: RouteTimeouts,
    pub retry: Option<RouteRetry>,
}

/// A backend of a rule (§5.4). TLS and TCP rules carry no backend filters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    Service {
        weight: u32,
        namespace: String,
        name: String,
        port: u16,
        /// `<name>.<namespace>.svc.<cluster-domain>:<port>`.
        authority: String,
        filters: Vec<Filter>,
        /// Whether the Service is indexed now; a missing one fails its requests.
        exists: bool,
    },
    /// A backend that cannot be served; its share of requests fails with `message`.
    Invalid { weight: u32, message: String },
    /// An EgressNetwork backend under an EgressNetwork parent that cannot forward: another
    /// EgressNetwork than the parent, or one that does not exist. Its share of requests fails
    /// with `message`, and proxies see the EgressNetwork it names, as they see a missing
    /// Service backend (§5.6). `port` is the backend's, or the original destination's.
    InvalidEgressNetwork {
        weight: u32,
        namespace: String,
        name: String,
        port: u16,
        message: String,
    },
    /// An EgressNetwork backend under that same EgressNetwork as parent: its share of requests
    /// goes to the client's original destination `addr` (§5.6). `port` is the backend's, or
    /// the original destination's when the backend names none.
    Forward {
        weight: u32,
        namespace: String,
        name: String,
        port: u16,
        addr: SocketAddr,
    },
}

/// Route timeouts; `None` is no timeout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteTimeouts {
    pub request: Option<Duration>,
    pub response: Option<Duration>,
    pub idle: Option<Duration>,
}

/// Retries of a route (§5.4). The HTTP conditions apply to HTTP routes, the gRPC ones to gRPC
/// routes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteRetry {
    /// Retries per request, at least 1.
    pub limit: u16,
    /// Per-try timeout.
    pub timeout: Option<Duration>,
    /// Inclusive status ranges to retry.
    pub http: Option<Vec<RangeInclusive<u16>>>,
    pub grpc: Option<GrpcRetryConditions>,
}

/// gRPC statuses to retry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GrpcRetryConditions {
    pub cancelled: bool,
    pub deadline_exceeded: bool,
    pub internal: bool,
    pub resource_exhausted: bool,
    pub unavailable: bool,
}

/// Failure accrual of a Service's balancers (§5.7).
#[derive(Clone, Debug, PartialEq)]
pub enum FailureAccrual {
    Consecutive {
        max_failures: u32,
        backoff: Backoff,
    },
    Unified {
        max_consecutive_failures: u32,
        /// Within 0..=1.
        success_rate_threshold: f64,
        /// The success-rate window (the EWMA decay).
        window: Duration,
        min_requests: u32,
        backoff: Backoff,
    },
}

/// The penalty backoff of an endpoint that accrued failures.
#[derive(Clone, Debug, PartialEq)]
pub struct Backoff {
    pub min: Duration,
    pub max: Duration,
    /// Within 0..=100.
    pub jitter: f32,
    pub respect_retry_after: bool,
}

/// A balancer's load estimator (§5.6, §5.7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadEstimator {
    /// PeakEWMA, default RTT 30 ms, decay 10 s.
    PeakEwma,
    /// PeakEWMA penalizing failed endpoints (penalty decay 10 s).
    PenaltyPeakEwma {
        penalty: Duration,
        max_retry_after: Duration,
    },
}
