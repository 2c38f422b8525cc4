//! The `Introspection` gRPC service over a [`StreamRegistry`], and its server.

use linkerd_introspection_api::{
    GetStreamRequest, GetStreamResponse, ListStreamsRequest, ListStreamsResponse, SentMessage,
    StreamInfo,
    introspection_server::{Introspection, IntrospectionServer},
};
use std::net::IpAddr;
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

use super::{APIS, StreamFilter, StreamRegistry, StreamSummary, unix_ms};

/// `Introspection` over the streams of one server.
#[derive(Clone, Debug)]
pub struct IntrospectionService {
    registry: StreamRegistry,
}

impl IntrospectionService {
    pub fn new(registry: StreamRegistry) -> Self {
        Self { registry }
    }

    /// The tonic service, ready to add to a server.
    pub fn into_server(self) -> IntrospectionServer<Self> {
        IntrospectionServer::new(self)
    }
}

/// Serves the introspection API of `registry` on `listener` until `shutdown` completes. It is
/// unary and small, so tonic's own server does; the connections of watch streams are not here.
pub async fn serve(
    listener: TcpListener,
    registry: StreamRegistry,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let result = tonic::transport::Server::builder()
        .add_service(IntrospectionService::new(registry).into_server())
        .serve_with_incoming_shutdown(crate::grpc::incoming(listener), shutdown)
        .await;
    if let Err(error) = result {
        tracing::error!(%error, "introspection server failed");
    }
}

/// How much of a request's string an error repeats: enough to recognise it, never so much that
/// the status no longer fits in the response headers (a client's limit is 16 KiB).
const MAX_ECHO: usize = 256;

/// `value` quoted, cut to its first [`MAX_ECHO`] bytes (at a character boundary) and `…`.
fn echo(value: &str) -> String {
    if value.len() <= MAX_ECHO {
        return format!("{value:?}");
    }
    format!("{:?}…", &value[..value.floor_char_boundary(MAX_ECHO)])
}

/// The filter a request asks for. Errors: `InvalidArgument` naming the field that cannot
/// match anything as written, and repeating at most [`MAX_ECHO`] bytes of it.
pub(crate) fn filter(request: &ListStreamsRequest) -> Result<StreamFilter, Status> {
    let non_empty = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_string());
    let api = non_empty(&request.api);
    if let Some(api) = &api
        && !APIS.contains(&api.as_str())
    {
        return Err(Status::invalid_argument(format!(
            "unknown api {}: expected one of {}",
            echo(api),
            APIS.join(", ")
        )));
    }
    let pod = non_empty(&request.pod);
    if let Some(pod) = &pod {
        match pod.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {}
            _ => {
                return Err(Status::invalid_argument(format!(
                    "invalid pod {}: expected namespace/name",
                    echo(pod)
                )));
            }
        }
    }
    let peer_ip = match non_empty(&request.peer_ip) {
        None => None,
        Some(ip) => Some(ip.parse::<IpAddr>().map_err(|_| {
            Status::invalid_argument(format!("invalid peer_ip {}: not an IP address", echo(&ip)))
        })?),
    };
    Ok(StreamFilter {
        api,
        pod,
        peer_ip,
        target_contains: non_empty(&request.target_contains),
        behind_only: request.behind_only,
    })
}

/// The wire form of a stream's summary.
pub(crate) fn stream_info(summary: StreamSummary) -> StreamInfo {
    StreamInfo {
        id: summary.id,
        api: summary.meta.api.to_string(),
        peer: summary.meta.peer.map(|p| p.to_string()).unwrap_or_default(),
        client_identity: summary.meta.client_identity.unwrap_or_default(),
        target: summary.meta.target,
        pod: summary.meta.pod.unwrap_or_default(),
        context_token: summary.meta.context_token,
        opened_at_unix_ms: unix_ms(summary.opened_at),
        messages_sent: summary.messages_sent,
        last_sent_at_unix_ms: summary.last_sent_at.map(unix_ms).unwrap_or(0),
        behind: summary.behind,
    }
}

#[tonic::async_trait]
impl Introspection for IntrospectionService {
    async fn list_streams(
        &self,
        request: Request<ListStreamsRequest>,
    ) -> Result<Response<ListStreamsResponse>, Status> {
        let filter = filter(request.get_ref())?;
        if let Some(api) = &filter.api
            && !self.registry.serves(api)
        {
            return Err(Status::failed_precondition(format!(
                "{api} streams are another server's: this one serves {} streams",
                self.registry.apis().join(" and ")
            )));
        }
        let streams = self
            .registry
            .list(&filter)
            .into_iter()
            .map(stream_info)
            .collect();
        Ok(Response::new(ListStreamsResponse { streams }))
    }

    async fn get_stream(
        &self,
        request: Request<GetStreamRequest>,
    ) -> Result<Response<GetStreamResponse>, Status> {
        let id = request.get_ref().id;
        let Some((summary, last)) = self.registry.get(id) else {
            return Err(Status::not_found(format!(
                "no open stream has ID {id} here (it closed, never existed, or is another server's: destination and policy-controller number their streams apart)"
            )));
        };
        Ok(Response::new(GetStreamResponse {
            stream: Some(stream_info(summary)),
            last_sent: last.map(|(type_name, value)| SentMessage {
                type_name: type_name.to_string(),
                value,
            }),
        }))
    }
}
