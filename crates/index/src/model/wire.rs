//! The shapes the index decodes the numerous built-in kinds from: Pods, Services,
//! EndpointSlices, and the metadata of Nodes, ReplicaSets and Jobs.
//!
//! Each names only the fields a view reads, so decoding skips the rest of a document (a meshed
//! pod's proxy environment, `managedFields`, its status conditions) without allocating it: on
//! a cluster of tens of thousands of pods, this is most of the index's decode time and of the
//! memory it churns. Every field is optional and defaults when absent or `null`; what a field
//! must hold to be usable is checked by the compact object built from it ([`super`]).

use serde::{Deserialize, Deserializer, de};
use std::{collections::BTreeMap, fmt};

/// `metadata`, as far as the index reads it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Metadata {
    pub name: Option<String>,
    pub namespace: Option<String>,
    #[serde(deserialize_with = "null_default")]
    pub labels: BTreeMap<String, String>,
    pub annotations: LinkerdAnnotations,
    #[serde(deserialize_with = "null_default")]
    pub owner_references: Vec<OwnerReference>,
    /// Set while the object is being deleted; only its presence is read.
    pub deletion_timestamp: Option<de::IgnoredAny>,
    /// RFC 3339.
    pub creation_timestamp: Option<String>,
    /// Read for Services only: the owner reference of the EndpointSlices written for their
    /// ExternalWorkloads names it.
    pub uid: Option<String>,
}

/// Annotations whose key is in a subdomain of `linkerd.io` (`config.linkerd.io/…`,
/// `retry.linkerd.io/…`, `mirror.linkerd.io/…`, `balancer.alpha.linkerd.io/…`): the only ones
/// any view reads. Others (`kubectl.kubernetes.io/last-applied-configuration` can hold a
/// whole manifest; injected pods carry `linkerd.io/proxy-version` and friends) are skipped
/// while decoding, never allocated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkerdAnnotations(pub BTreeMap<String, String>);

/// One `ownerReferences[]` entry.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct OwnerReference {
    pub kind: String,
    pub name: String,
}

/// An object of which only `metadata` is read (Nodes, ReplicaSets, Jobs). In kube mode these
/// kinds are listed and watched as `PartialObjectMetadata`, which has this shape.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct MetadataOnly {
    pub metadata: Metadata,
}

/// A Pod.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Pod {
    pub metadata: Metadata,
    #[serde(deserialize_with = "null_default")]
    pub spec: PodSpec,
    #[serde(deserialize_with = "null_default")]
    pub status: PodStatus,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodSpec {
    pub service_account_name: Option<String>,
    pub node_name: Option<String>,
    pub host_network: Option<bool>,
    #[serde(deserialize_with = "null_default")]
    pub init_containers: Vec<Container>,
    #[serde(deserialize_with = "null_default")]
    pub containers: Vec<Container>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Container {
    pub name: String,
    #[serde(deserialize_with = "null_default")]
    pub ports: Vec<ContainerPort>,
    /// Only the variables in [`PROXY_LISTEN_ENV`], which the index reads from the proxy
    /// container; the others (a proxy sets about forty) are skipped without allocating.
    #[serde(deserialize_with = "proxy_listen_env")]
    pub env: Vec<EnvVar>,
    pub liveness_probe: Option<Probe>,
    pub readiness_probe: Option<Probe>,
    pub startup_probe: Option<Probe>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ContainerPort {
    pub name: Option<String>,
    pub container_port: i64,
    pub host_port: Option<i64>,
    pub protocol: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct EnvVar {
    pub name: String,
    pub value: Option<String>,
}

/// The proxy's environment variables that [`Container::env`] keeps: its listen addresses, from
/// which the index learns the proxy's own ports (spec/policy.md §1.2).
pub const PROXY_LISTEN_ENV: [&str; 3] = [
    "LINKERD2_PROXY_INBOUND_LISTEN_ADDR",
    "LINKERD2_PROXY_ADMIN_LISTEN_ADDR",
    "LINKERD2_PROXY_CONTROL_LISTEN_ADDR",
];

/// `env`, `null` as empty, keeping only the [`PROXY_LISTEN_ENV`] entries. The others are read
/// borrowed from the text (or skipped, `valueFrom`) and dropped.
fn proxy_listen_env<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<EnvVar>, D::Error> {
    #[derive(Deserialize)]
    struct Entry<'a> {
        #[serde(borrow, default)]
        name: std::borrow::Cow<'a, str>,
        #[serde(borrow, default)]
        value: Option<std::borrow::Cow<'a, str>>,
    }
    struct Kept(Vec<EnvVar>);
    impl<'de> Deserialize<'de> for Kept {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Entries;
            impl<'de> de::Visitor<'de> for Entries {
                type Value = Kept;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a list of environment variables")
                }
                fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Kept, A::Error> {
                    let mut kept = Vec::new();
                    while let Some(entry) = seq.next_element::<Entry<'de>>()? {
                        if PROXY_LISTEN_ENV.contains(&entry.name.as_ref()) {
                            kept.push(EnvVar {
                                name: entry.name.into_owned(),
                                value: entry.value.map(std::borrow::Cow::into_owned),
                            });
                        }
                    }
                    Ok(Kept(kept))
                }
            }
            deserializer.deserialize_seq(Entries)
        }
    }
    Ok(Option::<Kept>::deserialize(deserializer)?.map_or_else(Vec::new, |k| k.0))
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Probe {
    pub http_get: Option<HttpGetAction>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct HttpGetAction {
    pub path: Option<String>,
    pub port: Option<IntOrString>,
}

/// A Kubernetes `IntOrString`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i64),
    String(String),
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodStatus {
    pub phase: Option<String>,
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    #[serde(rename = "podIPs", deserialize_with = "null_default")]
    pub pod_ips: Vec<PodIp>,
    #[serde(rename = "hostIP")]
    pub host_ip: Option<String>,
    #[serde(rename = "hostIPs", deserialize_with = "null_default")]
    pub host_ips: Vec<PodIp>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodIp {
    pub ip: String,
}

/// A Service.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Service {
    pub metadata: Metadata,
    #[serde(deserialize_with = "null_default")]
    pub spec: ServiceSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceSpec {
    #[serde(rename = "type")]
    pub type_: Option<String>,
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    #[serde(rename = "clusterIPs", deserialize_with = "null_default")]
    pub cluster_ips: Vec<String>,
    #[serde(deserialize_with = "null_default")]
    pub ports: Vec<ServicePort>,
    pub internal_traffic_policy: Option<String>,
    /// `None` when absent or `null`.
    pub selector: Option<BTreeMap<String, String>>,
    #[serde(deserialize_with = "null_default")]
    pub ip_families: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServicePort {
    pub name: Option<String>,
    pub port: i64,
    pub app_protocol: Option<String>,
    pub protocol: Option<String>,
    pub target_port: Option<IntOrString>,
}

/// An EndpointSlice.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EndpointSlice {
    pub metadata: Metadata,
    pub address_type: String,
    /// `None` when absent or `null` (placeholder slices), unlike an empty list.
    pub ports: Option<Vec<EndpointPort>>,
    #[serde(deserialize_with = "null_default")]
    pub endpoints: Vec<Endpoint>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct EndpointPort {
    pub name: Option<String>,
    pub port: Option<i64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Endpoint {
    #[serde(deserialize_with = "null_default")]
    pub addresses: Vec<String>,
    pub conditions: Option<EndpointConditions>,
    pub hostname: Option<String>,
    pub zone: Option<String>,
    pub node_name: Option<String>,
    pub hints: Option<EndpointHints>,
    pub target_ref: Option<ObjectReference>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct EndpointConditions {
    pub ready: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EndpointHints {
    #[serde(deserialize_with = "null_default")]
    pub for_zones: Vec<ForZone>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ForZone {
    pub name: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ObjectReference {
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

// === impl LinkerdAnnotations ===

impl LinkerdAnnotations {
    /// Whether `key` is kept: its prefix (before `/`) is a subdomain of `linkerd.io`.
    pub fn keeps(key: &str) -> bool {
        key.split_once('/')
            .is_some_and(|(prefix, _)| prefix.ends_with(".linkerd.io"))
    }
}

impl<'de> Deserialize<'de> for LinkerdAnnotations {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl<'de> de::Visitor<'de> for Visitor {
            type Value = LinkerdAnnotations;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of annotations")
            }

            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(LinkerdAnnotations::default())
            }

            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(LinkerdAnnotations::default())
            }

            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut kept = BTreeMap::new();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if LinkerdAnnotations::keeps(&key) {
                        kept.insert(key.into_owned(), map.next_value::<String>()?);
                    } else {
                        map.next_value::<SkippedString>()?;
                    }
                }
                Ok(LinkerdAnnotations(kept))
            }
        }

        deserializer.deserialize_any(Visitor)
    }
}

/// A string value read and thrown away without allocating. Anything else (a list, a map) is
/// an error, as it is for a label value: the API server refuses such an object.
struct SkippedString;

impl<'de> Deserialize<'de> for SkippedString {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl de::Visitor<'_> for Visitor {
            type Value = SkippedString;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(SkippedString)
            }
        }

        deserializer.deserialize_str(Visitor)
    }
}

/// A Secret: its metadata, `type`, and the data key a multicluster link reads. Other keys
/// (certificates, tokens) are skipped while decoding, never allocated.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Secret {
    pub metadata: Metadata,
    #[serde(rename = "type")]
    pub type_: Option<String>,
    #[serde(deserialize_with = "null_default")]
    pub data: SecretData,
}

/// The `data` keys of a Secret that are read, base64 as the API serves them.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct SecretData {
    pub kubeconfig: Option<String>,
}

/// Decodes `T`, with `null` read as `T::default()` (the API omits empty lists, but hand-written
/// manifests write `ports: null` or `labels:` with no value).
fn null_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_proxy_listen_addresses_are_kept_of_a_container_env() {
        let json = r#"{"name": "linkerd-proxy", "env": [
            {"name": "_pod_name", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "LINKERD2_PROXY_LOG", "value": "warn,linkerd=info"},
            {"name": "LINKERD2_PROXY_INBOUND_LISTEN_ADDR", "value": "[::]:4143"},
            {"name": "LINKERD2_PROXY_ADMIN_LISTEN_ADDR", "value": "0.0.0.0:4191\u0020"},
            {"name": "LINKERD2_PROXY_CONTROL_LISTEN_ADDR", "valueFrom": {"x": 1}}
        ]}"#;
        let container: Container = serde_json::from_str(json).unwrap();
        let kept: Vec<_> = container
            .env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_deref()))
            .collect();
        assert_eq!(
            kept,
            [
                ("LINKERD2_PROXY_INBOUND_LISTEN_ADDR", Some("[::]:4143")),
                // An escape makes an owned string: read all the same.
                ("LINKERD2_PROXY_ADMIN_LISTEN_ADDR", Some("0.0.0.0:4191 ")),
                ("LINKERD2_PROXY_CONTROL_LISTEN_ADDR", None),
            ]
        );
        for env in ["null", "[]"] {
            let c: Container = serde_json::from_str(&format!(r#"{{"env": {env}}}"#)).unwrap();
            assert!(c.env.is_empty(), "{env}");
        }
        // Not a list: an error naming what was expected.
        let err = serde_json::from_str::<Container>(r#"{"env": {"a": 1}}"#).unwrap_err();
        assert!(
            err.to_string().contains("a list of environment variables"),
            "{err}"
        );
    }

    #[test]
    fn only_linkerd_subdomain_annotations_are_kept() {
        let meta: Metadata = serde_json::from_value(serde_json::json!({
            "name": "web",
            "annotations": {
                "config.linkerd.io/opaque-ports": "3306",
                "balancer.alpha.linkerd.io/load-biaser-penalty": "10",
                "linkerd.io/proxy-version": "edge-26.4.4",
                "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}",
                "nolinkerd.io/x": "y",
            },
            "labels": null,
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-5f7b", "uid": "u", "controller": true}],
        }))
        .unwrap();
        assert_eq!(
            meta.annotations.0.keys().collect::<Vec<_>>(),
            [
                "balancer.alpha.linkerd.io/load-biaser-penalty",
                "config.linkerd.io/opaque-ports"
            ]
        );
        assert!(meta.labels.is_empty());
        assert_eq!(meta.owner_references[0].kind, "ReplicaSet");
        assert_eq!(meta.owner_references[0].name, "web-5f7b");
    }

    /// An annotation the index skips is still checked to be a string, as a label is: the API
    /// server refuses an object whose annotation holds a list or a map. `null` is refused here
    /// too, and read as `""` by `decode_json`'s slower path (as the API server stores it).
    #[test]
    fn a_skipped_annotation_must_be_a_string() {
        let decode = |value: serde_json::Value| {
            serde_json::from_value::<Metadata>(serde_json::json!({
                "name": "web",
                "annotations": {"example.com/owner": value, "config.linkerd.io/opaque-ports": "3306"},
            }))
        };
        let meta = decode(serde_json::json!("team-a")).unwrap();
        assert_eq!(
            meta.annotations.0.keys().collect::<Vec<_>>(),
            ["config.linkerd.io/opaque-ports"]
        );
        for value in [
            serde_json::json!(["a", "b"]),
            serde_json::json!({"a": "b"}),
            serde_json::json!(7),
            serde_json::json!(null),
        ] {
            let error = decode(value.clone()).unwrap_err().to_string();
            assert!(
                error.contains("invalid type") && error.contains("expected a string"),
                "{value}: {error}"
            );
        }
    }

    #[test]
    fn a_port_of_the_wrong_type_is_an_error_naming_it() {
        let error = serde_json::from_value::<Service>(serde_json::json!({
            "metadata": {"name": "web"},
            "spec": {"ports": [{"port": "eighty"}]},
        }))
        .unwrap_err();
        assert!(error.to_string().contains("invalid type"), "{error}");
    }
}
