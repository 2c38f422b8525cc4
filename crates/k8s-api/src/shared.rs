//! Reference and network types shared by the `policy.linkerd.io` kinds (spec/policy.md §2.1),
//! with the kind matching of spec §3.1.

use kube::Resource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A reference to a resource in the referring object's own namespace: `{group?, kind, name}`
/// (AuthorizationPolicy and HTTPLocalRateLimitPolicy `targetRef`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
pub struct LocalTargetRef {
    /// The referent's API group; absent or empty is the core group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub kind: String,
    pub name: String,
}

/// A reference that may name another namespace: `{group?, kind, name, namespace?}`
/// (`requiredAuthenticationRefs`, `identityRefs`, rate-limit `clientRefs`). An absent namespace
/// means the referring object's namespace; for cluster-scoped kinds (Namespace) it is absent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
pub struct NamespacedTargetRef {
    /// The referent's API group; absent or empty is the core group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A client network: a CIDR (or a bare IP, meaning /32 or /128) minus the `except` CIDRs or IPs
/// (spec §3.3). Kept as strings: parsing, and skipping an object whose CIDR does not parse, is
/// the index's job, so that one bad entry never fails the decoding of the whole object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
pub struct Network {
    pub cidr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub except: Option<Vec<String>>,
}

/// Whether a reference's `(group?, kind)` names the resource type `(group, kind)` (spec §3.1):
/// groups compare case-insensitively with absent or empty meaning `core`, kinds compare
/// case-insensitively.
pub fn kind_matches(ref_group: Option<&str>, ref_kind: &str, group: &str, kind: &str) -> bool {
    fn or_core(group: &str) -> &str {
        if group.is_empty() { "core" } else { group }
    }
    or_core(ref_group.unwrap_or("")).eq_ignore_ascii_case(or_core(group))
        && ref_kind.eq_ignore_ascii_case(kind)
}

/// The kind as admission errors print it: `Kind.group` when a (non-empty) group is given, else
/// `Kind` (spec §3.1).
pub fn canonical_kind(group: Option<&str>, kind: &str) -> String {
    match group {
        Some(group) if !group.is_empty() => format!("{kind}.{group}"),
        _ => kind.to_string(),
    }
}

// === impl LocalTargetRef ===

impl LocalTargetRef {
    /// Whether this reference names a resource of type `T` (spec §3.1), whatever its name.
    pub fn targets_kind<T: Resource<DynamicType = ()>>(&self) -> bool {
        kind_matches(
            self.group.as_deref(),
            &self.kind,
            &T::group(&()),
            &T::kind(&()),
        )
    }

    /// `Kind.group` or `Kind`, for error messages.
    pub fn canonical_kind(&self) -> String {
        canonical_kind(self.group.as_deref(), &self.kind)
    }
}

// === impl NamespacedTargetRef ===

impl NamespacedTargetRef {
    /// Whether this reference names a resource of type `T` (spec §3.1), whatever its name.
    pub fn targets_kind<T: Resource<DynamicType = ()>>(&self) -> bool {
        kind_matches(
            self.group.as_deref(),
            &self.kind,
            &T::group(&()),
            &T::kind(&()),
        )
    }

    /// `Kind.group` or `Kind`, for error messages.
    pub fn canonical_kind(&self) -> String {
        canonical_kind(self.group.as_deref(), &self.kind)
    }
}

// === impl Network ===

impl Network {
    /// The exceptions, empty when `except` is absent.
    pub fn exceptions(&self) -> &[String] {
        self.except.as_deref().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Server;
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};

    fn local(group: Option<&str>, kind: &str) -> LocalTargetRef {
        LocalTargetRef {
            group: group.map(Into::into),
            kind: kind.into(),
            name: "x".into(),
        }
    }

    #[test]
    fn kinds_match_case_insensitively_with_core_as_the_empty_group() {
        assert!(local(Some("policy.linkerd.io"), "server").targets_kind::<Server>());
        assert!(local(Some("POLICY.linkerd.io"), "Server").targets_kind::<Server>());
        assert!(!local(None, "Server").targets_kind::<Server>());
        assert!(local(Some("Core"), "SERVICEACCOUNT").targets_kind::<ServiceAccount>());
        assert!(local(Some(""), "Namespace").targets_kind::<Namespace>());
        assert!(local(None, "namespace").targets_kind::<Namespace>());
        assert!(!local(Some("policy.linkerd.io"), "Namespace").targets_kind::<Namespace>());
    }

    #[test]
    fn canonical_kind_appends_a_given_group() {
        assert_eq!(
            local(Some("policy.linkerd.io"), "Server").canonical_kind(),
            "Server.policy.linkerd.io"
        );
        assert_eq!(
            local(None, "ServiceAccount").canonical_kind(),
            "ServiceAccount"
        );
        assert_eq!(local(Some(""), "Namespace").canonical_kind(), "Namespace");
    }
}
