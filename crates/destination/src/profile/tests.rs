use super::*;
use linkerd_k8s_api::service_profile::v1alpha2::ServiceProfile;

const EMOJIVOTO: &str = include_str!("../../../../tests/fixtures/emojivoto/cluster.yaml");

/// The ServiceProfile of that name in a multi-document `kubectl get -o yaml` snapshot.
fn cluster_profile(yaml: &str, name: &str) -> ProfileInfo {
    let docs: Vec<serde_json::Value> =
        linkerd_k8s_api::yaml::from_documents(yaml).expect("documents decode");
    let value = docs
        .into_iter()
        .find(|v| {
            v.get("kind").and_then(|k| k.as_str()) == Some("ServiceProfile")
                && v["metadata"]["name"].as_str() == Some(name)
        })
        .expect("profile is in the snapshot");
    let sp: ServiceProfile = serde_json::from_value(value).expect("profile decodes");
    ProfileInfo::from_service_profile(&sp).expect("profile is valid")
}

fn fixture_profile(yaml: &str) -> ProfileInfo {
    let sp: ServiceProfile = linkerd_k8s_api::yaml::from_str(yaml).expect("fixture decodes");
    ProfileInfo::from_service_profile(&sp).expect("profile is valid")
}

fn mk_target(service: &str, namespace: &str, port: u16) -> ServiceProfileTarget {
    ServiceProfileTarget {
        fqn: format!("{service}.{namespace}.svc.cluster.local"),
        namespace: namespace.to_string(),
        service: service.to_string(),
        port,
        opaque: false,
    }
}

fn secs(seconds: i64, nanos: i32) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds, nanos })
}

fn registered(method: http_method::Registered) -> RequestMatch {
    RequestMatch {
        r#match: Some(request_match::Match::Method(HttpMethod {
            r#type: Some(http_method::Type::Registered(method.into())),
        })),
    }
}

fn path(regex: &str) -> RequestMatch {
    RequestMatch {
        r#match: Some(request_match::Match::Path(PathMatch {
            regex: regex.to_string(),
        })),
    }
}

fn all(matches: Vec<RequestMatch>) -> RequestMatch {
    RequestMatch {
        r#match: Some(request_match::Match::All(request_match::Seq { matches })),
    }
}

fn method_path(method: http_method::Registered, regex: &str) -> Option<RequestMatch> {
    Some(all(vec![registered(method), path(regex)]))
}

fn mk_route(name: &str, condition: Option<RequestMatch>) -> Route {
    Route {
        condition,
        response_classes: vec![],
        metrics_labels: [("route".to_string(), name.to_string())]
            .into_iter()
            .collect(),
        is_retryable: false,
        timeout: None,
    }
}

fn parent_ref(service: &str, namespace: &str, port: u32) -> Option<Metadata> {
    Some(resource(Resource {
        group: "core".into(),
        kind: "Service".into(),
        name: service.into(),
        namespace: namespace.into(),
        port,
        ..Resource::default()
    }))
}

fn profile_ref(name: &str, namespace: &str) -> Option<Metadata> {
    Some(resource(Resource {
        group: "linkerd.io".into(),
        kind: "ServiceProfile".into(),
        name: name.into(),
        namespace: namespace.into(),
        ..Resource::default()
    }))
}

use http_method::Registered::{Get, Post};

/// Fact 7: GetProfile web-svc.emojivoto.svc.cluster.local:80.
#[test]
fn emojivoto_web_svc() {
    let sp = cluster_profile(EMOJIVOTO, "web-svc.emojivoto.svc.cluster.local");
    let got = service_profile(&mk_target("web-svc", "emojivoto", 80), Some(&sp));
    let want = DestinationProfile {
        fully_qualified_name: "web-svc.emojivoto.svc.cluster.local".into(),
        opaque_protocol: false,
        routes: vec![
            Route {
                is_retryable: true,
                ..mk_route("GET /api/list", method_path(Get, "/api/list"))
            },
            Route {
                response_classes: vec![ResponseClass {
                    condition: Some(ResponseMatch {
                        r#match: Some(response_match::Match::Status(HttpStatusRange {
                            min: 500,
                            max: 599,
                        })),
                    }),
                    is_failure: true,
                }],
                timeout: secs(0, 500_000_000),
                ..mk_route("GET /api/vote", method_path(Get, "/api/vote"))
            },
            Route {
                is_retryable: true,
                timeout: secs(1, 0),
                ..mk_route("GET /api/leaderboard", method_path(Get, "/api/leaderboard"))
            },
            mk_route("GET /js", method_path(Get, "/js")),
            mk_route("GET /", method_path(Get, "/")),
        ],
        retry_budget: Some(RetryBudget {
            retry_ratio: 0.25,
            min_retries_per_second: 5,
            ttl: secs(15, 0),
        }),
        dst_overrides: vec![],
        endpoint: None,
        parent_ref: parent_ref("web-svc", "emojivoto", 80),
        profile_ref: profile_ref("web-svc.emojivoto.svc.cluster.local", "emojivoto"),
    };
    assert_eq!(got, want);
}

/// Fact 8: voting-svc has no budget (the default is sent); emoji-svc's escaped regexes.
#[test]
fn emojivoto_voting_and_emoji_svc() {
    let sp = cluster_profile(EMOJIVOTO, "voting-svc.emojivoto.svc.cluster.local");
    let voting = service_profile(&mk_target("voting-svc", "emojivoto", 8080), Some(&sp));
    let rpc = |name: &str| method_path(Post, &format!(r"/emojivoto\.v1\.VotingService/{name}"));
    assert_eq!(
        voting.routes,
        vec![
            Route {
                timeout: secs(0, 250_000_000),
                ..mk_route("VoteDoughnut", rpc("VoteDoughnut"))
            },
            mk_route("VotePoop", rpc("VotePoop")),
            mk_route("VoteJoy", rpc("VoteJoy")),
            mk_route("VoteSunglasses", rpc("VoteSunglasses")),
            mk_route("Vote (other emoji)", rpc("Vote[A-Za-z0-9]+")),
            Route {
                is_retryable: true,
                ..mk_route("Results", rpc("Results"))
            },
        ]
    );
    assert_eq!(
        voting.retry_budget,
        Some(RetryBudget {
            retry_ratio: 0.2,
            min_retries_per_second: 10,
            ttl: secs(10, 0),
        })
    );
    assert_eq!(
        voting.fully_qualified_name,
        "voting-svc.emojivoto.svc.cluster.local"
    );
    assert_eq!(
        voting.parent_ref,
        parent_ref("voting-svc", "emojivoto", 8080)
    );
    assert_eq!(
        voting.profile_ref,
        profile_ref("voting-svc.emojivoto.svc.cluster.local", "emojivoto")
    );

    let sp = cluster_profile(EMOJIVOTO, "emoji-svc.emojivoto.svc.cluster.local");
    let emoji = service_profile(&mk_target("emoji-svc", "emojivoto", 8080), Some(&sp));
    assert_eq!(
        emoji.routes,
        vec![
            Route {
                is_retryable: true,
                ..mk_route(
                    "ListAll",
                    method_path(Post, r"/emojivoto\.v1\.EmojiService/ListAll")
                )
            },
            Route {
                timeout: secs(0, 300_000_000),
                ..mk_route(
                    "FindByShortcode",
                    method_path(Post, r"/emojivoto\.v1\.EmojiService/FindByShortcode")
                )
            },
        ]
    );
    assert_eq!(emoji.retry_budget, Some(default_retry_budget()));
}

/// Fact 9 and §D.2 step 2: the profile of an undeclared port is the empty message.
#[test]
fn empty_profile_is_empty() {
    let empty = empty_profile();
    assert_eq!(empty, DestinationProfile::default());
    assert_eq!(empty.fully_qualified_name, "");
    assert_eq!(empty.retry_budget, None);
    assert!(empty.routes.is_empty());
    assert_eq!(empty.parent_ref, None);
    assert_eq!(empty.profile_ref, None);
}

/// Edge-case E3 (ghost): no ServiceProfile gives the default profile.
#[test]
fn default_profile() {
    let got = service_profile(&mk_target("ghost", "edge", 80), None);
    assert_eq!(
        got,
        DestinationProfile {
            fully_qualified_name: "ghost.edge.svc.cluster.local".into(),
            opaque_protocol: false,
            routes: vec![],
            retry_budget: Some(RetryBudget {
                retry_ratio: 0.2,
                min_retries_per_second: 10,
                ttl: secs(10, 0),
            }),
            dst_overrides: vec![],
            endpoint: None,
            parent_ref: parent_ref("ghost", "edge", 80),
            profile_ref: Some(resource(Resource {
                group: "linkerd.io".into(),
                ..Resource::default()
            })),
        }
    );

    let opaque = ServiceProfileTarget {
        opaque: true,
        ..mk_target("ledger", "edge", 7000)
    };
    assert!(service_profile(&opaque, None).opaque_protocol);
}

/// valid-06: weights in decimillis; the requested port is appended to a port-less authority.
#[test]
fn dst_overrides_get_the_requested_port() {
    let sp = fixture_profile(include_str!(
        "../../../../tests/fixtures/profiles/valid-06-dst-overrides.yaml"
    ));
    let got = service_profile(&mk_target("webapp", "booksapp", 7000), Some(&sp));
    assert_eq!(
        got.dst_overrides,
        vec![
            WeightedDst {
                authority: "webapp.booksapp.svc.cluster.local:7000".into(),
                weight: 9000,
                backend_ref: None,
            },
            WeightedDst {
                authority: "webapp-canary.booksapp.svc.cluster.local:7000".into(),
                weight: 1000,
                backend_ref: None,
            },
        ]
    );
    assert_eq!(got.routes, vec![mk_route("GET /", method_path(Get, "/"))]);
    assert_eq!(got.retry_budget, Some(default_retry_budget()));
}

/// valid-05: the spec's budget; fractional and compound timeouts as `{seconds, nanos}`.
#[test]
fn retry_budget_and_timeouts() {
    let sp = fixture_profile(include_str!(
        "../../../../tests/fixtures/profiles/valid-05-retries-timeouts.yaml"
    ));
    let got = service_profile(&mk_target("authors", "booksapp", 7001), Some(&sp));
    assert_eq!(
        got.retry_budget,
        Some(RetryBudget {
            retry_ratio: 0.5,
            min_retries_per_second: 3,
            ttl: secs(60, 0),
        })
    );
    let timeouts: Vec<_> = got.routes.iter().map(|r| r.timeout).collect();
    assert_eq!(
        timeouts,
        [
            secs(1, 500_000_000),
            secs(0, 25_000_000),
            secs(90, 0),
            secs(7200, 0)
        ]
    );
    let retryable: Vec<_> = got.routes.iter().map(|r| r.is_retryable).collect();
    assert_eq!(retryable, [true, false, true, false]);

    // A zero TTL leaves `ttl` unset rather than falling back to the default.
    let zero_ttl = ProfileInfo {
        retry_budget: Some(profile::RetryBudget {
            retry_ratio: 1.5,
            min_retries_per_second: 0,
            ttl: None,
        }),
        ..sp
    };
    let got = service_profile(&mk_target("authors", "booksapp", 7001), Some(&zero_ttl));
    assert_eq!(
        got.retry_budget,
        Some(RetryBudget {
            retry_ratio: 1.5,
            min_retries_per_second: 0,
            ttl: None,
        })
    );
}

#[test]
fn methods_and_nested_matches() {
    let sp = ProfileInfo {
        namespace: "ns".into(),
        name: "svc.ns.svc.cluster.local".into(),
        routes: vec![profile::Route {
            name: "r".into(),
            condition: profile::RequestMatch::Any(vec![
                profile::RequestMatch::Method("PURGE".into()),
                profile::RequestMatch::Not(Box::new(profile::RequestMatch::Method("TRACE".into()))),
            ]),
            response_classes: vec![profile::ResponseClass {
                condition: profile::ResponseMatch::Any(vec![
                    profile::ResponseMatch::Status { min: 500, max: 0 },
                    profile::ResponseMatch::Not(Box::new(profile::ResponseMatch::All(vec![]))),
                ]),
                is_failure: false,
            }],
            is_retryable: false,
            timeout: None,
        }],
        retry_budget: None,
        dst_overrides: vec![],
    };
    let got = service_profile(&mk_target("svc", "ns", 80), Some(&sp));
    let route = &got.routes[0];
    assert_eq!(
        route.condition,
        Some(RequestMatch {
            r#match: Some(request_match::Match::Any(request_match::Seq {
                matches: vec![
                    RequestMatch {
                        r#match: Some(request_match::Match::Method(HttpMethod {
                            r#type: Some(http_method::Type::Unregistered("PURGE".into())),
                        })),
                    },
                    RequestMatch {
                        r#match: Some(request_match::Match::Not(Box::new(registered(
                            http_method::Registered::Trace
                        )))),
                    },
                ],
            })),
        })
    );
    assert_eq!(
        route.response_classes,
        vec![ResponseClass {
            condition: Some(ResponseMatch {
                r#match: Some(response_match::Match::Any(response_match::Seq {
                    matches: vec![
                        ResponseMatch {
                            r#match: Some(response_match::Match::Status(HttpStatusRange {
                                min: 500,
                                max: 0,
                            })),
                        },
                        ResponseMatch {
                            r#match: Some(response_match::Match::Not(Box::new(ResponseMatch {
                                r#match: Some(response_match::Match::All(response_match::Seq {
                                    matches: vec![],
                                })),
                            }))),
                        },
                    ],
                })),
            }),
            is_failure: false,
        }]
    );

    for (name, want) in [
        ("GET", http_method::Registered::Get),
        ("POST", http_method::Registered::Post),
        ("PUT", http_method::Registered::Put),
        ("DELETE", http_method::Registered::Delete),
        ("PATCH", http_method::Registered::Patch),
        ("OPTIONS", http_method::Registered::Options),
        ("CONNECT", http_method::Registered::Connect),
        ("HEAD", http_method::Registered::Head),
        ("TRACE", http_method::Registered::Trace),
    ] {
        assert_eq!(
            http_method(name).r#type,
            Some(http_method::Type::Registered(want.into())),
            "{name}"
        );
    }
}

#[test]
fn dst_authorities() {
    let cases = [
        (
            "web.ns.svc.cluster.local:7000",
            "web.ns.svc.cluster.local:7000",
        ),
        ("web.ns.svc.cluster.local", "web.ns.svc.cluster.local:8080"),
        ("web", "web:8080"),
        ("web:", "web:8080"),
        ("10.0.0.1", "10.0.0.1:8080"),
        ("10.0.0.1:9000", "10.0.0.1:9000"),
        ("fd00::1", "[fd00::1]:8080"),
        ("fd00::1:9000", "[fd00::1:9000]:8080"),
        ("[fd00::1]", "[fd00::1]:8080"),
        ("[fd00::1]:", "[fd00::1]:8080"),
        ("[fd00::1]:9000", "[fd00::1]:9000"),
        ("web:99999", "[web:99999]:8080"),
        ("web:http", "[web:http]:8080"),
        ("", ":8080"),
        // What the index logs as resolving nowhere (`unresolvable_authority`) is sent so.
        ("web:+80", "[web:+80]:8080"),
        ("web:0", "web:0"),
        ("[fd00::1]:0", "[fd00::1]:0"),
        ("[fd00::1]:99999", "[[fd00::1]:99999]:8080"),
        ("fd00::1:99999", "[fd00::1:99999]:8080"),
    ];
    for (authority, want) in cases {
        assert_eq!(dst_authority(authority, 8080), want, "{authority}");
    }
}
