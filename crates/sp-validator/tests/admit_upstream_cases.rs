//! Upstream's `TestValidate` cases (spec/sp-validator-and-pod.md §a.8), rewritten, through the
//! webhook over HTTPS: each fragment is allowed or denied with exactly upstream's message (for
//! decode errors: upstream's prefix, then the field named our way).

mod support;

use support::*;

const SP: &str = r#"ServiceProfile "name.ns.svc.cluster.local" "#;
const DECODE: &str =
    "failed to validate ServiceProfile: error unmarshaling JSON: while decoding JSON: json: ";

/// A ServiceProfile named `name` in `ns` with `spec` (YAML, indented under `spec:`).
fn mk_profile(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: linkerd.io/v1alpha2\nkind: ServiceProfile\nmetadata:\n  name: {name}\n  namespace: ns\nspec:\n{spec}"
    )
}

#[tokio::test]
async fn upstream_validate_cases() {
    let webhook = mk_webhook().await;
    let name = "name.ns.svc.cluster.local";
    // (#, name, spec, None = allowed / Some(message) = denied)
    let cases: Vec<(u32, &str, &str, Option<String>)> = vec![
        (
            1,
            name,
            "  routes:\n  - name: route1\n    condition:\n      method: GET\n      pathRegex: /route-1\n",
            None,
        ),
        (
            2,
            name,
            r#"  retryBudget:
    minRetriesPerSecond: 5
    retryRatio: 0.2
    ttl: 10ms
  routes:
  - name: route1
    condition:
      method: GET
      pathRegex: /route-1
      any:
      - all:
        - method: POST
        - pathRegex: /authors/\d+
      - all:
        - not:
            method: DELETE
        - pathRegex: /info.txt
    responseClasses:
    - condition:
        status:
          min: 500
          max: 599
        all:
        - status:
            min: 500
            max: 599
        - not:
            status:
              min: 503
"#,
            None,
        ),
        (
            3,
            "^.^",
            "  routes:\n  - name: route1\n    condition: {method: GET}\n",
            Some(format!(
                "ServiceProfile \"^.^\" has invalid name: {}",
                sp_validator::validate::NAME_NOT_SUBDOMAIN
            )),
        ),
        (
            4,
            name,
            "  foo: bar\n  routes:\n  - name: route1\n    condition: {method: GET}\n",
            Some(format!("{DECODE}unknown field \"foo\" (spec.foo)")),
        ),
        (
            5,
            name,
            "  routes:\n  - name: route1\n    foo: bar\n    condition: {method: GET}\n",
            Some(format!(
                "{DECODE}unknown field \"foo\" (spec.routes[0].foo)"
            )),
        ),
        (
            6,
            name,
            "  routes:\n  - name: route1\n    condition: {foo: bar, method: GET}\n",
            Some(format!(
                "{DECODE}unknown field \"foo\" (spec.routes[0].condition.foo)"
            )),
        ),
        (
            7,
            name,
            "  routes:\n  - name: route1\n",
            Some(format!("{SP}has a route with no condition")),
        ),
        (
            8,
            name,
            "  routes:\n  - condition: {method: GET}\n",
            Some(format!("{SP}has a route with no name")),
        ),
        (
            9,
            name,
            "  routes:\n  - name: route1\n    condition:\n      foo: bar\n      not: {method: GET}\n",
            Some(format!(
                "{DECODE}unknown field \"foo\" (spec.routes[0].condition.foo)"
            )),
        ),
        (
            10,
            name,
            "  routes:\n  - name: route1\n    condition:\n",
            Some(format!("{SP}has a route with no condition")),
        ),
        (
            11,
            name,
            "  routes:\n  - name: route1\n    condition:\n      method:\n",
            Some(format!(
                "{SP}has a route with an invalid condition: A request match must have a field set"
            )),
        ),
        (
            12,
            name,
            "  routes:\n  - name: route1\n    condition: {method: GET}\n    responseClasses:\n    - condition:\n",
            Some(format!("{SP}has a response class with no condition")),
        ),
        (
            13,
            name,
            "  routes:\n  - name: route1\n    condition: {method: GET}\n    responseClasses:\n    - condition:\n        status: {min: 500, max: 599}\n        all:\n        - status:\n",
            Some(format!(
                "{SP}has a response class with an invalid condition: A response match must have a field set"
            )),
        ),
        (
            14,
            name,
            "  routes:\n  - name: route1\n    condition: {method: GET}\n    responseClasses:\n    - condition:\n        status: {min: 500, max: 600}\n",
            Some(format!(
                "{SP}has a response class with an invalid condition: Range maximum must be between 100 and 599, inclusive"
            )),
        ),
        (
            15,
            name,
            "  routes:\n  - name: route1\n    condition: {method: GET}\n    responseClasses:\n    - condition:\n        not:\n          status: {min: 300, max: 200}\n",
            Some(format!(
                "{SP}has a response class with an invalid condition: Range maximum cannot be smaller than minimum"
            )),
        ),
        (
            16,
            name,
            "  routes:\n  - name: route1\n    condition: {method: GET}\n    responseClasses:\n    - condition:\n        not:\n          status: {min: 1}\n",
            Some(format!(
                "{SP}has a response class with an invalid condition: Range minimum must be between 100 and 599, inclusive"
            )),
        ),
        (
            17,
            name,
            "  routes:\n  - name: route1\n    condition: {method: GET}\n    responseClasses:\n    - condition:\n        not:\n          status: {min: false}\n",
            Some(format!(
                "{DECODE}cannot decode spec.routes[0].responseClasses[0].condition.not.status.min: invalid type: boolean `false`, expected u32"
            )),
        ),
        (
            18,
            name,
            "  retryBudget:\n    minRetriesPerSecond: 5\n    retryRatio: 0.2\n",
            Some(format!("{SP}RetryBudget missing TTL field")),
        ),
        (
            19,
            name,
            "  retryBudget:\n    minRetriesPerSecond: 5\n    retryRatio: 0.2\n    ttl: foo\n",
            Some(format!("{SP}RetryBudget: time: invalid duration \"foo\"")),
        ),
        (
            20,
            name,
            "  retryBudget:\n    minRetriesPerSecond: 5\n    retryRatio: -0.2\n    ttl: 10s\n",
            Some(format!(
                "{SP}RetryBudget RetryRatio must be non-negative: -0.200000"
            )),
        ),
        (
            21,
            name,
            "  retryBudget:\n    minRetriesPerSecond: -5\n    retryRatio: 0.2\n    ttl: 10s\n",
            Some(format!(
                "{DECODE}cannot decode spec.retryBudget.minRetriesPerSecond: invalid value: integer `-5`, expected u32"
            )),
        ),
        (
            22,
            name,
            "  routes:\n  - null\n",
            Some(format!("{SP}has a null route")),
        ),
        (
            23,
            name,
            "  routes:\n  - name: route1\n    condition:\n      all: [null]\n",
            Some(format!(
                "{SP}has a route with an invalid condition: null condition \"all\""
            )),
        ),
        (
            24,
            name,
            "  routes:\n  - name: route1\n    condition:\n      any: [null]\n",
            Some(format!(
                "{SP}has a route with an invalid condition: null condition \"any\""
            )),
        ),
        (
            25,
            name,
            "  routes:\n  - name: route1\n    condition: {method: GET}\n    responseClasses: [null]\n",
            Some(format!("{SP}has a null response class")),
        ),
        (
            26,
            name,
            "  routes:\n  - name: route1\n    condition: {method: GET}\n    responseClasses:\n    - condition:\n        all: [null]\n",
            Some(format!(
                "{SP}has a response class with an invalid condition: null condition \"all\""
            )),
        ),
        (
            27,
            name,
            "  routes:\n  - name: route1\n    condition: {method: GET}\n    responseClasses:\n    - condition:\n        any: [null]\n",
            Some(format!(
                "{SP}has a response class with an invalid condition: null condition \"any\""
            )),
        ),
        (
            28,
            name,
            "  routes:\n  - name: route1\n    condition:\n      pathRegex: /route-1,\n    timeout: 1ns\n",
            None,
        ),
        (
            29,
            name,
            "  routes:\n  - name: route1\n    condition: {method: GET}\n    timeout: one-second\n",
            Some(format!(
                "{SP}has a route with an invalid timeout: time: invalid duration \"one-second\""
            )),
        ),
    ];
    assert_eq!(cases.len(), 29);
    for (number, name, spec, expected) in cases {
        let what = format!("case #{number}");
        let response = webhook.admit(&mk_profile(name, spec)).await;
        match expected {
            None => assert_allowed(&response, &what),
            Some(message) => assert_denied(&response, &message, &what),
        }
    }
}

/// What upstream does not check (§a.5) is allowed.
#[tokio::test]
async fn unchecked_fields_are_allowed() {
    let webhook = mk_webhook().await;
    let specs = [
        // Any method spelling; duplicate route names; isRetryable without a budget.
        "  routes:\n  - {name: r, condition: {method: purge}, isRetryable: true}\n  - {name: r, condition: {method: GET}}\n",
        // Budget bounds the proxy later refuses.
        "  retryBudget: {retryRatio: 5000, minRetriesPerSecond: 0, ttl: 10ms}\n",
        "  retryBudget: {retryRatio: 0.2, ttl: -5s}\n",
        // dstOverrides: odd authorities, negative and zero weights, missing fields.
        "  dstOverrides:\n  - {authority: 'not a host', weight: -1}\n  - {authority: b, weight: 0}\n  - {authority: c}\n  - {weight: 1}\n",
        // An empty `all` is a field set; one-sided and empty status ranges.
        "  routes:\n  - name: r\n    condition: {all: []}\n    responseClasses:\n    - condition: {status: {min: 503}}\n    - condition: {status: {}}\n",
        // No spec at all.
        "",
    ];
    for spec in specs {
        let response = webhook.admit(&mk_profile("web.ns", spec)).await;
        assert_allowed(&response, spec);
    }
}
