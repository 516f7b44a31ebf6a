//! IGP convergence time after a link failure, in virtual time, on the
//! ten-SAR topology of `svcroute_sar::sim::TEN_SARS` (15 links, 1–3 ms
//! one-way delays). For every link: converge, fail it, and measure until
//! every SAR holds the same LSDB and exactly the reference shortest paths;
//! then repair it and re-converge. Two failure modes:
//!
//! - *silent*: datagrams on the link vanish; the neighbours notice by the
//!   dead interval (4 s of missed hellos);
//! - *signalled*: the driver also calls `link_down` at both ends (the port
//!   went down), so only origination and flooding remain.
//!
//! Each mode runs without loss and with 10 % loss. Deterministic: the same
//! figures on every machine. Run: `cargo bench -p svcroute-sar --bench
//! convergence`.

use smoltcp::time::Duration;
use svcroute_sar::sim::{build, Sim, TEN_SARS};

fn ms(d: Duration) -> f64 {
    d.total_micros() as f64 / 1000.0
}

#[track_caller]
fn converge(sim: &mut Sim) -> Duration {
    let start = sim.now();
    let t = sim
        .run_until_pred(start + Duration::from_secs(300), Sim::converged)
        .expect("converges");
    t - start
}

fn run(loss: f64, notify: bool) {
    let mut sim = build(10, &TEN_SARS, loss, 42, |_| {});
    let initial = converge(&mut sim);
    let mut times = Vec::new();
    let mut sent = Vec::new();
    for link in 0..TEN_SARS.len() {
        // Let timers settle between trials.
        sim.run_until(sim.now() + Duration::from_secs(10));
        converge(&mut sim);
        let before = sim.stats.sent;
        sim.fail_link(link, notify);
        times.push(converge(&mut sim));
        sent.push(sim.stats.sent - before);
        sim.repair_link(link);
        converge(&mut sim);
    }
    let mut sorted = times.clone();
    sorted.sort();
    let mean = times.iter().map(|d| ms(*d)).sum::<f64>() / times.len() as f64;
    println!(
        "convergence {} failure, loss {:>2.0}%: initial {:>7.1} ms; after a link failure \
         min {:>7.1} / median {:>7.1} / mean {:>7.1} / max {:>7.1} ms; datagrams per failure \
         {:.0} (mean)",
        if notify { "signalled" } else { "silent   " },
        loss * 100.0,
        ms(initial),
        ms(sorted[0]),
        ms(sorted[sorted.len() / 2]),
        mean,
        ms(sorted[sorted.len() - 1]),
        sent.iter().sum::<u64>() as f64 / sent.len() as f64,
    );
    for (k, t) in times.iter().enumerate() {
        let (a, b, c) = TEN_SARS[k];
        println!("    link {a}-{b} (cost {c}): {:>7.1} ms", ms(*t));
    }
}

fn main() {
    // `cargo test --benches` runs this too; it is quick (virtual time).
    for notify in [false, true] {
        for loss in [0.0, 0.1] {
            run(loss, notify);
        }
    }
}
