//! Decoding of `object.spec` into a kind's spec type (spec/policy.md §6): strict for the
//! `policy.linkerd.io` kinds (a field the type does not know is an error, as is any type
//! mismatch), plain for the Gateway API kinds (unknown fields ignored; a failure is the caller's
//! to admit with a warning).
//!
//! Errors name the field from `spec`: `spec.targetRef: missing field \`kind\``,
//! `spec.proxyProtocol: unknown variant \`HTTP/3\`, expected one of ...`,
//! `spec.foo: unknown field`.

use serde::de::DeserializeOwned;
use std::fmt::Write;

/// Decodes `spec`, refusing fields the type does not know.
///
/// Fields inside internally tagged enums (the policy HTTPRoute's filters) are buffered by serde
/// before decoding and are not seen by the unknown-field check.
pub fn strict<T: DeserializeOwned>(spec: serde_json::Value) -> Result<T, String> {
    let mut unknown = None;
    let mut record = |path: serde_ignored::Path<'_>| {
        if unknown.is_none() {
            unknown = Some(ignored_path(&path));
        }
    };
    let de = serde_ignored::Deserializer::new(spec, &mut record);
    let decoded = serde_path_to_error::deserialize(de).map_err(path_error)?;
    match unknown {
        None => Ok(decoded),
        Some(path) => Err(format!("{path}: unknown field")),
    }
}

/// Decodes `spec`, ignoring fields the type does not know.
pub fn lenient<T: DeserializeOwned>(spec: serde_json::Value) -> Result<T, String> {
    serde_path_to_error::deserialize(spec).map_err(path_error)
}

fn path_error(error: serde_path_to_error::Error<serde_json::Error>) -> String {
    use serde_path_to_error::Segment;
    let mut path = String::from("spec");
    for segment in error.path().iter() {
        let _ = match segment {
            Segment::Seq { index } => write!(path, "[{index}]"),
            Segment::Map { key } => write!(path, ".{key}"),
            Segment::Enum { variant } => write!(path, ".{variant}"),
            Segment::Unknown => write!(path, ".?"),
        };
    }
    format!("{path}: {}", error.inner())
}

fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => "spec".to_string(),
        Path::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        Path::Map { parent, key } => format!("{}.{key}", ignored_path(parent)),
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => ignored_path(parent),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linkerd_k8s_api::{
        authorization_policy::v1alpha1::AuthorizationPolicySpec, server::v1beta3::ServerSpec,
    };
    use serde_json::json;

    #[test]
    fn strict_decoding_names_the_field() {
        let spec: ServerSpec =
            strict(json!({"podSelector": {"matchLabels": {"app": "web"}}, "port": 8080})).unwrap();
        assert_eq!(spec.access_policy, None);

        let err = strict::<ServerSpec>(json!({"port": 80, "proxyProtocol": "HTTP/3"})).unwrap_err();
        assert!(
            err.starts_with("spec.proxyProtocol: unknown variant `HTTP/3`, expected one of"),
            "{err}"
        );
        assert_eq!(
            strict::<ServerSpec>(json!({"port": 80, "podSelecter": {}})).unwrap_err(),
            "spec.podSelecter: unknown field"
        );
        assert_eq!(
            strict::<ServerSpec>(json!({"port": 80, "podSelector": {"matchLabel": {}}}))
                .unwrap_err(),
            "spec.podSelector.matchLabel: unknown field"
        );
        assert_eq!(
            strict::<AuthorizationPolicySpec>(
                json!({"targetRef": {"kind": "Server", "name": "s"}})
            )
            .unwrap_err(),
            "spec: missing field `requiredAuthenticationRefs`"
        );
        assert_eq!(
            strict::<AuthorizationPolicySpec>(json!({
                "targetRef": {"kind": "Server", "name": "s"},
                "requiredAuthenticationRefs": [{"kind": "ServiceAccount", "name": "a", "nmespace": "b"}],
            }))
            .unwrap_err(),
            "spec.requiredAuthenticationRefs[0].nmespace: unknown field"
        );
        assert_eq!(
            strict::<AuthorizationPolicySpec>(json!({
                "targetRef": {"kind": "Server", "name": 5},
                "requiredAuthenticationRefs": [],
            }))
            .unwrap_err(),
            "spec.targetRef.name: invalid type: integer `5`, expected a string"
        );
    }

    #[test]
    fn lenient_decoding_ignores_unknown_fields() {
        let spec: ServerSpec = lenient(json!({"port": 80, "podSelecter": {}})).unwrap();
        assert_eq!(serde_json::to_value(&spec.port).unwrap(), json!(80));
        assert_eq!(
            lenient::<ServerSpec>(json!({"port": [80]})).unwrap_err(),
            "spec.port: invalid type: sequence, expected IntOrString"
        );
    }
}
