//! Route statuses (spec/policy.md §7.2) computed from applied objects, and offline acceptance
//! following them (§11).

use super::*;
use crate::{
    inbound::{DefaultPolicy, InboundConfig},
    model::PortSet,
    outbound::{
        OutboundConfig, OutboundLookup, OutboundPolicy, OutboundProtocol, OutboundRouteRef,
        OutboundTarget,
    },
    source::Event,
    testing::Policy as Index,
};
use k8s_openapi::{api::core::v1::Service, jiff::Timestamp};
use linkerd_k8s_api::Server;
use serde_json::{Value, json};

const NOW: &str = "2026-12-01T00:00:00Z";

fn index(offline: bool) -> Index {
    Index::new(
        InboundConfig {
            cluster_networks: vec!["10.0.0.0/8".parse().unwrap()],
            default_policy: DefaultPolicy::AllUnauthenticated,
            probe_networks: vec![],
            identity_domain: "cluster.local".into(),
            control_plane_namespace: "linkerd".into(),
            compute_route_acceptance: offline,
        },
        OutboundConfig {
            cluster_domain: "cluster.local".into(),
            cluster_networks: vec!["10.0.0.0/8".parse().unwrap()],
            default_opaque_ports: PortSet::default(),
            compute_route_acceptance: offline,
            global_egress_network_namespace: "linkerd-egress".into(),
        },
    )
}

fn yaml<T: serde::de::DeserializeOwned>(s: &str) -> T {
    serde_saphyr::from_str(s).expect("test object decodes")
}

/// Service `ns/name` with `spec` (e.g. `clusterIP: 10.0.0.1`), port 80 speaking HTTP/1.
fn mk_service(ns: &str, name: &str, spec: &str) -> Service {
    yaml(&format!(
        "metadata: {{name: {name}, namespace: {ns}}}\nspec: {{{spec}, ports: [{{name: http, port: 80, appProtocol: http}}]}}\n"
    ))
}

fn mk_server(ns: &str, name: &str) -> Server {
    yaml(&format!(
        "metadata: {{name: {name}, namespace: {ns}}}\nspec: {{podSelector: {{}}, port: 8080}}\n"
    ))
}

/// A route of `kind` (`http`: Gateway HTTPRoute, `policy`: policy HTTPRoute, `grpc`, `tls`,
/// `tcp`) in ns `emojivoto`, with parent refs, backend refs and status parents as YAML flow
/// lists.
fn apply_route(index: &Index, kind: &str, name: &str, parents: &str, backends: &str, status: &str) {
    use linkerd_k8s_api::gateway_api::experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute};
    let (api_version, kind_name) = match kind {
        "http" => ("gateway.networking.k8s.io/v1", "HTTPRoute"),
        "policy" => ("policy.linkerd.io/v1beta3", "HTTPRoute"),
        "tls" => ("gateway.networking.k8s.io/v1alpha2", "TLSRoute"),
        "tcp" => ("gateway.networking.k8s.io/v1alpha2", "TCPRoute"),
        _ => ("gateway.networking.k8s.io/v1", "GRPCRoute"),
    };
    let text = format!(
        "apiVersion: {api_version}\nkind: {kind_name}\nmetadata: {{name: {name}, namespace: emojivoto}}\nspec:\n  hostnames: []\n  parentRefs: {parents}\n  rules: [{{backendRefs: {backends}}}]\nstatus: {{parents: {status}}}\n"
    );
    match kind {
        "tls" => index.apply(Event::Apply(yaml::<TlsRoute>(&text))),
        "tcp" => index.apply(Event::Apply(yaml::<TcpRoute>(&text))),
        "http" => index.apply(Event::Apply(yaml::<
            linkerd_k8s_api::gateway_api::httproutes::HttpRoute,
        >(&text))),
        "policy" => index.apply(Event::Apply(yaml::<linkerd_k8s_api::HttpRoute>(&text))),
        _ => index.apply(Event::Apply(yaml::<
            linkerd_k8s_api::gateway_api::grpcroutes::GrpcRoute,
        >(&text))),
    }
}

fn now() -> Time {
    Time(NOW.parse::<Timestamp>().unwrap())
}

/// Every patch's body by route name.
fn patches(index: &Index) -> BTreeMap<String, Value> {
    index
        .status_patches(&now())
        .into_iter()
        .map(|p| (p.name.clone(), p.body()))
        .collect()
}

fn parents_of(index: &Index, name: &str) -> Value {
    patches(index)
        .get(name)
        .unwrap_or_else(|| panic!("no patch for {name}"))["status"]["parents"]
        .clone()
}

fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": NOW})
}

fn service_entry(name: &str, port: Option<u16>, accepted: Value, resolved: Value) -> Value {
    let mut parent_ref =
        json!({"group": "core", "kind": "Service", "namespace": "emojivoto", "name": name});
    if let Some(port) = port {
        parent_ref["port"] = json!(port);
    }
    json!({"parentRef": parent_ref, "controllerName": "linkerd.io/policy-controller", "conditions": [accepted, resolved]})
}

fn accepted() -> Value {
    cond("Accepted", "True", "Accepted", "")
}

fn resolved() -> Value {
    cond("ResolvedRefs", "True", "ResolvedRefs", "")
}

const WEB_80: &str = "[{kind: Service, name: web, port: 80}]";

fn with_web(offline: bool) -> Index {
    let index = index(offline);
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "clusterIP: 10.0.0.1",
    )));
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "emoji",
        "clusterIP: 10.0.0.2",
    )));
    index
}

#[test]
fn a_service_parent_that_exists_accepts_the_route() {
    let index = with_web(false);
    apply_route(
        &index,
        "http",
        "r",
        WEB_80,
        "[{name: emoji, port: 8080}]",
        "[]",
    );
    let patch = &index.status_patches(&now())[0];
    assert_eq!(
        (patch.group, patch.version, patch.kind, patch.plural),
        ("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes")
    );
    assert_eq!(
        patch.body(),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r"},
            "status": {"parents": [service_entry("web", Some(80), accepted(), resolved())]},
        })
    );
    // The policy HTTPRoute is patched in its storage version.
    apply_route(
        &index,
        "policy",
        "p",
        "[{kind: Service, name: web}]",
        "[]",
        "[]",
    );
    let policy = index
        .status_patches(&now())
        .into_iter()
        .find(|p| p.group == "policy.linkerd.io")
        .unwrap();
    assert_eq!(policy.body()["apiVersion"], "policy.linkerd.io/v1beta3");
    assert_eq!(
        policy.body()["status"]["parents"],
        json!([service_entry("web", None, accepted(), resolved())])
    );
}

#[test]
fn a_missing_service_parent_is_no_matching_parent() {
    let index = with_web(false);
    apply_route(
        &index,
        "http",
        "r",
        "[{kind: Service, name: gone, port: 80}]",
        "[]",
        "[]",
    );
    assert_eq!(
        parents_of(&index, "r"),
        json!([service_entry(
            "gone",
            Some(80),
            cond("Accepted", "False", "NoMatchingParent", ""),
            resolved()
        )])
    );
}

#[test]
fn parent_service_must_have_a_cluster_ip() {
    let index = with_web(false);
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "headless",
        "clusterIP: None",
    )));
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "ext",
        "type: ExternalName, externalName: example.com",
    )));
    let refused = cond(
        "Accepted",
        "False",
        "NoMatchingParent",
        "parent service must have a ClusterIP",
    );
    for parent in ["headless", "ext"] {
        apply_route(
            &index,
            "http",
            parent,
            &format!("[{{kind: Service, name: {parent}}}]"),
            "[]",
            "[]",
        );
        assert_eq!(
            parents_of(&index, parent),
            json!([service_entry(parent, None, refused.clone(), resolved())]),
            "{parent}"
        );
    }
}

#[test]
fn a_grpc_route_conflicts_http_routes_on_the_identical_parent() {
    let index = with_web(false);
    apply_route(&index, "grpc", "g", WEB_80, "[]", "[]");
    apply_route(&index, "http", "h", WEB_80, "[]", "[]");
    apply_route(&index, "policy", "p", WEB_80, "[]", "[]");
    // Another port is another parent: no conflict there.
    apply_route(
        &index,
        "http",
        "h81",
        "[{kind: Service, name: web, port: 81}]",
        "[]",
        "[]",
    );
    let conflicted = cond("Accepted", "False", "RouteReasonConflicted", "");
    let patches = index.status_patches(&now());
    let by = |group: &str, name: &str| {
        patches
            .iter()
            .find(|p| p.group == group && p.name == name)
            .unwrap()
            .body()["status"]["parents"]
            .clone()
    };
    let gw = "gateway.networking.k8s.io";
    assert_eq!(
        by(gw, "g"),
        json!([service_entry("web", Some(80), accepted(), resolved())])
    );
    assert_eq!(
        by(gw, "h"),
        json!([service_entry(
            "web",
            Some(80),
            conflicted.clone(),
            resolved()
        )])
    );
    assert_eq!(
        by("policy.linkerd.io", "p"),
        json!([service_entry("web", Some(80), conflicted, resolved())])
    );
    assert_eq!(
        by(gw, "h81"),
        json!([service_entry("web", Some(81), accepted(), resolved())])
    );
    // The GRPCRoute goes: the HTTPRoute is accepted again.
    index.apply(
        Event::<linkerd_k8s_api::gateway_api::grpcroutes::GrpcRoute>::Delete(ObjectRef {
            namespace: "emojivoto".into(),
            name: "g".into(),
        }),
    );
    assert_eq!(
        parents_of(&index, "h"),
        json!([service_entry("web", Some(80), accepted(), resolved())])
    );
}

#[test]
fn server_parents_get_only_accepted() {
    let index = with_web(false);
    index.apply(Event::Apply(mk_server("emojivoto", "web-http")));
    let server = |name: &str, accepted: Value| {
        json!({
            "parentRef": {"group": "policy.linkerd.io", "kind": "Server", "namespace": "emojivoto", "name": name},
            "controllerName": "linkerd.io/policy-controller",
            "conditions": [accepted],
        })
    };
    apply_route(
        &index,
        "policy",
        "p",
        "[{group: policy.linkerd.io, kind: Server, name: web-http}, {group: policy.linkerd.io, kind: Server, name: gone}]",
        "[]",
        "[]",
    );
    assert_eq!(
        parents_of(&index, "p"),
        json!([
            server("web-http", accepted()),
            server("gone", cond("Accepted", "False", "NoMatchingParent", "")),
        ])
    );
    apply_route(
        &index,
        "grpc",
        "g",
        "[{group: policy.linkerd.io, kind: Server, name: web-http}]",
        "[]",
        "[]",
    );
    assert_eq!(
        parents_of(&index, "p")[0],
        server(
            "web-http",
            cond("Accepted", "False", "RouteReasonConflicted", "")
        )
    );
    // The Server goes: NoMatchingParent for every route on it.
    index.apply(Event::<Server>::Delete(crate::testing::key(&mk_server(
        "emojivoto",
        "web-http",
    ))));
    assert_eq!(
        parents_of(&index, "g"),
        json!([server(
            "web-http",
            cond("Accepted", "False", "NoMatchingParent", "")
        )])
    );
}

#[test]
fn resolved_refs_reads_every_backend_in_order() {
    let index = with_web(false);
    let case = |backends: &str| {
        apply_route(&index, "http", "r", WEB_80, backends, "[]");
        parents_of(&index, "r")[0]["conditions"][1].clone()
    };
    assert_eq!(
        case("[{name: emoji, port: 80}, {kind: Service, group: '', name: web, port: 80}]"),
        resolved()
    );
    assert_eq!(
        case("[{name: emoji, port: 80}, {name: nowhere, port: 80}]"),
        cond("ResolvedRefs", "False", "BackendNotFound", "")
    );
    assert_eq!(
        case("[{group: example.com, kind: Bucket, name: b}, {name: nowhere, port: 80}]"),
        cond("ResolvedRefs", "False", "InvalidKind", "")
    );
    // A backend in another namespace is looked up there.
    assert_eq!(
        case("[{name: emoji, namespace: other, port: 80}]"),
        cond("ResolvedRefs", "False", "BackendNotFound", "")
    );
}

#[test]
fn other_controllers_entries_are_kept_first() {
    let index = with_web(false);
    let theirs = json!({
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "emojivoto", "name": "gw"},
        "controllerName": "example.com/other",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "theirs", "lastTransitionTime": "2020-01-01T00:00:00Z"}],
    });
    let ours_stale = json!({
        "parentRef": {"group": "core", "kind": "Service", "namespace": "emojivoto", "name": "old"},
        "controllerName": "linkerd.io/policy-controller",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z"}],
    });
    apply_route(
        &index,
        "http",
        "r",
        "[{name: gw}, {kind: Service, name: web, port: 80}]",
        "[]",
        &json!([ours_stale, theirs]).to_string(),
    );
    // The Gateway parent gets no entry of ours; the stale entry of ours is replaced.
    assert_eq!(
        parents_of(&index, "r"),
        json!([
            theirs,
            service_entry("web", Some(80), accepted(), resolved())
        ])
    );
}

#[test]
fn a_status_already_in_place_is_not_patched_again() {
    let index = with_web(false);
    // Same entries, other order, other transition times.
    let theirs = json!({
        "parentRef": {"kind": "Gateway", "name": "gw"},
        "controllerName": "example.com/other",
        "conditions": [{"type": "Accepted", "status": "False", "reason": "X", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z"}],
    });
    let mut ours = service_entry("web", Some(80), accepted(), resolved());
    ours["conditions"][0]["lastTransitionTime"] = json!("2021-05-05T00:00:00Z");
    apply_route(
        &index,
        "http",
        "r",
        "[{kind: Service, name: web, port: 80}, {name: gw}]",
        "[]",
        &json!([ours, theirs]).to_string(),
    );
    assert!(patches(&index).is_empty(), "{:?}", patches(&index));

    // A different message is a difference.
    ours["conditions"][1]["message"] = json!("stale");
    apply_route(
        &index,
        "http",
        "r",
        WEB_80,
        "[]",
        &json!([ours]).to_string(),
    );
    assert!(patches(&index).contains_key("r"));

    // No supported parent and no entry of ours: nothing to write; with one of ours: `[]`.
    apply_route(&index, "http", "gw-only", "[{name: gw}]", "[]", "[]");
    assert!(!patches(&index).contains_key("gw-only"));
    apply_route(
        &index,
        "http",
        "gone",
        "[]",
        "[]",
        &json!([ours]).to_string(),
    );
    assert_eq!(parents_of(&index, "gone"), json!([]));
}

#[test]
fn unknown_inputs_are_not_patched() {
    let index = with_web(false);
    // A port outside 1..=65535 drops the ref.
    apply_route(
        &index,
        "http",
        "bad-port",
        "[{kind: Service, name: web, port: 70000}]",
        "[]",
        "[]",
    );
    let patches = patches(&index);
    assert!(!patches.contains_key("bad-port"));
}

fn http_route_names(index: &Index) -> Vec<String> {
    let target = OutboundTarget::Service {
        service: crate::ObjectRef {
            namespace: "emojivoto".into(),
            name: "web".into(),
        },
        port: 80,
    };
    let policy = match index.outbound_policy(target, "emojivoto").unwrap() {
        OutboundLookup::Watch(rx) => (**rx.borrow()).clone(),
        OutboundLookup::Fixed(p) => (*p).clone(),
    };
    let OutboundPolicy::Service(policy) = policy else {
        panic!("{policy:?}")
    };
    let OutboundProtocol::Http1(routes) = policy.protocol else {
        panic!("{:?}", policy.protocol)
    };
    routes
        .iter()
        .map(|r| match &r.reference {
            OutboundRouteRef::Default(name) => format!("default {name}"),
            OutboundRouteRef::Resource { name, .. } => name.clone(),
        })
        .collect()
}

#[tokio::test]
async fn offline_a_route_conflicted_by_a_grpc_route_is_not_attached() {
    let index = with_web(true);
    apply_route(
        &index,
        "http",
        "h",
        WEB_80,
        "[{name: emoji, port: 80}]",
        "[]",
    );
    assert_eq!(http_route_names(&index), ["h"]);
    apply_route(&index, "grpc", "g", WEB_80, "[]", "[]");
    assert_eq!(http_route_names(&index), ["default http"]);
}

#[tokio::test]
async fn offline_a_route_on_a_headless_parent_is_not_attached() {
    let index = with_web(true);
    apply_route(&index, "http", "h", WEB_80, "[]", "[]");
    assert_eq!(http_route_names(&index), ["h"]);
    // The same Service turns headless.
    index.apply(Event::Apply(mk_service(
        "emojivoto",
        "web",
        "clusterIP: None",
    )));
    assert_eq!(http_route_names(&index), ["default http"]);
}

fn apply_rate_limit(index: &Index, name: &str, created: &str, target: &str, status: Value) {
    let created = if created.is_empty() {
        String::new()
    } else {
        format!(", creationTimestamp: \"{created}\"")
    };
    index.apply(Event::Apply(yaml::<linkerd_k8s_api::HttpLocalRateLimitPolicy>(&format!(
        "metadata: {{name: {name}, namespace: emojivoto{created}}}\nspec: {{targetRef: {target}, total: {{requestsPerSecond: 10}}}}\nstatus: {status}\n"
    ))));
}

fn rate_limit_status(reason: &str, server: &str) -> Value {
    let status = if reason == "Accepted" {
        "True"
    } else {
        "False"
    };
    json!({
        "conditions": [cond("Accepted", status, reason, "")],
        "targetRef": {"group": "policy.linkerd.io", "kind": "Server", "name": server},
    })
}

#[test]
fn the_oldest_rate_limit_on_a_server_is_accepted() {
    let index = with_web(false);
    index.apply(Event::Apply(mk_server("emojivoto", "web-http")));
    let server = "{group: policy.linkerd.io, kind: Server, name: web-http}";
    apply_rate_limit(&index, "b-old", "2026-01-01T00:00:00Z", server, json!(null));
    apply_rate_limit(&index, "a-new", "2026-02-01T00:00:00Z", server, json!(null));
    apply_rate_limit(&index, "0-untimed", "", server, json!(null));
    apply_rate_limit(
        &index,
        "gone",
        "",
        "{group: policy.linkerd.io, kind: Server, name: nowhere}",
        json!(null),
    );
    // A target that is not a Server gets no status.
    apply_rate_limit(
        &index,
        "ns",
        "",
        "{kind: Namespace, name: emojivoto}",
        json!(null),
    );
    let patches = index.status_patches(&now());
    let by_name: BTreeMap<_, _> = patches
        .iter()
        .map(|p| (p.name.as_str(), (p.plural, p.body())))
        .collect();
    assert_eq!(
        by_name.keys().copied().collect::<Vec<_>>(),
        ["0-untimed", "a-new", "b-old", "gone"]
    );
    let (plural, body) = &by_name["b-old"];
    assert_eq!(*plural, "httplocalratelimitpolicies");
    assert_eq!(body["apiVersion"], "policy.linkerd.io/v1alpha1");
    assert_eq!(body["kind"], "HTTPLocalRateLimitPolicy");
    assert_eq!(body["status"], rate_limit_status("Accepted", "web-http"));
    let refused = rate_limit_status("RateLimitReasonAlreadyExists", "web-http");
    assert_eq!(by_name["a-new"].1["status"], refused);
    assert_eq!(by_name["0-untimed"].1["status"], refused);
    assert_eq!(
        by_name["gone"].1["status"],
        rate_limit_status("NoMatchingTarget", "nowhere")
    );

    // In place (another transition time): not patched again.
    let mut in_place = rate_limit_status("Accepted", "web-http");
    in_place["conditions"][0]["lastTransitionTime"] = json!("2020-01-01T00:00:00Z");
    apply_rate_limit(&index, "b-old", "2026-01-01T00:00:00Z", server, in_place);
    assert!(
        !index
            .status_patches(&now())
            .iter()
            .any(|p| p.name == "b-old")
    );
}

// === EgressNetworks (§7.2, §7.4) ===

/// EgressNetwork `emojivoto/name` with `spec` (YAML flow entries after `trafficPolicy`) and
/// `status.conditions`.
fn apply_egress(index: &Index, name: &str, spec: &str, conditions: Value) {
    let obj: linkerd_k8s_api::EgressNetwork = serde_json::from_value(json!({
        "apiVersion": "policy.linkerd.io/v1alpha1",
        "kind": "EgressNetwork",
        "metadata": {"name": name, "namespace": "emojivoto"},
        "spec": serde_json::to_value(yaml::<Value>(&format!("{{trafficPolicy: Allow{spec}}}"))).unwrap(),
        "status": {"conditions": conditions},
    }))
    .unwrap();
    index.apply(Event::Apply(obj));
}

fn egress_entry(name: &str, port: u16, accepted: Value, resolved: Value) -> Value {
    json!({
        "parentRef": {"group": "policy.linkerd.io", "kind": "EgressNetwork", "namespace": "emojivoto", "name": name, "port": port},
        "controllerName": "linkerd.io/policy-controller",
        "conditions": [accepted, resolved],
    })
}

fn egress_status(index: &Index, name: &str) -> Option<Value> {
    index
        .status_patches(&now())
        .into_iter()
        .find(|p| p.kind == "EgressNetwork" && p.name == name)
        .map(|p| p.body())
}

const ACCEPTED_EGRESS: &str = r#"[{type: Accepted, status: "True", reason: Accepted, message: "", lastTransitionTime: "2026-01-01T00:00:00Z"}]"#;

#[test]
fn egress_network_status_is_accepted_unless_it_overlaps_cluster_networks() {
    let index = index(false);
    // No networks: everything outside the cluster networks, so no overlap.
    apply_egress(&index, "internet", "", json!([]));
    apply_egress(
        &index,
        "inside",
        ", networks: [{cidr: 10.1.0.0/16}]",
        json!([]),
    );
    apply_egress(
        &index,
        "around",
        ", networks: [{cidr: 0.0.0.0/0}]",
        json!([]),
    );
    apply_egress(
        &index,
        "excepted",
        ", networks: [{cidr: 0.0.0.0/0, except: [10.0.0.0/8]}]",
        json!([{"type": "Ready", "status": "True", "reason": "Ready", "message": "kept", "lastTransitionTime": "2026-01-01T00:00:00Z"},
               {"type": "Accepted", "status": "False", "reason": "Old", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]),
    );
    let body = |conditions: Value, name: &str| {
        json!({
            "apiVersion": "policy.linkerd.io/v1alpha1",
            "kind": "EgressNetwork",
            "metadata": {"name": name},
            "status": {"conditions": conditions},
        })
    };
    let overlap = cond(
        "Accepted",
        "False",
        "EgressReasonNetworkOverlap",
        "networks overlap with clusterNetworks",
    );
    assert_eq!(
        egress_status(&index, "internet"),
        Some(body(json!([accepted()]), "internet"))
    );
    assert_eq!(
        egress_status(&index, "inside"),
        Some(body(json!([overlap.clone()]), "inside"))
    );
    assert_eq!(
        egress_status(&index, "around"),
        Some(body(json!([overlap]), "around"))
    );
    assert_eq!(
        egress_status(&index, "excepted"),
        Some(body(
            json!([
                {"type": "Ready", "status": "True", "reason": "Ready", "message": "kept", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                accepted()
            ]),
            "excepted"
        ))
    );
    // Once written, no further patch.
    apply_egress(&index, "internet", "", yaml(ACCEPTED_EGRESS));
    assert_eq!(egress_status(&index, "internet"), None);
}

#[test]
fn routes_on_egress_networks_wait_for_its_acceptance() {
    let index = index(false);
    let parent = |name: &str| {
        format!("[{{group: policy.linkerd.io, kind: EgressNetwork, name: {name}, port: 443}}]")
    };
    apply_egress(&index, "internet", "", json!([]));
    apply_route(&index, "http", "pending", &parent("internet"), "[]", "[]");
    apply_route(&index, "http", "missing", &parent("gone"), "[]", "[]");
    assert_eq!(
        parents_of(&index, "pending"),
        json!([egress_entry(
            "internet",
            443,
            cond(
                "Accepted",
                "False",
                "NoMatchingParent",
                "EgressNetwork parent has not been accepted"
            ),
            resolved()
        )])
    );
    assert_eq!(
        parents_of(&index, "missing"),
        json!([egress_entry(
            "gone",
            443,
            cond("Accepted", "False", "NoMatchingParent", ""),
            resolved()
        )])
    );
    apply_egress(&index, "internet", "", yaml(ACCEPTED_EGRESS));
    assert_eq!(
        parents_of(&index, "pending"),
        json!([egress_entry("internet", 443, accepted(), resolved())])
    );
}

#[test]
fn egress_network_backends_resolve_only_under_that_egress_network() {
    let index = with_web(false);
    apply_egress(&index, "internet", "", yaml(ACCEPTED_EGRESS));
    apply_egress(&index, "partners", "", yaml(ACCEPTED_EGRESS));
    let backend = "[{group: policy.linkerd.io, kind: EgressNetwork, name: internet}]";
    let parent = |name: &str| {
        format!("[{{group: policy.linkerd.io, kind: EgressNetwork, name: {name}, port: 443}}]")
    };
    apply_route(&index, "http", "same", &parent("internet"), backend, "[]");
    apply_route(&index, "http", "other", &parent("partners"), backend, "[]");
    apply_route(&index, "http", "on-service", WEB_80, backend, "[]");
    apply_route(
        &index,
        "http",
        "not-found",
        &parent("internet"),
        "[{group: policy.linkerd.io, kind: EgressNetwork, name: gone}]",
        "[]",
    );
    let wrong = cond(
        "ResolvedRefs",
        "False",
        "InvalidKind",
        "EgressNetwork backend needs to be on a route that has an EgressNetwork parent",
    );
    assert_eq!(
        parents_of(&index, "same"),
        json!([egress_entry("internet", 443, accepted(), resolved())])
    );
    assert_eq!(
        parents_of(&index, "other"),
        json!([egress_entry("partners", 443, accepted(), wrong.clone())])
    );
    assert_eq!(
        parents_of(&index, "on-service"),
        json!([service_entry("web", Some(80), accepted(), wrong)])
    );
    assert_eq!(
        parents_of(&index, "not-found"),
        json!([egress_entry(
            "internet",
            443,
            accepted(),
            cond("ResolvedRefs", "False", "BackendNotFound", "")
        )])
    );
}

/// GEP-1426 for the L4 kinds: a TLSRoute is conflicted by an HTTPRoute (or GRPCRoute) on the
/// identical parent; a TCPRoute by a TLSRoute; both are patched at v1alpha2 (§7.1).
#[test]
fn tls_and_tcp_routes_are_conflicted_by_more_specific_kinds() {
    let index = with_web(false);
    apply_route(
        &index,
        "tls",
        "t",
        WEB_80,
        "[{name: emoji, port: 8443}]",
        "[]",
    );
    apply_route(
        &index,
        "tcp",
        "c",
        WEB_80,
        "[{name: gone, port: 5432}]",
        "[]",
    );
    let conflicted = cond("Accepted", "False", "RouteReasonConflicted", "");
    let not_found = cond("ResolvedRefs", "False", "BackendNotFound", "");
    let patches = index.status_patches(&now());
    let tls = patches.iter().find(|p| p.kind == "TLSRoute").unwrap();
    assert_eq!(
        (tls.group, tls.version, tls.plural, tls.name.as_str()),
        ("gateway.networking.k8s.io", "v1alpha2", "tlsroutes", "t")
    );
    assert_eq!(
        tls.body(),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TLSRoute",
            "metadata": {"name": "t"},
            "status": {"parents": [service_entry("web", Some(80), accepted(), resolved())]},
        })
    );
    let tcp = patches.iter().find(|p| p.kind == "TCPRoute").unwrap();
    assert_eq!(
        (tcp.group, tcp.version, tcp.plural, tcp.name.as_str()),
        ("gateway.networking.k8s.io", "v1alpha2", "tcproutes", "c")
    );
    assert_eq!(
        tcp.body()["status"]["parents"],
        json!([service_entry(
            "web",
            Some(80),
            conflicted.clone(),
            not_found.clone()
        )]),
        "the TLSRoute conflicts the TCPRoute"
    );

    // An HTTPRoute on the same parent conflicts the TLSRoute (and the TCPRoute still).
    apply_route(&index, "http", "h", WEB_80, "[]", "[]");
    assert_eq!(
        parents_of(&index, "t"),
        json!([service_entry(
            "web",
            Some(80),
            conflicted.clone(),
            resolved()
        )])
    );
    assert_eq!(
        parents_of(&index, "c"),
        json!([service_entry(
            "web",
            Some(80),
            conflicted.clone(),
            not_found.clone()
        )])
    );
    assert_eq!(
        parents_of(&index, "h"),
        json!([service_entry("web", Some(80), accepted(), resolved())])
    );

    // Another port is another parent; a TCPRoute alone there is accepted.
    apply_route(
        &index,
        "tcp",
        "c81",
        "[{kind: Service, name: web, port: 81}]",
        "[]",
        "[]",
    );
    assert_eq!(
        parents_of(&index, "c81"),
        json!([service_entry("web", Some(81), accepted(), resolved())])
    );
}

#[test]
fn tls_route_kinds_rank_between_http_and_tcp() {
    use RouteKind::*;
    for (kind, by, conflicted) in [
        (Tls, Grpc, true),
        (Tls, GatewayHttp, true),
        (Tls, PolicyHttp, true),
        (Tls, Tls, false),
        (Tls, Tcp, false),
        (Tcp, Grpc, true),
        (Tcp, GatewayHttp, true),
        (Tcp, PolicyHttp, true),
        (Tcp, Tls, true),
        (Tcp, Tcp, false),
        (Grpc, Tls, false),
        (GatewayHttp, Tcp, false),
    ] {
        assert_eq!(kind.conflicted_by(by), conflicted, "{kind:?} by {by:?}");
    }
}

fn opaque_route_name(index: &Index, port: u16) -> Option<String> {
    let target = OutboundTarget::Service {
        service: crate::ObjectRef {
            namespace: "emojivoto".into(),
            name: "web".into(),
        },
        port,
    };
    let policy = match index.outbound_policy(target, "emojivoto").unwrap() {
        OutboundLookup::Watch(rx) => (**rx.borrow()).clone(),
        OutboundLookup::Fixed(p) => (*p).clone(),
    };
    let OutboundPolicy::Service(policy) = policy else {
        panic!("{policy:?}")
    };
    match policy.protocol {
        OutboundProtocol::OpaqueRoute(route) => match route.reference {
            OutboundRouteRef::Resource { name, .. } => Some(name),
            other => panic!("{other:?}"),
        },
        OutboundProtocol::Opaque => None,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn offline_a_tcp_route_conflicted_by_a_tls_route_is_not_attached() {
    let index = with_web(true);
    index.apply(Event::Apply(yaml::<Service>(
        "metadata: {name: web, namespace: emojivoto}\nspec: {clusterIP: 10.0.0.1, ports: [{name: db, port: 5432, appProtocol: linkerd.io/opaque}]}\n",
    )));
    let parent = "[{kind: Service, name: web, port: 5432}]";
    apply_route(
        &index,
        "tcp",
        "c",
        parent,
        "[{name: emoji, port: 5432}]",
        "[]",
    );
    assert_eq!(opaque_route_name(&index, 5432).as_deref(), Some("c"));
    apply_route(&index, "tls", "t", parent, "[]", "[]");
    assert_eq!(opaque_route_name(&index, 5432), None);
}
