//! `mtls-shim`: terminates mesh TLS in front of the linkerd-destination pod's controllers.

use anyhow::Context;
use clap::Parser;
use linkerd_runtime::{shutdown, tls::ClientAuth};
use mtls_shim::{AdminState, Args, Config, Shim, ShimMetrics};
use std::sync::Arc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    linkerd_runtime::exit_code(run(Args::parse()).await)
}

async fn run(args: Args) -> anyhow::Result<()> {
    args.log.init()?;

    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = ShimMetrics::register(&mut registry);
    linkerd_runtime::process::register(&mut registry);

    let identity = args.identity().map_err(anyhow::Error::msg)?;
    let config = Config {
        forwards: args.forwards.clone(),
        identity,
        trust_anchors: args.trust_anchors.clone(),
        local_identity: args.local_identity(),
        client_auth: if args.allow_unauthenticated {
            ClientAuth::Optional
        } else {
            ClientAuth::Required
        },
    };
    let shim = Shim::bind(&config, metrics).await?;

    let (trigger, shutdown) = shutdown::channel();
    tokio::spawn(trigger.on_signal());
    let (admin_addr, admin) = AdminState::new(shim.ready(), Arc::new(registry))
        .bind(args.admin_addr, shutdown.clone())
        .await
        .with_context(|| format!("cannot listen on --admin-addr {}", args.admin_addr))?;
    tracing::info!(%admin_addr, "serving the admin endpoints");

    shim.serve(shutdown).await;
    let _ = admin.await;
    Ok(())
}
