//! SAG ⇄ SAG over UDP (SPEC §2.4, draft §3.6): a request handed to another
//! domain's SAG, and its response, can travel inside UDP on port 7471, for
//! paths that drop IPv6 extension headers. **[ext]** The encapsulation is
//! ours: the whole IPv6 packet (with its Destination Options header and
//! ROSA option) is the UDP payload, nothing else.
//!
//! ```text
//!  +------------------------------+
//!  | IPv6: SAG → SAG, next hdr 17 |
//!  +------------------------------+
//!  | UDP 7471 → 7471, checksum    |  (never zero)
//!  +------------------------------+
//!  | the inner IPv6 packet, whole |  its destination is the receiving SAG
//!  +------------------------------+
//! ```
//!
//! Frames are Ethernet frames as elsewhere in the node; the MACs are left
//! to the router.

use std::net::Ipv6Addr;

use svcroute_stack::shim::edit;

/// The UDP port of SAG ⇄ SAG encapsulation.
pub const PORT: u16 = 7471;

use smoltcp::wire::{ETHERNET_HEADER_LEN as ETH, IPV6_HEADER_LEN as IP6, UDP_HEADER_LEN as UDP};

/// Why an encapsulated datagram was refused (the `drop.sag.*` counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecapError {
    /// Lengths that do not add up, or not IPv6 inside.
    Malformed,
    /// A zero or wrong UDP checksum.
    Checksum,
    /// The inner packet is not addressed to the outer destination.
    InnerNotForUs,
}

impl DecapError {
    /// The counter.
    pub const fn reason(self) -> &'static str {
        match self {
            Self::Malformed => "sag.encap_malformed",
            Self::Checksum => "sag.encap_checksum",
            Self::InnerNotForUs => "sag.encap_inner_not_for_us",
        }
    }
}

/// Whether `frame` (an IPv6 Ethernet frame) is UDP to [`PORT`] with no
/// extension header in between.
pub fn is_encapsulated(frame: &[u8]) -> bool {
    frame.len() >= ETH + IP6 + UDP
        && frame[12..14] == [0x86, 0xdd]
        && frame[ETH + 6] == 17
        && frame[ETH + IP6 + 2..ETH + IP6 + 4] == PORT.to_be_bytes()
}

/// `frame`'s IPv6 packet inside IPv6/UDP from `src` to `dst` (hop limit
/// 64), checksum set; the Ethernet header is copied.
pub fn encapsulate(frame: &[u8], src: Ipv6Addr, dst: Ipv6Addr) -> Option<Vec<u8>> {
    let inner = frame.get(ETH..)?;
    let udp_len = u16::try_from(UDP + inner.len()).ok()?;
    let mut out = Vec::with_capacity(ETH + IP6 + UDP + inner.len());
    out.extend_from_slice(&frame[..ETH]);
    out.extend_from_slice(&[0x60, 0, 0, 0]);
    out.extend_from_slice(&udp_len.to_be_bytes());
    out.extend_from_slice(&[17, 64]);
    out.extend_from_slice(&src.octets());
    out.extend_from_slice(&dst.octets());
    out.extend_from_slice(&PORT.to_be_bytes());
    out.extend_from_slice(&PORT.to_be_bytes());
    out.extend_from_slice(&udp_len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(inner);
    let mut sum = !udp_sum(&out[ETH..]);
    if sum == 0 {
        sum = 0xffff;
    }
    out[ETH + IP6 + 6..ETH + IP6 + 8].copy_from_slice(&sum.to_be_bytes());
    Some(out)
}

/// The inner packet of an encapsulated frame, as an Ethernet frame with the
/// outer frame's Ethernet header, and the outer source.
pub fn decapsulate(frame: &[u8]) -> Result<(Vec<u8>, Ipv6Addr), DecapError> {
    if !is_encapsulated(frame) {
        return Err(DecapError::Malformed);
    }
    let payload_len = usize::from(u16::from_be_bytes([frame[ETH + 4], frame[ETH + 5]]));
    let end = ETH + IP6 + payload_len;
    let udp_len = usize::from(u16::from_be_bytes([
        frame[ETH + IP6 + 4],
        frame[ETH + IP6 + 5],
    ]));
    if end > frame.len() || udp_len != payload_len || udp_len < UDP + IP6 {
        return Err(DecapError::Malformed);
    }
    let ip = &frame[ETH..end];
    let checksum = u16::from_be_bytes([ip[IP6 + 6], ip[IP6 + 7]]);
    if checksum == 0 || udp_sum(ip) != 0xffff {
        return Err(DecapError::Checksum);
    }
    let inner = &ip[IP6 + UDP..];
    let inner_len = IP6 + usize::from(u16::from_be_bytes([inner[4], inner[5]]));
    if inner[0] >> 4 != 6 || inner_len != inner.len() {
        return Err(DecapError::Malformed);
    }
    if inner[24..40] != ip[24..40] {
        return Err(DecapError::InnerNotForUs);
    }
    let mut src = [0; 16];
    src.copy_from_slice(&ip[8..24]);
    let mut out = Vec::with_capacity(ETH + inner.len());
    out.extend_from_slice(&frame[..ETH]);
    out.extend_from_slice(inner);
    Ok((out, Ipv6Addr::from(src)))
}

/// The ones-complement sum of the UDP pseudo-header and datagram of the
/// IPv6 packet `ip` (no extension headers).
fn udp_sum(ip: &[u8]) -> u16 {
    let udp = &ip[IP6..];
    let mut pseudo = [0u8; 40];
    pseudo[..32].copy_from_slice(&ip[8..40]);
    pseudo[32..36].copy_from_slice(&(udp.len() as u32).to_be_bytes());
    pseudo[39] = 17;
    let initial = u32::from(edit::ones_complement_sum(&pseudo, 0));
    edit::ones_complement_sum(udp, initial)
}

#[cfg(test)]
mod tests {
    use super::*;

    const G1: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xab, 0, 0, 0, 0, 0, 2);
    const G2: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xff, 0, 0, 0, 0, 0, 2);

    /// An inner packet G1 → G2 (next header 59, 4 octets of payload).
    fn inner() -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
        f.extend_from_slice(&[0x60, 0, 0, 0, 0, 4, 59, 63]);
        f.extend_from_slice(&G1.octets());
        f.extend_from_slice(&G2.octets());
        f.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        f
    }

    #[test]
    fn round_trip_and_golden_header() {
        let f = inner();
        let e = encapsulate(&f, G1, G2).unwrap();
        assert_eq!(e.len(), f.len() + 48);
        assert!(is_encapsulated(&e));
        // Outer IPv6: payload 8 + 44 = 52, UDP, hop limit 64.
        assert_eq!(&e[14..22], &[0x60, 0, 0, 0, 0, 52, 17, 64]);
        // UDP 7471 → 7471, length 52.
        assert_eq!(&e[54..60], &[0x1d, 0x2f, 0x1d, 0x2f, 0, 52]);
        assert_ne!(&e[60..62], &[0, 0]);
        let (back, src) = decapsulate(&e).unwrap();
        assert_eq!(back, f);
        assert_eq!(src, G1);
    }

    #[test]
    fn refusals() {
        let f = inner();
        let e = encapsulate(&f, G1, G2).unwrap();
        let mut bad = e.clone();
        bad[70] ^= 1;
        assert_eq!(decapsulate(&bad), Err(DecapError::Checksum));
        let mut zero = e.clone();
        zero[60..62].copy_from_slice(&[0, 0]);
        assert_eq!(decapsulate(&zero), Err(DecapError::Checksum));
        assert_eq!(decapsulate(&e[..e.len() - 1]), Err(DecapError::Malformed));
        // Inner addressed elsewhere (outer to G1).
        let other = encapsulate(&f, G2, G1).unwrap();
        assert_eq!(decapsulate(&other), Err(DecapError::InnerNotForUs));
        assert!(!is_encapsulated(&f));
    }
}
