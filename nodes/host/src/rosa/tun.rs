// Over 800 lines: the TUN shim's config, frame (un)wrapping and its Role impl are one room; the translation state lives in the shim it wraps.
//! # TUN mode: the ROSA shim for unmodified kernel programs
//!
//! `svcroute shim --tun` lets a kernel program (curl, wrk) in its own
//! network namespace reach services by name. The kernel does TCP; the shim
//! sits between the kernel's only link — a TUN device — and the wire, a
//! TAP on the client's segment, and does to the kernel's packets what the
//! host role's shim does to smoltcp's (SPEC §2.2, `docs/shim.md`):
//!
//! ```text
//!   client namespace                 shim process (lab namespace)                     segment
//!   curl ─ kernel TCP ─ TUN ══ port 1 ─▶ wrap ─▶ Shim::egress (V→ingress + Request) ─▶ port 0 TAP ─▶
//!   /etc/hosts: name → V    ◀─ unwrap ◀── Shim::ingress (strip, src→V) ◀──────────── (for CIP) ◀─
//!                                      smoltcp on port 0 holds CIP: answers NS, sends NS
//! ```
//!
//! - **Names.** Each configured name gets its virtual address `V` at
//!   construction ([`TunShim::names`]); the driver writes them into the
//!   namespace's hosts file, so the kernel resolves them without DNS.
//! - **Port 1, the TUN** ([`KERNEL`]). The driver's link wraps each IP
//!   packet the kernel sends into an Ethernet frame ([`wrap`]) and unwraps
//!   every frame sent to it ([`unwrap`]). Packets to a virtual address go
//!   through [`Shim::egress`]; other unicast IPv6 is routed plain to its
//!   on-link next hop or the gateway. Nothing from the TUN ever reaches
//!   smoltcp.
//! - **Port 0, the wire** ([`WIRE`]). smoltcp holds the client address
//!   `CIP` (the kernel's, on the TUN), so it answers Neighbor Solicitations
//!   for it and solicits the next hops the shim asks for. Every IPv6 frame
//!   passes [`Shim::ingress`] (options stripped, responses bind flows,
//!   sources rewritten to `V`); what is then addressed to `CIP`, except
//!   neighbour discovery, goes to the kernel.
//!
//! - **Sticky service** (draft 002 §4.3, [`crate::sticky`]): the kernel's
//!   TCP/UDP packets get their flow's pinned label and the Sticky-Dst its
//!   flow received, before any rewrite; received options are remembered
//!   after every rewrite.
//! - **Moving** (`ctl NODE move ADDR/LEN GATEWAY`): the wire address
//!   changes, the kernel keeps its own; the shim translates source (out)
//!   and destination (in) between the two.
//!
//! [`TunShim`] is a [`Role`]: the runtime's node loop drives it like any
//! node (control socket, counters, pcap). It does no I/O of its own.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use serde::Deserialize;
use serde_json::{json, Value};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr, IpProtocol};
use svcroute_stack::runtime::{Context, ControlReply, FrameContext, Role};
use svcroute_stack::shim::edit::{self, AddrField};
use svcroute_stack::shim::{Direction, Outbox, Verdict};
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::ipv6opt::{OptionType, OwnedOption};
use svcroute_stack::wire::rosa::ServiceName;

use super::config::{mask, RosaConfig};
use super::frame::{self, ETH_LEN, IPV6_LEN};
use super::neighbor::{Hop, NextHops, Sent};
use super::{OpenError, PortInfo, Shim, HEADER_RESERVE};
use crate::sticky::{StickyConfig, UeSticky};

/// Port index of the wire (the TAP on the client's segment).
pub const WIRE: usize = 0;
/// Port index of the kernel (the TUN).
pub const KERNEL: usize = 1;

/// Most names a TUN shim maps.
pub const MAX_NAMES: usize = 256;

/// EtherTypes the TUN wrapper writes.
const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
const ETHERTYPE_IPV6: [u8; 2] = [0x86, 0xdd];

/// The `[shim]` section of a `shim` node file: the ROSA shim in TUN mode.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TunConfig {
    /// Service names the kernel reaches (each a host name: one segment).
    pub names: Vec<String>,
    /// The ingress SAR (default: the port's IPv6 gateway).
    pub ingress: Option<Ipv6Addr>,
    /// Prefix of the virtual addresses.
    pub virtual_prefix: String,
    /// Network namespace the TUN moves into (the kernel client's).
    pub netns: Option<String>,
    /// Name of the TUN device in that namespace.
    pub tun: String,
    /// Hosts file written with the names (default:
    /// `/etc/netns/<netns>/hosts`, which `ip netns exec` mounts on
    /// `/etc/hosts`).
    pub hosts_file: Option<String>,
    /// Most client flows tracked.
    pub max_flows: usize,
    /// An open flow idle this long is forgotten.
    pub flow_idle_s: u64,
    /// A closed flow is forgotten this long after its last packet.
    pub flow_linger_s: u64,
    /// Copy a Sticky-Dst option received on a flow into the kernel's later
    /// packets of it (draft 002 §4.3).
    pub copy_sticky: bool,
    /// Give each of the kernel's TCP/UDP flows a stable flow label.
    pub pin_flow_labels: bool,
    /// Key of the flow-label hash (default: fresh randomness at start).
    pub flow_label_seed: Option<u64>,
}

impl Default for TunConfig {
    fn default() -> Self {
        let r = RosaConfig::default();
        Self {
            names: Vec::new(),
            ingress: None,
            virtual_prefix: r.virtual_prefix,
            netns: None,
            tun: "rosa0".into(),
            hosts_file: None,
            max_flows: r.max_flows,
            flow_idle_s: r.flow_idle_s,
            flow_linger_s: r.flow_linger_s,
            copy_sticky: true,
            pin_flow_labels: true,
            flow_label_seed: None,
        }
    }
}

/// A `[shim]` value the TUN shim cannot work with (the message names the key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TunConfigError(String);

impl TunConfig {
    /// Check every key (without the port: see [`TunShim::new`]).
    pub fn validate(&self) -> Result<(), TunConfigError> {
        self.checked_names()?;
        self.rosa().settings().map_err(|e| {
            // `[host.rosa]` messages say `rosa.KEY`; here the keys are ours.
            TunConfigError(e.to_string().replace("`rosa.", "`"))
        })?;
        let bad = |key: &str, why: String| TunConfigError(format!("key `{key}`: {why}"));
        let ifname_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 15
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        };
        if !ifname_ok(&self.tun) {
            return Err(bad(
                "tun",
                format!(
                    "{:?} must be an interface name: 1..15 of [A-Za-z0-9._-]",
                    self.tun
                ),
            ));
        }
        let Some(ns) = &self.netns else {
            return Err(bad(
                "netns",
                "required: the TUN must be the only link of the kernel client's namespace".into(),
            ));
        };
        let ns_ok = !ns.is_empty()
            && ns.len() <= 64
            && !ns.starts_with('.')
            && ns
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !ns_ok {
            return Err(bad(
                "netns",
                format!("{ns:?} is not a namespace name: 1..64 of [A-Za-z0-9._-]"),
            ));
        }
        if let Some(h) = &self.hosts_file {
            if !h.starts_with('/') {
                return Err(bad("hosts_file", format!("{h:?} must be an absolute path")));
            }
        }
        Ok(())
    }

    /// The hosts file to write: `hosts_file`, else `/etc/netns/<netns>/hosts`.
    pub fn hosts_path(&self) -> Option<String> {
        self.hosts_file.clone().or_else(|| {
            self.netns
                .as_ref()
                .map(|ns| format!("/etc/netns/{ns}/hosts"))
        })
    }

    /// The names, parsed: each one segment that is also a host name.
    fn checked_names(&self) -> Result<Vec<ServiceName>, TunConfigError> {
        let bad = |i: usize, why: String| TunConfigError(format!("key `names[{i}]`: {why}"));
        if self.names.is_empty() {
            return Err(TunConfigError(
                "key `names`: give at least one service name (e.g. [\"service.org\"])".into(),
            ));
        }
        if self.names.len() > MAX_NAMES {
            return Err(TunConfigError(format!(
                "key `names`: at most {MAX_NAMES} names"
            )));
        }
        let mut out: Vec<ServiceName> = Vec::new();
        for (i, n) in self.names.iter().enumerate() {
            let host_ok = !n.is_empty()
                && n.len() <= 253
                && !n.starts_with(['-', '.'])
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
            if !host_ok {
                return Err(bad(
                    i,
                    format!(
                        "{n:?} is not a host name ([A-Za-z0-9.-]): the kernel finds names in \
                         the hosts file, so a TUN client names whole services, not paths"
                    ),
                ));
            }
            let name = ServiceName::from_str(n)
                .map_err(|e| bad(i, format!("{n:?} is not a service name: {e}")))?;
            if out.contains(&name) {
                return Err(bad(i, format!("{n:?} is listed twice")));
            }
            out.push(name);
        }
        Ok(out)
    }

    /// The sticky-service keys, with the shim's flow limits.
    fn sticky(&self) -> StickyConfig {
        StickyConfig {
            copy: self.copy_sticky,
            pin_flow_labels: self.pin_flow_labels,
            flow_label_seed: self.flow_label_seed,
            max_flows: self.max_flows,
            flow_idle_s: self.flow_idle_s,
            flow_linger_s: self.flow_linger_s,
        }
    }

    /// The client side of `[host.rosa]` these keys stand for.
    fn rosa(&self) -> RosaConfig {
        RosaConfig {
            ingress: self.ingress,
            virtual_prefix: self.virtual_prefix.clone(),
            max_flows: self.max_flows,
            max_services: self.names.len().clamp(1, MAX_NAMES),
            flow_idle_s: self.flow_idle_s,
            flow_linger_s: self.flow_linger_s,
            ..RosaConfig::default()
        }
    }
}

/// Wrap an IP packet read from a TUN into an Ethernet frame, in place: the
/// packet sits in `frame[ETH_LEN..]`; the header gets zero MACs and the
/// EtherType of the packet's IP version (0 for anything else, which the
/// node then drops as `unknown_ethertype`).
pub fn wrap(frame: &mut [u8]) {
    let Some((header, packet)) = frame.split_at_mut_checked(ETH_LEN) else {
        return;
    };
    header[..12].fill(0);
    header[12..].copy_from_slice(match packet.first().map(|b| b >> 4) {
        Some(4) => &ETHERTYPE_IPV4,
        Some(6) => &ETHERTYPE_IPV6,
        _ => &[0, 0],
    });
}

/// The IP packet inside an Ethernet frame bound for a TUN, if it carries
/// IPv4 or IPv6.
pub fn unwrap(frame: &[u8]) -> Option<&[u8]> {
    let ethertype = frame.get(12..ETH_LEN)?;
    if ethertype != ETHERTYPE_IPV6 && ethertype != ETHERTYPE_IPV4 {
        return None;
    }
    frame.get(ETH_LEN..).filter(|p| !p.is_empty())
}

/// The MTU the kernel gets on the TUN: the wire's, less the room for the
/// option the shim adds ([`HEADER_RESERVE`]), at least 1280 (RFC 8200).
pub fn tun_mtu(wire_mtu: usize) -> usize {
    wire_mtu.saturating_sub(HEADER_RESERVE).max(1280)
}

/// The ROSA shim in TUN mode: a [`Role`] over two ports, [`WIRE`] and
/// [`KERNEL`].
///
/// **Call order.** [`TunShim::new`] with the wire port; the driver writes
/// [`TunShim::hosts`] into the hosts file and runs the node. From then on
/// the runtime calls the [`Role`] methods; time is the `now` they carry.
#[derive(Debug)]
pub struct TunShim {
    shim: Shim,
    sticky: UeSticky,
    port: PortInfo,
    /// The kernel's address on the TUN: fixed for the shim's life.
    client: IpCidr,
    /// The address on the wire: the kernel's, until a `move`.
    wire: IpCidr,
    moves: u64,
    wire_mtu: usize,
    names: Vec<(ServiceName, Ipv6Addr)>,
    ingress: Ipv6Addr,
    ingress_hop: Ipv6Addr,
    prefix: (Ipv6Addr, u8),
    /// Next hops of plain (non-virtual) traffic from the kernel.
    hops: NextHops,
    resolve: VecDeque<Hop>,
    released: Vec<(usize, Vec<u8>)>,
    acks: LastAcks,
}

/// The kernel's last pure ACK of each TCP connection, as it sent it: what
/// a `move` sends again from the new address.
#[derive(Debug)]
struct LastAcks {
    max: usize,
    idle: Duration,
    /// (local port, remote address, remote port) → (frame, when).
    by_flow: HashMap<(u16, Ipv6Addr, u16), (Vec<u8>, Instant)>,
}

impl LastAcks {
    fn saw(&mut self, now: Instant, frame: &[u8]) {
        let Some(f) = frame::flow(frame) else {
            return;
        };
        if f.proto != IpProtocol::Tcp {
            return;
        }
        let key = (f.sport, f.dst, f.dport);
        if f.flags & (frame::SYN | frame::FIN | frame::RST) != 0 {
            self.by_flow.remove(&key);
            return;
        }
        let pure = edit::walk(frame).is_ok_and(|l| {
            let doff = frame
                .get(l.upper_offset + 12)
                .map_or(0, |b| usize::from(b >> 4) * 4);
            l.ip_end == l.upper_offset + doff
        });
        if !pure || !f.tcp_has(frame::ACK) {
            return;
        }
        if !self.by_flow.contains_key(&key) && self.by_flow.len() >= self.max {
            let idle = self.idle;
            self.by_flow.retain(|_, (_, t)| now - *t < idle);
            if self.by_flow.len() >= self.max {
                return;
            }
        }
        self.by_flow.insert(key, (frame.to_vec(), now));
    }

    /// A reset from the far end ends the connection.
    fn reset(&mut self, frame: &[u8]) {
        if let Some(f) = frame::flow(frame).filter(|f| f.tcp_has(frame::RST)) {
            self.by_flow.remove(&(f.dport, f.src, f.sport));
        }
    }

    /// The ACKs of connections not idle, oldest first.
    fn fresh(&mut self, now: Instant) -> Vec<Vec<u8>> {
        let idle = self.idle;
        self.by_flow.retain(|_, (_, t)| now - *t < idle);
        let mut v: Vec<(Instant, Vec<u8>)> = self
            .by_flow
            .values()
            .map(|(f, t)| (*t, f.clone()))
            .collect();
        v.sort();
        v.into_iter().map(|(_, f)| f).collect()
    }
}

impl TunShim {
    /// The shim for `cfg` on the wire port `port`, whose first global IPv6
    /// address is the kernel client's. Every name gets its virtual address.
    pub fn new(cfg: &TunConfig, port: PortInfo) -> Result<Self, TunConfigError> {
        cfg.validate()?;
        let names = cfg.checked_names()?;
        let client = port
            .addrs
            .iter()
            .copied()
            .find(|c| match c.address() {
                IpAddress::Ipv6(a) => !a.is_unicast_link_local() && !a.is_multicast(),
                _ => false,
            })
            .ok_or_else(|| {
                TunConfigError(
                    "the port has no global IPv6 address: it is the kernel client's address".into(),
                )
            })?;
        let mut shim = Shim::new(Some(&cfg.rosa()))
            .map_err(|e| TunConfigError(e.to_string().replace("`rosa.", "`")))?;
        // Without a configured seed, one from the port (reproducible in
        // tests); the binary configures fresh randomness.
        let seed = u64::from_be_bytes([
            0,
            0,
            port.mac.0[0],
            port.mac.0[1],
            port.mac.0[2],
            port.mac.0[3],
            port.mac.0[4],
            port.mac.0[5],
        ]);
        let sticky = UeSticky::new(&cfg.sticky(), seed).map_err(TunConfigError)?;
        let mut scratch = Counters::default();
        shim.start(Instant::ZERO, vec![port.clone()], &mut scratch);
        let mut mapped = Vec::new();
        let mut ingress_hop = None;
        let mut ingress = None;
        for (i, name) in names.into_iter().enumerate() {
            let target = shim.open(Instant::ZERO, &name).map_err(|e| match e {
                OpenError::NoIngress | OpenError::NoRoute(_) => TunConfigError(format!(
                    "key `ingress`: {}",
                    e.to_string().replace("[host.rosa] ingress", "`ingress`")
                )),
                e => TunConfigError(format!("key `names[{i}]`: {e}")),
            })?;
            ingress_hop = Some(target.hop);
            ingress = Some(target.ingress);
            mapped.push((name, target.virt));
        }
        let (Some(ingress_hop), Some(ingress)) = (ingress_hop, ingress) else {
            return Err(TunConfigError("key `names`: no names".into()));
        };
        let prefix = shim.virtual_prefix();
        Ok(Self {
            shim,
            sticky,
            port,
            client,
            wire: client,
            moves: 0,
            wire_mtu: 1500,
            names: mapped,
            ingress,
            ingress_hop,
            prefix,
            hops: NextHops::default(),
            resolve: VecDeque::new(),
            released: Vec::new(),
            acks: LastAcks {
                max: cfg.max_flows,
                idle: Duration::from_secs(cfg.flow_idle_s),
                by_flow: HashMap::new(),
            },
        })
    }

    /// The names and their virtual addresses, in configuration order.
    pub fn names(&self) -> &[(ServiceName, Ipv6Addr)] {
        &self.names
    }

    /// The kernel client's address and prefix (put it on the TUN).
    pub fn client(&self) -> (Ipv6Addr, u8) {
        match self.client.address() {
            IpAddress::Ipv6(a) => (a, self.client.prefix_len()),
            #[allow(unreachable_patterns)]
            _ => (Ipv6Addr::UNSPECIFIED, 0),
        }
    }

    /// The address on the wire now (the kernel's until a `move`).
    pub fn wire(&self) -> (Ipv6Addr, u8) {
        (v6(self.wire), self.wire.prefix_len())
    }

    /// Tell the shim the wire's MTU (default 1500): a copied Sticky-Dst
    /// is left off a packet it would make too big.
    pub fn set_wire_mtu(&mut self, mtu: usize) {
        self.wire_mtu = mtu;
    }

    /// The sticky-service state.
    pub fn sticky(&self) -> &UeSticky {
        &self.sticky
    }

    /// The virtual prefix (route it to the TUN).
    pub fn virtual_prefix(&self) -> (Ipv6Addr, u8) {
        self.prefix
    }

    /// The hosts file: localhost, then one line per name.
    pub fn hosts(&self) -> String {
        let mut s = String::from(
            "# Written by `svcroute shim --tun`: ROSA service names and their virtual\n\
             # addresses (docs/shim.md, \"TUN mode\"). Removed when the shim stops.\n\
             127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        );
        for (name, virt) in &self.names {
            let _ = writeln!(s, "{virt}\t{name}");
        }
        s
    }

    /// The inner shim (tables and flows).
    pub fn shim(&self) -> &Shim {
        &self.shim
    }

    /// Addresses, moves and sticky flows, for `ctl NODE status`.
    pub fn status(&self, now: Instant) -> Value {
        let (k, klen) = self.client();
        let (w, wlen) = self.wire();
        json!({
            "kernel": format!("{k}/{klen}"),
            "wire": format!("{w}/{wlen}"),
            "translating": k != w,
            "gateway": self.port.gateways.iter().find(|g| matches!(g, IpAddress::Ipv6(_))).map(ToString::to_string),
            "ingress": self.ingress.to_string(),
            "moves": self.moves,
            "wire_mtu": self.wire_mtu,
            "sticky": self.sticky.summary(now),
        })
    }

    /// Tables, for `ctl NODE rosa`.
    pub fn summary(&self) -> Value {
        let mut v = self.shim.summary();
        let (addr, len) = self.client();
        let (wire, wire_len) = self.wire();
        v["tun"] = json!({
            "client": format!("{addr}/{len}"),
            "wire": format!("{wire}/{wire_len}"),
            "names": self.names.iter().map(|(n, a)| json!({"service": n.to_string(), "virtual": a.to_string()})).collect::<Vec<_>>(),
            "plain_parked": self.hops.parked(),
            "plain_next_hops": self.hops.len(),
        });
        v
    }
}

/// Inner workings.
impl TunShim {
    /// A frame off the wire: through the shim, then to the kernel if it is
    /// for the client and not neighbour discovery (smoltcp's part).
    fn handle_wire(&mut self, cx: &mut FrameContext<'_>, frame: &mut Vec<u8>) -> Verdict {
        let Some((_, dst)) = frame::ipv6_addrs(frame) else {
            return Verdict::Pass; // ARP, IPv4: smoltcp ignores them
        };
        let opts = match edit::strip_dest_opts(frame) {
            Ok(o) => o.unwrap_or_default(),
            Err(edit::EditError::UnknownOption { .. }) => {
                return Verdict::Drop("ipv6_option_unknown")
            }
            Err(edit::EditError::Fragmented) => return Verdict::Drop("ipv6_options_on_fragment"),
            Err(_) => return Verdict::Drop("ipv6_options_malformed"),
        };
        let rosa = opts
            .iter()
            .find(|o| o.option_type() == OptionType::Rosa)
            .map(OwnedOption::data);
        if rosa.is_none() {
            self.learn_from(cx.now, frame);
        }
        let verdict = self.shim.ingress(cx.now, WIRE, frame, rosa, cx.stats);
        self.drain(cx.out);
        if verdict != Verdict::Pass || dst != self.wire_addr() || is_ndp(frame) {
            return verdict;
        }
        if dst != self.client_addr() {
            // Moved: the kernel still holds its own address.
            if edit::rewrite_addr(frame, AddrField::Dst, IpAddr::V6(self.client_addr())).is_err() {
                return Verdict::Drop("tun.rewrite_failed");
            }
            cx.stats.bump("tun.translated_in");
        }
        // As the kernel sees it: after every rewrite.
        self.sticky.received(cx.now, frame, &opts, cx.stats);
        self.acks.reset(frame);
        cx.stats.bump("tun.to_kernel");
        cx.out
            .inject(KERNEL, Direction::ToWire, std::mem::take(frame));
        Verdict::Consume
    }

    /// A packet from the kernel: virtual destinations through the shim,
    /// other unicast IPv6 routed plain; never to smoltcp.
    fn handle_kernel(&mut self, cx: &mut FrameContext<'_>, frame: &mut Vec<u8>) -> Verdict {
        let Some((src, dst)) = frame::ipv6_addrs(frame) else {
            return Verdict::Drop("tun.not_ipv6");
        };
        if dst.is_multicast() {
            // Router solicitations, MLD: the TUN is the kernel's only link
            // and nothing on the segment is for it to discover.
            return Verdict::Drop("tun.multicast");
        }
        if src != self.client_addr() {
            return Verdict::Drop("tun.foreign_source");
        }
        if let Some(s) = frame.get_mut(6..12) {
            s.copy_from_slice(self.port.mac.as_bytes());
        }
        cx.stats.bump("tun.from_kernel");
        self.acks.saw(cx.now, frame);
        self.send_from_kernel(cx.now, cx.stats, cx.out, frame)
    }

    /// Send a packet of the kernel's: its flow's label and Sticky-Dst, the
    /// source translated after a move, then ROSA or plain routing.
    fn send_from_kernel(
        &mut self,
        now: Instant,
        stats: &mut Counters,
        out: &mut Outbox,
        frame: &mut Vec<u8>,
    ) -> Verdict {
        let Some((src, dst)) = frame::ipv6_addrs(frame) else {
            return Verdict::Drop("tun.not_ipv6");
        };
        // As the kernel sent it: before any rewrite.
        let room = self
            .wire_mtu
            .saturating_sub(frame.len().saturating_sub(ETH_LEN));
        self.sticky.sending(now, frame, room, stats);
        if self.wire_addr() != src {
            // Moved: the wire knows us by the new address.
            if edit::rewrite_addr(frame, AddrField::Src, IpAddr::V6(self.wire_addr())).is_err() {
                return Verdict::Drop("tun.rewrite_failed");
            }
            stats.bump("tun.translated_out");
        }
        if mask(dst, self.prefix.1) == self.prefix.0 {
            let verdict = self.shim.egress(now, WIRE, frame, stats);
            self.drain(out);
            return match verdict {
                Verdict::Pass => {
                    out.inject(WIRE, Direction::ToWire, std::mem::take(frame));
                    Verdict::Consume
                }
                other => other,
            };
        }
        let Some(hop) = self.next_hop(dst) else {
            return Verdict::Drop("tun.no_route");
        };
        match self.hops.send(now, (WIRE, hop), frame) {
            Sent::Ready => {
                stats.bump("tun.plain");
                out.inject(WIRE, Direction::ToWire, std::mem::take(frame));
                Verdict::Consume
            }
            Sent::Parked => {
                stats.bump("tun.parked");
                self.resolve.extend(self.hops.due_for_resolution(now));
                Verdict::Consume
            }
            Sent::Full => Verdict::Drop("tun.parked_full"),
        }
    }

    fn client_addr(&self) -> Ipv6Addr {
        self.client().0
    }

    fn wire_addr(&self) -> Ipv6Addr {
        v6(self.wire)
    }

    /// The on-link next hop toward `dst`: itself, or the IPv6 gateway.
    fn next_hop(&self, dst: Ipv6Addr) -> Option<Ipv6Addr> {
        let on_link = |a: Ipv6Addr| {
            self.port
                .addrs
                .iter()
                .any(|c| c.contains_addr(&IpAddress::Ipv6(a)))
        };
        if on_link(dst) {
            return Some(dst);
        }
        self.port.gateways.iter().find_map(|g| match g {
            IpAddress::Ipv6(g) if on_link(*g) => Some(*g),
            _ => None,
        })
    }

    /// Learn next hops of plain traffic from evidence no router rewrote.
    fn learn_from(&mut self, now: Instant, frame: &[u8]) {
        let binding = frame::ndp_binding(frame).or_else(|| {
            let (src, _) = frame::ipv6_addrs(frame)?;
            Some((src, frame::src_mac(frame)?))
        });
        let Some((ip, mac)) = binding else {
            return;
        };
        let on_link = self
            .port
            .addrs
            .iter()
            .any(|c| c.contains_addr(&IpAddress::Ipv6(ip)));
        if on_link && ip != self.wire_addr() && mac.is_unicast() && mac != self.port.mac {
            self.learn(now, ip, mac);
        }
    }

    fn learn(&mut self, now: Instant, ip: Ipv6Addr, mac: EthernetAddress) {
        let ready = self.hops.learn(now, (WIRE, ip), mac);
        self.released.extend(ready);
    }

    /// `move ADDR/LEN GATEWAY [INGRESS]`: the wire port now sits on
    /// another segment, as `ADDR`. The kernel keeps its address; from now
    /// on its packets leave from `ADDR` and packets to `ADDR` reach it.
    fn move_to(&mut self, cx: &mut Context<'_>, args: &[String]) -> Result<Value, String> {
        const USAGE: &str = "usage: move ADDR/LEN GATEWAY [INGRESS]";
        let (addr, gw, ingress) = match args {
            [a, g] => (a, g, None),
            [a, g, i] => (a, g, Some(i)),
            _ => return Err(USAGE.into()),
        };
        let cidr: IpCidr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IPv6 address/prefix length; {USAGE}"))?;
        let IpAddress::Ipv6(new) = cidr.address() else {
            return Err(format!("{addr:?} is not IPv6"));
        };
        if new.is_multicast()
            || new.is_unspecified()
            || new.is_loopback()
            || new.is_unicast_link_local()
            || cidr.prefix_len() == 0
            || mask(new, self.prefix.1) == self.prefix.0
        {
            return Err(format!(
                "{addr}: the new address must be a global unicast address outside the virtual prefix"
            ));
        }
        let gw: Ipv6Addr = gw
            .parse()
            .map_err(|_| format!("{gw:?} is not an IPv6 address; {USAGE}"))?;
        if !cidr.contains_addr(&IpAddress::Ipv6(gw)) || gw == new {
            return Err(format!(
                "gateway {gw} is not another address of {cidr}: it must be on-link"
            ));
        }
        let ingress = match ingress {
            None => gw,
            Some(i) => i
                .parse()
                .map_err(|_| format!("{i:?} is not an IPv6 address; {USAGE}"))?,
        };
        let old = self.wire;
        let wire = IpCidr::new(IpAddress::Ipv6(new), cidr.prefix_len());
        let stack = &mut cx.ports[WIRE];
        stack.iface.update_ip_addrs(|a| {
            if let Some(slot) = a.iter_mut().find(|c| **c == old) {
                *slot = wire;
            }
        });
        let _ = stack.iface.routes_mut().add_default_ipv6_route(gw);
        stack.gateways.retain(|g| !matches!(g, IpAddress::Ipv6(_)));
        stack.gateways.push(IpAddress::Ipv6(gw));
        for a in &mut self.port.addrs {
            if *a == old {
                *a = wire;
            }
        }
        self.port
            .gateways
            .retain(|g| !matches!(g, IpAddress::Ipv6(_)));
        self.port.gateways.push(IpAddress::Ipv6(gw));
        self.wire = wire;
        self.ingress = ingress;
        self.ingress_hop = if cidr.contains_addr(&IpAddress::Ipv6(ingress)) {
            ingress
        } else {
            gw
        };
        self.shim.moved(WIRE, self.port.clone(), Some(ingress));
        self.hops.forget_bindings();
        self.moves += 1;
        cx.stats.bump("tun.moves");
        // Tell the new link where we are (its switches and neighbours),
        // and find the gateway before the kernel's next packet.
        cx.out.inject(
            WIRE,
            Direction::ToWire,
            frame::unsolicited_na(self.port.mac, new),
        );
        cx.resolve(WIRE, IpAddress::Ipv6(self.ingress_hop));
        cx.resolve(WIRE, IpAddress::Ipv6(gw));
        // A receiving connection may have nothing to send until its peer's
        // lost packets are retransmitted, and those go where the far end
        // last saw it: each connection's last ACK, sent again from here,
        // shows the far end (the egress) the new address at once. A
        // duplicate ACK is harmless to TCP.
        for mut f in self.acks.fresh(cx.now) {
            cx.stats.bump("tun.move_probes");
            if let Verdict::Drop(reason) = self.send_from_kernel(cx.now, cx.stats, cx.out, &mut f) {
                cx.stats.drop(reason);
            }
        }
        log::info!(
            "moved: wire {old} -> {wire}, gateway {gw}, ingress {ingress}; kernel keeps {}",
            self.client
        );
        Ok(self.status(cx.now))
    }

    /// Move the shim's and our own released frames into the outbox.
    fn drain(&mut self, out: &mut Outbox) -> bool {
        let mut any = false;
        while let Some((port, f)) = self.shim.poll_transmit() {
            out.inject(port, Direction::ToWire, f);
            any = true;
        }
        for (port, f) in self.released.drain(..) {
            out.inject(port, Direction::ToWire, f);
            any = true;
        }
        any
    }
}

/// The IPv6 address of a CIDR (the shim's are IPv6).
fn v6(c: IpCidr) -> Ipv6Addr {
    match c.address() {
        IpAddress::Ipv6(a) => a,
        #[allow(unreachable_patterns)]
        _ => Ipv6Addr::UNSPECIFIED,
    }
}

/// Whether an IPv6 frame is neighbour discovery (ICMPv6 133..=137 right
/// after the fixed header, RFC 4861 §4): smoltcp's to answer.
fn is_ndp(frame: &[u8]) -> bool {
    frame.get(ETH_LEN + 6) == Some(&58)
        && frame
            .get(ETH_LEN + IPV6_LEN)
            .is_some_and(|t| (133..=137).contains(t))
}

impl Role for TunShim {
    fn name(&self) -> &'static str {
        "shim"
    }

    /// Have the ingress SAR's link-layer address ready for the first SYN.
    fn start(&mut self, cx: &mut Context<'_>) {
        cx.resolve(WIRE, IpAddress::Ipv6(self.ingress_hop));
        self.poll(cx);
    }

    /// Timers of the shim and of parked plain frames; next hops to resolve.
    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        if self.shim.poll_timeout().is_some_and(|t| t <= cx.now) {
            self.shim.handle_timeout(cx.now, cx.stats);
        }
        self.sticky.handle_timeout(cx.now, cx.stats);
        for _ in 0..self.hops.expire(cx.now) {
            cx.stats.drop("tun.next_hop_unresolved");
        }
        self.resolve.extend(self.hops.due_for_resolution(cx.now));
        let mut any = false;
        while let Some((port, addr)) = self.shim.poll_resolve() {
            any = true;
            let ip = IpAddress::Ipv6(addr);
            match cx.ports.get(port).and_then(|p| p.neighbors().lookup(&ip)) {
                Some(mac) => self.shim.learn(cx.now, port, addr, mac),
                None => cx.resolve(port, ip),
            }
        }
        while let Some((port, addr)) = self.resolve.pop_front() {
            any = true;
            let ip = IpAddress::Ipv6(addr);
            match cx.ports.get(port).and_then(|p| p.neighbors().lookup(&ip)) {
                Some(mac) => self.learn(cx.now, addr, mac),
                None => cx.resolve(port, ip),
            }
        }
        any | self.drain(cx.out)
    }

    fn poll_at(&self, _now: Instant) -> Option<Instant> {
        [
            self.shim.poll_timeout(),
            self.hops.next_timeout(),
            self.sticky.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn ingress(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        match port {
            WIRE => self.handle_wire(cx, frame),
            KERNEL => self.handle_kernel(cx, frame),
            _ => Verdict::Drop("tun.bad_port"),
        }
    }

    /// smoltcp speaks on the wire only (neighbour discovery). The TUN
    /// port's stack has no address; what it still says (its MLD report at
    /// start) is not for the kernel and is counted, not sent.
    fn egress(&mut self, cx: &mut FrameContext<'_>, port: usize, _frame: &mut Vec<u8>) -> Verdict {
        if port == WIRE {
            return Verdict::Pass;
        }
        cx.stats.bump("tun.stack_frames_discarded");
        Verdict::Consume
    }

    fn control(&mut self, cx: &mut Context<'_>, _id: u64, args: &[String]) -> ControlReply {
        match args.first().map(String::as_str) {
            Some("rosa") => ControlReply::Now(self.summary()),
            Some("status") => ControlReply::Now(self.status(cx.now)),
            Some("sticky") => ControlReply::Now(self.sticky.summary(cx.now)),
            Some("move") => ControlReply::Now(match self.move_to(cx, &args[1..]) {
                Ok(v) => v,
                Err(e) => json!({ "error": e }),
            }),
            Some("help") => ControlReply::Now(json!({
                "commands": {
                    "ping, stats, ports": "as every node",
                    "rosa": "names and virtual addresses, client flows (requesting or bound), next hops",
                    "status": "the kernel's address, the wire's address (after moves), gateway, ingress, sticky flows",
                    "sticky": "flows carrying a copied Sticky-Dst (draft 002 §4.3), their flow labels",
                    "move ADDR/LEN GATEWAY [INGRESS]": "the wire port is now on another segment as ADDR: \
                        the kernel keeps its address, the shim translates (ingress: the gateway)",
                }
            })),
            _ => ControlReply::Unknown,
        }
    }
}
