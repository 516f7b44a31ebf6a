//! `svcroute lab` end to end: real namespaces, bridges, TAPs, veths, node
//! processes and kernel hosts. Needs root (skips otherwise). Each test uses a
//! lab name of its own (`t<pid>x`), so it can run next to other labs, and a
//! guard that runs `lab down` however the test ends.

use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_svcroute");
const DEFAULT_LAB: &str = include_str!("../examples/labs/default.toml");

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

macro_rules! need_root {
    () => {
        if !is_root() {
            eprintln!("SKIP: lab tests need root (network namespaces)");
            return;
        }
    };
}

/// A unique lab name for this test process.
fn lab_name(suffix: char) -> String {
    format!("t{}{suffix}", std::process::id() % 10000)
}

/// Runs `lab down` on drop, so a failing test leaves nothing behind.
struct LabGuard {
    name: String,
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        let _ = Command::new(BIN).args(["lab", "down", &self.name]).output();
    }
}

fn svcroute(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("running svcroute");
    eprintln!(
        "$ svcroute {} -> {}\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Write the default lab renamed to `name`, with `edit` applied.
fn write_lab(name: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let renamed = DEFAULT_LAB.replacen("name = \"default\"", &format!("name = \"{name}\""), 1);
    assert_ne!(renamed, DEFAULT_LAB, "the default lab's name line moved");
    let dir = std::env::temp_dir().join(format!("svcroute-labtest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, edit(renamed)).unwrap();
    path
}

/// Namespaces of lab `name` still listed by `ip netns list`.
fn namespaces_of(name: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let lab_ns = format!("svl-{name}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|ns| *ns == lab_ns || ns.starts_with(&format!("{lab_ns}-")))
        .map(str::to_owned)
        .collect()
}

fn run_dir(name: &str) -> PathBuf {
    PathBuf::from(format!("/run/svcroute/lab/{name}"))
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| !r.trim_start().starts_with(['Z', 'X']))
        })
        .unwrap_or(false)
}

fn assert_gone(name: &str, pids: &[u64]) {
    assert_eq!(
        namespaces_of(name),
        Vec::<String>::new(),
        "namespaces left behind"
    );
    assert!(
        !run_dir(name).exists(),
        "run dir {} left behind",
        run_dir(name).display()
    );
    for &p in pids {
        assert!(!alive(p), "process {p} of lab {name} still running");
    }
}

#[test]
fn up_serves_both_ways_and_down_removes_everything() {
    need_root!();
    let name = lab_name('a');
    let file = write_lab(&name, |t| t);
    let _guard = LabGuard { name: name.clone() };

    let out = svcroute(&["lab", "up", "--timeout", "30", file.to_str().unwrap()]);
    assert!(out.status.success(), "lab up failed: {}", text(&out));
    let shown = text(&out);
    assert!(
        shown.contains("h1-0") && shown.contains("10.0.0.2/24"),
        "{shown}"
    );
    assert!(
        shown.contains("client") && shown.contains("10.0.0.20/24"),
        "{shown}"
    );

    // Kernel client -> userspace node, IPv4 and IPv6.
    let out = svcroute(&[
        "lab",
        "exec",
        "--lab",
        &name,
        "client",
        "--",
        "curl",
        "-sf",
        "-m",
        "10",
        "http://10.0.0.2/",
    ]);
    assert!(out.status.success(), "curl over IPv4 to h1 failed");
    let out = svcroute(&[
        "lab",
        "exec",
        "--lab",
        &name,
        "client",
        "--",
        "curl",
        "-gsf",
        "-m",
        "10",
        "http://[fd00::2]/",
    ]);
    assert!(out.status.success(), "curl over IPv6 to h1 failed");
    // Kernel client -> kernel server, both families (the bridge and the dual-stack server).
    for url in ["http://10.0.0.20:8000/", "http://[fd00::20]:8000/"] {
        let out = svcroute(&[
            "lab", "exec", "--lab", &name, "client", "--", "curl", "-gsf", "-m", "10", url,
        ]);
        assert!(out.status.success(), "curl {url} failed");
    }
    // Userspace node -> kernel server.
    let sock = run_dir(&name).join("h1.sock");
    let out = svcroute(&[
        "ctl",
        sock.to_str().unwrap(),
        "--json",
        "get",
        "http://10.0.0.20:8000/",
    ]);
    assert!(out.status.success(), "h1 get failed");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ctl --json answer");
    assert!(
        v["ok"].as_u64().unwrap_or(0) >= 1,
        "h1 fetched nothing: {v}"
    );

    // Exit codes come through exec; status and logs work.
    let out = svcroute(&[
        "lab", "exec", "--lab", &name, "client", "--", "sh", "-c", "exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7));
    let out = svcroute(&["lab", "status", &name]);
    assert!(out.status.success());
    let s = text(&out);
    assert!(
        s.contains("h1") && s.contains("yes") && s.contains(&format!("svl-{name}-web")),
        "{s}"
    );
    let out = svcroute(&["lab", "logs", "--lab", &name, "web"]);
    assert!(out.status.success() && text(&out).contains("http.server"));

    // Remember the processes, then take it all down.
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir(&name).join("state.json")).unwrap())
            .unwrap();
    let mut pids: Vec<u64> = state["node_pids"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|v| v.as_u64())
        .collect();
    for v in state["host_pids"].as_object().unwrap().values() {
        pids.extend(v.as_array().unwrap().iter().filter_map(|p| p.as_u64()));
    }
    assert!(pids.len() >= 2, "{state}");
    assert!(pids.iter().all(|&p| alive(p)), "a lab process died early");
    let out = svcroute(&["lab", "down", &name]);
    assert!(out.status.success(), "lab down failed");
    assert_gone(&name, &pids);
    // Idempotent.
    let out = svcroute(&["lab", "down", &name]);
    assert!(out.status.success() && text(&out).contains("not up"));
}

#[test]
fn a_malformed_lab_file_creates_nothing() {
    need_root!();
    let name = lab_name('b');
    let file = write_lab(&name, |t| {
        t.replacen("segment = \"lan0\"", "segment = \"lan9\"", 1)
    });
    let _guard = LabGuard { name: name.clone() };
    let out = svcroute(&["lab", "up", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("lan9") && msg.contains("segment") && msg.contains("line"),
        "{msg}"
    );
    assert_gone(&name, &[]);

    let file = write_lab(&name, |t| t.replacen("[[host]]", "[[host]]\nbogus = 1", 1));
    let out = svcroute(&["lab", "up", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out).contains("bogus"), "{}", text(&out));
    assert_gone(&name, &[]);
}

#[test]
fn a_lab_that_does_not_get_ready_is_torn_down() {
    need_root!();
    let name = lab_name('c');
    // Nothing listens on 10.0.0.99:9, so `up` times out waiting for it.
    let file = write_lab(&name, |t| {
        t.replacen("wait_tcp = [", "wait_tcp = [\"10.0.0.99:9\", ", 1)
    });
    let _guard = LabGuard { name: name.clone() };
    let out = svcroute(&["lab", "up", "--timeout", "3", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("10.0.0.99:9") && msg.contains("torn down"),
        "{msg}"
    );
    assert_gone(&name, &[]);
}
