//! Rust types of the Linkerd custom resources, derived with kube's `CustomResource` and
//! `schemars` so the CRD YAML in `deploy/crds/` can be generated from them.
//!
//! Field names, optionality and served versions follow `spec/destination.md` §B,
//! `spec/policy.md` §2 and `spec/sp-validator-and-pod.md` §(a). Each kind's module has one
//! submodule per served version; the index reads the storage version (the first listed below),
//! and the offline source maps the other versions onto it, as the API server does.
//!
//! - [`service_profile`]: `linkerd.io` ServiceProfile (`v1alpha2`; `v1alpha1` also served).
//! - [`server`]: `policy.linkerd.io` Server (`v1beta3`; `v1beta2`, `v1beta1`, `v1alpha1`).
//! - [`server_authorization`]: `policy.linkerd.io` ServerAuthorization (`v1beta1`; `v1alpha1`).
//! - [`authorization_policy`]: `policy.linkerd.io` AuthorizationPolicy (`v1alpha1`).
//! - [`mesh_tls_authentication`]: `policy.linkerd.io` MeshTLSAuthentication (`v1alpha1`).
//! - [`network_authentication`]: `policy.linkerd.io` NetworkAuthentication (`v1alpha1`).
//! - [`http_route`]: `policy.linkerd.io` HTTPRoute (`v1beta3`; `v1beta2`, `v1beta1`,
//!   `v1alpha1`), built from Gateway API types.
//! - [`http_local_rate_limit_policy`]: `policy.linkerd.io` HTTPLocalRateLimitPolicy
//!   (`v1alpha1`).
//! - [`egress_network`]: `policy.linkerd.io` EgressNetwork (`v1alpha1`).
//! - [`external_workload`]: `workload.linkerd.io` ExternalWorkload (`v1beta1`; `v1alpha1`).
//! - [`shared`]: the reference and network types the policy kinds share, and kind matching.
//! - [`gateway_api`]: the `gateway-api` crate (Gateway API HTTPRoute, GRPCRoute, and the
//!   experimental TLSRoute and TCPRoute under `gateway_api::experimental`), re-exported so
//!   every crate of the workspace uses this one version.
//! - [`names`]: object and namespace names as the API server checks them.
//! - [`yaml`]: manifests read and written as YAML 1.2 (serde-saphyr), for the tools and tests
//!   that handle them.
//! - [`crd_schema`]: a CRD's schema as a JSON Schema that means what the API server makes of
//!   it, for the tools that validate custom resources without a cluster.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod authorization_policy;
pub mod crd_schema;
pub mod egress_network;
pub mod external_workload;
pub mod http_local_rate_limit_policy;
pub mod http_route;
pub mod mesh_tls_authentication;
pub mod names;
pub mod network_authentication;
pub mod server;
pub mod server_authorization;
pub mod service_profile;
pub mod shared;
pub mod yaml;

pub use gateway_api;

pub use self::{
    authorization_policy::v1alpha1::AuthorizationPolicy,
    egress_network::{TrafficPolicy, v1alpha1::EgressNetwork},
    external_workload::v1beta1::ExternalWorkload,
    http_local_rate_limit_policy::v1alpha1::HttpLocalRateLimitPolicy,
    http_route::v1beta3::HttpRoute,
    mesh_tls_authentication::v1alpha1::MeshTlsAuthentication,
    network_authentication::v1alpha1::NetworkAuthentication,
    server::v1beta3::Server,
    server_authorization::v1beta1::ServerAuthorization,
    service_profile::v1alpha2::ServiceProfile,
    shared::{LocalTargetRef, NamespacedTargetRef, Network},
};
