//! Clients with a trust-anchored certificate reach the upstream through the shim: gRPC without
//! ALPN to a real destination server, readiness, metrics, and certificate reloads.

mod support;

use linkerd_runtime::tls::ClientAuth;
use linkerd2_proxy_api::destination::{
    GetDestination, destination_client::DestinationClient, update,
};
use std::{net::SocketAddr, time::Duration};
use support::*;
use tonic::transport::Endpoint;

#[tokio::test]
async fn a_certified_client_without_alpn_gets_endpoints_from_destination() {
    let pki = Pki::new();
    let (destination, destination_shutdown) = start_destination().await;
    let shim = Harness::start(&pki, &[destination], ClientAuth::Required).await;
    shim.wait_ready().await;
    let listen = shim.listen[0];
    // The listener's series are there, at 0, before its first connection.
    let label = format!("listen=\"{listen}\"");
    assert_eq!(shim.metric("shim_tcp_open_total", &label).await, Some(0));
    assert_eq!(
        shim.metric("shim_tcp_open_connections", &label).await,
        Some(0)
    );

    let client = pki.leaf(CLIENT_IDENTITY);
    let connector = MeshConnector::new(listen, client_config(&pki, Some(&client), &[]));
    let channel =
        Endpoint::from_static("http://linkerd-dst-headless.linkerd.svc.cluster.local:8086")
            .connect_with_connector(connector.clone())
            .await
            .expect("a channel through the shim");
    let mut stream = DestinationClient::new(channel)
        .get(GetDestination {
            scheme: "k8s".into(),
            path: "web-svc.emojivoto.svc.cluster.local:80".into(),
            context_token: String::new(),
        })
        .await
        .expect("Get through the shim")
        .into_inner();
    let update = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("an update within 5s")
        .expect("stream ok")
        .expect("stream open")
        .update;
    let Some(update::Update::Add(set)) = update else {
        panic!("expected Add, got {update:?}");
    };
    let addrs: Vec<SocketAddr> = set
        .addrs
        .iter()
        .map(|a| a.addr.expect("addr").try_into().expect("an IP address"))
        .collect();
    assert_eq!(addrs, ["10.244.2.19:8080".parse::<SocketAddr>().unwrap()]);
    // The client offered no ALPN, so none was negotiated: h2 by prior knowledge (spec Z.5).
    assert_eq!(*connector.negotiated.lock().unwrap(), [None]);

    assert_eq!(shim.metric("shim_tcp_open_total", &label).await, Some(1));
    assert_eq!(
        shim.metric("shim_tcp_open_connections", &label).await,
        Some(1)
    );
    for reason in ["no_client_cert", "bad_client_cert", "other"] {
        let labels = format!("{label},reason=\"{reason}\"");
        assert_eq!(
            shim.metric("shim_tls_handshake_failures_total", &labels)
                .await,
            Some(0),
            "{reason}"
        );
    }
    assert_eq!(
        shim.metric("shim_upstream_connect_failures_total", &label)
            .await,
        Some(0)
    );

    // The destination server ends its streams and connections on shutdown: the relay ends
    // with them.
    destination_shutdown.trigger();
    let end = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("the stream ends within 5s");
    assert!(matches!(end, Ok(None)), "{end:?}");
    shim.wait_metric("shim_tcp_open_connections", &label, 0)
        .await;
    shim.stop().await;
}

#[tokio::test]
async fn ready_once_every_upstream_accepts_connections() {
    let pki = Pki::new();
    let echo = Echo::start().await;
    // A free port with nobody listening yet.
    let later = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let later_addr = later.local_addr().unwrap();
    drop(later);

    let shim = Harness::start(&pki, &[echo.addr, later_addr], ClientAuth::Required).await;
    assert_eq!(http_get(shim.admin, "/live").await, (200, "live\n".into()));
    // Any method, as the proxy's: only /shutdown checks it.
    assert_eq!(
        http_request(shim.admin, "DELETE", "/live").await,
        (200, "live\n".into())
    );
    assert_eq!(http_get(shim.admin, "/nope").await.0, 404);
    // The proxy's answers when its shutdown endpoint is not enabled (spec §d.3).
    assert_eq!(
        http_request(shim.admin, "POST", "/shutdown").await,
        (404, "shutdown endpoint is not enabled\n".into())
    );
    assert_eq!(http_get(shim.admin, "/shutdown").await.0, 405);
    // Whole paths only, as the proxy's: an empty 404 otherwise.
    assert_eq!(
        http_request(shim.admin, "POST", "/shutdown/").await,
        (404, String::new())
    );
    assert_eq!(http_get(shim.admin, "/nope").await, (404, String::new()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        http_get(shim.admin, "/ready").await,
        (503, "not ready\n".into())
    );

    // Meanwhile a client of the missing upstream is authenticated, then closed.
    let client = pki.leaf(CLIENT_IDENTITY);
    let mut tls = connect(shim.listen[1], client_config(&pki, Some(&client), &[]))
        .await
        .unwrap();
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut tls, &mut buf),
    )
    .await
    .expect("closed within 5s");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    shim.wait_metric(
        "shim_upstream_connect_failures_total",
        &format!("listen=\"{}\"", shim.listen[1]),
        1,
    )
    .await;

    let _upstream = tokio::net::TcpListener::bind(later_addr).await.unwrap();
    shim.wait_ready().await;
}

#[tokio::test]
async fn a_client_offering_h2_negotiates_it() {
    let pki = Pki::new();
    let echo = Echo::start().await;
    let shim = Harness::start(&pki, &[echo.addr], ClientAuth::Required).await;
    let client = pki.leaf(CLIENT_IDENTITY);
    let mut tls = connect(shim.listen[0], client_config(&pki, Some(&client), &[b"h2"]))
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    assert_eq!(echo_round_trip(&mut tls, b"hello").await, b"hello");
    assert_eq!(echo.used(), 1);
}

#[tokio::test]
async fn new_handshakes_get_a_swapped_certificate_while_open_streams_go_on() {
    let pki = Pki::new();
    let echo = Echo::start().await;
    let shim = Harness::start(&pki, &[echo.addr], ClientAuth::Required).await;
    let client = pki.leaf(CLIENT_IDENTITY);
    // A fresh client config per connection: a resumed TLS 1.3 session shows the certificate of
    // the session it resumes.
    let config = client_config(&pki, Some(&client), &[]);

    let mut open = connect(shim.listen[0], config).await.unwrap();
    let old = open.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(echo_round_trip(&mut open, b"before").await, b"before");

    let new = pki.leaf(&shim_identity());
    assert_ne!(new.der, old);
    install(shim.files.as_ref().unwrap(), &new);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let config = client_config(&pki, Some(&client), &[]);
        let mut tls = connect(shim.listen[0], config).await.unwrap();
        let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
        assert_eq!(echo_round_trip(&mut tls, b"probe").await, b"probe");
        if leaf == new.der {
            break;
        }
        assert_eq!(leaf, old);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The connection opened before the swap still relays.
    assert_eq!(echo_round_trip(&mut open, b"after").await, b"after");
    tokio::io::AsyncWriteExt::shutdown(&mut open).await.unwrap();
    shim.stop().await;
}

/// In file mode the expiry gauge is the served leaf's `notAfter`, and follows a reload
/// (newcomer finding: it was 0 in file mode, so an expiry alert would always fire).
#[tokio::test]
async fn the_expiry_gauge_follows_the_served_certificate_in_file_mode() {
    const GAUGE: &str = "shim_identity_cert_expiration_timestamp_seconds";
    let pki = Pki::new();
    let echo = Echo::start().await;
    let shim = Harness::start(&pki, &[echo.addr], ClientAuth::Required).await;
    let value = |text: String| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{GAUGE} ")).map(str::to_string))
            .unwrap_or_default()
    };
    // rcgen's default notAfter: 4096-01-01T00:00:00Z.
    assert_eq!(value(shim.metrics().await), "67090118400");

    install(
        shim.files.as_ref().unwrap(),
        &pki.leaf_until(&shim_identity(), (2030, 6, 1)),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    // 2030-06-01T00:00:00Z.
    while value(shim.metrics().await) != "1906502400" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            shim.metrics().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shim.stop().await;
}

/// A reloaded certificate that proxies would refuse (another CA's, or one for another
/// identity) is not served: every handshake meanwhile gets the previous certificate, which
/// clients still verify, and a valid one installed after is served.
#[tokio::test]
async fn a_reloaded_certificate_proxies_would_refuse_is_not_served() {
    let pki = Pki::new();
    let echo = Echo::start().await;
    let shim = Harness::start(&pki, &[echo.addr], ClientAuth::Required).await;
    let client = pki.leaf(CLIENT_IDENTITY);
    let handshake = || async {
        let config = client_config(&pki, Some(&client), &[]);
        let mut tls = connect(shim.listen[0], config)
            .await
            .expect("the handshake fails: the shim serves a certificate proxies refuse");
        let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
        assert_eq!(echo_round_trip(&mut tls, b"probe").await, b"probe");
        leaf
    };
    let old = handshake().await;

    let other_ca = Pki::new().leaf(&shim_identity());
    let other_identity = pki.leaf("web.emojivoto.serviceaccount.identity.linkerd.cluster.local");
    for refused in [&other_ca, &other_identity] {
        install(shim.files.as_ref().unwrap(), refused);
        // Past the reloader's debounce, many times over.
        let until = tokio::time::Instant::now() + Duration::from_millis(1500);
        while tokio::time::Instant::now() < until {
            assert_eq!(handshake().await, old);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    let new = pki.leaf(&shim_identity());
    install(shim.files.as_ref().unwrap(), &new);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let leaf = handshake().await;
        if leaf == new.der {
            break;
        }
        assert_eq!(leaf, old);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the valid certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shim.stop().await;
}
