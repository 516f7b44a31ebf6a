//! A keyed nSFF (`[[nsff.key]]`): what it sends is sealed, and forged,
//! unsigned, replayed or not-from-the-NR fabric messages are dropped and
//! counted (SPEC §0; docs/security.md).

use smoltcp::time::Instant;
use svcroute_stack::shim::Outbox;
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::auth::{self, KeyConfig, Keyring, Reject, SENDER_NR};
use svcroute_stack::wire::gff::{self, MessageType, PathId};
use svcroute_stack::wire::nr::{self, Ids, PathUpdate, Tlvs, UpdateKind, ALL_NSFFS};

use super::model::{local_config, Model};
use super::Proxy;
use crate::config::NsffConfig;
use crate::transport::{Endpoint, TransportConfig};

const EPOCH: u64 = 1_700_000_000_000_000;
const SECRET: &[u8] = b"fabric secret";

fn keyed_cfg() -> NsffConfig {
    NsffConfig {
        nsff_id: 1,
        health_interval_ms: 0,
        keys: vec![KeyConfig {
            id: 1,
            secret: hex(SECRET),
            hex: true,
        }],
        epoch_us: EPOCH,
        ..local_config()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn ring(sender: u16) -> Keyring {
    Keyring::new(vec![(1, SECRET.to_vec())], sender, EPOCH)
}

fn all_nodes_update() -> Vec<u8> {
    let ids = [ALL_NSFFS];
    let repr = nr::Repr::PathUpdate(PathUpdate {
        kind: UpdateKind::NsffIds,
        ids: Ids::new(&ids).unwrap(),
        tlvs: Tlvs::EMPTY,
    });
    let mut b = vec![0; repr.buffer_len()];
    repr.emit(&mut b);
    b
}

fn at(ms: i64) -> Instant {
    Instant::from_millis(ms)
}

fn gff(frames: &mut Outbox) -> Vec<(MessageType, Vec<u8>)> {
    frames
        .drain()
        .filter_map(|(_, _, f)| {
            let p = gff::Packet::new_checked(&f[gff::GFF_OFFSET..]).ok()?;
            Some((p.msg_type(), p.payload().to_vec()))
        })
        .collect()
}

/// "ALL NODES" path updates: only a sealed, fresh one from the NR counts.
#[test]
fn path_updates_must_be_sealed_fresh_and_from_the_nr() {
    let mut p = Proxy::new(&keyed_cfg(), None).unwrap();
    let mut stats = Counters::default();
    let ours = PathId::ZERO.with(2);
    let t = MessageType::PathUpdate;
    let plain = all_nodes_update();
    p.handle_gff(at(0), &mut stats, t, ours, &plain);
    let mut forged = plain.clone();
    nr::seal(
        &mut Keyring::new(vec![(1, b"guess".to_vec())], SENDER_NR, EPOCH),
        0,
        t,
        &mut forged,
    );
    p.handle_gff(at(1), &mut stats, t, ours, &forged);
    let mut from_nsff = plain.clone();
    nr::seal(&mut ring(2), 0, t, &mut from_nsff);
    p.handle_gff(at(2), &mut stats, t, ours, &from_nsff);
    assert_eq!(stats.get("nsff.path_updates"), 0);
    let mut good = plain;
    nr::seal(&mut ring(SENDER_NR), 3000, t, &mut good);
    p.handle_gff(at(3), &mut stats, t, ours, &good);
    assert_eq!(stats.get("nsff.path_updates"), 1);
    // The captured update played again later: dropped.
    p.handle_gff(at(5000), &mut stats, t, ours, &good);
    assert_eq!(stats.get("nsff.path_updates"), 1);
    for (r, n) in [
        ("drop.nsff.nr_auth_missing", 1),
        ("drop.nsff.nr_auth_bad", 1),
        ("drop.nsff.nr_not_from_nr", 1),
        ("drop.nsff.nr_replayed", 1),
    ] {
        assert_eq!(stats.get(r), n, "{r}");
    }
    assert_eq!(Reject::Replayed.suffix(), "replayed");
}

/// Registrations (and path requests) leave sealed: a keyed NR takes them.
#[test]
fn registrations_are_sealed() {
    let mut p = Proxy::new(&keyed_cfg(), None).unwrap();
    let (mut io, mut out, mut stats) = (Model::default(), Outbox::default(), Counters::default());
    p.handle_timeout(at(0), &mut out, &mut stats);
    p.poll(at(0), &mut io, &mut out, &mut stats);
    let regs: Vec<_> = gff(&mut out)
        .into_iter()
        .filter(|(t, _)| *t == MessageType::Registration)
        .collect();
    assert!(!regs.is_empty());
    let mut nr_ring = ring(SENDER_NR);
    for (t, payload) in &regs {
        assert_eq!(
            nr::authenticate(&nr_ring, *t, payload).map(|s| s.map(|x| x.0)),
            Ok(Some(1))
        );
        assert_eq!(nr::open(&mut nr_ring, 0, *t, payload), Ok(()));
    }
}

/// Transport packets: an OPEN from another nSFF is taken only sealed,
/// once; unsealed, forged or replayed copies are dropped and counted.
#[test]
fn transport_packets_must_be_sealed_and_fresh() {
    let mut p = Proxy::new(&keyed_cfg(), None).unwrap();
    let mut stats = Counters::default();
    let ours = PathId::ZERO.with(2);
    // nSFF 2's transport, its packets sealed by nSFF 2's ring.
    let me2 = nr::NsffId::new(2).unwrap();
    let mut ep2 = Endpoint::new(me2, TransportConfig::default(), 0).unwrap();
    let txn = ep2.open(at(0), ours, PathId::ZERO.with(5)).unwrap();
    ep2.send(
        at(0),
        txn,
        b"GET / HTTP/1.1\r\nHost: www.local.example\r\n\r\n",
    )
    .unwrap();
    let open = ep2.poll_transmit().unwrap();
    let plain = open.payload.clone();
    let ty = u8::from(open.msg_type);
    p.handle_gff(at(1), &mut stats, open.msg_type, ours, &plain);
    // The trailer has no marker: an unsealed packet longer than a trailer
    // reads as a bad (or unknown-key) one.
    assert_eq!(
        stats.get("drop.nsff.transport_auth_bad")
            + stats.get("drop.nsff.transport_auth_unknown_key"),
        1
    );
    let bad_before = stats.get("drop.nsff.transport_auth_bad");
    let mut forged = plain.clone();
    Keyring::new(vec![(1, b"guess".to_vec())], 2, EPOCH).seal_trailer(0, ty, &mut forged);
    p.handle_gff(at(2), &mut stats, open.msg_type, ours, &forged);
    assert_eq!(stats.get("drop.nsff.transport_auth_bad"), bad_before + 1);
    p.handle_gff(at(2), &mut stats, open.msg_type, ours, &[0; 5]);
    assert_eq!(stats.get("drop.nsff.transport_auth_missing"), 1);
    assert_eq!(p.endpoint().stats().accepted, 0);
    let mut good = plain;
    ring(2).seal_trailer(0, ty, &mut good);
    p.handle_gff(at(3), &mut stats, open.msg_type, ours, &good);
    assert_eq!(p.endpoint().stats().accepted, 1);
    // Replayed once the transaction is done and forgotten or not: dropped
    // before the transport sees it.
    p.handle_gff(at(4), &mut stats, open.msg_type, ours, &good);
    assert_eq!(stats.get("drop.nsff.transport_replayed"), 1);
    assert_eq!(p.endpoint().stats().accepted, 1);
    // What this nSFF sends back is sealed under its own sender ID.
    let mut out = Outbox::default();
    p.flush_transport(&mut out);
    let sent = gff(&mut out);
    assert!(!sent.is_empty());
    let mut r2 = ring(2);
    for (t, payload) in sent {
        let body = r2.unseal_trailer(0, u8::from(t), &payload).unwrap();
        assert_eq!(body.len() + auth::TRAILER_LEN, payload.len());
    }
}
