//! The ExternalWorkload EndpointSlice controller in kube mode (spec/destination.md §K), against
//! the scripted API server on loopback: it writes the slices of a Service's ExternalWorkloads
//! only once it holds the Lease `linkerd-destination-endpoint-write`, rewrites them as the
//! workloads change, and never touches slices another controller manages.

#[path = "../../index/tests/fake_apiserver/mod.rs"]
mod fake_apiserver;

use destination::external_endpoints::{self, ControllerConfig, FIELD_MANAGER, LEASE_NAME};
use fake_apiserver::{EXTERNAL_WORKLOADS, FakeApi, LEASES, SLICES};
use k8s_openapi::{api::coordination::v1::Lease, jiff::Timestamp};
use kube::Api;
use linkerd_index::{
    ClusterSource, DiscoveryIndex, IndexMetrics, Watches,
    lease::{self, LeaseConfig},
    source::kube::KubeSource,
};
use serde_json::{Value, json};
use std::time::Duration;

const NS: &str = "vms";
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const OURS: &str = "linkerd-external-workloads-controller";

fn service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "vm", "namespace": NS, "uid": "vm-uid", "labels": {"app": "vm"}},
        "spec": {
            "type": "ClusterIP", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
            "ipFamilies": ["IPv4"],
            "selector": {"app": "vm"},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}],
        },
    })
}

fn workload(name: &str, ip: &str, ready: bool) -> Value {
    json!({
        "apiVersion": "workload.linkerd.io/v1beta1", "kind": "ExternalWorkload",
        "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-uid"), "labels": {"app": "vm"}},
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

    let index = DiscoveryIndex::new();
    let mut watches = Watches::new(IndexMetrics::default());
    index.watch(&mut watches);
    let source = ClusterSource::Kube(KubeSource::new(api.client(), IndexMetrics::default()));
    let started = watches.start(&source).await;
    let config = LeaseConfig {
        duration: Duration::from_secs(2),
        renew_grace: Duration::from_secs(1),
        ..LeaseConfig::new(LEASE_NAME, FIELD_MANAGER, "pod-a", "linkerd")
    };
    let leadership = lease::spawn(Api::<Lease>::namespaced(api.client(), "linkerd"), config);
    let _controller = external_endpoints::spawn(
        index.clone(),
        api.client(),
        leadership,
        started.ready(),
        ControllerConfig::default(),
    );

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
}
