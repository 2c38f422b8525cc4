//! The two validating webhooks: a ServiceProfile `AdmissionReview` (spec/sp-validator-and-pod.md
//! §b.4) and a policy `AdmissionReview` (spec/policy.md §6), bytes → the webhook's answer.
//!
//! Input: the request body. Properties:
//! - a body that is not answered says why (the `400` text);
//! - an answer echoes `request.uid` and the review's `apiVersion`, encodes as JSON, and a
//!   refusal carries a message;
//! - an admitted object that the webhook judged (`CREATE`/`UPDATE` of its kinds) and that the
//!   API server lets through to it (its CRD's schema: [`crate::crds`]) decodes as the index
//!   decodes that kind, and applies to the indexes: what `kubectl apply` accepts, the pod
//!   serves.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use linkerd_admission::{AdmissionReviewResponse, ReviewError, to_json};
use serde_json::Value;

use crate::{cluster::Indexes, crds::crd_schemas};

/// See the module docs.
pub fn sp_admission(data: &[u8]) {
    let answer = sp_validator::webhook::review(data);
    let Some(review) = check_answer(data, answer) else {
        return;
    };
    let Some(object) = judged_object(&review) else {
        return;
    };
    let named_sp = |group: &str, kind: &str| {
        group.eq_ignore_ascii_case("linkerd.io") && kind.eq_ignore_ascii_case("ServiceProfile")
    };
    let request_kind = kind_of(review.pointer("/request/kind"));
    let object_kind = object_kind(object);
    let is_sp = match (&request_kind, &object_kind) {
        (Some((group, kind)), _) if !kind.is_empty() => named_sp(group, kind),
        (_, Some((group, kind))) => named_sp(group, kind),
        _ => true,
    };
    // The index takes the objects of its kind as the API server stores them: with their own
    // `apiVersion` and `kind`.
    if is_sp && object_kind.is_some_and(|(g, k)| g == "linkerd.io" && k == "ServiceProfile") {
        applies(
            ("linkerd.io", "ServiceProfile"),
            object,
            "an admitted ServiceProfile",
        );
    }
}

/// See the module docs.
pub fn policy_admission(data: &[u8]) {
    let answer = policy::admission::review(data);
    let Some(review) = check_answer(data, answer) else {
        return;
    };
    let Some(object) = judged_object(&review) else {
        return;
    };
    let Some((group, kind)) = kind_of(review.pointer("/request/kind")) else {
        return;
    };
    if object_kind(object).is_some_and(|(g, k)| g == group && k == kind) {
        applies((&group, &kind), object, "an admitted policy object");
    }
}

/// The review as JSON with the webhook's answer under `response` (beside the `request`
/// sent), when the body was answered; checks the answer's properties.
fn check_answer(
    body: &[u8],
    answer: Result<AdmissionReviewResponse, ReviewError>,
) -> Option<Value> {
    let answer = match answer {
        Ok(answer) => answer,
        Err(error) => {
            assert!(!error.to_string().is_empty(), "an empty 400 text");
            return None;
        }
    };
    let json = match to_json(&answer) {
        Ok(json) => json,
        Err(error) => panic!("the answer does not encode: {error}"),
    };
    let mut encoded: Value = match serde_json::from_slice(&json) {
        Ok(encoded) => encoded,
        Err(error) => panic!("the answer is not JSON: {error}"),
    };
    let response = encoded.get("response").cloned().unwrap_or(Value::Null);
    let allowed = response.get("allowed").and_then(Value::as_bool);
    let message = response.pointer("/status/message").and_then(Value::as_str);
    match allowed {
        Some(true) => {}
        Some(false) => assert!(
            message.is_some_and(|m| !m.is_empty()),
            "a refusal without message: {response}"
        ),
        None => panic!("an answer without `allowed`: {encoded}"),
    }
    // The review as sent, when serde_json reads it as a tree (not when nested too deep).
    let sent: Value = serde_json::from_slice(body).ok()?;
    let uid = sent.pointer("/request/uid").and_then(Value::as_str);
    assert_eq!(
        response.get("uid").and_then(Value::as_str),
        uid,
        "the answer's uid"
    );
    let api_version = sent
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or(linkerd_admission::DEFAULT_API_VERSION);
    assert_eq!(
        encoded.get("apiVersion").and_then(Value::as_str),
        Some(api_version),
        "the answer's apiVersion"
    );
    if let Some(map) = encoded.as_object_mut() {
        map.insert(
            "request".into(),
            sent.get("request").cloned().unwrap_or(Value::Null),
        );
    }
    Some(encoded)
}

/// The object of an allowed `CREATE` or `UPDATE` (or a request naming no operation) that has
/// a name: what the API server would store.
fn judged_object(review: &Value) -> Option<&Value> {
    if review.pointer("/response/allowed") != Some(&Value::Bool(true)) {
        return None;
    }
    let operation = review.pointer("/request/operation");
    let judged = match operation {
        None | Some(Value::Null) => true,
        Some(Value::String(op)) => {
            op.eq_ignore_ascii_case("CREATE") || op.eq_ignore_ascii_case("UPDATE")
        }
        Some(_) => false,
    };
    let object = review.pointer("/request/object")?;
    let named = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    (judged && named).then_some(object)
}

/// `(group, kind)` of a `request.kind` (`{group, version, kind}`).
fn kind_of(kind: Option<&Value>) -> Option<(String, String)> {
    let kind = kind?;
    let field = |name| kind.get(name).and_then(Value::as_str).unwrap_or_default();
    Some((field("group").to_string(), field("kind").to_string()))
}

/// `(group, kind)` of an object, from its `apiVersion` and `kind`.
fn object_kind(object: &Value) -> Option<(String, String)> {
    let api_version = object.get("apiVersion")?.as_str()?;
    let kind = object.get("kind")?.as_str()?;
    let group = api_version
        .rsplit_once('/')
        .map(|(group, _)| group)
        .unwrap_or("");
    Some((group.to_string(), kind.to_string()))
}

/// Asserts that `object`, of the kind `(group, kind)`, decodes as the index reads that kind
/// and applies to the indexes, as the API server would store it ([`stored`]).
fn applies((group, kind): (&str, &str), object: &Value, what: &str) {
    let Some(object) = stored(object) else {
        return;
    };
    let json = object.to_string();
    let indexes = Indexes::new();
    match indexes.apply_json(&(group.to_string(), kind.to_string()), &json) {
        None | Some(Ok(())) => {}
        Some(Err(error)) => panic!("{what} does not decode in the index: {error}: {json}"),
    }
}

/// What the API server stores of an admitted object, `None` when it refuses the object before
/// any validating webhook sees it. It decodes `metadata` as an `ObjectMeta`; with the status
/// subresource it ignores `status` in writes of the object itself; it sets the timestamps; and
/// it checks the result against the CRD of its version ([`crd_schemas`]: the required fields,
/// types and enums). The webhooks judge what is left, as upstream's do.
fn stored(object: &Value) -> Option<Value> {
    let mut stored = object.clone();
    let fields = stored.as_object_mut()?;
    fields.remove("status");
    let metadata = fields.get_mut("metadata")?;
    serde_json::from_value::<ObjectMeta>(metadata.clone()).ok()?;
    let metadata = metadata.as_object_mut()?;
    metadata.remove("deletionTimestamp");
    metadata.insert(
        "creationTimestamp".into(),
        Value::String("2026-05-04T09:00:00Z".into()),
    );
    crd_schemas().check(&stored).ok()?;
    Some(stored)
}
