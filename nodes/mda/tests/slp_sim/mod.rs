//! What the MDA sims share: real MDA drivers on one simulated segment
//! ([`World`], for `sim_incremental` and `sim_auth`), and a tiny SA that
//! sends SrvReg/SrvDeReg datagrams, retransmits them until acknowledged and
//! keeps each answer's code ([`Sa`], for all of them).

#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};

use smoltcp::iface::SocketHandle;
use smoltcp::socket::udp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpEndpoint};
use svcroute_mda::driver::{Mda, MdaConfig, MemStore};
use svcroute_stack::runtime::{Context, Node, Role};
use svcroute_stack::sim::{ipv4, NodeId, SegmentConfig, SegmentId, Sim, SimLink, SimPort};
use svcroute_stack::wire::slp::{Body, ErrorCode, LangTag, Message};

/// A tiny SA: keeps a window of SrvReg/SrvDeReg datagrams outstanding,
/// each retransmitted every [`RTO`] until its SrvAck comes; records the
/// code of each answer by XID. `sim_mesh` and `sim_scale` use it with a
/// wider window and [`Sa::strict`] (every refusal is a test failure).
pub(crate) struct Sa {
    udp: Option<SocketHandle>,
    window: usize,
    buffers: usize,
    strict: bool,
    pub(crate) queue: VecDeque<(IpAddress, Vec<u8>, u16)>,
    /// XID → (to, datagram, last sent; `None` before the first send).
    inflight: BTreeMap<u16, (IpAddress, Vec<u8>, Option<Instant>)>,
    /// XID → the code of its SrvAck.
    pub(crate) answers: BTreeMap<u16, ErrorCode>,
    /// Datagrams acknowledged.
    pub(crate) acked: usize,
    /// Datagrams handed to the socket, retransmissions included.
    pub(crate) sent: usize,
}

/// The retransmission timeout of [`Sa`].
pub(crate) const RTO: Duration = Duration::from_secs(2);

impl Default for Sa {
    fn default() -> Self {
        Self::new(16, 64)
    }
}

impl Sa {
    /// `window` datagrams outstanding; socket buffers of `buffers` datagrams.
    pub(crate) fn new(window: usize, buffers: usize) -> Self {
        Self {
            udp: None,
            window,
            buffers,
            strict: false,
            queue: VecDeque::new(),
            inflight: BTreeMap::new(),
            answers: BTreeMap::new(),
            acked: 0,
            sent: 0,
        }
    }

    /// Panic on a refused registration (the test sends only valid ones).
    pub(crate) fn strict(mut self) -> Self {
        self.strict = true;
        self
    }

    pub(crate) fn push(&mut self, to: IpAddress, m: &Message) {
        self.queue.push_back((to, m.to_bytes(), m.header().xid));
    }

    pub(crate) fn idle(&self) -> bool {
        self.queue.is_empty() && self.inflight.is_empty()
    }
}

impl Role for Sa {
    fn name(&self) -> &'static str {
        "sa"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        let n = self.buffers;
        let mk = || udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; n], vec![0; n * 1500]);
        let mut s = udp::Socket::new(mk(), mk());
        s.bind(4000).unwrap();
        self.udp = Some(cx.ports[0].sockets.add(s));
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let sock = cx.ports[0]
            .sockets
            .get_mut::<udp::Socket>(self.udp.unwrap());
        let mut any = false;
        while let Ok((data, _)) = sock.recv() {
            if let Ok(m) = Message::parse(data) {
                if let Body::SrvAck(a) = m.body() {
                    assert!(!self.strict || a.error.is_ok(), "refused: {:?}", a.error);
                    if self.inflight.remove(&m.header().xid).is_some() {
                        self.answers.insert(m.header().xid, a.error);
                        self.acked += 1;
                    }
                }
            }
            any = true;
        }
        while self.inflight.len() < self.window {
            let Some((to, b, xid)) = self.queue.pop_front() else {
                break;
            };
            self.inflight.insert(xid, (to, b, None));
        }
        for (to, b, at) in self.inflight.values_mut() {
            if at.is_none_or(|t| cx.now >= t + RTO) {
                // A full socket buffer (e.g. waiting for ARP) counts as a
                // loss: retry after the RTO rather than spin.
                if sock.send_slice(b, IpEndpoint::new(*to, 427)).is_ok() {
                    self.sent += 1;
                }
                *at = Some(cx.now);
                any = true;
            }
        }
        any
    }

    fn poll_at(&self, _now: Instant) -> Option<Instant> {
        self.inflight
            .values()
            .filter_map(|(_, _, at)| at.map(|t| t + RTO))
            .min()
    }
}

/// SLP time (µs since 1900) at the simulation's start: 2023.
pub(crate) const WALL: u64 = 3_900_000_000_000_000;

pub(crate) type MdaNode = Node<SimLink, Mda>;

/// MDAs 10.0.0.1..n and the SA at 10.0.0.200 on one lossy segment.
pub(crate) struct World {
    pub(crate) sim: Sim,
    pub(crate) lan: SegmentId,
    pub(crate) mdas: Vec<NodeId<MdaNode>>,
    pub(crate) stores: Vec<MemStore>,
    pub(crate) sa: NodeId<Node<SimLink, Sa>>,
    pub(crate) xid: u16,
}

impl World {
    /// `cfgs[i]` is MDA i+1's configuration.
    pub(crate) fn new(seed: u64, loss: f64, cfgs: Vec<MdaConfig>) -> Self {
        let mut sim = Sim::new(seed);
        let lan = sim.add_segment(SegmentConfig {
            loss,
            ..SegmentConfig::default()
        });
        let mut mdas = Vec::new();
        let mut stores = Vec::new();
        for (i, cfg) in cfgs.into_iter().enumerate() {
            let store = MemStore::default();
            let name = format!("mda{}", i + 1);
            let role = Mda::new(&name, cfg, Box::new(store.clone()), Vec::new(), WALL).unwrap();
            let port = sim.port(lan, i as u8 + 1);
            mdas.push(sim.add_role(&name, vec![port], role));
            stores.push(store);
        }
        let port = sim.port(lan, 200);
        let sa = sim.add_role("sa", vec![port], Sa::default());
        Self {
            sim,
            lan,
            mdas,
            stores,
            sa,
            xid: 0,
        }
    }

    pub(crate) fn core(&self, i: usize) -> &svcroute_mda::core::Mda {
        self.sim.node(self.mdas[i]).role().core().unwrap()
    }

    pub(crate) fn port(&self, i: usize) -> SimPort {
        self.sim.node(self.mdas[i]).links()[0].port()
    }

    /// Queue `m` at the SA for MDA `at` (0-based); its XID.
    pub(crate) fn send(&mut self, at: usize, m: &Message) -> u16 {
        self.sim
            .node_mut(self.sa)
            .role_mut()
            .push(IpAddress::Ipv4(ipv4(0, at as u8 + 1)), m);
        m.header().xid
    }

    pub(crate) fn next_xid(&mut self) -> u16 {
        self.xid += 1;
        self.xid
    }

    pub(crate) fn answer(&self, xid: u16) -> Option<ErrorCode> {
        self.sim.node(self.sa).role().answers.get(&xid).copied()
    }

    #[track_caller]
    pub(crate) fn drive_until_acked(&mut self, max: Duration) {
        let sa = self.sa;
        self.sim
            .drive_bounded(max, 50_000_000, |s| s.node(sa).role().idle())
            .unwrap_or_else(|e| panic!("SA never got all acks: {e}"));
    }

    /// Drive until MDAs `which` have equal digests.
    #[track_caller]
    pub(crate) fn drive_until_equal(&mut self, which: &[usize], max: Duration) {
        let mdas: Vec<_> = which.iter().map(|i| self.mdas[*i]).collect();
        let r = self.sim.drive_bounded(max, 50_000_000, |s| {
            let d: Vec<Option<u64>> = mdas
                .iter()
                .map(|m| s.node(*m).role().core().map(|c| c.digest()))
                .collect();
            d.iter().all(|x| x.is_some() && *x == d[0])
        });
        if let Err(e) = r {
            let d: Vec<u64> = which.iter().map(|i| self.core(*i).digest()).collect();
            panic!("no convergence: {e}; digests {d:x?}");
        }
    }

    /// What MDA `i` shows for `url`: its attributes, `None` if not live.
    pub(crate) fn live(&self, i: usize, url: &str) -> Option<String> {
        self.core(i)
            .registration(url, &LangTag::en())
            .filter(|r| !r.deleted)
            .map(|r| r.attrs.to_string())
    }
}
