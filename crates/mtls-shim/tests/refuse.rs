//! Clients without a certificate the trust anchors vouch for are refused with a TLS alert and
//! counted by reason; nothing reaches the upstream. With `--allow-unauthenticated`, clients
//! without a certificate are admitted, and bad certificates are still refused.

mod support;

use linkerd_runtime::tls::ClientAuth;
use rustls::AlertDescription;
use support::*;

#[tokio::test]
async fn a_client_without_a_certificate_is_refused_and_counted() {
    let pki = Pki::new();
    let echo = Echo::start().await;
    let shim = Harness::start(&pki, &[echo.addr], ClientAuth::Required).await;
    let listen = shim.listen[0];

    for _ in 0..2 {
        let error = refused(listen, client_config(&pki, None, &[])).await;
        assert_eq!(
            error,
            rustls::Error::AlertReceived(AlertDescription::CertificateRequired)
        );
    }
    shim.wait_metric(
        "shim_tls_handshake_failures_total",
        &format!("listen=\"{listen}\",reason=\"no_client_cert\""),
        2,
    )
    .await;
    let label = format!("listen=\"{listen}\"");
    assert_eq!(shim.metric("shim_tcp_open_total", &label).await, Some(2));
    assert_eq!(
        shim.metric("shim_tcp_open_connections", &label).await,
        Some(0)
    );
    assert_eq!(echo.used(), 0);

    // Once certified, the same client gets through (the proxy's retry, spec Z.6).
    let client = pki.leaf(CLIENT_IDENTITY);
    let mut tls = connect(listen, client_config(&pki, Some(&client), &[]))
        .await
        .unwrap();
    assert_eq!(echo_round_trip(&mut tls, b"certified").await, b"certified");
}

#[tokio::test]
async fn a_self_signed_client_certificate_is_refused() {
    let pki = Pki::new();
    let echo = Echo::start().await;
    let shim = Harness::start(&pki, &[echo.addr], ClientAuth::Required).await;
    let listen = shim.listen[0];

    let client = self_signed_leaf(CLIENT_IDENTITY);
    let error = refused(listen, client_config(&pki, Some(&client), &[])).await;
    assert_eq!(
        error,
        rustls::Error::AlertReceived(AlertDescription::UnknownCA)
    );
    // A certificate from another mesh whose anchor has the same name as ours: the issuer is
    // found by name, and its signature does not verify.
    let other = Pki::new().leaf(CLIENT_IDENTITY);
    let error = refused(listen, client_config(&pki, Some(&other), &[])).await;
    assert_eq!(
        error,
        rustls::Error::AlertReceived(AlertDescription::DecryptError)
    );
    shim.wait_metric(
        "shim_tls_handshake_failures_total",
        &format!("listen=\"{listen}\",reason=\"bad_client_cert\""),
        2,
    )
    .await;
    assert_eq!(echo.used(), 0);
}

#[tokio::test]
async fn an_expired_client_certificate_is_refused() {
    let pki = Pki::new();
    let echo = Echo::start().await;
    let shim = Harness::start(&pki, &[echo.addr], ClientAuth::Required).await;
    let listen = shim.listen[0];

    let client = pki.expired_leaf(CLIENT_IDENTITY);
    let error = refused(listen, client_config(&pki, Some(&client), &[])).await;
    assert_eq!(
        error,
        rustls::Error::AlertReceived(AlertDescription::CertificateExpired)
    );
    shim.wait_metric(
        "shim_tls_handshake_failures_total",
        &format!("listen=\"{listen}\",reason=\"bad_client_cert\""),
        1,
    )
    .await;
    assert_eq!(echo.used(), 0);
}

#[tokio::test]
async fn a_client_that_is_not_tls_is_counted_as_other() {
    let pki = Pki::new();
    let echo = Echo::start().await;
    let shim = Harness::start(&pki, &[echo.addr], ClientAuth::Required).await;
    let listen = shim.listen[0];

    let mut tcp = tokio::net::TcpStream::connect(listen).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut tcp, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    shim.wait_metric(
        "shim_tls_handshake_failures_total",
        &format!("listen=\"{listen}\",reason=\"other\""),
        1,
    )
    .await;
    assert_eq!(echo.used(), 0);
}

#[tokio::test]
async fn allow_unauthenticated_admits_clients_without_a_certificate_only() {
    let pki = Pki::new();
    let echo = Echo::start().await;
    let shim = Harness::start(&pki, &[echo.addr], ClientAuth::Optional).await;
    let listen = shim.listen[0];

    let mut tls = connect(listen, client_config(&pki, None, &[]))
        .await
        .unwrap();
    assert_eq!(echo_round_trip(&mut tls, b"anonymous").await, b"anonymous");

    let client = self_signed_leaf(CLIENT_IDENTITY);
    let error = refused(listen, client_config(&pki, Some(&client), &[])).await;
    assert_eq!(
        error,
        rustls::Error::AlertReceived(AlertDescription::UnknownCA)
    );
    shim.wait_metric(
        "shim_tls_handshake_failures_total",
        &format!("listen=\"{listen}\",reason=\"bad_client_cert\""),
        1,
    )
    .await;
    assert_eq!(echo.used(), 1);
}
