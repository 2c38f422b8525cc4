//! What the integration tests share: a destination server over the emojivoto fixture, started
//! in the test on `127.0.0.1:0`, and `dst-diag` run as a process.

#![allow(dead_code, reason = "each test file uses a different part")]

use destination::{
    DestinationMetrics, DestinationService, EndpointTranslator, TranslatorConfig, serve,
    server::bind, translate::parse_http2_params,
};
use linkerd_index::{
    ClusterSource, DiscoveryIndex, IndexMetrics, PortSet, Watches, source::offline::OfflineSource,
};
use linkerd_runtime::shutdown;
use std::{net::SocketAddr, path::Path, process::Stdio, time::Duration};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, BufReader},
    process::{Child, Command},
};

pub const WEB: &str = "web-svc.emojivoto.svc.cluster.local:80";
pub const WEB_ID: &str = "web.emojivoto.serviceaccount.identity.linkerd.cluster.local";
const KEEPALIVE_JSON: &str =
    r#"{"keep_alive":{"interval":{"seconds":10},"timeout":{"seconds":3},"while_idle":true}}"#;
/// Generous: the binary may start slowly while other crates build on the same machine.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The destination flags the fixtures assume (the chart defaults, as in
/// crates/destination/tests/support/mod.rs).
pub fn chart_config() -> TranslatorConfig {
    TranslatorConfig {
        controller_namespace: "linkerd".into(),
        trust_domain: "cluster.local".into(),
        enable_h2_upgrade: true,
        default_opaque_ports: PortSet::parse("25,587,3306,4444,5432,6379,9300,11211").0,
        meshed_http2_params: parse_http2_params(KEEPALIVE_JSON).unwrap(),
        force_opaque_transport: false,
        ext_endpoint_zone_weights: false,
    }
}

/// A destination server over the emojivoto fixture; it stops when the trigger is dropped.
pub async fn start_server() -> (SocketAddr, shutdown::Trigger) {
    start_server_on(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/emojivoto"))
        .await
}

/// A destination server over the state directory `dir`, as [`start_server`].
pub async fn start_server_on(dir: &Path) -> (SocketAddr, shutdown::Trigger) {
    let metrics = IndexMetrics::default();
    let index = DiscoveryIndex::new();
    let mut watches = Watches::new(metrics.clone());
    index.watch(&mut watches);
    let source = OfflineSource::new(dir, metrics).expect("state dir");
    // Offline mode delivers the whole directory before `start` returns.
    watches.start(&ClusterSource::Offline(source)).await;
    let (trigger, shutdown) = shutdown::channel();
    let service = DestinationService::new(
        index,
        EndpointTranslator::new(chart_config()),
        "cluster.local".into(),
        false,
        DestinationMetrics::default(),
        shutdown.clone(),
    );
    let (listener, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    tokio::spawn(serve(listener, service, shutdown));
    (addr, trigger)
}

pub fn dst_diag(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_dst-diag"))
        .args(args)
        .env_remove("DST_DIAG_DESTINATION")
        // Its log level: the tests compare stderr whole.
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("dst-diag starts")
}

/// Reads stdout lines up to the first empty line or `n` lines, then kills the process.
pub async fn read_lines(mut child: Child, n: usize) -> Vec<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut read = Vec::new();
    while read.len() < n {
        let line = tokio::time::timeout(TIMEOUT, lines.next_line())
            .await
            .expect("dst-diag prints in time")
            .expect("stdout readable")
            .expect("a line before stdout closes");
        if line.is_empty() {
            break;
        }
        read.push(line);
    }
    child.kill().await.expect("kill dst-diag");
    read
}

/// Waits for the process to exit and returns its exit code, stdout and stderr.
pub async fn wait_output(mut child: Child) -> (Option<i32>, String, String) {
    let status = tokio::time::timeout(TIMEOUT, child.wait())
        .await
        .expect("dst-diag exits in time")
        .expect("exit status");
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut stdout).await.expect("stdout");
    }
    if let Some(mut err) = child.stderr.take() {
        err.read_to_string(&mut stderr).await.expect("stderr");
    }
    (status.code(), stdout, stderr)
}
