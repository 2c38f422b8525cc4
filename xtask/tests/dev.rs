//! `cargo xtask dev` started as a process: the whole pod comes up, and a client holding the
//! run's mesh identity gets `Get` and `GetProfile` answers through the mtls-shim over mTLS, as
//! a proxy would; a client without a certificate is refused.

use linkerd_introspection_api::{ListStreamsRequest, introspection_client::IntrospectionClient};
use linkerd2_proxy_api::destination::{
    GetDestination, destination_client::DestinationClient, update,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use std::{
    future::Future,
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::{Path, PathBuf},
    pin::Pin,
    process::{Command, Stdio},
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};
use tokio::net::TcpStream;
use tokio_rustls::{TlsConnector, client::TlsStream};

const WEB: &str = "web-svc.emojivoto.svc.cluster.local:80";
const WEB_POD_IP: &str = "10.244.2.19";

/// The pod's binaries, built by `cargo test --workspace` for their own packages' tests; built
/// here when this test runs alone.
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let bins = [
        "destination",
        "policy-controller",
        "sp-validator",
        "mtls-shim",
    ];
    if bins.iter().any(|b| !dir.join(b).is_file()) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--quiet", "--bins"])
            .args([
                "-p",
                "destination",
                "-p",
                "policy",
                "-p",
                "sp-validator",
                "-p",
                "mtls-shim",
            ])
            .current_dir(root)
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build of the pod's binaries failed");
    }
    dir
}

/// `xtask dev` running; killed (and with it the pod: its children get SIGTERM when it dies)
/// when dropped.
struct DevPod {
    child: std::process::Child,
    pod: serde_json::Value,
}

impl DevPod {
    fn start(out: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["dev", "--free-ports", "--bin-dir"])
            .arg(bin_dir())
            .arg("--out")
            .arg(out)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start xtask dev");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(120))
                .expect("xtask dev prints that the pod is ready in time");
            if line.contains("the linkerd-destination pod is ready") {
                break;
            }
        }
        let pod = std::fs::read_to_string(out.join("pod.json")).expect("pod.json written");
        Self {
            child,
            pod: serde_json::from_str(&pod).expect("pod.json is JSON"),
        }
    }

    fn addr(&self, name: &str) -> SocketAddr {
        self.pod["addrs"][name].as_str().unwrap().parse().unwrap()
    }

    fn path(&self, name: &str) -> PathBuf {
        PathBuf::from(self.pod[name].as_str().unwrap())
    }
}

impl Drop for DevPod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Connects over TLS to `addr` with SNI `server_name`, offering no ALPN (as the proxy does).
#[derive(Clone)]
struct MeshConnector {
    addr: SocketAddr,
    server_name: ServerName<'static>,
    config: Arc<rustls::ClientConfig>,
}

impl tonic::codegen::Service<tonic::codegen::http::Uri> for MeshConnector {
    type Response = hyper_util::rt::TokioIo<TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: tonic::codegen::http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let tcp = TcpStream::connect(this.addr).await?;
            let tls = TlsConnector::from(this.config)
                .connect(this.server_name, tcp)
                .await?;
            Ok(hyper_util::rt::TokioIo::new(tls))
        })
    }
}

fn client_config(pod: &DevPod, with_cert: bool) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for anchor in CertificateDer::pem_file_iter(pod.path("trust_anchors")).unwrap() {
        roots.add(anchor.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = if with_cert {
        let chain = CertificateDer::pem_file_iter(pod.path("client_cert"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(pod.path("client_key")).unwrap();
        builder.with_client_auth_cert(chain, key).unwrap()
    } else {
        builder.with_no_client_auth()
    };
    Arc::new(config)
}

async fn channel(pod: &DevPod, with_cert: bool) -> Result<tonic::transport::Channel, String> {
    let connector = MeshConnector {
        addr: pod.addr("destination_mtls"),
        server_name: ServerName::try_from(pod.pod["server_name"].as_str().unwrap().to_string())
            .unwrap(),
        config: client_config(pod, with_cert),
    };
    tonic::transport::Endpoint::from_static(
        "http://linkerd-dst-headless.linkerd.svc.cluster.local:8086",
    )
    .connect_with_connector(connector)
    .await
    .map_err(|e| format!("{e:?}"))
}

fn get(path: &str) -> GetDestination {
    GetDestination {
        scheme: "k8s".into(),
        path: path.into(),
        context_token:
            r#"{"ns":"emojivoto","nodeName":"ip-10-20-1-11.eu-west-1.compute.internal"}"#.into(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn get_and_get_profile_through_the_shim_over_mtls() {
    let out = tempfile::tempdir().unwrap();
    let pod = DevPod::start(out.path());
    assert_eq!(
        pod.pod["server_name"],
        "linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local"
    );

    let mut client = DestinationClient::new(channel(&pod, true).await.expect("mTLS channel"));
    let mut endpoints = client.get(get(WEB)).await.expect("Get").into_inner();
    let first = tokio::time::timeout(Duration::from_secs(10), endpoints.message())
        .await
        .expect("a Get update in time")
        .expect("Get stream")
        .expect("a Get update");
    let Some(update::Update::Add(add)) = first.update else {
        panic!("expected Add, got {first:?}");
    };
    assert_eq!(add.addrs.len(), 1, "{add:?}");
    let addr = &add.addrs[0];
    let tcp = addr.addr.as_ref().unwrap();
    let ip = tcp.ip.as_ref().unwrap();
    let ip: std::net::IpAddr = match ip.ip.as_ref().unwrap() {
        linkerd2_proxy_api::net::ip_address::Ip::Ipv4(v4) => std::net::Ipv4Addr::from(*v4).into(),
        linkerd2_proxy_api::net::ip_address::Ip::Ipv6(_) => panic!("IPv6 address"),
    };
    assert_eq!((ip.to_string().as_str(), tcp.port), (WEB_POD_IP, 8080));
    assert_eq!(addr.metric_labels["pod"], "web-djjwbqr6lt-sfd7g");
    let identity = addr
        .tls_identity
        .as_ref()
        .unwrap()
        .strategy
        .as_ref()
        .unwrap();
    assert!(
        format!("{identity:?}")
            .contains("web.emojivoto.serviceaccount.identity.linkerd.cluster.local"),
        "{identity:?}"
    );

    // The bundled second cluster: the federated web Service is the local and east's web pods,
    // east's in its own trust domain (the link may come up just after the pod is ready, so
    // the two may arrive in either order).
    let mut federated = client
        .get(get("web-svc-federated.emojivoto.svc.cluster.local:80"))
        .await
        .expect("Get federated")
        .into_inner();
    let mut clusters = Vec::new();
    while clusters.len() < 2 {
        let update = tokio::time::timeout(Duration::from_secs(10), federated.message())
            .await
            .expect("a federated update in time")
            .expect("Get stream")
            .expect("a federated update");
        let Some(update::Update::Add(add)) = update.update else {
            panic!("expected Add, got {update:?}");
        };
        let cluster = add
            .metric_labels
            .get("target_cluster")
            .cloned()
            .unwrap_or_else(|| "local".into());
        let identity = format!("{:?}", add.addrs[0].tls_identity);
        clusters.push((cluster, add.addrs.len(), identity.contains(".east.local")));
    }
    clusters.sort();
    assert_eq!(
        clusters,
        [
            ("east".to_string(), 1, true),
            ("local".to_string(), 1, false)
        ]
    );

    let mut profiles = client
        .get_profile(get(WEB))
        .await
        .expect("GetProfile")
        .into_inner();
    let profile = tokio::time::timeout(Duration::from_secs(10), profiles.message())
        .await
        .expect("a profile in time")
        .expect("GetProfile stream")
        .expect("a profile");
    assert_eq!(
        profile.fully_qualified_name,
        "web-svc.emojivoto.svc.cluster.local"
    );
    assert!(!profile.opaque_protocol);
    assert!(profile.retry_budget.is_some());

    // The destination's introspection API is on the run's own port too, and lists the
    // streams above (the pod's 9986 may belong to another dev pod).
    let introspection = pod.addr("destination_introspection");
    assert_ne!(introspection.port(), 9986, "--free-ports moves it");
    assert_ne!(pod.addr("policy_introspection").port(), 9980);
    let mut streams = IntrospectionClient::connect(format!("http://{introspection}"))
        .await
        .expect("introspection API answers");
    let listed = streams
        .list_streams(ListStreamsRequest {
            target_contains: "web-svc".into(),
            ..Default::default()
        })
        .await
        .expect("ListStreams")
        .into_inner()
        .streams;
    let mut apis: Vec<&str> = listed.iter().map(|s| s.api.as_str()).collect();
    apis.sort();
    assert_eq!(apis, ["Get", "Get", "GetProfile"], "{listed:?}");

    // The shim asks for a client certificate: without one there is no channel, or its first
    // call fails.
    let refused = match channel(&pod, false).await {
        Err(_) => true,
        Ok(channel) => DestinationClient::new(channel).get(get(WEB)).await.is_err(),
    };
    assert!(refused, "a client without a certificate was served");
    // The shim counts what it refused.
    let (code, metrics) = http_get(pod.addr("shim_admin"), "/metrics");
    assert_eq!(code, 200);
    // Summed over the listeners: each has its series, at 0 until it refuses a client.
    let refusals: u64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("shim_tls_handshake_failures_total{") && l.contains("no_client_cert")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(refusals >= 1, "{metrics}");
}

/// `GET path` over HTTP/1.0; returns the status code and body.
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let code = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (code, body.to_string())
}

/// A second `xtask dev` while the pod's ports are taken (a pod already running on them) fails
/// before it touches that pod's files: it used to copy the bundled state over the running
/// pod's, reverting the user's edits, and only then find the ports taken.
#[test]
fn a_dev_pod_refused_for_taken_ports_leaves_the_running_pods_state_alone() {
    let out = tempfile::tempdir().unwrap();
    let state = out.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let edited = "# the running pod's state, edited\n";
    std::fs::write(state.join("cluster.yaml"), edited).unwrap();
    // Taken by this test, or by something else: taken either way.
    let _taken = std::net::TcpListener::bind("127.0.0.1:8086");
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["dev", "--bin-dir", "/nonexistent", "--out"])
        .arg(out.path())
        .output()
        .expect("run xtask dev");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("another dev pod may be running; --free-ports picks free ports"),
        "{stderr}"
    );
    assert!(
        std::fs::read_to_string(state.join("cluster.yaml")).unwrap() == edited,
        "the running pod's state/cluster.yaml was replaced"
    );
    assert!(!state.join("link.yaml").exists());
    assert!(!out.path().join("east").exists());
}
