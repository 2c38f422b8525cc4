//! Bad input never breaks the server: malformed requests get `InvalidArgument` naming the
//! problem, garbage context tokens are ignored, and a broken file in the state directory is
//! skipped while everything else keeps being served.

mod support;

use linkerd2_proxy_api::destination::update::Update;
use support::*;

#[tokio::test]
async fn malformed_paths_are_invalid_arguments_that_name_the_problem() {
    let mut h = Harness::start(&fixture_dir("emojivoto")).await;
    let cases = [
        ("web-svc.emojivoto.svc.cluster.local:0", "out of range"),
        ("web-svc.emojivoto.svc.cluster.local:65536", "out of range"),
        ("web-svc.emojivoto.svc.cluster.local:http", "not a decimal"),
        ("fd00::1:80", "bracketed"),
        ("[fd00::1:80", "IPv6"),
        ("", "empty host"),
        ("10.244.2.19:8080", "IP queries not supported"),
        ("linkerd.io:443", "invalid service"),
        ("web-svc.emojivoto.svc.other.example:80", "invalid service"),
        ("a.b.c.d.svc.cluster.local:80", "invalid service"),
        ("web-svc.emojivoto.svc.cluster.local.:80", "invalid service"),
        ("\u{0}\u{ffff}:80", "a character no DNS name holds"),
        (
            "web_svc.emojivoto.svc.cluster.local:80",
            "a character no DNS name holds",
        ),
    ];
    // Names no Kubernetes object can have: a 64-byte label, a 254-byte name, 60 KB.
    let long_label = format!("{}.emojivoto.svc.cluster.local:80", "a".repeat(64));
    let long_name = format!("{}.svc.cluster.local:80", "a.".repeat(119));
    let huge = format!("{}.emojivoto.svc.cluster.local:80", "a".repeat(60_000));
    let too_long = [long_label, long_name, huge];
    let cases = cases.into_iter().chain(
        too_long
            .iter()
            .map(|path| (path.as_str(), "longer than DNS allows")),
    );
    for (path, needle) in cases {
        let status = h.get(path, "").await.expect_err(path);
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{path}");
        assert!(
            status.message().contains(needle),
            "{path}: {}",
            status.message()
        );
    }
    // A request over 64 KiB is refused from its length prefix, before it is buffered.
    let megabyte = format!("{}.emojivoto.svc.cluster.local:80", "a".repeat(1 << 20));
    let status = h.get(&megabyte, "").await.expect_err("a megabyte path");
    assert_eq!(status.code(), tonic::Code::OutOfRange);
    assert!(
        status.message().contains("the limit is: 65536 bytes"),
        "{}",
        status.message()
    );
    // The server is still fine.
    let mut stream = h
        .get("web-svc.emojivoto.svc.cluster.local:80", "")
        .await
        .unwrap();
    assert_eq!(added(&next(&mut stream).await), [sa("10.244.2.19:8080")]);
}

#[tokio::test]
async fn garbage_context_tokens_are_ignored() {
    let mut h = Harness::start(&fixture_dir("emojivoto")).await;
    for token in [
        "{",
        "ns:a:b",
        "[]",
        "{\"nodeName\": 7}",
        "\u{1}\u{2}",
        &"x".repeat(60_000),
    ] {
        let mut stream = h
            .get("voting-svc.emojivoto.svc.cluster.local:8080", token)
            .await
            .unwrap();
        let Update::Add(set) = next(&mut stream).await else {
            panic!("expected Add")
        };
        assert_eq!(set.addrs.len(), 2, "token {token:.20}");
        assert!(
            set.addrs
                .iter()
                .all(|a| a.metric_labels["zone_locality"] == "unknown")
        );
    }
    // A node that does not exist: no zone, both endpoints, unknown locality.
    let mut stream = h
        .get(
            "voting-svc.emojivoto.svc.cluster.local:8080",
            r#"{"nodeName":"nope"}"#,
        )
        .await
        .unwrap();
    let Update::Add(set) = next(&mut stream).await else {
        panic!("expected Add")
    };
    assert_eq!(set.addrs.len(), 2);
}

#[tokio::test]
async fn malformed_state_files_are_skipped_and_the_rest_is_served() {
    let dir = StateDir::new();
    dir.write_raw(
        "cluster.yaml",
        &std::fs::read_to_string(fixture_dir("emojivoto").join("cluster.yaml")).unwrap(),
    );
    dir.write_raw(
        "broken.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: [unclosed\n",
    );
    dir.write_raw("not-an-object.json", "[1, 2, 3]");
    dir.write_raw(
        "no-name.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {}\n",
    );
    dir.write_raw("binary.yml", "\u{0}\u{1}\u{2}garbage: [");
    // A Pod whose spec does not decode: logged and skipped, the other objects of its file stay.
    dir.write(
        "mixed.yaml",
        &[
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "namespace": "shop"}, "spec": {"containers": "nope"}}),
            mk_service("shop", "web", &[("http", 80)]),
        ],
    );
    let mut h = Harness::start(dir.path()).await;
    let mut stream = h
        .get("web-svc.emojivoto.svc.cluster.local:80", "")
        .await
        .unwrap();
    assert_eq!(added(&next(&mut stream).await), [sa("10.244.2.19:8080")]);
    let mut shop = h.get("web.shop.svc.cluster.local:80", "").await.unwrap();
    assert!(matches!(next(&mut shop).await, Update::NoEndpoints(ne) if ne.exists));

    // A file that breaks mid-edit keeps its last good contents: nothing is removed.
    dir.write_raw("cluster.yaml", "apiVersion: v1\nkind: [\n");
    assert_quiet(&mut stream).await;
}

#[tokio::test]
async fn conflicting_duplicates_keep_the_last_file() {
    let dir = StateDir::new();
    dir.write(
        "a.yaml",
        &[
            mk_service("shop", "web", &[("http", 80)]),
            mk_pod("shop", "web-a", "10.1.0.1", "web"),
        ],
    );
    // The same pod identically (one object), and the service defined differently (conflict).
    dir.write(
        "b.yaml",
        &[
            mk_service("shop", "web", &[("http", 81)]),
            mk_pod("shop", "web-a", "10.1.0.1", "web"),
        ],
    );
    dir.write(
        "c.yaml",
        &[mk_slice(
            "shop",
            "web-1",
            "web",
            ("http", 8080),
            &[("web-a", "10.1.0.1", true)],
        )],
    );
    let mut h = Harness::start(dir.path()).await;
    // b.yaml's, as `kubectl apply -f DIR` (files in path order) leaves it.
    let svc = h.index.service("shop", "web").unwrap();
    assert_eq!(svc.ports.iter().map(|p| p.port).collect::<Vec<_>>(), [81]);
    let mut stream = h.get("web.shop.svc.cluster.local:81", "").await.unwrap();
    assert_eq!(added(&next(&mut stream).await), [sa("10.1.0.1:8080")]);
}
