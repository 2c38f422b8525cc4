//! The route status writer (spec/policy.md §7.1): while this instance holds the Lease
//! ([`crate::lease`]), a controller compares every indexed route's desired `status.parents`
//! (and every HTTPLocalRateLimitPolicy's `status.conditions`, §7.3), computed by
//! [`linkerd_index::status`], with the observed one and enqueues a patch for each difference; a
//! writer sends them as JSON merge patches of the status subresource.
//!
//! - Reconciliation runs on index changes, every [`RECONCILE_PERIOD`], and at once on becoming
//!   leader; never while not leader.
//! - The queue is bounded ([`QUEUE_CAPACITY`]); a patch that does not fit is dropped and
//!   counted, and the next reconciliation computes it again.
//! - The writer drops what it dequeues while not leader, so writes stop the moment the Lease
//!   claim runs out.
//! - A status queued or sent is not queued again while it is in flight, i.e. until the object
//!   is observed with it (or its desired status changes): the watch event of a write comes
//!   later than the index changes that trigger reconciliations meanwhile, and re-sending
//!   then would be a patch although nothing changed. A failed patch, losing the Lease, and
//!   the periodic reconciliation forget it, so that it is sent again if it still differs.
//! - Metrics (spec §8), prefix `resource_status_`: `patches_total`, `patch_api_errors_total`,
//!   `patch_timeouts_total`, `patch_dequeues_total`, `patch_drops_total`,
//!   `patch_enqueues_total`, `patch_enqueue_overflows_total`, `patch_duration_seconds`.

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
};
use linkerd_index::status::{StatusIndex, StatusPatch};
use prometheus_client::{
    metrics::{counter::Counter, histogram::Histogram},
    registry::Registry,
};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};
use tokio::{
    sync::{
        mpsc::{self, error::TrySendError},
        watch,
    },
    task::JoinHandle,
    time::Instant,
};

use crate::lease::Leadership;

/// The field manager of status patches. The spec (§7.1) names `linkerd.io/policy-controller`
/// for patches, while the Lease is written as `policy-controller` (§1.4, [`crate::lease`]); we
/// follow the spec for each, so field ownership matches upstream's.
pub const FIELD_MANAGER: &str = "linkerd.io/policy-controller";
/// How often statuses are reconciled without a trigger (spec §1.2).
pub const RECONCILE_PERIOD: Duration = Duration::from_secs(10);
/// How many patches may wait for the writer (spec §1.2).
pub const QUEUE_CAPACITY: usize = 10_000;
/// Buckets of `resource_status_patch_duration_seconds` (spec §8).
const DURATION_BUCKETS: [f64; 9] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// The status writer's settings.
#[derive(Clone, Debug)]
pub struct StatusConfig {
    /// Capacity of the patch queue, [`QUEUE_CAPACITY`]; at least 1.
    pub queue_capacity: usize,
    /// Bound of one patch request (`--patch-timeout-ms`).
    pub patch_timeout: Duration,
    /// Period of reconciliation without a trigger, [`RECONCILE_PERIOD`].
    pub reconcile_period: Duration,
}

/// Handles to the status writer's metrics (spec §8); cheap to clone.
#[derive(Clone, Debug)]
pub struct StatusMetrics {
    patches: Counter,
    api_errors: Counter,
    timeouts: Counter,
    dequeues: Counter,
    drops: Counter,
    enqueues: Counter,
    overflows: Counter,
    duration: Histogram,
}

/// The object a status patch is for: (group, kind, namespace, name).
type ObjectKey = (&'static str, &'static str, String, String);

/// The statuses queued or sent but not yet observed, per object, each without its
/// `lastTransitionTime`s ([`comparable`]) and with when it was queued. Shared by the
/// controller, which fills it, forgets what it observes and what stayed unobserved for a
/// whole reconcile period, and the writer, which forgets what failed.
#[derive(Clone, Debug, Default)]
struct InFlight(Arc<Mutex<HashMap<ObjectKey, (serde_json::Value, Instant)>>>);

/// Why the status writer stopped; the process then exits (spec §1.4).
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The Lease task ended (it only does when it panics): leadership is unknown.
    #[error("the Lease task ended")]
    LeaseEnded,
}

// === impl InFlight ===

impl InFlight {
    fn key(patch: &StatusPatch) -> ObjectKey {
        (
            patch.group,
            patch.kind,
            patch.namespace.clone(),
            patch.name.clone(),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, (serde_json::Value, Instant)>> {
        // The map holds no invariant a panicking holder could break.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets everything (the Lease is lost: a new holder may have written since).
    fn clear(&self) {
        self.lock().clear();
    }

    /// Forgets the statuses queued at least `period` ago: a write overwritten before it was
    /// observed is then sent again. One queued a moment ago is kept, as its write may not
    /// have come back yet (forgetting it sent the same status twice).
    fn expire(&self, period: Duration) {
        self.lock()
            .retain(|_, (_, queued)| queued.elapsed() < period);
    }

    /// Forgets `patch`'s status unless a different one was queued for its object since.
    fn forget(&self, patch: &StatusPatch) {
        let mut map = self.lock();
        let key = Self::key(patch);
        if map.get(&key).map(|(status, _)| status) == Some(&comparable(&patch.status)) {
            map.remove(&key);
        }
    }
}

/// `status` without its `lastTransitionTime`s (at any depth): desired conditions carry the
/// time of their computation, which the comparison of statuses ignores (spec §7.1).
fn comparable(status: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match status {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(name, _)| name.as_str() != "lastTransitionTime")
                .map(|(name, value)| (name.clone(), comparable(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(comparable).collect()),
        other => other.clone(),
    }
}

// === impl StatusConfig ===

impl StatusConfig {
    /// The spec's settings with `--patch-timeout-ms`.
    pub fn new(patch_timeout: Duration) -> Self {
        Self {
            queue_capacity: QUEUE_CAPACITY,
            patch_timeout,
            reconcile_period: RECONCILE_PERIOD,
        }
    }
}

// === impl StatusMetrics ===

impl Default for StatusMetrics {
    /// Unregistered metrics (tests).
    fn default() -> Self {
        Self {
            patches: Counter::default(),
            api_errors: Counter::default(),
            timeouts: Counter::default(),
            dequeues: Counter::default(),
            drops: Counter::default(),
            enqueues: Counter::default(),
            overflows: Counter::default(),
            duration: Histogram::new(DURATION_BUCKETS),
        }
    }
}

impl StatusMetrics {
    /// Registers the metrics under `resource_status_` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let r = registry.sub_registry_with_prefix("resource_status");
        r.register("patches", "Status patches written", metrics.patches.clone());
        r.register(
            "patch_api_errors",
            "Status patches the API server refused",
            metrics.api_errors.clone(),
        );
        r.register(
            "patch_timeouts",
            "Status patches that timed out",
            metrics.timeouts.clone(),
        );
        r.register(
            "patch_dequeues",
            "Status patches taken from the queue",
            metrics.dequeues.clone(),
        );
        r.register(
            "patch_drops",
            "Status patches dropped because this instance no longer holds the Lease",
            metrics.drops.clone(),
        );
        r.register(
            "patch_enqueues",
            "Status patches queued",
            metrics.enqueues.clone(),
        );
        r.register(
            "patch_enqueue_overflows",
            "Status patches dropped because the queue was full",
            metrics.overflows.clone(),
        );
        r.register(
            "patch_duration_seconds",
            "Duration of status patch requests",
            metrics.duration.clone(),
        );
        metrics
    }
}

/// Starts the controller and the writer; returns the controller's task, which ends with
/// [`StatusError::LeaseEnded`] if the Lease task does (the writer ends with it). Must be called
/// within a Tokio runtime.
///
/// Nothing is reconciled until `synced` is true: every watched kind's initial list is in the
/// index (`Watches::ready`). Before that, a route whose backend Services were not listed yet
/// would be written `BackendNotFound`, then written again once they were.
pub fn spawn(
    index: StatusIndex,
    client: Client,
    leadership: Leadership,
    synced: watch::Receiver<bool>,
    config: StatusConfig,
    metrics: StatusMetrics,
) -> JoinHandle<Result<(), StatusError>> {
    let (tx, rx) = mpsc::channel(config.queue_capacity.max(1));
    let in_flight = InFlight::default();
    tokio::spawn(write(
        client,
        leadership.clone(),
        rx,
        config.patch_timeout,
        metrics.clone(),
        in_flight.clone(),
    ));
    tokio::spawn(async move {
        let mut synced = synced;
        // A sender gone before the lists were in: the process is ending.
        if synced.wait_for(|synced| *synced).await.is_err() {
            return Ok(());
        }
        reconcile(
            index,
            leadership,
            tx,
            config.reconcile_period,
            metrics,
            in_flight,
        )
        .await
    })
}

/// Enqueues the patches of every object whose status differs, while leader, unless the same
/// status is already in flight; on index changes, every `period`, and when leadership is
/// gained.
async fn reconcile(
    index: StatusIndex,
    mut leadership: Leadership,
    tx: mpsc::Sender<StatusPatch>,
    period: Duration,
    metrics: StatusMetrics,
    in_flight: InFlight,
) -> Result<(), StatusError> {
    let mut changes = index.changes();
    let mut timer = tokio::time::interval(period);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = timer.tick() => {
                // A write overwritten before it was observed would otherwise never be
                // sent again: the periodic reconciliation sends whatever still differs and
                // was queued a period ago or more.
                in_flight.expire(period);
            }
            changed = changes.changed() => {
                if changed.is_err() {
                    // The index is gone: nothing left to write.
                    return Ok(());
                }
            }
            leader = leadership.changed() => {
                if leader.is_none() {
                    return Err(StatusError::LeaseEnded);
                }
            }
        }
        if !leadership.is_leader() {
            in_flight.clear();
            continue;
        }
        let now = Time(Timestamp::now());
        let patches = index.status_patches(&now);
        let mut pending = in_flight.lock();
        // An object without a patch now is observed with its desired status (or gone).
        let differing: std::collections::HashSet<ObjectKey> =
            patches.iter().map(InFlight::key).collect();
        pending.retain(|key, _| differing.contains(key));
        for patch in patches {
            let key = InFlight::key(&patch);
            let status = comparable(&patch.status);
            if pending.get(&key).map(|(pending, _)| pending) == Some(&status) {
                continue;
            }
            match tx.try_send(patch) {
                Ok(()) => {
                    metrics.enqueues.inc();
                    pending.insert(key, (status, Instant::now()));
                }
                Err(TrySendError::Full(patch)) => {
                    metrics.overflows.inc();
                    tracing::debug!(route = %format!("{}/{}", patch.namespace, patch.name), kind = patch.kind, "status patch queue full; dropped until the next reconciliation");
                }
                Err(TrySendError::Closed(_)) => return Ok(()),
            }
        }
    }
}

/// Sends each queued patch unless this instance is no longer leader by then; forgets the
/// in-flight status of a patch dropped or failed, so that it is computed and sent again.
async fn write(
    client: Client,
    leadership: Leadership,
    mut rx: mpsc::Receiver<StatusPatch>,
    timeout: Duration,
    metrics: StatusMetrics,
    in_flight: InFlight,
) {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    while let Some(patch) = rx.recv().await {
        metrics.dequeues.inc();
        if !leadership.is_leader() {
            metrics.drops.inc();
            in_flight.forget(&patch);
            continue;
        }
        let resource = ApiResource {
            group: patch.group.to_string(),
            version: patch.version.to_string(),
            api_version: format!("{}/{}", patch.group, patch.version),
            kind: patch.kind.to_string(),
            plural: patch.plural.to_string(),
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &patch.namespace, &resource);
        let route = format!("{}/{}", patch.namespace, patch.name);
        let started = Instant::now();
        let sent = tokio::time::timeout(
            timeout,
            api.patch_status(&patch.name, &params, &Patch::Merge(patch.body())),
        )
        .await;
        metrics.duration.observe(started.elapsed().as_secs_f64());
        match sent {
            Ok(Ok(_)) => {
                metrics.patches.inc();
                tracing::debug!(%route, kind = patch.kind, "route status patched");
            }
            Ok(Err(error)) => {
                metrics.api_errors.inc();
                in_flight.forget(&patch);
                tracing::warn!(%route, kind = patch.kind, %error, "route status patch failed");
            }
            Err(_) => {
                metrics.timeouts.inc();
                in_flight.forget(&patch);
                tracing::warn!(%route, kind = patch.kind, ?timeout, "route status patch timed out");
            }
        }
    }
}
