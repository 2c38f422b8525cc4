//! The shim's metrics, served on `/metrics` of the admin server:
//!
//! - `shim_tcp_open_total{listen}`: TCP connections accepted on a listener;
//! - `shim_tcp_open_connections{listen}`: those open now (handshaking or forwarding);
//! - `shim_tls_handshake_failures_total{listen,reason}`: handshakes that failed, with `reason`
//!   `no_client_cert` (a client without a certificate while one is required, e.g. a proxy
//!   that is not certified yet, spec Z.6), `bad_client_cert` (a certificate that does not
//!   verify against the trust anchors: self-signed, unknown issuer, expired, ...) or `other`
//!   (protocol errors, timeouts, clients that hang up);
//! - `shim_upstream_connect_failures_total{listen}`: authenticated connections closed because
//!   the upstream did not accept a connection.
//!
//! - `shim_identity_certifications_total`: certificates obtained with `Certify` and installed
//!   (Certify mode, spec §d.4);
//! - `shim_identity_certify_failures_total{reason}`: `Certify` calls that did not give a usable
//!   certificate, with `reason` `token` (the token file cannot be read), `timeout`,
//!   `invalid_response` (no leaf, no expiry, not valid for the identity) or the gRPC status code
//!   in snake case (`permission_denied`, `unavailable` for connection and TLS errors, ...);
//! - `shim_identity_cert_expiration_timestamp_seconds`: when the certificate served expires,
//!   in seconds since the Unix epoch: in Certify mode its `valid_until` (0 before the first
//!   one), in file mode its leaf's `notAfter` (following reloads).
//!
//! `listen` is the listener's bound address (`0.0.0.0:8086`); each listener's series exist,
//! at 0, from the moment it is bound.

use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder},
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use std::fmt::Write;

/// Handles to the shim's metrics; cheap to clone. [`Default`] gives unregistered ones.
#[derive(Clone, Debug, Default)]
pub struct ShimMetrics {
    tcp_open: Family<ListenLabels, Counter>,
    tcp_open_connections: Family<ListenLabels, Gauge>,
    handshake_failures: Family<HandshakeFailureLabels, Counter>,
    upstream_connect_failures: Family<ListenLabels, Counter>,
    certifications: Counter,
    certify_failures: Family<CertifyFailureLabels, Counter>,
    cert_expiration: Gauge,
}

/// Labels of `shim_identity_certify_failures_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertifyFailureLabels {
    /// [`CertifyFailure::as_str`](crate::certify::CertifyFailure::as_str).
    pub reason: &'static str,
}

/// Why a TLS handshake failed, as counted in `shim_tls_handshake_failures_total`.
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// The client presented no certificate while one is required.
    NoClientCert,
    /// The client's certificate does not verify against the trust anchors.
    BadClientCert,
    /// Anything else: protocol errors, timeouts, a client that hangs up.
    Other,
}

/// Labels of the per-listener series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenLabels {
    /// The listener's bound address.
    pub listen: String,
}

/// Labels of `shim_tls_handshake_failures_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandshakeFailureLabels {
    /// The listener's bound address.
    pub listen: String,
    /// Why the handshake failed.
    pub reason: HandshakeFailure,
}

/// Holds one `shim_tcp_open_connections` up for as long as it lives.
#[derive(Debug)]
pub(crate) struct OpenConnection {
    gauge: Gauge,
}

// === impl ShimMetrics ===

impl ShimMetrics {
    /// Registers the metrics in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "shim_tcp_open",
            "TCP connections accepted by a mesh-TLS listener",
            metrics.tcp_open.clone(),
        );
        registry.register(
            "shim_tcp_open_connections",
            "TCP connections open on a mesh-TLS listener",
            metrics.tcp_open_connections.clone(),
        );
        registry.register(
            "shim_tls_handshake_failures",
            "TLS handshakes that failed, by reason (no_client_cert, bad_client_cert, other)",
            metrics.handshake_failures.clone(),
        );
        registry.register(
            "shim_upstream_connect_failures",
            "Authenticated connections closed because the upstream refused a connection",
            metrics.upstream_connect_failures.clone(),
        );
        registry.register(
            "shim_identity_certifications",
            "Certificates obtained from the identity service with Certify and installed",
            metrics.certifications.clone(),
        );
        registry.register(
            "shim_identity_certify_failures",
            "Certify calls that gave no usable certificate, by reason",
            metrics.certify_failures.clone(),
        );
        registry.register(
            "shim_identity_cert_expiration_timestamp_seconds",
            "When the certificate served expires (Certify's valid_until, or the file's notAfter), in seconds since the Unix epoch",
            metrics.cert_expiration.clone(),
        );
        metrics
    }

    pub(crate) fn certified(&self, valid_until_secs: i64) {
        self.certifications.inc();
        self.cert_expiration.set(valid_until_secs);
    }

    /// File mode: the served certificate expires at `not_after_secs` (0 when its date could not
    /// be read).
    pub(crate) fn serving_until(&self, not_after_secs: Option<i64>) {
        self.cert_expiration.set(not_after_secs.unwrap_or(0));
    }

    pub(crate) fn certify_failed(&self, reason: &'static str) {
        self.certify_failures
            .get_or_create(&CertifyFailureLabels { reason })
            .inc();
    }

    /// Creates the series of a listener at 0 (every handshake failure reason included), so
    /// that `/metrics` shows them before the first connection and a rate over them starts
    /// from a sample.
    pub(crate) fn listening(&self, labels: &ListenLabels) {
        let _ = self.tcp_open.get_or_create(labels);
        let _ = self.tcp_open_connections.get_or_create(labels);
        let _ = self.upstream_connect_failures.get_or_create(labels);
        for reason in [
            HandshakeFailure::NoClientCert,
            HandshakeFailure::BadClientCert,
            HandshakeFailure::Other,
        ] {
            let _ = self
                .handshake_failures
                .get_or_create(&HandshakeFailureLabels {
                    listen: labels.listen.clone(),
                    reason,
                });
        }
    }

    /// Counts an accepted connection; it is open until the guard is dropped.
    pub(crate) fn accepted(&self, labels: &ListenLabels) -> OpenConnection {
        self.tcp_open.get_or_create(labels).inc();
        let gauge = self.tcp_open_connections.get_or_create(labels).clone();
        gauge.inc();
        OpenConnection { gauge }
    }

    pub(crate) fn handshake_failed(&self, labels: &ListenLabels, reason: HandshakeFailure) {
        self.handshake_failures
            .get_or_create(&HandshakeFailureLabels {
                listen: labels.listen.clone(),
                reason,
            })
            .inc();
    }

    pub(crate) fn upstream_connect_failed(&self, labels: &ListenLabels) {
        self.upstream_connect_failures.get_or_create(labels).inc();
    }
}

// === impl HandshakeFailure ===

impl HandshakeFailure {
    /// The `reason` label value: `no_client_cert`, `bad_client_cert` or `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoClientCert => "no_client_cert",
            Self::BadClientCert => "bad_client_cert",
            Self::Other => "other",
        }
    }
}

impl EncodeLabelValue for HandshakeFailure {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

// === impl OpenConnection ===

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}
