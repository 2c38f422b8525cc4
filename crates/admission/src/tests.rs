use super::*;
use serde_json::{Value, json};

const UID: &str = "5d1e0c2a-0000-4000-8000-0000000000a1";

/// Answers `body` with `admit`, as the JSON the API server receives.
fn answer(body: Value, admit: impl FnOnce(&AdmissionRequest) -> AdmissionResponse) -> Value {
    let answer = review(&serde_json::to_vec(&body).unwrap(), admit).unwrap();
    serde_json::from_slice(&to_json(&answer).unwrap()).unwrap()
}

/// A review as the API server sends it (every field kube-core's types require, and more).
fn mk_review(api_version: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": "policy.linkerd.io", "version": "v1beta3", "kind": "Server"},
            "resource": {"group": "policy.linkerd.io", "version": "v1beta3", "resource": "servers"},
            "requestKind": {"group": "policy.linkerd.io", "version": "v1beta3", "kind": "Server"},
            "name": "web",
            "namespace": "emojivoto",
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
            "object": {
                "apiVersion": "policy.linkerd.io/v1beta3",
                "kind": "Server",
                "metadata": {"name": "web", "namespace": "emojivoto", "annotations": {"a": "b"}},
                "spec": {"port": 80},
            },
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    })
}

#[test]
fn answers_in_the_version_asked() {
    for version in ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"] {
        assert_eq!(
            answer(mk_review(version), |r| deny(r, "no")),
            json!({
                "apiVersion": version,
                "kind": "AdmissionReview",
                "response": {
                    "uid": UID,
                    "allowed": false,
                    "status": {
                        "metadata": {},
                        "status": "Failure",
                        "message": "no",
                        "reason": "BadRequest",
                        "code": 400,
                    },
                },
            })
        );
        // Allowed: the uid and nothing else (kube-core's empty `status: {}` is left out).
        assert_eq!(
            answer(mk_review(version), allow),
            json!({
                "apiVersion": version,
                "kind": "AdmissionReview",
                "response": {"uid": UID, "allowed": true},
            })
        );
    }
    // Hand-made, without apiVersion or kind: answered in v1.
    let mut review = mk_review("x");
    review.as_object_mut().unwrap().remove("apiVersion");
    review.as_object_mut().unwrap().remove("kind");
    assert_eq!(answer(review, allow)["apiVersion"], "admission.k8s.io/v1");
}

/// A body that says it is something else than an AdmissionReview of v1 or v1beta1 is not
/// answered as one (its answer would echo a version the sender cannot read).
#[test]
fn other_versions_and_kinds_are_refused() {
    let refused = |body: Value| {
        review(&serde_json::to_vec(&body).unwrap(), allow)
            .expect_err("refused")
            .to_string()
    };
    assert_eq!(
        refused(mk_review("admission.k8s.io/v2")),
        r#"invalid admission review request: apiVersion "admission.k8s.io/v2" is not admission.k8s.io/v1 or admission.k8s.io/v1beta1"#
    );
    assert_eq!(
        refused(mk_review("v1")),
        r#"invalid admission review request: apiVersion "v1" is not admission.k8s.io/v1 or admission.k8s.io/v1beta1"#
    );
    let mut review = mk_review("admission.k8s.io/v1");
    review["kind"] = json!("TokenReview");
    assert_eq!(
        refused(review),
        r#"invalid admission review request: kind "TokenReview" is not AdmissionReview"#
    );
}

#[test]
fn refusals_and_warnings() {
    let response = answer(mk_review("admission.k8s.io/v1"), |r| {
        invalid(r, "unsupported resource type: .v1.ConfigMap")
    })["response"]
        .clone();
    assert_eq!(response["allowed"], false);
    assert_eq!(
        response["status"],
        json!({
            "metadata": {},
            "status": "Failure",
            "message": "unsupported resource type: .v1.ConfigMap",
            "reason": "InvalidRequest",
            "code": 400,
        })
    );

    let response = answer(mk_review("admission.k8s.io/v1"), |r| {
        let mut response = allow(r);
        response.warnings = Some(vec!["spec does not decode".to_string()]);
        response
    })["response"]
        .clone();
    assert_eq!(
        response,
        json!({"uid": UID, "allowed": true, "warnings": ["spec does not decode"]})
    );
}

#[test]
fn the_request_as_read() {
    let mut seen = None;
    answer(mk_review("admission.k8s.io/v1"), |r| {
        seen = Some(r.clone());
        allow(r)
    });
    let request = seen.unwrap();
    assert_eq!(request.uid, UID);
    assert_eq!(
        request.kind,
        GroupVersionKind::gvk("policy.linkerd.io", "v1beta3", "Server")
    );
    assert!(request.creates_or_updates());
    assert_eq!(
        (request.object_namespace(), request.object_name()),
        ("emojivoto", "web")
    );
    assert_eq!(
        request.object_annotations(),
        BTreeMap::from([("a".to_string(), "b".to_string())])
    );
    assert_eq!(request.object.unwrap()["spec"], json!({"port": 80}));
}

#[test]
fn reviews_are_read_leniently() {
    // Only a uid: every other field of kube-core's request is absent.
    let mut seen = None;
    let body = json!({"request": {"uid": UID, "kind": {"kind": "Server"}, "operation": "update"}});
    let response = answer(body, |r| {
        seen = Some(r.clone());
        allow(r)
    });
    assert_eq!(response["response"], json!({"uid": UID, "allowed": true}));
    let request = seen.unwrap();
    assert_eq!(request.kind, GroupVersionKind::gvk("", "", "Server"));
    assert!(request.creates_or_updates(), "a lower-case UPDATE");
    assert_eq!(
        (request.object_namespace(), request.object_name()),
        ("", "")
    );

    // Fields the webhooks do not read never fail a review, whatever their shape; an absent or
    // null kind is empty.
    for extra in [
        json!({"userInfo": 5, "resource": "x", "dryRun": "maybe", "kind": null}),
        json!({"newField": {"a": [1]}, "options": []}),
    ] {
        let mut review = mk_review("admission.k8s.io/v1");
        let request = review["request"].as_object_mut().unwrap();
        request.remove("kind");
        request.extend(extra.as_object().unwrap().clone());
        let mut kind = None;
        answer(review, |r| {
            kind = Some(r.kind.clone());
            allow(r)
        });
        assert_eq!(kind, Some(GroupVersionKind::gvk("", "", "")), "{extra}");
    }

    // The operations whose object is not judged.
    for (operation, judged) in [
        (Some("DELETE"), false),
        (Some("CONNECT"), false),
        (Some("PATCH?"), false),
        (Some("Create"), true),
        (None, true),
    ] {
        let request = AdmissionRequest {
            operation: operation.map(String::from),
            ..Default::default()
        };
        assert_eq!(request.creates_or_updates(), judged, "{operation:?}");
    }

    // The request's namespace and name, when the object has none.
    let request = AdmissionRequest {
        namespace: Some("ns".into()),
        name: Some("n".into()),
        object: Some(json!({"metadata": {"annotations": {"a": "b", "n": 5}}})),
        ..Default::default()
    };
    assert_eq!(
        (request.object_namespace(), request.object_name()),
        ("ns", "n")
    );
    assert_eq!(request.object_annotations().len(), 1);
}

#[test]
fn bodies_that_are_not_reviews() {
    let error = |body: &[u8]| review(body, allow).unwrap_err().to_string();
    assert_eq!(
        error(b"not json"),
        "failed to decode admission review request: expected ident at line 1 column 2"
    );
    assert_eq!(
        error(br#"{"request": "x"}"#),
        "failed to decode admission review request: invalid type: string \"x\", expected struct AdmissionRequest at line 1 column 15"
    );
    assert_eq!(
        error(br#"{"request": {"uid": 5}}"#),
        "failed to decode admission review request: invalid type: integer `5`, expected a string at line 1 column 21"
    );
    assert_eq!(
        error(br#"{"request": {"uid": "u", "kind": "Server"}}"#),
        "failed to decode admission review request: invalid type: string \"Server\", expected struct GroupVersionKind at line 1 column 41"
    );
    // JSON that is no object is named as such, not by the first field serde expected.
    assert_eq!(
        error(b"[[[["),
        "failed to decode admission review request: the body is a JSON array, not an AdmissionReview object"
    );
    // Even one serde would read as a struct without fields.
    assert_eq!(
        error(b"[]"),
        "failed to decode admission review request: the body is a JSON array, not an AdmissionReview object"
    );
    assert_eq!(
        error(b" \"review\""),
        "failed to decode admission review request: the body is a JSON string, not an AdmissionReview object"
    );
    assert_eq!(
        error(b"42"),
        "failed to decode admission review request: the body is a JSON number, not an AdmissionReview object"
    );
    assert_eq!(
        error(b"null"),
        "failed to decode admission review request: the body is a JSON null, not an AdmissionReview object"
    );
    for (body, why) in [
        (
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            "it has no request",
        ),
        (
            json!({"request": {"uid": "", "object": {}}}),
            "its request.uid is empty",
        ),
        (
            json!({"request": {"object": {}}}),
            "its request.uid is empty",
        ),
    ] {
        assert_eq!(
            error(&serde_json::to_vec(&body).unwrap()),
            format!("invalid admission review request: {why}"),
            "{body}"
        );
    }
}

/// A v1 review of a Server whose `object` is `object` (JSON text), with `old_object` as its
/// `oldObject`.
fn review_text(object: &str, old_object: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {{"uid": "{UID}", "kind": {{"group": "policy.linkerd.io", "version": "v1beta3", "kind": "Server"}}, "operation": "CREATE", "name": "web", "namespace": "emojivoto", "object": {object}, "oldObject": {old_object}}}}}"#
    )
    .into_bytes()
}

/// JSON arrays nested `levels` deep around `{}`.
fn nested(levels: usize) -> String {
    format!("{}{{}}{}", "[".repeat(levels - 1), "]".repeat(levels - 1))
}

/// The request `admit` sees for `body`, and the answer's uid.
fn request_seen(body: &[u8]) -> (AdmissionRequest, String) {
    let mut seen = None;
    let answer = review(body, |r| {
        seen = Some(r.clone());
        deny(r, "seen")
    })
    .unwrap();
    (seen.unwrap(), answer.response.unwrap().uid)
}

#[test]
fn objects_nested_too_deep_are_answered() {
    // The object is level 3 of the review: it may nest MAX_JSON_NESTING - 2 levels.
    let deepest = nested(MAX_JSON_NESTING - 2);
    let (request, uid) = request_seen(&review_text(&deepest, "null"));
    assert_eq!(uid, UID);
    assert_eq!(request.object_error, None);
    assert_eq!(
        request.object,
        Some(serde_json::from_str(&deepest).unwrap())
    );

    // One level more: the request is read without its object, which the error describes.
    let body = review_text(&nested(MAX_JSON_NESTING - 1), "null");
    let (request, uid) = request_seen(&body);
    assert_eq!(uid, UID);
    assert_eq!(request.object, None);
    let column = body.iter().position(|&b| b == b'[').unwrap() + MAX_JSON_NESTING - 1;
    let error = ObjectError::TooDeep(format!(
        "recursion limit exceeded at line 1 column {column}"
    ));
    assert_eq!(request.object_error, Some(error.clone()));
    assert_eq!(
        error.to_string(),
        format!(
            "the object is nested too deep: the review nests JSON objects and arrays more than 127 levels deep (recursion limit exceeded at line 1 column {column})"
        )
    );
    // The rest of the request is read as usual.
    assert_eq!(
        request.kind,
        GroupVersionKind::gvk("policy.linkerd.io", "v1beta3", "Server")
    );
    assert!(request.creates_or_updates());
    assert_eq!(
        (request.object_namespace(), request.object_name()),
        ("emojivoto", "web")
    );

    // Far deeper, in objects: the same.
    let deep = format!("{}1{}", r#"{"a":"#.repeat(100_000), "}".repeat(100_000));
    let (request, _) = request_seen(&review_text(&deep, "null"));
    assert!(
        matches!(request.object_error, Some(ObjectError::TooDeep(_))),
        "{:?}",
        request.object_error
    );

    // Deep nesting in a field the webhooks do not read is skipped.
    let (request, _) = request_seen(&review_text("{}", &nested(10_000)));
    assert_eq!(
        (request.object, request.object_error),
        (Some(json!({})), None)
    );
}

#[test]
fn objects_that_do_not_decode_are_answered() {
    // A number no f64 holds: the decoder refuses the object, not the review.
    let body = review_text(r#"{"spec": {"port": 1e400}}"#, "null");
    let (request, uid) = request_seen(&body);
    assert_eq!(uid, UID);
    assert_eq!(request.object, None);
    let number_end = body.windows(5).position(|w| w == b"1e400").unwrap() + 5;
    assert_eq!(
        request.object_error,
        Some(ObjectError::Decode(format!(
            "number out of range at line 1 column {number_end}"
        )))
    );

    // A review that is broken elsewhere too is not a review.
    let mut body = review_text(&nested(200), "null");
    body.extend_from_slice(b"}");
    assert_eq!(
        review(&body, allow).unwrap_err().to_string(),
        format!(
            "failed to decode admission review request: recursion limit exceeded at line 1 column {}",
            body.iter().position(|&b| b == b'[').unwrap() + MAX_JSON_NESTING - 1
        )
    );
    // Without a uid, there is nothing to answer.
    let body = format!(r#"{{"request": {{"object": {}}}}}"#, nested(200));
    assert_eq!(
        review(body.as_bytes(), allow).unwrap_err().to_string(),
        "invalid admission review request: its request.uid is empty"
    );
}

#[test]
fn the_body_limit_message_names_it() {
    assert_eq!(MAX_BODY_BYTES, 10_485_760);
    assert_eq!(body_too_large(), "limit reached while reading: 10485760");
}

/// A review whose shape would take more than `MAX_DECODED_BYTES` to decode has its object
/// denied without decoding it (9 MiB of small objects took a validator to 710 MB): a `400`
/// would let `failurePolicy: Ignore` admit it unvalidated. One of the same size in long
/// strings is read.
#[test]
fn a_review_too_complex_to_decode_is_denied_undecoded() {
    let body = profile_review("CREATE", &small_routes(200_000), None);
    let cost = decode_cost(body.as_bytes());
    assert!(cost > MAX_DECODED_BYTES, "{cost}");
    let reviewed = ReviewBody::new(body.as_bytes());
    assert_eq!((reviewed.cost(), reviewed.memory()), (cost, 0));
    let answer = reviewed
        .review(|request| {
            assert_eq!(request.uid, "u");
            assert_eq!(request.kind.kind, "ServiceProfile");
            assert_eq!(request.object, None);
            let error = request.object_error.clone().expect("an object error");
            assert_eq!(error, ObjectError::TooComplex { cost });
            deny(request, error.to_string())
        })
        .unwrap();
    let response = answer.response.unwrap();
    assert!(!response.allowed);
    assert_eq!(response.uid, "u");
    assert_eq!(
        response.result.message,
        format!(
            "the object is too complex to validate: decoding the review would take about {} MiB, more than the 64 MiB a review may (too many JSON objects and values)",
            cost / (1024 * 1024)
        )
    );

    // As long, in one string: read, and judged.
    let text = "x".repeat(body.len());
    let body = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","object":{{"spec":{{"pad":"{text}"}}}}}}}}"#
    );
    assert!(decode_cost(body.as_bytes()) < MAX_DECODED_BYTES);
    let answer = review(body.as_bytes(), allow).unwrap();
    assert!(answer.response.unwrap().allowed);
    // Braces, commas and colons inside strings (escaped quotes too) are text, not structure.
    let quoted = br#"{"a":"{[,:\"{"}"#;
    assert_eq!(decode_cost(quoted), 3 * quoted.len() + 1536 + 96);
}

/// `{"name":"r","condition":{"method":"GET"}},` repeated: the smallest routes a ServiceProfile
/// holds, 42 bytes each.
fn small_routes(n: usize) -> String {
    r#"{"name":"r","condition":{"method":"GET"}},"#.repeat(n)
}

/// A ServiceProfile review of `operation` whose object has `routes` (and an `oldObject` with
/// `old_routes`).
fn profile_review(operation: &str, routes: &str, old_routes: Option<&str>) -> String {
    let object = |routes: &str| format!(r#"{{"spec":{{"routes":[{routes}{{}}]}}}}"#);
    let old = old_routes
        .map(|old| format!(r#","oldObject":{}"#, object(old)))
        .unwrap_or_default();
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"group":"linkerd.io","version":"v1alpha2","kind":"ServiceProfile"}},"operation":"{operation}","object":{}{old}}}}}"#,
        object(routes)
    )
}

/// The limit is reached at about 18,000 of the smallest routes (what `MAX_DECODED_BYTES`
/// documents), and an `UPDATE` costs what a `CREATE` of its object does beyond the text of
/// `oldObject`, which the decoder skips: otherwise a profile that could be created could not
/// be updated.
#[test]
fn the_decoding_estimate_counts_what_the_decoder_builds() {
    let under = profile_review("CREATE", &small_routes(18_000), None);
    let over = profile_review("CREATE", &small_routes(18_500), None);
    assert!(decode_cost(under.as_bytes()) <= MAX_DECODED_BYTES);
    assert!(decode_cost(over.as_bytes()) > MAX_DECODED_BYTES);
    assert!((750_000..770_000).contains(&under.len()), "{}", under.len());

    let routes = small_routes(10_000);
    let create = profile_review("CREATE", &routes, None);
    let update = profile_review("UPDATE", &routes, Some(&routes));
    let old_text = update.len() - create.len();
    assert_eq!(
        decode_cost(update.as_bytes()),
        decode_cost(create.as_bytes()) + 3 * old_text + 2 * 96,
        "oldObject adds its text, a comma and a colon"
    );
    let answer = review(update.as_bytes(), |request| {
        assert!(request.object.is_some() && request.object_error.is_none());
        allow(request)
    })
    .unwrap();
    assert!(answer.response.unwrap().allowed);

    // Only `request.oldObject` is skipped: the same key anywhere else is counted.
    let nested = format!(
        r#"{{"request":{{"uid":"u","object":{{"oldObject":[{}{{}}]}}}}}}"#,
        small_routes(100)
    );
    let plain = nested.replace("oldObject", "newObject");
    assert_eq!(
        decode_cost(nested.as_bytes()),
        decode_cost(plain.as_bytes())
    );
    assert!(decode_cost(nested.as_bytes()) > 100 * 2 * 1536);
}

/// A refusal quoting a huge value is cut (newcomer finding: a 5 MB `pathRegex` came back whole
/// in the message) in its middle, at character boundaries, keeping the reason at its end and
/// saying how much was left out.
#[test]
fn a_long_refusal_message_is_cut_in_the_middle() {
    let request = AdmissionRequest {
        uid: UID.into(),
        ..AdmissionRequest::default()
    };
    let message = format!(
        "invalid regex \"{}\": more than the 8192 allowed",
        "é".repeat(MAX_MESSAGE_BYTES)
    );
    let sent = deny(&request, message.clone()).result.message;
    assert!(sent.len() < MAX_MESSAGE_BYTES + 40, "{}", sent.len());
    assert!(sent.starts_with("invalid regex \"éé"), "{sent}");
    assert!(sent.ends_with("éé\": more than the 8192 allowed"), "{sent}");
    let (head, rest) = sent.split_once("… (").unwrap();
    let (left_out, tail) = rest.split_once(" bytes left out) …").unwrap();
    assert_eq!(
        head.len() + left_out.parse::<usize>().unwrap() + tail.len(),
        message.len()
    );
    // A short one is sent as it is.
    assert_eq!(deny(&request, "bad port").result.message, "bad port");
}

/// Each result's series is there from the start, so `increase()` sees the first review.
#[test]
fn review_metrics_are_registered_with_every_result_at_zero() {
    let mut registry = Registry::default();
    let metrics = ReviewMetrics::register(&mut registry, "policy_admission_reviews");
    metrics.invalid();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for line in [
        r#"policy_admission_reviews_total{result="allowed"} 0"#,
        r#"policy_admission_reviews_total{result="denied"} 0"#,
        r#"policy_admission_reviews_total{result="unjudged"} 0"#,
        r#"policy_admission_reviews_total{result="invalid"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    assert_eq!(metrics.count_of("invalid"), 1);
    assert_eq!(metrics.count_of("other"), 0);
}

/// What the API server sends is cheap (`CHEAP_REVIEW_COST`): an `UPDATE` of a ServiceProfile
/// of 50 routes with response classes and timeouts, applied by kubectl (its last-applied
/// annotation and `managedFields`), with `oldObject`. One of 1,000 routes is not.
#[test]
fn a_review_the_api_server_sends_is_cheap() {
    let profile = |routes: usize| {
        let routes: Vec<Value> = (0..routes)
            .map(|i| {
                json!({
                    "name": format!("GET /api/v1/things/{{id}}/part{i}"),
                    "condition": {"method": "GET", "pathRegex": format!("/api/v1/things/[^/]*/part{i}")},
                    "responseClasses": [{"condition": {"status": {"min": 500, "max": 599}}, "isFailure": true}],
                    "isRetryable": true,
                    "timeout": "300ms",
                })
            })
            .collect();
        let spec = json!({"routes": routes, "retryBudget": {"retryRatio": 0.2, "minRetriesPerSecond": 10, "ttl": "10s"}});
        json!({
            "apiVersion": "linkerd.io/v1alpha2",
            "kind": "ServiceProfile",
            "metadata": {
                "name": "web-svc.emojivoto.svc.cluster.local",
                "namespace": "emojivoto",
                "uid": "0d3c0e9a-8f4e-4a55-9c1b-0e6f3f2b9d11",
                "resourceVersion": "812345",
                "generation": 3,
                "creationTimestamp": "2026-11-30T10:00:00Z",
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": json!({"apiVersion": "linkerd.io/v1alpha2", "kind": "ServiceProfile", "spec": spec}).to_string(),
                },
                "managedFields": [{
                    "manager": "kubectl-client-side-apply",
                    "operation": "Update",
                    "apiVersion": "linkerd.io/v1alpha2",
                    "time": "2026-11-30T10:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                        "f:spec": {".": {}, "f:retryBudget": {".": {}, "f:minRetriesPerSecond": {}, "f:retryRatio": {}, "f:ttl": {}}, "f:routes": {}},
                    },
                }],
            },
            "spec": spec,
        })
    };
    let review = |routes: usize| {
        let mut review = mk_review("admission.k8s.io/v1");
        review["request"]["operation"] = json!("UPDATE");
        review["request"]["object"] = profile(routes);
        review["request"]["oldObject"] = profile(routes);
        serde_json::to_vec(&review).unwrap()
    };
    let ordinary = decode_cost(&review(50));
    assert!(ordinary <= CHEAP_REVIEW_COST, "{ordinary}");
    assert!((600 * 1024..760 * 1024).contains(&ordinary), "{ordinary}");
    assert!(decode_cost(&review(1_000)) > CHEAP_REVIEW_COST);
    // The slow regexes of the webhooks' tests: 1,000 short routes.
    let mut review = mk_review("admission.k8s.io/v1");
    review["request"]["object"]["spec"]["routes"] = (0..1_000)
        .map(|i| json!({"name": format!("r{i}"), "condition": {"pathRegex": format!("/\\w{{20}}{i}")}}))
        .collect();
    assert!(decode_cost(&serde_json::to_vec(&review).unwrap()) > CHEAP_REVIEW_COST);
}

/// A review no judging slot took in time is denied, with its uid, saying it was not judged and
/// to try again: the API server shows the message to whoever applied the object.
#[test]
fn a_review_not_judged_in_time_is_denied_saying_so() {
    // Its object is not read: one that does not decode is no error.
    let body = serde_json::to_string(&mk_review("admission.k8s.io/v1"))
        .unwrap()
        .replace(r#""port":80"#, r#""port":1e999"#);
    assert!(
        review(body.as_bytes(), |request| {
            assert!(request.object_error.is_some());
            allow(request)
        })
        .is_ok()
    );
    let answer = ReviewBody::new(body.as_bytes())
        .deny_unjudged(std::time::Duration::from_millis(5_012))
        .unwrap();
    let metrics = ReviewMetrics::default();
    metrics.answered(&answer);
    assert_eq!(metrics.count_of("unjudged"), 1);
    assert_eq!(metrics.count_of("denied"), 0);
    let response = answer.response.unwrap();
    assert!(!response.allowed);
    assert_eq!(response.uid, UID);
    // Kubernetes' status for a request not completed in time, which the client should retry.
    assert_eq!(response.result.code, 504);
    assert_eq!(response.result.reason, "Timeout");
    assert_eq!(
        response.result.message,
        "not judged: the webhook was busy judging reviews that are slow to judge for 5.0 s; try again"
    );
    // Judging that went on past its time is not waited for either.
    let answer = ReviewBody::new(body.as_bytes())
        .deny_overran(JUDGING_TIME_BUDGET)
        .unwrap();
    let response = answer.response.unwrap();
    assert!(!response.allowed);
    assert_eq!(response.uid, UID);
    assert_eq!(
        response.result.message,
        "not judged: the object's regular expressions took more than 3.0 s to compile"
    );
    assert_eq!(
        (response.result.reason.as_str(), response.result.code),
        ("Timeout", 504)
    );
}

/// A denial reached when judging ran out of time is marked as not judged whole, and counted
/// apart from denials of objects that break a rule; one reached in time, and an admission, are
/// not marked.
#[test]
fn a_review_judged_out_of_time_is_marked_unjudged() {
    let body = serde_json::to_vec(&mk_review("admission.k8s.io/v1")).unwrap();
    let judge = |ran_out: bool, admit: fn(&AdmissionRequest) -> AdmissionResponse| {
        let judged = ReviewBody::new(&body).review_within(admit, || ran_out);
        assert_eq!(judged.out_of_time, ran_out);
        judged.answer.unwrap()
    };
    let metrics = ReviewMetrics::default();
    let cut = judge(true, |request| {
        deny(request, "checked only up to spec.routes[3]")
    });
    // Logged once final, here (tester finding: denials not judged whole were never logged).
    let (_, log) = logged::logged(|| metrics.answered(&cut));
    assert!(
        log.contains("denied a review not judged whole")
            && log.contains(&format!("uid={UID}"))
            && log.contains("denial=checked only up to spec.routes[3]"),
        "{log}"
    );
    let status = cut.response.unwrap().result;
    assert_eq!((status.reason.as_str(), status.code), ("Timeout", 504));
    assert_eq!(status.message, "checked only up to spec.routes[3]");
    let denied = judge(false, |request| deny(request, "bad port"));
    metrics.answered(&denied);
    let status = denied.response.unwrap().result;
    assert_eq!((status.reason.as_str(), status.code), ("BadRequest", 400));
    let allowed = judge(true, allow);
    metrics.answered(&allowed);
    assert!(allowed.response.unwrap().allowed);
    assert_eq!(
        ["allowed", "denied", "unjudged"].map(|r| metrics.count_of(r)),
        [1, 1, 1]
    );
}

/// Capturing what code logs: the index's test helper, which needs only tracing.
#[path = "../../index/tests/support/logged.rs"]
mod logged;
