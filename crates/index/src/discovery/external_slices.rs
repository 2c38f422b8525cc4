//! The EndpointSlices of the ExternalWorkloads a Service selects (spec/destination.md §K): what
//! the ExternalWorkload EndpointSlice controller writes in kube mode (while it holds the Lease
//! `linkerd-destination-endpoint-write`), and what discovery serves in offline mode, where no
//! controller runs.
//!
//! - [`desired_groups`]: a Service and the ExternalWorkloads of its namespace → the endpoints
//!   it should have, per address family and port list. Pure.
//! - [`plan`]: those groups and the slices the controller owns now ([`OwnedSlice`]) → the
//!   slices to create, update and delete ([`SlicePlan`]), reusing slices and keeping each
//!   endpoint in the slice that holds it, as Kubernetes' EndpointSlice controller does. Pure.
//! - [`SliceSpec::to_endpoint_slice`]: a planned slice as the Kubernetes object to write;
//!   [`offline_slices`]: the slices offline mode indexes, decoded from those objects as a
//!   source decodes what it reads.

use k8s_openapi::{
    api::{core::v1::ObjectReference, discovery::v1 as k8s},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use std::{collections::BTreeMap, net::IpAddr, sync::Arc};

use crate::model::{
    AddressType, EXTERNAL_WORKLOADS_CONTROLLER, ExternalWorkloadInfo, HEADLESS_LABEL,
    MANAGED_BY_LABEL, SERVICE_NAME_LABEL, ServiceInfo, SliceInfo, TargetPort, ZONE_LABEL,
    decode_value,
};

/// At most this many endpoints in one slice (spec §K, Kubernetes' default).
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;
/// The `targetRef.kind` of the endpoints written.
pub const EXTERNAL_WORKLOAD_KIND: &str = "ExternalWorkload";

/// One `ports[]` entry of a slice.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointPort {
    /// The Service port's name; `None` when unnamed.
    pub name: Option<String>,
    /// The workload's port number.
    pub port: u16,
    /// The Service port's protocol (`TCP` when absent).
    pub protocol: String,
}

/// One `endpoints[]` entry of a slice: one ExternalWorkload's addresses of one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadEndpoint {
    pub addresses: Vec<IpAddr>,
    /// `conditions.ready`: the workload's `Ready` condition.
    pub ready: Option<bool>,
    /// `conditions.serving`: as `ready`.
    pub serving: Option<bool>,
    /// `conditions.terminating`: `false` (a workload has no termination phase).
    pub terminating: Option<bool>,
    /// The workload's name, for a headless Service.
    pub hostname: Option<String>,
    /// The workload's `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
    /// Never set on what is written; read from slices to notice one that has it.
    pub node_name: Option<String>,
    pub target: Option<EndpointTarget>,
}

/// `targetRef` of an endpoint.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EndpointTarget {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

/// The endpoints of one address family and one port list: the slices of a group share both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointGroup {
    pub address_type: AddressType,
    /// Sorted.
    pub ports: Vec<EndpointPort>,
    /// One per selected workload with an address of the family, by workload name.
    pub endpoints: Vec<WorkloadEndpoint>,
}

/// A slice the controller owns now (label `endpointslice.kubernetes.io/managed-by:
/// linkerd-external-workloads-controller` and the Service's `kubernetes.io/service-name`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnedSlice {
    pub name: String,
    pub resource_version: Option<String>,
    /// `None` for `FQDN` or an unknown type: such a slice is deleted.
    pub address_type: Option<AddressType>,
    /// Sorted; `None` when a port has no usable number (the slice then matches no group).
    pub ports: Option<Vec<EndpointPort>>,
    pub endpoints: Vec<WorkloadEndpoint>,
    pub labels: BTreeMap<String, String>,
    /// The `uid`s of its owner references of kind `Service`, apiVersion `v1`.
    pub service_owners: Vec<String>,
}

/// A slice to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceSpec {
    /// The slice to replace; `None` for a new slice (named by the API server from
    /// `linkerd-external-<svc>-`).
    pub name: Option<String>,
    /// The `resourceVersion` of the slice replaced, so that a concurrent change fails the write.
    pub resource_version: Option<String>,
    pub address_type: AddressType,
    pub ports: Vec<EndpointPort>,
    pub endpoints: Vec<WorkloadEndpoint>,
    pub labels: BTreeMap<String, String>,
}

/// What to write for one Service so that its owned slices are the desired ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlicePlan {
    pub create: Vec<SliceSpec>,
    /// Each names the slice it replaces.
    pub update: Vec<SliceSpec>,
    /// Names of slices to delete.
    pub delete: Vec<String>,
    /// Slices not created because the Service is being deleted (their endpoints are left
    /// out until the Service is gone with its slices).
    pub skipped_creates: usize,
}

/// Identifies an endpoint across reconciliations (spec §K): its sorted addresses, hostname
/// and target.
type EndpointKey = (
    Vec<IpAddr>,
    Option<String>,
    Option<(String, String, String)>,
);

// === impl WorkloadEndpoint ===

impl WorkloadEndpoint {
    fn key(&self) -> EndpointKey {
        let mut addresses = self.addresses.clone();
        addresses.sort();
        let target = self
            .target
            .as_ref()
            .map(|t| (t.kind.clone(), t.namespace.clone(), t.name.clone()));
        (addresses, self.hostname.clone(), target)
    }

    fn to_endpoint(&self) -> k8s::Endpoint {
        k8s::Endpoint {
            addresses: self.addresses.iter().map(IpAddr::to_string).collect(),
            conditions: Some(k8s::EndpointConditions {
                ready: self.ready,
                serving: self.serving,
                terminating: self.terminating,
            }),
            hostname: self.hostname.clone(),
            zone: self.zone.clone(),
            node_name: self.node_name.clone(),
            target_ref: self.target.as_ref().map(|t| ObjectReference {
                kind: Some(t.kind.clone()),
                namespace: Some(t.namespace.clone()),
                name: Some(t.name.clone()),
                uid: t.uid.clone(),
                ..ObjectReference::default()
            }),
            ..k8s::Endpoint::default()
        }
    }

    fn from_endpoint(ep: &k8s::Endpoint, namespace: &str) -> Self {
        let conditions = ep.conditions.clone().unwrap_or_default();
        Self {
            // An address that does not parse cannot be one we want: the endpoint is then not
            // kept (its key matches no desired endpoint).
            addresses: ep
                .addresses
                .iter()
                .map(|a| a.parse().unwrap_or(IpAddr::from([0, 0, 0, 0])))
                .collect(),
            ready: conditions.ready,
            serving: conditions.serving,
            terminating: conditions.terminating,
            hostname: ep.hostname.clone(),
            zone: ep.zone.clone(),
            node_name: ep.node_name.clone(),
            target: ep.target_ref.as_ref().map(|t| EndpointTarget {
                kind: t.kind.clone().unwrap_or_default(),
                namespace: t.namespace.clone().unwrap_or_else(|| namespace.to_string()),
                name: t.name.clone().unwrap_or_default(),
                uid: t.uid.clone(),
            }),
        }
    }
}

// === impl OwnedSlice ===

impl OwnedSlice {
    /// The parts of a listed slice the plan reads; `None` without a name.
    pub fn from_endpoint_slice(slice: &k8s::EndpointSlice) -> Option<Self> {
        let name = slice.metadata.name.clone()?;
        let namespace = slice.metadata.namespace.clone().unwrap_or_default();
        let address_type = match slice.address_type.as_str() {
            "IPv4" => Some(AddressType::IPv4),
            "IPv6" => Some(AddressType::IPv6),
            _ => None,
        };
        let ports = slice
            .ports
            .iter()
            .flatten()
            .map(|p| {
                Some(EndpointPort {
                    name: p.name.clone().filter(|n| !n.is_empty()),
                    port: u16::try_from(p.port?).ok().filter(|p| *p != 0)?,
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_string()),
                })
            })
            .collect::<Option<Vec<_>>>()
            .map(|mut ports| {
                ports.sort();
                ports
            });
        Some(Self {
            name,
            resource_version: slice.metadata.resource_version.clone(),
            address_type,
            ports,
            endpoints: slice
                .endpoints
                .iter()
                .map(|ep| WorkloadEndpoint::from_endpoint(ep, &namespace))
                .collect(),
            labels: slice.metadata.labels.clone().unwrap_or_default(),
            service_owners: slice
                .metadata
                .owner_references
                .iter()
                .flatten()
                .filter(|o| o.kind == "Service" && o.api_version == "v1")
                .map(|o| o.uid.clone())
                .collect(),
        })
    }

    /// Whether an owner reference names the Service (by `uid`; a Service without one, only
    /// seen in offline state, owns nothing).
    fn owned_by(&self, svc: &ServiceInfo) -> bool {
        svc.uid
            .as_ref()
            .is_some_and(|uid| self.service_owners.contains(uid))
    }
}

// === impl SliceSpec ===

impl SliceSpec {
    fn new(
        address_type: AddressType,
        ports: &[EndpointPort],
        labels: &BTreeMap<String, String>,
    ) -> Self {
        Self {
            name: None,
            resource_version: None,
            address_type,
            ports: ports.to_vec(),
            endpoints: Vec::new(),
            labels: labels.clone(),
        }
    }

    fn reusing(
        slice: &OwnedSlice,
        address_type: AddressType,
        ports: &[EndpointPort],
        labels: &BTreeMap<String, String>,
    ) -> Self {
        Self {
            name: Some(slice.name.clone()),
            resource_version: slice.resource_version.clone(),
            ..Self::new(address_type, ports, labels)
        }
    }

    /// The EndpointSlice to write for `svc`: named (with its `resourceVersion`) to replace
    /// one, else with `generateName: linkerd-external-<svc>-`; a controller owner reference
    /// to the Service when it has a `uid`.
    pub fn to_endpoint_slice(&self, svc: &ServiceInfo) -> k8s::EndpointSlice {
        let owner = svc.uid.as_ref().map(|uid| OwnerReference {
            api_version: "v1".to_string(),
            kind: "Service".to_string(),
            name: svc.name.clone(),
            uid: uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        });
        k8s::EndpointSlice {
            metadata: ObjectMeta {
                name: self.name.clone(),
                generate_name: self
                    .name
                    .is_none()
                    .then(|| format!("linkerd-external-{}-", svc.name)),
                namespace: Some(svc.namespace.clone()),
                resource_version: self.resource_version.clone(),
                labels: Some(self.labels.clone()),
                owner_references: owner.map(|o| vec![o]),
                ..ObjectMeta::default()
            },
            address_type: self.address_type.as_str().to_string(),
            endpoints: self
                .endpoints
                .iter()
                .map(WorkloadEndpoint::to_endpoint)
                .collect(),
            ports: Some(
                self.ports
                    .iter()
                    .map(|p| k8s::EndpointPort {
                        name: p.name.clone(),
                        port: Some(i32::from(p.port)),
                        protocol: Some(p.protocol.clone()),
                        app_protocol: None,
                    })
                    .collect(),
            ),
        }
    }
}

// === impl SlicePlan ===

impl SlicePlan {
    /// Whether nothing is to be written.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.update.is_empty() && self.delete.is_empty()
    }
}

/// Whether the controller keeps slices for `svc` at all: not an `ExternalName` Service, one
/// with a selector, outside `kube-system` (spec §K). For other Services it writes nothing and
/// leaves their slices as they are.
pub fn manages(svc: &ServiceInfo) -> bool {
    !svc.external_name && svc.selector.is_some() && svc.namespace != "kube-system"
}

/// The address families of `svc`'s slices: `spec.ipFamilies`, or both when it lists none.
pub fn address_types(svc: &ServiceInfo) -> Vec<AddressType> {
    let mut families: Vec<AddressType> = Vec::with_capacity(2);
    for family in &svc.ip_families {
        if !families.contains(family) {
            families.push(*family);
        }
    }
    if families.is_empty() {
        families = vec![AddressType::IPv4, AddressType::IPv6];
    }
    families
}

/// The labels of `svc`'s slices: the Service's, without the reserved keys, plus
/// `kubernetes.io/service-name`, `endpointslice.kubernetes.io/managed-by` and, for a headless
/// Service, `service.kubernetes.io/headless: ""`.
pub fn slice_labels(svc: &ServiceInfo) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = svc
        .labels
        .iter()
        .filter(|(k, _)| {
            ![SERVICE_NAME_LABEL, MANAGED_BY_LABEL, HEADLESS_LABEL].contains(&k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if svc.headless {
        labels.insert(HEADLESS_LABEL.to_string(), String::new());
    }
    labels.insert(SERVICE_NAME_LABEL.to_string(), svc.name.clone());
    labels.insert(
        MANAGED_BY_LABEL.to_string(),
        EXTERNAL_WORKLOADS_CONTROLLER.to_string(),
    );
    labels
}

/// The ports of `svc`'s slice for `ew`, sorted: for each Service port, the workload port its
/// `targetPort` names (by name, or by number, which the workload must declare) with the same
/// protocol; a Service port no workload port matches is left out (spec §K).
pub fn endpoint_ports(svc: &ServiceInfo, ew: &ExternalWorkloadInfo) -> Vec<EndpointPort> {
    let mut ports: Vec<EndpointPort> = svc
        .ports
        .iter()
        .filter_map(|sp| {
            let target = &sp.target_port;
            let wp = ew.ports.iter().find(|wp| {
                wp.protocol == sp.protocol
                    && match target {
                        TargetPort::Name(name) => wp.name.as_deref() == Some(name.as_str()),
                        TargetPort::Number(port) => wp.port == *port,
                    }
            });
            let Some(wp) = wp else {
                tracing::debug!(service = %format!("{}/{}", svc.namespace, svc.name), workload = %ew.name, port = sp.port, "no workload port for the Service port's targetPort");
                return None;
            };
            Some(EndpointPort {
                name: Some(sp.name.clone()).filter(|n| !n.is_empty()),
                port: wp.port,
                protocol: sp.protocol.clone(),
            })
        })
        .collect();
    ports.sort();
    ports
}

/// The endpoints `svc` should have from `workloads` (any; those of its namespace it selects
/// are used), per address family and port list, groups and endpoints in a stable order.
/// Empty when the controller does not manage `svc` ([`manages`]).
pub fn desired_groups<'a>(
    svc: &ServiceInfo,
    workloads: impl IntoIterator<Item = &'a ExternalWorkloadInfo>,
) -> Vec<EndpointGroup> {
    if !manages(svc) {
        return Vec::new();
    }
    let mut selected: Vec<&ExternalWorkloadInfo> = workloads
        .into_iter()
        .filter(|ew| ew.namespace == svc.namespace && svc.selects(&ew.labels) && !ew.ips.is_empty())
        .collect();
    selected.sort_by(|a, b| a.name.cmp(&b.name));
    selected.dedup_by(|a, b| a.name == b.name);
    let ports: Vec<Vec<EndpointPort>> = selected.iter().map(|ew| endpoint_ports(svc, ew)).collect();
    let mut groups = Vec::new();
    for family in address_types(svc) {
        let mut by_ports: BTreeMap<&[EndpointPort], Vec<WorkloadEndpoint>> = BTreeMap::new();
        for (ew, ports) in selected.iter().zip(&ports) {
            let addresses: Vec<IpAddr> = ew
                .ips
                .iter()
                .copied()
                .filter(|ip| AddressType::of(*ip) == family)
                .collect();
            if addresses.is_empty() {
                continue;
            }
            let ready = Some(ew.ready);
            by_ports.entry(ports).or_default().push(WorkloadEndpoint {
                addresses,
                ready,
                serving: ready,
                terminating: Some(false),
                hostname: svc.headless.then(|| ew.name.clone()),
                zone: ew.labels.get(ZONE_LABEL).map(str::to_string),
                node_name: None,
                target: Some(EndpointTarget {
                    kind: EXTERNAL_WORKLOAD_KIND.to_string(),
                    namespace: ew.namespace.clone(),
                    name: ew.name.clone(),
                    uid: ew.uid.clone(),
                }),
            });
        }
        groups.extend(
            by_ports
                .into_iter()
                .map(|(ports, endpoints)| EndpointGroup {
                    address_type: family,
                    ports: ports.to_vec(),
                    endpoints,
                }),
        );
    }
    groups
}

/// What to write so that the slices `owned` for `svc` (listed by its service-name and
/// managed-by labels) hold the endpoints of `groups` (spec §K):
///
/// - a slice of a family `svc` no longer has, not owned by `svc` (by owner reference `uid`),
///   or of a port list no group has, is deleted;
/// - within a group, each slice keeps the endpoints still desired (updated when one changed or
///   one was dropped, deleted when none is left, updated when its labels drifted); the other
///   endpoints go first into slices updated anyway (fullest first), then, when fewer than
///   [`MAX_ENDPOINTS_PER_SLICE`] remain, into the unchanged slice they fill best, else into
///   new slices of at most [`MAX_ENDPOINTS_PER_SLICE`];
/// - a new slice takes the name of a slice being deleted of the same family owned by `svc`:
///   an update instead of a create and a delete;
/// - while `svc` is being deleted (`deletionTimestamp`), nothing is created (the API server
///   would refuse it): the creates left after name reuse are counted in
///   [`SlicePlan::skipped_creates`], updates and deletes stand.
pub fn plan(svc: &ServiceInfo, groups: &[EndpointGroup], owned: &[OwnedSlice]) -> SlicePlan {
    let families = address_types(svc);
    let labels = slice_labels(svc);
    let mut owned: Vec<&OwnedSlice> = owned.iter().collect();
    owned.sort_by(|a, b| a.name.cmp(&b.name));

    let mut result = SlicePlan::default();
    // Slices to delete, with what a create may reuse of them: (family, owned by svc).
    let mut deleted: Vec<(&OwnedSlice, Option<AddressType>, bool)> = Vec::new();
    let mut by_group: BTreeMap<(AddressType, &[EndpointPort]), Vec<&OwnedSlice>> = BTreeMap::new();
    for slice in owned {
        let owned_by = slice.owned_by(svc);
        match (slice.address_type, slice.ports.as_deref()) {
            (Some(family), Some(ports)) if owned_by && families.contains(&family) => {
                by_group.entry((family, ports)).or_default().push(slice);
            }
            (family, _) => deleted.push((slice, family, owned_by)),
        }
    }
    for group in groups {
        let existing = by_group
            .remove(&(group.address_type, group.ports.as_slice()))
            .unwrap_or_default();
        plan_group(group, &existing, &labels, &mut result, &mut deleted);
    }
    for slices in by_group.into_values() {
        for slice in slices {
            deleted.push((slice, slice.address_type, true));
        }
    }

    // Reuse the names of slices being deleted for new slices of their family.
    let mut creates = std::mem::take(&mut result.create);
    let mut kept_creates = Vec::new();
    while let Some(mut spec) = creates.pop() {
        let reusable = deleted
            .iter()
            .position(|(_, family, owned_by)| *owned_by && *family == Some(spec.address_type));
        match reusable {
            Some(at) => {
                let (slice, _, _) = deleted.remove(at);
                spec.name = Some(slice.name.clone());
                spec.resource_version = slice.resource_version.clone();
                result.update.push(spec);
            }
            None => kept_creates.push(spec),
        }
    }
    kept_creates.reverse();
    if svc.deleting {
        result.skipped_creates = kept_creates.len();
        kept_creates.clear();
    }
    result.create = kept_creates;
    result.delete = deleted
        .into_iter()
        .map(|(s, _, _)| s.name.clone())
        .collect();
    result.delete.sort();
    result.update.sort_by(|a, b| a.name.cmp(&b.name));
    result
}

/// [`plan`] for the slices of one group.
fn plan_group<'a>(
    group: &EndpointGroup,
    existing: &[&'a OwnedSlice],
    labels: &BTreeMap<String, String>,
    result: &mut SlicePlan,
    deleted: &mut Vec<(&'a OwnedSlice, Option<AddressType>, bool)>,
) {
    let mut desired: BTreeMap<EndpointKey, &WorkloadEndpoint> =
        group.endpoints.iter().map(|ep| (ep.key(), ep)).collect();
    // Desired endpoints not placed yet, in the group's order.
    let mut updated: Vec<SliceSpec> = Vec::new();
    let mut unchanged: Vec<SliceSpec> = Vec::new();
    for slice in existing {
        let mut spec = SliceSpec::reusing(slice, group.address_type, &group.ports, labels);
        let mut changed = false;
        for ep in &slice.endpoints {
            match desired.remove(&ep.key()) {
                Some(want) => {
                    changed |= want != ep;
                    spec.endpoints.push(want.clone());
                }
                None => changed = true,
            }
        }
        if changed && spec.endpoints.is_empty() {
            deleted.push((slice, Some(group.address_type), true));
        } else if changed || slice.labels != *labels {
            updated.push(spec);
        } else {
            unchanged.push(spec);
        }
    }
    let mut leftover: Vec<WorkloadEndpoint> = group
        .endpoints
        .iter()
        .filter(|ep| desired.contains_key(&ep.key()))
        .cloned()
        .collect();

    // Fill the slices written anyway first, fullest first.
    updated.sort_by_key(|s| std::cmp::Reverse(s.endpoints.len()));
    for spec in &mut updated {
        fill(spec, &mut leftover);
    }
    while !leftover.is_empty() {
        let best = (leftover.len() < MAX_ENDPOINTS_PER_SLICE)
            .then(|| slice_to_fill(&unchanged, leftover.len()))
            .flatten();
        match best {
            Some(at) => {
                let mut spec = unchanged.remove(at);
                fill(&mut spec, &mut leftover);
                updated.push(spec);
            }
            None => {
                let mut spec = SliceSpec::new(group.address_type, &group.ports, labels);
                fill(&mut spec, &mut leftover);
                result.create.push(spec);
            }
        }
    }
    result.update.extend(updated);
}

/// Moves endpoints from the front of `leftover` into `spec` until it is full.
fn fill(spec: &mut SliceSpec, leftover: &mut Vec<WorkloadEndpoint>) {
    let room = MAX_ENDPOINTS_PER_SLICE.saturating_sub(spec.endpoints.len());
    let n = room.min(leftover.len());
    spec.endpoints.extend(leftover.drain(..n));
}

/// The slice of `slices` that `n` more endpoints leave closest to full without overflowing.
fn slice_to_fill(slices: &[SliceSpec], n: usize) -> Option<usize> {
    slices
        .iter()
        .enumerate()
        .filter(|(_, s)| s.endpoints.len() + n <= MAX_ENDPOINTS_PER_SLICE)
        .min_by_key(|(_, s)| MAX_ENDPOINTS_PER_SLICE - (s.endpoints.len() + n))
        .map(|(at, _)| at)
}

/// The slices offline mode serves for `svc`, as the controller would create them from nothing,
/// named `linkerd-external-<svc>-<n>` (the API server picks the suffix in a cluster), decoded
/// as any EndpointSlice is.
pub fn offline_slices(svc: &ServiceInfo, groups: &[EndpointGroup]) -> Vec<Arc<SliceInfo>> {
    let planned = plan(svc, groups, &[]);
    planned
        .create
        .into_iter()
        .enumerate()
        .filter_map(|(n, mut spec)| {
            spec.name = Some(format!("linkerd-external-{}-{n}", svc.name));
            let slice = spec.to_endpoint_slice(svc);
            let decoded = serde_json::to_value(&slice)
                .map_err(|e| e.to_string())
                .and_then(|doc| {
                    decode_value::<k8s::EndpointSlice>(&doc).map_err(|e| e.to_string())
                });
            match decoded {
                Ok(info) => Some(Arc::new(info)),
                Err(error) => {
                    tracing::warn!(service = %format!("{}/{}", svc.namespace, svc.name), %error, "cannot index a computed ExternalWorkload EndpointSlice");
                    None
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
