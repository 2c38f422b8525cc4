use super::*;
use serde_json::json;

/// The denial message for a profile named `web.ns.svc.cluster.local` with `spec` (YAML).
fn denial(spec: &str) -> Option<String> {
    let spec: Value = linkerd_k8s_api::yaml::from_str(spec).unwrap();
    let object = json!({
        "apiVersion": "linkerd.io/v1alpha2",
        "kind": "ServiceProfile",
        "metadata": {"name": "web.ns.svc.cluster.local", "namespace": "ns"},
        "spec": spec,
    });
    validate(Some(&object)).err().map(|e| e.to_string())
}

const DECODE: &str =
    "failed to validate ServiceProfile: error unmarshaling JSON: while decoding JSON: json: ";
const SP: &str = "ServiceProfile \"web.ns.svc.cluster.local\" ";

#[test]
fn decode_errors_name_the_field() {
    assert_eq!(
        denial("routes: [{name: r, condition: {method: GET}, isRetriable: true}]").unwrap(),
        format!("{DECODE}unknown field \"isRetriable\" (spec.routes[0].isRetriable)")
    );
    assert_eq!(
        denial("foo: bar").unwrap(),
        format!("{DECODE}unknown field \"foo\" (spec.foo)")
    );
    assert_eq!(
        denial("retryBudget: {retryRatio: 0.2, minRetriesPerSecond: -5, ttl: 10s}").unwrap(),
        format!(
            "{DECODE}cannot decode spec.retryBudget.minRetriesPerSecond: invalid value: integer `-5`, expected u32"
        )
    );
    assert_eq!(
        denial("retryBudget: {retryRatio: 1e39, ttl: 10s}").unwrap(),
        format!(
            "{DECODE}cannot decode spec.retryBudget.retryRatio: number out of range for float32"
        )
    );
    assert_eq!(
        denial("dstOverrides: [{authority: a, weight: 1}, {authority: b, weight: lots}]").unwrap(),
        format!(
            "{DECODE}cannot decode spec.dstOverrides[1].weight: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    );
    // A route-level `not` is one object (the CRD schema's array is a bug, §a.3).
    assert_eq!(
        denial("routes: [{name: r, condition: {not: [{method: GET}]}}]").unwrap(),
        format!(
            "{DECODE}cannot decode spec.routes[0].condition.not: invalid type: sequence, expected an object"
        )
    );
    // Nor is any other object a list of its fields (serde would read `[[...]]` as `all`).
    assert_eq!(
        denial("routes: [{name: r, condition: {any: [[[{method: GET}]]]}}]").unwrap(),
        format!(
            "{DECODE}cannot decode spec.routes[0].condition.any[0]: invalid type: sequence, expected an object"
        )
    );
    assert_eq!(
        denial("retryBudget: [0.2, 10, 10s]").unwrap(),
        format!(
            "{DECODE}cannot decode spec.retryBudget: invalid type: sequence, expected an object"
        )
    );
    // A string where a number or boolean is expected is an error (the reverse is coerced).
    let err = denial("routes: [{name: r, condition: {method: GET}, isRetryable: 'true'}]").unwrap();
    assert!(
        err.starts_with(&format!(
            "{DECODE}cannot decode spec.routes[0].isRetryable: invalid type: string"
        )),
        "{err}"
    );
}

#[test]
fn nulls_are_absent_fields_as_in_go() {
    // A null name is an empty one; a null isRetryable is false.
    assert_eq!(
        denial("routes: [{name: null, condition: {method: GET}}]").unwrap(),
        format!("{SP}has a route with no name")
    );
    assert_eq!(
        denial("routes: [{name: r, condition: {method: GET}, isRetryable: null, timeout: null}]"),
        None
    );
    assert_eq!(
        denial("retryBudget: {retryRatio: null, minRetriesPerSecond: null, ttl: null}").unwrap(),
        format!("{SP}RetryBudget missing TTL field")
    );
    // An unknown field is refused even when null.
    assert_eq!(
        denial("routes: [{name: r, condition: {method: GET, foo: null}}]").unwrap(),
        format!("{DECODE}unknown field \"foo\" (spec.routes[0].condition.foo)")
    );
    assert_eq!(denial("routes: null\nretryBudget: null"), None);
}

#[test]
fn scalars_for_strings_are_their_text() {
    assert_eq!(
        denial("routes: [{name: r, condition: {method: GET}, timeout: 10}]").unwrap(),
        format!("{SP}has a route with an invalid timeout: time: missing unit in duration \"10\"")
    );
    assert_eq!(
        denial("routes: [{name: 5, condition: {method: true}}]"),
        None
    );
    assert_eq!(denial("dstOverrides: [{authority: 7, weight: 0.5}]"), None);
}

#[test]
fn names_are_rfc1123_subdomains() {
    let named = |name: Value| {
        validate(Some(&json!({"metadata": {"name": name}})))
            .err()
            .map(|e| e.to_string())
    };
    assert_eq!(named(json!("web.ns.svc.cluster.local")), None);
    assert_eq!(named(json!("a-1.b")), None);
    for bad in ["^.^", "", "Web.ns", "a..b", "-a", "a.", "a_b"] {
        assert_eq!(
            named(json!(bad)),
            Some(format!(
                "ServiceProfile \"{bad}\" has invalid name: {NAME_NOT_SUBDOMAIN}"
            )),
            "{bad}"
        );
    }
    let long = "a".repeat(254);
    assert_eq!(
        named(json!(long)),
        Some(format!(
            "ServiceProfile \"{long}\" has invalid name: {NAME_TOO_LONG}"
        ))
    );
    // No object, or a null one, is an empty profile.
    assert_eq!(
        validate(None).unwrap_err().to_string(),
        format!("ServiceProfile \"\" has invalid name: {NAME_NOT_SUBDOMAIN}")
    );
    assert_eq!(validate(Some(&Value::Null)), validate(None));
    // A name that is not a string does not decode.
    assert_eq!(
        named(json!(5)).unwrap(),
        format!(
            "{DECODE}cannot decode metadata.name: invalid type: integer `5`, expected a string"
        )
    );
    // Metadata Kubernetes adds, and fields outside spec, are not checked.
    let object = json!({
        "metadata": {"name": "a", "uid": "x", "managedFields": [{"manager": "kubectl"}], "foo": 1},
        "status": {"anything": true},
    });
    assert_eq!(validate(Some(&object)), Ok(()));
}

#[test]
fn path_regexes_must_compile() {
    assert_eq!(
        denial(
            "routes: [{name: r, condition: {all: [{method: GET}, {not: {pathRegex: '/a(b'}}]}}]"
        )
        .unwrap(),
        format!(
            "{SP}has a route \"r\" with an invalid pathRegex \"/a(b\" (spec.routes[0].condition.all[1].not.pathRegex): unclosed group"
        )
    );
    // Upstream's condition check comes first.
    assert_eq!(
        denial("routes: [{name: r, condition: {any: [{pathRegex: '('}, null]}}]").unwrap(),
        format!("{SP}has a route with an invalid condition: null condition \"any\"")
    );
    assert_eq!(
        denial("routes: [{name: r, condition: {pathRegex: '(?i)/health(z|check)?'}}]"),
        None
    ); // Control characters in what the message quotes are shown escaped (newcomer finding: a raw
    // SOH and newline went to the client).
    assert_eq!(
        denial(r#"routes: [{name: "r\u0001", condition: {pathRegex: "\u0001\n(bad"}}]"#).unwrap(),
        format!(
            "{SP}has a route \"r\\u{{1}}\" with an invalid pathRegex \"\\u{{1}}\\n(bad\" (spec.routes[0].condition.pathRegex): unclosed group"
        )
    );
}

/// An invalid `pathRegex` is named by its field, so that one of two routes of the same name,
/// or a pattern nested in `all`/`any`/`not`, can be found (tester finding: neither was
/// located).
#[test]
fn an_invalid_path_regex_is_named_by_its_field() {
    let same = r#"routes: [{name: same, condition: {pathRegex: '/\w+'}}, {name: same, condition: {pathRegex: '/\w+('}}]"#;
    assert_eq!(
        denial(same).unwrap(),
        format!(
            "{SP}has a route \"same\" with an invalid pathRegex \"/\\w+(\" (spec.routes[1].condition.pathRegex): unclosed group"
        )
    );
    let nested =
        "routes: [{name: nested, condition: {all: [{method: GET}, {pathRegex: '[z-a]'}]}}]";
    assert_eq!(
        denial(nested).unwrap(),
        format!(
            "{SP}has a route \"nested\" with an invalid pathRegex \"[z-a]\" (spec.routes[0].condition.all[1].pathRegex): invalid character class range, the start must be <= the end"
        )
    );
    // Positions count every entry: an `any` after `all`, a `not` inside it.
    let deep = "routes: [{name: ok, condition: {method: GET}}, {name: deep, condition: {all: [{method: GET}], any: [{method: PUT}, {method: GET}, {not: {pathRegex: '('}}]}}]";
    assert_eq!(
        denial(deep).unwrap(),
        format!(
            "{SP}has a route \"deep\" with an invalid pathRegex \"(\" (spec.routes[1].condition.any[2].not.pathRegex): unclosed group"
        )
    );
}

/// A review cut short by its regexes' time budget names the route where checking stopped and
/// calls no pattern invalid (tester finding: `... with an invalid pathRegex "/\w{20}597":
/// not compiled: ...` for a valid pattern).
#[test]
fn regexes_out_of_time_are_not_called_invalid() {
    let spec = "routes: [{name: first, condition: {method: GET}}, {name: slow, condition: {pathRegex: '/\\w{20}597'}}]";
    let denied =
        linkerd_index::model::regex::with_time_budget(std::time::Duration::ZERO, || denial(spec));
    assert_eq!(
        denied.unwrap(),
        format!(
            "{SP}was checked only up to route \"slow\" (spec.routes[1]): not compiled: the object's regular expressions took more than 0 s to compile"
        )
    );
    // Without the budget, the same profile is admitted.
    assert_eq!(denial(spec), None);
}

/// A rule broken after patterns slow to compile is denied for itself, not as a review out of
/// time (tester finding: 200 slow routes and then a route with no condition, or an invalid
/// timeout, were denied `Timeout` "checked only up to route r65", which clients may retry
/// forever, where upstream names the broken rule); so is an invalid pattern after them.
#[test]
fn rules_broken_after_slow_patterns_are_named() {
    let slow: String = (0..3)
        .map(|i| format!("{{name: r{i}, condition: {{pathRegex: '/\\w{{20}}{i}'}}}}, "))
        .collect();
    let out_of_time = |last: &str| {
        let spec = format!("routes: [{slow}{last}]");
        linkerd_index::model::regex::with_time_budget(std::time::Duration::ZERO, || denial(&spec))
            .unwrap()
    };
    assert_eq!(
        out_of_time("{name: last}"),
        format!("{SP}has a route with no condition")
    );
    assert!(
        out_of_time("{name: last, condition: {method: GET}, timeout: banana}")
            .starts_with(&format!("{SP}has a route with an invalid timeout")),
    );
    assert_eq!(
        out_of_time("{name: last, condition: {pathRegex: '/a('}}"),
        format!(
            "{SP}has a route \"last\" with an invalid pathRegex \"/a(\" (spec.routes[3].condition.pathRegex): unclosed group"
        )
    );
    // Over the case-folding bound, found without compiling (tester finding).
    assert!(
        out_of_time(&format!(
            "{{name: last, condition: {{pathRegex: '(?i){}'}}}}",
            r"\p{Greek}".repeat(9)
        ))
        .ends_with("case-insensitively, more than the 8 allowed")
    );
    // Nothing broken: cut short where compiling stopped.
    assert!(
        out_of_time("{name: last, condition: {method: GET}}")
            .contains("was checked only up to route \"r0\" (spec.routes[0])")
    );
}

#[test]
fn negative_durations_are_valid() {
    assert_eq!(
        denial(
            "retryBudget: {retryRatio: 0, ttl: -5s}\nroutes: [{name: r, condition: {method: GET}, timeout: -1s}]"
        ),
        None
    );
    assert_eq!(
        denial("retryBudget: {retryRatio: 0.2, ttl: 1d}").unwrap(),
        format!("{SP}RetryBudget: time: unknown unit \"d\" in duration \"1d\"")
    );
}

#[test]
fn null_dst_overrides_are_refused() {
    assert_eq!(
        denial("dstOverrides: [{authority: a, weight: 1}, null]").unwrap(),
        format!("{SP}has a null dstOverride")
    );
}
