//! The introspection API and the stream metrics over real remote-discovery and federated `Get`
//! streams ([`destination::multicluster`]): what it says such a stream's client holds, and the
//! convergence histogram, as for local streams (`introspection.rs`).

mod support;

use destination::{
    DestinationMetrics, DestinationService, EndpointTranslator, serve, server::bind,
};
use k8s_openapi::api::{
    core::v1::{Pod, Service},
    discovery::v1::EndpointSlice,
};
use linkerd_index::{EndpointsKey, Event, ObjectRef, Watches};
use linkerd_introspection_api::{
    GetStreamRequest, ListStreamsRequest, StreamInfo, introspection_client::IntrospectionClient,
};
use linkerd_runtime::{introspect::StreamRegistry, shutdown};
use linkerd2_proxy_api::destination::{
    GetDestination, Update, destination_client::DestinationClient, update,
};
use prometheus_client::registry::Registry;
use prost::Message;
use serde_json::{Value, json};
use std::{collections::BTreeMap, net::SocketAddr, time::Duration};
use support::*;
use tonic::transport::{Channel, Endpoint};

const NS: &str = "shop";
/// The mirror Service of east's `web` (remote discovery).
const REMOTE: &str = "web-east.shop.svc.cluster.local:80";
/// Local `web` and east's `web` (federated).
const FEDERATED: &str = "web-federated.shop.svc.cluster.local:80";

/// The address of east's pod `web-{p}`.
fn east_ip(p: usize) -> String {
    format!("10.2.0.{}", p + 1)
}

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// What a client holds: each address and its labels (its set's and its own, its own winning,
/// as a proxy combines them).
type Held = BTreeMap<SocketAddr, BTreeMap<String, String>>;

fn apply(held: &mut Held, update: update::Update) {
    match update {
        update::Update::Add(set) => {
            for addr in &set.addrs {
                let mut labels = sorted(&set.metric_labels);
                labels.extend(sorted(&addr.metric_labels));
                held.insert(addr_of(addr), labels);
            }
        }
        update::Update::Remove(set) => {
            for a in set.addrs {
                held.remove(&a.try_into().unwrap());
            }
        }
        update::Update::NoEndpoints(_) => held.clear(),
    }
}

struct Served {
    addr: SocketAddr,
    introspection: IntrospectionClient<Channel>,
    index: linkerd_index::Fed<linkerd_index::DiscoveryIndex>,
    east: StateDir,
    metrics: Registry,
    _watches: Watches,
    _trigger: shutdown::Trigger,
}

/// East (linked from a state directory) with `web` on pods `web-0..3`, two of them in its
/// slice; locally `web` on pod `web-0`, its mirror `web-east` and `web-federated` (local `web`
/// and `web@east`); a destination server with an introspection server.
async fn start() -> Served {
    let east = StateDir::new();
    east.write("service.yaml", &[mk_service(NS, "web", &[("http", 80)])]);
    let pods: Vec<Value> = (0..3)
        .map(|p| mk_pod(NS, &format!("web-{p}"), &format!("10.2.0.{}", p + 1), "web"))
        .collect();
    east.write("pods.yaml", &pods);
    write_web_slice(&east, NS, 2, east_ip);
    let (watches, store) = link_east(east.path()).await;
    // East's endpoints are in: the streams' first messages hold them.
    let east_web = store.get("east").unwrap().index.endpoints(EndpointsKey {
        service: ObjectRef {
            namespace: NS.into(),
            name: "web".into(),
        },
        port: 80,
        hostname: None,
    });
    for _ in 0..1000 {
        if east_web.borrow().endpoints.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(east_web.borrow().endpoints.len(), 2, "east synced in time");

    let index = fed_index();
    index.apply(Event::Apply(typed::<Service>(mk_service(
        NS,
        "web",
        &[("http", 80)],
    ))));
    index.apply(Event::Apply(typed::<Pod>(mk_pod(
        NS, "web-0", "10.1.0.1", "web",
    ))));
    index.apply(Event::Apply(typed::<EndpointSlice>(mk_slice(
        NS,
        "web-1",
        "web",
        ("http", 8080),
        &[("web-0", "10.1.0.1", true)],
    ))));
    let mut mirror = mk_service(NS, "web-east", &[("http", 80)]);
    mirror["metadata"]["labels"] = json!({
        "multicluster.linkerd.io/remote-discovery": "east",
        "multicluster.linkerd.io/remote-service": "web",
    });
    index.apply(Event::Apply(typed::<Service>(mirror)));
    let mut federated = mk_service(NS, "web-federated", &[("http", 80)]);
    federated["metadata"]["annotations"] = json!({
        "multicluster.linkerd.io/local-discovery": "web",
        "multicluster.linkerd.io/remote-discovery": "web@east",
    });
    index.apply(Event::Apply(typed::<Service>(federated)));

    let mut metrics = Registry::default();
    let streams = StreamRegistry::register(&mut metrics, &["Get", "GetProfile"]);
    let (trigger, shutdown) = shutdown::channel();
    let service = DestinationService::new(
        index.index().clone(),
        EndpointTranslator::new(chart_config()),
        "cluster.local".into(),
        false,
        DestinationMetrics::default(),
        shutdown.clone(),
    )
    .with_clusters(store)
    .with_streams(streams.clone());
    let (listener, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    tokio::spawn(serve(listener, service, shutdown.clone()));
    let introspection_addr =
        linkerd_runtime::introspect::spawn("127.0.0.1:0".parse().unwrap(), streams, shutdown)
            .await
            .expect("introspection bound");
    let introspection = IntrospectionClient::connect(format!("http://{introspection_addr}"))
        .await
        .unwrap();
    Served {
        addr,
        introspection,
        index,
        east,
        metrics,
        _watches: watches,
        _trigger: trigger,
    }
}

async fn get(addr: SocketAddr, path: &str) -> tonic::Streaming<Update> {
    DestinationClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
        .get(GetDestination {
            scheme: "k8s".into(),
            path: path.into(),
            context_token: r#"{"ns":"shop","nodeName":"node-a","pod":"client"}"#.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// A `Get` of `path` for client pod `shop/<pod>`, over a connection with a large connection
/// window and a small stream window, as `introspection.rs`'s: a stream its client stops
/// reading soon stops the server writing to it, and the connection stays up.
async fn get_as(addr: SocketAddr, path: &str, pod: &str) -> tonic::Streaming<Update> {
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
            path: path.into(),
            context_token: format!(r#"{{"ns":"shop","nodeName":"node-a","pod":"{pod}"}}"#),
        })
        .await
        .unwrap()
        .into_inner()
}

/// Local `web`'s slice: pod `web-0` (10.1.0.1), ready or not.
fn local_slice(index: &linkerd_index::Fed<linkerd_index::DiscoveryIndex>, ready: bool) {
    index.apply(Event::Apply(typed::<EndpointSlice>(mk_slice(
        NS,
        "web-1",
        "web",
        ("http", 8080),
        &[("web-0", "10.1.0.1", ready)],
    ))));
}

/// Reads `stream` into `held` until it holds exactly `want`'s addresses.
async fn read_until(stream: &mut tonic::Streaming<Update>, held: &mut Held, want: &[&str]) {
    let want: Vec<SocketAddr> = want.iter().map(|a| a.parse().unwrap()).collect();
    while held.keys().copied().collect::<Vec<_>>() != want {
        apply(held, next(stream).await);
    }
}

impl Served {
    /// The one open stream whose target is `path`.
    async fn stream(&mut self, path: &str) -> StreamInfo {
        let mut listed = self
            .introspection
            .list_streams(ListStreamsRequest {
                target_contains: path.into(),
                ..ListStreamsRequest::default()
            })
            .await
            .unwrap()
            .into_inner()
            .streams;
        assert_eq!(listed.len(), 1, "{listed:?}");
        listed.remove(0)
    }

    /// What stream `path` last sent, as the one `Update` the introspection API makes of it.
    async fn holding(&mut self, path: &str) -> update::Update {
        let id = self.stream(path).await.id;
        let response = self
            .introspection
            .get_stream(GetStreamRequest { id })
            .await
            .unwrap()
            .into_inner();
        let sent = response.last_sent.expect("something sent");
        assert_eq!(sent.type_name, "io.linkerd.proxy.destination.Update");
        Update::decode(&sent.value[..]).unwrap().update.unwrap()
    }

    /// The count of `stream_convergence_seconds{api="Get"}`, checking that its observations
    /// are times a change can take here (more than nothing, less than 10 s each).
    fn convergence_count(&self) -> u64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.metrics).unwrap();
        let value = |series: &str| -> f64 {
            let prefix = format!("stream_convergence_seconds_{series}{{api=\"Get\"}} ");
            let line = text.lines().find_map(|l| l.strip_prefix(prefix.as_str()));
            line.unwrap_or_else(|| panic!("no {prefix}: {text}"))
                .parse()
                .unwrap()
        };
        let (count, sum) = (value("count"), value("sum"));
        assert!(
            (count == 0.0 && sum == 0.0) || (sum > 0.0 && sum < 10.0 * count),
            "{text}"
        );
        count as u64
    }

    /// The open streams, oldest first; with `behind_only`, only those shown behind.
    async fn list(&mut self, behind_only: bool) -> Vec<StreamInfo> {
        self.introspection
            .list_streams(ListStreamsRequest {
                behind_only,
                ..ListStreamsRequest::default()
            })
            .await
            .unwrap()
            .into_inner()
            .streams
    }

    /// The `streams_behind{api="Get"}` gauge.
    fn streams_behind(&self) -> i64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.metrics).unwrap();
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("streams_behind{api=\"Get\"} "));
        line.unwrap_or_else(|| panic!("no streams_behind: {text}"))
            .parse()
            .unwrap()
    }

    /// [`Self::holding`] applied to an empty set.
    async fn held(&mut self, path: &str) -> Held {
        let mut held = Held::new();
        apply(&mut held, self.holding(path).await);
        held
    }
}

/// Tester finding: `dst-diag stream ID` said "(nothing sent yet)" for remote-discovery and
/// federated streams that had sent several messages. They show the whole set their client
/// holds, as local streams do: one `Add`, each address with its cluster's `target_cluster` as
/// it was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multicluster_streams_show_the_set_their_client_holds() {
    let mut s = start().await;
    let mut remote = get(s.addr, REMOTE).await;
    let mut federated = get(s.addr, FEDERATED).await;
    let (mut remote_held, mut federated_held) = (Held::new(), Held::new());
    read_until(
        &mut remote,
        &mut remote_held,
        &["10.2.0.1:8080", "10.2.0.2:8080"],
    )
    .await;
    read_until(
        &mut federated,
        &mut federated_held,
        &["10.1.0.1:8080", "10.2.0.1:8080", "10.2.0.2:8080"],
    )
    .await;

    // The remote stream's one Add carries its set labels as sent.
    let update::Update::Add(add) = s.holding(REMOTE).await else {
        panic!("an Add");
    };
    assert_eq!(
        sorted(&add.metric_labels),
        labels(&[
            ("namespace", NS),
            ("service", "web"),
            ("target_cluster", "east")
        ])
    );
    assert_eq!(
        add.addrs.iter().map(addr_of).collect::<Vec<_>>(),
        [sa("10.2.0.1:8080"), sa("10.2.0.2:8080")]
    );
    // The federated stream's members' sets differ in `target_cluster`: it is each address's.
    let update::Update::Add(add) = s.holding(FEDERATED).await else {
        panic!("an Add");
    };
    assert_eq!(
        sorted(&add.metric_labels),
        labels(&[("namespace", NS), ("service", "web")])
    );
    let clusters: Vec<(SocketAddr, Option<&str>)> = add
        .addrs
        .iter()
        .map(|a| {
            let cluster = a.metric_labels.get("target_cluster").map(String::as_str);
            (addr_of(a), cluster)
        })
        .collect();
    assert_eq!(
        clusters,
        [
            (sa("10.1.0.1:8080"), None),
            (sa("10.2.0.1:8080"), Some("east")),
            (sa("10.2.0.2:8080"), Some("east")),
        ]
    );
    assert_eq!(s.held(REMOTE).await, remote_held);
    assert_eq!(s.held(FEDERATED).await, federated_held);

    // East adds a pod, the local member loses its own: each shows what its client now holds.
    write_web_slice(&s.east, NS, 3, east_ip);
    let east = ["10.2.0.1:8080", "10.2.0.2:8080", "10.2.0.3:8080"];
    read_until(&mut remote, &mut remote_held, &east).await;
    s.index.apply(Event::Apply(typed::<EndpointSlice>(mk_slice(
        NS,
        "web-1",
        "web",
        ("http", 8080),
        &[("web-0", "10.1.0.1", false)],
    ))));
    read_until(&mut federated, &mut federated_held, &east).await;
    assert_eq!(s.held(REMOTE).await, remote_held);
    assert_eq!(s.held(FEDERATED).await, federated_held);
    assert!(
        federated_held
            .values()
            .all(|labels| labels.get("target_cluster").map(String::as_str) == Some("east")),
        "{federated_held:?}"
    );
    let (remote_info, federated_info) = (s.stream(REMOTE).await, s.stream(FEDERATED).await);
    assert_eq!(remote_info.messages_sent, 2, "{remote_info:?}");
    assert!(federated_info.messages_sent >= 4, "{federated_info:?}");
    for info in [&remote_info, &federated_info] {
        assert!(
            info.last_sent_at_unix_ms >= info.opened_at_unix_ms,
            "{info:?}"
        );
        assert!(!info.behind, "{info:?}");
    }

    // None left: `NoEndpoints`, as told.
    write_web_slice(&s.east, NS, 0, east_ip);
    read_until(&mut remote, &mut remote_held, &[]).await;
    assert_eq!(
        s.holding(REMOTE).await,
        update::Update::NoEndpoints(linkerd2_proxy_api::destination::NoEndpoints { exists: true })
    );
}

/// Tester finding: `stream_convergence_seconds{api="Get"}` stayed at 0 after remote and
/// federated updates. A multicluster stream observes it once per change it sends, as a local
/// stream does, from when the index of the member's cluster (or the local one) saw the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multicluster_streams_observe_the_convergence_of_each_change_they_send() {
    let s = start().await;
    let mut remote = get(s.addr, REMOTE).await;
    let mut federated = get(s.addr, FEDERATED).await;
    let (mut remote_held, mut federated_held) = (Held::new(), Held::new());
    read_until(
        &mut remote,
        &mut remote_held,
        &["10.2.0.1:8080", "10.2.0.2:8080"],
    )
    .await;
    read_until(
        &mut federated,
        &mut federated_held,
        &["10.1.0.1:8080", "10.2.0.1:8080", "10.2.0.2:8080"],
    )
    .await;
    assert_eq!(s.convergence_count(), 0, "first messages answer requests");

    // A change of east's index: both streams send it.
    write_web_slice(&s.east, NS, 3, east_ip);
    read_until(
        &mut remote,
        &mut remote_held,
        &["10.2.0.1:8080", "10.2.0.2:8080", "10.2.0.3:8080"],
    )
    .await;
    read_until(
        &mut federated,
        &mut federated_held,
        &[
            "10.1.0.1:8080",
            "10.2.0.1:8080",
            "10.2.0.2:8080",
            "10.2.0.3:8080",
        ],
    )
    .await;
    assert_eq!(s.convergence_count(), 2);

    // A change of the local index: the federated stream sends it, the remote one has none.
    s.index.apply(Event::Apply(typed::<EndpointSlice>(mk_slice(
        NS,
        "web-1",
        "web",
        ("http", 8080),
        &[("web-0", "10.1.0.1", false)],
    ))));
    read_until(
        &mut federated,
        &mut federated_held,
        &["10.2.0.1:8080", "10.2.0.2:8080", "10.2.0.3:8080"],
    )
    .await;
    assert_eq!(s.convergence_count(), 3);
    assert_quiet(&mut remote).await;
    assert_eq!(s.convergence_count(), 3);
}

/// Tester finding: `dst-diag streams --behind`, `streams_behind` and `dst-diag proxy-status`
/// never showed a remote-discovery or federated stream behind, even one whose client had
/// stopped reading while its members changed. As `introspection.rs`'s stalled local stream: a
/// federated stream whose client stops reading while its local member changes is shown behind
/// until it reads again; a change that sends its client nothing leaves it in sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_federated_stream_that_stops_reading_shows_as_behind_until_it_reads_again() {
    let mut s = start().await;
    let east = ["10.2.0.1:8080", "10.2.0.2:8080"];
    let all = ["10.1.0.1:8080", "10.2.0.1:8080", "10.2.0.2:8080"];
    let mut stalled = get_as(s.addr, FEDERATED, "stalled").await;
    let mut stalled_held = Held::new();
    read_until(&mut stalled, &mut stalled_held, &all).await;
    let mut reading = get_as(s.addr, FEDERATED, "reading").await;
    let mut reading_held = Held::new();
    read_until(&mut reading, &mut reading_held, &all).await;
    let ids: Vec<u64> = s.list(false).await.iter().map(|i| i.id).collect();
    assert_eq!(ids.len(), 2);

    // The local member's pod goes and comes back until the stalled stream's unread messages
    // fill its windows and buffers and the server stops writing to it; the reading one keeps
    // up with every change.
    let mut ready = true;
    let mut changes = 0;
    loop {
        ready = !ready;
        local_slice(&s.index, ready);
        changes += 1;
        let want: &[&str] = if ready { &all } else { &east };
        read_until(&mut reading, &mut reading_held, want).await;
        let listed = s.list(false).await;
        assert!(
            !listed[1].behind,
            "the reading stream is up to date: {listed:?}"
        );
        // Behind only counts once it lasts: until the windows fill, the stalled stream may
        // still catch up between two looks.
        if listed[0].behind {
            let behind = s.list(true).await;
            if behind.iter().map(|i| i.id).collect::<Vec<_>>() == [ids[0]]
                && s.streams_behind() == 1
            {
                assert_eq!(behind[0].pod, "shop/stalled");
                break;
            }
        }
        assert!(changes < 20_000, "the stalled stream never fell behind");
    }

    // It reads again: it catches up, and is shown so once it has the newest set. (The set may
    // pass through the final one while older messages drain.)
    let want: &[&str] = if ready { &all } else { &east };
    let want: Vec<SocketAddr> = want.iter().map(|a| sa(a)).collect();
    loop {
        let listed = s.list(false).await;
        if stalled_held.keys().copied().collect::<Vec<_>>() == want && !listed[0].behind {
            break;
        }
        if let Ok(message) =
            tokio::time::timeout(Duration::from_millis(50), stalled.message()).await
        {
            let update = message.expect("never reset").expect("stream open");
            apply(&mut stalled_held, update.update.unwrap());
        }
    }
    let listed = s.list(false).await;
    assert!(listed.iter().all(|i| !i.behind), "{listed:?}");
    assert_eq!(s.streams_behind(), 0);
    // What HTTP/2 took before still reaches the client; it ends at the same set.
    while let Ok(message) =
        tokio::time::timeout(Duration::from_millis(300), stalled.message()).await
    {
        let update = message.expect("never reset").expect("stream open");
        apply(&mut stalled_held, update.update.unwrap());
    }
    assert_eq!(stalled_held.keys().copied().collect::<Vec<_>>(), want);

    // A change of the Service's own labels changes its topic's view and sends nothing: the
    // streams take it without a message and are not left behind.
    let mut federated = mk_service(NS, "web-federated", &[("http", 80)]);
    federated["metadata"]["labels"] = json!({"team": "shop"});
    federated["metadata"]["annotations"] = json!({
        "multicluster.linkerd.io/local-discovery": "web",
        "multicluster.linkerd.io/remote-discovery": "web@east",
    });
    s.index.apply(Event::Apply(typed::<Service>(federated)));
    let own = s.index.endpoints(EndpointsKey {
        service: ObjectRef {
            namespace: NS.into(),
            name: "web-federated".into(),
        },
        port: 80,
        hostname: None,
    });
    let own_labels = own.borrow().service.as_ref().unwrap().labels.clone();
    assert_eq!(own_labels.get("team").map(String::as_str), Some("shop"));
    assert_quiet(&mut stalled).await;
    assert_quiet(&mut reading).await;
    let listed = s.list(false).await;
    assert!(listed.iter().all(|i| !i.behind), "{listed:?}");
    assert_eq!(s.streams_behind(), 0);
}

/// The next message of `stream` within 5 s: `None` when the server ended it with status OK.
async fn next_or_end(stream: &mut tonic::Streaming<Update>) -> Option<update::Update> {
    tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("a message or the end within 5s")
        .expect("stream ok")
        .map(|u| u.update.expect("update set"))
}

/// A stream opened before its Service exists is served as a local Service's. When the Service
/// appears as a mirror (remote discovery) or federated, or a local Service is annotated as
/// federated, the local stream ends, and the client's next `Get` is served from the linked
/// cluster (tester finding: such a stream stayed on `NoEndpoints{exists: true}` for good,
/// while a fresh stream held east's addresses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_stream_ends_when_its_service_turns_out_to_be_multicluster() {
    let s = start().await;
    let east = ["10.2.0.1:8080", "10.2.0.2:8080"];
    const LATE: &str = "web-late.shop.svc.cluster.local:80";

    let mut early = get(s.addr, LATE).await;
    assert!(
        matches!(next(&mut early).await, update::Update::NoEndpoints(n) if !n.exists),
        "an unknown Service"
    );
    let mut mirror = mk_service(NS, "web-late", &[("http", 80)]);
    mirror["metadata"]["labels"] = json!({
        "multicluster.linkerd.io/remote-discovery": "east",
        "multicluster.linkerd.io/remote-service": "web",
    });
    s.index.apply(Event::Apply(typed::<Service>(mirror)));
    assert_eq!(
        next_or_end(&mut early).await,
        None,
        "the local stream ended"
    );
    let mut again = get(s.addr, LATE).await;
    let mut held = Held::new();
    read_until(&mut again, &mut held, &east).await;
    assert_eq!(held[&east[0].parse().unwrap()]["target_cluster"], "east");

    // A local Service, with its own endpoint, that is then made federated.
    let mut local = get(s.addr, "web.shop.svc.cluster.local:80").await;
    let mut held = Held::new();
    read_until(&mut local, &mut held, &["10.1.0.1:8080"]).await;
    let mut federated = mk_service(NS, "web", &[("http", 80)]);
    federated["metadata"]["annotations"] = json!({
        "multicluster.linkerd.io/remote-discovery": "web-late@east",
    });
    s.index.apply(Event::Apply(typed::<Service>(federated)));
    assert_eq!(
        next_or_end(&mut local).await,
        None,
        "the local stream ended"
    );

    // A change that leaves a Service local keeps its stream.
    let mut other = get(s.addr, "other.shop.svc.cluster.local:80").await;
    next(&mut other).await;
    s.index.apply(Event::Apply(typed::<Service>(mk_service(
        NS,
        "other",
        &[("http", 80)],
    ))));
    assert!(
        matches!(next(&mut other).await, update::Update::NoEndpoints(n) if n.exists),
        "the stream goes on"
    );
}
