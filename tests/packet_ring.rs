//! The AF_PACKET link's ring accounting against a real veth pair in a
//! namespace of its own: a receive block retired because it filled and one
//! retired by the timer, both rings wrapping with every frame arriving in
//! order, and a full transmit ring that waits, then refuses a frame it
//! counts, and sends everything it queued once the link is back. Needs root
//! (skips otherwise).
//!
//! Each test creates namespace `svp<pid><letter>` with veth `pa`/`pb`, then
//! runs itself again inside it (`ip netns exec`, marked by an environment
//! variable) so the links open there.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{root_or_skip, run_bounded, text, wait_until};
use svcroute_stack::phy::packet::{PacketLink, RingConfig};
use svcroute_stack::phy::Link;

const INNER: &str = "SVCROUTE_PACKET_RING_INNER";

/// Run test `name` again inside a fresh namespace holding veth `pa`/`pb`;
/// remove the namespace however it ends. Returns false when this already
/// is the inner run (the caller then does the work).
fn outer(name: &str, letter: char) -> bool {
    if std::env::var_os(INNER).is_some() {
        return false;
    }
    if !root_or_skip() {
        return true;
    }
    let ns = format!("svp{}{letter}", std::process::id() % 100_000);
    struct Ns(String);
    impl Drop for Ns {
        fn drop(&mut self) {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &self.0])
                .output();
        }
    }
    let _ = run_bounded(10, "ip", &["netns", "del", &ns]);
    let out = run_bounded(10, "ip", &["netns", "add", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let guard = Ns(ns.clone());
    let out = run_bounded(
        10,
        "ip",
        &[
            "-n", &ns, "link", "add", "pa", "type", "veth", "peer", "name", "pb",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new("timeout")
        .args(["-k", "5", "60", "ip", "netns", "exec", &ns])
        .arg(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(INNER, "1")
        .output()
        .expect("running the inner test");
    drop(guard);
    assert!(
        out.status.success() && text(&out).contains("1 passed"),
        "inner run of {name} failed:\n{}",
        text(&out)
    );
    true
}

/// A 1000-byte frame from `pb` carrying sequence number `seq`.
fn frame(seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; 1000];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xbb]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]); // local experimental ethertype
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[18..].iter_mut().enumerate() {
        *b = (seq as usize + i) as u8;
    }
    f
}

/// Receive until `n` frames of ours arrived (or 5 s pass); their sequence
/// numbers, each frame checked byte for byte.
fn receive(link: &mut PacketLink, n: usize) -> Vec<u32> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; link.max_frame()];
    wait_until(5, || {
        while let Some(len) = link.recv(&mut buf).expect("recv") {
            if len < 18 || buf[12..14] != [0x88, 0xb5] {
                continue; // not ours (none expected in a private namespace)
            }
            let seq = u32::from_be_bytes([buf[14], buf[15], buf[16], buf[17]]);
            assert_eq!(&buf[..len], &frame(seq)[..], "frame {seq} corrupted");
            got.push(seq);
        }
        got.len() >= n
    });
    got
}

fn small_rings(retire_ms: u32) -> RingConfig {
    // Blocks of one page hold three 1000-byte frames (48-byte block header,
    // 1088 bytes per frame with its header and alignment).
    RingConfig {
        rx_block_size: 4096,
        rx_blocks: 4,
        rx_retire_ms: retire_ms,
        tx_frames: 16,
    }
}

#[test]
fn a_full_block_retires_at_once_and_a_partial_one_by_the_timer() {
    if outer(
        "a_full_block_retires_at_once_and_a_partial_one_by_the_timer",
        'a',
    ) {
        return;
    }
    let mut rx = PacketLink::with_rings("pa", small_rings(300)).unwrap();
    let mut tx = PacketLink::with_rings("pb", small_rings(300)).unwrap();
    // Four frames in one flush: three fill block 0, the fourth closes it
    // and opens block 1, which only the timer hands over.
    for seq in 0..4 {
        assert!(tx.send(&frame(seq)).unwrap());
    }
    assert_eq!(tx.tx_queued(), 4);
    tx.flush().unwrap();
    assert_eq!(tx.tx_queued(), 0);
    assert_eq!(
        tx.ring_counters().tx_flushes,
        1,
        "one send(2) for the batch"
    );
    let got = receive(&mut rx, 4);
    assert_eq!(got, vec![0, 1, 2, 3]);
    let c = rx.ring_counters();
    assert_eq!(
        (c.rx_blocks, c.rx_blocks_timeout),
        (2, 1),
        "block 0 full, block 1 by timer: {c:?}"
    );
    assert_eq!((c.rx_ring_full, c.rx_truncated, c.rx_ring_wraps), (0, 0, 0));
    // Counters are exported under their names.
    let named: BTreeMap<&str, u64> = Link::counters(&rx).into_iter().collect();
    assert_eq!(named["packet.rx_blocks"], 2);
    assert_eq!(named["packet.rx_blocks_timeout"], 1);
    assert_eq!(named["drop.packet.rx_ring_full"], 0);
}

#[test]
fn both_rings_wrap_and_every_frame_arrives_in_order() {
    if outer("both_rings_wrap_and_every_frame_arrives_in_order", 'b') {
        return;
    }
    let mut rx = PacketLink::with_rings("pa", small_rings(5)).unwrap();
    let mut tx = PacketLink::with_rings("pb", small_rings(5)).unwrap();
    assert_eq!(tx.tx_slots(), 16);
    let mut all = Vec::new();
    for round in 0..10u32 {
        for i in 0..6 {
            assert!(tx.send(&frame(round * 6 + i)).unwrap());
        }
        tx.flush().unwrap();
        all.extend(receive(&mut rx, (round as usize + 1) * 6 - all.len()));
    }
    assert_eq!(all, (0..60).collect::<Vec<u32>>(), "lost or reordered");
    let c = rx.ring_counters();
    // At least two blocks a round (three frames per block), each block
    // read once: the reading position went round the four blocks.
    assert!(c.rx_blocks >= 20, "{c:?}");
    assert_eq!(c.rx_ring_wraps, c.rx_blocks / 4, "{c:?}");
    assert_eq!(c.rx_ring_full, 0, "{c:?}");
    let t = tx.ring_counters();
    assert_eq!(t.tx_ring_wraps, 60 / 16, "{t:?}");
    assert_eq!((t.tx_flushes, t.tx_ring_full), (10, 0), "{t:?}");
}

#[test]
fn a_full_transmit_ring_waits_then_refuses_and_counts() {
    if outer("a_full_transmit_ring_waits_then_refuses_and_counts", 'c') {
        return;
    }
    // The receiver's ring holds 24 frames, the sender's 16 slots.
    let big = RingConfig {
        rx_blocks: 8,
        ..small_rings(5)
    };
    let mut rx = PacketLink::with_rings("pa", big).unwrap();
    let mut tx = PacketLink::with_rings("pb", small_rings(5)).unwrap();
    // With pb down the kernel sends nothing: queued slots stay queued.
    let ip = |state: &str| {
        let out = run_bounded(10, "ip", &["link", "set", "pb", state]);
        assert!(out.status.success(), "{}", text(&out));
    };
    ip("down");
    for seq in 0..16 {
        assert!(tx.send(&frame(seq)).unwrap(), "slot {seq} is free");
    }
    tx.flush().unwrap(); // ENETDOWN: kept for later, not an error
    assert_eq!(tx.tx_queued(), 16);
    assert!(!tx.send(&frame(16)).unwrap(), "a full ring refuses");
    let c = tx.ring_counters();
    assert_eq!((c.tx_ring_full, c.tx_ring_full_refused), (1, 1), "{c:?}");
    // Back up: the sixteen queued frames go, in order; room again.
    ip("up");
    assert!(wait_until(5, || {
        tx.flush().unwrap();
        tx.tx_queued() == 0
    }));
    assert_eq!(receive(&mut rx, 16), (0..16).collect::<Vec<u32>>());
    assert!(tx.send(&frame(17)).unwrap());
    tx.flush().unwrap();
    assert_eq!(receive(&mut rx, 1), vec![17]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(rx.ring_counters().rx_ring_full, 0);
}

#[test]
fn a_burst_beyond_the_receive_ring_is_counted_as_dropped() {
    if outer("a_burst_beyond_the_receive_ring_is_counted_as_dropped", 'd') {
        return;
    }
    // Twelve frames fit four blocks; sixteen arrive before any is read.
    let mut rx = PacketLink::with_rings("pa", small_rings(5)).unwrap();
    let mut tx = PacketLink::with_rings("pb", small_rings(5)).unwrap();
    for seq in 0..16 {
        assert!(tx.send(&frame(seq)).unwrap());
    }
    tx.flush().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let got = receive(&mut rx, 12);
    assert_eq!(got, (0..12).collect::<Vec<u32>>());
    let c = rx.ring_counters();
    assert_eq!(
        c.rx_ring_full, 4,
        "every frame not received is counted: {c:?}"
    );
    let named: BTreeMap<&str, u64> = Link::counters(&rx).into_iter().collect();
    assert_eq!(named["drop.packet.rx_ring_full"], 4);
    // Room again once read.
    assert!(tx.send(&frame(99)).unwrap());
    tx.flush().unwrap();
    assert_eq!(receive(&mut rx, 1), vec![99]);
}
