//! The nsff role over real TAPs: `curl` in a kernel namespace asks nSFF1 for
//! `www.example2.com` by name; nSFF1 resolves it at the NR and carries the
//! request over two fwd nodes to nSFF2, whose SF (a host-role node, instance
//! `sf2`) answers. An unknown name gets 502. Needs root (skips otherwise).
//!
//! ```text
//!   client (kernel) 10.0.1.10 ── cli ── nsff1 ── n1 ── f1 ── fab ── f2 ── n2 ── nsff2 ── sfs ── sf2
//!                                       10.0.1.1       │                          10.0.2.1     10.0.2.10
//!                                                      nrs ── nr
//! ```
//!
//! Links: f1 → NR 0, NR → f1 1, f1 → nSFF1 2, nSFF1 → f1 3, f2 → nSFF2 4,
//! nSFF2 → f2 5, f1 → f2 10, f2 → f1 11.

mod common;

use common::{lab_name, root_or_skip, wait_until, Lab};

fn lab_file(name: &str) -> String {
    format!(
        r#"name = "{name}"
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

[[host]]
name = "client"
[[host.iface]]
segment = "cli"
addrs = ["10.0.1.10/24"]
"#
    )
}

/// `curl` in the client namespace for `name` at nSFF1: (status, headers + body).
fn curl(lab: &Lab, name: &str, path: &str) -> (u16, String) {
    let url = format!("http://{name}{path}");
    let resolve = format!("{name}:80:10.0.1.1");
    let out = lab.exec(
        "client",
        20,
        &[
            "curl",
            "-sS",
            "-i",
            "-m",
            "10",
            "--resolve",
            &resolve,
            "-w",
            "\n%{http_code}",
            &url,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let Some((body, code)) = text.rsplit_once('\n') else {
        return (0, text);
    };
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

#[test]
fn curl_by_name_through_the_chain() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('n', 's');
    let lab = Lab::up(&name, &lab_file(&name));
    let mut last = (0, String::new());
    let ok = wait_until(15, || {
        last = curl(&lab, "www.example2.com", "/");
        last.0 == 200
    });
    assert!(ok, "no 200 through the chain: {last:?}");
    assert!(
        last.1.to_ascii_lowercase().contains("x-instance: sf2"),
        "{}",
        last.1
    );
    // A larger body, byte count checked.
    let (status, text) = curl(&lab, "www.example2.com", "/bytes/1000000");
    assert_eq!(status, 200, "{text}");
    assert!(text.len() > 1_000_000, "{}", text.len());
    // Explicit proxy: the absolute-form target names the service.
    let out = lab.exec(
        "client",
        20,
        &[
            "curl",
            "-sS",
            "-i",
            "-m",
            "10",
            "-x",
            "http://10.0.1.1:3128",
            "http://www.example2.com/",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("x-instance: sf2"),
        "{text}"
    );
    // Unknown name.
    let (status, text) = curl(&lab, "www.nowhere.example", "/");
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("unknown service name"), "{text}");
    let v = lab.ctl("nsff1", &["txns"]);
    assert!(v.get("live").is_some(), "{v}");
    lab.down();
}
