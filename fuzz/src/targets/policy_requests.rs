//! `InboundServerPolicies.GetPort` (`PortSpec`) and `OutboundPolicies.Get` (`TrafficSpec`)
//! against the policy controller's services over the bundled fixture clusters (spec/policy.md
//! §4.1, §5.1).
//!
//! Inbound input: the port as 4 little-endian bytes, then `PortSpec.workload` (UTF-8).
//! Outbound input: `<source_workload>\n<target>`, the target `authority <authority>`,
//! `addr <ip> <port>`, `addr - <port>` (no IP), `addr ? <port>` (an IP message with no
//! address) or nothing (no target).
//!
//! Properties: a refusal is `InvalidArgument` exactly when the request is malformed, with the
//! message the spec gives for the first broken rule, else `NotFound`; an answer carries a
//! protocol; every message fits in a gRPC status.

use linkerd_runtime::shutdown;
use linkerd2_proxy_api::{
    inbound::{PortSpec, inbound_server_policies_server::InboundServerPolicies},
    net::{IpAddress, TcpAddress},
    outbound::{TrafficSpec, outbound_policies_server::OutboundPolicies, traffic_spec::Target},
};
use policy::{
    InboundPolicyService, InboundTranslator, OutboundPolicyService, OutboundTranslator,
    PolicyMetrics,
    outbound::parse_authority,
    workload::{parse_port, parse_workload},
};
use tonic::{Code, Request};

use super::{MAX_MESSAGE, text};
use crate::cluster::{Indexes, block_on, cluster_networks};

/// Both policy services over the fixture clusters (one per thread: the runtime is).
struct Services {
    inbound: InboundPolicyService,
    outbound: OutboundPolicyService,
    _indexes: Indexes,
    _trigger: shutdown::Trigger,
}

impl Services {
    fn new() -> Self {
        let indexes = Indexes::fixtures();
        let (trigger, shutdown) = shutdown::channel();
        let metrics = PolicyMetrics::default();
        Self {
            inbound: InboundPolicyService::new(
                indexes.inbound.clone(),
                InboundTranslator::new(cluster_networks()),
                metrics.clone(),
                shutdown.clone(),
            ),
            outbound: OutboundPolicyService::new(
                indexes.outbound.clone(),
                OutboundTranslator::new(false),
                "cluster.local".into(),
                metrics,
                shutdown,
            ),
            _indexes: indexes,
            _trigger: trigger,
        }
    }
}

fn with_services<R>(f: impl FnOnce(&Services) -> R) -> R {
    thread_local! {
        static SERVICES: Services = Services::new();
    }
    SERVICES.with(f)
}

fn check_message(what: &str, status: &tonic::Status) {
    let message = status.message();
    assert!(
        !message.is_empty() && message.len() <= MAX_MESSAGE,
        "{what}: {:?} message of {} bytes",
        status.code(),
        message.len()
    );
}

/// See the module docs.
pub fn inbound_port_spec(data: &[u8]) {
    let (port, workload) = match data.split_first_chunk::<4>() {
        Some((port, rest)) => (u32::from_le_bytes(*port), rest),
        None => return,
    };
    let Some(workload) = text(workload) else {
        return;
    };
    let spec = PortSpec {
        workload: workload.to_string(),
        port,
    };
    let what = format!("{spec:?}");
    let answer = with_services(|s| block_on(s.inbound.get_port(Request::new(spec))));
    let expected_invalid = parse_workload(workload)
        .err()
        .map(|e| e.to_string())
        .or_else(|| parse_port(port).err().map(|e| e.to_string()));
    match (answer, expected_invalid) {
        (Ok(server), None) => {
            let server = server.into_inner();
            assert!(
                server.protocol.is_some(),
                "{what}: a server without protocol"
            );
        }
        (Err(status), None) => {
            check_message(&what, &status);
            assert_eq!(status.code(), Code::NotFound, "{what}: {status:?}");
        }
        (Err(status), Some(invalid)) => {
            check_message(&what, &status);
            assert_eq!(
                (status.code(), status.message()),
                (Code::InvalidArgument, invalid.as_str()),
                "{what}"
            );
        }
        (Ok(_), Some(invalid)) => panic!("{what}: answered although {invalid}"),
    }
}

/// See the module docs.
pub fn outbound_traffic_spec(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let (source_workload, target) = text.split_once('\n').unwrap_or((text, ""));
    let target = if let Some(authority) = target.strip_prefix("authority ") {
        Some(Target::Authority(authority.to_string()))
    } else if let Some(addr) = target.strip_prefix("addr ") {
        let (ip, port) = addr.split_once(' ').unwrap_or((addr, ""));
        let Ok(port) = port.parse::<u32>() else {
            return;
        };
        let ip = match ip {
            "-" => None,
            "?" => Some(IpAddress { ip: None }),
            ip => match ip.parse::<std::net::IpAddr>() {
                Ok(ip) => Some(IpAddress::from(ip)),
                Err(_) => return,
            },
        };
        Some(Target::Addr(TcpAddress { ip, port }))
    } else if target.is_empty() {
        None
    } else {
        return;
    };
    let spec = TrafficSpec {
        source_workload: source_workload.to_string(),
        target: target.clone(),
    };
    let what = format!("{spec:?}");
    let answer = with_services(|s| block_on(s.outbound.get(Request::new(spec))));
    let expected_invalid = expected_outbound_refusal(source_workload, target.as_ref());
    match (answer, expected_invalid) {
        (Ok(policy), None) => {
            let policy = policy.into_inner();
            assert!(
                policy.protocol.is_some(),
                "{what}: a policy without protocol"
            );
            assert!(
                policy.metadata.is_some(),
                "{what}: a policy without metadata"
            );
        }
        (Err(status), None) => {
            check_message(&what, &status);
            assert_eq!(status.code(), Code::NotFound, "{what}: {status:?}");
        }
        (Err(status), Some((code, message))) => {
            check_message(&what, &status);
            assert_eq!(status.code(), code, "{what}: {status:?}");
            if let Some(message) = message {
                assert_eq!(status.message(), message, "{what}");
            }
        }
        (Ok(_), Some(refusal)) => panic!("{what}: answered although refused by {refusal:?}"),
    }
}

/// The refusal §5.1 gives a request, in its validation order: the code, and the message when
/// it is fixed (`None`: the authority parser's, checked through [`parse_authority`]).
fn expected_outbound_refusal(
    source_workload: &str,
    target: Option<&Target>,
) -> Option<(Code, Option<String>)> {
    let Some(target) = target else {
        return Some((Code::InvalidArgument, Some("target is required".into())));
    };
    if let Err(e) = parse_workload(source_workload) {
        return Some((Code::InvalidArgument, Some(e.to_string())));
    }
    match target {
        Target::Authority(authority) => parse_authority(authority, "cluster.local")
            .err()
            .map(|status| (status.code(), Some(status.message().to_string()))),
        Target::Addr(addr) => {
            let refusal = if addr.port == 0 {
                "port cannot be zero"
            } else if addr.port > 65535 {
                "port outside valid range"
            } else if addr.ip.is_none() {
                "traffic target must have an IP"
            } else if addr.ip.is_some_and(|ip| ip.ip.is_none()) {
                return Some((Code::InvalidArgument, None));
            } else {
                return None;
            };
            Some((Code::InvalidArgument, Some(refusal.into())))
        }
    }
}
