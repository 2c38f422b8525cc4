use super::*;
use linkerd2_proxy_api::{
    grpc_route::GrpcRpcMatch,
    http_route::{PathModifier, host_match::Suffix},
    http_types::{HttpMethod, headers::Header, http_method},
    inbound::{
        Identity, IdentitySuffix,
        authn::{PermitMeshTls, PermitUnauthenticated, permit_mesh_tls::PermitClientIdentities},
        http_local_rate_limit::{Limit, Override, r#override::ClientIdentities},
    },
    meta::Resource,
};

const WEB_ID: &str = "web.emojivoto.serviceaccount.identity.linkerd.cluster.local";
const DEFAULT_ID: &str = "default.emojivoto.serviceaccount.identity.linkerd.cluster.local";
const INGRESS_SUFFIX: [&str; 6] = [
    "ingress-nginx",
    "serviceaccount",
    "identity",
    "linkerd",
    "cluster",
    "local",
];

fn labels(group: &str, kind: &str, name: &str) -> HashMap<String, String> {
    HashMap::from([
        ("group".to_string(), group.to_string()),
        ("kind".to_string(), kind.to_string()),
        ("name".to_string(), name.to_string()),
    ])
}

fn net(cidr: &str) -> IpNetwork {
    let (ip, len) = cidr.split_once('/').unwrap();
    IpNetwork {
        ip: Some(ip.parse::<IpAddr>().unwrap().into()),
        prefix_len: len.parse().unwrap(),
    }
}

fn all_networks() -> Vec<Network> {
    ["0.0.0.0/0", "::/0"]
        .iter()
        .map(|n| Network {
            net: Some(net(n)),
            except: vec![],
        })
        .collect()
}

fn resource(group: &str, kind: &str, name: &str) -> Option<Metadata> {
    Some(Metadata {
        kind: Some(metadata::Kind::Resource(Resource {
            group: group.into(),
            kind: kind.into(),
            name: name.into(),
            ..Resource::default()
        })),
    })
}

fn default_meta(name: &str) -> Option<Metadata> {
    Some(Metadata {
        kind: Some(metadata::Kind::Default(name.into())),
    })
}

fn identities(ids: &[&str], suffixes: &[&[&str]]) -> Option<Authn> {
    Some(Authn {
        permit: Some(authn::Permit::MeshTls(PermitMeshTls {
            clients: Some(permit_mesh_tls::Clients::Identities(
                PermitClientIdentities {
                    identities: ids
                        .iter()
                        .map(|n| Identity {
                            name: n.to_string(),
                        })
                        .collect(),
                    suffixes: suffixes
                        .iter()
                        .map(|parts| IdentitySuffix {
                            parts: parts.iter().map(|p| p.to_string()).collect(),
                        })
                        .collect(),
                },
            )),
        })),
    })
}

fn unauthenticated() -> Option<Authn> {
    Some(Authn {
        permit: Some(authn::Permit::Unauthenticated(PermitUnauthenticated {})),
    })
}

fn policy_authz(name: &str, networks: Vec<Network>, authentication: Option<Authn>) -> Authz {
    Authz {
        networks,
        authentication,
        labels: labels("policy.linkerd.io", "authorizationpolicy", name),
        metadata: resource("policy.linkerd.io", "authorizationpolicy", name),
    }
}

fn get() -> Option<HttpMethod> {
    Some(HttpMethod {
        r#type: Some(http_method::Type::Registered(
            http_method::Registered::Get.into(),
        )),
    })
}

fn exact_get(path: &str) -> HttpRouteMatch {
    HttpRouteMatch {
        path: Some(PathMatch {
            kind: Some(path_match::Kind::Exact(path.into())),
        }),
        method: get(),
        ..HttpRouteMatch::default()
    }
}

/// What the policy controller sends for the emojivoto voting pods' port 8080 (Server
/// voting-grpc, authorized for web only by AuthorizationPolicy voting-policy).
fn mk_voting_grpc() -> Server {
    Server {
        protocol: Some(ProxyProtocol {
            kind: Some(proxy_protocol::Kind::Grpc(proxy_protocol::Grpc {
                routes: vec![GrpcRoute {
                    metadata: default_meta("default"),
                    hosts: vec![],
                    authorizations: vec![],
                    rules: vec![grpc_route::Rule {
                        matches: vec![GrpcRouteMatch {
                            rpc: Some(GrpcRpcMatch::default()),
                            headers: vec![],
                        }],
                        filters: vec![],
                    }],
                }],
            })),
        }),
        server_ips: vec![],
        authorizations: vec![policy_authz(
            "voting-policy",
            all_networks(),
            identities(&[WEB_ID], &[]),
        )],
        labels: labels("policy.linkerd.io", "server", "voting-grpc"),
    }
}

/// Server web-http: two routes, each with its own authorization, none on the server.
fn mk_web_http() -> Server {
    let web_api = HttpRoute {
        metadata: resource("policy.linkerd.io", "HTTPRoute", "web-api"),
        hosts: vec![],
        authorizations: vec![policy_authz(
            "web-api",
            all_networks(),
            identities(&[DEFAULT_ID], &[&INGRESS_SUFFIX]),
        )],
        rules: vec![inbound_http_route::Rule {
            matches: vec![exact_get("/api/list"), exact_get("/api/vote")],
            filters: vec![],
        }],
    };
    let web_static = HttpRoute {
        metadata: resource("gateway.networking.k8s.io", "HTTPRoute", "web-static"),
        hosts: vec![],
        authorizations: vec![policy_authz(
            "web-static",
            vec![
                Network {
                    net: Some(net("10.244.0.0/16")),
                    except: vec![],
                },
                Network {
                    net: Some(net("10.20.0.0/16")),
                    except: vec![net("10.20.3.200/32")],
                },
            ],
            unauthenticated(),
        )],
        rules: vec![inbound_http_route::Rule {
            matches: vec![HttpRouteMatch {
                path: Some(PathMatch {
                    kind: Some(path_match::Kind::Prefix("/".into())),
                }),
                ..HttpRouteMatch::default()
            }],
            filters: vec![],
        }],
    };
    Server {
        protocol: Some(ProxyProtocol {
            kind: Some(proxy_protocol::Kind::Http1(proxy_protocol::Http1 {
                routes: vec![web_api, web_static],
                local_rate_limit: None,
            })),
        }),
        server_ips: vec![],
        authorizations: vec![],
        labels: labels("policy.linkerd.io", "server", "web-http"),
    }
}

/// The default server of a pod's admin port: Detect, all-unauthenticated, the catch-all route
/// and the probe route.
fn mk_default_admin() -> Server {
    let probe_match = |path: &str| HttpRouteMatch {
        path: Some(PathMatch {
            kind: Some(path_match::Kind::Exact(path.into())),
        }),
        method: get(),
        ..HttpRouteMatch::default()
    };
    Server {
        protocol: Some(ProxyProtocol {
            kind: Some(proxy_protocol::Kind::Detect(proxy_protocol::Detect {
                timeout: Some(prost_types::Duration {
                    seconds: 10,
                    nanos: 0,
                }),
                http_routes: vec![
                    HttpRoute {
                        metadata: default_meta("default"),
                        rules: vec![inbound_http_route::Rule {
                            matches: vec![HttpRouteMatch {
                                path: Some(PathMatch {
                                    kind: Some(path_match::Kind::Prefix("/".into())),
                                }),
                                ..HttpRouteMatch::default()
                            }],
                            filters: vec![],
                        }],
                        ..HttpRoute::default()
                    },
                    HttpRoute {
                        metadata: default_meta("probe"),
                        authorizations: vec![Authz {
                            networks: all_networks(),
                            authentication: unauthenticated(),
                            labels: labels("", "default", "probe"),
                            metadata: default_meta("probe"),
                        }],
                        rules: vec![inbound_http_route::Rule {
                            matches: vec![probe_match("/live"), probe_match("/ready")],
                            filters: vec![],
                        }],
                        ..HttpRoute::default()
                    },
                ],
                http_local_rate_limit: None,
            })),
        }),
        server_ips: vec![],
        authorizations: vec![Authz {
            networks: all_networks(),
            authentication: unauthenticated(),
            labels: labels("", "default", "all-unauthenticated"),
            metadata: default_meta("all-unauthenticated"),
        }],
        labels: labels("", "default", "all-unauthenticated"),
    }
}

/// An HTTP/2 server with a rate limit, host matches, every kind of match and filter.
fn mk_rate_limited_http2() -> Server {
    let headers = |pairs: &[(&str, &str)]| {
        Some(Headers {
            headers: pairs
                .iter()
                .map(|(n, v)| Header {
                    name: n.to_string(),
                    value: v.as_bytes().to_vec(),
                })
                .collect(),
        })
    };
    let route = HttpRoute {
        metadata: resource("gateway.networking.k8s.io", "HTTPRoute", "books"),
        hosts: vec![
            HostMatch {
                r#match: Some(host_match::Match::Exact("books.example.com".into())),
            },
            HostMatch {
                r#match: Some(host_match::Match::Suffix(Suffix {
                    reverse_labels: vec!["com".into(), "example".into()],
                })),
            },
        ],
        authorizations: vec![],
        rules: vec![
            inbound_http_route::Rule {
                matches: vec![HttpRouteMatch {
                    path: Some(PathMatch {
                        kind: Some(path_match::Kind::Regex("/books/[0-9]+".into())),
                    }),
                    headers: vec![
                        HeaderMatch {
                            name: "x-env".into(),
                            value: Some(header_match::Value::Exact(b"prod".to_vec())),
                        },
                        HeaderMatch {
                            name: "x-user".into(),
                            value: Some(header_match::Value::Regex("^a.*".into())),
                        },
                    ],
                    query_params: vec![QueryParamMatch {
                        name: "v".into(),
                        value: Some(query_param_match::Value::Exact("2".into())),
                    }],
                    method: Some(HttpMethod {
                        r#type: Some(http_method::Type::Unregistered("PURGE".into())),
                    }),
                }],
                filters: vec![inbound_http_route::Filter {
                    kind: Some(inbound_http_route::filter::Kind::RequestHeaderModifier(
                        RequestHeaderModifier {
                            add: headers(&[("x-a", "1")]),
                            set: headers(&[("x-b", "2")]),
                            remove: vec!["x-c".into()],
                        },
                    )),
                }],
            },
            inbound_http_route::Rule {
                matches: vec![HttpRouteMatch::default()],
                filters: vec![inbound_http_route::Filter {
                    kind: Some(inbound_http_route::filter::Kind::Redirect(
                        RequestRedirect {
                            scheme: Some(Scheme::from("https")),
                            host: "shop.example.com".into(),
                            path: Some(PathModifier {
                                replace: Some(path_modifier::Replace::Prefix("/shop".into())),
                            }),
                            port: 8443,
                            status: 301,
                        },
                    )),
                }],
            },
        ],
    };
    Server {
        protocol: Some(ProxyProtocol {
            kind: Some(proxy_protocol::Kind::Http2(proxy_protocol::Http2 {
                routes: vec![route],
                local_rate_limit: Some(HttpLocalRateLimit {
                    metadata: resource("policy.linkerd.io", "HTTPLocalRateLimitPolicy", "books-rl"),
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
                            identities: vec![Identity {
                                name: WEB_ID.into(),
                            }],
                        }),
                    }],
                }),
            })),
        }),
        server_ips: vec!["10.244.2.19".parse::<IpAddr>().unwrap().into()],
        authorizations: vec![Authz {
            networks: all_networks(),
            authentication: Some(Authn {
                permit: Some(authn::Permit::MeshTls(PermitMeshTls {
                    clients: Some(permit_mesh_tls::Clients::Unauthenticated(
                        PermitUnauthenticated {},
                    )),
                })),
            }),
            labels: labels("policy.linkerd.io", "authorizationpolicy", "books-any-mtls"),
            metadata: resource("policy.linkerd.io", "authorizationpolicy", "books-any-mtls"),
        }],
        labels: labels("policy.linkerd.io", "server", "books-http"),
    }
}

#[test]
fn voting_grpc_table() {
    assert_eq!(
        inbound_server_table(&mk_voting_grpc()),
        [
            "SERVER server:voting-grpc",
            "protocol:             gRPC",
            "rate limit:           none",
            "authorizations:       1",
            "AUTHORIZATION                      NETWORKS         AUTHENTICATION",
            "authorizationpolicy:voting-policy  0.0.0.0/0, ::/0  mTLS identities=web.emojivoto.serviceaccount.identity.linkerd.cluster.local",
            "routes:               1",
            "ROUTE            HOSTS  RULE  MATCHES  FILTERS",
            "default:default  *      1     *        -",
            "route authorizations: none",
        ]
        .join("\n")
    );
}

#[test]
fn web_http_table_lists_route_authorizations() {
    assert_eq!(
        inbound_server_table(&mk_web_http()),
        [
            "SERVER server:web-http",
            "protocol:             HTTP/1",
            "rate limit:           none",
            "authorizations:       none",
            "routes:               2",
            "ROUTE                                           HOSTS  RULE  MATCHES                                                FILTERS",
            "httproute.policy.linkerd.io:web-api             *      1     method=GET path=/api/list | method=GET path=/api/vote  -",
            "httproute.gateway.networking.k8s.io:web-static  *      1     path^=/                                                -",
            "route authorizations: 2",
            "ROUTE                                           AUTHORIZATION                   NETWORKS                                           AUTHENTICATION",
            "httproute.policy.linkerd.io:web-api             authorizationpolicy:web-api     0.0.0.0/0, ::/0                                    mTLS identities=default.emojivoto.serviceaccount.identity.linkerd.cluster.local suffixes=*.ingress-nginx.serviceaccount.identity.linkerd.cluster.local",
            "httproute.gateway.networking.k8s.io:web-static  authorizationpolicy:web-static  10.244.0.0/16, 10.20.0.0/16 except 10.20.3.200/32  unauthenticated",
        ]
        .join("\n")
    );
}

#[test]
fn default_server_shows_detect_timeout_and_probe_route() {
    assert_eq!(
        inbound_server_table(&mk_default_admin()),
        [
            "SERVER default:all-unauthenticated",
            "protocol:             Detect (timeout 10s)",
            "rate limit:           none",
            "authorizations:       1",
            "AUTHORIZATION                NETWORKS         AUTHENTICATION",
            "default:all-unauthenticated  0.0.0.0/0, ::/0  unauthenticated",
            "routes:               2",
            "ROUTE            HOSTS  RULE  MATCHES                                         FILTERS",
            "default:default  *      1     path^=/                                         -",
            "default:probe    *      1     method=GET path=/live | method=GET path=/ready  -",
            "route authorizations: 1",
            "ROUTE          AUTHORIZATION  NETWORKS         AUTHENTICATION",
            "default:probe  default:probe  0.0.0.0/0, ::/0  unauthenticated",
        ]
        .join("\n")
    );
}

#[test]
fn rate_limit_hosts_matches_and_filters() {
    assert_eq!(
        inbound_server_table(&mk_rate_limited_http2()),
        [
            "SERVER server:books-http",
            "protocol:             HTTP/2",
            "server IPs:           10.244.2.19",
            "rate limit:           books-rl: total 100/s, per identity 20/s, 50/s for web.emojivoto.serviceaccount.identity.linkerd.cluster.local",
            "authorizations:       1",
            "AUTHORIZATION                       NETWORKS         AUTHENTICATION",
            "authorizationpolicy:books-any-mtls  0.0.0.0/0, ::/0  mTLS any",
            "routes:               1",
            "ROUTE                                      HOSTS                            RULE  MATCHES                                                                              FILTERS",
            "httproute.gateway.networking.k8s.io:books  books.example.com,*.example.com  1     method=PURGE path~=/books/[0-9]+ header[x-env]=prod header[x-user]~=^a.* query[v]=2  request headers: add x-a=1, set x-b=2, remove x-c",
            "                                                                            2     *                                                                                    redirect 301 https://shop.example.com:8443 path^=/shop",
            "route authorizations: none",
        ]
        .join("\n")
    );
}

#[test]
fn opaque_and_tls_servers_have_no_routes() {
    for (kind, text) in [
        (
            proxy_protocol::Kind::Opaque(proxy_protocol::Opaque {}),
            "opaque",
        ),
        (proxy_protocol::Kind::Tls(proxy_protocol::Tls {}), "TLS"),
    ] {
        let server = Server {
            protocol: Some(ProxyProtocol { kind: Some(kind) }),
            labels: labels("policy.linkerd.io", "server", "db"),
            ..Server::default()
        };
        assert_eq!(
            inbound_server_table(&server),
            [
                "SERVER server:db".to_string(),
                format!("protocol:             {text}"),
                "rate limit:           none".into(),
                "authorizations:       none".into(),
            ]
            .join("\n")
        );
        assert_eq!(inbound_server_json(&server)["routes"], json!([]));
    }
}

#[test]
fn an_empty_message_is_rendered_not_refused() {
    let text = inbound_server_table(&Server::default());
    assert!(text.starts_with("SERVER <no labels>\nprotocol:             <unset>"));
    let value = inbound_server_json(&Server::default());
    assert_eq!(value["protocol"], json!({"kind": null, "timeout": null}));
    assert_eq!(value["name"], "<no labels>");
}

#[test]
fn authentication_texts() {
    assert_eq!(authn_text(unauthenticated().as_ref()), "unauthenticated");
    assert_eq!(
        authn_text(identities(&[], &[&[]]).as_ref()),
        "mTLS suffixes=*"
    );
    assert_eq!(
        authn_text(identities(&["a.b", "c.d"], &[&["e", "f"]]).as_ref()),
        "mTLS identities=a.b,c.d suffixes=*.e.f"
    );
    assert_eq!(authn_text(None), "<unset>");
}

#[test]
fn grpc_match_texts() {
    let rpc = |service: &str, method: &str| GrpcRouteMatch {
        rpc: Some(GrpcRpcMatch {
            service: service.into(),
            method: method.into(),
        }),
        headers: vec![],
    };
    assert_eq!(
        grpc_match_text(&rpc("emojivoto.v1.VotingService", "VoteDoughnut")),
        "rpc=emojivoto.v1.VotingService/VoteDoughnut"
    );
    assert_eq!(
        grpc_match_text(&rpc("emojivoto.v1.VotingService", "")),
        "rpc=emojivoto.v1.VotingService/*"
    );
    assert_eq!(grpc_match_text(&rpc("", "")), "*");
}

#[test]
fn voting_grpc_json() {
    let value = inbound_server_json(&mk_voting_grpc());
    assert_eq!(
        value,
        json!({
            "name": "server:voting-grpc",
            "labels": {"group": "policy.linkerd.io", "kind": "server", "name": "voting-grpc"},
            "server_ips": [],
            "protocol": {"kind": "grpc", "timeout": null},
            "authorizations": [{
                "name": "authorizationpolicy:voting-policy",
                "labels": {
                    "group": "policy.linkerd.io",
                    "kind": "authorizationpolicy",
                    "name": "voting-policy"
                },
                "metadata": {"resource": {
                    "group": "policy.linkerd.io",
                    "kind": "authorizationpolicy",
                    "name": "voting-policy",
                    "namespace": "",
                    "section": "",
                    "port": 0
                }},
                "networks": [
                    {"net": "0.0.0.0/0", "except": []},
                    {"net": "::/0", "except": []}
                ],
                "authentication": {
                    "permit": "mtls_identities",
                    "identities": [WEB_ID],
                    "suffixes": []
                }
            }],
            "routes": [{
                "name": "default:default",
                "type": "grpc",
                "metadata": {"default": "default"},
                "hosts": [],
                "rules": [{
                    "matches": [{"rpc": {"service": "", "method": ""}, "headers": []}],
                    "filters": []
                }],
                "authorizations": []
            }],
            "rate_limit": null
        })
    );
}

#[test]
fn http2_json_with_rate_limit_matches_and_filters() {
    let value = inbound_server_json(&mk_rate_limited_http2());
    assert_eq!(value["protocol"], json!({"kind": "http2", "timeout": null}));
    assert_eq!(value["server_ips"], json!(["10.244.2.19"]));
    assert_eq!(
        value["authorizations"][0]["authentication"],
        json!({"permit": "mtls_any", "identities": [], "suffixes": []})
    );
    assert_eq!(
        value["rate_limit"],
        json!({
            "name": "books-rl",
            "metadata": {"resource": {
                "group": "policy.linkerd.io",
                "kind": "HTTPLocalRateLimitPolicy",
                "name": "books-rl",
                "namespace": "",
                "section": "",
                "port": 0
            }},
            "total": 100,
            "identity": 20,
            "overrides": [{"requests_per_second": 50, "identities": [WEB_ID]}]
        })
    );
    let route = &value["routes"][0];
    assert_eq!(route["name"], "httproute.gateway.networking.k8s.io:books");
    assert_eq!(route["type"], "http");
    assert_eq!(
        route["hosts"],
        json!(["books.example.com", "*.example.com"])
    );
    assert_eq!(
        route["rules"][0]["matches"][0],
        json!({
            "path": {"regex": "/books/[0-9]+"},
            "method": "PURGE",
            "headers": [
                {"name": "x-env", "exact": "prod"},
                {"name": "x-user", "regex": "^a.*"}
            ],
            "query_params": [{"name": "v", "exact": "2"}]
        })
    );
    assert_eq!(
        route["rules"][0]["filters"][0],
        json!({"request_header_modifier": {
            "add": [{"name": "x-a", "value": "1"}],
            "set": [{"name": "x-b", "value": "2"}],
            "remove": ["x-c"]
        }})
    );
    assert_eq!(
        route["rules"][1]["filters"][0],
        json!({"redirect": {
            "scheme": "https",
            "host": "shop.example.com",
            "path": {"prefix": "/shop"},
            "port": 8443,
            "status": 301
        }})
    );
}

#[test]
fn detect_json_carries_the_timeout_and_suffixes() {
    let value = inbound_server_json(&mk_default_admin());
    assert_eq!(
        value["protocol"],
        json!({"kind": "detect", "timeout": {"seconds": 10, "nanos": 0}})
    );
    let names: Vec<&str> = value["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default:default", "default:probe"]);

    let web = inbound_server_json(&mk_web_http());
    let authz = &web["routes"][0]["authorizations"][0];
    assert_eq!(authz["name"], "authorizationpolicy:web-api");
    assert_eq!(
        authz["authentication"]["suffixes"],
        json!(["ingress-nginx.serviceaccount.identity.linkerd.cluster.local"])
    );
    let except = &web["routes"][1]["authorizations"][0]["networks"][1];
    assert_eq!(
        *except,
        json!({"net": "10.20.0.0/16", "except": ["10.20.3.200/32"]})
    );
}
