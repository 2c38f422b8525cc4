//! Object names as the API server checks them (apimachinery's `validation` package), for what
//! reads objects that no API server checked: offline mode's state files and the webhooks.

/// Kubernetes' `IsDNS1123Label`: 1 to 63 lowercase letters, digits or `-`, starting and ending
/// with a letter or digit. What a namespace's name must be.
pub fn is_dns1123_label(name: &str) -> bool {
    name.len() <= 63 && is_label(name, |b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Kubernetes' `IsDNS1035Label`: a DNS-1123 label that starts with a letter. What a Service's
/// name must be (it becomes a DNS label under its namespace).
pub fn is_dns1035_label(name: &str) -> bool {
    is_dns1123_label(name) && name.as_bytes()[0].is_ascii_lowercase()
}

/// Kubernetes' `IsDNS1123Subdomain`: dot-separated DNS-1123 labels, at most 253 characters in
/// all. What most kinds' names must be (Pods, EndpointSlices, Nodes, custom resources).
pub fn is_dns1123_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name
            .split('.')
            .all(|label| is_label(label, |b| b.is_ascii_lowercase() || b.is_ascii_digit()))
}

/// Kubernetes' `IsValidPortName` (an IANA service name): 1 to 15 lowercase letters, digits or
/// `-`, with at least one letter, neither starting nor ending with `-`, and no `--`. What a
/// named port (a container's, a Service's `targetPort`) must be.
pub fn is_port_name(name: &str) -> bool {
    name.len() <= 15
        && is_label(name, |b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name.bytes().any(|b| b.is_ascii_lowercase())
        && !name.contains("--")
}

/// Why the API server would refuse `name` for an object of core (`""`) or other `group` and
/// `kind`: `None` when it would take it. A Service's name must be a DNS-1035 label; the other
/// kinds served here, a DNS-1123 subdomain.
pub fn name_problem(group: &str, kind: &str, name: &str) -> Option<&'static str> {
    if group.is_empty() && kind == "Service" {
        return (!is_dns1035_label(name)).then_some(
            "a Service's name must be a DNS-1035 label: 1 to 63 lowercase letters, digits or '-', \
             starting with a letter and ending with a letter or digit",
        );
    }
    (!is_dns1123_subdomain(name)).then_some(
        "a name must be a DNS-1123 subdomain: dot-separated labels of lowercase letters, digits \
         or '-', each starting and ending with a letter or digit, at most 253 characters",
    )
}

/// Why the API server would refuse `namespace` as a namespace's name: `None` when it would
/// take it.
pub fn namespace_problem(namespace: &str) -> Option<&'static str> {
    (!is_dns1123_label(namespace)).then_some(
        "a namespace must be a DNS-1123 label: 1 to 63 lowercase letters, digits or '-', \
         starting and ending with a letter or digit",
    )
}

/// A non-empty label of `alnum` characters and `-` that starts and ends with an `alnum` one.
fn is_label(label: &str, alnum: impl Fn(&u8) -> bool) -> bool {
    let bytes = label.as_bytes();
    bytes.first().is_some_and(&alnum)
        && bytes.last().is_some_and(&alnum)
        && bytes.iter().all(|b| alnum(b) || *b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_names() {
        for good in ["http", "h2", "admin-http", "a", "9a", &"p".repeat(15)] {
            assert!(is_port_name(good), "{good}");
        }
        for bad in [
            "",
            "80",
            "Bad_Name",
            "HTTP",
            "-http",
            "http-",
            "a--b",
            &"p".repeat(16),
        ] {
            assert!(!is_port_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn labels_and_subdomains() {
        for good in ["a", "web-svc", "0web", "a1", &"x".repeat(63)] {
            assert!(is_dns1123_label(good), "{good}");
            assert!(is_dns1123_subdomain(good), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "Web",
            "web_svc",
            "a.b",
            "é",
            &"x".repeat(64),
        ] {
            assert!(!is_dns1123_label(bad), "{bad:?}");
        }
        assert!(is_dns1123_subdomain("web-0.example.com"));
        let longest = vec!["a".repeat(63); 4].join(".")[..253].to_string();
        assert!(is_dns1123_subdomain(&longest));
        assert!(is_dns1123_subdomain(&format!("{}a", "a.".repeat(126))));
        for bad in ["", ".a", "a.", "a..b", "A.b", "a_b", &"a.".repeat(127)] {
            assert!(!is_dns1123_subdomain(bad), "{bad:?}");
        }
        assert!(!is_dns1123_subdomain(&format!("{longest}a")));
        assert!(!is_dns1123_subdomain(&format!("{}a", "a.".repeat(127))));
        assert!(is_dns1035_label("web"));
        assert!(!is_dns1035_label("0web"));
        assert!(!is_dns1035_label(""));
    }

    #[test]
    fn services_take_labels_and_other_kinds_subdomains() {
        assert_eq!(name_problem("", "Service", "web-svc"), None);
        assert!(name_problem("", "Service", "0web").is_some());
        assert!(name_problem("", "Service", "web.svc").is_some());
        assert_eq!(name_problem("", "Pod", "web-0.a"), None);
        assert_eq!(name_problem("policy.linkerd.io", "Service", "0web"), None);
        assert!(name_problem("", "Pod", "Web-0").is_some());
        assert_eq!(namespace_problem("emojivoto"), None);
        assert!(namespace_problem("emoji.voto").is_some());
    }
}
