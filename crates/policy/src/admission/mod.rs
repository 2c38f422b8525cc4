//! The validating admission webhook of the policy CRDs (spec/policy.md §6), served over HTTPS
//! by [`linkerd_runtime::tls::HttpsServer`] on `--server-addr`.
//!
//! # Protocol
//!
//! Only `POST /` is handled; any other method or path is `404`. The body is an
//! `AdmissionReview` ([`linkerd_admission`]) of `admission.k8s.io/v1` or `v1beta1`; the answer
//! is a review of the same `apiVersion` whose `response` carries the request's `uid`:
//!
//! - a body over [`MAX_BODY_BYTES`] (10 MiB, see there why) is answered `413 text/plain`
//!   `limit reached while reading: 10485760`, without reading it when its `content-length` says
//!   so. A body waits until it fits in the webhook's budget of
//!   [`linkerd_admission::MAX_BODY_BYTES_AT_ONCE`] bytes of bodies (one of at most
//!   [`linkerd_admission::SMALL_BODY_BYTES`], in a pool of its own), and one that does not
//!   arrive within 10 s, or within [`linkerd_runtime::tls::body_hold_time`] of its turn (1 s,
//!   and 1 s more per 4 MiB), is answered `400 text/plain`. Decoding waits for room in a budget of
//!   [`linkerd_admission::MAX_DECODED_BYTES`]; the object of a review whose decoding would
//!   take more is not decoded, and a validated request is denied with
//!   `the object is too complex to validate: …`.
//! - a body that does not decode as a review (not JSON, wrong field types) is answered
//!   `400 text/plain` `failed to decode admission review request: <error>`, and a review without
//!   `request`, with an empty `request.uid`, or whose `apiVersion` or `kind` is not that of an
//!   `admission.k8s.io/v1` or `v1beta1` `AdmissionReview`, `400` `invalid admission review
//!   request: …`. (Upstream
//!   answers `200` with a review marked invalid and no uid, which the API server can only treat
//!   as a failed call; a `400` says the same thing plainly, as the sp-validator does.)
//! - a kind this webhook does not validate is refused with reason `InvalidRequest` and the
//!   message `unsupported resource type: <group>.<version>.<kind>`, one without `request.kind`
//!   with `admission request missing 'kind'`.
//! - only `CREATE` and `UPDATE` (or a review that names no operation) are validated. Any other
//!   operation (`DELETE`, `CONNECT`; the chart's registration never sends them) is allowed
//!   without looking at the object, since a deletion must never be blocked by the content of
//!   what is deleted.
//! - a validated request without `object` is denied with `admission request missing 'object`,
//!   an object without `spec` with `admission request missing 'spec'`. An object that does not
//!   decode as JSON although the review does (nested deeper than
//!   [`linkerd_admission::MAX_JSON_NESTING`] levels) is denied, naming the problem: answering
//!   `400` would let `failurePolicy: Ignore` admit it unvalidated.
//! - the spec of a `policy.linkerd.io` kind is decoded strictly: an unknown field or a wrong
//!   type is a denial naming the field (`spec.proxyProtocol: unknown variant ...`). The spec of
//!   a Gateway API kind (HTTPRoute, GRPCRoute, TLSRoute, TCPRoute of
//!   `gateway.networking.k8s.io`) is decoded leniently: a spec that does not decode is allowed
//!   with a warning, since newer Gateway API versions may carry what these types do not know.
//! - then the kind's rules run and the first that fails is the denial message
//!   (status reason `BadRequest`, code 400); see [`admit`].

pub mod annotations;
mod decode;
pub mod identity;
pub mod kinds;
mod policy;
mod routes;

use axum::{
    Router,
    extract::{Request, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use linkerd_k8s_api::{
    authorization_policy::v1alpha1::AuthorizationPolicySpec,
    egress_network::v1alpha1::EgressNetworkSpec,
    gateway_api::{
        experimental::tcproutes::TcpRouteSpec, grpcroutes::GrpcRouteSpec,
        httproutes::HttpRouteSpec as GatewayHttpRouteSpec,
    },
    http_local_rate_limit_policy::v1alpha1::HttpLocalRateLimitPolicySpec,
    http_route::v1beta3::HttpRouteSpec,
    mesh_tls_authentication::v1alpha1::MeshTlsAuthenticationSpec,
    network_authentication::v1alpha1::NetworkAuthenticationSpec,
    server::v1beta3::{Server, ServerSpec},
    server_authorization::v1beta1::ServerAuthorizationSpec,
};

pub use self::kinds::Kind;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use linkerd_admission::{ReviewBody, ReviewMetrics};
use linkerd_index::{
    inbound::InboundIndex,
    model::{
        ServerInfo, ServerOverlap,
        regex::{as_the_index, ran_out_of_time, rules_first, with_time_budget},
    },
};
use linkerd_runtime::tls::{BodyBudget, BodyError, Judged, Judging, ReviewWorkers};
use std::sync::Arc;

pub use linkerd_admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReviewResponse, GroupVersionKind, MAX_BODY_BYTES,
    ReviewError,
};

/// The Servers a new Server is checked against: the controller's inbound index.
pub trait ExistingServers: Send + Sync + 'static {
    /// Another Server of `server`'s namespace that claims the same workload ports
    /// ([`ServerInfo::overlap_with`]), by name, and how; `None` when there is none.
    fn overlapping_server(&self, server: &ServerInfo) -> Option<(String, ServerOverlap)>;
}

impl ExistingServers for InboundIndex {
    fn overlapping_server(&self, server: &ServerInfo) -> Option<(String, ServerOverlap)> {
        InboundIndex::overlapping_server(self, server)
    }
}

/// No Servers: what [`review`] and [`admit`] check a Server against (tests, tools).
pub struct NoServers;

impl ExistingServers for NoServers {
    fn overlapping_server(&self, _: &ServerInfo) -> Option<(String, ServerOverlap)> {
        None
    }
}

/// The name of the webhook's [`ReviewMetrics`]: `policy_admission_reviews_total{result}`.
pub const REVIEWS_METRIC: &str = "policy_admission_reviews";

/// The webhook's routes: `POST /` reviews; everything else is `404`. The router's reviews
/// share one budget of [`linkerd_admission::MAX_BODY_BYTES_AT_ONCE`] bytes of bodies (those of
/// at most [`linkerd_admission::SMALL_BODY_BYTES`] one of their own), a Server is checked
/// against the `existing` ones, and each answer is counted in `metrics`.
pub fn router(existing: impl ExistingServers, metrics: ReviewMetrics) -> Router {
    let budget = linkerd_admission::body_budget();
    let existing: Arc<dyn ExistingServers> = Arc::new(existing);
    Router::new()
        .route("/", post(handle).fallback(not_found))
        .fallback(not_found)
        .with_state((
            budget.clone(),
            linkerd_admission::review_workers(budget),
            existing,
            metrics,
        ))
}

/// Answers a review body (see the module docs for the protocol), with no existing Servers.
pub fn review(body: &[u8]) -> Result<AdmissionReviewResponse, ReviewError> {
    linkerd_admission::review(body, admit)
}

/// [`admit_among`] with no existing Servers.
pub fn admit(request: &AdmissionRequest) -> AdmissionResponse {
    admit_among(request, &NoServers)
}

/// Judges one request: dispatch by `request.kind`, then the rules of spec §6 for the kind
/// (first failing rule wins):
///
/// - AuthorizationPolicy: a Namespace target is the policy's own namespace; at most one
///   MeshTLSAuthentication, one ServiceAccount (not both) and one NetworkAuthentication, and
///   no other authentication kind; the target is a Server, Namespace, HTTPRoute or GRPCRoute.
/// - MeshTLSAuthentication: SPIFFE or DNS-like identities ([`identity`]); identityRefs are
///   ServiceAccounts or Namespaces without a namespace.
/// - Server: exactly one selector (`podSelector` or `externalWorkloadSelector`), a valid
///   `port` and `accessPolicy`; and no other Server of its namespace among `existing` has the
///   same selectors and port (upstream's `identical server spec already exists`: only the
///   older would serve the port, and the new one would have no effect).
/// - NetworkAuthentication, EgressNetwork, ServerAuthorization: networks, and for
///   ServerAuthorization the `unauthenticated`/`unauthenticatedTLS` exclusions.
/// - policy HTTPRoute, Gateway HTTPRoute, GRPCRoute: EgressNetwork parents name a port; with
///   an outbound parent the retry/timeout annotations parse ([`annotations`]); matches and
///   filters convert; policy rule timeouts are ordered; Gateway Service backends have ports.
/// - TLSRoute, TCPRoute: EgressNetwork parents name a port; exactly one rule.
/// - HTTPLocalRateLimitPolicy: targets a Server; rates positive and within the total;
///   overrides name ServiceAccounts.
pub fn admit_among(
    request: &AdmissionRequest,
    existing: &dyn ExistingServers,
) -> AdmissionResponse {
    let gvk = &request.kind;
    let Some(kind) = Kind::of(gvk) else {
        // A review without `request.kind` would otherwise read "unsupported resource type: ..".
        let message = if gvk.kind.is_empty() {
            "admission request missing 'kind'".to_string()
        } else {
            format!(
                "unsupported resource type: {}.{}.{}",
                gvk.group, gvk.version, gvk.kind
            )
        };
        return linkerd_admission::invalid(request, message);
    };
    if !request.creates_or_updates() {
        return linkerd_admission::allow(request);
    }

    if let Some(error) = &request.object_error {
        return deny(request, error.to_string());
    }
    let Some(object) = &request.object else {
        return deny(request, "admission request missing 'object".to_string());
    };
    let spec = match object.get("spec") {
        None | Some(serde_json::Value::Null) => {
            return deny(request, "admission request missing 'spec'".to_string());
        }
        Some(spec) => spec.clone(),
    };
    let ns = request.object_namespace();
    let annotations = request.object_annotations();

    let verdict = if kind.is_gateway_api() {
        let decoded = match kind {
            Kind::GatewayHttpRoute => decode::lenient::<GatewayHttpRouteSpec>(spec)
                .map(|s| parsed_first(|| routes::gateway_http_route(&annotations, &s))),
            Kind::GrpcRoute => decode::lenient::<GrpcRouteSpec>(spec)
                .map(|s| parsed_first(|| routes::grpc_route(&annotations, &s))),
            Kind::TlsRoute => {
                decode::lenient::<routes::TlsRouteSpec>(spec).map(|s| routes::tls_route(&s))
            }
            _ => decode::lenient::<TcpRouteSpec>(spec).map(|s| routes::tcp_route(&s)),
        };
        match decoded {
            Ok(verdict) => verdict,
            Err(error) => {
                tracing::info!(
                    kind = %gvk.kind,
                    %ns,
                    name = %request.object_name(),
                    %error,
                    "admitted a Gateway API resource whose spec does not decode"
                );
                let mut response = linkerd_admission::allow(request);
                response.warnings = Some(vec![format!(
                    "{} admitted without validation: its spec does not decode: {error}",
                    gvk.kind
                )]);
                return response;
            }
        }
    } else {
        match kind {
            Kind::AuthorizationPolicy => decode::strict::<AuthorizationPolicySpec>(spec)
                .and_then(|s| policy::authorization_policy(ns, &s)),
            Kind::MeshTlsAuthentication => decode::strict::<MeshTlsAuthenticationSpec>(spec)
                .and_then(|s| policy::mesh_tls_authentication(&s)),
            Kind::NetworkAuthentication => decode::strict::<NetworkAuthenticationSpec>(spec)
                .and_then(|s| policy::network_authentication(&s)),
            Kind::Server => decode::strict::<ServerSpec>(spec).and_then(|s| {
                policy::server(&s)?;
                no_overlapping_server(request, s, existing)
            }),
            Kind::ServerAuthorization => decode::strict::<ServerAuthorizationSpec>(spec)
                .and_then(|s| policy::server_authorization(&s)),
            Kind::EgressNetwork => {
                decode::strict::<EgressNetworkSpec>(spec).and_then(|s| policy::egress_network(&s))
            }
            Kind::HttpLocalRateLimitPolicy => decode::strict::<HttpLocalRateLimitPolicySpec>(spec)
                .and_then(|s| policy::rate_limit_policy(&s)),
            _ => decode::strict::<HttpRouteSpec>(spec)
                .and_then(|s| parsed_first(|| routes::policy_http_route(&annotations, &s))),
        }
    };
    match verdict {
        Ok(()) => {
            let mut response = linkerd_admission::allow(request);
            if let Some(reason) = skipped_by_index(kind, request) {
                response.warnings = Some(vec![format!(
                    "{} admitted, but the policy controller does not serve it: {reason}; its status may still accept it on its parents, where it conflicts with the routes it would (GEP-1426, as upstream)",
                    gvk.kind
                )]);
            } else if kind == Kind::AuthorizationPolicy && authorizes_everyone(request) {
                response.warnings = Some(vec![
                    "spec.requiredAuthenticationRefs is empty: this AuthorizationPolicy authorizes every client, authenticated or not".into(),
                ]);
            }
            response
        }
        Err(message) => deny(request, message),
    }
}

/// Whether an AuthorizationPolicy requires no authentication: it authorizes every client, as
/// upstream reads it (spec/policy.md §4.5), which is easy to write by mistake.
fn authorizes_everyone(request: &AdmissionRequest) -> bool {
    request
        .object
        .as_ref()
        .and_then(|o| o.pointer("/spec/requiredAuthenticationRefs"))
        .and_then(serde_json::Value::as_array)
        .is_some_and(Vec::is_empty)
}

/// Why the index would skip a Gateway API route this webhook admits (it checks these kinds
/// only as far as upstream's does, spec/policy.md §6): a filter it does not support
/// (`URLRewrite`, `RequestMirror`), or anything else the index refuses. `None` for other
/// kinds, and when the index would serve it.
fn skipped_by_index(kind: Kind, request: &AdmissionRequest) -> Option<String> {
    use linkerd_index::outbound::routes;
    if !kind.is_gateway_api() {
        return None;
    }
    let mut object = request.object.clone()?;
    // A CREATE may name the object by `generateName` alone; its name is not what is checked.
    let metadata = object.get_mut("metadata")?.as_object_mut()?;
    if !metadata
        .get("name")
        .is_some_and(serde_json::Value::is_string)
    {
        metadata.insert("name".into(), "admission-review".into());
    }
    if !metadata
        .get("namespace")
        .is_some_and(serde_json::Value::is_string)
    {
        metadata.insert("namespace".into(), request.object_namespace().into());
    }
    // Regexes checked as the index checks them, not compiled again under the review's budget
    // (tester finding: a route whose second compilation ran out of time was admitted with a
    // warning that it is not served).
    let converted = as_the_index(|| {
        Some(match kind {
            Kind::GatewayHttpRoute => {
                routes::gateway_http_route(&serde_json::from_value(object).ok()?)
            }
            Kind::GrpcRoute => routes::grpc_route(&serde_json::from_value(object).ok()?),
            Kind::TlsRoute => routes::tls_route(&serde_json::from_value(object).ok()?),
            _ => routes::tcp_route(&serde_json::from_value(object).ok()?),
        })
    })?;
    Some(converted.err()?.reason)
}

/// The verdict of `judge`, a route's rules, judged before its regexes are compiled
/// ([`rules_first`]): a rule broken after patterns slow to compile, or a pattern over a bound,
/// is then denied for itself, not as a review that ran out of time, which clients may retry
/// (tester findings).
fn parsed_first(judge: impl Fn() -> Result<(), String>) -> Result<(), String> {
    rules_first(judge, Result::is_err)
}

/// Refuses a Server that claims the same workload ports as another Server of its namespace
/// ([`ServerInfo::overlap_with`]), with upstream's message and which Server, and how.
fn no_overlapping_server(
    request: &AdmissionRequest,
    spec: ServerSpec,
    existing: &dyn ExistingServers,
) -> Result<(), String> {
    let server = Server {
        metadata: ObjectMeta {
            name: Some(request.object_name().to_string()),
            namespace: Some(request.object_namespace().to_string()),
            ..ObjectMeta::default()
        },
        spec,
    };
    // The spec was validated above; a nameless object is for the API server to refuse.
    let Ok(server) = ServerInfo::from_server(&server) else {
        return Ok(());
    };
    match existing.overlapping_server(&server) {
        Some((other, ServerOverlap::Identical)) => Err(format!(
            "identical server spec already exists: Server {other} has the same selector and port"
        )),
        Some((other, ServerOverlap::SelectsAll)) => Err(format!(
            "identical server spec already exists: Server {other} has the same port, and one of the two selects every workload"
        )),
        None => Ok(()),
    }
}

fn deny(request: &AdmissionRequest, message: String) -> AdmissionResponse {
    // A denial for lack of time may be judged again (the cheap lane); the answer sent is logged
    // when it is final (`ReviewMetrics::answered`).
    if !ran_out_of_time() {
        tracing::info!(
            kind = %request.kind.kind,
            ns = %request.object_namespace(),
            name = %request.object_name(),
            %message,
            "denied"
        );
    }
    linkerd_admission::deny(request, message)
}

async fn handle(
    State((budget, workers, existing, metrics)): State<(
        BodyBudget,
        ReviewWorkers,
        Arc<dyn ExistingServers>,
        ReviewMetrics,
    )>,
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
    // Decoding can take many times the body's size: the review waits for room in the decoding
    // budget too, with its judging slot (a review too complex for it has its object denied
    // without being decoded).
    let reviewed = ReviewBody::new(&body);
    // Judged off the runtime: compiling a review's regexes can take seconds.
    let judged = workers
        .run(
            reviewed.cost(),
            reviewed.memory(),
            linkerd_admission::JUDGING_TIME_BUDGET,
            move |judging| match judging {
                Judging::Within(time) => with_time_budget(time, || {
                    ReviewBody::new(&body)
                        .review_within(|request| admit_among(request, &*existing), ran_out_of_time)
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
        Ok(answer) => answer.map_err(|error| {
            tracing::info!(%error, "bad admission review");
            error
        }),
        Err(error) => {
            tracing::error!(%error, "judging an admission review failed");
            metrics.invalid();
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "judging the admission review failed".into(),
            );
        }
    };
    match &answer {
        Ok(answer) => metrics.answered(answer),
        Err(_) => metrics.invalid(),
    }
    match answer.map(|answer| linkerd_admission::to_json(&answer)) {
        Ok(Ok(json)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            json,
        )
            .into_response(),
        Ok(Err(error)) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the admission review response: {error}"),
        ),
        Err(error) => text(StatusCode::BAD_REQUEST, error.to_string()),
    }
}

async fn not_found() -> StatusCode {
    StatusCode::NOT_FOUND
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A review creating the Gateway API HTTPRoute `emojivoto/web` of `rules`, on the Service
    /// `web-svc`, as JSON.
    fn http_route_review(rules: serde_json::Value) -> Vec<u8> {
        let body = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": "gateway.networking.k8s.io", "version": "v1", "kind": "HTTPRoute"},
                "operation": "CREATE",
                "namespace": "emojivoto",
                "object": {
                    "apiVersion": "gateway.networking.k8s.io/v1",
                    "kind": "HTTPRoute",
                    "metadata": {"name": "web", "namespace": "emojivoto"},
                    "spec": {
                        "parentRefs": [{"name": "web-svc", "kind": "Service", "group": "core", "port": 80}],
                        "rules": rules,
                    },
                },
            },
        });
        serde_json::to_vec(&body).unwrap()
    }

    /// Whether the index would skip a Gateway API HTTPRoute that matches `path`, asked within
    /// `budget`.
    fn skipped_within(budget: std::time::Duration, path: serde_json::Value) -> Option<String> {
        let body = http_route_review(serde_json::json!([{"matches": [{"path": path}]}]));
        let mut skipped = None;
        linkerd_admission::review(&body, |request| {
            let kind = Kind::of(&request.kind).unwrap();
            skipped = with_time_budget(budget, || skipped_by_index(kind, request));
            linkerd_admission::allow(request)
        })
        .unwrap();
        skipped
    }

    /// The index's check is made as the index makes it, whatever is left of the judging
    /// budget: a route is not said to be skipped for lack of time (the index has no budget and
    /// serves it), nor for a regex only too large once compiled (the index does not compile
    /// it); what the index refuses is still said.
    #[test]
    fn the_index_check_out_of_time_finds_nothing() {
        let regex = serde_json::json!({"type": "RegularExpression", "value": "/api/v[0-9]+"});
        let long = std::time::Duration::from_secs(60);
        assert_eq!(skipped_within(long, regex.clone()), None);
        assert_eq!(skipped_within(std::time::Duration::ZERO, regex), None);
        let large = serde_json::json!({"type": "RegularExpression", "value": r"/\w{1000}\w{1000}"});
        assert_eq!(skipped_within(long, large), None);
        let invalid = serde_json::json!({"type": "RegularExpression", "value": "/api/("});
        let reason = skipped_within(long, invalid).expect("skipped");
        assert!(reason.contains("unclosed group"), "{reason}");
    }

    /// A route rule broken after patterns slow to compile is denied for itself, not as a
    /// review out of time (tester finding: denied `Timeout` "checked only up to ...", which
    /// clients may retry forever); with nothing broken, the review is cut short.
    #[test]
    fn rules_broken_after_slow_patterns_are_named() {
        let denial = |last: serde_json::Value| {
            let body = http_route_review(serde_json::json!([
                {"matches": [{"path": {"type": "RegularExpression", "value": r"/\w{20}0"}}]},
                {"matches": [last]},
            ]));
            let answer = with_time_budget(std::time::Duration::ZERO, || {
                linkerd_admission::review(&body, admit)
            });
            answer.unwrap().response.unwrap().result.message
        };
        assert_eq!(
            denial(serde_json::json!({"path": {"type": "Exact", "value": "a"}})),
            r#"path "a" must be absolute (start with '/')"#
        );
        assert_eq!(
            denial(
                serde_json::json!({"headers": [{"type": "RegularExpression", "name": "x", "value": "("}]})
            ),
            r#"spec.rules[1].matches[0].headers[0].value: invalid regular expression "(": unclosed group"#
        );
        // Over the case-folding bound, found without compiling (tester finding).
        let folded = format!("(?i){}", r"\p{Greek}".repeat(9));
        assert!(
            denial(serde_json::json!({"path": {"type": "RegularExpression", "value": folded}}))
                .ends_with("case-insensitively, more than the 8 allowed")
        );
        assert!(
            denial(serde_json::json!({"method": "GET"})).starts_with(
                "checked only up to spec.rules[0].matches[0].path.value: not compiled"
            )
        );
    }
}
