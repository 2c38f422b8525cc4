//! The admin server (default `0.0.0.0:4191`), with the answers of the proxy's admin endpoints
//! that this shim stands in for (spec/sp-validator-and-pod.md §d.3): `/live` is always
//! `200 live`, `/ready` is `503 not ready` until [`Shim::ready`](crate::Shim::ready) turns true
//! and `200 ready` after, `/metrics` is the Prometheus text of the registry (500 if it cannot be
//! encoded); `POST /shutdown` is the proxy's answer when its shutdown endpoint is not enabled
//! (`404 shutdown endpoint is not enabled`: the shim has none, and a client such as
//! `linkerd-await --shutdown` reads that answer as the proxy's), another method on it `405`;
//! anything else is 404.

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    response::IntoResponse,
    routing::{get, post},
};
use linkerd_runtime::shutdown::Shutdown;
use prometheus_client::registry::Registry;
use std::{net::SocketAddr, sync::Arc};
use tokio::{net::TcpListener, sync::watch};

/// What the admin endpoints report.
#[derive(Clone, Debug)]
pub struct AdminState {
    ready: watch::Receiver<bool>,
    registry: Arc<Registry>,
}

// === impl AdminState ===

impl AdminState {
    /// Readiness from `ready`, metrics from `registry`.
    pub fn new(ready: watch::Receiver<bool>, registry: Arc<Registry>) -> Self {
        Self { ready, registry }
    }

    /// The routes, for serving or for tests.
    pub fn router(self) -> Router {
        Router::new()
            .route("/live", get(|| async { "live\n" }))
            .route("/ready", get(ready))
            .route("/metrics", get(metrics))
            .route(
                "/shutdown",
                post(|| async { (StatusCode::NOT_FOUND, "shutdown endpoint is not enabled\n") }),
            )
            .with_state(self)
    }

    /// Binds `addr` and serves until `shutdown` (`linkerd_runtime::http::serve`: a request head
    /// must arrive within its timeout). Returns the bound address (port 0 picks one)
    /// and the server task.
    pub async fn bind(
        self,
        addr: SocketAddr,
        shutdown: Shutdown,
    ) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let router = self.router();
        let task = tokio::spawn(linkerd_runtime::http::serve(
            listener,
            router,
            shutdown.signaled(),
        ));
        Ok((local, task))
    }
}

async fn ready(State(state): State<AdminState>) -> impl IntoResponse {
    if *state.ready.borrow() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            format!("cannot encode metrics: {error}\n"),
        ),
    }
}
