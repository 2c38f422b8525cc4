use super::*;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{ListParams, WatchEvent, WatchParams},
    runtime::watcher,
};
use serde_json::json;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PODS: &str = "/api/v1/pods";

fn mk_pod(namespace: &str, name: &str, labels: Value, version: u64) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "labels": labels,
            "name": name,
            "namespace": namespace,
            "resourceVersion": version.to_string(),
        },
        "spec": {"containers": [{"image": "ghcr.io/example/app:1", "name": "app"}]},
    })
}

/// `count` pods over three namespaces, inserted out of order, versions 101 upwards.
fn mk_pods(count: usize) -> Vec<Value> {
    (0..count)
        .rev()
        .map(|i| {
            let labels = json!({"app": format!("app-{}", i % 4)});
            mk_pod(
                &format!("ns-{}", i % 3),
                &format!("pod-{i:02}"),
                labels,
                101 + i as u64,
            )
        })
        .collect()
}

async fn start(pods: &[Value]) -> (StaticKube, Client) {
    let mut builder = Builder::default();
    builder.serve(PODS, "v1", "Pod");
    for pod in pods {
        builder.insert(PODS, pod).unwrap();
    }
    let api = builder.start().await.unwrap();
    let url = format!("http://{}", api.addr()).parse().unwrap();
    let client = Client::try_from(kube::Config::new(url)).unwrap();
    (api, client)
}

fn keys(pods: impl IntoIterator<Item = Pod>) -> Vec<(String, String)> {
    pods.into_iter()
        .map(|p| (p.metadata.namespace.unwrap(), p.metadata.name.unwrap()))
        .collect()
}

/// Every pod of `api` matching `params`, page after page.
async fn list_all(api: &Api<Pod>, params: ListParams) -> Vec<(String, String)> {
    let mut params = params;
    let mut all = Vec::new();
    loop {
        let page = api.list(&params).await.unwrap();
        all.extend(keys(page.items));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return all,
        }
    }
}

#[tokio::test]
async fn pages_return_every_object_once_in_key_order() {
    let pods = mk_pods(23);
    let (_server, client) = start(&pods).await;
    let api = Api::<Pod>::all(client);
    let mut params = ListParams::default().limit(5);
    let mut seen = Vec::new();
    let mut remaining = Vec::new();
    loop {
        let page = api.list(&params).await.unwrap();
        assert_eq!(page.metadata.resource_version.as_deref(), Some("123"));
        assert!(page.items.len() <= 5);
        seen.extend(keys(page.items));
        remaining.push(page.metadata.remaining_item_count);
        match page.metadata.continue_ {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(remaining, [Some(18), Some(13), Some(8), Some(3), None]);
    let mut expected: Vec<(String, String)> = (0..23)
        .map(|i| (format!("ns-{}", i % 3), format!("pod-{i:02}")))
        .collect();
    expected.sort();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn kube_watchers_list_in_pages_then_watch_from_the_list_version() {
    let pods = mk_pods(23);
    let (server, client) = start(&pods).await;
    let config = watcher::Config::default().page_size(4);
    let mut events = watcher(Api::<Pod>::all(client), config).boxed();
    let mut applied = Vec::new();
    loop {
        match events.try_next().await.unwrap().unwrap() {
            watcher::Event::Init => {}
            watcher::Event::InitApply(pod) => applied.extend(keys([pod])),
            watcher::Event::InitDone => break,
            other => panic!("{other:?} before the list was done"),
        }
    }
    assert_eq!(applied.len(), 23);
    applied.dedup();
    assert_eq!(applied.len(), 23);
    let stats = server.stats();
    assert_eq!(stats.pages, 6);
    assert_eq!(stats.listed[PODS], 23);
    assert!(stats.last_page_sent.is_some());
}

#[tokio::test]
async fn label_and_field_selectors_filter() {
    let meshed = json!({"app": "a", "linkerd.io/control-plane-ns": "linkerd"});
    let pods = [
        mk_pod("ns-0", "a", meshed.clone(), 1),
        mk_pod("ns-0", "b", json!({"app": "b"}), 2),
        mk_pod(
            "ns-1",
            "c",
            json!({"app": "c", "linkerd.io/control-plane-ns": "linkerd"}),
            3,
        ),
        mk_pod("ns-1", "d", json!({}), 4),
    ];
    let (_server, client) = start(&pods).await;
    let api = Api::<Pod>::all(client);
    let names = |selector: &str, fields: &str| {
        let mut params = ListParams::default().limit(1);
        if !selector.is_empty() {
            params = params.labels(selector);
        }
        if !fields.is_empty() {
            params = params.fields(fields);
        }
        let api = api.clone();
        async move {
            list_all(&api, params)
                .await
                .into_iter()
                .map(|(_, name)| name)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(names("linkerd.io/control-plane-ns", "").await, ["a", "c"]);
    assert_eq!(names("!linkerd.io/control-plane-ns", "").await, ["b", "d"]);
    assert_eq!(
        names("linkerd.io/control-plane-ns=linkerd", "").await,
        ["a", "c"]
    );
    assert_eq!(names("app==b", "").await, ["b"]);
    assert_eq!(names("app!=b", "").await, ["a", "c", "d"]);
    assert_eq!(
        names("app in (a, b),linkerd.io/control-plane-ns", "").await,
        ["a"]
    );
    assert_eq!(names("app notin (a,c)", "").await, ["b", "d"]);
    assert_eq!(names("", "metadata.name=c").await, ["c"]);
    assert_eq!(names("app", "metadata.namespace=ns-1").await, ["c"]);

    // A page of a filtered list has no remainingItemCount: the server cannot know it.
    let page = api
        .list(&ListParams::default().labels("app").limit(1))
        .await
        .unwrap();
    assert!(page.metadata.continue_.is_some());
    assert_eq!(page.metadata.remaining_item_count, None);

    let error = api
        .list(&ListParams::default().labels("app in (a"))
        .await
        .unwrap_err();
    match error {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"))
        }
        other => panic!("expected a 400, got {other:?}"),
    }
}

#[tokio::test]
async fn the_metadata_form_has_only_metadata_and_full_items_no_type() {
    let pods = mk_pods(3);
    let (_server, client) = start(&pods).await;
    let get = |accept: &'static str| {
        let client = client.clone();
        async move {
            let request = axum::http::Request::get(format!("{PODS}?limit=2"))
                .header(header::ACCEPT, accept)
                .body(Vec::new())
                .unwrap();
            serde_json::from_str::<Value>(&client.request_text(request).await.unwrap()).unwrap()
        }
    };
    let partial = get("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").await;
    assert_eq!(partial["kind"], "PartialObjectMetadataList");
    assert_eq!(partial["apiVersion"], "meta.k8s.io/v1");
    let items = partial["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for item in items {
        let fields: Vec<&String> = item.as_object().unwrap().keys().collect();
        assert_eq!(fields, ["apiVersion", "kind", "metadata"]);
        assert_eq!(item["kind"], "PartialObjectMetadata");
        assert_eq!(item["apiVersion"], "meta.k8s.io/v1");
    }
    assert_eq!(items[0]["metadata"]["name"], "pod-00");
    assert_eq!(items[0]["metadata"]["labels"]["app"], "app-0");

    let full = get("application/json").await;
    assert_eq!(full["kind"], "PodList");
    assert_eq!(full["apiVersion"], "v1");
    let item = &full["items"][0];
    assert!(item.get("kind").is_none() && item.get("apiVersion").is_none());
    assert_eq!(item["spec"]["containers"][0]["name"], "app");

    // kube's metadata lists decode it.
    let api = Api::<Pod>::all(client);
    let listed = api.list_metadata(&ListParams::default()).await.unwrap();
    let names: Vec<_> = listed
        .items
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["pod-00", "pod-01", "pod-02"]);
}

/// The first watch event line of `GET path` (with `accept`), read from the socket as it comes.
async fn first_event_line(addr: SocketAddr, path: &str, accept: &str) -> String {
    let read = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut received = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "connection closed: {}",
                String::from_utf8_lossy(&received)
            );
            received.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&received).into_owned();
            if let Some(start) = text.find("{\"type\"")
                && let Some(len) = text[start..].find('\n')
            {
                return text[start..start + len].to_string();
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("no watch event within 10 s")
}

#[tokio::test]
async fn watches_send_type_then_object_for_objects_newer_than_their_version() {
    let pods = mk_pods(3);
    let (server, client) = start(&pods).await;
    // Versions 101..=103: a watch from 102 gets pod-02 only.
    let line = first_event_line(
        server.addr(),
        &format!("{PODS}?watch=true&resourceVersion=102"),
        "application/json",
    )
    .await;
    assert!(
        line.starts_with(
            r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"#
        ),
        "{line}"
    );
    let event: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(event["object"]["metadata"]["name"], "pod-02");
    assert_eq!(event["object"]["spec"]["containers"][0]["name"], "app");

    let line = first_event_line(
        server.addr(),
        &format!("{PODS}?watch=true&resourceVersion=102"),
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    )
    .await;
    let event: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        event["object"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["apiVersion", "kind", "metadata"]
    );
    assert_eq!(event["object"]["kind"], "PartialObjectMetadata");

    // kube decodes the events; a watch from version 0 starts with every object.
    let api = Api::<Pod>::all(client);
    let mut events = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let mut added = Vec::new();
    while added.len() < 3 {
        match events.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(pod) => added.push(pod.metadata.name.unwrap()),
            other => panic!("unexpected {other:?}"),
        }
    }
    added.sort();
    assert_eq!(added, ["pod-00", "pod-01", "pod-02"]);
    assert_eq!(server.stats().watches, 3);
}

#[tokio::test]
async fn kinds_not_served_answer_not_found() {
    let (_server, client) = start(&[]).await;
    let request = axum::http::Request::get("/apis/linkerd.io/v1alpha2/serviceprofiles?limit=500")
        .body(Vec::new())
        .unwrap();
    match client.request_text(request).await.unwrap_err() {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"))
        }
        other => panic!("expected a 404, got {other:?}"),
    }
    // A served collection without objects is an empty list, not a 404.
    let empty = Api::<Pod>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(empty.items.is_empty());
}
