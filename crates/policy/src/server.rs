//! The policy controller's gRPC server: one HTTP/2 server for the policy APIs (spec §1.1).

use linkerd_runtime::shutdown::Shutdown;
use std::net::SocketAddr;
use tokio::net::TcpListener;

use crate::{inbound::InboundPolicyService, outbound::OutboundPolicyService};

/// Serves `inbound` alone on `listener` until `shutdown` (see [`serve_policies`]).
pub async fn serve(
    listener: TcpListener,
    inbound: InboundPolicyService,
    shutdown: Shutdown,
) -> Result<(), tonic::transport::Error> {
    serve_policies(listener, inbound, None, shutdown).await
}

/// Serves `inbound` and, when given, `outbound` on `listener` until `shutdown`: open streams
/// end with `OK`, then the server drains. HTTP/2 limits are set for many long-lived streams
/// per connection (every watch of one proxy shares its connection).
pub async fn serve_policies(
    listener: TcpListener,
    inbound: InboundPolicyService,
    outbound: Option<OutboundPolicyService>,
    shutdown: Shutdown,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .max_concurrent_streams(Some(10_000))
        .http2_keepalive_interval(None)
        .add_service(inbound.into_server())
        .add_optional_service(outbound.map(OutboundPolicyService::into_server))
        .serve_with_incoming_shutdown(
            linkerd_runtime::grpc::incoming(listener),
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
