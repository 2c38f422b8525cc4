//! `mtls-shim`: the linkerd-destination pod's sidecar (spec/sp-validator-and-pod.md §d.6). It
//! terminates mesh TLS on the pod's gRPC ports, requires client certificates that chain to the
//! mesh's trust anchors, and relays the bytes to the controllers on loopback; its admin server
//! answers `/live`, `/ready` and `/metrics` as the proxy's does (§d.3).
//!
//! The certificate it presents must be valid for
//! `linkerd-destination.<ns>.serviceaccount.identity.<ns>.<trust-domain>`, the name proxies
//! expect. It comes either from files (reloaded when they change) or, in Certify mode, from
//! linkerd-identity (`Certify`, §d.4): a key made in memory, renewed before it expires.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod admin;
pub mod args;
pub mod certify;
pub mod metrics;
pub mod shim;

pub use self::{
    admin::AdminState,
    args::{Args, Forward, IdentityAddr, identity_service_identity, local_identity},
    certify::{CertStore, CertifyConfig, CertifyFailure, CertifyStartError, refresh_in},
    metrics::{HandshakeFailure, ShimMetrics},
    shim::{Config, Identity, Shim, StartError},
};
