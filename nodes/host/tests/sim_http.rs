//! Two host nodes on a simulated segment: the client role fetches from the
//! server role under loss and reordering, every body checked byte by byte,
//! and the whole run is a function of the seed.

use serde_json::Value;
use smoltcp::time::Duration;
use svcroute_host::{Host, HostConfig};
use svcroute_stack::sim::{SegmentConfig, Sim};

struct Outcome {
    result: Value,
    trace: u64,
    lost: u64,
    reordered: u64,
}

/// Run one client job from node `cli` (10.0.0.1) against node `srv`
/// (10.0.0.2) on a segment with `loss` and `reorder`, to completion.
fn fetch(seed: u64, loss: f64, reorder: f64, job: &str) -> Outcome {
    let mut sim = Sim::new(seed);
    let lan = sim.add_segment(SegmentConfig {
        loss,
        reorder,
        ..SegmentConfig::default()
    });
    let srv_port = sim.port(lan, 2);
    let cfg = HostConfig {
        instance: Some("srv".into()),
        ..HostConfig::default()
    };
    sim.add_role("srv", vec![srv_port], Host::new("srv", cfg).unwrap());
    let cli_port = sim.port(lan, 1);
    let cli = sim.add_role(
        "cli",
        vec![cli_port],
        Host::new("cli", HostConfig::default()).unwrap(),
    );

    let args: Vec<String> = job.split_whitespace().map(str::to_owned).collect();
    let now = sim.now();
    let immediate = sim.node_mut(cli).control(now, 1, &args);
    assert!(immediate.is_none(), "job answered at once: {immediate:?}");
    assert_eq!(sim.node(cli).role().jobs_running(), 1);

    sim.drive_bounded(Duration::from_secs(3600), 2_000_000, |s| {
        s.node(cli).role().jobs_running() == 0
    })
    .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let replies = sim.node_mut(cli).take_replies();
    assert_eq!(replies.len(), 1);
    let stats = sim.stats(lan);
    Outcome {
        result: replies.into_iter().next().unwrap().1,
        trace: sim.trace_hash(),
        lost: stats.lost,
        reordered: stats.reordered,
    }
}

// At 10 % loss smoltcp's retransmission backoff puts single requests past
// 10 s (the client's default timeout); these tests assert completion, not
// speed, so requests get five minutes of virtual time.
const JOB: &str =
    "get http://10.0.0.2/bytes/3000 --requests 100 --concurrency 4 --verify --timeout-ms 300000";

#[test]
fn hundred_requests_under_loss_and_reordering_all_verified() {
    for seed in [1, 2, 3] {
        let o = fetch(seed, 0.10, 0.05, JOB);
        let r = &o.result;
        assert_eq!(r["ok"], 100, "seed {seed}: {r:#}");
        assert_eq!(r["failed"], 0, "seed {seed}: {r:#}");
        assert_eq!(r["status"]["200"], 100, "seed {seed}: {r:#}");
        assert_eq!(r["body_bytes"], 300_000, "seed {seed}: {r:#}");
        assert!(
            o.lost > 0 && o.reordered > 0,
            "seed {seed}: the segment must misbehave"
        );
        eprintln!(
            "seed {seed}: virtual {} ms, p50 {} us, max {} us",
            r["elapsed_us"].as_u64().unwrap() / 1000,
            r["latency_us"]["p50"],
            r["latency_us"]["max"]
        );
    }
}

#[test]
fn same_seed_same_trace_and_result_other_seed_differs() {
    let a = fetch(42, 0.10, 0.05, JOB);
    let b = fetch(42, 0.10, 0.05, JOB);
    assert_eq!(a.trace, b.trace);
    // Virtual time makes even the latencies identical.
    assert_eq!(a.result, b.result);
    let c = fetch(43, 0.10, 0.05, JOB);
    assert_ne!(a.trace, c.trace);
}

#[test]
fn ipv6_default_page_names_the_instance_and_post_echoes() {
    let o = fetch(
        7,
        0.10,
        0.05,
        "get http://[fd00::2]/ --requests 20 --concurrency 2 --timeout-ms 300000",
    );
    let r = &o.result;
    assert_eq!(r["ok"], 20, "{r:#}");
    assert_eq!(r["body_bytes"], 20 * 1024, "{r:#}");
    let first = &r["first_response"];
    assert_eq!(first["headers"]["x-instance"], "srv", "{first:#}");
    assert!(
        first["body"]
            .as_str()
            .unwrap()
            .starts_with("instance=srv\n"),
        "{first:#}"
    );
    // The sample is the first response alone, not bytes of concurrent ones.
    assert_eq!(first["body"].as_str().unwrap().len(), 1024, "{first:#}");

    let o = fetch(
        8,
        0.10,
        0.0,
        "post http://10.0.0.2/echo --body-size 50000 --requests 10 --timeout-ms 300000",
    );
    assert_eq!(o.result["ok"], 10, "{:#}", o.result);
    assert_eq!(o.result["body_bytes"], 500_000, "{:#}", o.result);
}

#[test]
fn a_dead_server_fails_every_request_instead_of_hanging() {
    // 100 % loss: nothing ever arrives; every request times out.
    let o = fetch(
        5,
        1.0,
        0.0,
        "get http://10.0.0.2/ --requests 3 --concurrency 3 --timeout-ms 2000",
    );
    assert_eq!(o.result["ok"], 0, "{:#}", o.result);
    assert_eq!(o.result["failed"], 3, "{:#}", o.result);
    assert_eq!(o.result["errors"]["timeout"], 3, "{:#}", o.result);
}
