//! Service, as discovery and outbound policy read it (spec/destination.md §B.2, spec/policy.md
//! §5.3).

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
};

use super::{
    AddressType, InvalidObject, Kind, Labels, OPAQUE_PORTS_ANNOTATION, ObjectRef, invalid, names,
    ports::PortSet, wire,
};

/// A Service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceInfo {
    pub namespace: String,
    pub name: String,
    /// `spec.type` is `ExternalName`: not a valid `Get` target (spec §E).
    pub external_name: bool,
    /// `spec.internalTrafficPolicy: Local`.
    pub internal_traffic_local: bool,
    /// `spec.clusterIPs` (or `spec.clusterIP`), without `None`.
    pub cluster_ips: Vec<IpAddr>,
    pub ports: Vec<ServicePort>,
    /// The `*.linkerd.io/` annotations (timeouts, retries, failure accrual, opaque ports,
    /// multicluster); the others are not kept.
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    /// `config.linkerd.io/opaque-ports`, parsed once (service port names resolved to their
    /// `port`); `None` when absent, so the default opaque ports apply (spec §B.2); empty when
    /// its value does not parse ([`PortSet::parse_annotation`]). Only
    /// `GetProfile.opaque_protocol` of service profiles reads it.
    pub opaque_ports: Option<PortSet>,
    /// `metadata.uid`: the owner of the EndpointSlices written for its ExternalWorkloads.
    pub uid: Option<String>,
    /// `spec.selector`; `None` when absent or empty (the Service selects nothing, spec §K).
    pub selector: Option<BTreeMap<String, String>>,
    /// `spec.clusterIP: None`.
    pub headless: bool,
    /// `spec.ipFamilies`, the families Kubernetes knows; empty when none is listed (headless
    /// Services), which the ExternalWorkload slices read as both (spec §K).
    pub ip_families: Vec<AddressType>,
    /// `metadata.deletionTimestamp` is set: the ExternalWorkload slice controller creates no
    /// slices for it (spec §K; the API server would refuse them), but still updates and
    /// deletes those it has.
    pub deleting: bool,
}

/// One `spec.ports[]` entry of a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    pub port: u16,
    /// The port's name; `""` when unnamed (matches unnamed slice ports).
    pub name: String,
    /// `appProtocol`, as written (outbound protocol selection, spec/policy.md §5.3).
    pub app_protocol: Option<String>,
    /// `protocol`; `TCP` when absent, as the API server defaults it.
    pub protocol: String,
    /// `targetPort`; `port` when absent, `0` or `""`, as the API server defaults it (a number
    /// outside 0..=65535 or a name that is no port name makes the Service invalid).
    pub target_port: TargetPort,
}

/// A Service port's `targetPort`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetPort {
    Number(u16),
    /// A port name of the selected workloads.
    Name(String),
}

impl Kind for k8s_openapi::api::core::v1::Service {
    type Wire = wire::Service;
    type Object = ServiceInfo;
    const LABEL: &'static str = "Service";

    fn from_wire(svc: wire::Service) -> Result<ServiceInfo, InvalidObject> {
        ServiceInfo::from_wire(svc)
    }
}

/// Why a Service of `ports` is invalid, if it is, as the API server refuses it: one port
/// repeats the number and protocol, or the name, of one before it (`spec.ports[1] repeats port
/// 80/TCP of spec.ports[0]`). Discovery would serve the first of the two, without a word; only
/// offline files hold such a Service.
fn repeated_port(ports: &[ServicePort]) -> Option<String> {
    if ports.len() < 2 {
        return None;
    }
    let mut numbers = HashMap::new();
    let mut names = HashMap::new();
    ports.iter().enumerate().find_map(|(index, port)| {
        let repeated = match numbers.insert((port.port, port.protocol.as_str()), index) {
            Some(i) => Some((format!("port {}/{}", port.port, port.protocol), i)),
            None if port.name.is_empty() => None,
            None => names
                .insert(port.name.as_str(), index)
                .map(|i| (format!("the name {:?}", port.name), i)),
        };
        repeated.map(|(what, i)| format!("spec.ports[{index}] repeats {what} of spec.ports[{i}]"))
    })
}

impl ServiceInfo {
    /// Builds the domain form of a Service. Errors when it has no name, a port outside
    /// 1..=65535, or two ports of one number and protocol, or of one name
    /// (`spec.ports[1] repeats port 80/TCP of spec.ports[0]`), as the API server refuses it.
    pub fn from_wire(svc: wire::Service) -> Result<Self, InvalidObject> {
        let (namespace, name) = names("Service", &svc.metadata)?;
        let spec = svc.spec;
        let mut ports = Vec::with_capacity(spec.ports.len());
        for p in spec.ports {
            let port = u16::try_from(p.port)
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| {
                    invalid(
                        "Service",
                        &namespace,
                        &name,
                        format!("port {} out of range", p.port),
                    )
                })?;
            // As the API server defaults and validates it: absent, `0` and `""` are the port.
            let target_port = match p.target_port {
                None | Some(wire::IntOrString::Int(0)) => TargetPort::Number(port),
                Some(wire::IntOrString::String(port_name)) if port_name.is_empty() => {
                    TargetPort::Number(port)
                }
                Some(wire::IntOrString::Int(n)) => {
                    TargetPort::Number(u16::try_from(n).map_err(|_| {
                        invalid(
                            "Service",
                            &namespace,
                            &name,
                            format!("targetPort {n} out of range"),
                        )
                    })?)
                }
                Some(wire::IntOrString::String(port_name)) => {
                    if !linkerd_k8s_api::names::is_port_name(&port_name) {
                        return Err(invalid(
                            "Service",
                            &namespace,
                            &name,
                            format!(
                                "targetPort {port_name:?} is not a port name: 1 to 15 lowercase \
                                 letters, digits or '-', with a letter"
                            ),
                        ));
                    }
                    TargetPort::Name(port_name)
                }
            };
            let port = ServicePort {
                port,
                name: p.name.unwrap_or_default(),
                app_protocol: p.app_protocol,
                protocol: p.protocol.unwrap_or_else(|| "TCP".to_string()),
                target_port,
            };
            ports.push(port);
        }
        if let Some(repeated) = repeated_port(&ports) {
            return Err(invalid("Service", &namespace, &name, repeated));
        }
        let headless = spec.cluster_ip.as_deref() == Some("None");
        // `None` (headless) and `""` (not yet allocated) are no addresses, and no typos.
        let address = |ip: &String| ip != "None" && !ip.is_empty();
        let mut ips = spec.cluster_ips;
        ips.retain(address);
        let cluster_ips = super::parse_single_and_list(
            ("Service", &namespace, &name),
            ("spec.clusterIP", spec.cluster_ip.filter(address)),
            ("spec.clusterIPs", ips),
        );
        let annotations = svc.metadata.annotations.0;
        let opaque_ports = annotations.get(OPAQUE_PORTS_ANNOTATION).map(|list| {
            PortSet::parse_annotation(list, |n| {
                ports.iter().find(|p| p.name == n).map(|p| p.port)
            })
            .unwrap_or_else(|error| {
                tracing::warn!(service = %format!("{namespace}/{name}"), %error, "invalid {OPAQUE_PORTS_ANNOTATION}: no port is opaque");
                PortSet::default()
            })
        });
        let ip_families = spec
            .ip_families
            .iter()
            .filter_map(|family| match family.as_str() {
                "IPv4" => Some(AddressType::IPv4),
                "IPv6" => Some(AddressType::IPv6),
                _ => None,
            })
            .collect();
        Ok(Self {
            deleting: svc.metadata.deletion_timestamp.is_some(),
            uid: svc.metadata.uid,
            selector: spec.selector.filter(|s| !s.is_empty()),
            headless,
            ip_families,
            external_name: spec.type_.as_deref() == Some("ExternalName"),
            internal_traffic_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
            cluster_ips,
            ports,
            opaque_ports,
            annotations,
            labels: svc.metadata.labels,
            namespace,
            name,
        })
    }

    pub fn object_ref(&self) -> ObjectRef {
        ObjectRef {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// Whether the Service's selector selects an object of its namespace with `labels`; never
    /// without a selector.
    pub fn selects(&self, labels: &Labels) -> bool {
        self.selector
            .as_ref()
            .is_some_and(|s| s.iter().all(|(k, v)| labels.get(k) == Some(v.as_str())))
    }
}
