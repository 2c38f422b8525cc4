//! `dst-diag proxy-status` and `dst-diag streams --behind` as processes, over a federated `Get`
//! stream whose client stops reading: a destination server over a local state directory that
//! links cluster `east` (a state directory too), with its introspection API on `127.0.0.1:0`.

mod support;

use destination::{DestinationMetrics, DestinationService, EndpointTranslator};
use linkerd_index::{
    ClusterSource, ClusterStore, ClusterStoreConfig, DiscoveryIndex, EndpointsKey, IndexMetrics,
    LinkMetrics, ObjectRef, Watches, source::offline::OfflineSource, watches::Started,
};
use linkerd_introspection_api::{ListStreamsRequest, introspection_client::IntrospectionClient};
use linkerd_runtime::{introspect::StreamRegistry, shutdown};
use linkerd2_proxy_api::destination::{
    GetDestination, Update, destination_client::DestinationClient, update,
};
use serde_json::{Value, json};
use std::{collections::BTreeSet, net::SocketAddr, path::Path, time::Duration};
use support::*;
use tonic::transport::{Channel, Endpoint};

const FEDERATED: &str = "web-federated.shop.svc.cluster.local:80";
const LOCAL: &str = "10.1.0.1:8080";
const EAST: &str = "10.2.0.1:8080";

fn service(name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "shop", "annotations": annotations},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    })
}

fn pod(ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "shop"},
        "spec": {"serviceAccountName": "web", "nodeName": "node-a", "containers": [{"name": "web"}]},
        "status": {"phase": "Running", "podIPs": [{"ip": ip}]},
    })
}

/// `web`'s slice: pod `web-0` at `ip`, ready or not.
fn slice(ip: &str, ready: bool) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-1", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": [{
            "addresses": [ip],
            "conditions": {"ready": ready},
            "targetRef": {"kind": "Pod", "name": "web-0", "namespace": "shop"},
        }],
    })
}

/// Writes `docs` as the directory's one List, atomically.
fn write_state(dir: &Path, docs: Vec<Value>) {
    let text =
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": docs})).unwrap();
    std::fs::write(dir.join(".state.json.tmp"), text).unwrap();
    std::fs::rename(dir.join(".state.json.tmp"), dir.join("state.json")).unwrap();
}

/// Local: `web` on pod `web-0` (ready or not), `web-federated` (local `web` and `web@east`),
/// and the link Secret of east.
fn write_local(dir: &Path, ready: bool) {
    let link = json!({
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
    });
    let federated = service(
        "web-federated",
        json!({
            "multicluster.linkerd.io/local-discovery": "web",
            "multicluster.linkerd.io/remote-discovery": "web@east",
        }),
    );
    write_state(
        dir,
        vec![
            service("web", json!({})),
            pod("10.1.0.1"),
            slice("10.1.0.1", ready),
            federated,
            link,
        ],
    );
}

struct Served {
    local: tempfile::TempDir,
    addr: SocketAddr,
    destination_introspection: String,
    /// An introspection API with no streams, standing for policy-controller's.
    policy_introspection: String,
    introspection: IntrospectionClient<Channel>,
    _east: tempfile::TempDir,
    _started: Started,
    _trigger: shutdown::Trigger,
}

async fn start() -> Served {
    let (local, east) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_local(local.path(), true);
    write_state(
        east.path(),
        vec![
            service("web", json!({})),
            pod("10.2.0.1"),
            slice("10.2.0.1", true),
        ],
    );
    let metrics = IndexMetrics::default();
    let index = DiscoveryIndex::new();
    let mut watches = Watches::new(metrics.clone());
    index.watch(&mut watches);
    let store = ClusterStore::watch(
        &mut watches,
        ClusterStoreConfig {
            namespace: "linkerd".into(),
            offline: [("east".to_string(), east.path().to_path_buf())].into(),
            ..ClusterStoreConfig::default()
        },
        IndexMetrics::default(),
        LinkMetrics::default(),
    );
    let source = OfflineSource::new(local.path(), metrics).expect("state dir");
    let started = watches.start(&ClusterSource::Offline(source)).await;
    let mut clusters = store.clusters();
    tokio::time::timeout(TIMEOUT, clusters.wait_for(|c| c.contains_key("east")))
        .await
        .expect("east linked in time")
        .unwrap();
    // East's endpoint is in: the streams' first messages hold it.
    let east_web = store.get("east").unwrap().index.endpoints(EndpointsKey {
        service: ObjectRef {
            namespace: "shop".into(),
            name: "web".into(),
        },
        port: 80,
        hostname: None,
    });
    for _ in 0..1000 {
        if !east_web.borrow().endpoints.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(east_web.borrow().endpoints.len(), 1, "east synced in time");

    let (trigger, shutdown) = shutdown::channel();
    let streams = StreamRegistry::new();
    let service = DestinationService::new(
        index,
        EndpointTranslator::new(chart_config()),
        "cluster.local".into(),
        false,
        DestinationMetrics::default(),
        shutdown.clone(),
    )
    .with_clusters(store)
    .with_streams(streams.clone());
    let (listener, addr) = destination::server::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    tokio::spawn(destination::serve(listener, service, shutdown.clone()));
    let spawn = |streams| {
        linkerd_runtime::introspect::spawn(
            "127.0.0.1:0".parse().unwrap(),
            streams,
            shutdown.clone(),
        )
    };
    let destination_introspection = spawn(streams).await.unwrap();
    let policy_introspection = spawn(StreamRegistry::new()).await.unwrap();
    let introspection = IntrospectionClient::connect(format!("http://{destination_introspection}"))
        .await
        .unwrap();
    Served {
        local,
        addr,
        destination_introspection: destination_introspection.to_string(),
        policy_introspection: policy_introspection.to_string(),
        introspection,
        _east: east,
        _started: started,
        _trigger: trigger,
    }
}

/// A `Get` of the federated Service for pod `shop/<pod>`, over a connection with a small
/// stream window (a large connection one), so that a client that stops reading soon stops the
/// server writing to its stream.
async fn get(addr: SocketAddr, pod: &str) -> tonic::Streaming<Update> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .initial_connection_window_size(64 << 20)
        .initial_stream_window_size(1 << 10)
        .connect()
        .await
        .unwrap();
    DestinationClient::new(channel)
        .get(GetDestination {
            scheme: "k8s".into(),
            path: FEDERATED.into(),
            context_token: format!(r#"{{"ns":"shop","nodeName":"node-a","pod":"{pod}"}}"#),
        })
        .await
        .unwrap()
        .into_inner()
}

fn apply(held: &mut BTreeSet<SocketAddr>, update: update::Update) {
    match update {
        update::Update::Add(set) => {
            held.extend(
                set.addrs
                    .iter()
                    .map(|a| SocketAddr::try_from(a.addr.unwrap()).unwrap()),
            );
        }
        update::Update::Remove(set) => {
            for a in set.addrs {
                held.remove(&a.try_into().unwrap());
            }
        }
        update::Update::NoEndpoints(_) => held.clear(),
    }
}

async fn next(stream: &mut tonic::Streaming<Update>) -> update::Update {
    tokio::time::timeout(TIMEOUT, stream.message())
        .await
        .expect("an update in time")
        .expect("stream ok")
        .expect("stream open")
        .update
        .unwrap()
}

/// Reads `stream` into `held` until it holds `want`.
async fn read_until(
    stream: &mut tonic::Streaming<Update>,
    held: &mut BTreeSet<SocketAddr>,
    want: &BTreeSet<SocketAddr>,
) {
    while held != want {
        apply(held, next(stream).await);
    }
}

fn addrs(want: &[&str]) -> BTreeSet<SocketAddr> {
    want.iter().map(|a| a.parse().unwrap()).collect()
}

impl Served {
    /// Whether each open stream is behind, oldest first.
    async fn behind(&mut self) -> Vec<bool> {
        let listed = self
            .introspection
            .list_streams(ListStreamsRequest::default())
            .await
            .unwrap()
            .into_inner()
            .streams;
        listed.iter().map(|i| i.behind).collect()
    }

    /// `dst-diag proxy-status shop/<pod>`: its exit code and stdout.
    async fn proxy_status(&self, pod: &str, more: &[&str]) -> (Option<i32>, String) {
        let pod = format!("shop/{pod}");
        let mut args = vec![
            "proxy-status",
            &pod,
            "--destination-introspection",
            &self.destination_introspection,
            "--policy-introspection",
            &self.policy_introspection,
        ];
        args.extend(more);
        let (code, stdout, stderr) = wait_output(dst_diag(&args)).await;
        assert!(stderr.is_empty(), "{stderr}");
        (code, stdout)
    }
}

/// Tester finding: `dst-diag proxy-status` showed a federated stream SYNCED, and `dst-diag
/// streams --behind` left it out, while its client had stopped reading and its members kept
/// changing. It is BEHIND until its client reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_status_shows_a_federated_stream_whose_client_stops_reading_behind() {
    let mut s = start().await;
    let all = addrs(&[LOCAL, EAST]);
    let east = addrs(&[EAST]);
    let mut stalled = get(s.addr, "stalled").await;
    let mut stalled_held = BTreeSet::new();
    read_until(&mut stalled, &mut stalled_held, &all).await;
    let mut reading = get(s.addr, "reading").await;
    let mut reading_held = BTreeSet::new();
    read_until(&mut reading, &mut reading_held, &all).await;

    // The local member's pod goes and comes back until the stalled stream is behind for good
    // (its windows full); the reading one keeps up.
    let mut ready = true;
    let mut changes = 0;
    loop {
        ready = !ready;
        write_local(s.local.path(), ready);
        changes += 1;
        let want = if ready { &all } else { &east };
        read_until(&mut reading, &mut reading_held, want).await;
        // Behind only counts once it lasts: until its windows fill, the stalled stream may
        // still catch up.
        if s.behind().await == [true, false] {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if s.behind().await == [true, false] {
                break;
            }
        }
        assert!(changes < 2_000, "the stalled stream never fell behind");
    }

    let (code, stdout) = s.proxy_status("stalled", &["-o", "json"]).await;
    assert_eq!(code, Some(0));
    let rows: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{stdout}");
    assert_eq!(rows[0]["server"], "destination");
    assert_eq!(rows[0]["api"], "Get");
    assert_eq!(rows[0]["target"], FEDERATED);
    assert_eq!(rows[0]["status"], "BEHIND");
    let (code, stdout) = s.proxy_status("stalled", &[]).await;
    assert_eq!(code, Some(0));
    assert!(
        stdout.starts_with("shop/stalled: 1 stream, 0 in sync, 1 behind\nSERVER"),
        "{stdout}"
    );
    let (code, stdout) = s.proxy_status("reading", &[]).await;
    assert_eq!(code, Some(0));
    assert!(
        stdout.starts_with("shop/reading: 1 stream, 1 in sync, 0 behind\nSERVER"),
        "{stdout}"
    );
    let (code, stdout, _) = wait_output(dst_diag(&[
        "streams",
        "--introspection",
        &s.destination_introspection,
        "--behind",
        "-o",
        "json",
    ]))
    .await;
    assert_eq!(code, Some(0));
    let rows: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{stdout}");
    assert_eq!(rows[0]["pod"], "shop/stalled");
    assert_eq!(rows[0]["behind"], true);

    // It reads again: once it holds the newest set and the server has handed it everything,
    // it is SYNCED.
    let want = if ready { &all } else { &east };
    loop {
        if stalled_held == *want && s.behind().await == [false, false] {
            break;
        }
        if let Ok(message) =
            tokio::time::timeout(Duration::from_millis(50), stalled.message()).await
        {
            let update = message.expect("never reset").expect("stream open");
            apply(&mut stalled_held, update.update.unwrap());
        }
    }
    let (code, stdout) = s.proxy_status("stalled", &[]).await;
    assert_eq!(code, Some(0));
    assert!(
        stdout.starts_with("shop/stalled: 1 stream, 1 in sync, 0 behind\nSERVER"),
        "{stdout}"
    );
}
