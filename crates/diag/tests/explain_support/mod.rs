//! What the `explain` tests share: a policy controller (both policy APIs) over a fixture
//! directory, started in the test on `127.0.0.1:0` with the flags `explain --cluster-state`
//! assumes by default (the chart's), and `dst-diag explain` run against the same directory
//! offline and against that controller, whose answers must not differ.

#![allow(dead_code, reason = "each test file uses a different part")]

use linkerd_index::{
    ClusterSource, IndexMetrics, PortSet, Watches,
    inbound::{DefaultPolicy, InboundConfig, InboundIndex},
    outbound::{OutboundConfig, OutboundIndex},
    source::offline::OfflineSource,
};
use linkerd_runtime::shutdown;
use policy::{
    InboundPolicyService, InboundTranslator, OutboundPolicyService, OutboundTranslator,
    PolicyMetrics, args::parse_networks, bind, serve_policies,
};
use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};
use tokio::{io::AsyncReadExt, process::Command};

pub const WEB_POD: &str = "emojivoto/web-djjwbqr6lt-sfd7g";
pub const VOTING_POD: &str = "emojivoto/voting-qbtpmtmk74-gdg57";
pub const ORDERS_POD: &str = "shop/orders-7d9c5b-x2kqp";
pub const WEB_ID: &str = "web.emojivoto.serviceaccount.identity.linkerd.cluster.local";
/// vote-bot's identity (ServiceAccount `default`), which MeshTLSAuthentication web-api-clients
/// names.
pub const VOTE_BOT_ID: &str = "default.emojivoto.serviceaccount.identity.linkerd.cluster.local";
/// Generous: the binary may start slowly while other crates build on the same machine.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A fixture directory under tests/fixtures.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

/// A policy controller over `dir` with the chart's flags; it stops when the trigger drops.
pub async fn start_policy_controller(dir: &Path) -> (SocketAddr, shutdown::Trigger) {
    let cluster_networks =
        parse_networks("10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8")
            .unwrap()
            .0;
    let metrics = IndexMetrics::default();
    let inbound = InboundIndex::new(
        InboundConfig {
            cluster_networks: cluster_networks.clone(),
            default_policy: DefaultPolicy::AllUnauthenticated,
            probe_networks: parse_networks("0.0.0.0/0,::/0").unwrap().0,
            identity_domain: "cluster.local".into(),
            control_plane_namespace: "linkerd".into(),
            compute_route_acceptance: true,
        },
        metrics.clone(),
    );
    let outbound = OutboundIndex::new(
        OutboundConfig {
            cluster_domain: "cluster.local".into(),
            cluster_networks: cluster_networks.clone(),
            default_opaque_ports: PortSet::parse("25,587,3306,4444,5432,6379,9300,11211").0,
            compute_route_acceptance: true,
            global_egress_network_namespace: "linkerd-egress".into(),
        },
        metrics.clone(),
    );
    let mut watches = Watches::new(metrics.clone());
    inbound.watch(&mut watches);
    outbound.watch(&mut watches);
    let source = OfflineSource::new(dir, metrics).expect("fixture dir");
    // Offline mode delivers the whole directory before `start` returns.
    watches.start(&ClusterSource::Offline(source)).await;
    let (trigger, shutdown) = shutdown::channel();
    let inbound = InboundPolicyService::new(
        inbound,
        InboundTranslator::new(cluster_networks),
        PolicyMetrics::default(),
        shutdown.clone(),
    );
    let outbound = OutboundPolicyService::new(
        outbound,
        OutboundTranslator::new(false),
        "cluster.local".into(),
        PolicyMetrics::default(),
        shutdown.clone(),
    );
    let (listener, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    tokio::spawn(serve_policies(listener, inbound, Some(outbound), shutdown));
    (addr, trigger)
}

/// What one run printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }
}

/// Runs `dst-diag` with `args` to its end.
pub async fn dst_diag(args: &[&str]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dst-diag"))
        .args(args)
        .env_remove("DST_DIAG_POLICY")
        // Its log level: the tests compare stderr whole.
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("dst-diag starts");
    let mut stdout = String::new();
    let mut stderr = String::new();
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let read = async {
        out.read_to_string(&mut stdout).await.expect("stdout");
        err.read_to_string(&mut stderr).await.expect("stderr");
        child.wait().await.expect("exit status")
    };
    let status = tokio::time::timeout(TIMEOUT, read)
        .await
        .expect("dst-diag exits in time");
    Run {
        code: status.code(),
        stdout,
        stderr,
    }
}

/// A fixture directory and a controller serving it.
pub struct Cluster {
    pub dir: PathBuf,
    pub addr: SocketAddr,
    _controller: shutdown::Trigger,
}

impl Cluster {
    pub async fn start(fixture_name: &str) -> Self {
        let dir = fixture(fixture_name);
        let (addr, controller) = start_policy_controller(&dir).await;
        Self {
            dir,
            addr,
            _controller: controller,
        }
    }

    /// `dst-diag explain <args> --cluster-state DIR`.
    pub async fn offline(&self, args: &[&str]) -> Run {
        let dir = self.dir.to_str().expect("UTF-8 path");
        let mut args = ["explain"].iter().chain(args).copied().collect::<Vec<_>>();
        args.extend(["--cluster-state", dir]);
        dst_diag(&args).await
    }

    /// `dst-diag explain <args> --policy ADDR`.
    pub async fn online(&self, args: &[&str]) -> Run {
        let addr = self.addr.to_string();
        let mut args = ["explain"].iter().chain(args).copied().collect::<Vec<_>>();
        args.extend(["--policy", &addr]);
        dst_diag(&args).await
    }

    /// Both, which must agree; the offline run.
    pub async fn explain(&self, args: &[&str]) -> Run {
        let offline = self.offline(args).await;
        let online = self.online(args).await;
        assert_eq!(
            offline, online,
            "offline and online answers differ for {args:?}"
        );
        offline
    }
}
