//! `policy.linkerd.io` EgressNetwork: a set of networks outside the cluster that outbound
//! traffic may reach, with a default policy for traffic no route matches (spec/policy.md §2.1;
//! outbound §5.2, admission §6, status §7.4).

use crate::shared::Network;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.trafficPolicy`: what happens to traffic to the networks that no route matches.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
pub enum TrafficPolicy {
    Allow,
    Deny,
}

/// `status`, written by the status controller (spec §7.4); outbound routes attach to the
/// EgressNetwork only once its `Accepted` condition is `True`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct EgressNetworkStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// The only served version.
pub mod v1alpha1 {
    use super::*;
    use kube::CustomResource;

    /// `spec` of an EgressNetwork.
    #[derive(Clone, Debug, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "policy.linkerd.io",
        version = "v1alpha1",
        kind = "EgressNetwork",
        namespaced,
        status = "EgressNetworkStatus"
    )]
    #[serde(rename_all = "camelCase")]
    pub struct EgressNetworkSpec {
        pub traffic_policy: TrafficPolicy,
        /// The networks; absent means everything outside the cluster networks (the index
        /// defaults it, spec §5.2). Present, it must not be empty (admission §6).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub networks: Option<Vec<Network>>,
    }
}

#[cfg(test)]
mod tests {
    use super::{TrafficPolicy, v1alpha1::EgressNetwork};

    #[test]
    fn decodes_an_egress_network() {
        let egress: EgressNetwork = crate::yaml::from_str(
            r#"
apiVersion: policy.linkerd.io/v1alpha1
kind: EgressNetwork
metadata: {name: internet, namespace: linkerd-egress}
spec:
  trafficPolicy: Deny
  networks:
  - {cidr: 0.0.0.0/0, except: [10.0.0.0/8, 192.168.0.0/16]}
  - cidr: "::/0"
status:
  conditions:
  - {type: Accepted, status: "True", reason: Accepted, message: "", lastTransitionTime: "2026-05-04T09:32:01Z"}
"#,
        )
        .unwrap();
        assert_eq!(egress.spec.traffic_policy, TrafficPolicy::Deny);
        let networks = egress.spec.networks.unwrap();
        assert_eq!(networks[0].exceptions(), ["10.0.0.0/8", "192.168.0.0/16"]);
        assert_eq!(networks[1].cidr, "::/0");
        assert_eq!(egress.status.unwrap().conditions[0].reason, "Accepted");

        let no_networks: EgressNetwork = crate::yaml::from_str(
            "apiVersion: policy.linkerd.io/v1alpha1\nkind: EgressNetwork\nmetadata: {name: a}\nspec: {trafficPolicy: Allow}\n",
        )
        .unwrap();
        assert_eq!(no_networks.spec.traffic_policy, TrafficPolicy::Allow);
        assert!(no_networks.spec.networks.is_none());
        let no_policy = crate::yaml::from_str::<EgressNetwork>(
            "apiVersion: policy.linkerd.io/v1alpha1\nkind: EgressNetwork\nmetadata: {name: a}\nspec: {networks: []}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(no_policy.contains("trafficPolicy"), "{no_policy}");
    }
}
