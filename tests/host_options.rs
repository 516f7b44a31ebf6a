//! A TCP exchange between two host nodes whose every TCP packet, in both
//! directions, carries our IPv6 option in a Destination Options header —
//! proven on the wire by tshark reading the nodes' own `--pcap` captures:
//! the option is present with the configured type and length, checksums are
//! valid, and the exchange completes with verified bodies. Needs root.

mod common;

use common::{have, lab_name, root_or_skip, tshark_fields, Lab};

fn lab_file(name: &str) -> String {
    format!(
        r#"
name = "{name}"
[[segment]]
name = "lan0"

[[node]]
name = "a"
role = "host"
pcap = true
[[node.port]]
segment = "lan0"
addrs = ["fd00::a/64"]
[node.config]
insert_options = [{{ type = 0x3e, data = "1102aabbccdd" }}]

[[node]]
name = "b"
role = "host"
pcap = true
[[node.port]]
segment = "lan0"
addrs = ["fd00::b/64"]
[node.config]
insert_options = [{{ type = 0x1e, data = "0102" }}]
"#
    )
}

#[test]
fn tcp_with_our_option_both_ways_completes_and_is_valid_on_the_wire() {
    if !root_or_skip() {
        return;
    }
    if !have("tshark") {
        eprintln!("SKIP: tshark not installed (scripts/setup installs it)");
        return;
    }
    let name = lab_name('o', 'a');
    let lab = Lab::up(&name, &lab_file(&name));
    let r = lab.ctl(
        "a",
        &[
            "get",
            "http://[fd00::b]/bytes/300000",
            "-n",
            "10",
            "-c",
            "2",
            "--verify",
        ],
    );
    assert_eq!(r["ok"], 10, "{r:#}");
    assert_eq!(r["body_bytes"], 3_000_000, "{r:#}");
    let a = lab.stats("a");
    let b = lab.stats("b");
    for (who, s, rx) in [
        ("a", &a, "shim.option_rx.sticky"),
        ("b", &b, "shim.option_rx.rosa"),
    ] {
        let named = &s["named"];
        assert!(
            named["shim.dest_opts_inserted"].as_u64().unwrap_or(0) > 100,
            "{who}: {s:#}"
        );
        assert!(named[rx].as_u64().unwrap_or(0) > 100, "{who}: {s:#}");
        assert_eq!(named["shim.dest_opts_stripped"], named[rx], "{who}: {s:#}");
        assert_eq!(
            s["named"]
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| k.starts_with("drop."))
                .count(),
            0,
            "{who}: {s:#}"
        );
    }

    // What a's port saw and sent: every TCP packet carries exactly one of the
    // two options (0x3e from a, 0x1e from b) with its configured length.
    let pcap = lab.run_dir().join("a.pcap");
    let rows = tshark_fields(
        &pcap,
        "tcp",
        &[
            "ipv6.src",
            "ipv6.opt.type",
            "ipv6.opt.length",
            "tcp.checksum.status",
        ],
        &["-o", "tcp.check_checksum:TRUE"],
    );
    assert!(rows.len() > 200, "too few TCP frames: {}", rows.len());
    let (mut from_a, mut from_b) = (0, 0);
    for row in &rows {
        // Types and lengths list every option, padding included.
        let (src, types, lens, sum) = (&row[0], &row[1], &row[2], &row[3]);
        let opts: Vec<(&str, &str)> = types.split(',').zip(lens.split(',')).collect();
        match src.as_str() {
            "fd00::a" => {
                assert!(opts.contains(&("0x3e", "6")), "from a: {row:?}");
                from_a += 1;
            }
            "fd00::b" => {
                assert!(opts.contains(&("0x1e", "2")), "from b: {row:?}");
                from_b += 1;
            }
            other => panic!("unexpected source {other}: {row:?}"),
        }
        // 1 = good (tshark's PROTO_CHECKSUM_E_GOOD).
        assert_eq!(sum, "1", "bad TCP checksum: {row:?}");
    }
    assert!(from_a > 50 && from_b > 50, "a {from_a}, b {from_b}");
    lab.down();
}
