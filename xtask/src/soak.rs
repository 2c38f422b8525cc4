//! `cargo xtask soak --minutes N`: opens and closes `--streams` streams of every API the pod
//! serves (`Destination.Get`, `Destination.GetProfile`, `InboundServerPolicies.WatchPort`,
//! `OutboundPolicies.Watch`) over N minutes while the state they watch churns, and reports
//! each server's RSS and open file descriptors at the start, the middle and the end.
//!
//! `destination` and `policy-controller` run in offline mode on a state directory: the
//! emojivoto fixture plus one file this task rewrites every `--churn-ms` (written beside the
//! directory and renamed in, as a ConfigMap update lands): a Service `soak/soak` whose
//! EndpointSlice, ServiceProfile route and Server protocol change each time. Every stream
//! watches that Service (or its pod), reads its first message and is dropped; a stream that
//! fails or sends nothing within 10 s is counted as an error. A leak shows as RSS or file
//! descriptors that grow from the middle to the end (after every stream has closed).

use anyhow::{Context, bail};
use linkerd2_proxy_api::{
    destination::{GetDestination, destination_client::DestinationClient},
    inbound::{PortSpec, inbound_server_policies_client::InboundServerPoliciesClient},
    outbound::{
        TrafficSpec, outbound_policies_client::OutboundPoliciesClient, traffic_spec::Target,
    },
};
use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};
use tonic::transport::{Channel, Endpoint};

use crate::server::{self, Output, ServerProcess};

#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// How long the streams are spread over, in minutes.
    #[arg(long, default_value_t = 10)]
    minutes: u64,
    /// Streams opened and closed per API.
    #[arg(long, default_value_t = 100_000)]
    streams: u64,
    /// Streams of one API open at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// How often the churned file is rewritten, in milliseconds.
    #[arg(long, default_value_t = 250)]
    churn_ms: u64,
    /// Build the servers with `--release` (and re-run xtask optimized, so the client keeps up).
    #[arg(long)]
    release: bool,
}

/// The four APIs, as the report names them.
const APIS: [&str; 4] = ["Get", "GetProfile", "WatchPort", "OutboundPolicies.Watch"];
const AUTHORITY: &str = "soak.soak.svc.cluster.local:80";
const FIRST_MESSAGE: Duration = Duration::from_secs(10);

/// One server's readings.
#[derive(Clone, Copy, Debug)]
struct Reading {
    rss: u64,
    fds: usize,
}

pub fn run(root: &Path, args: SoakArgs) -> anyhow::Result<()> {
    if args.minutes == 0 || args.streams == 0 || args.concurrency == 0 {
        bail!("--minutes, --streams and --concurrency must be positive");
    }
    if cfg!(debug_assertions) && args.release {
        return crate::bench::rerun_optimized(root);
    }
    let exes = server::build_binaries(
        root,
        &[
            ("destination", "destination"),
            ("policy", "policy-controller"),
        ],
        args.release,
    )?;
    let tmp = crate::bench::temp_dir("xtask-soak-", &["state"])?;
    let state = tmp.path().join("state");
    std::fs::copy(
        root.join("tests/fixtures/emojivoto/cluster.yaml"),
        state.join("emojivoto.yaml"),
    )
    .context("cannot copy the emojivoto fixture")?;
    write_churn(tmp.path(), &state, 0)?;
    tokio::runtime::Runtime::new()?.block_on(soak(&exes[0], &exes[1], tmp.path(), &state, &args))
}

async fn soak(
    destination: &Path,
    policy: &Path,
    dir: &Path,
    state: &Path,
    args: &SoakArgs,
) -> anyhow::Result<()> {
    let (dst_addr, dst_admin) = (server::free_local_addr()?, server::free_local_addr()?);
    let (pol_addr, pol_admin) = (server::free_local_addr()?, server::free_local_addr()?);
    let mut servers = [
        ServerProcess::spawn(
            destination,
            state,
            dst_addr,
            dst_admin,
            &[],
            Output::File(dir.join("destination.log")),
        )?,
        ServerProcess::spawn_policy(
            policy,
            state,
            pol_addr,
            pol_admin,
            &[],
            Output::File(dir.join("policy.log")),
        )?,
    ];
    for server in &mut servers {
        server.wait_ready(Duration::from_secs(60)).await?;
    }
    let dst = channel(dst_addr).await?;
    let pol = channel(pol_addr).await?;
    let readings = |servers: &[ServerProcess; 2]| -> anyhow::Result<Vec<Reading>> {
        servers.iter().map(|s| read(s.pid())).collect()
    };
    let start = readings(&servers)?;
    eprintln!(
        "soak: {} streams of each of {} APIs over {} min, state churned every {} ms",
        args.streams,
        APIS.len(),
        args.minutes,
        args.churn_ms
    );

    let duration = Duration::from_secs(args.minutes * 60);
    let began = Instant::now();
    let opened: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let errors: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let mut tasks = Vec::new();
    for api in 0..APIS.len() {
        for worker in 0..args.concurrency {
            let (dst, pol) = (dst.clone(), pol.clone());
            let (opened, errors) = (opened.clone(), errors.clone());
            let (streams, workers) = (args.streams, args.concurrency as u64);
            tasks.push(tokio::spawn(async move {
                // Worker `w` opens streams w, w + workers, ...: paced so that the API's
                // streams spread over the whole duration.
                let mut n = worker as u64;
                while n < streams {
                    let due = duration.mul_f64(n as f64 / streams as f64);
                    tokio::time::sleep_until((began + due).into()).await;
                    opened[api].fetch_add(1, Ordering::Relaxed);
                    if one_stream(api, &dst, &pol).await.is_err() {
                        errors[api].fetch_add(1, Ordering::Relaxed);
                    }
                    n += workers;
                }
            }));
        }
    }

    let mut middle = None;
    let mut version = 0u64;
    let churn = Duration::from_millis(args.churn_ms);
    while tasks.iter().any(|t| !t.is_finished()) {
        tokio::time::sleep(churn).await;
        version += 1;
        write_churn(dir, state, version)?;
        if middle.is_none() && began.elapsed() >= duration / 2 {
            middle = Some(readings(&servers)?);
            let done: Vec<String> = APIS
                .iter()
                .zip(opened.iter())
                .map(|(api, n)| format!("{api} {}", n.load(Ordering::Relaxed)))
                .collect();
            eprintln!("soak: half way: {}", done.join(", "));
        }
    }
    for task in tasks {
        task.await.context("a stream worker panicked")?;
    }
    drop((dst, pol));
    // Let the servers notice the closed streams and connections before the last reading.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let end = readings(&servers)?;
    let middle = middle.unwrap_or_else(|| end.clone());
    let elapsed = began.elapsed();
    for server in &mut servers {
        server.stop(Duration::from_secs(10)).await?;
    }

    println!(
        "soak: {:.1} min, {} state changes",
        elapsed.as_secs_f64() / 60.0,
        version
    );
    println!("{:<24} {:>10} {:>8}", "API", "streams", "errors");
    for (i, api) in APIS.iter().enumerate() {
        println!(
            "{:<24} {:>10} {:>8}",
            api,
            opened[i].load(Ordering::Relaxed),
            errors[i].load(Ordering::Relaxed)
        );
    }
    println!(
        "{:<20} {:>12} {:>12} {:>12} {:>6} {:>6} {:>6}",
        "server", "RSS start", "RSS middle", "RSS end", "fds s", "fds m", "fds e"
    );
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0));
    for (i, name) in ["destination", "policy-controller"].iter().enumerate() {
        println!(
            "{:<20} {:>12} {:>12} {:>12} {:>6} {:>6} {:>6}",
            name,
            mib(start[i].rss),
            mib(middle[i].rss),
            mib(end[i].rss),
            start[i].fds,
            middle[i].fds,
            end[i].fds
        );
    }
    let failed: u64 = errors.iter().map(|e| e.load(Ordering::Relaxed)).sum();
    if failed > 0 {
        bail!("{failed} streams failed or sent nothing within {FIRST_MESSAGE:?}");
    }
    Ok(())
}

async fn channel(addr: std::net::SocketAddr) -> anyhow::Result<Channel> {
    Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await
        .with_context(|| format!("cannot connect to {addr}"))
}

/// Opens one stream of API `api`, waits for its first message, and drops it.
async fn one_stream(api: usize, dst: &Channel, pol: &Channel) -> anyhow::Result<()> {
    let first = async {
        match api {
            0 => {
                let mut stream = DestinationClient::new(dst.clone())
                    .get(get_destination())
                    .await?
                    .into_inner();
                stream.message().await?.map(drop)
            }
            1 => {
                let mut stream = DestinationClient::new(dst.clone())
                    .get_profile(get_destination())
                    .await?
                    .into_inner();
                stream.message().await?.map(drop)
            }
            2 => {
                let mut stream = InboundServerPoliciesClient::new(pol.clone())
                    .watch_port(PortSpec {
                        workload: "soak:soak-0".into(),
                        port: 8080,
                    })
                    .await?
                    .into_inner();
                stream.message().await?.map(drop)
            }
            _ => {
                let mut stream = OutboundPoliciesClient::new(pol.clone())
                    .watch(TrafficSpec {
                        source_workload: "soak:soak-0".into(),
                        target: Some(Target::Authority(AUTHORITY.into())),
                    })
                    .await?
                    .into_inner();
                stream.message().await?.map(drop)
            }
        }
        .context("the stream ended before its first message")
    };
    tokio::time::timeout(FIRST_MESSAGE, first)
        .await
        .context("no first message")?
}

fn get_destination() -> GetDestination {
    GetDestination {
        scheme: "k8s".into(),
        path: AUTHORITY.into(),
        context_token: r#"{"ns":"soak","nodeName":"node-1","pod":"soak-0"}"#.into(),
    }
}

fn read(pid: u32) -> anyhow::Result<Reading> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("cannot list the file descriptors of {pid}"))?
        .count();
    Ok(Reading {
        rss: server::rss_bytes(pid)?,
        fds,
    })
}

/// Writes version `version` of the churned file: written in `dir`, then renamed into
/// `state`, so the servers never read half of it.
fn write_churn(dir: &Path, state: &Path, version: u64) -> anyhow::Result<()> {
    let endpoints = 1 + version % 4;
    let slice_endpoints: String = (0..endpoints)
        .map(|i| {
            format!(
                "  - addresses: [\"10.244.200.{}\"]\n    conditions: {{ready: true}}\n",
                10 + i
            )
        })
        .collect();
    let protocol = if version.is_multiple_of(2) {
        "HTTP/1"
    } else {
        "HTTP/2"
    };
    let text = format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: soak}}
---
apiVersion: v1
kind: Pod
metadata:
  name: soak-0
  namespace: soak
  labels: {{app: soak, linkerd.io/control-plane-ns: linkerd}}
spec:
  containers:
  - name: app
    image: app:v1
    ports: [{{name: http, containerPort: 8080}}]
  - name: linkerd-proxy
    image: proxy:v1
    env:
    - {{name: LINKERD2_PROXY_INBOUND_LISTEN_ADDR, value: "0.0.0.0:4143"}}
    - {{name: LINKERD2_PROXY_ADMIN_LISTEN_ADDR, value: "0.0.0.0:4191"}}
    - {{name: LINKERD2_PROXY_CONTROL_LISTEN_ADDR, value: "0.0.0.0:4190"}}
status: {{phase: Running, podIP: 10.244.200.10, podIPs: [{{ip: 10.244.200.10}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: soak, namespace: soak}}
spec:
  clusterIP: 10.96.200.1
  selector: {{app: soak}}
  ports: [{{name: http, port: 80, targetPort: 8080, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: soak-1
  namespace: soak
  labels: {{kubernetes.io/service-name: soak}}
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints:
{slice_endpoints}---
apiVersion: linkerd.io/v1alpha2
kind: ServiceProfile
metadata: {{name: soak.soak.svc.cluster.local, namespace: soak}}
spec:
  routes:
  - name: v{version}
    condition: {{method: GET, pathRegex: "/v{version}/.*"}}
---
apiVersion: policy.linkerd.io/v1beta3
kind: Server
metadata: {{name: soak-http, namespace: soak}}
spec:
  podSelector: {{matchLabels: {{app: soak}}}}
  port: http
  proxyProtocol: {protocol}
"#
    );
    let staged: PathBuf = dir.join("soak.yaml");
    std::fs::write(&staged, text).with_context(|| format!("cannot write {}", staged.display()))?;
    std::fs::rename(&staged, state.join("soak.yaml")).context("cannot rename the churned file")?;
    Ok(())
}
