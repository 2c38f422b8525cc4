//! `dst-diag explain inbound` as a process, on the bundled emojivoto state (and the explain
//! fixture for a rate-limited route): each decision is asked offline (`--cluster-state`) and of
//! a policy controller started in this test (`--policy`), and both must print the same.

mod explain_support;

use explain_support::*;

#[tokio::test]
async fn an_mtls_client_is_allowed_on_web_api() {
    let cluster = Cluster::start("emojivoto").await;
    let run = cluster
        .explain(&[
            "inbound",
            WEB_POD,
            "8080",
            "--client-identity",
            VOTE_BOT_ID,
            "--client-ip",
            "10.244.0.30",
            "--path",
            "/api/list",
        ])
        .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stderr, "");
    assert_eq!(
        run.lines(),
        [
            "server:     server:web-http",
            "protocol:   HTTP/1",
            &format!("client:     10.244.0.30, mTLS identity {VOTE_BOT_ID}"),
            "request:    GET /api/list",
            "route httproute.policy.linkerd.io:web-api: selected: rule 1 matches method=GET path=/api/list",
            "route httproute.gateway.networking.k8s.io:web-static: not selected: matches less specifically (rule 1 matches path^=/)",
            &format!(
                "authorization authorizationpolicy:web-api (route): admits: 10.244.0.30 is in 0.0.0.0/0; identity {VOTE_BOT_ID} is listed"
            ),
            "authorization default:localhost (proxy): not reached",
            "rate limit: none",
            "decision:   allowed by authorizationpolicy:web-api on route httproute.policy.linkerd.io:web-api",
        ]
    );
}

#[tokio::test]
async fn an_unauthenticated_client_is_denied_on_web_api() {
    let cluster = Cluster::start("emojivoto").await;
    let run = cluster
        .explain(&[
            "inbound",
            WEB_POD,
            "8080",
            "--client-ip",
            "10.244.0.30",
            "--path",
            "/api/vote",
        ])
        .await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let lines = run.lines();
    assert_eq!(lines[2], "client:     10.244.0.30, not mTLS");
    assert_eq!(
        lines[4],
        "route httproute.policy.linkerd.io:web-api: selected: rule 1 matches method=GET path=/api/vote"
    );
    assert_eq!(
        lines[6],
        format!(
            "authorization authorizationpolicy:web-api (route): does not admit: no authentication: \
             it requires one of the identities {VOTE_BOT_ID}, \
             *.ingress-nginx.serviceaccount.identity.linkerd.cluster.local, and the client is not mTLS"
        )
    );
    assert_eq!(
        lines[7],
        "authorization default:localhost (proxy): does not admit: network not covered: \
         10.244.0.30 is not 127.0.0.1 or ::1"
    );
    let denial = "no authorization of route httproute.policy.linkerd.io:web-api admits the client \
                  (the proxy answers HTTP 403)";
    assert_eq!(
        lines.last().copied(),
        Some(&*format!("decision:   denied: {denial}"))
    );
    assert_eq!(run.stderr, format!("dst-diag: denied: {denial}\n"));
}

#[tokio::test]
async fn a_probe_path_is_allowed() {
    let cluster = Cluster::start("emojivoto").await;
    // The proxy's admin port, where the kubelet probes /live and /ready.
    let run = cluster
        .explain(&[
            "inbound",
            WEB_POD,
            "4191",
            "--client-ip",
            "10.244.2.1",
            "--path",
            "/ready",
        ])
        .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let lines = run.lines();
    assert_eq!(lines[0], "server:     default:all-unauthenticated");
    assert_eq!(lines[1], "protocol:   Detect (timeout 10s)");
    assert_eq!(
        &lines[5..],
        [
            "route default:default: not selected: matches less specifically (rule 1 matches path^=/)",
            "route default:probe: selected: rule 1 matches method=GET path=/ready",
            "authorization default:probe (route): admits: 10.244.2.1 is in 0.0.0.0/0; unauthenticated clients are allowed",
            "authorization default:all-unauthenticated (server): not reached",
            "authorization default:localhost (proxy): not reached",
            "rate limit: none",
            "decision:   allowed by default:probe on route default:probe",
        ]
    );
}

#[tokio::test]
async fn a_probe_path_is_allowed_under_a_deny_default() {
    let cluster = Cluster::start("emojivoto").await;
    let args = |path: &'static str| {
        [
            "inbound",
            WEB_POD,
            "4191",
            "--client-ip",
            "10.244.2.1",
            "--path",
            path,
            "--default-policy",
            "deny",
        ]
    };
    // Offline only: the test's controller runs with the chart's all-unauthenticated.
    let run = cluster.offline(&args("/live")).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.lines()[0], "server:     default:deny");
    assert_eq!(
        run.lines().last().copied(),
        Some("decision:   allowed by default:probe on route default:probe")
    );
    let run = cluster.offline(&args("/metrics")).await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.lines()
            .contains(&"authorizations: the controller sent none for this route or server"),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn a_port_without_a_server_uses_the_default_policy() {
    let cluster = Cluster::start("emojivoto").await;
    let run = cluster
        .explain(&["inbound", WEB_POD, "9999", "--client-ip", "10.244.0.30"])
        .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.lines(),
        [
            "server:     default:all-unauthenticated",
            "protocol:   Detect (timeout 10s)",
            "client:     10.244.0.30, not mTLS",
            "request:    GET /",
            "            (the port detects the protocol: the request is taken as HTTP; a non-HTTP connection is checked against the server's authorizations)",
            "route default:default: selected: rule 1 matches path^=/",
            "authorization default:all-unauthenticated (server): admits: 10.244.0.30 is in 0.0.0.0/0; unauthenticated clients are allowed",
            "authorization default:localhost (proxy): not reached",
            "rate limit: none",
            "decision:   allowed by default:all-unauthenticated on route default:default",
        ]
    );
}

#[tokio::test]
async fn a_network_not_covered_is_denied() {
    let cluster = Cluster::start("emojivoto").await;
    // The external VM that NetworkAuthentication cluster-network excepts.
    let run = cluster
        .explain(&["inbound", WEB_POD, "8080", "--client-ip", "10.20.3.200"])
        .await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(
        &run.lines()[4..],
        [
            "route httproute.policy.linkerd.io:web-api: does not match: rule 1: path is not /api/list, path is not /api/vote, path is not /api/leaderboard",
            "route httproute.gateway.networking.k8s.io:web-static: selected: rule 1 matches path^=/",
            "authorization authorizationpolicy:web-static (route): does not admit: network not covered: 10.20.3.200 is in 10.20.0.0/16 but excepted by 10.20.3.200/32",
            "authorization default:localhost (proxy): does not admit: network not covered: 10.20.3.200 is not 127.0.0.1 or ::1",
            "rate limit: none",
            "decision:   denied: no authorization of route httproute.gateway.networking.k8s.io:web-static admits the client (the proxy answers HTTP 403)",
        ]
    );
    // Its neighbour is in the network.
    let run = cluster
        .explain(&["inbound", WEB_POD, "8080", "--client-ip", "10.20.3.201"])
        .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.lines()[6],
        "authorization authorizationpolicy:web-static (route): admits: 10.20.3.201 is in 10.20.0.0/16; unauthenticated clients are allowed"
    );
}

#[tokio::test]
async fn grpc_calls_to_voting_by_identity() {
    let cluster = Cluster::start("emojivoto").await;
    let call = |id: &'static str| {
        [
            "inbound",
            VOTING_POD,
            "8080",
            "--client-identity",
            id,
            "--grpc-service",
            "emojivoto.v1.VotingService",
            "--grpc-method",
            "VoteDoughnut",
        ]
    };
    let run = cluster.explain(&call(WEB_ID)).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        &run.lines()[1..],
        [
            "protocol:   gRPC",
            &format!("client:     address not given, mTLS identity {WEB_ID}"),
            "request:    POST /emojivoto.v1.VotingService/VoteDoughnut",
            "route default:default: selected: rule 1 matches *",
            &format!(
                "authorization authorizationpolicy:voting-policy (server): admits: 0.0.0.0/0 covers every address; identity {WEB_ID} is listed"
            ),
            "authorization default:localhost (proxy): not reached",
            "rate limit: none (gRPC servers carry none)",
            "decision:   allowed by authorizationpolicy:voting-policy on route default:default",
        ]
    );
    let run = cluster.explain(&call(VOTE_BOT_ID)).await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(
        run.lines()[5],
        format!(
            "authorization authorizationpolicy:voting-policy (server): does not admit: wrong identity: {VOTE_BOT_ID} is not {WEB_ID}"
        )
    );
    assert_eq!(
        run.stderr,
        "dst-diag: denied: no authorization of route default:default admits the client \
         (the proxy answers gRPC status PERMISSION_DENIED)\n"
    );
}

#[tokio::test]
async fn a_rate_limited_route() {
    let cluster = Cluster::start("explain").await;
    let request = |id: &'static str| {
        [
            "inbound",
            ORDERS_POD,
            "8080",
            "--client-identity",
            id,
            "--client-ip",
            "10.244.0.9",
            "--path",
            "/orders/42",
        ]
    };
    let batch = "batch.shop.serviceaccount.identity.linkerd.cluster.local";
    let run = cluster.explain(&request(batch)).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        &run.lines()[4..],
        [
            "route httproute.gateway.networking.k8s.io:orders-api: selected: rule 1 matches path^=/orders",
            &format!(
                "authorization authorizationpolicy:orders-api (route): admits: 10.244.0.9 is in 0.0.0.0/0; identity {batch} ends with .shop.serviceaccount.identity.linkerd.cluster.local"
            ),
            "authorization default:localhost (proxy): not reached",
            &format!(
                "rate limit: httplocalratelimitpolicy:orders-rl: total 100/s shared by all clients, override 50/s for identity {batch}"
            ),
            "decision:   allowed by authorizationpolicy:orders-api on route httproute.gateway.networking.k8s.io:orders-api",
        ]
    );
    let web = "web.shop.serviceaccount.identity.linkerd.cluster.local";
    let run = cluster.explain(&request(web)).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.lines()[7],
        format!(
            "rate limit: httplocalratelimitpolicy:orders-rl: total 100/s shared by all clients, 20/s for identity {web}"
        )
    );
}

#[tokio::test]
async fn bad_input_exits_2_with_the_reason_and_disturbs_nothing() {
    let cluster = Cluster::start("emojivoto").await;
    let ip = ["--client-ip", "10.244.0.30"];

    let unknown_pod = ["inbound", "emojivoto/nosuch", "8080", ip[0], ip[1]];
    let run = cluster.offline(&unknown_pod).await;
    assert_eq!((run.code, run.stdout.as_str()), (Some(2), ""));
    assert_eq!(
        run.stderr,
        "dst-diag: no meshed pod or ExternalWorkload emojivoto/nosuch is in the cluster state: GetPort emojivoto/nosuch port 8080: NotFound: unknown server\n"
    );
    let run = cluster.online(&unknown_pod).await;
    assert_eq!((run.code, run.stdout.as_str()), (Some(2), ""));
    assert_eq!(
        run.stderr,
        "dst-diag: no meshed pod or ExternalWorkload emojivoto/nosuch is known to the policy controller: WatchPort emojivoto/nosuch port 8080: NotFound: unknown server\n"
    );

    // Out of range at any size, or not a number: one message.
    for port in ["0", "70000", "99999999999", "http"] {
        let run = cluster
            .explain(&["inbound", WEB_POD, port, ip[0], ip[1]])
            .await;
        assert_eq!((run.code, run.stdout.as_str()), (Some(2), ""));
        assert!(
            run.stderr.starts_with(&format!(
                "error: invalid value '{port}' for '<PORT>': not a port number (1-65535)\n"
            )),
            "{}",
            run.stderr
        );
    }

    let run = cluster
        .explain(&["inbound", "web-djjwbqr6lt-sfd7g", "8080", ip[0], ip[1]])
        .await;
    assert_eq!(run.code, Some(2));
    assert_eq!(
        run.stderr,
        "dst-diag: invalid WORKLOAD \"web-djjwbqr6lt-sfd7g\": expected NAMESPACE/POD\n"
    );

    for (id, why) in [
        (
            "web..emojivoto.serviceaccount",
            "an empty label (two dots, or a dot at an end)",
        ),
        (
            "web emojivoto",
            "' ' is not allowed: an identity is a DNS-like name such as \
             web.emojivoto.serviceaccount.identity.linkerd.cluster.local",
        ),
    ] {
        let run = cluster
            .explain(&["inbound", WEB_POD, "8080", "--client-identity", id])
            .await;
        assert_eq!((run.code, run.stdout.as_str()), (Some(2), ""));
        assert_eq!(
            run.stderr,
            format!("dst-diag: invalid --client-identity {id:?}: {why}\n")
        );
    }

    // Found by a newcomer: a method that is no HTTP token was explained as given.
    let run = cluster
        .explain(&["inbound", WEB_POD, "8080", ip[0], ip[1], "--method", "GE T"])
        .await;
    assert_eq!((run.code, run.stdout.as_str()), (Some(2), ""));
    assert_eq!(
        run.stderr,
        "dst-diag: invalid --method \"GE T\": not an HTTP method (letters, digits and !#$%&'*+-.^_`|~ only)\n"
    );

    // Newcomer finding: a gRPC service or method that cannot be one segment of the call's
    // path was explained as given (`POST /bad service/x/`).
    for (flag, name, why) in [
        ("--grpc-service", "bad service", "' '"),
        ("--grpc-service", "a/b", "'/'"),
        ("--grpc-service", "a?x=1", "'?'"),
        ("--grpc-service", "a#f", "'#'"),
        ("--grpc-service", "", "expected a name"),
    ] {
        let run = dst_diag(&[
            "explain", "inbound", WEB_POD, "8080", ip[0], ip[1], flag, name,
        ])
        .await;
        assert_eq!((run.code, run.stdout.as_str()), (Some(2), ""));
        assert!(
            run.stderr.starts_with(&format!(
                "error: invalid value '{name}' for '{flag} <SERVICE>': "
            )) && run.stderr.contains(why),
            "{}",
            run.stderr
        );
    }
    let run = dst_diag(&[
        "explain",
        "inbound",
        WEB_POD,
        "8080",
        ip[0],
        ip[1],
        "--grpc-service",
        "emojivoto.v1.VotingService",
        "--grpc-method",
        "Vote\tX",
    ])
    .await;
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("cannot be in a gRPC name"),
        "{}",
        run.stderr
    );

    // Neither a client nor a source: the command line is refused.
    let run = dst_diag(&["explain", "inbound", WEB_POD, "8080"]).await;
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr
            .contains("--client-identity <ID>|--client-ip <IP>"),
        "{}",
        run.stderr
    );

    // An unreachable controller cannot answer either.
    let run = dst_diag(&[
        "explain",
        "inbound",
        WEB_POD,
        "8080",
        ip[0],
        ip[1],
        "--policy",
        "127.0.0.1:1",
    ])
    .await;
    assert_eq!((run.code, run.stdout.as_str()), (Some(2), ""));
    assert!(
        run.stderr
            .starts_with("dst-diag: connect to http://127.0.0.1:1"),
        "{}",
        run.stderr
    );

    // The controller still answers.
    let run = cluster
        .explain(&["inbound", WEB_POD, "9999", ip[0], ip[1]])
        .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
}

/// Offline, the files and objects the index skips are logged on stderr, so that an answer
/// from incomplete state says so; the answer itself is still printed.
#[tokio::test]
async fn offline_the_skipped_files_are_logged_and_the_rest_answers() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("emojivoto").join("cluster.yaml"),
        dir.path().join("cluster.yaml"),
    )
    .unwrap();
    std::fs::write(dir.path().join("broken.yaml"), "kind: [unclosed\n").unwrap();
    let state = dir.path().to_str().unwrap();
    let run = dst_diag(&[
        "explain",
        "inbound",
        WEB_POD,
        "8080",
        "--client-ip",
        "10.244.0.30",
        "--cluster-state",
        state,
    ])
    .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!run.stdout.is_empty());
    let warning = run
        .stderr
        .lines()
        .find(|l| l.contains("WARN"))
        .unwrap_or_else(|| panic!("no warning: {}", run.stderr));
    assert!(warning.contains("broken.yaml"), "{warning}");
    assert!(warning.contains("invalid YAML"), "{}", run.stderr);
}
