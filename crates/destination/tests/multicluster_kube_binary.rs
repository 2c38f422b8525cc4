//! The built `destination` binary with a linked cluster in kube mode (issue 16): the local
//! cluster is a state directory holding the link Secret, whose kubeconfig points at a scripted
//! API server on loopback (`fake_apiserver`, shared with linkerd-index's tests), and a mirror
//! Service of that cluster's `web-svc`. The linked cluster's API server going away keeps its
//! endpoints served; coming back, the new state is followed.

#[path = "../../index/tests/fake_apiserver/mod.rs"]
mod fake_apiserver;
mod support;

use base64::Engine;
use e2e::{Process, free_addr, http_get};
use fake_apiserver::{FakeApi, PODS, SLICES};
use linkerd2_proxy_api::destination::{
    GetDestination, Update as Message, destination_client::DestinationClient, update::Update,
};
use serde_json::Value;
use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};
use support::{mk_pod, mk_service, mk_slice};
use tonic::Streaming;

const NS: &str = "emojivoto";

/// A kubeconfig of the cluster at `server`, with a token user.
fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: east\n  cluster: {{server: \"{server}\"}}\nusers:\n- name: east\n  user: {{token: t}}\ncontexts:\n- name: east\n  context: {{cluster: east, user: east}}\ncurrent-context: east\n"
    )
}

/// The local state: the link Secret of `east` at `server` and the mirror of east's web-svc.
fn local_state(server: &str) -> String {
    let kubeconfig =
        base64::engine::general_purpose::STANDARD.encode(kubeconfig(server).as_bytes());
    format!(
        r#"apiVersion: v1
kind: Secret
metadata:
  name: cluster-credentials-east
  namespace: linkerd
  labels: {{multicluster.linkerd.io/cluster-name: east}}
  annotations:
    multicluster.linkerd.io/trust-domain: east.local
    multicluster.linkerd.io/cluster-domain: cluster.local
type: mirror.linkerd.io/remote-kubeconfig
data:
  kubeconfig: {kubeconfig}
---
apiVersion: v1
kind: Service
metadata:
  name: web-svc-east
  namespace: {NS}
  labels: {{multicluster.linkerd.io/remote-discovery: east, multicluster.linkerd.io/remote-service: web-svc}}
spec: {{ports: [{{name: http, port: 80}}]}}
"#
    )
}

/// East's web-svc slice with `pods` `(name, ip)` ready.
fn web_slice(pods: &[(&str, &str)]) -> Value {
    let eps: Vec<(&str, &str, bool)> = pods.iter().map(|(p, ip)| (*p, *ip, true)).collect();
    mk_slice(NS, "web-svc-1", "web-svc", ("http", 8080), &eps)
}

fn web_service() -> Value {
    let mut service = mk_service(NS, "web-svc", &[("http", 80)]);
    service["spec"]["ports"][0]["targetPort"] = 8080.into();
    service
}

fn addrs(update: &Update) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = match update {
        Update::Add(set) => set
            .addrs
            .iter()
            .map(|a| a.addr.unwrap().try_into().unwrap())
            .collect(),
        Update::Remove(set) => set.addrs.iter().map(|a| (*a).try_into().unwrap()).collect(),
        Update::NoEndpoints(_) => vec![],
    };
    out.sort();
    out
}

async fn next(stream: &mut Streaming<Message>) -> Update {
    tokio::time::timeout(Duration::from_secs(15), stream.message())
        .await
        .expect("an update in time")
        .expect("stream ok")
        .expect("stream open")
        .update
        .unwrap()
}

/// Waits until `/metrics` holds `line`.
async fn wait_metric(admin: SocketAddr, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = http_get(admin, "/metrics")
            .map(|(_, m)| m)
            .unwrap_or_default();
        if metrics.contains(line) {
            return;
        }
        assert!(Instant::now() < deadline, "{line} not reached:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// Multi-threaded: the scripted API server is served while the test blocks on the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_linked_cluster_keeps_its_endpoints_while_its_api_server_is_down() {
    let api = FakeApi::start([
        web_service(),
        mk_pod(NS, "web-1", "10.2.0.1", "web"),
        web_slice(&[("web-1", "10.2.0.1")]),
    ])
    .await;
    let state = tempfile::tempdir().unwrap();
    std::fs::write(state.path().join("local.yaml"), local_state(&api.url())).unwrap();

    let (addr, admin) = (free_addr(), free_addr());
    let args = vec![
        format!("--addr={addr}"),
        format!("--admin-addr={admin}"),
        format!("--cluster-state={}", state.path().display()),
        "--enable-ipv6=false".into(),
        "--log-level=info".into(),
    ];
    let mut process = Process::start(env!("CARGO_BIN_EXE_destination").as_ref(), &args);
    process.wait_ready(admin, Duration::from_secs(30));
    wait_metric(
        admin,
        r#"multicluster_linked_clusters{cluster="east",state="connected"} 1"#,
    )
    .await;
    wait_metric(admin, r#"pod_cache_size{cluster="east"} 1"#).await;

    let mut client = DestinationClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut stream = client
        .get(GetDestination {
            scheme: "k8s".into(),
            path: format!("web-svc-east.{NS}.svc.cluster.local:80"),
            context_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let Update::Add(set) = next(&mut stream).await else {
        panic!("expected Add")
    };
    assert_eq!(
        SocketAddr::try_from(set.addrs[0].addr.unwrap()).unwrap(),
        "10.2.0.1:8080".parse().unwrap()
    );
    assert_eq!(set.addrs.len(), 1);
    let identity = format!("{:?}", set.addrs[0].tls_identity);
    assert!(
        identity.contains("web.emojivoto.serviceaccount.identity.linkerd.east.local"),
        "east's trust domain: {identity}"
    );
    assert_eq!(set.metric_labels["target_cluster"], "east");

    // East's API server goes away, and east scales up meanwhile.
    api.go_down();
    wait_metric(
        admin,
        r#"multicluster_linked_clusters{cluster="east",state="unreachable"} 1"#,
    )
    .await;
    api.apply(PODS, mk_pod(NS, "web-2", "10.2.0.2", "web"));
    api.apply(
        SLICES,
        web_slice(&[("web-1", "10.2.0.1"), ("web-2", "10.2.0.2")]),
    );

    // It comes back: the next update adds the new pod only, so nothing was removed meanwhile.
    api.come_back();
    let added = next(&mut stream).await;
    assert!(matches!(added, Update::Add(_)), "{added:?}");
    assert_eq!(addrs(&added), ["10.2.0.2:8080".parse().unwrap()]);
    wait_metric(
        admin,
        r#"multicluster_linked_clusters{cluster="east",state="connected"} 1"#,
    )
    .await;

    process.send_sigterm();
    let status = process.wait_exit().await;
    let stderr = process.stderr();
    assert!(status.success(), "exit status {status}: {stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("linked cluster unreachable")
                && l.contains("linkerd/cluster-credentials-east")),
        "the outage is logged with the Secret: {stderr}"
    );
}
