//! Figures of the sans-IO core alone (scripts/bench-mslp, figure 7;
//! `#[ignore]`d, prints, never asserts a figure): the heap a registration
//! costs once 100,000 are held (RSS before and after, in this process), and
//! SrvRqsts per second over them, the predicates of figure 2. Run:
//! `cargo test --release -p svcroute-mda --test core_figures -- --ignored --nocapture`.

// A test that sets up files or sockets of its own, not a role core (clippy.toml).
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::time::Instant as Clock;

use smoltcp::time::Instant;
use smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address};
use svcroute_mda::core::{Config, Mda};
use svcroute_stack::wire::slp::codec::List;
use svcroute_stack::wire::slp::{
    AcceptId, AttrList, Body, Extension, FwdId, Header, LangTag, MeshFwd, Message, Predicate,
    ScopeList, ServiceType, SlpString, SrvReg, SrvRqst, UrlEntry,
};

const N: u64 = 100_000;
const WALL: u64 = 3_900_000_000_000_000;

fn sa() -> IpEndpoint {
    IpEndpoint::new(IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 10)), 4000)
}

fn drain(m: &mut Mda) -> usize {
    while m.poll_event().is_some() {}
    let mut n = 0;
    while let Some(t) = m.poll_transmit() {
        n += match t {
            svcroute_mda::core::Transmit::Udp { bytes, .. }
            | svcroute_mda::core::Transmit::Tcp { bytes, .. } => bytes.len(),
        };
    }
    n
}

/// The SrvReg of scripts/bench-mslp's load generator.
fn srv_reg(i: u64) -> Vec<u8> {
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
        version: WALL,
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

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
#[ignore]
#[allow(clippy::disallowed_methods)] // a figure printer: wall-clock rates
fn figures_at_100k() {
    let addr = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1));
    let mut cfg = Config::new(
        "service:directory-agent://10.0.0.1",
        vec![addr],
        ScopeList::default_scope(),
    );
    cfg.wall_us_at_zero = WALL;
    cfg.max_registrations = 10 * N as usize;
    let now = Instant::from_secs(10);
    let mut m = Mda::new(cfg, Instant::ZERO, &[]);
    let before = rss_kib();
    let t = Clock::now();
    for i in 0..N {
        m.handle_udp(now, sa(), &srv_reg(i), false);
        drain(&mut m);
    }
    let fill = t.elapsed().as_secs_f64();
    let after = rss_kib();
    assert_eq!(m.registration_count(), N as usize);
    println!(
        "core_fill regs={N} srvreg_per_s={:.0} rss_before_kib={before} rss_after_kib={after} bytes_per_reg={:.0}",
        N as f64 / fill,
        (after.saturating_sub(before) * 1024) as f64 / N as f64
    );
    for (name, pred, over_tcp) in [
        ("ldap_1_of_100k_udp", "(&(color=red)(id={}))", false),
        ("ldap_1000_of_100k_tcp", "(zone={})", true),
        ("substring_scan_udp", "(id=1234*{})", false),
    ] {
        let conn = over_tcp.then(|| m.tcp_accepted(now, sa()).unwrap());
        let (mut n, mut bytes) = (0_u64, 0);
        let t = Clock::now();
        while t.elapsed().as_secs_f64() < 2.0 {
            let k = (n * 7919) % 100;
            let p = pred.replace("{}", &k.to_string());
            let q = srv_rqst((n & 0xffff) as u16, &p);
            match conn {
                Some(c) => m.handle_tcp(now, c, &q),
                None => m.handle_udp(now, sa(), &q, false),
            }
            bytes += drain(&mut m);
            n += 1;
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "core_query {name} queries_per_s={:.0} us_per_query={:.1} reply_bytes={}",
            n as f64 / s,
            s * 1e6 / n as f64,
            bytes / n as usize
        );
    }
}
