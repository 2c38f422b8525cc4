//! An address that is not an IP address, or a port outside 1-65535 (a hand-written
//! manifest's typo), is logged with the object, the field and the value, and skipped alone:
//! the object's other addresses and ports are kept.

mod support;

use k8s_openapi::api::{
    core::v1::{Pod, Service},
    discovery::v1::EndpointSlice,
};
use linkerd_index::model::decode_json;
use std::net::IpAddr;
use support::logged;

#[test]
fn a_pod_ip_that_does_not_parse_is_logged_and_skipped_alone() {
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"shop"},
        "spec":{"containers":[{"name":"app"}]},
        "status":{"phase":"Running","podIP":"10.0.0.7",
            "podIPs":[{"ip":"10.0.0.7"},{"ip":"fd00::7x"}],
            "hostIPs":[{"ip":"not-an-ip"},{"ip":"192.168.1.2"}]}}"#;
    let (decoded, log) = logged(|| decode_json::<Pod>(pod));
    let pod = decoded.expect("the pod decodes");
    assert_eq!(pod.ips, ["10.0.0.7".parse::<IpAddr>().unwrap()]);
    assert_eq!(pod.host_ips, ["192.168.1.2".parse::<IpAddr>().unwrap()]);
    assert!(log.contains("shop/web-1"), "{log}");
    assert!(
        log.contains("status.podIPs") && log.contains("fd00::7x"),
        "{log}"
    );
    assert!(
        log.contains("status.hostIPs") && log.contains("not-an-ip"),
        "{log}"
    );
}

/// A pod with only `status.podIP` and `status.hostIP` (older API servers, hand-written
/// manifests): the log names those fields, not `podIPs` and `hostIPs` (newcomer finding for
/// `hostIP`).
#[test]
fn a_bad_pod_ip_without_pod_ips_names_its_field() {
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-2","namespace":"shop"},
        "spec":{"containers":[{"name":"app"}]},
        "status":{"phase":"Running","podIP":"10.0.0.300","hostIP":"1.2.3"}}"#;
    let (decoded, log) = logged(|| decode_json::<Pod>(pod));
    let pod = decoded.expect("the pod decodes");
    assert!(pod.ips.is_empty() && pod.host_ips.is_empty());
    assert!(
        log.contains("field=status.podIP ") && log.contains("10.0.0.300"),
        "{log}"
    );
    assert!(
        log.contains("field=status.hostIP ") && log.contains("1.2.3"),
        "{log}"
    );
}

/// A bad `status.podIP` (or `status.hostIP`) is logged naming its field even when the list
/// beside it is good, and so not read (tester finding: `podIP` `10.244.0.270` beside a good
/// `podIPs[0]` was skipped without a line).
#[test]
fn a_bad_pod_ip_beside_good_pod_ips_is_logged() {
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-3","namespace":"shop"},
        "spec":{"containers":[{"name":"app"}]},
        "status":{"phase":"Running","podIP":"10.244.0.270","podIPs":[{"ip":"10.244.0.27"}],
            "hostIP":"192.168.1.300","hostIPs":[{"ip":"192.168.1.3"}]}}"#;
    let (decoded, log) = logged(|| decode_json::<Pod>(pod));
    let pod = decoded.expect("the pod decodes");
    assert_eq!(pod.ips, ["10.244.0.27".parse::<IpAddr>().unwrap()]);
    assert_eq!(pod.host_ips, ["192.168.1.3".parse::<IpAddr>().unwrap()]);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("skipping")).collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(
        lines[0].contains("object=shop/web-3")
            && lines[0].contains("field=status.podIP ")
            && lines[0].contains("address=10.244.0.270")
            && lines[0].contains("not an IP address"),
        "{log}"
    );
    assert!(
        lines[1].contains("field=status.hostIP ") && lines[1].contains("address=192.168.1.300"),
        "{log}"
    );

    // Both bad: each field is logged with its own value.
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-4","namespace":"shop"},
        "spec":{"containers":[{"name":"app"}]},
        "status":{"phase":"Running","podIP":"10.244.0.270","podIPs":[{"ip":"10.244.0.270"}]}}"#;
    let (decoded, log) = logged(|| decode_json::<Pod>(pod));
    assert!(decoded.expect("the pod decodes").ips.is_empty());
    let fields: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("address=10.244.0.270"))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("field=")))
        .collect();
    assert_eq!(
        fields,
        ["field=status.podIP", "field=status.podIPs"],
        "{log}"
    );
}

#[test]
fn a_slice_address_that_does_not_parse_is_logged_and_skipped_alone() {
    let slice = r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
        "metadata":{"name":"web-abc","namespace":"shop","labels":{"kubernetes.io/service-name":"web"}},
        "addressType":"IPv4","ports":[{"port":8080}],
        "endpoints":[{"addresses":["10.0.0.8","10.0.0.300"]},{"addresses":["10.0.0.9"]}]}"#;
    let (addresses, log) = slice_addresses(slice);
    assert_eq!(
        addresses,
        [
            vec!["10.0.0.8".parse::<IpAddr>().unwrap()],
            vec!["10.0.0.9".parse().unwrap()]
        ]
    );
    assert!(
        log.contains("shop/web-abc") && log.contains("10.0.0.300"),
        "{log}"
    );

    // An FQDN slice's host names are no IP endpoints, and no typo either: nothing is logged.
    let fqdn = slice_json_fqdn();
    let (decoded, log) = logged(|| decode_json::<EndpointSlice>(&fqdn));
    assert!(decoded.expect("decodes").endpoints[0].addresses.is_empty());
    assert!(!log.contains("not an IP address"), "{log}");
}

/// An address of the other family than the slice's `addressType` (the API server refuses
/// it) is logged and skipped alone, in either direction.
#[test]
fn a_slice_address_of_the_other_family_is_logged_and_skipped_alone() {
    for (address_type, good, other) in [
        ("IPv4", "10.0.0.8", "fd00::8"),
        ("IPv6", "fd00::9", "10.0.0.9"),
    ] {
        let slice = format!(
            r#"{{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
            "metadata":{{"name":"web-{address_type}","namespace":"shop"}},
            "addressType":"{address_type}","ports":[{{"port":8080}}],
            "endpoints":[{{"addresses":["{other}"]}},{{"addresses":["{good}"]}}]}}"#
        );
        let (addresses, log) = slice_addresses(&slice);
        assert_eq!(addresses, [vec![], vec![good.parse::<IpAddr>().unwrap()]]);
        assert!(
            log.contains(&format!("shop/web-{address_type}"))
                && log.contains(other)
                && log.contains(&format!("not of the object's address type {address_type}")),
            "{log}"
        );
    }
}

/// A cluster IP that does not parse is logged and skipped alone; `None` (headless) and `""`
/// (a manifest leaving it to the API server) are no typos.
#[test]
fn a_cluster_ip_that_does_not_parse_is_logged_and_skipped_alone() {
    let service = |spec: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"web","namespace":"shop"}},
            "spec":{{{spec},"ports":[{{"port":80}}]}}}}"#
        )
    };
    let (decoded, log) = logged(|| decode_json::<Service>(&service(r#""clusterIP":"10.0.0.300""#)));
    assert!(decoded.expect("the service decodes").cluster_ips.is_empty());
    assert!(
        log.contains("shop/web")
            && log.contains("field=spec.clusterIP ")
            && log.contains("10.0.0.300"),
        "{log}"
    );

    let (decoded, log) = logged(|| {
        decode_json::<Service>(&service(
            r#""clusterIP":"10.0.0.12","clusterIPs":["10.0.0.12","fd00::12x"]"#,
        ))
    });
    let ips = decoded.expect("the service decodes").cluster_ips;
    assert_eq!(ips, ["10.0.0.12".parse::<IpAddr>().unwrap()]);
    assert!(
        log.contains("spec.clusterIPs") && log.contains("fd00::12x"),
        "{log}"
    );

    // A bad `clusterIP` beside a good `clusterIPs` is logged too, under its own field.
    let (decoded, log) = logged(|| {
        decode_json::<Service>(&service(
            r#""clusterIP":"10.0.0.300","clusterIPs":["10.0.0.13"]"#,
        ))
    });
    let ips = decoded.expect("the service decodes").cluster_ips;
    assert_eq!(ips, ["10.0.0.13".parse::<IpAddr>().unwrap()]);
    assert!(
        log.contains("field=spec.clusterIP ") && log.contains("address=10.0.0.300"),
        "{log}"
    );

    for spec in [
        r#""clusterIP":"None""#,
        r#""clusterIP":"""#,
        r#""clusterIPs":["None"]"#,
        r#""clusterIP":"None","clusterIPs":["None"]"#,
    ] {
        let (decoded, log) = logged(|| decode_json::<Service>(&service(spec)));
        assert!(decoded.expect("decodes").cluster_ips.is_empty(), "{spec}");
        assert!(!log.contains("skipping"), "{spec}: {log}");
    }
}

/// A slice port outside 1-65535 (the API server refuses it) is logged and skipped alone
/// (tester finding: `70000` was dropped without a word, so a Service that lost its port
/// looked healthy in the log). A `ports[]` entry without a port is no typo: not logged.
#[test]
fn a_slice_port_out_of_range_is_logged_and_skipped_alone() {
    let slice = r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
        "metadata":{"name":"web-p","namespace":"shop","labels":{"kubernetes.io/service-name":"web"}},
        "addressType":"IPv4",
        "ports":[{"name":"http","port":8080},{"name":"big","port":70000},{"name":"zero","port":0},
            {"name":"neg","port":-1},{"name":"any"}],
        "endpoints":[{"addresses":["10.0.0.8"]}]}"#;
    let (decoded, log) = logged(|| decode_json::<EndpointSlice>(slice));
    let slice = decoded.expect("the slice decodes");
    let ports: Vec<(String, u16)> = slice
        .ports
        .expect("ports are set")
        .into_iter()
        .map(|p| (p.name, p.port))
        .collect();
    assert_eq!(ports, [("http".to_string(), 8080)]);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("skipping")).collect();
    assert_eq!(lines.len(), 3, "{log}");
    for (line, port) in lines.iter().zip(["70000", "0", "-1"]) {
        assert!(
            line.contains("object=shop/web-p")
                && line.contains("field=ports.port")
                && line.contains(&format!("port={port}"))
                && line.contains("not 1-65535"),
            "{log}"
        );
    }
    assert_eq!(slice.endpoints[0].addresses.len(), 1);
}

/// A Pod's `containerPort` or `hostPort` outside 1-65535 is logged and skipped; a `hostPort`
/// of 0 means none and is not logged.
#[test]
fn a_pod_port_out_of_range_is_logged_and_skipped_alone() {
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-4","namespace":"shop"},
        "spec":{"containers":[{"name":"app","ports":[
            {"name":"http","containerPort":8080,"hostPort":0},
            {"name":"admin","containerPort":99999},
            {"name":"metrics","containerPort":9090,"hostPort":-5}]}]},
        "status":{"phase":"Running","podIP":"10.0.0.4"}}"#;
    let (decoded, log) = logged(|| decode_json::<Pod>(pod));
    let pod = decoded.expect("the pod decodes");
    let ports: Vec<(Option<&str>, u16, Option<u16>)> = pod
        .container_ports
        .iter()
        .map(|p| (p.name.as_deref(), p.container_port, p.host_port))
        .collect();
    assert_eq!(
        ports,
        [(Some("http"), 8080, None), (Some("metrics"), 9090, None)]
    );
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("skipping")).collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(
        lines[0].contains("object=shop/web-4")
            && lines[0].contains("field=containerPort")
            && lines[0].contains("port=99999"),
        "{log}"
    );
    assert!(
        lines[1].contains("field=hostPort") && lines[1].contains("port=-5"),
        "{log}"
    );
}

/// A slice whose `addressType` is not IPv4, IPv6 or FQDN (the API server refuses it) has no
/// address read, and says so (tester finding: `Banana` dropped them without a word; a missing
/// one was logged as a blank `address_type=`); an FQDN slice's are not read either, without a
/// line.
#[test]
fn a_slice_of_an_unknown_address_type_is_logged() {
    let slice = r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
        "metadata":{"name":"web-b","namespace":"shop","labels":{"kubernetes.io/service-name":"web"}},
        "addressType":"Banana","ports":[{"port":8080}],
        "endpoints":[{"addresses":["10.0.0.8"]}]}"#;
    let (addresses, log) = slice_addresses(slice);
    assert_eq!(addresses, [Vec::<IpAddr>::new()]);
    assert!(
        log.contains("object=shop/web-b")
            && log.contains("address_type=\"Banana\"")
            && log.contains("not IPv4, IPv6 or FQDN"),
        "{log}"
    );
    let missing = slice.replace(r#""addressType":"Banana","#, "");
    let (addresses, log) = slice_addresses(&missing);
    assert_eq!(addresses, [Vec::<IpAddr>::new()]);
    assert!(log.contains(r#"address_type="""#), "{log}");
    let (_, log) = logged(|| decode_json::<EndpointSlice>(&slice_json_fqdn()));
    assert!(!log.contains("addressType"), "{log}");
}

/// The addresses of each endpoint of the EndpointSlice `json`, and what decoding it logged.
fn slice_addresses(json: &str) -> (Vec<Vec<IpAddr>>, String) {
    let (decoded, log) = logged(|| decode_json::<EndpointSlice>(json));
    let slice = decoded.expect("the slice decodes");
    (
        slice.endpoints.into_iter().map(|e| e.addresses).collect(),
        log,
    )
}

fn slice_json_fqdn() -> String {
    r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
        "metadata":{"name":"ext","namespace":"shop"},"addressType":"FQDN",
        "endpoints":[{"addresses":["db.example.com"]}]}"#
        .to_string()
}
