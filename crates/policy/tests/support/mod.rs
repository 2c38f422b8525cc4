//! Test harness: an InboundServerPolicies server on `127.0.0.1:0` over an index fed from a state
//! directory (the offline source, as in production offline mode), and a generated client.

#![allow(dead_code)]

pub mod outbound;

use linkerd_index::{
    ClusterSource, IndexMetrics, Started, Watches,
    inbound::{DefaultPolicy, InboundConfig, InboundIndex},
    source::offline::OfflineSource,
};
use linkerd_runtime::shutdown;
use linkerd2_proxy_api::{
    inbound::{
        Authz, HttpRoute, PortSpec, Server, authn,
        inbound_server_policies_client::InboundServerPoliciesClient, proxy_protocol,
    },
    meta, net,
};
use policy::{InboundPolicyService, InboundTranslator, PolicyMetrics, bind, serve};
use std::{collections::BTreeMap, net::SocketAddr, path::Path, time::Duration};
use tonic::{Streaming, transport::Channel};

pub const WEB_ID: &str = "web.emojivoto.serviceaccount.identity.linkerd.cluster.local";
pub const BILLING_ID: &str = "billing.edge.serviceaccount.identity.linkerd.cluster.local";

/// The policy-controller flags the fixtures assume (the chart defaults, fixtures/README.md),
/// with route acceptance as offline mode decides it.
pub fn chart_config() -> InboundConfig {
    InboundConfig {
        cluster_networks: cluster_networks(),
        default_policy: DefaultPolicy::AllUnauthenticated,
        probe_networks: vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()],
        identity_domain: "cluster.local".into(),
        control_plane_namespace: "linkerd".into(),
        compute_route_acceptance: true,
    }
}

/// The chart's `--cluster-networks`.
pub fn cluster_networks() -> Vec<ipnet::IpNet> {
    [
        "10.0.0.0/8",
        "100.64.0.0/10",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "fd00::/8",
    ]
    .iter()
    .map(|n| n.parse().unwrap())
    .collect()
}

pub fn fixture_dir(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

/// Waits until `started` has delivered every kind's initial list.
pub async fn ready(started: Started) -> Started {
    let mut ready = started.ready();
    tokio::time::timeout(Duration::from_secs(10), ready.wait_for(|r| *r))
        .await
        .expect("index ready in time")
        .expect("ready channel");
    started
}

/// A running server and a client connected to it.
pub struct Harness {
    pub addr: SocketAddr,
    pub client: InboundServerPoliciesClient<Channel>,
    pub index: InboundIndex,
    pub metrics: PolicyMetrics,
    trigger: Option<shutdown::Trigger>,
}

impl Harness {
    /// Serves the manifests in `dir` with the chart-default flags.
    pub async fn start(dir: &Path) -> Self {
        Self::start_with(dir, chart_config()).await
    }

    pub async fn start_with(dir: &Path, config: InboundConfig) -> Self {
        Self::start_with_metrics(dir, config, PolicyMetrics::default()).await
    }

    pub async fn start_with_metrics(
        dir: &Path,
        config: InboundConfig,
        metrics: PolicyMetrics,
    ) -> Self {
        let index_metrics = IndexMetrics::default();
        let cluster_networks = config.cluster_networks.clone();
        let index = InboundIndex::new(config, index_metrics.clone());
        let mut watches = Watches::new(index_metrics.clone());
        index.watch(&mut watches);
        let source = OfflineSource::new(dir, index_metrics).expect("state dir");
        ready(watches.start(&ClusterSource::Offline(source)).await).await;

        let (trigger, shutdown) = shutdown::channel();
        let service = InboundPolicyService::new(
            index.clone(),
            InboundTranslator::new(cluster_networks),
            metrics.clone(),
            shutdown.clone(),
        );
        let (listener, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        tokio::spawn(serve(listener, service, shutdown));
        let client = InboundServerPoliciesClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        Self {
            addr,
            client,
            index,
            metrics,
            trigger: Some(trigger),
        }
    }

    /// Triggers the server's shutdown.
    pub fn shutdown(&mut self) {
        if let Some(trigger) = self.trigger.take() {
            trigger.trigger();
        }
    }

    pub async fn get_port(&mut self, workload: &str, port: u32) -> Result<Server, tonic::Status> {
        self.client
            .get_port(PortSpec {
                workload: workload.into(),
                port,
            })
            .await
            .map(|r| r.into_inner())
    }

    /// `GetPort` on a pod in the JSON form, failing the test on an error.
    pub async fn pod_port(&mut self, ns: &str, pod: &str, port: u32) -> Server {
        let workload = pod_workload(ns, pod);
        self.get_port(&workload, port)
            .await
            .unwrap_or_else(|e| panic!("GetPort {workload} {port}: {e}"))
    }

    pub async fn watch_port(
        &mut self,
        workload: &str,
        port: u32,
    ) -> Result<Streaming<Server>, tonic::Status> {
        self.client
            .watch_port(PortSpec {
                workload: workload.into(),
                port,
            })
            .await
            .map(|r| r.into_inner())
    }
}

pub fn pod_workload(ns: &str, pod: &str) -> String {
    format!(r#"{{"ns":"{ns}","pod":"{pod}"}}"#)
}

/// The next message, failing the test after 5 s.
pub async fn next(stream: &mut Streaming<Server>) -> Server {
    tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("a message within 5s")
        .expect("stream ok")
        .expect("stream open")
}

/// Asserts that nothing arrives for a while.
pub async fn assert_quiet(stream: &mut Streaming<Server>) {
    if let Ok(msg) = tokio::time::timeout(Duration::from_millis(300), stream.message()).await {
        panic!("unexpected message: {msg:?}");
    }
}

/// Asserts that the stream ends with `OK` within 5 s.
pub async fn assert_ends_ok(stream: &mut Streaming<Server>) {
    let end = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("stream ends within 5s");
    match end {
        Ok(None) => {}
        other => panic!("expected the stream to end with OK, got {other:?}"),
    }
}

// === Reading a Server ===

/// `{group, kind, name}` as a sorted map.
pub fn labels(group: &str, kind: &str, name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("group".to_string(), group.to_string()),
        ("kind".to_string(), kind.to_string()),
        ("name".to_string(), name.to_string()),
    ])
}

pub fn sorted(map: &std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

pub fn protocol(server: &Server) -> &proxy_protocol::Kind {
    server
        .protocol
        .as_ref()
        .and_then(|p| p.kind.as_ref())
        .expect("protocol set")
}

/// The HTTP routes of a Detect, Http1 or Http2 server.
pub fn http_routes(server: &Server) -> &[HttpRoute] {
    match protocol(server) {
        proxy_protocol::Kind::Detect(d) => &d.http_routes,
        proxy_protocol::Kind::Http1(h) => &h.routes,
        proxy_protocol::Kind::Http2(h) => &h.routes,
        other => panic!("no HTTP routes in {other:?}"),
    }
}

/// A route's or authorization's metadata as `default:<name>` or `<group>/<kind>/<name>`.
pub fn meta_name(metadata: &Option<meta::Metadata>) -> String {
    match metadata.as_ref().and_then(|m| m.kind.as_ref()) {
        Some(meta::metadata::Kind::Default(name)) => format!("default:{name}"),
        Some(meta::metadata::Kind::Resource(r)) => format!("{}/{}/{}", r.group, r.kind, r.name),
        None => panic!("metadata missing"),
    }
}

/// Authorization names (`labels.name`), sorted.
pub fn authz_names(authzs: &[Authz]) -> Vec<String> {
    let mut names: Vec<String> = authzs.iter().map(|a| a.labels["name"].clone()).collect();
    names.sort();
    names
}

/// The authorization whose `name` label is `name`.
pub fn authz<'a>(authzs: &'a [Authz], name: &str) -> &'a Authz {
    authzs
        .iter()
        .find(|a| a.labels.get("name").map(String::as_str) == Some(name))
        .unwrap_or_else(|| panic!("no authorization {name} in {authzs:?}"))
}

/// An authorization's networks as `cidr` or `cidr except [..]` strings.
pub fn networks(authz: &Authz) -> Vec<String> {
    authz
        .networks
        .iter()
        .map(|n| {
            let net = cidr(n.net.expect("net"));
            if n.except.is_empty() {
                net
            } else {
                let except: Vec<String> = n.except.iter().map(|e| cidr(*e)).collect();
                format!("{net} except {}", except.join(","))
            }
        })
        .collect()
}

fn cidr(net: net::IpNetwork) -> String {
    ipnet::IpNet::try_from(net)
        .expect("valid network")
        .to_string()
}

/// How an authorization authenticates clients.
#[derive(Debug, PartialEq, Eq)]
pub enum Authn {
    Unauthenticated,
    TlsUnauthenticated,
    /// Exact identities and suffixes (joined with `.`), each sorted.
    Identities(Vec<String>, Vec<String>),
}

pub fn authn(authz: &Authz) -> Authn {
    use authn::permit_mesh_tls::Clients;
    match authz
        .authentication
        .as_ref()
        .and_then(|a| a.permit.as_ref())
    {
        Some(authn::Permit::Unauthenticated(_)) => Authn::Unauthenticated,
        Some(authn::Permit::MeshTls(tls)) => match tls.clients.as_ref() {
            Some(Clients::Unauthenticated(_)) => Authn::TlsUnauthenticated,
            Some(Clients::Identities(ids)) => {
                let mut exact: Vec<String> =
                    ids.identities.iter().map(|i| i.name.clone()).collect();
                let mut suffixes: Vec<String> =
                    ids.suffixes.iter().map(|s| s.parts.join(".")).collect();
                exact.sort();
                suffixes.sort();
                Authn::Identities(exact, suffixes)
            }
            None => panic!("mesh TLS without clients"),
        },
        None => panic!("authentication missing"),
    }
}

/// Every authorization is complete as the proxy requires (compat notes Z.3, Z.7): metadata,
/// the three labels, at least one network, an authentication.
pub fn assert_proxy_valid(server: &Server) {
    assert!(server.labels.contains_key("name"), "server name label");
    let check = |a: &Authz| {
        assert!(a.metadata.is_some(), "authz metadata: {a:?}");
        assert_eq!(
            a.labels.keys().collect::<std::collections::BTreeSet<_>>(),
            ["group", "kind", "name"]
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .iter()
                .collect()
        );
        assert!(!a.networks.is_empty(), "authz networks: {a:?}");
        assert!(a.authentication.is_some(), "authz authentication: {a:?}");
    };
    server.authorizations.iter().for_each(check);
    match protocol(server) {
        proxy_protocol::Kind::Detect(d) => {
            assert!(d.timeout.is_some(), "detect timeout");
            for r in &d.http_routes {
                assert!(r.metadata.is_some());
                r.authorizations.iter().for_each(check);
            }
        }
        proxy_protocol::Kind::Http1(h) => h.routes.iter().for_each(|r| {
            assert!(r.metadata.is_some());
            r.authorizations.iter().for_each(check);
        }),
        proxy_protocol::Kind::Http2(h) => h.routes.iter().for_each(|r| {
            assert!(r.metadata.is_some());
            r.authorizations.iter().for_each(check);
        }),
        proxy_protocol::Kind::Grpc(g) => g.routes.iter().for_each(|r| {
            assert!(r.metadata.is_some());
            r.authorizations.iter().for_each(check);
        }),
        proxy_protocol::Kind::Opaque(_) | proxy_protocol::Kind::Tls(_) => {}
    }
}

// === Builders for small clusters ===

use serde_json::{Value, json};

/// A meshed pod labelled `app: <app>` with one named container port.
pub fn mk_pod(ns: &str, name: &str, app: &str, port: (&str, u16)) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name, "namespace": ns, "resourceVersion": "1",
            "labels": {"app": app, "linkerd.io/control-plane-ns": "linkerd"},
        },
        "spec": {
            "serviceAccountName": app,
            "containers": [
                {"name": "app", "image": "app", "ports": [{"name": port.0, "containerPort": port.1}]},
            ],
        },
        "status": {"phase": "Running", "podIP": "10.244.0.10", "podIPs": [{"ip": "10.244.0.10"}]},
    })
}

/// A Server selecting `app: <app>` on `port` (a number or a name).
pub fn mk_server(ns: &str, name: &str, app: &str, port: Value, protocol: &str) -> Value {
    json!({
        "apiVersion": "policy.linkerd.io/v1beta3",
        "kind": "Server",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2026-05-04T09:31:40Z"},
        "spec": {
            "podSelector": {"matchLabels": {"app": app}},
            "port": port,
            "proxyProtocol": protocol,
            "accessPolicy": "deny",
        },
    })
}

/// A ServerAuthorization of Server `server` admitting unauthenticated clients from `networks`.
pub fn mk_server_authorization(ns: &str, name: &str, server: &str, networks: &[&str]) -> Value {
    json!({
        "apiVersion": "policy.linkerd.io/v1beta1",
        "kind": "ServerAuthorization",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "server": {"name": server},
            "client": {
                "unauthenticated": true,
                "networks": networks.iter().map(|n| json!({"cidr": n})).collect::<Vec<_>>(),
            },
        },
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

    /// Writes `file` atomically (a hidden temp file renamed into place).
    pub fn write(&self, file: &str, objects: &[Value]) {
        let text: String = objects
            .iter()
            .map(|o| format!("---\n{}", linkerd_k8s_api::yaml::to_string(o).unwrap()))
            .collect();
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
