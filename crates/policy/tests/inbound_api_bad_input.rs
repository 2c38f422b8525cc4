//! Requests that name no workload or no valid port, through GetPort and WatchPort (spec §4.1, §9).

mod support;

use support::*;
use tonic::Code;

const WEB: &str = "web-djjwbqr6lt-sfd7g";

async fn harness() -> Harness {
    Harness::start(&fixture_dir("emojivoto")).await
}

/// Asserts that both RPCs refuse `(workload, port)` with `code` and a message starting with
/// `message`.
async fn assert_refused(h: &mut Harness, workload: &str, port: u32, code: Code, message: &str) {
    let get = h.get_port(workload, port).await.unwrap_err();
    assert_eq!(get.code(), code, "GetPort {workload:?} {port}: {get:?}");
    assert!(
        get.message().starts_with(message),
        "GetPort {workload:?} {port}: {:?}",
        get.message()
    );
    let watch = h.watch_port(workload, port).await.unwrap_err();
    assert_eq!(
        watch.code(),
        code,
        "WatchPort {workload:?} {port}: {watch:?}"
    );
    assert_eq!(watch.message(), get.message());
}

#[tokio::test]
async fn invalid_workload_strings() {
    let mut h = harness().await;
    for bad in [
        "",
        "emojivoto",
        ":web",
        "emojivoto:",
        "{not json",
        r#"{"ns":"emojivoto"}"#,
        r#"{"ns":"emojivoto","pod":""}"#,
        r#"{"pod":"web"}"#,
        r#"{"ns":"emojivoto","pod":"a","external_workload":"b"}"#,
    ] {
        assert_refused(
            &mut h,
            bad,
            8080,
            Code::InvalidArgument,
            &format!("Invalid workload: {bad}"),
        )
        .await;
    }
}

#[tokio::test]
async fn a_long_workload_is_cut_in_the_message() {
    let mut h = harness().await;
    let long = "x".repeat(10_000);
    let err = h.get_port(&long, 8080).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().len() < 400, "{}", err.message().len());
    assert!(err.message().starts_with("Invalid workload: xxx"));
}

/// Newcomer finding: names Kubernetes cannot hold were kept per stream; a request over 64 KiB
/// is refused from its length prefix, before it is buffered.
#[tokio::test]
async fn names_too_long_for_kubernetes_and_oversized_requests() {
    let mut h = harness().await;
    let long_name = format!("emojivoto:{}", "p".repeat(254));
    assert_refused(
        &mut h,
        &long_name,
        8080,
        Code::InvalidArgument,
        "Invalid workload: emojivoto:ppp",
    )
    .await;
    let err = h.get_port(&long_name, 8080).await.unwrap_err();
    assert!(
        err.message().ends_with("(name longer than 253 bytes)"),
        "{}",
        err.message()
    );
    let oversized = format!("emojivoto:{}", "p".repeat(70_000));
    assert_refused(
        &mut h,
        &oversized,
        8080,
        Code::OutOfRange,
        "Error, decoded message length too large",
    )
    .await;
    // The server is still fine.
    let workload = pod_workload("emojivoto", WEB);
    assert!(h.get_port(&workload, 80).await.is_ok());
}

#[tokio::test]
async fn ports_outside_1_to_65535() {
    let mut h = harness().await;
    let workload = pod_workload("emojivoto", WEB);
    assert_refused(
        &mut h,
        &workload,
        0,
        Code::InvalidArgument,
        "Invalid port: 0",
    )
    .await;
    assert_refused(
        &mut h,
        &workload,
        70000,
        Code::InvalidArgument,
        "Invalid port: 70000",
    )
    .await;
    assert_refused(
        &mut h,
        &workload,
        65536,
        Code::InvalidArgument,
        "Invalid port: 65536",
    )
    .await;
    // The bounds themselves are fine, declared in the pod or not.
    assert!(h.get_port(&workload, 1).await.is_ok());
    assert!(h.get_port(&workload, 65535).await.is_ok());
}

/// The workload is checked before the port, as upstream does.
#[tokio::test]
async fn workload_is_checked_before_port() {
    let mut h = harness().await;
    let err = h.get_port("nope", 0).await.unwrap_err();
    assert_eq!(
        err.message(),
        "Invalid workload: nope (expected <namespace>:<pod> or a JSON workload)"
    );
}

#[tokio::test]
async fn unknown_workloads_are_not_found() {
    let mut h = harness().await;
    for workload in [
        pod_workload("emojivoto", "nosuch-pod"),
        pod_workload("nosuch-ns", WEB),
        "emojivoto:nosuch-pod".to_string(),
        r#"{"ns":"emojivoto","external_workload":"nosuch"}"#.to_string(),
        // A pod name given as an ExternalWorkload.
        format!(r#"{{"ns":"emojivoto","external_workload":"{WEB}"}}"#),
    ] {
        assert_refused(&mut h, &workload, 8080, Code::NotFound, "unknown server").await;
    }
}
