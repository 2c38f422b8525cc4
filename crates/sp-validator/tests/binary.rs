//! The `sp-validator` binary as a process: readiness on the admin port, a review over HTTPS,
//! a certificate reload, shutdown on SIGTERM, and a refused start without a certificate.

mod support;

use std::{
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A free port on 127.0.0.1 (bound, then released).
fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Writes a new self-signed certificate for `localhost` into `dir`, each file renamed into place
/// as a Secret update does; returns it (DER) for clients to trust.
fn install_cert(dir: &Path) -> rustls::pki_types::CertificateDer<'static> {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    for (name, pem) in [
        ("tls.crt", cert.pem()),
        ("tls.key", signing_key.serialize_pem()),
    ] {
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
    cert.der().clone()
}

fn spawn(dir: &Path, addr: SocketAddr, admin: SocketAddr) -> Child {
    Command::new(env!("CARGO_BIN_EXE_sp-validator"))
        .arg(format!("--addr={addr}"))
        .arg(format!("--admin-addr={admin}"))
        .arg(format!(
            "--server-tls-certs={}",
            dir.join("tls.crt").display()
        ))
        .arg(format!(
            "--server-tls-key={}",
            dir.join("tls.key").display()
        ))
        .arg("--log-level=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// GETs `path` from the admin server; `None` while it does not answer.
async fn admin_get(admin: SocketAddr, path: &str) -> Option<String> {
    let mut tcp = tokio::net::TcpStream::connect(admin).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    tcp.read_to_string(&mut response).await.ok()?;
    Some(response)
}

/// Retries `probe` every 50 ms for up to 10 s.
async fn eventually<F: std::future::Future<Output = bool>>(mut probe: impl FnMut() -> F) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if probe().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn serves_reloads_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let ca = install_cert(dir.path());
    let (addr, admin) = (free_addr(), free_addr());
    let mut child = spawn(dir.path(), addr, admin);

    let ready = eventually(|| async {
        admin_get(admin, "/ready")
            .await
            .is_some_and(|r| r.starts_with("HTTP/1.1 200") && r.ends_with("ok\n"))
    })
    .await;
    assert!(ready, "not ready in 10s");

    let review = mk_review(
        "admission.k8s.io/v1",
        "CREATE",
        Some(serde_json::json!({
            "apiVersion": "linkerd.io/v1alpha2",
            "kind": "ServiceProfile",
            "metadata": {"name": "web.ns.svc.cluster.local"},
            "spec": {"retryBudget": {"retryRatio": -0.5, "ttl": "10s"}},
        })),
    );
    let body = serde_json::to_vec(&review).unwrap();
    let reply = send_to(addr, &ca, "POST", "/", &body).await;
    assert_eq!(reply.status, 200);
    let answer: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(
        answer["response"]["status"]["message"],
        "ServiceProfile \"web.ns.svc.cluster.local\" RetryBudget RetryRatio must be non-negative: -0.500000"
    );

    let metrics = admin_get(admin, "/metrics").await.unwrap();
    assert!(
        metrics.contains("sp_validator_admission_reviews_total{result=\"denied\"} 1"),
        "{metrics}"
    );

    // A new certificate is served without a restart.
    let new_ca = install_cert(dir.path());
    let reloaded = eventually(|| async {
        let config = client_config(&new_ca, rustls::ALL_VERSIONS);
        let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
            return false;
        };
        tokio_rustls::TlsConnector::from(config)
            .connect(
                rustls::pki_types::ServerName::try_from("localhost").unwrap(),
                tcp,
            )
            .await
            .is_ok()
    })
    .await;
    assert!(reloaded, "the new certificate was not served within 10s");

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let start = Instant::now();
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "still running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "{exit:?}");
}

#[tokio::test]
async fn a_missing_certificate_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = spawn(dir.path(), free_addr(), free_addr())
        .wait_with_output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot read {}",
            dir.path().join("tls.crt").display()
        )),
        "{stderr}"
    );
}
