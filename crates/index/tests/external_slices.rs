//! ExternalWorkload EndpointSlices in the discovery index (spec/destination.md §K): in kube mode
//! the Services whose slices may have to be written are queued for the controller; offline,
//! the slices are computed and served, following the Services and workloads.

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use linkerd_index::{
    DiscoveryIndex, EndpointsKey, Fed, IndexMetrics, ObjectRef, Workload, source::Event,
};
use linkerd_k8s_api::ExternalWorkload;
use serde_json::{Value, json};
use std::collections::BTreeSet;

const NS: &str = "vms";

fn fed() -> Fed<DiscoveryIndex> {
    Fed::new(
        DiscoveryIndex::new(),
        DiscoveryIndex::watch,
        IndexMetrics::default(),
    )
}

fn service(name: &str, selector: Option<Value>) -> Service {
    let mut spec = json!({
        "clusterIP": "10.96.0.20", "ipFamilies": ["IPv4"],
        "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
    });
    if let Some(selector) = selector {
        spec["selector"] = selector;
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-uid")},
        "spec": spec,
    }))
    .unwrap()
}

fn workload(name: &str, app: &str, identity: &str) -> ExternalWorkload {
    serde_json::from_value(json!({
        "apiVersion": "workload.linkerd.io/v1beta1", "kind": "ExternalWorkload",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": app}},
        "spec": {
            "meshTLS": {"identity": identity, "serverName": name},
            "ports": [{"name": "http", "port": 8080}],
            "workloadIPs": [{"ip": "10.20.0.1"}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap()
}

fn slice(name: &str, managed_by: &str) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": NS, "labels": {
            "kubernetes.io/service-name": "vm",
            "endpointslice.kubernetes.io/managed-by": managed_by,
        }},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": [],
    }))
    .unwrap()
}

fn names(queued: BTreeSet<ObjectRef>) -> Vec<String> {
    queued.into_iter().map(|s| s.name).collect()
}

fn svc_ref(name: &str) -> ObjectRef {
    ObjectRef {
        namespace: NS.into(),
        name: name.into(),
    }
}

#[test]
fn services_are_queued_as_their_workloads_and_own_slices_change() {
    let index = fed();
    let queued = index.queue_external_workload_slices();
    assert_eq!(names(index.take_external_workload_slice_queue()), [""; 0]);

    index.apply(Event::Apply(service("vm", Some(json!({"app": "vm"})))));
    index.apply(Event::Apply(service("db", Some(json!({"app": "db"})))));
    index.apply(Event::Apply(service("plain", None)));
    assert!(queued.has_changed().unwrap());
    assert_eq!(
        names(index.take_external_workload_slice_queue()),
        ["db", "plain", "vm"],
        "every Service change is looked at (a selector may have gone)"
    );

    index.apply(Event::Apply(workload("vm-a", "vm", "spiffe://a")));
    assert_eq!(names(index.take_external_workload_slice_queue()), ["vm"]);

    // Relabelled: the Services that selected it and those that select it now.
    index.apply(Event::Apply(workload("vm-a", "db", "spiffe://a")));
    assert_eq!(
        names(index.take_external_workload_slice_queue()),
        ["db", "vm"]
    );

    // Slices: only those the controller manages bring their Service back.
    index.apply(Event::Apply(slice(
        "vm-kube",
        "endpointslice-controller.k8s.io",
    )));
    assert_eq!(names(index.take_external_workload_slice_queue()), [""; 0]);
    index.apply(Event::Apply(slice(
        "vm-ours",
        "linkerd-external-workloads-controller",
    )));
    assert_eq!(names(index.take_external_workload_slice_queue()), ["vm"]);

    let (_, groups) = index.external_workload_endpoints(&svc_ref("db")).unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].endpoints[0].target.as_ref().unwrap().name, "vm-a");
    let (_, groups) = index.external_workload_endpoints(&svc_ref("vm")).unwrap();
    assert!(groups.is_empty());
    assert!(
        index
            .external_workload_endpoints(&svc_ref("plain"))
            .is_none()
    );
    assert!(
        index
            .external_workload_endpoints(&svc_ref("gone"))
            .is_none()
    );
}

#[tokio::test]
async fn computed_slices_follow_the_workloads_identity() {
    let index = fed();
    index.compute_external_workload_slices();
    index.apply(Event::Apply(service("vm", Some(json!({"app": "vm"})))));
    index.apply(Event::Apply(workload("vm-a", "vm", "spiffe://one")));
    let mut rx = index.endpoints(EndpointsKey {
        service: svc_ref("vm"),
        port: 80,
        hostname: None,
    });
    let identity = |view: &linkerd_index::EndpointsView| -> Vec<(String, String)> {
        view.endpoints
            .values()
            .map(|ep| match &ep.workload {
                Workload::External(ew) => (ep.addr.to_string(), ew.identity.clone()),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(
        identity(&rx.borrow_and_update()),
        [("10.20.0.1:8080".to_string(), "spiffe://one".to_string())]
    );

    // The slice stays the same; the endpoint's workload does not.
    index.apply(Event::Apply(workload("vm-a", "vm", "spiffe://two")));
    assert!(rx.has_changed().unwrap());
    assert_eq!(
        identity(&rx.borrow_and_update()),
        [("10.20.0.1:8080".to_string(), "spiffe://two".to_string())]
    );

    // Deselected: gone.
    index.apply(Event::Apply(workload("vm-a", "other", "spiffe://two")));
    assert!(rx.borrow_and_update().endpoints.is_empty());
}
