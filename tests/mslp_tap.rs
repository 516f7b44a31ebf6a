//! RFC 3528's Figure 1 over real TAPs: four MDAs (x,y), (x,y), (y,z), (z),
//! kernel namespaces as SA and UA speaking SLPv2 with `svcroute slp`.
//! Registrations reach exactly the MDAs that share their scope; an MDA
//! killed with SIGKILL right after its SrvAck still has the registration
//! when it restarts (write-ahead log); an MDA that was down while others
//! registered catches up by anti-entropy. Needs root.

mod common;

use std::process::{Command, Stdio};

use common::{lab_name, root_or_skip, run_bounded, wait_until, Lab, BIN};

const LAB: &str = include_str!("../examples/labs/mslp.toml");

/// `svcroute slp --da 10.0.0.<mda> --scopes <scopes> ARGS...` from host `from`.
fn slp(lab: &Lab, from: &str, mda: u8, scopes: &str, args: &[&str]) -> (bool, String) {
    let da = format!("10.0.0.{mda}");
    let mut cmd = vec![
        BIN,
        "slp",
        "--da",
        &da,
        "--scopes",
        scopes,
        "--timeout-ms",
        "3000",
    ];
    cmd.extend_from_slice(args);
    let out = lab.exec(from, 20, &cmd);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn register(lab: &Lab, mda: u8, scopes: &str, url: &str) {
    let (ok, text) = slp(
        lab,
        "sa",
        mda,
        scopes,
        &["register", url, "--lifetime", "600", "--mesh-fwd"],
    );
    assert!(ok, "register {url} at mda{mda}: {text}");
}

/// Whether `url` is found at `mda` in `scopes` (`None`: the MDA refused).
fn found(lab: &Lab, mda: u8, scopes: &str, url: &str) -> Option<bool> {
    let (ok, text) = slp(lab, "ua", mda, scopes, &["find", "service:printer"]);
    ok.then(|| text.contains(url))
}

fn eventually_found(lab: &Lab, mda: u8, scopes: &str, url: &str) -> bool {
    wait_until(20, || found(lab, mda, scopes, url) == Some(true))
}

fn pid_of(lab: &Lab, node: &str) -> u64 {
    lab.ctl(node, &["ping"])["pid"].as_u64().unwrap()
}

fn kill9(pid: u64) {
    let out = run_bounded(10, "kill", &["-KILL", &pid.to_string()]);
    assert!(out.status.success());
    assert!(
        wait_until(10, || !common::alive(pid)),
        "pid {pid} survived SIGKILL"
    );
}

/// What `node` says about itself, and its restart log, for a failure message.
fn diagnose(lab: &Lab, node: &str) -> String {
    let log = std::fs::read_to_string(lab.run_dir().join(format!("{node}.restart.log")))
        .unwrap_or_default();
    format!(
        "{node} summary: {}\n{node} stats: {}\n{node} restart log:\n{log}",
        lab.ctl(node, &["summary"]),
        lab.stats(node)
    )
}

/// Start `node` again in the lab namespace, as `lab up` does, on the same
/// node file and state directory. `lab down` stops it; the caller reaps it.
fn restart(lab: &Lab, node: &str) -> std::process::Child {
    let dir = lab.run_dir();
    let log = std::fs::File::create(dir.join(format!("{node}.restart.log"))).unwrap();
    let netns = lab.netns();
    let child = std::os::unix::process::CommandExt::process_group(
        Command::new("ip")
            .args(["netns", "exec", &netns, BIN, "run", "mda", "-c"])
            .arg(dir.join(format!("{node}.toml")))
            .arg("--ctl")
            .arg(dir.join(format!("{node}.sock")))
            .arg("--state-dir")
            .arg(dir.join(format!("{node}.state")))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log),
        0,
    )
    .spawn()
    .unwrap();
    let child_pid = child.id();
    let sock = lab.sock(node);
    assert!(
        wait_until(20, || {
            Command::new(BIN)
                .args(["ctl", "--json", &sock, "ping"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("\"ready\": true"))
        }),
        "{node} did not come back (pid {child_pid})"
    );
    child
}

#[test]
fn figure_1_mesh_scopes_durability_and_catch_up() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('m', 'a');
    let text = LAB.replacen("name = \"mslp\"", &format!("name = \"{name}\""), 1);
    let lab = Lab::up(&name, &text);

    // Scope y at MDA1: MDA2 and MDA3 (y) get it; MDA4 (z only) refuses y.
    let y = "service:printer://10.0.0.10/y1";
    register(&lab, 1, "y", y);
    assert!(
        eventually_found(&lab, 2, "y", y),
        "mda2 never got the y registration"
    );
    assert!(
        eventually_found(&lab, 3, "y", y),
        "mda3 never got the y registration"
    );
    assert_eq!(found(&lab, 4, "y", y), None, "mda4 does not serve scope y");
    assert_eq!(
        found(&lab, 4, "z", y),
        Some(false),
        "a y registration leaked into z"
    );

    // Scope z at MDA3: only MDA4 shares it.
    let z = "service:printer://10.0.0.10/z1";
    register(&lab, 3, "z", z);
    assert!(
        eventually_found(&lab, 4, "z", z),
        "mda4 never got the z registration"
    );
    assert_eq!(found(&lab, 1, "z", z), None, "mda1 does not serve scope z");
    assert_eq!(
        found(&lab, 3, "y", z),
        Some(false),
        "a z registration leaked into y"
    );

    // SIGKILL right after the SrvAck: the registration survives the restart.
    let x = "service:printer://10.0.0.10/x-acked";
    let pid = pid_of(&lab, "mda2");
    let (ok, text) = slp(&lab, "sa", 2, "x", &["register", x, "--lifetime", "600"]);
    assert!(ok, "{text}");
    kill9(pid);
    let first = restart(&lab, "mda2");
    assert_eq!(
        found(&lab, 2, "x", x),
        Some(true),
        "an acknowledged registration was lost\n{}",
        diagnose(&lab, "mda2")
    );

    // MDA2 down while MDA1 accepts a registration; back up, it catches up.
    kill9(pid_of(&lab, "mda2"));
    let late = "service:printer://10.0.0.10/x-late";
    register(&lab, 1, "x", late);
    let second = restart(&lab, "mda2");
    assert!(
        eventually_found(&lab, 2, "x", late),
        "mda2 did not catch up by anti-entropy\n{}\nmda1 peers: {}",
        diagnose(&lab, "mda2"),
        lab.ctl("mda1", &["peers"])
    );
    assert_eq!(found(&lab, 2, "y", y), Some(true));

    lab.down();
    for mut child in [first, second] {
        let _ = child.wait();
    }
}

/// 30 TCP connects to port 427 at once, more than the MDA's 4 listeners:
/// all must be accepted (the listen pool arms one per SYN).
const BURST: &str = r#"
import socket, sys, time
socks = []
for i in range(30):
    s = socket.socket(); s.setblocking(False)
    try: s.connect((sys.argv[1], 427))
    except BlockingIOError: pass
    socks.append(s)
deadline = time.time() + 10
while time.time() < deadline:
    ok = 0
    for s in socks:
        try:
            s.getpeername(); ok += 1
        except OSError: pass
    if ok == len(socks): break
    time.sleep(0.1)
print("established", ok)
"#;

/// Malformed SLP from a kernel namespace, then a registration flood past
/// the table cap: each gets its RFC 2608 answer or is dropped and counted,
/// the table stays at its cap, and the MDA keeps serving.
const BAD: &str = r#"
import socket, struct, sys
def hdr(fn, body, ver=2, xid=0x1234, length=None, flags=0):
    lang = b"en"
    total = 16 + len(body) if length is None else length
    return (struct.pack("!BB", ver, fn) + total.to_bytes(3, "big") + struct.pack("!H", flags)
            + (0).to_bytes(3, "big") + struct.pack("!HH", xid, len(lang)) + lang + body)
def s(x): return struct.pack("!H", len(x)) + x
rq = lambda scope, pred=b"": s(b"") + s(b"service:printer") + s(scope) + s(pred) + s(b"")
cases = [
  ("garbage", b"\x01\x02\x03\x04\x05"),
  ("version1", hdr(1, rq(b"y"), ver=1)),
  ("unknown_fn", hdr(99, rq(b"y"))),
  ("bad_scope", hdr(1, rq(b"nope"))),
  ("truncated_body", hdr(1, s(b"") + s(b"service:printer"))),
  ("length_mismatch", hdr(1, rq(b"y"), length=200)),
  ("bad_predicate", hdr(1, rq(b"y", b"(a="))),
]
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.settimeout(1)
def ask(msg):
    sock.sendto(msg, (sys.argv[1], 427))
    try:
        data, _ = sock.recvfrom(65535)
    except socket.timeout:
        return "none"
    off = 14 + struct.unpack("!H", data[12:14])[0]
    return str(struct.unpack("!H", data[off:off + 2])[0])
for name, msg in cases:
    print(name, ask(msg))
# The flood: unique registrations, past the cap.
codes = {}
for i in range(int(sys.argv[2])):
    url = b"service:printer://10.0.0.10/flood%d" % i
    entry = b"\x00" + struct.pack("!H", 600) + s(url) + b"\x00"
    body = entry + s(b"service:printer") + s(b"y") + s(b"") + b"\x00"
    # FRESH (0x4000): a new registration, not an update (else 13,
    # INVALID_UPDATE, as the first version of this test learned).
    c = ask(hdr(3, body, xid=i & 0xffff, flags=0x4000))
    codes[c] = codes.get(c, 0) + 1
print("flood", " ".join("%s=%d" % kv for kv in sorted(codes.items())))
"#;

#[test]
fn malformed_slp_and_a_registration_flood_are_answered_and_bounded() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('m', 'b');
    let text = format!(
        r#"
name = "{name}"
keys = "none"  # unkeyed on purpose: this test speaks to (or as) unkeyed nodes
[[segment]]
name = "lan0"
[[node]]
name = "mda"
role = "mda"
[[node.port]]
segment = "lan0"
addrs = ["10.0.0.1/24"]
[node.config]
scopes = "y"
max_registrations = 500
[[host]]
name = "ua"
[[host.iface]]
segment = "lan0"
addrs = ["10.0.0.11/24"]
"#
    );
    let lab = Lab::up(&name, &text);
    let pid = pid_of(&lab, "mda");
    let out = lab.exec("ua", 120, &["python3", "-c", BAD, "10.0.0.1", "800"]);
    let got = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{got}");
    // RFC 2608 §7 error codes: 9 VER_NOT_SUPPORTED, 4 SCOPE_NOT_SUPPORTED,
    // 2 PARSE_ERROR; garbage and an unknown function are dropped.
    for line in [
        "garbage none",
        "version1 9",
        "unknown_fn none",
        "bad_scope 4",
        "truncated_body 2",
        "length_mismatch 2",
        "bad_predicate 2",
        // 500 accepted, then DA_BUSY_NOW (11) for the rest.
        "flood 0=500 11=300",
    ] {
        assert!(
            got.lines().any(|l| l == line),
            "expected {line:?} in\n{got}"
        );
    }
    let stats = lab.stats("mda");
    for c in [
        "drop.mda.parse_version",
        "drop.mda.parse_function",
        "drop.mda.parse_syntax",
        "drop.mda.parse_length",
        "drop.mda.parse_truncated",
    ] {
        assert!(
            stats["named"][c].as_u64().unwrap_or(0) >= 1,
            "{c} not counted: {stats:#}"
        );
    }
    let out = lab.exec("ua", 30, &["python3", "-c", BURST, "10.0.0.1"]);
    let burst = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(burst.trim(), "established 30", "a SYN burst was refused");
    let regs = lab.ctl("mda", &["registrations"]);
    let n = regs.as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(n, 500, "the table must stop at its cap");
    assert_eq!(pid_of(&lab, "mda"), pid, "the MDA restarted or died");
    lab.down();
}
