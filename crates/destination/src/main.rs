//! `destination`: the Destination gRPC server of the linkerd-destination pod.

use anyhow::Context;
use destination::{
    Args, DestinationMetrics, DestinationService, EndpointTranslator, external_endpoints, serve,
    server::bind,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use linkerd_index::{
    ClusterSource, ClusterStore, ClusterStoreConfig, DiscoveryIndex, IndexMetrics, LinkMetrics,
    Watches,
    lease::{self, LeaseConfig},
};
use linkerd_runtime::{Admin, go_flags, introspect::StreamRegistry, shutdown};
use std::sync::Arc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let line = go_flags::parse::<Args>(destination::args::UNIMPLEMENTED);
    linkerd_runtime::exit_code(run(line).await)
}

async fn run(line: go_flags::CommandLine<Args>) -> anyhow::Result<()> {
    line.args.log.init()?;
    line.log_warnings();
    let args = line.args;
    let translator = EndpointTranslator::new(args.translator_config()?);
    let linked_dirs = args.linked_cluster_dirs()?;

    let mut registry = prometheus_client::registry::Registry::default();
    let index_metrics = IndexMetrics::register(&mut registry);
    let metrics = DestinationMetrics::register(&mut registry);
    let link_metrics = LinkMetrics::register(&mut registry);
    let controller_metrics = external_endpoints::ControllerMetrics::register(&mut registry);
    let streams = StreamRegistry::register(&mut registry, &["Get", "GetProfile"]);
    linkerd_runtime::process::register(&mut registry);

    let (trigger, shutdown) = shutdown::channel();
    tokio::spawn(trigger.on_signal());

    let index = DiscoveryIndex::new();
    let mut watches = Watches::new(index_metrics.clone());
    index.watch(&mut watches);
    let clusters = ClusterStore::watch(
        &mut watches,
        ClusterStoreConfig {
            namespace: args.controller_namespace.clone(),
            offline: linked_dirs,
            ..ClusterStoreConfig::default()
        },
        index_metrics.clone(),
        link_metrics,
    );
    let source = args.cluster.source(index_metrics).await?;
    // ExternalWorkload EndpointSlices (spec §K): offline, computed in-process from the start.
    if let ClusterSource::Offline(_) = &source {
        index.compute_external_workload_slices();
    }
    let watches = watches.start(&source).await;
    if let ClusterSource::Kube(kube) = &source {
        start_external_endpoints(
            &args,
            kube.client(),
            index.clone(),
            watches.ready(),
            controller_metrics,
        );
    }

    // `/ready` names the kinds still listing; linked clusters do not gate it (README).
    let readiness = watches.readiness();
    let (admin_addr, admin) = Admin::new(watches.ready(), Arc::new(registry))
        .with_reason(move || readiness.reason())
        .bind(args.admin_addr, shutdown.clone())
        .await
        .with_context(|| format!("cannot listen on --admin-addr {}", args.admin_addr))?;
    let (listener, addr) = bind(args.addr)
        .await
        .with_context(|| format!("cannot listen on --addr {}", args.addr))?;
    tracing::info!(%addr, %admin_addr, "serving Destination");
    linkerd_runtime::introspect::spawn(args.introspection_addr, streams.clone(), shutdown.clone())
        .await;

    let service = DestinationService::new(
        index,
        translator,
        args.cluster_domain.clone(),
        args.enable_ipv6,
        metrics,
        shutdown.clone(),
    )
    .with_clusters(clusters)
    .with_streams(streams);
    serve(listener, service, shutdown).await;
    let _ = admin.await;
    Ok(())
}

/// Starts the ExternalWorkload EndpointSlice controller behind the Lease
/// `linkerd-destination-endpoint-write` in `--controller-namespace`, claimed as the pod's host
/// name (spec §K). Without a host name the controller does not run (logged): `Get` serves
/// whatever slices the cluster has.
fn start_external_endpoints(
    args: &Args,
    client: kube::Client,
    index: DiscoveryIndex,
    ready: tokio::sync::watch::Receiver<bool>,
    metrics: external_endpoints::ControllerMetrics,
) {
    let Some(claimant) = host_name() else {
        tracing::error!("no HOSTNAME: the ExternalWorkload EndpointSlice controller does not run");
        return;
    };
    let namespace = &args.controller_namespace;
    let config = LeaseConfig::new(
        external_endpoints::LEASE_NAME,
        external_endpoints::FIELD_MANAGER,
        claimant,
        namespace,
    );
    let leadership = lease::spawn(Api::<Lease>::namespaced(client.clone(), namespace), config);
    let controller = external_endpoints::spawn(
        index,
        client,
        leadership,
        ready,
        external_endpoints::ControllerConfig {
            metrics,
            ..external_endpoints::ControllerConfig::default()
        },
    );
    tokio::spawn(async move {
        if let Err(error) = controller.await {
            tracing::error!(%error, "the ExternalWorkload EndpointSlice controller failed");
        }
    });
}

/// `HOSTNAME` (a pod's name), else the kernel's host name.
fn host_name() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}
