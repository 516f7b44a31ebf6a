//! `svcroute`: run a node, talk to a running node, build and tear down labs.

#![forbid(unsafe_code)]

use std::fs::File;
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::Value;
use svcroute_stack::phy::impair::ImpairLink;
use svcroute_stack::phy::packet::PacketLink;
use svcroute_stack::phy::pcap::PcapLink;
use svcroute_stack::phy::tap::TapLink;
use svcroute_stack::phy::Link;
use svcroute_stack::runtime::{self, Node, Role, RunOptions};

/// `println!` for the CLI's output: a reader that went away (`| head -0`,
/// `| grep -q`) ends the process quietly, as SIGPIPE ends a C tool.
macro_rules! outln {
    ($($t:tt)*) => {
        $crate::print_out(format_args!("{}\n", format_args!($($t)*)))
    };
}

/// `print!` for the CLI's output (see [`outln!`]).
macro_rules! out {
    ($($t:tt)*) => {
        $crate::print_out(format_args!($($t)*))
    };
}

mod config;
mod lab;
mod slp;
mod tun;
mod vm;

use config::{LinkKind, NodeFile};

/// Default directory of node control sockets.
pub(crate) const CTL_DIR: &str = "/run/svcroute";
/// Default parent directory of node state (a node's write-ahead log).
pub(crate) const STATE_DIR: &str = "/var/lib/svcroute";

#[derive(Parser)]
#[command(
    name = "svcroute",
    version,
    about = "Userspace network nodes for service-based routing labs",
    long_about = "Each node is one single-threaded process owning its own smoltcp TCP/IP stack \
                  over TAP devices. `run` starts a node, `ctl` talks to a running one, `lab` \
                  builds whole topologies in network namespaces. Logging: RUST_LOG=debug."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start one node in the foreground until SIGTERM/SIGINT.
    Run {
        /// The role to run.
        role: RoleName,
        /// The node's TOML configuration file.
        #[arg(short, long)]
        config: PathBuf,
        /// Record every frame of every port to this pcap file (port N > 0
        /// writes FILE.N).
        #[arg(long)]
        pcap: Option<PathBuf>,
        /// Control socket path [default: /run/svcroute/<name>.sock].
        #[arg(long)]
        ctl: Option<PathBuf>,
        /// Directory of the node's durable state, for roles that keep one
        /// (mda: its write-ahead log [default: /var/lib/svcroute/<name>];
        /// nsff: its REST-registered SFs in sfs.json, only if given and
        /// no `state_file` is set).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Boot the node as a QEMU microVM instead (docs/microvm.md): its
        /// TAPs become the VM's NICs, the control socket reaches the node
        /// over a virtio-serial port, --pcap records at the NICs.
        #[arg(long)]
        vm: bool,
        /// With --vm: guest memory in MiB [default: 96, the smallest every
        /// role runs with, see docs/microvm.md].
        #[arg(long, value_name = "MIB", requires = "vm",
              value_parser = clap::value_parser!(u32).range(32..=16_384))]
        vm_memory_mib: Option<u32>,
        /// With --vm: the image directory (vmlinuz, initrd.img) [default:
        /// $SVCROUTE_VM_IMAGE, else microvm/ beside this binary].
        #[arg(long, value_name = "DIR", requires = "vm")]
        vm_image: Option<PathBuf>,
        /// With --vm: the accelerator [default: kvm if a probe boot works
        /// here, else tcg].
        #[arg(long, value_name = "ACCEL", requires = "vm")]
        vm_accel: Option<vm::Accel>,
    },
    /// Check a node configuration file and exit.
    Check {
        /// The role the file configures.
        role: RoleName,
        /// The node's TOML configuration file.
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Send a command to a running node: ping, stats, ports, or a role command
    /// (host: get URL ...). Prints text, or the raw JSON with --json.
    Ctl {
        /// Node name (socket /run/svcroute/<name>.sock, or found in a running
        /// lab) or a socket path.
        node: String,
        /// Print the node's JSON answer unchanged.
        #[arg(long)]
        json: bool,
        /// Seconds to wait for the answer.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
    /// Build, inspect and tear down a lab of nodes and kernel hosts.
    Lab(lab::LabArgs),
    /// SLPv2 user/service agent over UDP/TCP: register, deregister, find,
    /// attrs, types, das (RFC 2608; MeshFwd of RFC 3528 with --mesh-fwd).
    Slp(slp::SlpArgs),
    /// The ROSA endpoint shim for unmodified kernel programs (TUN mode):
    /// curl in namespace NS reaches services by name.
    #[command(long_about = SHIM_ABOUT)]
    Shim(ShimArgs),
}

const SHIM_ABOUT: &str = "\
The ROSA endpoint shim for unmodified kernel programs (TUN mode; SPEC §2.2,
docs/shim.md \"TUN mode\").

It runs in the foreground like a node (until SIGTERM/SIGINT) with two ports:
  - the TAP on the client's segment: the wire. Its smoltcp stack holds the
    client address ADDR, so it answers neighbour discovery for the client;
  - a TUN it creates and moves into namespace NS: the kernel's only link,
    with ADDR, the default route and the virtual prefix routed through it.

Each --service NAME gets a virtual address in the virtual prefix, written to
/etc/netns/NS/hosts, which `ip netns exec NS` (and `svcroute lab exec`)
mounts on /etc/hosts: `ip netns exec NS curl http://NAME/` connects to the
virtual address, and no DNS is asked. Until the ingress SAR's Service
Response names an instance, the flow's packets (a SYN, every UDP datagram)
go to the ingress with a Service Request option; then they go straight to
the instance as plain IPv6, and its answers reach the kernel from the
virtual address. Other IPv6 from NS is routed plain.

Counters and tables: `svcroute ctl NAME stats`, `svcroute ctl NAME rosa`.
The same node from a file: `svcroute run shim -c FILE` ([[port]] + [shim]);
in a lab: a [[node]] with role \"shim\" and `tun_host` (docs/lab.md).

Example (root):
  ip netns add cli
  svcroute shim --tun --tap c-0 --addr fd00:a::10/64 --gateway fd00:a::1 \\
      --netns cli --service service.org &
  ip netns exec cli curl http://service.org/";

/// `svcroute shim` arguments.
#[derive(clap::Args)]
struct ShimArgs {
    /// TUN mode: serve a kernel client namespace through a TUN (required;
    /// the host role's shim serves its own smoltcp sockets).
    #[arg(long, required = true)]
    tun: bool,
    /// The TAP on the client's segment (must exist; `ip tuntap add`).
    #[arg(long, value_name = "TAP")]
    tap: String,
    /// The kernel client's address and prefix, e.g. fd00:a::10/64.
    #[arg(long, value_name = "ADDR/LEN")]
    addr: String,
    /// The IPv6 gateway of the segment (off-link next hop).
    #[arg(long, value_name = "ADDR")]
    gateway: Option<Ipv6Addr>,
    /// The ingress SAR [default: the gateway].
    #[arg(long, value_name = "ADDR")]
    ingress: Option<Ipv6Addr>,
    /// A service name the kernel reaches (a host name); repeat for more.
    #[arg(long = "service", value_name = "NAME", required = true)]
    services: Vec<String>,
    /// The kernel client's network namespace (`ip netns add NS` first).
    #[arg(long, value_name = "NS")]
    netns: String,
    /// Name of the TUN inside NS.
    #[arg(long, value_name = "IF", default_value = "rosa0")]
    tun_name: String,
    /// Prefix of the virtual addresses [default: fd5e::/64].
    #[arg(long, value_name = "PREFIX")]
    virtual_prefix: Option<String>,
    /// Hosts file to write [default: /etc/netns/NS/hosts].
    #[arg(long, value_name = "FILE")]
    hosts_file: Option<PathBuf>,
    /// Node name (control socket, logs).
    #[arg(long, default_value = "shim")]
    name: String,
    /// MAC address of the TAP port [default: derived from the name].
    #[arg(long)]
    mac: Option<String>,
    /// Control socket path [default: /run/svcroute/<name>.sock].
    #[arg(long)]
    ctl: Option<PathBuf>,
    /// Record the TAP's frames to FILE and the TUN's (as Ethernet) to FILE.1.
    #[arg(long)]
    pcap: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum RoleName {
    /// Endpoint: HTTP server and client, UDP echo.
    Host,
    /// Path-based (bit-field) fabric switch of RFC 8677 name-based SFC.
    Fwd,
    /// Name Resolver of RFC 8677 name-based SFC.
    Nr,
    /// Name-based service function forwarder of RFC 8677 (HTTP by name).
    Nsff,
    /// Mesh-enhanced SLPv2 directory agent (RFC 2608 + RFC 3528).
    Mda,
    /// ROSA Service Address Router: IPv6 router, ROSA data path, SAR IGP.
    Sar,
    /// ROSA Service Access Gateway: a SAR that originates `*`, resolves
    /// unknown names by DNS, proxies to non-ROSA servers and hands requests
    /// to other domains' SAGs.
    Sag,
    /// ROSA shim in TUN mode for a kernel client namespace (`svcroute shim --tun`).
    Shim,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_micros()
        .init();
    // Inside a microVM this binary is the init (docs/microvm.md).
    if std::process::id() == 1 {
        return vm::guest::main();
    }
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Run {
            role,
            config,
            pcap,
            ctl,
            state_dir,
            vm: false,
            ..
        } => run(
            role,
            &config,
            pcap.as_deref(),
            Control::Socket(ctl),
            state_dir,
        ),
        Cmd::Run {
            role,
            config,
            pcap,
            ctl,
            vm_memory_mib,
            vm_image,
            vm_accel,
            ..
        } => vm::host::run(
            role,
            &config,
            pcap.as_deref(),
            ctl,
            vm::host::VmOptions {
                memory_mib: vm_memory_mib,
                image: vm_image,
                accel: vm_accel,
            },
        ),
        Cmd::Check { role, config } => check(role, &config),
        Cmd::Ctl {
            node,
            json,
            timeout,
            mut args,
        } => {
            // `ctl h1 stats --json` reads as naturally as `ctl h1 --json stats`.
            let n = args.len();
            args.retain(|a| a != "--json");
            ctl(&node, &args, json || args.len() != n, timeout)
        }
        Cmd::Lab(args) => lab::main(args),
        // Prints its own results and errors; the exit status says which failed.
        Cmd::Slp(args) => return slp::main(args),
        Cmd::Shim(args) => shim(args),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("svcroute: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Write the CLI's output to stdout. If the reader is gone (EPIPE) the
/// process exits at once with status 141 (128 + SIGPIPE, what a shell shows
/// for a C tool killed by it) and no message; another write error is
/// reported and exits 1. Never a panic: Rust ignores SIGPIPE, so `println!`
/// would panic (and abort, in release) on a closed pipe.
pub(crate) fn print_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        eprintln!("svcroute: writing the output: {e}");
        std::process::exit(1);
    }
}

fn check(role: RoleName, path: &Path) -> Result<()> {
    validate(role, path)?;
    outln!("{}: ok", path.display());
    Ok(())
}

/// Load and validate the node file at `path` for `role`, starting nothing.
pub(crate) fn validate(role: RoleName, path: &Path) -> Result<()> {
    match role {
        RoleName::Host => {
            let f: config::HostFile = config::load(path)?;
            f.host
                .validate()
                .map_err(|e| anyhow::anyhow!("{}: [host]: {e}", path.display()))?;
        }
        RoleName::Fwd => {
            let f: config::FwdFile = config::load(path)?;
            f.fwd
                .validate(f.ports.len())
                .map_err(|e| anyhow::anyhow!("{}: [fwd]: {e}", path.display()))?;
        }
        RoleName::Nr => {
            let f: config::NrFile = config::load(path)?;
            f.nr.validate()
                .map_err(|e| anyhow::anyhow!("{}: [nr]: {e}", path.display()))?;
        }
        RoleName::Nsff => {
            let f: config::NsffFile = config::load(path)?;
            f.nsff
                .validate()
                .map_err(|e| anyhow::anyhow!("{}: [nsff]: {e}", path.display()))?;
        }
        RoleName::Mda => {
            let f: config::MdaFile = config::load(path)?;
            config::check_mda(&f).map_err(|e| anyhow::anyhow!("{}: [mda]: {e}", path.display()))?;
        }
        RoleName::Sar => {
            let f: config::SarFile = config::load(path)?;
            config::check_sar(&f).map_err(|e| anyhow::anyhow!("{}: [sar]: {e}", path.display()))?;
        }
        RoleName::Sag => {
            let f: config::SagFile = config::load(path)?;
            config::check_sag(&f).map_err(|e| anyhow::anyhow!("{}: [sag]: {e}", path.display()))?;
        }
        RoleName::Shim => {
            let f: config::ShimFile = config::load(path)?;
            config::shim_role(&f).map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))?;
        }
    }
    Ok(())
}

/// Where a node takes its control requests.
pub(crate) enum Control {
    /// The control socket at this path [default: /run/svcroute/<name>.sock].
    Socket(Option<PathBuf>),
    /// A microVM's virtio-serial port (the host maps it to the socket).
    Serial(Arc<File>),
}

impl Control {
    fn options(self, name: &str, busy_poll_us: u64) -> RunOptions {
        let busy_poll = Duration::from_micros(busy_poll_us);
        match self {
            Self::Socket(path) => RunOptions {
                control: Some(
                    path.unwrap_or_else(|| Path::new(CTL_DIR).join(format!("{name}.sock"))),
                ),
                busy_poll,
                ..RunOptions::default()
            },
            Self::Serial(port) => RunOptions {
                control_serial: Some(port),
                busy_poll,
                ..RunOptions::default()
            },
        }
    }
}

pub(crate) fn run(
    role: RoleName,
    path: &Path,
    pcap: Option<&Path>,
    ctl: Control,
    state_dir: Option<PathBuf>,
) -> Result<()> {
    match role {
        RoleName::Host => {
            let f: config::HostFile = config::load(path)?;
            let mut host = f.host.clone();
            // A fresh flow-label key per start, unless the file fixes one.
            host.sticky
                .flow_label_seed
                .get_or_insert(config::fresh_seed()?);
            let role = svcroute_host::Host::new(&f.name, host)
                .map_err(|e| anyhow::anyhow!("{}: [host]: {e}", path.display()))?;
            run_node(&f, role, pcap, ctl)
        }
        RoleName::Fwd => {
            let f: config::FwdFile = config::load(path)?;
            let macs = f
                .ports
                .iter()
                .enumerate()
                .map(|(i, p)| config::port_config(&f.name, i, p).map(|c| c.mac))
                .collect::<Result<Vec<_>>>()?;
            let mut cfg = f.fwd.clone();
            cfg.epoch_us = config::wall_us();
            let role = svcroute_fwd::Fwd::new(&cfg, &macs)
                .map_err(|e| anyhow::anyhow!("{}: [fwd]: {e}", path.display()))?;
            run_node(&f, role, pcap, ctl)
        }
        RoleName::Nr => {
            let f: config::NrFile = config::load(path)?;
            let mut cfg = f.nr.clone();
            cfg.epoch_us = config::wall_us();
            let role = svcroute_nr::Nr::new(cfg)
                .map_err(|e| anyhow::anyhow!("{}: [nr]: {e}", path.display()))?;
            run_node(&f, role, pcap, ctl)
        }
        RoleName::Nsff => {
            let f: config::NsffFile = config::load(path)?;
            let mut cfg = f.nsff.clone();
            // REST-registered SFs persist in the state directory, when one
            // is given (a lab always gives one), unless `state_file` says
            // where.
            if cfg.state_file.is_none() {
                cfg.state_file = state_dir.map(|d| d.join("sfs.json"));
            }
            // Not the IDs of an earlier run, which peers may still hold as
            // closed: a random start among the 2^24 counters.
            cfg.first_txn = config::fresh_seed()? as u32;
            cfg.epoch_us = config::wall_us();
            let role = svcroute_nsff::Nsff::new(cfg)
                .map_err(|e| anyhow::anyhow!("{}: [nsff]: {e}", path.display()))?;
            run_node(&f, role, pcap, ctl)
        }
        RoleName::Mda => {
            let f: config::MdaFile = config::load(path)?;
            let dir = state_dir.unwrap_or_else(|| Path::new(STATE_DIR).join(&f.name));
            let (store, records) = svcroute_mda::store::WalStore::open(&dir)
                .with_context(|| format!("opening the write-ahead log in {}", dir.display()))?;
            log::info!("{} records recovered from {}", records.len(), dir.display());
            let role = svcroute_mda::driver::Mda::new(
                &f.name,
                f.mda.clone(),
                Box::new(store),
                records,
                svcroute_mda::driver::wall_us_at_zero_now(),
            )
            .map_err(|e| anyhow::anyhow!("{}: [mda]: {e}", path.display()))?;
            run_node(&f, role, pcap, ctl)
        }
        RoleName::Sar => {
            let f: config::SarFile = config::load(path)?;
            let role = config::sar_role(&f)
                .map_err(|e| anyhow::anyhow!("{}: [sar]: {e}", path.display()))?;
            run_node(&f, role, pcap, ctl)
        }
        RoleName::Sag => {
            let f: config::SagFile = config::load(path)?;
            let role = config::sag_role(&f)
                .map_err(|e| anyhow::anyhow!("{}: [sag]: {e}", path.display()))?;
            run_node(&f, role, pcap, ctl)
        }
        RoleName::Shim => {
            let f: config::ShimFile = config::load(path)?;
            run_shim(&f, &path.display().to_string(), pcap, ctl)
        }
    }
}

/// `svcroute shim --tun ...`: the flags as a node file, run like `run shim`.
fn shim(a: ShimArgs) -> Result<()> {
    let mut port = toml::Table::new();
    port.insert("tap".into(), a.tap.into());
    port.insert("addrs".into(), toml::Value::Array(vec![a.addr.into()]));
    if let Some(g) = a.gateway {
        port.insert(
            "gateways".into(),
            toml::Value::Array(vec![g.to_string().into()]),
        );
    }
    if let Some(m) = a.mac {
        port.insert("mac".into(), m.into());
    }
    let mut shim = toml::Table::new();
    shim.insert(
        "names".into(),
        toml::Value::Array(a.services.into_iter().map(Into::into).collect()),
    );
    shim.insert("netns".into(), a.netns.into());
    shim.insert("tun".into(), a.tun_name.into());
    if let Some(i) = a.ingress {
        shim.insert("ingress".into(), i.to_string().into());
    }
    if let Some(p) = a.virtual_prefix {
        shim.insert("virtual_prefix".into(), p.into());
    }
    if let Some(h) = a.hosts_file {
        shim.insert("hosts_file".into(), h.display().to_string().into());
    }
    let mut root = toml::Table::new();
    root.insert("name".into(), a.name.into());
    root.insert("port".into(), toml::Value::Array(vec![port.into()]));
    root.insert("shim".into(), shim.into());
    let text = toml::to_string(&root).context("building the node file")?;
    let f: config::ShimFile = config::parse_str(&text, "svcroute shim")?;
    run_shim(
        &f,
        "svcroute shim",
        a.pcap.as_deref(),
        Control::Socket(a.ctl),
    )
}

/// Run a shim node: the TAP (port 0) and a TUN (port 1) given to the
/// kernel client's namespace, with the names in its hosts file while it runs.
fn run_shim(f: &config::ShimFile, origin: &str, pcap: Option<&Path>, ctl: Control) -> Result<()> {
    let (mut wire, mut role) =
        config::shim_role(f).map_err(|e| anyhow::anyhow!("{origin}: {e:#}"))?;
    let p = &f.ports[0];
    let tap = TapLink::open(&p.tap, p.offload)?;
    wire.mtu = tap.mtu();
    role.set_wire_mtu(tap.mtu());
    let mtu = svcroute_host::rosa::tun::tun_mtu(tap.mtu());
    let link = tun::TunLink::create(mtu)?;
    // NOTE(unwrap): `shim_role` validated the config, `netns` included.
    let ns = f.shim.netns.clone().unwrap_or_default();
    tun::setup_kernel_side(
        &link,
        &ns,
        &f.shim.tun,
        role.client(),
        role.virtual_prefix(),
    )?;
    let hosts_path = f.shim.hosts_path().unwrap_or_default();
    let _hosts = tun::HostsFile::write(Path::new(&hosts_path), &role.hosts())?;
    let (addr, len) = role.client();
    log::info!(
        "TUN {} in namespace {ns}: {addr}/{len}, mtu {mtu}; port {} on TAP {} mac {}; {hosts_path}: {}",
        f.shim.tun,
        wire.name,
        p.tap,
        wire.mac,
        role.names()
            .iter()
            .map(|(n, v)| format!("{n} = {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let kernel = config::shim_tun_port(f, mtu)?;
    let ports = vec![
        (wire, wrap_link(tap, pcap, 0)?),
        (kernel, wrap_link(link, pcap, 1)?),
    ];
    let opts = ctl.options(&f.name, f.busy_poll_us);
    let mut node = Node::new(f.name.as_str(), ports, role, smoltcp::time::Instant::ZERO);
    log::info!("node {} up, {}", f.name, describe(&opts));
    let exit = runtime::run(&mut node, &opts).context("node stopped on an I/O error")?;
    log::info!("node {} stopped ({exit:?}); removing {hosts_path}", f.name);
    Ok(())
}

/// `link`, recording to `pcap` (port N > 0: `pcap.N`) if asked, under an
/// impairment layer (`ctl <node> impair`, off until set) so the capture
/// shows frames as they leave.
fn wrap_link<L: Link + 'static>(
    link: L,
    pcap: Option<&Path>,
    index: usize,
) -> Result<Box<dyn Link>> {
    let seed = config::fresh_seed()?;
    // One box around the whole stack of wrappers: one dynamic call per frame.
    Ok(match pcap {
        Some(path) => {
            let path = if index == 0 {
                path.to_owned()
            } else {
                let mut s = path.as_os_str().to_owned();
                s.push(format!(".{index}"));
                PathBuf::from(s)
            };
            Box::new(ImpairLink::new(PcapLink::create(link, &path)?, seed))
        }
        None => Box::new(ImpairLink::new(link, seed)),
    })
}

fn run_node<F: NodeFile, R: Role>(
    file: &F,
    role: R,
    pcap: Option<&Path>,
    ctl: Control,
) -> Result<()> {
    let mut ports = Vec::new();
    for (i, p) in file.ports().iter().enumerate() {
        let mut cfg = config::port_config(file.name(), i, p)?;
        let (link, kind): (Box<dyn Link>, &str) = match p.link {
            LinkKind::Tap => (Box::new(TapLink::open(&p.tap, p.offload)?), "TAP"),
            LinkKind::Packet => (Box::new(PacketLink::open(&p.tap)?), "AF_PACKET"),
        };
        cfg.mtu = link.mtu();
        let link = wrap_link(link, pcap, i)?;
        log::info!(
            "port {} on {kind} {} mtu {} mac {} addrs [{}]{}",
            cfg.name,
            p.tap,
            cfg.mtu,
            cfg.mac,
            p.addrs.join(", "),
            if p.offload { " offload" } else { "" }
        );
        ports.push((cfg, link));
    }
    let opts = ctl.options(file.name(), file.busy_poll_us());
    let mut node = Node::new(file.name(), ports, role, smoltcp::time::Instant::ZERO);
    log::info!("node {} up, {}", file.name(), describe(&opts));
    let exit = runtime::run(&mut node, &opts).context("node stopped on an I/O error")?;
    log::info!("node {} stopped ({exit:?})", file.name());
    Ok(())
}

/// Where a node's control requests come from, for its log.
fn describe(opts: &RunOptions) -> String {
    match (&opts.control_serial, &opts.control) {
        (Some(_), _) => "control over the VM's serial port".into(),
        (None, Some(p)) => format!("control socket {}", p.display()),
        (None, None) => "no control socket".into(),
    }
}

/// Find the control socket of `node`: a path, `/run/svcroute/<node>.sock`, or
/// the one socket of that name in a running lab.
pub(crate) fn ctl_path(node: &str) -> Result<PathBuf> {
    if node.contains('/') {
        return Ok(PathBuf::from(node));
    }
    let direct = Path::new(CTL_DIR).join(format!("{node}.sock"));
    if direct.exists() {
        return Ok(direct);
    }
    let found = lab::find_node_socket(node);
    match found.len() {
        1 => Ok(found.into_iter().next().unwrap_or(direct)),
        0 => bail!(
            "no running node {node:?} (no {} and no lab node of that name)",
            direct.display()
        ),
        _ => bail!(
            "node name {node:?} is in several labs; give the socket path: {}",
            found
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn ctl(node: &str, args: &[String], json: bool, timeout: u64) -> Result<()> {
    let path = ctl_path(node)?;
    let v = svcroute_stack::ctl::request(&path, args, Duration::from_secs(timeout))?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        out!("{}", render(&v));
    }
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        bail!("{node}: {e}");
    }
    Ok(())
}

/// Render a JSON answer as aligned `key value` lines, nested keys dotted.
fn render(v: &Value) -> String {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
                let items: Vec<String> = a.iter().map(scalar).collect();
                out.push((prefix.to_owned(), items.join(", ")));
            }
            Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    walk(&format!("{prefix}[{i}]"), v, out);
                }
            }
            _ => out.push((prefix.to_owned(), scalar(v))),
        }
    }
    fn scalar(v: &Value) -> String {
        match v {
            // Text output stays one line per key; --json has the whole value.
            Value::String(s) => match s.split_once('\n') {
                Some((first, _)) => format!("{first} … ({} bytes; --json for all)", s.len()),
                None => s.clone(),
            },
            other => other.to_string(),
        }
    }
    let mut rows = Vec::new();
    walk("", v, &mut rows);
    let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:<w$}  {v}\n"))
        .collect()
}
