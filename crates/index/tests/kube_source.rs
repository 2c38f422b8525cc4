//! The `kube` source end to end: kube-runtime watchers against a scripted API server
//! (`fake_apiserver`), applied to a discovery index, observed through an endpoints
//! subscription.
//!
//! Every wait is bounded by [`TIMEOUT`], and waits are on the subscription or on the server
//! having seen a request, never on a sleep. One fact about the index makes the server's
//! request log a synchronization point: a kind's task applies an event before it polls the
//! watcher again, so once the server has seen the watch that follows a list, that list's
//! `Reset` has been applied.

mod fake_apiserver;

use fake_apiserver::{
    CUSTOM_RESOURCE_DEFINITIONS, EXTERNAL_WORKLOADS, FakeApi, GRPC_ROUTES_V1, HTTP_ROUTES_V1,
    HTTP_ROUTES_V1BETA1, JOBS, PODS, RESOURCES, SERVERS, SERVICE_PROFILES, SERVICES, SLICES,
    TIMEOUT, mk_gateway_crd,
};
use futures::StreamExt;
use hyper::StatusCode;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use linkerd_index::{
    ClusterSource, DiscoveryIndex, EndpointsKey, EndpointsView, Event, IndexMetrics, Kind,
    ObjectRef, Started, Watches,
    model::{PodInfo, ProfileInfo, ServiceInfo},
    source::kube::KubeSource,
};
use linkerd_k8s_api::{
    ServiceProfile,
    gateway_api::{grpcroutes::GrpcRoute, httproutes::HttpRoute},
};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};
use tokio::sync::mpsc;

const NS: &str = "emojivoto";
const WEB_1_IP: &str = "10.244.0.11";
const WEB_2_IP: &str = "10.244.0.12";
const WEB_3_IP: &str = "10.244.0.13";

#[tokio::test]
async fn ready_only_after_every_initial_list() {
    let api = FakeApi::start(emojivoto()).await;
    api.hold_lists(JOBS);
    let metrics = IndexMetrics::default();
    let index = DiscoveryIndex::new();
    let mut web = index.endpoints(web_key());
    let started = start(&index, &api, metrics).await;
    let mut ready = started.ready();

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
    let metrics = IndexMetrics::default();
    let index = DiscoveryIndex::new();
    let mut web = index.endpoints(web_key());
    let _watches = start(&index, &api, metrics).await;
    api.wait_for_watches(SERVICES, 1).await;
    api.wait_for_watches(SLICES, 1).await;
    let view = web.borrow_and_update().clone();
    assert!(view.exists());
    assert_eq!(addrs(&view), []);

    api.release_lists(PODS);
    let view = next_view(&mut web, "the pods listed").await;
    assert_eq!(addrs(&view), [sock(WEB_1_IP, 8080), sock(WEB_2_IP, 8080)]);
}

#[tokio::test]
async fn ready_while_crds_are_not_installed() {
    let api = FakeApi::start(emojivoto()).await;
    let (index, _watches) = start_ready(&api).await;

    // The CRD kinds were answered 404 and count as synced and empty...
    for path in [SERVERS, EXTERNAL_WORKLOADS] {
        let statuses: Vec<u16> = api
            .requests()
            .iter()
            .filter(|r| r.path == path)
            .map(|r| r.status)
            .collect();
        assert!(!statuses.is_empty(), "{path} never requested");
        assert!(statuses.iter().all(|s| *s == 404), "{path}: {statuses:?}");
    }
    // ...and the built-in kinds are served as usual.
    assert_eq!(
        addrs(&index.endpoints(web_key()).borrow()),
        [sock(WEB_1_IP, 8080), sock(WEB_2_IP, 8080)]
    );
}

#[tokio::test]
async fn missing_crd_is_served_empty_until_installed_and_after_removal() {
    let api = FakeApi::start([mk_profile("web-svc")]).await;
    let source = KubeSource::new(api.client(), IndexMetrics::default());
    let mut events = spawn_events::<ServiceProfile>(&source);

    // Not installed: one empty Reset, so the kind is synced; the retries yield nothing more.
    assert_eq!(next_event(&mut events, "the missing CRD").await, reset(&[]));
    wait_for_not_found(&api, false, 2).await;

    // Installed: the retried list serves its objects.
    api.install_crd(SERVICE_PROFILES);
    assert_eq!(
        next_event(&mut events, "the installed CRD").await,
        reset(&[profile_name("web-svc")])
    );
    let lists = api.requests_to(SERVICE_PROFILES, false);
    assert_eq!(lists.last().map(|r| r.status), Some(200));

    // Removed while watched: the watch ends, its retry gets 404, the objects are gone.
    api.wait_for_watches(SERVICE_PROFILES, 1).await;
    api.remove_crd(SERVICE_PROFILES);
    assert_eq!(next_event(&mut events, "the removed CRD").await, reset(&[]));

    // Installed again with other objects: relisted.
    api.apply(SERVICE_PROFILES, mk_profile("emoji-svc"));
    api.install_crd(SERVICE_PROFILES);
    assert_eq!(
        next_event(&mut events, "the reinstalled CRD").await,
        reset(&[profile_name("emoji-svc")])
    );
}

#[tokio::test]
async fn malformed_object_in_a_list_is_skipped_alone() {
    let api = FakeApi::start([
        mk_service("api-svc"),
        mk_bad_service("bad-svc"),
        mk_service("web-svc"),
    ])
    .await;
    let mut registry = Registry::default();
    let source = KubeSource::new(api.client(), IndexMetrics::register(&mut registry));
    let mut events = spawn_events::<Service>(&source);

    assert_eq!(
        next_event(&mut events, "the initial list").await,
        reset(&["api-svc".to_string(), "web-svc".to_string()])
    );
    assert_eq!(invalid_objects(&registry, "Service"), 1);
}

#[tokio::test]
async fn malformed_object_in_a_watch_is_skipped_alone() {
    let api = FakeApi::start([mk_service("web-svc")]).await;
    let mut registry = Registry::default();
    let source = KubeSource::new(api.client(), IndexMetrics::register(&mut registry));
    let mut events = spawn_events::<Service>(&source);
    assert_eq!(
        next_event(&mut events, "the initial list").await,
        reset(&["web-svc".to_string()])
    );
    api.wait_for_watches(SERVICES, 1).await;

    api.apply(SERVICES, mk_bad_service("bad-svc"));
    api.apply(SERVICES, mk_service("api-svc"));
    assert_eq!(
        next_event(&mut events, "the Service after the bad one").await,
        ("Apply", vec!["api-svc".to_string()])
    );
    assert_eq!(invalid_objects(&registry, "Service"), 1);

    // Its deletion still arrives (a Delete needs only its namespace/name), and the object is
    // not counted again.
    api.delete(SERVICES, NS, "bad-svc");
    assert_eq!(
        next_event(&mut events, "the bad Service deleted").await,
        ("Delete", vec!["bad-svc".to_string()])
    );
    api.delete(SERVICES, NS, "web-svc");
    assert_eq!(
        next_event(&mut events, "a good Service deleted").await,
        ("Delete", vec!["web-svc".to_string()])
    );
    assert_eq!(invalid_objects(&registry, "Service"), 1);
}

#[tokio::test]
async fn malformed_pod_does_not_hide_the_others() {
    // The slice names three pods; web-3's does not decode.
    let api = FakeApi::start([
        mk_service("web-svc"),
        mk_slice(
            "web-svc-7xk2p",
            &[
                ("web-1", WEB_1_IP),
                ("web-2", WEB_2_IP),
                ("web-3", WEB_3_IP),
            ],
        ),
        mk_pod("web-1", WEB_1_IP),
        mk_pod("web-2", WEB_2_IP),
        mk_bad_pod("web-3", WEB_3_IP),
    ])
    .await;
    let mut registry = Registry::default();
    let (index, _watches) = start_ready_with(&api, IndexMetrics::register(&mut registry)).await;
    let mut web = index.endpoints(web_key());
    assert_eq!(
        addrs(&web.borrow_and_update()),
        [sock(WEB_1_IP, 8080), sock(WEB_2_IP, 8080)]
    );
    assert_eq!(pod_names(&index, WEB_3_IP), Vec::<String>::new());
    assert_eq!(invalid_objects(&registry, "Pod"), 1);

    // Fixed, it arrives through the watch.
    api.apply(PODS, mk_pod("web-3", WEB_3_IP));
    let view = next_view(&mut web, "the fixed pod").await;
    assert_eq!(
        addrs(&view),
        [
            sock(WEB_1_IP, 8080),
            sock(WEB_2_IP, 8080),
            sock(WEB_3_IP, 8080)
        ]
    );
    assert_eq!(pod_names(&index, WEB_3_IP), ["web-3"]);
}

#[tokio::test]
async fn updates_observe_the_informer_lag() {
    let api = FakeApi::start([mk_pod("web-1", WEB_1_IP)]).await;
    let mut registry = Registry::default();
    let source = KubeSource::new(api.client(), IndexMetrics::register(&mut registry));
    let mut events = spawn_events::<Pod>(&source);
    assert_eq!(
        next_event(&mut events, "the initial list").await,
        reset(&["web-1".to_string()])
    );
    api.wait_for_watches(PODS, 1).await;

    // Last updated 30 s ago (managedFields times have whole seconds): observed in the 50 s
    // bucket, whatever the test's own delays.
    let updated = k8s_openapi::jiff::Timestamp::now() - Duration::from_secs(30);
    api.apply(PODS, with_update_time(mk_pod("web-2", WEB_2_IP), updated));
    assert_eq!(
        next_event(&mut events, "a created pod").await,
        ("Apply", vec!["web-2".to_string()])
    );
    assert_eq!(lag_series(&registry, "pods"), ["_sum 0.0", "_count 0"]);
    api.apply(PODS, with_update_time(mk_pod("web-1", WEB_1_IP), updated));
    assert_eq!(
        next_event(&mut events, "an updated pod").await,
        ("Apply", vec!["web-1".to_string()])
    );
    let series = lag_series(&registry, "pods");
    assert!(
        series.contains(&r#"_bucket{le="25.0"} 0"#.to_string())
            && series.contains(&r#"_bucket{le="50.0"} 1"#.to_string())
            && series.contains(&"_count 1".to_string()),
        "{series:?}"
    );

    // A relist is not an update.
    api.expire(PODS);
    assert_eq!(
        next_event(&mut events, "the relist").await,
        reset(&["web-1".to_string(), "web-2".to_string()])
    );
    assert!(lag_series(&registry, "pods").contains(&"_count 1".to_string()));
    // A kind nothing watches has no histogram: an empty one would claim no lag.
    assert_eq!(lag_series(&registry, "services"), Vec::<String>::new());
}

const HTTP_ROUTES_CRD: &str = "httproutes.gateway.networking.k8s.io";

#[tokio::test]
async fn gateway_routes_follow_their_crd() {
    let api = FakeApi::start([
        mk_service("web-svc"),
        mk_route("gateway.networking.k8s.io/v1beta1", "web-route"),
    ])
    .await;
    let source = KubeSource::new(api.client(), IndexMetrics::default());
    let mut routes = spawn_events::<HttpRoute>(&source);
    let mut services = spawn_events::<Service>(&source);

    // Absent: the kind is synced and empty, and no route collection is asked for.
    assert_eq!(next_event(&mut routes, "the absent CRD").await, reset(&[]));
    assert_eq!(
        next_event(&mut services, "the Services").await,
        reset(&names(&["web-svc"]))
    );
    let crd_lists = api.requests_to(CUSTOM_RESOURCE_DEFINITIONS, false);
    let [crd_list] = crd_lists.as_slice() else {
        panic!("expected one CRD list, got {crd_lists:#?}");
    };
    assert_eq!(
        crd_list.param("fieldSelector"),
        Some("metadata.name=httproutes.gateway.networking.k8s.io")
    );
    assert_eq!(route_requests(&api), Vec::<String>::new());
    api.wait_for_watches(CUSTOM_RESOURCE_DEFINITIONS, 1).await;

    // Installed, serving v1beta1 only: watched at v1beta1.
    api.install_crd(HTTP_ROUTES_V1BETA1);
    api.put_crd(mk_gateway_crd("httproutes", "HTTPRoute", &["v1beta1"]));
    assert_eq!(
        next_event(&mut routes, "the installed CRD").await,
        reset(&names(&["web-route"]))
    );
    api.apply(
        HTTP_ROUTES_V1BETA1,
        mk_route("gateway.networking.k8s.io/v1beta1", "emoji-route"),
    );
    assert_eq!(
        next_event(&mut routes, "a route added").await,
        ("Apply", names(&["emoji-route"]))
    );
    api.apply(SERVICES, mk_service("api-svc"));
    assert_eq!(
        next_event(&mut services, "a Service added").await,
        ("Apply", names(&["api-svc"]))
    );

    // Upgraded to also serve v1: the v1beta1 watch stops, v1 is listed and watched (here its
    // collection holds other objects, so the Reset shows which version was listed).
    api.apply(
        HTTP_ROUTES_V1,
        mk_route("gateway.networking.k8s.io/v1", "web-route"),
    );
    api.apply(
        HTTP_ROUTES_V1,
        mk_route("gateway.networking.k8s.io/v1", "vote-route"),
    );
    api.install_crd(HTTP_ROUTES_V1);
    api.put_crd(mk_gateway_crd(
        "httproutes",
        "HTTPRoute",
        &["v1beta1", "v1"],
    ));
    assert_eq!(
        next_event(&mut routes, "the upgraded CRD").await,
        reset(&names(&["vote-route", "web-route"]))
    );
    api.wait_for_watches_closed(HTTP_ROUTES_V1BETA1).await;
    api.apply(
        HTTP_ROUTES_V1,
        mk_route("gateway.networking.k8s.io/v1", "emoji-route"),
    );
    assert_eq!(
        next_event(&mut routes, "a route added at v1").await,
        ("Apply", names(&["emoji-route"]))
    );
    assert_eq!(
        route_requests(&api),
        [
            format!("list {HTTP_ROUTES_V1BETA1}"),
            format!("watch {HTTP_ROUTES_V1BETA1}"),
            format!("list {HTTP_ROUTES_V1}"),
            format!("watch {HTTP_ROUTES_V1}"),
        ]
    );

    // Removed: served empty at once, from the CRD's deletion alone (its collections are still
    // served here), and the route watch stops.
    api.delete_crd(HTTP_ROUTES_CRD);
    assert_eq!(next_event(&mut routes, "the removed CRD").await, reset(&[]));
    api.wait_for_watches_closed(HTTP_ROUTES_V1).await;
    api.remove_crd(HTTP_ROUTES_V1BETA1);
    api.remove_crd(HTTP_ROUTES_V1);

    // The Services were watched throughout, on the same watch.
    api.delete(SERVICES, NS, "api-svc");
    assert_eq!(
        next_event(&mut services, "a Service deleted").await,
        ("Delete", names(&["api-svc"]))
    );
    assert_eq!(api.requests_to(SERVICES, false).len(), 1);
    assert_eq!(api.requests_to(SERVICES, true).len(), 1);

    // Installed again, serving v1 only: watched again.
    api.apply(
        HTTP_ROUTES_V1,
        mk_route("gateway.networking.k8s.io/v1", "books-route"),
    );
    api.install_crd(HTTP_ROUTES_V1);
    api.put_crd(mk_gateway_crd("httproutes", "HTTPRoute", &["v1"]));
    assert_eq!(
        next_event(&mut routes, "the reinstalled CRD").await,
        reset(&names(&["books-route"]))
    );
}

#[tokio::test]
async fn gateway_crd_is_used_once_established() {
    let api = FakeApi::start([mk_route("gateway.networking.k8s.io/v1", "web-route")]).await;
    let source = KubeSource::new(api.client(), IndexMetrics::default());
    let mut routes = spawn_events::<HttpRoute>(&source);
    assert_eq!(next_event(&mut routes, "the absent CRD").await, reset(&[]));
    api.wait_for_watches(CUSTOM_RESOURCE_DEFINITIONS, 1).await;

    // Created but not yet established, then serving nothing: still absent.
    let mut pending = mk_gateway_crd("httproutes", "HTTPRoute", &["v1"]);
    pending["status"]["conditions"][1]["status"] = json!("False");
    api.put_crd(pending);
    api.put_crd(mk_gateway_crd("httproutes", "HTTPRoute", &[]));
    // Established, serving v1.
    api.install_crd(HTTP_ROUTES_V1);
    api.put_crd(mk_gateway_crd("httproutes", "HTTPRoute", &["v1"]));
    assert_eq!(
        next_event(&mut routes, "the established CRD").await,
        reset(&names(&["web-route"]))
    );
    // Only the established CRD started a watch (an earlier one would have been answered 404,
    // then retried).
    assert_eq!(api.requests_to(HTTP_ROUTES_V1, false).len(), 1);
}

#[tokio::test]
async fn a_new_version_not_served_yet_keeps_the_routes_until_it_lists() {
    let api = FakeApi::start([mk_route("gateway.networking.k8s.io/v1beta1", "web-route")]).await;
    api.install_crd(HTTP_ROUTES_V1BETA1);
    api.put_crd(mk_gateway_crd("httproutes", "HTTPRoute", &["v1beta1"]));
    let source = KubeSource::new(api.client(), IndexMetrics::default());
    let mut routes = spawn_events::<HttpRoute>(&source);
    assert_eq!(
        next_event(&mut routes, "the v1beta1 routes").await,
        reset(&names(&["web-route"]))
    );

    // The CRD says v1 is served before the API server serves it: the list is retried, and
    // nothing is yielded meanwhile (no empty Reset that would drop the routes).
    api.put_crd(mk_gateway_crd(
        "httproutes",
        "HTTPRoute",
        &["v1beta1", "v1"],
    ));
    api.wait_for_requests("a v1 list answered 404", |reqs| {
        reqs.iter()
            .any(|r| r.path == HTTP_ROUTES_V1 && !r.is_watch() && r.status == 404)
    })
    .await;
    api.apply(
        HTTP_ROUTES_V1,
        mk_route("gateway.networking.k8s.io/v1", "web-route"),
    );
    api.apply(
        HTTP_ROUTES_V1,
        mk_route("gateway.networking.k8s.io/v1", "vote-route"),
    );
    api.install_crd(HTTP_ROUTES_V1);
    assert_eq!(
        next_event(&mut routes, "the v1 routes").await,
        reset(&names(&["vote-route", "web-route"]))
    );
}

#[tokio::test]
async fn crds_forbidden_or_not_served_fall_back_to_the_typed_version() {
    for status in [403, 404] {
        let api = FakeApi::start([mk_route("gateway.networking.k8s.io/v1", "web-route")]).await;
        match status {
            403 => api.forbid(CUSTOM_RESOURCE_DEFINITIONS),
            _ => api.remove_crd(CUSTOM_RESOURCE_DEFINITIONS),
        }
        let source = KubeSource::new(api.client(), IndexMetrics::default());
        let mut routes = spawn_events::<HttpRoute>(&source);

        // v1 (HTTPRoute's typed version) is watched directly, served empty while it is 404...
        assert_eq!(next_event(&mut routes, "the 404 at v1").await, reset(&[]));
        // ...and its objects once it is served.
        api.install_crd(HTTP_ROUTES_V1);
        assert_eq!(
            next_event(&mut routes, "the v1 routes").await,
            reset(&names(&["web-route"])),
            "CRDs answered {status}"
        );
        let crd_requests: Vec<u16> = api
            .requests()
            .iter()
            .filter(|r| r.path == CUSTOM_RESOURCE_DEFINITIONS)
            .map(|r| r.status)
            .collect();
        assert_eq!(crd_requests, [status]);
    }
}

#[tokio::test]
async fn each_route_kind_follows_its_own_crd() {
    let api = FakeApi::start([
        mk_route("gateway.networking.k8s.io/v1", "web-route"),
        mk_grpc_route("web-grpc"),
    ])
    .await;
    let source = KubeSource::new(api.client(), IndexMetrics::default());
    let mut http = spawn_events::<HttpRoute>(&source);
    let mut grpc = spawn_events::<GrpcRoute>(&source);
    assert_eq!(next_event(&mut http, "no HTTPRoute CRD").await, reset(&[]));
    assert_eq!(next_event(&mut grpc, "no GRPCRoute CRD").await, reset(&[]));

    api.install_crd(HTTP_ROUTES_V1);
    api.put_crd(mk_gateway_crd("httproutes", "HTTPRoute", &["v1"]));
    api.install_crd(GRPC_ROUTES_V1);
    api.put_crd(mk_gateway_crd("grpcroutes", "GRPCRoute", &["v1"]));
    assert_eq!(
        next_event(&mut http, "the HTTPRoutes").await,
        reset(&names(&["web-route"]))
    );
    assert_eq!(
        next_event(&mut grpc, "the GRPCRoutes").await,
        reset(&names(&["web-grpc"]))
    );
    api.wait_for_watches(GRPC_ROUTES_V1, 1).await;

    // Removing the HTTPRoute CRD leaves the GRPCRoute watch as it was.
    api.delete_crd(HTTP_ROUTES_CRD);
    assert_eq!(next_event(&mut http, "the removed CRD").await, reset(&[]));
    api.apply(GRPC_ROUTES_V1, mk_grpc_route("emoji-grpc"));
    assert_eq!(
        next_event(&mut grpc, "a GRPCRoute added").await,
        ("Apply", names(&["emoji-grpc"]))
    );
    assert_eq!(api.requests_to(GRPC_ROUTES_V1, false).len(), 1);
    assert_eq!(api.requests_to(GRPC_ROUTES_V1, true).len(), 1);
}

#[tokio::test]
async fn ready_while_gateway_crds_are_absent() {
    let api = FakeApi::start(emojivoto()).await;
    let metrics = IndexMetrics::default();
    // Channels stand for the indexes: only the kinds matter here.
    let mut watches = Watches::new(metrics.clone());
    watches
        .add::<Service>(mpsc::unbounded_channel().0)
        .add::<HttpRoute>(mpsc::unbounded_channel().0)
        .add::<GrpcRoute>(mpsc::unbounded_channel().0);
    let source = ClusterSource::Kube(KubeSource::new(api.client(), metrics));
    let started = watches.start(&source).await;
    tokio::time::timeout(TIMEOUT, started.ready().wait_for(|r| *r))
        .await
        .expect("ready with the route CRDs absent")
        .expect("the watches own the sender");
    assert_eq!(route_requests(&api), Vec::<String>::new());
    let selectors: Vec<Option<String>> = api
        .requests_to(CUSTOM_RESOURCE_DEFINITIONS, false)
        .iter()
        .map(|r| r.param("fieldSelector").map(str::to_string))
        .collect();
    assert_eq!(selectors.len(), 2, "{selectors:?}");
    for crd in ["httproutes", "grpcroutes"] {
        let selector = format!("metadata.name={crd}.gateway.networking.k8s.io");
        assert!(selectors.contains(&Some(selector)), "{selectors:?}");
    }
}

// === helpers ===

/// `list <path>` or `watch <path>` for every request to a Gateway API route collection, in
/// order.
fn route_requests(api: &FakeApi) -> Vec<String> {
    api.requests()
        .iter()
        .filter(|r| {
            [HTTP_ROUTES_V1BETA1, HTTP_ROUTES_V1, GRPC_ROUTES_V1].contains(&r.path.as_str())
        })
        .map(|r| {
            let verb = if r.is_watch() { "watch" } else { "list" };
            format!("{verb} {}", r.path)
        })
        .collect()
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// A GRPCRoute `name` (v1) routing `emojivoto.v1.EmojiService` of `web-svc` port 80 to it.
fn mk_grpc_route(name: &str) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GRPCRoute",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "parentRefs": [{"group": "core", "kind": "Service", "name": "web-svc", "port": 80}],
            "rules": [{
                "matches": [{"method": {"type": "Exact", "service": "emojivoto.v1.EmojiService"}}],
                "backendRefs": [{"name": "web-svc", "port": 80}],
            }],
        },
    })
}

/// A Gateway API HTTPRoute `name` at `api_version`, routing `/` of `web-svc` port 80 to it.
fn mk_route(api_version: &str, name: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "parentRefs": [{"group": "core", "kind": "Service", "name": "web-svc", "port": 80}],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": [{"name": "web-svc", "port": 80}],
            }],
        },
    })
}

/// Names the objects a kind decodes into.
trait Named {
    fn name(&self) -> String;
}

impl Named for ServiceInfo {
    fn name(&self) -> String {
        self.name.clone()
    }
}

impl Named for PodInfo {
    fn name(&self) -> String {
        self.name.clone()
    }
}

impl Named for ProfileInfo {
    fn name(&self) -> String {
        self.name.clone()
    }
}

impl Named for HttpRoute {
    fn name(&self) -> String {
        self.name_any()
    }
}

impl Named for GrpcRoute {
    fn name(&self) -> String {
        self.name_any()
    }
}

/// Polls `source`'s events of kind `K` in a task of its own, so the watcher keeps requesting
/// while the test waits on the server; each event is summarized by [`summary`].
fn spawn_events<K: Kind>(
    source: &KubeSource,
) -> mpsc::UnboundedReceiver<(&'static str, Vec<String>)>
where
    K::Object: Named,
{
    let mut events = source.events::<K>(None);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if tx.send(summary(&event)).is_err() {
                return;
            }
        }
    });
    rx
}

/// The event's variant and the names of its objects, sorted.
fn summary<T: Named>(event: &Event<Arc<T>>) -> (&'static str, Vec<String>) {
    let (variant, mut names): (_, Vec<String>) = match event {
        Event::Apply(obj) => ("Apply", vec![obj.name()]),
        Event::Delete(key) => ("Delete", vec![key.name.clone()]),
        Event::Reset(objs) => ("Reset", objs.iter().map(|o| o.name()).collect()),
    };
    names.sort();
    (variant, names)
}

fn reset(names: &[String]) -> (&'static str, Vec<String>) {
    ("Reset", names.to_vec())
}

/// The next event summarized, failing the test after [`TIMEOUT`].
async fn next_event(
    rx: &mut mpsc::UnboundedReceiver<(&'static str, Vec<String>)>,
    what: &str,
) -> (&'static str, Vec<String>) {
    match tokio::time::timeout(TIMEOUT, rx.recv()).await {
        Ok(Some(event)) => event,
        Ok(None) => panic!("events ended waiting for {what}"),
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// Waits until the ServiceProfile lists (or watches) have been answered `404` `n` times.
async fn wait_for_not_found(api: &FakeApi, watches: bool, n: usize) {
    api.wait_for_requests(
        &format!("{n} ServiceProfile requests answered 404"),
        |reqs| {
            reqs.iter()
                .filter(|r| {
                    r.path == SERVICE_PROFILES && r.is_watch() == watches && r.status == 404
                })
                .count()
                >= n
        },
    )
    .await;
}

/// `index_invalid_objects_total{cluster="local",kind}` as `registry` encodes it (0 when absent).
fn invalid_objects(registry: &Registry, kind: &str) -> u64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("encode metrics");
    let series = format!("index_invalid_objects_total{{cluster=\"local\",kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |value| value.parse().expect("a counter value"))
}

/// The `_bucket`, `_sum` and `_count` lines of `<plural>_informer_lag_seconds` as `registry`
/// encodes them, without the name; buckets only once something was observed.
fn lag_series(registry: &Registry, plural: &str) -> Vec<String> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("encode metrics");
    let name = format!("{plural}_informer_lag_seconds");
    let lines: Vec<String> = text
        .lines()
        .filter_map(|line| line.strip_prefix(&name))
        .map(str::to_string)
        .collect();
    if lines.iter().any(|l| l == "_count 0") {
        return lines
            .into_iter()
            .filter(|l| !l.starts_with("_bucket"))
            .collect();
    }
    lines
}

/// `obj` as last updated at `time` through the API (a `managedFields` `Update` entry, as
/// `kubectl` leaves).
fn with_update_time(mut obj: Value, time: k8s_openapi::jiff::Timestamp) -> Value {
    obj["metadata"]["managedFields"] = json!([{
        "manager": "kubectl-client-side-apply",
        "operation": "Update",
        "apiVersion": "v1",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {}},
    }]);
    obj
}

/// Starts `index`'s watches over `api`.
async fn start(index: &DiscoveryIndex, api: &FakeApi, metrics: IndexMetrics) -> Started {
    let mut watches = Watches::new(metrics.clone());
    index.watch(&mut watches);
    let source = ClusterSource::Kube(KubeSource::new(api.client(), metrics));
    watches.start(&source).await
}

/// A discovery index over `api`, once every kind's initial list is applied and every built-in
/// kind watches.
async fn start_ready(api: &FakeApi) -> (DiscoveryIndex, Started) {
    start_ready_with(api, IndexMetrics::default()).await
}

/// [`start_ready`], counting in `metrics`.
async fn start_ready_with(api: &FakeApi, metrics: IndexMetrics) -> (DiscoveryIndex, Started) {
    let index = DiscoveryIndex::new();
    let started = start(&index, api, metrics).await;
    tokio::time::timeout(TIMEOUT, started.ready().wait_for(|r| *r))
        .await
        .expect("ready after the initial lists")
        .expect("the watches own the sender");
    for (path, _, _) in RESOURCES {
        api.wait_for_watches(path, 1).await;
    }
    (index, started)
}

/// The next view published, failing the test after [`TIMEOUT`].
async fn next_view(
    rx: &mut linkerd_index::topic::Receiver<EndpointsView>,
    what: &str,
) -> Arc<EndpointsView> {
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

fn pod_names(index: &DiscoveryIndex, ip: &str) -> Vec<String> {
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

/// A Service whose port is not a number: it does not decode as a `Service`.
fn mk_bad_service(name: &str) -> Value {
    let mut svc = mk_service(name);
    svc["spec"]["ports"][0]["port"] = json!("not-a-number");
    svc
}

/// A pod whose containers are not a list: it does not decode as a `Pod`.
fn mk_bad_pod(name: &str, ip: &str) -> Value {
    let mut pod = mk_pod(name, ip);
    pod["spec"]["containers"] = json!("web");
    pod
}

/// The ServiceProfile of `service` in [`NS`].
fn mk_profile(service: &str) -> Value {
    json!({
        "apiVersion": "linkerd.io/v1alpha2",
        "kind": "ServiceProfile",
        "metadata": {"name": profile_name(service), "namespace": NS},
        "spec": {"routes": [{"name": "GET /", "condition": {"method": "GET", "pathRegex": "/"}}]},
    })
}

fn profile_name(service: &str) -> String {
    format!("{service}.{NS}.svc.cluster.local")
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
