//! Fuzz target bodies, shared by the cargo-fuzz crate in `fuzz/` and by the
//! stable tests that run them over a deterministic corpus. Each panics only
//! when a property fails.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::shim::edit::{self, AddrField};
use crate::wire::ipv6opt::{Ipv6Option, OptionRepr, OptionType, OptionsIter, Packet, Repr};

/// `bytes` as one option, an options area and a Destination Options header:
/// parse → emit gives the same octets; the canonical re-emission parses to
/// the same header.
pub fn ipv6opt(bytes: &[u8]) {
    if let Ok(opt) = Ipv6Option::new_checked(bytes) {
        if let Ok(repr) = OptionRepr::parse(&opt) {
            let mut out = vec![0xa5; repr.buffer_len()];
            repr.emit(&mut Ipv6Option::new_unchecked(&mut out[..]));
            assert_eq!(out, bytes[..repr.buffer_len()]);
        }
    }

    let mut iter = OptionsIter::new(bytes);
    let mut last = 0;
    while let Some(Ok(_)) = iter.next() {
        assert!(iter.position() > last && iter.position() <= bytes.len());
        last = iter.position();
    }

    let Ok(packet) = Packet::new_checked(bytes) else {
        return;
    };
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };
    let mut out = vec![0xa5; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    assert_eq!(out, bytes[..packet.header_len()]);

    let options: Vec<_> = repr.options().collect();
    // NOTE(unwrap): dropping padding never makes a valid header longer.
    let canonical = Repr::new(repr.next_header(), &options).unwrap();
    assert!(canonical.buffer_len() <= repr.buffer_len());
    let mut out = vec![0xa5; canonical.buffer_len()];
    canonical.emit(&mut Packet::new_unchecked(&mut out[..]));
    let again = Repr::parse(&Packet::new_checked(&out[..]).unwrap()).unwrap();
    assert_eq!(again, repr);
}

/// `bytes` as a frame through every edit: none panics; insert then strip
/// gives back the frame and the options; a rewrite and its inverse give back
/// the frame.
pub fn shim_edit(bytes: &[u8]) {
    let Some((&selector, frame)) = bytes.split_first() else {
        return;
    };
    let layout = edit::walk(frame);

    // Strip on a copy: never panics, and a strip that succeeded leaves a
    // shorter, still well-formed frame.
    let mut stripped = frame.to_vec();
    if let Ok(Some(_)) = edit::strip_dest_opts(&mut stripped) {
        // Another options header may now sit before the upper layer (garbage
        // chains can repeat them); only the one was removed.
        assert!(stripped.len() < frame.len());
        assert!(edit::walk(&stripped).is_ok());
    }

    // Insert, then strip: the original frame back, with our options.
    let data = &frame[..frame.len().min(usize::from(selector & 0x1f))];
    let sel = [selector];
    let opts = [
        OptionRepr::new(OptionType::Sticky, data).unwrap_or(OptionRepr::Pad1),
        OptionRepr::new(OptionType::from(0x3e), &sel).unwrap_or(OptionRepr::Pad1),
    ];
    let mut edited = frame.to_vec();
    match edit::insert_dest_opts(&mut edited, &opts) {
        Ok(()) => {
            let Ok(l) = &layout else {
                panic!("insert succeeded on a frame walk rejects")
            };
            match edit::strip_dest_opts(&mut edited) {
                Ok(got) => {
                    let got = got.expect("an options header after insert");
                    // Ours come last (a merge keeps other options before them).
                    let n = got.len();
                    assert!(n >= 2);
                    assert_eq!(got[n - 2].data(), data);
                    assert_eq!(got[n - 1].data(), &[selector]);
                    if l.dest_opts.is_none() {
                        assert_eq!(n, 2);
                        assert_eq!(edited, frame);
                    }
                }
                // Merged into a header that already had an option saying "discard".
                Err(edit::EditError::UnknownOption { .. }) => assert!(l.dest_opts.is_some()),
                Err(e) => panic!("strip after insert: {e}"),
            }
        }
        Err(_) => assert_eq!(edited, frame),
    }

    // Rewrite an address there and back.
    let field = if selector & 0x80 == 0 {
        AddrField::Src
    } else {
        AddrField::Dst
    };
    let new = if selector & 0x40 == 0 {
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(selector)))
    } else {
        IpAddr::V4(Ipv4Addr::new(10, 0, selector, 1))
    };
    let mut edited = frame.to_vec();
    match edit::rewrite_addr(&mut edited, field, new) {
        Ok(old) => {
            let back = edit::rewrite_addr(&mut edited, field, old).expect("rewrite back");
            assert_eq!(back, new);
            // Bit-exact, except that a checksum may come back as the other
            // ones-complement zero (0x0000 ↔ 0xFFFF) when the frame's
            // checksum was not canonical to begin with.
            for i in (0..frame.len()).filter(|&i| edited[i] != frame[i]) {
                let w = i & !1;
                let word = |b: &[u8]| b.get(w..w + 2).map(|p| u16::from_be_bytes([p[0], p[1]]));
                let (a, b) = (word(&edited), word(frame));
                assert!(
                    matches!(
                        (a, b),
                        (Some(0x0000), Some(0xffff)) | (Some(0xffff), Some(0x0000))
                    ),
                    "rewrite and back changed octet {i}"
                );
            }
        }
        Err(_) => assert_eq!(edited, frame),
    }
}
