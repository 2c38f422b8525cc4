//! One `Get` stream: filter the shared view for this client, diff against what was sent, and
//! emit `Add` / `Remove` / `NoEndpoints` (spec/destination.md §C.4–C.5, decisions 1 and 2).
//! An endpoint is re-sent only when its translation for the client changed: a pod change no
//! field of the address reads sends nothing.
//!
//! A stream holds only its topic's receiver, the view it last sent from, and its filter; the
//! filtered set it last sent is recomputed from that view when diffing, so nothing per address
//! is kept per stream. When the stream wakes it reads the newest view: intermediate views may
//! be skipped, the end state never is.
//!
//! Streams that make the same transition (same view before and after, same filter) get the
//! same updates, so [`SharedDeltas`] computes them once per worker thread: when a Service that
//! thousands of proxies watch changes, the diff, the translation and the encoded messages are
//! made once or twice, not once per stream.

use linkerd_index::{AddressId, Endpoint, EndpointsView, Workload, model::AddressType};
use linkerd_runtime::{grpc::Shared, introspect::LastSent};
use linkerd2_proxy_api::{
    destination::{AddrSet, NoEndpoints, Update, WeightedAddr, WeightedAddrSet, update},
    net::TcpAddress,
};
use std::{
    cell::RefCell,
    collections::{HashMap, HashSet, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError, Weak},
};
use thread_local::ThreadLocal;

use crate::translate::{EndpointTranslator, OmittedEndpoint};

/// The protobuf name of `Update`, as the introspection API names what a `Get` stream sent.
pub const UPDATE_TYPE: &str = "io.linkerd.proxy.destination.Update";

/// What a stream filters on: the client's position and the server's address-family setting.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct StreamFilter {
    /// The client's node (context token `nodeName`), for `internalTrafficPolicy: Local`.
    pub node_name: Option<String>,
    /// The zone of the client's node, looked up once when the stream starts.
    pub client_zone: Option<String>,
    /// `--enable-ipv6`.
    pub enable_ipv6: bool,
}

/// The state of one `Get` stream.
pub struct EndpointsStream {
    rx: linkerd_index::topic::Receiver<EndpointsView>,
    filter: Arc<StreamFilter>,
    translator: Arc<EndpointTranslator>,
    deltas: Arc<SharedDeltas>,
    /// The view the last update was computed from; `None` before the first message.
    last: Option<Arc<EndpointsView>>,
    /// The number of addresses in this client's filtered set of `last`.
    held: usize,
}

/// Endpoints of a view, by address ID, in ID order.
pub type Filtered<'a> = Vec<(&'a AddressId, &'a Arc<Endpoint>)>;

/// What one transition sends a client: its updates, and the size of its filtered set after.
#[derive(Clone, Debug)]
pub struct Delta {
    pub updates: Vec<Shared<Update>>,
    /// The number of addresses in the client's filtered set of the new view.
    pub held: usize,
}

/// The deltas computed lately, by transition and filter, for the streams of one server (one
/// translator). Each worker thread keeps its own: a stream looks a delta up and takes its
/// messages without writing memory that the other cores' streams use (a shared lock and shared
/// reference counts cost more, at 10,000 streams, than computing a delta once per thread).
/// Entries hold their views, so a view's address is not reused while its entry lives; the
/// oldest of a thread's `DELTAS_PER_THREAD` entries goes first.
///
/// Streams with equal filters share one [`SharedDeltas::intern`]ed copy, so a lookup compares
/// pointers: comparing each stream's own strings read memory of 10,000 streams, on every change.
#[derive(Default)]
pub struct SharedDeltas {
    recent: ThreadLocal<RefCell<VecDeque<Transition>>>,
    filters: Mutex<InternedFilters>,
}

/// The filters of live streams; entries whose streams are all gone are swept out once the
/// table has doubled since the last sweep.
#[derive(Default)]
struct InternedFilters {
    by_value: HashMap<StreamFilter, Weak<StreamFilter>>,
    sweep_at: usize,
}

/// Transitions kept per thread: enough for the filters (zones, nodes) of one change's clients
/// and a few changes in flight.
const DELTAS_PER_THREAD: usize = 16;

struct Transition {
    from: Option<Arc<EndpointsView>>,
    to: Arc<EndpointsView>,
    filter: Arc<StreamFilter>,
    delta: Delta,
}

// === impl StreamFilter ===

impl StreamFilter {
    /// The endpoints of `view` this client should receive, in address-ID order (§C.4):
    /// `internalTrafficPolicy: Local` or topology hints, then the address family.
    pub fn apply<'a>(&self, view: &'a EndpointsView) -> Filtered<'a> {
        let mut set: Filtered<'a> = view.endpoints.iter().collect();
        let local_only = view
            .service
            .as_ref()
            .is_some_and(|s| s.internal_traffic_local);
        if local_only {
            set.retain(|(_, ep)| match &ep.workload {
                Workload::Pod { pod, .. } => pod.node_name == self.node_name,
                Workload::External(_) | Workload::Address { .. } => false,
            });
        } else if !set.is_empty() && set.iter().all(|(_, ep)| !ep.zone_hints.is_empty()) {
            // Hints apply only when every candidate has them; none for our zone keeps them all.
            let zone = self.client_zone.as_deref().unwrap_or("");
            let in_zone: Filtered<'a> = set
                .iter()
                .filter(|(_, ep)| ep.zone_hints.iter().any(|z| z == zone))
                .copied()
                .collect();
            if !in_zone.is_empty() {
                set = in_zone;
            }
        }
        // The family is chosen after zone filtering (§H.13), for pods and ExternalWorkloads
        // alike: both have one ID per family.
        self.family(set)
    }

    /// The endpoints of `view` a client of another cluster's Service receives: remote
    /// discovery applies no node or zone filter (spec §C.8.1), only the address family.
    pub fn apply_family_only<'a>(&self, view: &'a EndpointsView) -> Filtered<'a> {
        self.family(view.endpoints.iter().collect())
    }

    /// `set` with one address family per dual-stack pod: IPv6 when `--enable-ipv6`, else IPv4.
    fn family<'a>(&self, mut set: Filtered<'a>) -> Filtered<'a> {
        if self.enable_ipv6 {
            let v6_workloads: Vec<(bool, &str, &str)> = set
                .iter()
                .filter_map(|(id, _)| match workload_family(id)? {
                    (workload, AddressType::IPv6) => Some(workload),
                    _ => None,
                })
                .collect();
            if !v6_workloads.is_empty() {
                set.retain(|(id, _)| match workload_family(id) {
                    Some((workload, AddressType::IPv4)) => !v6_workloads.contains(&workload),
                    _ => true,
                });
            }
        } else {
            set.retain(|(id, _)| !matches!(workload_family(id), Some((_, AddressType::IPv6))));
        }
        set
    }
}

/// The workload of a pod or ExternalWorkload ID (whether it is an ExternalWorkload, its
/// namespace and name) and the ID's address family; `None` for bare addresses, which carry no
/// family and are never dropped by it.
fn workload_family(id: &AddressId) -> Option<((bool, &str, &str), AddressType)> {
    match id {
        AddressId::Pod {
            namespace,
            name,
            family,
        } => Some(((false, namespace, name), *family)),
        AddressId::External {
            namespace,
            name,
            family,
        } => Some(((true, namespace, name), *family)),
        AddressId::Address { .. } => None,
    }
}

// === impl SharedDeltas ===

impl SharedDeltas {
    /// The shared copy of `filter`: the same `Arc` for every stream whose filter is equal.
    pub fn intern(&self, filter: StreamFilter) -> Arc<StreamFilter> {
        let mut filters = self.filters.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(shared) = filters.by_value.get(&filter).and_then(Weak::upgrade) {
            return shared;
        }
        if filters.by_value.len() >= filters.sweep_at {
            filters
                .by_value
                .retain(|_, shared| shared.strong_count() > 0);
            filters.sweep_at = (2 * filters.by_value.len()).max(64);
        }
        let shared = Arc::new(filter.clone());
        filters.by_value.insert(filter, Arc::downgrade(&shared));
        shared
    }

    /// The delta from `from` (`None`: the stream's first message) to `to` for `filter` (an
    /// [`Self::intern`]ed one): the one computed earlier on this thread for the same views and
    /// filter, or `compute()`'s.
    pub fn get_or_compute(
        &self,
        from: Option<&Arc<EndpointsView>>,
        to: &Arc<EndpointsView>,
        filter: &Arc<StreamFilter>,
        compute: impl FnOnce() -> Delta,
    ) -> Delta {
        let same = |t: &&Transition| {
            Arc::ptr_eq(&t.to, to)
                && match (&t.from, from) {
                    (None, None) => true,
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                }
                && Arc::ptr_eq(&t.filter, filter)
        };
        let recent = self.recent.get_or_default();
        if let Some(t) = recent.borrow().iter().find(same) {
            return t.delta.clone();
        }
        let delta = compute();
        let mut recent = recent.borrow_mut();
        if recent.len() == DELTAS_PER_THREAD {
            recent.pop_back();
        }
        recent.push_front(Transition {
            from: from.cloned(),
            to: to.clone(),
            filter: filter.clone(),
            delta: delta.clone(),
        });
        delta
    }
}

// === impl EndpointsStream ===

impl EndpointsStream {
    /// A stream that shares the deltas it computes through `deltas` (one per translator).
    pub fn new(
        rx: linkerd_index::topic::Receiver<EndpointsView>,
        filter: StreamFilter,
        translator: Arc<EndpointTranslator>,
        deltas: Arc<SharedDeltas>,
    ) -> Self {
        Self {
            rx,
            filter: deltas.intern(filter),
            translator,
            deltas,
            last: None,
            held: 0,
        }
    }

    /// The number of addresses in the filtered set the stream last sent from (0 before the
    /// first message): the size of the client's snapshot, whatever translation left out.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Whether the service existed in the view the stream last sent from (`false` before the
    /// first message).
    pub fn exists(&self) -> bool {
        self.last.as_ref().is_some_and(|view| view.exists())
    }

    /// The view the stream last computed its updates from (`None` before the first).
    pub fn last_view(&self) -> Option<&Arc<EndpointsView>> {
        self.last.as_ref()
    }

    /// What the client holds after the updates of [`Self::last_view`], as one `Update` made
    /// when asked for (the introspection API): an `Add` of the whole filtered set, or
    /// `NoEndpoints`. `None` before the first message.
    pub fn holding(&self) -> Option<LastSent> {
        let view = self.last.clone()?;
        let filter = self.filter.clone();
        let translator = self.translator.clone();
        Some(LastSent::lazy(UPDATE_TYPE, move || {
            let set = filter.apply(&view);
            let zone = filter.client_zone.as_deref();
            let addrs: Vec<_> = set
                .iter()
                .filter_map(|(_, ep)| translator.weighted_addr(ep, zone).ok())
                .collect();
            let update = if addrs.is_empty() {
                no_endpoints(view.exists())
            } else {
                add(addrs, &view)
            };
            prost::Message::encode_to_vec(&update)
        }))
    }

    /// Waits for the next view and returns the updates it causes (possibly none: a change that
    /// does not concern this client). `None` when the topic is gone.
    pub async fn next_updates(&mut self) -> Option<Vec<Shared<Update>>> {
        if self.last.is_some() {
            self.rx.changed().await.ok()?;
        }
        let view = self.rx.borrow_and_update().clone();
        let delta = self
            .deltas
            .get_or_compute(self.last.as_ref(), &view, &self.filter, || {
                let new = self.filter.apply(&view);
                Delta {
                    updates: self
                        .diff(&view, &new)
                        .into_iter()
                        .map(Shared::new)
                        .collect(),
                    held: new.len(),
                }
            });
        self.held = delta.held;
        self.last = Some(view);
        Some(delta.updates)
    }

    /// The updates that take a client from `self.last` to `view`, whose filtered set is `new`.
    fn diff(&self, view: &EndpointsView, new: &Filtered<'_>) -> Vec<Update> {
        let Some(last) = &self.last else {
            return match self.add_all(view, new) {
                Some(add) => vec![add],
                None => vec![no_endpoints(view.exists())],
            };
        };
        let old = self.filter.apply(last);
        if new.is_empty() {
            // Decision 1: the end of all endpoints, or of the service, is said explicitly.
            return if !old.is_empty() || last.exists() != view.exists() {
                vec![no_endpoints(view.exists())]
            } else {
                vec![]
            };
        }
        if old.is_empty() {
            return match self.add_all(view, new) {
                Some(add) => vec![add],
                None if last.exists() != view.exists() => vec![no_endpoints(view.exists())],
                None => vec![],
            };
        }

        // Both sets are in address-ID order (views are BTreeMaps and filters keep the order), so
        // one merge pass finds what was added, changed and removed without hashing. Added and
        // changed endpoints are translated as they are found.
        let mut added: Vec<Translated> = Vec::new();
        let mut removed: Vec<SocketAddr> = Vec::new();
        let (mut old_iter, mut new_iter) = (old.iter().peekable(), new.iter().peekable());
        loop {
            match (old_iter.peek(), new_iter.peek()) {
                (None, None) => break,
                (Some((_, gone)), None) => {
                    removed.push(gone.addr);
                    old_iter.next();
                }
                (None, Some((_, ep))) => {
                    added.push(self.translate(ep));
                    new_iter.next();
                }
                (Some((old_id, prev)), Some((new_id, ep))) => match old_id.cmp(new_id) {
                    std::cmp::Ordering::Less => {
                        removed.push(prev.addr);
                        old_iter.next();
                    }
                    std::cmp::Ordering::Greater => {
                        added.push(self.translate(ep));
                        new_iter.next();
                    }
                    std::cmp::Ordering::Equal => {
                        if !Arc::ptr_eq(prev, ep) && ***prev != ***ep {
                            let now = self.translate(ep);
                            if prev.addr != ep.addr {
                                // Proxies key endpoints by address: a new address (a StatefulSet
                                // pod recreated with a new IP, a new target port) replaces the
                                // old.
                                added.push(now);
                                removed.push(prev.addr);
                            } else if self.translate(prev).1 != now.1 {
                                // The client holds `prev`'s translation; a change it does not
                                // show (a pod label or annotation no field reads) sends nothing.
                                added.push(now);
                            }
                        }
                        old_iter.next();
                        new_iter.next();
                    }
                },
            }
        }

        let mut updates = Vec::with_capacity(2);
        let mut omitted = Vec::new();
        let addrs = sendable(added, &mut omitted);
        if !addrs.is_empty() {
            updates.push(add(addrs, view));
        }
        if !omitted.is_empty() {
            // The client may hold an address whose new endpoint is left out (a changed
            // endpoint, or a new one on a gone endpoint's address): what it holds there is stale.
            let held: HashSet<SocketAddr> = old.iter().map(|(_, ep)| ep.addr).collect();
            let stale: Vec<SocketAddr> = omitted
                .iter()
                .filter(|addr| held.contains(addr) && !removed.contains(addr))
                .copied()
                .collect();
            removed.extend(stale);
        }
        if !removed.is_empty() {
            // An address can pass from one ID to another in one change (pods swapping IPs, an
            // IP reused by a new pod): the `Add` above holds it, and the `Remove` after it must
            // not take it away. Addresses left out of the `Add` are not held.
            let kept: HashSet<SocketAddr> = new
                .iter()
                .map(|(_, ep)| ep.addr)
                .filter(|addr| !omitted.contains(addr))
                .collect();
            removed.retain(|addr| !kept.contains(addr));
        }
        if !removed.is_empty() {
            let addrs = removed.into_iter().map(TcpAddress::from).collect();
            updates.push(Update {
                update: Some(update::Update::Remove(AddrSet { addrs })),
            });
        }
        updates
    }

    fn add_all(&self, view: &EndpointsView, set: &Filtered<'_>) -> Option<Update> {
        let translated = set.iter().map(|(_, ep)| self.translate(ep)).collect();
        let addrs = sendable(translated, &mut Vec::new());
        (!addrs.is_empty()).then(|| add(addrs, view))
    }

    /// `ep` as this client receives it (its zone decides `zone_locality` and the weight), or
    /// why it cannot be sent. The same endpoint translates the same for the stream's life.
    fn translate(&self, ep: &Endpoint) -> Translated {
        let zone = self.filter.client_zone.as_deref();
        (ep.addr, self.translator.weighted_addr(ep, zone))
    }
}

/// An endpoint's address and its translation for one client.
type Translated = (SocketAddr, Result<WeightedAddr, OmittedEndpoint>);

/// The `WeightedAddr`s of `translated`; the addresses of those the translation leaves out
/// (logged) go to `omitted`.
fn sendable(translated: Vec<Translated>, omitted: &mut Vec<SocketAddr>) -> Vec<WeightedAddr> {
    translated
        .into_iter()
        .filter_map(|(addr, result)| match result {
            Ok(weighted) => Some(weighted),
            Err(error) => {
                tracing::warn!(%error, %addr, "leaving the address out of the update");
                omitted.push(addr);
                None
            }
        })
        .collect()
}

fn add(addrs: Vec<WeightedAddr>, view: &EndpointsView) -> Update {
    Update {
        update: Some(update::Update::Add(WeightedAddrSet {
            addrs,
            metric_labels: view
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })),
    }
}

fn no_endpoints(exists: bool) -> Update {
    Update {
        update: Some(update::Update::NoEndpoints(NoEndpoints { exists })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linkerd_index::{
        ServiceInfo,
        model::{OwnerRef, PodInfo},
    };
    use std::net::SocketAddr;

    fn pod(name: &str, node: &str) -> Arc<PodInfo> {
        Arc::new(PodInfo {
            namespace: "ns".into(),
            name: name.into(),
            labels: Default::default(),
            annotations: Default::default(),
            service_account: "default".into(),
            node_name: Some(node.into()),
            host_network: false,
            phase: Some("Running".into()),
            terminating: false,
            ips: vec![],
            host_ips: vec![],
            owner: None,
            container_ports: vec![],
            proxy: None,
            opaque_ports: None,
            skip_inbound_ports: Default::default(),
            probe_paths: Default::default(),
        })
    }

    /// (pod, node, addr, zone hints)
    fn view(local: bool, eps: &[(&str, &str, &str, &[&str])]) -> EndpointsView {
        let service = ServiceInfo {
            namespace: "ns".into(),
            name: "svc".into(),
            external_name: false,
            internal_traffic_local: local,
            cluster_ips: vec![],
            ports: vec![],
            annotations: Default::default(),
            labels: Default::default(),
            opaque_ports: None,
            ..ServiceInfo::default()
        };
        let endpoints = eps
            .iter()
            .map(|(name, node, addr, hints)| {
                let addr: SocketAddr = addr.parse().unwrap();
                let family = if addr.is_ipv6() {
                    AddressType::IPv6
                } else {
                    AddressType::IPv4
                };
                let id = AddressId::Pod {
                    namespace: "ns".into(),
                    name: name.to_string(),
                    family,
                };
                let ep = Endpoint {
                    addr,
                    hostname: None,
                    zone: None,
                    zone_hints: hints.iter().map(|h| h.to_string()).collect(),
                    server_opaque: false,
                    workload: Workload::Pod {
                        pod: pod(name, node),
                        owner: OwnerRef {
                            kind: "Pod".into(),
                            name: name.to_string(),
                        },
                    },
                };
                (id, Arc::new(ep))
            })
            .collect();
        EndpointsView {
            service: Some(Arc::new(service)),
            labels: Default::default(),
            endpoints,
        }
    }

    fn addrs(filter: &StreamFilter, view: &EndpointsView) -> Vec<String> {
        filter
            .apply(view)
            .iter()
            .map(|(_, ep)| ep.addr.to_string())
            .collect()
    }

    #[test]
    fn interned_filters_of_ended_streams_are_swept() {
        let deltas = SharedDeltas::default();
        let node = |n: usize| StreamFilter {
            node_name: Some(format!("node-{n}")),
            ..Default::default()
        };
        let kept = deltas.intern(node(0));
        for n in 1..=200 {
            drop(deltas.intern(node(n)));
        }
        let interned = deltas.filters.lock().unwrap().by_value.len();
        assert!(interned < 64, "{interned} filters kept for 1 stream");
        assert!(Arc::ptr_eq(&kept, &deltas.intern(node(0))));
    }

    #[test]
    fn one_transition_and_filter_is_computed_once_per_thread() {
        let deltas = SharedDeltas::default();
        let before = Arc::new(view(false, &[("a", "n1", "10.0.0.1:80", &[])]));
        let after = Arc::new(view(false, &[("b", "n1", "10.0.0.2:80", &[])]));
        let zone = |zone: &str| StreamFilter {
            client_zone: Some(zone.into()),
            ..Default::default()
        };
        let (zone_a, zone_b) = (deltas.intern(zone("a")), deltas.intern(zone("b")));
        // Equal filters are one copy.
        assert!(Arc::ptr_eq(&zone_a, &deltas.intern(zone("a"))));
        let computed = std::cell::Cell::new(0);
        let compute = |held| {
            computed.set(computed.get() + 1);
            Delta {
                updates: vec![Shared::new(no_endpoints(true))],
                held,
            }
        };
        let first = deltas.get_or_compute(Some(&before), &after, &zone_a, || compute(1));
        let again = deltas.get_or_compute(Some(&before), &after, &zone_a, || compute(2));
        assert_eq!(computed.get(), 1);
        assert_eq!(again.held, 1);
        assert!(std::ptr::eq(first.updates[0].get(), again.updates[0].get()));
        // Another filter, another starting view, or an equal but distinct view: computed.
        deltas.get_or_compute(Some(&before), &after, &zone_b, || compute(3));
        deltas.get_or_compute(None, &after, &zone_a, || compute(4));
        let equal = Arc::new(view(false, &[("b", "n1", "10.0.0.2:80", &[])]));
        deltas.get_or_compute(Some(&before), &equal, &zone_a, || compute(5));
        assert_eq!(computed.get(), 4);
        // Another thread computes its own.
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let other = deltas.get_or_compute(Some(&before), &after, &zone_a, || Delta {
                    updates: vec![],
                    held: 6,
                });
                assert_eq!(other.held, 6);
            });
        });
        // The oldest entries go once a thread holds more than it keeps.
        for i in 0..DELTAS_PER_THREAD {
            let to = Arc::new(view(false, &[]));
            deltas.get_or_compute(None, &to, &zone_a, || compute(10 + i));
        }
        let evicted = deltas.get_or_compute(Some(&before), &after, &zone_a, || compute(99));
        assert_eq!(evicted.held, 99);
    }

    #[test]
    fn internal_traffic_policy_local_keeps_the_clients_node_only() {
        let v = view(
            true,
            &[
                ("a", "n1", "10.0.0.1:80", &[]),
                ("b", "n2", "10.0.0.2:80", &[]),
            ],
        );
        let on_n2 = StreamFilter {
            node_name: Some("n2".into()),
            ..Default::default()
        };
        assert_eq!(addrs(&on_n2, &v), ["10.0.0.2:80"]);
        // Quirk I.10 as upstream: no node in the token matches no scheduled pod.
        assert!(addrs(&StreamFilter::default(), &v).is_empty());
    }

    #[test]
    fn hints_apply_only_when_every_endpoint_has_them() {
        let hinted = view(
            false,
            &[
                ("a", "n1", "10.0.0.1:80", &["z1"]),
                ("b", "n2", "10.0.0.2:80", &["z2"]),
            ],
        );
        let in_z2 = StreamFilter {
            client_zone: Some("z2".into()),
            ..Default::default()
        };
        assert_eq!(addrs(&in_z2, &hinted), ["10.0.0.2:80"]);
        let in_z3 = StreamFilter {
            client_zone: Some("z3".into()),
            ..Default::default()
        };
        assert_eq!(addrs(&in_z3, &hinted), ["10.0.0.1:80", "10.0.0.2:80"]);
        let partly = view(
            false,
            &[
                ("a", "n1", "10.0.0.1:80", &["z1"]),
                ("b", "n2", "10.0.0.2:80", &[]),
            ],
        );
        let in_z1 = StreamFilter {
            client_zone: Some("z1".into()),
            ..Default::default()
        };
        assert_eq!(addrs(&in_z1, &partly), ["10.0.0.1:80", "10.0.0.2:80"]);
    }

    #[test]
    fn address_family_is_chosen_after_zone_filtering() {
        // §H.13: pod a's IPv6 entry is hinted for another zone, so a is served over IPv4.
        let v = view(
            false,
            &[
                ("a", "n1", "10.0.0.1:80", &["z1"]),
                ("a", "n1", "[fd00::1]:80", &["z2"]),
                ("b", "n2", "10.0.0.2:80", &["z1"]),
                ("b", "n2", "[fd00::2]:80", &["z1"]),
            ],
        );
        let v6_in_z1 = StreamFilter {
            client_zone: Some("z1".into()),
            enable_ipv6: true,
            ..Default::default()
        };
        assert_eq!(addrs(&v6_in_z1, &v), ["10.0.0.1:80", "[fd00::2]:80"]);
        let v4_only = StreamFilter {
            client_zone: Some("z1".into()),
            enable_ipv6: false,
            ..Default::default()
        };
        assert_eq!(addrs(&v4_only, &v), ["10.0.0.1:80", "10.0.0.2:80"]);
    }
}
