//! The `kube` source: kube-runtime watchers (list + watch, resourceVersion resume, exponential
//! backoff, and a relist after `410 Gone`), turned into [`Event`]s.

use futures::{StreamExt, stream::BoxStream};
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};

use super::{Event, Source, Watched};

/// Watches a Kubernetes API server with a [`kube::Client`].
#[derive(Clone)]
pub struct KubeSource {
    client: Client,
}

impl KubeSource {
    /// A source over `client` (built from in-cluster config, `KUBECONFIG` or `--kubeconfig`).
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

impl Source for KubeSource {
    fn events<K: Watched>(&self) -> BoxStream<'static, Event<K>> {
        let api = Api::<K>::all(self.client.clone());
        let kind = K::kind(&());
        let events = watcher(api, watcher::Config::default()).default_backoff();
        // A relist arrives as Init, InitApply..., InitDone: buffer it into one Reset so the index
        // can tell what vanished while the watch was down.
        events
            .scan(None::<Vec<K>>, move |relist, event| {
                let out = match event {
                    Ok(watcher::Event::Init) => {
                        *relist = Some(Vec::new());
                        None
                    }
                    Ok(watcher::Event::InitApply(obj)) => {
                        relist.get_or_insert_with(Vec::new).push(obj);
                        None
                    }
                    Ok(watcher::Event::InitDone) => {
                        Some(Event::Reset(relist.take().unwrap_or_default()))
                    }
                    Ok(watcher::Event::Apply(obj)) => Some(Event::Apply(obj)),
                    Ok(watcher::Event::Delete(obj)) => Some(Event::Delete(obj)),
                    Err(error) => {
                        tracing::warn!(%kind, %error, "watch failed; retrying with backoff");
                        None
                    }
                };
                futures::future::ready(Some(out))
            })
            .filter_map(futures::future::ready)
            .boxed()
    }
}
