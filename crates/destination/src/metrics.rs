//! Destination metrics, named as upstream's so dashboards keep working (spec/destination.md §F):
//! `endpoints_subscribers`, `endpoints_updates`, `profile_subscribers`, `profile_updates`,
//! `workload_subscribers`, `workload_updates`, and go-grpc-prometheus's `grpc_server_*`.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

/// Labels of the per-subscription series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointsLabels {
    pub cluster: String,
    pub namespace: String,
    pub service: String,
    pub port: String,
    pub hostname: String,
}

/// Labels of the service-profile series: the profile's namespace (the client's, when its
/// ServiceProfile applies) and name (`<svc>.<ns>.svc.<cluster domain>`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileLabels {
    pub namespace: String,
    pub profile: String,
}

/// Labels of the gRPC series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcLabels {
    pub grpc_type: &'static str,
    pub grpc_service: &'static str,
    pub grpc_method: &'static str,
}

/// Labels of `grpc_server_handled_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcCodeLabels {
    pub grpc_type: &'static str,
    pub grpc_service: &'static str,
    pub grpc_method: &'static str,
    pub grpc_code: String,
}

/// Handles to the destination metrics; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct DestinationMetrics {
    pub(crate) subscribers: Family<EndpointsLabels, Gauge>,
    pub(crate) updates: Family<EndpointsLabels, Counter>,
    pub(crate) started: Family<GrpcLabels, Counter>,
    pub(crate) handled: Family<GrpcCodeLabels, Counter>,
    pub(crate) msg_sent: Family<GrpcLabels, Counter>,
    pub(crate) profile_subscribers: Family<ProfileLabels, Gauge>,
    pub(crate) profile_updates: Family<ProfileLabels, Counter>,
    pub(crate) workload_subscribers: Gauge,
    pub(crate) workload_updates: Counter,
}

pub(crate) const SERVICE: &str = "io.linkerd.proxy.destination.Destination";

impl DestinationMetrics {
    /// Registers the metrics in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "endpoints_subscribers",
            "Open Get streams per service port",
            m.subscribers.clone(),
        );
        registry.register(
            "endpoints_updates",
            "Get updates sent per service port",
            m.updates.clone(),
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
            "RPCs started on the server",
            m.started.clone(),
        );
        registry.register(
            "grpc_server_handled",
            "RPCs completed on the server, by status code",
            m.handled.clone(),
        );
        registry.register(
            "grpc_server_msg_sent",
            "Stream messages sent by the server",
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

    pub(crate) fn handled(&self, method: &'static str, code: tonic::Code) {
        self.handled
            .get_or_create(&GrpcCodeLabels {
                grpc_type: "server_stream",
                grpc_service: SERVICE,
                grpc_method: method,
                grpc_code: format!("{code:?}"),
            })
            .inc();
    }
}

/// Keeps `endpoints_subscribers` right for the life of one stream and counts it as handled
/// (`OK`) when the stream ends.
pub(crate) struct StreamGuard {
    pub(crate) metrics: DestinationMetrics,
    pub(crate) labels: EndpointsLabels,
}

impl StreamGuard {
    pub(crate) fn new(metrics: DestinationMetrics, labels: EndpointsLabels) -> Self {
        metrics.subscribers.get_or_create(&labels).inc();
        Self { metrics, labels }
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
        }
        self.metrics.handled("Get", tonic::Code::Ok);
    }
}

/// Keeps the GetProfile series right for the life of one stream and counts it as handled
/// (`OK`) when the stream ends.
pub(crate) enum ProfileGuard {
    /// A service profile (`profile_*{namespace, profile}`).
    Service(DestinationMetrics, ProfileLabels),
    /// An endpoint profile (`workload_*`).
    Workload(DestinationMetrics),
    /// The empty profile of a port the Service does not declare (only the gRPC series).
    UndeclaredPort(DestinationMetrics),
}

impl ProfileGuard {
    pub(crate) fn service(metrics: DestinationMetrics, labels: ProfileLabels) -> Self {
        metrics.profile_subscribers.get_or_create(&labels).inc();
        Self::Service(metrics, labels)
    }

    pub(crate) fn workload(metrics: DestinationMetrics) -> Self {
        metrics.workload_subscribers.inc();
        Self::Workload(metrics)
    }

    pub(crate) fn undeclared_port(metrics: DestinationMetrics) -> Self {
        Self::UndeclaredPort(metrics)
    }

    /// Counts one message sent.
    pub(crate) fn sent(&self) {
        let metrics = match self {
            Self::Service(m, labels) => {
                m.profile_updates.get_or_create(labels).inc();
                m
            }
            Self::Workload(m) => {
                m.workload_updates.inc();
                m
            }
            Self::UndeclaredPort(m) => m,
        };
        metrics
            .msg_sent
            .get_or_create(&DestinationMetrics::grpc("GetProfile"))
            .inc();
    }
}

impl Drop for ProfileGuard {
    fn drop(&mut self) {
        match self {
            Self::Service(m, labels) => {
                let before = m.profile_subscribers.get_or_create(labels).dec();
                if before <= 1 {
                    m.profile_subscribers.remove(labels);
                    m.profile_updates.remove(labels);
                }
                m.handled("GetProfile", tonic::Code::Ok);
            }
            Self::Workload(m) => {
                m.workload_subscribers.dec();
                m.handled("GetProfile", tonic::Code::Ok);
            }
            Self::UndeclaredPort(m) => m.handled("GetProfile", tonic::Code::Ok),
        }
    }
}
