//! Bad input for the RFC 8677 chain over real TAPs (issue 3): malformed GFF,
//! NR and transport packets injected onto the fabric, and floods of unique
//! names against small table caps. The lab is `common::chain`'s, plus
//! kernel hosts of this file's own. Needs root and python3 (skips without
//! root).
//!
//! ```text
//!   client (kernel) 10.0.1.10 ── cli ── nsff1 ── n1 ── f1 ── fab ── f2 ── n2 ── nsff2 ── sfs ── sf2
//!                                       10.0.1.1       │ │   │    │                 10.0.2.1     10.0.2.10
//!                                                      │ nrs ── nr (10.0.9.1)
//!                           inj (kernel, no addresses): eth0 on fab, eth1 on nrs, eth2 on n1
//!                           orch (kernel, 10.0.9.10 on nrs): the NR's REST (flood lab only)
//! ```
//!
//! Links: f1 → NR 0, NR → f1 1, f1 → nSFF1 2, nSFF1 → f1 3, f2 → nSFF2 4,
//! nSFF2 → f2 5, f1 → f2 10, f2 → f1 11.
//!
//! **Malformed packets.** `inj` writes Ethernet frames the test builds byte
//! by byte (not with our codecs) from an AF_PACKET socket, each addressed
//! to one node's MAC: to a switch on `fab` (GFF framing it must drop, or
//! packets it forwards to the NR or an nSFF whose payload is wrong), or
//! straight to the NR on `nrs` and to nSFF1 on `n1` (framing the endpoints
//! must drop themselves, since a switch would have dropped it first). One
//! frame at a time; after each, every watched counter of the nodes involved
//! must have changed by exactly the case's expectation, so each drop
//! counter asserted is that frame's. Afterwards nothing was installed (NR
//! names, discovery rows and link states, nSFF1's cache, nSFF2's
//! transactions) and a 100 kB body still comes through byte-exact.
//!
//! **Floods.** With NR `max_names` 64 / `max_discovery` 32 and nSFF1's cache
//! `capacity` 32 / `max_pending` 16: 256 REST registrations, 256 requests
//! for unknown names, 63 for registered names nobody serves, and 64 at once
//! while the NR is cut off. Each table stops at its cap, each refusal is
//! counted by reason and answered with its HTTP status, the nodes' RSS stays
//! within a bound, and the known name still answers.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use serde_json::Value;
use svcroute_stack::wire::nr::hash_fqdn;

use common::chain::{counter, curl, lab_file, nr_names, wait_ok, Opts, CHAIN};
use common::{lab_name, named, root_or_skip, text, wait_until, Lab, INJ_HOST, SEND_PY};

/// One lab of this file at a time (seven node processes each, and the
/// flood's memory figures should not include another lab's load).
static LABS: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    LABS.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------
// Malformed packets
// ---------------------------------------------------------------------------

/// Link IDs into the endpoints (the bit a switch matches to deliver).
const TO_NR: u8 = 0;
const TO_NSFF1: u8 = 2;
const TO_NSFF2: u8 = 4;
/// A link ID no switch port has.
const NOWHERE: u8 = 200;

/// GFF types (SPEC §1.1).
const DATA: u8 = 1;
const NACK: u8 = 2;
const REGISTRATION: u8 = 3;
const PATH_REQUEST: u8 = 4;
const PATH_RESPONSE: u8 = 5;
const PATH_UPDATE: u8 = 6;
const LINK_EVENT: u8 = 7;

/// Where a frame goes in: the host's leg and the node port it is addressed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// `fab` to f1 (whose ports lead to nSFF1, the NR and f2).
    F1,
    /// `fab` to f2 (whose other port leads to nSFF2).
    F2,
    /// `nrs`, straight to the NR.
    Nr,
    /// `n1`, straight to nSFF1.
    Nsff1,
}

impl Via {
    /// `inj`'s interface, the node, and the node's port index on that segment.
    const fn leg(self) -> (&'static str, &'static str, usize) {
        match self {
            Self::F1 => ("eth0", "f1", 2),
            Self::F2 => ("eth0", "f2", 0),
            Self::Nr => ("eth1", "nr", 0),
            Self::Nsff1 => ("eth2", "nsff1", 0),
        }
    }

    /// The nodes whose counters may change. Frames to a switch are
    /// forwarded on; frames straight to an endpoint reach only it.
    const fn watched(self) -> &'static [&'static str] {
        match self {
            Self::F1 | Self::F2 => &["f1", "f2", "nr", "nsff1", "nsff2"],
            Self::Nr => &["nr"],
            Self::Nsff1 => &["nsff1"],
        }
    }
}

/// One malformed frame and what it must do: `node:counter` → change.
struct Case {
    what: &'static str,
    via: Via,
    /// From the IPv6 header on (the Ethernet header is added when sent).
    ipv6: Vec<u8>,
    expect: BTreeMap<String, i64>,
}

fn case(what: &'static str, via: Via, ipv6: Vec<u8>, expect: &[(&str, i64)]) -> Case {
    Case {
        what,
        via,
        ipv6,
        expect: expect.iter().map(|(k, d)| ((*k).to_owned(), *d)).collect(),
    }
}

/// A pathID with bits `links` (bit i: octet i / 8, mask 0x80 >> i % 8).
fn path(links: &[u8]) -> [u8; 32] {
    let mut p = [0; 32];
    for &l in links {
        p[usize::from(l / 8)] |= 0x80 >> (l % 8);
    }
    p
}

/// An IPv6 header (version 6, next header 253, addresses = `addrs`) and
/// `payload`; the payload length field is the payload's.
fn ipv6(addrs: &[u8; 32], hop_limit: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0x60, 0, 0, 0];
    b.extend_from_slice(&u16::try_from(payload.len()).unwrap().to_be_bytes());
    b.extend_from_slice(&[253, hop_limit]);
    b.extend_from_slice(addrs);
    b.extend_from_slice(payload);
    b
}

/// A GFF header (`len_bits`, `ty`), the pathID octets `path` and `payload`.
fn gff(len_bits: u16, ty: u8, path: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut b = ((len_bits << 4) | u16::from(ty & 0x0f))
        .to_be_bytes()
        .to_vec();
    b.extend_from_slice(path);
    b.extend_from_slice(payload);
    b
}

/// A well-framed GFF packet of type `ty` over `links`, hop limit 64.
fn msg(ty: u8, links: &[u8], payload: &[u8]) -> Vec<u8> {
    let p = path(links);
    ipv6(&p, 64, &gff(256, ty, &p, payload))
}

fn tlv(ty: u8, value: &[u8]) -> Vec<u8> {
    let mut b = vec![ty, u8::try_from(value.len()).unwrap()];
    b.extend_from_slice(value);
    b
}

/// Registration (type 3): flags, hash, nSFF ID, TLVs.
fn registration(flags: u8, hash: u16, nsff: u8, tlvs: &[u8]) -> Vec<u8> {
    let mut b = vec![flags];
    b.extend_from_slice(&hash.to_be_bytes());
    b.push(nsff);
    b.extend_from_slice(tlvs);
    b
}

/// A registration (or, `flags` 1, deregistration) of `fqdn` with its FQDN TLV.
fn register_name(flags: u8, fqdn: &str, nsff: u8) -> Vec<u8> {
    registration(flags, hash_fqdn(fqdn), nsff, &tlv(1, fqdn.as_bytes()))
}

/// A found path response for `fqdn`: serving nSFF, forward and reverse links.
fn found(fqdn: &str, serving: u8, fwd: &[u8], rev: &[u8]) -> Vec<u8> {
    let mut b = hash_fqdn(fqdn).to_be_bytes().to_vec();
    b.extend_from_slice(&[serving, 0x80]); // len 8 words, reserved 0
    b.extend_from_slice(&path(fwd));
    b.extend(tlv(3, &path(rev)));
    b.extend(tlv(1, fqdn.as_bytes()));
    b
}

/// RFC 1071 checksum of `b` (odd length padded with a zero octet).
fn rfc1071(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Transport data (type 1): seq, checksum, window, txn, flags, then `rest`
/// (OPEN fields and data). The checksum is right unless `bad_checksum`.
fn data(window: u16, txn: u32, flags: u8, rest: &[u8], bad_checksum: bool) -> Vec<u8> {
    let mut b = 7u32.to_be_bytes().to_vec();
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&window.to_be_bytes());
    b.extend_from_slice(&txn.to_be_bytes());
    b.push(flags);
    b.extend_from_slice(rest);
    let sum = rfc1071(&b) ^ u16::from(bad_checksum);
    b[4..6].copy_from_slice(&sum.to_be_bytes());
    b
}

/// Transport NACK (type 2): txn, count, reserved, then `seqs` as given.
fn nack(txn: u32, count: u16, reserved: u16, seqs: &[u32]) -> Vec<u8> {
    let mut b = txn.to_be_bytes().to_vec();
    b.extend_from_slice(&count.to_be_bytes());
    b.extend_from_slice(&reserved.to_be_bytes());
    for s in seqs {
        b.extend_from_slice(&s.to_be_bytes());
    }
    b
}

/// A transaction of nSFF1 (origin 1) that nSFF2 never saw.
const STRANGER_TXN: u32 = 0x01ab_cdef;

/// A 254-octet name of valid labels: one over the 253 limit.
fn overlong_fqdn() -> String {
    let l63 = "a".repeat(63);
    let name = format!("{l63}.{l63}.{l63}.{}", "b".repeat(62));
    assert_eq!(name.len(), 254);
    name
}

/// Frames a switch drops (f1 on `fab`): GFF framing.
fn switch_cases() -> Vec<Case> {
    let nr = path(&[TO_NR]);
    let reg = register_name(0, "evil.example", 1);
    let mut v4 = msg(REGISTRATION, &[TO_NR], &reg);
    v4[0] = 0x40; // version 4 behind an IPv6 EtherType
    let mut long = msg(REGISTRATION, &[TO_NR], &reg);
    long[4..6].copy_from_slice(&2000u16.to_be_bytes()); // payload past the frame
    vec![
        case(
            "GFF shorter than its length/type and pathID",
            Via::F1,
            ipv6(&nr, 64, &gff(256, REGISTRATION, &nr[..8], &[])),
            &[("f1:drop.fwd.malformed_gff", 1)],
        ),
        case(
            "GFF length 12 bits (not whole octets)",
            Via::F1,
            ipv6(&nr, 64, &gff(12, REGISTRATION, &nr, &reg)),
            &[("f1:drop.fwd.malformed_gff", 1)],
        ),
        case(
            "GFF length 128 bits (not a 256-bit pathID)",
            Via::F1,
            ipv6(&nr, 64, &gff(128, REGISTRATION, &nr[..16], &reg)),
            &[("f1:drop.fwd.malformed_gff", 1)],
        ),
        case(
            "GFF type 0",
            Via::F1,
            msg(0, &[TO_NR], &reg),
            &[("f1:drop.fwd.unknown_type", 1)],
        ),
        case(
            "GFF type 15",
            Via::F1,
            msg(15, &[TO_NR, TO_NSFF1], &reg),
            &[("f1:drop.fwd.unknown_type", 1)],
        ),
        case(
            "GFF pathID differs from IPv6 source ‖ destination",
            Via::F1,
            ipv6(&nr, 64, &gff(256, REGISTRATION, &path(&[TO_NSFF1]), &reg)),
            &[("f1:drop.fwd.pathid_mismatch", 1)],
        ),
        case(
            "IPv6 EtherType, version 4",
            Via::F1,
            v4,
            &[("f1:drop.fwd.malformed_ipv6", 1)],
        ),
        case(
            "IPv6 payload length past the frame",
            Via::F1,
            long,
            &[("f1:drop.fwd.malformed_ipv6", 1)],
        ),
        case(
            "hop limit 1 (would leave with 0)",
            Via::F1,
            ipv6(&nr, 1, &gff(256, REGISTRATION, &nr, &reg)),
            &[("f1:drop.fwd.hop_limit", 1)],
        ),
        case(
            "pathID of a link no port has",
            Via::F1,
            msg(REGISTRATION, &[NOWHERE], &reg),
            &[("f1:drop.fwd.no_match", 1)],
        ),
    ]
}

/// NR messages the switch forwards and the NR refuses.
fn nr_cases() -> Vec<Case> {
    let to_nr = |ty, payload: Vec<u8>| msg(ty, &[TO_NR], &payload);
    let long = overlong_fqdn();
    let c = |what, ty, payload, counter| case(what, Via::F1, to_nr(ty, payload), &[(counter, 1)]);
    vec![
        c(
            "registration cut after 3 octets",
            REGISTRATION,
            vec![0, 0x12, 0x34],
            "nr:drop.nr.malformed",
        ),
        c(
            "registration with reserved flag bits",
            REGISTRATION,
            register_name(0x80, "evil.example", 1),
            "nr:drop.nr.malformed",
        ),
        c(
            "registration for nSFF ID 255",
            REGISTRATION,
            register_name(0, "evil.example", 255),
            "nr:drop.nr.malformed",
        ),
        c(
            "registration whose FQDN TLV claims 200 octets and has 5",
            REGISTRATION,
            registration(
                0,
                hash_fqdn("evil.example"),
                1,
                &[1, 200, b'e', b'v', b'i', b'l', b'.'],
            ),
            "nr:drop.nr.malformed",
        ),
        c(
            "registration of a 254-octet FQDN",
            REGISTRATION,
            register_name(0, &long, 1),
            "nr:drop.nr.malformed",
        ),
        c(
            "registration of a 64-octet label",
            REGISTRATION,
            register_name(0, &format!("{}.example", "c".repeat(64)), 1),
            "nr:drop.nr.malformed",
        ),
        c(
            "registration of an upper-case (non-canonical) FQDN",
            REGISTRATION,
            register_name(0, "Evil.Example", 1),
            "nr:drop.nr.malformed",
        ),
        c(
            "registration whose FQDN does not hash to its hash field",
            REGISTRATION,
            registration(
                0,
                hash_fqdn("evil.example") ^ 1,
                1,
                &tlv(1, b"evil.example"),
            ),
            "nr:drop.nr.hash_mismatch",
        ),
        c(
            "registration from nSFF 9 (not in the fabric)",
            REGISTRATION,
            register_name(0, "evil.example", 9),
            "nr:drop.nr.unknown_nsff",
        ),
        c(
            "deregistration of a name never registered",
            REGISTRATION,
            register_name(1, "ghost.example", 2),
            "nr:drop.nr.not_registered",
        ),
        c(
            "path request cut after 2 octets",
            PATH_REQUEST,
            vec![0x3f, 0xe3],
            "nr:drop.nr.malformed",
        ),
        c(
            "path request whose TLV overruns the message",
            PATH_REQUEST,
            vec![0x3f, 0xe3, 1, 1, 9, b'x'],
            "nr:drop.nr.malformed",
        ),
        c(
            "path request from nSFF 7 (not in the fabric)",
            PATH_REQUEST,
            vec![0x3f, 0xe3, 7],
            "nr:drop.nr.unknown_requester",
        ),
        c(
            "path response sent to the NR",
            PATH_RESPONSE,
            found("www.example2.com", 2, &[3, 10, 4], &[5, 11, 2]),
            "nr:drop.nr.unexpected_type",
        ),
        c(
            "path update sent to the NR",
            PATH_UPDATE,
            vec![0, 1, 2],
            "nr:drop.nr.unexpected_type",
        ),
        c(
            "transport data sent to the NR",
            DATA,
            data(8, STRANGER_TXN, 0, b"x", false),
            "nr:drop.nr.unexpected_type",
        ),
        c(
            "link event cut after 1 octet",
            LINK_EVENT,
            vec![10],
            "nr:drop.nr.malformed",
        ),
        c(
            "link event for link 99 (not in the fabric)",
            LINK_EVENT,
            vec![99, 0],
            "nr:drop.nr.unknown_link",
        ),
        c(
            "link event with state 7 for link 10",
            LINK_EVENT,
            vec![10, 7],
            "nr:drop.nr.bad_link_state",
        ),
    ]
}

/// NR messages to nSFF1 (through f1) it must drop or ignore.
fn nsff_nr_cases() -> Vec<Case> {
    let to_nsff1 = |ty, payload: Vec<u8>| msg(ty, &[TO_NSFF1], &payload);
    let mut rsv = found("www.example2.com", 2, &[3, 10, 4], &[5, 11, 2]);
    rsv[3] = 0x81; // reserved bits
    let mut five_words = found("www.example2.com", 2, &[3, 10, 4], &[5, 11, 2]);
    five_words[3] = 0x50;
    let malformed = |what, ty, payload| {
        case(
            what,
            Via::F1,
            to_nsff1(ty, payload),
            &[("nsff1:drop.nsff.nr_malformed", 1)],
        )
    };
    vec![
        malformed(
            "path response cut after 3 octets",
            PATH_RESPONSE,
            vec![0x3f, 0xe3, 2],
        ),
        malformed("path response with reserved bits set", PATH_RESPONSE, rsv),
        malformed(
            "path response of 5 words (only 0 or 8)",
            PATH_RESPONSE,
            five_words,
        ),
        malformed("path update cut after 1 octet", PATH_UPDATE, vec![0]),
        malformed(
            "path update: count 200, 2 IDs",
            PATH_UPDATE,
            vec![0, 200, 2, 1],
        ),
        case(
            "path response for a name nobody asked",
            Via::F1,
            to_nsff1(
                PATH_RESPONSE,
                found("nobody.example", 2, &[3, 10, 4], &[5, 11, 2]),
            ),
            &[
                ("nsff1:nsff.path_responses", 1),
                ("nsff1:cache.unmatched", 1),
            ],
        ),
        case(
            "path update for nSFF 77, which serves nothing cached",
            Via::F1,
            to_nsff1(PATH_UPDATE, vec![0, 1, 77]),
            &[("nsff1:nsff.path_updates", 1), ("nsff1:cache.updates", 1)],
        ),
        case(
            "path update of unknown type 9 naming nSFF 2",
            Via::F1,
            to_nsff1(PATH_UPDATE, vec![9, 1, 2]),
            &[("nsff1:nsff.path_updates", 1), ("nsff1:cache.updates", 1)],
        ),
        case(
            "registration sent to an nSFF",
            Via::F1,
            to_nsff1(REGISTRATION, register_name(0, "evil.example", 1)),
            &[("nsff1:drop.nsff.gff_unexpected_type", 1)],
        ),
        case(
            "link event sent to an nSFF",
            Via::F1,
            to_nsff1(LINK_EVENT, vec![10, 0]),
            &[("nsff1:drop.nsff.gff_unexpected_type", 1)],
        ),
    ]
}

/// Transport packets to nSFF2 (through f2) it must reject.
fn transport_cases() -> Vec<Case> {
    let to_nsff2 = |ty, payload: Vec<u8>| msg(ty, &[TO_NSFF2], &payload);
    let rejected = |what, ty, payload, counter| {
        case(
            what,
            Via::F2,
            to_nsff2(ty, payload),
            &[("nsff2:nsff.transport_rejected", 1), (counter, 1)],
        )
    };
    let mut rev40 = vec![1, 40];
    rev40.extend_from_slice(&path(&[5, 11, 2]));
    let mut rev16 = vec![1, 16];
    rev16.extend_from_slice(&[0xa5; 16]);
    let mut cut = data(8, STRANGER_TXN, 0, b"", false);
    cut.truncate(8);
    vec![
        rejected("data cut after 8 octets", DATA, cut, "nsff2:txns.malformed"),
        rejected(
            "data with a wrong checksum",
            DATA,
            data(8, STRANGER_TXN, 0, b"x", true),
            "nsff2:txns.bad_checksum",
        ),
        rejected(
            "data with window 0",
            DATA,
            data(0, STRANGER_TXN, 0, b"x", false),
            "nsff2:txns.malformed",
        ),
        rejected(
            "data with unknown flag bits",
            DATA,
            data(8, STRANGER_TXN, 0x80, b"x", false),
            "nsff2:txns.malformed",
        ),
        rejected(
            "OPEN whose reverse pathID (40 octets) is cut short",
            DATA,
            data(8, STRANGER_TXN, 1, &rev40, false),
            "nsff2:txns.malformed",
        ),
        rejected(
            "OPEN with a 16-octet reverse pathID",
            DATA,
            data(8, STRANGER_TXN, 1, &rev16, false),
            "nsff2:txns.malformed",
        ),
        rejected(
            "RESPONSE for a transaction nSFF2 did not open",
            DATA,
            data(8, STRANGER_TXN, 2, b"x", false),
            "nsff2:txns.malformed",
        ),
        rejected(
            "data (not OPEN) for an unknown transaction",
            DATA,
            data(8, STRANGER_TXN, 0, b"x", false),
            "nsff2:txns.unknown_txn",
        ),
        rejected(
            "NACK cut after 6 octets",
            NACK,
            nack(STRANGER_TXN, 0, 0, &[])[..6].to_vec(),
            "nsff2:txns.malformed",
        ),
        rejected(
            "NACK: count 3, one sequence number",
            NACK,
            nack(STRANGER_TXN, 3, 0, &[1]),
            "nsff2:txns.malformed",
        ),
        rejected(
            "NACK with reserved bits",
            NACK,
            nack(STRANGER_TXN, 0, 0x8000, &[]),
            "nsff2:txns.malformed",
        ),
        rejected(
            "NACK with trailing octets",
            NACK,
            nack(STRANGER_TXN, 0, 0, &[9]),
            "nsff2:txns.malformed",
        ),
        rejected(
            "NACK for an unknown transaction",
            NACK,
            nack(STRANGER_TXN, 1, 0, &[1]),
            "nsff2:txns.unknown_txn",
        ),
    ]
}

/// GFF framing the endpoints drop themselves (sent past the switches).
fn endpoint_framing_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (via, node, own, not_ours) in [
        (Via::Nr, "nr", TO_NR, "nr:drop.nr.gff_not_for_us"),
        (
            Via::Nsff1,
            "nsff1",
            TO_NSFF1,
            "nsff1:drop.nsff.gff_not_for_us",
        ),
    ] {
        let p = path(&[own]);
        let ty = if via == Via::Nr {
            REGISTRATION
        } else {
            PATH_UPDATE
        };
        let payload = if via == Via::Nr {
            register_name(0, "evil.example", 1)
        } else {
            vec![0, 1, ALL_NODES]
        };
        let mut long = msg(ty, &[own], &payload);
        long[4..6].copy_from_slice(&2000u16.to_be_bytes());
        let key = |c: &str| format!("{node}:{c}");
        v.extend([
            case(
                "IPv6 payload length past the frame",
                via,
                long,
                &[(&key("drop.gff_truncated"), 1)],
            ),
            case(
                "GFF length 12 bits",
                via,
                ipv6(&p, 64, &gff(12, ty, &p, &payload)),
                &[(&key("drop.gff_malformed"), 1)],
            ),
            case(
                "GFF shorter than its pathID",
                via,
                ipv6(&p, 64, &gff(256, ty, &p[..20], &[])),
                &[(&key("drop.gff_malformed"), 1)],
            ),
            case(
                "GFF pathID differs from the addresses",
                via,
                ipv6(&p, 64, &gff(256, ty, &path(&[own, 9]), &payload)),
                &[(&key("drop.gff_path_mismatch"), 1)],
            ),
            case(
                "GFF without the endpoint's link bit",
                via,
                msg(ty, &[NOWHERE], &payload),
                &[(not_ours, 1)],
            ),
        ]);
    }
    v
}

/// Path update nSFF ID "ALL NODES" (purge everything). The frames that
/// carry it here must be dropped before the update is read: had one got
/// through, nSFF1's purged cache would show among the changed counters.
const ALL_NODES: u8 = 255;

/// Counters a case may change or must leave alone: every drop (but the
/// switches' `fwd.not_gff`, which IPv6 chatter of `inj`'s kernel fed before
/// the test turned IPv6 off there) and what installing or acting on a
/// message would count.
/// Not the hello and registration-refresh counters, which tick by time.
const WATCHED: &[&str] = &[
    "nr.deregistrations",
    "nr.requests",
    "nr.responses_found",
    "nr.responses_not_found",
    "nr.link_down",
    "nr.link_up",
    "nr.updates_nsffs",
    "nr.updates_links",
    "nr.updates_all_nodes",
    "nsff.path_responses",
    "nsff.path_updates",
    "nsff.cache_flushed",
    "nsff.transport_rejected",
    "nsff.txns_accepted",
    "nsff.egress_requests",
];

fn watched(k: &str) -> bool {
    (k.starts_with("drop.") && k != "drop.fwd.not_gff") || WATCHED.contains(&k)
}

/// `node:counter` for the watched counters of `nodes`, with nSFF1's cache
/// (`cache.*`) and nSFF2's transport (`txns.*`) figures.
fn snapshot(lab: &Lab, nodes: &[&str]) -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    for &node in nodes {
        for (k, v) in named(&lab.stats(node)) {
            if watched(&k) {
                m.insert(format!("{node}:{k}"), v as i64);
            }
        }
    }
    let mut add = |node: &str, prefix: &str, v: &Value| {
        for (k, v) in v.as_object().into_iter().flatten() {
            if let Some(n) = v.as_i64() {
                m.insert(format!("{node}:{prefix}.{k}"), n);
            }
        }
    };
    if nodes.contains(&"nsff1") {
        let c = lab.ctl("nsff1", &["cache"]);
        add("nsff1", "cache", &c["stats"]);
        add(
            "nsff1",
            "cache",
            &serde_json::json!({"entries": c["entries"], "pending": c["pending"]}),
        );
    }
    if nodes.contains(&"nsff2") {
        let t = lab.ctl("nsff2", &["txns"]);
        add("nsff2", "txns", &t["stats"]);
        add("nsff2", "txns", &serde_json::json!({"live": t["live"]}));
    }
    m
}

/// Every key whose value differs, with its change.
fn changes(before: &BTreeMap<String, i64>, after: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let d = after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0);
            (d != 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// The MAC of `node`'s port `port` as 12 hex digits.
fn mac_hex(lab: &Lab, node: &str, port: usize) -> String {
    let ports = lab.ctl(node, &["ports"]);
    let mac = ports[port]["mac"]
        .as_str()
        .unwrap_or_else(|| panic!("{node} port {port}: {ports}"));
    let hex: String = mac.chars().filter(char::is_ascii_hexdigit).collect();
    assert_eq!(hex.len(), 12, "{mac}");
    hex
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Send `c`'s frame and check that exactly its expectations changed.
#[track_caller]
fn run_case(lab: &Lab, macs: &BTreeMap<&str, String>, c: &Case) {
    let (iface, node, _) = c.via.leg();
    let nodes = c.via.watched();
    let before = snapshot(lab, nodes);
    // Ethernet: the node's port MAC, a source `send.py` fills in, IPv6.
    let frame = format!("{}00000000000086dd{}", macs[node], hex(&c.ipv6));
    let out = lab.exec("inj", 20, &["python3", "-c", SEND_PY, iface, &frame]);
    assert!(out.status.success(), "{}: send.py: {}", c.what, text(&out));
    let want = &c.expect;
    let mut got = BTreeMap::new();
    // The last node on the way counts last: wait for every expected change.
    let arrived = wait_until(20, || {
        got = changes(&before, &snapshot(lab, nodes));
        want.iter().all(|(k, d)| got.get(k) >= Some(d))
    });
    assert!(arrived, "{}: wanted {want:?}, changed {got:?}", c.what);
    assert_eq!(&got, want, "{}: exactly these counters change", c.what);
    eprintln!("ok: {:<60} {want:?}", c.what);
}

/// Malformed GFF, NR and transport packets injected onto the fabric are
/// each dropped and counted by reason at the node they reach, install
/// nothing, and leave the chain serving byte-exact.
#[test]
fn malformed_fabric_packets_are_dropped_counted_and_install_nothing() {
    if !root_or_skip() {
        return;
    }
    let _one = one_at_a_time();
    let name = lab_name('b', 'm');
    let opts = Opts {
        extra: INJ_HOST.to_owned(),
        ..Opts::default()
    };
    let lab = Lab::up(&name, &lab_file(&name, &opts));
    // Malformed IPv6 must reach the TAPs: a pure L2 bridge.
    lab.disable_bridge_netfilter();
    // `inj` sends only what the test writes: no router solicitations or
    // MLD reports of its kernel among the counted frames.
    let out = lab.exec(
        "inj",
        10,
        &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
    );
    assert!(out.status.success(), "{}", text(&out));
    wait_ok(&lab, 30, "www.example2.com", "sf2");
    let macs: BTreeMap<&str, String> = [Via::F1, Via::F2, Via::Nr, Via::Nsff1]
        .into_iter()
        .map(|v| {
            let (_, node, port) = v.leg();
            (node, mac_hex(&lab, node, port))
        })
        .collect();

    let names = nr_names(&lab);
    assert_eq!(names.get("www.example2.com"), Some(&vec![2]), "{names:?}");
    let discovery = lab.ctl("nr", &["discovery"])["discovery"].clone();
    let links = fabric_model(&lab);
    let cache = lab.ctl("nsff1", &["cache"])["entries"].clone();
    assert_eq!(cache, 1, "www.example2.com cached at nSFF1");
    // The warm-up's transaction lingers a while to answer duplicates; the
    // cases watch the transaction count, so let it go first.
    let idle = wait_until(30, || lab.ctl("nsff2", &["txns"])["live"] == 0);
    assert!(idle, "nSFF2 still has transactions");

    let cases: Vec<Case> = [
        switch_cases(),
        nr_cases(),
        nsff_nr_cases(),
        transport_cases(),
        endpoint_framing_cases(),
    ]
    .into_iter()
    .flatten()
    .collect();
    for c in &cases {
        run_case(&lab, &macs, c);
    }
    eprintln!(
        "{} malformed frames, each dropped where expected",
        cases.len()
    );

    // Nothing was installed, nothing purged, no link changed state.
    assert_eq!(nr_names(&lab), names, "NR registration table");
    assert_eq!(lab.ctl("nr", &["discovery"])["discovery"], discovery);
    assert_eq!(fabric_model(&lab), links, "NR's fabric model");
    assert_eq!(lab.ctl("nsff1", &["cache"])["entries"], cache);
    assert_eq!(lab.ctl("nsff2", &["txns"])["live"], 0);
    for node in CHAIN {
        lab.assert_node_alive(node);
    }
    // The chain still serves, every byte (the SF's byte k is k % 251).
    let r = curl(&lab, "www.example2.com", "/bytes/100000");
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(r.instance().as_deref(), Some("sf2"), "{}", r.head);
    assert_eq!(r.body.len(), 100_000);
    assert!(r
        .body
        .iter()
        .enumerate()
        .all(|(k, &b)| b == (k % 251) as u8));
    lab.down();
}

// ---------------------------------------------------------------------------
// Floods of unique names
// ---------------------------------------------------------------------------

const MAX_NAMES: usize = 64;
const MAX_DISCOVERY: usize = 32;
const CACHE_CAPACITY: usize = 32;
const MAX_PENDING: usize = 16;
/// How much a node's resident set may grow over all the floods. The tables
/// above hold a few kB; nSFF1's 64 client connections at once take two
/// 64 KiB socket buffers each, 8 MiB its allocator keeps and reuses (five
/// rounds plateau after the second). This catches a table or a buffer per
/// name that nobody bounds, not allocator noise.
const RSS_BOUND_KIB: u64 = 16 * 1024;

/// The REST client: a kernel host on the NR's segment.
const ORCH_HOST: &str = r#"
[[host]]
name = "orch"
[[host.iface]]
segment = "nrs"
addrs = ["10.0.9.10/24"]
"#;

/// `rest.py FQDN...`: `POST /register {"fqdn", "nsff_id": 2}` at the NR
/// for each, one connection each; prints {status: {count, bodies}} as JSON
/// (at most 3 distinct bodies per status).
const REST_PY: &str = r#"
import http.client, json, sys, time
out = {}
for n in sys.argv[1:]:
    for attempt in range(50):
        try:
            c = http.client.HTTPConnection("10.0.9.1", 8080, timeout=20)
            c.request("POST", "/register", body=json.dumps({"fqdn": n, "nsff_id": 2}),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            status, body = r.status, r.read().decode()
            c.close()
            break
        except ConnectionRefusedError:
            time.sleep(0.1)
    else:
        status, body = 0, "refused"
    e = out.setdefault(str(status), {"count": 0, "bodies": []})
    e["count"] += 1
    if body not in e["bodies"] and len(e["bodies"]) < 3:
        e["bodies"].append(body)
print(json.dumps(out))
"#;

/// `http.py seq|par NAME...`: `GET /` with `Host: NAME` at nSFF1, one
/// connection per name (error answers close it); `seq` one after another,
/// `par` all connections and requests first, then every answer. Prints
/// {status: {count, bodies}} as JSON (status 0: no HTTP answer).
const HTTP_PY: &str = r#"
import json, socket, sys, time
mode, names = sys.argv[1], sys.argv[2:]
def connect():
    for attempt in range(50):
        try:
            return socket.create_connection(("10.0.1.1", 80), timeout=60)
        except ConnectionRefusedError:
            time.sleep(0.1)
    raise SystemExit("nSFF1 refused every connection")
def ask(s, name):
    s.sendall(f"GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
def answer(s):
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return status, body.decode("latin-1").strip()
if mode == "seq":
    results = []
    for n in names:
        s = connect()
        ask(s, n)
        results.append(answer(s))
else:
    conns = [connect() for _ in names]
    for s, n in zip(conns, names):
        ask(s, n)
    results = [answer(s) for s in conns]
out = {}
for status, body in results:
    e = out.setdefault(str(status), {"count": 0, "bodies": []})
    e["count"] += 1
    if body not in e["bodies"] and len(e["bodies"]) < 3:
        e["bodies"].append(body)
print(json.dumps(out))
"#;

/// Answers by status: how many, and up to three distinct bodies.
type Tally = BTreeMap<u16, (u64, Vec<String>)>;

fn tally(out: &std::process::Output, what: &str) -> Tally {
    assert!(out.status.success(), "{what}: {}", text(out));
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: {e}: {}", text(out)));
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(k, e)| {
            let bodies = e["bodies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|b| b.as_str().map(str::to_owned))
                .collect();
            (
                k.parse().expect("status"),
                (e["count"].as_u64().unwrap_or(0), bodies),
            )
        })
        .collect()
}

/// The counts of a tally, by status.
fn counts(t: &Tally) -> BTreeMap<u16, u64> {
    t.iter().map(|(s, (n, _))| (*s, *n)).collect()
}

/// Assert that every body answered with `status` contains `text`.
#[track_caller]
fn assert_bodies(t: &Tally, status: u16, text: &str) {
    let bodies = &t[&status].1;
    assert!(
        !bodies.is_empty() && bodies.iter().all(|b| b.contains(text)),
        "{status} bodies {bodies:?}, wanted {text:?}"
    );
}

/// `count` names `<prefix><i>.flood.example` whose hashes are distinct and
/// none of `taken`'s (a collision would be refused as such, not by the cap).
fn distinct_names(prefix: &str, count: usize, taken: &mut BTreeSet<u16>) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}{i}.flood.example"))
        .filter(|n| taken.insert(hash_fqdn(n)))
        .take(count)
        .collect()
}

/// `node`'s resident set in KiB.
fn rss_kib(lab: &Lab, node: &str) -> u64 {
    let pid = lab.assert_node_alive(node);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS for {node} ({pid})"))
}

fn json_len(v: &Value) -> usize {
    v.as_array().map_or(0, Vec::len)
}

/// Floods of distinct names: registrations beyond `max_names`, unknown
/// names, registered names beyond the cache and discovery caps, and more
/// names at once than `max_pending`. Each table stops at its cap, refusals
/// are counted by reason and answered with a status, memory stays bounded.
#[test]
fn name_floods_stop_at_the_caps_with_counted_refusals() {
    if !root_or_skip() {
        return;
    }
    let _one = one_at_a_time();
    let name = lab_name('b', 'f');
    let opts = Opts {
        nsff1: "[node.config.cache]\ncapacity = 32\nmax_pending = 16\n",
        nr: "max_names = 64\nmax_discovery = 32\n",
        nr_rest_port: 8080,
        extra: ORCH_HOST.to_owned(),
        ..Opts::default()
    };
    let lab = Lab::up(&name, &lab_file(&name, &opts));
    wait_ok(&lab, 30, "www.example2.com", "sf2");
    let mut taken = BTreeSet::from([hash_fqdn("www.example2.com")]);

    // Warm-up: a few of each kind of request, so the memory baseline has
    // the buffers every request uses.
    let warm = distinct_names("w", 16, &mut taken);
    let mut args = vec!["python3", "-c", HTTP_PY, "seq"];
    args.extend(warm.iter().map(String::as_str));
    let t = tally(&lab.exec("client", 120, &args), "warm-up");
    assert_eq!(counts(&t), BTreeMap::from([(502, 16)]), "{t:?}");
    wait_ok(&lab, 30, "www.example2.com", "sf2");
    let nodes = ["nr", "nsff1", "nsff2", "f1", "f2"];
    let rss0: BTreeMap<&str, u64> = nodes.iter().map(|n| (*n, rss_kib(&lab, n))).collect();
    // Printed per phase for the record; only the total is asserted.
    let report = |phase: &str| {
        let now: Vec<String> = nodes
            .iter()
            .map(|n| format!("{n} {}", rss_kib(&lab, n)))
            .collect();
        eprintln!("RSS KiB after {phase}: {}", now.join(", "));
    };

    // 1. Registrations over REST, 4 × max_names: the table fills, then 507.
    let names_full0 = counter(&lab, "nr", "drop.nr.names_full");
    let flood = distinct_names("r", 4 * MAX_NAMES, &mut taken);
    let mut args = vec!["python3", "-c", REST_PY];
    args.extend(flood.iter().map(String::as_str));
    let t = tally(&lab.exec("orch", 300, &args), "REST flood");
    let added = MAX_NAMES - 1; // www.example2.com holds one row
    assert_eq!(
        counts(&t),
        BTreeMap::from([(201, added as u64), (507, (4 * MAX_NAMES - added) as u64)]),
        "{t:?}"
    );
    assert_bodies(&t, 507, "nr.names_full");
    let registered = nr_names(&lab);
    assert_eq!(registered.len(), MAX_NAMES, "{registered:?}");
    assert_eq!(
        counter(&lab, "nr", "drop.nr.names_full") - names_full0,
        (4 * MAX_NAMES - added) as u64
    );
    // The first `added` of the flood got in (the REST flood is in order).
    let accepted: Vec<&String> = flood
        .iter()
        .filter(|n| registered.contains_key(*n))
        .collect();
    assert_eq!(accepted, flood.iter().take(added).collect::<Vec<_>>());
    report("the REST flood");

    // 2. Unknown names, 4 × max_names, one after another: each a 502 and
    // counted; nothing cached, nothing recorded at the NR.
    let unknown0 = counter(&lab, "nsff1", "nsff.unknown_name");
    let discovery0 = json_len(&lab.ctl("nr", &["discovery"])["discovery"]);
    let unknown = distinct_names("u", 4 * MAX_NAMES, &mut taken);
    let mut args = vec!["python3", "-c", HTTP_PY, "seq"];
    args.extend(unknown.iter().map(String::as_str));
    let t = tally(&lab.exec("client", 300, &args), "unknown names");
    assert_eq!(
        counts(&t),
        BTreeMap::from([(502, 4 * MAX_NAMES as u64)]),
        "{t:?}"
    );
    assert_bodies(&t, 502, "unknown service name");
    assert_eq!(
        counter(&lab, "nsff1", "nsff.unknown_name") - unknown0,
        4 * MAX_NAMES as u64
    );
    let c = lab.ctl("nsff1", &["cache"]);
    assert_eq!(c["entries"], 1, "only www.example2.com: {c}");
    assert_eq!(c["pending"], 0, "{c}");
    let d = lab.ctl("nr", &["discovery"]);
    assert_eq!(
        json_len(&d["discovery"]),
        discovery0,
        "not-found records nothing: {d}"
    );
    report("the unknown names");

    // 3. The registered flood names, each once: nSFF1's cache stops at its
    // capacity (LRU evictions), the NR's discovery table at max_discovery
    // (refusals counted); nSFF2 serves none of them: 502 from there.
    let evicted0 = lab.ctl("nsff1", &["cache"])["stats"]["evicted"]
        .as_u64()
        .unwrap();
    let disc_full0 = counter(&lab, "nr", "drop.nr.discovery_full");
    let no_sf0 = counter(&lab, "nsff2", "nsff.egress_no_sf");
    let mut args = vec!["python3", "-c", HTTP_PY, "seq"];
    args.extend(accepted.iter().map(|s| s.as_str()));
    let t = tally(&lab.exec("client", 300, &args), "registered names");
    assert_eq!(counts(&t), BTreeMap::from([(502, added as u64)]), "{t:?}");
    assert_bodies(&t, 502, "no local service function");
    assert_eq!(
        counter(&lab, "nsff2", "nsff.egress_no_sf") - no_sf0,
        added as u64
    );
    let c = lab.ctl("nsff1", &["cache"]);
    assert_eq!(c["entries"], CACHE_CAPACITY, "{c}");
    // 1 + 63 names resolved into 32 places.
    assert_eq!(
        c["stats"]["evicted"].as_u64().unwrap() - evicted0,
        (1 + added - CACHE_CAPACITY) as u64,
        "{c}"
    );
    let d = lab.ctl("nr", &["discovery"]);
    assert_eq!(json_len(&d["discovery"]), MAX_DISCOVERY, "{d}");
    // At least one refusal per name beyond the table (a retried request
    // is refused again).
    let refused = counter(&lab, "nr", "drop.nr.discovery_full") - disc_full0;
    assert!(
        refused >= (discovery0 + added - MAX_DISCOVERY) as u64,
        "drop.nr.discovery_full +{refused}"
    );
    report("the registered names");

    // 4. 4 × max_pending names at once while the NR is cut off: exactly
    // max_pending wait for it (and time out: 504), the rest are refused at
    // once (503), and the pending table never grows past its cap. Twice:
    // the timed-out names must have left the table, and the second round's
    // connections reuse the first's memory.
    for round in 0..2 {
        let refused0 = counter(&lab, "nsff1", "nsff.resolve_refused");
        let timeout0 = counter(&lab, "nsff1", "nsff.nr_timeout");
        lab.verb("link", &["nrs", "down"]);
        let at_once = distinct_names(&format!("p{round}x"), 4 * MAX_PENDING, &mut taken);
        let mut args = vec!["python3", "-c", HTTP_PY, "par"];
        args.extend(at_once.iter().map(String::as_str));
        let (t, peak) = std::thread::scope(|s| {
            let flood = s.spawn(|| lab.exec("client", 120, &args));
            let mut peak = 0;
            while !flood.is_finished() {
                let p = lab.ctl("nsff1", &["cache"])["pending"].as_u64().unwrap();
                peak = peak.max(p);
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            (flood.join().expect("flood thread"), peak)
        });
        lab.verb("link", &["nrs", "up"]);
        let t = tally(&t, "names at once");
        let pending = MAX_PENDING as u64;
        assert_eq!(
            counts(&t),
            BTreeMap::from([(503, 3 * pending), (504, pending)]),
            "round {round}: {t:?}"
        );
        assert_bodies(&t, 503, "too many names being resolved");
        assert_bodies(&t, 504, "name resolver did not answer");
        assert_eq!(peak, pending, "round {round}: pending at most max_pending");
        assert_eq!(lab.ctl("nsff1", &["cache"])["pending"], 0);
        assert_eq!(
            counter(&lab, "nsff1", "nsff.resolve_refused") - refused0,
            3 * pending
        );
        assert_eq!(
            counter(&lab, "nsff1", "nsff.nr_timeout") - timeout0,
            pending
        );
        report(&format!("{} names at once, round {round}", at_once.len()));
    }

    // Memory: bounded growth over all floods.
    let rss1: BTreeMap<&str, u64> = nodes.iter().map(|n| (*n, rss_kib(&lab, n))).collect();
    for n in nodes {
        eprintln!(
            "RSS {n}: {} KiB after warm-up, {} KiB after the floods",
            rss0[n], rss1[n]
        );
        assert!(
            rss1[n] < rss0[n] + RSS_BOUND_KIB,
            "{n} grew from {} to {} KiB",
            rss0[n],
            rss1[n]
        );
    }
    // The tables are still at their caps, and the known name answers.
    assert_eq!(nr_names(&lab).len(), MAX_NAMES);
    let r = wait_ok(&lab, 30, "www.example2.com", "sf2");
    assert_eq!(r.status, 200);
    let c = lab.ctl("nsff1", &["cache"]);
    assert!(
        c["entries"].as_u64().unwrap() <= CACHE_CAPACITY as u64,
        "{c}"
    );
    for node in CHAIN {
        lab.assert_node_alive(node);
    }
    lab.down();
}

/// The NR's fabric model (`ctl links`) without `heard_ms`, when each nSFF
/// was last heard: that moves with every registration.
fn fabric_model(lab: &Lab) -> Value {
    let mut v = lab.ctl("nr", &["links"]);
    if let Some(nsffs) = v["nsffs"].as_array_mut() {
        for n in nsffs {
            if let Some(o) = n.as_object_mut() {
                o.remove("heard_ms");
            }
        }
    }
    v
}
