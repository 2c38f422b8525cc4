//! `sp-validator`: the ServiceProfile admission webhook container of the linkerd-destination
//! pod (spec/sp-validator-and-pod.md §b.1).
//!
//! Starts the admin server, loads the certificate (a missing or bad file stops the start,
//! naming it), serves the webhook over HTTPS (TLS 1.3 only, §b.2) and then reports ready. On
//! SIGINT or SIGTERM both servers stop accepting and finish open requests.

use anyhow::Context;
use linkerd_admission::ReviewMetrics;
use linkerd_runtime::{
    Admin, go_flags, shutdown,
    tls::{HttpsServer, ServerTls, TlsFiles},
};
use sp_validator::{Args, REVIEWS_METRIC, router};
use std::sync::Arc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let line = go_flags::parse::<Args>(sp_validator::args::UNIMPLEMENTED);
    linkerd_runtime::exit_code(run(line).await)
}

async fn run(line: go_flags::CommandLine<Args>) -> anyhow::Result<()> {
    line.args.log.init()?;
    line.log_warnings();
    let args = line.args;

    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = ReviewMetrics::register(&mut registry, REVIEWS_METRIC);
    linkerd_runtime::process::register(&mut registry);

    let (trigger, shutdown) = shutdown::channel();
    tokio::spawn(trigger.on_signal());

    let (ready_tx, ready_rx) = tokio::sync::watch::channel(false);
    let (admin_addr, admin) = Admin::new(ready_rx, Arc::new(registry))
        .bind(args.admin_addr, shutdown.clone())
        .await
        .with_context(|| format!("cannot listen on --admin-addr {}", args.admin_addr))?;

    let files = TlsFiles {
        certs: args.server_tls_certs.clone(),
        key: args.server_tls_key.clone(),
    };
    let tls = ServerTls::load_tls13_only(&files).context("cannot load the webhook's TLS")?;
    let server = HttpsServer::bind(args.addr, tls)
        .await
        .with_context(|| format!("cannot listen on --addr {}", args.addr))?;
    tracing::info!(addr = %server.local_addr(), %admin_addr, "serving the ServiceProfile admission webhook");
    let webhook = tokio::spawn(server.serve(router(metrics), shutdown.signaled()));
    ready_tx.send_replace(true);

    let _ = webhook.await;
    let _ = admin.await;
    Ok(())
}
