//! `Destination.Get` for Services backed by ExternalWorkloads: their slice endpoints follow the
//! rules of pod endpoints (spec/destination.md §B.2, §C.3, §C.4): readiness, the slice's
//! `kubernetes.io/service-name` label, and the address family; offline, a Service whose selector
//! matches ExternalWorkloads gets the slices the controller would write (spec §K) without any
//! slice in the state.

mod support;

use linkerd2_proxy_api::destination::update::Update;
use serde_json::{Value, json};
use support::*;

const NS: &str = "vms";
const PATH: &str = "vm.vms.svc.cluster.local:80";

fn external_workload(name: &str, ips: &[&str]) -> Value {
    json!({
        "apiVersion": "workload.linkerd.io/v1beta1",
        "kind": "ExternalWorkload",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "vm"}},
        "spec": {
            "meshTLS": {
                "identity": format!("spiffe://root.linkerd.cluster.local/{name}"),
                "serverName": format!("{name}.cluster.local"),
            },
            "ports": [{"name": "http", "port": 8080}],
            "workloadIPs": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })
}

/// A slice of ExternalWorkload endpoints `(workload, ip, ready)` with `labels`.
fn external_slice(
    name: &str,
    labels: Value,
    address_type: &str,
    endpoints: &[(&str, &str, bool)],
) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "addressType": address_type,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints.iter().map(|(ew, ip, ready)| json!({
            "addresses": [ip],
            "conditions": {"ready": ready, "serving": ready, "terminating": false},
            "targetRef": {"kind": "ExternalWorkload", "name": ew, "namespace": NS},
        })).collect::<Vec<_>>(),
    })
}

fn service_label() -> Value {
    json!({
        "kubernetes.io/service-name": "vm",
        "endpointslice.kubernetes.io/managed-by": "linkerd.io/external-workloads-controller",
    })
}

fn vms() -> StateDir {
    let dir = StateDir::new();
    dir.write("svc.yaml", &[mk_service(NS, "vm", &[("http", 80)])]);
    dir.write(
        "ews.yaml",
        &[
            external_workload("vm-a", &["10.20.0.1", "fd00:20::1"]),
            external_workload("vm-b", &["10.20.0.2"]),
            external_workload("vm-c", &["10.20.0.3"]),
        ],
    );
    dir
}

async fn add_addrs(h: &mut Harness) -> Vec<std::net::SocketAddr> {
    let mut stream = h.get(PATH, "").await.unwrap();
    match next(&mut stream).await {
        Update::Add(set) => {
            let mut addrs: Vec<_> = set.addrs.iter().map(addr_of).collect();
            addrs.sort();
            addrs
        }
        other => panic!("expected Add, got {other:?}"),
    }
}

#[tokio::test]
async fn external_workload_endpoints_follow_slice_readiness() {
    let dir = vms();
    dir.write(
        "slice.yaml",
        &[external_slice(
            "vm-1",
            service_label(),
            "IPv4",
            &[
                ("vm-a", "10.20.0.1", true),
                ("vm-b", "10.20.0.2", false),
                ("vm-c", "10.20.0.3", true),
            ],
        )],
    );
    let mut h = Harness::start(dir.path()).await;
    let mut stream = h.get(PATH, "").await.unwrap();
    match next(&mut stream).await {
        Update::Add(set) => {
            let mut addrs: Vec<_> = set.addrs.iter().map(addr_of).collect();
            addrs.sort();
            assert_eq!(
                addrs,
                [sa("10.20.0.1:8080"), sa("10.20.0.3:8080")],
                "vm-b is not ready"
            );
        }
        other => panic!("expected Add, got {other:?}"),
    }

    // vm-a turns not ready: it is removed.
    dir.write(
        "slice.yaml",
        &[external_slice(
            "vm-1",
            service_label(),
            "IPv4",
            &[
                ("vm-a", "10.20.0.1", false),
                ("vm-b", "10.20.0.2", false),
                ("vm-c", "10.20.0.3", true),
            ],
        )],
    );
    match next(&mut stream).await {
        Update::Remove(set) => {
            let addrs: Vec<_> = set
                .addrs
                .into_iter()
                .map(|a| std::net::SocketAddr::try_from(a).unwrap())
                .collect();
            assert_eq!(addrs, [sa("10.20.0.1:8080")]);
        }
        other => panic!("expected Remove, got {other:?}"),
    }
}

#[tokio::test]
async fn external_workload_slices_without_the_service_label_are_ignored() {
    let dir = vms();
    dir.write(
        "slice.yaml",
        &[
            external_slice(
                "vm-unlabelled",
                json!({"endpointslice.kubernetes.io/managed-by": "linkerd.io/external-workloads-controller"}),
                "IPv4",
                &[("vm-b", "10.20.0.2", true)],
            ),
            external_slice(
                "vm-1",
                service_label(),
                "IPv4",
                &[("vm-a", "10.20.0.1", true)],
            ),
        ],
    );
    let mut h = Harness::start(dir.path()).await;
    assert_eq!(add_addrs(&mut h).await, [sa("10.20.0.1:8080")]);
}

#[tokio::test]
async fn external_workload_ipv6_endpoints_follow_enable_ipv6() {
    let dir = vms();
    dir.write(
        "slice.yaml",
        &[
            external_slice(
                "vm-v4",
                service_label(),
                "IPv4",
                &[("vm-a", "10.20.0.1", true), ("vm-b", "10.20.0.2", true)],
            ),
            external_slice(
                "vm-v6",
                service_label(),
                "IPv6",
                &[("vm-a", "fd00:20::1", true)],
            ),
        ],
    );
    // IPv6 disabled: the IPv6 slice is ignored, as for pods.
    let mut v4 = Harness::start_with(dir.path(), chart_config(), false).await;
    assert_eq!(
        add_addrs(&mut v4).await,
        [sa("10.20.0.1:8080"), sa("10.20.0.2:8080")]
    );
    // IPv6 enabled: the dual-stack workload is served over IPv6 only, as a dual-stack pod is.
    let mut v6 = Harness::start_with(dir.path(), chart_config(), true).await;
    assert_eq!(
        add_addrs(&mut v6).await,
        [sa("10.20.0.2:8080"), sa("[fd00:20::1]:8080")]
    );
}

/// A Service selecting the `app: vm` workloads, port `http` 80 → their port named `http`.
fn selecting_service() -> Value {
    let mut svc = mk_service(NS, "vm", &[("http", 80)]);
    svc["spec"]["selector"] = json!({"app": "vm"});
    svc["spec"]["ipFamilies"] = json!(["IPv4"]);
    svc["metadata"]["uid"] = json!("vm-uid");
    svc
}

fn with_ready(mut ew: Value, ready: bool) -> Value {
    let status = if ready { "True" } else { "False" };
    ew["status"]["conditions"] = json!([{"type": "Ready", "status": status}]);
    ew
}

#[tokio::test]
async fn a_selecting_service_serves_its_workloads_without_any_slice() {
    let dir = StateDir::new();
    dir.write("svc.yaml", &[selecting_service()]);
    let ews = |c_ready: bool| {
        vec![
            external_workload("vm-a", &["10.20.0.1", "fd00:20::1"]),
            with_ready(external_workload("vm-b", &["10.20.0.2"]), false),
            with_ready(external_workload("vm-c", &["10.20.0.3"]), c_ready),
            {
                let mut other = external_workload("db", &["10.20.0.9"]);
                other["metadata"]["labels"] = json!({"app": "db"});
                other
            },
        ]
    };
    dir.write("ews.yaml", &ews(true));
    // A stale slice the controller once wrote: the computed slices stand for it.
    dir.write(
        "stale.yaml",
        &[external_slice(
            "linkerd-external-vm-stale",
            json!({
                "kubernetes.io/service-name": "vm",
                "endpointslice.kubernetes.io/managed-by": "linkerd-external-workloads-controller",
            }),
            "IPv4",
            &[("vm-b", "10.20.0.2", true)],
        )],
    );
    let mut h = Harness::start(dir.path()).await;
    let mut stream = h.get(PATH, "").await.unwrap();
    match next(&mut stream).await {
        Update::Add(set) => {
            let mut addrs: Vec<_> = set.addrs.iter().map(addr_of).collect();
            addrs.sort();
            assert_eq!(
                addrs,
                [sa("10.20.0.1:8080"), sa("10.20.0.3:8080")],
                "the ready workloads the selector matches, at their `http` port; vm-b is not \
                 ready (whatever the stale slice says), db is not selected"
            );
            assert_eq!(
                set.metric_labels.get("service").map(String::as_str),
                Some("vm")
            );
        }
        other => panic!("expected Add, got {other:?}"),
    }

    // vm-c's Ready condition turns false: it is removed.
    dir.write("ews.yaml", &ews(false));
    match next(&mut stream).await {
        Update::Remove(set) => {
            let addrs: Vec<_> = set
                .addrs
                .into_iter()
                .map(|a| std::net::SocketAddr::try_from(a).unwrap())
                .collect();
            assert_eq!(addrs, [sa("10.20.0.3:8080")]);
        }
        other => panic!("expected Remove, got {other:?}"),
    }

    // The selector no longer matches: the Service has no endpoints left.
    let mut svc = selecting_service();
    svc["spec"]["selector"] = json!({"app": "nothing"});
    dir.write("svc.yaml", &[svc]);
    match next(&mut stream).await {
        Update::NoEndpoints(none) => assert!(none.exists),
        other => panic!("expected NoEndpoints, got {other:?}"),
    }
}
