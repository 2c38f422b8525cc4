//! The cluster store in kube mode (issue 16): a link Secret whose kubeconfig points at a
//! scripted API server on loopback (`fake_apiserver`) gives a discovery index of that cluster,
//! which keeps its endpoints while the server is down and follows the new state when it comes
//! back; an unreachable cluster is reported and does not disturb the others; a changed Secret
//! restarts the cluster's watches and a deleted one stops them.

mod fake_apiserver;
#[path = "support/logged.rs"]
mod logged;

use base64::Engine;
use fake_apiserver::{FakeApi, PODS, SLICES, TIMEOUT};
use k8s_openapi::api::core::v1::Secret;
use linkerd_index::{
    ClusterStore, ClusterStoreConfig, EndpointsKey, EndpointsView, Event, IndexMetrics,
    LinkMetrics, LinkedCluster, ObjectRef, Watches,
};
use logged::capture_thread;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use std::{net::SocketAddr, path::Path, sync::Arc, time::Duration};

const NS: &str = "emojivoto";

/// A kubeconfig of a cluster at `server`, with a token user.
fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{server}\"}}\nusers:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n"
    )
}

/// The link Secret of cluster `cluster` in `linkerd`, with `kubeconfig`.
fn link(cluster: &str, kubeconfig: &str) -> Secret {
    let data = base64::engine::general_purpose::STANDARD.encode(kubeconfig);
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": format!("cluster-credentials-{cluster}"), "namespace": "linkerd",
            "labels": {"multicluster.linkerd.io/cluster-name": cluster},
            "annotations": {
                "multicluster.linkerd.io/trust-domain": format!("{cluster}.local"),
                "multicluster.linkerd.io/cluster-domain": "cluster.local",
            },
        },
        "type": "mirror.linkerd.io/remote-kubeconfig",
        "data": {"kubeconfig": data},
    }))
    .unwrap()
}

fn mk_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web-svc", "namespace": NS},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    })
}

fn mk_pod(name: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [{"name": "web"}]},
        "status": {"phase": "Running", "podIPs": [{"ip": ip}]},
    })
}

fn mk_slice(pods: &[(&str, &str)]) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-svc-1", "namespace": NS, "labels": {"kubernetes.io/service-name": "web-svc"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": pods.iter().map(|(pod, ip)| json!({
            "addresses": [ip], "conditions": {"ready": true},
            "targetRef": {"kind": "Pod", "namespace": NS, "name": pod},
        })).collect::<Vec<_>>(),
    })
}

/// Writes `items` into `dir/state.json`, as one `kind: List`.
fn write_state(dir: &Path, items: Vec<Value>) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    std::fs::write(dir.join("state.json"), list.to_string()).unwrap();
}

fn web_key() -> EndpointsKey {
    EndpointsKey {
        service: ObjectRef {
            namespace: NS.into(),
            name: "web-svc".into(),
        },
        port: 80,
        hostname: None,
    }
}

fn addrs(view: &EndpointsView) -> Vec<SocketAddr> {
    let mut addrs: Vec<SocketAddr> = view.endpoints.values().map(|e| e.addr).collect();
    addrs.sort();
    addrs
}

fn socks(list: &[&str]) -> Vec<SocketAddr> {
    list.iter().map(|a| a.parse().unwrap()).collect()
}

/// Waits until the view's addresses are `want`.
async fn wait_addrs(rx: &mut linkerd_index::topic::Receiver<EndpointsView>, want: &[&str]) {
    let want = socks(want);
    let waited = tokio::time::timeout(TIMEOUT, rx.wait_for(|v| addrs(v) == want))
        .await
        .map(|r| r.is_ok());
    assert!(
        waited == Ok(true),
        "addresses {:?}, want {want:?}",
        addrs(&rx.borrow())
    );
}

/// Waits until the store holds cluster `name` other than `not` (a restarted one).
async fn wait_cluster(
    store: &ClusterStore,
    name: &str,
    not: Option<&Arc<LinkedCluster>>,
) -> Arc<LinkedCluster> {
    let mut clusters = store.clusters();
    let found = tokio::time::timeout(
        TIMEOUT,
        clusters.wait_for(|c| {
            c.get(name)
                .is_some_and(|c| not.is_none_or(|n| !Arc::ptr_eq(n, c)))
        }),
    )
    .await;
    assert!(matches!(found, Ok(Ok(_))), "cluster {name} not linked");
    store.get(name).unwrap()
}

/// The text encoding of `registry`.
fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

/// Waits until `registry` encodes `line`.
async fn wait_metric(registry: &Registry, line: &str) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !encode(registry).contains(line) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{line} not reached:\n{}",
            encode(registry)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The store of the link Secrets `watches` delivers, its metrics in `registry`.
fn store(
    watches: &mut Watches,
    registry: &mut Registry,
    config: ClusterStoreConfig,
) -> (ClusterStore, LinkMetrics) {
    let metrics = LinkMetrics::register(registry);
    let index_metrics = IndexMetrics::register(registry);
    let store = ClusterStore::watch(watches, config, index_metrics, metrics.clone());
    (store, metrics)
}

/// Links in `linkerd`, late after `unreachable_after`, the clusters of `offline` served from
/// their directories.
fn config(unreachable_after: Duration, offline: &[(&str, &Path)]) -> ClusterStoreConfig {
    ClusterStoreConfig {
        namespace: "linkerd".into(),
        offline: offline
            .iter()
            .map(|(name, dir)| (name.to_string(), dir.to_path_buf()))
            .collect(),
        unreachable_after,
    }
}

/// Waits until `registry` shows linked cluster `cluster` in `state` (`syncing`, `connected`,
/// `unreachable`).
async fn wait_link_state(registry: &Registry, cluster: &str, state: &str) {
    let line = format!(r#"multicluster_linked_clusters{{cluster="{cluster}",state="{state}"}} 1"#);
    wait_metric(registry, &line).await;
}

/// A cluster store (its metrics in `registry`) fed link Secrets by `watches`, given the link of
/// `east`, served from `dir` and reported late after `unreachable_after`.
struct EastLink {
    watches: Watches,
    registry: Registry,
    store: ClusterStore,
    metrics: LinkMetrics,
}

fn link_east_dir(dir: &Path, unreachable_after: Duration) -> EastLink {
    let mut watches = Watches::new(IndexMetrics::default());
    let mut registry = Registry::default();
    let (store, metrics) = store(
        &mut watches,
        &mut registry,
        config(unreachable_after, &[("east", dir)]),
    );
    watches.apply(Event::Apply(link("east", "apiVersion: v1\n")));
    EastLink {
        watches,
        registry,
        store,
        metrics,
    }
}

#[tokio::test]
async fn a_linked_cluster_keeps_its_endpoints_while_its_api_server_is_down() {
    let api = FakeApi::start([
        mk_service(),
        mk_pod("web-1", "10.2.0.1"),
        mk_slice(&[("web-1", "10.2.0.1")]),
    ])
    .await;
    let mut watches = Watches::new(IndexMetrics::default());
    let mut registry = Registry::default();
    let (store, _) = store(
        &mut watches,
        &mut registry,
        config(Duration::from_secs(10), &[]),
    );
    watches.apply(Event::Apply(link("east", &kubeconfig(&api.url()))));

    let east = wait_cluster(&store, "east", None).await;
    assert_eq!(east.trust_domain, "east.local");
    assert!(
        east.source.starts_with(&format!("api {}", api.url())),
        "{}",
        east.source
    );
    let mut web = east.index.endpoints(web_key());
    wait_addrs(&mut web, &["10.2.0.1:8080"]).await;
    wait_link_state(&registry, "east", "connected").await;
    wait_metric(&registry, r#"pod_cache_size{cluster="east"} 1"#).await;

    // The API server goes away; east scales up meanwhile.
    api.go_down();
    api.apply(PODS, mk_pod("web-2", "10.2.0.2"));
    api.apply(
        SLICES,
        mk_slice(&[("web-1", "10.2.0.1"), ("web-2", "10.2.0.2")]),
    );

    // The cluster is reported unreachable; its last known endpoints are kept.
    wait_link_state(&registry, "east", "unreachable").await;
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="unreachable"} 1"#,
    )
    .await;
    assert_eq!(addrs(&web.borrow()), socks(&["10.2.0.1:8080"]));

    // It comes back: the new state is followed.
    api.come_back();
    wait_addrs(&mut web, &["10.2.0.1:8080", "10.2.0.2:8080"]).await;
    wait_link_state(&registry, "east", "connected").await;
    assert!(!encode(&registry).contains(r#"cluster="east",state="unreachable""#));

    // The Secret deleted: the cluster is unlinked and its watches stop.
    watches.apply(Event::<Secret>::Delete(ObjectRef {
        namespace: "linkerd".into(),
        name: "cluster-credentials-east".into(),
    }));
    let mut clusters = store.clusters();
    tokio::time::timeout(TIMEOUT, clusters.wait_for(|c| c.is_empty()))
        .await
        .unwrap()
        .unwrap();
    api.wait_for_watches_closed(PODS).await;
    wait_metric(&registry, "cluster_store_size 0").await;
    // Its gauges go; its counters stay (one that vanished and came back would read as a reset).
    let text = encode(&registry);
    let left: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(r#"cluster="east""#))
        .collect();
    assert!(!left.is_empty(), "{text}");
    assert!(
        left.iter().all(|l| l
            .split('{')
            .next()
            .is_some_and(|name| name.ends_with("_total"))),
        "{text}"
    );
}

#[tokio::test]
async fn an_unreachable_cluster_is_reported_and_a_changed_secret_restarts_it() {
    let api = FakeApi::start([
        mk_service(),
        mk_pod("web-1", "10.2.0.1"),
        mk_slice(&[("web-1", "10.2.0.1")]),
    ])
    .await;
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut watches = Watches::new(IndexMetrics::default());
    let mut registry = Registry::default();
    let (store, _) = store(
        &mut watches,
        &mut registry,
        config(Duration::from_millis(100), &[]),
    );
    watches.apply(Event::Apply(link(
        "west",
        &kubeconfig(&format!("http://{closed}")),
    )));
    watches.apply(Event::Apply(link("east", &kubeconfig(&api.url()))));

    wait_link_state(&registry, "west", "unreachable").await;
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="unreachable"} 1"#,
    )
    .await;
    let west = wait_cluster(&store, "west", None).await;
    assert!(!west.is_connected());
    // East is served all the same.
    let east = wait_cluster(&store, "east", None).await;
    wait_addrs(&mut east.index.endpoints(web_key()), &["10.2.0.1:8080"]).await;

    // West's Secret now points at the server: its watches restart on a new index.
    watches.apply(Event::Apply(link("west", &kubeconfig(&api.url()))));
    let restarted = wait_cluster(&store, "west", Some(&west)).await;
    wait_addrs(
        &mut restarted.index.endpoints(web_key()),
        &["10.2.0.1:8080"],
    )
    .await;
    wait_link_state(&registry, "west", "connected").await;
    assert!(!encode(&registry).contains(r#"cluster="west",state="unreachable""#));
    // East was not restarted.
    assert!(Arc::ptr_eq(&east, &store.get("east").unwrap()));
}

/// A cluster served from a `--linked-cluster-state` directory that is not there when its
/// Secret arrives is linked all the same, not connected (shown unreachable once it is late,
/// as a cluster whose API server does not answer) until the directory appears; then it is
/// read and followed.
#[tokio::test]
async fn a_linked_state_directory_that_appears_later_is_picked_up() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("east");
    let EastLink {
        watches: _watches,
        registry,
        store,
        metrics,
    } = link_east_dir(&dir, Duration::from_millis(100));
    let east = wait_cluster(&store, "east", None).await;
    assert_eq!(east.source, format!("dir {}", dir.display()));
    wait_link_state(&registry, "east", "unreachable").await;
    assert!(!east.is_connected());

    // The directory appears, written elsewhere and moved in whole.
    let staging = parent.path().join("staging");
    std::fs::create_dir(&staging).unwrap();
    write_state(
        &staging,
        vec![
            mk_service(),
            mk_pod("web-1", "10.2.0.1"),
            mk_slice(&[("web-1", "10.2.0.1")]),
        ],
    );
    std::fs::rename(&staging, &dir).unwrap();

    let mut web = east.index.endpoints(web_key());
    wait_addrs(&mut web, &["10.2.0.1:8080"]).await;
    wait_link_state(&registry, "east", "connected").await;
    assert!(east.is_connected());
    assert!(
        Arc::ptr_eq(&east, &store.get("east").unwrap()),
        "not restarted"
    );
    assert_eq!(metrics.errors("state_dir"), 0);

    // It is followed from then on: an edit is seen.
    write_state(
        &dir,
        vec![
            mk_service(),
            mk_pod("web-1", "10.2.0.1"),
            mk_pod("web-2", "10.2.0.2"),
            mk_slice(&[("web-1", "10.2.0.1"), ("web-2", "10.2.0.2")]),
        ],
    );
    wait_addrs(&mut web, &["10.2.0.1:8080", "10.2.0.2:8080"]).await;
}

/// A linked cluster whose `--linked-cluster-state` directory goes away after it synced is
/// shown unreachable, as one whose API server stops answering, and keeps its endpoints; it is
/// connected again when the directory is back (newcomer finding: it stayed `connected`).
#[tokio::test]
async fn a_linked_state_directory_that_goes_away_shows_the_cluster_unreachable() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("east");
    std::fs::create_dir(&dir).unwrap();
    write_state(
        &dir,
        vec![
            mk_service(),
            mk_pod("web-1", "10.2.0.1"),
            mk_slice(&[("web-1", "10.2.0.1")]),
        ],
    );
    let EastLink {
        watches: _watches,
        registry,
        store,
        metrics,
    } = link_east_dir(&dir, Duration::from_secs(10));
    let east = wait_cluster(&store, "east", None).await;
    let mut web = east.index.endpoints(web_key());
    wait_addrs(&mut web, &["10.2.0.1:8080"]).await;
    wait_link_state(&registry, "east", "connected").await;

    let away = parent.path().join("away");
    std::fs::rename(&dir, &away).unwrap();
    wait_link_state(&registry, "east", "unreachable").await;
    assert_eq!(metrics.errors("unreachable"), 1);
    assert_eq!(addrs(&web.borrow()), socks(&["10.2.0.1:8080"]));

    std::fs::rename(&away, &dir).unwrap();
    wait_link_state(&registry, "east", "connected").await;
    assert_eq!(addrs(&web.borrow()), socks(&["10.2.0.1:8080"]));
    assert!(
        Arc::ptr_eq(&east, &store.get("east").unwrap()),
        "not restarted"
    );
}

/// A `--linked-cluster-state` path that is a file is logged and counted once, shown
/// unreachable, and tried again until it is a directory.
#[tokio::test]
async fn a_linked_state_path_that_is_a_file_is_retried() {
    let parent = tempfile::tempdir().unwrap();
    let path = parent.path().join("east");
    std::fs::write(&path, "not a directory").unwrap();
    let EastLink {
        watches: _watches,
        registry,
        store,
        metrics,
    } = link_east_dir(&path, Duration::from_secs(10));
    wait_link_state(&registry, "east", "unreachable").await;
    assert!(store.get("east").is_none());

    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    write_state(&path, vec![mk_service()]);
    let east = wait_cluster(&store, "east", None).await;
    wait_link_state(&registry, "east", "connected").await;
    assert!(east.is_connected());
    assert_eq!(metrics.errors("state_dir"), 1);
}

/// Of the link Secrets naming one cluster, the first by namespace/name links it, whatever
/// order they came in, so that a restart and every replica serve the same one (newcomer
/// finding: the running link kept the cluster, and a fresh start on the same Secrets served the
/// other Secret's trust domain). When it goes, the next one links the cluster.
#[tokio::test]
async fn the_link_secret_first_by_name_links_a_cluster_named_twice() {
    let dir = tempfile::tempdir().unwrap();
    write_state(dir.path(), vec![mk_service()]);
    let EastLink {
        watches,
        registry,
        store,
        metrics,
    } = link_east_dir(dir.path(), Duration::from_secs(10));
    let east = wait_cluster(&store, "east", None).await;
    assert_eq!(east.trust_domain, "east.local");

    // Sorts after `cluster-credentials-east`: ignored.
    let mut later = link("east", "apiVersion: v1\n");
    later.metadata.name = Some("z-east-link".into());
    watches.apply(Event::Apply(later));
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="duplicate_cluster"} 1"#,
    )
    .await;
    assert!(Arc::ptr_eq(&east, &store.get("east").unwrap()));

    // Sorts before it: links the cluster, as a fresh start on these Secrets would.
    let mut first = link("east", "apiVersion: v1\n");
    first.metadata.name = Some("a-second-east-link".into());
    first.metadata.annotations.as_mut().unwrap().insert(
        "multicluster.linkerd.io/trust-domain".into(),
        "other.local".into(),
    );
    watches.apply(Event::Apply(first));
    let relinked = wait_cluster(&store, "east", Some(&east)).await;
    assert_eq!(relinked.trust_domain, "other.local");
    assert_eq!(relinked.secret.name, "a-second-east-link");
    // `cluster-credentials-east` is now the duplicate, counted once.
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="duplicate_cluster"} 2"#,
    )
    .await;

    watches.apply(Event::<Secret>::Delete(ObjectRef {
        namespace: "linkerd".into(),
        name: "a-second-east-link".into(),
    }));
    let after = wait_cluster(&store, "east", Some(&relinked)).await;
    assert_eq!(after.trust_domain, "east.local");
    assert_eq!(after.secret.name, "cluster-credentials-east");
    assert_eq!(metrics.errors("duplicate_cluster"), 2);
}

/// A link Secret whose kubeconfig does not parse is logged and counted once, however often the
/// other links change after (newcomer finding: it was counted again at each change of another
/// link Secret); every reason's series is there at 0 from the start.
#[tokio::test]
async fn a_refused_link_is_counted_once() {
    let west_dir = tempfile::tempdir().unwrap();
    write_state(west_dir.path(), vec![mk_service()]);
    let mut watches = Watches::new(IndexMetrics::default());
    let mut registry = Registry::default();
    let (store, metrics) = store(
        &mut watches,
        &mut registry,
        config(Duration::from_secs(10), &[("west", west_dir.path())]),
    );
    let text = encode(&registry);
    for reason in linkerd_index::multicluster::LINK_ERROR_REASONS {
        let line = format!(r#"multicluster_link_errors_total{{reason="{reason}"}} 0"#);
        assert!(text.contains(&line), "{line} missing:\n{text}");
    }

    watches.apply(Event::Apply(link("east", "not: [a kubeconfig")));
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="malformed_kubeconfig"} 1"#,
    )
    .await;
    // Two more reconciles: west linked, then unlinked.
    watches.apply(Event::Apply(link("west", "apiVersion: v1\n")));
    wait_cluster(&store, "west", None).await;
    watches.apply(Event::<Secret>::Delete(ObjectRef {
        namespace: "linkerd".into(),
        name: "cluster-credentials-west".into(),
    }));
    wait_metric(&registry, "cluster_store_size 0").await;
    assert_eq!(metrics.errors("malformed_kubeconfig"), 1);
    assert!(store.get("east").is_none());
}

/// A second link Secret naming a linked cluster is ignored, logged and counted once
/// (`duplicate_cluster`), however often the links are reconciled after (newcomer finding: it
/// was logged at every change of any link Secret, and never counted).
#[tokio::test]
async fn a_duplicate_link_secret_is_counted_once() {
    let east_dir = tempfile::tempdir().unwrap();
    let west_dir = tempfile::tempdir().unwrap();
    for dir in [&east_dir, &west_dir] {
        write_state(dir.path(), vec![mk_service()]);
    }
    let mut watches = Watches::new(IndexMetrics::default());
    let mut registry = Registry::default();
    let (store, metrics) = store(
        &mut watches,
        &mut registry,
        config(
            Duration::from_secs(10),
            &[("east", east_dir.path()), ("west", west_dir.path())],
        ),
    );
    let mut second = link("east", "apiVersion: v1\n");
    second.metadata.name = Some("cluster-credentials-east-again".into());
    watches.apply(Event::Apply(link("east", "apiVersion: v1\n")));
    watches.apply(Event::Apply(second.clone()));
    let east = wait_cluster(&store, "east", None).await;
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="duplicate_cluster"} 1"#,
    )
    .await;

    // Two more reconciles: a Secret that is not a link, then a new link.
    let mut other = link("west", "apiVersion: v1\n");
    other.metadata.namespace = Some("elsewhere".into());
    watches.apply(Event::Apply(other));
    watches.apply(Event::Apply(link("west", "apiVersion: v1\n")));
    wait_cluster(&store, "west", None).await;
    assert_eq!(metrics.errors("duplicate_cluster"), 1);
    assert!(
        Arc::ptr_eq(&east, &store.get("east").unwrap()),
        "the first Secret's link kept running"
    );
}

/// A link kubeconfig whose user runs a command (`exec`, an `auth-provider`) or whose
/// credentials are files of the destination's own filesystem (`tokenFile`, `client-key`, ...)
/// is refused (`unsafe_kubeconfig`): anyone who could write a Secret in the control-plane
/// namespace could run commands as the destination, or have its ServiceAccount token sent to
/// a server of their choosing (newcomer finding). `linkerd multicluster link` writes the
/// credentials inline; such a kubeconfig is linked.
#[tokio::test]
async fn a_link_kubeconfig_that_runs_commands_or_reads_files_is_refused() {
    let ran = tempfile::tempdir().unwrap();
    let marker = ran.path().join("ran");
    let cluster = "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n";
    let context = "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n";
    let exec = format!(
        "apiVersion: v1\nkind: Config\n{cluster}{context}users: [{{name: u, user: {{exec: {{apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: ['-c', 'touch {}']}}}}}}]\n",
        marker.display()
    );
    let token_file = format!(
        "apiVersion: v1\nkind: Config\n{cluster}{context}users: [{{name: u, user: {{tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}}}]\n"
    );
    let ca_file = format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:9', certificate-authority: /etc/ssl/certs/ca.crt}}}}]\n{context}users: [{{name: u, user: {{token: abc}}}}]\n"
    );
    let (_capture, lines) = capture_thread();
    let mut watches = Watches::new(IndexMetrics::default());
    let mut registry = Registry::default();
    let (store, metrics) = store(
        &mut watches,
        &mut registry,
        config(Duration::from_secs(10), &[]),
    );
    watches.apply(Event::Apply(link("east", &exec)));
    watches.apply(Event::Apply(link("west", &token_file)));
    watches.apply(Event::Apply(link("north", &ca_file)));
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="unsafe_kubeconfig"} 3"#,
    )
    .await;
    let log = lines.text();
    for (cluster, field) in [
        ("east", "runs a command (`exec`)"),
        ("west", "`tokenFile`"),
        ("north", "`certificate-authority`"),
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("cluster-credentials-{cluster}")))
            .unwrap_or_else(|| panic!("nothing logged about {cluster}:\n{log}"));
        assert!(line.contains(field), "{line}");
        assert!(store.get(cluster).is_none());
    }
    // Had the link started, its lists would have run the command by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!marker.exists(), "the kubeconfig's command ran");
    assert_eq!(metrics.errors("malformed_kubeconfig"), 0);

    // Inline credentials are linked.
    let inline = format!(
        "apiVersion: v1\nkind: Config\n{cluster}{context}users: [{{name: u, user: {{token: abc}}}}]\n"
    );
    watches.apply(Event::Apply(link("south", &inline)));
    wait_cluster(&store, "south", None).await;
}

/// An empty `kubeconfig` is missing, not malformed.
#[tokio::test]
async fn an_empty_link_kubeconfig_is_counted_missing() {
    let mut watches = Watches::new(IndexMetrics::default());
    let mut registry = Registry::default();
    let (store, metrics) = store(
        &mut watches,
        &mut registry,
        config(Duration::from_secs(10), &[]),
    );
    watches.apply(Event::Apply(link("east", "")));
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="no_kubeconfig"} 1"#,
    )
    .await;
    assert_eq!(metrics.errors("malformed_kubeconfig"), 0);
    assert!(store.get("east").is_none());
}

/// A `--linked-cluster-state` name that no link Secret names when the Secrets are first
/// listed is warned about (newcomer finding: a typo left the link on its kubeconfig silently).
#[tokio::test]
async fn a_linked_state_dir_no_secret_names_is_warned_about() {
    let (_capture, lines) = capture_thread();
    let east_dir = tempfile::tempdir().unwrap();
    let typo_dir = tempfile::tempdir().unwrap();
    write_state(east_dir.path(), vec![mk_service()]);
    let mut watches = Watches::new(IndexMetrics::default());
    let mut registry = Registry::default();
    let (store, _metrics) = store(
        &mut watches,
        &mut registry,
        config(
            Duration::from_secs(10),
            &[("east", east_dir.path()), ("eats", typo_dir.path())],
        ),
    );
    watches.apply(Event::Reset(vec![link("east", "apiVersion: v1\n")]));
    wait_cluster(&store, "east", None).await;
    let log = lines.text();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("no link Secret names"))
        .collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(warned[0].contains("cluster=eats"), "{}", warned[0]);
}

/// A link Secret that sorts first but cannot be used (an unsafe or malformed kubeconfig, or
/// one no client can be built from) does not take its cluster from a Secret that links it
/// (newcomer finding: the cluster was unlinked, live and on a fresh start); the usable one
/// keeps or takes the cluster, and the refused one is counted once.
#[tokio::test]
async fn a_link_secret_that_cannot_be_used_does_not_displace_one_that_can() {
    let context = "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n";
    let cluster = "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n";
    let safe = format!(
        "apiVersion: v1\nkind: Config\n{cluster}{context}users: [{{name: u, user: {{token: abc}}}}]\n"
    );
    let exec = format!(
        "apiVersion: v1\nkind: Config\n{cluster}{context}users: [{{name: u, user: {{exec: {{apiVersion: client.authentication.k8s.io/v1, command: /bin/true}}}}}}]\n"
    );
    // Parses, but names no context: no client can be built from it.
    let no_context = "apiVersion: v1\nkind: Config\n";
    let named = |name: &str, kubeconfig: &str| {
        let mut secret = link("west", kubeconfig);
        secret.metadata.name = Some(name.into());
        secret
    };
    let (_capture, lines) = capture_thread();
    let mut watches = Watches::new(IndexMetrics::default());
    let mut registry = Registry::default();
    let (live, metrics) = store(
        &mut watches,
        &mut registry,
        config(Duration::from_secs(10), &[]),
    );
    watches.apply(Event::Apply(named("cluster-credentials-west", &safe)));
    let west = wait_cluster(&live, "west", None).await;

    watches.apply(Event::Apply(named("aaa-west", &exec)));
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="unsafe_kubeconfig"} 1"#,
    )
    .await;
    watches.apply(Event::Apply(named("aab-west", "not: [a kubeconfig")));
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="malformed_kubeconfig"} 1"#,
    )
    .await;
    assert!(
        Arc::ptr_eq(&west, &live.get("west").unwrap()),
        "the running link was stopped"
    );

    // One that fails only when its client is built: refused before the Secrets are ranked,
    // so the running link is not restarted.
    watches.apply(Event::Apply(named("aac-west", no_context)));
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="malformed_kubeconfig"} 2"#,
    )
    .await;
    wait_metric(&registry, "cluster_store_size 1").await;
    assert!(
        Arc::ptr_eq(&west, &live.get("west").unwrap()),
        "the running link was restarted"
    );
    assert_eq!(metrics.errors("duplicate_cluster"), 0);
    // Said as what it is, not as a kubeconfig that does not parse.
    let log = lines.text();
    let line = log
        .lines()
        .find(|l| l.contains("aac-west"))
        .unwrap_or_else(|| panic!("nothing logged about aac-west:\n{log}"));
    assert!(
        line.contains("kubeconfig cannot be used to connect: failed to determine current context")
            && !line.contains("UTF-8"),
        "{line}"
    );

    // A fresh start on the same Secrets links the usable one too.
    let mut watches = Watches::new(IndexMetrics::default());
    let mut registry = Registry::default();
    let (fresh, _) = store(
        &mut watches,
        &mut registry,
        config(Duration::from_secs(10), &[]),
    );
    watches.apply(Event::Reset(vec![
        named("aaa-west", &exec),
        named("aab-west", "not: [a kubeconfig"),
        named("aac-west", no_context),
        named("cluster-credentials-west", &safe),
    ]));
    let linked = wait_cluster(&fresh, "west", None).await;
    assert_eq!(linked.secret.name, "cluster-credentials-west");
}

/// The kubeconfig of a cluster served from `--linked-cluster-state` is not used, but it is
/// checked as any other: a Secret whose kubeconfig runs a command, or does not parse, is
/// refused, so that sorting first it does not take the cluster, with its own trust domain,
/// from the Secret in use (newcomer finding). One naming no current context is linked: only
/// connecting needs one.
#[tokio::test]
async fn a_directory_served_link_secret_with_an_unsafe_kubeconfig_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_state(dir.path(), vec![mk_service()]);
    let EastLink {
        watches,
        registry,
        store: live,
        metrics,
    } = link_east_dir(dir.path(), Duration::from_secs(10));
    let east = wait_cluster(&live, "east", None).await;
    let named = |name: &str, kubeconfig: &str| {
        let mut secret = link("east", kubeconfig);
        secret.metadata.name = Some(name.into());
        secret.metadata.annotations.as_mut().unwrap().insert(
            "multicluster.linkerd.io/trust-domain".into(),
            "attacker.local".into(),
        );
        secret
    };
    let exec = "apiVersion: v1\nkind: Config\nusers: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true}}}]\n";
    watches.apply(Event::Apply(named("aaa-east", exec)));
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="unsafe_kubeconfig"} 1"#,
    )
    .await;
    watches.apply(Event::Apply(named("aab-east", "not: [a kubeconfig")));
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="malformed_kubeconfig"} 1"#,
    )
    .await;
    // Nothing kube would read as a kubeconfig of its own: blank, only comments, other keys
    // (newcomer finding: kube reads them as an empty kubeconfig, and they linked the cluster).
    watches.apply(Event::Apply(named("aac-east", "\n  \n")));
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="no_kubeconfig"} 1"#,
    )
    .await;
    watches.apply(Event::Apply(named("aad-east", "# just a comment\n")));
    watches.apply(Event::Apply(named("aae-east", "hello: world\n")));
    wait_metric(
        &registry,
        r#"multicluster_link_errors_total{reason="malformed_kubeconfig"} 3"#,
    )
    .await;
    assert!(
        Arc::ptr_eq(&east, &live.get("east").unwrap()),
        "a refused Secret relinked the cluster"
    );
    assert_eq!(live.get("east").unwrap().trust_domain, "east.local");
    assert_eq!(metrics.errors("duplicate_cluster"), 0);

    // A fresh start on the same Secrets links the safe one.
    let mut watches = Watches::new(IndexMetrics::default());
    let mut registry = Registry::default();
    let (fresh, _) = store(
        &mut watches,
        &mut registry,
        config(Duration::from_secs(10), &[("east", dir.path())]),
    );
    watches.apply(Event::Reset(vec![
        named("aaa-east", exec),
        named("aab-east", "not: [a kubeconfig"),
        named("aac-east", "\n  \n"),
        named("aad-east", "# just a comment\n"),
        named("aae-east", "hello: world\n"),
        link("east", "apiVersion: v1\n"),
    ]));
    let linked = wait_cluster(&fresh, "east", None).await;
    assert_eq!(linked.secret.name, "cluster-credentials-east");
    assert_eq!(linked.trust_domain, "east.local");
}
