//! `policy.linkerd.io` NetworkAuthentication: the client networks an AuthorizationPolicy
//! requires (spec/policy.md §2.1, §3.3; admission rules §6).

use crate::shared::Network;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The only served version.
pub mod v1alpha1 {
    use super::*;
    use kube::CustomResource;

    /// `spec` of a NetworkAuthentication.
    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "policy.linkerd.io",
        version = "v1alpha1",
        kind = "NetworkAuthentication",
        namespaced
    )]
    pub struct NetworkAuthenticationSpec {
        /// Authorized networks (admission requires at least one).
        pub networks: Vec<Network>,
    }
}
