//! The ingress's Sticky-Service-Table at 1,000,000 entries: lookups per
//! second (a packet of a known flow: `Table::hit`, which also refreshes
//! the entry) and octets per entry.
//!
//! The table holds 1,000,000 flows (flow-label keys) over 16 sticky
//! services; lookups go to keys in a pseudo-random order over the whole
//! table, so most miss the CPU caches, as a busy ingress's would. The
//! memory figure is the hash table's own allocation (buckets and control
//! octets) divided by the entries.
//!
//! Run: `cargo bench -p svcroute-sar --bench sticky`. Besides criterion's
//! figures it prints `sticky table: N lookups/s (M ns each), B octets per
//! entry at E entries`.

use std::hint::black_box;
use std::time::Instant as StdInstant;

use criterion::{criterion_group, Criterion, Throughput};
use svcroute_sar::sticky::table::{FlowKey, Origin, Table};

const ENTRIES: u32 = 1_000_000;
const SERVICES: u32 = 16;

fn key(i: u32) -> (u16, FlowKey) {
    ((i % SERVICES) as u16, FlowKey::Label(1 + i / SERVICES))
}

/// A permutation of 0..ENTRIES (multiplication by an odd constant modulo a
/// power of two above ENTRIES, skipping what falls outside).
fn order() -> Vec<u32> {
    let m: u64 = 1 << 20;
    (0..m)
        .map(|i| ((i * 0x9e37_79b1) % m) as u32)
        .filter(|i| *i < ENTRIES)
        .collect()
}

fn filled() -> Table {
    let mut t = Table::new(300, ENTRIES as usize);
    for i in 0..ENTRIES {
        let (s, k) = key(i);
        t.insert(s, k, (i % 3) as u16, Origin::Chosen, 0, 300)
            .expect("under the cap");
    }
    t
}

// A benchmark reads the wall clock by nature.
#[allow(clippy::disallowed_methods)]
fn bench(c: &mut Criterion) {
    let mut t = filled();
    let keys: Vec<(u16, FlowKey)> = order().into_iter().map(key).collect();
    let per_entry = t.heap_bytes() as f64 / f64::from(ENTRIES);

    let mut g = c.benchmark_group("sticky_table");
    g.throughput(Throughput::Elements(keys.len() as u64));
    g.bench_function("hit_1m", |b| {
        b.iter(|| {
            let mut sites = 0_u64;
            for (s, k) in &keys {
                if let Some(e) = t.hit(*s, *k, 1) {
                    sites += u64::from(e.site);
                }
            }
            black_box(sites)
        });
    });
    g.finish();

    // One summary over three passes, outside criterion's sampling.
    let start = StdInstant::now();
    let mut found = 0_u64;
    for _ in 0..3 {
        for (s, k) in &keys {
            found += u64::from(t.hit(*s, *k, 2).is_some());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let n = 3.0 * keys.len() as f64;
    assert_eq!(found, 3 * keys.len() as u64, "every lookup finds its flow");
    println!(
        "sticky table: {:.2} M lookups/s ({:.1} ns each), {:.1} octets per entry at {} entries",
        n / secs / 1e6,
        secs / n * 1e9,
        per_entry,
        ENTRIES
    );
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
