//! Namespace, link and process plumbing: thin wrappers around `ip` (iproute2),
//! `sysctl` and `kill`, each checking the exit code and quoting stderr.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

/// Run a command, fail with its stderr on a non-zero exit; return stdout.
fn run(cmd: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run `{cmd}` (is it installed and on PATH?)"))?;
    if !out.status.success() {
        bail!(
            "`{cmd} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Where `ip netns exec NS` finds files to mount over `/etc` (`hosts`, ...).
pub(crate) const ETC_NETNS: &str = "/etc/netns";

/// `ip ARGS...`.
pub(crate) fn ip(args: &[&str]) -> Result<String> {
    run("ip", args)
}

/// `ip -n NS ARGS...`.
pub(crate) fn ip_in(ns: &str, args: &[&str]) -> Result<String> {
    let mut a = vec!["-n", ns];
    a.extend_from_slice(args);
    run("ip", &a)
}

/// `bridge -n NS ARGS...` (iproute2's FDB and bridge-port tool).
pub(crate) fn bridge_in(ns: &str, args: &[&str]) -> Result<String> {
    let mut a = vec!["-n", ns];
    a.extend_from_slice(args);
    run("bridge", &a)
}

/// `sysctl -qw K=V...` inside `ns`.
pub(crate) fn sysctl(ns: &str, settings: &[&str]) -> Result<()> {
    let mut a = vec!["netns", "exec", ns, "sysctl", "-qw"];
    a.extend_from_slice(settings);
    run("ip", &a).map(drop)
}

/// The names in `ip netns list`.
pub(crate) fn list() -> Result<Vec<String>> {
    Ok(ip(&["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

/// Whether namespace `ns` exists.
pub(crate) fn exists(ns: &str) -> bool {
    Path::new("/run/netns").join(ns).exists()
}

/// `ip netns add NS`, then `lo` up.
pub(crate) fn add(ns: &str) -> Result<()> {
    ip(&["netns", "add", ns])?;
    ip_in(ns, &["link", "set", "lo", "up"]).map(drop)
}

/// `ip netns del NS`.
pub(crate) fn del(ns: &str) -> Result<()> {
    ip(&["netns", "del", ns]).map(drop)
}

/// The processes whose network namespace is `ns` (empty if it is gone).
pub(crate) fn pids(ns: &str) -> Vec<u32> {
    if !exists(ns) {
        return Vec::new();
    }
    ip(&["netns", "pids", ns])
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `pid` is a live (not zombie) process.
pub(crate) fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesized command name.
        Ok(s) => s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// Send `signal` (e.g. "TERM") to `pids` with the `kill` command.
pub(crate) fn kill(pids: &[u32], signal: &str) {
    send(pids.iter().map(u32::to_string), signal);
}

/// Send `signal` to the process groups led by `pgids` (a node and the
/// QEMU it boots, a host command and its children).
pub(crate) fn kill_groups(pgids: &[u32], signal: &str) {
    send(pgids.iter().map(|p| format!("-{p}")), signal);
}

fn send(targets: impl Iterator<Item = String>, signal: &str) {
    let targets: Vec<String> = targets.collect();
    if targets.is_empty() {
        return;
    }
    let mut args = vec![format!("-{signal}"), "--".to_owned()];
    args.extend(targets);
    // Some may be gone already: kill then fails for those, harmlessly.
    let _ = Command::new("kill")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// SIGTERM `pids`, wait up to `grace` for them to exit, then SIGKILL the rest
/// and wait a little more. Returns the pids still alive after all that.
pub(crate) fn terminate(pids: &[u32], grace: Duration) -> Vec<u32> {
    kill(pids, "TERM");
    let survivors = wait_gone(pids, grace);
    if survivors.is_empty() {
        return survivors;
    }
    kill(&survivors, "KILL");
    wait_gone(&survivors, Duration::from_secs(2))
}

/// Whether live process `pid` is in namespace `ns` (so a recorded pid the
/// kernel gave to some other process since is not taken for ours).
pub(crate) fn runs_in(pid: u32, ns: &str) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(theirs) = std::fs::metadata(format!("/proc/{pid}/ns/net")) else {
        return false;
    };
    let Ok(ours) = std::fs::metadata(Path::new("/run/netns").join(ns)) else {
        return false;
    };
    alive(pid) && theirs.ino() == ours.ino() && theirs.dev() == ours.dev()
}

/// SIGTERM the process groups `pgids`, wait up to `grace` for their
/// leaders to exit, then SIGKILL whatever is left of the groups. Returns
/// the leaders still alive after that.
pub(crate) fn terminate_groups(pgids: &[u32], grace: Duration) -> Vec<u32> {
    kill_groups(pgids, "TERM");
    wait_gone(pgids, grace);
    kill_groups(pgids, "KILL");
    wait_gone(pgids, Duration::from_secs(2))
}

/// Wait up to `within` for `pids` to exit; the ones still alive.
pub(crate) fn wait_gone(pids: &[u32], within: Duration) -> Vec<u32> {
    let deadline = Instant::now() + within;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Interfaces of namespace `ns` as `ip -j addr` reports them:
/// (name, MAC, global addresses as ADDR/PREFIX).
pub(crate) fn addrs(ns: &str) -> Result<Vec<(String, String, Vec<String>)>> {
    let out = ip_in(ns, &["-j", "addr", "show"])?;
    let v: serde_json::Value = serde_json::from_str(&out).context("parsing `ip -j addr`")?;
    let mut r = Vec::new();
    for l in v.as_array().map(Vec::as_slice).unwrap_or_default() {
        let name = l["ifname"].as_str().unwrap_or("?").to_owned();
        let mac = l["address"].as_str().unwrap_or("").to_owned();
        let addrs = l["addr_info"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|a| a["scope"].as_str() == Some("global"))
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or("?"), a["prefixlen"]))
            .collect();
        r.push((name, mac, addrs));
    }
    Ok(r)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn this_process_is_alive_and_pid_zero_is_not_a_process() {
        assert!(alive(std::process::id()));
        assert!(!alive(0));
        assert!(!alive(u32::MAX));
    }

    #[test]
    fn failing_commands_quote_stderr() {
        let e = run("sh", &["-c", "echo oops >&2; exit 3"]).unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("oops") && msg.contains('3'), "{msg}");
        assert_eq!(run("sh", &["-c", "echo hi"]).unwrap(), "hi\n");
    }
}
