//! Test harness: a PKI generated with rcgen (a trust anchor, the shim's leaf for the
//! destination identity, client leaves), a shim started in-process on `127.0.0.1:0` with its
//! admin server, upstreams (a real destination server over the emojivoto fixture, or an echo
//! server), and mesh-TLS clients with or without certificates and ALPN.

#![allow(dead_code)]

use destination::{DestinationMetrics, DestinationService, EndpointTranslator, TranslatorConfig};
use linkerd_index::{
    ClusterSource, DiscoveryIndex, IndexMetrics, PortSet, Watches, source::offline::OfflineSource,
};
use linkerd_runtime::{
    shutdown,
    tls::{ClientAuth, TlsFiles},
};
use mtls_shim::{AdminState, Config, Forward, Identity, Shim, ShimMetrics, local_identity};
use rustls::{
    ClientConfig, RootCertStore,
    pki_types::{CertificateDer, PrivateKeyDer, ServerName},
};
use std::{
    future::Future,
    io,
    net::SocketAddr,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};
use tokio_rustls::{TlsConnector, client::TlsStream};

/// The identity the shim presents in these tests (namespace `linkerd`, `cluster.local`).
pub fn shim_identity() -> String {
    local_identity("linkerd", "cluster.local")
}

/// A client proxy's identity.
pub const CLIENT_IDENTITY: &str = "web.emojivoto.serviceaccount.identity.linkerd.cluster.local";

// === PKI ===

/// A certificate and its key.
pub struct Leaf {
    pub der: CertificateDer<'static>,
    pub cert_pem: String,
    pub key_pem: String,
    key_der: Vec<u8>,
}

/// A trust anchor that issues leaves.
pub struct Pki {
    pub anchor: Leaf,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Leaf {
    fn new(cert: rcgen::Certificate, key: &rcgen::KeyPair) -> Self {
        Self {
            der: cert.der().clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            key_der: key.serialize_der(),
        }
    }

    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::try_from(self.key_der.clone()).expect("a PKCS#8 key")
    }
}

impl Pki {
    /// A new trust anchor (as linkerd's identity issuer chain would end in).
    pub fn new() -> Self {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "root.linkerd.cluster.local");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key).unwrap();
        let anchor = Leaf::new(cert, &key);
        Self {
            anchor,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A leaf for `name` issued by the anchor directly, usable by servers and clients (as
    /// linkerd-identity issues them).
    pub fn leaf(&self, name: &str) -> Leaf {
        self.leaf_with(name, |_| {})
    }

    /// The anchor as an issuer (the fake identity service signs CSRs with it).
    pub fn issuer(&self) -> &rcgen::Issuer<'static, rcgen::KeyPair> {
        &self.issuer
    }

    /// A leaf for `name` valid until `(year, month, day)`, midnight UTC.
    pub fn leaf_until(&self, name: &str, (year, month, day): (i32, u8, u8)) -> Leaf {
        self.leaf_with(name, |params| {
            params.not_after = rcgen::date_time_ymd(year, month, day);
        })
    }

    /// A leaf for `name` that expired in 2021.
    pub fn expired_leaf(&self, name: &str) -> Leaf {
        self.leaf_with(name, |params| {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        })
    }

    fn leaf_with(&self, name: &str, edit: impl FnOnce(&mut rcgen::CertificateParams)) -> Leaf {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        edit(&mut params);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf::new(cert, &key)
    }
}

/// A self-signed leaf for `name` (trusted by nobody).
pub fn self_signed_leaf(name: &str) -> Leaf {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.self_signed(&key).unwrap();
    Leaf::new(cert, &key)
}

/// Writes a certificate and key the way a Secret update does: each file renamed into place.
pub fn install(files: &TlsFiles, leaf: &Leaf) {
    for (path, pem) in [(&files.certs, &leaf.cert_pem), (&files.key, &leaf.key_pem)] {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
}

// === The shim ===

/// A shim serving on `127.0.0.1:0`, with its admin server.
pub struct Harness {
    /// The mesh-TLS listeners, in the order of the upstreams given.
    pub listen: Vec<SocketAddr>,
    pub admin: SocketAddr,
    /// The certificate files (file mode only).
    pub files: Option<TlsFiles>,
    pub trust_anchors: PathBuf,
    pub dir: tempfile::TempDir,
    trigger: Option<shutdown::Trigger>,
    task: tokio::task::JoinHandle<()>,
}

impl Harness {
    /// Starts a shim presenting a fresh leaf of `pki` for [`shim_identity`], forwarding one
    /// listener to each of `upstreams`.
    pub async fn start(pki: &Pki, upstreams: &[SocketAddr], client_auth: ClientAuth) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(dir.path(), pki, &pki.leaf(&shim_identity()), upstreams);
        Self::start_with(
            dir,
            Config {
                client_auth,
                ..config
            },
        )
        .await
    }

    /// Starts a shim with `config`, whose files are in `dir`.
    pub async fn start_with(dir: tempfile::TempDir, config: Config) -> Self {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = ShimMetrics::register(&mut registry);
        let shim = Shim::bind(&config, metrics).await.expect("the shim starts");
        let (trigger, shutdown) = shutdown::channel();
        let (admin, _) = AdminState::new(shim.ready(), Arc::new(registry))
            .bind("127.0.0.1:0".parse().unwrap(), shutdown.clone())
            .await
            .unwrap();
        let listen = shim.listen_addrs();
        let task = tokio::spawn(shim.serve(shutdown));
        Self {
            listen,
            admin,
            files: match config.identity {
                Identity::Files(files) => Some(files),
                Identity::Certify(_) => None,
            },
            trust_anchors: config.trust_anchors,
            dir,
            trigger: Some(trigger),
            task,
        }
    }

    /// Waits until `/ready` answers 200, failing the test after 10 s.
    pub async fn wait_ready(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (status, body) = http_get(self.admin, "/ready").await;
            if status == 200 {
                assert_eq!(body, "ready\n");
                return;
            }
            assert_eq!((status, body.as_str()), (503, "not ready\n"));
            assert!(
                tokio::time::Instant::now() < deadline,
                "the shim never became ready"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        let (status, body) = http_get(self.admin, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// The value of the series `name{labels}` (labels as printed, e.g.
    /// `listen="127.0.0.1:1",reason="other"`); `None` when it is not exported.
    pub async fn metric(&self, name: &str, labels: &str) -> Option<u64> {
        let series = format!("{name}{{{labels}}} ");
        self.metrics().await.lines().find_map(|line| {
            line.strip_prefix(&series)
                .map(|value| value.parse().expect("an integer metric"))
        })
    }

    /// Waits until `name{labels}` equals `want`, failing the test after 5 s: the shim counts
    /// a refused handshake after the client has seen the alert.
    pub async fn wait_metric(&self, name: &str, labels: &str, want: u64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let got = self.metric(name, labels).await;
            if got == Some(want) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name}{{{labels}}} is {got:?}, expected {want}\n{}",
                self.metrics().await
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Triggers shutdown and waits for the shim to stop.
    pub async fn stop(mut self) {
        if let Some(trigger) = self.trigger.take() {
            trigger.trigger();
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .expect("the shim stops on shutdown")
            .unwrap();
    }
}

/// Writes the shim's certificate, key and trust anchors into `dir` and returns a config that
/// forwards one listener on `127.0.0.1:0` to each upstream, requiring client certificates.
pub fn write_config(dir: &Path, pki: &Pki, leaf: &Leaf, upstreams: &[SocketAddr]) -> Config {
    let files = TlsFiles {
        certs: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    install(&files, leaf);
    let trust_anchors = dir.join("ca-bundle.crt");
    std::fs::write(&trust_anchors, &pki.anchor.cert_pem).unwrap();
    Config {
        forwards: upstreams
            .iter()
            .map(|&upstream| Forward {
                listen: "127.0.0.1:0".parse().unwrap(),
                upstream,
            })
            .collect(),
        identity: Identity::Files(files),
        trust_anchors,
        local_identity: shim_identity(),
        client_auth: ClientAuth::Required,
    }
}

/// `GET path` over HTTP/1.1; the status and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    http_request(addr, "GET", path).await
}

/// `method` of `path` (no body) on the plain HTTP server at `addr`: the status and the body.
pub async fn http_request(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: admin\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tcp.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a response");
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {head}"));
    (status, body.to_string())
}

// === Upstreams ===

/// The chart's destination flags (as the destination tests use them).
fn chart_config() -> TranslatorConfig {
    TranslatorConfig {
        controller_namespace: "linkerd".into(),
        trust_domain: "cluster.local".into(),
        enable_h2_upgrade: true,
        default_opaque_ports: PortSet::parse("25,587,3306,4444,5432,6379,9300,11211").0,
        meshed_http2_params: None,
        force_opaque_transport: false,
        ext_endpoint_zone_weights: false,
    }
}

/// A destination server on `127.0.0.1:0` over the emojivoto fixture; runs until the returned
/// trigger is triggered.
pub async fn start_destination() -> (SocketAddr, shutdown::Trigger) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/emojivoto");
    let metrics = IndexMetrics::default();
    let index = DiscoveryIndex::new();
    let mut watches = Watches::new(metrics.clone());
    index.watch(&mut watches);
    let source = OfflineSource::new(&dir, metrics).expect("the fixture");
    let started = watches.start(&ClusterSource::Offline(source)).await;
    let mut ready = started.ready();
    tokio::time::timeout(Duration::from_secs(10), ready.wait_for(|r| *r))
        .await
        .expect("index ready in time")
        .expect("ready channel");
    let (trigger, shutdown) = shutdown::channel();
    let service = DestinationService::new(
        index,
        EndpointTranslator::new(chart_config()),
        "cluster.local".into(),
        false,
        DestinationMetrics::default(),
        shutdown.clone(),
    );
    let (listener, addr) = destination::server::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    tokio::spawn(destination::serve(listener, service, shutdown));
    (addr, trigger)
}

/// An upstream that echoes every byte back, and counts the connections that sent any.
pub struct Echo {
    pub addr: SocketAddr,
    used: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Echo {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let used = Arc::new(AtomicUsize::new(0));
        let counter = used.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let mut counted = false;
                    while let Ok(n @ 1..) = tcp.read(&mut buf).await {
                        if !counted {
                            counter.fetch_add(1, Ordering::SeqCst);
                            counted = true;
                        }
                        if tcp.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Self { addr, used, task }
    }

    /// How many connections have sent bytes.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Writes `msg` and reads the same number of bytes back, failing the test after 5 s.
pub async fn echo_round_trip(tls: &mut TlsStream<TcpStream>, msg: &[u8]) -> Vec<u8> {
    tls.write_all(msg).await.unwrap();
    let mut buf = vec![0u8; msg.len()];
    tokio::time::timeout(Duration::from_secs(5), tls.read_exact(&mut buf))
        .await
        .expect("the echo within 5s")
        .unwrap();
    buf
}

// === Clients ===

/// A TLS 1.3 client config trusting `pki`'s anchor, presenting `cert` if any, offering
/// `alpn` (empty: no ALPN, as proxies connect to the control plane).
pub fn client_config(pki: &Pki, cert: Option<&Leaf>, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(pki.anchor.der.clone()).unwrap();
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots);
    let mut config = match cert {
        Some(leaf) => builder
            .with_client_auth_cert(vec![leaf.der.clone()], leaf.key())
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// Connects and handshakes with SNI = the shim's identity.
pub async fn connect(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
) -> io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(shim_identity()).unwrap();
    TlsConnector::from(config).connect(name, tcp).await
}

/// Connects with `config` and expects the shim to refuse: the rustls error the client ends
/// with (in TLS 1.3 a client's handshake completes before the server has checked its
/// certificate, so the refusal arrives as an alert on the first read).
pub async fn refused(addr: SocketAddr, config: Arc<ClientConfig>) -> rustls::Error {
    let error = match connect(addr, config).await {
        Err(error) => error,
        Ok(mut tls) => {
            let _ = tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
            let mut buf = [0u8; 64];
            match tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf))
                .await
                .expect("the shim answers within 5s")
            {
                Ok(n) => panic!("the shim accepted the connection (read {n} bytes)"),
                Err(error) => error,
            }
        }
    };
    match error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    {
        Some(error) => error.clone(),
        None => panic!("not a TLS error: {error}"),
    }
}

/// A tonic connector that dials `addr` with mesh TLS and records the ALPN protocol each
/// connection negotiated.
#[derive(Clone)]
pub struct MeshConnector {
    pub addr: SocketAddr,
    pub config: Arc<ClientConfig>,
    pub negotiated: Arc<Mutex<Vec<Option<Vec<u8>>>>>,
}

impl MeshConnector {
    pub fn new(addr: SocketAddr, config: Arc<ClientConfig>) -> Self {
        Self {
            addr,
            config,
            negotiated: Default::default(),
        }
    }
}

impl tonic::codegen::Service<tonic::codegen::http::Uri> for MeshConnector {
    type Response = hyper_util::rt::TokioIo<TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: tonic::codegen::http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let tls = connect(this.addr, this.config).await?;
            let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
            this.negotiated.lock().unwrap().push(alpn);
            Ok(hyper_util::rt::TokioIo::new(tls))
        })
    }
}
