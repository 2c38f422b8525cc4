//! `policy.linkerd.io` HTTPLocalRateLimitPolicy: per-proxy request rate limits on a Server, in
//! total, per client identity, and overridden for named clients (spec/policy.md §2.1; inbound
//! §4.7, admission §6, status §7.3).

use crate::shared::{LocalTargetRef, NamespacedTargetRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A rate: `{requestsPerSecond}` (admission requires it to be greater than 0).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Limit {
    pub requests_per_second: u32,
}

/// `spec.overrides[]`: a rate for the clients running as the referenced ServiceAccounts,
/// replacing the per-identity rate for them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Override {
    pub requests_per_second: u32,
    /// ServiceAccounts (admission rejects other kinds); namespace defaults to the policy's.
    pub client_refs: Vec<NamespacedTargetRef>,
}

/// `status`, written by the status controller (spec §7.3): one `Accepted` condition, and the
/// Server the policy was accepted for.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpLocalRateLimitPolicyStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    pub target_ref: LocalTargetRef,
}

/// The only served version.
pub mod v1alpha1 {
    use super::*;
    use kube::CustomResource;

    /// `spec` of an HTTPLocalRateLimitPolicy.
    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "policy.linkerd.io",
        version = "v1alpha1",
        kind = "HTTPLocalRateLimitPolicy",
        root = "HttpLocalRateLimitPolicy",
        namespaced,
        status = "HttpLocalRateLimitPolicyStatus"
    )]
    #[serde(rename_all = "camelCase")]
    pub struct HttpLocalRateLimitPolicySpec {
        /// The Server the limits apply to (admission rejects other kinds).
        pub target_ref: LocalTargetRef,
        /// The rate for all clients together.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub total: Option<Limit>,
        /// The rate for each client identity (each unauthenticated client counts as one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub identity: Option<Limit>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub overrides: Option<Vec<Override>>,
    }
}

#[cfg(test)]
mod tests {
    use super::v1alpha1::HttpLocalRateLimitPolicy;

    #[test]
    fn decodes_a_rate_limit_policy_with_status() {
        let policy: HttpLocalRateLimitPolicy = crate::yaml::from_str(
            r#"
apiVersion: policy.linkerd.io/v1alpha1
kind: HTTPLocalRateLimitPolicy
metadata: {name: web-rl, namespace: emojivoto}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: web-http}
  total: {requestsPerSecond: 100}
  identity: {requestsPerSecond: 20}
  overrides:
  - requestsPerSecond: 50
    clientRefs: [{kind: ServiceAccount, name: vote-bot}]
status:
  conditions:
  - {type: Accepted, status: "True", reason: Accepted, message: "", lastTransitionTime: "2026-05-04T09:32:01Z"}
  targetRef: {group: policy.linkerd.io, kind: Server, name: web-http}
"#,
        )
        .unwrap();
        assert_eq!(policy.spec.target_ref.name, "web-http");
        assert_eq!(policy.spec.total.unwrap().requests_per_second, 100);
        assert_eq!(policy.spec.identity.unwrap().requests_per_second, 20);
        let overrides = policy.spec.overrides.unwrap();
        assert_eq!(overrides[0].requests_per_second, 50);
        assert_eq!(overrides[0].client_refs[0].name, "vote-bot");
        let status = policy.status.unwrap();
        assert_eq!(status.conditions[0].type_, "Accepted");
        assert_eq!(status.conditions[0].status, "True");
        assert_eq!(status.target_ref.kind, "Server");
    }
}
