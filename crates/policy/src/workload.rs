//! `PortSpec` parsing (spec/policy.md §4.1): which workload and port a proxy asks about.

use linkerd_index::inbound::WorkloadRef;
use serde::Deserialize;

/// How much of a client's string an error message repeats: enough to recognise it, never so
/// much that the status no longer fits in the response headers.
const MAX_ECHO: usize = 256;

/// A `PortSpec` that names no workload or no valid port. Displayed as the gRPC status message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PortSpecError {
    /// `Invalid workload: <s> (<reason>)`: the string, cut to 256 bytes, then why it was
    /// refused (the JSON error, an empty part, no `:`). An empty string shows as `""`.
    #[error(
        "Invalid workload: {}{}",
        if workload.is_empty() { "\"\"" } else { workload },
        reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default()
    )]
    Workload {
        workload: String,
        reason: Option<String>,
    },
    /// `Invalid port: N`: 0 or above 65535.
    #[error("Invalid port: {0}")]
    Port(u32),
}

/// The JSON form: `{"ns":"emojivoto","pod":"web-0"}` or
/// `{"ns":"edge","external_workload":"payments-vm-01"}`.
#[derive(Deserialize)]
struct JsonWorkload {
    ns: String,
    #[serde(default)]
    pod: Option<String>,
    #[serde(default)]
    external_workload: Option<String>,
}

/// The longest namespace Kubernetes accepts (a DNS label), in bytes.
const MAX_NAMESPACE_BYTES: usize = 63;
/// The longest pod or ExternalWorkload name Kubernetes accepts (a DNS subdomain), in bytes.
const MAX_NAME_BYTES: usize = 253;

/// Parses `PortSpec.workload`: legacy `"<ns>:<pod>"` (both parts non-empty) or the JSON form
/// (any string starting with `{` after JSON's blanks), naming exactly one of `pod` and
/// `external_workload`. A namespace over 63 bytes or a name over 253, which Kubernetes would
/// refuse, is invalid: such a name would otherwise be kept by the stream and key an outbound
/// topic. So is a namespace that is no DNS-1123 label or a name that is no DNS-1123
/// subdomain: no workload has it, and "unknown server" would hide the typo (upstream looks it
/// up and answers `NotFound`; a proxy's own workload always passes).
pub fn parse_workload(workload: &str) -> Result<WorkloadRef, PortSpecError> {
    let parsed = parse_workload_form(workload)?;
    let (WorkloadRef::Pod { namespace, name } | WorkloadRef::ExternalWorkload { namespace, name }) =
        &parsed;
    let reason = if namespace.len() > MAX_NAMESPACE_BYTES {
        format!("namespace longer than {MAX_NAMESPACE_BYTES} bytes")
    } else if name.len() > MAX_NAME_BYTES {
        format!("name longer than {MAX_NAME_BYTES} bytes")
    } else if let Some(problem) = linkerd_k8s_api::names::namespace_problem(namespace) {
        problem.to_string()
    } else if !linkerd_k8s_api::names::is_dns1123_subdomain(name) {
        "a pod or ExternalWorkload name must be a DNS-1123 subdomain: dot-separated labels of \
         lowercase letters, digits or '-', each starting and ending with a letter or digit"
            .to_string()
    } else {
        return Ok(parsed);
    };
    Err(PortSpecError::Workload {
        workload: echo(workload),
        reason: Some(reason),
    })
}

/// [`parse_workload`] without the length limits.
fn parse_workload_form(workload: &str) -> Result<WorkloadRef, PortSpecError> {
    let invalid = |reason: Option<String>| PortSpecError::Workload {
        workload: echo(workload),
        reason,
    };
    // serde_json skips JSON's blanks around the object: before it as after it (only those:
    // another leading character, a BOM or a no-break space, makes it the legacy form).
    if workload
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
    {
        let json: JsonWorkload =
            serde_json::from_str(workload).map_err(|e| invalid(Some(e.to_string())))?;
        if json.ns.is_empty() {
            return Err(invalid(Some("empty namespace".into())));
        }
        return match (json.pod, json.external_workload) {
            (Some(name), None) if !name.is_empty() => Ok(WorkloadRef::Pod {
                namespace: json.ns,
                name,
            }),
            (None, Some(name)) if !name.is_empty() => Ok(WorkloadRef::ExternalWorkload {
                namespace: json.ns,
                name,
            }),
            (Some(_), Some(_)) => Err(invalid(Some(
                "both pod and external_workload are set".into(),
            ))),
            _ => Err(invalid(Some(
                "expected a non-empty pod or external_workload".into(),
            ))),
        };
    }
    let reason = match workload.split_once(':') {
        Some((ns, pod)) if !ns.is_empty() && !pod.is_empty() => {
            return Ok(WorkloadRef::Pod {
                namespace: ns.to_string(),
                name: pod.to_string(),
            });
        }
        Some(("", _)) => "empty namespace",
        Some(_) => "empty pod name",
        None if workload.is_empty() => "empty",
        None => "expected <namespace>:<pod> or a JSON workload",
    };
    Err(invalid(Some(reason.into())))
}

/// Checks `PortSpec.port`: 1..=65535.
pub fn parse_port(port: u32) -> Result<u16, PortSpecError> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or(PortSpecError::Port(port))
}

/// `s`, cut to [`MAX_ECHO`] bytes (at a character boundary) with `...` when longer.
fn echo(s: &str) -> String {
    if s.len() <= MAX_ECHO {
        return s.to_string();
    }
    format!("{}...", &s[..s.floor_char_boundary(MAX_ECHO)])
}

/// The workload a `PortSpec.workload` or `TrafficSpec.source_workload` names, as
/// `namespace/name` (the introspection API's `pod`); `None` when it does not parse.
pub fn workload_name(workload: &str) -> Option<String> {
    match parse_workload(workload).ok()? {
        WorkloadRef::Pod { namespace, name }
        | WorkloadRef::ExternalWorkload { namespace, name } => Some(format!("{namespace}/{name}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str) -> WorkloadRef {
        WorkloadRef::Pod {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn legacy_and_json_forms() {
        assert_eq!(
            parse_workload("emojivoto:web-djjwbqr6lt-sfd7g"),
            Ok(pod("emojivoto", "web-djjwbqr6lt-sfd7g"))
        );
        assert_eq!(
            parse_workload(r#"{"ns":"emojivoto","pod":"web-djjwbqr6lt-sfd7g"}"#),
            Ok(pod("emojivoto", "web-djjwbqr6lt-sfd7g"))
        );
        assert_eq!(
            parse_workload(r#"{"ns":"edge","external_workload":"payments-vm-01"}"#),
            Ok(WorkloadRef::ExternalWorkload {
                namespace: "edge".into(),
                name: "payments-vm-01".into()
            })
        );
    }

    #[test]
    fn invalid_workloads_name_the_string() {
        for bad in [
            "",
            "emojivoto",
            ":web",
            "emojivoto:",
            "{",
            r#"{"ns":"emojivoto"}"#,
            r#"{"ns":"","pod":"web"}"#,
            r#"{"ns":"emojivoto","pod":""}"#,
            r#"{"ns":"emojivoto","pod":"a","external_workload":"b"}"#,
            r#"{"pod":"web"}"#,
        ] {
            let err = parse_workload(bad).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("Invalid workload: {bad}")),
                "{bad:?}: {err}"
            );
        }
        // Each refusal says why (regression: the legacy form gave no reason).
        let reason = |bad: &str| parse_workload(bad).unwrap_err().to_string();
        assert_eq!(reason(""), r#"Invalid workload: "" (empty)"#);
        assert_eq!(reason(":web"), "Invalid workload: :web (empty namespace)");
        assert_eq!(
            reason("emojivoto:"),
            "Invalid workload: emojivoto: (empty pod name)"
        );
        assert_eq!(
            reason("emojivoto"),
            "Invalid workload: emojivoto (expected <namespace>:<pod> or a JSON workload)"
        );
        let long = format!("ns:{}", "é".repeat(1000));
        let err = parse_workload(&format!("{{{long}"))
            .unwrap_err()
            .to_string();
        assert!(err.len() < 400, "{err}");
    }

    /// Newcomer finding: a 100 KB pod name was kept by each stream that sent it.
    #[test]
    fn names_longer_than_kubernetes_allows_are_invalid() {
        let (ns, name) = ("n".repeat(63), "p".repeat(253));
        assert!(parse_workload(&format!("{ns}:{name}")).is_ok());
        let json = format!(r#"{{"ns":"{ns}","external_workload":"{name}"}}"#);
        assert!(parse_workload(&json).is_ok());
        let reason = |bad: &str| {
            let err = parse_workload(bad).unwrap_err().to_string();
            assert!(err.len() < 400, "{err}");
            err.rsplit_once(" (").map(|(_, r)| r.to_string()).unwrap()
        };
        assert_eq!(
            reason(&format!("{ns}n:{name}")),
            "namespace longer than 63 bytes)"
        );
        assert_eq!(
            reason(&format!(
                r#"{{"ns":"{ns}","pod":"{}"}}"#,
                "p".repeat(100_000)
            )),
            "name longer than 253 bytes)"
        );
    }

    /// Tester finding: a workload no Kubernetes object can have (a blank before the JSON form,
    /// read as the legacy one; a `:` in the pod name) was answered `NotFound` "unknown server",
    /// which did not say what was wrong with it.
    #[test]
    fn names_kubernetes_would_refuse_are_invalid() {
        let reason = |bad: &str| {
            let err = parse_workload(bad).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("Invalid workload: {bad} (")),
                "{err}"
            );
            err
        };
        assert!(
            reason("emojivoto:web-0:extra")
                .contains("a pod or ExternalWorkload name must be a DNS-1123 subdomain")
        );
        assert!(reason("Emojivoto:web-0").contains("a namespace must be a DNS-1123 label"));
        assert!(reason(r#"{"ns":"emojivoto","pod":"Web_0"}"#).contains("DNS-1123 subdomain"));
        assert!(
            reason(r#"{"ns":"emoji voto","external_workload":"vm"}"#).contains("DNS-1123 label")
        );
        // JSON's blanks before the JSON form are skipped, as the ones after it are; other
        // characters make it the legacy form, whose namespace is then no DNS label.
        for odd in ["\u{feff}", "\u{a0}", "\u{c}"] {
            let bad = format!(r#"{odd}{{"ns":"emojivoto","pod":"web-0"}}"#);
            assert!(
                reason(&bad).contains("a namespace must be a DNS-1123 label"),
                "{odd:?}"
            );
        }
        for spaced in [
            r#" {"ns":"emojivoto","pod":"web-0"}"#,
            "\n\t{\"ns\":\"emojivoto\",\"pod\":\"web-0\"}\n",
        ] {
            assert_eq!(
                parse_workload(spaced),
                Ok(pod("emojivoto", "web-0")),
                "{spaced:?}"
            );
        }
        assert_eq!(
            parse_workload("emojivoto:web-0.a-b.c9"),
            Ok(pod("emojivoto", "web-0.a-b.c9"))
        );
    }

    #[test]
    fn ports() {
        assert_eq!(parse_port(1), Ok(1));
        assert_eq!(parse_port(65535), Ok(65535));
        assert_eq!(parse_port(0).unwrap_err().to_string(), "Invalid port: 0");
        assert_eq!(
            parse_port(70000).unwrap_err().to_string(),
            "Invalid port: 70000"
        );
    }
}
