//! The `config.linkerd.io/opaque-ports` annotation of each kind that carries it
//! (spec/policy.md §1.2, spec/destination.md §B.2): a value with an item that does not parse
//! (`0`, `2-1`, `65536`, an unknown port name) is invalid as a whole and yields the empty set,
//! not the default opaque ports and not the items that did parse.

use linkerd_index::model::{
    EgressNetworkInfo, ExternalWorkloadInfo, PodInfo, PortSet, ServiceInfo, wire,
};
use linkerd_k8s_api::{EgressNetwork, ExternalWorkload};
use serde_json::json;

fn annotations(opaque_ports: &str) -> serde_json::Value {
    json!({"config.linkerd.io/opaque-ports": opaque_ports})
}

fn pod(opaque_ports: &str) -> PodInfo {
    let pod: wire::Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-a", "namespace": "ns", "annotations": annotations(opaque_ports)},
        "spec": {"containers": [{"name": "app", "ports": [{"name": "http", "containerPort": 8080}]}]},
        "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}]},
    }))
    .unwrap();
    PodInfo::from_wire(pod).unwrap()
}

fn service(opaque_ports: &str) -> ServiceInfo {
    let svc: wire::Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "ns", "annotations": annotations(opaque_ports)},
        "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "http", "port": 8080}]},
    }))
    .unwrap();
    ServiceInfo::from_wire(svc).unwrap()
}

fn external_workload(opaque_ports: &str) -> ExternalWorkloadInfo {
    let ew: ExternalWorkload = serde_json::from_value(json!({
        "apiVersion": "workload.linkerd.io/v1beta1", "kind": "ExternalWorkload",
        "metadata": {"name": "vm", "namespace": "ns", "annotations": annotations(opaque_ports)},
        "spec": {
            "meshTLS": {"identity": "spiffe://root.linkerd.cluster.local/vm", "serverName": "vm.cluster.local"},
            "ports": [{"name": "http", "port": 8080}],
            "workloadIPs": [{"ip": "10.1.0.1"}],
        },
    }))
    .unwrap();
    ExternalWorkloadInfo::from_external_workload(&ew).unwrap()
}

fn egress_network(opaque_ports: &str) -> EgressNetworkInfo {
    let en: EgressNetwork = serde_json::from_value(json!({
        "apiVersion": "policy.linkerd.io/v1alpha1", "kind": "EgressNetwork",
        "metadata": {"name": "internet", "namespace": "linkerd-egress", "annotations": annotations(opaque_ports)},
        "spec": {"trafficPolicy": "Allow"},
    }))
    .unwrap();
    EgressNetworkInfo::from_egress_network(&en).unwrap()
}

/// The opaque ports of each kind for one annotation value, as strings (`None`: absent).
fn opaque_ports(value: &str) -> [Option<String>; 4] {
    let show = |s: Option<PortSet>| s.map(|s| s.to_string());
    [
        show(pod(value).opaque_ports),
        show(service(value).opaque_ports),
        show(external_workload(value).opaque_ports),
        show(egress_network(value).opaque_ports),
    ]
}

#[test]
fn a_list_with_port_zero_yields_no_opaque_ports() {
    let none = Some(String::new());
    assert_eq!(
        opaque_ports("0,8080"),
        [none.clone(), none.clone(), none.clone(), none.clone()]
    );
    let defaults = PortSet::parse("25,8080").0;
    assert!(!pod("0,8080").is_opaque_port(8080, &defaults));
    assert!(
        !pod("0,8080").is_opaque_port(25, &defaults),
        "not the defaults"
    );
    for bad in ["8080,2-1", "65536, 8080", "8080-", "8080,nope"] {
        assert_eq!(
            opaque_ports(bad),
            [none.clone(), none.clone(), none.clone(), none.clone()],
            "{bad}"
        );
    }
}

#[test]
fn valid_lists_still_parse() {
    let all = |s: &str| {
        [
            Some(s.to_string()),
            Some(s.to_string()),
            Some(s.to_string()),
            Some(s.to_string()),
        ]
    };
    assert_eq!(opaque_ports(" 8080, 4000-4002 ,"), all("4000-4002,8080"));
    assert_eq!(opaque_ports(""), all(""));
    // Port names resolve where the kind has named ports (not EgressNetworks).
    let named = opaque_ports("http");
    assert_eq!(named[..3], all("8080")[..3]);
}
