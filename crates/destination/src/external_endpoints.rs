//! The ExternalWorkload EndpointSlice controller (spec/destination.md §K): in kube mode, the
//! holder of the Lease `linkerd-destination-endpoint-write` writes, for each Service whose
//! selector matches ExternalWorkloads, the EndpointSlices of those workloads, so that `Get`
//! (here and in every other replica) serves them as it serves pods.
//!
//! The index decides what each Service's slices should hold
//! ([`linkerd_index::discovery::external_slices`]) and queues the Services whose slices may
//! have changed; this task lists the slices the controller owns for a queued Service (labels
//! `kubernetes.io/service-name` and `endpointslice.kubernetes.io/managed-by:
//! linkerd-external-workloads-controller`), plans the difference and writes it. Slices with
//! another `managed-by` are never listed, so never touched.
//!
//! - Nothing is written before the index holds its initial lists, nor while this instance does
//!   not hold the Lease (checked before every write); every Service is synced again when the
//!   Lease is gained and every [`RESYNC_PERIOD`].
//! - A Service whose sync fails (an API error, a write conflict) is retried with exponential
//!   backoff from [`RETRY_BASE`], at most [`MAX_RETRIES`] times (spec §K: 15), then dropped
//!   until its next change or resync.
//! - A Service being deleted gets no new slices (the plan skips them, spec §K); a create the
//!   API server refuses because the namespace is terminating (`403` with cause
//!   `NamespaceTerminating`) ends the sync quietly, without a retry, as Kubernetes'
//!   EndpointSlice controller does: retrying could never succeed.
//! - Metrics ([`ControllerMetrics`]): the writes by operation and result, whether this
//!   instance holds the Lease, the creates skipped and the Services dropped after retries.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, PostParams},
};
use linkerd_index::{
    DiscoveryIndex, ObjectRef,
    discovery::external_slices::{self, OwnedSlice},
    lease::Leadership,
    model::{EXTERNAL_WORKLOADS_CONTROLLER, MANAGED_BY_LABEL, SERVICE_NAME_LABEL},
};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use std::{collections::BTreeMap, time::Duration};
use tokio::{sync::watch, task::JoinHandle, time::Instant};

/// The controller's Lease (spec §K).
pub const LEASE_NAME: &str = "linkerd-destination-endpoint-write";
/// The field manager of the controller's writes (the Lease and the slices).
pub const FIELD_MANAGER: &str = "linkerd-destination";
/// Every Service is synced again this often (spec §A.3: the informers' resync period).
pub const RESYNC_PERIOD: Duration = Duration::from_secs(600);
/// The first retry of a failed sync waits this long, doubling after each failure.
pub const RETRY_BASE: Duration = Duration::from_millis(100);
/// The longest wait before a retry.
pub const RETRY_MAX: Duration = Duration::from_secs(60);
/// A failed sync is retried this many times, then dropped (spec §K).
pub const MAX_RETRIES: u32 = 15;
/// Bound of one sync of one Service (its list and writes).
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// The `StatusCause` reason of a write refused in a terminating namespace (Kubernetes'
/// `NamespaceTerminatingCause`).
const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";

/// The controller's settings.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// [`RESYNC_PERIOD`].
    pub resync_period: Duration,
    /// [`RETRY_BASE`].
    pub retry_base: Duration,
    /// Where the controller counts what it does; unregistered by default.
    pub metrics: ControllerMetrics,
}

/// The controller's metrics, on destination's `/metrics` once registered
/// ([`ControllerMetrics::register`]); cheap to clone, the default counts unexposed:
///
/// - `external_endpoints_writes_total{op,result}` counter: EndpointSlice writes, `op`
///   `create`, `update` (a replace) or `delete`, `result` `ok` or `error` (a delete of a
///   slice already gone counts as `ok`);
/// - `external_endpoints_leader` gauge: 1 while this instance holds the Lease
///   `linkerd-destination-endpoint-write` and runs the controller, else 0;
/// - `external_endpoints_skipped_creates_total{reason}` counter: slices not created,
///   `reason` `service_deleting` (the Service has a `deletionTimestamp`) or
///   `namespace_terminating` (the API server refused the create, and those after it);
/// - `external_endpoints_sync_drops_total` counter: Services whose sync still failed after
///   [`MAX_RETRIES`] retries, dropped until their next change or resync.
#[derive(Clone, Debug, Default)]
pub struct ControllerMetrics {
    writes: Family<WriteLabels, Counter>,
    leader: Gauge,
    skipped_creates: Family<SkipLabels, Counter>,
    drops: Counter,
}

/// Labels of `external_endpoints_writes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    op: &'static str,
    result: &'static str,
}

/// Labels of `external_endpoints_skipped_creates_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkipLabels {
    reason: &'static str,
}

/// Why a sync of one Service failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("{action} EndpointSlices of Service {service}: {source}")]
    Api {
        action: &'static str,
        service: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("sync of Service {0} timed out")]
    Timeout(String),
}

/// What a sync did, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Synced {
    pub created: usize,
    pub updated: usize,
    pub deleted: usize,
    /// Slices not created: the Service is being deleted, or its namespace is terminating.
    pub skipped_creates: usize,
}

// === impl ControllerConfig ===

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            resync_period: RESYNC_PERIOD,
            retry_base: RETRY_BASE,
            metrics: ControllerMetrics::default(),
        }
    }
}

// === impl ControllerMetrics ===

impl ControllerMetrics {
    /// Registers the metrics in `registry` under the names listed on [`ControllerMetrics`].
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        // prometheus-client appends `_total` to counters.
        registry.register(
            "external_endpoints_writes",
            "ExternalWorkload EndpointSlice writes by operation and result",
            m.writes.clone(),
        );
        registry.register(
            "external_endpoints_leader",
            "Whether this instance holds the Lease linkerd-destination-endpoint-write and writes ExternalWorkload EndpointSlices (1) or not (0)",
            m.leader.clone(),
        );
        registry.register(
            "external_endpoints_skipped_creates",
            "ExternalWorkload EndpointSlices not created: the Service is being deleted or its namespace is terminating",
            m.skipped_creates.clone(),
        );
        registry.register(
            "external_endpoints_sync_drops",
            "Services whose ExternalWorkload EndpointSlice sync failed too often and was dropped until their next change",
            m.drops.clone(),
        );
        m
    }

    fn write(&self, op: &'static str, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.writes.get_or_create(&WriteLabels { op, result }).inc();
    }

    fn skipped(&self, reason: &'static str, n: usize) {
        if n > 0 {
            self.skipped_creates
                .get_or_create(&SkipLabels { reason })
                .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
        }
    }

    fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }
}

/// Starts the controller over `index` (whose Services and ExternalWorkloads it reads), writing
/// through `client` while `leadership` holds, once `ready` (the index's initial lists) is
/// true. Must be called within a Tokio runtime. The task ends when the Lease task or the
/// index's watches are gone.
pub fn spawn(
    index: DiscoveryIndex,
    client: Client,
    leadership: Leadership,
    ready: watch::Receiver<bool>,
    config: ControllerConfig,
) -> JoinHandle<()> {
    let queued = index.queue_external_workload_slices();
    tokio::spawn(run(index, client, leadership, ready, queued, config))
}

async fn run(
    index: DiscoveryIndex,
    client: Client,
    mut leadership: Leadership,
    mut ready: watch::Receiver<bool>,
    mut queued: watch::Receiver<()>,
    config: ControllerConfig,
) {
    let metrics = config.metrics.clone();
    metrics.set_leader(leadership.is_leader());
    // Before the initial lists, a Service would look as if it selected nothing.
    loop {
        tokio::select! {
            r = ready.wait_for(|r| *r) => match r {
                Ok(_) => break,
                Err(_) => return metrics.set_leader(false),
            },
            leader = leadership.changed() => match leader {
                Some(leader) => metrics.set_leader(leader),
                None => return metrics.set_leader(false),
            },
        }
    }
    // Not `interval`: its first tick is immediate, and would sync every Service a second
    // time right after the initial queue.
    let mut resync =
        tokio::time::interval_at(Instant::now() + config.resync_period, config.resync_period);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Failed Services: (failures so far, when to retry).
    let mut retries: BTreeMap<ObjectRef, (u32, Instant)> = BTreeMap::new();
    loop {
        let next_retry = retries.values().map(|(_, at)| *at).min();
        tokio::select! {
            changed = queued.changed() => if changed.is_err() { return metrics.set_leader(false) },
            leader = leadership.changed() => match leader {
                None => return metrics.set_leader(false),
                Some(leader) => {
                    metrics.set_leader(leader);
                    if leader {
                        index.requeue_external_workload_slices();
                    }
                }
            },
            _ = resync.tick() => index.requeue_external_workload_slices(),
            _ = sleep_until(next_retry) => {}
        }
        let mut due = index.take_external_workload_slice_queue();
        if !leadership.is_leader() {
            // Gaining the Lease requeues every Service.
            retries.clear();
            continue;
        }
        let now = Instant::now();
        due.extend(
            retries
                .iter()
                .filter(|(_, (_, at))| *at <= now)
                .map(|(svc, _)| svc.clone()),
        );
        for service in due {
            if !leadership.is_leader() {
                break;
            }
            let synced = tokio::time::timeout(
                SYNC_TIMEOUT,
                sync(&index, &client, &leadership, &metrics, &service),
            )
            .await
            .unwrap_or_else(|_| {
                Err(SyncError::Timeout(format!(
                    "{}/{}",
                    service.namespace, service.name
                )))
            });
            match synced {
                Ok(done) => {
                    retries.remove(&service);
                    if done != Synced::default() {
                        tracing::info!(service = %format!("{}/{}", service.namespace, service.name), created = done.created, updated = done.updated, deleted = done.deleted, skipped_creates = done.skipped_creates, "ExternalWorkload EndpointSlices written");
                    }
                }
                Err(error) => {
                    let failures = retries.get(&service).map_or(0, |(n, _)| *n) + 1;
                    if failures > MAX_RETRIES {
                        retries.remove(&service);
                        metrics.drops.inc();
                        tracing::error!(%error, "dropping the Service after {MAX_RETRIES} retries; it is synced again on its next change");
                    } else {
                        let wait = backoff(config.retry_base, failures);
                        tracing::warn!(%error, ?wait, "ExternalWorkload EndpointSlice sync failed; retrying");
                        retries.insert(service, (failures, Instant::now() + wait));
                    }
                }
            }
        }
    }
}

/// Syncs the slices of one Service: lists those the controller owns, plans the difference with
/// what the index wants, writes it while leader (checked before each write), counting the
/// writes in `metrics`. Creates come first; one refused because the namespace is terminating
/// ends the sync with `Ok` (nothing more can be written there). Errors on any other refused
/// list or write.
pub async fn sync(
    index: &DiscoveryIndex,
    client: &Client,
    leadership: &Leadership,
    metrics: &ControllerMetrics,
    service: &ObjectRef,
) -> Result<Synced, SyncError> {
    // A Service that is gone takes its slices with it (owner references); one the controller
    // does not manage keeps whatever it has (spec §K).
    let Some((svc, groups)) = index.external_workload_endpoints(service) else {
        return Ok(Synced::default());
    };
    let name = format!("{}/{}", svc.namespace, svc.name);
    let api_error = |action| {
        let service = name.clone();
        move |source| SyncError::Api {
            action,
            service,
            source: Box::new(source),
        }
    };
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &svc.namespace);
    let owned_by_us = format!(
        "{SERVICE_NAME_LABEL}={},{MANAGED_BY_LABEL}={EXTERNAL_WORKLOADS_CONTROLLER}",
        svc.name
    );
    let listed = api
        .list(&ListParams::default().labels(&owned_by_us))
        .await
        .map_err(api_error("list"))?;
    let owned: Vec<OwnedSlice> = listed
        .items
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .filter_map(OwnedSlice::from_endpoint_slice)
        .collect();
    let plan = external_slices::plan(&svc, &groups, &owned);
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    let mut done = Synced {
        skipped_creates: plan.skipped_creates,
        ..Synced::default()
    };
    metrics.skipped("service_deleting", plan.skipped_creates);
    for (n, spec) in plan.create.iter().enumerate() {
        if !leadership.is_leader() {
            return Ok(done);
        }
        let created = api.create(&params, &spec.to_endpoint_slice(&svc)).await;
        metrics.write("create", created.is_ok());
        match created {
            Ok(_) => done.created += 1,
            Err(kube::Error::Api(status)) if namespace_terminating(&status) => {
                let skipped = plan.create.len() - n;
                metrics.skipped("namespace_terminating", skipped);
                done.skipped_creates += skipped;
                tracing::info!(service = %name, "the namespace is terminating: no EndpointSlice is created");
                return Ok(done);
            }
            Err(error) => return Err(api_error("create")(error)),
        }
    }
    for spec in &plan.update {
        let Some(slice_name) = &spec.name else {
            continue;
        };
        if !leadership.is_leader() {
            return Ok(done);
        }
        let replaced = api
            .replace(slice_name, &params, &spec.to_endpoint_slice(&svc))
            .await;
        metrics.write("update", replaced.is_ok());
        replaced.map_err(api_error("update"))?;
        done.updated += 1;
    }
    for slice_name in &plan.delete {
        if !leadership.is_leader() {
            return Ok(done);
        }
        match api.delete(slice_name, &DeleteParams::default()).await {
            Ok(_) => {
                metrics.write("delete", true);
                done.deleted += 1;
            }
            // Gone already: what we wanted.
            Err(kube::Error::Api(status)) if status.code == 404 => metrics.write("delete", true),
            Err(error) => {
                metrics.write("delete", false);
                return Err(api_error("delete")(error));
            }
        }
    }
    Ok(done)
}

/// Whether the API server refused a write because the namespace is being deleted: `403` with
/// the cause `NamespaceTerminating` (the lifecycle admission plugin's answer).
fn namespace_terminating(status: &kube::core::Status) -> bool {
    status.code == 403
        && status
            .details
            .iter()
            .flat_map(|d| &d.causes)
            .any(|c| c.reason == NAMESPACE_TERMINATING)
}

/// `base × 2^(failures-1)`, at most [`RETRY_MAX`].
fn backoff(base: Duration, failures: u32) -> Duration {
    base.saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)))
        .min(RETRY_MAX)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_exponentially_up_to_a_minute() {
        let base = Duration::from_millis(100);
        assert_eq!(backoff(base, 1), Duration::from_millis(100));
        assert_eq!(backoff(base, 4), Duration::from_millis(800));
        assert_eq!(backoff(base, 15), RETRY_MAX);
        assert_eq!(backoff(base, 40), RETRY_MAX);
    }

    fn status(code: u16, causes: &[&str]) -> kube::core::Status {
        serde_json::from_value(serde_json::json!({
            "code": code,
            "reason": "Forbidden",
            "message": "unable to create new content in namespace vms because it is being terminated",
            "details": {
                "name": "linkerd-external-vm-",
                "kind": "endpointslices",
                "causes": causes.iter().map(|reason| serde_json::json!({
                    "reason": reason,
                    "message": "namespace vms is being terminated",
                    "field": "metadata.namespace",
                })).collect::<Vec<_>>(),
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_terminating_namespace_is_known_by_the_refusals_cause() {
        assert!(namespace_terminating(&status(
            403,
            &["NamespaceTerminating"]
        )));
        assert!(namespace_terminating(&status(
            403,
            &["FieldValueInvalid", "NamespaceTerminating"]
        )));
        // RBAC refusing the create is an error to retry, not a terminating namespace.
        assert!(!namespace_terminating(&status(403, &[])));
        assert!(!namespace_terminating(&status(
            409,
            &["NamespaceTerminating"]
        )));
    }
}
