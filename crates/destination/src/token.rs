//! The context token a proxy sends with every request: who is asking, and from where.

use crate::authority::{MAX_LABEL, MAX_NAME};

/// A parsed `context_token` (spec/destination.md §C.1).
///
/// The proxy sends JSON such as `{"ns":"emojivoto","nodeName":"ip-10-20-1-11...","pod":"web-..."}`.
/// Older proxies send `ns:<namespace>`. Anything else yields an empty token: a bad token is
/// never an error. A field longer than Kubernetes allows for what it names (63 bytes for a
/// namespace, 253 for a pod or node name) names nothing and is dropped: a stream keeps its
/// token's fields (the node name is a metric label), and the request may carry 64 KiB.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContextToken {
    /// The client's namespace.
    pub ns: Option<String>,
    /// The client's node, used for topology hints and `internalTrafficPolicy: Local`.
    pub node_name: Option<String>,
    /// The client pod (only logged).
    pub pod: Option<String>,
}

impl ContextToken {
    /// A JSON object's `ns`, `nodeName` and `pod` strings (`null` is absent). A key given
    /// twice counts with its last value, as Go's `encoding/json` reads it upstream (serde's
    /// derive refuses the object); a field that is neither a string nor `null` refuses it,
    /// as there. `None` when `token` is not such an object.
    fn from_json(token: &str) -> Option<Self> {
        let serde_json::Value::Object(mut fields) = serde_json::from_str(token).ok()? else {
            return None;
        };
        let mut field = |key: &str| match fields.remove(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(value)) => Ok(Some(value)),
            Some(_) => Err(()),
        };
        Some(Self {
            ns: field("ns").ok()?,
            node_name: field("nodeName").ok()?,
            pod: field("pod").ok()?,
        })
    }

    /// The client pod as `namespace/name`, when the token names both.
    pub fn pod_ref(&self) -> Option<String> {
        match (&self.ns, &self.pod) {
            (Some(ns), Some(pod)) if !ns.is_empty() && !pod.is_empty() => {
                Some(format!("{ns}/{pod}"))
            }
            _ => None,
        }
    }

    /// Parses a token; never fails.
    pub fn parse(token: &str) -> Self {
        let token = token.trim();
        let parsed = if let Some(parsed) = Self::from_json(token) {
            parsed
        } else {
            match token.strip_prefix("ns:") {
                Some(ns) if !ns.contains(':') => Self {
                    ns: Some(ns.to_string()),
                    ..Self::default()
                },
                _ => Self::default(),
            }
        };
        let fits = |max: usize| move |field: &String| field.len() <= max;
        Self {
            // A namespace is a DNS label; pod and node names are DNS names.
            ns: parsed.ns.filter(fits(MAX_LABEL)),
            node_name: parsed.node_name.filter(fits(MAX_NAME)),
            pod: parsed.pod.filter(fits(MAX_NAME)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_tokens() {
        let t = ContextToken::parse(
            "{\"ns\":\"emojivoto\",\"nodeName\":\"ip-10-20-1-11.eu-west-1.compute.internal\",\"pod\":\"vote-bot\",\"extra\":1}\n",
        );
        assert_eq!(t.ns.as_deref(), Some("emojivoto"));
        assert_eq!(
            t.node_name.as_deref(),
            Some("ip-10-20-1-11.eu-west-1.compute.internal")
        );
        assert_eq!(t.pod.as_deref(), Some("vote-bot"));
    }

    /// Newcomer finding: megabytes of `nodeName` were kept by the stream and its metric labels.
    #[test]
    fn fields_longer_than_kubernetes_allows_are_dropped() {
        let token = |ns: usize, node: usize, pod: usize| {
            ContextToken::parse(&format!(
                "{{\"ns\":\"{}\",\"nodeName\":\"{}\",\"pod\":\"{}\"}}",
                "n".repeat(ns),
                "a".repeat(node),
                "p".repeat(pod)
            ))
        };
        let longest = token(63, 253, 253);
        assert_eq!(longest.ns.map(|s| s.len()), Some(63));
        assert_eq!(longest.node_name.map(|s| s.len()), Some(253));
        assert_eq!(longest.pod.map(|s| s.len()), Some(253));
        let too_long = token(64, 3_000_000, 254);
        assert_eq!(too_long, ContextToken::default());
        assert_eq!(
            ContextToken::parse(&format!("ns:{}", "n".repeat(64))),
            ContextToken::default()
        );
    }

    /// Newcomer finding: a key given twice dropped the whole token; upstream's Go decoder
    /// takes the last value.
    #[test]
    fn a_key_given_twice_counts_with_its_last_value() {
        let t = ContextToken::parse(r#"{"ns":"other","pod":"web-0","ns":"emojivoto"}"#);
        assert_eq!(t.pod_ref().as_deref(), Some("emojivoto/web-0"));
    }

    #[test]
    fn legacy_and_garbage_tokens() {
        assert_eq!(
            ContextToken::parse("ns:emojivoto").ns.as_deref(),
            Some("emojivoto")
        );
        for garbage in [
            "",
            "ns:a:b",
            "{not json",
            "[1,2]",
            "{\"ns\":5}",
            "\u{0}\u{1}",
            "null",
        ] {
            assert_eq!(
                ContextToken::parse(garbage),
                ContextToken::default(),
                "{garbage:?}"
            );
        }
    }
}
