//! Pod, as discovery and inbound policy read it (spec/destination.md §B.2, spec/policy.md §4.2).

use std::{collections::BTreeMap, net::IpAddr};

use super::{
    CONTROL_PLANE_NS_LABEL, InvalidObject, Kind, Labels, OPAQUE_PORTS_ANNOTATION, ObjectRef,
    OwnerRef, PROXY_CONTAINER_NAME, SKIP_INBOUND_PORTS_ANNOTATION, names, ports::PortSet,
    single_owner, wire,
};

/// Prefix of the Linkerd configuration annotations a pod's [`PodInfo::annotations`] keeps.
const CONFIG_ANNOTATION_PREFIX: &str = "config.linkerd.io/";

/// A Pod: only what discovery and inbound policy read, decoded once.
///
/// A realistic injected pod (`kubectl get pod -o json`, about 14 KB with the proxy's env,
/// probes and status) keeps about 1.7 KB here, inline struct and heap together;
/// `tests/pod_info_size.rs` guards 1,800 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    /// The `config.linkerd.io/` annotations (`default-inbound-policy`,
    /// `proxy-require-identity-inbound-ports`, …); the others (the injector's
    /// `linkerd.io/created-by`, `linkerd.io/trust-root-sha256`, …) are not read, so not kept.
    pub annotations: BTreeMap<String, String>,
    /// `spec.serviceAccountName`, `default` when empty.
    pub service_account: String,
    pub node_name: Option<String>,
    pub host_network: bool,
    pub phase: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// `status.podIPs`, falling back to `status.podIP`.
    pub ips: Vec<IpAddr>,
    /// `status.hostIPs`, falling back to `status.hostIP`.
    pub host_ips: Vec<IpAddr>,
    /// The single owner reference; `None` with zero or several.
    pub owner: Option<OwnerRef>,
    /// Ports declared by `initContainers` then `containers`.
    pub container_ports: Vec<ContainerPort>,
    /// What the `linkerd-proxy` container's environment says; `None` without a proxy container.
    pub proxy: Option<ProxyPorts>,
    /// `config.linkerd.io/opaque-ports`, parsed once (names resolved against container ports);
    /// `None` when the annotation is absent, so the default opaque ports apply; empty when its
    /// value does not parse ([`PortSet::parse_annotation`]).
    pub opaque_ports: Option<PortSet>,
    /// `config.linkerd.io/skip-inbound-ports`, parsed once (no names allowed there).
    pub skip_inbound_ports: PortSet,
    /// Paths of `httpGet` liveness, readiness and startup probes, by port (spec/policy.md
    /// §4.2): inbound policy adds a `probe` route for them.
    pub probe_paths: ProbePaths,
}

/// The `httpGet` probe paths of a pod: `(port, path)` pairs sorted and deduplicated, in one
/// allocation (a pod has a handful; a map of sets would cost a node per port).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbePaths(Box<[(u16, String)]>);

impl ProbePaths {
    /// Builds the set from pairs in any order.
    pub fn new(mut pairs: Vec<(u16, String)>) -> Self {
        pairs.sort_unstable();
        pairs.dedup();
        Self(pairs.into_boxed_slice())
    }

    /// The paths probed on `port`, in order; empty when none is.
    pub fn on_port(&self, port: u16) -> impl Iterator<Item = &str> {
        let start = self.0.partition_point(|(p, _)| *p < port);
        self.0[start..]
            .iter()
            .take_while(move |(p, _)| *p == port)
            .map(|(_, path)| path.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One declared container port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerPort {
    pub name: Option<String>,
    pub container_port: u16,
    pub host_port: Option<u16>,
    /// `protocol` is absent or TCP (only TCP ports can be named by a Server).
    pub tcp: bool,
}

/// Ports read from the proxy container's environment (spec §B.2); `None` when the variable is
/// absent or its value is not an `ip:port` literal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyPorts {
    /// `LINKERD2_PROXY_INBOUND_LISTEN_ADDR`: the opaque-transport port (4143).
    pub inbound: Option<u16>,
    /// `LINKERD2_PROXY_ADMIN_LISTEN_ADDR` (4191).
    pub admin: Option<u16>,
    /// `LINKERD2_PROXY_CONTROL_LISTEN_ADDR` (4190).
    pub control: Option<u16>,
}

impl Kind for k8s_openapi::api::core::v1::Pod {
    type Wire = wire::Pod;
    type Object = PodInfo;
    const LABEL: &'static str = "Pod";

    fn from_wire(pod: wire::Pod) -> Result<PodInfo, InvalidObject> {
        PodInfo::from_wire(pod)
    }
}

impl PodInfo {
    /// Builds the domain form of a Pod. Unparsable IPs and ports outside 1-65535 are logged
    /// and dropped; the rest of the Pod is kept.
    pub fn from_wire(pod: wire::Pod) -> Result<Self, InvalidObject> {
        let (namespace, name) = names("Pod", &pod.metadata)?;
        let wire::Pod {
            metadata,
            spec,
            status,
        } = pod;
        let containers: Vec<&wire::Container> = spec
            .init_containers
            .iter()
            .chain(spec.containers.iter())
            .collect();
        let object = ("Pod", namespace.as_str(), name.as_str());
        let container_ports: Vec<ContainerPort> = containers
            .iter()
            .flat_map(|c| c.ports.iter())
            .filter_map(|p| {
                let container_port =
                    super::port_in_range(object, "containerPort", p.container_port)?;
                Some(ContainerPort {
                    name: p.name.clone(),
                    container_port,
                    // 0: not exposed on the node.
                    host_port: p
                        .host_port
                        .filter(|h| *h != 0)
                        .and_then(|h| super::port_in_range(object, "hostPort", h)),
                    tcp: p
                        .protocol
                        .as_deref()
                        .is_none_or(|p| p.eq_ignore_ascii_case("TCP")),
                })
            })
            .collect();
        let proxy = containers
            .iter()
            .find(|c| c.name == PROXY_CONTAINER_NAME)
            .map(|c| {
                let env = |var: &str| {
                    c.env
                        .iter()
                        .find(|e| e.name == var)
                        .and_then(|e| e.value.as_deref())
                        .and_then(|v| v.parse::<std::net::SocketAddr>().ok())
                        .map(|a| a.port())
                };
                let [inbound, admin, control] = wire::PROXY_LISTEN_ENV;
                ProxyPorts {
                    inbound: env(inbound),
                    admin: env(admin),
                    control: env(control),
                }
            });
        let ips = (
            ("status.podIP", status.pod_ip),
            (
                "status.podIPs",
                status.pod_ips.into_iter().map(|i| i.ip).collect::<Vec<_>>(),
            ),
        );
        let host_ips = (
            ("status.hostIP", status.host_ip),
            (
                "status.hostIPs",
                status
                    .host_ips
                    .into_iter()
                    .map(|i| i.ip)
                    .collect::<Vec<_>>(),
            ),
        );
        let owner = single_owner(&metadata);
        let mut annotations = metadata.annotations.0;
        annotations.retain(|key, _| key.starts_with(CONFIG_ANNOTATION_PREFIX));
        let named_port = |name: &str| {
            container_ports
                .iter()
                .find(|p: &&ContainerPort| p.name.as_deref() == Some(name))
                .map(|p| p.container_port)
        };
        let opaque_ports = annotations.get(OPAQUE_PORTS_ANNOTATION).map(|list| {
            PortSet::parse_annotation(list, named_port).unwrap_or_else(|error| {
                tracing::warn!(pod = %format!("{namespace}/{name}"), %error, "invalid {OPAQUE_PORTS_ANNOTATION}: no port is opaque");
                PortSet::default()
            })
        });
        let skip_inbound_ports = annotations
            .get(SKIP_INBOUND_PORTS_ANNOTATION)
            .map(|list| PortSet::parse(list).0)
            .unwrap_or_default();
        let probe_paths = probe_paths(&containers);
        let object = ("Pod", namespace.as_str(), name.as_str());
        let mut ips: Vec<IpAddr> = super::parse_single_and_list(object, ips.0, ips.1);
        ips.shrink_to_fit();
        Ok(Self {
            probe_paths,
            labels: metadata.labels.into(),
            annotations,
            opaque_ports,
            skip_inbound_ports,
            service_account: spec
                .service_account_name
                .filter(|sa| !sa.is_empty())
                .unwrap_or_else(|| "default".to_string()),
            node_name: spec.node_name,
            host_network: spec.host_network.unwrap_or(false),
            phase: status.phase,
            terminating: metadata.deletion_timestamp.is_some(),
            ips,
            host_ips: super::parse_single_and_list(object, host_ips.0, host_ips.1),
            owner,
            container_ports,
            proxy,
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

    /// The control-plane namespace of a meshed pod (label `linkerd.io/control-plane-ns`, non-empty).
    pub fn control_plane_ns(&self) -> Option<&str> {
        self.labels
            .get(CONTROL_PLANE_NS_LABEL)
            .filter(|ns| !ns.is_empty())
    }

    /// The container port named `name` (init containers included), by its `containerPort`.
    pub fn named_port(&self, name: &str) -> Option<u16> {
        self.container_ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port)
    }

    /// Whether `port` is opaque for this pod: listed in its `config.linkerd.io/opaque-ports`
    /// annotation (ports, ranges, container-port names; an empty value means none), or in
    /// `defaults` when the pod has no such annotation (spec §B.2).
    pub fn is_opaque_port(&self, port: u16, defaults: &PortSet) -> bool {
        self.opaque_ports
            .as_ref()
            .unwrap_or(defaults)
            .contains(port)
    }

    /// Whether index lookups should still find this pod: not being deleted, not finished.
    pub fn is_live(&self) -> bool {
        !self.terminating && !matches!(self.phase.as_deref(), Some("Succeeded" | "Failed"))
    }
}

/// The `httpGet` probe paths of `containers` by port: a numeric port, or a name resolved
/// against the same container's TCP ports (case-insensitively); the path's query is dropped
/// and a path that is not absolute is skipped.
fn probe_paths(containers: &[&wire::Container]) -> ProbePaths {
    let mut paths = Vec::new();
    for c in containers {
        let probes = [&c.liveness_probe, &c.readiness_probe, &c.startup_probe];
        for get in probes
            .into_iter()
            .flatten()
            .filter_map(|p| p.http_get.as_ref())
        {
            let port = match &get.port {
                Some(wire::IntOrString::Int(n)) => u16::try_from(*n).ok().filter(|p| *p != 0),
                Some(wire::IntOrString::String(name)) => c.ports.iter().find_map(|p| {
                    let tcp = p
                        .protocol
                        .as_deref()
                        .is_none_or(|p| p.eq_ignore_ascii_case("TCP"));
                    (tcp && p
                        .name
                        .as_deref()
                        .is_some_and(|n| n.eq_ignore_ascii_case(name)))
                    .then(|| u16::try_from(p.container_port).ok())
                    .flatten()
                }),
                None => None,
            };
            let path = get.path.as_deref().filter(|p| !p.is_empty()).unwrap_or("/");
            let path = path.split(['?', '#']).next().unwrap_or_default();
            if let Some(port) = port
                && path.starts_with('/')
            {
                paths.push((port, path.to_string()));
            }
        }
    }
    ProbePaths::new(paths)
}
