//! A node whose TAP is taken down (`ip link set TAP down`, the way a lab cuts
//! a link) keeps running: its sends are counted as not sent, and it serves
//! again as soon as the TAP is up. Needs root.

mod common;

use common::{lab_name, root_or_skip, run_bounded, Lab};

fn lab_file(name: &str) -> String {
    format!(
        r#"
name = "{name}"
[[segment]]
name = "lan0"
[[node]]
name = "h"
role = "host"
[[node.port]]
segment = "lan0"
addrs = ["10.0.0.2/24"]
[[host]]
name = "cli"
[[host.iface]]
segment = "lan0"
addrs = ["10.0.0.10/24"]
"#
    )
}

#[test]
fn a_node_survives_its_tap_going_down_and_serves_when_it_is_up() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('d', 'a');
    let lab = Lab::up(&name, &lab_file(&name));
    let curl = |expect_ok: bool| {
        let out = lab.exec("cli", 10, &["curl", "-sf", "-m", "3", "http://10.0.0.2/"]);
        assert_eq!(
            out.status.success(),
            expect_ok,
            "curl while the TAP is {}",
            if expect_ok { "up" } else { "down" }
        );
    };
    curl(true);
    let pid = lab.assert_node_alive("h");
    let ns = lab.netns();
    let set = |state: &str| {
        let out = run_bounded(10, "ip", &["-n", &ns, "link", "set", "h-0", state]);
        assert!(out.status.success());
    };
    set("down");
    // The node sends (a SYN of its own client job) into the down TAP.
    let r = lab.ctl("h", &["get", "http://10.0.0.10:9/", "--timeout-ms", "1000"]);
    assert_eq!(r["failed"], 1, "{r}");
    curl(false);
    assert_eq!(
        lab.assert_node_alive("h"),
        pid,
        "the node restarted or died"
    );
    let stats = lab.stats("h");
    assert!(
        stats["named"]["drop.tx_not_sent"].as_u64().unwrap_or(0) > 0,
        "{stats:#}"
    );
    set("up");
    assert!(common::wait_until(10, || lab
        .exec("cli", 10, &["curl", "-sf", "-m", "2", "http://10.0.0.2/"])
        .status
        .success()));
    assert_eq!(lab.assert_node_alive("h"), pid);
    lab.down();
}
