//! Which route a request takes, decided as linkerd2-proxy's route matching does (its
//! `linkerd-http-route` crate, the Gateway API's precedence rules) and explained: for every
//! route, rule and match, either how well it matches or the first condition that fails.
//!
//! The rules followed:
//!
//! - A route with hosts applies only when one of them matches the request's host: an exact
//!   name (case-insensitive, a trailing dot ignored unless the match has one) or a `*.suffix`
//!   (at least one label before it). Its score is the best host match; exact beats suffix, then
//!   longer beats shorter. A route without hosts has no host score, which loses to any.
//! - A rule without matches matches every request as a `/` prefix would. Otherwise its score is
//!   its best matching match, the earliest on a tie.
//! - An HTTP match scores by the length of the path it matched (exact, prefix on whole segments,
//!   or an anchored regex), then whether it named the method, then the number of headers, then
//!   of query parameters. A gRPC match needs `POST` and a `/service/method` path, and scores by
//!   the lengths of the service and method it named, then the number of headers.
//! - The best route wins, then its best rule; the earliest wins every tie (routes are sent
//!   oldest first, spec/policy.md §4.8).

use linkerd_index::model::regex::compile_regex_as_the_proxy;
use linkerd2_proxy_api::{
    grpc_route::GrpcRouteMatch,
    http_route::{
        HeaderMatch, HostMatch, HttpRouteMatch, QueryParamMatch, RequestRedirect, header_match,
        host_match, path_match, query_param_match,
    },
    http_types::{HttpMethod, http_method},
};

use crate::output::method_text;

/// The request to explain, as the proxy sees it after normalising its URI.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, ... (methods are case-sensitive on the wire; the command line upper-cases
    /// them).
    pub method: String,
    /// The path, starting with `/`, without the query.
    pub path: String,
    /// The raw query string after `?`, if any.
    pub query: Option<String>,
    /// Header names (lower case) and values, in the order given.
    pub headers: Vec<(String, String)>,
    /// The host the request is for (`Host` or `:authority`, without the port), if known.
    pub host: Option<String>,
}

/// How well a route's hosts match: exact beats suffix, then the longer match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum HostScore {
    /// A `*.suffix` match of this many characters (with the dots).
    Suffix(usize),
    /// An exact match of a name this long.
    Exact(usize),
}

/// How well an HTTP match matched, ordered as the proxy ranks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HttpScore {
    /// Characters of the path matched (1 for the implicit `/` prefix).
    pub path: usize,
    /// Whether the match named the method.
    pub method: bool,
    /// Header conditions met.
    pub headers: usize,
    /// Query parameter conditions met.
    pub query_params: usize,
}

/// How well a gRPC match matched, ordered as the proxy ranks them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct GrpcScore {
    /// Characters of the service name matched (0 when the match names none).
    pub service: usize,
    /// Characters of the method name matched (0 when the match names none).
    pub method: usize,
    /// Header conditions met.
    pub headers: usize,
}

/// The score of a whole route: its host score (none when it names no hosts), then its best
/// rule's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RouteScore<S> {
    /// The best host match, or `None` for a route that applies to every host.
    pub host: Option<HostScore>,
    /// The best rule's score.
    pub rule: S,
}

/// How one route fared against the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteOutcome<S> {
    /// The route matches: its score, the index of its best rule, and that rule's matching
    /// match as text (`*` for a rule without matches).
    Matches {
        /// The score compared with other routes.
        score: RouteScore<S>,
        /// The index of the rule that matches best.
        rule: usize,
        /// The match of that rule that matched, as [`crate::output::http_match_text`] prints it.
        matched: String,
        /// Its index in the rule, or `None` for a rule without matches.
        match_index: Option<usize>,
    },
    /// The route does not match; why, in one line.
    Misses(String),
}

/// The verdict over a list of routes: each route's outcome and the index of the one taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteChoice<S> {
    /// One outcome per route, in the order the routes were sent.
    pub outcomes: Vec<RouteOutcome<S>>,
    /// The index of the route the request takes, if any matches.
    pub selected: Option<usize>,
}

/// A route as the matcher needs it: hosts, and per rule its matches.
pub trait RouteMatches {
    /// The kind of match the rules hold.
    type Match;
    /// The route's host matches (empty: every host).
    fn hosts(&self) -> &[HostMatch];
    /// The matches of each rule, in order.
    fn rules(&self) -> Vec<&[Self::Match]>;
    /// The redirect filters of the route's rules, with the index of their rule.
    fn redirects(&self) -> Vec<(usize, &RequestRedirect)> {
        vec![]
    }
}

// === impl Request ===

impl Request {
    /// The values of header `name` (lower case), in order.
    fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The query's name/value pairs, decoded as `application/x-www-form-urlencoded`.
    fn query_pairs(&self) -> Vec<(String, String)> {
        let Some(query) = &self.query else {
            return vec![];
        };
        query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                (form_decode(name), form_decode(value))
            })
            .collect()
    }

    /// `GET /api/list?x=1 (host web.example.com, header x-env: prod)`.
    pub fn text(&self) -> String {
        let mut text = format!("{} {}", self.method, self.path);
        if let Some(query) = &self.query {
            text.push('?');
            text.push_str(query);
        }
        let mut extra = Vec::new();
        if let Some(host) = &self.host {
            extra.push(format!("host {host}"));
        }
        extra.extend(
            self.headers
                .iter()
                .filter(|(n, _)| n != "host")
                .map(|(n, v)| format!("header {n}: {v}")),
        );
        if !extra.is_empty() {
            text.push_str(&format!(" ({})", extra.join(", ")));
        }
        text
    }
}

/// Chooses among `routes` for `request` with `score` deciding each match, as the proxy does
/// (see the module documentation).
pub fn choose<R, S>(
    routes: &[R],
    request: &Request,
    score: impl Fn(&R::Match, &Request) -> Result<S, String>,
    default_score: S,
    match_text: impl Fn(&R::Match) -> String,
) -> RouteChoice<S>
where
    R: RouteMatches,
    S: Ord + Copy,
{
    let outcomes: Vec<RouteOutcome<S>> = routes
        .iter()
        .map(|route| route_outcome(route, request, &score, default_score, &match_text))
        .collect();
    let mut selected: Option<(usize, RouteScore<S>)> = None;
    for (i, outcome) in outcomes.iter().enumerate() {
        if let RouteOutcome::Matches { score, .. } = outcome {
            // Strictly better only: the earliest route wins a tie.
            if selected.is_none_or(|(_, best)| *score > best) {
                selected = Some((i, *score));
            }
        }
    }
    RouteChoice {
        outcomes,
        selected: selected.map(|(i, _)| i),
    }
}

fn route_outcome<R, S>(
    route: &R,
    request: &Request,
    score: &impl Fn(&R::Match, &Request) -> Result<S, String>,
    default_score: S,
    match_text: &impl Fn(&R::Match) -> String,
) -> RouteOutcome<S>
where
    R: RouteMatches,
    S: Ord + Copy,
{
    let host = if route.hosts().is_empty() {
        None
    } else {
        match best_host(route.hosts(), request.host.as_deref()) {
            Ok(host) => Some(host),
            Err(why) => return RouteOutcome::Misses(why),
        }
    };
    let mut best: Option<(usize, S, String, Option<usize>)> = None;
    let mut misses = Vec::new();
    for (i, matches) in route.rules().into_iter().enumerate() {
        let found = if matches.is_empty() {
            Ok((default_score, "*".to_string(), None))
        } else {
            best_match(matches, request, score, match_text)
                .map(|(s, text, index)| (s, text, Some(index)))
        };
        match found {
            Ok((s, text, index)) => {
                if best.as_ref().is_none_or(|(_, b, _, _)| s > *b) {
                    best = Some((i, s, text, index));
                }
            }
            Err(why) => misses.push(format!("rule {}: {why}", i + 1)),
        }
    }
    match best {
        Some((rule, s, matched, match_index)) => RouteOutcome::Matches {
            score: RouteScore { host, rule: s },
            rule,
            matched,
            match_index,
        },
        None if misses.is_empty() => RouteOutcome::Misses("it has no rules".into()),
        None => RouteOutcome::Misses(misses.join("; ")),
    }
}

/// The index of the rule that decided the selected route.
pub fn selected_rule<S>(choice: &RouteChoice<S>, selected: usize) -> Option<usize> {
    match choice.outcomes.get(selected) {
        Some(RouteOutcome::Matches { rule, .. }) => Some(*rule),
        _ => None,
    }
}

/// The index, within its rule, of the match that decided the selected route; `None` for a
/// rule without matches.
pub fn selected_match<S>(choice: &RouteChoice<S>, selected: usize) -> Option<usize> {
    match choice.outcomes.get(selected) {
        Some(RouteOutcome::Matches { match_index, .. }) => *match_index,
        _ => None,
    }
}

/// One line per route, named by `name(index)`: selected, matching but not selected (less
/// specific, or tied with an earlier route), or why it does not match.
pub fn route_lines<S: Ord + Copy>(
    choice: &RouteChoice<S>,
    name: impl Fn(usize) -> String,
) -> Vec<String> {
    let best = choice.selected.and_then(|i| match choice.outcomes.get(i) {
        Some(RouteOutcome::Matches { score, .. }) => Some(*score),
        _ => None,
    });
    choice
        .outcomes
        .iter()
        .enumerate()
        .map(|(i, outcome)| {
            let text = match outcome {
                RouteOutcome::Matches { rule, matched, .. } if Some(i) == choice.selected => {
                    format!("selected: rule {} matches {matched}", rule + 1)
                }
                RouteOutcome::Matches {
                    score,
                    rule,
                    matched,
                    ..
                } => {
                    let how = if Some(*score) == best {
                        "matches as well, but an earlier route wins"
                    } else {
                        "matches less specifically"
                    };
                    format!("not selected: {how} (rule {} matches {matched})", rule + 1)
                }
                RouteOutcome::Misses(why) => format!("does not match: {why}"),
            };
            format!("route {}: {text}", name(i))
        })
        .collect()
}

/// The best of a rule's matches (the first on a tie), with its text and index, or why none
/// matched.
fn best_match<M, S: Ord + Copy>(
    matches: &[M],
    request: &Request,
    score: &impl Fn(&M, &Request) -> Result<S, String>,
    match_text: &impl Fn(&M) -> String,
) -> Result<(S, String, usize), String> {
    let mut best: Option<(S, usize)> = None;
    let mut misses = Vec::new();
    for (i, m) in matches.iter().enumerate() {
        match score(m, request) {
            Ok(s) => {
                if best.is_none_or(|(b, _)| s > b) {
                    best = Some((s, i));
                }
            }
            Err(why) => misses.push(why),
        }
    }
    match best {
        Some((s, i)) => Ok((s, match_text(&matches[i]), i)),
        // Two matches missing for the same reason (`method is not GET` for both `GET /a` and
        // `GET /b`) are told apart by their position.
        None if misses
            .iter()
            .enumerate()
            .any(|(i, why)| misses[..i].contains(why)) =>
        {
            Err(misses
                .iter()
                .enumerate()
                .map(|(i, why)| format!("match {}: {why}", i + 1))
                .collect::<Vec<_>>()
                .join(", "))
        }
        None => Err(misses.join(", ")),
    }
}

/// The best host match of a route, or why none applies.
fn best_host(hosts: &[HostMatch], host: Option<&str>) -> Result<HostScore, String> {
    let names = || {
        hosts
            .iter()
            .map(crate::output::host_text)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(host) = host else {
        return Err(format!(
            "it applies to hosts {} and the request names no host",
            names()
        ));
    };
    hosts
        .iter()
        .filter_map(|m| host_score(m, host))
        .reduce(|a, b| if a >= b { a } else { b })
        .ok_or_else(|| format!("host {host} is not one of {}", names()))
}

/// How `host` matches one host match, if it does.
fn host_score(m: &HostMatch, host: &str) -> Option<HostScore> {
    match m.r#match.as_ref()? {
        host_match::Match::Exact(name) => {
            let host = if name.ends_with('.') {
                host
            } else {
                host.strip_suffix('.').unwrap_or(host)
            };
            name.eq_ignore_ascii_case(host)
                .then_some(HostScore::Exact(name.len()))
        }
        host_match::Match::Suffix(suffix) => {
            let labels = &suffix.reverse_labels;
            let mut rest = if labels.first().is_some_and(|l| l.is_empty()) {
                host
            } else {
                host.strip_suffix('.').unwrap_or(host)
            };
            let mut length = 0;
            for label in labels {
                let cut = rest.len().checked_sub(label.len())?;
                let (head, tail) = (rest.get(..cut)?, rest.get(cut..)?);
                if !tail.eq_ignore_ascii_case(label) {
                    return None;
                }
                // At least one more label must come before each suffix label.
                rest = head.strip_suffix('.')?;
                length += label.len() + 1;
            }
            Some(HostScore::Suffix(length))
        }
    }
}

/// Scores an HTTP match against `request`, or says which condition fails first (the method,
/// then the path, headers and query parameters, in the proxy's order).
pub fn http_score(m: &HttpRouteMatch, request: &Request) -> Result<HttpScore, String> {
    let mut score = HttpScore::default();
    if let Some(method) = &m.method {
        let wanted = method_name(method);
        if wanted != request.method {
            return Err(format!("method is not {wanted}"));
        }
        score.method = true;
    }
    if let Some(path) = &m.path {
        score.path = path_length(path.kind.as_ref(), &request.path)?;
    }
    for h in &m.headers {
        header_matches(h, request)?;
    }
    score.headers = m.headers.len();
    for q in &m.query_params {
        query_matches(q, request)?;
    }
    score.query_params = m.query_params.len();
    Ok(score)
}

/// Scores a gRPC match against `request`: `POST` to `/service/method`, then headers.
pub fn grpc_score(m: &GrpcRouteMatch, request: &Request) -> Result<GrpcScore, String> {
    if request.method != "POST" {
        return Err("a gRPC call is a POST".into());
    }
    let mut parts = request.path.split('/');
    let (Some(""), Some(service), Some(method)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("path {} is not /<service>/<method>", request.path));
    };
    let mut score = GrpcScore::default();
    if let Some(rpc) = &m.rpc {
        if !rpc.service.is_empty() {
            if rpc.service != service {
                return Err(format!("service is not {}", rpc.service));
            }
            score.service = rpc.service.len();
        }
        if !rpc.method.is_empty() {
            if rpc.method != method {
                return Err(format!("method is not {}", rpc.method));
            }
            score.method = rpc.method.len();
        }
    }
    for h in &m.headers {
        header_matches(h, request)?;
    }
    score.headers = m.headers.len();
    Ok(score)
}

/// The score of a rule without matches (a `/` prefix).
pub const DEFAULT_HTTP_SCORE: HttpScore = HttpScore {
    path: 1,
    method: false,
    headers: 0,
    query_params: 0,
};

impl Default for HttpScore {
    fn default() -> Self {
        DEFAULT_HTTP_SCORE
    }
}

/// The length of the path matched, or why it does not match.
fn path_length(kind: Option<&path_match::Kind>, path: &str) -> Result<usize, String> {
    match kind {
        Some(path_match::Kind::Exact(exact)) if exact == path => Ok(exact.len()),
        Some(path_match::Kind::Exact(exact)) => Err(format!("path is not {exact}")),
        Some(path_match::Kind::Prefix(prefix)) => {
            if prefix == "/" {
                return Ok(1);
            }
            let prefix = prefix.trim_end_matches('/');
            // Whole segments only: `/api` covers `/api` and `/api/x`, not `/apix`.
            match path.trim_end_matches('/').strip_prefix(prefix) {
                Some(rest) if rest.is_empty() || rest.starts_with('/') => Ok(prefix.len()),
                _ => Err(format!("path is not under {prefix}")),
            }
        }
        Some(path_match::Kind::Regex(re)) => {
            if anchored_match(re, path)? {
                Ok(path.len())
            } else {
                Err(format!("path does not match ~{re}"))
            }
        }
        None => Err(EMPTY_PATH.into()),
    }
}

const EMPTY_PATH: &str = "its path match is empty";

/// Why the proxy refuses one of `routes`' matches, as `route NAME rule R match M: why` (`NAME`
/// from `name(index)`, `R` and `M` from 1), or `None` when it converts them all.
///
/// The proxy converts a whole policy before it uses any of it, and a policy with one match it
/// cannot convert is replaced by one that fails everything (linkerd2-proxy's outbound and
/// inbound policy clients: `ClientPolicy::invalid`, `ServerPolicy::invalid`): one bad match
/// anywhere decides every request, whichever route the request would have taken.
pub fn invalid_match<R: RouteMatches>(
    routes: &[R],
    check: impl Fn(&R::Match) -> Result<(), String>,
    name: impl Fn(usize) -> String,
) -> Option<String> {
    routes.iter().enumerate().find_map(|(i, route)| {
        route
            .rules()
            .into_iter()
            .enumerate()
            .find_map(|(r, matches)| {
                matches.iter().enumerate().find_map(|(m, one)| {
                    check(one).err().map(|why| {
                        format!("route {} rule {} match {}: {why}", name(i), r + 1, m + 1)
                    })
                })
            })
    })
}

/// The first redirect of `routes` the proxy cannot convert ([`check_redirect`]), as
/// `route NAME rule R: why` (`NAME` from `name(index)`, `R` from 1); the proxy refuses the
/// whole policy for one, as for a match ([`invalid_match`]).
pub fn invalid_redirect<R: RouteMatches>(
    routes: &[R],
    name: impl Fn(usize) -> String,
) -> Option<String> {
    routes.iter().enumerate().find_map(|(i, route)| {
        route.redirects().into_iter().find_map(|(rule, redirect)| {
            check_redirect(redirect)
                .err()
                .map(|why| format!("route {} rule {}: {why}", name(i), rule + 1))
        })
    })
}

/// Whether the proxy converts an HTTP match: a path match has a kind, header names are header
/// names, query parameters have a name, header and query parameter matches have a value, and
/// every regex compiles as the proxy compiles it.
pub fn check_http_match(m: &HttpRouteMatch) -> Result<(), String> {
    match m.path.as_ref().map(|p| p.kind.as_ref()) {
        Some(None) => return Err(EMPTY_PATH.into()),
        Some(Some(path_match::Kind::Regex(re))) => {
            proxy_regex(re)?;
        }
        _ => {}
    }
    m.headers.iter().try_for_each(check_header)?;
    for q in &m.query_params {
        if q.name.is_empty() {
            return Err("a query parameter match has no name".into());
        }
        match &q.value {
            None => return Err(no_query_value(q)),
            Some(query_param_match::Value::Regex(re)) => {
                proxy_regex(re)?;
            }
            Some(query_param_match::Value::Exact(_)) => {}
        }
    }
    Ok(())
}

/// Whether the proxy converts a gRPC match: its header names are header names, its header
/// matches have a value and their regexes compile.
pub fn check_grpc_match(m: &GrpcRouteMatch) -> Result<(), String> {
    m.headers.iter().try_for_each(check_header)
}

fn check_header(h: &HeaderMatch) -> Result<(), String> {
    if http::HeaderName::from_bytes(h.name.as_bytes()).is_err() {
        return Err(format!("header name {:?} is invalid", h.name));
    }
    match &h.value {
        None => Err(no_header_value(h)),
        Some(header_match::Value::Regex(re)) => proxy_regex(re).map(drop),
        Some(header_match::Value::Exact(_)) => Ok(()),
    }
}

/// Whether the proxy converts a redirect: its host, with its port when it names one, must be
/// a URI authority (`new.example.com:8443`), and the port at most 65535 (linkerd2-proxy's
/// `RedirectRequest` conversion).
pub fn check_redirect(r: &RequestRedirect) -> Result<(), String> {
    if r.port > u32::from(u16::MAX) {
        return Err(format!("its redirect's port {} is not a port", r.port));
    }
    if r.host.is_empty() {
        return Ok(());
    }
    let authority = match r.port {
        0 => r.host.clone(),
        port => format!("{}:{port}", r.host),
    };
    http::uri::Authority::try_from(authority.as_str())
        .map(drop)
        .map_err(|e| format!("its redirect's authority {authority:?} is invalid: {e}"))
}

/// What the proxy answers to a request that a rule with `redirect` matched by `matched` (the
/// rule's match that decided, `None` for a rule without matches): `Ok` with the redirect
/// (`the proxy answers HTTP 302 to https://new.example.com, path /new`), or `Err` with why it
/// fails the request instead: a redirect that replaces the matched prefix after an exact or
/// regex path match, or whose path is no URI path (linkerd2-proxy's `RedirectRequest::apply`:
/// `InvalidRedirect::ReplacePrefix`, `InvalidRedirect::Location`). Without a status the proxy
/// answers 301.
pub fn redirect_answer(
    redirect: &RequestRedirect,
    matched: Option<&HttpRouteMatch>,
) -> Result<String, String> {
    use linkerd2_proxy_api::http_route::path_modifier::Replace;
    let fails = "the proxy fails it with an error (HTTP 5xx)";
    let replace = redirect.path.as_ref().and_then(|p| p.replace.as_ref());
    let matched_path = matched
        .and_then(|m| m.path.as_ref())
        .and_then(|p| p.kind.as_ref());
    if let (
        Some(Replace::Prefix(_)),
        Some(path_match::Kind::Exact(_) | path_match::Kind::Regex(_)),
    ) = (replace, matched_path)
    {
        return Err(format!(
            "redirects by replacing the matched path prefix, but the request matched a path \
             that is not a prefix: {fails}"
        ));
    }
    if let Some(Replace::Full(path) | Replace::Prefix(path)) = replace
        && http::uri::PathAndQuery::try_from(path.as_str()).is_err()
    {
        return Err(format!(
            "redirects to {path:?}, which is no URI path: {fails}"
        ));
    }
    let status = match redirect.status {
        0 => 301,
        status => status,
    };
    Ok(format!(
        "the proxy answers HTTP {status} to {}",
        redirect_target_text(redirect)
    ))
}

/// Where a redirect sends the client, in words: what the filter sets, and what it keeps of
/// the request (`https://new.example.com:8443, the matched path prefix replaced by /new`).
fn redirect_target_text(r: &RequestRedirect) -> String {
    use linkerd2_proxy_api::http_route::path_modifier::Replace;
    let mut origin = String::new();
    if let Some(scheme) = &r.scheme {
        origin.push_str(&format!("{}://", crate::output::scheme_text(scheme)));
    }
    origin.push_str(if r.host.is_empty() {
        "<the request's host>"
    } else {
        &r.host
    });
    if r.port != 0 {
        origin.push_str(&format!(":{}", r.port));
    }
    let path = match r.path.as_ref().and_then(|p| p.replace.as_ref()) {
        Some(Replace::Full(path)) => format!("path {path}"),
        Some(Replace::Prefix(prefix)) => {
            format!("the matched path prefix replaced by {prefix}")
        }
        None => "the request's path".to_string(),
    };
    format!("{origin}, {path}")
}

fn no_header_value(h: &HeaderMatch) -> String {
    format!(
        "header {} has no value to match",
        h.name.to_ascii_lowercase()
    )
}

fn no_query_value(q: &QueryParamMatch) -> String {
    format!("query parameter {} has no value to match", q.name)
}

/// Whether `re` matches all of `value`: the proxy takes the leftmost match and requires it to
/// span the value, which is not quite a full match for alternations (`a|ab` on `ab`).
/// The regex is compiled as the proxy compiles it, within the index's bounds of length and
/// nesting (`compile_regex_as_the_proxy`): a policy from elsewhere must not take this tool to
/// gigabytes either.
fn anchored_match(re: &str, value: &str) -> Result<bool, String> {
    Ok(proxy_regex(re)?
        .find(value)
        .is_some_and(|m| m.start() == 0 && m.end() == value.len()))
}

/// `re` compiled as the proxy compiles it, or why it does not compile:
/// `regex "(" is invalid: ...`, a pattern shown up to 100 characters.
///
/// Each pattern is compiled once per thread and remembered: the whole-policy check and the
/// matching ask for the same patterns, and a large one takes long to compile (tester finding:
/// 40 matches of `/xN\w{150}` took 40 s in a debug build, compiled twice). `dst-diag` explains
/// one policy per run, so what is remembered is one policy's patterns.
fn proxy_regex(re: &str) -> Result<regex::Regex, String> {
    thread_local! {
        static COMPILED: std::cell::RefCell<std::collections::HashMap<String, Result<regex::Regex, String>>> =
            Default::default();
    }
    if let Some(known) = COMPILED.with_borrow(|c| c.get(re).cloned()) {
        return known;
    }
    let compiled = compile_regex_as_the_proxy(re).map_err(|e| {
        // A pattern refused for its length is not printed whole.
        let shown: String = re.chars().take(100).collect();
        let more = if shown.len() < re.len() { "..." } else { "" };
        format!("regex {shown:?}{more} is invalid: {e}")
    });
    COMPILED.with_borrow_mut(|c| c.insert(re.to_string(), compiled.clone()));
    compiled
}

fn header_matches(h: &HeaderMatch, request: &Request) -> Result<(), String> {
    let name = h.name.to_ascii_lowercase();
    let ok = match &h.value {
        Some(header_match::Value::Exact(value)) => request
            .header_values(&name)
            .any(|v| v.as_bytes() == value.as_slice()),
        // The proxy tests a regex against a value only as text, which a value with bytes
        // outside visible ASCII (and tab) is not to it (`HeaderValue::to_str`).
        Some(header_match::Value::Regex(re)) => {
            let mut ok = false;
            for v in request.header_values(&name).filter(|v| is_header_text(v)) {
                ok |= anchored_match(re, v)?;
            }
            ok
        }
        None => return Err(no_header_value(h)),
    };
    if ok {
        return Ok(());
    }
    if request.header_values(&name).next().is_none() {
        return Err(format!("header {name} is missing"));
    }
    Err(match &h.value {
        Some(header_match::Value::Exact(value)) => {
            format!("header {name} is not {}", String::from_utf8_lossy(value))
        }
        Some(header_match::Value::Regex(re))
            if !request.header_values(&name).any(is_header_text) =>
        {
            format!(
                "header {name} is not visible ASCII, which the proxy does not match against \
                 ~{re}"
            )
        }
        Some(header_match::Value::Regex(re)) => format!("header {name} does not match ~{re}"),
        None => unreachable!("handled above"),
    })
}

/// Whether the proxy reads a header value as text: visible ASCII and tabs only.
fn is_header_text(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
}

fn query_matches(q: &QueryParamMatch, request: &Request) -> Result<(), String> {
    let pairs = request.query_pairs();
    let mut values = pairs.iter().filter(|(n, _)| *n == q.name).map(|(_, v)| v);
    let ok = match &q.value {
        Some(query_param_match::Value::Exact(value)) => values.any(|v| v == value),
        Some(query_param_match::Value::Regex(re)) => {
            let mut ok = false;
            for v in values {
                ok |= anchored_match(re, v)?;
            }
            ok
        }
        None => return Err(no_query_value(q)),
    };
    if ok {
        Ok(())
    } else if !pairs.iter().any(|(n, _)| *n == q.name) {
        Err(format!("query parameter {} is missing", q.name))
    } else {
        Err(match &q.value {
            Some(query_param_match::Value::Exact(v)) => {
                format!("query parameter {} is not {v}", q.name)
            }
            Some(query_param_match::Value::Regex(re)) => {
                format!("query parameter {} does not match ~{re}", q.name)
            }
            None => unreachable!("handled above"),
        })
    }
}

/// The method a match names, as it appears on the wire.
fn method_name(method: &HttpMethod) -> String {
    match &method.r#type {
        Some(http_method::Type::Unregistered(name)) => name.clone(),
        _ => method_text(method),
    }
}

/// Decodes `+` and `%XX` escapes; a malformed escape stays as it is.
fn form_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests;
