//! The policy controller's gRPC server: one HTTP/2 server for the policy APIs (spec §1.1).

use linkerd_runtime::{
    grpc::{Http2Settings, WatchStreams},
    shutdown::Shutdown,
};
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tonic::service::Routes;

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
    // The watch methods are served in front of the router, so their streams keep no boxes of
    // its making (`WatchStreams`).
    let (inbound, watch_port) = inbound.into_server().into_parts();
    let mut routes = Routes::new(inbound);
    let mut watch = None;
    if let Some(outbound) = outbound {
        let (outbound, method) = outbound.into_server().into_parts();
        routes = routes.add_service(outbound);
        watch = Some(method);
    }
    let routes = WatchStreams::new(routes.prepare(), watch_port);
    let (settings, shutdown) = (Http2Settings::default(), shutdown.signaled());
    match watch {
        Some(watch) => {
            let routes = WatchStreams::new(routes, watch);
            linkerd_runtime::grpc::serve(listener, routes, settings, shutdown).await
        }
        None => linkerd_runtime::grpc::serve(listener, routes, settings, shutdown).await,
    }
}

/// Binds `addr`, returning the listener and its bound address (port 0 picks one).
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}
