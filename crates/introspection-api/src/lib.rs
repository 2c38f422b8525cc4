//! The gRPC types of the pod's introspection API, generated at build time from
//! `proto/introspection.proto`: the `Introspection` service's messages, its client
//! ([`introspection_client`]) and its server ([`introspection_server`]).
//!
//! Served by `destination` and `policy-controller` (`linkerd_runtime::introspect`), read by
//! `dst-diag streams`, `dst-diag stream ID` and `dst-diag proxy-status`.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]
#![allow(missing_docs, clippy::all)]

tonic::include_proto!("io.linkerd.destination.introspection.v1");
