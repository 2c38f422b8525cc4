use super::*;
use linkerd2_proxy_api::{
    inbound::{
        Authn, IdentitySuffix, Network, ProxyProtocol,
        authn::{PermitMeshTls, PermitUnauthenticated},
        http_local_rate_limit::{Limit, Override, r#override::ClientIdentities},
    },
    meta::{Metadata, Resource},
    net::IpNetwork,
};
use std::collections::HashMap;

const WEB: &str = "web.emojivoto.serviceaccount.identity.linkerd.cluster.local";

fn net(cidr: &str, except: &[&str]) -> Network {
    let parse = |c: &str| IpNetwork::from(c.parse::<ipnet::IpNet>().unwrap());
    Network {
        net: Some(parse(cidr)),
        except: except.iter().map(|e| parse(e)).collect(),
    }
}

fn authz(name: &str, networks: Vec<Network>, permit: Permit) -> Authz {
    Authz {
        networks,
        authentication: Some(Authn {
            permit: Some(permit),
        }),
        labels: HashMap::from([
            ("kind".to_string(), "authorizationpolicy".to_string()),
            ("name".to_string(), name.to_string()),
        ]),
        metadata: None,
    }
}

fn identities(names: &[&str], suffixes: &[&[&str]]) -> Permit {
    Permit::MeshTls(PermitMeshTls {
        clients: Some(Clients::Identities(PermitClientIdentities {
            identities: names
                .iter()
                .map(|n| linkerd2_proxy_api::inbound::Identity {
                    name: n.to_string(),
                })
                .collect(),
            suffixes: suffixes
                .iter()
                .map(|parts| IdentitySuffix {
                    parts: parts.iter().map(|p| p.to_string()).collect(),
                })
                .collect(),
        })),
    })
}

fn tls_only() -> Permit {
    Permit::MeshTls(PermitMeshTls {
        clients: Some(Clients::Unauthenticated(PermitUnauthenticated {})),
    })
}

fn client(ip: Option<&str>, tls: ClientTls) -> Client {
    Client {
        ip: ip.map(|ip| ip.parse().unwrap()),
        tls,
    }
}

fn id(name: &str) -> ClientTls {
    ClientTls::Identity(name.into())
}

#[test]
fn identities_exact_and_by_suffix() {
    let a = authz(
        "a",
        vec![net("0.0.0.0/0", &[])],
        identities(&[WEB], &[&["ingress-nginx", "serviceaccount"]]),
    );
    let from = |tls| authz_admits(&a, &client(Some("10.0.0.1"), tls));
    assert_eq!(
        from(id(WEB)),
        Ok(format!(
            "10.0.0.1 is in 0.0.0.0/0; identity {WEB} is listed"
        ))
    );
    assert_eq!(
        from(id("nginx.ingress-nginx.serviceaccount")),
        Ok(
            "10.0.0.1 is in 0.0.0.0/0; identity nginx.ingress-nginx.serviceaccount ends with \
            .ingress-nginx.serviceaccount"
                .into()
        )
    );
    // A suffix needs a label before it, as `*.` does.
    assert_eq!(
        from(id("xingress-nginx.serviceaccount")),
        Err(format!(
            "wrong identity: xingress-nginx.serviceaccount is none of {WEB}, \
             *.ingress-nginx.serviceaccount"
        ))
    );
    assert_eq!(
        from(ClientTls::Plain),
        Err(format!(
            "no authentication: it requires one of the identities {WEB}, \
             *.ingress-nginx.serviceaccount, and the client is not mTLS"
        ))
    );
    assert_eq!(
        from(ClientTls::NoIdentity),
        Err(format!(
            "no authentication: it requires one of the identities {WEB}, \
             *.ingress-nginx.serviceaccount, and the client has no identity"
        ))
    );
    // The empty suffix is any identity.
    let any = authz("any", vec![net("0.0.0.0/0", &[])], identities(&[], &[&[]]));
    assert_eq!(
        authz_admits(&any, &client(Some("10.0.0.1"), id("x.y"))),
        Ok("10.0.0.1 is in 0.0.0.0/0; any identity is allowed".into())
    );
}

#[test]
fn tls_without_identity_admits_any_mtls_client() {
    let a = authz("tls", vec![net("10.0.0.0/8", &[])], tls_only());
    assert_eq!(
        authz_admits(&a, &client(Some("10.1.2.3"), ClientTls::NoIdentity)),
        Ok("10.1.2.3 is in 10.0.0.0/8; any mTLS client is allowed".into())
    );
    assert_eq!(
        authz_admits(&a, &client(Some("10.1.2.3"), ClientTls::Plain)),
        Err("no authentication: it requires mesh TLS, and the client is not mTLS".into())
    );
}

#[test]
fn networks_with_exceptions_and_without_an_address() {
    let a = authz(
        "cluster",
        vec![
            net("10.244.0.0/16", &[]),
            net("10.20.0.0/16", &["10.20.3.200/32"]),
        ],
        Permit::Unauthenticated(PermitUnauthenticated {}),
    );
    assert_eq!(
        authz_admits(&a, &client(Some("10.20.3.200"), ClientTls::Plain)),
        Err(
            "network not covered: 10.20.3.200 is in 10.20.0.0/16 but excepted by 10.20.3.200/32"
                .into()
        )
    );
    assert_eq!(
        authz_admits(&a, &client(Some("192.168.1.1"), ClientTls::Plain)),
        Err(
            "network not covered: 192.168.1.1 is in none of 10.244.0.0/16, \
             10.20.0.0/16 except 10.20.3.200/32"
                .into()
        )
    );
    assert!(authz_admits(&a, &client(None, id(WEB))).is_err());
    let everywhere = authz(
        "all",
        vec![net("0.0.0.0/0", &[]), net("::/0", &[])],
        Permit::Unauthenticated(PermitUnauthenticated {}),
    );
    assert_eq!(
        authz_admits(&everywhere, &client(None, id(WEB))),
        Ok("0.0.0.0/0 covers every address; unauthenticated clients are allowed".into())
    );
}

fn http1_server(routes: Vec<HttpRoute>, authzs: Vec<Authz>) -> Server {
    Server {
        protocol: Some(ProxyProtocol {
            kind: Some(proxy_protocol::Kind::Http1(proxy_protocol::Http1 {
                routes,
                local_rate_limit: None,
            })),
        }),
        server_ips: vec![],
        authorizations: authzs,
        labels: HashMap::from([
            ("kind".to_string(), "server".to_string()),
            ("name".to_string(), "web-http".to_string()),
        ]),
    }
}

fn get(path: &str) -> Request {
    Request {
        method: "GET".into(),
        path: path.into(),
        ..Default::default()
    }
}

#[test]
fn a_server_without_routes_gets_one_that_matches_everything() {
    let server = http1_server(
        vec![],
        vec![authz(
            "all",
            vec![net("0.0.0.0/0", &[])],
            Permit::Unauthenticated(PermitUnauthenticated {}),
        )],
    );
    let (text, decision) = explain_server(
        &server,
        &client(Some("10.0.0.1"), ClientTls::Plain),
        &get("/x"),
    )
    .unwrap();
    assert_eq!(
        decision,
        Decision::Allowed("allowed by authorizationpolicy:all on route default:default".into())
    );
    assert!(
        text.contains("route default:default: selected: rule 1 matches *"),
        "{text}"
    );
}

#[test]
fn localhost_is_always_admitted_by_the_proxy() {
    let server = http1_server(vec![], vec![]);
    let (text, decision) = explain_server(
        &server,
        &client(Some("127.0.0.1"), ClientTls::Plain),
        &get("/"),
    )
    .unwrap();
    assert_eq!(
        decision,
        Decision::Allowed("allowed by default:localhost on route default:default".into())
    );
    assert!(
        text.contains("authorization default:localhost (proxy): admits: 127.0.0.1 is localhost"),
        "{text}"
    );
    let (_, decision) = explain_server(
        &server,
        &client(Some("10.0.0.1"), ClientTls::Plain),
        &get("/"),
    )
    .unwrap();
    assert!(matches!(decision, Decision::Denied(_)));
}

#[test]
fn opaque_ports_check_the_connection_against_the_server() {
    let server = Server {
        protocol: Some(ProxyProtocol {
            kind: Some(proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {})),
        }),
        ..http1_server(
            vec![],
            vec![authz(
                "web",
                vec![net("0.0.0.0/0", &[])],
                identities(&[WEB], &[]),
            )],
        )
    };
    let (text, decision) =
        explain_server(&server, &client(Some("10.0.0.1"), id(WEB)), &get("/")).unwrap();
    assert_eq!(
        decision,
        Decision::Allowed("allowed by authorizationpolicy:web".into())
    );
    assert!(text.contains("rate limit: none (not HTTP)"), "{text}");
    let (_, decision) = explain_server(
        &server,
        &client(Some("10.0.0.1"), ClientTls::Plain),
        &get("/"),
    )
    .unwrap();
    assert_eq!(
        decision,
        Decision::Denied(
            "no authorization of server:web-http admits the connection (the proxy closes it)"
                .into()
        )
    );
}

#[test]
fn a_server_without_protocol_cannot_be_explained() {
    let server = Server {
        protocol: None,
        ..http1_server(vec![], vec![])
    };
    let error = explain_server(&server, &client(None, id(WEB)), &get("/")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the policy received is invalid: the Server has no protocol"
    );
}

#[test]
fn rate_limit_override_then_per_identity() {
    let limit = HttpLocalRateLimit {
        metadata: Some(Metadata {
            kind: Some(metadata::Kind::Resource(Resource {
                group: "policy.linkerd.io".into(),
                kind: "HTTPLocalRateLimitPolicy".into(),
                name: "web-rl".into(),
                ..Default::default()
            })),
        }),
        total: Some(Limit {
            requests_per_second: 100,
        }),
        identity: Some(Limit {
            requests_per_second: 20,
        }),
        overrides: vec![Override {
            limit: Some(Limit {
                requests_per_second: 50,
            }),
            clients: Some(ClientIdentities {
                identities: vec![linkerd2_proxy_api::inbound::Identity { name: WEB.into() }],
            }),
        }],
    };
    let text = |tls| {
        let mut lines = vec![];
        rate_limit_lines(
            Some(&limit),
            &client(None, tls),
            &Decision::Allowed(String::new()),
            &mut lines,
        );
        lines.remove(0)
    };
    assert_eq!(
        text(id(WEB)),
        format!(
            "rate limit: httplocalratelimitpolicy:web-rl: total 100/s shared by all clients, \
             override 50/s for identity {WEB}"
        )
    );
    assert_eq!(
        text(id("other.ns")),
        "rate limit: httplocalratelimitpolicy:web-rl: total 100/s shared by all clients, \
         20/s for identity other.ns"
    );
    assert_eq!(
        text(ClientTls::Plain),
        "rate limit: httplocalratelimitpolicy:web-rl: total 100/s shared by all clients, \
         20/s shared by the clients without an identity"
    );
}

#[test]
fn identities_are_dns_like_names_or_spiffe_ids() {
    assert_eq!(check_identity(WEB), Ok(()));
    assert_eq!(
        check_identity("spiffe://cluster.local/ns/web/sa/web"),
        Ok(())
    );
    for (bad, why) in [
        ("", "empty"),
        (
            "web..emojivoto",
            "an empty label (two dots, or a dot at an end)",
        ),
        (
            "web.emojivoto.",
            "an empty label (two dots, or a dot at an end)",
        ),
        ("-web.emojivoto", "label \"-web\" starts or ends with '-'"),
        (
            "spiffe:///ns",
            "a SPIFFE ID names a trust domain: spiffe://DOMAIN/PATH",
        ),
    ] {
        assert_eq!(check_identity(bad), Err(why.to_string()), "{bad:?}");
    }
    let why = check_identity("*.emojivoto.serviceaccount").unwrap_err();
    assert!(why.starts_with("'*' is not allowed"), "{why}");
    assert_eq!(
        check_identity(&"a".repeat(64)),
        Err(format!(
            "label {:?} is longer than 63 characters",
            "a".repeat(64)
        ))
    );
}

fn args(workload: &str, port: u32) -> InboundArgs {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: InboundArgs,
    }
    Cli::parse_from([
        "explain",
        workload,
        &port.to_string(),
        "--client-ip",
        "10.0.0.1",
        "--cluster-state",
        "/nonexistent",
    ])
    .args
}

#[test]
fn workloads_are_sent_in_the_json_form() {
    let spec = args("emojivoto/web-0", 8080).port_spec().unwrap();
    assert_eq!(spec.workload, r#"{"ns":"emojivoto","pod":"web-0"}"#);
    assert_eq!(spec.port, 8080);
    let spec = args("emojivoto:web-0", 80).port_spec().unwrap();
    assert_eq!(spec.workload, r#"{"ns":"emojivoto","pod":"web-0"}"#);
    let json = r#"{"ns":"edge","external_workload":"vm-1"}"#;
    assert_eq!(args(json, 80).port_spec().unwrap().workload, json);
    for bad in ["web-0", "/web-0", "emojivoto/", "a/b/c"] {
        assert_eq!(
            args(bad, 80).port_spec().unwrap_err().to_string(),
            format!("invalid WORKLOAD {bad:?}: expected NAMESPACE/POD")
        );
    }
    // The command line refuses these already (`port_number`); flags built otherwise are
    // checked again.
    for port in [0, 65536] {
        let mut flags = args("emojivoto/web-0", 80);
        flags.port = port;
        assert_eq!(
            flags.port_spec().unwrap_err().to_string(),
            format!("invalid PORT \"{port}\": not a port number (1-65535)")
        );
    }
}

#[test]
fn a_port_argument_out_of_range_is_refused_the_same_way_at_any_size() {
    for bad in ["0", "65536", "4294967296", "99999999999", "-1", "http", ""] {
        assert_eq!(
            port_number(bad),
            Err("not a port number (1-65535)".to_string()),
            "{bad:?}"
        );
    }
    assert_eq!(port_number("1"), Ok(1));
    assert_eq!(port_number("65535"), Ok(65535));
}

#[test]
fn requests_from_flags() {
    let request = build_request(
        "GET".into(),
        "/api/list?x=1",
        &["Host: web.example.com:8080".into(), "x-env:prod".into()],
        None,
    )
    .unwrap();
    assert_eq!(request.path, "/api/list");
    assert_eq!(request.query.as_deref(), Some("x=1"));
    assert_eq!(request.host.as_deref(), Some("web.example.com"));
    assert_eq!(
        request.text(),
        "GET /api/list?x=1 (host web.example.com, header x-env: prod)"
    );
    assert_eq!(strip_port("[fd00::1]:80"), "[fd00::1]");
    assert_eq!(strip_port("fd00::1"), "fd00::1");
    assert_eq!(strip_port("web:http"), "web:http");
    let error = build_request("GET".into(), "api", &[], None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid --path \"api\": a path starts with /"
    );
    let error = build_request("GET".into(), "/", &["x-env".into()], None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid --header \"x-env\": expected NAME:VALUE"
    );
    // What no request carries is refused, not explained (final tester's finding).
    let error = build_request("GET".into(), "/a\u{1}b", &[], None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid --path \"/a\\u{1}b\": a path holds no spaces or control characters \
         (percent-encode them)"
    );
    let error = build_request("GET".into(), "/", &["bad header:x".into()], None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid --header \"bad header:x\": not an HTTP header name (letters, digits and \
         !#$%&'*+-.^_`|~ only)"
    );
    let error = build_request("GET".into(), "/", &["x-a:b\u{7f}".into()], None).unwrap_err();
    assert!(
        error
            .to_string()
            .ends_with("a header value holds no control characters but tabs")
    );
    // A value of other bytes is carried (obs-text), and explained.
    let request = build_request("GET".into(), "/", &["x-env: prödüction".into()], None).unwrap();
    assert_eq!(
        request.headers,
        [("x-env".to_string(), "prödüction".to_string())]
    );
}

/// The proxy refuses a whole server it cannot convert and admits no client
/// (`ServerPolicy::invalid`): a route with a bad match, or an authorization without networks,
/// with a network it cannot read, or without authentication, denies a client an otherwise
/// valid authorization admits (before, the bad authorization was only "not admitting").
#[test]
fn a_server_the_proxy_cannot_convert_admits_no_client() {
    use linkerd2_proxy_api::http_route::{HttpRouteMatch, PathMatch, path_match};
    let all = authz(
        "all",
        vec![net("0.0.0.0/0", &[])],
        Permit::Unauthenticated(PermitUnauthenticated {}),
    );
    let route = |matches: Vec<HttpRouteMatch>, authzs: Vec<Authz>| HttpRoute {
        metadata: Some(Metadata {
            kind: Some(metadata::Kind::Default("api".into())),
        }),
        hosts: vec![],
        rules: vec![http_route::Rule {
            matches,
            filters: vec![],
        }],
        authorizations: authzs,
    };
    let regex = |re: &str| HttpRouteMatch {
        path: Some(PathMatch {
            kind: Some(path_match::Kind::Regex(re.into())),
        }),
        ..Default::default()
    };
    let plain = client(Some("10.0.0.1"), ClientTls::Plain);
    let valid = http1_server(vec![route(vec![regex("/.*")], vec![])], vec![all.clone()]);
    assert_eq!(
        explain_server(&valid, &plain, &get("/x")).unwrap().1,
        Decision::Allowed("allowed by authorizationpolicy:all on route default:api".into())
    );

    let no_networks = authz(
        "none",
        vec![],
        Permit::Unauthenticated(PermitUnauthenticated {}),
    );
    let no_address = authz(
        "holey",
        vec![Network {
            net: None,
            except: vec![],
        }],
        Permit::Unauthenticated(PermitUnauthenticated {}),
    );
    let bad_prefix = authz(
        "wide",
        vec![Network {
            net: Some(IpNetwork {
                ip: Some("10.0.0.0".parse::<IpAddr>().unwrap().into()),
                prefix_len: 33,
            }),
            except: vec![],
        }],
        Permit::Unauthenticated(PermitUnauthenticated {}),
    );
    let no_authn = Authz {
        authentication: None,
        ..authz("anon", vec![net("0.0.0.0/0", &[])], tls_only())
    };
    let no_clients = authz(
        "tls",
        vec![net("0.0.0.0/0", &[])],
        Permit::MeshTls(PermitMeshTls { clients: None }),
    );
    let cases = [
        (
            http1_server(vec![route(vec![regex("(")], vec![])], vec![all.clone()]),
            "route default:api rule 1 match 1: regex \"(\" is invalid: ",
        ),
        (
            http1_server(
                vec![route(vec![regex("/.*")], vec![no_networks])],
                vec![all.clone()],
            ),
            "route default:api authorization authorizationpolicy:none: it lists no networks",
        ),
        (
            http1_server(vec![route(vec![], vec![])], vec![all.clone(), no_address]),
            "authorization authorizationpolicy:holey: a network has no address",
        ),
        (
            http1_server(vec![], vec![all.clone(), bad_prefix]),
            "authorization authorizationpolicy:wide: network 10.0.0.0/33 is not a valid network",
        ),
        (
            http1_server(
                vec![HttpRoute {
                    rules: vec![http_route::Rule {
                        matches: vec![],
                        filters: vec![http_route::Filter {
                            kind: Some(http_route::filter::Kind::Redirect(
                                linkerd2_proxy_api::http_route::RequestRedirect {
                                    host: "new host/x".into(),
                                    ..Default::default()
                                },
                            )),
                        }],
                    }],
                    ..route(vec![], vec![])
                }],
                vec![all.clone()],
            ),
            "route default:api rule 1: its redirect's authority \"new host/x\" is invalid",
        ),
        (
            http1_server(vec![], vec![all.clone(), no_authn]),
            "authorization authorizationpolicy:anon: it has no authentication",
        ),
        (
            http1_server(vec![], vec![all.clone(), no_clients]),
            "authorization authorizationpolicy:tls: its mesh TLS names no clients",
        ),
    ];
    for (server, why) in cases {
        let (text, decision) = explain_server(&server, &plain, &get("/x")).unwrap();
        assert_eq!(decision, Decision::Denied(INVALID_SERVER.into()), "{why}");
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[4].starts_with(&format!("invalid:    {why}")),
            "{text}"
        );
        assert_eq!(lines[5], format!("decision:   denied: {INVALID_SERVER}"));
        assert_eq!(lines.len(), 6, "{text}");
    }

    // An opaque port has no routes; its authorizations are converted all the same.
    let mut opaque = http1_server(vec![], vec![all, authz("none", vec![], tls_only())]);
    opaque.protocol = Some(ProxyProtocol {
        kind: Some(proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {})),
    });
    let (text, decision) = explain_server(&opaque, &plain, &get("/")).unwrap();
    assert_eq!(decision, Decision::Denied(INVALID_SERVER.into()), "{text}");
}

/// An admitted request meets its rule's redirect, as the proxy applies filters after the
/// authorizations: the redirect answers it, or the proxy fails it when the redirect replaces a
/// prefix the request did not match by (second tester's finding: both were "allowed").
#[test]
fn an_admitted_request_is_redirected_by_its_rule() {
    use linkerd2_proxy_api::http_route::{
        HttpRouteMatch, PathMatch, PathModifier, RequestRedirect, path_match, path_modifier,
    };
    let server = |kind: path_match::Kind| {
        http1_server(
            vec![HttpRoute {
                metadata: Some(Metadata {
                    kind: Some(metadata::Kind::Default("moved".into())),
                }),
                hosts: vec![],
                rules: vec![http_route::Rule {
                    matches: vec![HttpRouteMatch {
                        path: Some(PathMatch { kind: Some(kind) }),
                        ..Default::default()
                    }],
                    filters: vec![http_route::Filter {
                        kind: Some(http_route::filter::Kind::Redirect(RequestRedirect {
                            host: "new.example.com".into(),
                            path: Some(PathModifier {
                                replace: Some(path_modifier::Replace::Prefix("/qux".into())),
                            }),
                            ..Default::default()
                        })),
                    }],
                }],
                authorizations: vec![],
            }],
            vec![authz(
                "all",
                vec![net("0.0.0.0/0", &[])],
                Permit::Unauthenticated(PermitUnauthenticated {}),
            )],
        )
    };
    let plain = client(Some("10.0.0.1"), ClientTls::Plain);
    let (_, decision) = explain_server(
        &server(path_match::Kind::Prefix("/old".into())),
        &plain,
        &get("/old/x"),
    )
    .unwrap();
    assert_eq!(
        decision,
        Decision::Allowed(
            "allowed by authorizationpolicy:all on route default:moved, then redirected: the \
             proxy answers HTTP 301 to new.example.com, the matched path prefix replaced by /qux"
                .into()
        )
    );
    let (text, decision) = explain_server(
        &server(path_match::Kind::Exact("/exact".into())),
        &plain,
        &get("/exact"),
    )
    .unwrap();
    assert_eq!(
        decision,
        Decision::Denied(
            "route default:moved redirects by replacing the matched path prefix, but the \
             request matched a path that is not a prefix: the proxy fails it with an error \
             (HTTP 5xx); the client was allowed by authorizationpolicy:all on route \
             default:moved"
                .into()
        ),
        "{text}"
    );
}
