//! Views for `Destination.GetProfile` (spec/destination.md §D): a Service's profile, and the
//! endpoint profile of a pod, ExternalWorkload or unknown address.

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use super::{
    Discovery,
    endpoints::{Endpoint, Workload},
};
use crate::model::{ObjectRef, PodInfo, ProfileInfo, ServiceInfo};

/// What a service-profile topic is keyed by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceProfileKey {
    pub service: ObjectRef,
    /// The requested port.
    pub port: u16,
    /// The ServiceProfile's name: `<svc>.<ns>.svc.<cluster domain>`.
    pub profile_name: String,
    /// The client's namespace (context token `ns`), whose ServiceProfile of that name wins
    /// over the one in the Service's namespace (§D.2 step 5).
    pub client_namespace: Option<String>,
}

/// A Service and the ServiceProfile that applies to a client, at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceProfileView {
    /// The Service; `None` once deleted.
    pub service: Option<Arc<ServiceInfo>>,
    /// The client-namespace ServiceProfile, else the Service-namespace one; `None` when neither
    /// exists or is valid (the default profile then applies).
    pub profile: Option<Arc<ProfileInfo>>,
}

/// What an endpoint-profile topic is keyed by: the requested IP and port.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointProfileKey {
    pub ip: IpAddr,
    pub port: u16,
}

/// The workload behind an address, at one moment (§D.5).
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointProfileView {
    /// `ip:port` and the workload (a `Running` pod, an ExternalWorkload, or a bare address);
    /// no zone.
    pub endpoint: Arc<Endpoint>,
}

/// More than one workload claims an address: GetProfile answers `FailedPrecondition`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddressConflict {
    #[error("conflicting pod network IP {ip}: {count} pods")]
    PodIp { ip: IpAddr, count: usize },
    #[error("conflicting host port {addr}: {count} pods")]
    HostPort { addr: SocketAddr, count: usize },
    #[error("conflicting ExternalWorkload address {addr}: {count} workloads")]
    ExternalWorkload { addr: SocketAddr, count: usize },
}

impl ServiceProfileView {
    pub(crate) fn compute(cluster: &Discovery, key: &ServiceProfileKey) -> Self {
        let service = cluster.services.get(&key.service).cloned();
        let lookup = |namespace: &str| {
            cluster
                .profiles
                .get(&ObjectRef {
                    namespace: namespace.to_string(),
                    name: key.profile_name.clone(),
                })
                .cloned()
        };
        let profile = key
            .client_namespace
            .as_deref()
            .and_then(lookup)
            .or_else(|| lookup(&key.service.namespace));
        Self { service, profile }
    }
}

impl EndpointProfileView {
    /// Resolves the address as §D.5 does: a pod with that pod IP, else a pod with that host
    /// IP and host port, else an ExternalWorkload with that IP and port. A pod is attached only
    /// while `Running` (§H.3). With several candidates, the pod of `previous` (the view this
    /// one replaces; `None` for a new topic) stays attached if it is one of them, as upstream
    /// keeps its attached pod until that pod's own delete (§D.5); else none is. So a pod
    /// replaced on its IP in one write, whose new pod the index sees before the old one's
    /// deletion, never leaves the address without a workload in between.
    pub(crate) fn compute(
        cluster: &Discovery,
        key: &EndpointProfileKey,
        previous: Option<&Self>,
    ) -> Self {
        let addr = SocketAddr::new(key.ip, key.port);
        let attached = previous.and_then(|view| match &view.endpoint.workload {
            Workload::Pod { pod, .. } => Some(pod),
            _ => None,
        });
        let running = |pods: Vec<Arc<PodInfo>>| {
            let pod = match pods.as_slice() {
                [pod] => Some(pod),
                _ => pods.iter().find(|pod| {
                    attached.is_some_and(|a| a.namespace == pod.namespace && a.name == pod.name)
                }),
            };
            pod.filter(|pod| pod.phase.as_deref() == Some("Running"))
                .cloned()
        };
        let by_ip = cluster.live_pods(cluster.pods_by_ip.get(&key.ip));
        let pod = if by_ip.is_empty() {
            running(cluster.live_pods(cluster.pods_by_host_port.get(&(key.ip, key.port))))
        } else {
            running(by_ip)
        };
        let (workload, server_opaque) = if let Some(pod) = pod {
            let owner = cluster.resolve_owner(&pod);
            let opaque = cluster.server_opaque_pod(&pod, key.port);
            (Workload::Pod { pod, owner }, opaque)
        } else {
            let ews: Vec<_> = cluster
                .external_workloads_by_addr
                .get(&(key.ip, key.port))
                .into_iter()
                .flatten()
                .filter_map(|k| cluster.external_workloads.get(k))
                .collect();
            match ews.as_slice() {
                [ew] => (
                    Workload::External((*ew).clone()),
                    cluster.server_opaque_external_workload(ew, key.port),
                ),
                _ => (
                    Workload::Address {
                        identity: None,
                        authority_override: None,
                    },
                    false,
                ),
            }
        };
        Self {
            endpoint: Arc::new(Endpoint {
                addr,
                hostname: None,
                zone: None,
                zone_hints: Vec::new(),
                server_opaque,
                workload,
            }),
        }
    }
}

/// Whether several workloads claim `ip:port` (checked when a GetProfile stream starts, §D.5).
pub(crate) fn address_conflict(
    cluster: &Discovery,
    key: &EndpointProfileKey,
) -> Result<(), AddressConflict> {
    let addr = SocketAddr::new(key.ip, key.port);
    let pods = cluster.live_pods(cluster.pods_by_ip.get(&key.ip)).len();
    if pods > 1 {
        return Err(AddressConflict::PodIp {
            ip: key.ip,
            count: pods,
        });
    }
    if pods == 1 {
        return Ok(());
    }
    let host = cluster
        .live_pods(cluster.pods_by_host_port.get(&(key.ip, key.port)))
        .len();
    if host > 1 {
        return Err(AddressConflict::HostPort { addr, count: host });
    }
    if host == 1 {
        return Ok(());
    }
    let ews = cluster
        .external_workloads_by_addr
        .get(&(key.ip, key.port))
        .map_or(0, |s| s.len());
    if ews > 1 {
        return Err(AddressConflict::ExternalWorkload { addr, count: ews });
    }
    Ok(())
}

/// The Service a ServiceProfile named `<svc>.<ns>.svc.<domain>` describes, whatever namespace
/// the profile itself lives in.
pub(crate) fn profile_service(profile_name: &str) -> Option<ObjectRef> {
    let mut parts = profile_name.split('.');
    let (name, namespace, svc) = (parts.next()?, parts.next()?, parts.next()?);
    (svc == "svc" && !name.is_empty() && !namespace.is_empty()).then(|| ObjectRef {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}
