//! The route status writer against a scripted Kubernetes API on loopback (spec/policy.md §7.1,
//! §7.2, §1.4): it writes only while this instance holds the Lease, sends exactly the desired
//! `status.parents` as a merge patch of the status subresource, never re-sends a status that
//! is in place, keeps other controllers' entries, stops the moment the Lease is lost, and
//! counts what its bounded queue cannot take. EgressNetwork statuses (§7.4) go the same way.

use axum::{
    Router,
    body::Bytes,
    extract::{Path, RawQuery, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, patch, post},
};
use k8s_openapi::{api::coordination::v1::Lease, api::core::v1::Service, jiff::Timestamp};
use kube::Api;
use linkerd_index::{Event, Fed, IndexMetrics, StatusIndex};

type Index = Fed<StatusIndex>;
use linkerd_k8s_api::gateway_api::httproutes::HttpRoute;
use policy::{
    lease::{self, Leadership, LeaseConfig},
    status::{self, StatusConfig, StatusMetrics},
};
use serde_json::{Value, json};
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

const NS: &str = "linkerd";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/linkerd/leases";

/// A request the API received: a successful Lease write, or a status patch.
#[derive(Clone, Debug)]
enum Logged {
    /// The Lease was written with this holder.
    Lease(String),
    Patch {
        path: String,
        query: String,
        content_type: String,
        body: Value,
    },
    /// A note from the test itself.
    Mark(&'static str),
}

/// The API's state: the Lease, its resourceVersion counter, a switch that makes Lease requests
/// fail with 500, how many of the next status patches fail with 500 (after being logged), and
/// everything written, in order.
#[derive(Default)]
struct Script {
    lease: Option<Value>,
    version: u64,
    leases_failing: bool,
    patches_failing: u32,
    log: Vec<Logged>,
}

type Shared = Arc<Mutex<Script>>;

fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn failure(code: u16, reason: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": reason, "reason": reason, "code": code,
    });
    json_response(StatusCode::from_u16(code).unwrap(), &body)
}

async fn read_lease(State(s): State<Shared>, Path(name): Path<String>) -> Response {
    let s = s.lock().unwrap();
    if s.leases_failing {
        return failure(500, "InternalError");
    }
    match &s.lease {
        Some(lease) if lease["metadata"]["name"] == name => json_response(StatusCode::OK, lease),
        _ => failure(404, "NotFound"),
    }
}

/// Create (`current` None) or replace with optimistic concurrency.
fn write_lease(s: &Shared, body: &Bytes, create: bool) -> Response {
    let Ok(mut lease) = serde_json::from_slice::<Value>(body) else {
        return failure(400, "BadRequest");
    };
    let mut s = s.lock().unwrap();
    if s.leases_failing {
        return failure(500, "InternalError");
    }
    let current = s
        .lease
        .as_ref()
        .map(|l| l["metadata"]["resourceVersion"].clone());
    if create && current.is_some() {
        return failure(409, "AlreadyExists");
    }
    if !create && current.as_ref() != Some(&lease["metadata"]["resourceVersion"]) {
        return failure(409, "Conflict");
    }
    s.version += 1;
    lease["metadata"]["resourceVersion"] = json!(s.version.to_string());
    let holder = lease["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    s.log.push(Logged::Lease(holder));
    s.lease = Some(lease.clone());
    json_response(StatusCode::OK, &lease)
}

async fn create_lease(State(s): State<Shared>, body: Bytes) -> Response {
    write_lease(&s, &body, true)
}

async fn replace_lease(State(s): State<Shared>, body: Bytes) -> Response {
    write_lease(&s, &body, false)
}

async fn patch_status(
    State(s): State<Shared>,
    Path((group, version, ns, plural, name)): Path<(String, String, String, String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return failure(400, "BadRequest");
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let object = json!({
        "apiVersion": format!("{group}/{version}"), "kind": body["kind"],
        "metadata": {"name": name, "namespace": ns},
        "status": body["status"],
    });
    let mut s = s.lock().unwrap();
    s.log.push(Logged::Patch {
        path: format!("/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}/status"),
        query: query.unwrap_or_default(),
        content_type,
        body,
    });
    if s.patches_failing > 0 {
        s.patches_failing -= 1;
        return failure(500, "InternalError");
    }
    json_response(StatusCode::OK, &object)
}

async fn start_api() -> (SocketAddr, Shared) {
    let state = Shared::default();
    let app = Router::new()
        .route(LEASES, post(create_lease))
        .route(
            &format!("{LEASES}/{{name}}"),
            get(read_lease).put(replace_lease),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}/status",
            patch(patch_status),
        )
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, state)
}

fn client(addr: SocketAddr) -> kube::Client {
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

/// Claims of 2 s, renewed every second.
fn lease_config(claimant: &str) -> LeaseConfig {
    LeaseConfig {
        duration: Duration::from_secs(2),
        renew_grace: Duration::from_secs(1),
        ..lease::config(claimant, NS)
    }
}

/// Another instance's claim, renewed now, for 2 s.
fn held_by(other: &str, version: u64) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": lease::LEASE_NAME, "namespace": NS, "resourceVersion": version.to_string()},
        "spec": {
            "holderIdentity": other, "leaseDurationSeconds": 2,
            "acquireTime": Timestamp::now().to_string(), "renewTime": Timestamp::now().to_string(),
            "leaseTransitions": 1,
        },
    })
}

/// No periodic reconciliation within a test: the scripted API does not feed writes back to
/// the index, so every period would re-send the same patches.
fn status_config(queue_capacity: usize) -> StatusConfig {
    StatusConfig {
        queue_capacity,
        patch_timeout: Duration::from_secs(5),
        reconcile_period: Duration::from_secs(3600),
    }
}

fn yaml<T: serde::de::DeserializeOwned>(s: &str) -> T {
    linkerd_k8s_api::yaml::from_str(s).expect("test object decodes")
}

/// A route-status index (cluster networks `10.0.0.0/8`) the test feeds.
fn status_index() -> Index {
    Fed::new(
        StatusIndex::new(vec!["10.0.0.0/8".parse().unwrap()]),
        StatusIndex::watch,
        IndexMetrics::default(),
    )
}

/// An index with Service `emojivoto/web` (cluster IP 10.0.0.1, port 80).
fn index() -> Index {
    let index = status_index();
    let web: Service = yaml(
        "metadata: {name: web, namespace: emojivoto}\nspec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}\n",
    );
    index.apply(Event::Apply(web));
    index
}

/// A Gateway API HTTPRoute on `web:80` and a Gateway, with `status.parents` as a JSON list.
fn apply_route(index: &Index, name: &str, status: Value) {
    let route: HttpRoute = yaml(&format!(
        "metadata: {{name: {name}, namespace: emojivoto}}\nspec:\n  parentRefs: [{{name: gw}}, {{kind: Service, name: web, port: 80}}]\n  rules: [{{backendRefs: [{{name: web, port: 80}}]}}]\nstatus: {{parents: {status}}}\n"
    ));
    index.apply(Event::Apply(route));
}

/// Our entry for `web:80`: accepted, refs resolved, conditions at `time`.
fn ours(time: &str) -> Value {
    let cond = |type_: &str| json!({"type": type_, "status": "True", "reason": type_, "message": "", "lastTransitionTime": time});
    json!({
        "parentRef": {"group": "core", "kind": "Service", "namespace": "emojivoto", "name": "web", "port": 80},
        "controllerName": "linkerd.io/policy-controller",
        "conditions": [cond("Accepted"), cond("ResolvedRefs")],
    })
}

/// Another controller's entry for the Gateway parent.
fn theirs() -> Value {
    json!({
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "emojivoto", "name": "gw"},
        "controllerName": "example.com/other",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "theirs", "lastTransitionTime": "2020-01-01T00:00:00Z"}],
    })
}

/// The names of the routes patched, in order, among `log`.
fn patched(log: &[Logged]) -> Vec<String> {
    log.iter()
        .filter_map(|l| match l {
            Logged::Patch { body, .. } => body["metadata"]["name"].as_str().map(str::to_string),
            _ => None,
        })
        .collect()
}

/// Waits (10 s deadline) until `done` holds for the API's log; returns the log.
async fn wait_log(api: &Shared, what: &str, done: impl Fn(&[Logged]) -> bool) -> Vec<Logged> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let log = api.lock().unwrap().log.clone();
        if done(&log) {
            return log;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} did not happen: {log:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_leader(leadership: &mut Leadership, value: bool) {
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while leadership.is_leader() != value {
            leadership.changed().await.expect("lease task running");
        }
    })
    .await;
    assert!(waited.is_ok(), "leadership did not become {value}");
}

/// Every watched kind listed: the writer may reconcile.
fn synced() -> tokio::sync::watch::Receiver<bool> {
    tokio::sync::watch::channel(true).1
}

/// The patch body whose `status.parents` strips condition times (they are "now").
fn without_times(mut body: Value) -> Value {
    for parent in body["status"]["parents"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        if parent["controllerName"] != "linkerd.io/policy-controller" {
            continue;
        }
        for c in parent["conditions"].as_array_mut().into_iter().flatten() {
            c["lastTransitionTime"] = json!("<now>");
        }
    }
    body
}

#[tokio::test]
async fn writes_only_once_the_lease_is_ours() {
    let (addr, api) = start_api().await;
    {
        let mut s = api.lock().unwrap();
        s.version = 5;
        s.lease = Some(held_by("pod-b", 5));
    }
    let index = index();
    apply_route(&index, "r", json!([theirs()]));
    let leadership = lease::spawn(
        Api::<Lease>::namespaced(client(addr), NS),
        lease_config("pod-a"),
    );
    let _writer = status::spawn(
        index.index().clone(),
        client(addr),
        leadership.clone(),
        synced(),
        status_config(100),
        StatusMetrics::default(),
    );
    // While pod-b holds the Lease, a change to the index reconciles nothing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!leadership.is_leader());
    apply_route(&index, "r2", json!([]));

    let log = wait_log(&api, "a patch", |log| patched(log).len() >= 2).await;
    // Nothing was patched before our Lease write; then exactly the desired statuses.
    let ours_at = log
        .iter()
        .position(|l| matches!(l, Logged::Lease(h) if h == "pod-a"))
        .expect("pod-a took the Lease");
    let first_patch = log
        .iter()
        .position(|l| matches!(l, Logged::Patch { .. }))
        .unwrap();
    assert!(ours_at < first_patch, "{log:#?}");
    assert_eq!(patched(&log), ["r", "r2"]);
    let Logged::Patch {
        path,
        query,
        content_type,
        body,
    } = log[first_patch].clone()
    else {
        unreachable!()
    };
    assert_eq!(
        path,
        "/apis/gateway.networking.k8s.io/v1/namespaces/emojivoto/httproutes/r/status"
    );
    assert!(
        query
            .split('&')
            .any(|q| q == "fieldManager=linkerd.io%2Fpolicy-controller"),
        "{query}"
    );
    assert_eq!(content_type, "application/merge-patch+json");
    assert_eq!(
        without_times(body.clone()),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r"},
            "status": {"parents": [theirs(), ours("<now>")]},
        })
    );
    // Condition times are set at write time (RFC 3339).
    let time = body["status"]["parents"][1]["conditions"][0]["lastTransitionTime"]
        .as_str()
        .unwrap();
    assert!(time.parse::<Timestamp>().is_ok(), "{time}");
}

#[tokio::test]
async fn a_status_in_place_is_not_sent_again_and_other_controllers_entries_survive() {
    let (addr, api) = start_api().await;
    let index = index();
    // Reconciled in name order: `a-in-place` comes first, so its patch would precede `b`'s.
    apply_route(
        &index,
        "a-in-place",
        json!([ours("2021-01-01T00:00:00Z"), theirs()]),
    );
    apply_route(&index, "b", json!([theirs()]));
    let _writer = status::spawn(
        index.index().clone(),
        client(addr),
        Leadership::fixed(true),
        synced(),
        status_config(100),
        StatusMetrics::default(),
    );
    let log = wait_log(&api, "the patch of b", |log| !patched(log).is_empty()).await;
    assert_eq!(patched(&log), ["b"]);
    let Logged::Patch { body, .. } = &log[0] else {
        panic!("{log:#?}")
    };
    assert_eq!(
        without_times(body.clone())["status"]["parents"],
        json!([theirs(), ours("<now>")])
    );
}

#[tokio::test]
async fn writes_stop_when_the_lease_is_lost() {
    let (addr, api) = start_api().await;
    let index = index();
    apply_route(&index, "r1", json!([]));
    let mut leadership = lease::spawn(
        Api::<Lease>::namespaced(client(addr), NS),
        lease_config("pod-a"),
    );
    let _writer = status::spawn(
        index.index().clone(),
        client(addr),
        leadership.clone(),
        synced(),
        status_config(100),
        StatusMetrics::default(),
    );
    wait_log(&api, "the patch of r1", |log| patched(log) == ["r1"]).await;

    // The API fails every Lease request: our claim runs out, and with it the writes.
    api.lock().unwrap().leases_failing = true;
    wait_leader(&mut leadership, false).await;
    api.lock().unwrap().log.push(Logged::Mark("lost"));
    apply_route(&index, "r2", json!([]));
    tokio::time::sleep(Duration::from_millis(500)).await;
    api.lock().unwrap().log.push(Logged::Mark("recovering"));
    api.lock().unwrap().leases_failing = false;

    // Back: the Lease is ours again, and the statuses are reconciled at once.
    let log = wait_log(&api, "the patch of r2", |log| {
        patched(log).iter().any(|r| r == "r2")
    })
    .await;
    let lost = log
        .iter()
        .position(|l| matches!(l, Logged::Mark("lost")))
        .unwrap();
    let regained = lost
        + log[lost..]
            .iter()
            .position(|l| matches!(l, Logged::Lease(_)))
            .expect("the Lease is claimed again");
    assert!(
        patched(&log[lost..regained]).is_empty(),
        "patched without the Lease: {log:#?}"
    );
    assert!(
        matches!(log[regained - 1], Logged::Mark("recovering")),
        "{log:#?}"
    );
    assert_eq!(patched(&log[regained..]), ["r1", "r2"]);
}

#[tokio::test]
async fn queue_overflows_are_counted() {
    let (addr, api) = start_api().await;
    let index = index();
    for name in ["r1", "r2", "r3", "r4"] {
        apply_route(&index, name, json!([]));
    }
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = StatusMetrics::register(&mut registry);
    // One slot: on this single-threaded runtime the writer cannot run while the controller
    // enqueues, so one patch fits and three overflow.
    let _writer = status::spawn(
        index.index().clone(),
        client(addr),
        Leadership::fixed(true),
        synced(),
        status_config(1),
        metrics,
    );
    wait_log(&api, "one patch", |log| !patched(log).is_empty()).await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_string()
    };
    assert_eq!(value("resource_status_patch_enqueues_total"), "1");
    assert_eq!(value("resource_status_patch_enqueue_overflows_total"), "3");
    assert_eq!(value("resource_status_patch_dequeues_total"), "1");
    assert_eq!(value("resource_status_patch_drops_total"), "0");
    assert_eq!(patched(&api.lock().unwrap().log), ["r1"]);
}

/// §7.4 through the writer: the EgressNetwork status goes to its status subresource at
/// v1alpha1, through the same queue, keeping its other conditions.
#[tokio::test]
async fn egress_network_statuses_are_written() {
    let (addr, api) = start_api().await;
    let index = status_index();
    let egress: linkerd_k8s_api::EgressNetwork = yaml(
        r#"
metadata: {name: internet, namespace: linkerd-egress}
spec: {trafficPolicy: Allow, networks: [{cidr: 10.1.0.0/16}, {cidr: 192.0.2.0/24}]}
status:
  conditions:
  - {type: Ready, status: "True", reason: Ready, message: kept, lastTransitionTime: "2020-01-01T00:00:00Z"}
"#,
    );
    index.apply(Event::Apply(egress));
    let _writer = status::spawn(
        index.index().clone(),
        client(addr),
        Leadership::fixed(true),
        synced(),
        status_config(100),
        StatusMetrics::default(),
    );
    let log = wait_log(&api, "a patch", |log| !patched(log).is_empty()).await;
    let Some(Logged::Patch { path, body, .. }) = log
        .iter()
        .find(|l| matches!(l, Logged::Patch { .. }))
        .cloned()
    else {
        unreachable!()
    };
    assert_eq!(
        path,
        "/apis/policy.linkerd.io/v1alpha1/namespaces/linkerd-egress/egressnetworks/internet/status"
    );
    let mut body = body;
    body["status"]["conditions"][1]["lastTransitionTime"] = json!("<now>");
    assert_eq!(
        body,
        json!({
            "apiVersion": "policy.linkerd.io/v1alpha1", "kind": "EgressNetwork",
            "metadata": {"name": "internet"},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "Ready", "message": "kept", "lastTransitionTime": "2020-01-01T00:00:00Z"},
                {"type": "Accepted", "status": "False", "reason": "EgressReasonNetworkOverlap", "message": "networks overlap with clusterNetworks", "lastTransitionTime": "<now>"},
            ]},
        })
    );
}

/// TLSRoutes and TCPRoutes are patched like HTTPRoutes, on their own status subresources at
/// v1alpha2 (§7.1), with the same field manager; the TCPRoute is conflicted by the TLSRoute.
#[tokio::test]
async fn tls_and_tcp_route_statuses_are_patched() {
    use linkerd_k8s_api::gateway_api::experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute};
    let (addr, api) = start_api().await;
    let index = index();
    let spec = "spec:\n  parentRefs: [{kind: Service, name: web, port: 80}]\n  rules: [{backendRefs: [{name: web, port: 80}]}]\n";
    let tls: TlsRoute = yaml(&format!(
        "metadata: {{name: t, namespace: emojivoto}}\n{spec}  hostnames: [web.example.com]\n"
    ));
    let tcp: TcpRoute = yaml(&format!(
        "metadata: {{name: c, namespace: emojivoto}}\n{spec}"
    ));
    index.apply(Event::Apply(tls));
    index.apply(Event::Apply(tcp));
    let _writer = status::spawn(
        index.index().clone(),
        client(addr),
        Leadership::fixed(true),
        synced(),
        status_config(100),
        StatusMetrics::default(),
    );
    let log = wait_log(&api, "two patches", |log| patched(log).len() >= 2).await;
    let patches: Vec<(String, String, Value)> = log
        .iter()
        .filter_map(|l| match l {
            Logged::Patch {
                path, query, body, ..
            } => Some((path.clone(), query.clone(), without_times(body.clone()))),
            _ => None,
        })
        .collect();
    let conflicted = {
        let mut entry = ours("<now>");
        entry["conditions"][0] = json!({"type": "Accepted", "status": "False", "reason": "RouteReasonConflicted", "message": "", "lastTransitionTime": "<now>"});
        entry
    };
    assert_eq!(
        patches
            .iter()
            .map(|(path, _, body)| (path.as_str(), body.clone()))
            .collect::<Vec<_>>(),
        [
            (
                "/apis/gateway.networking.k8s.io/v1alpha2/namespaces/emojivoto/tcproutes/c/status",
                json!({
                    "apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TCPRoute",
                    "metadata": {"name": "c"},
                    "status": {"parents": [conflicted]},
                })
            ),
            (
                "/apis/gateway.networking.k8s.io/v1alpha2/namespaces/emojivoto/tlsroutes/t/status",
                json!({
                    "apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TLSRoute",
                    "metadata": {"name": "t"},
                    "status": {"parents": [ours("<now>")]},
                })
            ),
        ]
    );
    for (_, query, _) in &patches {
        assert!(
            query
                .split('&')
                .any(|q| q == "fieldManager=linkerd.io%2Fpolicy-controller"),
            "{query}"
        );
    }
}

/// The value of the metric `name` in `registry`'s text encoding.
fn metric(registry: &prometheus_client::registry::Registry, name: &str) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .to_string()
}

/// Index changes that come before the writes are observed (the scripted API never reports
/// them back to the index) do not send the in-flight statuses again: each route is patched
/// once, not once per reconciliation (`bench-outbound` saw 51 patches for 10 routes).
#[tokio::test]
async fn statuses_in_flight_are_not_sent_again() {
    let (addr, api) = start_api().await;
    let index = index();
    let names: Vec<String> = (0..5).map(|i| format!("r{i}")).collect();
    for name in &names {
        apply_route(&index, name, json!([]));
    }
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = StatusMetrics::register(&mut registry);
    let _writer = status::spawn(
        index.index().clone(),
        client(addr),
        Leadership::fixed(true),
        synced(),
        status_config(100),
        metrics,
    );
    // Unrelated changes, each reconciling every route: a Service of its own, updated.
    for ip in 2..6 {
        let other: Service = yaml(&format!(
            "metadata: {{name: other, namespace: emojivoto}}\nspec: {{clusterIP: 10.0.0.{ip}, ports: [{{port: 81}}]}}\n"
        ));
        index.apply(Event::Apply(other));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A last route: its patch comes after every earlier reconciliation's.
    apply_route(&index, "z", json!([]));
    let log = wait_log(&api, "the patch of z", |log| {
        patched(log).iter().any(|r| r == "z")
    })
    .await;
    let mut expected = names.clone();
    expected.push("z".to_string());
    assert_eq!(patched(&log), expected);
    assert_eq!(
        metric(&registry, "resource_status_patch_enqueues_total"),
        "6"
    );
}

/// Once a write is observed its route is forgotten: when the observed status later differs
/// again (another writer reset it), the same desired status is sent again.
#[tokio::test]
async fn a_status_observed_and_then_reset_is_sent_again() {
    let (addr, api) = start_api().await;
    let index = index();
    apply_route(&index, "r", json!([theirs()]));
    let _writer = status::spawn(
        index.index().clone(),
        client(addr),
        Leadership::fixed(true),
        synced(),
        status_config(100),
        StatusMetrics::default(),
    );
    wait_log(&api, "the patch of r", |log| patched(log) == ["r"]).await;
    // The write comes back as an update: in place, nothing to send.
    apply_route(&index, "r", json!([theirs(), ours("2021-01-01T00:00:00Z")]));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(patched(&api.lock().unwrap().log), ["r"]);
    // Our entry is removed by someone else: the same status is sent again.
    apply_route(&index, "r", json!([theirs()]));
    let log = wait_log(&api, "the second patch of r", |log| patched(log).len() >= 2).await;
    assert_eq!(patched(&log), ["r", "r"]);
}

/// A patch the API refuses is forgotten, so the next reconciliation sends it again.
#[tokio::test]
async fn a_failed_patch_is_retried() {
    let (addr, api) = start_api().await;
    api.lock().unwrap().patches_failing = 1;
    let index = index();
    apply_route(&index, "r", json!([]));
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = StatusMetrics::register(&mut registry);
    let _writer = status::spawn(
        index.index().clone(),
        client(addr),
        Leadership::fixed(true),
        synced(),
        status_config(100),
        metrics,
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while metric(&registry, "resource_status_patch_api_errors_total") != "1" {
        assert!(tokio::time::Instant::now() < deadline, "no patch failed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // An unrelated change reconciles.
    let other: Service = yaml(
        "metadata: {name: other, namespace: emojivoto}\nspec: {clusterIP: 10.0.0.2, ports: [{port: 81}]}\n",
    );
    index.apply(Event::Apply(other));
    let log = wait_log(&api, "the retry of r", |log| patched(log).len() >= 2).await;
    assert_eq!(patched(&log), ["r", "r"]);
    assert_eq!(metric(&registry, "resource_status_patches_total"), "1");
}

/// A status writer that holds the Lease, reconciling every `period`.
fn spawn_leader(
    index: &Index,
    addr: SocketAddr,
    period: Duration,
) -> tokio::task::JoinHandle<Result<(), status::StatusError>> {
    let config = StatusConfig {
        reconcile_period: period,
        ..status_config(100)
    };
    status::spawn(
        index.index().clone(),
        client(addr),
        Leadership::fixed(true),
        synced(),
        config,
        StatusMetrics::default(),
    )
}

/// Nothing is written before every watched kind's initial list is in the index (a CI run
/// found each route written twice: `BackendNotFound` while the Services were still listing,
/// then `Accepted`); once it is, each status is written once.
#[tokio::test]
async fn nothing_is_written_before_the_index_has_every_initial_list() {
    let (addr, api) = start_api().await;
    let index = index();
    apply_route(&index, "r", json!([theirs()]));
    let (lists_in, synced) = tokio::sync::watch::channel(false);
    let _writer = status::spawn(
        index.index().clone(),
        client(addr),
        Leadership::fixed(true),
        synced,
        status_config(100),
        StatusMetrics::default(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    apply_route(&index, "r2", json!([]));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(patched(&api.lock().unwrap().log).is_empty());
    lists_in.send_replace(true);
    let log = wait_log(&api, "both patches", |log| patched(log).len() >= 2).await;
    assert_eq!(patched(&log), ["r", "r2"]);
}

/// The periodic reconciliation forgets what has been in flight for a period: a write never
/// observed (here the scripted API never reports it back, as when another writer overwrote it
/// first) is sent again each period while the observed status still differs.
#[tokio::test]
async fn a_status_never_observed_is_sent_again_each_period() {
    let (addr, api) = start_api().await;
    let index = index();
    apply_route(&index, "r", json!([]));
    let _writer = spawn_leader(&index, addr, Duration::from_millis(300));
    let log = wait_log(&api, "a second patch of r", |log| patched(log).len() >= 2).await;
    assert_eq!(patched(&log)[..2], ["r", "r"]);
}

/// Found by the HA test under load (`ha_status_binary`: the new leader patched a route twice):
/// the periodic reconciliation forgot every status in flight, also one queued a moment before
/// the tick whose write had not come back yet, and sent it again. Now only what stayed
/// unobserved for a whole period is sent again.
#[tokio::test]
async fn a_status_queued_just_before_a_periodic_reconciliation_is_not_sent_twice() {
    let (addr, api) = start_api().await;
    let index = index();
    let _writer = spawn_leader(&index, addr, Duration::from_millis(1000));
    // Queued 800 ms into the first period (the scripted API never reports the write back).
    tokio::time::sleep(Duration::from_millis(800)).await;
    apply_route(&index, "late", json!([]));
    wait_log(&api, "the patch of late", |log| patched(log) == ["late"]).await;
    // The tick at 1 s keeps it: at 1.7 s it was still written once.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(patched(&api.lock().unwrap().log), ["late"]);
    // Unobserved for a whole period by the tick at 2 s: sent again.
    let log = wait_log(&api, "a second patch of late", |log| {
        patched(log).len() >= 2
    })
    .await;
    assert_eq!(patched(&log)[..2], ["late", "late"]);
}
