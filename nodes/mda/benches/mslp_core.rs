//! Criterion benches of the sans-IO MDA core (no sockets, no WAL, no clock):
//! registration ingest and SrvRqst with an LDAP predicate over 100,000
//! registrations.
//!
//! ```sh
//! cargo bench -p svcroute-mda --bench mslp_core
//! cargo bench -p svcroute-mda --bench mslp_core -- srvrqst   # a subset
//! ```
//!
//! Registrations look like `scripts/bench-mslp`'s load generator's
//! (`nodes/mda/examples/slp_load.rs`): URL `service:printer:lpr://r<i>/q`,
//! attributes `(id=<i>),(zone=<i % 100>),(color=red)`, FRESH with MeshFwd
//! RqstFwd, scope `DEFAULT`. Each input is followed by draining the core's
//! events and transmits, as a driver does (the Persist records are
//! dropped). The messages are encoded outside the timed part.

use std::hint::black_box;
use std::time::Duration as StdDuration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use smoltcp::time::Instant;
use smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address};
use svcroute_mda::core::{Config, ConnId, Mda};
use svcroute_stack::wire::slp::codec::List;
use svcroute_stack::wire::slp::{
    AcceptId, AttrList, Body, Extension, FwdId, Header, LangTag, MeshFwd, Message, Predicate,
    ScopeList, ServiceType, SlpString, SrvReg, SrvRqst, UrlEntry,
};

/// Registrations in the table.
const N: u64 = 100_000;
/// SLP time at `Instant::ZERO` (µs since 1900): late 2023.
const WALL: u64 = 3_900_000_000_000_000;

fn now() -> Instant {
    Instant::from_secs(10)
}

fn sa() -> IpEndpoint {
    IpEndpoint::new(IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 10)), 4000)
}

fn core() -> Mda {
    let addr = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1));
    let mut cfg = Config::new(
        "service:directory-agent://10.0.0.1",
        vec![addr],
        ScopeList::default_scope(),
    );
    cfg.wall_us_at_zero = WALL;
    cfg.max_registrations = 10 * N as usize;
    Mda::new(cfg, Instant::ZERO, &[])
}

/// Drain as a driver does: events first, then transmits. Returns the bytes
/// the core would send.
fn drain(m: &mut Mda) -> usize {
    while let Some(e) = m.poll_event() {
        black_box(e);
    }
    let mut n = 0;
    while let Some(t) = m.poll_transmit() {
        n += match t {
            svcroute_mda::core::Transmit::Udp { bytes, .. }
            | svcroute_mda::core::Transmit::Tcp { bytes, .. } => bytes.len(),
        };
    }
    n
}

fn srv_reg(i: u64, version: u64) -> Vec<u8> {
    let mut h = Header::new((i & 0xffff) as u16, LangTag::en());
    h.flags.fresh = true;
    let body = Body::SrvReg(SrvReg {
        entry: UrlEntry::new(
            u16::MAX,
            SlpString::new(format!("service:printer:lpr://r{i}/q")).unwrap(),
        ),
        service_type: ServiceType::parse("service:printer:lpr").unwrap(),
        scopes: ScopeList::default_scope(),
        attrs: AttrList::parse(&format!("(id={i}),(zone={}),(color=red)", i % 100)).unwrap(),
        attr_auths: List::default(),
    });
    let ext = Extension::MeshFwd(MeshFwd {
        fwd: FwdId::RqstFwd,
        version,
        accept: AcceptId::default(),
    });
    Message::new(h, body, vec![ext]).unwrap().to_bytes()
}

fn srv_rqst(xid: u16, predicate: &str) -> Vec<u8> {
    let body = Body::SrvRqst(SrvRqst {
        pr_list: SlpString::default(),
        service_type: ServiceType::parse("service:printer:lpr").unwrap(),
        scopes: ScopeList::default_scope(),
        predicate: Predicate::parse(predicate).unwrap(),
        spi: SlpString::default(),
    });
    Message::new(Header::new(xid, LangTag::en()), body, Vec::new())
        .unwrap()
        .to_bytes()
}

/// A core holding `N` registrations (encoded and fed over "UDP").
fn full_core() -> Mda {
    let mut m = core();
    for i in 0..N {
        m.handle_udp(now(), sa(), &srv_reg(i, WALL), false);
        drain(&mut m);
    }
    assert_eq!(m.registration_count(), N as usize);
    m
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn ingest(c: &mut Criterion) {
    let mut g = c.benchmark_group("srvreg");
    g.sample_size(10)
        .warm_up_time(StdDuration::from_secs(1))
        .measurement_time(StdDuration::from_secs(10));
    // 100,000 fresh SrvRegs into an empty core: the core's ingest rate.
    let msgs: Vec<Vec<u8>> = (0..N).map(|i| srv_reg(i, WALL)).collect();
    g.throughput(Throughput::Elements(N));
    g.bench_function("fill_100k", |b| {
        b.iter_batched(
            core,
            |mut m| {
                for bytes in &msgs {
                    m.handle_udp(now(), sa(), bytes, false);
                    drain(&mut m);
                }
                m
            },
            BatchSize::PerIteration,
        );
    });
    drop(msgs);
    // A newer version of an existing registration (a refresh) at 100,000.
    let mut m = full_core();
    let mut k = 0u64;
    g.throughput(Throughput::Elements(1));
    g.sample_size(50)
        .measurement_time(StdDuration::from_secs(5));
    g.bench_function("refresh_at_100k", |b| {
        b.iter_batched(
            || {
                k += 1;
                srv_reg(splitmix(k) % N, WALL + k)
            },
            |bytes| {
                m.handle_udp(now(), sa(), &bytes, false);
                drain(&mut m)
            },
            BatchSize::SmallInput,
        );
    });
    g.finish();
}

fn query(c: &mut Criterion) {
    let mut m = full_core();
    let mut g = c.benchmark_group("srvrqst");
    g.sample_size(20)
        .warm_up_time(StdDuration::from_secs(1))
        .measurement_time(StdDuration::from_secs(5));
    g.throughput(Throughput::Elements(1));
    // One match: the predicate the over-TAP query figure uses, over UDP.
    let one: Vec<Vec<u8>> = (0..1024u64)
        .map(|k| {
            let id = splitmix(k) % N;
            srv_rqst(k as u16, &format!("(&(color=red)(id={id}))"))
        })
        .collect();
    let mut k = 0usize;
    g.bench_function("ldap_1_of_100k_udp", |b| {
        b.iter(|| {
            k = (k + 1) % one.len();
            m.handle_udp(now(), sa(), &one[k], false);
            let n = drain(&mut m);
            assert!(n > 0);
            n
        });
    });
    // 1,000 matches (1 %), over TCP (no amplification bound on the reply).
    let zone: Vec<Vec<u8>> = (0..100u64)
        .map(|z| srv_rqst(z as u16, &format!("(zone={z})")))
        .collect();
    let conn: ConnId = m.tcp_accepted(now(), sa()).expect("a connection");
    let mut k = 0usize;
    g.bench_function("ldap_1000_of_100k_tcp", |b| {
        b.iter(|| {
            k = (k + 1) % zone.len();
            m.handle_tcp(now(), conn, &zone[k]);
            let n = drain(&mut m);
            assert!(n > 10_000, "reply of {n} bytes");
            n
        });
    });
    g.finish();

    let mut g = c.benchmark_group("state");
    g.sample_size(10)
        .warm_up_time(StdDuration::from_secs(1))
        .measurement_time(StdDuration::from_secs(5));
    // What WAL compaction hands to the log: every state as a record.
    g.bench_function("snapshot_100k", |b| b.iter(|| m.snapshot().len()));
    g.finish();
}

criterion_group!(benches, ingest, query);
criterion_main!(benches);
