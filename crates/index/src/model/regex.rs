//! Checking the regexes that objects carry (a ServiceProfile's `pathRegex`, a route's
//! `RegularExpression` matches) within bounds: the index checks their syntax, the webhooks
//! compile them within a time budget ([`check_regex`]). The regex crate limits the compiled
//! program but not what parsing a pattern takes, and one review whose `pathRegex` was `(a|b)*`
//! repeated 240,000 times (1.4 MiB) took a validator to 320 MB. The proxy compiles the same
//! patterns, and real ones are a few hundred bytes.

use std::{
    cell::Cell,
    collections::HashSet,
    sync::{Mutex, OnceLock},
    time::{Duration, Instant},
};

/// The longest pattern compiled, in bytes: 8 KiB.
pub const MAX_REGEX_BYTES: usize = 8 * 1024;

/// How deep groups and repetitions may nest (the regex crate allows 250).
const NEST_LIMIT: u32 = 64;

/// The most memory the compiled program may take, in bytes (the regex crate allows 10 MiB).
const SIZE_LIMIT: usize = 1024 * 1024;

thread_local! {
    /// When [`compile_regex`] stops compiling on this thread, and the budget it was given
    /// ([`with_time_budget`]); `None`: it never does.
    static DEADLINE: Cell<Option<(Instant, Duration)>> = const { Cell::new(None) };
    /// Whether [`compile_regex`] refused a pattern for lack of time within the innermost
    /// [`with_time_budget`] on this thread.
    static RAN_OUT: Cell<bool> = const { Cell::new(false) };
    /// How [`check_regex`] checks on this thread within [`rules_first`]; `None`: as usual.
    static FIRST_PASS: Cell<Option<FirstPass>> = const { Cell::new(None) };
}

/// A pass of [`rules_first`] before patterns are compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FirstPass {
    /// Every pattern passes unchecked: only the object's other rules are judged.
    Unchecked,
    /// Each pattern is checked for what compiling would refuse without compiling it
    /// ([`check_regex_bounds`]).
    Bounds,
}

/// Judges an object in up to three passes, each run only if the one before did not refuse
/// (`refused`), and returns the last verdict: with [`check_regex`] passing every pattern
/// unchecked, then checking each one's bounds ([`check_regex_bounds`]: parsed, not compiled),
/// then as it checks outside this (compiling within a webhook's budget). So an object that
/// breaks a rule is refused for it, not for the time its patterns took before it (a profile
/// of 200 routes like `/\w{20}0` and then one with no condition was denied as out of time,
/// which clients may retry for ever: tester finding), and the passes before compiling take
/// time in proportion to the object's size only, whatever is left of a webhook's budget.
/// Patterns only translating or compiling refuses (too large once compiled, `(?-u:\xFF)`)
/// are found by the third pass alone.
pub fn rules_first<T>(judge: impl Fn() -> T, refused: impl Fn(&T) -> bool) -> T {
    struct Restore(Option<FirstPass>);
    impl Drop for Restore {
        fn drop(&mut self) {
            FIRST_PASS.set(self.0);
        }
    }
    let _restore = Restore(FIRST_PASS.get());
    for pass in [FirstPass::Unchecked, FirstPass::Bounds] {
        FIRST_PASS.set(Some(pass));
        let verdict = judge();
        if refused(&verdict) {
            return verdict;
        }
    }
    FIRST_PASS.set(None);
    judge()
}

/// Runs `judge` with the regexes [`compile_regex`] compiles for it on this thread refused once
/// `budget` has passed since the start, and returns what `judge` returns.
///
/// The webhooks judge each review within such a budget: each pattern's compilation is
/// bounded, but not how many an object holds, and short patterns can compile large (1,000
/// patterns like `/\w{20}0` took 4.6 s to compile in a release build, 84 s for 15,000 in a
/// 953 KB ServiceProfile), which held up every review behind it past the API server's
/// timeout, after which `failurePolicy: Ignore` admits objects unvalidated. A real object
/// compiles its regexes in milliseconds. Within it, [`check_regex`] compiles. The index does
/// not use a budget (whether it serves an object must not depend on the machine's speed), and
/// so does not compile.
pub fn with_time_budget<T>(budget: Duration, judge: impl FnOnce() -> T) -> T {
    /// Puts back the deadline it replaced, also when `judge` panics.
    struct Restore(Option<(Instant, Duration)>, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEADLINE.set(self.0);
            RAN_OUT.set(self.1);
        }
    }
    let _restore = Restore(
        DEADLINE.replace(Some((Instant::now() + budget, budget))),
        RAN_OUT.replace(false),
    );
    judge()
}

/// Whether, within the innermost [`with_time_budget`] running on this thread, [`compile_regex`]
/// has refused a pattern because the budget had passed: what `judge` answered then says only
/// that the object took too long, and it may be judged again with more time (the webhooks'
/// cheap lane, `linkerd_runtime::tls::ReviewWorkers`). `false` outside any budget.
pub fn ran_out_of_time() -> bool {
    RAN_OUT.get()
}

/// Why [`compile_regex`] did not compile a pattern. `Display` is one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegexError {
    /// The pattern is refused: too long, nested too deep, too large once compiled, or not a
    /// regex (`unclosed group`).
    #[error("{0}")]
    Invalid(String),
    /// Not compiled, whatever the pattern: the budget of the caller's [`with_time_budget`] had
    /// passed. Says nothing of this pattern, only that the object's took too long in all.
    #[error(
        "not compiled: the object's regular expressions took more than {} s to compile",
        .0.as_secs_f32()
    )]
    OutOfTime(Duration),
}

/// Checks a regex an object carries as the code running it needs: within a webhook's
/// [`with_time_budget`], compiled ([`compile_regex`]), so that a pattern the proxy could not
/// compile is denied; elsewhere, as the index checks it, its syntax only
/// ([`check_regex_syntax`]).
///
/// The index does not compile because it has no budget: an object whose regexes take seconds
/// to compile would hold up every other update of the index while it is read, and the
/// webhooks admit up to 3 s of them (a Gateway API HTTPRoute of 500 matches like `/\w{20}0`
/// took the policy controller's indexes 5.3 s to read, each time it was written).
pub fn check_regex(pattern: &str) -> Result<(), RegexError> {
    match FIRST_PASS.get() {
        Some(pass) => pass.check(pattern),
        None if DEADLINE.get().is_some() => compile_regex(pattern).map(drop),
        None => check_regex_syntax(pattern),
    }
}

/// [`check_regex`] for a judge that compiles patterns wherever it runs, within a webhook's
/// budget or not (the ServiceProfile validator): in the passes of [`rules_first`] before
/// compiling, as they check; otherwise compiled ([`compile_regex`]).
pub fn check_regex_compiling(pattern: &str) -> Result<(), RegexError> {
    match FIRST_PASS.get() {
        Some(pass) => pass.check(pattern),
        None => compile_regex(pattern).map(drop),
    }
}

impl FirstPass {
    fn check(self, pattern: &str) -> Result<(), RegexError> {
        match self {
            Self::Unchecked => Ok(()),
            Self::Bounds => check_regex_bounds(pattern),
        }
    }
}

/// Runs `check` with [`check_regex`] checking as the index does, even within a webhook's
/// [`with_time_budget`]: what a webhook finds this way is what the index will find (the policy
/// webhook's warning that the policy controller does not serve a route).
pub fn as_the_index<T>(check: impl FnOnce() -> T) -> T {
    struct Restore(Option<(Instant, Duration)>, Option<FirstPass>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEADLINE.set(self.0);
            FIRST_PASS.set(self.1);
        }
    }
    let _restore = Restore(DEADLINE.replace(None), FIRST_PASS.replace(None));
    check()
}

/// Whether `pattern` is a regex at all, without compiling it: at most [`MAX_REGEX_BYTES`] long,
/// nested at most 64 deep, valid syntax for the regex crate (which the proxy compiles it with),
/// and naming only Unicode properties that exist. The refusal reads as [`compile_regex`]'s for
/// the same pattern (`unclosed group`, `Unicode property not found`).
///
/// The index checks regexes with this ([`check_regex`]): the proxy drops a ServiceProfile
/// route whose regex it cannot compile (spec/sp-validator-and-pod.md §a.5), so a pattern only
/// large once compiled is the proxy's to refuse. The pattern is parsed, not translated: its
/// time grows with its length only (about 1 ms for 8 KiB), and each Unicode property it names
/// is looked up once per process (`KnownProperties`), where translating or compiling
/// grows with its classes (1,000 patterns like `/\w{20}0` took the index 4.6 s to compile;
/// one 8 KiB pattern of `(?i)\p{Any}`, 4.7 s to translate), and no other object of the index
/// was updated meanwhile. What only translating finds is not found: a pattern that can match
/// invalid UTF-8 (`(?-u:\xFF)`), which the webhooks deny. Not bounded by [`with_time_budget`].
pub fn check_regex_syntax(pattern: &str) -> Result<(), RegexError> {
    PatternClasses::of(pattern)?.look_up_properties(pattern)
}

/// What [`compile_regex`] refuses without compiling: [`check_regex_syntax`], and at most
/// [`MAX_FOLDED_WIDE_CLASSES`] matched case-insensitively; in the same words. Time in
/// proportion to the pattern's length (about 2 ms for 8 KiB in a release build); not bounded
/// by [`with_time_budget`] (a webhook answers a review judged past its time anyway).
pub fn check_regex_bounds(pattern: &str) -> Result<(), RegexError> {
    let classes = PatternClasses::of(pattern)?;
    classes.within_folded_bound()?;
    classes.look_up_properties(pattern)
}

/// `OutOfTime` once the budget of the caller's [`with_time_budget`] has passed.
fn out_of_time() -> Result<(), RegexError> {
    match DEADLINE.get() {
        Some((deadline, budget)) if Instant::now() >= deadline => {
            RAN_OUT.set(true);
            Err(RegexError::OutOfTime(budget))
        }
        _ => Ok(()),
    }
}

impl PatternClasses {
    /// Looks up each Unicode property of `pattern` (these classes') not yet known.
    fn look_up_properties(self, pattern: &str) -> Result<(), RegexError> {
        // Each property not yet known alone, without the flags around it: case folding a large
        // class is what makes translating slow.
        for (name, span) in self.properties {
            if KnownProperties::contains(&name) {
                continue;
            }
            let text = &pattern[span.start.offset..span.end.offset];
            regex_syntax::Parser::new()
                .parse(text)
                .map_err(|e| invalid(&e))?;
            KnownProperties::insert(name);
        }
        Ok(())
    }

    /// Refuses a pattern of more than [`MAX_FOLDED_WIDE_CLASSES`] matched case-insensitively.
    fn within_folded_bound(&self) -> Result<(), RegexError> {
        if self.folded_wide > MAX_FOLDED_WIDE_CLASSES {
            return Err(RegexError::Invalid(format!(
                "the pattern matches {} wide character classes (Unicode properties, ranges of over {WIDE_RANGE} characters) case-insensitively, more than the {MAX_FOLDED_WIDE_CLASSES} allowed",
                self.folded_wide
            )));
        }
        Ok(())
    }
}

/// The Unicode property names [`check_regex_syntax`] has found to exist in this process, so
/// that each is looked up once, not once per pattern: a lookup builds the property's class
/// (3 µs for `\p{Letter}`), and one pattern can name hundreds of properties, each in several
/// spellings the regex crate reads apart (`\pL`, `\p{Letter}`, `\p{gc=L}`). Only names that
/// exist are kept, and Unicode has finitely many; [`KnownProperties::CAPACITY`] bounds them
/// anyway.
struct KnownProperties;

impl KnownProperties {
    /// The most names kept: 4,096, about 200 KiB.
    const CAPACITY: usize = 4096;

    fn names() -> &'static Mutex<HashSet<PropertyName>> {
        static NAMES: OnceLock<Mutex<HashSet<PropertyName>>> = OnceLock::new();
        NAMES.get_or_init(Default::default)
    }

    fn contains(name: &PropertyName) -> bool {
        // A poisoned set is still a set of names that exist.
        let names = Self::names().lock().unwrap_or_else(|e| e.into_inner());
        names.contains(name)
    }

    fn insert(name: PropertyName) {
        let mut names = Self::names().lock().unwrap_or_else(|e| e.into_inner());
        if names.len() < Self::CAPACITY {
            names.insert(name);
        }
    }
}

/// The most wide character classes (a Unicode property such as `\pL` or `\p{Greek}`, or a
/// range of more than 256 characters) a pattern may match case-insensitively, where `(?i)` or
/// `(?i:...)` turns that on, for [`compile_regex`]: 8. Folding the case of one takes up to 7 ms to compile
/// (`(?i)\p{Any}`), so that one 8 KiB pattern of them took 4.7 s, in the webhooks and in every
/// proxy sent it, where real patterns hold a few, if any; at 16, admissible reviews of one such
/// pattern each (0.13 s) sent 30 a second kept ordinary reviews waiting 5 s (tester finding).
/// `\w`, `\d` and `\s` are not counted: they compile as fast either way; `[\S]`, `[\D]`
/// and `[\W]` in brackets are.
pub const MAX_FOLDED_WIDE_CLASSES: usize = 8;

/// A class range of more characters than this is wide ([`MAX_FOLDED_WIDE_CLASSES`]): 256.
const WIDE_RANGE: u32 = 256;

/// What [`check_regex_syntax`] and [`compile_regex`] read of a pattern's syntax tree.
#[derive(Default)]
struct PatternClasses {
    /// Its Unicode property classes (`\pL`, `\p{Greek}`, `\P{sc=Latin}`) and where the first
    /// spelling of each is, one per property however spelled ([`PropertyName`]).
    properties: Vec<(PropertyName, regex_syntax::ast::Span)>,
    distinct: HashSet<PropertyName>,
    /// Whether case-insensitive matching is on where the visit is, as the regex crate reads
    /// the flags: `(?i)` turns it on to the end of its group, `(?i:...)` within that group,
    /// `(?-i)` off.
    folding: bool,
    /// Whether it was on before each group the visit is in, to be restored at its end.
    outer_folding: Vec<bool>,
    /// Its wide classes matched case-insensitively ([`MAX_FOLDED_WIDE_CLASSES`]), every
    /// occurrence counted.
    folded_wide: usize,
}

impl PatternClasses {
    /// Parses `pattern` (at most [`MAX_REGEX_BYTES`], nested at most 64 deep): time in
    /// proportion to its length.
    fn of(pattern: &str) -> Result<Self, RegexError> {
        check_length(pattern)?;
        let ast = regex_syntax::ast::parse::ParserBuilder::new()
            .nest_limit(NEST_LIMIT)
            .build()
            .parse(pattern)
            .map_err(|e| invalid(&e))?;
        regex_syntax::ast::visit(&ast, Self::default()).map_err(|never| match never {})
    }

    fn property(&mut self, class: &regex_syntax::ast::ClassUnicode) {
        self.wide();
        let name = PropertyName::of(&class.kind);
        if self.distinct.insert(name.clone()) {
            self.properties.push((name, class.span));
        }
    }

    fn wide(&mut self) {
        if self.folding {
            self.folded_wide += 1;
        }
    }

    fn flags(&mut self, flags: &regex_syntax::ast::Flags) {
        if let Some(on) = flags.flag_state(regex_syntax::ast::Flag::CaseInsensitive) {
            self.folding = on;
        }
    }
}

/// A Unicode property's name as the regex crate looks it up, so that each property is looked
/// up once however it is spelled (`\pL`, `\p{l}`, `\p{ L_ }`): loosely, as Unicode's UAX #44
/// (LM3) matches names and the regex crate implements it, ignoring ASCII case, spaces, `_`, `-`
/// and non-ASCII characters, and a leading `is`. The leading `is` is kept apart rather than
/// dropped, so two names are the same here only if the regex crate reads them as one. A
/// tester's 8 KiB pattern of 747 spellings of one property took 3.4 ms to check, looking each
/// up; 0.3 ms now. Negation does not count: `\PL` exists if `\pL` does.
#[derive(Clone, PartialEq, Eq, Hash)]
struct PropertyName {
    name: LooseName,
    /// The value of `\p{sc=Greek}`, `\p{Script:Greek}` or `\p{scx!=Greek}`.
    value: Option<LooseName>,
}

/// One side of a [`PropertyName`]: whether it started with `is` (any case), and the rest
/// lower-cased without spaces, `_`, `-` or non-ASCII characters.
#[derive(Clone, PartialEq, Eq, Hash)]
struct LooseName {
    is_prefixed: bool,
    rest: String,
}

impl PropertyName {
    fn of(kind: &regex_syntax::ast::ClassUnicodeKind) -> Self {
        use regex_syntax::ast::ClassUnicodeKind;
        match kind {
            ClassUnicodeKind::OneLetter(letter) => Self {
                name: LooseName::of(letter.encode_utf8(&mut [0; 4])),
                value: None,
            },
            ClassUnicodeKind::Named(name) => Self {
                name: LooseName::of(name),
                value: None,
            },
            ClassUnicodeKind::NamedValue { name, value, .. } => Self {
                name: LooseName::of(name),
                value: Some(LooseName::of(value)),
            },
        }
    }
}

impl LooseName {
    fn of(name: &str) -> Self {
        let is_prefixed = name
            .get(..2)
            .is_some_and(|start| start.eq_ignore_ascii_case("is"));
        let rest = if is_prefixed { &name[2..] } else { name };
        let rest = rest
            .bytes()
            .filter(|b| b.is_ascii() && !matches!(b, b' ' | b'_' | b'-'))
            .map(|b| char::from(b.to_ascii_lowercase()))
            .collect();
        Self { is_prefixed, rest }
    }
}

impl regex_syntax::ast::Visitor for PatternClasses {
    type Output = Self;
    type Err = std::convert::Infallible;

    fn finish(self) -> Result<Self, Self::Err> {
        Ok(self)
    }

    fn visit_pre(&mut self, ast: &regex_syntax::ast::Ast) -> Result<(), Self::Err> {
        use regex_syntax::ast::{Ast, GroupKind};
        match ast {
            Ast::ClassUnicode(class) => self.property(class),
            Ast::Flags(set) => self.flags(&set.flags),
            Ast::Group(group) => {
                self.outer_folding.push(self.folding);
                if let GroupKind::NonCapturing(flags) = &group.kind {
                    self.flags(flags);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn visit_post(&mut self, ast: &regex_syntax::ast::Ast) -> Result<(), Self::Err> {
        if let regex_syntax::ast::Ast::Group(_) = ast {
            self.folding = self.outer_folding.pop().unwrap_or_default();
        }
        Ok(())
    }

    fn visit_class_set_item_pre(
        &mut self,
        item: &regex_syntax::ast::ClassSetItem,
    ) -> Result<(), Self::Err> {
        use regex_syntax::ast::ClassSetItem;
        match item {
            ClassSetItem::Unicode(class) => self.property(class),
            // A negated Perl class in brackets, `[\S]`, `[\D]`, is folded as the wide class it
            // is (6 ms each, as `\p{Any}`: tester finding); outside brackets it is not.
            ClassSetItem::Perl(perl) if perl.negated => self.wide(),
            ClassSetItem::Range(range)
                if u32::from(range.end.c).saturating_sub(u32::from(range.start.c))
                    >= WIDE_RANGE =>
            {
                self.wide()
            }
            _ => {}
        }
        Ok(())
    }
}

/// A refusal from the regex crate's error (or its syntax crate's), in one line.
fn invalid(error: &dyn std::fmt::Display) -> RegexError {
    RegexError::Invalid(one_line(&error.to_string()))
}

/// `pattern` compiled, or why not in one line (the regex crate's own error renders the
/// pattern over several lines): the pattern is invalid, or it was not compiled because the
/// time budget of the caller's [`with_time_budget`] has passed.
pub fn compile_regex(pattern: &str) -> Result<regex::Regex, RegexError> {
    out_of_time()?;
    PatternClasses::of(pattern)?.within_folded_bound()?;
    regex::RegexBuilder::new(pattern)
        .nest_limit(NEST_LIMIT)
        .size_limit(SIZE_LIMIT)
        .build()
        .map_err(|error| invalid(&error))
}

/// `pattern` compiled as the proxy compiles a route's regex (the regex crate's default limits:
/// 10 MiB compiled, no bound on case-folded classes), after the index's checks of length and
/// nesting, which bound what parsing takes and which no pattern the controllers serve breaks.
/// For tools that predict what the proxy does (`dst-diag explain`): [`compile_regex`]'s 1 MiB
/// made one say the proxy fails a policy with `/\p{L}{200}`, which it compiles (tester
/// finding). Not bounded by [`with_time_budget`]: compiling may take seconds, as in the proxy.
pub fn compile_regex_as_the_proxy(pattern: &str) -> Result<regex::Regex, RegexError> {
    check_length(pattern)?;
    regex::RegexBuilder::new(pattern)
        .nest_limit(NEST_LIMIT)
        .build()
        .map_err(|error| invalid(&error))
}

/// A pattern as a refusal quotes it: in double quotes as written, cut after its first
/// [`QuotedPattern::SHOWN`] bytes when longer, with its length then given
/// (`"(a|b)*(a|b)*..." (12000 bytes)`). So a denial or a log line names the pattern, with the
/// field it is in, without carrying all of an 8 KiB (or, refused for its length, far longer)
/// one.
pub struct QuotedPattern<'a>(pub &'a str);

impl QuotedPattern<'_> {
    /// How much of a pattern is shown, in bytes: 256 (real patterns are shorter).
    pub const SHOWN: usize = 256;
}

impl std::fmt::Display for QuotedPattern<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pattern = self.0;
        if pattern.len() <= Self::SHOWN {
            return write!(f, "\"{pattern}\"");
        }
        let end = pattern.floor_char_boundary(Self::SHOWN);
        write!(f, "\"{}...\" ({} bytes)", &pattern[..end], pattern.len())
    }
}

fn check_length(pattern: &str) -> Result<(), RegexError> {
    if pattern.len() > MAX_REGEX_BYTES {
        return Err(RegexError::Invalid(format!(
            "the pattern is {} bytes long, more than the {MAX_REGEX_BYTES} allowed",
            pattern.len()
        )));
    }
    Ok(())
}

/// The line of the regex crate's error that says what is wrong: it renders the pattern and a
/// caret over several lines first.
fn one_line(text: &str) -> String {
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
            RegexError::Invalid(
                "the pattern is 12000 bytes long, more than the 8192 allowed".into()
            )
        );
        let deep = format!("{}a{}", "(".repeat(100), ")".repeat(100));
        assert!(
            compile_regex(&deep)
                .unwrap_err()
                .to_string()
                .contains("nest"),
            "nest limit"
        );
        // Short, but large once compiled.
        assert!(matches!(
            compile_regex(r"\w{1000}\w{1000}"),
            Err(RegexError::Invalid(_))
        ));
        assert_eq!(
            compile_regex("(").unwrap_err(),
            RegexError::Invalid("unclosed group".into())
        );
    }

    #[test]
    fn long_patterns_are_quoted_in_part() {
        assert_eq!(QuotedPattern(r"/\w+(").to_string(), r#""/\w+(""#);
        let long = "(a|b)*".repeat(2000);
        assert_eq!(
            QuotedPattern(&long).to_string(),
            format!("\"{}(a|b...\" (12000 bytes)", "(a|b)*".repeat(42))
        );
        // Cut where a character starts.
        let wide = "é".repeat(200);
        assert_eq!(
            QuotedPattern(&wide).to_string(),
            format!("\"{}...\" (400 bytes)", "é".repeat(128))
        );
        assert_eq!(
            QuotedPattern(&long[..256]).to_string(),
            format!("\"{}\"", &long[..256])
        );
    }

    #[test]
    fn syntax_is_checked_without_compiling() {
        assert_eq!(check_regex_syntax("/api/v[0-9]+/users/[^/]+"), Ok(()));
        // Large once compiled, which only compiling refuses.
        assert_eq!(check_regex_syntax(r"\w{1000}\w{1000}"), Ok(()));
        assert!(compile_regex(r"\w{1000}\w{1000}").is_err());
        // Refused as compiling refuses it, in the same words.
        for invalid in ["(", r"/\w+(", "[z-a]", "a{2,1}", r"\pX"] {
            assert_eq!(
                check_regex_syntax(invalid),
                compile_regex(invalid).map(drop),
                "{invalid}"
            );
            assert!(check_regex_syntax(invalid).is_err(), "{invalid}");
        }
        assert_eq!(
            check_regex_syntax("("),
            Err(RegexError::Invalid("unclosed group".into()))
        );
        let long = "(a|b)*".repeat(2000);
        assert_eq!(check_regex_syntax(&long), compile_regex(&long).map(drop));
        let deep = format!("{}a{}", "(".repeat(100), ")".repeat(100));
        assert_eq!(check_regex_syntax(&deep), compile_regex(&deep).map(drop));
        // Unicode properties are looked up, in classes too, but not case-folded.
        for pattern in [r"\p{Greek}", r"[\P{sc=Latin}a-z]", r"(?i)\p{Any}{3}"] {
            assert_eq!(check_regex_syntax(pattern), Ok(()), "{pattern}");
        }
        for unknown in [r"\p{Foo}", r"a[b\p{Script=Foo}]", r"\pL\PX"] {
            assert_eq!(
                check_regex_syntax(unknown),
                compile_regex(unknown).map(drop),
                "{unknown}"
            );
        }
        assert_eq!(
            check_regex_syntax(r"\p{Foo}"),
            Err(RegexError::Invalid("Unicode property not found".into()))
        );
        // Only translating finds that a pattern can match invalid UTF-8.
        assert_eq!(check_regex_syntax(r"(?-u:\xFF)"), Ok(()));
        assert!(compile_regex(r"(?-u:\xFF)").is_err());
        // No budget applies: whether a profile is served does not depend on the machine.
        assert_eq!(
            with_time_budget(Duration::ZERO, || check_regex_syntax("/a+")),
            Ok(())
        );
    }

    /// Spellings of one property are looked up once (a tester's 8 KiB pattern of 747 of them
    /// took 3.4 ms to check), only spellings the regex crate reads as one are merged, and a
    /// property found is not looked up again.
    #[test]
    fn each_property_is_looked_up_once_however_spelled() {
        let looked_up = |pattern: &str| PatternClasses::of(pattern).unwrap().properties.len();
        assert_eq!(looked_up(r"\pL\p{L}\p{ l }\p{-L_}\PL[\p{l}]"), 1);
        assert_eq!(
            looked_up(r"\p{Greek}\p{sc=Greek}\p{Script = greek}\p{sc:GREEK}"),
            3
        );
        assert_eq!(looked_up(r"\p{isL}\p{IS_L}\p{ isL}"), 2);
        // Each case of `letter`, then with one of `_`, `-`, ` ` after its first to fourth letter.
        let spellings: String = (0..747)
            .map(|n: usize| {
                let mut name: String = "letter"
                    .chars()
                    .enumerate()
                    .map(|(i, c)| match n >> i & 1 {
                        1 => c.to_ascii_uppercase(),
                        _ => c,
                    })
                    .collect();
                if let Some(k) = (n / 64).checked_sub(1) {
                    name.insert(k / 3 + 1, ['_', '-', ' '][k % 3]);
                }
                format!(r"\p{{{name}}}")
            })
            .collect();
        assert_eq!(spellings.len(), 8153);
        assert_eq!(looked_up(&spellings), 1);
        assert_eq!(check_regex_syntax(&spellings), Ok(()));
        assert!(regex_syntax::Parser::new().parse(&spellings).is_ok());
        // Whether one spelling exists does not vouch for another the regex crate reads apart.
        for pattern in [
            r"\pL\p{Lx}",
            r"\p{isL}\p{ isL}",
            r"\p{isc}\p{c}\p{is c}",
            r"\p{sc=Greek}\p{sc=Greekk}",
            r"\p{Greek}\p{sc=Greek}\p{gc=Greek}",
            r"\p{Lé}\p{L}",
        ] {
            assert_eq!(
                check_regex_syntax(pattern),
                compile_regex(pattern).map(drop),
                "{pattern}"
            );
        }
        assert!(check_regex_syntax(r"\p{Greek}\p{gc=Greek}").is_err());
        // Names found to exist are known from then on, in any spelling; others are not kept.
        assert_eq!(check_regex_syntax(r"\p{Script=Ogham}"), Ok(()));
        let known = |pattern: &str| {
            let classes = PatternClasses::of(pattern).unwrap();
            KnownProperties::contains(&classes.properties[0].0)
        };
        assert!(known(r"\p{script : ogham}"));
        assert!(!known(r"\p{sc=Ogham}"), "looked up alone");
        assert!(check_regex_syntax(r"\p{Oghamm}").is_err());
        assert!(!known(r"\p{Oghamm}"));
    }

    /// Case folding a wide class is slow to compile (up to 7 ms), so a case-insensitive
    /// pattern holds at most 8 of them (tester finding: an 8 KiB `(?i)\p{Any}` repeated took
    /// 4.7 s, holding a webhook's slot); narrow ones, and patterns matching case, are not
    /// counted, and the index does not count (it does not compile).
    #[test]
    fn case_insensitive_patterns_hold_few_wide_classes() {
        let refused = |pattern: &str| {
            let Err(RegexError::Invalid(reason)) = compile_regex(pattern) else {
                panic!("{pattern} compiled");
            };
            assert_eq!(check_regex_syntax(pattern), Ok(()), "{pattern}");
            reason
        };
        assert_eq!(
            refused(&format!("(?i){}", r"\p{Any}".repeat(9))),
            r"the pattern matches 9 wide character classes (Unicode properties, ranges of over 256 characters) case-insensitively, more than the 8 allowed"
        );
        assert!(compile_regex(&format!("(?i){}", r"\p{Any}".repeat(8))).is_ok());
        for wide in [
            r"\PL",
            r"[\x{0}-\x{10FFFF}]",
            r"[a\p{Greek}]",
            r"[\S]{0}",
            r"[\D]",
        ] {
            let reason = refused(&format!("/(?i:x/{})", wide.repeat(9)));
            assert!(reason.contains("matches 9 wide"), "{wide}: {reason}");
        }
        // Only where case-insensitive matching is on, as the regex crate reads the flags
        // (tester finding: a pattern was refused for classes outside its `(?i:...)`).
        let nine = r"\p{Greek}".repeat(9);
        for (pattern, folded) in [
            (format!("(?i:/api)/{nine}"), 0),
            (format!("(?i)/api/(?-i:{nine})"), 0),
            (format!("(?i)/(?-i)api/{nine}"), 0),
            (format!("/(a(?i)b)/{nine}"), 0),
            (format!("/a(?i)b|{nine}"), 9),
            (format!("/(?i)(x|{nine})"), 9),
            (format!("/(?i)x(?-i:y){nine}"), 9),
            (format!("(?i:(?-i:{nine}){nine})"), 9),
        ] {
            let classes = PatternClasses::of(&pattern).unwrap();
            assert_eq!(classes.folded_wide, folded, "{pattern}");
            assert_eq!(compile_regex(&pattern).is_ok(), folded <= 8, "{pattern}");
        }
        // The regex crate's reading of the flags, which the count follows.
        let matches = |pattern: &str, text: &str| compile_regex(pattern).unwrap().is_match(text);
        assert!(
            matches("^(?:a(?i)b|x)$", "X"),
            "to the end of the group, past `|`"
        );
        assert!(!matches("^(a(?i)b)x$", "abX"), "not past the group's end");
        assert!(matches("^(?i)x(?-i:y)z$", "XyZ") && !matches("^(?i)x(?-i:y)z$", "XYZ"));
        // Narrow classes, Perl classes outside brackets, and case matched.
        assert!(compile_regex(&format!("(?i){}", "[a-zA-Z0-9_-]".repeat(40))).is_ok());
        assert!(compile_regex(&format!("(?i){}", r"\S\D\W".repeat(9))).is_ok());
        let timestamp = r"(?i)/reports/\d\d\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d\d\d/\w+\s*";
        assert!(compile_regex(timestamp).is_ok());
        assert!(compile_regex(&r"\p{Greek}".repeat(17)).is_ok());
    }

    /// What the proxy compiles, past the webhooks' bounds, is compiled; the length and nesting
    /// bounds still apply.
    #[test]
    fn patterns_compile_as_the_proxy_compiles_them() {
        let large = r"/\p{L}{200}";
        assert!(compile_regex(large).is_err());
        assert!(regex::Regex::new(large).is_ok());
        assert!(
            compile_regex_as_the_proxy(large)
                .unwrap()
                .is_match(&format!("/{}", "é".repeat(200)))
        );
        let folded = format!("(?i){}", r"\p{Greek}".repeat(9));
        assert!(compile_regex(&folded).is_err());
        assert!(compile_regex_as_the_proxy(&folded).is_ok());
        assert_eq!(
            compile_regex_as_the_proxy("(").unwrap_err(),
            RegexError::Invalid("unclosed group".into())
        );
        let long = "a".repeat(MAX_REGEX_BYTES + 1);
        assert_eq!(
            compile_regex_as_the_proxy(&long).map(drop),
            compile_regex(&long).map(drop)
        );
        assert!(compile_regex_as_the_proxy(r"\w{1000}\w{1000}\w{1000}").is_err());
    }

    #[test]
    fn the_index_checks_syntax_and_a_webhook_compiles() {
        let large = r"\w{1000}\w{1000}";
        assert_eq!(check_regex(large), Ok(()));
        assert_eq!(check_regex("("), compile_regex("(").map(drop));
        let judged = with_time_budget(Duration::from_secs(60), || {
            (
                check_regex(large),
                as_the_index(|| check_regex(large)),
                check_regex(large),
            )
        });
        assert!(
            matches!(judged.0, Err(RegexError::Invalid(_))),
            "{judged:?}"
        );
        assert_eq!(judged.1, Ok(()));
        assert_eq!(judged.2, judged.0, "the budget is back after as_the_index");
        // Out of time within a webhook's budget, but not as the index checks.
        with_time_budget(Duration::ZERO, || {
            assert_eq!(check_regex("a"), Err(RegexError::OutOfTime(Duration::ZERO)));
            assert_eq!(as_the_index(|| check_regex("a")), Ok(()));
        });
    }

    /// An object's other rules are judged before its patterns are checked, and patterns'
    /// bounds before they are compiled (tester findings: a broken rule, or a pattern over the
    /// case-folding bound, after patterns slow to compile was denied as out of time).
    #[test]
    fn rules_are_judged_before_patterns_are_compiled() {
        let passes = |pattern: &str, broken: bool| {
            let seen = std::cell::RefCell::new(Vec::new());
            let verdict = rules_first(
                || {
                    let checked = check_regex(pattern);
                    seen.borrow_mut().push(checked.clone());
                    checked.map_err(|e| e.to_string())?;
                    if broken {
                        Err("broken".to_string())
                    } else {
                        Ok(())
                    }
                },
                Result::is_err,
            );
            (seen.into_inner(), verdict)
        };
        let long = Duration::from_secs(60);
        // Broken: refused in the first pass, even with no time left.
        let (seen, verdict) = with_time_budget(Duration::ZERO, || passes("/a", true));
        assert_eq!((seen, verdict), (vec![Ok(())], Err("broken".to_string())));
        // Over a bound compiling checks first: refused when parsed.
        let folded = format!("(?i){}", r"\p{Greek}".repeat(9));
        let (seen, verdict) = with_time_budget(long, || passes(&folded, false));
        assert_eq!(seen.len(), 2);
        assert!(verdict.unwrap_err().contains("more than the 8 allowed"));
        // Only compiling finds it too large.
        let (seen, verdict) = with_time_budget(long, || passes(r"\w{1000}\w{1000}", false));
        assert_eq!(seen[..2], [Ok(()), Ok(())]);
        assert!(verdict.unwrap_err().contains("size limit"));
        // With no time left, bounds are still checked, and compiling is refused.
        let (seen, _) = with_time_budget(Duration::ZERO, || passes(&folded, false));
        assert!(
            matches!(seen[..], [Ok(()), Err(RegexError::Invalid(_))]),
            "{seen:?}"
        );
        let (seen, _) = with_time_budget(Duration::ZERO, || passes("/a", false));
        assert_eq!(
            seen,
            [Ok(()), Ok(()), Err(RegexError::OutOfTime(Duration::ZERO))]
        );
        // As the index, inside: parsed only; outside, as before.
        let inside = with_time_budget(long, || {
            rules_first(|| as_the_index(|| check_regex(&folded)), Result::is_err)
        });
        assert_eq!(inside, Ok(()));
        assert!(with_time_budget(long, || check_regex(&folded)).is_err());
        assert_eq!(check_regex(&folded), Ok(()));
    }

    #[test]
    fn a_time_budget_refuses_what_comes_after_it() {
        let compiled = with_time_budget(Duration::from_secs(60), || compile_regex("/a+").is_ok());
        assert!(compiled);
        assert!(!ran_out_of_time());
        let (refused, ran_out) = with_time_budget(Duration::ZERO, || {
            assert!(!ran_out_of_time(), "nothing refused yet");
            (compile_regex("/a+").unwrap_err(), ran_out_of_time())
        });
        assert_eq!(refused, RegexError::OutOfTime(Duration::ZERO));
        assert!(ran_out);
        assert!(!ran_out_of_time(), "no budget outside");
        // A pattern compiled, or refused as invalid, within the budget is no lack of time.
        assert!(!with_time_budget(Duration::from_secs(60), || {
            let _ = (compile_regex("/a+"), compile_regex("("));
            ran_out_of_time()
        }));
        assert_eq!(
            refused.to_string(),
            "not compiled: the object's regular expressions took more than 0 s to compile"
        );
        // Out of time says so, also for a pattern that is invalid.
        assert_eq!(
            with_time_budget(Duration::ZERO, || compile_regex("(").unwrap_err()),
            RegexError::OutOfTime(Duration::ZERO)
        );
        // Budgets nest, and the outer one is back afterwards, also after a panic.
        with_time_budget(Duration::ZERO, || {
            assert!(compile_regex("a").is_err());
            assert!(with_time_budget(Duration::from_secs(60), || {
                compile_regex("a").is_ok() && !ran_out_of_time()
            }));
            assert!(ran_out_of_time(), "the outer budget's lack of time is back");
        });
        let panicked = std::panic::catch_unwind(|| {
            with_time_budget(Duration::ZERO, || panic!("judge"));
        });
        assert!(panicked.is_err());
        assert!(compile_regex("a").is_ok(), "no budget outside");
    }
}
