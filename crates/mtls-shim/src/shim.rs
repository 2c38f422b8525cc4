//! The mesh-TLS listeners: for each `--forward LISTEN=UPSTREAM`, accept TCP on LISTEN, complete
//! a TLS 1.3 handshake that verifies the client's certificate against the trust anchors, then
//! relay bytes both ways to UPSTREAM (spec/sp-validator-and-pod.md §d.6 items 3 and 5, in the
//! variant where the shim owns the pod's ports and the controllers listen on loopback).
//!
//! Proxies connect to the control plane with TLS and no ALPN and speak HTTP/2 inside
//! (spec Z.5), so the relay is a plain byte copy: no HTTP is parsed and nothing is buffered
//! beyond the copy's buffers. A proxy's first connections may come before it has a certificate
//! (spec Z.6); unless clients without one are admitted, those handshakes end with a TLS alert
//! and are counted, and the proxy retries.

use crate::{
    args::Forward,
    certify::{CertStore, Certifier, CertifyConfig, CertifyStartError},
    metrics::{HandshakeFailure, ListenLabels, ShimMetrics},
};
use linkerd_runtime::{
    shutdown::Shutdown,
    tls::{
        ClientAuth, DRAIN_TIMEOUT, HANDSHAKE_TIMEOUT, ServerTls, TlsError, TlsFiles, TrustAnchors,
    },
};
use rustls::{
    ServerConfig,
    client::{WebPkiServerVerifier, danger::ServerCertVerifier},
    pki_types::{CertificateDer, ServerName, UnixTime},
};
use std::{io, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinSet,
};
use tokio_rustls::TlsAcceptor;

/// How long an upstream may take to accept a connection.
pub const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How often the upstreams are tried until each accepts a connection (readiness).
const UPSTREAM_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// What the shim serves, from the flags.
#[derive(Clone, Debug)]
pub struct Config {
    /// The listeners and their upstreams.
    pub forwards: Vec<Forward>,
    /// Where the certificate the shim presents comes from.
    pub identity: Identity,
    /// The PEM trust anchors.
    pub trust_anchors: PathBuf,
    /// The identity the certificate must be valid for
    /// ([`local_identity`](crate::args::local_identity)).
    pub local_identity: String,
    /// Whether clients without a certificate are refused.
    pub client_auth: ClientAuth,
}

/// Where the shim's certificate comes from: exactly one of the two modes (the flags refuse
/// both at once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// File mode: a chain and key from files (a mounted Secret), reloaded when they change
    /// (`--identity-cert`, `--identity-key`).
    Files(TlsFiles),
    /// Certify mode: a key made in memory and a certificate from linkerd-identity, renewed
    /// before it expires (`--identity-addr` and friends; spec §d.4).
    Certify(CertifyConfig),
}

/// Why the shim cannot start. Each variant names the file or address at fault.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A certificate, key or trust-anchor file cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The certificate does not chain to the trust anchors, has expired, or is not valid for
    /// the local identity.
    #[error(
        "the certificate in {} is not valid for the identity {identity} under the trust anchors in {}: {reason}",
        certs.display(),
        trust_anchors.display()
    )]
    Identity {
        certs: PathBuf,
        trust_anchors: PathBuf,
        identity: String,
        reason: String,
    },
    /// Certify mode cannot start: a name, the address or the refresh bounds are invalid.
    #[error(transparent)]
    Certify(#[from] CertifyStartError),
    /// A listener cannot be bound.
    #[error("cannot listen on {} (--forward {forward}): {error}", forward.listen)]
    Bind { forward: Forward, error: io::Error },
}

/// Loaded certificates and bound listeners, ready to [`serve`](Shim::serve).
#[derive(Debug)]
pub struct Shim {
    served: Served,
    local_identity: String,
    listeners: Vec<Listener>,
    metrics: ShimMetrics,
    ready_tx: watch::Sender<bool>,
    ready_rx: watch::Receiver<bool>,
}

/// The certificate source, loaded.
#[derive(Debug)]
enum Served {
    Files(ServerTls),
    Certify {
        config: Arc<ServerConfig>,
        certifier: Box<Certifier>,
    },
}

/// One bound `--forward`.
#[derive(Debug)]
struct Listener {
    tcp: TcpListener,
    local_addr: SocketAddr,
    upstream: SocketAddr,
    labels: ListenLabels,
}

// === impl Shim ===

impl Shim {
    /// Loads the trust anchors, then in file mode the certificate, checking that it is valid
    /// for the local identity; in Certify mode makes the key and CSR (the certificate comes
    /// once [`serve`](Shim::serve) runs). Then binds every listener (in `--forward` order).
    pub async fn bind(config: &Config, metrics: ShimMetrics) -> Result<Self, StartError> {
        let trust_anchors = TrustAnchors::load(&config.trust_anchors)?;
        let served = match &config.identity {
            Identity::Files(files) => {
                let tls = ServerTls::load_mtls(files, &trust_anchors, config.client_auth)?;
                verify_identity(&tls.current_chain(), &trust_anchors, &config.local_identity)
                    .map_err(|reason| StartError::Identity {
                        certs: files.certs.clone(),
                        trust_anchors: config.trust_anchors.clone(),
                        identity: config.local_identity.clone(),
                        reason,
                    })?;
                metrics.serving_until(leaf_not_after(&tls.current_chain()));
                // A reloaded certificate that proxies would refuse is not served: the previous
                // one stays, and the reloader logs why. One that passes is served next, so the
                // expiry gauge takes its date here.
                let (anchors, identity) = (trust_anchors.clone(), config.local_identity.clone());
                let reload_metrics = metrics.clone();
                let tls = tls.with_reload_check(move |chain| {
                    verify_identity(chain, &anchors, &identity).map_err(|reason| {
                        format!(
                            "it is not valid for the identity {identity} under the trust anchors in {}: {reason}",
                            anchors.path().display()
                        )
                    })?;
                    reload_metrics.serving_until(leaf_not_after(chain));
                    Ok(())
                });
                Served::Files(tls)
            }
            Identity::Certify(certify) => {
                let store = Arc::new(CertStore::default());
                let server_config = store.server_config(&trust_anchors, config.client_auth)?;
                let certifier = Certifier::new(
                    certify.clone(),
                    &config.local_identity,
                    trust_anchors.clone(),
                    store,
                    metrics.clone(),
                )?;
                Served::Certify {
                    config: server_config,
                    certifier: Box::new(certifier),
                }
            }
        };
        let mut listeners = Vec::with_capacity(config.forwards.len());
        for &forward in &config.forwards {
            let bind_error = |error| StartError::Bind { forward, error };
            let tcp = TcpListener::bind(forward.listen)
                .await
                .map_err(bind_error)?;
            let local_addr = tcp.local_addr().map_err(bind_error)?;
            let labels = ListenLabels {
                listen: local_addr.to_string(),
            };
            metrics.listening(&labels);
            listeners.push(Listener {
                tcp,
                local_addr,
                upstream: forward.upstream,
                labels,
            });
        }
        let (ready_tx, ready_rx) = watch::channel(false);
        Ok(Self {
            served,
            local_identity: config.local_identity.clone(),
            listeners,
            metrics,
            ready_tx,
            ready_rx,
        })
    }

    /// The bound listen addresses, in `--forward` order (port 0 resolved).
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|l| l.local_addr).collect()
    }

    /// Becomes `true` once every upstream has accepted a TCP connection and a certificate is
    /// served (at once in file mode; after the first successful `Certify` in Certify mode), and
    /// stays so: readiness latches, as the proxy's does (spec §d.3, §d.4).
    pub fn ready(&self) -> watch::Receiver<bool> {
        self.ready_rx.clone()
    }

    /// Serves every listener until `shutdown`, reloading the certificate when its files
    /// change, or obtaining and renewing it with `Certify` (new handshakes get the new one;
    /// open connections keep going; in Certify mode handshakes fail until the first
    /// certificate). After shutdown,
    /// stops accepting and lets open connections end for up to [`DRAIN_TIMEOUT`], then closes
    /// them.
    pub async fn serve(self, shutdown: Shutdown) {
        let Self {
            served,
            local_identity,
            listeners,
            metrics,
            ready_tx,
            ready_rx: _,
        } = self;
        tracing::info!(identity = %local_identity, "presenting the local identity");
        let mut background = JoinSet::new();
        let (certified_tx, mut certified) = watch::channel(false);
        let (_reloader, server_config) = match served {
            Served::Files(tls) => {
                certified_tx.send_replace(true);
                (Some(tls.spawn_reloader()), tls.config())
            }
            Served::Certify { config, certifier } => {
                background.spawn(certifier.run(certified_tx));
                (None, config)
            }
        };
        let upstreams = listeners.iter().map(|l| l.upstream).collect();
        background.spawn(async move {
            probe_upstreams(upstreams).await;
            if !*certified.borrow_and_update() {
                tracing::info!("not ready: waiting for the first certificate");
                // The certifier runs until shutdown, so the sender outlives this task.
                let _ = certified.wait_for(|c| *c).await;
            }
            ready_tx.send_replace(true);
            tracing::info!("ready: a certificate is served and every upstream accepts connections");
        });

        let acceptor = TlsAcceptor::from(server_config);
        let mut servers = JoinSet::new();
        for listener in listeners {
            tracing::info!(
                listen = %listener.local_addr,
                upstream = %listener.upstream,
                "forwarding mesh TLS"
            );
            servers.spawn(listener.serve(acceptor.clone(), metrics.clone(), shutdown.clone()));
        }
        while servers.join_next().await.is_some() {}
        background.shutdown().await;
    }
}

// === impl Listener ===

impl Listener {
    async fn serve(self, acceptor: TlsAcceptor, metrics: ShimMetrics, shutdown: Shutdown) {
        let mut connections = JoinSet::new();
        let stop = shutdown.signaled();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = self.tcp.accept() => match accepted {
                    Ok((tcp, peer)) => {
                        connections.spawn(forward(
                            acceptor.clone(),
                            tcp,
                            peer,
                            self.upstream,
                            self.labels.clone(),
                            metrics.clone(),
                        ));
                    }
                    Err(error) => {
                        // Out of file descriptors, most likely: let some connections end.
                        tracing::warn!(%error, listen = %self.local_addr, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
        drop(self.tcp);
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::info!(
                listen = %self.local_addr,
                open = connections.len(),
                "connections still open after the drain timeout; closing them"
            );
            connections.shutdown().await;
        }
    }
}

/// One client connection: handshake, connect upstream, relay until either side closes.
async fn forward(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
    upstream: SocketAddr,
    labels: ListenLabels,
    metrics: ShimMetrics,
) {
    let _open = metrics.accepted(&labels);
    // gRPC messages are small and latency-bound.
    let _ = tcp.set_nodelay(true);
    let mut tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            let reason = classify_handshake_error(&error);
            metrics.handshake_failed(&labels, reason);
            tracing::debug!(%peer, listen = %labels.listen, reason = reason.as_str(), %error, "TLS handshake failed");
            return;
        }
        Err(_) => {
            metrics.handshake_failed(&labels, HandshakeFailure::Other);
            tracing::debug!(%peer, listen = %labels.listen, "TLS handshake timed out");
            return;
        }
    };
    let mut up = match tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(upstream))
        .await
    {
        Ok(Ok(up)) => up,
        Ok(Err(error)) => {
            metrics.upstream_connect_failed(&labels);
            tracing::warn!(%peer, %upstream, %error, "cannot connect to the upstream");
            return;
        }
        Err(_) => {
            metrics.upstream_connect_failed(&labels);
            tracing::warn!(%peer, %upstream, "the upstream did not accept a connection in time");
            return;
        }
    };
    let _ = up.set_nodelay(true);
    match tokio::io::copy_bidirectional(&mut tls, &mut up).await {
        Ok((from_client, from_upstream)) => {
            tracing::trace!(%peer, %upstream, from_client, from_upstream, "connection closed");
        }
        Err(error) => tracing::debug!(%peer, %upstream, %error, "connection failed"),
    }
}

/// Tells why a server handshake failed from the rustls error inside tokio-rustls' I/O error.
pub fn classify_handshake_error(error: &io::Error) -> HandshakeFailure {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::NoCertificatesPresented) => HandshakeFailure::NoClientCert,
        Some(rustls::Error::InvalidCertificate(_)) => HandshakeFailure::BadClientCert,
        _ => HandshakeFailure::Other,
    }
}

/// Checks that `chain` (leaf first) chains to the trust anchors, is valid now, and is valid
/// for `identity` as a TLS server name: what a proxy checks when it connects. The error says
/// why not.
pub fn verify_identity(
    chain: &[CertificateDer<'static>],
    trust_anchors: &TrustAnchors,
    identity: &str,
) -> Result<(), String> {
    let (leaf, intermediates) = chain
        .split_first()
        .ok_or_else(|| "no certificate".to_string())?;
    let name = ServerName::try_from(identity.to_string())
        .map_err(|e| format!("invalid identity {identity:?}: {e}"))?;
    let verifier = WebPkiServerVerifier::builder_with_provider(
        trust_anchors.roots(),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| e.to_string())?;
    verifier
        .verify_server_cert(leaf, intermediates, &name, &[], UnixTime::now())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The `notAfter` of `chain`'s leaf, in seconds since the Unix epoch; `None` when there is no
/// leaf or it does not parse as X.509 (rustls has accepted it, so it does).
fn leaf_not_after(chain: &[CertificateDer<'_>]) -> Option<i64> {
    let (_, leaf) = x509_parser::parse_x509_certificate(chain.first()?).ok()?;
    Some(leaf.validity().not_after.timestamp())
}

/// Tries every upstream until each has accepted a TCP connection. Upstreams still missing
/// after the first round are logged once.
async fn probe_upstreams(mut pending: Vec<SocketAddr>) {
    let mut first = true;
    loop {
        let mut still = Vec::new();
        for upstream in pending {
            let error =
                match tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(upstream))
                    .await
                {
                    Ok(Ok(_)) => {
                        tracing::debug!(%upstream, "the upstream accepts connections");
                        continue;
                    }
                    Ok(Err(error)) => error.to_string(),
                    Err(_) => "connection timed out".to_string(),
                };
            if first {
                tracing::info!(%upstream, %error, "not ready: waiting for the upstream to accept connections");
            } else {
                tracing::debug!(%upstream, %error, "the upstream does not accept connections yet");
            }
            still.push(upstream);
        }
        pending = still;
        first = false;
        if pending.is_empty() {
            tracing::debug!("every upstream accepts connections");
            return;
        }
        tokio::time::sleep(UPSTREAM_PROBE_INTERVAL).await;
    }
}
