//! The outbound annotations of Services and routes (spec/policy.md §2.5): retries and timeouts
//! (§5.4), failure accrual and the penalty load estimator (§5.7), with the annotation-style
//! durations of §3.6.
//!
//! Each parser returns an error naming the annotation; the caller logs it and treats that one
//! feature as unset (§5.3), so a bad annotation never hides the object.

use std::{collections::BTreeMap, ops::RangeInclusive, time::Duration};

use super::view::{
    Backoff, FailureAccrual, GrpcRetryConditions, LoadEstimator, RouteRetry, RouteTimeouts,
};

/// `retry.linkerd.io/limit`: retries per request (u16, `0` means unset).
pub const RETRY_LIMIT: &str = "retry.linkerd.io/limit";
/// `retry.linkerd.io/timeout`: per-try timeout (annotation-style duration, `0` means unset).
pub const RETRY_TIMEOUT: &str = "retry.linkerd.io/timeout";
/// `retry.linkerd.io/http`: HTTP statuses to retry.
pub const RETRY_HTTP: &str = "retry.linkerd.io/http";
/// `retry.linkerd.io/grpc`: gRPC statuses to retry.
pub const RETRY_GRPC: &str = "retry.linkerd.io/grpc";
/// `timeout.linkerd.io/request`: the whole request, retries included.
pub const TIMEOUT_REQUEST: &str = "timeout.linkerd.io/request";
/// `timeout.linkerd.io/response`: from the request's end to the response's end.
pub const TIMEOUT_RESPONSE: &str = "timeout.linkerd.io/response";
/// `timeout.linkerd.io/idle`: the longest pause in a request or response stream.
pub const TIMEOUT_IDLE: &str = "timeout.linkerd.io/idle";
/// `balancer.linkerd.io/failure-accrual`: `consecutive` or `unified`.
pub const ACCRUAL: &str = "balancer.linkerd.io/failure-accrual";
const ACCRUAL_MAX_FAILURES: &str = "balancer.linkerd.io/failure-accrual-consecutive-max-failures";
const ACCRUAL_MIN_PENALTY: &str = "balancer.linkerd.io/failure-accrual-consecutive-min-penalty";
const ACCRUAL_MAX_PENALTY: &str = "balancer.linkerd.io/failure-accrual-consecutive-max-penalty";
const ACCRUAL_JITTER: &str = "balancer.linkerd.io/failure-accrual-consecutive-jitter-ratio";
const ACCRUAL_SR_THRESHOLD: &str =
    "balancer.alpha.linkerd.io/failure-accrual-success-rate-threshold";
const ACCRUAL_SR_WINDOW: &str = "balancer.alpha.linkerd.io/failure-accrual-success-rate-window";
const ACCRUAL_SR_MIN_REQUESTS: &str =
    "balancer.alpha.linkerd.io/failure-accrual-success-rate-min-requests";
const HONOR_RETRY_AFTER: &str = "balancer.alpha.linkerd.io/failure-accrual-honor-retry-after";
const PENALIZE_FAILURES: &str = "balancer.alpha.linkerd.io/penalize-failures";
const LOAD_BIASER_PENALTY: &str = "balancer.alpha.linkerd.io/load-biaser-penalty";
const LOAD_BIASER_MAX_RETRY_AFTER: &str = "balancer.alpha.linkerd.io/load-biaser-max-retry-after";

/// The gRPC status names `retry.linkerd.io/grpc` accepts (case-insensitively).
const GRPC_CONDITIONS: [&str; 5] = [
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
];

/// Why an annotation-style duration does not parse (spec §3.6).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("duration cannot be negative: '{0}'")]
    Negative(String),
    #[error("fractional values not supported")]
    Fractional,
    #[error("'{0}' does not start with a duration value")]
    NoValue(String),
    #[error("missing duration unit; did you mean '{0}s' or '{0}ms'?")]
    MissingUnit(u64),
    #[error("invalid duration unit {0} (expected one of 'ms', 's', 'm', 'h', or 'd')")]
    InvalidUnit(String),
    #[error("duration {0} overflows")]
    Overflow(String),
}

/// Parses an annotation-style duration (§3.6): optional surrounding whitespace, an integer
/// magnitude and a unit among `ms`, `s`, `m`, `h`, `d`; a bare `0` is zero.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s.starts_with('-') {
        return Err(DurationError::Negative(s.to_string()));
    }
    let (magnitude, unit) = s.split_at(
        s.find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len()),
    );
    if magnitude.contains('.') {
        return Err(DurationError::Fractional);
    }
    if magnitude.is_empty() {
        return Err(DurationError::NoValue(s.to_string()));
    }
    let magnitude: u64 = magnitude
        .parse()
        .map_err(|_| DurationError::Overflow(s.to_string()))?;
    let millis_per_unit: u64 = match unit {
        "" if magnitude == 0 => 0,
        "" => return Err(DurationError::MissingUnit(magnitude)),
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => return Err(DurationError::InvalidUnit(other.to_string())),
    };
    magnitude
        .checked_mul(millis_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| DurationError::Overflow(s.to_string()))
}

fn duration_annotation(
    annotations: &BTreeMap<String, String>,
    key: &str,
) -> Result<Option<Duration>, String> {
    annotations
        .get(key)
        .map(|v| parse_duration(v).map_err(|e| format!("invalid {key} value: {e}")))
        .transpose()
}

/// The `timeout.linkerd.io/*` annotations; a zero duration means unset.
///
/// Errors: `invalid timeout.linkerd.io/<name> value: <reason>`.
pub fn timeouts(annotations: &BTreeMap<String, String>) -> Result<RouteTimeouts, String> {
    let get =
        |key| Ok::<_, String>(duration_annotation(annotations, key)?.filter(|d| !d.is_zero()));
    Ok(RouteTimeouts {
        request: get(TIMEOUT_REQUEST)?,
        response: get(TIMEOUT_RESPONSE)?,
        idle: get(TIMEOUT_IDLE)?,
    })
}

/// The retry annotations (§5.4): `None` when none of limit (u16, `0` unset), timeout (`0`
/// unset) or conditions is set; otherwise the limit defaults to 1. `retry.linkerd.io/http` is
/// a comma list (untrimmed) of `5xx`, `gateway-error`, a status `100..=599` or a range `A-B`;
/// `retry.linkerd.io/grpc` a comma list of gRPC status names.
///
/// Errors name the annotation, or `invalid retry condition: <whole value>`.
pub fn retry(annotations: &BTreeMap<String, String>) -> Result<Option<RouteRetry>, String> {
    let limit = annotations
        .get(RETRY_LIMIT)
        .map(|v| {
            v.parse::<u16>()
                .map_err(|e| format!("invalid {RETRY_LIMIT} value {v:?}: {e}"))
        })
        .transpose()?
        .filter(|l| *l != 0);
    let timeout = duration_annotation(annotations, RETRY_TIMEOUT)?.filter(|d| !d.is_zero());
    let http = annotations
        .get(RETRY_HTTP)
        .map(|v| http_conditions(v))
        .transpose()?;
    let grpc = annotations
        .get(RETRY_GRPC)
        .map(|v| grpc_conditions(v))
        .transpose()?;
    if limit.is_none() && timeout.is_none() && http.is_none() && grpc.is_none() {
        return Ok(None);
    }
    Ok(Some(RouteRetry {
        limit: limit.unwrap_or(1),
        timeout,
        http,
        grpc,
    }))
}

fn http_conditions(value: &str) -> Result<Vec<RangeInclusive<u16>>, String> {
    fn status(s: &str) -> Option<u16> {
        s.parse().ok().filter(|s| (100..=599).contains(s))
    }
    value
        .split(',')
        .map(|cond| {
            if cond.eq_ignore_ascii_case("5xx") {
                Some(500..=599)
            } else if cond.eq_ignore_ascii_case("gateway-error") {
                Some(502..=504)
            } else if let Some(s) = status(cond) {
                Some(s..=s)
            } else {
                let (lo, hi) = cond.split_once('-')?;
                let (lo, hi) = (status(lo)?, status(hi)?);
                (lo <= hi).then_some(lo..=hi)
            }
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| format!("invalid retry condition: {value}"))
}

fn grpc_conditions(value: &str) -> Result<GrpcRetryConditions, String> {
    let mut conditions = GrpcRetryConditions::default();
    for cond in value.split(',') {
        let flag = match GRPC_CONDITIONS
            .iter()
            .position(|c| c.eq_ignore_ascii_case(cond))
        {
            Some(0) => &mut conditions.cancelled,
            Some(1) => &mut conditions.deadline_exceeded,
            Some(2) => &mut conditions.internal,
            Some(3) => &mut conditions.resource_exhausted,
            Some(4) => &mut conditions.unavailable,
            _ => return Err(format!("invalid retry condition: {value}")),
        };
        *flag = true;
    }
    Ok(conditions)
}

/// A boolean annotation (§5.7): absent or `0/f/F/false/FALSE/False` → false,
/// `1/t/T/true/TRUE/True` → true (trimmed); anything else is an error naming the key.
fn boolean(annotations: &BTreeMap<String, String>, key: &str) -> Result<bool, String> {
    match annotations.get(key).map(|v| v.trim()) {
        None | Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some(other) => Err(format!("invalid {key} value {other:?}: not a boolean")),
    }
}

fn number<T: std::str::FromStr>(
    annotations: &BTreeMap<String, String>,
    key: &str,
    default: T,
) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    annotations.get(key).map_or(Ok(default), |v| {
        v.trim()
            .parse()
            .map_err(|e| format!("invalid {key} value {v:?}: {e}"))
    })
}

fn duration_or(
    annotations: &BTreeMap<String, String>,
    key: &str,
    default: Duration,
) -> Result<Duration, String> {
    Ok(duration_annotation(annotations, key)?.unwrap_or(default))
}

/// `balancer.linkerd.io/failure-accrual` and its parameters (§5.7): absent → `None`;
/// `consecutive` → max failures (default 7) and backoff (min 1 s, max 60 s, jitter 0.5);
/// `unified` → the same plus success rate (threshold 0.8 in 0..=1, window 10 s, at least
/// 10 ms when the threshold is not 0, min requests 5, at most 1 000 000 when the threshold is
/// not 0) and the Retry-After hint from `failure-accrual-honor-retry-after`.
///
/// A Retry-After toggle that is not a boolean is reported to `ignored` and taken as its
/// default (off): the accrual itself is kept, as upstream parses the toggle on its own.
///
/// Errors: any other mode, or a parameter out of range; the caller sets no accrual.
pub fn failure_accrual(
    annotations: &BTreeMap<String, String>,
    mut ignored: impl FnMut(String),
) -> Result<Option<FailureAccrual>, String> {
    let Some(mode) = annotations.get(ACCRUAL) else {
        return Ok(None);
    };
    let max_failures: u32 = number(annotations, ACCRUAL_MAX_FAILURES, 7)?;
    let min = duration_or(annotations, ACCRUAL_MIN_PENALTY, Duration::from_secs(1))?;
    let max = duration_or(annotations, ACCRUAL_MAX_PENALTY, Duration::from_secs(60))?;
    let jitter: f32 = number(annotations, ACCRUAL_JITTER, 0.5)?;
    if min > max {
        return Err(format!(
            "{ACCRUAL_MIN_PENALTY} ({min:?}) must not exceed {ACCRUAL_MAX_PENALTY} ({max:?})"
        ));
    }
    if max.is_zero() {
        return Err(format!("{ACCRUAL_MAX_PENALTY} must be positive"));
    }
    if !(0.0..=100.0).contains(&jitter) {
        return Err(format!(
            "{ACCRUAL_JITTER} must be within 0..=100, not {jitter}"
        ));
    }
    let mut backoff = Backoff {
        min,
        max,
        jitter,
        respect_retry_after: false,
    };
    match mode.as_str() {
        "consecutive" => Ok(Some(FailureAccrual::Consecutive {
            max_failures,
            backoff,
        })),
        "unified" => {
            let threshold: f64 = number(annotations, ACCRUAL_SR_THRESHOLD, 0.8)?;
            if !(0.0..=1.0).contains(&threshold) {
                return Err(format!("{ACCRUAL_SR_THRESHOLD} must be within 0..=1"));
            }
            let window = duration_or(annotations, ACCRUAL_SR_WINDOW, Duration::from_secs(10))?;
            let min_requests: u32 = number(annotations, ACCRUAL_SR_MIN_REQUESTS, 5)?;
            if window.is_zero() || (threshold != 0.0 && window < Duration::from_millis(10)) {
                return Err(format!("{ACCRUAL_SR_WINDOW} too small: {window:?}"));
            }
            if threshold != 0.0 && min_requests > 1_000_000 {
                return Err(format!("{ACCRUAL_SR_MIN_REQUESTS} above 1000000"));
            }
            backoff.respect_retry_after =
                boolean(annotations, HONOR_RETRY_AFTER).unwrap_or_else(|error| {
                    ignored(error);
                    false
                });
            Ok(Some(FailureAccrual::Unified {
                max_consecutive_failures: max_failures,
                success_rate_threshold: threshold,
                window,
                min_requests,
                backoff,
            }))
        }
        other => Err(format!(
            "invalid {ACCRUAL} value {other:?}: expected consecutive or unified"
        )),
    }
}

/// Each feature `annotations` configure that they leave unset, with why: `(feature, error)`,
/// as the policies built from them find it (§5.3: "each parse error is logged and that feature
/// treated as unset"; a Retry-After toggle that is not a boolean is reported too). The outbound
/// index logs them once per version of a Service (`load_biaser`: its balancers' load
/// estimator too) or EgressNetwork; the policies, computed per port and client namespace,
/// only at debug level.
pub fn problems(
    annotations: &BTreeMap<String, String>,
    load_biaser: bool,
) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    if let Err(error) = timeouts(annotations) {
        problems.push(("timeout", error));
    }
    if let Err(error) = retry(annotations) {
        problems.push(("retry", error));
    }
    let mut toggles = Vec::new();
    if let Err(error) = failure_accrual(annotations, |e| toggles.push(e)) {
        problems.push(("failure accrual", error));
    }
    problems.extend(toggles.into_iter().map(|e| ("failure accrual", e)));
    if load_biaser && let Err(error) = load_estimator(annotations) {
        problems.push(("load biaser", error));
    }
    problems
}

/// The load estimator of a Service's balancers (§5.7): the penalty estimator when
/// `penalize-failures` is true (penalty default 5 s and fitting u32 milliseconds,
/// max-retry-after default 300 s), else plain PeakEWMA.
///
/// Errors name the annotation; the caller then uses PeakEWMA.
pub fn load_estimator(annotations: &BTreeMap<String, String>) -> Result<LoadEstimator, String> {
    if !boolean(annotations, PENALIZE_FAILURES)? {
        return Ok(LoadEstimator::PeakEwma);
    }
    let penalty = duration_or(annotations, LOAD_BIASER_PENALTY, Duration::from_secs(5))?;
    if u32::try_from(penalty.as_millis()).is_err() {
        return Err(format!("{LOAD_BIASER_PENALTY} too large: {penalty:?}"));
    }
    let max_retry_after = duration_or(
        annotations,
        LOAD_BIASER_MAX_RETRY_AFTER,
        Duration::from_secs(300),
    )?;
    Ok(LoadEstimator::PenaltyPeakEwma {
        penalty,
        max_retry_after,
    })
}

#[cfg(test)]
mod tests;
