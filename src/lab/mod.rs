//! `svcroute lab`: build, inspect and tear down labs of nodes and kernel hosts.
//!
//! A lab is one namespace `svl-<lab>` holding a Linux bridge per segment
//! (`br-<segment>`) and every node's TAPs (`<node>-<i>`), with the node
//! processes running inside it; plus one namespace `svl-<lab>-<host>` per
//! kernel host, attached to the bridges by veth pairs (`<host>-<i>` in the lab
//! namespace, `eth<i>` in the host). See `docs/lab.md`.
//!
//! - [`file`]: the lab file format and its validation (nothing is created
//!   before the whole file, including the generated node files, checked out).
//! - [`fabric`]: the RFC 8677 fabric tables an `nr` node with
//!   `fabric = "auto"` gets from the topology (and the nSFF / fwd keys
//!   that go with them).
//! - [`netns`]: `ip`/`sysctl`/`kill` plumbing.
//! - [`state`]: the run directory and `state.json`.

// The lab orchestrates real processes in real time: it is a driver, so it
// reads the clock (see clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};

mod fabric;
mod file;
pub(crate) mod netns;
mod state;

use file::{lab_netns, Lab, DEFAULT_LAB, DEFAULT_LAB_NAME};
use state::State;

/// `svcroute lab` arguments.
#[derive(clap::Args)]
pub(crate) struct LabArgs {
    #[command(subcommand)]
    cmd: LabCmd,
}

#[derive(clap::Subcommand)]
enum LabCmd {
    /// Create a lab and start its nodes and host commands; wait until all are
    /// ready. Without FILE: the embedded default lab.
    Up {
        /// The lab file (TOML, see docs/lab.md).
        file: Option<PathBuf>,
        /// Seconds to wait for nodes to be ready and `wait_tcp` targets to accept.
        #[arg(long, default_value_t = 20)]
        timeout: u64,
    },
    /// Remove a lab: processes, namespaces, run directory. Idempotent.
    Down {
        /// Lab name or lab file [default: the only lab that is up, else "rfc8677", the default lab].
        lab: Option<String>,
    },
    /// Show nodes (pid, alive, ready, ports) and hosts (interfaces, commands).
    Status {
        /// Lab name [default: every lab that is up].
        lab: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a command in a kernel host's namespace (a node name: in the lab
    /// namespace, where the bridges and TAPs are), with this terminal's stdio.
    /// Exits with the command's status.
    Exec {
        /// The lab [default: the one lab that has TARGET].
        #[arg(long)]
        lab: Option<String>,
        /// Host (or node) name.
        target: String,
        /// The command, after `--`.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Print the log of a node or a kernel host's commands.
    Logs {
        /// The lab [default: the one lab that has NAME].
        #[arg(long)]
        lab: Option<String>,
        /// Node or host name.
        name: String,
        /// Keep printing what is appended (until interrupted).
        #[arg(short, long)]
        follow: bool,
    },
    /// Validate a lab file and print the node files it generates; creates nothing.
    Check {
        /// The lab file [default: the embedded default lab].
        file: Option<PathBuf>,
    },
    /// (internal) Connect to TCP ADDRs until all accept; run inside a host namespace.
    #[command(hide = true)]
    ProbeTcp {
        #[arg(long)]
        timeout_ms: u64,
        addrs: Vec<SocketAddr>,
    },
}

pub(crate) fn main(args: LabArgs) -> Result<()> {
    match args.cmd {
        LabCmd::Up { file, timeout } => up(file.as_deref(), Duration::from_secs(timeout)),
        LabCmd::Down { lab } => down(lab.as_deref()),
        LabCmd::Status { lab, json } => status(lab.as_deref(), json),
        LabCmd::Exec { lab, target, cmd } => exec(lab.as_deref(), &target, &cmd),
        LabCmd::Logs { lab, name, follow } => logs(lab.as_deref(), &name, follow),
        LabCmd::Check { file } => check(file.as_deref()),
        LabCmd::ProbeTcp { timeout_ms, addrs } => {
            probe_tcp(&addrs, Duration::from_millis(timeout_ms))
        }
    }
}

/// The control sockets of running lab nodes named `node`.
pub(crate) fn find_node_socket(node: &str) -> Vec<PathBuf> {
    if file::check_name("node", node).is_err() {
        return Vec::new();
    }
    state::labs()
        .into_iter()
        .map(|lab| state::dir(&lab).join(format!("{node}.sock")))
        .filter(|p| p.exists())
        .collect()
}

/// Print to stdout; a closed pipe (`| head`) is not an error.
fn out(text: &str) -> Result<()> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("writing to stdout"),
    }
}

// ---- up ----------------------------------------------------------------------

fn read_lab(path: Option<&Path>) -> Result<(Lab, String)> {
    match path {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let origin = p.display().to_string();
            Ok((file::parse(&text, &origin)?, origin))
        }
        None => Ok((
            file::parse(DEFAULT_LAB, "<embedded default>")?,
            "<embedded default>".into(),
        )),
    }
}

fn check(path: Option<&Path>) -> Result<()> {
    let (lab, origin) = read_lab(path)?;
    let mut text = format!(
        "{origin}: ok: lab {:?}: {} segment(s), {} node(s), {} host(s)\n",
        lab.name,
        lab.segments.len(),
        lab.nodes.len(),
        lab.hosts.len()
    );
    for n in &lab.nodes {
        text.push_str(&format!(
            "\n--- {}.toml ---\n{}\n",
            n.name,
            n.config_text.trim_end()
        ));
    }
    out(&text)
}

fn up(path: Option<&Path>, timeout: Duration) -> Result<()> {
    let (lab, origin) = read_lab(path)?;
    let dir = state::dir(&lab.name);
    if dir.exists() {
        bail!(
            "lab {:?} is already up (run directory {} exists); `svcroute lab down {}` first",
            lab.name,
            dir.display(),
            lab.name
        );
    }
    let existing = netns::list().context("listing namespaces (is iproute2 installed?)")?;
    if let Some(ns) = lab
        .namespaces()
        .into_iter()
        .find(|ns| existing.contains(ns))
    {
        bail!(
            "namespace {ns} already exists: lab {:?} seems half up; `svcroute lab down {}` first",
            lab.name,
            lab.name
        );
    }
    let exe = std::env::current_exe().context("finding the svcroute binary")?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut st = State::new(lab, origin);
    st.save()?;
    eprintln!(
        "lab {}: creating namespaces, bridges, TAPs and veths",
        st.lab.name
    );
    let mut kids = Kids::default();
    let r =
        build(&mut st, &mut kids, &exe).and_then(|()| wait_ready(&st, &mut kids, &exe, timeout));
    match r {
        Ok(()) => {
            st.phase = "up".into();
            st.save()?;
            let v = status_json(&st);
            out(&render_status(&v))?;
            Ok(())
        }
        Err(e) => {
            st.phase = "failed".into();
            let _ = st.save();
            eprintln!("svcroute: lab {}: up failed, tearing it down", st.lab.name);
            let down = teardown(&st.lab.name);
            kids.reap();
            match down {
                Ok(msg) => eprintln!("{msg}"),
                Err(d) => eprintln!("svcroute: teardown after failed up: {d:#}"),
            }
            Err(e.context(format!(
                "lab {:?} did not come up (it was torn down)",
                st.lab.name
            )))
        }
    }
}

/// Processes `up` started, kept to notice early exits and to reap them.
#[derive(Default)]
struct Kids {
    nodes: Vec<(String, Child)>,
    commands: Vec<(String, String, Child)>,
}

impl Kids {
    fn reap(&mut self) {
        let all = self
            .nodes
            .iter_mut()
            .map(|(_, c)| c)
            .chain(self.commands.iter_mut().map(|(_, _, c)| c));
        for c in all {
            if c.try_wait().ok().flatten().is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn build(st: &mut State, kids: &mut Kids, exe: &Path) -> Result<()> {
    let lab = st.lab.clone();
    let ns = lab.netns.as_str();
    let dir = st.dir();

    // The lab namespace: pure L2, no IPv6 of its own.
    netns::add(ns)?;
    st.netns.push(ns.to_owned());
    st.save()?;
    netns::sysctl(
        ns,
        &[
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ],
    )?;
    // With br_netfilter loaded (Docker hosts, ...) a new namespace's bridges
    // pass frames through the kernel's IP checks, which silently drop the
    // malformed frames a lab exists to show to its nodes. Bridges are wires.
    if Path::new("/proc/sys/net/bridge").exists() {
        netns::sysctl(
            ns,
            &[
                "net.bridge.bridge-nf-call-iptables=0",
                "net.bridge.bridge-nf-call-ip6tables=0",
                "net.bridge.bridge-nf-call-arptables=0",
            ],
        )?;
    }
    for s in &lab.segments {
        netns::ip_in(
            ns,
            &[
                "link",
                "add",
                &s.bridge,
                "type",
                "bridge",
                "stp_state",
                "0",
                "forward_delay",
                "0",
                "mcast_snooping",
                "0",
            ],
        )?;
        netns::ip_in(ns, &["link", "set", &s.bridge, "up"])?;
    }
    for n in &lab.nodes {
        for p in &n.ports {
            netns::ip_in(ns, &["tuntap", "add", "mode", "tap", "name", &p.tap])?;
            netns::ip_in(ns, &["link", "set", &p.tap, "master", &p.bridge, "up"])?;
        }
    }

    // Kernel hosts.
    for h in &lab.hosts {
        let hns = h.netns.as_str();
        netns::add(hns)?;
        st.netns.push(hns.to_owned());
        st.save()?;
        // Before any interface exists, so IPv6 addresses are usable at once.
        netns::sysctl(
            hns,
            &[
                "net.ipv6.conf.all.accept_dad=0",
                "net.ipv6.conf.default.accept_dad=0",
            ],
        )?;
        for f in &h.ifaces {
            netns::ip_in(
                ns,
                &[
                    "link", "add", &f.peer, "type", "veth", "peer", "name", &f.name, "netns", hns,
                ],
            )?;
            netns::ip_in(ns, &["link", "set", &f.peer, "master", &f.bridge, "up"])?;
            netns::sysctl(hns, &[&format!("net.ipv6.conf.{}.accept_dad=0", f.name)])?;
            for a in &f.addrs {
                netns::ip_in(hns, &["addr", "add", a, "dev", &f.name])?;
            }
            netns::ip_in(hns, &["link", "set", &f.name, "up"])?;
            for g in &f.gateways {
                let fam = if g.is_ipv6() { "-6" } else { "-4" };
                let g = g.to_string();
                netns::ip_in(
                    hns,
                    &[fam, "route", "add", "default", "via", &g, "dev", &f.name],
                )?;
            }
        }
    }

    // Node processes.
    for n in &lab.nodes {
        let toml = dir.join(format!("{}.toml", n.name));
        std::fs::write(&toml, &n.config_text)
            .with_context(|| format!("writing {}", toml.display()))?;
        let log_path = dir.join(format!("{}.log", n.name));
        let log =
            File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns])
            .arg(exe)
            .args(["run", &n.role, "-c"])
            .arg(&toml)
            .arg("--ctl")
            .arg(dir.join(format!("{}.sock", n.name)));
        if n.pcap {
            cmd.arg("--pcap").arg(dir.join(format!("{}.pcap", n.name)));
        }
        // Durable state (the mda's write-ahead log) lives with the lab and
        // survives a node restart, not `lab down`.
        cmd.arg("--state-dir")
            .arg(dir.join(format!("{}.state", n.name)));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting node {}", n.name))?;
        st.node_pids.insert(n.name.clone(), child.id());
        st.save()?;
        kids.nodes.push((n.name.clone(), child));
    }

    // Hosts files (`ip netns exec` mounts them over /etc/hosts; `down`
    // removes /etc/netns/<ns>).
    for h in lab.hosts.iter().filter(|h| !h.hosts.is_empty()) {
        let d = Path::new(netns::ETC_NETNS).join(&h.netns);
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        let text = format!(
            "# written by svcroute lab up {}\n127.0.0.1 localhost\n::1 localhost\n{}\n",
            lab.name,
            h.hosts.join("\n")
        );
        std::fs::write(d.join("hosts"), text)
            .with_context(|| format!("writing {}/hosts", d.display()))?;
    }

    // Host commands.
    for h in &lab.hosts {
        if h.commands.is_empty() {
            continue;
        }
        let log_path = dir.join(format!("{}.log", h.name));
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        for c in &h.commands {
            writeln!(log, "==> {c}")?;
            let child = Command::new("ip")
                .args(["netns", "exec", &h.netns, "sh", "-c", c])
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log.try_clone()?)
                .process_group(0)
                .spawn()
                .with_context(|| format!("starting host {} command {c:?}", h.name))?;
            st.host_pids
                .entry(h.name.clone())
                .or_default()
                .push(child.id());
            st.save()?;
            kids.commands.push((h.name.clone(), c.clone(), child));
        }
    }
    Ok(())
}

/// The last `n` lines of a log file, indented, for error messages.
fn log_tail(path: &Path, n: usize) -> String {
    let text = match std::fs::read(path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => return format!("    ({}: {e})", path.display()),
    };
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return "    (empty)".into();
    }
    let tail: Vec<String> = lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| format!("    {l}"))
        .collect();
    tail.join("\n")
}

fn node_ready(sock: &Path) -> bool {
    if !sock.exists() {
        return false;
    }
    svcroute_stack::ctl::request(sock, &["ping".to_owned()], Duration::from_secs(1))
        .is_ok_and(|v| v["ready"] == Value::Bool(true))
}

fn wait_ready(st: &State, kids: &mut Kids, exe: &Path, timeout: Duration) -> Result<()> {
    let dir = st.dir();
    let deadline = Instant::now() + timeout;
    let check_commands = |kids: &mut Kids| -> Result<()> {
        for (host, cmd, c) in &mut kids.commands {
            if let Some(s) = c.try_wait()? {
                if !s.success() {
                    bail!(
                        "host {host} command {cmd:?} failed ({s}); end of {host}.log:\n{}",
                        log_tail(&dir.join(format!("{host}.log")), 20)
                    );
                }
            }
        }
        Ok(())
    };

    let mut pending: Vec<String> = st.lab.nodes.iter().map(|n| n.name.clone()).collect();
    loop {
        for (name, c) in &mut kids.nodes {
            if let Some(s) = c.try_wait()? {
                bail!(
                    "node {name} exited ({s}) before it was ready; end of {name}.log:\n{}",
                    log_tail(&dir.join(format!("{name}.log")), 20)
                );
            }
        }
        check_commands(kids)?;
        pending.retain(|n| !node_ready(&dir.join(format!("{n}.sock"))));
        if pending.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            let tails: String = pending
                .iter()
                .map(|n| {
                    format!(
                        "\nend of {n}.log:\n{}",
                        log_tail(&dir.join(format!("{n}.log")), 20)
                    )
                })
                .collect();
            bail!(
                "node(s) {} not ready after {} s (no `ping` answer with ready=true){tails}",
                pending.join(", "),
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    // TCP targets, probed from inside each host's namespace, all at once.
    let mut probes = Vec::new();
    for h in st.lab.hosts.iter().filter(|h| !h.wait_tcp.is_empty()) {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1));
        let child = Command::new("ip")
            .args(["netns", "exec", &h.netns])
            .arg(exe)
            .args([
                "lab",
                "probe-tcp",
                "--timeout-ms",
                &left.as_millis().to_string(),
            ])
            .args(h.wait_tcp.iter().map(ToString::to_string))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting a TCP probe")?;
        probes.push((h, child));
    }
    let mut failed = Vec::new();
    for (h, child) in probes {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            failed.push(format!(
                "host {}: {}; end of {}.log:\n{}",
                h.name,
                String::from_utf8_lossy(&out.stderr).trim(),
                h.name,
                log_tail(&dir.join(format!("{}.log", h.name)), 20)
            ));
        }
    }
    check_commands(kids)?;
    if !failed.is_empty() {
        bail!("wait_tcp: {}", failed.join("\n"));
    }
    Ok(())
}

fn probe_tcp(addrs: &[SocketAddr], timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    for a in addrs {
        loop {
            let Err(e) = TcpStream::connect_timeout(a, Duration::from_millis(500)) else {
                break;
            };
            if Instant::now() >= deadline {
                bail!(
                    "{a} did not accept a TCP connection within {} ms ({e})",
                    timeout.as_millis()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

// ---- down --------------------------------------------------------------------

/// The lab a `down` argument names: a lab name, or a lab file's `name`.
fn lab_of_arg(arg: &str) -> Result<String> {
    let p = Path::new(arg);
    if arg.ends_with(".toml") || arg.contains('/') || p.is_file() {
        let text = std::fs::read_to_string(p).with_context(|| format!("reading {arg}"))?;
        // Only the name matters: a file that no longer validates can still be taken down.
        let t: toml::Table = toml::from_str(&text).map_err(|e| anyhow::anyhow!("{arg}: {e}"))?;
        let name = t
            .get("name")
            .and_then(toml::Value::as_str)
            .with_context(|| format!("{arg}: no `name`"))?;
        file::check_name("lab", name).with_context(|| format!("{arg}: key `name`"))?;
        return Ok(name.to_owned());
    }
    file::check_name("lab", arg)?;
    Ok(arg.to_owned())
}

fn down(arg: Option<&str>) -> Result<()> {
    let lab = match arg {
        Some(a) => lab_of_arg(a)?,
        None => {
            let labs = state::labs();
            match labs.len() {
                0 => DEFAULT_LAB_NAME.to_owned(),
                1 => labs[0].clone(),
                _ => bail!("several labs are up ({}); say which", labs.join(", ")),
            }
        }
    };
    let msg = teardown(&lab)?;
    out(&format!("{msg}\n"))?;
    Ok(())
}

/// Remove everything of lab `lab`, whatever state it is in. Returns a summary.
fn teardown(lab: &str) -> Result<String> {
    let dir = state::dir(lab);
    let lab_ns = lab_netns(lab);
    let prefix = format!("{lab_ns}-");
    let listed = netns::list()?;
    let own = State::load(lab);
    let others: Vec<(String, Option<State>)> = state::labs()
        .into_iter()
        .filter(|l| l != lab)
        .map(|l| (l.clone(), State::load(&l)))
        .collect();
    // Another lab `<lab>-x` owns `svl-<lab>-x` and `svl-<lab>-x-*`.
    let owned_by_other = |ns: &str| {
        others.iter().any(|(o, s)| {
            let ons = lab_netns(o);
            ns == ons
                || ns.starts_with(&format!("{ons}-"))
                || s.as_ref().is_some_and(|s| s.netns.iter().any(|n| n == ns))
        })
    };
    let mut spaces: Vec<String> = Vec::new();
    let known = own
        .iter()
        .flat_map(|s| s.netns.iter().cloned().chain(s.lab.namespaces()));
    let found = listed
        .iter()
        .filter(|ns| **ns == lab_ns || ns.starts_with(&prefix))
        .cloned();
    for ns in known.chain(found) {
        let mine = own
            .as_ref()
            .is_some_and(|s| s.lab.namespaces().contains(&ns));
        if listed.contains(&ns) && !spaces.contains(&ns) && (mine || !owned_by_other(&ns)) {
            spaces.push(ns);
        }
    }
    // Host namespaces first, the lab namespace (bridges) last.
    spaces.sort_by_key(|ns| *ns == lab_ns);

    // Processes: everything inside the namespaces, a few rounds in case
    // something forks while dying.
    let mut killed = 0;
    let mut stuck = Vec::new();
    for _ in 0..3 {
        let me = std::process::id();
        let mut pids: Vec<u32> = spaces
            .iter()
            .flat_map(|ns| netns::pids(ns))
            .filter(|&p| p != me)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        if pids.is_empty() {
            break;
        }
        killed += pids.len();
        stuck = netns::terminate(&pids, Duration::from_secs(3));
    }

    let mut errors = Vec::new();
    if !stuck.is_empty() {
        errors.push(format!("processes survived SIGKILL: {stuck:?}"));
    }
    for ns in &spaces {
        if let Err(e) = netns::del(ns) {
            errors.push(format!("{e:#}"));
        }
    }
    // `ip netns exec` files (a shim node's hosts file) of our namespaces; the
    // shim removes its own when it stops, not when it is killed.
    let etc: Vec<String> = spaces
        .iter()
        .cloned()
        .chain(own.iter().flat_map(|s| s.lab.namespaces()))
        .collect();
    for ns in etc {
        let d = Path::new(netns::ETC_NETNS).join(&ns);
        if d.exists() {
            if let Err(e) = std::fs::remove_dir_all(&d) {
                errors.push(format!("removing {}: {e}", d.display()));
            }
        }
    }
    let had_dir = dir.exists();
    if had_dir {
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            errors.push(format!("removing {}: {e}", dir.display()));
        }
    }
    if !errors.is_empty() {
        bail!("lab {lab}: cleanup incomplete:\n  {}", errors.join("\n  "));
    }
    if spaces.is_empty() && !had_dir && killed == 0 {
        return Ok(format!("lab {lab} is not up: nothing to remove"));
    }
    Ok(format!(
        "lab {lab} down: stopped {killed} process(es), removed {} namespace(s){}",
        spaces.len(),
        if had_dir {
            format!(" and {}", dir.display())
        } else {
            String::new()
        }
    ))
}

// ---- status ------------------------------------------------------------------

fn status(lab: Option<&str>, json: bool) -> Result<()> {
    let labs = match lab {
        Some(l) => vec![lab_of_arg(l)?],
        None => state::labs(),
    };
    let mut all = Vec::new();
    for l in &labs {
        match State::load(l) {
            Some(st) => all.push(status_json(&st)),
            None if state::dir(l).exists() => all.push(json!({
                "lab": l, "phase": "unknown",
                "error": format!("no readable state.json in {}; `svcroute lab down {l}`", state::dir(l).display()),
            })),
            None => all.push(json!({ "lab": l, "phase": "down" })),
        }
    }
    if json {
        return out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&Value::Array(all))?
        ));
    }
    if all.is_empty() {
        return out("no lab is up\n");
    }
    let text: Vec<String> = all.iter().map(render_status).collect();
    out(&text.join("\n"))
}

/// Live status of a lab as JSON: nodes with pid/alive/ready/ports, hosts with
/// interfaces and commands.
fn status_json(st: &State) -> Value {
    let dir = st.dir();
    let nodes: Vec<Value> = st
        .lab
        .nodes
        .iter()
        .map(|n| {
            let pid = st.node_pids.get(&n.name).copied();
            let alive = pid.is_some_and(netns::alive);
            let sock = dir.join(format!("{}.sock", n.name));
            let ctl = |cmd: &str| {
                if !alive || !sock.exists() {
                    return None;
                }
                svcroute_stack::ctl::request(&sock, &[cmd.to_owned()], Duration::from_secs(2)).ok()
            };
            let ready = ctl("ping").is_some_and(|v| v["ready"] == Value::Bool(true));
            let live_ports = ctl("ports");
            let ports: Vec<Value> = n
                .ports
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let live = live_ports.as_ref().and_then(|v| v.get(i));
                    json!({
                        "tap": p.tap,
                        "segment": p.segment,
                        "bridge": p.bridge,
                        "name": live.and_then(|l| l["name"].as_str()),
                        "mac": live.and_then(|l| l["mac"].as_str()),
                        "addrs": live.map_or_else(|| json!(p.addrs), |l| l["addrs"].clone()),
                    })
                })
                .collect();
            json!({
                "name": n.name, "role": n.role, "pid": pid, "alive": alive, "ready": ready,
                "socket": sock, "log": dir.join(format!("{}.log", n.name)), "ports": ports,
            })
        })
        .collect();
    let hosts: Vec<Value> = st
        .lab
        .hosts
        .iter()
        .map(|h| {
            let present = netns::exists(&h.netns);
            let live = if present {
                netns::addrs(&h.netns).unwrap_or_default()
            } else {
                Vec::new()
            };
            let mut ifaces: Vec<Value> = h
                .ifaces
                .iter()
                .map(|f| {
                    let l = live.iter().find(|(name, _, _)| *name == f.name);
                    json!({
                        "name": f.name, "peer": f.peer, "segment": f.segment,
                        "mac": l.map(|(_, mac, _)| mac.clone()),
                        "addrs": l.map_or_else(|| json!(f.addrs), |(_, _, a)| json!(a)),
                    })
                })
                .collect();
            // A shim node's TUN: there once the node has set it up.
            if let Some(t) = &h.tun {
                let l = live.iter().find(|(name, _, _)| *name == t.name);
                ifaces.push(json!({
                    "name": t.name, "peer": format!("tun:{}", t.node), "segment": t.segment,
                    "mac": Value::Null,
                    "addrs": l.map_or_else(|| json!(t.addrs), |(_, _, a)| json!(a)),
                }));
            }
            let pids = st.host_pids.get(&h.name).cloned().unwrap_or_default();
            let commands: Vec<Value> = h
                .commands
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let pid = pids.get(i).copied();
                    json!({ "command": c, "pid": pid, "alive": pid.is_some_and(netns::alive) })
                })
                .collect();
            json!({
                "name": h.name, "netns": h.netns, "present": present, "ifaces": ifaces,
                "commands": commands, "log": dir.join(format!("{}.log", h.name)),
            })
        })
        .collect();
    json!({
        "lab": st.lab.name,
        "phase": st.phase,
        "source": st.source,
        "netns": st.lab.netns,
        "netns_present": netns::exists(&st.lab.netns),
        "run_dir": dir,
        "segments": st.lab.segments.iter().map(|s| json!({"name": s.name, "bridge": s.bridge})).collect::<Vec<_>>(),
        "nodes": nodes,
        "hosts": hosts,
    })
}

fn render_status(v: &Value) -> String {
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        Value::Array(a) => {
            let items: Vec<String> = a
                .iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                .collect();
            if items.is_empty() {
                "-".into()
            } else {
                items.join(", ")
            }
        }
        other => other.to_string(),
    };
    let yes = |v: &Value| {
        if v.as_bool() == Some(true) {
            "yes"
        } else {
            "no"
        }
        .to_owned()
    };
    let mut out = format!("lab {} ({})", s(&v["lab"]), s(&v["phase"]));
    if let Some(e) = v["error"].as_str() {
        out.push_str(&format!(": {e}\n"));
        return out;
    }
    if v["phase"] == "down" {
        out.push_str(": not up\n");
        return out;
    }
    out.push_str(&format!(
        " from {}; namespace {}{}; run dir {}\n",
        s(&v["source"]),
        s(&v["netns"]),
        if v["netns_present"].as_bool() == Some(true) {
            ""
        } else {
            " (MISSING)"
        },
        s(&v["run_dir"]),
    ));
    let segs: Vec<String> = v["segments"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|g| format!("{} (bridge {})", s(&g["name"]), s(&g["bridge"])))
        .collect();
    out.push_str(&format!(
        "segments: {}\n",
        if segs.is_empty() {
            "-".into()
        } else {
            segs.join(", ")
        }
    ));

    let mut rows = vec![vec![
        "NODE", "ROLE", "PID", "ALIVE", "READY", "PORT", "TAP", "SEGMENT", "MAC", "ADDRS",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>()];
    for n in v["nodes"].as_array().map(Vec::as_slice).unwrap_or_default() {
        for (i, p) in n["ports"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let first = i == 0;
            rows.push(vec![
                if first { s(&n["name"]) } else { String::new() },
                if first { s(&n["role"]) } else { String::new() },
                if first { s(&n["pid"]) } else { String::new() },
                if first {
                    yes(&n["alive"])
                } else {
                    String::new()
                },
                if first {
                    yes(&n["ready"])
                } else {
                    String::new()
                },
                s(&p["name"]),
                s(&p["tap"]),
                s(&p["segment"]),
                s(&p["mac"]),
                s(&p["addrs"]),
            ]);
        }
    }
    if rows.len() > 1 {
        out.push_str(&table(&rows));
    }
    let mut rows = vec![vec![
        "HOST",
        "NAMESPACE",
        "IFACE",
        "VETH",
        "SEGMENT",
        "MAC",
        "ADDRS",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>()];
    let mut cmds = String::new();
    for h in v["hosts"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let ns = format!(
            "{}{}",
            s(&h["netns"]),
            if h["present"].as_bool() == Some(true) {
                ""
            } else {
                " (MISSING)"
            }
        );
        for (i, f) in h["ifaces"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let first = i == 0;
            rows.push(vec![
                if first { s(&h["name"]) } else { String::new() },
                if first { ns.clone() } else { String::new() },
                s(&f["name"]),
                s(&f["peer"]),
                s(&f["segment"]),
                s(&f["mac"]),
                s(&f["addrs"]),
            ]);
        }
        for c in h["commands"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            cmds.push_str(&format!(
                "  {}: pid {} {}: {}\n",
                s(&h["name"]),
                s(&c["pid"]),
                if c["alive"].as_bool() == Some(true) {
                    "running"
                } else {
                    "exited"
                },
                s(&c["command"])
            ));
        }
    }
    if rows.len() > 1 {
        out.push_str(&table(&rows));
    }
    if !cmds.is_empty() {
        out.push_str("host commands:\n");
        out.push_str(&cmds);
    }
    out
}

/// Left-aligned columns, two spaces apart, trailing blanks trimmed.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|x| x.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: String = r
            .iter()
            .enumerate()
            .map(|(c, x)| format!("{x:<w$}  ", w = widths[c]))
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

// ---- exec, logs --------------------------------------------------------------

/// What a name is in a lab.
enum Target {
    Node,
    Host(String),
}

/// Find the lab (given or the only one) that has node or host `name`.
fn find_target(lab: Option<&str>, name: &str) -> Result<(State, Target)> {
    let labs = match lab {
        Some(l) => vec![lab_of_arg(l)?],
        None => state::labs(),
    };
    let mut found = Vec::new();
    for l in &labs {
        let Some(st) = State::load(l) else {
            if lab.is_some() {
                bail!("lab {l} is not up");
            }
            continue;
        };
        if let Some(h) = st.lab.hosts.iter().find(|h| h.name == name) {
            let ns = h.netns.clone();
            found.push((st, Target::Host(ns)));
        } else if st.lab.nodes.iter().any(|n| n.name == name) {
            found.push((st, Target::Node));
        }
    }
    match found.len() {
        0 if labs.is_empty() => bail!("no lab is up"),
        0 => bail!("no node or host {name:?} in lab(s) {}", labs.join(", ")),
        1 => Ok(found.remove(0)),
        _ => bail!(
            "{name:?} is in several labs ({}); use --lab",
            found
                .iter()
                .map(|(s, _)| s.lab.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn exec(lab: Option<&str>, target: &str, cmd: &[String]) -> Result<()> {
    let (st, t) = find_target(lab, target)?;
    let ns = match t {
        Target::Host(ns) => ns,
        Target::Node => st.lab.netns.clone(),
    };
    let status = Command::new("ip")
        .args(["netns", "exec", &ns])
        .args(cmd)
        .status()
        .context("running `ip netns exec`")?;
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    std::process::exit(code);
}

fn logs(lab: Option<&str>, name: &str, follow: bool) -> Result<()> {
    let (st, _) = find_target(lab, name)?;
    let path = st.dir().join(format!("{name}.log"));
    let mut f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !follow => {
            println!("({} has no log: no commands)", name);
            return Ok(());
        }
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    let mut out = std::io::stdout().lock();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        f.read_to_end(&mut buf)?;
        out.write_all(&buf)?;
        out.flush()?;
        if !follow {
            return Ok(());
        }
        if !path.exists() {
            bail!("{} was removed (lab down?)", path.display());
        }
        std::thread::sleep(Duration::from_millis(200));
        // A truncated log starts over.
        let pos = f.stream_position()?;
        if f.metadata()?.len() < pos {
            f.seek(SeekFrom::Start(0))?;
        }
    }
}
