//! The inbound facts of the emojivoto fixture (fixtures/README.md, facts 11–15), through gRPC.

mod support;

use linkerd2_proxy_api::{
    grpc_route, http_route, http_types,
    inbound::{Server, proxy_protocol},
};
use support::*;

const VOTING: [&str; 2] = ["voting-qbtpmtmk74-gdg57", "voting-qbtpmtmk74-pc5dj"];
const EMOJI: [&str; 2] = ["emoji-mtw779t9cd-l9grp", "emoji-mtw779t9cd-nzhxd"];
const WEB: &str = "web-djjwbqr6lt-sfd7g";
const VOTE_BOT: &str = "vote-bot-rqpvjbjnqz-x2xgd";

async fn harness() -> Harness {
    Harness::start(&fixture_dir("emojivoto")).await
}

fn all_networks() -> Vec<String> {
    vec!["0.0.0.0/0".into(), "::/0".into()]
}

/// A gRPC server's routes, asserting it is one.
fn grpc_routes(server: &Server) -> &[linkerd2_proxy_api::inbound::GrpcRoute] {
    match protocol(server) {
        proxy_protocol::Kind::Grpc(g) => &g.routes,
        other => panic!("expected gRPC, got {other:?}"),
    }
}

/// Fact 11: the voting pods' gRPC port is Server voting-grpc, authorized only for web.
#[tokio::test]
async fn fact_11_voting_grpc_admits_only_web() {
    let mut h = harness().await;
    for pod in VOTING {
        let server = h.pod_port("emojivoto", pod, 8080).await;
        assert_proxy_valid(&server);
        assert_eq!(
            sorted(&server.labels),
            labels("policy.linkerd.io", "server", "voting-grpc")
        );
        let routes = grpc_routes(&server);
        assert_eq!(routes.len(), 1);
        assert_eq!(meta_name(&routes[0].metadata), "default:default");
        assert_eq!(
            routes[0].rules[0].matches,
            vec![grpc_route::GrpcRouteMatch {
                rpc: Some(grpc_route::GrpcRpcMatch::default()),
                headers: vec![],
            }]
        );
        assert!(routes[0].authorizations.is_empty());

        // accessPolicy deny adds nothing: voting-policy is the only authorization.
        assert_eq!(authz_names(&server.authorizations), ["voting-policy"]);
        let authz = authz(&server.authorizations, "voting-policy");
        assert_eq!(
            meta_name(&authz.metadata),
            "policy.linkerd.io/authorizationpolicy/voting-policy"
        );
        assert_eq!(
            sorted(&authz.labels),
            labels("policy.linkerd.io", "authorizationpolicy", "voting-policy")
        );
        assert_eq!(authn(authz), Authn::Identities(vec![WEB_ID.into()], vec![]));
        assert_eq!(networks(authz), all_networks());
    }
}

/// Fact 12: the emoji pods' gRPC port is Server emoji-grpc; the ServiceAccount ref becomes
/// web's identity.
#[tokio::test]
async fn fact_12_emoji_grpc_service_account_ref() {
    let mut h = harness().await;
    for pod in EMOJI {
        let server = h.pod_port("emojivoto", pod, 8080).await;
        assert_proxy_valid(&server);
        assert_eq!(server.labels["name"], "emoji-grpc");
        assert_eq!(server.labels["kind"], "server");
        assert_eq!(grpc_routes(&server).len(), 1);
        assert_eq!(authz_names(&server.authorizations), ["emoji-grpc"]);
        let authz = authz(&server.authorizations, "emoji-grpc");
        assert_eq!(authn(authz), Authn::Identities(vec![WEB_ID.into()], vec![]));
        assert_eq!(networks(authz), all_networks());
    }
}

/// Fact 13: web's HTTP port is Server web-http with two accepted routes, each carrying its own
/// authorization, and none at the server level.
#[tokio::test]
async fn fact_13_web_http_routes_and_route_authorizations() {
    let mut h = harness().await;
    let server = h.pod_port("emojivoto", WEB, 8080).await;
    assert_proxy_valid(&server);
    assert_eq!(
        sorted(&server.labels),
        labels("policy.linkerd.io", "server", "web-http")
    );
    assert!(
        matches!(protocol(&server), proxy_protocol::Kind::Http1(h) if h.local_rate_limit.is_none())
    );
    assert!(
        server.authorizations.is_empty(),
        "{:?}",
        server.authorizations
    );

    // Oldest first: web-api (09:32:00) before web-static (09:32:02); no default or probe route.
    let routes = http_routes(&server);
    let names: Vec<String> = routes.iter().map(|r| meta_name(&r.metadata)).collect();
    assert_eq!(
        names,
        [
            "policy.linkerd.io/HTTPRoute/web-api",
            "gateway.networking.k8s.io/HTTPRoute/web-static",
        ]
    );

    let web_api = &routes[0];
    assert!(web_api.hosts.is_empty());
    assert_eq!(web_api.rules.len(), 1);
    let get = http_types::HttpMethod {
        r#type: Some(http_types::http_method::Type::Registered(
            http_types::http_method::Registered::Get.into(),
        )),
    };
    let exact = |path: &str| http_route::HttpRouteMatch {
        path: Some(http_route::PathMatch {
            kind: Some(http_route::path_match::Kind::Exact(path.into())),
        }),
        headers: vec![],
        query_params: vec![],
        method: Some(get.clone()),
    };
    assert_eq!(
        web_api.rules[0].matches,
        vec![
            exact("/api/list"),
            exact("/api/vote"),
            exact("/api/leaderboard")
        ]
    );
    assert_eq!(authz_names(&web_api.authorizations), ["web-api"]);
    let api_authz = authz(&web_api.authorizations, "web-api");
    assert_eq!(
        meta_name(&api_authz.metadata),
        "policy.linkerd.io/authorizationpolicy/web-api"
    );
    assert_eq!(
        authn(api_authz),
        Authn::Identities(
            vec!["default.emojivoto.serviceaccount.identity.linkerd.cluster.local".into()],
            vec!["ingress-nginx.serviceaccount.identity.linkerd.cluster.local".into()],
        )
    );
    assert_eq!(networks(api_authz), all_networks());

    let web_static = &routes[1];
    assert_eq!(
        web_static.rules[0].matches,
        vec![http_route::HttpRouteMatch {
            path: Some(http_route::PathMatch {
                kind: Some(http_route::path_match::Kind::Prefix("/".into())),
            }),
            ..Default::default()
        }]
    );
    assert_eq!(authz_names(&web_static.authorizations), ["web-static"]);
    let static_authz = authz(&web_static.authorizations, "web-static");
    assert_eq!(authn(static_authz), Authn::Unauthenticated);
    assert_eq!(
        networks(static_authz),
        [
            "10.244.0.0/16",
            "fd00:10:244::/56",
            "10.20.0.0/16 except 10.20.3.200/32"
        ]
    );
}

/// Fact 13, last point: the routes attach because their status says the policy controller
/// accepted them; with acceptance read from the status (cluster mode) the answer is the same.
#[tokio::test]
async fn fact_13_routes_attach_from_their_accepted_status() {
    let mut config = chart_config();
    config.compute_route_acceptance = false;
    let mut h = Harness::start_with(&fixture_dir("emojivoto"), config).await;
    let server = h.pod_port("emojivoto", WEB, 8080).await;
    let names: Vec<String> = http_routes(&server)
        .iter()
        .map(|r| meta_name(&r.metadata))
        .collect();
    assert_eq!(
        names,
        [
            "policy.linkerd.io/HTTPRoute/web-api",
            "gateway.networking.k8s.io/HTTPRoute/web-static",
        ]
    );
}

/// Fact 14: port 8801 of emoji and voting pods is Server prom (selected by matchExpressions),
/// admitting only viz's Prometheus.
#[tokio::test]
async fn fact_14_prom_server_by_match_expressions() {
    let mut h = harness().await;
    for pod in EMOJI.iter().chain(VOTING.iter()) {
        let server = h.pod_port("emojivoto", pod, 8801).await;
        assert_proxy_valid(&server);
        assert_eq!(
            sorted(&server.labels),
            labels("policy.linkerd.io", "server", "prom")
        );
        assert!(matches!(protocol(&server), proxy_protocol::Kind::Http1(_)));
        // No route attached: the default route (no probe paths on 8801).
        let routes: Vec<String> = http_routes(&server)
            .iter()
            .map(|r| meta_name(&r.metadata))
            .collect();
        assert_eq!(routes, ["default:default"]);
        assert_eq!(authz_names(&server.authorizations), ["prom-scrape"]);
        assert_eq!(
            authn(authz(&server.authorizations, "prom-scrape")),
            Authn::Identities(
                vec!["prometheus.linkerd-viz.serviceaccount.identity.linkerd.cluster.local".into()],
                vec![]
            )
        );
    }
}

/// Fact 15: vote-bot has no Server; any port gets the cluster default, all-unauthenticated,
/// with protocol detection and the catch-all route.
#[tokio::test]
async fn fact_15_vote_bot_default_server() {
    let mut h = harness().await;
    for port in [8080, 9999, 1] {
        let server = h.pod_port("emojivoto", VOTE_BOT, port).await;
        assert_proxy_valid(&server);
        assert_eq!(
            sorted(&server.labels),
            labels("", "default", "all-unauthenticated")
        );
        let proxy_protocol::Kind::Detect(detect) = protocol(&server) else {
            panic!("expected Detect: {server:?}");
        };
        assert_eq!(
            detect.timeout,
            Some(prost_types::Duration {
                seconds: 10,
                nanos: 0
            })
        );
        let routes: Vec<String> = detect
            .http_routes
            .iter()
            .map(|r| meta_name(&r.metadata))
            .collect();
        assert_eq!(routes, ["default:default"]);
        assert_eq!(authz_names(&server.authorizations), ["all-unauthenticated"]);
        let authz = &server.authorizations[0];
        assert_eq!(meta_name(&authz.metadata), "default:all-unauthenticated");
        assert_eq!(
            sorted(&authz.labels),
            labels("", "default", "all-unauthenticated")
        );
        assert_eq!(authn(authz), Authn::Unauthenticated);
        assert_eq!(networks(authz), all_networks());
    }
}

/// Compat note Z.2: the proxy's admin port (4191) carries probe paths, so the default server
/// there has the catch-all route and a probe route for `/live` and `/ready` open to the probe
/// networks.
#[tokio::test]
async fn admin_port_has_default_and_probe_routes() {
    let mut h = harness().await;
    let server = h.pod_port("emojivoto", VOTE_BOT, 4191).await;
    assert_proxy_valid(&server);
    let routes = http_routes(&server);
    let names: Vec<String> = routes.iter().map(|r| meta_name(&r.metadata)).collect();
    assert_eq!(names, ["default:default", "default:probe"]);
    let probe = &routes[1];
    let paths: Vec<_> = probe.rules[0]
        .matches
        .iter()
        .map(|m| m.path.clone().and_then(|p| p.kind))
        .collect();
    assert_eq!(
        paths,
        [
            Some(http_route::path_match::Kind::Exact("/live".into())),
            Some(http_route::path_match::Kind::Exact("/ready".into())),
        ]
    );
    assert_eq!(authz_names(&probe.authorizations), ["probe"]);
    let authz = &probe.authorizations[0];
    assert_eq!(meta_name(&authz.metadata), "default:probe");
    assert_eq!(authn(authz), Authn::Unauthenticated);
    assert_eq!(networks(authz), all_networks());
}

/// The legacy `ns:pod` form names the same workload as the JSON form.
#[tokio::test]
async fn legacy_workload_form() {
    let mut h = harness().await;
    let legacy = h.get_port(&format!("emojivoto:{WEB}"), 8080).await.unwrap();
    let json = h.pod_port("emojivoto", WEB, 8080).await;
    assert_eq!(legacy, json);
    assert_eq!(legacy.labels["name"], "web-http");
}

/// WatchPort starts with the same value GetPort answers.
#[tokio::test]
async fn watch_port_starts_with_the_current_server() {
    let mut h = harness().await;
    let mut stream = h
        .watch_port(&pod_workload("emojivoto", VOTING[0]), 8080)
        .await
        .unwrap();
    let first = next(&mut stream).await;
    assert_eq!(first, h.pod_port("emojivoto", VOTING[0], 8080).await);
    assert_eq!(first.labels["name"], "voting-grpc");
    assert_quiet(&mut stream).await;
}
