//! The inbound-policy index: per (workload, port), the Server that covers it (or the default
//! server) with its authorizations, routes and rate limit (spec/policy.md §4).
//!
//! - [`view`]: the [`InboundServer`] served, protocol-agnostic.
//! - [`policy`]: the policy kinds in the compact form this index keeps.
//! - [`objects`]: how each kind converts into that form and updates the stores.
//! - this module: [`InboundIndex`], its stores, and the computation of an [`InboundServer`]:
//!   published on one topic per subscribed (workload, port) and recomputed when anything in the
//!   workload's namespace changes (§4.3).

pub mod objects;
pub mod policy;
pub mod view;

use ipnet::IpNet;
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    str::FromStr,
    sync::Arc,
};

use self::policy::{
    AuthenticationRef, AuthorizationPolicyInfo, InboundRouteInfo, MeshTlsAuthenticationInfo,
    NetworkAuthenticationInfo, PolicyTarget, RateLimitPolicyInfo, RouteRules,
    ServerAuthorizationInfo, ServerSelection,
};
use crate::{
    metrics::IndexMetrics,
    model::{
        ExternalWorkloadInfo, Labels, ObjectRef, PodInfo, PortSet, ServerInfo, ServerOverlap,
        ServerPort,
    },
    routes::{
        GATEWAY_GROUP, GrpcRouteMatch, GrpcRule, HttpRouteMatch, HttpRule, POLICY_GROUP, PathMatch,
        RouteKey,
        parents::{ParentKey, ParentKind, ParentLookup, ParentState, StatusRoutes},
    },
    topic::{SharedViews, Topics, ViewAlloc, subscribe},
    watches::Watches,
};
use linkerd_k8s_api::server::ProxyProtocol;

pub use self::view::*;

/// The inbound-policy index. Cheap to clone; every clone is the same index.
#[derive(Clone)]
pub struct InboundIndex {
    state: Arc<Mutex<Inbound>>,
}

/// The stores and topics of the inbound index. Only its watches mutate them, under its lock.
pub(crate) struct Inbound {
    pub(crate) config: InboundConfig,
    /// Meshed pods (label `linkerd.io/control-plane-ns`); other pods have no inbound policy.
    pub(crate) pods: HashMap<ObjectRef, Arc<PodInfo>>,
    pub(crate) external_workloads: HashMap<ObjectRef, Arc<ExternalWorkloadInfo>>,
    pub(crate) servers: HashMap<ObjectRef, Arc<ServerInfo>>,
    /// Namespace → its Servers (a Server only reaches workloads of its own namespace).
    pub(crate) servers_by_namespace: HashMap<String, BTreeSet<ObjectRef>>,
    /// Namespace → its Servers, oldest first then by name: the order in which they claim ports
    /// (spec/policy.md §4.3), sorted once per change rather than once per lookup.
    pub(crate) servers_by_age: HashMap<String, Vec<Arc<ServerInfo>>>,
    /// The policy kinds (ServerAuthorization, AuthorizationPolicy, ...).
    pub(crate) policy: PolicyStores,
    /// Every HTTP and gRPC route's parents, whether or not it converts: offline mode's route
    /// acceptance (a route that does not convert still conflicts others).
    pub(crate) route_parents: StatusRoutes,
    /// Equal policies (every pod of a Deployment on one port) share one view.
    topics: Topics<WorkloadRef, u16, InboundServer, SharedViews<InboundServer>>,
    /// Views that differ share their equal parts (see [`ViewParts`]).
    view_parts: Mutex<ViewParts>,
    pub(crate) metrics: IndexMetrics,
}

/// What a batch of changes touched: the inbound servers to recompute.
#[derive(Debug, Default)]
pub(crate) struct Touched {
    /// Namespaces whose inbound servers must be recomputed (§4.3).
    pub(crate) namespaces: BTreeSet<String>,
    /// An authentication changed: every inbound server is recomputed.
    pub(crate) all: bool,
    /// Namespaces whose Servers changed: their age order is sorted again.
    pub(crate) server_namespaces: BTreeSet<String>,
}

/// Pod and ExternalWorkload annotation overriding the default inbound policy.
pub const DEFAULT_INBOUND_POLICY_ANNOTATION: &str = "config.linkerd.io/default-inbound-policy";
/// Annotation listing ports whose Allow defaults require an authenticated client.
pub const REQUIRE_IDENTITY_PORTS_ANNOTATION: &str =
    "config.linkerd.io/proxy-require-identity-inbound-ports";

/// The policy controller's settings that shape inbound answers (its flags, §1.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboundConfig {
    /// `--cluster-networks`.
    pub cluster_networks: Vec<IpNet>,
    /// `--default-policy`.
    pub default_policy: DefaultPolicy,
    /// `--probe-networks`: who may reach probe routes (none: no probe routes).
    pub probe_networks: Vec<IpNet>,
    /// `--identity-domain`.
    pub identity_domain: String,
    /// `--control-plane-namespace`.
    pub control_plane_namespace: String,
    /// Offline mode: decide route acceptance in-process instead of reading `status.parents`.
    pub compute_route_acceptance: bool,
}

/// A default inbound policy (§4.4).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DefaultPolicy {
    AllUnauthenticated,
    AllAuthenticated,
    ClusterUnauthenticated,
    ClusterAuthenticated,
    Deny,
    Audit,
}

/// A string that is not a default-policy name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid mode: {0:?}")]
pub struct InvalidPolicy(pub String);

/// A workload as the proxy names it in `PortSpec.workload`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadRef {
    Pod { namespace: String, name: String },
    ExternalWorkload { namespace: String, name: String },
}

impl WorkloadRef {
    /// The workload's namespace (outbound requests use only this, spec/policy.md §5.1).
    pub fn namespace(&self) -> &str {
        match self {
            Self::Pod { namespace, .. } | Self::ExternalWorkload { namespace, .. } => namespace,
        }
    }
}

/// The workload is not indexed (unknown, or a pod that is not meshed): `NOT_FOUND`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown server")]
pub struct UnknownWorkload;

/// The stores of the policy kinds, by namespace then name.
#[derive(Debug, Default)]
pub(crate) struct PolicyStores {
    pub(crate) server_authorizations: NamespacedStore<ServerAuthorizationInfo>,
    pub(crate) authorization_policies: NamespacedStore<AuthorizationPolicyInfo>,
    pub(crate) mesh_tls_authentications: NamespacedStore<MeshTlsAuthenticationInfo>,
    pub(crate) network_authentications: NamespacedStore<NetworkAuthenticationInfo>,
    pub(crate) rate_limits: NamespacedStore<RateLimitPolicyInfo>,
    /// Routes by `(group, kind)` too, since a policy and a Gateway HTTPRoute may share a name.
    pub(crate) routes: NamespacedStore<InboundRouteInfo>,
}

/// Objects of one kind, by namespace then name (or `group/kind/name` for routes).
#[derive(Debug)]
pub(crate) struct NamespacedStore<T> {
    by_namespace: HashMap<String, BTreeMap<String, Arc<T>>>,
    len: usize,
}

impl<T> Default for NamespacedStore<T> {
    fn default() -> Self {
        Self {
            by_namespace: HashMap::new(),
            len: 0,
        }
    }
}

impl<T: PartialEq> NamespacedStore<T> {
    /// Inserts; returns false when an equal object was already there.
    pub(crate) fn insert(&mut self, namespace: &str, name: String, obj: T) -> bool {
        let ns = self.by_namespace.entry(namespace.to_string()).or_default();
        if ns.get(&name).is_some_and(|old| **old == obj) {
            return false;
        }
        if ns.insert(name, Arc::new(obj)).is_none() {
            self.len += 1;
        }
        true
    }

    pub(crate) fn remove(&mut self, namespace: &str, name: &str) -> bool {
        let Some(ns) = self.by_namespace.get_mut(namespace) else {
            return false;
        };
        let removed = ns.remove(name).is_some();
        if removed {
            self.len -= 1;
        }
        if ns.is_empty() {
            self.by_namespace.remove(namespace);
        }
        removed
    }

    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<&T> {
        self.by_namespace.get(namespace)?.get(name).map(|t| &**t)
    }

    pub(crate) fn in_namespace<'a>(&'a self, namespace: &str) -> impl Iterator<Item = &'a T> {
        self.by_namespace
            .get(namespace)
            .into_iter()
            .flat_map(|ns| ns.values().map(|t| &**t))
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn keys(&self) -> Vec<ObjectRef> {
        self.by_namespace
            .iter()
            .flat_map(|(ns, objs)| {
                objs.keys().map(move |name| ObjectRef {
                    namespace: ns.clone(),
                    name: name.clone(),
                })
            })
            .collect()
    }
}

// === impl InboundIndex ===

impl InboundIndex {
    /// An empty index serving inbound policy with `config`; objects it skips as invalid are
    /// counted in `metrics`.
    pub fn new(config: InboundConfig, metrics: IndexMetrics) -> Self {
        Self {
            state: Arc::new(Mutex::new(Inbound {
                config,
                pods: HashMap::new(),
                external_workloads: HashMap::new(),
                servers: HashMap::new(),
                servers_by_namespace: HashMap::new(),
                servers_by_age: HashMap::new(),
                policy: PolicyStores::default(),
                route_parents: StatusRoutes::default(),
                topics: Topics::default(),
                view_parts: Mutex::default(),
                metrics,
            })),
        }
    }

    /// Feeds the index from `watches`: meshed Pods, ExternalWorkloads, Servers,
    /// ServerAuthorizations, AuthorizationPolicies, MeshTLS and Network authentications,
    /// HTTPLocalRateLimitPolicies, and HTTPRoutes (both groups) and GRPCRoutes.
    pub fn watch(&self, watches: &mut Watches) {
        objects::watch(self, watches);
    }

    /// Runs `change` on the stores, then republishes every subscribed server it touched.
    pub(crate) fn update<R>(&self, change: impl FnOnce(&mut Inbound, &mut Touched) -> R) -> R {
        let mut state = self.state.lock();
        let mut touched = Touched::default();
        let out = change(&mut state, &mut touched);
        state.sort_servers(&touched.server_namespaces);
        state.publish(&touched);
        out
    }

    /// Subscribes to the inbound policy of `workload`'s `port` (spec/policy.md §4.9). The
    /// receiver closes when the workload is deleted. Errors when the workload is not indexed
    /// (unknown, or an unmeshed pod).
    pub fn inbound_server(
        &self,
        workload: WorkloadRef,
        port: u16,
    ) -> Result<crate::topic::Receiver<InboundServer>, UnknownWorkload> {
        let initial = self
            .state
            .lock()
            .inbound_server(&workload, port)
            .ok_or(UnknownWorkload)?;
        Ok(subscribe(
            &self.state,
            |i| &mut i.topics,
            workload,
            port,
            // Computed just above; recomputing under the same lock would give the same value.
            move |_| initial,
        ))
    }

    /// The number of inbound topics alive (one per subscribed workload port).
    pub fn topic_count(&self) -> usize {
        self.state.lock().topics.len()
    }

    /// An indexed Server of `server`'s namespace that claims the same workload ports
    /// ([`ServerInfo::overlap_with`]), by name, and how: what the webhook refuses a Server for.
    pub fn overlapping_server(&self, server: &ServerInfo) -> Option<(String, ServerOverlap)> {
        self.state
            .lock()
            .overlapping_servers(server)
            .next()
            .map(|(s, overlap)| (s.name.clone(), overlap))
    }
}

// === impl DefaultPolicy ===

impl DefaultPolicy {
    /// The policy's name, as annotations, flags and `default:<name>` references spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::AllUnauthenticated => "all-unauthenticated",
            Self::AllAuthenticated => "all-authenticated",
            Self::ClusterUnauthenticated => "cluster-unauthenticated",
            Self::ClusterAuthenticated => "cluster-authenticated",
            Self::Deny => "deny",
            Self::Audit => "audit",
        }
    }

    /// The authorizations this policy grants (§4.4): one entry named after the policy, or
    /// none for `deny`.
    pub fn authorizations(
        self,
        config: &InboundConfig,
    ) -> BTreeMap<AuthorizationRef, ClientAuthorization> {
        let all = || vec![network("0.0.0.0/0"), network("::/0")];
        let cluster = || {
            config
                .cluster_networks
                .iter()
                .map(|net| Network {
                    net: *net,
                    except: vec![],
                })
                .collect::<Vec<_>>()
        };
        let any_identity =
            || ClientAuthentication::TlsAuthenticated(vec![IdentityMatch::Suffix(vec![])]);
        let authz = match self {
            Self::AllUnauthenticated | Self::Audit => ClientAuthorization {
                networks: all(),
                authentication: ClientAuthentication::Unauthenticated,
            },
            Self::AllAuthenticated => ClientAuthorization {
                networks: all(),
                authentication: any_identity(),
            },
            Self::ClusterUnauthenticated => ClientAuthorization {
                networks: cluster(),
                authentication: ClientAuthentication::Unauthenticated,
            },
            Self::ClusterAuthenticated => ClientAuthorization {
                networks: cluster(),
                authentication: any_identity(),
            },
            Self::Deny => return BTreeMap::new(),
        };
        BTreeMap::from([(AuthorizationRef::Default(self.name().to_string()), authz)])
    }
}

fn network(cidr: &str) -> Network {
    Network {
        net: cidr.parse().unwrap_or_default(),
        except: vec![],
    }
}

impl FromStr for DefaultPolicy {
    type Err = InvalidPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "all-unauthenticated" => Self::AllUnauthenticated,
            "all-authenticated" => Self::AllAuthenticated,
            "cluster-unauthenticated" => Self::ClusterUnauthenticated,
            "cluster-authenticated" => Self::ClusterAuthenticated,
            "deny" => Self::Deny,
            "audit" => Self::Audit,
            other => return Err(InvalidPolicy(other.to_string())),
        })
    }
}

// === computation ===

/// A workload, as server selection sees it.
enum Workload<'a> {
    Pod(&'a PodInfo),
    External(&'a ExternalWorkloadInfo),
}

impl Workload<'_> {
    fn namespace(&self) -> &str {
        match self {
            Self::Pod(p) => &p.namespace,
            Self::External(e) => &e.namespace,
        }
    }

    fn labels(&self) -> &Labels {
        match self {
            Self::Pod(p) => &p.labels,
            Self::External(e) => &e.labels,
        }
    }

    fn annotations(&self) -> &BTreeMap<String, String> {
        match self {
            Self::Pod(p) => &p.annotations,
            Self::External(e) => &e.annotations,
        }
    }

    fn opaque_ports(&self) -> Option<&PortSet> {
        match self {
            Self::Pod(p) => p.opaque_ports.as_ref(),
            Self::External(e) => e.opaque_ports.as_ref(),
        }
    }

    /// Whether `server` selects this workload kind and its labels (§4.3).
    fn selected_by(&self, server: &ServerInfo) -> bool {
        let selector = match self {
            Self::Pod(_) => server.pod_selector.as_ref(),
            Self::External(_) => server.external_workload_selector.as_ref(),
        };
        selector.is_some_and(|s| s.matches(self.labels()))
    }

    /// Whether `server`'s port resolves to `port` on this workload: a number, or a name
    /// carried by that port (any of a pod's TCP ports with the name; the workload's one).
    fn server_port_is(&self, server: &ServerInfo, port: u16) -> bool {
        match &server.port {
            ServerPort::Number(n) => *n == port,
            ServerPort::Name(name) => match self {
                Self::Pod(p) => p.container_ports.iter().any(|c| {
                    c.tcp && c.container_port == port && c.name.as_deref() == Some(name.as_str())
                }),
                Self::External(e) => {
                    e.ports
                        .iter()
                        .find(|p| p.name.as_deref() == Some(name.as_str()))
                        .map(|p| p.port)
                        == Some(port)
                }
            },
        }
    }

    /// The `httpGet` probe paths on `port`; external workloads have none.
    fn probe_paths(&self, port: u16) -> Vec<&str> {
        match self {
            Self::Pod(p) => p.probe_paths.on_port(port).collect(),
            Self::External(_) => Vec::new(),
        }
    }
}

impl ParentLookup for Inbound {
    /// Servers only: the parents inbound policy attaches routes to.
    fn parent_state(&self, parent: &ParentKey) -> ParentState {
        let exists =
            parent.kind == ParentKind::Server && self.servers.contains_key(&parent.object());
        if exists {
            ParentState::Exists
        } else {
            ParentState::Missing
        }
    }
}

/// The parts of inbound views that differ from view to view less than the views do: the
/// authorizations of every Server of a namespace under one AuthorizationPolicy are equal, and
/// so are the default routes of every port without routes. Views whose other fields differ
/// (another Server name, protocol or workload) share these: with two pods per Deployment,
/// they were most of what a `WatchPort` stream's share of its view held (about 1.2 KB).
#[derive(Debug, Default)]
struct ViewParts {
    authorizations: SharedViews<BTreeMap<AuthorizationRef, ClientAuthorization>>,
    http_routes: SharedViews<Vec<InboundRoute<HttpRule>>>,
    grpc_routes: SharedViews<Vec<InboundRoute<GrpcRule>>>,
}

impl ViewParts {
    /// `view` with each part replaced by an equal one a view already holds, if any.
    fn share(&mut self, mut view: InboundServer) -> InboundServer {
        view.authorizations = self
            .authorizations
            .alloc(Arc::unwrap_or_clone(view.authorizations));
        view.http_routes = self
            .http_routes
            .alloc(Arc::unwrap_or_clone(view.http_routes));
        view.grpc_routes = self
            .grpc_routes
            .alloc(Arc::unwrap_or_clone(view.grpc_routes));
        view
    }
}

impl Inbound {
    /// The Servers of `server`'s namespace that claim the same workload ports
    /// ([`ServerInfo::overlap_with`]), and how.
    pub(crate) fn overlapping_servers<'a>(
        &'a self,
        server: &'a ServerInfo,
    ) -> impl Iterator<Item = (&'a Arc<ServerInfo>, ServerOverlap)> + 'a {
        self.servers_by_namespace
            .get(&server.namespace)
            .into_iter()
            .flatten()
            .filter_map(|key| self.servers.get(key))
            .filter_map(move |other| Some((other, server.overlap_with(other)?)))
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

    /// Recomputes the subscribed servers `touched` reaches; a deleted workload's topics are
    /// dropped, which ends the streams watching it (§4.2).
    fn publish(&mut self, touched: &Touched) {
        if !touched.all && touched.namespaces.is_empty() {
            return;
        }
        let mut topics = std::mem::take(&mut self.topics);
        let workloads: Vec<WorkloadRef> = topics
            .groups()
            .filter(|w| touched.all || touched.namespaces.contains(w.namespace()))
            .cloned()
            .collect();
        for workload in workloads {
            if self.inbound_workload(&workload).is_none() {
                topics.remove_group(&workload);
                continue;
            }
            topics.republish(&workload, |port| {
                self.inbound_server(&workload, *port)
                    .unwrap_or_else(|| unreachable_default(&self.config))
            });
        }
        self.topics = topics;
    }

    /// The pod or ExternalWorkload `workload`, if indexed for inbound policy (pods must be
    /// meshed).
    fn inbound_workload(&self, workload: &WorkloadRef) -> Option<Workload<'_>> {
        match workload {
            WorkloadRef::Pod { namespace, name } => self
                .pods
                .get(&ObjectRef {
                    namespace: namespace.clone(),
                    name: name.clone(),
                })
                .filter(|p| p.labels.contains_key(crate::model::CONTROL_PLANE_NS_LABEL))
                .map(|p| Workload::Pod(p)),
            WorkloadRef::ExternalWorkload { namespace, name } => self
                .external_workloads
                .get(&ObjectRef {
                    namespace: namespace.clone(),
                    name: name.clone(),
                })
                .map(|e| Workload::External(e)),
        }
    }

    /// The server of `workload`'s `port`, or `None` when the workload is not indexed.
    pub(crate) fn inbound_server(
        &self,
        workload: &WorkloadRef,
        port: u16,
    ) -> Option<InboundServer> {
        let config = &self.config;
        let workload = self.inbound_workload(workload)?;
        // Oldest first (a missing timestamp sorts first), then by name (§4.3).
        let server = self
            .servers_by_age
            .get(workload.namespace())
            .into_iter()
            .flatten()
            .map(|s| &**s)
            .find(|s| workload.selected_by(s) && workload.server_port_is(s, port));
        let view = match server {
            Some(server) => self.server_content(config, &workload, server, port),
            None => default_server(config, &workload, port),
        };
        Some(self.view_parts.lock().share(view))
    }

    fn server_content(
        &self,
        config: &InboundConfig,
        workload: &Workload<'_>,
        server: &ServerInfo,
        port: u16,
    ) -> InboundServer {
        let ns = &server.namespace;
        let protocol = match server.proxy_protocol {
            ProxyProtocol::Unknown => InboundProtocol::Detect {
                timeout: DETECT_TIMEOUT,
            },
            ProxyProtocol::Http1 => InboundProtocol::Http1,
            ProxyProtocol::Http2 => InboundProtocol::Http2,
            ProxyProtocol::Grpc => InboundProtocol::Grpc,
            ProxyProtocol::Opaque => InboundProtocol::Opaque,
            ProxyProtocol::Tls => InboundProtocol::Tls,
        };
        let mut authorizations = BTreeMap::new();
        for saz in self.policy.server_authorizations.in_namespace(ns) {
            let selects = match &saz.servers {
                ServerSelection::Name(name) => *name == server.name,
                ServerSelection::Selector(sel) => sel.matches(&server.labels),
            };
            if selects {
                authorizations.insert(
                    AuthorizationRef::ServerAuthorization(saz.name.clone()),
                    saz.authorization.clone(),
                );
            }
        }
        for policy in self.policy.authorization_policies.in_namespace(ns) {
            let targets = match &policy.target {
                PolicyTarget::Server(name) => *name == server.name,
                PolicyTarget::Namespace => true,
                PolicyTarget::Route { .. } => false,
            };
            if targets && let Some(authz) = self.policy_authorization(policy) {
                authorizations.insert(
                    AuthorizationRef::AuthorizationPolicy(policy.name.clone()),
                    authz,
                );
            }
        }
        if let Ok(access) = server.access_policy.parse::<DefaultPolicy>() {
            authorizations.extend(access.authorizations(config));
        }

        let mut http_routes = Vec::new();
        let mut grpc_routes = Vec::new();
        for route in self.policy.routes.in_namespace(ns) {
            if !route.parents.contains(&server.name)
                || !self.route_accepted(config, route, &server.name)
            {
                continue;
            }
            let authorizations = self.route_authorizations(route);
            let reference = RouteRef::Resource {
                group: route.group.clone(),
                kind: route.kind.clone(),
                name: route.name.clone(),
            };
            match &route.rules {
                RouteRules::Http(rules) => http_routes.push(InboundRoute {
                    reference,
                    creation_timestamp: route.created,
                    hostnames: route.hostnames.clone(),
                    rules: rules.clone(),
                    authorizations,
                }),
                RouteRules::Grpc(rules) => grpc_routes.push(InboundRoute {
                    reference,
                    creation_timestamp: route.created,
                    hostnames: route.hostnames.clone(),
                    rules: rules.clone(),
                    authorizations,
                }),
            }
        }
        if http_routes.is_empty() {
            http_routes = default_http_routes(config, workload, port);
        }
        if grpc_routes.is_empty() {
            grpc_routes = vec![default_grpc_route()];
        }
        sort_routes(&mut http_routes);
        sort_routes(&mut grpc_routes);

        // Of a Server's policies the status controller accepts the oldest (with a creation
        // time before those without, then by name, §7.3). Offline mode applies that rule
        // itself; kube mode reads the status, and should a stale one show two accepted, picks
        // the one the controller will keep.
        let rate_limit = self
            .policy
            .rate_limits
            .in_namespace(ns)
            .filter(|r| r.server == server.name && (config.compute_route_acceptance || r.accepted))
            .min_by_key(|r| (r.created.is_none(), r.created, &r.name))
            .map(|r| RateLimit {
                name: r.name.clone(),
                total: r.total,
                identity: r.identity,
                overrides: r
                    .overrides
                    .iter()
                    .map(|(rps, ids)| RateLimitOverride {
                        requests_per_second: *rps,
                        identities: ids.clone(),
                    })
                    .collect(),
            });
        InboundServer {
            reference: ServerRef::Server(server.name.clone()),
            protocol,
            authorizations: Arc::new(authorizations),
            http_routes: Arc::new(http_routes),
            grpc_routes: Arc::new(grpc_routes),
            rate_limit,
        }
    }

    /// A route is accepted for a Server when its status says so (written by the status
    /// controller), or, in offline mode, when that Server exists in the route's namespace.
    fn route_accepted(
        &self,
        config: &InboundConfig,
        route: &InboundRouteInfo,
        server: &str,
    ) -> bool {
        if config.compute_route_acceptance {
            self.accepted_by_server(route, server)
        } else {
            route.accepted.contains(server)
        }
    }

    /// The authorizations of AuthorizationPolicies targeting `route` (§4.6).
    fn route_authorizations(
        &self,
        route: &InboundRouteInfo,
    ) -> BTreeMap<AuthorizationRef, ClientAuthorization> {
        self.policy
            .authorization_policies
            .in_namespace(&route.namespace)
            .filter(|p| match &p.target {
                PolicyTarget::Route { group, kind, name } => {
                    group.eq_ignore_ascii_case(&route.group)
                        && kind.eq_ignore_ascii_case(&route.kind)
                        && name.eq_ignore_ascii_case(&route.name)
                }
                _ => false,
            })
            .filter_map(|p| {
                Some((
                    AuthorizationRef::AuthorizationPolicy(p.name.clone()),
                    self.policy_authorization(p)?,
                ))
            })
            .collect()
    }

    /// Whether the status controller accepts `route` for Server `server` (offline mode's
    /// acceptance): the route names it as a parent, it exists in the route's namespace, and no
    /// more specific route kind claims it (spec/policy.md §7.2, the status writer's own rules).
    fn accepted_by_server(&self, route: &InboundRouteInfo, server: &str) -> bool {
        let group = [POLICY_GROUP, GATEWAY_GROUP]
            .into_iter()
            .find(|g| *g == route.group);
        let kind = ["HTTPRoute", "GRPCRoute"]
            .into_iter()
            .find(|k| *k == route.kind);
        let (Some(group), Some(kind)) = (group, kind) else {
            return false;
        };
        let key = RouteKey {
            group,
            kind,
            namespace: route.namespace.clone(),
            name: route.name.clone(),
        };
        let parent = ParentKey {
            kind: ParentKind::Server,
            namespace: route.namespace.clone(),
            name: server.to_string(),
            port: None,
        };
        route.parents.contains(server) && self.route_parents.accepts(&key, &parent, self)
    }

    /// What an AuthorizationPolicy admits, or `None` while a referenced authentication is
    /// missing or the references are ambiguous (§4.5 step 2).
    fn policy_authorization(
        &self,
        policy: &AuthorizationPolicyInfo,
    ) -> Option<ClientAuthorization> {
        let mut identities: Option<Vec<IdentityMatch>> = None;
        let mut networks: Option<Vec<Network>> = None;
        for authn in &policy.authentications {
            match authn {
                AuthenticationRef::MeshTls { namespace, name } => {
                    let mtls = self.policy.mesh_tls_authentications.get(namespace, name)?;
                    if identities.replace(mtls.identities.clone()).is_some() {
                        return None;
                    }
                }
                AuthenticationRef::ServiceAccount { identity } => {
                    if identities
                        .replace(vec![IdentityMatch::Exact(identity.clone())])
                        .is_some()
                    {
                        return None;
                    }
                }
                AuthenticationRef::Network { namespace, name } => {
                    let net = self.policy.network_authentications.get(namespace, name)?;
                    if networks.replace(net.networks.clone()).is_some() {
                        return None;
                    }
                }
            }
        }
        Some(ClientAuthorization {
            networks: networks.unwrap_or_else(|| vec![network("0.0.0.0/0"), network("::/0")]),
            authentication: match identities {
                Some(ids) => ClientAuthentication::TlsAuthenticated(ids),
                None => ClientAuthentication::Unauthenticated,
            },
        })
    }
}

/// Never used: a workload checked to exist always has a server. Kept total rather than
/// panicking inside the index lock.
fn unreachable_default(config: &InboundConfig) -> InboundServer {
    InboundServer {
        reference: ServerRef::Default(config.default_policy.name().into()),
        protocol: InboundProtocol::Detect {
            timeout: DETECT_TIMEOUT,
        },
        authorizations: Arc::new(config.default_policy.authorizations(config)),
        http_routes: Arc::default(),
        grpc_routes: Arc::default(),
        rate_limit: None,
    }
}

/// The server of a port no Server covers (§4.4).
fn default_server(config: &InboundConfig, workload: &Workload<'_>, port: u16) -> InboundServer {
    let annotations = workload.annotations();
    let mut policy = annotations
        .get(DEFAULT_INBOUND_POLICY_ANNOTATION)
        .and_then(|p| p.parse().ok())
        .unwrap_or(config.default_policy);
    let require_identity = annotations
        .get(REQUIRE_IDENTITY_PORTS_ANNOTATION)
        .map(|list| PortSet::parse(list).0)
        .is_some_and(|ports| ports.contains(port));
    if require_identity {
        policy = match policy {
            DefaultPolicy::AllUnauthenticated => DefaultPolicy::AllAuthenticated,
            DefaultPolicy::ClusterUnauthenticated => DefaultPolicy::ClusterAuthenticated,
            other => other,
        };
    }
    let opaque = workload.opaque_ports().is_some_and(|p| p.contains(port));
    InboundServer {
        reference: ServerRef::Default(policy.name().to_string()),
        protocol: if opaque {
            InboundProtocol::Opaque
        } else {
            InboundProtocol::Detect {
                timeout: DETECT_TIMEOUT,
            }
        },
        authorizations: Arc::new(policy.authorizations(config)),
        http_routes: Arc::new(default_http_routes(config, workload, port)),
        grpc_routes: Arc::default(),
        rate_limit: None,
    }
}

/// The catch-all `default` route, and the `probe` route when the workload has probe paths on
/// this port and probe networks are configured (§4.6).
fn default_http_routes(
    config: &InboundConfig,
    workload: &Workload<'_>,
    port: u16,
) -> Vec<InboundRoute<HttpRule>> {
    let mut routes = vec![InboundRoute {
        reference: RouteRef::Default("default".into()),
        creation_timestamp: None,
        hostnames: vec![],
        rules: vec![HttpRule {
            matches: vec![HttpRouteMatch {
                path: Some(PathMatch::Prefix("/".into())),
                ..HttpRouteMatch::default()
            }],
            filters: vec![],
        }],
        authorizations: BTreeMap::new(),
    }];
    let paths = workload.probe_paths(port);
    if !paths.is_empty() && !config.probe_networks.is_empty() {
        routes.push(InboundRoute {
            reference: RouteRef::Default("probe".into()),
            creation_timestamp: None,
            hostnames: vec![],
            rules: vec![HttpRule {
                matches: paths
                    .iter()
                    .map(|p| HttpRouteMatch {
                        path: Some(PathMatch::Exact(p.to_string())),
                        method: Some("GET".into()),
                        ..HttpRouteMatch::default()
                    })
                    .collect(),
                filters: vec![],
            }],
            authorizations: BTreeMap::from([(
                AuthorizationRef::Default("probe".into()),
                ClientAuthorization {
                    networks: config
                        .probe_networks
                        .iter()
                        .map(|net| Network {
                            net: *net,
                            except: vec![],
                        })
                        .collect(),
                    authentication: ClientAuthentication::Unauthenticated,
                },
            )]),
        });
    }
    routes
}

fn default_grpc_route() -> InboundRoute<GrpcRule> {
    InboundRoute {
        reference: RouteRef::Default("default".into()),
        creation_timestamp: None,
        hostnames: vec![],
        rules: vec![GrpcRule {
            matches: vec![GrpcRouteMatch::default()],
            filters: vec![],
        }],
        authorizations: BTreeMap::new(),
    }
}

/// Routes with a creation time first, oldest first; then resources before defaults,
/// resources by name, group, kind, defaults by name (§4.8).
fn sort_routes<R>(routes: &mut [InboundRoute<R>]) {
    fn key<R>(r: &InboundRoute<R>) -> (bool, Option<Timestamp>, u8, &str, &str, &str) {
        let (rank, name, group, kind) = match &r.reference {
            RouteRef::Resource { group, kind, name } => {
                (0, name.as_str(), group.as_str(), kind.as_str())
            }
            RouteRef::Default(name) => (1, name.as_str(), "", ""),
        };
        (
            r.creation_timestamp.is_none(),
            r.creation_timestamp,
            rank,
            name,
            group,
            kind,
        )
    }
    routes.sort_by(|a, b| key(a).cmp(&key(b)));
}
