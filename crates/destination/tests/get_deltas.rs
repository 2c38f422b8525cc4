//! `Get` deltas: each change to the cluster state directory reaches an open stream as exactly
//! the expected sequence of `Add` / `Remove` / `NoEndpoints` (spec §C.5, decisions 1 and 3).

mod support;

use linkerd_index::{EndpointsKey, EndpointsView, ObjectRef, Workload, topic::Receiver};
use linkerd2_proxy_api::destination::{tls_identity::Strategy, update::Update};
use std::time::Duration;
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
    write_slice(
        &dir,
        8080,
        &[("web-a", "10.1.0.1", true), ("web-b", "10.1.0.2", true)],
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
    write_slice(
        &dir,
        8080,
        &[
            ("web-a", "10.1.0.1", true),
            ("web-b", "10.1.0.2", true),
            ("web-c", "10.1.0.3", true),
        ],
    );
    assert_eq!(added(&next(&mut stream).await), [sa("10.1.0.3:8080")]);
    assert_quiet(&mut stream).await;

    // Scale down: the slice drops c first; the pod goes after (a Remove even once it is gone, §H.8).
    write_slice(&dir, 8080, &[("web-a", "10.1.0.1", true)]);
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
    write_slice(
        &dir,
        8080,
        &[("web-a", "10.1.0.1", true), ("web-b", "10.1.0.2", false)],
    );
    assert_eq!(removed(&next(&mut stream).await), [sa("10.1.0.2:8080")]);
    write_slice(
        &dir,
        8080,
        &[("web-a", "10.1.0.1", true), ("web-b", "10.1.0.2", true)],
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

/// Waits until the index's view of Service `web` port 80 holds pod `web-a` with label
/// `team`: the change was published to the topic the `Get` stream reads.
async fn wait_for_web_a_team_label(rx: &mut Receiver<EndpointsView>) {
    let has_label = |view: &EndpointsView| {
        view.endpoints.values().any(|ep| match &ep.workload {
            Workload::Pod { pod, .. } => pod.name == "web-a" && pod.labels.get("team").is_some(),
            _ => false,
        })
    };
    tokio::time::timeout(Duration::from_secs(5), async {
        while !has_label(&rx.borrow_and_update()) {
            rx.changed().await.expect("topic open");
        }
    })
    .await
    .expect("the pod change indexed within 5s");
}

/// A pod change the proxy cannot see sends nothing, and the next visible change is only the
/// new endpoint's `Add` (tester finding: every such change re-sent the pod's unchanged `Add`
/// to every stream of its Service).
#[tokio::test]
async fn a_pod_change_no_address_field_reads_sends_nothing() {
    let dir = two_pods();
    let (h, mut stream) = open(&dir).await;
    let mut rx = h.index.endpoints(EndpointsKey {
        service: ObjectRef {
            namespace: NS.into(),
            name: "web".into(),
        },
        port: 80,
        hostname: None,
    });

    dir.write(
        "pods.yaml",
        &[
            mk_pod_changed_invisibly(NS, "web-a", "10.1.0.1", "web"),
            mk_pod(NS, "web-b", "10.1.0.2", "web"),
        ],
    );
    wait_for_web_a_team_label(&mut rx).await;
    assert_quiet(&mut stream).await;

    // A visible change after it: the next message is exactly the new endpoint's Add.
    dir.write(
        "pods.yaml",
        &[
            mk_pod_changed_invisibly(NS, "web-a", "10.1.0.1", "web"),
            mk_pod(NS, "web-b", "10.1.0.2", "web"),
            mk_pod(NS, "web-c", "10.1.0.3", "web"),
        ],
    );
    write_slice(
        &dir,
        8080,
        &[
            ("web-a", "10.1.0.1", true),
            ("web-b", "10.1.0.2", true),
            ("web-c", "10.1.0.3", true),
        ],
    );
    let Update::Add(set) = next(&mut stream).await else {
        panic!("expected an Add")
    };
    assert_eq!(set.addrs.len(), 1, "{set:?}");
    assert_eq!(addr_of(&set.addrs[0]), sa("10.1.0.3:8080"));
    assert_eq!(set.addrs[0].metric_labels["pod"], "web-c");
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

/// A file that holds a Service with its slice and Pods, removed, reaches the stream as one
/// `NoEndpoints{exists: false}`, and written back as one `Add` (newcomer finding: the removal
/// sent `exists: true` first, the Pods withdrawn before the slice naming them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_of_a_whole_service_removed_and_written_back() {
    let dir = StateDir::new();
    let web = || {
        [
            mk_service(NS, "web", &[("http", 80)]),
            mk_slice(
                NS,
                "web-1",
                "web",
                ("http", 8080),
                &[("web-a", "10.1.0.1", true)],
            ),
            mk_pod(NS, "web-a", "10.1.0.1", "web"),
        ]
    };
    dir.write("web.yaml", &web());
    let mut h = Harness::start(dir.path()).await;
    let mut stream = h.get(PATH, "").await.unwrap();
    assert_eq!(added(&next(&mut stream).await), [sa("10.1.0.1:8080")]);
    dir.remove("web.yaml");
    assert!(matches!(next(&mut stream).await, Update::NoEndpoints(ne) if !ne.exists));
    assert_quiet(&mut stream).await;
    dir.write("web.yaml", &web());
    assert_eq!(added(&next(&mut stream).await), [sa("10.1.0.1:8080")]);
    assert_quiet(&mut stream).await;
}

/// A file whose Service, slice and Pods are all renamed in one write (the addresses kept)
/// reaches a stream of the old name as one `NoEndpoints{exists: false}`, and a stream of the
/// new name as one `Add`: the old Service is gone, whatever its addresses now belong to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_of_a_whole_service_renamed() {
    let dir = StateDir::new();
    let service = |name: &str| {
        [
            mk_service(NS, name, &[("http", 80)]),
            mk_slice(
                NS,
                &format!("{name}-1"),
                name,
                ("http", 8080),
                &[(format!("{name}-a").as_str(), "10.1.0.1", true)],
            ),
            mk_pod(NS, &format!("{name}-a"), "10.1.0.1", name),
        ]
    };
    dir.write("web.yaml", &service("web"));
    let mut h = Harness::start(dir.path()).await;
    let mut old = h.get(PATH, "").await.unwrap();
    assert_eq!(added(&next(&mut old).await), [sa("10.1.0.1:8080")]);
    let mut new = h.get("shop.shop.svc.cluster.local:80", "").await.unwrap();
    assert!(matches!(next(&mut new).await, Update::NoEndpoints(ne) if !ne.exists));

    dir.write("web.yaml", &service("shop"));
    assert!(matches!(next(&mut old).await, Update::NoEndpoints(ne) if !ne.exists));
    let Update::Add(set) = next(&mut new).await else {
        panic!("expected an Add")
    };
    assert_eq!(set.addrs.len(), 1, "{set:?}");
    assert_eq!(addr_of(&set.addrs[0]), sa("10.1.0.1:8080"));
    assert_eq!(set.addrs[0].metric_labels["pod"], "shop-a");
    assert_quiet(&mut old).await;
    assert_quiet(&mut new).await;
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
    write_slice(&dir, 8080, &[("web-a", "10.1.0.1", true)]);
    assert_eq!(added(&next(&mut stream).await), [sa("10.1.0.1:8080")]);
}

#[tokio::test]
async fn target_port_change_replaces_the_addresses() {
    // Quirk I.3 resolved: a changed port is a changed address. Proxies key endpoints by
    // address, so the old ones are removed.
    let dir = two_pods();
    let (_h, mut stream) = open(&dir).await;
    write_slice(
        &dir,
        9090,
        &[("web-a", "10.1.0.1", true), ("web-b", "10.1.0.2", true)],
    );
    assert_eq!(
        added(&next(&mut stream).await),
        [sa("10.1.0.1:9090"), sa("10.1.0.2:9090")]
    );
    assert_eq!(
        removed(&next(&mut stream).await),
        [sa("10.1.0.1:8080"), sa("10.1.0.2:8080")]
    );
    assert_quiet(&mut stream).await;
}

#[tokio::test]
async fn a_pod_back_with_a_new_ip_replaces_its_address() {
    // A StatefulSet pod recreated under its name gets a new IP; a stream that reads after both
    // the removal and the re-add sees only the new address for the same pod.
    let dir = two_pods();
    let (_h, mut stream) = open(&dir).await;
    write_slice(
        &dir,
        8080,
        &[("web-a", "10.1.0.1", true), ("web-b", "10.1.0.9", true)],
    );
    assert_eq!(added(&next(&mut stream).await), [sa("10.1.0.9:8080")]);
    assert_eq!(removed(&next(&mut stream).await), [sa("10.1.0.2:8080")]);
    assert_quiet(&mut stream).await;
}

#[tokio::test]
async fn addresses_that_pass_between_pods_are_not_removed() {
    let dir = two_pods();
    let (_h, mut stream) = open(&dir).await;
    // The pods swap IPs in one change: each address is re-added for its new pod, none removed.
    write_slice(
        &dir,
        8080,
        &[("web-a", "10.1.0.2", true), ("web-b", "10.1.0.1", true)],
    );
    assert_eq!(
        added(&next(&mut stream).await),
        [sa("10.1.0.1:8080"), sa("10.1.0.2:8080")]
    );
    assert_quiet(&mut stream).await;
}

/// Writes slice `web-1` of service `web`: target port `http` = `port`, endpoints
/// `(pod, ip, ready)`.
fn write_slice(dir: &StateDir, port: u16, endpoints: &[(&str, &str, bool)]) {
    dir.write(
        "slice.yaml",
        &[mk_slice(NS, "web-1", "web", ("http", port), endpoints)],
    );
}

/// Writes pods `(name, ip)` of service account `web` and one slice with all of them ready.
fn write_web_pods(dir: &StateDir, pods: &[(String, String)]) {
    let objects: Vec<_> = pods
        .iter()
        .map(|(pod, ip)| mk_pod(NS, pod, ip, "web"))
        .collect();
    dir.write("pods.yaml", &objects);
    let endpoints: Vec<(&str, &str, bool)> = pods
        .iter()
        .map(|(pod, ip)| (pod.as_str(), ip.as_str(), true))
        .collect();
    write_slice(dir, 8080, &endpoints);
}

/// The sorted target addresses of `pods`.
fn pod_addrs(pods: &[(String, String)]) -> Vec<std::net::SocketAddr> {
    let mut addrs: Vec<_> = pods
        .iter()
        .map(|(_, ip)| sa(&format!("{ip}:8080")))
        .collect();
    addrs.sort();
    addrs
}

/// `Get` sends each message as one frame of its shared encoding: an `Add` many times larger than
/// a request buffer (`linkerd_runtime::grpc::STREAM_BUFFER`) arrives whole, and so do the small
/// and large messages after it.
#[tokio::test]
async fn messages_larger_than_the_encode_buffer_arrive_whole() {
    use prost::Message;
    let all: Vec<(String, String)> = (0..300)
        .map(|i| {
            (
                format!("web-{i}"),
                format!("10.1.{}.{}", i / 200, i % 200 + 1),
            )
        })
        .collect();
    let dir = StateDir::new();
    dir.write("svc.yaml", &[mk_service(NS, "web", &[("http", 80)])]);
    write_web_pods(&dir, &all);

    let mut h = Harness::start(dir.path()).await;
    let mut stream = h.get(PATH, "").await.unwrap();
    let first = next(&mut stream).await;
    let size = linkerd2_proxy_api::destination::Update {
        update: Some(first.clone()),
    }
    .encoded_len();
    assert!(
        size > 40 * linkerd_runtime::grpc::STREAM_BUFFER,
        "the first Add is only {size} bytes"
    );
    let Update::Add(set) = &first else {
        panic!("expected an Add, got {first:?}")
    };
    for addr in &set.addrs {
        let Some(Strategy::DnsLikeIdentity(id)) =
            addr.tls_identity.clone().and_then(|i| i.strategy)
        else {
            panic!("{:?} has no identity", addr.addr)
        };
        assert_eq!(
            id.name,
            "web.shop.serviceaccount.identity.linkerd.cluster.local"
        );
    }
    let mut got = added(&first);
    got.sort();
    assert_eq!(got, pod_addrs(&all));

    write_web_pods(&dir, &all[..1]);
    let mut gone = removed(&next(&mut stream).await);
    gone.sort();
    assert_eq!(gone, pod_addrs(&all[1..]));

    write_web_pods(&dir, &all);
    let mut back = added(&next(&mut stream).await);
    back.sort();
    assert_eq!(back, pod_addrs(&all[1..]));
    assert_quiet(&mut stream).await;
}
