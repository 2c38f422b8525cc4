//! `EndpointsView`: the endpoints of one Service port, as `Destination.Get` serves them.
//!
//! Computed from the stores for a key (service, requested port, optional hostname), following
//! spec/destination.md §C.3: target-port resolution per slice, readiness, address identity (the
//! diffing key), and the per-address workload. Filters that depend on the client (zone,
//! node, address family) are applied per stream by the destination binary, not here.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use super::Discovery;
use crate::model::{
    AddressType, ExternalWorkloadInfo, ObjectRef, OwnerRef, PodInfo, ServiceInfo, SliceInfo,
};

/// What a topic of endpoints is keyed by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointsKey {
    pub service: ObjectRef,
    /// The requested port (the port of the `Get` path).
    pub port: u16,
    /// The instance of a `<instance>.<svc>.<ns>.svc.<domain>` path (a StatefulSet pod's hostname).
    pub hostname: Option<String>,
}

/// The endpoints of a Service port at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EndpointsView {
    /// The Service; `None` when it does not exist.
    pub service: Option<Arc<ServiceInfo>>,
    /// Set-level metric labels: `namespace`, `service`, and for mirrored services
    /// `target_cluster`, `target_service`, `target_service_namespace` (spec §C.3).
    pub labels: BTreeMap<String, String>,
    /// Ready endpoints by identity, each once even when several slices list it.
    pub endpoints: BTreeMap<AddressId, Arc<Endpoint>>,
}

/// The identity of an address, used to diff successive views (spec §C.3 "Address identity").
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddressId {
    /// A pod, per address family: a dual-stack pod has one ID per family.
    Pod {
        namespace: String,
        name: String,
        family: AddressType,
    },
    /// An ExternalWorkload, per address family as for pods: a dual-stack workload has one ID
    /// per family, so each family is filtered as a pod's is (upstream shares one ID, §I.9).
    External {
        namespace: String,
        name: String,
        family: AddressType,
    },
    /// An address without a target reference: `<service>-<ip>-<port>[-<hostname>]`.
    Address { namespace: String, name: String },
}

/// One address to send to proxies, with what is known of the workload behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// IP and target port.
    pub addr: SocketAddr,
    pub hostname: Option<String>,
    /// `zone` of the slice endpoint (not copied for addresses without target ref).
    pub zone: Option<String>,
    /// `hints.forZones[].name`, sorted.
    pub zone_hints: Vec<String>,
    /// An opaque Server in the workload's namespace covers this port (spec §C.3.1).
    pub server_opaque: bool,
    pub workload: Workload,
}

/// What backs an endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Workload {
    /// A pod, with its owner resolved through ReplicaSets and Jobs (spec §C.6.4).
    Pod { pod: Arc<PodInfo>, owner: OwnerRef },
    /// An ExternalWorkload; its owner (the single owner reference, if any) is on the workload.
    External(Arc<ExternalWorkloadInfo>),
    /// A bare address (selector-less service, mirrored gateway).
    Address {
        /// Slice annotation `mirror.linkerd.io/remote-gateway-identity`.
        identity: Option<String>,
        /// `<mirror.linkerd.io/remote-svc-fq-name>:<requested port>`.
        authority_override: Option<String>,
    },
}

enum TargetPort<'a> {
    Number(u16),
    Name(&'a str),
}

// === impl EndpointsView ===

impl EndpointsView {
    /// Whether the Service exists.
    pub fn exists(&self) -> bool {
        self.service.is_some()
    }

    /// Computes the view for `key` from the stores.
    pub(crate) fn compute(cluster: &Discovery, key: &EndpointsKey) -> Self {
        let Some(svc) = cluster.services.get(&key.service) else {
            return Self::default();
        };
        // The requested port names the slice port through the Service port's name; a port the
        // Service does not define is used verbatim (spec §C.3, "Target port resolution").
        let target = match svc.ports.iter().find(|p| p.port == key.port) {
            Some(p) => TargetPort::Name(&p.name),
            None => TargetPort::Number(key.port),
        };
        let mut labels = BTreeMap::from([
            ("namespace".to_string(), svc.namespace.clone()),
            ("service".to_string(), svc.name.clone()),
        ]);
        let mut endpoints = BTreeMap::new();
        for slice in cluster.service_slices(&key.service) {
            if slice.address_type == AddressType::Fqdn {
                continue;
            }
            let Some(ports) = slice.ports.as_ref() else {
                continue;
            };
            let port = match target {
                TargetPort::Number(n) => n,
                TargetPort::Name(name) => match ports.iter().find(|p| p.name == name) {
                    Some(p) => p.port,
                    None => continue,
                },
            };
            add_mirror_labels(slice, &mut labels);
            for ep in &slice.endpoints {
                if !ep.ready {
                    continue;
                }
                if key.hostname.is_some() && ep.hostname != key.hostname {
                    continue;
                }
                for ip in &ep.addresses {
                    let addr = SocketAddr::new(*ip, port);
                    let (id, workload, zone, server_opaque) = match &ep.target {
                        Some(t) if t.kind == "Pod" => {
                            let pod_ref = ObjectRef {
                                namespace: t.namespace.clone(),
                                name: t.name.clone(),
                            };
                            let Some(pod) = cluster.pods.get(&pod_ref) else {
                                // Logged as upstream logs it (spec §C.3), at each
                                // computation of a view that skips it: a typo in a
                                // `targetRef` would otherwise be silent.
                                tracing::warn!(pod = %format!("{}/{}", t.namespace, t.name), slice = %format!("{}/{}", slice.namespace, slice.name), %addr, "skipping an endpoint whose pod is not indexed (yet)");
                                continue;
                            };
                            let id = AddressId::Pod {
                                namespace: t.namespace.clone(),
                                name: t.name.clone(),
                                family: slice.address_type,
                            };
                            let owner = cluster.resolve_owner(pod);
                            (
                                id,
                                Workload::Pod {
                                    pod: pod.clone(),
                                    owner,
                                },
                                ep.zone.clone(),
                                cluster.server_opaque_pod(pod, port),
                            )
                        }
                        Some(t) if t.kind == "ExternalWorkload" => {
                            // Looked up in the slice's namespace only (§H.6).
                            let ew_ref = ObjectRef {
                                namespace: slice.namespace.clone(),
                                name: t.name.clone(),
                            };
                            let Some(ew) = cluster.external_workloads.get(&ew_ref) else {
                                tracing::warn!(workload = %format!("{}/{}", ew_ref.namespace, ew_ref.name), slice = %format!("{}/{}", slice.namespace, slice.name), %addr, "skipping an endpoint whose ExternalWorkload is not indexed (yet)");
                                continue;
                            };
                            let id = AddressId::External {
                                namespace: ew_ref.namespace,
                                name: ew_ref.name,
                                family: slice.address_type,
                            };
                            (
                                id,
                                Workload::External(ew.clone()),
                                ep.zone.clone(),
                                cluster.server_opaque_external_workload(ew, port),
                            )
                        }
                        // Other target kinds are ignored (spec §C.3).
                        Some(_) => continue,
                        None => {
                            let id = AddressId::Address {
                                namespace: slice.namespace.clone(),
                                name: bare_address_name(
                                    &svc.name,
                                    *ip,
                                    port,
                                    ep.hostname.as_deref(),
                                ),
                            };
                            let workload = Workload::Address {
                                identity: slice.remote_gateway_identity.clone(),
                                authority_override: slice
                                    .remote_svc_fq_name
                                    .as_ref()
                                    .map(|fqn| format!("{fqn}:{}", key.port)),
                            };
                            (id, workload, None, false)
                        }
                    };
                    let endpoint = Endpoint {
                        addr,
                        hostname: ep.hostname.clone(),
                        zone,
                        zone_hints: ep.zone_hints.clone(),
                        server_opaque,
                        workload,
                    };
                    endpoints.insert(id, Arc::new(endpoint));
                }
            }
        }
        Self {
            service: Some(svc.clone()),
            labels,
            endpoints,
        }
    }
}

fn bare_address_name(service: &str, ip: IpAddr, port: u16, hostname: Option<&str>) -> String {
    match hostname {
        Some(h) => format!("{service}-{ip}-{port}-{h}"),
        None => format!("{service}-{ip}-{port}"),
    }
}

fn add_mirror_labels(slice: &SliceInfo, labels: &mut BTreeMap<String, String>) {
    let Some(cluster) = &slice.mirror_cluster_name else {
        return;
    };
    labels.insert("target_cluster".to_string(), cluster.clone());
    if let Some(fqn) = &slice.remote_svc_fq_name {
        let mut parts = fqn.split('.');
        if let (Some(svc), Some(ns)) = (parts.next(), parts.next()) {
            labels.insert("target_service".to_string(), svc.to_string());
            labels.insert("target_service_namespace".to_string(), ns.to_string());
        }
    }
}

// === impl Endpoint ===

impl Endpoint {
    /// The pod behind this endpoint, if any.
    pub fn pod(&self) -> Option<&PodInfo> {
        match &self.workload {
            Workload::Pod { pod, .. } => Some(pod),
            Workload::External(_) | Workload::Address { .. } => None,
        }
    }
}
