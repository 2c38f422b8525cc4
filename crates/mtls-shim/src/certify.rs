//! Certify mode (spec/sp-validator-and-pod.md §d.4, §d.6 item 2): instead of reading its
//! certificate from files, the shim makes an ECDSA P-256 key in memory, a CSR whose CN and single
//! DNS SAN are the local identity, and asks linkerd-identity to sign it with
//! `io.linkerd.proxy.identity.Identity/Certify` {identity, token, CSR}.
//!
//! The call goes over TLS 1.3 without ALPN and without a client certificate (the proxy has none
//! yet on its first call), and the identity service must present a chain to the trust anchors
//! valid for `--identity-server-name`. The returned leaf and intermediates are checked the way a
//! proxy will check them (chain to the anchors, valid for the local identity) before they are
//! served. The certificate is renewed at 70% of its remaining lifetime, clamped to
//! `[min_refresh, max_refresh]` (10 s and 24 h by default); a failed call is logged, counted in
//! `shim_identity_certify_failures_total{reason}` and retried after `min_refresh`, while the
//! previous certificate, if any, keeps being served. The key and CSR are made once per process,
//! as the proxy's bootstrap makes them once per pod.

use crate::{args::IdentityAddr, metrics::ShimMetrics, shim::verify_identity};
use hyper_util::rt::TokioIo;
use linkerd_runtime::tls::TrustAnchors;
use linkerd2_proxy_api::identity::{CertifyRequest, identity_client::IdentityClient};
use rustls::{
    ClientConfig, ServerConfig,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName},
    server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier},
    sign::CertifiedKey,
};
use std::{
    future::Future,
    io,
    path::PathBuf,
    pin::Pin,
    sync::{Arc, PoisonError, RwLock},
    task::{Context, Poll},
    time::{Duration, SystemTime},
};
use tokio::{net::TcpStream, sync::watch};
use tokio_rustls::{TlsConnector, client::TlsStream};

/// How long connecting to the identity service (TCP and TLS) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one `Certify` call may take, connection included.
pub const CERTIFY_TIMEOUT: Duration = Duration::from_secs(10);
/// The shortest `--identity-min-refresh` accepted: it is also the pause after a failed call.
pub const MIN_REFRESH_FLOOR: Duration = Duration::from_millis(10);

/// The Certify-mode flags (spec §d.5's `LINKERD2_PROXY_IDENTITY_*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertifyConfig {
    /// The identity service (`--identity-addr`).
    pub addr: IdentityAddr,
    /// The projected service-account token, re-read for every call (`--identity-token-file`).
    pub token_file: PathBuf,
    /// The identity the identity service must present (`--identity-server-name`).
    pub server_name: String,
    /// The shortest wait before a renewal, and the wait after a failure.
    pub min_refresh: Duration,
    /// The longest wait before a renewal.
    pub max_refresh: Duration,
}

/// Why Certify mode cannot start. Each variant names the value at fault.
#[derive(Debug, thiserror::Error)]
pub enum CertifyStartError {
    /// The local identity cannot be a DNS SAN / TLS server name.
    #[error("invalid identity name {name:?}: {reason}")]
    InvalidName { name: String, reason: String },
    /// The identity service's name cannot be a TLS server name.
    #[error("invalid identity server name {name:?}: {reason}")]
    InvalidServerName { name: String, reason: String },
    /// The address does not make a gRPC URI.
    #[error("invalid identity address {addr}: {reason}")]
    InvalidAddr { addr: IdentityAddr, reason: String },
    /// `min_refresh` is longer than `max_refresh`.
    #[error("the minimum refresh ({min:?}) is longer than the maximum ({max:?})")]
    Refresh { min: Duration, max: Duration },
    /// `min_refresh` is under [`MIN_REFRESH_FLOOR`]: failed calls would be retried in a busy
    /// loop against linkerd-identity.
    #[error("the minimum refresh ({0:?}) is shorter than {MIN_REFRESH_FLOOR:?}")]
    RefreshTooShort(Duration),
    /// The key or the CSR cannot be made.
    #[error("cannot make the identity key and CSR: {0}")]
    Key(String),
    /// The trust anchors do not make a verifier.
    #[error("invalid trust anchors in {}: {reason}", path.display())]
    TrustAnchors { path: PathBuf, reason: String },
}

/// Why one `Certify` failed; [`as_str`](CertifyFailure::as_str) is the metric's `reason`.
#[derive(Debug, thiserror::Error)]
pub enum CertifyFailure {
    /// The token file cannot be read.
    #[error("cannot read the token {}: {error}", path.display())]
    Token { path: PathBuf, error: io::Error },
    /// The call failed: a connection, TLS or gRPC error, or a refusal by the service.
    #[error("Certify failed: {}", status_message(.0))]
    Status(tonic::Status),
    /// The call did not finish within [`CERTIFY_TIMEOUT`].
    #[error("Certify did not answer within {CERTIFY_TIMEOUT:?}")]
    Timeout,
    /// The answer is not a certificate that proxies would accept for the local identity.
    #[error("unusable Certify response: {0}")]
    InvalidResponse(String),
}

/// The certificate served in Certify mode: none until the first `Certify` succeeds (handshakes
/// fail until then), then the latest issued one.
#[derive(Debug, Default)]
pub struct CertStore {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

/// The key, the CSR, and the clients that obtain and renew the certificate.
#[derive(Debug)]
pub(crate) struct Certifier {
    config: CertifyConfig,
    local_identity: String,
    key: PrivatePkcs8KeyDer<'static>,
    csr: Vec<u8>,
    trust_anchors: TrustAnchors,
    endpoint: tonic::transport::Endpoint,
    connector: Connector,
    store: Arc<CertStore>,
    metrics: ShimMetrics,
}

/// A certificate issued by `Certify`, checked and ready to serve.
struct Issued {
    key: Arc<CertifiedKey>,
    valid_until: SystemTime,
}

/// Dials the identity service with TLS, verifying it against the trust anchors and its name.
#[derive(Clone, Debug)]
struct Connector {
    addr: IdentityAddr,
    server_name: ServerName<'static>,
    tls: Arc<ClientConfig>,
}

// === impl CertStore ===

impl CertStore {
    /// The chain served now, leaf first; empty before the first certificate.
    pub fn current_chain(&self) -> Vec<CertificateDer<'static>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|key| key.cert.clone())
            .unwrap_or_default()
    }

    fn install(&self, key: Arc<CertifiedKey>) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(key);
    }

    /// A mesh-TLS server configuration serving this store's certificate, as
    /// [`ServerTls::load_mtls`](linkerd_runtime::tls::ServerTls::load_mtls) configures one for
    /// files: TLS 1.3, client certificates verified against `trust_anchors` (required or not
    /// as `client_auth` says), ALPN `h2` advertised but not required.
    pub fn server_config(
        self: &Arc<Self>,
        trust_anchors: &TrustAnchors,
        client_auth: linkerd_runtime::tls::ClientAuth,
    ) -> Result<Arc<ServerConfig>, CertifyStartError> {
        let invalid = |reason: String| CertifyStartError::TrustAnchors {
            path: trust_anchors.path().to_path_buf(),
            reason,
        };
        let builder =
            WebPkiClientVerifier::builder_with_provider(trust_anchors.roots(), provider());
        let builder = match client_auth {
            linkerd_runtime::tls::ClientAuth::Required => builder,
            linkerd_runtime::tls::ClientAuth::Optional => builder.allow_unauthenticated(),
        };
        let verifier = builder.build().map_err(|e| invalid(e.to_string()))?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| invalid(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

// === impl Certifier ===

impl Certifier {
    /// Makes the key and the CSR for `local_identity` and the client of the identity service.
    pub(crate) fn new(
        config: CertifyConfig,
        local_identity: &str,
        trust_anchors: TrustAnchors,
        store: Arc<CertStore>,
        metrics: ShimMetrics,
    ) -> Result<Self, CertifyStartError> {
        if config.min_refresh < MIN_REFRESH_FLOOR {
            return Err(CertifyStartError::RefreshTooShort(config.min_refresh));
        }
        if config.min_refresh > config.max_refresh {
            return Err(CertifyStartError::Refresh {
                min: config.min_refresh,
                max: config.max_refresh,
            });
        }
        ServerName::try_from(local_identity.to_string()).map_err(|e| {
            CertifyStartError::InvalidName {
                name: local_identity.to_string(),
                reason: e.to_string(),
            }
        })?;
        let server_name = ServerName::try_from(config.server_name.clone()).map_err(|e| {
            CertifyStartError::InvalidServerName {
                name: config.server_name.clone(),
                reason: e.to_string(),
            }
        })?;
        let (key, csr) = mk_key_and_csr(local_identity)?;
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", config.addr))
            .map_err(|e| CertifyStartError::InvalidAddr {
            addr: config.addr.clone(),
            reason: e.to_string(),
        })?;
        let tls = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| CertifyStartError::TrustAnchors {
                path: trust_anchors.path().to_path_buf(),
                reason: e.to_string(),
            })?
            .with_root_certificates(trust_anchors.roots())
            .with_no_client_auth();
        let connector = Connector {
            addr: config.addr.clone(),
            server_name,
            tls: Arc::new(tls),
        };
        Ok(Self {
            config,
            local_identity: local_identity.to_string(),
            key,
            csr,
            trust_anchors,
            endpoint,
            connector,
            store,
            metrics,
        })
    }

    /// Obtains the certificate, then renews it forever; `certified` turns true with the first
    /// one installed and stays true.
    pub(crate) async fn run(self, certified: watch::Sender<bool>) {
        tracing::info!(
            identity = %self.local_identity,
            addr = %self.config.addr,
            server = %self.config.server_name,
            "obtaining the certificate from the identity service"
        );
        loop {
            let wait = match self.certify().await {
                Ok(Issued { key, valid_until }) => {
                    self.store.install(key);
                    self.metrics.certified(unix_seconds(valid_until));
                    certified.send_replace(true);
                    let wait = refresh_in(
                        valid_until,
                        SystemTime::now(),
                        self.config.min_refresh,
                        self.config.max_refresh,
                    );
                    tracing::info!(
                        identity = %self.local_identity,
                        valid_until = unix_seconds(valid_until),
                        renew_in = ?wait,
                        "certified"
                    );
                    wait
                }
                Err(failure) => {
                    self.metrics.certify_failed(failure.as_str());
                    tracing::warn!(
                        identity = %self.local_identity,
                        addr = %self.config.addr,
                        error = %failure,
                        retry_in = ?self.config.min_refresh,
                        "cannot obtain a certificate; serving the previous one, if any"
                    );
                    self.config.min_refresh
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// One `Certify` call, its answer checked.
    async fn certify(&self) -> Result<Issued, CertifyFailure> {
        let token = tokio::fs::read(&self.config.token_file)
            .await
            .map_err(|error| CertifyFailure::Token {
                path: self.config.token_file.clone(),
                error,
            })?;
        // A new connection for each call: renewals are hours apart, and the headless
        // service's address may have changed since.
        let channel = self
            .endpoint
            .connect_with_connector_lazy(self.connector.clone());
        let request = CertifyRequest {
            identity: self.local_identity.clone(),
            token,
            certificate_signing_request: self.csr.clone(),
        };
        let response = tokio::time::timeout(
            CERTIFY_TIMEOUT,
            IdentityClient::new(channel).certify(request),
        )
        .await
        .map_err(|_| CertifyFailure::Timeout)?
        .map_err(CertifyFailure::Status)?
        .into_inner();

        let invalid = CertifyFailure::InvalidResponse;
        if response.leaf_certificate.is_empty() {
            return Err(invalid("no leaf certificate".into()));
        }
        let valid_until = response
            .valid_until
            .ok_or_else(|| invalid("no valid_until".into()))?;
        let valid_until = u64::try_from(valid_until.seconds)
            .ok()
            .and_then(|secs| SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs)))
            .ok_or_else(|| invalid(format!("valid_until {valid_until} is out of range")))?;
        let chain: Vec<CertificateDer<'static>> = std::iter::once(response.leaf_certificate)
            .chain(response.intermediate_certificates)
            .map(CertificateDer::from)
            .collect();
        verify_identity(&chain, &self.trust_anchors, &self.local_identity).map_err(|reason| {
            invalid(format!(
                "the certificate is not valid for {}: {reason}",
                self.local_identity
            ))
        })?;
        let key = CertifiedKey::from_der(
            chain,
            PrivateKeyDer::Pkcs8(self.key.clone_key()),
            &provider(),
        )
        .map_err(|e| invalid(format!("the certificate does not match the key: {e}")))?;
        Ok(Issued {
            key: Arc::new(key),
            valid_until,
        })
    }
}

// === impl CertifyFailure ===

impl CertifyFailure {
    /// The `reason` label: `token`, `timeout`, `invalid_response`, or the gRPC status code in
    /// snake case (`permission_denied`, `unavailable` for connection and TLS errors, ...).
    pub fn as_str(&self) -> &'static str {
        use tonic::Code;
        match self {
            Self::Token { .. } => "token",
            Self::Timeout => "timeout",
            Self::InvalidResponse(_) => "invalid_response",
            Self::Status(status) => match status.code() {
                Code::Ok => "ok",
                Code::Cancelled => "cancelled",
                Code::Unknown => "unknown",
                Code::InvalidArgument => "invalid_argument",
                Code::DeadlineExceeded => "deadline_exceeded",
                Code::NotFound => "not_found",
                Code::AlreadyExists => "already_exists",
                Code::PermissionDenied => "permission_denied",
                Code::ResourceExhausted => "resource_exhausted",
                Code::FailedPrecondition => "failed_precondition",
                Code::Aborted => "aborted",
                Code::OutOfRange => "out_of_range",
                Code::Unimplemented => "unimplemented",
                Code::Internal => "internal",
                Code::Unavailable => "unavailable",
                Code::DataLoss => "data_loss",
                Code::Unauthenticated => "unauthenticated",
            },
        }
    }
}

// === impl Connector ===

impl tonic::codegen::Service<tonic::codegen::http::Uri> for Connector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: tonic::codegen::http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let connect = async {
                let tcp = TcpStream::connect((this.addr.host.as_str(), this.addr.port)).await?;
                let _ = tcp.set_nodelay(true);
                TlsConnector::from(this.tls.clone())
                    .connect(this.server_name.clone(), tcp)
                    .await
            };
            match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
                Ok(Ok(tls)) => Ok(TokioIo::new(tls)),
                Ok(Err(error)) => Err(io::Error::new(
                    error.kind(),
                    format!("cannot connect to {}: {error}", this.addr),
                )),
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("cannot connect to {} within {CONNECT_TIMEOUT:?}", this.addr),
                )),
            }
        })
    }
}

/// When to renew a certificate valid until `valid_until`, seen at `now`: after 70% of the
/// remaining lifetime, clamped to `[min, max]` (spec §d.4). An expired certificate is renewed
/// after `min`. Never panics, even when `min > max` (then `max` wins).
pub fn refresh_in(
    valid_until: SystemTime,
    now: SystemTime,
    min: Duration,
    max: Duration,
) -> Duration {
    let remaining = valid_until.duration_since(now).unwrap_or_default();
    (remaining / 10 * 7).max(min).min(max)
}

/// An ECDSA P-256 key (PKCS#8) and a DER CSR whose CN and single DNS SAN are `identity`, as the
/// proxy's bootstrap makes them (spec §d.4).
fn mk_key_and_csr(
    identity: &str,
) -> Result<(PrivatePkcs8KeyDer<'static>, Vec<u8>), CertifyStartError> {
    let key_error = |e: rcgen::Error| CertifyStartError::Key(e.to_string());
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(key_error)?;
    let mut params = rcgen::CertificateParams::new(vec![identity.to_string()]).map_err(|e| {
        CertifyStartError::InvalidName {
            name: identity.to_string(),
            reason: e.to_string(),
        }
    })?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, identity);
    let csr = params.serialize_request(&key).map_err(key_error)?;
    Ok((
        PrivatePkcs8KeyDer::from(key.serialize_der()),
        csr.der().to_vec(),
    ))
}

/// Seconds since the Unix epoch (0 before it).
fn unix_seconds(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A status's message with its source chain (a connection error says why).
fn status_message(status: &tonic::Status) -> String {
    let mut message = format!("{:?}: {}", status.code(), status.message());
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        message.push_str(": ");
        message.push_str(&error.to_string());
        source = error.source();
    }
    message
}

/// The `ring` provider, as the rest of the pod uses.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(10);
    const MAX: Duration = Duration::from_secs(24 * 3600);

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn renews_at_70_percent_of_the_remaining_lifetime_within_the_bounds() {
        // 24h left: 16.8h.
        assert_eq!(
            refresh_in(at(1_000 + 86_400), at(1_000), MIN, MAX),
            Duration::from_secs(60_480)
        );
        // 100s left: 70s.
        assert_eq!(
            refresh_in(at(1_100), at(1_000), MIN, MAX),
            Duration::from_secs(70)
        );
        // 5s left, and expired: the minimum.
        assert_eq!(refresh_in(at(1_005), at(1_000), MIN, MAX), MIN);
        assert_eq!(refresh_in(at(900), at(1_000), MIN, MAX), MIN);
        // A year left: the maximum.
        assert_eq!(
            refresh_in(at(1_000 + 365 * 86_400), at(1_000), MIN, MAX),
            MAX
        );
        // Inverted bounds do not panic.
        assert_eq!(refresh_in(at(1_100), at(1_000), MAX, MIN), MIN);
    }

    #[test]
    fn the_csr_names_the_identity_once() {
        let identity = "linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local";
        let (key, csr) = mk_key_and_csr(identity).unwrap();
        assert!(!key.secret_pkcs8_der().is_empty());
        // The name appears twice in the DER: as the CN and as the DNS SAN. (The fake identity
        // service of tests/certify.rs parses the CSR fully.)
        let hits = csr
            .windows(identity.len())
            .filter(|w| *w == identity.as_bytes())
            .count();
        assert_eq!(hits, 2, "the CN and the SAN");
    }
}
