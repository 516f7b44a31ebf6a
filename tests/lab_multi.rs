//! A lab across two machines: the default RFC 8677 lab split in two, each
//! half brought up with `lab up --machine`, the segments they share (`fab`,
//! `fab23`) joined by kernel VXLAN. The two "machines" are two network
//! namespaces joined by a veth underlay (fd00:77::/64), each holding its
//! half's VXLAN sockets (`--underlay-netns`). Needs root (skips otherwise).

mod common;

use common::{
    assert_nothing_of, lab_name, root_or_skip, run_bounded, svcroute, text, wait_until,
    write_lab_file, BIN,
};
use serde_json::Value;

const DEFAULT_LAB: &str = include_str!("../examples/labs/rfc8677.toml");

/// The default lab renamed to `name`, with f2, nSFF2 and SF2 on machine m2
/// (the rest on m1, the first machine), whose underlay addresses are
/// fd00:77::1 and ::2.
fn split_lab(name: &str) -> String {
    // Unkeyed: each machine would generate keys of its own (keys::prepare).
    let mut t = DEFAULT_LAB.replacen(
        "name = \"rfc8677\"",
        &format!("name = \"{name}\"\nkeys = \"none\""),
        1,
    );
    assert_ne!(t, DEFAULT_LAB, "the default lab's name line moved");
    for n in ["f2", "nsff2", "sf2"] {
        let line = format!("name = \"{n}\"\n");
        assert_eq!(t.matches(&line).count(), 1, "node {n} of the default lab");
        t = t.replace(&line, &format!("{line}machine = \"m2\"\n"));
    }
    t.push_str(
        "\n[[machine]]\nname = \"m1\"\naddress = \"fd00:77::1\"\n\
         \n[[machine]]\nname = \"m2\"\naddress = \"fd00:77::2\"\n",
    );
    t
}

/// The two machines' namespaces and both halves of the lab, removed however
/// the test ends.
struct Machines {
    lab: String,
    underlays: [String; 2],
}

impl Machines {
    fn new(lab: &str) -> Self {
        let pid = std::process::id();
        let m = Self {
            lab: lab.to_owned(),
            underlays: [format!("lmu{pid}a"), format!("lmu{pid}b")],
        };
        m.remove(); // left by an earlier, killed run
        let [a, b] = &m.underlays;
        for ns in [a, b] {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        ip(&[
            "-n", a, "link", "add", "u0", "type", "veth", "peer", "name", "u0", "netns", b,
        ]);
        for (ns, addr) in [(a, "fd00:77::1/64"), (b, "fd00:77::2/64")] {
            ip(&["-n", ns, "addr", "add", addr, "dev", "u0", "nodad"]);
            ip(&["-n", ns, "link", "set", "u0", "up"]);
        }
        m
    }

    fn instance(&self, machine: &str) -> String {
        format!("{}-{machine}", self.lab)
    }

    fn remove(&self) {
        for m in ["m1", "m2"] {
            svcroute(&["lab", "down", &self.instance(m)]);
        }
        for ns in &self.underlays {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .output();
        }
    }
}

impl Drop for Machines {
    fn drop(&mut self) {
        self.remove();
    }
}

#[track_caller]
fn ip(args: &[&str]) -> String {
    let out = run_bounded(10, "ip", args);
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn status(instance: &str) -> Value {
    let out = svcroute(&["lab", "status", "--json", instance]);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice::<Value>(&out.stdout).unwrap()[0].clone()
}

/// Packets the kernel counted on `dev` in namespace `ns`: (tx, rx).
fn packets(ns: &str, dev: &str) -> (u64, u64) {
    let v: Value =
        serde_json::from_str(&ip(&["-n", ns, "-j", "-s", "link", "show", "dev", dev])).unwrap();
    let s = &v[0]["stats64"];
    (
        s["tx"]["packets"].as_u64().unwrap(),
        s["rx"]["packets"].as_u64().unwrap(),
    )
}

#[test]
fn client_on_one_machine_reaches_sf2_on_the_other_over_vxlan() {
    if !root_or_skip() {
        return;
    }
    let lab = lab_name('m', 'x');
    let m = Machines::new(&lab);
    let file = write_lab_file(&lab, &split_lab(&lab));
    let file = file.to_str().unwrap();

    // Inside `ip netns exec` the lab's namespaces would vanish with `up`'s
    // private mount namespace: refused, nothing made.
    let out = run_bounded(
        60,
        "ip",
        &[
            "netns",
            "exec",
            &m.underlays[0],
            BIN,
            "lab",
            "up",
            file,
            "--machine",
            "m1",
        ],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).contains("--underlay-netns"),
        "no hint: {}",
        text(&out)
    );
    assert_nothing_of(&m.instance("m1"));

    // Both halves at once: nSFF2 registers with the NR on the other machine.
    let up = |machine: &'static str, underlay: String, file: String| {
        std::thread::spawn(move || {
            run_bounded(
                120,
                BIN,
                &[
                    "lab",
                    "up",
                    &file,
                    "--machine",
                    machine,
                    "--underlay-netns",
                    &underlay,
                    "--timeout",
                    "60",
                ],
            )
        })
    };
    let h2 = up("m2", m.underlays[1].clone(), file.to_owned());
    let h1 = up("m1", m.underlays[0].clone(), file.to_owned());
    for (machine, h) in [("m1", h1), ("m2", h2)] {
        let out = h.join().unwrap();
        assert!(
            out.status.success(),
            "lab up --machine {machine}: {}",
            text(&out)
        );
    }
    let (i1, i2) = (m.instance("m1"), m.instance("m2"));
    let (ns1, ns2) = (format!("svl-{i1}"), format!("svl-{i2}"));

    // Each machine has only its part, and its VXLANs to the other's address.
    let s1 = status(&i1);
    let nodes = |s: &Value| -> Vec<String> {
        s["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(nodes(&s1), ["f1", "f3", "nr", "nsff1"]);
    assert_eq!(nodes(&status(&i2)), ["f2", "nsff2", "sf2"]);
    let vx = s1["machine"]["vxlans"].as_array().unwrap();
    let devs: Vec<&str> = vx.iter().map(|v| v["dev"].as_str().unwrap()).collect();
    assert_eq!(devs, ["vx-fab", "vx-fab23"], "{s1}");
    for v in vx {
        assert_eq!(v["present"], true, "{v}");
        assert_eq!(v["fdb"], serde_json::json!(["fd00:77::2"]), "{v}");
        assert_eq!(v["mtu"], 1430, "1500 - 70 for an IPv6 underlay: {v}");
    }
    // The VXLAN's socket is in the underlay namespace, not the lab's.
    let d = ip(&["-n", &ns1, "-d", "link", "show", "dev", "vx-fab"]);
    assert!(
        d.contains("vxlan id") && d.contains("local fd00:77::1") && d.contains("master br-fab"),
        "{d}"
    );
    // Every port fits the VXLAN, also off the spanning segments: fwd nodes
    // relay frames from one segment onto the next unchanged.
    let mtu = |ns: &str, dev: &str| -> u64 {
        let v: Value =
            serde_json::from_str(&ip(&["-n", ns, "-j", "link", "show", "dev", dev])).unwrap();
        v[0]["mtu"].as_u64().unwrap()
    };
    assert_eq!(mtu(&ns1, "f1-2"), 1430, "f1's fab port");
    assert_eq!(mtu(&ns2, "f2-2"), 1430, "f2's fab23 port");
    assert_eq!(mtu(&ns1, "f1-0"), 1430, "f1's n1 port");
    assert_eq!(mtu(&format!("{ns1}-client"), "eth0"), 1430, "the client");
    let text1 = text(&svcroute(&["lab", "status", &i1]));
    assert!(
        text1.contains(&format!(
            "machine m1 of lab {lab}: underlay fd00:77::1 port 4789"
        )) && text1.contains("m2 [fd00:77::2]:4789"),
        "{text1}"
    );

    // The client on m1 reaches SF2 on m2, through both machines' fabric,
    // once nSFF2's registration has crossed to the NR on m1.
    let before = packets(&ns2, "vx-fab");
    let curl = |url: &str, extra: &[&str]| {
        let mut args = vec!["lab", "exec", "--lab", &i1, "client", "--", "curl"];
        args.extend_from_slice(extra);
        args.extend(["-m", "20", url]);
        svcroute(&args)
    };
    let mut body = String::new();
    let ok = wait_until(45, || {
        let out = curl("http://www.example2.com/", &["-si"]);
        body = text(&out);
        out.status.success() && body.contains("X-Instance: sf2")
    });
    assert!(ok, "not served by sf2: {body}");
    // Full-sized segments cross too (no frame is larger than VXLAN takes).
    let out = curl(
        "http://www.example2.com/bytes/300000",
        &["-sf", "-o", "/dev/null", "-w", "%{size_download}"],
    );
    assert!(out.status.success(), "large transfer: {}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "300000");
    let after = packets(&ns2, "vx-fab");
    assert!(
        after.0 > before.0 && after.1 > before.1,
        "nothing crossed vx-fab on m2: {before:?} -> {after:?}"
    );

    // Each machine takes its part down; nothing of either is left.
    for i in [&i1, &i2] {
        let out = svcroute(&["lab", "down", i]);
        assert!(out.status.success(), "{}", text(&out));
        assert_nothing_of(i);
    }
    drop(m);
}
