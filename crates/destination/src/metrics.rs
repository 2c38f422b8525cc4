//! Destination metrics, named as upstream's so dashboards keep working (spec/destination.md §F):
//! `endpoints_subscribers`, `endpoints_updates`, and go-grpc-prometheus's `grpc_server_*`.

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
