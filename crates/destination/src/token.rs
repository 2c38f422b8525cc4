//! The context token a proxy sends with every request: who is asking, and from where.

use serde::Deserialize;

/// A parsed `context_token` (spec/destination.md §C.1).
///
/// The proxy sends JSON such as `{"ns":"emojivoto","nodeName":"ip-10-20-1-11...","pod":"web-..."}`.
/// Older proxies send `ns:<namespace>`. Anything else yields an empty token: a bad token is
/// never an error.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ContextToken {
    /// The client's namespace.
    #[serde(default)]
    pub ns: Option<String>,
    /// The client's node, used for topology hints and `internalTrafficPolicy: Local`.
    #[serde(default, rename = "nodeName")]
    pub node_name: Option<String>,
    /// The client pod (only logged).
    #[serde(default)]
    pub pod: Option<String>,
}

impl ContextToken {
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
        if let Ok(parsed) = serde_json::from_str::<Self>(token) {
            return parsed;
        }
        match token.strip_prefix("ns:") {
            Some(ns) if !ns.contains(':') => Self {
                ns: Some(ns.to_string()),
                ..Self::default()
            },
            _ => Self::default(),
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
