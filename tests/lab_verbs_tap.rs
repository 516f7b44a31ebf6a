//! The break verbs of `svcroute lab` by real use: `lab link` cuts, heals
//! and degrades segments, node ports and host interfaces (nftables rules
//! in the lab namespace's bridges), `lab node` kills and brings back a
//! node, `lab host` restarts a kernel host's server, and `[[impair]]` in a
//! lab file is in force from `up` on. Needs root (skips otherwise).
//!
//! Every test runs the small host lab under a name of its own
//! (`v<pid % 1000><letter>`); the [`Lab`] guard takes it down however the
//! test ends.
//!
//! ```text
//!   client (kernel) 10.0.0.10 ─┐
//!   h1  (host node) 10.0.0.2  ─┼─ lan0 (bridge br-lan0 in svl-<lab>)
//!   web (kernel)    10.0.0.20 ─┘   python3 -m http.server 8000
//! ```

mod common;

use serde_json::Value;

use common::{alive, lab_name, root_or_skip, svcroute, text, Lab};

const HOST_LAB: &str = include_str!("../examples/labs/host.toml");

/// The host lab renamed to `name`, with `extra` appended.
fn host_lab(name: &str, extra: &str) -> String {
    let renamed = HOST_LAB.replacen("name = \"host\"", &format!("name = \"{name}\""), 1);
    assert_ne!(renamed, HOST_LAB, "the host lab's name line moved");
    format!("{renamed}\n{extra}")
}

const H1: &str = "http://10.0.0.2/";
const WEB: &str = "http://10.0.0.20:8000/";

/// Whether `curl URL` from the client gets a 2xx answer (3 s to connect
/// and answer: a cut link never does).
fn fetches(lab: &Lab, url: &str) -> bool {
    lab.exec(
        "client",
        10,
        &["curl", "-gsf", "-o", "/dev/null", "-m", "3", url],
    )
    .status
    .success()
}

/// `svcroute lab VERB --lab <lab> ARGS...` (args[0] is VERB), asserted
/// to succeed; its output.
#[track_caller]
fn verb(lab: &Lab, args: &[&str]) -> String {
    lab.verb(args[0], &args[1..])
}

/// `svcroute lab <verb...> --lab <lab>`, asserted to fail; its message.
#[track_caller]
fn refused(lab: &Lab, args: &[&str]) -> String {
    let mut all = vec!["lab", args[0], "--lab", lab.name()];
    all.extend_from_slice(&args[1..]);
    let out = svcroute(&all);
    assert!(
        !out.status.success(),
        "lab {args:?} succeeded:\n{}",
        text(&out)
    );
    text(&out)
}

/// `lab status --json` of the lab.
#[track_caller]
fn status(lab: &Lab) -> Value {
    let out = svcroute(&["lab", "status", "--json", lab.name()]);
    assert!(out.status.success(), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("status --json is JSON");
    v[0].clone()
}

/// The impairment on `link` in `lab status --json`, if any.
fn impairment(lab: &Lab, link: &str) -> Option<Value> {
    status(lab)["impairments"]
        .as_array()?
        .iter()
        .find(|i| i["link"] == link)
        .cloned()
}

fn node_status(lab: &Lab, node: &str) -> Value {
    status(lab)["nodes"]
        .as_array()
        .and_then(|v| v.iter().find(|n| n["name"] == node).cloned())
        .unwrap_or(Value::Null)
}

#[test]
fn link_down_cuts_a_segment_or_a_port_and_up_heals_it() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('v', 'd');
    let lab = Lab::up(&name, &host_lab(&name, ""));
    assert!(fetches(&lab, H1) && fetches(&lab, WEB));

    // The whole segment: nothing crosses it.
    let out = verb(&lab, &["link", "lan0", "down"]);
    assert!(
        out.contains("segment lan0") && out.contains("down"),
        "{out}"
    );
    assert!(!fetches(&lab, H1), "curl crossed a cut segment");
    assert!(!fetches(&lab, WEB), "curl crossed a cut segment");
    let i = impairment(&lab, "lan0").expect("status shows the cut");
    assert_eq!(
        (i["kind"].as_str(), i["down"].as_bool()),
        (Some("segment"), Some(true))
    );
    assert!(i["dropped"].as_u64() > Some(0), "nothing counted: {i}");
    let table = text(&svcroute(&["lab", "status", lab.name()]));
    assert!(
        table.contains("LINK") && table.contains("lan0  segment  down"),
        "{table}"
    );
    verb(&lab, &["link", "lan0", "up"]);
    assert!(
        impairment(&lab, "lan0").is_none(),
        "a healed link is no impairment"
    );
    assert!(
        fetches(&lab, H1) && fetches(&lab, WEB),
        "up did not heal lan0"
    );

    // One node's port: h1 is cut off both ways, the kernel hosts still
    // talk to each other across the same bridge.
    verb(&lab, &["link", "h1:0", "down"]);
    assert!(!fetches(&lab, H1), "client reached h1 through its cut port");
    let v = lab.ctl("h1", &["get", WEB]);
    assert_eq!(v["ok"], 0, "h1 fetched through its cut port: {v}");
    assert!(fetches(&lab, WEB), "cutting h1:0 cut web too");
    // The same port by its segment name.
    let out = verb(&lab, &["link", "h1:lan0", "up"]);
    assert!(out.contains("h1:0"), "{out}");
    assert!(fetches(&lab, H1));
    assert_eq!(lab.ctl("h1", &["get", WEB])["ok"], 1);

    // Bad input is named, and changes nothing.
    for (args, want) in [
        (&["link", "lan9", "down"][..], "no segment \"lan9\""),
        (
            &["link", "h1:3", "down"][..],
            "node \"h1\" has no port \"3\"",
        ),
        (
            &["link", "nobody:0", "down"][..],
            "no node or host \"nobody\"",
        ),
        (&["link", "lan0", "loss", "150"][..], "loss \"150\""),
        (
            &["link", "lan0", "loss", "5", "delay", "10"][..],
            "lan0 is a segment",
        ),
        (
            &["link", "h1:0", "loss", "0", "latency", "10"][..],
            "unknown impairment \"latency\"",
        ),
    ] {
        let msg = refused(&lab, args);
        assert!(msg.contains(want), "{args:?}: {msg}");
    }
    assert_eq!(status(&lab)["impairments"], Value::Array(Vec::new()));
    lab.down();
}

#[test]
fn loss_100_on_a_host_iface_blocks_it_and_clear_restores_it() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('v', 'l');
    let lab = Lab::up(&name, &host_lab(&name, ""));
    assert!(fetches(&lab, WEB));

    let out = verb(&lab, &["link", "client:eth0", "loss", "100"]);
    assert!(out.contains("loss 100%"), "{out}");
    assert!(!fetches(&lab, WEB), "curl got through 100% loss");
    assert!(!fetches(&lab, H1), "curl got through 100% loss");
    // Only the client's link: h1 still reaches web.
    assert_eq!(lab.ctl("h1", &["get", WEB])["ok"], 1);
    let i = impairment(&lab, "client:eth0").expect("status shows the loss");
    assert_eq!(i["loss_pct"].as_f64(), Some(100.0), "{i}");
    assert_eq!(i["down"], false, "{i}");
    assert!(i["dropped"].as_u64() > Some(0), "{i}");

    // A cut on top, then clear takes both away; `client:0` is the same link.
    verb(&lab, &["link", "client:0", "down"]);
    let i = impairment(&lab, "client:eth0").expect("one entry per link");
    assert_eq!(
        (i["down"].as_bool(), i["loss_pct"].as_f64()),
        (Some(true), Some(100.0))
    );
    verb(&lab, &["link", "client:eth0", "clear"]);
    assert!(impairment(&lab, "client:eth0").is_none());
    assert!(
        fetches(&lab, WEB) && fetches(&lab, H1),
        "clear did not restore"
    );
    lab.down();
}

#[test]
fn a_killed_node_is_not_alive_and_start_brings_it_back_serving() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('v', 'k');
    let lab = Lab::up(&name, &host_lab(&name, ""));
    let old = lab.assert_node_alive("h1");

    let out = verb(&lab, &["node", "h1", "kill"]);
    assert!(out.contains("killed"), "{out}");
    assert!(!alive(old), "h1 survived `lab node kill`");
    let n = node_status(&lab, "h1");
    assert_eq!(
        (n["alive"].as_bool(), n["ready"].as_bool()),
        (Some(false), Some(false)),
        "{n}"
    );
    assert!(!fetches(&lab, H1), "a killed node answered");
    let msg = text(&svcroute(&[
        "lab",
        "node",
        "--lab",
        lab.name(),
        "h1",
        "stop",
    ]));
    assert!(msg.contains("not running"), "{msg}");

    let out = verb(&lab, &["node", "h1", "start"]);
    assert!(out.contains("ready"), "{out}");
    let new = lab.assert_node_alive("h1");
    assert_ne!(new, old);
    let n = node_status(&lab, "h1");
    assert_eq!(
        (n["alive"].as_bool(), n["ready"].as_bool()),
        (Some(true), Some(true)),
        "{n}"
    );
    assert_eq!(n["pid"].as_u64(), Some(new), "state.json has the new pid");
    assert!(fetches(&lab, H1), "the restarted node does not serve");
    // Started twice: refused, naming the running pid.
    let msg = refused(&lab, &["node", "h1", "start"]);
    assert!(
        msg.contains("is running") && msg.contains(&new.to_string()),
        "{msg}"
    );
    // Its log kept what came before.
    let log = std::fs::read_to_string(lab.run_dir().join("h1.log")).unwrap();
    assert!(log.contains("==> svcroute lab node start"), "{log}");

    // restart: a graceful stop, a new process, serving.
    verb(&lab, &["node", "h1", "restart"]);
    let third = lab.assert_node_alive("h1");
    assert!(third != new && !alive(new));
    assert!(fetches(&lab, H1));

    // A kernel host's command restarts and serves again.
    let before = status(&lab)["hosts"][1]["commands"][0]["pid"].as_u64();
    let out = verb(&lab, &["host", "web", "restart"]);
    assert!(out.contains("wait_tcp targets accept"), "{out}");
    let after = status(&lab)["hosts"][1]["commands"][0]["pid"].as_u64();
    assert!(before.is_some() && after.is_some() && before != after);
    assert!(!alive(before.unwrap()));
    assert!(fetches(&lab, WEB), "web does not serve after restart");

    // Names that are not there are named.
    let msg = refused(&lab, &["node", "web", "kill"]);
    assert!(
        msg.contains("no node \"web\"") && msg.contains("lab host"),
        "{msg}"
    );
    let msg = refused(&lab, &["host", "nobody", "restart"]);
    assert!(msg.contains("no host \"nobody\""), "{msg}");
    lab.down();
}

#[test]
fn an_impair_table_in_the_lab_file_is_in_force_at_up() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('v', 'i');
    let lab = Lab::up(
        &name,
        &host_lab(&name, "[[impair]]\nlink = \"h1:0\"\ndown = true\n"),
    );
    let i = impairment(&lab, "h1:0").expect("status shows the file's impairment");
    assert_eq!(
        (i["kind"].as_str(), i["down"].as_bool()),
        (Some("node port"), Some(true))
    );
    assert!(!fetches(&lab, H1), "h1:0 is declared down");
    assert!(fetches(&lab, WEB), "only h1:0 is declared down");
    // The client's resolution of h1 spent its probes in the cut: were it
    // left to fail after the heal, the next connect would get "No route
    // to host". `up` forgets it.
    let unresolved = |lab: &Lab| {
        let out = lab.exec("client", 10, &["ip", "neigh", "show", "10.0.0.2"]);
        let t = text(&out);
        t.contains("INCOMPLETE") || t.contains("FAILED")
    };
    assert!(
        unresolved(&lab),
        "the client never tried h1 through the cut"
    );
    verb(&lab, &["link", "h1:0", "up"]);
    assert!(!unresolved(&lab), "up kept the failed resolution of h1");
    assert!(fetches(&lab, H1), "up did not heal the file's cut");
    lab.down();
}

/// The smallest round trip of `ping -c COUNT` from the client to `addr`, in ms.
fn min_rtt_ms(lab: &Lab, addr: &str, count: &str) -> f64 {
    let out = lab.exec(
        "client",
        30,
        &["ping", "-n", "-c", count, "-i", "0.3", "-W", "5", addr],
    );
    let t = text(&out);
    assert!(out.status.success(), "ping {addr}: {t}");
    let line = t
        .lines()
        .find(|l| l.contains("min/avg/max"))
        .expect("ping summary");
    let nums = line.split('=').nth(1).expect("rtt values").trim();
    nums.split('/').next().unwrap().parse().expect("min rtt")
}

#[test]
fn a_node_port_shape_from_the_file_delays_survives_a_restart_and_corrupt_breaks_tcp() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('v', 's');
    let lab = Lab::up(
        &name,
        &host_lab(&name, "[[impair]]\nlink = \"h1:0\"\ndelay = 300\n"),
    );
    // Every answer h1 sends waits 300 ms: no round trip is shorter.
    assert!(min_rtt_ms(&lab, "10.0.0.2", "3") >= 300.0);
    let i = impairment(&lab, "h1:0").expect("status shows the shape");
    assert_eq!(i["describe"], "delay 300ms", "{i}");
    let delayed = common::named(&lab.stats("h1"))
        .get("impair.delayed")
        .copied()
        .unwrap_or(0);
    assert!(delayed >= 3, "h1 counted {delayed} delayed frames");

    // A new process gets the recorded shape again.
    verb(&lab, &["node", "h1", "restart"]);
    assert_eq!(
        lab.ctl("h1", &["impair", "0"])["shape"],
        serde_json::json!(["delay", "300"])
    );
    assert!(min_rtt_ms(&lab, "10.0.0.2", "2") >= 300.0);

    // Corrupt every frame h1 sends (the loss replaces the whole shape):
    // the client's TCP never gets a valid segment from h1.
    let out = verb(&lab, &["link", "h1:0", "loss", "0", "corrupt", "100"]);
    assert!(out.contains("corrupt 100%"), "{out}");
    assert!(!fetches(&lab, H1), "curl got through 100% corruption");
    assert!(common::named(&lab.stats("h1"))["impair.corrupted"] > 0);
    verb(&lab, &["link", "h1:0", "clear"]);
    assert_eq!(
        lab.ctl("h1", &["impair", "0"])["shape"],
        serde_json::json!([])
    );
    assert!(fetches(&lab, H1), "clear did not restore h1");
    assert!(impairment(&lab, "h1:0").is_none());

    // Shapes act in a node's phy layer: not on a kernel's veth.
    let msg = refused(&lab, &["link", "client:eth0", "loss", "0", "delay", "10"]);
    assert!(
        msg.contains("host iface") && msg.contains("NODE:PORT"),
        "{msg}"
    );
    lab.down();
}
