//! Certify mode through the real transport: a fake linkerd-identity (tonic over TLS with a
//! certificate of the test trust anchor) checks the token, the identity and the CSR and signs
//! the CSR with the anchor; the shim then serves the issued leaf to mTLS clients, becomes
//! ready, and renews it without dropping open connections.

mod support;

use linkerd_runtime::tls::ClientAuth;
use linkerd2_proxy_api::identity::{
    CertifyRequest, CertifyResponse,
    identity_server::{Identity as IdentityService, IdentityServer},
};
use mtls_shim::{
    CertifyConfig, Config, Forward, Identity, IdentityAddr, identity_service_identity,
};
use rustls::pki_types::CertificateDer;
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};
use support::*;
use tokio::{net::TcpListener, sync::watch};
use tonic::{Request, Response, Status};

const TOKEN: &[u8] = b"eyJhbGciOiJSUzI1NiJ9.token-of-linkerd-destination";

/// What the fake identity service answers after its checks.
#[derive(Copy, Clone)]
enum Answer {
    /// Signs the CSR; `valid_until` is now + this.
    Sign(Duration),
    /// Refuses with PermissionDenied (as a TokenReview that rejects the token).
    Refuse,
}

/// A request the fake accepted, as it saw it.
struct Seen {
    identity: String,
    token: Vec<u8>,
    csr_dns_sans: Vec<String>,
}

#[derive(Clone)]
struct FakeIdentity {
    pki: Arc<Pki>,
    answer: Answer,
    open: watch::Receiver<bool>,
    seen: Arc<Mutex<Vec<Seen>>>,
    issued: Arc<Mutex<Vec<CertificateDer<'static>>>>,
}

#[tonic::async_trait]
impl IdentityService for FakeIdentity {
    async fn certify(
        &self,
        request: Request<CertifyRequest>,
    ) -> Result<Response<CertifyResponse>, Status> {
        let mut open = self.open.clone();
        let _ = open.wait_for(|o| *o).await;
        let request = request.into_inner();
        let csr_der = rustls::pki_types::CertificateSigningRequestDer::from(
            request.certificate_signing_request.clone(),
        );
        let mut csr = rcgen::CertificateSigningRequestParams::from_der(&csr_der)
            .map_err(|e| Status::invalid_argument(format!("bad CSR: {e}")))?;
        let csr_dns_sans: Vec<String> = csr
            .params
            .subject_alt_names
            .iter()
            .map(|san| match san {
                rcgen::SanType::DnsName(name) => name.as_str().to_string(),
                other => format!("{other:?}"),
            })
            .collect();
        self.seen.lock().unwrap().push(Seen {
            identity: request.identity.clone(),
            token: request.token.clone(),
            csr_dns_sans: csr_dns_sans.clone(),
        });
        // linkerd-identity's checks: the token, and exactly one DNS SAN equal to the identity.
        if request.token != TOKEN {
            return Err(Status::unauthenticated("unknown token"));
        }
        if csr_dns_sans != [request.identity.clone()] {
            return Err(Status::invalid_argument(
                "the CSR does not name the identity",
            ));
        }
        let lifetime = match self.answer {
            Answer::Refuse => {
                return Err(Status::permission_denied(
                    "the token's service account may not have this identity",
                ));
            }
            Answer::Sign(lifetime) => lifetime,
        };
        let serial = {
            let issued = self.issued.lock().unwrap();
            issued.len() as u64 + 1
        };
        csr.params.serial_number = Some(rcgen::SerialNumber::from(serial));
        csr.params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = csr
            .signed_by(self.pki.issuer())
            .map_err(|e| Status::internal(e.to_string()))?;
        self.issued.lock().unwrap().push(cert.der().clone());
        let valid_until = SystemTime::now() + lifetime;
        let secs = valid_until
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        Ok(Response::new(CertifyResponse {
            leaf_certificate: cert.der().to_vec(),
            intermediate_certificates: vec![],
            valid_until: Some(prost_types::Timestamp {
                seconds: secs as i64,
                nanos: 0,
            }),
        }))
    }
}

/// The fake identity service on `127.0.0.1:0` over TLS, presenting the identity service's
/// identity; answers once `open` is true.
struct Fake {
    addr: SocketAddr,
    open: watch::Sender<bool>,
    seen: Arc<Mutex<Vec<Seen>>>,
    issued: Arc<Mutex<Vec<CertificateDer<'static>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Fake {
    async fn start(pki: Arc<Pki>, answer: Answer, open: bool) -> Self {
        let leaf = pki.leaf(&identity_service_identity("linkerd", "cluster.local"));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (open_tx, open_rx) = watch::channel(open);
        let fake = FakeIdentity {
            pki,
            answer,
            open: open_rx,
            seen: Default::default(),
            issued: Default::default(),
        };
        let (seen, issued) = (fake.seen.clone(), fake.issued.clone());
        let tls = tonic::transport::ServerTlsConfig::new().identity(
            tonic::transport::Identity::from_pem(&leaf.cert_pem, &leaf.key_pem),
        );
        let server = tonic::transport::Server::builder()
            .tls_config(tls)
            .unwrap()
            .add_service(IdentityServer::new(fake));
        let task = tokio::spawn(async move {
            let _ = server
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await;
        });
        Self {
            addr,
            open: open_tx,
            seen,
            issued,
            task,
        }
    }

    fn issued(&self) -> Vec<CertificateDer<'static>> {
        self.issued.lock().unwrap().clone()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A shim in Certify mode against `fake`, forwarding to `upstream`, retrying every 50 ms.
async fn start_shim(pki: &Pki, fake: &Fake, upstream: SocketAddr) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let config = certify_config(dir.path(), pki, fake, upstream);
    Harness::start_with(dir, config).await
}

/// The shim's Config in Certify mode against `fake`, with its files in `dir`; renewals at
/// least 50 ms apart.
fn certify_config(dir: &std::path::Path, pki: &Pki, fake: &Fake, upstream: SocketAddr) -> Config {
    let trust_anchors = dir.join("ca-bundle.crt");
    std::fs::write(&trust_anchors, &pki.anchor.cert_pem).unwrap();
    let token_file = dir.join("linkerd-identity-token");
    std::fs::write(&token_file, TOKEN).unwrap();
    Config {
        forwards: vec![Forward {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream,
        }],
        identity: Identity::Certify(CertifyConfig {
            addr: IdentityAddr {
                host: "127.0.0.1".into(),
                port: fake.addr.port(),
            },
            token_file,
            server_name: identity_service_identity("linkerd", "cluster.local"),
            min_refresh: Duration::from_millis(50),
            max_refresh: Duration::from_secs(24 * 3600),
        }),
        trust_anchors,
        local_identity: shim_identity(),
        client_auth: ClientAuth::Required,
    }
}

/// The DNS SANs and serial of a DER certificate.
fn sans_and_serial(der: &[u8]) -> (Vec<String>, String) {
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    let sans = cert
        .subject_alternative_name()
        .unwrap()
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .map(|name| match name {
                    x509_parser::extensions::GeneralName::DNSName(dns) => dns.to_string(),
                    other => format!("{other:?}"),
                })
                .collect()
        })
        .unwrap_or_default();
    (sans, cert.raw_serial_as_string())
}

/// The leaf the shim presented on `tls`.
fn presented_leaf(
    tls: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
) -> CertificateDer<'static> {
    tls.get_ref().1.peer_certificates().expect("a server chain")[0].clone()
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_shim_serves_the_certificate_from_certify_and_becomes_ready() {
    let pki = Arc::new(Pki::new());
    let echo = Echo::start().await;
    let fake = Fake::start(pki.clone(), Answer::Sign(Duration::from_secs(3600)), false).await;
    let shim = start_shim(&pki, &fake, echo.addr).await;
    let client = client_config(&pki, Some(&pki.leaf(CLIENT_IDENTITY)), &[]);

    // No certificate yet: not ready, and handshakes fail.
    assert_eq!(
        http_get(shim.admin, "/ready").await,
        (503, "not ready\n".to_string())
    );
    assert!(connect(shim.listen[0], client.clone()).await.is_err());

    fake.open.send_replace(true);
    shim.wait_ready().await;

    let seen = fake.seen.lock().unwrap().pop().expect("a Certify request");
    assert_eq!(seen.identity, shim_identity());
    assert_eq!(seen.token, TOKEN);
    assert_eq!(seen.csr_dns_sans, [shim_identity()]);

    let mut tls = connect(shim.listen[0], client)
        .await
        .expect("an mTLS connection");
    assert_eq!(echo_round_trip(&mut tls, b"ping").await, b"ping");
    let leaf = presented_leaf(&tls);
    assert_eq!(fake.issued(), std::slice::from_ref(&leaf));
    assert_eq!(sans_and_serial(&leaf), (vec![shim_identity()], "01".into()));

    let metrics = shim.metrics().await;
    assert!(
        metrics.contains("\nshim_identity_certifications_total 1\n"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("shim_identity_certify_failures_total{"),
        "{metrics}"
    );
    shim.stop().await;
}

#[tokio::test]
async fn a_refused_certify_keeps_the_shim_unready_and_is_counted() {
    let pki = Arc::new(Pki::new());
    let echo = Echo::start().await;
    let fake = Fake::start(pki.clone(), Answer::Refuse, true).await;
    let shim = start_shim(&pki, &fake, echo.addr).await;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let refused = shim
            .metric(
                "shim_identity_certify_failures_total",
                "reason=\"permission_denied\"",
            )
            .await
            .unwrap_or(0);
        // Retried after the minimum refresh.
        if refused >= 3 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{refused} refusals");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = fake.seen.lock().unwrap().len();
    assert!(seen >= 3, "{seen} requests");
    assert!(fake.issued().is_empty());
    assert_eq!(
        http_get(shim.admin, "/ready").await,
        (503, "not ready\n".to_string())
    );
    let client = client_config(&pki, Some(&pki.leaf(CLIENT_IDENTITY)), &[]);
    assert!(connect(shim.listen[0], client).await.is_err());
    let metrics = shim.metrics().await;
    assert!(
        metrics.contains("\nshim_identity_certifications_total 0\n"),
        "{metrics}"
    );
    shim.stop().await;
}

#[tokio::test]
async fn renewal_serves_a_new_certificate_and_keeps_open_connections() {
    let pki = Arc::new(Pki::new());
    let echo = Echo::start().await;
    // valid_until one second ahead: renewed after 700 ms.
    let fake = Fake::start(pki.clone(), Answer::Sign(Duration::from_secs(1)), true).await;
    let shim = start_shim(&pki, &fake, echo.addr).await;
    shim.wait_ready().await;
    let client = client_config(&pki, Some(&pki.leaf(CLIENT_IDENTITY)), &[]);

    let mut first = connect(shim.listen[0], client.clone()).await.unwrap();
    assert_eq!(echo_round_trip(&mut first, b"before").await, b"before");
    let (_, first_serial) = sans_and_serial(&presented_leaf(&first));

    wait_until("a renewal", || fake.issued().len() >= 2).await;
    // The renewed certificate is installed right after the response.
    let mut second = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while second.is_none() {
        let tls = connect(shim.listen[0], client.clone()).await.unwrap();
        if sans_and_serial(&presented_leaf(&tls)).1 != first_serial {
            second = Some(tls);
        } else {
            assert!(tokio::time::Instant::now() < deadline, "never renewed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let mut second = second.unwrap();
    let leaf = presented_leaf(&second);
    assert!(fake.issued().contains(&leaf));
    assert_eq!(sans_and_serial(&leaf).0, [shim_identity()]);
    assert_eq!(echo_round_trip(&mut second, b"after").await, b"after");
    // The connection opened with the first certificate still relays.
    assert_eq!(echo_round_trip(&mut first, b"still").await, b"still");
    shim.stop().await;
}

#[tokio::test]
async fn a_minimum_refresh_of_zero_stops_the_start() {
    // Regression: `--identity-min-refresh 0s` retried a failing Certify in a busy loop.
    let pki = Arc::new(Pki::new());
    let echo = Echo::start().await;
    let fake = Fake::start(pki.clone(), Answer::Refuse, true).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = certify_config(dir.path(), &pki, &fake, echo.addr);
    let Identity::Certify(certify) = &mut config.identity else {
        unreachable!("certify_config is in Certify mode")
    };
    certify.min_refresh = Duration::ZERO;
    let err = mtls_shim::Shim::bind(&config, mtls_shim::ShimMetrics::default())
        .await
        .map(drop)
        .expect_err("the start fails");
    assert!(
        err.to_string()
            .contains("the minimum refresh (0ns) is shorter than 10ms"),
        "{err}"
    );
}
