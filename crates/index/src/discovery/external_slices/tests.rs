use super::*;
use crate::model::wire;
use linkerd_k8s_api::ExternalWorkload;
use serde_json::{Value, json};

const NS: &str = "vms";

fn mk_service(spec: Value) -> ServiceInfo {
    mk_service_labelled(spec, json!({"app": "vm"}))
}

fn mk_service_labelled(spec: Value, labels: Value) -> ServiceInfo {
    let svc: wire::Service = serde_json::from_value(json!({
        "metadata": {"name": "vm", "namespace": NS, "uid": "svc-uid", "labels": labels},
        "spec": spec,
    }))
    .unwrap();
    ServiceInfo::from_wire(svc).unwrap()
}

/// A ClusterIP Service `vm` selecting `app: vm`, port `http` 80 → target port `http`.
fn vm_service() -> ServiceInfo {
    mk_service(json!({
        "clusterIP": "10.96.0.20",
        "ipFamilies": ["IPv4"],
        "selector": {"app": "vm"},
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}],
    }))
}

fn mk_ew(
    name: &str,
    labels: Value,
    ips: &[&str],
    ports: Value,
    ready: bool,
) -> ExternalWorkloadInfo {
    let ew: ExternalWorkload = serde_json::from_value(json!({
        "apiVersion": "workload.linkerd.io/v1beta1",
        "kind": "ExternalWorkload",
        "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-uid"), "labels": labels},
        "spec": {
            "meshTLS": {"identity": format!("spiffe://root.linkerd.cluster.local/{name}"), "serverName": name},
            "ports": ports,
            "workloadIPs": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
        },
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    }))
    .unwrap();
    ExternalWorkloadInfo::from_external_workload(&ew).unwrap()
}

fn vm(name: &str, ips: &[&str], ready: bool) -> ExternalWorkloadInfo {
    mk_ew(
        name,
        json!({"app": "vm"}),
        ips,
        json!([{"name": "http", "port": 8080}]),
        ready,
    )
}

fn http_8080() -> Vec<EndpointPort> {
    vec![EndpointPort {
        name: Some("http".into()),
        port: 8080,
        protocol: "TCP".into(),
    }]
}

fn endpoint(name: &str, ips: &[&str], ready: bool) -> WorkloadEndpoint {
    WorkloadEndpoint {
        addresses: ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        ready: Some(ready),
        serving: Some(ready),
        terminating: Some(false),
        hostname: None,
        zone: None,
        node_name: None,
        target: Some(EndpointTarget {
            kind: "ExternalWorkload".into(),
            namespace: NS.into(),
            name: name.into(),
            uid: Some(format!("{name}-uid")),
        }),
    }
}

/// The slices `plan` would leave once written, as the controller lists them back: `created`
/// named `<prefix>-<n>`, with resource version `1`.
fn written(svc: &ServiceInfo, planned: &SlicePlan, prefix: &str) -> Vec<OwnedSlice> {
    let created = planned
        .create
        .iter()
        .enumerate()
        .map(|(n, spec)| SliceSpec {
            name: Some(format!("{prefix}-{n}")),
            ..spec.clone()
        });
    planned
        .update
        .iter()
        .cloned()
        .chain(created)
        .map(|spec| {
            let mut slice = spec.to_endpoint_slice(svc);
            slice.metadata.resource_version = Some("1".into());
            OwnedSlice::from_endpoint_slice(&slice).unwrap()
        })
        .collect()
}

#[test]
fn a_service_gets_the_endpoints_of_the_workloads_it_selects() {
    let svc = vm_service();
    let mut zoned = vm("vm-a", &["10.20.0.1", "fd00::1"], true);
    zoned.labels = [("app", "vm"), ("topology.kubernetes.io/zone", "zone-a")]
        .into_iter()
        .collect();
    let other_app = mk_ew(
        "db",
        json!({"app": "db"}),
        &["10.20.0.9"],
        json!([{"name": "http", "port": 8080}]),
        true,
    );
    let mut other_ns = vm("vm-x", &["10.30.0.1"], true);
    other_ns.namespace = "elsewhere".into();
    let no_ip = vm("vm-z", &[], true);
    let workloads = [
        vm("vm-b", &["10.20.0.2"], false),
        zoned,
        other_app,
        other_ns,
        no_ip,
    ];

    let groups = desired_groups(&svc, &workloads);

    let mut a = endpoint("vm-a", &["10.20.0.1"], true);
    a.zone = Some("zone-a".into());
    assert_eq!(
        groups,
        [EndpointGroup {
            address_type: AddressType::IPv4,
            ports: http_8080(),
            endpoints: vec![a, endpoint("vm-b", &["10.20.0.2"], false)],
        }],
        "IPv4 only (spec.ipFamilies), by workload name; readiness from the Ready condition"
    );
}

#[test]
fn families_default_to_both_and_headless_services_name_hosts() {
    let svc = mk_service(json!({
        "clusterIP": "None",
        "selector": {"app": "vm"},
        "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
    }));
    assert!(svc.headless && svc.ip_families.is_empty());
    let groups = desired_groups(&svc, &[vm("vm-a", &["10.20.0.1", "fd00::1"], true)]);
    let mut v4 = endpoint("vm-a", &["10.20.0.1"], true);
    v4.hostname = Some("vm-a".into());
    let mut v6 = endpoint("vm-a", &["fd00::1"], true);
    v6.hostname = Some("vm-a".into());
    assert_eq!(
        groups,
        [
            EndpointGroup {
                address_type: AddressType::IPv4,
                ports: http_8080(),
                endpoints: vec![v4],
            },
            EndpointGroup {
                address_type: AddressType::IPv6,
                ports: http_8080(),
                endpoints: vec![v6],
            },
        ]
    );
    let labels = slice_labels(&svc);
    assert_eq!(labels.get(HEADLESS_LABEL).map(String::as_str), Some(""));
}

#[test]
fn ports_resolve_against_the_workloads_declared_ports_and_protocol() {
    let svc = mk_service(json!({
        "clusterIP": "10.96.0.20",
        "ipFamilies": ["IPv4"],
        "selector": {"app": "vm"},
        "ports": [
            {"name": "http", "port": 80, "targetPort": "web"},
            {"name": "admin", "port": 9000, "targetPort": 9990},
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
            {"port": 7000},
        ],
    }));
    let full = mk_ew(
        "vm-a",
        json!({"app": "vm"}),
        &["10.20.0.1"],
        json!([{"name": "web", "port": 8080}, {"port": 9990}, {"port": 53}, {"port": 7000}]),
        true,
    );
    let web_only = mk_ew(
        "vm-b",
        json!({"app": "vm"}),
        &["10.20.0.2"],
        json!([{"name": "web", "port": 8081}]),
        true,
    );
    let groups = desired_groups(&svc, &[full, web_only]);
    let port = |name: Option<&str>, port| EndpointPort {
        name: name.map(str::to_string),
        port,
        protocol: "TCP".into(),
    };
    // The UDP port matches no (TCP) workload port; an undeclared number matches nothing; each
    // port list is its own group.
    assert_eq!(
        groups
            .iter()
            .map(|g| (g.ports.clone(), g.endpoints.len()))
            .collect::<Vec<_>>(),
        [
            (
                {
                    let mut ports = vec![
                        port(Some("http"), 8080),
                        port(Some("admin"), 9990),
                        port(None, 7000),
                    ];
                    ports.sort();
                    ports
                },
                1
            ),
            (vec![port(Some("http"), 8081)], 1),
        ]
    );
}

#[test]
fn services_the_controller_does_not_manage_get_nothing() {
    let workloads = [vm("vm-a", &["10.20.0.1"], true)];
    let no_selector = mk_service(json!({"clusterIP": "10.96.0.20", "ports": [{"port": 80}]}));
    let empty_selector = mk_service(json!({"selector": {}, "ports": [{"port": 80}]}));
    let external = mk_service(json!({"type": "ExternalName", "selector": {"app": "vm"}}));
    let mut system = vm_service();
    system.namespace = "kube-system".into();
    for svc in [no_selector, empty_selector, external, system] {
        assert!(!manages(&svc), "{svc:?}");
        assert_eq!(desired_groups(&svc, &workloads), []);
    }
}

#[test]
fn slices_are_created_with_the_services_labels_and_owner() {
    let svc = mk_service_labelled(
        vm_service_spec(),
        json!({"app": "vm", "kubernetes.io/service-name": "spoof", "tier": "edge"}),
    );
    let groups = desired_groups(&svc, &[vm("vm-a", &["10.20.0.1"], true)]);
    let planned = plan(&svc, &groups, &[]);
    assert!(planned.update.is_empty() && planned.delete.is_empty());
    let [spec] = planned.create.as_slice() else {
        panic!("one slice: {planned:?}")
    };
    let slice = spec.to_endpoint_slice(&svc);
    assert_eq!(
        slice.metadata.generate_name.as_deref(),
        Some("linkerd-external-vm-")
    );
    assert_eq!(slice.metadata.name, None);
    assert_eq!(slice.metadata.namespace.as_deref(), Some(NS));
    assert_eq!(
        slice.metadata.labels.clone().unwrap(),
        BTreeMap::from([
            ("app".to_string(), "vm".to_string()),
            (
                MANAGED_BY_LABEL.to_string(),
                "linkerd-external-workloads-controller".to_string()
            ),
            (SERVICE_NAME_LABEL.to_string(), "vm".to_string()),
            ("tier".to_string(), "edge".to_string()),
        ])
    );
    let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str(),
            owner.controller
        ),
        ("v1", "Service", "vm", "svc-uid", Some(true))
    );
    assert_eq!(slice.address_type, "IPv4");
    let value = serde_json::to_value(&slice).unwrap();
    assert_eq!(
        value["ports"],
        json!([{"name": "http", "port": 8080, "protocol": "TCP"}])
    );
    assert_eq!(
        value["endpoints"],
        json!([{
            "addresses": ["10.20.0.1"],
            "conditions": {"ready": true, "serving": true, "terminating": false},
            "targetRef": {"kind": "ExternalWorkload", "namespace": NS, "name": "vm-a", "uid": "vm-a-uid"},
        }])
    );
}

fn vm_service_spec() -> Value {
    json!({
        "clusterIP": "10.96.0.20",
        "ipFamilies": ["IPv4"],
        "selector": {"app": "vm"},
        "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
    })
}

#[test]
fn written_slices_plan_nothing_more() {
    let svc = vm_service();
    let workloads: Vec<_> = (0..250)
        .map(|i| {
            vm(
                &format!("vm-{i:03}"),
                &[&format!("10.20.{}.{}", i / 200, i % 200 + 1)],
                i % 7 != 0,
            )
        })
        .collect();
    let groups = desired_groups(&svc, &workloads);
    let planned = plan(&svc, &groups, &[]);
    assert_eq!(
        planned
            .create
            .iter()
            .map(|s| s.endpoints.len())
            .collect::<Vec<_>>(),
        [100, 100, 50]
    );
    let owned = written(&svc, &planned, "linkerd-external-vm");
    assert_eq!(plan(&svc, &groups, &owned), SlicePlan::default());
}

#[test]
fn a_changed_workload_updates_only_its_slice() {
    let svc = vm_service();
    let workloads: Vec<_> = (0..150)
        .map(|i| {
            vm(
                &format!("vm-{i:03}"),
                &[&format!("10.20.0.{}", i + 1)],
                true,
            )
        })
        .collect();
    let owned = written(
        &svc,
        &plan(&svc, &desired_groups(&svc, &workloads), &[]),
        "s",
    );
    let holder = owned
        .iter()
        .find(|s| {
            s.endpoints
                .iter()
                .any(|ep| ep.target.as_ref().unwrap().name == "vm-120")
        })
        .unwrap()
        .name
        .clone();

    let mut changed = workloads.clone();
    changed[120].ready = false;
    let planned = plan(&svc, &desired_groups(&svc, &changed), &owned);
    assert!(
        planned.create.is_empty() && planned.delete.is_empty(),
        "{planned:?}"
    );
    let [update] = planned.update.as_slice() else {
        panic!("one update: {planned:?}")
    };
    assert_eq!(update.name.as_ref(), Some(&holder));
    assert_eq!(update.resource_version.as_deref(), Some("1"));
    let ep = update
        .endpoints
        .iter()
        .find(|ep| ep.target.as_ref().unwrap().name == "vm-120")
        .unwrap();
    assert_eq!((ep.ready, ep.serving), (Some(false), Some(false)));
}

#[test]
fn endpoints_leave_with_their_workload_and_empty_slices_are_deleted() {
    let svc = vm_service();
    let a = vm("vm-a", &["10.20.0.1"], true);
    let b = vm("vm-b", &["10.20.0.2"], true);
    // Two slices of one endpoint each, as written by an earlier run.
    let mut owned = written(&svc, &plan(&svc, &desired_groups(&svc, [&a]), &[]), "one");
    owned.extend(written(
        &svc,
        &plan(&svc, &desired_groups(&svc, [&b]), &[]),
        "two",
    ));

    let planned = plan(&svc, &desired_groups(&svc, [&a]), &owned);
    assert_eq!(planned.delete, ["two-0"]);
    assert!(planned.create.is_empty() && planned.update.is_empty());

    // A new workload goes into the slice with room rather than a new slice.
    let c = vm("vm-c", &["10.20.0.3"], true);
    let planned = plan(&svc, &desired_groups(&svc, [&a, &b, &c]), &owned);
    assert!(
        planned.create.is_empty() && planned.delete.is_empty(),
        "{planned:?}"
    );
    let [update] = planned.update.as_slice() else {
        panic!("{planned:?}")
    };
    assert_eq!(update.endpoints.len(), 2);

    // No workload left: every slice goes.
    let planned = plan(&svc, &desired_groups(&svc, std::iter::empty()), &owned);
    assert_eq!(planned.delete, ["one-0", "two-0"]);
}

#[test]
fn slices_of_another_owner_family_or_port_list_are_replaced() {
    let svc = vm_service();
    let a = vm("vm-a", &["10.20.0.1"], true);
    let groups = desired_groups(&svc, [&a]);
    let mut foreign_owner = written(&svc, &plan(&svc, &groups, &[]), "old-svc").remove(0);
    foreign_owner.service_owners = vec!["deleted-svc-uid".into()];
    let mut ipv6 = written(&svc, &plan(&svc, &groups, &[]), "v6").remove(0);
    ipv6.address_type = Some(AddressType::IPv6);
    let mut old_ports = written(&svc, &plan(&svc, &groups, &[]), "ports").remove(0);
    old_ports.ports = Some(vec![EndpointPort {
        name: Some("http".into()),
        port: 80,
        protocol: "TCP".into(),
    }]);

    // The stale port list's slice (same family, owned) is reused for the desired one; the
    // others are deleted.
    let planned = plan(&svc, &groups, &[foreign_owner, ipv6, old_ports]);
    assert_eq!(planned.delete, ["old-svc-0", "v6-0"]);
    assert!(planned.create.is_empty());
    let [update] = planned.update.as_slice() else {
        panic!("{planned:?}")
    };
    assert_eq!(update.name.as_deref(), Some("ports-0"));
    assert_eq!(update.ports, http_8080());
    assert_eq!(update.endpoints, [endpoint("vm-a", &["10.20.0.1"], true)]);
}

#[test]
fn drifted_labels_are_rewritten() {
    let svc = vm_service();
    let groups = desired_groups(&svc, [&vm("vm-a", &["10.20.0.1"], true)]);
    let mut owned = written(&svc, &plan(&svc, &groups, &[]), "s");
    owned[0].labels.insert("stale".into(), "yes".into());
    let planned = plan(&svc, &groups, &owned);
    assert_eq!(planned.update.len(), 1);
    assert!(!planned.update[0].labels.contains_key("stale"));
}

#[test]
fn offline_slices_decode_as_the_api_would_serve_them() {
    let svc = vm_service();
    let groups = desired_groups(
        &svc,
        &[
            vm("vm-a", &["10.20.0.1"], true),
            vm("vm-b", &["10.20.0.2"], false),
        ],
    );
    let slices = offline_slices(&svc, &groups);
    let [slice] = slices.as_slice() else {
        panic!("{slices:?}")
    };
    assert_eq!(slice.name, "linkerd-external-vm-0");
    assert_eq!(slice.namespace, NS);
    assert_eq!(slice.service.as_deref(), Some("vm"));
    assert!(slice.managed_by_external_workloads);
    assert_eq!(
        slice
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .map(|p| (p.name.as_str(), p.port))
            .collect::<Vec<_>>(),
        [("http", 8080)]
    );
    assert_eq!(
        slice
            .endpoints
            .iter()
            .map(|ep| (
                ep.target.as_ref().unwrap().name.as_str(),
                ep.addresses[0].to_string(),
                ep.ready
            ))
            .collect::<Vec<_>>(),
        [
            ("vm-a", "10.20.0.1".to_string(), true),
            ("vm-b", "10.20.0.2".to_string(), false)
        ]
    );
}

#[test]
fn a_service_being_deleted_gets_no_new_slices_but_its_own_are_still_rewritten() {
    let svc: wire::Service = serde_json::from_value(json!({
        "metadata": {
            "name": "vm", "namespace": NS, "uid": "svc-uid", "labels": {"app": "vm"},
            "deletionTimestamp": "2024-05-01T10:00:00Z",
        },
        "spec": {
            "clusterIP": "10.96.0.20",
            "ipFamilies": ["IPv4"],
            "selector": {"app": "vm"},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}],
        },
    }))
    .unwrap();
    let svc = ServiceInfo::from_wire(svc).unwrap();
    assert!(svc.deleting);
    assert!(!vm_service().deleting);
    let workloads: Vec<ExternalWorkloadInfo> = (0..150)
        .map(|n| {
            vm(
                &format!("vm-{n:03}"),
                &[&format!("10.20.0.{}", n + 1)],
                true,
            )
        })
        .collect();
    let groups = desired_groups(&svc, &workloads);

    // From nothing: both slices would be creates; none is made.
    let planned = plan(&svc, &groups, &[]);
    assert_eq!(
        (
            planned.create.len(),
            planned.update.len(),
            planned.delete.len()
        ),
        (0, 0, 0)
    );
    assert_eq!(planned.skipped_creates, 2);
    let live = plan(&vm_service(), &groups, &[]);
    assert_eq!((live.create.len(), live.skipped_creates), (2, 0));

    // A slice it owns of a port list no longer wanted: its name is reused for the last new
    // slice (an update, still allowed); the other new slice is not created.
    let stale = OwnedSlice {
        name: "linkerd-external-vm-old".into(),
        resource_version: Some("7".into()),
        address_type: Some(AddressType::IPv4),
        ports: Some(vec![EndpointPort {
            name: Some("http".into()),
            port: 9090,
            protocol: "TCP".into(),
        }]),
        endpoints: vec![endpoint("vm-gone", &["10.20.9.9"], true)],
        labels: slice_labels(&svc),
        service_owners: vec!["svc-uid".into()],
    };
    let planned = plan(&svc, &groups, &[stale]);
    assert!(planned.create.is_empty());
    assert!(planned.delete.is_empty());
    assert_eq!(planned.skipped_creates, 1);
    let [update] = planned.update.as_slice() else {
        panic!("one update: {planned:?}");
    };
    assert_eq!(update.name.as_deref(), Some("linkerd-external-vm-old"));
    assert_eq!(update.resource_version.as_deref(), Some("7"));
    assert_eq!(update.ports, http_8080());
    let names: Vec<&str> = update
        .endpoints
        .iter()
        .map(|ep| ep.target.as_ref().unwrap().name.as_str())
        .collect();
    assert_eq!(names.len(), 50);
    assert_eq!((names[0], names[49]), ("vm-100", "vm-149"));
}
