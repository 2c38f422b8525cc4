//! The inbound facts of the edge-cases fixture (fixtures/README.md, facts 16–20), through gRPC.

mod support;

use linkerd2_proxy_api::inbound::proxy_protocol;
use support::*;

const MQ: &str = "mq-gcg6dfjpp9-7cttk";
const POLYGLOT_V1: &str = "polyglot-v1-grjkrcnckn-r5hsv";
const POLYGLOT_V2: &str = "polyglot-v2-dtgqqnqtg9-bj4tv";
const SECRETS_OLD: &str = "secrets-xxhtpp88r6-ls5mh";
const SECRETS_NEW: &str = "secrets-xxhtpp88r6-4qps2";

async fn harness() -> Harness {
    Harness::start(&fixture_dir("edge-cases")).await
}

fn all_networks() -> Vec<String> {
    vec!["0.0.0.0/0".into(), "::/0".into()]
}

fn chart_cluster_networks() -> Vec<String> {
    cluster_networks().iter().map(|n| n.to_string()).collect()
}

/// Fact 16 (E15): mq's management port is Server mq-mgmt with accessPolicy deny; its only
/// authorization is the AuthorizationPolicy requiring billing's identity.
#[tokio::test]
async fn fact_16_mq_mgmt_deny_adds_no_default_authorization() {
    let mut h = harness().await;
    let server = h.pod_port("edge", MQ, 15672).await;
    assert_proxy_valid(&server);
    assert_eq!(
        sorted(&server.labels),
        labels("policy.linkerd.io", "server", "mq-mgmt")
    );
    assert!(matches!(protocol(&server), proxy_protocol::Kind::Http1(_)));
    assert_eq!(authz_names(&server.authorizations), ["mq-mgmt-ops"]);
    let authz = authz(&server.authorizations, "mq-mgmt-ops");
    assert_eq!(
        meta_name(&authz.metadata),
        "policy.linkerd.io/authorizationpolicy/mq-mgmt-ops"
    );
    assert_eq!(
        authn(authz),
        Authn::Identities(vec![BILLING_ID.into()], vec![])
    );
    assert_eq!(networks(authz), all_networks());
}

/// Fact 17 (E15): Server polyglot-web selects the port named `web`, which is 8080 on v1 and
/// 9090 on v2; accessPolicy audit adds `default:audit`. v1's 9090 is not `web`.
#[tokio::test]
async fn fact_17_polyglot_named_port_per_pod_with_audit() {
    let mut h = harness().await;
    for (pod, port) in [(POLYGLOT_V1, 8080), (POLYGLOT_V2, 9090)] {
        let server = h.pod_port("edge", pod, port).await;
        assert_proxy_valid(&server);
        assert_eq!(
            sorted(&server.labels),
            labels("policy.linkerd.io", "server", "polyglot-web"),
            "{pod}:{port}"
        );
        assert!(matches!(protocol(&server), proxy_protocol::Kind::Http1(_)));
        assert_eq!(authz_names(&server.authorizations), ["audit"]);
        let authz = &server.authorizations[0];
        assert_eq!(meta_name(&authz.metadata), "default:audit");
        assert_eq!(sorted(&authz.labels), labels("", "default", "audit"));
        assert_eq!(authn(authz), Authn::Unauthenticated);
        assert_eq!(networks(authz), all_networks());
    }

    let fallback = h.pod_port("edge", POLYGLOT_V1, 9090).await;
    assert_proxy_valid(&fallback);
    assert_eq!(
        sorted(&fallback.labels),
        labels("", "default", "all-unauthenticated")
    );
    assert!(matches!(
        protocol(&fallback),
        proxy_protocol::Kind::Detect(_)
    ));
}

/// Fact 18 (E15): the ExternalWorkload's port 8080 (named `http`) is Server payments-http,
/// whose accessPolicy all-authenticated admits any mesh identity.
#[tokio::test]
async fn fact_18_payments_external_workload() {
    let mut h = harness().await;
    let server = h
        .get_port(
            r#"{"ns":"edge","external_workload":"payments-vm-01"}"#,
            8080,
        )
        .await
        .unwrap();
    assert_proxy_valid(&server);
    assert_eq!(
        sorted(&server.labels),
        labels("policy.linkerd.io", "server", "payments-http")
    );
    assert!(matches!(protocol(&server), proxy_protocol::Kind::Http1(_)));
    assert_eq!(authz_names(&server.authorizations), ["all-authenticated"]);
    let authz = &server.authorizations[0];
    assert_eq!(meta_name(&authz.metadata), "default:all-authenticated");
    // Any identity: one empty suffix.
    assert_eq!(authn(authz), Authn::Identities(vec![], vec!["".into()]));
    assert_eq!(networks(authz), all_networks());

    // Other ports of the ExternalWorkload fall back to the cluster default.
    let other = h
        .get_port(
            r#"{"ns":"edge","external_workload":"payments-vm-01"}"#,
            9000,
        )
        .await
        .unwrap();
    assert_eq!(other.labels["name"], "all-unauthenticated");
}

/// Fact 19 (E16): the newer secrets pod carries the namespace's default-inbound-policy
/// annotation (cluster-authenticated); the older one does not and gets the flag's default.
/// Port 8200 is Server secrets-api for both.
#[tokio::test]
async fn fact_19_edge_strict_default_policy_from_the_pod_annotation() {
    let mut h = harness().await;

    let new = h.pod_port("edge-strict", SECRETS_NEW, 9102).await;
    assert_proxy_valid(&new);
    assert_eq!(
        sorted(&new.labels),
        labels("", "default", "cluster-authenticated")
    );
    assert_eq!(authz_names(&new.authorizations), ["cluster-authenticated"]);
    let authz = &new.authorizations[0];
    assert_eq!(meta_name(&authz.metadata), "default:cluster-authenticated");
    assert_eq!(authn(authz), Authn::Identities(vec![], vec!["".into()]));
    assert_eq!(networks(authz), chart_cluster_networks());

    let old = h.pod_port("edge-strict", SECRETS_OLD, 9102).await;
    assert_eq!(
        sorted(&old.labels),
        labels("", "default", "all-unauthenticated")
    );
    assert_eq!(authn(&old.authorizations[0]), Authn::Unauthenticated);

    for pod in [SECRETS_OLD, SECRETS_NEW] {
        let server = h.pod_port("edge-strict", pod, 8200).await;
        assert_proxy_valid(&server);
        assert_eq!(
            sorted(&server.labels),
            labels("policy.linkerd.io", "server", "secrets-api")
        );
        assert!(matches!(protocol(&server), proxy_protocol::Kind::Opaque(_)));
        assert_eq!(authz_names(&server.authorizations), ["secrets-api"]);
        assert_eq!(
            authn(authz_of(&server, "secrets-api")),
            Authn::Identities(vec![BILLING_ID.into()], vec![])
        );
    }
}

fn authz_of<'a>(
    server: &'a linkerd2_proxy_api::inbound::Server,
    name: &str,
) -> &'a linkerd2_proxy_api::inbound::Authz {
    authz(&server.authorizations, name)
}

/// Fact 20 (E8): mq's AMQP port has no Server; the pod's opaque-ports annotation names it
/// (`amqp` = 5672), so the default server is Opaque. The management port, by contrast, is
/// covered by Server mq-mgmt.
#[tokio::test]
async fn fact_20_named_opaque_port_makes_the_default_server_opaque() {
    let mut h = harness().await;
    let server = h.pod_port("edge", MQ, 5672).await;
    assert_proxy_valid(&server);
    assert_eq!(
        sorted(&server.labels),
        labels("", "default", "all-unauthenticated")
    );
    assert!(matches!(protocol(&server), proxy_protocol::Kind::Opaque(_)));
    assert_eq!(authz_names(&server.authorizations), ["all-unauthenticated"]);
}

/// An unmeshed pod (E11, no `linkerd.io/control-plane-ns` label) is not indexed: NOT_FOUND.
#[tokio::test]
async fn unmeshed_pod_is_unknown() {
    let mut h = harness().await;
    let err = h
        .get_port(&pod_workload("edge", "legacy-4h4nlxbbh8-kczqf"), 8080)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert_eq!(err.message(), "unknown server");
}
