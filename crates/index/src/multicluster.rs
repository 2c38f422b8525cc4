//! The multicluster cluster store (spec/destination.md §J, issue 16): one [`DiscoveryIndex`]
//! per linked cluster, following the link Secrets of the control-plane namespace.
//!
//! A link is a Secret of type [`LINK_SECRET_TYPE`] labelled [`CLUSTER_NAME_LABEL`]
//! ([`SecretInfo::link`]). When one appears, the linked cluster's discovery index is built and
//! fed from its own source: the directory given for that cluster name
//! (`--linked-cluster-state NAME=DIR`, offline mode), else a client of the Secret's
//! `kubeconfig`. When the Secret changes the cluster's watches restart on a new index; when it
//! goes they stop and the index is dropped. Streams find the clusters through
//! [`ClusterStore::clusters`], and see a link go or come back there.
//!
//! A Secret that cannot be used (no `kubeconfig`, a malformed one, no trust or cluster domain,
//! a directory that cannot be read) is logged with its namespace/name, counted in
//! `multicluster_link_errors_total{reason}`, and skipped; other links and the local cluster
//! are not affected. A cluster whose `--linked-cluster-state` directory is not there yet is
//! linked all the same and syncing (then `unreachable`, as one whose API server does not
//! answer) until the directory can be read, which is tried after 1 s and then up to every
//! 30 s; one whose path is not a directory is shown `unreachable` and its start tried again
//! as often. A linked cluster whose API server does not answer its initial lists is
//! logged and shown `unreachable` in `multicluster_linked_clusters{cluster,state}`; whatever
//! its index holds (nothing, or the last known endpoints) is kept until its Secret goes. A
//! cluster whose watches fail later (its API server gone, or its directory no longer listed) is
//! shown `unreachable`, logged and counted the same way, keeps its endpoints, and is
//! `connected` again when its watches get answers (its directory is listed again).
//!
//! When a link goes, its series (state, cache sizes) are removed.

use k8s_openapi::api::core::v1::Secret;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use crate::{
    discovery::DiscoveryIndex,
    metrics::IndexMetrics,
    model::{CLUSTER_NAME_LABEL, LINK_SECRET_TYPE, LinkSecret, ObjectRef, SecretInfo},
    source::{
        ClusterSource, Event,
        kube::KubeSource,
        offline::{OfflineSource, RETRY_MAX, RETRY_MIN},
    },
    watches::{Started, WatchScope, Watches},
};

/// How long a linked cluster may take to deliver its initial lists before it is reported
/// unreachable (it keeps being retried): the default of
/// [`ClusterStoreConfig::unreachable_after`].
pub const UNREACHABLE_AFTER: Duration = Duration::from_secs(10);

/// The states of a linked cluster in `multicluster_linked_clusters{cluster,state}`: `syncing`
/// from its start until its initial lists are in or [`ClusterStoreConfig::unreachable_after`]
/// has passed, `connected` once they are in and while its API server answers, `unreachable`
/// when its lists are late or its API server stops answering.
pub const LINK_STATES: [&str; 3] = ["syncing", "connected", "unreachable"];

/// The `reason`s of `multicluster_link_errors_total`: the link Secret's own problems
/// ([`crate::model::LinkSecretError::reason`]), the cluster's start (a kubeconfig that does not
/// parse, or would run a command or read the destination's files; a client that cannot be
/// built; a state directory that cannot be used), a second
/// Secret for a linked cluster, and a cluster whose API server does not answer. Each series is
/// exported at 0 from the start.
pub const LINK_ERROR_REASONS: [&str; 12] = [
    "no_cluster_name",
    "reserved_cluster_name",
    "invalid_cluster_name",
    "missing_annotation",
    "invalid_annotation",
    "no_kubeconfig",
    "malformed_kubeconfig",
    "unsafe_kubeconfig",
    "client",
    "state_dir",
    "duplicate_cluster",
    "unreachable",
];

/// The linked clusters now, by name.
pub type Clusters = BTreeMap<String, Arc<LinkedCluster>>;

/// What the cluster store needs besides the Secrets.
#[derive(Clone, Debug)]
pub struct ClusterStoreConfig {
    /// The control-plane namespace: only link Secrets there count.
    pub namespace: String,
    /// `--linked-cluster-state NAME=DIR`: linked clusters served from a directory of
    /// manifests instead of their Secret's kubeconfig.
    pub offline: BTreeMap<String, PathBuf>,
    /// How long a linked cluster may take to deliver its initial lists before it is reported
    /// unreachable ([`UNREACHABLE_AFTER`] by default).
    pub unreachable_after: Duration,
}

impl Default for ClusterStoreConfig {
    fn default() -> Self {
        Self {
            namespace: "linkerd".to_string(),
            offline: BTreeMap::new(),
            unreachable_after: UNREACHABLE_AFTER,
        }
    }
}

/// One linked cluster: its domains and its discovery index, fed while it is linked.
pub struct LinkedCluster {
    /// The cluster's name (the Secret's [`CLUSTER_NAME_LABEL`]).
    pub name: String,
    /// Identities of the cluster's pods end in `.<controller-namespace>.<trust_domain>`.
    pub trust_domain: String,
    /// Names there are `<svc>.<ns>.svc.<cluster_domain>`.
    pub cluster_domain: String,
    /// The link Secret.
    pub secret: ObjectRef,
    /// Where its objects come from: `dir <path>` or `api <url>`.
    pub source: String,
    /// The cluster's discovery index.
    pub index: DiscoveryIndex,
    /// The Secret's link, as the cluster was started from it.
    link: LinkSecret,
    /// The index metrics of this cluster (`cluster="<name>"`).
    metrics: IndexMetrics,
    ready: watch::Receiver<bool>,
    started: Started,
    monitor: tokio::task::JoinHandle<()>,
}

/// The linked clusters, followed from the link Secrets. Cheap to clone.
#[derive(Clone)]
pub struct ClusterStore {
    clusters: watch::Receiver<Arc<Clusters>>,
}

/// `multicluster_*` metrics.
#[derive(Clone, Debug, Default)]
pub struct LinkMetrics {
    linked: Family<LinkStateLabels, Gauge>,
    errors: Family<ReasonLabels, Counter>,
    size: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LinkStateLabels {
    cluster: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Why a link was not started.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("kubeconfig is not UTF-8 YAML of a kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("kubeconfig cannot be used to connect: {0}")]
    CannotConnect(String),
    #[error(
        "kubeconfig {0}: a link's kubeconfig must carry its credentials inline, as `linkerd multicluster link` writes them"
    )]
    Unsafe(String),
    #[error("no client can be built from the kubeconfig: {0}")]
    Client(String),
    #[error("--linked-cluster-state directory: {0}")]
    Dir(String),
}

impl StartError {
    /// Whether trying again may succeed without the Secret changing: the path may become a
    /// directory.
    fn retried(&self) -> bool {
        matches!(self, Self::Dir(_))
    }

    fn reason(&self) -> &'static str {
        match self {
            Self::Kubeconfig(_) | Self::CannotConnect(_) => "malformed_kubeconfig",
            Self::Unsafe(_) => "unsafe_kubeconfig",
            Self::Client(_) => "client",
            Self::Dir(_) => "state_dir",
        }
    }
}

// === impl LinkMetrics ===

impl LinkMetrics {
    /// Registers `multicluster_linked_clusters{cluster,state}` (1 for each linked cluster's
    /// state: `syncing`, `connected` or `unreachable`, see [`LINK_STATES`]), `multicluster_link_errors_total{reason}` (link
    /// Secrets or clusters that could not be used: `no_cluster_name`, `reserved_cluster_name`
    /// (a cluster named `local`, the local cluster's label), `invalid_cluster_name` (not a
    /// DNS label), `missing_annotation`,
    /// `invalid_annotation` (a domain that is not a DNS name),
    /// `no_kubeconfig`, `malformed_kubeconfig`, `unsafe_kubeconfig` (a user that runs a
    /// command, or credentials read from files), `client`, `state_dir`, `duplicate_cluster`,
    /// `unreachable`, see [`LINK_ERROR_REASONS`]; each at 0 from the start) and
    /// `cluster_store_size` (linked clusters, as upstream).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        for reason in LINK_ERROR_REASONS {
            drop(metrics.errors.get_or_create(&ReasonLabels { reason }));
        }
        registry.register(
            "multicluster_linked_clusters",
            "Linked clusters by state (syncing: initial lists pending; connected: lists received and watches answered; unreachable: no answer)",
            metrics.linked.clone(),
        );
        registry.register(
            "multicluster_link_errors",
            "Link Secrets or linked clusters that could not be used, by reason",
            metrics.errors.clone(),
        );
        registry.register(
            "cluster_store_size",
            "Number of linked clusters",
            metrics.size.clone(),
        );
        metrics
    }

    fn error(&self, reason: &'static str) {
        self.errors.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Shows `cluster` in `state` (one of [`LINK_STATES`]) and in no other.
    fn set_state(&self, cluster: &str, state: &'static str) {
        for off in LINK_STATES.into_iter().filter(|s| *s != state) {
            self.linked.remove(&LinkStateLabels {
                cluster: cluster.to_string(),
                state: off,
            });
        }
        self.linked
            .get_or_create(&LinkStateLabels {
                cluster: cluster.to_string(),
                state,
            })
            .set(1);
    }

    fn forget(&self, cluster: &str) {
        for state in LINK_STATES {
            self.linked.remove(&LinkStateLabels {
                cluster: cluster.to_string(),
                state,
            });
        }
    }

    /// How many link errors of `reason` were counted (tests, diagnostics).
    pub fn errors(&self, reason: &'static str) -> u64 {
        self.errors.get_or_create(&ReasonLabels { reason }).get()
    }
}

// === impl LinkedCluster ===

impl LinkedCluster {
    /// Whether the cluster has delivered every initial list (its API server answered, or its
    /// directory was read).
    pub fn is_connected(&self) -> bool {
        *self.ready.borrow()
    }

    /// Stops the watches and removes the cluster's cache-size series (the link went).
    fn stop(&self) {
        self.abort();
        self.metrics.forget_cache_sizes();
    }

    fn abort(&self) {
        self.started.abort();
        self.monitor.abort();
    }
}

impl Drop for LinkedCluster {
    /// Stops the watches; the series are left alone, as a restarted link of the same name may
    /// own them by now.
    fn drop(&mut self) {
        self.abort();
    }
}

impl std::fmt::Debug for LinkedCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkedCluster")
            .field("name", &self.name)
            .field("trust_domain", &self.trust_domain)
            .field("cluster_domain", &self.cluster_domain)
            .field("secret", &self.secret)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

// === impl ClusterStore ===

impl ClusterStore {
    /// A store that follows the link Secrets `watches` delivers (the Secrets of
    /// `config.namespace` labelled [`CLUSTER_NAME_LABEL`] of type [`LINK_SECRET_TYPE`], as
    /// kube mode lists them). Linked clusters' indexes count invalid objects and cache sizes in
    /// `index_metrics` (`cluster="<name>"`). Must be called within a Tokio runtime: a task
    /// starts and stops the links.
    pub fn watch(
        watches: &mut Watches,
        config: ClusterStoreConfig,
        index_metrics: IndexMetrics,
        metrics: LinkMetrics,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        watches.add_scoped::<Secret>(
            tx,
            WatchScope {
                namespace: Some(config.namespace.clone()),
                labels: Some(CLUSTER_NAME_LABEL.to_string()),
                fields: Some(format!("type={LINK_SECRET_TYPE}")),
            },
        );
        let (clusters_tx, clusters) = watch::channel(Arc::new(Clusters::new()));
        let links = Links {
            config,
            index_metrics,
            metrics,
            secrets: BTreeMap::new(),
            valid: BTreeMap::new(),
            waiting: BTreeMap::new(),
            refused: BTreeMap::new(),
            kubeconfigs_checked: BTreeMap::new(),
            duplicates: BTreeSet::new(),
            listed: false,
            clusters: clusters_tx,
        };
        tokio::spawn(links.run(rx));
        Self { clusters }
    }

    /// A store with no links and no Secrets followed.
    pub fn empty() -> Self {
        Self {
            clusters: watch::channel(Arc::new(Clusters::new())).1,
        }
    }

    /// The linked cluster `name`, if it is linked now.
    pub fn get(&self, name: &str) -> Option<Arc<LinkedCluster>> {
        self.clusters.borrow().get(name).cloned()
    }

    /// The linked clusters; the receiver sees every link added, changed or removed.
    pub fn clusters(&self) -> watch::Receiver<Arc<Clusters>> {
        self.clusters.clone()
    }
}

/// The task that starts and stops links as their Secrets change.
struct Links {
    config: ClusterStoreConfig,
    index_metrics: IndexMetrics,
    metrics: LinkMetrics,
    /// The link Secrets now, as delivered.
    secrets: BTreeMap<ObjectRef, Arc<SecretInfo>>,
    /// The usable ones.
    valid: BTreeMap<ObjectRef, LinkSecret>,
    /// Links whose start failed for a reason that may clear, by cluster, with the error: they
    /// are tried again, shown `unreachable`, and logged and counted again only when the error
    /// changes.
    waiting: BTreeMap<String, String>,
    /// Link Secrets a cluster could not be started from (a kubeconfig that does not parse, or
    /// runs a command), with the link they held and the error: logged and counted once, and
    /// not tried again (the next Secret naming the cluster is) until they change.
    refused: BTreeMap<ObjectRef, (LinkSecret, String)>,
    /// Link Secrets whose kubeconfig passed the check before ranking, with the link they held:
    /// a client could be built from it, or, for a cluster served from a directory, it parses
    /// and is safe (see [`Links::reconcile`]).
    kubeconfigs_checked: BTreeMap<ObjectRef, LinkSecret>,
    /// Valid link Secrets ignored because another one, first by namespace/name, names the
    /// same cluster: logged and counted once, when they become so.
    duplicates: BTreeSet<ObjectRef>,
    /// Whether the Secrets were listed once.
    listed: bool,
    clusters: watch::Sender<Arc<Clusters>>,
}

impl Links {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Event<Arc<SecretInfo>>>) {
        let mut retry_after = RETRY_MIN;
        loop {
            let event = tokio::select! {
                event = rx.recv() => event,
                () = tokio::time::sleep(retry_after), if !self.waiting.is_empty() => {
                    retry_after = (retry_after * 2).min(RETRY_MAX);
                    self.reconcile().await;
                    continue;
                }
            };
            let Some(event) = event else { return };
            self.apply(event);
            // Whatever else arrived is applied before links are started.
            while let Ok(event) = rx.try_recv() {
                self.apply(event);
            }
            self.reconcile().await;
            if self.waiting.is_empty() {
                retry_after = RETRY_MIN;
            }
        }
    }

    fn apply(&mut self, event: Event<Arc<SecretInfo>>) {
        match event {
            Event::Apply(secret) => self.insert(secret),
            Event::Delete(key) => {
                self.secrets.remove(&key);
                self.valid.remove(&key);
            }
            Event::Reset(secrets) => {
                let first = !self.listed;
                self.listed = true;
                let keep: BTreeSet<ObjectRef> = secrets
                    .iter()
                    .map(|s| ObjectRef {
                        namespace: s.namespace.clone(),
                        name: s.name.clone(),
                    })
                    .collect();
                self.secrets.retain(|k, _| keep.contains(k));
                self.valid.retain(|k, _| keep.contains(k));
                for secret in secrets {
                    self.insert(secret);
                }
                if first {
                    self.report_unlinked_dirs();
                }
            }
        }
    }

    /// Warns, once the Secrets are first listed, of each `--linked-cluster-state` name that no
    /// link Secret names: a typo there would leave the link on its Secret's kubeconfig.
    fn report_unlinked_dirs(&self) {
        let linked: BTreeSet<&str> = self
            .secrets
            .values()
            .filter_map(|s| s.cluster_name.as_deref())
            .collect();
        for (name, dir) in &self.config.offline {
            if !linked.contains(name.as_str()) {
                tracing::warn!(cluster = %name, dir = %dir.display(), namespace = %self.config.namespace, "--linked-cluster-state names a cluster that no link Secret names; its directory is read once one does");
            }
        }
    }

    /// Notes a Secret delivered; a link Secret new or changed is checked (and a bad one
    /// reported) once.
    fn insert(&mut self, secret: Arc<SecretInfo>) {
        let key = ObjectRef {
            namespace: secret.namespace.clone(),
            name: secret.name.clone(),
        };
        // Offline mode delivers every Secret of the directory.
        if secret.namespace != self.config.namespace || !secret.is_link() {
            if self.secrets.remove(&key).is_some() {
                self.valid.remove(&key);
            }
            return;
        }
        if self.secrets.get(&key).is_some_and(|s| **s == *secret) {
            return;
        }
        match secret.link() {
            Ok(link) => {
                self.valid.insert(key.clone(), link);
            }
            Err(error) => {
                tracing::warn!(secret = %format!("{}/{}", key.namespace, key.name), %error, "ignoring link Secret");
                self.metrics.error(error.reason());
                self.valid.remove(&key);
            }
        }
        self.secrets.insert(key, secret);
    }

    /// Starts, restarts and stops links to match the valid Secrets.
    async fn reconcile(&mut self) {
        let current = self.clusters.borrow().clone();
        // A Secret refused at its start is tried again once it changes.
        let valid = &self.valid;
        self.refused
            .retain(|key, (link, _)| valid.get(key) == Some(link));
        self.kubeconfigs_checked
            .retain(|key, link| valid.get(key) == Some(link));
        // A kubeconfig no client can be built from is refused before the Secrets are ranked,
        // so that it displaces no running link (building one dials nothing). That of a
        // cluster served from a directory is not used, but is parsed and checked all the same:
        // one that would run a command must not take the cluster from a Secret that is safe.
        let unchecked: Vec<(ObjectRef, LinkSecret)> = self
            .valid
            .iter()
            .filter(|(key, _)| {
                !self.refused.contains_key(*key) && !self.kubeconfigs_checked.contains_key(*key)
            })
            .map(|(key, link)| (key.clone(), link.clone()))
            .collect();
        for (key, link) in unchecked {
            let checked = if self.config.offline.contains_key(&link.cluster) {
                parse_kubeconfig(&link.kubeconfig).map(drop)
            } else {
                kube_client(&link.kubeconfig).await.map(drop)
            };
            match checked {
                Ok(()) => {
                    self.kubeconfigs_checked.insert(key, link);
                }
                Err(error) => self.refuse(key, link, &error),
            }
        }
        // Of the Secrets naming one cluster, the first by namespace/name that can be started
        // links it, whatever order they came in: every replica, and a restart, serve the same
        // one (upstream's cluster store keeps whichever came first, so replicas could serve
        // two trust domains).
        let mut candidates: BTreeMap<String, Vec<(ObjectRef, LinkSecret)>> = BTreeMap::new();
        for (key, link) in &self.valid {
            if !self.refused.contains_key(key) {
                candidates
                    .entry(link.cluster.clone())
                    .or_default()
                    .push((key.clone(), link.clone()));
            }
        }

        let mut next = Clusters::new();
        let mut changed = false;
        for (name, cluster) in current.iter() {
            let same = candidates
                .get(name)
                .and_then(|c| c.first())
                .is_some_and(|(key, link)| *key == cluster.secret && *link == cluster.link);
            if same {
                next.insert(name.clone(), cluster.clone());
            } else {
                tracing::info!(cluster = %name, secret = %format!("{}/{}", cluster.secret.namespace, cluster.secret.name), "stopping linked cluster");
                cluster.stop();
                self.metrics.forget(name);
                changed = true;
            }
        }
        // A link no longer wanted is not waited for any more.
        let gone: Vec<String> = self
            .waiting
            .keys()
            .filter(|name| !candidates.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            self.waiting.remove(&name);
            self.metrics.forget(&name);
        }
        let mut linked_from: BTreeMap<String, ObjectRef> = BTreeMap::new();
        for (name, secrets) in &candidates {
            if let Some(cluster) = next.get(name) {
                linked_from.insert(name.clone(), cluster.secret.clone());
                continue;
            }
            for (key, link) in secrets {
                match self.start(key, link.clone()).await {
                    Ok(cluster) => {
                        if self.waiting.remove(name).is_some() {
                            tracing::info!(cluster = %name, "linked cluster started after its state directory could be used");
                        }
                        linked_from.insert(name.clone(), key.clone());
                        next.insert(name.clone(), Arc::new(cluster));
                        changed = true;
                        break;
                    }
                    // The cluster's directory: another Secret would wait for it the same.
                    Err(error) if error.retried() => {
                        let text = error.to_string();
                        if self.waiting.get(name) != Some(&text) {
                            tracing::warn!(secret = %format!("{}/{}", key.namespace, key.name), cluster = %name, %error, "cannot start linked cluster; retrying");
                            self.metrics.error(error.reason());
                        }
                        self.metrics.set_state(name, "unreachable");
                        self.waiting.insert(name.clone(), text);
                        linked_from.insert(name.clone(), key.clone());
                        break;
                    }
                    // This Secret's own problem: the next one naming the cluster is tried.
                    Err(error) => {
                        self.refuse(key.clone(), link.clone(), &error);
                        if self.waiting.remove(name).is_some() {
                            self.metrics.forget(name);
                        }
                    }
                }
            }
        }
        // The other Secrets naming a linked cluster are duplicates, logged and counted once.
        let mut duplicates = BTreeSet::new();
        for (name, secrets) in &candidates {
            let Some(first) = linked_from.get(name) else {
                continue;
            };
            for (key, _) in secrets.iter().filter(|(key, _)| key != first) {
                if self.refused.contains_key(key) {
                    continue;
                }
                if !self.duplicates.contains(key) {
                    tracing::warn!(secret = %format!("{}/{}", key.namespace, key.name), cluster = %name, first = %format!("{}/{}", first.namespace, first.name), "another link Secret, first by name, names this cluster; ignoring this one");
                    self.metrics.error("duplicate_cluster");
                }
                duplicates.insert(key.clone());
            }
        }
        self.duplicates = duplicates;
        if changed {
            self.metrics.size.set(next.len() as i64);
            self.clusters.send_replace(Arc::new(next));
        }
    }

    /// Logs and counts a Secret its cluster cannot be started from, which is not tried again
    /// until it changes.
    fn refuse(&mut self, key: ObjectRef, link: LinkSecret, error: &StartError) {
        tracing::warn!(secret = %format!("{}/{}", key.namespace, key.name), cluster = %link.cluster, %error, "cannot start linked cluster from this Secret");
        self.metrics.error(error.reason());
        self.refused.insert(key, (link, error.to_string()));
    }

    async fn start(&self, key: &ObjectRef, link: LinkSecret) -> Result<LinkedCluster, StartError> {
        let (reachable_tx, reachable) = watch::channel(true);
        let metrics = self
            .index_metrics
            .for_cluster(&link.cluster)
            .with_reachability(Arc::new(reachable_tx));
        let (source, described) = match self.config.offline.get(&link.cluster) {
            Some(dir) => {
                // A directory not there yet is waited for by the source: the cluster is linked,
                // and syncing until it can be read.
                let source = OfflineSource::awaiting(dir.clone(), metrics.clone())
                    .map_err(|e| StartError::Dir(e.to_string()))?;
                (
                    ClusterSource::Offline(source),
                    format!("dir {}", dir.display()),
                )
            }
            None => {
                let client = kube_client(&link.kubeconfig).await?;
                let url = client.1;
                (
                    ClusterSource::Kube(KubeSource::new(client.0, metrics.clone())),
                    format!("api {url}"),
                )
            }
        };
        let index = DiscoveryIndex::new();
        let mut watches = Watches::new(metrics.clone());
        index.watch(&mut watches);
        // Everything the cluster's watches log names the cluster.
        let span = tracing::info_span!("linked_cluster", cluster = %link.cluster);
        let started = watches.start(&source).instrument(span).await;
        let ready = started.ready();
        let monitor = tokio::spawn(monitor(
            link.cluster.clone(),
            key.clone(),
            ready.clone(),
            reachable,
            self.metrics.clone(),
            self.config.unreachable_after,
        ));
        tracing::info!(cluster = %link.cluster, secret = %format!("{}/{}", key.namespace, key.name), source = %described, trust_domain = %link.trust_domain, "linked cluster started");
        Ok(LinkedCluster {
            name: link.cluster.clone(),
            trust_domain: link.trust_domain.clone(),
            cluster_domain: link.cluster_domain.clone(),
            link,
            secret: key.clone(),
            source: described,
            index,
            metrics,
            ready,
            started,
            monitor,
        })
    }
}

/// A client of the cluster `kubeconfig` describes (its current context), and its URL.
///
/// A kubeconfig that would have the destination run a command or read its own files is
/// refused ([`StartError::Unsafe`]): anyone who can write a Secret in the control-plane
/// namespace could otherwise run commands in the pod, or have its ServiceAccount token
/// (`tokenFile`) sent to a server of their choosing. client-go, upstream's client, follows
/// them; `linkerd multicluster link` writes a token and certificate data inline.
async fn kube_client(kubeconfig: &[u8]) -> Result<(kube::Client, String), StartError> {
    let parsed = parse_kubeconfig(kubeconfig)?;
    // Names a current context, its cluster and user: what is missing is said as kube says it.
    let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
        .await
        .map_err(|e| StartError::CannotConnect(e.to_string()))?;
    let url = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).map_err(|e| StartError::Client(e.to_string()))?;
    Ok((client, url))
}

/// The top-level keys of a kubeconfig (client-go's `Config`), of which a link's must have one.
const KUBECONFIG_KEYS: [&str; 7] = [
    "apiVersion",
    "kind",
    "clusters",
    "contexts",
    "users",
    "current-context",
    "preferences",
];

/// A link Secret's `kubeconfig`, parsed and refused if unsafe ([`refuse_unsafe`]); it need not
/// name a current context (that of a cluster served from a directory is never used).
///
/// Errors: [`StartError::Kubeconfig`] for bytes that are not UTF-8 YAML of a kubeconfig (one
/// mapping with at least one of [`KUBECONFIG_KEYS`]), [`StartError::Unsafe`].
fn parse_kubeconfig(kubeconfig: &[u8]) -> Result<kube::config::Kubeconfig, StartError> {
    let text =
        std::str::from_utf8(kubeconfig).map_err(|e| StartError::Kubeconfig(e.to_string()))?;
    // kube reads a text of only comments, or a mapping of unknown keys, as an empty
    // kubeconfig: one of its own keys is required of a mapping that is one.
    let document: serde_json::Value =
        linkerd_k8s_api::yaml::from_str(text).map_err(|e| StartError::Kubeconfig(e.to_string()))?;
    let is_kubeconfig = document
        .as_object()
        .is_some_and(|map| KUBECONFIG_KEYS.iter().any(|key| map.contains_key(*key)));
    if !is_kubeconfig {
        return Err(StartError::Kubeconfig(format!(
            "no document with any of {}",
            KUBECONFIG_KEYS.join(", ")
        )));
    }
    let parsed = kube::config::Kubeconfig::from_yaml(text)
        .map_err(|e| StartError::Kubeconfig(e.to_string()))?;
    refuse_unsafe(&parsed)?;
    Ok(parsed)
}

/// Errors naming the first user or cluster of `kubeconfig` that runs a command (`exec`,
/// `auth-provider`, whose plugins run commands) or reads a file of the destination's
/// filesystem (`tokenFile`, `client-certificate`, `client-key`, `certificate-authority`).
fn refuse_unsafe(kubeconfig: &kube::config::Kubeconfig) -> Result<(), StartError> {
    for named in &kubeconfig.auth_infos {
        let Some(user) = &named.auth_info else {
            continue;
        };
        let field = if user.exec.is_some() {
            Some("runs a command (`exec`)")
        } else if user.auth_provider.is_some() {
            Some("runs an auth provider (`auth-provider`)")
        } else if user.token_file.is_some() {
            Some("reads a file (`tokenFile`)")
        } else if user.client_certificate.is_some() {
            Some("reads a file (`client-certificate`)")
        } else if user.client_key.is_some() {
            Some("reads a file (`client-key`)")
        } else {
            None
        };
        if let Some(field) = field {
            return Err(StartError::Unsafe(format!("user {:?} {field}", named.name)));
        }
    }
    for named in &kubeconfig.clusters {
        if named
            .cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            return Err(StartError::Unsafe(format!(
                "cluster {:?} reads a file (`certificate-authority`)",
                named.name
            )));
        }
    }
    Ok(())
}

/// Follows a linked cluster's state into the state gauge: `syncing` until its initial lists
/// are in, `unreachable` when they take longer than `after`, `connected` once they are in
/// (logged with how long they took); after that, `unreachable` while its watches fail
/// (`reachable` false) and `connected` again when they get answers. Each fall to
/// `unreachable` is logged with the Secret's name and counted.
///
/// None of this holds up `/ready`: as upstream's cluster store, whose linked clusters' caches
/// sync in the background, the destination is ready once the local cluster and the link
/// Secrets are listed.
async fn monitor(
    cluster: String,
    secret: ObjectRef,
    mut ready: watch::Receiver<bool>,
    mut reachable: watch::Receiver<bool>,
    metrics: LinkMetrics,
    after: Duration,
) {
    let secret = format!("{}/{}", secret.namespace, secret.name);
    let syncing = tokio::time::Instant::now();
    if !*ready.borrow() {
        metrics.set_state(&cluster, "syncing");
        // `Ok(false)`: the watches were stopped.
        let waited = tokio::time::timeout(after, ready.wait_for(|r| *r))
            .await
            .map(|r| r.is_ok());
        match waited {
            Ok(true) => {}
            Ok(false) => return,
            Err(_) => {
                tracing::warn!(%cluster, %secret, "linked cluster unreachable: no initial lists yet; retrying");
                metrics.error("unreachable");
                metrics.set_state(&cluster, "unreachable");
                if ready.wait_for(|r| *r).await.is_err() {
                    return;
                }
            }
        }
    }
    tracing::info!(%cluster, after_ms = syncing.elapsed().as_millis() as u64, "linked cluster synced: initial lists received");
    metrics.set_state(&cluster, "connected");
    reachable.borrow_and_update();
    while reachable.changed().await.is_ok() {
        let up = *reachable.borrow_and_update();
        if up {
            tracing::info!(%cluster, "linked cluster reachable again");
        } else {
            tracing::warn!(%cluster, %secret, "linked cluster unreachable; serving its last known endpoints while retrying");
            metrics.error("unreachable");
        }
        metrics.set_state(&cluster, if up { "connected" } else { "unreachable" });
    }
}

impl std::fmt::Debug for ClusterStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.clusters.borrow().keys().cloned().collect();
        f.debug_struct("ClusterStore")
            .field("clusters", &names)
            .finish()
    }
}
