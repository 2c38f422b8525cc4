//! Inbound policy views over the fixture snapshots (fixtures/README.md inbound facts 11–20),
//! fed by the offline source as the policy controller is.

use linkerd_index::{
    ClusterSource, IndexMetrics, Watches,
    inbound::{
        AuthorizationRef, ClientAuthentication, DefaultPolicy, IdentityMatch, InboundConfig,
        InboundIndex, InboundProtocol, InboundServer, RouteRef, ServerRef, WorkloadRef,
    },
    source::offline::OfflineSource,
};

mod support;

type Index = InboundIndex;
use std::{path::Path, time::Duration};

fn config() -> InboundConfig {
    InboundConfig {
        cluster_networks: "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8"
            .split(',')
            .map(|n| n.parse().unwrap())
            .collect(),
        default_policy: DefaultPolicy::AllUnauthenticated,
        probe_networks: vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()],
        identity_domain: "cluster.local".into(),
        control_plane_namespace: "linkerd".into(),
        compute_route_acceptance: false,
    }
}

async fn index(fixture: &str) -> Index {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(fixture);
    let metrics = IndexMetrics::default();
    let index = InboundIndex::new(config(), metrics.clone());
    let mut watches = Watches::new(metrics.clone());
    index.watch(&mut watches);
    let source = OfflineSource::new(&dir, metrics).unwrap();
    let started = watches.start(&ClusterSource::Offline(source)).await;
    let mut ready = started.ready();
    tokio::time::timeout(Duration::from_secs(10), ready.wait_for(|r| *r))
        .await
        .unwrap()
        .unwrap();
    index
}

fn pod(ns: &str, name: &str) -> WorkloadRef {
    WorkloadRef::Pod {
        namespace: ns.into(),
        name: name.into(),
    }
}

fn server(index: &Index, workload: WorkloadRef, port: u16) -> InboundServer {
    (**index.inbound_server(workload, port).unwrap().borrow()).clone()
}

fn authz_names(s: &InboundServer) -> Vec<AuthorizationRef> {
    s.authorizations.keys().cloned().collect()
}

fn identities(s: &InboundServer, key: &AuthorizationRef) -> Vec<IdentityMatch> {
    match &s.authorizations[key].authentication {
        ClientAuthentication::TlsAuthenticated(ids) => ids.clone(),
        other => panic!("{key:?}: {other:?}"),
    }
}

#[tokio::test]
async fn emojivoto_voting_emoji_web_and_vote_bot() {
    let index = index("emojivoto").await;
    let voting = server(&index, pod("emojivoto", "voting-qbtpmtmk74-gdg57"), 8080);
    assert_eq!(voting.reference, ServerRef::Server("voting-grpc".into()));
    assert_eq!(voting.protocol, InboundProtocol::Grpc);
    let policy = AuthorizationRef::AuthorizationPolicy("voting-policy".into());
    assert_eq!(authz_names(&voting), std::slice::from_ref(&policy));
    assert_eq!(
        identities(&voting, &policy),
        [IdentityMatch::Exact(
            "web.emojivoto.serviceaccount.identity.linkerd.cluster.local".into()
        )]
    );
    assert_eq!(voting.grpc_routes.len(), 1);
    assert_eq!(
        voting.grpc_routes[0].reference,
        RouteRef::Default("default".into())
    );

    let emoji = server(&index, pod("emojivoto", "emoji-mtw779t9cd-l9grp"), 8080);
    assert_eq!(emoji.reference, ServerRef::Server("emoji-grpc".into()));
    let sa = AuthorizationRef::AuthorizationPolicy("emoji-grpc".into());
    assert_eq!(
        identities(&emoji, &sa),
        [IdentityMatch::Exact(
            "web.emojivoto.serviceaccount.identity.linkerd.cluster.local".into()
        )]
    );

    let web = server(&index, pod("emojivoto", "web-djjwbqr6lt-sfd7g"), 8080);
    assert_eq!(web.reference, ServerRef::Server("web-http".into()));
    assert_eq!(web.protocol, InboundProtocol::Http1);
    assert!(web.authorizations.is_empty(), "{:?}", web.authorizations);
    let routes: Vec<_> = web
        .http_routes
        .iter()
        .map(|r| r.reference.clone())
        .collect();
    assert_eq!(routes.len(), 2, "{routes:?}");
    let api = web
        .http_routes
        .iter()
        .find(|r| matches!(&r.reference, RouteRef::Resource { name, .. } if name == "web-api"))
        .unwrap();
    let api_authz = AuthorizationRef::AuthorizationPolicy("web-api".into());
    let mut ids = match &api.authorizations[&api_authz].authentication {
        ClientAuthentication::TlsAuthenticated(ids) => ids.clone(),
        other => panic!("{other:?}"),
    };
    ids.sort();
    assert_eq!(
        ids,
        [
            IdentityMatch::Exact(
                "default.emojivoto.serviceaccount.identity.linkerd.cluster.local".into()
            ),
            IdentityMatch::Suffix(
                [
                    "ingress-nginx",
                    "serviceaccount",
                    "identity",
                    "linkerd",
                    "cluster",
                    "local"
                ]
                .map(String::from)
                .to_vec()
            ),
        ]
    );
    let prom = server(&index, pod("emojivoto", "voting-qbtpmtmk74-gdg57"), 8801);
    assert_eq!(prom.reference, ServerRef::Server("prom".into()));

    let bot = server(&index, pod("emojivoto", "vote-bot-rqpvjbjnqz-x2xgd"), 8080);
    assert_eq!(
        bot.reference,
        ServerRef::Default("all-unauthenticated".into())
    );
    assert_eq!(
        bot.protocol,
        InboundProtocol::Detect {
            timeout: Duration::from_secs(10)
        }
    );
    assert_eq!(
        authz_names(&bot),
        [AuthorizationRef::Default("all-unauthenticated".into())]
    );
    assert_eq!(
        bot.http_routes[0].reference,
        RouteRef::Default("default".into())
    );
}

#[tokio::test]
async fn edge_cases_access_policies_and_namespace_defaults() {
    let index = index("edge-cases").await;
    let mq = pod("edge", "mq-gcg6dfjpp9-7cttk");
    let mgmt = server(&index, mq.clone(), 15672);
    assert_eq!(mgmt.reference, ServerRef::Server("mq-mgmt".into()));
    assert_eq!(
        authz_names(&mgmt),
        [AuthorizationRef::AuthorizationPolicy("mq-mgmt-ops".into())]
    );
    let amqp = server(&index, mq, 5672);
    assert_eq!(
        amqp.protocol,
        InboundProtocol::Opaque,
        "named opaque port (fact 20)"
    );

    let v1 = pod("edge", "polyglot-v1-grjkrcnckn-r5hsv");
    let web = server(&index, v1.clone(), 8080);
    assert_eq!(web.reference, ServerRef::Server("polyglot-web".into()));
    assert_eq!(
        authz_names(&web),
        [AuthorizationRef::Default("audit".into())]
    );
    assert!(matches!(
        server(&index, v1, 9090).reference,
        ServerRef::Default(_)
    ));
    let v2 = pod("edge", "polyglot-v2-dtgqqnqtg9-bj4tv");
    assert_eq!(
        server(&index, v2, 9090).reference,
        ServerRef::Server("polyglot-web".into())
    );

    let ew = WorkloadRef::ExternalWorkload {
        namespace: "edge".into(),
        name: "payments-vm-01".into(),
    };
    let payments = server(&index, ew, 8080);
    assert_eq!(
        payments.reference,
        ServerRef::Server("payments-http".into())
    );
    assert_eq!(
        authz_names(&payments),
        [AuthorizationRef::Default("all-authenticated".into())]
    );

    let later = server(&index, pod("edge-strict", "secrets-xxhtpp88r6-4qps2"), 9102);
    assert_eq!(
        later.reference,
        ServerRef::Default("cluster-authenticated".into())
    );
    let earlier = server(&index, pod("edge-strict", "secrets-xxhtpp88r6-ls5mh"), 9102);
    assert_eq!(
        earlier.reference,
        ServerRef::Default("all-unauthenticated".into())
    );
    let api = server(&index, pod("edge-strict", "secrets-xxhtpp88r6-ls5mh"), 8200);
    assert_eq!(api.reference, ServerRef::Server("secrets-api".into()));
    assert_eq!(api.protocol, InboundProtocol::Opaque);
    let key = AuthorizationRef::AuthorizationPolicy("secrets-api".into());
    assert_eq!(
        identities(&api, &key),
        [IdentityMatch::Exact(
            "billing.edge.serviceaccount.identity.linkerd.cluster.local".into()
        )]
    );
}

// === updates, driven by events applied directly ===

mod updates {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use linkerd_index::Event;
    use linkerd_k8s_api::{AuthorizationPolicy, MeshTlsAuthentication, Server};
    use serde_json::{Value, json};

    fn decode<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn mk_pod(labels: Value) -> Pod {
        decode(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "ns", "labels": labels},
            "spec": {"containers": [{"name": "app", "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": "10.1.0.1"},
        }))
    }

    fn meshed(app: &str) -> Value {
        json!({"app": app, "linkerd.io/control-plane-ns": "linkerd"})
    }

    fn mk_server(name: &str, created: &str, port: Value) -> Server {
        decode(json!({
            "apiVersion": "policy.linkerd.io/v1beta3", "kind": "Server",
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
            "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "port": port, "proxyProtocol": "HTTP/1"},
        }))
    }

    fn mk_policy(name: &str, server: &str) -> AuthorizationPolicy {
        decode(json!({
            "apiVersion": "policy.linkerd.io/v1alpha1", "kind": "AuthorizationPolicy",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "targetRef": {"group": "policy.linkerd.io", "kind": "Server", "name": server},
                "requiredAuthenticationRefs": [{"group": "policy.linkerd.io", "kind": "MeshTLSAuthentication", "name": "clients"}],
            },
        }))
    }

    fn mk_mtls(identities: &[&str]) -> MeshTlsAuthentication {
        decode(json!({
            "apiVersion": "policy.linkerd.io/v1alpha1", "kind": "MeshTLSAuthentication",
            "metadata": {"name": "clients", "namespace": "ns"},
            "spec": {"identities": identities},
        }))
    }

    fn start() -> support::Fed<InboundIndex> {
        let index = support::Fed::new(
            InboundIndex::new(config(), IndexMetrics::default()),
            InboundIndex::watch,
            IndexMetrics::default(),
        );
        index.apply(Event::Reset(vec![mk_pod(meshed("web"))]));
        index.apply(Event::<Server>::Reset(vec![]));
        index
    }

    fn current(rx: &mut linkerd_index::topic::Receiver<InboundServer>) -> InboundServer {
        (**rx.borrow_and_update()).clone()
    }

    #[tokio::test]
    async fn server_created_over_a_defaulted_port_then_relabelled_out() {
        let index = start();
        let mut rx = index.inbound_server(pod("ns", "web-0"), 8080).unwrap();
        assert_eq!(
            current(&mut rx).reference,
            ServerRef::Default("all-unauthenticated".into())
        );

        index.apply(Event::Apply(mk_server(
            "web-http",
            "2026-01-02T00:00:00Z",
            json!("http"),
        )));
        assert!(rx.has_changed().unwrap());
        let s = current(&mut rx);
        assert_eq!(s.reference, ServerRef::Server("web-http".into()));
        assert_eq!(s.protocol, InboundProtocol::Http1);
        assert!(
            s.authorizations.is_empty(),
            "deny: no default authorization"
        );

        // The pod is relabelled out of the Server's selector: back to the default.
        index.apply(Event::Apply(mk_pod(meshed("other"))));
        assert_eq!(
            current(&mut rx).reference,
            ServerRef::Default("all-unauthenticated".into())
        );
    }

    #[tokio::test]
    async fn oldest_server_wins_a_port_then_the_name() {
        let index = start();
        index.apply(Event::Apply(mk_server(
            "b-newer",
            "2026-01-03T00:00:00Z",
            json!(8080),
        )));
        index.apply(Event::Apply(mk_server(
            "z-older",
            "2026-01-01T00:00:00Z",
            json!("http"),
        )));
        let mut rx = index.inbound_server(pod("ns", "web-0"), 8080).unwrap();
        assert_eq!(
            current(&mut rx).reference,
            ServerRef::Server("z-older".into())
        );
        // Same creation time: the name decides, whatever the order of arrival.
        index.apply(Event::Apply(mk_server(
            "a-tied",
            "2026-01-01T00:00:00Z",
            json!(8080),
        )));
        assert_eq!(
            current(&mut rx).reference,
            ServerRef::Server("a-tied".into())
        );
        index.delete(&mk_server("a-tied", "2026-01-01T00:00:00Z", json!(8080)));
        assert_eq!(
            current(&mut rx).reference,
            ServerRef::Server("z-older".into())
        );
    }

    /// A Server with both selectors, or neither, is skipped with the policy webhook's reason
    /// (tester finding: offline mode served one with both, which the webhook refuses, to pods).
    #[tokio::test]
    async fn a_server_needs_exactly_one_selector() {
        let index = start();
        let selector = json!({"matchLabels": {"app": "web"}});
        let (both, log) = support::logged(|| {
            let mut server =
                serde_json::to_value(mk_server("both", "2026-01-01T00:00:00Z", json!(8080)))
                    .unwrap();
            server["spec"]["externalWorkloadSelector"] = selector.clone();
            index.apply_json::<Server>(&server.to_string())
        });
        assert!(both.unwrap_err().to_string().contains(
            "a Server must have exactly one of spec.podSelector and spec.externalWorkloadSelector"
        ),);
        assert!(log.is_empty(), "{log}");
        let mut neither =
            serde_json::to_value(mk_server("neither", "2026-01-01T00:00:00Z", json!(8080)))
                .unwrap();
        neither["spec"]
            .as_object_mut()
            .unwrap()
            .remove("podSelector");
        assert!(index.apply_json::<Server>(&neither.to_string()).is_err());
        let mut rx = index.inbound_server(pod("ns", "web-0"), 8080).unwrap();
        assert_eq!(
            current(&mut rx).reference,
            ServerRef::Default("all-unauthenticated".into())
        );
        // Through the typed path, as a source delivers it: logged and counted, not served.
        let metrics = IndexMetrics::default();
        let fed = support::Fed::new(
            InboundIndex::new(config(), metrics.clone()),
            InboundIndex::watch,
            metrics.clone(),
        );
        fed.apply(Event::Reset(vec![mk_pod(meshed("web"))]));
        let mut server = mk_server("both", "2026-01-01T00:00:00Z", json!(8080));
        server.spec.external_workload_selector = server.spec.pod_selector.clone();
        let (_, log) = support::logged(|| fed.apply(Event::<Server>::Reset(vec![server])));
        assert!(log.contains("exactly one of spec.podSelector"), "{log}");
        assert_eq!(metrics.invalid_objects("Server"), 1);
        let mut rx = fed.inbound_server(pod("ns", "web-0"), 8080).unwrap();
        assert_eq!(
            current(&mut rx).reference,
            ServerRef::Default("all-unauthenticated".into())
        );
    }

    /// Creation times are compared as times, not as text (tester finding: a hand-written
    /// `creationTimestamp` with a fraction of a second sorted before the whole second it
    /// follows, as `.` sorts before `Z`, so the newer Server won the port).
    #[tokio::test]
    async fn the_oldest_server_wins_whatever_the_timestamps_precision() {
        let index = start();
        // As JSON text, as a source reads it: a typed Server is written out to the second.
        let apply = |name: &str, created: &str| {
            let mut server = serde_json::to_value(mk_server(name, created, json!(8080))).unwrap();
            server["metadata"]["creationTimestamp"] = created.into();
            index.apply_json::<Server>(&server.to_string()).unwrap();
        };
        apply("a-later", "2026-01-01T00:00:00.500Z");
        apply("z-earlier", "2026-01-01T00:00:00Z");
        let mut rx = index.inbound_server(pod("ns", "web-0"), 8080).unwrap();
        assert_eq!(
            current(&mut rx).reference,
            ServerRef::Server("z-earlier".into())
        );
        // An offset is the same instant as its UTC form: older than both.
        apply("m-earliest", "2026-01-01T00:59:59.9+01:00");
        assert_eq!(
            current(&mut rx).reference,
            ServerRef::Server("m-earliest".into())
        );
    }

    /// Views that differ (two Servers of one pod) share their equal parts: the authorizations
    /// and the default routes are one allocation each, not one per view.
    #[tokio::test]
    async fn different_views_share_equal_parts() {
        let index = start();
        index.apply(Event::Apply(mk_server(
            "web-http",
            "2026-01-01T00:00:00Z",
            json!(8080),
        )));
        index.apply(Event::Apply(mk_server(
            "web-admin",
            "2026-01-01T00:00:00Z",
            json!(9090),
        )));
        index.apply(Event::Apply(mk_mtls(&[
            "a.ns.serviceaccount.identity.linkerd.cluster.local",
        ])));
        index.apply(Event::Apply(decode::<AuthorizationPolicy>(json!({
            "apiVersion": "policy.linkerd.io/v1alpha1", "kind": "AuthorizationPolicy",
            "metadata": {"name": "everyone", "namespace": "ns"},
            "spec": {
                "targetRef": {"kind": "Namespace", "name": "ns"},
                "requiredAuthenticationRefs": [{"group": "policy.linkerd.io", "kind": "MeshTLSAuthentication", "name": "clients"}],
            },
        }))));
        let mut http = index.inbound_server(pod("ns", "web-0"), 8080).unwrap();
        let mut admin = index.inbound_server(pod("ns", "web-0"), 9090).unwrap();
        let (http, admin) = (current(&mut http), current(&mut admin));
        assert_eq!(http.reference, ServerRef::Server("web-http".into()));
        assert_eq!(admin.reference, ServerRef::Server("web-admin".into()));
        assert_eq!(http.authorizations.len(), 1);
        assert!(std::sync::Arc::ptr_eq(
            &http.authorizations,
            &admin.authorizations
        ));
        assert!(std::sync::Arc::ptr_eq(
            &http.http_routes,
            &admin.http_routes
        ));
        assert!(std::sync::Arc::ptr_eq(
            &http.grpc_routes,
            &admin.grpc_routes
        ));
    }

    /// Two Servers with the same selector and port: the older serves the port, and the
    /// conflict is logged once, when the second arrives (not again when it is re-applied).
    #[tokio::test]
    async fn identical_servers_are_logged() {
        let index = start();
        let older = mk_server("web-a", "2026-01-01T00:00:00Z", json!(8080));
        let newer = mk_server("web-b", "2026-01-02T00:00:00Z", json!(8080));
        let (_, log) = support::logged(|| index.apply(Event::Apply(newer.clone())));
        assert_eq!(log, "");
        let (_, log) = support::logged(|| {
            index.apply(Event::Apply(older.clone()));
            index.apply(Event::Apply(newer.clone()));
        });
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(
            log.contains("Servers web-a and web-b select the same workloads and port; only the older, web-a, serves them, and web-b has no effect"),
            "{log}"
        );
        let mut rx = index.inbound_server(pod("ns", "web-0"), 8080).unwrap();
        assert_eq!(
            current(&mut rx).reference,
            ServerRef::Server("web-a".into())
        );
        // Another port: no conflict.
        let (_, log) = support::logged(|| {
            index.apply(Event::Apply(mk_server(
                "web-c",
                "2026-01-03T00:00:00Z",
                json!(9090),
            )))
        });
        assert_eq!(log, "");
    }

    /// A Server selecting every pod on the port of another: logged as overlapping, and the
    /// older serves the port of the pods both select.
    #[tokio::test]
    async fn a_server_selecting_every_pod_on_another_servers_port_is_logged() {
        let index = start();
        index.apply(Event::Apply(mk_server(
            "web-a",
            "2026-01-01T00:00:00Z",
            json!(8080),
        )));
        let mut catch_all = mk_server("catch-all", "2026-01-02T00:00:00Z", json!(8080));
        catch_all.spec.pod_selector = Some(Default::default());
        let (_, log) = support::logged(|| index.apply(Event::Apply(catch_all)));
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(
            log.contains("Servers catch-all and web-a claim the same port and one of them selects every workload; where both select a workload, only the older, web-a, serves its port"),
            "{log}"
        );
        let mut rx = index.inbound_server(pod("ns", "web-0"), 8080).unwrap();
        assert_eq!(
            current(&mut rx).reference,
            ServerRef::Server("web-a".into())
        );
    }

    #[tokio::test]
    async fn authorization_policy_added_edited_and_removed() {
        let index = start();
        index.apply(Event::Apply(mk_server(
            "web-http",
            "2026-01-02T00:00:00Z",
            json!(8080),
        )));
        let mut rx = index.inbound_server(pod("ns", "web-0"), 8080).unwrap();
        assert!(current(&mut rx).authorizations.is_empty());

        // A policy whose MeshTLSAuthentication does not exist yet is not served...
        index.apply(Event::Apply(mk_policy("web-clients", "web-http")));
        assert!(!rx.has_changed().unwrap());
        // ...until the authentication appears.
        index.apply(Event::Apply(mk_mtls(&[
            "a.ns.serviceaccount.identity.linkerd.cluster.local",
        ])));
        let key = AuthorizationRef::AuthorizationPolicy("web-clients".into());
        let s = current(&mut rx);
        assert_eq!(
            identities(&s, &key),
            [IdentityMatch::Exact(
                "a.ns.serviceaccount.identity.linkerd.cluster.local".into()
            )]
        );
        // Editing the authentication reaches the server.
        index.apply(Event::Apply(mk_mtls(&[
            "*.ns.serviceaccount.identity.linkerd.cluster.local",
        ])));
        let s = current(&mut rx);
        assert_eq!(
            identities(&s, &key),
            [IdentityMatch::Suffix(
                [
                    "ns",
                    "serviceaccount",
                    "identity",
                    "linkerd",
                    "cluster",
                    "local"
                ]
                .map(String::from)
                .to_vec()
            )]
        );
        index.delete(&mk_policy("web-clients", "web-http"));
        assert!(current(&mut rx).authorizations.is_empty());
    }

    #[tokio::test]
    async fn bad_objects_are_skipped_and_others_still_served() {
        let index = start();
        index.apply(Event::Apply(mk_server(
            "web-http",
            "2026-01-02T00:00:00Z",
            json!(8080),
        )));
        index.apply(Event::Apply(mk_mtls(&[
            "a.ns.serviceaccount.identity.linkerd.cluster.local",
        ])));
        index.apply(Event::Apply(mk_policy("good", "web-http")));
        let bad_net: linkerd_k8s_api::NetworkAuthentication = decode(json!({
            "apiVersion": "policy.linkerd.io/v1alpha1", "kind": "NetworkAuthentication",
            "metadata": {"name": "bad", "namespace": "ns"},
            "spec": {"networks": [{"cidr": "10.0.0.0/33"}]},
        }));
        index.apply(Event::Reset(vec![bad_net]));
        let odd_selector: Server = decode(json!({
            "apiVersion": "policy.linkerd.io/v1beta3", "kind": "Server",
            "metadata": {"name": "a-odd", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"podSelector": {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["web"]}]}, "port": 8080},
        }));
        index.apply(Event::Apply(odd_selector));
        let mut rx = index.inbound_server(pod("ns", "web-0"), 8080).unwrap();
        let s = current(&mut rx);
        // The older Server's selector never matches; the good policy is still served.
        assert_eq!(s.reference, ServerRef::Server("web-http".into()));
        assert_eq!(
            authz_names(&s),
            [AuthorizationRef::AuthorizationPolicy("good".into())]
        );
    }

    #[tokio::test]
    async fn deleting_the_workload_ends_its_watches() {
        let index = start();
        let mut rx = index.inbound_server(pod("ns", "web-0"), 8080).unwrap();
        current(&mut rx);
        index.delete(&mk_pod(meshed("web")));
        assert!(rx.changed().await.is_err(), "the watch closes");
        assert!(index.inbound_server(pod("ns", "web-0"), 8080).is_err());
        assert!(index.inbound_server(pod("ns", "unmeshed"), 8080).is_err());
    }

    /// An invalid `config.linkerd.io/default-inbound-policy` leaves the pod on the cluster
    /// default (spec §2.5), and says so once per version of the pod (newcomer finding: it was
    /// silent, while an invalid opaque-ports annotation is logged).
    #[tokio::test]
    async fn an_invalid_default_policy_annotation_is_logged_once_per_version() {
        let index = start();
        let annotated = |policy: &str, app: &str| {
            let mut pod = mk_pod(meshed(app));
            pod.metadata.annotations = Some(
                [(
                    "config.linkerd.io/default-inbound-policy".to_string(),
                    policy.to_string(),
                )]
                .into(),
            );
            pod
        };
        let (_, log) = support::logged(|| {
            index.apply(Event::Apply(annotated("everyone-please", "web")));
            // The same pod again: not logged again.
            index.apply(Event::Apply(annotated("everyone-please", "web")));
        });
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("default-inbound-policy"))
            .collect();
        assert_eq!(lines.len(), 1, "{log}");
        assert!(lines[0].contains("ns/web-0"), "{}", lines[0]);
        assert!(lines[0].contains("everyone-please"), "{}", lines[0]);
        let mut rx = index.inbound_server(pod("ns", "web-0"), 8080).unwrap();
        assert_eq!(
            current(&mut rx).reference,
            ServerRef::Default("all-unauthenticated".into())
        );

        // A valid one is not logged.
        let (_, log) = support::logged(|| index.apply(Event::Apply(annotated("deny", "web"))));
        assert!(!log.contains("default-inbound-policy"), "{log}");
    }
}
