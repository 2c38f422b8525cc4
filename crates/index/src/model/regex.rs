//! Compiling the regexes that objects carry (a ServiceProfile's `pathRegex`, a route's
//! `RegularExpression` matches) within bounds: the regex crate limits the compiled program but
//! not what parsing a pattern takes, and one review whose `pathRegex` was `(a|b)*` repeated
//! 240,000 times (1.4 MiB) took a validator to 320 MB. The proxy compiles the same patterns,
//! and real ones are a few hundred bytes.

/// The longest pattern compiled, in bytes: 8 KiB.
pub const MAX_REGEX_BYTES: usize = 8 * 1024;

/// How deep groups and repetitions may nest (the regex crate allows 250).
const NEST_LIMIT: u32 = 64;

/// The most memory the compiled program may take, in bytes (the regex crate allows 10 MiB).
const SIZE_LIMIT: usize = 1024 * 1024;

/// `pattern` compiled, or why not in one line (the regex crate's own error renders the
/// pattern over several lines): too long, nested too deep, too large once compiled, or
/// invalid.
pub fn compile_regex(pattern: &str) -> Result<regex::Regex, String> {
    if pattern.len() > MAX_REGEX_BYTES {
        return Err(format!(
            "the pattern is {} bytes long, more than the {MAX_REGEX_BYTES} allowed",
            pattern.len()
        ));
    }
    regex::RegexBuilder::new(pattern)
        .nest_limit(NEST_LIMIT)
        .size_limit(SIZE_LIMIT)
        .build()
        .map_err(|error| one_line(&error))
}

fn one_line(error: &regex::Error) -> String {
    let text = error.to_string();
    text.lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .map(str::to_string)
        .unwrap_or_else(|| text.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_compile_within_bounds() {
        assert!(compile_regex("/api/v[0-9]+/users/[^/]+").is_ok());
        assert_eq!(
            compile_regex(&"(a|b)*".repeat(2000)).unwrap_err(),
            "the pattern is 12000 bytes long, more than the 8192 allowed"
        );
        let deep = format!("{}a{}", "(".repeat(100), ")".repeat(100));
        assert!(
            compile_regex(&deep).unwrap_err().contains("nest"),
            "nest limit"
        );
        // Short, but large once compiled.
        assert!(compile_regex(r"\w{1000}\w{1000}").is_err());
        assert_eq!(compile_regex("(").unwrap_err(), "unclosed group");
    }
}
