//! The CRDs generated from the policy types are structural (kube's derive panics otherwise)
//! and carry the names and versions of spec/policy.md §2.1.

use kube::CustomResourceExt;
use kube::core::crd::merge_crds;
use linkerd_k8s_api::{
    authorization_policy, egress_network, http_local_rate_limit_policy, http_route,
    mesh_tls_authentication, network_authentication, server_authorization,
};

#[test]
fn policy_crds_generate() {
    let routes = merge_crds(
        vec![
            http_route::v1beta3::HttpRoute::crd(),
            http_route::v1beta2::HttpRoute::crd(),
            http_route::v1beta1::HttpRoute::crd(),
            http_route::v1alpha1::HttpRoute::crd(),
        ],
        "v1beta3",
    )
    .unwrap();
    assert_eq!(
        routes.metadata.name.as_deref(),
        Some("httproutes.policy.linkerd.io")
    );
    let mut versions: Vec<_> = routes
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.storage))
        .collect();
    versions.sort();
    assert_eq!(
        versions,
        [
            ("v1alpha1", false),
            ("v1beta1", false),
            ("v1beta2", false),
            ("v1beta3", true)
        ]
    );
    assert!(
        routes
            .spec
            .versions
            .iter()
            .all(|v| v.subresources.as_ref().unwrap().status.is_some())
    );
    // The filter schema is the Gateway API's shape: one object with `type` and the bodies.
    let schema = serde_json::to_value(&routes.spec.versions[0].schema).unwrap();
    let filter = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["rules"]["items"]["properties"]
        ["filters"]["items"];
    assert_eq!(
        filter["properties"]["type"]["enum"],
        serde_json::json!([
            "RequestHeaderModifier",
            "ResponseHeaderModifier",
            "RequestRedirect"
        ])
    );
    assert_eq!(filter["required"], serde_json::json!(["type"]));
    assert!(filter["properties"]["requestRedirect"].is_object());

    let sazs = merge_crds(
        vec![
            server_authorization::v1beta1::ServerAuthorization::crd(),
            server_authorization::v1alpha1::ServerAuthorization::crd(),
        ],
        "v1beta1",
    )
    .unwrap();
    assert_eq!(
        sazs.spec.names.short_names.as_deref(),
        Some(&["saz".to_string()][..])
    );

    for (crd, name) in [
        (
            authorization_policy::v1alpha1::AuthorizationPolicy::crd(),
            "authorizationpolicies.policy.linkerd.io",
        ),
        (
            mesh_tls_authentication::v1alpha1::MeshTlsAuthentication::crd(),
            "meshtlsauthentications.policy.linkerd.io",
        ),
        (
            network_authentication::v1alpha1::NetworkAuthentication::crd(),
            "networkauthentications.policy.linkerd.io",
        ),
        (
            http_local_rate_limit_policy::v1alpha1::HttpLocalRateLimitPolicy::crd(),
            "httplocalratelimitpolicies.policy.linkerd.io",
        ),
        (
            egress_network::v1alpha1::EgressNetwork::crd(),
            "egressnetworks.policy.linkerd.io",
        ),
    ] {
        assert_eq!(crd.metadata.name.as_deref(), Some(name));
    }
}
