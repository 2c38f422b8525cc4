//! The admin HTTP server: `/live`, `/ready`, `/ping`, `/metrics`.
//!
//! Mirrors upstream's admin server (spec/destination.md §A.3): `/ready` answers `200 ok` only
//! once the index has applied every watch's initial list, `500 not ready` before; `/ping`
//! answers `pong` (upstream's liveness path); anything else is 404.

use axum::{
    Router, extract::State, http::StatusCode, http::header, response::IntoResponse, routing::get,
};
use prometheus_client::registry::Registry;
use std::{net::SocketAddr, sync::Arc};
use tokio::{net::TcpListener, sync::watch};

use crate::shutdown::Shutdown;

/// The admin server's state: readiness and the metrics registry.
#[derive(Clone)]
pub struct Admin {
    ready: watch::Receiver<bool>,
    registry: Arc<Registry>,
}

impl Admin {
    pub fn new(ready: watch::Receiver<bool>, registry: Arc<Registry>) -> Self {
        Self { ready, registry }
    }

    /// The routes, for serving or for tests.
    pub fn router(self) -> Router {
        Router::new()
            .route("/live", get(|| async { "live\n" }))
            .route("/ping", get(|| async { "pong\n" }))
            .route("/ready", get(ready))
            .route("/metrics", get(metrics))
            .with_state(self)
    }

    /// Binds `addr` and serves until `shutdown`. Returns the bound address (useful with port 0)
    /// and the server task.
    pub async fn bind(
        self,
        addr: SocketAddr,
        shutdown: Shutdown,
    ) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let router = self.router();
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router)
                .with_graceful_shutdown(shutdown.signaled())
                .await
            {
                tracing::error!(%error, "admin server failed");
            }
        });
        Ok((local, task))
    }
}

async fn ready(State(admin): State<Admin>) -> impl IntoResponse {
    if *admin.ready.borrow() {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, "not ready\n")
    }
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &admin.registry) {
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
