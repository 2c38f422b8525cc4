//! Compact domain objects the stores keep instead of whole Kubernetes objects.
//!
//! Each is built once per watch event from the typed object, keeping only what discovery and
//! policy read (spec/destination.md §B.2). Conversion never panics: an object missing what it
//! must have is an [`InvalidObject`], which the index logs, counts and skips.

use k8s_openapi::api::{
    apps::v1::ReplicaSet,
    batch::v1::Job,
    core::v1::{Container, Node, Pod, Service},
    discovery::v1::EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

use crate::ports::PortSet;

mod external_workload;
mod policy;
mod server;

pub use self::{
    external_workload::{ExternalWorkloadInfo, WorkloadPort},
    policy::*,
    server::{ServerInfo, ServerPort},
};

/// Pod label whose presence (non-empty) marks a pod as meshed; its value is the control-plane
/// namespace that issued the proxy's identity.
pub const CONTROL_PLANE_NS_LABEL: &str = "linkerd.io/control-plane-ns";
/// Annotation listing opaque ports (pods, services, external workloads).
pub const OPAQUE_PORTS_ANNOTATION: &str = "config.linkerd.io/opaque-ports";
/// Annotation listing inbound ports the proxy does not handle.
pub const SKIP_INBOUND_PORTS_ANNOTATION: &str = "config.linkerd.io/skip-inbound-ports";
/// Label tying an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Node label giving the node's zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// EndpointSlice annotation carrying the identity of a mirrored gateway.
pub const REMOTE_GATEWAY_IDENTITY_ANNOTATION: &str = "mirror.linkerd.io/remote-gateway-identity";
/// EndpointSlice annotation carrying the fully-qualified name of a mirrored service.
pub const REMOTE_SVC_FQ_NAME_ANNOTATION: &str = "mirror.linkerd.io/remote-svc-fq-name";
/// EndpointSlice label naming the cluster a mirrored service comes from.
pub const MIRROR_CLUSTER_NAME_LABEL: &str = "mirror.linkerd.io/cluster-name";
/// Name of the proxy container, looked up in `initContainers` first (native sidecar).
pub const PROXY_CONTAINER_NAME: &str = "linkerd-proxy";

/// A namespaced (or, with an empty namespace, cluster-scoped) object name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub namespace: String,
    pub name: String,
}

/// An object that could not be turned into its domain form; logged, counted and skipped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {namespace}/{name}: {reason}")]
pub struct InvalidObject {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

/// The workload that owns a pod, as used in metric labels (`deployment: web`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OwnerRef {
    /// Kubernetes kind, as written in the owner reference (`ReplicaSet`, `StatefulSet`, ...).
    pub kind: String,
    pub name: String,
}

/// A Service, as discovery reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceInfo {
    pub namespace: String,
    pub name: String,
    /// `spec.type` is `ExternalName`: not a valid `Get` target (spec §E).
    pub external_name: bool,
    /// `spec.internalTrafficPolicy: Local`.
    pub internal_traffic_local: bool,
    /// `spec.clusterIPs` (or `spec.clusterIP`), without `None`.
    pub cluster_ips: Vec<IpAddr>,
    pub ports: Vec<ServicePort>,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    /// `config.linkerd.io/opaque-ports`, parsed once (service port names resolved to their
    /// `port`); `None` when absent, so the default opaque ports apply (spec §B.2). Only
    /// `GetProfile.opaque_protocol` of service profiles reads it.
    pub opaque_ports: Option<PortSet>,
}

/// One `spec.ports[]` entry of a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    pub port: u16,
    /// The port's name; `""` when unnamed (matches unnamed slice ports).
    pub name: String,
    /// `appProtocol`, as written (outbound protocol selection, spec/policy.md §5.3).
    pub app_protocol: Option<String>,
}

/// An EndpointSlice, as discovery reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceInfo {
    pub namespace: String,
    pub name: String,
    /// The Service it belongs to: label `kubernetes.io/service-name`, else an owner reference of
    /// kind Service. `None` slices are ignored.
    pub service: Option<String>,
    pub address_type: AddressType,
    /// `None` when the slice's `ports` field is absent or null (placeholder slices).
    pub ports: Option<Vec<SlicePort>>,
    pub endpoints: Vec<SliceEndpoint>,
    /// Annotation `mirror.linkerd.io/remote-gateway-identity`, for addresses without target ref.
    pub remote_gateway_identity: Option<String>,
    /// Annotation `mirror.linkerd.io/remote-svc-fq-name`.
    pub remote_svc_fq_name: Option<String>,
    /// Label `mirror.linkerd.io/cluster-name`.
    pub mirror_cluster_name: Option<String>,
}

/// `addressType` of an EndpointSlice.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddressType {
    IPv4,
    IPv6,
    /// `FQDN` slices carry names, not IPs; discovery ignores them.
    Fqdn,
}

/// One `ports[]` entry of an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlicePort {
    /// `""` when unnamed.
    pub name: String,
    pub port: u16,
}

/// One `endpoints[]` entry of an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceEndpoint {
    pub addresses: Vec<IpAddr>,
    /// `conditions.ready`; absent counts as ready (spec §B.2).
    pub ready: bool,
    pub hostname: Option<String>,
    pub zone: Option<String>,
    pub node_name: Option<String>,
    /// `hints.forZones[].name`, sorted.
    pub zone_hints: Vec<String>,
    pub target: Option<TargetRef>,
}

/// `targetRef` of a slice endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// A Pod, as discovery reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub resource_version: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// `spec.serviceAccountName`, `default` when empty.
    pub service_account: String,
    pub node_name: Option<String>,
    pub host_network: bool,
    pub phase: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// `status.podIPs`, falling back to `status.podIP`.
    pub ips: Vec<IpAddr>,
    /// `status.hostIPs`, falling back to `status.hostIP`.
    pub host_ips: Vec<IpAddr>,
    /// The single owner reference; `None` with zero or several.
    pub owner: Option<OwnerRef>,
    /// Ports declared by `initContainers` then `containers`.
    pub container_ports: Vec<ContainerPort>,
    /// What the `linkerd-proxy` container's environment says; `None` without a proxy container.
    pub proxy: Option<ProxyPorts>,
    /// `config.linkerd.io/opaque-ports`, parsed once (names resolved against container ports);
    /// `None` when the annotation is absent, so the default opaque ports apply.
    pub opaque_ports: Option<PortSet>,
    /// `config.linkerd.io/skip-inbound-ports`, parsed once (no names allowed there).
    pub skip_inbound_ports: PortSet,
    /// Paths of `httpGet` liveness, readiness and startup probes, by port (spec/policy.md
    /// §4.2): inbound policy adds a `probe` route for them.
    pub probe_paths: BTreeMap<u16, BTreeSet<String>>,
}

/// One declared container port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerPort {
    pub name: Option<String>,
    pub container_port: u16,
    pub host_port: Option<u16>,
    /// `protocol` is absent or TCP (only TCP ports can be named by a Server).
    pub tcp: bool,
}

/// Ports read from the proxy container's environment (spec §B.2); `None` when the variable is
/// absent or its value is not an `ip:port` literal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyPorts {
    /// `LINKERD2_PROXY_INBOUND_LISTEN_ADDR`: the opaque-transport port (4143).
    pub inbound: Option<u16>,
    /// `LINKERD2_PROXY_ADMIN_LISTEN_ADDR` (4191).
    pub admin: Option<u16>,
    /// `LINKERD2_PROXY_CONTROL_LISTEN_ADDR` (4190).
    pub control: Option<u16>,
}

/// A Node, as discovery reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    /// Label `topology.kubernetes.io/zone`.
    pub zone: Option<String>,
}

// === impl ServiceInfo ===

impl ServiceInfo {
    /// Builds the domain form of a Service. Errors when it has no name or a port outside 1..=65535.
    pub fn from_service(svc: &Service) -> Result<Self, InvalidObject> {
        let (namespace, name) = names("Service", &svc.metadata)?;
        let spec = svc.spec.clone().unwrap_or_default();
        let mut ports = Vec::new();
        for p in spec.ports.iter().flatten() {
            let port = u16::try_from(p.port)
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| {
                    invalid(
                        "Service",
                        &namespace,
                        &name,
                        format!("port {} out of range", p.port),
                    )
                })?;
            ports.push(ServicePort {
                port,
                name: p.name.clone().unwrap_or_default(),
                app_protocol: p.app_protocol.clone(),
            });
        }
        let ips = match spec.cluster_ips.as_deref() {
            Some(ips) if !ips.is_empty() => ips.to_vec(),
            _ => spec.cluster_ip.into_iter().collect(),
        };
        let annotations = svc.metadata.annotations.clone().unwrap_or_default();
        let opaque_ports = annotations.get(OPAQUE_PORTS_ANNOTATION).map(|list| {
            let (set, bad) = PortSet::parse_with_names(list, |n| {
                ports.iter().find(|p| p.name == n).map(|p| p.port)
            });
            for item in bad {
                tracing::warn!(service = %format!("{namespace}/{name}"), %item, "ignoring invalid {OPAQUE_PORTS_ANNOTATION} item");
            }
            set
        });
        Ok(Self {
            external_name: spec.type_.as_deref() == Some("ExternalName"),
            internal_traffic_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
            cluster_ips: ips.iter().filter_map(|ip| ip.parse().ok()).collect(),
            ports,
            opaque_ports,
            annotations,
            labels: svc.metadata.labels.clone().unwrap_or_default(),
            namespace,
            name,
        })
    }

    pub fn object_ref(&self) -> ObjectRef {
        ObjectRef {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

// === impl SliceInfo ===

impl SliceInfo {
    /// Builds the domain form of an EndpointSlice.
    ///
    /// Addresses that are not IP literals and ports outside 1..=65535 are dropped (they can only
    /// come from `FQDN` slices or a broken controller); the rest of the slice is kept.
    pub fn from_slice(slice: &EndpointSlice) -> Result<Self, InvalidObject> {
        let (namespace, name) = names("EndpointSlice", &slice.metadata)?;
        let labels = slice.metadata.labels.as_ref();
        let annotations = slice.metadata.annotations.as_ref();
        let service = labels
            .and_then(|l| l.get(SERVICE_NAME_LABEL).cloned())
            .or_else(|| {
                slice
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|o| o.kind == "Service")
                    .map(|o| o.name.clone())
            });
        let address_type = match slice.address_type.as_str() {
            "IPv4" => AddressType::IPv4,
            "IPv6" => AddressType::IPv6,
            _ => AddressType::Fqdn,
        };
        let ports = slice.ports.as_ref().map(|ports| {
            ports
                .iter()
                .filter_map(|p| {
                    let port = u16::try_from(p.port?).ok().filter(|p| *p != 0)?;
                    Some(SlicePort {
                        name: p.name.clone().unwrap_or_default(),
                        port,
                    })
                })
                .collect()
        });
        let endpoints = slice
            .endpoints
            .iter()
            .map(|ep| {
                let mut zone_hints: Vec<String> = ep
                    .hints
                    .iter()
                    .flat_map(|h| h.for_zones.iter().flatten())
                    .map(|z| z.name.clone())
                    .collect();
                zone_hints.sort();
                zone_hints.dedup();
                SliceEndpoint {
                    addresses: ep.addresses.iter().filter_map(|a| a.parse().ok()).collect(),
                    ready: ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
                    hostname: ep.hostname.clone(),
                    zone: ep.zone.clone(),
                    node_name: ep.node_name.clone(),
                    zone_hints,
                    target: ep.target_ref.as_ref().and_then(|t| {
                        Some(TargetRef {
                            kind: t.kind.clone()?,
                            namespace: t.namespace.clone().unwrap_or_else(|| namespace.clone()),
                            name: t.name.clone()?,
                        })
                    }),
                }
            })
            .collect();
        Ok(Self {
            service,
            address_type,
            ports,
            endpoints,
            remote_gateway_identity: annotations
                .and_then(|a| a.get(REMOTE_GATEWAY_IDENTITY_ANNOTATION).cloned()),
            remote_svc_fq_name: annotations
                .and_then(|a| a.get(REMOTE_SVC_FQ_NAME_ANNOTATION).cloned()),
            mirror_cluster_name: labels.and_then(|l| l.get(MIRROR_CLUSTER_NAME_LABEL).cloned()),
            namespace,
            name,
        })
    }

    /// The objects of `kind` (`Pod`, `ExternalWorkload`) this slice's endpoints point at.
    pub fn target_refs<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = ObjectRef> + 'a {
        self.endpoints
            .iter()
            .filter_map(|ep| ep.target.as_ref())
            .filter(move |t| t.kind == kind)
            .map(|t| ObjectRef {
                namespace: t.namespace.clone(),
                name: t.name.clone(),
            })
    }
}

// === impl PodInfo ===

impl PodInfo {
    /// Builds the domain form of a Pod. Unparsable IPs and out-of-range ports are dropped.
    pub fn from_pod(pod: &Pod) -> Result<Self, InvalidObject> {
        let (namespace, name) = names("Pod", &pod.metadata)?;
        let spec = pod.spec.clone().unwrap_or_default();
        let status = pod.status.clone().unwrap_or_default();
        let containers: Vec<&Container> = spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
            .collect();
        let container_ports: Vec<ContainerPort> = containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                Some(ContainerPort {
                    name: p.name.clone(),
                    container_port: u16::try_from(p.container_port).ok()?,
                    host_port: p
                        .host_port
                        .and_then(|h| u16::try_from(h).ok())
                        .filter(|h| *h != 0),
                    tcp: p
                        .protocol
                        .as_deref()
                        .is_none_or(|p| p.eq_ignore_ascii_case("TCP")),
                })
            })
            .collect();
        let proxy = containers
            .iter()
            .find(|c| c.name == PROXY_CONTAINER_NAME)
            .map(|c| {
                let env = |var: &str| {
                    c.env
                        .iter()
                        .flatten()
                        .find(|e| e.name == var)
                        .and_then(|e| e.value.as_deref())
                        .and_then(|v| v.parse::<std::net::SocketAddr>().ok())
                        .map(|a| a.port())
                };
                ProxyPorts {
                    inbound: env("LINKERD2_PROXY_INBOUND_LISTEN_ADDR"),
                    admin: env("LINKERD2_PROXY_ADMIN_LISTEN_ADDR"),
                    control: env("LINKERD2_PROXY_CONTROL_LISTEN_ADDR"),
                }
            });
        let ips = match status.pod_ips.as_deref() {
            Some(ips) if !ips.is_empty() => ips.iter().map(|i| i.ip.clone()).collect(),
            _ => status.pod_ip.clone().into_iter().collect::<Vec<_>>(),
        };
        let host_ips = match status.host_ips.as_deref() {
            Some(ips) if !ips.is_empty() => ips.iter().map(|i| i.ip.clone()).collect(),
            _ => status.host_ip.clone().into_iter().collect::<Vec<_>>(),
        };
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let named_port = |name: &str| {
            container_ports
                .iter()
                .find(|p: &&ContainerPort| p.name.as_deref() == Some(name))
                .map(|p| p.container_port)
        };
        let opaque_ports = annotations.get(OPAQUE_PORTS_ANNOTATION).map(|list| {
            let (set, invalid) = PortSet::parse_with_names(list, named_port);
            for item in invalid {
                tracing::warn!(pod = %format!("{namespace}/{name}"), %item, "ignoring invalid {OPAQUE_PORTS_ANNOTATION} item");
            }
            set
        });
        let skip_inbound_ports = annotations
            .get(SKIP_INBOUND_PORTS_ANNOTATION)
            .map(|list| PortSet::parse(list).0)
            .unwrap_or_default();
        let probe_paths = probe_paths(&containers);
        Ok(Self {
            probe_paths,
            resource_version: pod.metadata.resource_version.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            annotations,
            opaque_ports,
            skip_inbound_ports,
            service_account: spec
                .service_account_name
                .filter(|sa| !sa.is_empty())
                .unwrap_or_else(|| "default".to_string()),
            node_name: spec.node_name,
            host_network: spec.host_network.unwrap_or(false),
            phase: status.phase,
            terminating: pod.metadata.deletion_timestamp.is_some(),
            ips: ips.iter().filter_map(|ip| ip.parse().ok()).collect(),
            host_ips: host_ips.iter().filter_map(|ip| ip.parse().ok()).collect(),
            owner: single_owner(&pod.metadata),
            container_ports,
            proxy,
            namespace,
            name,
        })
    }

    pub fn object_ref(&self) -> ObjectRef {
        ObjectRef {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// The control-plane namespace of a meshed pod (label `linkerd.io/control-plane-ns`, non-empty).
    pub fn control_plane_ns(&self) -> Option<&str> {
        self.labels
            .get(CONTROL_PLANE_NS_LABEL)
            .map(String::as_str)
            .filter(|ns| !ns.is_empty())
    }

    /// The container port named `name` (init containers included), by its `containerPort`.
    pub fn named_port(&self, name: &str) -> Option<u16> {
        self.container_ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port)
    }

    /// Whether `port` is opaque for this pod: listed in its `config.linkerd.io/opaque-ports`
    /// annotation (ports, ranges, container-port names; an empty value means none), or in
    /// `defaults` when the pod has no such annotation (spec §B.2).
    pub fn is_opaque_port(&self, port: u16, defaults: &PortSet) -> bool {
        self.opaque_ports
            .as_ref()
            .unwrap_or(defaults)
            .contains(port)
    }

    /// Whether index lookups should still find this pod: not being deleted, not finished.
    pub fn is_live(&self) -> bool {
        !self.terminating && !matches!(self.phase.as_deref(), Some("Succeeded" | "Failed"))
    }
}

// === impl NodeInfo ===

impl NodeInfo {
    pub fn from_node(node: &Node) -> Result<Self, InvalidObject> {
        let (_, name) = names("Node", &node.metadata)?;
        Ok(Self {
            zone: node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(ZONE_LABEL).cloned()),
            name,
        })
    }
}

/// The owner a ReplicaSet passes on to its pods' metric labels: its single owner when that is a
/// Deployment, StatefulSet, DaemonSet or Job (spec §C.6.4), else `None` (the RS itself).
pub fn replica_set_owner(rs: &ReplicaSet) -> Option<OwnerRef> {
    single_owner(&rs.metadata).filter(|o| {
        matches!(
            o.kind.as_str(),
            "Deployment" | "StatefulSet" | "DaemonSet" | "Job"
        )
    })
}

/// The owner a Job passes on (a CronJob, say): its single owner, if exactly one.
pub fn job_owner(job: &Job) -> Option<OwnerRef> {
    single_owner(&job.metadata)
}

pub(crate) fn single_owner(meta: &ObjectMeta) -> Option<OwnerRef> {
    match meta.owner_references.as_deref() {
        Some([OwnerReference { kind, name, .. }]) => Some(OwnerRef {
            kind: kind.clone(),
            name: name.clone(),
        }),
        _ => None,
    }
}

/// The `httpGet` probe paths of `containers` by port: a numeric port, or a name resolved
/// against the same container's TCP ports (case-insensitively); the path's query is dropped
/// and a path that is not absolute is skipped.
fn probe_paths(containers: &[&Container]) -> BTreeMap<u16, BTreeSet<String>> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let mut paths: BTreeMap<u16, BTreeSet<String>> = BTreeMap::new();
    for c in containers {
        let probes = [&c.liveness_probe, &c.readiness_probe, &c.startup_probe];
        for get in probes
            .into_iter()
            .flatten()
            .filter_map(|p| p.http_get.as_ref())
        {
            let port = match &get.port {
                IntOrString::Int(n) => u16::try_from(*n).ok().filter(|p| *p != 0),
                IntOrString::String(name) => c.ports.iter().flatten().find_map(|p| {
                    let tcp = p
                        .protocol
                        .as_deref()
                        .is_none_or(|p| p.eq_ignore_ascii_case("TCP"));
                    (tcp && p
                        .name
                        .as_deref()
                        .is_some_and(|n| n.eq_ignore_ascii_case(name)))
                    .then(|| u16::try_from(p.container_port).ok())
                    .flatten()
                }),
            };
            let path = get.path.as_deref().filter(|p| !p.is_empty()).unwrap_or("/");
            let path = path.split(['?', '#']).next().unwrap_or_default();
            if let Some(port) = port
                && path.starts_with('/')
            {
                paths.entry(port).or_default().insert(path.to_string());
            }
        }
    }
    paths
}

/// `(namespace, name)` of an object; namespace is `""` for cluster-scoped kinds.
pub(crate) fn names(
    kind: &'static str,
    meta: &ObjectMeta,
) -> Result<(String, String), InvalidObject> {
    let namespace = meta.namespace.clone().unwrap_or_default();
    match meta.name.as_deref() {
        Some(name) if !name.is_empty() => Ok((namespace, name.to_string())),
        _ => Err(invalid(
            kind,
            &namespace,
            "",
            "metadata.name is missing".to_string(),
        )),
    }
}

pub(crate) fn invalid(
    kind: &'static str,
    namespace: &str,
    name: &str,
    reason: String,
) -> InvalidObject {
    InvalidObject {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
        reason,
    }
}

/// Shared, immutable pod data, as views hold it.
pub type SharedPod = Arc<PodInfo>;
