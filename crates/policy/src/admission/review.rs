//! The `AdmissionReview` envelope, shared with the sp-validator: see
//! [`linkerd_runtime::admission`].

pub use linkerd_runtime::admission::*;
