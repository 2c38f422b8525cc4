//! The admission protocol of the sp-validator (spec/sp-validator-and-pod.md §b.3 to §b.5),
//! served over HTTPS by [`linkerd_runtime::tls::HttpsServer`].
//!
//! Every method and path is handled alike (the API server POSTs to `/`). The body is an
//! `AdmissionReview` of `admission.k8s.io/v1` or `v1beta1` ([`linkerd_admission`]):
//!
//! | body | answer |
//! |---|---|
//! | empty | `200` with an empty body, as upstream (the API server counts it as a failed call and applies the webhook's `failurePolicy`) |
//! | larger than [`MAX_BODY_BYTES`] (10 MiB, upstream's limit; see there why) | `413 text/plain` `limit reached while reading: 10485760` (upstream answers `500` with this text), without reading the body when its `content-length` says so |
//! | not arrived within 10 s, waiting for room in the budget of [`linkerd_admission::MAX_BODY_BYTES_AT_ONCE`] bytes of bodies (or, for one of at most [`linkerd_admission::SMALL_BODY_BYTES`], in a pool of its own) included | `400 text/plain` `the request body did not arrive within 10s` |
//! | not arrived within [`linkerd_runtime::tls::body_hold_time`] of its turn (1 s, and 1 s more per 4 MiB) | `400 text/plain` `the request body (N bytes) did not arrive within …` |
//! | not a review (not JSON, wrong field types) | `400 text/plain` `failed to decode admission review request: <error>` |
//! | a review without `request`, with an empty `request.uid`, or whose `apiVersion` or `kind` is not that of an `admission.k8s.io/v1` or `v1beta1` `AdmissionReview` | `400 text/plain` `invalid admission review request: …` |
//! | a review | `200 application/json`: `{apiVersion, kind: AdmissionReview, response}` with the request's `apiVersion` (`admission.k8s.io/v1` when it has none) and `uid` |
//!
//! The response allows or denies as [`admit`] decides; a denial carries
//! `status: {message, code: 400, reason: BadRequest, status: Failure}`. Unlike upstream the
//! request is not echoed back in the answer: the API server reads only `response`. A review
//! whose `object` alone is not decoded is a review: its profile is denied, naming the problem,
//! since a `400` would let `failurePolicy: Ignore` admit it unvalidated. That is an object
//! nested deeper than the JSON decoder reads ([`linkerd_admission::MAX_JSON_NESTING`]), or one
//! whose review would take more than [`linkerd_admission::MAX_DECODED_BYTES`] to decode
//! ([`linkerd_admission::decode_cost`]; the others wait for room in a budget of that size).

use crate::validate::{Invalid, validate};
use axum::{
    Router,
    extract::{Request, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use linkerd_admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReviewResponse, ReviewBody, ReviewMetrics,
};
use linkerd_index::model::regex::{ran_out_of_time, with_time_budget};
use linkerd_runtime::tls::{BodyBudget, BodyError, Judged, Judging, ReviewWorkers};

pub use linkerd_admission::{MAX_BODY_BYTES, ReviewError};

/// The name of the webhook's [`ReviewMetrics`]: `sp_validator_admission_reviews_total{result}`.
pub const REVIEWS_METRIC: &str = "sp_validator_admission_reviews";

/// The webhook's routes: every method and path reviews its body (see the module docs). The
/// router's reviews share one budget of [`linkerd_admission::MAX_BODY_BYTES_AT_ONCE`] bytes of
/// bodies, and those of at most [`linkerd_admission::SMALL_BODY_BYTES`] one of their own.
pub fn router(metrics: ReviewMetrics) -> Router {
    let budget = linkerd_admission::body_budget();
    Router::new().fallback(handle).with_state((
        metrics,
        budget.clone(),
        linkerd_admission::review_workers(budget),
    ))
}

/// Answers a non-empty review body (see the module docs).
pub fn review(body: &[u8]) -> Result<AdmissionReviewResponse, ReviewError> {
    linkerd_admission::review(body, admit)
}

/// Judges one request (§b.5):
///
/// - an operation other than `CREATE` or `UPDATE` (`DELETE`, `CONNECT`) is allowed without
///   looking at the object: the shipped registration never sends them, and a deletion must
///   never be blocked by what is deleted (upstream denies them, decoding the absent object as
///   an empty profile with an invalid name);
/// - a kind other than `linkerd.io` ServiceProfile (by `request.kind`, else by the object's
///   `apiVersion` and `kind`) is allowed: it is not this webhook's to judge (upstream decodes
///   any object as a ServiceProfile);
/// - an object that does not decode as JSON (nested too deep) is denied with
///   `failed to validate ServiceProfile: <problem>`;
/// - otherwise `request.object` goes through [`validate`], and the first broken rule is the
///   denial message.
pub fn admit(request: &AdmissionRequest) -> AdmissionResponse {
    if !request.creates_or_updates() || !is_service_profile(request) {
        return linkerd_admission::allow(request);
    }
    let verdict = match &request.object_error {
        Some(error) => Err(Invalid::Object(error.clone())),
        None => validate(request.object.as_ref()),
    };
    match verdict {
        Ok(()) => linkerd_admission::allow(request),
        Err(invalid) => {
            let message = invalid.to_string();
            // A denial for lack of time may be judged again (the cheap lane); the answer sent
            // is logged when it is final (`ReviewMetrics::answered`).
            if !ran_out_of_time() {
                tracing::info!(
                    ns = %request.object_namespace(),
                    name = %request.object_name(),
                    %message,
                    "denied a ServiceProfile"
                );
            }
            linkerd_admission::deny(request, message)
        }
    }
}

/// Whether the request concerns a `linkerd.io` ServiceProfile: by `request.kind` when it names
/// a kind, else by the object's `apiVersion`/`kind`; a request that names neither is judged.
fn is_service_profile(request: &AdmissionRequest) -> bool {
    let is = |group: &str, kind: &str| {
        group.eq_ignore_ascii_case("linkerd.io") && kind.eq_ignore_ascii_case("ServiceProfile")
    };
    if !request.kind.kind.is_empty() {
        return is(&request.kind.group, &request.kind.kind);
    }
    let field = |name: &str| {
        request
            .object
            .as_ref()
            .and_then(|o| o.get(name))
            .and_then(serde_json::Value::as_str)
    };
    match (field("apiVersion"), field("kind")) {
        (None, None) => true,
        (api_version, kind) => {
            let group = api_version
                .unwrap_or_default()
                .split_once('/')
                .map_or("", |(group, _)| group);
            is(group, kind.unwrap_or_default())
        }
    }
}

async fn handle(
    State((metrics, budget, workers)): State<(ReviewMetrics, BodyBudget, ReviewWorkers)>,
    request: Request,
) -> Response {
    let text = |status: StatusCode, text: String| {
        (status, [(header::CONTENT_TYPE, "text/plain")], text).into_response()
    };
    let (head, body) = request.into_parts();
    let peer = linkerd_runtime::tls::PeerAddr::ip_of(&head.extensions);
    let body = match budget.read(peer, &head.headers, body).await {
        Ok(body) => body,
        Err(BodyError::TooLarge { .. }) => {
            metrics.invalid();
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                linkerd_admission::body_too_large(),
            );
        }
        Err(error) => {
            metrics.invalid();
            return text(StatusCode::BAD_REQUEST, error.to_string());
        }
    };
    if body.is_empty() {
        tracing::warn!("empty admission review request; answering with an empty body");
        metrics.invalid();
        return StatusCode::OK.into_response();
    }
    // Decoding can take many times the body's size: the review waits for room in the decoding
    // budget too, with its judging slot (a review too complex for it has its object denied
    // without being decoded).
    let reviewed = ReviewBody::new(&body);
    // Judged off the runtime: compiling a profile's regexes can take seconds.
    let judged = workers
        .run(
            reviewed.cost(),
            reviewed.memory(),
            linkerd_admission::JUDGING_TIME_BUDGET,
            move |judging| match judging {
                Judging::Within(time) => with_time_budget(time, || {
                    ReviewBody::new(&body).review_within(admit, ran_out_of_time)
                }),
                Judging::Unjudged { waited } => {
                    Judged::done(ReviewBody::new(&body).deny_unjudged(waited))
                }
                Judging::Overran { time } => {
                    Judged::done(ReviewBody::new(&body).deny_overran(time))
                }
            },
        )
        .await;
    let answer = match judged {
        Ok(Ok(answer)) => answer,
        Ok(Err(error)) => {
            tracing::info!(%error, "bad admission review");
            metrics.invalid();
            return text(StatusCode::BAD_REQUEST, error.to_string());
        }
        Err(error) => {
            tracing::error!(%error, "judging an admission review failed");
            metrics.invalid();
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "judging the admission review failed".into(),
            );
        }
    };
    metrics.answered(&answer);
    match linkerd_admission::to_json(&answer) {
        Ok(json) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            json,
        )
            .into_response(),
        Err(error) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the admission review response: {error}"),
        ),
    }
}
