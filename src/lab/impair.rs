//! Link impairments: cuts (`down`) and random loss on a segment, a node's
//! port or a kernel host's interface, as nftables rules in the lab
//! namespace.
//!
//! Every impairment acts in the bridges: one table `bridge svcroute` in the
//! lab namespace with one chain `impair` on the bridge `forward` hook, so a
//! rule sees each frame a bridge passes from one port to another, in both
//! directions, whatever the frame is (ARP and neighbour discovery
//! included). Nobody's link state changes: the nodes' TAPs and the hosts'
//! veths stay up, as behind a broken switch.
//!
//! ```text
//!   segment lan0   iifname { every port of br-lan0 } drop     (each frame once)
//!   port h1:0      iifname "h1-0" drop; oifname "h1-0" drop   (both directions)
//!   loss           ... numgen random mod 10000 < BP drop      (BP = pct x 100)
//! ```
//!
//! The impairments of a lab live in `<rundir>/impair.json` (what `lab
//! status` shows); [`store`] writes the whole table again from them each
//! time, so the rules are always exactly what the file says. Links are
//! kept by name and resolved to interfaces when the rules are written.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use svcroute_stack::phy::impair::{self as shape, Shape};

use super::file::Lab;
use super::netns;
use super::state::State;

/// The nftables table (family `bridge`) holding a lab's impairments.
const TABLE: &str = "svcroute";

/// One link's impairments, as `impair.json` and `[[impair]]` hold them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Impairment {
    /// The link, as [`resolve`] names it: `lan0`, `h1:0`, `client:eth0`.
    pub(crate) link: String,
    /// Cut: every frame dropped.
    #[serde(default)]
    pub(crate) down: bool,
    /// Random loss in hundredths of a percent (0..=10000; 0: none).
    #[serde(default)]
    pub(crate) loss_bp: u16,
    /// What the node's port does to the frames it sends (node ports only):
    /// its phy layer's impairment, set over its control socket.
    #[serde(default, skip_serializing_if = "Shape::is_none")]
    pub(crate) shape: Shape,
}

impl Impairment {
    /// Nothing on `link`.
    pub(crate) fn none(link: String) -> Self {
        Self {
            link,
            down: false,
            loss_bp: 0,
            shape: Shape::default(),
        }
    }

    /// No impairment at all (the entry can go).
    pub(crate) fn is_clear(&self) -> bool {
        !self.down && self.loss_bp == 0 && self.shape.is_none()
    }

    /// `down, loss 10%, delay 5ms` for people (`clear` for nothing).
    pub(crate) fn describe(&self) -> String {
        let mut v = Vec::new();
        if self.down {
            v.push("down".to_owned());
        }
        if self.loss_bp > 0 {
            v.push(format!("loss {}", pct_text(self.loss_bp)));
        }
        if !self.shape.is_none() {
            v.push(self.shape.describe());
        }
        if v.is_empty() {
            "clear".into()
        } else {
            v.join(", ")
        }
    }
}

/// What a link name stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkKind {
    /// A whole segment (bridge).
    Segment,
    /// One port of a userspace node.
    NodePort,
    /// One interface of a kernel host.
    HostIface,
}

impl LinkKind {
    /// For messages and `lab status`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Segment => "segment",
            Self::NodePort => "node port",
            Self::HostIface => "host iface",
        }
    }
}

/// A link name resolved in a lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    /// The canonical name (`lan0`, `h1:0`, `client:eth0`).
    pub(crate) name: String,
    pub(crate) kind: LinkKind,
    /// The bridge ports (interfaces in the lab namespace) it covers.
    pub(crate) ports: Vec<String>,
    /// For a node's port: the node and the port's index.
    pub(crate) node_port: Option<(String, usize)>,
}

/// Resolve `spec` in `lab`: a segment name (`lan0`), a node's port
/// (`h1:0` by index, `h1:lan0` by segment) or a kernel host's interface
/// (`client:eth0`, `client:0`, `client:lan0`). The error names `spec` and
/// lists what the lab has.
pub(crate) fn resolve(lab: &Lab, spec: &str) -> Result<Link> {
    let Some((owner, port)) = spec.split_once(':') else {
        let Some(seg) = lab.segments.iter().find(|s| s.name == spec) else {
            bail!(
                "lab {}: no segment {spec:?} (segments: {}; a node's port or a host's iface \
                 is NAME:PORT, e.g. {})",
                lab.name,
                list(lab.segments.iter().map(|s| s.name.clone())),
                list(
                    all_links(lab)
                        .into_iter()
                        .filter(|l| l.contains(':'))
                        .take(3)
                ),
            );
        };
        let ports = lab
            .nodes
            .iter()
            .flat_map(|n| &n.ports)
            .filter(|p| p.segment == seg.name)
            .map(|p| p.peer.clone().unwrap_or_else(|| p.tap.clone()))
            .chain(
                lab.hosts
                    .iter()
                    .flat_map(|h| &h.ifaces)
                    .filter(|f| f.segment == seg.name)
                    .map(|f| f.peer.clone()),
            )
            .collect();
        return Ok(Link {
            name: seg.name.clone(),
            kind: LinkKind::Segment,
            ports,
            node_port: None,
        });
    };
    if let Some(n) = lab.nodes.iter().find(|n| n.name == owner) {
        let segs: Vec<&str> = n.ports.iter().map(|p| p.segment.as_str()).collect();
        let Some(i) = pick(port, &segs, |_| None) else {
            bail!(
                "lab {}: node {owner:?} has no port {port:?} (ports: {})",
                lab.name,
                list(
                    n.ports
                        .iter()
                        .enumerate()
                        .map(|(i, p)| format!("{owner}:{i} on {}", p.segment))
                )
            );
        };
        let p = &n.ports[i];
        return Ok(Link {
            name: format!("{owner}:{i}"),
            kind: LinkKind::NodePort,
            ports: vec![p.peer.clone().unwrap_or_else(|| p.tap.clone())],
            node_port: Some((owner.to_owned(), i)),
        });
    }
    if let Some(h) = lab.hosts.iter().find(|h| h.name == owner) {
        if h.ifaces.is_empty() {
            if let Some(t) = &h.tun {
                bail!(
                    "lab {}: host {owner:?} has no iface on a bridge: its only link is shim node \
                     {:?}'s TUN; impair the node's port ({}:0) instead",
                    lab.name,
                    t.node,
                    t.node
                );
            }
        }
        let segs: Vec<&str> = h.ifaces.iter().map(|f| f.segment.as_str()).collect();
        let by_name = |p: &str| h.ifaces.iter().position(|f| f.name == p);
        let Some(i) = pick(port, &segs, by_name) else {
            bail!(
                "lab {}: host {owner:?} has no iface {port:?} (ifaces: {})",
                lab.name,
                list(
                    h.ifaces
                        .iter()
                        .map(|f| format!("{owner}:{} on {}", f.name, f.segment))
                )
            );
        };
        let f = &h.ifaces[i];
        return Ok(Link {
            name: format!("{owner}:{}", f.name),
            kind: LinkKind::HostIface,
            ports: vec![f.peer.clone()],
            node_port: None,
        });
    }
    bail!(
        "lab {}: no node or host {owner:?} (nodes: {}; hosts: {})",
        lab.name,
        list(lab.nodes.iter().map(|n| n.name.clone())),
        list(lab.hosts.iter().map(|h| h.name.clone())),
    )
}

/// The port `p` names among ports on segments `segs`: an index, a name
/// (`by_name`), or a segment the owner has exactly one port on.
fn pick(p: &str, segs: &[&str], by_name: impl Fn(&str) -> Option<usize>) -> Option<usize> {
    if let Ok(i) = p.parse::<usize>() {
        return (i < segs.len()).then_some(i);
    }
    if let Some(i) = by_name(p) {
        return Some(i);
    }
    let mut on = segs.iter().enumerate().filter(|(_, s)| **s == p);
    match (on.next(), on.next()) {
        (Some((i, _)), None) => Some(i),
        _ => None,
    }
}

/// Every link name of `lab`, for messages.
fn all_links(lab: &Lab) -> Vec<String> {
    let nodes = lab
        .nodes
        .iter()
        .flat_map(|n| (0..n.ports.len()).map(move |i| format!("{}:{i}", n.name)));
    let hosts = lab.hosts.iter().flat_map(|h| {
        h.ifaces
            .iter()
            .map(move |f| format!("{}:{}", h.name, f.name))
    });
    lab.segments
        .iter()
        .map(|s| s.name.clone())
        .chain(nodes)
        .chain(hosts)
        .collect()
}

/// `a, b, c`, or `none`.
pub(crate) fn list(items: impl Iterator<Item = String>) -> String {
    let v: Vec<String> = items.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// A loss percentage: `0`..`100`, at most two decimals, an optional `%`;
/// in hundredths of a percent.
pub(crate) fn parse_pct(s: &str) -> Result<u16> {
    shape::parse_pct(s).map_err(|e| anyhow::anyhow!("loss {e}"))
}

/// `12.5%` for 1250 hundredths.
pub(crate) fn pct_text(bp: u16) -> String {
    format!("{}%", shape::pct(bp))
}

/// Check that `shape` may go on `link` (only a node's port has a phy layer).
pub(crate) fn check_shape(link: &Link, shape: &Shape) -> Result<()> {
    if shape.is_none() || link.kind == LinkKind::NodePort {
        return Ok(());
    }
    bail!(
        "{} is a {}: delay, jitter, reorder, duplicate, corrupt and rate act in a node's phy \
         layer, so only on a node's port (NODE:PORT); a kernel's veth has no netem here",
        link.name,
        link.kind.name()
    )
}

/// The nft script that makes the table exactly `imps` (removes it when
/// empty). Every link must resolve in `lab`.
pub(crate) fn ruleset(lab: &Lab, imps: &[Impairment]) -> Result<String> {
    // Create-then-delete: `delete` alone fails when the table is not there.
    let mut s = format!("table bridge {TABLE}\ndelete table bridge {TABLE}\n");
    if imps.iter().all(Impairment::is_clear) {
        return Ok(s);
    }
    let mut cuts = Vec::new();
    let mut losses = Vec::new();
    for imp in imps {
        let link = resolve(lab, &imp.link)?;
        if link.ports.is_empty() {
            continue; // a segment nobody is on
        }
        let set = format!(
            "{{ {} }}",
            link.ports
                .iter()
                .map(|p| format!("\"{p}\""))
                .collect::<Vec<_>>()
                .join(", ")
        );
        // A segment: every frame enters by one of its ports. A port: both
        // the frames it sends and the frames it is sent.
        let dirs: &[&str] = match link.kind {
            LinkKind::Segment => &["iifname"],
            LinkKind::NodePort | LinkKind::HostIface => &["iifname", "oifname"],
        };
        for d in dirs {
            if imp.down {
                cuts.push(format!(
                    "    {d} {set} counter drop comment \"{} down\"\n",
                    link.name
                ));
            }
            // `numgen` draws 0..=9999: 100% is every frame, no draw.
            let chance = match imp.loss_bp {
                0 => continue,
                10_000.. => String::new(),
                bp => format!("numgen random mod 10000 < {bp} "),
            };
            losses.push(format!(
                "    {d} {set} {chance}counter drop comment \"{} loss\"\n",
                link.name
            ));
        }
    }
    s.push_str(&format!(
        "table bridge {TABLE} {{\n  chain impair {{\n    type filter hook forward priority 0; \
         policy accept;\n"
    ));
    for r in cuts.iter().chain(&losses) {
        s.push_str(r);
    }
    s.push_str("  }\n}\n");
    Ok(s)
}

/// `<rundir>/impair.json`.
fn path(st: &State) -> std::path::PathBuf {
    st.dir().join("impair.json")
}

/// The impairments recorded for the lab (none without the file).
pub(crate) fn load(st: &State) -> Vec<Impairment> {
    std::fs::read_to_string(path(st))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Make `imps` the lab's impairments: write the nftables table in the lab
/// namespace from them, then record them (a refused table records nothing).
///
/// A node port's shape goes to the node at once if it runs (and was
/// different before); a node that does not run gets it when it starts
/// ([`push_node`]).
pub(crate) fn store(st: &State, imps: &[Impairment]) -> Result<()> {
    let mut imps: Vec<Impairment> = imps.iter().filter(|i| !i.is_clear()).cloned().collect();
    imps.sort_by(|a, b| a.link.cmp(&b.link));
    let before = load(st);
    let shape_of = |v: &[Impairment], link: &str| {
        v.iter()
            .find(|i| i.link == link)
            .map(|i| i.shape)
            .unwrap_or_default()
    };
    let links: std::collections::BTreeSet<&str> = before
        .iter()
        .chain(&imps)
        .map(|i| i.link.as_str())
        .collect();
    for link in links {
        let new = shape_of(&imps, link);
        if new != shape_of(&before, link) {
            push(st, link, &new, false)?;
        }
    }
    apply(st, &imps)?;
    let p = path(st);
    let tmp = p.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&imps)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &p).with_context(|| format!("writing {}", p.display()))
}

/// Write the lab's table again from `imps` (after the plan changed, e.g.
/// a host moved to another segment).
pub(crate) fn apply(st: &State, imps: &[Impairment]) -> Result<()> {
    let script = ruleset(&st.lab, imps)?;
    let file = st.dir().join("impair.nft");
    std::fs::write(&file, &script).with_context(|| format!("writing {}", file.display()))?;
    nft(&st.lab.netns, &file)
        .with_context(|| format!("installing the impairments of lab {}", st.lab.name))
}

fn nft(ns: &str, file: &Path) -> Result<()> {
    let f = file.to_string_lossy();
    netns::ip(&["netns", "exec", ns, "nft", "-f", &f]).map(drop)
}

/// Forget the kernel hosts' failed and unfinished neighbour resolutions
/// (ARP, NDP), after a link was healed or its loss lowered.
///
/// A resolution that began while the link was cut sent all its probes
/// into the cut; if it is still unfinished when the link heals, it fails
/// a moment later and the kernel answers the packets queued on it, the
/// first connect after healing included, with "No route to host". A
/// flushed entry is resolved afresh by the next packet. Hosts of other
/// machines are theirs to heal.
pub(crate) fn forget_failed_neighbours(st: &State) -> Result<()> {
    for h in st.lab.hosts.iter().filter(|h| netns::exists(&h.netns)) {
        for nud in ["failed", "incomplete"] {
            netns::ip_in(&h.netns, &["neigh", "flush", "nud", nud])
                .with_context(|| format!("host {}: flushing {nud} neighbours", h.name))?;
        }
    }
    Ok(())
}

/// Send `shape` for node port `link` to its node (`ctl impair`); a node
/// that is not running is skipped unless `must`.
fn push(st: &State, link: &str, shape: &Shape, must: bool) -> Result<()> {
    let Ok(Link {
        node_port: Some((node, port)),
        ..
    }) = resolve(&st.lab, link)
    else {
        return Ok(());
    };
    let sock = st.dir().join(format!("{node}.sock"));
    let running = st
        .node_pids
        .get(&node)
        .is_some_and(|&p| netns::runs_in(p, &st.lab.netns));
    if !running && !must {
        return Ok(());
    }
    let mut args = vec!["impair".to_owned(), port.to_string()];
    if shape.is_none() {
        args.push("clear".into());
    } else {
        args.extend(shape.args());
    }
    let v = svcroute_stack::ctl::request(&sock, &args, Duration::from_secs(5))
        .with_context(|| format!("node {node}: `ctl impair` on port {port}"))?;
    if let Some(e) = v["error"].as_str() {
        bail!("node {node}: `ctl impair` on port {port}: {e}");
    }
    Ok(())
}

/// Give node `node` (just started) the shapes recorded for its ports.
pub(crate) fn push_node(st: &State, node: &str) -> Result<()> {
    for i in load(st).iter().filter(|i| !i.shape.is_none()) {
        if i.link.split_once(':').is_some_and(|(n, _)| n == node) {
            push(st, &i.link, &i.shape, true)?;
        }
    }
    Ok(())
}

/// Packets dropped so far per link, from the rules' counters (empty when
/// the table is not there).
fn dropped(ns: &str) -> BTreeMap<String, u64> {
    let mut by_link = BTreeMap::new();
    if !netns::exists(ns) {
        return by_link;
    }
    let Ok(text) = netns::ip(&[
        "netns", "exec", ns, "nft", "-j", "list", "table", "bridge", TABLE,
    ]) else {
        return by_link;
    };
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    for item in v["nftables"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let rule = &item["rule"];
        let Some((link, _)) = rule["comment"].as_str().and_then(|c| c.rsplit_once(' ')) else {
            continue;
        };
        let packets: u64 = rule["expr"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|e| e["counter"]["packets"].as_u64())
            .sum();
        *by_link.entry(link.to_owned()).or_insert(0) += packets;
    }
    by_link
}

/// The lab's impairments for `lab status --json`.
pub(crate) fn status_json(st: &State) -> Value {
    let imps = load(st);
    if imps.is_empty() {
        return json!([]);
    }
    let dropped = dropped(&st.lab.netns);
    let v: Vec<Value> = imps
        .iter()
        .map(|i| {
            let kind = resolve(&st.lab, &i.link).map_or("?", |l| l.kind.name());
            json!({
                "link": i.link,
                "kind": kind,
                "down": i.down,
                "loss_pct": f64::from(i.loss_bp) / 100.0,
                "loss_bp": i.loss_bp,
                "shape": i.shape.args(),
                "describe": i.describe(),
                "dropped": dropped.get(&i.link).copied().unwrap_or(0),
            })
        })
        .collect();
    Value::Array(v)
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::lab::file;

    const LAB: &str = r#"
name = "t"
[[segment]]
name = "lan0"
[[segment]]
name = "lan1"
[[segment]]
name = "empty"
[[node]]
name = "h1"
role = "host"
[[node.port]]
segment = "lan0"
addrs = ["10.0.0.2/24"]
[[node.port]]
segment = "lan1"
addrs = ["10.0.1.2/24"]
[node.config]
instance = "h1"
[[host]]
name = "client"
[[host.iface]]
segment = "lan0"
addrs = ["10.0.0.10/24"]
"#;

    fn lab() -> Lab {
        file::parse(LAB, "t.toml").unwrap()
    }

    #[test]
    fn links_resolve_by_segment_index_iface_and_segment_name() {
        let lab = lab();
        let l = resolve(&lab, "lan0").unwrap();
        assert_eq!(l.kind, LinkKind::Segment);
        assert_eq!(l.ports, vec!["h1-0", "client-0"]);
        for (spec, name, port) in [
            ("h1:1", "h1:1", "h1-1"),
            ("h1:lan1", "h1:1", "h1-1"),
            ("client:eth0", "client:eth0", "client-0"),
            ("client:0", "client:eth0", "client-0"),
            ("client:lan0", "client:eth0", "client-0"),
        ] {
            let l = resolve(&lab, spec).unwrap();
            assert_eq!(
                (l.name.as_str(), l.ports[0].as_str()),
                (name, port),
                "{spec}"
            );
        }
        assert!(resolve(&lab, "empty").unwrap().ports.is_empty());
    }

    #[test]
    fn unknown_links_name_the_input_and_what_there_is() {
        let lab = lab();
        for (spec, want) in [
            ("lan9", "no segment \"lan9\" (segments: lan0, lan1, empty"),
            (
                "h1:2",
                "node \"h1\" has no port \"2\" (ports: h1:0 on lan0, h1:1 on lan1)",
            ),
            ("client:eth1", "host \"client\" has no iface \"eth1\""),
            ("x:0", "no node or host \"x\" (nodes: h1; hosts: client)"),
        ] {
            let e = format!("{:#}", resolve(&lab, spec).unwrap_err());
            assert!(e.contains(want), "{spec}: {e}");
        }
    }

    #[test]
    fn percentages_parse_to_hundredths() {
        for (s, bp) in [
            ("0", 0),
            ("10", 1000),
            ("12.5%", 1250),
            ("0.01", 1),
            ("100", 10000),
        ] {
            assert_eq!(parse_pct(s).unwrap(), bp, "{s}");
        }
        for s in [
            "", "-1", "100.01", "101", "1.234", "ten", "1e2", ".5", "nan",
        ] {
            let e = parse_pct(s).unwrap_err().to_string();
            assert!(e.contains(&format!("{s:?}")), "{s}: {e}");
        }
        assert_eq!(pct_text(1250), "12.5%");
        assert_eq!(pct_text(1), "0.01%");
        assert_eq!(pct_text(10000), "100%");
    }

    #[test]
    fn the_ruleset_cuts_ports_both_ways_and_segments_once() {
        let lab = lab();
        let imps = [
            Impairment {
                link: "lan0".into(),
                down: true,
                loss_bp: 0,
                shape: Shape::default(),
            },
            Impairment {
                link: "h1:1".into(),
                down: false,
                loss_bp: 1250,
                shape: Shape::default(),
            },
        ];
        let s = ruleset(&lab, &imps).unwrap();
        assert!(
            s.starts_with("table bridge svcroute\ndelete table bridge svcroute\n"),
            "{s}"
        );
        assert!(s.contains("hook forward"), "{s}");
        assert!(
            s.contains("iifname { \"h1-0\", \"client-0\" } counter drop comment \"lan0 down\""),
            "{s}"
        );
        assert!(
            !s.contains("oifname { \"h1-0\""),
            "a segment cut needs one rule: {s}"
        );
        for d in ["iifname", "oifname"] {
            assert!(
                s.contains(&format!(
                    "{d} {{ \"h1-1\" }} numgen random mod 10000 < 1250 counter drop comment \"h1:1 loss\""
                )),
                "{s}"
            );
        }
        // 100% needs no draw (numgen's values stop at 9999).
        let all = [Impairment {
            link: "client:eth0".into(),
            down: false,
            loss_bp: 10_000,
            shape: Shape::default(),
        }];
        let s = ruleset(&lab, &all).unwrap();
        assert!(
            s.contains("oifname { \"client-0\" } counter drop comment \"client:eth0 loss\""),
            "{s}"
        );
        // Nothing to impose: the table goes.
        let s = ruleset(&lab, &[]).unwrap();
        assert_eq!(s, "table bridge svcroute\ndelete table bridge svcroute\n");
        let bad = [Impairment {
            link: "lan9".into(),
            down: true,
            loss_bp: 0,
            shape: Shape::default(),
        }];
        assert!(ruleset(&lab, &bad).is_err());
    }
}
