//! `policy.linkerd.io` HTTPRoute: Linkerd's own HTTPRoute, the Gateway API HTTPRoute restricted
//! to the filters the proxy implements (header modifiers and redirects) and with Go-style rule
//! timeouts (spec/policy.md §2.1; inbound §4.6, outbound §5.4, admission §6, status §7.2).
//!
//! Parent refs, matches, header modifier and redirect filters, backend refs, timeouts and parent
//! statuses are the `gateway-api` crate's (standard channel, `v1`) types, under the names below.

use gateway_api::httproutes as gateway;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.parentRefs[]`: a Server (inbound), Service or EgressNetwork (outbound) the route
/// attaches to: `{group?, kind?, namespace?, name, sectionName?, port?}`.
pub type ParentReference = gateway::HttpRouteParentRefs;
/// `spec.rules[].matches[]`: `{path?, headers?, queryParams?, method?}`.
pub type HttpRouteMatch = gateway::HttpRouteRulesMatches;
/// `spec.rules[].backendRefs[]`: `{group?, kind?, name, namespace?, port?, weight?, filters?}`.
pub type HttpBackendRef = gateway::HttpRouteRulesBackendRefs;
/// `spec.rules[].timeouts`: `{request?, backendRequest?}`, Go-style duration strings (spec
/// §3.6), parsed by the index.
pub type HttpRouteTimeouts = gateway::HttpRouteRulesTimeouts;
/// `RequestHeaderModifier` filter body: `{set?, add?, remove?}`.
pub type HttpRequestHeaderFilter = gateway::HttpRouteRulesFiltersRequestHeaderModifier;
/// `ResponseHeaderModifier` filter body: `{set?, add?, remove?}`.
pub type HttpResponseHeaderFilter = gateway::HttpRouteRulesFiltersResponseHeaderModifier;
/// `RequestRedirect` filter body: `{scheme?, hostname?, path?, port?, statusCode?}`.
pub type HttpRequestRedirectFilter = gateway::HttpRouteRulesFiltersRequestRedirect;
/// `status.parents[]`: `{parentRef, controllerName, conditions}`.
pub type RouteParentStatus = gateway::HttpRouteStatusParents;
/// `status.parents[].parentRef`.
pub type ParentStatusReference = gateway::HttpRouteStatusParentsParentRef;

/// The `controllerName` of the parent statuses this controller writes (spec §7.2).
pub const POLICY_CONTROLLER_NAME: &str = "linkerd.io/policy-controller";

/// `spec.rules[]`: requests matching any of `matches` (all requests when absent) get the
/// `filters` and go to `backendRefs` (the parent itself when absent).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<Vec<HttpRouteMatch>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filters: Option<Vec<HttpRouteFilter>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_refs: Option<Vec<HttpBackendRef>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<HttpRouteTimeouts>,
}

/// `spec.rules[].filters[]`, tagged by `type`; the body is in the field named after the type
/// (`{type: RequestRedirect, requestRedirect: {...}}`). Other Gateway API filter types are not
/// part of this CRD: an object carrying one does not decode.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "PascalCase")]
pub enum HttpRouteFilter {
    #[serde(rename_all = "camelCase")]
    RequestHeaderModifier {
        request_header_modifier: HttpRequestHeaderFilter,
    },
    #[serde(rename_all = "camelCase")]
    ResponseHeaderModifier {
        response_header_modifier: HttpResponseHeaderFilter,
    },
    #[serde(rename_all = "camelCase")]
    RequestRedirect {
        request_redirect: HttpRequestRedirectFilter,
    },
}

/// The CRD schema of a filter: one object with the `type` and an optional field per body, as
/// the Gateway API writes it. Derived on the enum, schemars would emit a `oneOf` whose `type`
/// property differs per branch, which is not a structural schema (kube's derive panics on it).
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct HttpRouteFilterSchema {
    #[serde(rename = "type")]
    type_: HttpRouteFilterType,
    #[serde(default)]
    request_header_modifier: Option<HttpRequestHeaderFilter>,
    #[serde(default)]
    response_header_modifier: Option<HttpResponseHeaderFilter>,
    #[serde(default)]
    request_redirect: Option<HttpRequestRedirectFilter>,
}

#[derive(JsonSchema)]
#[allow(dead_code)]
enum HttpRouteFilterType {
    RequestHeaderModifier,
    ResponseHeaderModifier,
    RequestRedirect,
}

/// `status`: one entry per (controller, parent). The inbound index serves a route on a Server
/// only when this controller's entry for that Server has `Accepted=True` (spec §4.6).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct HttpRouteStatus {
    /// Absent in a `status: {}` is read as empty, so such a route still decodes.
    #[serde(default)]
    pub parents: Vec<RouteParentStatus>,
}

// === impl HttpRouteFilter ===

impl JsonSchema for HttpRouteFilter {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "HttpRouteFilter".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        HttpRouteFilterSchema::json_schema(generator)
    }
}

/// The body of every version module: the versions share one schema (the older ones are subsets
/// of it), so each gets the same spec struct, which kube's derive cannot reuse across versions.
// rustfmt re-indents the `#[kube(...)]` holding `$version` on every run.
#[rustfmt::skip]
macro_rules! http_route_version {
    ($version:tt) => {
        use super::*;
        use kube::CustomResource;

        /// `spec` of a policy.linkerd.io HTTPRoute.
        #[derive(
            Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
        )]
        #[kube(
            group = "policy.linkerd.io",
            version = $version,
            kind = "HTTPRoute",
            root = "HttpRoute",
            namespaced,
            status = "HttpRouteStatus"
        )]
        #[serde(rename_all = "camelCase")]
        pub struct HttpRouteSpec {
            /// The resources the route attaches to.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub parent_refs: Option<Vec<ParentReference>>,
            /// Host names (`*.example.com` is a suffix match, spec §3.4); absent matches any.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub hostnames: Option<Vec<String>>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub rules: Option<Vec<HttpRouteRule>>,
        }
    };
}

/// The storage version, read by the policy controller.
pub mod v1beta3 {
    http_route_version!("v1beta3");
}

/// Served; decoded with the same schema as `v1beta3`.
pub mod v1beta2 {
    http_route_version!("v1beta2");
}

/// Served; decoded with the same schema as `v1beta3`.
pub mod v1beta1 {
    http_route_version!("v1beta1");
}

/// Served; decoded with the same schema as `v1beta3`.
pub mod v1alpha1 {
    http_route_version!("v1alpha1");
}

#[cfg(test)]
mod tests {
    use super::{HttpRouteFilter, v1beta3::HttpRoute};
    use gateway_api::httproutes::HttpRouteRulesFiltersRequestRedirectScheme as Scheme;

    #[test]
    fn decodes_filters_backends_and_timeouts() {
        let route: HttpRoute = crate::yaml::from_str(
            r#"
apiVersion: policy.linkerd.io/v1beta3
kind: HTTPRoute
metadata: {name: books, namespace: bookinfo}
spec:
  parentRefs:
  - {group: core, kind: Service, name: books, port: 8080}
  hostnames: ["*.example.com"]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /api}
      headers: [{name: x-canary, value: "1"}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: x-route, value: books}]
        remove: [x-debug]
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        add: [{name: x-served-by, value: linkerd}]
    - type: RequestRedirect
      requestRedirect: {scheme: https, statusCode: 301, path: {type: ReplaceFullPath, replaceFullPath: /v2}}
    backendRefs:
    - {name: books-v2, port: 8080, weight: 90}
    timeouts: {request: 10s, backendRequest: 2.5s}
"#,
        )
        .unwrap();
        let parent = &route.spec.parent_refs.as_ref().unwrap()[0];
        assert_eq!(parent.kind.as_deref(), Some("Service"));
        assert_eq!(parent.port, Some(8080));
        let rule = &route.spec.rules.as_ref().unwrap()[0];
        let path = rule.matches.as_ref().unwrap()[0].path.as_ref().unwrap();
        assert_eq!(path.value.as_deref(), Some("/api"));
        let filters = rule.filters.as_ref().unwrap();
        let HttpRouteFilter::RequestHeaderModifier {
            request_header_modifier,
        } = &filters[0]
        else {
            panic!("{:?}", filters[0]);
        };
        assert_eq!(
            request_header_modifier.set.as_ref().unwrap()[0].value,
            "books"
        );
        assert_eq!(
            request_header_modifier.remove.as_deref(),
            Some(&["x-debug".to_string()][..])
        );
        assert!(matches!(
            filters[1],
            HttpRouteFilter::ResponseHeaderModifier { .. }
        ));
        let HttpRouteFilter::RequestRedirect { request_redirect } = &filters[2] else {
            panic!("{:?}", filters[2]);
        };
        assert_eq!(request_redirect.scheme, Some(Scheme::Https));
        assert_eq!(request_redirect.status_code, Some(301));
        let backend = &rule.backend_refs.as_ref().unwrap()[0];
        assert_eq!(
            (backend.name.as_str(), backend.weight),
            ("books-v2", Some(90))
        );
        let timeouts = rule.timeouts.as_ref().unwrap();
        assert_eq!(timeouts.request.as_deref(), Some("10s"));
        assert_eq!(timeouts.backend_request.as_deref(), Some("2.5s"));
        assert!(route.status.is_none());

        // Round trip: the filter tag and body field names survive serialization.
        let json = serde_json::to_value(&route).unwrap();
        assert_eq!(
            json["spec"]["rules"][0]["filters"][2]["type"],
            "RequestRedirect"
        );
        assert_eq!(
            json["spec"]["rules"][0]["filters"][2]["requestRedirect"]["scheme"],
            "https"
        );
    }

    #[test]
    fn an_unsupported_filter_type_does_not_decode() {
        let error = crate::yaml::from_str::<HttpRoute>(
            "apiVersion: policy.linkerd.io/v1beta3\nkind: HTTPRoute\nmetadata: {name: a}\nspec: {rules: [{filters: [{type: URLRewrite, urlRewrite: {hostname: x}}]}]}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("URLRewrite"), "{error}");
    }

    #[test]
    fn an_empty_status_decodes_without_parents() {
        let route: HttpRoute = crate::yaml::from_str(
            "apiVersion: policy.linkerd.io/v1beta3\nkind: HTTPRoute\nmetadata: {name: a}\nspec: {}\nstatus: {}\n",
        )
        .unwrap();
        assert!(route.status.unwrap().parents.is_empty());
    }
}
