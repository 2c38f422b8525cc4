//! The HTTP/1.1 servers of the pod's plain and HTTPS ports: the admin ports (`/live`, `/ready`,
//! `/metrics`) and the admission webhooks ([`crate::tls::HttpsServer`]).
//!
//! Both serve each connection in a task of its own with hyper, with a header-read timeout
//! ([`HEADER_READ_TIMEOUT`], upstream's `ReadHeaderTimeout`): a client that opens a connection
//! and never finishes a request head (a stuck client, a slowloris) has it closed instead of
//! holding a task and a file descriptor for ever. On shutdown they stop accepting, let open
//! connections finish their current request (closing idle keep-alive connections) and close
//! what is still open after [`DRAIN_TIMEOUT`]. The plain ports also answer HTTP/2 with prior
//! knowledge, so that a gRPC client pointed at one by mistake gets an HTTP status to report.

use axum::Router;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use std::{future::Future, net::SocketAddr, time::Duration};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinSet,
};

/// How long a client may take to send a request's head, from the moment the server waits for
/// one (upstream's `ReadHeaderTimeout`).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(15);

/// How long open connections may take to finish their requests after shutdown.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `router` over plain HTTP/1.1 (or HTTP/2 with prior knowledge) on `listener` until `shutdown` resolves, then drains
/// (see the module docs). Each request carries its client's address
/// ([`PeerAddr`](crate::tls::PeerAddr)) in its extensions. A failed connection concerns one client only: it is logged at debug
/// level and the server goes on.
pub async fn serve(listener: TcpListener, router: Router, shutdown: impl Future<Output = ()>) {
    serve_with(listener, router, HEADER_READ_TIMEOUT, shutdown).await;
}

/// [`serve`] with another header-read timeout (tests).
pub(crate) async fn serve_with(
    listener: TcpListener,
    router: Router,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    accept_until(listener, "HTTP", shutdown, |tcp, peer, stop| {
        // Handlers that answer by client address (the shim's loopback-only `/shutdown`).
        let router = router
            .clone()
            .layer(axum::Extension(crate::tls::PeerAddr(peer)));
        async move {
            let mut stopped = stop.clone();
            let http2 = tokio::select! {
                http2 = speaks_http2(&tcp, header_read_timeout) => http2,
                _ = stopped.wait_for(|stop| *stop) => None,
            };
            let result = match http2 {
                // Closed, silent past the timeout, or the server is stopping.
                None => return,
                Some(true) => drive_http2(tcp, router, stop).await,
                Some(false) => drive(tcp, router, header_read_timeout, stop)
                    .await
                    .map(drop),
            };
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "HTTP connection failed");
            }
        }
    })
    .await;
}

/// Whether a plain connection opens with the HTTP/2 connection preface (prior knowledge: a
/// gRPC client pointed at an admin port gets an HTTP answer it can report). The preface
/// starts with `PRI `, which no HTTP/1 request line does. `None` when the client closes or
/// sends too little to tell within `within`.
async fn speaks_http2(tcp: &TcpStream, within: Duration) -> Option<bool> {
    const PREFACE: &[u8] = b"PRI ";
    let sniff = async {
        let mut first = [0u8; PREFACE.len()];
        loop {
            let n = tcp.peek(&mut first).await.ok()?;
            if n == 0 {
                return None;
            }
            if n == first.len() || !PREFACE.starts_with(&first[..n]) {
                return Some(first[..n] == *PREFACE);
            }
            // A prefix of the preface only: peek returns at once while bytes wait, so pause
            // before looking again.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(within, sniff).await.ok().flatten()
}

/// Serves HTTP/2 (prior knowledge) on `tcp` until the client closes or `stop` turns `true`
/// (then open requests finish first). Peers that stop answering pings are dropped.
async fn drive_http2(
    tcp: TcpStream,
    router: Router,
    mut stop: watch::Receiver<bool>,
) -> Result<(), hyper::Error> {
    let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(HEADER_READ_TIMEOUT))
        .serve_connection(TokioIo::new(tcp), TowerToHyperService::new(router));
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => result,
        () = async { drop(stop.wait_for(|stop| *stop).await) } => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    }
}

/// Accepts connections on `listener` until `shutdown` resolves, running `connection(tcp, peer,
/// stop)` for each in a task of its own; `stop` turns `true` at shutdown. Then closes the
/// listener and waits up to [`DRAIN_TIMEOUT`] for the connections' tasks before aborting
/// them. `what` names the protocol in the logs.
pub(crate) async fn accept_until<F>(
    listener: TcpListener,
    what: &'static str,
    shutdown: impl Future<Output = ()>,
    mut connection: impl FnMut(TcpStream, SocketAddr, watch::Receiver<bool>) -> F,
) where
    F: Future<Output = ()> + Send + 'static,
{
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    connections.spawn(connection(tcp, peer, stop_rx.clone()));
                }
                Err(error) => {
                    // Out of file descriptors, most likely: let some connections end.
                    let addr = listener.local_addr().ok();
                    tracing::warn!(%error, ?addr, "cannot accept an {what} connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    // Closed first, so that clients trying to connect during the drain are refused rather
    // than left in the backlog.
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "{what} connections still open after the drain timeout; closing them"
        );
        connections.shutdown().await;
    }
}

/// Serves HTTP/1.1 requests on `io` with `router` until the client closes, the head of a
/// request takes longer than `header_read_timeout`, or `stop` turns `true` (then the current
/// request finishes first). Returns `io` without shutting it down, so that the caller chooses
/// how to close it.
///
/// Errors: hyper's, for a malformed request or a broken connection.
pub(crate) async fn drive<I>(
    io: I,
    router: Router,
    header_read_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) -> Result<I, hyper::Error>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(router));
    tokio::select! {
        result = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)) => result?,
        () = async { drop(stop.wait_for(|stop| *stop).await) } => {
            std::pin::Pin::new(&mut conn).graceful_shutdown();
            std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)).await?;
        }
    }
    Ok(conn.into_parts().io.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn start(
        header_read_timeout: Duration,
    ) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new()
            .route("/ping", get(|| async { "pong\n" }))
            .route(
                "/peer",
                get(|request: axum::extract::Request| async move {
                    format!("{:?}", crate::tls::PeerAddr::ip_of(request.extensions()))
                }),
            );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve_with(listener, router, header_read_timeout, async {
            let _ = rx.await;
        }));
        (addr, tx)
    }

    /// Reads until the server closes the connection; `None` if it is still open after `wait`.
    async fn read_to_close(tcp: &mut TcpStream, wait: Duration) -> Option<String> {
        let mut read = Vec::new();
        tokio::time::timeout(wait, tcp.read_to_end(&mut read))
            .await
            .ok()
            .map(|_| String::from_utf8_lossy(&read).into_owned())
    }

    #[tokio::test]
    async fn a_request_head_never_finished_is_closed_after_the_timeout() {
        let (addr, _stop) = start(Duration::from_millis(300)).await;
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        // Half a request head, then nothing.
        tcp.write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let answer = read_to_close(&mut tcp, Duration::from_secs(5)).await;
        let answer = answer.expect("the connection stays open past the header-read timeout");
        assert!(!answer.contains("pong"), "{answer}");

        // A connection that sends nothing at all goes the same way, and so does one that
        // starts the HTTP/2 preface and stops.
        let mut idle = TcpStream::connect(addr).await.unwrap();
        let closed = read_to_close(&mut idle, Duration::from_secs(5)).await;
        assert!(closed.is_some());
        let mut partial = TcpStream::connect(addr).await.unwrap();
        partial.write_all(b"PR").await.unwrap();
        let closed = read_to_close(&mut partial, Duration::from_secs(5)).await;
        assert!(closed.is_some());
    }

    #[tokio::test]
    async fn handlers_see_the_client_address() {
        let (addr, _stop) = start(Duration::from_secs(30)).await;
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET /peer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = read_to_close(&mut tcp, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(answer.ends_with("\r\n\r\nSome(127.0.0.1)"), "{answer}");
    }

    #[tokio::test]
    async fn http2_with_prior_knowledge_is_answered() {
        let (addr, _stop) = start(Duration::from_secs(30)).await;
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (mut client, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .unwrap();
        tokio::spawn(conn);
        let request = axum::http::Request::get(format!("http://{addr}/ping"))
            .body(axum::body::Body::empty())
            .unwrap();
        let response = client.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.version(), axum::http::Version::HTTP_2);
    }

    #[tokio::test]
    async fn requests_within_the_timeout_are_answered_and_shutdown_ends_the_server() {
        let (addr, stop) = start(Duration::from_secs(30)).await;
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = read_to_close(&mut tcp, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("pong\n"), "{answer}");

        // An idle keep-alive connection is closed at shutdown, and the port stops accepting.
        let mut idle = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.send(()).unwrap();
        assert!(
            read_to_close(&mut idle, Duration::from_secs(5))
                .await
                .is_some()
        );
        let mut refused = false;
        for _ in 0..50 {
            if TcpStream::connect(addr).await.is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(refused, "the port still accepts after shutdown");
    }
}
