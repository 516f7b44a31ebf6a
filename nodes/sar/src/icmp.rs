//! ICMPv6 errors the SAR's router sends (RFC 4443 §3), built by hand, and
//! the token bucket that rate-limits them (RFC 4443 §2.4 (f)).
//!
//! ```text
//!   offending IPv6 packet ──► error_frame(kind, from, quote) ──► Ethernet (MACs zero: the
//!                              (type, code, 4-octet field,        router fills them in) + IPv6
//!                               as much of the packet as fits      (from → offending source)
//!                               in 1280 octets)                    + ICMPv6, checksum filled
//! ```
//!
//! [`may_answer`] says whether an error may be sent about a packet at all:
//! never about an ICMPv6 error, nor to a multicast, unspecified or
//! loopback source.

use std::net::Ipv6Addr;

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{Icmpv6Packet, IpProtocol};
use svcroute_stack::shim::edit::{self, Fragment};

/// Octets of an Ethernet header and of the fixed IPv6 header.
pub use smoltcp::wire::{ETHERNET_HEADER_LEN as ETH_LEN, IPV6_HEADER_LEN as IPV6_LEN};
/// The IPv6 minimum MTU: no error packet is longer (RFC 4443 §2.4 (c)).
pub const MIN_MTU: usize = 1280;
/// Hop limit of the errors we originate.
pub const HOP_LIMIT: u8 = 64;

/// Which error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Type 1 code 0: no route to the destination.
    NoRoute,
    /// Type 1 code 2: a link-local source cannot leave its link.
    BeyondScope,
    /// Type 1 code 3: the next hop did not answer neighbour discovery.
    AddressUnreachable,
    /// Type 2: the packet is larger than the egress link's MTU.
    PacketTooBig {
        /// The egress MTU.
        mtu: u32,
    },
    /// Type 3 code 0: the hop limit ran out here.
    HopLimitExceeded,
    /// Type 4 code 2: an option this node does not know and must not skip
    /// (RFC 8200 §4.2 action bits `10`/`11`).
    UnrecognizedOption {
        /// Offset of the option type octet from the start of the IPv6 header.
        pointer: u32,
    },
}

impl ErrorKind {
    /// ICMPv6 type and code.
    pub const fn type_code(self) -> (u8, u8) {
        match self {
            Self::NoRoute => (1, 0),
            Self::BeyondScope => (1, 2),
            Self::AddressUnreachable => (1, 3),
            Self::PacketTooBig { .. } => (2, 0),
            Self::HopLimitExceeded => (3, 0),
            Self::UnrecognizedOption { .. } => (4, 2),
        }
    }

    /// The counter of errors of this kind sent (`sar.icmp_*`).
    pub const fn counter(self) -> &'static str {
        match self {
            Self::NoRoute => "sar.icmp_no_route",
            Self::BeyondScope => "sar.icmp_beyond_scope",
            Self::AddressUnreachable => "sar.icmp_address_unreachable",
            Self::PacketTooBig { .. } => "sar.icmp_packet_too_big",
            Self::HopLimitExceeded => "sar.icmp_time_exceeded",
            Self::UnrecognizedOption { .. } => "sar.icmp_parameter_problem",
        }
    }
}

/// Whether an ICMPv6 error may be sent about `frame` (an Ethernet frame
/// carrying IPv6), and to which source.
pub fn may_answer(frame: &[u8]) -> Option<Ipv6Addr> {
    let src = addr_at(frame, ETH_LEN + 8)?;
    if src.is_multicast() || src.is_unspecified() || src.is_loopback() {
        return None;
    }
    let layout = edit::walk(frame).ok()?;
    if layout.upper_protocol == IpProtocol::Icmpv6 && layout.fragment != Fragment::Later {
        // An error (types 0..=127) never causes another one.
        let t = *frame.get(layout.upper_offset)?;
        if t < 128 {
            return None;
        }
    }
    Some(src)
}

/// An Ethernet frame (both MACs zero) carrying the ICMPv6 error `kind` from
/// `from` about the IPv6 packet `quote` (from its IPv6 header on; as much of
/// it as keeps the error within 1280 octets). `None` if `quote` does not
/// start with an IPv6 header.
pub fn error_frame(kind: ErrorKind, from: Ipv6Addr, quote: &[u8]) -> Option<Vec<u8>> {
    let to = addr_at(quote, 8)?;
    if quote.first()? >> 4 != 6 {
        return None;
    }
    let room = MIN_MTU - IPV6_LEN - 8;
    let quoted = &quote[..quote.len().min(room)];
    let icmp_len = 8 + quoted.len();
    let mut f = vec![0; ETH_LEN + IPV6_LEN + icmp_len];
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    let ip = &mut f[ETH_LEN..];
    ip[0] = 0x60;
    // icmp_len ≤ 1240: fits u16.
    ip[4..6].copy_from_slice(&(icmp_len as u16).to_be_bytes());
    ip[6] = IpProtocol::Icmpv6.into();
    ip[7] = HOP_LIMIT;
    ip[8..24].copy_from_slice(&from.octets());
    ip[24..40].copy_from_slice(&to.octets());
    let icmp = &mut ip[IPV6_LEN..];
    let (t, c) = kind.type_code();
    icmp[0] = t;
    icmp[1] = c;
    match kind {
        ErrorKind::PacketTooBig { mtu } => icmp[4..8].copy_from_slice(&mtu.to_be_bytes()),
        ErrorKind::UnrecognizedOption { pointer } => {
            icmp[4..8].copy_from_slice(&pointer.to_be_bytes());
        }
        _ => {}
    }
    icmp[8..].copy_from_slice(quoted);
    Icmpv6Packet::new_unchecked(icmp).fill_checksum(&from, &to);
    Some(f)
}

/// A token bucket: `rate` errors per second, bursts of up to `burst`.
#[derive(Debug, Clone)]
pub struct RateLimit {
    rate: u32,
    burst: u32,
    /// Tokens in millionths.
    tokens: u64,
    last: Instant,
}

impl RateLimit {
    /// A full bucket at `now`. `rate` 0 never allows anything.
    pub fn new(rate: u32, burst: u32, now: Instant) -> Self {
        let burst = burst.max(1);
        Self {
            rate,
            burst,
            tokens: u64::from(burst) * 1_000_000,
            last: now,
        }
    }

    /// Take a token if there is one.
    pub fn allow(&mut self, now: Instant) -> bool {
        if self.rate == 0 {
            return false;
        }
        if now > self.last {
            let us = (now - self.last).total_micros();
            let cap = u64::from(self.burst) * 1_000_000;
            self.tokens = self
                .tokens
                .saturating_add(us.saturating_mul(u64::from(self.rate)))
                .min(cap);
            self.last = now;
        }
        if self.tokens >= 1_000_000 {
            self.tokens -= 1_000_000;
            true
        } else {
            false
        }
    }

    /// When the next token is there (for tests and status).
    pub fn next_token(&self) -> Option<Duration> {
        if self.rate == 0 {
            return None;
        }
        let missing = 1_000_000_u64.saturating_sub(self.tokens);
        Some(Duration::from_micros(
            missing.div_ceil(u64::from(self.rate)),
        ))
    }
}

fn addr_at(b: &[u8], at: usize) -> Option<Ipv6Addr> {
    let o: [u8; 16] = b.get(at..at + 16)?.try_into().ok()?;
    Some(Ipv6Addr::from(o))
}

#[cfg(test)]
mod tests {
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{Icmpv6Repr, Ipv6Packet, Ipv6Repr};

    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    /// An Ethernet frame with an IPv6 UDP packet of `payload` octets.
    fn udp_frame(src: &str, dst: &str, payload: usize) -> Vec<u8> {
        let mut f = vec![0; ETH_LEN + IPV6_LEN + 8 + payload];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[ETH_LEN] = 0x60;
        f[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
        f[ETH_LEN + 6] = 17;
        f[ETH_LEN + 7] = 1;
        f[ETH_LEN + 8..ETH_LEN + 24].copy_from_slice(&a(src).octets());
        f[ETH_LEN + 24..ETH_LEN + 40].copy_from_slice(&a(dst).octets());
        f
    }

    #[test]
    fn errors_parse_back_with_a_valid_checksum_and_stay_within_1280() {
        let offending = udp_frame("fd00:1::2", "fd00:2::2", 3000);
        let f = error_frame(
            ErrorKind::PacketTooBig { mtu: 1400 },
            a("fd00:1::1"),
            &offending[ETH_LEN..],
        )
        .unwrap();
        assert_eq!(f.len() - ETH_LEN, MIN_MTU);
        let ip = Ipv6Packet::new_checked(&f[ETH_LEN..]).unwrap();
        let repr = Ipv6Repr::parse(&ip).unwrap();
        assert_eq!(repr.src_addr, a("fd00:1::1"));
        assert_eq!(repr.dst_addr, a("fd00:1::2"));
        assert_eq!(repr.hop_limit, HOP_LIMIT);
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        let parsed = Icmpv6Repr::parse(
            &repr.src_addr,
            &repr.dst_addr,
            &icmp,
            &ChecksumCapabilities::default(),
        )
        .unwrap();
        match parsed {
            Icmpv6Repr::PktTooBig { mtu, header, .. } => {
                assert_eq!(mtu, 1400);
                assert_eq!(header.dst_addr, a("fd00:2::2"));
            }
            other => panic!("{other:?}"),
        }
        for (kind, tc) in [
            (ErrorKind::HopLimitExceeded, (3, 0)),
            (ErrorKind::NoRoute, (1, 0)),
            (ErrorKind::AddressUnreachable, (1, 3)),
            (ErrorKind::BeyondScope, (1, 2)),
            (ErrorKind::UnrecognizedOption { pointer: 42 }, (4, 2)),
        ] {
            let f = error_frame(kind, a("fd00:1::1"), &offending[ETH_LEN..200]).unwrap();
            assert_eq!((f[ETH_LEN + 40], f[ETH_LEN + 41]), tc);
            let ip = Ipv6Packet::new_checked(&f[ETH_LEN..]).unwrap();
            let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
            assert!(icmp.verify_checksum(&a("fd00:1::1"), &a("fd00:1::2")));
            if tc.0 == 4 {
                // The pointer of a Parameter Problem.
                assert_eq!(&f[ETH_LEN + 44..ETH_LEN + 48], &42_u32.to_be_bytes());
            }
        }
        assert_eq!(
            error_frame(ErrorKind::NoRoute, a("fd00::1"), &[0x45; 60]),
            None
        );
        assert_eq!(
            error_frame(ErrorKind::NoRoute, a("fd00::1"), &[0x60; 10]),
            None
        );
    }

    #[test]
    fn no_error_about_errors_or_to_non_unicast_sources() {
        assert_eq!(
            may_answer(&udp_frame("fd00:1::2", "fd00:2::2", 10)),
            Some(a("fd00:1::2"))
        );
        assert_eq!(may_answer(&udp_frame("ff02::1", "fd00:2::2", 10)), None);
        assert_eq!(may_answer(&udp_frame("::", "fd00:2::2", 10)), None);
        let f = udp_frame("fd00:1::2", "fd00:2::2", 10);
        let err = error_frame(ErrorKind::NoRoute, a("fd00:9::1"), &f[ETH_LEN..]).unwrap();
        assert_eq!(may_answer(&err), None);
        // An echo request (128) may be answered.
        let mut echo = err.clone();
        echo[ETH_LEN + 40] = 128;
        assert_eq!(may_answer(&echo), Some(a("fd00:9::1")));
    }

    #[test]
    fn the_bucket_allows_bursts_then_the_rate() {
        let t0 = Instant::from_secs(1);
        let mut r = RateLimit::new(10, 3, t0);
        assert!((0..3).all(|_| r.allow(t0)));
        assert!(!r.allow(t0));
        assert_eq!(r.next_token(), Some(Duration::from_millis(100)));
        assert!(!r.allow(t0 + Duration::from_millis(99)));
        assert!(r.allow(t0 + Duration::from_millis(100)));
        assert!(!r.allow(t0 + Duration::from_millis(100)));
        // Refills up to the burst, not beyond.
        let later = t0 + Duration::from_secs(60);
        assert!((0..3).all(|_| r.allow(later)));
        assert!(!r.allow(later));
        let mut off = RateLimit::new(0, 5, t0);
        assert!(!off.allow(t0));
    }
}
