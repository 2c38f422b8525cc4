//! `policy.linkerd.io` ServerAuthorization: the older way to authorize clients on Servers,
//! naming the Servers (by name or label selector) and the clients (networks, mTLS identities,
//! ServiceAccounts, or anyone) in one object (spec/policy.md §2.1; admission rules §6).

use crate::shared::Network;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.server`: the Servers of the authorization's namespace it applies to. The CRD and the
/// webhook require exactly one of `name` or `selector` (read with neither, it would select
/// every Server of the namespace).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[schemars(extend("oneOf" = [{"required": ["name"]}, {"required": ["selector"]}]))]
pub struct ServerSelector {
    /// A Server's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A selector over the Servers' labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// `spec.client`: which clients are authorized. The webhook requires `meshTLS` or
/// `unauthenticated: true` (read with neither, it authorizes no one and is skipped).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Client {
    /// Client networks; absent means the controller's default (cluster) networks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networks: Option<Vec<Network>>,
    /// Authorizes clients without mTLS (must be false when `meshTLS` is set; admission §6).
    #[serde(default)]
    pub unauthenticated: bool,
    #[serde(rename = "meshTLS", default, skip_serializing_if = "Option::is_none")]
    pub mesh_tls: Option<MeshTls>,
}

/// `spec.client.meshTLS`: the mTLS clients authorized.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MeshTls {
    /// TLS without a client identity (the identity controller's own case); must be false when
    /// identities or ServiceAccounts are given (admission §6).
    #[serde(rename = "unauthenticatedTLS", default)]
    pub unauthenticated_tls: bool,
    /// Identity strings: exact names, `*.suffix` or `*` (spec §3.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_accounts: Option<Vec<ServiceAccountRef>>,
}

/// A ServiceAccount whose identity is authorized; namespace defaults to the authorization's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
pub struct ServiceAccountRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// The storage version, read by the policy controller.
pub mod v1beta1 {
    use super::*;
    use kube::CustomResource;

    /// `spec` of a ServerAuthorization: the Servers it applies to and the clients it authorizes.
    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "policy.linkerd.io",
        version = "v1beta1",
        kind = "ServerAuthorization",
        namespaced,
        shortname = "saz"
    )]
    pub struct ServerAuthorizationSpec {
        pub server: ServerSelector,
        pub client: Client,
    }
}

/// Deprecated, with the same schema as `v1beta1`.
pub mod v1alpha1 {
    use super::*;
    use kube::CustomResource;

    /// `spec` of a ServerAuthorization, as in `v1beta1`.
    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "policy.linkerd.io",
        version = "v1alpha1",
        kind = "ServerAuthorization",
        namespaced,
        shortname = "saz"
    )]
    pub struct ServerAuthorizationSpec {
        pub server: ServerSelector,
        pub client: Client,
    }
}

#[cfg(test)]
mod tests {
    use super::v1beta1::ServerAuthorization;

    #[test]
    fn decodes_a_server_authorization() {
        let saz: ServerAuthorization = crate::yaml::from_str(
            r#"
apiVersion: policy.linkerd.io/v1beta1
kind: ServerAuthorization
metadata: {name: web-admin, namespace: emojivoto}
spec:
  server: {selector: {matchLabels: {app: web}}}
  client:
    networks:
    - cidr: 10.0.0.0/8
      except: [10.1.2.3]
    meshTLS:
      identities: ["*.emojivoto.serviceaccount.identity.linkerd.cluster.local"]
      serviceAccounts:
      - name: vote-bot
      - {name: prometheus, namespace: linkerd-viz}
"#,
        )
        .unwrap();
        assert!(saz.spec.server.name.is_none());
        let labels = saz.spec.server.selector.unwrap().match_labels.unwrap();
        assert_eq!(labels["app"], "web");
        let networks = saz.spec.client.networks.unwrap();
        assert_eq!(networks[0].cidr, "10.0.0.0/8");
        assert_eq!(networks[0].exceptions(), ["10.1.2.3"]);
        assert!(!saz.spec.client.unauthenticated);
        let tls = saz.spec.client.mesh_tls.unwrap();
        assert!(!tls.unauthenticated_tls);
        let sas = tls.service_accounts.unwrap();
        assert_eq!(sas[0].name, "vote-bot");
        assert_eq!(sas[0].namespace, None);
        assert_eq!(sas[1].namespace.as_deref(), Some("linkerd-viz"));

        let anyone: ServerAuthorization = crate::yaml::from_str(
            "apiVersion: policy.linkerd.io/v1beta1\nkind: ServerAuthorization\nmetadata: {name: a}\nspec: {server: {name: web-http}, client: {unauthenticated: true}}\n",
        )
        .unwrap();
        assert_eq!(anyone.spec.server.name.as_deref(), Some("web-http"));
        assert!(anyone.spec.client.unauthenticated);
        assert!(anyone.spec.client.mesh_tls.is_none());
    }
}
