//! The RFC 8677 chain lab that the nSFF tests share, and what they do with
//! it: bring it up in variants ([`Opts`]), curl through it by name, read
//! the NR's table and node counters, cut fabric links.
//!
//! ```text
//!   client (kernel) 10.0.1.10 ── cli ── nsff1 ── n1 ── f1 ── fab ── f2 ── n2 ── nsff2 ── sfs ── sf2
//!                                       10.0.1.1 │     │                          10.0.2.1     10.0.2.10
//!                                        10.0.3.1 s1    nrs ── nr
//!                                                 │                                            │
//!                                       sf1 10.0.3.10 (Opts::sf1 only)             tls2 10.0.2.20 (Opts::tls only)
//! ```
//!
//! With [`Opts::tls`], kernel hosts serve HTTPS (`openssl s_server -WWW`,
//! files of their own directory) and HTTP (`python3 -m http.server`) for
//! a name: `tls2` (10.0.2.20, on nSFF2's SF segment) serves
//! `www.example2.com` instead of `sf2`, and `tls1` (10.0.1.20, on the
//! client segment, nSFF1's SF port) serves `www.example.com` locally at
//! nSFF1.
//!
//! Links: f1 → NR 0, NR → f1 1, f1 → nSFF1 2, nSFF1 → f1 3, f2 → nSFF2 4,
//! nSFF2 → f2 5, f1 → f2 10, f2 → f1 11. Both switches send their link
//! events to the NR (f1 over 0, f2 over 11 and 0).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use super::{named, wait_until, Lab};

/// What differs between the chain labs.
#[derive(Default)]
pub(crate) struct Opts {
    /// SF1 `www.example.com` (host node, instance `sf1`) behind nSFF1's
    /// third port, and a second instance of that name at nSFF2 (`sf2`).
    pub(crate) sf1: bool,
    /// Extra `[node.config]` text of nSFF1 (keys first, then tables).
    pub(crate) nsff1: &'static str,
    /// Extra names nSFF2's SF `sf2` serves.
    pub(crate) nsff2_names: &'static [&'static str],
    /// TLS SFs (see the module doc): the directory with `cert.pem`,
    /// `key.pem` and the hosts' document roots `tls1/` and `tls2/`.
    /// Not with `sf1` (both serve `www.example.com` at nSFF1).
    pub(crate) tls: Option<String>,
    /// Extra lab text appended at the end (kernel hosts, segments).
    pub(crate) extra: String,
    /// Extra `[node.config]` keys of the NR (e.g. table caps).
    pub(crate) nr: &'static str,
    /// The NR's orchestration REST port on 10.0.9.1 (0, the default: none).
    pub(crate) nr_rest_port: u16,
    /// The client segment has IPv6 too (nSFF1 fd00:1::1/64, client
    /// fd00:1::10/64) and the client's default routes go via nSFF1
    /// (10.0.1.1, fd00:1::1): for transparent interception.
    pub(crate) gateway: bool,
}

pub(crate) fn lab_file(name: &str, o: &Opts) -> String {
    assert!(!(o.sf1 && o.tls.is_some()), "Opts::sf1 and Opts::tls");
    let ex2 = if o.tls.is_some() {
        "10.0.2.20"
    } else {
        "10.0.2.10"
    };
    let (rest_port, nr) = (o.nr_rest_port, o.nr);
    let mut s = format!(
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
nr_links = [0]

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
nr_links = [11, 0]

[[node]]
name = "nr"
role = "nr"
[[node.port]]
segment = "nrs"
addrs = ["10.0.9.1/24"]
[node.config]
rest_port = {rest_port}
{nr}
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
addr = "{ex2}"
"#
    );
    let mut extra: Vec<&str> = o.nsff2_names.to_vec();
    if o.sf1 {
        extra.push("www.example.com");
    }
    for fqdn in extra {
        s += &format!("[[node.config.sf]]\nfqdn = \"{fqdn}\"\naddr = \"10.0.2.10\"\n");
    }
    s += r#"
[[node]]
name = "sf2"
role = "host"
[[node.port]]
segment = "sfs"
addrs = ["10.0.2.10/24"]
[node.config]
instance = "sf2"

[[node]]
name = "nsff1"
role = "nsff"
[[node.port]]
segment = "n1"
[[node.port]]
segment = "cli"
"#;
    s += if o.gateway {
        "addrs = [\"10.0.1.1/24\", \"fd00:1::1/64\"]\n"
    } else {
        "addrs = [\"10.0.1.1/24\"]\n"
    };
    if o.sf1 {
        s += "[[node.port]]\nsegment = \"s1\"\naddrs = [\"10.0.3.1/24\"]\n";
    }
    s += "[node.config]\nnsff_id = 1\nlink_in = 2\nlink_out = 3\nnr_links = [3, 0]\n";
    if o.sf1 {
        s += "sf_port = 2\n";
    }
    s += o.nsff1;
    if o.sf1 {
        s += r#"
[[node.config.sf]]
fqdn = "www.example.com"
addr = "10.0.3.10"

[[segment]]
name = "s1"

[[node]]
name = "sf1"
role = "host"
[[node.port]]
segment = "s1"
addrs = ["10.0.3.10/24"]
[node.config]
instance = "sf1"
"#;
    }
    if let Some(dir) = &o.tls {
        s += r#"
[[node.config.sf]]
fqdn = "www.example.com"
addr = "10.0.1.20"
"#;
        for (host, seg, addr) in [("tls1", "cli", "10.0.1.20"), ("tls2", "sfs", "10.0.2.20")] {
            s += &tls_host(dir, host, seg, addr);
        }
    }
    s += r#"
[[host]]
name = "client"
[[host.iface]]
segment = "cli"
"#;
    s += if o.gateway {
        "addrs = [\"10.0.1.10/24\", \"fd00:1::10/64\"]\ngateways = [\"10.0.1.1\", \"fd00:1::1\"]\n"
    } else {
        "addrs = [\"10.0.1.10/24\"]\n"
    };
    s += &o.extra;
    s
}

/// A kernel host `host` at `addr` on segment `seg` serving the files of
/// `<dir>/<host>/` over HTTPS (port 443, `<dir>/cert.pem`) and HTTP (80).
fn tls_host(dir: &str, host: &str, seg: &str, addr: &str) -> String {
    format!(
        r#"
[[host]]
name = "{host}"
commands = [
  "cd {dir}/{host} && exec openssl s_server -quiet -WWW -accept 443 -cert {dir}/cert.pem -key {dir}/key.pem",
  "cd {dir}/{host} && exec /usr/bin/python3 -m http.server 80 --bind {addr}",
]
wait_tcp = ["{addr}:443", "{addr}:80"]
[[host.iface]]
segment = "{seg}"
addrs = ["{addr}/24"]
"#
    )
}

/// An HTTP answer as kernel curl saw it.
#[derive(Debug)]
pub(crate) struct Reply {
    /// 0: no HTTP answer (curl failed or timed out).
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    /// A response header, by lowercase name.
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    pub(crate) fn instance(&self) -> Option<String> {
        self.header("x-instance")
    }

    pub(crate) fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `curl` in the client namespace for `http://<name><path>` at nSFF1's
/// port 80 (`--resolve`), at most 20 s.
pub(crate) fn curl(lab: &Lab, name: &str, path: &str) -> Reply {
    let url = format!("http://{name}{path}");
    let resolve = format!("{name}:80:10.0.1.1");
    let out = lab.exec(
        "client",
        30,
        &[
            "curl",
            "-sS",
            "-i",
            "-m",
            "20",
            "--resolve",
            &resolve,
            "-w",
            "\n%{http_code}",
            &url,
        ],
    );
    let raw = out.stdout;
    let cut = raw.iter().rposition(|&b| b == b'\n').unwrap_or(0);
    let status = String::from_utf8_lossy(&raw[(cut + 1).min(raw.len())..])
        .trim()
        .parse()
        .unwrap_or(0);
    let msg = &raw[..cut];
    let split = msg
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(msg.len());
    Reply {
        status,
        head: String::from_utf8_lossy(&msg[..split]).into_owned(),
        body: msg.get(split + 4..).unwrap_or_default().to_vec(),
    }
}

/// A node's named counter.
pub(crate) fn counter(lab: &Lab, node: &str, name: &str) -> u64 {
    named(&lab.stats(node)).get(name).copied().unwrap_or(0)
}

/// Several counters of one node at once.
pub(crate) fn counters(lab: &Lab, node: &str, names: &[&str]) -> BTreeMap<String, u64> {
    let all = named(&lab.stats(node));
    names
        .iter()
        .map(|n| ((*n).to_owned(), all.get(*n).copied().unwrap_or(0)))
        .collect()
}

/// The NR's registration table: FQDN → nSFF IDs.
pub(crate) fn nr_names(lab: &Lab) -> BTreeMap<String, Vec<u64>> {
    lab.ctl("nr", &["names"])["names"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let fqdn = e["fqdn"].as_str()?.to_owned();
            let ids = e["nsff_ids"]
                .as_array()?
                .iter()
                .filter_map(Value::as_u64)
                .collect();
            Some((fqdn, ids))
        })
        .collect()
}

/// Wait (up to 45 s: the 30 s registration refresh and then some) until the
/// NR has every name in `want` registered by exactly those nSFFs.
#[track_caller]
pub(crate) fn wait_names(lab: &Lab, want: &[(&str, &[u64])]) {
    let mut last = BTreeMap::new();
    let ok = wait_until(45, || {
        last = nr_names(lab);
        want.iter()
            .all(|(f, ids)| last.get(*f).is_some_and(|v| v == ids))
    });
    assert!(ok, "NR names {last:?}, wanted {want:?}");
}

pub(crate) const CHAIN: [&str; 6] = ["f1", "f2", "nr", "nsff1", "nsff2", "sf2"];

/// A 200 from `sf2` for `name`, within `secs` (the first requests of a lab
/// may race the fabric coming up).
#[track_caller]
pub(crate) fn wait_ok(lab: &Lab, secs: u64, name: &str, instance: &str) -> Reply {
    let mut last = None;
    let ok = wait_until(secs, || {
        let r = curl(lab, name, "/");
        let ok = r.status == 200 && r.instance().as_deref() == Some(instance);
        last = Some(r);
        ok
    });
    assert!(ok, "no 200 from {instance} for {name}: {last:?}");
    last.unwrap()
}

/// A directory removed when dropped.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
