// Each test binary uses a subset of these helpers.
#![allow(dead_code)]
//! Checks shared by the lab variants whose nodes are not processes on TAPs
//! (`tests/microvm.rs`: microVMs; `tests/packet_lab.rs`: processes on veths
//! over AF_PACKET): the same RFC 8677 and mSLP checks for both.

use serde_json::Value;

use crate::common::{lab_name, run_bounded, svcroute, text, wait_until, Lab, BIN};

pub(crate) const RFC8677_VM: &str = include_str!("../../examples/labs/rfc8677-vm.toml");
pub(crate) const RFC8677_PKT: &str = include_str!("../../examples/labs/rfc8677-pkt.toml");
pub(crate) const MSLP_VM: &str = include_str!("../../examples/labs/mslp-vm.toml");

/// `text` (a lab file named `from`) renamed to a lab name unique to this
/// test process.
pub(crate) fn renamed(text: &str, from: &str, prefix: char, suffix: char) -> (String, String) {
    let name = lab_name(prefix, suffix);
    let t = text.replacen(
        &format!("name = \"{from}\""),
        &format!("name = \"{name}\""),
        1,
    );
    assert_ne!(t, text, "the lab's name line moved");
    (name, t)
}

/// The node's entry in `lab status --json`.
pub(crate) fn status_of(lab: &Lab, node: &str) -> Value {
    let out = svcroute(&["lab", "status", "--json", lab.name()]);
    assert!(out.status.success(), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    v[0]["nodes"]
        .as_array()
        .and_then(|ns| ns.iter().find(|n| n["name"] == node).cloned())
        .unwrap_or(Value::Null)
}

/// The RFC 8677 checks: kernel curl from `client` reaches
/// `www.example2.com` through nsff2 and sf2 (and www.example.com past
/// them), `ctl nsff2 stats` answers with frames through its devices, and
/// `lab status` shows the nodes as `kind` (`vm` or `packet`).
#[track_caller]
pub(crate) fn rfc8677_checks(lab: &Lab, kind: &str) {
    let curl = |url: &str| {
        let out = lab.exec("client", 20, &["curl", "-sf", "-m", "15", url]);
        assert!(out.status.success(), "curl {url}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        curl("http://www.example2.com/").contains("instance=sf2"),
        "www.example2.com is not served by sf2"
    );
    assert!(curl("http://www.example.com/").contains("hello from sf1"));
    let s = lab.stats("nsff2");
    assert_eq!(s["node"], "nsff2");
    assert!(s["rx_frames"].as_u64().unwrap_or(0) > 0, "{s}");
    let named = &s["named"];
    assert!(
        named["packet.rx_blocks"].as_u64().unwrap_or(0) > 0,
        "nsff2 did not receive over AF_PACKET rings: {named}"
    );
    assert_eq!(named["drop.packet.rx_ring_full"], 0, "{named}");
    for n in ["nsff2", "sf2"] {
        let st = status_of(lab, n);
        assert_eq!(
            (
                st["link"].as_str(),
                st["alive"].as_bool(),
                st["ready"].as_bool()
            ),
            (Some(kind), Some(true), Some(true)),
            "{n}: {st}"
        );
    }
    let out = svcroute(&["lab", "status", lab.name()]);
    assert!(
        text(&out).contains(&format!("nsff ({kind})")),
        "{}",
        text(&out)
    );
}

/// Kill the node's process (`pid`: for a VM node, its QEMU) and check that
/// `lab status` reports it dead while the other nodes stay alive.
#[track_caller]
pub(crate) fn crash_is_reported_dead(lab: &Lab, node: &str, pid: u64) {
    let out = run_bounded(10, "kill", &["-KILL", &pid.to_string()]);
    assert!(out.status.success(), "kill {pid}: {}", text(&out));
    assert!(
        wait_until(15, || status_of(lab, node)["alive"] == false),
        "{node} still reported alive after its process {pid} was killed: {}",
        status_of(lab, node)
    );
    let st = status_of(lab, node);
    assert_eq!(st["ready"], false, "{st}");
    let out = svcroute(&["lab", "status", lab.name()]);
    let line = text(&out)
        .lines()
        .find(|l| l.starts_with(node))
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(line.contains(" no "), "{node} not shown dead: {line:?}");
    assert_eq!(status_of(lab, "nsff1")["alive"], true);
}

/// QEMU processes whose arguments point into lab `name`'s run directory.
pub(crate) fn qemu_processes_of(name: &str) -> Vec<String> {
    let dir = format!("/run/svcroute/lab/{name}/");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .filter_map(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            (cmd.contains("qemu-system") && cmd.contains(&dir) && crate::common::alive(pid))
                .then(|| format!("{pid}: {cmd}"))
        })
        .collect()
}

/// `svcroute slp --da 10.0.0.<mda> --scopes y ARGS...` from host `from`.
fn slp(lab: &Lab, from: &str, mda: u8, args: &[&str]) -> (bool, String) {
    let da = format!("10.0.0.{mda}");
    let mut cmd = vec![
        BIN,
        "slp",
        "--da",
        &da,
        "--scopes",
        "y",
        "--timeout-ms",
        "3000",
    ];
    cmd.extend_from_slice(args);
    let out = lab.exec(from, 20, &cmd);
    (out.status.success(), text(&out))
}

/// The mSLP check: a registration made at process MDA1 is found at MDA3
/// (the VM or packet node) over the mesh, and one made at MDA3 at MDA2.
#[track_caller]
pub(crate) fn mslp_checks(lab: &Lab) {
    let url = "service:printer://10.0.0.10/vmq";
    let (ok, t) = slp(
        lab,
        "sa",
        1,
        &["register", url, "--lifetime", "600", "--mesh-fwd"],
    );
    assert!(ok, "register at mda1: {t}");
    assert!(
        wait_until(30, || {
            let (ok, t) = slp(lab, "ua", 3, &["find", "service:printer"]);
            ok && t.contains(url)
        }),
        "mda3 never found the registration made at mda1"
    );
    let back = "service:printer://10.0.0.10/back";
    let (ok, t) = slp(
        lab,
        "sa",
        3,
        &["register", back, "--lifetime", "600", "--mesh-fwd"],
    );
    assert!(ok, "register at mda3: {t}");
    assert!(
        wait_until(30, || {
            let (ok, t) = slp(lab, "ua", 2, &["find", "service:printer"]);
            ok && t.contains(back)
        }),
        "mda2 never found the registration made at mda3"
    );
}
