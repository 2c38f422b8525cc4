//! The `kube` source end to end: kube-runtime watchers against a scripted API server
//! (`fake_apiserver`), applied to an [`Index`], observed through an endpoints subscription.
//!
//! Every wait is bounded by [`TIMEOUT`], and waits are on the subscription or on the server
//! having seen a request, never on a sleep. One fact about the index makes the server's
//! request log a synchronization point: a kind's task applies an event before it polls the
//! watcher again, so once the server has seen the watch that follows a list, that list's
//! `Reset` has been applied.

mod fake_apiserver;

use fake_apiserver::{FakeApi, JOBS, PODS, RESOURCES, SERVICES, SLICES, TIMEOUT};
use hyper::StatusCode;
use linkerd_index::{
    EndpointsKey, EndpointsView, Index, IndexMetrics, ObjectRef, source::kube::KubeSource,
};
use serde_json::{Value, json};
use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};
use tokio::sync::watch;

const NS: &str = "emojivoto";
const WEB_1_IP: &str = "10.244.0.11";
const WEB_2_IP: &str = "10.244.0.12";

#[tokio::test]
async fn ready_only_after_every_initial_list() {
    let api = FakeApi::start(emojivoto()).await;
    api.hold_lists(JOBS);
    let index = Index::new(IndexMetrics::default());
    let mut ready = index.ready();
    let mut web = index.endpoints(web_key());
    let _watches = index.spawn_watches(&KubeSource::new(api.client()));

    // Every kind but Job has listed and moved on to watching: their lists are applied.
    for (path, _, _) in RESOURCES.iter().filter(|(p, _, _)| *p != JOBS) {
        api.wait_for_watches(path, 1).await;
    }
    api.wait_for_requests("the held Job list", |reqs| {
        reqs.iter().any(|r| r.path == JOBS)
    })
    .await;
    assert!(!*ready.borrow(), "ready while the Job list is outstanding");
    let view = web.borrow_and_update().clone();
    assert!(view.exists());
    assert_eq!(addrs(&view), [sock(WEB_1_IP, 8080), sock(WEB_2_IP, 8080)]);

    api.release_lists(JOBS);
    tokio::time::timeout(TIMEOUT, ready.wait_for(|r| *r))
        .await
        .expect("ready after the last initial list")
        .expect("the index owns the sender");
    api.wait_for_watches(JOBS, 1).await;

    // What kube-runtime's default watcher::Config asks for: a paged list at the most recent
    // version, then a watch with bookmarks resuming from exactly the listed version.
    for (path, _, _) in RESOURCES {
        let lists = api.requests_to(path, false);
        let [list] = lists.as_slice() else {
            panic!("{path}: expected one list, got {lists:#?}");
        };
        assert_eq!(list.param("limit"), Some("500"), "{path}");
        assert_eq!(list.param("resourceVersion"), None, "{path}");
        assert_eq!(list.param("continue"), None, "{path}");
        let watches = api.requests_to(path, true);
        let [watch] = watches.as_slice() else {
            panic!("{path}: expected one watch, got {watches:#?}");
        };
        assert_eq!(watch.param("watch"), Some("true"), "{path}");
        assert_eq!(watch.param("allowWatchBookmarks"), Some("true"), "{path}");
        assert_eq!(watch.param("timeoutSeconds"), Some("290"), "{path}");
        assert_eq!(watch.param("sendInitialEvents"), None, "{path}");
        assert_eq!(
            watch.param("resourceVersion"),
            list.list_version.as_deref(),
            "{path}"
        );
    }
}

#[tokio::test]
async fn watch_events_reach_the_subscription() {
    let api = FakeApi::start(emojivoto()).await;
    let (index, _watches) = start_ready(&api).await;
    let mut web = index.endpoints(web_key());
    assert_eq!(
        addrs(&web.borrow_and_update()),
        [sock(WEB_1_IP, 8080), sock(WEB_2_IP, 8080)]
    );

    api.apply(SLICES, mk_slice("web-svc-7xk2p", &[("web-1", WEB_1_IP)]));
    let view = next_view(&mut web, "the slice without web-2").await;
    assert!(view.exists());
    assert_eq!(addrs(&view), [sock(WEB_1_IP, 8080)]);

    api.delete(SERVICES, NS, "web-svc");
    let view = next_view(&mut web, "the Service deleted").await;
    assert!(!view.exists());
    assert_eq!(addrs(&view), []);

    api.apply(SERVICES, mk_service("web-svc"));
    let view = next_view(&mut web, "the Service added again").await;
    assert!(view.exists());
    assert_eq!(addrs(&view), [sock(WEB_1_IP, 8080)]);
}

#[tokio::test]
async fn relist_after_gone_drops_what_vanished_while_disconnected() {
    let api = FakeApi::start(emojivoto()).await;
    let (index, _watches) = start_ready(&api).await;
    let mut web = index.endpoints(web_key());
    assert_eq!(
        addrs(&web.borrow_and_update()),
        [sock(WEB_1_IP, 8080), sock(WEB_2_IP, 8080)]
    );

    // The watches of pods and slices get `410 Gone`; the relists wait until web-2 and its
    // slice entry are gone, so those changes reach the index only through the relists.
    api.hold_lists(PODS);
    api.hold_lists(SLICES);
    api.expire(PODS);
    api.expire(SLICES);
    for path in [PODS, SLICES] {
        api.wait_for_requests("the relists", |reqs| {
            reqs.iter()
                .filter(|r| r.path == path && !r.is_watch())
                .count()
                == 2
        })
        .await;
    }
    api.delete(PODS, NS, "web-2");
    api.apply(SLICES, mk_slice("web-svc-7xk2p", &[("web-1", WEB_1_IP)]));
    assert!(
        !web.has_changed().expect("topic alive"),
        "changed while disconnected"
    );
    api.release_lists(PODS);
    api.release_lists(SLICES);
    api.wait_for_watches(PODS, 2).await;
    api.wait_for_watches(SLICES, 2).await;

    let view = next_view(&mut web, "the relisted view").await;
    assert!(view.exists());
    assert_eq!(addrs(&view), [sock(WEB_1_IP, 8080)]);
    // The relist removed the pod it no longer lists, not just the slice entry.
    assert_eq!(pod_names(&index, WEB_2_IP), Vec::<String>::new());
    assert_eq!(pod_names(&index, WEB_1_IP), ["web-1"]);
    // Each relist resumed watching from its own list's version, not the expired one.
    for path in [PODS, SLICES] {
        let lists = api.requests_to(path, false);
        let watches = api.requests_to(path, true);
        assert_eq!(
            watches[1].param("resourceVersion"),
            lists[1].list_version.as_deref(),
            "{path}"
        );
    }
}

#[tokio::test]
async fn relist_after_gone_drops_a_vanished_slice() {
    // web-2 has a slice of its own; only that slice vanishes, the pod stays.
    let api = FakeApi::start([
        mk_service("web-svc"),
        mk_slice("web-svc-7xk2p", &[("web-1", WEB_1_IP)]),
        mk_slice("web-svc-q9d4m", &[("web-2", WEB_2_IP)]),
        mk_pod("web-1", WEB_1_IP),
        mk_pod("web-2", WEB_2_IP),
    ])
    .await;
    let (index, _watches) = start_ready(&api).await;
    let mut web = index.endpoints(web_key());
    assert_eq!(
        addrs(&web.borrow_and_update()),
        [sock(WEB_1_IP, 8080), sock(WEB_2_IP, 8080)]
    );

    api.hold_lists(SLICES);
    api.expire(SLICES);
    api.wait_for_requests("the slice relist", |reqs| {
        reqs.iter()
            .filter(|r| r.path == SLICES && !r.is_watch())
            .count()
            == 2
    })
    .await;
    api.delete(SLICES, NS, "web-svc-q9d4m");
    api.release_lists(SLICES);
    api.wait_for_watches(SLICES, 2).await;

    let view = next_view(&mut web, "the relisted view").await;
    assert_eq!(addrs(&view), [sock(WEB_1_IP, 8080)]);
    assert_eq!(pod_names(&index, WEB_2_IP), ["web-2"]);
}

#[tokio::test]
async fn failed_watch_is_retried_with_backoff() {
    let api = FakeApi::start(emojivoto()).await;
    api.fail_next_watch(SLICES, StatusCode::INTERNAL_SERVER_ERROR);
    let (index, _watches) = start_ready(&api).await;
    let mut web = index.endpoints(web_key());

    let watches = api.requests_to(SLICES, true);
    let [failed, retried] = watches.as_slice() else {
        panic!("expected a failed watch and its retry, got {watches:#?}");
    };
    assert_eq!((failed.status, retried.status), (500, 200));
    // The retry resumes from the same version, without a relist...
    assert_eq!(
        failed.param("resourceVersion"),
        retried.param("resourceVersion")
    );
    assert_eq!(api.requests_to(SLICES, false).len(), 1);
    // ...after kube-runtime's backoff (800 ms plus jitter), not in a hot loop.
    assert!(
        retried.at - failed.at >= Duration::from_millis(500),
        "retried after {:?}",
        retried.at - failed.at
    );

    api.apply(SLICES, mk_slice("web-svc-7xk2p", &[("web-1", WEB_1_IP)]));
    let view = next_view(&mut web, "the slice without web-2").await;
    assert_eq!(addrs(&view), [sock(WEB_1_IP, 8080)]);
}

#[tokio::test]
async fn pods_listed_after_their_slice_reach_the_subscription() {
    // The slice names pods the index does not know yet: the view skips them until they arrive.
    let api = FakeApi::start(emojivoto()).await;
    api.hold_lists(PODS);
    let index = Index::new(IndexMetrics::default());
    let mut web = index.endpoints(web_key());
    let _watches = index.spawn_watches(&KubeSource::new(api.client()));
    api.wait_for_watches(SERVICES, 1).await;
    api.wait_for_watches(SLICES, 1).await;
    let view = web.borrow_and_update().clone();
    assert!(view.exists());
    assert_eq!(addrs(&view), []);

    api.release_lists(PODS);
    let view = next_view(&mut web, "the pods listed").await;
    assert_eq!(addrs(&view), [sock(WEB_1_IP, 8080), sock(WEB_2_IP, 8080)]);
}

// === helpers ===

/// The index over `api`, once every kind's initial list is applied and every kind watches.
async fn start_ready(api: &FakeApi) -> (Index, Vec<tokio::task::JoinHandle<()>>) {
    let index = Index::new(IndexMetrics::default());
    let watches = index.spawn_watches(&KubeSource::new(api.client()));
    tokio::time::timeout(TIMEOUT, index.ready().wait_for(|r| *r))
        .await
        .expect("ready after the initial lists")
        .expect("the index owns the sender");
    for (path, _, _) in RESOURCES {
        api.wait_for_watches(path, 1).await;
    }
    (index, watches)
}

/// The next view published, failing the test after [`TIMEOUT`].
async fn next_view(rx: &mut watch::Receiver<Arc<EndpointsView>>, what: &str) -> Arc<EndpointsView> {
    match tokio::time::timeout(TIMEOUT, rx.changed()).await {
        Ok(Ok(())) => rx.borrow_and_update().clone(),
        Ok(Err(_)) => panic!("topic closed waiting for {what}"),
        Err(_) => panic!(
            "timed out waiting for {what}; view: {:?}",
            addrs(&rx.borrow())
        ),
    }
}

fn web_key() -> EndpointsKey {
    EndpointsKey {
        service: ObjectRef {
            namespace: NS.to_string(),
            name: "web-svc".to_string(),
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

fn sock(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().expect("IP"), port)
}

fn pod_names(index: &Index, ip: &str) -> Vec<String> {
    let ip: IpAddr = ip.parse().expect("IP");
    index
        .pods_by_ip(ip)
        .iter()
        .map(|p| p.name.clone())
        .collect()
}

/// `web-svc` with its two pods behind one slice.
fn emojivoto() -> [Value; 4] {
    [
        mk_service("web-svc"),
        mk_slice("web-svc-7xk2p", &[("web-1", WEB_1_IP), ("web-2", WEB_2_IP)]),
        mk_pod("web-1", WEB_1_IP),
        mk_pod("web-2", WEB_2_IP),
    ]
}

fn mk_service(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "clusterIP": "10.96.0.10",
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    })
}

/// A slice of `web-svc` on port `http` 8080, one ready endpoint per (pod, IP).
fn mk_slice(name: &str, pods: &[(&str, &str)]) -> Value {
    let endpoints: Vec<Value> = pods
        .iter()
        .map(|(pod, ip)| {
            json!({
                "addresses": [ip],
                "conditions": {"ready": true},
                "targetRef": {"kind": "Pod", "namespace": NS, "name": pod},
            })
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kubernetes.io/service-name": "web-svc"},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    })
}

fn mk_pod(name: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [{"name": "web", "image": "web:v1"}]},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
    })
}
