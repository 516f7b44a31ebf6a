//! The ingress ⇄ egress tunnels of the sticky service (draft-dunbar-6man-
//! 5g-edge-compute-sticky-service §4.4, §5.1): IPv6-in-IPv6 (RFC 2473,
//! next header 41) by default, GRE (RFC 2784, next header 47, protocol
//! type 0x86DD) when the egress asks for it in its App-Metrics.
//!
//! ```text
//!  IPv6-in-IPv6                         GRE
//!  +--------------------------------+   +--------------------------------+
//!  | IPv6: ingress → egress, nh 41  |   | IPv6: ingress → egress, nh 47  |
//!  +--------------------------------+   +--------------------------------+
//!  | the inner IPv6 packet, whole   |   | GRE: flags 0, protocol 0x86DD  |
//!  +--------------------------------+   +--------------------------------+
//!                                       | the inner IPv6 packet, whole   |
//!                                       +--------------------------------+
//! ```
//!
//! The outer header copies the inner traffic class and flow label (RFC
//! 6438 lets a tunnel ingress reuse the inner label, so ECMP keeps a flow
//! on one path) and starts a fresh hop limit. No extension header is put
//! between the outer header and the tunnel payload, and none is accepted
//! there. Frames are Ethernet frames as elsewhere in the node; the router
//! fills in the MACs.

use std::net::Ipv6Addr;

use svcroute_stack::wire::gre::{self, ProtocolType};

use smoltcp::wire::{ETHERNET_HEADER_LEN as ETH, IPV6_HEADER_LEN as IP6};
/// Next header of IPv6-in-IPv6.
pub const NH_IPV6: u8 = 41;

/// Hop limit of the outer header.
pub const HOP_LIMIT: u8 = 64;

/// Which tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TunnelKind {
    /// IPv6-in-IPv6 (RFC 2473): the default.
    #[default]
    Ipip,
    /// GRE (RFC 2784) carrying IPv6.
    Gre,
}

impl TunnelKind {
    /// Octets the tunnel adds in front of the inner packet.
    pub const fn overhead(self) -> usize {
        match self {
            Self::Ipip => IP6,
            Self::Gre => IP6 + gre::HEADER_LEN,
        }
    }

    /// The value in the App-Metrics tunnel sub-TLV.
    pub const fn code(self) -> u16 {
        match self {
            Self::Ipip => 1,
            Self::Gre => 2,
        }
    }

    /// The kind a tunnel sub-TLV value names, if any.
    pub const fn from_code(code: u16) -> Option<Self> {
        match code {
            1 => Some(Self::Ipip),
            2 => Some(Self::Gre),
            _ => None,
        }
    }

    /// Its name in config and `ctl`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ipip => "ipip",
            Self::Gre => "gre",
        }
    }
}

/// Why a tunnelled packet was refused (the `drop.sar.*` counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunnelError {
    /// Lengths that do not add up, or no IPv6 packet inside.
    Malformed,
    /// A GRE header we do not take (version, RFC 1701 bits, checksum,
    /// protocol type other than IPv6).
    BadGre,
}

impl TunnelError {
    /// The counter.
    pub const fn reason(self) -> &'static str {
        match self {
            Self::Malformed => "sar.tunnel_malformed",
            Self::BadGre => "sar.tunnel_bad_gre",
        }
    }
}

/// The tunnel `frame` (an IPv6 Ethernet frame) arrives in, if its next
/// header is 41 or 47.
pub fn kind_of(frame: &[u8]) -> Option<TunnelKind> {
    if frame.len() < ETH + IP6 || frame[12..14] != [0x86, 0xdd] {
        return None;
    }
    match frame[ETH + 6] {
        NH_IPV6 => Some(TunnelKind::Ipip),
        gre::IP_PROTOCOL => Some(TunnelKind::Gre),
        _ => None,
    }
}

/// `inner` (an IPv6 Ethernet frame) inside a `kind` tunnel from `src` to
/// `dst`: a new Ethernet frame (MACs zero). `None` if `inner` is not IPv6
/// or the result would not fit an IPv6 payload length.
pub fn encapsulate(
    inner: &[u8],
    kind: TunnelKind,
    src: Ipv6Addr,
    dst: Ipv6Addr,
) -> Option<Vec<u8>> {
    if inner.len() < ETH + IP6 || inner[12..14] != [0x86, 0xdd] || inner[ETH] >> 4 != 6 {
        return None;
    }
    let packet = &inner[ETH..];
    let extra = kind.overhead() - IP6;
    let payload_len = u16::try_from(packet.len() + extra).ok()?;
    let mut f = Vec::with_capacity(ETH + kind.overhead() + packet.len());
    f.extend_from_slice(&[0; 12]);
    f.extend_from_slice(&[0x86, 0xdd]);
    // Version, traffic class and flow label from the inner header.
    f.extend_from_slice(&packet[0..4]);
    f.extend_from_slice(&payload_len.to_be_bytes());
    f.push(match kind {
        TunnelKind::Ipip => NH_IPV6,
        TunnelKind::Gre => gre::IP_PROTOCOL,
    });
    f.push(HOP_LIMIT);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    if kind == TunnelKind::Gre {
        let mut h = [0; gre::HEADER_LEN];
        gre::Repr {
            protocol_type: ProtocolType::Ipv6,
            checksum: false,
        }
        .emit(&mut gre::Packet::new_unchecked(&mut h[..]));
        f.extend_from_slice(&h);
    }
    f.extend_from_slice(packet);
    Some(f)
}

/// The inner packet of a tunnelled frame, as an Ethernet frame (the outer
/// MACs kept), with the tunnel kind and the outer source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decapsulated {
    /// The tunnel it came in.
    pub kind: TunnelKind,
    /// The outer source: the tunnel's other end.
    pub outer_src: Ipv6Addr,
    /// The inner packet in an Ethernet frame.
    pub frame: Vec<u8>,
}

/// Take the inner packet out of `frame`, which [`kind_of`] said is a
/// tunnel (the outer payload length is checked against the frame).
pub fn decapsulate(frame: &[u8]) -> Result<Decapsulated, TunnelError> {
    let kind = kind_of(frame).ok_or(TunnelError::Malformed)?;
    let payload_len = usize::from(u16::from_be_bytes([frame[ETH + 4], frame[ETH + 5]]));
    let payload = frame
        .get(ETH + IP6..ETH + IP6 + payload_len)
        .ok_or(TunnelError::Malformed)?;
    let inner = match kind {
        TunnelKind::Ipip => payload,
        TunnelKind::Gre => {
            let p = gre::Packet::new_checked(payload).map_err(|_| TunnelError::BadGre)?;
            let repr = gre::Repr::parse(&p).map_err(|_| TunnelError::BadGre)?;
            if repr.protocol_type != ProtocolType::Ipv6 {
                return Err(TunnelError::BadGre);
            }
            &payload[repr.buffer_len()..]
        }
    };
    if inner.len() < IP6 || inner[0] >> 4 != 6 {
        return Err(TunnelError::Malformed);
    }
    let inner_len = IP6 + usize::from(u16::from_be_bytes([inner[4], inner[5]]));
    if inner_len > inner.len() {
        return Err(TunnelError::Malformed);
    }
    let mut src = [0; 16];
    src.copy_from_slice(&frame[ETH + 8..ETH + 24]);
    let mut out = Vec::with_capacity(ETH + inner_len);
    out.extend_from_slice(&frame[..ETH]);
    out.extend_from_slice(&inner[..inner_len]);
    Ok(Decapsulated {
        kind,
        outer_src: Ipv6Addr::from(src),
        frame: out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inner() -> Vec<u8> {
        let mut f = vec![0; ETH + IP6 + 4];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        // Version 6, traffic class 0xab, flow label 0x12345.
        f[ETH..ETH + 4].copy_from_slice(&[0x6a, 0xb1, 0x23, 0x45]);
        f[ETH + 5] = 4;
        f[ETH + 6] = 59;
        f[ETH + 7] = 7;
        f[ETH + 8..ETH + 24].copy_from_slice(&"fd00:1::5".parse::<Ipv6Addr>().unwrap().octets());
        f[ETH + 24..ETH + 40].copy_from_slice(&"fd00:aa::1".parse::<Ipv6Addr>().unwrap().octets());
        f[ETH + IP6..].copy_from_slice(&[1, 2, 3, 4]);
        f
    }

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn ipip_golden_header_and_round_trip() {
        let i = inner();
        let f = encapsulate(&i, TunnelKind::Ipip, a("fd00:a::1"), a("fd00:b::1")).unwrap();
        assert_eq!(f.len(), i.len() + 40);
        // Version/TC/flow label copied, payload 44, next header 41, hop limit 64.
        assert_eq!(
            &f[ETH..ETH + 8],
            &[0x6a, 0xb1, 0x23, 0x45, 0x00, 44, 41, 64]
        );
        assert_eq!(&f[ETH + 8..ETH + 24], &a("fd00:a::1").octets());
        assert_eq!(&f[ETH + 24..ETH + 40], &a("fd00:b::1").octets());
        assert_eq!(&f[ETH + IP6..], &i[ETH..]);
        assert_eq!(kind_of(&f), Some(TunnelKind::Ipip));
        let d = decapsulate(&f).unwrap();
        assert_eq!(d.kind, TunnelKind::Ipip);
        assert_eq!(d.outer_src, a("fd00:a::1"));
        assert_eq!(d.frame[ETH..], i[ETH..]);
    }

    #[test]
    fn gre_golden_header_and_round_trip() {
        let i = inner();
        let f = encapsulate(&i, TunnelKind::Gre, a("fd00:a::1"), a("fd00:b::1")).unwrap();
        assert_eq!(f.len(), i.len() + 44);
        assert_eq!(f[ETH + 6], 47);
        assert_eq!(&f[ETH + IP6..ETH + IP6 + 4], &[0x00, 0x00, 0x86, 0xdd]);
        let d = decapsulate(&f).unwrap();
        assert_eq!(
            (d.kind, d.frame[ETH..].to_vec()),
            (TunnelKind::Gre, i[ETH..].to_vec())
        );
    }

    #[test]
    fn bad_tunnels_are_refused() {
        let i = inner();
        let f = encapsulate(&i, TunnelKind::Gre, a("fd00:a::1"), a("fd00:b::1")).unwrap();
        // GRE carrying NSH, GRE version 1, truncated, inner not IPv6.
        let mut nsh = f.clone();
        nsh[ETH + IP6 + 2..ETH + IP6 + 4].copy_from_slice(&[0x89, 0x4f]);
        assert_eq!(decapsulate(&nsh), Err(TunnelError::BadGre));
        let mut v1 = f.clone();
        v1[ETH + IP6 + 1] = 1;
        assert_eq!(decapsulate(&v1), Err(TunnelError::BadGre));
        let ipip = encapsulate(&i, TunnelKind::Ipip, a("fd00:a::1"), a("fd00:b::1")).unwrap();
        assert_eq!(
            decapsulate(&ipip[..ipip.len() - 1]),
            Err(TunnelError::Malformed)
        );
        let mut v4 = ipip.clone();
        v4[ETH + IP6] = 0x45;
        assert_eq!(decapsulate(&v4), Err(TunnelError::Malformed));
        let mut long_inner = ipip.clone();
        long_inner[ETH + IP6 + 5] = 200;
        assert_eq!(decapsulate(&long_inner), Err(TunnelError::Malformed));
        // Not a tunnel at all; not IPv6 inside.
        assert_eq!(kind_of(&i), None);
        let mut arp = i.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(
            encapsulate(&arp, TunnelKind::Ipip, a("fd00::1"), a("fd00::2")),
            None
        );
    }
}
