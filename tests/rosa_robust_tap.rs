//! The SAR against bad input and vanished instances, over real TAPs: the
//! ROSA lab of `examples/labs/rosa-small.toml` (client `c` — SAR `s1` — SAR `s2`
//! — instances `i1`, `i2` of `service.org`), here with small caps, short
//! lifetimes and a kernel namespace `k` on the instance segment. Needs root
//! (skips otherwise).
//!
//! ```text
//!   c ─ a ─ s1 ─ l ─ s2 ─ b ─┬─ i1  fd00:b::11
//!                            ├─ i2  fd00:b::12
//!                            └─ k   fd00:b::66, fd00:b::67 (kernel: python3 raw sockets)
//! ```
//!
//! - `k` crafts ROSA packets by hand (python3 stdlib, [`CRAFT`]: SPEC §2.1's
//!   option layout and HMAC, written independently of `stack::wire::rosa`):
//!   announcements without a tag, with a wrong key, an unknown key, a
//!   tampered body or a replayed source are counted and never installed,
//!   and neither are a forged instance of `service.org` or a forged
//!   withdrawal of `i1`; the same bytes with the right key are installed
//!   (proof that the crafted packets are valid).
//! - Malformed options, unknown-mandatory options, duplicate options,
//!   over-long names, unknown kinds and fragments: each dropped under its
//!   own counter, the SAR alive and still routing.
//! - 3,000 distinct names with the right key: the FIB cap (`max_services =
//!   100`) holds on both SARs, the excess is counted (`drop.sar.fib_full`),
//!   the SAR's RSS stays small and `service.org` is still served.
//! - An instance killed with SIGKILL (no withdrawal) expires within its
//!   announcement lifetime on both SARs and gets no new transaction. (A
//!   withdrawal on SIGTERM removes an instance at once: `tests/rosa_tap.rs`.)

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{alive, named, root_or_skip, run_bounded, text, wait_until, Lab};

/// The announcement key of the lab (hex), also in [`CRAFT`].
const KEY: &str = "a11ce5a11ce5a11ce5a11ce5a11ce5a1";
const IGP_KEY: &str = "5ec2e75ec2e75ec2e75ec2e75ec2e75e";
/// Addresses of `k`: its own announcements use the first.
const K: &str = "fd00:b::66";
const I1: &str = "fd00:b::11";
const I2: &str = "fd00:b::12";

/// `python3 -c CRAFT CMD ARGS...` in `k`:
/// - `ann NAME INSTANCE HOW [DST [unknown_entry]]`, `wd NAME INSTANCE HOW`:
///   an announcement (lifetime 300 s) or a withdrawal from `k`, where HOW is
///   `good`, `none`, `wrong_key`, `unknown_key` (key ID 9), `tampered`
///   (Instance changed after signing) or `other_src` (sent from fd00:b::67);
/// - `bad CASE...`: the malformed packets named in `malformed()`;
/// - `frag`: a signed announcement in a first fragment;
/// - `flood N PREFIX`: N signed announcements of `PREFIX<i>.flood`.
const CRAFT: &str = r#"
# Hand-made ROSA packets (SPEC 2.1, docs/wire/rosa.md), python3 stdlib only:
# an IPv6 header, a Destination Options header (next header 59) with option
# 0x3E, sent through an IPPROTO_RAW socket (the kernel takes our header).
import hashlib, hmac, select, socket, struct, sys, time

KEY = bytes.fromhex('a11ce5a11ce5a11ce5a11ce5a11ce5a1')
WRONG = bytes.fromhex('0badc0de0badc0de0badc0de0badc0de')
SAR, SRC, OTHER = 'fd00:b::1', 'fd00:b::66', 'fd00:b::67'

def a6(a):
    return socket.inet_pton(socket.AF_INET6, a)

def name(text):
    return b''.join(struct.pack('!HH', 1, len(s)) + s for s in (x.encode() for x in text.split('/')))

def entry(t, v):
    return bytes([t, len(v)]) + v

def message(kind, entries, ver=1):
    return bytes([(ver << 4) | kind]) + b''.join(entries)

def tag(msg, key_id, secret, src):
    # HMAC-SHA256 over the message without its auth entry and the source.
    mac = hmac.new(secret, msg + a6(src), hashlib.sha256).digest()[:16]
    return entry(8, bytes([key_id]) + mac)

def opt(t, data):
    return bytes([t, len(data)]) + data

def dest_opts(options):
    body = b''.join(options)
    pad = (-(2 + len(body))) % 8
    body += b'\x00' if pad == 1 else (bytes([1, pad - 2]) + bytes(pad - 2) if pad else b'')
    return bytes([59, (2 + len(body)) // 8 - 1]) + body

def ipv6(src, dst, nh, payload):
    return struct.pack('!IHBB', 6 << 28, len(payload), nh, 64) + a6(src) + a6(dst) + payload

def prime():
    # One echo, so the kernel knows the SAR's MAC before the raw packets.
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    for seq in range(40):
        s.sendto(struct.pack('!BBHHH', 128, 0, 0, 0x5253, seq), (SAR, 0))
        end = time.time() + 0.5
        while time.time() < end:
            if not select.select([s], [], [], max(0, end - time.time()))[0]:
                break
            if s.recvfrom(2048)[0][0] == 129:
                return
    sys.exit('no echo reply from ' + SAR)

RAW = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)

def send(payload, src=SRC, dst=SAR, nh=60):
    RAW.sendto(ipv6(src, dst, nh, payload), (dst, 0))

def lifetime(s):
    return entry(6, bytes([6, 4]) + struct.pack('!I', s))

def control(kind, svc, inst, how, extra=()):
    body = [entry(4, a6(inst)), entry(1, name(svc))] + list(extra)
    if kind == 1:
        body.append(lifetime(300))
    m = message(kind, body)
    src = SRC
    if how == 'good':
        m += tag(m, 1, KEY, SRC)
    elif how == 'wrong_key':
        m += tag(m, 1, WRONG, SRC)
    elif how == 'unknown_key':
        m += tag(m, 9, KEY, SRC)
    elif how == 'tampered':
        # Signed for instance SRC, then pointed at OTHER.
        m = m.replace(a6(inst), a6(OTHER), 1) + tag(m, 1, KEY, SRC)
    elif how == 'other_src':
        # A good tag for SRC, replayed from OTHER.
        m += tag(m, 1, KEY, SRC)
        src = OTHER
    elif how != 'none':
        sys.exit('bad sign mode ' + how)
    return m, src

def malformed(case):
    good, _ = control(1, 'bad.example', SRC, 'good')
    long_name = struct.pack('!HH', 1, 126) + b'a' * 126
    signed = lambda kind, entries, ver=1: (lambda m: m + tag(m, 1, KEY, SRC))(message(kind, entries, ver))
    cases = {
        # The ROSA data does not parse.
        'version2': dest_opts([opt(0x3e, signed(1, [entry(1, name('v2.example'))], ver=2))]),
        'entry_overrun': dest_opts([opt(0x3e, good + b'\x42\x09\x00')]),
        'address_of_5': dest_opts([opt(0x3e, message(1, [entry(4, b'12345'), entry(1, name('x.example'))]))]),
        'segment_type_2': dest_opts([opt(0x3e, signed(1, [entry(1, struct.pack('!HH', 2, 5) + b'x.org')]))]),
        'bad_character': dest_opts([opt(0x3e, signed(1, [entry(1, struct.pack('!HH', 1, 5) + b'x*org')]))]),
        'two_services': dest_opts([opt(0x3e, signed(1, [entry(1, name('p.example')), entry(1, name('q.example'))]))]),
        'empty_option': dest_opts([opt(0x3e, b'')]),
        # A name over 128 octets.
        'name_too_long': dest_opts([opt(0x3e, signed(1, [entry(4, a6(SRC)), entry(1, long_name)]))]),
        # The options header does not parse (an option runs past it).
        'option_overrun': bytes([59, 0, 0x3e, 20, 0x11, 0, 0, 0]),
        # Two ROSA options.
        'two_options': dest_opts([opt(0x3e, good), opt(0x3e, control(1, 'other.example', SRC, 'good')[0])]),
        # An unknown option whose action bits say discard (01) / discard + ICMP (10).
        'mandatory_01': dest_opts([opt(0x7f, b'\x00\x00'), opt(0x3e, good)]),
        'mandatory_10': dest_opts([opt(0xbf, b'\x00\x00'), opt(0x3e, good)]),
        # An unknown message kind; a request without a Service entry.
        'kind_9': dest_opts([opt(0x3e, signed(9, [entry(1, name('k9.example'))]))]),
        'request_no_service': dest_opts([opt(0x3e, message(2, [entry(5, bytes([6, 0, 80]))]))]),
    }
    return cases[case]

def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    prime()
    if cmd in ('ann', 'wd'):
        svc, inst, how = args[:3]
        dst = args[3] if len(args) > 3 else SAR
        extra = [entry(0x42, b'\xaa\xbb')] if len(args) > 4 and args[4] == 'unknown_entry' else []
        m, src = control(1 if cmd == 'ann' else 4, svc, inst, how, extra)
        send(dest_opts([opt(0x3e, m)]), src=src, dst=dst)
        print(cmd, svc, inst, how, 'from', src, 'to', dst, m.hex())
    elif cmd == 'bad':
        for case in args:
            send(malformed(case))
            print('sent', case)
            time.sleep(0.02)
    elif cmd == 'frag':
        # The announcement in the first fragment of a two-fragment datagram.
        m, _ = control(1, 'frag.example', SRC, 'good')
        send(bytes([60, 0]) + struct.pack('!HI', 1, 0x5253) + dest_opts([opt(0x3e, m)]), nh=44)
        print('sent frag')
    elif cmd == 'flood':
        n, prefix = int(args[0]), args[1]
        for i in range(n):
            m, _ = control(1, '%s%d.flood' % (prefix, i), SRC, 'good')
            send(dest_opts([opt(0x3e, m)]))
            if i % 25 == 24:
                time.sleep(0.002)
        print('sent', n)
    else:
        sys.exit('unknown command ' + cmd)

main()"#;

fn lab_toml(name: &str, lifetime_s: u32, sar_extra: &str, kernel: bool) -> String {
    let mut t = format!(
        r#"
name = "{name}"

[[segment]]
name = "a"
[[segment]]
name = "l"
[[segment]]
name = "b"

[[node]]
name = "s1"
role = "sar"
[[node.port]]
segment = "a"
addrs = ["fd00:a::1/64"]
[[node.port]]
segment = "l"
addrs = ["fd00:ab::1/64"]
[node.config]
router_id = 1
igp_key = {{ key_id = 1, secret = "{IGP_KEY}" }}
announce_keys = [{{ key_id = 1, secret = "{KEY}" }}]
{sar_extra}
[[node.config.neighbors]]
port = 1
addr = "fd00:ab::2"
cost = 10

[[node]]
name = "s2"
role = "sar"
[[node.port]]
segment = "l"
addrs = ["fd00:ab::2/64"]
[[node.port]]
segment = "b"
addrs = ["fd00:b::1/64"]
[node.config]
router_id = 2
sar_ports = [0]
igp_key = {{ key_id = 1, secret = "{IGP_KEY}" }}
announce_keys = [{{ key_id = 1, secret = "{KEY}" }}]
{sar_extra}
[[node.config.neighbors]]
port = 0
addr = "fd00:ab::1"
cost = 10

[[node]]
name = "c"
role = "host"
[[node.port]]
segment = "a"
addrs = ["fd00:a::10/64"]
gateways = ["fd00:a::1"]
[node.config]
instance = "c"
[node.config.rosa]
ingress = "fd00:a::1"
"#
    );
    for (node, addr) in [("i1", I1), ("i2", I2)] {
        t.push_str(&format!(
            r#"
[[node]]
name = "{node}"
role = "host"
[[node.port]]
segment = "b"
addrs = ["{addr}/64"]
gateways = ["fd00:b::1"]
[node.config]
instance = "{node}"
[node.config.rosa]
sar = "fd00:b::1"
key = "{KEY}"
serve = [{{ service = "service.org", mode = "scheduling", policy = "round-robin", lifetime_s = {lifetime_s} }}]
"#
        ));
    }
    if kernel {
        t.push_str(&format!(
            r#"
[[host]]
name = "k"
[[host.iface]]
segment = "b"
addrs = ["{K}/64", "fd00:b::67/64"]
gateways = ["fd00:b::1"]
"#
        ));
    }
    t
}

fn counter(lab: &Lab, node: &str, name: &str) -> u64 {
    named(&lab.stats(node)).get(name).copied().unwrap_or(0)
}

/// The node's counters that moved since `before`.
fn moved(lab: &Lab, node: &str, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    common::delta(before, &named(&lab.stats(node)))
}

/// Run [`CRAFT`] in `k`.
#[track_caller]
fn craft(lab: &Lab, args: &[&str]) -> String {
    let mut cmd = vec!["python3", "-c", CRAFT];
    cmd.extend_from_slice(args);
    let out = lab.exec("k", 60, &cmd);
    assert!(out.status.success(), "craft {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The service names in `node`'s FIB, sorted.
fn fib(lab: &Lab, node: &str) -> Vec<String> {
    let v = lab.ctl(node, &["fib"]);
    let mut names: Vec<String> = v["fib"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["service"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

fn services(lab: &Lab, node: &str) -> u64 {
    lab.ctl(node, &["fib"])["services"].as_u64().unwrap_or(0)
}

/// `node`'s NHIB rows: (service, address) → seconds to expiry.
fn instances(lab: &Lab, node: &str) -> BTreeMap<(String, String), u64> {
    let v = lab.ctl(node, &["instances"]);
    v["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some((
                (
                    r["service"].as_str()?.to_owned(),
                    r["addr"].as_str()?.to_owned(),
                ),
                r["expires_in_s"].as_u64()?,
            ))
        })
        .collect()
}

/// The addresses serving `service.org` at `node`, sorted.
fn serving(lab: &Lab, node: &str) -> Vec<String> {
    instances(lab, node)
        .into_keys()
        .filter(|(s, _)| s == "service.org")
        .map(|(_, a)| a)
        .collect()
}

/// `ctl c get http://service.org/ -n N --close`: successes and the answers
/// by instance.
fn get(lab: &Lab, n: u32) -> (u64, BTreeMap<String, u64>) {
    let n = n.to_string();
    let v = lab.ctl("c", &["get", "http://service.org/", "-n", &n, "--close"]);
    let by = v["instances"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
        .collect();
    (v["ok"].as_u64().unwrap_or(0), by)
}

/// Resident set size of process `pid`, KiB.
fn rss_kib(pid: u64) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .expect("VmRSS of a live process")
}

/// Send one crafted control message and wait until `node` counted it
/// under `reason`.
#[track_caller]
fn refused(lab: &Lab, node: &str, reason: &str, args: &[&str]) {
    let before = counter(lab, node, reason);
    let said = craft(lab, args);
    assert!(
        wait_until(10, || counter(lab, node, reason) > before),
        "{args:?} ({said}) was not counted as {reason} at {node}: {:?}",
        lab.drops(node)
    );
}

#[test]
fn forged_malformed_and_flooded_announcements_are_refused_and_counted() {
    if !root_or_skip() {
        return;
    }
    let name = common::lab_name('r', 'f');
    let lab = Lab::up(&name, &lab_toml(&name, 30, "max_services = 100", true));
    // Raw frames cross the bridges untouched.
    lab.disable_bridge_netfilter();
    let only_service = vec!["service.org".to_owned()];
    assert!(
        wait_until(20, || serving(&lab, "s1") == [I1, I2]),
        "s1 never learnt both instances: {}",
        lab.ctl("s1", &["instances"])
    );

    // ---- forged announcements and withdrawals --------------------------
    for (how, reason) in [
        ("none", "drop.sar.announce_auth_missing"),
        ("wrong_key", "drop.sar.announce_auth_bad"),
        ("unknown_key", "drop.sar.announce_auth_unknown_key"),
        ("tampered", "drop.sar.announce_auth_bad"),
        ("other_src", "drop.sar.announce_auth_bad"),
    ] {
        refused(&lab, "s2", reason, &["ann", "forged.example", K, how]);
        assert_eq!(fib(&lab, "s2"), only_service, "after {how}");
        // A forged instance for the live service, a forged withdrawal of i1.
        refused(&lab, "s2", reason, &["ann", "service.org", K, how]);
        refused(&lab, "s2", reason, &["wd", "service.org", I1, how]);
        assert_eq!(serving(&lab, "s2"), [I1, I2], "after {how}");
    }
    // Even a good announcement is refused when it comes from another SAR's
    // side: this one, for s1, is routed there by s2 and arrives on s1's SAR
    // port.
    refused(
        &lab,
        "s1",
        "drop.sar.announcement_from_sar",
        &["ann", "forged.example", K, "good", "fd00:ab::1"],
    );
    // Nothing of it anywhere.
    for sar in ["s1", "s2"] {
        assert_eq!(fib(&lab, sar), only_service, "{sar}");
        assert_eq!(serving(&lab, sar), [I1, I2], "{sar}");
        assert_eq!(
            counter(&lab, sar, "sar.announce_added"),
            2 * u64::from(sar == "s2")
        );
    }
    // An unknown entry type, even in a correctly signed announcement, is
    // refused: the SAR cannot know what it asks (the codec keeps such
    // entries; the SAR does not act on them).
    let unknown = counter(&lab, "s2", "drop.sar.rosa_unknown_entry");
    craft(
        &lab,
        &[
            "ann",
            "unknown-entry.example",
            K,
            "good",
            "fd00:b::1",
            "unknown_entry",
        ],
    );
    assert!(
        wait_until(10, || counter(&lab, "s2", "drop.sar.rosa_unknown_entry")
            == unknown + 1),
        "the unknown entry was not counted at s2"
    );
    // The same bytes with the right key and no unknown entry are valid:
    // installed at s2 and flooded to s1.
    craft(&lab, &["ann", "forged.example", K, "good"]);
    for sar in ["s1", "s2"] {
        assert!(
            wait_until(10, || fib(&lab, sar).len() == 2),
            "{sar}: {:?}",
            fib(&lab, sar)
        );
        assert_eq!(fib(&lab, sar), ["forged.example", "service.org"]);
    }
    // A signed withdrawal from the kernel namespace takes it away again.
    craft(&lab, &["wd", "forged.example", K, "good"]);
    for sar in ["s2", "s1"] {
        assert!(
            wait_until(10, || fib(&lab, sar) == only_service),
            "{sar}: {:?}",
            fib(&lab, sar)
        );
    }

    // ---- malformed input ---------------------------------------------------
    let before = named(&lab.stats("s2"));
    let cases = [
        "version2",
        "entry_overrun",
        "address_of_5",
        "segment_type_2",
        "bad_character",
        "two_services",
        "empty_option",
        "option_overrun",
        "name_too_long",
        "two_options",
        "mandatory_01",
        "mandatory_10",
        "kind_9",
        "request_no_service",
    ];
    let mut args = vec!["bad"];
    args.extend(cases);
    craft(&lab, &args);
    craft(&lab, &["frag"]);
    let want: BTreeMap<String, u64> = [
        ("drop.sar.rosa_malformed", 8),
        ("drop.sar.rosa_name_too_long", 1),
        ("drop.sar.rosa_duplicate_option", 1),
        ("drop.sar.dest_opts_unknown_option", 2),
        ("sar.icmp_parameter_problem", 1),
        ("drop.sar.unknown_kind", 1),
        ("drop.sar.no_service", 1),
        ("drop.sar.rosa_fragment", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let got = |lab: &Lab| -> BTreeMap<String, u64> {
        let d = moved(lab, "s2", &before);
        want.keys()
            .map(|k| (k.clone(), d.get(k).copied().unwrap_or(0)))
            .collect()
    };
    assert!(
        wait_until(10, || got(&lab) == want),
        "malformed input counted {:?}, want {want:?}; all drops moved: {:?}",
        got(&lab),
        moved(&lab, "s2", &before)
    );
    // Nothing installed, and nothing else refused or dropped.
    assert_eq!(fib(&lab, "s2"), only_service);
    let d = moved(&lab, "s2", &before);
    for k in d.keys().filter(|k| k.starts_with("drop.")) {
        assert!(want.contains_key(k), "unexpected {k}: {d:?}");
    }
    assert_eq!(d.get("sar.announce_added"), None, "{d:?}");
    // The valid announcement inside the refused packets is valid alone.
    craft(&lab, &["ann", "bad.example", K, "good"]);
    assert!(wait_until(10, || fib(&lab, "s2").contains(&"bad.example".to_owned())));
    craft(&lab, &["wd", "bad.example", K, "good"]);
    for sar in ["s2", "s1"] {
        assert!(wait_until(10, || fib(&lab, sar) == only_service), "{sar}");
    }
    // Alive, and still routing.
    lab.assert_node_alive("s1");
    let s2_pid = lab.assert_node_alive("s2");
    let (ok, by) = get(&lab, 2);
    assert_eq!(ok, 2, "{by:?}");

    // ---- a flood of names: the FIB cap holds -------------------------------
    const FLOOD: u64 = 3000;
    let rss_before = rss_kib(s2_pid);
    let before = named(&lab.stats("s2"));
    let said = craft(&lab, &["flood", &FLOOD.to_string(), "f"]);
    assert!(said.contains(&format!("sent {FLOOD}")), "{said}");
    // service.org plus 99 flood names fill the cap of 100; the rest are
    // refused and counted (a frame lost before it reached the SAR would be
    // neither, so only nearly all are asked for).
    let added = |lab: &Lab| {
        moved(lab, "s2", &before)
            .get("sar.announce_added")
            .copied()
            .unwrap_or(0)
    };
    let full = |lab: &Lab| {
        moved(lab, "s2", &before)
            .get("drop.sar.fib_full")
            .copied()
            .unwrap_or(0)
    };
    assert!(
        wait_until(20, || added(&lab) == 99
            && full(&lab) >= (FLOOD - 99) * 9 / 10),
        "added {}, fib_full {}: {:?}",
        added(&lab),
        full(&lab),
        moved(&lab, "s2", &before)
    );
    eprintln!(
        "flood of {FLOOD}: {} added, {} refused as fib_full",
        added(&lab),
        full(&lab)
    );
    assert!(added(&lab) + full(&lab) <= FLOOD);
    assert_eq!(services(&lab, "s2"), 100);
    assert!(fib(&lab, "s2").contains(&"service.org".to_owned()));
    // s1 learns what s2 accepted, and its own cap holds too.
    assert!(
        wait_until(20, || services(&lab, "s1") == 100),
        "s1 has {} names",
        services(&lab, "s1")
    );
    // Only the cap refused anything.
    let d = moved(&lab, "s2", &before);
    for k in d.keys().filter(|k| k.starts_with("drop.")) {
        assert_eq!(k, "drop.sar.fib_full", "{d:?}");
    }
    // Memory stays bounded: a few MiB at most for the 99 names.
    let rss_after = rss_kib(s2_pid);
    eprintln!("s2 RSS {rss_before} KiB before the flood, {rss_after} KiB after");
    assert!(rss_after < 64 * 1024, "s2 RSS {rss_after} KiB");
    assert!(
        rss_after < rss_before + 16 * 1024,
        "s2 RSS grew from {rss_before} to {rss_after} KiB"
    );
    // The live service is still served by both instances.
    assert_eq!(serving(&lab, "s1"), [I1, I2]);
    let (ok, by) = get(&lab, 4);
    assert_eq!(ok, 4, "{by:?}");
    assert_eq!(by.keys().collect::<Vec<_>>(), ["i1", "i2"], "{by:?}");

    lab.assert_node_alive("s1");
    lab.assert_node_alive("s2");
    lab.down();
}

#[test]
fn a_killed_instance_expires_within_its_lifetime() {
    if !root_or_skip() {
        return;
    }
    const LIFETIME: u64 = 6;
    let name = common::lab_name('r', 'k');
    let lab = Lab::up(&name, &lab_toml(&name, LIFETIME as u32, "", false));
    assert!(
        wait_until(20, || serving(&lab, "s1") == [I1, I2]),
        "s1 never learnt both instances: {}",
        lab.ctl("s1", &["instances"])
    );
    // Before: transactions spread over both.
    let (ok, by) = get(&lab, 4);
    assert_eq!(ok, 4, "{by:?}");
    assert_eq!(by.keys().collect::<Vec<_>>(), ["i1", "i2"], "{by:?}");

    let s2_before = named(&lab.stats("s2"));
    let s1_before = named(&lab.stats("s1"));
    let pid = lab.assert_node_alive("i2");
    #[allow(clippy::disallowed_methods)] // real processes, real time
    let killed = Instant::now();
    assert!(run_bounded(10, "kill", &["-KILL", &pid.to_string()])
        .status
        .success());
    assert!(
        wait_until(10, || !alive(pid)),
        "i2 (pid {pid}) survived SIGKILL"
    );

    // i2 sent nothing more, so nothing may extend its rows: at every look,
    // the expiry each SAR reports is at most one lifetime after the kill
    // (the last announcement came before it; +1 s for the whole seconds
    // reported). Then the rows go, on their own.
    let bound = killed + Duration::from_secs(LIFETIME + 1);
    let key = ("service.org".to_owned(), I2.to_owned());
    let mut looks = 0;
    let gone = wait_until(3 * LIFETIME + 10, || {
        let mut left = false;
        for sar in ["s1", "s2"] {
            #[allow(clippy::disallowed_methods)]
            let asked = Instant::now();
            if let Some(&s) = instances(&lab, sar).get(&key) {
                looks += 1;
                let expiry = asked + Duration::from_secs(s);
                assert!(
                    expiry <= bound,
                    "{sar} keeps i2 {s} s more, {:?} after the kill",
                    asked - killed
                );
                left = true;
            }
        }
        !left
    });
    assert!(
        gone,
        "i2 still installed: s1 {:?}, s2 {:?}",
        instances(&lab, "s1"),
        instances(&lab, "s2")
    );
    eprintln!("i2 expired after {:?} ({looks} looks)", killed.elapsed());
    for sar in ["s1", "s2"] {
        assert_eq!(serving(&lab, sar), [I1], "{sar}");
    }
    // It expired (s2) and was dropped from the flooded part (s1); no
    // withdrawal was ever sent.
    let d2 = moved(&lab, "s2", &s2_before);
    assert_eq!(d2.get("sar.instance_expired"), Some(&1), "{d2:?}");
    assert_eq!(d2.get("sar.announce_withdrawn"), None, "{d2:?}");
    let d1 = moved(&lab, "s1", &s1_before);
    let removed = d1.get("sar.remote_instance_removed").copied().unwrap_or(0)
        + d1.get("sar.instance_expired").copied().unwrap_or(0);
    assert!(removed >= 1, "{d1:?}");

    // Every new transaction lands on the survivor.
    let (ok, by) = get(&lab, 6);
    assert_eq!(ok, 6, "{by:?}");
    assert_eq!(by.get("i1"), Some(&6), "{by:?}");
    assert_eq!(by.get("i2"), None, "{by:?}");
    // The survivor never lapsed anywhere while it kept announcing.
    for (sar, d) in [("s1", &d1), ("s2", &d2)] {
        let lapses = d.get("sar.instance_expired").copied().unwrap_or(0)
            + d.get("sar.remote_instance_removed").copied().unwrap_or(0);
        assert_eq!(lapses, 1, "{sar}: {d:?}");
    }

    lab.assert_node_alive("s1");
    lab.assert_node_alive("s2");
    lab.down();
}
