//! Helpers shared by the root integration tests: a lab that tears itself
//! down however the test ends, the svcroute binary, tshark.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_svcroute");

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// Return early (test passes with a SKIP line) when not root.
macro_rules! need_root {
    () => {
        if !$crate::support::is_root() {
            eprintln!("SKIP: needs root (network namespaces)");
            return;
        }
    };
}
pub(crate) use need_root;

/// Whether `cmd` is on PATH.
pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Run svcroute, echoing the command and its output to the test log.
pub fn svcroute(args: &[&str]) -> Output {
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

/// Run svcroute (which must succeed) and parse its stdout as JSON.
pub fn svcroute_json(args: &[&str]) -> Value {
    let out = svcroute(args);
    assert!(out.status.success(), "svcroute {args:?} failed");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("svcroute {args:?}: not JSON: {e}"))
}

/// A lab that is up; `lab down` runs when it is dropped.
pub struct Lab {
    pub name: String,
    dir: PathBuf,
}

impl Lab {
    /// Bring up the lab `text(name)` under a name unique to this process
    /// and `suffix`.
    pub fn up_text(suffix: char, text: impl Fn(&str) -> String) -> Self {
        let name = format!("t{}{suffix}", std::process::id() % 10000);
        let dir = std::env::temp_dir().join(format!("svcroute-test-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("lab.toml");
        std::fs::write(&file, text(&name)).unwrap();
        let lab = Self { name, dir };
        let out = svcroute(&["lab", "up", file.to_str().unwrap()]);
        assert!(out.status.success(), "lab up failed");
        lab
    }

    /// The lab's run directory (logs, captures, sockets).
    pub fn run_dir(&self) -> PathBuf {
        Path::new("/run/svcroute/lab").join(&self.name)
    }

    /// Run `cmd` in kernel host `host` of this lab.
    pub fn exec(&self, host: &str, cmd: &[&str]) -> Output {
        let mut args = vec!["lab", "exec", "--lab", &self.name, host, "--"];
        args.extend_from_slice(cmd);
        svcroute(&args)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new(BIN).args(["lab", "down", &self.name]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `tshark -r pcap -Y filter -T fields -e f1 -e f2 ...`, one row per frame,
/// multi-valued fields joined by commas.
pub fn tshark_fields(
    pcap: &Path,
    filter: &str,
    fields: &[&str],
    extra: &[&str],
) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(pcap).args([
        "-Y",
        filter,
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "aggregator=,",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    cmd.args(extra);
    let out = cmd.output().expect("running tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('|').map(str::to_owned).collect())
        .collect()
}
