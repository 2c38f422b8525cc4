//! The tonic service implementing `io.linkerd.proxy.outbound.OutboundPolicies`
//! (spec/policy.md §5.1, §5.8, §9, §10).

use futures::{Stream, StreamExt};
use linkerd_index::{
    ObjectRef, OutboundIndex,
    outbound::{OutboundError, OutboundLookup, OutboundPolicy, OutboundTarget},
};
use linkerd_runtime::{
    grpc::{Shared, StreamingMethod, WatchStreams},
    introspect::{LastSent, StreamMeta, StreamRegistry},
    shutdown::Shutdown,
};
use linkerd2_proxy_api::outbound::{
    OutboundPolicy as ApiPolicy, TrafficSpec,
    outbound_policies_server::{OutboundPolicies, OutboundPoliciesServer},
    traffic_spec::Target,
};
use std::{net::SocketAddr, pin::Pin, sync::Arc};
use tonic::{Request, Response, Status, codegen::BoxFuture};

use crate::{
    metrics::{OUTBOUND_GET, OUTBOUND_WATCH, PolicyMetrics},
    translate::outbound::OutboundTranslator,
    views::{DistinctViews, SharedTranslations, Translate, ViewMessages},
    workload::{parse_workload, workload_name},
};

/// The protobuf name of `OutboundPolicy`, as the introspection API names what a `Watch`
/// stream sent.
pub const POLICY_TYPE: &str = "io.linkerd.proxy.outbound.OutboundPolicy";

/// `OutboundPolicies` over an [`OutboundIndex`].
#[derive(Clone)]
pub struct OutboundPolicyService {
    index: OutboundIndex,
    translator: Arc<OutboundTranslator>,
    /// The `Watch` messages, shared by the streams of a topic.
    translations: Arc<SharedTranslations<OutboundPolicy, ApiPolicy>>,
    /// `--cluster-domain`: authorities are `<name>.<namespace>.svc.<cluster-domain>[:port]`.
    cluster_domain: String,
    metrics: PolicyMetrics,
    /// The open `Watch` streams, for the introspection API and the stream metrics.
    streams: StreamRegistry,
    shutdown: Shutdown,
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// `OutboundPolicies` as served (see [`OutboundPolicyService::into_server`]).
pub type OutboundGrpc = WatchStreams<OutboundPoliciesServer<OutboundPolicyService>, WatchMethod>;

/// `OutboundPolicies.Watch`, its messages shared ([`linkerd_runtime::grpc`]).
#[derive(Clone)]
pub struct WatchMethod(Arc<OutboundPolicyService>);

impl StreamingMethod for WatchMethod {
    type Request = TrafficSpec;
    type Response = ApiPolicy;
    type Stream = BoxStream<Shared<ApiPolicy>>;
    const PATH: &'static str = "/io.linkerd.proxy.outbound.OutboundPolicies/Watch";

    fn call(&self, request: Request<TrafficSpec>) -> BoxFuture<Response<Self::Stream>, Status> {
        let messages = self.0.watch_messages(request).map(Response::new);
        Box::pin(async move { messages })
    }

    fn refused(&self, code: tonic::Code) {
        self.0.metrics.refused(&OUTBOUND_WATCH, code);
    }
}

// === impl OutboundPolicyService ===

impl OutboundPolicyService {
    /// A service answering from `index`; every `Watch` stream ends with `OK` when `shutdown`
    /// fires.
    pub fn new(
        index: OutboundIndex,
        translator: OutboundTranslator,
        cluster_domain: String,
        metrics: PolicyMetrics,
        shutdown: Shutdown,
    ) -> Self {
        Self {
            index,
            translator: Arc::new(translator),
            translations: Arc::new(SharedTranslations::new()),
            cluster_domain,
            metrics,
            streams: StreamRegistry::new(),
            shutdown,
        }
    }

    /// The same service, recording its `Watch` streams in `streams` (the introspection API's
    /// registry; by default one nobody reads).
    pub fn with_streams(mut self, streams: StreamRegistry) -> Self {
        self.streams = streams;
        self
    }

    /// The tonic service, ready to add to a `Server`: the generated server, with the `Watch`
    /// streams sending shared messages ([`linkerd_runtime::grpc`]).
    pub fn into_server(self) -> OutboundGrpc {
        let service = Arc::new(self);
        WatchStreams::new(
            OutboundPoliciesServer::from_arc(service.clone())
                .max_decoding_message_size(linkerd_runtime::grpc::MAX_REQUEST_BYTES),
            WatchMethod(service),
        )
    }

    /// The target and client namespace a request names (§5.1), in the spec's validation order.
    ///
    /// Errors (§9): `InvalidArgument` "target is required", "Invalid workload: …", "invalid
    /// authority", "authority must have a host", "port outside valid range", "port cannot be
    /// zero", "traffic target must have an IP", "failed to parse target addr: …"; `NotFound`
    /// `"authority must be of the form <name>.<namespace>.svc.<domain>"`.
    pub fn parse_request(&self, spec: &TrafficSpec) -> Result<(OutboundTarget, String), Status> {
        let target = spec
            .target
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("target is required"))?;
        let source_namespace = parse_workload(&spec.source_workload)
            .map_err(|e| Status::invalid_argument(e.to_string()))?
            .namespace()
            .to_string();
        let target = match target {
            Target::Authority(authority) => parse_authority(authority, &self.cluster_domain)?,
            Target::Addr(addr) => {
                let port = match addr.port {
                    0 => return Err(Status::invalid_argument("port cannot be zero")),
                    p => u16::try_from(p)
                        .map_err(|_| Status::invalid_argument("port outside valid range"))?,
                };
                let ip = addr
                    .ip
                    .ok_or_else(|| Status::invalid_argument("traffic target must have an IP"))?;
                let ip = std::net::IpAddr::try_from(ip).map_err(|e| {
                    Status::invalid_argument(format!("failed to parse target addr: {e}"))
                })?;
                // An IPv4-mapped IPv6 address is the IPv4 address the cluster indexes.
                OutboundTarget::Addr(SocketAddr::new(ip.to_canonical(), port))
            }
        };
        Ok((target, source_namespace))
    }

    fn lookup(&self, spec: &TrafficSpec) -> Result<OutboundLookup, Status> {
        let (target, source_namespace) = self.parse_request(spec)?;
        tracing::debug!(?target, %source_namespace, "outbound lookup");
        self.index
            .outbound_policy(target, &source_namespace)
            .map_err(|e| match e {
                OutboundError::NoSuchService => Status::not_found(e.to_string()),
            })
    }

    /// The messages of a `Watch` stream (see [`OutboundPolicies::watch`]), each shared with
    /// the other streams of its topic. Errors: see [`OutboundPolicies::watch`].
    fn watch_messages(
        &self,
        request: Request<TrafficSpec>,
    ) -> Result<BoxStream<Shared<ApiPolicy>>, Status> {
        let rpc = self.metrics.start(&OUTBOUND_WATCH);
        let lookup = match self.lookup(request.get_ref()) {
            Ok(lookup) => lookup,
            Err(status) => return Err(rpc.fail(status)),
        };
        let spec = request.get_ref();
        let meta = StreamMeta {
            api: "Watch",
            peer: request.remote_addr(),
            client_identity: None,
            target: match &spec.target {
                Some(Target::Authority(authority)) => authority.clone(),
                Some(Target::Addr(addr)) => match addr.ip.map(std::net::IpAddr::try_from) {
                    Some(Ok(ip)) => SocketAddr::new(ip, addr.port as u16).to_string(),
                    _ => format!("?:{}", addr.port),
                },
                None => String::new(),
            },
            pod: workload_name(&spec.source_workload),
            context_token: spec.source_workload.clone(),
        };
        match lookup {
            OutboundLookup::Fixed(policy) => {
                let first = Shared::new(self.translator.policy(&policy));
                rpc.sent();
                let record = self.streams.open(meta);
                record.sent(1, Some(LastSent::message(POLICY_TYPE, first.clone())));
                let stream = futures::stream::once(async move { Ok(first) })
                    .chain(futures::stream::pending())
                    .take_until(self.shutdown.clone().signaled());
                // `rpc` finishes (counted OK) when the stream drops.
                let stream = stream.map(move |m| {
                    let _ = (&rpc, &record);
                    m
                });
                Ok(Box::pin(stream))
            }
            OutboundLookup::Watch(rx) => {
                let messages = ViewMessages::new(
                    DistinctViews::new(rx).recorded(&self.streams, meta, self.translator.clone()),
                    self.translator.clone(),
                    self.translations.clone(),
                    rpc,
                    self.shutdown.clone(),
                );
                Ok(Box::pin(messages))
            }
        }
    }
}

/// Parses an authority target (§5.1 step 3): `<name>.<namespace>.svc[.<cluster-domain>][.]`
/// with an optional port (default 80), case-insensitively.
pub fn parse_authority(authority: &str, cluster_domain: &str) -> Result<OutboundTarget, Status> {
    // Upstream's message, with the parser's reason after it (the parser's own reason for a
    // misplaced ':' or '[' is only "invalid authority": what it means is said instead).
    let parsed: http::uri::Authority = authority.parse().map_err(|e: http::uri::InvalidUri| {
        let reason = e.to_string();
        Status::invalid_argument(match (reason.as_str(), misplaced_colon(authority)) {
            ("invalid authority", Some(why)) => format!("invalid authority: {why}"),
            ("invalid authority", None) => reason,
            _ => format!("invalid authority: {reason}"),
        })
    })?;
    let host = parsed.host();
    if host.is_empty() {
        return Err(Status::invalid_argument("authority must have a host"));
    }
    let port = authority_port(&parsed)?;
    // No Service has such a name, and each distinct name a client watches costs a topic while
    // its stream lasts: refused, as `Get` refuses it.
    let name = host.trim_end_matches('.');
    if name.len() > 253 || name.split('.').any(|label| label.len() > 63) {
        return Err(Status::invalid_argument(
            "invalid authority: name longer than DNS allows (253 bytes, 63 per label)",
        ));
    }
    // DNS names are case-insensitive; Kubernetes names are lowercase.
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let host = host
        .strip_suffix(cluster_domain)
        .and_then(|h| h.strip_suffix('.'))
        .unwrap_or(&host);
    let form =
        || Status::not_found("authority must be of the form <name>.<namespace>.svc.<domain>");
    let mut parts = host.split('.');
    let (Some(name), Some(namespace), Some("svc"), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(form());
    };
    if name.is_empty() || namespace.is_empty() {
        return Err(form());
    }
    Ok(OutboundTarget::Service {
        service: ObjectRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
        },
        port,
    })
}

/// Why `authority` cannot be `host[:port]` because of its brackets or colons, if that is why.
fn misplaced_colon(authority: &str) -> Option<&'static str> {
    if authority.starts_with('[') {
        return (!authority.contains(']')).then_some("'[' without its ']'");
    }
    if authority.contains(['[', ']']) {
        return Some("'[' or ']' outside an IPv6 address's brackets");
    }
    (authority.matches(':').count() > 1)
        .then_some("more than one ':' (an IPv6 address is written in brackets)")
}

/// The port of an authority target: 80 when absent; the address target's errors (§5.1
/// step 4) when 0 or above 65535 (upstream reads such a port as absent, serving port 80's
/// policy for a port the client never asked about).
fn authority_port(parsed: &http::uri::Authority) -> Result<u16, Status> {
    // `Authority::port` is `None` for a port too long for a `u16`, so read the text itself.
    let port = match parsed.as_str().rsplit_once(':') {
        Some((_, port)) if !port.contains(']') => port,
        _ => return Ok(80),
    };
    // `u64::from_str` takes a leading `+`, which no authority port has.
    let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    match port.parse::<u64>() {
        Ok(_) if !digits => Err(Status::invalid_argument(format!(
            "invalid authority: port {port:?} is not a number"
        ))),
        Ok(0) => Err(Status::invalid_argument("port cannot be zero")),
        Ok(n) => u16::try_from(n).map_err(|_| Status::invalid_argument("port outside valid range")),
        // Digits too many for a u64 are still out of range; anything else is no port at all.
        Err(_) if digits => Err(Status::invalid_argument("port outside valid range")),
        Err(_) => Err(Status::invalid_argument(format!(
            "invalid authority: port {port:?} is not a number"
        ))),
    }
}

#[tonic::async_trait]
impl OutboundPolicies for OutboundPolicyService {
    type WatchStream = BoxStream<ApiPolicy>;

    /// The current policy of a target (§5.8). Errors: see [`Self::parse_request`], and
    /// `NotFound` "No such service" for an in-cluster address nothing claims.
    async fn get(&self, request: Request<TrafficSpec>) -> Result<Response<ApiPolicy>, Status> {
        let rpc = self.metrics.start(&OUTBOUND_GET);
        let policy = match self.lookup(request.get_ref()) {
            Ok(OutboundLookup::Watch(rx)) => rx.borrow().clone(),
            Ok(OutboundLookup::Fixed(policy)) => policy,
            Err(status) => return Err(rpc.fail(status)),
        };
        Ok(Response::new(self.translator.policy(&policy)))
    }

    /// The current policy of a target, then every change (§5.8, §10): a recomputation equal
    /// to the last one sent sends nothing, and a slow reader only gets the newest value. A
    /// fixed policy (undefined port) is sent once and the stream stays open. The stream of an
    /// address in an EgressNetwork, or of the external fallback, ends with `OK` when the
    /// EgressNetworks it may resolve to change, so the proxy resolves again (§5.8). Ends with
    /// `OK` at shutdown.
    ///
    /// Served through [`WatchMethod`]; this is the same stream with each message copied out.
    async fn watch(
        &self,
        request: Request<TrafficSpec>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let messages = self.watch_messages(request)?;
        Ok(Response::new(Box::pin(
            messages.map(|message| message.map(Shared::into_inner)),
        )))
    }
}

impl Translate<OutboundPolicy> for OutboundTranslator {
    type Message = ApiPolicy;
    const TYPE_NAME: &'static str = POLICY_TYPE;
    fn translate(&self, view: &OutboundPolicy) -> ApiPolicy {
        self.policy(view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(ns: &str, name: &str, port: u16) -> OutboundTarget {
        OutboundTarget::Service {
            service: ObjectRef {
                namespace: ns.into(),
                name: name.into(),
            },
            port,
        }
    }

    #[test]
    fn authorities() {
        let parse = |a: &str| parse_authority(a, "cluster.local");
        assert_eq!(
            parse("web-svc.emojivoto.svc.cluster.local:8080").unwrap(),
            service("emojivoto", "web-svc", 8080)
        );
        assert_eq!(
            parse("web-svc.emojivoto.svc.cluster.local.").unwrap(),
            service("emojivoto", "web-svc", 80)
        );
        assert_eq!(
            parse("web-svc.emojivoto.svc:81").unwrap(),
            service("emojivoto", "web-svc", 81)
        );
        assert_eq!(
            parse("Web-Svc.EmojiVoto.SVC.Cluster.Local:81").unwrap(),
            service("emojivoto", "web-svc", 81)
        );
        let err = |a: &str| parse(a).unwrap_err();
        // Regression: these were served as port 80.
        for authority in [
            "web-svc.emojivoto.svc.cluster.local:65536",
            "web-svc.emojivoto.svc.cluster.local:99999999999999999999999",
        ] {
            let e = err(authority);
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{authority}");
            assert_eq!(e.message(), "port outside valid range", "{authority}");
        }
        let e = err("web-svc.emojivoto.svc.cluster.local:0");
        assert_eq!(
            (e.code(), e.message()),
            (tonic::Code::InvalidArgument, "port cannot be zero")
        );
        let e = err("web-svc.emojivoto.svc.cluster.local:abc");
        assert_eq!(
            (e.code(), e.message()),
            (
                tonic::Code::InvalidArgument,
                "invalid authority: port \"abc\" is not a number"
            )
        );
        // Rust's integer parsing takes a leading `+`; a port is digits only.
        let e = err("web-svc.emojivoto.svc.cluster.local:+80");
        assert_eq!(
            (e.code(), e.message()),
            (
                tonic::Code::InvalidArgument,
                "invalid authority: port \"+80\" is not a number"
            )
        );
        assert_eq!(
            err("a b").message(),
            "invalid authority: invalid uri character"
        );
        assert_eq!(err("").message(), "invalid authority: empty string");
        // The parser says only "invalid authority" for these (newcomer finding).
        for (authority, why) in [
            (
                "web-svc.emojivoto.svc.cluster.local:80:80",
                "more than one ':' (an IPv6 address is written in brackets)",
            ),
            (
                "::1",
                "more than one ':' (an IPv6 address is written in brackets)",
            ),
            ("[::1", "'[' without its ']'"),
            ("a]:80", "'[' or ']' outside an IPv6 address's brackets"),
        ] {
            assert_eq!(
                err(authority).message(),
                format!("invalid authority: {why}"),
                "{authority}"
            );
        }
        // Found by a newcomer: `Get` refused such names while this served a default policy.
        let long_label = format!("{}.emojivoto.svc.cluster.local:80", "a".repeat(64));
        assert_eq!(
            err(&long_label).message(),
            "invalid authority: name longer than DNS allows (253 bytes, 63 per label)"
        );
        let long_name = format!("{}.svc.cluster.local", vec!["a".repeat(63); 4].join("."));
        assert_eq!(err(&long_name).code(), tonic::Code::InvalidArgument);
        let longest_label = format!("{}.emojivoto.svc.cluster.local:80", "a".repeat(63));
        assert!(parse_authority(&longest_label, "cluster.local").is_ok());
        assert_eq!(err(":80").code(), tonic::Code::InvalidArgument);
        let e = err("example.com:80");
        assert_eq!(e.code(), tonic::Code::NotFound);
        assert_eq!(
            e.message(),
            "authority must be of the form <name>.<namespace>.svc.<domain>"
        );
        assert_eq!(
            err("web.emojivoto.svc.other.domain").code(),
            tonic::Code::NotFound
        );
    }
}
