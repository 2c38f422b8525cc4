//! A CRD version's `openAPIV3Schema` as a JSON Schema (draft 4) that means what the API server
//! makes of it, for the tools that validate custom resources without a cluster: `cargo xtask
//! check-deploy` and the admission fuzz targets' model of the API server. Compiling and running
//! the schema is the caller's (the `jsonschema` crate), so the pod's binaries build no
//! validator.
//!
//! What the API server's validation (kube-openapi's `validate` package over the structural
//! schema) adds to plain JSON Schema, and [`to_json_schema`] writes out:
//! - `nullable: true` also admits `null`;
//! - `x-kubernetes-int-or-string: true` admits integers and strings only;
//! - at the root, `apiVersion` and `kind` are strings and `metadata` an object, declared or not;
//! - a number must fit its format: an integer fits `int32`, `uint32` or `uint64` as named, and
//!   any other integer fits `int64`; a `float` (or `float32`) fits an `f32`.

use serde_json::{Map, Value, json};

/// What a schema does with fields it does not declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownFields {
    /// They pass: the API server prunes them from an object before validating it.
    Pruned,
    /// They fail, as with `kubectl apply --validate=strict`, except under
    /// `x-kubernetes-preserve-unknown-fields` and where `additionalProperties` is given.
    Refused,
}

/// `schema` (a CRD version's `openAPIV3Schema`, as JSON) as a draft-4 JSON Schema with the API
/// server's meaning (see the module docs). A node that is not an object is copied as it is.
pub fn to_json_schema(schema: &Value, unknown: UnknownFields) -> Value {
    convert(schema, unknown, true)
}

fn convert(schema: &Value, unknown: UnknownFields, root: bool) -> Value {
    let Value::Object(map) = schema else {
        return schema.clone();
    };
    let sub = |value: &Value| convert(value, unknown, false);
    let mut out = Map::new();
    for (key, value) in map {
        let value = match (key.as_str(), value) {
            ("properties" | "patternProperties" | "definitions", Value::Object(props)) => {
                Value::Object(props.iter().map(|(k, v)| (k.clone(), sub(v))).collect())
            }
            ("items" | "additionalProperties" | "not", Value::Object(_)) => sub(value),
            ("items" | "allOf" | "anyOf" | "oneOf", Value::Array(list)) => {
                Value::Array(list.iter().map(sub).collect())
            }
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    if out.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        && !out.contains_key("type")
    {
        out.insert("type".into(), json!(["integer", "string"]));
    }
    if let Some(range) = format_range(&out) {
        add_range(&mut out, range);
    }
    if out.remove("nullable") == Some(Value::Bool(true)) {
        match out.get_mut("type") {
            Some(Value::String(ty)) => {
                let ty = ty.clone();
                out.insert("type".into(), json!([ty, "null"]));
            }
            Some(Value::Array(types)) => types.push("null".into()),
            _ => {}
        }
        if let Some(Value::Array(values)) = out.get_mut("enum")
            && !values.contains(&Value::Null)
        {
            values.push(Value::Null);
        }
    }
    if root && let Some(Value::Object(props)) = out.get_mut("properties") {
        for implicit in ["apiVersion", "kind"] {
            props
                .entry(implicit)
                .or_insert_with(|| json!({"type": "string"}));
        }
        props
            .entry("metadata")
            .or_insert_with(|| json!({"type": "object"}));
    }
    let preserve = out.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if unknown == UnknownFields::Refused
        && !preserve
        && out.contains_key("properties")
        && !out.contains_key("additionalProperties")
    {
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    Value::Object(out)
}

/// The range a number of this node's `type` and `format` must fall in, as kube-openapi checks
/// it before `minimum` and `maximum`: every integer fits an `int64` unless its format names
/// another width.
fn format_range(node: &Map<String, Value>) -> Option<(Value, Value)> {
    let format = node.get("format").and_then(Value::as_str).unwrap_or("");
    match node.get("type").and_then(Value::as_str)? {
        "integer" => Some(match format {
            "int32" => (json!(i32::MIN), json!(i32::MAX)),
            "uint32" => (json!(0), json!(u32::MAX)),
            "uint64" => (json!(0), json!(u64::MAX)),
            _ => (json!(i64::MIN), json!(i64::MAX)),
        }),
        "number" if matches!(format, "float" | "float32") => {
            Some((json!(-f32::MAX as f64), json!(f32::MAX as f64)))
        }
        _ => None,
    }
}

/// Adds `minimum`/`maximum` to a node, beside (not instead of) any bounds it has.
fn add_range(node: &mut Map<String, Value>, (min, max): (Value, Value)) {
    if node.contains_key("minimum") || node.contains_key("maximum") {
        let bounds = json!({"minimum": min, "maximum": max});
        match node.get_mut("allOf") {
            Some(Value::Array(all)) => all.push(bounds),
            _ => {
                node.insert("allOf".into(), json!([bounds]));
            }
        }
    } else {
        node.insert("minimum".into(), min);
        node.insert("maximum".into(), max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nullable_int_or_string_and_the_implicit_root_fields() {
        let schema = json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "nullable": true,
                    "properties": {
                        "mode": {"type": "string", "enum": ["a", "b"], "nullable": true},
                        "port": {"x-kubernetes-int-or-string": true},
                    },
                },
            },
        });
        let converted = to_json_schema(&schema, UnknownFields::Refused);
        let props = &converted["properties"];
        assert_eq!(props["spec"]["type"], json!(["object", "null"]));
        assert_eq!(props["spec"]["additionalProperties"], json!(false));
        let spec = &props["spec"]["properties"];
        assert_eq!(spec["mode"]["type"], json!(["string", "null"]));
        assert_eq!(spec["mode"]["enum"], json!(["a", "b", null]));
        assert_eq!(spec["port"]["type"], json!(["integer", "string"]));
        assert_eq!(props["apiVersion"], json!({"type": "string"}));
        assert_eq!(props["kind"], json!({"type": "string"}));
        assert_eq!(props["metadata"], json!({"type": "object"}));
        let lenient = to_json_schema(&schema, UnknownFields::Pruned);
        assert_eq!(
            lenient["properties"]["spec"].get("additionalProperties"),
            None
        );
        assert_eq!(lenient["additionalProperties"], Value::Null);
    }

    #[test]
    fn numbers_fit_their_format() {
        let node = |schema: Value| to_json_schema(&schema, UnknownFields::Pruned);
        assert_eq!(
            node(json!({"type": "integer", "format": "int32"})),
            json!({"type": "integer", "format": "int32", "minimum": -2147483648_i64, "maximum": 2147483647})
        );
        assert_eq!(
            node(json!({"type": "integer", "format": "uint32"})),
            json!({"type": "integer", "format": "uint32", "minimum": 0, "maximum": 4294967295_u64})
        );
        assert_eq!(
            node(json!({"type": "integer"})),
            json!({"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX})
        );
        assert_eq!(
            node(json!({"type": "integer", "format": "uint64", "minimum": 1})),
            json!({"type": "integer", "format": "uint64", "minimum": 1,
                   "allOf": [{"minimum": 0, "maximum": u64::MAX}]})
        );
        assert_eq!(
            node(json!({"type": "number", "format": "float"}))["maximum"],
            json!(3.4028234663852886e38)
        );
        assert_eq!(
            node(json!({"type": "number", "format": "double"})),
            json!({"type": "number", "format": "double"})
        );
    }
}
