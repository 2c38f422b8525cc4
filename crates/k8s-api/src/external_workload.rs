//! `workload.linkerd.io` ExternalWorkload: a meshed workload outside Kubernetes (a VM), with
//! its mTLS identity, ports and IPs (spec/policy.md §2.2, spec/destination.md §B.2).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The storage version, read by both controllers.
pub mod v1beta1 {
    use super::*;
    use kube::CustomResource;

    /// `spec` of an ExternalWorkload.
    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "workload.linkerd.io",
        version = "v1beta1",
        kind = "ExternalWorkload",
        namespaced,
        status = "ExternalWorkloadStatus"
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ExternalWorkloadSpec {
        #[serde(rename = "meshTLS")]
        pub mesh_tls: MeshTls,
        /// Declared ports; a port named `linkerd-proxy` is the proxy's inbound port.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub ports: Option<Vec<PortSpec>>,
        #[serde(
            rename = "workloadIPs",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        pub workload_ips: Option<Vec<WorkloadIp>>,
    }
}

/// The first served version, with the same schema.
pub mod v1alpha1 {
    use super::*;
    use kube::CustomResource;

    #[derive(
        Clone, Debug, Default, PartialEq, CustomResource, Deserialize, Serialize, JsonSchema,
    )]
    #[kube(
        group = "workload.linkerd.io",
        version = "v1alpha1",
        kind = "ExternalWorkload",
        namespaced,
        status = "ExternalWorkloadStatus"
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ExternalWorkloadSpec {
        #[serde(rename = "meshTLS")]
        pub mesh_tls: MeshTls,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub ports: Option<Vec<PortSpec>>,
        #[serde(
            rename = "workloadIPs",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        pub workload_ips: Option<Vec<WorkloadIp>>,
    }
}

/// The workload's mTLS identity: a URI (`spiffe://...`) and the TLS server name it presents.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MeshTls {
    pub identity: String,
    pub server_name: String,
}

/// One declared port.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub port: i32,
    /// `TCP` when absent (the CRD default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

/// One IP the workload is reachable on.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct WorkloadIp {
    pub ip: String,
}

/// `status`: conditions, of which `Ready` decides whether the workload gets traffic.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ExternalWorkloadStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<WorkloadCondition>>,
}

/// One status condition.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::v1beta1::ExternalWorkload;

    #[test]
    fn decodes_workload_ips_and_ports_as_kubectl_prints_them() {
        let ew: ExternalWorkload = crate::yaml::from_str(
            r#"
apiVersion: workload.linkerd.io/v1beta1
kind: ExternalWorkload
metadata: {name: payments-vm-01, namespace: edge}
spec:
  meshTLS: {identity: "spiffe://root.linkerd.cluster.local/payments-vm-01", serverName: payments-vm-01.cluster.local}
  ports: [{name: http, port: 8080, protocol: TCP}]
  workloadIPs: [{ip: 10.20.3.200}]
status:
  conditions: [{lastProbeTime: null, lastTransitionTime: "2026-05-11T13:45:35Z", status: "True", type: Ready}]
"#,
        )
        .unwrap();
        let ips: Vec<_> = ew
            .spec
            .workload_ips
            .unwrap()
            .into_iter()
            .map(|i| i.ip)
            .collect();
        assert_eq!(ips, ["10.20.3.200"]);
        assert_eq!(ew.spec.mesh_tls.server_name, "payments-vm-01.cluster.local");
        assert_eq!(ew.spec.ports.unwrap()[0].port, 8080);
        let conditions = ew.status.unwrap().conditions.unwrap();
        assert_eq!(
            (conditions[0].type_.as_str(), conditions[0].status.as_str()),
            ("Ready", "True")
        );
    }
}
