//! EndpointSlice, as discovery reads it (spec/destination.md §B.2, §C.3).

use super::{
    EXTERNAL_WORKLOADS_CONTROLLER, InvalidObject, Kind, MANAGED_BY_LABEL,
    MIRROR_CLUSTER_NAME_LABEL, ObjectRef, REMOTE_GATEWAY_IDENTITY_ANNOTATION,
    REMOTE_SVC_FQ_NAME_ANNOTATION, SERVICE_NAME_LABEL, names, wire,
};
use std::net::IpAddr;

/// An EndpointSlice.
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
    /// Annotation `mirror.linkerd.io/remote-svc-fq-name`; `None` when absent or empty.
    pub remote_svc_fq_name: Option<String>,
    /// Label `mirror.linkerd.io/cluster-name`.
    pub mirror_cluster_name: Option<String>,
    /// Label `endpointslice.kubernetes.io/managed-by` is the ExternalWorkload controller's
    /// ([`super::EXTERNAL_WORKLOADS_CONTROLLER`], spec §K).
    pub managed_by_external_workloads: bool,
}

/// `addressType` of an EndpointSlice.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddressType {
    IPv4,
    IPv6,
    /// `FQDN` slices carry names, not IPs; discovery ignores them.
    Fqdn,
}

impl AddressType {
    /// The family of `ip`: `IPv4` or `IPv6`.
    pub fn of(ip: std::net::IpAddr) -> Self {
        match ip {
            std::net::IpAddr::V4(_) => Self::IPv4,
            std::net::IpAddr::V6(_) => Self::IPv6,
        }
    }

    /// The name the API gives it in `addressType`: `IPv4`, `IPv6` or `FQDN`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IPv4 => "IPv4",
            Self::IPv6 => "IPv6",
            Self::Fqdn => "FQDN",
        }
    }
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

impl Kind for k8s_openapi::api::discovery::v1::EndpointSlice {
    type Wire = wire::EndpointSlice;
    type Object = SliceInfo;
    const LABEL: &'static str = "EndpointSlice";

    fn from_wire(slice: wire::EndpointSlice) -> Result<SliceInfo, InvalidObject> {
        SliceInfo::from_wire(slice)
    }
}

impl SliceInfo {
    /// Builds the domain form of an EndpointSlice.
    ///
    /// Addresses that are not IP literals and ports outside 1..=65535 are dropped (they can only
    /// come from `FQDN` slices, a broken controller or a hand-written manifest; the last two
    /// are logged); the rest of the slice is kept.
    pub fn from_wire(slice: wire::EndpointSlice) -> Result<Self, InvalidObject> {
        let (namespace, name) = names("EndpointSlice", &slice.metadata)?;
        let mut metadata = slice.metadata;
        let service = metadata.labels.remove(SERVICE_NAME_LABEL).or_else(|| {
            metadata
                .owner_references
                .iter()
                .find(|o| o.kind == "Service")
                .map(|o| o.name.clone())
        });
        let address_type = match slice.address_type.as_str() {
            "IPv4" => AddressType::IPv4,
            "IPv6" => AddressType::IPv6,
            "FQDN" => AddressType::Fqdn,
            other => {
                // The API server refuses any other: a hand-written manifest's typo, whose
                // addresses are not read (tester finding: they were dropped without a word).
                // Quoted, so that a missing one reads `address_type=""`, not a blank.
                tracing::warn!(
                    kind = "EndpointSlice", object = %format!("{namespace}/{name}"),
                    address_type = ?other,
                    "skipping the addresses of a slice whose addressType is not IPv4, IPv6 or FQDN"
                );
                AddressType::Fqdn
            }
        };
        let object = ("EndpointSlice", namespace.as_str(), name.as_str());
        let ports = slice.ports.map(|ports| {
            ports
                .into_iter()
                .filter_map(|p| {
                    let port = super::port_in_range(object, "ports.port", p.port?)?;
                    Some(SlicePort {
                        name: p.name.unwrap_or_default(),
                        port,
                    })
                })
                .collect()
        });
        let endpoints = slice
            .endpoints
            .into_iter()
            .map(|ep| {
                let mut zone_hints: Vec<String> = ep
                    .hints
                    .into_iter()
                    .flat_map(|h| h.for_zones)
                    .map(|z| z.name)
                    .collect();
                zone_hints.sort();
                zone_hints.dedup();
                SliceEndpoint {
                    // FQDN slices hold host names, which no IP endpoint is made of.
                    addresses: if address_type == AddressType::Fqdn {
                        Vec::new()
                    } else {
                        super::parse_ips(
                            object,
                            "endpoints.addresses",
                            &ep.addresses,
                            Some(address_type),
                        )
                    },
                    ready: ep.conditions.and_then(|c| c.ready).unwrap_or(true),
                    hostname: ep.hostname,
                    zone: ep.zone,
                    node_name: ep.node_name,
                    zone_hints,
                    target: ep.target_ref.and_then(|t| {
                        Some(TargetRef {
                            kind: t.kind?,
                            namespace: t.namespace.unwrap_or_else(|| namespace.clone()),
                            name: t.name?,
                        })
                    }),
                }
            })
            .collect();
        let mut annotations = metadata.annotations.0;
        let managed_by_external_workloads = metadata
            .labels
            .get(MANAGED_BY_LABEL)
            .is_some_and(|m| m == EXTERNAL_WORKLOADS_CONTROLLER);
        Ok(Self {
            managed_by_external_workloads,
            service,
            address_type,
            ports,
            endpoints,
            remote_gateway_identity: annotations.remove(REMOTE_GATEWAY_IDENTITY_ANNOTATION),
            // An empty name would make the authority override `:<port>`: ignored instead.
            remote_svc_fq_name: annotations
                .remove(REMOTE_SVC_FQ_NAME_ANNOTATION)
                .filter(|name| !name.is_empty()),
            mirror_cluster_name: metadata.labels.remove(MIRROR_CLUSTER_NAME_LABEL),
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

    /// The Service this slice belongs to, if it names one.
    pub fn service_ref(&self) -> Option<ObjectRef> {
        self.service.as_ref().map(|name| ObjectRef {
            namespace: self.namespace.clone(),
            name: name.clone(),
        })
    }
}
