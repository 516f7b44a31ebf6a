//! IPv6 fragmentation of the SAR's own IGP datagrams (RFC 8200 §4.5).
//!
//! smoltcp 0.14 neither fragments nor reassembles IPv6, and an IGP datagram
//! may be up to 16,000 octets (one LSA: a services part holds up to 64
//! instances). So the driver sends an IGP datagram that does not fit the
//! link MTU as hand-built fragments ([`fragment_udp`]), and reassembles
//! fragments addressed to it on SAR ports ([`Reassembler`]) before handing
//! the datagram to the core. Only that layout is accepted: the Fragment
//! header right after the fixed IPv6 header, carrying UDP.
//!
//! ```text
//!   Transmit (too big) ─► fragment_udp ─► [Eth|IPv6 nh=44|Frag off=0 M=1|UDP hdr|data…]
//!                                         [Eth|IPv6 nh=44|Frag off=n M=0|…data]
//!   fragments to us ─► Reassembler::push ─► (src, UDP datagram) once whole
//! ```
//!
//! Reassembly is bounded: at most [`MAX_SLOTS`] datagrams at once, each at
//! most 65,535 octets, each dropped [`TIMEOUT`] after its first fragment.
//! Overlapping fragments discard the whole datagram (RFC 5722).

use std::net::Ipv6Addr;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpProtocol, UdpPacket, UdpRepr};

use crate::icmp::{ETH_LEN, IPV6_LEN};

/// Octets of the Fragment header.
pub const FRAG_LEN: usize = 8;
/// Datagrams reassembled at once, at most.
pub const MAX_SLOTS: usize = 16;
/// How long a datagram may take to arrive whole.
pub const TIMEOUT: Duration = Duration::from_secs(3);
/// Hop limit of the fragments we send (link-local traffic between SARs).
const HOP_LIMIT: u8 = 64;

/// Ethernet frames (MACs zero) carrying the UDP datagram `payload` from
/// `src:sport` to `dst:dport` in fragments of at most `mtu` IP octets, with
/// fragment identification `id`. Empty if `mtu` leaves no room.
pub fn fragment_udp(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    sport: u16,
    dport: u16,
    payload: &[u8],
    mtu: usize,
    id: u32,
) -> Vec<Vec<u8>> {
    let repr = UdpRepr {
        src_port: sport,
        dst_port: dport,
    };
    let mut udp = vec![0; repr.header_len() + payload.len()];
    repr.emit(
        &mut UdpPacket::new_unchecked(&mut udp[..]),
        &IpAddress::Ipv6(src),
        &IpAddress::Ipv6(dst),
        payload.len(),
        |p| p.copy_from_slice(payload),
        &ChecksumCapabilities::default(),
    );
    let per = mtu.saturating_sub(IPV6_LEN + FRAG_LEN) / 8 * 8;
    if per == 0 || udp.len() > 0xffff {
        return Vec::new();
    }
    udp.chunks(per)
        .enumerate()
        .map(|(i, chunk)| {
            let offset = i * per;
            let more = offset + chunk.len() < udp.len();
            let mut f = vec![0; ETH_LEN + IPV6_LEN + FRAG_LEN + chunk.len()];
            f[12..14].copy_from_slice(&[0x86, 0xdd]);
            let ip = &mut f[ETH_LEN..];
            ip[0] = 0x60;
            // At most mtu ≤ 65,535 octets.
            ip[4..6].copy_from_slice(&((FRAG_LEN + chunk.len()) as u16).to_be_bytes());
            ip[6] = IpProtocol::Ipv6Frag.into();
            ip[7] = HOP_LIMIT;
            ip[8..24].copy_from_slice(&src.octets());
            ip[24..40].copy_from_slice(&dst.octets());
            let fh = &mut ip[IPV6_LEN..IPV6_LEN + FRAG_LEN];
            fh[0] = IpProtocol::Udp.into();
            // offset < 65,536 and a multiple of 8.
            let off = (offset as u16) | u16::from(more);
            fh[2..4].copy_from_slice(&off.to_be_bytes());
            fh[4..8].copy_from_slice(&id.to_be_bytes());
            ip[IPV6_LEN + FRAG_LEN..].copy_from_slice(chunk);
            f
        })
        .collect()
}

/// Why a fragment was not taken (the counter is `drop.sar.igp_<reason>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FragError {
    /// Not the one layout we take (Fragment header first, UDP inside), or
    /// lengths that do not add up.
    Unsupported,
    /// It overlaps a fragment we have: the datagram is discarded.
    Overlap,
    /// [`MAX_SLOTS`] datagrams are being reassembled already.
    Full,
    /// The reassembled datagram is not a UDP datagram with a good checksum.
    BadDatagram,
}

impl FragError {
    /// The counter, `drop.sar.igp_*`.
    pub const fn reason(self) -> &'static str {
        match self {
            Self::Unsupported => "sar.igp_fragment_unsupported",
            Self::Overlap => "sar.igp_fragment_overlap",
            Self::Full => "sar.igp_reassembly_full",
            Self::BadDatagram => "sar.igp_reassembly_bad",
        }
    }
}

/// A whole UDP datagram out of fragments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// IPv6 source.
    pub src: Ipv6Addr,
    /// IPv6 destination.
    pub dst: Ipv6Addr,
    /// UDP destination port.
    pub dport: u16,
    /// The UDP payload.
    pub payload: Vec<u8>,
}

#[derive(Debug)]
struct Slot {
    key: (Ipv6Addr, Ipv6Addr, u32),
    deadline: Instant,
    data: Vec<u8>,
    ranges: Vec<(usize, usize)>,
    total: Option<usize>,
}

/// Reassembly of fragmented UDP datagrams. See the module docs.
#[derive(Debug, Default)]
pub struct Reassembler {
    slots: Vec<Slot>,
}

impl Reassembler {
    /// Take one fragment (an Ethernet frame); the datagram once whole.
    pub fn push(&mut self, now: Instant, frame: &[u8]) -> Result<Option<Datagram>, FragError> {
        let ip = frame
            .get(ETH_LEN..ETH_LEN + IPV6_LEN + FRAG_LEN)
            .ok_or(FragError::Unsupported)?;
        if ip[6] != u8::from(IpProtocol::Ipv6Frag) || ip[IPV6_LEN] != u8::from(IpProtocol::Udp) {
            return Err(FragError::Unsupported);
        }
        let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
        let end = ETH_LEN + IPV6_LEN + plen;
        let Some(chunk) = frame.get(ETH_LEN + IPV6_LEN + FRAG_LEN..end) else {
            return Err(FragError::Unsupported);
        };
        let src = addr(&ip[8..24]);
        let dst = addr(&ip[24..40]);
        let off_m = u16::from_be_bytes([ip[IPV6_LEN + 2], ip[IPV6_LEN + 3]]);
        let offset = usize::from(off_m & !7);
        let more = off_m & 1 != 0;
        let id = u32::from_be_bytes([
            ip[IPV6_LEN + 4],
            ip[IPV6_LEN + 5],
            ip[IPV6_LEN + 6],
            ip[IPV6_LEN + 7],
        ]);
        let stop = offset + chunk.len();
        // Every fragment but the last carries a multiple of 8 octets.
        if stop > 0xffff || (more && chunk.len() % 8 != 0) || chunk.is_empty() {
            return Err(FragError::Unsupported);
        }
        let key = (src, dst, id);
        let at = match self.slots.iter().position(|s| s.key == key) {
            Some(i) => i,
            None => {
                if self.slots.len() >= MAX_SLOTS {
                    return Err(FragError::Full);
                }
                self.slots.push(Slot {
                    key,
                    deadline: now + TIMEOUT,
                    data: Vec::new(),
                    ranges: Vec::new(),
                    total: None,
                });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[at];
        let past_end = slot.total.is_some_and(|t| stop > t);
        let bad_last = !more && (slot.total.is_some() || slot.ranges.iter().any(|r| r.1 > stop));
        if slot.ranges.iter().any(|&(a, b)| offset < b && a < stop) || past_end || bad_last {
            self.slots.swap_remove(at);
            return Err(FragError::Overlap);
        }
        if slot.data.len() < stop {
            slot.data.resize(stop, 0);
        }
        slot.data[offset..stop].copy_from_slice(chunk);
        slot.ranges.push((offset, stop));
        if !more {
            slot.total = Some(stop);
        }
        let have: usize = slot.ranges.iter().map(|(a, b)| b - a).sum();
        if slot.total != Some(have) {
            return Ok(None);
        }
        let slot = self.slots.swap_remove(at);
        let udp = UdpPacket::new_checked(&slot.data[..]).map_err(|_| FragError::BadDatagram)?;
        if usize::from(udp.len()) != slot.data.len()
            || !udp.verify_checksum(&IpAddress::Ipv6(src), &IpAddress::Ipv6(dst))
        {
            return Err(FragError::BadDatagram);
        }
        Ok(Some(Datagram {
            src,
            dst,
            dport: udp.dst_port(),
            payload: udp.payload().to_vec(),
        }))
    }

    /// Drop datagrams whose time ran out; how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let before = self.slots.len();
        self.slots.retain(|s| s.deadline > now);
        before - self.slots.len()
    }

    /// When the next datagram times out.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.slots.iter().map(|s| s.deadline).min()
    }

    /// Datagrams in reassembly.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

fn addr(b: &[u8]) -> Ipv6Addr {
    let mut o = [0; 16];
    o.copy_from_slice(b);
    Ipv6Addr::from(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn frags(len: usize, mtu: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
        let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        let f = fragment_udp(a("fd00:1::1"), a("fd00:1::2"), 7470, 7470, &payload, mtu, 9);
        (payload, f)
    }

    #[test]
    fn fragments_fit_the_mtu_and_reassemble_in_any_order() {
        let (payload, mut f) = frags(5000, 1500);
        assert_eq!(f.len(), 4);
        assert!(f.iter().all(|x| x.len() - ETH_LEN <= 1500));
        f.reverse();
        let mut r = Reassembler::default();
        let t = Instant::from_secs(1);
        for x in &f[..3] {
            assert_eq!(r.push(t, x), Ok(None));
        }
        let d = r.push(t, &f[3]).unwrap().unwrap();
        assert_eq!(d.payload, payload);
        assert_eq!(
            (d.src, d.dst, d.dport),
            (a("fd00:1::1"), a("fd00:1::2"), 7470)
        );
        assert!(r.is_empty());
    }

    #[test]
    fn overlaps_corruption_timeouts_and_the_slot_cap_are_refused() {
        let t = Instant::from_secs(1);
        let (_, f) = frags(3000, 1280);
        let mut r = Reassembler::default();
        assert_eq!(r.push(t, &f[0]), Ok(None));
        assert_eq!(r.push(t, &f[0]), Err(FragError::Overlap));
        assert!(r.is_empty());
        // A flipped payload octet fails the UDP checksum.
        let mut bad = f.clone();
        let n = bad[1].len() - 1;
        bad[1][n] ^= 1;
        for x in &bad[..bad.len() - 1] {
            assert_eq!(r.push(t, x), Ok(None));
        }
        assert_eq!(r.push(t, &bad[bad.len() - 1]), Err(FragError::BadDatagram));
        // Incomplete datagrams time out.
        assert_eq!(r.push(t, &f[0]), Ok(None));
        assert_eq!(r.next_deadline(), Some(t + TIMEOUT));
        assert_eq!(r.expire(t + TIMEOUT), 1);
        // At most MAX_SLOTS at once.
        for id in 0..=MAX_SLOTS as u32 {
            let x = fragment_udp(a("fd00::1"), a("fd00::2"), 1, 2, &[0; 3000], 1280, id);
            let want = if (id as usize) < MAX_SLOTS {
                Ok(None)
            } else {
                Err(FragError::Full)
            };
            assert_eq!(r.push(t, &x[0]), want);
        }
        // Other layouts are not ours.
        let mut odd = f[0].clone();
        odd[ETH_LEN + IPV6_LEN] = 6;
        assert_eq!(r.push(t, &odd), Err(FragError::Unsupported));
        assert_eq!(r.push(t, &f[0][..60]), Err(FragError::Unsupported));
        assert!(fragment_udp(a("fd00::1"), a("fd00::2"), 1, 2, &[0; 10], 48, 1).is_empty());
    }
}
