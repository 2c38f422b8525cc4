use super::*;
use rustls::{
    RootCertStore,
    client::{WebPkiServerVerifier, danger::ServerCertVerifier},
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject},
    server::WebPkiClientVerifier,
};
use std::sync::Arc;
use x509_parser::{extensions::GeneralName, prelude::*};

const IDENTITY: &str = "linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local";

fn certs() -> Certs {
    generate("linkerd", "cluster.local", Duration::days(365), None).unwrap()
}

fn ders(pem: &str) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap()
}

fn roots(pem: &str) -> Arc<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for der in ders(pem) {
        roots.add(der).unwrap();
    }
    Arc::new(roots)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Verifies `chain_pem` (leaf first) as a server certificate for `name` against `anchors_pem`.
fn verify_server(anchors_pem: &str, chain_pem: &str, name: &str) -> Result<(), rustls::Error> {
    let verifier = WebPkiServerVerifier::builder_with_provider(roots(anchors_pem), provider())
        .build()
        .unwrap();
    let chain = ders(chain_pem);
    verifier
        .verify_server_cert(
            &chain[0],
            &chain[1..],
            &ServerName::try_from(name.to_string()).unwrap(),
            &[],
            UnixTime::now(),
        )
        .map(|_| ())
}

fn verify_client(anchors_pem: &str, chain_pem: &str) -> Result<(), rustls::Error> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(anchors_pem), provider())
        .build()
        .unwrap();
    let chain = ders(chain_pem);
    verifier
        .verify_client_cert(&chain[0], &chain[1..], UnixTime::now())
        .map(|_| ())
}

/// The leaf's common name, DNS SANs and whether it is a CA.
fn subject(pem: &str) -> (String, Vec<String>, bool) {
    let der = ders(pem).remove(0);
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .unwrap()
        .as_str()
        .unwrap()
        .to_string();
    let sans = cert
        .subject_alternative_name()
        .unwrap()
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .map(|n| match n {
                    GeneralName::DNSName(d) => d.to_string(),
                    other => format!("{other:?}"),
                })
                .collect()
        })
        .unwrap_or_default();
    (cn, sans, cert.is_ca())
}

#[test]
fn identity_chains_to_the_trust_anchor() {
    let certs = certs();
    assert_eq!(certs.identity_name, IDENTITY);
    // Leaf, then the issuer.
    assert_eq!(ders(&certs.identity_chain_pem).len(), 2);
    verify_server(
        &certs.trust_anchors_pem,
        &certs.identity_chain_pem,
        IDENTITY,
    )
    .unwrap();
    // Proxies present it as a client certificate too (the shim verifies theirs the same way).
    verify_client(&certs.trust_anchors_pem, &certs.identity_chain_pem).unwrap();
    // Another name, or another anchor, is refused.
    verify_server(
        &certs.trust_anchors_pem,
        &certs.identity_chain_pem,
        "linkerd-identity.linkerd.serviceaccount.identity.linkerd.cluster.local",
    )
    .unwrap_err();
    let other = self::certs();
    verify_server(
        &other.trust_anchors_pem,
        &certs.identity_chain_pem,
        IDENTITY,
    )
    .unwrap_err();
    // Without the issuer in the chain, the leaf alone does not verify.
    let leaf_only = certs
        .identity_chain_pem
        .split_inclusive("-----END CERTIFICATE-----\n");
    let leaf_only: String = leaf_only.take(1).collect();
    verify_server(&certs.trust_anchors_pem, &leaf_only, IDENTITY).unwrap_err();
}

#[test]
fn identity_and_issuer_subjects() {
    let certs = certs();
    assert_eq!(
        subject(&certs.identity_chain_pem),
        (IDENTITY.to_string(), vec![IDENTITY.to_string()], false)
    );
    let issuer = certs.issuer.as_ref().unwrap();
    let (cn, sans, is_ca) = subject(&issuer.cert_pem);
    assert_eq!(cn, "identity.linkerd.cluster.local");
    assert!(sans.is_empty());
    assert!(is_ca);
    let (cn, _, is_ca) = subject(&certs.trust_anchors_pem);
    assert_eq!(cn, "root.linkerd.cluster.local");
    assert!(is_ca);
}

#[test]
fn namespace_and_trust_domain_name_the_identity_and_webhooks() {
    let certs = generate("l5d", "example.org", Duration::days(30), None).unwrap();
    let identity = "linkerd-destination.l5d.serviceaccount.identity.l5d.example.org";
    assert_eq!(certs.identity_name, identity);
    verify_server(
        &certs.trust_anchors_pem,
        &certs.identity_chain_pem,
        identity,
    )
    .unwrap();
    let names: Vec<_> = certs.webhooks.iter().map(|w| w.dns_name.as_str()).collect();
    assert_eq!(
        names,
        [
            "linkerd-sp-validator.l5d.svc",
            "linkerd-policy-validator.l5d.svc"
        ]
    );
}

#[test]
fn webhook_certificates_chain_to_their_ca_bundle() {
    let certs = certs();
    let [sp, policy] = &certs.webhooks[..] else {
        panic!("two webhooks");
    };
    assert_eq!(sp.dns_name, "linkerd-sp-validator.linkerd.svc");
    assert_eq!(policy.dns_name, "linkerd-policy-validator.linkerd.svc");
    for wh in [sp, policy] {
        assert_eq!(
            subject(&wh.serving.cert_pem),
            (wh.dns_name.clone(), vec![wh.dns_name.clone()], false)
        );
        verify_server(&wh.ca_pem, &wh.serving.cert_pem, &wh.dns_name).unwrap();
        // Not valid for the other webhook's name, nor under the mesh's anchor.
        verify_server(
            &wh.ca_pem,
            &wh.serving.cert_pem,
            "linkerd-destination.linkerd.svc",
        )
        .unwrap_err();
        verify_server(&certs.trust_anchors_pem, &wh.serving.cert_pem, &wh.dns_name).unwrap_err();
    }
    // Each webhook has a CA of its own.
    verify_server(&sp.ca_pem, &policy.serving.cert_pem, &policy.dns_name).unwrap_err();
}

#[test]
fn an_existing_issuer_signs_the_identity() {
    let first = certs();
    let issuer = first.issuer.as_ref().unwrap();
    let existing = ExistingIssuer {
        cert_pem: issuer.cert_pem.clone(),
        key_pem: issuer.key_pem.clone(),
        trust_anchors_pem: first.trust_anchors_pem.clone(),
    };
    let second = generate(
        "linkerd",
        "cluster.local",
        Duration::days(1),
        Some(&existing),
    )
    .unwrap();
    assert!(second.issuer.is_none() && second.trust_anchor_key_pem.is_none());
    assert_eq!(second.trust_anchors_pem, first.trust_anchors_pem);
    verify_server(
        &first.trust_anchors_pem,
        &second.identity_chain_pem,
        IDENTITY,
    )
    .unwrap();

    let bad = ExistingIssuer {
        key_pem: "not a key".to_string(),
        ..existing
    };
    let err = generate("linkerd", "cluster.local", Duration::days(1), Some(&bad)).unwrap_err();
    assert!(err.to_string().contains("--issuer-key"), "{err:#}");
}

#[test]
fn rendered_overlay() {
    let certs = certs();
    let files = render(
        &certs,
        "linkerd",
        Path::new("/work/repo/deploy"),
        Path::new("/work/repo/deploy/local"),
    )
    .unwrap();
    let names: Vec<_> = files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "ca.crt",
            "certify/kustomization.yaml",
            "certify/secrets.yaml",
            "identity.crt",
            "identity.key",
            "issuer.crt",
            "issuer.key",
            "kustomization.yaml",
            "policy-validator-ca.crt",
            "policy-validator.crt",
            "policy-validator.key",
            "secrets.yaml",
            "sp-validator-ca.crt",
            "sp-validator.crt",
            "sp-validator.key",
            "trust-anchor.crt",
            "trust-anchor.key",
        ]
    );

    let secrets: Vec<Secret> = yaml::from_documents(&files["secrets.yaml"]).unwrap();
    let summary: Vec<_> = secrets
        .iter()
        .map(|s| {
            (
                s.metadata.name.clone().unwrap(),
                s.metadata.namespace.clone().unwrap(),
                s.type_.clone().unwrap(),
                s.data.as_ref().unwrap().keys().cloned().collect::<Vec<_>>(),
            )
        })
        .collect();
    let tls = |name: &str, keys: &[&str]| {
        (
            name.to_string(),
            "linkerd".to_string(),
            "kubernetes.io/tls".to_string(),
            keys.iter().map(|k| k.to_string()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        summary,
        [
            tls(IDENTITY_SECRET, &["ca.crt", "tls.crt", "tls.key"]),
            tls("linkerd-sp-validator-k8s-tls", &["tls.crt", "tls.key"]),
            tls("linkerd-policy-validator-k8s-tls", &["tls.crt", "tls.key"]),
        ]
    );
    let data = secrets[1].data.as_ref().unwrap();
    assert_eq!(
        data["tls.crt"].0,
        certs.webhooks[0].serving.cert_pem.as_bytes()
    );

    let kustomization: serde_json::Value = yaml::from_str(&files["kustomization.yaml"]).unwrap();
    assert_eq!(
        kustomization["resources"],
        serde_json::json!(["../base", "secrets.yaml"])
    );
    let patches = kustomization["patches"].as_array().unwrap();
    assert_eq!(patches.len(), 2);
    for (patch, wh) in patches.iter().zip(&certs.webhooks) {
        assert_eq!(patch["target"]["name"], wh.webhook.configuration);
        let ops: serde_json::Value = yaml::from_str(patch["patch"].as_str().unwrap()).unwrap();
        assert_eq!(ops[0]["path"], "/webhooks/0/clientConfig/caBundle");
        let bundle: ByteString = serde_json::from_value(ops[0]["value"].clone()).unwrap();
        assert_eq!(bundle.0, wh.ca_pem.as_bytes());
    }

    // The Certify overlay: deploy/certify, the webhooks' Secrets only, the same caBundles.
    let certify: serde_json::Value = yaml::from_str(&files["certify/kustomization.yaml"]).unwrap();
    assert_eq!(
        certify["resources"],
        serde_json::json!(["../../certify", "secrets.yaml"])
    );
    assert_eq!(certify["patches"], kustomization["patches"]);
    let certify_secrets: Vec<String> =
        yaml::from_documents::<Secret>(&files["certify/secrets.yaml"])
            .unwrap()
            .into_iter()
            .map(|secret| secret.metadata.name.unwrap())
            .collect();
    assert_eq!(
        certify_secrets,
        [
            "linkerd-sp-validator-k8s-tls",
            "linkerd-policy-validator-k8s-tls"
        ]
    );
}

#[test]
fn relative_paths() {
    let rel = |from: &str, to: &str| relative_path(Path::new(from), Path::new(to)).unwrap();
    assert_eq!(rel("/a/deploy/local", "/a/deploy"), Path::new(".."));
    assert_eq!(rel("/tmp/x", "/a/deploy"), Path::new("../../a/deploy"));
    assert_eq!(rel("/a/b/../c", "/a/deploy"), Path::new("../deploy"));
    assert_eq!(rel("/a/deploy", "/a/deploy"), Path::new("."));
}
