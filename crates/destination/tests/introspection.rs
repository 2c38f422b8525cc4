//! The introspection API over real `Get` and `GetProfile` streams: what it lists, what it says a
//! stream last sent, which streams are behind, and the convergence histogram.

mod support;

use destination::{
    DestinationMetrics, DestinationService, EndpointTranslator, serve, server::bind,
};
use k8s_openapi::api::{core::v1::Pod, core::v1::Service, discovery::v1::EndpointSlice};
use linkerd_index::Event;
use linkerd_introspection_api::{
    GetStreamRequest, ListStreamsRequest, StreamInfo, introspection_client::IntrospectionClient,
};
use linkerd_runtime::{introspect::StreamRegistry, shutdown};
use linkerd2_proxy_api::destination::{
    DestinationProfile, GetDestination, Update, destination_client::DestinationClient, update,
};
use prometheus_client::registry::Registry;
use prost::Message;
use std::{collections::BTreeSet, net::SocketAddr, sync::Arc, time::Duration};
use support::*;
use tonic::transport::{Channel, Endpoint};

const NS: &str = "shop";
const PATH: &str = "web.shop.svc.cluster.local:80";
const PODS: usize = 20;

fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn token(pod: &str) -> String {
    format!(r#"{{"ns":"{NS}","nodeName":"node-a","pod":"{pod}"}}"#)
}

/// The slice of `web` with the pods of `ready` (index → ready).
fn slice(ready: &[bool]) -> EndpointSlice {
    let names: Vec<String> = (0..ready.len()).map(|p| format!("web-{p}")).collect();
    let ips: Vec<String> = (0..ready.len())
        .map(|p| format!("10.1.0.{}", p + 1))
        .collect();
    let eps: Vec<(&str, &str, bool)> = (0..ready.len())
        .map(|p| (names[p].as_str(), ips[p].as_str(), ready[p]))
        .collect();
    typed(mk_slice(NS, "web-1", "web", ("http", 8080), &eps))
}

fn expected(ready: &[bool]) -> BTreeSet<SocketAddr> {
    (0..ready.len())
        .filter(|p| ready[*p])
        .map(|p| format!("10.1.0.{}:8080", p + 1).parse().unwrap())
        .collect()
}

/// Applies an update to a client-side address set, as a proxy does.
fn apply(set: &mut BTreeSet<SocketAddr>, update: update::Update) {
    match update {
        update::Update::Add(add) => set.extend(add.addrs.iter().map(addr_of)),
        update::Update::Remove(rm) => {
            for a in rm.addrs {
                set.remove(&a.try_into().unwrap());
            }
        }
        update::Update::NoEndpoints(_) => set.clear(),
    }
}

struct Served {
    addr: SocketAddr,
    introspection: IntrospectionClient<Channel>,
    index: linkerd_index::Fed<linkerd_index::DiscoveryIndex>,
    metrics: Arc<Registry>,
    ready: Vec<bool>,
    _trigger: shutdown::Trigger,
}

/// A destination server over a fed index holding Service `web` and `PODS` ready pods, with its
/// streams recorded in a registry that an introspection server on `127.0.0.1:0` serves.
async fn start() -> Served {
    let index = fed_index();
    index.apply(Event::Apply(typed::<Service>(mk_service(
        NS,
        "web",
        &[("http", 80)],
    ))));
    for p in 0..PODS {
        index.apply(Event::Apply(typed::<Pod>(mk_pod(
            NS,
            &format!("web-{p}"),
            &format!("10.1.0.{}", p + 1),
            "web",
        ))));
    }
    let ready = vec![true; PODS];
    index.apply(Event::Apply(slice(&ready)));

    let mut registry = Registry::default();
    let streams = StreamRegistry::register(&mut registry, &["Get", "GetProfile"]);
    let (trigger, shutdown) = shutdown::channel();
    let service = DestinationService::new(
        index.index().clone(),
        EndpointTranslator::new(chart_config()),
        "cluster.local".into(),
        false,
        DestinationMetrics::default(),
        shutdown.clone(),
    )
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
        metrics: Arc::new(registry),
        ready,
        _trigger: trigger,
    }
}

/// A client with a large connection window, so that a stream it stops reading does not make
/// its own HTTP/2 stack give up on the connection (DESIGN.md), and a small stream window, so
/// that the server feels the stream's backpressure soon.
async fn client(addr: SocketAddr) -> DestinationClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .initial_connection_window_size(64 << 20)
        .initial_stream_window_size(1 << 10)
        .connect()
        .await
        .unwrap();
    DestinationClient::new(channel)
}

async fn get(addr: SocketAddr, token: &str) -> tonic::Streaming<Update> {
    client(addr)
        .await
        .get(GetDestination {
            scheme: "k8s".into(),
            path: PATH.into(),
            context_token: token.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// Reads `stream` into `set` until it equals `want`.
async fn read_until(
    stream: &mut tonic::Streaming<Update>,
    set: &mut BTreeSet<SocketAddr>,
    want: &BTreeSet<SocketAddr>,
) {
    while set != want {
        apply(set, next(stream).await);
    }
}

impl Served {
    async fn list(&mut self, request: ListStreamsRequest) -> Vec<StreamInfo> {
        self.introspection
            .list_streams(request)
            .await
            .unwrap()
            .into_inner()
            .streams
    }

    async fn all(&mut self) -> Vec<StreamInfo> {
        self.list(ListStreamsRequest::default()).await
    }

    /// What stream `id` last sent, as the `Update` the introspection API makes of it.
    async fn holding(&mut self, id: u64) -> update::Update {
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

    fn set_ready(&mut self, pod: usize, ready: bool) {
        self.ready[pod] = ready;
        self.index.apply(Event::Apply(slice(&self.ready)));
    }

    fn scrape(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.metrics).unwrap();
        text
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_streams_are_listed_and_one_shows_the_set_its_client_holds() {
    let mut s = start().await;
    let tokens = [token("client-0"), token("client-1"), "ns:shop".to_string()];
    let mut streams = Vec::new();
    let mut sets = Vec::new();
    for token in &tokens {
        let mut stream = get(s.addr, token).await;
        let mut set = BTreeSet::new();
        apply(&mut set, next(&mut stream).await);
        assert_eq!(set, expected(&s.ready));
        streams.push(stream);
        sets.push(set);
    }

    let listed = s.all().await;
    assert_eq!(listed.len(), 3);
    for (info, token) in listed.iter().zip(&tokens) {
        assert_eq!(info.api, "Get");
        assert_eq!(info.target, PATH);
        assert_eq!(&info.context_token, token);
        assert_eq!(info.messages_sent, 1);
        assert!(!info.behind, "{info:?}");
        assert!(info.peer.starts_with("127.0.0.1:"), "{}", info.peer);
        assert_eq!(
            info.client_identity, "",
            "no identity without the shim forwarding one"
        );
        assert!(info.opened_at_unix_ms > 0 && info.last_sent_at_unix_ms >= info.opened_at_unix_ms);
    }
    assert_eq!(listed[0].pod, "shop/client-0");
    assert_eq!(listed[1].pod, "shop/client-1");
    assert_eq!(listed[2].pod, "", "a legacy token names no pod");
    assert!(listed[0].id < listed[1].id && listed[1].id < listed[2].id);

    let only = s
        .list(ListStreamsRequest {
            pod: "shop/client-1".into(),
            ..ListStreamsRequest::default()
        })
        .await;
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].id, listed[1].id);

    // A change: two pods stop being ready. Every client reads its Remove.
    s.set_ready(3, false);
    s.set_ready(7, false);
    let want = expected(&s.ready);
    for (stream, set) in streams.iter_mut().zip(sets.iter_mut()) {
        read_until(stream, set, &want).await;
    }
    let mut held = BTreeSet::new();
    apply(&mut held, s.holding(listed[1].id).await);
    assert_eq!(
        held, sets[1],
        "what the API says equals what the client received"
    );
    assert_eq!(held.len(), PODS - 2);
    let after = s.all().await;
    assert!(
        after.iter().all(|i| !i.behind && i.messages_sent >= 2),
        "{after:?}"
    );

    // Bad input: clear errors, and the streams go on.
    let status = s
        .introspection
        .get_stream(GetStreamRequest { id: 999_999 })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    assert_eq!(
        status.message(),
        "no open stream has ID 999999 here (it closed, never existed, or is another server's: destination and policy-controller number their streams apart)"
    );
    let status = s
        .introspection
        .list_streams(ListStreamsRequest {
            pod: "client-1".into(),
            ..ListStreamsRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "invalid pod \"client-1\": expected namespace/name"
    );
    s.set_ready(3, true);
    let want = expected(&s.ready);
    read_until(&mut streams[0], &mut sets[0], &want).await;

    // A closed stream leaves the list.
    drop(streams.remove(2));
    let mut left = s.all().await;
    while left.len() != 2 {
        tokio::task::yield_now().await;
        left = s.all().await;
    }
    assert_eq!(
        left.iter().map(|i| i.id).collect::<Vec<_>>(),
        [listed[0].id, listed[1].id]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_convergence_histogram_counts_one_observation_per_stream_per_change() {
    let mut s = start().await;
    let mut streams = Vec::new();
    let mut sets = Vec::new();
    for i in 0..3 {
        let mut stream = get(s.addr, &token(&format!("client-{i}"))).await;
        let mut set = BTreeSet::new();
        apply(&mut set, next(&mut stream).await);
        streams.push(stream);
        sets.push(set);
    }
    let mut profile = client(s.addr)
        .await
        .get_profile(GetDestination {
            scheme: "k8s".into(),
            path: PATH.into(),
            context_token: token("client-0"),
        })
        .await
        .unwrap()
        .into_inner();
    let first: DestinationProfile = next_profile(&mut profile).await;
    assert_eq!(first.fully_qualified_name, "web.shop.svc.cluster.local");
    // First messages answer requests: no observation.
    let text = s.scrape();
    assert!(
        text.contains("stream_convergence_seconds_count{api=\"Get\"} 0\n"),
        "{text}"
    );

    for change in 1..=2u64 {
        s.set_ready(change as usize, false);
        let want = expected(&s.ready);
        for (stream, set) in streams.iter_mut().zip(sets.iter_mut()) {
            read_until(stream, set, &want).await;
        }
        let text = s.scrape();
        assert!(
            text.contains(&format!(
                "stream_convergence_seconds_count{{api=\"Get\"}} {}\n",
                3 * change
            )),
            "{text}"
        );
    }
    let listed = s
        .list(ListStreamsRequest {
            api: "GetProfile".into(),
            ..ListStreamsRequest::default()
        })
        .await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].pod, "shop/client-0");
    assert_eq!(
        listed[0].messages_sent, 1,
        "endpoint changes leave the profile as it was"
    );
    let sent = s
        .introspection
        .get_stream(GetStreamRequest { id: listed[0].id })
        .await
        .unwrap()
        .into_inner()
        .last_sent
        .unwrap();
    assert_eq!(
        sent.type_name,
        "io.linkerd.proxy.destination.DestinationProfile"
    );
    assert_eq!(DestinationProfile::decode(&sent.value[..]).unwrap(), first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_stops_reading_shows_as_behind_until_it_reads_again() {
    let mut s = start().await;
    let mut stalled = get(s.addr, &token("stalled")).await;
    let mut stalled_set = BTreeSet::new();
    apply(&mut stalled_set, next(&mut stalled).await);
    let mut reading = get(s.addr, &token("reading")).await;
    let mut reading_set = BTreeSet::new();
    apply(&mut reading_set, next(&mut reading).await);

    // Change until the stalled stream's unread messages fill its windows and buffers and the
    // server stops writing to it; the reading one keeps up with every change.
    let ids: Vec<u64> = s.all().await.iter().map(|i| i.id).collect();
    let mut changes = 0;
    loop {
        let pod = changes % PODS;
        let ready = !s.ready[pod];
        s.set_ready(pod, ready);
        changes += 1;
        let want = expected(&s.ready);
        read_until(&mut reading, &mut reading_set, &want).await;
        let listed = s.all().await;
        assert!(
            !listed[1].behind,
            "the reading stream is up to date: {listed:?}"
        );
        // Behind only counts once it lasts: until the windows fill, the stalled stream may
        // still catch up between two looks.
        if listed[0].behind {
            let behind = s
                .list(ListStreamsRequest {
                    behind_only: true,
                    ..ListStreamsRequest::default()
                })
                .await;
            if behind.iter().map(|i| i.id).collect::<Vec<_>>() == [ids[0]]
                && s.scrape().contains("streams_behind{api=\"Get\"} 1\n")
            {
                assert_eq!(behind[0].pod, "shop/stalled");
                break;
            }
        }
        assert!(changes < 20_000, "the stalled stream never fell behind");
    }

    // It reads again: never reset, it converges and catches up. (The set may pass through
    // the final one while older messages drain, so reading stops only once the API says the
    // stream wrote the newest view out.)
    let want = expected(&s.ready);
    loop {
        let listed = s.all().await;
        if stalled_set == want && !listed[0].behind {
            break;
        }
        if let Ok(message) =
            tokio::time::timeout(Duration::from_millis(50), stalled.message()).await
        {
            let update = message.expect("never reset").expect("stream open");
            apply(&mut stalled_set, update.update.unwrap());
        }
    }
    let listed = s.all().await;
    assert!(listed.iter().all(|i| !i.behind), "{listed:?}");
    assert!(s.scrape().contains("streams_behind{api=\"Get\"} 0\n"));
}
