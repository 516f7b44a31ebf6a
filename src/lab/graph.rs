//! `lab graph`: a lab's topology as a picture, SVG or DOT.
//!
//! The picture is bipartite: nodes and kernel hosts on one side, segments on
//! the other, one line per port (a node's TAP, a host's veth, a shim's TUN
//! straight to its host) labelled with the interface and its addresses.
//!
//! Layout ([`layout`]) is layered and deterministic: in each connected part
//! the device farthest from the rest (a kernel host first on ties) is column
//! 0, everything else sits in the column of its hop distance from it, and a
//! few barycentre sweeps order each column to cross fewer lines. So a chain
//! lab reads left to right as the traffic flows, and the same file always
//! gives the same picture.
//!
//! Every element has an id the live view (`lab ui`, [`super::ui`]) updates:
//! `node-<name>`, `host-<name>`, `seg-<segment>`, and `link-<iface>` with
//! the interface of the lab namespace the port is plugged in by (a node's
//! TAP, the bridge end of a packet port, a host's veth peer), or
//! `tun-<host>` for a shim's TUN.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use svg::node::element::{Ellipse, Group, Line, Rectangle, TSpan, Text, Title};
use svg::Document;

use super::file::Lab;
use super::state::{self, State};
use super::{out, read_lab};

/// Output format of `lab graph`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Format {
    /// SVG 1.1, one `<g>` with an `id` per node, host, segment and link.
    Svg,
    /// Graphviz DOT (`dot -Tpng`), an undirected graph.
    Dot,
}

/// `lab graph [FILE|LAB] [--format] [-o FILE]`.
pub(super) fn graph(arg: Option<&str>, format: Format, output: Option<&Path>) -> Result<()> {
    let (lab, _) = resolve(arg)?;
    let topo = Topo::of(&lab);
    let text = match format {
        Format::Svg => svg(&topo),
        Format::Dot => dot(&topo),
    };
    match output {
        Some(p) => std::fs::write(p, text).with_context(|| format!("writing {}", p.display())),
        None => out(&text),
    }
}

/// The plan `lab graph` draws: FILE, else the running lab of that name (its
/// `state.json`), else without an argument the embedded default lab.
/// Returns the plan and whether it came from a running lab.
pub(super) fn resolve(arg: Option<&str>) -> Result<(Lab, bool)> {
    let Some(arg) = arg else {
        return Ok((read_lab(None)?.0, false));
    };
    let p = Path::new(arg);
    if arg.ends_with(".toml") || arg.contains('/') || p.is_file() {
        return Ok((read_lab(Some(&PathBuf::from(arg)))?.0, false));
    }
    super::file::check_name("lab", arg)?;
    match State::load(arg) {
        Some(st) => Ok((st.lab, true)),
        None if state::dir(arg).exists() => bail!(
            "lab {arg}: no readable state.json in {}",
            state::dir(arg).display()
        ),
        None => bail!("{arg:?} is neither a lab file nor a lab that is up"),
    }
}

// ---- the picture's model ----------------------------------------------------

/// What a box stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    /// A userspace node of this role.
    Node(String),
    /// A kernel host (a namespace of its own).
    Host,
}

/// A node or kernel host.
#[derive(Debug, Clone)]
pub(super) struct Device {
    pub(super) name: String,
    pub(super) kind: Kind,
}

impl Device {
    /// The element id: `node-<name>` or `host-<name>`.
    pub(super) fn id(&self) -> String {
        match self.kind {
            Kind::Node(_) => format!("node-{}", self.name),
            Kind::Host => format!("host-{}", self.name),
        }
    }
}

/// What a port is plugged into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// A segment (index into [`Topo::segments`]).
    Segment(usize),
    /// Another device directly (a shim's TUN to its host).
    Device(usize),
}

/// One port: a line from a device to a segment (or device).
#[derive(Debug, Clone)]
pub(super) struct Link {
    /// The element id: `link-<iface>` or `tun-<host>`.
    pub(super) id: String,
    /// Index into [`Topo::devices`].
    pub(super) device: usize,
    pub(super) to: End,
    /// The device's interface name.
    pub(super) iface: String,
    pub(super) addrs: Vec<String>,
    /// Where the kernel shows this link's state: (namespace, interface,
    /// the bridge it must be enslaved to, if any). One or two (a packet
    /// port: the node's veth end and the bridge end).
    pub(super) kernel: Vec<(String, String, Option<String>)>,
}

/// A lab reduced to what is drawn.
#[derive(Debug, Clone)]
pub(super) struct Topo {
    pub(super) name: String,
    /// Segment name and bridge.
    pub(super) segments: Vec<(String, String)>,
    /// Nodes in file order, then kernel hosts in file order.
    pub(super) devices: Vec<Device>,
    pub(super) links: Vec<Link>,
}

impl Topo {
    pub(super) fn of(lab: &Lab) -> Self {
        let segments: Vec<(String, String)> = lab
            .segments
            .iter()
            .map(|s| (s.name.clone(), s.bridge.clone()))
            .collect();
        let seg = |name: &str| segments.iter().position(|(n, _)| n == name);
        let mut devices: Vec<Device> = lab
            .nodes
            .iter()
            .map(|n| Device {
                name: n.name.clone(),
                kind: Kind::Node(n.role.clone()),
            })
            .collect();
        devices.extend(lab.hosts.iter().map(|h| Device {
            name: h.name.clone(),
            kind: Kind::Host,
        }));
        let mut links = Vec::new();
        for (d, n) in lab.nodes.iter().enumerate() {
            for p in &n.ports {
                let Some(s) = seg(&p.segment) else { continue };
                let mut kernel = vec![(lab.netns.clone(), p.tap.clone(), None)];
                match &p.peer {
                    // A packet port: the node's end is not on the bridge, its peer is.
                    Some(peer) => {
                        kernel.push((lab.netns.clone(), peer.clone(), Some(p.bridge.clone())));
                    }
                    None => kernel[0].2 = Some(p.bridge.clone()),
                }
                let on_bridge = p.peer.as_ref().unwrap_or(&p.tap);
                links.push(Link {
                    id: format!("link-{on_bridge}"),
                    device: d,
                    to: End::Segment(s),
                    iface: p.tap.clone(),
                    addrs: p.addrs.clone(),
                    kernel,
                });
            }
        }
        for (i, h) in lab.hosts.iter().enumerate() {
            let d = lab.nodes.len() + i;
            for f in &h.ifaces {
                let Some(s) = seg(&f.segment) else { continue };
                links.push(Link {
                    id: format!("link-{}", f.peer),
                    device: d,
                    to: End::Segment(s),
                    iface: f.name.clone(),
                    addrs: f.addrs.clone(),
                    kernel: vec![(lab.netns.clone(), f.peer.clone(), Some(f.bridge.clone()))],
                });
            }
            if let Some(t) = &h.tun {
                let Some(node) = lab.nodes.iter().position(|n| n.name == t.node) else {
                    continue;
                };
                links.push(Link {
                    id: format!("tun-{}", h.name),
                    device: d,
                    to: End::Device(node),
                    iface: t.name.clone(),
                    addrs: t.addrs.clone(),
                    kernel: vec![(h.netns.clone(), t.name.clone(), None)],
                });
            }
        }
        Self {
            name: lab.name.clone(),
            segments,
            devices,
            links,
        }
    }

    /// Vertices of the picture: devices `0..D`, then segments `D..D+S`.
    fn vertex_count(&self) -> usize {
        self.devices.len() + self.segments.len()
    }

    fn vertex_of(&self, end: End) -> usize {
        match end {
            End::Device(d) => d,
            End::Segment(s) => self.devices.len() + s,
        }
    }

    fn adjacency(&self) -> Vec<Vec<usize>> {
        let mut adj = vec![Vec::new(); self.vertex_count()];
        for l in &self.links {
            let (a, b) = (l.device, self.vertex_of(l.to));
            if !adj[a].contains(&b) {
                adj[a].push(b);
                adj[b].push(a);
            }
        }
        adj
    }
}

// ---- layout ------------------------------------------------------------------

/// Where every vertex is drawn (centre), and the picture's size.
#[derive(Debug)]
pub(super) struct Layout {
    pub(super) pos: Vec<(f64, f64)>,
    pub(super) width: f64,
    pub(super) height: f64,
}

const COL_W: f64 = 200.0;
const ROW_H: f64 = 96.0;
const MARGIN: f64 = 70.0;
/// Room above the picture for the title and the legend.
const HEADER: f64 = 64.0;
const BOX_W: f64 = 104.0;
const BOX_H: f64 = 40.0;
const SEG_RX: f64 = 46.0;
const SEG_RY: f64 = 15.0;

/// Hop distances from `from` within its connected part (`usize::MAX`: not reached).
fn bfs(adj: &[Vec<usize>], from: usize) -> Vec<usize> {
    let mut dist = vec![usize::MAX; adj.len()];
    dist[from] = 0;
    let mut q = VecDeque::from([from]);
    while let Some(v) = q.pop_front() {
        for &w in &adj[v] {
            if dist[w] == usize::MAX {
                dist[w] = dist[v] + 1;
                q.push_back(w);
            }
        }
    }
    dist
}

/// The layered layout described in the module documentation.
pub(super) fn layout(t: &Topo) -> Layout {
    let adj = t.adjacency();
    let n = t.vertex_count();
    // Root preference: kernel hosts first, then nodes, each in file order,
    // then segments (a part with no device at all).
    let mut order: Vec<usize> = (0..t.devices.len())
        .filter(|&d| t.devices[d].kind == Kind::Host)
        .collect();
    order.extend((0..t.devices.len()).filter(|&d| t.devices[d].kind != Kind::Host));
    order.extend(t.devices.len()..n);

    let mut pos = vec![(0.0, 0.0); n];
    let mut placed = vec![false; n];
    let mut top = HEADER;
    let mut width: f64 = 0.0;
    for &start in &order {
        if placed[start] {
            continue;
        }
        let part: Vec<usize> = {
            let d = bfs(&adj, start);
            order
                .iter()
                .copied()
                .filter(|&v| d[v] != usize::MAX)
                .collect()
        };
        // The root: the member farthest from the rest (ties: `order`).
        let ecc = |v: usize| {
            bfs(&adj, v)
                .into_iter()
                .filter(|&x| x != usize::MAX)
                .max()
                .unwrap_or(0)
        };
        let mut root = part[0];
        let mut best = ecc(root);
        for &v in &part[1..] {
            if v >= t.devices.len() {
                break; // segments are roots only of device-less parts
            }
            let e = ecc(v);
            if e > best {
                (root, best) = (v, e);
            }
        }
        // Columns by distance, each first in discovery (BFS) order.
        let dist = bfs(&adj, root);
        let mut cols: Vec<Vec<usize>> = vec![Vec::new(); best + 1];
        let mut seen = vec![false; n];
        let mut q = VecDeque::from([root]);
        seen[root] = true;
        while let Some(v) = q.pop_front() {
            cols[dist[v]].push(v);
            for &w in &adj[v] {
                if !seen[w] {
                    seen[w] = true;
                    q.push_back(w);
                }
            }
        }
        order_columns(&mut cols, &adj);
        let rows = cols.iter().map(Vec::len).max().unwrap_or(1);
        let part_h = rows as f64 * ROW_H;
        for (c, col) in cols.iter().enumerate() {
            let off = (part_h - col.len() as f64 * ROW_H) / 2.0;
            for (r, &v) in col.iter().enumerate() {
                pos[v] = (
                    MARGIN + c as f64 * COL_W,
                    top + off + r as f64 * ROW_H + ROW_H / 2.0,
                );
                placed[v] = true;
            }
        }
        width = width.max(MARGIN * 2.0 + (cols.len() - 1) as f64 * COL_W);
        top += part_h + ROW_H / 2.0;
    }
    Layout {
        pos,
        width: width.max(520.0),
        height: top - ROW_H / 2.0 + MARGIN,
    }
}

/// Barycentre sweeps: each vertex moves to the mean row of its neighbours in
/// the column before (forward) or after (backward); ties keep the order.
fn order_columns(cols: &mut [Vec<usize>], adj: &[Vec<usize>]) {
    let n = adj.len();
    for sweep in 0..4 {
        let forward = sweep % 2 == 0;
        let idx: Vec<usize> = if forward {
            (1..cols.len()).collect()
        } else {
            (0..cols.len().saturating_sub(1)).rev().collect()
        };
        for c in idx {
            let other = if forward { c - 1 } else { c + 1 };
            let mut row = vec![f64::NAN; n];
            for (r, &v) in cols[other].iter().enumerate() {
                row[v] = r as f64;
            }
            let mut keyed: Vec<(f64, usize, usize)> = cols[c]
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let ns: Vec<f64> = adj[v]
                        .iter()
                        .map(|&w| row[w])
                        .filter(|x| !x.is_nan())
                        .collect();
                    let key = if ns.is_empty() {
                        i as f64
                    } else {
                        ns.iter().sum::<f64>() / ns.len() as f64
                    };
                    (key, i, v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            cols[c] = keyed.into_iter().map(|(_, _, v)| v).collect();
        }
    }
}

// ---- SVG ---------------------------------------------------------------------

/// Fill colour of a node box by role (kernel hosts: white, dashed).
pub(super) fn role_colour(role: &str) -> &'static str {
    match role {
        "host" => "#cfe8cf",
        "fwd" => "#cfe0f5",
        "nr" => "#f5deb0",
        "nsff" => "#e3d0f0",
        "mda" => "#f5cccc",
        "sar" => "#c6eeea",
        "sag" => "#efefb4",
        "shim" => "#dedede",
        _ => "#eeeeee",
    }
}

const STYLE: &str = "\
text { font-family: sans-serif; font-size: 12px; fill: #222; }
.name { font-weight: bold; font-size: 13px; }
.role, .legend text { font-size: 10px; fill: #555; }
.label { font-size: 10px; fill: #333; stroke: #fff; stroke-width: 4px; paint-order: stroke; }
.title { font-size: 15px; font-weight: bold; }
.link line { stroke: #667; stroke-width: 2px; }
.tun line { stroke-dasharray: 6 3; }
.segment ellipse { fill: #f0f0f0; stroke: #888; stroke-width: 1.5px; }
.device rect { stroke: #445; stroke-width: 1.5px; }
.host rect { fill: #fff; stroke-dasharray: 5 3; }
";

/// Where a link's label goes: the middle of the line's visible part, between
/// the device's box and the segment's ellipse (or the other box).
fn label_point(from: (f64, f64), to: (f64, f64), to_segment: bool) -> (f64, f64) {
    let (dx, dy) = (to.0 - from.0, to.1 - from.1);
    // The line leaves a box where it crosses the nearer of its edges.
    let box_t = |dx: f64, dy: f64| {
        let tx = if dx == 0.0 {
            f64::MAX
        } else {
            BOX_W / 2.0 / dx.abs()
        };
        let ty = if dy == 0.0 {
            f64::MAX
        } else {
            BOX_H / 2.0 / dy.abs()
        };
        tx.min(ty)
    };
    let t0 = box_t(dx, dy);
    let t1 = if to_segment {
        1.0 - 1.0 / ((dx / SEG_RX).powi(2) + (dy / SEG_RY).powi(2)).sqrt()
    } else {
        1.0 - box_t(dx, dy)
    };
    let t = if t1 > t0 { (t0 + t1) / 2.0 } else { 0.5 };
    (from.0 + dx * t, from.1 + dy * t)
}

fn text_at(x: f64, y: f64, class: &str, s: &str) -> Text {
    Text::new(s)
        .set("x", x)
        .set("y", y)
        .set("class", class)
        .set("text-anchor", "middle")
}

/// The topology as an SVG document.
pub(super) fn svg(t: &Topo) -> String {
    let lay = layout(t);
    let mut doc = Document::new()
        .set("width", lay.width)
        .set("height", lay.height)
        .set("viewBox", (0, 0, lay.width, lay.height))
        .set("id", "lab-graph")
        .set("data-lab", t.name.as_str())
        .add(svg::node::element::Style::new(STYLE))
        .add(
            Text::new(format!("lab {}", t.name))
                .set("x", 16)
                .set("y", 26)
                .set("class", "title"),
        );
    // Legend: the roles present, then kernel host and segment.
    let mut roles: Vec<&str> = Vec::new();
    for d in &t.devices {
        if let Kind::Node(r) = &d.kind {
            if !roles.contains(&r.as_str()) {
                roles.push(r);
            }
        }
    }
    let mut legend = Group::new().set("class", "legend");
    let mut x = 16.0;
    for r in &roles {
        legend = legend
            .add(
                Rectangle::new()
                    .set("x", x)
                    .set("y", 38)
                    .set("width", 14)
                    .set("height", 12)
                    .set("fill", role_colour(r))
                    .set("stroke", "#445"),
            )
            .add(Text::new(*r).set("x", x + 18.0).set("y", 48));
        x += 26.0 + 7.0 * r.len() as f64;
    }
    legend = legend
        .add(
            Rectangle::new()
                .set("x", x)
                .set("y", 38)
                .set("width", 14)
                .set("height", 12)
                .set("fill", "#fff")
                .set("stroke", "#445")
                .set("stroke-dasharray", "3 2"),
        )
        .add(Text::new("kernel host").set("x", x + 18.0).set("y", 48));
    x += 26.0 + 7.0 * 11.0;
    legend = legend
        .add(
            Ellipse::new()
                .set("cx", x + 10.0)
                .set("cy", 44)
                .set("rx", 10)
                .set("ry", 6)
                .set("fill", "#f0f0f0")
                .set("stroke", "#888"),
        )
        .add(Text::new("segment").set("x", x + 24.0).set("y", 48));
    doc = doc.add(legend);

    // Links under everything else.
    for l in &t.links {
        let (x1, y1) = lay.pos[l.device];
        let (x2, y2) = lay.pos[t.vertex_of(l.to)];
        let to = match l.to {
            End::Segment(s) => t.segments[s].0.clone(),
            End::Device(d) => t.devices[d].name.clone(),
        };
        let class = if matches!(l.to, End::Device(_)) {
            "link tun"
        } else {
            "link"
        };
        let (lx, ly) = label_point((x1, y1), (x2, y2), matches!(l.to, End::Segment(_)));
        let mut label = Text::new("")
            .set("class", "label")
            .set("text-anchor", "middle")
            .set("x", lx)
            .set("y", ly - 6.0 * l.addrs.len() as f64 + 3.5);
        label = label.add(TSpan::new(l.iface.as_str()).set("x", lx).set("dy", 0));
        for a in &l.addrs {
            label = label.add(TSpan::new(a.as_str()).set("x", lx).set("dy", 12));
        }
        doc = doc.add(
            Group::new()
                .set("id", l.id.as_str())
                .set("class", class)
                .set("data-device", t.devices[l.device].id())
                .set("data-to", to.as_str())
                .add(Title::new(format!(
                    "{} {} — {} {}",
                    t.devices[l.device].name,
                    l.iface,
                    to,
                    l.addrs.join(" ")
                )))
                .add(
                    Line::new()
                        .set("x1", x1)
                        .set("y1", y1)
                        .set("x2", x2)
                        .set("y2", y2),
                )
                .add(label),
        );
    }
    for (s, (name, bridge)) in t.segments.iter().enumerate() {
        let (x, y) = lay.pos[t.devices.len() + s];
        doc = doc.add(
            Group::new()
                .set("id", format!("seg-{name}"))
                .set("class", "segment")
                .set("data-bridge", bridge.as_str())
                .add(Title::new(format!("segment {name} (bridge {bridge})")))
                .add(
                    Ellipse::new()
                        .set("cx", x)
                        .set("cy", y)
                        .set("rx", SEG_RX)
                        .set("ry", SEG_RY),
                )
                .add(text_at(x, y + 4.0, "seg-name", name)),
        );
    }
    for (d, dev) in t.devices.iter().enumerate() {
        let (x, y) = lay.pos[d];
        let (class, fill, role) = match &dev.kind {
            Kind::Node(r) => (format!("device node role-{r}"), role_colour(r), r.as_str()),
            Kind::Host => ("device host".to_owned(), "#fff", "kernel host"),
        };
        doc = doc.add(
            Group::new()
                .set("id", dev.id())
                .set("class", class)
                .set("data-name", dev.name.as_str())
                .add(Title::new(format!("{} ({role})", dev.name)))
                .add(
                    Rectangle::new()
                        .set("x", x - BOX_W / 2.0)
                        .set("y", y - BOX_H / 2.0)
                        .set("width", BOX_W)
                        .set("height", BOX_H)
                        .set("rx", 6)
                        .set("fill", fill),
                )
                .add(text_at(x, y - 2.0, "name", &dev.name))
                .add(text_at(x, y + 13.0, "role", role)),
        );
    }
    format!("{doc}\n")
}

// ---- DOT ---------------------------------------------------------------------

/// A DOT double-quoted string.
fn q(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                o.push('\\');
                o.push(c);
            }
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// The topology as a Graphviz DOT graph (left to right, same ids as the SVG).
pub(super) fn dot(t: &Topo) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "graph {} {{", q(&t.name));
    o.push_str("  rankdir=LR;\n  node [fontname=\"sans-serif\", fontsize=11];\n");
    o.push_str("  edge [fontname=\"sans-serif\", fontsize=9];\n");
    for (name, bridge) in &t.segments {
        let _ = writeln!(
            o,
            "  {} [label={}, shape=ellipse, style=filled, fillcolor=\"#f0f0f0\", tooltip={}];",
            q(&format!("seg-{name}")),
            q(name),
            q(&format!("bridge {bridge}")),
        );
    }
    for dev in &t.devices {
        let attrs = match &dev.kind {
            Kind::Node(r) => format!(
                "shape=box, style=\"rounded,filled\", fillcolor={}",
                q(role_colour(r))
            ),
            Kind::Host => "shape=box, style=\"rounded,dashed\"".to_owned(),
        };
        let role = match &dev.kind {
            Kind::Node(r) => r.as_str(),
            Kind::Host => "kernel host",
        };
        let _ = writeln!(
            o,
            "  {} [label={}, {attrs}];",
            q(&dev.id()),
            q(&format!("{}\n{role}", dev.name))
        );
    }
    for l in &t.links {
        let to = match l.to {
            End::Segment(s) => format!("seg-{}", t.segments[s].0),
            End::Device(d) => t.devices[d].id(),
        };
        let mut label = l.iface.clone();
        for a in &l.addrs {
            label.push('\n');
            label.push_str(a);
        }
        let style = if matches!(l.to, End::Device(_)) {
            ", style=dashed"
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "  {} -- {} [id={}, label={}{style}];",
            q(&t.devices[l.device].id()),
            q(&to),
            q(&l.id),
            q(&label)
        );
    }
    o.push_str("}\n");
    o
}

/// Element ids by kind, for the live view's JSON: device name → id.
pub(super) fn device_ids(t: &Topo) -> BTreeMap<String, String> {
    t.devices.iter().map(|d| (d.name.clone(), d.id())).collect()
}

#[cfg(test)]
mod test {
    use super::*;

    fn default_topo() -> Topo {
        Topo::of(&read_lab(None).unwrap().0)
    }

    #[test]
    fn the_default_lab_has_every_node_host_segment_and_port() {
        let lab = read_lab(None).unwrap().0;
        let t = Topo::of(&lab);
        assert_eq!(t.devices.len(), lab.nodes.len() + lab.hosts.len());
        assert_eq!(t.segments.len(), lab.segments.len());
        let ports: usize = lab.nodes.iter().map(|n| n.ports.len()).sum::<usize>()
            + lab.hosts.iter().map(|h| h.ifaces.len()).sum::<usize>();
        assert_eq!(t.links.len(), ports);
        assert!(t.links.iter().any(|l| l.id == "link-client-0"));
        assert!(t.links.iter().any(|l| l.id == "link-f1-2"));
    }

    #[test]
    fn layout_is_layered_deterministic_and_overlap_free() {
        let t = default_topo();
        let a = layout(&t);
        let b = layout(&t);
        assert_eq!(a.pos, b.pos);
        // Every line joins neighbouring columns: devices and segments alternate.
        for l in &t.links {
            let dx = (a.pos[l.device].0 - a.pos[t.vertex_of(l.to)].0).abs();
            assert!((dx - COL_W).abs() < 1e-9, "{} spans {dx}", l.id);
        }
        for i in 0..a.pos.len() {
            for j in i + 1..a.pos.len() {
                assert_ne!(a.pos[i], a.pos[j], "vertices {i} and {j} overlap");
            }
        }
        // A kernel host at one end of the chain is the root (column 0).
        let first = a.pos.iter().map(|p| p.0).fold(f64::MAX, f64::min);
        let roots: Vec<&str> = (0..t.devices.len())
            .filter(|&d| a.pos[d].0 == first)
            .map(|d| t.devices[d].name.as_str())
            .collect();
        assert_eq!(roots, ["sf1"]);
    }

    #[test]
    fn a_shim_tun_is_a_dashed_line_to_its_host() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/labs/rosa-small.toml"
        ))
        .unwrap();
        let lab = super::super::file::parse(&text, "rosa-small.toml").unwrap();
        let t = Topo::of(&lab);
        let tun = t.links.iter().find(|l| l.id == "tun-client").unwrap();
        assert_eq!(t.devices[tun.device].name, "client");
        assert!(matches!(tun.to, End::Device(d) if t.devices[d].name == "cs"));
        let s = svg(&t);
        assert!(s.contains(r#"id="tun-client""#) && s.contains("link tun"));
        assert!(dot(&t).contains("style=dashed"));
    }

    #[test]
    fn dot_quotes_and_escapes() {
        assert_eq!(q(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(q("x\ny"), r#""x\ny""#);
        let d = dot(&default_topo());
        assert!(d.starts_with("graph \"rfc8677\" {"));
        assert!(d.contains("\"node-f1\" -- \"seg-n1\""));
        assert!(d.contains("\"host-client\" -- \"seg-cli\""));
    }
}
