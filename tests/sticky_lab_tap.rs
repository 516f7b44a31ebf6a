//! The shipped sticky-service lab (`examples/labs/sticky.toml`) over real
//! TAPs, with kernel curl behind the TUN shim and kernel (nginx, python)
//! and svcroute (host node) anycast servers:
//!
//! - both ingresses learn the three edge sites from the IGP (App-Metrics,
//!   RTT probes), and every new flow goes to the site `ctl ra sites` scores
//!   lowest (SPEC §3) at that moment;
//! - the tunnel Ra emits and the Sticky-Dst option R1 puts into nginx's
//!   replies decode in tshark as intended (outer and inner headers);
//! - a 20 MB download is byte-exact, and while it runs R1's advertised
//!   capacity drops: new flows go elsewhere, the download stays on R1
//!   (flow affinity however costs move);
//! - R1's load from the download reaches Ra in its next App-Metrics;
//! - R1 killed: new flows go to the next site once the IGP has noticed,
//!   over R2's GRE tunnel when R2 is next.
//!
//! Behaviour only, never timing: every wait is a generous `wait_until`.
//! Needs root, nginx, python3 and curl (skips otherwise).

mod common;

use common::{have, named, root_or_skip, tshark_fields, wait_until, Lab};
use serde_json::Value;

const LAB: &str = include_str!("../examples/labs/sticky.toml");
const ANYCAST: &str = "fd00:aa08::4450";

fn counter(lab: &Lab, node: &str, name: &str) -> u64 {
    named(&lab.stats(node)).get(name).copied().unwrap_or(0)
}

/// `ctl NODE sites`: the sites of the anycast address.
fn sites(lab: &Lab, node: &str) -> Vec<Value> {
    lab.ctl(node, &["sites"])["anycast"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["anycast"] == ANYCAST))
        .and_then(|x| x["sites"].as_array().cloned())
        .unwrap_or_default()
}

/// The router ID of the site `node` would give a new flow now.
fn chosen(lab: &Lab, node: &str) -> Option<u64> {
    sites(lab, node)
        .iter()
        .find(|s| s["chosen"] == true)
        .and_then(|s| s["router"].as_u64())
}

/// The site a router ID stands for, as its server names itself.
fn site_of(router: u64) -> &'static str {
    match router {
        11 => "s1",
        12 => "s2",
        13 => "s3",
        _ => "?",
    }
}

/// One new flow: `curl /site` in the UE, the name of the server that
/// answered (nginx and python serve a file `s1`/`s3`, the host node
/// answers `instance=s2`).
fn site_curl(lab: &Lab) -> Option<String> {
    let url = format!("http://[{ANYCAST}]/site");
    let out = lab.exec("ue", 15, &["curl", "-sS", "-m", "8", &url]);
    if !out.status.success() {
        return None;
    }
    let body = String::from_utf8_lossy(&out.stdout).into_owned();
    let first = body.lines().next()?.trim().to_owned();
    Some(first.strip_prefix("instance=").unwrap_or(&first).to_owned())
}

/// A new flow goes to the site `ingress` (the UE's) scores lowest: the
/// answer is the chosen site just before or just after (the choice moves
/// with the RTTs it measures).
#[track_caller]
fn new_flow_follows_the_score(lab: &Lab, ingress: &str) -> String {
    let before = chosen(lab, ingress).map(site_of);
    let got = site_curl(lab).expect("curl to the anycast address failed");
    let after = chosen(lab, ingress).map(site_of);
    assert!(
        Some(got.as_str()) == before || Some(got.as_str()) == after,
        "answered by {got}, chosen {before:?} / {after:?}: {:?}",
        sites(lab, ingress)
    );
    got
}

/// A paced download of the 20 MB file in the UE, to `out`: curl prints
/// the status and `X-Site` (nginx's) when it is done.
fn start_download(lab: &Lab, rate: &str, out: &str) -> std::process::Child {
    let url = format!("http://[{ANYCAST}]/bytes/20000000");
    std::process::Command::new(common::BIN)
        .args([
            "lab",
            "exec",
            "--lab",
            lab.name(),
            "ue",
            "--",
            "curl",
            "-sS",
            "--limit-rate",
            rate,
            "-o",
            out,
            "-w",
            "%{http_code} %header{x-site}",
            &url,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("curl")
}

/// The download's end: served whole by s1, byte for byte `file`.
#[track_caller]
fn finish_download(child: std::process::Child, out: &str, file: &str) {
    let o = child.wait_with_output().expect("curl ran");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "200 s1",
        "the download stayed on s1: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let same = std::process::Command::new("cmp")
        .args([out, file])
        .status()
        .is_ok_and(|s| s.success());
    let _ = std::fs::remove_file(out);
    assert!(same, "the 20 MB download is byte-exact");
}

/// The UE to Rb's segment with `lab move`: its shim's TAP re-plugged to
/// `ub`'s bridge and the shim given the address `fd00:a::20` becomes there
/// (the kernel keeps `fd00:a::20`: the shim translates); `lab status`
/// shows the port on `ub`.
fn move_ue(lab: &Lab) {
    let out = common::svcroute(&["lab", "move", "--lab", lab.name(), "us", "ub"]);
    assert!(out.status.success(), "lab move: {}", common::text(&out));
    assert!(
        common::text(&out).contains("us moved to segment ub as fd00:b::20/64 via fd00:b::1"),
        "{}",
        common::text(&out)
    );
    let st = lab.ctl("us", &["status"]);
    assert!(
        st.to_string().contains("fd00:b::20"),
        "the shim's wire address: {st}"
    );
}

/// Removes a directory when dropped.
struct RemoveOnDrop(Vec<String>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

#[test]
fn sticky_lab_steers_by_app_metrics_keeps_flows_and_fails_over() {
    if !root_or_skip() {
        return;
    }
    if !have("nginx") || !have("python3") || !have("curl") {
        eprintln!("SKIP: needs nginx, python3 and curl");
        return;
    }
    let name = common::lab_name('s', 't');
    let (d1, d3) = (format!("/tmp/svl-{name}-s1"), format!("/tmp/svl-{name}-s3"));
    let mut toml = LAB
        .replacen("name = \"sticky\"", &format!("name = \"{name}\""), 1)
        .replace("/tmp/svl-sticky-s1", &d1)
        .replace("/tmp/svl-sticky-s3", &d3);
    // Captures at Ra (its first port faces the core: the tunnels) and R1.
    for node in ["ra", "rb", "r1"] {
        toml = toml.replacen(
            &format!("name = \"{node}\"\nrole = \"sar\"\n"),
            &format!("name = \"{node}\"\nrole = \"sar\"\npcap = true\n"),
            1,
        );
    }
    assert!(toml.matches("pcap = true").count() == 3 && !toml.contains("svl-sticky-"));
    let _dirs = RemoveOnDrop(vec![d1.clone(), d3]);
    let lab = Lab::up(&name, &toml);

    // Both ingresses know the three sites, reachable and probed.
    for ingress in ["ra", "rb"] {
        assert!(
            wait_until(30, || {
                let s = sites(&lab, ingress);
                s.len() == 3
                    && s.iter()
                        .all(|x| x["reachable"] == true && x["rtt_us"].is_u64())
            }),
            "{ingress} sites: {:?}",
            sites(&lab, ingress)
        );
    }
    // R2 asks for GRE, the others for IPv6-in-IPv6.
    let tunnels: Vec<(u64, String)> = sites(&lab, "ra")
        .iter()
        .map(|s| {
            (
                s["router"].as_u64().unwrap(),
                s["tunnel"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        tunnels.contains(&(12, "gre".into())) && tunnels.contains(&(11, "ipip".into())),
        "{tunnels:?}"
    );

    // New flows follow the score (R1: capacity 4, preference 10, wins).
    for _ in 0..4 {
        new_flow_follows_the_score(&lab, "ra");
    }
    // R1 made far bigger, so neither the load of these flows (the score
    // weighs each site's load against the mean: an idle site is cheap) nor
    // the RTTs this busy machine measures can move the choice.
    lab.ctl("r1", &["metrics", "set", "capacity", ANYCAST, "1000000"]);
    lab.ctl("r1", &["metrics", "set", "preference", ANYCAST, "100"]);
    assert!(
        wait_until(20, || sites(&lab, "ra").iter().any(|s| s["router"] == 11
            && s["capacity"] == 1_000_000
            && s["preference"] == 100)),
        "R1's new metrics never reached Ra"
    );
    for _ in 0..2 {
        new_flow_follows_the_score(&lab, "ra");
    }
    assert_eq!(chosen(&lab, "ra"), Some(11), "{:?}", sites(&lab, "ra"));
    assert!(counter(&lab, "ra", "sar.sticky_new_flow") >= 6);
    let at_r1 = counter(&lab, "r1", "sar.sticky_egress_flow");
    assert!(at_r1 >= 2);
    assert!(
        counter(&lab, "ra", "sar.sticky_learned_from_reply") > 0,
        "nginx reflects the flow label"
    );

    // The tunnel and the option, as tshark reads them.
    let tunnelled = tshark_fields(
        &lab.run_dir().join("ra.pcap"),
        "ipv6.nxt == 41 && tcp",
        &["ipv6.src", "ipv6.dst", "ipv6.nxt"],
        &[],
    );
    let want = vec![
        "fd00:ac::1,fd00:a::20".to_owned(),
        format!("fd00:c1::11,{ANYCAST}"),
        "41,6".to_owned(),
    ];
    assert!(
        tunnelled.contains(&want),
        "Ra's tunnel to R1: {:?}",
        &tunnelled[..tunnelled.len().min(4)]
    );
    let options = tshark_fields(
        &lab.run_dir().join("r1.pcap"),
        "ipv6.opt.type == 0x1e && tcp",
        &["ipv6.src", "ipv6.dst", "ipv6.opt.type"],
        &[],
    );
    assert!(
        options
            .iter()
            .any(|r| r[0] == format!("fd00:c1::11,{ANYCAST}") && r[1] == "fd00:ac::1,fd00:a::20"),
        "R1's replies in the tunnel to Ra, with Sticky-Dst: {:?}",
        &options[..options.len().min(4)]
    );
    if std::path::Path::new("wireshark/svcroute.lua").exists() {
        let decoded = tshark_fields(
            &lab.run_dir().join("r1.pcap"),
            "sticky.egress",
            &["sticky.egress"],
            &["-X", "lua_script:wireshark/svcroute.lua"],
        );
        assert!(decoded.iter().any(|r| r[0] == "fd00:c1::11"), "{decoded:?}");
    }

    // A long download, paced so it outlives the capacity change.
    let file = format!("{d1}/bytes/20000000");
    let dl = "/tmp/svcroute-sticky-dl";
    let mut download = start_download(&lab, "2M", dl);
    if !wait_until(20, || counter(&lab, "r1", "sar.sticky_egress_flow") > at_r1) {
        let _ = download.kill();
        let out = download.wait_with_output().expect("curl ran");
        panic!(
            "the download did not start at R1: {} {}\nr1 {:?}\nr2, r3, ra {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            named(&lab.stats("r1")),
            ["r2", "r3", "ra"].map(|n| named(&lab.stats(n))),
        );
    }
    // R1 says it is small now: new flows go elsewhere, the download stays.
    lab.ctl("r1", &["metrics", "set", "capacity", ANYCAST, "1"]);
    lab.ctl("r1", &["metrics", "set", "preference", ANYCAST, "1"]);
    assert!(
        wait_until(20, || chosen(&lab, "ra").is_some_and(|c| c != 11)),
        "R1 still chosen: {:?}",
        sites(&lab, "ra")
    );
    let elsewhere = new_flow_follows_the_score(&lab, "ra");
    assert_ne!(elsewhere, "s1");
    finish_download(download, dl, &file);
    // The download's load reached Ra in R1's App-Metrics.
    assert!(
        wait_until(15, || sites(&lab, "ra").iter().any(
            |s| s["router"] == 11 && s["load_index"].as_u64().is_some_and(|l| l > 100_000)
        )),
        "{:?}",
        sites(&lab, "ra")
    );

    // The UE moves from Ra to Rb in the middle of a download (scenario 1:
    // Rb has Ra's flooded entry): the download completes byte-exact from
    // s1, the egress translating the UE's new address for nginx.
    lab.ctl("r1", &["metrics", "set", "capacity", ANYCAST, "1000000"]);
    lab.ctl("r1", &["metrics", "set", "preference", ANYCAST, "100"]);
    assert!(
        wait_until(20, || chosen(&lab, "ra") == Some(11)),
        "R1 not chosen again: {:?}",
        sites(&lab, "ra")
    );
    let others = |lab: &Lab| ["r2", "r3"].map(|n| counter(lab, n, "sar.sticky_egress_flow"));
    let (at_r1, at_others) = (counter(&lab, "r1", "sar.sticky_egress_flow"), others(&lab));
    let merged = counter(&lab, "rb", "sar.sticky_merged");
    let download = start_download(&lab, "1M", dl);
    assert!(wait_until(20, || counter(
        &lab,
        "r1",
        "sar.sticky_egress_flow"
    ) > at_r1));
    assert!(
        wait_until(30, || counter(&lab, "rb", "sar.sticky_merged") > merged),
        "Rb never merged Ra's table"
    );
    move_ue(&lab);
    finish_download(download, dl, &file);
    assert_eq!(others(&lab), at_others, "only s1 served the download");
    assert!(counter(&lab, "r1", "sar.sticky_egress_moved_ue") > 0);
    let via_rb =
        counter(&lab, "rb", "sar.sticky_by_option") + counter(&lab, "rb", "sar.sticky_table_hit");
    assert!(via_rb > 0, "the moved UE's packets went through Rb");
    let flows = lab.ctl("r1", &["sticky"])["flow_list"].clone();
    assert!(
        flows.as_array().is_some_and(|f| f
            .iter()
            .any(|x| x["anchor"] == "fd00:a::20" && x["client"] == "fd00:b::20")),
        "{flows}"
    );

    // R1 dies: once the IGP notices, new flows go to the next site.
    lab.verb("node", &["r1", "kill"]);
    assert!(
        wait_until(20, || sites(&lab, "rb")
            .iter()
            .any(|s| s["router"] == 11 && s["reachable"] == false)),
        "Rb still reaches R1"
    );
    let next = new_flow_follows_the_score(&lab, "rb");
    assert_ne!(next, "s1");
    if next == "s2" {
        let gre = tshark_fields(
            &lab.run_dir().join("rb.pcap"),
            "ipv6.nxt == 47 && gre.proto == 0x86dd && tcp",
            &["ipv6.dst"],
            &[],
        );
        assert!(!gre.is_empty(), "Rb's GRE tunnel to R2");
    }
    for node in ["ra", "rb", "c", "r2", "r3"] {
        let drops = lab.drops(node);
        assert!(
            drops.keys().all(|k| k == "drop.sar.igp_lsa_min_arrival"),
            "{node} drops: {drops:?}"
        );
    }
    lab.down();
}
