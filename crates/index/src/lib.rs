//! The shared indexing library of the `linkerd-destination` pod.
//!
//! Data flows one way (DESIGN.md, "Data flow"):
//!
//! 1. [`source`]: a [`Source`] turns the Kubernetes API ([`source::kube::KubeSource`]) or a
//!    directory of manifests ([`source::offline::OfflineSource`]) into typed [`Event`]s.
//! 2. [`store`]: the [`Index`] applies those events to compact domain objects
//!    ([`model`]) held with secondary indexes, under one lock.
//! 3. Views computed from the stores: [`endpoints`], one [`EndpointsView`] per subscribed
//!    (service, port[, hostname]); [`profiles`], one view per subscribed service profile or
//!    workload address, with ServiceProfiles validated into [`profile::ProfileInfo`];
//!    [`inbound`], one [`inbound::InboundServer`] per subscribed workload port; [`outbound`],
//!    one [`outbound::OutboundPolicy`] per subscribed Service port and client namespace.
//! 4. [`topic`]: views are published on `tokio::sync::watch` topics that live while
//!    subscribed; an identical recomputation is not published.
//!
//! Nothing here knows about gRPC or protobuf: the binaries translate views to their wire types.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod endpoints;
pub mod inbound;
pub mod metrics;
pub mod model;
pub mod outbound;
pub mod ports;
pub mod profile;
pub mod profiles;
pub mod routes;
pub mod selector;
pub mod source;
pub mod status;
pub mod store;
pub mod topic;

pub use self::{
    endpoints::{AddressId, Endpoint, EndpointsKey, EndpointsView, Workload},
    metrics::IndexMetrics,
    model::{ObjectRef, OwnerRef, PodInfo, ServiceInfo, SliceInfo},
    ports::PortSet,
    profile::ProfileInfo,
    profiles::{EndpointProfileKey, ServiceProfileKey},
    source::{ClusterSource, Event, Source},
    store::Index,
};
