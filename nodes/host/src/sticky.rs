//! # The UE's part of sticky service (draft 002 §4.3, SPEC §3)
//!
//! An egress SAR in end-node mode puts a Sticky-Dst option (IPv6
//! destination option `0x1E`, `stack/src/wire/sticky.rs`) naming itself
//! into the replies of an anycast server. The draft's UE copies it into its
//! later packets of the same flow, so every ingress, the one the flow
//! started at or one the UE moved to, tunnels the flow to that egress.
//! Ingresses that find no option key their sticky table by service ID and
//! IPv6 flow label, and the egress recognises a moved UE's flow by its
//! ports and flow label: the label must not change during a flow's life.
//!
//! ```text
//!   wire ──► options stripped ──► [received] flow (reversed) ◄─ Sticky-Dst: remember (latest wins)
//!   local stack ──► [sending] flow label := keyed hash of the 5-tuple (non-zero)
//!                              Sticky-Dst remembered for the flow? ──► inserted (merged) ──► wire
//! ```
//!
//! [`UeSticky`] is sans-IO and sees frames as the local stack does (smoltcp
//! in the host role; the kernel behind the TUN in `svcroute shim --tun`):
//! the caller feeds [`UeSticky::received`] after every address rewrite and
//! calls [`UeSticky::sending`] before any. A flow is the transport 5-tuple;
//! a new TCP connection on it (an outgoing SYN) forgets what the old one
//! learned. Flow state is bounded (`max_flows`) and expires after
//! `flow_idle_s` (open) or `flow_linger_s` (closed, FIN both ways or RST).
//!
//! **Flow labels.** Linux re-draws a socket's flow label on a
//! retransmission timeout (`txhash`), smoltcp always sends 0. With
//! `pin_flow_labels` every TCP and UDP packet the local stack sends gets
//! the label `SipHash-2-4(seed; proto, src, sport, dst, dport)` cut to 20
//! bits (0 becomes 1): the same for the flow's whole life, whatever the
//! stack does, different per flow and unpredictable without the seed (RFC
//! 6437 §3). No checksum covers the label.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};

use serde::Deserialize;
use serde_json::{json, Value};
use siphasher::sip::SipHasher24;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpProtocol;
use svcroute_stack::shim::edit;
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::ipv6opt::{OptionRepr, OptionType, OwnedOption};
use svcroute_stack::wire::sticky::StickyDst;

use crate::rosa::frame::{self, Close, Flow, ACK, ETH_LEN, SYN};

/// Octets a copied Sticky-Dst may add to a packet of the host role (its
/// smoltcp is told an MTU smaller by this much): an option of up to 28
/// octets of data (an IPv6 sticky egress, 20, plus an APN6 sticky ID, 6),
/// in its own header or merged into one, padded to 8.
pub const STICKY_RESERVE: usize = 32;

/// How often idle flows are looked for.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The UE's sticky-service behaviour: `[host.sticky]` in the host role;
/// the same keys, flat, in a TUN shim's `[shim]` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StickyConfig {
    /// Copy a received Sticky-Dst option into the flow's later packets.
    pub copy: bool,
    /// Give every TCP/UDP flow a stable, non-zero IPv6 flow label.
    pub pin_flow_labels: bool,
    /// Key of the flow-label hash (default: fresh randomness at start).
    pub flow_label_seed: Option<u64>,
    /// Most flows with a remembered Sticky-Dst.
    pub max_flows: usize,
    /// An open flow idle this long is forgotten.
    pub flow_idle_s: u64,
    /// A closed flow is forgotten this long after its last packet.
    pub flow_linger_s: u64,
}

impl Default for StickyConfig {
    fn default() -> Self {
        Self {
            copy: true,
            pin_flow_labels: true,
            flow_label_seed: None,
            max_flows: 4096,
            flow_idle_s: 300,
            flow_linger_s: 15,
        }
    }
}

impl StickyConfig {
    /// Check the ranges; the error names the key (without a section prefix).
    pub fn validate(&self) -> Result<(), String> {
        let check = |k: &str, v: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(format!("key `{k}`: {v} is out of range {lo}..={hi}"))
            }
        };
        check("max_flows", self.max_flows as u64, 1, 1 << 20)?;
        check("flow_idle_s", self.flow_idle_s, 1, 86_400)?;
        check("flow_linger_s", self.flow_linger_s, 1, 3600)
    }
}

/// A transport flow as the local stack sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct FlowKey {
    proto: u8,
    local: Ipv6Addr,
    local_port: u16,
    remote: Ipv6Addr,
    remote_port: u16,
}

impl FlowKey {
    fn outgoing(f: &Flow) -> Self {
        Self {
            proto: f.proto.into(),
            local: f.src,
            local_port: f.sport,
            remote: f.dst,
            remote_port: f.dport,
        }
    }

    fn incoming(f: &Flow) -> Self {
        Self {
            proto: f.proto.into(),
            local: f.dst,
            local_port: f.dport,
            remote: f.src,
            remote_port: f.sport,
        }
    }
}

/// A flow that received a Sticky-Dst.
#[derive(Debug)]
struct StickyFlow {
    /// The option data, as received (latest wins).
    option: Vec<u8>,
    /// Its sticky egress, for display.
    egress: Option<IpAddr>,
    since: Instant,
    last: Instant,
    close: Close,
    /// Packets sent with the option.
    copied: u64,
}

/// The UE's sticky-service state, sans-IO.
///
/// **Call order.** [`UeSticky::received`] for every frame from the wire,
/// after its Destination Options header was stripped and its addresses
/// rewritten to what the local stack expects; [`UeSticky::sending`] for
/// every frame the local stack sends, before any rewrite.
/// [`UeSticky::handle_timeout`] at [`UeSticky::poll_timeout`] forgets idle
/// flows; spurious calls are harmless.
#[derive(Debug)]
pub struct UeSticky {
    copy: bool,
    pin: bool,
    hasher: SipHasher24,
    max_flows: usize,
    idle: Duration,
    linger: Duration,
    flows: HashMap<FlowKey, StickyFlow>,
    next_sweep: Option<Instant>,
}

impl UeSticky {
    /// The state for `cfg` (validated); `seed` keys the flow-label hash
    /// when `cfg.flow_label_seed` is not set.
    pub fn new(cfg: &StickyConfig, seed: u64) -> Result<Self, String> {
        cfg.validate()?;
        let k0 = cfg.flow_label_seed.unwrap_or(seed);
        Ok(Self {
            copy: cfg.copy,
            pin: cfg.pin_flow_labels,
            // The second key word from the first: one 64-bit seed to configure.
            hasher: SipHasher24::new_with_keys(k0, k0.rotate_left(32) ^ 0x5717_c4d5_7e1a_be15),
            max_flows: cfg.max_flows,
            idle: Duration::from_secs(cfg.flow_idle_s),
            linger: Duration::from_secs(cfg.flow_linger_s),
            flows: HashMap::new(),
            next_sweep: None,
        })
    }

    /// Whether received options are copied.
    pub fn copies(&self) -> bool {
        self.copy
    }

    /// Whether flow labels are pinned.
    pub fn pins_labels(&self) -> bool {
        self.pin
    }

    /// Flows with a remembered Sticky-Dst.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// The pinned flow label of the flow `proto` `src`:`sport` →
    /// `dst`:`dport`: 20 bits, never 0.
    pub fn flow_label(
        &self,
        proto: IpProtocol,
        src: Ipv6Addr,
        sport: u16,
        dst: Ipv6Addr,
        dport: u16,
    ) -> u32 {
        let mut b = [0_u8; 37];
        b[0] = proto.into();
        b[1..17].copy_from_slice(&src.octets());
        b[17..19].copy_from_slice(&sport.to_be_bytes());
        b[19..35].copy_from_slice(&dst.octets());
        b[35..37].copy_from_slice(&dport.to_be_bytes());
        let label = (self.hasher.hash(&b) & 0xf_ffff) as u32;
        label.max(1)
    }

    /// A frame from the wire, as the local stack will see it, and the
    /// options its Destination Options header carried: a Sticky-Dst is
    /// remembered for the flow (reversed).
    pub fn received(
        &mut self,
        now: Instant,
        frame: &[u8],
        options: &[OwnedOption],
        stats: &mut Counters,
    ) {
        if !self.copy {
            return;
        }
        let Some(f) = frame::flow(frame) else {
            return;
        };
        let key = FlowKey::incoming(&f);
        let mut sticky = options
            .iter()
            .filter(|o| o.option_type() == OptionType::Sticky);
        let (Some(opt), None) = (sticky.next(), sticky.next()) else {
            if options
                .iter()
                .any(|o| o.option_type() == OptionType::Sticky)
            {
                // Two Sticky-Dst options: which one the egress meant is
                // unknowable, so neither is copied.
                stats.bump("sticky.malformed");
            }
            if let Some(flow) = self.flows.get_mut(&key) {
                flow.last = now;
                flow.close.saw(&f, false);
            }
            return;
        };
        let Ok(parsed) = StickyDst::parse(opt.data()) else {
            stats.bump("sticky.malformed");
            return;
        };
        let egress = parsed.egress_addr();
        if let Some(flow) = self.flows.get_mut(&key) {
            if flow.option != opt.data() {
                flow.option = opt.data().to_vec();
                flow.egress = egress;
                stats.bump("sticky.updated");
            }
            flow.last = now;
            flow.close.saw(&f, false);
            return;
        }
        if self.flows.len() >= self.max_flows {
            stats.bump("sticky.flows_full");
            return;
        }
        let mut close = Close::default();
        close.saw(&f, false);
        self.flows.insert(
            key,
            StickyFlow {
                option: opt.data().to_vec(),
                egress,
                since: now,
                last: now,
                close,
                copied: 0,
            },
        );
        stats.bump("sticky.flows");
        if self.next_sweep.is_none() {
            self.next_sweep = Some(now + SWEEP_INTERVAL);
        }
    }

    /// A frame the local stack sends: its flow label pinned, and the
    /// flow's Sticky-Dst inserted if one was received and its header
    /// grows the packet by at most `room` octets (else it goes without,
    /// counted). Never refuses a frame.
    pub fn sending(
        &mut self,
        now: Instant,
        frame: &mut Vec<u8>,
        room: usize,
        stats: &mut Counters,
    ) {
        let Some(f) = frame::flow(frame) else {
            return;
        };
        if self.pin {
            let label = self.flow_label(f.proto, f.src, f.sport, f.dst, f.dport);
            set_flow_label(frame, label);
            stats.bump("sticky.labels_pinned");
        }
        if !self.copy || self.flows.is_empty() {
            return;
        }
        let key = FlowKey::outgoing(&f);
        if f.tcp_has(SYN) && !f.tcp_has(ACK) {
            // A new connection on the 5-tuple: nothing of the old one holds.
            if self.flows.remove(&key).is_some() {
                stats.bump("sticky.flows_reset");
            }
            return;
        }
        let Some(flow) = self.flows.get_mut(&key) else {
            return;
        };
        flow.last = now;
        flow.close.saw(&f, true);
        // In its own header, or merged: never more than this (padded to 8).
        let growth = (4 + flow.option.len()).div_ceil(8) * 8;
        if growth > room {
            stats.bump("sticky.too_big");
            return;
        }
        let Ok(opt) = OptionRepr::new(OptionType::Sticky, &flow.option) else {
            return; // at most 255 octets: it was received as an option
        };
        match edit::insert_dest_opts(frame, &[opt]) {
            Ok(()) => {
                flow.copied += 1;
                stats.bump("sticky.copied");
            }
            Err(_) => stats.bump("sticky.insert_failed"),
        }
    }

    /// Forget flows idle past their limit.
    pub fn handle_timeout(&mut self, now: Instant, stats: &mut Counters) {
        if self.next_sweep.is_none_or(|t| t > now) {
            return;
        }
        let (idle, linger) = (self.idle, self.linger);
        let before = self.flows.len();
        self.flows.retain(|_, f| {
            let limit = if f.close.closed() { linger } else { idle };
            now - f.last < limit
        });
        stats.add("sticky.flows_expired", (before - self.flows.len()) as u64);
        self.next_sweep = (!self.flows.is_empty()).then_some(now + SWEEP_INTERVAL);
    }

    /// When [`UeSticky::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_sweep
    }

    /// The flows, for `ctl NODE sticky` (at most 64 listed).
    pub fn summary(&self, now: Instant) -> Value {
        let mut flows: Vec<(&FlowKey, &StickyFlow)> = self.flows.iter().collect();
        flows.sort_by_key(|(k, f)| (f.since, **k));
        let list: Vec<Value> = flows
            .iter()
            .take(64)
            .map(|(k, f)| {
                json!({
                    "proto": k.proto,
                    "local": k.local.to_string(),
                    "local_port": k.local_port,
                    "remote": k.remote.to_string(),
                    "remote_port": k.remote_port,
                    "egress": f.egress.map(|a| a.to_string()),
                    "option": hex(&f.option),
                    "copied": f.copied,
                    "age_s": (now - f.since).secs(),
                    "idle_s": (now - f.last).secs(),
                    "closed": f.close.closed(),
                    "flow_label": self.flow_label(
                        IpProtocol::from(k.proto), k.local, k.local_port, k.remote, k.remote_port),
                })
            })
            .collect();
        json!({
            "copy": self.copy,
            "pin_flow_labels": self.pin,
            "max_flows": self.max_flows,
            "flows": self.flows.len(),
            "list": list,
        })
    }
}

/// Set the flow label of the IPv6 packet in `frame` (Ethernet II, no VLAN
/// tag), keeping the traffic class.
fn set_flow_label(frame: &mut [u8], label: u32) {
    let Some(h) = frame.get_mut(ETH_LEN + 1..ETH_LEN + 4) else {
        return;
    };
    h[0] = (h[0] & 0xf0) | ((label >> 16) as u8 & 0x0f);
    h[1] = (label >> 8) as u8;
    h[2] = label as u8;
}

/// The flow label of the IPv6 packet in `frame`.
pub fn flow_label_of(frame: &[u8]) -> Option<u32> {
    let h = frame.get(ETH_LEN..ETH_LEN + 4)?;
    Some(u32::from_be_bytes([0, h[1] & 0x0f, h[2], h[3]]))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests;
