//! The `AdmissionReview` envelope (`admission.k8s.io/v1` and `v1beta1`, which share their field
//! names), as the API server sends it and as a validating webhook answers it
//! (spec/sp-validator-and-pod.md §b.4). Both webhooks of the pod speak it: the policy validator
//! (spec/policy.md §6) and the ServiceProfile validator.
//!
//! The envelope is decoded leniently: fields the webhooks do not use are ignored, so a newer API
//! server's additions never fail a review.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `apiVersion` of a review with none (hand-made requests; the API server always sets one).
pub const DEFAULT_API_VERSION: &str = "admission.k8s.io/v1";

/// An incoming review: `{apiVersion, kind, request}`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReview {
    /// Echoed in the answer (`admission.k8s.io/v1` or `admission.k8s.io/v1beta1`).
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub request: Option<AdmissionRequest>,
}

/// `request` of a review: the fields the webhook reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Echoed in the response; the API server matches the answer to the request by it.
    #[serde(default)]
    pub uid: String,
    /// The type of `object`, which decides the rules applied.
    #[serde(default)]
    pub kind: GroupVersionKind,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    #[serde(default)]
    pub operation: Option<String>,
    /// The namespace of the object (also in `object.metadata`).
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// The object as it would be stored; absent for `DELETE`.
    #[serde(default)]
    pub object: Option<serde_json::Value>,
}

/// `request.kind`: `{group, version, kind}` (the core group is `""`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

/// The answer: `{apiVersion, kind: AdmissionReview, response}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReviewResponse {
    pub api_version: String,
    pub kind: &'static str,
    pub response: AdmissionResponse,
}

/// `response` of a review: `{uid, allowed, status?, warnings?}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    pub uid: String,
    pub allowed: bool,
    /// Why a request is refused: the API server shows `status.message` to the client as
    /// `admission webhook "<name>" denied the request: <message>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// Shown to the client by kubectl (`Warning: ...`), even when the request is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<Vec<String>>,
}

/// A `meta/v1` Status of a refusal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    pub status: String,
    pub message: String,
    /// `BadRequest` for a denial by a rule, `InvalidRequest` for a request the webhook cannot
    /// judge (an unsupported resource type).
    pub reason: String,
    pub code: u16,
}

// === impl AdmissionResponse ===

impl AdmissionResponse {
    /// Admits the request `uid`.
    pub fn allow(uid: &str) -> Self {
        Self {
            uid: uid.to_string(),
            allowed: true,
            status: None,
            warnings: None,
        }
    }

    /// Refuses the request `uid` because a rule failed; `message` names the rule.
    pub fn deny(uid: &str, message: impl Into<String>) -> Self {
        Self::refuse(uid, "BadRequest", message.into())
    }

    /// Refuses a request the webhook cannot judge (spec §6: "unsupported resource type").
    pub fn invalid(uid: &str, message: impl Into<String>) -> Self {
        Self::refuse(uid, "InvalidRequest", message.into())
    }

    /// Adds a warning for the client.
    pub fn with_warning(mut self, warning: impl Into<String>) -> Self {
        self.warnings
            .get_or_insert_with(Vec::new)
            .push(warning.into());
        self
    }

    /// The refusal message, if refused.
    pub fn message(&self) -> Option<&str> {
        self.status.as_ref().map(|s| s.message.as_str())
    }

    fn refuse(uid: &str, reason: &str, message: String) -> Self {
        Self {
            uid: uid.to_string(),
            allowed: false,
            status: Some(Status {
                metadata: BTreeMap::new(),
                status: "Failure".to_string(),
                message,
                reason: reason.to_string(),
                code: 400,
            }),
            warnings: None,
        }
    }
}

// === impl AdmissionRequest ===

impl AdmissionRequest {
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
