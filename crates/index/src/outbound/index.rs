//! [`OutboundIndex`]: the stores of outbound policy (Services, routes in outbound form,
//! EgressNetworks), its topics, and how each kind's events update them.

use k8s_openapi::api::core::v1::Service;
use linkerd_k8s_api::{
    EgressNetwork, HttpRoute as PolicyHttpRoute,
    gateway_api::{
        experimental::{tcproutes::TcpRoute, tlsroutes::TlsRoute},
        grpcroutes::GrpcRoute,
        httproutes::HttpRoute as GatewayHttpRoute,
    },
};
use parking_lot::Mutex;
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use super::{
    OutboundConfig, OutboundError, OutboundLookup, OutboundPolicy, OutboundTarget, ResolvedAddr,
    routes::{self, OutboundRouteInfo, OutboundRoutes, TouchedParents},
};
use crate::{
    metrics::{IndexMetrics, Reporter},
    model::{EgressNetworkInfo, InvalidObject, Kind, ObjectRef, ServiceInfo},
    routes::{
        GATEWAY_GROUP, POLICY_GROUP, RouteKey,
        parents::{ParentKey, ParentKind, ParentLookup, ParentState, StatusRoutes, StatusSource},
    },
    source::Event,
    store::{RefSet, apply_event, index_insert, index_remove},
    topic::{Topics, subscribe},
    watches::{Sink, Watches},
};

/// The outbound-policy index. Cheap to clone; every clone is the same index.
#[derive(Clone)]
pub struct OutboundIndex {
    state: Arc<Mutex<Outbound>>,
}

/// The stores and topics of the outbound index. Only its watches mutate them, under its lock.
pub(crate) struct Outbound {
    pub(crate) config: OutboundConfig,
    pub(crate) services: HashMap<ObjectRef, Arc<ServiceInfo>>,
    pub(crate) services_by_ip: HashMap<IpAddr, RefSet>,
    /// HTTPRoutes, GRPCRoutes, TLSRoutes and TCPRoutes with Service or EgressNetwork parents.
    pub(crate) outbound_routes: OutboundRoutes,
    /// Every route's parents, whether or not it converts: offline mode's route acceptance.
    pub(crate) route_parents: StatusRoutes,
    /// EgressNetworks (spec/policy.md §5.2), and their names by namespace.
    pub(crate) egress_networks: HashMap<ObjectRef, Arc<EgressNetworkInfo>>,
    pub(crate) egress_by_namespace: HashMap<String, BTreeSet<ObjectRef>>,
    /// Outbound policies by Service, then (port, client namespace).
    outbound_topics: Topics<ObjectRef, (u16, String), OutboundPolicy>,
    /// Outbound policies of addresses in EgressNetworks, by EgressNetwork, then (original
    /// destination, client namespace).
    egress_topics: Topics<ObjectRef, (SocketAddr, String), OutboundPolicy>,
    /// External fallback policies by address; all dropped when EgressNetworks change (§5.8).
    fallback_topics: Topics<(), SocketAddr, OutboundPolicy>,
    metrics: IndexMetrics,
}

/// What a batch of changes touched: the outbound policies to recompute.
#[derive(Debug, Default)]
struct Touched {
    /// Services whose outbound policies must be recomputed (a route naming them as parent
    /// changed, or their annotations or ports did).
    services: BTreeSet<ObjectRef>,
    /// A Service or EgressNetwork appeared or vanished: every outbound policy is recomputed,
    /// since any route may name it as a backend (§5.4 `exists`).
    all: bool,
    /// EgressNetworks whose outbound policies must be recomputed (a route naming them as
    /// parent changed, or their annotations did).
    egress_networks: BTreeSet<ObjectRef>,
    /// Namespaces in which an EgressNetwork changed: the egress watches of parents or clients
    /// there, and every fallback watch, end (§5.8).
    egress_namespaces: BTreeSet<String>,
}

// === impl OutboundIndex ===

impl OutboundIndex {
    /// An empty index serving outbound policy with `config`; routes it skips as invalid are
    /// counted in `metrics`.
    pub fn new(config: OutboundConfig, metrics: IndexMetrics) -> Self {
        Self {
            state: Arc::new(Mutex::new(Outbound {
                config,
                services: HashMap::new(),
                services_by_ip: HashMap::new(),
                outbound_routes: OutboundRoutes::default(),
                route_parents: StatusRoutes::default(),
                egress_networks: HashMap::new(),
                egress_by_namespace: HashMap::new(),
                outbound_topics: Topics::default(),
                egress_topics: Topics::default(),
                fallback_topics: Topics::default(),
                metrics,
            })),
        }
    }

    /// Feeds the index from `watches`: Services, EgressNetworks, and HTTPRoutes (both groups),
    /// GRPCRoutes, TLSRoutes and TCPRoutes.
    pub fn watch(&self, watches: &mut Watches) {
        watches
            .add::<Service>(self.clone())
            .add::<EgressNetwork>(self.clone())
            .add::<PolicyHttpRoute>(self.clone())
            .add::<GatewayHttpRoute>(self.clone())
            .add::<GrpcRoute>(self.clone())
            .add::<TlsRoute>(self.clone())
            .add::<TcpRoute>(self.clone());
    }

    /// Runs `change` on the stores, then republishes every subscribed policy it touched.
    fn update<R>(&self, change: impl FnOnce(&mut Outbound, &mut Touched) -> R) -> R {
        let mut state = self.state.lock();
        let mut touched = Touched::default();
        let out = change(&mut state, &mut touched);
        state.publish(&touched);
        out
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
    /// networks.
    pub fn outbound_policy(
        &self,
        target: OutboundTarget,
        source_namespace: &str,
    ) -> Result<OutboundLookup, OutboundError> {
        let (service, port) = match target {
            OutboundTarget::Service { service, port } => (service, port),
            OutboundTarget::Addr(addr) => {
                let resolved = {
                    let state = self.state.lock();
                    state.resolve_outbound_addr(&state.config, addr, source_namespace)?
                };
                match resolved {
                    ResolvedAddr::Service(service, port) => (service, port),
                    ResolvedAddr::Fixed(fixed) => {
                        return Ok(OutboundLookup::Fixed(Arc::new(*fixed)));
                    }
                    ResolvedAddr::Fallback(addr) => {
                        return Ok(OutboundLookup::Watch(subscribe(
                            &self.state,
                            |o| &mut o.fallback_topics,
                            (),
                            addr,
                            move |_| OutboundPolicy::Fallback { original_dst: addr },
                        )));
                    }
                    ResolvedAddr::Egress {
                        network,
                        original_dst,
                    } => {
                        let namespace = source_namespace.to_string();
                        let key = (original_dst, namespace.clone());
                        let net = network.clone();
                        return Ok(OutboundLookup::Watch(subscribe(
                            &self.state,
                            |o| &mut o.egress_topics,
                            network,
                            key,
                            move |o| {
                                o.outbound_egress_policy(&o.config, &net, original_dst, &namespace)
                            },
                        )));
                    }
                }
            }
        };
        let key = (port, source_namespace.to_string());
        let svc = service.clone();
        let namespace = source_namespace.to_string();
        Ok(OutboundLookup::Watch(subscribe(
            &self.state,
            |o| &mut o.outbound_topics,
            service,
            key,
            move |o| o.outbound_service_policy(&o.config, &svc, port, &namespace),
        )))
    }

    /// The number of outbound policy topics alive (one per subscribed Service port and client
    /// namespace).
    pub fn outbound_topic_count(&self) -> usize {
        self.state.lock().outbound_topics.len()
    }

    /// The number of egress and fallback policy topics alive (one per subscribed address and
    /// client namespace, one per fallback address).
    pub fn egress_topic_count(&self) -> usize {
        let state = self.state.lock();
        state.egress_topics.len() + state.fallback_topics.len()
    }
}

// === impl Outbound ===

impl ParentLookup for Outbound {
    /// Services and EgressNetworks: the parents outbound policy attaches routes to.
    fn parent_state(&self, parent: &ParentKey) -> ParentState {
        match parent.kind {
            ParentKind::Service => match self.services.get(&parent.object()) {
                None => ParentState::Missing,
                Some(svc) if svc.cluster_ips.is_empty() || svc.external_name => {
                    ParentState::NoClusterIp
                }
                Some(_) => ParentState::Exists,
            },
            ParentKind::EgressNetwork => match self.egress_network_accepted(&parent.object()) {
                None => ParentState::Missing,
                Some(false) => ParentState::EgressNetworkNotAccepted,
                Some(true) => ParentState::Exists,
            },
            ParentKind::Server => ParentState::Missing,
        }
    }
}

impl Outbound {
    /// Recomputes the outbound policies `touched` reaches.
    fn publish(&mut self, touched: &Touched) {
        self.publish_egress(touched);
        if !touched.all && touched.services.is_empty() {
            return;
        }
        let mut topics = std::mem::take(&mut self.outbound_topics);
        let services: Vec<ObjectRef> = if touched.all {
            topics.groups().cloned().collect()
        } else {
            touched.services.iter().cloned().collect()
        };
        for service in &services {
            topics.republish(service, |(port, source_namespace)| {
                self.outbound_service_policy(&self.config, service, *port, source_namespace)
            });
        }
        self.outbound_topics = topics;
    }

    /// Ends the egress watches `touched.egress_namespaces` may resolve differently (and every
    /// fallback watch), then recomputes the egress policies `touched` reaches (§5.8).
    fn publish_egress(&mut self, touched: &Touched) {
        if !touched.egress_namespaces.is_empty() {
            self.fallback_topics.remove_group(&());
            let all = touched
                .egress_namespaces
                .contains(&self.config.global_egress_network_namespace);
            self.egress_topics
                .remove_where(|network, (_, source_namespace)| {
                    all || touched.egress_namespaces.contains(&network.namespace)
                        || touched.egress_namespaces.contains(source_namespace)
                });
        }
        if !touched.all && touched.egress_networks.is_empty() {
            return;
        }
        let mut topics = std::mem::take(&mut self.egress_topics);
        let networks: Vec<ObjectRef> = if touched.all {
            topics.groups().cloned().collect()
        } else {
            touched.egress_networks.iter().cloned().collect()
        };
        for network in &networks {
            topics.republish(network, |(original_dst, source_namespace)| {
                self.outbound_egress_policy(&self.config, network, *original_dst, source_namespace)
            });
        }
        self.egress_topics = topics;
    }

    fn touch_parents(touched: &mut Touched, parents: TouchedParents) {
        touched.services.extend(parents.services);
        touched.egress_networks.extend(parents.egress_networks);
    }

    /// Offline acceptance follows a route's status inputs: their parents' policies change with
    /// them.
    fn touch_status_parents(touched: &mut Touched, parents: Vec<ParentKey>) {
        for parent in parents {
            match parent.kind {
                ParentKind::Service => {
                    touched.services.insert(parent.object());
                }
                ParentKind::EgressNetwork => {
                    touched.egress_networks.insert(parent.object());
                }
                ParentKind::Server => {}
            }
        }
    }

    // --- Services ---

    fn apply_service(&mut self, svc: &Arc<ServiceInfo>, touched: &mut Touched) {
        let key = svc.object_ref();
        if self.services.get(&key).is_some_and(|old| old == svc) {
            return;
        }
        let existed = self.services.contains_key(&key);
        let old = self.services.get(&key).map(|old| &old.annotations);
        warn_annotation_problems("Service", &key, old, &svc.annotations, true);
        self.delete_service(&key, &mut Touched::default());
        for ip in &svc.cluster_ips {
            index_insert(&mut self.services_by_ip, *ip, &key);
        }
        self.services.insert(key.clone(), svc.clone());
        if existed {
            touched.services.insert(key);
        } else {
            touched.all = true;
        }
    }

    fn delete_service(&mut self, key: &ObjectRef, touched: &mut Touched) {
        if let Some(old) = self.services.remove(key) {
            for ip in &old.cluster_ips {
                index_remove(&mut self.services_by_ip, ip, key);
            }
            touched.all = true;
        }
    }

    // --- EgressNetworks ---

    /// Any change, status included, ends the egress watches of its namespace (§5.8).
    fn apply_egress_network(&mut self, en: &Arc<EgressNetworkInfo>, touched: &mut Touched) {
        let key = en.object_ref();
        if self.egress_networks.get(&key).is_some_and(|old| old == en) {
            return;
        }
        let existed = self.egress_networks.contains_key(&key);
        let old = self.egress_networks.get(&key).map(|old| &old.annotations);
        warn_annotation_problems("EgressNetwork", &key, old, &en.annotations, false);
        index_insert(&mut self.egress_by_namespace, key.namespace.clone(), &key);
        self.egress_networks.insert(key.clone(), en.clone());
        touched.egress_namespaces.insert(key.namespace.clone());
        if existed {
            touched.egress_networks.insert(key);
        } else {
            // Routes anywhere may name it as a backend (`exists`).
            touched.all = true;
        }
    }

    fn delete_egress_network(&mut self, key: &ObjectRef, touched: &mut Touched) {
        if self.egress_networks.remove(key).is_none() {
            return;
        }
        index_remove(&mut self.egress_by_namespace, &key.namespace, key);
        touched.egress_namespaces.insert(key.namespace.clone());
        touched.all = true;
    }
}

fn egress_key(en: &EgressNetworkInfo) -> ObjectRef {
    en.object_ref()
}

impl Sink<Service> for OutboundIndex {
    fn apply(&self, events: &[Event<Arc<ServiceInfo>>]) -> usize {
        self.update(|state, touched| {
            apply_event(
                state,
                events,
                touched,
                ServiceInfo::object_ref,
                |s| s.services.keys().cloned().collect(),
                Outbound::apply_service,
                Outbound::delete_service,
            );
            state.services.len()
        })
    }
}

impl Sink<EgressNetwork> for OutboundIndex {
    fn apply(&self, events: &[Event<Arc<EgressNetworkInfo>>]) -> usize {
        self.update(|state, touched| {
            apply_event(
                state,
                events,
                touched,
                egress_key,
                |s| s.egress_networks.keys().cloned().collect(),
                Outbound::apply_egress_network,
                Outbound::delete_egress_network,
            );
            state.egress_networks.len()
        })
    }
}

/// A route kind the outbound index keeps.
trait RouteKind: Kind<Object = Self> + StatusSource {
    const GROUP: &'static str;
    const KIND: &'static str;
    fn convert(obj: &Self) -> Result<OutboundRouteInfo, InvalidObject>;
}

fn route_key<K: RouteKind>(key: &ObjectRef) -> RouteKey {
    RouteKey {
        group: K::GROUP,
        kind: K::KIND,
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    }
}

fn object_key<K: RouteKind>(obj: &K) -> ObjectRef {
    let meta = obj.meta();
    ObjectRef {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

/// Stores the outbound form of `obj`, or removes the route when it does not convert (§12: no
/// stale version survives an invalid update); its status inputs are stored either way.
fn apply_route<K: RouteKind>(state: &mut Outbound, obj: &Arc<K>, touched: &mut Touched) {
    let key = object_key(&**obj);
    let route_key = route_key::<K>(&key);
    if let Some(route) = obj.status_route() {
        let parents = state.route_parents.apply(route).unwrap_or_default();
        Outbound::touch_status_parents(touched, parents);
    }
    match K::convert(obj) {
        Ok(route) => {
            state
                .metrics
                .valid_again(Reporter::Outbound, K::LABEL, &key);
            let parents = state.outbound_routes.apply(route);
            Outbound::touch_parents(touched, parents);
        }
        Err(error) => {
            state
                .metrics
                .skip_invalid(Reporter::Outbound, K::LABEL, Some(key), &error);
            let parents = state.outbound_routes.delete(&route_key);
            Outbound::touch_parents(touched, parents);
        }
    }
}

fn delete_route<K: RouteKind>(state: &mut Outbound, key: &ObjectRef, touched: &mut Touched) {
    let route_key = route_key::<K>(key);
    let parents = state.route_parents.delete(&route_key).unwrap_or_default();
    Outbound::touch_status_parents(touched, parents);
    let parents = state.outbound_routes.delete(&route_key);
    Outbound::touch_parents(touched, parents);
    state.metrics.valid_again(Reporter::Outbound, K::LABEL, key);
}

/// The routes of kind `K` the index holds: converted, or with status inputs kept.
fn stored_routes<K: RouteKind>(state: &Outbound) -> Vec<ObjectRef> {
    let mut keys: Vec<ObjectRef> = state
        .outbound_routes
        .keys_of(K::GROUP, K::KIND)
        .chain(state.route_parents.keys_of(K::GROUP, K::KIND))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

macro_rules! route_kind {
    ($ty:ty, $group:expr, $kind:literal, $convert:expr) => {
        impl RouteKind for $ty {
            const GROUP: &'static str = $group;
            const KIND: &'static str = $kind;

            fn convert(obj: &Self) -> Result<OutboundRouteInfo, InvalidObject> {
                ($convert)(obj)
            }
        }

        impl Sink<$ty> for OutboundIndex {
            fn apply(&self, events: &[Event<Arc<$ty>>]) -> usize {
                self.update(|state, touched| {
                    apply_event(
                        state,
                        events,
                        touched,
                        object_key::<$ty>,
                        stored_routes::<$ty>,
                        apply_route::<$ty>,
                        delete_route::<$ty>,
                    );
                    state.outbound_routes.by_key.len()
                })
            }
        }
    };
}

route_kind!(
    PolicyHttpRoute,
    POLICY_GROUP,
    "HTTPRoute",
    routes::policy_http_route
);
route_kind!(
    GatewayHttpRoute,
    GATEWAY_GROUP,
    "HTTPRoute",
    routes::gateway_http_route
);
route_kind!(GrpcRoute, GATEWAY_GROUP, "GRPCRoute", routes::grpc_route);
route_kind!(TlsRoute, GATEWAY_GROUP, "TLSRoute", routes::tls_route);
route_kind!(TcpRoute, GATEWAY_GROUP, "TCPRoute", routes::tcp_route);

/// Warns once per version of a Service or EgressNetwork (`kind`) about each feature its
/// `annotations` leave unset ([`super::annotations::problems`]): nothing when they are the
/// annotations of the version indexed before (`old`). `load_biaser`: a Service's, whose
/// balancers' load estimator they configure too.
fn warn_annotation_problems(
    kind: &str,
    key: &ObjectRef,
    old: Option<&BTreeMap<String, String>>,
    annotations: &BTreeMap<String, String>,
    load_biaser: bool,
) {
    if old == Some(annotations) {
        return;
    }
    for (feature, error) in super::annotations::problems(annotations, load_biaser) {
        tracing::warn!(%kind, object = %format!("{}/{}", key.namespace, key.name), %error, "ignoring {feature} annotations");
    }
}
