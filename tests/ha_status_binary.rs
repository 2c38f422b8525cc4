//! Two `policy-controller` replicas against one API server, as deploy/ha runs them (spec/policy.md
//! §1.4, §7.1): both serve, exactly one holds the Lease `policy-controller-write` and writes
//! route statuses; when it is killed, the other claims the Lease once the dead holder's claim
//! has run out (the Lease's 30 s), writes what changed meanwhile, and rewrites nothing that was
//! already in place. Each replica talks to the API server through its own port, so every write
//! is attributed to the replica that made it.

use e2e::{
    Process, binary, free_addr, http_get,
    kube_api::{FakeApi, Write, destination_deployment, gateway_http_route_crd},
};
use serde_json::{Value, json};
use std::{net::SocketAddr, time::Duration};

const ROUTES: &str = "/apis/gateway.networking.k8s.io/v1/httproutes";
const LEASES: &str = "/apis/coordination.k8s.io/v1/leases";
/// The Lease's duration as the controller writes it (spec §1.4).
const LEASE_SECONDS: u64 = 30;

fn service(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80}]},
    })
}

/// An HTTPRoute attached to port 80 of Service `parent`.
fn route(name: &str, parent: &str) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "shop", "generation": 1},
        "spec": {
            "parentRefs": [{"group": "core", "kind": "Service", "name": parent, "port": 80}],
            "rules": [{"backendRefs": [{"name": parent, "port": 80}]}],
        },
    })
}

struct Replica {
    hostname: &'static str,
    admin: SocketAddr,
    process: Process,
}

fn start(api: &FakeApi, listener: usize, hostname: &'static str, dir: &std::path::Path) -> Replica {
    let kubeconfig = dir.join(format!("kubeconfig-{listener}"));
    api.write_kubeconfig(listener, &kubeconfig);
    let (grpc, admin) = (free_addr(), free_addr());
    let args = vec![
        format!("--grpc-addr={grpc}"),
        format!("--admin-addr={admin}"),
        "--admission-controller-disabled".to_string(),
        "--log-level=info".to_string(),
    ];
    let process = Process::start_with_env(
        &binary("policy", "policy-controller"),
        &args,
        &[
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("HOSTNAME", hostname),
        ],
    );
    Replica {
        hostname,
        admin,
        process,
    }
}

/// The status patches in `writes`, as (listener, route name).
fn status_patches(writes: &[Write]) -> Vec<(usize, String)> {
    writes
        .iter()
        .filter(|w| w.collection == ROUTES && w.method == "PATCH")
        .map(|w| (w.listener, w.name.clone()))
        .collect()
}

/// The holder, `renewTime` and `acquireTime` of each Lease write, in order, with its listener.
fn lease_writes(writes: &[Write]) -> Vec<(usize, String, String, String)> {
    writes
        .iter()
        .filter(|w| w.collection == LEASES)
        .map(|w| {
            let spec = &w.object["spec"];
            let s = |f: &str| spec[f].as_str().unwrap_or_default().to_string();
            (
                w.listener,
                s("holderIdentity"),
                s("renewTime"),
                s("acquireTime"),
            )
        })
        .collect()
}

/// A counter's value in a replica's `/metrics`.
fn metric(admin: SocketAddr, name: &str) -> u64 {
    let (_, text) = http_get(admin, "/metrics").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// Seconds since the epoch of an RFC 3339 time of the Lease.
fn seconds(time: &str) -> f64 {
    let parsed: k8s_openapi::jiff::Timestamp = time.parse().unwrap();
    parsed.as_millisecond() as f64 / 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_writes_statuses_and_the_other_takes_over_when_it_dies() {
    let objects = vec![
        destination_deployment(),
        gateway_http_route_crd(),
        service("cart"),
        service("checkout"),
        route("cart-route", "cart"),
        route("checkout-route", "checkout"),
    ];
    let api = FakeApi::start(objects, 2).await;
    let dir = tempfile::tempdir().unwrap();
    let mut replicas = [
        start(&api, 0, "linkerd-destination-a", dir.path()),
        start(&api, 1, "linkerd-destination-b", dir.path()),
    ];
    for replica in &mut replicas {
        replica
            .process
            .wait_ready(replica.admin, Duration::from_secs(60));
    }

    // One replica claims the Lease and writes both statuses, once each.
    api.wait_for_writes(Duration::from_secs(30), |w| status_patches(w).len() >= 2)
        .await;
    let writes = api.writes();
    let leader = status_patches(&writes)[0].0;
    let follower = 1 - leader;
    let mut patched = status_patches(&writes);
    patched.sort();
    assert_eq!(
        patched,
        [
            (leader, "cart-route".to_string()),
            (leader, "checkout-route".to_string())
        ]
    );
    let leases = lease_writes(&writes);
    assert!(!leases.is_empty());
    assert!(
        leases.iter().all(
            |(listener, holder, ..)| *listener == leader && holder == replicas[leader].hostname
        ),
        "{leases:#?}"
    );
    let status = api
        .get(ROUTES, "shop", "cart-route")
        .unwrap()
        .get("status")
        .cloned()
        .unwrap();
    assert_eq!(
        status["parents"][0]["controllerName"],
        "linkerd.io/policy-controller"
    );
    assert_eq!(status["parents"][0]["conditions"][0]["type"], "Accepted");
    assert_eq!(status["parents"][0]["conditions"][0]["status"], "True");
    assert_eq!(
        metric(replicas[follower].admin, "resource_status_patches_total"),
        0
    );

    // The leader dies without a word; a route is created while no one writes.
    let _ = replicas[leader].process.child.kill();
    let _ = replicas[leader].process.child.wait();
    let last_renewal = lease_writes(&api.writes()).last().unwrap().2.clone();
    api.apply(route("payment-route", "checkout"));

    // The follower claims the Lease once the dead claim has run out, and writes the new
    // route's status.
    api.wait_for_writes(Duration::from_secs(LEASE_SECONDS + 15), |w| {
        status_patches(w)
            .iter()
            .any(|(_, name)| name == "payment-route")
    })
    .await;
    let writes = api.writes();
    let leases = lease_writes(&writes);
    let (listener, holder, _, acquired) = leases.last().unwrap().clone();
    assert_eq!(
        (listener, holder.as_str()),
        (follower, replicas[follower].hostname)
    );
    let waited = seconds(&acquired) - seconds(&last_renewal);
    assert!(
        waited >= LEASE_SECONDS as f64,
        "claimed {waited}s after the last renewal, before the claim ran out"
    );

    // A route created after the takeover is written too, and by then nothing else was: each
    // route's status was written once, by the replica that held the Lease at the time.
    api.apply(route("refund-route", "checkout"));
    api.wait_for_writes(Duration::from_secs(10), |w| {
        status_patches(w)
            .iter()
            .any(|(_, name)| name == "refund-route")
    })
    .await;
    let writes = api.writes();
    let mut patched = status_patches(&writes);
    patched.sort();
    let mut expected = vec![
        (leader, "cart-route".to_string()),
        (leader, "checkout-route".to_string()),
        (follower, "payment-route".to_string()),
        (follower, "refund-route".to_string()),
    ];
    expected.sort();
    assert_eq!(patched, expected);
    assert!(writes.iter().all(|w| !w.redundant), "{writes:#?}");
    assert_eq!(
        metric(replicas[follower].admin, "resource_status_patches_total"),
        2
    );
    assert_eq!(
        metric(
            replicas[follower].admin,
            "resource_status_patch_enqueues_total"
        ),
        2
    );
}
