//! Two discovery indexes in one process, each fed from its own state directory (as one index
//! per linked cluster will be): the same service name resolves to each cluster's own endpoints,
//! and a change in one cluster reaches only the streams of that cluster's index.

mod support;

use linkerd2_proxy_api::destination::{tls_identity::Strategy, update::Update};
use support::*;

const NS: &str = "shop";
const PATH: &str = "web.shop.svc.cluster.local:80";

/// A state directory with service `web` backed by `pods` (name, IP) of service account `sa`.
fn cluster(pods: &[(&str, &str)], sa: &str) -> StateDir {
    let dir = StateDir::new();
    dir.write("svc.yaml", &[mk_service(NS, "web", &[("http", 80)])]);
    write_pods(&dir, pods, sa);
    dir
}

fn write_pods(dir: &StateDir, pods: &[(&str, &str)], sa: &str) {
    let objects: Vec<_> = pods
        .iter()
        .map(|(name, ip)| mk_pod(NS, name, ip, sa))
        .collect();
    dir.write("pods.yaml", &objects);
    let endpoints: Vec<_> = pods.iter().map(|(name, ip)| (*name, *ip, true)).collect();
    dir.write(
        "slice.yaml",
        &[mk_slice(NS, "web-1", "web", ("http", 8080), &endpoints)],
    );
}

/// The identity every address of an `Add` is sent with.
fn identities(update: &Update) -> Vec<String> {
    let Update::Add(add) = update else {
        panic!("expected Add, got {update:?}")
    };
    add.addrs
        .iter()
        .map(|a| {
            match a
                .tls_identity
                .as_ref()
                .and_then(|t| t.strategy.as_ref())
                .expect("meshed endpoints carry an identity")
            {
                Strategy::DnsLikeIdentity(id) => id.name.clone(),
                other => panic!("unexpected identity strategy {other:?}"),
            }
        })
        .collect()
}

#[tokio::test]
async fn same_service_name_resolves_per_index() {
    let west = cluster(&[("web-a", "10.1.0.1"), ("web-b", "10.1.0.2")], "web");
    let east = cluster(&[("web-x", "10.2.0.1")], "web-east");

    let mut west_server = Harness::start(west.path()).await;
    let mut east_server = Harness::start(east.path()).await;

    let mut west_stream = west_server.get(PATH, "").await.unwrap();
    let mut east_stream = east_server.get(PATH, "").await.unwrap();

    let first_west = next(&mut west_stream).await;
    assert_eq!(
        added(&first_west),
        [sa("10.1.0.1:8080"), sa("10.1.0.2:8080")]
    );
    assert_eq!(
        identities(&first_west),
        ["web.shop.serviceaccount.identity.linkerd.cluster.local"; 2]
    );
    let first_east = next(&mut east_stream).await;
    assert_eq!(added(&first_east), [sa("10.2.0.1:8080")]);
    assert_eq!(
        identities(&first_east),
        ["web-east.shop.serviceaccount.identity.linkerd.cluster.local"]
    );

    // A rollout in the east cluster reaches only the east index's streams.
    write_pods(
        &east,
        &[("web-x", "10.2.0.1"), ("web-y", "10.2.0.2")],
        "web-east",
    );
    assert_eq!(added(&next(&mut east_stream).await), [sa("10.2.0.2:8080")]);
    assert_quiet(&mut west_stream).await;

    // Emptying the west cluster (its only slice deleted) leaves the east one untouched.
    west.remove("slice.yaml");
    match next(&mut west_stream).await {
        Update::NoEndpoints(none) => assert!(none.exists),
        other => panic!("expected NoEndpoints, got {other:?}"),
    }
    assert_quiet(&mut east_stream).await;

    // A new stream on each index sees that index's current state.
    let mut east_again = east_server.get(PATH, "").await.unwrap();
    assert_eq!(
        added(&next(&mut east_again).await),
        [sa("10.2.0.1:8080"), sa("10.2.0.2:8080")]
    );
}
