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

/// The controller's settings.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// [`RESYNC_PERIOD`].
    pub resync_period: Duration,
    /// [`RETRY_BASE`].
    pub retry_base: Duration,
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
}

// === impl ControllerConfig ===

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            resync_period: RESYNC_PERIOD,
            retry_base: RETRY_BASE,
        }
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
    // Before the initial lists, a Service would look as if it selected nothing.
    if ready.wait_for(|r| *r).await.is_err() {
        return;
    }
    let mut resync = tokio::time::interval(config.resync_period);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Failed Services: (failures so far, when to retry).
    let mut retries: BTreeMap<ObjectRef, (u32, Instant)> = BTreeMap::new();
    loop {
        let next_retry = retries.values().map(|(_, at)| *at).min();
        tokio::select! {
            changed = queued.changed() => if changed.is_err() { return },
            leader = leadership.changed() => match leader {
                None => return,
                Some(true) => index.requeue_external_workload_slices(),
                Some(false) => {}
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
            let synced =
                tokio::time::timeout(SYNC_TIMEOUT, sync(&index, &client, &leadership, &service))
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
                        tracing::info!(service = %format!("{}/{}", service.namespace, service.name), created = done.created, updated = done.updated, deleted = done.deleted, "ExternalWorkload EndpointSlices written");
                    }
                }
                Err(error) => {
                    let failures = retries.get(&service).map_or(0, |(n, _)| *n) + 1;
                    if failures > MAX_RETRIES {
                        retries.remove(&service);
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
/// what the index wants, writes it while leader.
pub async fn sync(
    index: &DiscoveryIndex,
    client: &Client,
    leadership: &Leadership,
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
    let mut done = Synced::default();
    for spec in &plan.create {
        if !leadership.is_leader() {
            return Ok(done);
        }
        api.create(&params, &spec.to_endpoint_slice(&svc))
            .await
            .map_err(api_error("create"))?;
        done.created += 1;
    }
    for spec in &plan.update {
        let Some(slice_name) = &spec.name else {
            continue;
        };
        if !leadership.is_leader() {
            return Ok(done);
        }
        api.replace(slice_name, &params, &spec.to_endpoint_slice(&svc))
            .await
            .map_err(api_error("update"))?;
        done.updated += 1;
    }
    for slice_name in &plan.delete {
        if !leadership.is_leader() {
            return Ok(done);
        }
        match api.delete(slice_name, &DeleteParams::default()).await {
            Ok(_) => done.deleted += 1,
            // Gone already: what we wanted.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(api_error("delete")(error)),
        }
    }
    Ok(done)
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
}
