//! `policy.linkerd.io` MeshTLSAuthentication: the mTLS identities an AuthorizationPolicy
//! requires, as identity strings or as references to ServiceAccounts and Namespaces
//! (spec/policy.md §2.1, §3.2; admission rules §6).

use crate::shared::NamespacedTargetRef;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The only served version.
pub mod v1alpha1 {
    use super::*;
    use kube::CustomResource;

    /// `spec` of a MeshTLSAuthentication. The CRD requires exactly one of the two fields, each
    /// with at least one item; the types accept both (the fixtures mix them) and leave the
    /// check to the CRD schema.
    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "policy.linkerd.io",
        version = "v1alpha1",
        kind = "MeshTLSAuthentication",
        root = "MeshTlsAuthentication",
        namespaced,
        shortname = "meshtlsauthn"
    )]
    #[serde(rename_all = "camelCase")]
    pub struct MeshTlsAuthenticationSpec {
        /// Identity strings: exact names, `*.suffix` or `*` (spec §3.2), or SPIFFE ids.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub identities: Option<Vec<String>>,
        /// ServiceAccounts (namespace defaults to the object's) or Namespaces (no namespace
        /// field; every ServiceAccount of the namespace).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub identity_refs: Option<Vec<NamespacedTargetRef>>,
    }
}
