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
//! - [`external_workload`]: `workload.linkerd.io` ExternalWorkload (`v1beta1`; `v1alpha1`).

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod external_workload;
pub mod server;
pub mod service_profile;

pub use self::{
    external_workload::v1beta1::ExternalWorkload, server::v1beta3::Server,
    service_profile::v1alpha2::ServiceProfile,
};
