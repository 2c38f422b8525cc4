//! Destination metrics, named as upstream's so dashboards keep working (spec/destination.md §F):
//! `endpoints_subscribers`, `endpoints_updates_total`, `endpoints_pods`, `endpoints_exists`,
//! `profile_subscribers`, `profile_updates_total`, `service_subscribers`,
//! `workload_subscribers`, `workload_updates_total`, `multicluster_unknown_cluster_members_total`,
//! and go-grpc-prometheus's
//! `grpc_server_started_total`, `grpc_server_msg_received_total`, `grpc_server_msg_sent_total`,
//! `grpc_server_handled_total` and `grpc_server_handling_seconds`.
//!
//! prometheus-client appends `_total` to counters when it encodes them, so counters are
//! registered without it.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use std::time::Instant;

/// Labels of the per-subscription series: the subscriber group of a `Get` (spec §C.4), with
/// `cluster` the linked cluster's name for a remote-discovery Service, else `local`, `port` the requested port, `hostname` the requested instance and
/// `nodename` the context token's `nodeName` (empty when absent).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointsLabels {
    pub cluster: String,
    pub namespace: String,
    pub service: String,
    pub port: String,
    pub hostname: String,
    pub nodename: String,
}

/// Labels of the service-profile series: the profile's namespace (the client's, when its
/// ServiceProfile applies) and name (`<svc>.<ns>.svc.<cluster domain>`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileLabels {
    pub namespace: String,
    pub profile: String,
}

/// Labels of `service_subscribers`: the Service whose opaque ports a GetProfile stream follows.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    pub namespace: String,
    pub name: String,
}

/// Labels of the gRPC series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcLabels {
    pub grpc_type: &'static str,
    pub grpc_service: &'static str,
    pub grpc_method: &'static str,
}

/// Labels of `grpc_server_handled_total`; `grpc_code` is spelled as Go's `codes.Code` prints
/// it (`OK`, `InvalidArgument`, `NotFound`, ...), as go-grpc-prometheus labels it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcCodeLabels {
    pub grpc_type: &'static str,
    pub grpc_service: &'static str,
    pub grpc_method: &'static str,
    pub grpc_code: &'static str,
}

/// Handles to the destination metrics; cheap to clone. The default is unregistered: it counts
/// but nothing exposes it.
#[derive(Clone, Debug)]
pub struct DestinationMetrics {
    pub(crate) subscribers: Family<EndpointsLabels, Gauge>,
    pub(crate) updates: Family<EndpointsLabels, Counter>,
    pub(crate) pods: Family<EndpointsLabels, Gauge>,
    pub(crate) exists: Family<EndpointsLabels, Gauge>,
    pub(crate) started: Family<GrpcLabels, Counter>,
    pub(crate) received: Family<GrpcLabels, Counter>,
    pub(crate) handled: Family<GrpcCodeLabels, Counter>,
    pub(crate) handling: Family<GrpcLabels, Histogram, fn() -> Histogram>,
    pub(crate) msg_sent: Family<GrpcLabels, Counter>,
    pub(crate) profile_subscribers: Family<ProfileLabels, Gauge>,
    pub(crate) profile_updates: Family<ProfileLabels, Counter>,
    pub(crate) service_subscribers: Family<ServiceLabels, Gauge>,
    pub(crate) workload_subscribers: Gauge,
    pub(crate) workload_updates: Counter,
    /// Members of federated or remote-discovery Services naming a cluster that is not linked.
    pub(crate) unknown_cluster_members: Counter,
}

pub(crate) const SERVICE: &str = "io.linkerd.proxy.destination.Destination";

/// Buckets of `grpc_server_handling_seconds`, as upstream's: streams last minutes to hours.
const HANDLING_BUCKETS: [f64; 4] = [0.1, 1.0, 300.0, 3600.0];

// === impl DestinationMetrics ===

impl Default for DestinationMetrics {
    fn default() -> Self {
        Self {
            subscribers: Family::default(),
            updates: Family::default(),
            pods: Family::default(),
            exists: Family::default(),
            started: Family::default(),
            received: Family::default(),
            handled: Family::default(),
            handling: Family::new_with_constructor(handling_histogram),
            msg_sent: Family::default(),
            profile_subscribers: Family::default(),
            profile_updates: Family::default(),
            service_subscribers: Family::default(),
            workload_subscribers: Gauge::default(),
            workload_updates: Counter::default(),
            unknown_cluster_members: Counter::default(),
        }
    }
}

fn handling_histogram() -> Histogram {
    Histogram::new(HANDLING_BUCKETS)
}

impl DestinationMetrics {
    /// Registers the metrics in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "multicluster_unknown_cluster_members",
            "Members of federated or remote-discovery Services naming a cluster that is not linked, as Get streams met them",
            m.unknown_cluster_members.clone(),
        );
        registry.register(
            "endpoints_subscribers",
            "Open Get streams per subscriber group",
            m.subscribers.clone(),
        );
        registry.register(
            "endpoints_updates",
            "Get updates sent per subscriber group",
            m.updates.clone(),
        );
        registry.register(
            "endpoints_pods",
            "Addresses in the subscriber group's filtered snapshot",
            m.pods.clone(),
        );
        registry.register(
            "endpoints_exists",
            "Whether the subscriber group's service exists (1) or not (0)",
            m.exists.clone(),
        );
        registry.register(
            "profile_subscribers",
            "Open GetProfile streams per service profile",
            m.profile_subscribers.clone(),
        );
        registry.register(
            "profile_updates",
            "GetProfile updates sent per service profile",
            m.profile_updates.clone(),
        );
        registry.register(
            "service_subscribers",
            "Open GetProfile streams following a Service's opaque ports",
            m.service_subscribers.clone(),
        );
        registry.register(
            "workload_subscribers",
            "Open GetProfile streams on a workload address (pod, host port, ExternalWorkload)",
            m.workload_subscribers.clone(),
        );
        registry.register(
            "workload_updates",
            "GetProfile updates sent on workload addresses",
            m.workload_updates.clone(),
        );
        registry.register(
            "grpc_server_started",
            "Total number of RPCs started on the server",
            m.started.clone(),
        );
        registry.register(
            "grpc_server_msg_received",
            "Total number of RPC stream messages received on the server",
            m.received.clone(),
        );
        registry.register(
            "grpc_server_handled",
            "Total number of RPCs completed on the server, regardless of success or failure",
            m.handled.clone(),
        );
        registry.register(
            "grpc_server_handling_seconds",
            "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server",
            m.handling.clone(),
        );
        registry.register(
            "grpc_server_msg_sent",
            "Total number of gRPC stream messages sent by the server",
            m.msg_sent.clone(),
        );
        m
    }

    pub(crate) fn grpc(method: &'static str) -> GrpcLabels {
        GrpcLabels {
            grpc_type: "server_stream",
            grpc_service: SERVICE,
            grpc_method: method,
        }
    }

    /// Counts an RPC of `method` started and its one request message received; returns when it
    /// started, for [`DestinationMetrics::handled`].
    pub(crate) fn started(&self, method: &'static str) -> Instant {
        let labels = Self::grpc(method);
        self.started.get_or_create(&labels).inc();
        self.received.get_or_create(&labels).inc();
        Instant::now()
    }

    /// Counts an RPC of `method` answered `code` before the method ran (its request did not
    /// decode or arrive whole: [`linkerd_runtime::grpc::StreamingMethod::refused`]) as started
    /// and handled, as go-grpc-prometheus counts a call whose handler could not receive its
    /// request; no message was received and no handling time is observed.
    pub(crate) fn refused(&self, method: &'static str, code: tonic::Code) {
        self.started.get_or_create(&Self::grpc(method)).inc();
        self.count_handled(method, code);
    }

    /// Counts an RPC of `method` that started at `started` as handled with `code`, and observes
    /// how long it took.
    pub(crate) fn handled(&self, method: &'static str, code: tonic::Code, started: Instant) {
        self.count_handled(method, code);
        self.handling
            .get_or_create(&Self::grpc(method))
            .observe(started.elapsed().as_secs_f64());
    }

    fn count_handled(&self, method: &'static str, code: tonic::Code) {
        self.handled
            .get_or_create(&GrpcCodeLabels {
                grpc_type: "server_stream",
                grpc_service: SERVICE,
                grpc_method: method,
                grpc_code: go_code_name(code),
            })
            .inc();
    }
}

/// `code` as Go's `codes.Code.String()` spells it, which go-grpc-prometheus uses as
/// `grpc_code`: tonic's names but for `OK` and `Canceled`.
fn go_code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// Keeps the `endpoints_*` series of one `Get` stream's group right for the life of the stream,
/// and counts the RPC as handled (`OK`) when the stream ends.
pub(crate) struct StreamGuard {
    pub(crate) metrics: DestinationMetrics,
    pub(crate) labels: EndpointsLabels,
    started: Instant,
    /// The group's series, looked up once: a lookup hashes and compares six label strings,
    /// which every stream paid four times per update (a tenth of the server's CPU with 10,000
    /// streams on one service).
    series: GroupSeries,
}

/// Handles on one subscriber group's series (clones share the value with the family's).
struct GroupSeries {
    msg_sent: Counter,
    updates: Counter,
    pods: Gauge,
    exists: Gauge,
}

// === impl StreamGuard ===

impl StreamGuard {
    /// A stream of the RPC that started at `started`, in the group named by `labels`.
    pub(crate) fn new(
        metrics: DestinationMetrics,
        labels: EndpointsLabels,
        started: Instant,
    ) -> Self {
        metrics.subscribers.get_or_create(&labels).inc();
        // Taken after the subscriber count is up, so the group's series outlive this guard.
        let series = GroupSeries {
            msg_sent: metrics
                .msg_sent
                .get_or_create(&DestinationMetrics::grpc("Get"))
                .clone(),
            updates: metrics.updates.get_or_create(&labels).clone(),
            pods: metrics.pods.get_or_create(&labels).clone(),
            exists: metrics.exists.get_or_create(&labels).clone(),
        };
        Self {
            metrics,
            labels,
            started,
            series,
        }
    }

    /// Counts `count` updates sent.
    pub(crate) fn sent(&self, count: u64) {
        self.series.msg_sent.inc_by(count);
        self.series.updates.inc_by(count);
    }

    /// Records what the stream holds now: `addresses` in its filtered snapshot, of a service
    /// that `exists` or not. Every stream of a group filters alike, so they agree.
    pub(crate) fn holds(&self, addresses: usize, exists: bool) {
        let addresses = i64::try_from(addresses).unwrap_or(i64::MAX);
        self.series.pods.set(addresses);
        self.series.exists.set(i64::from(exists));
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        // The family's read guard must be gone before `remove` takes its write lock.
        let before = self.metrics.subscribers.get_or_create(&self.labels).dec();
        // Series are deleted with the group's last subscriber, as upstream does.
        if before <= 1 {
            self.metrics.subscribers.remove(&self.labels);
            self.metrics.updates.remove(&self.labels);
            self.metrics.pods.remove(&self.labels);
            self.metrics.exists.remove(&self.labels);
        }
        self.metrics.handled("Get", tonic::Code::Ok, self.started);
    }
}

/// Keeps the GetProfile series right for the life of one stream and counts it as handled
/// (`OK`) when the stream ends.
pub(crate) struct ProfileGuard {
    metrics: DestinationMetrics,
    kind: ProfileKind,
    started: Instant,
}

/// What a GetProfile stream serves, and so which series it keeps.
enum ProfileKind {
    /// A service profile (`profile_*{namespace, profile}`), following the Service's opaque
    /// ports (`service_subscribers{namespace, name}`).
    Service(ProfileLabels, ServiceLabels),
    /// An endpoint profile (`workload_*`).
    Workload,
    /// The empty profile of a port the Service does not declare (only the gRPC series).
    UndeclaredPort,
}

// === impl ProfileGuard ===

impl ProfileGuard {
    /// A service-profile stream of the RPC that started at `started`.
    pub(crate) fn service(
        metrics: DestinationMetrics,
        profile: ProfileLabels,
        service: ServiceLabels,
        started: Instant,
    ) -> Self {
        metrics.profile_subscribers.get_or_create(&profile).inc();
        metrics.service_subscribers.get_or_create(&service).inc();
        Self {
            metrics,
            kind: ProfileKind::Service(profile, service),
            started,
        }
    }

    /// An endpoint-profile stream of the RPC that started at `started`.
    pub(crate) fn workload(metrics: DestinationMetrics, started: Instant) -> Self {
        metrics.workload_subscribers.inc();
        Self {
            metrics,
            kind: ProfileKind::Workload,
            started,
        }
    }

    /// The stream of an undeclared Service port, of the RPC that started at `started`.
    pub(crate) fn undeclared_port(metrics: DestinationMetrics, started: Instant) -> Self {
        Self {
            metrics,
            kind: ProfileKind::UndeclaredPort,
            started,
        }
    }

    /// Counts one message sent.
    pub(crate) fn sent(&self) {
        let m = &self.metrics;
        match &self.kind {
            ProfileKind::Service(profile, _) => {
                m.profile_updates.get_or_create(profile).inc();
            }
            ProfileKind::Workload => {
                m.workload_updates.inc();
            }
            ProfileKind::UndeclaredPort => {}
        }
        m.msg_sent
            .get_or_create(&DestinationMetrics::grpc("GetProfile"))
            .inc();
    }
}

impl Drop for ProfileGuard {
    fn drop(&mut self) {
        let m = &self.metrics;
        match &self.kind {
            ProfileKind::Service(profile, service) => {
                // Each read guard is gone before `remove` takes the write lock.
                let before = m.profile_subscribers.get_or_create(profile).dec();
                if before <= 1 {
                    m.profile_subscribers.remove(profile);
                    m.profile_updates.remove(profile);
                }
                let before = m.service_subscribers.get_or_create(service).dec();
                if before <= 1 {
                    m.service_subscribers.remove(service);
                }
            }
            ProfileKind::Workload => {
                m.workload_subscribers.dec();
            }
            ProfileKind::UndeclaredPort => {}
        }
        m.handled("GetProfile", tonic::Code::Ok, self.started);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_codes_are_spelled_as_go_prints_them() {
        assert_eq!(go_code_name(tonic::Code::Ok), "OK");
        assert_eq!(go_code_name(tonic::Code::Cancelled), "Canceled");
        assert_eq!(
            go_code_name(tonic::Code::InvalidArgument),
            "InvalidArgument"
        );
        assert_eq!(
            go_code_name(tonic::Code::FailedPrecondition),
            "FailedPrecondition"
        );
    }
}
