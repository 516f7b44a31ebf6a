// Over 800 lines: the multi-machine plan, its validation and the VXLAN joining are one room, run together by lab up and down.
//! Labs across machines: `[[machine]]` tables, `machine = "..."` on nodes
//! and hosts, and `lab up --machine NAME`, which builds only that machine's
//! part and joins each segment it shares with other machines to theirs with
//! a kernel VXLAN device (one VNI per segment, unicast to the peers'
//! underlay addresses through all-zeros FDB entries). See `docs/lab.md`,
//! "Labs across machines".
//!
//! The VXLAN device is created *from* the underlay namespace (the one `up`
//! runs in, or `--underlay-netns`) directly into the lab namespace
//! (`ip link add vx-<seg> netns svl-<lab>-<machine> type vxlan ...`): the
//! kernel keeps its UDP socket in the namespace the request came from, so
//! the lab namespace stays pure L2 and the underlay stays where it is.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use toml::Spanned;

use super::file::{check_name, line_of, HostPlan, Lab, NodePlan, Segment, IFNAMSIZ_MAX};
use super::netns;

/// The IANA VXLAN port.
pub(crate) const DEFAULT_PORT: u16 = 4789;
/// A machine's underlay MTU when the file does not say.
pub(crate) const DEFAULT_MTU: u32 = 1500;
/// The VNI of segment `i` (its index among the file's `[[segment]]`s) is
/// `VNI_BASE + i` (0x5C0000 + i): the same on every machine.
pub(crate) const VNI_BASE: u32 = 0x5C_0000;
/// Lab namespace device of a segment that spans machines: `vx-<segment>`.
const VXLAN_PREFIX: &str = "vx-";
/// The smallest MTU a segment may get (IPv6's minimum link MTU).
const MIN_SEGMENT_MTU: u32 = 1280;

/// Bytes VXLAN adds to a frame's IP packet on the underlay: inner Ethernet
/// 14 + VXLAN 8 + UDP 8 + outer IP 20 (IPv4) or 40 (IPv6).
pub(crate) fn overhead(addr: IpAddr) -> u32 {
    if addr.is_ipv4() {
        50
    } else {
        70
    }
}

/// The name under which machine `machine`'s part of lab `lab` runs: its run
/// directory and namespaces (`svl-<lab>-<machine>`). Without a machine, the
/// lab's own name.
pub(crate) fn instance(lab: &str, machine: Option<&str>) -> String {
    match machine {
        Some(m) => format!("{lab}-{m}"),
        None => lab.to_owned(),
    }
}

/// A name `lab down/status/exec --lab` accept: a lab name, or a lab's part
/// on a machine (`<lab>-<machine>`, up to 12 + 1 + 12 bytes).
pub(crate) fn check_instance(name: &str) -> Result<()> {
    if check_name("lab", name).is_ok() {
        return Ok(());
    }
    let ok = name.len() <= 2 * super::file::MAX_NAME + 1
        && name.split_once('-').is_some_and(|(l, m)| {
            check_name("lab", l).is_ok() && !m.is_empty() && !name.ends_with('-')
        })
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !ok {
        bail!(
            "lab name {name:?} must be a lab name (1..12 of [a-z0-9-], not starting with '-') or \
             <lab>-<machine>"
        );
    }
    Ok(())
}

// ---- the file as written ----------------------------------------------------

/// `[[machine]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MachineToml {
    name: Spanned<String>,
    /// The underlay address: the local address of this machine's VXLAN
    /// devices and the destination the other machines send to.
    #[serde(default)]
    address: Option<Spanned<String>>,
    /// The VXLAN UDP port this machine listens on (and peers send to).
    #[serde(default)]
    port: Option<Spanned<u16>>,
    /// The underlay device the VXLAN devices are bound to.
    #[serde(default)]
    dev: Option<Spanned<String>>,
    /// The underlay's MTU (of the path between the machines).
    #[serde(default)]
    mtu: Option<Spanned<u32>>,
}

/// A node or host as [`validate`] sees it: kind (`node`/`host`), its
/// `name` and its `machine` key.
pub(crate) type Placed<'a> = (&'a str, &'a Spanned<String>, Option<&'a Spanned<String>>);

/// What [`validate`] needs of the validated plan.
pub(crate) struct Parts<'a> {
    pub(crate) segments: &'a [Segment],
    pub(crate) nodes: &'a [NodePlan],
    pub(crate) hosts: &'a [HostPlan],
    /// Interface names of the lab namespace → their owner.
    pub(crate) ifnames: &'a BTreeMap<String, String>,
}

// ---- the validated plan ------------------------------------------------------

/// The machines of a lab; empty when it declares none.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Machines {
    /// `[[machine]]`s in file order; the first is the default.
    pub(crate) defs: Vec<MachineDef>,
    /// Node or host name → its machine.
    pub(crate) placement: BTreeMap<String, String>,
    /// Segment → MTU, for segments used on more than one machine.
    pub(crate) spanning: BTreeMap<String, u32>,
    /// The MTU of every port of the lab, on every machine, when a segment
    /// spans machines: the smallest underlay MTU minus VXLAN's overhead.
    /// Every segment gets it, not only the spanning ones, because fwd and
    /// nSFF nodes relay frames from one segment to the next as they are.
    #[serde(default)]
    pub(crate) mtu: Option<u32>,
    /// Set by `lab up --machine`: the part built here.
    #[serde(default)]
    pub(crate) this: Option<MachinePlan>,
}

/// One `[[machine]]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MachineDef {
    pub(crate) name: String,
    pub(crate) address: IpAddr,
    pub(crate) port: u16,
    pub(crate) dev: Option<String>,
    pub(crate) mtu: u32,
}

/// The part of a lab one machine builds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MachinePlan {
    /// This machine.
    pub(crate) machine: MachineDef,
    /// The lab's name in the file (the plan's `name` is `<lab>-<machine>`).
    pub(crate) lab: String,
    /// Where the VXLAN devices' sockets live (`None`: where `up` ran).
    pub(crate) underlay_netns: Option<String>,
    pub(crate) vxlans: Vec<VxlanPlan>,
}

/// A VXLAN device joining this machine's bridge of a segment to the peers'.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct VxlanPlan {
    /// `vx-<segment>`, in the lab namespace, a port of `bridge`.
    pub(crate) dev: String,
    pub(crate) segment: String,
    pub(crate) bridge: String,
    pub(crate) vni: u32,
    /// The MTU of the VXLAN device (the lab's, [`Machines::mtu`]).
    pub(crate) mtu: u32,
    pub(crate) peers: Vec<Peer>,
}

/// Another machine with a bridge of the same segment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Peer {
    pub(crate) machine: String,
    pub(crate) address: IpAddr,
    pub(crate) port: u16,
}

// ---- validation --------------------------------------------------------------

/// Check the `[[machine]]` tables and every `machine` key (`placed`: kind,
/// name and `machine` key of each node and host, in file order).
pub(crate) fn validate(
    text: &str,
    machines: &[MachineToml],
    placed: &[Placed<'_>],
    parts: &Parts<'_>,
) -> Result<Machines> {
    let at = |span: std::ops::Range<usize>| format!("line {}", line_of(text, span.start));
    if machines.is_empty() {
        if let Some((kind, name, Some(m))) = placed.iter().find(|(_, _, m)| m.is_some()) {
            bail!(
                "{}: [[{kind}]] {:?} key `machine`: no [[machine]] is declared",
                at(m.span()),
                name.get_ref()
            );
        }
        return Ok(Machines::default());
    }
    let mut defs: Vec<MachineDef> = Vec::new();
    for m in machines {
        let name = m.name.get_ref();
        check_name("machine", name)
            .with_context(|| format!("{}: [[machine]] key `name`", at(m.name.span())))?;
        if defs.iter().any(|d| &d.name == name) {
            bail!(
                "{}: [[machine]] key `name`: machine {name:?} is defined twice",
                at(m.name.span())
            );
        }
        let what = format!("[[machine]] {name:?}");
        let a = m.address.as_ref().with_context(|| {
            format!(
                "{}: {what} has no `address`: the underlay address its VXLAN devices send \
                 from and the other machines send to",
                at(m.name.span())
            )
        })?;
        let address: IpAddr = a.get_ref().parse().ok().with_context(|| {
            format!(
                "{}: {what} key `address`: {:?} is not an IP address",
                at(a.span()),
                a.get_ref()
            )
        })?;
        if address.is_unspecified() || address.is_multicast() {
            bail!(
                "{}: {what} key `address`: {address} is not a unicast address",
                at(a.span())
            );
        }
        if let Some(prev) = defs.iter().find(|d| d.address == address) {
            bail!(
                "{}: {what} key `address`: {address} is also machine {:?}'s",
                at(a.span()),
                prev.name
            );
        }
        if let Some(first) = defs.first() {
            if first.address.is_ipv4() != address.is_ipv4() {
                bail!(
                    "{}: {what} key `address`: {address} is not of the same IP version as \
                     machine {:?}'s {} (a VXLAN device speaks one)",
                    at(a.span()),
                    first.name,
                    first.address
                );
            }
        }
        let port = match &m.port {
            Some(p) if *p.get_ref() == 0 => {
                bail!("{}: {what} key `port`: 0 is no UDP port", at(p.span()))
            }
            Some(p) => *p.get_ref(),
            None => DEFAULT_PORT,
        };
        let dev = match &m.dev {
            Some(d) => {
                let s = d.get_ref();
                if s.is_empty()
                    || s.len() > IFNAMSIZ_MAX
                    || s.contains(['/', ':'])
                    || s.contains(char::is_whitespace)
                {
                    bail!(
                        "{}: {what} key `dev`: {s:?} is not an interface name (1..15 bytes, no \
                         '/', ':' or blanks)",
                        at(d.span())
                    );
                }
                Some(s.clone())
            }
            None => None,
        };
        let mtu = match &m.mtu {
            Some(v) => {
                let least = MIN_SEGMENT_MTU + overhead(address);
                if !(least..=65_535).contains(v.get_ref()) {
                    bail!(
                        "{}: {what} key `mtu`: {} is not in {least}..=65535 (a segment needs \
                         {MIN_SEGMENT_MTU} bytes after VXLAN's {})",
                        at(v.span()),
                        v.get_ref(),
                        overhead(address)
                    );
                }
                *v.get_ref()
            }
            None => DEFAULT_MTU,
        };
        defs.push(MachineDef {
            name: name.clone(),
            address,
            port,
            dev,
            mtu,
        });
    }

    // Placement: the first machine unless a node or host says.
    let mut placement = BTreeMap::new();
    for (kind, name, m) in placed {
        let machine = match m {
            None => defs[0].name.clone(),
            Some(m) => {
                if !defs.iter().any(|d| &d.name == m.get_ref()) {
                    bail!(
                        "{}: [[{kind}]] {:?} key `machine`: no machine {:?} (defined: {})",
                        at(m.span()),
                        name.get_ref(),
                        m.get_ref(),
                        defs.iter()
                            .map(|d| d.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
                m.get_ref().clone()
            }
        };
        placement.insert(name.get_ref().clone(), machine);
    }
    let line_of_name = |n: &str| {
        placed
            .iter()
            .find(|(_, x, _)| x.get_ref() == n)
            .map_or_else(String::new, |(_, x, _)| at(x.span()))
    };
    // A shim's TUN goes into its host's namespace: one machine.
    for h in parts.hosts {
        if let Some(t) = &h.tun {
            if placement[&t.node] != placement[&h.name] {
                bail!(
                    "{}: [[host]] {:?} is on machine {:?} but its shim node {:?} on {:?}: a TUN \
                     host and its shim share a machine",
                    line_of_name(&h.name),
                    h.name,
                    placement[&h.name],
                    t.node,
                    placement[&t.node]
                );
            }
        }
    }

    // Segments used on several machines, and their MTU.
    let users = segment_users(parts.nodes, parts.hosts, &placement);
    let mut spanning = BTreeMap::new();
    for s in parts.segments {
        let Some(on) = users.get(&s.name) else {
            continue;
        };
        if on.len() < 2 {
            continue;
        }
        let mtu = defs
            .iter()
            .filter(|d| on.contains(&d.name))
            .map(|d| d.mtu - overhead(d.address))
            .min()
            .unwrap_or(DEFAULT_MTU);
        let dev = format!("{VXLAN_PREFIX}{}", s.name);
        if let Some(owner) = parts.ifnames.get(&dev) {
            bail!(
                "segment {:?} spans machines ({}); its VXLAN device {dev:?} would clash with \
                 {owner}: rename one",
                s.name,
                on.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        spanning.insert(s.name.clone(), mtu);
    }
    let mtu = spanning.values().copied().min();
    if let Some(m) = mtu {
        spanning.values_mut().for_each(|v| *v = m);
    }
    // A VM's NIC MTU is the guest's business: not lowered for VXLAN.
    if let (Some(_), Some(n)) = (mtu, parts.nodes.iter().find(|n| n.vm.is_some())) {
        bail!(
            "{}: [[node]] {:?}: a VM node cannot be in a lab whose segments span machines \
             (its guest's MTU would not be lowered to fit the VXLAN's)",
            line_of_name(&n.name),
            n.name
        );
    }
    Ok(Machines {
        defs,
        placement,
        spanning,
        mtu,
        this: None,
    })
}

/// Segment → the machines with a node port or host interface on it.
fn segment_users(
    nodes: &[NodePlan],
    hosts: &[HostPlan],
    placement: &BTreeMap<String, String>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut users: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let node_segs = nodes
        .iter()
        .flat_map(|n| n.ports.iter().map(move |p| (&n.name, &p.segment)));
    let host_segs = hosts
        .iter()
        .flat_map(|h| h.ifaces.iter().map(move |f| (&h.name, &f.segment)));
    for (who, seg) in node_segs.chain(host_segs) {
        if let Some(m) = placement.get(who) {
            users.entry(seg.clone()).or_default().insert(m.clone());
        }
    }
    users
}

// ---- selection ---------------------------------------------------------------

/// `--machine` and `--underlay-netns` of `lab up` (and `check`, `down`).
#[derive(Debug, Clone, Default)]
pub(crate) struct MachineArgs {
    pub(crate) machine: Option<String>,
    pub(crate) underlay_netns: Option<String>,
}

/// Read a lab file (or the default lab) and, with `--machine`, keep only
/// that machine's part.
pub(crate) fn read_lab(path: Option<&Path>, args: &MachineArgs) -> Result<(Lab, String)> {
    let Some(machine) = args.machine.as_deref() else {
        if args.underlay_netns.is_some() {
            bail!("--underlay-netns needs --machine");
        }
        return super::read_lab(path);
    };
    check_name("machine", machine).context("--machine")?;
    let (text, origin) = match path {
        Some(p) => (
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
            p.display().to_string(),
        ),
        None => (
            super::file::DEFAULT_LAB.to_owned(),
            "<embedded default>".to_owned(),
        ),
    };
    let lab = super::file::parse_for(&text, &origin, Some(machine))?;
    let lab = select(lab, machine, args.underlay_netns.as_deref())
        .with_context(|| format!("lab file {origin}"))?;
    Ok((lab, origin))
}

/// Keep `machine`'s nodes and hosts, the segments they use, and plan a VXLAN
/// device per segment it shares with other machines.
pub(crate) fn select(mut lab: Lab, machine: &str, underlay: Option<&str>) -> Result<Lab> {
    let m = &lab.machines;
    let Some(def) = m.defs.iter().find(|d| d.name == machine).cloned() else {
        if m.defs.is_empty() {
            bail!("--machine {machine}: the lab declares no [[machine]]");
        }
        bail!(
            "--machine {machine}: no such [[machine]] (defined: {})",
            m.defs
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    if let Some(ns) = underlay {
        if !netns::exists(ns) {
            bail!("--underlay-netns {ns}: no such network namespace");
        }
    }
    let here = |name: &str| m.placement.get(name).map(String::as_str) == Some(machine);
    let users = segment_users(&lab.nodes, &lab.hosts, &m.placement);
    let mut nodes: Vec<NodePlan> = lab
        .nodes
        .iter()
        .filter(|n| here(&n.name))
        .cloned()
        .collect();
    if let Some(mtu) = m.mtu {
        for n in nodes.iter_mut().filter(|n| n.role == "nsff") {
            n.config_text = fit_nsff(&n.config_text, mtu)
                .with_context(|| format!("node {:?}: fitting its MTUs", n.name))?;
            super::file::check_node_file(&n.role, &n.config_text, &n.name)?;
        }
    }
    let hosts: Vec<HostPlan> = lab
        .hosts
        .iter()
        .filter(|h| here(&h.name))
        .cloned()
        .collect();
    if nodes.is_empty() && hosts.is_empty() {
        bail!("machine {machine:?} has no node and no host in this lab: nothing to build");
    }
    let used: BTreeSet<&str> = nodes
        .iter()
        .flat_map(|n| n.ports.iter().map(|p| p.segment.as_str()))
        .chain(
            hosts
                .iter()
                .flat_map(|h| h.ifaces.iter().map(|f| f.segment.as_str())),
        )
        .collect();
    let mut vxlans = Vec::new();
    for (i, s) in lab.segments.iter().enumerate() {
        let (true, Some(&mtu)) = (used.contains(s.name.as_str()), m.spanning.get(&s.name)) else {
            continue;
        };
        let on = &users[&s.name];
        let peers = m
            .defs
            .iter()
            .filter(|d| d.name != machine && on.contains(&d.name))
            .map(|d| Peer {
                machine: d.name.clone(),
                address: d.address,
                port: d.port,
            })
            .collect();
        vxlans.push(VxlanPlan {
            dev: format!("{VXLAN_PREFIX}{}", s.name),
            segment: s.name.clone(),
            bridge: s.bridge.clone(),
            vni: VNI_BASE + u32::try_from(i).unwrap_or(u32::MAX - VNI_BASE),
            mtu,
            peers,
        });
    }
    let file_lab = lab
        .name
        .strip_suffix(&format!("-{machine}"))
        .unwrap_or(&lab.name)
        .to_owned();
    lab.segments.retain(|s| used.contains(s.name.as_str()));
    lab.nodes = nodes;
    lab.hosts = hosts;
    lab.machines.this = Some(MachinePlan {
        machine: def,
        lab: file_lab,
        underlay_netns: underlay.map(str::to_owned),
        vxlans,
    });
    Ok(lab)
}

/// An nSFF sizes its own packets (`[nsff.transport] mtu`, `[nsff.classic]
/// mtu`, 1500 by default) rather than by its TAP: give both the lab's MTU
/// where the node file does not set them, and say so in its comment.
fn fit_nsff(text: &str, mtu: u32) -> Result<String> {
    let body_at = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.len() + 1)
        .sum::<usize>()
        .min(text.len());
    let (head, body) = text.split_at(body_at);
    let mut root: toml::Table = toml::from_str(body).context("reading the node file")?;
    let nsff = root
        .entry("nsff")
        .or_insert_with(|| toml::Table::new().into())
        .as_table_mut()
        .context("[nsff] is not a table")?;
    let mut set = Vec::new();
    for sub in ["transport", "classic"] {
        let t = nsff
            .entry(sub)
            .or_insert_with(|| toml::Table::new().into())
            .as_table_mut()
            .with_context(|| format!("[nsff.{sub}] is not a table"))?;
        if !t.contains_key("mtu") {
            t.insert("mtu".into(), i64::from(mtu).into());
            set.push(format!("[nsff.{sub}] mtu"));
        }
    }
    if set.is_empty() {
        return Ok(text.to_owned());
    }
    Ok(format!(
        "{head}# {} = {mtu}: the lab's MTU across machines (docs/lab.md)\n{}",
        set.join(", "),
        toml::to_string(&root).context("writing the node file")?
    ))
}

// ---- up, down ----------------------------------------------------------------

/// `lab up` must run where namespaces it makes outlive it: not inside `ip
/// netns exec`, whose private mount namespace keeps `/run/netns` mounts
/// from reaching the rest of the system (the lab would vanish when `up`
/// exits). There `/run/netns` is a slave mount (`master:N`).
pub(crate) fn check_mount_namespace() -> Result<()> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Ok(());
    };
    let slave = info.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.get(4) == Some(&"/run/netns")
            && f.iter()
                .skip(6)
                .take_while(|x| **x != "-")
                .any(|x| x.starts_with("master:"))
    });
    if slave {
        bail!(
            "this process runs in a private mount namespace (`ip netns exec`?): namespaces made \
             here would not be visible to other processes. Run `svcroute lab` in the root \
             namespace; for a machine whose underlay is a namespace, `lab up --machine NAME \
             --underlay-netns NS`"
        );
    }
    Ok(())
}

/// Create this machine's VXLAN devices (bridge ports, FDB entries to the
/// peers) and set the MTU of every port on a segment that spans machines.
/// Runs after the bridges, TAPs and veths exist, before the nodes start
/// (they read their TAP's MTU when they open it).
pub(crate) fn build(lab: &Lab) -> Result<()> {
    let Some(this) = &lab.machines.this else {
        return Ok(());
    };
    let ns = lab.netns.as_str();
    for v in &this.vxlans {
        let vni = v.vni.to_string();
        let local = this.machine.address.to_string();
        let port = this.machine.port.to_string();
        let mut args = vec![
            "link", "add", &v.dev, "netns", ns, "type", "vxlan", "id", &vni, "local", &local,
            "dstport", &port,
        ];
        if let Some(d) = &this.machine.dev {
            args.extend(["dev", d.as_str()]);
        }
        match &this.underlay_netns {
            Some(u) => netns::ip_in(u, &args),
            None => netns::ip(&args),
        }
        .with_context(|| format!("creating VXLAN {} of segment {:?}", v.dev, v.segment))?;
        let mtu = v.mtu.to_string();
        netns::ip_in(
            ns,
            &[
                "link", "set", &v.dev, "mtu", &mtu, "master", &v.bridge, "up",
            ],
        )?;
        for p in &v.peers {
            let dst = p.address.to_string();
            let port = p.port.to_string();
            netns::bridge_in(
                ns,
                &[
                    "fdb",
                    "append",
                    "00:00:00:00:00:00",
                    "dev",
                    &v.dev,
                    "dst",
                    &dst,
                    "port",
                    &port,
                    "self",
                    "permanent",
                ],
            )?;
        }
    }
    // Every port here, so no frame is larger than a VXLAN device takes (the
    // bridge drops those silently), even after a fwd node relayed it from
    // a local segment onto a spanning one.
    let Some(mtu) = lab.machines.mtu else {
        return Ok(());
    };
    let mtu = mtu.to_string();
    for n in &lab.nodes {
        for p in &n.ports {
            for dev in std::iter::once(&p.tap).chain(&p.peer) {
                netns::ip_in(ns, &["link", "set", dev, "mtu", &mtu])?;
            }
        }
    }
    for h in &lab.hosts {
        for f in &h.ifaces {
            netns::ip_in(ns, &["link", "set", &f.peer, "mtu", &mtu])?;
            netns::ip_in(&h.netns, &["link", "set", &f.name, "mtu", &mtu])?;
        }
    }
    Ok(())
}

/// `lab down`: delete the VXLAN devices now (deleting the namespace would,
/// but asynchronously: a new `up` could find the VNI still taken).
pub(crate) fn remove(lab: &Lab, errors: &mut Vec<String>) {
    let Some(this) = &lab.machines.this else {
        return;
    };
    if !netns::exists(&lab.netns) {
        return;
    }
    for v in &this.vxlans {
        if netns::ip_in(&lab.netns, &["link", "show", "dev", &v.dev]).is_ok() {
            if let Err(e) = netns::ip_in(&lab.netns, &["link", "del", "dev", &v.dev]) {
                errors.push(format!("{e:#}"));
            }
        }
    }
}

// ---- status ------------------------------------------------------------------

/// This machine and its VXLAN devices, with the peers the kernel's FDB
/// has (`bridge fdb`, when `live`); `null` for a lab on one machine.
pub(crate) fn status_json(lab: &Lab, live: bool) -> Value {
    let Some(this) = &lab.machines.this else {
        return Value::Null;
    };
    let vxlans: Vec<Value> = this
        .vxlans
        .iter()
        .map(|v| {
            let fdb_json = live
                .then(|| netns::bridge_in(&lab.netns, &["-j", "fdb", "show", "dev", &v.dev]).ok())
                .flatten()
                .and_then(|s| serde_json::from_str::<Value>(&s).ok());
            let fdb: Vec<Value> = fdb_json
                .as_ref()
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter(|e| e["mac"] == "00:00:00:00:00:00")
                .filter_map(|e| e["dst"].as_str().map(|d| json!(d)))
                .collect();
            json!({
                "dev": v.dev, "segment": v.segment, "bridge": v.bridge, "vni": v.vni,
                "mtu": v.mtu, "fdb": fdb,
                "present": if live { json!(fdb_json.is_some()) } else { Value::Null },
                "peers": v.peers.iter().map(|p| json!({
                    "machine": p.machine, "address": p.address, "port": p.port,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "name": this.machine.name, "lab": this.lab, "address": this.machine.address,
        "port": this.machine.port, "dev": this.machine.dev, "mtu": this.machine.mtu,
        "underlay_netns": this.underlay_netns, "vxlans": vxlans,
    })
}

/// The `machine` part of `lab status`.
pub(crate) fn render(v: &Value) -> String {
    let m = &v["machine"];
    if m.is_null() {
        return String::new();
    }
    let s = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    let mut out = format!(
        "machine {} of lab {}: underlay {} port {}{}{}\n",
        s(&m["name"]),
        s(&m["lab"]),
        s(&m["address"]),
        m["port"],
        m["dev"]
            .as_str()
            .map_or_else(String::new, |d| format!(" dev {d}")),
        m["underlay_netns"]
            .as_str()
            .map_or_else(String::new, |n| format!(" (namespace {n})")),
    );
    let vx = m["vxlans"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if vx.is_empty() {
        out.push_str("no segment spans machines here: no VXLAN\n");
        return out;
    }
    let mut rows = vec![["VXLAN", "SEGMENT", "VNI", "MTU", "PEERS", "FDB"].map(String::from)];
    for x in vx {
        let peers: Vec<String> = x["peers"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|p| {
                let a = s(&p["address"]);
                let port = p["port"].as_u64().and_then(|x| u16::try_from(x).ok());
                match (a.parse::<IpAddr>(), port) {
                    (Ok(ip), Some(port)) => {
                        format!("{} {}", s(&p["machine"]), SocketAddr::new(ip, port))
                    }
                    _ => format!("{} {a}", s(&p["machine"])),
                }
            })
            .collect();
        let fdb: Vec<String> = x["fdb"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(s)
            .collect();
        rows.push([
            format!(
                "{}{}",
                s(&x["dev"]),
                if x["present"] == false {
                    " (MISSING)"
                } else {
                    ""
                }
            ),
            s(&x["segment"]),
            x["vni"].to_string(),
            x["mtu"].to_string(),
            peers.join(", "),
            if fdb.is_empty() {
                "-".into()
            } else {
                fdb.join(", ")
            },
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in &rows {
        let line: String = r
            .iter()
            .zip(&widths)
            .map(|(x, w)| format!("{x:<w$}  "))
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod test {
    use super::super::file::{parse, parse_for, DEFAULT_LAB};
    use super::*;

    /// The default lab split in two: nSFF2's side (f2, nsff2, sf2) on m2.
    fn two(machines: &str) -> String {
        let mut t = DEFAULT_LAB.to_owned();
        for n in ["f2", "nsff2", "sf2"] {
            let line = format!("name = \"{n}\"\n");
            assert_eq!(t.matches(&line).count(), 1, "{n}");
            t = t.replace(&line, &format!("{line}machine = \"m2\"\n"));
        }
        format!("{t}\n{machines}")
    }

    const M: &str = "[[machine]]\nname = \"m1\"\naddress = \"fd00:77::1\"\n\n\
                     [[machine]]\nname = \"m2\"\naddress = \"fd00:77::2\"\nport = 4790\nmtu = 9000\n";

    fn err(text: &str) -> String {
        format!("{:#}", parse(text, "x.toml").unwrap_err())
    }

    #[test]
    fn the_split_default_lab_spans_fab_and_fab23() {
        let lab = parse(&two(M), "two.toml").unwrap();
        let m = &lab.machines;
        assert_eq!(m.defs.len(), 2);
        assert_eq!(
            m.placement["client"], "m1",
            "the first machine is the default"
        );
        assert_eq!(m.placement["nsff2"], "m2");
        // Both ends' MTUs count: m1's 1500 - 70 (IPv6 underlay).
        let spans: Vec<(&str, u32)> = m.spanning.iter().map(|(s, &u)| (s.as_str(), u)).collect();
        assert_eq!(spans, vec![("fab", 1430), ("fab23", 1430)]);
        // Without --machine the whole lab is one machine's, as before.
        assert_eq!(lab.name, "rfc8677");
        assert_eq!(lab.nodes.len(), 7);
    }

    #[test]
    fn each_machine_gets_its_part_and_vxlans_to_the_other() {
        let text = two(M);
        let m1 = select(parse_for(&text, "x", Some("m1")).unwrap(), "m1", None).unwrap();
        assert_eq!(m1.name, "rfc8677-m1");
        assert_eq!(m1.netns, "svl-rfc8677-m1");
        let names: Vec<&str> = m1.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, vec!["f1", "f3", "nr", "nsff1"]);
        let client = m1.hosts.iter().find(|h| h.name == "client").unwrap();
        assert_eq!(client.netns, "svl-rfc8677-m1-client");
        assert!(m1
            .segments
            .iter()
            .all(|s| s.name != "sfs" && s.name != "n2"));
        let this = m1.machines.this.as_ref().unwrap();
        assert_eq!(this.lab, "rfc8677");
        let vx: Vec<(&str, u32, u32)> = this
            .vxlans
            .iter()
            .map(|v| (v.dev.as_str(), v.vni, v.mtu))
            .collect();
        // fab is the 4th [[segment]], fab23 the 6th.
        assert_eq!(
            vx,
            vec![
                ("vx-fab", VNI_BASE + 3, 1430),
                ("vx-fab23", VNI_BASE + 5, 1430)
            ]
        );
        let nsff1 = &m1.nodes[3].config_text;
        assert!(
            nsff1.starts_with("# Generated")
                && nsff1.contains("[nsff.transport] mtu, [nsff.classic] mtu = 1430"),
            "{nsff1}"
        );
        let f: toml::Table = toml::from_str(nsff1).unwrap();
        assert_eq!(f["nsff"]["transport"]["mtu"].as_integer(), Some(1430));
        assert_eq!(f["nsff"]["classic"]["mtu"].as_integer(), Some(1430));
        assert_eq!(
            f["nsff"]["nsff_id"].as_integer(),
            Some(1),
            "the rest is kept"
        );
        // A written MTU is the author's.
        let t = fit_nsff("# x\n[nsff.transport]\nmtu = 1300\n", 1430).unwrap();
        assert!(
            t.contains("mtu = 1300") && t.contains("[nsff.classic] mtu = 1430"),
            "{t}"
        );
        let p = &this.vxlans[0].peers;
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].machine.as_str(), p[0].port), ("m2", 4790));
        assert_eq!(p[0].address.to_string(), "fd00:77::2");

        let m2 = select(parse_for(&text, "x", Some("m2")).unwrap(), "m2", None).unwrap();
        let names: Vec<&str> = m2.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, vec!["f2", "nsff2", "sf2"]);
        assert!(m2.hosts.is_empty());
        let this = m2.machines.this.as_ref().unwrap();
        assert_eq!(this.vxlans.len(), 2);
        assert_eq!(this.vxlans[1].vni, VNI_BASE + 5, "the same VNI on both");
        assert_eq!(this.vxlans[0].peers[0].port, DEFAULT_PORT);

        let e = format!(
            "{:#}",
            select(parse_for(&text, "x", Some("m3")).unwrap(), "m3", None).unwrap_err()
        );
        assert!(
            e.contains("no such [[machine]]") && e.contains("m1, m2"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            select(parse_for(DEFAULT_LAB, "x", Some("m1")).unwrap(), "m1", None).unwrap_err()
        );
        assert!(e.contains("declares no [[machine]]"), "{e}");
    }

    #[test]
    fn ipv4_underlays_cost_50_bytes() {
        let m = M
            .replace("fd00:77::1", "10.0.0.1")
            .replace("fd00:77::2", "10.0.0.2");
        let lab = parse(&two(&m), "x").unwrap();
        assert_eq!(lab.machines.spanning["fab"], 1450);
        let m = m.replacen(
            "address = \"10.0.0.1\"",
            "address = \"10.0.0.1\"\nmtu = 1400",
            1,
        );
        let lab = parse(&two(&m), "x").unwrap();
        assert_eq!(
            lab.machines.spanning["fab"], 1350,
            "the smaller underlay wins"
        );
    }

    #[test]
    fn bad_machines_are_named_with_their_line() {
        let text = two(M);
        let line_of = |needle: &str| {
            let at = text.find(needle).unwrap();
            format!("line {}", text[..at].matches('\n').count() + 1)
        };
        let e = err(&text.replace("machine = \"m2\"\n", "machine = \"m9\"\n"));
        assert!(
            e.contains("no machine \"m9\"") && e.contains("m1, m2") && e.contains("`machine`"),
            "{e}"
        );
        assert!(e.contains(&line_of("machine = \"m2\"")), "{e}");
        let e = err(&text.replace("name = \"m2\"", "name = \"m1\""));
        assert!(
            e.contains("defined twice") && e.contains(&line_of("name = \"m2\"")),
            "{e}"
        );
        let e = err(&text.replace("address = \"fd00:77::2\"\n", ""));
        assert!(
            e.contains("has no `address`") && e.contains(&line_of("name = \"m2\"")),
            "{e}"
        );
        let e = err(&text.replace("fd00:77::2", "fd00:77::1"));
        assert!(e.contains("also machine \"m1\"'s"), "{e}");
        let e = err(&text.replace("fd00:77::2", "10.0.0.2"));
        assert!(e.contains("same IP version"), "{e}");
        let e = err(&text.replace("fd00:77::2", "fd00:77::2/64"));
        assert!(e.contains("not an IP address"), "{e}");
        let e = err(&text.replace("port = 4790", "port = 0"));
        assert!(e.contains("no UDP port"), "{e}");
        let e = err(&text.replace("port = 4790", "port = 70000"));
        assert!(
            e.contains("port") && e.contains(&line_of("port = 4790")),
            "{e}"
        );
        let e = err(&text.replace("mtu = 9000", "mtu = 1300"));
        assert!(e.contains("1350..=65535"), "{e}");
        let e = err(&text.replace("mtu = 9000", "dev = \"a/b\""));
        assert!(e.contains("`dev`"), "{e}");
        let e = err(&text.replace("mtu = 9000", "vni = 3"));
        assert!(e.contains("vni") && e.contains("line"), "{e}");
        // `machine` without any [[machine]].
        let e = err(&two("").replace("\n[[machine]]", ""));
        assert!(e.contains("no [[machine]] is declared"), "{e}");
    }

    #[test]
    fn vxlan_names_may_not_clash_and_vms_stay_off_spanning_segments() {
        // A host "vx" has veth "vx-0" on the lab side; segment "0" spans.
        let lab = "name = \"c\"\n[[segment]]\nname = \"0\"\n\
                   [[host]]\nname = \"vx\"\n[[host.iface]]\nsegment = \"0\"\n\
                   [[host]]\nname = \"b\"\nmachine = \"m2\"\n[[host.iface]]\nsegment = \"0\"\n";
        let e = err(&format!("{lab}{M}"));
        assert!(e.contains("\"vx-0\"") && e.contains("clash"), "{e}");
        let vm = "name = \"c\"\n[[segment]]\nname = \"s\"\n\
                  [[node]]\nname = \"h\"\nrole = \"host\"\nvm = true\n[[node.port]]\nsegment = \"s\"\n\
                  [node.config]\ninstance = \"h\"\n\
                  [[host]]\nname = \"b\"\nmachine = \"m2\"\n[[host.iface]]\nsegment = \"s\"\n";
        let e = err(&format!("{vm}{M}"));
        assert!(e.contains("VM node") && e.contains("line 5"), "{e}");
        assert_eq!(parse(&two(M), "x").unwrap().machines.mtu, Some(1430));
        assert_eq!(parse(DEFAULT_LAB, "x").unwrap().machines.mtu, None);
    }

    #[test]
    fn instance_names_are_accepted_where_lab_names_are() {
        check_instance("rfc8677").unwrap();
        check_instance("rfc8677-m1").unwrap();
        check_instance("abcdefghijkl-abcdefghijkl").unwrap();
        assert!(check_instance("abcdefghijkl-abcdefghijklm").is_err());
        assert!(check_instance("Lab-m1").is_err());
        assert!(check_instance("-a-m1").is_err());
        assert_eq!(instance("l", Some("m")), "l-m");
        assert_eq!(instance("l", None), "l");
    }

    #[test]
    fn status_renders_the_machine_and_its_peers() {
        let text = two(M);
        let lab = select(parse_for(&text, "x", Some("m1")).unwrap(), "m1", Some("u1"));
        // `u1` does not exist here: refused before anything is made.
        assert!(format!("{:#}", lab.unwrap_err()).contains("no such network namespace"));
        let lab = select(parse_for(&text, "x", Some("m1")).unwrap(), "m1", None).unwrap();
        let v = json!({ "machine": status_json(&lab, false) });
        let r = render(&v);
        assert!(
            r.contains("machine m1 of lab rfc8677: underlay fd00:77::1 port 4789"),
            "{r}"
        );
        assert!(
            r.contains("vx-fab") && r.contains("m2 [fd00:77::2]:4790"),
            "{r}"
        );
        assert_eq!(render(&json!({ "machine": null })), "");
    }
}
