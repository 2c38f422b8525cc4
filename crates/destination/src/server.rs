//! The tonic service implementing `io.linkerd.proxy.destination.Destination`.

use futures::{Stream, StreamExt};
use linkerd_index::EndpointsView;
use linkerd_index::{ClusterStore, DiscoveryIndex, EndpointsKey, ObjectRef};
use linkerd_runtime::{
    grpc::{Http2Settings, Shared, StreamingMethod, WatchStreams},
    introspect::{StreamMeta, StreamRecord, StreamRegistry},
    shutdown::Shutdown,
};
use linkerd2_proxy_api::destination::{
    DestinationProfile, GetDestination, Update,
    destination_server::{Destination, DestinationServer},
};
use std::{collections::VecDeque, net::SocketAddr, pin::Pin, sync::Arc, time::Instant};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status, codegen::BoxFuture};

use crate::{
    authority::parse_service_name,
    endpoints::{EndpointsStream, SharedDeltas, StreamFilter},
    metrics::{DestinationMetrics, EndpointsLabels, StreamGuard},
    multicluster::{Dispatch, MulticlusterStream, Request as MulticlusterRequest},
    token::ContextToken,
    translate::EndpointTranslator,
};

/// The Destination service over a [`DiscoveryIndex`].
#[derive(Clone)]
pub struct DestinationService {
    pub(crate) index: DiscoveryIndex,
    /// The linked clusters (multicluster remote discovery and federated Services).
    pub(crate) clusters: ClusterStore,
    pub(crate) translator: Arc<EndpointTranslator>,
    /// The `Get` deltas, shared by streams that make the same transition.
    deltas: Arc<SharedDeltas>,
    pub(crate) cluster_domain: String,
    enable_ipv6: bool,
    pub(crate) metrics: DestinationMetrics,
    /// The open streams, for the introspection API and the stream metrics.
    pub(crate) streams: StreamRegistry,
    pub(crate) shutdown: Shutdown,
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

impl DestinationService {
    /// A service answering from `index`; every stream ends with `OK` when `shutdown` fires.
    pub fn new(
        index: DiscoveryIndex,
        translator: EndpointTranslator,
        cluster_domain: String,
        enable_ipv6: bool,
        metrics: DestinationMetrics,
        shutdown: Shutdown,
    ) -> Self {
        Self {
            index,
            clusters: ClusterStore::empty(),
            translator: Arc::new(translator),
            deltas: Arc::default(),
            cluster_domain,
            enable_ipv6,
            metrics,
            streams: StreamRegistry::new(),
            shutdown,
        }
    }

    /// The same service, recording its `Get` and `GetProfile` streams in `streams` (the
    /// introspection API's registry; by default one nobody reads).
    pub fn with_streams(mut self, streams: StreamRegistry) -> Self {
        self.streams = streams;
        self
    }

    /// The registry of this service's open streams.
    pub fn streams(&self) -> &StreamRegistry {
        &self.streams
    }

    /// The same service, with remote-discovery and federated Services served from the linked
    /// clusters of `clusters` (none by default).
    pub fn with_clusters(mut self, clusters: ClusterStore) -> Self {
        self.clusters = clusters;
        self
    }

    /// The tonic service, ready to add to a `Server`: the generated server, with the `Get`
    /// and `GetProfile` streams served by [`WatchStreams`] ([`linkerd_runtime::grpc`]).
    pub fn into_server(self) -> DestinationGrpc {
        let service = Arc::new(self);
        let generated = DestinationServer::from_arc(service.clone())
            .max_decoding_message_size(linkerd_runtime::grpc::MAX_REQUEST_BYTES);
        WatchStreams::new(
            WatchStreams::new(generated, GetMethod(service.clone())),
            GetProfileMethod(service),
        )
    }

    /// Streams the endpoints of a service port (spec/destination.md §C and decision 1), as
    /// messages shared with the other streams that receive the same update.
    ///
    /// Remote-discovery and federated Services are served from the linked clusters
    /// ([`crate::multicluster`]).
    ///
    /// Errors: `InvalidArgument` for a malformed path, an IP host, a name outside the cluster
    /// domain, or an ExternalName service (local, or the remote one a mirror stands for);
    /// `FailedPrecondition` for a Service with the
    /// remote-discovery label and no remote-service label; `NotFound` for a remote-discovery
    /// Service whose cluster is not linked now. An unknown service is not an error: the stream
    /// starts with `NoEndpoints{exists: false}` and stays open; it ends (`OK`) if the Service
    /// appears as, or becomes, a remote-discovery or federated one, so that the client asks
    /// again.
    pub fn get_updates(
        &self,
        request: Request<GetDestination>,
    ) -> Result<BoxStream<Shared<Update>>, Status> {
        let started = self.metrics.started("Get");
        let peer = request.remote_addr();
        let request = request.into_inner();
        let name = match parse_service_name(&request.path, &self.cluster_domain) {
            Ok(name) => name,
            Err(error) => {
                self.metrics
                    .handled("Get", tonic::Code::InvalidArgument, started);
                return Err(Status::invalid_argument(error.to_string()));
            }
        };
        let token = ContextToken::parse(&request.context_token);
        tracing::debug!(path = %request.path, ?token, "Get");
        let (request_path, request_token) = (request.path, request.context_token);
        let client_pod = token.pod_ref();

        let rx = self.index.endpoints(EndpointsKey {
            service: ObjectRef {
                namespace: name.namespace.clone(),
                name: name.service.clone(),
            },
            port: name.port,
            hostname: name.instance.clone(),
        });
        let dispatch = rx
            .borrow()
            .service
            .as_deref()
            .map_or(Dispatch::Local, Dispatch::of);
        let multicluster = match &dispatch {
            Dispatch::Local => false,
            Dispatch::RemoteWithoutService { cluster } => {
                self.metrics
                    .handled("Get", tonic::Code::FailedPrecondition, started);
                return Err(Status::failed_precondition(format!(
                    "service {}/{} has label {} ({cluster}) but no label {}",
                    name.namespace,
                    name.service,
                    crate::multicluster::REMOTE_DISCOVERY_LABEL,
                    crate::multicluster::REMOTE_SERVICE_LABEL,
                )));
            }
            Dispatch::Remote { cluster, service } => {
                let Some(linked) = self.clusters.get(cluster) else {
                    self.metrics.handled("Get", tonic::Code::NotFound, started);
                    return Err(Status::not_found(format!(
                        "Remote cluster not found: {cluster}"
                    )));
                };
                let remote = linked.index.service(&name.namespace, service);
                if remote.is_some_and(|s| s.external_name) {
                    self.metrics
                        .handled("Get", tonic::Code::InvalidArgument, started);
                    return Err(Status::invalid_argument(format!(
                        "service {}/{service} in cluster {cluster} is of type ExternalName and has no endpoints to resolve",
                        name.namespace
                    )));
                }
                true
            }
            Dispatch::Federated(_) => true,
        };
        if dispatch == Dispatch::Local
            && rx
                .borrow()
                .service
                .as_ref()
                .is_some_and(|s| s.external_name)
        {
            self.metrics
                .handled("Get", tonic::Code::InvalidArgument, started);
            return Err(Status::invalid_argument(format!(
                "service {}/{} is of type ExternalName and has no endpoints to resolve",
                name.namespace, name.service
            )));
        }

        let client_zone = token
            .node_name
            .as_deref()
            .and_then(|n| self.index.node_zone(n));
        let filter = StreamFilter {
            node_name: token.node_name.clone(),
            client_zone,
            enable_ipv6: self.enable_ipv6,
        };
        let request = multicluster.then(|| MulticlusterRequest {
            namespace: name.namespace.clone(),
            service: name.service.clone(),
            port: name.port,
            hostname: name.instance.clone(),
            filter: filter.clone(),
        });
        let labels = EndpointsLabels {
            cluster: match &dispatch {
                Dispatch::Remote { cluster, .. } => cluster.clone(),
                _ => linkerd_index::metrics::LOCAL_CLUSTER.into(),
            },
            namespace: name.namespace,
            service: name.service,
            port: name.port.to_string(),
            hostname: name.instance.unwrap_or_default(),
            nodename: token.node_name.unwrap_or_default(),
        };
        let guard = StreamGuard::new(self.metrics.clone(), labels, started);
        let meta = StreamMeta {
            api: "Get",
            peer,
            client_identity: None,
            target: request_path,
            pod: client_pod,
            context_token: request_token,
        };
        if let Some(request) = request {
            let stream = MulticlusterStream::new(
                rx,
                &self.clusters,
                self.index.clone(),
                self.translator.clone(),
                request,
                self.metrics.unknown_cluster_members.clone(),
            );
            let record = self.streams.open_following_several(meta, stream.behind());
            let state = MulticlusterState {
                stream,
                guard,
                record,
                pending: VecDeque::new(),
                seen: None,
            };
            let updates = futures::stream::unfold(state, |mut state| async move {
                let update = state.next().await?;
                Some((Ok(update), state))
            })
            .take_until(self.shutdown.clone().signaled());
            return Ok(Box::pin(updates));
        }
        let record = self.streams.open_following(meta, rx.current_view());
        let stream = EndpointsStream::new(rx, filter, self.translator.clone(), self.deltas.clone());
        let state = GetState {
            stream,
            guard,
            record,
            pending: VecDeque::new(),
            seen: None,
        };
        let updates = futures::stream::unfold(state, |mut state| async move {
            let update = state.next().await?;
            Some((Ok(update), state))
        })
        .take_until(self.shutdown.clone().signaled());
        Ok(Box::pin(updates))
    }
}

/// One local `Get` stream as served: the updates of its last view not yet handed to HTTP/2,
/// and its introspection record, told once they all are.
struct GetState {
    stream: EndpointsStream,
    guard: StreamGuard,
    record: StreamRecord<EndpointsView>,
    pending: VecDeque<Shared<Update>>,
    /// When the index saw the change behind `pending` (`None`: not a change).
    seen: Option<Instant>,
}

impl GetState {
    /// The next update to send; `None` once the topic is gone. Each is asked for only after
    /// HTTP/2 took the one before ([`WatchStreams`]), so the last of a view's updates being
    /// taken means the client was sent everything up to that view.
    async fn next(&mut self) -> Option<Shared<Update>> {
        loop {
            if let Some(update) = self.pending.pop_front() {
                if self.pending.is_empty()
                    && let Some(view) = self.stream.last_view()
                {
                    self.record.caught_up(view, true, self.seen);
                }
                return Some(update);
            }
            let first = self.stream.last_view().is_none();
            let updates = self.stream.next_updates().await?;
            // A Service that turns out to be served from linked clusters (created after the
            // stream opened, or labelled since) ends its local stream, as a multicluster
            // stream ends when its Service is no longer one (spec §C.8.2): the client asks
            // again and is served as a fresh request would be.
            if let Some(service) = self.stream.last_view().and_then(|v| v.service.as_deref())
                && Dispatch::is_multicluster(service)
            {
                tracing::debug!(
                    service = %format_args!("{}/{}", service.namespace, service.name),
                    "ending a local Get stream: its Service is now served from linked clusters"
                );
                return None;
            }
            self.guard.sent(updates.len() as u64);
            self.guard.holds(self.stream.held(), self.stream.exists());
            let Some(view) = self.stream.last_view() else {
                continue;
            };
            if updates.is_empty() {
                // A change that does not concern this client: nothing to send for it.
                self.record.caught_up(view, false, None);
                continue;
            }
            // A stream's first message answers its request, not a change.
            self.seen = (!first)
                .then(|| linkerd_index::change_seen_at(view))
                .flatten();
            self.record
                .sent(updates.len() as u64, self.stream.holding());
            self.pending.extend(updates);
        }
    }
}

/// One multicluster `Get` stream as served, as [`GetState`]: the updates of its last change
/// not yet handed to HTTP/2, when the index saw that change, and its introspection record,
/// which asks the stream whether it is behind ([`MulticlusterStream::behind`]).
struct MulticlusterState {
    stream: MulticlusterStream,
    guard: StreamGuard,
    record: StreamRecord,
    pending: VecDeque<Shared<Update>>,
    /// When the index saw the change behind `pending` (`None`: not one it stamped).
    seen: Option<Instant>,
}

impl MulticlusterState {
    /// The next update to send; `None` once the stream ends. The last of a change's updates
    /// taken by HTTP/2 is when the change converged and the client holds what it made, as for
    /// a local stream.
    async fn next(&mut self) -> Option<Shared<Update>> {
        while self.pending.is_empty() {
            let updates = self.stream.next_updates().await?;
            self.guard.sent(updates.len() as u64);
            self.guard.holds(self.stream.held(), self.stream.exists());
            self.record
                .sent(updates.len() as u64, self.stream.holding());
            self.seen = self.stream.change_seen();
            self.pending.extend(updates.into_iter().map(Shared::new));
        }
        let update = self.pending.pop_front()?;
        if self.pending.is_empty() {
            self.stream.handed();
            if let Some(seen) = self.seen.take() {
                self.record.observe(seen);
            }
        }
        Some(update)
    }
}

/// The Destination service as served (see [`DestinationService::into_server`]).
pub type DestinationGrpc =
    WatchStreams<WatchStreams<DestinationServer<DestinationService>, GetMethod>, GetProfileMethod>;

/// `Destination.Get`, its updates shared and sent without copies ([`linkerd_runtime::grpc`]).
#[derive(Clone)]
pub struct GetMethod(Arc<DestinationService>);

impl StreamingMethod for GetMethod {
    type Request = GetDestination;
    type Response = Update;
    type Stream = BoxStream<Shared<Update>>;
    const PATH: &'static str = "/io.linkerd.proxy.destination.Destination/Get";

    fn call(&self, request: Request<GetDestination>) -> BoxFuture<Response<Self::Stream>, Status> {
        let response = self.0.get_updates(request).map(Response::new);
        Box::pin(async move { response })
    }

    fn refused(&self, code: tonic::Code) {
        self.0.metrics.refused("Get", code);
    }
}

/// `Destination.GetProfile`, each profile encoded once and sent without copies
/// ([`linkerd_runtime::grpc`]).
#[derive(Clone)]
pub struct GetProfileMethod(Arc<DestinationService>);

impl StreamingMethod for GetProfileMethod {
    type Request = GetDestination;
    type Response = DestinationProfile;
    type Stream = BoxStream<Shared<DestinationProfile>>;
    const PATH: &'static str = "/io.linkerd.proxy.destination.Destination/GetProfile";

    fn call(&self, request: Request<GetDestination>) -> BoxFuture<Response<Self::Stream>, Status> {
        let service = self.0.clone();
        Box::pin(async move {
            let profiles = service.get_profile(request).await?.into_inner();
            let stream: Self::Stream = Box::pin(profiles.map(|profile| profile.map(Shared::new)));
            Ok(Response::new(stream))
        })
    }

    fn refused(&self, code: tonic::Code) {
        self.0.metrics.refused("GetProfile", code);
    }
}

#[tonic::async_trait]
impl Destination for DestinationService {
    type GetStream = BoxStream<Update>;
    type GetProfileStream = BoxStream<DestinationProfile>;

    /// See [`DestinationService::get_updates`]; served through [`GetMethod`], this is
    /// the same stream with each update copied out.
    async fn get(
        &self,
        request: Request<GetDestination>,
    ) -> Result<Response<Self::GetStream>, Status> {
        let updates = self.get_updates(request)?;
        Ok(Response::new(Box::pin(
            updates.map(|update| update.map(Shared::into_inner)),
        )))
    }

    /// Streams the profile of a Service port or a workload address (spec/destination.md §D).
    /// Errors: see `DestinationService::profile_stream`.
    async fn get_profile(
        &self,
        request: Request<GetDestination>,
    ) -> Result<Response<Self::GetProfileStream>, Status> {
        let started = self.metrics.started("GetProfile");
        let peer = request.remote_addr();
        match self.profile_stream(request.into_inner(), peer, started) {
            Ok(stream) => Ok(Response::new(stream)),
            Err(status) => {
                self.metrics.handled("GetProfile", status.code(), started);
                Err(status)
            }
        }
    }
}

/// Serves `service` on `listener` until `shutdown`, with HTTP/2 limits set for many long-lived
/// streams per connection (every watch of one proxy shares its connection).
/// `Get` and `GetProfile` are served in front of the router, so their streams keep no boxes of
/// its making ([`WatchStreams`]).
pub async fn serve(listener: TcpListener, service: DestinationService, shutdown: Shutdown) {
    let (inner, get_profile) = service.into_server().into_parts();
    let (generated, get) = inner.into_parts();
    let routes = tonic::service::Routes::new(generated).prepare();
    linkerd_runtime::grpc::serve(
        listener,
        WatchStreams::new(WatchStreams::new(routes, get), get_profile),
        Http2Settings::default(),
        shutdown.signaled(),
    )
    .await
}

/// Binds `addr`, returning the listener and its bound address (port 0 picks one).
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}
