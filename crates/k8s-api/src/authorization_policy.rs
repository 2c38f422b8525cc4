//! `policy.linkerd.io` AuthorizationPolicy: authorizes clients that pass every referenced
//! authentication (MeshTLSAuthentication, NetworkAuthentication, ServiceAccount) on a target
//! (a Server, a Namespace's Servers, or a route) (spec/policy.md §2.1; admission rules §6).

use crate::shared::{LocalTargetRef, NamespacedTargetRef};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The only served version.
pub mod v1alpha1 {
    use super::*;
    use kube::CustomResource;

    /// `spec` of an AuthorizationPolicy.
    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "policy.linkerd.io",
        version = "v1alpha1",
        kind = "AuthorizationPolicy",
        namespaced
    )]
    #[serde(rename_all = "camelCase")]
    pub struct AuthorizationPolicySpec {
        /// What the policy applies to, in the policy's namespace: a Server, a Namespace (its
        /// own), or an HTTPRoute (policy or gateway group) / GRPCRoute.
        pub target_ref: LocalTargetRef,
        /// Authentications a client must all pass. Required, but may be empty (then every
        /// client is authorized); an object without the field does not decode.
        pub required_authentication_refs: Vec<NamespacedTargetRef>,
    }
}

#[cfg(test)]
mod tests {
    use super::v1alpha1::AuthorizationPolicy;

    #[test]
    fn required_authentication_refs_may_be_empty_but_not_missing() {
        let empty: AuthorizationPolicy = crate::yaml::from_str(
            "apiVersion: policy.linkerd.io/v1alpha1\nkind: AuthorizationPolicy\nmetadata: {name: a}\nspec: {targetRef: {kind: Namespace, name: ns}, requiredAuthenticationRefs: []}\n",
        )
        .unwrap();
        assert_eq!(empty.spec.target_ref.kind, "Namespace");
        assert_eq!(empty.spec.target_ref.group, None);
        assert!(empty.spec.required_authentication_refs.is_empty());

        let missing = crate::yaml::from_str::<AuthorizationPolicy>(
            "apiVersion: policy.linkerd.io/v1alpha1\nkind: AuthorizationPolicy\nmetadata: {name: a}\nspec: {targetRef: {kind: Namespace, name: ns}}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(missing.contains("requiredAuthenticationRefs"), "{missing}");
    }
}
