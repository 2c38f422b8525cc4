//! Port lists as the opaque-ports and skip-ports annotations and `--default-opaque-ports`
//! write them (`25,587,4000-4100,http`; spec/destination.md §B.2, spec/policy.md §1.2).
//!
//! Input: the list (UTF-8). Properties, against a reference reading of the list (comma
//! separated; items trimmed, empty ones ignored; a decimal port 1-65535, `LOW-HIGH` with
//! `LOW <= HIGH`, or a known port name):
//! - the set holds exactly the ports the valid items name, and the invalid items are
//!   returned in order;
//! - the set prints as the sorted list of its merged ranges, which parses back to the same set;
//! - `contains` agrees with the reference at every edge of the ranges, beside it, and within
//!   each range and each gap;
//! - as an annotation, the list is valid only as a whole, and the error names the first
//!   invalid item.

use linkerd_index::PortSet;

use super::text;

/// Port names a pod of the fixtures gives its container ports.
fn resolve_name(name: &str) -> Option<u16> {
    match name {
        "http" => Some(8080),
        "grpc" => Some(8081),
        "admin-http" => Some(4191),
        "linkerd-proxy" => Some(4143),
        _ => None,
    }
}

/// A port: decimal digits only (no sign: Go's `strconv.ParseUint`, which upstream uses,
/// takes none), 1-65535.
fn reference_port(s: &str) -> Option<u16> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match s.trim_start_matches('0').len() {
        0 => None,
        n if n > 5 => None,
        _ => s
            .parse::<u32>()
            .ok()
            .filter(|p| *p <= 65535)
            .map(|p| p as u16),
    }
}

fn reference_item(item: &str) -> Option<(u16, u16)> {
    let range = match item.split_once('-') {
        None => reference_port(item).map(|p| (p, p)),
        Some((low, high)) => reference_port(low.trim())
            .zip(reference_port(high.trim()))
            .filter(|(low, high)| low <= high),
    };
    range.or_else(|| resolve_name(item).map(|p| (p, p)))
}

/// The ports of `ranges` as sorted, disjoint, non-adjacent ranges: the reference's union,
/// without expanding a range into its ports.
fn reference_union(mut ranges: Vec<(u16, u16)>) -> Vec<(u16, u16)> {
    ranges.sort_unstable();
    let mut union: Vec<(u16, u16)> = Vec::with_capacity(ranges.len());
    for (low, high) in ranges {
        match union.last_mut() {
            Some(last) if u32::from(low) <= u32::from(last.1) + 1 => last.1 = last.1.max(high),
            _ => union.push((low, high)),
        }
    }
    union
}

/// `union` written as a port list: `80,4000-4100`.
fn reference_print(union: &[(u16, u16)]) -> String {
    let items: Vec<String> = union
        .iter()
        .map(|&(low, high)| {
            if low == high {
                low.to_string()
            } else {
                format!("{low}-{high}")
            }
        })
        .collect();
    items.join(",")
}

/// Whether `port` is in `union` (sorted and disjoint).
fn reference_contains(union: &[(u16, u16)], port: u16) -> bool {
    let i = union.partition_point(|&(_, high)| high < port);
    union.get(i).is_some_and(|&(low, _)| low <= port)
}

/// See the module docs.
pub fn port_list(data: &[u8]) {
    let Some(list) = text(data) else { return };
    let mut named = Vec::new();
    let mut expected_invalid = Vec::new();
    for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match reference_item(item) {
            Some(range) => named.push(range),
            None => expected_invalid.push(item),
        }
    }
    let expected = reference_union(named);
    let (set, invalid) = PortSet::parse_with_names(list, resolve_name);
    let invalid: Vec<&str> = invalid.iter().map(|i| i.item.as_str()).collect();
    assert_eq!(invalid, expected_invalid, "{list:?}: invalid items");
    // The set's ranges print as they are, so a print equal to the reference's says the set holds
    // exactly the ports named (and keeps them sorted and merged); `contains` is then checked
    // where a search over those ranges can go wrong: at every edge, beside it, and within each
    // range and each gap.
    let printed = set.to_string();
    assert_eq!(printed, reference_print(&expected), "{list:?}: the set");
    let mut probes = vec![0, 1, u16::MAX];
    let mut previous_end: Option<u16> = None;
    for &(low, high) in &expected {
        probes.extend([low.saturating_sub(1), low, low + (high - low) / 2, high]);
        probes.push(high.saturating_add(1));
        if let Some(end) = previous_end {
            probes.push(end + (low - end) / 2);
        }
        previous_end = Some(high);
    }
    for port in probes {
        assert_eq!(
            set.contains(port),
            reference_contains(&expected, port),
            "{list:?}: port {port}"
        );
    }
    let (again, none) = PortSet::parse(&printed);
    assert!(none.is_empty(), "{list:?} printed as {printed:?}: {none:?}");
    assert_eq!(again, set, "{list:?} printed as {printed:?}");
    match PortSet::parse_annotation(list, resolve_name) {
        Ok(annotation) => {
            assert!(expected_invalid.is_empty(), "{list:?}: accepted as a whole");
            assert_eq!(annotation, set, "{list:?}");
        }
        Err(error) => {
            assert_eq!(
                Some(&error.item.as_str()),
                expected_invalid.first(),
                "{list:?}"
            );
            assert!(error.to_string().contains(&format!("{:?}", error.item)));
        }
    }
}
