//! `linkerd.io` ServiceProfile: per-service routes, response classes, retry budget and traffic
//! split, as `Destination.GetProfile` serves them (spec/sp-validator-and-pod.md §a.2).
//!
//! The types mirror upstream's Go types, not the CRD schema where the two disagree (§a.3):
//! a route's `condition.not` is a single object. Every spec struct denies unknown fields, as
//! the sp-validator's strict decode does, so `isRetriable` (a typo) is an error, not ignored.
//! List entries are `Option`s because `null` entries decode (and are then rejected by
//! validation) rather than fail the whole object.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The storage version, read by the destination.
pub mod v1alpha2 {
    use super::*;
    use kube::CustomResource;

    /// `spec` of a ServiceProfile named `<svc>.<ns>.svc.<cluster domain>`. Every field is
    /// optional in `v1alpha2`.
    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "linkerd.io",
        version = "v1alpha2",
        kind = "ServiceProfile",
        namespaced,
        shortname = "sp"
    )]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct ServiceProfileSpec {
        /// HTTP routes; the proxy uses the first that matches.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub routes: Option<Vec<Option<RouteSpec>>>,
        /// How much retrying the routes marked `isRetryable` may add.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub retry_budget: Option<RetryBudget>,
        /// Traffic split: authorities and relative weights.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub dst_overrides: Option<Vec<Option<WeightedDst>>>,
    }
}

/// The older served version: the same schema, with `routes` required.
pub mod v1alpha1 {
    use super::*;
    use kube::CustomResource;

    /// `spec` of a `linkerd.io/v1alpha1` ServiceProfile.
    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "linkerd.io",
        version = "v1alpha1",
        kind = "ServiceProfile",
        namespaced,
        shortname = "sp"
    )]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct ServiceProfileSpec {
        pub routes: Vec<Option<RouteSpec>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub retry_budget: Option<RetryBudget>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub dst_overrides: Option<Vec<Option<WeightedDst>>>,
    }
}

/// One route: a request condition, how its responses are classified, and its policies.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteSpec {
    /// Becomes the proxy's metric label `route`. Must be non-empty.
    #[serde(default)]
    pub name: String,
    /// Which requests the route matches. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<RequestMatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_classes: Option<Vec<Option<ResponseClass>>>,
    /// Whether failed requests may be retried (within the retry budget).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_retryable: bool,
    /// Request timeout, a Go duration (`250ms`, `1m30s`); absent or `""` means none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// A request predicate. Exactly the fields that are set are combined with AND; `all`, `any`
/// and `not` nest.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<Vec<Option<RequestMatch>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any: Option<Vec<Option<RequestMatch>>>,
    /// A single object (upstream's Go type; the CRD schema's array form is a known bug).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not: Option<Box<RequestMatch>>,
    /// A regular expression the whole path must match (the proxy anchors it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_regex: Option<String>,
    /// An HTTP method, any token (`GET`, `PURGE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

/// A response classification: responses matching `condition` are failures when `is_failure`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResponseClass {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<ResponseMatch>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_failure: bool,
}

/// A response predicate.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResponseMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<Vec<Option<ResponseMatch>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any: Option<Vec<Option<ResponseMatch>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not: Option<Box<ResponseMatch>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Range>,
}

/// An inclusive HTTP status range; `0` means the bound is unset.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Range {
    #[serde(default)]
    pub min: u32,
    #[serde(default)]
    pub max: u32,
}

/// A retry budget: retries may add `retry_ratio` of the request rate, plus
/// `min_retries_per_second`, over a window of `ttl` (a Go duration).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryBudget {
    #[serde(default)]
    pub retry_ratio: f32,
    #[serde(default)]
    pub min_retries_per_second: u32,
    #[serde(default)]
    pub ttl: String,
}

/// One destination of a traffic split: `authority` is `host` or `host:port`; `weight` is a
/// Kubernetes quantity (`1`, `500m`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WeightedDst {
    #[serde(default)]
    pub authority: String,
    #[serde(default)]
    pub weight: Quantity,
}

#[cfg(test)]
mod tests {
    use super::v1alpha2::ServiceProfile;

    #[test]
    fn decodes_nested_conditions_and_rejects_unknown_fields() {
        let sp: ServiceProfile = crate::yaml::from_str(
            r#"
apiVersion: linkerd.io/v1alpha2
kind: ServiceProfile
metadata: {name: web.ns.svc.cluster.local, namespace: ns}
spec:
  retryBudget: {retryRatio: 0.25, minRetriesPerSecond: 5, ttl: 15s}
  dstOverrides: [{authority: web-canary, weight: 500m}]
  routes:
  - name: r
    condition:
      all: [{method: POST}, {not: {pathRegex: /x}}]
    responseClasses: [{condition: {status: {min: 500}}, isFailure: true}]
    timeout: 1s
"#,
        )
        .unwrap();
        let routes = sp.spec.routes.unwrap();
        let route = routes[0].as_ref().unwrap();
        let all = route.condition.as_ref().unwrap().all.as_ref().unwrap();
        assert_eq!(all[0].as_ref().unwrap().method.as_deref(), Some("POST"));
        let not = all[1].as_ref().unwrap().not.as_ref().unwrap();
        assert_eq!(not.path_regex.as_deref(), Some("/x"));
        assert_eq!(sp.spec.retry_budget.unwrap().ttl, "15s");
        assert_eq!(
            sp.spec.dst_overrides.unwrap()[0].as_ref().unwrap().weight.0,
            "500m"
        );

        let typo = crate::yaml::from_str::<ServiceProfile>(
            "apiVersion: linkerd.io/v1alpha2\nkind: ServiceProfile\nmetadata: {name: a}\nspec:\n  routes: [{name: r, isRetriable: true}]\n",
        )
        .unwrap_err();
        assert!(typo.to_string().contains("isRetriable"), "{typo}");
    }

    #[test]
    fn null_entries_decode_as_none() {
        let sp: ServiceProfile = crate::yaml::from_str(
            "apiVersion: linkerd.io/v1alpha2\nkind: ServiceProfile\nmetadata: {name: a}\nspec:\n  routes: [null]\n",
        )
        .unwrap();
        assert_eq!(sp.spec.routes, Some(vec![None]));
    }
}
