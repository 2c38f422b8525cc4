//! `Destination.Get` over the emojivoto snapshot: every Get fact of fixtures/README.md
//! (facts 1, 2, 3, 5, 6), through the generated proxy-API client over real gRPC.

mod support;

use linkerd2_proxy_api::destination::{
    protocol_hint::Protocol, tls_identity::Strategy, update::Update,
};
use support::*;

const VOTE_BOT_TOKEN_1A: &str = r#"{"ns":"emojivoto","nodeName":"ip-10-20-1-11.eu-west-1.compute.internal","pod":"vote-bot-rqpvjbjnqz-x2xgd"}"#;
const TOKEN_1C: &str =
    r#"{"ns":"emojivoto","nodeName":"ip-10-20-3-13.eu-west-1.compute.internal"}"#;

async fn harness() -> Harness {
    Harness::start(&fixture_dir("emojivoto")).await
}

fn identity(addr: &linkerd2_proxy_api::destination::WeightedAddr) -> (String, String) {
    let tls = addr.tls_identity.clone().expect("tls identity");
    let Some(Strategy::DnsLikeIdentity(id)) = tls.strategy else {
        panic!("expected a DNS-like identity: {tls:?}")
    };
    (id.name, tls.server_name.expect("server name").name)
}

/// `(address, zone_locality)` of every address of an `Add`, sorted.
fn localities(
    set: &linkerd2_proxy_api::destination::WeightedAddrSet,
) -> Vec<(std::net::SocketAddr, String)> {
    let mut got: Vec<_> = set
        .addrs
        .iter()
        .map(|a| (addr_of(a), a.metric_labels["zone_locality"].clone()))
        .collect();
    got.sort();
    got
}

#[tokio::test]
async fn fact_1_web_svc() {
    let mut h = harness().await;
    let mut stream = h
        .get("web-svc.emojivoto.svc.cluster.local:80", "")
        .await
        .unwrap();
    let Update::Add(set) = next(&mut stream).await else {
        panic!("expected Add")
    };
    assert_eq!(
        sorted(&set.metric_labels),
        labels(&[("namespace", "emojivoto"), ("service", "web-svc")])
    );
    assert_eq!(set.addrs.len(), 1);
    let web = &set.addrs[0];
    assert_eq!(addr_of(web), sa("10.244.2.19:8080"));
    assert_eq!(web.weight, 10000);
    let name = "web.emojivoto.serviceaccount.identity.linkerd.cluster.local".to_string();
    assert_eq!(identity(web), (name.clone(), name));
    let hint = web.protocol_hint.unwrap();
    assert!(matches!(hint.protocol, Some(Protocol::H2(_))));
    assert_eq!(hint.opaque_transport, None);
    let ka = web.http2.unwrap().keep_alive.unwrap();
    assert_eq!(
        (
            ka.interval.unwrap().seconds,
            ka.timeout.unwrap().seconds,
            ka.while_idle
        ),
        (10, 3, true)
    );
    assert_eq!(
        sorted(&web.metric_labels),
        labels(&[
            ("pod", "web-djjwbqr6lt-sfd7g"),
            ("deployment", "web"),
            ("serviceaccount", "web"),
            ("control_plane_ns", "linkerd"),
            ("pod_template_hash", "djjwbqr6lt"),
            ("zone", "eu-west-1c"),
            ("zone_locality", "unknown"),
        ])
    );
    assert_eq!(web.authority_override, None);
    assert_quiet(&mut stream).await;
}

#[tokio::test]
async fn fact_2_emoji_svc_both_ports() {
    let mut h = harness().await;
    for port in [8080, 8801] {
        let mut stream = h
            .get(&format!("emoji-svc.emojivoto.svc.cluster.local:{port}"), "")
            .await
            .unwrap();
        let Update::Add(set) = next(&mut stream).await else {
            panic!("expected Add")
        };
        let mut addrs: Vec<_> = set.addrs.iter().collect();
        addrs.sort_by_key(|a| addr_of(a));
        let got: Vec<_> = addrs
            .iter()
            .map(|a| (addr_of(a), a.metric_labels["zone"].clone()))
            .collect();
        assert_eq!(
            got,
            [
                (sa(&format!("10.244.0.23:{port}")), "eu-west-1a".to_string()),
                (sa(&format!("10.244.1.31:{port}")), "eu-west-1b".to_string()),
            ]
        );
        for a in addrs {
            assert_eq!(
                identity(a).0,
                "emoji.emojivoto.serviceaccount.identity.linkerd.cluster.local"
            );
            assert!(matches!(
                a.protocol_hint.unwrap().protocol,
                Some(Protocol::H2(_))
            ));
            assert_eq!(a.metric_labels["deployment"], "emoji");
            assert_eq!(a.metric_labels["pod_template_hash"], "mtw779t9cd");
        }
    }
}

#[tokio::test]
async fn fact_3_voting_svc_topology_hints() {
    let mut h = harness().await;
    let path = "voting-svc.emojivoto.svc.cluster.local:8080";

    // Client in eu-west-1a: only the endpoint hinted for 1a, local.
    let mut stream = h.get(path, VOTE_BOT_TOKEN_1A).await.unwrap();
    let Update::Add(set) = next(&mut stream).await else {
        panic!("expected Add")
    };
    assert_eq!(set.addrs.len(), 1);
    assert_eq!(addr_of(&set.addrs[0]), sa("10.244.0.27:8080"));
    assert_eq!(set.addrs[0].metric_labels["pod"], "voting-qbtpmtmk74-gdg57");
    assert_eq!(set.addrs[0].metric_labels["zone_locality"], "local");

    // Client in eu-west-1c: nothing hinted there, so both, each remote.
    let mut stream = h.get(path, TOKEN_1C).await.unwrap();
    let Update::Add(set) = next(&mut stream).await else {
        panic!("expected Add")
    };
    assert_eq!(
        localities(&set),
        [
            (sa("10.244.0.27:8080"), "remote".into()),
            (sa("10.244.1.35:8080"), "remote".into())
        ]
    );

    // No token: both, unknown.
    let mut stream = h.get(path, "").await.unwrap();
    let Update::Add(set) = next(&mut stream).await else {
        panic!("expected Add")
    };
    assert_eq!(
        localities(&set),
        [
            (sa("10.244.0.27:8080"), "unknown".into()),
            (sa("10.244.1.35:8080"), "unknown".into())
        ]
    );
}

#[tokio::test]
async fn fact_5_port_not_on_the_service_and_default_port() {
    let mut h = harness().await;
    let mut stream = h
        .get("web-svc.emojivoto.svc.cluster.local:8080", "")
        .await
        .unwrap();
    assert_eq!(added(&next(&mut stream).await), [sa("10.244.2.19:8080")]);
    // No port in the authority: 80.
    let mut stream = h
        .get("web-svc.emojivoto.svc.cluster.local", "")
        .await
        .unwrap();
    assert_eq!(added(&next(&mut stream).await), [sa("10.244.2.19:8080")]);
}

#[tokio::test]
async fn fact_6_ip_authority_is_invalid_and_unknown_service_is_not_an_error() {
    let mut h = harness().await;
    let status = h.get("10.96.34.218:80", "").await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("10.96.34.218"),
        "{}",
        status.message()
    );

    let mut stream = h
        .get("nosuch.emojivoto.svc.cluster.local:80", "")
        .await
        .unwrap();
    match next(&mut stream).await {
        Update::NoEndpoints(ne) => assert!(!ne.exists),
        other => panic!("expected NoEndpoints, got {other:?}"),
    }
    assert_quiet(&mut stream).await;
}

#[tokio::test]
async fn vote_bot_has_no_service() {
    // vote-bot belongs to no Service: asking for a service named after it is an unknown service.
    let mut h = harness().await;
    let mut stream = h
        .get("vote-bot.emojivoto.svc.cluster.local:80", "")
        .await
        .unwrap();
    assert!(matches!(next(&mut stream).await, Update::NoEndpoints(ne) if !ne.exists));
}
