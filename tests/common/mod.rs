//! Plumbing shared by root integration tests that build `svcroute lab`s:
//! a [`Lab`] guard that brings a lab up from a TOML text and takes it down
//! however the test ends, bounded commands, and control-socket helpers.
//!
//! Every command runs under coreutils `timeout`, so a hung curl, python or
//! control request fails the test instead of hanging it.

// Each test binary uses a subset of these helpers.
#![allow(dead_code)]

pub(crate) mod chain;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_svcroute");

/// Whether this process runs as root; prints a SKIP line when it does not.
pub(crate) fn root_or_skip() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false);
    if !root {
        eprintln!("SKIP: lab tests need root (network namespaces)");
    }
    root
}

/// `prog args...` under `timeout -k 5 secs`; echoes the command and the
/// (shortened) output to stderr for the test log.
pub(crate) fn run_bounded(secs: u32, prog: &str, args: &[&str]) -> Output {
    let out = Command::new("timeout")
        .args(["-k", "5", &secs.to_string(), prog])
        .args(args)
        .output()
        .expect("running timeout(1)");
    eprintln!(
        "$ {prog} {} -> {}\n{}{}",
        shorten(&args.join(" ")),
        out.status,
        shorten(&String::from_utf8_lossy(&out.stdout)),
        shorten(&String::from_utf8_lossy(&out.stderr)),
    );
    out
}

/// `svcroute args...`, bounded.
pub(crate) fn svcroute(args: &[&str]) -> Output {
    run_bounded(60, BIN, args)
}

/// stdout and stderr as one text.
pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn shorten(s: &str) -> String {
    const MAX: usize = 1500;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)\n", &s[..end], s.len())
}

/// A lab name unique to this test process: `<prefix><pid % 1000><suffix>`.
pub(crate) fn lab_name(prefix: char, suffix: char) -> String {
    format!("{prefix}{}{suffix}", std::process::id() % 1000)
}

/// Poll `f` every 50 ms until it holds or `secs` pass; whether it held.
#[allow(clippy::disallowed_methods)] // tests drive real processes in real time
pub(crate) fn wait_until(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether process `pid` exists and is not a zombie.
pub(crate) fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| !r.trim_start().starts_with(['Z', 'X']))
        })
        .unwrap_or(false)
}

/// The pid `node` answers `ctl ping` with.
pub(crate) fn pid_of(lab: &Lab, node: &str) -> u64 {
    lab.ctl(node, &["ping"])["pid"]
        .as_u64()
        .expect("ping has a pid")
}

/// SIGKILL `pid` and wait until it is gone.
pub(crate) fn kill9(pid: u64) {
    let out = run_bounded(10, "kill", &["-KILL", &pid.to_string()]);
    assert!(out.status.success(), "kill -KILL {pid}: {}", text(&out));
    assert!(wait_until(10, || !alive(pid)), "pid {pid} survived SIGKILL");
}

/// Start `node` (role `role`) again in the lab namespace, as `lab up`
/// does, on the same node file; wait until it answers ready. `lab down`
/// stops it; the caller reaps it.
pub(crate) fn restart(lab: &Lab, node: &str, role: &str) -> Child {
    let dir = lab.run_dir();
    let log = std::fs::File::create(dir.join(format!("{node}.restart.log"))).unwrap();
    let netns = lab.netns();
    let child = std::os::unix::process::CommandExt::process_group(
        Command::new("ip")
            .args(["netns", "exec", &netns, BIN, "run", role, "-c"])
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
    let pid = u64::from(child.id());
    let sock = lab.sock(node);
    assert!(
        wait_until(20, || {
            Command::new(BIN)
                .args(["ctl", "--json", &sock, "ping"])
                .output()
                .is_ok_and(|o| {
                    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
                    v["ready"] == true && v["pid"].as_u64() == Some(pid)
                })
        }),
        "{node} did not come back (pid {pid})"
    );
    child
}

/// A lab that is up; `lab down` runs when it is dropped, however the test
/// ends. [`Lab::down`] takes it down explicitly and asserts nothing is left.
#[derive(Debug)]
pub(crate) struct Lab {
    name: String,
    file: PathBuf,
    is_down: bool,
}

impl Lab {
    /// Write `toml` (whose `name` must be `name`) and `lab up` it.
    #[track_caller]
    pub(crate) fn up(name: &str, toml: &str) -> Self {
        Self::up_within(name, toml, 30)
    }

    /// [`Lab::up`], waiting up to `secs` for the nodes to be ready (labs
    /// with microVM nodes boot slower on a busy machine).
    #[track_caller]
    pub(crate) fn up_within(name: &str, toml: &str, secs: u32) -> Self {
        assert!(
            toml.contains(&format!("name = \"{name}\"")),
            "lab file does not name lab {name}"
        );
        let dir = std::env::temp_dir().join(format!("svcroute-tests-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating the lab file directory");
        let file = dir.join(format!("{name}.toml"));
        std::fs::write(&file, toml).expect("writing the lab file");
        // The guard exists before anything is created.
        let lab = Self {
            name: name.to_owned(),
            file,
            is_down: false,
        };
        // A lab of this name left by an earlier, killed run of this test.
        svcroute(&["lab", "down", name]);
        let out = run_bounded(
            secs + 60,
            BIN,
            &[
                "lab",
                "up",
                "--timeout",
                &secs.to_string(),
                lab.file.to_str().expect("UTF-8 temp dir"),
            ],
        );
        assert!(
            out.status.success(),
            "lab up {name} failed:\n{}",
            text(&out)
        );
        lab
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// `/run/svcroute/lab/<lab>`.
    pub(crate) fn run_dir(&self) -> PathBuf {
        PathBuf::from(format!("/run/svcroute/lab/{}", self.name))
    }

    /// The lab namespace `svl-<lab>`, holding the bridges and TAPs.
    pub(crate) fn netns(&self) -> String {
        format!("svl-{}", self.name)
    }

    /// The control socket of `node` (a path, so labs with the same node
    /// names never mix).
    pub(crate) fn sock(&self, node: &str) -> String {
        self.run_dir()
            .join(format!("{node}.sock"))
            .to_string_lossy()
            .into_owned()
    }

    /// `cmd` in kernel host `host`'s namespace, bounded by `secs`.
    pub(crate) fn exec(&self, host: &str, secs: u32, cmd: &[&str]) -> Output {
        let secs_s = secs.to_string();
        let mut args = vec![
            "lab", "exec", "--lab", &self.name, host, "--", "timeout", "-k", "3", &secs_s,
        ];
        args.extend_from_slice(cmd);
        run_bounded(secs + 10, BIN, &args)
    }

    /// `svcroute ctl --json <node> args...`: the node's JSON answer.
    #[track_caller]
    pub(crate) fn ctl(&self, node: &str, args: &[&str]) -> Value {
        let sock = self.sock(node);
        let mut all = vec!["ctl", "--json", "--timeout", "30", &sock];
        all.extend_from_slice(args);
        let out = svcroute(&all);
        assert!(
            out.status.success(),
            "ctl {node} {args:?} failed:\n{}",
            text(&out)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("ctl --json answers JSON");
        assert!(v.get("error").is_none(), "ctl {node} {args:?}: {v}");
        v
    }

    /// `svcroute lab VERB --lab <lab> ARGS...` (`link`, `node`, `host`: the
    /// break verbs), asserted to succeed; its output.
    #[track_caller]
    pub(crate) fn verb(&self, verb: &str, args: &[&str]) -> String {
        let mut all = vec!["lab", verb, "--lab", &self.name];
        all.extend_from_slice(args);
        let out = svcroute(&all);
        assert!(
            out.status.success(),
            "lab {verb} {args:?} failed:\n{}",
            text(&out)
        );
        text(&out)
    }

    /// `ctl <node> stats`.
    pub(crate) fn stats(&self, node: &str) -> Value {
        self.ctl(node, &["stats"])
    }

    /// The node's `drop.*` counters.
    pub(crate) fn drops(&self, node: &str) -> BTreeMap<String, u64> {
        named(&self.stats(node))
            .into_iter()
            .filter(|(k, _)| k.starts_with("drop."))
            .collect()
    }

    /// `ctl <node> ping` answers ready, and its process is alive; its pid.
    #[track_caller]
    pub(crate) fn assert_node_alive(&self, node: &str) -> u64 {
        let v = self.ctl(node, &["ping"]);
        assert_eq!(v["ready"], true, "{node} not ready: {v}");
        let pid = v["pid"].as_u64().expect("ping has a pid");
        assert!(alive(pid), "{node} (pid {pid}) is not running");
        pid
    }

    /// Turn br_netfilter off in the lab namespace if it is on there.
    ///
    /// With the `br_netfilter` module loaded, every new namespace starts with
    /// `net.bridge.bridge-nf-call-ip{,6}tables=1`, and the bridge then drops
    /// IPv4/IPv6 frames whose header fails the kernel's sanity checks
    /// (`br_validate_ipv4/6`: bad version, IHL, checksum, lengths beyond the
    /// frame) before they reach any TAP. Tests that send malformed frames
    /// across a segment need a pure L2 bridge. Returns whether it changed
    /// anything.
    pub(crate) fn disable_bridge_netfilter(&self) -> bool {
        let ns = self.netns();
        let keys = [
            "net.bridge.bridge-nf-call-iptables",
            "net.bridge.bridge-nf-call-ip6tables",
            "net.bridge.bridge-nf-call-arptables",
        ];
        let mut changed = false;
        for key in keys {
            let out = run_bounded(10, "ip", &["netns", "exec", &ns, "sysctl", "-n", key]);
            if !out.status.success() || String::from_utf8_lossy(&out.stdout).trim() == "0" {
                continue; // no br_netfilter, or already off
            }
            let set = format!("{key}=0");
            let out = run_bounded(10, "ip", &["netns", "exec", &ns, "sysctl", "-qw", &set]);
            assert!(out.status.success(), "sysctl {set} in {ns}: {}", text(&out));
            changed = true;
        }
        if changed {
            eprintln!("NOTE: br_netfilter was on in {ns}; turned it off for raw-frame tests");
        }
        changed
    }

    /// Pids the lab recorded: nodes and host commands.
    pub(crate) fn pids(&self) -> Vec<u64> {
        let Ok(s) = std::fs::read_to_string(self.run_dir().join("state.json")) else {
            return Vec::new();
        };
        let Ok(state) = serde_json::from_str::<Value>(&s) else {
            return Vec::new();
        };
        let mut pids: Vec<u64> = state["node_pids"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values().filter_map(Value::as_u64))
            .collect();
        for v in state["host_pids"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values())
        {
            pids.extend(v.as_array().into_iter().flatten().filter_map(Value::as_u64));
        }
        pids
    }

    /// `lab down`, then assert the lab left nothing: no namespace, no run
    /// directory, none of its recorded processes, no `svcroute run` of it.
    #[track_caller]
    pub(crate) fn down(mut self) {
        let pids = self.pids();
        assert!(!pids.is_empty(), "lab {} recorded no processes", self.name);
        // The process scan below must see the nodes while they run.
        assert!(
            !node_processes_of(&self.name).is_empty(),
            "no `svcroute run` process of lab {} found",
            self.name
        );
        self.is_down = true;
        let out = svcroute(&["lab", "down", &self.name]);
        assert!(out.status.success(), "lab down failed:\n{}", text(&out));
        let left = self.leftovers(&pids);
        assert!(left.is_empty(), "lab {} left behind: {left:?}", self.name);
        // Idempotent.
        let out = svcroute(&["lab", "down", &self.name]);
        assert!(
            out.status.success() && text(&out).contains("not up"),
            "second lab down:\n{}",
            text(&out)
        );
    }

    /// What is still there of the lab after `lab down`.
    fn leftovers(&self, pids: &[u64]) -> Vec<String> {
        let mut left: Vec<String> = namespaces_of(&self.name)
            .into_iter()
            .map(|ns| format!("namespace {ns}"))
            .collect();
        if self.run_dir().exists() {
            left.push(format!("run dir {}", self.run_dir().display()));
        }
        left.extend(
            pids.iter()
                .filter(|&&p| alive(p))
                .map(|p| format!("recorded process {p}")),
        );
        left.extend(
            node_processes_of(&self.name)
                .into_iter()
                .map(|(pid, cmd)| format!("process {pid}: {cmd}")),
        );
        left
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        if let Some(dir) = self.file.parent() {
            let _ = std::fs::remove_dir(dir); // once empty
        }
        if self.is_down {
            return;
        }
        let pids = self.pids();
        let out = svcroute(&["lab", "down", &self.name]);
        let left = self.leftovers(&pids);
        if out.status.success() && left.is_empty() {
            return;
        }
        let msg = format!(
            "lab down {} left behind {left:?}:\n{}",
            self.name,
            text(&out)
        );
        if std::thread::panicking() {
            eprintln!("{msg}");
        } else {
            panic!("{msg}");
        }
    }
}

/// The `named` counters of a `ctl stats` answer.
pub(crate) fn named(stats: &Value) -> BTreeMap<String, u64> {
    stats["named"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// `after - before` for every counter that changed.
pub(crate) fn delta(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(k, &v)| {
            let d = v.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// Namespaces of lab `name` still listed by `ip netns list`.
pub(crate) fn namespaces_of(name: &str) -> Vec<String> {
    let out = run_bounded(10, "ip", &["netns", "list"]);
    let lab_ns = format!("svl-{name}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|ns| *ns == lab_ns || ns.starts_with(&format!("{lab_ns}-")))
        .map(str::to_owned)
        .collect()
}

/// Live `svcroute run` processes whose arguments point into lab `name`'s run
/// directory (the node files and sockets live there).
pub(crate) fn node_processes_of(name: &str) -> Vec<(u64, String)> {
    let dir = format!("/run/svcroute/lab/{name}/");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .filter_map(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<String> = raw
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let ours = args.iter().any(|a| a == "run") && args.iter().any(|a| a.starts_with(&dir));
            (ours && alive(pid)).then(|| (pid, args.join(" ")))
        })
        .collect()
}

/// Whether `cmd` is on PATH.
pub(crate) fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `tshark -r pcap -Y filter -T fields -e f1 -e f2 ... extra...`: one row
/// per frame, multi-valued fields joined by commas.
pub(crate) fn tshark_fields(
    pcap: &Path,
    filter: &str,
    fields: &[&str],
    extra: &[&str],
) -> Vec<Vec<String>> {
    let pcap = pcap.to_str().expect("UTF-8 path");
    let mut args = vec!["-r", pcap, "-Y", filter, "-T", "fields"];
    args.extend(["-E", "separator=|", "-E", "aggregator=,"]);
    for f in fields {
        args.extend(["-e", f]);
    }
    args.extend_from_slice(extra);
    let out = run_bounded(60, "tshark", &args);
    assert!(out.status.success(), "tshark failed: {}", text(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('|').map(str::to_owned).collect())
        .collect()
}

/// Write lab file `toml` for lab `name` into a temporary directory.
pub(crate) fn write_lab_file(name: &str, toml: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("svcroute-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("creating the lab file directory");
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, toml).expect("writing the lab file");
    file
}

/// Runs `lab down NAME` when dropped: for tests of `lab up` failing, which
/// must create nothing, but must not leave anything either if they are wrong.
pub(crate) struct DownOnDrop(pub(crate) String);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        let _ = Command::new(BIN).args(["lab", "down", &self.0]).output();
    }
}

/// Assert lab `name` has no namespace and no run directory.
#[track_caller]
pub(crate) fn assert_nothing_of(name: &str) {
    assert_eq!(
        namespaces_of(name),
        Vec::<String>::new(),
        "namespaces left behind"
    );
    let dir = PathBuf::from(format!("/run/svcroute/lab/{name}"));
    assert!(!dir.exists(), "run dir {} left behind", dir.display());
}

/// A kernel host `inj` for labs built on the default RFC 8677 lab: one leg
/// on the fabric between f1 and f2, one on the NR's link, one on nSFF1's
/// link; no addresses. Appended to the lab file by tests that inject.
pub(crate) const INJ_HOST: &str = r#"
[[host]]
name = "inj"
[[host.iface]]
segment = "fab"
[[host.iface]]
segment = "nrs"
[[host.iface]]
segment = "n1"
"#;

/// `python3 -c SEND_PY IFACE HEX...`: write each frame on IFACE, with
/// IFACE's MAC as the Ethernet source.
pub(crate) const SEND_PY: &str = r#"
import socket, sys
iface = sys.argv[1]
mac = bytes.fromhex(open(f"/sys/class/net/{iface}/address").read().strip().replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
for h in sys.argv[2:]:
    f = bytearray.fromhex(h)
    f[6:12] = mac
    s.send(bytes(f))
"#;
