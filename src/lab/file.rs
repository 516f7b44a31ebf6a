//! The lab file: format, validation, and the validated plan.
//! (Over 800 lines: the format and every check of it are one room; half
//! of the file is their tests.)
//!
//! Parsing happens in two steps. [`parse`] deserializes the TOML (unknown keys
//! are errors that name the key and the line) and then checks everything that
//! can be checked without touching the system: names, references, addresses,
//! interface-name lengths and clashes, and the generated node files (built as
//! strings and parsed in memory by the same code as `svcroute run`). Only a
//! [`Lab`] that passed all of that is ever built.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use smoltcp::wire::{IpAddress, IpCidr};
use toml::Spanned;

use svcroute_stack::phy::impair::Shape;

use super::impair::{self, Impairment};
use crate::config;

/// The lab embedded in the binary (`lab up` without a file).
pub(crate) const DEFAULT_LAB: &str = include_str!("../../examples/labs/rfc8677.toml");
/// The default lab's name (its `name` line; a test keeps them together).
pub(crate) const DEFAULT_LAB_NAME: &str = "rfc8677";

/// Roles `[[node]] role` may name.
pub(crate) const KNOWN_ROLES: &[&str] = &["host", "fwd", "nr", "nsff", "mda", "sar", "sag", "shim"];

/// Longest lab, segment, node and host name, in bytes.
pub(crate) const MAX_NAME: usize = 12;

/// Linux interface names are at most this long.
pub(crate) const IFNAMSIZ_MAX: usize = 15;

// ---- the file as written ----------------------------------------------------

/// `C` is how a `[node.config]` table is held: with its span, or (see
/// [`parse_inner`]) without one when the file never opens `[node.config]`
/// itself and only its sub-tables create it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, bound = "C: Deserialize<'de>")]
struct LabToml<C = Spanned<toml::Table>> {
    name: Spanned<String>,
    /// `"auto"` (default): `lab up` generates the lab's pre-shared keys
    /// (`super::keys`); `"none"`: the control planes run unkeyed.
    #[serde(default)]
    keys: Option<Spanned<String>>,
    #[serde(default, rename = "segment")]
    segments: Vec<SegmentToml>,
    #[serde(default, rename = "node")]
    nodes: Vec<NodeToml<C>>,
    #[serde(default, rename = "host")]
    hosts: Vec<HostToml>,
    /// Machines the lab spans (`super::machine`).
    #[serde(default, rename = "machine")]
    machines: Vec<super::machine::MachineToml>,
    #[serde(default, rename = "impair")]
    impairs: Vec<ImpairToml>,
}

/// `[[impair]]`: a link impairment in force from `lab up` on.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImpairToml {
    link: Spanned<String>,
    #[serde(default)]
    down: Option<Spanned<bool>>,
    /// A percentage: a number or a string (`"10%"`).
    #[serde(default)]
    loss: Option<Spanned<toml::Value>>,
    // The node-side shape (node ports only): milliseconds, percentages,
    // Mbit/s, as `lab link ... loss PCT delay MS ...` takes them.
    #[serde(default)]
    delay: Option<Spanned<toml::Value>>,
    #[serde(default)]
    jitter: Option<Spanned<toml::Value>>,
    #[serde(default)]
    reorder: Option<Spanned<toml::Value>>,
    #[serde(default)]
    duplicate: Option<Spanned<toml::Value>>,
    #[serde(default)]
    corrupt: Option<Spanned<toml::Value>>,
    #[serde(default)]
    rate: Option<Spanned<toml::Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SegmentToml {
    name: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, bound = "C: Deserialize<'de>")]
struct NodeToml<C> {
    name: Spanned<String>,
    role: Spanned<String>,
    #[serde(default, rename = "port")]
    ports: Vec<PortToml>,
    #[serde(default)]
    config: Option<C>,
    /// Record the node's frames to `<rundir>/<node>.pcap` (`--pcap`).
    #[serde(default)]
    pcap: bool,
    /// Copied to the node file: poll this long after work before sleeping.
    #[serde(default)]
    busy_poll_us: Option<u64>,
    /// Role `shim` only: the kernel host whose only link is this node's TUN.
    #[serde(default)]
    tun_host: Option<Spanned<String>>,
    /// Boot the node as a QEMU microVM (`svcroute run --vm`).
    #[serde(default)]
    vm: Option<Spanned<bool>>,
    /// With `vm`: guest memory in MiB.
    #[serde(default)]
    vm_memory_mib: Option<Spanned<u32>>,
    /// How a process node reaches its segments: `tap` (default) or `packet`
    /// (a veth pair, the node's end opened with AF_PACKET rings).
    #[serde(default)]
    link: Option<Spanned<String>>,
    /// The `[[machine]]` the node runs on.
    #[serde(default)]
    machine: Option<Spanned<String>>,
}

impl LabToml<toml::Table> {
    /// Give every `[node.config]` the span of its node's `name`, the
    /// nearest place an error about it can point to.
    fn spanned(self) -> LabToml {
        let nodes = self
            .nodes
            .into_iter()
            .map(|n| NodeToml {
                config: n.config.map(|c| Spanned::new(n.name.span(), c)),
                name: n.name,
                role: n.role,
                ports: n.ports,
                pcap: n.pcap,
                busy_poll_us: n.busy_poll_us,
                tun_host: n.tun_host,
                vm: n.vm,
                vm_memory_mib: n.vm_memory_mib,
                link: n.link,
                machine: n.machine,
            })
            .collect();
        LabToml {
            name: self.name,
            keys: self.keys,
            segments: self.segments,
            nodes,
            hosts: self.hosts,
            machines: self.machines,
            impairs: self.impairs,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PortToml {
    segment: Spanned<String>,
    #[serde(default)]
    addrs: Vec<Spanned<String>>,
    #[serde(default)]
    gateways: Vec<Spanned<String>>,
    #[serde(default)]
    offload: bool,
    #[serde(default)]
    mac: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostToml {
    name: Spanned<String>,
    #[serde(default, rename = "iface")]
    ifaces: Vec<IfaceToml>,
    #[serde(default)]
    commands: Vec<Spanned<String>>,
    #[serde(default)]
    wait_tcp: Vec<Spanned<String>>,
    #[serde(default)]
    hosts: Vec<Spanned<String>>,
    /// The `[[machine]]` the host's namespace is on.
    #[serde(default)]
    machine: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IfaceToml {
    segment: Spanned<String>,
    #[serde(default)]
    addrs: Vec<Spanned<String>>,
    #[serde(default)]
    gateways: Vec<Spanned<String>>,
}

// ---- the validated plan ------------------------------------------------------

/// A validated lab: everything `lab up` creates, with every name decided.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Lab {
    /// The lab name.
    pub(crate) name: String,
    /// The lab namespace (`svl-<lab>`): bridges and node TAPs.
    pub(crate) netns: String,
    pub(crate) segments: Vec<Segment>,
    pub(crate) nodes: Vec<NodePlan>,
    pub(crate) hosts: Vec<HostPlan>,
    /// The machines the lab spans, and this machine's part (`lab up --machine`).
    #[serde(default)]
    pub(crate) machines: super::machine::Machines,
    /// `[[impair]]`s, applied by `up` before any node starts.
    #[serde(default)]
    pub(crate) impairs: Vec<Impairment>,
    /// `keys = "auto"` (the default): `lab up` writes generated keys into
    /// the node files (`super::keys`).
    #[serde(default)]
    pub(crate) keyed: bool,
}

/// One L2 segment: a bridge in the lab namespace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Segment {
    pub(crate) name: String,
    pub(crate) bridge: String,
}

/// One userspace node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct NodePlan {
    pub(crate) name: String,
    pub(crate) role: String,
    pub(crate) ports: Vec<PortPlan>,
    /// The generated node file (`<rundir>/<node>.toml`).
    pub(crate) config_text: String,
    /// Whether the node records `<rundir>/<node>.pcap`.
    #[serde(default)]
    pub(crate) pcap: bool,
    /// Set when the node boots as a microVM.
    #[serde(default)]
    pub(crate) vm: Option<VmPlan>,
}

/// A node booted as a microVM.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct VmPlan {
    /// Guest memory in MiB (`None`: the role's default).
    pub(crate) memory_mib: Option<u32>,
}

/// One node port: a TAP in the lab namespace, enslaved to a bridge — or,
/// for a `link = "packet"` node, a veth whose other end (`peer`) is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PortPlan {
    /// The node's interface (a TAP, or its veth end).
    pub(crate) tap: String,
    /// The veth end on the bridge (`<node>-<i>b`), for a packet port.
    #[serde(default)]
    pub(crate) peer: Option<String>,
    pub(crate) segment: String,
    pub(crate) bridge: String,
    pub(crate) addrs: Vec<String>,
}

/// One kernel host: its own namespace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HostPlan {
    pub(crate) name: String,
    pub(crate) netns: String,
    pub(crate) ifaces: Vec<IfacePlan>,
    pub(crate) commands: Vec<String>,
    pub(crate) wait_tcp: Vec<SocketAddr>,
    /// The TUN a `shim` node gives this host as its only link, if any.
    #[serde(default)]
    pub(crate) tun: Option<TunPlan>,
    /// Lines of the namespace's hosts file (`ADDR NAME...`), if any.
    #[serde(default)]
    pub(crate) hosts: Vec<String>,
}

/// A host's TUN: created and configured by shim node `node` at its start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TunPlan {
    /// The shim node.
    pub(crate) node: String,
    /// The TUN's name in the host namespace.
    pub(crate) name: String,
    /// The segment of the node's TAP.
    pub(crate) segment: String,
    /// The client address (the node's port address).
    pub(crate) addrs: Vec<String>,
}

/// One veth leg: `peer` in the lab namespace on `bridge`, `name` in the host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct IfacePlan {
    pub(crate) name: String,
    pub(crate) peer: String,
    pub(crate) segment: String,
    pub(crate) bridge: String,
    pub(crate) addrs: Vec<String>,
    pub(crate) gateways: Vec<IpAddr>,
}

impl Lab {
    /// Every namespace of the lab, lab namespace first.
    pub(crate) fn namespaces(&self) -> Vec<String> {
        std::iter::once(self.netns.clone())
            .chain(self.hosts.iter().map(|h| h.netns.clone()))
            .collect()
    }
}

/// The lab namespace of lab `lab`.
pub(crate) fn lab_netns(lab: &str) -> String {
    format!("svl-{lab}")
}

/// The namespace of kernel host `host` in lab `lab`.
pub(crate) fn host_netns(lab: &str, host: &str) -> String {
    format!("svl-{lab}-{host}")
}

// ---- parsing -----------------------------------------------------------------

/// Where an error is: `line N` of the file, from a byte offset.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

struct Ctx<'a> {
    text: &'a str,
}

impl Ctx<'_> {
    fn at<T>(&self, s: &Spanned<T>) -> String {
        format!("line {}", line_of(self.text, s.span().start))
    }
}

/// Lab, segment, node and host names: 1..=12 of `[a-z0-9-]`, starting with a
/// letter or digit.
pub(crate) fn check_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !ok {
        bail!("{what} name {name:?} must be 1..{MAX_NAME} of [a-z0-9-], not starting with '-'");
    }
    Ok(())
}

/// Parse and validate a lab file. `origin` names the file in errors.
pub(crate) fn parse(text: &str, origin: &str) -> Result<Lab> {
    parse_inner(text, None).with_context(|| format!("lab file {origin}"))
}

/// [`parse`], naming the namespaces for `machine`'s part of a lab that
/// spans machines (`svl-<lab>-<machine>`, see `super::machine`).
pub(crate) fn parse_for(text: &str, origin: &str, machine: Option<&str>) -> Result<Lab> {
    parse_inner(text, machine).with_context(|| format!("lab file {origin}"))
}

fn parse_inner(text: &str, machine: Option<&str>) -> Result<Lab> {
    // A `[node.config.x]` table without a `[node.config]` line before it
    // creates `[node.config]` implicitly, and the toml crate has no span for
    // an implicit table: deserializing it as `Spanned` fails with "expected
    // a borrowed string". Such a file is valid; read it again without the
    // spans rather than refuse it.
    let file: LabToml = match toml::from_str(text) {
        Ok(f) => f,
        Err(e) => match toml::from_str::<LabToml<toml::Table>>(text) {
            Ok(f) => f.spanned(),
            Err(_) => bail!("{}", e.to_string().trim_end()),
        },
    };
    let cx = Ctx { text };

    check_name("lab", file.name.get_ref())
        .with_context(|| format!("{}: key `name`", cx.at(&file.name)))?;
    let lab = file.name.get_ref().clone();
    let ns_lab = super::machine::instance(&lab, machine);
    let netns = lab_netns(&ns_lab);
    let keyed = match &file.keys {
        None => true,
        Some(k) => match k.get_ref().as_str() {
            "auto" => true,
            "none" => false,
            other => bail!(
                "{}: key `keys`: {other:?} is neither \"auto\" (generate the lab's keys) nor \"none\"",
                cx.at(k)
            ),
        },
    };

    // Segments.
    let mut segments: Vec<Segment> = Vec::new();
    for s in &file.segments {
        let name = s.name.get_ref();
        let at = || format!("{}: [[segment]] key `name`", cx.at(&s.name));
        check_name("segment", name).with_context(at)?;
        if segments.iter().any(|x| &x.name == name) {
            bail!("{}: segment {name:?} is defined twice", at());
        }
        segments.push(Segment {
            name: name.clone(),
            bridge: format!("br-{name}"),
        });
    }
    let segment_names = || {
        segments
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let find_segment = |s: &Spanned<String>, what: &str| -> Result<Segment> {
        segments
            .iter()
            .find(|x| &x.name == s.get_ref())
            .cloned()
            .with_context(|| {
                format!(
                    "{}: {what} key `segment`: no segment {:?} (defined: {})",
                    cx.at(s),
                    s.get_ref(),
                    if segments.is_empty() {
                        "none".into()
                    } else {
                        segment_names()
                    }
                )
            })
    };

    // Node and host names share one space (`lab logs <name>`, interface names).
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut claim = |kind: &str, n: &Spanned<String>| -> Result<()> {
        check_name(kind, n.get_ref())
            .with_context(|| format!("{}: [[{kind}]] key `name`", cx.at(n)))?;
        if let Some(prev) = names.insert(n.get_ref().clone(), cx.at(n)) {
            bail!(
                "{}: [[{kind}]] key `name`: {:?} is already used ({}); node and host names must be \
                 unique in a lab",
                cx.at(n),
                n.get_ref(),
                prev
            );
        }
        Ok(())
    };
    for n in &file.nodes {
        claim("node", &n.name)?;
    }
    for h in &file.hosts {
        claim("host", &h.name)?;
    }

    // Addresses seen per segment, to catch the same address twice on one L2.
    let mut seen: BTreeMap<(String, IpAddress), String> = BTreeMap::new();
    let mut note_addr = |segment: &str, a: IpAddress, owner: String, at: String| -> Result<()> {
        if let Some(prev) = seen.insert((segment.to_owned(), a), owner.clone()) {
            bail!("{at}: address {a} on segment {segment:?} is also used by {prev}");
        }
        Ok(())
    };

    // The generated RFC 8677 fabric (`fabric = "auto"` on an nr node).
    let mut patches = fabric_patches(&file, &cx, &find_segment)?;

    // Nodes.
    let mut nodes = Vec::new();
    let mut tuns: BTreeMap<String, TunPlan> = BTreeMap::new();
    for (node_index, n) in file.nodes.iter().enumerate() {
        let name = n.name.get_ref();
        let role = n.role.get_ref();
        if !KNOWN_ROLES.contains(&role.as_str()) {
            bail!(
                "{}: [[node]] {name:?} key `role`: unknown role {role:?} (known: {})",
                cx.at(&n.role),
                KNOWN_ROLES.join(", ")
            );
        }
        if n.ports.is_empty() {
            bail!(
                "{}: [[node]] {name:?} has no [[node.port]]: a node needs at least one",
                cx.at(&n.name)
            );
        }
        let packet = match &n.link {
            None => false,
            Some(l) if l.get_ref() == "tap" => false,
            Some(l) if l.get_ref() == "packet" => true,
            Some(l) => bail!(
                "{}: [[node]] {name:?} key `link`: {:?} is neither \"tap\" nor \"packet\"",
                cx.at(l),
                l.get_ref()
            ),
        };
        let vm = n.vm.as_ref().is_some_and(|v| *v.get_ref());
        if let (false, Some(m)) = (vm, &n.vm_memory_mib) {
            bail!(
                "{}: [[node]] {name:?} key `vm_memory_mib`: only with `vm = true`",
                cx.at(m)
            );
        }
        if let Some(m) = &n.vm_memory_mib {
            if !(32..=16_384).contains(m.get_ref()) {
                bail!(
                    "{}: [[node]] {name:?} key `vm_memory_mib`: {} is not in 32..=16384",
                    cx.at(m),
                    m.get_ref()
                );
            }
        }
        if vm && packet {
            bail!(
                "{}: [[node]] {name:?}: a VM node's NICs are TAPs (the guest reaches its NIC \
                 over AF_PACKET itself); drop `link`",
                cx.at(&n.name)
            );
        }
        if vm && role == "shim" {
            bail!(
                "{}: [[node]] {name:?}: role \"shim\" cannot run in a VM (its TUN serves a \
                 kernel namespace of the host)",
                cx.at(&n.name)
            );
        }
        let mut ports = Vec::new();
        let mut port_tables = Vec::new();
        for (i, p) in n.ports.iter().enumerate() {
            let what = format!("[[node]] {name:?} port #{}", i + 1);
            let seg = find_segment(&p.segment, &what)?;
            let mut addrs = Vec::new();
            for a in &p.addrs {
                let cidr = parse_cidr(a.get_ref())
                    .with_context(|| format!("{}: {what} key `addrs`", cx.at(a)))?;
                note_addr(
                    &seg.name,
                    cidr.address(),
                    format!("node {name:?}"),
                    cx.at(a),
                )?;
                addrs.push(cidr.to_string());
            }
            let mut gateways = Vec::new();
            for g in &p.gateways {
                let ip = parse_ip(g.get_ref())
                    .with_context(|| format!("{}: {what} key `gateways`", cx.at(g)))?;
                gateways.push(ip.to_string());
            }
            let tap = format!("{name}-{i}");
            if tap.len() > IFNAMSIZ_MAX {
                bail!(
                    "{}: {what}: its TAP name {tap:?} would be longer than {IFNAMSIZ_MAX} bytes: \
                     use a shorter node name or fewer ports",
                    cx.at(&p.segment)
                );
            }
            let mut t = toml::Table::new();
            t.insert("tap".into(), tap.clone().into());
            if let Some(m) = &p.mac {
                t.insert("mac".into(), m.get_ref().clone().into());
            }
            t.insert(
                "addrs".into(),
                toml::Value::Array(addrs.iter().map(|a| a.clone().into()).collect()),
            );
            t.insert(
                "gateways".into(),
                toml::Value::Array(gateways.into_iter().map(Into::into).collect()),
            );
            t.insert("offload".into(), p.offload.into());
            if packet {
                t.insert("link".into(), "packet".into());
            }
            port_tables.push(toml::Value::Table(t));
            ports.push(PortPlan {
                peer: packet.then(|| format!("{tap}b")),
                tap,
                segment: seg.name.clone(),
                bridge: seg.bridge.clone(),
                addrs,
            });
        }
        let mut root = toml::Table::new();
        root.insert("name".into(), name.clone().into());
        if let Some(us) = n.busy_poll_us {
            let us = i64::try_from(us).unwrap_or(i64::MAX);
            root.insert("busy_poll_us".into(), us.into());
        }
        root.insert("port".into(), toml::Value::Array(port_tables));
        let patch = patches[node_index].take();
        let mut role_section = match &patch {
            Some(p) => p.section.clone(),
            None => n
                .config
                .as_ref()
                .map(|c| c.get_ref().clone())
                .unwrap_or_default(),
        };
        match (role.as_str(), &n.tun_host) {
            ("shim", None) => bail!(
                "{}: [[node]] {name:?}: role \"shim\" needs `tun_host`, the [[host]] whose only \
                 link its TUN is",
                cx.at(&n.role)
            ),
            ("shim", Some(h)) => {
                let at = || format!("{}: [[node]] {name:?} key `tun_host`", cx.at(h));
                let host = file
                    .hosts
                    .iter()
                    .find(|x| x.name.get_ref() == h.get_ref())
                    .with_context(|| format!("{}: no [[host]] {:?}", at(), h.get_ref()))?;
                if !host.ifaces.is_empty() {
                    bail!(
                        "{}: host {:?} has [[host.iface]]s; the TUN must be its only link",
                        at(),
                        h.get_ref()
                    );
                }
                if role_section.contains_key("netns") {
                    bail!(
                        "{}: [[node]] {name:?} [node.config] key `netns`: the lab sets it from \
                         `tun_host`",
                        cx.at(&n.name)
                    );
                }
                let tun_name = role_section
                    .get("tun")
                    .and_then(toml::Value::as_str)
                    .unwrap_or("rosa0")
                    .to_owned();
                role_section.insert("netns".into(), host_netns(&ns_lab, h.get_ref()).into());
                let plan = TunPlan {
                    node: name.clone(),
                    name: tun_name,
                    segment: ports.first().map(|p| p.segment.clone()).unwrap_or_default(),
                    addrs: ports.first().map(|p| p.addrs.clone()).unwrap_or_default(),
                };
                if let Some(prev) = tuns.insert(h.get_ref().clone(), plan) {
                    bail!(
                        "{}: host {:?} is already served by shim node {:?}",
                        at(),
                        h.get_ref(),
                        prev.node
                    );
                }
            }
            (_, Some(h)) => bail!(
                "{}: [[node]] {name:?} key `tun_host`: only a node of role \"shim\" has a TUN",
                cx.at(h)
            ),
            (_, None) => {}
        }
        root.insert(role.clone(), toml::Value::Table(role_section));
        let notes: String = patch
            .iter()
            .flat_map(|p| &p.notes)
            .map(|l| format!("# {l}\n"))
            .collect();
        let config_text = format!(
            "# Generated by `svcroute lab up` from [[node]] {name:?} of lab {lab:?}.\n{notes}{}",
            toml::to_string(&root).context("serializing a node file")?
        );
        let where_ = match &n.config {
            Some(c) => format!("{}: [[node]] {name:?} [node.config]", cx.at(c)),
            None => format!("{}: [[node]] {name:?}", cx.at(&n.name)),
        };
        check_node_file(role, &config_text, name).with_context(|| where_)?;
        nodes.push(NodePlan {
            name: name.clone(),
            role: role.clone(),
            ports,
            config_text,
            pcap: n.pcap,
            vm: vm.then(|| VmPlan {
                memory_mib: n.vm_memory_mib.as_ref().map(|m| *m.get_ref()),
            }),
        });
    }

    // Kernel hosts.
    let mut hosts = Vec::new();
    for h in &file.hosts {
        let name = h.name.get_ref();
        let tun = tuns.remove(name);
        if h.ifaces.is_empty() && tun.is_none() {
            bail!(
                "{}: [[host]] {name:?} has no [[host.iface]]: a host needs at least one (or a \
                 shim node's TUN: `tun_host`)",
                cx.at(&h.name)
            );
        }
        let mut ifaces: Vec<IfacePlan> = Vec::new();
        let mut families = BTreeSet::new();
        for (i, f) in h.ifaces.iter().enumerate() {
            let what = format!("[[host]] {name:?} iface #{}", i + 1);
            let seg = find_segment(&f.segment, &what)?;
            let mut cidrs = Vec::new();
            for a in &f.addrs {
                let cidr = parse_cidr(a.get_ref())
                    .with_context(|| format!("{}: {what} key `addrs`", cx.at(a)))?;
                note_addr(
                    &seg.name,
                    cidr.address(),
                    format!("host {name:?}"),
                    cx.at(a),
                )?;
                cidrs.push(cidr);
            }
            let mut gateways = Vec::new();
            for g in &f.gateways {
                let at = || format!("{}: {what} key `gateways`", cx.at(g));
                let ip = parse_ip(g.get_ref()).with_context(at)?;
                let v6 = matches!(ip, IpAddress::Ipv6(_));
                if !families.insert(v6) {
                    bail!(
                        "{}: a second IPv{} default gateway {ip} for host {name:?} (one per family)",
                        at(),
                        if v6 { 6 } else { 4 }
                    );
                }
                let link_local = matches!(ip, IpAddress::Ipv6(a) if a.is_unicast_link_local());
                if !link_local && !cidrs.iter().any(|c| c.contains_addr(&ip)) {
                    bail!(
                        "{}: gateway {ip} is not in any prefix of this iface's `addrs`",
                        at()
                    );
                }
                gateways.push(IpAddr::from(ip));
            }
            ifaces.push(IfacePlan {
                name: format!("eth{i}"),
                peer: format!("{name}-{i}"),
                segment: seg.name.clone(),
                bridge: seg.bridge.clone(),
                addrs: cidrs.iter().map(ToString::to_string).collect(),
                gateways,
            });
        }
        let mut commands = Vec::new();
        for c in &h.commands {
            if c.get_ref().trim().is_empty() {
                bail!(
                    "{}: [[host]] {name:?} key `commands`: empty command",
                    cx.at(c)
                );
            }
            commands.push(c.get_ref().clone());
        }
        let mut wait_tcp = Vec::new();
        for w in &h.wait_tcp {
            let sa: SocketAddr = w.get_ref().parse().ok().with_context(|| {
                format!(
                    "{}: [[host]] {name:?} key `wait_tcp`: {:?} is not ADDR:PORT (IPv6: [ADDR]:PORT)",
                    cx.at(w),
                    w.get_ref()
                )
            })?;
            wait_tcp.push(sa);
        }
        let mut etc_hosts = Vec::new();
        for line in &h.hosts {
            let mut words = line.get_ref().split_whitespace();
            let addr = words.next().unwrap_or("");
            let names: Vec<&str> = words.collect();
            if addr.parse::<IpAddr>().is_err() || names.is_empty() {
                bail!(
                    "{}: [[host]] {name:?} key `hosts`: {:?} is not \"ADDR NAME [NAME...]\"",
                    cx.at(line),
                    line.get_ref()
                );
            }
            if tun.is_some() {
                bail!(
                    "{}: [[host]] {name:?} key `hosts`: a host served by a shim's TUN gets \
                     its hosts file from the shim",
                    cx.at(line)
                );
            }
            etc_hosts.push(format!("{addr} {}", names.join(" ")));
        }
        hosts.push(HostPlan {
            name: name.clone(),
            netns: host_netns(&ns_lab, name),
            ifaces,
            commands,
            wait_tcp,
            tun,
            hosts: etc_hosts,
        });
    }

    // Interface names in the lab namespace: bridges, TAPs, veth peers.
    let mut ifnames: BTreeMap<String, String> = BTreeMap::new();
    let owned = segments
        .iter()
        .map(|s| {
            (
                s.bridge.clone(),
                format!("the bridge of segment {:?}", s.name),
            )
        })
        .chain(nodes.iter().flat_map(|n| {
            n.ports.iter().flat_map(|p| {
                let (what, peer) = match &p.peer {
                    Some(peer) => (
                        "veth",
                        Some((peer.clone(), format!("the veth of node {:?}", n.name))),
                    ),
                    None => ("TAP", None),
                };
                std::iter::once((p.tap.clone(), format!("the {what} of node {:?}", n.name)))
                    .chain(peer)
            })
        }))
        .chain(hosts.iter().flat_map(|h| {
            h.ifaces
                .iter()
                .map(|f| (f.peer.clone(), format!("the veth of host {:?}", h.name)))
        }));
    for (ifname, owner) in owned {
        if ifname.len() > IFNAMSIZ_MAX {
            bail!(
                "interface name {ifname:?} ({owner}) is longer than {IFNAMSIZ_MAX} bytes: use a \
                 shorter name or fewer ports"
            );
        }
        if let Some(prev) = ifnames.insert(ifname.clone(), owner.clone()) {
            bail!("interface name {ifname:?} would be both {prev} and {owner}: rename one");
        }
    }

    let placed = file
        .nodes
        .iter()
        .map(|n| ("node", &n.name, n.machine.as_ref()))
        .chain(
            file.hosts
                .iter()
                .map(|h| ("host", &h.name, h.machine.as_ref())),
        )
        .collect::<Vec<_>>();
    let machines = super::machine::validate(
        text,
        &file.machines,
        &placed,
        &super::machine::Parts {
            segments: &segments,
            nodes: &nodes,
            hosts: &hosts,
            ifnames: &ifnames,
        },
    )?;

    let mut plan = Lab {
        name: ns_lab,
        netns,
        segments,
        nodes,
        hosts,
        machines,
        impairs: Vec::new(),
        keyed,
    };
    plan.impairs = impairs(&file.impairs, &plan, &cx)?;
    Ok(plan)
}

/// Check the `[[impair]]`s against the planned lab.
fn impairs(tables: &[ImpairToml], lab: &Lab, cx: &Ctx<'_>) -> Result<Vec<Impairment>> {
    let mut out: Vec<Impairment> = Vec::new();
    let mut lines: BTreeMap<String, String> = BTreeMap::new();
    for t in tables {
        let at = |s: &Spanned<String>| format!("{}: [[impair]] key `link`", cx.at(s));
        let link = impair::resolve(lab, t.link.get_ref()).with_context(|| at(&t.link))?;
        // The node-side shape: `delay = 10` is `delay 10` of `lab link`.
        let keys = [
            ("delay", &t.delay),
            ("jitter", &t.jitter),
            ("reorder", &t.reorder),
            ("duplicate", &t.duplicate),
            ("corrupt", &t.corrupt),
            ("rate", &t.rate),
        ];
        let mut args = Vec::new();
        let mut first = None;
        for (key, v) in keys {
            let Some(v) = v else { continue };
            first.get_or_insert_with(|| cx.at(v));
            args.push(key.to_owned());
            args.push(value_text(v.get_ref()));
        }
        let shape = Shape::parse(&args).map_err(|e| {
            anyhow::anyhow!(
                "{}: [[impair]] {:?}: {e}",
                first.clone().unwrap_or_default(),
                link.name
            )
        })?;
        impair::check_shape(&link, &shape).map_err(|e| {
            anyhow::anyhow!("{}: [[impair]]: {e:#}", first.clone().unwrap_or_default())
        })?;
        let loss_bp = match &t.loss {
            None => 0,
            Some(v) => impair::parse_pct(&value_text(v.get_ref()))
                .with_context(|| format!("{}: [[impair]] {:?} key `loss`", cx.at(v), link.name))?,
        };
        let down = t.down.as_ref().is_some_and(|d| *d.get_ref());
        if !down && loss_bp == 0 && shape.is_none() {
            bail!(
                "{}: [[impair]] {:?} imposes nothing: give `down = true`, `loss` or a shape \
                 (`delay`, ...)",
                cx.at(&t.link),
                link.name
            );
        }
        if let Some(prev) = lines.insert(link.name.clone(), cx.at(&t.link)) {
            bail!(
                "{}: link {:?} is already impaired ({prev}): one [[impair]] per link",
                at(&t.link),
                link.name
            );
        }
        out.push(Impairment {
            link: link.name,
            down,
            loss_bp,
            shape,
        });
    }
    Ok(out)
}

/// A TOML number or string as `lab link` would take it.
fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The fabric generator's view of the nodes (`super::fabric`); one entry
/// per `[[node]]`, `Some` where the role section was rewritten.
fn fabric_patches(
    file: &LabToml,
    cx: &Ctx<'_>,
    find_segment: &dyn Fn(&Spanned<String>, &str) -> Result<Segment>,
) -> Result<Vec<Option<super::fabric::Patch>>> {
    let mut views = Vec::new();
    for n in &file.nodes {
        let name = n.name.get_ref();
        let mut ports = Vec::new();
        for (i, p) in n.ports.iter().enumerate() {
            find_segment(&p.segment, &format!("[[node]] {name:?} port #{}", i + 1))?;
            ports.push((p.segment.get_ref().as_str(), cx.at(&p.segment)));
        }
        views.push(super::fabric::NodeView {
            name,
            role: n.role.get_ref(),
            at: cx.at(&n.name),
            config_offset: n.config.as_ref().map(|c| c.span().start),
            config: n.config.as_ref().map(|c| c.get_ref()),
            ports,
        });
    }
    super::fabric::generate(cx.text, &views)
}

/// `ADDR/PREFIX`, as the node config and `ip addr add` take it.
fn parse_cidr(s: &str) -> Result<IpCidr> {
    if !s.contains('/') {
        bail!("{s:?} needs a prefix length (e.g. 10.0.0.2/24, fd00::2/64)");
    }
    let c: IpCidr = s
        .parse()
        .ok()
        .with_context(|| format!("{s:?} is not an address/prefix"))?;
    if c.address().is_unspecified() || c.address().is_multicast() {
        bail!("{s:?} is not a unicast address");
    }
    Ok(c)
}

fn parse_ip(s: &str) -> Result<IpAddress> {
    s.parse::<IpAddress>()
        .ok()
        .with_context(|| format!("{s:?} is not an IP address"))
}

/// Parse a generated node file with the role's own loader and validation.
pub(crate) fn check_node_file(role: &str, text: &str, node: &str) -> Result<()> {
    let origin = format!("generated node file {node}.toml");
    match role {
        "host" => {
            let f: config::HostFile = config::parse_str(text, &origin)?;
            f.host
                .validate()
                .map_err(|e| anyhow::anyhow!("{origin}: [host]: {e}"))?;
        }
        "fwd" => {
            let f: config::FwdFile = config::parse_str(text, &origin)?;
            f.fwd
                .validate(f.ports.len())
                .map_err(|e| anyhow::anyhow!("{origin}: [fwd]: {e}"))?;
        }
        "nr" => {
            let f: config::NrFile = config::parse_str(text, &origin)?;
            f.nr.validate()
                .map_err(|e| anyhow::anyhow!("{origin}: [nr]: {e}"))?;
        }
        "nsff" => {
            let f: config::NsffFile = config::parse_str(text, &origin)?;
            f.nsff
                .validate()
                .map_err(|e| anyhow::anyhow!("{origin}: [nsff]: {e}"))?;
        }
        "mda" => {
            let f: config::MdaFile = config::parse_str(text, &origin)?;
            config::check_mda(&f).map_err(|e| anyhow::anyhow!("{origin}: [mda]: {e}"))?;
        }
        "sar" => {
            let f: config::SarFile = config::parse_str(text, &origin)?;
            config::check_sar(&f).map_err(|e| anyhow::anyhow!("{origin}: [sar]: {e}"))?;
        }
        "sag" => {
            let f: config::SagFile = config::parse_str(text, &origin)?;
            config::check_sag(&f).map_err(|e| anyhow::anyhow!("{origin}: [sag]: {e}"))?;
        }
        "shim" => {
            let f: config::ShimFile = config::parse_str(text, &origin)?;
            config::shim_role(&f).map_err(|e| anyhow::anyhow!("{origin}: {e:#}"))?;
        }
        other => bail!("role {other:?} has no node file checker"),
    }
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;

    const GOOD: &str = r#"
name = "t1"

[[segment]]
name = "lan0"

[[segment]]
name = "lan1"

[[node]]
name = "h1"
role = "host"
[[node.port]]
segment = "lan0"
addrs = ["10.0.0.2/24", "fd00::2/64"]
gateways = ["10.0.0.1"]
[[node.port]]
segment = "lan1"
addrs = ["10.0.1.2/24"]
offload = true
mac = "02:00:00:00:00:aa"
[node.config]
instance = "h1"

[[host]]
name = "client"
commands = ["sleep 1000"]
wait_tcp = ["10.0.0.20:8000", "[fd00::20]:8000"]
[[host.iface]]
segment = "lan0"
addrs = ["10.0.0.10/24", "fd00::10/64"]
gateways = ["10.0.0.1", "fd00::1"]
"#;

    fn err(text: &str) -> String {
        format!("{:#}", parse(text, "x.toml").unwrap_err())
    }

    #[test]
    fn a_config_sub_table_without_its_parent_line_parses() {
        let text = GOOD.replace(
            "[node.config]\ninstance = \"h1\"",
            "[node.config.rosa]\ningress = \"fd00::1\"",
        );
        assert!(text.contains("[node.config.rosa]") && !text.contains("[node.config]\n"));
        let lab = parse(&text, "implicit.toml").unwrap();
        let h1 = &lab.nodes[0].config_text;
        assert!(
            h1.contains("[host.rosa]") && h1.contains("ingress = \"fd00::1\""),
            "{h1}"
        );
        // Errors inside it still name the node and a line.
        let bad = text.replace("[node.config.rosa]", "[node.config.rosa]\nbogus_key = 1");
        let e = err(&bad);
        assert!(e.contains("[[node]] \"h1\"") && e.contains("line "), "{e}");
    }

    #[test]
    fn a_good_file_parses() {
        let lab = parse(GOOD, "good.toml").unwrap();
        assert_eq!(lab.name, "t1");
        assert_eq!(lab.netns, "svl-t1");
        assert_eq!(lab.segments[1].bridge, "br-lan1");
        let n = &lab.nodes[0];
        assert_eq!(n.ports[0].tap, "h1-0");
        assert_eq!(n.ports[1].tap, "h1-1");
        assert_eq!(n.ports[1].bridge, "br-lan1");
        assert!(n.config_text.contains("[host]"), "{}", n.config_text);
        assert!(
            n.config_text.contains("instance = \"h1\""),
            "{}",
            n.config_text
        );
        let f: config::HostFile = config::parse_str(&n.config_text, "gen").unwrap();
        assert_eq!(f.name, "h1");
        assert_eq!(f.ports.len(), 2);
        assert!(f.ports[1].offload);
        assert_eq!(f.ports[1].mac.as_deref(), Some("02:00:00:00:00:aa"));
        assert_eq!(f.ports[0].gateways, vec!["10.0.0.1"]);
        let h = &lab.hosts[0];
        assert_eq!(h.netns, "svl-t1-client");
        assert_eq!(h.ifaces[0].name, "eth0");
        assert_eq!(h.ifaces[0].peer, "client-0");
        assert_eq!(h.ifaces[0].addrs, vec!["10.0.0.10/24", "fd00::10/64"]);
        assert_eq!(h.wait_tcp.len(), 2);
        assert_eq!(lab.namespaces(), vec!["svl-t1", "svl-t1-client"]);
    }

    #[test]
    fn the_embedded_default_parses() {
        let lab = parse(DEFAULT_LAB, "<embedded>").unwrap();
        assert_eq!(lab.name, DEFAULT_LAB_NAME);
        let role = |n: &str| {
            lab.nodes
                .iter()
                .find(|x| x.name == n)
                .map(|x| x.role.as_str())
        };
        assert_eq!(role("nsff1"), Some("nsff"));
        assert_eq!(role("nr"), Some("nr"));
        assert_eq!(role("f1"), Some("fwd"));
        let client = lab.hosts.iter().find(|h| h.name == "client").unwrap();
        assert!(client.hosts.iter().any(|l| l.contains("www.example.com")));
    }

    #[test]
    fn unknown_keys_name_the_key_and_line() {
        let e = err(&GOOD.replace("offload = true", "offlaod = true"));
        assert!(e.contains("offlaod") && e.contains("line 20"), "{e}");
        let e = err(&GOOD.replace("name = \"lan1\"", "name = \"lan1\"\nbridge = \"x\""));
        assert!(e.contains("bridge") && e.contains("line 9"), "{e}");
        let e = err(&format!("{GOOD}\n[extra]\nx = 1\n"));
        assert!(e.contains("extra"), "{e}");
    }

    #[test]
    fn bad_addresses_are_named() {
        let e = err(&GOOD.replace("10.0.1.2/24", "10.0.1.300/24"));
        assert!(
            e.contains("10.0.1.300/24") && e.contains("line 19") && e.contains("addrs"),
            "{e}"
        );
        let e = err(&GOOD.replace("\"10.0.0.10/24\"", "\"10.0.0.10\""));
        assert!(e.contains("prefix length") && e.contains("line 31"), "{e}");
        let e = err(&GOOD.replace("gateways = [\"10.0.0.1\"]", "gateways = [\"10.0.0\"]"));
        assert!(e.contains("gateways") && e.contains("10.0.0"), "{e}");
        let e = err(&GOOD.replace("\"fd00::1\"", "\"fd01::1\""));
        assert!(
            e.contains("fd01::1") && e.contains("not in any prefix"),
            "{e}"
        );
        let e = err(&GOOD.replace("10.0.0.20:8000", "10.0.0.20"));
        assert!(e.contains("wait_tcp") && e.contains("line 28"), "{e}");
        let e = err(&GOOD.replace("10.0.0.10/24", "10.0.0.2/24"));
        assert!(
            e.contains("10.0.0.2") && e.contains("also used by node \"h1\""),
            "{e}"
        );
    }

    #[test]
    fn hosts_lines_are_checked_and_kept() {
        let with = |line: &str| {
            GOOD.replace(
                "wait_tcp = [\"10.0.0.20:8000\", \"[fd00::20]:8000\"]",
                &format!("wait_tcp = [\"10.0.0.20:8000\"]\nhosts = [{line}]"),
            )
        };
        let lab = parse(&with("\"10.0.0.2  a.example b.example\""), "x.toml").unwrap();
        assert_eq!(lab.hosts[0].hosts, vec!["10.0.0.2 a.example b.example"]);
        for bad in ["\"10.0.0.2\"", "\"a.example 10.0.0.2\"", "\"\""] {
            let e = err(&with(bad));
            assert!(e.contains("`hosts`") && e.contains("line 29"), "{bad}: {e}");
        }
    }

    #[test]
    fn unknown_segments_are_named() {
        let e = err(&GOOD.replace("segment = \"lan1\"", "segment = \"lan9\""));
        assert!(
            e.contains("lan9") && e.contains("line 18") && e.contains("lan0, lan1"),
            "{e}"
        );
    }

    #[test]
    fn duplicate_names_are_refused() {
        let e = err(&GOOD.replace("name = \"lan1\"", "name = \"lan0\""));
        assert!(e.contains("defined twice") && e.contains("line 8"), "{e}");
        let e = err(&GOOD.replace("name = \"client\"", "name = \"h1\""));
        assert!(e.contains("already used") && e.contains("line 26"), "{e}");
    }

    #[test]
    fn long_and_bad_names_are_refused() {
        let e = err(&GOOD.replace("name = \"t1\"", "name = \"a-very-long-lab\""));
        assert!(e.contains("a-very-long-lab") && e.contains("line 2"), "{e}");
        let e = err(&GOOD.replace("name = \"t1\"", "name = \"Lab\""));
        assert!(e.contains("[a-z0-9-]"), "{e}");
        let e = err(&GOOD.replace("name = \"h1\"", "name = \"h1234567890ab\""));
        assert!(e.contains("h1234567890ab"), "{e}");
        // 12 bytes is fine for a name, but with 100+ ports the TAP name is 16 bytes.
        let mut many = GOOD.replace("name = \"h1\"", "name = \"h123456789ab\"");
        for _ in 0..99 {
            many = many.replace(
                "[node.config]",
                "[[node.port]]\nsegment = \"lan1\"\n[node.config]",
            );
        }
        let e = err(&many);
        assert!(
            e.contains("h123456789ab-100") && e.contains("15 bytes"),
            "{e}"
        );
    }

    #[test]
    fn unknown_roles_are_refused() {
        let e = err(&GOOD.replace("role = \"host\"", "role = \"router\""));
        assert!(
            e.contains("router") && e.contains("line 12") && e.contains("known: host"),
            "{e}"
        );
    }

    #[test]
    fn bad_role_config_is_refused_before_anything_is_made() {
        let e = err(&GOOD.replace("instance = \"h1\"", "instance = \"h1\"\nnot_a_key = 3"));
        assert!(e.contains("not_a_key") && e.contains("node.config"), "{e}");
    }

    const ROSA: &str = include_str!("../../examples/labs/rosa-small.toml");

    #[test]
    fn a_shim_node_serves_its_tun_host() {
        let lab = parse(ROSA, "rosa.toml").unwrap();
        let cs = lab.nodes.iter().find(|n| n.name == "cs").unwrap();
        assert_eq!(cs.role, "shim");
        assert!(
            cs.config_text.contains("netns = \"svl-rosa-small-client\""),
            "{}",
            cs.config_text
        );
        let client = lab.hosts.iter().find(|h| h.name == "client").unwrap();
        assert!(client.ifaces.is_empty());
        let tun = client.tun.as_ref().unwrap();
        assert_eq!(
            (tun.node.as_str(), tun.name.as_str(), tun.segment.as_str()),
            ("cs", "rosa0", "a")
        );
        assert_eq!(tun.addrs, vec!["fd00:a::20/64"]);
    }

    #[test]
    fn tun_hosts_are_checked() {
        let shim = "role = \"shim\"\ntun_host = \"client\"\n";
        let e = err(&ROSA.replace(shim, "role = \"shim\"\n"));
        assert!(e.contains("needs `tun_host`"), "{e}");
        let e = err(&ROSA.replace(shim, "role = \"shim\"\ntun_host = \"nobody\"\n"));
        assert!(e.contains("no [[host]] \"nobody\""), "{e}");
        let e = err(&ROSA.replace(
            "name = \"c\"\nrole = \"host\"\n",
            "name = \"c\"\nrole = \"host\"\ntun_host = \"client\"\n",
        ));
        assert!(e.contains("only a node of role \"shim\""), "{e}");
        let e = err(&ROSA.replace(
            "[[host]]\nname = \"client\"\n",
            "[[host]]\nname = \"client\"\n[[host.iface]]\nsegment = \"a\"\n",
        ));
        assert!(e.contains("only link"), "{e}");
        let e = err(&ROSA.replace(
            "names = [\"service.org\"]",
            "names = [\"service.org\"]\nnetns = \"x\"",
        ));
        assert!(e.contains("`netns`") && e.contains("tun_host"), "{e}");
        let e = err(&ROSA.replace("names = [\"service.org\"]", "names = [\"a.org/x\"]"));
        assert!(e.contains("names[0]"), "{e}");
        // Without its shim, a host with no iface is refused as before.
        let no_shim = ROSA.replace(shim, "role = \"host\"\n").replace(
            "[node.config]\ningress = \"fd00:a::1\"\nnames = [\"service.org\"]\n",
            "",
        );
        let e = err(&no_shim);
        assert!(e.contains("no [[host.iface]]"), "{e}");
    }

    #[test]
    fn vm_and_packet_nodes_are_planned_and_checked() {
        let with =
            |keys: &str| GOOD.replace("role = \"host\"\n", &format!("role = \"host\"\n{keys}"));
        let lab = parse(&with("vm = true\nvm_memory_mib = 112\n"), "vm.toml").unwrap();
        let n = &lab.nodes[0];
        assert_eq!(n.vm.as_ref().and_then(|v| v.memory_mib), Some(112));
        assert!(
            n.ports.iter().all(|p| p.peer.is_none()),
            "a VM's NICs are TAPs"
        );
        assert!(!n.config_text.contains("link"), "{}", n.config_text);

        let text = with("link = \"packet\"\n").replace("offload = true\n", "");
        let lab = parse(&text, "pkt.toml").unwrap();
        let n = &lab.nodes[0];
        assert!(n.vm.is_none());
        assert_eq!(n.ports[0].peer.as_deref(), Some("h1-0b"));
        let f: config::HostFile = config::parse_str(&n.config_text, "gen").unwrap();
        assert!(f.ports.iter().all(|p| p.link == config::LinkKind::Packet));

        let e = err(&with("link = \"packet\"\n"));
        assert!(e.contains("offload"), "offload is a TAP's: {e}");
        let e = err(&with("vm = true\nlink = \"packet\"\n"));
        assert!(e.contains("drop `link`"), "{e}");
        let e = err(&with("vm_memory_mib = 64\n"));
        assert!(
            e.contains("only with `vm = true`") && e.contains("line 13"),
            "{e}"
        );
        let e = err(&with("vm = true\nvm_memory_mib = 8\n"));
        assert!(e.contains("32..=16384"), "{e}");
        let e = err(&with("link = \"tun\"\n"));
        assert!(e.contains("\"tun\"") && e.contains("`link`"), "{e}");
        let e = err(&ROSA.replace("role = \"shim\"\n", "role = \"shim\"\nvm = true\n"));
        assert!(e.contains("cannot run in a VM"), "{e}");
        // The bridge-side veth name is checked like every interface name:
        // 12 + "-0b" is 15 bytes, the most Linux takes.
        let long = with("link = \"packet\"\n")
            .replace("offload = true\n", "")
            .replace("name = \"h1\"", "name = \"h123456789ab\"");
        let lab = parse(&long, "long.toml").unwrap();
        assert_eq!(
            lab.nodes[0].ports[0].peer.as_deref(),
            Some("h123456789ab-0b")
        );
    }

    #[test]
    fn impairs_are_resolved_and_checked_with_lines() {
        let with = |t: &str| format!("{GOOD}\n[[impair]]\n{t}\n");
        let lab = parse(&with("link = \"h1:lan1\"\nloss = 2.5"), "i.toml").unwrap();
        assert_eq!(
            lab.impairs,
            vec![Impairment {
                link: "h1:1".into(),
                down: false,
                loss_bp: 250,
                shape: Shape::default(),
            }]
        );
        let lab = parse(
            &with("link = \"lan0\"\ndown = true\nloss = \"10%\""),
            "i.toml",
        )
        .unwrap();
        assert_eq!((lab.impairs[0].down, lab.impairs[0].loss_bp), (true, 1000));
        let lab = parse(
            &with("link = \"h1:0\"\ndelay = 10\njitter = 2.5\nrate = 1"),
            "i.toml",
        )
        .unwrap();
        assert_eq!(
            lab.impairs[0].shape.args(),
            ["delay", "10", "jitter", "2.5", "rate", "1"]
        );
        // `[[impair]]` is line 34, its first key line 35.
        for (t, want) in [
            (
                "link = \"lan9\"\ndown = true",
                "line 35: [[impair]] key `link`",
            ),
            ("link = \"lan9\"\ndown = true", "no segment \"lan9\""),
            (
                "link = \"h1:7\"\ndown = true",
                "node \"h1\" has no port \"7\"",
            ),
            (
                "link = \"lan0\"\nloss = 101",
                "line 36: [[impair]] \"lan0\" key `loss`",
            ),
            ("link = \"lan0\"\nloss = 101", "loss \"101\""),
            ("link = \"lan0\"", "imposes nothing"),
            (
                "link = \"lan0\"\ndelay = 10",
                "line 36: [[impair]]: lan0 is a segment",
            ),
            (
                "link = \"h1:0\"\njitter = 5",
                "line 36: [[impair]] \"h1:0\": jitter 5 ms is more",
            ),
            ("link = \"h1:0\"\ndelay = \"x\"", "delay \"x\""),
            ("link = \"lan0\"\nbogus = 1", "bogus"),
            (
                "link = \"client:0\"\ndown = true\n[[impair]]\nlink = \"client:eth0\"\nloss = 1",
                "already impaired (line 35)",
            ),
        ] {
            let e = err(&with(t));
            assert!(e.contains(want), "{t}: {e}");
        }
    }

    #[test]
    fn interface_name_clashes_are_refused() {
        // Node "br" port 0 is TAP "br-0", segment "0" is bridge "br-0".
        let e = err(&GOOD
            .replace("name = \"lan1\"", "name = \"0\"")
            .replace("segment = \"lan1\"", "segment = \"0\"")
            .replace("name = \"h1\"", "name = \"br\""));
        assert!(e.contains("\"br-0\""), "{e}");
    }
}
