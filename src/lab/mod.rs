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
//! - [`up`]: `lab up`, creation and supervision until ready.
//! - [`down`]: `lab down`, removal of everything a lab made.
//! - [`status`]: `lab status`, live state as JSON and as tables.
//! - [`exec`]: `lab exec` and `lab logs`.
//! - [`move`](r#move): `lab move`, a host or shim re-plugged to another segment.
//! - [`graph`]: `lab graph`, the topology as SVG or DOT.
//! - [`ui`]: `lab ui` / `lab graph --serve`, the picture live on a local web page.
//! - [`impair`], [`link`]: `lab link` (cuts and loss as nftables rules in
//!   the bridges) and `[[impair]]`.
//! - [`node`]: `lab node` and `lab host` (stop, start, restart, kill).

// The lab orchestrates real processes in real time: it is a driver, so it
// reads the clock (see clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result};

mod down;
mod exec;
mod fabric;
mod file;
mod graph;
mod impair;
mod keys;
mod link;
mod machine;
mod r#move;
pub(crate) mod netns;
mod node;
mod state;
mod status;
mod ui;
mod up;

use file::{Lab, DEFAULT_LAB};

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
        /// Build only this `[[machine]]`'s part of a lab that spans machines,
        /// joined to the other machines' by VXLAN; the lab runs as
        /// `<lab>-<machine>` (docs/lab.md, "Labs across machines").
        #[arg(long)]
        machine: Option<String>,
        /// With --machine: the network namespace that holds this machine's
        /// underlay (its VXLAN sockets) [default: the one `up` runs in].
        #[arg(long, value_name = "NS")]
        underlay_netns: Option<String>,
    },
    /// Remove a lab: processes, namespaces, run directory. Idempotent.
    Down {
        /// Lab name or lab file [default: the only lab that is up, else "rfc8677", the default lab].
        lab: Option<String>,
        /// The machine whose part of the lab to remove (the lab `<lab>-<machine>`).
        #[arg(long)]
        machine: Option<String>,
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
    /// Re-plug a kernel host's interface or a shim node's port into another
    /// segment, with a new address there (a UE moving between 5G sites).
    ///
    /// Each new address keeps the interface identifier of an old one under
    /// the new segment's prefix of its family (taken from a router's address there); the
    /// gateway becomes that router. A shim node is told through its control
    /// socket; its kernel host keeps its TUN address.
    Move {
        /// The lab [default: the one lab that has TARGET].
        #[arg(long)]
        lab: Option<String>,
        /// Host or shim node, and its port if it has several: NAME[:PORT]
        /// (an index or an interface name).
        target: String,
        /// The segment to plug into.
        segment: String,
        /// The new address ADDR/LEN instead of the derived ones (repeatable).
        #[arg(long = "addr")]
        addrs: Vec<String>,
        /// The new gateway instead of the new segment's routers (repeatable).
        #[arg(long = "gateway")]
        gateways: Vec<std::net::IpAddr>,
    },
    /// Validate a lab file and print the node files it generates; creates nothing.
    Check {
        /// The lab file [default: the embedded default lab].
        file: Option<PathBuf>,
        /// Print only this `[[machine]]`'s part and its VXLAN devices.
        #[arg(long)]
        machine: Option<String>,
    },
    /// Draw the topology: nodes by role, segments, ports and addresses, as
    /// SVG on stdout (or DOT). `--serve`: the same picture live (`lab ui`).
    Graph {
        /// A lab file, or the name of a lab that is up (its plan, moves
        /// included) [default: the embedded default lab; with --serve: the
        /// one lab that is up].
        file: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = graph::Format::Svg, conflicts_with = "serve")]
        format: graph::Format,
        /// Write to this file instead of stdout.
        #[arg(short, long, conflicts_with = "serve")]
        output: Option<PathBuf>,
        /// Serve the picture live on http://127.0.0.1:PORT/ (as `lab ui`).
        #[arg(long)]
        serve: bool,
        /// With --serve: the port on 127.0.0.1 (0: any free one).
        #[arg(long, default_value_t = 8677, requires = "serve")]
        port: u16,
    },
    /// Serve a live picture of a lab on http://127.0.0.1:PORT/: node
    /// liveness and counters, link and segment state as the kernel reports
    /// it, refreshed every second. Prints the URL, serves until interrupted.
    Ui {
        /// Lab name or lab file [default: the one lab that is up].
        lab: Option<String>,
        /// The port on 127.0.0.1 (0: any free one).
        #[arg(long, default_value_t = 8677)]
        port: u16,
    },
    /// Cut, heal or degrade a link of a running lab: a segment (`lan0`), a
    /// node's port (`h1:0`, or `h1:lan0`) or a kernel host's interface
    /// (`client:eth0`). `lab status` shows what is in force.
    Link {
        /// The lab [default: the one lab that has LINK].
        #[arg(long)]
        lab: Option<String>,
        /// SEGMENT, NODE:PORT or HOST:IFACE (PORT/IFACE: index, name or segment).
        link: String,
        #[command(subcommand)]
        action: link::LinkAction,
    },
    /// Stop, start, restart or kill a node of a running lab.
    Node {
        /// The lab [default: the one lab that has NAME].
        #[arg(long)]
        lab: Option<String>,
        /// The node.
        name: String,
        #[command(subcommand)]
        action: node::NodeAction,
    },
    /// Stop, start or restart a kernel host's commands.
    Host {
        /// The lab [default: the one lab that has NAME].
        #[arg(long)]
        lab: Option<String>,
        /// The host.
        name: String,
        #[command(subcommand)]
        action: node::HostAction,
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
        LabCmd::Up {
            file,
            timeout,
            machine,
            underlay_netns,
        } => up::up(
            file.as_deref(),
            Duration::from_secs(timeout),
            &machine::MachineArgs {
                machine,
                underlay_netns,
            },
        ),
        LabCmd::Down { lab, machine } => {
            machine::check_mount_namespace()?;
            match machine {
                Some(m) => {
                    file::check_name("machine", &m)?;
                    let base = lab.as_deref().unwrap_or(file::DEFAULT_LAB_NAME);
                    down::down(Some(&machine::instance(&lab_of_arg(base)?, Some(&m))))
                }
                None => down::down(lab.as_deref()),
            }
        }
        LabCmd::Status { lab, json } => status::status(lab.as_deref(), json),
        LabCmd::Exec { lab, target, cmd } => exec::exec(lab.as_deref(), &target, &cmd),
        LabCmd::Logs { lab, name, follow } => exec::logs(lab.as_deref(), &name, follow),
        LabCmd::Move {
            lab,
            target,
            segment,
            addrs,
            gateways,
        } => r#move::lab_move(&r#move::MoveArgs {
            lab: lab.as_deref(),
            target: &target,
            segment: &segment,
            addrs: &addrs,
            gateways,
        }),
        LabCmd::Check { file, machine } => check(
            file.as_deref(),
            &machine::MachineArgs {
                machine,
                underlay_netns: None,
            },
        ),
        LabCmd::Graph {
            file,
            serve: true,
            port,
            ..
        } => ui::serve(file.as_deref(), port),
        LabCmd::Graph {
            file,
            format,
            output,
            ..
        } => graph::graph(file.as_deref(), format, output.as_deref()),
        LabCmd::Ui { lab, port } => ui::serve(lab.as_deref(), port),
        LabCmd::Link { lab, link, action } => link::link(lab.as_deref(), &link, &action),
        LabCmd::Node { lab, name, action } => node::node(lab.as_deref(), &name, &action),
        LabCmd::Host { lab, name, action } => node::host(lab.as_deref(), &name, &action),
        LabCmd::ProbeTcp { timeout_ms, addrs } => {
            up::probe_tcp(&addrs, Duration::from_millis(timeout_ms))
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
pub(super) fn out(text: &str) -> Result<()> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("writing to stdout"),
    }
}

pub(super) fn read_lab(path: Option<&Path>) -> Result<(Lab, String)> {
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

fn check(path: Option<&Path>, machine: &machine::MachineArgs) -> Result<()> {
    let (lab, origin) = machine::read_lab(path, machine)?;
    let mut text = format!(
        "{origin}: ok: lab {:?}: {} segment(s), {} node(s), {} host(s)\n",
        lab.name,
        lab.segments.len(),
        lab.nodes.len(),
        lab.hosts.len()
    );
    text.push_str(&machine::render(
        &serde_json::json!({ "machine": machine::status_json(&lab, false) }),
    ));
    for n in &lab.nodes {
        text.push_str(&format!(
            "\n--- {}.toml ---\n{}\n",
            n.name,
            n.config_text.trim_end()
        ));
    }
    out(&text)
}

/// The lab a `down` argument names: a lab name, or a lab file's `name`.
pub(super) fn lab_of_arg(arg: &str) -> Result<String> {
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
    machine::check_instance(arg)?;
    Ok(arg.to_owned())
}
