//! The tonic service implementing `io.linkerd.proxy.inbound.InboundServerPolicies`
//! (spec/policy.md §4.1, §4.9, §9).

use futures::{Stream, StreamExt};
use linkerd_index::inbound::{InboundIndex, InboundServer, WorkloadRef};
use linkerd_runtime::{
    grpc::{SmallBuffers, StreamingMethod},
    shutdown::Shutdown,
};
use linkerd2_proxy_api::inbound::{
    PortSpec, Server,
    inbound_server_policies_server::{InboundServerPolicies, InboundServerPoliciesServer},
};
use std::{pin::Pin, sync::Arc};
use tokio::sync::watch;
use tonic::{Request, Response, Status, codegen::BoxFuture};

use crate::{
    metrics::{GET_PORT, PolicyMetrics, Rpc, SubscriberGuard, WATCH_PORT},
    translate::InboundTranslator,
    views::DistinctViews,
    workload::{parse_port, parse_workload},
};

/// `InboundServerPolicies` over an [`InboundIndex`].
#[derive(Clone)]
pub struct InboundPolicyService {
    index: InboundIndex,
    translator: Arc<InboundTranslator>,
    metrics: PolicyMetrics,
    shutdown: Shutdown,
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// `InboundServerPolicies` as served (see [`InboundPolicyService::into_server`]).
pub type InboundGrpc =
    SmallBuffers<InboundServerPoliciesServer<InboundPolicyService>, WatchPortMethod>;

/// `InboundServerPolicies.WatchPort`, served on small buffers.
#[derive(Clone)]
pub struct WatchPortMethod(Arc<InboundPolicyService>);

impl StreamingMethod for WatchPortMethod {
    type Request = PortSpec;
    type Response = Server;
    type Stream = BoxStream<Server>;
    const PATH: &'static str = "/io.linkerd.proxy.inbound.InboundServerPolicies/WatchPort";

    fn call(&self, request: Request<PortSpec>) -> BoxFuture<Response<Self::Stream>, Status> {
        let service = self.0.clone();
        Box::pin(async move { service.watch_port(request).await })
    }
}

/// What one `WatchPort` stream holds between updates: the topic's receiver and the view it
/// last sent.
struct WatchState {
    views: DistinctViews<InboundServer>,
    translator: Arc<InboundTranslator>,
    rpc: Rpc,
    _subscriber: SubscriberGuard,
}

// === impl InboundPolicyService ===

impl InboundPolicyService {
    /// A service answering from `index`; every `WatchPort` stream ends with `OK` when
    /// `shutdown` fires.
    pub fn new(
        index: InboundIndex,
        translator: InboundTranslator,
        metrics: PolicyMetrics,
        shutdown: Shutdown,
    ) -> Self {
        Self {
            index,
            translator: Arc::new(translator),
            metrics,
            shutdown,
        }
    }

    /// The tonic service, ready to add to a `Server`: the generated server, with the
    /// `WatchPort` streams on small encode buffers ([`linkerd_runtime::grpc`]).
    pub fn into_server(self) -> InboundGrpc {
        let service = Arc::new(self);
        SmallBuffers::new(
            InboundServerPoliciesServer::from_arc(service.clone()),
            WatchPortMethod(service),
        )
    }

    /// The (workload, port) watch a request names.
    ///
    /// Errors: `InvalidArgument` "Invalid workload: …" / "Invalid port: N"; `NotFound`
    /// "unknown server" when the workload is not indexed (unknown, or an unmeshed pod).
    fn lookup(&self, spec: &PortSpec) -> Result<watch::Receiver<Arc<InboundServer>>, Status> {
        let workload: WorkloadRef =
            parse_workload(&spec.workload).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let port = parse_port(spec.port).map_err(|e| Status::invalid_argument(e.to_string()))?;
        tracing::debug!(?workload, port, "inbound lookup");
        self.index
            .inbound_server(workload, port)
            .map_err(|e| Status::not_found(e.to_string()))
    }
}

#[tonic::async_trait]
impl InboundServerPolicies for InboundPolicyService {
    type WatchPortStream = BoxStream<Server>;

    /// The current policy of a workload port (§4.9). Errors: see [`Self::lookup`].
    async fn get_port(&self, request: Request<PortSpec>) -> Result<Response<Server>, Status> {
        let rpc = self.metrics.start(GET_PORT);
        let rx = match self.lookup(request.get_ref()) {
            Ok(rx) => rx,
            Err(status) => return Err(rpc.fail(status)),
        };
        let server = self.translator.server(&rx.borrow());
        Ok(Response::new(server))
    }

    /// The current policy of a workload port, then every change to it (§4.9): a
    /// recomputation equal to what was last sent sends nothing, and a slow reader only ever
    /// gets the newest value. Ends with `OK` when the workload is deleted or at shutdown.
    /// Errors: see [`Self::lookup`].
    async fn watch_port(
        &self,
        request: Request<PortSpec>,
    ) -> Result<Response<Self::WatchPortStream>, Status> {
        let rpc = self.metrics.start(WATCH_PORT);
        let rx = match self.lookup(request.get_ref()) {
            Ok(rx) => rx,
            Err(status) => return Err(rpc.fail(status)),
        };
        let state = WatchState {
            views: DistinctViews::new(rx),
            translator: self.translator.clone(),
            rpc,
            _subscriber: self.metrics.inbound_subscriber(),
        };
        let updates = futures::stream::unfold(state, |mut state| async move {
            let server = state.next().await?;
            state.rpc.sent();
            Some((Ok(server), state))
        })
        .take_until(self.shutdown.clone().signaled());
        Ok(Response::new(Box::pin(updates)))
    }
}

// === impl WatchState ===

impl WatchState {
    /// The translation of the next view to send ([`DistinctViews::next`]); `None` once the
    /// topic is gone.
    async fn next(&mut self) -> Option<Server> {
        let view = self.views.next().await?;
        Some(self.translator.server(&view))
    }
}
