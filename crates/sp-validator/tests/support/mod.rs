//! The sp-validator's webhook served over real HTTPS, as the binary serves it
//! (`linkerd_runtime::tls::HttpsServer`, TLS 1.3 only) on 127.0.0.1:0 with a fresh
//! self-signed certificate, and a rustls client that trusts it.

#![allow(dead_code)]

use linkerd_admission::ReviewMetrics;
use rustls::pki_types::{CertificateDer, ServerName};
use serde::Deserialize;
use serde_json::{Value, json};
use sp_validator::REVIEWS_METRIC;
use std::{net::SocketAddr, sync::Arc};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The uid of every review built here.
pub const UID: &str = "7c2d9b4e-0000-4000-8000-00000000a11d";

/// A webhook served over TLS, and what a client needs to reach it.
pub struct Webhook {
    pub addr: SocketAddr,
    pub ca: CertificateDer<'static>,
    pub registry: prometheus_client::registry::Registry,
    _trigger: linkerd_runtime::shutdown::Trigger,
    _dir: tempfile::TempDir,
}

/// The `response` of an answer, as the API server reads it. Any other field (`patch`,
/// `patchType`, `auditAnnotations`) fails the decoding: the webhook never sets one.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionResponse {
    pub uid: String,
    pub allowed: bool,
    #[serde(default)]
    pub status: Option<linkerd_admission::Status>,
    #[serde(default)]
    pub warnings: Option<Vec<String>>,
}

impl AdmissionResponse {
    /// The refusal message, if refused.
    pub fn message(&self) -> Option<&str> {
        self.status.as_ref().map(|s| s.message.as_str())
    }
}

/// An HTTP response: status, content type and body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: String,
}

pub async fn mk_webhook() -> Webhook {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = linkerd_runtime::tls::TlsFiles {
        certs: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    std::fs::write(&files.certs, cert.pem()).unwrap();
    std::fs::write(&files.key, signing_key.serialize_pem()).unwrap();
    let tls = linkerd_runtime::tls::ServerTls::load_tls13_only(&files).unwrap();
    let server = linkerd_runtime::tls::HttpsServer::bind("127.0.0.1:0".parse().unwrap(), tls)
        .await
        .unwrap();
    let addr = server.local_addr();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = ReviewMetrics::register(&mut registry, REVIEWS_METRIC);
    let (trigger, shutdown) = linkerd_runtime::shutdown::channel();
    tokio::spawn(server.serve(sp_validator::router(metrics), shutdown.signaled()));
    Webhook {
        addr,
        ca: cert.der().clone(),
        registry,
        _trigger: trigger,
        _dir: dir,
    }
}

/// A client configuration that trusts `ca`, for the given TLS versions.
pub fn client_config(
    ca: &CertificateDer<'static>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// Sends one HTTP/1.1 request over a new TLS connection to `addr`.
pub async fn send_to(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    method: &str,
    path: &str,
    body: &[u8],
) -> Reply {
    let config = client_config(ca, rustls::ALL_VERSIONS);
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(
        tls.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    // The whole body is sent before the answer is read, as simple clients do (Python's
    // `http.client`): a server that answers early (413) must still read what follows, or the
    // client sees a broken connection and never reads the answer.
    let mut written = tls.write_all(body).await;
    if written.is_ok() {
        // rustls may still hold the last records: unflushed, the server waits for them.
        written = tls.flush().await;
    }
    let mut response = Vec::new();
    let read = tls.read_to_end(&mut response).await;
    let response = String::from_utf8(response).unwrap();
    assert!(
        written.is_ok() && read.is_ok(),
        "the connection broke: writing a {} byte body: {written:?}, reading the answer: {read:?}, answer so far: {:?}",
        body.len(),
        response.lines().next()
    );
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap();
    let content_type = lines.find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("content-type")
            .then(|| value.trim().to_string())
    });
    Reply {
        status: status.parse().unwrap(),
        content_type,
        body: body.to_string(),
    }
}

/// A review of `operation` on `object`, as the API server sends it.
pub fn mk_review(api_version: &str, operation: &str, object: Option<Value>) -> Value {
    let name = object
        .as_ref()
        .and_then(|o| o.pointer("/metadata/name"))
        .cloned()
        .unwrap_or(Value::Null);
    let namespace = object
        .as_ref()
        .and_then(|o| o.pointer("/metadata/namespace"))
        .cloned()
        .unwrap_or(Value::Null);
    let version = object
        .as_ref()
        .and_then(|o| o.get("apiVersion"))
        .and_then(Value::as_str)
        .and_then(|v| v.split_once('/'))
        .map_or("v1alpha2", |(_, v)| v)
        .to_string();
    json!({
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": "linkerd.io", "version": version, "kind": "ServiceProfile"},
            "resource": {"group": "linkerd.io", "version": version, "resource": "serviceprofiles"},
            "requestKind": {"group": "linkerd.io", "version": version, "kind": "ServiceProfile"},
            "requestResource": {"group": "linkerd.io", "version": version, "resource": "serviceprofiles"},
            "name": name,
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    })
}

impl Webhook {
    /// Sends one HTTP/1.1 request over a new TLS connection.
    pub async fn send(&self, method: &str, path: &str, body: &[u8]) -> Reply {
        send_to(self.addr, &self.ca, method, path, body).await
    }

    /// Posts a review to `/` and returns the answer as JSON (asserting a 200 JSON answer).
    pub async fn review(&self, review: &Value) -> Value {
        self.review_text(&serde_json::to_string(review).unwrap())
            .await
    }

    /// Posts a review written as JSON text to `/` and returns the answer as JSON (asserting a
    /// 200 JSON answer).
    pub async fn review_text(&self, review: &str) -> Value {
        let reply = self.send("POST", "/", review.as_bytes()).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.content_type.as_deref(), Some("application/json"));
        serde_json::from_str(&reply.body).unwrap()
    }

    /// A v1 CREATE of `object`; returns the review's `response`, checking the envelope.
    pub async fn admit_object(&self, object: Value) -> AdmissionResponse {
        let answer = self
            .review(&mk_review("admission.k8s.io/v1", "CREATE", Some(object)))
            .await;
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(answer["kind"], "AdmissionReview");
        let response: AdmissionResponse =
            serde_json::from_value(answer["response"].clone()).unwrap();
        assert_eq!(response.uid, UID);
        response
    }

    /// A v1 CREATE of `object` (YAML).
    pub async fn admit(&self, object: &str) -> AdmissionResponse {
        self.admit_object(linkerd_k8s_api::yaml::from_str(object).unwrap())
            .await
    }
}

/// Asserts an allowed response: no status.
pub fn assert_allowed(response: &AdmissionResponse, what: &str) {
    assert!(response.allowed, "{what}\ndenied: {:?}", response.message());
    assert_eq!(response.status, None, "{what}");
}

/// Asserts a denial with exactly `message`, code 400.
pub fn assert_denied(response: &AdmissionResponse, message: &str, what: &str) {
    assert!(!response.allowed, "{what}\nwas allowed");
    let status = response.status.as_ref().unwrap();
    assert_eq!(status.message, message, "{what}");
    assert_eq!(status.code, 400, "{what}");
}
