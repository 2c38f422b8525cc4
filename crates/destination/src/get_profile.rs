//! `Destination.GetProfile` (spec/destination.md §D): dispatch on the path, then one stream per
//! request that reads its topic's newest view and sends a profile whenever the translation
//! differs from the last one sent (identical consecutive profiles are not re-sent).

use futures::{Stream, StreamExt};
use linkerd_index::{
    ObjectRef, PortSet, Workload,
    discovery::profiles::{
        EndpointProfileKey, EndpointProfileView, ServiceProfileKey, ServiceProfileView,
    },
    topic,
};
use linkerd_runtime::introspect::{LastSent, StreamMeta, StreamRecord};
use linkerd2_proxy_api::destination::{DestinationProfile, GetDestination};
use std::{net::SocketAddr, pin::Pin, sync::Arc, time::Instant};
use tonic::Status;

use crate::{
    authority::{ProfileTarget, parse_profile_target},
    metrics::{ProfileGuard, ProfileLabels, ServiceLabels},
    profile::{self, ServiceProfileTarget},
    server::DestinationService,
    token::ContextToken,
    translate::EndpointTranslator,
};

/// The response stream of one `GetProfile`.
pub type ProfileStream = Pin<Box<dyn Stream<Item = Result<DestinationProfile, Status>> + Send>>;

impl DestinationService {
    /// Resolves a `GetProfile` request, of an RPC that started at `started`, to its stream.
    ///
    /// Errors (spec §E, with §I.1 resolved): `InvalidArgument` for a malformed path or an
    /// ExternalName Service that declares the port; `NotFound` for an unknown Service or a pod
    /// DNS name no endpoint carries; `FailedPrecondition` when several Services share the
    /// cluster IP or several workloads claim the address.
    pub(crate) fn profile_stream(
        &self,
        request: GetDestination,
        peer: Option<SocketAddr>,
        started: Instant,
    ) -> Result<ProfileStream, Status> {
        let target = parse_profile_target(&request.path, &self.cluster_domain)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let token = ContextToken::parse(&request.context_token);
        tracing::debug!(path = %request.path, ?token, "GetProfile");
        let meta = StreamMeta {
            api: "GetProfile",
            peer,
            client_identity: None,
            target: request.path.clone(),
            pod: token.pod_ref(),
            context_token: request.context_token.clone(),
        };
        match target {
            ProfileTarget::Addr(addr) => {
                let services = self.index.services_by_cluster_ip(addr.ip());
                match services.as_slice() {
                    [] => self.endpoint_profile(addr, meta, started),
                    [svc] => {
                        self.service_profile(svc.object_ref(), addr.port(), token.ns, meta, started)
                    }
                    _ => Err(Status::failed_precondition(format!(
                        "found {} services with conflicting cluster IP {}",
                        services.len(),
                        addr.ip()
                    ))),
                }
            }
            ProfileTarget::Name(name) => {
                let service = ObjectRef {
                    namespace: name.namespace,
                    name: name.service,
                };
                let Some(instance) = name.instance else {
                    return self.service_profile(service, name.port, token.ns, meta, started);
                };
                let ip = self
                    .index
                    .pod_by_hostname(&service, &instance)
                    .and_then(|pod| pod.ips.first().copied())
                    .ok_or_else(|| {
                        Status::not_found(format!(
                            "no pod found in EndpointSlices of Service {}/{} for hostname {instance}",
                            service.namespace, service.name
                        ))
                    })?;
                self.endpoint_profile(SocketAddr::new(ip, name.port), meta, started)
            }
        }
    }

    /// The profile of a Service port (§D.2, §D.3).
    fn service_profile(
        &self,
        service: ObjectRef,
        port: u16,
        client_namespace: Option<String>,
        meta: StreamMeta,
        started: Instant,
    ) -> Result<ProfileStream, Status> {
        let fqn = format!(
            "{}.{}.svc.{}",
            service.name, service.namespace, self.cluster_domain
        );
        let mut rx = self.index.service_profile(ServiceProfileKey {
            service: service.clone(),
            port,
            profile_name: fqn.clone(),
            client_namespace,
        });
        let view = rx.borrow_and_update().clone();
        let Some(svc) = &view.service else {
            return Err(Status::not_found(format!(
                "Service {}.{} not found",
                service.name, service.namespace
            )));
        };
        let shutdown = self.shutdown.clone().signaled();
        // A port the Service does not declare gets one empty profile, then silence (§D.2 step
        // 2): the proxy falls back to its client policy.
        if !svc.ports.iter().any(|p| p.port == port) {
            let guard = ProfileGuard::undeclared_port(self.metrics.clone(), started);
            let record = self.streams.open(meta);
            let stream = futures::stream::once(async { Ok(profile::empty_profile()) })
                .chain(futures::stream::pending())
                .take_until(shutdown)
                // The guard and the record live as long as the stream: the stream is counted
                // when it ends.
                .inspect(move |_| {
                    guard.sent();
                    record.sent(
                        1,
                        Some(LastSent::message(PROFILE_TYPE, profile::empty_profile())),
                    );
                });
            return Ok(Box::pin(stream));
        }
        if svc.external_name {
            return Err(Status::invalid_argument(format!(
                "Invalid authority: service {}/{} is of type ExternalName",
                service.namespace, service.name
            )));
        }
        let defaults = self.translator.config().default_opaque_ports.clone();
        let target = move |view: &ServiceProfileView| {
            let opaque = view
                .service
                .as_ref()
                .and_then(|s| s.opaque_ports.as_ref())
                .unwrap_or(&defaults)
                .contains(port);
            Some(profile::service_profile(
                &ServiceProfileTarget {
                    fqn: fqn.clone(),
                    namespace: service.namespace.clone(),
                    service: service.name.clone(),
                    port,
                    opaque,
                },
                view.profile.as_deref(),
            ))
        };
        let guard = ProfileGuard::service(
            self.metrics.clone(),
            ProfileLabels {
                namespace: svc.namespace.clone(),
                profile: format!("{}.{}.svc.{}", svc.name, svc.namespace, self.cluster_domain),
            },
            ServiceLabels {
                namespace: svc.namespace.clone(),
                name: svc.name.clone(),
            },
            started,
        );
        let record = self.streams.open_following(meta, rx.current_view());
        Ok(Box::pin(
            updates(rx, target, guard, record).take_until(shutdown),
        ))
    }

    /// The profile of a workload address (§D.5).
    fn endpoint_profile(
        &self,
        addr: SocketAddr,
        meta: StreamMeta,
        started: Instant,
    ) -> Result<ProfileStream, Status> {
        let rx = self
            .index
            .endpoint_profile(EndpointProfileKey {
                ip: addr.ip(),
                port: addr.port(),
            })
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        let translator = self.translator.clone();
        let target = move |view: &EndpointProfileView| endpoint_profile(&translator, view);
        let guard = ProfileGuard::workload(self.metrics.clone(), started);
        let record = self.streams.open_following(meta, rx.current_view());
        Ok(Box::pin(
            updates(rx, target, guard, record).take_until(self.shutdown.clone().signaled()),
        ))
    }
}

/// The profiles of a topic: the current one first, then one per view whose translation differs
/// from the last sent. A view that translates to nothing (an endpoint that cannot be sent) is
/// skipped.
///
/// `record` is told what was sent and which view the client is up to date with: a view whose
/// profile was already sent is caught up at once; one that sends a profile is caught up when
/// the stream is next polled, which [`linkerd_runtime::grpc::WatchStreams`] does only once
/// HTTP/2 took the profile.
fn updates<V, F>(
    rx: topic::Receiver<V>,
    translate: F,
    guard: ProfileGuard,
    record: StreamRecord<V>,
) -> impl Stream<Item = Result<DestinationProfile, Status>> + Send
where
    V: Send + Sync + 'static,
    F: Fn(&V) -> Option<DestinationProfile> + Send + 'static,
{
    struct State<V, F> {
        rx: topic::Receiver<V>,
        translate: F,
        last: Option<Arc<DestinationProfile>>,
        started: bool,
        guard: ProfileGuard,
        record: StreamRecord<V>,
        /// The view of the profile handed out last, and when its change was seen.
        handed: Option<(Arc<V>, Option<Instant>)>,
    }
    let state = State {
        rx,
        translate,
        last: None,
        started: false,
        guard,
        record,
        handed: None,
    };
    futures::stream::unfold(state, |mut st| async move {
        if let Some((view, seen)) = st.handed.take() {
            st.record.caught_up(&view, true, seen);
        }
        loop {
            if st.started {
                st.rx.changed().await.ok()?;
            }
            let first = !st.started;
            st.started = true;
            let view = st.rx.borrow_and_update().clone();
            let Some(profile) = (st.translate)(&view) else {
                st.record.caught_up(&view, false, None);
                continue;
            };
            if st.last.as_deref() == Some(&profile) {
                st.record.caught_up(&view, false, None);
                continue;
            }
            let profile = Arc::new(profile);
            st.last = Some(profile.clone());
            st.guard.sent();
            let sent = profile.clone();
            st.record.sent(
                1,
                Some(LastSent::lazy(PROFILE_TYPE, move || {
                    prost::Message::encode_to_vec(&*sent)
                })),
            );
            // A stream's first message answers its request, not a change.
            let seen = (!first)
                .then(|| linkerd_index::change_seen_at(&view))
                .flatten();
            st.handed = Some((view, seen));
            return Some((Ok(Arc::unwrap_or_clone(profile)), st));
        }
    })
}

/// The protobuf name of `DestinationProfile`, as the introspection API names what a
/// `GetProfile` stream sent.
pub const PROFILE_TYPE: &str = "io.linkerd.proxy.destination.DestinationProfile";

/// The endpoint profile of `view` (§D.5): the default retry budget, `opaque_protocol`, and the
/// address as `Get` would send it, without `zone_locality` and with the workload's
/// `namespace`. `None` when the address cannot be sent (a meshed pod without meta ports).
pub fn endpoint_profile(
    translator: &EndpointTranslator,
    view: &EndpointProfileView,
) -> Option<DestinationProfile> {
    let ep = &view.endpoint;
    let port = ep.addr.port();
    let defaults: &PortSet = &translator.config().default_opaque_ports;
    let (opaque, namespace) = match &ep.workload {
        Workload::Pod { pod, .. } => (
            pod.is_opaque_port(port, defaults),
            Some(pod.namespace.clone()),
        ),
        Workload::External(ew) => (
            ew.is_opaque_port(port, defaults),
            Some(ew.namespace.clone()),
        ),
        Workload::Address { .. } => (defaults.contains(port), None),
    };
    let mut addr = match translator.weighted_addr(ep, None) {
        Ok(addr) => addr,
        Err(error) => {
            tracing::warn!(%error, addr = %ep.addr, "not sending an endpoint profile");
            return None;
        }
    };
    addr.metric_labels.remove("zone_locality");
    if let Some(ns) = namespace {
        addr.metric_labels.insert("namespace".into(), ns);
    }
    // On this path upstream keeps an ExternalWorkload owner's kind verbatim (§C.6.4).
    if let Workload::External(ew) = &ep.workload
        && let Some(owner) = &ew.owner
        && let Some(name) = addr.metric_labels.remove(&owner.kind.to_lowercase())
    {
        addr.metric_labels.insert(owner.kind.clone(), name);
    }
    Some(DestinationProfile {
        opaque_protocol: opaque || ep.server_opaque,
        retry_budget: Some(profile::default_retry_budget()),
        endpoint: Some(addr),
        ..DestinationProfile::default()
    })
}
