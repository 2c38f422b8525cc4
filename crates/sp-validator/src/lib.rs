//! The ServiceProfile validator of the linkerd-destination pod: a validating admission webhook
//! that refuses `linkerd.io` ServiceProfiles the destination could not serve
//! (spec/sp-validator-and-pod.md §a.4, §b).
//!
//! [`validate`](mod@validate) holds the rules, [`webhook`] the `AdmissionReview` protocol over HTTPS (the
//! envelope is [`linkerd_admission`]'s), and [`args`] the command line of the `sp-validator`
//! binary. The webhook needs no Kubernetes API access: it judges the object in each request on
//! its own.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod args;
pub mod validate;
pub mod webhook;

pub use self::{
    args::Args,
    validate::{Invalid, validate},
    webhook::{REVIEWS_METRIC, router},
};
