//! Secrets, as the multicluster cluster store reads them (spec/destination.md §J): a link to
//! another cluster is a Secret of type [`LINK_SECRET_TYPE`] labelled [`CLUSTER_NAME_LABEL`] in
//! the control-plane namespace, its `kubeconfig` key a client of that cluster, its annotations
//! the cluster's trust domain and cluster domain.

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use std::sync::Arc;

use super::{InvalidObject, Kind, names, wire};

/// The `type` of a link Secret (written by `linkerd multicluster link`).
pub const LINK_SECRET_TYPE: &str = "mirror.linkerd.io/remote-kubeconfig";
/// Label of a link Secret naming the linked cluster.
pub const CLUSTER_NAME_LABEL: &str = "multicluster.linkerd.io/cluster-name";
/// Annotation of a link Secret: the linked cluster's identity trust domain.
pub const TRUST_DOMAIN_ANNOTATION: &str = "multicluster.linkerd.io/trust-domain";
/// Annotation of a link Secret: the linked cluster's Kubernetes cluster domain.
pub const CLUSTER_DOMAIN_ANNOTATION: &str = "multicluster.linkerd.io/cluster-domain";

/// A Secret: what makes it a link, if it is one. Secrets of other types keep no data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretInfo {
    pub namespace: String,
    pub name: String,
    /// `type`; `""` when absent (`Opaque` by default in the API).
    pub type_: String,
    /// Label [`CLUSTER_NAME_LABEL`].
    pub cluster_name: Option<String>,
    /// Annotation [`TRUST_DOMAIN_ANNOTATION`].
    pub trust_domain: Option<String>,
    /// Annotation [`CLUSTER_DOMAIN_ANNOTATION`].
    pub cluster_domain: Option<String>,
    /// Data key `kubeconfig`, decoded from base64: `None` when absent, `Err` (why) when it is
    /// not base64. Only kept for link Secrets.
    pub kubeconfig: Option<Result<Arc<[u8]>, String>>,
}

/// A valid link ([`SecretInfo::link`]): the linked cluster's name and domains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkSecret {
    /// The linked cluster's name (label [`CLUSTER_NAME_LABEL`]).
    pub cluster: String,
    pub trust_domain: String,
    pub cluster_domain: String,
    /// The `kubeconfig` data key, decoded from base64.
    pub kubeconfig: Arc<[u8]>,
}

/// Why a link Secret cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkSecretError {
    #[error("label {CLUSTER_NAME_LABEL} is empty")]
    NoClusterName,
    #[error(
        "label {CLUSTER_NAME_LABEL} is \"{}\", the name of the local cluster's metrics",
        crate::metrics::LOCAL_CLUSTER
    )]
    ReservedClusterName,
    #[error(
        "label {CLUSTER_NAME_LABEL} is {0:?}, not a DNS label (lowercase letters, digits and '-'), which `svc@cluster` entries and --linked-cluster-state name"
    )]
    InvalidClusterName(String),
    #[error("annotation {0} is missing or empty")]
    MissingAnnotation(&'static str),
    #[error("annotation {0} is {1:?}, not a DNS name (lowercase letters, digits, '-' and '.')")]
    InvalidAnnotation(&'static str, String),
    #[error("data key kubeconfig is missing, empty or blank")]
    NoKubeconfig,
    #[error("data key kubeconfig is not base64: {0}")]
    KubeconfigNotBase64(String),
}

impl LinkSecretError {
    /// A short reason for metric labels (`no_cluster_name`, `reserved_cluster_name`,
    /// `invalid_cluster_name`,
    /// `missing_annotation`, `invalid_annotation`, `no_kubeconfig`, `malformed_kubeconfig`).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NoClusterName => "no_cluster_name",
            Self::ReservedClusterName => "reserved_cluster_name",
            Self::InvalidClusterName(_) => "invalid_cluster_name",
            Self::MissingAnnotation(_) => "missing_annotation",
            Self::InvalidAnnotation(..) => "invalid_annotation",
            Self::NoKubeconfig => "no_kubeconfig",
            Self::KubeconfigNotBase64(_) => "malformed_kubeconfig",
        }
    }
}

impl Kind for Secret {
    type Wire = wire::Secret;
    type Object = SecretInfo;
    const LABEL: &'static str = "Secret";

    fn from_wire(secret: wire::Secret) -> Result<SecretInfo, InvalidObject> {
        let (namespace, name) = names("Secret", &secret.metadata)?;
        let type_ = secret.type_.unwrap_or_default();
        let is_link = type_ == LINK_SECRET_TYPE;
        let mut labels = secret.metadata.labels;
        let mut annotations = secret.metadata.annotations.0;
        let kubeconfig = secret.data.kubeconfig.filter(|_| is_link).map(|data| {
            base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map(Arc::from)
                .map_err(|e| e.to_string())
        });
        Ok(SecretInfo {
            cluster_name: labels.remove(CLUSTER_NAME_LABEL),
            trust_domain: annotations.remove(TRUST_DOMAIN_ANNOTATION),
            cluster_domain: annotations.remove(CLUSTER_DOMAIN_ANNOTATION),
            kubeconfig,
            namespace,
            name,
            type_,
        })
    }
}

impl SecretInfo {
    /// Whether this is a link Secret at all: type [`LINK_SECRET_TYPE`] with the
    /// [`CLUSTER_NAME_LABEL`] label (others are not links, and not errors either).
    pub fn is_link(&self) -> bool {
        self.type_ == LINK_SECRET_TYPE && self.cluster_name.is_some()
    }

    /// The link this Secret describes. Errors name what is missing or malformed; call only on
    /// [`SecretInfo::is_link`] Secrets.
    pub fn link(&self) -> Result<LinkSecret, LinkSecretError> {
        let cluster = self
            .cluster_name
            .clone()
            .filter(|c| !c.is_empty())
            .ok_or(LinkSecretError::NoClusterName)?;
        // Its series would be the local cluster's, and unlinking it would remove them.
        if cluster == crate::metrics::LOCAL_CLUSTER {
            return Err(LinkSecretError::ReservedClusterName);
        }
        if !linkerd_k8s_api::names::is_dns1123_label(&cluster) {
            return Err(LinkSecretError::InvalidClusterName(cluster));
        }
        // Both domains end the names sent to proxies: identities and authorities. As Linkerd's
        // own trust domain, each must be a DNS-1123 subdomain.
        let annotation = |value: &Option<String>, key| {
            let value = value
                .clone()
                .filter(|v| !v.is_empty())
                .ok_or(LinkSecretError::MissingAnnotation(key))?;
            if !linkerd_k8s_api::names::is_dns1123_subdomain(&value) {
                return Err(LinkSecretError::InvalidAnnotation(key, value));
            }
            Ok(value)
        };
        let trust_domain = annotation(&self.trust_domain, TRUST_DOMAIN_ANNOTATION)?;
        let cluster_domain = annotation(&self.cluster_domain, CLUSTER_DOMAIN_ANNOTATION)?;
        let kubeconfig = match &self.kubeconfig {
            None => return Err(LinkSecretError::NoKubeconfig),
            // Blank (whitespace only) is as empty: kube reads it as a kubeconfig of nothing.
            Some(Ok(data)) if data.iter().all(u8::is_ascii_whitespace) => {
                return Err(LinkSecretError::NoKubeconfig);
            }
            Some(Err(e)) => return Err(LinkSecretError::KubeconfigNotBase64(e.clone())),
            Some(Ok(data)) => data.clone(),
        };
        Ok(LinkSecret {
            cluster,
            trust_domain,
            cluster_domain,
            kubeconfig,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::decode_value;
    use serde_json::json;

    fn secret(data: serde_json::Value, annotations: serde_json::Value) -> SecretInfo {
        decode_value::<Secret>(&json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {
                "name": "cluster-credentials-east", "namespace": "linkerd",
                "labels": {"multicluster.linkerd.io/cluster-name": "east"},
                "annotations": annotations,
            },
            "type": "mirror.linkerd.io/remote-kubeconfig",
            "data": data,
        }))
        .unwrap()
    }

    fn domains() -> serde_json::Value {
        json!({
            "multicluster.linkerd.io/trust-domain": "east.local",
            "multicluster.linkerd.io/cluster-domain": "cluster.east",
        })
    }

    #[test]
    fn a_link_secret_gives_its_cluster_domains_and_kubeconfig() {
        // "apiVersion: v1\n" in base64.
        let s = secret(json!({"kubeconfig": "YXBpVmVyc2lvbjogdjEK"}), domains());
        assert!(s.is_link());
        let link = s.link().unwrap();
        assert_eq!(link.cluster, "east");
        assert_eq!(link.trust_domain, "east.local");
        assert_eq!(link.cluster_domain, "cluster.east");
        assert_eq!(&*link.kubeconfig, b"apiVersion: v1\n");
    }

    #[test]
    fn bad_link_secrets_say_what_is_wrong() {
        let mut local = secret(json!({"kubeconfig": "eA=="}), domains());
        local.cluster_name = Some("local".into());
        let err = local.link().unwrap_err();
        assert_eq!(err, LinkSecretError::ReservedClusterName);
        assert_eq!(err.reason(), "reserved_cluster_name");
        assert!(err.to_string().contains("\"local\""), "{err}");
        let no_kubeconfig = secret(json!({"other": "eA=="}), domains());
        assert_eq!(no_kubeconfig.link(), Err(LinkSecretError::NoKubeconfig));
        // Blank: "\n \t\n" (newcomer finding: it linked a directory-served cluster).
        let blank = secret(json!({"kubeconfig": "CiAJCg=="}), domains());
        assert_eq!(blank.link(), Err(LinkSecretError::NoKubeconfig));
        let not_base64 = secret(json!({"kubeconfig": "%%%"}), domains());
        let err = not_base64.link().unwrap_err();
        assert_eq!(err.reason(), "malformed_kubeconfig");
        let no_domain = secret(
            json!({"kubeconfig": "eA=="}),
            json!({"multicluster.linkerd.io/trust-domain": "east.local"}),
        );
        assert_eq!(
            no_domain.link(),
            Err(LinkSecretError::MissingAnnotation(
                CLUSTER_DOMAIN_ANNOTATION
            ))
        );
        // Newcomer finding: a cluster named `we@st` linked, and no `svc@cluster` entry could
        // name it.
        for name in ["we@st", "West", "a,b", &"x".repeat(64)] {
            let mut bad = secret(json!({"kubeconfig": "eA=="}), domains());
            bad.cluster_name = Some(name.to_string());
            let err = bad.link().unwrap_err();
            assert_eq!(err, LinkSecretError::InvalidClusterName(name.to_string()));
            assert_eq!(err.reason(), "invalid_cluster_name");
        }
        // Newcomer finding: a trust domain with a space and a slash was sent to proxies in
        // every identity of the cluster.
        for (trust_domain, cluster_domain, key, value) in [
            (
                "East.Local /x",
                "cluster.local",
                TRUST_DOMAIN_ANNOTATION,
                "East.Local /x",
            ),
            (
                "east.local",
                "cluster..local",
                CLUSTER_DOMAIN_ANNOTATION,
                "cluster..local",
            ),
        ] {
            let bad = secret(
                json!({"kubeconfig": "eA=="}),
                json!({
                    "multicluster.linkerd.io/trust-domain": trust_domain,
                    "multicluster.linkerd.io/cluster-domain": cluster_domain,
                }),
            );
            let err = bad.link().unwrap_err();
            assert_eq!(
                err,
                LinkSecretError::InvalidAnnotation(key, value.to_string())
            );
            assert_eq!(err.reason(), "invalid_annotation");
            assert!(err.to_string().contains("not a DNS name"), "{err}");
        }
    }

    #[test]
    fn other_secrets_are_not_links_and_keep_no_data() {
        let tls = decode_value::<Secret>(&json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "tls", "namespace": "linkerd"},
            "type": "kubernetes.io/tls",
            "data": {"kubeconfig": "eA==", "tls.crt": "eA=="},
        }))
        .unwrap();
        assert!(!tls.is_link());
        assert_eq!(tls.kubeconfig, None);
    }
}
