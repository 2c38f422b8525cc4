//! What the index's integration tests share: a discovery index fed typed objects directly, as
//! its watches would feed them, and one fed from a state directory by the offline source.

#![allow(dead_code)]

use linkerd_index::{
    ClusterSource, DiscoveryIndex, IndexMetrics, Started, Watches, source::offline::OfflineSource,
};
use std::path::Path;

mod logged;
#[allow(unused_imports, reason = "not every test binary captures logs")]
pub use logged::{capture_thread, logged};

pub use linkerd_index::Fed;

/// A discovery index fed typed objects directly.
pub type Discovery = Fed<DiscoveryIndex>;

/// A discovery index fed typed objects directly, counting in `metrics`.
pub fn discovery(metrics: IndexMetrics) -> Discovery {
    Fed::new(DiscoveryIndex::new(), DiscoveryIndex::watch, metrics)
}

/// A discovery index fed from the state directory `dir`, read before this returns.
pub async fn offline(dir: &Path, metrics: IndexMetrics) -> (DiscoveryIndex, Started) {
    let index = DiscoveryIndex::new();
    let mut watches = Watches::new(metrics.clone());
    index.watch(&mut watches);
    let source = OfflineSource::new(dir, metrics).expect("a state directory");
    let started = watches.start(&ClusterSource::Offline(source)).await;
    (index, started)
}

/// Writes `text` to `dir/file` as an editor saving atomically does (write, then rename).
pub fn write(dir: &Path, file: &str, text: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(tmp, dir.join(file)).expect("rename");
}
