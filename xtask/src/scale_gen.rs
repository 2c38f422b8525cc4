//! The cluster of `cargo xtask bench-scale`: N Services × M pods shaped like a cluster whose
//! workloads Linkerd's proxy injector meshed, modelled on the pods of the emojivoto snapshot
//! (`tests/fixtures/emojivoto` follows upstream's injected golden files).
//!
//! Per Service `s` (in namespace `bench-<s / 50>`): a Service with an HTTP and a metrics port,
//! the ReplicaSet of its Deployment, M pods owned by that ReplicaSet, and one EndpointSlice per
//! 100 pods (as the EndpointSlice controller splits them) with every endpoint ready. Cluster
//! wide: the Namespaces and one Node per 50 pods, round robin over three zones; pod `g` (over
//! all Services) runs on node `g % nodes`, so a Service's pods spread over nodes and zones.
//!
//! Objects are built as the API server stores them, `managedFields` included; [`kubectl_form`]
//! drops what `kubectl get -o yaml` hides. Everything is a function of (N, M): names, UIDs,
//! addresses, times and container IDs come from the object's position, so two runs write the
//! same bytes.

use anyhow::{Context, ensure};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};
use std::{io::Write as _, net::Ipv4Addr, path::Path};

use crate::cluster_gen::k8s_suffix;

/// Services per namespace.
pub const SERVICES_PER_NAMESPACE: usize = 50;
/// Pods per node (a node holds at most 110).
pub const PODS_PER_NODE: usize = 50;
/// Endpoints per EndpointSlice, the EndpointSlice controller's default `--max-endpoints-per-slice`.
pub const ENDPOINTS_PER_SLICE: usize = 100;
/// The Service port clients ask for, and the pods' port behind it.
pub const SERVICE_PORT: u16 = 80;
pub const TARGET_PORT: u16 = 8080;
/// The pods' second port (metrics), served by the Service on the same number.
pub const PROM_PORT: u16 = 8801;
/// At most this many pods go into one file of the state directory: the offline source refuses
/// files over 64 MiB (`linkerd_index::source::offline::MAX_FILE_BYTES`), and a thousand pods
/// stay under a third of that in every format.
const PODS_PER_FILE: usize = 1000;
/// The offline source's file size limit, checked after writing.
const MAX_FILE_BYTES: u64 = 64 << 20;

const ZONES: [&str; 3] = ["eu-west-1a", "eu-west-1b", "eu-west-1c"];
/// Application names, cycled over the Services (`orders-17`, ...).
const APPS: [&str; 10] = [
    "orders", "billing", "ledger", "search", "catalog", "checkout", "accounts", "shipping",
    "reviews", "payments",
];
const PROXY_VERSION: &str = "edge-26.4.4";
const PROXY_IMAGE: &str = "cr.l5d.io/linkerd/proxy:edge-26.4.4";
/// 2026-05-04T09:10:00Z: the Deployments' creation; later times are offsets from it.
const EPOCH: i64 = 1_777_885_800;

/// The kinds generated, with where the API server serves them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Namespace,
    Node,
    Service,
    ReplicaSet,
    Pod,
    EndpointSlice,
}

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleSpec {
    /// Number of Services (and Deployments).
    pub services: usize,
    /// Pods per Service.
    pub pods_per_service: usize,
}

/// Objects of the cluster, built on demand; holds what every pod shares.
pub struct Generator {
    spec: ScaleSpec,
    /// The trust anchors' PEM, identical in every pod as in a real cluster.
    trust_anchors: String,
    trust_root_sha256: String,
}

/// Where a pod runs, derived from its position.
struct Placement {
    node: usize,
    ip: Ipv4Addr,
}

/// A state directory written by [`Generator::write_state_dir`].
#[derive(Clone, Debug, Default)]
pub struct StateDir {
    pub files: usize,
    pub bytes: u64,
    pub objects: usize,
    /// The pods' bytes as compact JSON, summed.
    pub pod_json_bytes: u64,
}

/// Serialization of the state directory's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `kubectl get -o yaml`: one `kind: List` per file.
    Yaml,
    /// `kubectl get -o json`: one `List` per file, indented by 4 spaces.
    Json,
}

// === impl Kind ===

impl Kind {
    /// Every kind, cluster-scoped ones first.
    pub const ALL: [Kind; 6] = [
        Kind::Namespace,
        Kind::Node,
        Kind::Service,
        Kind::ReplicaSet,
        Kind::Pod,
        Kind::EndpointSlice,
    ];

    /// The object's `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Namespace | Kind::Node | Kind::Service | Kind::Pod => "v1",
            Kind::ReplicaSet => "apps/v1",
            Kind::EndpointSlice => "discovery.k8s.io/v1",
        }
    }

    /// The object's `kind`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Namespace => "Namespace",
            Kind::Node => "Node",
            Kind::Service => "Service",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::Pod => "Pod",
            Kind::EndpointSlice => "EndpointSlice",
        }
    }

    /// The cluster-wide collection's path on the API server.
    pub fn path(self) -> &'static str {
        match self {
            Kind::Namespace => "/api/v1/namespaces",
            Kind::Node => "/api/v1/nodes",
            Kind::Service => "/api/v1/services",
            Kind::Pod => "/api/v1/pods",
            Kind::ReplicaSet => "/apis/apps/v1/replicasets",
            Kind::EndpointSlice => "/apis/discovery.k8s.io/v1/endpointslices",
        }
    }
}

// === impl ScaleSpec ===

impl ScaleSpec {
    /// Pods over all Services.
    pub fn pods(&self) -> usize {
        self.services * self.pods_per_service
    }

    /// Nodes: one per [`PODS_PER_NODE`] pods, at least one per zone.
    pub fn nodes(&self) -> usize {
        self.pods().div_ceil(PODS_PER_NODE).max(ZONES.len())
    }

    /// Namespaces: one per [`SERVICES_PER_NAMESPACE`] Services.
    pub fn namespaces(&self) -> usize {
        self.services.div_ceil(SERVICES_PER_NAMESPACE)
    }

    /// EndpointSlices per Service.
    pub fn slices_per_service(&self) -> usize {
        self.pods_per_service.div_ceil(ENDPOINTS_PER_SLICE)
    }

    /// How many objects of `kind` the cluster has.
    pub fn count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Namespace => self.namespaces(),
            Kind::Node => self.nodes(),
            Kind::Service | Kind::ReplicaSet => self.services,
            Kind::Pod => self.pods(),
            Kind::EndpointSlice => self.services * self.slices_per_service(),
        }
    }

    /// Every object, over all kinds.
    pub fn objects(&self) -> usize {
        Kind::ALL.iter().map(|k| self.count(*k)).sum()
    }

    /// The authority a proxy asks for to reach Service `s`'s HTTP port.
    pub fn authority(&self, s: usize) -> String {
        format!(
            "{}.{}.svc.cluster.local:{SERVICE_PORT}",
            app_name(s),
            namespace_name(s / SERVICES_PER_NAMESPACE)
        )
    }

    /// The address of pod `j` of Service `s` behind its HTTP port.
    pub fn endpoint(&self, s: usize, j: usize) -> std::net::SocketAddr {
        std::net::SocketAddr::new(self.placement(s, j).ip.into(), TARGET_PORT)
    }

    fn placement(&self, s: usize, j: usize) -> Placement {
        let g = s * self.pods_per_service + j;
        let nodes = self.nodes();
        let node = g % nodes;
        // At most PODS_PER_NODE pods per node, so the last octet stays below 2 + 50.
        let slot = (g / nodes) as u8;
        let [a, b, c, _] = node_pod_cidr(node).octets();
        Placement {
            node,
            ip: Ipv4Addr::new(a, b, c, 2 + slot),
        }
    }
}

// === impl Generator ===

impl Generator {
    /// A generator of `spec`'s cluster. Errors when the cluster does not fit the address plan
    /// (more than 16,000 nodes) or has no pods.
    pub fn new(spec: ScaleSpec) -> anyhow::Result<Self> {
        ensure!(
            spec.services >= 1 && spec.pods_per_service >= 1,
            "a cluster needs at least one Service and one pod per Service"
        );
        ensure!(
            spec.nodes() <= 16 * 1000,
            "{} pods need {} nodes, more than the address plan holds (16,000)",
            spec.pods(),
            spec.nodes()
        );
        Ok(Self {
            spec,
            trust_anchors: pem_certificate(0x7a11),
            trust_root_sha256: hex(0x7a12, 64),
        })
    }

    /// The spec this generator builds.
    pub fn spec(&self) -> ScaleSpec {
        self.spec
    }

    /// The cluster-scoped objects: Namespaces, then Nodes.
    pub fn cluster_objects(&self) -> Vec<(Kind, Value)> {
        let namespaces = (0..self.spec.namespaces()).map(|n| (Kind::Namespace, namespace(n)));
        let nodes = (0..self.spec.nodes()).map(|n| (Kind::Node, node(n)));
        let mut objects: Vec<(Kind, Value)> = namespaces.chain(nodes).collect();
        stamp_versions(&mut objects, FIRST_RESOURCE_VERSION);
        objects
    }

    /// Service `s`'s objects: the Service, its ReplicaSet, its pods, its EndpointSlices.
    pub fn service_objects(&self, s: usize) -> Vec<(Kind, Value)> {
        let m = self.spec.pods_per_service;
        let per_service = 2 + m + self.spec.slices_per_service();
        let mut objects = Vec::with_capacity(per_service);
        objects.push((Kind::Service, service(s)));
        objects.push((Kind::ReplicaSet, replica_set(s, m)));
        for j in 0..m {
            objects.push((Kind::Pod, self.pod(s, j)));
        }
        for slice in 0..self.spec.slices_per_service() {
            objects.push((Kind::EndpointSlice, self.endpoint_slice(s, slice)));
        }
        let cluster = self.spec.namespaces() + self.spec.nodes();
        let first = FIRST_RESOURCE_VERSION + (cluster + s * per_service) as u64;
        stamp_versions(&mut objects, first);
        objects
    }

    /// Writes the whole cluster into `dir` as `kubectl get -o yaml` (or `-o json`) prints it,
    /// `managedFields` hidden: `cluster.<ext>` with the Namespaces and Nodes, then
    /// `services-NNNN.<ext>` files of at most 1,000 pods each, with their Services,
    /// ReplicaSets and EndpointSlices.
    ///
    /// Errors when a file cannot be written or would exceed the offline source's 64 MiB limit.
    pub fn write_state_dir(&self, dir: &Path, format: Format) -> anyhow::Result<StateDir> {
        self.write_files(dir, format, PODS_PER_FILE)
    }

    /// [`Self::write_state_dir`] with at most `pods_per_file` pods in a file (unless a single
    /// Service has more).
    fn write_files(
        &self,
        dir: &Path,
        format: Format,
        pods_per_file: usize,
    ) -> anyhow::Result<StateDir> {
        let ext = match format {
            Format::Yaml => "yaml",
            Format::Json => "json",
        };
        let mut written = StateDir::default();
        let cluster: Vec<Value> = self
            .cluster_objects()
            .into_iter()
            .map(|(_, o)| kubectl_form(o))
            .collect();
        write_list(
            &dir.join(format!("cluster.{ext}")),
            cluster,
            format,
            &mut written,
        )?;
        let per_file = (pods_per_file / self.spec.pods_per_service).max(1);
        let files: Vec<(usize, usize)> = (0..self.spec.services)
            .step_by(per_file)
            .enumerate()
            .collect();
        // YAML encoding is slow (about 10 MB/s): one thread per core, each taking every n-th file.
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let results: Vec<anyhow::Result<StateDir>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let files = files.iter().skip(t).step_by(threads);
                    scope.spawn(move || {
                        let mut written = StateDir::default();
                        for &(i, first) in files {
                            let last = (first + per_file).min(self.spec.services);
                            let path = dir.join(format!("services-{i:04}.{ext}"));
                            self.write_services(&path, first..last, format, &mut written)?;
                        }
                        Ok(written)
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a writer thread panicked")))
                })
                .collect()
        });
        for result in results {
            let part = result?;
            written.files += part.files;
            written.bytes += part.bytes;
            written.objects += part.objects;
            written.pod_json_bytes += part.pod_json_bytes;
        }
        Ok(written)
    }

    /// Writes the objects of `services` as one `List` into `path`.
    fn write_services(
        &self,
        path: &Path,
        services: std::ops::Range<usize>,
        format: Format,
        written: &mut StateDir,
    ) -> anyhow::Result<()> {
        let mut items = Vec::new();
        for (kind, object) in services.flat_map(|s| self.service_objects(s)) {
            let object = kubectl_form(object);
            if kind == Kind::Pod {
                written.pod_json_bytes += serde_json::to_vec(&object)?.len() as u64;
            }
            items.push(object);
        }
        write_list(path, items, format, written)
    }

    /// Pod `j` of Service `s`, as the proxy injector leaves it and the kubelet reports it
    /// running and ready.
    fn pod(&self, s: usize, j: usize) -> Value {
        let app = app_name(s);
        let ns = namespace_name(s / SERVICES_PER_NAMESPACE);
        let rs = replica_set_name(s);
        let name = pod_name(s, j);
        let g = (s * self.spec.pods_per_service + j) as u64;
        let at = self.spec.placement(s, j);
        let node = node_name(at.node);
        let host_ip = node_ip(at.node).to_string();
        let ip = at.ip.to_string();
        let token_volume = format!("kube-api-access-{}", k8s_suffix(g * 7919 + 5, 5));
        let created = EPOCH + 60 + (g % 600) as i64;
        let metadata = json!({
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": time(EPOCH - 86_400),
                "linkerd.io/created-by": format!("linkerd/proxy-injector {PROXY_VERSION}"),
                "linkerd.io/identity-mode": "default",
                "linkerd.io/inject": "enabled",
                "linkerd.io/proxy-version": PROXY_VERSION,
                "linkerd.io/trust-root-sha256": self.trust_root_sha256,
                "viz.linkerd.io/tap-enabled": "true",
            },
            "creationTimestamp": time(created),
            "generateName": format!("{rs}-"),
            "labels": {
                "app": app,
                "linkerd.io/control-plane-ns": "linkerd",
                "linkerd.io/proxy-deployment": app,
                "linkerd.io/workload-ns": ns,
                "pod-template-hash": template_hash(s),
                "version": "v1",
            },
            "name": name,
            "namespace": ns,
            "ownerReferences": [owner("apps/v1", "ReplicaSet", &rs, &uid(Kind::ReplicaSet, s as u64))],
            "resourceVersion": "0",
            "uid": uid(Kind::Pod, g),
        });
        let spec = json!({
            "containers": [
                self.proxy_container(&token_volume),
                app_container(s, &token_volume),
            ],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": true,
            "initContainers": [init_container(&token_volume)],
            "nodeName": node,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccount": app,
            "serviceAccountName": app,
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                toleration("node.kubernetes.io/not-ready"),
                toleration("node.kubernetes.io/unreachable"),
            ],
            "volumes": pod_volumes(&token_volume),
        });
        let status = pod_status(s, g, created, &host_ip, &ip, &token_volume);
        let mut pod = object(Kind::Pod, metadata, [("spec", spec), ("status", status)]);
        // The injector's additions count as the creator's: admission mutates its request.
        let created_fields = fields_of(&pod, &["metadata", "spec"]);
        let reported = fields_of(&pod, &["status"]);
        pod["metadata"]["managedFields"] = json!([
            managed_entry(
                Kind::Pod,
                "kube-controller-manager",
                time(created),
                None,
                created_fields
            ),
            managed_entry(
                Kind::Pod,
                "kubelet",
                time(created + 9),
                Some("status"),
                reported
            ),
        ]);
        pod
    }

    fn proxy_container(&self, token_volume: &str) -> Value {
        json!({
            "env": self.proxy_env(),
            "image": PROXY_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "lifecycle": {"postStart": {"exec": {"command": [
                "/usr/lib/linkerd/linkerd-await", "--timeout=2m", "--port=4191",
            ]}}},
            "livenessProbe": http_probe("/live", 4191, 10),
            "name": "linkerd-proxy",
            "ports": [port(4143, "linkerd-proxy"), port(4191, "linkerd-admin")],
            "readinessProbe": http_probe("/ready", 4191, 2),
            "resources": {},
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true,
                "runAsNonRoot": true,
                "runAsUser": 2102,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": [
                mount("/var/run/linkerd/identity/end-entity", "linkerd-identity-end-entity", false),
                mount("/var/run/secrets/tokens", "linkerd-identity-token", false),
                mount("/var/run/secrets/kubernetes.io/serviceaccount", token_volume, true),
            ],
        })
    }

    /// The proxy's environment as the injector writes it (the `_pod_*` downward-API variables
    /// and the `LINKERD2_PROXY_*` configuration, trust anchors included), in its order.
    fn proxy_env(&self) -> Value {
        let networks = "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8";
        let identity = |who: &str| format!("{who}.serviceaccount.identity.linkerd.cluster.local");
        let proxy = |name: &str, value: &str| env(&format!("LINKERD2_PROXY_{name}"), value);
        let mut vars = vec![
            env_from("_pod_name", "metadata.name"),
            env_from("_pod_ns", "metadata.namespace"),
            env_from("_pod_uid", "metadata.uid"),
            env_from("_pod_ip", "status.podIP"),
            env_from("_pod_nodeName", "spec.nodeName"),
            env("_pod_containerName", "linkerd-proxy"),
        ];
        let inbound_ports = format!("{TARGET_PORT},{PROM_PORT}");
        let before_inbound_ips = [
            ("CORES", "1"),
            ("CORES_MIN", "1"),
            ("SHUTDOWN_ENDPOINT_ENABLED", "false"),
            (
                "LOG",
                "warn,linkerd=info,hickory=error,[{headers}]=off,[{request}]=off",
            ),
            ("LOG_FORMAT", "plain"),
            (
                "DESTINATION_SVC_ADDR",
                "linkerd-dst-headless.linkerd.svc.cluster.local.:8086",
            ),
            ("DESTINATION_PROFILE_NETWORKS", networks),
            (
                "POLICY_SVC_ADDR",
                "linkerd-policy.linkerd.svc.cluster.local.:8090",
            ),
            (
                "POLICY_WORKLOAD",
                "{\"ns\":\"$(_pod_ns)\", \"pod\":\"$(_pod_name)\"}\n",
            ),
            ("INBOUND_DEFAULT_POLICY", "all-unauthenticated"),
            ("POLICY_CLUSTER_NETWORKS", networks),
            ("CONTROL_STREAM_INITIAL_TIMEOUT", "3s"),
            ("CONTROL_STREAM_IDLE_TIMEOUT", "5m"),
            ("CONTROL_STREAM_LIFETIME", "1h"),
            ("INBOUND_CONNECT_TIMEOUT", "100ms"),
            ("OUTBOUND_CONNECT_TIMEOUT", "1000ms"),
            ("OUTBOUND_DISCOVERY_IDLE_TIMEOUT", "5s"),
            ("INBOUND_DISCOVERY_IDLE_TIMEOUT", "90s"),
            ("CONTROL_LISTEN_ADDR", "0.0.0.0:4190"),
            ("ADMIN_LISTEN_ADDR", "0.0.0.0:4191"),
            ("OUTBOUND_LISTEN_ADDR", "127.0.0.1:4140"),
            ("OUTBOUND_LISTEN_ADDRS", "127.0.0.1:4140"),
            ("INBOUND_LISTEN_ADDR", "0.0.0.0:4143"),
        ];
        vars.extend(before_inbound_ips.iter().map(|(n, v)| proxy(n, v)));
        vars.push(env_from("LINKERD2_PROXY_INBOUND_IPS", "status.podIPs"));
        let before_service_account = [
            ("INBOUND_PORTS", inbound_ports.as_str()),
            ("DESTINATION_PROFILE_SUFFIXES", "svc.cluster.local."),
            ("INBOUND_ACCEPT_KEEPALIVE", "10000ms"),
            ("OUTBOUND_CONNECT_KEEPALIVE", "10000ms"),
            ("INBOUND_ACCEPT_USER_TIMEOUT", "30s"),
            ("OUTBOUND_CONNECT_USER_TIMEOUT", "30s"),
            ("OUTBOUND_METRICS_HOSTNAME_LABELS", "false"),
            ("INBOUND_SERVER_HTTP2_KEEP_ALIVE_INTERVAL", "10s"),
            ("INBOUND_SERVER_HTTP2_KEEP_ALIVE_TIMEOUT", "3s"),
            ("OUTBOUND_SERVER_HTTP2_KEEP_ALIVE_INTERVAL", "10s"),
            ("OUTBOUND_SERVER_HTTP2_KEEP_ALIVE_TIMEOUT", "3s"),
            (
                "INBOUND_PORTS_DISABLE_PROTOCOL_DETECTION",
                "25,587,3306,4444,5432,6379,9300,11211",
            ),
            (
                "DESTINATION_CONTEXT",
                "{\"ns\":\"$(_pod_ns)\", \"nodeName\":\"$(_pod_nodeName)\", \"pod\":\"$(_pod_name)\"}\n",
            ),
        ];
        vars.extend(before_service_account.iter().map(|(n, v)| proxy(n, v)));
        vars.push(env_from("_pod_sa", "spec.serviceAccountName"));
        vars.push(env("_l5d_ns", "linkerd"));
        vars.push(env("_l5d_trustdomain", "cluster.local"));
        let local_name = identity("$(_pod_sa).$(_pod_ns)");
        let identity_service = identity("linkerd-identity.linkerd");
        let destination_service = identity("linkerd-destination.linkerd");
        let tap_service = identity("tap.linkerd-viz");
        let identity_vars = [
            ("IDENTITY_DIR", "/var/run/linkerd/identity/end-entity"),
            ("IDENTITY_TRUST_ANCHORS", self.trust_anchors.as_str()),
            (
                "IDENTITY_TOKEN_FILE",
                "/var/run/secrets/tokens/linkerd-identity-token",
            ),
            (
                "IDENTITY_SVC_ADDR",
                "linkerd-identity-headless.linkerd.svc.cluster.local.:8080",
            ),
            ("IDENTITY_LOCAL_NAME", local_name.as_str()),
            ("IDENTITY_SVC_NAME", identity_service.as_str()),
            ("DESTINATION_SVC_NAME", destination_service.as_str()),
            ("POLICY_SVC_NAME", destination_service.as_str()),
            ("TAP_SVC_NAME", tap_service.as_str()),
        ];
        vars.extend(identity_vars.iter().map(|(n, v)| proxy(n, v)));
        Value::Array(vars)
    }

    /// EndpointSlice `slice` of Service `s`: its share of the pods, every one ready.
    fn endpoint_slice(&self, s: usize, slice: usize) -> Value {
        let app = app_name(s);
        let ns = namespace_name(s / SERVICES_PER_NAMESPACE);
        let m = self.spec.pods_per_service;
        let pods = slice * ENDPOINTS_PER_SLICE..((slice + 1) * ENDPOINTS_PER_SLICE).min(m);
        let endpoints: Vec<Value> = pods
            .map(|j| {
                let at = self.spec.placement(s, j);
                let pod = self.pod_ref(s, j);
                json!({
                    "addresses": [at.ip.to_string()],
                    "conditions": {"ready": true, "serving": true, "terminating": false},
                    "nodeName": node_name(at.node),
                    "targetRef": pod,
                    "zone": ZONES[at.node % ZONES.len()],
                })
            })
            .collect();
        let n = (s * self.spec.slices_per_service() + slice) as u64;
        let created = EPOCH + (s % 600) as i64;
        let metadata = json!({
            "annotations": {
                "endpoints.kubernetes.io/last-change-trigger-time": time(created + 70),
            },
            "creationTimestamp": time(created),
            "generateName": format!("{app}-"),
            "generation": 1 + m as u64,
            "labels": {
                "app.kubernetes.io/part-of": app,
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                "kubernetes.io/service-name": app,
            },
            "name": format!("{app}-{}", k8s_suffix(n * 7919 + 13, 5)),
            "namespace": ns,
            "ownerReferences": [owner("v1", "Service", &app, &uid(Kind::Service, s as u64))],
            "resourceVersion": "0",
            "uid": uid(Kind::EndpointSlice, n),
        });
        let ports = json!([
            {"name": "http", "port": TARGET_PORT, "protocol": "TCP"},
            {"name": "prom", "port": PROM_PORT, "protocol": "TCP"},
        ]);
        let mut eps = object(
            Kind::EndpointSlice,
            metadata,
            [
                ("addressType", json!("IPv4")),
                ("endpoints", Value::Array(endpoints)),
                ("ports", ports),
            ],
        );
        let fields = fields_of(&eps, &["addressType", "endpoints", "metadata", "ports"]);
        eps["metadata"]["managedFields"] = json!([managed_entry(
            Kind::EndpointSlice,
            "kube-controller-manager",
            time(created + 70),
            None,
            fields
        )]);
        eps
    }

    /// An endpoint's `targetRef` to pod `j` of Service `s`.
    fn pod_ref(&self, s: usize, j: usize) -> Value {
        let g = (s * self.spec.pods_per_service + j) as u64;
        json!({
            "kind": "Pod",
            "name": pod_name(s, j),
            "namespace": namespace_name(s / SERVICES_PER_NAMESPACE),
            "uid": uid(Kind::Pod, g),
        })
    }
}

// === the objects ===

/// The resource version of the first object: every object has its own, in generation order,
/// as if created one after another.
pub const FIRST_RESOURCE_VERSION: u64 = 3_100_000;

/// Numbers `objects`' resource versions from `first` on.
fn stamp_versions(objects: &mut [(Kind, Value)], first: u64) {
    for (i, (_, object)) in objects.iter_mut().enumerate() {
        object["metadata"]["resourceVersion"] = json!((first + i as u64).to_string());
    }
}

/// `kind`'s object with `metadata` and the other top-level `fields`.
fn object<const N: usize>(kind: Kind, metadata: Value, fields: [(&str, Value); N]) -> Value {
    let mut map = Map::new();
    map.insert("apiVersion".into(), json!(kind.api_version()));
    map.insert("kind".into(), json!(kind.name()));
    map.insert("metadata".into(), metadata);
    for (key, value) in fields {
        map.insert(key.into(), value);
    }
    Value::Object(map)
}

/// The object as `kubectl get -o yaml` prints it: `managedFields` hidden (kubectl's default
/// since 1.21).
pub fn kubectl_form(mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    object
}

fn namespace(n: usize) -> Value {
    let name = namespace_name(n);
    let metadata = json!({
        "annotations": {"linkerd.io/inject": "enabled"},
        "creationTimestamp": time(EPOCH - 3600),
        "labels": {"kubernetes.io/metadata.name": name},
        "name": name,
        "resourceVersion": "0",
        "uid": uid(Kind::Namespace, n as u64),
    });
    let mut ns = object(
        Kind::Namespace,
        metadata,
        [
            ("spec", json!({"finalizers": ["kubernetes"]})),
            ("status", json!({"phase": "Active"})),
        ],
    );
    let fields = fields_of(&ns, &["metadata"]);
    ns["metadata"]["managedFields"] = json!([managed_entry(
        Kind::Namespace,
        "kubectl-client-side-apply",
        time(EPOCH - 3600),
        None,
        fields
    )]);
    ns
}

fn node(n: usize) -> Value {
    let name = node_name(n);
    let zone = ZONES[n % ZONES.len()];
    let cidr = format!("{}/24", node_pod_cidr(n));
    let created = EPOCH - 7 * 86_400 + n as i64;
    let metadata = json!({
        "annotations": {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        },
        "creationTimestamp": time(created),
        "labels": {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/instance-type": "m6i.xlarge",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": "m6i.xlarge",
            "topology.kubernetes.io/region": "eu-west-1",
            "topology.kubernetes.io/zone": zone,
        },
        "name": name,
        "resourceVersion": "0",
        "uid": uid(Kind::Node, n as u64),
    });
    let spec = json!({
        "podCIDR": cidr,
        "podCIDRs": [cidr],
        "providerID": format!("aws:///{zone}/i-{}", hex(n as u64 * 31 + 7, 17)),
    });
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({
            "lastHeartbeatTime": time(EPOCH + 600),
            "lastTransitionTime": time(created + 30),
            "message": message,
            "reason": reason,
            "status": status,
            "type": type_,
        })
    };
    let image = |name: &str, tag: &str, seed: u64, size: u64| {
        json!({
            "names": [format!("{name}@sha256:{}", hex(seed, 64)), format!("{name}:{tag}")],
            "sizeBytes": size,
        })
    };
    let capacity = json!({
        "cpu": "4", "ephemeral-storage": "104845292Ki", "hugepages-1Gi": "0",
        "hugepages-2Mi": "0", "memory": "15990940Ki", "pods": "110",
    });
    let status = json!({
        "addresses": [
            {"address": node_ip(n).to_string(), "type": "InternalIP"},
            {"address": name, "type": "Hostname"},
            {"address": name, "type": "InternalDNS"},
        ],
        "allocatable": {
            "cpu": "3920m", "ephemeral-storage": "95551679124", "hugepages-1Gi": "0",
            "hugepages-2Mi": "0", "memory": "15283356Ki", "pods": "110",
        },
        "capacity": capacity,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "images": [
            image("cr.l5d.io/linkerd/proxy", PROXY_VERSION, 0x1001, 67_463_448),
            image("registry.k8s.io/kube-proxy", "v1.34.2", 0x1002, 95_999_438),
            image("quay.io/calico/node", "v3.30.2", 0x1003, 27_638_173),
            image("quay.io/calico/cni", "v3.30.2", 0x1004, 126_017_692),
            image("registry.k8s.io/pause", "3.10", 0x1005, 105_153_016),
        ],
        "nodeInfo": {
            "architecture": "amd64",
            "bootID": uid(Kind::Node, 1_000_000 + n as u64),
            "containerRuntimeVersion": "containerd://2.1.4",
            "kernelVersion": "6.12.21-38.117.amzn2023.x86_64",
            "kubeProxyVersion": "",
            "kubeletVersion": "v1.34.2",
            "machineID": hex(n as u64 * 13 + 1, 32),
            "operatingSystem": "linux",
            "osImage": "Amazon Linux 2023.7.20250512",
            "systemUUID": hex(n as u64 * 17 + 3, 32),
        },
    });
    let mut node = object(Kind::Node, metadata, [("spec", spec), ("status", status)]);
    let registered = fields_of(&node, &["metadata"]);
    let allocated = fields_of(&node, &["spec"]);
    let reported = fields_of(&node, &["status"]);
    node["metadata"]["managedFields"] = json!([
        managed_entry(Kind::Node, "kubelet", time(created), None, registered),
        managed_entry(
            Kind::Node,
            "kube-controller-manager",
            time(created + 20),
            None,
            allocated
        ),
        managed_entry(
            Kind::Node,
            "kubelet",
            time(EPOCH + 600),
            Some("status"),
            reported
        ),
    ]);
    node
}

fn service(s: usize) -> Value {
    let app = app_name(s);
    let ns = namespace_name(s / SERVICES_PER_NAMESPACE);
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 10)) + s as u32).to_string();
    let ports = json!([
        {"name": "http", "port": SERVICE_PORT, "protocol": "TCP", "targetPort": TARGET_PORT},
        {"name": "prom", "port": PROM_PORT, "protocol": "TCP", "targetPort": PROM_PORT},
    ]);
    // What `kubectl apply` records: the manifest as written, before defaulting.
    let applied = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "annotations": {},
            "labels": {"app": app, "app.kubernetes.io/part-of": app},
            "name": app,
            "namespace": ns,
        },
        "spec": {
            "ports": [
                {"name": "http", "port": SERVICE_PORT, "targetPort": TARGET_PORT},
                {"name": "prom", "port": PROM_PORT, "targetPort": PROM_PORT},
            ],
            "selector": {"app": app},
        },
    });
    let created = EPOCH + (s % 600) as i64;
    let metadata = json!({
        "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": format!("{applied}\n"),
        },
        "creationTimestamp": time(created),
        "labels": {"app": app, "app.kubernetes.io/part-of": app},
        "name": app,
        "namespace": ns,
        "resourceVersion": "0",
        "uid": uid(Kind::Service, s as u64),
    });
    let spec = json!({
        "clusterIP": ip,
        "clusterIPs": [ip],
        "internalTrafficPolicy": "Cluster",
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
        "ports": ports,
        "selector": {"app": app},
        "sessionAffinity": "None",
        "type": "ClusterIP",
    });
    let mut service = object(
        Kind::Service,
        metadata,
        [("spec", spec), ("status", json!({"loadBalancer": {}}))],
    );
    let fields = fields_of(&service, &["metadata", "spec"]);
    service["metadata"]["managedFields"] = json!([managed_entry(
        Kind::Service,
        "kubectl-client-side-apply",
        time(created),
        None,
        fields
    )]);
    service
}

fn replica_set(s: usize, replicas: usize) -> Value {
    let app = app_name(s);
    let ns = namespace_name(s / SERVICES_PER_NAMESPACE);
    let hash = template_hash(s);
    let created = EPOCH + 1 + (s % 600) as i64;
    let metadata = json!({
        "annotations": {
            "deployment.kubernetes.io/desired-replicas": replicas.to_string(),
            "deployment.kubernetes.io/max-replicas": (replicas + replicas.div_ceil(4)).to_string(),
            "deployment.kubernetes.io/revision": "2",
        },
        "creationTimestamp": time(created),
        "generation": 1,
        "labels": {"app": app, "pod-template-hash": hash, "version": "v1"},
        "name": replica_set_name(s),
        "namespace": ns,
        "ownerReferences": [owner("apps/v1", "Deployment", &app, &uuid(DEPLOYMENT_SPACE, s as u64))],
        "resourceVersion": "0",
        "uid": uid(Kind::ReplicaSet, s as u64),
    });
    let mut template_spec = json!({
        "containers": [app_container(s, "")],
        "dnsPolicy": "ClusterFirst",
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": app,
        "serviceAccountName": app,
        "terminationGracePeriodSeconds": 30,
    });
    // The template has no service account volume yet: admission adds it to each pod.
    if let Some(container) = template_spec["containers"][0].as_object_mut() {
        container.remove("volumeMounts");
    }
    let spec = json!({
        "replicas": replicas,
        "selector": {"matchLabels": {"app": app, "pod-template-hash": hash, "version": "v1"}},
        "template": {
            "metadata": {
                "annotations": {"kubectl.kubernetes.io/restartedAt": time(EPOCH - 86_400)},
                "creationTimestamp": null,
                "labels": {"app": app, "pod-template-hash": hash, "version": "v1"},
            },
            "spec": template_spec,
        },
    });
    let status = json!({
        "availableReplicas": replicas,
        "fullyLabeledReplicas": replicas,
        "observedGeneration": 1,
        "readyReplicas": replicas,
        "replicas": replicas,
    });
    let mut rs = object(
        Kind::ReplicaSet,
        metadata,
        [("spec", spec), ("status", status)],
    );
    let owned = fields_of(&rs, &["metadata", "spec"]);
    let reported = fields_of(&rs, &["status"]);
    rs["metadata"]["managedFields"] = json!([
        managed_entry(
            Kind::ReplicaSet,
            "kube-controller-manager",
            time(created),
            None,
            owned
        ),
        managed_entry(
            Kind::ReplicaSet,
            "kube-controller-manager",
            time(created + 70),
            Some("status"),
            reported
        ),
    ]);
    rs
}

/// The application container of Service `s`'s pods, with the service account token mounted
/// from `token_volume`.
fn app_container(s: usize, token_volume: &str) -> Value {
    let app = app_name(s);
    json!({
        "env": [
            {"name": "HTTP_PORT", "value": TARGET_PORT.to_string()},
            {"name": "PROM_PORT", "value": PROM_PORT.to_string()},
            {"name": "OTEL_SERVICE_NAME", "value": app},
        ],
        "image": format!("ghcr.io/example/{}:1.{}.0", APPS[s % APPS.len()], s % 7),
        "imagePullPolicy": "IfNotPresent",
        "livenessProbe": http_probe("/healthz", TARGET_PORT, 10),
        "name": app,
        "ports": [port(TARGET_PORT, "http"), port(PROM_PORT, "prom")],
        "readinessProbe": http_probe("/ready", TARGET_PORT, 5),
        "resources": {
            "limits": {"memory": "256Mi"},
            "requests": {"cpu": "100m", "memory": "128Mi"},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [mount("/var/run/secrets/kubernetes.io/serviceaccount", token_volume, true)],
    })
}

/// `linkerd-init`: the iptables rules that send the pod's traffic through the proxy.
fn init_container(token_volume: &str) -> Value {
    json!({
        "args": [
            "--firewall-bin-path", "iptables-nft",
            "--firewall-save-bin-path", "iptables-nft-save",
            "--ipv6=false",
            "--incoming-proxy-port", "4143",
            "--outgoing-proxy-port", "4140",
            "--proxy-uid", "2102",
            "--inbound-ports-to-ignore", "4190,4191,4567,4568",
            "--outbound-ports-to-ignore", "4567,4568",
        ],
        "command": ["/usr/lib/linkerd/linkerd2-proxy-init"],
        "image": PROXY_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "name": "linkerd-init",
        "resources": {},
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "capabilities": {"add": ["NET_ADMIN", "NET_RAW"]},
            "privileged": false,
            "readOnlyRootFilesystem": true,
            "runAsGroup": 65534,
            "runAsNonRoot": true,
            "runAsUser": 65534,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            mount("/run", "linkerd-proxy-init-xtables-lock", false),
            mount("/var/run/secrets/kubernetes.io/serviceaccount", token_volume, true),
        ],
    })
}

fn pod_volumes(token_volume: &str) -> Value {
    json!([
        {
            "name": token_volume,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                    {"downwardAPI": {"items": [{
                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                        "path": "namespace",
                    }]}},
                ],
            },
        },
        {"emptyDir": {}, "name": "linkerd-proxy-init-xtables-lock"},
        {"emptyDir": {"medium": "Memory"}, "name": "linkerd-identity-end-entity"},
        {
            "name": "linkerd-identity-token",
            "projected": {
                "defaultMode": 420,
                "sources": [{"serviceAccountToken": {
                    "audience": "identity.l5d.io",
                    "expirationSeconds": 86400,
                    "path": "linkerd-identity-token",
                }}],
            },
        },
    ])
}

/// What the kubelet reports for pod `g` of Service `s`, created at `created`: running, ready.
fn pod_status(
    s: usize,
    g: u64,
    created: i64,
    host_ip: &str,
    ip: &str,
    token_volume: &str,
) -> Value {
    let app = app_name(s);
    let condition = |type_: &str, at: i64| json!({"lastProbeTime": null, "lastTransitionTime": time(at), "status": "True", "type": type_});
    let user = |id: u64| json!({"linux": {"gid": id, "supplementalGroups": [id], "uid": id}});
    let status_mount = |path: &str, name: &str, read_only: bool| {
        let mut m = mount(path, name, read_only);
        if read_only {
            m["recursiveReadOnly"] = json!("Disabled");
        }
        m
    };
    let token_mount = status_mount(
        "/var/run/secrets/kubernetes.io/serviceaccount",
        token_volume,
        true,
    );
    let app_image = format!("ghcr.io/example/{}:1.{}.0", APPS[s % APPS.len()], s % 7);
    let app_image_id = format!(
        "ghcr.io/example/{}@sha256:{}",
        APPS[s % APPS.len()],
        hex(0x2000 + (s % 70) as u64, 64)
    );
    let proxy_image_id = format!("cr.l5d.io/linkerd/proxy@sha256:{}", hex(0x1001, 64));
    let init_id = format!("containerd://{}", hex(g * 3 + 0x30_0000, 64));
    json!({
        "conditions": [
            condition("PodReadyToStartContainers", created + 4),
            condition("Initialized", created + 4),
            condition("Ready", created + 9),
            condition("ContainersReady", created + 9),
            condition("PodScheduled", created),
        ],
        "containerStatuses": [
            {
                "containerID": format!("containerd://{}", hex(g * 3 + 0x10_0000, 64)),
                "image": app_image,
                "imageID": app_image_id,
                "lastState": {},
                "name": app,
                "ready": true,
                "restartCount": 0,
                "started": true,
                "state": {"running": {"startedAt": time(created + 6)}},
                "user": user(0),
                "volumeMounts": [token_mount],
            },
            {
                "containerID": format!("containerd://{}", hex(g * 3 + 0x20_0000, 64)),
                "image": PROXY_IMAGE,
                "imageID": proxy_image_id,
                "lastState": {},
                "name": "linkerd-proxy",
                "ready": true,
                "restartCount": 0,
                "started": true,
                "state": {"running": {"startedAt": time(created + 4)}},
                "user": user(2102),
                "volumeMounts": [
                    status_mount("/var/run/linkerd/identity/end-entity", "linkerd-identity-end-entity", false),
                    status_mount("/var/run/secrets/tokens", "linkerd-identity-token", false),
                    token_mount,
                ],
            },
        ],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "initContainerStatuses": [{
            "containerID": init_id,
            "image": PROXY_IMAGE,
            "imageID": proxy_image_id,
            "lastState": {},
            "name": "linkerd-init",
            "ready": true,
            "restartCount": 0,
            "started": false,
            "state": {"terminated": {
                "containerID": init_id,
                "exitCode": 0,
                "finishedAt": time(created + 3),
                "reason": "Completed",
                "startedAt": time(created + 2),
            }},
            "user": user(65534),
            "volumeMounts": [
                status_mount("/run", "linkerd-proxy-init-xtables-lock", false),
                token_mount,
            ],
        }],
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "qosClass": "Burstable",
        "startTime": time(created),
    })
}

fn env(name: &str, value: &str) -> Value {
    json!({"name": name, "value": value})
}

fn env_from(name: &str, field_path: &str) -> Value {
    json!({"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": field_path}}})
}

fn port(number: u16, name: &str) -> Value {
    json!({"containerPort": number, "name": name, "protocol": "TCP"})
}

fn mount(path: &str, name: &str, read_only: bool) -> Value {
    let mut m = json!({"mountPath": path, "name": name});
    if read_only {
        m["readOnly"] = json!(true);
    }
    m
}

fn http_probe(path: &str, port: u16, initial_delay: u32) -> Value {
    json!({
        "failureThreshold": 3,
        "httpGet": {"path": path, "port": port, "scheme": "HTTP"},
        "initialDelaySeconds": initial_delay,
        "periodSeconds": 10,
        "successThreshold": 1,
        "timeoutSeconds": 1,
    })
}

fn toleration(key: &str) -> Value {
    json!({"effect": "NoExecute", "key": key, "operator": "Exists", "tolerationSeconds": 300})
}

fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "blockOwnerDeletion": true,
        "controller": true,
        "kind": kind,
        "name": name,
        "uid": uid,
    })
}

// === managedFields ===

/// One `managedFields` entry: `manager` wrote `fields` (a `fieldsV1` set) with an `Update` at
/// `time`, through `subresource` when given.
fn managed_entry(
    kind: Kind,
    manager: &str,
    time: String,
    subresource: Option<&str>,
    fields: Value,
) -> Value {
    let mut entry = json!({
        "apiVersion": kind.api_version(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        "manager": manager,
        "operation": "Update",
        "time": time,
    });
    if let Some(subresource) = subresource {
        entry["subresource"] = json!(subresource);
    }
    entry
}

/// The `fieldsV1` set of the top-level fields `keys` of `object`. Of `metadata`, only what a
/// writer sets is owned (annotations, labels, owner references, generateName, ...), not the
/// fields the API server fills in.
fn fields_of(object: &Value, keys: &[&str]) -> Value {
    const SERVER_SET: [&str; 5] = [
        "creationTimestamp",
        "name",
        "namespace",
        "resourceVersion",
        "uid",
    ];
    let mut set = Map::new();
    for key in keys {
        let Some(value) = object.get(*key) else {
            continue;
        };
        let fields = match (*key, value) {
            ("metadata", Value::Object(metadata)) => {
                let owned: Map<String, Value> = metadata
                    .iter()
                    .filter(|(k, _)| !SERVER_SET.contains(&k.as_str()) && *k != "managedFields")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                fields_v1(key, &Value::Object(owned), 1)
            }
            _ => fields_v1(key, value, 1),
        };
        set.insert(format!("f:{key}"), fields);
    }
    Value::Object(set)
}

/// Server-side apply's field set of `value` (the field `name`, at `depth` from the object's
/// root): `f:<key>` per map key, `k:<key fields>` per item of a list merged by key, `.` for
/// every map below the top level, and `{}` for a scalar or an atomic list.
fn fields_v1(name: &str, value: &Value, depth: usize) -> Value {
    match value {
        Value::Object(map) => {
            let mut set = Map::new();
            if depth > 1 {
                set.insert(".".into(), json!({}));
            }
            for (key, child) in map {
                set.insert(format!("f:{key}"), fields_v1(key, child, depth + 1));
            }
            Value::Object(set)
        }
        Value::Array(items) => {
            let Some(keys) = merge_keys(name, items) else {
                return json!({});
            };
            let mut set = Map::new();
            set.insert(".".into(), json!({}));
            for item in items {
                let key: Map<String, Value> = keys
                    .iter()
                    .map(|k| ((*k).to_string(), item[*k].clone()))
                    .collect();
                set.insert(
                    format!("k:{}", Value::Object(key)),
                    fields_v1(name, item, depth + 1),
                );
            }
            Value::Object(set)
        }
        _ => json!({}),
    }
}

/// The fields that identify an item of list `name` when the list is merged by key, or `None`
/// for an atomic list.
fn merge_keys(name: &str, items: &[Value]) -> Option<&'static [&'static str]> {
    let candidates: &[&'static [&'static str]] = match name {
        "containers" | "initContainers" | "env" | "volumes" => &[&["name"]],
        "ports" => &[&["containerPort", "protocol"], &["port", "protocol"]],
        "volumeMounts" => &[&["mountPath"]],
        "ownerReferences" => &[&["uid"]],
        "conditions" => &[&["type"]],
        "podIPs" | "hostIPs" => &[&["ip"]],
        _ => return None,
    };
    candidates.iter().copied().find(|keys| {
        items
            .iter()
            .all(|item| keys.iter().all(|k| item.get(*k).is_some()))
    })
}

// === the state directory ===

/// Writes `items` as one `List` into `path` and counts the file in `written`.
fn write_list(
    path: &Path,
    items: Vec<Value>,
    format: Format,
    written: &mut StateDir,
) -> anyhow::Result<()> {
    let count = items.len();
    let list = json!({
        "apiVersion": "v1",
        "items": items,
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    });
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    match format {
        Format::Yaml => {
            let text = linkerd_k8s_api::yaml::to_string(&list)
                .with_context(|| format!("cannot encode {}", path.display()))?;
            out.write_all(text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Format::Json => {
            let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
            let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
            serde::Serialize::serialize(&list, &mut serializer)
                .with_context(|| format!("cannot write {}", path.display()))?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()
        .with_context(|| format!("cannot write {}", path.display()))?;
    let bytes = std::fs::metadata(path)
        .with_context(|| format!("cannot read the size of {}", path.display()))?
        .len();
    ensure!(
        bytes <= MAX_FILE_BYTES,
        "{} is {bytes} bytes, over the offline source's limit of {MAX_FILE_BYTES}",
        path.display()
    );
    written.files += 1;
    written.bytes += bytes;
    written.objects += count;
    Ok(())
}

// === names, addresses, identifiers ===

/// The UID space of Deployments, which are not generated as objects but own the ReplicaSets.
const DEPLOYMENT_SPACE: u64 = 100;

fn app_name(s: usize) -> String {
    format!("{}-{s}", APPS[s % APPS.len()])
}

fn namespace_name(n: usize) -> String {
    format!("bench-{n}")
}

fn template_hash(s: usize) -> String {
    k8s_suffix(s as u64 * 104_729 + 7, 10)
}

fn replica_set_name(s: usize) -> String {
    format!("{}-{}", app_name(s), template_hash(s))
}

fn pod_name(s: usize, j: usize) -> String {
    // Distinct within a ReplicaSet: the suffix is a bijection of j below 27^5.
    format!(
        "{}-{}",
        replica_set_name(s),
        k8s_suffix(j as u64 * 48_271 + 11, 5)
    )
}

fn node_name(n: usize) -> String {
    let [_, _, c, d] = node_ip(n).octets();
    format!("ip-10-20-{c}-{d}.eu-west-1.compute.internal")
}

/// Node `n`'s InternalIP: 10.20.0.1 upwards, 250 per /24.
fn node_ip(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 20, (n / 250) as u8, (n % 250 + 1) as u8)
}

/// Node `n`'s pod CIDR (a /24 of 10.128.0.0/9, away from the Services' 10.96.0.0/12).
fn node_pod_cidr(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 128 + (n / 256) as u8, (n % 256) as u8, 0)
}

/// A random-looking, deterministic UID (UUID version 4 layout) of object `n` of `kind`.
fn uid(kind: Kind, n: u64) -> String {
    uuid(kind as u64 + 1, n)
}

fn uuid(space: u64, n: u64) -> String {
    let a = mix((space << 48) ^ n);
    let b = mix(a);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:x}{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        8 + (b >> 62),
        (b >> 48) & 0xfff,
        b & 0xffff_ffff_ffff
    )
}

/// `len` lowercase hex digits derived from `seed`.
fn hex(seed: u64, len: usize) -> String {
    let mut s = String::with_capacity(len + 16);
    let mut x = seed;
    while s.len() < len {
        x = mix(x);
        s.push_str(&format!("{x:016x}"));
    }
    s.truncate(len);
    s
}

/// SplitMix64's output function: consecutive inputs give unrelated outputs.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// RFC 3339 UTC time of `seconds` since the Unix epoch, as the API server writes it.
fn time(seconds: i64) -> String {
    Timestamp::from_second(seconds)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// A PEM block shaped like the trust anchor (an ECDSA P-256 certificate, 406 bytes of DER):
/// the proxies never parse it here, only its size and shape matter.
fn pem_certificate(seed: u64) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut der = vec![0x30, 0x82, 0x01, 0x92];
    der.extend((0..402).map(|i| (mix(seed + i) & 0xff) as u8));
    let mut encoded = String::new();
    for chunk in der.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                encoded.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                encoded.push('=');
            }
        }
    }
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in encoded.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

#[cfg(test)]
mod tests;
