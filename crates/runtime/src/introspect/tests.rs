use super::*;
use linkerd_introspection_api::ListStreamsRequest;
use std::time::Duration;
use tokio::sync::watch;

/// Reads the current view of `rx`, as the index's `Receiver::current_view` does.
fn current(rx: &watch::Receiver<Arc<u32>>) -> impl Fn() -> Arc<u32> + Send + Sync + 'static {
    let rx = rx.clone();
    move || rx.borrow().clone()
}

fn meta(api: &'static str, target: &str, pod: Option<&str>, peer: &str) -> StreamMeta {
    StreamMeta {
        api,
        peer: Some(peer.parse().unwrap()),
        client_identity: None,
        target: target.to_string(),
        pod: pod.map(str::to_string),
        context_token: format!("token of {target}"),
    }
}

fn ids(summaries: &[StreamSummary]) -> Vec<u64> {
    summaries.iter().map(|s| s.id).collect()
}

#[test]
fn streams_are_listed_in_open_order_with_filters_and_leave_when_dropped() {
    let registry = StreamRegistry::new();
    let (_tx, rx) = watch::channel(Arc::new(1u32));
    let a = registry.open_following(
        meta(
            "Get",
            "web.emojivoto.svc.cluster.local:80",
            Some("emojivoto/vote-bot"),
            "10.0.0.1:4000",
        ),
        current(&rx),
    );
    let b = registry.open_following(
        meta(
            "GetProfile",
            "web.emojivoto.svc.cluster.local:80",
            Some("emojivoto/web-0"),
            "10.0.0.2:4000",
        ),
        current(&rx),
    );
    let c = registry.open(meta(
        "WatchPort",
        "emojivoto:web-0 port 8080",
        Some("emojivoto/web-0"),
        "10.0.0.2:4001",
    ));

    let all = registry.list(&StreamFilter::default());
    assert_eq!(ids(&all), [a.id(), b.id(), c.id()]);
    assert_eq!(
        all[0].meta.context_token,
        "token of web.emojivoto.svc.cluster.local:80"
    );
    assert_eq!(all[2].meta.api, "WatchPort");

    let by_pod = StreamFilter {
        pod: Some("emojivoto/web-0".into()),
        ..StreamFilter::default()
    };
    assert_eq!(ids(&registry.list(&by_pod)), [b.id(), c.id()]);
    let by_api = StreamFilter {
        api: Some("GetProfile".into()),
        ..StreamFilter::default()
    };
    assert_eq!(ids(&registry.list(&by_api)), [b.id()]);
    let by_peer = StreamFilter {
        peer_ip: Some("10.0.0.1".parse().unwrap()),
        ..StreamFilter::default()
    };
    assert_eq!(ids(&registry.list(&by_peer)), [a.id()]);
    let by_target = StreamFilter {
        target_contains: Some("port 8080".into()),
        ..StreamFilter::default()
    };
    assert_eq!(ids(&registry.list(&by_target)), [c.id()]);

    let b_id = b.id();
    drop(b);
    assert_eq!(
        ids(&registry.list(&StreamFilter::default())),
        [a.id(), c.id()]
    );
    assert!(registry.get(b_id).is_none());
    assert_eq!(registry.len(), 2);
}

#[test]
fn a_stream_is_shown_as_its_request_described_it() {
    let registry = StreamRegistry::new();
    let described = [
        StreamMeta {
            client_identity: Some(
                "web.default.serviceaccount.identity.linkerd.cluster.local".into(),
            ),
            ..meta(
                "Get",
                "web.default.svc.cluster.local:80",
                Some("default/web-0"),
                "10.0.0.1:4000",
            )
        },
        // Empty strings stay apart from missing ones.
        StreamMeta {
            api: "WatchPort",
            peer: None,
            client_identity: Some(String::new()),
            target: String::new(),
            pod: Some(String::new()),
            context_token: String::new(),
        },
        StreamMeta {
            pod: None,
            ..meta("Watch", "héllo ✓ port 80", None, "[::1]:9000")
        },
        // A pod that leads the target, kept once.
        meta(
            "WatchPort",
            "emojivoto/web-0 port 8080",
            Some("emojivoto/web-0"),
            "10.0.0.2:4000",
        ),
        // One that starts the target but is longer than a pod part of it would be.
        meta(
            "WatchPort",
            "emojivoto/web-0 port 8080",
            Some("emojivoto/web-0 port 8080 and more"),
            "10.0.0.2:4000",
        ),
    ];
    let records: Vec<_> = described.iter().map(|m| registry.open(m.clone())).collect();
    let listed: Vec<StreamMeta> = registry
        .list(&StreamFilter::default())
        .into_iter()
        .map(|s| s.meta)
        .collect();
    assert_eq!(listed, described);
    let filter = StreamFilter {
        pod: Some(String::new()),
        ..Default::default()
    };
    assert_eq!(ids(&registry.list(&filter)), vec![records[1].id()]);
    let filter = StreamFilter {
        target_contains: Some("✓".into()),
        ..Default::default()
    };
    assert_eq!(ids(&registry.list(&filter)), vec![records[2].id()]);
    let filter = StreamFilter {
        pod: Some("emojivoto/web-0".into()),
        ..Default::default()
    };
    assert_eq!(ids(&registry.list(&filter)), vec![records[3].id()]);
}

#[test]
fn a_pod_that_leads_the_target_is_kept_once() {
    let packed = PackedMeta::new(meta(
        "WatchPort",
        "emojivoto/web-0 port 8080",
        Some("emojivoto/web-0"),
        "10.0.0.2:4000",
    ));
    assert_eq!(packed.pod(), Some("emojivoto/web-0"));
    assert_eq!(
        packed.text.len(),
        "emojivoto/web-0 port 8080".len() + "token of emojivoto/web-0 port 8080".len()
    );
}

/// A request may carry 64 KiB of context token or target: a stream keeps a bounded prefix, or
/// a few clients could fill the server and make the introspection API's answer too large.
#[test]
fn a_stream_keeps_at_most_a_bounded_prefix_of_each_string() {
    let registry = StreamRegistry::new();
    let huge = format!(
        "{{\"ns\":\"emojivoto\",\"x\":\"{}\"}}",
        "é".repeat(2_000_000)
    );
    let _record = registry.open(StreamMeta {
        api: "Get",
        peer: None,
        client_identity: Some("y".repeat(MAX_META_BYTES)),
        target: huge.clone(),
        pod: Some(huge.clone()),
        context_token: huge.clone(),
    });
    let listed = registry.list(&StreamFilter::default()).remove(0).meta;
    for kept in [
        &listed.target,
        listed.pod.as_ref().unwrap(),
        &listed.context_token,
    ] {
        assert!(kept.len() <= MAX_META_BYTES, "{} bytes kept", kept.len());
        assert!(kept.len() > MAX_META_BYTES - 8, "{} bytes kept", kept.len());
        assert!(kept.ends_with(CUT), "{kept}");
        assert!(huge.starts_with(kept.strip_suffix(CUT).unwrap()));
    }
    // A string of the limit exactly is kept whole.
    assert_eq!(listed.client_identity.unwrap(), "y".repeat(MAX_META_BYTES));
}

#[test]
fn a_stream_is_behind_until_it_writes_out_the_topics_newest_view() {
    let registry = StreamRegistry::new();
    let (tx, rx) = watch::channel(Arc::new(1u32));
    let record = registry.open_following(meta("Get", "a:80", None, "127.0.0.1:1"), current(&rx));
    // Before its first message.
    assert!(registry.list(&StreamFilter::default())[0].behind);

    let first = rx.borrow().clone();
    record.sent(1, Some(LastSent::message("test.UInt32", 1u32)));
    record.caught_up(&first, true, None);
    assert!(!registry.list(&StreamFilter::default())[0].behind);
    assert_eq!(registry.behind_counts()["Get"], 0);

    tx.send(Arc::new(2)).unwrap();
    let summary = &registry.list(&StreamFilter::default())[0];
    assert!(summary.behind);
    assert_eq!(summary.messages_sent, 1);
    assert_eq!(registry.behind_counts()["Get"], 1);
    let behind_only = StreamFilter {
        behind_only: true,
        ..StreamFilter::default()
    };
    assert_eq!(registry.list(&behind_only).len(), 1);

    // The stream wrote the new view out.
    let second = rx.borrow().clone();
    record.sent(2, None);
    record.caught_up(&second, true, None);
    let summary = &registry.list(&StreamFilter::default())[0];
    assert!(!summary.behind);
    assert_eq!(summary.messages_sent, 3);
    assert!(summary.last_sent_at.is_some());
    // `None` keeps what was last sent.
    let (_, last) = registry.get(record.id()).unwrap();
    let (type_name, bytes) = last.unwrap();
    assert_eq!(type_name, "test.UInt32");
    assert_eq!(<u32 as prost::Message>::decode(&bytes[..]).unwrap(), 1);
}

/// A stream of several topics (a multicluster `Get`) says itself whether it is behind; the
/// registry shows what it says, and the last message it reported.
#[test]
fn a_stream_of_several_topics_is_behind_when_it_says_so() {
    use std::sync::atomic::AtomicBool;
    let registry = StreamRegistry::new();
    let behind = Arc::new(AtomicBool::new(true));
    let says = behind.clone();
    let record = registry
        .open_following_several(meta("Get", "a:80", None, "127.0.0.1:1"), move || {
            says.load(Ordering::SeqCst)
        });
    assert!(registry.list(&StreamFilter::default())[0].behind);
    assert_eq!(registry.behind_counts()["Get"], 1);

    record.sent(1, Some(LastSent::message("test.UInt32", 7u32)));
    behind.store(false, Ordering::SeqCst);
    let summary = &registry.list(&StreamFilter::default())[0];
    assert!(!summary.behind);
    assert_eq!(summary.messages_sent, 1);
    assert_eq!(registry.behind_counts()["Get"], 0);
    let behind_only = StreamFilter {
        behind_only: true,
        ..StreamFilter::default()
    };
    assert!(registry.list(&behind_only).is_empty());

    behind.store(true, Ordering::SeqCst);
    assert_eq!(ids(&registry.list(&behind_only)), [record.id()]);
    let (summary, last) = registry.get(record.id()).unwrap();
    assert!(summary.behind);
    let (type_name, bytes) = last.unwrap();
    assert_eq!(type_name, "test.UInt32");
    assert_eq!(<u32 as prost::Message>::decode(&bytes[..]).unwrap(), 7);
    // Its record keeps no view: `caught_up` leaves what it says alone.
    record.caught_up(&Arc::new(()), true, None);
    assert!(registry.list(&StreamFilter::default())[0].behind);
}

/// A policy watch's record holds no message: the last one shown is the translation of the
/// view the stream wrote out, made when the introspection API asks.
#[test]
fn a_view_stream_shows_the_message_of_the_view_it_wrote_out() {
    use std::sync::atomic::AtomicUsize;
    let registry = StreamRegistry::new();
    let (tx, rx) = watch::channel(Arc::new(1u32));
    let encoded = Arc::new(AtomicUsize::new(0));
    let counter = encoded.clone();
    let record = registry.open_views(
        meta("WatchPort", "w port 1", None, "127.0.0.1:1"),
        current(&rx),
        move |view: &u32| {
            counter.fetch_add(1, Ordering::SeqCst);
            ("test.UInt32", prost::Message::encode_to_vec(&(view * 10)))
        },
    );
    let last = |registry: &StreamRegistry| {
        let (summary, last) = registry.get(record.id()).unwrap();
        let last = last.map(|(type_name, bytes)| {
            assert_eq!(type_name, "test.UInt32");
            <u32 as prost::Message>::decode(&bytes[..]).unwrap()
        });
        (summary.behind, last)
    };
    assert_eq!(last(&registry), (true, None), "nothing written out yet");

    let first = rx.borrow().clone();
    record.sent(1, None);
    record.caught_up(&first, true, None);
    assert_eq!(last(&registry), (false, Some(10)));
    // A newer view the stream has not written out yet is not what it sent.
    tx.send(Arc::new(2)).unwrap();
    assert_eq!(last(&registry), (true, Some(10)));
    let second = rx.borrow().clone();
    record.sent(1, None);
    record.caught_up(&second, true, None);
    assert_eq!(last(&registry), (false, Some(20)));
    assert_eq!(registry.list(&StreamFilter::default())[0].messages_sent, 2);
    assert_eq!(encoded.load(Ordering::SeqCst), 3, "encoded only when asked");
}

#[test]
fn one_convergence_observation_per_change_a_stream_writes() {
    let mut metrics = Registry::default();
    let registry = StreamRegistry::register(&mut metrics, &["Get"]);
    let (_tx, rx) = watch::channel(Arc::new(1u32));
    let record = registry.open_following(
        meta("WatchPort", "w port 1", None, "127.0.0.1:1"),
        current(&rx),
    );
    let view = rx.borrow().clone();
    record.caught_up(&view, true, None);
    // Not written: no observation.
    record.caught_up(&view, false, Some(Instant::now()));
    record.caught_up(
        &view,
        true,
        Some(Instant::now() - Duration::from_millis(30)),
    );

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &metrics).unwrap();
    assert!(
        text.contains("stream_convergence_seconds_count{api=\"WatchPort\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("stream_convergence_seconds_bucket{le=\"0.025\",api=\"WatchPort\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("stream_convergence_seconds_bucket{le=\"0.05\",api=\"WatchPort\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("streams_behind{api=\"WatchPort\"} 0\n"),
        "{text}"
    );
    assert!(text.contains("streams_behind{api=\"Get\"} 0\n"), "{text}");
    // Only the server's APIs, and those of its open streams: a destination has no Watch.
    assert!(!text.contains("api=\"GetProfile\""), "{text}");
    assert!(!text.contains("api=\"Watch\""), "{text}");
    // The server's APIs have their histogram before any observation.
    assert!(
        text.contains("stream_convergence_seconds_count{api=\"Get\"} 0\n"),
        "{text}"
    );
}

#[test]
fn filters_that_cannot_match_are_refused_with_the_field_named() {
    let bad = |request: ListStreamsRequest| service::filter(&request).unwrap_err();
    let status = bad(ListStreamsRequest {
        api: "Gett".into(),
        ..ListStreamsRequest::default()
    });
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "unknown api \"Gett\": expected one of Get, GetProfile, WatchPort, Watch"
    );
    let status = bad(ListStreamsRequest {
        pod: "web-0".into(),
        ..ListStreamsRequest::default()
    });
    assert_eq!(
        status.message(),
        "invalid pod \"web-0\": expected namespace/name"
    );
    let status = bad(ListStreamsRequest {
        peer_ip: "10.0.0".into(),
        ..ListStreamsRequest::default()
    });
    assert_eq!(
        status.message(),
        "invalid peer_ip \"10.0.0\": not an IP address"
    );
    // A long value is repeated in part: the whole of it would not fit the response headers
    // (newcomer finding: a 20,000-byte pod came back whole, and clients failed on it).
    for request in [
        ListStreamsRequest {
            pod: "é".repeat(10_000),
            ..ListStreamsRequest::default()
        },
        ListStreamsRequest {
            api: "x".repeat(20_000),
            ..ListStreamsRequest::default()
        },
        ListStreamsRequest {
            peer_ip: "x".repeat(20_000),
            ..ListStreamsRequest::default()
        },
    ] {
        let message = bad(request).message().to_string();
        assert!(message.len() < 400, "{} bytes", message.len());
        assert!(message.contains("\"…:"), "{message}");
    }

    let ok = service::filter(&ListStreamsRequest {
        api: "Watch".into(),
        pod: "emojivoto/web-0".into(),
        peer_ip: "::1".into(),
        ..ListStreamsRequest::default()
    })
    .unwrap();
    assert_eq!(ok.api.as_deref(), Some("Watch"));
    assert_eq!(ok.peer_ip, Some("::1".parse().unwrap()));
}

/// Asked for the other server's API, a server says so rather than listing nothing (newcomer
/// finding: dst-diag guessed the server from its address, and a listing left empty by another
/// filter on a port other than the default was said to be the wrong server).
#[tokio::test]
async fn an_api_the_server_does_not_serve_is_refused_naming_those_it_does() {
    use linkerd_introspection_api::introspection_server::Introspection;
    let list = |registry: StreamRegistry, api: &str| {
        let request = tonic::Request::new(ListStreamsRequest {
            api: api.into(),
            ..ListStreamsRequest::default()
        });
        async move {
            service::IntrospectionService::new(registry)
                .list_streams(request)
                .await
        }
    };
    let destination = StreamRegistry::serving(&["Get", "GetProfile"]);
    let status = list(destination.clone(), "WatchPort").await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        status.message(),
        "WatchPort streams are another server's: this one serves Get and GetProfile streams"
    );
    let listed = list(destination, "GetProfile").await.unwrap();
    assert!(listed.into_inner().streams.is_empty());
    let policy = StreamRegistry::serving(&["WatchPort", "Watch"]);
    let status = list(policy.clone(), "Get").await.unwrap_err();
    assert_eq!(
        status.message(),
        "Get streams are another server's: this one serves WatchPort and Watch streams"
    );
    assert!(list(policy, "").await.is_ok());
    // A tool's registry serves them all.
    assert!(list(StreamRegistry::new(), "Watch").await.is_ok());
}

#[test]
fn a_packed_peer_gives_back_the_address_and_port() {
    for peer in [
        None,
        Some("10.42.0.7:4143".parse().unwrap()),
        Some("0.0.0.0:0".parse().unwrap()),
        Some("[fd00:10:244::13]:65535".parse().unwrap()),
        Some("[::ffff:10.0.0.1]:80".parse().unwrap()),
    ] {
        assert_eq!(PackedPeer::new(peer).get(), peer, "{peer:?}");
    }
    // The scope ID is not kept: the API shows `address:port`.
    let scoped: SocketAddr = "[fe80::1%3]:8086".parse().unwrap();
    assert_eq!(
        PackedPeer::new(Some(scoped)).get(),
        Some("[fe80::1]:8086".parse().unwrap())
    );
}

/// What each of tens of thousands of streams keeps in its entry besides its strings: 48 bytes
/// of metadata (88 with the API's name, an `Option<SocketAddr>` and `u32` ends).
#[test]
fn packed_meta_is_48_bytes() {
    assert_eq!(std::mem::size_of::<PackedMeta>(), 48);
}

#[test]
fn every_api_is_kept_by_its_name() {
    for api in APIS {
        let packed = PackedMeta::new(StreamMeta {
            api,
            ..StreamMeta::default()
        });
        assert_eq!(packed.api(), api);
        assert_eq!(packed.unpack().api, api);
    }
}

/// A policy watch's entry (a view encoder, a topic read through one `Arc`) with its `Arc`
/// counts: glibc adds 8 bytes and rounds to 16, so 120 bytes take a 128-byte chunk and 128
/// take a 144-byte one, for each of tens of thousands of streams.
#[test]
fn a_view_streams_entry_fits_a_128_byte_chunk() {
    let topic = Arc::new(1u32);
    let translator = Arc::new(());
    let current = move || topic.clone();
    let encode = move |_: &u32| {
        let _ = &translator;
        ("test.Message", Vec::<u8>::new())
    };
    let entry = Entry {
        meta: PackedMeta::new(meta("WatchPort", "w port 80", None, "10.0.0.1:4000")),
        opened_at_ms: 0,
        sent: SentCounts::default(),
        progress: TopicProgress::<u32, _, _>::new(current, ViewEncoder(encode)),
    };
    let arc_counts = 2 * size_of::<usize>();
    assert!(
        size_of_val(&entry) + arc_counts <= 120,
        "{} bytes",
        size_of_val(&entry) + arc_counts
    );
}
