//! Service-request resolutions per second at an ingress SAR holding 100,000
//! announced services (FIB longest-prefix lookup + policy pick).
//!
//! Set-up (virtual time, no I/O): three SARs A—B (cost 1), A—C (cost 2);
//! B and C each announce one instance of each of 100,000 services, so A
//! learns 100,000 FIB entries and 200,000 instance rows from 3,126
//! services LSAs. Every tenth service is round-robin scheduled, the rest
//! routed (shortest path: A picks B's instance, next SAR B). Every tenth
//! name has three segments (`svcN.example/video/hd`), the others two, so
//! lookups of deeper names probe more than one prefix length. `*` is
//! announced too (the SAG).
//!
//! Run: `cargo bench -p svcroute-sar --bench resolve`. Besides criterion's
//! per-batch figures it prints one summary line per case:
//! `resolve <case>: N resolutions/s (M ns each)` over the whole name set.

use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr};

use criterion::{criterion_group, Criterion, Throughput};
use smoltcp::time::Duration;
use smoltcp::wire::IpProtocol;
use svcroute_sar::fib::NameHash;
use svcroute_sar::sim::Sim;
use svcroute_sar::{Action, PacketView, PortKind, Sar};
use svcroute_stack::wire::rosa::{
    Constraint, Constraints, Entry, FlowPort, Message, MessageKind, Mode, Policy, ServiceName,
};

const SERVICES: usize = 100_000;

fn name(i: usize) -> String {
    if i % 10 == 3 {
        format!("svc{i}.example/video/hd")
    } else {
        format!("svc{i}.example/video")
    }
}

fn announce(sim: &mut Sim, node: usize, name: &str, inst: IpAddr, c: Vec<Constraint>) {
    let mut entries = vec![Entry::Instance(inst), Entry::Service(name.parse().unwrap())];
    if !c.is_empty() {
        entries.push(Entry::Constraint(Constraints(c)));
    }
    let m = Message {
        kind: MessageKind::Announcement,
        entries,
    };
    sim.with_node(node, |s, now| s.handle_announcement(now, inst, &m))
        .expect("announcement taken");
}

/// The ingress SAR (A) with everything learnt, its FIB hashing with `hash`.
fn ingress(hash: NameHash) -> Sar {
    let mut sim = Sim::with_routers(3, 0.0, 1, |c| {
        c.max_local_instances = 2 * SERVICES;
        c.igp.max_lsas = 10_000;
        c.fib_hash = hash;
    });
    sim.connect(0, 1, 1, Duration::from_millis(1));
    sim.connect(0, 2, 2, Duration::from_millis(1));
    sim.run_until(sim.now() + Duration::from_secs(5));
    let rr = || {
        vec![
            Constraint::ModePolicy {
                mode: Mode::Scheduling,
                policy: Policy::RoundRobin,
            },
            Constraint::LifetimeS(3600),
        ]
    };
    for i in 0..SERVICES {
        let c = || {
            if i % 10 == 0 {
                rr()
            } else {
                vec![Constraint::LifetimeS(3600)]
            }
        };
        let n = name(i);
        let (hi, lo) = ((i >> 16) as u16, i as u16);
        announce(
            &mut sim,
            1,
            &n,
            IpAddr::V6(Ipv6Addr::new(0xfd02, 0, 0, 0, 0, 1, hi, lo)),
            c(),
        );
        announce(
            &mut sim,
            2,
            &n,
            IpAddr::V6(Ipv6Addr::new(0xfd02, 0, 0, 0, 0, 2, hi, lo)),
            c(),
        );
    }
    announce(
        &mut sim,
        2,
        "*",
        "fd05::5a".parse().unwrap(),
        vec![Constraint::LifetimeS(3600)],
    );
    sim.run_until(sim.now() + Duration::from_secs(30));
    let a = sim.nodes.swap_remove(0);
    assert_eq!(a.fib().len(), SERVICES + 1, "A learnt every service");
    assert_eq!(a.nhib().len(), 2 * SERVICES + 1);
    a
}

fn names(f: impl Fn(usize) -> String) -> Vec<ServiceName> {
    // A fixed permutation so consecutive lookups do not walk memory in order.
    (0..SERVICES)
        .map(|k| f((k * 7_919) % SERVICES).parse().unwrap())
        .collect()
}

/// CPU time this thread has run, seconds (Linux: utime + stime in clock
/// ticks of /proc/thread-self/stat), so the per-core figure does not
/// depend on what else the machine runs.
#[allow(clippy::disallowed_methods)] // a benchmark reads /proc; it is not a core
fn thread_cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields after the parenthesised command name; utime, stime are 14, 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// Resolve every name `rounds` times, timing the whole pass.
#[allow(clippy::disallowed_methods)] // a benchmark reads the wall clock
fn summary(sar: &mut Sar, case: &str, list: &[ServiceName]) {
    let rounds = (4_000_000 / list.len()).max(1);
    let cpu0 = thread_cpu_s();
    let start = std::time::Instant::now();
    let mut ok = 0_u64;
    for _ in 0..rounds {
        for n in list {
            ok += u64::from(black_box(sar.resolve(black_box(n), true)).is_ok());
        }
    }
    let el = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_s().zip(cpu0).map(|(b, a)| b - a);
    let total = (rounds * list.len()) as f64;
    assert_eq!(ok as f64, total, "every request resolves");
    let per_core = cpu.map_or_else(
        || "n/a".to_owned(),
        |c| {
            format!(
                "{:.0}/s per CPU-second ({:.0} ns)",
                total / c,
                c * 1e9 / total
            )
        },
    );
    println!(
        "resolve {case}: {:.0} resolutions/s wall ({:.0} ns), {per_core}; {} names x {rounds}",
        total / el,
        el * 1e9 / total,
        list.len()
    );
}

fn bench(c: &mut Criterion) {
    // The optional keyed hash first: the same cases, printed only.
    let mut keyed = ingress(NameHash::Keyed(0x5eed_5eed));
    let exact = names(name);
    summary(&mut keyed, "[keyed hash] exact names", &exact);
    let deeper = names(|i| format!("{}/seg{}", name(i), i % 7));
    summary(&mut keyed, "[keyed hash] one segment deeper", &deeper);
    let hot: Vec<ServiceName> = exact[..1_000].to_vec();
    summary(&mut keyed, "[keyed hash] 1,000 hot names", &hot);
    drop(keyed);

    let mut sar = ingress(NameHash::Sha256);
    summary(&mut sar, "[SHA-256] 1,000 hot names", &hot);
    let unknown: Vec<ServiceName> = (0..SERVICES)
        .map(|i| format!("other{i}.net/x").parse().unwrap())
        .collect();
    // Sanity: what the cases resolve to.
    let routed = sar
        .resolve(&"svc1.example/video".parse().unwrap(), true)
        .unwrap();
    assert!(!routed.scheduled && routed.next_sar.is_some());
    let sched = sar
        .resolve(&"svc10.example/video".parse().unwrap(), true)
        .unwrap();
    assert!(sched.scheduled);

    summary(
        &mut sar,
        "[SHA-256] exact names (90% routed, 10% round robin)",
        &exact,
    );
    summary(
        &mut sar,
        "[SHA-256] one segment deeper (longest prefix)",
        &deeper,
    );
    summary(&mut sar, "[SHA-256] unknown names (wildcard `*`)", &unknown);

    const BATCH: usize = 1024;
    let mut g = c.benchmark_group("resolve_100k_services");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (case, list) in [
        ("exact", &exact),
        ("deeper", &deeper),
        ("wildcard", &unknown),
    ] {
        let mut at = 0;
        g.bench_function(case, |b| {
            b.iter(|| {
                for _ in 0..BATCH {
                    at = (at + 1) % list.len();
                    black_box(sar.resolve(&list[at], true).ok());
                }
            });
        });
    }
    // The whole decision as the driver calls it: classify, resolve, count.
    let msgs: Vec<Message> = exact[..BATCH]
        .iter()
        .map(|n| Message {
            kind: MessageKind::Request,
            entries: vec![
                Entry::Client("fd01::c".parse().unwrap()),
                Entry::Ingress(IpAddr::V6(sar.address())),
                Entry::Service(n.clone()),
                Entry::Port(FlowPort {
                    proto: IpProtocol::Tcp,
                    port: 443,
                }),
            ],
        })
        .collect();
    let dst = IpAddr::V6(sar.address());
    let now = smoltcp::time::Instant::ZERO + Duration::from_secs(40);
    g.bench_function("decide", |b| {
        b.iter(|| {
            for m in &msgs {
                let v = PacketView {
                    src: "fd01::c".parse().unwrap(),
                    dst,
                    rosa: m,
                    port: PortKind::Client,
                };
                let a = sar.decide(now, &v);
                debug_assert!(!matches!(a, Action::Drop(_)));
                black_box(a);
            }
        });
    });
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    // `cargo test --benches` runs bench binaries without `--bench`: the
    // 100,000-service set-up takes a while, so only `cargo bench` runs it.
    if !std::env::args().any(|a| a == "--bench") {
        println!("resolve: skipped (run `cargo bench -p svcroute-sar --bench resolve`)");
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
