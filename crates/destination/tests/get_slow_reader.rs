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
