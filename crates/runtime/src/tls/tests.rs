use super::*;
use axum::routing::get;
use rustls::{ClientConfig, RootCertStore, pki_types::ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A review's time budget in these tests: longer than any of them runs.
const BUDGET: Duration = Duration::from_secs(3);

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
    // It names the client's address, as handlers learn it ([`PeerAddr`]).
    let router = Router::new().route(
        "/",
        get(|request: axum::extract::Request| async move {
            match PeerAddr::ip_of(request.extensions()) {
                Some(ip) => format!("hello over tls, {ip}"),
                None => "hello over tls, whoever you are".to_string(),
            }
        }),
    );
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
    assert!(
        response.ends_with("\r\n\r\nhello over tls, 127.0.0.1"),
        "{response}"
    );
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
        assert!(
            response.ends_with("hello over tls, 127.0.0.1"),
            "{response}"
        );
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

/// A CA, a `localhost` server leaf and a client leaf it issued, as PEM files in `dir`.
struct Mesh {
    server: TlsFiles,
    anchors: PathBuf,
    client: (CertificateDer<'static>, PrivateKeyDer<'static>),
    ca: CertificateDer<'static>,
}

fn mk_mesh(dir: &Path) -> Mesh {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf = |name: &str| {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (cert, key)
    };
    let (server_cert, server_key) = leaf("localhost");
    let (client_cert, client_key) = leaf("client.example");
    let server = files(dir);
    std::fs::write(&server.certs, server_cert.pem()).unwrap();
    std::fs::write(&server.key, server_key.serialize_pem()).unwrap();
    let anchors = dir.join("ca.crt");
    std::fs::write(&anchors, ca_cert.pem()).unwrap();
    Mesh {
        server,
        anchors,
        client: (
            client_cert.der().clone(),
            PrivateKeyDer::try_from(client_key.serialize_der()).unwrap(),
        ),
        ca: ca_cert.der().clone(),
    }
}

/// Handshakes with `server` as a client of `mesh` (with its client certificate or none),
/// offering `alpn`; returns the ALPN protocol the server negotiated, or its handshake error.
async fn mtls_handshake(
    server: &ServerTls,
    mesh: &Mesh,
    with_client_cert: bool,
    alpn: &[&[u8]],
) -> Result<Option<Vec<u8>>, io::Error> {
    let mut roots = RootCertStore::empty();
    roots.add(mesh.ca.clone()).unwrap();
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots);
    let mut config = if with_client_cert {
        builder
            .with_client_auth_cert(vec![mesh.client.0.clone()], mesh.client.1.clone_key())
            .unwrap()
    } else {
        builder.with_no_client_auth()
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = TlsAcceptor::from(server.config());
    let accepted = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let tls = acceptor.accept(tcp).await?;
        Ok::<_, io::Error>(tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec))
    });
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let client = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await;
    let server_side = accepted.await.unwrap();
    drop(client);
    server_side
}

#[tokio::test]
async fn mtls_verifies_client_certificates_and_accepts_clients_without_alpn() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = mk_mesh(dir.path());
    let anchors = TrustAnchors::load(&mesh.anchors).unwrap();
    let required = ServerTls::load_mtls(&mesh.server, &anchors, ClientAuth::Required).unwrap();

    assert_eq!(
        mtls_handshake(&required, &mesh, true, &[]).await.unwrap(),
        None
    );
    assert_eq!(
        mtls_handshake(&required, &mesh, true, &[b"h2"])
            .await
            .unwrap(),
        Some(b"h2".to_vec())
    );
    let err = mtls_handshake(&required, &mesh, false, &[])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.get_ref()
                .and_then(|e| e.downcast_ref::<rustls::Error>()),
            Some(rustls::Error::NoCertificatesPresented)
        ),
        "{err}"
    );

    let optional = ServerTls::load_mtls(&mesh.server, &anchors, ClientAuth::Optional).unwrap();
    assert_eq!(
        mtls_handshake(&optional, &mesh, false, &[]).await.unwrap(),
        None
    );
}

#[test]
fn trust_anchor_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.crt");
    let err = TrustAnchors::load(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("cannot read {}: ", path.display())),
        "{err}"
    );
    std::fs::write(&path, "no pem here").unwrap();
    let err = TrustAnchors::load(&path).unwrap_err().to_string();
    assert_eq!(
        err,
        format!("no PEM certificate in the trust anchors {}", path.display())
    );
    std::fs::write(
        &path,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let err = TrustAnchors::load(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("invalid trust anchors in {}: ", path.display())),
        "{err}"
    );
}

#[tokio::test]
async fn read_body_stops_at_the_limit() {
    let headers = |length: Option<usize>| {
        let mut headers = HeaderMap::new();
        if let Some(length) = length {
            headers.insert(header::CONTENT_LENGTH, length.into());
        }
        headers
    };
    // A stream of `frames` chunks of 4 bytes, unread until polled.
    let streamed = |frames: usize| {
        Body::from_stream(futures::stream::iter(
            (0..frames).map(|i| Ok::<_, std::io::Error>(Bytes::from(vec![i as u8; 4]))),
        ))
    };

    // Up to the limit: read whole, with or without a length.
    let body = read_body(&headers(Some(8)), streamed(2), 8).await.unwrap();
    assert_eq!(&body[..], &[0, 0, 0, 0, 1, 1, 1, 1]);
    assert_eq!(
        read_body(&headers(None), streamed(2), 8)
            .await
            .unwrap()
            .len(),
        8
    );

    // Over it as read, or as declared (then nothing is read: the body would fail if polled).
    let too_large =
        |result: Result<Bytes, BodyError>| matches!(result, Err(BodyError::TooLarge { limit: 8 }));
    assert!(too_large(read_body(&headers(None), streamed(3), 8).await));
    let unreadable = Body::from_stream(futures::stream::once(async {
        Err::<Bytes, _>(std::io::Error::other("read"))
    }));
    assert!(too_large(read_body(&headers(Some(9)), unreadable, 8).await));
    assert_eq!(
        BodyError::TooLarge { limit: 8 }.to_string(),
        "the request body is larger than 8 bytes"
    );

    // A body that breaks off.
    let unreadable = Body::from_stream(futures::stream::once(async {
        Err::<Bytes, _>(std::io::Error::other("connection reset"))
    }));
    let error = read_body(&headers(None), unreadable, 8).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "cannot read the request body: connection reset"
    );
}

#[tokio::test]
async fn an_early_answer_reaches_a_client_still_sending() {
    let dir = tempfile::tempdir().unwrap();
    let files = files(dir.path());
    let cert = mk_cert();
    install(&files, &cert);
    let (addr, _trigger, _task) = start(&files).await;

    // The route answers without reading the body; the client sends all 20 MB of it before
    // reading. Closed at once, the connection would be reset under the client's writes.
    let mut roots = RootCertStore::empty();
    roots.add(cert.der.clone()).unwrap();
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let body = vec![b'x'; 20_000_000];
    let head = format!(
        "GET / HTTP/1.1\r\nhost: localhost\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&body)
        .await
        .expect("the server reads what the client sends after the answer");
    tls.flush().await.unwrap();
    let mut response = String::new();
    tls.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(
        response.ends_with("\r\n\r\nhello over tls, 127.0.0.1"),
        "{response}"
    );
}

fn with_length(length: Option<usize>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Some(length) = length {
        headers.insert(header::CONTENT_LENGTH, length.into());
    }
    headers
}

/// A body whose bytes arrive when sent on the returned channel, and which ends when it drops.
fn fed_body() -> (futures::channel::mpsc::UnboundedSender<Bytes>, Body) {
    let (tx, rx) = futures::channel::mpsc::unbounded::<Bytes>();
    (tx, Body::from_stream(rx.map(Ok::<_, std::io::Error>)))
}

/// A body takes its declared size when its first bytes arrive and holds it until its
/// `HeldBody` drops; one that does not fit waits; one declared larger than the limit is refused
/// at once, however full the budget.
#[tokio::test]
async fn a_body_budget_holds_at_most_its_bytes_of_bodies() {
    use futures::FutureExt;
    let budget = BodyBudget::new(10, 8, 100);
    let (tx_a, body_a) = fed_body();
    let headers_a = with_length(Some(8));
    let mut a = Box::pin(budget.read(None, &headers_a, body_a));
    assert!(
        (&mut a).now_or_never().is_none(),
        "its body has not arrived"
    );
    assert_eq!(
        budget.available(),
        10,
        "a declared body that did not start holds nothing"
    );
    tx_a.unbounded_send(Bytes::from_static(b"1234567")).unwrap();
    assert!((&mut a).now_or_never().is_none());
    assert_eq!(budget.available(), 2, "the 8 bytes declared");

    // 4 bytes do not fit beside a's 8: b waits.
    let headers_b = with_length(Some(4));
    let mut b = Box::pin(budget.read(None, &headers_b, Body::from("four")));
    assert!((&mut b).now_or_never().is_none());
    // Refused without waiting, though the budget is full.
    let too_large = budget
        .read(None, &with_length(Some(9)), Body::from("ninebytes"))
        .now_or_never()
        .expect("not waiting");
    assert!(matches!(too_large, Err(BodyError::TooLarge { limit: 8 })));

    tx_a.unbounded_send(Bytes::from_static(b"8")).unwrap();
    drop(tx_a);
    let held_a = a.await.unwrap();
    assert_eq!(&held_a[..], b"12345678");
    assert!((&mut b).now_or_never().is_none(), "a is still held");
    drop(held_a);
    let held_b = b.await.unwrap();
    assert_eq!(&held_b[..], b"four");
    assert_eq!(budget.available(), 6);
    drop(held_b);

    // A body that declares no length takes the per-body limit; an empty one nothing.
    let (tx_c, body_c) = fed_body();
    let no_length = with_length(None);
    let mut c = Box::pin(budget.read(None, &no_length, body_c));
    tx_c.unbounded_send(Bytes::from_static(b"abc")).unwrap();
    assert!((&mut c).now_or_never().is_none());
    assert_eq!(budget.available(), 2);
    drop(tx_c);
    assert_eq!(&c.await.unwrap()[..], b"abc");
    let empty = budget
        .read(None, &with_length(Some(0)), Body::empty())
        .await
        .unwrap();
    assert!(empty.is_empty());
    assert_eq!(budget.available(), 10);
}

/// With a pool for small bodies, a body that declares at most its size is read at once while
/// a stalled large body holds the whole budget; one larger, or declaring no length, waits.
#[tokio::test(start_paused = true)]
async fn small_bodies_do_not_wait_behind_large_ones() {
    use futures::FutureExt;
    let budget = BodyBudget::new(10, 10, 100).with_small_bodies(4, 6);
    assert_eq!(budget.small_available(), 6);
    let (tx, stalled) = fed_body();
    tx.unbounded_send(Bytes::from_static(b"{")).unwrap();
    let headers = with_length(Some(10));
    let mut stalled = Box::pin(budget.read(None, &headers, stalled));
    assert!((&mut stalled).now_or_never().is_none());
    assert_eq!(budget.available(), 0);

    let small = budget
        .read(None, &with_length(Some(4)), Body::from("four"))
        .now_or_never()
        .expect("not waiting")
        .unwrap();
    assert_eq!(&small[..], b"four");
    assert_eq!(
        budget.small_available(),
        2,
        "the 4 bytes declared, from the small pool"
    );
    drop(small);
    assert_eq!(budget.small_available(), 6);

    let no_length = with_length(None);
    let mut unsized_body = Box::pin(budget.read(None, &no_length, Body::from("abc")));
    assert!(
        (&mut unsized_body).now_or_never().is_none(),
        "no length: not small"
    );
    let five = with_length(Some(5));
    let mut larger = Box::pin(budget.read(None, &five, Body::from("fives")));
    assert!(
        (&mut larger).now_or_never().is_none(),
        "over the small size"
    );
    assert_eq!(budget.small_available(), 6);
    drop(tx);
    drop(stalled);
    assert_eq!(&unsized_body.await.unwrap()[..], b"abc");
    assert_eq!(&larger.await.unwrap()[..], b"fives");
}

/// A client address has at most `BODIES_PER_PEER` bodies being read at once: its next one
/// waits for one of them, outside the budget's queue, so bodies from other addresses (and from
/// no known address) are read at once, though the small bodies' pool has room for more.
#[tokio::test]
async fn a_peer_has_at_most_its_turns_in_the_budget() {
    use futures::FutureExt;
    let budget = BodyBudget::new(1_000, 10, 100).with_small_bodies(4, 1_000);
    let greedy: IpAddr = "10.0.0.1".parse().unwrap();
    let other: IpAddr = "10.0.0.2".parse().unwrap();
    let headers = with_length(Some(4));
    let mut senders = Vec::new();
    let mut stalled = Vec::new();
    for _ in 0..BODIES_PER_PEER {
        let (tx, body) = fed_body();
        tx.unbounded_send(Bytes::from_static(b"{")).unwrap();
        let mut read = Box::pin(budget.read(Some(greedy), &headers, body));
        assert!((&mut read).now_or_never().is_none());
        senders.push(tx);
        stalled.push(read);
    }
    assert_eq!(budget.small_available(), 1_000 - 4 * BODIES_PER_PEER);
    let mut next = Box::pin(budget.read(Some(greedy), &headers, Body::from("next")));
    assert!(
        (&mut next).now_or_never().is_none(),
        "a peer's body past its turns waits"
    );
    assert_eq!(budget.small_available(), 1_000 - 4 * BODIES_PER_PEER);
    for peer in [Some(other), None] {
        let read = budget
            .read(peer, &headers, Body::from("four"))
            .now_or_never()
            .expect("not waiting")
            .unwrap();
        assert_eq!(&read[..], b"four");
    }
    // One of the stalled bodies ends: the waiting one has its turn, while the one read is
    // still held (judged): a turn is for reading (tester finding: held while judging, eight
    // slow reviews from the API server's address kept its next review from being read for
    // 10 s, which was then refused as a body that "did not arrive").
    senders[0]
        .unbounded_send(Bytes::from_static(b"}}}"))
        .unwrap();
    senders.remove(0);
    let done = stalled.remove(0).await.unwrap();
    assert_eq!(&done[..], b"{}}}");
    let next = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("a body read gives its turn back");
    assert_eq!(&next.unwrap()[..], b"next");
    drop(done);
}

/// Decoding shares wait until they fit; one larger than the whole budget takes all of it.
#[tokio::test]
async fn decoding_shares_wait_for_room() {
    use futures::FutureExt;
    let budget = BodyBudget::new(10, 8, 100);
    let first = budget.decoding(70).await;
    assert_eq!(budget.decoding_available(), 30);
    let mut second = Box::pin(budget.decoding(50));
    assert!((&mut second).now_or_never().is_none());
    drop(first);
    let second = second.await;
    let mut whole = Box::pin(budget.decoding(1_000));
    assert!((&mut whole).now_or_never().is_none());
    drop(second);
    let _whole = whole.await;
    assert_eq!(budget.decoding_available(), 0);
}

/// Cheap decodings take their share from their own pool: one waits for nothing while a costly
/// share waits for room (shares are handed out in turn, so without the pool it waited behind
/// it), and a cheap one that does not fit its pool waits there.
#[tokio::test]
async fn cheap_decodings_do_not_wait_behind_costly_ones() {
    use futures::FutureExt;
    let budget = BodyBudget::new(10, 8, 100).with_cheap_decoding(5, 12);
    let costly = budget.decoding(80).await;
    let mut waiting = Box::pin(budget.decoding(50));
    assert!((&mut waiting).now_or_never().is_none());
    let cheap = budget
        .decoding(5)
        .now_or_never()
        .expect("a cheap decoding waits behind no costly one");
    // The waiting share holds what is left of the costly pool until it fits.
    assert_eq!(
        (
            budget.decoding_available(),
            budget.cheap_decoding_available()
        ),
        (0, 7)
    );
    let second = budget.decoding(5).await;
    let mut third = Box::pin(budget.decoding(5));
    assert!(
        (&mut third).now_or_never().is_none(),
        "the cheap pool is full"
    );
    drop(cheap);
    let _third = third.await;
    // A cost of 6 is not cheap: it waits in the costly queue.
    let mut six = Box::pin(budget.decoding(6));
    assert!((&mut six).now_or_never().is_none());
    drop((costly, second));
    let _waiting = waiting.await;
    let _six = six.await;
    assert_eq!(budget.decoding_available(), 44);
    assert_eq!(BodyBudget::new(10, 8, 100).cheap_decoding_available(), 0);
}

/// A body that never starts holds nothing, and is given up after `BODY_READ_TIMEOUT`.
#[tokio::test(start_paused = true)]
async fn a_body_that_does_not_arrive_times_out() {
    let budget = BodyBudget::new(10, 8, 100);
    let (_tx, body) = fed_body();
    let started = tokio::time::Instant::now();
    let error = budget
        .read(None, &with_length(Some(8)), body)
        .await
        .unwrap_err();
    assert!(matches!(error, BodyError::Timeout));
    assert_eq!(started.elapsed(), BODY_READ_TIMEOUT);
    assert_eq!(
        error.to_string(),
        "the request body did not arrive within 10s"
    );
    assert_eq!(budget.available(), 10);
}

/// A body that starts and then stalls gives its share back after `body_hold_time` of its
/// size, so that the body waiting for room is read within seconds, not after the whole
/// `BODY_READ_TIMEOUT` (three stalled 10 MiB bodies kept small reviews waiting 9.5 s).
#[tokio::test(start_paused = true)]
async fn a_body_that_stalls_frees_its_share_after_its_hold_time() {
    let limit = 10 * 1024 * 1024;
    assert_eq!(body_hold_time(limit), Duration::from_millis(3500));
    assert_eq!(body_hold_time(5_000), Duration::from_millis(1_001));
    assert_eq!(body_hold_time(10_000_000), Duration::from_millis(3_384));
    assert_eq!(
        BodyError::TooSlow {
            size: 10_000_000,
            allowed: body_hold_time(10_000_000)
        }
        .to_string(),
        "the request body (10000000 bytes) did not arrive within 3.384s of its turn (1s, and 1s more per 4 MiB)"
    );
    let budget = BodyBudget::new(limit, limit, 100);
    let (tx, stalled) = fed_body();
    tx.unbounded_send(Bytes::from_static(b"{")).unwrap();
    let headers = with_length(Some(limit));
    let stalled = tokio::spawn({
        let budget = budget.clone();
        async move { budget.read(None, &headers, stalled).await }
    });
    tokio::task::yield_now().await;
    assert_eq!(budget.available(), 0);

    let started = tokio::time::Instant::now();
    let small = budget
        .read(None, &with_length(Some(5)), Body::from("small"))
        .await
        .expect("read once the stalled body is given up");
    assert_eq!(&small[..], b"small");
    assert_eq!(started.elapsed(), Duration::from_millis(3500));
    let error = stalled.await.unwrap().unwrap_err();
    assert!(matches!(error, BodyError::TooSlow { size, .. } if size == limit));
    assert_eq!(
        error.to_string(),
        "the request body (10485760 bytes) did not arrive within 3.5s of its turn (1s, and 1s more per 4 MiB)"
    );
    drop(tx);
}

/// A review's work holds its slot until it ends, even when its caller has gone (the client
/// hung up): clients that leave cannot pile up work beyond the slots.
#[tokio::test]
async fn review_work_holds_its_slot_until_it_ends() {
    let workers = ReviewWorkers::new(1);
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let (started, mut running) = tokio::sync::oneshot::channel::<()>();
    // `run` calls its judge by reference, from any thread.
    let (started, wait) = (Mutex::new(Some(started)), Mutex::new(wait));
    let caller = tokio::spawn({
        let workers = workers.clone();
        async move {
            workers
                .run(0, 0, BUDGET, move |_| {
                    started.lock().unwrap().take().map(|s| s.send(()));
                    Judged::done(wait.lock().unwrap().recv().ok())
                })
                .await
        }
    });
    (&mut running).await.unwrap();
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    assert_eq!(workers.available(), 0, "the work still runs");
    release.send(()).unwrap();
    // The next review runs once the first ends.
    assert_eq!(
        workers
            .run(0, 0, BUDGET, |_| Judged::done(7))
            .await
            .unwrap(),
        7
    );
    assert_eq!(workers.available(), 1);
    // A panic in the work is an error for its caller, and frees the slot.
    assert!(
        workers
            .run(0, 0, BUDGET, |_| -> Judged<()> { panic!("judge") })
            .await
            .unwrap_err()
            .is_panic()
    );
    assert_eq!(workers.available(), 1);
    assert_eq!(ReviewWorkers::new(0).available(), 1);
}

/// Cheap reviews are judged in slots of their own: while every costly slot is busy and more
/// costly reviews wait, a cheap one runs at once (newcomer finding: eight slow reviews kept an
/// ordinary one waiting 11.6 s). Costs above the lane's limit are costly.
#[tokio::test]
async fn cheap_reviews_are_judged_beside_costly_ones() {
    let workers = ReviewWorkers::new(1).with_cheap_lane(100, BUDGET);
    assert_eq!((workers.available(), workers.cheap_available()), (1, 1));
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let (started, running) = tokio::sync::oneshot::channel::<()>();
    let (started, wait) = (Mutex::new(Some(started)), Mutex::new(wait));
    let busy = tokio::spawn({
        let workers = workers.clone();
        async move {
            workers
                .run(101, 0, BUDGET, move |_| {
                    started.lock().unwrap().take().map(|s| s.send(()));
                    Judged::done(wait.lock().unwrap().recv().ok())
                })
                .await
        }
    });
    running.await.unwrap();
    let queued = tokio::spawn({
        let workers = workers.clone();
        async move {
            workers
                .run(5_000, 0, BUDGET, |_| Judged::done("costly"))
                .await
        }
    });
    let cheap = tokio::time::timeout(
        Duration::from_secs(10),
        workers.run(100, 0, BUDGET, |_| Judged::done("cheap")),
    )
    .await
    .expect("a cheap review waits for no costly one");
    assert_eq!(cheap.unwrap(), "cheap");
    assert!(!queued.is_finished());
    release.send(()).unwrap();
    assert_eq!(busy.await.unwrap().unwrap(), Some(()));
    assert_eq!(queued.await.unwrap().unwrap(), "costly");
    assert_eq!((workers.available(), workers.cheap_available()), (1, 1));
    assert_eq!(ReviewWorkers::new(3).cheap_available(), 0);
}

/// A cheap review that needs more than the cheap lane's time gives its slot up and is judged
/// again, from the start and with the whole budget, in a costly slot: the cheap lane is held
/// at most its time per review, so ordinary reviews are not queued for seconds behind cheap
/// ones that are slow to judge (tester finding: ten ServiceProfiles of 250 slow regexes kept
/// an ordinary review waiting 15 s).
#[tokio::test]
async fn cheap_reviews_slow_to_judge_are_judged_again_among_costly_ones() {
    let cheap_time = Duration::from_millis(50);
    let workers = ReviewWorkers::new(1).with_cheap_lane(100, cheap_time);
    // Judging that needs 1 s: cut short by any shorter time, as a regex budget does.
    let slow = |judging: Judging| {
        let Judging::Within(time) = judging else {
            panic!("{judging:?}")
        };
        let needed = Duration::from_secs(1);
        std::thread::sleep(time.min(needed));
        Judged {
            answer: if time >= needed {
                "judged"
            } else {
                "cut short"
            },
            out_of_time: time < needed,
        }
    };
    let times = Arc::new(Mutex::new(Vec::new()));
    let slow_review = {
        let (workers, times) = (workers.clone(), times.clone());
        tokio::spawn(async move {
            workers
                .run(10, 0, BUDGET, move |judging| {
                    times.lock().unwrap().push(judging);
                    slow(judging)
                })
                .await
        })
    };
    // Once it has left the cheap lane, an ordinary review is judged at once.
    tokio::time::timeout(Duration::from_secs(5), async {
        while times.lock().unwrap().len() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("judged again");
    assert_eq!(workers.available(), 0, "judged again in the costly slot");
    let ordinary = tokio::time::timeout(
        Duration::from_millis(500),
        workers.run(10, 0, BUDGET, |_| Judged::done("ordinary")),
    )
    .await
    .expect("the cheap lane is free");
    assert_eq!(ordinary.unwrap(), "ordinary");
    assert_eq!(slow_review.await.unwrap().unwrap(), "judged");
    assert_eq!(
        *times.lock().unwrap(),
        [Judging::Within(cheap_time), Judging::Within(BUDGET)]
    );
    // A costly review, and a cheap one that ran out of the whole budget, are answered as cut.
    let times = Arc::new(Mutex::new(Vec::new()));
    let judge = {
        let times = times.clone();
        move |judging: Judging| {
            times.lock().unwrap().push(judging);
            Judged {
                answer: judging,
                out_of_time: true,
            }
        }
    };
    let short = Duration::from_millis(20);
    let (budget, short_budget) = (Judging::Within(BUDGET), Judging::Within(short));
    assert_eq!(
        workers.run(101, 0, BUDGET, judge.clone()).await.unwrap(),
        budget
    );
    assert_eq!(
        workers.run(10, 0, short, judge).await.unwrap(),
        short_budget
    );
    assert_eq!(*times.lock().unwrap(), [budget, short_budget]);
    assert_eq!((workers.available(), workers.cheap_available()), (1, 1));
}

/// A review that has waited the longest allowed for a slot is answered unjudged, at once and
/// without a slot, whichever lane it waited in, and the wait counts in all when a cheap review
/// waits again for a costly slot (tester finding: of sixteen slow reviews sent at once, the
/// last were answered after 24 s, long after the API server had given up on them).
/// A review still judged its time and the grace after it is answered without waiting
/// ([`Judging::Overran`]), as one out of time: a cheap one is judged again among the costly
/// ones, and answered so there. Its judging goes on, holding its slots, until it ends (tester
/// finding: one regex took seconds to translate, and reviews of two were answered after the
/// API server had given up on them).
#[tokio::test]
async fn reviews_judged_past_their_time_are_answered_without_waiting() {
    let grace = Duration::from_millis(50);
    let time = Duration::from_millis(200);
    let workers = ReviewWorkers::new(1)
        .with_cheap_lane(100, Duration::from_millis(10))
        .with_overrun(grace);
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let wait = Arc::new(Mutex::new(wait));
    let judge = move |judging: Judging| {
        if let Judging::Within(_) = judging {
            // A step that does not look at the time: until released.
            let _ = wait.lock().unwrap().recv();
        }
        Judged::done(judging)
    };
    let start = std::time::Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(5), workers.run(1, 0, time, judge)).await;
    let took = start.elapsed();
    let held = (workers.available(), workers.cheap_available());
    drop(release);
    assert_eq!(
        answer.expect("answered").unwrap(),
        Judging::Overran { time }
    );
    assert!(
        took >= time + grace && took < Duration::from_secs(2),
        "{took:?}"
    );
    // Both judgings went on, in their slots.
    assert_eq!(held, (0, 0));
    while (workers.available(), workers.cheap_available()) != (1, 1) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "slots not given back"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn reviews_that_wait_too_long_for_a_slot_are_answered_unjudged() {
    let max_wait = Duration::from_millis(400);
    let workers = ReviewWorkers::new(1)
        .with_cheap_lane(100, Duration::from_millis(10))
        .with_max_wait(max_wait);
    // Both lanes busy until released.
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let wait = Arc::new(Mutex::new(wait));
    let mut busy = Vec::new();
    for cost in [101, 1] {
        let (lanes, wait) = (workers.clone(), wait.clone());
        busy.push(tokio::spawn(async move {
            lanes
                .run(cost, 0, BUDGET, move |_| {
                    Judged::done(wait.lock().unwrap().recv().ok())
                })
                .await
        }));
        while (workers.available(), workers.cheap_available()) != (0, usize::from(cost == 101)) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let answer = |judging: Judging| Judged::done(judging);
    for cost in [5_000, 100] {
        let Judging::Unjudged { waited } = workers.run(cost, 0, BUDGET, answer).await.unwrap()
        else {
            panic!("judged")
        };
        assert!(waited >= max_wait && waited < max_wait * 10, "{waited:?}");
    }
    // Released, a review is judged again.
    drop(release);
    for task in busy {
        assert_eq!(task.await.unwrap().unwrap(), None);
    }
    assert_eq!(
        workers.run(100, 0, BUDGET, answer).await.unwrap(),
        Judging::Within(Duration::from_millis(10))
    );
    // A cheap review out of its lane's time waits for a costly slot only what is left.
    let hold = workers.clone();
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let wait = Mutex::new(wait);
    let holder = tokio::spawn(async move {
        hold.run(5_000, 0, BUDGET, move |_| {
            Judged::done(wait.lock().unwrap().recv().ok())
        })
        .await
    });
    while workers.available() != 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let slow_cheap = |judging: Judging| match judging {
        Judging::Within(time) if time < BUDGET => {
            std::thread::sleep(Duration::from_millis(300));
            Judged {
                answer: judging,
                out_of_time: true,
            }
        }
        _ => Judged::done(judging),
    };
    let started = std::time::Instant::now();
    let Judging::Unjudged { waited } = workers.run(1, 0, BUDGET, slow_cheap).await.unwrap() else {
        panic!("judged")
    };
    // Unjudged 400 ms after it began waiting, not 300 ms in the cheap lane and 400 more.
    assert!(waited >= max_wait, "{waited:?}");
    assert!(
        started.elapsed() < max_wait + Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    release.send(()).unwrap();
    assert_eq!(holder.await.unwrap().unwrap(), Some(()));
}

/// A review takes its decoding share with its slot, and a cheap review judged again among the
/// costly ones gives its cheap share back and waits for a costly slot holding none: reviews
/// waiting for a costly slot no longer fill the cheap pool (tester finding: 18 profiles of
/// 250 slow regexes kept an ordinary review waiting 1.9 s, 32 of them 24 s).
#[tokio::test]
async fn a_review_takes_its_decoding_share_with_its_slot() {
    let budget = BodyBudget::new(10, 8, 100).with_cheap_decoding(5, 5);
    let workers = ReviewWorkers::new(1)
        .with_cheap_lane(100, Duration::from_millis(10))
        .with_decoding(budget.clone());
    // The costly slot busy, with 50 bytes of decoding.
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let wait = Mutex::new(wait);
    let holder = tokio::spawn({
        let workers = workers.clone();
        async move {
            workers
                .run(5_000, 50, BUDGET, move |_| {
                    Judged::done(wait.lock().unwrap().recv().ok())
                })
                .await
        }
    });
    while workers.available() != 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(budget.decoding_available(), 50);
    // A cheap review slow to judge: out of its lane's time, then waiting for the costly slot.
    let judged = Arc::new(Mutex::new(Vec::new()));
    let slow = tokio::spawn({
        let (workers, judged) = (workers.clone(), judged.clone());
        async move {
            workers
                .run(1, 5, BUDGET, move |judging| {
                    judged.lock().unwrap().push(judging);
                    Judged {
                        answer: judging,
                        out_of_time: judging != Judging::Within(BUDGET),
                    }
                })
                .await
        }
    });
    while judged.lock().unwrap().is_empty() || workers.cheap_available() != 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        (
            budget.cheap_decoding_available(),
            budget.decoding_available()
        ),
        (5, 50),
        "waiting for a slot, it holds no share"
    );
    // An ordinary cheap review takes the whole cheap pool at once.
    let ordinary = tokio::time::timeout(
        Duration::from_secs(5),
        workers.run(1, 5, BUDGET, |_| Judged::done("ordinary")),
    )
    .await
    .expect("the cheap pool is free");
    assert_eq!(ordinary.unwrap(), "ordinary");
    release.send(()).unwrap();
    assert_eq!(holder.await.unwrap().unwrap(), Some(()));
    assert_eq!(slow.await.unwrap().unwrap(), Judging::Within(BUDGET));
    assert_eq!(
        *judged.lock().unwrap(),
        [
            Judging::Within(Duration::from_millis(10)),
            Judging::Within(BUDGET)
        ]
    );
    assert_eq!(
        (
            budget.cheap_decoding_available(),
            budget.decoding_available()
        ),
        (5, 100)
    );
}
