//! The kinds discovery reads only the metadata of: Nodes (their zone) and the ReplicaSets and
//! Jobs that own pods (the workload named in metric labels, spec/destination.md §C.6.4). In kube
//! mode they are listed and watched as `PartialObjectMetadata`.

use k8s_openapi::api::{apps::v1::ReplicaSet, batch::v1::Job, core::v1::Node};

use super::{InvalidObject, Kind, OwnerRef, ZONE_LABEL, names, single_owner, wire};

/// A Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    /// Label `topology.kubernetes.io/zone`.
    pub zone: Option<String>,
}

/// A ReplicaSet or Job: the owner it passes on to its pods' metric labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerInfo {
    pub namespace: String,
    pub name: String,
    /// A ReplicaSet's single owner when that is a Deployment, StatefulSet, DaemonSet or Job; a
    /// Job's single owner (a CronJob, say); `None` otherwise (the object itself is named).
    pub owner: Option<OwnerRef>,
}

impl Kind for Node {
    type Wire = wire::MetadataOnly;
    type Object = NodeInfo;
    const LABEL: &'static str = "Node";
    const METADATA_ONLY: bool = true;
    const NAMESPACED: bool = false;

    fn from_wire(node: wire::MetadataOnly) -> Result<NodeInfo, InvalidObject> {
        let (_, name) = names("Node", &node.metadata)?;
        let mut labels = node.metadata.labels;
        Ok(NodeInfo {
            zone: labels.remove(ZONE_LABEL),
            name,
        })
    }
}

impl Kind for ReplicaSet {
    type Wire = wire::MetadataOnly;
    type Object = OwnerInfo;
    const LABEL: &'static str = "ReplicaSet";
    const METADATA_ONLY: bool = true;

    fn from_wire(rs: wire::MetadataOnly) -> Result<OwnerInfo, InvalidObject> {
        let (namespace, name) = names("ReplicaSet", &rs.metadata)?;
        let owner = single_owner(&rs.metadata).filter(|o| {
            matches!(
                o.kind.as_str(),
                "Deployment" | "StatefulSet" | "DaemonSet" | "Job"
            )
        });
        Ok(OwnerInfo {
            namespace,
            name,
            owner,
        })
    }
}

impl Kind for Job {
    type Wire = wire::MetadataOnly;
    type Object = OwnerInfo;
    const LABEL: &'static str = "Job";
    const METADATA_ONLY: bool = true;

    fn from_wire(job: wire::MetadataOnly) -> Result<OwnerInfo, InvalidObject> {
        let (namespace, name) = names("Job", &job.metadata)?;
        Ok(OwnerInfo {
            owner: single_owner(&job.metadata),
            namespace,
            name,
        })
    }
}
