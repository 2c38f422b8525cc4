//! The discovery index of one cluster: Services, EndpointSlices, Pods, Nodes, the owners of
//! pods (ReplicaSets, Jobs), ExternalWorkloads, ServiceProfiles and the Servers that make ports
//! opaque, and the views `Destination.Get` and `GetProfile` serve from them.
//!
//! - [`endpoints`]: [`EndpointsView`], one per subscribed (Service, port[, hostname]).
//! - [`profiles`]: one view per subscribed service profile or workload address.
//! - [`external_slices`]: the EndpointSlices of the ExternalWorkloads a Service selects
//!   (spec §K): computed and served here in offline mode, queued for the Lease holder's
//!   controller to write in kube mode.
//! - this module: [`DiscoveryIndex`], the stores with their secondary indexes, and how each
//!   kind's events update them and republish the views they touch.
//!
//! A discovery index is a value: a process may hold one per cluster (multicluster), each fed
//! by its own source and owning its own state, lock and topics.

pub mod endpoints;
pub mod external_slices;
pub mod profiles;

use k8s_openapi::api::{
    apps::v1::ReplicaSet,
    batch::v1::Job,
    core::v1::{Node, Pod, Service},
    discovery::v1::EndpointSlice,
};
use linkerd_k8s_api::{ExternalWorkload, Server, ServiceProfile};
use parking_lot::Mutex;
use std::{
    collections::{BTreeSet, HashMap, HashSet},
    net::IpAddr,
    sync::Arc,
};
use tokio::sync::watch;

use self::{
    endpoints::{EndpointsKey, EndpointsView},
    profiles::{
        AddressConflict, EndpointProfileKey, EndpointProfileView, ServiceProfileKey,
        ServiceProfileView,
    },
};
use crate::{
    model::{
        ExternalWorkloadInfo, NodeInfo, ObjectRef, OwnerInfo, OwnerRef, PodInfo, ProfileInfo,
        ServerInfo, ServiceInfo, SliceInfo,
    },
    source::Event,
    store::{RefSet, apply_event, index_insert, index_remove},
    topic::{Topics, subscribe},
    watches::{Sink, Watches},
};

/// The discovery index of one cluster. Cheap to clone; every clone is the same index.
#[derive(Clone)]
pub struct DiscoveryIndex {
    state: Arc<Mutex<Discovery>>,
}

/// The stores and topics of a discovery index. Only the index's watches mutate them, under
/// its lock.
#[derive(Default)]
pub(crate) struct Discovery {
    pub(crate) services: HashMap<ObjectRef, Arc<ServiceInfo>>,
    pub(crate) services_by_ip: HashMap<IpAddr, RefSet>,
    pub(crate) slices: HashMap<ObjectRef, Arc<SliceInfo>>,
    /// Service → its slices.
    pub(crate) slices_by_service: HashMap<ObjectRef, BTreeSet<ObjectRef>>,
    /// Pod → the slices whose endpoints point at it, so a pod change reaches its services.
    pub(crate) slices_by_pod: HashMap<ObjectRef, RefSet>,
    pub(crate) pods: HashMap<ObjectRef, Arc<PodInfo>>,
    pub(crate) pods_by_ip: HashMap<IpAddr, RefSet>,
    pub(crate) pods_by_host_port: HashMap<(IpAddr, u16), RefSet>,
    pub(crate) nodes: HashMap<String, Arc<NodeInfo>>,
    pub(crate) replica_sets: HashMap<ObjectRef, Arc<OwnerInfo>>,
    pub(crate) jobs: HashMap<ObjectRef, Arc<OwnerInfo>>,
    pub(crate) servers: HashMap<ObjectRef, Arc<ServerInfo>>,
    /// Namespace → its Servers (a Server only reaches workloads of its own namespace).
    pub(crate) servers_by_namespace: HashMap<String, BTreeSet<ObjectRef>>,
    pub(crate) external_workloads: HashMap<ObjectRef, Arc<ExternalWorkloadInfo>>,
    /// `ip:port` for every workload IP × declared port (spec §B.3).
    pub(crate) external_workloads_by_addr: HashMap<(IpAddr, u16), RefSet>,
    /// ExternalWorkload → the slices whose endpoints point at it.
    pub(crate) slices_by_external_workload: HashMap<ObjectRef, RefSet>,
    /// Namespace → its ExternalWorkloads (the ones a Service can select).
    pub(crate) external_workloads_by_namespace: HashMap<String, BTreeSet<ObjectRef>>,
    /// Namespace → its Services with a selector (those that can select ExternalWorkloads).
    pub(crate) selector_services_by_namespace: HashMap<String, BTreeSet<ObjectRef>>,
    /// What becomes of the ExternalWorkload slices of those Services (spec §K).
    external_slices: ExternalSlices,
    /// Service → the keys of the slices computed for it ([`ExternalSlices::Computed`]), which
    /// are stored in `slices` with the listed ones.
    computed_slices: HashMap<ObjectRef, Vec<ObjectRef>>,
    /// Every key of `computed_slices`.
    computed_slice_keys: HashSet<ObjectRef>,
    /// ServiceProfiles by their own namespace and name (`<svc>.<ns>.svc.<domain>`).
    pub(crate) profiles: HashMap<ObjectRef, Arc<ProfileInfo>>,
    endpoint_topics: Topics<ObjectRef, (u16, Option<String>), EndpointsView>,
    profile_topics: Topics<ObjectRef, ServiceProfileKey, ServiceProfileView>,
    endpoint_profile_topics: Topics<IpAddr, u16, EndpointProfileView>,
}

/// What becomes of the EndpointSlices of the ExternalWorkloads that Services select.
#[derive(Debug, Default)]
enum ExternalSlices {
    /// Nothing: slices come from the cluster only (a linked cluster's index, tests).
    #[default]
    Off,
    /// Offline mode: computed in-process and served as if listed; slices of the state that
    /// the controller manages are ignored, since the computed ones stand for them.
    Computed,
    /// Kube mode: the Services whose slices may need writing are queued for the controller.
    Queued {
        pending: BTreeSet<ObjectRef>,
        wake: watch::Sender<()>,
    },
}

/// What a batch of changes touched: the subscribed views to recompute.
#[derive(Debug, Default)]
struct Touched {
    /// Services whose ExternalWorkload slices may have changed (only tracked while
    /// [`ExternalSlices`] is not `Off`).
    external_slice_services: BTreeSet<ObjectRef>,
    /// Services whose endpoint (and profile) views may have changed.
    services: BTreeSet<ObjectRef>,
    /// Namespaces in which a Server changed: every service view there is recomputed.
    server_namespaces: BTreeSet<String>,
    /// IPs whose endpoint profiles may have changed (a pod's or ExternalWorkload's).
    ips: BTreeSet<IpAddr>,
    /// A Server changed: every endpoint profile is recomputed.
    all_ips: bool,
}

// === impl DiscoveryIndex ===

impl Default for DiscoveryIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl DiscoveryIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self {
            state: Arc::default(),
        }
    }

    /// Feeds the index from `watches`: Services, EndpointSlices, Pods, Nodes, ReplicaSets,
    /// Jobs, Servers, ExternalWorkloads and ServiceProfiles.
    pub fn watch(&self, watches: &mut Watches) {
        watches
            .add::<Service>(self.clone())
            .add::<EndpointSlice>(self.clone())
            .add::<Pod>(self.clone())
            .add::<Node>(self.clone())
            .add::<ReplicaSet>(self.clone())
            .add::<Job>(self.clone())
            .add::<Server>(self.clone())
            .add::<ExternalWorkload>(self.clone())
            .add::<ServiceProfile>(self.clone());
    }

    /// Runs `change` on the stores, then republishes every subscribed view it touched.
    fn update<R>(&self, change: impl FnOnce(&mut Discovery, &mut Touched) -> R) -> R {
        let mut state = self.state.lock();
        let mut touched = Touched::default();
        let out = change(&mut state, &mut touched);
        state.update_external_slices(&mut touched);
        state.publish(&touched);
        out
    }

    /// Offline mode: computes the EndpointSlices of the ExternalWorkloads each Service selects,
    /// as the controller would write them (spec §K, [`external_slices`]), and serves them
    /// with the listed slices from now on, recomputed as Services and ExternalWorkloads change.
    /// Listed slices managed by the controller are ignored: the computed ones stand for them.
    pub fn compute_external_workload_slices(&self) {
        self.update(|d, touched| {
            d.external_slices = ExternalSlices::Computed;
            touched
                .external_slice_services
                .extend(d.selector_services_by_namespace.values().flatten().cloned());
        });
    }

    /// Kube mode: from now on, Services whose ExternalWorkload slices may need writing are
    /// queued for the controller ([`DiscoveryIndex::take_external_workload_slice_queue`]),
    /// every Service with a selector to begin with. The receiver changes whenever the queue
    /// grows.
    pub fn queue_external_workload_slices(&self) -> watch::Receiver<()> {
        let (wake, rx) = watch::channel(());
        self.update(|d, touched| {
            d.external_slices = ExternalSlices::Queued {
                pending: BTreeSet::new(),
                wake,
            };
            touched
                .external_slice_services
                .extend(d.selector_services_by_namespace.values().flatten().cloned());
        });
        rx
    }

    /// Takes the Services queued since the last call (empty unless
    /// [`DiscoveryIndex::queue_external_workload_slices`] was called).
    pub fn take_external_workload_slice_queue(&self) -> BTreeSet<ObjectRef> {
        match &mut self.state.lock().external_slices {
            ExternalSlices::Queued { pending, .. } => std::mem::take(pending),
            _ => BTreeSet::new(),
        }
    }

    /// Queues every Service with a selector again (a periodic resync, or leadership just
    /// gained).
    pub fn requeue_external_workload_slices(&self) {
        self.update(|d, touched| {
            touched
                .external_slice_services
                .extend(d.selector_services_by_namespace.values().flatten().cloned());
        });
    }

    /// The Service `service` and the endpoints its ExternalWorkload slices should hold
    /// ([`external_slices::desired_groups`]); `None` when the Service does not exist or the
    /// controller does not manage it ([`external_slices::manages`]).
    pub fn external_workload_endpoints(
        &self,
        service: &ObjectRef,
    ) -> Option<(Arc<ServiceInfo>, Vec<external_slices::EndpointGroup>)> {
        let state = self.state.lock();
        let svc = state.services.get(service)?;
        if !external_slices::manages(svc) {
            return None;
        }
        let groups = external_slices::desired_groups(
            svc,
            state.namespace_external_workloads(&svc.namespace),
        );
        Some((svc.clone(), groups))
    }

    /// Subscribes to the endpoints of `key`. The receiver's current value is the view now;
    /// it changes whenever a different view is computed. The topic is dropped when the last
    /// receiver is.
    pub fn endpoints(&self, key: EndpointsKey) -> crate::topic::Receiver<EndpointsView> {
        let sub_key = (key.port, key.hostname.clone());
        subscribe(
            &self.state,
            |d| &mut d.endpoint_topics,
            key.service.clone(),
            sub_key,
            |d| EndpointsView::compute(d, &key),
        )
    }

    /// Subscribes to the service profile of `key` (spec §D.2): the Service and the
    /// ServiceProfile that applies to the client. Dropped with its last receiver.
    pub fn service_profile(
        &self,
        key: ServiceProfileKey,
    ) -> crate::topic::Receiver<ServiceProfileView> {
        subscribe(
            &self.state,
            |d| &mut d.profile_topics,
            key.service.clone(),
            key.clone(),
            |d| ServiceProfileView::compute(d, &key),
        )
    }

    /// Subscribes to the endpoint profile of `ip:port` (spec §D.5). Errors when several pods
    /// or ExternalWorkloads claim the address now (`FailedPrecondition` upstream).
    pub fn endpoint_profile(
        &self,
        key: EndpointProfileKey,
    ) -> Result<crate::topic::Receiver<EndpointProfileView>, AddressConflict> {
        profiles::address_conflict(&self.state.lock(), &key)?;
        Ok(subscribe(
            &self.state,
            |d| &mut d.endpoint_profile_topics,
            key.ip,
            key.port,
            |d| EndpointProfileView::compute(d, &key, None),
        ))
    }

    /// The pod behind the endpoint with `hostname` in the Service's slices, whatever its
    /// readiness (a StatefulSet pod's DNS name, spec §D.5). `None` when no endpoint has that
    /// hostname or it points at no known pod.
    pub fn pod_by_hostname(&self, service: &ObjectRef, hostname: &str) -> Option<Arc<PodInfo>> {
        let state = self.state.lock();
        state
            .service_slices(service)
            .flat_map(|s| s.endpoints.iter())
            .filter(|ep| ep.hostname.as_deref() == Some(hostname))
            .filter_map(|ep| ep.target.as_ref().filter(|t| t.kind == "Pod"))
            .find_map(|t| {
                state
                    .pods
                    .get(&ObjectRef {
                        namespace: t.namespace.clone(),
                        name: t.name.clone(),
                    })
                    .cloned()
            })
    }

    /// The number of endpoint topics alive (one per subscribed service port and hostname).
    pub fn endpoint_topic_count(&self) -> usize {
        self.state.lock().endpoint_topics.len()
    }

    /// The number of profile topics alive (service profiles and endpoint profiles).
    pub fn profile_topic_count(&self) -> usize {
        let state = self.state.lock();
        state.profile_topics.len() + state.endpoint_profile_topics.len()
    }

    /// The zone of a node (label `topology.kubernetes.io/zone`), if the node is known.
    pub fn node_zone(&self, node: &str) -> Option<String> {
        self.state
            .lock()
            .nodes
            .get(node)
            .and_then(|n| n.zone.clone())
    }

    /// The Service `namespace/name`, if it exists.
    pub fn service(&self, namespace: &str, name: &str) -> Option<Arc<ServiceInfo>> {
        let key = ObjectRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        self.state.lock().services.get(&key).cloned()
    }

    /// The Services whose cluster IPs include `ip`.
    pub fn services_by_cluster_ip(&self, ip: IpAddr) -> Vec<Arc<ServiceInfo>> {
        let state = self.state.lock();
        state
            .services_by_ip
            .get(&ip)
            .into_iter()
            .flatten()
            .filter_map(|k| state.services.get(k).cloned())
            .collect()
    }

    /// The live pods (not terminating, not finished, not host-network) with pod IP `ip`.
    pub fn pods_by_ip(&self, ip: IpAddr) -> Vec<Arc<PodInfo>> {
        let state = self.state.lock();
        state.live_pods(state.pods_by_ip.get(&ip))
    }

    /// The live pods declaring host port `port` on host IP `ip`.
    pub fn pods_by_host_port(&self, ip: IpAddr, port: u16) -> Vec<Arc<PodInfo>> {
        let state = self.state.lock();
        state.live_pods(state.pods_by_host_port.get(&(ip, port)))
    }
}

// === impl Discovery ===

impl Discovery {
    /// The slices of a service, in name order. With computed ExternalWorkload slices, the
    /// listed ones that the controller manages are left out: the computed ones stand for them.
    pub(crate) fn service_slices<'a>(
        &'a self,
        service: &ObjectRef,
    ) -> impl Iterator<Item = &'a SliceInfo> + 'a {
        let computed = matches!(self.external_slices, ExternalSlices::Computed);
        self.slices_by_service
            .get(service)
            .into_iter()
            .flatten()
            .filter_map(move |k| {
                let slice = self.slices.get(k)?;
                let superseded = computed
                    && slice.managed_by_external_workloads
                    && !self.computed_slice_keys.contains(k);
                (!superseded).then_some(&**slice)
            })
    }

    /// The ExternalWorkloads of `namespace`.
    fn namespace_external_workloads<'a>(
        &'a self,
        namespace: &str,
    ) -> impl Iterator<Item = &'a ExternalWorkloadInfo> + 'a {
        self.external_workloads_by_namespace
            .get(namespace)
            .into_iter()
            .flatten()
            .filter_map(|k| self.external_workloads.get(k).map(|ew| &**ew))
    }

    /// The Services of `ew`'s namespace whose selector selects it.
    fn services_selecting<'a>(
        &'a self,
        ew: &'a ExternalWorkloadInfo,
    ) -> impl Iterator<Item = &'a ObjectRef> + 'a {
        self.selector_services_by_namespace
            .get(&ew.namespace)
            .into_iter()
            .flatten()
            .filter(|k| {
                self.services
                    .get(*k)
                    .is_some_and(|svc| svc.selects(&ew.labels))
            })
    }

    /// Acts on the Services whose ExternalWorkload slices a batch may have changed: computes
    /// and stores their slices (offline), or queues them for the controller (kube).
    fn update_external_slices(&mut self, touched: &mut Touched) {
        if touched.external_slice_services.is_empty() {
            return;
        }
        let services = std::mem::take(&mut touched.external_slice_services);
        match &mut self.external_slices {
            ExternalSlices::Off => {}
            ExternalSlices::Queued { pending, wake } => {
                pending.extend(services);
                wake.send_replace(());
            }
            ExternalSlices::Computed => {
                for service in services {
                    self.recompute_slices(&service, touched);
                    // A workload's identity or ports may have changed without its slices.
                    touched.services.insert(service);
                }
            }
        }
    }

    /// Replaces the computed slices of `service` when they changed.
    fn recompute_slices(&mut self, service: &ObjectRef, touched: &mut Touched) {
        let slices = match self.services.get(service) {
            Some(svc) if external_slices::manages(svc) => {
                let groups = external_slices::desired_groups(
                    svc,
                    self.namespace_external_workloads(&svc.namespace),
                );
                external_slices::offline_slices(svc, &groups)
            }
            _ => Vec::new(),
        };
        let old = self.computed_slices.remove(service).unwrap_or_default();
        let unchanged = old.len() == slices.len()
            && old
                .iter()
                .zip(&slices)
                .all(|(k, new)| self.slices.get(k).is_some_and(|s| s == new));
        if unchanged {
            if !old.is_empty() {
                self.computed_slices.insert(service.clone(), old);
            }
            return;
        }
        for key in &old {
            self.computed_slice_keys.remove(key);
            self.delete_slice(key, touched);
        }
        let keys: Vec<ObjectRef> = slices.iter().map(|s| slice_key(s)).collect();
        for (key, slice) in keys.iter().zip(&slices) {
            if self.slices.contains_key(key) {
                tracing::warn!(slice = %format!("{}/{}", key.namespace, key.name), "a listed EndpointSlice has the name of a computed one; serving the computed one");
            }
            self.computed_slice_keys.insert(key.clone());
            self.apply_slice(slice, touched);
        }
        if !keys.is_empty() {
            self.computed_slices.insert(service.clone(), keys);
        }
    }

    /// The owner used in a pod's metric labels: a ReplicaSet's Deployment, a Job's CronJob, the
    /// direct owner otherwise, or the pod itself without one (spec §C.6.4).
    pub(crate) fn resolve_owner(&self, pod: &PodInfo) -> OwnerRef {
        let Some(owner) = &pod.owner else {
            return OwnerRef {
                kind: "Pod".to_string(),
                name: pod.name.clone(),
            };
        };
        let parent = ObjectRef {
            namespace: pod.namespace.clone(),
            name: owner.name.clone(),
        };
        let grandparent = match owner.kind.as_str() {
            "ReplicaSet" => self.replica_sets.get(&parent).and_then(|o| o.owner.clone()),
            "Job" => self.jobs.get(&parent).and_then(|o| o.owner.clone()),
            _ => None,
        };
        grandparent.unwrap_or_else(|| owner.clone())
    }

    pub(crate) fn live_pods(&self, keys: Option<&RefSet>) -> Vec<Arc<PodInfo>> {
        keys.into_iter()
            .flatten()
            .filter_map(|k| self.pods.get(k))
            .filter(|p| p.is_live())
            .cloned()
            .collect()
    }

    /// Whether an opaque Server in the pod's namespace covers `port` of `pod` (spec §C.3.1).
    pub(crate) fn server_opaque_pod(&self, pod: &PodInfo, port: u16) -> bool {
        self.namespace_servers(&pod.namespace)
            .any(|s| s.is_opaque() && s.selects_pod_port(pod, port))
    }

    /// Whether an opaque Server covers `port` of the ExternalWorkload `ew` (spec §C.3.1).
    pub(crate) fn server_opaque_external_workload(
        &self,
        ew: &ExternalWorkloadInfo,
        port: u16,
    ) -> bool {
        self.namespace_servers(&ew.namespace)
            .any(|s| s.is_opaque() && s.selects_external_workload_port(ew, port))
    }

    fn namespace_servers<'a>(&'a self, namespace: &str) -> impl Iterator<Item = &'a ServerInfo> {
        self.servers_by_namespace
            .get(namespace)
            .into_iter()
            .flatten()
            .filter_map(|k| self.servers.get(k).map(|s| &**s))
    }

    fn touch_slice_services(&self, slices: Option<&RefSet>, touched: &mut Touched) {
        for slice in slices.into_iter().flatten() {
            if let Some(svc) = self.slices.get(slice).and_then(|s| s.service_ref()) {
                touched.services.insert(svc);
            }
        }
    }

    /// Recomputes and publishes the subscribed views `touched` reaches, dropping topics
    /// nobody listens to any more.
    fn publish(&mut self, touched: &Touched) {
        let mut services = touched.services.clone();
        if !touched.server_namespaces.is_empty() {
            services.extend(
                self.endpoint_topics
                    .groups()
                    .filter(|s| touched.server_namespaces.contains(&s.namespace))
                    .cloned(),
            );
        }
        let mut topics = std::mem::take(&mut self.endpoint_topics);
        for service in &services {
            topics.republish(service, |(port, hostname)| {
                let key = EndpointsKey {
                    service: service.clone(),
                    port: *port,
                    hostname: hostname.clone(),
                };
                EndpointsView::compute(self, &key)
            });
        }
        self.endpoint_topics = topics;

        let mut topics = std::mem::take(&mut self.profile_topics);
        for service in &touched.services {
            topics.republish(service, |key| ServiceProfileView::compute(self, key));
        }
        self.profile_topics = topics;

        let mut topics = std::mem::take(&mut self.endpoint_profile_topics);
        let ips: Vec<IpAddr> = if touched.all_ips {
            topics.groups().copied().collect()
        } else {
            touched.ips.iter().copied().collect()
        };
        for ip in ips {
            topics.republish_from(&ip, |port, current| {
                let key = EndpointProfileKey { ip, port: *port };
                EndpointProfileView::compute(self, &key, Some(current))
            });
        }
        self.endpoint_profile_topics = topics;
    }

    // --- Services ---

    fn apply_service(&mut self, svc: &Arc<ServiceInfo>, touched: &mut Touched) {
        let key = svc.object_ref();
        if self.services.get(&key).is_some_and(|old| old == svc) {
            return;
        }
        self.delete_service(&key, &mut Touched::default());
        for ip in &svc.cluster_ips {
            // The API server never allocates one cluster IP twice, but offline state (or a
            // manual `clusterIP`) can: say which Service an address target then resolves to.
            if let Some(other) = self
                .services_by_ip
                .get(ip)
                .and_then(|keys| keys.iter().find(|k| **k != key))
            {
                tracing::warn!(
                    %ip,
                    service = %format_args!("{}/{}", key.namespace, key.name),
                    other = %format_args!("{}/{}", other.namespace, other.name),
                    "Services share a cluster IP: GetProfile refuses the address \
                     (FailedPrecondition), OutboundPolicies resolves it to the first by namespace/name"
                );
            }
            index_insert(&mut self.services_by_ip, *ip, &key);
        }
        if svc.selector.is_some() {
            index_insert(
                &mut self.selector_services_by_namespace,
                svc.namespace.clone(),
                &key,
            );
        }
        if self.tracks_external_slices() {
            touched.external_slice_services.insert(key.clone());
        }
        self.services.insert(key.clone(), svc.clone());
        touched.services.insert(key);
    }

    fn delete_service(&mut self, key: &ObjectRef, touched: &mut Touched) {
        if let Some(old) = self.services.remove(key) {
            for ip in &old.cluster_ips {
                index_remove(&mut self.services_by_ip, ip, key);
            }
            index_remove(
                &mut self.selector_services_by_namespace,
                &old.namespace,
                key,
            );
            if self.tracks_external_slices() {
                touched.external_slice_services.insert(key.clone());
            }
            touched.services.insert(key.clone());
        }
    }

    fn tracks_external_slices(&self) -> bool {
        !matches!(self.external_slices, ExternalSlices::Off)
    }

    // --- EndpointSlices ---

    /// Stores a slice the source listed; one with the name of a computed slice is left out.
    fn apply_listed_slice(&mut self, slice: &Arc<SliceInfo>, touched: &mut Touched) {
        let key = slice_key(slice);
        if self.computed_slice_keys.contains(&key) {
            tracing::warn!(slice = %format!("{}/{}", key.namespace, key.name), "ignoring a listed EndpointSlice that has the name of a computed one");
            return;
        }
        self.apply_slice(slice, touched);
    }

    /// Deletes a slice the source no longer lists; never a computed one.
    fn delete_listed_slice(&mut self, key: &ObjectRef, touched: &mut Touched) {
        if !self.computed_slice_keys.contains(key) {
            self.delete_slice(key, touched);
        }
    }

    fn apply_slice(&mut self, slice: &Arc<SliceInfo>, touched: &mut Touched) {
        let key = slice_key(slice);
        if self.slices.get(&key).is_some_and(|old| old == slice) {
            return;
        }
        self.delete_slice(&key, touched);
        if let Some(svc) = slice.service_ref() {
            index_insert(&mut self.slices_by_service, svc.clone(), &key);
            // The controller rewrites a slice of its own that someone else changed.
            if slice.managed_by_external_workloads
                && matches!(self.external_slices, ExternalSlices::Queued { .. })
            {
                touched.external_slice_services.insert(svc.clone());
            }
            touched.services.insert(svc);
        }
        for pod in slice.target_refs("Pod") {
            index_insert(&mut self.slices_by_pod, pod, &key);
        }
        for ew in slice.target_refs("ExternalWorkload") {
            index_insert(&mut self.slices_by_external_workload, ew, &key);
        }
        self.slices.insert(key, slice.clone());
    }

    fn delete_slice(&mut self, key: &ObjectRef, touched: &mut Touched) {
        let Some(old) = self.slices.remove(key) else {
            return;
        };
        if let Some(svc) = old.service_ref() {
            index_remove(&mut self.slices_by_service, &svc, key);
            if old.managed_by_external_workloads
                && matches!(self.external_slices, ExternalSlices::Queued { .. })
            {
                touched.external_slice_services.insert(svc.clone());
            }
            touched.services.insert(svc);
        }
        for pod in old.target_refs("Pod") {
            index_remove(&mut self.slices_by_pod, &pod, key);
        }
        for ew in old.target_refs("ExternalWorkload") {
            index_remove(&mut self.slices_by_external_workload, &ew, key);
        }
    }

    // --- Pods ---

    fn apply_pod(&mut self, pod: &Arc<PodInfo>, touched: &mut Touched) {
        let key = pod.object_ref();
        if self.pods.get(&key).is_some_and(|old| old == pod) {
            return;
        }
        // Decision 3: a pod change reaches the services whose slices point at it right away.
        self.delete_pod(&key, touched);
        if !pod.host_network {
            for ip in &pod.ips {
                index_insert(&mut self.pods_by_ip, *ip, &key);
            }
        }
        for host_ip in &pod.host_ips {
            for port in pod.container_ports.iter().filter_map(|p| p.host_port) {
                index_insert(&mut self.pods_by_host_port, (*host_ip, port), &key);
            }
        }
        // A pod that shows up after the slice naming it must still reach that slice's service.
        self.touch_slice_services(self.slices_by_pod.get(&key), touched);
        touched
            .ips
            .extend(pod.ips.iter().chain(&pod.host_ips).copied());
        self.pods.insert(key, pod.clone());
    }

    fn delete_pod(&mut self, key: &ObjectRef, touched: &mut Touched) {
        let Some(old) = self.pods.remove(key) else {
            return;
        };
        for ip in &old.ips {
            index_remove(&mut self.pods_by_ip, ip, key);
        }
        touched
            .ips
            .extend(old.ips.iter().chain(&old.host_ips).copied());
        for host_ip in &old.host_ips {
            for port in old.container_ports.iter().filter_map(|p| p.host_port) {
                index_remove(&mut self.pods_by_host_port, &(*host_ip, port), key);
            }
        }
        self.touch_slice_services(self.slices_by_pod.get(key), touched);
    }

    // --- Servers ---

    fn apply_server(&mut self, srv: &Arc<ServerInfo>, touched: &mut Touched) {
        let key = srv.object_ref();
        if self.servers.get(&key).is_some_and(|old| old == srv) {
            return;
        }
        self.delete_server(&key, touched);
        index_insert(&mut self.servers_by_namespace, srv.namespace.clone(), &key);
        touched.server_namespaces.insert(srv.namespace.clone());
        touched.all_ips = true;
        self.servers.insert(key, srv.clone());
    }

    fn delete_server(&mut self, key: &ObjectRef, touched: &mut Touched) {
        if self.servers.remove(key).is_some() {
            index_remove(&mut self.servers_by_namespace, &key.namespace, key);
            touched.server_namespaces.insert(key.namespace.clone());
            touched.all_ips = true;
        }
    }

    // --- ExternalWorkloads ---

    fn apply_external_workload(&mut self, ew: &Arc<ExternalWorkloadInfo>, touched: &mut Touched) {
        let key = ew.object_ref();
        if self
            .external_workloads
            .get(&key)
            .is_some_and(|old| old == ew)
        {
            return;
        }
        self.delete_external_workload(&key, touched);
        for ip in &ew.ips {
            for port in &ew.ports {
                index_insert(&mut self.external_workloads_by_addr, (*ip, port.port), &key);
            }
        }
        index_insert(
            &mut self.external_workloads_by_namespace,
            ew.namespace.clone(),
            &key,
        );
        if self.tracks_external_slices() {
            let services = self.services_selecting(ew).cloned().collect::<Vec<_>>();
            touched.external_slice_services.extend(services);
        }
        self.touch_slice_services(self.slices_by_external_workload.get(&key), touched);
        touched.ips.extend(ew.ips.iter().copied());
        self.external_workloads.insert(key, ew.clone());
    }

    fn delete_external_workload(&mut self, key: &ObjectRef, touched: &mut Touched) {
        let Some(old) = self.external_workloads.remove(key) else {
            return;
        };
        for ip in &old.ips {
            for port in &old.ports {
                index_remove(&mut self.external_workloads_by_addr, &(*ip, port.port), key);
            }
        }
        index_remove(
            &mut self.external_workloads_by_namespace,
            &old.namespace,
            key,
        );
        if self.tracks_external_slices() {
            let services = self.services_selecting(&old).cloned().collect::<Vec<_>>();
            touched.external_slice_services.extend(services);
        }
        touched.ips.extend(old.ips.iter().copied());
        self.touch_slice_services(self.slices_by_external_workload.get(key), touched);
    }

    // --- ServiceProfiles ---

    fn apply_profile(&mut self, profile: &Arc<ProfileInfo>, touched: &mut Touched) {
        let key = profile_key(profile);
        if self.profiles.get(&key).is_some_and(|old| old == profile) {
            return;
        }
        self.profiles.insert(key.clone(), profile.clone());
        touched
            .services
            .extend(profiles::profile_service(&key.name));
    }

    fn delete_profile(&mut self, key: &ObjectRef, touched: &mut Touched) {
        if self.profiles.remove(key).is_some() {
            touched
                .services
                .extend(profiles::profile_service(&key.name));
        }
    }
}

fn slice_key(slice: &SliceInfo) -> ObjectRef {
    ObjectRef {
        namespace: slice.namespace.clone(),
        name: slice.name.clone(),
    }
}

fn profile_key(profile: &ProfileInfo) -> ObjectRef {
    ObjectRef {
        namespace: profile.namespace.clone(),
        name: profile.name.clone(),
    }
}

fn owner_key(owner: &OwnerInfo) -> ObjectRef {
    ObjectRef {
        namespace: owner.namespace.clone(),
        name: owner.name.clone(),
    }
}

// === Sinks: how each kind's events reach the stores ===

impl Sink<Service> for DiscoveryIndex {
    fn apply(&self, events: &[Event<Arc<ServiceInfo>>]) -> usize {
        self.update(|d, touched| {
            apply_event(
                d,
                events,
                touched,
                ServiceInfo::object_ref,
                |d| d.services.keys().cloned().collect(),
                Discovery::apply_service,
                Discovery::delete_service,
            );
            d.services.len()
        })
    }
}

impl Sink<EndpointSlice> for DiscoveryIndex {
    fn apply(&self, events: &[Event<Arc<SliceInfo>>]) -> usize {
        self.update(|d, touched| {
            apply_event(
                d,
                events,
                touched,
                slice_key,
                |d| {
                    d.slices
                        .keys()
                        .filter(|k| !d.computed_slice_keys.contains(*k))
                        .cloned()
                        .collect()
                },
                Discovery::apply_listed_slice,
                Discovery::delete_listed_slice,
            );
            d.slices.len()
        })
    }
}

impl Sink<Pod> for DiscoveryIndex {
    fn apply(&self, events: &[Event<Arc<PodInfo>>]) -> usize {
        self.update(|d, touched| {
            apply_event(
                d,
                events,
                touched,
                PodInfo::object_ref,
                |d| d.pods.keys().cloned().collect(),
                Discovery::apply_pod,
                Discovery::delete_pod,
            );
            d.pods.len()
        })
    }
}

impl Sink<Node> for DiscoveryIndex {
    fn apply(&self, events: &[Event<Arc<NodeInfo>>]) -> usize {
        // A node's zone is read when a stream starts: no view to republish.
        let mut state = self.state.lock();
        apply_event(
            &mut *state,
            events,
            &mut (),
            |n: &NodeInfo| ObjectRef {
                namespace: String::new(),
                name: n.name.clone(),
            },
            |d| {
                d.nodes
                    .keys()
                    .map(|name| ObjectRef {
                        namespace: String::new(),
                        name: name.clone(),
                    })
                    .collect()
            },
            |d, node, _| {
                d.nodes.insert(node.name.clone(), node.clone());
            },
            |d, key, _| {
                d.nodes.remove(&key.name);
            },
        );
        state.nodes.len()
    }
}

impl Sink<ReplicaSet> for DiscoveryIndex {
    fn apply(&self, events: &[Event<Arc<OwnerInfo>>]) -> usize {
        // Owners are read when an endpoint view is computed: no view to republish.
        let mut state = self.state.lock();
        apply_event(
            &mut *state,
            events,
            &mut (),
            owner_key,
            |d| d.replica_sets.keys().cloned().collect(),
            |d, rs, _| {
                d.replica_sets.insert(owner_key(rs), rs.clone());
            },
            |d, key, _| {
                d.replica_sets.remove(key);
            },
        );
        state.replica_sets.len()
    }
}

impl Sink<Job> for DiscoveryIndex {
    fn apply(&self, events: &[Event<Arc<OwnerInfo>>]) -> usize {
        let mut state = self.state.lock();
        apply_event(
            &mut *state,
            events,
            &mut (),
            owner_key,
            |d| d.jobs.keys().cloned().collect(),
            |d, job, _| {
                d.jobs.insert(owner_key(job), job.clone());
            },
            |d, key, _| {
                d.jobs.remove(key);
            },
        );
        state.jobs.len()
    }
}

impl Sink<Server> for DiscoveryIndex {
    fn apply(&self, events: &[Event<Arc<ServerInfo>>]) -> usize {
        self.update(|d, touched| {
            apply_event(
                d,
                events,
                touched,
                ServerInfo::object_ref,
                |d| d.servers.keys().cloned().collect(),
                Discovery::apply_server,
                Discovery::delete_server,
            );
            d.servers.len()
        })
    }
}

impl Sink<ExternalWorkload> for DiscoveryIndex {
    fn apply(&self, events: &[Event<Arc<ExternalWorkloadInfo>>]) -> usize {
        self.update(|d, touched| {
            apply_event(
                d,
                events,
                touched,
                ExternalWorkloadInfo::object_ref,
                |d| d.external_workloads.keys().cloned().collect(),
                Discovery::apply_external_workload,
                Discovery::delete_external_workload,
            );
            d.external_workloads.len()
        })
    }
}

impl Sink<ServiceProfile> for DiscoveryIndex {
    fn apply(&self, events: &[Event<Arc<ProfileInfo>>]) -> usize {
        self.update(|d, touched| {
            apply_event(
                d,
                events,
                touched,
                profile_key,
                |d| d.profiles.keys().cloned().collect(),
                Discovery::apply_profile,
                Discovery::delete_profile,
            );
            d.profiles.len()
        })
    }
}
