//! `policy-controller`: the policy container of the linkerd-destination pod.

use anyhow::Context;
use k8s_openapi::{
    api::{apps::v1::Deployment, coordination::v1::Lease},
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::Api;
use linkerd_index::{
    ClusterSource, InboundIndex, IndexMetrics, OutboundIndex, StatusIndex, Watches,
};
use linkerd_runtime::{
    Admin, go_flags, shutdown,
    tls::{HttpsServer, ServerTls, TlsFiles},
};
use policy::{
    Args, InboundPolicyService, InboundTranslator, OutboundPolicyService, OutboundTranslator,
    PolicyMetrics, bind, lease,
    lease::LeaseConfig,
    serve_policies,
    status::{self, StatusConfig, StatusError, StatusMetrics},
};
use std::{sync::Arc, time::Duration};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Upstream's policy controller takes `--flag=value` already; through go_flags a flag
    // given twice takes its last value, so the chart's `additionalArgs` can override its own.
    let line = go_flags::parse::<Args>(&[]);
    linkerd_runtime::exit_code(run(line.args).await)
}

async fn run(args: Args) -> anyhow::Result<()> {
    args.log.init()?;

    let mut registry = prometheus_client::registry::Registry::default();
    let index_metrics = IndexMetrics::register(&mut registry);
    let metrics = PolicyMetrics::register(&mut registry);
    let status_metrics = StatusMetrics::register(&mut registry);
    let review_metrics = linkerd_admission::ReviewMetrics::register(
        &mut registry,
        policy::admission::REVIEWS_METRIC,
    );
    let streams = linkerd_runtime::introspect::StreamRegistry::register(
        &mut registry,
        &["WatchPort", "Watch"],
    );
    linkerd_runtime::process::register(&mut registry);

    let (trigger, shutdown) = shutdown::channel();
    tokio::spawn(trigger.on_signal());

    let source = args.cluster.source(index_metrics.clone()).await?;
    let inbound_index = InboundIndex::new(args.inbound_config(), index_metrics.clone());
    let outbound_index = OutboundIndex::new(args.outbound_config(), index_metrics.clone());
    let mut watches = Watches::new(index_metrics);
    inbound_index.watch(&mut watches);
    outbound_index.watch(&mut watches);
    // The route status writer, behind the Lease (spec §1.4, §7); offline mode has neither:
    // there acceptance is computed in-process.
    let status_index = match &source {
        ClusterSource::Kube(_) => {
            let index = StatusIndex::new(args.cluster_networks.0.clone());
            index.watch(&mut watches);
            Some(index)
        }
        ClusterSource::Offline(_) => None,
    };
    let watches = watches.start(&source).await;
    let status_writer = match (&source, status_index) {
        (ClusterSource::Kube(kube), Some(index)) => Some(
            start_status_writer(&args, kube.client(), index, watches.ready(), status_metrics)
                .await?,
        ),
        _ => None,
    };

    // `/ready` names the kinds still listing; linked clusters do not gate it (README).
    let readiness = watches.readiness();
    let (admin_addr, admin) = Admin::new(watches.ready(), Arc::new(registry))
        .with_reason(move || readiness.reason())
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
        let router = policy::admission::router(inbound_index.clone(), review_metrics);
        Some(tokio::spawn(
            server.serve(router, shutdown.clone().signaled()),
        ))
    };

    let (listener, grpc_addr) = bind(args.grpc_addr)
        .await
        .with_context(|| format!("cannot listen on --grpc-addr {}", args.grpc_addr))?;
    tracing::info!(%grpc_addr, %admin_addr, "serving InboundServerPolicies and OutboundPolicies");
    linkerd_runtime::introspect::spawn(args.introspection_addr, streams.clone(), shutdown.clone())
        .await;

    let inbound = InboundPolicyService::new(
        inbound_index,
        InboundTranslator::new(args.cluster_networks.0.clone()),
        metrics.clone(),
        shutdown.clone(),
    )
    .with_streams(streams.clone());
    let outbound = OutboundPolicyService::new(
        outbound_index,
        OutboundTranslator::new(args.allow_l5d_request_headers),
        args.cluster_domain.clone(),
        metrics,
        shutdown.clone(),
    )
    .with_streams(streams);
    let serving = serve_policies(listener, inbound, Some(outbound), shutdown);
    match status_writer {
        None => serving.await,
        Some(writer) => tokio::select! {
            () = serving => {}
            ended = writer => match ended {
                Ok(Ok(())) => anyhow::bail!("the route status writer stopped"),
                Ok(Err(error)) => return Err(error.into()),
                Err(error) => anyhow::bail!("the route status writer failed: {error}"),
            },
        },
    }
    if let Some(webhook) = webhook {
        let _ = webhook.await;
    }
    let _ = admin.await;
    Ok(())
}

/// Starts the Lease task (claimant `HOSTNAME`, owned by `--policy-deployment-name`) and the
/// status writer behind it. Errors without `HOSTNAME`, or when the Deployment cannot be read in
/// 3 tries 1 s apart (spec §1.3, §1.4).
async fn start_status_writer(
    args: &Args,
    client: kube::Client,
    index: StatusIndex,
    synced: tokio::sync::watch::Receiver<bool>,
    metrics: StatusMetrics,
) -> anyhow::Result<tokio::task::JoinHandle<Result<(), StatusError>>> {
    let claimant = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .context("HOSTNAME must be set: it names this instance in the status writer's Lease")?;
    let namespace = &args.control_plane_namespace;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let mut tries = 0;
    let deployment = loop {
        tries += 1;
        match deployments.get(&args.policy_deployment_name).await {
            Ok(deployment) => break deployment,
            Err(error) if tries < 3 => {
                tracing::warn!(%error, "cannot read the Deployment owning the Lease; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(error) => {
                return Err(error).with_context(|| {
                    format!(
                        "cannot read Deployment {namespace}/{} (--policy-deployment-name)",
                        args.policy_deployment_name
                    )
                });
            }
        }
    };
    let owner = deployment.metadata.uid.map(|uid| OwnerReference {
        api_version: "apps/v1".to_string(),
        kind: "Deployment".to_string(),
        name: args.policy_deployment_name.clone(),
        uid,
        controller: Some(true),
        block_owner_deletion: None,
    });
    let config = LeaseConfig {
        owner,
        ..lease::config(claimant, namespace)
    };
    let leadership = lease::spawn(Api::<Lease>::namespaced(client.clone(), namespace), config);
    let config = StatusConfig::new(Duration::from_millis(args.patch_timeout_ms));
    Ok(status::spawn(
        index, client, leadership, synced, config, metrics,
    ))
}
