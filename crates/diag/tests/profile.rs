//! `dst-diag profile` as a process against a destination server started in this test on
//! `127.0.0.1:0`, serving the emojivoto fixture with the chart-default flags.

mod support;

use serde_json::{Value, json};
use support::*;

const WEB_ROUTES: [&str; 5] = [
    "GET /api/list",
    "GET /api/vote",
    "GET /api/leaderboard",
    "GET /js",
    "GET /",
];

#[tokio::test]
async fn table_shows_the_web_svc_service_profile() {
    let (addr, _server) = start_server().await;
    let destination = addr.to_string();
    let child = dst_diag(&["profile", WEB, "--destination", &destination]);
    let lines = read_lines(child, 30).await;
    assert_eq!(
        lines,
        [
            "PROFILE web-svc.emojivoto.svc.cluster.local",
            "opaque protocol: false",
            "parent:          Service emojivoto/web-svc port 80",
            "profile:         ServiceProfile.linkerd.io emojivoto/web-svc.emojivoto.svc.cluster.local",
            "retry budget:    ratio 0.25, min 5 retries/s, ttl 15s",
            "routes:          5",
            "ROUTE                 CONDITION                               TIMEOUT  RETRYABLE  RESPONSE CLASSES",
            "GET /api/list         all(method GET, path /api/list)         -        yes        -",
            "GET /api/vote         all(method GET, path /api/vote)         500ms    no         status 500-599 → failure",
            "GET /api/leaderboard  all(method GET, path /api/leaderboard)  1s       yes        -",
            "GET /js               all(method GET, path /js)               -        no         -",
            "GET /                 all(method GET, path /)                 -        no         -",
            "dst overrides:   none",
            "endpoint:        none",
        ]
    );
}

#[tokio::test]
async fn json_shows_the_web_svc_service_profile() {
    let (addr, _server) = start_server().await;
    let destination = format!("http://{addr}");
    let child = dst_diag(&[
        "profile",
        WEB,
        "--destination",
        &destination,
        "--context-token",
        r#"{"ns":"emojivoto"}"#,
        "-o",
        "json",
    ]);
    let lines = read_lines(child, 1).await;
    let profile: Value = serde_json::from_str(&lines[0]).expect("a JSON line");

    assert_eq!(
        profile["fully_qualified_name"],
        "web-svc.emojivoto.svc.cluster.local"
    );
    assert_eq!(profile["opaque_protocol"], false);
    assert_eq!(
        profile["retry_budget"],
        json!({"retry_ratio": 0.25, "min_retries_per_second": 5, "ttl": {"seconds": 15, "nanos": 0}})
    );
    assert_eq!(profile["parent_ref"]["resource"]["kind"], "Service");
    assert_eq!(profile["parent_ref"]["resource"]["name"], "web-svc");
    assert_eq!(profile["parent_ref"]["resource"]["port"], 80);
    assert_eq!(profile["profile_ref"]["resource"]["kind"], "ServiceProfile");
    assert_eq!(profile["endpoint"], Value::Null);
    assert_eq!(profile["dst_overrides"], json!([]));

    let routes = profile["routes"].as_array().expect("routes");
    let names: Vec<&str> = routes.iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(names, WEB_ROUTES);
    let vote = &routes[1];
    assert_eq!(
        vote["condition"],
        json!({"all": [{"method": "GET"}, {"path": "/api/vote"}]})
    );
    assert_eq!(vote["timeout"], json!({"seconds": 0, "nanos": 500_000_000}));
    assert_eq!(vote["is_retryable"], false);
    assert_eq!(
        vote["response_classes"],
        json!([{"condition": {"status": {"min": 500, "max": 599}}, "is_failure": true}])
    );
    assert_eq!(routes[0]["is_retryable"], true);
    assert_eq!(routes[2]["timeout"], json!({"seconds": 1, "nanos": 0}));
}

#[tokio::test]
async fn pod_ip_shows_the_endpoint_profile() {
    let (addr, _server) = start_server().await;
    let destination = addr.to_string();
    let child = dst_diag(&["profile", "10.244.2.19:8080", "--destination", &destination]);
    let lines = read_lines(child, 30).await;
    assert_eq!(
        lines,
        [
            "PROFILE <no name>",
            "opaque protocol: false",
            "parent:          -",
            "profile:         -",
            "retry budget:    ratio 0.2, min 10 retries/s, ttl 10s",
            "routes:          none",
            "dst overrides:   none",
            "endpoint:        10.244.2.19:8080",
            "ADDRESS           IDENTITY                                                     ZONE  HINT  LABELS",
            "10.244.2.19:8080  web.emojivoto.serviceaccount.identity.linkerd.cluster.local  -     h2    \
             control_plane_ns=linkerd,deployment=web,namespace=emojivoto,pod=web-djjwbqr6lt-sfd7g,\
             pod_template_hash=djjwbqr6lt,serviceaccount=web",
        ]
    );

    let child = dst_diag(&[
        "profile",
        "10.244.2.19:8080",
        "--destination",
        &destination,
        "-o",
        "json",
    ]);
    let lines = read_lines(child, 1).await;
    let profile: Value = serde_json::from_str(&lines[0]).expect("a JSON line");
    let endpoint = &profile["endpoint"];
    assert_eq!(endpoint["addr"], "10.244.2.19:8080");
    assert_eq!(endpoint["identity"], WEB_ID);
    assert_eq!(endpoint["server_name"], WEB_ID);
    assert_eq!(endpoint["protocol_hint"], "h2");
    assert_eq!(endpoint["metric_labels"]["pod"], "web-djjwbqr6lt-sfd7g");
    assert_eq!(profile["routes"], json!([]));
}

#[tokio::test]
async fn unknown_service_is_a_one_line_not_found() {
    let (addr, _server) = start_server().await;
    let destination = format!("http://{addr}");
    let target = "nosuch.emojivoto.svc.cluster.local:80";
    let child = dst_diag(&["profile", target, "--destination", &destination]);
    let (code, stdout, stderr) = wait_output(child).await;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert_eq!(stdout, "");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with(&format!("dst-diag: GetProfile {target}: NotFound: ")),
        "stderr: {stderr}"
    );
}

/// The destination sends no endpoint profile for a pod whose proxy container has no inbound
/// listen address (spec §D.5); `dst-diag profile` says so after a while instead of staying
/// silent (newcomer finding), and keeps waiting.
#[tokio::test]
async fn a_silent_profile_is_explained_while_waiting() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bare\n  namespace: shop\n  labels: {linkerd.io/control-plane-ns: linkerd}\nspec:\n  containers:\n  - name: linkerd-proxy\n  - name: app\n    ports: [{name: http, containerPort: 8080}]\nstatus: {phase: Running, podIP: 10.9.9.9, podIPs: [{ip: 10.9.9.9}]}\n",
    )
    .unwrap();
    let (addr, _server) = start_server_on(dir.path()).await;
    let destination = addr.to_string();
    let mut child = dst_diag(&["profile", "10.9.9.9:8080", "--destination", &destination]);
    let stderr = child.stderr.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
    let line = tokio::time::timeout(std::time::Duration::from_secs(15), lines.next_line())
        .await
        .expect("a hint in time")
        .unwrap()
        .expect("a line");
    assert!(
        line.starts_with("dst-diag: no profile for 10.9.9.9:8080 after 5s; still waiting."),
        "{line}"
    );
    assert!(
        line.contains("LINKERD2_PROXY_INBOUND_LISTEN_ADDR"),
        "{line}"
    );
    // Still running: a proxy would keep waiting too.
    assert!(child.try_wait().unwrap().is_none());
}
