//! `Get` deltas: each change to the cluster state directory reaches an open stream as exactly
//! the expected sequence of `Add` / `Remove` / `NoEndpoints` (spec §C.5, decisions 1 and 3).

mod support;

use linkerd2_proxy_api::destination::{tls_identity::Strategy, update::Update};
use support::*;

const NS: &str = "shop";
const PATH: &str = "web.shop.svc.cluster.local:80";

/// A service `web` with pods a and b in one slice.
fn two_pods() -> StateDir {
    let dir = StateDir::new();
    dir.write("svc.yaml", &[mk_service(NS, "web", &[("http", 80)])]);
    dir.write(
        "pods.yaml",
        &[
            mk_pod(NS, "web-a", "10.1.0.1", "web"),
            mk_pod(NS, "web-b", "10.1.0.2", "web"),
        ],
    );
    dir.write(
        "slice.yaml",
        &[mk_slice(
            NS,
            "web-1",
            "web",
            ("http", 8080),
            &[("web-a", "10.1.0.1", true), ("web-b", "10.1.0.2", true)],
        )],
    );
    dir
}

async fn open(
    dir: &StateDir,
) -> (
    Harness,
    tonic::Streaming<linkerd2_proxy_api::destination::Update>,
) {
    let mut h = Harness::start(dir.path()).await;
    let mut stream = h.get(PATH, "").await.unwrap();
    assert_eq!(
        added(&next(&mut stream).await),
        [sa("10.1.0.1:8080"), sa("10.1.0.2:8080")]
    );
    (h, stream)
}

#[tokio::test]
async fn scale_up_then_down() {
    let dir = two_pods();
    let (_h, mut stream) = open(&dir).await;

    dir.write(
        "pods.yaml",
        &[
            mk_pod(NS, "web-a", "10.1.0.1", "web"),
            mk_pod(NS, "web-b", "10.1.0.2", "web"),
            mk_pod(NS, "web-c", "10.1.0.3", "web"),
        ],
    );
    dir.write(
        "slice.yaml",
        &[mk_slice(
            NS,
            "web-1",
            "web",
            ("http", 8080),
            &[
                ("web-a", "10.1.0.1", true),
                ("web-b", "10.1.0.2", true),
                ("web-c", "10.1.0.3", true),
            ],
        )],
    );
    assert_eq!(added(&next(&mut stream).await), [sa("10.1.0.3:8080")]);
    assert_quiet(&mut stream).await;

    // Scale down: the slice drops c first; the pod goes after (a Remove even once it is gone, §H.8).
    dir.write(
        "slice.yaml",
        &[mk_slice(
            NS,
            "web-1",
            "web",
            ("http", 8080),
            &[("web-a", "10.1.0.1", true)],
        )],
    );
    assert_eq!(
        removed(&next(&mut stream).await),
        [sa("10.1.0.2:8080"), sa("10.1.0.3:8080")]
    );
    dir.write("pods.yaml", &[mk_pod(NS, "web-a", "10.1.0.1", "web")]);
    assert_quiet(&mut stream).await;
}

#[tokio::test]
async fn readiness_flip() {
    let dir = two_pods();
    let (_h, mut stream) = open(&dir).await;
    dir.write(
        "slice.yaml",
        &[mk_slice(
            NS,
            "web-1",
            "web",
            ("http", 8080),
            &[("web-a", "10.1.0.1", true), ("web-b", "10.1.0.2", false)],
        )],
    );
    assert_eq!(removed(&next(&mut stream).await), [sa("10.1.0.2:8080")]);
    dir.write(
        "slice.yaml",
        &[mk_slice(
            NS,
            "web-1",
            "web",
            ("http", 8080),
            &[("web-a", "10.1.0.1", true), ("web-b", "10.1.0.2", true)],
        )],
    );
    assert_eq!(added(&next(&mut stream).await), [sa("10.1.0.2:8080")]);
    assert_quiet(&mut stream).await;
}

#[tokio::test]
async fn service_account_change_reaches_the_stream_at_once() {
    // Decision 3: a pod-only change is published without waiting for a slice event.
    let dir = two_pods();
    let (_h, mut stream) = open(&dir).await;
    dir.write(
        "pods.yaml",
        &[
            mk_pod(NS, "web-a", "10.1.0.1", "web"),
            mk_pod(NS, "web-b", "10.1.0.2", "web-v2"),
        ],
    );
    let Update::Add(set) = next(&mut stream).await else {
        panic!("expected Add")
    };
    assert_eq!(set.addrs.len(), 1);
    assert_eq!(addr_of(&set.addrs[0]), sa("10.1.0.2:8080"));
    let Some(Strategy::DnsLikeIdentity(id)) = set.addrs[0].tls_identity.clone().unwrap().strategy
    else {
        panic!("identity")
    };
    assert_eq!(
        id.name,
        "web-v2.shop.serviceaccount.identity.linkerd.cluster.local"
    );
    assert_eq!(set.addrs[0].metric_labels["serviceaccount"], "web-v2");
    assert_quiet(&mut stream).await;
}

#[tokio::test]
async fn delete_one_of_two_slices_then_the_last() {
    let dir = StateDir::new();
    dir.write("svc.yaml", &[mk_service(NS, "web", &[("http", 80)])]);
    dir.write(
        "pods.yaml",
        &[
            mk_pod(NS, "web-a", "10.1.0.1", "web"),
            mk_pod(NS, "web-b", "10.1.0.2", "web"),
        ],
    );
    dir.write(
        "slice-1.yaml",
        &[mk_slice(
            NS,
            "web-1",
            "web",
            ("http", 8080),
            &[("web-a", "10.1.0.1", true)],
        )],
    );
    dir.write(
        "slice-2.yaml",
        &[mk_slice(
            NS,
            "web-2",
            "web",
            ("http", 8080),
            &[("web-b", "10.1.0.2", true)],
        )],
    );
    let (_h, mut stream) = open(&dir).await;

    dir.remove("slice-2.yaml");
    assert_eq!(removed(&next(&mut stream).await), [sa("10.1.0.2:8080")]);
    dir.remove("slice-1.yaml");
    assert!(matches!(next(&mut stream).await, Update::NoEndpoints(ne) if ne.exists));
    assert_quiet(&mut stream).await;

    // Endpoints come back: one Add with all of them.
    dir.write(
        "slice-1.yaml",
        &[mk_slice(
            NS,
            "web-1",
            "web",
            ("http", 8080),
            &[("web-a", "10.1.0.1", true)],
        )],
    );
    assert_eq!(added(&next(&mut stream).await), [sa("10.1.0.1:8080")]);
}

#[tokio::test]
async fn delete_and_recreate_the_service() {
    let dir = two_pods();
    let (_h, mut stream) = open(&dir).await;
    dir.remove("svc.yaml");
    assert!(matches!(next(&mut stream).await, Update::NoEndpoints(ne) if !ne.exists));
    assert_quiet(&mut stream).await;
    dir.write("svc.yaml", &[mk_service(NS, "web", &[("http", 80)])]);
    assert_eq!(
        added(&next(&mut stream).await),
        [sa("10.1.0.1:8080"), sa("10.1.0.2:8080")]
    );
    assert_quiet(&mut stream).await;
}

#[tokio::test]
async fn service_created_after_the_stream_opened() {
    let dir = StateDir::new();
    dir.write("other.yaml", &[mk_service(NS, "other", &[("http", 80)])]);
    let mut h = Harness::start(dir.path()).await;
    let mut stream = h.get(PATH, "").await.unwrap();
    assert!(matches!(next(&mut stream).await, Update::NoEndpoints(ne) if !ne.exists));
    dir.write("svc.yaml", &[mk_service(NS, "web", &[("http", 80)])]);
    assert!(matches!(next(&mut stream).await, Update::NoEndpoints(ne) if ne.exists));
    dir.write("pods.yaml", &[mk_pod(NS, "web-a", "10.1.0.1", "web")]);
    dir.write(
        "slice.yaml",
        &[mk_slice(
            NS,
            "web-1",
            "web",
            ("http", 8080),
            &[("web-a", "10.1.0.1", true)],
        )],
    );
    assert_eq!(added(&next(&mut stream).await), [sa("10.1.0.1:8080")]);
}

#[tokio::test]
async fn target_port_change_re_adds_the_addresses() {
    // Quirk I.3 resolved: a changed port is a changed address.
    let dir = two_pods();
    let (_h, mut stream) = open(&dir).await;
    dir.write(
        "slice.yaml",
        &[mk_slice(
            NS,
            "web-1",
            "web",
            ("http", 9090),
            &[("web-a", "10.1.0.1", true), ("web-b", "10.1.0.2", true)],
        )],
    );
    assert_eq!(
        added(&next(&mut stream).await),
        [sa("10.1.0.1:9090"), sa("10.1.0.2:9090")]
    );
}
