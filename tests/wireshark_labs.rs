//! Every example lab (`examples/labs/*.toml`), brought up with every node
//! recording its ports (`pcap = true`, the nodes' own `--pcap`), driven
//! with a little traffic of each kind it carries, and its captures decoded
//! by tshark with `wireshark/svcroute.lua`: no frame may have a malformed
//! field, a bad checksum or an unknown code point of ours (nor a Lua error,
//! nor anything Wireshark calls malformed), and each lab must show the
//! messages its traffic implies (e.g. every GFF type in the RFC 8677 lab,
//! whose fabric link is cut and healed for the link events and path
//! updates). Needs root and tshark (skips otherwise); the ROSA labs with a
//! SAG need dnsmasq and nginx too.

mod common;
mod wireshark_common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::{json, Value};

use common::{have, lab_name, root_or_skip, run_bounded, text, wait_until, Lab, BIN};
use wireshark_common::{decode, Frame};

/// `toml` renamed to lab `name`, with `pcap = true` on every node and the
/// fixed directories of its kernel hosts (nginx's) made the lab's own.
fn recording(toml: &str, example: &str, name: &str) -> String {
    let renamed = toml.replacen(
        &format!("name = \"{example}\""),
        &format!("name = \"{name}\""),
        1,
    );
    assert_ne!(renamed, toml, "the example no longer names lab {example}");
    let web = format!("/tmp/svl-{example}-web");
    let mut out = String::new();
    for line in renamed
        .replace(&web, &format!("/tmp/svl-{name}-web"))
        .lines()
    {
        out.push_str(line);
        out.push('\n');
        if line.starts_with("role = ") {
            out.push_str("pcap = true\n");
        }
    }
    out
}

/// Removes a directory when dropped.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether the test can run: root, tshark, and `extra` commands.
fn can_run(extra: &[&str]) -> bool {
    if !root_or_skip() {
        return false;
    }
    for cmd in ["tshark"].iter().chain(extra) {
        if !have(cmd) {
            eprintln!("SKIP: {cmd} not installed (scripts/setup installs it)");
            return false;
        }
    }
    true
}

/// Bring up example `example` (its text `toml`) recording.
fn up(toml: &str, example: &str, prefix: char) -> (Lab, RemoveOnDrop) {
    let name = lab_name(prefix, 'w');
    let web = RemoveOnDrop(format!("/tmp/svl-{name}-web"));
    (Lab::up(&name, &recording(toml, example, &name)), web)
}

/// Every frame of every capture in the lab's run directory, with the file
/// it came from.
fn captures(lab: &Lab) -> Vec<(String, Frame)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(lab.run_dir())
        .expect("reading the lab's run directory")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains(".pcap"))
        })
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no capture in {}",
        lab.run_dir().display()
    );
    let mut all = Vec::new();
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        for frame in decode(&f, &[]) {
            all.push((name.clone(), frame));
        }
    }
    all
}

/// Copy the lab's captures to `/tmp/svcroute-wireshark-<lab>/` (`lab down`
/// removes the run directory) so a failure can be looked at.
fn keep_captures(lab: &Lab) {
    let dir = std::env::temp_dir().join(format!("svcroute-wireshark-{}", lab.name()));
    let _ = std::fs::create_dir_all(&dir);
    for e in std::fs::read_dir(lab.run_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        let p = e.path();
        if p.to_string_lossy().contains(".pcap") {
            let _ = std::fs::copy(&p, dir.join(e.file_name()));
        }
    }
    eprintln!("captures kept in {}", dir.display());
}

/// No frame has an error or unknown code point; each `(field, value)` of
/// `must` is in some frame (`value` empty: the field is there at all).
/// Returns a summary line per protocol for the log.
#[track_caller]
fn check(lab: &Lab, must: &[(&str, &str)]) -> Vec<(String, Frame)> {
    let frames = captures(lab);
    let mut bad = Vec::new();
    for (file, f) in &frames {
        if !f.errors().is_empty() || !f.unknowns().is_empty() {
            bad.push(format!("{file} {}", f.dump()));
        }
    }
    let missing: Vec<String> = must
        .iter()
        .filter(|(k, v)| {
            !frames
                .iter()
                .any(|(_, f)| f.values(k).iter().any(|x| v.is_empty() || x == v))
        })
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect();
    let seen: BTreeSet<String> = frames
        .iter()
        .flat_map(|(_, f)| f.values("frame.protocols"))
        .map(str::to_owned)
        .collect();
    eprintln!(
        "{}: {} frames decoded; protocol stacks: {seen:#?}",
        lab.name(),
        frames.len()
    );
    if !bad.is_empty() || !missing.is_empty() {
        keep_captures(lab);
    }
    assert!(
        bad.is_empty(),
        "{} of {} frames of lab {} decode with errors or unknown code points:\n{}",
        bad.len(),
        frames.len(),
        lab.name(),
        bad.iter().take(5).cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(
        missing.is_empty(),
        "lab {}: no frame shows {missing:?}; stacks seen: {seen:#?}",
        lab.name()
    );
    frames
}

/// `svcroute ctl <node> get URL -n N --close` until all `n` succeed (the
/// lab may still be converging): the answers by instance.
fn get_ok(lab: &Lab, node: &str, url: &str, n: u64) -> Value {
    let count = n.to_string();
    let sock = lab.sock(node);
    let mut last = Value::Null;
    let ok = wait_until(60, || {
        let args = [
            "ctl",
            "--json",
            "--timeout",
            "30",
            &sock,
            "get",
            url,
            "-n",
            &count,
            "--close",
        ];
        let out = run_bounded(40, BIN, &args);
        last = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        last["ok"].as_u64() == Some(n)
    });
    assert!(ok, "{node} get {url}: {last}");
    last["instances"].clone()
}

/// `curl URL` from kernel host `host` until it answers 200.
fn curl_ok(lab: &Lab, host: &str, extra: &[&str], url: &str) -> String {
    let mut body = String::new();
    let ok = wait_until(60, || {
        let mut args = vec!["curl", "-sS", "-m", "8", "-w", "\n%{http_code}"];
        args.extend_from_slice(extra);
        args.push(url);
        let out = lab.exec(host, 15, &args);
        let all = String::from_utf8_lossy(&out.stdout).into_owned();
        let (b, code) = all.rsplit_once('\n').unwrap_or(("", ""));
        body = b.to_owned();
        out.status.success() && code.trim() == "200"
    });
    assert!(ok, "{host}: curl {url}: {body}");
    body
}

fn link_set(lab: &Lab, dev: &str, state: &str) {
    let out = run_bounded(10, "ip", &["-n", &lab.netns(), "link", "set", dev, state]);
    assert!(
        out.status.success(),
        "ip link set {dev} {state}: {}",
        text(&out)
    );
}

#[test]
fn host_lab_capture_decodes_clean() {
    if !can_run(&["curl", "python3"]) {
        return;
    }
    let (lab, _web) = up(include_str!("../examples/labs/host.toml"), "host", 'h');
    curl_ok(&lab, "client", &[], "http://10.0.0.2/");
    curl_ok(&lab, "client", &[], "http://[fd00::2]/");
    let v = lab.ctl("h1", &["get", "http://10.0.0.20:8000/"]);
    assert!(v.get("error").is_none(), "{v}");
    // Nothing of ours here: plain HTTP over IPv4 and IPv6, which our
    // dissectors must leave alone.
    let frames = check(&lab, &[("http.request.method", "GET")]);
    assert!(
        frames.iter().all(|(_, f)| !f.has("gff") && !f.has("rosa")),
        "a dissector of ours claimed plain traffic"
    );
    lab.down();
}

#[test]
fn mslp_lab_capture_decodes_clean() {
    if !can_run(&[]) {
        return;
    }
    let (lab, _web) = up(include_str!("../examples/labs/mslp.toml"), "mslp", 'm');
    // Peering (TCP, anti-entropy first), then a registration with
    // MeshFwd at MDA1 that MDA2 and MDA3 receive forwarded, then a find.
    let ok = wait_until(60, || {
        lab.ctl("mda1", &["peers"])
            .as_array()
            .is_some_and(|p| p.iter().filter(|x| x["up"] == true).count() >= 2)
    });
    assert!(ok, "mda1 peers: {}", lab.ctl("mda1", &["peers"]));
    let url = "service:printer://10.0.0.10/wireshark";
    let slp = |from: &str, da: &str, args: &[&str]| {
        let mut cmd = vec![
            BIN,
            "slp",
            "--da",
            da,
            "--scopes",
            "y",
            "--timeout-ms",
            "3000",
        ];
        cmd.extend_from_slice(args);
        lab.exec(from, 20, &cmd)
    };
    let out = slp(
        "sa",
        "10.0.0.1",
        &["register", url, "--lifetime", "600", "--mesh-fwd"],
    );
    assert!(out.status.success(), "register: {}", text(&out));
    let found = wait_until(30, || {
        let out = slp("ua", "10.0.0.3", &["find", "service:printer"]);
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(url)
    });
    assert!(found, "mda3 never got the registration");
    check(
        &lab,
        &[
            ("mslp.function", "12"),
            ("mslp.antientropy.type", "2"),
            ("mslp.meshfwd.fwd_id", "1"),
            ("mslp.meshfwd.fwd_id", "2"),
            ("mslp.accept.url", ""),
            ("srvloc.function", "3"),
            ("srvloc.function", "5"),
            ("srvloc.function", "8"),
            ("srvloc.daadvert.attrlist", "mesh-enhanced"),
            ("tcp.dstport", "427"),
        ],
    );
    lab.down();
}

#[test]
fn rfc8677_lab_capture_decodes_clean() {
    if !can_run(&["curl", "python3"]) {
        return;
    }
    let (lab, _web) = up(
        include_str!("../examples/labs/rfc8677.toml"),
        "rfc8677",
        'x',
    );
    let proxy = ["-x", "http://10.0.1.1:3128"];
    assert_eq!(
        curl_ok(&lab, "client", &proxy, "http://www.example.com/").trim(),
        "hello from sf1"
    );
    assert!(curl_ok(&lab, "client", &proxy, "http://www.example2.com/").starts_with("instance=sf2"));
    assert!(curl_ok(&lab, "client", &[], "http://www.example2.com/").starts_with("instance=sf2"));
    // Cut the direct fabric link once every fabric port has seen hellos,
    // for link events and a path update; heal it.
    let port_up = |node: &str, port: &str| {
        lab.ctl(node, &["links"])["links"]
            .as_array()
            .is_some_and(|l| l.iter().any(|p| p["port"] == port && p["state"] == "up"))
    };
    assert!(
        wait_until(30, || port_up("f1", "eth2") && port_up("f2", "eth0")),
        "fabric not up: {}",
        lab.ctl("f1", &["links"])
    );
    let down = || lab.ctl("nr", &["links"])["down"].clone();
    link_set(&lab, "br-fab", "down");
    assert!(
        wait_until(30, || down() == json!([10, 11])),
        "NR: {}",
        down()
    );
    assert!(curl_ok(&lab, "client", &proxy, "http://www.example2.com/").starts_with("instance=sf2"));
    link_set(&lab, "br-fab", "up");
    assert!(wait_until(30, || down() == json!([])), "NR: {}", down());
    let frames = check(
        &lab,
        &[
            ("gff.type", "1"),
            ("gff.type", "2"),
            ("gff.type", "3"),
            ("gff.type", "4"),
            ("gff.type", "5"),
            ("gff.type", "6"),
            ("gff.type", "7"),
            ("gff.type", "8"),
            ("nsff.flags.open", "1"),
            ("nsff.flags.response", "1"),
            ("nsff.end", "1"),
            ("nrctl.fqdn", "www.example2.com"),
            ("nrctl.found", "1"),
            ("nrctl.update.kind", "1"),
            ("nrctl.link_state", "0"),
            ("nrctl.link_state", "1"),
        ],
    );
    // Every GFF packet carries its pathID in its IPv6 addresses, and every
    // transport packet's checksum is right.
    for (file, f) in &frames {
        if f.has("gff") {
            assert_eq!(f.values("gff.pathid.match"), ["1"], "{file} {}", f.dump());
        }
        if f.has("nsff.seq") {
            assert_eq!(
                f.values("nsff.checksum.status"),
                ["1"],
                "{file} {}",
                f.dump()
            );
        }
    }
    lab.down();
}

/// The ROSA messages and IGP messages every ROSA lab carries.
const ROSA_MUST: [(&str, &str); 9] = [
    ("rosa.msg", "1"),
    ("rosa.msg", "2"),
    ("rosa.msg", "3"),
    ("rosa.service", ""),
    ("rosa.auth.key_id", "1"),
    ("sarigp.msg_type", "1"),
    ("sarigp.msg_type", "2"),
    ("sarigp.msg_type", "3"),
    ("sarigp.auth.key_id", "1"),
];

#[test]
fn rosa_small_lab_capture_decodes_clean() {
    if !can_run(&["curl"]) {
        return;
    }
    let toml = include_str!("../examples/labs/rosa-small.toml");
    let (lab, _web) = up(toml, "rosa-small", 'r');
    get_ok(&lab, "c", "http://service.org/", 4);
    curl_ok(&lab, "client", &[], "http://service.org/");
    let mut must = ROSA_MUST.to_vec();
    must.extend([
        ("rosa.constraint.mode", "1"),
        ("rosa.constraint.policy", "2"),
        ("sarigp.lsa.kind", "0"),
        ("sarigp.lsa.kind", "1"),
    ]);
    check(&lab, &must);
    lab.down();
}

#[test]
fn rosa_lab_capture_decodes_clean() {
    if !can_run(&["curl", "dnsmasq", "nginx"]) {
        return;
    }
    let (lab, _web) = up(include_str!("../examples/labs/rosa.toml"), "rosa", 'q');
    get_ok(&lab, "c", "http://service.org/", 2);
    get_ok(&lab, "c", "http://foo.com/", 2);
    get_ok(&lab, "c", "http://example.net/", 2);
    get_ok(&lab, "c", "http://shop.example/", 2);
    curl_ok(&lab, "client", &[], "http://service.org/");
    let mut must = ROSA_MUST.to_vec();
    must.extend([("rosa.sag", ""), ("sarigp.lsa.kind", "1")]);
    check(&lab, &must);
    lab.down();
}

#[test]
fn rosa_sag_lab_capture_decodes_clean() {
    if !can_run(&["curl", "dnsmasq", "nginx"]) {
        return;
    }
    let toml = include_str!("../examples/labs/rosa-sag.toml");
    let (lab, _web) = up(toml, "rosa-sag", 'g');
    get_ok(&lab, "c", "http://example.net/", 2);
    get_ok(&lab, "c", "http://shop.example/", 2);
    curl_ok(&lab, "client", &[], "http://example.net/");
    let mut must = ROSA_MUST.to_vec();
    must.extend([("rosa.sag", ""), ("rosa.instance", "")]);
    check(&lab, &must);
    lab.down();
}

#[test]
fn rosa_pol_lab_capture_decodes_clean() {
    if !can_run(&["curl"]) {
        return;
    }
    let toml = include_str!("../examples/labs/rosa-pol.toml");
    let (lab, _web) = up(toml, "rosa-pol", 'p');
    for name in ["wrr.example", "cbr.example", "amc.example", "live.example"] {
        curl_ok(&lab, "client", &[], &format!("http://{name}/"));
    }
    let mut must = ROSA_MUST.to_vec();
    must.extend([
        ("rosa.constraint.policy", "3"),
        ("rosa.constraint.policy", "4"),
        ("rosa.constraint.policy", "5"),
        ("rosa.constraint.capability", "5"),
        ("rosa.constraint.latency_us", "50000"),
        ("rosa.constraint.preference", "4"),
        ("rosa.constraint.load", ""),
    ]);
    check(&lab, &must);
    lab.down();
}

#[test]
fn sticky_lab_capture_decodes_clean() {
    if !can_run(&["curl", "nginx", "python3"]) {
        return;
    }
    let name = lab_name('s', 'w');
    // The sites' files in directories of this lab's own.
    let dirs = RemoveOnDrop(format!("/tmp/svl-{name}-s1"));
    let _d3 = RemoveOnDrop(format!("/tmp/svl-{name}-s3"));
    let toml = include_str!("../examples/labs/sticky.toml")
        .replace("/tmp/svl-sticky-", &format!("/tmp/svl-{name}-"));
    let lab = Lab::up_within(&name, &recording(&toml, "sticky", &name), 60);
    // Until each site has been measured from the ingress (probes, RTTs).
    for _ in 0..3 {
        curl_ok(&lab, "ue", &[], "http://[fd00:aa08::4450]/site");
    }
    // Flows for the sites' meters and a flood of Ra's table.
    std::thread::sleep(std::time::Duration::from_secs(6));
    curl_ok(&lab, "ue", &[], "http://[fd00:aa08::4450]/site");
    let frames = check(
        &lab,
        &[
            ("sarigp.msg_type", "4"),
            ("sticky.egress", ""),
            ("appmetrics.index", ""),
            ("appmetrics.capacity", ""),
            ("appmetrics.preference", ""),
            ("appmetrics.tunnel", ""),
        ],
    );
    // The tunnels: IPv6 in IPv6 (R1, R3) and GRE (R2).
    let stacks: BTreeSet<&str> = frames
        .iter()
        .flat_map(|(_, f)| f.values("frame.protocols"))
        .collect();
    assert!(
        stacks.iter().any(|s| s.contains("ipv6:ipv6")),
        "no IPv6-in-IPv6 frame: {stacks:#?}"
    );
    drop(dirs);
    lab.down();
}
