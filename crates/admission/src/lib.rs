//! The `AdmissionReview` envelope of the pod's two validating webhooks, the policy validator
//! (spec/policy.md §6) and the ServiceProfile validator (spec/sp-validator-and-pod.md §b.4):
//! `admission.k8s.io/v1` and `v1beta1`, which share their field names.
//!
//! The answer is kube-core's: [`AdmissionResponse`] (built by [`allow`], [`deny`] and
//! [`invalid`]) in an [`AdmissionReviewResponse`] of the `apiVersion` the review was sent in,
//! encoded by [`to_json`]. The request is read by a lenient adapter, [`AdmissionRequest`],
//! because kube-core's `AdmissionRequest<T>` requires what these webhooks must not:
//!
//! - `resource`, `operation` and `userInfo` on every request, and `apiVersion` and `kind` on the
//!   review. Hand-made reviews (curl, tests) leave them out, and a webhook that reads only
//!   `uid`, `kind`, `operation` and `object` must not fail a review over fields it ignores; a
//!   newer API server's additions are ignored the same way.
//! - an operation from its closed enum: an unknown or lower-case operation would fail the
//!   whole review instead of being allowed as "not validated".
//! - a typed `object` (`T: Resource`, such as `DynamicObject`). The validators decode the raw
//!   object strictly (an unknown field is a denial naming it), and a round trip through
//!   `DynamicObject` would both rewrite it and turn a malformed `metadata` into a failed review
//!   instead of a denial.
//!
//! This crate depends on kube only for these types; it is kept apart from `linkerd-runtime` so
//! that the `mtls-shim` sidecar, which shares the runtime, builds no Kubernetes client.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

use kube::core::{
    DynamicObject, ListMeta, TypeMeta,
    admission::{META_API_VERSION_V1, META_KIND},
};
use serde::Deserialize;
use std::collections::BTreeMap;

pub use kube::core::{
    GroupVersionKind, Status,
    admission::{AdmissionResponse, AdmissionReview},
};

/// The answer to a review: kube-core's [`AdmissionReview`] with `apiVersion`, `kind:
/// AdmissionReview` and `response` set (no `request`).
pub type AdmissionReviewResponse = AdmissionReview<DynamicObject>;

/// `apiVersion` of the answer to a review that has none (hand-made requests; the API server
/// always sets one).
pub const DEFAULT_API_VERSION: &str = META_API_VERSION_V1;

/// Why a body is not a review to answer; the webhooks answer both `400 text/plain` with this
/// text.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Not JSON, or not the shape of a review (`request` not an object, `uid` not a string).
    #[error("failed to decode admission review request: {0}")]
    Decode(#[from] serde_json::Error),
    /// A review without `request`, or with an empty `request.uid`: nothing to answer.
    #[error("invalid admission review request")]
    Invalid,
}

/// An incoming review, `{apiVersion, kind, request}`; every field may be absent.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IncomingReview {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    request: Option<AdmissionRequest>,
}

/// `request` of a review: the fields the webhooks read, each optional (see the crate docs for
/// why this is not kube-core's `AdmissionRequest`). Other fields are ignored.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Echoed in the response; the API server matches the answer to the request by it.
    #[serde(default)]
    pub uid: String,
    /// The type of `object`, which decides the rules applied; empty strings when absent or
    /// partly given (the core group is `""`).
    #[serde(default = "empty_kind", deserialize_with = "lenient_kind")]
    pub kind: GroupVersionKind,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`; see [`Self::creates_or_updates`].
    #[serde(default)]
    pub operation: Option<String>,
    /// The namespace of the object (also in `object.metadata`).
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// The object as it would be stored, as sent; absent for `DELETE`.
    #[serde(default)]
    pub object: Option<serde_json::Value>,
}

/// Reads `request` of a review `body` and answers it with `admit`'s response (built by
/// [`allow`], [`deny`] or [`invalid`], which carry the request's `uid`), in the review's
/// `apiVersion` ([`DEFAULT_API_VERSION`] when it has none).
///
/// Errors: [`ReviewError::Decode`] when the body is not a review, [`ReviewError::Invalid`]
/// when it has no `request` or an empty `request.uid`.
pub fn review(
    body: &[u8],
    admit: impl FnOnce(&AdmissionRequest) -> AdmissionResponse,
) -> Result<AdmissionReviewResponse, ReviewError> {
    let review: IncomingReview = serde_json::from_slice(body)?;
    let request = review
        .request
        .filter(|r| !r.uid.is_empty())
        .ok_or(ReviewError::Invalid)?;
    let mut response = admit(&request);
    response.types = TypeMeta {
        api_version: review
            .api_version
            .unwrap_or_else(|| DEFAULT_API_VERSION.to_string()),
        kind: META_KIND.to_string(),
    };
    Ok(response.into_review())
}

/// The JSON body of an answer.
///
/// kube-core always writes `response.status` (`{}` when the request is allowed); it is left
/// out here, so an allowed answer is `{uid, allowed}` only, as upstream's webhooks answer
/// (spec/sp-validator-and-pod.md §b.4) and as the webhooks' tests check.
pub fn to_json(answer: &AdmissionReviewResponse) -> serde_json::Result<Vec<u8>> {
    let mut json = serde_json::to_value(answer)?;
    if let Some(response) = json.get_mut("response").and_then(|r| r.as_object_mut())
        && response
            .get("status")
            .and_then(|s| s.as_object())
            .is_some_and(|s| s.is_empty())
    {
        response.remove("status");
    }
    serde_json::to_vec(&json)
}

/// Admits `request` (its `uid` echoed, no `status`).
pub fn allow(request: &AdmissionRequest) -> AdmissionResponse {
    // kube-core's response is non-exhaustive: built from its one constructor that needs no
    // kube-core request, then every field that matters is set.
    let mut response = AdmissionResponse::invalid("");
    response.uid = request.uid.clone();
    response.allowed = true;
    response.result = Status::default();
    response
}

/// Refuses `request` because a rule failed: `status` is `{metadata: {}, status: Failure,
/// message, reason: BadRequest, code: 400}`. The API server shows `message` to the client as
/// `admission webhook "<name>" denied the request: <message>`.
pub fn deny(request: &AdmissionRequest, message: impl Into<String>) -> AdmissionResponse {
    refuse(request, "BadRequest", message.into())
}

/// Refuses a request the webhook cannot judge (spec/policy.md §6: "unsupported resource
/// type"): as [`deny`], with reason `InvalidRequest`.
pub fn invalid(request: &AdmissionRequest, message: impl Into<String>) -> AdmissionResponse {
    refuse(request, "InvalidRequest", message.into())
}

fn refuse(request: &AdmissionRequest, reason: &str, message: String) -> AdmissionResponse {
    let mut response = AdmissionResponse::invalid(&message);
    response.uid = request.uid.clone();
    response.result = Status {
        // Upstream's answers carry an empty `metadata: {}`.
        metadata: Some(ListMeta::default()),
        ..Status::failure(&message, reason).with_code(400)
    };
    response
}

// === impl AdmissionRequest ===

impl Default for AdmissionRequest {
    /// A request with nothing but an empty `kind`.
    fn default() -> Self {
        Self {
            uid: String::new(),
            kind: empty_kind(),
            operation: None,
            namespace: None,
            name: None,
            object: None,
        }
    }
}

impl AdmissionRequest {
    /// Whether the object is judged: the operation is `CREATE` or `UPDATE` (in any case), or
    /// the review names none (hand-made). `DELETE` and `CONNECT` are not: a deletion must never
    /// be blocked by the content of what is deleted.
    pub fn creates_or_updates(&self) -> bool {
        self.operation
            .as_deref()
            .is_none_or(|op| op.eq_ignore_ascii_case("CREATE") || op.eq_ignore_ascii_case("UPDATE"))
    }

    /// The object's namespace: `object.metadata.namespace`, else `request.namespace`, else
    /// empty.
    pub fn object_namespace(&self) -> &str {
        self.object
            .as_ref()
            .and_then(|o| o.pointer("/metadata/namespace"))
            .and_then(serde_json::Value::as_str)
            .or(self.namespace.as_deref())
            .unwrap_or_default()
    }

    /// The object's name: `object.metadata.name`, else `request.name`, else empty.
    pub fn object_name(&self) -> &str {
        self.object
            .as_ref()
            .and_then(|o| o.pointer("/metadata/name"))
            .and_then(serde_json::Value::as_str)
            .or(self.name.as_deref())
            .unwrap_or_default()
    }

    /// The object's annotations (`object.metadata.annotations`); values that are not strings
    /// are skipped (the API server never sends any).
    pub fn object_annotations(&self) -> BTreeMap<String, String> {
        self.object
            .as_ref()
            .and_then(|o| o.pointer("/metadata/annotations"))
            .and_then(serde_json::Value::as_object)
            .map(|annotations| {
                annotations
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn empty_kind() -> GroupVersionKind {
    GroupVersionKind::gvk("", "", "")
}

/// `request.kind` with each of `group`, `version` and `kind` optional (kube-core's type
/// requires all three); `null` is an empty kind.
fn lenient_kind<'de, D: serde::Deserializer<'de>>(de: D) -> Result<GroupVersionKind, D::Error> {
    // Named as kube-core's type, which decode errors name ("expected struct GroupVersionKind").
    #[derive(Deserialize)]
    struct GroupVersionKind {
        #[serde(default)]
        group: String,
        #[serde(default)]
        version: String,
        #[serde(default)]
        kind: String,
    }
    Ok(
        Option::<GroupVersionKind>::deserialize(de)?.map_or_else(empty_kind, |k| {
            kube::core::GroupVersionKind::gvk(&k.group, &k.version, &k.kind)
        }),
    )
}

#[cfg(test)]
mod tests;
