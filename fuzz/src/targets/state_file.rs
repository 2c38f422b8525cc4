//! An offline-mode state file (spec/destination.md §A, DESIGN.md "Sources"): bytes → the
//! file's objects → each decoded as its kind and applied to every index of the pod.
//!
//! Input: one byte choosing the file name (even: `state.yaml`, odd: `state.json`), then the
//! file. Properties:
//! - a refused file says why;
//! - each object's JSON text is a JSON object whose `kind` and `metadata.name` are its keys;
//! - that text, read as a JSON state file of its own, is the same object with the same
//!   digest (one digest for YAML and JSON: a definition moved between formats is not a change);
//! - an object that does not decode says why, and decoded objects apply to the indexes.

use linkerd_index::source::offline::parse_manifests;
use std::path::Path;

use crate::cluster::Indexes;

/// See the module docs.
pub fn state_file(data: &[u8]) {
    let Some((&format, file)) = data.split_first() else {
        return;
    };
    let name = if format % 2 == 0 {
        "state.yaml"
    } else {
        "state.json"
    };
    let manifests = match parse_manifests(Path::new(name), file) {
        Ok(manifests) => manifests,
        Err(error) => {
            assert!(!error.to_string().is_empty(), "{name}: an empty error");
            return;
        }
    };
    if manifests.is_empty() {
        return;
    }
    let indexes = Indexes::new();
    for manifest in &manifests {
        let object: serde_json::Value = match serde_json::from_str(&manifest.json) {
            Ok(object) => object,
            Err(error) => panic!("{name}: an object's text is not JSON ({error}): {manifest:?}"),
        };
        assert_eq!(
            object.pointer("/metadata/name").and_then(|n| n.as_str()),
            Some(manifest.obj_key.1.as_str()),
            "{name}: {manifest:?}"
        );
        assert_eq!(
            object.get("kind").and_then(|n| n.as_str()),
            Some(manifest.type_key.1.as_str()),
            "{name}: {manifest:?}"
        );
        let again = parse_manifests(Path::new("again.json"), manifest.json.as_bytes());
        match again.as_deref() {
            Ok([again]) => assert_eq!(
                (&again.type_key, &again.obj_key, again.digest),
                (&manifest.type_key, &manifest.obj_key, manifest.digest),
                "{name}: the object read again from its JSON text: {manifest:?}"
            ),
            other => panic!("{name}: {manifest:?} read again from its JSON text: {other:?}"),
        }
        if let Some(Err(error)) = indexes.apply_json(&manifest.type_key, &manifest.json) {
            assert!(
                !error.to_string().is_empty(),
                "{name}: an empty decode error"
            );
        }
    }
}
