//! Sticky service and App-Metrics (SPEC §3) in the simulator: the draft's
//! Figure 1 with two ingresses, a core and three edge sites serving one
//! anycast address.
//!
//! ```text
//!   UE port 0 ── seg0 ── Ra ── seg2 ─┐            ┌─ seg4 ── R1 ── seg7 ── S1 (anycast A)
//!                                    ├── C (core) ─┼─ seg5 ── R2 ── seg8 ── S2 (A)
//!   UE port 1 ── seg1 ── Rb ── seg3 ─┘            └─ seg6 ── R3 ── seg9 ── S3 (A)
//! ```
//!
//! The UE sends UDP flows (one flow label and source port each) to A from
//! its port on Ra's segment, and "moves" by sending from its port on Rb's
//! segment with a new address. Each server records which flows reached it
//! and from which address, and answers every datagram; the UE records the
//! answers and, in end-node mode, copies their Sticky-Dst option into the
//! flow's later datagrams (draft §4.3). The SARs are the real `sar` role.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, Ipv6Addr};

use serde_json::Value;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::Duration;
use smoltcp::wire::{EthernetAddress, IpAddress, IpProtocol, UdpPacket, UdpRepr};
use svcroute_sar::sticky::sites::Site;
use svcroute_sar::sticky::table::FlowKey;
use svcroute_sar::{SarConfig, SarNode};
use svcroute_stack::runtime::{Context, FrameContext, Node, PortConfig, Role};
use svcroute_stack::shim::edit;
use svcroute_stack::shim::{Direction, Verdict};
use svcroute_stack::sim::{
    self, NodeId, PartitionId, SegmentConfig, SegmentId, Sim, SimLink, SimPort,
};
use svcroute_stack::wire::ipv6opt::{self, OptionRepr, OptionType};
use svcroute_stack::wire::sticky::StickyDst;

const ETH: usize = 14;
const PORT: u16 = 7000;

type SarId = NodeId<Node<SimLink, SarNode>>;
type UeId = NodeId<Node<SimLink, Ue>>;
type ServerId = NodeId<Node<SimLink, Server>>;

fn anycast() -> Ipv6Addr {
    "fd00:aa::1".parse().unwrap()
}

fn v6(seg: u8, host: u8) -> Ipv6Addr {
    sim::ipv6(seg, host)
}

// ---- frames ------------------------------------------------------------

/// An Ethernet + IPv6 + UDP frame, checksummed, with flow label `label`
/// and, if given, a Sticky-Dst option carrying `sticky`.
#[allow(clippy::too_many_arguments)]
fn udp_frame(
    macs: (EthernetAddress, EthernetAddress),
    src: Ipv6Addr,
    dst: Ipv6Addr,
    label: u32,
    ports: (u16, u16),
    sticky: Option<&[u8]>,
    payload: &[u8],
) -> Vec<u8> {
    let repr = UdpRepr {
        src_port: ports.0,
        dst_port: ports.1,
    };
    let udp_len = 8 + payload.len();
    let mut f = vec![0; ETH + 40 + udp_len];
    f[0..6].copy_from_slice(&macs.1 .0);
    f[6..12].copy_from_slice(&macs.0 .0);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    let l = label & 0xf_ffff;
    f[ETH..ETH + 4].copy_from_slice(&(0x6000_0000 | l).to_be_bytes());
    f[ETH + 4..ETH + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    f[ETH + 6] = 17;
    f[ETH + 7] = 64;
    f[ETH + 8..ETH + 24].copy_from_slice(&src.octets());
    f[ETH + 24..ETH + 40].copy_from_slice(&dst.octets());
    let mut p = UdpPacket::new_unchecked(&mut f[ETH + 40..]);
    repr.emit(
        &mut p,
        &IpAddress::Ipv6(src),
        &IpAddress::Ipv6(dst),
        payload.len(),
        |b| b.copy_from_slice(payload),
        &ChecksumCapabilities::default(),
    );
    if let Some(data) = sticky {
        let opt = OptionRepr::new(OptionType::Sticky, data).unwrap();
        edit::insert_dest_opts(&mut f, &[opt]).unwrap();
    }
    f
}

fn addrs(frame: &[u8]) -> Option<(Ipv6Addr, Ipv6Addr)> {
    if frame.get(12..14)? != [0x86, 0xdd] || frame.len() < ETH + 40 {
        return None;
    }
    let s: [u8; 16] = frame[ETH + 8..ETH + 24].try_into().ok()?;
    let d: [u8; 16] = frame[ETH + 24..ETH + 40].try_into().ok()?;
    Some((Ipv6Addr::from(s), Ipv6Addr::from(d)))
}

/// (source port, destination port, flow label, Sticky-Dst data) of a UDP
/// frame.
fn udp_of(frame: &[u8]) -> Option<(u16, u16, u32, Option<Vec<u8>>)> {
    let l = edit::walk(frame).ok()?;
    if l.upper_protocol != IpProtocol::Udp {
        return None;
    }
    let u = frame.get(l.upper_offset..l.upper_offset + 4)?;
    let label = u32::from_be_bytes([0, frame[ETH + 1], frame[ETH + 2], frame[ETH + 3]]) & 0xf_ffff;
    let sticky = l.dest_opts.and_then(|at| {
        let h = ipv6opt::Packet::new_checked(&frame[at.range]).ok()?;
        h.options_iter().find_map(|o| match o {
            Ok(OptionRepr::Sticky(d)) => Some(d.as_bytes().to_vec()),
            _ => None,
        })
    });
    Some((
        u16::from_be_bytes([u[0], u[1]]),
        u16::from_be_bytes([u[2], u[3]]),
        label,
        sticky,
    ))
}

// ---- the UE ------------------------------------------------------------

/// One UE flow.
#[derive(Debug, Default, Clone)]
struct UeFlow {
    sport: u16,
    replies: u32,
    /// The Sticky-Dst the last reply carried.
    sticky: Option<Vec<u8>>,
}

/// A UE with a port on each ingress's segment, sending from one at a time.
#[derive(Debug)]
struct Ue {
    /// (address, gateway MAC) of each port.
    ports: Vec<(Ipv6Addr, EthernetAddress, EthernetAddress)>,
    active: usize,
    end_node: bool,
    flows: BTreeMap<u32, UeFlow>,
    queue: VecDeque<Vec<u8>>,
    /// Replies by (port, label).
    got: BTreeMap<(usize, u32), u32>,
    /// A Sticky-Dst every datagram carries unless a reply's replaced it.
    apn6: Option<Vec<u8>>,
    /// Payload octets of each datagram (4: just the label).
    size: usize,
    /// ICMPv6 errors received: (type, the field after the code).
    icmp: Vec<(u8, u32)>,
}

impl Ue {
    fn send(&mut self, labels: impl IntoIterator<Item = u32>) {
        let (src, mac, gw) = self.ports[self.active];
        for l in labels {
            let n = self.flows.len() as u16;
            let f = self.flows.entry(l).or_insert_with(|| UeFlow {
                sport: 40_000 + n,
                ..UeFlow::default()
            });
            let opt = if self.end_node {
                f.sticky.clone()
            } else {
                None
            };
            let opt = opt.or_else(|| self.apn6.clone());
            let mut payload = vec![0; self.size.saturating_sub(4)];
            payload.extend(l.to_be_bytes());
            let frame = udp_frame(
                (mac, gw),
                src,
                anycast(),
                l,
                (f.sport, PORT),
                opt.as_deref(),
                &payload,
            );
            self.queue.push_back(frame);
        }
    }

    /// A raw frame, for bad input.
    fn send_raw(&mut self, frame: Vec<u8>) {
        self.queue.push_back(frame);
    }
}

impl Role for Ue {
    fn name(&self) -> &'static str {
        "ue"
    }

    fn start(&mut self, _cx: &mut Context<'_>) {}

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        while let Some(f) = self.queue.pop_front() {
            cx.out.inject(self.active, Direction::ToWire, f);
            any = true;
        }
        any
    }

    fn ingress(&mut self, _cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        let Some((src, _)) = addrs(frame) else {
            return Verdict::Pass;
        };
        if frame.get(ETH + 6) == Some(&58) && frame.get(ETH + 40).is_some_and(|t| *t < 128) {
            let f = u32::from_be_bytes(frame[ETH + 44..ETH + 48].try_into().unwrap());
            self.icmp.push((frame[ETH + 40], f));
            return Verdict::Consume;
        }
        let Some((sport, _, _, sticky)) = udp_of(frame) else {
            return Verdict::Pass;
        };
        if src != anycast() || sport != PORT {
            return Verdict::Pass;
        }
        let Some(l) = frame
            .get(frame.len() - 4..)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        else {
            return Verdict::Consume;
        };
        *self.got.entry((port, l)).or_default() += 1;
        if let Some(f) = self.flows.get_mut(&l) {
            f.replies += 1;
            if sticky.is_some() {
                f.sticky = sticky;
            }
        }
        Verdict::Consume
    }
}

// ---- the servers -------------------------------------------------------

/// An anycast server: answers every datagram to A, recording its flows.
#[derive(Debug)]
struct Server {
    mac: EthernetAddress,
    gateway: EthernetAddress,
    /// label → sources seen.
    flows: BTreeMap<u32, BTreeSet<Ipv6Addr>>,
    /// Datagrams per label.
    count: BTreeMap<u32, u32>,
    out: VecDeque<Vec<u8>>,
    /// Sticky-Dst options seen on arrival.
    options_in: u32,
}

impl Role for Server {
    fn name(&self) -> &'static str {
        "server"
    }

    fn start(&mut self, _cx: &mut Context<'_>) {}

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        while let Some(f) = self.out.pop_front() {
            cx.out.inject(0, Direction::ToWire, f);
            any = true;
        }
        any
    }

    fn ingress(
        &mut self,
        _cx: &mut FrameContext<'_>,
        _port: usize,
        frame: &mut Vec<u8>,
    ) -> Verdict {
        let Some((src, dst)) = addrs(frame) else {
            return Verdict::Pass;
        };
        let Some((sport, dport, label, sticky)) = udp_of(frame) else {
            return Verdict::Pass;
        };
        if dst != anycast() || dport != PORT {
            return Verdict::Pass;
        }
        let payload = frame[frame.len() - 4..].to_vec();
        let l = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
        self.flows.entry(l).or_default().insert(src);
        *self.count.entry(l).or_default() += 1;
        self.options_in += u32::from(sticky.is_some());
        // The flow label reflected, as Linux does with
        // net.ipv6.flowlabel_reflect: the ingress learns the flow from it
        // (draft §5.1).
        let reply = udp_frame(
            (self.mac, self.gateway),
            anycast(),
            src,
            label,
            (PORT, sport),
            None,
            &payload,
        );
        self.out.push_back(reply);
        Verdict::Consume
    }
}

// ---- the world ---------------------------------------------------------

struct World {
    sim: Sim,
    ra: SarId,
    rb: SarId,
    sites: Vec<SarId>,
    servers: Vec<ServerId>,
    ue: UeId,
    /// R1's port to C, and C's port to R1 (to cut R1 off).
    r1_cut: (SimPort, SimPort),
}

/// What the test varies.
#[derive(Debug, Clone)]
struct Setup {
    /// `[sticky.ingress]` keys.
    keys: &'static str,
    /// Ra and Rb in each other's group.
    group: bool,
    /// The UE copies Sticky-Dst.
    end_node: bool,
    /// (capacity, preference) of R1, R2, R3.
    metrics: [(u32, u32); 3],
    /// Extra `[sticky.ingress]` lines.
    ingress_extra: &'static str,
    /// Fixed aggregated costs of R1, R2, R3 (soft anchoring).
    costs: Option<[u32; 3]>,
    /// Extra `[sticky.egress]` lines of R1.
    r1_extra: &'static str,
    /// The UE's datagrams carry this Sticky-Dst (APN6) from the start.
    apn6: Option<[u8; 6]>,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            keys: "flow-label",
            group: true,
            end_node: false,
            metrics: [(1, 10), (2, 5), (4, 1)],
            ingress_extra: "",
            costs: None,
            r1_extra: "",
            apn6: None,
        }
    }
}

fn sar_config(id: u32, neighbors: &[(usize, u8, u8)], extra: &str) -> SarConfig {
    let mut text = format!("router_id = {id}\n{extra}\n");
    for (port, seg, host) in neighbors {
        text.push_str(&format!(
            "[[neighbors]]\nport = {port}\naddr = \"{}\"\ncost = 10\n",
            v6(*seg, *host)
        ));
    }
    toml::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn add_sar(
    sim: &mut Sim,
    name: &str,
    segs: &[(SegmentId, u8)],
    cfg: &SarConfig,
) -> (SarId, Vec<SimPort>) {
    let ports: Vec<(PortConfig, SimLink)> = segs.iter().map(|(s, h)| sim.port(*s, *h)).collect();
    let sim_ports = ports.iter().map(|(_, l)| l.port()).collect();
    let cfgs: Vec<PortConfig> = ports.iter().map(|(c, _)| c.clone()).collect();
    let role = SarNode::new(name, cfg, &cfgs).unwrap_or_else(|e| panic!("{name}: {e}"));
    (sim.add_role(name, ports, role), sim_ports)
}

fn ingress_section(id: u32, s: &Setup) -> String {
    let other = if id == 1 { 2 } else { 1 };
    let group = if s.group {
        format!("group = [{other}]")
    } else {
        String::new()
    };
    format!(
        "[sticky]\nacl = [\"fd00:aa::/64\"]\n[sticky.ingress]\nkeys = \"{}\"\n{group}\n\
         flood_s = 1\nprobe_ms = 200\n{}\n",
        s.keys, s.ingress_extra
    )
}

fn world(s: &Setup) -> World {
    let mut sim = Sim::new(11);
    let segs: Vec<SegmentId> = (0..10)
        .map(|_| sim.add_segment(SegmentConfig::default()))
        .collect();
    let (ra, _) = add_sar(
        &mut sim,
        "ra",
        &[(segs[0], 1), (segs[2], 1)],
        &sar_config(1, &[(1, 2, 2)], &ingress_section(1, s)),
    );
    let (rb, _) = add_sar(
        &mut sim,
        "rb",
        &[(segs[1], 1), (segs[3], 1)],
        &sar_config(2, &[(1, 3, 2)], &ingress_section(2, s)),
    );
    let (_, c_ports) = add_sar(
        &mut sim,
        "c",
        &[
            (segs[2], 2),
            (segs[3], 2),
            (segs[4], 2),
            (segs[5], 2),
            (segs[6], 2),
        ],
        &sar_config(
            3,
            &[(0, 2, 1), (1, 3, 1), (2, 4, 3), (3, 5, 4), (4, 6, 5)],
            "",
        ),
    );
    let mut sites = Vec::new();
    let mut servers = Vec::new();
    let mut r1_cut = (c_ports[2], c_ports[2]);
    for (k, (cp, pref)) in s.metrics.iter().enumerate() {
        let up = 4 + k as u8; // seg4..6 to C
        let down = 7 + k as u8; // seg7..9 to the server
        let host = 3 + k as u8;
        let cost = s
            .costs
            .map_or(String::new(), |c| format!(", cost = {}", c[k]));
        let r_extra = if k == 0 { s.r1_extra } else { "" };
        let extra = format!(
            "[[routes]]\nprefix = \"fd00:aa::/64\"\nvia = \"{}\"\n\
             [sticky]\nacl = [\"fd00:aa::/64\"]\n[sticky.egress]\nperiod_s = 2\n{r_extra}\n\
             sites = [{{ anycast = \"{}\", capacity = {cp}, preference = {pref}{cost} }}]\n",
            v6(down, 20),
            anycast()
        );
        let (r, ports) = add_sar(
            &mut sim,
            &format!("r{}", k + 1),
            &[
                (segs[usize::from(up)], host),
                (segs[usize::from(down)], host),
            ],
            &sar_config(10 + k as u32, &[(0, up, 2)], &extra),
        );
        if k == 0 {
            r1_cut.0 = ports[0];
        }
        sites.push(r);
        let (cfg, link) = sim.port(segs[usize::from(down)], 20);
        let server = Server {
            mac: cfg.mac,
            gateway: sim::mac(down, host),
            flows: BTreeMap::new(),
            count: BTreeMap::new(),
            out: VecDeque::new(),
            options_in: 0,
        };
        servers.push(sim.add_role(&format!("s{}", k + 1), vec![(cfg, link)], server));
    }
    let (p0, l0) = sim.port(segs[0], 10);
    let (p1, l1) = sim.port(segs[1], 10);
    let ue = Ue {
        ports: vec![
            (v6(0, 10), p0.mac, sim::mac(0, 1)),
            (v6(1, 10), p1.mac, sim::mac(1, 1)),
        ],
        active: 0,
        end_node: s.end_node,
        flows: BTreeMap::new(),
        queue: VecDeque::new(),
        got: BTreeMap::new(),
        apn6: s.apn6.map(|a| a.to_vec()),
        size: 4,
        icmp: Vec::new(),
    };
    let ue = sim.add_role("ue", vec![(p0, l0), (p1, l1)], ue);
    World {
        sim,
        ra,
        rb,
        sites,
        servers,
        ue,
        r1_cut,
    }
}

impl World {
    fn sar(&self, id: SarId) -> &SarNode {
        self.sim.node(id).role()
    }

    fn stat(&self, id: SarId, name: &str) -> u64 {
        self.sim.node(id).stats().get(name)
    }

    fn ue(&mut self) -> &mut Ue {
        self.sim.node_mut(self.ue).role_mut()
    }

    fn server(&self, k: usize) -> &Server {
        self.sim.node(self.servers[k]).role()
    }

    /// Which server saw flow `label` (every one that did).
    fn served_by(&self, label: u32) -> Vec<usize> {
        (0..3)
            .filter(|k| self.server(*k).flows.contains_key(&label))
            .collect()
    }

    fn control(&mut self, id: SarId, args: &[&str]) -> Value {
        let now = self.sim.now();
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        self.sim
            .node_mut(id)
            .control(now, 1, &args)
            .expect("answered now")
    }

    fn run(&mut self, ms: u64) {
        self.sim.run_for(Duration::from_millis(ms)).unwrap();
    }

    #[track_caller]
    fn drive(&mut self, secs: u64, what: &str, mut until: impl FnMut(&Self) -> bool) {
        let deadline = self.sim.now() + Duration::from_secs(secs);
        loop {
            if until(self) {
                return;
            }
            assert!(self.sim.now() < deadline, "{what}: not by {deadline}");
            self.run(50);
        }
    }

    /// The sites `ingress` knows for the anycast address, reachable and
    /// probed.
    fn known_sites(&self, ingress: SarId) -> Vec<Site> {
        self.sar(ingress)
            .sticky()
            .map(|st| {
                st.sites()
                    .list()
                    .iter()
                    .filter(|s| s.serves(anycast()))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Both ingresses know all three sites with their RTTs.
    fn ready(&mut self) {
        for i in [self.ra, self.rb] {
            self.drive(20, "sites known and probed", |w| {
                let s = w.known_sites(i);
                s.len() == 3 && s.iter().all(|x| x.rtt_us.is_some())
            });
        }
    }

    /// Send one datagram of every flow in `labels` and let it settle.
    fn round(&mut self, labels: impl IntoIterator<Item = u32>) {
        self.ue().send(labels);
        self.run(100);
    }

    /// The UE moves to Rb's segment (its port 1, a new address).
    fn move_ue(&mut self) {
        self.ue().active = 1;
    }
}

/// SPEC §3's score, computed here from what `ingress` knows, independently
/// of the SAR's own code: the index of the site a new flow must go to.
fn expected_site(sites: &[Site], w: f64) -> usize {
    let a = anycast();
    let all_rtt = sites.iter().all(|s| s.rtt_us.is_some());
    let lp: Vec<f64> = sites
        .iter()
        .map(|s| {
            let o = s.offers[&a];
            (f64::from(o.load.map_or(0, |(_, l)| l)) + 1.0) / f64::from(o.capacity)
        })
        .collect();
    let dp: Vec<f64> = sites
        .iter()
        .map(|s| {
            let d = if all_rtt {
                s.rtt_us.unwrap() as f64
            } else {
                s.path_cost.unwrap() as f64 * 1000.0 + 1.0
            };
            d / f64::from(s.offers[&a].preference)
        })
        .collect();
    let ml = lp.iter().sum::<f64>() / lp.len() as f64;
    let md = dp.iter().sum::<f64>() / dp.len() as f64;
    let score: Vec<f64> = (0..sites.len())
        .map(|i| w * lp[i] / ml + (1.0 - w) * dp[i] / md)
        .collect();
    let best = (0..sites.len())
        .min_by(|x, y| {
            score[*x]
                .total_cmp(&score[*y])
                .then(sites[*x].router.cmp(&sites[*y].router))
        })
        .unwrap();
    // Site router IDs are 10, 11, 12 for R1, R2, R3.
    (sites[best].router.0 - 10) as usize
}

fn labels(from: u32, n: u32) -> impl Iterator<Item = u32> + Clone {
    (from..from + n).map(|i| 0x100 + i)
}

// ---- the tests ---------------------------------------------------------

#[test]
fn new_flows_follow_the_cost_formula_and_load_moves_only_new_flows() {
    let mut w = world(&Setup::default());
    w.ready();
    let first = expected_site(&w.known_sites(w.ra), 0.5);
    w.round(labels(0, 100));
    for l in labels(0, 100) {
        assert_eq!(w.served_by(l), vec![first], "flow {l:#x}");
    }
    assert_eq!(w.stat(w.ra, "sar.sticky_new_flow"), 100);
    // Load the site: the 100 flows send 30 more datagrams each.
    for _ in 0..30 {
        w.round(labels(0, 100));
    }
    // Its next App-Metrics LSA reaches Ra with the load.
    let site_router = 10 + first as u32;
    w.drive(10, "a loaded site's metrics at Ra", |w| {
        w.known_sites(w.ra).iter().any(|s| {
            s.router.0 == site_router && s.offers[&anycast()].load.is_some_and(|(_, l)| l > 1000)
        })
    });
    let second = expected_site(&w.known_sites(w.ra), 0.5);
    assert_ne!(second, first, "the loaded site no longer wins");
    w.round(labels(100, 100));
    for l in labels(100, 100) {
        assert_eq!(w.served_by(l), vec![second], "new flow {l:#x}");
    }
    // The old flows, still going, stay where they started.
    w.round(labels(0, 100));
    for l in labels(0, 100) {
        assert_eq!(w.served_by(l), vec![first], "old flow {l:#x}");
        assert_eq!(
            w.ue().flows[&l].replies,
            32,
            "flow {l:#x}: every datagram answered"
        );
    }
    assert_eq!(w.stat(w.ra, "sar.sticky_new_flow"), 200);
    assert!(w.stat(w.ra, "sar.sticky_table_hit") >= 3100);
}

/// Scenario 1: Ra floods its table to its group; after the UE moved to Rb
/// with a new address, Rb tunnels its flows to their original egress, and
/// the servers keep seeing the address the flows started with.
#[test]
fn scenario_1_a_ue_move_keeps_every_flow_on_its_egress() {
    let mut w = world(&Setup::default());
    w.ready();
    w.round(labels(0, 200));
    let before: Vec<Vec<usize>> = labels(0, 200).map(|l| w.served_by(l)).collect();
    w.drive(10, "Rb merges Ra's table", |w| {
        w.sar(w.rb).sticky().unwrap().table().unwrap().len() >= 200
    });
    w.move_ue();
    for _ in 0..3 {
        w.round(labels(0, 200));
    }
    for (i, l) in labels(0, 200).enumerate() {
        assert_eq!(w.served_by(l), before[i], "flow {l:#x} stayed");
        let k = before[i][0];
        assert_eq!(
            w.server(k).flows[&l],
            BTreeSet::from([v6(0, 10)]),
            "flow {l:#x}: the server saw only the address the flow started with"
        );
        assert_eq!(
            w.ue().got.get(&(1, l)),
            Some(&3),
            "flow {l:#x}: answers reach the moved UE"
        );
    }
    assert!(w.stat(w.rb, "sar.sticky_merged") >= 200);
    assert_eq!(
        w.stat(w.rb, "sar.sticky_new_flow"),
        0,
        "no flow was a first packet at Rb"
    );
    let moved: u64 = w
        .sites
        .iter()
        .map(|s| w.stat(*s, "sar.sticky_egress_moved_ue"))
        .sum();
    assert_eq!(moved, 600);
}

/// Scenario 2: the UE's flows are keyed by its address; Ra hands them to
/// Rb under the UE's new address (`ctl ue-moved`).
#[test]
fn scenario_2_a_ue_move_hands_its_entries_over() {
    let setup = Setup {
        keys: "ue",
        group: false,
        ..Setup::default()
    };
    let mut w = world(&setup);
    w.ready();
    w.round(labels(0, 200));
    let site = w.served_by(labels(0, 1).next().unwrap());
    assert_eq!(site.len(), 1);
    // One key per UE: every flow of the UE sticks to the first one's site.
    for l in labels(0, 200) {
        assert_eq!(w.served_by(l), site, "flow {l:#x}");
    }
    let v = w.control(
        w.ra,
        &[
            "ue-moved",
            &v6(0, 10).to_string(),
            &v6(1, 10).to_string(),
            "2",
        ],
    );
    assert_eq!(v["moved"], 1, "{v}");
    let bad = w.control(
        w.ra,
        &[
            "ue-moved",
            &v6(0, 10).to_string(),
            &v6(1, 10).to_string(),
            "99",
        ],
    );
    assert!(bad["error"].as_str().unwrap().contains("no SAR"), "{bad}");
    w.drive(10, "Rb takes the hand-over", |w| {
        w.stat(w.rb, "sar.sticky_handoff_in") >= 1
    });
    w.move_ue();
    w.round(labels(0, 200));
    for l in labels(0, 200) {
        assert_eq!(w.served_by(l), site, "flow {l:#x} stayed");
        assert_eq!(w.ue().got.get(&(1, l)), Some(&1), "flow {l:#x}");
    }
    assert_eq!(w.stat(w.rb, "sar.sticky_new_flow"), 0);
}

/// End-node mode: the egress puts Sticky-Dst in the replies, the UE copies
/// it, and an ingress that knows nothing of the flow (no group) follows it.
#[test]
fn end_node_mode_follows_the_option() {
    let setup = Setup {
        group: false,
        end_node: true,
        ..Setup::default()
    };
    let mut w = world(&setup);
    w.ready();
    w.round(labels(0, 50));
    let before: Vec<Vec<usize>> = labels(0, 50).map(|l| w.served_by(l)).collect();
    assert!(
        w.ue().flows.values().all(|f| f.sticky.is_some()),
        "every reply carried Sticky-Dst"
    );
    let site_addr = StickyDst::parse(w.ue().flows[&0x100].sticky.as_ref().unwrap())
        .unwrap()
        .egress_addr();
    assert_eq!(
        site_addr,
        Some(IpAddr::V6(v6(
            4 + before[0][0] as u8,
            3 + before[0][0] as u8
        )))
    );
    w.move_ue();
    w.round(labels(0, 50));
    for (i, l) in labels(0, 50).enumerate() {
        assert_eq!(w.served_by(l), before[i], "flow {l:#x} stayed");
    }
    assert_eq!(w.stat(w.rb, "sar.sticky_by_option"), 50);
    assert_eq!(w.stat(w.rb, "sar.sticky_table_hit"), 0);
}

/// A site that dies loses its flows to the next cheapest once the IGP
/// notices (one dead interval), and new flows avoid it.
#[test]
fn a_dead_sites_flows_move_to_the_next_cheapest() {
    let setup = Setup {
        metrics: [(10, 10), (2, 5), (4, 1)],
        ..Setup::default()
    };
    let mut w = world(&setup);
    w.ready();
    assert_eq!(
        expected_site(&w.known_sites(w.ra), 0.5),
        0,
        "R1 wins at first"
    );
    w.round(labels(0, 100));
    assert!(labels(0, 100).all(|l| w.served_by(l) == vec![0]));
    let (r1, c) = w.r1_cut;
    let cut: PartitionId = w.sim.partition(&[r1], &[c]);
    w.drive(10, "Ra drops R1", |w| w.known_sites(w.ra).len() == 2);
    let next = expected_site(&w.known_sites(w.ra), 0.5);
    assert_ne!(next, 0);
    w.round(labels(0, 100));
    for l in labels(0, 100) {
        let mut want = vec![0, next];
        want.sort_unstable();
        assert_eq!(w.served_by(l), want, "flow {l:#x}");
        assert_eq!(w.server(next).count[&l], 1);
    }
    assert_eq!(w.stat(w.ra, "sar.sticky_failover"), 100);
    w.round(labels(100, 10));
    assert!(labels(100, 10).all(|l| w.served_by(l) == vec![next]));
    w.sim.heal(cut);
}

/// Entries expire `timer_s` after their last packet and traffic refreshes
/// them; the sweep drops what expired.
#[test]
fn table_timers_expire_and_refresh() {
    let setup = Setup {
        ingress_extra: "timer_s = 10",
        ..Setup::default()
    };
    let mut w = world(&setup);
    w.ready();
    w.round(labels(0, 20));
    let table = |w: &World| w.sar(w.ra).sticky().unwrap().table().unwrap().len();
    assert_eq!(table(&w), 20);
    // Flows 0..10 keep going every 4 s; flows 10..20 go quiet.
    for _ in 0..4 {
        w.run(4000);
        w.round(labels(0, 10));
    }
    assert_eq!(
        table(&w),
        10,
        "quiet flows expired after 10 s, busy ones were refreshed"
    );
    assert_eq!(w.stat(w.ra, "sar.sticky_expired"), 10);
    // A quiet flow that comes back is a first packet again.
    let before = w.stat(w.ra, "sar.sticky_new_flow");
    w.round(labels(10, 1));
    assert_eq!(w.stat(w.ra, "sar.sticky_new_flow"), before + 1);
}

/// A flood of distinct flow labels fills the table to its cap and no
/// further; the flows are still steered, and counted as not remembered.
#[test]
fn the_table_cap_holds_under_a_flood_of_flow_labels() {
    let setup = Setup {
        ingress_extra: "max_entries = 100",
        ..Setup::default()
    };
    let mut w = world(&setup);
    w.ready();
    for chunk in 0..10 {
        w.round(labels(chunk * 100, 100));
    }
    assert_eq!(w.sar(w.ra).sticky().unwrap().table().unwrap().len(), 100);
    assert_eq!(w.stat(w.ra, "sar.sticky_not_remembered_table_full"), 900);
    let answered: u32 = w.ue().flows.values().map(|f| f.replies).sum();
    assert_eq!(answered, 1000, "every flow still reached a site");
}

/// Malformed and forged input is counted and goes nowhere.
#[test]
fn bad_sticky_input_is_refused_and_counted() {
    let mut w = world(&Setup::default());
    w.ready();
    let (src, mac, gw) = (v6(0, 10), sim::mac(0, 10), sim::mac(0, 1));
    let frame = |opt: &[u8]| {
        udp_frame(
            (mac, gw),
            src,
            anycast(),
            0x77,
            (5, PORT),
            Some(opt),
            &[0; 4],
        )
    };
    // AFI 3; AFI 2 with the length of an IPv4 address; a Sticky-Dst naming
    // an address that is no egress; a type-1 sub-TLV cut short.
    let mut forged = vec![1, 18, 2, 0];
    forged.extend(v6(9, 99).octets());
    for (opt, reason) in [
        (
            vec![1, 18, 3, 0]
                .into_iter()
                .chain([0; 16])
                .collect::<Vec<u8>>(),
            "drop.sar.sticky_malformed",
        ),
        (vec![1, 6, 2, 0, 1, 2, 3, 4], "drop.sar.sticky_malformed"),
        (vec![1, 18, 2, 0, 1], "drop.sar.sticky_malformed"),
        (forged, "drop.sar.sticky_forged_egress"),
    ] {
        let before = w.stat(w.ra, reason);
        w.ue().send_raw(frame(&opt));
        w.run(100);
        assert_eq!(w.stat(w.ra, reason), before + 1, "{reason}: {opt:?}");
    }
    // A tunnel to an egress from an address that is no SAR (the UE).
    let inner = udp_frame((mac, gw), src, anycast(), 0x78, (5, PORT), None, &[0; 4]);
    let r1 = v6(4, 3);
    let mut outer = svcroute_sar::sticky::tunnel::encapsulate(
        &inner,
        svcroute_sar::sticky::tunnel::TunnelKind::Ipip,
        src,
        r1,
    )
    .unwrap();
    outer[0..6].copy_from_slice(&gw.0);
    outer[6..12].copy_from_slice(&mac.0);
    w.ue().send_raw(outer);
    w.run(200);
    assert_eq!(w.stat(w.sites[0], "drop.sar.tunnel_from_non_sar"), 1);
    assert!(
        w.served_by(0x78).is_empty(),
        "the forged tunnel reached no server"
    );
    assert!(
        w.served_by(0x77).is_empty(),
        "no malformed or forged packet reached a server"
    );
}

/// Soft anchoring (draft 003 §6): every site advertises the
/// location-preferred address at a fixed cost, R1 cheapest; the flows go
/// to R1 by path cost + cost and, when R1 fails, to the next cheapest.
#[test]
fn soft_anchoring_prefers_the_cheapest_site_and_fails_over() {
    let setup = Setup {
        costs: Some([10, 40, 30]),
        ..Setup::default()
    };
    let mut w = world(&setup);
    w.ready();
    let by = w.sar(w.ra).sticky().unwrap().sites().scores(anycast(), 0.5);
    assert!(by.iter().all(|s| s.by_cost), "{by:?}");
    w.round(labels(0, 20));
    assert!(labels(0, 20).all(|l| w.served_by(l) == vec![0]));
    let (r1, c) = w.r1_cut;
    w.sim.partition(&[r1], &[c]);
    w.drive(10, "Ra drops R1", |w| w.known_sites(w.ra).len() == 2);
    w.round(labels(0, 20));
    // R3 (30) before R2 (40).
    assert!(labels(0, 20).all(|l| w.served_by(l) == vec![0, 2]));
}

/// The APN6 sticky ID (draft §6, Sticky-Dst type 2): the flow is keyed by
/// its (service, flow) IDs; level 2 is required stickiness, so when the
/// egress dies the flow is dropped and counted, not moved.
#[test]
fn an_apn6_flow_of_level_2_does_not_fail_over() {
    let setup = Setup {
        metrics: [(10, 10), (2, 5), (4, 1)],
        // type 2, len 4, level 2, service ID 1, reserved, flow ID 5.
        apn6: Some([2, 4, 2, 1, 0, 5]),
        ..Setup::default()
    };
    let mut w = world(&setup);
    w.ready();
    w.round(labels(0, 3));
    // One APN6 flow ID: all three datagram flows share its entry.
    assert!(labels(0, 3).all(|l| w.served_by(l) == vec![0]));
    let t = w.sar(w.ra).sticky().unwrap().table().unwrap();
    let now_s = (w.sim.now().total_millis() / 1000) as u32;
    let apn6: Vec<_> = t
        .iter(now_s)
        .filter(|(_, k, _)| matches!(k, FlowKey::Apn6 { .. }))
        .collect();
    assert_eq!(apn6.len(), 1, "one entry keyed by the APN6 flow: {apn6:?}");
    let (r1, c) = w.r1_cut;
    w.sim.partition(&[r1], &[c]);
    w.drive(10, "Ra drops R1", |w| w.known_sites(w.ra).len() == 2);
    w.round(labels(0, 3));
    assert_eq!(w.stat(w.ra, "drop.sar.sticky_required_egress_down"), 3);
    assert!(
        labels(0, 3).all(|l| w.served_by(l) == vec![0]),
        "nowhere else"
    );
    assert!(
        w.ue().icmp.iter().any(|(t, _)| *t == 1),
        "Destination Unreachable"
    );
}

/// A proxy Sticky Egress address (draft §4.1): the egress puts it in the
/// option, the ingress translates it back.
#[test]
fn a_proxy_sticky_egress_is_translated_at_the_ingress() {
    let proxy = "fd00:ff::1";
    let setup = Setup {
        group: false,
        end_node: true,
        metrics: [(10, 10), (2, 5), (4, 1)],
        r1_extra: "proxy = \"fd00:ff::1\"",
        ingress_extra: "proxies = [{ proxy = \"fd00:ff::1\", egress = \"fd00:0:0:4::3\" }]",
        ..Setup::default()
    };
    let mut w = world(&setup);
    w.ready();
    w.round(labels(0, 5));
    assert!(labels(0, 5).all(|l| w.served_by(l) == vec![0]));
    let opt = w.ue().flows[&0x100].sticky.clone().unwrap();
    assert_eq!(
        StickyDst::parse(&opt).unwrap().egress_addr(),
        Some(IpAddr::V6(proxy.parse().unwrap())),
        "the option carries the proxy, not R1's address"
    );
    w.move_ue();
    w.round(labels(0, 5));
    assert!(labels(0, 5).all(|l| w.served_by(l) == vec![0]));
    assert_eq!(w.stat(w.rb, "sar.sticky_by_option"), 5);
}

/// A packet that no longer fits once tunnelled gets Packet Too Big with
/// the MTU minus the tunnel, counted; never truncated.
#[test]
fn a_packet_too_big_for_the_tunnel_gets_packet_too_big() {
    let mut w = world(&Setup::default());
    w.ready();
    w.ue().size = 1500 - 40 - 8;
    w.round([0x999]);
    assert_eq!(w.stat(w.ra, "drop.sar.sticky_packet_too_big"), 1);
    assert_eq!(w.ue().icmp, vec![(2, 1460)]);
    assert!(w.served_by(0x999).is_empty());
    // 40 octets less fits.
    w.ue().size = 1500 - 80 - 8;
    w.round([0x999]);
    assert_eq!(w.served_by(0x999).len(), 1);
}
