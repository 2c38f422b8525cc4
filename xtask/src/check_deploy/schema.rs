//! The CRD schemas as the API server applies them: structural-schema rules, and custom
//! resources validated against the openAPIV3Schema of their version.

use super::{Doc, Named, OUR_GROUPS, Report};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use linkerd_k8s_api::crd_schema::{UnknownFields, to_json_schema};
use serde_json::Value;
use std::collections::BTreeMap;

/// Validators of every served version of our CRDs, by (group, version, kind).
pub(super) struct CrdSchemas {
    validators: BTreeMap<(String, String, String), VersionValidators>,
}

struct VersionValidators {
    /// The schema as the API server applies it (unknown fields are pruned).
    lenient: jsonschema::Validator,
    /// The same, refusing fields the schema does not declare.
    strict: jsonschema::Validator,
}

impl CrdSchemas {
    pub(super) fn new(crds: &[Named<CustomResourceDefinition>], report: &mut Report) -> Self {
        let mut validators = BTreeMap::new();
        for crd in crds {
            let spec = &crd.obj.spec;
            let expected_name = format!("{}.{}", spec.names.plural, spec.group);
            if crd.obj.metadata.name.as_deref() != Some(expected_name.as_str()) {
                report.errors.push(format!(
                    "{}: a CRD must be named {expected_name}",
                    crd.source
                ));
            }
            let storage = spec.versions.iter().filter(|v| v.storage).count();
            if storage != 1 {
                report.errors.push(format!(
                    "{}: {storage} storage versions (exactly one is needed)",
                    crd.source
                ));
            }
            for version in &spec.versions {
                let key = (
                    spec.group.clone(),
                    version.name.clone(),
                    spec.names.kind.clone(),
                );
                let Some(schema) = version
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                else {
                    report.errors.push(format!(
                        "{}: version {} has no openAPIV3Schema",
                        crd.source, version.name
                    ));
                    continue;
                };
                let schema = match serde_json::to_value(schema) {
                    Ok(schema) => schema,
                    Err(e) => {
                        report.errors.push(format!("{}: {e}", crd.source));
                        continue;
                    }
                };
                let mut problems = Vec::new();
                structural_problems(&schema, "openAPIV3Schema", false, &mut problems);
                for problem in problems {
                    report.errors.push(format!(
                        "{}: version {}: not a structural schema, the API server would refuse it: {problem}",
                        crd.source, version.name
                    ));
                }
                let build = |unknown| jsonschema::draft4::new(&to_json_schema(&schema, unknown));
                match (build(UnknownFields::Pruned), build(UnknownFields::Refused)) {
                    (Ok(lenient), Ok(strict)) => {
                        validators.insert(key, VersionValidators { lenient, strict });
                    }
                    (Err(e), _) | (_, Err(e)) => report.errors.push(format!(
                        "{}: version {}: the schema does not compile: {e}",
                        crd.source, version.name
                    )),
                }
            }
        }
        Self { validators }
    }

    /// Validates `doc` when it is one of our custom resources; returns whether it was.
    pub(super) fn validate(&self, doc: &Doc, strict: bool, report: &mut Report) -> bool {
        let api_version = doc
            .value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = doc.value.get("kind").and_then(Value::as_str).unwrap_or("");
        let Some((group, version)) = api_version.split_once('/') else {
            return false;
        };
        if !OUR_GROUPS.contains(&group) {
            return false;
        }
        let name = doc
            .value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let at = format!("{}: {kind} {name}", doc.source);
        let key = (group.to_string(), version.to_string(), kind.to_string());
        let Some(validators) = self.validators.get(&key) else {
            report.errors.push(format!(
                "{at}: no CRD in deploy/crds serves {api_version} {kind}"
            ));
            return true;
        };
        let errors: Vec<String> = validators
            .lenient
            .iter_errors(&doc.value)
            .map(|e| format!("{}: {e}", json_path(&e.instance_path().to_string())))
            .collect();
        if !errors.is_empty() {
            report.errors.push(format!("{at}: {}", errors.join("; ")));
            return true;
        }
        let unknown: Vec<String> = validators
            .strict
            .iter_errors(&doc.value)
            .map(|e| format!("{}: {e}", json_path(&e.instance_path().to_string())))
            .collect();
        if !unknown.is_empty() {
            let message = format!(
                "{at}: fields the CRD does not declare (the API server prunes them, or refuses them with --validate=strict): {}",
                unknown.join("; ")
            );
            if strict {
                report.errors.push(message);
            } else {
                report.warnings.push(message);
            }
        }
        true
    }
}

/// What the API server refuses in a CRD's schema (the structural schema rules, as far as a
/// generated schema can break them): references and other unsupported keywords, nodes without
/// a type, `properties` beside `additionalProperties`, arrays without `items`, and types,
/// descriptions, defaults or nullability inside `allOf`/`anyOf`/`oneOf`/`not`.
pub(super) fn structural_problems(
    schema: &Value,
    at: &str,
    in_junctor: bool,
    problems: &mut Vec<String>,
) {
    let Value::Object(map) = schema else {
        problems.push(format!("{at}: not an object"));
        return;
    };
    for key in [
        "$ref",
        "$schema",
        "definitions",
        "dependencies",
        "id",
        "patternProperties",
        "additionalItems",
    ] {
        if map.contains_key(key) {
            problems.push(format!("{at}: {key} is not supported"));
        }
    }
    if map.get("uniqueItems") == Some(&Value::Bool(true)) {
        problems.push(format!("{at}: uniqueItems: true is not supported"));
    }
    let flag = |key: &str| map.get(key) == Some(&Value::Bool(true));
    if in_junctor {
        for key in [
            "type",
            "description",
            "default",
            "nullable",
            "additionalProperties",
        ] {
            if map.contains_key(key) {
                problems.push(format!("{at}: {key} inside allOf/anyOf/oneOf/not"));
            }
        }
    } else if !map.contains_key("type")
        && !flag("x-kubernetes-int-or-string")
        && !flag("x-kubernetes-preserve-unknown-fields")
    {
        problems.push(format!("{at}: no type"));
    }
    if map.contains_key("properties") && map.contains_key("additionalProperties") {
        problems.push(format!(
            "{at}: properties and additionalProperties together"
        ));
    }
    if map.get("type").and_then(Value::as_str) == Some("array") && !map.contains_key("items") {
        problems.push(format!("{at}: an array without items"));
    }
    if let Some(Value::Object(props)) = map.get("properties") {
        for (name, prop) in props {
            structural_problems(prop, &format!("{at}.{name}"), in_junctor, problems);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub @ Value::Object(_)) = map.get(key) {
            structural_problems(sub, &format!("{at}.{key}"), in_junctor, problems);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for (i, sub) in map
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            structural_problems(sub, &format!("{at}.{key}[{i}]"), true, problems);
        }
    }
    if let Some(sub) = map.get("not") {
        structural_problems(sub, &format!("{at}.not"), true, problems);
    }
}

/// `/spec/routes/0/name` as `spec.routes[0].name`.
pub(super) fn json_path(pointer: &str) -> String {
    let mut out = String::new();
    for segment in pointer.split('/').filter(|s| !s.is_empty()) {
        if segment.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&format!("[{segment}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(segment);
        }
    }
    if out.is_empty() {
        "(root)".to_string()
    } else {
        out
    }
}
