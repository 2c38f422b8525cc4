use super::*;
use linkerd2_proxy_api::{
    grpc_route::GrpcRpcMatch,
    http_route::{PathMatch, host_match::Suffix},
    inbound::{HttpRoute, http_route},
};

fn get(path: &str) -> Request {
    Request {
        method: "GET".into(),
        path: path.into(),
        ..Default::default()
    }
}

fn path(kind: path_match::Kind) -> HttpRouteMatch {
    HttpRouteMatch {
        path: Some(PathMatch { kind: Some(kind) }),
        ..Default::default()
    }
}

fn prefix(p: &str) -> HttpRouteMatch {
    path(path_match::Kind::Prefix(p.into()))
}

fn exact(p: &str) -> HttpRouteMatch {
    path(path_match::Kind::Exact(p.into()))
}

fn route(hosts: Vec<HostMatch>, rules: Vec<Vec<HttpRouteMatch>>) -> HttpRoute {
    HttpRoute {
        hosts,
        rules: rules
            .into_iter()
            .map(|matches| http_route::Rule {
                matches,
                filters: vec![],
            })
            .collect(),
        ..Default::default()
    }
}

fn exact_host(h: &str) -> HostMatch {
    HostMatch {
        r#match: Some(host_match::Match::Exact(h.into())),
    }
}

fn suffix_host(reverse_labels: &[&str]) -> HostMatch {
    HostMatch {
        r#match: Some(host_match::Match::Suffix(Suffix {
            reverse_labels: reverse_labels.iter().map(|l| l.to_string()).collect(),
        })),
    }
}

fn choose_http(routes: &[HttpRoute], request: &Request) -> RouteChoice<HttpScore> {
    choose(
        routes,
        request,
        http_score,
        DEFAULT_HTTP_SCORE,
        crate::output::http_match_text,
    )
}

#[test]
fn prefixes_match_whole_segments() {
    let score = |p: &str, m: &HttpRouteMatch| http_score(m, &get(p)).map(|s| s.path);
    assert_eq!(score("/api", &prefix("/api")), Ok(4));
    assert_eq!(score("/api/", &prefix("/api/")), Ok(4));
    assert_eq!(score("/api/list", &prefix("/api")), Ok(4));
    assert_eq!(
        score("/apix", &prefix("/api")),
        Err("path is not under /api".into())
    );
    assert_eq!(score("/anything", &prefix("/")), Ok(1));
    assert_eq!(score("/api/list", &exact("/api/list")), Ok(9));
    assert_eq!(
        score("/api/list/", &exact("/api/list")),
        Err("path is not /api/list".into())
    );
}

#[test]
fn regexes_must_span_the_whole_value() {
    let m = path(path_match::Kind::Regex(r"/foo/\d+".into()));
    assert_eq!(http_score(&m, &get("/foo/42")).map(|s| s.path), Ok(7));
    assert!(http_score(&m, &get("/foo/42/bar")).is_err());
    assert!(http_score(&m, &get("/x/foo/42")).is_err());
    // The proxy takes the leftmost match, which for `a|ab` on `/ab` is `/a`: no match.
    let alternation = path(path_match::Kind::Regex("/a|/ab".into()));
    assert!(http_score(&alternation, &get("/ab")).is_err());
    let invalid = path(path_match::Kind::Regex("(".into()));
    let why = http_score(&invalid, &get("/")).unwrap_err();
    assert!(why.starts_with("regex \"(\" is invalid"), "{why}");
}

/// A regex over the controllers' bounds (1.4 MiB of `(a|b)*` took a validator to 320 MB) is
/// refused before it is compiled, and the message shows its start only.
#[test]
fn regexes_are_compiled_within_bounds() {
    let huge = "(a|b)*".repeat(240_000);
    let m = path(path_match::Kind::Regex(huge.clone()));
    let why = http_score(&m, &get("/")).unwrap_err();
    let start: String = huge.chars().take(100).collect();
    assert_eq!(
        why,
        format!(
            "regex {start:?}... is invalid: the pattern is 1440000 bytes long, more than the 8192 allowed"
        )
    );
}

/// A regex the proxy compiles is evaluated, though past the webhooks' 1 MiB once compiled
/// (tester finding: `/\p{L}{200}` was called invalid, the policy failed by the proxy).
#[test]
fn regexes_are_compiled_as_the_proxy_compiles_them() {
    let m = path(path_match::Kind::Regex(r"/\p{L}{200}".into()));
    let letters = format!("/{}", "é".repeat(200));
    assert_eq!(
        http_score(&m, &get(&letters)).map(|s| s.path),
        Ok(letters.len())
    );
    assert!(http_score(&m, &get("/abc")).is_err());
}

#[test]
fn method_headers_and_query_parameters() {
    let m = HttpRouteMatch {
        method: Some(HttpMethod {
            r#type: Some(http_method::Type::Registered(
                http_method::Registered::Post as i32,
            )),
        }),
        headers: vec![HeaderMatch {
            name: "X-Env".into(),
            value: Some(header_match::Value::Exact(b"prod".to_vec())),
        }],
        query_params: vec![QueryParamMatch {
            name: "v".into(),
            value: Some(query_param_match::Value::Regex("2.*".into())),
        }],
        ..Default::default()
    };
    let mut request = get("/");
    assert_eq!(http_score(&m, &request), Err("method is not POST".into()));
    request.method = "POST".into();
    assert_eq!(
        http_score(&m, &request),
        Err("header x-env is missing".into())
    );
    request.headers.push(("x-env".into(), "dev".into()));
    assert_eq!(
        http_score(&m, &request),
        Err("header x-env is not prod".into())
    );
    request.headers.push(("x-env".into(), "prod".into()));
    assert_eq!(
        http_score(&m, &request),
        Err("query parameter v is missing".into())
    );
    request.query = Some("v=1.0".into());
    assert_eq!(
        http_score(&m, &request),
        Err("query parameter v does not match ~2.*".into())
    );
    request.query = Some("a=b&v=2%2E1+x".into());
    assert_eq!(
        http_score(&m, &request),
        Ok(HttpScore {
            path: 1,
            method: true,
            headers: 1,
            query_params: 1
        })
    );
}

#[test]
fn the_longest_path_wins_then_the_method_then_the_earliest() {
    let with_method = HttpRouteMatch {
        method: Some(HttpMethod {
            r#type: Some(http_method::Type::Registered(
                http_method::Registered::Get as i32,
            )),
        }),
        ..prefix("/api")
    };
    let routes = [
        route(vec![], vec![vec![prefix("/")]]),
        route(vec![], vec![vec![prefix("/api")]]),
        route(vec![], vec![vec![with_method.clone()]]),
        route(vec![], vec![vec![with_method]]),
    ];
    let choice = choose_http(&routes, &get("/api/list"));
    assert_eq!(choice.selected, Some(2));
    let lines = route_lines(&choice, |i| format!("r{i}"));
    assert_eq!(
        lines,
        [
            "route r0: not selected: matches less specifically (rule 1 matches path^=/)",
            "route r1: not selected: matches less specifically (rule 1 matches path^=/api)",
            "route r2: selected: rule 1 matches method=GET path^=/api",
            "route r3: not selected: matches as well, but an earlier route wins (rule 1 matches method=GET path^=/api)",
        ]
    );
    // A longer exact path beats a shorter one with a method.
    let routes = [
        route(vec![], vec![vec![exact("/api/list")]]),
        route(vec![], vec![vec![prefix("/api")]]),
    ];
    assert_eq!(choose_http(&routes, &get("/api/list")).selected, Some(0));
}

#[test]
fn rules_without_matches_match_everything_and_misses_say_why() {
    let routes = [route(vec![], vec![vec![exact("/a"), exact("/b")], vec![]])];
    let choice = choose_http(&routes, &get("/c"));
    assert_eq!(choice.selected, Some(0));
    assert_eq!(selected_rule(&choice, 0), Some(1));
    let routes = [route(vec![], vec![vec![exact("/a"), exact("/b")]])];
    let choice = choose_http(&routes, &get("/c"));
    assert_eq!(choice.selected, None);
    assert_eq!(
        choice.outcomes,
        [RouteOutcome::Misses(
            "rule 1: path is not /a, path is not /b".into()
        )]
    );
}

#[test]
fn matches_missing_for_the_same_reason_are_numbered() {
    let post = || {
        Some(HttpMethod {
            r#type: Some(http_method::Type::Registered(
                http_method::Registered::Post as i32,
            )),
        })
    };
    let mut first = exact("/a");
    first.method = post();
    let mut second = exact("/a");
    second.method = post();
    let routes = [route(vec![], vec![vec![first, second]])];
    let choice = choose_http(&routes, &get("/a"));
    assert_eq!(choice.selected, None);
    assert_eq!(
        choice.outcomes,
        [RouteOutcome::Misses(
            "rule 1: match 1: method is not POST, match 2: method is not POST".into()
        )]
    );
}

#[test]
fn hosts_exact_beats_suffix_and_a_suffix_needs_a_label() {
    let routes = [
        route(vec![suffix_host(&["com", "example"])], vec![vec![]]),
        route(vec![exact_host("web.example.com")], vec![vec![]]),
        route(vec![], vec![vec![]]),
    ];
    let mut request = get("/");
    request.host = Some("WEB.example.com.".into());
    assert_eq!(choose_http(&routes, &request).selected, Some(1));
    request.host = Some("api.example.com".into());
    assert_eq!(choose_http(&routes, &request).selected, Some(0));
    request.host = Some("example.com".into());
    let choice = choose_http(&routes, &request);
    assert_eq!(choice.selected, Some(2));
    assert_eq!(
        choice.outcomes[0],
        RouteOutcome::Misses("host example.com is not one of *.example.com".into())
    );
    request.host = None;
    assert_eq!(
        choose_http(&routes, &request).outcomes[1],
        RouteOutcome::Misses(
            "it applies to hosts web.example.com and the request names no host".into()
        )
    );
}

#[test]
fn grpc_calls_are_posts_to_service_and_method() {
    let m = GrpcRouteMatch {
        rpc: Some(GrpcRpcMatch {
            service: "emojivoto.v1.VotingService".into(),
            method: String::new(),
        }),
        headers: vec![],
    };
    let call = |method: &str, path: &str| Request {
        method: method.into(),
        path: path.into(),
        ..Default::default()
    };
    assert_eq!(
        grpc_score(
            &m,
            &call("POST", "/emojivoto.v1.VotingService/VoteDoughnut")
        ),
        Ok(GrpcScore {
            service: 26,
            method: 0,
            headers: 0
        })
    );
    assert_eq!(
        grpc_score(&m, &call("GET", "/emojivoto.v1.VotingService/VoteDoughnut")),
        Err("a gRPC call is a POST".into())
    );
    assert_eq!(
        grpc_score(&m, &call("POST", "/emojivoto.v1.EmojiService/ListAll")),
        Err("service is not emojivoto.v1.VotingService".into())
    );
    assert_eq!(
        grpc_score(&m, &call("POST", "/")),
        Err("path / is not /<service>/<method>".into())
    );
}

#[test]
fn form_decoding() {
    assert_eq!(form_decode("a+b%2Fc"), "a b/c");
    assert_eq!(form_decode("100%"), "100%");
    assert_eq!(form_decode("%zz"), "%zz");
    assert_eq!(form_decode("%e2%82%ac"), "€");
}

/// The proxy matches a header regex only against values it reads as text (visible ASCII and
/// tabs): `.*` does not match `prödüction` (tester finding: explain selected the route).
#[test]
fn header_regexes_skip_values_that_are_not_visible_ascii() {
    use linkerd2_proxy_api::http_route::{HeaderMatch, header_match};
    let m = HttpRouteMatch {
        headers: vec![HeaderMatch {
            name: "x-env".into(),
            value: Some(header_match::Value::Regex(".*".into())),
        }],
        ..Default::default()
    };
    let with = |value: &str| Request {
        headers: vec![("x-env".into(), value.into())],
        ..get("/")
    };
    assert!(http_score(&m, &with("prod\tuction")).is_ok());
    assert_eq!(
        http_score(&m, &with("prödüction")),
        Err("header x-env is not visible ASCII, which the proxy does not match against ~.*".into())
    );
    let exact = HttpRouteMatch {
        headers: vec![HeaderMatch {
            name: "x-env".into(),
            value: Some(header_match::Value::Exact("prödüction".as_bytes().to_vec())),
        }],
        ..Default::default()
    };
    // An exact match compares bytes.
    assert!(http_score(&exact, &with("prödüction")).is_ok());
}
