//! Connecting to the Destination service and the policy controller.

use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

use crate::Error;

/// Where the `destination` container listens inside the pod (plaintext on loopback, behind the
/// mtls-shim that owns 8086; `deploy/base/destination.yaml`, `cargo xtask dev`).
pub const DEFAULT_DESTINATION: &str = "http://127.0.0.1:18086";

/// How long a connection attempt may take before the run fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a server has to answer a request: to send its response headers, which a streaming
/// server does at once; the stream's messages may come much later. Without it, a port that
/// accepts connections and never speaks HTTP/2 would hang the run.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2 PINGs on an open stream: a server that vanishes without closing the connection ends
/// the run within about `KEEPALIVE_INTERVAL + KEEPALIVE_TIMEOUT` instead of never.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Replies can list every endpoint of a large Service at once; the 4 MiB gRPC default would
/// turn such a service into an error.
pub const MAX_MESSAGE_SIZE: usize = 64 * 1024 * 1024;

/// The URI for `--destination`: `host:port` gets `http://` in front; only `http` is accepted,
/// since this client has no TLS (the pod's mTLS port needs a client certificate anyway).
pub fn destination_uri(addr: &str) -> Result<String, Error> {
    server_uri("--destination", addr)
}

/// The URI for the server address given as `flag` (`--destination`, `--policy`), as
/// [`destination_uri`] reads it; errors name `flag`, and what is wrong: another scheme than
/// `http`, no host, a port out of range, user info, a path or a query.
pub fn server_uri(flag: &'static str, addr: &str) -> Result<String, Error> {
    let addr = addr.trim();
    let invalid = |reason: &str| Error::InvalidDestination {
        flag,
        addr: addr.to_string(),
        reason: reason.to_string(),
    };
    if addr.is_empty() {
        return Err(invalid("empty address"));
    }
    let uri = match addr.split_once("://") {
        None => format!("http://{addr}"),
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("http") => addr.to_string(),
        Some((scheme, _)) => {
            return Err(invalid(&format!(
                "scheme {scheme:?} is not supported, use http://host:port (plaintext)"
            )));
        }
    };
    // The HTTP client dials port 80 for a port it cannot read: refuse it here instead.
    let parsed: tonic::codegen::http::Uri = uri
        .parse()
        .map_err(|e| invalid(&format!("not a URI: {e}")))?;
    let authority = parsed.authority().map_or("", |a| a.as_str());
    // The channel would drop them without a word: a server is only a host and a port.
    if authority.contains('@') {
        return Err(invalid(
            "user info is not used (no credentials are sent): give http://host:port",
        ));
    }
    if !matches!(parsed.path(), "" | "/") || parsed.query().is_some() || uri.contains('#') {
        return Err(invalid(
            "a path, query or fragment is not used (gRPC names its own path): give http://host:port",
        ));
    }
    // The text after the host (after `]` for an IPv6 literal) and its last `:`.
    let host_end = authority.rfind(']').unwrap_or(0);
    if let Some((_, port)) = authority[host_end..].rsplit_once(':') {
        match port.parse::<u16>() {
            Ok(0) => return Err(invalid("port 0 cannot be dialled")),
            Ok(_) => {}
            Err(_) if port.is_empty() => return Err(invalid("empty port after ':'")),
            Err(_) => return Err(invalid(&format!("port {port} is out of range 1-65535"))),
        }
    }
    Ok(uri)
}

/// Connects to `--destination` `addr`, failing at once (not on the first request) when the
/// server cannot be reached.
pub async fn connect(addr: &str) -> Result<Channel, Error> {
    connect_to("--destination", addr).await
}

/// Connects to `addr`, given as `flag` (`--policy`), as [`connect`] does; errors name `flag`.
pub async fn connect_to(flag: &'static str, addr: &str) -> Result<Channel, Error> {
    let uri = server_uri(flag, addr)?;
    let endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|error| Error::InvalidDestination {
            flag,
            addr: addr.to_string(),
            reason: crate::error_line(&error),
        })?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true);
    endpoint
        .connect()
        .await
        .map_err(|source| Error::Connect { addr: uri, source })
}

/// Awaits the response to `rpc` for `target` for at most `timeout` ([`RESPONSE_TIMEOUT`] in the
/// subcommands).
///
/// Errors: [`Error::NoResponse`] when the server stays silent, [`Error::Status`] when it refuses.
pub async fn response<T>(
    rpc: &'static str,
    target: &str,
    timeout: Duration,
    call: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, Error> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(status)) => Err(Error::Status {
            rpc,
            target: target.to_string(),
            status,
        }),
        Err(_) => Err(Error::NoResponse {
            rpc,
            target: target.to_string(),
            after: timeout,
        }),
    }
}

/// Says on stderr that the server ended `rpc`'s stream for `target` without an error status:
/// an outbound `Watch` the controller ends for the proxy to ask again (policy §5.8), or a
/// server shutting down. Without it the command would just return, as if it had finished.
pub(crate) fn report_stream_end(rpc: &str, target: &str) {
    eprintln!("{rpc} {target}: the server ended the stream");
}

/// `target` with port 80, when it is an IP address without a port (`10.96.0.1`, `fd00::1`,
/// `[fd00::1]`): what a proxy would ask for instead, for a hint (`10.96.0.1:80`,
/// `[fd00::1]:80`). `None` for anything else.
pub fn with_example_port(target: &str) -> Option<std::net::SocketAddr> {
    let ip = target
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(target);
    ip.parse::<std::net::IpAddr>()
        .ok()
        .map(|ip| std::net::SocketAddr::new(ip, 80))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ip_without_a_port_gets_port_80_as_an_example() {
        let example = |t| with_example_port(t).map(|a| a.to_string());
        assert_eq!(example("10.96.0.1").as_deref(), Some("10.96.0.1:80"));
        assert_eq!(example("fd00::1").as_deref(), Some("[fd00::1]:80"));
        assert_eq!(example("[fd00::1]").as_deref(), Some("[fd00::1]:80"));
        assert_eq!(example("10.96.0.1:80"), None);
        assert_eq!(example("[fd00::1]:80"), None);
        assert_eq!(example("web.ns.svc.cluster.local"), None);
    }

    #[test]
    fn destination_uri_adds_http_and_refuses_other_schemes() {
        assert_eq!(
            destination_uri("127.0.0.1:8086").unwrap(),
            "http://127.0.0.1:8086"
        );
        assert_eq!(
            destination_uri("http://127.0.0.1:8086").unwrap(),
            "http://127.0.0.1:8086"
        );
        assert_eq!(
            destination_uri(" linkerd-dst.linkerd.svc:8086 ").unwrap(),
            "http://linkerd-dst.linkerd.svc:8086"
        );
        let error = destination_uri("https://127.0.0.1:8086").unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"invalid --destination "https://127.0.0.1:8086": scheme "https" is not supported, use http://host:port (plaintext)"#
        );
        assert!(destination_uri("").is_err());
        // Regression: an unreadable port was dialled as port 80.
        for addr in ["127.0.0.1:99999", "http://127.0.0.1:65536"] {
            let error = server_uri("--introspection", addr).unwrap_err();
            assert!(
                error.to_string().ends_with("is out of range 1-65535"),
                "{error}"
            );
        }
        assert!(server_uri("--policy", "127.0.0.1:0").is_err());
        let error = server_uri("--policy", "grpc://127.0.0.1:8090").unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"invalid --policy "grpc://127.0.0.1:8090": scheme "grpc" is not supported, use http://host:port (plaintext)"#
        );
        assert_eq!(
            server_uri("--policy", "127.0.0.1:8090").unwrap(),
            "http://127.0.0.1:8090"
        );
    }

    #[test]
    fn error_line_skips_repeated_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("{0}")]
        struct E(&'static str, #[source] Option<Box<E>>);
        let error = E(
            "transport error",
            Some(Box::new(E(
                "tcp connect error",
                Some(Box::new(E(
                    "tcp connect error",
                    Some(Box::new(E("Connection refused", None))),
                ))),
            ))),
        );
        assert_eq!(
            crate::error_line(&error),
            "transport error: tcp connect error: Connection refused"
        );
        // A cause its error already quotes at its end is not repeated.
        let error = E(
            "cannot read --cluster-state /x",
            Some(Box::new(E(
                "cluster state directory /x: No such file or directory (os error 2)",
                Some(Box::new(E("No such file or directory (os error 2)", None))),
            ))),
        );
        assert_eq!(
            crate::error_line(&error),
            "cannot read --cluster-state /x: cluster state directory /x: No such file or directory (os error 2)"
        );
    }

    #[tokio::test]
    async fn malformed_uri_is_an_invalid_destination() {
        let error = connect("http://a b:1").await.unwrap_err();
        assert!(
            matches!(&error, Error::InvalidDestination { addr, .. } if addr == "http://a b:1"),
            "{error}"
        );
    }

    #[test]
    fn a_server_is_a_host_and_a_port() {
        for (addr, uri) in [
            ("127.0.0.1:8086", "http://127.0.0.1:8086"),
            (" http://[::1]:8086/ ", "http://[::1]:8086/"),
            ("HTTP://localhost:8086", "HTTP://localhost:8086"),
        ] {
            assert_eq!(server_uri("--destination", addr).unwrap(), uri);
        }
        // Newcomer finding: user info, a path and a query were accepted and dropped.
        for (addr, reason) in [
            (
                "https://127.0.0.1:8086",
                "scheme \"https\" is not supported",
            ),
            ("127.0.0.1:0", "port 0 cannot be dialled"),
            ("127.0.0.1:70000", "port 70000 is out of range"),
            ("http://user:pw@127.0.0.1:8086", "user info is not used"),
            (
                "http://127.0.0.1:8086/path",
                "a path, query or fragment is not used",
            ),
            (
                "http://127.0.0.1:8086/?x=1",
                "a path, query or fragment is not used",
            ),
            (
                "http://127.0.0.1:8086/#frag",
                "a path, query or fragment is not used",
            ),
        ] {
            let error = server_uri("--destination", addr).unwrap_err().to_string();
            assert!(error.contains(reason), "{addr}: {error}");
            assert!(error.contains("--destination"), "{addr}: {error}");
        }
    }
}
