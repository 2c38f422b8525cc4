//! Decision 2: a stream that stops reading never delays another stream, is never reset, and
//! converges to the final state when it reads again (latest-value coalescing).

mod support;

use k8s_openapi::api::{core::v1::Pod, core::v1::Service, discovery::v1::EndpointSlice};
use linkerd_index::Event;
use linkerd2_proxy_api::destination::{
    GetDestination, destination_client::DestinationClient, update::Update,
};
use std::{collections::BTreeSet, net::SocketAddr, time::Duration};
use support::*;
use tonic::transport::Endpoint;

const NS: &str = "shop";
const PATH: &str = "web.shop.svc.cluster.local:80";
const PODS: usize = 20;
const CHANGES: usize = 1000;

fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// The slice after change `i`: pod `i % PODS` flips readiness relative to change `i - 1`.
fn slice_after(i: usize, ready: &mut [bool]) -> EndpointSlice {
    ready[i % PODS] = !ready[i % PODS];
    let names: Vec<String> = (0..PODS).map(|p| format!("web-{p}")).collect();
    let ips: Vec<String> = (0..PODS).map(|p| format!("10.1.0.{}", p + 1)).collect();
    let eps: Vec<(&str, &str, bool)> = (0..PODS)
        .map(|p| (names[p].as_str(), ips[p].as_str(), ready[p]))
        .collect();
    typed(mk_slice(NS, "web-1", "web", ("http", 8080), &eps))
}

/// Applies updates to a client-side address set, as a proxy does.
fn apply(set: &mut BTreeSet<SocketAddr>, update: Update) {
    match update {
        Update::Add(add) => set.extend(add.addrs.iter().map(addr_of)),
        Update::Remove(rm) => {
            for a in rm.addrs {
                set.remove(&a.try_into().unwrap());
            }
        }
        Update::NoEndpoints(_) => set.clear(),
    }
}

async fn client(addr: SocketAddr) -> DestinationClient<tonic::transport::Channel> {
    // A large connection window so the stalled client's own h2 stack does not give up on the
    // connection; the per-stream window stays small so the server feels the backpressure.
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .initial_connection_window_size(64 << 20)
        .connect()
        .await
        .unwrap();
    DestinationClient::new(channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_does_not_delay_others_and_converges() {
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
    let mut ready = vec![true; PODS];
    let all: Vec<(String, String, bool)> = (0..PODS)
        .map(|p| (format!("web-{p}"), format!("10.1.0.{}", p + 1), true))
        .collect();
    let eps: Vec<(&str, &str, bool)> = all
        .iter()
        .map(|(n, i, r)| (n.as_str(), i.as_str(), *r))
        .collect();
    index.apply(Event::Apply(typed::<EndpointSlice>(mk_slice(
        NS,
        "web-1",
        "web",
        ("http", 8080),
        &eps,
    ))));

    let h = Harness::serve_index(index.index().clone(), chart_config(), false).await;
    let request = || GetDestination {
        scheme: "k8s".into(),
        path: PATH.into(),
        context_token: String::new(),
    };
    let mut slow = client(h.addr)
        .await
        .get(request())
        .await
        .unwrap()
        .into_inner();
    let mut fast = client(h.addr)
        .await
        .get(request())
        .await
        .unwrap()
        .into_inner();
    let mut slow_set = BTreeSet::new();
    apply(&mut slow_set, next(&mut slow).await);
    let mut fast_set = BTreeSet::new();
    apply(&mut fast_set, next(&mut fast).await);
    assert_eq!(fast_set.len(), PODS);

    // The slow stream is not read while every change goes through; the fast one sees each.
    for i in 0..CHANGES {
        index.apply(Event::Apply(slice_after(i, &mut ready)));
        let expected: BTreeSet<SocketAddr> = (0..PODS)
            .filter(|p| ready[*p])
            .map(|p| format!("10.1.0.{}:8080", p + 1).parse().unwrap())
            .collect();
        while fast_set != expected {
            let update = tokio::time::timeout(Duration::from_secs(5), fast.message())
                .await
                .unwrap_or_else(|_| panic!("fast stream delayed at change {i}"))
                .unwrap()
                .unwrap();
            apply(&mut fast_set, update.update.unwrap());
        }
    }

    // Now the slow stream reads: it was never reset, and converges to the final state.
    let expected = fast_set.clone();
    let mut received = 0;
    while slow_set != expected {
        let update = tokio::time::timeout(Duration::from_secs(5), slow.message())
            .await
            .expect("slow stream converges")
            .expect("slow stream not reset")
            .expect("slow stream open");
        apply(&mut slow_set, update.update.unwrap());
        received += 1;
    }
    assert_eq!(slow_set, expected);
    assert!(received <= CHANGES * 2, "{received} updates");
}

// === A proxy that reads slowly ===

const REWRITES: usize = 300;
/// The slow reader reads once every this many rewrites while they go on.
const READ_EVERY: usize = 40;
/// The stream window of a proxy's connection (HTTP/2's default).
const PROXY_STREAM_WINDOW: u32 = 65_535;

/// Version `version` of the Service's slice: the same PODS ready endpoints, each in zone
/// `zone-{version}`. Each version changes every address's `zone` label and nothing else, so
/// every change is one `Add` of all PODS addresses, which says which version it is from.
fn zoned_slice(version: usize) -> EndpointSlice {
    let names: Vec<String> = (0..PODS).map(|p| format!("web-{p}")).collect();
    let ips: Vec<String> = (0..PODS).map(|p| format!("10.1.0.{}", p + 1)).collect();
    let eps: Vec<(&str, &str, bool)> = (0..PODS)
        .map(|p| (names[p].as_str(), ips[p].as_str(), true))
        .collect();
    let mut slice: EndpointSlice = typed(mk_slice(NS, "web-1", "web", ("http", 8080), &eps));
    for endpoint in &mut slice.endpoints {
        endpoint.zone = Some(format!("zone-{version}"));
    }
    slice
}

/// The version of the slice an `Add` is from.
fn version_of(update: Update) -> usize {
    let Update::Add(add) = update else {
        panic!("expected an Add, got {update:?}")
    };
    assert_eq!(add.addrs.len(), PODS);
    let zones: BTreeSet<&str> = add
        .addrs
        .iter()
        .map(|a| a.metric_labels["zone"].as_str())
        .collect();
    let [zone] = zones.into_iter().collect::<Vec<_>>()[..] else {
        panic!("an Add of several versions")
    };
    zone.strip_prefix("zone-").unwrap().parse().unwrap()
}

/// A read as a proxy makes it: it takes every message its stream has received, which releases
/// the window they held. Returns their versions, in order.
fn take_received(
    stream: &mut tonic::Streaming<linkerd2_proxy_api::destination::Update>,
) -> Vec<usize> {
    use futures::FutureExt;
    let mut versions = Vec::new();
    while let Some(message) = stream.message().now_or_never() {
        let update = message.expect("stream ok").expect("stream open");
        versions.push(version_of(update.update.unwrap()));
    }
    versions
}

/// Issue 15, item 4: a proxy that reads its `Get` stream once in a while, with a window of
/// 65,535 bytes that a few `Add`s fill. What the server sent while the window was open
/// waits in the proxy's buffer, and the proxy's first read after the changes takes it; the
/// server, which holds at most the one message the window cut, then sends the rest of that
/// message and the newest state, computed when the window opened: the second read holds the
/// final state. Each read takes at most one message older than the previous read (tonic's
/// encoder, with HTTP/2 taking the next message ahead, delivered two or more). A fast stream
/// on the same connection sees every change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_gets_the_newest_state_once_its_window_opens() {
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
    index.apply(Event::Apply(zoned_slice(0)));
    let h = Harness::serve_index(index.index().clone(), chart_config(), false).await;
    // One connection, as a proxy has; its window large enough that the slow stream's unread
    // messages never hold up the fast one.
    let channel = Endpoint::from_shared(format!("http://{}", h.addr))
        .unwrap()
        .initial_stream_window_size(PROXY_STREAM_WINDOW)
        .initial_connection_window_size(64 << 20)
        .connect()
        .await
        .unwrap();
    let mut client = DestinationClient::new(channel);
    let request = GetDestination {
        scheme: "k8s".into(),
        path: PATH.into(),
        context_token: String::new(),
    };
    let mut slow = client.get(request.clone()).await.unwrap().into_inner();
    let mut fast = client.get(request).await.unwrap().into_inner();
    assert_eq!(version_of(next(&mut slow).await), 0);
    assert_eq!(version_of(next(&mut fast).await), 0);

    // (the version applied when the slow stream read, the versions it took), in order.
    let mut reads: Vec<(usize, Vec<usize>)> = Vec::new();
    for version in 1..=REWRITES {
        index.apply(Event::Apply(zoned_slice(version)));
        assert_eq!(
            version_of(next(&mut fast).await),
            version,
            "the fast stream"
        );
        if version % READ_EVERY == 0 {
            reads.push((version, take_received(&mut slow)));
        }
    }

    // Reads a second apart, as a slow proxy makes them.
    let during = reads.len();
    while reads.len() < during + 3
        && reads
            .last()
            .is_none_or(|(_, r)| r.last() != Some(&REWRITES))
    {
        tokio::time::sleep(Duration::from_secs(1)).await;
        reads.push((REWRITES, take_received(&mut slow)));
    }
    eprintln!("the slow stream's reads (version when read, versions taken): {reads:?}");
    let after: Vec<&Vec<usize>> = reads[during..].iter().map(|(_, r)| r).collect();
    assert_eq!(
        after.last().and_then(|r| r.last()),
        Some(&REWRITES),
        "the slow stream's reads after the changes: {after:?}"
    );
    assert!(after.len() <= 2, "reads after the changes: {after:?}");
    // What a read takes was sent after the previous read opened the window, so it is from a
    // version at least as new, but for the one message the window cut before that read. A
    // message computed ahead, or a batch encoded ahead, arrives older.
    for pair in reads.windows(2) {
        let [(read_at, _), (_, taken)] = pair else {
            unreachable!()
        };
        let older: Vec<usize> = taken.iter().copied().filter(|v| v < read_at).collect();
        assert!(
            older.len() <= 1,
            "after the read at version {read_at}, the slow stream got {older:?}: {reads:?}"
        );
    }
}
