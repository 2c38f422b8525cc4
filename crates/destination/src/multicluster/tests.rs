use super::*;
use crate::translate::TranslatorConfig;
use k8s_openapi::api::{
    core::v1::{Pod, Secret, Service},
    discovery::v1::EndpointSlice,
};
use linkerd_index::{ClusterStoreConfig, Event, Fed, IndexMetrics, LinkMetrics, Watches};
use serde_json::{Value, json};
use std::time::Duration;

#[path = "../../../index/tests/support/logged.rs"]
mod logged;
use logged::logged;

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn service(name: &str, labels: Value, annotations: Value) -> Service {
    typed(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "ns", "labels": labels, "annotations": annotations},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }))
}

fn pod(name: &str, ip: &str, sa: &str) -> Pod {
    typed(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": {"linkerd.io/control-plane-ns": "linkerd"}},
        "spec": {
            "serviceAccountName": sa,
            "nodeName": "node-a",
            "containers": [{"name": "linkerd-proxy", "env": [
                {"name": "LINKERD2_PROXY_INBOUND_LISTEN_ADDR", "value": "0.0.0.0:4143"},
                {"name": "LINKERD2_PROXY_ADMIN_LISTEN_ADDR", "value": "0.0.0.0:4191"},
                {"name": "LINKERD2_PROXY_CONTROL_LISTEN_ADDR", "value": "0.0.0.0:4190"},
            ]}],
        },
        "status": {"phase": "Running", "podIPs": [{"ip": ip}]},
    }))
}

/// A slice of `svc` with one endpoint per `(pod, ip)`.
fn slice(svc: &str, endpoints: &[(&str, &str)]) -> EndpointSlice {
    typed(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": svc, "namespace": "ns", "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": endpoints.iter().map(|(pod, ip)| json!({
            "addresses": [ip],
            "conditions": {"ready": true},
            "targetRef": {"kind": "Pod", "name": pod, "namespace": "ns"},
        })).collect::<Vec<_>>(),
    }))
}

fn info(svc: &Service) -> ServiceInfo {
    let value = serde_json::to_value(svc).unwrap();
    linkerd_index::model::decode_value::<Service>(&value).unwrap()
}

fn config() -> TranslatorConfig {
    TranslatorConfig {
        controller_namespace: "linkerd".into(),
        trust_domain: "cluster.local".into(),
        enable_h2_upgrade: true,
        default_opaque_ports: Default::default(),
        meshed_http2_params: None,
        force_opaque_transport: false,
        ext_endpoint_zone_weights: false,
    }
}

fn local_index() -> Fed<DiscoveryIndex> {
    Fed::new(
        DiscoveryIndex::new(),
        DiscoveryIndex::watch,
        IndexMetrics::default(),
    )
}

fn stream(index: &Fed<DiscoveryIndex>, store: &ClusterStore, name: &str) -> MulticlusterStream {
    let own = index.endpoints(EndpointsKey {
        service: ObjectRef {
            namespace: "ns".into(),
            name: name.into(),
        },
        port: 80,
        hostname: None,
    });
    MulticlusterStream::new(
        own,
        store,
        index.index().clone(),
        Arc::new(EndpointTranslator::new(config())),
        Request {
            namespace: "ns".into(),
            service: name.into(),
            port: 80,
            hostname: None,
            filter: StreamFilter::default(),
        },
        Counter::default(),
    )
}

/// `(kind, sorted addresses)` of each update.
fn summary(updates: &[Update]) -> Vec<(&'static str, Vec<String>)> {
    updates
        .iter()
        .map(|u| match u.update.as_ref().unwrap() {
            update::Update::Add(set) => {
                let mut addrs: Vec<String> = set
                    .addrs
                    .iter()
                    .map(|a| SocketAddr::try_from(a.addr.unwrap()).unwrap().to_string())
                    .collect();
                addrs.sort();
                ("add", addrs)
            }
            update::Update::Remove(set) => {
                let mut addrs: Vec<String> = set
                    .addrs
                    .iter()
                    .map(|a| SocketAddr::try_from(*a).unwrap().to_string())
                    .collect();
                addrs.sort();
                ("remove", addrs)
            }
            update::Update::NoEndpoints(n) => ("no-endpoints", vec![n.exists.to_string()]),
        })
        .collect()
}

/// Linked cluster `east` (trust domain `east.example`), served from a state directory holding
/// `docs`, and the watches that deliver its link Secret.
struct East {
    dir: tempfile::TempDir,
    watches: Watches,
    store: ClusterStore,
    link_metrics: LinkMetrics,
    secret: Secret,
}

/// Links `east`, its state directory holding `docs`, and waits until it is linked.
async fn link_east(docs: Vec<Value>) -> East {
    let dir = tempfile::tempdir().unwrap();
    write_east(&dir, docs);
    let mut watches = Watches::new(IndexMetrics::default());
    let link_metrics = LinkMetrics::default();
    let store = ClusterStore::watch(
        &mut watches,
        ClusterStoreConfig {
            namespace: "linkerd".into(),
            offline: [("east".to_string(), dir.path().to_path_buf())].into(),
            ..ClusterStoreConfig::default()
        },
        IndexMetrics::default(),
        link_metrics.clone(),
    );
    let secret: Secret = typed(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": "east-link", "namespace": "linkerd",
            "labels": {"multicluster.linkerd.io/cluster-name": "east"},
            "annotations": {
                "multicluster.linkerd.io/trust-domain": "east.example",
                "multicluster.linkerd.io/cluster-domain": "cluster.local",
            },
        },
        "type": "mirror.linkerd.io/remote-kubeconfig",
        "data": {"kubeconfig": "YXBpVmVyc2lvbjogdjEK"},
    }));
    watches.apply(Event::Apply(secret.clone()));
    let mut clusters = store.clusters();
    tokio::time::timeout(
        Duration::from_secs(10),
        clusters.wait_for(|c| c.contains_key("east")),
    )
    .await
    .unwrap()
    .unwrap();
    East {
        dir,
        watches,
        store,
        link_metrics,
        secret,
    }
}

/// Writes east's state: `docs` as one List.
fn write_east(dir: &tempfile::TempDir, docs: Vec<Value>) {
    let text =
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": docs})).unwrap();
    let staging = dir.path().join(".state.json.tmp");
    std::fs::write(&staging, text).unwrap();
    std::fs::rename(staging, dir.path().join("state.json")).unwrap();
}

async fn next(stream: &mut MulticlusterStream) -> Option<Vec<Update>> {
    tokio::time::timeout(Duration::from_secs(10), stream.next_updates())
        .await
        .expect("updates in time")
}

#[test]
fn dispatch_follows_the_labels_and_annotations() {
    let plain = service("web", json!({}), json!({}));
    assert_eq!(Dispatch::of(&info(&plain)), Dispatch::Local);

    let mirror = service(
        "web-east",
        json!({REMOTE_DISCOVERY_LABEL: "east", REMOTE_SERVICE_LABEL: "web"}),
        json!({}),
    );
    assert_eq!(
        Dispatch::of(&info(&mirror)),
        Dispatch::Remote {
            cluster: "east".into(),
            service: "web".into()
        }
    );
    let half = service("half", json!({REMOTE_DISCOVERY_LABEL: "east"}), json!({}));
    assert_eq!(
        Dispatch::of(&info(&half)),
        Dispatch::RemoteWithoutService {
            cluster: "east".into()
        }
    );

    // Entries need exactly one `@`; nothing is trimmed; empty entries are skipped.
    let federated = service(
        "web-federated",
        json!({REMOTE_DISCOVERY_LABEL: "east", REMOTE_SERVICE_LABEL: "web"}),
        json!({
            REMOTE_DISCOVERY_ANNOTATION: "web@west,bad,a@b@c,,@east, web@east,web@east",
            LOCAL_DISCOVERY_ANNOTATION: "web",
        }),
    );
    let member = |cluster: Option<&str>, service: &str| Member {
        cluster: cluster.map(str::to_string),
        service: service.into(),
    };
    assert_eq!(
        Dispatch::of(&info(&federated)),
        Dispatch::Federated(vec![
            member(None, "web"),
            member(Some("east"), " web"),
            member(Some("east"), "web"),
            member(Some("west"), "web"),
        ])
    );
    // Either annotation, even empty, makes a Service federated.
    let empty = service("e", json!({}), json!({LOCAL_DISCOVERY_ANNOTATION: ""}));
    assert_eq!(Dispatch::of(&info(&empty)), Dispatch::Federated(vec![]));
    let remote_only = service("r", json!({}), json!({REMOTE_DISCOVERY_ANNOTATION: ""}));
    let unrelated = service("u", json!({REMOTE_SERVICE_LABEL: "web"}), json!({"x": "y"}));
    for svc in [
        &plain,
        &mirror,
        &half,
        &federated,
        &empty,
        &remote_only,
        &unrelated,
    ] {
        let svc = info(svc);
        assert_eq!(
            Dispatch::is_multicluster(&svc),
            Dispatch::of(&svc) != Dispatch::Local,
            "{}",
            svc.name
        );
    }
}

/// Tester finding: `" web-svc@east"` was taken as Service `" web-svc"` without a word. Entries
/// stay untrimmed (upstream parity), but one with whitespace is logged, with the Service and
/// the entry, once per annotation value, as an invalid entry is.
#[test]
fn an_entry_with_whitespace_is_kept_and_logged_once_per_annotation_value() {
    let annotated = |value: &str| {
        info(&service(
            "web-spaced",
            json!({}),
            json!({REMOTE_DISCOVERY_ANNOTATION: value}),
        ))
    };
    let spaced = annotated("web-svc@east, web-svc@east,web@we st,bad");
    let (dispatch, text) = logged(|| Dispatch::of(&spaced));
    let member = |cluster: &str, service: &str| Member {
        cluster: Some(cluster.into()),
        service: service.into(),
    };
    assert_eq!(
        dispatch,
        Dispatch::Federated(vec![
            member("east", " web-svc"),
            member("east", "web-svc"),
            member("we st", "web"),
        ])
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].contains("ignoring invalid multicluster.linkerd.io/remote-discovery entry")
            && lines[0].contains("service=ns/web-spaced entry=bad"),
        "{text}"
    );
    for (line, entry) in lines[1..]
        .iter()
        .zip([r#"" web-svc@east""#, r#""web@we st""#])
    {
        assert!(
            line.contains(" WARN ")
                && line.contains("entry has whitespace in its service or cluster")
                && line.contains(&format!("service=ns/web-spaced entry={entry}")),
            "{text}"
        );
    }

    // The same value again (another stream, another wake): nothing more.
    let (again, text) = logged(|| Dispatch::of(&spaced));
    assert_eq!(again, dispatch);
    assert_eq!(text, "");
    // A new value is logged; a value without problems is not.
    let (_, text) = logged(|| Dispatch::of(&annotated("web@ east")));
    assert!(text.contains(r#"entry="web@ east""#), "{text}");
    let (_, text) = logged(|| Dispatch::of(&annotated("web@east")));
    assert_eq!(text, "");
}

#[tokio::test]
async fn a_federated_service_follows_its_local_members_live() {
    let index = local_index();
    for (name, ip, sa) in [("web-0", "10.1.0.1", "web"), ("api-0", "10.1.0.2", "api")] {
        index.apply(Event::Apply(pod(name, ip, sa)));
    }
    index.apply(Event::Apply(service("web", json!({}), json!({}))));
    index.apply(Event::Apply(service("api", json!({}), json!({}))));
    index.apply(Event::Apply(slice("web", &[("web-0", "10.1.0.1")])));
    index.apply(Event::Apply(slice("api", &[("api-0", "10.1.0.2")])));
    let federated = |annotations: Value| service("fed", json!({}), annotations);
    index.apply(Event::Apply(federated(
        json!({LOCAL_DISCOVERY_ANNOTATION: "web"}),
    )));

    let store = ClusterStore::empty();
    let mut s = stream(&index, &store, "fed");
    let first = next(&mut s).await.unwrap();
    assert_eq!(summary(&first), [("add", vec!["10.1.0.1:8080".into()])]);
    assert_eq!(s.held(), 1);

    // The local member changes to api: its endpoint in, web's out.
    index.apply(Event::Apply(federated(
        json!({LOCAL_DISCOVERY_ANNOTATION: "api"}),
    )));
    let changed = next(&mut s).await.unwrap();
    assert_eq!(
        summary(&changed),
        [
            ("add", vec!["10.1.0.2:8080".into()]),
            ("remove", vec!["10.1.0.1:8080".into()])
        ]
    );

    // A member in a cluster that is not linked has no endpoints; when no member has any,
    // NoEndpoints says so.
    index.apply(Event::Apply(federated(
        json!({LOCAL_DISCOVERY_ANNOTATION: "", REMOTE_DISCOVERY_ANNOTATION: "web@east"}),
    )));
    let emptied = next(&mut s).await.unwrap();
    assert_eq!(
        summary(&emptied),
        [
            ("remove", vec!["10.1.0.2:8080".into()]),
            ("no-endpoints", vec!["true".into()])
        ]
    );
    assert_eq!(s.held(), 0);

    // No longer federated: the stream ends.
    index.apply(Event::Apply(federated(json!({}))));
    assert!(next(&mut s).await.is_none());
}

#[tokio::test]
async fn remote_members_come_from_the_linked_cluster_in_its_trust_domain() {
    // East's state directory: web with one pod.
    let East {
        dir: _dir,
        watches,
        store,
        link_metrics,
        secret,
    } = link_east(vec![
        serde_json::to_value(pod("web-0", "10.2.0.1", "web")).unwrap(),
        serde_json::to_value(service("web", json!({}), json!({}))).unwrap(),
        serde_json::to_value(slice("web", &[("web-0", "10.2.0.1")])).unwrap(),
    ])
    .await;

    // Local: a web pod, and a federated Service of the local and east web.
    let index = local_index();
    index.apply(Event::Apply(pod("web-0", "10.1.0.1", "web")));
    index.apply(Event::Apply(service("web", json!({}), json!({}))));
    index.apply(Event::Apply(slice("web", &[("web-0", "10.1.0.1")])));
    index.apply(Event::Apply(service(
        "fed",
        json!({}),
        json!({LOCAL_DISCOVERY_ANNOTATION: "web", REMOTE_DISCOVERY_ANNOTATION: "web@east"}),
    )));

    let mut s = stream(&index, &store, "fed");
    let first = next(&mut s).await.unwrap();
    assert_eq!(
        summary(&first),
        [
            ("add", vec!["10.1.0.1:8080".into()]),
            ("add", vec!["10.2.0.1:8080".into()])
        ]
    );
    let identity = |u: &Update| match u.update.as_ref().unwrap() {
        update::Update::Add(set) => format!("{:?}", set.addrs[0].tls_identity),
        other => panic!("{other:?}"),
    };
    assert!(identity(&first[0]).contains("web.ns.serviceaccount.identity.linkerd.cluster.local"));
    assert!(identity(&first[1]).contains("web.ns.serviceaccount.identity.linkerd.east.example"));

    // The link goes: east's endpoint is removed, the local one stays.
    watches.apply(Event::<Secret>::Delete(ObjectRef {
        namespace: "linkerd".into(),
        name: "east-link".into(),
    }));
    let unlinked = next(&mut s).await.unwrap();
    assert_eq!(
        summary(&unlinked),
        [("remove", vec!["10.2.0.1:8080".into()])]
    );

    // It comes back: so does east's endpoint.
    watches.apply(Event::Apply(secret));
    let relinked = next(&mut s).await.unwrap();
    assert_eq!(summary(&relinked), [("add", vec!["10.2.0.1:8080".into()])]);
    assert_eq!(link_metrics.errors("no_kubeconfig"), 0);
}

#[tokio::test]
async fn an_address_that_passes_to_another_member_is_added_again_not_removed() {
    // East's web has the local web's address (flat networks can overlap in a test).
    let East {
        dir: _dir,
        watches: _watches,
        store,
        ..
    } = link_east(vec![
        serde_json::to_value(pod("web-0", "10.1.0.1", "web")).unwrap(),
        serde_json::to_value(service("web", json!({}), json!({}))).unwrap(),
        serde_json::to_value(slice("web", &[("web-0", "10.1.0.1")])).unwrap(),
    ])
    .await;

    let index = local_index();
    index.apply(Event::Apply(pod("web-0", "10.1.0.1", "web")));
    index.apply(Event::Apply(service("web", json!({}), json!({}))));
    index.apply(Event::Apply(slice("web", &[("web-0", "10.1.0.1")])));
    let federated = |annotations: Value| service("fed", json!({}), annotations);
    index.apply(Event::Apply(federated(
        json!({LOCAL_DISCOVERY_ANNOTATION: "web", REMOTE_DISCOVERY_ANNOTATION: "web@east"}),
    )));

    // The local member comes first and wins the address.
    let mut s = stream(&index, &store, "fed");
    let first = next(&mut s).await.unwrap();
    assert_eq!(summary(&first), [("add", vec!["10.1.0.1:8080".into()])]);
    let Some(update::Update::Add(set)) = &first[0].update else {
        panic!("{first:?}")
    };
    assert_eq!(set.metric_labels.get(TARGET_CLUSTER_LABEL), None);
    assert_eq!(s.held(), 1);

    // The local member dropped: east's endpoint at that address replaces it (an Add in east's
    // trust domain, no Remove).
    index.apply(Event::Apply(federated(
        json!({REMOTE_DISCOVERY_ANNOTATION: "web@east"}),
    )));
    let passed = next(&mut s).await.unwrap();
    assert_eq!(summary(&passed), [("add", vec!["10.1.0.1:8080".into()])]);
    let Some(update::Update::Add(set)) = &passed[0].update else {
        panic!("{passed:?}")
    };
    assert_eq!(set.metric_labels[TARGET_CLUSTER_LABEL], "east");
    assert!(
        format!("{:?}", set.addrs[0].tls_identity)
            .contains("web.ns.serviceaccount.identity.linkerd.east.example")
    );
    assert_eq!(s.held(), 1);
}

/// A remote-discovery Service stands for one Service of a linked cluster: `NoEndpoints` says
/// whether that one exists, as upstream's remote watcher does (newcomer finding: it said
/// `exists: true` for a remote Service that did not exist, the mirror's own existence), and
/// says it again when that changes.
#[tokio::test]
async fn a_remote_discovery_service_exists_when_its_remote_service_does() {
    let east = link_east(vec![
        serde_json::to_value(pod("web-0", "10.2.0.1", "web")).unwrap(),
        serde_json::to_value(service("web", json!({}), json!({}))).unwrap(),
        serde_json::to_value(slice("web", &[("web-0", "10.2.0.1")])).unwrap(),
    ])
    .await;
    let index = local_index();
    let mirror = |name: &str, remote: &str| {
        service(
            name,
            json!({REMOTE_DISCOVERY_LABEL: "east", REMOTE_SERVICE_LABEL: remote}),
            json!({}),
        )
    };
    index.apply(Event::Apply(mirror("nope-east", "nope")));
    index.apply(Event::Apply(mirror("web-east", "web")));

    let mut missing = stream(&index, &east.store, "nope-east");
    let first = next(&mut missing).await.unwrap();
    assert_eq!(summary(&first), [("no-endpoints", vec!["false".into()])]);
    assert!(!missing.exists());
    let mut web = stream(&index, &east.store, "web-east");
    let first = next(&mut web).await.unwrap();
    assert_eq!(summary(&first), [("add", vec!["10.2.0.1:8080".into()])]);
    assert!(web.exists());

    // `nope` is created in east, without endpoints: it exists now.
    write_east(
        &east.dir,
        vec![
            serde_json::to_value(pod("web-0", "10.2.0.1", "web")).unwrap(),
            serde_json::to_value(service("web", json!({}), json!({}))).unwrap(),
            serde_json::to_value(slice("web", &[("web-0", "10.2.0.1")])).unwrap(),
            serde_json::to_value(service("nope", json!({}), json!({}))).unwrap(),
        ],
    );
    let created = next(&mut missing).await.unwrap();
    assert_eq!(summary(&created), [("no-endpoints", vec!["true".into()])]);
    assert!(missing.exists());
}

/// Waits until `behind` says `want` (a link's change reaches the cluster store in a task).
async fn wait_behind(behind: &impl Fn() -> bool, want: bool) {
    for _ in 0..1000 {
        if behind() == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("behind never became {want}");
}

/// The introspection API's question, asked of the stream ([`MulticlusterStream::behind`]):
/// behind while its Service's topic, a member's topic or the linked clusters hold a newer view
/// than the updates its client was handed came from; a change with nothing to send is taken
/// as handed.
#[tokio::test]
async fn a_stream_is_behind_until_its_client_is_handed_each_topics_newest_view() {
    let East {
        dir: _dir,
        watches,
        store,
        secret,
        ..
    } = link_east(vec![
        serde_json::to_value(pod("web-0", "10.2.0.1", "web")).unwrap(),
        serde_json::to_value(service("web", json!({}), json!({}))).unwrap(),
        serde_json::to_value(slice("web", &[("web-0", "10.2.0.1")])).unwrap(),
    ])
    .await;
    let index = local_index();
    index.apply(Event::Apply(pod("web-0", "10.1.0.1", "web")));
    index.apply(Event::Apply(pod("web-1", "10.1.0.2", "web")));
    index.apply(Event::Apply(service("web", json!({}), json!({}))));
    index.apply(Event::Apply(slice("web", &[("web-0", "10.1.0.1")])));
    let federated = |labels: Value| {
        service(
            "fed",
            labels,
            json!({LOCAL_DISCOVERY_ANNOTATION: "web", REMOTE_DISCOVERY_ANNOTATION: "web@east"}),
        )
    };
    index.apply(Event::Apply(federated(json!({}))));

    let mut s = stream(&index, &store, "fed");
    let behind = s.behind();
    assert!(behind(), "nothing sent yet");
    let first = next(&mut s).await.unwrap();
    assert_eq!(first.len(), 2);
    assert!(behind(), "the first updates are not handed yet");
    s.handed();
    assert!(!behind());

    // The local member changes: behind at once, until its updates are handed.
    index.apply(Event::Apply(slice(
        "web",
        &[("web-0", "10.1.0.1"), ("web-1", "10.1.0.2")],
    )));
    assert!(behind());
    let added = next(&mut s).await.unwrap();
    assert_eq!(summary(&added), [("add", vec!["10.1.0.2:8080".into()])]);
    assert!(behind());
    s.handed();
    assert!(!behind());

    // The link goes: the cluster list is newer than what the client holds.
    watches.apply(Event::<Secret>::Delete(ObjectRef {
        namespace: "linkerd".into(),
        name: "east-link".into(),
    }));
    wait_behind(&behind, true).await;
    let unlinked = next(&mut s).await.unwrap();
    assert_eq!(
        summary(&unlinked),
        [("remove", vec!["10.2.0.1:8080".into()])]
    );
    s.handed();
    assert!(!behind());

    // A label of the Service's own changes its topic's view and sends nothing: taken as
    // handed once the stream sees it (it then waits for the next change).
    index.apply(Event::Apply(federated(json!({"team": "a"}))));
    assert!(behind());
    let quiet = tokio::time::timeout(Duration::from_millis(200), s.next_updates()).await;
    assert!(quiet.is_err(), "nothing to send: {quiet:?}");
    assert!(!behind());

    // One while updates are not yet handed leaves the stream behind until they are.
    watches.apply(Event::Apply(secret));
    wait_behind(&behind, true).await;
    let relinked = next(&mut s).await.unwrap();
    assert_eq!(summary(&relinked), [("add", vec!["10.2.0.1:8080".into()])]);
    index.apply(Event::Apply(federated(json!({"team": "b"}))));
    let quiet = tokio::time::timeout(Duration::from_millis(200), s.next_updates()).await;
    assert!(quiet.is_err(), "nothing to send: {quiet:?}");
    assert!(behind());
    s.handed();
    assert!(!behind());
}
