//! Where Kubernetes objects come from: one interface, two implementations.
//!
//! A [`Source`] produces, per kind, a stream of [`Event`]s shaped like kube-runtime's watcher
//! (DESIGN.md "Data flow" 1): the first event of every stream is a [`Event::Reset`] (the initial
//! list); later a relist is another `Reset`, and everything not in it is gone.

pub mod args;
pub mod kube;
pub mod offline;

pub use args::ClusterArgs;

use futures::stream::BoxStream;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// One change to the objects of one kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Event<K> {
    /// The object was created or changed.
    Apply(K),
    /// The object was deleted (the last state known of it).
    Delete(K),
    /// A full list: every object of the kind that exists now; any other is gone.
    Reset(Vec<K>),
}

/// The bound every watched kind meets: a typed Kubernetes object kube can list and watch.
pub trait Watched:
    ::kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: ::kube::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// Fills in, on an object of kind `K` about to be decoded, the fields that older served
/// versions leave out but `K`'s generated type requires: a TLSRoute read at v1alpha2 may have no
/// `spec.hostnames` (required from v1 on, which the `gateway-api` type follows), meaning "any
/// SNI". Other kinds are left as they are.
pub(crate) fn fill_defaults<K: Watched>(object: &mut serde_json::Value) {
    if !has_defaults::<K>() {
        return;
    }
    if let Some(spec) = object.get_mut("spec").and_then(|s| s.as_object_mut())
        && spec.get("hostnames").is_none_or(|h| h.is_null())
    {
        spec.insert("hostnames".into(), serde_json::Value::Array(Vec::new()));
    }
}

/// Whether [`fill_defaults`] may change an object of kind `K`.
pub(crate) fn has_defaults<K: Watched>() -> bool {
    K::group(&()) == "gateway.networking.k8s.io" && K::kind(&()) == "TLSRoute"
}

/// A producer of watch events for any [`Watched`] kind.
///
/// Streams never end while the source runs; errors (a failed watch, a file that does not parse)
/// are logged and retried by the source itself, so consumers only ever see events.
pub trait Source: Send + Sync + 'static {
    /// The events of kind `K`, starting with a [`Event::Reset`] of the initial list.
    fn events<K: Watched>(&self) -> BoxStream<'static, Event<K>>;
}

/// The source chosen at start-up: a cluster (`--kubeconfig` / in-cluster) or a directory
/// (`--cluster-state DIR`, offline mode).
#[derive(Clone)]
pub enum ClusterSource {
    Kube(kube::KubeSource),
    Offline(offline::OfflineSource),
}

impl Source for ClusterSource {
    fn events<K: Watched>(&self) -> BoxStream<'static, Event<K>> {
        match self {
            Self::Kube(s) => s.events(),
            Self::Offline(s) => s.events(),
        }
    }
}
