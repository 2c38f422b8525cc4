//! The status writer's Lease against a scripted Kubernetes API on loopback (spec/policy.md
//! §1.4): created when absent, left alone while another instance holds it, taken over when that
//! claim runs out, and given up the moment our own claim runs out without a renewal.

use axum::{
    Router,
    body::Bytes,
    extract::{Path, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use k8s_openapi::{api::coordination::v1::Lease, jiff::Timestamp};
use kube::Api;
use policy::lease::{self, Leadership, LeaseConfig};
use serde_json::{Value, json};
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

const NS: &str = "linkerd";
const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/linkerd/leases";

/// The API's state: the Lease (if any), its resourceVersion counter, and a switch that makes
/// every request fail with 500.
#[derive(Default)]
struct Script {
    lease: Option<Value>,
    version: u64,
    failing: bool,
    writes: Vec<String>,
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

fn status(code: u16, reason: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": reason, "reason": reason, "code": code,
    });
    json_response(StatusCode::from_u16(code).unwrap(), &body)
}

async fn read(State(s): State<Shared>, Path(name): Path<String>) -> Response {
    let s = s.lock().unwrap();
    if s.failing {
        return status(500, "InternalError");
    }
    match &s.lease {
        Some(lease) if lease["metadata"]["name"] == name => json_response(StatusCode::OK, lease),
        _ => status(404, "NotFound"),
    }
}

async fn create(State(s): State<Shared>, body: Bytes) -> Response {
    let Ok(mut lease) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest");
    };
    let mut s = s.lock().unwrap();
    if s.failing {
        return status(500, "InternalError");
    }
    if s.lease.is_some() {
        return status(409, "AlreadyExists");
    }
    s.version += 1;
    lease["metadata"]["resourceVersion"] = json!(s.version.to_string());
    s.writes
        .push(format!("create {}", lease["spec"]["holderIdentity"]));
    s.lease = Some(lease.clone());
    json_response(StatusCode::CREATED, &lease)
}

async fn replace(State(s): State<Shared>, Path(_name): Path<String>, body: Bytes) -> Response {
    let Ok(mut lease) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest");
    };
    let mut s = s.lock().unwrap();
    if s.failing {
        return status(500, "InternalError");
    }
    let current = s
        .lease
        .as_ref()
        .map(|l| l["metadata"]["resourceVersion"].clone());
    if current.as_ref() != Some(&lease["metadata"]["resourceVersion"]) {
        return status(409, "Conflict");
    }
    s.version += 1;
    lease["metadata"]["resourceVersion"] = json!(s.version.to_string());
    s.writes
        .push(format!("replace {}", lease["spec"]["holderIdentity"]));
    s.lease = Some(lease.clone());
    json_response(StatusCode::OK, &lease)
}

async fn start_api() -> (SocketAddr, Shared) {
    let state = Shared::default();
    let app = Router::new()
        .route(PATH, post(create))
        .route(&format!("{PATH}/{{name}}"), get(read).put(replace))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, state)
}

fn leases(addr: SocketAddr) -> Api<Lease> {
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    Api::namespaced(kube::Client::try_from(config).unwrap(), NS)
}

/// Claims of 2 s, renewed every second.
fn config(claimant: &str) -> LeaseConfig {
    LeaseConfig {
        duration: Duration::from_secs(2),
        renew_grace: Duration::from_secs(1),
        ..lease::config(claimant, NS)
    }
}

async fn wait_for(leadership: &mut Leadership, value: bool, within: Duration) {
    let waited = tokio::time::timeout(within, async {
        while leadership.is_leader() != value {
            leadership.changed().await.expect("lease task running");
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "leadership did not become {value} within {within:?}"
    );
}

/// Another instance's claim, renewed now.
fn held_by(other: &str, version: u64) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": lease::LEASE_NAME, "namespace": NS, "resourceVersion": version.to_string()},
        "spec": {
            "holderIdentity": other, "leaseDurationSeconds": 2,
            "acquireTime": Timestamp::now().to_string(), "renewTime": Timestamp::now().to_string(),
            "leaseTransitions": 3,
        },
    })
}

#[tokio::test]
async fn an_absent_lease_is_created_and_renewed() {
    let (addr, api) = start_api().await;
    let mut leadership = lease::spawn(leases(addr), config("pod-a"));
    wait_for(&mut leadership, true, Duration::from_secs(5)).await;
    let lease = api.lock().unwrap().lease.clone().unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "pod-a");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 2);
    assert_eq!(lease["spec"]["leaseTransitions"], 0);
    assert_eq!(
        lease["metadata"]["labels"]["linkerd.io/control-plane-component"],
        "destination"
    );
    assert_eq!(
        lease["metadata"]["labels"]["linkerd.io/control-plane-ns"],
        "linkerd"
    );
    // Renewed about every second while held, and still ours.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(leadership.is_leader());
    let writes = api.lock().unwrap().writes.clone();
    assert_eq!(writes[0], "create \"pod-a\"");
    assert!(writes.len() >= 3, "{writes:?}");
    assert!(
        writes[1..].iter().all(|w| w == "replace \"pod-a\""),
        "{writes:?}"
    );
}

#[tokio::test]
async fn a_lease_held_elsewhere_is_taken_over_only_once_it_runs_out() {
    let (addr, api) = start_api().await;
    {
        let mut s = api.lock().unwrap();
        s.version = 7;
        s.lease = Some(held_by("pod-b", 7));
    }
    let mut leadership = lease::spawn(leases(addr), config("pod-a"));
    // pod-b keeps renewing for 3 s: we never hold it meanwhile, and never write.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!leadership.is_leader(), "took a Lease that pod-b holds");
        let mut s = api.lock().unwrap();
        s.version += 1;
        let version = s.version;
        s.lease = Some(held_by("pod-b", version));
    }
    assert!(api.lock().unwrap().writes.is_empty());
    // pod-b stops: its 2 s claim runs out, then we take over.
    wait_for(&mut leadership, true, Duration::from_secs(5)).await;
    let lease = api.lock().unwrap().lease.clone().unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "pod-a");
    assert_eq!(lease["spec"]["leaseTransitions"], 4);
}

#[tokio::test]
async fn leadership_ends_when_the_claim_runs_out_without_renewal() {
    let (addr, api) = start_api().await;
    let mut leadership = lease::spawn(leases(addr), config("pod-a"));
    wait_for(&mut leadership, true, Duration::from_secs(5)).await;
    // The API goes away: no renewal succeeds, so within the 2 s claim we are no longer leader.
    let renewed: Timestamp = {
        let mut s = api.lock().unwrap();
        s.failing = true;
        s.lease.as_ref().unwrap()["spec"]["renewTime"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    wait_for(&mut leadership, false, Duration::from_secs(4)).await;
    // Given up when the claim ran out (2 s after its last renewal), not at some later retry;
    // the margin is for a loaded machine's scheduling.
    let since_renewal = Timestamp::now().duration_since(renewed);
    assert!(
        since_renewal <= k8s_openapi::jiff::SignedDuration::from_millis(3000),
        "leadership kept {since_renewal:?} after the last renewal"
    );
    // Back: our own expired Lease is claimed again.
    api.lock().unwrap().failing = false;
    wait_for(&mut leadership, true, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn of_two_instances_one_holds_the_lease() {
    let (addr, api) = start_api().await;
    let a = lease::spawn(leases(addr), config("pod-a"));
    let b = lease::spawn(leases(addr), config("pod-b"));
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert!(
        a.is_leader() ^ b.is_leader(),
        "a {} b {}",
        a.is_leader(),
        b.is_leader()
    );
    let holder = api.lock().unwrap().lease.clone().unwrap()["spec"]["holderIdentity"].clone();
    assert_eq!(holder, if a.is_leader() { "pod-a" } else { "pod-b" });
}
