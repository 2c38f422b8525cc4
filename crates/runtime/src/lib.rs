//! Process plumbing shared by every binary of the pod: the flags they all take, upstream's
//! Go-style command lines ([`go_flags`]), logging, the admin HTTP server (`/live`, `/ready`,
//! `/metrics`), graceful shutdown, the HTTP/1.1 server of the admin ports and webhooks ([`http`]), the gRPC server and its watch streams' shared messages, sent
//! without per-stream copies ([`grpc`]), the record of every open watch stream and the
//! introspection API that shows it ([`introspect`]), process metrics from `/proc`
//! ([`process`]), and the HTTPS server of the admission webhooks ([`tls`]).
//!
//! It depends on neither the index nor kube, so the `mtls-shim` sidecar, which needs only this
//! plumbing, builds no Kubernetes client: the choice between a cluster and offline mode
//! (`--cluster-state` / `--kubeconfig`) is `linkerd_index::source::ClusterArgs`, and the
//! webhooks' `AdmissionReview` envelope, on kube-core's types, is the `linkerd-admission` crate.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod admin;
pub mod args;
pub mod go_flags;
pub mod grpc;
pub mod http;
pub mod introspect;
pub mod log;
pub mod process;
pub mod shutdown;
pub mod tls;

pub use self::{
    admin::Admin,
    args::{parse_bool, parse_domain, parse_listen_addr, parse_namespace},
    log::{LogArgs, LogFormat, exit_code},
};
