use super::*;

macro_rules! fixture {
    ($file:literal) => {
        include_str!(concat!("../../../../../tests/fixtures/profiles/", $file))
    };
}

const EMOJIVOTO: &str = include_str!("../../../../../tests/fixtures/emojivoto/cluster.yaml");

fn mk_sp(yaml: &str) -> ServiceProfile {
    serde_saphyr::from_str(yaml).expect("fixture decodes")
}

fn convert(yaml: &str) -> ProfileInfo {
    ProfileInfo::from_service_profile(&mk_sp(yaml)).expect("profile is valid")
}

fn reason(yaml: &str) -> String {
    let err = ProfileInfo::from_service_profile(&mk_sp(yaml)).expect_err("profile is invalid");
    assert_eq!(err.kind, "ServiceProfile");
    err.reason
}

/// The ServiceProfiles of a multi-document `kubectl get -o yaml` snapshot, by name.
fn cluster_profiles(yaml: &str) -> Vec<ProfileInfo> {
    serde_saphyr::from_multiple::<serde_json::Value>(yaml)
        .expect("documents decode")
        .into_iter()
        .filter(|value| value.get("kind").and_then(|k| k.as_str()) == Some("ServiceProfile"))
        .map(|value| {
            let sp: ServiceProfile = serde_json::from_value(value).expect("profile decodes");
            ProfileInfo::from_service_profile(&sp).expect("profile is valid")
        })
        .collect()
}

fn mk_route(name: &str, condition: RequestMatch) -> Route {
    Route {
        name: name.to_string(),
        condition,
        response_classes: vec![],
        is_retryable: false,
        timeout: None,
    }
}

fn method(m: &str) -> RequestMatch {
    RequestMatch::Method(m.to_string())
}

fn path(p: &str) -> RequestMatch {
    RequestMatch::Path(p.to_string())
}

fn get(p: &str) -> RequestMatch {
    RequestMatch::All(vec![method("GET"), path(p)])
}

fn post(p: &str) -> RequestMatch {
    RequestMatch::All(vec![method("POST"), path(p)])
}

fn status(min: u32, max: u32) -> ResponseMatch {
    ResponseMatch::Status { min, max }
}

fn failure(condition: ResponseMatch, is_failure: bool) -> ResponseClass {
    ResponseClass {
        condition,
        is_failure,
    }
}

fn ms(millis: u64) -> Option<Duration> {
    Some(Duration::from_millis(millis))
}

#[test]
fn valid_01_minimal() {
    assert_eq!(
        convert(fixture!("valid-01-minimal.yaml")),
        ProfileInfo {
            namespace: "booksapp".into(),
            name: "webapp.booksapp.svc.cluster.local".into(),
            routes: vec![mk_route("GET /", get("/"))],
            retry_budget: None,
            dst_overrides: vec![],
        }
    );
}

#[test]
fn valid_02_regex_paths() {
    let profile = convert(fixture!("valid-02-regex-paths.yaml"));
    assert_eq!(
        profile.routes,
        vec![
            mk_route("GET /books.json", get(r"/books\.json")),
            mk_route("GET /books/{id}.json", get(r"/books/[0-9]+\.json")),
            mk_route(
                "PUT|DELETE /books/{id}.json",
                RequestMatch::All(vec![
                    path(r"/books/[0-9]+\.json"),
                    RequestMatch::Any(vec![method("PUT"), method("DELETE")]),
                ])
            ),
            mk_route("health", path("(?i)/health(z|check)?")),
            mk_route("anchored version", get("^/v[12]/version$")),
            mk_route("everything else under /books", path("/books(/.*)?")),
        ]
    );
    assert_eq!(profile.retry_budget, None);
}

#[test]
fn valid_03_boolean_conditions() {
    let profile = convert(fixture!("valid-03-boolean-conditions.yaml"));
    assert_eq!(
        profile.routes,
        vec![
            mk_route(
                "write authors",
                RequestMatch::All(vec![
                    method("POST"),
                    RequestMatch::Any(vec![path(r"/authors\.json"), path("/authors/new")]),
                ])
            ),
            mk_route(
                "admin (non-GET)",
                RequestMatch::All(vec![
                    path("/admin/.*"),
                    RequestMatch::Not(Box::new(method("GET"))),
                ])
            ),
            mk_route(
                "read anything else",
                RequestMatch::Any(vec![method("GET"), method("HEAD")])
            ),
            mk_route(
                "not-a-probe",
                RequestMatch::Not(Box::new(path("/(ping|ready|live)")))
            ),
        ]
    );
}

#[test]
fn valid_04_response_classes() {
    let profile = convert(fixture!("valid-04-response-classes.yaml"));
    assert_eq!(
        profile.routes,
        vec![
            Route {
                response_classes: vec![
                    failure(status(500, 599), true),
                    failure(
                        ResponseMatch::All(vec![
                            status(400, 499),
                            ResponseMatch::Not(Box::new(status(404, 404))),
                        ]),
                        true
                    ),
                ],
                ..mk_route("GET /books.json", get(r"/books\.json"))
            },
            Route {
                response_classes: vec![
                    failure(
                        ResponseMatch::Any(vec![status(502, 504), status(429, 429)]),
                        true
                    ),
                    failure(status(200, 299), false),
                ],
                ..mk_route("POST /books.json", post(r"/books\.json"))
            },
        ]
    );
}

#[test]
fn valid_05_retries_timeouts() {
    let profile = convert(fixture!("valid-05-retries-timeouts.yaml"));
    assert_eq!(
        profile.retry_budget,
        Some(RetryBudget {
            retry_ratio: 0.5,
            min_retries_per_second: 3,
            ttl: Some(Duration::from_secs(60)),
        })
    );
    assert_eq!(
        profile.routes,
        vec![
            Route {
                is_retryable: true,
                timeout: ms(1500),
                ..mk_route("GET /authors.json", get(r"/authors\.json"))
            },
            Route {
                timeout: ms(25),
                ..mk_route("POST /authors.json", post(r"/authors\.json"))
            },
            Route {
                is_retryable: true,
                timeout: Some(Duration::from_secs(90)),
                ..mk_route("GET /export", get("/export"))
            },
            Route {
                timeout: Some(Duration::from_secs(7200)),
                ..mk_route("GET /archive", get("/archive/.+"))
            },
        ]
    );
}

#[test]
fn valid_06_dst_overrides() {
    let profile = convert(fixture!("valid-06-dst-overrides.yaml"));
    assert_eq!(
        profile.dst_overrides,
        vec![
            WeightedDst {
                authority: "webapp.booksapp.svc.cluster.local:7000".into(),
                weight: 9000,
            },
            WeightedDst {
                authority: "webapp-canary.booksapp.svc.cluster.local".into(),
                weight: 1000,
            },
        ]
    );
    assert_eq!(profile.routes, vec![mk_route("GET /", get("/"))]);
}

/// An invalid `pathRegex` is named by its field, as the sp-validator names it: route names
/// need not be unique, and a pattern may be nested (tester finding on the sp-validator's
/// message, which this reason shared).
#[test]
fn an_invalid_path_regex_is_named_by_its_field() {
    let sp = |routes: &str| {
        format!(
            "apiVersion: linkerd.io/v1alpha2\nkind: ServiceProfile\n\
             metadata: {{name: web.ns.svc.cluster.local, namespace: ns}}\n\
             spec: {{routes: {routes}}}\n"
        )
    };
    assert_eq!(
        reason(&sp(
            r#"[{name: same, condition: {pathRegex: '/\w+'}}, {name: same, condition: {pathRegex: '/\w+('}}]"#
        )),
        r#"route "same": invalid pathRegex "/\w+(" (spec.routes[1].condition.pathRegex): unclosed group"#
    );
    assert_eq!(
        reason(&sp(
            "[{name: ok, condition: {method: GET}}, {name: deep, condition: {all: [{method: GET}], any: [{method: PUT}, {not: {pathRegex: '('}}]}}]"
        )),
        r#"route "deep": invalid pathRegex "(" (spec.routes[1].condition.any[1].not.pathRegex): unclosed group"#
    );
}

/// The index checks a `pathRegex`'s syntax and size as written but does not compile it: a
/// pattern only too large once compiled is served (the proxy drops a route it cannot compile,
/// spec/sp-validator-and-pod.md §a.5), so that thousands of such patterns cost the index
/// microseconds each, not milliseconds.
#[test]
fn a_path_regex_is_checked_without_compiling_it() {
    let sp = |pattern: &str| {
        format!(
            "apiVersion: linkerd.io/v1alpha2\nkind: ServiceProfile\n\
             metadata: {{name: web.ns.svc.cluster.local, namespace: ns}}\n\
             spec: {{routes: [{{name: big, condition: {{pathRegex: '{pattern}'}}}}]}}\n"
        )
    };
    let large_compiled = r"/\w{1000}\w{1000}";
    assert!(crate::model::regex::compile_regex(large_compiled).is_err());
    let profile = ProfileInfo::from_service_profile(&mk_sp(&sp(large_compiled)))
        .expect("a valid pattern is served");
    assert_eq!(
        profile.routes[0].condition,
        RequestMatch::Path(large_compiled.to_string())
    );
    let long = format!("/{}", "a".repeat(8 * 1024));
    assert_eq!(
        reason(&sp(&long)),
        format!(
            r#"route "big": invalid pathRegex "{}..." (8193 bytes) (spec.routes[0].condition.pathRegex): the pattern is 8193 bytes long, more than the 8192 allowed"#,
            &long[..256]
        )
    );
}

#[test]
fn invalid_fixtures_name_the_problem() {
    assert_eq!(
        reason(fixture!("invalid-01-bad-regex.yaml")),
        r#"route "GET /books/{id}.json": invalid pathRegex "/books/([0-9]+\.json" (spec.routes[0].condition.pathRegex): unclosed group"#
    );
    assert_eq!(
        reason(fixture!("invalid-02-status-min-gt-max.yaml")),
        r#"route "POST /books": responseClasses[0]: Range maximum cannot be smaller than minimum"#
    );
    assert_eq!(
        reason(fixture!("invalid-04-missing-condition.yaml")),
        r#"route "DELETE /authors/{id}.json": no condition"#
    );
    assert_eq!(
        reason(fixture!("invalid-05-negative-retry-ratio.yaml")),
        "RetryBudget RetryRatio must be non-negative: -0.500000"
    );
    assert_eq!(
        reason(fixture!("invalid-06-malformed-timeout.yaml")),
        r#"route "GET /": invalid timeout: time: missing unit in duration "250""#
    );

    let err =
        ProfileInfo::from_service_profile(&mk_sp(fixture!("invalid-06-malformed-timeout.yaml")))
            .expect_err("invalid");
    assert_eq!(
        (err.namespace.as_str(), err.name.as_str()),
        ("booksapp", "webapp.booksapp.svc.cluster.local")
    );
}

#[test]
fn invalid_03_fails_at_strict_decode() {
    let err = serde_saphyr::from_str::<ServiceProfile>(fixture!("invalid-03-unknown-field.yaml"))
        .expect_err("unknown field");
    assert!(
        err.to_string().contains("unknown field `isRetriable`"),
        "{err}"
    );
}

#[test]
fn emojivoto_profiles() {
    let profiles = cluster_profiles(EMOJIVOTO);
    let names: Vec<_> = profiles.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "emoji-svc.emojivoto.svc.cluster.local",
            "voting-svc.emojivoto.svc.cluster.local",
            "web-svc.emojivoto.svc.cluster.local",
        ]
    );

    // Fact 8: emoji-svc.
    let emoji = &profiles[0];
    assert_eq!(emoji.namespace, "emojivoto");
    assert_eq!(
        emoji.routes,
        vec![
            Route {
                is_retryable: true,
                ..mk_route("ListAll", post(r"/emojivoto\.v1\.EmojiService/ListAll"))
            },
            Route {
                timeout: ms(300),
                ..mk_route(
                    "FindByShortcode",
                    post(r"/emojivoto\.v1\.EmojiService/FindByShortcode")
                )
            },
        ]
    );
    assert_eq!(emoji.retry_budget, None);

    // Fact 8: voting-svc, no budget (the destination sends the default).
    let voting = &profiles[1];
    let rpc = |name: &str| post(&format!(r"/emojivoto\.v1\.VotingService/{name}"));
    assert_eq!(
        voting.routes,
        vec![
            Route {
                timeout: ms(250),
                ..mk_route("VoteDoughnut", rpc("VoteDoughnut"))
            },
            mk_route("VotePoop", rpc("VotePoop")),
            mk_route("VoteJoy", rpc("VoteJoy")),
            mk_route("VoteSunglasses", rpc("VoteSunglasses")),
            mk_route("Vote (other emoji)", rpc("Vote[A-Za-z0-9]+")),
            Route {
                is_retryable: true,
                ..mk_route("Results", rpc("Results"))
            },
        ]
    );
    assert_eq!(voting.retry_budget, None);
    assert_eq!(voting.dst_overrides, vec![]);

    // Fact 7: web-svc.
    let web = &profiles[2];
    assert_eq!(
        web.retry_budget,
        Some(RetryBudget {
            retry_ratio: 0.25,
            min_retries_per_second: 5,
            ttl: Some(Duration::from_secs(15)),
        })
    );
    assert_eq!(
        web.routes,
        vec![
            Route {
                is_retryable: true,
                ..mk_route("GET /api/list", get("/api/list"))
            },
            Route {
                response_classes: vec![failure(status(500, 599), true)],
                timeout: ms(500),
                ..mk_route("GET /api/vote", get("/api/vote"))
            },
            Route {
                is_retryable: true,
                timeout: ms(1000),
                ..mk_route("GET /api/leaderboard", get("/api/leaderboard"))
            },
            mk_route("GET /js", get("/js")),
            mk_route("GET /", get("/")),
        ]
    );
}

/// A profile whose spec is the given YAML.
fn spec(spec_yaml: &str) -> ServiceProfile {
    let indented: String = spec_yaml.lines().map(|l| format!("  {l}\n")).collect();
    mk_sp(&format!(
        "apiVersion: linkerd.io/v1alpha2\nkind: ServiceProfile\nmetadata: {{name: a.ns.svc.cluster.local, namespace: ns}}\nspec:\n{indented}"
    ))
}

fn spec_reason(spec_yaml: &str) -> String {
    ProfileInfo::from_service_profile(&spec(spec_yaml))
        .expect_err("profile is invalid")
        .reason
}

fn spec_ok(spec_yaml: &str) -> ProfileInfo {
    ProfileInfo::from_service_profile(&spec(spec_yaml)).expect("profile is valid")
}

#[test]
fn structural_errors() {
    let cases = [
        ("routes: [null]", "routes[0] is null"),
        (
            "routes: [{condition: {method: GET}}]",
            "routes[0] has no name",
        ),
        (
            "routes: [{name: r, condition: null}]",
            r#"route "r": no condition"#,
        ),
        (
            "routes: [{name: r, condition: {method: null}}]",
            r#"route "r": A request match must have a field set"#,
        ),
        (
            "routes: [{name: r, condition: {method: '', pathRegex: ''}}]",
            r#"route "r": A request match must have a field set"#,
        ),
        (
            "routes: [{name: r, condition: {not: {}}}]",
            r#"route "r": A request match must have a field set"#,
        ),
        (
            "routes: [{name: r, condition: {all: [null]}}]",
            r#"route "r": null condition "all""#,
        ),
        (
            "routes: [{name: r, condition: {any: [{method: GET}, null]}}]",
            r#"route "r": null condition "any""#,
        ),
        (
            "routes: [{name: r, condition: {method: GET}, responseClasses: [null]}]",
            r#"route "r": responseClasses[0] is null"#,
        ),
        (
            "routes: [{name: r, condition: {method: GET}, responseClasses: [{isFailure: true}]}]",
            r#"route "r": responseClasses[0] has no condition"#,
        ),
        (
            "routes: [{name: r, condition: {method: GET}, responseClasses: [{condition: {}}]}]",
            r#"route "r": responseClasses[0]: A response match must have a field set"#,
        ),
        (
            "routes: [{name: r, condition: {method: GET}, responseClasses: [{condition: {any: [null]}}]}]",
            r#"route "r": responseClasses[0]: null condition "any""#,
        ),
        (
            "routes: [{name: r, condition: {method: GET}, responseClasses: [{condition: {status: {min: 500, max: 600}}}]}]",
            r#"route "r": responseClasses[0]: Range maximum must be between 100 and 599, inclusive"#,
        ),
        (
            "routes: [{name: r, condition: {method: GET}, responseClasses: [{condition: {not: {status: {min: 1}}}}]}]",
            r#"route "r": responseClasses[0]: Range minimum must be between 100 and 599, inclusive"#,
        ),
        (
            "routes: [{name: r, condition: {method: GET}, timeout: one-second}]",
            r#"route "r": invalid timeout: time: invalid duration "one-second""#,
        ),
        (
            "retryBudget: {retryRatio: 0.2, minRetriesPerSecond: 5}",
            "RetryBudget missing TTL field",
        ),
        (
            "retryBudget: {retryRatio: 0.2, minRetriesPerSecond: 5, ttl: foo}",
            r#"RetryBudget: time: invalid duration "foo""#,
        ),
        (
            "retryBudget: {retryRatio: .nan, minRetriesPerSecond: 5, ttl: 1s}",
            "RetryBudget RetryRatio must be a finite number: NaN",
        ),
        ("dstOverrides: [null]", "dstOverrides[0] is null"),
        (
            "dstOverrides: [{authority: a, weight: 1x}]",
            r#"dstOverrides[0] (authority "a"): invalid weight "1x": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"#,
        ),
    ];
    for (yaml, want) in cases {
        assert_eq!(spec_reason(yaml), want, "{yaml}");
    }

    let nameless = mk_sp(
        "apiVersion: linkerd.io/v1alpha2\nkind: ServiceProfile\nmetadata: {namespace: ns}\nspec: {}\n",
    );
    let err = ProfileInfo::from_service_profile(&nameless).expect_err("no name");
    assert_eq!(err.reason, "metadata.name is missing");
}

#[test]
fn conversion_details() {
    // Field order all, any, method, not, pathRegex; methods upper-cased; an empty `all`
    // counts as set.
    let p = spec_ok(
        "routes:\n- name: r\n  condition: {pathRegex: /x, not: {method: put}, method: purge, any: [{method: get}], all: []}",
    );
    assert_eq!(
        p.routes[0].condition,
        RequestMatch::All(vec![
            RequestMatch::All(vec![]),
            RequestMatch::Any(vec![method("GET")]),
            method("PURGE"),
            RequestMatch::Not(Box::new(method("PUT"))),
            path("/x"),
        ])
    );

    // Response order all, any, status, not; one-sided ranges are valid.
    let p = spec_ok(
        "routes:\n- name: r\n  condition: {method: GET}\n  responseClasses:\n  - condition: {not: {status: {max: 404}}, status: {min: 500}, any: [], all: []}",
    );
    assert_eq!(
        p.routes[0].response_classes,
        vec![failure(
            ResponseMatch::All(vec![
                ResponseMatch::All(vec![]),
                ResponseMatch::Any(vec![]),
                status(500, 0),
                ResponseMatch::Not(Box::new(status(0, 404))),
            ]),
            false
        )]
    );

    // Zero and empty durations are none; a zero TTL too.
    let p = spec_ok(
        "retryBudget: {retryRatio: 0, minRetriesPerSecond: 0, ttl: 0s}\nroutes:\n- {name: a, condition: {method: GET}, timeout: '0'}\n- {name: b, condition: {method: GET}, timeout: ''}",
    );
    assert_eq!(p.routes[0].timeout, None);
    assert_eq!(p.routes[1].timeout, None);
    assert_eq!(
        p.retry_budget,
        Some(RetryBudget {
            retry_ratio: 0.0,
            min_retries_per_second: 0,
            ttl: None,
        })
    );

    // Negative ones are none too, not errors: the sp-validator admits them, as upstream's does
    // (found by the sp_admission fuzz target, whose admitted profile the index skipped).
    let p = spec_ok(
        "retryBudget: {retryRatio: 0.2, minRetriesPerSecond: 3, ttl: -5s}\nroutes:\n- {name: a, condition: {method: GET}, timeout: -50ms}\n- {name: b, condition: {method: GET}, timeout: 250ms}",
    );
    assert_eq!(p.routes[0].timeout, None);
    assert_eq!(p.routes[1].timeout, ms(250));
    assert_eq!(
        p.retry_budget,
        Some(RetryBudget {
            retry_ratio: 0.2,
            min_retries_per_second: 3,
            ttl: None,
        })
    );

    // An absent weight is Go's zero quantity; an integer one decodes like a string.
    let p = spec_ok("dstOverrides: [{authority: a}, {authority: b, weight: 1}]");
    assert_eq!(
        p.dst_overrides,
        vec![
            WeightedDst {
                authority: "a".into(),
                weight: 0,
            },
            WeightedDst {
                authority: "b".into(),
                weight: 10_000,
            },
        ]
    );
}

#[test]
fn go_durations() {
    let ok = [
        ("0", Duration::ZERO),
        ("-0", Duration::ZERO),
        ("+0", Duration::ZERO),
        ("0s", Duration::ZERO),
        ("-0s", Duration::ZERO),
        ("1ns", Duration::from_nanos(1)),
        ("1us", Duration::from_micros(1)),
        ("1µs", Duration::from_micros(1)),
        ("1μs", Duration::from_micros(1)),
        ("25ms", Duration::from_millis(25)),
        ("1.5s", Duration::from_millis(1500)),
        (".5s", Duration::from_millis(500)),
        ("5.s", Duration::from_secs(5)),
        ("+10s", Duration::from_secs(10)),
        ("1m", Duration::from_secs(60)),
        ("1m30s", Duration::from_secs(90)),
        ("1.5h", Duration::from_secs(5400)),
        ("2h", Duration::from_secs(7200)),
        ("1h1m1s1ms1us1ns", Duration::new(3661, 1_001_001)),
        ("0.3333333333333333333h", Duration::from_secs(1200)),
        ("1.00000000000000000000001s", Duration::from_secs(1)),
        (
            "9223372036854775807ns",
            Duration::from_nanos(i64::MAX as u64),
        ),
        (
            "2562047h47m16.854775807s",
            Duration::from_nanos(i64::MAX as u64),
        ),
    ];
    for (input, want) in ok {
        assert_eq!(parse_go_duration(input), Ok(want), "{input}");
    }

    let errors = [
        ("", r#"time: invalid duration """#),
        ("-", r#"time: invalid duration "-""#),
        ("s", r#"time: invalid duration "s""#),
        (".s", r#"time: invalid duration ".s""#),
        ("x", r#"time: invalid duration "x""#),
        ("250", r#"time: missing unit in duration "250""#),
        ("1s5", r#"time: missing unit in duration "1s5""#),
        ("00", r#"time: missing unit in duration "00""#),
        ("1d", r#"time: unknown unit "d" in duration "1d""#),
        ("1 s", r#"time: unknown unit " s" in duration "1 s""#),
        (
            "1é",
            r#"time: unknown unit "\xc3\xa9" in duration "1\xc3\xa9""#,
        ),
        ("1\"", r#"time: unknown unit "\"" in duration "1\"""#),
        (
            "9223372036854775808ns",
            r#"time: invalid duration "9223372036854775808ns""#,
        ),
        ("2562048h", r#"time: invalid duration "2562048h""#),
        (
            "2000000h2000000h",
            r#"time: invalid duration "2000000h2000000h""#,
        ),
        ("-1s", r#"time: negative duration "-1s""#),
    ];
    for (input, want) in errors {
        let got = parse_go_duration(input).expect_err(input);
        assert_eq!(got.to_string(), want, "{input}");
    }
}

#[test]
fn quantities() {
    let ok = [
        ("1", 10_000),
        ("500m", 5_000),
        ("900m", 9_000),
        ("100m", 1_000),
        ("100", 1_000_000),
        ("1k", 10_000_000),
        ("0.5", 5_000),
        (".5", 5_000),
        ("5.", 50_000),
        ("+1", 10_000),
        (" 1 ", 10_000),
        ("0", 0),
        ("000", 0),
        ("0.0001", 10),
        ("1n", 10),
        ("1u", 10),
        ("1500u", 20),
        ("1e3", 10_000_000),
        ("1E3", 10_000_000),
        ("1e+3", 10_000_000),
        ("5e-1", 5_000),
        ("1e-100", 10),
        ("1Ki", 10_240_000),
        ("0.5Ki", 5_120_000),
        ("1m", 10),
        ("429496.729", u32::MAX - 5),
        ("429496.7291", u32::MAX),
        ("1M", u32::MAX),
        ("1E", u32::MAX),
        ("1Ei", u32::MAX),
        ("1e1000", u32::MAX),
        ("123456789012345678901234567890", u32::MAX),
        ("0.000000000000000000000000000000000000000000000000001", 10),
        ("1.0000000000000000000000000000001", 10_010),
        ("1.0000000000000000000000000000000", 10_000),
        ("-1", 0),
    ];
    for (input, want) in ok {
        assert_eq!(quantity_decimillis(input), Ok(want), "{input}");
    }

    let errors = [
        ("", QuantityError::Empty),
        ("abc", QuantityError::Format),
        (".", QuantityError::Format),
        ("1.2.3", QuantityError::Format),
        ("1x", QuantityError::Format),
        ("1e3k", QuantityError::Format),
        ("1K", QuantityError::Suffix),
        ("1e", QuantityError::Suffix),
        ("1mi", QuantityError::Suffix),
    ];
    for (input, want) in errors {
        assert_eq!(quantity_decimillis(input), Err(want), "{input}");
    }
}
