//! The built `destination` binary with linked clusters in offline mode (issue 16): the local
//! cluster (emojivoto plus the link Secret and multicluster Services of
//! `fixtures/east-link/`) and linked clusters served from their own state directories
//! (`--linked-cluster-state NAME=DIR`, `fixtures/east/`).

use e2e::{Process, binary, fixture, free_addr, http_get};
use linkerd2_proxy_api::destination::{
    GetDestination, Update as Message, WeightedAddr, destination_client::DestinationClient,
    update::Update,
};
use std::{
    net::SocketAddr,
    path::Path,
    time::{Duration, Instant},
};
use tonic::Streaming;

/// One more web pod in east, ready in web-svc's slice.
const EAST_EXTRA_WEB_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web-djjwbqr6lt-extra
  namespace: emojivoto
  labels: {app: web-svc, linkerd.io/control-plane-ns: linkerd, pod-template-hash: djjwbqr6lt}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-djjwbqr6lt, uid: x, controller: true}]
spec:
  serviceAccountName: web
  nodeName: ip-10-20-1-11.eu-central-1.compute.internal
  containers:
  - name: linkerd-proxy
    env:
    - {name: LINKERD2_PROXY_INBOUND_LISTEN_ADDR, value: "0.0.0.0:4143"}
    - {name: LINKERD2_PROXY_ADMIN_LISTEN_ADDR, value: "0.0.0.0:4191"}
    - {name: LINKERD2_PROXY_CONTROL_LISTEN_ADDR, value: "127.0.0.1:4190"}
  - name: web-svc
    ports: [{name: http, containerPort: 8080}]
status:
  phase: Running
  podIPs: [{ip: 10.40.0.99}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-svc-extra
  namespace: emojivoto
  labels: {kubernetes.io/service-name: web-svc}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.40.0.99]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: web-djjwbqr6lt-extra, namespace: emojivoto}
"#;

struct Clusters {
    main: tempfile::TempDir,
    linked: Vec<(String, tempfile::TempDir)>,
}

impl Clusters {
    /// emojivoto with the east link; east from its fixture; more linked clusters as copies of
    /// east with their pods' addresses at `10.<n>.` instead of `10.40.`.
    fn new(more: &[(&str, u8)]) -> Self {
        let main = tempfile::tempdir().unwrap();
        std::fs::copy(
            fixture("emojivoto").join("cluster.yaml"),
            main.path().join("cluster.yaml"),
        )
        .unwrap();
        std::fs::copy(
            fixture("east-link").join("link.yaml"),
            main.path().join("link.yaml"),
        )
        .unwrap();
        let east_state = std::fs::read_to_string(fixture("east").join("cluster.yaml")).unwrap();
        let mut linked = Vec::new();
        let east = tempfile::tempdir().unwrap();
        std::fs::write(east.path().join("cluster.yaml"), &east_state).unwrap();
        linked.push(("east".to_string(), east));
        for (name, net) in more {
            let dir = tempfile::tempdir().unwrap();
            let state = east_state.replace("10.40.", &format!("10.{net}."));
            std::fs::write(dir.path().join("cluster.yaml"), state).unwrap();
            std::fs::write(
                main.path().join(format!("link-{name}.yaml")),
                link_secret(name),
            )
            .unwrap();
            linked.push((name.to_string(), dir));
        }
        Self { main, linked }
    }

    fn dir(&self, name: &str) -> &Path {
        self.linked
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.path())
            .unwrap()
    }

    fn args(&self, addr: SocketAddr, admin: SocketAddr) -> Vec<String> {
        let mut args = vec![
            format!("--addr={addr}"),
            format!("--admin-addr={admin}"),
            format!("--cluster-state={}", self.main.path().display()),
            "--enable-ipv6=false".into(),
            "--log-level=info".into(),
        ];
        for (name, dir) in &self.linked {
            args.push(format!(
                "--linked-cluster-state={name}={}",
                dir.path().display()
            ));
        }
        args
    }
}

/// The link Secret of cluster `name` (trust domain `<name>.local`), kubeconfig a placeholder.
fn link_secret(name: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Secret
metadata:
  name: cluster-credentials-{name}
  namespace: linkerd
  labels: {{multicluster.linkerd.io/cluster-name: {name}}}
  annotations:
    multicluster.linkerd.io/trust-domain: {name}.local
    multicluster.linkerd.io/cluster-domain: cluster.local
type: mirror.linkerd.io/remote-kubeconfig
data:
  kubeconfig: YXBpVmVyc2lvbjogdjEK
"#
    )
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

fn sockets(list: &[&str]) -> Vec<SocketAddr> {
    list.iter().map(|a| a.parse().unwrap()).collect()
}

fn identity(addr: &WeightedAddr) -> String {
    use linkerd2_proxy_api::destination::tls_identity::Strategy;
    match addr.tls_identity.as_ref().and_then(|t| t.strategy.as_ref()) {
        Some(Strategy::DnsLikeIdentity(id)) => id.name.clone(),
        other => panic!("no DNS-like identity: {other:?}"),
    }
}

async fn next(stream: &mut Streaming<Message>) -> Update {
    tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("an update in time")
        .expect("stream ok")
        .expect("stream open")
        .update
        .unwrap()
}

async fn get(
    client: &mut DestinationClient<tonic::transport::Channel>,
    path: &str,
) -> Result<Streaming<Message>, tonic::Status> {
    client
        .get(GetDestination {
            scheme: "k8s".into(),
            path: path.into(),
            context_token: r#"{"ns":"emojivoto","nodeName":"ip-10-20-1-11.eu-west-1.compute.internal"}"#
                .into(),
        })
        .await
        .map(|r| r.into_inner())
}

/// Waits until `/metrics` holds `line`.
async fn wait_metric(admin: SocketAddr, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
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

async fn start(
    clusters: &Clusters,
) -> (
    Process,
    SocketAddr,
    DestinationClient<tonic::transport::Channel>,
) {
    let bin = binary("destination", "destination");
    let (addr, admin) = (free_addr(), free_addr());
    let mut process = Process::start(&bin, &clusters.args(addr, admin));
    process.wait_ready(admin, Duration::from_secs(30));
    let size = format!("cluster_store_size {}", clusters.linked.len());
    wait_metric(admin, &size).await;
    let client = DestinationClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    (process, admin, client)
}

#[tokio::test]
async fn remote_discovery_follows_the_linked_cluster_and_its_link() {
    let clusters = Clusters::new(&[]);
    let (mut process, admin, mut client) = start(&clusters).await;
    wait_metric(
        admin,
        r#"multicluster_linked_clusters{cluster="east",state="connected"} 1"#,
    )
    .await;
    wait_metric(admin, r#"endpointslices_cache_size{cluster="east"} 2"#).await;

    let mut stream = get(&mut client, "web-svc-east.emojivoto.svc.cluster.local:80")
        .await
        .unwrap();
    let Update::Add(set) = next(&mut stream).await else {
        panic!("expected Add")
    };
    assert_eq!(set.addrs.len(), 1);
    let web = &set.addrs[0];
    assert_eq!(
        SocketAddr::try_from(web.addr.unwrap()).unwrap(),
        "10.40.2.19:8080".parse().unwrap()
    );
    // East's trust domain, east's pod.
    assert_eq!(
        identity(web),
        "web.emojivoto.serviceaccount.identity.linkerd.east.local"
    );
    assert_eq!(web.metric_labels["pod"], "web-djjwbqr6lt-sfd7g");
    assert_eq!(web.metric_labels["zone"], "eu-central-1c");
    assert_eq!(set.metric_labels["service"], "web-svc");
    assert_eq!(set.metric_labels["namespace"], "emojivoto");
    assert_eq!(set.metric_labels["target_cluster"], "east");
    wait_metric(
        admin,
        r#"endpoints_subscribers{cluster="east",namespace="emojivoto",service="web-svc-east",port="80",hostname="",nodename="ip-10-20-1-11.eu-west-1.compute.internal"} 1"#,
    )
    .await;

    // East scales up, then down.
    let extra = clusters.dir("east").join("extra.yaml");
    std::fs::write(&extra, EAST_EXTRA_WEB_POD).unwrap();
    let added = next(&mut stream).await;
    assert!(matches!(added, Update::Add(_)), "{added:?}");
    assert_eq!(addrs(&added), sockets(&["10.40.0.99:8080"]));
    std::fs::remove_file(&extra).unwrap();
    let removed = next(&mut stream).await;
    assert!(matches!(removed, Update::Remove(_)), "{removed:?}");
    assert_eq!(addrs(&removed), sockets(&["10.40.0.99:8080"]));

    // The remote-discovery label without the remote-service label; an unknown cluster.
    std::fs::write(
        clusters.main.path().join("bad-mirrors.yaml"),
        r#"
apiVersion: v1
kind: Service
metadata:
  name: half-mirror
  namespace: emojivoto
  labels: {multicluster.linkerd.io/remote-discovery: east}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata:
  name: web-svc-west
  namespace: emojivoto
  labels: {multicluster.linkerd.io/remote-discovery: west, multicluster.linkerd.io/remote-service: web-svc}
spec: {ports: [{port: 80}]}
"#,
    )
    .unwrap();
    wait_metric(admin, r#"service_cache_size{cluster="local"} 7"#).await;
    let half = get(&mut client, "half-mirror.emojivoto.svc.cluster.local:80")
        .await
        .unwrap_err();
    assert_eq!(half.code(), tonic::Code::FailedPrecondition, "{half:?}");
    assert!(half.message().contains("remote-service"), "{half:?}");
    let west = get(&mut client, "web-svc-west.emojivoto.svc.cluster.local:80")
        .await
        .unwrap_err();
    assert_eq!(west.code(), tonic::Code::NotFound, "{west:?}");
    assert_eq!(west.message(), "Remote cluster not found: west");

    // A mirror of a remote ExternalName Service.
    std::fs::write(
        clusters.dir("east").join("external.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: ext, namespace: emojivoto}\nspec: {type: ExternalName, externalName: example.com}\n",
    )
    .unwrap();
    std::fs::write(
        clusters.main.path().join("ext-mirror.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: ext-east\n  namespace: emojivoto\n  labels: {multicluster.linkerd.io/remote-discovery: east, multicluster.linkerd.io/remote-service: ext}\nspec: {ports: [{port: 80}]}\n",
    )
    .unwrap();
    wait_metric(admin, r#"service_cache_size{cluster="east"} 3"#).await;
    wait_metric(admin, r#"service_cache_size{cluster="local"} 8"#).await;
    let external = get(&mut client, "ext-east.emojivoto.svc.cluster.local:80")
        .await
        .unwrap_err();
    assert_eq!(
        external.code(),
        tonic::Code::InvalidArgument,
        "{external:?}"
    );
    assert!(external.message().contains("ExternalName"), "{external:?}");

    // The link Secret deleted: east's endpoints go; recreated: they come back.
    let link = clusters.main.path().join("link.yaml");
    let linked = std::fs::read_to_string(&link).unwrap();
    let without_secret = linked
        .split("\n---\n")
        .filter(|doc| !doc.contains("kind: Secret"))
        .collect::<Vec<_>>()
        .join("\n---\n");
    std::fs::write(&link, &without_secret).unwrap();
    let removed = next(&mut stream).await;
    assert!(matches!(removed, Update::Remove(_)), "{removed:?}");
    assert_eq!(addrs(&removed), sockets(&["10.40.2.19:8080"]));
    // The remote Service is no longer known: `exists` is false, as a new `Get` is refused.
    assert!(
        matches!(next(&mut stream).await, Update::NoEndpoints(n) if !n.exists),
        "NoEndpoints{{exists: false}} after the last Remove"
    );
    wait_metric(admin, "cluster_store_size 0").await;
    let gone = get(&mut client, "web-svc-east.emojivoto.svc.cluster.local:80")
        .await
        .unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);

    std::fs::write(&link, &linked).unwrap();
    let back = next(&mut stream).await;
    assert!(matches!(back, Update::Add(_)), "{back:?}");
    assert_eq!(addrs(&back), sockets(&["10.40.2.19:8080"]));

    process.send_sigterm();
    let status = process.wait_exit().await;
    let stderr = process.stderr();
    assert!(status.success(), "exit status {status}: {stderr}");
}

#[tokio::test]
async fn federated_services_serve_the_union_of_their_members() {
    let clusters = Clusters::new(&[("west", 50)]);
    let (mut process, admin, mut client) = start(&clusters).await;
    for cluster in ["east", "west"] {
        wait_metric(
            admin,
            &format!(r#"endpointslices_cache_size{{cluster="{cluster}"}} 2"#),
        )
        .await;
    }

    // Local web-svc and east's.
    let mut stream = get(
        &mut client,
        "web-svc-federated.emojivoto.svc.cluster.local:80",
    )
    .await
    .unwrap();
    let local = next(&mut stream).await;
    assert_eq!(addrs(&local), sockets(&["10.244.2.19:8080"]));
    let Update::Add(set) = local else {
        panic!("expected Add")
    };
    assert_eq!(
        identity(&set.addrs[0]),
        "web.emojivoto.serviceaccount.identity.linkerd.cluster.local"
    );
    assert_eq!(set.metric_labels.get("target_cluster"), None);
    let east = next(&mut stream).await;
    assert_eq!(addrs(&east), sockets(&["10.40.2.19:8080"]));
    let Update::Add(set) = east else {
        panic!("expected Add")
    };
    assert_eq!(
        identity(&set.addrs[0]),
        "web.emojivoto.serviceaccount.identity.linkerd.east.local"
    );
    assert_eq!(set.metric_labels["target_cluster"], "east");

    // West joins through the annotation, with an unknown cluster beside it.
    let link = clusters.main.path().join("link.yaml");
    let linked = std::fs::read_to_string(&link).unwrap();
    std::fs::write(
        &link,
        linked.replace(
            "remote-discovery: web-svc@east",
            "remote-discovery: web-svc@east,web-svc@west,web-svc@north",
        ),
    )
    .unwrap();
    let west = next(&mut stream).await;
    assert!(matches!(west, Update::Add(_)), "{west:?}");
    assert_eq!(addrs(&west), sockets(&["10.50.2.19:8080"]));
    wait_metric(admin, "multicluster_unknown_cluster_members_total 1").await;

    // The local member dropped from the annotation: its endpoint goes.
    std::fs::write(
        &link,
        linked
            .replace(
                "remote-discovery: web-svc@east",
                "remote-discovery: web-svc@east,web-svc@west,web-svc@north",
            )
            .replace("    multicluster.linkerd.io/local-discovery: web-svc\n", ""),
    )
    .unwrap();
    let dropped = next(&mut stream).await;
    assert!(matches!(dropped, Update::Remove(_)), "{dropped:?}");
    assert_eq!(addrs(&dropped), sockets(&["10.244.2.19:8080"]));

    // West's state deleted: its endpoint goes, east's stays.
    std::fs::remove_file(clusters.dir("west").join("cluster.yaml")).unwrap();
    let gone = next(&mut stream).await;
    assert!(matches!(gone, Update::Remove(_)), "{gone:?}");
    assert_eq!(addrs(&gone), sockets(&["10.50.2.19:8080"]));

    // East scales up: only its new endpoint is added (and nothing came between).
    std::fs::write(clusters.dir("east").join("extra.yaml"), EAST_EXTRA_WEB_POD).unwrap();
    let added = next(&mut stream).await;
    assert!(matches!(added, Update::Add(_)), "{added:?}");
    assert_eq!(addrs(&added), sockets(&["10.40.0.99:8080"]));

    process.send_sigterm();
    let status = process.wait_exit().await;
    let stderr = process.stderr();
    assert!(status.success(), "exit status {status}: {stderr}");
    assert!(
        stderr.contains("web-svc@north") && stderr.contains("emojivoto/web-svc-federated"),
        "the unknown member is logged with its Service: {stderr}"
    );
}

#[tokio::test]
async fn bad_link_secrets_are_logged_counted_and_skipped() {
    let clusters = Clusters::new(&[]);
    // Beside the good east link: no kubeconfig, a kubeconfig that is not base64, one that is
    // not a kubeconfig, and one in another namespace (not a link of this control plane).
    let bad = [
        ("no-kubeconfig", "alpha", "linkerd", "{}"),
        ("not-base64", "beta", "linkerd", "{kubeconfig: '%%%'}"),
        (
            "not-a-kubeconfig",
            "gamma",
            "linkerd",
            "{kubeconfig: bm90IHlhbWw6IFs=}",
        ),
        (
            "elsewhere",
            "delta",
            "default",
            "{kubeconfig: YXBpVmVyc2lvbjogdjEK}",
        ),
    ];
    let docs: Vec<String> = bad
        .iter()
        .map(|(name, cluster, ns, data)| {
            format!(
                r#"apiVersion: v1
kind: Secret
metadata:
  name: {name}
  namespace: {ns}
  labels: {{multicluster.linkerd.io/cluster-name: {cluster}}}
  annotations: {{multicluster.linkerd.io/trust-domain: x.local, multicluster.linkerd.io/cluster-domain: cluster.local}}
type: mirror.linkerd.io/remote-kubeconfig
data: {data}
"#
            )
        })
        .collect();
    std::fs::write(
        clusters.main.path().join("bad-links.yaml"),
        docs.join("---\n"),
    )
    .unwrap();
    let (mut process, admin, mut client) = start(&clusters).await;
    wait_metric(
        admin,
        r#"multicluster_link_errors_total{reason="no_kubeconfig"} 1"#,
    )
    .await;
    wait_metric(
        admin,
        r#"multicluster_link_errors_total{reason="malformed_kubeconfig"} 2"#,
    )
    .await;

    // East and the local cluster are served as before.
    let mut remote = get(&mut client, "web-svc-east.emojivoto.svc.cluster.local:80")
        .await
        .unwrap();
    assert_eq!(
        addrs(&next(&mut remote).await),
        sockets(&["10.40.2.19:8080"])
    );
    let mut local = get(&mut client, "web-svc.emojivoto.svc.cluster.local:80")
        .await
        .unwrap();
    assert_eq!(
        addrs(&next(&mut local).await),
        sockets(&["10.244.2.19:8080"])
    );

    process.send_sigterm();
    let status = process.wait_exit().await;
    let stderr = process.stderr();
    assert!(status.success(), "exit status {status}: {stderr}");
    for name in [
        "linkerd/no-kubeconfig",
        "linkerd/not-base64",
        "linkerd/not-a-kubeconfig",
    ] {
        assert!(stderr.contains(name), "{name} is logged: {stderr}");
    }
    assert!(!stderr.contains("default/elsewhere"), "{stderr}");
}

#[tokio::test]
async fn a_linked_clusters_bad_objects_are_counted_and_logged_under_its_name() {
    let clusters = Clusters::new(&[]);
    let (mut process, admin, mut client) = start(&clusters).await;
    wait_metric(admin, r#"service_cache_size{cluster="east"} 2"#).await;

    // East sends a Service that does not decode and a file that does not parse.
    std::fs::write(
        clusters.dir("east").join("bad-service.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: bad-east, namespace: emojivoto}\nspec: {ports: not-a-list}\n",
    )
    .unwrap();
    std::fs::write(clusters.dir("east").join("broken.yaml"), "kind: [").unwrap();
    wait_metric(
        admin,
        r#"index_invalid_objects_total{cluster="east",kind="Service"} 1"#,
    )
    .await;
    wait_metric(admin, r#"offline_invalid_files_total{cluster="east"} 1"#).await;
    let (_, metrics) = http_get(admin, "/metrics").unwrap();
    // The local cluster sent nothing bad: its series are there, at 0.
    assert!(
        metrics.contains("index_invalid_objects_total{cluster=\"local\",kind=\"Service\"} 0\n"),
        "the local cluster sent nothing bad:\n{metrics}"
    );
    assert!(
        metrics.contains("offline_invalid_files_total{cluster=\"local\"} 0\n"),
        "{metrics}"
    );

    // East's good objects are served all the same.
    let mut stream = get(&mut client, "web-svc-east.emojivoto.svc.cluster.local:80")
        .await
        .unwrap();
    assert_eq!(
        addrs(&next(&mut stream).await),
        sockets(&["10.40.2.19:8080"])
    );

    process.send_sigterm();
    let status = process.wait_exit().await;
    let stderr = process.stderr();
    assert!(status.success(), "exit status {status}: {stderr}");
    // Each line names the cluster (its span) and the object or file.
    let logged = |what: &str| {
        stderr
            .lines()
            .any(|l| l.contains("linked_cluster{cluster=east}") && l.contains(what))
    };
    assert!(logged("bad-east"), "the bad Service: {stderr}");
    assert!(logged("broken.yaml"), "the broken file: {stderr}");
}

/// Standard base64 of `bytes` (the `data` of a Secret manifest).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn base64_encodes_as_secrets_carry_it() {
    assert_eq!(base64(b"apiVersion: v1\n"), "YXBpVmVyc2lvbjogdjEK");
    assert_eq!(base64(b"ab"), "YWI=");
    assert_eq!(base64(b"a"), "YQ==");
}

#[tokio::test]
async fn ready_does_not_wait_for_linked_clusters() {
    let clusters = Clusters::new(&[]);
    // West is linked through its kubeconfig (no --linked-cluster-state), at a port nothing
    // listens on.
    let closed = free_addr();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: west\n  cluster: {{server: \"http://{closed}\"}}\nusers:\n- name: west\n  user: {{token: t}}\ncontexts:\n- name: west\n  context: {{cluster: west, user: west}}\ncurrent-context: west\n"
    );
    std::fs::write(
        clusters.main.path().join("link-west.yaml"),
        link_secret("west").replace("YXBpVmVyc2lvbjogdjEK", &base64(kubeconfig.as_bytes())),
    )
    .unwrap();

    let bin = binary("destination", "destination");
    let (addr, admin) = (free_addr(), free_addr());
    let mut process = Process::start(&bin, &clusters.args(addr, admin));
    process.wait_ready(admin, Duration::from_secs(30));
    wait_metric(admin, "cluster_store_size 2").await;
    // Ready, with west still syncing (it is called unreachable only after 10 s).
    let (_, metrics) = http_get(admin, "/metrics").unwrap();
    assert!(
        metrics.contains(r#"multicluster_linked_clusters{cluster="west",state="syncing"} 1"#),
        "{metrics}"
    );
    wait_metric(
        admin,
        r#"multicluster_linked_clusters{cluster="east",state="connected"} 1"#,
    )
    .await;

    // The local cluster and east are served; west's mirror has no endpoints yet.
    let mut client = DestinationClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut local = get(&mut client, "web-svc.emojivoto.svc.cluster.local:80")
        .await
        .unwrap();
    assert_eq!(
        addrs(&next(&mut local).await),
        sockets(&["10.244.2.19:8080"])
    );
    let mut east = get(&mut client, "web-svc-east.emojivoto.svc.cluster.local:80")
        .await
        .unwrap();
    assert_eq!(addrs(&next(&mut east).await), sockets(&["10.40.2.19:8080"]));
    std::fs::write(
        clusters.main.path().join("west-mirror.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web-svc-west\n  namespace: emojivoto\n  labels: {multicluster.linkerd.io/remote-discovery: west, multicluster.linkerd.io/remote-service: web-svc}\nspec: {ports: [{port: 80}]}\n",
    )
    .unwrap();
    wait_metric(admin, r#"service_cache_size{cluster="local"} 6"#).await;
    let mut west = get(&mut client, "web-svc-west.emojivoto.svc.cluster.local:80")
        .await
        .unwrap();
    // Whether west's web-svc exists is not known before west's lists are in.
    assert!(
        matches!(next(&mut west).await, Update::NoEndpoints(n) if !n.exists),
        "NoEndpoints{{exists: false}} while west has not synced"
    );

    // After 10 s without its lists, west is unreachable, logged and counted.
    wait_metric(
        admin,
        r#"multicluster_linked_clusters{cluster="west",state="unreachable"} 1"#,
    )
    .await;
    wait_metric(
        admin,
        r#"multicluster_link_errors_total{reason="unreachable"} 1"#,
    )
    .await;

    process.send_sigterm();
    let status = process.wait_exit().await;
    let stderr = process.stderr();
    assert!(status.success(), "exit status {status}: {stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("linked cluster synced") && l.contains("east")),
        "east's sync is logged: {stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("linked cluster unreachable")
                && l.contains("linkerd/cluster-credentials-west")),
        "west is logged with its Secret: {stderr}"
    );
}
