//! `policy.linkerd.io` Server: a port of the workloads a selector picks, with its protocol and
//! default access policy (spec/policy.md §2.1). The destination reads only `proxyProtocol:
//! opaque` from it (spec/destination.md §C.3.1); the policy controller reads all of it.

use k8s_openapi::apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How the proxy treats a Server's traffic (`spec.proxyProtocol`; CRD default `unknown`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
pub enum ProxyProtocol {
    /// Detect the protocol.
    #[default]
    #[serde(rename = "unknown")]
    Unknown,
    #[serde(rename = "HTTP/1")]
    Http1,
    #[serde(rename = "HTTP/2")]
    Http2,
    #[serde(rename = "gRPC")]
    Grpc,
    /// No detection: TCP forwarded as is (and opaque transport between proxies).
    #[serde(rename = "opaque")]
    Opaque,
    #[serde(rename = "TLS")]
    Tls,
}

/// The storage version, read by both controllers.
pub mod v1beta3 {
    use super::*;
    use kube::CustomResource;

    /// `spec` of a Server: exactly one of the two selectors, a port, a protocol, and the access
    /// policy for clients no authorization names.
    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "policy.linkerd.io",
        version = "v1beta3",
        kind = "Server",
        namespaced,
        shortname = "srv"
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ServerSpec {
        /// Selects pods in the Server's namespace (empty selects all, absent selects none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pod_selector: Option<LabelSelector>,
        /// Selects ExternalWorkloads in the Server's namespace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub external_workload_selector: Option<LabelSelector>,
        /// A port number (1..=65535) or a container/workload port name.
        pub port: IntOrString,
        #[serde(default)]
        pub proxy_protocol: ProxyProtocol,
        /// One of the default-policy names (`deny` when absent, the CRD default).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub access_policy: Option<String>,
    }
}

/// Like `v1beta3` without `accessPolicy`.
pub mod v1beta2 {
    use super::*;
    use kube::CustomResource;

    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "policy.linkerd.io",
        version = "v1beta2",
        kind = "Server",
        namespaced
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ServerSpec {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pod_selector: Option<LabelSelector>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub external_workload_selector: Option<LabelSelector>,
        pub port: IntOrString,
        #[serde(default)]
        pub proxy_protocol: ProxyProtocol,
    }
}

/// Pods only (deprecated version).
pub mod v1beta1 {
    use super::*;
    use kube::CustomResource;

    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "policy.linkerd.io",
        version = "v1beta1",
        kind = "Server",
        namespaced
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ServerSpec {
        pub pod_selector: LabelSelector,
        pub port: IntOrString,
        #[serde(default)]
        pub proxy_protocol: ProxyProtocol,
    }
}

/// Pods only (the first version).
pub mod v1alpha1 {
    use super::*;
    use kube::CustomResource;

    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "policy.linkerd.io",
        version = "v1alpha1",
        kind = "Server",
        namespaced
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ServerSpec {
        pub pod_selector: LabelSelector,
        pub port: IntOrString,
        #[serde(default)]
        pub proxy_protocol: ProxyProtocol,
    }
}

#[cfg(test)]
mod tests {
    use super::{ProxyProtocol, v1beta3::Server};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    #[test]
    fn decodes_a_server_as_kubectl_prints_it() {
        let srv: Server = crate::yaml::from_str(
            r#"
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {name: secrets-api, namespace: edge-strict}
spec:
  accessPolicy: deny
  podSelector: {matchLabels: {app: secrets}}
  port: 8200
  proxyProtocol: opaque
"#,
        )
        .unwrap();
        assert_eq!(srv.spec.port, IntOrString::Int(8200));
        assert_eq!(srv.spec.proxy_protocol, ProxyProtocol::Opaque);
        assert_eq!(srv.spec.access_policy.as_deref(), Some("deny"));
        let named: Server = crate::yaml::from_str(
            "apiVersion: policy.linkerd.io/v1beta3\nkind: Server\nmetadata: {name: a}\nspec: {port: grpc, proxyProtocol: gRPC, externalWorkloadSelector: {}}\n",
        )
        .unwrap();
        assert_eq!(named.spec.port, IntOrString::String("grpc".into()));
        assert!(named.spec.pod_selector.is_none());
    }
}
