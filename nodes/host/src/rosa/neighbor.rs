//! Next hops for rewritten packets.
//!
//! smoltcp addresses every frame it sends to the virtual address through
//! the route of the virtual prefix, and every frame to a client through
//! its own neighbour cache. Once the shim rewrites the destination (virtual
//! → instance, client → SAR) the frame needs the link-layer address of the
//! *new* next hop, which smoltcp never looked up. [`NextHops`] keeps the
//! shim's own bindings — learned only from evidence that cannot have been
//! rewritten on the way (neighbour discovery, and plain packets from on-link
//! sources without a ROSA option) — and parks frames whose next hop is not
//! known yet until the driver has resolved it ([`NextHops::due_for_resolution`]).
//!
//! Both tables are bounded: [`MAX_BINDINGS`] bindings (the least recently
//! seen goes) and [`MAX_PARKED`] parked frames (more are refused); a parked
//! frame whose next hop stays unknown for [`PARK_TIMEOUT`] is dropped.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv6Addr;

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::EthernetAddress;

use super::frame;

/// Most bindings kept.
pub const MAX_BINDINGS: usize = 1024;
/// Most frames parked while their next hop is resolved.
pub const MAX_PARKED: usize = 64;
/// How long a frame waits for its next hop.
pub const PARK_TIMEOUT: Duration = Duration::from_secs(3);
/// Least time between two resolution requests for one next hop.
pub const ASK_INTERVAL: Duration = Duration::from_secs(1);

/// A next hop on a port.
pub(crate) type Hop = (usize, Ipv6Addr);

#[derive(Debug)]
struct Parked {
    hop: Hop,
    frame: Vec<u8>,
    since: Instant,
}

/// What [`NextHops::send`] did with a frame.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// The frame's destination MAC is set: send it.
    Ready,
    /// The frame was taken and parked until the next hop is resolved.
    Parked,
    /// Too many frames are parked already: the frame is refused.
    Full,
}

/// The shim's link-layer bindings and parked frames.
#[derive(Debug, Default)]
pub(crate) struct NextHops {
    bindings: HashMap<Hop, (EthernetAddress, Instant)>,
    parked: Vec<Parked>,
    asked: BTreeMap<Hop, Instant>,
}

impl NextHops {
    /// The MAC of `hop`, if known.
    pub(crate) fn lookup(&self, hop: Hop) -> Option<EthernetAddress> {
        self.bindings.get(&hop).map(|&(mac, _)| mac)
    }

    /// Learn that `hop` is at `mac`; returns the frames parked for it, with
    /// their destination MAC set, ready to send.
    pub(crate) fn learn(
        &mut self,
        now: Instant,
        hop: Hop,
        mac: EthernetAddress,
    ) -> Vec<(usize, Vec<u8>)> {
        if !mac.is_unicast() {
            return Vec::new();
        }
        if !self.bindings.contains_key(&hop) && self.bindings.len() >= MAX_BINDINGS {
            let oldest = self
                .bindings
                .iter()
                .min_by_key(|(&hop, &(_, seen))| (seen, hop))
                .map(|(h, _)| *h);
            if let Some(h) = oldest {
                self.bindings.remove(&h);
            }
        }
        self.bindings.insert(hop, (mac, now));
        if !self.parked.iter().any(|p| p.hop == hop) {
            return Vec::new();
        }
        self.asked.remove(&hop);
        let mut ready = Vec::new();
        self.parked.retain_mut(|p| {
            if p.hop != hop {
                return true;
            }
            let mut f = std::mem::take(&mut p.frame);
            frame::set_dst_mac(&mut f, mac);
            ready.push((hop.0, f));
            false
        });
        ready
    }

    /// Address `frame` to `hop`: set its destination MAC if the binding is
    /// known, else take it and park it.
    pub(crate) fn send(&mut self, now: Instant, hop: Hop, frame: &mut Vec<u8>) -> Sent {
        if let Some(mac) = self.lookup(hop) {
            frame::set_dst_mac(frame, mac);
            return Sent::Ready;
        }
        if self.parked.len() >= MAX_PARKED {
            return Sent::Full;
        }
        self.parked.push(Parked {
            hop,
            frame: std::mem::take(frame),
            since: now,
        });
        Sent::Parked
    }

    /// Next hops the driver should resolve now (each at most once per
    /// [`ASK_INTERVAL`] while frames wait for it).
    pub(crate) fn due_for_resolution(&mut self, now: Instant) -> Vec<Hop> {
        let mut out = Vec::new();
        for p in &self.parked {
            let due = self
                .asked
                .get(&p.hop)
                .is_none_or(|&t| now - t >= ASK_INTERVAL);
            if due && !out.contains(&p.hop) {
                out.push(p.hop);
            }
        }
        for &hop in &out {
            self.asked.insert(hop, now);
        }
        out
    }

    /// Drop parked frames older than [`PARK_TIMEOUT`]; returns how many.
    pub(crate) fn expire(&mut self, now: Instant) -> usize {
        let before = self.parked.len();
        self.parked.retain(|p| now - p.since < PARK_TIMEOUT);
        let parked = &self.parked;
        self.asked.retain(|h, _| parked.iter().any(|p| p.hop == *h));
        before - self.parked.len()
    }

    /// When the oldest parked frame expires or the next request is due.
    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        let expiry = self.parked.iter().map(|p| p.since + PARK_TIMEOUT).min();
        let ask = self.asked.values().map(|&t| t + ASK_INTERVAL).min();
        expiry.into_iter().chain(ask).min()
    }

    /// Forget every binding (the link changed); parked frames wait on, to
    /// be resolved again or to expire.
    pub(crate) fn forget_bindings(&mut self) {
        self.bindings.clear();
    }

    /// Frames parked.
    pub(crate) fn parked(&self) -> usize {
        self.parked.len()
    }

    /// Bindings known.
    pub(crate) fn len(&self) -> usize {
        self.bindings.len()
    }
}
