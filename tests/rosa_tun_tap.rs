//! ROSA for an unmodified kernel program, over real TAPs
//! (`examples/labs/rosa-small.toml`): kernel host `client` has one link, the TUN
//! of shim node `cs` (`svcroute shim --tun` as a lab node), and
//! `service.org` in its hosts file. Plain `curl http://service.org/` there
//! gets 200 from an instance; new connections are scheduled round robin
//! over both instances; no DNS query leaves the namespace; on the segment
//! (a capture of its bridge) each connection's first packet goes to the
//! ingress SAR with the ROSA option, and the rest of the connection is
//! plain IPv6 between the client and its instance. Needs root.

mod common;

use std::process::{Child, Command, Stdio};

use common::{have, named, root_or_skip, tshark_fields, wait_until, Lab};

const LAB: &str = include_str!("../examples/labs/rosa-small.toml");
const CLIENT: &str = "fd00:a::20";
const INGRESS: &str = "fd00:a::1";
const INSTANCES: [&str; 2] = ["fd00:b::11", "fd00:b::12"];

fn counter(lab: &Lab, node: &str, name: &str) -> u64 {
    named(&lab.stats(node)).get(name).copied().unwrap_or(0)
}

/// `curl http://service.org/` in the kernel client: (HTTP status, the
/// instance's `X-Instance`).
fn curl(lab: &Lab) -> (String, String) {
    let out = lab.exec(
        "client",
        20,
        &[
            "curl",
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %header{x-instance}",
            "http://service.org/",
        ],
    );
    assert!(out.status.success(), "curl failed: {}", common::text(&out));
    let s = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let (code, instance) = s.split_once(' ').unwrap_or((&s, ""));
    (code.to_owned(), instance.to_owned())
}

/// A capture of every frame on a bridge of the lab namespace, stopped and
/// reaped when dropped.
struct Capture {
    child: Child,
    file: std::path::PathBuf,
}

impl Capture {
    fn start(lab: &Lab, bridge: &str) -> Self {
        let file = lab.run_dir().join(format!("{bridge}.pcapng"));
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &lab.netns(),
                "tshark",
                "-q",
                "-i",
                bridge,
                "-w",
            ])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting tshark");
        let cap = Self { child, file };
        // dumpcap writes the file header once it captures.
        assert!(
            wait_until(30, || std::fs::metadata(&cap.file)
                .is_ok_and(|m| m.len() > 0)),
            "the capture on {bridge} never started"
        );
        cap
    }

    /// Whether the capture file already holds a frame matching `filter`
    /// (the file is being written: a cut-short read is fine).
    fn holds(&self, filter: &str) -> bool {
        Command::new("timeout")
            .args(["-k", "5", "30", "tshark", "-r"])
            .arg(&self.file)
            .args(["-Y", filter])
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|o| !o.stdout.is_empty())
    }

    /// Stop the capture and return the file. dumpcap writes what it
    /// captured in batches and loses the last one on a signal: wait until
    /// `last`, a frame sent after everything the test reads, is in the file.
    fn stop(mut self, last: &str) -> std::path::PathBuf {
        assert!(
            wait_until(30, || self.holds(last)),
            "the capture never showed {last:?}"
        );
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        let done = wait_until(20, || self.child.try_wait().ok().flatten().is_some());
        assert!(done, "tshark did not stop on SIGINT");
        self.file.clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn kernel_curl_reaches_a_service_by_name_through_the_tun_shim() {
    if !root_or_skip() {
        return;
    }
    let name = common::lab_name('r', 't');
    let text = LAB
        .replacen("name = \"rosa-small\"", &format!("name = \"{name}\""), 1)
        .replacen(
            "name = \"cs\"\nrole = \"shim\"\n",
            "name = \"cs\"\nrole = \"shim\"\npcap = true\n",
            1,
        );
    assert!(text.contains("pcap = true"));
    let lab = Lab::up(&name, &text);
    let hosts_dir = format!("/etc/netns/svl-{name}-client");

    // The name resolves from the hosts file the shim wrote, to a virtual
    // address, inside the namespace.
    let out = lab.exec("client", 10, &["getent", "ahosts", "service.org"]);
    let resolved = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && resolved.starts_with("fd5e:"),
        "{resolved}"
    );
    let virt = lab.ctl("cs", &["rosa"])["tun"]["names"][0]["virtual"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(resolved.contains(&virt), "{resolved} vs {virt}");

    // Both announcements reached the ingress SAR.
    assert!(
        wait_until(20, || lab.ctl("s1", &["instances"])["instances"].as_u64()
            == Some(2)),
        "s1 never learnt both instances: {}",
        lab.ctl("s1", &["instances"])
    );

    let capture = have("tshark").then(|| Capture::start(&lab, "br-a"));

    // Six curls, six connections: each is its own transaction, scheduled
    // round robin, each answered 200 by the instance it landed on.
    let mut by = std::collections::BTreeMap::<String, u32>::new();
    for _ in 0..6 {
        let (code, instance) = curl(&lab);
        assert_eq!(code, "200", "instance {instance:?}");
        *by.entry(instance).or_default() += 1;
    }
    assert!(
        by.get("i1").copied().unwrap_or(0) >= 2 && by.get("i2").copied().unwrap_or(0) >= 2,
        "not round robin over both instances: {by:?}"
    );
    assert_eq!(by.values().sum::<u32>(), 6, "{by:?}");

    // The shim: one flow per connection, each bound by one response.
    let flows = counter(&lab, "cs", "rosa.client_flows");
    assert!(flows >= 6, "{flows} flows");
    assert_eq!(
        counter(&lab, "cs", "rosa.responses_received"),
        flows,
        "every flow bound by exactly one response"
    );
    assert!(counter(&lab, "cs", "tun.to_kernel") > 0);
    let shim_drops: Vec<String> = lab
        .drops("cs")
        .into_keys()
        .filter(|k| k.starts_with("drop.rosa."))
        .collect();
    assert!(shim_drops.is_empty(), "{shim_drops:?}");

    // The host-node client on the same segment still works.
    let v = lab.ctl("c", &["get", "http://service.org/", "-n", "2", "--close"]);
    assert_eq!(v["ok"].as_u64(), Some(2), "{v}");

    // Plain IPv6 from the namespace (no virtual address) is routed too; its
    // answer is the last frame the wire check below needs to see.
    let out = lab.exec("client", 20, &["ping", "-6", "-c", "1", "-W", "5", INGRESS]);
    assert!(out.status.success(), "ping: {}", common::text(&out));

    if let Some(capture) = capture {
        let pcap = capture.stop(&format!("icmpv6.type == 129 && ipv6.dst == {CLIENT}"));
        check_the_wire(&pcap);
        // Everything the namespace sent went through the TUN: no DNS there either.
        let tun = lab.run_dir().join("cs.pcap.1");
        assert!(!tshark_fields(&tun, "tcp", &["ipv6.src"], &[]).is_empty());
        let dns = tshark_fields(&tun, "dns || udp.port == 53", &["frame.number"], &[]);
        assert!(dns.is_empty(), "DNS left the namespace: {dns:?}");
    }

    assert!(std::path::Path::new(&hosts_dir).exists());
    lab.down();
    assert!(
        !std::path::Path::new(&hosts_dir).exists(),
        "{hosts_dir} left behind"
    );
}

/// The segment, as its bridge saw it: no DNS; per client connection (by
/// the client's port), the SYN to the ingress SAR with the request option,
/// the SYN-ACK with the response option, then only plain IPv6 between the
/// client and one instance.
fn check_the_wire(pcap: &std::path::Path) {
    let dns = tshark_fields(pcap, "dns || udp.port == 53", &["frame.number"], &[]);
    assert!(dns.is_empty(), "DNS on the segment: {dns:?}");
    let rows = tshark_fields(
        pcap,
        &format!("tcp && ipv6.addr == {CLIENT}"),
        &[
            "ipv6.src",
            "ipv6.dst",
            "tcp.srcport",
            "tcp.dstport",
            "tcp.flags.syn",
            "tcp.flags.ack",
            "ipv6.opt.type",
        ],
        &[],
    );
    assert!(rows.len() >= 6 * 6, "{} segments", rows.len());
    let mut conns = std::collections::BTreeMap::<String, Vec<&Vec<String>>>::new();
    for r in &rows {
        let [src, _, sport, dport, ..] = &r[..] else {
            panic!("{r:?}");
        };
        let port = if src == CLIENT { sport } else { dport };
        conns.entry(port.clone()).or_default().push(r);
    }
    assert!(conns.len() >= 6, "{} connections", conns.len());
    for (port, segs) in &conns {
        let mut instance: Option<&str> = None;
        for (i, r) in segs.iter().enumerate() {
            let [src, dst, _, _, syn, ack, opts] = &r[..] else {
                panic!("{r:?}");
            };
            let rosa = opts.split(',').any(|t| t == "0x3e" || t == "62");
            let (syn, ack) = (syn == "1" || syn == "True", ack == "1" || ack == "True");
            if i == 0 {
                assert!(
                    src == CLIENT && dst == INGRESS && syn && !ack && rosa,
                    "port {port}: the first packet is not the request to the ingress: {r:?}"
                );
                continue;
            }
            match (syn, ack, src == CLIENT) {
                // A retransmitted SYN still carries the request.
                (true, false, true) => assert!(dst == INGRESS && rosa, "{r:?}"),
                (true, true, false) => assert!(rosa, "a SYN-ACK without the response: {r:?}"),
                (_, _, true) => {
                    assert!(!rosa, "an option after the handshake: {r:?}");
                    assert!(
                        INSTANCES.contains(&dst.as_str()),
                        "not to an instance: {r:?}"
                    );
                    assert!(
                        *instance.get_or_insert(dst) == dst.as_str(),
                        "port {port} moved: {r:?}"
                    );
                }
                (_, _, false) => {
                    assert!(!rosa, "an option after the handshake: {r:?}");
                    assert!(
                        INSTANCES.contains(&src.as_str()),
                        "not from an instance: {r:?}"
                    );
                }
            }
        }
        assert!(instance.is_some(), "port {port}: no affinity traffic");
    }
}
