use super::*;
use axum::routing::get;
use rustls::{ClientConfig, RootCertStore, pki_types::ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A self-signed certificate for `localhost` and its key, as PEM.
struct Cert {
    der: CertificateDer<'static>,
    cert_pem: String,
    key_pem: String,
}

fn mk_cert() -> Cert {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    Cert {
        der: cert.der().clone(),
        cert_pem: cert.pem(),
        key_pem: signing_key.serialize_pem(),
    }
}

fn files(dir: &Path) -> TlsFiles {
    TlsFiles {
        certs: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    }
}

/// Writes both files the way a Secret update does: each new file renamed into place.
fn install(files: &TlsFiles, cert: &Cert) {
    for (path, pem) in [(&files.certs, &cert.cert_pem), (&files.key, &cert.key_pem)] {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
}

/// GETs `/` over TLS, trusting `roots`; returns the response text and the served leaf.
async fn fetch(
    addr: SocketAddr,
    roots: &[&Cert],
) -> Result<(String, CertificateDer<'static>), String> {
    let mut store = RootCertStore::empty();
    for root in roots {
        store.add(root.der.clone()).unwrap();
    }
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    tls.write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    tls.read_to_string(&mut response)
        .await
        .map_err(|e| e.to_string())?;
    Ok((response, leaf))
}

async fn start(
    files: &TlsFiles,
) -> (
    SocketAddr,
    crate::shutdown::Trigger,
    tokio::task::JoinHandle<()>,
) {
    let tls = ServerTls::load(files).unwrap();
    let server = HttpsServer::bind("127.0.0.1:0".parse().unwrap(), tls)
        .await
        .unwrap();
    let addr = server.local_addr();
    let router = Router::new().route("/", get(|| async { "hello over tls" }));
    let (trigger, shutdown) = crate::shutdown::channel();
    let task = tokio::spawn(server.serve(router, shutdown.signaled()));
    (addr, trigger, task)
}

#[tokio::test]
async fn serves_a_router_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let files = files(dir.path());
    let cert = mk_cert();
    install(&files, &cert);
    let (addr, trigger, task) = start(&files).await;

    let (response, leaf) = fetch(addr, &[&cert]).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.ends_with("\r\n\r\nhello over tls"), "{response}");
    assert_eq!(leaf, cert.der);

    // A client that does not trust the certificate fails the handshake.
    let other = mk_cert();
    let err = fetch(addr, &[&other]).await.unwrap_err();
    assert!(err.contains("certificate"), "{err}");

    trigger.trigger();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the server stops on shutdown")
        .unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn serves_the_new_certificate_once_the_files_change() {
    let dir = tempfile::tempdir().unwrap();
    let files = files(dir.path());
    let old = mk_cert();
    install(&files, &old);
    let (addr, _trigger, _task) = start(&files).await;
    assert_eq!(fetch(addr, &[&old]).await.unwrap().1, old.der);

    let new = mk_cert();
    install(&files, &new);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (response, leaf) = fetch(addr, &[&old, &new]).await.unwrap();
        assert!(response.ends_with("hello over tls"), "{response}");
        if leaf == new.der {
            break;
        }
        assert_eq!(leaf, old.der);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Only the new certificate is served from now on.
    assert_eq!(fetch(addr, &[&new]).await.unwrap().1, new.der);
}

#[tokio::test]
async fn a_bad_reload_keeps_the_served_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let files = files(dir.path());
    let cert = mk_cert();
    install(&files, &cert);
    let tls = ServerTls::load(&files).unwrap();
    assert_eq!(tls.reload().unwrap(), Reloaded::Unchanged);

    std::fs::write(&files.certs, "not a certificate").unwrap();
    let err = tls.reload().unwrap_err();
    assert!(
        matches!(&err, TlsError::NoCertificate { path } if *path == files.certs),
        "{err}"
    );
    assert_eq!(tls.current_chain(), vec![cert.der.clone()]);

    // A new certificate with the old key: the pair does not match.
    let other = mk_cert();
    std::fs::write(&files.certs, &other.cert_pem).unwrap();
    let err = tls.reload().unwrap_err();
    assert!(matches!(err, TlsError::Mismatch { .. }), "{err}");
    assert_eq!(tls.current_chain(), vec![cert.der.clone()]);

    install(&files, &other);
    assert_eq!(tls.reload().unwrap(), Reloaded::Changed);
    assert_eq!(tls.current_chain(), vec![other.der]);
}

#[test]
fn start_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let files = files(dir.path());
    let err = ServerTls::load(&files).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("cannot read {}: ", files.certs.display())),
        "{err}"
    );

    let cert = mk_cert();
    std::fs::write(&files.certs, &cert.cert_pem).unwrap();
    std::fs::write(&files.key, &cert.cert_pem).unwrap();
    let err = ServerTls::load(&files).unwrap_err().to_string();
    assert_eq!(
        err,
        format!("no PEM private key in {}", files.key.display())
    );

    std::fs::write(&files.key, &mk_cert().key_pem).unwrap();
    let err = ServerTls::load(&files).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "the key in {} does not match the certificate in {}",
            files.key.display(),
            files.certs.display()
        )),
        "{err}"
    );

    let garbled = cert.cert_pem.replace('M', "*");
    std::fs::write(&files.certs, garbled).unwrap();
    std::fs::write(&files.key, &cert.key_pem).unwrap();
    let err = ServerTls::load(&files).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "invalid PEM certificate in {}",
            files.certs.display()
        )),
        "{err}"
    );
}
