//! One state file read into its manifests: each object's keys, a digest of its definition and
//! its JSON text, without keeping a document tree of the file.
//!
//! A JSON file is compacted as it is read (its blanks between tokens dropped), then split into
//! its objects in place: each object's text is a slice of the compacted file.
//! A YAML document is written as JSON text as it is parsed, one `items` entry after another, so
//! no document tree is built: not of a `kind: List` of thousands of pods (which, freed, would
//! leave the heap fragmented around the decoded objects), not of one pod. Either way, the kinds
//! decode from that text ([`crate::source::KindFeed::decode_json`]), and one digest algorithm
//! serves both formats, so an object defined identically in a YAML and a JSON file is one object.

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::{
    borrow::Cow,
    fmt,
    hash::{BuildHasher, Hash, Hasher},
    path::Path,
};

use super::{Digest, FileError, MAX_NESTING, ObjectKey, TypeKey};

/// One object of a state file.
#[derive(Debug)]
pub struct Manifest<'a> {
    /// `(group, kind)`, from `apiVersion` and `kind`.
    pub type_key: TypeKey,
    /// `(namespace, name)` from `metadata`; namespace `""` when absent.
    pub obj_key: ObjectKey,
    /// Equal for equal definitions, whatever their key order, formatting or file format.
    pub digest: Digest,
    /// The object as JSON: a slice of a JSON file (compacted), re-encoded from a YAML one.
    pub json: Cow<'a, str>,
}

#[cfg(test)]
impl Manifest<'_> {
    /// The object as a document tree, for tests: the kinds decode from the text.
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(&self.json).unwrap_or_default()
    }
}

/// Parses one file into its objects ([`Documents::parse`], then [`Documents::manifests`]),
/// each owning its text.
pub fn parse_manifests(path: &Path, bytes: &[u8]) -> Result<Vec<Manifest<'static>>, FileError> {
    let mut bytes = bytes.to_vec();
    let documents = Documents::parse(path, &mut bytes)?;
    Ok(documents
        .manifests(path)?
        .into_iter()
        .map(|m| Manifest {
            json: Cow::Owned(m.json.into_owned()),
            ..m
        })
        .collect())
}

/// `bytes` as text, past the byte order mark that editors on Windows start UTF-8 files with
/// (kubectl reads past it).
fn utf8_text(bytes: &[u8]) -> Result<&str, FileError> {
    let text = std::str::from_utf8(bytes).map_err(FileError::NotUtf8)?;
    Ok(text.strip_prefix('\u{feff}').unwrap_or(text))
}

/// Whether the file at `path` is read as JSON (else as YAML).
pub(super) fn is_json(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()) == Some("json")
}

/// Why the JSON file at `path`, read again as written and given to `read`, is refused: an
/// error whose line, column or byte index the user can find in it. `None` when it cannot be
/// read or now reads (it changed since, and a notification is on its way).
fn json_error_as_written(
    path: &Path,
    read: impl FnOnce(&str) -> Option<FileError>,
) -> Option<FileError> {
    let mut bytes = Vec::new();
    let bytes = super::read_limited_into(path, &mut bytes).ok()?;
    utf8_text(bytes).map_or_else(Some, read)
}

/// The first error found reading every value of `text` as the kinds read them: what only
/// reading an object finds (a number out of range, a lone surrogate, nesting past 128), with
/// its line counted from the top of the file.
fn first_value_error(text: &str) -> Option<FileError> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Checked>();
    values.find_map(Result::err).map(FileError::Json)
}

/// A JSON value read as the kinds read it (numbers parsed, strings unescaped, nesting counted),
/// and dropped.
struct Checked;

impl<'de> serde::Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Checked)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_entry::<Checked, Checked>()?.is_some() {}
        Ok(Checked)
    }
}

/// The documents of one file, each object's text a slice of the compacted file (JSON) or of
/// the text its YAML document was written into.
pub struct Documents<'a>(Vec<Document<'a>>);

impl<'a> Documents<'a> {
    /// Parses one file: YAML documents or JSON values. A JSON file is compacted in `bytes` first
    /// (its blanks between tokens dropped); the objects' texts are slices of what is left.
    ///
    /// Any syntax error rejects the whole file, so a file is never half-applied; so does
    /// YAML nesting deeper than [`MAX_NESTING`] ([`FileError::TooDeep`]), checked before any
    /// parsing. A JSON syntax error names its line and column in the file as written, read
    /// again from `path` (in the compacted text, when that cannot be).
    pub fn parse(path: &Path, bytes: &'a mut Vec<u8>) -> Result<Self, FileError> {
        if is_json(path) {
            compact_json(bytes);
        }
        Self::parse_read(path, bytes)
    }

    /// [`Self::parse`] of the text [`super::read_state_file`] read into `bytes`: a JSON file
    /// already compacted.
    pub(super) fn parse_read(path: &Path, bytes: &'a [u8]) -> Result<Self, FileError> {
        if is_json(path) {
            // Compacting keeps UTF-8 so and what is not so: the compacted text, two fifths of
            // the file, is the one validated.
            let documents = utf8_text(bytes).and_then(|text| {
                // No scan first: splitting a JSON text into its objects is iterative at any
                // depth, and decoding an object stops at serde_json's recursion limit (128).
                Ok(Self(json_documents(text)?))
            });
            return documents.map_err(|error| {
                json_error_as_written(path, |text| json_documents(text).err()).unwrap_or(error)
            });
        }
        let text = utf8_text(bytes)?;
        if nesting_exceeds(bytes, MAX_NESTING) {
            return Err(FileError::TooDeep { limit: MAX_NESTING });
        }
        Ok(Self(yaml_documents(text)?))
    }

    /// The objects, with `kind: List` expanded. Documents that are not objects, and objects
    /// without `apiVersion`, `kind` or `metadata.name`, are logged (naming `path`) and skipped
    /// alone: one bad entry of a large List must not take the rest of the cluster with it.
    ///
    /// Errors when an object nests deeper than serde_json reads (128 levels): splitting a JSON
    /// file into its objects does not count levels, so this is where such a file is refused.
    pub fn manifests(&self, path: &Path) -> Result<Vec<Manifest<'_>>, FileError> {
        self.manifests_with(path, &mut |_| {})
    }

    /// [`Self::manifests`], calling `nameless` with the `(group, kind)` of each object skipped
    /// because it has `apiVersion` and `kind` but no `metadata.name` string, so that the
    /// caller can count those of the kinds it serves.
    ///
    /// An error of a JSON file names its place in the file as written, as [`Self::parse`]'s do.
    pub fn manifests_with(
        &self,
        path: &Path,
        nameless: &mut dyn FnMut(&TypeKey),
    ) -> Result<Vec<Manifest<'_>>, FileError> {
        self.read_manifests(path, nameless).map_err(|error| {
            if is_json(path) {
                json_error_as_written(path, first_value_error).unwrap_or(error)
            } else {
                error
            }
        })
    }

    fn read_manifests(
        &self,
        path: &Path,
        nameless: &mut dyn FnMut(&TypeKey),
    ) -> Result<Vec<Manifest<'_>>, FileError> {
        let mut manifests = Vec::new();
        for (index, document) in self.0.iter().enumerate() {
            let items: Box<dyn Iterator<Item = &str>> = match document {
                Document::Empty => continue,
                Document::Object(json) => Box::new(std::iter::once(json.as_ref())),
                Document::List(items) => Box::new(items.iter().copied()),
                Document::Buffer { text, ends } => Box::new(
                    std::iter::once(0)
                        .chain(ends.iter().copied())
                        .zip(ends.iter().copied())
                        .map(|(start, end)| &text[start..end]),
                ),
                Document::Summarized(items) => {
                    for (item, (json, summary)) in items.iter().enumerate() {
                        push_manifest(
                            &mut manifests,
                            (path, index, Some(item)),
                            json,
                            summary.clone(),
                            nameless,
                        );
                    }
                    continue;
                }
                Document::NotAnObject => {
                    tracing::warn!(
                        file = %path.display(),
                        document = index + 1,
                        "skipping a document that is not a Kubernetes object (expected a mapping)"
                    );
                    continue;
                }
                Document::BadItems => {
                    tracing::warn!(
                        file = %path.display(),
                        document = index + 1,
                        "skipping a List whose `items` is not a sequence"
                    );
                    continue;
                }
            };
            let in_list = matches!(document, Document::List(_) | Document::Buffer { .. });
            for (item, json) in items.enumerate() {
                // A value that is not an object names nothing: it is skipped alone, unread,
                // however deep it nests. An object too deep refuses the file.
                let summary = if json.starts_with('{') {
                    summarize(json)?
                } else {
                    Err(Unnamed::not_an_object())
                };
                push_manifest(
                    &mut manifests,
                    (path, index, in_list.then_some(item)),
                    json,
                    summary,
                    nameless,
                );
            }
        }
        Ok(manifests)
    }
}

/// Adds the object `json` to `manifests`, or logs why it cannot be named (and tells `nameless`
/// of one that has a kind but no name). `(path, index, item)`: where it is, document `index`'s
/// item `item` (`None`: the document itself) in `path`.
fn push_manifest<'a>(
    manifests: &mut Vec<Manifest<'a>>,
    (path, index, item): (&Path, usize, Option<usize>),
    json: &'a str,
    summary: Summary,
    nameless: &mut dyn FnMut(&TypeKey),
) {
    match summary {
        Ok((type_key, obj_key, digest)) => manifests.push(Manifest {
            type_key,
            obj_key,
            digest,
            json: Cow::Borrowed(json),
        }),
        Err(Unnamed {
            missing,
            kind,
            type_key,
        }) => {
            if let Some(type_key) = &type_key {
                nameless(type_key);
            }
            let kind = kind.as_deref().unwrap_or("<no kind>");
            let problem = if json.starts_with('{') {
                format!(
                    "without a string `{missing}` (an object needs apiVersion, kind and metadata.name)"
                )
            } else {
                "that is not an object".to_string()
            };
            // The item's place is all that names an object without a name.
            match item {
                Some(item) => {
                    tracing::warn!(file = %path.display(), document = index + 1, item = %format_args!("items[{item}]"), %kind, "skipping a List item {problem}")
                }
                None => {
                    tracing::warn!(file = %path.display(), document = index + 1, %kind, "skipping an object {problem}")
                }
            }
        }
    }
}

/// A document of a file, its objects as JSON text.
enum Document<'a> {
    /// `null`, `~` or nothing.
    Empty,
    Object(Cow<'a, str>),
    /// The items of a `kind: List` (or `…List`); an item may be anything, even not an object.
    List(Vec<&'a str>),
    /// The items of a JSON `kind: List`, each with its keys and digest, read in the pass that
    /// split the file ([`json_documents`]).
    Summarized(Vec<(&'a str, Summary)>),
    /// The items of a YAML List, re-encoded as JSON one after another into `text`: item `i`
    /// ends at `ends[i]`. One growing text, not a string per item: the items' trees, freed as
    /// soon as they are encoded, leave no holes pinned by long-lived strings.
    Buffer {
        text: String,
        ends: Vec<usize>,
    },
    /// A scalar or a sequence.
    NotAnObject,
    /// A List whose `items` is neither a sequence nor null.
    BadItems,
}

fn is_list_kind(kind: &str) -> bool {
    kind == "List" || kind.ends_with("List")
}

// === JSON ===

/// The documents of a JSON stream, each object a slice of `text`.
///
/// One pass over the text reads each document's `kind`, and the keys and digest of each of its
/// `items` ([`Document::Summarized`]), which is most of the work of reading a large List.
/// Where that pass cannot tell where an item's text lies (an item that is not an object with
/// a plain first key, a key with escapes after `items`) or fails (an object nested deeper than
/// serde_json reads), the text is read again as before: split first, each object summarized
/// later ([`Documents::manifests`]). Both readings give the same manifests.
fn json_documents(text: &str) -> Result<Vec<Document<'_>>, FileError> {
    match json_documents_summarized(text) {
        Some(documents) => Ok(documents),
        None => json_documents_split(text),
    }
}

/// Drops the blanks between the tokens of the JSON text in `bytes` ([`JsonCompactor`]).
fn compact_json(bytes: &mut Vec<u8>) {
    let mut compact = Vec::with_capacity(bytes.len());
    let mut compactor = JsonCompactor::default();
    compactor.push(bytes, &mut compact);
    *bytes = compact;
}

/// Drops the blanks between the tokens of a JSON text given in pieces of any size, as the file
/// is read.
///
/// `kubectl get -o json` indents by 4 spaces: in a List of injected pods, three bytes in five
/// are blanks, which serde_json skips one byte at a time, in each of the two passes over a
/// file (summarizing it, then decoding its objects). Dropping them in one tight pass first makes
/// both passes shorter, and doing it while the file is read keeps each piece in the CPU's cache
/// between the read and the copy of what is kept. Strings are kept as they are (a quote inside
/// one is escaped), and blanks between two tokens that are neither strings nor punctuation
/// (`1 2`, `true false`) are kept: a text that is not JSON stays not JSON, and one that is
/// reads as the same values. Only ASCII blanks next to ASCII punctuation are dropped, so UTF-8
/// stays UTF-8 and what is not stays not. Blanks at the end of the text are dropped.
#[derive(Debug, Default)]
pub(super) struct JsonCompactor {
    /// Inside a string (or one that never closes): copied as it is up to its closing quote.
    in_string: bool,
    /// Inside a string, the piece before ended with a backslash: the next byte is escaped.
    escaped: bool,
    /// The blanks since the last byte kept, when that byte can end a number or a literal:
    /// they are kept if a byte that can start one follows.
    blanks: Vec<u8>,
    /// Whether the last byte kept can end a number or a literal (`true`, `null`).
    after_word: bool,
}

impl JsonCompactor {
    const fn is_blank(b: u8) -> bool {
        matches!(b, b' ' | b'\t' | b'\n' | b'\r')
    }

    /// A byte that can end or start a number or a literal.
    const fn is_word(b: u8) -> bool {
        !matches!(b, b'{' | b'}' | b'[' | b']' | b':' | b',' | b'"') && !Self::is_blank(b)
    }

    /// Appends what is kept of `piece`, the text's next bytes, to `out`.
    ///
    /// What is kept is copied a run at a time, when a blank ends it: a byte-by-byte copy or one
    /// per token takes twice as long.
    pub(super) fn push(&mut self, piece: &[u8], out: &mut Vec<u8>) {
        // `piece[copied..at]` is kept, not yet copied.
        let (mut copied, mut at) = (0, 0);
        while let Some(&b) = piece.get(at) {
            if self.in_string {
                if std::mem::take(&mut self.escaped) {
                    at += 1;
                    continue;
                }
                // Past the closing quote, or past a backslash, whose byte is skipped next.
                match memchr::memchr2(b'"', b'\\', &piece[at..]) {
                    None => at = piece.len(),
                    Some(found) => {
                        at += found + 1;
                        self.in_string = piece[at - 1] != b'"';
                        self.escaped = self.in_string;
                    }
                }
                continue;
            }
            if !Self::is_blank(b) {
                if !self.blanks.is_empty() {
                    if Self::is_word(b) {
                        out.extend_from_slice(&self.blanks);
                    }
                    self.blanks.clear();
                }
                self.in_string = b == b'"';
                at += 1;
                continue;
            }
            if copied < at {
                out.extend_from_slice(&piece[copied..at]);
                self.after_word = Self::is_word(piece[at - 1]);
            }
            let blanks = at;
            at += 1;
            // Indentation is spaces: 8 bytes at a time, as one word; other blanks one by one.
            loop {
                if let Some(word) = piece
                    .get(at..at + 8)
                    .and_then(|w| <[u8; 8]>::try_from(w).ok())
                {
                    let not_spaces = u64::from_le_bytes(word) ^ u64::from_le_bytes(*b"        ");
                    if not_spaces == 0 {
                        at += 8;
                        continue;
                    }
                    // The spaces before the first other byte.
                    at += (not_spaces.trailing_zeros() / 8) as usize;
                }
                if !piece.get(at).is_some_and(|&b| Self::is_blank(b)) {
                    break;
                }
                at += 1;
            }
            if self.after_word {
                self.blanks.extend_from_slice(&piece[blanks..at]);
            }
            copied = at;
        }
        if let Some(&last) = piece.get(copied..).and_then(<[u8]>::last) {
            out.extend_from_slice(&piece[copied..]);
            self.after_word = !self.in_string && Self::is_word(last);
        }
    }
}

/// [`json_documents`]' single pass; `None` when its result would not be exact.
fn json_documents_summarized(text: &str) -> Option<Vec<Document<'_>>> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Shape<'_, true>>();
    let mut documents = Vec::new();
    loop {
        let start = stream.byte_offset();
        let Some(shape) = stream.next() else {
            break;
        };
        let document = match shape.ok()?.0 {
            JsonShape::Object {
                kind: Some(kind),
                items: Some(JsonItems::Summarized(items)),
                items_end,
            } if is_list_kind(&kind) => {
                let texts = locate_items(text, &items, items_end, stream.byte_offset())?;
                Document::Summarized(
                    texts
                        .into_iter()
                        .zip(items.into_iter().map(|i| i.summary))
                        .collect(),
                )
            }
            shape => document(text, start, stream.byte_offset(), shape),
        };
        documents.push(document);
    }
    Some(documents)
}

/// [`json_documents`]' two passes: the documents, each List's items as texts.
fn json_documents_split(text: &str) -> Result<Vec<Document<'_>>, FileError> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Shape<'_, false>>();
    let mut documents = Vec::new();
    loop {
        let start = stream.byte_offset();
        let Some(shape) = stream.next() else {
            break;
        };
        documents.push(document(text, start, stream.byte_offset(), shape?.0));
    }
    Ok(documents)
}

/// The document `shape` read from `text[start..end]`.
fn document<'a>(text: &'a str, start: usize, end: usize, shape: JsonShape<'a>) -> Document<'a> {
    match shape {
        JsonShape::Null => Document::Empty,
        JsonShape::Other => Document::NotAnObject,
        JsonShape::Object { kind, items, .. } => match (kind, items) {
            (Some(kind), Some(items)) if is_list_kind(&kind) => match items {
                JsonItems::Seq(items) => {
                    Document::List(items.into_iter().map(RawValue::get).collect())
                }
                JsonItems::Null => Document::List(Vec::new()),
                JsonItems::Other => Document::BadItems,
                // Not reached: `json_documents_summarized` places a List's summarized items.
                JsonItems::Summarized(_) => Document::BadItems,
            },
            // The object's own text: from the end of what came before (blanks trimmed)
            // to where the stream stopped.
            _ => Document::Object(Cow::Borrowed(text[start..end].trim_start())),
        },
    }
}

/// The text of each of `items`, the entries of a List's `items` in `text`: an item starts at
/// the `{` before its first key and ends before the next item's `{`, or before `items_end`,
/// with only the separators JSON allows in between; `document_end` is where the List ends.
/// `None` when an item's first key or the end is not known, or what lies between is not
/// exactly those separators.
fn locate_items<'a>(
    text: &'a str,
    items: &[SummarizedItem],
    items_end: ItemsEnd,
    document_end: usize,
) -> Option<Vec<&'a str>> {
    const BLANKS: [char; 4] = [' ', '\t', '\n', '\r'];
    let base = text.as_ptr() as usize;
    let starts = items
        .iter()
        .map(|item| {
            // `{`, blanks, then the key's opening quote.
            let key = item.first_key_at?.checked_sub(base)?;
            let before = text.get(..key)?.strip_suffix('"')?.trim_end_matches(BLANKS);
            Some(before.strip_suffix('{')?.len())
        })
        .collect::<Option<Vec<usize>>>()?;
    // After the last item: `]`, then the next key's opening quote or the end of the List's
    // object.
    let (end, tail): (usize, &[char]) = match items_end {
        ItemsEnd::BeforeKeyAt(key) => (key.checked_sub(base)?.checked_sub(1)?, &[',', ']']),
        ItemsEnd::DocumentEnd => (document_end, &['}', ']']),
        ItemsEnd::Unknown => return None,
    };
    let mut texts = Vec::with_capacity(starts.len());
    for (i, &start) in starts.iter().enumerate() {
        let mut item = text.get(start..starts.get(i + 1).copied().unwrap_or(end))?;
        let separators: &[char] = if i + 1 < starts.len() { &[','] } else { tail };
        for separator in separators {
            item = item.trim_end_matches(BLANKS).strip_suffix(*separator)?;
        }
        let item = item.trim_end_matches(BLANKS);
        if !item.ends_with('}') {
            return None;
        }
        texts.push(item);
    }
    Some(texts)
}

/// A [`JsonShape`] whose List `items` are read as each item's keys and digest
/// ([`JsonItems::Summarized`]) when `SUMMARIZE`, else as each item's text ([`JsonItems::Seq`]).
struct Shape<'a, const SUMMARIZE: bool>(JsonShape<'a>);

/// What [`json_documents`] needs of one JSON document.
enum JsonShape<'a> {
    Null,
    /// `kind` when it is a string; `items` whatever it is. Either given twice counts as its
    /// last value, as for every key of a JSON object (see [`summarize`]), so that an object
    /// reads the same in a List's `items` as on its own.
    Object {
        kind: Option<Cow<'a, str>>,
        items: Option<JsonItems<'a>>,
        /// What follows the last `items`.
        items_end: ItemsEnd,
    },
    /// Any other value.
    Other,
}

/// What follows a document's last `items` value.
#[derive(Clone, Copy)]
enum ItemsEnd {
    /// The end of the document's object.
    DocumentEnd,
    /// The key at this address, lent by the parser from the text.
    BeforeKeyAt(usize),
    /// A key with escapes, which the parser copied.
    Unknown,
}

/// An object's `items`.
enum JsonItems<'a> {
    /// The text of each entry.
    Seq(Vec<&'a RawValue>),
    /// The keys and digest of each entry, and where its first key is.
    Summarized(Vec<SummarizedItem>),
    Null,
    Other,
}

/// One entry of `items`, summarized where it was read.
struct SummarizedItem {
    summary: Summary,
    /// See [`Head::first_key_at`]; `None` for an entry that is not an object.
    first_key_at: Option<usize>,
}

impl<'de, const SUMMARIZE: bool> serde::Deserialize<'de> for Shape<'de, SUMMARIZE> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(JsonShapeVisitor {
                summarize: SUMMARIZE,
            })
            .map(Shape)
    }
}

struct JsonShapeVisitor {
    summarize: bool,
}

impl<'de> Visitor<'de> for JsonShapeVisitor {
    type Value = JsonShape<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(JsonShape::Null)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(JsonShape::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(JsonShape::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(JsonShape::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(JsonShape::Other)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(JsonShape::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(JsonShape::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut kind, mut items) = (None, None);
        let mut items_end = ItemsEnd::DocumentEnd;
        // Whether the last key read was `items`: the next key, if any, ends it.
        let mut after_items = false;
        while let Some(key) = map.next_key_seed(KeyText)? {
            if std::mem::take(&mut after_items) {
                items_end = match &key {
                    Cow::Borrowed(key) => ItemsEnd::BeforeKeyAt(key.as_ptr() as usize),
                    Cow::Owned(_) => ItemsEnd::Unknown,
                };
            }
            match key.as_ref() {
                "kind" => {
                    // Any value; a List only when it is a string.
                    let raw = map.next_value::<&'de RawValue>()?;
                    kind = serde_json::from_str::<Cow<'de, str>>(raw.get()).ok();
                }
                "items" => {
                    items = Some(map.next_value_seed(ItemsSeed {
                        summarize: self.summarize,
                    })?);
                    (items_end, after_items) = (ItemsEnd::DocumentEnd, true);
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(JsonShape::Object {
            kind,
            items,
            items_end,
        })
    }
}

/// Reads a map key, lent from the text when the parser can (`Cow<str>` itself always copies).
struct KeyText;

impl<'de> DeserializeSeed<'de> for KeyText {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyText {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }
}

/// Reads an object's `items` (see [`Shape`]).
struct ItemsSeed {
    summarize: bool,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed {
    type Value = JsonItems<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed {
    type Value = JsonItems<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let capacity = seq.size_hint().unwrap_or(0);
        if !self.summarize {
            let mut items = Vec::with_capacity(capacity);
            while let Some(item) = seq.next_element::<&'de RawValue>()? {
                items.push(item);
            }
            return Ok(JsonItems::Seq(items));
        }
        let mut items = Vec::with_capacity(capacity);
        loop {
            let mut head = Head::default();
            let seed = DigestSeed {
                capture: Capture::Object(&mut head),
            };
            let Some(digest) = seq.next_element_seed(seed)? else {
                break;
            };
            let first_key_at = head.first_key_at;
            items.push(SummarizedItem {
                summary: head.summary(digest),
                first_key_at,
            });
        }
        Ok(JsonItems::Summarized(items))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(JsonItems::Null)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(JsonItems::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(JsonItems::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(JsonItems::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(JsonItems::Other)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(JsonItems::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(JsonItems::Other)
    }
}

// === YAML ===

/// The documents of a multi-document YAML text, each object written as JSON text as it is read
/// ([`JsonText`]): no document tree is built, of a List or of one of its items.
fn yaml_documents(text: &str) -> Result<Vec<Document<'static>>, FileError> {
    let documents: Vec<YamlDocument> = linkerd_k8s_api::yaml::from_documents(text)?;
    Ok(documents.into_iter().map(|d| d.0).collect())
}

/// Writes the value it reads as JSON at the end of its buffer, without building a tree of it:
/// YAML is written straight into the text the kinds decode from. Keys are read as strings, as
/// a `serde_json::Value` reads them (YAML's `1:` is the key `"1"`), and an error is the
/// parser's own, with its line and column.
struct JsonText<'o>(&'o mut Vec<u8>);

impl JsonText<'_> {
    fn write<E: de::Error>(self, value: impl serde::Serialize) -> Result<(), E> {
        serde_json::to_writer(self.0, &value).map_err(E::custom)
    }
}

impl<'de> DeserializeSeed<'de> for JsonText<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JsonText<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        self.0.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.write(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.write(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.write(v)
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<(), E> {
        self.write(v)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<(), E> {
        self.write(v)
    }

    /// A `.nan` or `.inf` is written `null`, as serde_json writes any number JSON cannot hold.
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.write(v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.write(v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push(b'[');
        let mut first = true;
        loop {
            // The separator goes before each element but the first; taken back at the end.
            let mark = self.0.len();
            if !first {
                self.0.push(b',');
            }
            if seq.next_element_seed(JsonText(self.0))?.is_none() {
                self.0.truncate(mark);
                break;
            }
            first = false;
        }
        self.0.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.push(b'{');
        let mut first = true;
        loop {
            let mark = self.0.len();
            if !first {
                self.0.push(b',');
            }
            if map.next_key_seed(JsonKey(self.0))?.is_none() {
                self.0.truncate(mark);
                break;
            }
            self.0.push(b':');
            map.next_value_seed(JsonText(self.0))?;
            first = false;
        }
        self.0.push(b'}');
        Ok(())
    }
}

/// Writes a map key as a JSON string ([`JsonText`]).
struct JsonKey<'o>(&'o mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for JsonKey<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for JsonKey<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        JsonText(self.0).write(v)
    }
}

struct YamlDocument(Document<'static>);

impl<'de> serde::Deserialize<'de> for YamlDocument {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(YamlDocumentVisitor)
            .map(YamlDocument)
    }
}

struct YamlDocumentVisitor;

impl<'de> Visitor<'de> for YamlDocumentVisitor {
    type Value = Document<'static>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML document")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Document::Empty)
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Document::Empty)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Document::NotAnObject)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Document::NotAnObject)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Document::NotAnObject)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Document::NotAnObject)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Document::NotAnObject)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Document::NotAnObject)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // The fields but `items`, as the text of a JSON object still open; `items` waits for
        // `kind`, which may come after it, to tell whether this is a List.
        let mut object = vec![b'{'];
        // A set: a document may have any number of fields.
        let mut keys = std::collections::HashSet::new();
        let mut kind = None;
        let mut items = None;
        while let Some(key) = map.next_key::<String>()? {
            if keys.contains(&key) {
                return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
            }
            if key == "items" {
                items = Some(map.next_value::<YamlItems>()?);
            } else {
                if object.len() > 1 {
                    object.push(b',');
                }
                serde_json::to_writer(&mut object, &key).map_err(de::Error::custom)?;
                object.push(b':');
                let value = object.len();
                map.next_value_seed(JsonText(&mut object))?;
                if key == "kind" {
                    kind = serde_json::from_slice::<String>(&object[value..]).ok();
                }
            }
            keys.insert(key);
        }
        let list = kind.as_deref().is_some_and(is_list_kind);
        Ok(match items {
            Some(YamlItems::Json { text, ends }) if list => Document::Buffer { text, ends },
            Some(YamlItems::Null) if list => Document::List(Vec::new()),
            Some(YamlItems::Other(_)) if list => Document::BadItems,
            // An object with a field named `items`: put it back as it was.
            items => {
                if let Some(items) = items {
                    if object.len() > 1 {
                        object.push(b',');
                    }
                    object.extend_from_slice(b"\"items\":");
                    items.write_json(&mut object);
                }
                object.push(b'}');
                let object = String::from_utf8(object).map_err(de::Error::custom)?;
                Document::Object(Cow::Owned(object))
            }
        })
    }
}

/// A document's `items`: the entries as JSON texts, one after another, when it is a sequence.
enum YamlItems {
    Json {
        text: String,
        ends: Vec<usize>,
    },
    Null,
    /// Not a sequence: the value as JSON text.
    Other(Vec<u8>),
}

impl YamlItems {
    /// Writes `items` as JSON at the end of `out`.
    fn write_json(self, out: &mut Vec<u8>) {
        match self {
            YamlItems::Json { text, ends } => {
                out.push(b'[');
                let starts = std::iter::once(0).chain(ends.iter().copied());
                for (i, (start, end)) in starts.zip(ends.iter().copied()).enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(&text.as_bytes()[start..end]);
                }
                out.push(b']');
            }
            YamlItems::Null => out.extend_from_slice(b"null"),
            YamlItems::Other(json) => out.extend_from_slice(&json),
        }
    }
}

impl<'de> serde::Deserialize<'de> for YamlItems {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ItemsVisitor;
        impl ItemsVisitor {
            fn other<E: de::Error>(value: impl serde::Serialize) -> Result<YamlItems, E> {
                serde_json::to_vec(&value)
                    .map(YamlItems::Other)
                    .map_err(E::custom)
            }
        }
        impl<'de> Visitor<'de> for ItemsVisitor {
            type Value = YamlItems;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sequence of objects")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<YamlItems, A::Error> {
                let mut text = Vec::new();
                let mut ends = Vec::new();
                while seq.next_element_seed(JsonText(&mut text))?.is_some() {
                    ends.push(text.len());
                }
                let text = String::from_utf8(text).map_err(de::Error::custom)?;
                Ok(YamlItems::Json { text, ends })
            }

            fn visit_unit<E>(self) -> Result<YamlItems, E> {
                Ok(YamlItems::Null)
            }

            fn visit_none<E>(self) -> Result<YamlItems, E> {
                Ok(YamlItems::Null)
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<YamlItems, A::Error> {
                let mut json = Vec::new();
                JsonText(&mut json).deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(YamlItems::Other(json))
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<YamlItems, E> {
                Self::other(v)
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<YamlItems, E> {
                Self::other(v)
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<YamlItems, E> {
                Self::other(v)
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<YamlItems, E> {
                Self::other(v)
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<YamlItems, E> {
                Self::other(v)
            }
        }
        deserializer.deserialize_any(ItemsVisitor)
    }
}

// === keys and digest ===

/// An object's keys and digest ([`summarize`]), or why it cannot be named.
type Summary = Result<(TypeKey, ObjectKey, Digest), Unnamed>;

/// The keys and digest of one object's JSON text, in one pass over it; [`Unnamed`] when it is
/// not an object with `apiVersion`, `kind` and `metadata.name` strings. Errors only when the
/// text nests deeper than serde_json reads.
fn summarize(json: &str) -> Result<Summary, serde_json::Error> {
    let mut head = Head::default();
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let digest = DigestSeed {
        capture: Capture::Object(&mut head),
    }
    .deserialize(&mut deserializer)?;
    Ok(head.summary(digest))
}

/// The group of `apiVersion` (`""` for the core group's `v1`).
fn group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// An object that cannot be named: the first of `apiVersion`, `kind`, `metadata.name` that it
/// lacks (or that is not a string), and its `kind` if it has one.
#[derive(Clone, Debug)]
struct Unnamed {
    missing: &'static str,
    kind: Option<String>,
    /// `(group, kind)` when both `apiVersion` and `kind` are strings (only the name lacks).
    type_key: Option<TypeKey>,
}

impl Unnamed {
    /// A value that is not an object: it lacks `apiVersion` first, as [`summarize`] finds.
    fn not_an_object() -> Self {
        Self {
            missing: "apiVersion",
            kind: None,
            type_key: None,
        }
    }
}

/// The fields of an object that name it.
#[derive(Default)]
struct Head {
    api_version: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    /// The address of the object's first key when the parser lent it from the text (no
    /// escapes): where [`json_documents`] finds the object's text.
    first_key_at: Option<usize>,
}

impl Head {
    /// The object's keys and `digest`, or what it lacks to be named.
    fn summary(self, digest: Digest) -> Summary {
        let Head {
            api_version: Some(api_version),
            kind: Some(kind),
            name: Some(name),
            namespace,
            ..
        } = self
        else {
            let missing = match &self {
                Head {
                    api_version: None, ..
                } => "apiVersion",
                Head { kind: None, .. } => "kind",
                _ => "metadata.name",
            };
            let type_key = match (&self.api_version, &self.kind) {
                (Some(api_version), Some(kind)) => {
                    Some((group(api_version).to_string(), kind.clone()))
                }
                _ => None,
            };
            return Err(Unnamed {
                missing,
                kind: self.kind,
                type_key,
            });
        };
        Ok((
            (group(&api_version).to_string(), kind),
            (namespace.unwrap_or_default(), name),
            digest,
        ))
    }
}

/// What a [`DigestSeed`] records of the value it digests, besides the digest.
enum Capture<'h> {
    Nothing,
    /// The top-level object: its `apiVersion`, `kind`, and `metadata`.
    Object(&'h mut Head),
    /// `metadata`: its `name` and `namespace`.
    Metadata(&'h mut Head),
    /// A string field of the head.
    String(&'h mut Option<String>),
}

/// Digests a value: scalars by type and value, sequences in order, maps by the sum of their
/// entries' digests, so that key order (which YAML, JSON and kubectl versions do not keep the
/// same) does not matter. Not cryptographic: it tells versions of a file's objects apart.
struct DigestSeed<'h> {
    capture: Capture<'h>,
}

/// Tags keep values of different types apart (`"1"` and `1`, `[]` and `{}`).
#[derive(Hash)]
enum Tag {
    Null,
    Bool,
    Int,
    Uint,
    Float,
    Str,
    Seq,
    Map,
    Entry,
}

fn hasher() -> impl Hasher {
    foldhash::fast::FixedState::with_seed(0x6c69_6e6b_6572_6421).build_hasher()
}

/// A hash of a file's text as read ([`super::read_state_file`]), to tell a changed file from
/// one rewritten identically. A JSON file is hashed compacted: a change of blanks between its
/// tokens alone changes none of its objects, and is no change. But an empty file, whose
/// objects are kept as it is probably being written, is never the same as a file of blanks,
/// which compacts to nothing too and holds no objects: `empty` (the file is 0 bytes as
/// written) is hashed with the text.
pub(super) fn content_hash(bytes: &[u8], empty: bool) -> u64 {
    let mut h = hasher();
    bytes.hash(&mut h);
    empty.hash(&mut h);
    h.finish()
}

fn digest_of(tag: Tag, value: impl Hash) -> Digest {
    let mut h = hasher();
    tag.hash(&mut h);
    value.hash(&mut h);
    h.finish()
}

impl<'de> DeserializeSeed<'de> for DigestSeed<'_> {
    type Value = Digest;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Digest, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DigestSeed<'_> {
    type Value = Digest;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Digest, E> {
        Ok(digest_of(Tag::Null, ()))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Digest, E> {
        Ok(digest_of(Tag::Bool, v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Digest, E> {
        // serde_json reads every non-negative integer as a u64.
        Ok(match u64::try_from(v) {
            Ok(v) => digest_of(Tag::Uint, v),
            Err(_) => digest_of(Tag::Int, v),
        })
    }

    fn visit_u64<E>(self, v: u64) -> Result<Digest, E> {
        Ok(digest_of(Tag::Uint, v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Digest, E> {
        Ok(digest_of(Tag::Float, v.to_bits()))
    }

    fn visit_str<E>(self, v: &str) -> Result<Digest, E> {
        if let Capture::String(slot) = self.capture {
            *slot = Some(v.to_string());
        }
        Ok(digest_of(Tag::Str, v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Digest, A::Error> {
        let mut h = hasher();
        Tag::Seq.hash(&mut h);
        while let Some(item) = seq.next_element_seed(DigestSeed {
            capture: Capture::Nothing,
        })? {
            h.write_u64(item);
        }
        Ok(h.finish())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Digest, A::Error> {
        let (mut head, object) = match self.capture {
            Capture::Object(head) => (Some(head), true),
            Capture::Metadata(head) => (Some(head), false),
            _ => (None, false),
        };
        let (mut sum, mut len) = (0u64, 0u64);
        let mut entries = MapEntries::default();
        while let Some((key, field, at)) = map.next_key_seed(KeySeed)? {
            if len == 0
                && object
                && let Some(h) = head.as_deref_mut()
            {
                h.first_key_at = at;
            }
            // A key given twice in a JSON object (YAML refuses that) counts as its last value,
            // as serde_json's and Go's decoders read it: each head field is cleared when its key
            // comes, so that the object is named from what the kinds decode, not partly from an
            // earlier `metadata`.
            let capture = match (head.as_deref_mut(), object, field) {
                (Some(h), true, Field::ApiVersion) => Capture::String(cleared(&mut h.api_version)),
                (Some(h), true, Field::Kind) => Capture::String(cleared(&mut h.kind)),
                (Some(h), true, Field::Metadata) => {
                    h.name = None;
                    h.namespace = None;
                    Capture::Metadata(h)
                }
                (Some(h), false, Field::Name) => Capture::String(cleared(&mut h.name)),
                (Some(h), false, Field::Namespace) => Capture::String(cleared(&mut h.namespace)),
                _ => Capture::Nothing,
            };
            let value = map.next_value_seed(DigestSeed { capture })?;
            let mut h = hasher();
            Tag::Entry.hash(&mut h);
            h.write_u64(key);
            h.write_u64(value);
            let entry = h.finish();
            sum = sum.wrapping_add(entry);
            match entries.replace(key, entry) {
                // The key's earlier value no longer counts: the map digests as its last value
                // alone, as it decodes (tester finding: `{"k":A,"k":B}` and `{"k":B,"k":A}`
                // digested the same, so swapping them was no change and no conflict).
                Some(earlier) => sum = sum.wrapping_sub(earlier),
                None => len += 1,
            }
        }
        let mut h = hasher();
        Tag::Map.hash(&mut h);
        h.write_u64(len);
        h.write_u64(sum);
        Ok(h.finish())
    }
}

/// The entries of one map being digested, by key digest: what tells a key given twice.
/// Objects' maps are mostly small, so the first few are kept inline and scanned; a larger map
/// spills into a hash map.
#[derive(Default)]
struct MapEntries {
    inline: [(Digest, Digest); MapEntries::INLINE],
    len: usize,
    spilled: Option<foldhash::HashMap<Digest, Digest>>,
}

impl MapEntries {
    const INLINE: usize = 16;

    /// Records `entry` for `key`; returns the entry it replaces, if the key came before.
    fn replace(&mut self, key: Digest, entry: Digest) -> Option<Digest> {
        if let Some(spilled) = &mut self.spilled {
            return spilled.insert(key, entry);
        }
        let inline = &mut self.inline[..self.len];
        if let Some(slot) = inline.iter_mut().find(|(k, _)| *k == key) {
            return Some(std::mem::replace(&mut slot.1, entry));
        }
        if self.len < Self::INLINE {
            self.inline[self.len] = (key, entry);
            self.len += 1;
        } else {
            let mut spilled: foldhash::HashMap<Digest, Digest> =
                self.inline.iter().copied().collect();
            spilled.insert(key, entry);
            self.spilled = Some(spilled);
        }
        None
    }
}

/// `slot`, emptied.
fn cleared(slot: &mut Option<String>) -> &mut Option<String> {
    *slot = None;
    slot
}

/// The keys a [`DigestSeed`] records.
#[derive(Clone, Copy)]
enum Field {
    ApiVersion,
    Kind,
    Metadata,
    Name,
    Namespace,
    Other,
}

/// Reads a map key: its digest, which field it is, and its address when the parser lent it
/// from the text.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = (Digest, Field, Option<usize>);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = (Digest, Field, Option<usize>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        let (digest, field, _) = self.visit_str::<E>(v)?;
        Ok((digest, field, Some(v.as_ptr() as usize)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        let field = match v {
            "apiVersion" => Field::ApiVersion,
            "kind" => Field::Kind,
            "metadata" => Field::Metadata,
            "name" => Field::Name,
            "namespace" => Field::Namespace,
            _ => Field::Other,
        };
        Ok((digest_of(Tag::Str, v), field, None))
    }
}

// === nesting ===

/// Whether `[` / `{` nest deeper than `limit` in `bytes`, outside quoted strings and comments.
///
/// A linear scan that over-counts rather than under-counts: brackets inside plain or block
/// scalars count too (manifests nest a dozen levels, the limit is far above). A quote opens a
/// string only where YAML starts a quoted scalar, so `it's` opens none.
pub(super) fn nesting_exceeds(bytes: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut i = 0;
    // Where YAML starts a quoted scalar: at a line's start or after an indicator, blanks
    // between; a quote inside a plain scalar (`5" screen`) opens nothing.
    let token_start = |i: usize| {
        let mut j = i;
        while j > 0 && matches!(bytes[j - 1], b' ' | b'\t') {
            j -= 1;
        }
        j == 0
            || matches!(
                bytes[j - 1],
                b'\n' | b'\r' | b'[' | b'{' | b',' | b':' | b'-' | b'?'
            )
    };
    while i < bytes.len() {
        match bytes[i] {
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'"' if token_start(i) => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            // `''` inside a single-quoted string reads as a close and an open: same result.
            b'\'' if token_start(i) => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'\'' {
                    i += 1;
                }
            }
            b'#' if i == 0 || matches!(bytes[i - 1], b' ' | b'\t' | b'\n' | b'\r') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    type Read = Vec<(TypeKey, ObjectKey, Digest, String)>;

    fn read(documents: Vec<Document<'_>>) -> Read {
        Documents(documents)
            .manifests(Path::new("x.json"))
            .unwrap()
            .into_iter()
            .map(|m| (m.type_key, m.obj_key, m.digest, m.json.into_owned()))
            .collect()
    }

    fn svc(name: &str) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"ports":[{{"port":80}}],"note":"}}], \"x\","}}}}"#
        )
    }

    /// A key given twice in a JSON object digests as its last value, as the object decodes:
    /// the same values in the other order are another definition, and a repeat of the same
    /// value is none (tester finding: `{"k":A,"k":B}` and `{"k":B,"k":A}` digested the same,
    /// so swapping them in a running pod's file changed nothing served). Maps past the inline
    /// entries are checked too.
    #[test]
    fn a_repeated_key_digests_as_its_last_value() {
        let digest = |spec: &str| {
            let json = format!(
                r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"a","namespace":"n"}},"spec":{spec}}}"#
            );
            summarize(&json).unwrap().unwrap().2
        };
        let many: String = (0..40).map(|i| format!(r#""k{i}":{i},"#)).collect();
        for (first, second) in [("", ""), (many.as_str(), ""), ("", many.as_str())] {
            let ab = digest(&format!(r#"{{{first}"k":1,{second}"k":2}}"#));
            let ba = digest(&format!(r#"{{{first}"k":2,{second}"k":1}}"#));
            let b = digest(&format!(r#"{{{first}{second}"k":2}}"#));
            let a = digest(&format!(r#"{{{first}{second}"k":1}}"#));
            assert_ne!(ab, ba, "{first}|{second}");
            assert_eq!(ab, b, "{first}|{second}");
            assert_eq!(ba, a, "{first}|{second}");
        }
        // A key repeated with its value: the map is the same as with the key once.
        assert_eq!(digest(r#"{"port":80,"port":80}"#), digest(r#"{"port":80}"#));
        // Key order still does not matter.
        assert_eq!(digest(r#"{"a":1,"b":2}"#), digest(r#"{"b":2,"a":1}"#));
    }

    /// The single pass reads a List as the two passes do: the same objects, texts and digests.
    #[test]
    fn one_pass_and_two_passes_read_the_same_lists() {
        let (a, b, c) = (svc("a"), svc("b"), svc("c"));
        let pretty = serde_json::to_string_pretty(
            &serde_json::from_str::<Value>(&format!(
                r#"{{"apiVersion":"v1","items":[{a},{b}],"kind":"List","metadata":{{"resourceVersion":""}}}}"#
            ))
            .unwrap(),
        )
        .unwrap();
        let unnamed = r#"{"apiVersion":"v1","kind":"Service","metadata":{}}"#;
        for text in [
            // As kubectl prints it: `kind` and `metadata` after `items`.
            pretty,
            // `items` last, blanks everywhere JSON allows them.
            format!("{{\"kind\":\"List\" , \"items\" :\n[ {a} ,\n\t{b}\r\n ] \n}}"),
            // Several documents, an object on its own among them, and an empty List.
            format!(
                r#"{c} {{"kind":"ServiceList","items":[{a}],"x":1}}{{"kind":"List","items":[]}}{{"kind":"List","items":null}}"#
            ),
            // `items` twice: the last one counts.
            format!(r#"{{"kind":"List","items":[{a}],"items":[{b},{c}]}}"#),
            // An item that cannot be named is kept as a summary, and skipped alike.
            format!(r#"{{"kind":"List","items":[{unnamed},{a}]}}"#),
            // Not a List: `items` is any field.
            format!(
                r#"{{"apiVersion":"v1","kind":"Thing","metadata":{{"name":"t"}},"items":[{a}]}}"#
            ),
        ] {
            let summarized = json_documents_summarized(&text).expect(&text);
            let split = json_documents_split(&text).unwrap();
            let (one, two) = (read(summarized), read(split));
            assert!(!one.is_empty(), "{text}");
            assert_eq!(one, two, "{text}");
            for (_, _, _, json) in &one {
                assert!(json.starts_with('{') && json.ends_with('}'), "{json}");
            }
        }
    }

    /// Where the single pass cannot place an item, the file is read in two passes.
    #[test]
    fn what_one_pass_cannot_place_is_read_in_two() {
        let a = svc("a");
        for text in [
            // A first key with an escape: the parser copies it.
            format!(
                r#"{{"kind":"List","items":[{{"\u0061piVersion":"v1","kind":"Service","metadata":{{"name":"e"}}}},{a}]}}"#
            ),
            // An item that is not an object, an empty object.
            format!(r#"{{"kind":"List","items":[1,{a}]}}"#),
            format!(r#"{{"kind":"List","items":[{a},{{}}]}}"#),
            // A key with an escape after `items`.
            format!(r#"{{"items":[{a}],"\u006bind":"List"}}"#),
        ] {
            assert!(json_documents_summarized(&text).is_none(), "{text}");
            let documents = json_documents(&text).unwrap();
            assert_eq!(read(documents), read(json_documents_split(&text).unwrap()));
        }
        // An item nested deeper than serde_json reads within the List, not on its own.
        let deep = format!(
            r#"{{"kind":"List","items":[{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"d"}},"x":{}1{}}}]}}"#,
            "[".repeat(125),
            "]".repeat(125)
        );
        assert!(json_documents_summarized(&deep).is_none());
        let read_deep = read(json_documents(&deep).unwrap());
        assert_eq!(read_deep.len(), 1);
        assert_eq!(read_deep[0].1.1, "d");
    }

    fn compacted(text: &str) -> String {
        let mut bytes = text.as_bytes().to_vec();
        compact_json(&mut bytes);
        assert_eq!(compacted_in_pieces(text.as_bytes(), 1), bytes);
        String::from_utf8(bytes).unwrap()
    }

    /// `text` compacted as a file read `piece` bytes at a time.
    fn compacted_in_pieces(text: &[u8], piece: usize) -> Vec<u8> {
        let mut compactor = JsonCompactor::default();
        let mut out = Vec::new();
        for piece in text.chunks(piece) {
            compactor.push(piece, &mut out);
        }
        out
    }

    /// A file is compacted as it is read: where the reads split it changes nothing, be it in a
    /// string, an escape, a run of indentation or between two words.
    #[test]
    fn compacting_in_pieces_is_compacting_the_whole() {
        let pretty = serde_json::to_string_pretty(&serde_json::json!({
            "kind": "List",
            "items": [serde_json::from_str::<Value>(&svc("a")).unwrap()],
            "n": [1, 2.5, true, null, "say \"hi\"\\", "caf\u{e9}"],
        }))
        .unwrap();
        let texts = [
            pretty.as_str(),
            "[1            \t 2]",
            "[ true\n\tfalse , \"a\\\\\" b\" ]",
            "{\"a\": \"escape at the end\\",
            "{\"a\": \"open  ",
        ];
        for text in texts {
            let mut whole = text.as_bytes().to_vec();
            compact_json(&mut whole);
            for piece in 1..=text.len() {
                assert_eq!(
                    compacted_in_pieces(text.as_bytes(), piece),
                    whole,
                    "{text:?} in pieces of {piece}"
                );
            }
        }
    }

    /// Blanks between tokens go; strings, escapes included, stay as written.
    #[test]
    fn compacting_drops_only_the_blanks_between_tokens() {
        let text = "\u{20}{\n    \"a b\": \"x \\\" y\\\\\" ,\r\n\t\"n\" : [ 1 , -2.5e3 , true , null ] ,\
                    \n        \"caf\u{e9}\": { \"\u{fc}\" : \"\" }\n}\n  ";
        let compact = compacted(text);
        assert_eq!(
            compact,
            "{\"a b\":\"x \\\" y\\\\\",\"n\":[1,-2.5e3,true,null],\"caf\u{e9}\":{\"\u{fc}\":\"\"}}"
        );
        assert_eq!(
            serde_json::from_str::<Value>(&compact).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        // As kubectl prints a List: indented by 4 spaces, several documents in a row.
        let pretty = serde_json::to_string_pretty(&serde_json::json!({
            "kind": "List",
            "items": [serde_json::from_str::<Value>(&svc("a")).unwrap()],
        }))
        .unwrap();
        let twice = format!("{pretty}\n{pretty}");
        let expected =
            serde_json::to_string(&serde_json::from_str::<Value>(&pretty).unwrap()).unwrap();
        assert_eq!(compacted(&twice), format!("{expected}{expected}"));
    }

    /// Blanks that separate two tokens are kept, so that what is not JSON stays so: `[1 2]`
    /// must not read as `[12]`. A string that never closes is copied to the end.
    #[test]
    fn compacting_keeps_what_is_not_json_so() {
        for (text, compact) in [
            ("[1 2]", "[1 2]"),
            ("[1            \t 2]", "[1            \t 2]"),
            ("[1,\n                    \t  \r\n         2 ]", "[1,2]"),
            ("[ true\n\tfalse ]", "[true\n\tfalse]"),
            ("{\"a\": tr ue}", "{\"a\":tr ue}"),
            ("{\"a\": 1 \"b\"}", "{\"a\":1\"b\"}"),
            ("{\"a\": \"open  ", "{\"a\":\"open  "),
            (
                "{\"a\": \"escape at the end\\",
                "{\"a\":\"escape at the end\\",
            ),
            ("", ""),
            (" \n ", ""),
        ] {
            assert_eq!(compacted(text), compact, "{text:?}");
            assert_eq!(
                serde_json::from_str::<Value>(compact).is_ok(),
                serde_json::from_str::<Value>(text).is_ok(),
                "{text:?}"
            );
        }
    }

    /// Every text of up to 5 bytes over JSON's punctuation, blanks, a quote, an escape, a digit
    /// and a letter: it reads as the same values compacted, or fails either way.
    #[test]
    fn compacting_changes_no_short_text_s_reading() {
        fn read(text: &[u8]) -> Option<Vec<Value>> {
            let values = serde_json::Deserializer::from_slice(text).into_iter::<Value>();
            values.collect::<Result<_, _>>().ok()
        }
        let alphabet = b" \n\"\\1e{}[]:,";
        let mut texts: Vec<Vec<u8>> = vec![Vec::new()];
        let mut checked = 0;
        for _ in 0..5 {
            texts = texts
                .iter()
                .flat_map(|t| alphabet.iter().map(move |&b| [&t[..], &[b]].concat()))
                .collect();
            for text in &texts {
                let mut compact = text.clone();
                compact_json(&mut compact);
                assert_eq!(compacted_in_pieces(text, 1), compact);
                assert_eq!(compacted_in_pieces(text, 2), compact);
                assert_eq!(
                    read(&compact),
                    read(text),
                    "{:?}",
                    String::from_utf8_lossy(text)
                );
                checked += 1;
            }
        }
        assert_eq!(
            checked,
            (1..=5).map(|n| alphabet.len().pow(n)).sum::<usize>()
        );
    }

    /// A syntax error names its place in the file as written, not in the compacted text: the
    /// line and column of JSON, the byte index of what is not UTF-8. Without the file, the
    /// error is still one, with its place in the compacted text.
    #[test]
    fn an_error_names_its_place_in_the_file_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        for (text, written, compact) in [
            (
                &b"{\n    \"kind\": \"List\",\n    \"items\": [\n        {\"a\": 1,}\n    ]\n}\n"[..],
                "invalid JSON: key must be a string at line 4 column 17",
                "invalid JSON: key must be a string at line 1 column 32",
            ),
            (
                &b"{\n    \"kind\": \"caf\xe9\"\n}\n"[..],
                "not UTF-8: invalid utf-8 sequence of 1 bytes from index 18",
                "not UTF-8: invalid utf-8 sequence of 1 bytes from index 12",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let Err(error) = Documents::parse(&path, &mut text.to_vec()) else {
                panic!("not JSON");
            };
            assert_eq!(error.to_string(), written);
            let Err(error) = Documents::parse(Path::new("gone.json"), &mut text.to_vec()) else {
                panic!("not JSON");
            };
            assert_eq!(error.to_string(), compact);
        }
        // What only reading an object finds: a number out of range, a lone surrogate, nesting
        // deeper than serde_json reads.
        let object = |field: &str| {
            format!(
                "{{\n    \"apiVersion\": \"v1\",\n    \"kind\": \"Service\",\n    \"metadata\": {{\n        \
                 \"name\": \"a\"\n    }},\n    \"spec\": {{\n        \"x\": {field}\n    }}\n}}\n"
            )
        };
        let deep = format!("{}1{}", "[".repeat(140), "]".repeat(140));
        for (field, message, column) in [
            ("1e400", "number out of range", 18),
            (r#""\udc00""#, "lone leading surrogate in hex escape", 20),
            (&deep, "recursion limit exceeded", 139),
        ] {
            let text = object(field);
            // Alone, as the second document three lines down, as an item of a List four lines
            // down: the line counts from the top of the file.
            let second = format!(
                "{{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{{\"name\":\"b\"}}}}\n\n{text}"
            );
            let item = format!("{{\n\"kind\": \"List\",\n\"items\": [\n{text}]}}");
            // Nesting is counted from the top of the file: in a List, two levels sooner.
            let item_column = if field == deep { column - 2 } else { column };
            for (text, line, column) in [
                (text, 8, column),
                (second, 10, column),
                (item, 11, item_column),
            ] {
                std::fs::write(&path, &text).unwrap();
                let mut bytes = text.clone().into_bytes();
                let error = Documents::parse(&path, &mut bytes)
                    .and_then(|documents| documents.manifests(&path).map(|_| ()))
                    .unwrap_err();
                let written = format!("invalid JSON: {message} at line {line} column {column}");
                assert_eq!(error.to_string(), written, "{text}");
            }
        }
    }
}
