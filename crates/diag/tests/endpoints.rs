//! `dst-diag endpoints` as a process against a destination server started in this test on
//! `127.0.0.1:0`, serving the emojivoto fixture with the chart-default flags.

mod support;

use destination::server::bind;
use serde_json::{Value, json};
use support::*;
use tokio::io::AsyncReadExt;

#[tokio::test]
async fn json_shows_the_web_pod() {
    let (addr, _server) = start_server().await;
    let destination = format!("http://{addr}");
    let child = dst_diag(&[
        "endpoints",
        WEB,
        "--destination",
        &destination,
        "-o",
        "json",
    ]);
    let lines = read_lines(child, 1).await;
    let update: Value = serde_json::from_str(&lines[0]).expect("a JSON line");

    let addrs = update["add"]["addrs"]
        .as_array()
        .expect("an Add with addresses");
    assert_eq!(addrs.len(), 1, "{update}");
    let web = &addrs[0];
    assert_eq!(web["addr"], "10.244.2.19:8080");
    assert_eq!(web["weight"], 10000);
    assert_eq!(web["identity"], WEB_ID);
    assert_eq!(web["server_name"], WEB_ID);
    assert_eq!(web["protocol_hint"], "h2");
    assert_eq!(web["opaque_transport_port"], Value::Null);
    assert_eq!(web["authority_override"], Value::Null);
    assert_eq!(web["metric_labels"]["pod"], "web-djjwbqr6lt-sfd7g");
    assert_eq!(web["metric_labels"]["deployment"], "web");
    assert_eq!(web["metric_labels"]["serviceaccount"], "web");
    assert_eq!(web["metric_labels"]["zone"], "eu-west-1c");
    assert_eq!(
        web["http2"]["keep_alive"],
        json!({"interval": {"seconds": 10, "nanos": 0}, "timeout": {"seconds": 3, "nanos": 0}, "while_idle": true})
    );
    assert_eq!(update["add"]["metric_labels"]["namespace"], "emojivoto");
    assert_eq!(update["add"]["metric_labels"]["service"], "web-svc");
}

#[tokio::test]
async fn table_shows_the_web_pod() {
    let (addr, _server) = start_server().await;
    // Without a scheme, as `kubectl port-forward` users would type it.
    let destination = addr.to_string();
    let child = dst_diag(&["endpoints", WEB, "--destination", &destination]);
    let lines = read_lines(child, 10).await;
    assert_eq!(
        lines,
        [
            "ADD 1 address (namespace=emojivoto,service=web-svc)",
            "ADDRESS           CLUSTER  IDENTITY                                                     ZONE        HINT  LABELS",
            "10.244.2.19:8080  local    web.emojivoto.serviceaccount.identity.linkerd.cluster.local  eu-west-1c  h2    \
             control_plane_ns=linkerd,deployment=web,pod=web-djjwbqr6lt-sfd7g,pod_template_hash=djjwbqr6lt,\
             serviceaccount=web,zone_locality=unknown",
        ]
    );
}

#[tokio::test]
async fn ip_authority_is_invalid_argument() {
    let (addr, _server) = start_server().await;
    let destination = format!("http://{addr}");
    let mut child = dst_diag(&[
        "endpoints",
        "10.96.34.218:80",
        "--destination",
        &destination,
        "-o",
        "json",
    ]);
    let status = tokio::time::timeout(TIMEOUT, child.wait())
        .await
        .expect("dst-diag exits in time")
        .expect("exit status");
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .await
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    assert_eq!(status.code(), Some(1), "stderr: {stderr}");
    assert_eq!(stdout, "");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with("dst-diag: Get 10.96.34.218:80: InvalidArgument: "),
        "stderr: {stderr}"
    );
}

/// Tester finding: an upper-case authority of the right form was refused by the server as not
/// `<service>.<namespace>.svc.cluster.local`, with nothing saying that only its case is wrong.
/// The server does not lower-case names (nor does upstream's; Kubernetes names are lower case),
/// so dst-diag asks as typed and the refusal says so, with the lower-case name.
#[tokio::test]
async fn an_upper_case_authority_is_refused_with_the_lower_case_name() {
    let (addr, _server) = start_server().await;
    let destination = format!("http://{addr}");
    let authority = "WEB-SVC.EMOJIVOTO.SVC.CLUSTER.LOCAL:80";
    let child = dst_diag(&["endpoints", authority, "--destination", &destination]);
    let (code, stdout, stderr) = wait_output(child).await;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert_eq!(stdout, "");
    assert_eq!(
        stderr.trim_end(),
        "dst-diag: Get WEB-SVC.EMOJIVOTO.SVC.CLUSTER.LOCAL:80: InvalidArgument: invalid service \
         \"WEB-SVC.EMOJIVOTO.SVC.CLUSTER.LOCAL\": expected <service>.<namespace>.svc.cluster.local \
         or <instance>.<service>.<namespace>.svc.cluster.local (Kubernetes names are lower case: \
         did you mean web-svc.emojivoto.svc.cluster.local:80?)"
    );
}

#[tokio::test]
async fn unreachable_server_is_a_connect_error() {
    // A port that was just free: nothing listens there any more.
    let (listener, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    drop(listener);
    let destination = format!("http://{addr}");
    let mut child = dst_diag(&["endpoints", WEB, "--destination", &destination]);
    let status = tokio::time::timeout(TIMEOUT, child.wait())
        .await
        .expect("dst-diag exits in time")
        .expect("exit status");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    assert_eq!(status.code(), Some(1), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with(&format!("dst-diag: connect to http://{addr}: ")),
        "stderr: {stderr}"
    );
}

#[tokio::test]
async fn an_admin_port_given_as_the_server_gets_a_hint() {
    // Regression: pointing --destination at the admin port printed only tonic's
    // "grpc-status header missing, mapped from HTTP status code 404".
    let (_ready_tx, ready) = tokio::sync::watch::channel(true);
    let (_trigger, shutdown) = linkerd_runtime::shutdown::channel();
    let (admin, _task) = linkerd_runtime::Admin::new(ready, Default::default())
        .bind("127.0.0.1:0".parse().unwrap(), shutdown)
        .await
        .unwrap();
    let destination = format!("http://{admin}");
    let child = dst_diag(&["endpoints", WEB, "--destination", &destination]);
    let (code, stdout, stderr) = wait_output(child).await;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert_eq!(stdout, "");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("did not answer in gRPC") && stderr.contains("admin or webhook port"),
        "stderr: {stderr}"
    );
}

#[tokio::test]
async fn a_tls_port_given_as_the_server_gets_a_hint() {
    // Regression: pointing --destination at the mtls-shim's port (TLS only) printed only
    // "Cancelled". A TLS server answers a plaintext client with a TLS alert record (here fatal,
    // decode_error) and closes, or just closes: both get the hint.
    const TLS_ALERT: &[u8] = &[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32];
    for answer in [TLS_ALERT, &[]] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut preface = [0u8; 24];
                let _ = conn.read_exact(&mut preface).await;
                let _ = conn.write_all(answer).await;
            }
        });
        let destination = format!("http://{addr}");
        let child = dst_diag(&["endpoints", WEB, "--destination", &destination]);
        let (code, stdout, stderr) = wait_output(child).await;
        assert_eq!(code, Some(1), "stderr: {stderr}");
        assert_eq!(stdout, "");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.starts_with(&format!("dst-diag: Get {WEB}: ")),
            "stderr: {stderr}"
        );
        assert!(
            stderr.contains("it takes mTLS only") && stderr.contains("18086 (destination)"),
            "answer {answer:?}: stderr: {stderr}"
        );
    }
}

#[tokio::test]
async fn a_server_that_never_answers_ends_the_run_with_a_message() {
    // Regression: a port that accepts TCP connections and never speaks HTTP/2 hung dst-diag
    // forever. It now waits `RESPONSE_TIMEOUT` (10 s) for the response headers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let destination = format!("http://{addr}");
    let child = dst_diag(&["endpoints", WEB, "--destination", &destination]);
    let (code, stdout, stderr) = wait_output(child).await;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert_eq!(stdout, "");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "dst-diag: Get {WEB}: no response in 10s: is the address a plaintext gRPC port of the right server?"
        )
    );
}
