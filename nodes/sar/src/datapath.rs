//! The SAR's per-frame data path, sans-IO: what happens to one received
//! frame, as a [`Verdict`].
//!
//! ```text
//!   DataPath::ingress(port, frame)
//!     ARP, multicast, IPv4 to us ─────────────────────────────► Deliver (smoltcp)
//!     IPv4 to others ─────────────────────────────────────────► Drop (not routed)
//!     IPv6 to one of our addresses
//!       ├ inside UDP 7471 (role sag) ─► decapsulate, walk again
//!       ├ a sticky tunnel (next header 41/47) ─► sticky_path.rs: decapsulate
//!       ├ a fragment on a SAR port ─► reassembled IGP datagram ─► Sar::handle_igp
//!       ├ a ROSA option ─► steer.rs: Sar::decide, rewrite ─► Forwarder::route
//!       ├ role sag: a proxied flow ─► gateway (proxy) ─► Forwarder::route
//!       └ else ─► the owning port's smoltcp
//!     IPv6 to others
//!       ├ sticky service from a client port (ingress) ─► sticky_path.rs: tunnel
//!       ├ to/from an anycast server attached here (egress) ─► sticky_path.rs
//!       └ else ─► Forwarder::route (hop limit, MTU, ICMPv6 errors)
//! ```
//!
//! [`DataPath`] borrows the node's parts for the length of one frame (or of
//! one batch of gateway results): the [`Forwarder`], the [`Sar`] core and,
//! for role `sag`, the [`Gateway`]. The ROSA steps live in
//! [`crate::steer`] and the gateway's in [`crate::gateway`]; both are
//! methods of the same type.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use smoltcp::time::Instant;
use smoltcp::wire::IpProtocol;
use svcroute_stack::shim::edit::{self, Fragment};
use svcroute_stack::shim::Outbox;
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::igp as wire_igp;

use crate::config::{Facing, Settings};
use crate::forward::{addr_at, deliver_here, Forwarder, Verdict};
use crate::icmp::{ETH_LEN, IPV6_LEN};
use crate::igp::LinkId;
use crate::sag::{encap, proxy, Gateway};
use crate::sticky::{tunnel, Sticky};
use crate::Sar;

/// The node's parts one frame needs. See the module docs.
pub(crate) struct DataPath<'a> {
    pub(crate) s: &'a Settings,
    pub(crate) fwd: &'a mut Forwarder,
    pub(crate) core: Option<&'a mut Sar>,
    pub(crate) gw: Option<&'a mut Gateway>,
    pub(crate) sticky: Option<&'a mut Sticky>,
    /// IGP links by (port, neighbour address).
    pub(crate) link_of: &'a HashMap<(usize, Ipv6Addr), LinkId>,
    pub(crate) now: Instant,
    pub(crate) stats: &'a mut Counters,
    pub(crate) out: &'a mut Outbox,
    /// The packet being handled came inside UDP 7471 (role `sag`).
    pub(crate) rx_encap: bool,
}

impl DataPath<'_> {
    /// A frame received on `port`.
    pub(crate) fn ingress(&mut self, port: usize, frame: &mut Vec<u8>) -> Verdict {
        match u16::from_be_bytes([frame[12], frame[13]]) {
            0x86dd => self.ipv6(port, frame),
            0x0806 => deliver_here(frame),
            0x0800 => {
                let dst = frame
                    .get(ETH_LEN + 16..ETH_LEN + 20)
                    .map(|b| Ipv4Addr::new(b[0], b[1], b[2], b[3]));
                match dst {
                    Some(d) if d.is_broadcast() || d.is_multicast() || self.fwd.is_own4(d) => {
                        deliver_here(frame)
                    }
                    Some(_) => Verdict::Drop("sar.ipv4_not_routed"),
                    None => Verdict::Drop("malformed_truncated"),
                }
            }
            0x8100 | 0x88a8 => Verdict::Drop("vlan_unsupported"),
            _ => Verdict::Drop("unknown_ethertype"),
        }
    }

    fn ipv6(&mut self, port: usize, frame: &mut Vec<u8>) -> Verdict {
        let Some(h) = frame.get(ETH_LEN..ETH_LEN + IPV6_LEN) else {
            return Verdict::Drop("malformed_truncated");
        };
        if h[0] >> 4 != 6 {
            return Verdict::Drop("malformed_ipv6");
        }
        let end = ETH_LEN + IPV6_LEN + usize::from(u16::from_be_bytes([h[4], h[5]]));
        if end > frame.len() {
            return Verdict::Drop("malformed_truncated");
        }
        frame.truncate(end); // Ethernet padding
        let src = addr_at(frame, ETH_LEN + 8);
        if src.is_unicast_link_local() {
            self.fwd.learn_link_local(port, src, frame);
        }
        let dst = addr_at(frame, ETH_LEN + 24);
        if dst.is_multicast() {
            return deliver_here(frame);
        }
        let Some(owner) = self.fwd.owner_of(dst) else {
            if dst.is_unicast_link_local() {
                return Verdict::Drop("sar.link_local_destination");
            }
            if let Some(st) = self.sticky.as_deref() {
                let from_clients = self.s.ports[port].facing == Facing::Clients;
                if from_clients && st.is_ingress() && st.is_sticky(dst) {
                    return self.sticky_ingress(port, frame);
                }
                if from_clients && st.serves(src) {
                    return self.sticky_from_server(port, frame);
                }
                if st.serves(dst) {
                    return self.sticky_to_server(port, frame, None);
                }
            }
            return self.route(port, frame);
        };
        if self.sticky.is_some() && tunnel::kind_of(frame).is_some() {
            return self.sticky_decapsulate(port, frame);
        }
        if self.gw.is_some() && encap::is_encapsulated(frame) {
            return self.decapsulate(port, frame);
        }
        if self.s.ports[port].facing == Facing::Sars
            && frame[ETH_LEN + 6] == u8::from(IpProtocol::Ipv6Frag)
            && frame.get(ETH_LEN + IPV6_LEN) == Some(&u8::from(IpProtocol::Udp))
        {
            return self.reassemble(port, frame);
        }
        let Ok(layout) = edit::walk(frame) else {
            return Verdict::Drop("malformed_ipv6");
        };
        if let Some(v) = self.rosa(port, frame, &layout) {
            return v;
        }
        if layout.dest_opts.is_some() && layout.fragment == Fragment::Whole {
            // smoltcp drops anything behind a Destination Options header
            // (it walks Hop-by-Hop only), silently. We are the destination:
            // the options that are left may be skipped (RFC 8200 §4.2; the
            // others were refused above), ours must parse; then the upper
            // layer goes to smoltcp without the header.
            if let Err(reason) = crate::sticky_path::sticky_option(frame) {
                return Verdict::Drop(reason);
            }
            if edit::strip_dest_opts(frame).is_err() {
                return Verdict::Drop("sar.dest_opts_malformed");
            }
            self.stats.bump("sar.dest_opts_stripped");
        }
        if let Some(gw) = self.gw.as_deref_mut() {
            let v = gw.plain(self.now, frame);
            crate::gateway::export_gw(gw, self.stats);
            match v {
                proxy::Verdict::Forward => return self.route(port, frame),
                // Counted by the proxy.
                proxy::Verdict::Drop(_) => return Verdict::Consume,
                proxy::Verdict::NotOurs => {}
            }
        }
        self.fwd.deliver(self.out, port, owner, frame)
    }

    /// Plain IPv6 forwarding of a packet as it arrived.
    pub(crate) fn route(&mut self, port: usize, frame: &mut Vec<u8>) -> Verdict {
        self.fwd.route(self.now, self.stats, port, frame, None, 0)
    }

    /// Role `sag`: a request or response another domain's SAG sent inside
    /// UDP 7471: handled as if it had come as it is inside.
    fn decapsulate(&mut self, port: usize, frame: &mut Vec<u8>) -> Verdict {
        if self.rx_encap {
            return Verdict::Drop("sag.encap_nested");
        }
        match encap::decapsulate(frame) {
            Ok((inner, _)) => {
                self.stats.bump("sag.encap_rx");
                *frame = inner;
                self.rx_encap = true;
                let v = self.ipv6(port, frame);
                self.rx_encap = false;
                v
            }
            Err(e) => Verdict::Drop(e.reason()),
        }
    }

    /// A fragment of a UDP datagram to us on a SAR port: an IGP datagram
    /// too big for the link, which smoltcp could not reassemble.
    fn reassemble(&mut self, port: usize, frame: &[u8]) -> Verdict {
        let d = match self.fwd.reassemble(self.now, frame) {
            Ok(Some(d)) => d,
            Ok(None) => return Verdict::Consume,
            Err(e) => return Verdict::Drop(e.reason()),
        };
        if d.dport != wire_igp::PORT {
            return Verdict::Drop("sar.igp_reassembled_other_port");
        }
        let Some(&link) = self.link_of.get(&(port, d.src)) else {
            return Verdict::Drop("sar.igp_unknown_neighbor");
        };
        let Some(core) = self.core.as_deref_mut() else {
            return Verdict::Consume;
        };
        self.stats.bump("sar.igp_rx_reassembled");
        core.handle_igp(self.now, link, &d.payload);
        export(core, self.stats);
        Verdict::Consume
    }
}

/// The sticky engine's counters since the last call, into the node's.
pub(crate) fn export_sticky(st: &mut Sticky, stats: &mut Counters) {
    for (k, v) in st.drain_counters() {
        stats.add(k, v);
    }
}

/// The core's counters since the last call, into the node's.
pub(crate) fn export(core: &mut Sar, stats: &mut Counters) {
    for (k, v) in core.drain_counters() {
        stats.add(k, v);
    }
}
