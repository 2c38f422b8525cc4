//! Where Kubernetes objects come from: a cluster's API server ([`kube`]) or a directory of
//! manifests ([`offline`]), delivered kind by kind as [`Event`]s of decoded objects.
//!
//! Events are shaped like kube-runtime's watcher (DESIGN.md "Data flow" 1): the first event of
//! every kind is a [`Event::Reset`] (the initial list); later a relist is another `Reset`, and
//! everything not in it is gone. Each document is decoded once, as it arrives, into its kind's
//! object ([`Kind`]); a document that does not decode or convert is logged with its
//! namespace/name, counted in `index_invalid_objects_total{cluster,kind}` and skipped, and nothing else
//! is affected. The source keeps no decoded object, raw document or typed object afterwards:
//! the kube source keeps nothing per object but an 8-byte hash (informer lag), the offline
//! source a digest of each definition (to see what an edit changed).

pub mod args;
pub mod kube;
pub mod offline;

use std::{any::Any, sync::Arc};

pub use self::args::ClusterArgs;
use crate::model::{DecodeError, Kind, ObjectRef};

/// One change to the objects of one kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Event<T> {
    /// The object was created or changed.
    Apply(T),
    /// The object was deleted.
    Delete(ObjectRef),
    /// A full list: every object of the kind that exists now; any other is gone.
    Reset(Vec<T>),
}

/// The source chosen at start-up: a cluster (`--kubeconfig` / in-cluster) or a directory
/// (`--cluster-state DIR`, offline mode).
#[derive(Clone)]
pub enum ClusterSource {
    Kube(kube::KubeSource),
    Offline(offline::OfflineSource),
}

/// A decoded object whose kind is known only at run time: how the offline source, which reads
/// every kind from the same files, hands objects to each kind's indexes.
pub type AnyObject = Arc<dyn Any + Send + Sync>;

/// One watched kind, as a source that serves every kind through one reader (offline mode)
/// sees it: it decodes the kind's documents and delivers their events.
pub trait KindFeed: Send + Sync + 'static {
    /// `(group, kind)` of the documents it takes (`("discovery.k8s.io", "EndpointSlice")`).
    fn type_key(&self) -> (&str, &str);
    /// The kind's name in logs and metrics ([`Kind::LABEL`]).
    fn label(&self) -> &'static str;
    /// Whether the kind's objects live in a namespace ([`Kind::NAMESPACED`]).
    fn namespaced(&self) -> bool;
    /// Decodes one document of the kind from JSON text.
    fn decode_json(&self, document: &str) -> Result<AnyObject, DecodeError>;
    /// Delivers events of objects this feed decoded, as one batch.
    fn deliver(&self, events: Vec<Event<AnyObject>>);
}

/// `(group, kind)` of `K`: how documents name their kind (`apiVersion`'s group, `kind`).
pub(crate) fn type_key<K: Kind>() -> (String, String) {
    (K::group(&()).into_owned(), K::kind(&()).into_owned())
}

/// Returns the memory a bulk load freed (a state directory read, a kind's initial list or
/// relist) to the operating system.
///
/// glibc's allocator keeps freed pages in its arenas, and a load's transient memory (file
/// texts, list pages, their parse) lies between the objects kept, so without this the process
/// stays at its peak: reading 1,000 Services x 10 pods from YAML kept 140 MiB resident for
/// 55 MiB in use. `malloc_trim(0)` releases every whole free page of every arena. Elsewhere
/// (musl, other systems) it does nothing.
#[allow(unsafe_code)]
pub(crate) fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` has no preconditions; it only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
