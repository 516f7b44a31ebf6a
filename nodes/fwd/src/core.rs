//! The sans-IO core of the path-based switch: per-packet verdicts, link
//! hellos, link liveness and link events (SPEC §1.1).
//!
//! [`FwdCore`] never reads a clock or touches a device: the driver hands it
//! frames and the time, and takes back verdicts, frames to send and the next
//! deadline.

use std::collections::VecDeque;

use serde::Serialize;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, EthernetFrame, EthernetProtocol, Ipv6Packet};
use svcroute_stack::timer::TimerTable;
use svcroute_stack::wire::auth::{
    Keyring, Reject, DEFAULT_MAX_SENDERS, DEFAULT_WINDOW, SENDER_FWD,
};
use svcroute_stack::wire::gff::{self, FrameError, MessageType, PathId};
use svcroute_stack::wire::nr::{self, LinkState, Tlvs};

use crate::config::{ConfigError, FwdConfig};

svcroute_stack::timers! {
    /// The switch's own timers (a port's dead deadline lives with the port).
    pub enum Timer {
        /// Send hellos on every port.
        Hello,
        /// Repeat the link events of down links to the NR.
        Refresh,
    }
}

/// Frames [`FwdCore`] queues for sending at most; more are dropped and
/// counted (`queue_full`).
pub const MAX_QUEUE: usize = 4096;

/// Most ports a switch has: one per distinct link ID.
pub const MAX_PORTS: usize = 256;

/// A set of port indices `0..256`, the output of a forwarding decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortSet([u64; 4]);

impl PortSet {
    /// The empty set.
    pub const EMPTY: Self = Self([0; 4]);

    /// Add `port` (ignored if it is 256 or more).
    pub fn insert(&mut self, port: usize) {
        if port < MAX_PORTS {
            self.0[port / 64] |= 1 << (port % 64);
        }
    }

    /// Whether `port` is in the set.
    pub fn contains(&self, port: usize) -> bool {
        port < MAX_PORTS && self.0[port / 64] & (1 << (port % 64)) != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }

    /// Number of ports.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The ports, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..MAX_PORTS).filter(|&p| self.contains(p))
    }
}

impl FromIterator<usize> for PortSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut s = Self::EMPTY;
        for p in iter {
            s.insert(p);
        }
        s
    }
}

/// What [`FwdCore::process`] decided for one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send a copy on each of these ports (the frame's hop limit is already
    /// decremented; address each copy with [`FwdCore::address`]).
    Forward(PortSet),
    /// The control plane took the frame (a link hello).
    Control,
    /// Discard the frame, counting the reason.
    Drop(DropReason),
}

/// Why a frame was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Shorter than an Ethernet header.
    Runt,
    /// Not IPv6 (ARP, IPv4, VLAN ...).
    NotIpv6,
    /// IPv6 header truncated, wrong version or payload length past the frame.
    MalformedIpv6,
    /// IPv6 whose next header is not 253 (ND, MLD ...).
    NotGff,
    /// GFF header truncated or its pathID not 256 bits.
    MalformedGff,
    /// The GFF pathID differs from IPv6 source ‖ destination.
    PathIdMismatch,
    /// A GFF type this switch does not know (0, 9..=15).
    UnknownType,
    /// Hop limit 0 after decrement (or arrived at 0).
    HopLimit,
    /// No port other than the ingress one has its link ID in the pathID.
    NoMatch,
    /// The ingress port does not exist.
    BadPort,
    /// A link hello that does not parse.
    HelloMalformed,
    /// A hello without an auth tag while a key is configured.
    HelloUnsigned,
    /// A hello signed with a key ID we do not have.
    HelloUnknownKey,
    /// A hello whose tag does not match.
    HelloBadAuth,
    /// A well-signed hello without a sequence number.
    HelloUnsequenced,
    /// A well-signed hello seen before (or below the sender's window).
    HelloReplayed,
    /// A well-signed hello whose sequence number is too old or too far
    /// ahead (`replay_max_age_s`), or a new sender while the replay table
    /// is full.
    HelloStale,
    /// Our own hello came back (a loop on the segment).
    HelloOwn,
    /// An unauthenticated hello from another MAC than the live
    /// neighbour's: a neighbour's address does not move on that alone
    /// (it moves once the old one is silent for `dead_ms`, or on a hello
    /// signed with the fabric key).
    HelloMacMoved,
}

impl DropReason {
    /// The counter name (`drop.<name>`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Runt => "fwd.runt",
            Self::NotIpv6 => "fwd.not_ipv6",
            Self::MalformedIpv6 => "fwd.malformed_ipv6",
            Self::NotGff => "fwd.not_gff",
            Self::MalformedGff => "fwd.malformed_gff",
            Self::PathIdMismatch => "fwd.pathid_mismatch",
            Self::UnknownType => "fwd.unknown_type",
            Self::HopLimit => "fwd.hop_limit",
            Self::NoMatch => "fwd.no_match",
            Self::BadPort => "fwd.bad_port",
            Self::HelloMalformed => "fwd.hello_malformed",
            Self::HelloUnsigned => "fwd.hello_unsigned",
            Self::HelloUnknownKey => "fwd.hello_unknown_key",
            Self::HelloBadAuth => "fwd.hello_bad_auth",
            Self::HelloUnsequenced => "fwd.hello_unsequenced",
            Self::HelloReplayed => "fwd.hello_replayed",
            Self::HelloStale => "fwd.hello_stale",
            Self::HelloOwn => "fwd.hello_own",
            Self::HelloMacMoved => "fwd.hello_mac_moved",
        }
    }
}

/// A frame the core wants sent, fully addressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The port.
    pub port: usize,
    /// The Ethernet frame.
    pub frame: Vec<u8>,
}

/// The node at the other end of a port, learned from its hellos.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbour {
    /// Its node ID.
    pub node: u8,
    /// Its outgoing link ID towards us.
    pub link_id: u8,
    /// Its MAC address (the destination of our frames on this port).
    pub mac: EthernetAddress,
}

/// The liveness of one port's link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkStatus {
    /// No hello heard yet: no neighbour known, no event ever sent.
    Unknown,
    /// Hellos arrive.
    Up {
        /// Who sends them.
        neighbour: Neighbour,
        /// When the last one arrived.
        last_hello: Instant,
        /// Its sequence number.
        seq: u32,
    },
    /// Hellos stopped for the dead interval.
    Down {
        /// Who sent them.
        neighbour: Neighbour,
        /// When the link went down.
        since: Instant,
    },
}

impl LinkStatus {
    /// `unknown`, `up` or `down`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Up { .. } => "up",
            Self::Down { .. } => "down",
        }
    }

    /// The neighbour, if one was ever heard.
    pub const fn neighbour(&self) -> Option<&Neighbour> {
        match self {
            Self::Unknown => None,
            Self::Up { neighbour, .. } | Self::Down { neighbour, .. } => Some(neighbour),
        }
    }
}

/// One port of the switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortState {
    /// Outgoing link ID.
    pub link_id: u8,
    /// Own MAC address.
    pub mac: EthernetAddress,
    /// Link liveness.
    pub status: LinkStatus,
    /// Hellos accepted on this port.
    pub hellos_in: u64,
}

/// Counters of the core (drops are counted by the driver from verdicts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// GFF packets forwarded (once per packet, however many copies).
    pub forwarded: u64,
    /// Copies sent for forwarded packets (more than `forwarded`: multicast).
    pub copies: u64,
    /// Hellos accepted.
    pub hellos_in: u64,
    /// Hellos sent (one per port per interval).
    pub hellos_out: u64,
    /// Links that went up (first hello and recovery).
    pub links_up: u64,
    /// Links that went down.
    pub links_down: u64,
    /// Link event messages built (each sent on every port of the NR path).
    pub events_out: u64,
    /// Link events not sent: no NR path, or no port on it.
    pub events_unsent: u64,
    /// Frames not queued because the queue was full.
    pub queue_full: u64,
    /// Link events repeated for links still down (`link_refresh_ms`).
    pub events_refreshed: u64,
}

/// The path-based switch of SPEC §1.1, sans-IO.
///
/// Call order: [`FwdCore::new`]; [`FwdCore::handle_timeout`] once at start
/// (the first hellos go out at once) and whenever [`FwdCore::poll_at`] is
/// due (early or repeated calls are harmless); [`FwdCore::process`] for
/// every received frame, then send one copy per port of a
/// [`Verdict::Forward`], each passed through [`FwdCore::address`]; after any
/// of these, drain [`FwdCore::poll_transmit`].
#[derive(Debug)]
pub struct FwdCore {
    node_id: u8,
    ports: Vec<PortState>,
    hello: Duration,
    dead: Duration,
    refresh: Duration,
    nr_path: PathId,
    key: Option<(u8, Vec<u8>)>,
    /// The key again, with our sequence numbers and the replay guard.
    ring: Keyring,
    /// The latest `now` seen, µs (sent messages take their numbers from it).
    clock_us: u64,
    timers: TimerTable<Timer>,
    hello_seq: u32,
    queue: VecDeque<Transmit>,
    stats: Stats,
}

impl FwdCore {
    /// A switch whose ports have the MACs `macs` (in port order).
    pub fn new(cfg: &FwdConfig, macs: &[EthernetAddress]) -> Result<Self, ConfigError> {
        cfg.validate(macs.len())?;
        let ports = cfg
            .link_ids
            .iter()
            .zip(macs)
            .map(|(&link_id, &mac)| PortState {
                link_id,
                mac,
                status: LinkStatus::Unknown,
                hellos_in: 0,
            })
            .collect();
        Ok(Self {
            node_id: cfg.node_id,
            ports,
            hello: cfg.hello_interval(),
            dead: cfg.dead_interval(),
            refresh: Duration::from_millis(cfg.link_refresh_ms),
            nr_path: cfg.nr_path()?,
            key: cfg.secret()?,
            ring: Keyring::new(
                cfg.secret()?.into_iter().collect(),
                SENDER_FWD + u16::from(cfg.node_id),
                cfg.epoch_us,
            )
            .with_replay_limits(
                cfg.replay_max_age_s,
                DEFAULT_WINDOW,
                DEFAULT_MAX_SENDERS,
            ),
            clock_us: 0,
            timers: TimerTable::default(),
            hello_seq: 0,
            queue: VecDeque::new(),
            stats: Stats::default(),
        })
    }

    /// This node's ID.
    pub const fn node_id(&self) -> u8 {
        self.node_id
    }

    /// The ports.
    pub fn ports(&self) -> &[PortState] {
        &self.ports
    }

    /// The counters.
    pub const fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The pathID link events take to the NR.
    pub const fn nr_path(&self) -> PathId {
        self.nr_path
    }

    /// The ports a packet with `path` arriving on `in_port` leaves by: every
    /// other port whose outgoing link ID is in `path` (the AND/CMP match).
    pub fn out_ports(&self, in_port: Option<usize>, path: &PathId) -> PortSet {
        self.ports
            .iter()
            .enumerate()
            .filter(|&(i, p)| Some(i) != in_port && path.bit(p.link_id))
            .map(|(i, _)| i)
            .collect()
    }

    /// Decide what happens to `frame`, received on `in_port` at `now`.
    ///
    /// A GFF packet to forward has its Ethernet padding trimmed and its hop
    /// limit decremented in place. A hello updates the port's link state
    /// (and may queue link events).
    pub fn process(&mut self, now: Instant, in_port: usize, frame: &mut Vec<u8>) -> Verdict {
        self.tick(now);
        match self.process_inner(now, in_port, frame) {
            Ok(v) => v,
            Err(reason) => Verdict::Drop(reason),
        }
    }

    fn process_inner(
        &mut self,
        now: Instant,
        in_port: usize,
        frame: &mut Vec<u8>,
    ) -> Result<Verdict, DropReason> {
        if in_port >= self.ports.len() {
            return Err(DropReason::BadPort);
        }
        let eth = EthernetFrame::new_checked(&frame[..]).map_err(|_| DropReason::Runt)?;
        if eth.ethertype() != EthernetProtocol::Ipv6 {
            return Err(DropReason::NotIpv6);
        }
        let ip = Ipv6Packet::new_checked(eth.payload()).map_err(|_| DropReason::MalformedIpv6)?;
        if ip.version() != 6 {
            return Err(DropReason::MalformedIpv6);
        }
        if u8::from(ip.next_header()) != gff::NEXT_HEADER {
            return Err(DropReason::NotGff);
        }
        let g = match gff::parse_ethernet_frame(frame) {
            Some(Ok(g)) => g,
            Some(Err(FrameError::PathMismatch)) => return Err(DropReason::PathIdMismatch),
            // The IPv6 lengths were checked above: what is left is GFF's.
            Some(Err(FrameError::Malformed | FrameError::Truncated)) | None => {
                return Err(DropReason::MalformedGff)
            }
        };
        // Ethernet pads short frames: forward the IPv6 packet only.
        frame.truncate(g.ip_end);
        match g.repr.msg_type {
            MessageType::LinkHello => {
                let payload = &frame[g.payload];
                return self.handle_hello(now, in_port, g.src_mac, payload);
            }
            MessageType::Unknown(_) => return Err(DropReason::UnknownType),
            _ => {}
        }
        if g.hop_limit <= 1 {
            return Err(DropReason::HopLimit);
        }
        let out = self.out_ports(Some(in_port), &g.repr.path_id);
        if out.is_empty() {
            return Err(DropReason::NoMatch);
        }
        let ip_at = EthernetFrame::<&[u8]>::header_len();
        Ipv6Packet::new_unchecked(&mut frame[ip_at..]).set_hop_limit(g.hop_limit - 1);
        self.stats.forwarded += 1;
        self.stats.copies += out.len() as u64;
        Ok(Verdict::Forward(out))
    }

    /// Write the Ethernet addresses of a frame leaving by `port`: the
    /// neighbour's MAC learned from its hellos (broadcast until one is
    /// heard) and the port's own MAC. Frames shorter than an Ethernet header
    /// or unknown ports are left alone.
    pub fn address(&self, port: usize, frame: &mut [u8]) {
        let (Some(p), Some(hdr)) = (self.ports.get(port), frame.get_mut(..12)) else {
            return;
        };
        let dst = p
            .status
            .neighbour()
            .map_or(EthernetAddress::BROADCAST, |n| n.mac);
        hdr[..6].copy_from_slice(&dst.0);
        hdr[6..].copy_from_slice(&p.mac.0);
    }

    fn handle_hello(
        &mut self,
        now: Instant,
        port: usize,
        mac: EthernetAddress,
        payload: &[u8],
    ) -> Result<Verdict, DropReason> {
        nr::open(
            &mut self.ring,
            self.clock_us,
            MessageType::LinkHello,
            payload,
        )
        .map_err(|r| match r {
            Reject::Malformed => DropReason::HelloMalformed,
            Reject::Unsigned => DropReason::HelloUnsigned,
            Reject::UnknownKey => DropReason::HelloUnknownKey,
            Reject::Bad => DropReason::HelloBadAuth,
            Reject::Unsequenced => DropReason::HelloUnsequenced,
            Reject::Replayed => DropReason::HelloReplayed,
            Reject::Stale | Reject::Future | Reject::SendersFull => DropReason::HelloStale,
        })?;
        let Ok(nr::Repr::LinkHello(hello)) = nr::Repr::parse(MessageType::LinkHello, payload)
        else {
            return Err(DropReason::HelloMalformed);
        };
        if hello.sender == self.node_id && self.ports.iter().any(|p| p.link_id == hello.link_id) {
            return Err(DropReason::HelloOwn);
        }
        if let (
            None,
            LinkStatus::Up {
                neighbour: live, ..
            },
        ) = (&self.key, self.ports[port].status)
        {
            if live.mac != mac {
                return Err(DropReason::HelloMacMoved);
            }
        }
        let neighbour = Neighbour {
            node: hello.sender,
            link_id: hello.link_id,
            mac,
        };
        self.stats.hellos_in += 1;
        let p = &mut self.ports[port];
        p.hellos_in += 1;
        let was = p.status;
        p.status = LinkStatus::Up {
            neighbour,
            last_hello: now,
            seq: hello.seq,
        };
        match was {
            LinkStatus::Unknown => {
                self.stats.links_up += 1;
                log::info!(
                    "port {port} (link {}): up, neighbour node {} link {}",
                    p.link_id,
                    neighbour.node,
                    neighbour.link_id
                );
            }
            LinkStatus::Down { neighbour: old, .. } => {
                self.stats.links_up += 1;
                log::info!("port {port} (link {}): up again", p.link_id);
                self.link_event(port, Some(old), LinkState::Up);
            }
            LinkStatus::Up { .. } => {}
        }
        Ok(Verdict::Control)
    }

    /// When [`FwdCore::handle_timeout`] is next due: the next hello or the
    /// earliest dead deadline (`None` before the first `handle_timeout`).
    pub fn poll_at(&self) -> Option<Instant> {
        let hello = self.timers.get(Timer::Hello)?;
        let hello = self
            .timers
            .get(Timer::Refresh)
            .map_or(hello, |r| r.min(hello));
        let dead = self
            .ports
            .iter()
            .filter_map(|p| match p.status {
                LinkStatus::Up { last_hello, .. } => Some(last_hello + self.dead),
                _ => None,
            })
            .min();
        Some(dead.map_or(hello, |d| d.min(hello)))
    }

    /// The clock sent messages take their sequence numbers from.
    fn tick(&mut self, now: Instant) {
        self.clock_us = self.clock_us.max(now.total_micros().max(0) as u64);
    }

    /// Send hellos and declare silent links down, as due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        let next = self.timers.get(Timer::Hello).unwrap_or(now);
        self.timers.set(Timer::Hello, next);
        if self.refresh != Duration::ZERO && !self.timers.is_armed(Timer::Refresh) {
            self.timers.set(Timer::Refresh, now + self.refresh);
        }
        if self.timers.is_due(Timer::Refresh, now) {
            self.timers.set(Timer::Refresh, now + self.refresh);
            self.refresh_down_links();
        }
        if self.timers.expire(now) == Some(Timer::Hello) {
            self.send_hellos();
            let after = next + self.hello;
            // After a long stall, resume the rhythm from now.
            let at = if after <= now {
                now + self.hello
            } else {
                after
            };
            self.timers.set(Timer::Hello, at);
        }
        for port in 0..self.ports.len() {
            let p = &mut self.ports[port];
            let LinkStatus::Up {
                neighbour,
                last_hello,
                ..
            } = p.status
            else {
                continue;
            };
            if now < last_hello + self.dead {
                continue;
            }
            p.status = LinkStatus::Down {
                neighbour,
                since: now,
            };
            self.stats.links_down += 1;
            log::warn!(
                "port {port} (link {}): down, no hello from node {} for {}",
                p.link_id,
                neighbour.node,
                self.dead
            );
            self.link_event(port, Some(neighbour), LinkState::Down);
        }
    }

    /// Say again that each down link is down: the NR forgets a down state
    /// nobody repeats.
    fn refresh_down_links(&mut self) {
        for port in 0..self.ports.len() {
            if let LinkStatus::Down { neighbour, .. } = self.ports[port].status {
                let before = self.stats.events_out;
                self.link_event(port, Some(neighbour), LinkState::Down);
                self.stats.events_refreshed += self.stats.events_out - before;
            }
        }
    }

    /// The next frame to send, if any.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.queue.pop_front()
    }

    fn send_hellos(&mut self) {
        self.hello_seq = self.hello_seq.wrapping_add(1);
        for port in 0..self.ports.len() {
            let (link_id, mac) = (self.ports[port].link_id, self.ports[port].mac);
            let msg = nr::Repr::LinkHello(nr::LinkHello {
                sender: self.node_id,
                link_id,
                seq: self.hello_seq,
                tlvs: Tlvs::EMPTY,
            });
            let payload = self.sign(&msg);
            let frame = gff_frame(
                EthernetAddress::BROADCAST,
                mac,
                PathId::link(link_id),
                MessageType::LinkHello,
                gff::HOP_LIMIT,
                &payload,
            );
            self.stats.hellos_out += 1;
            self.enqueue(Transmit { port, frame });
        }
    }

    /// Queue link events for `port`'s link: the direction we observed (the
    /// neighbour's outgoing link ID, if known), then our own outgoing link.
    fn link_event(&mut self, port: usize, neighbour: Option<Neighbour>, state: LinkState) {
        let own = self.ports[port].link_id;
        let links = neighbour
            .map(|n| n.link_id)
            .filter(|&l| l != own)
            .into_iter()
            .chain([own]);
        let out = self.out_ports(None, &self.nr_path);
        for link_id in links.collect::<Vec<_>>() {
            if out.is_empty() {
                self.stats.events_unsent += 1;
                log::warn!("link event for link {link_id} not sent: no port on the NR path");
                continue;
            }
            let msg = nr::Repr::LinkEvent(nr::LinkEvent {
                link_id,
                state,
                tlvs: Tlvs::EMPTY,
            });
            let payload = self.sign(&msg);
            let mut frame = gff_frame(
                EthernetAddress::BROADCAST,
                EthernetAddress::BROADCAST,
                self.nr_path,
                MessageType::LinkEvent,
                gff::HOP_LIMIT,
                &payload,
            );
            self.stats.events_out += 1;
            for port in out.iter() {
                let mut copy = frame.clone();
                self.address(port, &mut copy);
                self.enqueue(Transmit { port, frame: copy });
            }
            frame.clear();
        }
    }

    fn sign(&mut self, msg: &nr::Repr<'_>) -> Vec<u8> {
        let mut payload = vec![0; msg.buffer_len()];
        msg.emit(&mut payload);
        nr::seal(
            &mut self.ring,
            self.clock_us,
            msg.message_type(),
            &mut payload,
        );
        payload
    }

    fn enqueue(&mut self, t: Transmit) {
        if self.queue.len() >= MAX_QUEUE {
            self.stats.queue_full += 1;
            return;
        }
        self.queue.push_back(t);
    }
}

/// An Ethernet frame carrying a GFF packet; see
/// [`gff::ethernet_frame`](svcroute_stack::wire::gff::ethernet_frame).
pub fn gff_frame(
    dst: EthernetAddress,
    src: EthernetAddress,
    path: PathId,
    msg_type: MessageType,
    hop_limit: u8,
    payload: &[u8],
) -> Vec<u8> {
    gff::ethernet_frame(dst, src, path, msg_type, hop_limit, payload)
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::config::AuthConfig;

    const SECRET: &str = "000102030405060708090a0b0c0d0e0f";
    /// Golden-byte offsets in a test frame.
    use smoltcp::wire::ETHERNET_HEADER_LEN as ETH_LEN;
    const GFF_AT: usize = gff::GFF_OFFSET;
    const HOP_LIMIT_AT: usize = ETH_LEN + 7;

    fn mac(i: u8) -> EthernetAddress {
        EthernetAddress([0x02, 0, 0, 0, 0xf0, i])
    }

    const PEER: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0xee, 1]);

    /// A switch with ports 0, 1, 2 on outgoing links 10, 11, 12; the NR is
    /// behind port 2 (path: link 12).
    fn switch() -> FwdCore {
        switch_with(FwdConfig::default())
    }

    fn switch_with(cfg: FwdConfig) -> FwdCore {
        let cfg = FwdConfig {
            node_id: 1,
            link_ids: vec![10, 11, 12],
            nr_links: vec![12],
            ..cfg
        };
        FwdCore::new(&cfg, &[mac(0), mac(1), mac(2)]).unwrap()
    }

    fn keyed() -> FwdConfig {
        FwdConfig {
            auth: Some(AuthConfig {
                key_id: 7,
                secret: SECRET.into(),
            }),
            ..FwdConfig::default()
        }
    }

    fn data(path: PathId) -> Vec<u8> {
        gff_frame(
            EthernetAddress::BROADCAST,
            PEER,
            path,
            MessageType::TransportData,
            gff::HOP_LIMIT,
            b"hello fabric",
        )
    }

    fn hello_payload(sender: u8, link_id: u8, seq: u32, key: Option<(u8, &[u8])>) -> Vec<u8> {
        let msg = nr::Repr::LinkHello(nr::LinkHello {
            sender,
            link_id,
            seq,
            tlvs: Tlvs::EMPTY,
        });
        let mut p = vec![0; msg.buffer_len()];
        msg.emit(&mut p);
        if let Some((id, secret)) = key {
            // Every signed test hello gets a fresh sequence number.
            static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
            let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut ring = Keyring::new(
                vec![(id, secret.to_vec())],
                SENDER_FWD + u16::from(sender),
                n,
            );
            nr::seal(&mut ring, 0, MessageType::LinkHello, &mut p);
        }
        p
    }

    fn hello(sender: u8, link_id: u8, key: Option<(u8, &[u8])>) -> Vec<u8> {
        gff_frame(
            EthernetAddress::BROADCAST,
            PEER,
            PathId::link(link_id),
            MessageType::LinkHello,
            gff::HOP_LIMIT,
            &hello_payload(sender, link_id, 1, key),
        )
    }

    fn secret() -> Vec<u8> {
        (0..16).collect()
    }

    fn ports(list: &[usize]) -> PortSet {
        list.iter().copied().collect()
    }

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms as i64)
    }

    /// `recv!(core, now, port, frame => verdict)`: process and assert.
    macro_rules! recv {
        ($core:expr, $ms:expr, $port:expr, $frame:expr => $verdict:expr) => {{
            let mut f = $frame;
            assert_eq!($core.process(at($ms), $port, &mut f), $verdict);
            f
        }};
    }

    #[track_caller]
    fn drain(core: &mut FwdCore) -> Vec<Transmit> {
        std::iter::from_fn(|| core.poll_transmit()).collect()
    }

    /// The link events in `out`: (port, link, state).
    #[track_caller]
    fn events(out: &[Transmit]) -> Vec<(usize, u8, LinkState)> {
        out.iter()
            .filter_map(|t| {
                let p = gff::Packet::new_checked(&t.frame[GFF_AT..]).unwrap();
                (p.msg_type() == MessageType::LinkEvent).then(|| {
                    match nr::Repr::parse(MessageType::LinkEvent, p.payload()).unwrap() {
                        nr::Repr::LinkEvent(e) => (t.port, e.link_id, e.state),
                        other => panic!("{other:?}"),
                    }
                })
            })
            .collect()
    }

    #[test]
    fn forwards_by_link_bit_and_decrements_hop_limit() {
        let mut c = switch();
        let f = recv!(c, 0, 0, data(PathId::link(11).with(40)) => Verdict::Forward(ports(&[1])));
        assert_eq!(f[HOP_LIMIT_AT], gff::HOP_LIMIT - 1);
        assert_eq!(c.stats().forwarded, 1);
        assert_eq!(c.stats().copies, 1);
    }

    #[test]
    fn multicast_by_or_copies_to_every_matching_port() {
        let mut c = switch();
        let path = PathId::link(11) | PathId::link(12);
        recv!(c, 0, 0, data(path) => Verdict::Forward(ports(&[1, 2])));
        assert_eq!((c.stats().forwarded, c.stats().copies), (1, 2));
    }

    #[test]
    fn never_back_out_of_the_ingress_port() {
        let mut c = switch();
        let path = PathId::link(10).with(11);
        recv!(c, 0, 0, data(path) => Verdict::Forward(ports(&[1])));
        recv!(c, 0, 0, data(PathId::link(10)) => Verdict::Drop(DropReason::NoMatch));
    }

    #[test]
    fn a_pathid_that_differs_from_the_addresses_is_dropped() {
        let mut c = switch();
        let mut f = data(PathId::link(11));
        f[GFF_AT + 2 + 31] ^= 1; // the GFF copy gains link 255
        recv!(c, 0, 0, f => Verdict::Drop(DropReason::PathIdMismatch));
    }

    #[test]
    fn hop_limit_one_is_the_last_hop() {
        let mut c = switch();
        let mut f = data(PathId::link(11));
        f[HOP_LIMIT_AT] = 2;
        let f = recv!(c, 0, 0, f => Verdict::Forward(ports(&[1])));
        assert_eq!(f[HOP_LIMIT_AT], 1);
        recv!(c, 0, 0, f => Verdict::Drop(DropReason::HopLimit));
        let mut f = data(PathId::link(11));
        f[HOP_LIMIT_AT] = 0;
        recv!(c, 0, 0, f => Verdict::Drop(DropReason::HopLimit));
    }

    #[test]
    fn malformed_frames_are_dropped_by_reason() {
        let mut c = switch();
        let good = data(PathId::link(11));
        recv!(c, 0, 0, good[..10].to_vec() => Verdict::Drop(DropReason::Runt));
        let mut arp = good.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        recv!(c, 0, 0, arp => Verdict::Drop(DropReason::NotIpv6));
        recv!(c, 0, 0, good[..50].to_vec() => Verdict::Drop(DropReason::MalformedIpv6));
        let mut v4 = good.clone();
        v4[ETH_LEN] = 0x45;
        recv!(c, 0, 0, v4 => Verdict::Drop(DropReason::MalformedIpv6));
        // Payload length past the frame.
        recv!(c, 0, 0, good[..good.len() - 1].to_vec() => Verdict::Drop(DropReason::MalformedIpv6));
        let mut icmp = good.clone();
        icmp[ETH_LEN + 6] = 58;
        recv!(c, 0, 0, icmp => Verdict::Drop(DropReason::NotGff));
        // A GFF header cut inside the pathID.
        let mut short = good[..GFF_AT + 10].to_vec();
        short[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&10u16.to_be_bytes());
        recv!(c, 0, 0, short => Verdict::Drop(DropReason::MalformedGff));
        // A 128-bit pathID.
        let mut narrow = good.clone();
        narrow[GFF_AT] = 0x08;
        recv!(c, 0, 0, narrow => Verdict::Drop(DropReason::MalformedGff));
        recv!(c, 0, 9, good.clone() => Verdict::Drop(DropReason::BadPort));
        // Ethernet padding is trimmed, the rest forwarded.
        let mut padded = good.clone();
        padded.extend_from_slice(&[0; 8]);
        let f = recv!(c, 0, 0, padded => Verdict::Forward(ports(&[1])));
        assert_eq!(f.len(), good.len());
    }

    #[test]
    fn unknown_types_are_dropped_known_ones_forwarded() {
        let mut c = switch();
        let mut f = data(PathId::link(11));
        f[GFF_AT + 1] = (f[GFF_AT + 1] & 0xf0) | 9;
        recv!(c, 0, 0, f => Verdict::Drop(DropReason::UnknownType));
        for t in 1..=7 {
            let mut f = data(PathId::link(11));
            f[GFF_AT + 1] = (f[GFF_AT + 1] & 0xf0) | t;
            recv!(c, 0, 0, f => Verdict::Forward(ports(&[1])));
        }
    }

    #[test]
    fn hellos_go_out_on_every_port_every_interval() {
        let mut c = switch();
        assert_eq!(c.poll_at(), None);
        c.handle_timeout(at(0));
        let out = drain(&mut c);
        assert_eq!(out.iter().map(|t| t.port).collect::<Vec<_>>(), [0, 1, 2]);
        // Each hello: broadcast, from the port, pathID = the port's link.
        let t = &out[1];
        assert_eq!(&t.frame[..6], &EthernetAddress::BROADCAST.0);
        assert_eq!(&t.frame[6..12], &mac(1).0);
        let p = gff::Packet::new_checked(&t.frame[GFF_AT..]).unwrap();
        assert_eq!(p.path_id(), PathId::link(11).as_bytes());
        assert_eq!(
            nr::Repr::parse(MessageType::LinkHello, p.payload()).unwrap(),
            nr::Repr::LinkHello(nr::LinkHello {
                sender: 1,
                link_id: 11,
                seq: 1,
                tlvs: Tlvs::EMPTY
            })
        );
        assert_eq!(c.poll_at(), Some(at(1000)));
        c.handle_timeout(at(999)); // early: nothing
        assert!(drain(&mut c).is_empty());
        c.handle_timeout(at(1000));
        assert_eq!(drain(&mut c).len(), 3);
        assert_eq!(c.stats().hellos_out, 6);
    }

    #[test]
    fn hellos_bring_a_link_up_and_teach_the_neighbours_mac() {
        let mut c = switch();
        c.handle_timeout(at(0));
        drain(&mut c);
        recv!(c, 100, 1, hello(2, 21, None) => Verdict::Control);
        let p = &c.ports()[1];
        assert_eq!(
            p.status,
            LinkStatus::Up {
                neighbour: Neighbour {
                    node: 2,
                    link_id: 21,
                    mac: PEER
                },
                last_hello: at(100),
                seq: 1
            }
        );
        // The first hello raises no event: the NR assumes configured links up.
        assert!(drain(&mut c).is_empty());
        // Data toward port 1 now goes to the neighbour's MAC.
        let mut f = recv!(c, 150, 0, data(PathId::link(11)) => Verdict::Forward(ports(&[1])));
        c.address(1, &mut f);
        assert_eq!(&f[..6], &PEER.0);
        assert_eq!(&f[6..12], &mac(1).0);
        // Port 0 never heard a hello: broadcast.
        c.address(0, &mut f);
        assert_eq!(&f[..6], &EthernetAddress::BROADCAST.0);
        // The dead deadline is armed.
        assert_eq!(c.poll_at(), Some(at(1000)));
        c.handle_timeout(at(1000));
        drain(&mut c);
        assert_eq!(c.poll_at(), Some(at(2000)));
        recv!(c, 1500, 1, hello(2, 21, None) => Verdict::Control);
        c.handle_timeout(at(2000));
        c.handle_timeout(at(3000));
        c.handle_timeout(at(4000));
        assert_eq!(c.ports()[1].status.as_str(), "up");
    }

    #[test]
    fn silence_takes_a_link_down_and_tells_the_nr_then_hellos_bring_it_back() {
        // Without the down-link refresh (its own test below), one event
        // per transition.
        let mut c = switch_with(FwdConfig {
            link_refresh_ms: 0,
            ..FwdConfig::default()
        });
        c.handle_timeout(at(0));
        recv!(c, 100, 1, hello(2, 21, None) => Verdict::Control);
        for ms in [1000, 2000, 3000] {
            c.handle_timeout(at(ms));
        }
        drain(&mut c);
        assert_eq!(c.poll_at(), Some(at(3100)));
        c.handle_timeout(at(3100));
        assert_eq!(c.ports()[1].status.as_str(), "down");
        let out = drain(&mut c);
        // Both directions of the link, out of port 2 (the NR path), to
        // the broadcast address (no neighbour heard on port 2).
        assert_eq!(
            events(&out),
            [(2, 21, LinkState::Down), (2, 11, LinkState::Down)]
        );
        assert_eq!(&out[0].frame[..6], &EthernetAddress::BROADCAST.0);
        let p = gff::Packet::new_checked(&out[0].frame[GFF_AT..]).unwrap();
        assert_eq!(p.path_id(), PathId::link(12).as_bytes());
        assert_eq!((c.stats().links_down, c.stats().events_out), (1, 2));
        // Only one event per transition.
        c.handle_timeout(at(9000));
        assert!(events(&drain(&mut c)).is_empty());
        recv!(c, 9500, 1, hello(2, 21, None) => Verdict::Control);
        assert_eq!(
            events(&drain(&mut c)),
            [(2, 21, LinkState::Up), (2, 11, LinkState::Up)]
        );
        assert_eq!(c.stats().links_up, 2);
    }

    #[test]
    fn link_events_without_an_nr_path_are_counted_not_sent() {
        let cfg = FwdConfig {
            node_id: 1,
            link_ids: vec![10, 11],
            ..FwdConfig::default()
        };
        let mut c = FwdCore::new(&cfg, &[mac(0), mac(1)]).unwrap();
        c.handle_timeout(at(0));
        recv!(c, 0, 1, hello(2, 21, None) => Verdict::Control);
        drain(&mut c);
        c.handle_timeout(at(3000));
        assert!(events(&drain(&mut c)).is_empty());
        assert_eq!(c.stats().events_unsent, 2);
    }

    #[test]
    fn with_a_key_only_good_hellos_count_and_own_messages_are_signed() {
        let mut c = switch_with(keyed());
        let good = secret();
        recv!(c, 0, 1, hello(2, 21, None) => Verdict::Drop(DropReason::HelloUnsigned));
        recv!(c, 0, 1, hello(2, 21, Some((8, &good))) => Verdict::Drop(DropReason::HelloUnknownKey));
        recv!(c, 0, 1, hello(2, 21, Some((7, b"wrong secret, 16"))) => Verdict::Drop(DropReason::HelloBadAuth));
        assert_eq!(c.ports()[1].status, LinkStatus::Unknown);
        recv!(c, 0, 1, hello(2, 21, Some((7, &good))) => Verdict::Control);
        assert_eq!(c.ports()[1].status.as_str(), "up");
        c.handle_timeout(at(0));
        c.handle_timeout(at(3000));
        let out = drain(&mut c);
        assert!(!out.is_empty());
        for t in &out {
            let p = gff::Packet::new_checked(&t.frame[GFF_AT..]).unwrap();
            let ring = Keyring::new(vec![(7, good.clone())], 0, 0);
            let check = nr::authenticate(&ring, p.msg_type(), p.payload());
            assert_eq!(
                check.map(|s| s.map(|(sender, _)| sender)),
                Ok(Some(SENDER_FWD + 1)),
                "{:?}",
                p.msg_type()
            );
        }
        assert_eq!(events(&out).len(), 2);
    }

    /// A captured signed hello played again (to keep a dead link up, or
    /// to move a neighbour's MAC) is dropped; so is one signed the old way,
    /// with no sequence number, and one older than `replay_max_age_s`.
    #[test]
    fn replayed_signed_hellos_are_dropped() {
        let mut c = switch_with(keyed());
        let good = secret();
        let h = hello(2, 21, Some((7, &good)));
        recv!(c, 0, 1, h.clone() => Verdict::Control);
        recv!(c, 0, 1, h.clone() => Verdict::Drop(DropReason::HelloReplayed));
        let mut old = hello_payload(2, 21, 1, None);
        nr::append_auth(&mut old, MessageType::LinkHello, 7, &good);
        let old = gff_frame(
            EthernetAddress::BROADCAST,
            PEER,
            PathId::link(21),
            MessageType::LinkHello,
            gff::HOP_LIMIT,
            &old,
        );
        recv!(c, 0, 1, old => Verdict::Drop(DropReason::HelloUnsequenced));
        // Two minutes on, a captured hello (never seen here) is stale.
        let late = hello(3, 22, Some((7, &good)));
        let mut frame = late.clone();
        assert_eq!(
            c.process(at(120_000), 0, &mut frame),
            Verdict::Drop(DropReason::HelloStale)
        );
        assert_eq!(DropReason::HelloReplayed.as_str(), "fwd.hello_replayed");
    }

    /// A spoofed hello naming the neighbour (or another switch) from
    /// another MAC does not move the neighbour's address; once the real
    /// one is silent for the dead interval, a new MAC is learnt; with a
    /// key, a signed hello moves it at once.
    #[test]
    fn an_unauthenticated_hello_does_not_move_a_live_neighbours_mac() {
        const SPOOF: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0xbb, 9]);
        let from = |mac: EthernetAddress, mut f: Vec<u8>| {
            f[6..12].copy_from_slice(&mac.0);
            f
        };
        let mut c = switch();
        c.handle_timeout(at(0));
        recv!(c, 0, 1, hello(2, 21, None) => Verdict::Control);
        let spoofed = from(SPOOF, hello(2, 21, None));
        assert_eq!(
            c.process(at(100), 1, &mut spoofed.clone()),
            Verdict::Drop(DropReason::HelloMacMoved)
        );
        let other = from(SPOOF, hello(3, 31, None));
        assert_eq!(
            c.process(at(200), 1, &mut other.clone()),
            Verdict::Drop(DropReason::HelloMacMoved)
        );
        assert_eq!(c.ports()[1].status.neighbour().unwrap().mac, PEER);
        let mut f = data(PathId::link(11));
        c.address(1, &mut f);
        assert_eq!(&f[..6], &PEER.0, "frames still go to the real neighbour");
        // The real neighbour falls silent: down, then the new MAC is learnt.
        c.handle_timeout(at(3500));
        assert_eq!(c.ports()[1].status.as_str(), "down");
        assert_eq!(
            c.process(at(3600), 1, &mut spoofed.clone()),
            Verdict::Control
        );
        assert_eq!(c.ports()[1].status.neighbour().unwrap().mac, SPOOF);

        // Keyed: a good signature moves it at once.
        let mut c = switch_with(keyed());
        let good = secret();
        recv!(c, 0, 1, hello(2, 21, Some((7, &good))) => Verdict::Control);
        let moved = from(SPOOF, hello(2, 21, Some((7, &good))));
        assert_eq!(c.process(at(100), 1, &mut moved.clone()), Verdict::Control);
        assert_eq!(c.ports()[1].status.neighbour().unwrap().mac, SPOOF);
    }

    /// A down link's events go to the NR again every `link_refresh_ms`
    /// while it stays down (the NR lets a down state nobody repeats
    /// expire); an up link's are not repeated.
    #[test]
    fn a_down_links_events_are_repeated_while_it_is_down() {
        let mut c = switch();
        c.handle_timeout(at(0));
        recv!(c, 0, 1, hello(2, 21, None) => Verdict::Control);
        drain(&mut c);
        c.handle_timeout(at(3000));
        assert_eq!(c.ports()[1].status.as_str(), "down");
        assert_eq!(events(&drain(&mut c)).len(), 2);
        assert_eq!(c.poll_at(), Some(at(4000)));
        c.handle_timeout(at(5000));
        assert_eq!(
            events(&drain(&mut c)),
            [(2, 21, LinkState::Down), (2, 11, LinkState::Down)]
        );
        assert_eq!(c.stats().events_refreshed, 2);
        // Up again: nothing repeated at the next refresh.
        recv!(c, 5500, 1, hello(2, 21, None) => Verdict::Control);
        recv!(c, 9000, 1, hello(2, 21, None) => Verdict::Control);
        drain(&mut c);
        c.handle_timeout(at(10_000));
        assert!(events(&drain(&mut c)).is_empty());
        assert_eq!(c.stats().events_refreshed, 2);
    }

    #[test]
    fn our_own_hello_coming_back_is_dropped() {
        let mut c = switch();
        recv!(c, 0, 1, hello(1, 10, None) => Verdict::Drop(DropReason::HelloOwn));
        recv!(c, 0, 1, hello(2, 10, None) => Verdict::Control);
    }

    #[test]
    fn a_malformed_hello_is_dropped() {
        let mut c = switch();
        let f = gff_frame(
            EthernetAddress::BROADCAST,
            PEER,
            PathId::link(21),
            MessageType::LinkHello,
            64,
            &[2, 21, 0],
        );
        recv!(c, 0, 1, f => Verdict::Drop(DropReason::HelloMalformed));
    }

    #[test]
    fn no_input_panics() {
        let mut c = switch_with(keyed());
        let base = hello(2, 21, Some((7, &secret())));
        for len in 0..base.len() {
            let mut f = base[..len].to_vec();
            let _ = c.process(at(0), 1, &mut f);
        }
        for i in 0..base.len() {
            for v in [0x00, 0xff, 0x5a] {
                let mut f = base.clone();
                f[i] = v;
                let _ = c.process(at(0), 1, &mut f);
                let mut f = data(PathId::link(11));
                if let Some(b) = f.get_mut(i) {
                    *b = v;
                }
                let _ = c.process(at(0), 0, &mut f);
            }
        }
    }

    #[test]
    fn port_sets() {
        let s = ports(&[0, 63, 64, 255, 256]);
        assert_eq!(s.iter().collect::<Vec<_>>(), [0, 63, 64, 255]);
        assert_eq!(s.len(), 4);
        assert!(PortSet::EMPTY.is_empty());
    }
}
