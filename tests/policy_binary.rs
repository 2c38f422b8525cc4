//! The built `policy-controller` binary in offline mode: start it on a state directory, watch a
//! port as a proxy does, add an AuthorizationPolicy file and receive the new server; SIGTERM
//! ends the watch with `OK`.

use e2e::{Process, binary, fixture, free_addr, http_get};
use linkerd2_proxy_api::inbound::{
    PortSpec, Server, inbound_server_policies_client::InboundServerPoliciesClient,
};
use std::{net::SocketAddr, time::Duration};

/// An AuthorizationPolicy letting ServiceAccount `default` (vote-bot's) reach Server
/// `voting-grpc` too.
const VOTE_BOT_POLICY: &str = r#"
apiVersion: policy.linkerd.io/v1alpha1
kind: AuthorizationPolicy
metadata: {name: voting-from-vote-bot, namespace: emojivoto}
spec:
  targetRef: {group: policy.linkerd.io, kind: Server, name: voting-grpc}
  requiredAuthenticationRefs:
  - {kind: ServiceAccount, name: default}
"#;

fn args(state: &std::path::Path, grpc: SocketAddr, admin: SocketAddr) -> Vec<String> {
    vec![
        format!("--grpc-addr={grpc}"),
        format!("--admin-addr={admin}"),
        format!("--cluster-state={}", state.display()),
        "--admission-controller-disabled".into(),
        "--cluster-networks=10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8".into(),
        "--probe-networks=0.0.0.0/0,::/0".into(),
        "--default-opaque-ports=25,587,3306,4444,5432,6379,9300,11211".into(),
    ]
}

async fn next(stream: &mut tonic::Streaming<Server>) -> Server {
    tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("a server in time")
        .expect("stream ok")
        .expect("stream open")
}

/// The names of a server's authorizations, from their `name` labels, sorted.
fn authz_names(server: &Server) -> Vec<String> {
    let mut names: Vec<String> = server
        .authorizations
        .iter()
        .map(|a| a.labels.get("name").cloned().unwrap_or_default())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn offline_mode_serves_inbound_policy_and_follows_file_edits() {
    let bin = binary("policy", "policy-controller");
    let state = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("emojivoto").join("cluster.yaml"),
        state.path().join("cluster.yaml"),
    )
    .unwrap();
    let (grpc, admin) = (free_addr(), free_addr());
    let mut process = Process::start(&bin, &args(state.path(), grpc, admin));
    process.wait_ready(admin, Duration::from_secs(30));
    assert_eq!(http_get(admin, "/live").map(|r| r.0), Some(200));

    let mut client = InboundServerPoliciesClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let mut stream = client
        .watch_port(PortSpec {
            workload: r#"{"ns":"emojivoto","pod":"voting-qbtpmtmk74-gdg57"}"#.into(),
            port: 8080,
        })
        .await
        .unwrap()
        .into_inner();
    let first = next(&mut stream).await;
    assert_eq!(first.labels["name"], "voting-grpc");
    assert_eq!(first.labels["kind"], "server");
    assert_eq!(authz_names(&first), ["voting-policy"]);

    std::fs::write(state.path().join("policy.yaml"), VOTE_BOT_POLICY).unwrap();
    let second = next(&mut stream).await;
    assert_eq!(
        authz_names(&second),
        ["voting-from-vote-bot", "voting-policy"]
    );

    std::fs::remove_file(state.path().join("policy.yaml")).unwrap();
    assert_eq!(authz_names(&next(&mut stream).await), ["voting-policy"]);

    process.send_sigterm();
    let end = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("stream ends");
    assert!(
        matches!(end, Ok(None)),
        "stream should end with OK: {end:?}"
    );
    let status = process.wait_exit().await;
    assert!(
        status.success(),
        "exit status {status}: {}",
        process.stderr()
    );
}
