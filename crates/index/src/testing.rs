//! What the crate's unit tests share: the policy controller's indexes fed together from typed
//! objects, as its watches feed them (the inbound index is fed too: it shares the watches),
//! and [`logged`], what code logs while it runs.

#[path = "../tests/support/logged.rs"]
mod logged;
pub(crate) use logged::logged;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::{
    inbound::{InboundConfig, InboundIndex},
    metrics::IndexMetrics,
    model::{Kind, ObjectRef},
    outbound::{OutboundConfig, OutboundError, OutboundIndex, OutboundLookup, OutboundTarget},
    source::Event,
    status::{StatusIndex, StatusPatch},
    watches::Watches,
};

/// The inbound, outbound and status indexes, fed by one set of watches.
pub(crate) struct Policy {
    /// The metrics every index shares.
    pub(crate) metrics: IndexMetrics,
    watches: Watches,
    outbound: OutboundIndex,
    status: StatusIndex,
}

impl Policy {
    pub(crate) fn new(inbound: InboundConfig, outbound: OutboundConfig) -> Self {
        let metrics = IndexMetrics::default();
        let status = StatusIndex::new(outbound.cluster_networks.clone());
        let inbound = InboundIndex::new(inbound, metrics.clone());
        let outbound = OutboundIndex::new(outbound, metrics.clone());
        let mut watches = Watches::new(metrics.clone());
        inbound.watch(&mut watches);
        outbound.watch(&mut watches);
        status.watch(&mut watches);
        Self {
            metrics,
            watches,
            outbound,
            status,
        }
    }

    /// Applies an event of typed objects to every index that reads their kind
    /// ([`Watches::apply`]: times are kept to the second; see [`Self::apply_json`]).
    pub(crate) fn apply<K: Kind + serde::Serialize>(&self, event: Event<K>) {
        self.watches.apply(event);
    }

    /// Applies the object of kind `K` that `json` defines ([`Watches::apply_json`]: a time
    /// keeps its fraction of a second). Panics when it does not decode.
    pub(crate) fn apply_json<K: Kind>(&self, json: &str) {
        self.watches
            .apply_json::<K>(json)
            .expect("the object decodes");
    }

    /// Deletes the object of `obj`'s kind and name.
    pub(crate) fn delete<K: Kind + serde::Serialize>(&self, obj: &K) {
        self.watches.apply(Event::<K>::Delete(key(obj)));
    }

    pub(crate) fn outbound_policy(
        &self,
        target: OutboundTarget,
        source_namespace: &str,
    ) -> Result<OutboundLookup, OutboundError> {
        self.outbound.outbound_policy(target, source_namespace)
    }

    pub(crate) fn egress_topic_count(&self) -> usize {
        self.outbound.egress_topic_count()
    }

    pub(crate) fn status_patches(&self, now: &Time) -> Vec<StatusPatch> {
        self.status.status_patches(now)
    }
}

/// The namespace/name of a typed object, for a `Delete`.
pub(crate) fn key<K: kube::Resource>(obj: &K) -> ObjectRef {
    let meta = obj.meta();
    ObjectRef {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
    }
}
