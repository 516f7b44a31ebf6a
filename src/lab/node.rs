//! `lab node NAME stop|start|restart|kill` and `lab host NAME
//! stop|start|restart`: crash, stop and bring back a running lab's node
//! processes and kernel hosts' commands, with the code `up` starts and
//! waits for them with ([`super::up`]).
//!
//! A node comes back on the same node file, control socket and state
//! directory (`<rundir>/<node>.{toml,sock,state}`), its output appended to
//! the same log; its TAPs (or veths) stay in the lab namespace meanwhile,
//! so the bridges and any impairment on them are untouched.

use std::io::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use super::file::{HostPlan, NodePlan};
use super::impair::{self, list};
use super::state::{self, State};
use super::up::{self, Kids};
use super::{netns, out};

/// How long a stopped process gets between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

/// How long `start` waits.
#[derive(clap::Args, Debug)]
pub(crate) struct Wait {
    /// Seconds to wait until it is ready (a node: `ctl ping` says ready; a
    /// host: its `wait_tcp` targets accept).
    #[arg(long, default_value_t = 20)]
    timeout: u64,
}

impl Wait {
    fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }
}

/// What `lab node` does to the node.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum NodeAction {
    /// SIGTERM the node (it cleans up: a shim removes its TUN), SIGKILL
    /// after 5 s.
    Stop,
    /// Start a stopped or killed node again on the same node file and state
    /// directory; wait until it answers ready.
    Start(Wait),
    /// Stop, then start.
    Restart(Wait),
    /// SIGKILL the node and everything it started (a crash: no cleanup).
    Kill,
}

/// What `lab host` does to a kernel host's commands.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum HostAction {
    /// SIGTERM the host's commands (their process groups), SIGKILL after 5 s.
    Stop,
    /// Run the host's commands again; wait for its `wait_tcp` targets.
    Start(Wait),
    /// Stop, then start.
    Restart(Wait),
}

pub(super) fn node(lab: Option<&str>, name: &str, action: &NodeAction) -> Result<()> {
    let (mut st, n) = state::find(lab, &format!("node {name:?}"), |st| node_of(st, name))?;
    let msg = match action {
        NodeAction::Stop => stop_node(&st, &n, "TERM")?,
        NodeAction::Kill => stop_node(&st, &n, "KILL")?,
        NodeAction::Start(w) => start_node(&mut st, &n, w.timeout())?,
        NodeAction::Restart(w) => {
            let stopped = stop_node(&st, &n, "TERM")?;
            format!("{stopped}\n{}", start_node(&mut st, &n, w.timeout())?)
        }
    };
    out(&format!("{msg}\n"))
}

pub(super) fn host(lab: Option<&str>, name: &str, action: &HostAction) -> Result<()> {
    let (mut st, h) = state::find(lab, &format!("host {name:?}"), |st| host_of(st, name))?;
    if h.commands.is_empty() {
        bail!(
            "lab {}: host {name:?} has no `commands` to stop or start",
            st.lab.name
        );
    }
    let msg = match action {
        HostAction::Stop => stop_host(&st, &h),
        HostAction::Start(w) => start_host(&mut st, &h, w.timeout())?,
        HostAction::Restart(w) => {
            let stopped = stop_host(&st, &h);
            format!("{stopped}\n{}", start_host(&mut st, &h, w.timeout())?)
        }
    };
    out(&format!("{msg}\n"))
}

fn node_of(st: &State, name: &str) -> Result<NodePlan> {
    if let Some(n) = st.lab.nodes.iter().find(|n| n.name == name) {
        return Ok(n.clone());
    }
    let hint = if st.lab.hosts.iter().any(|h| h.name == name) {
        " (it is a kernel host: `svcroute lab host`)"
    } else {
        ""
    };
    bail!(
        "lab {}: no node {name:?}{hint} (nodes: {})",
        st.lab.name,
        list(st.lab.nodes.iter().map(|n| n.name.clone()))
    )
}

fn host_of(st: &State, name: &str) -> Result<HostPlan> {
    if let Some(h) = st.lab.hosts.iter().find(|h| h.name == name) {
        return Ok(h.clone());
    }
    let hint = if st.lab.nodes.iter().any(|n| n.name == name) {
        " (it is a node: `svcroute lab node`)"
    } else {
        ""
    };
    bail!(
        "lab {}: no host {name:?}{hint} (hosts: {})",
        st.lab.name,
        list(st.lab.hosts.iter().map(|h| h.name.clone()))
    )
}

/// The node's recorded pid, if that process is running in the lab.
fn node_pid(st: &State, n: &NodePlan) -> Option<u32> {
    let pid = *st.node_pids.get(&n.name)?;
    netns::runs_in(pid, &st.lab.netns).then_some(pid)
}

/// Stop node `n` with SIGTERM (then SIGKILL after [`GRACE`]) or SIGKILL.
fn stop_node(st: &State, n: &NodePlan, signal: &str) -> Result<String> {
    let Some(pid) = node_pid(st, n) else {
        return Ok(format!("node {} is not running", n.name));
    };
    let left = if signal == "KILL" {
        netns::kill_groups(&[pid], "KILL");
        netns::wait_gone(&[pid], Duration::from_secs(5))
    } else {
        netns::terminate_groups(&[pid], GRACE)
    };
    if !left.is_empty() {
        bail!("node {} (pid {pid}) survived SIGKILL", n.name);
    }
    let how = if signal == "KILL" {
        "killed"
    } else {
        "stopped"
    };
    Ok(format!("node {} {how} (pid {pid})", n.name))
}

/// Start node `n` again and wait until it is ready; on failure it is
/// stopped again (the rest of the lab is left as it is).
fn start_node(st: &mut State, n: &NodePlan, timeout: Duration) -> Result<String> {
    if let Some(pid) = node_pid(st, n) {
        bail!(
            "node {} is running (pid {pid}); `svcroute lab node {} restart` stops it first",
            n.name,
            n.name
        );
    }
    check_netns(st)?;
    let exe = std::env::current_exe().context("finding the svcroute binary")?;
    let accel = up::vm_accel(std::slice::from_ref(n))?;
    mark_log(st, &n.name, "node start")?;
    let deadline = Instant::now() + timeout;
    let child = up::spawn_node(st, n, &exe, accel)?;
    let pid = child.id();
    let mut kids = Kids {
        nodes: vec![(n.name.clone(), child)],
        commands: Vec::new(),
    };
    if let Err(e) = up::wait_nodes(
        st,
        &mut kids,
        std::slice::from_ref(&n.name),
        deadline,
        timeout,
    ) {
        netns::terminate_groups(&[pid], GRACE);
        kids.reap();
        return Err(e.context(format!("node {} did not come back (stopped again)", n.name)));
    }
    // Its ports' shapes lived in the process that is gone.
    impair::push_node(st, &n.name)?;
    Ok(format!("node {} started (pid {pid}), ready", n.name))
}

/// The host's recorded command pids that are still running in it.
fn host_pids(st: &State, h: &HostPlan) -> Vec<u32> {
    st.host_pids
        .get(&h.name)
        .into_iter()
        .flatten()
        .copied()
        .filter(|&p| netns::runs_in(p, &h.netns))
        .collect()
}

fn stop_host(st: &State, h: &HostPlan) -> String {
    let pids = host_pids(st, h);
    if pids.is_empty() {
        return format!("host {}: no command is running", h.name);
    }
    let left = netns::terminate_groups(&pids, GRACE);
    let mut msg = format!(
        "host {}: stopped {} command(s) (pids {pids:?})",
        h.name,
        pids.len()
    );
    if !left.is_empty() {
        msg.push_str(&format!("; {left:?} survived SIGKILL"));
    }
    msg
}

fn start_host(st: &mut State, h: &HostPlan, timeout: Duration) -> Result<String> {
    let running = host_pids(st, h);
    if !running.is_empty() {
        bail!(
            "host {}: commands are running (pids {running:?}); `svcroute lab host {} restart` \
             stops them first",
            h.name,
            h.name
        );
    }
    check_netns(st)?;
    if !netns::exists(&h.netns) {
        bail!("host {}: its namespace {} is gone", h.name, h.netns);
    }
    let exe = std::env::current_exe().context("finding the svcroute binary")?;
    let deadline = Instant::now() + timeout;
    let commands = up::spawn_commands(st, h)?;
    let pids: Vec<u32> = commands.iter().map(|(_, _, c)| c.id()).collect();
    let mut kids = Kids {
        nodes: Vec::new(),
        commands,
    };
    if let Err(e) = up::wait_hosts(st, &mut kids, &[h], &exe, deadline) {
        netns::terminate_groups(&pids, GRACE);
        kids.reap();
        return Err(e.context(format!(
            "host {}: its commands did not come back (stopped again)",
            h.name
        )));
    }
    Ok(format!(
        "host {}: started {} command(s) (pids {pids:?}){}",
        h.name,
        pids.len(),
        if h.wait_tcp.is_empty() {
            ""
        } else {
            ", wait_tcp targets accept"
        }
    ))
}

fn check_netns(st: &State) -> Result<()> {
    if !netns::exists(&st.lab.netns) {
        bail!(
            "lab {}: its namespace {} is gone; `svcroute lab down {}` and up again",
            st.lab.name,
            st.lab.netns,
            st.lab.name
        );
    }
    Ok(())
}

/// A line in `<name>.log` where a restart begins.
fn mark_log(st: &State, name: &str, what: &str) -> Result<()> {
    let p = st.dir().join(format!("{name}.log"));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p)
        .with_context(|| format!("opening {}", p.display()))?;
    writeln!(f, "==> svcroute lab {what}").with_context(|| format!("writing {}", p.display()))
}
