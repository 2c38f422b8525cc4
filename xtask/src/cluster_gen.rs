//! Generates a cluster state directory for `cargo xtask bench`: N Services, each with one
//! EndpointSlice of M ready endpoints backed by M meshed pods (shaped as in
//! tests/fixtures/emojivoto, trimmed to the fields a real object always has and those the index
//! reads).
//!
//! Everything goes in one bulk file, except the EndpointSlice of the churning service (service
//! 0), which is alone in `churn.yaml` so that each change re-parses only that small file.
//! [`ClusterSpec::write_service_profiles`] adds one ServiceProfile per Service in
//! `profiles.yaml`, written as a user would write them.

use anyhow::Context;
use std::{fmt::Write as _, io::Write as _, net::Ipv4Addr, path::Path};

/// The namespace of every generated object.
pub const NAMESPACE: &str = "bench";
/// The file holding the churning service's EndpointSlice.
pub const CHURN_FILE: &str = "churn.yaml";
/// The file holding everything else.
pub const BULK_FILE: &str = "cluster.yaml";
/// The file holding the ServiceProfiles, when there are any.
pub const PROFILES_FILE: &str = "profiles.yaml";
/// The routes of every generated ServiceProfile, by name, in order.
pub const PROFILE_ROUTES: [&str; 4] = [
    "GET /api/items",
    "POST /api/items",
    "GET /api/items/{id}",
    "GET /healthz",
];
/// The retry budget of every generated ServiceProfile: ratio, min retries per second, TTL
/// in seconds.
pub const PROFILE_RETRY_BUDGET: (f32, u32, i64) = (0.25, 5, 15);
/// The Service port clients ask for.
pub const SERVICE_PORT: u16 = 80;
/// The pods' application port (the Service's target port).
pub const TARGET_PORT: u16 = 8080;

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// What to generate.
#[derive(Clone, Copy, Debug)]
pub struct ClusterSpec {
    /// Number of Services.
    pub services: usize,
    /// Endpoints (pods) per Service.
    pub endpoints: usize,
}

/// The churning service's EndpointSlice, renderable with any endpoints marked not ready.
#[derive(Clone, Debug)]
pub struct ChurnSlice {
    service: usize,
    pods: Vec<PodSpec>,
}

#[derive(Clone, Debug)]
struct PodSpec {
    name: String,
    uid: String,
    ip: Ipv4Addr,
    node: usize,
}

// === impl ClusterSpec ===

impl ClusterSpec {
    /// The authority of the service whose endpoints change, as a proxy asks for it.
    pub fn churn_authority(&self) -> String {
        format!(
            "{}.{NAMESPACE}.svc.cluster.local:{SERVICE_PORT}",
            service_name(0)
        )
    }

    /// The churning service's endpoint addresses (`IP:target port`), in pod order.
    pub fn churn_addrs(&self) -> Vec<std::net::SocketAddr> {
        (0..self.endpoints)
            .map(|j| std::net::SocketAddr::new(pod_ip(self, 0, j).into(), TARGET_PORT))
            .collect()
    }

    /// Writes [`BULK_FILE`] and [`CHURN_FILE`] (every endpoint ready) into `dir` and returns
    /// the churning slice to re-render later.
    pub fn write(&self, dir: &Path) -> anyhow::Result<ChurnSlice> {
        let bulk_path = dir.join(BULK_FILE);
        let file = std::fs::File::create(&bulk_path)
            .with_context(|| format!("cannot create {}", bulk_path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        let mut doc = String::with_capacity(64 * 1024);

        write_namespace(&mut doc);
        for (node, zone) in ZONES.iter().enumerate() {
            write_node(&mut doc, node, zone);
        }
        out.write_all(doc.as_bytes())?;

        let mut churn = None;
        for service in 0..self.services {
            doc.clear();
            write_service(&mut doc, service);
            write_replica_set(&mut doc, service, self.endpoints);
            let pods: Vec<PodSpec> = (0..self.endpoints)
                .map(|j| PodSpec {
                    name: format!("{}-{}", replica_set_name(service), pod_suffix(j)),
                    uid: uid(3, (service * self.endpoints + j) as u64),
                    ip: pod_ip(self, service, j),
                    node: (service + j) % ZONES.len(),
                })
                .collect();
            for pod in &pods {
                write_pod(&mut doc, service, pod);
            }
            let slice = ChurnSlice { service, pods };
            if service == 0 {
                churn = Some(slice);
            } else {
                write_slice(&mut doc, &slice, &|_| true);
            }
            out.write_all(doc.as_bytes())
                .with_context(|| format!("cannot write {}", bulk_path.display()))?;
        }
        out.flush()
            .with_context(|| format!("cannot write {}", bulk_path.display()))?;

        let churn = churn.context("a cluster needs at least one service")?;
        let churn_path = dir.join(CHURN_FILE);
        std::fs::write(&churn_path, churn.render(&vec![true; self.endpoints]))
            .with_context(|| format!("cannot write {}", churn_path.display()))?;
        Ok(churn)
    }

    /// The authority a proxy asks for to reach service `service` (from 0).
    pub fn service_authority(&self, service: usize) -> String {
        format!("{}:{SERVICE_PORT}", service_fqn(service))
    }

    /// Writes [`PROFILES_FILE`] into `dir`: one ServiceProfile per Service, named by its
    /// fully-qualified name, with the routes of [`PROFILE_ROUTES`] and the retry budget of
    /// [`PROFILE_RETRY_BUDGET`]. Returns the file's size in bytes.
    pub fn write_service_profiles(&self, dir: &Path) -> anyhow::Result<u64> {
        let path = dir.join(PROFILES_FILE);
        let mut doc = String::with_capacity(1200 * self.services);
        for service in 0..self.services {
            write_service_profile(&mut doc, service);
        }
        std::fs::write(&path, &doc).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(doc.len() as u64)
    }
}

/// The name of service `service`'s ServiceProfile, and what `GetProfile` reports as its
/// fully-qualified name.
pub fn service_fqn(service: usize) -> String {
    format!("{}.{NAMESPACE}.svc.cluster.local", service_name(service))
}

// === impl ChurnSlice ===

impl ChurnSlice {
    /// The slice as YAML, endpoint `j` ready when `ready[j]` (missing entries are ready).
    pub fn render(&self, ready: &[bool]) -> String {
        let mut doc = String::with_capacity(512 * self.pods.len());
        write_slice(&mut doc, self, &|j| ready.get(j).copied().unwrap_or(true));
        doc
    }
}

// === the objects ===

fn write_namespace(doc: &mut String) {
    let _ = write!(
        doc,
        r#"---
apiVersion: v1
kind: Namespace
metadata:
  annotations:
    linkerd.io/inject: enabled
  labels:
    kubernetes.io/metadata.name: {NAMESPACE}
  name: {NAMESPACE}
  uid: {uid}
spec:
  finalizers:
  - kubernetes
status:
  phase: Active
"#,
        uid = uid(0, 0),
    );
}

fn write_node(doc: &mut String, node: usize, zone: &str) {
    let _ = write!(
        doc,
        r#"---
apiVersion: v1
kind: Node
metadata:
  labels:
    kubernetes.io/hostname: {name}
    kubernetes.io/os: linux
    topology.kubernetes.io/region: bench
    topology.kubernetes.io/zone: {zone}
  name: {name}
  uid: {uid}
spec:
  podCIDR: 10.{node}.0.0/16
status:
  addresses:
  - address: {host_ip}
    type: InternalIP
  - address: {name}
    type: Hostname
"#,
        name = node_name(node),
        uid = uid(1, node as u64),
        host_ip = host_ip(node),
    );
}

fn write_service(doc: &mut String, service: usize) {
    let name = service_name(service);
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 10)) + service as u32);
    let _ = write!(
        doc,
        r#"---
apiVersion: v1
kind: Service
metadata:
  labels:
    app: {name}
  name: {name}
  namespace: {NAMESPACE}
  uid: {uid}
spec:
  clusterIP: {ip}
  clusterIPs:
  - {ip}
  internalTrafficPolicy: Cluster
  ipFamilies:
  - IPv4
  ipFamilyPolicy: SingleStack
  ports:
  - name: http
    port: {SERVICE_PORT}
    protocol: TCP
    targetPort: {TARGET_PORT}
  selector:
    app: {name}
  sessionAffinity: None
  type: ClusterIP
status:
  loadBalancer: {{}}
"#,
        uid = service_uid(service),
    );
}

fn write_replica_set(doc: &mut String, service: usize, replicas: usize) {
    let name = service_name(service);
    let _ = write!(
        doc,
        r#"---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  labels:
    app: {name}
    pod-template-hash: {hash}
  name: {rs}
  namespace: {NAMESPACE}
  ownerReferences:
  - apiVersion: apps/v1
    blockOwnerDeletion: true
    controller: true
    kind: Deployment
    name: {name}
    uid: {deploy_uid}
  uid: {rs_uid}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: {name}
      pod-template-hash: {hash}
status:
  readyReplicas: {replicas}
  replicas: {replicas}
"#,
        hash = template_hash(service),
        rs = replica_set_name(service),
        deploy_uid = uid(4, service as u64),
        rs_uid = replica_set_uid(service),
    );
}

fn write_pod(doc: &mut String, service: usize, pod: &PodSpec) {
    let app = service_name(service);
    let _ = write!(
        doc,
        r#"---
apiVersion: v1
kind: Pod
metadata:
  annotations:
    linkerd.io/created-by: linkerd/proxy-injector edge-26.4.4
    linkerd.io/inject: enabled
    linkerd.io/proxy-version: edge-26.4.4
  labels:
    app: {app}
    linkerd.io/control-plane-ns: linkerd
    linkerd.io/proxy-deployment: {app}
    linkerd.io/workload-ns: {NAMESPACE}
    pod-template-hash: {hash}
  name: {name}
  namespace: {NAMESPACE}
  ownerReferences:
  - apiVersion: apps/v1
    blockOwnerDeletion: true
    controller: true
    kind: ReplicaSet
    name: {rs}
    uid: {rs_uid}
  uid: {uid}
spec:
  containers:
  - env:
    - name: LINKERD2_PROXY_CONTROL_LISTEN_ADDR
      value: 0.0.0.0:4190
    - name: LINKERD2_PROXY_ADMIN_LISTEN_ADDR
      value: 0.0.0.0:4191
    - name: LINKERD2_PROXY_OUTBOUND_LISTEN_ADDR
      value: 127.0.0.1:4140
    - name: LINKERD2_PROXY_INBOUND_LISTEN_ADDR
      value: 0.0.0.0:4143
    - name: LINKERD2_PROXY_INBOUND_PORTS
      value: "{TARGET_PORT}"
    image: cr.l5d.io/linkerd/proxy:edge-26.4.4
    name: linkerd-proxy
    ports:
    - containerPort: 4143
      name: linkerd-proxy
      protocol: TCP
    - containerPort: 4191
      name: linkerd-admin
      protocol: TCP
  - image: ghcr.io/example/{app}:v1
    name: {app}
    ports:
    - containerPort: {TARGET_PORT}
      name: http
      protocol: TCP
  nodeName: {node}
  serviceAccountName: {app}
status:
  hostIP: {host_ip}
  hostIPs:
  - ip: {host_ip}
  phase: Running
  podIP: {ip}
  podIPs:
  - ip: {ip}
"#,
        hash = template_hash(service),
        name = pod.name,
        rs = replica_set_name(service),
        rs_uid = replica_set_uid(service),
        uid = pod.uid,
        node = node_name(pod.node),
        host_ip = host_ip(pod.node),
        ip = pod.ip,
    );
}

/// A ServiceProfile as `linkerd profile --template` starts one and a user fills it in: a
/// retryable list route, a create route with a timeout and 5xx failures, a per-item route
/// matched on method and path regex with `all`, and a health check matched on the path only.
fn write_service_profile(doc: &mut String, service: usize) {
    let (ratio, min_retries, ttl) = PROFILE_RETRY_BUDGET;
    let [list, create, item, health] = PROFILE_ROUTES;
    let _ = write!(
        doc,
        r#"---
apiVersion: linkerd.io/v1alpha2
kind: ServiceProfile
metadata:
  name: {fqn}
  namespace: {NAMESPACE}
  uid: {uid}
spec:
  retryBudget:
    retryRatio: {ratio}
    minRetriesPerSecond: {min_retries}
    ttl: {ttl}s
  routes:
  - name: {list}
    condition:
      method: GET
      pathRegex: /api/items
    isRetryable: true
  - name: {create}
    condition:
      method: POST
      pathRegex: /api/items
    timeout: 500ms
    responseClasses:
    - condition:
        status:
          min: 500
          max: 599
      isFailure: true
  - name: {item:?}
    condition:
      all:
      - method: GET
      - pathRegex: /api/items/[^/]+
    timeout: 1s
    isRetryable: true
  - name: {health}
    condition:
      pathRegex: /healthz
"#,
        fqn = service_fqn(service),
        uid = uid(7, service as u64),
    );
}

fn write_slice(doc: &mut String, slice: &ChurnSlice, ready: &dyn Fn(usize) -> bool) {
    let name = service_name(slice.service);
    let _ = write!(
        doc,
        r#"---
addressType: IPv4
apiVersion: discovery.k8s.io/v1
endpoints:
"#
    );
    for (j, pod) in slice.pods.iter().enumerate() {
        let ready = ready(j);
        let _ = write!(
            doc,
            r#"- addresses:
  - {ip}
  conditions:
    ready: {ready}
    serving: {ready}
    terminating: false
  nodeName: {node}
  targetRef:
    kind: Pod
    name: {pod_name}
    namespace: {NAMESPACE}
    uid: {pod_uid}
  zone: {zone}
"#,
            ip = pod.ip,
            node = node_name(pod.node),
            pod_name = pod.name,
            pod_uid = pod.uid,
            zone = ZONES[pod.node],
        );
    }
    let _ = write!(
        doc,
        r#"kind: EndpointSlice
metadata:
  generateName: {name}-
  labels:
    endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io
    kubernetes.io/service-name: {name}
  name: {name}-{suffix}
  namespace: {NAMESPACE}
  ownerReferences:
  - apiVersion: v1
    blockOwnerDeletion: true
    controller: true
    kind: Service
    name: {name}
    uid: {svc_uid}
  uid: {uid}
ports:
- name: http
  port: {TARGET_PORT}
  protocol: TCP
"#,
        suffix = k8s_suffix(slice.service as u64 * 7919 + 13, 5),
        svc_uid = service_uid(slice.service),
        uid = uid(5, slice.service as u64),
    );
}

// === names and addresses ===

fn service_name(service: usize) -> String {
    format!("svc-{service}")
}

fn replica_set_name(service: usize) -> String {
    format!("{}-{}", service_name(service), template_hash(service))
}

fn template_hash(service: usize) -> String {
    k8s_suffix(service as u64 * 104_729 + 7, 10)
}

fn pod_suffix(j: usize) -> String {
    k8s_suffix(j as u64 * 31 + 3, 5)
}

fn node_name(node: usize) -> String {
    format!("bench-node-{node}")
}

fn host_ip(node: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 20, node as u8, 10)
}

/// Pod IPs count up from 10.128.0.1, service after service.
fn pod_ip(spec: &ClusterSpec, service: usize, j: usize) -> Ipv4Addr {
    let n = (service * spec.endpoints + j) as u32;
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 128, 0, 1)) + n)
}

fn service_uid(service: usize) -> String {
    uid(2, service as u64)
}

fn replica_set_uid(service: usize) -> String {
    uid(6, service as u64)
}

/// A UUID-shaped, deterministic UID: `kind` tells object kinds apart, `n` objects of one kind.
fn uid(kind: u32, n: u64) -> String {
    format!("{kind:08x}-0000-4000-8000-{n:012x}")
}

/// A generated-name suffix in the alphabet Kubernetes uses (no vowels, no look-alikes),
/// distinct for distinct `n` below 27^len: `n` is scrambled by an affine bijection modulo
/// 27^len, then written in base 27.
pub(crate) fn k8s_suffix(n: u64, len: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let base = ALPHABET.len() as u128;
    let modulus = base.pow(len as u32);
    // 0x5bd1e995 is not a multiple of 3, so it is invertible modulo a power of 27.
    let mut x = (u128::from(n) % modulus * 0x5bd1_e995 + 0x2545) % modulus;
    let mut s = String::with_capacity(len);
    for _ in 0..len {
        s.push(ALPHABET[(x % base) as usize] as char);
        x /= base;
    }
    s
}
