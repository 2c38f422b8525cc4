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
        #[serde(default, skip_serializing_if = "Option::is_none")]
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
        #[serde(default, skip_serializing_if = "Option::is_none")]
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
