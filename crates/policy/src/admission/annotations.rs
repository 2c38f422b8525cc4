//! The retry and timeout annotations of routes (spec/policy.md §2.5, §5.4) with the
//! annotation-style durations of §3.6, as far as admission checks them: a route attached to a
//! Service or an EgressNetwork is refused when the outbound index could not read them.
//!
//! Only validity is computed here; the outbound index owns their meaning.

use std::collections::BTreeMap;

/// `retry.linkerd.io/limit`: retries per request (u16, `0` means unset).
pub const RETRY_LIMIT: &str = "retry.linkerd.io/limit";
/// `retry.linkerd.io/timeout`: per-try timeout (annotation-style duration, `0` means unset).
pub const RETRY_TIMEOUT: &str = "retry.linkerd.io/timeout";
/// `retry.linkerd.io/http`: HTTP statuses to retry.
pub const RETRY_HTTP: &str = "retry.linkerd.io/http";
/// `retry.linkerd.io/grpc`: gRPC statuses to retry.
pub const RETRY_GRPC: &str = "retry.linkerd.io/grpc";
/// `timeout.linkerd.io/{request,response,idle}`: annotation-style durations.
pub const TIMEOUTS: [&str; 3] = [
    "timeout.linkerd.io/request",
    "timeout.linkerd.io/response",
    "timeout.linkerd.io/idle",
];

/// The gRPC status names `retry.linkerd.io/grpc` accepts (case-insensitively).
const GRPC_CONDITIONS: [&str; 5] = [
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
];

/// The annotation-style duration parser is the outbound index's (spec §3.6), so admission and
/// the index agree on what is valid.
pub use linkerd_index::outbound::annotations::{DurationError, parse_duration};

/// Checks the `timeout.linkerd.io/*` annotations:
/// `invalid timeout.linkerd.io/request value: <reason>`.
pub fn check_timeouts(annotations: &BTreeMap<String, String>) -> Result<(), String> {
    for key in TIMEOUTS {
        if let Some(value) = annotations.get(key) {
            parse_duration(value).map_err(|e| format!("invalid {key} value: {e}"))?;
        }
    }
    Ok(())
}

/// Checks the retry annotations of an HTTP route: limit, timeout and `retry.linkerd.io/http`
/// (comma-separated, untrimmed: `5xx`, `gateway-error`, a status `100..=599`, or a range
/// `A-B` of such statuses with `A <= B`; else `invalid retry condition: <whole value>`).
pub fn check_http_retry(annotations: &BTreeMap<String, String>) -> Result<(), String> {
    check_retry_limit_and_timeout(annotations)?;
    if let Some(value) = annotations.get(RETRY_HTTP) {
        fn status(s: &str) -> Option<u16> {
            s.parse().ok().filter(|s| (100..=599).contains(s))
        }
        let valid = |cond: &str| {
            cond.eq_ignore_ascii_case("5xx")
                || cond.eq_ignore_ascii_case("gateway-error")
                || status(cond).is_some()
                || cond
                    .split_once('-')
                    .and_then(|(lo, hi)| Some((status(lo)?, status(hi)?)))
                    .is_some_and(|(lo, hi)| lo <= hi)
        };
        if !value.split(',').all(valid) {
            return Err(format!("invalid retry condition: {value}"));
        }
    }
    Ok(())
}

/// Checks the retry annotations of a gRPC route: limit, timeout and `retry.linkerd.io/grpc`
/// (comma-separated status names, case-insensitive; else `invalid retry condition: <value>`).
pub fn check_grpc_retry(annotations: &BTreeMap<String, String>) -> Result<(), String> {
    check_retry_limit_and_timeout(annotations)?;
    if let Some(value) = annotations.get(RETRY_GRPC) {
        let valid = |cond: &str| GRPC_CONDITIONS.iter().any(|c| c.eq_ignore_ascii_case(cond));
        if !value.split(',').all(valid) {
            return Err(format!("invalid retry condition: {value}"));
        }
    }
    Ok(())
}

fn check_retry_limit_and_timeout(annotations: &BTreeMap<String, String>) -> Result<(), String> {
    if let Some(value) = annotations.get(RETRY_LIMIT) {
        value
            .parse::<u16>()
            .map_err(|e| format!("invalid {RETRY_LIMIT} value {value:?}: {e}"))?;
    }
    if let Some(value) = annotations.get(RETRY_TIMEOUT) {
        parse_duration(value).map_err(|e| format!("invalid {RETRY_TIMEOUT} value: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn annotation_durations() {
        let ok = [
            ("0", 0),
            (" 10s ", 10_000),
            ("500ms", 500),
            ("5m", 300_000),
            ("2h", 7_200_000),
            ("1d", 86_400_000),
            ("0s", 0),
        ];
        for (input, millis) in ok {
            assert_eq!(
                parse_duration(input),
                Ok(Duration::from_millis(millis)),
                "{input}"
            );
        }
        let errors = [
            ("", "empty duration"),
            ("  ", "empty duration"),
            ("-5s", "duration cannot be negative: '-5s'"),
            ("-0.5s", "duration cannot be negative: '-0.5s'"),
            ("0.5s", "fractional values not supported"),
            ("1.5m", "fractional values not supported"),
            ("5", "missing duration unit; did you mean '5s' or '5ms'?"),
            (
                "10x",
                "invalid duration unit x (expected one of 'ms', 's', 'm', 'h', or 'd')",
            ),
            (
                "1h30m",
                "invalid duration unit h30m (expected one of 'ms', 's', 'm', 'h', or 'd')",
            ),
            ("abc", "'abc' does not start with a duration value"),
            (
                "999999999999999999d",
                "duration 999999999999999999d overflows",
            ),
            (
                "99999999999999999999999s",
                "duration 99999999999999999999999s overflows",
            ),
        ];
        for (input, message) in errors {
            assert_eq!(
                parse_duration(input).unwrap_err().to_string(),
                message,
                "{input}"
            );
        }
    }

    #[test]
    fn retry_and_timeout_annotations() {
        let ok = annotations(&[
            (RETRY_LIMIT, "3"),
            (RETRY_TIMEOUT, "250ms"),
            (RETRY_HTTP, "5xx,GATEWAY-ERROR,429,500-504"),
            (RETRY_GRPC, "Cancelled,deadline-exceeded,unavailable"),
            ("timeout.linkerd.io/request", "10s"),
            ("timeout.linkerd.io/idle", "0"),
        ]);
        assert_eq!(check_http_retry(&ok), Ok(()));
        assert_eq!(check_grpc_retry(&ok), Ok(()));
        assert_eq!(check_timeouts(&ok), Ok(()));

        let err = |pairs: &[(&str, &str)],
                   check: fn(&BTreeMap<String, String>) -> Result<(), String>| {
            check(&annotations(pairs)).unwrap_err()
        };
        assert_eq!(
            err(&[(RETRY_HTTP, "5xx, 429")], check_http_retry),
            "invalid retry condition: 5xx, 429"
        );
        assert_eq!(
            err(&[(RETRY_HTTP, "504-500")], check_http_retry),
            "invalid retry condition: 504-500"
        );
        assert_eq!(
            err(&[(RETRY_HTTP, "600")], check_http_retry),
            "invalid retry condition: 600"
        );
        assert_eq!(
            err(&[(RETRY_GRPC, "internal,not-found")], check_grpc_retry),
            "invalid retry condition: internal,not-found"
        );
        assert_eq!(
            err(&[(RETRY_LIMIT, "-1")], check_http_retry),
            "invalid retry.linkerd.io/limit value \"-1\": invalid digit found in string"
        );
        assert_eq!(
            err(&[(RETRY_TIMEOUT, "1.5s")], check_grpc_retry),
            "invalid retry.linkerd.io/timeout value: fractional values not supported"
        );
        assert_eq!(
            err(&[("timeout.linkerd.io/response", "30")], check_timeouts),
            "invalid timeout.linkerd.io/response value: missing duration unit; did you mean '30s' or '30ms'?"
        );
    }
}
