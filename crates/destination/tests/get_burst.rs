//! Thousands of `Get` streams opened at once on one connection, as a proxy that reconnects
//! re-opens every stream it had: each must be served. h2 counts the small DATA frames it has
//! received and not yet handed to a stream (a flood guard) and closes the connection with
//! `ENHANCE_YOUR_CALM` when they pass a budget; the server must take each request's body
//! before it reads the next requests, not read the whole burst first.

mod support;

use linkerd2_proxy_api::destination::{GetDestination, update::Update};
use support::*;

/// More than h2's default budget allows queued at once (about 2,600 requests of this size).
const STREAMS: usize = 8_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_streams_on_one_connection_is_served() {
    let dir = StateDir::new();
    let h = Harness::start(dir.path()).await;
    let opening = (0..STREAMS).map(|k| {
        let mut client = h.client.clone();
        tokio::spawn(async move {
            let request = GetDestination {
                scheme: "k8s".into(),
                path: format!("svc-{k}.ns-{}.svc.cluster.local:80", k % 50),
                context_token: String::new(),
            };
            let mut stream = client.get(request).await?.into_inner();
            let first = stream.message().await?;
            Ok::<_, tonic::Status>((first, stream))
        })
    });
    let opened = futures::future::join_all(opening.collect::<Vec<_>>()).await;
    let mut failures = Vec::new();
    let mut streams = Vec::new();
    for (k, opened) in opened.into_iter().enumerate() {
        match opened.expect("stream task") {
            Ok((Some(update), stream)) => {
                assert!(
                    matches!(update.update, Some(Update::NoEndpoints(ref n)) if !n.exists),
                    "stream {k}: {update:?}"
                );
                streams.push(stream);
            }
            Ok((None, _)) => failures.push(format!("stream {k}: ended")),
            Err(status) => failures.push(format!("stream {k}: {status}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {STREAMS} streams failed, the first: {}",
        failures.len(),
        failures[0]
    );
    assert_eq!(streams.len(), STREAMS);
}
