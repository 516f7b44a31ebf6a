//! Every ROSA steering policy over real TAPs, with an unmodified kernel
//! curl (`examples/labs/rosa-pol.toml`): three instances behind one SAR
//! serve six names, each announced with another policy and other metrics;
//! 240 transactions per name from the kernel client behind the TUN shim,
//! each a new TCP connection whose first packet the ingress steers.
//! Asserted per name: every transaction answered, and the distribution
//! over the instances that the policy and the announced metrics give
//! (SPEC §2; `nodes/sar/src/policy.rs`): random about a third each, round
//! robin and weighted round robin exact up to a transaction or two,
//! min-metric, constraint-based routing and the App-Metrics cost all on
//! the one instance the metrics name. Needs root.

mod common;

use std::collections::BTreeMap;

use common::{lab_name, root_or_skip, text, Lab};

const LAB: &str = include_str!("../examples/labs/rosa-pol.toml");
const N: u32 = 240;

/// `N` transactions to `name` from the kernel client: instance → count.
fn spread(lab: &Lab, name: &str) -> BTreeMap<String, u32> {
    let script = format!(
        "for i in $(seq {N}); do curl -s -m 5 -o /dev/null -w '%{{http_code}} %header{{x-instance}}\\n' \
         http://{name}/; done"
    );
    let out = lab.exec("client", 120, &["sh", "-c", &script]);
    assert!(out.status.success(), "{name}: {}", text(&out));
    let mut got = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let (code, instance) = line.split_once(' ').unwrap_or((line, ""));
        assert_eq!(code, "200", "{name}: a transaction failed: {line:?}");
        *got.entry(instance.to_owned()).or_insert(0) += 1;
    }
    assert_eq!(got.values().sum::<u32>(), N, "{name}: {got:?}");
    got
}

#[track_caller]
fn near(got: &BTreeMap<String, u32>, want: [(&str, u32); 3], slack: u32, what: &str) {
    for (i, n) in want {
        let g = got.get(i).copied().unwrap_or(0);
        assert!(
            g.abs_diff(n) <= slack,
            "{what}: {i} served {g}, expected {n} ± {slack}: {got:?}"
        );
    }
}

#[track_caller]
fn all_on(got: &BTreeMap<String, u32>, instance: &str, what: &str) {
    assert_eq!(got.get(instance).copied(), Some(N), "{what}: {got:?}");
}

#[test]
fn every_policy_steers_kernel_transactions_as_announced() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('p', 'o');
    let lab = Lab::up(
        &name,
        &LAB.replacen("name = \"rosa-pol\"", &format!("name = \"{name}\""), 1),
    );
    let mut table = Vec::new();
    let mut run = |svc: &str| {
        let got = spread(&lab, svc);
        table.push((svc.to_owned(), got.clone()));
        got
    };

    // Random (seeded at the ingress): a third each, binomial σ ≈ 7.3.
    let got = run("random.example");
    near(&got, [("i1", 80), ("i2", 80), ("i3", 80)], 30, "random");
    // Round robin: in turn.
    let got = run("rr.example");
    near(&got, [("i1", 80), ("i2", 80), ("i3", 80)], 2, "round robin");
    // Smooth weighted round robin by capability 1 : 2 : 5.
    let got = run("wrr.example");
    near(&got, [("i1", 30), ("i2", 60), ("i3", 150)], 2, "weighted");
    // Lowest load (30 / 10 / 20).
    all_on(&run("min.example"), "i2", "min-metric");
    // Constraint-based routing: i1's 50 ms latency costs more than the
    // path; of i2 and i3, i3 is wider (capability / (load + 1)).
    all_on(&run("cbr.example"), "i3", "constraint-based");
    // SPEC §3's score: i2's capacity and preference beat i3's zero load.
    all_on(&run("amc.example"), "i2", "app-metrics-cost");

    println!("transactions per instance, {N} per name:");
    for (svc, got) in &table {
        println!("  {svc:16} {got:?}");
    }
    lab.down();
}

/// `open` and `announced` live load of `live.example` at instance `node`.
fn live(lab: &Lab, node: &str) -> (u64, u64) {
    let v = lab.ctl(node, &["rosa"]);
    let l = &v["live_load"]["live.example"];
    (
        l["open"].as_u64().unwrap_or(0),
        l["announced"].as_u64().unwrap_or(0),
    )
}

/// Live load (min-metric over announced loads that follow the open
/// transactions): while wrk holds connections to one instance, new
/// transactions go to the others; when wrk ends, its load falls back.
#[test]
fn live_load_steers_new_transactions_away_from_a_loaded_instance() {
    if !root_or_skip() {
        return;
    }
    if !common::have("wrk") {
        println!("SKIP: wrk not installed (scripts/setup installs it)");
        return;
    }
    let name = lab_name('p', 'l');
    let lab = Lab::up(
        &name,
        &LAB.replacen("name = \"rosa-pol\"", &format!("name = \"{name}\""), 1),
    );
    let ins = ["i1", "i2", "i3"];
    // wrk's 8 keep-alive connections, held for 20 s.
    let mut wrk = std::process::Command::new(common::BIN)
        .args([
            "lab",
            "exec",
            "--lab",
            &name,
            "client",
            "--",
            "wrk",
            "-t1",
            "-c8",
            "-d20s",
            "http://live.example/",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting wrk");
    // Each loaded instance has announced what it holds.
    let settled = common::wait_until(15, || {
        let l: Vec<(u64, u64)> = ins.iter().map(|i| live(&lab, i)).collect();
        l.iter().map(|x| x.0).sum::<u64>() >= 8 && l.iter().all(|(o, a)| o == a)
    });
    let held: Vec<u64> = ins.iter().map(|i| live(&lab, i).0).collect();
    assert!(
        settled,
        "wrk's connections never showed as live load: {held:?}"
    );
    // ...and the ingress has them (flooded from s2, at most one services
    // LSA per second).
    let addrs = ["fd00:b::11", "fd00:b::12", "fd00:b::13"];
    let at_ingress = || -> Vec<u64> {
        let v = lab.ctl("s1", &["instances"]);
        addrs
            .iter()
            .map(|a| {
                v["list"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|r| r["service"] == "live.example" && r["addr"] == *a)
                    .and_then(|r| r["load"].as_u64())
                    .unwrap_or(u64::MAX)
            })
            .collect()
    };
    assert!(
        common::wait_until(10, || at_ingress() == held),
        "s1 never saw the loads {held:?}: {:?}",
        at_ingress()
    );
    let least = *held.iter().min().unwrap();
    let got = {
        let script = "for i in $(seq 30); do curl -s -m 5 -o /dev/null -w '%header{x-instance}\\n' http://live.example/; done";
        let out = lab.exec("client", 60, &["sh", "-c", script]);
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut spread = BTreeMap::new();
    for line in got.lines() {
        *spread.entry(line.to_owned()).or_insert(0) += 1;
    }
    assert_eq!(spread.values().sum::<u32>(), 30, "{spread:?}");
    for (k, i) in ins.iter().enumerate() {
        if held[k] > least {
            assert!(
                !spread.contains_key(*i),
                "{i} holds {} of wrk's connections and got new ones: {spread:?} (held {held:?})",
                held[k]
            );
        }
    }
    println!("wrk held {held:?}; 30 new transactions went {spread:?}");
    let _ = wrk.wait();
    // wrk is gone: every instance announces nothing open again.
    assert!(
        common::wait_until(20, || ins.iter().all(|i| live(&lab, i) == (0, 0))),
        "the load never fell back: {:?}",
        ins.iter().map(|i| live(&lab, i)).collect::<Vec<_>>()
    );
    lab.down();
}
