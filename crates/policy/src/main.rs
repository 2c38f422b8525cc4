//! `policy-controller`: the policy container of the linkerd-destination pod.

use anyhow::Context;
use clap::Parser;
use linkerd_index::{Index, IndexMetrics};
use linkerd_runtime::{
    Admin, shutdown,
    tls::{HttpsServer, ServerTls, TlsFiles},
};
use policy::{
    Args, InboundPolicyService, InboundTranslator, OutboundPolicyService, OutboundTranslator,
    PolicyMetrics, bind, serve_policies,
};
use std::sync::Arc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    linkerd_runtime::exit_code(run(Args::parse()).await)
}

async fn run(args: Args) -> anyhow::Result<()> {
    args.log.init()?;

    let mut registry = prometheus_client::registry::Registry::default();
    let index_metrics = IndexMetrics::register(&mut registry);
    let metrics = PolicyMetrics::register(&mut registry);

    let (trigger, shutdown) = shutdown::channel();
    tokio::spawn(trigger.on_signal());

    let index = Index::with_policy(
        index_metrics.clone(),
        args.inbound_config(),
        args.outbound_config(),
    );
    let source = args.cluster.source(index_metrics).await?;
    let _watches = index.spawn_policy_watches(&source);

    let (admin_addr, admin) = Admin::new(index.ready(), Arc::new(registry))
        .bind(args.admin_addr, shutdown.clone())
        .await
        .with_context(|| format!("cannot listen on --admin-addr {}", args.admin_addr))?;

    // The admission webhook (spec §6); a missing or bad certificate stops the process.
    let webhook = if args.admission_controller_disabled {
        None
    } else {
        let files = TlsFiles {
            certs: args.server_tls_certs.clone(),
            key: args.server_tls_key.clone(),
        };
        let tls = ServerTls::load(&files).context("cannot load the admission webhook's TLS")?;
        let server = HttpsServer::bind(args.server_addr, tls)
            .await
            .with_context(|| format!("cannot listen on --server-addr {}", args.server_addr))?;
        tracing::info!(server_addr = %server.local_addr(), "serving the admission webhook");
        let router = policy::admission::router();
        Some(tokio::spawn(
            server.serve(router, shutdown.clone().signaled()),
        ))
    };

    let (listener, grpc_addr) = bind(args.grpc_addr)
        .await
        .with_context(|| format!("cannot listen on --grpc-addr {}", args.grpc_addr))?;
    tracing::info!(%grpc_addr, %admin_addr, "serving InboundServerPolicies and OutboundPolicies");

    let inbound = InboundPolicyService::new(
        index.clone(),
        InboundTranslator::new(args.cluster_networks.0.clone()),
        metrics.clone(),
        shutdown.clone(),
    );
    let outbound = OutboundPolicyService::new(
        index,
        OutboundTranslator::new(args.allow_l5d_request_headers),
        args.cluster_domain.clone(),
        metrics,
        shutdown.clone(),
    );
    serve_policies(listener, inbound, Some(outbound), shutdown).await?;
    if let Some(webhook) = webhook {
        let _ = webhook.await;
    }
    let _ = admin.await;
    Ok(())
}
