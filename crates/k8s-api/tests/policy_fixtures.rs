//! Every policy.linkerd.io object of the fixture clusters decodes with this crate's types.

use linkerd_k8s_api::{
    AuthorizationPolicy, HttpRoute, MeshTlsAuthentication, NetworkAuthentication, Server,
    http_route::{HttpRouteFilter, POLICY_CONTROLLER_NAME},
    shared::NamespacedTargetRef,
};
use serde::de::DeserializeOwned;

const EMOJIVOTO: &str = include_str!("../../../tests/fixtures/emojivoto/cluster.yaml");
const EDGE_CASES: &str = include_str!("../../../tests/fixtures/edge-cases/cluster.yaml");

/// The documents of both fixture files whose `kind` and API group are the given ones, decoded
/// as `T` (a decoding failure fails the test, naming the object).
fn decode_all<T: DeserializeOwned>(group: &str, kind: &str) -> Vec<T> {
    let mut out = Vec::new();
    for file in [EMOJIVOTO, EDGE_CASES] {
        let docs: Vec<serde_json::Value> =
            linkerd_k8s_api::yaml::from_documents(file).expect("fixture YAML parses");
        for value in docs {
            let api_version = value["apiVersion"].as_str().unwrap_or_default();
            if value["kind"].as_str() != Some(kind)
                || api_version.split_once('/').map(|(g, _)| g) != Some(group)
            {
                continue;
            }
            let name = format!(
                "{kind} {:?}/{:?}",
                value["metadata"]["namespace"], value["metadata"]["name"]
            );
            match serde_json::from_value(value) {
                Ok(obj) => out.push(obj),
                Err(error) => panic!("{name} does not decode: {error}"),
            }
        }
    }
    out
}

fn named<'a, T: kube::ResourceExt>(objs: &'a [T], ns: &str, name: &str) -> &'a T {
    objs.iter()
        .find(|o| o.namespace().as_deref() == Some(ns) && o.name_any() == name)
        .unwrap_or_else(|| panic!("{ns}/{name} not in the fixtures"))
}

#[test]
fn mesh_tls_authentications() {
    let authns = decode_all::<MeshTlsAuthentication>("policy.linkerd.io", "MeshTLSAuthentication");
    assert_eq!(authns.len(), 5);
    let voting = named(&authns, "emojivoto", "voting-grpc-auth");
    assert_eq!(
        voting.spec.identities.as_deref(),
        Some(&["web.emojivoto.serviceaccount.identity.linkerd.cluster.local".to_string()][..])
    );
    assert!(voting.spec.identity_refs.is_none());

    let mixed = named(&authns, "emojivoto", "web-api-clients");
    assert_eq!(
        mixed.spec.identities.as_deref(),
        Some(&["*.ingress-nginx.serviceaccount.identity.linkerd.cluster.local".to_string()][..])
    );
    let refs = mixed.spec.identity_refs.as_ref().unwrap();
    assert_eq!(
        refs[..],
        [NamespacedTargetRef {
            group: None,
            kind: "ServiceAccount".into(),
            name: "default".into(),
            namespace: None,
        }]
    );

    let cross_ns = named(&authns, "edge-strict", "secrets-clients");
    let refs = cross_ns.spec.identity_refs.as_ref().unwrap();
    assert_eq!(refs[0].name, "billing");
    assert_eq!(refs[0].namespace.as_deref(), Some("edge"));
    assert!(refs[0].targets_kind::<k8s_openapi::api::core::v1::ServiceAccount>());
}

#[test]
fn network_authentications() {
    let authns = decode_all::<NetworkAuthentication>("policy.linkerd.io", "NetworkAuthentication");
    assert_eq!(authns.len(), 1);
    let networks = &named(&authns, "emojivoto", "cluster-network").spec.networks;
    let cidrs: Vec<_> = networks.iter().map(|n| n.cidr.as_str()).collect();
    assert_eq!(cidrs, ["10.244.0.0/16", "fd00:10:244::/56", "10.20.0.0/16"]);
    assert!(networks[0].except.is_none());
    assert_eq!(networks[2].exceptions(), ["10.20.3.200/32"]);
}

#[test]
fn authorization_policies() {
    let policies = decode_all::<AuthorizationPolicy>("policy.linkerd.io", "AuthorizationPolicy");
    assert_eq!(policies.len(), 7);

    let voting = named(&policies, "emojivoto", "voting-policy");
    assert!(voting.spec.target_ref.targets_kind::<Server>());
    assert_eq!(voting.spec.target_ref.name, "voting-grpc");
    let authn = &voting.spec.required_authentication_refs[0];
    assert!(authn.targets_kind::<MeshTlsAuthentication>());
    assert_eq!(authn.name, "voting-grpc-auth");

    let emoji = named(&policies, "emojivoto", "emoji-grpc");
    let authn = &emoji.spec.required_authentication_refs[0];
    assert_eq!(
        (authn.group.as_deref(), authn.kind.as_str()),
        (None, "ServiceAccount")
    );
    assert_eq!(authn.name, "web");

    let web_api = named(&policies, "emojivoto", "web-api");
    assert!(web_api.spec.target_ref.targets_kind::<HttpRoute>());

    let web_static = named(&policies, "emojivoto", "web-static");
    assert!(
        web_static
            .spec
            .target_ref
            .targets_kind::<linkerd_k8s_api::gateway_api::httproutes::HttpRoute>()
    );
    assert!(!web_static.spec.target_ref.targets_kind::<HttpRoute>());
    assert!(
        web_static.spec.required_authentication_refs[0].targets_kind::<NetworkAuthentication>()
    );

    let secrets = named(&policies, "edge-strict", "secrets-api");
    assert_eq!(secrets.spec.target_ref.name, "secrets-api");
}

#[test]
fn policy_http_routes() {
    let routes = decode_all::<HttpRoute>("policy.linkerd.io", "HTTPRoute");
    assert_eq!(routes.len(), 1);
    let route = named(&routes, "emojivoto", "web-api");
    let parents = route.spec.parent_refs.as_ref().unwrap();
    assert_eq!(parents[0].kind.as_deref(), Some("Server"));
    assert_eq!(parents[0].name, "web-http");
    let rule = &route.spec.rules.as_ref().unwrap()[0];
    let paths: Vec<_> = rule
        .matches
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| m.path.as_ref().unwrap().value.as_deref().unwrap())
        .collect();
    assert_eq!(paths, ["/api/list", "/api/vote", "/api/leaderboard"]);
    assert!(
        rule.filters
            .as_ref()
            .is_none_or(|f: &Vec<HttpRouteFilter>| f.is_empty())
    );

    let status = &route.status.as_ref().unwrap().parents[0];
    assert_eq!(status.controller_name, POLICY_CONTROLLER_NAME);
    assert_eq!(status.parent_ref.namespace.as_deref(), Some("emojivoto"));
    assert_eq!(
        (
            status.conditions[0].type_.as_str(),
            status.conditions[0].status.as_str()
        ),
        ("Accepted", "True")
    );
}

#[test]
fn gateway_http_routes_decode_with_the_reexported_crate() {
    use linkerd_k8s_api::gateway_api::httproutes::HttpRoute as GatewayHttpRoute;
    let routes = decode_all::<GatewayHttpRoute>("gateway.networking.k8s.io", "HTTPRoute");
    assert_eq!(routes.len(), 1);
    let route = named(&routes, "emojivoto", "web-static");
    assert_eq!(route.spec.parent_refs.as_ref().unwrap()[0].name, "web-http");
    assert_eq!(
        route.status.as_ref().unwrap().parents[0].controller_name,
        POLICY_CONTROLLER_NAME
    );
}

#[test]
fn servers_still_decode() {
    let servers = decode_all::<Server>("policy.linkerd.io", "Server");
    assert!(servers.len() >= 8, "{}", servers.len());
}
