//! The `AdmissionReview` envelope of the pod's two validating webhooks, the policy validator
//! (spec/policy.md §6) and the ServiceProfile validator (spec/sp-validator-and-pod.md §b.4):
//! `admission.k8s.io/v1` and `v1beta1`, which share their field names.
//!
//! The answer is kube-core's: [`AdmissionResponse`] (built by [`allow`], [`deny`] and
//! [`invalid`]) in an [`AdmissionReviewResponse`] of the `apiVersion` the review was sent in,
//! encoded by [`to_json`]. The request is read by a lenient adapter, [`AdmissionRequest`],
//! because kube-core's `AdmissionRequest<T>` requires what these webhooks must not:
//!
//! - `resource`, `operation` and `userInfo` on every request, and `apiVersion` and `kind` on the
//!   review. Hand-made reviews (curl, tests) leave them out, and a webhook that reads only
//!   `uid`, `kind`, `operation` and `object` must not fail a review over fields it ignores; a
//!   newer API server's additions are ignored the same way.
//! - an operation from its closed enum: an unknown or lower-case operation would fail the
//!   whole review instead of being allowed as "not validated".
//! - a typed `object` (`T: Resource`, such as `DynamicObject`). The validators decode the raw
//!   object strictly (an unknown field is a denial naming it), and a round trip through
//!   `DynamicObject` would both rewrite it and turn a malformed `metadata` into a failed review
//!   instead of a denial.
//!
//! This crate depends on kube only for these types; it is kept apart from `linkerd-runtime` so
//! that the `mtls-shim` sidecar, which shares the runtime, builds no Kubernetes client.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

use kube::core::{
    DynamicObject, ListMeta, TypeMeta,
    admission::{META_API_VERSION_V1, META_KIND},
};
use linkerd_runtime::tls::Judged;
use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue},
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};
use serde::Deserialize;
use std::collections::BTreeMap;

pub use kube::core::{
    GroupVersionKind, Status,
    admission::{AdmissionResponse, AdmissionReview},
};

/// The answer to a review: kube-core's [`AdmissionReview`] with `apiVersion`, `kind:
/// AdmissionReview` and `response` set (no `request`).
pub type AdmissionReviewResponse = AdmissionReview<DynamicObject>;

/// The older `apiVersion` of reviews, which the API server sends to a webhook registered with
/// `admissionReviewVersions: [v1beta1]`; answered in kind.
pub const API_VERSION_V1BETA1: &str = "admission.k8s.io/v1beta1";

/// `apiVersion` of the answer to a review that has none (hand-made requests; the API server
/// always sets one).
pub const DEFAULT_API_VERSION: &str = META_API_VERSION_V1;

/// The largest request body either webhook reads, in bytes: 10 MiB (10,485,760), upstream's
/// limit for the sp-validator (spec/sp-validator-and-pod.md §b.2), so that any review upstream
/// reads is read here. It is well above the largest review the API server sends: Kubernetes
/// refuses request bodies over 3 MiB (the API server's `MaxRequestBodyBytes`, and etcd stores
/// at most 1.5 MiB per object by default), and a review of an `UPDATE` carries the object and
/// `oldObject` as JSON plus a small envelope, so about 6 to 7 MiB at worst. A larger body is
/// answered `413` with [`body_too_large`] without being buffered.
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// The bytes of review bodies either webhook holds at once: two of the largest
/// ([`MAX_BODY_BYTES`]), or hundreds of the few-KiB reviews the API server sends. A review waits
/// for room before its body is read (`linkerd_runtime::tls::BodyBudget`): without a bound,
/// clients sending many large bodies at once could take a container past its memory limit
/// (`deploy/`: 250Mi).
pub const MAX_BODY_BYTES_AT_ONCE: usize = 2 * MAX_BODY_BYTES;

/// Reviews whose body declares at most this many bytes (256 KiB; the API server's are a few
/// KiB) take their share from a pool of their own, [`SMALL_BODY_BYTES_AT_ONCE`], rather than
/// from [`MAX_BODY_BYTES_AT_ONCE`]: larger bodies, waiting for room or stalled while they hold
/// it, then never hold them up (`linkerd_runtime::tls::BodyBudget::with_small_bodies`).
pub const SMALL_BODY_BYTES: usize = 256 * 1024;

/// The small reviews' pool: 4 MiB, on top of [`MAX_BODY_BYTES_AT_ONCE`]; 16 of the largest
/// small bodies at once, or hundreds of the API server's reviews.
pub const SMALL_BODY_BYTES_AT_ONCE: usize = 4 * 1024 * 1024;

/// How long the regexes of one review may take to compile, in all: 3 s
/// (`linkerd_index::model::regex::with_time_budget`). Regexes after it are not compiled, so
/// the review is denied, naming the route where checking stopped (not its pattern as invalid). Real objects compile theirs in milliseconds; 1,000
/// patterns like `/\w{20}0` take 4.6 s in a release build. Well under the API server's 10 s
/// timeout, so that reviews waiting behind one such review are still answered in time.
pub const JUDGING_TIME_BUDGET: std::time::Duration = std::time::Duration::from_secs(3);

/// The most memory one review may take to decode and judge, in bytes, as [`decode_cost`]
/// estimates it: 64 MiB. The object of a costlier review is not decoded, and the webhooks deny
/// it ([`ObjectError::TooComplex`]). The body limit alone does not bound this: decoded, each
/// JSON object is a map of its own, so 9 MiB of small objects
/// (`{"name":"r","condition":{"method":"GET"}}`, ...) took a validator to 710 MB. A review the
/// API server sends costs a few MiB at most; the limit is reached by a ServiceProfile of about
/// 18,000 of the smallest routes (760 KB of JSON), where a real one has tens.
pub const MAX_DECODED_BYTES: usize = 64 * 1024 * 1024;

/// Reviews whose [`decode_cost`] is at most this many bytes (1 MiB) are cheap: decoded from a
/// pool of their own ([`CHEAP_REVIEW_COSTS_AT_ONCE`]) and judged in slots of their own
/// (`linkerd_runtime::tls::BodyBudget::with_cheap_decoding`,
/// `linkerd_runtime::tls::ReviewWorkers::with_cheap_lane`), so that costly reviews, however
/// many wait, never hold them up. What the API server sends is cheap: an `UPDATE` of a
/// ServiceProfile of 50 routes with response classes, applied by kubectl, costs about
/// 680 KiB (measured in the tests). A cheap review holds at most about 680 JSON objects, so
/// at most about 340 regexes (a route is two objects at least), which can take 2 s to compile
/// when each is as slow as `/\w{20}0`: one that takes longer than [`CHEAP_JUDGING_TIME`] is
/// judged again among the costly reviews.
pub const CHEAP_REVIEW_COST: usize = 1024 * 1024;

/// How long a cheap review ([`CHEAP_REVIEW_COST`]) is judged in the cheap lane before it gives
/// its slot up and is judged again, from the start, among the costly reviews, with
/// [`JUDGING_TIME_BUDGET`] (`linkerd_runtime::tls::ReviewWorkers::with_cheap_lane`): 100 ms,
/// when a real object's regexes compile in milliseconds. An ordinary review then waits at most
/// this long per cheap review ahead of it: ten ServiceProfiles of 250 routes like `/\w{20}0`,
/// cheap to decode but 3 s each to judge, kept one waiting 15 s before (tester finding).
pub const CHEAP_JUDGING_TIME: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a review waits for a judging slot (`linkerd_runtime::tls::ReviewWorkers::with_max_wait`)
/// before it is denied unjudged ([`ReviewBody::deny_unjudged`]): 5 s. The API server gives a
/// webhook 10 s (its default `timeoutSeconds`), and then, with `failurePolicy: Ignore`,
/// admits the object unvalidated; a review that waited longer could not be read, decoded and
/// judged within [`JUDGING_TIME_BUDGET`] before that. Real reviews wait for no slot: only
/// reviews slow to judge, sent faster than they are judged, make others wait this long.
pub const MAX_JUDGING_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long past its time a review is judged before it is denied without waiting for the rest
/// (`linkerd_runtime::tls::ReviewWorkers::with_overrun`, [`ReviewBody::deny_overran`]): 200 ms.
/// The time is checked between regexes, and one regex can take seconds to compile (an 8 KiB
/// `(?i)\p{Any}` repeated: 4.7 s); so a review is answered within [`MAX_JUDGING_WAIT`],
/// [`JUDGING_TIME_BUDGET`] and this, before the API server's 10 s timeout.
pub const JUDGING_OVERRUN: std::time::Duration = std::time::Duration::from_millis(200);

/// The cheap reviews' decoding pool: 16 MiB (16 of the costliest cheap reviews at once,
/// dozens of the API server's), on top of [`MAX_DECODED_BYTES`].
pub const CHEAP_REVIEW_COSTS_AT_ONCE: usize = 16 * 1024 * 1024;

/// The budget both webhooks read and decode reviews through, with the limits above: bodies of
/// at most [`MAX_BODY_BYTES`], [`MAX_BODY_BYTES_AT_ONCE`] of them at once, and
/// [`SMALL_BODY_BYTES_AT_ONCE`] more for small ones; [`MAX_DECODED_BYTES`] of decoding, and
/// [`CHEAP_REVIEW_COSTS_AT_ONCE`] more for cheap reviews. Give a clone to [`review_workers`].
pub fn body_budget() -> linkerd_runtime::tls::BodyBudget {
    linkerd_runtime::tls::BodyBudget::new(MAX_BODY_BYTES_AT_ONCE, MAX_BODY_BYTES, MAX_DECODED_BYTES)
        .with_small_bodies(SMALL_BODY_BYTES, SMALL_BODY_BYTES_AT_ONCE)
        .with_cheap_decoding(CHEAP_REVIEW_COST, CHEAP_REVIEW_COSTS_AT_ONCE)
}

/// The judging slots both webhooks judge reviews in: one per core (at least two), as many
/// again for cheap reviews ([`CHEAP_REVIEW_COST`], judged there for [`CHEAP_JUDGING_TIME`]),
/// a review denied unjudged after [`MAX_JUDGING_WAIT`] or [`JUDGING_OVERRUN`] past its time,
/// and its decoding share taken from
/// `budget` ([`body_budget`]) with its slot.
pub fn review_workers(
    budget: linkerd_runtime::tls::BodyBudget,
) -> linkerd_runtime::tls::ReviewWorkers {
    linkerd_runtime::tls::ReviewWorkers::per_core()
        .with_cheap_lane(CHEAP_REVIEW_COST, CHEAP_JUDGING_TIME)
        .with_max_wait(MAX_JUDGING_WAIT)
        .with_overrun(JUDGING_OVERRUN)
        .with_decoding(budget)
}

/// What decoding and judging one JSON object of a review costs, beyond its text, in bytes: its
/// map, and the typed copy the validators make (measured: about 3.2 KB per route of
/// `{"name":"r","condition":{"method":"GET"}}`, two objects and five values).
const OBJECT_COST: usize = 1536;

/// The same for any other JSON value (an array, an element, a member).
const VALUE_COST: usize = 96;

/// Copies of the body's text a judged review may hold at once: the decoded strings, the typed
/// copy, and names repeated in messages (measured: 2.7 times a body of long route names).
const TEXT_COPIES: usize = 3;

/// The memory decoding and judging `body` may take, in bytes, estimated from its shape (one
/// pass over the bytes, without decoding): three times its length, plus 1,536 bytes per JSON
/// object and 96 per other value (measured, see the constants' docs), counting only what the
/// decoder builds: not what nests deeper than it reads ([`MAX_JSON_NESTING`]), and not
/// `request.oldObject`, which it skips (so an `UPDATE` costs what a `CREATE` of the same
/// object does). An upper bound for the shapes measured in the tests; compared with
/// [`MAX_DECODED_BYTES`] by [`ReviewBody`].
pub fn decode_cost(body: &[u8]) -> usize {
    // `request`'s members are at this depth (the review itself is at depth 1).
    const REQUEST_MEMBERS: usize = 2;
    let (mut objects, mut values, mut depth) = (0usize, 0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    let (mut string_start, mut last_string): (usize, &[u8]) = (0, b"");
    // Whether the member being read at `REQUEST_MEMBERS` is `oldObject`, and whether the
    // scan is inside its value.
    let (mut old_object_member, mut in_old_object) = (false, false);
    for (at, &byte) in body.iter().enumerate() {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => {
                    in_string = false;
                    last_string = &body[string_start..at];
                }
                _ => {}
            }
            continue;
        }
        // Structure nested deeper than the decoder goes is never decoded (it stops there).
        let decoded = depth <= MAX_JSON_NESTING + 1 && !in_old_object;
        match byte {
            b'"' => {
                in_string = true;
                string_start = at + 1;
            }
            b'{' | b'[' => {
                if depth == REQUEST_MEMBERS && old_object_member {
                    in_old_object = true;
                }
                depth += 1;
                if depth <= MAX_JSON_NESTING + 1 && !in_old_object {
                    if byte == b'{' {
                        objects += 1;
                    } else {
                        values += 1;
                    }
                }
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth <= REQUEST_MEMBERS {
                    in_old_object = false;
                    old_object_member = false;
                }
            }
            b':' if depth == REQUEST_MEMBERS => {
                old_object_member = last_string == b"oldObject";
                values += 1;
            }
            b',' if depth == REQUEST_MEMBERS => {
                old_object_member = false;
                values += 1;
            }
            b',' | b':' if decoded => values += 1,
            _ => {}
        }
    }
    body.len()
        .saturating_mul(TEXT_COPIES)
        .saturating_add(objects.saturating_mul(OBJECT_COST))
        .saturating_add(values.saturating_mul(VALUE_COST))
}

/// A review's body with [`decode_cost`], estimated once: a webhook waits for
/// [`Self::memory`] of room in its decoding budget, then answers it with [`Self::review`].
#[derive(Clone, Copy, Debug)]
pub struct ReviewBody<'a> {
    bytes: &'a [u8],
    cost: usize,
}

impl<'a> ReviewBody<'a> {
    /// Estimates what decoding `bytes` would take (one pass, see [`decode_cost`]).
    pub fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            cost: decode_cost(bytes),
        }
    }

    /// [`decode_cost`] of the body, in bytes.
    pub fn cost(&self) -> usize {
        self.cost
    }

    /// The memory [`Self::review`] takes beyond the body, in bytes: the cost, or none when the
    /// review is too complex to decode (then only its head is read, skipping the object).
    pub fn memory(&self) -> usize {
        if self.too_complex() { 0 } else { self.cost }
    }

    fn too_complex(&self) -> bool {
        self.cost > MAX_DECODED_BYTES
    }

    /// Reads `request` of the review and denies it without judging its object: no judging
    /// slot was free for `waited` ([`MAX_JUDGING_WAIT`]). The message says so and asks to try
    /// again: `not judged: the webhook was busy judging reviews that are slow to judge for
    /// 5.0 s; try again`.
    ///
    /// Errors: those of [`Self::review`].
    pub fn deny_unjudged(
        &self,
        waited: std::time::Duration,
    ) -> Result<AdmissionReviewResponse, ReviewError> {
        let message = format!(
            "not judged: the webhook was busy judging reviews that are slow to judge for {:.1} s; try again",
            waited.as_secs_f32()
        );
        // Its object is not read: the review holds no share of the decoding budget.
        self.answer(false, |request| deny_not_judged(request, message))
    }

    /// Reads `request` of the review and denies it without waiting for its judging, which has
    /// gone on past its `time` by [`JUDGING_OVERRUN`]: `not judged: the object's regular
    /// expressions took more than 3.0 s to compile`.
    ///
    /// Errors: those of [`Self::review`].
    pub fn deny_overran(
        &self,
        time: std::time::Duration,
    ) -> Result<AdmissionReviewResponse, ReviewError> {
        let message = format!(
            "not judged: the object's regular expressions took more than {:.1} s to compile",
            time.as_secs_f32()
        );
        self.answer(false, |request| deny_not_judged(request, message))
    }

    /// [`Self::review`] of a review judged within a time budget: `ran_out_of_time`, asked once
    /// `admit` has answered, says whether judging stopped short for lack of it. A denial then
    /// is marked as not judged whole (reason `Timeout`, code 504), as those of
    /// [`Self::deny_unjudged`] and [`Self::deny_overran`] are: its message says where judging
    /// stopped, not that the object broke a rule.
    ///
    /// Errors: those of [`Self::review`], in [`Judged::answer`].
    pub fn review_within(
        &self,
        admit: impl FnOnce(&AdmissionRequest) -> AdmissionResponse,
        ran_out_of_time: impl FnOnce() -> bool,
    ) -> Judged<Result<AdmissionReviewResponse, ReviewError>> {
        let answer = self.review(admit);
        let out_of_time = ran_out_of_time();
        let answer = answer.map(|mut review| {
            if let Some(response) = review.response.as_mut()
                && out_of_time
                && !response.allowed
            {
                response.result.reason = NOT_JUDGED_REASON.to_string();
                response.result.code = NOT_JUDGED_CODE;
            }
            review
        });
        Judged {
            answer,
            out_of_time,
        }
    }

    /// Reads `request` of the review and answers it with `admit`'s response (built by
    /// [`allow`], [`deny`] or [`invalid`], which carry the request's `uid`), in the review's
    /// `apiVersion` ([`DEFAULT_API_VERSION`] when it has none).
    ///
    /// A review whose `request.object` alone cannot be read is still answered: `admit` gets
    /// the request without `object` and with [`AdmissionRequest::object_error`] set, so that
    /// the webhook denies it whatever its `failurePolicy`. That is the case of an object that
    /// would take more than [`MAX_DECODED_BYTES`] to decode (it is not decoded), nests deeper
    /// than [`MAX_JSON_NESTING`], or holds a number out of range.
    ///
    /// Errors: [`ReviewError::Decode`] (or [`ReviewError::NotAnObject`]) when the body is not
    /// a review, [`ReviewError::Invalid`] when it has no `request` or an empty `request.uid`.
    pub fn review(
        &self,
        admit: impl FnOnce(&AdmissionRequest) -> AdmissionResponse,
    ) -> Result<AdmissionReviewResponse, ReviewError> {
        self.answer(true, admit)
    }

    /// [`Self::review`], reading the object only when `read_object` says so (otherwise
    /// [`ObjectError::NotRead`]).
    fn answer(
        &self,
        read_object: bool,
        admit: impl FnOnce(&AdmissionRequest) -> AdmissionResponse,
    ) -> Result<AdmissionReviewResponse, ReviewError> {
        let body = self.bytes;
        // Before decoding: serde reads a struct from an array too (`[]` is a review without
        // a request).
        if let Some(error) = not_an_object(body) {
            return Err(error);
        }
        let review = if !read_object {
            read_without_object(body, ObjectError::NotRead).map_err(ReviewError::Decode)?
        } else if self.too_complex() {
            read_without_object(body, ObjectError::TooComplex { cost: self.cost })
                .map_err(ReviewError::Decode)?
        } else {
            match serde_json::from_slice::<IncomingReview<AdmissionRequest>>(body) {
                Ok(review) => review,
                Err(error) => read_without_object(body, ObjectError::from_decoder(&error))
                    .map_err(|_| ReviewError::Decode(error))?,
            }
        };
        if let Some(version) = review
            .api_version
            .as_deref()
            .filter(|v| ![META_API_VERSION_V1, API_VERSION_V1BETA1].contains(v))
        {
            return Err(ReviewError::Invalid(format!(
                "apiVersion {version:?} is not {META_API_VERSION_V1} or {API_VERSION_V1BETA1}"
            )));
        }
        if let Some(kind) = review.kind.as_deref().filter(|k| *k != META_KIND) {
            return Err(ReviewError::Invalid(format!(
                "kind {kind:?} is not {META_KIND}"
            )));
        }
        let request = review
            .request
            .ok_or_else(|| ReviewError::Invalid("it has no request".into()))?;
        if request.uid.is_empty() {
            return Err(ReviewError::Invalid("its request.uid is empty".into()));
        }
        let mut response = admit(&request);
        response.types = TypeMeta {
            api_version: review
                .api_version
                .unwrap_or_else(|| DEFAULT_API_VERSION.to_string()),
            kind: META_KIND.to_string(),
        };
        Ok(response.into_review())
    }
}

/// How deep JSON objects and arrays may nest in a review, counted from the review itself
/// (`request` is level 2, `request.object` level 3): serde_json refuses the 128th level (its
/// recursion limit of 128, which keeps decoding off the end of the stack). A review whose
/// `object` nests deeper is still answered, with [`AdmissionRequest::object_error`] set.
pub const MAX_JSON_NESTING: usize = 127;

/// The text of the `413` answer to a body over [`MAX_BODY_BYTES`]: upstream's words
/// (`limit reached while reading: 10485760`), which name the limit in bytes.
pub fn body_too_large() -> String {
    format!("limit reached while reading: {MAX_BODY_BYTES}")
}

/// Why a body is not a review to answer; the webhooks answer both `400 text/plain` with this
/// text.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Not JSON, or not the shape of a review (`request` not an object, `uid` not a string).
    #[error("failed to decode admission review request: {0}")]
    Decode(#[from] serde_json::Error),
    /// A review without `request`, or with an empty `request.uid`: nothing to answer; or one
    /// whose `apiVersion` or `kind` says it is not an `AdmissionReview` of a version these
    /// webhooks answer. The text names which (`it has no request`, `its request.uid is empty`,
    /// `apiVersion "admission.k8s.io/v2" is not admission.k8s.io/v1 or v1beta1`).
    #[error("invalid admission review request: {0}")]
    Invalid(String),
    /// JSON, but not an object (`[...]`, a string, a number): serde_json's own message would
    /// speak of the first field it expected.
    #[error(
        "failed to decode admission review request: the body is a JSON {found}, not an AdmissionReview object"
    )]
    NotAnObject {
        /// `array`, `string`, `number`, `boolean` or `null`.
        found: &'static str,
    },
}

/// Why a review's `request.object` was not read although the rest of the review was. The
/// webhooks deny such a request (when they judge its kind and operation) with this text, so
/// that the API server refuses the object whatever the webhook's `failurePolicy`; a `400`
/// would let `failurePolicy: Ignore` admit it unvalidated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// JSON objects and arrays nest deeper than [`MAX_JSON_NESTING`] levels; the text is the
    /// decoder's (`recursion limit exceeded at line 1 column 2410`), which says where.
    #[error(
        "the object is nested too deep: the review nests JSON objects and arrays more than 127 levels deep ({0})"
    )]
    TooDeep(String),
    /// Anything else the JSON decoder refuses in the object alone, such as a number out of
    /// range (`number out of range at line 1 column 95`).
    #[error("the object cannot be decoded: {0}")]
    Decode(String),
    /// Decoding the review would take more than [`MAX_DECODED_BYTES`] ([`decode_cost`]), so
    /// its object is not decoded: 9 MiB of small objects took a validator to 710 MB.
    #[error(
        "the object is too complex to validate: decoding the review would take about {} MiB, more than the {} MiB a review may (too many JSON objects and values)",
        cost / (1024 * 1024),
        MAX_DECODED_BYTES / (1024 * 1024)
    )]
    TooComplex {
        /// [`decode_cost`] of the review, in bytes.
        cost: usize,
    },
    /// The object was not read: the review is answered without judging it
    /// ([`ReviewBody::deny_unjudged`]).
    #[error("the object was not read")]
    NotRead,
}

impl ObjectError {
    /// The object's error for the decoder's `error` on a review whose head reads.
    fn from_decoder(error: &serde_json::Error) -> Self {
        let text = error.to_string();
        // serde_json has no error code for its recursion limit; its message is the only sign.
        if text.starts_with("recursion limit exceeded") {
            Self::TooDeep(text)
        } else {
            Self::Decode(text)
        }
    }
}

/// An incoming review, `{apiVersion, kind, request}`; every field may be absent. `R` is
/// [`AdmissionRequest`], or [`RequestHead`] to read a review whose object does not decode.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IncomingReview<R> {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    // A path, not `default`, so that serde does not ask for `R: Default`.
    #[serde(default = "Option::default")]
    request: Option<R>,
}

/// `request` without `object`, which the decoder then skips without building it (and without
/// a nesting limit, since skipping keeps no stack).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestHead {
    #[serde(default)]
    uid: String,
    #[serde(default = "empty_kind", deserialize_with = "lenient_kind")]
    kind: GroupVersionKind,
    #[serde(default)]
    operation: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

/// `request` of a review: the fields the webhooks read, each optional (see the crate docs for
/// why this is not kube-core's `AdmissionRequest`). Other fields are ignored.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Echoed in the response; the API server matches the answer to the request by it.
    #[serde(default)]
    pub uid: String,
    /// The type of `object`, which decides the rules applied; empty strings when absent or
    /// partly given (the core group is `""`).
    #[serde(default = "empty_kind", deserialize_with = "lenient_kind")]
    pub kind: GroupVersionKind,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`; see [`Self::creates_or_updates`].
    #[serde(default)]
    pub operation: Option<String>,
    /// The namespace of the object (also in `object.metadata`).
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// The object as it would be stored, as sent; absent for `DELETE`, or when it does not
    /// decode (then [`Self::object_error`] says why).
    #[serde(default)]
    pub object: Option<serde_json::Value>,
    /// Why the review's `object` could not be read (it nests too deep, ...); `None` when it
    /// was read or is absent.
    #[serde(skip)]
    pub object_error: Option<ObjectError>,
}

/// Answers review `body` with `admit`'s response: [`ReviewBody::review`], for a caller that
/// keeps no decoding budget (tests, tools).
pub fn review(
    body: &[u8],
    admit: impl FnOnce(&AdmissionRequest) -> AdmissionResponse,
) -> Result<AdmissionReviewResponse, ReviewError> {
    ReviewBody::new(body).review(admit)
}

/// [`ReviewError::NotAnObject`] when `body` starts as JSON that is not an object.
fn not_an_object(body: &[u8]) -> Option<ReviewError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace())?;
    let found = match first {
        b'[' => "array",
        b'"' => "string",
        b'-' | b'0'..=b'9' => "number",
        b't' | b'f'
            if body.trim_ascii().starts_with(b"true")
                || body.trim_ascii().starts_with(b"false") =>
        {
            "boolean"
        }
        b'n' if body.trim_ascii().starts_with(b"null") => "null",
        _ => return None,
    };
    Some(ReviewError::NotAnObject { found })
}

/// Reads review `body` skipping `request.object`, for a review whose object is not read
/// (`object_error` says why): its request carries `object_error`. The decoder's error when
/// the review is broken elsewhere too.
fn read_without_object(
    body: &[u8],
    object_error: ObjectError,
) -> Result<IncomingReview<AdmissionRequest>, serde_json::Error> {
    let review: IncomingReview<RequestHead> = serde_json::from_slice(body)?;
    Ok(IncomingReview {
        api_version: review.api_version,
        kind: review.kind,
        request: review.request.map(|head| AdmissionRequest {
            uid: head.uid,
            kind: head.kind,
            operation: head.operation,
            namespace: head.namespace,
            name: head.name,
            object: None,
            object_error: Some(object_error),
        }),
    })
}

/// The JSON body of an answer.
///
/// kube-core always writes `response.status` (`{}` when the request is allowed); it is left
/// out here, so an allowed answer is `{uid, allowed}` only, as upstream's webhooks answer
/// (spec/sp-validator-and-pod.md §b.4) and as the webhooks' tests check.
pub fn to_json(answer: &AdmissionReviewResponse) -> serde_json::Result<Vec<u8>> {
    let mut json = serde_json::to_value(answer)?;
    if let Some(response) = json.get_mut("response").and_then(|r| r.as_object_mut())
        && response
            .get("status")
            .and_then(|s| s.as_object())
            .is_some_and(|s| s.is_empty())
    {
        response.remove("status");
    }
    serde_json::to_vec(&json)
}

/// The reviews one webhook answered, by result: `<name>_total{result}`, `result` being
/// `allowed`, `denied`, `unjudged` (denied without being judged whole, with
/// [`NOT_JUDGED_REASON`]: no judging slot was free in time, judging overran its time, or the
/// object's regexes took the review's time budget), or `invalid` (a request answered with an
/// HTTP error: a body too large, late, empty, or not an `AdmissionReview`). Cheap to clone;
/// clones count together.
#[derive(Clone, Debug, Default)]
pub struct ReviewMetrics {
    reviews: Family<ResultLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: ReviewResult,
}

/// The `result` label of [`ReviewMetrics`].
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
enum ReviewResult {
    allowed,
    denied,
    unjudged,
    invalid,
}

impl ReviewMetrics {
    /// Registers `<name>_total{result}` in `registry` (`sp_validator_admission_reviews`,
    /// `policy_admission_reviews`), each result's series there from the start at 0.
    pub fn register(registry: &mut Registry, name: &str) -> Self {
        let metrics = Self::default();
        for result in [
            ReviewResult::allowed,
            ReviewResult::denied,
            ReviewResult::unjudged,
            ReviewResult::invalid,
        ] {
            let _ = metrics.reviews.get_or_create(&ResultLabels { result });
        }
        registry.register(
            name,
            "Admission reviews answered, by result",
            metrics.reviews.clone(),
        );
        metrics
    }

    /// Counts a review answered: `allowed`, `denied` or `unjudged`, as its response says. An
    /// `unjudged` one is logged here, with its uid and message, as it is final only now (the
    /// webhooks log the denials they judge; one cut short in the cheap lane is judged again).
    pub fn answered(&self, review: &AdmissionReviewResponse) {
        self.count(match &review.response {
            Some(response) if response.allowed => ReviewResult::allowed,
            Some(response) if response.result.reason == NOT_JUDGED_REASON => {
                tracing::info!(
                    uid = %response.uid,
                    denial = %response.result.message,
                    "denied a review not judged whole"
                );
                ReviewResult::unjudged
            }
            _ => ReviewResult::denied,
        });
    }

    /// Counts a request answered with an HTTP error instead of a review.
    pub fn invalid(&self) {
        self.count(ReviewResult::invalid);
    }

    /// How many reviews had `result` (`allowed`, `denied`, `unjudged`, `invalid`; 0 for another
    /// name).
    pub fn count_of(&self, result: &str) -> u64 {
        let result = match result {
            "allowed" => ReviewResult::allowed,
            "denied" => ReviewResult::denied,
            "unjudged" => ReviewResult::unjudged,
            "invalid" => ReviewResult::invalid,
            _ => return 0,
        };
        self.reviews.get_or_create(&ResultLabels { result }).get()
    }

    fn count(&self, result: ReviewResult) {
        self.reviews.get_or_create(&ResultLabels { result }).inc();
    }
}

/// Admits `request` (its `uid` echoed, no `status`).
pub fn allow(request: &AdmissionRequest) -> AdmissionResponse {
    // kube-core's response is non-exhaustive: built from its one constructor that needs no
    // kube-core request, then every field that matters is set.
    let mut response = AdmissionResponse::invalid("");
    response.uid = request.uid.clone();
    response.allowed = true;
    response.result = Status::default();
    response
}

/// Refuses `request` because a rule failed: `status` is `{metadata: {}, status: Failure,
/// message, reason: BadRequest, code: 400}`, `message` shortened past [`MAX_MESSAGE_BYTES`].
/// The API server shows `message` to the client as `admission webhook "<name>" denied the
/// request: <message>`.
pub fn deny(request: &AdmissionRequest, message: impl Into<String>) -> AdmissionResponse {
    refuse(request, "BadRequest", message.into())
}

/// Refuses a request the webhook cannot judge (spec/policy.md §6: "unsupported resource
/// type"): as [`deny`], with reason `InvalidRequest`.
pub fn invalid(request: &AdmissionRequest, message: impl Into<String>) -> AdmissionResponse {
    refuse(request, "InvalidRequest", message.into())
}

/// About the most of a refusal's message sent, in bytes: messages quote what the object holds
/// (a regular expression, a name, a port), which may be megabytes, and the API server relays
/// the message to the client whole. A longer one keeps its first 3 KiB and its last 1 KiB
/// (where the reason usually is: `...: more than the 8192 allowed`), cut at character
/// boundaries, and says how much was left out between them.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// The `reason` of a denial of an object not judged whole (no judging slot in time, or judging
/// out of time): Kubernetes' `Timeout`, a request the server understood but could not complete
/// in time, which the client should retry. The API server passes it, with
/// [`NOT_JUDGED_CODE`], to the client (`Error from server (Timeout): admission webhook ...
/// denied the request: not judged: ...`), and [`ReviewMetrics`] counts it `unjudged`.
pub const NOT_JUDGED_REASON: &str = "Timeout";

/// The `code` of a denial with [`NOT_JUDGED_REASON`]: 504, Kubernetes' code for `Timeout`.
pub const NOT_JUDGED_CODE: u16 = 504;

/// Refuses `request` without having judged its object whole: as [`deny`], with
/// [`NOT_JUDGED_REASON`] and [`NOT_JUDGED_CODE`].
fn deny_not_judged(request: &AdmissionRequest, message: String) -> AdmissionResponse {
    let mut response = refuse(request, NOT_JUDGED_REASON, message);
    response.result.code = NOT_JUDGED_CODE;
    response
}

fn refuse(request: &AdmissionRequest, reason: &str, message: String) -> AdmissionResponse {
    let message = linkerd_runtime::log::cut_middle(message, MAX_MESSAGE_BYTES);
    let mut response = AdmissionResponse::invalid(&message);
    response.uid = request.uid.clone();
    response.result = Status {
        // Upstream's answers carry an empty `metadata: {}`.
        metadata: Some(ListMeta::default()),
        ..Status::failure(&message, reason).with_code(400)
    };
    response
}

// === impl AdmissionRequest ===

impl Default for AdmissionRequest {
    /// A request with nothing but an empty `kind`.
    fn default() -> Self {
        Self {
            uid: String::new(),
            kind: empty_kind(),
            operation: None,
            namespace: None,
            name: None,
            object: None,
            object_error: None,
        }
    }
}

impl AdmissionRequest {
    /// Whether the object is judged: the operation is `CREATE` or `UPDATE` (in any case), or
    /// the review names none (hand-made). `DELETE` and `CONNECT` are not: a deletion must never
    /// be blocked by the content of what is deleted.
    pub fn creates_or_updates(&self) -> bool {
        self.operation
            .as_deref()
            .is_none_or(|op| op.eq_ignore_ascii_case("CREATE") || op.eq_ignore_ascii_case("UPDATE"))
    }

    /// The object's namespace: `object.metadata.namespace`, else `request.namespace`, else
    /// empty.
    pub fn object_namespace(&self) -> &str {
        self.object
            .as_ref()
            .and_then(|o| o.pointer("/metadata/namespace"))
            .and_then(serde_json::Value::as_str)
            .or(self.namespace.as_deref())
            .unwrap_or_default()
    }

    /// The object's name: `object.metadata.name`, else `request.name`, else empty.
    pub fn object_name(&self) -> &str {
        self.object
            .as_ref()
            .and_then(|o| o.pointer("/metadata/name"))
            .and_then(serde_json::Value::as_str)
            .or(self.name.as_deref())
            .unwrap_or_default()
    }

    /// The object's annotations (`object.metadata.annotations`); values that are not strings
    /// are skipped (the API server never sends any).
    pub fn object_annotations(&self) -> BTreeMap<String, String> {
        self.object
            .as_ref()
            .and_then(|o| o.pointer("/metadata/annotations"))
            .and_then(serde_json::Value::as_object)
            .map(|annotations| {
                annotations
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn empty_kind() -> GroupVersionKind {
    GroupVersionKind::gvk("", "", "")
}

/// `request.kind` with each of `group`, `version` and `kind` optional (kube-core's type
/// requires all three); `null` is an empty kind.
fn lenient_kind<'de, D: serde::Deserializer<'de>>(de: D) -> Result<GroupVersionKind, D::Error> {
    // Named as kube-core's type, which decode errors name ("expected struct GroupVersionKind").
    #[derive(Deserialize)]
    struct GroupVersionKind {
        #[serde(default)]
        group: String,
        #[serde(default)]
        version: String,
        #[serde(default)]
        kind: String,
    }
    Ok(
        Option::<GroupVersionKind>::deserialize(de)?.map_or_else(empty_kind, |k| {
            kube::core::GroupVersionKind::gvk(&k.group, &k.version, &k.kind)
        }),
    )
}

#[cfg(test)]
mod tests;
