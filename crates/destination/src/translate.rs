//! Translation of index endpoints into the proxy API's `WeightedAddr` (spec/destination.md §C.6).

use linkerd_index::{Endpoint, PortSet, Workload};
use linkerd2_proxy_api::destination::{
    AuthorityOverride, Http2ClientParams, ProtocolHint, TlsIdentity, WeightedAddr,
    http2_client_params::{FlowControl, Internals, KeepAlive},
    protocol_hint::{self, OpaqueTransport},
    tls_identity::{DnsLikeIdentity, Strategy, UriLikeIdentity},
};
use serde_json::Value;
use std::collections::HashMap;

/// The weight of every address (upstream's `defaultWeight`).
pub const DEFAULT_WEIGHT: u32 = 10_000;

/// Server-wide settings of the translation, from the flags.
#[derive(Clone, Debug)]
pub struct TranslatorConfig {
    /// `--controller-namespace`: pods whose `linkerd.io/control-plane-ns` equals it get an
    /// identity.
    pub controller_namespace: String,
    /// `--identity-trust-domain`; empty disables identities.
    pub trust_domain: String,
    /// `--enable-h2-upgrade`: `h2` hints for meshed, non-opaque endpoints.
    pub enable_h2_upgrade: bool,
    /// `--default-opaque-ports`, for pods without an opaque-ports annotation.
    pub default_opaque_ports: PortSet,
    /// `--meshed-http2-client-params`, sent on meshed endpoints.
    pub meshed_http2_params: Option<Http2ClientParams>,
    /// `--outbound-transport-mode=transport-header`: opaque transport for every meshed endpoint
    /// (except on the proxy's admin and control ports).
    pub force_opaque_transport: bool,
    /// `--ext-endpoint-zone-weights`: same-zone endpoints weigh ×10.
    pub ext_endpoint_zone_weights: bool,
}

/// Turns [`Endpoint`]s into `WeightedAddr`s. Shared by every stream.
#[derive(Clone, Debug)]
pub struct EndpointTranslator {
    config: TranslatorConfig,
}

/// An endpoint that cannot be sent: the address is left out of the update and logged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OmittedEndpoint {
    #[error(
        "pod {pod}: the linkerd-proxy container has no valid LINKERD2_PROXY_ADMIN_LISTEN_ADDR / LINKERD2_PROXY_CONTROL_LISTEN_ADDR"
    )]
    NoMetaPorts { pod: String },
    #[error("pod {pod}: opaque transport needs a valid LINKERD2_PROXY_INBOUND_LISTEN_ADDR")]
    NoInboundPort { pod: String },
}

impl EndpointTranslator {
    pub fn new(config: TranslatorConfig) -> Self {
        Self { config }
    }

    pub fn config(&self) -> &TranslatorConfig {
        &self.config
    }

    /// The `WeightedAddr` for `ep` as seen by a client in `client_zone`.
    ///
    /// Pods (§C.6.1) get labels `pod`, `<owner kind>` (`job` becomes `k8s_job`),
    /// `serviceaccount`, `control_plane_ns` and `pod_template_hash` when set, and `zone`;
    /// ExternalWorkloads (§C.6.2) get `external_workload`, `<owner kind>` and `zone`, a URI
    /// identity and always a hint. Every address gets `zone_locality` (`local`/`remote` when
    /// both zones are known, else `unknown`).
    pub fn weighted_addr(
        &self,
        ep: &Endpoint,
        client_zone: Option<&str>,
    ) -> Result<WeightedAddr, OmittedEndpoint> {
        let mut addr = WeightedAddr {
            addr: Some(ep.addr.into()),
            weight: DEFAULT_WEIGHT,
            ..WeightedAddr::default()
        };
        match &ep.workload {
            Workload::Pod { pod, owner } => {
                let labels = &mut addr.metric_labels;
                labels.insert("pod".into(), pod.name.clone());
                let kind = match owner.kind.to_lowercase() {
                    k if k == "job" => "k8s_job".to_string(),
                    k => k,
                };
                labels.insert(kind, owner.name.clone());
                labels.insert("serviceaccount".into(), pod.service_account.clone());
                if let Some(ns) = pod.labels.get("linkerd.io/control-plane-ns") {
                    labels.insert("control_plane_ns".into(), ns.to_owned());
                }
                if let Some(hash) = pod.labels.get("pod-template-hash") {
                    labels.insert("pod_template_hash".into(), hash.to_owned());
                }
                labels.insert("zone".into(), ep.zone.clone().unwrap_or_default());

                let port = ep.addr.port();
                if let Some(cp_ns) = pod.control_plane_ns()
                    && !pod.skip_inbound_ports.contains(port)
                {
                    let pod_name = || format!("{}/{}", pod.namespace, pod.name);
                    let proxy = pod.proxy.clone().unwrap_or_default();
                    let (Some(admin), Some(control)) = (proxy.admin, proxy.control) else {
                        return Err(OmittedEndpoint::NoMetaPorts { pod: pod_name() });
                    };
                    let opaque = ep.server_opaque
                        || pod.is_opaque_port(port, &self.config.default_opaque_ports);
                    let mut hint = ProtocolHint::default();
                    // The proxy's own admin and control ports never take opaque transport (§H.2).
                    if port != admin
                        && port != control
                        && (opaque || self.config.force_opaque_transport)
                    {
                        let inbound_port = proxy
                            .inbound
                            .filter(|p| *p != 0)
                            .ok_or_else(|| OmittedEndpoint::NoInboundPort { pod: pod_name() })?;
                        hint.opaque_transport = Some(OpaqueTransport {
                            inbound_port: u32::from(inbound_port),
                        });
                    }
                    hint.protocol = if opaque {
                        Some(protocol_hint::Protocol::Opaque(protocol_hint::Opaque {}))
                    } else if self.config.enable_h2_upgrade {
                        Some(protocol_hint::Protocol::H2(protocol_hint::H2 {}))
                    } else {
                        None
                    };
                    addr.protocol_hint = Some(hint);
                    addr.http2 = self.config.meshed_http2_params;
                    if !self.config.trust_domain.is_empty()
                        && cp_ns == self.config.controller_namespace
                    {
                        let name = format!(
                            "{}.{}.serviceaccount.identity.{}.{}",
                            pod.service_account,
                            pod.namespace,
                            self.config.controller_namespace,
                            self.config.trust_domain
                        );
                        addr.tls_identity = Some(TlsIdentity {
                            server_name: Some(DnsLikeIdentity { name: name.clone() }),
                            strategy: Some(Strategy::DnsLikeIdentity(DnsLikeIdentity { name })),
                        });
                    }
                }
            }
            Workload::External(ew) => {
                let labels = &mut addr.metric_labels;
                labels.insert("external_workload".into(), ew.name.clone());
                if let Some(owner) = &ew.owner {
                    labels.insert(owner.kind.to_lowercase(), owner.name.clone());
                }
                labels.insert("zone".into(), ep.zone.clone().unwrap_or_default());
                let port = ep.addr.port();
                let opaque =
                    ep.server_opaque || ew.is_opaque_port(port, &self.config.default_opaque_ports);
                // ExternalWorkloads are always meshed: h2 regardless of --enable-h2-upgrade.
                addr.protocol_hint = Some(ProtocolHint {
                    protocol: Some(if opaque {
                        protocol_hint::Protocol::Opaque(protocol_hint::Opaque {})
                    } else {
                        protocol_hint::Protocol::H2(protocol_hint::H2 {})
                    }),
                    opaque_transport: (opaque || self.config.force_opaque_transport).then(|| {
                        OpaqueTransport {
                            inbound_port: u32::from(ew.proxy_inbound_port()),
                        }
                    }),
                });
                addr.http2 = self.config.meshed_http2_params;
                addr.tls_identity = Some(TlsIdentity {
                    server_name: Some(DnsLikeIdentity {
                        name: ew.server_name.clone(),
                    }),
                    strategy: Some(Strategy::UriLikeIdentity(UriLikeIdentity {
                        uri: ew.identity.clone(),
                    })),
                });
            }
            Workload::Address {
                identity,
                authority_override,
            } => {
                if let Some(authority) = authority_override {
                    addr.authority_override = Some(AuthorityOverride {
                        authority_override: authority.clone(),
                    });
                }
                if let Some(identity) = identity.as_ref().filter(|i| !i.is_empty()) {
                    addr.tls_identity = Some(TlsIdentity {
                        server_name: None,
                        strategy: Some(Strategy::DnsLikeIdentity(DnsLikeIdentity {
                            name: identity.clone(),
                        })),
                    });
                    addr.protocol_hint = self.config.enable_h2_upgrade.then_some(ProtocolHint {
                        protocol: Some(protocol_hint::Protocol::H2(protocol_hint::H2 {})),
                        opaque_transport: None,
                    });
                    addr.http2 = self.config.meshed_http2_params;
                }
            }
        }
        let locality = match (
            client_zone.filter(|z| !z.is_empty()),
            ep.zone.as_deref().filter(|z| !z.is_empty()),
        ) {
            (Some(client), Some(zone)) if client == zone => "local",
            (Some(_), Some(_)) => "remote",
            _ => "unknown",
        };
        if locality == "local" && self.config.ext_endpoint_zone_weights {
            addr.weight *= 10;
        }
        addr.metric_labels
            .insert("zone_locality".into(), locality.into());
        Ok(addr)
    }
}

/// Errors in `--meshed-http2-client-params`.
#[derive(Debug, thiserror::Error)]
#[error("invalid --meshed-http2-client-params: {0}")]
pub struct Http2ParamsError(String);

/// Parses `--meshed-http2-client-params` as upstream does: the protobuf message's field names in
/// snake_case, matched case-insensitively, unknown keys ignored, durations as
/// `{"seconds":N,"nanos":M}` (spec/destination.md §A.2). An empty string means no params.
pub fn parse_http2_params(json: &str) -> Result<Option<Http2ClientParams>, Http2ParamsError> {
    if json.trim().is_empty() {
        return Ok(None);
    }
    let value: Value = serde_json::from_str(json).map_err(|e| Http2ParamsError(e.to_string()))?;
    let root = object(&value, "the top level")?;
    let mut params = Http2ClientParams::default();
    if let Some(v) = field(&root, "flow_control") {
        let o = object(v, "flow_control")?;
        params.flow_control = Some(FlowControl {
            initial_connection_window_size: uint(&o, "initial_connection_window_size")?,
            initial_stream_window_size: uint(&o, "initial_stream_window_size")?,
            adaptive_flow_control: boolean(&o, "adaptive_flow_control")?,
        });
    }
    if let Some(v) = field(&root, "keep_alive") {
        let o = object(v, "keep_alive")?;
        params.keep_alive = Some(KeepAlive {
            interval: duration(&o, "interval")?,
            timeout: duration(&o, "timeout")?,
            while_idle: boolean(&o, "while_idle")?,
        });
    }
    if let Some(v) = field(&root, "internals") {
        let o = object(v, "internals")?;
        params.internals = Some(Internals {
            max_concurrent_reset_streams: uint(&o, "max_concurrent_reset_streams")?,
            max_frame_size: uint(&o, "max_frame_size")?,
            max_send_buf_size: uint(&o, "max_send_buf_size")?,
        });
    }
    Ok(Some(params))
}

type Object<'a> = HashMap<String, &'a Value>;

fn object<'a>(v: &'a Value, what: &str) -> Result<Object<'a>, Http2ParamsError> {
    match v {
        Value::Object(map) => Ok(map.iter().map(|(k, v)| (k.to_lowercase(), v)).collect()),
        Value::Null => Ok(HashMap::new()),
        _ => Err(Http2ParamsError(format!("{what} must be an object"))),
    }
}

fn field<'a>(o: &Object<'a>, name: &str) -> Option<&'a Value> {
    o.get(name).copied().filter(|v| !v.is_null())
}

fn uint(o: &Object<'_>, name: &str) -> Result<u32, Http2ParamsError> {
    match field(o, name) {
        None => Ok(0),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| Http2ParamsError(format!("{name} must be an unsigned 32-bit integer"))),
    }
}

fn boolean(o: &Object<'_>, name: &str) -> Result<bool, Http2ParamsError> {
    match field(o, name) {
        None => Ok(false),
        Some(v) => v
            .as_bool()
            .ok_or_else(|| Http2ParamsError(format!("{name} must be true or false"))),
    }
}

fn duration(o: &Object<'_>, name: &str) -> Result<Option<prost_types::Duration>, Http2ParamsError> {
    let Some(v) = field(o, name) else {
        return Ok(None);
    };
    let d = object(v, name)?;
    let seconds = match field(&d, "seconds") {
        None => 0,
        Some(s) => s
            .as_i64()
            .ok_or_else(|| Http2ParamsError(format!("{name}.seconds must be an integer")))?,
    };
    let nanos = match field(&d, "nanos") {
        None => 0,
        Some(n) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| Http2ParamsError(format!("{name}.nanos must be a 32-bit integer")))?,
    };
    Ok(Some(prost_types::Duration { seconds, nanos }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_default_http2_params() {
        let p = parse_http2_params(
            r#"{"keep_alive":{"interval":{"seconds":10},"timeout":{"seconds":3},"while_idle":true}}"#,
        )
        .unwrap()
        .unwrap();
        let ka = p.keep_alive.unwrap();
        assert_eq!(
            ka.interval,
            Some(prost_types::Duration {
                seconds: 10,
                nanos: 0
            })
        );
        assert_eq!(
            ka.timeout,
            Some(prost_types::Duration {
                seconds: 3,
                nanos: 0
            })
        );
        assert!(ka.while_idle);
        assert!(p.flow_control.is_none());
    }

    #[test]
    fn keys_are_case_insensitive_and_unknown_keys_ignored() {
        let p = parse_http2_params(r#"{"KEEP_ALIVE":{"Timeout":{"nanos":5}},"bogus":1,"flow_control":{"initial_stream_window_size":65535}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            p.keep_alive.unwrap().timeout,
            Some(prost_types::Duration {
                seconds: 0,
                nanos: 5
            })
        );
        assert_eq!(p.flow_control.unwrap().initial_stream_window_size, 65535);
        assert_eq!(parse_http2_params("").unwrap(), None);
    }

    #[test]
    fn malformed_params_are_errors() {
        for bad in [
            "{",
            "[]",
            r#"{"keep_alive":{"interval":"10s"}}"#,
            r#"{"flow_control":{"max":-1,"initial_stream_window_size":-1}}"#,
        ] {
            assert!(parse_http2_params(bad).is_err(), "{bad}");
        }
    }
}
