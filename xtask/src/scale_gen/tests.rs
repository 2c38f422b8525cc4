use super::*;
use k8s_openapi::api::{
    apps::v1::ReplicaSet,
    core::v1::{Node, Pod, Service},
    discovery::v1::EndpointSlice,
};
use std::{
    collections::{BTreeMap, HashSet},
    path::PathBuf,
};

fn generator(services: usize, pods_per_service: usize) -> Generator {
    Generator::new(ScaleSpec {
        services,
        pods_per_service,
    })
    .unwrap()
}

/// Service `s`'s objects decoded into their Kubernetes types.
fn decoded(g: &Generator, s: usize) -> (Service, ReplicaSet, Vec<Pod>, Vec<EndpointSlice>) {
    let (mut services, mut sets, mut pods, mut slices) = (vec![], vec![], vec![], vec![]);
    for (kind, object) in g.service_objects(s) {
        match kind {
            Kind::Service => services.push(serde_json::from_value(object).unwrap()),
            Kind::ReplicaSet => sets.push(serde_json::from_value(object).unwrap()),
            Kind::Pod => pods.push(serde_json::from_value(object).unwrap()),
            Kind::EndpointSlice => slices.push(serde_json::from_value(object).unwrap()),
            other => panic!("{other:?} among a Service's objects"),
        }
    }
    assert_eq!((services.len(), sets.len()), (1, 1));
    (services.remove(0), sets.remove(0), pods, slices)
}

#[test]
fn a_pod_decodes_as_an_injected_pod_owned_by_its_replica_set() {
    let g = generator(3, 4);
    let (service, rs, pods, _) = decoded(&g, 2);
    assert_eq!(pods.len(), 4);
    let pod = &pods[1];
    let meta = &pod.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("bench-0"));
    let owner = &meta.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.kind, "ReplicaSet");
    assert_eq!(Some(&owner.name), rs.metadata.name.as_ref());
    assert_eq!(Some(&owner.uid), rs.metadata.uid.as_ref());
    assert_eq!(owner.controller, Some(true));
    // The ReplicaSet's selector and the Service's selector both pick the pod.
    let labels = meta.labels.as_ref().unwrap();
    let rs_selector = rs
        .spec
        .as_ref()
        .unwrap()
        .selector
        .match_labels
        .as_ref()
        .unwrap();
    assert!(rs_selector.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let svc_selector = service.spec.as_ref().unwrap().selector.as_ref().unwrap();
    assert!(svc_selector.iter().all(|(k, v)| labels.get(k) == Some(v)));
    assert_eq!(labels["linkerd.io/control-plane-ns"], "linkerd");
    assert_eq!(labels["linkerd.io/workload-ns"], "bench-0");
    let annotations = meta.annotations.as_ref().unwrap();
    assert_eq!(annotations["linkerd.io/proxy-version"], PROXY_VERSION);
    assert_eq!(annotations["linkerd.io/trust-root-sha256"].len(), 64);

    let spec = pod.spec.as_ref().unwrap();
    let proxy = spec
        .containers
        .iter()
        .find(|c| c.name == "linkerd-proxy")
        .unwrap();
    let env: BTreeMap<&str, Option<&str>> = proxy
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_deref()))
        .collect();
    assert_eq!(
        env["LINKERD2_PROXY_INBOUND_LISTEN_ADDR"],
        Some("0.0.0.0:4143")
    );
    assert_eq!(
        env["LINKERD2_PROXY_ADMIN_LISTEN_ADDR"],
        Some("0.0.0.0:4191")
    );
    assert_eq!(
        env["LINKERD2_PROXY_CONTROL_LISTEN_ADDR"],
        Some("0.0.0.0:4190")
    );
    assert_eq!(env["LINKERD2_PROXY_INBOUND_PORTS"], Some("8080,8801"));
    let anchors = env["LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS"].unwrap();
    assert!(
        anchors.starts_with("-----BEGIN CERTIFICATE-----\nMIIB"),
        "{anchors}"
    );
    assert!(
        anchors.ends_with("-----END CERTIFICATE-----\n"),
        "{anchors}"
    );
    let proxy_vars = env
        .keys()
        .filter(|k| k.starts_with("LINKERD2_PROXY_"))
        .count();
    assert!(proxy_vars >= 40, "{proxy_vars} LINKERD2_PROXY_ variables");
    let ports: Vec<i32> = proxy
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| p.container_port)
        .collect();
    assert_eq!(ports, [4143, 4191]);
    let app = spec
        .containers
        .iter()
        .find(|c| c.name != "linkerd-proxy")
        .unwrap();
    let probe = app
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(probe.path.as_deref(), Some("/ready"));
    let init = &spec.init_containers.as_ref().unwrap()[0];
    assert_eq!(init.name, "linkerd-init");

    let status = pod.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let ip = status.pod_ip.as_deref().unwrap();
    assert_eq!(ip, g.spec().endpoint(2, 1).ip().to_string());
    assert_eq!(status.pod_ips.as_ref().unwrap()[0].ip, ip);
    let ready = status
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Ready");
    assert_eq!(ready.map(|c| c.status.as_str()), Some("True"));

    let managed = meta.managed_fields.as_ref().unwrap();
    let managers: Vec<(&str, &str, Option<&str>)> = managed
        .iter()
        .map(|m| {
            (
                m.manager.as_deref().unwrap(),
                m.operation.as_deref().unwrap(),
                m.subresource.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        managers,
        [
            ("kube-controller-manager", "Update", None),
            ("kubelet", "Update", Some("status")),
        ]
    );
    assert!(managed.iter().all(|m| m.time.is_some()));
}

#[test]
fn managed_fields_key_list_items_as_the_api_server_does() {
    let g = generator(1, 1);
    let pod = g.pod(0, 0);
    let fields = &pod["metadata"]["managedFields"][0]["fieldsV1"];
    let proxy = &fields["f:spec"]["f:containers"][r#"k:{"name":"linkerd-proxy"}"#];
    assert_eq!(proxy["."], json!({}));
    let listen = &proxy["f:env"][r#"k:{"name":"LINKERD2_PROXY_INBOUND_LISTEN_ADDR"}"#];
    assert_eq!(listen, &json!({".": {}, "f:name": {}, "f:value": {}}));
    assert_eq!(
        proxy["f:ports"][r#"k:{"containerPort":4143,"protocol":"TCP"}"#]["f:name"],
        json!({})
    );
    // Atomic lists are owned whole; fields the API server sets are not owned.
    assert_eq!(fields["f:spec"]["f:tolerations"], json!({}));
    assert!(fields["f:metadata"].get("f:uid").is_none());
    assert!(fields["f:metadata"]["f:labels"].get("f:app").is_some());
    let status = &pod["metadata"]["managedFields"][1]["fieldsV1"]["f:status"];
    assert_eq!(
        status["f:conditions"][r#"k:{"type":"Ready"}"#]["f:status"],
        json!({})
    );
}

#[test]
fn endpoint_slices_hold_every_pod_ready_at_its_node_and_zone() {
    // 150 pods per Service: two slices, of 100 and 50.
    let g = generator(2, 150);
    let (service, _, pods, slices) = decoded(&g, 1);
    let service_name = service.metadata.name.clone().unwrap();
    assert_eq!(slices.len(), 2);
    let counts: Vec<usize> = slices.iter().map(|s| s.endpoints.len()).collect();
    assert_eq!(counts, [100, 50]);
    let nodes: BTreeMap<String, Node> = g
        .cluster_objects()
        .into_iter()
        .filter(|(kind, _)| *kind == Kind::Node)
        .map(|(_, o)| {
            let node: Node = serde_json::from_value(o).unwrap();
            (node.metadata.name.clone().unwrap(), node)
        })
        .collect();
    let by_name: BTreeMap<&str, &Pod> = pods
        .iter()
        .map(|p| (p.metadata.name.as_deref().unwrap(), p))
        .collect();
    let mut seen = HashSet::new();
    for slice in &slices {
        let labels = slice.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["kubernetes.io/service-name"], service_name);
        for endpoint in &slice.endpoints {
            let target = endpoint.target_ref.as_ref().unwrap();
            let pod = by_name[target.name.as_deref().unwrap()];
            assert_eq!(target.uid, pod.metadata.uid);
            assert!(seen.insert(target.name.clone()));
            let status = pod.status.as_ref().unwrap();
            assert_eq!(endpoint.addresses, [status.pod_ip.clone().unwrap()]);
            assert_eq!(endpoint.conditions.as_ref().unwrap().ready, Some(true));
            let node_name = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
            assert_eq!(endpoint.node_name.as_ref(), Some(&node_name));
            let node = &nodes[&node_name];
            let zone = &node.metadata.labels.as_ref().unwrap()["topology.kubernetes.io/zone"];
            assert_eq!(endpoint.zone.as_ref(), Some(zone));
            let node_ip = &node.status.as_ref().unwrap().addresses.as_ref().unwrap()[0].address;
            assert_eq!(status.host_ip.as_ref(), Some(node_ip));
        }
    }
    assert_eq!(seen.len(), 150);
}

#[test]
fn names_uids_addresses_and_versions_are_unique_and_the_output_is_deterministic() {
    let spec = ScaleSpec {
        services: 60,
        pods_per_service: 10,
    };
    let g = Generator::new(spec).unwrap();
    let mut objects = g.cluster_objects();
    for s in 0..spec.services {
        objects.extend(g.service_objects(s));
    }
    assert_eq!(objects.len(), spec.objects());
    let mut names = HashSet::new();
    let mut uids = HashSet::new();
    let mut versions = HashSet::new();
    let mut ips = HashSet::new();
    let mut per_kind: BTreeMap<Kind, usize> = BTreeMap::new();
    for (kind, object) in &objects {
        *per_kind.entry(*kind).or_default() += 1;
        let meta = &object["metadata"];
        assert_eq!(object["kind"], kind.name());
        assert!(names.insert((*kind, meta["namespace"].clone(), meta["name"].clone())));
        assert!(uids.insert(meta["uid"].clone()));
        assert!(versions.insert(meta["resourceVersion"].clone()));
        if *kind == Kind::Pod {
            assert!(
                ips.insert(object["status"]["podIP"].clone()),
                "{}",
                object["status"]["podIP"]
            );
        }
    }
    for kind in Kind::ALL {
        assert_eq!(per_kind[&kind], spec.count(kind), "{kind:?}");
    }
    assert_eq!(spec.namespaces(), 2);
    assert_eq!(spec.nodes(), 12);
    // A second generator writes the same objects.
    let again = Generator::new(spec).unwrap();
    assert_eq!(again.service_objects(77), g.service_objects(77));
    assert_eq!(again.cluster_objects(), g.cluster_objects());
}

#[test]
fn the_state_directory_holds_every_object_as_kubectl_prints_it() {
    let spec = ScaleSpec {
        services: 9,
        pods_per_service: 5,
    };
    let g = Generator::new(spec).unwrap();
    for format in [Format::Yaml, Format::Json] {
        let dir = tempfile::tempdir().unwrap();
        let written = g.write_files(dir.path(), format, 20).unwrap();
        let files = state_files(dir.path());
        // The cluster file, then 4 Services (20 pods) per file.
        assert_eq!(files.len(), 4, "{format:?}");
        assert_eq!(written.files, 4);
        assert_eq!(written.objects, spec.objects());
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        let mut pod_bytes = 0;
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let list: Value = match format {
                Format::Yaml => linkerd_k8s_api::yaml::from_str(&text).unwrap(),
                Format::Json => serde_json::from_str(&text).unwrap(),
            };
            assert_eq!(list["kind"], "List");
            for item in list["items"].as_array().unwrap() {
                *kinds
                    .entry(item["kind"].as_str().unwrap().to_string())
                    .or_default() += 1;
                assert!(item["metadata"].get("managedFields").is_none());
                assert!(item["metadata"]["resourceVersion"].as_str().is_some());
                if item["kind"] == "Pod" {
                    pod_bytes += serde_json::to_vec(item).unwrap().len() as u64;
                }
            }
        }
        for kind in Kind::ALL {
            assert_eq!(kinds[kind.name()], spec.count(kind), "{format:?} {kind:?}");
        }
        assert_eq!(written.pod_json_bytes, pod_bytes);
    }
}

/// The files of the state directory `dir`, sorted.
fn state_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}
