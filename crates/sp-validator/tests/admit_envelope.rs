//! The admission protocol over HTTPS (spec/sp-validator-and-pod.md §b.3 to §b.5): review
//! versions, bodies that are not reviews, kinds and operations that are not judged, TLS 1.3,
//! and the webhook's metrics.

mod support;

use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use support::*;

fn mk_profile(spec: Value) -> Value {
    json!({
        "apiVersion": "linkerd.io/v1alpha2",
        "kind": "ServiceProfile",
        "metadata": {"name": "web.ns.svc.cluster.local", "namespace": "ns"},
        "spec": spec,
    })
}

fn invalid_profile() -> Value {
    mk_profile(json!({"routes": [{"name": "r"}]}))
}

const NO_CONDITION: &str =
    r#"ServiceProfile "web.ns.svc.cluster.local" has a route with no condition"#;

#[tokio::test]
async fn answers_in_the_review_version() {
    let webhook = mk_webhook().await;
    for version in ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"] {
        let answer = webhook
            .review(&mk_review(version, "CREATE", Some(invalid_profile())))
            .await;
        // The whole answer, as the API server reads it.
        assert_eq!(
            answer,
            json!({
                "apiVersion": version,
                "kind": "AdmissionReview",
                "response": {
                    "uid": UID,
                    "allowed": false,
                    "status": {
                        "metadata": {},
                        "status": "Failure",
                        "message": NO_CONDITION,
                        "reason": "BadRequest",
                        "code": 400,
                    },
                },
            })
        );
        let answer = webhook
            .review(&mk_review(
                version,
                "UPDATE",
                Some(mk_profile(
                    json!({"routes": [{"name": "r", "condition": {"method": "GET"}}]}),
                )),
            ))
            .await;
        assert_eq!(
            answer,
            json!({
                "apiVersion": version,
                "kind": "AdmissionReview",
                "response": {"uid": UID, "allowed": true},
            })
        );
    }

    // A review without apiVersion (hand-made) is answered in v1.
    let mut review = mk_review("x", "CREATE", Some(invalid_profile()));
    review.as_object_mut().unwrap().remove("apiVersion");
    let answer = webhook.review(&review).await;
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["response"]["status"]["message"], NO_CONDITION);
}

#[tokio::test]
async fn every_path_and_method_reviews() {
    let webhook = mk_webhook().await;
    let body = serde_json::to_vec(&mk_review(
        "admission.k8s.io/v1",
        "CREATE",
        Some(invalid_profile()),
    ))
    .unwrap();
    for (method, path) in [("POST", "/"), ("POST", "/validate"), ("PUT", "/x/y")] {
        let reply = webhook.send(method, path, &body).await;
        assert_eq!(reply.status, 200, "{method} {path}");
        let answer: Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(answer["response"]["status"]["message"], NO_CONDITION);
    }
}

#[tokio::test]
async fn bodies_that_are_not_reviews() {
    let webhook = mk_webhook().await;

    // Empty: 200 with an empty body, as upstream (the API server applies failurePolicy).
    let reply = webhook.send("POST", "/", b"").await;
    assert_eq!((reply.status, reply.body.as_str()), (200, ""));

    // Not JSON, or not the shape of a review: 400 naming the decode error.
    for (body, error) in [
        (&b"not json"[..], "expected ident at line 1 column 2"),
        (
            br#"{"request": "x"}"#,
            "invalid type: string \"x\", expected struct AdmissionRequest at line 1 column 15",
        ),
        (
            br#"{"request": {"uid": 5}}"#,
            "invalid type: integer `5`, expected a string at line 1 column 21",
        ),
    ] {
        let reply = webhook.send("POST", "/", body).await;
        assert_eq!(reply.status, 400);
        assert_eq!(reply.content_type.as_deref(), Some("text/plain"));
        assert_eq!(
            reply.body,
            format!("failed to decode admission review request: {error}")
        );
    }

    // A review without a request or a uid: 400.
    for (body, why) in [
        (
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            "it has no request",
        ),
        (
            json!({"apiVersion": "admission.k8s.io/v1", "request": {"uid": "", "object": invalid_profile()}}),
            "its request.uid is empty",
        ),
        (
            json!({"request": {"object": invalid_profile()}}),
            "its request.uid is empty",
        ),
    ] {
        let reply = webhook
            .send("POST", "/", &serde_json::to_vec(&body).unwrap())
            .await;
        assert_eq!(reply.status, 400, "{body}");
        assert_eq!(
            reply.body,
            format!("invalid admission review request: {why}")
        );
    }

    // Over 10 MiB: 413 with upstream's text.
    let big = vec![b' '; sp_validator::webhook::MAX_BODY_BYTES + 1];
    let reply = webhook.send("POST", "/", &big).await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.body, "limit reached while reading: 10485760");
}

#[tokio::test]
async fn other_kinds_and_operations_are_allowed() {
    let webhook = mk_webhook().await;
    let configmap = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "ns"},
        "data": {"a": "b"},
    });

    // A ConfigMap, by request.kind.
    let mut review = mk_review("admission.k8s.io/v1", "CREATE", Some(configmap.clone()));
    review["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
    let answer = webhook.review(&review).await;
    assert_eq!(answer["response"], json!({"uid": UID, "allowed": true}));

    // A ConfigMap, by the object when request.kind is absent.
    let mut review = mk_review("admission.k8s.io/v1", "CREATE", Some(configmap));
    review["request"].as_object_mut().unwrap().remove("kind");
    let answer = webhook.review(&review).await;
    assert_eq!(answer["response"], json!({"uid": UID, "allowed": true}));

    // Without request.kind, an object that says it is a ServiceProfile is judged.
    let mut review = mk_review("admission.k8s.io/v1", "CREATE", Some(invalid_profile()));
    review["request"].as_object_mut().unwrap().remove("kind");
    let answer = webhook.review(&review).await;
    assert_eq!(answer["response"]["status"]["message"], NO_CONDITION);

    // DELETE and CONNECT are allowed, whatever the objects.
    for operation in ["DELETE", "CONNECT"] {
        let mut review = mk_review("admission.k8s.io/v1", operation, None);
        review["request"]["oldObject"] = invalid_profile();
        let answer = webhook.review(&review).await;
        assert_eq!(
            answer["response"],
            json!({"uid": UID, "allowed": true}),
            "{operation}"
        );
    }
}

#[tokio::test]
async fn judged_requests() {
    let webhook = mk_webhook().await;

    // A CREATE without an object is an empty profile, whose name is invalid (as upstream).
    let answer = webhook
        .review(&mk_review("admission.k8s.io/v1", "CREATE", None))
        .await;
    assert_eq!(
        answer["response"]["status"]["message"],
        format!(
            "ServiceProfile \"\" has invalid name: {}",
            sp_validator::validate::NAME_NOT_SUBDOMAIN
        )
    );

    // v1alpha1 profiles, and dry runs, are judged the same.
    let mut object = invalid_profile();
    object["apiVersion"] = json!("linkerd.io/v1alpha1");
    let mut review = mk_review("admission.k8s.io/v1", "CREATE", Some(object));
    review["request"]["dryRun"] = json!(true);
    assert_eq!(review["request"]["kind"]["version"], "v1alpha1");
    let answer = webhook.review(&review).await;
    assert_eq!(answer["response"]["status"]["message"], NO_CONDITION);

    // Metadata the API server adds never matters; an unknown field in spec does.
    let mut object = mk_profile(json!({"routes": [{"name": "r", "condition": {"method": "GET"}}]}));
    object["metadata"]["managedFields"] =
        json!([{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]);
    object["metadata"]["uid"] = json!("0d3c");
    object["metadata"]["generation"] = json!(1);
    assert!(webhook.admit_object(object.clone()).await.allowed);
    object["spec"]["routes"][0]["condition"]["methd"] = json!("GET");
    assert_denied(
        &webhook.admit_object(object).await,
        "failed to validate ServiceProfile: error unmarshaling JSON: while decoding JSON: json: unknown field \"methd\" (spec.routes[0].condition.methd)",
        "typo",
    );
}

#[tokio::test]
async fn tls_1_2_clients_are_refused() {
    let webhook = mk_webhook().await;
    let config = client_config(&webhook.ca, &[&rustls::version::TLS12]);
    let tcp = tokio::net::TcpStream::connect(webhook.addr).await.unwrap();
    let result = tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await;
    assert!(result.is_err(), "a TLS 1.2 handshake succeeded");
    // TLS 1.3 still works afterwards (send_to asserts the version).
    let reply = webhook.send("POST", "/", b"").await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn reviews_are_counted() {
    let webhook = mk_webhook().await;
    let valid = mk_profile(json!({}));
    webhook.admit_object(valid.clone()).await;
    webhook.admit_object(valid).await;
    webhook.admit_object(invalid_profile()).await;
    webhook.send("POST", "/", b"{").await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &webhook.registry).unwrap();
    for line in [
        "sp_validator_admission_reviews_total{result=\"allowed\"} 2",
        "sp_validator_admission_reviews_total{result=\"denied\"} 1",
        "sp_validator_admission_reviews_total{result=\"invalid\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}

/// The README's example review (`examples/admission/serviceprofile-review.json`) is admitted.
#[test]
fn the_readmes_example_review_is_admitted() {
    let body = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/admission/serviceprofile-review.json"
    ))
    .unwrap();
    let answer = sp_validator::webhook::review(&body).unwrap();
    let answer: Value =
        serde_json::from_slice(&linkerd_admission::to_json(&answer).unwrap()).unwrap();
    assert_eq!(
        answer["response"],
        json!({"uid": "6a1e2c3d-0000-4000-8000-000000000001", "allowed": true})
    );
}
