use super::*;
use linkerd_index::inbound::{DETECT_TIMEOUT, RateLimitOverride};
use std::{collections::BTreeMap, sync::Arc};

const WEB_ID: &str = "web.emojivoto.serviceaccount.identity.linkerd.cluster.local";

fn translator() -> InboundTranslator {
    InboundTranslator::new(vec![
        "10.0.0.0/8".parse().unwrap(),
        "fd00::/8".parse().unwrap(),
    ])
}

fn net(cidr: &str) -> Network {
    Network {
        net: cidr.parse().unwrap(),
        except: vec![],
    }
}

fn ipnet(cidr: &str) -> net::IpNetwork {
    cidr.parse::<IpNet>().unwrap().into()
}

fn mk_server(reference: ServerRef, protocol: InboundProtocol) -> InboundServer {
    InboundServer {
        reference,
        protocol,
        authorizations: Arc::default(),
        http_routes: Arc::new(vec![mk_http_route(
            RouteRef::Default("default".into()),
            vec![],
        )]),
        grpc_routes: Arc::new(vec![mk_grpc_route(RouteRef::Default("default".into()))]),
        rate_limit: None,
    }
}

fn mk_http_route(reference: RouteRef, filters: Vec<Filter>) -> InboundRoute<HttpRule> {
    InboundRoute {
        reference,
        creation_timestamp: None,
        hostnames: vec![],
        rules: vec![HttpRule {
            matches: vec![HttpRouteMatch {
                path: Some(PathMatch::Prefix("/".into())),
                ..HttpRouteMatch::default()
            }],
            filters,
        }],
        authorizations: BTreeMap::new(),
    }
}

fn mk_grpc_route(reference: RouteRef) -> InboundRoute<GrpcRule> {
    InboundRoute {
        reference,
        creation_timestamp: None,
        hostnames: vec![],
        rules: vec![GrpcRule {
            matches: vec![GrpcRouteMatch::default()],
            filters: vec![],
        }],
        authorizations: BTreeMap::new(),
    }
}

fn labels_of(group: &str, kind: &str, name: &str) -> HashMap<String, String> {
    labels(group, kind, name)
}

fn default_meta(name: &str) -> Option<meta::Metadata> {
    Some(meta::Metadata {
        kind: Some(meta::metadata::Kind::Default(name.into())),
    })
}

fn resource_meta(group: &str, kind: &str, name: &str) -> Option<meta::Metadata> {
    Some(meta::Metadata {
        kind: Some(resource(group, kind, name)),
    })
}

fn kind(server: &api::Server) -> &proxy_protocol::Kind {
    server
        .protocol
        .as_ref()
        .and_then(|p| p.kind.as_ref())
        .expect("protocol set")
}

#[test]
fn default_server_detects_with_timeout_and_default_route() {
    let mut server = mk_server(
        ServerRef::Default("all-unauthenticated".into()),
        InboundProtocol::Detect {
            timeout: DETECT_TIMEOUT,
        },
    );
    Arc::make_mut(&mut server.authorizations).insert(
        AuthorizationRef::Default("all-unauthenticated".into()),
        ClientAuthorization {
            networks: vec![net("0.0.0.0/0"), net("::/0")],
            authentication: ClientAuthentication::Unauthenticated,
        },
    );
    let wire = translator().server(&server);
    assert_eq!(wire.labels, labels_of("", "default", "all-unauthenticated"));
    assert!(wire.server_ips.is_empty());
    let proxy_protocol::Kind::Detect(detect) = kind(&wire) else {
        panic!("expected Detect: {wire:?}");
    };
    assert_eq!(
        detect.timeout,
        Some(prost_types::Duration {
            seconds: 10,
            nanos: 0
        })
    );
    assert!(detect.http_local_rate_limit.is_none());
    assert_eq!(detect.http_routes.len(), 1);
    let route = &detect.http_routes[0];
    assert_eq!(route.metadata, default_meta("default"));
    assert_eq!(
        route.rules[0].matches[0].path,
        Some(http_route::PathMatch {
            kind: Some(http_route::path_match::Kind::Prefix("/".into()))
        })
    );

    assert_eq!(wire.authorizations.len(), 1);
    let authz = &wire.authorizations[0];
    assert_eq!(authz.metadata, default_meta("all-unauthenticated"));
    assert_eq!(
        authz.labels,
        labels_of("", "default", "all-unauthenticated")
    );
    assert_eq!(
        authz.networks,
        vec![
            api::Network {
                net: Some(ipnet("0.0.0.0/0")),
                except: vec![]
            },
            api::Network {
                net: Some(ipnet("::/0")),
                except: vec![]
            },
        ]
    );
    assert_eq!(
        authz.authentication,
        Some(api::Authn {
            permit: Some(authn::Permit::Unauthenticated(
                authn::PermitUnauthenticated {}
            ))
        })
    );
}

#[test]
fn http1_and_http2_carry_routes_and_rate_limit() {
    for (protocol, expect_h2) in [
        (InboundProtocol::Http1, false),
        (InboundProtocol::Http2, true),
    ] {
        let mut server = mk_server(ServerRef::Server("web-http".into()), protocol);
        server.rate_limit = Some(RateLimit {
            name: "web-rl".into(),
            total: Some(100),
            identity: Some(20),
            overrides: vec![RateLimitOverride {
                requests_per_second: 50,
                identities: vec![WEB_ID.into()],
            }],
        });
        let wire = translator().server(&server);
        assert_eq!(
            wire.labels,
            labels_of("policy.linkerd.io", "server", "web-http")
        );
        let (routes, limit) = match kind(&wire) {
            proxy_protocol::Kind::Http1(h) if !expect_h2 => (&h.routes, &h.local_rate_limit),
            proxy_protocol::Kind::Http2(h) if expect_h2 => (&h.routes, &h.local_rate_limit),
            other => panic!("unexpected protocol {other:?}"),
        };
        assert_eq!(routes[0].metadata, default_meta("default"));
        use api::http_local_rate_limit::{Limit, Override, r#override::ClientIdentities};
        assert_eq!(
            limit.as_ref(),
            Some(&api::HttpLocalRateLimit {
                metadata: resource_meta("policy.linkerd.io", "HTTPLocalRateLimitPolicy", "web-rl"),
                total: Some(Limit {
                    requests_per_second: 100
                }),
                identity: Some(Limit {
                    requests_per_second: 20
                }),
                overrides: vec![Override {
                    limit: Some(Limit {
                        requests_per_second: 50
                    }),
                    clients: Some(ClientIdentities {
                        identities: vec![api::Identity {
                            name: WEB_ID.into()
                        }]
                    }),
                }],
            })
        );
    }
}

#[test]
fn grpc_server_sends_grpc_routes() {
    let mut server = mk_server(
        ServerRef::Server("voting-grpc".into()),
        InboundProtocol::Grpc,
    );
    let mut route = mk_grpc_route(RouteRef::Resource {
        group: "gateway.networking.k8s.io".into(),
        kind: "GRPCRoute".into(),
        name: "vote".into(),
    });
    route.rules[0].matches = vec![GrpcRouteMatch {
        service: Some("emojivoto.v1.VotingService".into()),
        method: Some("VoteDoughnut".into()),
        headers: vec![HeaderMatch::Exact {
            name: "x-user".into(),
            value: "alice".into(),
        }],
    }];
    route.rules[0].filters = vec![
        Filter::RequestHeaderModifier(HeaderModifier {
            add: vec![],
            set: vec![("x-route".into(), "vote".into())],
            remove: vec!["x-debug".into()],
        }),
        Filter::ResponseHeaderModifier(HeaderModifier::default()),
    ];
    route.hostnames = vec![HostMatch::parse("*.example.com")];
    server.grpc_routes = Arc::new(vec![route]);
    let wire = translator().server(&server);
    let proxy_protocol::Kind::Grpc(grpc) = kind(&wire) else {
        panic!("expected Grpc: {wire:?}");
    };
    assert_eq!(grpc.routes.len(), 1);
    let route = &grpc.routes[0];
    assert_eq!(
        route.metadata,
        resource_meta("gateway.networking.k8s.io", "GRPCRoute", "vote")
    );
    assert_eq!(
        route.hosts,
        vec![http_route::HostMatch {
            r#match: Some(http_route::host_match::Match::Suffix(
                http_route::host_match::Suffix {
                    reverse_labels: vec!["com".into(), "example".into()]
                }
            ))
        }]
    );
    assert_eq!(
        route.rules[0].matches,
        vec![grpc_route::GrpcRouteMatch {
            rpc: Some(grpc_route::GrpcRpcMatch {
                service: "emojivoto.v1.VotingService".into(),
                method: "VoteDoughnut".into(),
            }),
            headers: vec![http_route::HeaderMatch {
                name: "x-user".into(),
                value: Some(http_route::header_match::Value::Exact(b"alice".to_vec())),
            }],
        }]
    );
    // Only the request header modifier goes out.
    assert_eq!(
        route.rules[0].filters,
        vec![api::grpc_route::Filter {
            kind: Some(api::grpc_route::filter::Kind::RequestHeaderModifier(
                http_route::RequestHeaderModifier {
                    add: Some(http_types::Headers { headers: vec![] }),
                    set: Some(http_types::Headers {
                        headers: vec![http_types::headers::Header {
                            name: "x-route".into(),
                            value: b"vote".to_vec()
                        }]
                    }),
                    remove: vec!["x-debug".into()],
                }
            ))
        }]
    );
}

#[test]
fn default_grpc_route_matches_any_rpc() {
    let server = mk_server(
        ServerRef::Server("emoji-grpc".into()),
        InboundProtocol::Grpc,
    );
    let wire = translator().server(&server);
    let proxy_protocol::Kind::Grpc(grpc) = kind(&wire) else {
        panic!("expected Grpc");
    };
    assert_eq!(grpc.routes[0].metadata, default_meta("default"));
    assert_eq!(
        grpc.routes[0].rules[0].matches,
        vec![grpc_route::GrpcRouteMatch {
            rpc: Some(grpc_route::GrpcRpcMatch::default()),
            headers: vec![],
        }]
    );
}

#[test]
fn opaque_and_tls_have_no_routes() {
    let wire = translator().server(&mk_server(
        ServerRef::Server("secrets-api".into()),
        InboundProtocol::Opaque,
    ));
    assert_eq!(
        kind(&wire),
        &proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {})
    );
    let wire = translator().server(&mk_server(
        ServerRef::Server("tls".into()),
        InboundProtocol::Tls,
    ));
    assert_eq!(
        kind(&wire),
        &proxy_protocol::Kind::Tls(proxy_protocol::Tls {})
    );
}

#[test]
fn authentication_kinds() {
    let mut server = mk_server(ServerRef::Server("web-http".into()), InboundProtocol::Http1);
    Arc::make_mut(&mut server.authorizations).insert(
        AuthorizationRef::ServerAuthorization("tls-only".into()),
        ClientAuthorization {
            networks: vec![Network {
                net: "10.20.0.0/16".parse().unwrap(),
                except: vec!["10.20.3.200/32".parse().unwrap()],
            }],
            authentication: ClientAuthentication::TlsUnauthenticated,
        },
    );
    Arc::make_mut(&mut server.authorizations).insert(
        AuthorizationRef::AuthorizationPolicy("web-api".into()),
        ClientAuthorization {
            networks: vec![net("0.0.0.0/0")],
            authentication: ClientAuthentication::TlsAuthenticated(vec![
                IdentityMatch::Exact(WEB_ID.into()),
                IdentityMatch::Suffix(vec![
                    "ingress-nginx".into(),
                    "serviceaccount".into(),
                    "identity".into(),
                    "linkerd".into(),
                    "cluster".into(),
                    "local".into(),
                ]),
                IdentityMatch::Suffix(vec![]),
            ]),
        },
    );
    let wire = translator().server(&server);
    let by_name: HashMap<&str, &api::Authz> = wire
        .authorizations
        .iter()
        .map(|a| (a.labels["name"].as_str(), a))
        .collect();

    let tls_only = by_name["tls-only"];
    assert_eq!(
        tls_only.metadata,
        resource_meta("policy.linkerd.io", "serverauthorization", "tls-only")
    );
    assert_eq!(
        tls_only.labels,
        labels_of("policy.linkerd.io", "serverauthorization", "tls-only")
    );
    assert_eq!(
        tls_only.networks,
        vec![api::Network {
            net: Some(ipnet("10.20.0.0/16")),
            except: vec![ipnet("10.20.3.200/32")],
        }]
    );
    assert_eq!(
        tls_only.authentication,
        Some(api::Authn {
            permit: Some(authn::Permit::MeshTls(authn::PermitMeshTls {
                clients: Some(authn::permit_mesh_tls::Clients::Unauthenticated(
                    authn::PermitUnauthenticated {}
                )),
            }))
        })
    );

    let web_api = by_name["web-api"];
    assert_eq!(
        web_api.metadata,
        resource_meta("policy.linkerd.io", "authorizationpolicy", "web-api")
    );
    assert_eq!(
        web_api.labels,
        labels_of("policy.linkerd.io", "authorizationpolicy", "web-api")
    );
    let Some(api::Authn {
        permit:
            Some(authn::Permit::MeshTls(authn::PermitMeshTls {
                clients: Some(authn::permit_mesh_tls::Clients::Identities(ids)),
            })),
    }) = &web_api.authentication
    else {
        panic!("expected identities: {web_api:?}");
    };
    assert_eq!(
        ids.identities,
        vec![api::Identity {
            name: WEB_ID.into()
        }]
    );
    assert_eq!(
        ids.suffixes,
        vec![
            api::IdentitySuffix {
                parts: vec![
                    "ingress-nginx".into(),
                    "serviceaccount".into(),
                    "identity".into(),
                    "linkerd".into(),
                    "cluster".into(),
                    "local".into()
                ]
            },
            api::IdentitySuffix { parts: vec![] },
        ]
    );
}

#[test]
fn an_authorization_without_networks_gets_the_cluster_networks() {
    let mut server = mk_server(ServerRef::Server("web-http".into()), InboundProtocol::Http1);
    Arc::make_mut(&mut server.authorizations).insert(
        AuthorizationRef::ServerAuthorization("in-cluster".into()),
        ClientAuthorization {
            networks: vec![],
            authentication: ClientAuthentication::Unauthenticated,
        },
    );
    let wire = translator().server(&server);
    assert_eq!(
        wire.authorizations[0].networks,
        vec![
            api::Network {
                net: Some(ipnet("10.0.0.0/8")),
                except: vec![]
            },
            api::Network {
                net: Some(ipnet("fd00::/8")),
                except: vec![]
            },
        ]
    );
}

#[test]
fn http_route_matches_filters_and_route_authorizations() {
    let mut route = mk_http_route(
        RouteRef::Resource {
            group: "policy.linkerd.io".into(),
            kind: "HTTPRoute".into(),
            name: "web-api".into(),
        },
        vec![
            Filter::RequestHeaderModifier(HeaderModifier {
                add: vec![("x-added".into(), "1".into())],
                set: vec![],
                remove: vec![],
            }),
            Filter::ResponseHeaderModifier(HeaderModifier {
                add: vec![("x-dropped".into(), "1".into())],
                set: vec![],
                remove: vec![],
            }),
            Filter::RequestRedirect(RequestRedirect {
                scheme: Some("https".into()),
                hostname: Some("web.example.com".into()),
                path: Some(PathModifier::Prefix("/v2".into())),
                port: Some(8443),
                status: Some(301),
            }),
        ],
    );
    route.hostnames = vec![HostMatch::parse("web.example.com")];
    route.rules[0].matches = vec![HttpRouteMatch {
        path: Some(PathMatch::Exact("/api/vote".into())),
        headers: vec![HeaderMatch::Regex {
            name: "x-user".into(),
            regex: "a.*".into(),
        }],
        query_params: vec![QueryParamMatch::Exact {
            name: "choice".into(),
            value: "doughnut".into(),
        }],
        method: Some("GET".into()),
    }];
    route.authorizations.insert(
        AuthorizationRef::AuthorizationPolicy("web-api".into()),
        ClientAuthorization {
            networks: vec![net("0.0.0.0/0"), net("::/0")],
            authentication: ClientAuthentication::TlsAuthenticated(vec![IdentityMatch::Exact(
                WEB_ID.into(),
            )]),
        },
    );
    let mut server = mk_server(ServerRef::Server("web-http".into()), InboundProtocol::Http1);
    server.http_routes = Arc::new(vec![route]);
    let wire = translator().server(&server);
    let proxy_protocol::Kind::Http1(http) = kind(&wire) else {
        panic!("expected Http1");
    };
    let route = &http.routes[0];
    assert_eq!(
        route.metadata,
        resource_meta("policy.linkerd.io", "HTTPRoute", "web-api")
    );
    assert_eq!(
        route.hosts,
        vec![http_route::HostMatch {
            r#match: Some(http_route::host_match::Match::Exact(
                "web.example.com".into()
            ))
        }]
    );
    assert_eq!(
        route.rules[0].matches,
        vec![http_route::HttpRouteMatch {
            path: Some(http_route::PathMatch {
                kind: Some(http_route::path_match::Kind::Exact("/api/vote".into()))
            }),
            headers: vec![http_route::HeaderMatch {
                name: "x-user".into(),
                value: Some(http_route::header_match::Value::Regex("a.*".into())),
            }],
            query_params: vec![http_route::QueryParamMatch {
                name: "choice".into(),
                value: Some(http_route::query_param_match::Value::Exact(
                    "doughnut".into()
                )),
            }],
            method: Some(http_types::HttpMethod {
                r#type: Some(http_types::http_method::Type::Registered(
                    http_types::http_method::Registered::Get.into()
                ))
            }),
        }]
    );
    use api::http_route::filter::Kind as F;
    let filters: Vec<&F> = route.rules[0]
        .filters
        .iter()
        .map(|f| f.kind.as_ref().unwrap())
        .collect();
    assert_eq!(filters.len(), 2, "the response header modifier is dropped");
    assert!(matches!(filters[0], F::RequestHeaderModifier(m)
        if m.add.as_ref().unwrap().headers[0].name == "x-added"));
    assert_eq!(
        filters[1],
        &F::Redirect(http_route::RequestRedirect {
            scheme: Some(http_types::Scheme::from("https")),
            host: "web.example.com".into(),
            path: Some(http_route::PathModifier {
                replace: Some(http_route::path_modifier::Replace::Prefix("/v2".into()))
            }),
            port: 8443,
            status: 301,
        })
    );
    assert_eq!(route.authorizations.len(), 1);
    assert_eq!(route.authorizations[0].labels["name"], "web-api");
    assert_eq!(
        route.authorizations[0].labels["kind"],
        "authorizationpolicy"
    );
}

/// Upstream quirk (spec §12): a redirect without `statusCode` is sent with status 200.
/// Project decision 1: we send the Gateway API's documented default, 302, and port 0 / host ""
/// for the unset fields as upstream does.
#[test]
fn quirk_redirect_without_status_code_is_sent_as_302_not_200() {
    let mut server = mk_server(ServerRef::Server("web-http".into()), InboundProtocol::Http1);
    server.http_routes = Arc::new(vec![mk_http_route(
        RouteRef::Default("default".into()),
        vec![Filter::RequestRedirect(RequestRedirect::default())],
    )]);
    let wire = translator().server(&server);
    let proxy_protocol::Kind::Http1(http) = kind(&wire) else {
        panic!("expected Http1");
    };
    assert_eq!(
        http.routes[0].rules[0].filters[0].kind,
        Some(api::http_route::filter::Kind::Redirect(
            http_route::RequestRedirect {
                scheme: None,
                host: String::new(),
                path: None,
                port: 0,
                status: 302,
            }
        ))
    );
}

#[test]
fn methods_outside_the_standard_nine_are_unregistered() {
    assert_eq!(
        method("PURGE"),
        http_types::HttpMethod {
            r#type: Some(http_types::http_method::Type::Unregistered("PURGE".into()))
        }
    );
    assert_eq!(
        method("DELETE").r#type,
        Some(http_types::http_method::Type::Registered(
            http_types::http_method::Registered::Delete.into()
        ))
    );
}
