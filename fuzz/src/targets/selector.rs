//! Kubernetes label selectors, as Servers select pods and ExternalWorkloads (spec/policy.md
//! §2.1, spec/destination.md §C.3.1).
//!
//! Input: JSON `{"selector": <LabelSelector>, "labels": {<key>: <value>}}`. Properties, against
//! Kubernetes' rules read directly from the `LabelSelector`: every `matchLabels` pair is
//! present, and every expression holds (`In`/`NotIn` need values, `Exists`/`DoesNotExist`
//! none, any other operator or combination never matches and is reported unusable); and the
//! compact [`Labels`] answer lookups as the map they were built from.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use linkerd_index::model::{Labels, Selector};
use std::collections::BTreeMap;

#[derive(serde::Deserialize)]
struct Input {
    #[serde(default)]
    selector: LabelSelector,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// Whether an expression is well formed, and if so whether `labels` satisfy it.
fn reference_expression(
    e: &LabelSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let values = e.values.as_deref().unwrap_or_default();
    let value = labels.get(&e.key);
    match e.operator.as_str() {
        "In" if !values.is_empty() => Some(value.is_some_and(|v| values.contains(v))),
        "NotIn" if !values.is_empty() => Some(value.is_none_or(|v| !values.contains(v))),
        "Exists" if values.is_empty() => Some(value.is_some()),
        "DoesNotExist" if values.is_empty() => Some(value.is_none()),
        _ => None,
    }
}

/// See the module docs.
pub fn label_selector(data: &[u8]) {
    let Ok(input) = serde_json::from_slice::<Input>(data) else {
        return;
    };
    let compact = Labels::from(input.labels.clone());
    assert_eq!(compact.len(), input.labels.len());
    for (key, value) in &input.labels {
        assert_eq!(compact.get(key), Some(value.as_str()), "label {key:?}");
    }
    let pairs: Vec<(&str, &str)> = compact.iter().collect();
    let expected_pairs: Vec<(&str, &str)> = input
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(pairs, expected_pairs);

    let selector = Selector::from_label_selector(&input.selector);
    let expressions: Vec<Option<bool>> = input
        .selector
        .match_expressions
        .iter()
        .flatten()
        .map(|e| {
            if let Some(key) = compact.iter().map(|(k, _)| k).find(|k| **k == e.key) {
                assert_eq!(compact.get(key), input.labels.get(key).map(String::as_str));
            } else {
                assert_eq!(compact.get(&e.key), None, "absent label {:?}", e.key);
            }
            reference_expression(e, &input.labels)
        })
        .collect();
    assert_eq!(
        selector.has_unusable_expression(),
        expressions.contains(&None),
        "{:?}",
        input.selector
    );
    let expected = input
        .selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| input.labels.get(k) == Some(v))
        && expressions.iter().all(|e| *e == Some(true));
    assert_eq!(
        selector.matches(&compact),
        expected,
        "{:?} on {:?}",
        input.selector,
        input.labels
    );
}
