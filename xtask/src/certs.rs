//! `cargo xtask gen-certs`: the certificates the linkerd-destination pod needs, and a kustomize
//! overlay of `deploy/` that installs them.
//!
//! - a trust anchor (root CA) and an identity issuer (intermediate CA) signed by it, unless an
//!   existing issuer is given (`--issuer-cert`, `--issuer-key`, `--trust-anchors`): the mesh's
//!   proxies must trust the anchor the pod's identity chains to;
//! - the pod's mesh identity, `linkerd-destination.<ns>.serviceaccount.identity.<ns>.<domain>`
//!   (spec/sp-validator-and-pod.md §d.4), presented by the mtls-shim sidecar;
//! - a serving certificate for each admission webhook (`linkerd-sp-validator.<ns>.svc`,
//!   `linkerd-policy-validator.<ns>.svc`), each signed by a CA of its own whose PEM becomes the
//!   webhook configuration's `caBundle` (§b.8).
//!
//! Every key is ECDSA P-256 (PKCS#8), what the proxies and the API server accept.

use anyhow::{Context, bail};
use k8s_openapi::{
    ByteString, api::core::v1::Secret, apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use linkerd_k8s_api::yaml;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use std::{
    collections::BTreeMap,
    path::{Component, Path, PathBuf},
};
use time::{Duration, OffsetDateTime};

/// The namespace the manifests of `deploy/` are written for.
pub const DEPLOY_NAMESPACE: &str = "linkerd";

/// Secret holding the pod's mesh identity (`tls.crt` leaf + issuer, `tls.key`, `ca.crt` trust
/// anchors), mounted by the mtls-shim.
pub const IDENTITY_SECRET: &str = "linkerd-destination-identity";

/// The two admission webhooks: secret, service and webhook configuration names (§b.7, §b.8,
/// §c.6).
pub const WEBHOOKS: [Webhook; 2] = [
    Webhook {
        file_stem: "sp-validator",
        secret: "linkerd-sp-validator-k8s-tls",
        service: "linkerd-sp-validator",
        configuration: "linkerd-sp-validator-webhook-config",
    },
    Webhook {
        file_stem: "policy-validator",
        secret: "linkerd-policy-validator-k8s-tls",
        service: "linkerd-policy-validator",
        configuration: "linkerd-policy-validator-webhook-config",
    },
];

/// `cargo xtask gen-certs [--out DIR] [--namespace NS] [--trust-domain DOMAIN] ...`
#[derive(Debug, clap::Args)]
pub struct GenCertsArgs {
    /// Where to write the PEM files, secrets.yaml and kustomization.yaml (an overlay of
    /// deploy/: `kubectl apply -k DIR`). Relative paths are relative to the workspace root;
    /// deploy/local/ is ignored by git.
    #[arg(long, default_value = "deploy/local")]
    out: PathBuf,
    /// The control-plane namespace: part of the identity and of the webhooks' DNS names.
    #[arg(long, default_value = DEPLOY_NAMESPACE)]
    namespace: String,
    /// The mesh identity trust domain.
    #[arg(long, default_value = "cluster.local")]
    trust_domain: String,
    /// Validity of the identity and webhook certificates, in days (the anchor gets ten times
    /// as long, the issuer twice).
    #[arg(long, default_value = "365")]
    days: u32,
    /// PEM certificate of an existing identity issuer (e.g. the one `linkerd install` was
    /// given) to sign the identity with, instead of generating an anchor and an issuer.
    #[arg(long, requires_all = ["issuer_key", "trust_anchors"])]
    issuer_cert: Option<PathBuf>,
    /// PEM private key of `--issuer-cert`.
    #[arg(long, requires = "issuer_cert")]
    issuer_key: Option<PathBuf>,
    /// PEM trust anchors `--issuer-cert` chains to (the mesh's `ca-bundle.crt`).
    #[arg(long, requires = "issuer_cert")]
    trust_anchors: Option<PathBuf>,
    /// Replace the certificates already in --out (a new anchor is one the mesh does not trust
    /// yet).
    #[arg(long)]
    force: bool,
}

/// The names one admission webhook goes by.
#[derive(Copy, Clone, Debug)]
pub struct Webhook {
    /// File names of its PEM files: `<stem>.crt`, `<stem>.key`, `<stem>-ca.crt`.
    pub file_stem: &'static str,
    pub secret: &'static str,
    pub service: &'static str,
    pub configuration: &'static str,
}

/// Everything generated, as PEM.
#[derive(Debug)]
pub struct Certs {
    /// The trust anchors (one or more certificates).
    pub trust_anchors_pem: String,
    /// The generated anchor's key; `None` when an existing issuer was used.
    pub trust_anchor_key_pem: Option<String>,
    /// The issuer certificate (chain); `None` when an existing issuer was used (it is then in
    /// `identity_chain_pem`).
    pub issuer: Option<KeyedCert>,
    /// The identity name presented by the pod.
    pub identity_name: String,
    /// Leaf first, then the issuer chain.
    pub identity_chain_pem: String,
    pub identity_key_pem: String,
    /// One per entry of [`WEBHOOKS`], in that order.
    pub webhooks: Vec<WebhookCerts>,
}

/// A certificate and its private key.
#[derive(Debug)]
pub struct KeyedCert {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A webhook's serving certificate and the CA that signed it (its `caBundle`).
#[derive(Debug)]
pub struct WebhookCerts {
    pub webhook: Webhook,
    /// `<service>.<ns>.svc`.
    pub dns_name: String,
    pub ca_pem: String,
    pub serving: KeyedCert,
}

/// An existing identity issuer, read from PEM.
pub struct ExistingIssuer {
    pub cert_pem: String,
    pub key_pem: String,
    pub trust_anchors_pem: String,
}

pub fn run(root: &Path, args: GenCertsArgs) -> anyhow::Result<()> {
    let out = if args.out.is_absolute() {
        args.out.clone()
    } else {
        root.join(&args.out)
    };
    if !args.force && out.join("identity.key").exists() {
        bail!(
            "{} already holds certificates; --force replaces them (with a new trust anchor, \
             unless --issuer-cert is given, which the mesh's proxies do not trust yet)",
            out.display()
        );
    }
    let existing = match (&args.issuer_cert, &args.issuer_key, &args.trust_anchors) {
        (Some(cert), Some(key), Some(anchors)) => Some(ExistingIssuer {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
            trust_anchors_pem: read(anchors)?,
        }),
        _ => None,
    };
    let certs = generate(
        &args.namespace,
        &args.trust_domain,
        Duration::days(i64::from(args.days)),
        existing.as_ref(),
    )?;
    let files = render(&certs, &args.namespace, &root.join("deploy"), &out)?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    for (name, contents) in &files {
        let path = out.join(name);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
        if name.ends_with(".key") || name == "secrets.yaml" {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("restricting {}", path.display()))?;
        }
    }
    println!(
        "wrote {} files to {}: identity {}, webhooks {}",
        files.len(),
        out.display(),
        certs.identity_name,
        certs
            .webhooks
            .iter()
            .map(|w| w.dns_name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if args.namespace != DEPLOY_NAMESPACE {
        println!(
            "note: deploy/ is written for the namespace {DEPLOY_NAMESPACE:?}; the certificates are for {:?}, \
             so use them with manifests of your own for that namespace",
            args.namespace
        );
    }
    if certs.issuer.is_some() {
        println!(
            "the mesh's proxies must trust {0}: install Linkerd with \
             `linkerd install --identity-trust-anchors-file {0} --identity-issuer-certificate-file {1} \
             --identity-issuer-key-file {2}`",
            out.join("trust-anchor.crt").display(),
            out.join("issuer.crt").display(),
            out.join("issuer.key").display(),
        );
    }
    println!(
        "install: kubectl apply -k {} (or, with the identity from linkerd-identity: kubectl apply -k {})",
        out.display(),
        out.join(CERTIFY_DIR).display()
    );
    Ok(())
}

/// Generates every certificate for the control plane in `namespace` under `trust_domain`.
/// Leaves are valid for `validity` from now (backdated an hour for clock skew).
pub fn generate(
    namespace: &str,
    trust_domain: &str,
    validity: Duration,
    existing: Option<&ExistingIssuer>,
) -> anyhow::Result<Certs> {
    let now = OffsetDateTime::now_utc() - Duration::hours(1);
    let identity_name = format!(
        "linkerd-destination.{namespace}.serviceaccount.identity.{namespace}.{trust_domain}"
    );

    // The issuer: generated (with its anchor) or read.
    let (trust_anchors_pem, trust_anchor_key_pem, issuer_out, issuer_chain_pem, issuer) =
        match existing {
            Some(existing) => {
                let key = KeyPair::from_pem(&existing.key_pem)
                    .context("--issuer-key is not a PEM private key")?;
                let issuer = Issuer::from_ca_cert_pem(&existing.cert_pem, key)
                    .context("--issuer-cert is not a PEM certificate")?;
                if !existing
                    .trust_anchors_pem
                    .contains("-----BEGIN CERTIFICATE-----")
                {
                    bail!("--trust-anchors holds no PEM certificate");
                }
                (
                    existing.trust_anchors_pem.clone(),
                    None,
                    None,
                    existing.cert_pem.clone(),
                    issuer,
                )
            }
            None => {
                let anchor_key = KeyPair::generate()?;
                let anchor_params = ca_params(
                    &format!("root.linkerd.{trust_domain}"),
                    None,
                    now,
                    validity * 10,
                );
                let anchor = anchor_params.self_signed(&anchor_key)?;
                let anchor_issuer = Issuer::new(anchor_params, anchor_key);

                let issuer_key = KeyPair::generate()?;
                let issuer_params = ca_params(
                    &format!("identity.{namespace}.{trust_domain}"),
                    Some(0),
                    now,
                    validity * 2,
                );
                let issuer_cert = issuer_params.signed_by(&issuer_key, &anchor_issuer)?;
                let issuer_key_pem = issuer_key.serialize_pem();
                let issuer = Issuer::new(issuer_params, issuer_key);
                (
                    anchor.pem(),
                    Some(anchor_issuer.key().serialize_pem()),
                    Some(KeyedCert {
                        cert_pem: issuer_cert.pem(),
                        key_pem: issuer_key_pem,
                    }),
                    issuer_cert.pem(),
                    issuer,
                )
            }
        };

    let identity_key = KeyPair::generate()?;
    let identity = leaf_params(
        &identity_name,
        &[
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
        now,
        validity,
    )?
    .signed_by(&identity_key, &issuer)?;
    let identity_chain_pem = format!("{}{}", identity.pem(), ensure_newline(&issuer_chain_pem));

    let webhooks = WEBHOOKS
        .iter()
        .map(|webhook| {
            let dns_name = format!("{}.{namespace}.svc", webhook.service);
            let ca_key = KeyPair::generate()?;
            let ca_params = ca_params(&format!("{dns_name} CA"), Some(0), now, validity);
            let ca = ca_params.self_signed(&ca_key)?;
            let ca_issuer = Issuer::new(ca_params, ca_key);
            let key = KeyPair::generate()?;
            let serving = leaf_params(
                &dns_name,
                &[ExtendedKeyUsagePurpose::ServerAuth],
                now,
                validity,
            )?
            .signed_by(&key, &ca_issuer)?;
            Ok(WebhookCerts {
                webhook: *webhook,
                dns_name,
                ca_pem: ca.pem(),
                serving: KeyedCert {
                    cert_pem: serving.pem(),
                    key_pem: key.serialize_pem(),
                },
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;

    Ok(Certs {
        trust_anchors_pem,
        trust_anchor_key_pem,
        issuer: issuer_out,
        identity_name,
        identity_chain_pem,
        identity_key_pem: identity_key.serialize_pem(),
        webhooks,
    })
}

/// A client certificate for mesh identity `name` (a proxy's, e.g.
/// `web.emojivoto.serviceaccount.identity.linkerd.cluster.local`) signed by the issuer that
/// [`generate`] made, with the chain a proxy presents (leaf, then issuer). Valid for `validity`
/// from an hour ago. Errors when `certs` was made with an existing issuer (its key is not kept)
/// or `name` is not a DNS name.
pub fn client_identity(certs: &Certs, name: &str, validity: Duration) -> anyhow::Result<KeyedCert> {
    let issuer_pem = certs
        .issuer
        .as_ref()
        .context("client certificates need the generated issuer")?;
    let issuer_key = KeyPair::from_pem(&issuer_pem.key_pem).context("the issuer's key")?;
    let issuer = Issuer::from_ca_cert_pem(&issuer_pem.cert_pem, issuer_key)
        .context("the issuer's certificate")?;
    let now = OffsetDateTime::now_utc() - Duration::hours(1);
    let key = KeyPair::generate()?;
    let leaf = leaf_params(name, &[ExtendedKeyUsagePurpose::ClientAuth], now, validity)?
        .signed_by(&key, &issuer)?;
    Ok(KeyedCert {
        cert_pem: format!("{}{}", leaf.pem(), ensure_newline(&issuer_pem.cert_pem)),
        key_pem: key.serialize_pem(),
    })
}

/// The files of the output directory by name: PEM files, `secrets.yaml`, and a
/// `kustomization.yaml` that includes `deploy_dir`, the secrets, and the caBundle patches; and
/// `certify/{kustomization,secrets}.yaml`, the same over `deploy_dir/certify` with only the
/// webhooks' Secrets.
pub fn render(
    certs: &Certs,
    namespace: &str,
    deploy_dir: &Path,
    out_dir: &Path,
) -> anyhow::Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    files.insert("ca.crt".to_string(), certs.trust_anchors_pem.clone());
    if let Some(key) = &certs.trust_anchor_key_pem {
        files.insert(
            "trust-anchor.crt".to_string(),
            certs.trust_anchors_pem.clone(),
        );
        files.insert("trust-anchor.key".to_string(), key.clone());
    }
    if let Some(issuer) = &certs.issuer {
        files.insert("issuer.crt".to_string(), issuer.cert_pem.clone());
        files.insert("issuer.key".to_string(), issuer.key_pem.clone());
    }
    files.insert("identity.crt".to_string(), certs.identity_chain_pem.clone());
    files.insert("identity.key".to_string(), certs.identity_key_pem.clone());

    let mut secrets = vec![tls_secret(
        IDENTITY_SECRET,
        namespace,
        &certs.identity_chain_pem,
        &certs.identity_key_pem,
        Some(&certs.trust_anchors_pem),
    )];
    for wh in &certs.webhooks {
        let stem = wh.webhook.file_stem;
        files.insert(format!("{stem}-ca.crt"), wh.ca_pem.clone());
        files.insert(format!("{stem}.crt"), wh.serving.cert_pem.clone());
        files.insert(format!("{stem}.key"), wh.serving.key_pem.clone());
        secrets.push(tls_secret(
            wh.webhook.secret,
            namespace,
            &wh.serving.cert_pem,
            &wh.serving.key_pem,
            None,
        ));
    }
    files.insert("secrets.yaml".to_string(), secrets_yaml(&secrets)?);
    // The overlay extends deploy/base: kustomize refuses deploy/ itself, which contains it.
    let base_dir = deploy_dir.join("base");
    let base = relative_path(out_dir, &base_dir).with_context(|| {
        format!(
            "no relative path from {} to {}",
            out_dir.display(),
            base_dir.display()
        )
    })?;
    files.insert(
        "kustomization.yaml".to_string(),
        kustomization(
            "deploy/ with the pod's certificates",
            &base,
            &certs.webhooks,
        )?,
    );

    // The Certify overlay gets the pod's identity from linkerd-identity: only the webhooks'
    // Secrets, and kustomize reads no file outside an overlay's directory, hence a copy.
    files.insert(
        format!("{CERTIFY_DIR}/secrets.yaml"),
        secrets_yaml(&secrets[1..])?,
    );
    let certify_out = out_dir.join(CERTIFY_DIR);
    let certify_base =
        relative_path(&certify_out, &deploy_dir.join(CERTIFY_DIR)).with_context(|| {
            format!(
                "no relative path from {} to deploy/certify",
                certify_out.display()
            )
        })?;
    files.insert(
        format!("{CERTIFY_DIR}/kustomization.yaml"),
        kustomization(
            "deploy/certify (identity from linkerd-identity) with the webhooks' certificates",
            &certify_base,
            &certs.webhooks,
        )?,
    );
    Ok(files)
}

/// The Certify-mode overlay of deploy/, and the subdirectory of the output that extends it.
const CERTIFY_DIR: &str = "certify";

/// `secrets` as one multi-document YAML file.
fn secrets_yaml(secrets: &[Secret]) -> anyhow::Result<String> {
    let mut yaml = String::from("# Generated by `cargo xtask gen-certs`: private keys.\n");
    for secret in secrets {
        yaml.push_str("---\n");
        yaml.push_str(&yaml::to_string(secret)?);
    }
    Ok(yaml)
}

/// An overlay (described by `what`): `base`, the `secrets.yaml` beside it, and a JSON patch per
/// webhook configuration that sets its caBundle.
fn kustomization(what: &str, base: &Path, webhooks: &[WebhookCerts]) -> anyhow::Result<String> {
    let patches = webhooks
        .iter()
        .map(|wh| {
            let ops = serde_json::json!([{
                "op": "add",
                "path": "/webhooks/0/clientConfig/caBundle",
                "value": serde_json::to_value(ByteString(wh.ca_pem.clone().into_bytes()))?,
            }]);
            Ok(serde_json::json!({
                "target": {
                    "group": "admissionregistration.k8s.io",
                    "version": "v1",
                    "kind": "ValidatingWebhookConfiguration",
                    "name": wh.webhook.configuration,
                },
                "patch": yaml::to_string(&ops)?,
            }))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let kustomization = serde_json::json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [base.to_string_lossy(), "secrets.yaml"],
        "patches": patches,
    });
    Ok(format!(
        "# Generated by `cargo xtask gen-certs`: {what}.\n{}",
        yaml::to_string(&kustomization)?
    ))
}

fn ca_params(
    common_name: &str,
    path_len: Option<u8>,
    not_before: OffsetDateTime,
    validity: Duration,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(common_name);
    params.is_ca = IsCa::Ca(match path_len {
        Some(n) => BasicConstraints::Constrained(n),
        None => BasicConstraints::Unconstrained,
    });
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = not_before;
    params.not_after = not_before + validity;
    params.use_authority_key_identifier_extension = true;
    params
}

/// An end-entity certificate whose CN and only DNS SAN are `name`.
fn leaf_params(
    name: &str,
    usages: &[ExtendedKeyUsagePurpose],
    not_before: OffsetDateTime,
    validity: Duration,
) -> anyhow::Result<CertificateParams> {
    let mut params = CertificateParams::new(vec![name.to_string()])
        .with_context(|| format!("{name:?} is not a DNS name"))?;
    params.distinguished_name = distinguished_name(name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = usages.to_vec();
    params.not_before = not_before;
    params.not_after = not_before + validity;
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

/// A `kubernetes.io/tls` Secret.
fn tls_secret(name: &str, namespace: &str, cert: &str, key: &str, ca: Option<&str>) -> Secret {
    let mut data = BTreeMap::new();
    data.insert("tls.crt".to_string(), ByteString(cert.as_bytes().to_vec()));
    data.insert("tls.key".to_string(), ByteString(key.as_bytes().to_vec()));
    if let Some(ca) = ca {
        data.insert("ca.crt".to_string(), ByteString(ca.as_bytes().to_vec()));
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                "linkerd.io/control-plane-ns".to_string(),
                namespace.to_string(),
            )])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_string()),
        data: Some(data),
        ..Default::default()
    }
}

/// The path of `to` relative to the directory `from`, both made absolute first (they need not
/// exist). `None` when no relative path exists (a `..` that cannot be resolved).
fn relative_path(from: &Path, to: &Path) -> Option<PathBuf> {
    let from = normalize(&std::path::absolute(from).ok()?)?;
    let to = normalize(&std::path::absolute(to).ok()?)?;
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut rel = PathBuf::new();
    for _ in from.components().skip(common) {
        rel.push("..");
    }
    for component in to.components().skip(common) {
        rel.push(component);
    }
    if rel.as_os_str().is_empty() {
        rel.push(".");
    }
    Some(rel)
}

/// Resolves `.` and `..` lexically.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            other => out.push(other),
        }
    }
    Some(out)
}

fn ensure_newline(pem: &str) -> String {
    if pem.ends_with('\n') {
        pem.to_string()
    } else {
        format!("{pem}\n")
    }
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

#[cfg(test)]
mod tests;
