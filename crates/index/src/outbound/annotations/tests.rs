use super::*;

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn durations() {
    assert_eq!(parse_duration(" 10s "), Ok(Duration::from_secs(10)));
    assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
    assert_eq!(
        parse_duration("5").unwrap_err().to_string(),
        "missing duration unit; did you mean '5s' or '5ms'?"
    );
    assert_eq!(parse_duration("0.5s"), Err(DurationError::Fractional));
}

#[test]
fn timeouts_zero_is_unset() {
    let t = timeouts(&annotations(&[
        (TIMEOUT_REQUEST, "10s"),
        (TIMEOUT_RESPONSE, "0"),
        (TIMEOUT_IDLE, "1m"),
    ]))
    .unwrap();
    assert_eq!(
        t,
        RouteTimeouts {
            request: Some(Duration::from_secs(10)),
            response: None,
            idle: Some(Duration::from_secs(60)),
        }
    );
    assert_eq!(
        timeouts(&annotations(&[(TIMEOUT_IDLE, "5")])).unwrap_err(),
        "invalid timeout.linkerd.io/idle value: missing duration unit; did you mean '5s' or '5ms'?"
    );
}

#[test]
fn retries() {
    assert_eq!(retry(&annotations(&[])), Ok(None));
    assert_eq!(retry(&annotations(&[(RETRY_LIMIT, "0")])), Ok(None));
    let r = retry(&annotations(&[
        (RETRY_HTTP, "5xx,gateway-error,429,400-404"),
        (RETRY_GRPC, "Cancelled,unavailable"),
        (RETRY_TIMEOUT, "250ms"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(r.limit, 1, "the limit defaults to 1");
    assert_eq!(r.timeout, Some(Duration::from_millis(250)));
    assert_eq!(
        r.http,
        Some(vec![500..=599, 502..=504, 429..=429, 400..=404])
    );
    assert_eq!(
        r.grpc,
        Some(GrpcRetryConditions {
            cancelled: true,
            unavailable: true,
            ..GrpcRetryConditions::default()
        })
    );
    assert_eq!(
        retry(&annotations(&[(RETRY_HTTP, "5xx, 429")])).unwrap_err(),
        "invalid retry condition: 5xx, 429"
    );
    assert_eq!(
        retry(&annotations(&[(RETRY_HTTP, "504-500")])).unwrap_err(),
        "invalid retry condition: 504-500"
    );
    assert_eq!(
        retry(&annotations(&[(RETRY_GRPC, "not-found")])).unwrap_err(),
        "invalid retry condition: not-found"
    );
}

/// The accrual of `annotations`, failing the test on an ignored field.
fn failure_accrual_of(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<FailureAccrual>, String> {
    failure_accrual(annotations, |e| panic!("ignored: {e}"))
}

#[test]
fn accrual() {
    assert_eq!(failure_accrual_of(&annotations(&[])), Ok(None));
    assert_eq!(
        failure_accrual_of(&annotations(&[(ACCRUAL_SR_THRESHOLD, "0.9")])),
        Ok(None),
        "success-rate keys alone do nothing"
    );
    assert_eq!(
        failure_accrual_of(&annotations(&[(ACCRUAL, "consecutive")])),
        Ok(Some(FailureAccrual::Consecutive {
            max_failures: 7,
            backoff: Backoff {
                min: Duration::from_secs(1),
                max: Duration::from_secs(60),
                jitter: 0.5,
                respect_retry_after: false,
            },
        }))
    );
    assert_eq!(
        failure_accrual_of(&annotations(&[
            (ACCRUAL, "unified"),
            (ACCRUAL_MAX_FAILURES, " 3 "),
            (HONOR_RETRY_AFTER, "true"),
        ])),
        Ok(Some(FailureAccrual::Unified {
            max_consecutive_failures: 3,
            success_rate_threshold: 0.8,
            window: Duration::from_secs(10),
            min_requests: 5,
            backoff: Backoff {
                min: Duration::from_secs(1),
                max: Duration::from_secs(60),
                jitter: 0.5,
                respect_retry_after: true,
            },
        }))
    );
    assert!(failure_accrual_of(&annotations(&[(ACCRUAL, "true")])).is_err());
    let mut ignored = vec![];
    let unified = failure_accrual(
        &annotations(&[(ACCRUAL, "unified"), (HONOR_RETRY_AFTER, "yes")]),
        |e| ignored.push(e),
    );
    assert!(
        matches!(unified, Ok(Some(FailureAccrual::Unified { backoff, .. })) if !backoff.respect_retry_after)
    );
    assert_eq!(
        ignored,
        [format!(
            "invalid {HONOR_RETRY_AFTER} value \"yes\": not a boolean"
        )]
    );
    assert!(
        failure_accrual_of(&annotations(&[
            (ACCRUAL, "consecutive"),
            (ACCRUAL_MIN_PENALTY, "2m"),
        ]))
        .is_err(),
        "min penalty above max"
    );
}

#[test]
fn load_bias() {
    assert_eq!(
        load_estimator(&annotations(&[])),
        Ok(LoadEstimator::PeakEwma)
    );
    assert_eq!(
        load_estimator(&annotations(&[(PENALIZE_FAILURES, "T")])),
        Ok(LoadEstimator::PenaltyPeakEwma {
            penalty: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(300),
        })
    );
    assert!(load_estimator(&annotations(&[(PENALIZE_FAILURES, "yes")])).is_err());
}
