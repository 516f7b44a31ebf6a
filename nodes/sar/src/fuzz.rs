//! The SAR as a stateful fuzz target (STYLE.md 10): a script of frames,
//! time and control commands played into two whole SAR nodes — a sticky
//! ingress and an egress with an anycast site — on the deterministic
//! simulator, so the forwarder, the sticky engine, the tunnels, the IGP and
//! the control socket see arbitrary sequences, not one frame at a time.
//!
//! ```text
//!   ue side ── seg0 ── i (router 1, sticky ingress) ── seg1 ── e (router 2, egress) ── seg2 ── server side
//!   fd00:…0:a                                                    fd00:aa::/64 via server
//! ```
//!
//! Each operation takes its bytes from the input: a UDP datagram to the
//! anycast address (flow label, an optional Sticky-Dst with arbitrary
//! content, a flipped octet), a reply from the anycast address, a raw
//! IPv6 frame, an IPv6-in-IPv6 or GRE packet sent to the ingress from a
//! chosen source, a jump of time, or a control command with arbitrary
//! arguments. Properties: nothing panics, the simulation never stops
//! making progress within its step bound, every frame on the wire fits its
//! segment, and the sticky table never exceeds its cap.
//! Body of `fuzz/fuzz_targets/sar.rs`; a seeded corpus runs it in `cargo
//! test`.

use smoltcp::time::Duration;
use svcroute_stack::phy::Link as _;
use svcroute_stack::runtime::{Node, PortConfig};
use svcroute_stack::sim::{self, NodeId, SegmentConfig, SegmentId, Sim, SimLink};

use crate::{SarConfig, SarNode};

/// The ingress's table cap: small, so a script can reach it.
const CAP: usize = 16;

/// Input bytes, consumed from the front; zeros when they run out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

struct World {
    sim: Sim,
    ingress: NodeId<Node<SimLink, SarNode>>,
    egress: NodeId<Node<SimLink, SarNode>>,
    /// Raw ports: on the UE's segment, between the SARs, on the server's.
    taps: [SimLink; 3],
}

fn v6(seg: u8, host: u8) -> std::net::Ipv6Addr {
    sim::ipv6(seg, host)
}

const ANYCAST: [u8; 16] = [0xfd, 0, 0, 0xaa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

fn sar(
    sim: &mut Sim,
    name: &str,
    ports: &[(SegmentId, u8)],
    text: &str,
) -> (SarNode, Vec<(PortConfig, SimLink)>) {
    let cfg: SarConfig = toml::from_str(text).expect("the fuzz world's config");
    let ports: Vec<(PortConfig, SimLink)> = ports.iter().map(|(s, h)| sim.port(*s, *h)).collect();
    let cfgs: Vec<PortConfig> = ports.iter().map(|(c, _)| c.clone()).collect();
    (
        SarNode::new(name, &cfg, &cfgs).expect("the fuzz world's SAR"),
        ports,
    )
}

fn world() -> World {
    let mut sim = Sim::new(7);
    let segs: Vec<SegmentId> = (0..3)
        .map(|_| sim.add_segment(SegmentConfig::default()))
        .collect();
    let (i, ip) = sar(
        &mut sim,
        "i",
        &[(segs[0], 1), (segs[1], 1)],
        &format!(
            "router_id = 1\nsar_ports = [1]\n[[neighbors]]\nport = 1\naddr = \"{}\"\n\
             [sticky]\nacl = [\"fd00:aa::/64\"]\n[sticky.ingress]\nmax_entries = {CAP}\n\
             flood_s = 1\nprobe_ms = 100\ntimer_s = 3\n",
            v6(1, 2)
        ),
    );
    let (e, ep) = sar(
        &mut sim,
        "e",
        &[(segs[1], 2), (segs[2], 1)],
        &format!(
            "router_id = 2\nsar_ports = [0]\n[[neighbors]]\nport = 0\naddr = \"{}\"\n\
             [[routes]]\nprefix = \"fd00:aa::/64\"\nvia = \"{}\"\n\
             [sticky]\nacl = [\"fd00:aa::/64\"]\n[sticky.egress]\nperiod_s = 1\nmax_flows = {CAP}\n\
             sites = [{{ anycast = \"fd00:aa::1\", capacity = 2, preference = 3 }}]\n",
            v6(1, 1),
            v6(2, 20)
        ),
    );
    let ingress = sim.add_role("i", ip, i);
    let egress = sim.add_role("e", ep, e);
    let taps = [
        sim.attach(segs[0]),
        sim.attach(segs[1]),
        sim.attach(segs[2]),
    ];
    let mut w = World {
        sim,
        ingress,
        egress,
        taps,
    };
    // Adjacency, the egress's site LSA and a probe RTT at the ingress.
    w.run(3000);
    w
}

impl World {
    fn run(&mut self, ms: u64) {
        if let Err(e) = self.sim.run_for(Duration::from_millis(ms)) {
            panic!("the simulation stopped: {e}");
        }
        let mut buf = vec![0; 65_536];
        for t in &mut self.taps {
            let max = t.max_frame();
            while let Some(n) = t.recv(&mut buf).expect("a sim link") {
                assert!(n <= max, "a {n}-octet frame on a segment of {max}");
            }
        }
        let table = self
            .sim
            .node(self.ingress)
            .role()
            .sticky()
            .and_then(|s| s.table())
            .map_or(0, |t| t.len());
        assert!(table <= CAP, "the sticky table holds {table} > {CAP}");
    }

    fn send(&mut self, tap: usize, frame: &[u8]) {
        self.taps[tap].send(frame).expect("a sim link");
    }
}

/// Ethernet to host `to` on subnet `seg` from the tap, IPv6.
fn eth(seg: u8, to: u8) -> Vec<u8> {
    let mut f = Vec::with_capacity(128);
    f.extend(sim::mac(seg, to).0);
    f.extend(sim::mac(seg, 200).0);
    f.extend([0x86, 0xdd]);
    f
}

/// An IPv6 header (payload length fixed up by [`finish`]).
fn ipv6(f: &mut Vec<u8>, label: u32, next: u8, hop: u8, src: [u8; 16], dst: [u8; 16]) {
    f.extend((0x6000_0000 | (label & 0xf_ffff)).to_be_bytes());
    f.extend([0, 0, next, hop]);
    f.extend(src);
    f.extend(dst);
}

/// Fix the payload length of the IPv6 header at `at`.
fn finish(f: &mut [u8], at: usize) {
    let len = (f.len() - at - 40).min(usize::from(u16::MAX)) as u16;
    f[at + 4..at + 6].copy_from_slice(&len.to_be_bytes());
}

/// A UDP datagram, optionally behind a Destination Options header holding
/// `opt` (type 0x1E: Sticky-Dst) with arbitrary content.
fn datagram(b: &mut Bytes<'_>, src: [u8; 16], dst: [u8; 16]) -> Vec<u8> {
    let label = u32::from(b.u16()) | u32::from(b.u8() & 0xf) << 16;
    let with_opt = b.u8();
    let mut f = Vec::new();
    ipv6(
        &mut f,
        label,
        if with_opt & 1 == 1 { 60 } else { 17 },
        64,
        src,
        dst,
    );
    if with_opt & 1 == 1 {
        let n = usize::from(b.u8() % 40);
        let data = b.take(n).to_vec();
        // Next header UDP, length in 8-octet units after the first 8.
        let mut opts = vec![17, 0, 0x1e, data.len() as u8];
        opts.extend(&data);
        while opts.len() % 8 != 0 {
            opts.push(0); // Pad1
        }
        opts[1] = (opts.len() / 8 - 1) as u8;
        f.extend(opts);
    }
    let sport = b.u16();
    let n = usize::from(b.u8() % 64);
    let payload = b.take(n).to_vec();
    f.extend(sport.to_be_bytes());
    f.extend(7000_u16.to_be_bytes());
    f.extend(((8 + payload.len()) as u16).to_be_bytes());
    f.extend([0, 0]); // no checksum: the SARs do not check UDP's
    f.extend(payload);
    f
}

/// Play `data` into the world. Panics only when a property fails.
pub fn sticky_world(data: &[u8]) {
    play(data);
}

fn play(data: &[u8]) -> World {
    let mut w = world();
    let mut b = Bytes(data);
    let ue = v6(0, 10).octets();
    let mut steps = 0;
    while !b.is_empty() && steps < 64 {
        steps += 1;
        match b.u8() % 8 {
            // The UE to the anycast address, through the ingress.
            0 | 1 => {
                let mut f = eth(0, 1);
                f.extend(datagram(&mut b, ue, ANYCAST));
                finish(&mut f, 14);
                flip(&mut b, &mut f);
                w.send(0, &f);
            }
            // The server's reply, through the egress.
            2 => {
                let mut f = eth(2, 1);
                f.extend(datagram(&mut b, ANYCAST, ue));
                finish(&mut f, 14);
                flip(&mut b, &mut f);
                w.send(2, &f);
            }
            // A tunnel packet to the ingress from a source of the input's
            // choosing: the egress, or someone else on the SARs' segment.
            3 => {
                let src = if b.u8() & 1 == 0 { v6(1, 2) } else { v6(1, 99) };
                let gre = b.u8() & 1 == 1;
                let mut f = eth(1, 1);
                ipv6(
                    &mut f,
                    0,
                    if gre { 47 } else { 41 },
                    64,
                    src.octets(),
                    v6(1, 1).octets(),
                );
                if gre {
                    f.extend([0, 0, 0x86, 0xdd]);
                }
                let inner = f.len();
                f.extend(datagram(&mut b, ANYCAST, ue));
                finish(&mut f, inner);
                finish(&mut f, 14);
                flip(&mut b, &mut f);
                w.send(1, &f);
            }
            // Raw IPv6 bytes to a SAR port.
            4 => {
                let tap = usize::from(b.u8() % 3);
                let (seg, to) = [(0, 1), (1, 1 + b.u8() % 2), (2, 1)][tap];
                let mut f = eth(seg, to);
                let n = usize::from(b.u8());
                f.extend(b.take(n));
                w.send(tap, &f);
            }
            // Time: up to 5.1 s, past timers, periods and dead intervals.
            5 => w.run(u64::from(b.u8()) * 20),
            // A control command.
            _ => {
                let node = if b.u8() & 1 == 0 { w.ingress } else { w.egress };
                let args = command(&mut b);
                let now = w.sim.now();
                let _ = w.sim.node_mut(node).control(now, 1, &args);
            }
        }
        w.run(5);
    }
    w.run(2000);
    w
}

/// Flip one octet of `f` if the input asks.
fn flip(b: &mut Bytes<'_>, f: &mut [u8]) {
    let at = usize::from(b.u8());
    if at < f.len() && at >= 14 {
        f[at] ^= b.u8() | 1;
    }
}

/// A control command: a known verb with arguments from a small set or
/// from the input.
fn command(b: &mut Bytes<'_>) -> Vec<String> {
    let words = [
        "sticky",
        "sites",
        "metrics",
        "set",
        "capacity",
        "preference",
        "cost",
        "ue-moved",
        "fd00:aa::1",
        "fd00:0:0:0::a",
        "fd00:0:0:1::a",
        "2",
        "0",
        "4294967295",
        "-1",
        "x",
    ];
    let n = 1 + usize::from(b.u8() % 6);
    (0..n)
        .map(|_| {
            let k = b.u8();
            if k < 240 {
                words[usize::from(k) % words.len()].to_owned()
            } else {
                String::from_utf8_lossy(b.take(usize::from(k - 240))).into_owned()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic inputs (xorshift), and a few shaped ones.
    #[test]
    fn a_seeded_corpus_holds_the_properties() {
        let mut x: u64 = 0x5eed_1234_5678_9abc;
        for len in [0, 1, 7, 40, 200, 600, 1500] {
            for _ in 0..4 {
                let v: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                sticky_world(&v);
            }
        }
        // Many flows (fill the table), time past the timer, more flows.
        let mut v = Vec::new();
        for l in 0..40_u8 {
            v.extend([0, 0, l, 0, 0, 0, 1, 0, 0]);
        }
        v.extend([5, 200, 5, 200]);
        for l in 0..40_u8 {
            v.extend([1, 1, l, 0, 1, 18, 2, 0]);
            v.extend(v6(1, 2).octets());
            v.extend([0, 0, 0, 0, 0, 0]);
        }
        let w = play(&v);
        // The script reached the data path: flows tunnelled and
        // remembered up to the cap, the rest counted.
        let stat = |n: &str| w.sim.node(w.ingress).stats().get(n);
        assert!(
            stat("sar.sticky_tunnelled_ipip") >= 40,
            "{}",
            stat("sar.sticky_tunnelled_ipip")
        );
        assert!(stat("sar.sticky_not_remembered_table_full") > 0);
        assert!(w.sim.node(w.egress).stats().get("sar.sticky_egress_flow") > 0);
    }
}
