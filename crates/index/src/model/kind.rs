//! [`Kind`]: what the index watches of each Kubernetes kind, and how one document of it is
//! decoded, once, into the object every index that reads the kind shares.

use serde::{Deserialize, de::DeserializeOwned};

use super::InvalidObject;

/// A Kubernetes kind the index watches. The implementing type names the kind (a k8s-openapi,
/// Gateway API or Linkerd CRD type, which carry its group, version and plural); its objects
/// are decoded from [`Kind::Wire`] into [`Kind::Object`] as they arrive, once, and every index
/// that reads the kind gets the same `Arc` of it.
///
/// The numerous kinds (Pods, Services, EndpointSlices, Nodes, ReplicaSets, Jobs, Servers,
/// ExternalWorkloads, ServiceProfiles) decode into compact domain objects holding only what a
/// view reads. The policy kinds that one concern owns (authorizations, authentications,
/// routes, EgressNetworks) are handed over in their typed form, from which each index that
/// reads them keeps its own compact form; no index keeps the typed object.
pub trait Kind: kube::Resource<DynamicType = ()> + Send + Sync + 'static {
    /// What a document is decoded from: only the fields [`Kind::from_wire`] reads.
    type Wire: DeserializeOwned;
    /// What the indexes receive.
    type Object: Send + Sync + 'static;

    /// The name of the kind in logs and in `index_invalid_objects_total{cluster,kind}`; it tells apart
    /// kinds of the same name in two groups (`HTTPRoute.policy.linkerd.io`).
    const LABEL: &'static str;
    /// Kube mode lists and watches the kind as `PartialObjectMetadata` ([`Kind::Wire`] then
    /// reads `metadata` only): the kinds that only feed owner and zone lookups.
    const METADATA_ONLY: bool = false;
    /// Whether the kind's objects live in a namespace (every kind here but Nodes). Offline mode
    /// skips a document of a namespaced kind without `metadata.namespace`: no API server serves
    /// one, and indexed under namespace `""` it would be announced by names that do not resolve
    /// (`web..svc.cluster.local`).
    const NAMESPACED: bool = true;
    /// An update from an API server that does not convert ([`DecodeError::Invalid`]) removes
    /// the version indexed before (`true`, ServiceProfiles: a stale profile must not outlive an
    /// invalid edit), or leaves it (`false`). The offline source always removes it: its indexes
    /// hold what a fresh read of the directory would give them.
    const INVALID_REMOVES: bool = false;

    /// The object of a decoded document; an object that cannot be used is an
    /// [`InvalidObject`] naming the problem.
    fn from_wire(wire: Self::Wire) -> Result<Self::Object, InvalidObject>;

    /// Fills in, on a document about to be decoded, fields older served versions leave out but
    /// [`Kind::Wire`] requires. Called only when [`Kind::HAS_DEFAULTS`].
    fn fill_defaults(_document: &mut serde_json::Value) {}

    /// Whether [`Kind::fill_defaults`] may change a document.
    const HAS_DEFAULTS: bool = false;
}

/// Why a document of a kind was not indexed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// It does not have the shape of its kind; the message names the field
    /// (`spec.ports[0].port: invalid type: string "eighty", expected i64`).
    #[error("does not decode: {0}")]
    Malformed(String),
    /// It decodes but cannot be used (a bad regex, an out-of-range port).
    #[error("{0}")]
    Invalid(InvalidObject),
}

/// Decodes one document, as a JSON value, into `K`'s object.
///
/// A `null` label or annotation value reads as `""`, as the API server stores it (Go's JSON
/// decoding leaves the zero value) and kubectl sends it (kubernetes#129257): a manifest's
/// `tier:` with no value must not cost the whole object.
pub fn decode_value<K: Kind>(document: &serde_json::Value) -> Result<K::Object, DecodeError> {
    let coerced = null_metadata_values_as_empty(document);
    let document = coerced.as_ref().unwrap_or(document);
    let wire = if K::HAS_DEFAULTS {
        let mut document = document.clone();
        K::fill_defaults(&mut document);
        K::Wire::deserialize(&document)
            .or_else(|_| serde_path_to_error::deserialize::<_, K::Wire>(&document))
    } else {
        K::Wire::deserialize(document)
            .or_else(|_| serde_path_to_error::deserialize::<_, K::Wire>(document))
    };
    let wire = wire.map_err(malformed)?;
    K::from_wire(wire).map_err(DecodeError::Invalid)
}

/// Decodes one document, as JSON text, into `K`'s object.
pub fn decode_json<K: Kind>(document: &str) -> Result<K::Object, DecodeError> {
    if K::HAS_DEFAULTS {
        let value: serde_json::Value =
            serde_json::from_str(document).map_err(|e| DecodeError::Malformed(e.to_string()))?;
        return decode_value::<K>(&value);
    }
    // Tracking the path costs an allocation per key (a third of a pod's decode): only a
    // document that fails is decoded again with it, for the message.
    let wire = match K::Wire::deserialize(&mut serde_json::Deserializer::from_str(document)) {
        Ok(wire) => wire,
        // A key given twice in an object (a hand-written JSON manifest): its last value
        // counts, as Go's JSON decoder (kubectl's, the API server's) reads it; a `Value` keeps
        // the last one.
        Err(error) if error.to_string().starts_with("duplicate field") => {
            let value: serde_json::Value = serde_json::from_str(document)
                .map_err(|e| DecodeError::Malformed(e.to_string()))?;
            return decode_value::<K>(&value);
        }
        Err(_) => {
            // Rare: a `null` label or annotation value, which the fast path refuses.
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(document)
                && null_metadata_values_as_empty(&value).is_some()
            {
                return decode_value::<K>(&value);
            }
            serde_path_to_error::deserialize::<_, K::Wire>(&mut serde_json::Deserializer::from_str(
                document,
            ))
            .map_err(malformed)?
        }
    };
    K::from_wire(wire).map_err(DecodeError::Invalid)
}

/// `document` with its `null` values of `metadata.labels` and `metadata.annotations` made
/// `""`; `None` when it has none (the usual case: nothing is copied).
fn null_metadata_values_as_empty(document: &serde_json::Value) -> Option<serde_json::Value> {
    let has_null = |field: &str| {
        document
            .get("metadata")
            .and_then(|metadata| metadata.get(field))
            .and_then(serde_json::Value::as_object)
            .is_some_and(|map| map.values().any(serde_json::Value::is_null))
    };
    if !has_null("labels") && !has_null("annotations") {
        return None;
    }
    let mut document = document.clone();
    for field in ["labels", "annotations"] {
        if let Some(map) = document
            .get_mut("metadata")
            .and_then(|metadata| metadata.get_mut(field))
            .and_then(serde_json::Value::as_object_mut)
        {
            for value in map.values_mut().filter(|v| v.is_null()) {
                *value = serde_json::Value::String(String::new());
            }
        }
    }
    Some(document)
}

/// The field's path and what is wrong with it, without serde_json's `at line L column C`: the
/// text decoded is a re-encoding (of a YAML document, of one item of a file, of a watch event),
/// so its positions point nowhere the user can look.
fn malformed(error: serde_path_to_error::Error<serde_json::Error>) -> DecodeError {
    let inner = error.inner();
    let mut message = inner.to_string();
    if inner.line() != 0 {
        let position = format!(" at line {} column {}", inner.line(), inner.column());
        if let Some(stripped) = message.strip_suffix(&position) {
            message.truncate(stripped.len());
        }
    }
    let path = error.path().to_string();
    DecodeError::Malformed(if path == "." {
        message
    } else {
        format!("{path}: {message}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;

    /// README: in a JSON object the last value of a key given twice counts (newcomer finding:
    /// the object was skipped, `duplicate field clusterIP`).
    #[test]
    fn a_key_given_twice_takes_its_last_value() {
        let document = r#"{"apiVersion":"v1","kind":"Service",
            "metadata":{"name":"web","namespace":"shop","name":"web2"},
            "spec":{"clusterIP":"10.96.4.6","clusterIP":"10.96.4.7","ports":[{"port":80}]}}"#;
        let service = decode_json::<Service>(document).unwrap();
        assert_eq!(service.name, "web2");
        assert_eq!(
            service.cluster_ips,
            ["10.96.4.7".parse::<std::net::IpAddr>().unwrap()]
        );
        let twice = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"shop"},
            "spec":{"ports":[{"port":80}]},"spec":{"ports":[{"port":81}]}}"#;
        assert_eq!(decode_json::<Service>(twice).unwrap().ports[0].port, 81);
        // Still an error that names the field when the last value is malformed.
        let bad = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"shop"},
            "spec":{"ports":[{"port":80}],"ports":[{"port":"x"}]}}"#;
        let error = decode_json::<Service>(bad).unwrap_err().to_string();
        assert!(error.contains("spec.ports[0].port"), "{error}");
    }

    /// A label or annotation with no value (`tier:` in YAML, `null`) is `""`, as the API
    /// server stores it, for the numerous kinds' compact decoding and the typed kinds alike
    /// (offline mode skipped the whole object, which `kubectl apply` takes).
    #[test]
    fn a_null_label_or_annotation_value_is_empty() {
        use k8s_openapi::api::core::v1::Pod;
        use linkerd_k8s_api::Server;
        let pod = r#"{"apiVersion":"v1","kind":"Pod",
            "metadata":{"name":"web-0","namespace":"shop","labels":{"app":"web","tier":null},
                "annotations":{"config.linkerd.io/default-inbound-policy":null,"note":null}},
            "spec":{"containers":[{"name":"web"}]}}"#;
        let pod = decode_json::<Pod>(pod).unwrap();
        assert_eq!(pod.labels.get("tier"), Some(""));
        assert_eq!(pod.labels.get("app"), Some("web"));
        assert_eq!(
            pod.annotations
                .get("config.linkerd.io/default-inbound-policy"),
            Some(&String::new())
        );
        let value: serde_json::Value = serde_json::from_str(
            r#"{"apiVersion":"policy.linkerd.io/v1beta3","kind":"Server",
            "metadata":{"name":"web-http","namespace":"shop","labels":{"tier":null}},
            "spec":{"podSelector":{"matchLabels":{"app":"web"}},"port":8080}}"#,
        )
        .unwrap();
        let server = decode_json::<Server>(&value.to_string()).unwrap();
        assert_eq!(server.labels.get("tier"), Some(""));
        assert_eq!(
            decode_value::<Server>(&value).unwrap().labels.get("tier"),
            Some("")
        );
        // Elsewhere `null` is what it was: a label selector's value must be a string.
        let bad = r#"{"apiVersion":"policy.linkerd.io/v1beta3","kind":"Server",
            "metadata":{"name":"web-http","namespace":"shop"},
            "spec":{"podSelector":{"matchLabels":{"app":null}},"port":8080}}"#;
        let error = decode_json::<Server>(bad).unwrap_err().to_string();
        assert!(
            error.contains("spec.podSelector.matchLabels.app"),
            "{error}"
        );
    }

    #[test]
    fn a_malformed_document_names_the_field_and_no_position_in_the_reencoded_text() {
        let document = r#"{"apiVersion":"v1","kind":"Service",
            "metadata":{"name":"web","namespace":"shop"},
            "spec":{"ports":[{"port":"eighty"}]}}"#;
        let expected = DecodeError::Malformed(
            "spec.ports[0].port: invalid type: string \"eighty\", expected i64".into(),
        );
        assert_eq!(decode_json::<Service>(document).unwrap_err(), expected);
        let value: serde_json::Value = serde_json::from_str(document).unwrap();
        assert_eq!(decode_value::<Service>(&value).unwrap_err(), expected);
    }

    /// A Service's `targetPort` as the API server defaults and validates it: absent, `0` and
    /// `""` are the port; a number out of range or a name that is no port name makes the
    /// Service invalid (newcomer finding: `70000` and `Bad_Name` were served silently).
    #[test]
    fn a_target_port_is_defaulted_and_validated_as_the_api_server_does() {
        use crate::model::TargetPort;
        let service = |target_port: &str| {
            decode_json::<Service>(&format!(
                r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"web","namespace":"shop"}},
                "spec":{{"ports":[{{"port":80{target_port}}}]}}}}"#
            ))
        };
        for (given, expected) in [
            ("", TargetPort::Number(80)),
            (r#","targetPort":0"#, TargetPort::Number(80)),
            (r#","targetPort":"""#, TargetPort::Number(80)),
            (r#","targetPort":8080"#, TargetPort::Number(8080)),
            (r#","targetPort":"http""#, TargetPort::Name("http".into())),
        ] {
            let port = &service(given).expect(given).ports[0];
            assert_eq!(port.target_port, expected, "{given}");
        }
        for (given, reason) in [
            (r#","targetPort":-1"#, "targetPort -1 out of range"),
            (r#","targetPort":70000"#, "targetPort 70000 out of range"),
            (
                r#","targetPort":"Bad_Name""#,
                r#"targetPort "Bad_Name" is not a port name"#,
            ),
        ] {
            let error = service(given).unwrap_err().to_string();
            assert!(error.contains(reason), "{given}: {error}");
        }
    }

    /// Two ports of one number and protocol, or of one name, make a Service invalid, as the
    /// API server refuses it (newcomer finding: an offline Service of two ports 80 was served
    /// silently, the first one only); one number over two protocols is a valid Service (DNS).
    #[test]
    fn repeated_service_ports_make_the_service_invalid() {
        let service = |ports: &str| {
            decode_json::<Service>(&format!(
                r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"web","namespace":"shop"}},
                "spec":{{"ports":{ports}}}}}"#
            ))
        };
        let dns =
            service(r#"[{"name":"dns","port":53,"protocol":"UDP"},{"name":"dns-tcp","port":53}]"#)
                .expect("one number over two protocols");
        assert_eq!(dns.ports.len(), 2);
        for (ports, reason) in [
            (
                r#"[{"name":"a","port":80},{"name":"b","port":8080},{"name":"c","port":80,"protocol":"TCP"}]"#,
                "spec.ports[2] repeats port 80/TCP of spec.ports[0]",
            ),
            (
                r#"[{"name":"http","port":80},{"name":"http","port":8080}]"#,
                r#"spec.ports[1] repeats the name "http" of spec.ports[0]"#,
            ),
        ] {
            let error = service(ports).unwrap_err().to_string();
            assert!(error.ends_with(reason), "{ports}: {error}");
        }
        // Unnamed ports repeat no name.
        assert!(service(r#"[{"port":80},{"port":81}]"#).is_ok());
    }
}
