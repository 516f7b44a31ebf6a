//! The shipped RFC 8677 lab (`examples/labs/rfc8677.toml`) is keyed by
//! default (issue 12, "Secure by default"): `lab up` generates the fabric
//! key and writes it into the NR's, the nSFFs' and the switches' node
//! files. A kernel host `inj` on the fabric, the NR's and nSFF1's segments
//! then plays an attacker without the key: a forged deregistration of
//! `www.example2.com`, a forged "link down" event and a forged "ALL NODES"
//! path update (unsigned, and signed with a guessed key), and a transport
//! packet it captured off the fabric, replayed. Each is dropped and counted
//! by reason at the node it reaches, the NR keeps the name and the link,
//! nSFF1 keeps its cache, and requests keep working. Needs root and
//! python3 (skips otherwise).

mod common;

use std::collections::BTreeMap;

use smoltcp::wire::EthernetAddress;
use svcroute_stack::wire::auth::{Keyring, SENDER_NR};
use svcroute_stack::wire::gff::{self, MessageType, PathId};
use svcroute_stack::wire::nr::{
    self, Fqdn, Ids, LinkEvent, LinkState, NsffId, PathUpdate, Registration, Repr, Tlv, Tlvs,
    UpdateKind, ALL_NSFFS,
};

use common::{have, lab_name, root_or_skip, svcroute, text, wait_until, Lab, INJ_HOST, SEND_PY};

const LAB: &str = include_str!("../examples/labs/rfc8677.toml");

/// `sniff.py IFACE`: print (hex) the first GFF transport data frame with
/// data seen on IFACE, as it was on the wire.
const SNIFF_PY: &str = r#"
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 0))
while True:
    f = s.recv(65535)
    if len(f) > 14 + 40 + 34 + 40 and f[12:14] == b"\x86\xdd" and f[14 + 6] == 253 and (f[14 + 41] & 0x0f) == 1:
        print(f.hex(), flush=True)
        break
"#;

/// Link IDs into the NR and nSFF1 (examples/labs/rfc8677.toml).
const TO_NR: u8 = 0;
const TO_NSFF1: u8 = 2;
/// The direct link f1 -> f2.
const F1_F2: u8 = 10;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn frame(path: PathId, t: MessageType, payload: &[u8]) -> String {
    // The source MAC is the sender's: send.py writes it.
    hex(&gff::ethernet_frame(
        EthernetAddress::BROADCAST,
        EthernetAddress([0x02, 0, 0, 0, 0, 0]),
        path,
        t,
        gff::HOP_LIMIT,
        payload,
    ))
}

fn emit(repr: &Repr<'_>) -> Vec<u8> {
    let mut b = vec![0; repr.buffer_len()];
    repr.emit(&mut b);
    b
}

/// `payload` as is, and sealed with a key the lab does not have.
fn unsigned_and_guessed(t: MessageType, payload: Vec<u8>, sender: u16) -> [Vec<u8>; 2] {
    let mut guessed = payload.clone();
    let mut ring = Keyring::new(vec![(1, b"a guess at the fabric key".to_vec())], sender, 0);
    nr::seal(&mut ring, 0, t, &mut guessed);
    [payload, guessed]
}

fn send(lab: &Lab, iface: &str, frames: &[String]) {
    let mut args = vec!["python3", "-c", SEND_PY, iface];
    args.extend(frames.iter().map(String::as_str));
    let out = lab.exec("inj", 20, &args);
    assert!(out.status.success(), "send.py: {}", text(&out));
}

fn curl_ok(lab: &Lab, url: &str) -> bool {
    let out = lab.exec(
        "client",
        20,
        &[
            "curl",
            "-sS",
            "-m",
            "10",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            url,
        ],
    );
    String::from_utf8_lossy(&out.stdout).trim() == "200"
}

fn counter(lab: &Lab, node: &str, name: &str) -> u64 {
    common::named(&lab.stats(node))
        .get(name)
        .copied()
        .unwrap_or(0)
}

fn nr_names(lab: &Lab) -> BTreeMap<String, String> {
    lab.ctl("nr", &["names"])["names"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            (
                n["fqdn"].as_str().unwrap_or("").to_owned(),
                n["nsff_ids"].to_string(),
            )
        })
        .collect()
}

/// Wait until every `(node, counter)` has grown by `by` from `before`.
#[track_caller]
fn wait_counted(lab: &Lab, want: &[(&str, &str)], before: &BTreeMap<String, u64>, by: u64) {
    let mut now = BTreeMap::new();
    let ok = wait_until(20, || {
        now = want
            .iter()
            .map(|(n, c)| (format!("{n} {c}"), counter(lab, n, c)))
            .collect();
        now.iter()
            .all(|(k, v)| *v >= before.get(k).copied().unwrap_or(0) + by)
    });
    assert!(
        ok,
        "wanted +{by} on {want:?}: before {before:?}, now {now:?}"
    );
}

fn snapshot(lab: &Lab, want: &[(&str, &str)]) -> BTreeMap<String, u64> {
    want.iter()
        .map(|(n, c)| (format!("{n} {c}"), counter(lab, n, c)))
        .collect()
}

#[test]
fn a_keyed_lab_drops_forged_and_replayed_control_and_transport() {
    if !root_or_skip() {
        return;
    }
    if !have("python3") {
        eprintln!("skipping: no python3");
        return;
    }
    let name = lab_name('k', 'y');
    let toml = LAB.replacen("name = \"rfc8677\"", &format!("name = \"{name}\""), 1) + INJ_HOST;
    let lab = Lab::up(&name, &toml);

    // Keyed by default: one generated fabric key in every fabric node's
    // file, and kept in the run directory.
    let keys: toml::Table = toml::from_str(
        &std::fs::read_to_string(lab.run_dir().join("keys.toml")).expect("keys.toml"),
    )
    .unwrap();
    let fabric = keys["fabric"].as_str().expect("a fabric key").to_owned();
    assert_eq!(fabric.len(), 64);
    for node in ["nr", "nsff1", "nsff2", "f1", "f2", "f3"] {
        let t = std::fs::read_to_string(lab.run_dir().join(format!("{node}.toml"))).unwrap();
        assert!(
            t.contains(&fabric),
            "{node}'s file lacks the fabric key:\n{t}"
        );
    }

    // The chain works keyed.
    assert!(
        wait_until(30, || curl_ok(&lab, "http://www.example2.com/")),
        "www.example2.com through the keyed chain"
    );
    assert!(curl_ok(&lab, "http://www.example.com/"));
    assert_eq!(
        nr_names(&lab).get("www.example2.com").map(String::as_str),
        Some("[2]")
    );
    for n in ["nr", "nsff1", "nsff2"] {
        assert!(
            lab.drops(n)
                .keys()
                .all(|k| !k.contains("auth") && !k.contains("replay")),
            "{n} refused a legitimate message: {:?}",
            lab.drops(n)
        );
    }

    // A forged deregistration of www.example2.com for nSFF 2, on the NR's
    // link (eth1): unsigned, then signed with a guessed key.
    let fqdn = Fqdn::new("www.example2.com").unwrap();
    let tlv = [Tlv::Fqdn(fqdn.as_str())];
    let dereg = emit(&Repr::Registration(Registration {
        deregister: true,
        hash: fqdn.hash(),
        nsff_id: NsffId::new(2).unwrap(),
        tlvs: Tlvs::new(&tlv).unwrap(),
    }));
    // A forged "link down" of the direct f1 -> f2 link, as from f1.
    let down = emit(&Repr::LinkEvent(LinkEvent {
        link_id: F1_F2,
        state: LinkState::Down,
        tlvs: Tlvs::EMPTY,
    }));
    let nr_counters = [("nr", "drop.nr.auth_missing"), ("nr", "drop.nr.auth_bad")];
    let before = snapshot(&lab, &nr_counters);
    let mut frames = Vec::new();
    for (t, p, sender) in [
        (MessageType::Registration, dereg, 2),
        (MessageType::LinkEvent, down, 0x201),
    ] {
        for v in unsigned_and_guessed(t, p, sender) {
            frames.push(frame(PathId::link(TO_NR), t, &v));
        }
    }
    send(&lab, "eth1", &frames);
    wait_counted(&lab, &nr_counters, &before, 2);
    assert_eq!(
        nr_names(&lab).get("www.example2.com").map(String::as_str),
        Some("[2]"),
        "the forged deregistration was not acted on"
    );
    let links = lab.ctl("nr", &["links"]);
    assert_eq!(
        links["down"],
        serde_json::json!([]),
        "the forged link down was not acted on: {links}"
    );

    // A forged "ALL NODES" path update (it would flush nSFF1's cache), on
    // nSFF1's link (eth2), as from the NR.
    let ids = [ALL_NSFFS];
    let update = emit(&Repr::PathUpdate(PathUpdate {
        kind: UpdateKind::NsffIds,
        ids: Ids::new(&ids).unwrap(),
        tlvs: Tlvs::EMPTY,
    }));
    let nsff_counters = [
        ("nsff1", "drop.nsff.nr_auth_missing"),
        ("nsff1", "drop.nsff.nr_auth_bad"),
    ];
    let before = snapshot(&lab, &nsff_counters);
    let updates = counter(&lab, "nsff1", "nsff.path_updates");
    let frames: Vec<String> = unsigned_and_guessed(MessageType::PathUpdate, update, SENDER_NR)
        .iter()
        .map(|p| frame(PathId::link(TO_NSFF1), MessageType::PathUpdate, p))
        .collect();
    send(&lab, "eth2", &frames);
    wait_counted(&lab, &nsff_counters, &before, 1);
    assert_eq!(counter(&lab, "nsff1", "nsff.path_updates"), updates);
    assert_eq!(
        lab.ctl("nsff1", &["cache"])["entries"],
        1,
        "nSFF1 still has www.example2.com cached"
    );

    // A transport packet captured off the fabric while a request crosses
    // it (at f2's TAP on the f1 - f2 segment, in the lab namespace: the
    // switches address their neighbours' MACs, so a bridge port does not
    // see them), then played again by `inj` on that segment (eth0).
    let sniff_lab = name.clone();
    let sniffer = std::thread::spawn(move || {
        svcroute(&[
            "lab", "exec", "--lab", &sniff_lab, "f2", "--", "timeout", "60", "python3", "-c",
            SNIFF_PY, "f2-0",
        ])
    });
    let mut requests = 0;
    while !sniffer.is_finished() && requests < 50 {
        assert!(curl_ok(&lab, "http://www.example2.com/"));
        requests += 1;
    }
    let captured = sniffer.join().unwrap();
    let captured = String::from_utf8_lossy(&captured.stdout).trim().to_owned();
    assert!(
        !captured.is_empty(),
        "no transport packet seen on the fabric"
    );
    let replay = [
        ("nsff1", "drop.nsff.transport_replayed"),
        ("nsff2", "drop.nsff.transport_replayed"),
    ];
    let before: u64 = snapshot(&lab, &replay).values().sum();
    // send.py writes inj's MAC as the source: the switches do not care.
    send(&lab, "eth0", &[captured]);
    let ok = wait_until(20, || {
        snapshot(&lab, &replay).values().sum::<u64>() > before
    });
    assert!(
        ok,
        "the replayed transport packet was not counted: {:?}",
        snapshot(&lab, &replay)
    );

    // Requests keep working, and no forged message changed anything.
    assert!(curl_ok(&lab, "http://www.example2.com/"));
    assert!(curl_ok(&lab, "http://www.example.com/"));
    assert_eq!(
        nr_names(&lab).get("www.example2.com").map(String::as_str),
        Some("[2]")
    );
    lab.down();
}
