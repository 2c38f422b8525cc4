//! Leader election on a `coordination.k8s.io/v1` Lease, for the pod's writers: the route status
//! writer of `policy-controller` (Lease `policy-controller-write`, spec/policy.md §1.4, §7.1) and
//! the ExternalWorkload EndpointSlice controller of `destination` (Lease
//! `linkerd-destination-endpoint-write`, spec/destination.md §K).
//!
//! Every replica serves; only the Lease holder writes. A task
//! claims the Lease when it is free or expired and renews it while held, with optimistic
//! concurrency (`resourceVersion` on every write), so two replicas never both believe they hold
//! it for longer than one renewal attempt. [`Leadership`] says whether this instance holds it
//! now: it turns `false` the moment our claim's duration has passed without a renewal, by the
//! local clock, whatever the API server answers (or does not).

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference},
    jiff::Timestamp,
};
use kube::{
    Api,
    api::{PostParams, entry::Entry},
};
use std::{collections::BTreeMap, time::Duration};
use tokio::{sync::watch, time::Instant};

/// How long a claim lasts without renewal (spec/policy.md §1.4, spec/destination.md §K: 30 s
/// for both Leases).
pub const LEASE_DURATION: Duration = Duration::from_secs(30);
/// How long before a claim's end the holder renews it (spec/policy.md §1.4).
pub const RENEW_GRACE: Duration = Duration::from_secs(1);
/// Pause after a failed API call before the next attempt while holding a claim (it must be
/// renewed before it runs out), and after the first failure otherwise.
const RETRY: Duration = Duration::from_secs(1);
/// The longest pause between attempts while the API server keeps failing and no claim is
/// held: the pause doubles from [`RETRY`] up to this.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The pause after the `failures`-th failed attempt in a row (from 1): [`RETRY`] while
/// `holding` a claim, else doubling from [`RETRY`] to [`RETRY_MAX`] (newcomer finding: an
/// unreachable API server got a warning and a client error logged every second, forever).
fn retry_after(failures: u32, holding: bool) -> Duration {
    if holding {
        return RETRY;
    }
    let doublings = failures.saturating_sub(1).min(16);
    RETRY.saturating_mul(1 << doublings).min(RETRY_MAX)
}

/// What the Lease task needs.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// `metadata.name`: `policy-controller-write`, `linkerd-destination-endpoint-write`.
    pub name: String,
    /// The field manager of the Lease writes (`policy-controller` for the route status Lease,
    /// spec/policy.md §1.4).
    pub field_manager: String,
    /// The claimant identity written as `spec.holderIdentity`: the pod's `HOSTNAME`.
    pub claimant: String,
    /// `spec.leaseDurationSeconds` (whole seconds), [`LEASE_DURATION`].
    pub duration: Duration,
    /// How long before our claim ends it is renewed, [`RENEW_GRACE`]; less than `duration`.
    pub renew_grace: Duration,
    /// Labels of a Lease we create (`linkerd.io/control-plane-component`, `-ns`).
    pub labels: BTreeMap<String, String>,
    /// Controller owner of a Lease we create (the `linkerd-destination` Deployment), so that it
    /// goes with the control plane.
    pub owner: Option<OwnerReference>,
}

/// Whether this instance holds the Lease now; cheap to clone.
#[derive(Clone, Debug)]
pub struct Leadership {
    rx: watch::Receiver<bool>,
    /// The sender of a [`Leadership::fixed`] value, kept so that `changed()` waits forever.
    _fixed: Option<std::sync::Arc<watch::Sender<bool>>>,
}

/// Errors of one claim attempt; the task logs them and tries again.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("Lease {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// The outcome of one claim attempt.
#[derive(Debug, PartialEq, Eq)]
enum Claim {
    /// Ours until `duration` after the attempt started.
    Held,
    /// Another claimant's, for `Duration` more by its last renewal.
    Taken { by: String, remaining: Duration },
    /// Someone wrote the Lease between our read and our write: read it again now.
    Raced,
}

// === impl LeaseConfig ===

impl LeaseConfig {
    /// The Lease `name`, written by `field_manager`, for `claimant` in `namespace` (its labels
    /// name the control plane), with the spec's durations.
    pub fn new(
        name: impl Into<String>,
        field_manager: impl Into<String>,
        claimant: impl Into<String>,
        namespace: &str,
    ) -> Self {
        Self {
            name: name.into(),
            field_manager: field_manager.into(),
            claimant: claimant.into(),
            duration: LEASE_DURATION,
            renew_grace: RENEW_GRACE,
            labels: BTreeMap::from([
                (
                    "linkerd.io/control-plane-component".to_string(),
                    "destination".to_string(),
                ),
                (
                    "linkerd.io/control-plane-ns".to_string(),
                    namespace.to_string(),
                ),
            ]),
            owner: None,
        }
    }
}

// === impl Leadership ===

impl Leadership {
    /// A leadership that never changes, for offline mode (one process, always the writer) and
    /// tests.
    pub fn fixed(leader: bool) -> Self {
        let (tx, rx) = watch::channel(leader);
        Self {
            rx,
            _fixed: Some(std::sync::Arc::new(tx)),
        }
    }

    /// Whether this instance holds the Lease at this moment.
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// Waits until leadership changes; returns the new value, or `None` when the task ended.
    pub async fn changed(&mut self) -> Option<bool> {
        self.rx.changed().await.ok()?;
        Some(*self.rx.borrow_and_update())
    }
}

/// Starts the task that claims and renews the Lease through `api` (the control-plane
/// namespace's Leases) and returns the leadership it maintains. Must be called within a Tokio
/// runtime. The task runs until every [`Leadership`] is dropped; API errors are logged and
/// retried (every second while a claim is held, else backing off from 1 s to 30 s),
/// and never end it.
pub fn spawn(api: Api<Lease>, config: LeaseConfig) -> Leadership {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut claim_ends: Option<Instant> = None;
        let mut failures = 0;
        loop {
            let started = Instant::now();
            let attempt = claim(&api, &config).await;
            failures = if attempt.is_ok() { 0 } else { failures + 1 };
            let next = match attempt {
                Ok(Claim::Held) => {
                    claim_ends = Some(started + config.duration);
                    if !*tx.borrow() {
                        tracing::info!(lease = %config.name, claimant = %config.claimant, "holding the Lease: this instance writes");
                    }
                    tx.send_if_modified(|held| !std::mem::replace(held, true));
                    started + config.duration.saturating_sub(config.renew_grace)
                }
                Ok(Claim::Taken { by, remaining }) => {
                    claim_ends = None;
                    if tx.send_if_modified(|held| std::mem::replace(held, false)) {
                        tracing::info!(lease = %config.name, holder = %by, "the Lease is held by another instance");
                    }
                    tracing::debug!(lease = %config.name, holder = %by, ?remaining, "Lease taken");
                    // Retry as soon as the holder's claim would have run out.
                    Instant::now() + remaining.max(Duration::from_millis(100))
                }
                Ok(Claim::Raced) => Instant::now(),
                Err(error) => {
                    let retry = retry_after(failures, claim_ends.is_some());
                    tracing::warn!(%error, retry_in_ms = retry.as_millis() as u64, "cannot claim or renew the Lease");
                    Instant::now() + retry
                }
            };
            // Wait for the next attempt, dropping leadership the moment our claim runs out.
            loop {
                let expiry = async {
                    match claim_ends {
                        Some(at) if at < next => tokio::time::sleep_until(at).await,
                        _ => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = tokio::time::sleep_until(next) => break,
                    _ = expiry => {
                        claim_ends = None;
                        tracing::warn!(lease = %config.name, "the Lease claim ran out without a renewal: writes stop");
                        tx.send_replace(false);
                    }
                    _ = tx.closed() => return,
                }
            }
        }
    });
    Leadership { rx, _fixed: None }
}

/// One attempt: read the Lease; create it, or take it over when it is ours, free or expired
/// (writing with the `resourceVersion` read, so a concurrent writer makes ours fail with 409).
async fn claim(api: &Api<Lease>, config: &LeaseConfig) -> Result<Claim, LeaseError> {
    let api_error = |source| LeaseError::Api {
        name: config.name.clone(),
        source,
    };
    let now = Timestamp::now();
    let spec = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(config.claimant.clone()),
        lease_duration_seconds: Some(duration_secs(config.duration)),
        acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    };
    let params = PostParams {
        field_manager: Some(config.field_manager.clone()),
        ..PostParams::default()
    };
    match api.entry(&config.name).await.map_err(api_error)? {
        Entry::Vacant(_) => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(config.name.clone()),
                    labels: Some(config.labels.clone()),
                    owner_references: config.owner.clone().map(|o| vec![o]),
                    ..ObjectMeta::default()
                },
                spec: Some(spec(0, None)),
            };
            match api.create(&params, &lease).await {
                Ok(_) => Ok(Claim::Held),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Claim::Raced),
                Err(error) => Err(api_error(error)),
            }
        }
        Entry::Occupied(entry) => {
            let mut lease = entry.into_object();
            let current = lease.spec.clone().unwrap_or_default();
            let holder = current.holder_identity.clone().unwrap_or_default();
            let ours = holder == config.claimant;
            let remaining = remaining(&current, now);
            if !ours && !holder.is_empty() && !remaining.is_zero() {
                return Ok(Claim::Taken {
                    by: holder,
                    remaining,
                });
            }
            let transitions = current.lease_transitions.unwrap_or(0);
            lease.spec = Some(if ours {
                spec(transitions, current.acquire_time)
            } else {
                spec(transitions.saturating_add(1), None)
            });
            lease.metadata.managed_fields = None;
            match api.replace(&config.name, &params, &lease).await {
                Ok(_) => Ok(Claim::Held),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Claim::Raced),
                Err(error) => Err(api_error(error)),
            }
        }
    }
}

/// How long the holder's claim lasts after `now` by its last renewal; zero when it has run out
/// or the Lease names no renewal time or duration.
fn remaining(spec: &LeaseSpec, now: Timestamp) -> Duration {
    let (Some(renewed), Some(seconds)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return Duration::ZERO;
    };
    let seconds = u64::try_from(seconds).unwrap_or(0);
    let Ok(end) = renewed.0.checked_add(Duration::from_secs(seconds)) else {
        return Duration::ZERO;
    };
    end.duration_since(now).try_into().unwrap_or(Duration::ZERO)
}

/// Whole seconds, at least 1 (the field's unit).
fn duration_secs(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(now: Timestamp, renewed_secs_ago: i64, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some("other".into()),
            renew_time: Some(MicroTime(
                now - k8s_openapi::jiff::SignedDuration::from_secs(renewed_secs_ago),
            )),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn remaining_time_of_a_claim() {
        let now = Timestamp::now();
        let left = remaining(&spec(now, 10, 30), now);
        assert!(left == Duration::from_secs(20), "{left:?}");
        assert_eq!(remaining(&spec(now, 31, 30), now), Duration::ZERO);
        assert_eq!(remaining(&LeaseSpec::default(), now), Duration::ZERO);
        assert_eq!(remaining(&spec(now, 0, -5), now), Duration::ZERO);
    }

    #[test]
    fn failed_attempts_back_off_unless_a_claim_is_held() {
        let pauses: Vec<u64> = (1..=8).map(|n| retry_after(n, false).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(retry_after(u32::MAX, false), RETRY_MAX);
        // A holder retries every second: its claim must be renewed before it runs out.
        assert_eq!(retry_after(7, true), RETRY);
    }

    #[test]
    fn durations_are_whole_seconds() {
        assert_eq!(duration_secs(LEASE_DURATION), 30);
        assert_eq!(duration_secs(Duration::from_millis(300)), 1);
    }
}
