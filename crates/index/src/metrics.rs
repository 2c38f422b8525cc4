//! Metrics of the index: cache sizes and objects skipped as invalid.
//!
//! Names follow upstream's informer metrics (spec/destination.md §F: `<kind>_cache_size{cluster}`)
//! so existing dashboards keep working.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

/// Labels of the cache-size gauges: `cluster` is always `local` for this process's own cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    pub cluster: String,
}

/// Labels naming the Kubernetes kind an invalid object or file belongs to.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// Handles to the index's metrics. Cheap to clone; every clone updates the same series.
#[derive(Clone, Debug, Default)]
pub struct IndexMetrics {
    pub(crate) cache_size: Vec<(&'static str, Family<ClusterLabels, Gauge>)>,
    pub(crate) invalid_objects: Family<KindLabels, Counter>,
    pub(crate) invalid_files: Counter,
    pub(crate) conflicting_objects: Counter,
    pub(crate) offline_reloads: Counter,
}

impl IndexMetrics {
    /// Registers the index's metrics in `registry`:
    /// `pod_cache_size`, `service_cache_size`, `endpointslices_cache_size`, `node_cache_size`,
    /// `replicaset_cache_size`, `job_cache_size`, `server_cache_size`,
    /// `externalworkload_cache_size`, `serviceprofile_cache_size` (gauges, `{cluster}`),
    /// `index_invalid_objects_total{kind}` (objects that could not be decoded or indexed),
    /// `offline_invalid_files_total` and `offline_conflicting_objects_total` (offline source).
    pub fn register(registry: &mut Registry) -> Self {
        let mut metrics = Self::default();
        for name in [
            "pod_cache_size",
            "service_cache_size",
            "endpointslices_cache_size",
            "node_cache_size",
            "replicaset_cache_size",
            "job_cache_size",
            "server_cache_size",
            "externalworkload_cache_size",
            "serviceprofile_cache_size",
        ] {
            let family = Family::<ClusterLabels, Gauge>::default();
            registry.register(
                name,
                "Number of objects in the index's cache",
                family.clone(),
            );
            metrics.cache_size.push((name, family));
        }
        registry.register(
            "index_invalid_objects",
            "Objects skipped because they could not be decoded or indexed",
            metrics.invalid_objects.clone(),
        );
        registry.register(
            "offline_invalid_files",
            "State-directory files skipped because they could not be parsed",
            metrics.invalid_files.clone(),
        );
        registry.register(
            "offline_reloads",
            "Times the state directory was re-read after a change",
            metrics.offline_reloads.clone(),
        );
        registry.register(
            "offline_conflicting_objects",
            "Objects defined differently in two state-directory files (the first file wins)",
            metrics.conflicting_objects.clone(),
        );
        metrics
    }

    pub(crate) fn set_cache_size(&self, name: &str, size: usize) {
        if let Some((_, family)) = self.cache_size.iter().find(|(n, _)| *n == name) {
            let labels = ClusterLabels {
                cluster: "local".to_string(),
            };
            family.get_or_create(&labels).set(size as i64);
        }
    }

    pub(crate) fn invalid_object(&self, kind: &str) {
        self.invalid_objects
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }
}
