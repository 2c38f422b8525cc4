//! The ExternalWorkload EndpointSlice controller in kube mode (spec/destination.md §K), against
//! the scripted API server on loopback: it writes the slices of a Service's ExternalWorkloads
//! only once it holds the Lease `linkerd-destination-endpoint-write`, rewrites them as the
//! workloads change, and never touches slices another controller manages; it stops writing
//! once it knows another replica took the Lease, creates nothing for a Service being deleted
//! or in a terminating namespace, and counts what it does on `/metrics`.

#[path = "../../index/tests/fake_apiserver/mod.rs"]
mod fake_apiserver;

use destination::external_endpoints::{
    self, ControllerConfig, ControllerMetrics, FIELD_MANAGER, LEASE_NAME,
};
use fake_apiserver::{EXTERNAL_WORKLOADS, FakeApi, LEASES, SLICES, SeenRequest, TIMEOUT};
use k8s_openapi::{api::coordination::v1::Lease, jiff::Timestamp};
use kube::Api;
use linkerd_index::{
    ClusterSource, DiscoveryIndex, IndexMetrics, Watches,
    lease::{self, Leadership, LeaseConfig},
    source::kube::KubeSource,
    watches::Started,
};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};
use tokio::task::JoinHandle;

const NS: &str = "vms";
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const OURS: &str = "linkerd-external-workloads-controller";

/// One `destination` replica's controller: its own index, Lease task and metrics, on a client
/// whose requests the server tells apart by `claimant`.
struct Replica {
    leadership: Leadership,
    registry: Registry,
    _started: Started,
    _controller: JoinHandle<()>,
}

impl Replica {
    /// Starts the index, the Lease task (2 s claims, renewed every second) and the
    /// controller of replica `claimant`.
    async fn start(api: &FakeApi, claimant: &str) -> Self {
        let client = api.client_named(claimant);
        let index = DiscoveryIndex::new();
        let mut watches = Watches::new(IndexMetrics::default());
        index.watch(&mut watches);
        let source = ClusterSource::Kube(KubeSource::new(client.clone(), IndexMetrics::default()));
        let started = watches.start(&source).await;
        let config = LeaseConfig {
            duration: Duration::from_secs(2),
            renew_grace: Duration::from_secs(1),
            ..LeaseConfig::new(LEASE_NAME, FIELD_MANAGER, claimant, "linkerd")
        };
        let leadership = lease::spawn(Api::<Lease>::namespaced(client.clone(), "linkerd"), config);
        let mut registry = Registry::default();
        let metrics = ControllerMetrics::register(&mut registry);
        let controller = external_endpoints::spawn(
            index,
            client,
            leadership.clone(),
            started.ready(),
            ControllerConfig {
                metrics,
                ..ControllerConfig::default()
            },
        );
        Self {
            leadership,
            registry,
            _started: started,
            _controller: controller,
        }
    }

    /// The value of the series `series` (`name{labels}` as exposed), 0 when absent.
    fn metric(&self, series: &str) -> f64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("encode");
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |v| v.parse().expect("a number"))
    }

    /// Waits until `series` is `value`; fails the test after [`TIMEOUT`].
    async fn wait_for_metric(&self, series: &str, value: f64) {
        let deadline = Instant::now() + TIMEOUT;
        while self.metric(series) != value {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {series} = {value}: it is {}",
                self.metric(series)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn service() -> Value {
    service_named(NS, "vm", false)
}

/// A Service selecting `app: vm`, with a `deletionTimestamp` when `deleting`.
fn service_named(namespace: &str, name: &str, deleting: bool) -> Value {
    let mut svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("{name}-uid"), "labels": {"app": "vm"}},
        "spec": {
            "type": "ClusterIP", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
            "ipFamilies": ["IPv4"],
            "selector": {"app": "vm"},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}],
        },
    });
    if deleting {
        svc["metadata"]["deletionTimestamp"] = json!(Timestamp::now().to_string());
        svc["metadata"]["finalizers"] = json!(["example.com/hold"]);
    }
    svc
}

fn workload(name: &str, ip: &str, ready: bool) -> Value {
    workload_in(NS, name, ip, ready)
}

fn workload_in(namespace: &str, name: &str, ip: &str, ready: bool) -> Value {
    json!({
        "apiVersion": "workload.linkerd.io/v1beta1", "kind": "ExternalWorkload",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("{name}-uid"), "labels": {"app": "vm"}},
        "spec": {
            "meshTLS": {"identity": format!("spiffe://root.linkerd.cluster.local/{name}"), "serverName": name},
            "ports": [{"name": "http", "port": 8080}],
            "workloadIPs": [{"ip": ip}],
        },
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    })
}

/// A slice of the Service `vm` that another controller manages.
fn foreign_slice(name: &str, managed_by: &str) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": NS, "labels": {
            "kubernetes.io/service-name": "vm", MANAGED_BY: managed_by,
        }},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{
            "addresses": ["10.1.0.7"],
            "conditions": {"ready": true},
            "targetRef": {"kind": "Pod", "namespace": NS, "name": "web-1"},
        }],
    })
}

/// The Lease, held by another instance for 2 s from now.
fn held_elsewhere() -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": LEASE_NAME, "namespace": "linkerd"},
        "spec": {
            "holderIdentity": "pod-b", "leaseDurationSeconds": 2,
            "acquireTime": Timestamp::now().to_string(), "renewTime": Timestamp::now().to_string(),
            "leaseTransitions": 0,
        },
    })
}

fn ours(slice: &Value) -> bool {
    slice["metadata"]["labels"][MANAGED_BY] == OURS
}

/// `(workload, address, ready)` of a slice's endpoints.
fn endpoints(slice: &Value) -> Vec<(String, String, bool)> {
    slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|ep| {
            (
                ep["targetRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                ep["addresses"][0].as_str().unwrap_or_default().to_string(),
                ep["conditions"]["ready"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

fn our_slices(api: &FakeApi) -> Vec<Value> {
    api.objects(SLICES).into_iter().filter(ours).collect()
}

#[tokio::test]
async fn the_lease_holder_writes_the_slices_of_selected_workloads_and_only_its_own() {
    let kube_slice = foreign_slice("vm-abcde", "endpointslice-controller.k8s.io");
    let other_slice = foreign_slice("vm-mirror", "someone-else");
    let api = FakeApi::start([
        service(),
        workload("vm-a", "10.20.0.1", true),
        workload("vm-b", "10.20.0.2", false),
        kube_slice,
        other_slice,
        held_elsewhere(),
    ])
    .await;
    api.install_crd(EXTERNAL_WORKLOADS);
    let foreign_before: Vec<Value> = api.objects(SLICES);

    let pod_a = Replica::start(&api, "pod-a").await;
    assert_eq!(pod_a.metric("external_endpoints_leader"), 0.0);

    // pod-b's claim runs out unrenewed; pod-a takes the Lease, then writes the slice.
    api.wait_for_objects(SLICES, "the controller's slice", |slices| {
        slices.iter().any(ours)
    })
    .await;
    let requests = api.requests();
    let first_lease_write = requests
        .iter()
        .position(|r| r.method != "GET" && r.path.contains("/leases"))
        .expect("the Lease was written");
    let first_slice_write = requests
        .iter()
        .position(|r| r.method != "GET" && r.path.contains("/endpointslices"))
        .expect("a slice was written");
    assert!(
        first_lease_write < first_slice_write,
        "slices are written only once the Lease is ours"
    );
    let lease = api
        .objects(LEASES)
        .into_iter()
        .find(|l| l["metadata"]["name"] == LEASE_NAME)
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "pod-a");

    let [slice] = our_slices(&api).try_into().expect("one slice");
    let name = slice["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("linkerd-external-vm-"), "{name}");
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(
        slice["metadata"]["labels"]["kubernetes.io/service-name"],
        "vm"
    );
    assert_eq!(slice["metadata"]["labels"]["app"], "vm");
    assert_eq!(
        slice["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Service", "name": "vm", "uid": "vm-uid",
                "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(
        slice["ports"],
        json!([{"name": "http", "port": 8080, "protocol": "TCP"}])
    );
    assert_eq!(
        endpoints(&slice),
        [
            ("vm-a".to_string(), "10.20.0.1".to_string(), true),
            ("vm-b".to_string(), "10.20.0.2".to_string(), false),
        ]
    );

    // vm-b turns ready: the same slice is rewritten.
    api.apply(EXTERNAL_WORKLOADS, workload("vm-b", "10.20.0.2", true));
    api.wait_for_objects(SLICES, "vm-b ready in the slice", |slices| {
        slices
            .iter()
            .filter(|s| ours(s))
            .any(|s| endpoints(s).iter().all(|(_, _, ready)| *ready))
    })
    .await;
    let [slice] = our_slices(&api).try_into().expect("one slice");
    assert_eq!(slice["metadata"]["name"], name.as_str());
    assert_eq!(
        endpoints(&slice),
        [
            ("vm-a".to_string(), "10.20.0.1".to_string(), true),
            ("vm-b".to_string(), "10.20.0.2".to_string(), true),
        ]
    );

    // Both workloads go: the slice goes.
    api.delete(EXTERNAL_WORKLOADS, NS, "vm-a");
    api.delete(EXTERNAL_WORKLOADS, NS, "vm-b");
    api.wait_for_objects(SLICES, "the controller's slice deleted", |slices| {
        !slices.iter().any(ours)
    })
    .await;

    // The other controllers' slices were never written.
    assert_eq!(api.objects(SLICES), foreign_before);
    let slice_writes: Vec<String> = api
        .requests()
        .iter()
        .filter(|r| r.method != "GET" && r.path.contains("/endpointslices"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        slice_writes
            .iter()
            .all(|w| !w.contains("vm-abcde") && !w.contains("vm-mirror")),
        "{slice_writes:?}"
    );
    assert!(
        slice_writes
            .iter()
            .any(|w| w.starts_with("PUT ") && w.ends_with(&name)),
        "the readiness change is an update of the slice: {slice_writes:?}"
    );

    // Every write is counted, by operation and result (once its answer is read).
    pod_a
        .wait_for_metric(
            r#"external_endpoints_writes_total{op="delete",result="ok"}"#,
            1.0,
        )
        .await;
    assert_eq!(pod_a.metric("external_endpoints_leader"), 1.0);
    let count = |method: &str| {
        slice_writes
            .iter()
            .filter(|w| w.starts_with(method))
            .count()
    };
    assert_eq!(
        (count("POST "), count("DELETE ")),
        (1, 1),
        "{slice_writes:?}"
    );
    assert_eq!(
        pod_a.metric(r#"external_endpoints_writes_total{op="create",result="ok"}"#),
        1.0
    );
    assert_eq!(
        pod_a.metric(r#"external_endpoints_writes_total{op="update",result="ok"}"#),
        count("PUT ") as f64
    );
    assert_eq!(
        pod_a.metric(r#"external_endpoints_writes_total{op="create",result="error"}"#),
        0.0
    );
}

/// The slice writes (not `GET`) of replica `claimant` so far, as `METHOD path`.
fn slice_writes_of(api: &FakeApi, claimant: &str) -> Vec<SeenRequest> {
    api.writes_to(SLICES)
        .into_iter()
        .filter(|r| r.client.as_deref() == Some(claimant))
        .collect()
}

/// The Lease, held by `holder` for 30 s from now.
fn lease_held_by(holder: &str) -> Value {
    let mut lease = held_elsewhere();
    lease["spec"]["holderIdentity"] = json!(holder);
    lease["spec"]["leaseDurationSeconds"] = json!(30);
    lease
}

#[tokio::test]
async fn a_replica_that_loses_the_lease_mid_sync_stops_writing_and_the_new_holder_converges() {
    // 250 workloads: three slices (100, 100, 50), created one after the other.
    let workloads = (0..250).map(|n| {
        workload(
            &format!("vm-{n:03}"),
            &format!("10.20.{}.{}", n / 200, n % 200 + 1),
            true,
        )
    });
    let api = FakeApi::start(std::iter::once(service()).chain(workloads)).await;
    api.install_crd(EXTERNAL_WORKLOADS);
    // pod-a's first create stays unanswered while the Lease changes hands.
    api.hold_writes(SLICES);
    let mut pod_a = Replica::start(&api, "pod-a").await;
    api.wait_for_requests("pod-a's first slice create", |reqs| {
        reqs.iter()
            .any(|r| r.method == "POST" && r.path.ends_with("/endpointslices") && r.status == 0)
    })
    .await;
    assert!(pod_a.leadership.is_leader());

    // Another replica takes the Lease; pod-a learns it at its next renewal.
    api.apply(LEASES, lease_held_by("pod-b"));
    tokio::time::timeout(TIMEOUT, async {
        while pod_a.leadership.is_leader() {
            pod_a
                .leadership
                .changed()
                .await
                .expect("the Lease task runs");
        }
    })
    .await
    .expect("pod-a learns it lost the Lease");
    let lost_at = Instant::now();
    api.release_writes(SLICES);
    pod_a
        .wait_for_metric("external_endpoints_leader", 0.0)
        .await;

    // The write in flight when the Lease went is answered; nothing follows it.
    let writes = slice_writes_of(&api, "pod-a");
    let [held] = writes.as_slice() else {
        panic!("pod-a wrote one slice: {writes:?}");
    };
    assert_eq!((held.method.as_str(), held.status), ("POST", 201));
    assert!(held.at < lost_at);
    let [first] = our_slices(&api).try_into().expect("pod-a's one slice");
    let names: Vec<String> = endpoints(&first).into_iter().map(|(n, _, _)| n).collect();
    assert_eq!(names.len(), 100);
    assert_eq!(
        (names[0].as_str(), names[99].as_str()),
        ("vm-000", "vm-099")
    );

    // pod-b, holding the Lease, completes the slices from what pod-a left.
    let pod_b = Replica::start(&api, "pod-b").await;
    api.wait_for_objects(
        SLICES,
        "250 endpoints in the controller's slices",
        |slices| {
            slices
                .iter()
                .filter(|s| ours(s))
                .map(|s| endpoints(s).len())
                .sum::<usize>()
                == 250
        },
    )
    .await;
    let mut sizes: Vec<usize> = our_slices(&api)
        .iter()
        .map(|s| endpoints(s).len())
        .collect();
    sizes.sort();
    assert_eq!(sizes, [50, 100, 100]);
    let all: BTreeSet<String> = our_slices(&api)
        .iter()
        .flat_map(endpoints)
        .map(|(n, _, _)| n)
        .collect();
    assert_eq!(all.len(), 250, "each workload once");
    let pod_b_writes: Vec<String> = slice_writes_of(&api, "pod-b")
        .iter()
        .map(|r| format!("{} {}", r.method, r.status))
        .collect();
    assert_eq!(pod_b_writes, ["POST 201", "POST 201"]);

    // Two more renewal periods: pod-a still writes nothing, not even the Lease.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(slice_writes_of(&api, "pod-a").len(), 1);
    let pod_a_lease_writes: Vec<SeenRequest> = api
        .writes_to(LEASES)
        .into_iter()
        .filter(|r| r.client.as_deref() == Some("pod-a") && r.at > lost_at)
        .collect();
    assert!(pod_a_lease_writes.is_empty(), "{pod_a_lease_writes:?}");
    assert_eq!(slice_writes_of(&api, "pod-b").len(), 2);
    let lease = api
        .objects(LEASES)
        .into_iter()
        .find(|l| l["metadata"]["name"] == LEASE_NAME)
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "pod-b");
    assert_eq!(pod_a.metric("external_endpoints_leader"), 0.0);
    assert_eq!(pod_b.metric("external_endpoints_leader"), 1.0);
    assert_eq!(
        pod_a.metric(r#"external_endpoints_writes_total{op="create",result="ok"}"#),
        1.0
    );
    assert_eq!(
        pod_b.metric(r#"external_endpoints_writes_total{op="create",result="ok"}"#),
        2.0
    );
}

/// A replica that already holds the Lease when its index is ready syncs each Service once,
/// not once for the initial queue and again for a first resync right after it. Each round
/// races the two, so several rounds make a regression near certain to show. The Service is
/// being deleted, so the sync writes nothing whose watch event would queue it again.
#[tokio::test]
async fn a_leader_syncs_each_service_once_at_start() {
    let lists_of_ours = |api: &FakeApi| {
        api.requests()
            .into_iter()
            .filter(|r| {
                r.method == "GET"
                    && r.path == format!("/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices")
                    && r.query
                        .get("labelSelector")
                        .is_some_and(|s| s.contains(OURS))
            })
            .count()
    };
    for round in 0..8 {
        let api = FakeApi::start([
            service_named(NS, "vm", true),
            workload("vm-a", "10.20.0.1", true),
        ])
        .await;
        api.install_crd(EXTERNAL_WORKLOADS);
        let client = api.client();
        let index = DiscoveryIndex::new();
        let mut watches = Watches::new(IndexMetrics::default());
        index.watch(&mut watches);
        let source = ClusterSource::Kube(KubeSource::new(client.clone(), IndexMetrics::default()));
        let started = watches.start(&source).await;
        let mut ready = started.ready();
        tokio::time::timeout(TIMEOUT, ready.wait_for(|r| *r))
            .await
            .expect("the index becomes ready")
            .expect("the index runs");
        let controller = external_endpoints::spawn(
            index,
            client,
            Leadership::fixed(true),
            started.ready(),
            ControllerConfig::default(),
        );
        let deadline = Instant::now() + TIMEOUT;
        while lists_of_ours(&api) == 0 {
            assert!(
                Instant::now() < deadline,
                "round {round}: vm is never synced"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            api.writes_to(SLICES).is_empty(),
            "round {round}: nothing written"
        );
        assert_eq!(
            lists_of_ours(&api),
            1,
            "round {round}: vm's slices listed once"
        );
        controller.abort();
    }
}

#[tokio::test]
async fn nothing_is_created_for_a_service_being_deleted_nor_in_a_terminating_namespace() {
    // `vm`, being deleted, owns a slice with vm-a not ready: it is still rewritten.
    let mut owned = foreign_slice("linkerd-external-vm-old", OURS);
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Service",
        "name": "vm", "uid": "vm-uid", "controller": true, "blockOwnerDeletion": true}]);
    owned["endpoints"] = json!([{
        "addresses": ["10.20.0.1"],
        "conditions": {"ready": false, "serving": false, "terminating": false},
        "targetRef": {"kind": "ExternalWorkload", "namespace": NS, "name": "vm-a", "uid": "vm-a-uid"},
    }]);
    let api = FakeApi::start([
        service_named(NS, "vm", true),
        // Being deleted, without slices: nothing to create.
        service_named(NS, "vm2", true),
        workload("vm-a", "10.20.0.1", true),
        workload("vm-b", "10.20.0.2", true),
        owned,
        // A live Service in a namespace being deleted.
        service_named("dying", "vm", false),
        workload_in("dying", "vm-c", "10.30.0.1", true),
    ])
    .await;
    api.install_crd(EXTERNAL_WORKLOADS);
    api.terminate_namespace("dying");
    let pod_a = Replica::start(&api, "pod-a").await;

    pod_a
        .wait_for_metric(
            r#"external_endpoints_skipped_creates_total{reason="service_deleting"}"#,
            1.0,
        )
        .await;
    pod_a
        .wait_for_metric(
            r#"external_endpoints_skipped_creates_total{reason="namespace_terminating"}"#,
            1.0,
        )
        .await;
    api.wait_for_objects(SLICES, "vm's slice rewritten", |slices| {
        slices
            .iter()
            .any(|s| s["metadata"]["name"] == "linkerd-external-vm-old" && endpoints(s).len() == 2)
    })
    .await;
    let [slice] = our_slices(&api).try_into().expect("one slice of ours");
    assert_eq!(
        endpoints(&slice),
        [
            ("vm-a".to_string(), "10.20.0.1".to_string(), true),
            ("vm-b".to_string(), "10.20.0.2".to_string(), true),
        ]
    );

    // Long enough for several retries (the first after 100 ms): the refused create is not
    // retried, and nothing else is created.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let writes: Vec<String> = api
        .writes_to(SLICES)
        .iter()
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect();
    assert_eq!(
        writes,
        [
            "POST /apis/discovery.k8s.io/v1/namespaces/dying/endpointslices 403",
            "PUT /apis/discovery.k8s.io/v1/namespaces/vms/endpointslices/linkerd-external-vm-old 200",
        ]
    );
    assert_eq!(
        pod_a.metric(r#"external_endpoints_writes_total{op="create",result="error"}"#),
        1.0
    );
    assert_eq!(
        pod_a.metric(r#"external_endpoints_writes_total{op="update",result="ok"}"#),
        1.0
    );
    assert_eq!(
        pod_a.metric(r#"external_endpoints_writes_total{op="create",result="ok"}"#),
        0.0
    );
    assert_eq!(pod_a.metric("external_endpoints_sync_drops_total"), 0.0);
}
