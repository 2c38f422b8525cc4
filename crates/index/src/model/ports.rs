//! Port lists as Linkerd annotations and flags write them: `25,587,3306,4000-4100`.
//!
//! Mirrors upstream's `util.ParsePorts` / `ParseContainerOpaquePorts`
//! (spec/destination.md §A.2 `-default-opaque-ports`, §B.2 `config.linkerd.io/opaque-ports`).

use std::{fmt, ops::RangeInclusive};

/// A set of TCP ports, kept as sorted, inclusive ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PortSet {
    ranges: Vec<RangeInclusive<u16>>,
}

/// One item of a port list that is neither a port, a range, nor (where allowed) a known name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid port or port range {item:?}: ports are 1 to 65535, a range is LOW-HIGH with LOW <= HIGH"
)]
pub struct InvalidPortItem {
    pub item: String,
}

impl PortSet {
    /// Parses a comma-separated list of ports (`8080`) and ranges (`4000-4100`), 1..=65535.
    ///
    /// Whitespace around items is trimmed and empty items (a trailing comma) are ignored.
    /// Items that are not ports or ranges are returned beside the set, so callers log them and
    /// keep the rest (upstream skips bad items with a warning).
    pub fn parse(list: &str) -> (Self, Vec<InvalidPortItem>) {
        Self::parse_with_names(list, |_| None)
    }

    /// Like [`PortSet::parse`], but an item that is not numeric is first looked up with
    /// `resolve_name` (a container-port or service-port name to its port number).
    pub fn parse_with_names(
        list: &str,
        resolve_name: impl Fn(&str) -> Option<u16>,
    ) -> (Self, Vec<InvalidPortItem>) {
        let mut ranges = Vec::new();
        let mut invalid = Vec::new();
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match parse_item(item).or_else(|| resolve_name(item).map(|p| p..=p)) {
                Some(range) => ranges.push(range),
                None => invalid.push(InvalidPortItem {
                    item: item.to_string(),
                }),
            }
        }
        (Self::from_ranges(ranges), invalid)
    }

    /// Parses a port-list annotation such as `config.linkerd.io/opaque-ports`: the syntax of
    /// [`PortSet::parse_with_names`], but the value is valid only as a whole.
    ///
    /// Errors: the first item that is neither a port, a range nor a name `resolve_name` knows
    /// (`0`, `2-1`, `65536`, an unknown name). Callers log it and use the empty set, not the
    /// default ports and not the items that did parse (spec/policy.md §1.2, so discovery and
    /// policy agree on which ports are opaque).
    pub fn parse_annotation(
        list: &str,
        resolve_name: impl Fn(&str) -> Option<u16>,
    ) -> Result<Self, InvalidPortItem> {
        let (set, invalid) = Self::parse_with_names(list, resolve_name);
        match invalid.into_iter().next() {
            None => Ok(set),
            Some(item) => Err(item),
        }
    }

    /// Adds an inclusive range of ports to the set.
    pub fn insert(&mut self, range: RangeInclusive<u16>) {
        let mut ranges = std::mem::take(&mut self.ranges);
        ranges.push(range);
        *self = Self::from_ranges(ranges);
    }

    /// The set of the ports in `ranges`, kept sorted by start with overlapping and adjacent
    /// ranges merged. Sorting once keeps a long list linearithmic: merging item by item re-sorted
    /// the set for every item, quadratic in the list's length.
    fn from_ranges(mut ranges: Vec<RangeInclusive<u16>>) -> Self {
        ranges.sort_unstable_by_key(|r| *r.start());
        let mut merged: Vec<RangeInclusive<u16>> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(last) if u32::from(*r.start()) <= u32::from(*last.end()) + 1 => {
                    if r.end() > last.end() {
                        *last = *last.start()..=*r.end();
                    }
                }
                _ => merged.push(r),
            }
        }
        Self { ranges: merged }
    }

    /// Whether `port` is in the set: a binary search of the sorted, disjoint ranges.
    pub fn contains(&self, port: u16) -> bool {
        let i = self.ranges.partition_point(|r| *r.end() < port);
        self.ranges.get(i).is_some_and(|r| r.contains(&port))
    }

    /// Whether the set holds no port.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// A decimal port 1-65535: digits only (`str::parse` would also take `+80`; upstream's
/// `strconv.ParseUint` takes no sign).
fn parse_port(s: &str) -> Option<u16> {
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match s.parse::<u16>() {
        Ok(0) | Err(_) => None,
        Ok(p) => Some(p),
    }
}

fn parse_item(item: &str) -> Option<RangeInclusive<u16>> {
    match item.split_once('-') {
        None => parse_port(item).map(|p| p..=p),
        Some((lo, hi)) => {
            let (lo, hi) = (parse_port(lo.trim())?, parse_port(hi.trim())?);
            (lo <= hi).then_some(lo..=hi)
        }
    }
}

impl fmt::Display for PortSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if r.start() == r.end() {
                write!(f, "{}", r.start())?;
            } else {
                write!(f, "{}-{}", r.start(), r.end())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_chart_default_opaque_ports() {
        let (set, invalid) = PortSet::parse("25,587,3306,4444,5432,6379,9300,11211");
        assert!(invalid.is_empty());
        for p in [25, 587, 3306, 4444, 5432, 6379, 9300, 11211] {
            assert!(set.contains(p), "{p}");
        }
        assert!(!set.contains(80));
        assert_eq!(set.to_string(), "25,587,3306,4444,5432,6379,9300,11211");
    }

    #[test]
    fn ranges_whitespace_trailing_comma_and_bad_items() {
        let (set, invalid) = PortSet::parse(" 4000-4002 , 80,, bogus, 0, 70000, 9-3,");
        assert_eq!(set.to_string(), "80,4000-4002");
        let bad: Vec<_> = invalid.into_iter().map(|i| i.item).collect();
        assert_eq!(bad, ["bogus", "0", "70000", "9-3"]);
    }

    #[test]
    fn annotations_are_valid_only_as_a_whole() {
        let named = |n: &str| (n == "http").then_some(8080);
        assert_eq!(
            PortSet::parse_annotation("http, 25,4000-4001,", named).map(|s| s.to_string()),
            Ok("25,4000-4001,8080".to_string())
        );
        for (list, bad) in [("0,8080", "0"), ("8080,9-3", "9-3"), ("8080,amqp", "amqp")] {
            assert_eq!(
                PortSet::parse_annotation(list, named),
                Err(InvalidPortItem { item: bad.into() }),
                "{list}"
            );
        }
    }

    /// Found by the `port_list` fuzz target: `str::parse` reads `+80` as 80, where upstream's
    /// `strconv.ParseUint` refuses any sign.
    #[test]
    fn signed_ports_are_invalid_items() {
        let (set, invalid) = PortSet::parse("+80,4000-+4001,-1, 8080");
        assert_eq!(set.to_string(), "8080");
        let bad: Vec<_> = invalid.into_iter().map(|i| i.item).collect();
        assert_eq!(bad, ["+80", "4000-+4001", "-1"]);
    }

    /// A long list (the `port_list` fuzz target's inputs) is the same set as its items added
    /// one by one, and `contains` finds every port of it and none other.
    #[test]
    fn long_lists_are_sorted_and_merged_once() {
        // Runs 30k+1..=30k+20 (a port, a range, an overlapping range) with gaps between them,
        // written backwards.
        let items: Vec<String> = (0..1000u32)
            .rev()
            .flat_map(|k| {
                let base = 30 * k;
                [
                    format!("{}-{}", base + 8, base + 20),
                    format!("{}-{}", base + 2, base + 10),
                    format!("{}", base + 1),
                ]
            })
            .collect();
        let (set, invalid) = PortSet::parse(&items.join(","));
        assert!(invalid.is_empty());
        let mut one_by_one = PortSet::default();
        for item in &items {
            one_by_one.insert(parse_item(item).unwrap());
        }
        assert_eq!(set, one_by_one);
        assert_eq!(set.ranges.len(), 1000);
        assert_eq!(set.ranges[0], 1..=20);
        assert_eq!(set.ranges[999], 29971..=29990);
        for port in 0..=u16::MAX {
            let expected = port != 0 && port <= 29990 && (port - 1) % 30 < 20;
            assert_eq!(set.contains(port), expected, "{port}");
        }
    }

    #[test]
    fn names_resolve_through_the_callback() {
        let (set, invalid) =
            PortSet::parse_with_names("amqp,9000", |n| (n == "amqp").then_some(5672));
        assert!(invalid.is_empty());
        assert!(set.contains(5672) && set.contains(9000) && !set.contains(15672));
        let (empty, _) = PortSet::parse("");
        assert!(empty.is_empty());
    }
}
