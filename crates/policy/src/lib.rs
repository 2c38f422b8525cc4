//! The policy controller of the linkerd-destination pod: `InboundServerPolicies` tells each
//! proxy what its inbound ports accept and how they route (spec/policy.md §4);
//! `OutboundPolicies` how to route, retry and balance what it sends (§5, [`outbound`]).
//!
//! The index ([`linkerd_index`]) computes one [`linkerd_index::inbound::InboundServer`] per
//! subscribed (workload, port); this crate parses requests ([`workload`]), streams the views
//! ([`inbound`]) and translates them to the proxy API's types ([`translate`]). Route statuses
//! are written only by the holder of a Lease ([`lease`]).
//!
//! [`admission`] is the validating admission webhook of the policy CRDs (spec/policy.md §6); its
//! `AdmissionReview` envelope is [`linkerd_admission`]'s, shared with the sp-validator.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod admission;
pub mod args;
pub mod inbound;
pub mod lease;
pub mod metrics;
pub mod outbound;
pub mod server;
pub mod status;
pub mod translate;
mod views;
pub mod workload;

pub use self::{
    args::Args,
    inbound::InboundPolicyService,
    metrics::PolicyMetrics,
    outbound::OutboundPolicyService,
    server::{bind, serve, serve_policies},
    translate::{InboundTranslator, outbound::OutboundTranslator},
};
