//! The admin server (default `0.0.0.0:4191`), with the answers of the proxy's admin endpoints
//! that this shim stands in for (spec/sp-validator-and-pod.md §d.3), whatever the method
//! except on `/shutdown` (the proxy checks only that one's): `/live` is always
//! `200 live`, `/ready` is `503 not ready` until [`Shim::ready`](crate::Shim::ready) turns true
//! and `200 ready` after, `/metrics` is the Prometheus text of the registry (500 if it cannot be
//! encoded); `POST /shutdown` is the proxy's answer when its shutdown endpoint is not enabled
//! (`404 shutdown endpoint is not enabled`: the shim has none, and a client such as
//! `linkerd-await --shutdown` reads that answer as the proxy's), or, as the proxy checks that
//! first, `403 Requests are only permitted from localhost.` from another address; another
//! method on it `405`. Anything else, `/shutdown/` too (the proxy matches whole paths), is a
//! 404 with an empty body, as the proxy's.

use axum::{
    Router,
    extract::State,
    http::{HeaderName, StatusCode, header},
    response::IntoResponse,
    routing::{any, post},
};
use linkerd_runtime::{shutdown::Shutdown, tls::PeerAddr};
use prometheus_client::registry::Registry;
use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};
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

    /// The routes, for serving or for tests. As the proxy's admin server, which checks the
    /// method of `/shutdown` only, `/live`, `/ready` and `/metrics` answer any method.
    pub fn router(self) -> Router {
        Router::new()
            .route("/live", any(|| async { "live\n" }))
            .route("/ready", any(ready))
            .route("/metrics", any(metrics))
            .route("/shutdown", post(shutdown))
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

async fn shutdown(request: axum::extract::Request) -> impl IntoResponse {
    shutdown_answer(PeerAddr::ip_of(request.extensions()))
}

/// The proxy's answer to `POST /shutdown` from `peer`, its shutdown endpoint not enabled: the
/// loopback check comes first there.
fn shutdown_answer(
    peer: Option<IpAddr>,
) -> (StatusCode, [(HeaderName, &'static str); 1], &'static str) {
    let loopback = match peer {
        Some(IpAddr::V6(v6)) => v6
            .to_ipv4_mapped()
            .map_or(v6.is_loopback(), |v4| v4.is_loopback()),
        Some(ip) => ip.is_loopback(),
        None => false,
    };
    let text = [(header::CONTENT_TYPE, "text/plain")];
    if loopback {
        (
            StatusCode::NOT_FOUND,
            text,
            "shutdown endpoint is not enabled\n",
        )
    } else {
        (
            StatusCode::FORBIDDEN,
            text,
            "Requests are only permitted from localhost.",
        )
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::{body::Body, http::Request};
    use linkerd_runtime::tls::PeerAddr;
    use std::net::SocketAddr;
    use tower::ServiceExt;

    /// The admin router's answer to `POST path` from `peer`.
    async fn post(path: &str, peer: &str) -> (StatusCode, String) {
        request("POST", path, peer).await
    }

    /// The admin router's answer to `method path` from `peer` (not ready yet).
    async fn request(method: &str, path: &str, peer: &str) -> (StatusCode, String) {
        let (_ready, ready) = watch::channel(false);
        let router = AdminState::new(ready, Arc::new(Registry::default())).router();
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let peer = SocketAddr::new(peer.parse().unwrap(), 40000);
        request.extensions_mut().insert(PeerAddr(peer));
        let response = router.oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    /// As the proxy, whose loopback check comes before its endpoint's (spec §d.3): another
    /// address is refused (tester finding: every address got the loopback answer).
    #[tokio::test]
    async fn shutdown_is_refused_to_other_addresses_first() {
        for peer in ["127.0.0.1", "::1", "::ffff:127.0.0.1"] {
            assert_eq!(
                post("/shutdown", peer).await,
                (
                    StatusCode::NOT_FOUND,
                    "shutdown endpoint is not enabled\n".into()
                ),
                "{peer}"
            );
        }
        for peer in ["10.0.0.7", "fd00::1"] {
            assert_eq!(
                post("/shutdown", peer).await,
                (
                    StatusCode::FORBIDDEN,
                    "Requests are only permitted from localhost.".into()
                ),
                "{peer}"
            );
        }
        // Whole paths only, as the proxy's.
        assert_eq!(
            post("/shutdown/", "10.0.0.7").await,
            (StatusCode::NOT_FOUND, String::new())
        );
    }

    /// The proxy checks the method of `/shutdown` only: `/live`, `/ready` and `/metrics`
    /// answer any method (tester finding: POST/PUT/DELETE got 405 here).
    #[tokio::test]
    async fn live_ready_and_metrics_answer_any_method() {
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            assert_eq!(
                request(method, "/live", "10.0.0.7").await,
                (StatusCode::OK, "live\n".into()),
                "{method}"
            );
            assert_eq!(
                request(method, "/ready", "10.0.0.7").await,
                (StatusCode::SERVICE_UNAVAILABLE, "not ready\n".into()),
                "{method}"
            );
            let (status, body) = request(method, "/metrics", "10.0.0.7").await;
            assert_eq!(
                (status, body.ends_with("# EOF\n")),
                (StatusCode::OK, true),
                "{method}"
            );
        }
        // /shutdown stays POST-only, as the proxy's.
        for method in ["GET", "PUT", "DELETE"] {
            assert_eq!(
                request(method, "/shutdown", "127.0.0.1").await.0,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method}"
            );
        }
    }
}
