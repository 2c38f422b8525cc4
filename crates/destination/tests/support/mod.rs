//! Test harness: a destination server on `127.0.0.1:0` over an index fed from a state directory
//! (the offline source, as in production offline mode), and a generated proxy-API client.

#![allow(dead_code)]

use destination::{
    DestinationMetrics, DestinationService, EndpointTranslator, TranslatorConfig, serve,
    server::bind,
};
use linkerd_index::{
    ClusterSource, DiscoveryIndex, IndexMetrics, PortSet, Watches, source::offline::OfflineSource,
};
use linkerd_runtime::shutdown;
use linkerd2_proxy_api::destination::{
    DestinationProfile, GetDestination, Update, WeightedAddr,
    destination_client::DestinationClient, update,
};
use std::{collections::BTreeMap, net::SocketAddr, path::Path, time::Duration};
use tonic::{Streaming, transport::Channel};

pub const KEEPALIVE_JSON: &str =
    r#"{"keep_alive":{"interval":{"seconds":10},"timeout":{"seconds":3},"while_idle":true}}"#;

/// The destination flags the fixtures assume (the chart defaults, fixtures/README.md).
pub fn chart_config() -> TranslatorConfig {
    TranslatorConfig {
        controller_namespace: "linkerd".into(),
        trust_domain: "cluster.local".into(),
        enable_h2_upgrade: true,
        default_opaque_ports: PortSet::parse("25,587,3306,4444,5432,6379,9300,11211").0,
        meshed_http2_params: destination::translate::parse_http2_params(KEEPALIVE_JSON).unwrap(),
        force_opaque_transport: false,
        ext_endpoint_zone_weights: false,
    }
}

/// A running server and a client connected to it.
pub struct Harness {
    pub addr: SocketAddr,
    pub client: DestinationClient<Channel>,
    pub index: DiscoveryIndex,
    _trigger: shutdown::Trigger,
}

pub fn fixture_dir(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

/// A discovery index fed from the state directory `dir`, once its initial read is applied.
pub async fn offline_index(dir: &Path, metrics: IndexMetrics) -> DiscoveryIndex {
    let index = DiscoveryIndex::new();
    let mut watches = Watches::new(metrics.clone());
    index.watch(&mut watches);
    // As the binary does offline: ExternalWorkload EndpointSlices are computed in-process.
    index.compute_external_workload_slices();
    let source = OfflineSource::new(dir, metrics).expect("state dir");
    let started = watches.start(&ClusterSource::Offline(source)).await;
    let mut ready = started.ready();
    tokio::time::timeout(Duration::from_secs(10), ready.wait_for(|r| *r))
        .await
        .expect("index ready in time")
        .expect("ready channel");
    index
}

/// A discovery index the test feeds itself, with typed objects.
pub fn fed_index() -> linkerd_index::Fed<DiscoveryIndex> {
    linkerd_index::Fed::new(
        DiscoveryIndex::new(),
        DiscoveryIndex::watch,
        IndexMetrics::default(),
    )
}

impl Harness {
    /// Serves the manifests in `dir` with the chart-default flags (IPv6 disabled).
    pub async fn start(dir: &Path) -> Self {
        Self::start_with(dir, chart_config(), false).await
    }

    pub async fn start_with(dir: &Path, config: TranslatorConfig, enable_ipv6: bool) -> Self {
        let index = offline_index(dir, IndexMetrics::default()).await;
        Self::serve_index(index, config, enable_ipv6).await
    }

    /// Serves an index the test feeds itself (a [`linkerd_index::Fed`] index).
    pub async fn serve_index(
        index: DiscoveryIndex,
        config: TranslatorConfig,
        enable_ipv6: bool,
    ) -> Self {
        Self::serve_index_with_metrics(index, config, enable_ipv6, DestinationMetrics::default())
            .await
    }

    pub async fn serve_index_with_metrics(
        index: DiscoveryIndex,
        config: TranslatorConfig,
        enable_ipv6: bool,
        metrics: DestinationMetrics,
    ) -> Self {
        let (trigger, shutdown) = shutdown::channel();
        let service = DestinationService::new(
            index.clone(),
            EndpointTranslator::new(config),
            "cluster.local".into(),
            enable_ipv6,
            metrics,
            shutdown.clone(),
        );
        let (listener, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        tokio::spawn(serve(listener, service, shutdown));
        let client = DestinationClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        Self {
            addr,
            client,
            index,
            _trigger: trigger,
        }
    }

    pub async fn get(
        &mut self,
        path: &str,
        token: &str,
    ) -> Result<Streaming<Update>, tonic::Status> {
        self.client
            .get(GetDestination {
                scheme: "k8s".into(),
                path: path.into(),
                context_token: token.into(),
            })
            .await
            .map(|r| r.into_inner())
    }
}

impl Harness {
    pub async fn get_profile(
        &mut self,
        path: &str,
        token: &str,
    ) -> Result<Streaming<DestinationProfile>, tonic::Status> {
        self.client
            .get_profile(GetDestination {
                scheme: "k8s".into(),
                path: path.into(),
                context_token: token.into(),
            })
            .await
            .map(|r| r.into_inner())
    }

    /// The first profile of `GetProfile path`, failing the test on an error.
    pub async fn first_profile(&mut self, path: &str, token: &str) -> DestinationProfile {
        let mut stream = self
            .get_profile(path, token)
            .await
            .unwrap_or_else(|e| panic!("GetProfile {path}: {e}"));
        next_profile(&mut stream).await
    }
}

/// The next profile, failing the test after 5 s.
pub async fn next_profile(stream: &mut Streaming<DestinationProfile>) -> DestinationProfile {
    tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("a profile within 5s")
        .expect("stream ok")
        .expect("stream open")
}

/// Asserts that no profile arrives for a while.
pub async fn assert_no_profile(stream: &mut Streaming<DestinationProfile>) {
    if let Ok(msg) = tokio::time::timeout(Duration::from_millis(300), stream.message()).await {
        panic!("unexpected profile: {msg:?}");
    }
}

/// The next update, failing the test after 5 s.
pub async fn next(stream: &mut Streaming<Update>) -> update::Update {
    tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("an update within 5s")
        .expect("stream ok")
        .expect("stream open")
        .update
        .expect("update set")
}

/// Asserts that nothing arrives for a while.
pub async fn assert_quiet(stream: &mut Streaming<Update>) {
    if let Ok(msg) = tokio::time::timeout(Duration::from_millis(300), stream.message()).await {
        panic!("unexpected message: {msg:?}");
    }
}

/// `ip:port` of an address.
pub fn addr_of(addr: &WeightedAddr) -> SocketAddr {
    addr.addr.expect("addr").try_into().expect("valid addr")
}

/// The addresses of an `Add`, sorted.
pub fn added(update: &update::Update) -> Vec<SocketAddr> {
    match update {
        update::Update::Add(set) => {
            let mut addrs: Vec<_> = set.addrs.iter().map(addr_of).collect();
            addrs.sort();
            addrs
        }
        other => panic!("expected Add, got {other:?}"),
    }
}

/// The addresses of a `Remove`, sorted.
pub fn removed(update: &update::Update) -> Vec<SocketAddr> {
    match update {
        update::Update::Remove(set) => {
            let mut addrs: Vec<SocketAddr> =
                set.addrs.iter().map(|a| (*a).try_into().unwrap()).collect();
            addrs.sort();
            addrs
        }
        other => panic!("expected Remove, got {other:?}"),
    }
}

/// Parses `a:b` pairs into a label map.
pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn sorted(map: &std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

pub fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

// === Builders for small clusters ===

use serde_json::{Value, json};

/// A ClusterIP Service with named ports `(name, port)`.
pub fn mk_service(ns: &str, name: &str, ports: &[(&str, u16)]) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": "1"},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "ports": ports.iter().map(|(n, p)| json!({"name": n, "port": p, "protocol": "TCP", "targetPort": n})).collect::<Vec<_>>(),
        }
    })
}

/// A meshed, running pod with the proxy env discovery needs.
pub fn mk_pod(ns: &str, name: &str, ip: &str, sa: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name, "namespace": ns, "resourceVersion": "1",
            "labels": {"app": "web", "linkerd.io/control-plane-ns": "linkerd", "pod-template-hash": "abc123"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc123", "uid": "u1", "controller": true}],
        },
        "spec": {
            "serviceAccountName": sa,
            "nodeName": "node-a",
            "containers": [
                {"name": "linkerd-proxy", "image": "proxy", "env": [
                    {"name": "LINKERD2_PROXY_INBOUND_LISTEN_ADDR", "value": "0.0.0.0:4143"},
                    {"name": "LINKERD2_PROXY_ADMIN_LISTEN_ADDR", "value": "0.0.0.0:4191"},
                    {"name": "LINKERD2_PROXY_CONTROL_LISTEN_ADDR", "value": "0.0.0.0:4190"},
                ]},
                {"name": "app", "image": "app", "ports": [{"name": "http", "containerPort": 8080}]},
            ],
        },
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
    })
}

/// [`mk_pod`] changed in every way no field of its address or endpoint profile reads: a label
/// and annotations nothing translates, a readiness probe, status conditions other than
/// readiness, and its resourceVersion.
pub fn mk_pod_changed_invisibly(ns: &str, name: &str, ip: &str, sa: &str) -> Value {
    let mut pod = mk_pod(ns, name, ip, sa);
    pod["metadata"]["resourceVersion"] = json!("2");
    pod["metadata"]["labels"]["team"] = json!("payments");
    pod["metadata"]["annotations"] = json!({
        "config.linkerd.io/default-inbound-policy": "all-authenticated",
        "example.com/owner": "ops",
    });
    pod["spec"]["containers"][1]["readinessProbe"] =
        json!({"httpGet": {"path": "/ready", "port": 8080}});
    pod["status"]["conditions"] = json!([
        {"type": "PodScheduled", "status": "True"},
        {"type": "Initialized", "status": "True"},
    ]);
    pod
}

/// The link Secret of cluster `east` (trust domain `east.local`), in namespace `linkerd`; its
/// kubeconfig (`apiVersion: v1`) is never dialled when `east` is served from a directory.
pub fn mk_east_link_secret() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": "cluster-credentials-east", "namespace": "linkerd",
            "labels": {"multicluster.linkerd.io/cluster-name": "east"},
            "annotations": {
                "multicluster.linkerd.io/trust-domain": "east.local",
                "multicluster.linkerd.io/cluster-domain": "cluster.local",
            },
        },
        "type": "mirror.linkerd.io/remote-kubeconfig",
        "data": {"kubeconfig": "YXBpVmVyc2lvbjogdjEK"},
    })
}

/// A cluster store linking `east` (its link Secret, [`mk_east_link_secret`]) served from the
/// state directory `dir`, once it is linked; keep the watches as long as the store.
pub async fn link_east(dir: &Path) -> (Watches, linkerd_index::ClusterStore) {
    let mut watches = Watches::new(IndexMetrics::default());
    let store = linkerd_index::ClusterStore::watch(
        &mut watches,
        linkerd_index::ClusterStoreConfig {
            namespace: "linkerd".into(),
            offline: [("east".to_string(), dir.to_path_buf())].into(),
            ..Default::default()
        },
        IndexMetrics::default(),
        linkerd_index::LinkMetrics::default(),
    );
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(mk_east_link_secret()).unwrap();
    watches.apply(linkerd_index::Event::Apply(secret));
    let mut clusters = store.clusters();
    tokio::time::timeout(
        Duration::from_secs(10),
        clusters.wait_for(|c| c.contains_key("east")),
    )
    .await
    .expect("east linked in time")
    .unwrap();
    (watches, store)
}

/// Writes `slice.yaml` of `dir`: Service `web`'s slice `web-1` in `ns` (port `http` 8080) with
/// `n` ready pods `web-0..n` at `ip(i)`.
pub fn write_web_slice(dir: &StateDir, ns: &str, n: usize, ip: impl Fn(usize) -> String) {
    let pods: Vec<(String, String)> = (0..n).map(|p| (format!("web-{p}"), ip(p))).collect();
    let eps: Vec<(&str, &str, bool)> = pods
        .iter()
        .map(|(name, ip)| (name.as_str(), ip.as_str(), true))
        .collect();
    dir.write(
        "slice.yaml",
        &[mk_slice(ns, "web-1", "web", ("http", 8080), &eps)],
    );
}

/// An IPv4 EndpointSlice of `svc` with one port and endpoints `(pod, ip, ready)`.
pub fn mk_slice(
    ns: &str,
    name: &str,
    svc: &str,
    port: (&str, u16),
    endpoints: &[(&str, &str, bool)],
) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns, "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": port.0, "port": port.1, "protocol": "TCP"}],
        "endpoints": endpoints.iter().map(|(pod, ip, ready)| json!({
            "addresses": [ip],
            "conditions": {"ready": ready, "serving": ready, "terminating": false},
            "nodeName": "node-a",
            "targetRef": {"kind": "Pod", "name": pod, "namespace": ns},
        })).collect::<Vec<_>>(),
    })
}

/// A state directory the test edits, one object per file.
pub struct StateDir {
    pub dir: tempfile::TempDir,
}

impl StateDir {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Writes `file` atomically (a hidden temp file renamed into place), as editors and
    /// `kubectl get -o yaml > file` users would end up with.
    pub fn write(&self, file: &str, objects: &[Value]) {
        let text: String = objects
            .iter()
            .map(|o| format!("---\n{}", linkerd_k8s_api::yaml::to_string(o).unwrap()))
            .collect();
        self.write_raw(file, &text);
    }

    pub fn write_raw(&self, file: &str, text: &str) {
        let tmp = self.dir.path().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.dir.path().join(file)).unwrap();
    }

    pub fn remove(&self, file: &str) {
        std::fs::remove_file(self.dir.path().join(file)).unwrap();
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}
