//! `dst-diag streams`, `dst-diag stream ID` and `dst-diag proxy-status` as processes, against a
//! destination server and an InboundServerPolicies server started in this test over the
//! emojivoto fixture, each with its introspection API on `127.0.0.1:0`.

mod support;

use destination::{DestinationMetrics, DestinationService, EndpointTranslator};
use linkerd_index::{
    ClusterSource, DiscoveryIndex, IndexMetrics, Watches,
    inbound::{DefaultPolicy, InboundConfig, InboundIndex},
    source::offline::OfflineSource,
};
use linkerd_runtime::{introspect::StreamRegistry, shutdown};
use linkerd2_proxy_api::{
    destination::{GetDestination, destination_client::DestinationClient},
    inbound::{PortSpec, inbound_server_policies_client::InboundServerPoliciesClient},
};
use policy::{InboundPolicyService, InboundTranslator, PolicyMetrics, args::parse_networks};
use serde_json::Value;
use std::{net::SocketAddr, path::Path};
use support::*;

const VOTING: &str = "voting-qbtpmtmk74-gdg57";

fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/emojivoto")
}

/// The gRPC address and the introspection address of each server.
struct Servers {
    destination: SocketAddr,
    destination_introspection: String,
    policy: SocketAddr,
    policy_introspection: String,
    _trigger: shutdown::Trigger,
}

async fn start() -> Servers {
    let (trigger, shutdown) = shutdown::channel();

    let metrics = IndexMetrics::default();
    let index = DiscoveryIndex::new();
    let mut watches = Watches::new(metrics.clone());
    index.watch(&mut watches);
    let source = OfflineSource::new(fixture(), metrics).expect("fixture dir");
    watches.start(&ClusterSource::Offline(source)).await;
    let streams = StreamRegistry::serving(&["Get", "GetProfile"]);
    let service = DestinationService::new(
        index,
        EndpointTranslator::new(chart_config()),
        "cluster.local".into(),
        false,
        DestinationMetrics::default(),
        shutdown.clone(),
    )
    .with_streams(streams.clone());
    let (listener, destination) = destination::server::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    tokio::spawn(destination::serve(listener, service, shutdown.clone()));
    let destination_introspection = linkerd_runtime::introspect::spawn(
        "127.0.0.1:0".parse().unwrap(),
        streams,
        shutdown.clone(),
    )
    .await
    .unwrap();

    let config = InboundConfig {
        cluster_networks: parse_networks(
            "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8",
        )
        .unwrap()
        .0,
        default_policy: DefaultPolicy::AllUnauthenticated,
        probe_networks: parse_networks("0.0.0.0/0,::/0").unwrap().0,
        identity_domain: "cluster.local".into(),
        control_plane_namespace: "linkerd".into(),
        compute_route_acceptance: true,
    };
    let metrics = IndexMetrics::default();
    let translator = InboundTranslator::new(config.cluster_networks.clone());
    let index = InboundIndex::new(config, metrics.clone());
    let mut watches = Watches::new(metrics.clone());
    index.watch(&mut watches);
    let source = OfflineSource::new(fixture(), metrics).expect("fixture dir");
    watches.start(&ClusterSource::Offline(source)).await;
    let streams = StreamRegistry::serving(&["WatchPort", "Watch"]);
    let service = InboundPolicyService::new(
        index,
        translator,
        PolicyMetrics::default(),
        shutdown.clone(),
    )
    .with_streams(streams.clone());
    let (listener, policy) = policy::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    tokio::spawn(policy::serve(listener, service, shutdown.clone()));
    let policy_introspection =
        linkerd_runtime::introspect::spawn("127.0.0.1:0".parse().unwrap(), streams, shutdown)
            .await
            .unwrap();
    Servers {
        destination,
        destination_introspection: destination_introspection.to_string(),
        policy,
        policy_introspection: policy_introspection.to_string(),
        _trigger: trigger,
    }
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_stream_and_proxy_status_show_what_a_proxy_was_sent() {
    let s = start().await;
    let token = format!(r#"{{"ns":"emojivoto","nodeName":"node-a","pod":"{VOTING}"}}"#);
    let mut dst = DestinationClient::connect(format!("http://{}", s.destination))
        .await
        .unwrap();
    let mut get = dst
        .get(GetDestination {
            scheme: "k8s".into(),
            path: WEB.into(),
            context_token: token.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = get.message().await.unwrap().unwrap();
    let mut other = dst
        .get(GetDestination {
            scheme: "k8s".into(),
            path: WEB.into(),
            context_token: r#"{"ns":"emojivoto","pod":"vote-bot-0"}"#.into(),
        })
        .await
        .unwrap()
        .into_inner();
    other.message().await.unwrap().unwrap();
    let mut inbound = InboundServerPoliciesClient::connect(format!("http://{}", s.policy))
        .await
        .unwrap();
    let mut watch = inbound
        .watch_port(PortSpec {
            workload: format!(r#"{{"ns":"emojivoto","pod":"{VOTING}"}}"#),
            port: 8080,
        })
        .await
        .unwrap()
        .into_inner();
    let server = watch.message().await.unwrap().unwrap();

    // `streams -o json`: both Get streams, oldest first.
    let (code, stdout, stderr) = wait_output(dst_diag(&[
        "streams",
        "--introspection",
        &s.destination_introspection,
        "-o",
        "json",
    ]))
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let listed = json_lines(&stdout);
    assert_eq!(listed.len(), 2, "{stdout}");
    assert_eq!(listed[0]["api"], "Get");
    assert_eq!(listed[0]["target"], WEB);
    assert_eq!(listed[0]["pod"], format!("emojivoto/{VOTING}"));
    assert_eq!(listed[0]["context_token"], token);
    assert_eq!(listed[0]["messages_sent"], 1);
    assert_eq!(listed[0]["behind"], false);
    assert_eq!(listed[1]["pod"], "emojivoto/vote-bot-0");
    let id = listed[0]["id"].as_u64().unwrap();

    // Filtered, as a table.
    let (code, stdout, _) = wait_output(dst_diag(&[
        "streams",
        "--introspection",
        &s.destination_introspection,
        "--pod",
        "emojivoto/vote-bot-0",
    ]))
    .await;
    assert_eq!(code, Some(0));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[0].starts_with("ID  API  POD"), "{stdout}");
    assert!(
        lines[1].contains(&format!("Get  emojivoto/vote-bot-0  {WEB}  127.0.0.1:")),
        "{stdout}"
    );

    // API names in any case (tester finding: `--api get` exited 1 with the server's refusal),
    // and qualified by their service, as the README writes them (tester finding).
    for api in ["get", "destination.GET"] {
        let (code, stdout, stderr) = wait_output(dst_diag(&[
            "streams",
            "--introspection",
            &s.destination_introspection,
            "--api",
            api,
            "--pod",
            "emojivoto/vote-bot-0",
        ]))
        .await;
        assert_eq!(code, Some(0), "{api}: {stderr}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{api}: {stdout}");
        assert!(
            lines[1].contains(&format!("Get  emojivoto/vote-bot-0  {WEB}  127.0.0.1:")),
            "{api}: {stdout}"
        );
    }
    // An unknown name, or a method under another service, is a usage error naming those taken.
    for (api, names) in [
        ("Gets", "expected one of Get, GetProfile, WatchPort, Watch"),
        (
            "Destination.Watch",
            "expected one of Get, GetProfile, WatchPort, Watch, \
             in any case, or qualified by its service: Destination.Get, Destination.GetProfile, \
             InboundServerPolicies.WatchPort, OutboundPolicies.Watch (or as a gRPC path, \
             io.linkerd.proxy.destination.Destination/Get)",
        ),
    ] {
        let (code, stdout, stderr) = wait_output(dst_diag(&[
            "streams",
            "--introspection",
            &s.destination_introspection,
            "--api",
            api,
        ]))
        .await;
        assert_eq!(code, Some(2), "{api}: {stderr}");
        assert_eq!(stdout, "");
        assert!(
            stderr.contains(&format!("unknown API \"{api}\": {names}")),
            "{stderr}"
        );
    }

    // `WatchPort` streams asked of destination: refused, and where they are.
    let (code, stdout, stderr) = wait_output(dst_diag(&[
        "streams",
        "--introspection",
        &s.destination_introspection,
        "--api",
        "WatchPort",
    ]))
    .await;
    assert_eq!(code, Some(2), "{stdout}");
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("WatchPort streams are another server's: this one serves Get and GetProfile streams; ask policy-controller's introspection API (--introspection; the pod serves it on 127.0.0.1:9980 unless --introspection-addr says otherwise)"),
        "{stderr}"
    );
    // Destination's own API with a filter that leaves nothing: an empty table, no hint that
    // this is the wrong server (newcomer finding: it was said whenever the address was not
    // the default one).
    let (code, stdout, stderr) = wait_output(dst_diag(&[
        "streams",
        "--introspection",
        &s.destination_introspection,
        "--api",
        "GetProfile",
        "--behind",
    ]))
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["ID  API  POD  TARGET  PEER  SENT  LAST SENT  OPENED  BEHIND"],
        "{stdout}"
    );

    // `stream ID -o json`: what it last sent, in the shape `dst-diag endpoints -o json` prints.
    let (code, stdout, stderr) = wait_output(dst_diag(&[
        "stream",
        &id.to_string(),
        "--introspection",
        &s.destination_introspection,
        "-o",
        "json",
    ]))
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let shown: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(shown["id"], id);
    assert_eq!(shown["last_sent"], diag::output::update_json(&first));
    assert!(
        shown["last_sent"]["add"]["addrs"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "{shown}"
    );

    // The table form prints the stream, then the update as `dst-diag endpoints` does.
    let (code, stdout, _) = wait_output(dst_diag(&[
        "stream",
        &id.to_string(),
        "--introspection",
        &s.destination_introspection,
    ]))
    .await;
    assert_eq!(code, Some(0));
    let mut expected = Vec::new();
    diag::output::write_update(&mut expected, diag::OutputFormat::Table, &first).unwrap();
    assert!(
        stdout.ends_with(&String::from_utf8(expected).unwrap()),
        "{stdout}"
    );

    // `proxy-status`: the voting pod's proxy holds one Get stream and one WatchPort stream.
    let pod = format!("emojivoto/{VOTING}");
    // `proxy-status POD` against these introspection APIs, with `more` flags.
    let proxy_status = |destination: &str, policy: &str, more: &[&str]| {
        let mut args = vec![
            "proxy-status".to_string(),
            pod.clone(),
            "--destination-introspection".into(),
            destination.into(),
            "--policy-introspection".into(),
            policy.into(),
        ];
        args.extend(more.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        wait_output(dst_diag(&args))
    };
    let (code, stdout, stderr) = proxy_status(
        &s.destination_introspection,
        &s.policy_introspection,
        &["-o", "json"],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let rows = json_lines(&stdout);
    assert_eq!(rows.len(), 2, "{stdout}");
    assert_eq!(rows[0]["server"], "destination");
    assert_eq!(rows[0]["api"], "Get");
    assert_eq!(rows[0]["status"], "SYNCED");
    assert_eq!(rows[1]["server"], "policy");
    assert_eq!(rows[1]["api"], "WatchPort");
    assert_eq!(rows[1]["target"], format!("emojivoto/{VOTING} port 8080"));
    assert_eq!(rows[1]["status"], "SYNCED");
    let (code, stdout, _) =
        proxy_status(&s.destination_introspection, &s.policy_introspection, &[]).await;
    assert_eq!(code, Some(0));
    assert!(
        stdout.starts_with(&format!("{pod}: 2 streams, 2 in sync, 0 behind\nSERVER")),
        "{stdout}"
    );
    // The proxy's `namespace:pod` form, which `dst-diag policy inbound` takes, names the same
    // pod (newcomer finding: it was refused as not `namespace/name`).
    let colon = format!("emojivoto:{VOTING}");
    let (code, by_colon, stderr) = wait_output(dst_diag(&[
        "proxy-status",
        &colon,
        "--destination-introspection",
        &s.destination_introspection,
        "--policy-introspection",
        &s.policy_introspection,
    ]))
    .await;
    assert_eq!((code, &by_colon), (Some(0), &stdout), "{stderr}");
    let (code, listed, stderr) = wait_output(dst_diag(&[
        "streams",
        "--introspection",
        &s.policy_introspection,
        "--pod",
        &colon,
        "-o",
        "json",
    ]))
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let listed = json_lines(&listed);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["pod"], pod.as_str());
    // One address for both servers cannot answer for both (newcomer findings: destination's
    // streams were listed twice, the second time as policy's; then once, exit 0, as if whole).
    for (destination, policy) in [
        (
            s.destination_introspection.clone(),
            s.destination_introspection.clone(),
        ),
        (
            s.destination_introspection.clone(),
            format!("http://{}/", s.destination_introspection),
        ),
    ] {
        let (code, stdout, stderr) = proxy_status(&destination, &policy, &[]).await;
        assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
        assert!(
            stderr.starts_with(&format!(
                "dst-diag: --destination-introspection and --policy-introspection both name {}: give each server's own introspection address",
                s.destination_introspection
            )),
            "{stderr}"
        );
    }
    // The pod as given is shown escaped in the header, as in the rows (newcomer finding).
    let (code, stdout, stderr) = wait_output(dst_diag(&[
        "proxy-status",
        "emojivoto/web\u{1b}[31mRED",
        "--destination-introspection",
        &s.destination_introspection,
        "--policy-introspection",
        &s.policy_introspection,
    ]))
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with("emojivoto/web\\u{1b}[31mRED: 0 streams, 0 in sync, 0 behind\n"),
        "{stdout}"
    );
    let (code, _, stderr) = proxy_status("", " ", &[]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no server to ask"), "{stderr}");
    // Swapped: each server's streams are labelled by their API, and each flag's mix-up named.
    let (code, stdout, stderr) = proxy_status(
        &s.policy_introspection,
        &s.destination_introspection,
        &["-o", "json"],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let rows = json_lines(&stdout);
    let labelled: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["server"].as_str().unwrap(), r["api"].as_str().unwrap()))
        .collect();
    assert_eq!(labelled, [("policy", "WatchPort"), ("destination", "Get")]);
    assert_eq!(
        stderr,
        format!(
            "dst-diag: --destination-introspection {} listed WatchPort streams, which are policy's: \
             is it policy's introspection address? They are shown as policy's\n\
             dst-diag: --policy-introspection {} listed Get streams, which are destination's: is \
             it destination's introspection address? They are shown as destination's\n",
            s.policy_introspection, s.destination_introspection
        )
    );

    // The WatchPort stream's last message is the Server the client received.
    let policy_id = rows[1]["id"].as_u64().unwrap();
    let (code, stdout, _) = wait_output(dst_diag(&[
        "stream",
        &policy_id.to_string(),
        "--introspection",
        &s.policy_introspection,
        "-o",
        "json",
    ]))
    .await;
    assert_eq!(code, Some(0));
    let shown: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        shown["last_sent"],
        diag::output::inbound_server_json(&server)
    );

    // Bad input: a clear message, exit status 1, and the streams go on.
    let (code, stdout, stderr) = wait_output(dst_diag(&[
        "stream",
        "999999",
        "--introspection",
        &s.destination_introspection,
    ]))
    .await;
    assert_eq!(code, Some(1));
    assert_eq!(stdout, "");
    assert_eq!(
        stderr,
        "dst-diag: GetStream stream 999999: NotFound: no open stream has ID 999999 here (it closed, never existed, or is another server's: destination and policy-controller number their streams apart)\n"
    );
    let (code, _, stderr) = wait_output(dst_diag(&[
        "streams",
        "--introspection",
        &s.destination_introspection,
        "--pod",
        "vote-bot-0",
    ]))
    .await;
    assert_eq!(code, Some(1));
    assert!(
        stderr.ends_with("InvalidArgument: invalid pod \"vote-bot-0\": expected namespace/name\n"),
        "{stderr}"
    );
    let (code, _, stderr) = proxy_status("127.0.0.1:1", "", &[]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("connect to http://127.0.0.1:1"), "{stderr}");
    // One server answers, the other cannot be reached: what answered is printed, and the run
    // fails with exit code 3 (newcomer finding: it exited 0 on half an answer).
    let (code, stdout, stderr) =
        proxy_status(&s.destination_introspection, "127.0.0.1:1", &[]).await;
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stdout.starts_with(&format!("{pod}: 1 stream, 1 in sync, 0 behind\nSERVER")),
        "{stdout}"
    );
    assert!(
        stderr
            .starts_with("dst-diag: policy's streams are left out: connect to http://127.0.0.1:1"),
        "{stderr}"
    );
    // The policy address takes connections but closes them (not a gRPC server): left out too,
    // not the end of the run (newcomer finding: only a refused connection was).
    let closing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closing_addr = closing.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((conn, _)) = closing.accept().await {
            drop(conn);
        }
    });
    let (code, stdout, stderr) =
        proxy_status(&s.destination_introspection, &closing_addr, &[]).await;
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stdout.starts_with(&format!("{pod}: 1 stream, 1 in sync, 0 behind\nSERVER")),
        "{stdout}"
    );
    assert!(
        stderr.starts_with("dst-diag: policy's streams are left out: "),
        "{stderr}"
    );
    // Neither answers: both are named (newcomer finding: only the last one was).
    let (code, _, stderr) = proxy_status("127.0.0.1:1", "127.0.0.1:2", &[]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.starts_with(
            "dst-diag: neither server could be reached: destination: connect to http://127.0.0.1:1"
        ) && stderr.contains("; policy: connect to http://127.0.0.1:2"),
        "{stderr}"
    );
    // An empty pod would be no filter at all: refused before asking.
    let (code, _, stderr) = wait_output(dst_diag(&["proxy-status", " "])).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("expected namespace/name, not an empty string"),
        "{stderr}"
    );
    let (code, _, _) = wait_output(dst_diag(&["stream", "not-a-number"])).await;
    assert_eq!(code, Some(2), "clap refuses a non-numeric ID");

    let (code, stdout, _) = wait_output(dst_diag(&[
        "streams",
        "--introspection",
        &s.destination_introspection,
        "-o",
        "json",
    ]))
    .await;
    assert_eq!(code, Some(0));
    assert_eq!(json_lines(&stdout).len(), 2, "the streams are still open");
    drop((get, other, watch));
}
