//! What route conversion ignores is logged, naming the route and the value: a Gateway API
//! HTTPRoute rule's `timeouts.request` that does not parse leaves the rule without a request
//! timeout (spec/policy.md §5.4), and a negative backendRef weight (which the CRD schema
//! refuses, but an offline state directory may hold) is served as the default weight 1; the
//! operator finds why in the log.

mod support;

use linkerd_index::outbound::routes::{BackendSpec, OutboundRules, gateway_http_route};
use linkerd_k8s_api::gateway_api::httproutes::HttpRoute;
use serde_json::json;
use std::time::Duration;

fn route(request_timeouts: [&str; 2]) -> HttpRoute {
    let rule = |timeout: &str| json!({"timeouts": {"request": timeout}});
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "web-route", "namespace": "shop"},
        "spec": {
            "parentRefs": [{"kind": "Service", "name": "web", "port": 80}],
            "rules": [rule(request_timeouts[0]), rule(request_timeouts[1])],
        },
    }))
    .expect("the route decodes")
}

#[test]
fn a_request_timeout_that_does_not_parse_is_logged_and_ignored() {
    let (converted, log) = support::logged(|| gateway_http_route(&route(["banana", "2s"])));
    let OutboundRules::Http(rules) = converted.expect("the route converts").rules else {
        panic!("an HTTP route")
    };
    let timeouts: Vec<Option<Duration>> = rules.iter().map(|r| r.timeouts.request).collect();
    assert_eq!(timeouts, [None, Some(Duration::from_secs(2))]);
    assert!(
        log.contains("shop/web-route")
            && log.contains(r#"ignoring rules[0].timeouts.request "banana""#),
        "{log}"
    );
    assert!(!log.contains("rules[1]"), "{log}");

    let (_, log) = support::logged(|| gateway_http_route(&route(["1s", "2s"])));
    assert_eq!(log, "");
}

#[test]
fn a_negative_backend_weight_is_logged_and_served_as_one() {
    let route: HttpRoute = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "web-route", "namespace": "shop"},
        "spec": {
            "parentRefs": [{"kind": "Service", "name": "web", "port": 80}],
            "rules": [{"backendRefs": [
                {"name": "web-v1", "port": 80, "weight": -5},
                {"name": "web-v2", "port": 80, "weight": 3},
            ]}],
        },
    }))
    .expect("the route decodes");
    let (converted, log) = support::logged(|| gateway_http_route(&route));
    let OutboundRules::Http(rules) = converted.expect("the route converts").rules else {
        panic!("an HTTP route")
    };
    let weights: Vec<u32> = rules[0]
        .backends
        .iter()
        .map(|b| match b {
            BackendSpec::Service { weight, .. } => *weight,
            other => panic!("a Service backend: {other:?}"),
        })
        .collect();
    assert_eq!(weights, [1, 3]);
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(
        log.contains("route=shop/web-route backend=web-v1")
            && log.contains("backendRef weight -5 is negative"),
        "{log}"
    );
}
