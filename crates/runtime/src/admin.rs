//! The admin HTTP server: `/live`, `/ready`, `/ping`, `/metrics`.
//!
//! Mirrors upstream's admin server (spec/destination.md §A.3): `/ready` answers `200 ok` only
//! once the index has applied every watch's initial list, `500 not ready` before; `/ping`
//! answers `pong` (upstream's liveness path); anything else is 404.
//!
//! Beyond upstream, a `500` says why when the binary gives a reason ([`Admin::with_reason`]):
//! `not ready: waiting for the initial list of 3 kinds: v1/Pod (last error: ...), ...`
//! (issue 19 item 3). Probes look at the status only.

use axum::{
    Router, extract::State, http::StatusCode, http::header, response::IntoResponse, routing::get,
};
use prometheus_client::registry::Registry;
use std::{net::SocketAddr, sync::Arc};
use tokio::{net::TcpListener, sync::watch};

use crate::shutdown::Shutdown;

/// Why a binary is not ready, asked on each `/ready` that answers `500`: one line, or `None`
/// when there is nothing more to say than `not ready`.
pub type NotReadyReason = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// The admin server's state: readiness, why not ready, and the metrics registry.
#[derive(Clone)]
pub struct Admin {
    ready: watch::Receiver<bool>,
    reason: Option<NotReadyReason>,
    registry: Arc<Registry>,
}

impl Admin {
    /// `/ready` from `ready` (`true`: ready), `/metrics` from `registry`; no reason is given
    /// when not ready (the sp-validator has none to give).
    pub fn new(ready: watch::Receiver<bool>, registry: Arc<Registry>) -> Self {
        Self {
            ready,
            reason: None,
            registry,
        }
    }

    /// Adds `reason` to `/ready`'s `500` body: `not ready: <reason>`. It is called only while
    /// `ready` is `false`, on each request, so it must be cheap (a lock and a format).
    pub fn with_reason(
        mut self,
        reason: impl Fn() -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.reason = Some(Arc::new(reason));
        self
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

    /// Binds `addr` and serves until `shutdown` ([`crate::http::serve`]: a request head must
    /// arrive within its timeout). Returns the bound address (useful with port 0)
    /// and the server task.
    pub async fn bind(
        self,
        addr: SocketAddr,
        shutdown: Shutdown,
    ) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let router = self.router();
        let task = tokio::spawn(crate::http::serve(listener, router, shutdown.signaled()));
        Ok((local, task))
    }
}

async fn ready(State(admin): State<Admin>) -> impl IntoResponse {
    if *admin.ready.borrow() {
        return (StatusCode::OK, "ok\n".to_string());
    }
    let body = match admin.reason.as_ref().and_then(|reason| reason()) {
        Some(reason) => format!("not ready: {reason}\n"),
        None => "not ready\n".to_string(),
    };
    (StatusCode::INTERNAL_SERVER_ERROR, body)
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// `GET path` over HTTP/1.0 (the server closes after answering): status and body.
    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET {path} HTTP/1.0\r\nHost: admin\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("read");
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status line");
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_string())
            .unwrap_or_default();
        (status, body)
    }

    #[tokio::test]
    async fn not_ready_says_why_and_ready_is_ok() {
        let (ready_tx, ready) = watch::channel(false);
        let (_trigger, shutdown) = crate::shutdown::channel();
        let admin = Admin::new(ready, Arc::default())
            .with_reason(|| Some("waiting for the initial list of 1 kind: v1/Pod".into()));
        let (addr, _task) = admin
            .bind("127.0.0.1:0".parse().unwrap(), shutdown)
            .await
            .unwrap();
        assert_eq!(
            get(addr, "/ready").await,
            (
                500,
                "not ready: waiting for the initial list of 1 kind: v1/Pod\n".into()
            )
        );
        ready_tx.send_replace(true);
        assert_eq!(get(addr, "/ready").await, (200, "ok\n".into()));
    }

    #[tokio::test]
    async fn without_a_reason_not_ready_is_bare() {
        let (_ready_tx, ready) = watch::channel(false);
        let (_trigger, shutdown) = crate::shutdown::channel();
        let (addr, _task) = Admin::new(ready, Arc::default())
            .with_reason(|| None)
            .bind("127.0.0.1:0".parse().unwrap(), shutdown.clone())
            .await
            .unwrap();
        assert_eq!(get(addr, "/ready").await, (500, "not ready\n".into()));
        let (_ready_tx, ready) = watch::channel(false);
        let (addr, _task) = Admin::new(ready, Arc::default())
            .bind("127.0.0.1:0".parse().unwrap(), shutdown)
            .await
            .unwrap();
        assert_eq!(get(addr, "/ready").await, (500, "not ready\n".into()));
    }

    /// A client that connects and never sends a request head (a stuck prober, a slowloris)
    /// is disconnected after the header-read timeout instead of holding a task and a file
    /// descriptor for ever. The clock is paused: it jumps ahead whenever the runtime waits.
    #[tokio::test(start_paused = true)]
    async fn a_connection_that_sends_no_request_is_closed() {
        let (_ready_tx, ready) = watch::channel(true);
        let (_trigger, shutdown) = crate::shutdown::channel();
        let (addr, _task) = Admin::new(ready, Arc::default())
            .bind("127.0.0.1:0".parse().unwrap(), shutdown)
            .await
            .unwrap();
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = tokio::time::Instant::now();
        let mut read = Vec::new();
        let closed = tokio::time::timeout(
            crate::http::HEADER_READ_TIMEOUT * 4,
            silent.read_to_end(&mut read),
        )
        .await;
        assert!(closed.is_ok(), "the silent connection is still open");
        assert!(started.elapsed() >= crate::http::HEADER_READ_TIMEOUT);
        // The port still answers others.
        assert_eq!(get(addr, "/ready").await, (200, "ok\n".into()));
    }
}
