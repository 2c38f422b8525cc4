//! The built `destination` binary in kube mode started before its API server (issue 19 item 3):
//! `/ready` answers `500` saying which kinds have not listed and the connection error their
//! watches retry after, then `200 ok` once the API server is up and the lists are in.

#[path = "../../index/tests/fake_apiserver/mod.rs"]
mod fake_apiserver;
mod support;

use e2e::{Process, free_addr, http_get};
use fake_apiserver::FakeApi;
use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};
use support::{mk_pod, mk_service, mk_slice};

const NS: &str = "emojivoto";

/// A kubeconfig of the cluster at `server`, with a token user.
fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster: {{server: \"{server}\"}}\nusers:\n- name: local\n  user: {{token: t}}\ncontexts:\n- name: local\n  context: {{cluster: local, user: local}}\ncurrent-context: local\n"
    )
}

/// Waits until `/ready` answers a body `done` holds of; fails with the last answer.
async fn wait_ready_body(admin: SocketAddr, done: impl Fn(u16, &str) -> bool) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let answer = http_get(admin, "/ready");
        if let Some((status, body)) = &answer
            && done(*status, body)
        {
            return (*status, body.clone());
        }
        assert!(
            Instant::now() < deadline,
            "/ready never got there: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// Multi-threaded: the scripted API server is served while the test blocks on the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_says_which_kinds_wait_on_the_api_server_then_serves() {
    // Nothing listens at the API server's address yet: every connection is refused.
    let api_addr = free_addr();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kubeconfig");
    std::fs::write(&config, kubeconfig(&format!("http://{api_addr}"))).unwrap();
    let (addr, admin) = (free_addr(), free_addr());
    let args = vec![
        format!("--addr={addr}"),
        format!("--admin-addr={admin}"),
        format!("--kubeconfig={}", config.display()),
        "--enable-ipv6=false".into(),
        "--log-level=warn".into(),
    ];
    let mut process = Process::start(env!("CARGO_BIN_EXE_destination").as_ref(), &args);

    // Every kind is pending, the first five named, each with the refused connection.
    let refused = "(last error: failed to perform initial object list: ServiceError: \
                   client error (Connect): tcp connect error: Connection refused";
    let (status, body) = wait_ready_body(admin, |_, body| body.matches(refused).count() == 5).await;
    assert_eq!(status, 500, "{body}");
    assert!(
        body.starts_with(&format!(
            "not ready: waiting for the initial list of 10 kinds: v1/Service {refused}"
        )),
        "{body}"
    );
    for kind in [
        "discovery.k8s.io/v1/EndpointSlice",
        "v1/Pod",
        "v1/Node",
        "apps/v1/ReplicaSet",
    ] {
        assert!(
            body.contains(&format!(", {kind} {refused}")),
            "{kind}: {body}"
        );
    }
    assert!(body.ends_with("), and 5 more\n"), "{body}");

    // The API server comes up where the kubeconfig points; the watches retry within 30 s.
    let _api = FakeApi::start_at(
        api_addr,
        [
            mk_service(NS, "web-svc", &[("http", 80)]),
            mk_pod(NS, "web-1", "10.2.0.1", "web"),
            mk_slice(
                NS,
                "web-svc-1",
                "web-svc",
                ("http", 8080),
                &[("web-1", "10.2.0.1", true)],
            ),
        ],
    )
    .await;
    process.wait_ready(admin, Duration::from_secs(60));
    assert_eq!(http_get(admin, "/ready"), Some((200, "ok\n".to_string())));
}
