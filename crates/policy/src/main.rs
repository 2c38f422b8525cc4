//! `policy-controller`: the policy container of the linkerd-destination pod.

use anyhow::Context;
use clap::Parser;
use linkerd_index::{Index, IndexMetrics};
use linkerd_runtime::{Admin, shutdown};
use policy::{Args, InboundPolicyService, InboundTranslator, PolicyMetrics, bind, serve};
use std::sync::Arc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.log.init()?;

    let mut registry = prometheus_client::registry::Registry::default();
    let index_metrics = IndexMetrics::register(&mut registry);
    let metrics = PolicyMetrics::register(&mut registry);

    let (trigger, shutdown) = shutdown::channel();
    tokio::spawn(trigger.on_signal());

    let index = Index::with_inbound(index_metrics.clone(), args.inbound_config());
    let source = args.cluster.source(index_metrics).await?;
    let _watches = index.spawn_policy_watches(&source);

    let (admin_addr, admin) = Admin::new(index.ready(), Arc::new(registry))
        .bind(args.admin_addr, shutdown.clone())
        .await
        .with_context(|| format!("cannot listen on --admin-addr {}", args.admin_addr))?;

    // The admission webhook (spec §6) is served on --server-addr from here.
    if !args.admission_controller_disabled {
        tracing::warn!(
            server_addr = %args.server_addr,
            "this build has no admission webhook; --server-addr is not served"
        );
    }

    let (listener, grpc_addr) = bind(args.grpc_addr)
        .await
        .with_context(|| format!("cannot listen on --grpc-addr {}", args.grpc_addr))?;
    tracing::info!(%grpc_addr, %admin_addr, "serving InboundServerPolicies");

    let inbound = InboundPolicyService::new(
        index,
        InboundTranslator::new(args.cluster_networks.0.clone()),
        metrics,
        shutdown.clone(),
    );
    serve(listener, inbound, shutdown).await?;
    let _ = admin.await;
    Ok(())
}
