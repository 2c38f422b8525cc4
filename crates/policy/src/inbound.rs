//! The tonic service implementing `io.linkerd.proxy.inbound.InboundServerPolicies`
//! (spec/policy.md §4.1, §4.9, §9).

use futures::{Stream, StreamExt};
use linkerd_index::inbound::{InboundIndex, InboundServer, WorkloadRef};
use linkerd_runtime::{
    grpc::{Shared, StreamingMethod, WatchStreams},
    introspect::{StreamMeta, StreamRegistry},
    shutdown::Shutdown,
};
use linkerd2_proxy_api::inbound::{
    PortSpec, Server,
    inbound_server_policies_server::{InboundServerPolicies, InboundServerPoliciesServer},
};
use std::{pin::Pin, sync::Arc};
use tonic::{Request, Response, Status, codegen::BoxFuture};

use crate::{
    metrics::{GET_PORT, PolicyMetrics, WATCH_PORT},
    translate::InboundTranslator,
    views::{DistinctViews, SharedTranslations, Translate, ViewMessages},
    workload::{parse_port, parse_workload},
};

/// The protobuf name of the inbound `Server`, as the introspection API names what a
/// `WatchPort` stream sent.
pub const SERVER_TYPE: &str = "io.linkerd.proxy.inbound.Server";

/// `InboundServerPolicies` over an [`InboundIndex`].
#[derive(Clone)]
pub struct InboundPolicyService {
    index: InboundIndex,
    translator: Arc<InboundTranslator>,
    /// The `WatchPort` messages, shared by the streams of a topic.
    translations: Arc<SharedTranslations<InboundServer, Server>>,
    metrics: PolicyMetrics,
    /// The open `WatchPort` streams, for the introspection API and the stream metrics.
    streams: StreamRegistry,
    shutdown: Shutdown,
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// `InboundServerPolicies` as served (see [`InboundPolicyService::into_server`]).
pub type InboundGrpc =
    WatchStreams<InboundServerPoliciesServer<InboundPolicyService>, WatchPortMethod>;

/// `InboundServerPolicies.WatchPort`, its messages shared ([`linkerd_runtime::grpc`]).
#[derive(Clone)]
pub struct WatchPortMethod(Arc<InboundPolicyService>);

impl StreamingMethod for WatchPortMethod {
    type Request = PortSpec;
    type Response = Server;
    type Stream = WatchPortStream;
    const PATH: &'static str = "/io.linkerd.proxy.inbound.InboundServerPolicies/WatchPort";

    fn call(&self, request: Request<PortSpec>) -> BoxFuture<Response<Self::Stream>, Status> {
        let messages = self
            .0
            .watch_port_messages(request)
            .map(|messages| Response::new(WatchPortStream(messages)));
        Box::pin(async move { messages })
    }

    fn refused(&self, code: tonic::Code) {
        self.0.metrics.refused(&WATCH_PORT, code);
    }
}

/// One `WatchPort` stream: the topic's receiver, the view it last sent, and its RPC (with its
/// place in `inbound_port_subscribers`).
type WatchPortMessages = ViewMessages<InboundServer, InboundTranslator>;

/// The messages of one `WatchPort` stream, as [`WatchPortMethod`] sends them: unboxed, so
/// that the response body holds the stream in its own allocation (one block fewer per stream,
/// of the tens of thousands a fleet holds open).
pub struct WatchPortStream(WatchPortMessages);

impl Stream for WatchPortStream {
    type Item = Result<Shared<Server>, Status>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        Pin::new(&mut self.0).poll_next(cx)
    }
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
            translations: Arc::new(SharedTranslations::new()),
            metrics,
            streams: StreamRegistry::new(),
            shutdown,
        }
    }

    /// The same service, recording its `WatchPort` streams in `streams` (the introspection
    /// API's registry; by default one nobody reads).
    pub fn with_streams(mut self, streams: StreamRegistry) -> Self {
        self.streams = streams;
        self
    }

    /// The tonic service, ready to add to a `Server`: the generated server, with the
    /// `WatchPort` streams sending shared messages ([`linkerd_runtime::grpc`]).
    pub fn into_server(self) -> InboundGrpc {
        let service = Arc::new(self);
        WatchStreams::new(
            InboundServerPoliciesServer::from_arc(service.clone())
                .max_decoding_message_size(linkerd_runtime::grpc::MAX_REQUEST_BYTES),
            WatchPortMethod(service),
        )
    }

    /// The (workload, port) watch a request names.
    ///
    /// Errors: `InvalidArgument` "Invalid workload: …" / "Invalid port: N"; `NotFound`
    /// "unknown server" when the workload is not indexed (unknown, or an unmeshed pod).
    fn lookup(
        &self,
        spec: &PortSpec,
    ) -> Result<linkerd_index::topic::Receiver<InboundServer>, Status> {
        let (workload, port) = parse_port_spec(spec)?;
        self.lookup_parsed(workload, port)
    }

    /// [`Self::lookup`] of a parsed `PortSpec`. Errors: `NotFound`, as there.
    fn lookup_parsed(
        &self,
        workload: WorkloadRef,
        port: u16,
    ) -> Result<linkerd_index::topic::Receiver<InboundServer>, Status> {
        tracing::debug!(?workload, port, "inbound lookup");
        self.index
            .inbound_server(workload, port)
            .map_err(|e| Status::not_found(e.to_string()))
    }

    /// The messages of a `WatchPort` stream (see [`InboundServerPolicies::watch_port`]), each
    /// shared with the other streams of its topic. Errors: see [`Self::lookup`].
    fn watch_port_messages(&self, request: Request<PortSpec>) -> Result<WatchPortMessages, Status> {
        let rpc = self.metrics.start(&WATCH_PORT);
        let (workload, port) = match parse_port_spec(request.get_ref()) {
            Ok(parsed) => parsed,
            Err(status) => return Err(rpc.fail(status)),
        };
        let (target, pod) = watch_port_target(&workload, port);
        let rx = match self.lookup_parsed(workload, port) {
            Ok(rx) => rx,
            Err(status) => return Err(rpc.fail(status)),
        };
        let meta = StreamMeta {
            api: "WatchPort",
            peer: request.remote_addr(),
            client_identity: None,
            target,
            pod,
            // `PortSpec` has no token: its workload, in `target`, is the proxy's own.
            context_token: String::new(),
        };
        Ok(ViewMessages::new(
            DistinctViews::new(rx).recorded(&self.streams, meta, self.translator.clone()),
            self.translator.clone(),
            self.translations.clone(),
            rpc.inbound_subscriber(),
            self.shutdown.clone(),
        ))
    }
}

/// The workload and port a `PortSpec` names. Errors: `InvalidArgument` "Invalid workload: …"
/// / "Invalid port: N".
fn parse_port_spec(spec: &PortSpec) -> Result<(WorkloadRef, u16), Status> {
    let workload =
        parse_workload(&spec.workload).map_err(|e| Status::invalid_argument(e.to_string()))?;
    let port = parse_port(spec.port).map_err(|e| Status::invalid_argument(e.to_string()))?;
    Ok((workload, port))
}

/// What the introspection API shows a `WatchPort` stream watching, and its client pod:
/// `namespace/pod port N` and `namespace/pod` (`externalworkload namespace/name port N` for
/// an ExternalWorkload). The pod leads the target, so the stream's entry keeps its bytes once
/// (`linkerd_runtime::introspect`); the proxy's workload JSON said the same in 40 bytes more.
fn watch_port_target(workload: &WorkloadRef, port: u16) -> (String, Option<String>) {
    let (kind, namespace, name) = match workload {
        WorkloadRef::Pod { namespace, name } => ("", namespace, name),
        WorkloadRef::ExternalWorkload { namespace, name } => ("externalworkload ", namespace, name),
    };
    let pod = format!("{namespace}/{name}");
    (format!("{kind}{pod} port {port}"), Some(pod))
}

#[tonic::async_trait]
impl InboundServerPolicies for InboundPolicyService {
    type WatchPortStream = BoxStream<Server>;

    /// The current policy of a workload port (§4.9). Errors: see `lookup`.
    async fn get_port(&self, request: Request<PortSpec>) -> Result<Response<Server>, Status> {
        let rpc = self.metrics.start(&GET_PORT);
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
    /// Errors: see `lookup`.
    ///
    /// Served through [`WatchPortMethod`]; this is the same stream with each message copied
    /// out.
    async fn watch_port(
        &self,
        request: Request<PortSpec>,
    ) -> Result<Response<Self::WatchPortStream>, Status> {
        let messages = self.watch_port_messages(request)?;
        Ok(Response::new(Box::pin(
            messages.map(|message| message.map(Shared::into_inner)),
        )))
    }
}

impl Translate<InboundServer> for InboundTranslator {
    type Message = Server;
    const TYPE_NAME: &'static str = SERVER_TYPE;
    fn translate(&self, view: &InboundServer) -> Server {
        self.server(view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use linkerd_index::inbound::{InboundProtocol, ServerRef};

    fn server(name: &str, protocol: InboundProtocol) -> Arc<InboundServer> {
        Arc::new(InboundServer {
            reference: ServerRef::Server(name.into()),
            protocol,
            authorizations: Arc::default(),
            http_routes: Arc::default(),
            grpc_routes: Arc::default(),
            rate_limit: None,
        })
    }

    /// Each open `WatchPort` stream holds one of these, in its response body with 8 bytes
    /// more: at 144 bytes the body takes glibc's 160-byte chunks. Written with `unfold` and
    /// `take_until` over async functions it was 408 bytes; 184 with the metrics method by
    /// value and the handed view held twice; 152 (in 176-byte chunks) with a subscriber guard
    /// beside the RPC and its start as an `Instant`.
    #[test]
    fn a_watch_port_stream_is_small() {
        let size = std::mem::size_of::<WatchPortMessages>();
        assert!(size <= 144, "{size} bytes");
    }

    #[test]
    fn the_streams_of_a_topic_translate_each_change_once() {
        const STREAMS: usize = 5;
        let tx = linkerd_index::topic::Topic::new(server("web-http", InboundProtocol::Http1));
        let rx = tx.subscribe();
        let translations = Arc::new(SharedTranslations::new());
        let metrics = PolicyMetrics::default();
        let (_trigger, shutdown) = linkerd_runtime::shutdown::channel();
        let mut streams: Vec<WatchPortMessages> = (0..STREAMS)
            .map(|_| {
                ViewMessages::new(
                    DistinctViews::new(rx.clone()),
                    Arc::new(InboundTranslator::new(vec![])),
                    translations.clone(),
                    metrics.start(&WATCH_PORT).inbound_subscriber(),
                    shutdown.clone(),
                )
            })
            .collect();
        let next = |streams: &mut Vec<WatchPortMessages>| -> Vec<Shared<Server>> {
            streams
                .iter_mut()
                .map(|s| {
                    s.next_message()
                        .now_or_never()
                        .flatten()
                        .expect("a message")
                })
                .collect()
        };

        let first = next(&mut streams);
        assert_eq!(translations.translated(), 1);
        assert_eq!(first[0].get().labels["name"], "web-http");
        assert!(tx.send(server("web-grpc", InboundProtocol::Grpc)));
        let changed = next(&mut streams);
        assert_eq!(translations.translated(), 2);
        for message in &changed {
            assert!(std::ptr::eq(message.get(), changed[0].get()), "one message");
            assert_eq!(message.get().labels["name"], "web-grpc");
        }
    }
}
