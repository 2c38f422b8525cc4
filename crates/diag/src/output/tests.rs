use super::*;
use linkerd2_proxy_api::destination::{
    AddrSet, AuthorityOverride, NoEndpoints,
    protocol_hint::{H2, Opaque, OpaqueTransport},
    tls_identity::{DnsLikeIdentity, UriLikeIdentity},
};

const WEB_ID: &str = "web.emojivoto.serviceaccount.identity.linkerd.cluster.local";

fn sa(s: &str) -> TcpAddress {
    s.parse::<SocketAddr>().unwrap().into()
}

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn mk_keepalive() -> Http2ClientParams {
    Http2ClientParams {
        keep_alive: Some(KeepAlive {
            interval: Some(prost_types::Duration {
                seconds: 10,
                nanos: 0,
            }),
            timeout: Some(prost_types::Duration {
                seconds: 3,
                nanos: 0,
            }),
            while_idle: true,
        }),
        ..Http2ClientParams::default()
    }
}

/// A meshed pod as the server sends it with the chart defaults: identity and `h2`.
fn mk_web() -> WeightedAddr {
    WeightedAddr {
        addr: Some(sa("10.244.2.19:8080")),
        weight: 10_000,
        metric_labels: labels(&[
            ("pod", "web-djjwbqr6lt-sfd7g"),
            ("deployment", "web"),
            ("serviceaccount", "web"),
            ("zone", "eu-west-1c"),
            ("zone_locality", "unknown"),
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
        http2: Some(mk_keepalive()),
        ..WeightedAddr::default()
    }
}

/// A meshed pod on an opaque port, over IPv6, with a URI identity and no zone.
fn mk_mysql() -> WeightedAddr {
    WeightedAddr {
        addr: Some(sa("[fd00:10:244::7]:3306")),
        weight: 10_000,
        metric_labels: labels(&[("pod", "mysql-0"), ("statefulset", "mysql"), ("zone", "")]),
        tls_identity: Some(TlsIdentity {
            server_name: None,
            strategy: Some(Strategy::UriLikeIdentity(UriLikeIdentity {
                uri: "spiffe://cluster.local/ns/db/sa/mysql".into(),
            })),
        }),
        protocol_hint: Some(ProtocolHint {
            protocol: Some(Protocol::Opaque(Opaque {})),
            opaque_transport: Some(OpaqueTransport { inbound_port: 4143 }),
        }),
        ..WeightedAddr::default()
    }
}

/// An unmeshed address with nothing but its address and an authority override.
fn mk_external() -> WeightedAddr {
    WeightedAddr {
        addr: Some(sa("192.0.2.1:80")),
        weight: 10_000,
        authority_override: Some(AuthorityOverride {
            authority_override: "ext.example.com:80".into(),
        }),
        ..WeightedAddr::default()
    }
}

fn mk_add(addrs: Vec<WeightedAddr>) -> Update {
    Update {
        update: Some(update::Update::Add(WeightedAddrSet {
            addrs,
            metric_labels: labels(&[("service", "web-svc"), ("namespace", "emojivoto")]),
        })),
    }
}

fn mk_remove(addrs: &[&str]) -> Update {
    Update {
        update: Some(update::Update::Remove(AddrSet {
            addrs: addrs.iter().map(|a| sa(a)).collect(),
        })),
    }
}

fn mk_no_endpoints(exists: bool) -> Update {
    Update {
        update: Some(update::Update::NoEndpoints(NoEndpoints { exists })),
    }
}

#[test]
fn add_json_has_every_field() {
    let json = update_json(&mk_add(vec![mk_web(), mk_mysql()]));
    assert_eq!(
        json,
        json!({"add": {
            "addrs": [
                {
                    "addr": "10.244.2.19:8080",
                    "weight": 10000,
                    "identity": WEB_ID,
                    "server_name": WEB_ID,
                    "protocol_hint": "h2",
                    "opaque_transport_port": null,
                    "authority_override": null,
                    "metric_labels": {
                        "deployment": "web",
                        "pod": "web-djjwbqr6lt-sfd7g",
                        "serviceaccount": "web",
                        "zone": "eu-west-1c",
                        "zone_locality": "unknown",
                    },
                    "http2": {
                        "flow_control": null,
                        "keep_alive": {
                            "interval": {"seconds": 10, "nanos": 0},
                            "timeout": {"seconds": 3, "nanos": 0},
                            "while_idle": true,
                        },
                        "internals": null,
                    },
                    "resource_ref": null,
                },
                {
                    "addr": "[fd00:10:244::7]:3306",
                    "weight": 10000,
                    "identity": "spiffe://cluster.local/ns/db/sa/mysql",
                    "server_name": null,
                    "protocol_hint": "opaque",
                    "opaque_transport_port": 4143,
                    "authority_override": null,
                    "metric_labels": {"pod": "mysql-0", "statefulset": "mysql", "zone": ""},
                    "http2": null,
                    "resource_ref": null,
                },
            ],
            "metric_labels": {"namespace": "emojivoto", "service": "web-svc"},
        }})
    );
}

#[test]
fn json_line_has_sorted_keys() {
    let mut out = Vec::new();
    write_update(&mut out, OutputFormat::Json, &mk_add(vec![mk_external()])).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        concat!(
            r#"{"add":{"addrs":[{"addr":"192.0.2.1:80","authority_override":"ext.example.com:80","#,
            r#""http2":null,"identity":null,"metric_labels":{},"opaque_transport_port":null,"#,
            r#""protocol_hint":null,"resource_ref":null,"server_name":null,"weight":10000}],"#,
            r#""metric_labels":{"namespace":"emojivoto","service":"web-svc"}}}"#,
            "\n"
        )
    );
}

#[test]
fn remove_and_no_endpoints_json() {
    assert_eq!(
        update_json(&mk_remove(&["10.244.0.23:8080", "[fd00::1]:80"])).to_string(),
        r#"{"remove":{"addrs":["10.244.0.23:8080","[fd00::1]:80"]}}"#
    );
    assert_eq!(
        update_json(&mk_no_endpoints(false)).to_string(),
        r#"{"no_endpoints":{"exists":false}}"#
    );
    assert_eq!(
        update_json(&mk_no_endpoints(true)).to_string(),
        r#"{"no_endpoints":{"exists":true}}"#
    );
    assert_eq!(update_json(&Update { update: None }).to_string(), "{}");
}

#[test]
fn add_table_aligns_columns() {
    let table = update_table(&mk_add(vec![mk_web(), mk_mysql(), mk_external()]));
    let expected = [
        "ADD 3 addresses (namespace=emojivoto,service=web-svc)",
        "ADDRESS                CLUSTER  IDENTITY                                                     ZONE        HINT                     LABELS",
        "10.244.2.19:8080       local    web.emojivoto.serviceaccount.identity.linkerd.cluster.local  eu-west-1c  h2                       deployment=web,pod=web-djjwbqr6lt-sfd7g,serviceaccount=web,zone_locality=unknown",
        "[fd00:10:244::7]:3306  local    spiffe://cluster.local/ns/db/sa/mysql                        -           opaque (transport 4143)  pod=mysql-0,statefulset=mysql",
        "192.0.2.1:80           local    -                                                            -           -                        -",
    ]
    .join("\n");
    assert_eq!(table, expected);
}

#[test]
fn add_table_shows_the_linked_cluster_of_remote_addresses() {
    let mut add = mk_add(vec![mk_web()]);
    if let Some(update::Update::Add(set)) = &mut add.update {
        set.metric_labels
            .insert("target_cluster".into(), "east".into());
    }
    let table = update_table(&add);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0],
        "ADD 1 address (namespace=emojivoto,service=web-svc,target_cluster=east)"
    );
    let header: Vec<&str> = lines[1].split_whitespace().collect();
    let row: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(header[..3], ["ADDRESS", "CLUSTER", "IDENTITY"]);
    assert_eq!(row[..2], ["10.244.2.19:8080", "east"]);
}

/// The set a federated stream's client holds, as `dst-diag stream ID` gets it, mixes clusters:
/// each address then carries its own `target_cluster`.
#[test]
fn add_table_shows_an_addresss_own_linked_cluster() {
    let mut remote = mk_mysql();
    remote
        .metric_labels
        .insert("target_cluster".into(), "east".into());
    let table = update_table(&mk_add(vec![mk_web(), remote]));
    let rows: Vec<Vec<&str>> = table
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().take(2).collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["10.244.2.19:8080", "local"],
            ["[fd00:10:244::7]:3306", "east"]
        ]
    );
}

#[test]
fn remove_and_no_endpoints_table() {
    assert_eq!(
        update_table(&mk_remove(&["10.244.0.23:8080", "10.244.1.5:8080"])),
        "REMOVE 2 addresses\nADDRESS\n10.244.0.23:8080\n10.244.1.5:8080"
    );
    assert_eq!(
        update_table(&mk_remove(&["10.244.0.23:8080"])),
        "REMOVE 1 address\nADDRESS\n10.244.0.23:8080"
    );
    assert_eq!(
        update_table(&mk_no_endpoints(true)),
        "NO ENDPOINTS exists=true"
    );
    assert_eq!(
        update_table(&mk_no_endpoints(false)),
        "NO ENDPOINTS exists=false"
    );
    assert_eq!(update_table(&Update { update: None }), "EMPTY UPDATE");
}

#[test]
fn table_blocks_end_with_an_empty_line() {
    let mut out = Vec::new();
    write_update(&mut out, OutputFormat::Table, &mk_no_endpoints(false)).unwrap();
    write_update(
        &mut out,
        OutputFormat::Table,
        &mk_remove(&["10.244.0.23:8080"]),
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "NO ENDPOINTS exists=false\n\nREMOVE 1 address\nADDRESS\n10.244.0.23:8080\n\n"
    );
}

#[test]
fn empty_add_has_no_column_header() {
    let update = Update {
        update: Some(update::Update::Add(WeightedAddrSet::default())),
    };
    assert_eq!(update_table(&update), "ADD 0 addresses");
    assert_eq!(
        update_json(&update).to_string(),
        r#"{"add":{"addrs":[],"metric_labels":{}}}"#
    );
}

#[test]
fn unreadable_addresses_are_shown_not_dropped() {
    let no_ip = TcpAddress { ip: None, port: 80 };
    let big_port = TcpAddress {
        port: 70_000,
        ..sa("10.0.0.1:1")
    };
    let update = Update {
        update: Some(update::Update::Remove(AddrSet {
            addrs: vec![no_ip, big_port],
        })),
    };
    assert_eq!(
        update_json(&update).to_string(),
        r#"{"remove":{"addrs":["<no IP>:80","<invalid port 70000>"]}}"#
    );
    let add = WeightedAddr {
        addr: None,
        ..mk_external()
    };
    assert_eq!(weighted_addr_json(&add)["addr"], "<no address>");
}

#[test]
fn hint_text_covers_every_combination() {
    let hint = |protocol, port: Option<u32>| ProtocolHint {
        protocol,
        opaque_transport: port.map(|inbound_port| OpaqueTransport { inbound_port }),
    };
    assert_eq!(hint_text(None), "-");
    assert_eq!(hint_text(Some(&hint(None, None))), "-");
    assert_eq!(
        hint_text(Some(&hint(Some(Protocol::H2(H2 {})), None))),
        "h2"
    );
    assert_eq!(
        hint_text(Some(&hint(Some(Protocol::H2(H2 {})), Some(4143)))),
        "h2 (transport 4143)"
    );
    assert_eq!(
        hint_text(Some(&hint(Some(Protocol::Opaque(Opaque {})), Some(4143)))),
        "opaque (transport 4143)"
    );
    assert_eq!(hint_text(Some(&hint(None, Some(4143)))), "transport 4143");
}

#[test]
fn resource_ref_json() {
    use linkerd2_proxy_api::meta::Resource;
    let pod = Metadata {
        kind: Some(metadata::Kind::Resource(Resource {
            kind: "Pod".into(),
            name: "web-djjwbqr6lt-sfd7g".into(),
            namespace: "emojivoto".into(),
            ..Resource::default()
        })),
    };
    assert_eq!(
        metadata_json(&pod),
        json!({"resource": {"group": "", "kind": "Pod", "name": "web-djjwbqr6lt-sfd7g", "namespace": "emojivoto", "section": "", "port": 0}})
    );
    let default = Metadata {
        kind: Some(metadata::Kind::Default("all-authenticated".into())),
    };
    assert_eq!(
        metadata_json(&default),
        json!({"default": "all-authenticated"})
    );
}
