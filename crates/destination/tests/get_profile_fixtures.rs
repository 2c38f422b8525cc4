//! `Destination.GetProfile` over the emojivoto and edge-cases snapshots: the GetProfile facts
//! of fixtures/README.md (emojivoto 4, 7–10; edge cases E1–E3, E7–E10, E13, E16).

mod support;

use linkerd2_proxy_api::{
    destination::{
        DestinationProfile, RetryBudget, WeightedAddr, protocol_hint::Protocol,
        request_match::Match as Req, response_match::Match as Rsp, tls_identity::Strategy,
    },
    meta::{Metadata, Resource, metadata::Kind},
};
use support::*;

fn emojivoto() -> std::path::PathBuf {
    fixture_dir("emojivoto")
}

fn edge() -> std::path::PathBuf {
    fixture_dir("edge-cases")
}

fn duration(seconds: i64, nanos: i32) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds, nanos })
}

fn default_budget() -> Option<RetryBudget> {
    Some(RetryBudget {
        retry_ratio: 0.2,
        min_retries_per_second: 10,
        ttl: duration(10, 0),
    })
}

fn resource(group: &str, kind: &str, name: &str, namespace: &str, port: u32) -> Option<Metadata> {
    Some(Metadata {
        kind: Some(Kind::Resource(Resource {
            group: group.into(),
            kind: kind.into(),
            name: name.into(),
            namespace: namespace.into(),
            section: String::new(),
            port,
        })),
    })
}

fn route_names(p: &DestinationProfile) -> Vec<String> {
    p.routes
        .iter()
        .map(|r| r.metrics_labels.get("route").cloned().unwrap_or_default())
        .collect()
}

fn dns_identity(addr: &WeightedAddr) -> Option<String> {
    match addr.tls_identity.clone()?.strategy? {
        Strategy::DnsLikeIdentity(id) => Some(id.name),
        Strategy::UriLikeIdentity(id) => Some(id.uri),
    }
}

fn is_h2(addr: &WeightedAddr) -> bool {
    matches!(
        addr.protocol_hint
            .as_ref()
            .and_then(|h| h.protocol.as_ref()),
        Some(Protocol::H2(_))
    )
}

#[tokio::test]
async fn fact7_web_svc_profile_by_name_and_cluster_ip() {
    let mut h = Harness::start(&emojivoto()).await;
    let p = h
        .first_profile("web-svc.emojivoto.svc.cluster.local:80", "")
        .await;
    assert_eq!(
        p.fully_qualified_name,
        "web-svc.emojivoto.svc.cluster.local"
    );
    assert_eq!(
        p.parent_ref,
        resource("core", "Service", "web-svc", "emojivoto", 80)
    );
    assert_eq!(
        p.profile_ref,
        resource(
            "linkerd.io",
            "ServiceProfile",
            "web-svc.emojivoto.svc.cluster.local",
            "emojivoto",
            0
        )
    );
    assert_eq!(
        p.retry_budget,
        Some(RetryBudget {
            retry_ratio: 0.25,
            min_retries_per_second: 5,
            ttl: duration(15, 0),
        })
    );
    assert!(!p.opaque_protocol);
    assert!(p.endpoint.is_none());
    assert_eq!(
        route_names(&p),
        [
            "GET /api/list",
            "GET /api/vote",
            "GET /api/leaderboard",
            "GET /js",
            "GET /"
        ]
    );
    let list = &p.routes[0];
    assert!(list.is_retryable);
    let Some(Req::All(all)) = list.condition.as_ref().and_then(|c| c.r#match.clone()) else {
        panic!("GET /api/list: expected All, got {:?}", list.condition);
    };
    assert_eq!(all.matches.len(), 2);
    let Some(Req::Path(path)) = all.matches[1].r#match.clone() else {
        panic!("expected the path second: {all:?}");
    };
    assert_eq!(path.regex, "/api/list");
    let vote = &p.routes[1];
    assert_eq!(vote.timeout, duration(0, 500_000_000));
    assert!(!vote.is_retryable);
    assert_eq!(vote.response_classes.len(), 1);
    assert!(vote.response_classes[0].is_failure);
    let Some(Rsp::Status(range)) = vote.response_classes[0]
        .condition
        .as_ref()
        .and_then(|c| c.r#match.clone())
    else {
        panic!("expected a status range: {:?}", vote.response_classes);
    };
    assert_eq!((range.min, range.max), (500, 599));
    let leaderboard = &p.routes[2];
    assert!(leaderboard.is_retryable);
    assert_eq!(leaderboard.timeout, duration(1, 0));

    let by_ip = h.first_profile("10.96.34.218:80", "").await;
    assert_eq!(by_ip, p, "the ClusterIP resolves to the same profile");
}

#[tokio::test]
async fn fact8_voting_and_emoji_profiles() {
    let mut h = Harness::start(&emojivoto()).await;
    let voting = h
        .first_profile("voting-svc.emojivoto.svc.cluster.local:8080", "")
        .await;
    assert_eq!(
        route_names(&voting),
        [
            "VoteDoughnut",
            "VotePoop",
            "VoteJoy",
            "VoteSunglasses",
            "Vote (other emoji)",
            "Results"
        ]
    );
    assert_eq!(voting.retry_budget, default_budget());
    assert_eq!(voting.routes[0].timeout, duration(0, 250_000_000));
    assert!(voting.routes[5].is_retryable);

    let emoji = h
        .first_profile("emoji-svc.emojivoto.svc.cluster.local:8080", "")
        .await;
    assert_eq!(route_names(&emoji), ["ListAll", "FindByShortcode"]);
    assert!(emoji.routes[0].is_retryable);
    assert_eq!(emoji.routes[1].timeout, duration(0, 300_000_000));
    let regexes: Vec<String> = emoji
        .routes
        .iter()
        .flat_map(
            |r| match r.condition.as_ref().and_then(|c| c.r#match.clone()) {
                Some(Req::All(all)) => all.matches,
                Some(other) => vec![linkerd2_proxy_api::destination::RequestMatch {
                    r#match: Some(other),
                }],
                None => vec![],
            },
        )
        .filter_map(|m| match m.r#match {
            Some(Req::Path(p)) => Some(p.regex),
            _ => None,
        })
        .collect();
    assert_eq!(
        regexes,
        [
            r"/emojivoto\.v1\.EmojiService/ListAll",
            r"/emojivoto\.v1\.EmojiService/FindByShortcode"
        ]
    );
}

#[tokio::test]
async fn fact9_undeclared_port_gets_one_empty_profile() {
    let mut h = Harness::start(&emojivoto()).await;
    let mut stream = h
        .get_profile("web-svc.emojivoto.svc.cluster.local:8080", "")
        .await
        .unwrap();
    assert_eq!(
        next_profile(&mut stream).await,
        DestinationProfile::default()
    );
    assert_no_profile(&mut stream).await;
}

#[tokio::test]
async fn fact10_pod_ip_endpoint_profile() {
    let mut h = Harness::start(&emojivoto()).await;
    let p = h.first_profile("10.244.2.19:8080", "").await;
    assert!(p.routes.is_empty());
    assert_eq!(p.retry_budget, default_budget());
    assert!(!p.opaque_protocol);
    assert_eq!(p.fully_qualified_name, "");
    assert!(p.parent_ref.is_none() && p.profile_ref.is_none());
    let ep = p.endpoint.expect("endpoint");
    assert_eq!(addr_of(&ep), sa("10.244.2.19:8080"));
    assert_eq!(
        dns_identity(&ep).as_deref(),
        Some("web.emojivoto.serviceaccount.identity.linkerd.cluster.local")
    );
    assert!(is_h2(&ep));
    assert!(ep.http2.is_some());
    assert_eq!(
        sorted(&ep.metric_labels),
        labels(&[
            ("pod", "web-djjwbqr6lt-sfd7g"),
            ("deployment", "web"),
            ("serviceaccount", "web"),
            ("control_plane_ns", "linkerd"),
            ("pod_template_hash", "djjwbqr6lt"),
            ("namespace", "emojivoto"),
            ("zone", "")
        ])
    );
}

#[tokio::test]
async fn fact4_vote_bot_without_service() {
    let mut h = Harness::start(&emojivoto()).await;
    let ep = h
        .first_profile("10.244.0.30:8080", "")
        .await
        .endpoint
        .expect("endpoint");
    assert_eq!(
        dns_identity(&ep).as_deref(),
        Some("default.emojivoto.serviceaccount.identity.linkerd.cluster.local")
    );
    let l = sorted(&ep.metric_labels);
    assert_eq!(l.get("deployment").map(String::as_str), Some("vote-bot"));
    assert_eq!(l.get("serviceaccount").map(String::as_str), Some("default"));
}

#[tokio::test]
async fn unknown_ip_uses_default_opaque_ports() {
    let mut h = Harness::start(&emojivoto()).await;
    let mysql = h.first_profile("10.1.2.3:3306", "").await;
    assert!(mysql.opaque_protocol);
    let ep = mysql.endpoint.expect("a bare endpoint");
    assert_eq!(addr_of(&ep), sa("10.1.2.3:3306"));
    assert!(ep.tls_identity.is_none() && ep.protocol_hint.is_none());
    assert!(ep.metric_labels.is_empty(), "{:?}", ep.metric_labels);
    let http = h.first_profile("10.1.2.3:80", "").await;
    assert!(!http.opaque_protocol);
}

#[tokio::test]
async fn unknown_service_is_not_found_and_bad_paths_are_invalid() {
    let mut h = Harness::start(&emojivoto()).await;
    let err = h
        .get_profile("nosuch.emojivoto.svc.cluster.local:80", "")
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    for bad in [
        "web-svc.emojivoto.svc.cluster.local:0",
        "linkerd.io:80",
        "fd00::1:80",
    ] {
        let err = h.get_profile(bad, "").await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{bad}: {err}");
    }
}

#[tokio::test]
async fn e1_statefulset_pod_dns_name() {
    let mut h = Harness::start(&edge()).await;
    let p = h
        .first_profile("cache-1.cache.edge.svc.cluster.local:6379", "")
        .await;
    assert!(p.opaque_protocol, "6379 is opaque by annotation");
    let ep = p.endpoint.expect("endpoint");
    assert_eq!(addr_of(&ep), sa("10.244.1.44:6379"));
    assert_eq!(
        sorted(&ep.metric_labels).get("pod").map(String::as_str),
        Some("cache-1")
    );
    let err = h
        .get_profile("cache-9.cache.edge.svc.cluster.local:6379", "")
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
}

#[tokio::test]
async fn e2_external_name_is_invalid() {
    let mut h = Harness::start(&edge()).await;
    let err = h
        .get_profile("legacy-db.edge.svc.cluster.local:443", "")
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
}

#[tokio::test]
async fn e3_service_without_profile_gets_the_default() {
    let mut h = Harness::start(&edge()).await;
    let p = h.first_profile("ghost.edge.svc.cluster.local:80", "").await;
    assert_eq!(
        p,
        DestinationProfile {
            fully_qualified_name: "ghost.edge.svc.cluster.local".into(),
            retry_budget: default_budget(),
            parent_ref: resource("core", "Service", "ghost", "edge", 80),
            profile_ref: Some(Metadata {
                kind: Some(Kind::Resource(Resource {
                    group: "linkerd.io".into(),
                    ..Resource::default()
                })),
            }),
            ..DestinationProfile::default()
        }
    );
}

#[tokio::test]
async fn e7_service_annotation_makes_the_service_profile_opaque_only() {
    let mut h = Harness::start(&edge()).await;
    let svc = h
        .first_profile("ledger.edge.svc.cluster.local:7000", "")
        .await;
    assert!(svc.opaque_protocol);
    let pod = h.first_profile("10.244.0.70:7000", "").await;
    assert!(!pod.opaque_protocol);
}

#[tokio::test]
async fn e8_pod_annotation_makes_the_endpoint_profile_opaque_only() {
    let mut h = Harness::start(&edge()).await;
    let svc = h.first_profile("mq.edge.svc.cluster.local:5672", "").await;
    assert!(!svc.opaque_protocol);
    let pod = h.first_profile("10.244.1.73:5672", "").await;
    assert!(pod.opaque_protocol);
}

#[tokio::test]
async fn e9_host_network_pod_by_host_ip() {
    let mut h = Harness::start(&edge()).await;
    let ep = h
        .first_profile("10.20.1.11:9100", "")
        .await
        .endpoint
        .expect("endpoint");
    assert_eq!(addr_of(&ep), sa("10.20.1.11:9100"));
    let l = sorted(&ep.metric_labels);
    assert_eq!(l.get("daemonset").map(String::as_str), Some("node-agent"));
    assert_eq!(l.get("namespace").map(String::as_str), Some("edge"));
    assert!(ep.tls_identity.is_none() && ep.protocol_hint.is_none());
}

#[tokio::test]
async fn e10_host_port_endpoint_profile() {
    let mut h = Harness::start(&edge()).await;
    let ep = h
        .first_profile("10.20.2.12:443", "")
        .await
        .endpoint
        .expect("endpoint");
    assert_eq!(addr_of(&ep), sa("10.20.2.12:443"));
    assert_eq!(
        dns_identity(&ep).as_deref(),
        Some("gateway.edge.serviceaccount.identity.linkerd.cluster.local")
    );
    assert!(is_h2(&ep));
    let l = sorted(&ep.metric_labels);
    assert_eq!(
        l.get("pod").map(String::as_str),
        Some("gateway-zxkmwg9s7k-wph4l")
    );
    assert_eq!(l.get("deployment").map(String::as_str), Some("gateway"));
    assert_eq!(l.get("namespace").map(String::as_str), Some("edge"));
    assert_eq!(l.get("zone").map(String::as_str), Some(""));
}

#[tokio::test]
async fn e13_dual_stack_cluster_ip() {
    let mut h = Harness::start(&edge()).await;
    let p = h.first_profile("[fd00:10:96::8:7a3e]:80", "").await;
    assert_eq!(p.fully_qualified_name, "dual.edge.svc.cluster.local");
}

#[tokio::test]
async fn e16_opaque_server_reaches_endpoint_profiles_only() {
    let mut h = Harness::start(&edge()).await;
    let svc = h
        .first_profile("secrets.edge-strict.svc.cluster.local:8200", "")
        .await;
    assert!(!svc.opaque_protocol);
    let pod = h.first_profile("10.244.1.90:8200", "").await;
    assert!(pod.opaque_protocol);
}

/// Every ServiceProfile of fixtures/profiles, served alone beside the booksapp Services: a
/// valid one is served with its routes, in order; an invalid one is skipped and the service
/// gets the default profile.
#[tokio::test]
async fn fixture_profiles_valid_served_invalid_skipped() {
    let dir = fixture_dir("profiles");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 12);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let raw: serde_json::Value = linkerd_k8s_api::yaml::from_str(&text).unwrap();
        let name = raw["metadata"]["name"].as_str().unwrap().to_string();
        let service = name.split('.').next().unwrap().to_string();
        let state = StateDir::new();
        state.write(
            "svc.yaml",
            &[mk_service("booksapp", &service, &[("http", 7000)])],
        );
        state.write_raw("sp.yaml", &text);
        let mut h = Harness::start(state.path()).await;
        let p = h.first_profile(&format!("{name}:7000"), "").await;
        let file_name = file.file_name().unwrap().to_string_lossy().to_string();
        if file_name.starts_with("valid") {
            let expected: Vec<String> = raw["spec"]["routes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["name"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(route_names(&p), expected, "{file_name}");
        } else {
            assert!(p.routes.is_empty(), "{file_name}: {p:?}");
            assert_eq!(p.retry_budget, default_budget(), "{file_name}");
            assert_eq!(p.fully_qualified_name, name, "{file_name}");
        }
    }
}
