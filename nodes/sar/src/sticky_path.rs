//! The sticky service on the data path: the frame surgery around the
//! decisions of [`crate::sticky::Sticky`].
//!
//! ```text
//!   client port, destination in the ACL (ingress) ─► Sticky-Dst? ─► Sticky::steer
//!        ─► inner hop limit ─► tunnel (IPv6-in-IPv6 | GRE) ─► Forwarder::route (MTU: Packet Too Big)
//!   to us, next header 41/47, from a SAR ─► decapsulate
//!        ├ inner to a server attached here (egress) ─► to_server
//!        └ inner from a sticky service (a tunnelled reply, ingress) ─► learn ─► route to the UE
//!   to_server: meter, flows (a moved UE's source back to the flow's anchor) ─► route to the server
//!   client port, source a server attached here (egress reply) ─► meter, flows (destination to the
//!        UE's address now) ─► Sticky-Dst inserted ─► tunnelled to the flow's ingress, or routed
//! ```

use std::net::{IpAddr, Ipv6Addr};

use svcroute_stack::shim::edit::{self, AddrField, Fragment};
use svcroute_stack::wire::ipv6opt::{self, OptionRepr, OptionType};
use svcroute_stack::wire::sticky::StickyDst;

use crate::datapath::DataPath;
use crate::forward::{addr_at, Verdict};
use crate::icmp::{ErrorKind, ETH_LEN};
use crate::sticky::anchor::{FlowId, ToServer};
use crate::sticky::tunnel::{self, TunnelKind};
use crate::sticky::Steer;

/// The transport ports of a frame whose upper layer is TCP or UDP:
/// (protocol, source port, destination port).
fn ports(frame: &[u8]) -> Option<(u8, u16, u16)> {
    let l = edit::walk(frame).ok()?;
    let proto = u8::from(l.upper_protocol);
    if l.fragment == Fragment::Later || !(proto == 6 || proto == 17) {
        return None;
    }
    let p = frame.get(l.upper_offset..l.upper_offset + 4)?;
    Some((
        proto,
        u16::from_be_bytes([p[0], p[1]]),
        u16::from_be_bytes([p[2], p[3]]),
    ))
}

/// The IPv6 flow label of a frame.
fn flow_label(frame: &[u8]) -> u32 {
    u32::from_be_bytes([
        0,
        frame[ETH_LEN + 1],
        frame[ETH_LEN + 2],
        frame[ETH_LEN + 3],
    ]) & 0xf_ffff
}

/// The Sticky-Dst option of a frame, if its Destination Options header
/// (before the upper layer) has one.
pub(crate) fn sticky_option(frame: &[u8]) -> Result<Option<StickyDst>, &'static str> {
    let Ok(l) = edit::walk(frame) else {
        return Ok(None);
    };
    let Some(at) = l.dest_opts else {
        return Ok(None);
    };
    let hdr = ipv6opt::Packet::new_checked(&frame[at.range]).map_err(|_| "sar.sticky_malformed")?;
    let mut found = None;
    for opt in hdr.options_iter() {
        if let OptionRepr::Sticky(d) = opt.map_err(|_| "sar.sticky_malformed")? {
            if found.is_some() {
                return Err("sar.sticky_duplicate_option");
            }
            found = Some(StickyDst::parse(d.as_bytes()).map_err(|_| "sar.sticky_malformed")?);
        }
    }
    Ok(found)
}

impl DataPath<'_> {
    /// An ingress's packet from a client port to a sticky service: tunnelled
    /// to its sticky egress.
    pub(crate) fn sticky_ingress(&mut self, port: usize, frame: &mut Vec<u8>) -> Verdict {
        let src = addr_at(frame, ETH_LEN + 8);
        let dst = addr_at(frame, ETH_LEN + 24);
        let opt = match sticky_option(frame) {
            Ok(o) => o,
            Err(reason) => return Verdict::Drop(reason),
        };
        let label = flow_label(frame);
        let Some(st) = self.sticky.as_deref_mut() else {
            return self.route(port, frame);
        };
        let steer = st.steer(self.now, src, dst, label, opt.as_ref());
        crate::datapath::export_sticky(st, self.stats);
        match steer {
            Steer::Drop {
                reason,
                unreachable,
            } => {
                if unreachable {
                    self.fwd
                        .icmp_error(self.now, self.stats, ErrorKind::NoRoute, port, frame);
                }
                Verdict::Drop(reason)
            }
            Steer::Tunnel { to, kind } => self.tunnel(port, frame, to, kind),
        }
    }

    /// Forward `frame` (arrived on `port`) inside a `kind` tunnel to `to`;
    /// its own hop limit counts this hop.
    fn tunnel(
        &mut self,
        port: usize,
        frame: &mut Vec<u8>,
        to: Ipv6Addr,
        kind: TunnelKind,
    ) -> Verdict {
        let hop_limit = frame[ETH_LEN + 7];
        if hop_limit <= 1 {
            self.fwd.icmp_error(
                self.now,
                self.stats,
                ErrorKind::HopLimitExceeded,
                port,
                frame,
            );
            return Verdict::Drop("sar.hop_limit_exceeded");
        }
        let orig = frame.clone();
        frame[ETH_LEN + 7] = hop_limit - 1;
        let Some(outer) = tunnel::encapsulate(frame, kind, self.s.core.igp.address, to) else {
            return Verdict::Drop("sar.sticky_encap_failed");
        };
        *frame = outer;
        self.stats.bump(match kind {
            TunnelKind::Ipip => "sar.sticky_tunnelled_ipip",
            TunnelKind::Gre => "sar.sticky_tunnelled_gre",
        });
        let v = self.fwd.route(
            self.now,
            self.stats,
            port,
            frame,
            Some(&orig),
            kind.overhead(),
        );
        if v == Verdict::Drop("sar.packet_too_big") {
            return Verdict::Drop("sar.sticky_packet_too_big");
        }
        v
    }

    /// A tunnel ending here: its inner packet, to the server attached here
    /// or (a reply) on to the UE.
    pub(crate) fn sticky_decapsulate(&mut self, port: usize, frame: &mut Vec<u8>) -> Verdict {
        let outer_src = addr_at(frame, ETH_LEN + 8);
        let Some(st) = self.sticky.as_deref_mut() else {
            return Verdict::Drop("sar.tunnel_not_configured");
        };
        if !st.is_sar(outer_src) {
            return Verdict::Drop("sar.tunnel_from_non_sar");
        }
        let d = match tunnel::decapsulate(frame) {
            Ok(d) => d,
            Err(e) => return Verdict::Drop(e.reason()),
        };
        *frame = d.frame;
        let src = addr_at(frame, ETH_LEN + 8);
        let dst = addr_at(frame, ETH_LEN + 24);
        self.stats.bump("sar.tunnel_decapsulated");
        if st.serves(dst) {
            return self.sticky_to_server(port, frame, Some((outer_src, d.kind)));
        }
        if st.is_ingress() && st.is_sticky(src) {
            let label = flow_label(frame);
            st.learn_reply(self.now, outer_src, src, dst, label);
            crate::datapath::export_sticky(st, self.stats);
            return self.route(port, frame);
        }
        Verdict::Drop("sar.tunnel_inner_unexpected")
    }

    /// A packet for the server of a sticky service attached here.
    pub(crate) fn sticky_to_server(
        &mut self,
        port: usize,
        frame: &mut Vec<u8>,
        ingress: Option<(Ipv6Addr, TunnelKind)>,
    ) -> Verdict {
        let src = addr_at(frame, ETH_LEN + 8);
        let dst = addr_at(frame, ETH_LEN + 24);
        let label = flow_label(frame);
        let len = frame.len() - ETH_LEN;
        let Some(st) = self.sticky.as_deref_mut() else {
            return self.route(port, frame);
        };
        let flow = ports(frame).map(|(proto, sport, dport)| FlowId {
            anycast: dst,
            proto,
            server_port: dport,
            client_port: sport,
            label,
        });
        let r = match flow {
            Some(id) => st.to_server(self.now, id, src, ingress, len),
            None => {
                // Not TCP or UDP: counted, not followed.
                st.to_server_unflowed(dst, len);
                ToServer::Known
            }
        };
        crate::datapath::export_sticky(st, self.stats);
        if let ToServer::Moved { anchor } = r {
            if edit::rewrite_addr(frame, AddrField::Src, IpAddr::V6(anchor)).is_err() {
                return Verdict::Drop("sar.sticky_edit_failed");
            }
        }
        self.route(port, frame)
    }

    /// A reply from the server of a sticky service attached here.
    pub(crate) fn sticky_from_server(&mut self, port: usize, frame: &mut Vec<u8>) -> Verdict {
        let src = addr_at(frame, ETH_LEN + 8);
        let dst = addr_at(frame, ETH_LEN + 24);
        let len = frame.len() - ETH_LEN;
        let has_option = match sticky_option(frame) {
            Ok(o) => o.is_some(),
            Err(reason) => return Verdict::Drop(reason),
        };
        let Some(st) = self.sticky.as_deref_mut() else {
            return self.route(port, frame);
        };
        let flow = match ports(frame) {
            Some((proto, sport, dport)) => {
                st.from_server(self.now, src, proto, sport, dst, dport, len)
            }
            None => {
                st.from_server_unflowed(src, len);
                None
            }
        };
        let option_addr = st.option_addr();
        let Some(cfg) = st.egress().cloned() else {
            return self.route(port, frame);
        };
        crate::datapath::export_sticky(st, self.stats);
        let orig = frame.clone();
        if let Some(f) = flow {
            if f.current != dst
                && edit::rewrite_addr(frame, AddrField::Dst, IpAddr::V6(f.current)).is_err()
            {
                return Verdict::Drop("sar.sticky_edit_failed");
            }
        }
        if cfg.insert_option && !has_option {
            let data = StickyDst::egress(IpAddr::V6(option_addr)).to_bytes();
            let inserted = data.ok().and_then(|d| {
                let opt = OptionRepr::new(OptionType::Sticky, &d).ok()?;
                edit::insert_dest_opts(frame, &[opt]).ok()
            });
            match inserted {
                Some(()) => self.stats.bump("sar.sticky_option_inserted"),
                None => self.stats.bump("sar.sticky_option_not_inserted"),
            }
        }
        if let (true, Some((ingress, kind))) = (cfg.tunnel_replies, flow.and_then(|f| f.ingress)) {
            return self.tunnel(port, frame, ingress, kind);
        }
        let growth = frame.len().saturating_sub(orig.len());
        self.fwd
            .route(self.now, self.stats, port, frame, Some(&orig), growth)
    }
}
