//! The drop-in image's binaries run with the exact arguments of upstream's chart
//! (`tests/fixtures/upstream-chart/*.args`) against a loopback API server, as the containers of
//! an installed Linkerd's `linkerd-destination` Deployment run them after `kubectl set image`:
//! `/controller destination ...`, `/controller sp-validator ...` and
//! `/linkerd-policy-controller ...` (the image's name of `policy-controller`). Each must start,
//! become ready, and answer: a `Get`, an admission review, an inbound policy watch.
//!
//! The chart's listen addresses (`:8086`, `0.0.0.0:9990`, ...) and certificate paths are fixed;
//! the test appends overrides after them, as the chart's `additionalArgs` come after its own
//! arguments (the last value of a flag wins, as with Go's flags), so that tests can run side
//! by side on one machine.

use e2e::{
    Process, binary, chart_args, fixture, fixture_objects, free_addr, http_get, https_post,
    kube_api::{FakeApi, destination_deployment},
    write_localhost_cert,
};
use linkerd2_proxy_api::{
    destination::{
        GetDestination, destination_client::DestinationClient, protocol_hint, tls_identity,
        update::Update,
    },
    inbound::{PortSpec, inbound_server_policies_client::InboundServerPoliciesClient},
};
use serde_json::json;
use std::{net::SocketAddr, time::Duration};

/// The API server with the emojivoto cluster and the Deployment owning the status Lease, and a
/// kubeconfig for it.
async fn cluster() -> (FakeApi, tempfile::TempDir) {
    let mut objects = fixture_objects(&fixture("emojivoto").join("cluster.yaml"));
    objects.push(destination_deployment());
    let api = FakeApi::start(objects, 1).await;
    let dir = tempfile::tempdir().unwrap();
    api.write_kubeconfig(0, &dir.path().join("kubeconfig"));
    (api, dir)
}

/// Ends `process` with SIGTERM and returns what it logged.
async fn stop(mut process: Process) -> String {
    process.send_sigterm();
    let status = process.wait_exit().await;
    let stderr = process.stderr();
    assert!(status.success(), "exit status {status}: {stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_destination_serves_with_the_charts_arguments() {
    let controller = binary("controller", "controller");
    // `/controller destination` runs the `destination` binary beside it.
    binary("destination", "destination");
    let (_api, dir) = cluster().await;
    let kubeconfig = dir.path().join("kubeconfig");
    let (addr, admin) = (free_addr(), free_addr());

    let mut args = chart_args("destination");
    assert_eq!(args[0], "destination");
    args.extend([format!("-addr={addr}"), format!("-metrics-addr={admin}")]);
    let mut process = Process::start_with_env(
        &controller,
        &args,
        &[
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("HOSTNAME", "linkerd-destination-0"),
        ],
    );
    process.wait_ready(admin, Duration::from_secs(60));
    assert_eq!(http_get(admin, "/ping").map(|r| r.0), Some(200));

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
    let update = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("an update in time")
        .unwrap()
        .unwrap();
    let Some(Update::Add(set)) = update.update else {
        panic!("expected Add: {update:?}")
    };
    let [endpoint] = set.addrs.as_slice() else {
        panic!("one endpoint expected: {set:?}")
    };
    assert_eq!(
        SocketAddr::try_from(endpoint.addr.unwrap()).unwrap(),
        "10.244.2.19:8080".parse().unwrap()
    );
    // -identity-trust-domain=cluster.local, -controller-namespace=linkerd:
    let Some(tls_identity::Strategy::DnsLikeIdentity(identity)) = endpoint
        .tls_identity
        .as_ref()
        .and_then(|t| t.strategy.clone())
    else {
        panic!("a meshed endpoint has an identity: {endpoint:?}")
    };
    assert_eq!(
        identity.name,
        "web.emojivoto.serviceaccount.identity.linkerd.cluster.local"
    );
    // -enable-h2-upgrade=true and -outbound-transport-mode=transport-header:
    let hint = endpoint.protocol_hint.as_ref().unwrap();
    assert!(matches!(
        hint.protocol,
        Some(protocol_hint::Protocol::H2(_))
    ));
    assert_eq!(hint.opaque_transport.unwrap().inbound_port, 4143);
    // --meshed-http2-client-params:
    let keep_alive = endpoint.http2.unwrap().keep_alive.unwrap();
    assert_eq!(keep_alive.interval.unwrap().seconds, 10);
    assert_eq!(keep_alive.timeout.unwrap().seconds, 3);
    assert!(keep_alive.while_idle);

    drop(stream);
    let logged = stop(process).await;
    for flag in ["-enable-endpoint-slices=true", "-enable-pprof=false"] {
        assert!(
            logged.contains(&format!(
                "{flag}: accepted as upstream's chart passes it, not implemented here"
            )),
            "{logged}"
        );
    }
}

#[tokio::test]
async fn controller_sp_validator_serves_with_the_charts_arguments() {
    let controller = binary("controller", "controller");
    binary("sp-validator", "sp-validator");
    let dir = tempfile::tempdir().unwrap();
    let ca = write_localhost_cert(dir.path());
    let (addr, admin) = (free_addr(), free_addr());

    let mut args = chart_args("sp-validator");
    assert_eq!(args[0], "sp-validator");
    args.extend([
        format!("-addr={addr}"),
        format!("-metrics-addr={admin}"),
        format!(
            "--server-tls-certs={}",
            dir.path().join("tls.crt").display()
        ),
        format!("--server-tls-key={}", dir.path().join("tls.key").display()),
    ]);
    let mut process = Process::start_with_env(&controller, &args, &[]);
    process.wait_ready(admin, Duration::from_secs(30));

    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "9a1c0de2-0000-4000-8000-0000000000d1",
            "kind": {"group": "linkerd.io", "version": "v1alpha2", "kind": "ServiceProfile"},
            "resource": {"group": "linkerd.io", "version": "v1alpha2", "resource": "serviceprofiles"},
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin"},
            "object": {
                "apiVersion": "linkerd.io/v1alpha2",
                "kind": "ServiceProfile",
                "metadata": {"name": "web-svc.emojivoto.svc.cluster.local", "namespace": "emojivoto"},
                "spec": {"routes": [{"name": "list", "condition": {}}]},
            },
        },
    });
    let (code, answer) = https_post(addr, &ca, &review).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(
        answer["response"]["uid"],
        "9a1c0de2-0000-4000-8000-0000000000d1"
    );
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(
        answer["response"]["status"]["message"],
        "ServiceProfile \"web-svc.emojivoto.svc.cluster.local\" has a route with an invalid condition: A request match must have a field set"
    );

    let logged = stop(process).await;
    assert!(
        logged.contains("-enable-pprof=false: accepted as upstream's chart passes it"),
        "{logged}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linkerd_policy_controller_serves_with_the_charts_arguments() {
    // The image holds this binary as /linkerd-policy-controller.
    let policy = binary("policy", "policy-controller");
    let (_api, dir) = cluster().await;
    let kubeconfig = dir.path().join("kubeconfig");
    let ca = write_localhost_cert(dir.path());
    let (grpc, admin, webhook) = (free_addr(), free_addr(), free_addr());

    let mut args = chart_args("policy");
    args.extend([
        format!("--admin-addr={admin}"),
        format!("--grpc-addr={grpc}"),
        format!("--server-addr={webhook}"),
        format!("--server-tls-key={}", dir.path().join("tls.key").display()),
        format!(
            "--server-tls-certs={}",
            dir.path().join("tls.crt").display()
        ),
    ]);
    let mut process = Process::start_with_env(
        &policy,
        &args,
        &[
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("HOSTNAME", "linkerd-destination-0"),
        ],
    );
    process.wait_ready(admin, Duration::from_secs(60));

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
    let server = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("a server in time")
        .unwrap()
        .unwrap();
    assert_eq!(server.labels["name"], "voting-grpc");
    assert_eq!(server.labels["kind"], "server");

    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "9a1c0de2-0000-4000-8000-0000000000d2",
            "kind": {"group": "policy.linkerd.io", "version": "v1beta3", "kind": "Server"},
            "resource": {"group": "policy.linkerd.io", "version": "v1beta3", "resource": "servers"},
            "operation": "CREATE",
            "namespace": "emojivoto",
            "name": "web-http",
            "userInfo": {"username": "kubernetes-admin"},
            "object": {
                "apiVersion": "policy.linkerd.io/v1beta3",
                "kind": "Server",
                "metadata": {"name": "web-http", "namespace": "emojivoto"},
                "spec": {
                    "podSelector": {"matchLabels": {"app": "web-svc"}},
                    "port": "http",
                    "accessPolicy": "open",
                },
            },
        },
    });
    let (code, answer) = https_post(webhook, &ca, &review).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(
        answer["response"]["uid"],
        "9a1c0de2-0000-4000-8000-0000000000d2"
    );
    assert_eq!(
        answer["response"]["status"]["message"],
        "Invalid 'accessPolicy' field: invalid mode: \"open\""
    );

    drop(stream);
    stop(process).await;
}
