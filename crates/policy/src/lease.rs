//! Leadership of the route status writer: the `coordination.k8s.io/v1` Lease
//! `policy-controller-write` (spec/policy.md §1.4, §7.1), held through the pod's shared Lease
//! task ([`linkerd_index::lease`]).

pub use linkerd_index::lease::{
    LEASE_DURATION, Leadership, LeaseConfig, LeaseError, RENEW_GRACE, spawn,
};

/// The Lease's name (spec §1.4).
pub const LEASE_NAME: &str = "policy-controller-write";
/// The field manager of the Lease writes (spec §1.4).
pub const FIELD_MANAGER: &str = "policy-controller";

/// The route status writer's Lease for `claimant` in `namespace`, with the spec's durations.
pub fn config(claimant: impl Into<String>, namespace: &str) -> LeaseConfig {
    LeaseConfig::new(LEASE_NAME, FIELD_MANAGER, claimant, namespace)
}
