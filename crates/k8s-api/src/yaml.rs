//! YAML manifests read and written with `serde-saphyr` (the YAML crate kube builds), with the
//! YAML 1.2 reading that `kubectl get -o yaml` output and the workspace's tests assume.
//!
//! serde-saphyr reads YAML 1.1 booleans by default, so an unquoted `y`, `n`, `yes`, `no`, `on`
//! or `off` decoded without a type (into `serde_json::Value`, as `cargo xtask check-deploy`
//! reads manifests and the webhooks' tests build objects) would become `true` or `false`. Here
//! only `true` and `false` are booleans, as in YAML 1.2; the rest stay strings. A number with a
//! leading zero is not YAML 1.1 octal, and a key repeated in one mapping is an error naming it.
//! [`to_string`] quotes strings that a YAML 1.1 reader would take for a boolean or a number, so
//! what is written reads back the same with either version.

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

pub use serde_saphyr::{Error, ser::Error as SerializeError};

/// The reading options for `text`: YAML 1.2 booleans, duplicate keys refused, no legacy octal,
/// and serde-saphyr's budget against hostile input with its counting limits scaled to the
/// text's length.
///
/// serde-saphyr's default budget (250,000 nodes, 1,000,000 events, 1,024 documents per text)
/// refuses a `kubectl get pods -A -o yaml` of a few hundred pods, which offline mode must read.
/// The text is already in memory, so limits proportional to its length (a node, an event or a
/// document per byte, and the default on top) cost no more than the text itself. What can
/// make a small text expensive is bounded apart: aliases and merge keys keep serde-saphyr's
/// defaults (50,000 aliases, at most ten per anchor past 100; 10,000 merge keys; 64 levels of
/// nesting), and what aliases replay is capped at [`MAX_REPLAYED_EVENTS`].
/// The events that aliases may replay in one text, in all: a few MB of decoded tree at most.
///
/// serde-saphyr's default (1,000,000) let a 521-byte alias bomb take 48 MB while it was read
/// before being refused, and the heap kept it (newcomer finding: 117 MB of RSS in
/// `destination` after one such state file). Manifests written by kubectl or Helm have no
/// aliases; a hand-written one sharing a block between containers replays a few hundred.
pub const MAX_REPLAYED_EVENTS: usize = 50_000;

fn options_for(text: &str) -> serde_saphyr::Options {
    let defaults = serde_saphyr::Budget::default();
    #[allow(deprecated)] // read-only access to the defaults the macro starts from
    let (events, nodes, documents, scalar_bytes) = (
        defaults.max_events,
        defaults.max_nodes,
        defaults.max_documents,
        defaults.max_total_scalar_bytes,
    );
    let len = text.len();
    serde_saphyr::options! {
        strict_booleans: true,
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_REPLAYED_EVENTS,
        },
        budget: serde_saphyr::budget! {
            max_events: events.saturating_add(len.saturating_mul(2)),
            max_nodes: nodes.saturating_add(len),
            max_documents: documents.saturating_add(len),
            max_total_scalar_bytes: scalar_bytes.saturating_add(len),
        },
    }
}

/// Decodes one YAML document.
///
/// Errors (with the line and column) when `text` is not YAML, holds more than one document,
/// or does not decode as `T`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    refuse_nul(text)?;
    serde_saphyr::from_str_with_options(text, options_for(text))
}

/// Errors naming the line and column (bytes, from 1) of the first NUL character in `text`:
/// YAML's character set has none, and serde-saphyr reads one as the end of the text, so a
/// file with a NUL at its start would read as empty.
fn refuse_nul(text: &str) -> Result<(), Error> {
    let Some(at) = text.find('\0') else {
        return Ok(());
    };
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = at - before.rfind('\n').map_or(0, |newline| newline + 1) + 1;
    Err(serde::de::Error::custom(format!(
        "a NUL character at line {line}, column {column}: YAML does not allow it"
    )))
}

/// Decodes every document of a multi-document (`---`) YAML text, in order. Empty documents
/// (nothing, `~` or only comments between two `---`) are skipped, as kubectl skips them.
///
/// Errors on the first document that is not YAML or does not decode as `T`, and on a NUL
/// character anywhere.
pub fn from_documents<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, Error> {
    refuse_nul(text)?;
    serde_saphyr::from_multiple_with_options(text, options_for(text))
}

/// Encodes `value` as one YAML document (block style, two-space indents, `{}`/`[]` for empty
/// collections, multi-line strings as literal `|` blocks and long ones folded with `>`).
///
/// serde-saphyr indents the empty lines of a literal block, which leaves trailing whitespace
/// in generated files; those lines are written empty instead, which reads the same. (A line of
/// spaces deeper than the line before it is content and is kept; should the text ever read
/// differently without them, it is returned as serde-saphyr wrote it.)
///
/// Errors when `value` cannot be represented (a map whose keys are not scalars).
pub fn to_string<T: Serialize>(value: &T) -> Result<String, SerializeError> {
    let text = serde_saphyr::to_string(value)?;
    let indent = |line: &str| line.len() - line.trim_start_matches(' ').len();
    let mut changed = false;
    let mut previous_indent = 0;
    let mut trimmed = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let content = line.strip_suffix('\n').unwrap_or(line);
        if !content.is_empty() && indent(content) == content.len() {
            if content.len() <= previous_indent {
                trimmed.push_str(&line[content.len()..]);
                changed = true;
                continue;
            }
        } else if !content.is_empty() {
            previous_indent = indent(content);
        }
        trimmed.push_str(line);
    }
    if !changed {
        return Ok(text);
    }
    let reads_the_same = matches!(
        (from_str::<Value>(&trimmed), from_str::<Value>(&text)),
        (Ok(a), Ok(b)) if a == b
    );
    Ok(if reads_the_same { trimmed } else { text })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_1_1_booleans_are_strings() {
        let value: Value = from_str("a: yes\nb: on\nc: n\nd: true\ne: False\nf: 'no'\n").unwrap();
        assert_eq!(
            value,
            json!({"a": "yes", "b": "on", "c": "n", "d": true, "e": false, "f": "no"})
        );
    }

    #[test]
    fn numbers() {
        let value: Value = from_str("a: 0o17\nb: 0x1F\nc: 8080\nd: '0755'\ne: 1.5\n").unwrap();
        assert_eq!(
            value,
            json!({"a": 15, "b": 31, "c": 8080, "d": "0755", "e": 1.5})
        );
    }

    #[test]
    fn duplicate_keys_are_refused() {
        let error = from_str::<Value>("a: 1\nb: 2\na: 3\n").unwrap_err();
        let message = error.to_string();
        assert!(message.contains("duplicate mapping key: a"), "{message}");
        assert!(message.contains("line 3 column 1"), "{message}");
    }

    /// YAML's character set has no NUL; serde-saphyr read a text with one as ending there, so
    /// a NUL at the start of a manifest file emptied it without an error (newcomer finding:
    /// offline mode then withdrew the file's objects silently).
    #[test]
    fn a_nul_character_is_refused_with_its_place() {
        for (text, place) in [
            ("\0apiVersion: v1\nkind: Service\n", "line 1, column 1"),
            ("a: 1\n# comment \0 here\n---\nb: 2\n", "line 2, column 11"),
            (
                "metadata:\n  name: nul\0svc\n  namespace: x\n",
                "line 2, column 12",
            ),
        ] {
            let error = from_documents::<Value>(text).unwrap_err().to_string();
            assert!(error.contains("NUL character"), "{text:?}: {error}");
            assert!(error.contains(place), "{text:?}: {error}");
            let error = from_str::<Value>(text).unwrap_err().to_string();
            assert!(error.contains(place), "{text:?}: {error}");
        }
    }

    #[test]
    fn empty_documents_are_skipped() {
        let docs: Vec<Value> =
            from_documents("---\n# only a comment\n---\na: 1\n---\n~\n---\n---\nb: 2\n").unwrap();
        assert_eq!(docs, [json!({"a": 1}), json!({"b": 2})]);
        assert!(from_documents::<Value>("").unwrap().is_empty());
    }

    /// A `kubectl get pods -A -o yaml` of a large namespace: one List document of many small
    /// mappings, far past serde-saphyr's default 250,000 nodes and 1,024 documents.
    #[test]
    fn large_manifests_are_read_whole() {
        let mut list = String::from("apiVersion: v1\nkind: List\nitems:\n");
        for i in 0..30_000 {
            list.push_str(&format!(
                "- kind: Pod\n  metadata:\n    name: web-{i}\n    labels: {{app: web, n: '{i}'}}\n  spec:\n    nodeName: node-{i}\n"
            ));
        }
        let value: Value = from_str(&list).unwrap();
        let items = value["items"].as_array().unwrap();
        assert_eq!(items.len(), 30_000);
        assert_eq!(items[29_999]["metadata"]["name"], "web-29999");

        let documents = (0..2_000)
            .map(|i| format!("---\nname: object-{i}\n"))
            .collect::<String>();
        let docs: Vec<Value> = from_documents(&documents).unwrap();
        assert_eq!(docs.len(), 2_000);
        assert_eq!(docs[1_999], json!({"name": "object-1999"}));
    }

    /// What can make a small text expensive keeps serde-saphyr's limits: a text of aliases
    /// that would expand exponentially is refused, not expanded.
    #[test]
    fn alias_bombs_are_refused() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        let mut previous = 'a';
        for name in 'b'..='k' {
            bomb.push_str(&format!("{name}: &{name} [*{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}]\n"));
            previous = name;
        }
        let error = from_str::<Value>(&bomb).unwrap_err().to_string();
        assert!(error.contains("alias replay limit exceeded"), "{error}");
    }

    /// What aliases replay is capped in all, whatever the text's length: a text that repeats
    /// a 1,000-scalar anchor 60 times (about 60,000 replayed events, far under the node and
    /// event budgets) is refused, and the same anchor repeated 40 times is read.
    #[test]
    fn what_aliases_replay_is_capped() {
        let text = |uses: usize| {
            let scalars = (0..1_000).map(|i| format!("s{i}")).collect::<Vec<_>>();
            let mut text = format!("anchor: &a [{}]\nuses:\n", scalars.join(", "));
            text.push_str(&"- *a\n".repeat(uses));
            text
        };
        let read: Value = from_str(&text(40)).unwrap();
        assert_eq!(read["uses"].as_array().map(Vec::len), Some(40));
        assert_eq!(read["uses"][39][999], "s999");
        let error = from_str::<Value>(&text(60)).unwrap_err().to_string();
        assert!(error.contains("alias replay limit exceeded"), "{error}");
        assert!(
            error.contains(&format!("> {MAX_REPLAYED_EVENTS}")),
            "{error}"
        );
        // A padded text gets no more: the cap does not grow with the length.
        let padded = format!("{}{}", "# padding\n".repeat(100_000), text(60));
        let error = from_str::<Value>(&padded).unwrap_err().to_string();
        assert!(error.contains("alias replay limit exceeded"), "{error}");
    }

    #[test]
    fn written_strings_read_back_as_strings() {
        let value = json!({
            "bools": ["yes", "No", "on", "OFF", "y", "n", "true"],
            "numbers": ["0755", "8080", "1e3", ".inf", "0x1F"],
            "other": ["", "~", "null", "- a", "a: b", "#x", "multi\nline\n"],
            "paragraphs": "one\n\ntwo\n   \nthree",
            "long": "a description that is longer than eighty characters, so that it is written as a block scalar",
        });
        let text = to_string(&value).unwrap();
        assert_eq!(from_str::<Value>(&text).unwrap(), value, "{text}");
        // The empty line between paragraphs is written empty; the one of three spaces is kept.
        assert!(text.contains("  one\n\n  two\n     \n  three\n"), "{text}");
        // A line of spaces after a deeper line is content too: the text stays as written.
        let code = json!({"code": "if x:\n    y\n   \nz"});
        let code_text = to_string(&code).unwrap();
        assert_eq!(from_str::<Value>(&code_text).unwrap(), code, "{code_text}");
        // A YAML 1.1 reader must not see booleans either: those spellings are quoted.
        for spelling in ["yes", "No", "on", "OFF", "y", "n"] {
            assert!(
                text.contains(&format!("'{spelling}'"))
                    || text.contains(&format!("\"{spelling}\"")),
                "{spelling} unquoted in\n{text}"
            );
        }
    }
}
