//! Inbound policy views over the fixture snapshots (fixtures/README.md inbound facts 11–20),
//! fed by the offline source as the policy controller is.

use linkerd_index::{
    Index, IndexMetrics,
    inbound::{
        AuthorizationRef, ClientAuthentication, DefaultPolicy, IdentityMatch, InboundConfig,
        InboundProtocol, InboundServer, RouteRef, ServerRef, WorkloadRef,
    },
    source::offline::OfflineSource,
};
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
    let index = Index::with_inbound(metrics.clone(), config());
    let source = OfflineSource::start(&dir, metrics).unwrap();
    index.spawn_policy_watches(&source);
    let mut ready = index.ready();
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
