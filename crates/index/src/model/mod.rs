//! Compact domain objects the stores keep instead of whole Kubernetes objects, and the
//! [`Kind`]s they are decoded from.
//!
//! Each is built once per watch event (or state-file read) from the document, keeping only what
//! discovery and policy read (spec/destination.md §B.2); the numerous built-in kinds are
//! decoded through the lean shapes of [`wire`]. Conversion never panics: an object missing what
//! it must have is an [`InvalidObject`], which the source logs, counts and skips.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

mod egress_network;
mod external_workload;
mod kind;
mod network;
mod node;
mod pod;
mod policy_kinds;
pub mod ports;
pub mod profile;
pub mod regex;
mod secret;
pub mod selector;
mod server;
mod service;
mod slice;
pub mod wire;

pub use self::{
    egress_network::{EgressNetworkInfo, TrafficPolicy},
    external_workload::{ExternalWorkloadInfo, WorkloadPort},
    kind::{DecodeError, Kind, decode_json, decode_value},
    network::{Network, parse_net, parse_network},
    node::{NodeInfo, OwnerInfo},
    pod::{ContainerPort, PodInfo, ProbePaths, ProxyPorts},
    ports::PortSet,
    profile::ProfileInfo,
    secret::{
        CLUSTER_DOMAIN_ANNOTATION, CLUSTER_NAME_LABEL, LINK_SECRET_TYPE, LinkSecret,
        LinkSecretError, SecretInfo, TRUST_DOMAIN_ANNOTATION,
    },
    selector::{Labels, Selector},
    server::{ServerInfo, ServerOverlap, ServerPort},
    service::{ServiceInfo, ServicePort, TargetPort},
    slice::{AddressType, SliceEndpoint, SliceInfo, SlicePort, TargetRef},
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
/// Label giving a node's zone (and an ExternalWorkload's, spec §K).
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// EndpointSlice annotation carrying the identity of a mirrored gateway.
pub const REMOTE_GATEWAY_IDENTITY_ANNOTATION: &str = "mirror.linkerd.io/remote-gateway-identity";
/// EndpointSlice annotation carrying the fully-qualified name of a mirrored service.
pub const REMOTE_SVC_FQ_NAME_ANNOTATION: &str = "mirror.linkerd.io/remote-svc-fq-name";
/// EndpointSlice label naming the controller that manages it.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// [`MANAGED_BY_LABEL`] of the EndpointSlices the ExternalWorkload controller writes (spec
/// §K).
pub const EXTERNAL_WORKLOADS_CONTROLLER: &str = "linkerd-external-workloads-controller";
/// Label marking a headless Service's EndpointSlices.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
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

/// `addresses` parsed as IP addresses, for field `field` of object `kind` `namespace/name`.
/// An address that does not parse, or is not of `family` when one is given (an IPv6 address
/// in an `IPv4` EndpointSlice), is logged, naming the object, the field and the value, and
/// skipped; the others are kept (the API server validates these fields, so this is a
/// hand-written manifest's typo, which must not take the object's other addresses with it).
pub(crate) fn parse_ips(
    (kind, namespace, name): (&str, &str, &str),
    field: &str,
    addresses: &[String],
    family: Option<AddressType>,
) -> Vec<std::net::IpAddr> {
    let mut ips = Vec::with_capacity(addresses.len());
    for address in addresses {
        match address.parse::<std::net::IpAddr>() {
            Ok(ip) => match family {
                Some(family) if family != AddressType::of(ip) => tracing::warn!(
                    %kind, object = %format!("{namespace}/{name}"), %field, %address,
                    "skipping an address that is not of the object's address type {}",
                    family.as_str()
                ),
                _ => ips.push(ip),
            },
            Err(_) => tracing::warn!(
                %kind, object = %format!("{namespace}/{name}"), %field, %address,
                "skipping an address that is not an IP address"
            ),
        }
    }
    ips
}

/// `port`, field `field` of object `kind` `namespace/name`, as a port 1-65535; one outside
/// that range is logged, naming the object, the field and the value, and skipped, as
/// [`parse_ips`] skips an address (the API server refuses it, so it is a hand-written
/// manifest's typo: the object's other ports are kept).
pub(crate) fn port_in_range(
    (kind, namespace, name): (&str, &str, &str),
    field: &str,
    port: i64,
) -> Option<u16> {
    let in_range = u16::try_from(port).ok().filter(|p| *p != 0);
    if in_range.is_none() {
        tracing::warn!(
            %kind, object = %format!("{namespace}/{name}"), %field, %port,
            "skipping a port that is not 1-65535"
        );
    }
    in_range
}

/// [`parse_ips`] of an object's address list (`status.podIPs`, `spec.clusterIPs`), or of its
/// single address (`status.podIP`, `spec.clusterIP`) when the list is empty, as Kubernetes
/// reads them (the list, when set, starts with the single address). A single address beside a
/// list is not used but still checked, so that its typo is logged under its own field rather
/// than passing unseen (tester finding: a bad `podIP` beside a good `podIPs[0]`).
pub(crate) fn parse_single_and_list(
    object: (&str, &str, &str),
    (single_field, single): (&str, Option<String>),
    (list_field, list): (&str, Vec<String>),
) -> Vec<std::net::IpAddr> {
    let single_ips = parse_ips(object, single_field, single.as_slice(), None);
    if list.is_empty() {
        single_ips
    } else {
        parse_ips(object, list_field, &list, None)
    }
}

/// `(namespace, name)` of an object; namespace is `""` for cluster-scoped kinds.
pub(crate) fn names(
    kind: &'static str,
    meta: &wire::Metadata,
) -> Result<(String, String), InvalidObject> {
    name_pair(kind, meta.namespace.as_deref(), meta.name.as_deref())
}

/// [`names`] of a typed object's metadata (the CRD kinds).
pub(crate) fn names_of(
    kind: &'static str,
    meta: &ObjectMeta,
) -> Result<(String, String), InvalidObject> {
    name_pair(kind, meta.namespace.as_deref(), meta.name.as_deref())
}

fn name_pair(
    kind: &'static str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<(String, String), InvalidObject> {
    let namespace = namespace.unwrap_or_default().to_string();
    match name {
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

/// The owner of an object with exactly one owner reference.
pub(crate) fn single_owner(meta: &wire::Metadata) -> Option<OwnerRef> {
    match meta.owner_references.as_slice() {
        [wire::OwnerReference { kind, name }] => Some(OwnerRef {
            kind: kind.clone(),
            name: name.clone(),
        }),
        _ => None,
    }
}

/// [`single_owner`] of a typed object's metadata.
pub(crate) fn single_owner_of(meta: &ObjectMeta) -> Option<OwnerRef> {
    match meta.owner_references.as_deref() {
        Some([OwnerReference { kind, name, .. }]) => Some(OwnerRef {
            kind: kind.clone(),
            name: name.clone(),
        }),
        _ => None,
    }
}

/// The annotations of a typed object that [`wire::LinkerdAnnotations`] keeps.
pub(crate) fn linkerd_annotations(meta: &ObjectMeta) -> std::collections::BTreeMap<String, String> {
    meta.annotations
        .iter()
        .flatten()
        .filter(|(k, _)| wire::LinkerdAnnotations::keeps(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
