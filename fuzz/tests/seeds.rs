//! Writes the seed corpora (`corpus/<target>/`) from the bundled fixtures (tests/fixtures) and a
//! few hand-made inputs for forms the fixtures lack. Run after changing the fixtures or a
//! target's input format:
//!
//! ```sh
//! cargo test -p linkerd-fuzz --test seeds -- --ignored
//! ```
//!
//! Files are named by a hash of their content, so rewriting keeps unchanged seeds.

use linkerd_index::source::offline::parse_manifests;
use serde_json::{Value, json};
use std::{
    collections::BTreeSet,
    hash::{DefaultHasher, Hash, Hasher},
    path::Path,
};

fn fixture_objects() -> Vec<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let mut files = Vec::new();
    for dir in ["emojivoto", "edge-cases", "east", "east-link", "profiles"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        files.extend(paths);
    }
    let mut objects = Vec::new();
    for path in files {
        let bytes = std::fs::read(&path).expect("fixture reads");
        for manifest in parse_manifests(&path, &bytes).unwrap_or_default() {
            objects.push(serde_json::from_str(&manifest.json).expect("manifest JSON"));
        }
    }
    objects
}

fn kind(object: &Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

fn group(object: &Value) -> &str {
    object["apiVersion"]
        .as_str()
        .and_then(|v| v.rsplit_once('/'))
        .map(|(g, _)| g)
        .unwrap_or("")
}

fn field<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

struct Corpus {
    dir: std::path::PathBuf,
    seen: BTreeSet<u64>,
}

impl Corpus {
    fn new(name: &str) -> Self {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("corpus")
            .join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("corpus dir");
        Self {
            dir,
            seen: BTreeSet::new(),
        }
    }

    fn add(&mut self, bytes: impl AsRef<[u8]>) {
        let bytes = bytes.as_ref();
        let mut hasher = DefaultHasher::new();
        bytes.hash(&mut hasher);
        let hash = hasher.finish();
        if self.seen.insert(hash) {
            std::fs::write(self.dir.join(format!("{hash:016x}")), bytes).expect("seed writes");
        }
    }

    fn with_prefix(&mut self, prefix: u8, bytes: impl AsRef<[u8]>) {
        let mut input = vec![prefix];
        input.extend_from_slice(bytes.as_ref());
        self.add(input);
    }
}

fn review(uid: &str, api_version: &str, object: &Value, operation: &str) -> Vec<u8> {
    let api = object["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api.rsplit_once('/').unwrap_or(("", api));
    serde_json::to_vec(&json!({
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind(object)},
            "resource": {"group": group, "version": version, "resource": "x"},
            "namespace": object.pointer("/metadata/namespace"),
            "name": object.pointer("/metadata/name"),
            "operation": operation,
            "userInfo": {"username": "kubernetes-admin"},
            "object": object,
        }
    }))
    .expect("review encodes")
}

#[test]
#[ignore = "writes the seed corpora; run by hand"]
fn write_seed_corpora() {
    let objects = fixture_objects();
    let of_kind = |k: &'static str| objects.iter().filter(move |o| kind(o) == k);
    let token = |ns: &str| {
        format!(
            "{{\"ns\":\"{ns}\",\"nodeName\":\"ip-10-20-1-11.eu-west-1.compute.internal\",\"pod\":\"client-0\"}}"
        )
    };

    // get_path
    let mut c = Corpus::new("get_path");
    for svc in of_kind("Service") {
        let (name, ns) = (
            field(svc, "/metadata/name"),
            field(svc, "/metadata/namespace"),
        );
        for port in svc["spec"]["ports"].as_array().into_iter().flatten() {
            let port = port["port"].as_u64().unwrap_or(80);
            c.add(format!(
                "{name}.{ns}.svc.cluster.local:{port}\n{}",
                token(ns)
            ));
        }
        if let Some(ip) = svc.pointer("/spec/clusterIP").and_then(Value::as_str) {
            c.add(format!("{ip}:80\nns:{ns}"));
        }
    }
    for extra in [
        "cache-0.cache.edge.svc.cluster.local:6379\nns:edge",
        "web-svc.emojivoto.svc.cluster.local\n",
        "[fd00:10:96::8:7a3e]:8080\n",
        "[::ffff:10.244.2.19]:8080\n{\"ns\":\"emojivoto\"}",
        "linkerd.io:443\nns:a:b",
        "web-svc.emojivoto.svc.cluster.local:0\n null",
    ] {
        c.add(extra);
    }

    // inbound_port_spec and outbound_traffic_spec
    let mut inbound = Corpus::new("inbound_port_spec");
    let mut outbound = Corpus::new("outbound_traffic_spec");
    for pod in of_kind("Pod") {
        let (name, ns) = (
            field(pod, "/metadata/name"),
            field(pod, "/metadata/namespace"),
        );
        let mut ports: Vec<u32> = vec![4191];
        for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
            for port in container["ports"].as_array().into_iter().flatten() {
                ports.extend(port["containerPort"].as_u64().map(|p| p as u32));
            }
        }
        for port in ports {
            let mut spec = port.to_le_bytes().to_vec();
            spec.extend_from_slice(format!("{ns}:{name}").as_bytes());
            inbound.add(&spec);
            let ip = field(pod, "/status/podIP");
            if !ip.is_empty() {
                outbound.add(format!("{ns}:client\naddr {ip} {port}"));
            }
        }
        let mut json = 8080u32.to_le_bytes().to_vec();
        json.extend_from_slice(format!("{{\"ns\":\"{ns}\",\"pod\":\"{name}\"}}").as_bytes());
        inbound.add(&json);
    }
    for ew in of_kind("ExternalWorkload") {
        let (name, ns) = (
            field(ew, "/metadata/name"),
            field(ew, "/metadata/namespace"),
        );
        let mut spec = 8080u32.to_le_bytes().to_vec();
        spec.extend_from_slice(
            format!("{{\"ns\":\"{ns}\",\"external_workload\":\"{name}\"}}").as_bytes(),
        );
        inbound.add(&spec);
    }
    for svc in of_kind("Service") {
        let (name, ns) = (
            field(svc, "/metadata/name"),
            field(svc, "/metadata/namespace"),
        );
        for port in svc["spec"]["ports"].as_array().into_iter().flatten() {
            let port = port["port"].as_u64().unwrap_or(80);
            outbound.add(format!(
                "{ns}:client\nauthority {name}.{ns}.svc.cluster.local:{port}"
            ));
            if let Some(ip) = svc.pointer("/spec/clusterIP").and_then(Value::as_str) {
                outbound.add(format!(
                    "{{\"ns\":\"{ns}\",\"pod\":\"client\"}}\naddr {ip} {port}"
                ));
            }
        }
    }
    for extra in [
        "emojivoto:web\naddr 8.8.8.8 443",
        "emojivoto:web\naddr - 80",
        "emojivoto:web\naddr ? 80",
        "emojivoto:web\naddr 10.0.0.1 0",
        "emojivoto:web\naddr 10.0.0.1 70000",
        "emojivoto:web\n",
        "emojivoto\nauthority web-svc.emojivoto.svc.cluster.local:80",
        "emojivoto:web\nauthority WEB-SVC.emojivoto.svc.cluster.local.:99999999999999999999",
    ] {
        outbound.add(extra);
    }

    // state_file: each object alone (YAML from the fixtures' JSON, and JSON), and a List.
    let mut c = Corpus::new("state_file");
    let mut per_kind: std::collections::BTreeMap<&str, usize> = Default::default();
    for object in &objects {
        let count = per_kind.entry(kind(object)).or_default();
        *count += 1;
        if *count > 3 {
            continue;
        }
        c.with_prefix(1, serde_json::to_vec_pretty(object).expect("encodes"));
        c.with_prefix(
            0,
            format!("---\n{}\n", serde_json::to_string(object).expect("encodes")),
        );
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects.iter().filter(|o| kind(o) == "Service").take(3).collect::<Vec<_>>()});
    c.with_prefix(1, serde_json::to_vec(&list).expect("encodes"));
    c.with_prefix(
        0,
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: web, namespace: shop, annotations: {config.linkerd.io/opaque-ports: \"4000-4100\"}}\n  spec: {clusterIP: 10.96.0.7, ports: [{port: 80, targetPort: http}]}\n- 5\n---\n~\n",
    );

    // sp_admission and policy_admission
    let mut sp = Corpus::new("sp_admission");
    let mut policy = Corpus::new("policy_admission");
    for (i, object) in objects.iter().enumerate() {
        let uid = format!("uid-{i}");
        match (group(object), kind(object)) {
            ("linkerd.io", "ServiceProfile") => {
                sp.add(review(&uid, "admission.k8s.io/v1", object, "CREATE"));
                sp.add(review(&uid, "admission.k8s.io/v1beta1", object, "UPDATE"));
            }
            ("policy.linkerd.io" | "gateway.networking.k8s.io", _) => {
                policy.add(review(&uid, "admission.k8s.io/v1", object, "CREATE"));
            }
            _ => {}
        }
    }
    sp.add(r#"{"request":{"uid":"1","operation":"DELETE"}}"#);
    sp.add(r#"{"request":{"uid":"2","object":{"apiVersion":"linkerd.io/v1alpha2","kind":"ServiceProfile","metadata":{"name":"a.b.svc.cluster.local"},"spec":{"routes":[{"name":"r","condition":{"pathRegex":"/x/[^/]*","method":"GET"},"timeout":"1s"}]}}}}"#);
    for extra in [
        json!({"apiVersion":"policy.linkerd.io/v1beta3","kind":"Server","metadata":{"name":"s","namespace":"n"},"spec":{"podSelector":{"matchLabels":{"app":"web"}},"port":"http","proxyProtocol":"HTTP/2"}}),
        json!({"apiVersion":"gateway.networking.k8s.io/v1","kind":"GRPCRoute","metadata":{"name":"g","namespace":"n"},"spec":{"parentRefs":[{"kind":"Service","group":"core","name":"web","port":8080}],"rules":[{"matches":[{"method":{"service":"a.B","method":"C"},"headers":[{"name":"x","value":"y"}]}]}]}}),
        json!({"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":"h","namespace":"n","annotations":{"retry.linkerd.io/http":"5xx","timeout.linkerd.io/request":"1s"}},"spec":{"parentRefs":[{"kind":"Service","group":"core","name":"web","port":80}],"rules":[{"matches":[{"path":{"type":"RegularExpression","value":"/a/.*"},"headers":[{"type":"RegularExpression","name":"x-a","value":"b+"}]}],"filters":[{"type":"RequestRedirect","requestRedirect":{"statusCode":301}}]}]}}),
        json!({"apiVersion":"policy.linkerd.io/v1alpha1","kind":"EgressNetwork","metadata":{"name":"e","namespace":"linkerd-egress"},"spec":{"trafficPolicy":"Allow","networks":[{"cidr":"0.0.0.0/0","except":["10.0.0.0/8"]}]}}),
        json!({"apiVersion":"policy.linkerd.io/v1alpha1","kind":"HTTPLocalRateLimitPolicy","metadata":{"name":"r","namespace":"n"},"spec":{"targetRef":{"group":"policy.linkerd.io","kind":"Server","name":"s"},"total":{"requestsPerSecond":100},"identity":{"requestsPerSecond":20},"overrides":[{"requestsPerSecond":50,"clientRefs":[{"kind":"ServiceAccount","name":"sa"}]}]}}),
        json!({"apiVersion":"gateway.networking.k8s.io/v1alpha2","kind":"TLSRoute","metadata":{"name":"t","namespace":"n"},"spec":{"parentRefs":[{"kind":"EgressNetwork","group":"policy.linkerd.io","name":"e","port":443}],"rules":[{"backendRefs":[{"name":"e","kind":"EgressNetwork","group":"policy.linkerd.io","port":443}]}]}}),
        json!({"apiVersion":"policy.linkerd.io/v1beta1","kind":"ServerAuthorization","metadata":{"name":"a","namespace":"n"},"spec":{"server":{"name":"s"},"client":{"networks":[{"cidr":"10.0.0.0/8"}],"unauthenticated":true}}}),
    ] {
        policy.add(review("extra", "admission.k8s.io/v1", &extra, "CREATE"));
    }

    // port_list
    let mut c = Corpus::new("port_list");
    for object in &objects {
        for key in [
            "config.linkerd.io/opaque-ports",
            "config.linkerd.io/skip-inbound-ports",
            "config.linkerd.io/skip-outbound-ports",
        ] {
            for pointer in [
                "/metadata/annotations",
                "/spec/template/metadata/annotations",
            ] {
                if let Some(v) = object
                    .pointer(pointer)
                    .and_then(|a| a.get(key))
                    .and_then(Value::as_str)
                {
                    c.add(v);
                }
            }
        }
    }
    for extra in [
        "25,587,3306,4444,5432,6379,9300,11211",
        "4000-4100, 8080 ,http,",
        "1-65535",
        "0,65536,2-1,+80",
        "admin-http,grpc , linkerd-proxy",
    ] {
        c.add(extra);
    }

    // label_selector: each Server's selector with the labels of the pods of its namespace.
    let mut c = Corpus::new("label_selector");
    for server in of_kind("Server") {
        let ns = field(server, "/metadata/namespace");
        let selector = server
            .pointer("/spec/podSelector")
            .or(server.pointer("/spec/externalWorkloadSelector"));
        for pod in of_kind("Pod")
            .filter(|p| field(p, "/metadata/namespace") == ns)
            .take(4)
        {
            c.add(
                serde_json::to_vec(
                    &json!({"selector": selector, "labels": pod["metadata"]["labels"]}),
                )
                .expect("encodes"),
            );
        }
    }
    c.add(r#"{"selector":{"matchExpressions":[{"key":"app","operator":"In","values":["web","vote"]},{"key":"tier","operator":"DoesNotExist"},{"key":"x","operator":"Exists","values":["y"]}]},"labels":{"app":"web"}}"#);
    c.add(r#"{"selector":{"matchLabels":{"a":"b"},"matchExpressions":[{"key":"c","operator":"NotIn","values":["d"]}]},"labels":{"a":"b","c":"e"}}"#);

    // route_match
    let mut c = Corpus::new("route_match");
    for route in objects
        .iter()
        .filter(|o| kind(o) == "HTTPRoute" || kind(o) == "GRPCRoute")
    {
        let form = u8::from(kind(route) == "GRPCRoute");
        for rule in route["spec"]["rules"].as_array().into_iter().flatten() {
            for m in rule["matches"].as_array().into_iter().flatten() {
                c.with_prefix(form, serde_json::to_vec(m).expect("encodes"));
            }
        }
    }
    for sp in of_kind("ServiceProfile") {
        for route in sp["spec"]["routes"].as_array().into_iter().flatten() {
            c.with_prefix(2, serde_json::to_vec(&route["condition"]).expect("encodes"));
        }
    }
    for (form, m) in [
        (
            0,
            r#"{"path":{"type":"RegularExpression","value":"/api/v[0-9]+/.*"},"method":"POST","headers":[{"name":"x-user","value":"a"},{"type":"RegularExpression","name":"x-id","value":"[0-9]+"}],"queryParams":[{"type":"RegularExpression","name":"q","value":"a|b"}]}"#,
        ),
        (0, r#"{"path":{"type":"Exact","value":"/"}}"#),
        (
            1,
            r#"{"method":{"type":"Exact","service":"emojivoto.v1.EmojiService","method":"ListAll"},"headers":[{"name":"x","value":"y"}]}"#,
        ),
        (
            1,
            r#"{"method":{"type":"RegularExpression","service":"a.*"}}"#,
        ),
        (
            2,
            r#"{"all":[{"method":"GET"},{"not":{"pathRegex":"/admin/.*"}},{"any":[{"pathRegex":"/a"},{"pathRegex":"(/b"}]}]}"#,
        ),
    ] {
        c.with_prefix(form, m);
    }
}
