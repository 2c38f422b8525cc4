//! The built `destination` binary in offline mode: start it on a state directory, connect as a
//! proxy would, edit a file, receive the delta; then SIGTERM ends the stream with `OK`.

use e2e::{Process, binary, fixture, free_addr, http_get};
use linkerd2_proxy_api::destination::{
    GetDestination, destination_client::DestinationClient, update::Update,
};
use std::{net::SocketAddr, time::Duration};

const EXTRA_WEB_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web-djjwbqr6lt-extra
  namespace: emojivoto
  labels: {app: web-svc, linkerd.io/control-plane-ns: linkerd, pod-template-hash: djjwbqr6lt}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-djjwbqr6lt, uid: x, controller: true}]
spec:
  serviceAccountName: web
  nodeName: ip-10-20-1-11.eu-west-1.compute.internal
  containers:
  - name: linkerd-proxy
    env:
    - {name: LINKERD2_PROXY_INBOUND_LISTEN_ADDR, value: "0.0.0.0:4143"}
    - {name: LINKERD2_PROXY_ADMIN_LISTEN_ADDR, value: "0.0.0.0:4191"}
    - {name: LINKERD2_PROXY_CONTROL_LISTEN_ADDR, value: "127.0.0.1:4190"}
  - name: web-svc
    ports: [{name: http, containerPort: 8080}]
status:
  phase: Running
  podIPs: [{ip: 10.244.0.99}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-svc-extra
  namespace: emojivoto
  labels: {kubernetes.io/service-name: web-svc}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.244.0.99]
  conditions: {ready: true}
  zone: eu-west-1a
  targetRef: {kind: Pod, name: web-djjwbqr6lt-extra, namespace: emojivoto}
"#;

fn args(state: &std::path::Path, addr: SocketAddr, admin: SocketAddr) -> Vec<String> {
    vec![
        format!("--addr={addr}"),
        format!("--admin-addr={admin}"),
        format!("--cluster-state={}", state.display()),
        "--enable-ipv6=false".into(),
        "--default-opaque-ports=25,587,3306,4444,5432,6379,9300,11211".into(),
        "--log-level=debug".into(),
    ]
}

fn addrs(update: &Update) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = match update {
        Update::Add(set) => set
            .addrs
            .iter()
            .map(|a| a.addr.unwrap().try_into().unwrap())
            .collect(),
        Update::Remove(set) => set.addrs.iter().map(|a| (*a).try_into().unwrap()).collect(),
        Update::NoEndpoints(_) => vec![],
    };
    out.sort();
    out
}

async fn next(stream: &mut tonic::Streaming<linkerd2_proxy_api::destination::Update>) -> Update {
    tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("an update in time")
        .expect("stream ok")
        .expect("stream open")
        .update
        .unwrap()
}

#[tokio::test]
async fn offline_mode_serves_and_follows_file_edits() {
    let bin = binary("destination", "destination");
    let state = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("emojivoto").join("cluster.yaml"),
        state.path().join("cluster.yaml"),
    )
    .unwrap();
    let (addr, admin) = (free_addr(), free_addr());
    let mut process = Process::start(&bin, &args(state.path(), addr, admin));
    process.wait_ready(admin, Duration::from_secs(30));
    assert_eq!(http_get(admin, "/live").map(|r| r.0), Some(200));
    let (code, metrics) = http_get(admin, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(
        metrics.contains("endpointslices_cache_size{cluster=\"local\"} 3"),
        "{metrics}"
    );

    let mut client = DestinationClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut stream =
        client
            .get(GetDestination {
                scheme: "k8s".into(),
                path: "web-svc.emojivoto.svc.cluster.local:80".into(),
                context_token:
                    r#"{"ns":"emojivoto","nodeName":"ip-10-20-1-11.eu-west-1.compute.internal"}"#
                        .into(),
            })
            .await
            .unwrap()
            .into_inner();
    let first = next(&mut stream).await;
    assert_eq!(
        addrs(&first),
        ["10.244.2.19:8080".parse::<SocketAddr>().unwrap()]
    );

    // A new file: one more endpoint, local to the client's zone.
    std::fs::write(state.path().join("extra.yaml"), EXTRA_WEB_POD).unwrap();
    let Update::Add(set) = next(&mut stream).await else {
        panic!("expected Add")
    };
    assert_eq!(set.addrs.len(), 1);
    let added = &set.addrs[0];
    assert_eq!(
        SocketAddr::try_from(added.addr.unwrap()).unwrap(),
        "10.244.0.99:8080".parse().unwrap()
    );
    assert_eq!(added.metric_labels["zone_locality"], "local");
    assert_eq!(added.metric_labels["deployment"], "web");

    // The file removed: its endpoint goes.
    std::fs::remove_file(state.path().join("extra.yaml")).unwrap();
    let removed = next(&mut stream).await;
    assert!(matches!(removed, Update::Remove(_)));
    assert_eq!(
        addrs(&removed),
        ["10.244.0.99:8080".parse::<SocketAddr>().unwrap()]
    );

    // Two file reads, two changes to the one stream: two convergence observations (the first
    // message answered the request and is not one). The process metrics are there too.
    let (_, metrics) = http_get(admin, "/metrics").unwrap();
    assert!(
        metrics.contains("stream_convergence_seconds_count{api=\"Get\"} 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("streams_behind{api=\"Get\"} 0\n"),
        "{metrics}"
    );
    for name in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(metrics.contains(name), "{name} in {metrics}");
    }

    // An object that does not decode as its kind is skipped, and the log names its file.
    std::fs::write(
        state.path().join("bad-service.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: bad, namespace: emojivoto}\nspec: {ports: not-a-list}\n",
    )
    .unwrap();
    let counted = "index_invalid_objects_total{cluster=\"local\",kind=\"Service\"} 1";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !http_get(admin, "/metrics").is_some_and(|(_, m)| m.contains(counted)) {
        assert!(
            std::time::Instant::now() < deadline,
            "{counted} not reached"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // SIGTERM: the stream ends with OK and the process exits cleanly.
    process.send_sigterm();
    let end = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("stream ends");
    assert!(
        matches!(end, Ok(None)),
        "stream should end with OK: {end:?}"
    );
    let status = process.wait_exit().await;
    let stderr = process.stderr();
    assert!(status.success(), "exit status {status}: {stderr}");
    let skipped: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("does not decode"))
        .collect();
    assert_eq!(skipped.len(), 1, "{stderr}");
    assert!(skipped[0].contains("bad-service.yaml"), "{}", skipped[0]);
    assert!(skipped[0].contains("spec.ports"), "{}", skipped[0]);
}

#[tokio::test]
async fn bad_start_up_arguments_fail_with_a_clear_message() {
    let bin = binary("destination", "destination");
    let missing = "/nonexistent/cluster-state";
    let out = std::process::Command::new(&bin)
        .args([
            format!("--cluster-state={missing}"),
            "--addr=127.0.0.1:0".into(),
            "--admin-addr=127.0.0.1:0".into(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(missing), "{stderr}");
    // Regression: plain logs carried ANSI colour codes into files and pipes.
    assert!(!stderr.contains('\x1b'), "{stderr:?}");

    // A fatal error is one log line in the chosen format, its cause said once, never anyhow's
    // multi-line report or a backtrace (regression: both were printed with RUST_BACKTRACE=1).
    let out = std::process::Command::new(&bin)
        .args([
            format!("--cluster-state={missing}"),
            "--addr=127.0.0.1:0".into(),
            "--admin-addr=127.0.0.1:0".into(),
            "--log-format=json".into(),
        ])
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Nothing claims to serve the directory before the error.
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(missing)).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let line: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON log line");
    assert_eq!(line["level"], "ERROR", "{line}");
    let error = line["fields"]["error"].as_str().unwrap();
    assert_eq!(
        error.matches("No such file or directory").count(),
        1,
        "{error}"
    );
    for line in stderr.lines() {
        assert!(line.starts_with('{'), "not a JSON line: {line}");
    }
    assert!(!stderr.contains("backtrace"), "{stderr}");

    let out = std::process::Command::new(&bin)
        .arg("--enable-ipv6=perhaps")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("perhaps"));

    let out = std::process::Command::new(&bin)
        .args(["--cluster-state=.", "--meshed-http2-client-params={"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("meshed-http2-client-params"));
}
