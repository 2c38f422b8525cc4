//! The policy controller's gRPC server: one HTTP/2 server for the policy APIs (spec §1.1).

use linkerd_runtime::{grpc::Http2Settings, shutdown::Shutdown};
use std::net::SocketAddr;
use tokio::net::TcpListener;

use crate::{inbound::InboundPolicyService, outbound::OutboundPolicyService};

/// Serves `inbound` alone on `listener` until `shutdown` (see [`serve_policies`]).
pub async fn serve(listener: TcpListener, inbound: InboundPolicyService, shutdown: Shutdown) {
    serve_policies(listener, inbound, None, shutdown).await
}

/// Serves `inbound` and, when given, `outbound` on `listener` until `shutdown`: open streams
/// end with `OK`, then the server drains ([`linkerd_runtime::grpc::serve`]).
pub async fn serve_policies(
    listener: TcpListener,
    inbound: InboundPolicyService,
    outbound: Option<OutboundPolicyService>,
    shutdown: Shutdown,
) {
    let mut routes = tonic::service::Routes::new(inbound.into_server());
    if let Some(outbound) = outbound {
        routes = routes.add_service(outbound.into_server());
    }
    linkerd_runtime::grpc::serve(
        listener,
        routes,
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
