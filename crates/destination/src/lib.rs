//! The Destination gRPC service: `Destination.Get` streams a Service's endpoints to proxies,
//! with their mTLS identity, zone, protocol hints and metric labels, as deltas.
//!
//! Behaviour: spec/destination.md §C with its "Project decisions". The index
//! ([`linkerd_index`]) computes one [`linkerd_index::EndpointsView`] per subscribed Service port;
//! this crate only parses requests ([`authority`], [`token`]), filters and diffs per stream
//! ([`endpoints`]), and translates to the proxy API's types ([`translate`]).
//!
//! In kube mode the holder of the Lease `linkerd-destination-endpoint-write` also writes the
//! EndpointSlices of ExternalWorkloads ([`external_endpoints`], spec §K); offline, the index
//! computes them in-process.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod args;
pub mod authority;
pub mod endpoints;
pub mod external_endpoints;
pub mod get_profile;
pub mod metrics;
pub mod multicluster;
pub mod profile;
pub mod server;
pub mod token;
pub mod translate;

pub use self::{
    args::Args,
    metrics::DestinationMetrics,
    server::{DestinationService, serve},
    translate::{EndpointTranslator, TranslatorConfig},
};
