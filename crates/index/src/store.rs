//! The stores: the latest domain form of every watched object, with secondary indexes, owned by
//! one [`Index`] and updated under its lock by one task per kind (DESIGN.md "Data flow" 2).
//!
//! An update costs O(the changed object) plus recomputing the subscribed views it touches; the
//! cluster is never rescanned.

use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::ReplicaSet,
    batch::v1::Job,
    core::v1::{Node, Pod, Service},
    discovery::v1::EndpointSlice,
};
use parking_lot::Mutex;
use std::{
    collections::{BTreeSet, HashMap, HashSet},
    net::{IpAddr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};
use tokio::sync::watch;

use linkerd_k8s_api::{ExternalWorkload, Server, ServiceProfile};

use crate::{
    endpoints::{EndpointsKey, EndpointsView},
    inbound::{InboundConfig, InboundServer, PolicyStores, UnknownWorkload, WorkloadRef},
    metrics::IndexMetrics,
    model::{
        self, ExternalWorkloadInfo, InvalidObject, NodeInfo, ObjectRef, OwnerRef, PodInfo,
        ServerInfo, ServiceInfo, SliceInfo,
    },
    outbound::{
        OutboundConfig, OutboundError, OutboundLookup, OutboundPolicy, OutboundTarget,
        ResolvedAddr, egress::EgressNetworkInfo, routes::OutboundRoutes,
    },
    profile::ProfileInfo,
    profiles::{
        self, AddressConflict, EndpointProfileKey, EndpointProfileView, ServiceProfileKey,
        ServiceProfileView,
    },
    source::{Event, Source, Watched},
    status::{StatusPatch, StatusRoutes},
    topic::Topics,
};

/// The shared index: stores, their indexes, and the topics subscribed to them.
///
/// Cheap to clone; every clone is the same index.
#[derive(Clone)]
pub struct Index {
    inner: Arc<Shared>,
}

struct Shared {
    cluster: Mutex<Cluster>,
    metrics: IndexMetrics,
    ready: watch::Sender<bool>,
    /// Bumped whenever an input of the route statuses changes (spec/policy.md §7.1).
    status_changes: watch::Sender<u64>,
    next_topic_id: AtomicU64,
}

/// The stores. Only the index's own tasks mutate it, under the lock; nothing outside this crate
/// can see inside it.
#[derive(Default)]
pub struct Cluster {
    pub(crate) services: HashMap<ObjectRef, Arc<ServiceInfo>>,
    pub(crate) services_by_ip: HashMap<IpAddr, BTreeSet<ObjectRef>>,
    pub(crate) slices: HashMap<ObjectRef, Arc<SliceInfo>>,
    /// Service → its slices.
    pub(crate) slices_by_service: HashMap<ObjectRef, BTreeSet<ObjectRef>>,
    /// Pod → the slices whose endpoints point at it, so a pod change reaches its services.
    pub(crate) slices_by_pod: HashMap<ObjectRef, BTreeSet<ObjectRef>>,
    pub(crate) pods: HashMap<ObjectRef, Arc<PodInfo>>,
    pub(crate) pods_by_ip: HashMap<IpAddr, BTreeSet<ObjectRef>>,
    pub(crate) pods_by_host_port: HashMap<(IpAddr, u16), BTreeSet<ObjectRef>>,
    pub(crate) nodes: HashMap<String, NodeInfo>,
    pub(crate) replica_sets: HashMap<ObjectRef, Option<OwnerRef>>,
    pub(crate) jobs: HashMap<ObjectRef, Option<OwnerRef>>,
    pub(crate) servers: HashMap<ObjectRef, Arc<ServerInfo>>,
    /// Namespace → its Servers (a Server only reaches workloads of its own namespace).
    pub(crate) servers_by_namespace: HashMap<String, BTreeSet<ObjectRef>>,
    /// Namespace → its Servers, oldest first then by name: the order in which they claim ports
    /// (spec/policy.md §4.3), sorted once per change rather than once per lookup.
    pub(crate) servers_by_age: HashMap<String, Vec<Arc<ServerInfo>>>,
    pub(crate) external_workloads: HashMap<ObjectRef, Arc<ExternalWorkloadInfo>>,
    /// `ip:port` for every workload IP × declared port (spec §B.3).
    pub(crate) external_workloads_by_addr: HashMap<(IpAddr, u16), BTreeSet<ObjectRef>>,
    /// ExternalWorkload → the slices whose endpoints point at it.
    pub(crate) slices_by_external_workload: HashMap<ObjectRef, BTreeSet<ObjectRef>>,
    /// ServiceProfiles by their own namespace and name (`<svc>.<ns>.svc.<domain>`).
    pub(crate) profiles: HashMap<ObjectRef, Arc<ProfileInfo>>,
    endpoint_topics: Topics<ObjectRef, (u16, Option<String>), EndpointsView>,
    profile_topics: Topics<ObjectRef, ServiceProfileKey, ServiceProfileView>,
    endpoint_profile_topics: Topics<IpAddr, u16, EndpointProfileView>,
    /// The policy kinds (ServerAuthorization, AuthorizationPolicy, ...), for inbound policy.
    pub(crate) policy: PolicyStores,
    /// Set by the policy controller; `None` in the destination.
    pub(crate) inbound_config: Option<InboundConfig>,
    inbound_topics: Topics<WorkloadRef, u16, InboundServer>,
    /// HTTPRoutes, GRPCRoutes, TLSRoutes and TCPRoutes with Service parents, for outbound
    /// policy.
    pub(crate) outbound_routes: OutboundRoutes,
    /// Set by the policy controller; `None` in the destination.
    pub(crate) outbound_config: Option<OutboundConfig>,
    /// Every route's status inputs (spec/policy.md §7), whether or not it converts.
    pub(crate) status_routes: StatusRoutes,
    /// Every HTTPLocalRateLimitPolicy's status inputs (spec/policy.md §7.3).
    pub(crate) status_rate_limits: HashMap<ObjectRef, Arc<crate::status::StatusRateLimit>>,
    /// Outbound policies by Service, then (port, client namespace).
    outbound_topics: Topics<ObjectRef, (u16, String), OutboundPolicy>,
    /// EgressNetworks (spec/policy.md §5.2), and their names by namespace.
    pub(crate) egress_networks: HashMap<ObjectRef, Arc<EgressNetworkInfo>>,
    pub(crate) egress_by_namespace: HashMap<String, BTreeSet<ObjectRef>>,
    /// Outbound policies of addresses in EgressNetworks, by EgressNetwork, then (original
    /// destination, client namespace).
    egress_topics: Topics<ObjectRef, (SocketAddr, String), OutboundPolicy>,
    /// External fallback policies by address; all dropped when EgressNetworks change (§5.8).
    fallback_topics: Topics<(), SocketAddr, OutboundPolicy>,
    /// Objects skipped as invalid, with the reason logged, so a re-applied one is not logged
    /// again.
    invalid: HashMap<(&'static str, ObjectRef), String>,
    /// Kinds whose initial list has been applied.
    synced: HashSet<&'static str>,
    /// Kinds that must be synced before the index is ready.
    required: HashSet<&'static str>,
}

/// What a batch of changes touched: the subscribed views to recompute.
#[derive(Debug, Default)]
pub struct Touched {
    /// Services whose endpoint (and profile) views may have changed.
    services: BTreeSet<ObjectRef>,
    /// Namespaces in which a Server changed: every service view there is recomputed.
    server_namespaces: BTreeSet<String>,
    /// IPs whose endpoint profiles may have changed (a pod's or ExternalWorkload's).
    ips: BTreeSet<IpAddr>,
    /// A Server changed: every endpoint profile is recomputed.
    all_ips: bool,
    /// Namespaces whose inbound servers must be recomputed (§4.3).
    pub(crate) inbound_namespaces: BTreeSet<String>,
    /// An authentication changed: every inbound server is recomputed.
    pub(crate) inbound_all: bool,
    /// Services whose outbound policies must be recomputed (a route naming them as parent
    /// changed, or their annotations or ports did).
    pub(crate) outbound_services: BTreeSet<ObjectRef>,
    /// A Service appeared or vanished: every outbound policy is recomputed, since any route
    /// may name it as a backend (§5.4 `exists`).
    pub(crate) outbound_all: bool,
    /// EgressNetworks whose outbound policies must be recomputed (a route naming them as
    /// parent changed, or their annotations did).
    pub(crate) outbound_egress_networks: BTreeSet<ObjectRef>,
    /// Namespaces in which an EgressNetwork changed: the egress watches of parents or clients
    /// there, and every fallback watch, end (§5.8).
    pub(crate) egress_namespaces: BTreeSet<String>,
    /// A route's status inputs, or a Service, changed: route statuses are recomputed.
    pub(crate) status: bool,
}

impl Touched {
    fn insert(&mut self, service: ObjectRef) {
        self.services.insert(service);
    }
}

/// A kind the index stores.
pub trait IndexedKind: Watched {
    /// The kind's name in logs and metrics.
    const KIND: &'static str;
    /// The name of its cache-size gauge.
    const CACHE_METRIC: &'static str;

    #[doc(hidden)]
    fn apply(cluster: &mut Cluster, obj: &Self, touched: &mut Touched)
    -> Result<(), InvalidObject>;
    #[doc(hidden)]
    fn delete(cluster: &mut Cluster, key: &ObjectRef, touched: &mut Touched);
    #[doc(hidden)]
    fn keys(cluster: &Cluster) -> Vec<ObjectRef>;
}

// === impl Index ===

impl Index {
    /// An empty index; it becomes ready once every kind started with [`Index::spawn_watches`]
    /// (or marked required with [`Index::require`]) has applied its initial list.
    pub fn new(metrics: IndexMetrics) -> Self {
        let (ready, _) = watch::channel(false);
        Self {
            inner: Arc::new(Shared {
                cluster: Mutex::new(Cluster::default()),
                metrics,
                ready,
                status_changes: watch::channel(0).0,
                next_topic_id: AtomicU64::new(0),
            }),
        }
    }

    /// An empty index that also serves inbound policy with `config` (the policy controller).
    pub fn with_inbound(metrics: IndexMetrics, config: InboundConfig) -> Self {
        let index = Self::new(metrics);
        index.inner.cluster.lock().inbound_config = Some(config);
        index
    }

    /// An empty index that serves inbound and outbound policy (the policy controller).
    pub fn with_policy(
        metrics: IndexMetrics,
        inbound: InboundConfig,
        outbound: OutboundConfig,
    ) -> Self {
        let index = Self::with_inbound(metrics, inbound);
        index.inner.cluster.lock().outbound_config = Some(outbound);
        index
    }

    /// Starts one task per kind discovery needs (Services, EndpointSlices, Pods, Nodes,
    /// ReplicaSets, Jobs, Servers, ExternalWorkloads, ServiceProfiles), each applying `source`'s events to the index. The tasks run until the
    /// source's streams end.
    pub fn spawn_watches<S: Source>(&self, source: &S) -> Vec<tokio::task::JoinHandle<()>> {
        vec![
            self.spawn_watch::<Service, _>(source),
            self.spawn_watch::<EndpointSlice, _>(source),
            self.spawn_watch::<Pod, _>(source),
            self.spawn_watch::<Node, _>(source),
            self.spawn_watch::<ReplicaSet, _>(source),
            self.spawn_watch::<Job, _>(source),
            self.spawn_watch::<Server, _>(source),
            self.spawn_watch::<ExternalWorkload, _>(source),
            self.spawn_watch::<ServiceProfile, _>(source),
        ]
    }

    /// Starts one task per kind inbound policy needs: Pods, ExternalWorkloads, Servers,
    /// ServerAuthorizations, AuthorizationPolicies, MeshTLS and Network authentications,
    /// HTTPLocalRateLimitPolicies, and the route kinds (policy and Gateway API HTTPRoutes,
    /// GRPCRoutes; TLSRoutes and TCPRoutes for outbound only), and Services and EgressNetworks
    /// for outbound policy (spec/policy.md §1.5). Route kinds whose CRD is missing are served
    /// empty; with the `kube` source the Gateway API kinds follow their CRDs (installed,
    /// upgraded, removed) without a restart.
    pub fn spawn_policy_watches<S: Source>(&self, source: &S) -> Vec<tokio::task::JoinHandle<()>> {
        use linkerd_k8s_api::{
            AuthorizationPolicy, HttpLocalRateLimitPolicy, HttpRoute, MeshTlsAuthentication,
            NetworkAuthentication, ServerAuthorization,
            gateway_api::{
                experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute},
                grpcroutes::GrpcRoute,
                httproutes::HttpRoute as GatewayHttpRoute,
            },
        };
        vec![
            self.spawn_watch::<Pod, _>(source),
            self.spawn_watch::<Service, _>(source),
            self.spawn_watch::<ExternalWorkload, _>(source),
            self.spawn_watch::<Server, _>(source),
            self.spawn_watch::<ServerAuthorization, _>(source),
            self.spawn_watch::<AuthorizationPolicy, _>(source),
            self.spawn_watch::<MeshTlsAuthentication, _>(source),
            self.spawn_watch::<NetworkAuthentication, _>(source),
            self.spawn_watch::<HttpLocalRateLimitPolicy, _>(source),
            self.spawn_watch::<HttpRoute, _>(source),
            self.spawn_watch::<GatewayHttpRoute, _>(source),
            self.spawn_watch::<GrpcRoute, _>(source),
            self.spawn_watch::<TlsRoute, _>(source),
            self.spawn_watch::<TcpRoute, _>(source),
            self.spawn_watch::<linkerd_k8s_api::EgressNetwork, _>(source),
        ]
    }

    /// Starts the task applying `source`'s events of kind `K`; the index is not ready until its
    /// initial list is applied.
    pub fn spawn_watch<K: IndexedKind, S: Source>(
        &self,
        source: &S,
    ) -> tokio::task::JoinHandle<()> {
        self.require::<K>();
        let mut events = source.events::<K>();
        let index = self.clone();
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                index.apply(event);
            }
            tracing::debug!(kind = K::KIND, "watch ended");
        })
    }

    /// Marks kind `K` as required for readiness.
    pub fn require<K: IndexedKind>(&self) {
        let mut cluster = self.inner.cluster.lock();
        cluster.required.insert(K::KIND);
        self.inner.ready.send_replace(false);
    }

    /// Whether every required kind has applied its initial list; `/ready` reports this.
    pub fn ready(&self) -> watch::Receiver<bool> {
        self.inner.ready.subscribe()
    }

    /// Applies one event, then republishes every subscribed view it changes.
    ///
    /// Objects that cannot be indexed are logged with their namespace/name, counted in
    /// `index_invalid_objects_total{kind}`, and skipped; nothing else is affected.
    pub fn apply<K: IndexedKind>(&self, event: Event<K>) {
        let mut cluster = self.inner.cluster.lock();
        let mut touched = Touched::default();
        match event {
            Event::Apply(obj) => self.apply_one(&mut cluster, &obj, &mut touched),
            Event::Delete(obj) => {
                if let Some(key) = object_ref(&obj) {
                    K::delete(&mut cluster, &key, &mut touched);
                    cluster.invalid.remove(&(K::KIND, key));
                }
            }
            Event::Reset(objs) => {
                let listed: HashSet<ObjectRef> = objs.iter().filter_map(object_ref).collect();
                for key in K::keys(&cluster) {
                    if !listed.contains(&key) {
                        K::delete(&mut cluster, &key, &mut touched);
                    }
                }
                cluster
                    .invalid
                    .retain(|(kind, key), _| *kind != K::KIND || listed.contains(key));
                for obj in &objs {
                    self.apply_one(&mut cluster, obj, &mut touched);
                }
                if cluster.synced.insert(K::KIND) {
                    tracing::debug!(kind = K::KIND, objects = objs.len(), "initial list applied");
                }
            }
        }
        cluster.sort_servers(&touched.server_namespaces);
        cluster.publish(&touched);
        if touched.status || !touched.server_namespaces.is_empty() {
            self.inner
                .status_changes
                .send_modify(|n| *n = n.wrapping_add(1));
        }
        self.inner
            .metrics
            .set_cache_size(K::CACHE_METRIC, K::keys(&cluster).len());
        let ready = cluster.required.iter().all(|k| cluster.synced.contains(k));
        self.inner
            .ready
            .send_if_modified(|r| std::mem::replace(r, ready) != ready);
    }

    /// Applies one object. An invalid one is logged and counted once per distinct problem:
    /// relists and offline reloads re-apply it unchanged without repeating the log line.
    fn apply_one<K: IndexedKind>(&self, cluster: &mut Cluster, obj: &K, touched: &mut Touched) {
        let key = object_ref(obj).map(|k| (K::KIND, k));
        match K::apply(cluster, obj, touched) {
            Ok(()) => {
                if let Some(key) = key {
                    cluster.invalid.remove(&key);
                }
            }
            Err(error) => {
                let reason = error.to_string();
                let repeated = key
                    .map(|key| cluster.invalid.insert(key, reason.clone()))
                    .is_some_and(|old| old.as_deref() == Some(reason.as_str()));
                if !repeated {
                    tracing::warn!(error = %reason, "skipping object");
                    self.inner.metrics.invalid_object(K::KIND);
                }
            }
        }
    }

    /// Changes whenever an input of the route statuses does (a route, Server or Service);
    /// the value is a counter with no meaning of its own. For the status controller (§7.1).
    pub fn status_changes(&self) -> watch::Receiver<u64> {
        self.inner.status_changes.subscribe()
    }

    /// A patch for every indexed route whose desired `status.parents` (spec/policy.md §7.2,
    /// condition times `now`) differs from the status it carries, in (group, kind, namespace,
    /// name) order; then the same for HTTPLocalRateLimitPolicies (§7.3), by namespace/name.
    pub fn status_patches(
        &self,
        now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    ) -> Vec<StatusPatch> {
        self.inner.cluster.lock().status_patches(now)
    }

    /// Subscribes to the endpoints of `key`. The receiver's current value is the view now;
    /// it changes whenever a different view is computed. The topic is dropped when the last
    /// receiver is.
    pub fn endpoints(&self, key: EndpointsKey) -> watch::Receiver<Arc<EndpointsView>> {
        let sub_key = (key.port, key.hostname.clone());
        self.subscribe(
            |c| &mut c.endpoint_topics,
            key.service.clone(),
            sub_key,
            |c| EndpointsView::compute(c, &key),
        )
    }

    /// Subscribes to the service profile of `key` (spec §D.2): the Service and the
    /// ServiceProfile that applies to the client. Dropped with its last receiver.
    pub fn service_profile(
        &self,
        key: ServiceProfileKey,
    ) -> watch::Receiver<Arc<ServiceProfileView>> {
        self.subscribe(
            |c| &mut c.profile_topics,
            key.service.clone(),
            key.clone(),
            |c| ServiceProfileView::compute(c, &key),
        )
    }

    /// Subscribes to the endpoint profile of `ip:port` (spec §D.5). Errors when several pods
    /// or ExternalWorkloads claim the address now (`FailedPrecondition` upstream).
    pub fn endpoint_profile(
        &self,
        key: EndpointProfileKey,
    ) -> Result<watch::Receiver<Arc<EndpointProfileView>>, AddressConflict> {
        profiles::address_conflict(&self.inner.cluster.lock(), &key)?;
        Ok(self.subscribe(
            |c| &mut c.endpoint_profile_topics,
            key.ip,
            key.port,
            |c| EndpointProfileView::compute(c, &key),
        ))
    }

    /// The pod behind the endpoint with `hostname` in the Service's slices, whatever its
    /// readiness (a StatefulSet pod's DNS name, spec §D.5). `None` when no endpoint has that
    /// hostname or it points at no known pod.
    pub fn pod_by_hostname(&self, service: &ObjectRef, hostname: &str) -> Option<Arc<PodInfo>> {
        let cluster = self.inner.cluster.lock();
        cluster
            .service_slices(service)
            .flat_map(|s| s.endpoints.iter())
            .filter(|ep| ep.hostname.as_deref() == Some(hostname))
            .filter_map(|ep| ep.target.as_ref().filter(|t| t.kind == "Pod"))
            .find_map(|t| {
                cluster
                    .pods
                    .get(&ObjectRef {
                        namespace: t.namespace.clone(),
                        name: t.name.clone(),
                    })
                    .cloned()
            })
    }

    /// A receiver of topic `(group, key)` in the topics `select` picks, creating the topic with
    /// `compute` if needed. A task drops the topic when its last receiver goes
    /// (linkerd2-proxy's "tasks end with their clients").
    fn subscribe<G, K, V>(
        &self,
        select: fn(&mut Cluster) -> &mut Topics<G, K, V>,
        group: G,
        key: K,
        compute: impl FnOnce(&Cluster) -> V,
    ) -> watch::Receiver<Arc<V>>
    where
        G: std::hash::Hash + Eq + Clone + Send + 'static,
        K: std::hash::Hash + Eq + Clone + Send + 'static,
        V: PartialEq + Send + Sync + 'static,
    {
        let mut cluster = self.inner.cluster.lock();
        if let Some(rx) = select(&mut cluster).get(&group, &key) {
            return rx;
        }
        let view = compute(&cluster);
        let id = self.inner.next_topic_id.fetch_add(1, Ordering::Relaxed);
        let (rx, mut watch) = select(&mut cluster).insert(group.clone(), key.clone(), id, view);
        drop(cluster);
        let index = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = watch.closed.closed() => {}
                    // Removed by the index (its workload was deleted): let go of the sender so
                    // the receivers see the channel close.
                    _ = &mut watch.dropped => return,
                }
                let mut cluster = index.inner.cluster.lock();
                if select(&mut cluster).drop_if_idle(&group, &key, id) {
                    return;
                }
            }
        });
        rx
    }

    /// Subscribes to the inbound policy of `workload`'s `port` (spec/policy.md §4.9). The
    /// receiver closes when the workload is deleted. Errors when the workload is not indexed
    /// (unknown, or an unmeshed pod) or the index was not built with [`Index::with_inbound`].
    pub fn inbound_server(
        &self,
        workload: WorkloadRef,
        port: u16,
    ) -> Result<watch::Receiver<Arc<InboundServer>>, UnknownWorkload> {
        let initial = {
            let cluster = self.inner.cluster.lock();
            let config = cluster.inbound_config.as_ref().ok_or(UnknownWorkload)?;
            cluster
                .inbound_server(config, &workload, port)
                .ok_or(UnknownWorkload)?
        };
        Ok(self.subscribe(
            |c| &mut c.inbound_topics,
            workload,
            port,
            // Computed just above; recomputing under the same lock would give the same value.
            move |_| initial,
        ))
    }

    /// Subscribes to the outbound policy of `target` for clients in `source_namespace`
    /// (spec/policy.md §5.1, §5.8). A Service target (by name, or by a cluster IP with a
    /// declared port) yields a topic, created on demand whether or not the Service exists; a
    /// cluster IP with another port yields the fixed undefined-port policy. An address in an
    /// EgressNetwork (§5.2) yields that network's topic for the address, and another address
    /// outside the cluster networks the fallback's; both close when the EgressNetworks of the
    /// namespaces involved change (§5.8), so clients resolve again.
    ///
    /// Errors: [`OutboundError::NoSuchService`] for another address inside the cluster
    /// networks; [`OutboundError::NotServed`] when the index was not built with
    /// [`Index::with_policy`].
    pub fn outbound_policy(
        &self,
        target: OutboundTarget,
        source_namespace: &str,
    ) -> Result<OutboundLookup, OutboundError> {
        let (service, port) = {
            let cluster = self.inner.cluster.lock();
            let config = cluster
                .outbound_config
                .as_ref()
                .ok_or(OutboundError::NotServed)?;
            match target {
                OutboundTarget::Service { service, port } => (service, port),
                OutboundTarget::Addr(addr) => {
                    match cluster.resolve_outbound_addr(config, addr, source_namespace)? {
                        ResolvedAddr::Service(service, port) => (service, port),
                        ResolvedAddr::Fixed(fixed) => {
                            return Ok(OutboundLookup::Fixed(Arc::new(*fixed)));
                        }
                        ResolvedAddr::Fallback(addr) => {
                            drop(cluster);
                            return Ok(OutboundLookup::Watch(self.subscribe(
                                |c| &mut c.fallback_topics,
                                (),
                                addr,
                                move |_| OutboundPolicy::Fallback { original_dst: addr },
                            )));
                        }
                        ResolvedAddr::Egress {
                            network,
                            original_dst,
                        } => {
                            drop(cluster);
                            let namespace = source_namespace.to_string();
                            let key = (original_dst, namespace.clone());
                            let net = network.clone();
                            return Ok(OutboundLookup::Watch(self.subscribe(
                                |c| &mut c.egress_topics,
                                network,
                                key,
                                move |c| match &c.outbound_config {
                                    Some(config) => c.outbound_egress_policy(
                                        config,
                                        &net,
                                        original_dst,
                                        &namespace,
                                    ),
                                    None => OutboundPolicy::Fallback { original_dst },
                                },
                            )));
                        }
                    }
                }
            }
        };
        let key = (port, source_namespace.to_string());
        let svc = service.clone();
        let namespace = source_namespace.to_string();
        Ok(OutboundLookup::Watch(self.subscribe(
            |c| &mut c.outbound_topics,
            service,
            key,
            move |c| match &c.outbound_config {
                Some(config) => c.outbound_service_policy(config, &svc, port, &namespace),
                None => OutboundPolicy::UndefinedPort {
                    namespace: svc.namespace.clone(),
                    name: svc.name.clone(),
                    port,
                },
            },
        )))
    }

    /// The number of outbound policy topics alive (one per subscribed Service port and client
    /// namespace).
    pub fn outbound_topic_count(&self) -> usize {
        self.inner.cluster.lock().outbound_topics.len()
    }

    /// The number of egress and fallback policy topics alive (one per subscribed address and
    /// client namespace, one per fallback address).
    pub fn egress_topic_count(&self) -> usize {
        let cluster = self.inner.cluster.lock();
        cluster.egress_topics.len() + cluster.fallback_topics.len()
    }

    /// The number of endpoint topics alive (one per subscribed service port and hostname).
    pub fn endpoint_topic_count(&self) -> usize {
        self.inner.cluster.lock().endpoint_topics.len()
    }

    /// The number of profile topics alive (service profiles and endpoint profiles).
    pub fn profile_topic_count(&self) -> usize {
        let cluster = self.inner.cluster.lock();
        cluster.profile_topics.len() + cluster.endpoint_profile_topics.len()
    }

    /// The zone of a node (label `topology.kubernetes.io/zone`), if the node is known.
    pub fn node_zone(&self, node: &str) -> Option<String> {
        self.inner
            .cluster
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
        self.inner.cluster.lock().services.get(&key).cloned()
    }

    /// The Services whose cluster IPs include `ip`.
    pub fn services_by_cluster_ip(&self, ip: IpAddr) -> Vec<Arc<ServiceInfo>> {
        let cluster = self.inner.cluster.lock();
        cluster
            .services_by_ip
            .get(&ip)
            .into_iter()
            .flatten()
            .filter_map(|k| cluster.services.get(k).cloned())
            .collect()
    }

    /// The live pods (not terminating, not finished, not host-network) with pod IP `ip`.
    pub fn pods_by_ip(&self, ip: IpAddr) -> Vec<Arc<PodInfo>> {
        let cluster = self.inner.cluster.lock();
        cluster.live_pods(cluster.pods_by_ip.get(&ip))
    }

    /// The live pods declaring host port `port` on host IP `ip`.
    pub fn pods_by_host_port(&self, ip: IpAddr, port: u16) -> Vec<Arc<PodInfo>> {
        let cluster = self.inner.cluster.lock();
        cluster.live_pods(cluster.pods_by_host_port.get(&(ip, port)))
    }
}

// === impl Cluster ===

impl Cluster {
    /// The slices of a service, in name order.
    pub(crate) fn service_slices<'a>(
        &'a self,
        service: &ObjectRef,
    ) -> impl Iterator<Item = &'a SliceInfo> + 'a {
        self.slices_by_service
            .get(service)
            .into_iter()
            .flatten()
            .filter_map(|k| self.slices.get(k).map(|s| &**s))
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
            "ReplicaSet" => self.replica_sets.get(&parent).cloned().flatten(),
            "Job" => self.jobs.get(&parent).cloned().flatten(),
            _ => None,
        };
        grandparent.unwrap_or_else(|| owner.clone())
    }

    pub(crate) fn live_pods(&self, keys: Option<&BTreeSet<ObjectRef>>) -> Vec<Arc<PodInfo>> {
        keys.into_iter()
            .flatten()
            .filter_map(|k| self.pods.get(k))
            .filter(|p| p.is_live())
            .cloned()
            .collect()
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
            topics.republish(&ip, |port| {
                EndpointProfileView::compute(self, &EndpointProfileKey { ip, port: *port })
            });
        }
        self.endpoint_profile_topics = topics;

        if let Some(config) = self.inbound_config.clone()
            && (touched.inbound_all || !touched.inbound_namespaces.is_empty())
        {
            let mut topics = std::mem::take(&mut self.inbound_topics);
            let workloads: Vec<WorkloadRef> = topics
                .groups()
                .filter(|w| {
                    touched.inbound_all
                        || touched.inbound_namespaces.contains(match w {
                            WorkloadRef::Pod { namespace, .. }
                            | WorkloadRef::ExternalWorkload { namespace, .. } => namespace,
                        })
                })
                .cloned()
                .collect();
            for workload in workloads {
                if !self.has_inbound_workload(&workload) {
                    // Deleted: dropping its topics ends the streams watching it (§4.2).
                    topics.remove_group(&workload);
                    continue;
                }
                topics.republish(&workload, |port| {
                    self.inbound_server(&config, &workload, *port)
                        .unwrap_or_else(|| unreachable_default(&config))
                });
            }
            self.inbound_topics = topics;
        }
        self.publish_outbound(touched);
    }

    /// Recomputes the outbound policies `touched` reaches.
    fn publish_outbound(&mut self, touched: &Touched) {
        let Some(config) = self.outbound_config.clone() else {
            return;
        };
        self.publish_egress(&config, touched);
        if !touched.outbound_all && touched.outbound_services.is_empty() {
            return;
        }
        let mut topics = std::mem::take(&mut self.outbound_topics);
        let services: Vec<ObjectRef> = if touched.outbound_all {
            topics.groups().cloned().collect()
        } else {
            touched.outbound_services.iter().cloned().collect()
        };
        for service in &services {
            topics.republish(service, |(port, source_namespace)| {
                self.outbound_service_policy(&config, service, *port, source_namespace)
            });
        }
        self.outbound_topics = topics;
    }

    /// Ends the egress watches `touched.egress_namespaces` may resolve differently (and every
    /// fallback watch), then recomputes the egress policies `touched` reaches (§5.8).
    fn publish_egress(&mut self, config: &OutboundConfig, touched: &Touched) {
        if !touched.egress_namespaces.is_empty() {
            self.fallback_topics.remove_group(&());
            let all = touched
                .egress_namespaces
                .contains(&config.global_egress_network_namespace);
            self.egress_topics
                .remove_where(|network, (_, source_namespace)| {
                    all || touched.egress_namespaces.contains(&network.namespace)
                        || touched.egress_namespaces.contains(source_namespace)
                });
        }
        if !touched.outbound_all && touched.outbound_egress_networks.is_empty() {
            return;
        }
        let mut topics = std::mem::take(&mut self.egress_topics);
        let networks: Vec<ObjectRef> = if touched.outbound_all {
            topics.groups().cloned().collect()
        } else {
            touched.outbound_egress_networks.iter().cloned().collect()
        };
        for network in &networks {
            topics.republish(network, |(original_dst, source_namespace)| {
                self.outbound_egress_policy(config, network, *original_dst, source_namespace)
            });
        }
        self.egress_topics = topics;
    }

    /// Re-sorts the Servers of `namespaces` by age (see `servers_by_age`).
    fn sort_servers(&mut self, namespaces: &BTreeSet<String>) {
        for ns in namespaces {
            let mut servers: Vec<Arc<ServerInfo>> = self
                .servers_by_namespace
                .get(ns)
                .into_iter()
                .flatten()
                .filter_map(|k| self.servers.get(k).cloned())
                .collect();
            if servers.is_empty() {
                self.servers_by_age.remove(ns);
                continue;
            }
            // A missing timestamp sorts first.
            servers.sort_by(|a, b| (&a.created, &a.name).cmp(&(&b.created, &b.name)));
            self.servers_by_age.insert(ns.clone(), servers);
        }
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

    fn touch_slice_services(&self, slices: Option<&BTreeSet<ObjectRef>>, touched: &mut Touched) {
        for slice in slices.into_iter().flatten() {
            if let Some(svc) = self.slices.get(slice).and_then(|s| slice_service(s)) {
                touched.insert(svc);
            }
        }
    }
}

/// Never used: a workload checked to exist always has a server. Kept total rather than
/// panicking inside the index lock.
fn unreachable_default(config: &InboundConfig) -> InboundServer {
    InboundServer {
        reference: crate::inbound::ServerRef::Default(config.default_policy.name().into()),
        protocol: crate::inbound::InboundProtocol::Detect {
            timeout: crate::inbound::DETECT_TIMEOUT,
        },
        authorizations: config.default_policy.authorizations(config),
        http_routes: Vec::new(),
        grpc_routes: Vec::new(),
        rate_limit: None,
    }
}

fn slice_service(slice: &SliceInfo) -> Option<ObjectRef> {
    slice.service.as_ref().map(|name| ObjectRef {
        namespace: slice.namespace.clone(),
        name: name.clone(),
    })
}

pub(crate) fn object_ref<K: Watched>(obj: &K) -> Option<ObjectRef> {
    let meta = obj.meta();
    Some(ObjectRef {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone()?,
    })
}

fn index_insert<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, BTreeSet<ObjectRef>>,
    key: K,
    value: &ObjectRef,
) {
    map.entry(key).or_default().insert(value.clone());
}

fn index_remove<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, BTreeSet<ObjectRef>>,
    key: &K,
    value: &ObjectRef,
) {
    if let Some(set) = map.get_mut(key) {
        set.remove(value);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

// === impl IndexedKind for each kind ===

impl IndexedKind for Service {
    const KIND: &'static str = "Service";
    const CACHE_METRIC: &'static str = "service_cache_size";

    fn apply(
        cluster: &mut Cluster,
        obj: &Self,
        touched: &mut Touched,
    ) -> Result<(), InvalidObject> {
        let svc = ServiceInfo::from_service(obj)?;
        let key = svc.object_ref();
        if cluster.services.get(&key).is_some_and(|old| **old == svc) {
            return Ok(());
        }
        let existed = cluster.services.contains_key(&key);
        Self::delete(cluster, &key, &mut Touched::default());
        for ip in &svc.cluster_ips {
            // The API server never allocates one cluster IP twice, but offline state (or a
            // manual `clusterIP`) can: say which Service an address target then resolves to.
            if let Some(other) = cluster
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
            index_insert(&mut cluster.services_by_ip, *ip, &key);
        }
        cluster.services.insert(key.clone(), Arc::new(svc));
        if existed {
            touched.outbound_services.insert(key.clone());
        } else {
            touched.outbound_all = true;
        }
        touched.status = true;
        touched.insert(key);
        Ok(())
    }

    fn delete(cluster: &mut Cluster, key: &ObjectRef, touched: &mut Touched) {
        if let Some(old) = cluster.services.remove(key) {
            for ip in &old.cluster_ips {
                index_remove(&mut cluster.services_by_ip, ip, key);
            }
            touched.outbound_all = true;
            touched.status = true;
            touched.insert(key.clone());
        }
    }

    fn keys(cluster: &Cluster) -> Vec<ObjectRef> {
        cluster.services.keys().cloned().collect()
    }
}

impl IndexedKind for EndpointSlice {
    const KIND: &'static str = "EndpointSlice";
    const CACHE_METRIC: &'static str = "endpointslices_cache_size";

    fn apply(
        cluster: &mut Cluster,
        obj: &Self,
        touched: &mut Touched,
    ) -> Result<(), InvalidObject> {
        let slice = SliceInfo::from_slice(obj)?;
        let key = ObjectRef {
            namespace: slice.namespace.clone(),
            name: slice.name.clone(),
        };
        if cluster.slices.get(&key).is_some_and(|old| **old == slice) {
            return Ok(());
        }
        Self::delete(cluster, &key, touched);
        if let Some(svc) = slice_service(&slice) {
            index_insert(&mut cluster.slices_by_service, svc.clone(), &key);
            touched.insert(svc);
        }
        for pod in slice.target_refs("Pod") {
            index_insert(&mut cluster.slices_by_pod, pod, &key);
        }
        for ew in slice.target_refs("ExternalWorkload") {
            index_insert(&mut cluster.slices_by_external_workload, ew, &key);
        }
        cluster.slices.insert(key, Arc::new(slice));
        Ok(())
    }

    fn delete(cluster: &mut Cluster, key: &ObjectRef, touched: &mut Touched) {
        let Some(old) = cluster.slices.remove(key) else {
            return;
        };
        if let Some(svc) = slice_service(&old) {
            index_remove(&mut cluster.slices_by_service, &svc, key);
            touched.insert(svc);
        }
        for pod in old.target_refs("Pod") {
            index_remove(&mut cluster.slices_by_pod, &pod, key);
        }
        for ew in old.target_refs("ExternalWorkload") {
            index_remove(&mut cluster.slices_by_external_workload, &ew, key);
        }
    }

    fn keys(cluster: &Cluster) -> Vec<ObjectRef> {
        cluster.slices.keys().cloned().collect()
    }
}

impl IndexedKind for Pod {
    const KIND: &'static str = "Pod";
    const CACHE_METRIC: &'static str = "pod_cache_size";

    fn apply(
        cluster: &mut Cluster,
        obj: &Self,
        touched: &mut Touched,
    ) -> Result<(), InvalidObject> {
        let pod = PodInfo::from_pod(obj)?;
        let key = pod.object_ref();
        if cluster.pods.get(&key).is_some_and(|old| **old == pod) {
            return Ok(());
        }
        // Decision 3: a pod change reaches the services whose slices point at it right away.
        Self::delete(cluster, &key, touched);
        if !pod.host_network {
            for ip in &pod.ips {
                index_insert(&mut cluster.pods_by_ip, *ip, &key);
            }
        }
        for host_ip in &pod.host_ips {
            for port in pod.container_ports.iter().filter_map(|p| p.host_port) {
                index_insert(&mut cluster.pods_by_host_port, (*host_ip, port), &key);
            }
        }
        // A pod that shows up after the slice naming it must still reach that slice's service.
        cluster.touch_slice_services(cluster.slices_by_pod.get(&key), touched);
        touched
            .ips
            .extend(pod.ips.iter().chain(&pod.host_ips).copied());
        touched.inbound_namespaces.insert(pod.namespace.clone());
        cluster.pods.insert(key, Arc::new(pod));
        Ok(())
    }

    fn delete(cluster: &mut Cluster, key: &ObjectRef, touched: &mut Touched) {
        let Some(old) = cluster.pods.remove(key) else {
            return;
        };
        for ip in &old.ips {
            index_remove(&mut cluster.pods_by_ip, ip, key);
        }
        touched
            .ips
            .extend(old.ips.iter().chain(&old.host_ips).copied());
        touched.inbound_namespaces.insert(old.namespace.clone());
        for host_ip in &old.host_ips {
            for port in old.container_ports.iter().filter_map(|p| p.host_port) {
                index_remove(&mut cluster.pods_by_host_port, &(*host_ip, port), key);
            }
        }
        cluster.touch_slice_services(cluster.slices_by_pod.get(key), touched);
    }

    fn keys(cluster: &Cluster) -> Vec<ObjectRef> {
        cluster.pods.keys().cloned().collect()
    }
}

impl IndexedKind for Node {
    const KIND: &'static str = "Node";
    const CACHE_METRIC: &'static str = "node_cache_size";

    fn apply(cluster: &mut Cluster, obj: &Self, _: &mut Touched) -> Result<(), InvalidObject> {
        let node = NodeInfo::from_node(obj)?;
        cluster.nodes.insert(node.name.clone(), node);
        Ok(())
    }

    fn delete(cluster: &mut Cluster, key: &ObjectRef, _: &mut Touched) {
        cluster.nodes.remove(&key.name);
    }

    fn keys(cluster: &Cluster) -> Vec<ObjectRef> {
        cluster
            .nodes
            .keys()
            .map(|name| ObjectRef {
                namespace: String::new(),
                name: name.clone(),
            })
            .collect()
    }
}

impl IndexedKind for ReplicaSet {
    const KIND: &'static str = "ReplicaSet";
    const CACHE_METRIC: &'static str = "replicaset_cache_size";

    fn apply(cluster: &mut Cluster, obj: &Self, _: &mut Touched) -> Result<(), InvalidObject> {
        let (namespace, name) = model::names(Self::KIND, &obj.metadata)?;
        cluster
            .replica_sets
            .insert(ObjectRef { namespace, name }, model::replica_set_owner(obj));
        Ok(())
    }

    fn delete(cluster: &mut Cluster, key: &ObjectRef, _: &mut Touched) {
        cluster.replica_sets.remove(key);
    }

    fn keys(cluster: &Cluster) -> Vec<ObjectRef> {
        cluster.replica_sets.keys().cloned().collect()
    }
}

impl IndexedKind for Job {
    const KIND: &'static str = "Job";
    const CACHE_METRIC: &'static str = "job_cache_size";

    fn apply(cluster: &mut Cluster, obj: &Self, _: &mut Touched) -> Result<(), InvalidObject> {
        let (namespace, name) = model::names(Self::KIND, &obj.metadata)?;
        cluster
            .jobs
            .insert(ObjectRef { namespace, name }, model::job_owner(obj));
        Ok(())
    }

    fn delete(cluster: &mut Cluster, key: &ObjectRef, _: &mut Touched) {
        cluster.jobs.remove(key);
    }

    fn keys(cluster: &Cluster) -> Vec<ObjectRef> {
        cluster.jobs.keys().cloned().collect()
    }
}

impl IndexedKind for Server {
    const KIND: &'static str = "Server";
    const CACHE_METRIC: &'static str = "server_cache_size";

    fn apply(
        cluster: &mut Cluster,
        obj: &Self,
        touched: &mut Touched,
    ) -> Result<(), InvalidObject> {
        let srv = ServerInfo::from_server(obj)?;
        let key = srv.object_ref();
        if cluster.servers.get(&key).is_some_and(|old| **old == srv) {
            return Ok(());
        }
        Self::delete(cluster, &key, touched);
        index_insert(
            &mut cluster.servers_by_namespace,
            srv.namespace.clone(),
            &key,
        );
        touched.server_namespaces.insert(srv.namespace.clone());
        touched.inbound_namespaces.insert(srv.namespace.clone());
        touched.all_ips = true;
        cluster.servers.insert(key, Arc::new(srv));
        Ok(())
    }

    fn delete(cluster: &mut Cluster, key: &ObjectRef, touched: &mut Touched) {
        if cluster.servers.remove(key).is_some() {
            index_remove(&mut cluster.servers_by_namespace, &key.namespace, key);
            touched.server_namespaces.insert(key.namespace.clone());
            touched.inbound_namespaces.insert(key.namespace.clone());
            touched.all_ips = true;
        }
    }

    fn keys(cluster: &Cluster) -> Vec<ObjectRef> {
        cluster.servers.keys().cloned().collect()
    }
}

impl IndexedKind for ExternalWorkload {
    const KIND: &'static str = "ExternalWorkload";
    const CACHE_METRIC: &'static str = "externalworkload_cache_size";

    fn apply(
        cluster: &mut Cluster,
        obj: &Self,
        touched: &mut Touched,
    ) -> Result<(), InvalidObject> {
        let ew = ExternalWorkloadInfo::from_external_workload(obj)?;
        let key = ew.object_ref();
        if cluster
            .external_workloads
            .get(&key)
            .is_some_and(|old| **old == ew)
        {
            return Ok(());
        }
        Self::delete(cluster, &key, touched);
        for ip in &ew.ips {
            for port in &ew.ports {
                index_insert(
                    &mut cluster.external_workloads_by_addr,
                    (*ip, port.port),
                    &key,
                );
            }
        }
        cluster.touch_slice_services(cluster.slices_by_external_workload.get(&key), touched);
        touched.ips.extend(ew.ips.iter().copied());
        touched.inbound_namespaces.insert(ew.namespace.clone());
        cluster.external_workloads.insert(key, Arc::new(ew));
        Ok(())
    }

    fn delete(cluster: &mut Cluster, key: &ObjectRef, touched: &mut Touched) {
        let Some(old) = cluster.external_workloads.remove(key) else {
            return;
        };
        for ip in &old.ips {
            for port in &old.ports {
                index_remove(
                    &mut cluster.external_workloads_by_addr,
                    &(*ip, port.port),
                    key,
                );
            }
        }
        touched.ips.extend(old.ips.iter().copied());
        touched.inbound_namespaces.insert(old.namespace.clone());
        cluster.touch_slice_services(cluster.slices_by_external_workload.get(key), touched);
    }

    fn keys(cluster: &Cluster) -> Vec<ObjectRef> {
        cluster.external_workloads.keys().cloned().collect()
    }
}

impl IndexedKind for ServiceProfile {
    const KIND: &'static str = "ServiceProfile";
    const CACHE_METRIC: &'static str = "serviceprofile_cache_size";

    /// An invalid update removes the profile it replaces: the service is then served the
    /// default profile rather than a stale one (issue 3 item 5).
    fn apply(
        cluster: &mut Cluster,
        obj: &Self,
        touched: &mut Touched,
    ) -> Result<(), InvalidObject> {
        let converted = ProfileInfo::from_service_profile(obj);
        let key = match &converted {
            Ok(p) => ObjectRef {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
            },
            Err(e) => ObjectRef {
                namespace: e.namespace.clone(),
                name: e.name.clone(),
            },
        };
        match converted {
            Ok(profile) => {
                if cluster
                    .profiles
                    .get(&key)
                    .is_some_and(|old| **old == profile)
                {
                    return Ok(());
                }
                cluster.profiles.insert(key.clone(), Arc::new(profile));
                touched
                    .services
                    .extend(profiles::profile_service(&key.name));
                Ok(())
            }
            Err(error) => {
                Self::delete(cluster, &key, touched);
                Err(error)
            }
        }
    }

    fn delete(cluster: &mut Cluster, key: &ObjectRef, touched: &mut Touched) {
        if cluster.profiles.remove(key).is_some() {
            touched
                .services
                .extend(profiles::profile_service(&key.name));
        }
    }

    fn keys(cluster: &Cluster) -> Vec<ObjectRef> {
        cluster.profiles.keys().cloned().collect()
    }
}
