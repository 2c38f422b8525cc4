use super::*;
use linkerd2_proxy_api::{
    destination::{
        HttpStatusRange, PathMatch, ProtocolHint, TlsIdentity, WeightedAddr,
        protocol_hint::{H2, Protocol},
        tls_identity::{DnsLikeIdentity, Strategy},
    },
    meta::Resource,
};
use std::collections::HashMap;

const WEB_FQN: &str = "web-svc.emojivoto.svc.cluster.local";
const WEB_ID: &str = "web.emojivoto.serviceaccount.identity.linkerd.cluster.local";

fn duration(seconds: i64, nanos: i32) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds, nanos })
}

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn resource(group: &str, kind: &str, name: &str, port: u32) -> Option<Metadata> {
    Some(Metadata {
        kind: Some(metadata::Kind::Resource(Resource {
            group: group.into(),
            kind: kind.into(),
            name: name.into(),
            namespace: "emojivoto".into(),
            section: String::new(),
            port,
        })),
    })
}

fn method(m: http_method::Registered) -> RequestMatch {
    RequestMatch {
        r#match: Some(request_match::Match::Method(HttpMethod {
            r#type: Some(http_method::Type::Registered(m.into())),
        })),
    }
}

fn path(regex: &str) -> RequestMatch {
    RequestMatch {
        r#match: Some(request_match::Match::Path(PathMatch {
            regex: regex.into(),
        })),
    }
}

fn all(matches: Vec<RequestMatch>) -> Option<RequestMatch> {
    Some(RequestMatch {
        r#match: Some(request_match::Match::All(request_match::Seq { matches })),
    })
}

fn status(min: u32, max: u32) -> Option<ResponseMatch> {
    Some(ResponseMatch {
        r#match: Some(response_match::Match::Status(HttpStatusRange { min, max })),
    })
}

/// A `GET <path>` route of the web-svc ServiceProfile, as the server translates it.
fn mk_get_route(path_regex: &str) -> Route {
    Route {
        condition: all(vec![method(http_method::Registered::Get), path(path_regex)]),
        metrics_labels: labels(&[("route", &format!("GET {path_regex}"))]),
        ..Route::default()
    }
}

/// The emojivoto web-svc profile: a retry budget, a retryable route, one with a timeout and a
/// failure class, and a traffic split.
fn mk_web_profile() -> DestinationProfile {
    let list = Route {
        is_retryable: true,
        ..mk_get_route("/api/list")
    };
    let vote = Route {
        timeout: duration(0, 500_000_000),
        response_classes: vec![ResponseClass {
            condition: status(500, 599),
            is_failure: true,
        }],
        ..mk_get_route("/api/vote")
    };
    DestinationProfile {
        fully_qualified_name: WEB_FQN.into(),
        opaque_protocol: false,
        routes: vec![list, vote],
        retry_budget: Some(RetryBudget {
            retry_ratio: 0.25,
            min_retries_per_second: 5,
            ttl: duration(15, 0),
        }),
        dst_overrides: vec![
            WeightedDst {
                authority: "web-svc.emojivoto.svc.cluster.local:80".into(),
                weight: 9_000,
                backend_ref: None,
            },
            WeightedDst {
                authority: "web-canary.emojivoto.svc.cluster.local:80".into(),
                weight: 1_000,
                backend_ref: resource("core", "Service", "web-canary", 80),
            },
        ],
        endpoint: None,
        parent_ref: resource("core", "Service", "web-svc", 80),
        profile_ref: resource("linkerd.io", "ServiceProfile", WEB_FQN, 0),
    }
}

/// What `GetProfile 10.244.2.19:8080` returns: the web pod as an endpoint profile.
fn mk_endpoint_profile() -> DestinationProfile {
    DestinationProfile {
        retry_budget: Some(RetryBudget {
            retry_ratio: 0.2,
            min_retries_per_second: 10,
            ttl: duration(10, 0),
        }),
        endpoint: Some(WeightedAddr {
            addr: Some(
                "10.244.2.19:8080"
                    .parse::<std::net::SocketAddr>()
                    .unwrap()
                    .into(),
            ),
            weight: 10_000,
            metric_labels: labels(&[
                ("pod", "web-djjwbqr6lt-sfd7g"),
                ("deployment", "web"),
                ("namespace", "emojivoto"),
                ("zone", ""),
            ]),
            tls_identity: Some(TlsIdentity {
                server_name: Some(DnsLikeIdentity {
                    name: WEB_ID.into(),
                }),
                strategy: Some(Strategy::DnsLikeIdentity(DnsLikeIdentity {
                    name: WEB_ID.into(),
                })),
            }),
            protocol_hint: Some(ProtocolHint {
                protocol: Some(Protocol::H2(H2 {})),
                opaque_transport: None,
            }),
            ..WeightedAddr::default()
        }),
        ..DestinationProfile::default()
    }
}

#[test]
fn service_profile_table() {
    assert_eq!(
        profile_table(&mk_web_profile()),
        [
            "PROFILE web-svc.emojivoto.svc.cluster.local",
            "opaque protocol: false",
            "parent:          Service emojivoto/web-svc port 80",
            "profile:         ServiceProfile.linkerd.io emojivoto/web-svc.emojivoto.svc.cluster.local",
            "retry budget:    ratio 0.25, min 5 retries/s, ttl 15s",
            "routes:          2",
            "ROUTE          CONDITION                        TIMEOUT  RETRYABLE  RESPONSE CLASSES",
            "GET /api/list  all(method GET, path /api/list)  -        yes        -",
            "GET /api/vote  all(method GET, path /api/vote)  500ms    no         status 500-599 → failure",
            "dst overrides:   2",
            "AUTHORITY                                  WEIGHT  BACKEND",
            "web-svc.emojivoto.svc.cluster.local:80     9000    -",
            "web-canary.emojivoto.svc.cluster.local:80  1000    Service emojivoto/web-canary port 80",
            "endpoint:        none",
        ]
        .join("\n")
    );
}

#[test]
fn endpoint_profile_table_reuses_the_endpoints_columns() {
    assert_eq!(
        profile_table(&mk_endpoint_profile()),
        [
            "PROFILE <no name>",
            "opaque protocol: false",
            "parent:          -",
            "profile:         -",
            "retry budget:    ratio 0.2, min 10 retries/s, ttl 10s",
            "routes:          none",
            "dst overrides:   none",
            "endpoint:        10.244.2.19:8080",
            "ADDRESS           IDENTITY                                                     ZONE  HINT  LABELS",
            "10.244.2.19:8080  web.emojivoto.serviceaccount.identity.linkerd.cluster.local  -     h2    deployment=web,namespace=emojivoto,pod=web-djjwbqr6lt-sfd7g",
        ]
        .join("\n")
    );
}

#[test]
fn service_profile_json() {
    assert_eq!(
        profile_json(&mk_web_profile()),
        json!({
            "fully_qualified_name": WEB_FQN,
            "opaque_protocol": false,
            "parent_ref": {"resource": {"group": "core", "kind": "Service", "name": "web-svc", "namespace": "emojivoto", "section": "", "port": 80}},
            "profile_ref": {"resource": {"group": "linkerd.io", "kind": "ServiceProfile", "name": WEB_FQN, "namespace": "emojivoto", "section": "", "port": 0}},
            "retry_budget": {"retry_ratio": 0.25, "min_retries_per_second": 5, "ttl": {"seconds": 15, "nanos": 0}},
            "routes": [
                {
                    "name": "GET /api/list",
                    "condition": {"all": [{"method": "GET"}, {"path": "/api/list"}]},
                    "metrics_labels": {"route": "GET /api/list"},
                    "is_retryable": true,
                    "timeout": null,
                    "response_classes": [],
                },
                {
                    "name": "GET /api/vote",
                    "condition": {"all": [{"method": "GET"}, {"path": "/api/vote"}]},
                    "metrics_labels": {"route": "GET /api/vote"},
                    "is_retryable": false,
                    "timeout": {"seconds": 0, "nanos": 500_000_000},
                    "response_classes": [
                        {"condition": {"status": {"min": 500, "max": 599}}, "is_failure": true},
                    ],
                },
            ],
            "dst_overrides": [
                {"authority": "web-svc.emojivoto.svc.cluster.local:80", "weight": 9000, "backend_ref": null},
                {
                    "authority": "web-canary.emojivoto.svc.cluster.local:80",
                    "weight": 1000,
                    "backend_ref": {"resource": {"group": "core", "kind": "Service", "name": "web-canary", "namespace": "emojivoto", "section": "", "port": 80}},
                },
            ],
            "endpoint": null,
        })
    );
}

#[test]
fn endpoint_profile_json() {
    let json = profile_json(&mk_endpoint_profile());
    assert_eq!(json["fully_qualified_name"], "");
    assert_eq!(json["parent_ref"], Value::Null);
    assert_eq!(json["routes"], json!([]));
    // 0.2 as written, not the f32 widened to 0.20000000298023224.
    assert_eq!(json["retry_budget"]["retry_ratio"], json!(0.2));
    let endpoint = &json["endpoint"];
    assert_eq!(endpoint["addr"], "10.244.2.19:8080");
    assert_eq!(endpoint["identity"], WEB_ID);
    assert_eq!(endpoint["protocol_hint"], "h2");
    assert_eq!(endpoint["metric_labels"]["pod"], "web-djjwbqr6lt-sfd7g");
}

#[test]
fn json_and_table_lines() {
    let mut out = Vec::new();
    write_profile(&mut out, OutputFormat::Json, &mk_endpoint_profile()).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.starts_with(r#"{"dst_overrides":[],"endpoint":{"addr":"10.244.2.19:8080""#));
    assert!(text.ends_with("}\n"));

    let mut out = Vec::new();
    write_profile(
        &mut out,
        OutputFormat::Table,
        &DestinationProfile::default(),
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "PROFILE <no name>\nopaque protocol: false\nparent:          -\nprofile:         -\n\
         retry budget:    -\nroutes:          none\ndst overrides:   none\nendpoint:        none\n\n"
    );
}

#[test]
fn conditions_render_readably() {
    let not_get = RequestMatch {
        r#match: Some(request_match::Match::Not(Box::new(method(
            http_method::Registered::Get,
        )))),
    };
    let any = RequestMatch {
        r#match: Some(request_match::Match::Any(request_match::Seq {
            matches: vec![
                path("/a"),
                RequestMatch {
                    r#match: Some(request_match::Match::Method(HttpMethod {
                        r#type: Some(http_method::Type::Unregistered("PURGE".into())),
                    })),
                },
                not_get,
            ],
        })),
    };
    assert_eq!(
        request_match_text(&any),
        "any(path /a, method PURGE, not(method GET))"
    );
    assert_eq!(
        request_match_json(&any),
        json!({"any": [{"path": "/a"}, {"method": "PURGE"}, {"not": {"method": "GET"}}]})
    );
    assert_eq!(request_match_text(&RequestMatch::default()), "<empty>");
    let bad_method = RequestMatch {
        r#match: Some(request_match::Match::Method(HttpMethod {
            r#type: Some(http_method::Type::Registered(42)),
        })),
    };
    assert_eq!(
        request_match_text(&bad_method),
        "method <unknown method 42>"
    );

    let not_404 = ResponseMatch {
        r#match: Some(response_match::Match::Not(Box::new(
            status(404, 404).unwrap(),
        ))),
    };
    let classes = ResponseMatch {
        r#match: Some(response_match::Match::All(response_match::Seq {
            matches: vec![status(400, 499).unwrap(), not_404],
        })),
    };
    assert_eq!(
        response_match_text(&classes),
        "all(status 400-499, not(status 404))"
    );
    assert_eq!(
        class_text(&ResponseClass {
            condition: Some(classes.clone()),
            is_failure: false,
        }),
        "all(status 400-499, not(status 404)) → success"
    );
    assert_eq!(
        response_match_json(&classes),
        json!({"all": [{"status": {"min": 400, "max": 499}}, {"not": {"status": {"min": 404, "max": 404}}}]})
    );
}

#[test]
fn durations_as_go_prints_them() {
    let text = |seconds, nanos| duration_text(&prost_types::Duration { seconds, nanos });
    assert_eq!(text(0, 0), "0s");
    assert_eq!(text(0, 500_000_000), "500ms");
    assert_eq!(text(0, 1_500_000), "1.5ms");
    assert_eq!(text(0, 250_000), "250us");
    assert_eq!(text(0, 42), "42ns");
    assert_eq!(text(1, 0), "1s");
    assert_eq!(text(1, 500_000_000), "1.5s");
    assert_eq!(text(90, 0), "90s");
    assert_eq!(text(-1, 0), "-1s");
    assert_eq!(text(0, -300_000_000), "-300ms");
}

#[test]
fn default_metadata_and_sections() {
    let default = Metadata {
        kind: Some(metadata::Kind::Default("default".into())),
    };
    assert_eq!(meta_text(Some(&default)), "default default");
    let route = Metadata {
        kind: Some(metadata::Kind::Resource(Resource {
            group: "gateway.networking.k8s.io".into(),
            kind: "HTTPRoute".into(),
            name: "web".into(),
            namespace: String::new(),
            section: "rule-1".into(),
            port: 0,
        })),
    };
    assert_eq!(
        meta_text(Some(&route)),
        "HTTPRoute.gateway.networking.k8s.io web section rule-1"
    );
    // Regression: the default profile's `profile_ref` printed as `.linkerd.io `.
    let default_profile = Metadata {
        kind: Some(metadata::Kind::Resource(Resource {
            group: "linkerd.io".into(),
            ..Resource::default()
        })),
    };
    assert_eq!(
        meta_text(Some(&default_profile)),
        "none (linkerd.io default)"
    );
    assert_eq!(meta_text(Some(&Metadata { kind: None })), "<empty>");
    assert_eq!(meta_text(None), "-");
}

/// A name the cluster chose is shown escaped in the block's lines as in its tables (newcomer
/// finding: a Service named with a terminal escape recoloured the terminal in the `PROFILE`
/// line).
#[test]
fn control_characters_in_a_profile_block_are_escaped() {
    let profile = DestinationProfile {
        fully_qualified_name: "esc\u{1b}[31msvc.emojivoto.svc.cluster.local".into(),
        ..mk_web_profile()
    };
    let text = profile_table(&profile);
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{text:?}"
    );
    assert!(
        text.starts_with("PROFILE esc\\u{1b}[31msvc.emojivoto.svc.cluster.local\n"),
        "{text}"
    );
}
