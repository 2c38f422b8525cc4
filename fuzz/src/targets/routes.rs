//! HTTP and gRPC route matches and their regular expressions: Gateway API / policy HTTPRoute
//! and GRPCRoute matches (spec/policy.md §3.5) and ServiceProfile route conditions
//! (spec/destination.md §D.3).
//!
//! Input: one byte choosing the form (0: an HTTPRoute match, 1: a GRPCRoute match, 2: a
//! ServiceProfile route condition), then its JSON. Properties:
//! - a converted match holds only absolute paths, regular expressions that compile, valid
//!   header names and values, and an upper-case method; a refused one says which value;
//! - a ServiceProfile with that condition that the API server lets through (its CRD's schema:
//!   [`crate::crds`]) and the webhook admits is one the index serves.

use gateway_api::{grpcroutes::GrpcRouteRulesMatches, httproutes::HttpRouteRulesMatches};
use linkerd_index::{
    model::decode_value,
    routes::{HeaderMatch, PathMatch, QueryParamMatch, convert},
};
use linkerd_k8s_api::ServiceProfile;

use crate::crds::crd_schemas;

fn compiles(regex: &str) -> bool {
    regex::Regex::new(regex).is_ok()
}

fn check_headers(what: &str, headers: &[HeaderMatch]) {
    for header in headers {
        let (HeaderMatch::Exact { name, .. } | HeaderMatch::Regex { name, .. }) = header;
        assert!(
            http::HeaderName::from_bytes(name.as_bytes()).is_ok(),
            "{what}: header name {name:?}"
        );
        match header {
            HeaderMatch::Exact { value, .. } => assert!(
                http::HeaderValue::from_str(value).is_ok(),
                "{what}: header value {value:?}"
            ),
            HeaderMatch::Regex { regex, .. } => assert!(compiles(regex), "{what}: {regex:?}"),
        }
    }
}

/// See the module docs.
pub fn route_match(data: &[u8]) {
    let Some((&form, json)) = data.split_first() else {
        return;
    };
    match form % 3 {
        0 => {
            let Ok(m) = serde_json::from_slice::<HttpRouteRulesMatches>(json) else {
                return;
            };
            let what = format!("{m:?}");
            match convert::http_match(&m) {
                Ok(converted) => {
                    match &converted.path {
                        Some(PathMatch::Exact(p) | PathMatch::Prefix(p)) => {
                            assert!(p.starts_with('/'), "{what}: path {p:?}")
                        }
                        Some(PathMatch::Regex(r)) => assert!(compiles(r), "{what}: {r:?}"),
                        None => {}
                    }
                    check_headers(&what, &converted.headers);
                    for q in &converted.query_params {
                        if let QueryParamMatch::Regex { regex, .. } = q {
                            assert!(compiles(regex), "{what}: {regex:?}");
                        }
                    }
                    if let Some(method) = &converted.method {
                        assert!(
                            !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase()),
                            "{what}: method {method:?}"
                        );
                    }
                }
                Err(error) => assert!(!error.to_string().is_empty(), "{what}"),
            }
        }
        1 => {
            let Ok(m) = serde_json::from_slice::<GrpcRouteRulesMatches>(json) else {
                return;
            };
            let what = format!("{m:?}");
            match convert::grpc_match(&m) {
                Ok(converted) => check_headers(&what, &converted.headers),
                Err(error) => assert!(!error.to_string().is_empty(), "{what}"),
            }
        }
        _ => {
            let Ok(condition) = serde_json::from_slice::<serde_json::Value>(json) else {
                return;
            };
            let profile = serde_json::json!({
                "apiVersion": "linkerd.io/v1alpha2",
                "kind": "ServiceProfile",
                "metadata": {"name": "web.shop.svc.cluster.local", "namespace": "shop"},
                "spec": {"routes": [{"name": "route", "condition": condition}]},
            });
            let admitted = sp_validator::validate::validate(Some(&profile));
            let served = decode_value::<ServiceProfile>(&profile);
            if let Err(denial) = &admitted {
                assert!(!denial.to_string().is_empty(), "{profile}");
            }
            // The API server checks the profile against the CRD before calling the webhook.
            let through = crd_schemas().check(&profile).is_ok();
            if through
                && admitted.is_ok()
                && let Err(error) = served
            {
                panic!("the webhook admits a condition the index refuses ({error}): {condition}");
            }
        }
    }
}
