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

/// `bytes` as an NSH: parse → emit gives the same octets but for the base
/// header's unassigned bits, which origination clears; the context headers
/// rebuilt as a list parse to the same header.
pub fn nsh(bytes: &[u8]) {
    use crate::wire::nsh::{ContextHeaders, Metadata, Packet, Repr};

    let Ok(packet) = Packet::new_checked(bytes) else {
        return;
    };
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };
    assert_eq!(repr.buffer_len(), packet.header_len());
    let mut out = vec![0xa5; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    let mut want = bytes[..packet.header_len()].to_vec();
    want[0] &= !0x10;
    want[2] &= 0x0f;
    assert_eq!(out, want);

    if let Metadata::Md2(headers) = repr.metadata {
        let list: Vec<_> = headers.iter().collect();
        // NOTE(unwrap): the same headers fitted the parsed NSH.
        let rebuilt = Repr {
            metadata: Metadata::Md2(ContextHeaders::new(&list).unwrap()),
            ..repr
        };
        let mut out = vec![0x5a; rebuilt.buffer_len()];
        rebuilt.emit(&mut Packet::new_unchecked(&mut out[..]));
        let again = Repr::parse(&Packet::new_checked(&out[..]).unwrap()).unwrap();
        assert_eq!(again, repr);
    }
}

/// `bytes` as a GFF packet: parse → emit header, copy payload → same octets.
pub fn gff(bytes: &[u8]) {
    use crate::wire::gff::{Packet, Repr};

    let Ok(packet) = Packet::new_checked(bytes) else {
        return;
    };
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };
    let mut out = vec![0xa5; bytes.len()];
    let mut p = Packet::new_unchecked(&mut out[..]);
    repr.emit(&mut p);
    p.payload_mut().copy_from_slice(packet.payload());
    assert_eq!(out, bytes);
    let (src, dst) = repr.path_id.to_addrs();
    assert!(repr.check_addrs(&src, &dst).is_ok());
}

/// `bytes` as a GRE packet: parse → emit, payload, checksum → same octets
/// but for ignored reserved bits (and a checksum that covered them).
pub fn gre(bytes: &[u8]) {
    use crate::wire::gre::{Packet, Repr};

    let Ok(packet) = Packet::new_checked(bytes) else {
        return;
    };
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };
    let mut out = vec![0xa5; bytes.len()];
    let mut p = Packet::new_unchecked(&mut out[..]);
    repr.emit(&mut p);
    p.payload_mut().copy_from_slice(packet.payload());
    p.fill_checksum();
    assert!(p.verify_checksum());
    assert_eq!(p.header_len(), packet.header_len());
    let mut want = bytes.to_vec();
    want[0] &= 0x80;
    want[1] = 0;
    if repr.checksum {
        // The checksum as recomputed over the cleared bits; Reserved1 zero.
        want[4] = out[4];
        want[5] = out[5];
        want[6] = 0;
        want[7] = 0;
    }
    assert_eq!(out, want);
    assert_eq!(
        Repr::parse(&Packet::new_checked(&out[..]).unwrap()),
        Ok(repr)
    );
}

/// `bytes` as a VXLAN-GPE header: parse → emit gives the same octets but
/// for the ignored reserved fields.
pub fn vxlan_gpe(bytes: &[u8]) {
    use crate::wire::vxlan_gpe::{Packet, Repr};

    let Ok(packet) = Packet::new_checked(bytes) else {
        return;
    };
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };
    let mut out = vec![0xa5; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    let mut want = bytes[..repr.buffer_len()].to_vec();
    want[0] &= 0x3f;
    want[1] = 0;
    want[2] = 0;
    want[7] = 0;
    assert_eq!(out, want);
}

/// First octet: the GFF type (low 4 bits); the rest an NR message: parse →
/// emit gives the same octets; auth verification never panics.
pub fn nr(bytes: &[u8]) {
    use crate::wire::gff::MessageType;
    use crate::wire::nr::{verify, Repr};

    let Some((&t, payload)) = bytes.split_first() else {
        return;
    };
    let msg_type = MessageType::from(t & 0x0f);
    let _ = verify(msg_type, payload, |k| {
        (k & 1 == 0).then_some(&b"secret"[..])
    });
    let Ok(repr) = Repr::parse(msg_type, payload) else {
        return;
    };
    assert_eq!(repr.message_type(), msg_type);
    assert_eq!(repr.buffer_len(), payload.len());
    let mut out = vec![0xa5; repr.buffer_len()];
    repr.emit(&mut out);
    assert_eq!(out, payload);
}

/// First octet's low bit: transport data (0) or NACK (1); the rest the
/// packet. Data is tried as is and with its checksum fixed (so the fuzzer
/// gets past it): parse → emit gives the same octets, the checksum possibly
/// as the other ones-complement zero.
pub fn nsff(bytes: &[u8]) {
    use crate::wire::nsff::{DataPacket, DataRepr, NackPacket, NackRepr};

    let Some((&sel, rest)) = bytes.split_first() else {
        return;
    };
    if sel & 1 == 1 {
        let Ok(packet) = NackPacket::new_checked(rest) else {
            return;
        };
        let Ok(repr) = NackRepr::parse(&packet) else {
            return;
        };
        let mut out = vec![0xa5; repr.buffer_len()];
        repr.emit(&mut NackPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, rest);
        return;
    }
    let mut fixed = rest.to_vec();
    if let Ok(mut p) = DataPacket::new_checked(&mut fixed[..]) {
        p.fill_checksum();
    }
    for input in [rest, &fixed[..]] {
        let Ok(packet) = DataPacket::new_checked(input) else {
            return;
        };
        let Ok(repr) = DataRepr::parse(&packet) else {
            continue;
        };
        let data = packet.data();
        let mut out = vec![0xa5; repr.buffer_len(data.len())];
        repr.emit(&mut DataPacket::new_unchecked(&mut out[..]), data);
        assert!(DataPacket::new_unchecked(&out[..]).verify_checksum());
        assert_eq!(out[..4], input[..4]);
        assert_eq!(out[6..], input[6..]);
    }
}

/// `bytes` as an SLP message: parse → emit → parse gives the same message,
/// and re-emission is a fixed point. The octets come back exactly unless the
/// input used one of the forms RFC 2608 tolerates and we emit canonically: a
/// reply cut short after a non-zero error code (we emit more), or a non-zero
/// reserved octet in a URL entry (same length).
pub fn slp(bytes: &[u8]) {
    use crate::wire::slp;

    let _ = slp::frame_len(bytes);
    let _ = slp::Header::peek(bytes);
    let Ok(m) = slp::Message::parse(bytes) else {
        return;
    };
    let out = m.to_bytes();
    assert_eq!(out.len(), m.buffer_len());
    let again = slp::Message::parse(&out).expect("a re-emitted message parses");
    assert_eq!(again, m);
    assert_eq!(again.to_bytes(), out);
    let short_error = m.body().error().is_some_and(|e| !e.is_ok());
    assert!(out.len() == bytes.len() || (short_error && out.len() > bytes.len()));
}

/// `bytes` as an SLPv1 message: a request gets a whole SLPv1 reply with
/// its XID and VER_NOT_SUPPORTED; nothing else is answered; never a panic.
pub fn slp_v1(bytes: &[u8]) {
    if let Some(r) = crate::wire::slp::v1::ver_not_supported(bytes) {
        assert_eq!(r[0], crate::wire::slp::v1::VERSION);
        assert_eq!(usize::from(u16::from_be_bytes([r[2], r[3]])), r.len());
        assert_eq!(r[10..12], bytes[10..12]);
        assert_eq!(r[12..14], [0, 9]);
    }
}

/// `bytes` as an SLP attribute list and as a tag list: what parses re-emits
/// unchanged, and a structured copy formats to a list that parses back.
pub fn slp_attr(bytes: &[u8]) {
    use crate::wire::slp::{AttrList, Attribute, TagList};

    let Ok(s) = core::str::from_utf8(bytes) else {
        return;
    };
    if let Ok(l) = AttrList::parse(s) {
        assert_eq!(l.to_string(), s);
        let _ = l.check_types();
        let copy: Vec<_> = l
            .attributes()
            .iter()
            .map(|a| Attribute::new(a.tag(), a.values().to_vec()).expect("parsed values format"))
            .collect();
        let canonical = AttrList::new(copy).expect("canonical form is no longer");
        let back = AttrList::parse(&canonical.to_string()).expect("canonical form parses");
        for (a, b) in back.attributes().iter().zip(l.attributes()) {
            assert_eq!((a.tag(), a.values()), (b.tag(), b.values()));
        }
    }
    if let Ok(t) = TagList::parse(s) {
        assert_eq!(t.as_raw(), s);
    }
}

/// `bytes` as a selector octet, a search filter and an attribute list: no
/// panic, and `(!(!f))` matches exactly where `f` does.
pub fn slp_filter(bytes: &[u8]) {
    use crate::wire::slp::{AttrList, Filter, Predicate};

    let Some((&split, rest)) = bytes.split_first() else {
        return;
    };
    let k = usize::from(split).min(rest.len());
    let (Ok(f), Ok(a)) = (
        core::str::from_utf8(&rest[..k]),
        core::str::from_utf8(&rest[k..]),
    ) else {
        return;
    };
    let _ = Predicate::parse(f);
    let Ok(filter) = Filter::parse(f) else {
        return;
    };
    let attrs = AttrList::parse(a).unwrap_or_default();
    let twice = Filter::Not(Box::new(Filter::Not(Box::new(filter.clone()))));
    assert_eq!(filter.matches(&attrs), twice.matches(&attrs));
}

/// `bytes` as ROSA option data: parse → emit gives the same octets; signing
/// a parsed message keeps it within 255 octets or fails cleanly, and the
/// signed message verifies.
pub fn rosa(bytes: &[u8]) {
    use std::net::Ipv6Addr;

    use crate::wire::auth::AuthCheck;
    use crate::wire::rosa::{Message, Packet};

    let src = Ipv6Addr::from([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    let Ok(packet) = Packet::new_checked(bytes) else {
        return;
    };
    for entry in packet.entries() {
        if entry.is_err() {
            break;
        }
    }
    let Ok(mut msg) = Message::parse(&packet) else {
        return;
    };
    assert_eq!(msg.buffer_len(), bytes.len());
    let out = msg.to_bytes().unwrap();
    assert_eq!(out, bytes);
    let _ = msg.verify(src, |k| (k & 1 == 0).then_some(&b"secret"[..]));
    for (i, name) in msg.service().into_iter().enumerate() {
        assert_eq!(name.to_string().parse().ok(), Some(name.clone()), "{i}");
        let _ = name.name_hash();
    }
    if msg.sign(2, b"secret", src).is_ok() {
        let signed = msg.to_bytes().unwrap();
        assert!(signed.len() <= 0xff);
        let again = Message::from_bytes(&signed).unwrap();
        assert_eq!(
            again.verify(src, |_| Some(&b"secret"[..])),
            AuthCheck::Good(2)
        );
    }
}

/// `bytes` as sticky-service option data: parse → emit gives the same
/// octets, and so does each sub-TLV on its own.
pub fn sticky(bytes: &[u8]) {
    use crate::wire::sticky::{StickyDst, StickyTlv, SubTlv};

    if let Ok(tlv) = SubTlv::new_checked(bytes) {
        if let Ok(repr) = StickyTlv::parse(&tlv) {
            assert_eq!(repr.buffer_len(), tlv.total_len());
            let mut out = vec![0xa5; repr.buffer_len()];
            repr.emit(&mut SubTlv::new_unchecked(&mut out[..]));
            assert_eq!(out, bytes[..tlv.total_len()]);
        }
    }
    let Ok(opt) = StickyDst::parse(bytes) else {
        return;
    };
    assert_eq!(opt.to_bytes().unwrap(), bytes);
}

/// `bytes` as an App-Metrics sub-TLV list: parse → emit gives the same
/// octets, also through serde (postcard).
pub fn appmetrics(bytes: &[u8]) {
    use crate::wire::appmetrics::AppMetrics;

    let Ok(m) = AppMetrics::parse(bytes) else {
        return;
    };
    assert_eq!(m.to_bytes(), bytes);
    let enc = postcard::to_stdvec(&m).unwrap();
    assert_eq!(postcard::from_bytes::<AppMetrics>(&enc).unwrap(), m);
}

/// `bytes` as a SAR IGP datagram: decoding never panics; a decoded message
/// re-encodes (with the same auth state) to a datagram that decodes to the
/// same message.
pub fn igp(bytes: &[u8]) {
    use crate::wire::igp::{Envelope, Message};

    let Ok(env) = Envelope::decode(bytes) else {
        return;
    };
    let _ = env.verify(|k| (k & 1 == 0).then_some(&b"secret"[..]));
    let Ok(msg) = env.message() else {
        return;
    };
    let key = env.auth.map(|a| (a.key_id, &b"secret"[..]));
    let out = msg.encode(key).unwrap();
    let (again, _) = Message::decode(&out, |_| None).unwrap();
    assert_eq!(again, msg);
}

/// `bytes` through the HTTP/1.1 decoders (`crate::http`). The first octet
/// picks the decoder (request or response), whether the response answers a
/// HEAD, small head limits (so the limit paths run) and the size of the
/// pieces the rest is fed in. Every call consumes at most what it was
/// given, `NeedMore` consumes everything, no call sequence spins without
/// consuming (at most two zero-length events in a row), an error poisons
/// the decoder (the same error again), and, when neither fails, feeding the
/// bytes whole and in pieces gives the same messages.
pub fn http(bytes: &[u8]) {
    let Some((&sel, input)) = bytes.split_first() else {
        return;
    };
    let limits = if sel & 4 != 0 {
        crate::http::Limits {
            max_head_bytes: 64,
            max_headers: 4,
            max_body_bytes: 32,
        }
    } else {
        crate::http::Limits::default()
    };
    let piece = usize::from(sel >> 3) + 1;
    let whole = http_events(sel, limits, input, input.len().max(1));
    let pieces = http_events(sel, limits, input, piece);
    if !whole.iter().chain(&pieces).any(|e| e.starts_with("error")) {
        assert_eq!(whole, pieces, "the same bytes in pieces of {piece}");
    }
}

/// The messages a decoder makes of `input` fed `piece` octets at a time:
/// heads (debug form), body bytes (joined), ends, the first error.
fn http_events(sel: u8, limits: crate::http::Limits, input: &[u8], piece: usize) -> Vec<String> {
    use crate::http::{Decoded, RequestDecoder, ResponseDecoder};

    enum Dec {
        Req(RequestDecoder),
        Resp(ResponseDecoder),
    }
    let mut dec = if sel & 1 == 0 {
        Dec::Req(RequestDecoder::new(limits))
    } else {
        let mut d = ResponseDecoder::new(limits);
        d.set_head_request(sel & 2 != 0);
        Dec::Resp(d)
    };
    let mut events: Vec<String> = Vec::new();
    let mut body: Vec<u8> = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    // Events in a row that consumed nothing.
    let mut idle_calls = 0;
    let mut need_more = false;
    loop {
        if buf.is_empty() && fed < input.len() {
            let n = piece.min(input.len() - fed);
            buf.extend_from_slice(&input[fed..fed + n]);
            fed += n;
        } else if buf.is_empty() && need_more {
            break;
        }
        let r = match &mut dec {
            Dec::Req(d) => d.decode(&buf).map(|(n, e)| {
                let e = match e {
                    Decoded::Head(h) => Decoded::Head(format!("{h:?}")),
                    Decoded::Data(b) => Decoded::Data(b),
                    Decoded::End => Decoded::End,
                    Decoded::NeedMore => Decoded::NeedMore,
                    Decoded::Closed => Decoded::Closed,
                };
                (n, e)
            }),
            Dec::Resp(d) => d.decode(&buf).map(|(n, e)| {
                let e = match e {
                    Decoded::Head(h) => Decoded::Head(format!("{h:?}")),
                    Decoded::Data(b) => Decoded::Data(b),
                    Decoded::End => Decoded::End,
                    Decoded::NeedMore => Decoded::NeedMore,
                    Decoded::Closed => Decoded::Closed,
                };
                (n, e)
            }),
        };
        let (n, ev) = match r {
            Ok(x) => x,
            Err(e) => {
                let again = match &mut dec {
                    Dec::Req(d) => d.decode(&buf).err(),
                    Dec::Resp(d) => d.decode(&buf).err(),
                };
                assert_eq!(again, Some(e), "an error poisons the decoder");
                events.push(format!("error {e:?}"));
                return events;
            }
        };
        assert!(n <= buf.len(), "consumed {n} of {}", buf.len());
        let flush = |events: &mut Vec<String>, body: &mut Vec<u8>| {
            if !body.is_empty() {
                events.push(format!("data {body:?}"));
                body.clear();
            }
        };
        need_more = matches!(ev, Decoded::NeedMore);
        match ev {
            Decoded::NeedMore => assert_eq!(n, buf.len(), "NeedMore consumes everything"),
            Decoded::Head(h) => {
                flush(&mut events, &mut body);
                events.push(h);
            }
            Decoded::Data(d) => body.extend_from_slice(d),
            Decoded::End => {
                flush(&mut events, &mut body);
                events.push("end".into());
            }
            Decoded::Closed => unreachable!("only recv says Closed"),
        }
        if n == 0 && !need_more {
            idle_calls += 1;
            assert!(idle_calls <= 2, "the decoder spins without consuming");
        } else {
            idle_calls = 0;
        }
        buf.drain(..n);
    }
    if !body.is_empty() {
        events.push(format!("data {body:?}"));
    }
    let finished = match &mut dec {
        Dec::Req(d) => d.finish(),
        Dec::Resp(d) => d.finish(),
    };
    events.push(format!("finish {finished:?}"));
    events
}
