//! gRPC server metrics with upstream's names and labels (spec/policy.md §8):
//! `grpc_server_started_total`, `grpc_server_msg_received_total`, `grpc_server_msg_sent_total`,
//! `grpc_server_handled_total{grpc_code}`, `grpc_server_handling_seconds`; plus
//! `inbound_port_subscribers`, the open `WatchPort` streams.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use std::{
    sync::{Arc, LazyLock},
    time::Instant,
};

/// The gRPC service name of inbound policy.
pub const INBOUND_SERVICE: &str = "io.linkerd.proxy.inbound.InboundServerPolicies";

/// Buckets of `grpc_server_handling_seconds`: streams last minutes to hours.
const HANDLING_BUCKETS: [f64; 4] = [0.1, 1.0, 300.0, 3600.0];

/// Labels of the per-method gRPC series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcLabels {
    pub grpc_service: &'static str,
    pub grpc_method: &'static str,
    /// `unary` or `server_stream`.
    pub grpc_type: &'static str,
}

/// Labels of `grpc_server_handled_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcCodeLabels {
    pub grpc_service: &'static str,
    pub grpc_method: &'static str,
    pub grpc_type: &'static str,
    /// `OK`, `INVALID_ARGUMENT`, `NOT_FOUND`, ...
    pub grpc_code: &'static str,
}

/// One RPC method of a service.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Method {
    pub service: &'static str,
    pub name: &'static str,
    pub streaming: bool,
}

/// `InboundServerPolicies.GetPort`.
pub const GET_PORT: Method = Method {
    service: INBOUND_SERVICE,
    name: "GetPort",
    streaming: false,
};

/// `InboundServerPolicies.WatchPort`.
pub const WATCH_PORT: Method = Method {
    service: INBOUND_SERVICE,
    name: "WatchPort",
    streaming: true,
};

/// The gRPC service name of outbound policy.
pub const OUTBOUND_SERVICE: &str = "io.linkerd.proxy.outbound.OutboundPolicies";

/// `OutboundPolicies.Get`.
pub const OUTBOUND_GET: Method = Method {
    service: OUTBOUND_SERVICE,
    name: "Get",
    streaming: false,
};

/// `OutboundPolicies.Watch`.
pub const OUTBOUND_WATCH: Method = Method {
    service: OUTBOUND_SERVICE,
    name: "Watch",
    streaming: true,
};

/// Handles to the policy controller's gRPC metrics; cheap to clone (one pointer, which every
/// open stream's [`Rpc`] holds).
#[derive(Clone, Debug)]
pub struct PolicyMetrics(Arc<Families>);

/// The metric families behind a [`PolicyMetrics`].
#[derive(Debug)]
pub struct Families {
    started: Family<GrpcLabels, Counter>,
    received: Family<GrpcLabels, Counter>,
    sent: Family<GrpcLabels, Counter>,
    handled: Family<GrpcCodeLabels, Counter>,
    handling: Family<GrpcLabels, Histogram, fn() -> Histogram>,
    inbound_subscribers: Gauge,
}

/// An RPC in progress: counts it as handled (`OK` unless [`Rpc::fail`] said otherwise) and
/// observes its duration when dropped, so a stream the client drops counts as `OK`; an
/// [`Rpc::inbound_subscriber`] is counted in `inbound_port_subscribers` until then. Every open
/// stream holds one: 32 bytes.
#[derive(Debug)]
pub struct Rpc {
    metrics: PolicyMetrics,
    /// One of the constants: a reference keeps each open stream's `Rpc` 32 bytes smaller.
    method: &'static Method,
    /// Nanoseconds from [`CLOCK_START`] (8 bytes, against an `Instant`'s 16).
    started: u64,
    code: tonic::Code,
    subscriber: bool,
}

/// What [`Rpc`] start times count from.
static CLOCK_START: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Nanoseconds from [`CLOCK_START`]: 584 years fit.
fn clock_nanos() -> u64 {
    u64::try_from(CLOCK_START.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

// === impl PolicyMetrics ===

impl std::ops::Deref for PolicyMetrics {
    type Target = Families;

    fn deref(&self) -> &Families {
        &self.0
    }
}

impl Default for PolicyMetrics {
    fn default() -> Self {
        Self(Arc::new(Families {
            started: Family::default(),
            received: Family::default(),
            sent: Family::default(),
            handled: Family::default(),
            handling: Family::new_with_constructor(handling_histogram),
            inbound_subscribers: Gauge::default(),
        }))
    }
}

fn handling_histogram() -> Histogram {
    Histogram::new(HANDLING_BUCKETS)
}

impl PolicyMetrics {
    /// Registers the metrics in `registry`, with the `OK` series of every inbound method
    /// created up front (as upstream does).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
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
            "grpc_server_msg_sent",
            "Total number of gRPC stream messages sent by the server",
            m.sent.clone(),
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
            "inbound_port_subscribers",
            "Open InboundServerPolicies.WatchPort streams",
            m.inbound_subscribers.clone(),
        );
        for method in [GET_PORT, WATCH_PORT] {
            let _ = m
                .handled
                .get_or_create(&code_labels(method, tonic::Code::Ok));
        }
        m
    }

    /// Counts a started RPC and its request message; the returned [`Rpc`] finishes it.
    pub fn start(&self, method: &'static Method) -> Rpc {
        let labels = labels(*method);
        self.started.get_or_create(&labels).inc();
        self.received.get_or_create(&labels).inc();
        Rpc {
            metrics: self.clone(),
            method,
            started: clock_nanos(),
            code: tonic::Code::Ok,
            subscriber: false,
        }
    }

    /// Counts an RPC of `method` answered `code` before the method ran (its request did not
    /// decode or arrive whole: [`linkerd_runtime::grpc::StreamingMethod::refused`]) as started
    /// and handled; no message was received and no handling time is observed.
    pub fn refused(&self, method: &'static Method, code: tonic::Code) {
        self.started.get_or_create(&labels(*method)).inc();
        self.count_handled(method, code);
    }

    /// `grpc_server_handled_total` of `method` with `code`, one more.
    fn count_handled(&self, method: &'static Method, code: tonic::Code) {
        self.handled
            .get_or_create(&code_labels(*method, code))
            .inc();
    }
}

fn labels(method: Method) -> GrpcLabels {
    GrpcLabels {
        grpc_service: method.service,
        grpc_method: method.name,
        grpc_type: grpc_type(method),
    }
}

fn code_labels(method: Method, code: tonic::Code) -> GrpcCodeLabels {
    GrpcCodeLabels {
        grpc_service: method.service,
        grpc_method: method.name,
        grpc_type: grpc_type(method),
        grpc_code: code_name(code),
    }
}

fn grpc_type(method: Method) -> &'static str {
    if method.streaming {
        "server_stream"
    } else {
        "unary"
    }
}

/// The canonical upper-case name of a status code.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

// === impl Rpc ===

impl Rpc {
    /// Counts one streamed message.
    pub fn sent(&self) {
        self.metrics.sent.get_or_create(&labels(*self.method)).inc();
    }

    /// The same RPC, a `WatchPort` stream counted in `inbound_port_subscribers` until it ends.
    pub fn inbound_subscriber(mut self) -> Self {
        if !self.subscriber {
            self.metrics.inbound_subscribers.inc();
            self.subscriber = true;
        }
        self
    }

    /// Ends the RPC with `status`, which is returned for convenience.
    pub fn fail(mut self, status: tonic::Status) -> tonic::Status {
        self.code = status.code();
        status
    }
}

impl Drop for Rpc {
    fn drop(&mut self) {
        let m = &self.metrics;
        m.count_handled(self.method, self.code);
        let elapsed = clock_nanos().saturating_sub(self.started);
        m.handling
            .get_or_create(&labels(*self.method))
            .observe(std::time::Duration::from_nanos(elapsed).as_secs_f64());
        if self.subscriber {
            m.inbound_subscribers.dec();
        }
    }
}
