//! Generates a cluster state directory for `cargo xtask bench-inbound`: D Deployments of meshed
//! pods in one namespace, each pod with [`PORTS`] inbound ports, one Server per
//! (Deployment, port), and one AuthorizationPolicy targeting the namespace that requires one
//! MeshTLSAuthentication, so that every Server carries the same authorization.
//!
//! Everything goes in one bulk file, except the AuthorizationPolicy and the
//! MeshTLSAuthentication, which are alone in [`POLICY_FILE`]: rewriting that small file with
//! another identity list ([`InboundSpec::render_policy`]) changes the policy of every Server,
//! hence of every (pod, port) stream, at once.

use anyhow::Context;
use std::{fmt::Write as _, io::Write as _, net::Ipv4Addr, path::Path};

/// The namespace of every generated object.
pub const NAMESPACE: &str = "bench-inbound";
/// The file holding the pods and Servers.
pub const BULK_FILE: &str = "cluster.yaml";
/// The file holding the AuthorizationPolicy and its MeshTLSAuthentication.
pub const POLICY_FILE: &str = "policy.yaml";
/// The AuthorizationPolicy every Server gets, as the proxy's labels name it.
pub const AUTHZ_NAME: &str = "bench-clients";
/// The MeshTLSAuthentication the AuthorizationPolicy requires.
pub const MTLS_AUTHN_NAME: &str = "bench-clients";

/// A pod's inbound ports: (container port name, number, the Server's `proxyProtocol`).
pub const PORTS: [(&str, u16, &str); 5] = [
    ("http", 8080, "HTTP/1"),
    ("grpc", 8081, "gRPC"),
    ("h2", 8082, "HTTP/2"),
    ("tcp", 8083, "opaque"),
    ("admin", 9990, "unknown"),
];

/// The identities every version of the MeshTLSAuthentication admits, before the one that
/// changes.
const BASE_CLIENTS: [&str; 3] = ["frontend", "gateway", "worker"];

/// What to generate.
#[derive(Clone, Copy, Debug)]
pub struct InboundSpec {
    /// Number of Deployments (each with one Server per port).
    pub deployments: usize,
    /// Number of pods, spread evenly over the Deployments.
    pub pods: usize,
}

// === impl InboundSpec ===

impl InboundSpec {
    /// The workload of pod `pod` (from 0) as a proxy sends it: `{"ns":..,"pod":..}`.
    pub fn workload(&self, pod: usize) -> String {
        format!(r#"{{"ns":"{NAMESPACE}","pod":"{}"}}"#, self.pod_name(pod))
    }

    /// The name of the Server covering pod `pod`'s port `port` (an index into [`PORTS`]).
    pub fn server_name(&self, pod: usize, port: usize) -> String {
        format!(
            "{}-{}",
            deployment_name(self.deployment_of(pod)),
            PORTS[port].0
        )
    }

    /// The identities the MeshTLSAuthentication admits in version `version` (0 is the one
    /// written first): the base clients, then `rotated-<version>`.
    pub fn identities(version: usize) -> Vec<String> {
        BASE_CLIENTS
            .iter()
            .map(|c| c.to_string())
            .chain([format!("rotated-{version}")])
            .map(|sa| format!("{sa}.{NAMESPACE}.serviceaccount.identity.linkerd.cluster.local"))
            .collect()
    }

    /// Writes [`BULK_FILE`] and [`POLICY_FILE`] (version 0) into `dir`; returns their sizes in
    /// bytes.
    pub fn write(&self, dir: &Path) -> anyhow::Result<(u64, u64)> {
        let bulk_path = dir.join(BULK_FILE);
        let file = std::fs::File::create(&bulk_path)
            .with_context(|| format!("cannot create {}", bulk_path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        let mut doc = String::with_capacity(64 * 1024);
        let mut bulk_bytes = 0;

        write_namespace(&mut doc);
        for deployment in 0..self.deployments {
            for port in 0..PORTS.len() {
                write_server(&mut doc, deployment, port);
            }
        }
        for pod in 0..self.pods {
            write_pod(&mut doc, self, pod);
            if doc.len() > 48 * 1024 {
                out.write_all(doc.as_bytes())
                    .with_context(|| format!("cannot write {}", bulk_path.display()))?;
                bulk_bytes += doc.len() as u64;
                doc.clear();
            }
        }
        out.write_all(doc.as_bytes())
            .and_then(|()| out.flush())
            .with_context(|| format!("cannot write {}", bulk_path.display()))?;
        bulk_bytes += doc.len() as u64;

        let policy_path = dir.join(POLICY_FILE);
        let policy = Self::render_policy(0);
        std::fs::write(&policy_path, &policy)
            .with_context(|| format!("cannot write {}", policy_path.display()))?;
        Ok((bulk_bytes, policy.len() as u64))
    }

    /// [`POLICY_FILE`] in version `version`: the AuthorizationPolicy targeting the namespace
    /// (unchanged) and the MeshTLSAuthentication with [`Self::identities`]`(version)`.
    pub fn render_policy(version: usize) -> String {
        let mut doc = String::with_capacity(2048);
        let _ = write!(
            doc,
            r#"---
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata:
  creationTimestamp: "2026-05-04T10:00:00Z"
  generation: 1
  name: {AUTHZ_NAME}
  namespace: {NAMESPACE}
  uid: {uid}
spec:
  requiredAuthenticationRefs:
  - group: policy.linkerd.io
    kind: MeshTLSAuthentication
    name: {MTLS_AUTHN_NAME}
  targetRef:
    kind: Namespace
    name: {NAMESPACE}
---
apiVersion: policy.linkerd.io/v1alpha1
kind: MeshTLSAuthentication
metadata:
  creationTimestamp: "2026-05-04T10:00:00Z"
  generation: {generation}
  name: {MTLS_AUTHN_NAME}
  namespace: {NAMESPACE}
  uid: {mtls_uid}
spec:
  identities:
"#,
            uid = uid(8, 0),
            generation = version + 1,
            mtls_uid = uid(9, 0),
        );
        for id in Self::identities(version) {
            let _ = writeln!(doc, "  - {id}");
        }
        doc
    }

    fn deployment_of(&self, pod: usize) -> usize {
        pod % self.deployments
    }

    fn pod_name(&self, pod: usize) -> String {
        let deployment = self.deployment_of(pod);
        format!(
            "{}-{}-{}",
            deployment_name(deployment),
            template_hash(deployment),
            k8s_suffix(pod as u64 * 31 + 3, 5)
        )
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

/// A Server as `linkerd` docs write one: the Deployment's pods by label, the port by name.
fn write_server(doc: &mut String, deployment: usize, port: usize) {
    let app = deployment_name(deployment);
    let (port_name, _, protocol) = PORTS[port];
    let _ = write!(
        doc,
        r#"---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata:
  creationTimestamp: "2026-05-04T09:30:00Z"
  generation: 1
  labels:
    app: {app}
  name: {app}-{port_name}
  namespace: {NAMESPACE}
  uid: {uid}
spec:
  accessPolicy: deny
  podSelector:
    matchLabels:
      app: {app}
  port: {port_name}
  proxyProtocol: {protocol}
"#,
        uid = uid(7, (deployment * PORTS.len() + port) as u64),
    );
}

fn write_pod(doc: &mut String, spec: &InboundSpec, pod: usize) {
    let deployment = spec.deployment_of(pod);
    let app = deployment_name(deployment);
    let hash = template_hash(deployment);
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 128, 0, 1)) + pod as u32);
    let node = pod % 3;
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
    name: {app}-{hash}
    uid: {rs_uid}
  uid: {uid}
spec:
  containers:
  - env:
    - name: LINKERD2_PROXY_INBOUND_LISTEN_ADDR
      value: 0.0.0.0:4143
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
    livenessProbe:
      httpGet:
        path: /live
        port: {admin}
    readinessProbe:
      httpGet:
        path: /ready
        port: {admin}
    ports:
"#,
        name = spec.pod_name(pod),
        rs_uid = uid(6, deployment as u64),
        uid = uid(3, pod as u64),
        admin = PORTS[4].1,
    );
    for (port_name, number, _) in PORTS {
        let _ = write!(
            doc,
            "    - containerPort: {number}\n      name: {port_name}\n      protocol: TCP\n"
        );
    }
    let _ = write!(
        doc,
        r#"  nodeName: bench-node-{node}
  serviceAccountName: {app}
status:
  hostIP: 10.20.{node}.10
  phase: Running
  podIP: {ip}
  podIPs:
  - ip: {ip}
"#
    );
}

// === names ===

fn deployment_name(deployment: usize) -> String {
    format!("app-{deployment}")
}

fn template_hash(deployment: usize) -> String {
    k8s_suffix(deployment as u64 * 104_729 + 7, 10)
}

/// A UUID-shaped, deterministic UID: `kind` tells object kinds apart, `n` objects of one kind.
fn uid(kind: u32, n: u64) -> String {
    format!("{kind:08x}-0000-4000-9000-{n:012x}")
}

/// A generated-name suffix in the alphabet Kubernetes uses, distinct for distinct `n` below
/// 27^len (an affine bijection modulo 27^len, written in base 27).
fn k8s_suffix(n: u64, len: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let base = ALPHABET.len() as u128;
    let modulus = base.pow(len as u32);
    let mut x = (u128::from(n) % modulus * 0x5bd1_e995 + 0x2545) % modulus;
    let mut s = String::with_capacity(len);
    for _ in 0..len {
        s.push(ALPHABET[(x % base) as usize] as char);
        x /= base;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_servers_follow_deployments() {
        let spec = InboundSpec {
            deployments: 200,
            pods: 2000,
        };
        let names: std::collections::HashSet<String> =
            (0..spec.pods).map(|p| spec.pod_name(p)).collect();
        assert_eq!(names.len(), 2000);
        assert_eq!(spec.server_name(0, 1), "app-0-grpc");
        assert_eq!(spec.server_name(201, 4), "app-1-admin");
        assert!(
            spec.workload(0)
                .starts_with(r#"{"ns":"bench-inbound","pod":"app-0-"#)
        );
    }

    #[test]
    fn policy_versions_differ_only_in_the_rotated_identity() {
        let (v0, v1) = (InboundSpec::render_policy(0), InboundSpec::render_policy(1));
        assert!(v0.contains(
            "  - rotated-0.bench-inbound.serviceaccount.identity.linkerd.cluster.local\n"
        ));
        assert!(v1.contains(
            "  - rotated-1.bench-inbound.serviceaccount.identity.linkerd.cluster.local\n"
        ));
        assert!(v1.contains("kind: Namespace\n    name: bench-inbound\n"));
        assert_eq!(InboundSpec::identities(3).len(), 4);
    }
}
