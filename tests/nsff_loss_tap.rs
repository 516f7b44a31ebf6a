//! The RFC 8677 chain over real TAPs with packet loss on the fwd fabric:
//! kernel curl in the client namespace asks nSFF1 for `www.example2.com` by
//! name while `svcroute lab link fab loss 10` (then 30) drops a random
//! 10 %, then 30 %, of the frames that enter the fabric bridge `br-fab`
//! (both directions: data and NACKs; an nftables bridge rule in the lab
//! namespace, docs/lab.md "Breaking a lab"). Every GET and every echoed POST must
//! come through byte-exact, and the nSFFs' transport counters must show
//! retransmissions (the loss hit), and `lab status` that the rule dropped
//! frames. Behaviour only, no timing. Needs root and `nft` (skips otherwise).
//!
//! ```text
//!   client (kernel) 10.0.1.10 ── cli ── nsff1 ── n1 ── f1 ── fab ── f2 ── n2 ── nsff2 ── sfs ── sf2
//!                                       10.0.1.1       │     (loss)                10.0.2.1     10.0.2.10
//!                                                      nrs ── nr
//! ```
//!
//! Links: f1 → NR 0, NR → f1 1, f1 → nSFF1 2, nSFF1 → f1 3, f2 → nSFF2 4,
//! nSFF2 → f2 5, f1 → f2 10, f2 → f1 11.
//!
//! The CI test moves 2 MB GETs and POSTs at 10 % and 1 MB at 30 % (about
//! 30 s on 2 cores). The 10 MB transactions of the issue are the ignored
//! test (`cargo test --release --test nsff_loss_tap -- --ignored`): at 30 %
//! loss a 10 MB transaction takes minutes (the transport halves its window
//! once per lossy window, see docs/nsff.md "Limits").

mod common;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;

use common::{have, lab_name, root_or_skip, svcroute, text, wait_until, Lab};

/// One lab of this file at a time (each has six node processes).
static LABS: Mutex<()> = Mutex::new(());

/// The chain of `common::chain`, but with no `nr_links` on the switches.
/// With them (that module's lab) this test failed 2 runs in 5, nSFF2
/// showing no retransmission for a GET; most likely lost hellos made the
/// switches report the lossy fabric down, so the NR, not the transport,
/// decided the run (not investigated further).
fn lab_file(name: &str) -> String {
    format!(
        r#"name = "{name}"
keys = "none"  # unkeyed on purpose: this test speaks to (or as) unkeyed nodes
[[segment]]
name = "cli"
[[segment]]
name = "n1"
[[segment]]
name = "nrs"
[[segment]]
name = "fab"
[[segment]]
name = "n2"
[[segment]]
name = "sfs"

[[node]]
name = "f1"
role = "fwd"
[[node.port]]
segment = "n1"
[[node.port]]
segment = "nrs"
[[node.port]]
segment = "fab"
[node.config]
node_id = 1
link_ids = [2, 0, 10]

[[node]]
name = "f2"
role = "fwd"
[[node.port]]
segment = "fab"
[[node.port]]
segment = "n2"
[node.config]
node_id = 2
link_ids = [11, 4]

[[node]]
name = "nr"
role = "nr"
[[node.port]]
segment = "nrs"
addrs = ["10.0.9.1/24"]
[node.config]
rest_port = 0
[node.config.self_attach]
at = "f1"
link_in = 0
link_out = 1
[[node.config.attach]]
nsff = 1
at = "f1"
link_in = 2
link_out = 3
[[node.config.attach]]
nsff = 2
at = "f2"
link_in = 4
link_out = 5
[[node.config.link]]
from = "f1"
to = "f2"
id = 10
[[node.config.link]]
from = "f2"
to = "f1"
id = 11

[[node]]
name = "nsff1"
role = "nsff"
[[node.port]]
segment = "n1"
[[node.port]]
segment = "cli"
addrs = ["10.0.1.1/24"]
[node.config]
nsff_id = 1
link_in = 2
link_out = 3
nr_links = [3, 0]

[[node]]
name = "nsff2"
role = "nsff"
[[node.port]]
segment = "n2"
[[node.port]]
segment = "sfs"
addrs = ["10.0.2.1/24"]
[node.config]
nsff_id = 2
link_in = 4
link_out = 5
nr_links = [5, 11, 0]
[[node.config.sf]]
fqdn = "www.example2.com"
addr = "10.0.2.10"

[[node]]
name = "sf2"
role = "host"
[[node.port]]
segment = "sfs"
addrs = ["10.0.2.10/24"]
[node.config]
instance = "sf2"
# A 10 MB echo at 30 % loss right after a 10 MB GET on the same reused SF
# connection runs past the default 120 s. (The host no longer counts a
# transfer in progress as idle; the margin stays for the ignored test.)
idle_timeout_s = 900

[[host]]
name = "client"
[[host.iface]]
segment = "cli"
addrs = ["10.0.1.10/24"]
"#
    )
}

const NAME: &str = "www.example2.com";

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("svcroute-loss-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("creating the temp dir");
        Self(p)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `svcroute lab link --lab <lab> fab ARGS...`, asserted to succeed.
#[track_caller]
fn fabric(lab: &Lab, args: &[&str]) {
    let mut all = vec!["lab", "link", "--lab", lab.name(), "fab"];
    all.extend_from_slice(args);
    let out = svcroute(&all);
    assert!(
        out.status.success(),
        "lab link fab {args:?}: {}",
        text(&out)
    );
}

/// Frames the fabric's loss rule has dropped since it was set (`lab status`).
fn fabric_dropped(lab: &Lab) -> u64 {
    let out = svcroute(&["lab", "status", "--json", lab.name()]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("lab status --json is JSON");
    let fab = v[0]["impairments"]
        .as_array()
        .and_then(|a| a.iter().find(|i| i["link"] == "fab").cloned())
        .expect("lab status shows the fabric's loss");
    fab["dropped"].as_u64().expect("a drop count")
}

/// The transport totals (`ctl <nsff> txns`) and endpoint stats of a node.
fn txns(lab: &Lab, node: &str) -> Value {
    lab.ctl(node, &["txns"])
}

/// Data packets `node` sent again (NACK-driven + RTO) so far.
fn resent(v: &Value) -> u64 {
    v["totals"]["retransmits"].as_u64().unwrap_or(0)
        + v["totals"]["rto_retransmits"].as_u64().unwrap_or(0)
}

/// An HTTP exchange by kernel curl: status, response head, body file.
struct Reply {
    status: u16,
    head: String,
    body: Vec<u8>,
    curl: String,
}

impl Reply {
    fn has_header(&self, name: &str, value: &str) -> bool {
        self.head.lines().any(|l| {
            l.split_once(':')
                .is_some_and(|(k, v)| k.trim().eq_ignore_ascii_case(name) && v.trim() == value)
        })
    }

    fn describe(&self) -> String {
        format!(
            "status {}, {} body bytes, head {:?}, curl {:?}",
            self.status,
            self.body.len(),
            self.head.lines().next().unwrap_or(""),
            self.curl.trim()
        )
    }
}

/// `curl` from the client namespace to `http://www.example2.com<path>` at
/// nSFF1 (`--resolve`), optionally POSTing the file `post`. Generous
/// timeouts: the assertions are about what arrives, not when.
fn curl(lab: &Lab, dir: &TempDir, tag: &str, path: &str, post: Option<&Path>) -> Reply {
    let url = format!("http://{NAME}{path}");
    let resolve = format!("{NAME}:80:10.0.1.1");
    let head = dir.file(&format!("{tag}.head"));
    let body = dir.file(&format!("{tag}.body"));
    let _ = std::fs::remove_file(&head);
    let _ = std::fs::remove_file(&body);
    let head_s = head.to_string_lossy().into_owned();
    let body_s = body.to_string_lossy().into_owned();
    let data = post.map(|p| format!("@{}", p.display()));
    let mut args = vec![
        "curl",
        "-sS",
        "-m",
        "400",
        "--resolve",
        &resolve,
        "-D",
        &head_s,
        "-o",
        &body_s,
        "-w",
        "%{http_code}",
    ];
    if let Some(d) = &data {
        args.extend([
            "-H",
            "Content-Type: application/octet-stream",
            "--data-binary",
            d.as_str(),
        ]);
    }
    args.push(&url);
    let out = lab.exec("client", 420, &args);
    Reply {
        status: String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0),
        head: String::from_utf8_lossy(&std::fs::read(&head).unwrap_or_default()).into_owned(),
        body: std::fs::read(&body).unwrap_or_default(),
        curl: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The first offset where `got` differs from `want` (length included).
fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
    got.iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .or_else(|| (got.len() != want.len()).then(|| got.len().min(want.len())))
}

/// `n` bytes of the host's `/bytes/<n>` pattern.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|k| (k % 251) as u8).collect()
}

/// `n` pseudo-random bytes (xorshift64*, fixed seed): a body no pattern or
/// stale buffer reproduces by accident.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

/// GET `/bytes/<n>`: 200 from `sf2`, exactly the pattern.
#[track_caller]
fn get_exact(lab: &Lab, dir: &TempDir, tag: &str, n: usize) {
    let r = curl(lab, dir, tag, &format!("/bytes/{n}"), None);
    assert_eq!(r.status, 200, "{tag}: {}", r.describe());
    assert!(r.has_header("x-instance", "sf2"), "{tag}: {}", r.describe());
    let diff = first_difference(&r.body, &pattern(n));
    assert_eq!(
        diff,
        None,
        "{tag}: body differs at {diff:?}: {}",
        r.describe()
    );
}

/// POST `/echo` with `n` pseudo-random bytes: 200 from `sf2`, the same
/// bytes back.
#[track_caller]
fn echo_exact(lab: &Lab, dir: &TempDir, tag: &str, n: usize, seed: u64) {
    let body = noise(n, seed);
    let file = dir.file(&format!("{tag}.post"));
    std::fs::write(&file, &body).expect("writing the POST body");
    let r = curl(lab, dir, tag, "/echo", Some(&file));
    assert_eq!(r.status, 200, "{tag}: {}", r.describe());
    assert!(r.has_header("x-instance", "sf2"), "{tag}: {}", r.describe());
    let diff = first_difference(&r.body, &body);
    assert_eq!(
        diff,
        None,
        "{tag}: echo differs at {diff:?}: {}",
        r.describe()
    );
}

/// One loss rate: a small GET, a GET of `big` bytes and an echoed POST of
/// `big` bytes, all byte-exact; the rule dropped frames and both nSFFs
/// retransmitted (nSFF2 sends the GET's response, nSFF1 the POST's
/// request).
fn at_loss(lab: &Lab, dir: &TempDir, percent: u32, big: usize) {
    fabric(lab, &["loss", &percent.to_string()]);
    let t1 = txns(lab, "nsff1");
    let t2 = txns(lab, "nsff2");

    get_exact(lab, dir, &format!("small{percent}"), 1000);
    get_exact(lab, dir, &format!("get{percent}"), big);
    let m1 = txns(lab, "nsff1");
    let m2 = txns(lab, "nsff2");
    assert!(
        resent(&m2) > resent(&t2),
        "{percent} %: nsff2 sent the GET's response without a retransmission: {t2} -> {m2}"
    );
    echo_exact(
        lab,
        dir,
        &format!("post{percent}"),
        big,
        0x5eed + u64::from(percent),
    );
    let e1 = txns(lab, "nsff1");
    let e2 = txns(lab, "nsff2");
    assert!(
        resent(&e1) > resent(&m1),
        "{percent} %: nsff1 sent the POST's request without a retransmission: {m1} -> {e1}"
    );
    assert!(
        resent(&e2) > resent(&m2),
        "{percent} %: nsff2 sent the echo without a retransmission: {m2} -> {e2}"
    );
    let dropped = fabric_dropped(lab);
    assert!(dropped > 0, "{percent} %: the loss rule dropped nothing");
    eprintln!(
        "{percent} % loss: the fabric dropped {dropped} frames; resent nsff1 {} nsff2 {}",
        resent(&e1) - resent(&t1),
        resent(&e2) - resent(&t2)
    );
    // Every transaction completed; none failed.
    for (node, before, after) in [("nsff1", &t1, &e1), ("nsff2", &t2, &e2)] {
        assert_eq!(
            after["stats"]["failed"], before["stats"]["failed"],
            "{node}: a transaction failed at {percent} %: {after}"
        );
    }
    assert_eq!(
        e1["stats"]["opened"].as_u64().unwrap() - t1["stats"]["opened"].as_u64().unwrap(),
        3,
        "{e1}"
    );
    assert_eq!(
        e2["stats"]["accepted"].as_u64().unwrap() - t2["stats"]["accepted"].as_u64().unwrap(),
        3,
        "{e2}"
    );
}

fn run(tag: char, sizes: &[(u32, usize)]) {
    if !root_or_skip() {
        return;
    }
    if !have("nft") || !have("curl") {
        eprintln!("SKIP: needs nft and curl");
        return;
    }
    let _one = LABS.lock().unwrap_or_else(|e| e.into_inner());
    let name = lab_name('q', tag);
    let lab = Lab::up(&name, &lab_file(&name));
    let dir = TempDir::new(&name);
    // Without loss first: the name is resolved and cached (registration and
    // path request cross the fabric, and are not retried by the test).
    let ok = wait_until(30, || curl(&lab, &dir, "warm", "/", None).status == 200);
    assert!(ok, "no 200 through the chain before any loss");
    for &(percent, big) in sizes {
        at_loss(&lab, &dir, percent, big);
    }
    // The fabric heals: a request without loss still works, and every node
    // is still the process it was.
    fabric(&lab, &["clear"]);
    get_exact(&lab, &dir, "after", 100_000);
    for node in ["f1", "f2", "nr", "nsff1", "nsff2", "sf2"] {
        lab.assert_node_alive(node);
    }
    let t1 = txns(&lab, "nsff1");
    assert_eq!(t1["stats"]["failed"], 0, "{t1}");
    lab.down();
}

#[test]
fn fabric_loss_10_then_30_percent_every_transaction_byte_exact() {
    run('a', &[(10, 2_000_000), (30, 1_000_000)]);
}

/// The issue's sizes: 10 MB each way at 10 % and at 30 % (minutes).
#[test]
#[ignore = "10 MB at 30 % loss takes minutes; run with --ignored"]
fn fabric_loss_10_mb_at_10_and_30_percent() {
    run('f', &[(10, 10_000_000), (30, 10_000_000)]);
}
