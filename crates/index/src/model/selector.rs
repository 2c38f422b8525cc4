//! Kubernetes label selectors (`matchLabels` + `matchExpressions`), as Servers use them to pick
//! pods and ExternalWorkloads (spec/policy.md §2.1, spec/destination.md §C.3.1).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

/// A parsed label selector. Labels and expressions are ANDed; the empty selector matches every
/// object. An expression whose operator and values do not fit together (`In` with no values,
/// `Exists` with values, an unknown operator) never matches, as the policy controller treats it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    labels: BTreeMap<String, String>,
    expressions: Vec<Expression>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Expression {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    /// An illegal operator/values combination.
    Never,
}

impl Selector {
    /// Parses a Kubernetes `LabelSelector`.
    pub fn from_label_selector(selector: &LabelSelector) -> Self {
        let expressions = selector
            .match_expressions
            .iter()
            .flatten()
            .map(|e| {
                let values = e.values.clone().unwrap_or_default();
                match (e.operator.as_str(), values.is_empty()) {
                    ("In", false) => Expression::In(e.key.clone(), values),
                    ("NotIn", false) => Expression::NotIn(e.key.clone(), values),
                    ("Exists", true) => Expression::Exists(e.key.clone()),
                    ("DoesNotExist", true) => Expression::DoesNotExist(e.key.clone()),
                    _ => Expression::Never,
                }
            })
            .collect();
        Self {
            labels: selector.match_labels.clone().unwrap_or_default(),
            expressions,
        }
    }

    /// Whether some expression can never match (an illegal operator/values combination):
    /// worth a warning naming the object that carries the selector.
    pub fn has_unusable_expression(&self) -> bool {
        self.expressions.contains(&Expression::Never)
    }

    /// Whether it selects every object: no labels and no expressions (`{}`).
    pub fn selects_all(&self) -> bool {
        self.labels.is_empty() && self.expressions.is_empty()
    }

    /// Whether an object with `labels` is selected.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v.as_str()))
            && self.expressions.iter().all(|e| match e {
                Expression::In(k, vs) => labels.get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
                Expression::NotIn(k, vs) => labels.get(k).is_none_or(|v| vs.iter().all(|x| x != v)),
                Expression::Exists(k) => labels.contains_key(k),
                Expression::DoesNotExist(k) => !labels.contains_key(k),
                Expression::Never => false,
            })
    }
}

/// The labels of a stored object (a pod, an ExternalWorkload, a Server): `(key, value)` pairs
/// sorted by key, in one allocation of exactly their size. A meshed pod carries a handful; a
/// `BTreeMap` would allocate a node of about 540 bytes for them, which is a quarter of what the
/// index keeps per pod (see `tests/pod_info_size.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(Box<[(Box<str>, Box<str>)]>);

impl Labels {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// `(key, value)` pairs in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(labels: BTreeMap<String, String>) -> Self {
        // Already sorted and unique by key.
        Self(
            labels
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Labels {
    /// Pairs in any order; of a key given twice, the last value stays (as in a map).
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let map: BTreeMap<String, String> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        map.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().copied().collect()
    }

    #[test]
    fn labels_are_a_sorted_map() {
        let l = labels(&[("tier", "db"), ("app", "x"), ("app", "y")]);
        assert_eq!(l.iter().collect::<Vec<_>>(), [("app", "y"), ("tier", "db")]);
        assert_eq!(l.get("tier"), Some("db"));
        assert_eq!(l.get("zone"), None);
        assert!(l.contains_key("app") && !l.contains_key("ap"));
        assert_eq!(l.len(), 2);
    }

    fn expr(key: &str, op: &str, values: Option<&[&str]>) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.map(|vs| vs.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn labels_and_expressions_are_anded() {
        let sel = Selector::from_label_selector(&LabelSelector {
            match_labels: Some([("tier".to_string(), "db".to_string())].into()),
            match_expressions: Some(vec![
                expr("app", "In", Some(&["emoji-svc", "voting-svc"])),
                expr("canary", "DoesNotExist", None),
            ]),
        });
        assert!(sel.matches(&labels(&[("tier", "db"), ("app", "voting-svc")])));
        assert!(!sel.matches(&labels(&[("tier", "db"), ("app", "web-svc")])));
        assert!(!sel.matches(&labels(&[("app", "voting-svc")])));
        assert!(!sel.matches(&labels(&[
            ("tier", "db"),
            ("app", "emoji-svc"),
            ("canary", "1")
        ])));
        assert!(Selector::default().matches(&labels(&[])));
    }

    #[test]
    fn illegal_expressions_never_match() {
        for bad in [
            expr("app", "In", Some(&[])),
            expr("app", "Exists", Some(&["x"])),
            expr("app", "Near", Some(&["x"])),
        ] {
            let sel = Selector::from_label_selector(&LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![bad.clone()]),
            });
            assert!(!sel.matches(&labels(&[("app", "x")])), "{bad:?}");
            assert!(sel.has_unusable_expression(), "{bad:?}");
        }
        let not_in = Selector::from_label_selector(&LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![expr("app", "NotIn", Some(&["x"]))]),
        });
        assert!(not_in.matches(&labels(&[])) && !not_in.matches(&labels(&[("app", "x")])));
        assert!(!not_in.has_unusable_expression());
    }
}
