//! Server, as the index reads it: which workload ports it covers and with which protocol
//! (spec/policy.md §2.1; the destination uses it for opacity, spec/destination.md §C.3.1).

use k8s_openapi::{apimachinery::pkg::util::intstr::IntOrString, jiff::Timestamp};
use linkerd_k8s_api::{Server, server::ProxyProtocol};

use super::{
    ContainerPort, ExternalWorkloadInfo, InvalidObject, Kind, Labels, ObjectRef, PodInfo, invalid,
    names_of, selector::Selector,
};

/// A Server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    /// `metadata.creationTimestamp` (the oldest Server wins a port; ties by name). A time, not
    /// its text: `00.5Z` sorts after `00Z`.
    pub created: Option<Timestamp>,
    /// `spec.podSelector`; `None` selects no pod (exactly one of the two selectors is set).
    pub pod_selector: Option<Selector>,
    /// `spec.externalWorkloadSelector`; `None` selects no ExternalWorkload.
    pub external_workload_selector: Option<Selector>,
    pub port: ServerPort,
    pub proxy_protocol: ProxyProtocol,
    /// `spec.accessPolicy` (`deny` when absent, the CRD default).
    pub access_policy: String,
}

/// How two Servers of a namespace claim the same workload ports ([`ServerInfo::overlap_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerOverlap {
    /// The same port and equal selectors: the newer has no effect.
    Identical,
    /// The same port, and one of the two selects every pod (or every ExternalWorkload): the
    /// newer has no effect on the workloads both select.
    SelectsAll,
}

/// `spec.port`: a number, or a container (or ExternalWorkload) port name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ServerPort {
    Number(u16),
    Name(String),
}

impl Kind for Server {
    type Wire = Server;
    type Object = ServerInfo;
    const LABEL: &'static str = "Server";

    fn from_wire(srv: Server) -> Result<ServerInfo, InvalidObject> {
        ServerInfo::from_server(&srv)
    }
}

impl ServerInfo {
    /// How `other`, another Server (another name) of the namespace, claims the same workload
    /// ports as this one, if it does: on the same port, with an equal selector, or with a
    /// selector of the same kind where one of the two selects every workload. Only the older
    /// serves a port both claim (spec/policy.md §4.3). Upstream's webhook refuses the second
    /// for either ("identical server spec already exists"); selectors that differ and still
    /// overlap are not detected, there as here.
    pub fn overlap_with(&self, other: &ServerInfo) -> Option<ServerOverlap> {
        if other.name == self.name || other.port != self.port {
            return None;
        }
        if other.pod_selector == self.pod_selector
            && other.external_workload_selector == self.external_workload_selector
        {
            return Some(ServerOverlap::Identical);
        }
        let one_selects_all = |a: &Option<Selector>, b: &Option<Selector>| match (a, b) {
            (Some(a), Some(b)) => a.selects_all() || b.selects_all(),
            _ => false,
        };
        (one_selects_all(&self.pod_selector, &other.pod_selector)
            || one_selects_all(
                &self.external_workload_selector,
                &other.external_workload_selector,
            ))
        .then_some(ServerOverlap::SelectsAll)
    }

    /// Builds the domain form of a Server. Errors when it has no name, a numeric port outside
    /// 1..=65535, or a string port that is not a port name.
    pub fn from_server(srv: &Server) -> Result<Self, InvalidObject> {
        let (namespace, name) = names_of("Server", &srv.metadata)?;
        let port = match &srv.spec.port {
            IntOrString::Int(n) => match u16::try_from(*n) {
                Ok(p) if p != 0 => ServerPort::Number(p),
                _ => {
                    return Err(invalid(
                        "Server",
                        &namespace,
                        &name,
                        format!("spec.port {n} out of range"),
                    ));
                }
            },
            // A name, even of digits, as Kubernetes reads an IntOrString; one that is no port
            // name could never match, and the admission webhook refuses it.
            IntOrString::String(s) if linkerd_k8s_api::names::is_port_name(s) => {
                ServerPort::Name(s.clone())
            }
            IntOrString::String(s) => {
                return Err(invalid(
                    "Server",
                    &namespace,
                    &name,
                    format!(
                        "spec.port {s:?} is not a port name (1-15 lowercase letters, digits and '-', with at least one letter)"
                    ),
                ));
            }
        };
        // What the policy webhook refuses (spec §2.1): with both selectors the Server would
        // apply to pods and ExternalWorkloads alike; with neither it selects nothing. Upstream's
        // index fails to decode either.
        if srv.spec.pod_selector.is_some() == srv.spec.external_workload_selector.is_some() {
            return Err(invalid(
                "Server",
                &namespace,
                &name,
                "a Server must have exactly one of spec.podSelector and spec.externalWorkloadSelector".into(),
            ));
        }
        let pod_selector = srv
            .spec
            .pod_selector
            .as_ref()
            .map(Selector::from_label_selector);
        let external_workload_selector = srv
            .spec
            .external_workload_selector
            .as_ref()
            .map(Selector::from_label_selector);
        if [&pod_selector, &external_workload_selector]
            .into_iter()
            .flatten()
            .any(Selector::has_unusable_expression)
        {
            tracing::warn!(server = %format!("{namespace}/{name}"), "selector has an expression with an unknown operator or unfitting values; it selects nothing");
        }
        Ok(Self {
            labels: srv.metadata.labels.clone().unwrap_or_default().into(),
            created: srv.metadata.creation_timestamp.as_ref().map(|t| t.0),
            pod_selector,
            external_workload_selector,
            port,
            proxy_protocol: srv.spec.proxy_protocol,
            access_policy: srv
                .spec
                .access_policy
                .clone()
                .unwrap_or_else(|| "deny".to_string()),
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

    /// Whether this Server covers `port` of `pod`: same namespace (a Server never reaches
    /// another namespace, §H.5), selector match, and the port by number or by the name of a
    /// container port whose `containerPort` or `hostPort` is `port` (init containers included,
    /// §H.4).
    pub fn selects_pod_port(&self, pod: &PodInfo, port: u16) -> bool {
        self.namespace == pod.namespace
            && self
                .pod_selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
            && match &self.port {
                ServerPort::Number(n) => *n == port,
                ServerPort::Name(name) => pod.container_ports.iter().any(|p: &ContainerPort| {
                    p.name.as_deref() == Some(name.as_str())
                        && (p.container_port == port || p.host_port == Some(port))
                }),
            }
    }

    /// Whether this Server covers `port` of the ExternalWorkload `ew` (by number, or by the name
    /// of one of its declared ports).
    pub fn selects_external_workload_port(&self, ew: &ExternalWorkloadInfo, port: u16) -> bool {
        self.namespace == ew.namespace
            && self
                .external_workload_selector
                .as_ref()
                .is_some_and(|s| s.matches(&ew.labels))
            && match &self.port {
                ServerPort::Number(n) => *n == port,
                ServerPort::Name(name) => ew
                    .ports
                    .iter()
                    .any(|p| p.port == port && p.name.as_deref() == Some(name.as_str())),
            }
    }

    /// `proxyProtocol: opaque`.
    pub fn is_opaque(&self) -> bool {
        self.proxy_protocol == ProxyProtocol::Opaque
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(port: serde_json::Value) -> Result<ServerInfo, InvalidObject> {
        let srv: Server = serde_json::from_value(serde_json::json!({
            "apiVersion": "policy.linkerd.io/v1beta3", "kind": "Server",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"podSelector": {}, "port": port},
        }))
        .unwrap();
        ServerInfo::from_server(&srv)
    }

    /// A string port is a name, as Kubernetes reads an IntOrString and as upstream's
    /// controllers match it, and must be a port name, as the admission webhook requires: the
    /// index served `"9999"` as port 9999, which the webhook refuses (newcomer finding).
    #[test]
    fn a_string_port_is_a_port_name() {
        assert_eq!(server(8080.into()).unwrap().port, ServerPort::Number(8080));
        assert_eq!(
            server("http-2".into()).unwrap().port,
            ServerPort::Name("http-2".into())
        );
        for (port, reason) in [
            (
                serde_json::json!("9999"),
                "spec.port \"9999\" is not a port name (1-15 lowercase letters, digits and '-', with at least one letter)",
            ),
            (
                serde_json::json!("HTTP"),
                "spec.port \"HTTP\" is not a port name (1-15 lowercase letters, digits and '-', with at least one letter)",
            ),
            (serde_json::json!(0), "spec.port 0 out of range"),
            (serde_json::json!(70000), "spec.port 70000 out of range"),
        ] {
            let error = server(port.clone()).unwrap_err();
            assert_eq!(error.reason, reason, "{port}");
        }
    }
}
