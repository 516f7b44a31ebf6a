//! `lab up`: create the namespaces, bridges, TAPs and veths of a lab, start
//! its node processes and host commands, and supervise them until every
//! node answers ready (tearing everything down if one does not).
//!
//! The room that owns the processes `up` started ([`Kids`]) lives here;
//! what was created is written to `state.json` as it goes (see
//! [`super::state`]), so `down` finds it whatever happens to `up`.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde_json::Value;

use super::down::teardown;
use super::file::{HostPlan, NodePlan};
use super::impair;
use super::machine::MachineArgs;
use super::state::{self, State};
use super::status::{render_status, status_json};
use super::{netns, out};
use crate::vm;

pub(super) fn up(path: Option<&Path>, timeout: Duration, machine: &MachineArgs) -> Result<()> {
    super::machine::check_mount_namespace()?;
    let (mut lab, origin) = super::machine::read_lab(path, machine)?;
    // Secure by default: keys and instance ports (docs/security.md).
    let keys = super::keys::prepare(&mut lab)?;
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
    super::keys::save(&dir, &st.lab, keys.as_ref())?;
    eprintln!(
        "lab {}: creating namespaces, bridges, TAPs and veths",
        st.lab.name
    );
    let mut kids = Kids::default();
    let r = build(&mut st, &mut kids, &exe)
        .and_then(|()| wait_ready(&st, &mut kids, &exe, timeout))
        .and_then(|()| push_shapes(&st));
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

/// Processes `up` (or a node or host verb) started, kept to notice early
/// exits and to reap them.
#[derive(Default)]
pub(super) struct Kids {
    pub(super) nodes: Vec<(String, Child)>,
    pub(super) commands: Vec<(String, String, Child)>,
}

impl Kids {
    pub(super) fn reap(&mut self) {
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
            match &p.peer {
                // A packet node's veth: the peer on the bridge, the node's
                // end left for the node to open (it brings it up).
                Some(peer) => {
                    netns::ip_in(
                        ns,
                        &["link", "add", &p.tap, "type", "veth", "peer", "name", peer],
                    )?;
                    netns::ip_in(ns, &["link", "set", peer, "master", &p.bridge, "up"])?;
                }
                None => {
                    netns::ip_in(ns, &["tuntap", "add", "mode", "tap", "name", &p.tap])?;
                    netns::ip_in(ns, &["link", "set", &p.tap, "master", &p.bridge, "up"])?;
                }
            }
        }
    }
    let vm_accel = vm_accel(&lab.nodes)?;

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

    // Labs across machines: VXLAN devices to the peers, MTUs that fit them.
    super::machine::build(&lab)?;
    // Link impairments declared in the file, before anything sends.
    if !lab.impairs.is_empty() {
        impair::store(st, &lab.impairs)?;
    }

    // Node processes.
    for n in &lab.nodes {
        let toml = dir.join(format!("{}.toml", n.name));
        std::fs::write(&toml, &n.config_text)
            .with_context(|| format!("writing {}", toml.display()))?;
        let child = spawn_node(st, n, exe, vm_accel)?;
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
        let children = spawn_commands(st, h)?;
        kids.commands.extend(children);
    }
    Ok(())
}

/// Give the nodes the `[[impair]]` shapes of their ports (they run now).
fn push_shapes(st: &State) -> Result<()> {
    for n in &st.lab.nodes {
        impair::push_node(st, &n.name)?;
    }
    Ok(())
}

/// The accelerator for the VM nodes among `nodes`, chosen once for all of
/// them (a probe boot the first time on this machine, see docs/microvm.md);
/// `None` without VM nodes.
pub(super) fn vm_accel(nodes: &[NodePlan]) -> Result<Option<vm::accel::Accel>> {
    if !nodes.iter().any(|n| n.vm.is_some()) {
        return Ok(None);
    }
    let image = vm::host::Image::find(None)?;
    Ok(Some(vm::accel::choose(&image)))
}

/// Start node `n` in the lab namespace on its node file in the run
/// directory, its output appended to `<node>.log`; record its pid.
pub(super) fn spawn_node(
    st: &mut State,
    n: &NodePlan,
    exe: &Path,
    vm_accel: Option<vm::accel::Accel>,
) -> Result<Child> {
    let dir = st.dir();
    let log_path = dir.join(format!("{}.log", n.name));
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &st.lab.netns])
        .arg(exe)
        .args(["run", &n.role, "-c"])
        .arg(dir.join(format!("{}.toml", n.name)))
        .arg("--ctl")
        .arg(dir.join(format!("{}.sock", n.name)));
    if n.pcap {
        cmd.arg("--pcap").arg(dir.join(format!("{}.pcap", n.name)));
    }
    // Durable state (the mda's write-ahead log) lives with the lab and
    // survives a node restart, not `lab down`.
    cmd.arg("--state-dir")
        .arg(dir.join(format!("{}.state", n.name)));
    if let (Some(v), Some(accel)) = (&n.vm, vm_accel) {
        cmd.args(["--vm", "--vm-accel", accel.name()]);
        if let Some(m) = v.memory_mib {
            cmd.arg("--vm-memory-mib").arg(m.to_string());
        }
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting node {}", n.name))?;
    st.node_pids.insert(n.name.clone(), child.id());
    st.save()?;
    Ok(child)
}

/// Start host `h`'s commands in its namespace, each the leader of its own
/// process group, their output appended to `<host>.log`; record their pids
/// (replacing earlier ones).
pub(super) fn spawn_commands(st: &mut State, h: &HostPlan) -> Result<Vec<(String, String, Child)>> {
    let mut kids = Vec::new();
    st.host_pids.remove(&h.name);
    if h.commands.is_empty() {
        return Ok(kids);
    }
    let log_path = st.dir().join(format!("{}.log", h.name));
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
        kids.push((h.name.clone(), c.clone(), child));
    }
    Ok(kids)
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
    let deadline = Instant::now() + timeout;
    let names: Vec<String> = st.lab.nodes.iter().map(|n| n.name.clone()).collect();
    wait_nodes(st, kids, &names, deadline, timeout)?;
    let hosts: Vec<&HostPlan> = st.lab.hosts.iter().collect();
    wait_hosts(st, kids, &hosts, exe, deadline)
}

/// Fail if a host command in `kids` exited unsuccessfully.
fn check_commands(dir: &Path, kids: &mut Kids) -> Result<()> {
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
}

/// Wait until nodes `names` answer ready, failing when one of `kids`
/// exits first or at `deadline` (`timeout` is only for the message).
pub(super) fn wait_nodes(
    st: &State,
    kids: &mut Kids,
    names: &[String],
    deadline: Instant,
    timeout: Duration,
) -> Result<()> {
    let dir = st.dir();
    let mut pending = names.to_vec();
    loop {
        for (name, c) in &mut kids.nodes {
            if let Some(s) = c.try_wait()? {
                bail!(
                    "node {name} exited ({s}) before it was ready; end of {name}.log:\n{}",
                    log_tail(&dir.join(format!("{name}.log")), 20)
                );
            }
        }
        check_commands(&dir, kids)?;
        pending.retain(|n| !node_ready(&dir.join(format!("{n}.sock"))));
        if pending.is_empty() {
            return Ok(());
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
}

/// Wait until the `wait_tcp` targets of `hosts` accept, probed from inside
/// each host's namespace, all at once; fail when one of the commands in
/// `kids` fails.
pub(super) fn wait_hosts(
    st: &State,
    kids: &mut Kids,
    hosts: &[&HostPlan],
    exe: &Path,
    deadline: Instant,
) -> Result<()> {
    let dir = st.dir();
    let mut probes = Vec::new();
    for h in hosts.iter().filter(|h| !h.wait_tcp.is_empty()) {
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
    check_commands(&dir, kids)?;
    if !failed.is_empty() {
        bail!("wait_tcp: {}", failed.join("\n"));
    }
    Ok(())
}

pub(super) fn probe_tcp(addrs: &[SocketAddr], timeout: Duration) -> Result<()> {
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
