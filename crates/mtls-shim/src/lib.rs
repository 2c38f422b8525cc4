//! `mtls-shim`: the linkerd-destination pod's sidecar (spec/sp-validator-and-pod.md §d.6). It
//! terminates mesh TLS on the pod's gRPC ports, requires client certificates that chain to the
//! mesh's trust anchors, and relays the bytes to the controllers on loopback; its admin server
//! answers `/live`, `/ready` and `/metrics` as the proxy's does (§d.3).
//!
//! The certificate it presents comes from files (reloaded when they change) and must be valid
//! for `linkerd-destination.<ns>.serviceaccount.identity.<ns>.<trust-domain>`, the name proxies
//! expect. Obtaining it from linkerd-identity (`Certify`, §d.4) is not done here.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod admin;
pub mod args;
pub mod metrics;
pub mod shim;

pub use self::{
    admin::AdminState,
    args::{Args, Forward, local_identity},
    metrics::{HandshakeFailure, ShimMetrics},
    shim::{Config, Shim, StartError},
};
