//! `GetProfile` updates on open streams: ServiceProfiles created, edited and deleted, a Server
//! flipping a port to opaque, the Service annotation changing, and the regressions of spec
//! §H.1–H.3.

mod support;

use serde_json::{Value, json};
use support::*;

const NS: &str = "shop";
const PATH: &str = "web.shop.svc.cluster.local:80";

fn route_names(p: &linkerd2_proxy_api::destination::DestinationProfile) -> Vec<String> {
    p.routes
        .iter()
        .map(|r| r.metrics_labels.get("route").cloned().unwrap_or_default())
        .collect()
}

fn profile(ns: &str, routes: &[(&str, &str)]) -> Value {
    json!({
        "apiVersion": "linkerd.io/v1alpha2",
        "kind": "ServiceProfile",
        "metadata": {"name": "web.shop.svc.cluster.local", "namespace": ns},
        "spec": {"routes": routes.iter().map(|(name, path)| json!({
            "name": name, "condition": {"method": "GET", "pathRegex": path},
        })).collect::<Vec<_>>()},
    })
}

fn server(name: &str, port: Value, protocol: &str) -> Value {
    json!({
        "apiVersion": "policy.linkerd.io/v1beta3",
        "kind": "Server",
        "metadata": {"name": name, "namespace": NS, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "port": port, "proxyProtocol": protocol},
    })
}

fn shop() -> StateDir {
    let dir = StateDir::new();
    dir.write("svc.yaml", &[mk_service(NS, "web", &[("http", 80)])]);
    dir.write("pods.yaml", &[mk_pod(NS, "web-a", "10.1.0.1", "web")]);
    dir.write(
        "slice.yaml",
        &[mk_slice(
            NS,
            "web-1",
            "web",
            ("http", 8080),
            &[("web-a", "10.1.0.1", true)],
        )],
    );
    dir
}

#[tokio::test]
async fn service_profile_created_edited_and_deleted() {
    let dir = shop();
    let mut h = Harness::start(dir.path()).await;
    let mut stream = h.get_profile(PATH, "").await.unwrap();
    let first = next_profile(&mut stream).await;
    assert!(first.routes.is_empty(), "default profile first");

    dir.write("sp.yaml", &[profile(NS, &[("list", "/list")])]);
    assert_eq!(route_names(&next_profile(&mut stream).await), ["list"]);

    dir.write(
        "sp.yaml",
        &[profile(NS, &[("list", "/list"), ("get", "/get")])],
    );
    assert_eq!(
        route_names(&next_profile(&mut stream).await),
        ["list", "get"]
    );

    dir.remove("sp.yaml");
    let last = next_profile(&mut stream).await;
    assert!(last.routes.is_empty());
    assert_eq!(last, first, "back to the default profile");
    assert_no_profile(&mut stream).await;
}

#[tokio::test]
async fn client_namespace_profile_wins_over_the_service_namespace() {
    let dir = shop();
    dir.write("sp.yaml", &[profile(NS, &[("server-side", "/a")])]);
    dir.write(
        "sp-client.yaml",
        &[profile("client", &[("client-side", "/b")])],
    );
    let mut h = Harness::start(dir.path()).await;
    let mine = h.first_profile(PATH, r#"{"ns":"client"}"#).await;
    assert_eq!(route_names(&mine), ["client-side"]);
    let others = h.first_profile(PATH, r#"{"ns":"elsewhere"}"#).await;
    assert_eq!(route_names(&others), ["server-side"]);

    let mut stream = h.get_profile(PATH, r#"{"ns":"client"}"#).await.unwrap();
    next_profile(&mut stream).await;
    dir.remove("sp-client.yaml");
    assert_eq!(
        route_names(&next_profile(&mut stream).await),
        ["server-side"],
        "falls back to the service namespace's profile"
    );
}

#[tokio::test]
async fn invalid_profile_serves_the_default_and_spares_others() {
    let dir = shop();
    dir.write(
        "svc2.yaml",
        &[json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "api", "namespace": NS},
            "spec": {"clusterIP": "10.96.0.11", "ports": [{"name": "http", "port": 80}]},
        })],
    );
    let mut good = profile(NS, &[("ok", "/ok")]);
    good["metadata"]["name"] = json!("api.shop.svc.cluster.local");
    let mut bad = profile(NS, &[("broken", "/books/([0-9]+")]);
    bad["spec"]["routes"][0]["timeout"] = json!("250");
    dir.write("sps.yaml", &[good, bad]);
    let mut h = Harness::start(dir.path()).await;
    let web = h.first_profile(PATH, "").await;
    assert!(
        web.routes.is_empty(),
        "the invalid profile is skipped: {web:?}"
    );
    assert_eq!(web.retry_budget.unwrap().retry_ratio, 0.2);
    let api = h.first_profile("api.shop.svc.cluster.local:80", "").await;
    assert_eq!(route_names(&api), ["ok"]);
}

#[tokio::test]
async fn service_opaque_annotation_change() {
    let dir = shop();
    let mut h = Harness::start(dir.path()).await;
    let mut stream = h.get_profile(PATH, "").await.unwrap();
    assert!(!next_profile(&mut stream).await.opaque_protocol);

    let mut svc = mk_service(NS, "web", &[("http", 80)]);
    svc["metadata"]["annotations"] = json!({"config.linkerd.io/opaque-ports": "http"});
    dir.write("svc.yaml", &[svc]);
    assert!(
        next_profile(&mut stream).await.opaque_protocol,
        "named service port"
    );

    dir.write("svc.yaml", &[mk_service(NS, "web", &[("http", 80)])]);
    assert!(!next_profile(&mut stream).await.opaque_protocol);
}

#[tokio::test]
async fn server_flips_a_pod_port_to_opaque() {
    let dir = shop();
    let mut h = Harness::start(dir.path()).await;
    let mut ep = h.get_profile("10.1.0.1:8080", "").await.unwrap();
    assert!(!next_profile(&mut ep).await.opaque_protocol);
    let mut get = h.get(PATH, "").await.unwrap();
    next(&mut get).await;

    dir.write("srv.yaml", &[server("web-http", json!("http"), "opaque")]);
    let p = next_profile(&mut ep).await;
    assert!(p.opaque_protocol);
    let hint = p.endpoint.unwrap().protocol_hint.unwrap();
    assert_eq!(hint.opaque_transport.map(|t| t.inbound_port), Some(4143));
    // The same Server reaches Get streams.
    match next(&mut get).await {
        linkerd2_proxy_api::destination::update::Update::Add(set) => {
            let hint = set.addrs[0].protocol_hint.unwrap();
            assert_eq!(hint.opaque_transport.map(|t| t.inbound_port), Some(4143));
        }
        other => panic!("expected Add, got {other:?}"),
    }

    // Switching it to HTTP/1 makes the port non-opaque again.
    dir.write("srv.yaml", &[server("web-http", json!(8080), "HTTP/1")]);
    assert!(!next_profile(&mut ep).await.opaque_protocol);
    // A Server in another namespace never reaches this pod (§H.5).
    let mut other = server("web-http", json!(8080), "opaque");
    other["metadata"]["namespace"] = json!("elsewhere");
    dir.write("srv2.yaml", &[other]);
    assert_no_profile(&mut ep).await;
}

/// A native-sidecar pod: the proxy among the init containers, admin port 4191 declared there.
fn native_sidecar_pod(phase: &str) -> Value {
    let mut pod = mk_pod(NS, "web-a", "10.1.0.1", "web");
    let proxy = pod["spec"]["containers"][0].clone();
    let mut init = proxy;
    init["restartPolicy"] = json!("Always");
    init["ports"] = json!([{"name": "linkerd-admin", "containerPort": 4191}]);
    pod["spec"]["initContainers"] = json!([init]);
    pod["spec"]["containers"] = json!([pod["spec"]["containers"][1].clone()]);
    pod["status"]["phase"] = json!(phase);
    pod
}

#[tokio::test]
async fn h1_native_sidecar_admin_port_follows_pending_to_running() {
    let dir = shop();
    dir.write("pods.yaml", &[native_sidecar_pod("Pending")]);
    let mut h = Harness::start(dir.path()).await;
    let mut stream = h.get_profile("10.1.0.1:4191", "").await.unwrap();
    let pending = next_profile(&mut stream).await.endpoint.unwrap();
    assert!(pending.tls_identity.is_none(), "no workload while Pending");

    dir.write("pods.yaml", &[native_sidecar_pod("Running")]);
    let running = next_profile(&mut stream).await.endpoint.unwrap();
    assert!(running.tls_identity.is_some(), "identity once Running");
    let hint = running.protocol_hint.unwrap();
    assert!(
        hint.opaque_transport.is_none(),
        "admin port: no opaque transport (§H.2)"
    );
}

#[tokio::test]
async fn h2_admin_and_control_ports_never_get_opaque_transport() {
    let dir = shop();
    let mut pod = mk_pod(NS, "web-a", "10.1.0.1", "web");
    pod["metadata"]["annotations"] = json!({"config.linkerd.io/opaque-ports": "4190,4191,8080"});
    dir.write("pods.yaml", &[pod]);
    let mut h = Harness::start(dir.path()).await;
    for port in [4190, 4191] {
        let ep = h
            .first_profile(&format!("10.1.0.1:{port}"), "")
            .await
            .endpoint
            .unwrap();
        let hint = ep.protocol_hint.unwrap();
        assert!(hint.opaque_transport.is_none(), "port {port}: {hint:?}");
    }
    let app = h.first_profile("10.1.0.1:8080", "").await.endpoint.unwrap();
    let hint = app.protocol_hint.unwrap();
    assert_eq!(hint.opaque_transport.map(|t| t.inbound_port), Some(4143));
}

#[tokio::test]
async fn h3_reused_pod_ip_resolves_to_the_running_pod() {
    let dir = shop();
    let mut done = mk_pod(NS, "job-old", "10.1.0.1", "batch");
    done["status"]["phase"] = json!("Succeeded");
    dir.write("pods.yaml", &[done, mk_pod(NS, "web-a", "10.1.0.1", "web")]);
    let mut h = Harness::start(dir.path()).await;
    let ep = h.first_profile("10.1.0.1:8080", "").await.endpoint.unwrap();
    assert_eq!(
        sorted(&ep.metric_labels).get("pod").map(String::as_str),
        Some("web-a")
    );
}

fn external_workload(ip: &str) -> Value {
    json!({
        "apiVersion": "workload.linkerd.io/v1beta1",
        "kind": "ExternalWorkload",
        "metadata": {"name": "vm-01", "namespace": NS, "labels": {"app": "vm"}},
        "spec": {
            "meshTLS": {"identity": "spiffe://root.linkerd.cluster.local/vm-01", "serverName": "vm-01.cluster.local"},
            "ports": [{"name": "http", "port": 8080}],
            "workloadIPs": [{"ip": ip}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })
}

#[tokio::test]
async fn h18_external_workload_deleted_under_an_endpoint_profile() {
    let dir = shop();
    dir.write("ew.yaml", &[external_workload("10.20.0.5")]);
    let mut h = Harness::start(dir.path()).await;
    let mut stream = h.get_profile("10.20.0.5:8080", "").await.unwrap();
    let ep = next_profile(&mut stream).await.endpoint.unwrap();
    assert_eq!(
        sorted(&ep.metric_labels).get("external_workload"),
        Some(&"vm-01".to_string()),
        "{ep:?}"
    );
    assert_eq!(
        sorted(&ep.metric_labels)
            .get("external_workload")
            .map(String::as_str),
        Some("vm-01")
    );

    dir.remove("ew.yaml");
    let gone = next_profile(&mut stream).await.endpoint.unwrap();
    assert!(gone.tls_identity.is_none(), "workload detached: {gone:?}");
    assert!(gone.metric_labels.is_empty());
    // The server keeps serving: a new stream on the same address works.
    let again = h.first_profile("10.20.0.5:8080", "").await;
    assert_eq!(addr_of(&again.endpoint.unwrap()), sa("10.20.0.5:8080"));
}

/// The identity name of an endpoint profile's address.
fn identity(p: &linkerd2_proxy_api::destination::DestinationProfile) -> Option<String> {
    use linkerd2_proxy_api::destination::tls_identity::Strategy;
    match p
        .endpoint
        .as_ref()?
        .tls_identity
        .as_ref()?
        .strategy
        .as_ref()?
    {
        Strategy::DnsLikeIdentity(id) => Some(id.name.clone()),
        Strategy::UriLikeIdentity(id) => Some(id.uri.clone()),
    }
}

/// A pod change no field of the endpoint profile reads (labels and annotations nothing
/// translates, a probe, status conditions, resourceVersion) sends nothing; the next visible
/// change (a new service account) is the next profile. Checked with `Get`'s tester finding:
/// a profile equal to the last sent is not re-sent (§D.5).
#[tokio::test]
async fn a_pod_change_no_profile_field_reads_sends_nothing() {
    let dir = shop();
    let mut h = Harness::start(dir.path()).await;
    let mut stream = h.get_profile("10.1.0.1:8080", "").await.unwrap();
    let first = next_profile(&mut stream).await;
    assert_eq!(
        identity(&first).as_deref(),
        Some("web.shop.serviceaccount.identity.linkerd.cluster.local")
    );
    let mut rx = h
        .index
        .endpoint_profile(linkerd_index::EndpointProfileKey {
            ip: "10.1.0.1".parse().unwrap(),
            port: 8080,
        })
        .unwrap();

    let changed = |sa: &str| mk_pod_changed_invisibly(NS, "web-a", "10.1.0.1", sa);
    dir.write("pods.yaml", &[changed("web")]);
    // The change reached the topic the stream reads.
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            let labelled = match &rx.borrow_and_update().endpoint.workload {
                linkerd_index::Workload::Pod { pod, .. } => pod.labels.get("team").is_some(),
                _ => false,
            };
            if labelled {
                break;
            }
            rx.changed().await.unwrap();
        }
    })
    .await
    .expect("the pod change indexed within 5s");
    assert_no_profile(&mut stream).await;

    dir.write("pods.yaml", &[changed("web-v2")]);
    let next = next_profile(&mut stream).await;
    assert_eq!(
        identity(&next).as_deref(),
        Some("web-v2.shop.serviceaccount.identity.linkerd.cluster.local")
    );
    assert_eq!(
        next.endpoint.as_ref().unwrap().metric_labels["serviceaccount"],
        "web-v2"
    );
    assert_no_profile(&mut stream).await;
}

/// The `pod` metric label of an endpoint profile's address.
fn pod_label(p: &linkerd2_proxy_api::destination::DestinationProfile) -> Option<String> {
    p.endpoint.as_ref()?.metric_labels.get("pod").cloned()
}

/// A pod replaced by a pod of another name on the same IP in one write (the old one deleted,
/// the new one created): the endpoint profile goes from one pod to the other, never through a
/// profile without a workload (tester finding: the write's Pods reach the index as the new
/// pods first, then the deletions, and in between both pods claimed the IP, so none was
/// attached).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_renamed_on_its_ip_keeps_its_endpoint_profile() {
    let dir = shop();
    let mut h = Harness::start(dir.path()).await;
    let mut stream = h.get_profile("10.1.0.1:8080", "").await.unwrap();
    assert_eq!(
        pod_label(&next_profile(&mut stream).await).as_deref(),
        Some("web-a")
    );

    dir.write("pods.yaml", &[mk_pod(NS, "web-a2", "10.1.0.1", "web")]);
    let next = next_profile(&mut stream).await;
    assert_eq!(pod_label(&next).as_deref(), Some("web-a2"), "{next:?}");
    assert_eq!(
        identity(&next).as_deref(),
        Some("web.shop.serviceaccount.identity.linkerd.cluster.local")
    );
    assert_no_profile(&mut stream).await;
}
