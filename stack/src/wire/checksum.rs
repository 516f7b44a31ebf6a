//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624),
//! shared by every format that carries one (GRE, the nSFF transport) and by
//! the frame surgery of [`crate::shim::edit`].

/// Incrementally update the Internet checksum `checksum` for a change of
/// `old` into `new` (RFC 1624 eqn. 3: `HC' = ~(~HC + ~m + m')`).
///
/// `old` and `new` must have the same length and start at an even offset of
/// the checksummed data (addresses and ports do); if the lengths differ, only
/// the common prefix counts.
pub fn checksum_update(checksum: u16, old: &[u8], new: &[u8]) -> u16 {
    let mut sum = u64::from(!checksum);
    for (o, n) in old.chunks(2).zip(new.chunks(2)) {
        sum += u64::from(!word(o)) + u64::from(word(n));
    }
    !fold(sum)
}

/// RFC 1071 ones-complement sum of `data` added to `initial`, folded to 16 bits.
pub fn ones_complement_sum(data: &[u8], initial: u32) -> u16 {
    // Add 64-bit big-endian words with end-around carry: 2^64 − 1 is a
    // multiple of 2^16 − 1, so folding the result gives the 16-bit sum.
    let mut sum = u64::from(initial);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        let (s, carry) = sum.overflowing_add(w);
        sum = s + u64::from(carry);
    }
    let mut tail = 0_u64;
    for pair in chunks.remainder().chunks(2) {
        tail += u64::from(word(pair));
    }
    let (s, carry) = sum.overflowing_add(tail);
    fold(s + u64::from(carry))
}

/// The big-endian 16-bit word at the start of `b` (a lone octet is the
/// high half).
pub(crate) fn word(b: &[u8]) -> u16 {
    match *b {
        [hi, lo, ..] => u16::from_be_bytes([hi, lo]),
        [hi] => u16::from(hi) << 8,
        [] => 0,
    }
}

/// Fold a ones-complement sum to 16 bits.
pub(crate) fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}
