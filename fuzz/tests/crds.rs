//! The admission targets' model of the API server's CRD check ([`linkerd_fuzz::crds`]): every
//! CRD of deploy/crds/ is compiled in, and the schemas refuse what the API server refuses.

use linkerd_fuzz::crds::{BUNDLED_CRDS, Refusal, crd_schemas};
use serde_json::json;
use std::path::Path;

#[test]
fn every_crd_of_deploy_is_compiled_in() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    files.sort();
    let bundled: Vec<&str> = BUNDLED_CRDS.iter().map(|(name, _)| *name).collect();
    assert_eq!(bundled, files);
    for (name, text) in BUNDLED_CRDS {
        let on_disk = std::fs::read_to_string(dir.join(name)).unwrap();
        assert_eq!(*text, on_disk, "{name}");
    }
}

#[test]
fn every_served_version_has_a_schema() {
    let served = crd_schemas().served();
    for expected in [
        "gateway.networking.k8s.io/v1 GRPCRoute",
        "gateway.networking.k8s.io/v1 HTTPRoute",
        "gateway.networking.k8s.io/v1 TLSRoute",
        "gateway.networking.k8s.io/v1alpha2 TCPRoute",
        "linkerd.io/v1alpha1 ServiceProfile",
        "linkerd.io/v1alpha2 ServiceProfile",
        "policy.linkerd.io/v1alpha1 AuthorizationPolicy",
        "policy.linkerd.io/v1alpha1 HTTPLocalRateLimitPolicy",
        "policy.linkerd.io/v1beta3 HTTPRoute",
        "policy.linkerd.io/v1alpha1 Server",
        "policy.linkerd.io/v1beta3 Server",
        "policy.linkerd.io/v1beta1 ServerAuthorization",
        "workload.linkerd.io/v1beta1 ExternalWorkload",
    ] {
        assert!(
            served.iter().any(|s| s == expected),
            "{expected}: {served:#?}"
        );
    }
    assert_eq!(served.len(), 23, "{served:#?}");
}

fn http_route(parent_ref: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "h", "namespace": "n"},
        "spec": {"parentRefs": [parent_ref], "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}]}]},
    })
}

/// The input that made `policy_admission` fail: the webhook admits an HTTPRoute whose parent
/// reference has no `name`, which the index cannot decode; the Gateway API CRD requires it, so
/// the API server refuses the object before the webhook is called.
#[test]
fn a_gateway_parent_ref_needs_a_name() {
    let schemas = crd_schemas();
    let named = http_route(json!({"group": "core", "kind": "Service", "name": "web", "port": 80}));
    assert_eq!(schemas.check(&named), Ok(()));
    let unnamed =
        http_route(json!({"group": "core", "kind": "Service", "(name": "web", "port": 80}));
    match schemas.check(&unnamed) {
        Err(Refusal::Invalid { at, problem }) => {
            assert_eq!(at, "/spec/parentRefs/0");
            assert!(
                problem.contains("\"name\" is a required property"),
                "{problem}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn versions_no_crd_serves_are_refused() {
    let schemas = crd_schemas();
    let mut route = http_route(json!({"name": "web"}));
    route["apiVersion"] = json!("gateway.networking.k8s.io/v9");
    assert_eq!(
        schemas.check(&route),
        Err(Refusal::NotServed {
            api_version: "gateway.networking.k8s.io/v9".into(),
            kind: "HTTPRoute".into()
        })
    );
    route["apiVersion"] = json!("v1");
    assert!(matches!(
        schemas.check(&route),
        Err(Refusal::NotServed { .. })
    ));
}

/// Ours: the ServiceProfile CRD requires `spec`, a Server's port is an int-or-string, and an
/// integer must fit its format (a ServiceProfile's `retryBudget.ttl` is a string, its
/// `minRetriesPerSecond` a `uint32`).
#[test]
fn our_crds_as_the_api_server_reads_them() {
    let schemas = crd_schemas();
    let profile = |spec| {
        json!({
            "apiVersion": "linkerd.io/v1alpha2",
            "kind": "ServiceProfile",
            "metadata": {"name": "web.n.svc.cluster.local", "namespace": "n"},
            "spec": spec,
        })
    };
    assert_eq!(schemas.check(&profile(json!({}))), Ok(()));
    let mut without_spec = profile(json!({}));
    without_spec.as_object_mut().unwrap().remove("spec");
    assert!(matches!(
        schemas.check(&without_spec),
        Err(Refusal::Invalid { .. })
    ));
    let budget = |n: serde_json::Value| {
        profile(json!({"retryBudget": {"retryRatio": 0.2, "minRetriesPerSecond": n, "ttl": "10s"}}))
    };
    assert_eq!(schemas.check(&budget(json!(10))), Ok(()));
    assert!(schemas.check(&budget(json!(4_294_967_296_u64))).is_err());
    assert!(schemas.check(&budget(json!(-1))).is_err());
    let server = |port| {
        json!({
            "apiVersion": "policy.linkerd.io/v1beta3",
            "kind": "Server",
            "metadata": {"name": "s", "namespace": "n"},
            "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "port": port},
        })
    };
    assert_eq!(schemas.check(&server(json!("http"))), Ok(()));
    assert_eq!(schemas.check(&server(json!(8080))), Ok(()));
    assert!(schemas.check(&server(json!(true))).is_err());
}

/// The admission targets assert that an admitted object decodes only when its CRD lets it
/// through: their seeds must pass, or the assertion would guard nothing. The one seed kind no
/// schema serves is TLSRoute `v1alpha2` (the `gateway-api` crate's type is `v1`).
#[test]
fn the_admission_seeds_pass_their_crds() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for target in ["policy_admission", "sp_admission"] {
        let mut passed = 0;
        for entry in std::fs::read_dir(corpus.join(target)).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            // Some seeds are not reviews on purpose (a body nested too deep, an empty one).
            let Ok(review) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
                continue;
            };
            let Some(mut object) = review.pointer("/request/object").cloned() else {
                continue;
            };
            if let Some(fields) = object.as_object_mut() {
                fields.remove("status");
            }
            match crd_schemas().check(&object) {
                Ok(()) => passed += 1,
                Err(Refusal::NotServed { api_version, kind })
                    if api_version == "gateway.networking.k8s.io/v1alpha2"
                        && kind == "TLSRoute" => {}
                Err(refusal) => panic!("{target}: {refusal}: {object}"),
            }
        }
        assert!(passed >= 25, "{target}: {passed} seeds pass");
    }
}
