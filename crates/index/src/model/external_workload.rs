//! ExternalWorkload, as the index reads it (spec/destination.md §B.2, §C.6.2).

use linkerd_k8s_api::ExternalWorkload;
use std::{collections::BTreeMap, net::IpAddr};

use super::{
    InvalidObject, Kind, Labels, OPAQUE_PORTS_ANNOTATION, ObjectRef, OwnerRef, linkerd_annotations,
    names_of, ports::PortSet, single_owner_of,
};

/// The port name that marks an ExternalWorkload's proxy inbound port.
pub const PROXY_PORT_NAME: &str = "linkerd-proxy";
/// The inbound port assumed when an ExternalWorkload declares none named `linkerd-proxy`.
pub const DEFAULT_PROXY_INBOUND_PORT: u16 = 4143;

/// An ExternalWorkload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalWorkloadInfo {
    pub namespace: String,
    pub name: String,
    /// `metadata.uid`, named by the `targetRef` of its EndpointSlice endpoints.
    pub uid: Option<String>,
    pub labels: Labels,
    /// The `*.linkerd.io/` annotations; the others are not kept.
    pub annotations: BTreeMap<String, String>,
    /// `spec.meshTLS.identity`: a URI such as `spiffe://root.linkerd.cluster.local/vm-01`.
    pub identity: String,
    /// `spec.meshTLS.serverName`.
    pub server_name: String,
    pub ports: Vec<WorkloadPort>,
    /// `spec.workloadIPs[].ip` that parse as IPs.
    pub ips: Vec<IpAddr>,
    /// `status.conditions[type=Ready].status == "True"`.
    pub ready: bool,
    /// The single owner reference; `None` with zero or several.
    pub owner: Option<OwnerRef>,
    /// `config.linkerd.io/opaque-ports` (port names resolved against `ports`); `None` when
    /// absent, so the default opaque ports apply; empty when its value does not parse
    /// ([`PortSet::parse_annotation`]).
    pub opaque_ports: Option<PortSet>,
}

/// One `spec.ports[]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadPort {
    pub name: Option<String>,
    pub port: u16,
    /// `TCP` when absent.
    pub protocol: String,
}

impl Kind for ExternalWorkload {
    type Wire = ExternalWorkload;
    type Object = ExternalWorkloadInfo;
    const LABEL: &'static str = "ExternalWorkload";

    fn from_wire(ew: ExternalWorkload) -> Result<ExternalWorkloadInfo, InvalidObject> {
        ExternalWorkloadInfo::from_external_workload(&ew)
    }
}

impl ExternalWorkloadInfo {
    /// Builds the domain form of an ExternalWorkload. Ports outside 1..=65535 and IPs that do
    /// not parse are dropped (logged); only a missing name is an error.
    pub fn from_external_workload(ew: &ExternalWorkload) -> Result<Self, InvalidObject> {
        let (namespace, name) = names_of("ExternalWorkload", &ew.metadata)?;
        let ports: Vec<WorkloadPort> = ew
            .spec
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                let port = u16::try_from(p.port).ok().filter(|p| *p != 0);
                if port.is_none() {
                    tracing::warn!(workload = %format!("{namespace}/{name}"), port = p.port, "ignoring ExternalWorkload port out of range");
                }
                Some(WorkloadPort {
                    name: p.name.clone().filter(|n| !n.is_empty()),
                    port: port?,
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_string()),
                })
            })
            .collect();
        let annotations = linkerd_annotations(&ew.metadata);
        let opaque_ports = annotations.get(OPAQUE_PORTS_ANNOTATION).map(|list| {
            PortSet::parse_annotation(list, |n| {
                ports
                    .iter()
                    .find(|p| p.name.as_deref() == Some(n))
                    .map(|p| p.port)
            })
            .unwrap_or_else(|error| {
                tracing::warn!(workload = %format!("{namespace}/{name}"), %error, "invalid {OPAQUE_PORTS_ANNOTATION}: no port is opaque");
                PortSet::default()
            })
        });
        let ready = ew
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        Ok(Self {
            uid: ew.metadata.uid.clone(),
            labels: ew.metadata.labels.clone().unwrap_or_default().into(),
            annotations,
            identity: ew.spec.mesh_tls.identity.clone(),
            server_name: ew.spec.mesh_tls.server_name.clone(),
            ips: ew
                .spec
                .workload_ips
                .iter()
                .flatten()
                .filter_map(|ip| ip.ip.parse().ok())
                .collect(),
            ready,
            owner: single_owner_of(&ew.metadata),
            ports,
            opaque_ports,
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

    /// The proxy's inbound port: the port named `linkerd-proxy`, else 4143 (spec §C.6.2).
    pub fn proxy_inbound_port(&self) -> u16 {
        self.ports
            .iter()
            .find(|p| p.name.as_deref() == Some(PROXY_PORT_NAME))
            .map_or(DEFAULT_PROXY_INBOUND_PORT, |p| p.port)
    }

    /// Whether `port` is opaque: in the opaque-ports annotation, else in `defaults`.
    pub fn is_opaque_port(&self, port: u16, defaults: &PortSet) -> bool {
        self.opaque_ports
            .as_ref()
            .unwrap_or(defaults)
            .contains(port)
    }
}
