//! The shared indexing library of the `linkerd-destination` pod.
//!
//! Data flows one way (DESIGN.md, "Data flow"): source → store → view → topic → stream.
//!
//! 1. [`source`]: the Kubernetes API ([`source::kube`]) or a directory of manifests
//!    ([`source::offline`]) delivers each kind's [`Event`]s. Every document is decoded once,
//!    as it arrives, into a compact domain object ([`model`]), and nothing else is kept of it.
//! 2. [`watches`]: one watch per kind feeds every index that reads the kind ([`Watches`],
//!    [`Sink`]) and says when all have their initial lists (`/ready`).
//! 3. One index per concern, each owning its stores, lock and topics:
//!    - [`discovery`]: a cluster's Services, EndpointSlices, Pods, Nodes, owners,
//!      ExternalWorkloads, ServiceProfiles and opaque Servers, and the views of
//!      `Destination.Get` and `GetProfile` ([`DiscoveryIndex`]; one per cluster);
//!    - [`inbound`]: the inbound policy of each workload port ([`InboundIndex`]);
//!    - [`outbound`]: the outbound policy of each Service port or address ([`OutboundIndex`]);
//!    - [`status`]: the route statuses the Lease holder writes ([`StatusIndex`]);
//!    - [`multicluster`]: one discovery index per linked cluster, started and stopped as the
//!      link Secrets come and go ([`ClusterStore`]).
//!
//!    [`routes`] holds what the policy indexes share about routes (their rules, and what
//!    their parents decide).
//! 4. Views are published on [`topic`]s, latest-value channels that live while subscribed
//!    (the design's `tokio::sync::watch`, in a form that costs a stream less); an identical
//!    recomputation is not published.
//!
//! Nothing here knows about gRPC or protobuf: the binaries translate views to their wire types.

#![deny(rust_2018_idioms)]
// One exception, `source::release_freed_memory` (a call into the C allocator), allows it.
#![deny(unsafe_code)]

pub mod discovery;
pub mod inbound;
pub mod lease;
pub mod metrics;
pub mod model;
pub mod multicluster;
pub mod outbound;
pub mod routes;
pub mod source;
pub mod status;
mod store;
#[cfg(test)]
mod testing;
pub mod topic;
pub mod watches;

pub use self::{
    discovery::{
        DiscoveryIndex,
        endpoints::{AddressId, Endpoint, EndpointsKey, EndpointsView, Workload},
        profiles::{EndpointProfileKey, ServiceProfileKey},
    },
    inbound::InboundIndex,
    metrics::IndexMetrics,
    model::{Kind, ObjectRef, OwnerRef, PodInfo, PortSet, ProfileInfo, ServiceInfo, SliceInfo},
    multicluster::{ClusterStore, ClusterStoreConfig, LinkMetrics, LinkedCluster},
    outbound::OutboundIndex,
    source::{ClusterArgs, ClusterSource, Event},
    status::StatusIndex,
    topic::change_seen_at,
    watches::{Fed, Readiness, Sink, Started, WatchScope, Watches},
};
