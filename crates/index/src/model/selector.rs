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

    /// Whether an object with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.expressions.iter().all(|e| match e {
                Expression::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
                Expression::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
                Expression::Exists(k) => labels.contains_key(k),
                Expression::DoesNotExist(k) => !labels.contains_key(k),
                Expression::Never => false,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
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
            match_labels: Some(labels(&[("tier", "db")])),
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
