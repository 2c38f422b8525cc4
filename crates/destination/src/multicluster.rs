//! `Get` for multicluster Services (spec/destination.md §C.8, issue 16): remote discovery (a
//! mirror Service labelled with the cluster and Service it stands for) and federated Services
//! (annotations listing local and remote members).
//!
//! Both are a [`MulticlusterStream`]: the union of its members' endpoints, each member one
//! Service port's topic in one cluster's [`DiscoveryIndex`] (the local one, or a linked
//! cluster's from the [`ClusterStore`]), never copied into the local index. The stream follows
//! the local Service (its labels and annotations, live), the linked clusters (a link that goes
//! takes its members' endpoints away with a `Remove`; one that comes back brings them back),
//! and every member's topic, and sends the difference of the union it last sent. It is behind
//! (the introspection API, `streams_behind`) while one of those holds a newer view than the
//! one its client was last handed the updates of ([`MulticlusterStream::behind`]).
//!
//! Remote members' identities are in their cluster's trust domain; they get no node or zone
//! filter (§C.8.1), only the address family; their `Add`s carry the set metric label
//! `target_cluster=<cluster>` (a project decision: upstream sends the remote slices' labels
//! only, so neither the proxy's metrics nor a client could tell the clusters apart). The local member of a federated Service is
//! filtered as a local `Get` is.

use linkerd_index::{
    ClusterStore, DiscoveryIndex, Endpoint, EndpointsKey, EndpointsView, LinkedCluster, ObjectRef,
    ServiceInfo, multicluster::Clusters,
};
use linkerd_runtime::introspect::LastSent;
use linkerd2_proxy_api::destination::{
    AddrSet, NoEndpoints, Update, WeightedAddr, WeightedAddrSet, update,
};
use prometheus_client::metrics::counter::Counter;
use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
    time::Instant,
};
use tokio::sync::watch;

use crate::{
    endpoints::{StreamFilter, UPDATE_TYPE},
    translate::EndpointTranslator,
};

/// Service label: the linked cluster a remote-discovery mirror Service stands for.
pub const REMOTE_DISCOVERY_LABEL: &str = "multicluster.linkerd.io/remote-discovery";
/// Service label: the Service, in the linked cluster, a mirror Service stands for.
pub const REMOTE_SERVICE_LABEL: &str = "multicluster.linkerd.io/remote-service";
/// Service annotation of a federated Service: its remote members, `svc@cluster,...`.
pub const REMOTE_DISCOVERY_ANNOTATION: &str = "multicluster.linkerd.io/remote-discovery";
/// Service annotation of a federated Service: its local member.
pub const LOCAL_DISCOVERY_ANNOTATION: &str = "multicluster.linkerd.io/local-discovery";
/// Set metric label of a remote member's `Add`s: the linked cluster its addresses are in (the
/// label the Endpoints of gateway-mirrored Services carry, spec §C.3); `dst-diag endpoints`
/// shows it as each address's cluster.
pub const TARGET_CLUSTER_LABEL: &str = "target_cluster";

/// How `Get` serves a Service (spec §C.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// An ordinary Service: its own endpoints.
    Local,
    /// Remote discovery: `service` (same namespace) in linked cluster `cluster`.
    Remote { cluster: String, service: String },
    /// The remote-discovery label without the remote-service label (`FailedPrecondition`).
    RemoteWithoutService { cluster: String },
    /// A federated Service: the union of its members.
    Federated(Vec<Member>),
}

/// One member of a multicluster Service: a Service of the same namespace in one cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    /// The linked cluster; `None`: the local cluster.
    pub cluster: Option<String>,
    pub service: String,
}

/// The `Get` stream of a remote-discovery or federated Service.
pub struct MulticlusterStream {
    /// The local Service's own topic: how its labels and annotations are followed.
    own: linkerd_index::topic::Receiver<EndpointsView>,
    clusters: watch::Receiver<Arc<Clusters>>,
    local: DiscoveryIndex,
    namespace: String,
    port: u16,
    hostname: Option<String>,
    filter: StreamFilter,
    local_translator: Arc<EndpointTranslator>,
    members: BTreeMap<Member, Subscribed>,
    /// The views (shared with the members' topics) and translators of each member, in member
    /// order, that what the client holds was computed from.
    sent_from: Vec<(Member, SentFrom)>,
    /// The Service's own view the last updates were computed from.
    own_sent: Option<Arc<EndpointsView>>,
    /// When the index saw the change behind the last updates (see [`Self::change_seen`]).
    seen: Option<Instant>,
    /// Addresses of those views that translation left out: not sent. Usually empty.
    omitted: HashSet<SocketAddr>,
    /// The number of addresses the client holds.
    held: usize,
    /// Members named by the annotation whose cluster is not linked, already reported.
    reported: BTreeSet<Member>,
    unknown_cluster: Counter,
    service_name: String,
    started: bool,
    /// Whether the Service exists, as the client was last told: for a remote-discovery
    /// Service, its remote Service (see [`MulticlusterStream::exists`]).
    exists: bool,
    /// What the client has been handed, shared with the stream's introspection record.
    handed: Arc<Handed>,
    /// What the last updates were computed from, until the client is handed them
    /// ([`MulticlusterStream::handed`]).
    computed: Option<Views>,
}

/// What a [`MulticlusterStream`]'s client has been handed, shared by the stream and its
/// introspection record: how to read the current view of each topic the stream follows
/// without advancing it, and the views the updates the client was handed were computed from.
/// The stream is behind when any of those topics' current views is not that view (the same
/// test as a local stream's, `linkerd_runtime::introspect`).
struct Handed {
    own: linkerd_index::topic::Receiver<EndpointsView>,
    clusters: watch::Receiver<Arc<Clusters>>,
    /// `None` until the client is handed its first message.
    views: Mutex<Option<Views>>,
}

/// The views one change's updates were computed from: the topics' own `Arc`s, never copies
/// (a stream holds two of these at most, each a few words and two per member). The receivers
/// keep a member's topic subscribed until views without it are handed.
struct Views {
    own: Arc<EndpointsView>,
    clusters: Arc<Clusters>,
    /// Each subscribed member's topic, to read its current view, and the view used.
    members: Vec<(
        linkerd_index::topic::Receiver<EndpointsView>,
        Arc<EndpointsView>,
    )>,
}

/// What one member's part of an update was computed from.
#[derive(Clone)]
struct SentFrom {
    view: Arc<EndpointsView>,
    translator: Arc<EndpointTranslator>,
}

/// A member's subscription.
struct Subscribed {
    rx: linkerd_index::topic::Receiver<EndpointsView>,
    translator: Arc<EndpointTranslator>,
    /// The linked cluster it reads (`None`: local), to see a link restarted on a new index.
    cluster: Option<Arc<LinkedCluster>>,
}

// === impl Dispatch ===

impl Dispatch {
    /// How `service` is served: federated when either federated annotation is present (even
    /// empty), else remote discovery when the remote-discovery label is, else local
    /// (spec §C.2). Remote members are the annotation's `svc@cluster` entries (split on `,`,
    /// exactly one `@`, nothing trimmed); invalid entries are skipped. Invalid entries, and
    /// entries with whitespace (kept, but never matching), are logged once per annotation value
    /// of a Service.
    pub fn of(service: &ServiceInfo) -> Self {
        let local = service.annotations.get(LOCAL_DISCOVERY_ANNOTATION);
        let remote = service.annotations.get(REMOTE_DISCOVERY_ANNOTATION);
        if local.is_some() || remote.is_some() {
            let mut members = Vec::new();
            if let Some(local) = local.filter(|l| !l.is_empty()) {
                members.push(Member {
                    cluster: None,
                    service: local.clone(),
                });
            }
            let value = remote.map(String::as_str).unwrap_or("");
            let (mut invalid, mut spaced) = (Vec::new(), Vec::new());
            for entry in value.split(',') {
                let mut parts = entry.split('@');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(svc), Some(cluster), None) if !svc.is_empty() && !cluster.is_empty() => {
                        if entry.contains(char::is_whitespace) {
                            spaced.push(entry);
                        }
                        members.push(Member {
                            cluster: Some(cluster.to_string()),
                            service: svc.to_string(),
                        });
                    }
                    _ if entry.is_empty() => {}
                    _ => invalid.push(entry),
                }
            }
            let name = format!("{}/{}", service.namespace, service.name);
            if !(invalid.is_empty() && spaced.is_empty()) && first_warning(&name, value) {
                for entry in invalid {
                    tracing::warn!(service = %name, %entry, "ignoring invalid {REMOTE_DISCOVERY_ANNOTATION} entry (want svc@cluster)");
                }
                // Kept as written, as upstream does (spec §C.8.2), but no Kubernetes name holds
                // whitespace: such a member never has endpoints, which nothing else would say.
                for entry in spaced {
                    tracing::warn!(service = %name, entry = ?entry, "{REMOTE_DISCOVERY_ANNOTATION} entry has whitespace in its service or cluster, which no name can match (entries are not trimmed)");
                }
            }
            members.sort();
            members.dedup();
            return Self::Federated(members);
        }
        if let Some(cluster) = service.labels.get(REMOTE_DISCOVERY_LABEL) {
            return match service.labels.get(REMOTE_SERVICE_LABEL) {
                Some(remote) => Self::Remote {
                    cluster: cluster.clone(),
                    service: remote.clone(),
                },
                None => Self::RemoteWithoutService {
                    cluster: cluster.clone(),
                },
            };
        }
        Self::Local
    }

    /// Whether [`Self::of`] `service` is not [`Self::Local`]: it has either federated
    /// annotation or the remote-discovery label. Three map lookups, for each wake of a local
    /// stream.
    pub fn is_multicluster(service: &ServiceInfo) -> bool {
        service.annotations.contains_key(LOCAL_DISCOVERY_ANNOTATION)
            || service
                .annotations
                .contains_key(REMOTE_DISCOVERY_ANNOTATION)
            || service.labels.contains_key(REMOTE_DISCOVERY_LABEL)
    }

    fn members(&self) -> Option<Vec<Member>> {
        match self {
            Self::Local | Self::RemoteWithoutService { .. } => None,
            Self::Remote { cluster, service } => Some(vec![Member {
                cluster: Some(cluster.clone()),
                service: service.clone(),
            }]),
            Self::Federated(members) => Some(members.clone()),
        }
    }
}

/// The remote-discovery annotation value last warned about, by Service (`namespace/name`):
/// [`Dispatch::of`] runs when each stream of the Service opens and on each of its wakes, and a
/// value's problems are logged once, not that often. Holds only Services whose annotation had
/// a problem.
static WARNED: std::sync::LazyLock<Mutex<HashMap<String, String>>> =
    std::sync::LazyLock::new(Mutex::default);

/// Whether `value` is not the annotation value last warned about for `service`; it is now.
fn first_warning(service: &str, value: &str) -> bool {
    let mut warned = WARNED.lock().unwrap_or_else(PoisonError::into_inner);
    if warned.get(service).is_some_and(|last| last == value) {
        return false;
    }
    warned.insert(service.to_string(), value.to_string());
    true
}

// === impl MulticlusterStream ===

/// What a [`MulticlusterStream`] serves: the requested Service port and who asks.
pub struct Request {
    pub namespace: String,
    pub service: String,
    pub port: u16,
    pub hostname: Option<String>,
    pub filter: StreamFilter,
}

impl MulticlusterStream {
    /// The stream of the Service `own` is the topic of. `unknown_cluster` counts members
    /// naming a cluster that is not linked.
    pub fn new(
        own: linkerd_index::topic::Receiver<EndpointsView>,
        store: &ClusterStore,
        local: DiscoveryIndex,
        local_translator: Arc<EndpointTranslator>,
        request: Request,
        unknown_cluster: Counter,
    ) -> Self {
        let clusters = store.clusters();
        let handed = Arc::new(Handed {
            own: own.clone(),
            clusters: clusters.clone(),
            views: Mutex::new(None),
        });
        Self {
            own,
            clusters,
            local,
            namespace: request.namespace,
            port: request.port,
            hostname: request.hostname,
            filter: request.filter,
            local_translator,
            members: BTreeMap::new(),
            sent_from: Vec::new(),
            own_sent: None,
            seen: None,
            omitted: HashSet::new(),
            held: 0,
            reported: BTreeSet::new(),
            unknown_cluster,
            service_name: request.service,
            started: false,
            exists: false,
            handed,
            computed: None,
        }
    }

    /// Whether the stream is behind, for its introspection record
    /// (`StreamRegistry::open_following_several`): its client has been handed nothing yet, or
    /// not the updates of the current views of the Service's own topic, the linked clusters'
    /// list and the topics of the members it had then. A member added or linked since comes
    /// with a newer Service view or cluster list.
    pub fn behind(&self) -> impl Fn() -> bool + Send + Sync + 'static {
        let handed = self.handed.clone();
        move || handed.behind()
    }

    /// The client has been handed the last updates (HTTP/2 took the last of them): it holds
    /// what they were computed from.
    pub fn handed(&mut self) {
        if let Some(views) = self.computed.take() {
            self.handed.hand(views);
        }
    }

    /// The number of addresses the client holds.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Whether the Service exists, as of the last updates: a federated Service, itself; a
    /// remote-discovery Service, the Service of the linked cluster it stands for (false while
    /// that cluster is not linked), as upstream's watcher of the remote cluster tells it.
    pub fn exists(&self) -> bool {
        self.exists
    }

    /// When the index saw the change the last updates come from, for `stream_convergence_seconds`
    /// as a local stream measures it from its newest view: the newest change among the
    /// Service's own topic and its members' topics whose views differ from those the updates
    /// before were computed from. `None` for the first updates (they answer the request), and
    /// for a change of the links alone or of a member's subscription (a member subscribed anew,
    /// a link restarted), which no index change stamps.
    pub fn change_seen(&self) -> Option<Instant> {
        self.seen
    }

    /// What the client holds after the last updates, as one `Update` made when asked for (the
    /// introspection API), as a local stream's ([`crate::endpoints::EndpointsStream::holding`]):
    /// an `Add` of the union, recomputed from the views it was sent from, or `NoEndpoints`.
    /// `None` before the first message.
    ///
    /// Each member's `Add`s carried its own set labels (a remote member's `target_cluster`);
    /// a proxy keeps each address's labels as its set's and its own together (its own win), so
    /// the one `Add` has the set labels its members' sets share, and each address the rest of
    /// its member's.
    pub fn holding(&self) -> Option<LastSent> {
        if !self.started {
            return None;
        }
        let sent_from = self.sent_from.clone();
        let filter = self.filter.clone();
        let exists = self.exists;
        Some(LastSent::lazy(UPDATE_TYPE, move || {
            let update = held_set(&filter, &sent_from).map_or(
                Update {
                    update: Some(update::Update::NoEndpoints(NoEndpoints { exists })),
                },
                |set| Update {
                    update: Some(update::Update::Add(set)),
                },
            );
            prost::Message::encode_to_vec(&update)
        }))
    }

    /// Waits for a change and returns the updates it causes (the first call returns at once,
    /// with the whole set or `NoEndpoints`). `None` when the stream ends: the Service was
    /// deleted or is no longer multicluster (spec §C.8.2), or the server is going away.
    pub async fn next_updates(&mut self) -> Option<Vec<Update>> {
        loop {
            if self.started {
                self.changed().await?;
            }
            let view = self.own.borrow_and_update().clone();
            let dispatch = view.service.as_deref().map(Dispatch::of);
            let members = dispatch.as_ref().and_then(Dispatch::members)?;
            let clusters = self.clusters.borrow_and_update().clone();
            self.subscribe(&members, &clusters);
            let remote = matches!(dispatch, Some(Dispatch::Remote { .. }));
            let updates = self.diff(&view, remote);
            // `diff` read the members' views in `members` order into `sent_from`.
            let views = Views {
                own: view.clone(),
                clusters,
                members: (self.members.values())
                    .zip(&self.sent_from)
                    .map(|(subscribed, (_, from))| (subscribed.rx.clone(), from.view.clone()))
                    .collect(),
            };
            if !self.started || !updates.is_empty() {
                self.started = true;
                self.computed = Some(views);
                return Some(updates);
            }
            // Nothing to send: the client holds what this change makes once it holds the
            // updates before it (else a change that is not the client's would leave the stream
            // behind until its next update).
            match &mut self.computed {
                Some(computed) => *computed = views,
                None => self.handed.hand(views),
            }
        }
    }

    /// Waits until the Service, the linked clusters or a member's endpoints change. `None`
    /// when the Service's topic or the cluster store is gone.
    async fn changed(&mut self) -> Option<()> {
        use futures::FutureExt;
        let mut own = self.own.clone();
        let mut clusters = self.clusters.clone();
        let mut waits: Vec<futures::future::BoxFuture<'static, Option<()>>> = vec![
            async move { own.changed().await.ok() }.boxed(),
            async move { clusters.changed().await.ok() }.boxed(),
        ];
        for member in self.members.values() {
            let mut rx = member.rx.clone();
            waits.push(
                async move {
                    if rx.changed().await.is_err() {
                        // A stopped cluster's topic: the cluster store says when it goes.
                        futures::future::pending::<()>().await;
                    }
                    Some(())
                }
                .boxed(),
            );
        }
        futures::future::select_all(waits).await.0
    }

    /// Subscribes to `members` whose cluster is linked, and drops the others' subscriptions.
    fn subscribe(&mut self, members: &[Member], clusters: &Clusters) {
        let mut next = BTreeMap::new();
        for member in members {
            let linked = match &member.cluster {
                None => None,
                Some(name) => match clusters.get(name) {
                    Some(cluster) => Some(cluster.clone()),
                    None => {
                        if self.reported.insert(member.clone()) {
                            tracing::warn!(service = %format!("{}/{}", self.namespace, self.service_name), member = %format!("{}@{name}", member.service), "member's cluster is not linked; it has no endpoints until it is");
                            self.unknown_cluster.inc();
                        }
                        continue;
                    }
                },
            };
            self.reported.remove(member);
            let keep = self
                .members
                .remove(member)
                .filter(|s| match (&s.cluster, &linked) {
                    (None, None) => true,
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                });
            let subscribed = match keep {
                Some(s) => s,
                None => {
                    let key = EndpointsKey {
                        service: ObjectRef {
                            namespace: self.namespace.clone(),
                            name: member.service.clone(),
                        },
                        port: self.port,
                        hostname: self.hostname.clone(),
                    };
                    match &linked {
                        None => Subscribed {
                            rx: self.local.endpoints(key),
                            translator: self.local_translator.clone(),
                            cluster: None,
                        },
                        Some(cluster) => {
                            let mut config = self.local_translator.config().clone();
                            config.trust_domain = cluster.trust_domain.clone();
                            Subscribed {
                                rx: cluster.index.endpoints(key),
                                translator: Arc::new(EndpointTranslator::new(config)),
                                cluster: Some(cluster.clone()),
                            }
                        }
                    }
                }
            };
            next.insert(member.clone(), subscribed);
        }
        self.members = next;
    }

    /// The updates from what was sent to the union of the members' endpoints now.
    ///
    /// What was sent is recomputed from the views it was sent from (the same union rule), so
    /// nothing per address is kept between updates; only the addresses of endpoints that
    /// changed, or moved to another member, are translated again.
    /// `own`: the local Service's view; `remote`: it is a remote-discovery Service, which
    /// exists when its one member does.
    fn diff(&mut self, own: &Arc<EndpointsView>, remote: bool) -> Vec<Update> {
        let exists = own.exists();
        let zone = self.filter.client_zone.clone();
        let current: Vec<(Member, SentFrom)> = self
            .members
            .iter_mut()
            .map(|(member, subscribed)| {
                let from = SentFrom {
                    view: subscribed.rx.borrow_and_update().clone(),
                    translator: subscribed.translator.clone(),
                };
                (member.clone(), from)
            })
            .collect();
        // The unions, by address: a member earlier in order wins an address two claim.
        let new = union(&self.filter, &current);
        let old = union(&self.filter, &self.sent_from);

        let mut omitted = HashSet::new();
        let mut added: BTreeMap<usize, Vec<WeightedAddr>> = BTreeMap::new();
        for (addr, &(i, ep)) in &new {
            let (member, from) = &current[i];
            let unchanged = old.get(addr).is_some_and(|&(j, prev)| {
                let (was, sent_from) = &self.sent_from[j];
                was == member
                    && (Arc::ptr_eq(prev, ep) || **prev == **ep)
                    && (Arc::ptr_eq(&sent_from.translator, &from.translator)
                        || sent_from.translator.config().trust_domain
                            == from.translator.config().trust_domain)
            });
            if unchanged {
                // Translation depends on the endpoint and the translator only: an address
                // left out before is left out again, without logging it again.
                if self.omitted.contains(addr) {
                    omitted.insert(*addr);
                }
                continue;
            }
            match from.translator.weighted_addr(ep, zone.as_deref()) {
                Ok(weighted) => added.entry(i).or_default().push(weighted),
                Err(error) => {
                    tracing::warn!(%error, %addr, "leaving the address out of the update");
                    omitted.insert(*addr);
                }
            }
        }

        let mut updates = Vec::new();
        for (i, mut addrs) in added {
            let (member, from) = &current[i];
            addrs.sort_by_key(|a| a.addr.map(|a| SocketAddr::try_from(a).ok()));
            updates.push(Update {
                update: Some(update::Update::Add(WeightedAddrSet {
                    addrs,
                    metric_labels: set_labels(member, &from.view),
                })),
            });
        }
        // What the client holds and no longer gets: gone from the union, or left out now.
        let mut removed: Vec<SocketAddr> = old
            .keys()
            .filter(|addr| !self.omitted.contains(addr))
            .filter(|addr| !new.contains_key(addr) || omitted.contains(addr))
            .copied()
            .collect();
        removed.sort();
        if !removed.is_empty() {
            updates.push(Update {
                update: Some(update::Update::Remove(AddrSet {
                    addrs: removed.into_iter().map(Into::into).collect(),
                })),
            });
        }
        let held = new.len() - omitted.len();
        let exists =
            exists && (!remote || current.first().is_some_and(|(_, from)| from.view.exists()));
        // Decision 1: the end of all endpoints is said explicitly, and so is a first empty set;
        // with none, a change of whether the Service exists is said too.
        if held == 0 && (!self.started || self.held > 0 || self.exists != exists) {
            updates.push(Update {
                update: Some(update::Update::NoEndpoints(NoEndpoints { exists })),
            });
        }
        // Read while the views are their topics' current ones, as the index keeps their times
        // only that long.
        self.seen = None;
        if self.started {
            if self
                .own_sent
                .as_ref()
                .is_some_and(|was| !Arc::ptr_eq(was, own))
            {
                self.seen = linkerd_index::change_seen_at(own);
            }
            for (member, from) in &current {
                let changed = self
                    .sent_from
                    .iter()
                    .find(|(was, _)| was == member)
                    .is_some_and(|(_, was)| !Arc::ptr_eq(&was.view, &from.view));
                if changed {
                    self.seen = self.seen.max(linkerd_index::change_seen_at(&from.view));
                }
            }
        }
        self.held = held;
        self.exists = exists;
        self.omitted = omitted;
        self.sent_from = current;
        self.own_sent = Some(own.clone());
        updates
    }
}

// === impl Handed ===

impl Handed {
    /// The client holds what `views` make.
    fn hand(&self, views: Views) {
        *self.views.lock().unwrap_or_else(PoisonError::into_inner) = Some(views);
    }

    fn behind(&self) -> bool {
        let views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(views) = views.as_ref() else {
            // Before its first message a stream is behind: it has a set to send.
            return true;
        };
        let clusters = self.clusters.borrow().clone();
        !Arc::ptr_eq(&views.own, &self.own.borrow())
            || !Arc::ptr_eq(&views.clusters, &clusters)
            || (views.members.iter()).any(|(rx, view)| !Arc::ptr_eq(view, &rx.borrow()))
    }
}

/// The set labels of `member`'s `Add`s: its view's, and for a remote member the cluster its
/// addresses are in, under the label mirrored Services use for it.
fn set_labels(member: &Member, view: &EndpointsView) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = view
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(cluster) = &member.cluster {
        labels.insert(TARGET_CLUSTER_LABEL.to_string(), cluster.clone());
    }
    labels
}

/// The whole set a client of `members` holds, as one `Add` in address order (see
/// [`MulticlusterStream::holding`]); `None` when it holds nothing. Translation depends on the
/// endpoint and the translator only, so what it left out when sent it leaves out again.
fn held_set(filter: &StreamFilter, members: &[(Member, SentFrom)]) -> Option<WeightedAddrSet> {
    let zone = filter.client_zone.as_deref();
    let mut by_member: BTreeMap<usize, Vec<WeightedAddr>> = BTreeMap::new();
    for (i, ep) in union(filter, members).into_values() {
        if let Ok(addr) = members[i].1.translator.weighted_addr(ep, zone) {
            by_member.entry(i).or_default().push(addr);
        }
    }
    let sets: Vec<(usize, HashMap<String, String>)> = by_member
        .keys()
        .map(|&i| (i, set_labels(&members[i].0, &members[i].1.view)))
        .collect();
    let (_, first) = sets.first()?;
    let shared: HashMap<String, String> = first
        .iter()
        .filter(|(k, v)| sets.iter().all(|(_, set)| set.get(*k) == Some(*v)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut addrs = Vec::new();
    for (i, set) in sets {
        for mut addr in by_member.remove(&i).unwrap_or_default() {
            for (k, v) in set.iter().filter(|(k, _)| !shared.contains_key(*k)) {
                addr.metric_labels
                    .entry(k.clone())
                    .or_insert_with(|| v.clone());
            }
            addrs.push(addr);
        }
    }
    addrs.sort_by_key(|a| a.addr.map(|a| SocketAddr::try_from(a).ok()));
    Some(WeightedAddrSet {
        addrs,
        metric_labels: shared,
    })
}

/// The union of `members`' endpoints, filtered for the client, by address: the index of the
/// member each address comes from (the first that has it) and its endpoint.
fn union<'a>(
    filter: &StreamFilter,
    members: &'a [(Member, SentFrom)],
) -> HashMap<SocketAddr, (usize, &'a Arc<Endpoint>)> {
    let mut union = HashMap::new();
    for (i, (member, from)) in members.iter().enumerate() {
        let set = if member.cluster.is_none() {
            filter.apply(&from.view)
        } else {
            filter.apply_family_only(&from.view)
        };
        for (_, ep) in set {
            union.entry(ep.addr).or_insert((i, ep));
        }
    }
    union
}

#[cfg(test)]
mod tests;
