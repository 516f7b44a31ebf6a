// Over 800 lines: the fabric is derived in one pass over the topology (attachments, link IDs, two disjoint NR paths) whose steps share the same tables.
//! The RFC 8677 fabric description, derived from the lab topology.
//!
//! An `nr` node whose `[node.config]` says `fabric = "auto"` gets its
//! `[nr.self_attach]`, `[[nr.attach]]` and `[[nr.link]]` tables from the lab:
//! which segment each `fwd` port, each nSFF's and the NR's fabric port is on,
//! the fwd nodes' `link_ids` (the link ID of the frames a fwd port sends out
//! of that port) and the nSFFs' `nsff_id`. In the same mode an nSFF without
//! `link_in` / `link_out` / `nr_links` and a fwd node without `nr_links` /
//! `nr_path` get those too. Whatever is written by hand is kept and wins;
//! the rest of the model is built around it.
//!
//! Rules (docs/lab.md, "Generated RFC 8677 fabric"):
//!
//! - a segment holds at most two fabric members (fwd ports, nSFF and NR
//!   fabric ports): two fwd ports make the directed links `A → B` (A's port
//!   link ID) and `B → A` (B's); a fwd port and an nSFF / the NR make an
//!   attachment whose `link_in` (fwd → node) is the fwd port's link ID;
//! - an endpoint's `link_out` (node → fwd) is not a fwd key (fwd nodes match
//!   outgoing bits only): an nSFF's own `link_out` is used, else the
//!   smallest link ID no one uses is allocated (the NR first, then nSFFs by
//!   `nsff_id`);
//! - `nr_links` is the endpoint's `link_out`, the fwd links of up to two
//!   link-disjoint paths to the NR's fwd node, OR-ed, and the NR's `link_in`
//!   (see `routes_to_nr`): a frame to the NR travels both, so where the
//!   topology has two such paths one cut fabric link (a segment: both its
//!   directions) does not silence a node's registrations, path requests or
//!   link events. A second path whose union with the first could loop is
//!   not taken.
//!
//! Everything inconsistent or ambiguous is an error naming node, port and
//! line, before anything is created.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use anyhow::{bail, Context as _, Result};

/// A directed link between two fwd nodes: from, to, link ID.
type Link = (String, String, u8);

/// The `[node.config]` key that asks for generation (role `nr` only).
pub(crate) const KEY: &str = "fabric";

/// What the generator needs to know about one `[[node]]`.
pub(crate) struct NodeView<'a> {
    pub(crate) name: &'a str,
    pub(crate) role: &'a str,
    /// `line N` of the node's `name`.
    pub(crate) at: String,
    /// Byte offset of its `[node.config]` in the file, if it has one.
    pub(crate) config_offset: Option<usize>,
    pub(crate) config: Option<&'a toml::Table>,
    /// Each port: its segment and `line N` of its `segment` key.
    pub(crate) ports: Vec<(&'a str, String)>,
}

/// A node whose role section the generator rewrote.
#[derive(Debug, Clone)]
pub(crate) struct Patch {
    /// The role section to write instead of `[node.config]`.
    pub(crate) section: toml::Table,
    /// Comment lines for the node file (what was generated, what was kept).
    pub(crate) notes: Vec<String>,
}

/// A fabric member: one port of one node on a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Member {
    node: usize,
    port: usize,
}

/// Where an endpoint (nSFF or NR) attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Attach {
    at: String,
    link_in: u8,
    link_out: u8,
}

/// `line N` of `key = ...` inside the `[node.config]` that starts at
/// `offset` (a heuristic over the text; falls back to the table's line).
fn key_line(text: &str, offset: Option<usize>, key: &str) -> String {
    let Some(offset) = offset.filter(|&o| o <= text.len()) else {
        return "line ?".into();
    };
    let first = text[..offset].bytes().filter(|&b| b == b'\n').count() + 1;
    for (i, line) in text[offset..].lines().enumerate() {
        let t = line.trim_start();
        if i > 0 && ["[[node]]", "[[host]]", "[[segment]]"].contains(&t.trim_end()) {
            break;
        }
        if let Some(rest) = t.strip_prefix(key) {
            if rest.trim_start().starts_with('=')
                || (key.starts_with('[') && rest.trim().is_empty())
            {
                return format!("line {}", first + i);
            }
        }
    }
    format!("line {first}")
}

/// `line N` of `key = value` inside the `[node.config]` at `offset`.
fn value_line(text: &str, offset: Option<usize>, key: &str, value: u8) -> String {
    let Some(offset) = offset.filter(|&o| o <= text.len()) else {
        return "line ?".into();
    };
    let first = text[..offset].bytes().filter(|&b| b == b'\n').count() + 1;
    for (i, line) in text[offset..].lines().enumerate() {
        let t = line.trim();
        if i > 0 && ["[[node]]", "[[host]]", "[[segment]]"].contains(&t) {
            break;
        }
        if let Some((k, v)) = t.split_once('=') {
            if k.trim() == key && v.trim() == value.to_string() {
                return format!("line {}", first + i);
            }
        }
    }
    key_line(text, Some(offset), key)
}

fn describe(v: &NodeView<'_>, port: usize) -> String {
    let (seg, at) = &v.ports[port];
    format!(
        "{at}: [[node]] {:?} ({}) port #{} (segment {seg:?})",
        v.name,
        v.role,
        port + 1
    )
}

/// Integer key of a role section, range-checked.
fn int_key(text: &str, v: &NodeView<'_>, key: &str, max: i64) -> Result<Option<i64>> {
    let Some(val) = v.config.and_then(|c| c.get(key)) else {
        return Ok(None);
    };
    match val.as_integer() {
        Some(i) if (0..=max).contains(&i) => Ok(Some(i)),
        _ => bail!(
            "{}: [[node]] {:?} [node.config] key `{key}`: {val} is not an integer 0..={max}",
            key_line(text, v.config_offset, key),
            v.name
        ),
    }
}

/// A list of link IDs (`link_ids`, `nr_links`).
fn id_list(text: &str, v: &NodeView<'_>, key: &str) -> Result<Option<Vec<u8>>> {
    let Some(val) = v.config.and_then(|c| c.get(key)) else {
        return Ok(None);
    };
    let bad = || {
        format!(
            "{}: [[node]] {:?} [node.config] key `{key}`: {val} is not a list of link IDs 0..=255",
            key_line(text, v.config_offset, key),
            v.name
        )
    };
    let arr = val.as_array().with_context(bad)?;
    arr.iter()
        .map(|x| {
            x.as_integer()
                .and_then(|i| u8::try_from(i).ok())
                .with_context(bad)
        })
        .collect::<Result<Vec<u8>>>()
        .map(Some)
}

fn ids_value(ids: &[u8]) -> toml::Value {
    toml::Value::Array(ids.iter().map(|&i| i64::from(i).into()).collect())
}

/// Generate the fabric keys. Returns one entry per node: `Some` for the
/// nodes whose role section changed.
pub(crate) fn generate(text: &str, nodes: &[NodeView<'_>]) -> Result<Vec<Option<Patch>>> {
    let mut patches: Vec<Option<Patch>> = vec![None; nodes.len()];

    // Which NR asks for generation; `fabric` never reaches a node file.
    let mut auto: Vec<usize> = Vec::new();
    for (i, v) in nodes.iter().enumerate() {
        let Some(val) = v.config.and_then(|c| c.get(KEY)) else {
            continue;
        };
        let at = || {
            format!(
                "{}: [[node]] {:?} [node.config] key `{KEY}`",
                key_line(text, v.config_offset, KEY),
                v.name
            )
        };
        if v.role != "nr" {
            bail!(
                "{}: only a node of role \"nr\" has a generated fabric (this is {:?})",
                at(),
                v.role
            );
        }
        match val.as_str() {
            Some("auto") => auto.push(i),
            Some("manual") => {}
            _ => bail!("{}: {val} must be \"auto\" or \"manual\"", at()),
        }
        let mut section = v.config.cloned().unwrap_or_default();
        section.remove(KEY);
        patches[i] = Some(Patch {
            section,
            notes: Vec::new(),
        });
    }
    let nr = match auto.as_slice() {
        [] => return Ok(patches),
        [one] => *one,
        [a, b, ..] => bail!(
            "{}: [[node]] {:?}: a second NR with fabric = \"auto\" (the first is {:?}, {}); the \
             nSFFs' and fwd nodes' generated `nr_links` need one NR",
            nodes[*b].at,
            nodes[*b].name,
            nodes[*a].name,
            nodes[*a].at
        ),
    };
    let nr_view = &nodes[nr];
    let nr_cfg = nr_view.config.cloned().unwrap_or_default();

    // Fabric members and the fwd nodes' outgoing link IDs per port.
    let mut link_ids: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
    let mut by_segment: BTreeMap<&str, Vec<Member>> = BTreeMap::new();
    let mut id_owner: BTreeMap<u8, String> = BTreeMap::new();
    for (i, v) in nodes.iter().enumerate() {
        let fabric_port = |key: &str| -> Result<usize> {
            let p = int_key(text, v, key, 63)?.unwrap_or(0) as usize;
            if p >= v.ports.len() {
                bail!(
                    "{}: [[node]] {:?} [node.config] key `{key}`: port {p} does not exist ({} \
                     port(s))",
                    key_line(text, v.config_offset, key),
                    v.name,
                    v.ports.len()
                );
            }
            Ok(p)
        };
        match v.role {
            "fwd" => {
                let ids = id_list(text, v, "link_ids")?.with_context(|| {
                    format!(
                        "{}: [[node]] {:?}: no `link_ids` in [node.config]; NR {:?} generates \
                         its fabric (fabric = \"auto\") from them",
                        v.at, v.name, nr_view.name
                    )
                })?;
                if ids.len() > v.ports.len() {
                    bail!(
                        "{}: [[node]] {:?} [node.config] key `link_ids`: {} entries for {} \
                         [[node.port]]s",
                        key_line(text, v.config_offset, "link_ids"),
                        v.name,
                        ids.len(),
                        v.ports.len()
                    );
                }
                for p in 0..v.ports.len() {
                    let Some(&id) = ids.get(p) else {
                        bail!(
                            "{}: no link ID: `link_ids` ({}) has {} entries; give one per port",
                            describe(v, p),
                            key_line(text, v.config_offset, "link_ids"),
                            ids.len()
                        );
                    };
                    let me = describe(v, p);
                    if let Some(prev) = id_owner.insert(id, me.clone()) {
                        bail!("{me}: link ID {id} is also the link ID of {prev}");
                    }
                    by_segment
                        .entry(v.ports[p].0)
                        .or_default()
                        .push(Member { node: i, port: p });
                }
                link_ids.insert(i, ids);
            }
            "nsff" | "nr" => {
                let p = fabric_port("fabric_port")?;
                by_segment
                    .entry(v.ports[p].0)
                    .or_default()
                    .push(Member { node: i, port: p });
            }
            _ => {}
        }
    }

    // Segments: at most two members; pairs become links or attachments.
    let mut links: Vec<Link> = Vec::new();
    // Each fabric link's opposite direction (the same segment, the same two
    // ports): a cut takes both, and a fwd never sends back out of a port.
    let mut reverse: BTreeMap<u8, u8> = BTreeMap::new();
    // Endpoint node → (its fabric port, the fwd port it sits on, that port's link ID).
    let mut attached: BTreeMap<usize, (usize, Member, u8)> = BTreeMap::new();
    for (segment, members) in &by_segment {
        let list = || {
            members
                .iter()
                .map(|m| describe(&nodes[m.node], m.port))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let is_fwd = |m: &Member| nodes[m.node].role == "fwd";
        let port_id = |m: &Member| link_ids[&m.node][m.port];
        match members.as_slice() {
            [m] if is_fwd(m) => {} // a fwd port toward no fabric member
            [m] => bail!(
                "{}: on the fabric but no fwd node is on this segment (an nSFF or NR attaches to \
                 one fwd port)",
                describe(&nodes[m.node], m.port)
            ),
            [a, b] => match (is_fwd(a), is_fwd(b)) {
                (true, true) => {
                    let (na, nb) = (nodes[a.node].name, nodes[b.node].name);
                    if na == nb {
                        bail!(
                            "segment {segment:?} joins two ports of fwd node {na:?}: {}; a \
                             fabric link joins two fwd nodes",
                            list()
                        );
                    }
                    links.push((na.into(), nb.into(), port_id(a)));
                    links.push((nb.into(), na.into(), port_id(b)));
                    reverse.insert(port_id(a), port_id(b));
                    reverse.insert(port_id(b), port_id(a));
                }
                (true, false) => {
                    attached.insert(b.node, (b.port, *a, port_id(a)));
                }
                (false, true) => {
                    attached.insert(a.node, (a.port, *b, port_id(b)));
                }
                (false, false) => bail!(
                    "segment {segment:?} joins two fabric endpoints with no fwd node between \
                     them: {}",
                    list()
                ),
            },
            _ => bail!(
                "segment {segment:?} has {} fabric members: {}; a fabric segment is \
                 point-to-point (two members: two fwd ports, or a fwd port and an nSFF or NR)",
                members.len(),
                list()
            ),
        }
    }
    links.sort_by_key(|l| l.2);

    // The nSFFs: IDs, explicit link keys checked against their fwd port.
    struct Nsff {
        node: usize,
        id: u8,
        at: String,
        link_in: u8,
        link_out: Option<u8>,
    }
    let mut nsffs: Vec<Nsff> = Vec::new();
    let mut nsff_ids: BTreeMap<u8, usize> = BTreeMap::new();
    for (i, v) in nodes.iter().enumerate().filter(|(_, v)| v.role == "nsff") {
        let id = int_key(text, v, "nsff_id", 254)?.unwrap_or(1) as u8;
        if let Some(prev) = nsff_ids.insert(id, i) {
            bail!(
                "{}: [[node]] {:?} [node.config] key `nsff_id`: nSFF ID {id} is also nSFF {:?}'s \
                 ({})",
                key_line(text, v.config_offset, "nsff_id"),
                v.name,
                nodes[prev].name,
                nodes[prev].at
            );
        }
        let (own_port, fwd, link_in) = attached[&i];
        let fwd_desc = describe(&nodes[fwd.node], fwd.port);
        if let Some(explicit) = int_key(text, v, "link_in", 255)? {
            if explicit != i64::from(link_in) {
                bail!(
                    "{}: [[node]] {:?} [node.config] key `link_in`: {explicit}, but its fabric \
                     port #{} sits on {fwd_desc}, whose link ID (fwd → nSFF) is {link_in}",
                    key_line(text, v.config_offset, "link_in"),
                    v.name,
                    own_port + 1,
                );
            }
        }
        let link_out = int_key(text, v, "link_out", 255)?.map(|x| x as u8);
        if let Some(out) = link_out {
            let me = format!(
                "{}: [[node]] {:?} [node.config] key `link_out`",
                key_line(text, v.config_offset, "link_out"),
                v.name
            );
            if let Some(prev) = id_owner.insert(out, me.clone()) {
                bail!("{me}: link ID {out} (nSFF → fwd) is also the link ID of {prev}");
            }
        }
        nsffs.push(Nsff {
            node: i,
            id,
            at: nodes[fwd.node].name.into(),
            link_in,
            link_out,
        });
    }
    nsffs.sort_by_key(|n| n.id);

    // The NR's own attachment (explicit `self_attach` wins).
    let explicit = |key: &str| nr_cfg.get(key).is_some();
    let nr_attach = if explicit("self_attach") {
        let t = nr_cfg["self_attach"].clone();
        let a: SelfAttach = t.try_into().map_err(|e| {
            anyhow::anyhow!(
                "{}: [[node]] {:?} [node.config.self_attach]: {e}",
                nr_view.at,
                nr_view.name
            )
        })?;
        id_owner
            .entry(a.link_out)
            .or_insert_with(|| format!("[[node]] {:?} [node.config.self_attach]", nr_view.name));
        Some(Attach {
            at: a.at,
            link_in: a.link_in,
            link_out: a.link_out,
        })
    } else {
        None
    };
    for key in ["attach", "link"] {
        for t in nr_cfg
            .get(key)
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(out) = t
                .get("link_out")
                .and_then(toml::Value::as_integer)
                .and_then(|i| u8::try_from(i).ok())
            {
                id_owner.entry(out).or_insert_with(|| {
                    format!("[[node]] {:?} [[node.config.{key}]]", nr_view.name)
                });
            }
        }
    }
    let mut allocate = |what: String| -> Result<u8> {
        let id = (0..=255u8)
            .find(|id| !id_owner.contains_key(id))
            .with_context(|| format!("no free link ID left for {what}"))?;
        id_owner.insert(id, what);
        Ok(id)
    };
    let nr_attach = match nr_attach {
        Some(a) => {
            if let Some(&(_, fwd, link_in)) = attached.get(&nr) {
                let fwd_name = nodes[fwd.node].name;
                if a.at != fwd_name || a.link_in != link_in {
                    bail!(
                        "{}: [[node]] {:?} [node.config.self_attach]: at = {:?}, link_in = {}, \
                         but its fabric port sits on {}, whose link ID is {link_in} (fabric = \
                         \"auto\" checks written tables)",
                        key_line(text, nr_view.config_offset, "[node.config.self_attach]"),
                        nr_view.name,
                        a.at,
                        a.link_in,
                        describe(&nodes[fwd.node], fwd.port)
                    );
                }
            }
            a
        }
        None => {
            let (_, fwd, link_in) = attached.get(&nr).copied().with_context(|| {
                format!(
                    "{}: [[node]] {:?}: fabric = \"auto\" but its fabric port is on no fwd \
                     node's segment",
                    nr_view.at, nr_view.name
                )
            })?;
            Attach {
                at: nodes[fwd.node].name.into(),
                link_in,
                link_out: allocate(format!("NR {:?} (link_out)", nr_view.name))?,
            }
        }
    };
    // Explicit `[[attach]]` rows of the NR must agree with the topology and
    // with the nSFF's own `link_out`; a row's `link_out` is the nSFF's when it
    // has none.
    let mut rows: BTreeMap<u8, Attach> = BTreeMap::new();
    for t in nr_cfg
        .get("attach")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
    {
        let row: Option<(u8, Attach)> = (|| {
            Some((
                u8::try_from(t.get("nsff")?.as_integer()?).ok()?,
                Attach {
                    at: t.get("at")?.as_str()?.to_owned(),
                    link_in: u8::try_from(t.get("link_in")?.as_integer()?).ok()?,
                    link_out: u8::try_from(t.get("link_out")?.as_integer()?).ok()?,
                },
            ))
        })();
        if let Some((id, a)) = row {
            rows.insert(id, a);
        }
    }
    let mut nsff_attach: BTreeMap<u8, Attach> = BTreeMap::new();
    for n in &nsffs {
        let v = &nodes[n.node];
        let row = rows.get(&n.id);
        if row.is_none() && explicit("attach") {
            bail!(
                "{}: [[node]] {:?}: nSFF ID {} has no row in NR {:?}'s written \
                 [[node.config.attach]] ({}); add it or drop the table (fabric = \"auto\" \
                 generates it)",
                v.at,
                v.name,
                n.id,
                nr_view.name,
                key_line(text, nr_view.config_offset, "[[node.config.attach]]")
            );
        }
        if let Some(r) = row {
            let at = format!(
                "{}: [[node]] {:?} [[node.config.attach]] nsff = {}",
                value_line(text, nr_view.config_offset, "nsff", n.id),
                nr_view.name,
                n.id
            );
            if r.at != n.at || r.link_in != n.link_in {
                bail!(
                    "{at}: at = {:?}, link_in = {}, but nSFF {:?} sits on fwd {:?}, whose port \
                     toward it has link ID {} (fabric = \"auto\" checks written tables)",
                    r.at,
                    r.link_in,
                    v.name,
                    n.at,
                    n.link_in
                );
            }
            if let Some(own) = n.link_out.filter(|&o| o != r.link_out) {
                bail!(
                    "{at}: link_out = {}, but nSFF {:?} has link_out = {own} ({})",
                    r.link_out,
                    v.name,
                    key_line(text, v.config_offset, "link_out")
                );
            }
        }
        let link_out = match (n.link_out, row) {
            (Some(o), _) => o,
            (None, Some(r)) => r.link_out,
            (None, None) => allocate(format!("nSFF {:?} (link_out)", v.name))?,
        };
        nsff_attach.insert(
            n.id,
            Attach {
                at: n.at.clone(),
                link_in: n.link_in,
                link_out,
            },
        );
    }

    // The NR's tables: generated where absent, kept where written.
    let mut section = nr_cfg.clone();
    section.remove(KEY);
    let (mut made, mut kept) = (Vec::new(), Vec::new());
    if explicit("self_attach") {
        kept.push("self_attach");
    } else {
        section.insert("self_attach".into(), attach_table(&nr_attach, None).into());
        made.push("self_attach");
    }
    if explicit("attach") {
        kept.push("attach");
    } else {
        let rows = nsff_attach
            .iter()
            .map(|(id, a)| attach_table(a, Some(*id)).into())
            .collect();
        section.insert("attach".into(), toml::Value::Array(rows));
        made.push("attach");
    }
    let effective_links: Vec<Link> = if explicit("link") {
        kept.push("link");
        let mut written: Vec<Link> = nr_cfg["link"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| {
                Some((
                    t.get("from")?.as_str()?.to_owned(),
                    t.get("to")?.as_str()?.to_owned(),
                    u8::try_from(t.get("id")?.as_integer()?).ok()?,
                ))
            })
            .collect();
        written.sort_by_key(|l| l.2);
        if written != links {
            let show = |l: &[Link]| {
                l.iter()
                    .map(|(a, b, id)| format!("{a} -> {b} {id}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            bail!(
                "{}: [[node]] {:?} [[node.config.link]]: the written links ({}) are not the \
                 fabric's ({}, from the fwd nodes' ports and `link_ids`)",
                key_line(text, nr_view.config_offset, "[[node.config.link]]"),
                nr_view.name,
                show(&written),
                show(&links)
            );
        }
        written
    } else {
        let rows = links
            .iter()
            .map(|(from, to, id)| {
                let mut t = toml::Table::new();
                t.insert("from".into(), from.clone().into());
                t.insert("to".into(), to.clone().into());
                t.insert("id".into(), i64::from(*id).into());
                toml::Value::Table(t)
            })
            .collect();
        section.insert("link".into(), toml::Value::Array(rows));
        made.push("link");
        links.clone()
    };
    let mut notes = Vec::new();
    if !made.is_empty() {
        notes.push(format!(
            "[nr] {}: generated by the lab from its topology (fabric = \"auto\")",
            made.join(", ")
        ));
    }
    if !kept.is_empty() {
        notes.push(format!(
            "[nr] {}: as written in the lab file (fabric = \"auto\" keeps explicit tables)",
            kept.join(", ")
        ));
    }
    patches[nr] = Some(Patch { section, notes });

    // nr_links for the nSFFs and fwd nodes that have none.
    // The fwd links of the routes and the NR's `link_in`, and a note on
    // how many paths they are.
    let path_to_nr = |from: &str| -> Option<(Vec<u8>, String)> {
        let routes = routes_to_nr(&effective_links, &reverse, from, &nr_attach.at)?;
        let mut ids = routes.ids();
        ids.push(nr_attach.link_in);
        Some((ids, routes.note(&nr_attach.at)))
    };
    for n in &nsffs {
        let v = &nodes[n.node];
        let a = &nsff_attach[&n.id];
        let mut section = v.config.cloned().unwrap_or_default();
        let mut made = Vec::new();
        let mut route_note = None;
        for (key, val) in [("link_in", a.link_in), ("link_out", a.link_out)] {
            if !section.contains_key(key) {
                section.insert(key.into(), i64::from(val).into());
                made.push(key);
            }
        }
        if !section.contains_key("nr_links") {
            let own_out = section
                .get("link_out")
                .and_then(toml::Value::as_integer)
                .and_then(|i| u8::try_from(i).ok())
                .unwrap_or(a.link_out);
            let (path, note) = path_to_nr(&a.at).with_context(|| {
                format!(
                    "{}: [[node]] {:?}: no fabric path from its fwd node {:?} to the NR's {:?}; \
                     give `nr_links` by hand",
                    v.at, v.name, a.at, nr_attach.at
                )
            })?;
            let mut ids = vec![own_out];
            ids.extend(path);
            section.insert("nr_links".into(), ids_value(&ids));
            made.push("nr_links");
            route_note = Some(format!("[nsff] nr_links: {note}"));
        }
        if !made.is_empty() {
            let mut notes = vec![format!(
                "[nsff] {}: generated by the lab from its topology (NR {:?} has fabric = \
                 \"auto\")",
                made.join(", "),
                nr_view.name
            )];
            notes.extend(route_note);
            patches[n.node] = Some(Patch { section, notes });
        }
    }
    for &i in link_ids.keys() {
        let v = &nodes[i];
        let cfg = v.config.cloned().unwrap_or_default();
        if cfg.contains_key("nr_links") || cfg.contains_key("nr_path") {
            continue;
        }
        let Some((ids, note)) = path_to_nr(v.name) else {
            continue; // a fwd node with no path to the NR reports nothing
        };
        let mut section = cfg;
        section.insert("nr_links".into(), ids_value(&ids));
        patches[i] = Some(Patch {
            section,
            notes: vec![
                format!(
                    "[fwd] nr_links: generated by the lab from its topology (NR {:?} has \
                     fabric = \"auto\")",
                    nr_view.name
                ),
                format!("[fwd] nr_links: {note}"),
            ],
        });
    }
    Ok(patches)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SelfAttach {
    at: String,
    link_in: u8,
    link_out: u8,
}

fn attach_table(a: &Attach, nsff: Option<u8>) -> toml::Table {
    let mut t = toml::Table::new();
    if let Some(id) = nsff {
        t.insert("nsff".into(), i64::from(id).into());
    }
    t.insert("at".into(), a.at.clone().into());
    t.insert("link_in".into(), i64::from(a.link_in).into());
    t.insert("link_out".into(), i64::from(a.link_out).into());
    t
}

/// How a node's frames reach the NR's fwd node: the fwd links of one path,
/// or of two that share no segment, OR-ed into its `nr_links`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Routes {
    /// A shortest path's link IDs, in order (empty: the node is the NR's
    /// fwd node, or an endpoint on it).
    first: Vec<u8>,
    /// A second path using neither direction of any of `first`'s links.
    second: Option<Vec<u8>>,
    /// Copies of each frame that reach the end over the OR of the two (1
    /// with one path; 2 if the paths share no node).
    copies: usize,
}

impl Routes {
    /// The link IDs of both paths, the first's before the second's.
    fn ids(&self) -> Vec<u8> {
        self.first
            .iter()
            .chain(self.second.iter().flatten())
            .copied()
            .collect()
    }

    /// For the node file: how many paths, and which links.
    fn note(&self, to: &str) -> String {
        let show = |p: &[u8]| p.iter().map(u8::to_string).collect::<Vec<_>>().join(", ");
        match &self.second {
            _ if self.first.is_empty() => format!("on the NR's fwd node {to:?}"),
            Some(second) => format!(
                "two link-disjoint paths to the NR's fwd node {to:?} (links {} | {}): the NR \
                 gets each message {} times",
                show(&self.first),
                show(second),
                self.copies
            ),
            None => format!(
                "one path to the NR's fwd node {to:?} (links {}): the topology has no second \
                 one that shares no link with it and loops nowhere",
                show(&self.first)
            ),
        }
    }
}

/// The routes from fwd node `from` to fwd node `to` over directed `links`
/// (`reverse`: each link's opposite direction, on the same segment).
///
/// The first is [`shortest`]. The second is the shortest path that uses
/// neither direction of any of the first's links, so one cut segment
/// leaves a path (both directions of a segment fail together). OR-ed into
/// one pathID the two multicast (SPEC §1.1: a fwd sends a frame out of
/// every port but the one it came in on whose link bit is set), so a copy
/// may follow any walk over the union of their links, not only the two
/// paths. Two link-disjoint paths can cross: if the second visits two nodes
/// of the first in the opposite order, the union holds a cycle, and copies
/// circle until the hop limit (64) ends them, each round sending the NR
/// another copy. So the second path is kept only if [`copies`] finds no
/// cycle in the union; else the shortest path avoiding the first's links
/// *and its inner nodes* is taken, whose union cannot cycle (the start has
/// no incoming link in it, the end no outgoing one, and every other node
/// is on exactly one path with one outgoing link); else there is one path.
/// Deterministic: every search tries links in increasing ID order.
fn routes_to_nr(
    links: &[Link],
    reverse: &BTreeMap<u8, u8>,
    from: &str,
    to: &str,
) -> Option<Routes> {
    let first = shortest(links, from, to)?;
    if first.is_empty() {
        return Some(Routes {
            first,
            second: None,
            copies: 1,
        });
    }
    let mut avoid: BTreeSet<u8> = first.iter().copied().collect();
    avoid.extend(first.iter().filter_map(|id| reverse.get(id)));
    let inner: BTreeSet<&str> = links
        .iter()
        .filter(|(_, b, id)| first.contains(id) && b != to)
        .map(|(_, b, _)| b.as_str())
        .collect();
    let with_copies = |second: Vec<u8>| {
        let union: BTreeSet<u8> = first.iter().chain(&second).copied().collect();
        Some((second, copies(links, reverse, &union, from, to)?))
    };
    let second = shortest_avoiding(links, from, to, &avoid, &BTreeSet::new())
        .and_then(with_copies)
        .or_else(|| shortest_avoiding(links, from, to, &avoid, &inner).and_then(with_copies));
    let (second, copies) = match second {
        Some((path, n)) => (Some(path), n),
        None => (None, 1),
    };
    Some(Routes {
        first,
        second,
        copies,
    })
}

/// How many copies of a frame that fwd node `from` sends over the links
/// `ids` reach fwd node `to`, forwarding as a fwd does (out of every port
/// but the ingress one whose link is in `ids`); `None` if a copy can go
/// round a cycle (then only the hop limit ends it).
fn copies(
    links: &[Link],
    reverse: &BTreeMap<u8, u8>,
    ids: &BTreeSet<u8>,
    from: &str,
    to: &str,
) -> Option<usize> {
    /// A copy at `node`, having come in over link `via`.
    type State<'a> = (&'a str, Option<u8>);
    fn walk<'a>(
        out: &BTreeMap<&'a str, Vec<(u8, &'a str)>>,
        reverse: &BTreeMap<u8, u8>,
        to: &str,
        at: State<'a>,
        on_stack: &mut BTreeSet<State<'a>>,
        done: &mut BTreeMap<State<'a>, usize>,
    ) -> Option<usize> {
        if let Some(&n) = done.get(&at) {
            return Some(n);
        }
        if !on_stack.insert(at) {
            return None;
        }
        let (node, via) = at;
        let ingress = via.and_then(|l| reverse.get(&l).copied());
        let mut n = usize::from(node == to);
        for &(id, next) in out.get(node).into_iter().flatten() {
            if Some(id) != ingress {
                n += walk(out, reverse, to, (next, Some(id)), on_stack, done)?;
            }
        }
        on_stack.remove(&at);
        done.insert(at, n);
        Some(n)
    }
    let mut out: BTreeMap<&str, Vec<(u8, &str)>> = BTreeMap::new();
    for (a, b, id) in links.iter().filter(|l| ids.contains(&l.2)) {
        out.entry(a.as_str()).or_default().push((*id, b.as_str()));
    }
    walk(
        &out,
        reverse,
        to,
        (from, None),
        &mut BTreeSet::new(),
        &mut BTreeMap::new(),
    )
}

/// Link IDs of a shortest path `from → to` over directed `links`
/// (breadth first, each node's links tried in increasing ID order: the
/// NR's own choice, `nodes/nr/src/fabric.rs`).
fn shortest(links: &[Link], from: &str, to: &str) -> Option<Vec<u8>> {
    shortest_avoiding(links, from, to, &BTreeSet::new(), &BTreeSet::new())
}

/// [`shortest`] without the links `avoid_links` and without passing
/// through the nodes `avoid_nodes`.
fn shortest_avoiding(
    links: &[Link],
    from: &str,
    to: &str,
    avoid_links: &BTreeSet<u8>,
    avoid_nodes: &BTreeSet<&str>,
) -> Option<Vec<u8>> {
    let mut out: BTreeMap<&str, Vec<(u8, &str)>> = BTreeMap::new();
    for (a, b, id) in links {
        if !avoid_links.contains(id) && !avoid_nodes.contains(b.as_str()) {
            out.entry(a).or_default().push((*id, b));
        }
    }
    for v in out.values_mut() {
        v.sort();
    }
    let mut prev: BTreeMap<&str, (&str, u8)> = BTreeMap::new();
    let mut seen: BTreeSet<&str> = BTreeSet::from([from]);
    let mut queue = VecDeque::from([from]);
    while let Some(n) = queue.pop_front() {
        if n == to {
            let mut ids = Vec::new();
            let mut cur = to;
            while cur != from {
                let (p, id) = prev[cur];
                ids.push(id);
                cur = p;
            }
            ids.reverse();
            return Some(ids);
        }
        for &(id, next) in out.get(n).into_iter().flatten() {
            if seen.insert(next) {
                prev.insert(next, (n, id));
                queue.push_back(next);
            }
        }
    }
    None
}

#[cfg(test)]
mod test {
    use std::collections::{BTreeMap, BTreeSet};

    use super::super::file::{parse, Lab};
    use super::{copies, routes_to_nr, Link};

    const RFC8677: &str = include_str!("../../examples/labs/rfc8677.toml");

    /// The NR tables `examples/labs/rfc8677.toml` had written by hand
    /// before it switched to `fabric = "auto"`, with the links of the
    /// detour switch f3 it got later.
    const HAND_NR: &str = r#"
[self_attach]
at = "f1"
link_in = 0
link_out = 1
[[attach]]
nsff = 1
at = "f1"
link_in = 2
link_out = 3
[[attach]]
nsff = 2
at = "f2"
link_in = 4
link_out = 5
[[link]]
from = "f1"
to = "f2"
id = 10
[[link]]
from = "f2"
to = "f1"
id = 11
[[link]]
from = "f1"
to = "f3"
id = 12
[[link]]
from = "f3"
to = "f1"
id = 13
[[link]]
from = "f3"
to = "f2"
id = 14
[[link]]
from = "f2"
to = "f3"
id = 15
"#;

    /// The role section of node `node` in the generated node file.
    fn section(lab: &Lab, node: &str) -> toml::Table {
        let n = lab.nodes.iter().find(|n| n.name == node).unwrap();
        let mut root: toml::Table = toml::from_str(&n.config_text).unwrap();
        match root.remove(&n.role) {
            Some(toml::Value::Table(t)) => t,
            other => panic!("{node}: no role section: {other:?}"),
        }
    }

    fn err(text: &str) -> String {
        format!("{:#}", parse(text, "x.toml").unwrap_err())
    }

    /// 1-based line of the first line of `text` equal to `line` after
    /// `after` (a unique anchor).
    fn line_no(text: &str, after: &str, line: &str) -> usize {
        let start = text.find(after).unwrap();
        let off = start + text[start..].find(line).unwrap();
        text[..off].lines().count() + 1
    }

    fn ids(t: &toml::Table, key: &str) -> Vec<i64> {
        t[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_integer().unwrap())
            .collect()
    }

    #[test]
    fn the_shipped_example_generates_the_hand_written_tables() {
        assert!(RFC8677.contains("fabric = \"auto\""));
        let written: String = RFC8677
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        for key in ["self_attach", "attach", "link_in", "link_out", "nr_links"] {
            assert!(!written.contains(key), "the example still writes {key}");
        }
        let lab = parse(RFC8677, "rfc8677.toml").unwrap();
        let mut nr = section(&lab, "nr");
        assert!(!nr.contains_key("fabric"), "the lab key reaches the node");
        let want: toml::Table = toml::from_str(HAND_NR).unwrap();
        for key in ["self_attach", "attach", "link"] {
            assert_eq!(nr.remove(key), want.get(key).cloned(), "[nr] {key}");
        }
        let nr_file = &lab.nodes.iter().find(|n| n.name == "nr").unwrap();
        assert!(
            nr_file
                .config_text
                .contains("# [nr] self_attach, attach, link: generated"),
            "{}",
            nr_file.config_text
        );
        // The nSFFs' and fwds' keys, as the file had them by hand.
        let n1 = section(&lab, "nsff1");
        assert_eq!((&n1["link_in"], &n1["link_out"]), (&2.into(), &3.into()));
        assert_eq!(ids(&n1, "nr_links"), [3, 0]);
        let n2 = section(&lab, "nsff2");
        assert_eq!((&n2["link_in"], &n2["link_out"]), (&4.into(), &5.into()));
        assert_eq!(ids(&n2, "nr_links"), [5, 11, 15, 13, 0]);
        assert_eq!(ids(&section(&lab, "f1"), "nr_links"), [0]);
        assert_eq!(ids(&section(&lab, "f2"), "nr_links"), [11, 15, 13, 0]);
        assert_eq!(ids(&section(&lab, "f3"), "nr_links"), [13, 14, 11, 0]);
        // Nodes off the fabric are untouched.
        assert_eq!(section(&lab, "sf2")["instance"].as_str(), Some("sf2"));
    }

    #[test]
    fn hand_written_keys_are_kept_and_win() {
        // The old file: everything by hand, plus fabric = "auto".
        let explicit = RFC8677.replace(
            "fabric = \"auto\"\n",
            &format!(
                "fabric = \"auto\"\n{}",
                HAND_NR
                    .replace("[self_attach]", "[node.config.self_attach]")
                    .replace("[[attach]]", "[[node.config.attach]]")
                    .replace("[[link]]", "[[node.config.link]]")
                    // a different (free) NR link_out, to see who wins
                    .replace("link_in = 0\nlink_out = 1", "link_in = 0\nlink_out = 7")
            ),
        );
        let lab = parse(&explicit, "x.toml").unwrap();
        let nr = section(&lab, "nr");
        assert_eq!(nr["self_attach"]["link_out"].as_integer(), Some(7));
        let text = &lab
            .nodes
            .iter()
            .find(|n| n.name == "nr")
            .unwrap()
            .config_text;
        assert!(text.contains("as written in the lab file"), "{text}");
        // The nSFFs' generated keys follow the NR's written rows.
        let n2 = section(&lab, "nsff2");
        assert_eq!(n2["link_out"].as_integer(), Some(5));
        assert_eq!(ids(&n2, "nr_links"), [5, 11, 15, 13, 0]);
        // Written tables are checked against the topology.
        let bad = explicit.replace("nsff_id = 2\n", "nsff_id = 2\nlink_out = 9\n");
        let e = err(&bad);
        let l = line_no(&bad, "fabric = \"auto\"", "nsff = 2");
        assert!(
            e.contains(&format!(
                "line {l}: [[node]] \"nr\" [[node.config.attach]] nsff = 2"
            )) && e.contains("\"nsff2\" has link_out = 9"),
            "{e}"
        );
        let e = err(&explicit.replace("nsff = 2\nat = \"f2\"", "nsff = 3\nat = \"f2\""));
        assert!(
            e.contains("\"nsff2\"") && e.contains("nSFF ID 2 has no row"),
            "{e}"
        );
        let e = err(&explicit.replace("link_in = 4\nlink_out = 5", "link_in = 6\nlink_out = 5"));
        assert!(e.contains("nsff = 2") && e.contains("link ID 4"), "{e}");
        let e = err(&explicit.replace("to = \"f1\"\nid = 11", "to = \"f1\"\nid = 12"));
        assert!(
            e.contains("[[node.config.link]]")
                && e.contains("f2 -> f1 12")
                && e.contains("f2 -> f1 11"),
            "{e}"
        );
        let e = err(&explicit.replace("at = \"f1\"\nlink_in = 0", "at = \"f2\"\nlink_in = 0"));
        assert!(
            e.contains("[node.config.self_attach]") && e.contains("\"f1\" (fwd) port #2"),
            "{e}"
        );
        // fabric = "manual" (or no key): nothing generated, the NR needs its tables.
        let manual = RFC8677.replace("fabric = \"auto\"", "fabric = \"manual\"");
        let e = err(&manual);
        assert!(e.contains("self_attach"), "{e}");
        let e = err(&RFC8677.replace("fabric = \"auto\"\n", ""));
        assert!(e.contains("self_attach"), "{e}");
        // Hand-written explicit keys of an nSFF and a fwd are kept.
        let lab = parse(
            &RFC8677
                .replace("nsff_id = 1\n", "nsff_id = 1\nnr_links = [3, 10, 11, 0]\n")
                .replace(
                    "link_ids = [11, 4, 15]\n",
                    "link_ids = [11, 4, 15]\nnr_links = [11, 10, 0]\n",
                ),
            "x.toml",
        )
        .unwrap();
        assert_eq!(ids(&section(&lab, "nsff1"), "nr_links"), [3, 10, 11, 0]);
        assert_eq!(ids(&section(&lab, "f2"), "nr_links"), [11, 10, 0]);
    }

    #[test]
    fn a_segment_with_three_fabric_members_is_refused() {
        let text = RFC8677.replace(
            "[[node]]\nname = \"nr\"",
            "[[node]]\nname = \"f4\"\nrole = \"fwd\"\n[[node.port]]\nsegment = \"fab\"\n\
             [node.config]\nnode_id = 4\nlink_ids = [20]\n\n[[node]]\nname = \"nr\"",
        );
        let e = err(&text);
        let l = line_no(&text, "name = \"f4\"", "segment = \"fab\"");
        assert!(
            e.contains("3 fabric members")
                && e.contains("\"f4\" (fwd) port #1 (segment \"fab\")")
                && e.contains(&format!("line {l}"))
                && e.contains("\"f1\" (fwd) port #3"),
            "{e}"
        );
    }

    #[test]
    fn a_fwd_port_without_a_link_id_is_refused() {
        let text = RFC8677.replace("link_ids = [11, 4, 15]", "link_ids = [11, 4]");
        let e = err(&text);
        let l = line_no(&text, "name = \"f2\"", "segment = \"fab23\"");
        assert!(
            e.contains(&format!(
                "line {l}: [[node]] \"f2\" (fwd) port #3 (segment \"fab23\")"
            )) && e.contains("no link ID"),
            "{e}"
        );
        let e = err(&RFC8677.replace("link_ids = [11, 4, 15]\n", ""));
        assert!(e.contains("\"f2\"") && e.contains("no `link_ids`"), "{e}");
        let e = err(&RFC8677.replace("link_ids = [11, 4, 15]", "link_ids = [11, 4, 15, 6]"));
        assert!(e.contains("4 entries for 3"), "{e}");
    }

    #[test]
    fn an_nsff_that_disagrees_with_its_fwd_port_is_refused() {
        let text = RFC8677.replace("nsff_id = 1\n", "nsff_id = 1\nlink_in = 7\n");
        let e = err(&text);
        let l = line_no(&text, "nsff_id = 1", "link_in = 7");
        assert!(
            e.contains(&format!("line {l}: [[node]] \"nsff1\""))
                && e.contains("`link_in`: 7")
                && e.contains("port #1")
                && e.contains("\"f1\" (fwd) port #1 (segment \"n1\")")
                && e.contains("is 2"),
            "{e}"
        );
        // A link_out that is another link's ID.
        let text = RFC8677.replace("nsff_id = 2\n", "nsff_id = 2\nlink_out = 10\n");
        let e = err(&text);
        let l = line_no(&text, "nsff_id = 2", "link_out = 10");
        assert!(
            e.contains(&format!("line {l}: [[node]] \"nsff2\""))
                && e.contains("link ID 10")
                && e.contains("\"f1\" (fwd) port #3"),
            "{e}"
        );
        // The same nSFF ID twice.
        let e = err(&RFC8677.replace("nsff_id = 2\n", "nsff_id = 1\n"));
        assert!(e.contains("\"nsff2\"") && e.contains("nSFF ID 1"), "{e}");
    }

    #[test]
    fn endpoints_off_the_fabric_are_refused() {
        // nSFF1's fabric port on a segment with no fwd node.
        let e = err(&RFC8677.replace("sf_port = 2\n", "sf_port = 2\nfabric_port = 1\n"));
        assert!(
            e.contains("\"nsff1\" (nsff) port #2 (segment \"cli\")") && e.contains("no fwd node"),
            "{e}"
        );
        // Two endpoints on one segment, no fwd between them.
        let e = err(&RFC8677
            .replace(
                "[[node.port]]\nsegment = \"n2\"\n[[node.port]]\nsegment = \"sfs\"",
                "[[node.port]]\nsegment = \"x\"\n[[node.port]]\nsegment = \"sfs\"",
            )
            .replace(
                "[[segment]]\nname = \"s1\"",
                "[[segment]]\nname = \"s1\"\n[[segment]]\nname = \"x\"",
            )
            .replace(
                "[[node]]\nname = \"nr\"\nrole = \"nr\"\n[[node.port]]\nsegment = \"nrs\"",
                "[[node]]\nname = \"nr\"\nrole = \"nr\"\n[[node.port]]\nsegment = \"x\"",
            ));
        assert!(
            e.contains("two fabric endpoints") && e.contains("\"nr\"") && e.contains("\"nsff2\""),
            "{e}"
        );
        // A fabric port that does not exist.
        let e = err(&RFC8677.replace("nsff_id = 2\n", "nsff_id = 2\nfabric_port = 5\n"));
        assert!(
            e.contains("\"nsff2\"") && e.contains("`fabric_port`"),
            "{e}"
        );
    }

    /// A lab of fwd nodes `f1`, `f2`, ... joined by `edges` (a, b, link ID
    /// a → b, link ID b → a), the NR on `nr_at`, nSFF 1 on `nsff_at`. Their
    /// ports toward the NR and the nSFF send link IDs 100 and 101; the
    /// NR's and the nSFF's `link_out` are allocated: 0 and 1.
    fn fabric_lab(edges: &[(u8, u8, u8, u8)], nr_at: u8, nsff_at: u8) -> String {
        let mut fwds: BTreeMap<u8, Vec<(String, u8)>> = BTreeMap::new();
        for &(a, b, ab, ba) in edges {
            fwds.entry(a).or_default().push((format!("f{a}f{b}"), ab));
            fwds.entry(b).or_default().push((format!("f{a}f{b}"), ba));
        }
        fwds.entry(nr_at).or_default().push(("nrs".into(), 100));
        fwds.entry(nsff_at).or_default().push(("n1".into(), 101));
        let mut segments: BTreeSet<String> = ["nrs", "n1", "sfs"].map(String::from).into();
        let mut text = String::from("name = \"gen\"\n");
        let mut nodes = String::new();
        for (f, ports) in &fwds {
            nodes += &format!("[[node]]\nname = \"f{f}\"\nrole = \"fwd\"\n");
            for (seg, _) in ports {
                segments.insert(seg.clone());
                nodes += &format!("[[node.port]]\nsegment = \"{seg}\"\n");
            }
            let ids: Vec<String> = ports.iter().map(|p| p.1.to_string()).collect();
            nodes += &format!(
                "[node.config]\nnode_id = {f}\nlink_ids = [{}]\n\n",
                ids.join(", ")
            );
        }
        for seg in &segments {
            text += &format!("[[segment]]\nname = \"{seg}\"\n");
        }
        text + &nodes
            + "[[node]]\nname = \"nr\"\nrole = \"nr\"\n[[node.port]]\nsegment = \"nrs\"\n\
               addrs = [\"10.0.9.1/24\"]\n[node.config]\nrest_port = 0\nfabric = \"auto\"\n\n\
               [[node]]\nname = \"nsff1\"\nrole = \"nsff\"\n[[node.port]]\nsegment = \"n1\"\n\
               [[node.port]]\nsegment = \"sfs\"\naddrs = [\"10.0.2.1/24\"]\n[node.config]\n\
               nsff_id = 1\n[[node.config.sf]]\nfqdn = \"www.example.com\"\naddr = \
               \"10.0.2.10\"\n"
    }

    /// The generated fabric of `lab`: its directed links (from the NR's
    /// `[[link]]` rows) and each link's opposite direction.
    fn generated_links(lab: &Lab) -> (Vec<Link>, BTreeMap<u8, u8>) {
        let nr = section(lab, "nr");
        let links: Vec<Link> = nr["link"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["from"].as_str().unwrap().to_owned(),
                    l["to"].as_str().unwrap().to_owned(),
                    l["id"].as_integer().unwrap() as u8,
                )
            })
            .collect();
        let reverse = links
            .iter()
            .map(|(a, b, id)| {
                let back = links.iter().find(|(c, d, _)| c == b && d == a).unwrap();
                (*id, back.2)
            })
            .collect();
        (links, reverse)
    }

    /// Copies of a frame from fwd node `from` over `node`'s generated
    /// `nr_links` that reach the NR's fwd node `to`; `None`: a loop.
    fn copies_of(lab: &Lab, node: &str, from: &str, to: &str) -> Option<usize> {
        let (links, reverse) = generated_links(lab);
        let ids: BTreeSet<u8> = ids(&section(lab, node), "nr_links")
            .into_iter()
            .map(|i| i as u8)
            .collect();
        copies(&links, &reverse, &ids, from, to)
    }

    fn note_of(lab: &Lab, node: &str) -> String {
        let n = lab.nodes.iter().find(|n| n.name == node).unwrap();
        n.config_text
            .lines()
            .find(|l| l.contains("] nr_links: ") && !l.contains("generated by"))
            .unwrap_or_else(|| panic!("{node}: no route note: {}", n.config_text))
            .to_owned()
    }

    #[test]
    fn a_triangle_gives_two_link_disjoint_paths_or_ed() {
        // The shipped example: f1 ─ f2 direct, f1 ─ f3 ─ f2; the NR on f1.
        let lab = parse(RFC8677, "rfc8677.toml").unwrap();
        // nSFF2 on f2: link_out 5, f2 → f1 (11), then f2 → f3 → f1 (15,
        // 13), the NR's link_in 0.
        assert_eq!(ids(&section(&lab, "nsff2"), "nr_links"), [5, 11, 15, 13, 0]);
        assert_eq!(ids(&section(&lab, "f2"), "nr_links"), [11, 15, 13, 0]);
        assert_eq!(ids(&section(&lab, "f3"), "nr_links"), [13, 14, 11, 0]);
        // On the NR's fwd node: nothing to route around.
        assert_eq!(ids(&section(&lab, "nsff1"), "nr_links"), [3, 0]);
        assert_eq!(ids(&section(&lab, "f1"), "nr_links"), [0]);
        // Forwarded as a fwd does, each message reaches f1 exactly twice.
        assert_eq!(copies_of(&lab, "nsff2", "f2", "f1"), Some(2));
        assert_eq!(copies_of(&lab, "f3", "f3", "f1"), Some(2));
        assert!(note_of(&lab, "nsff2").contains("two link-disjoint paths"));
        assert!(note_of(&lab, "nsff2").contains("each message 2 times"));
        assert!(note_of(&lab, "f3").contains("(links 13 | 14, 11)"));
        assert!(note_of(&lab, "f1").contains("on the NR's fwd node"));
        // Cut f1 ─ f2 (both directions): nSFF2's second path still holds.
        let left: Vec<u8> = [5, 11, 15, 13, 0]
            .into_iter()
            .filter(|l| ![10, 11].contains(l))
            .collect();
        let (links, reverse) = generated_links(&lab);
        let cut = BTreeSet::from_iter(left.iter().copied());
        assert_eq!(copies(&links, &reverse, &cut, "f2", "f1"), Some(1));
    }

    #[test]
    fn a_line_gives_one_path() {
        // f3 ─ f2 ─ f1, the NR on f1, the nSFF on f3: no second path.
        let lab = parse(
            &fabric_lab(&[(1, 2, 10, 11), (2, 3, 12, 13)], 1, 3),
            "x.toml",
        )
        .unwrap();
        assert_eq!(ids(&section(&lab, "nsff1"), "nr_links"), [1, 13, 11, 100]);
        assert_eq!(ids(&section(&lab, "f2"), "nr_links"), [11, 100]);
        assert_eq!(copies_of(&lab, "nsff1", "f3", "f1"), Some(1));
        assert!(
            note_of(&lab, "nsff1").contains("one path"),
            "{}",
            note_of(&lab, "nsff1")
        );
    }

    #[test]
    fn a_square_gives_two_paths_and_no_loop() {
        //   f1 ──10/11── f2
        //   │             │
        // 16/17         12/13
        //   │             │
        //   f4 ──15/14── f3      the NR on f1, the nSFF on f3
        let square = [
            (1, 2, 10, 11),
            (2, 3, 12, 13),
            (3, 4, 14, 15),
            (4, 1, 16, 17),
        ];
        let lab = parse(&fabric_lab(&square, 1, 3), "x.toml").unwrap();
        // Shortest f3 → f2 → f1 (13, 11: f3's links tried by ID), then the
        // other side f3 → f4 → f1 (14, 16).
        assert_eq!(
            ids(&section(&lab, "nsff1"), "nr_links"),
            [1, 13, 11, 14, 16, 100]
        );
        assert_eq!(ids(&section(&lab, "f2"), "nr_links"), [11, 12, 14, 16, 100]);
        assert_eq!(ids(&section(&lab, "f4"), "nr_links"), [16, 15, 13, 11, 100]);
        // Every node's frames reach f1 exactly twice: no walk over the
        // OR-ed links loops (the hop limit never has to end one).
        for (node, at) in [("nsff1", "f3"), ("f2", "f2"), ("f3", "f3"), ("f4", "f4")] {
            assert_eq!(copies_of(&lab, node, at, "f1"), Some(2), "{node}");
        }
    }

    #[test]
    fn a_second_path_that_would_loop_is_not_taken() {
        // A kite: the shortest a → u → v → b, and the only path avoiding
        // its links a → c → v → d → u → e → b visits v before u. OR-ed,
        // u → v → d → u is a cycle: a fwd at u sends a copy from d on to v
        // (not its ingress port), v on to d, and so on until the hop limit.
        let mut links = Vec::new();
        let mut reverse = BTreeMap::new();
        for (a, b, ab, ba) in [
            ("a", "u", 1, 2),
            ("u", "v", 3, 4),
            ("v", "b", 5, 6),
            ("a", "c", 7, 8),
            ("c", "v", 9, 10),
            ("v", "d", 11, 12),
            ("d", "u", 13, 14),
            ("u", "e", 15, 16),
            ("e", "b", 17, 18),
        ] {
            links.push((a.to_owned(), b.to_owned(), ab));
            links.push((b.to_owned(), a.to_owned(), ba));
            reverse.insert(ab, ba);
            reverse.insert(ba, ab);
        }
        links.sort_by_key(|l| l.2);
        let crossing = BTreeSet::from([1, 3, 5, 7, 9, 11, 13, 15, 17]);
        assert_eq!(copies(&links, &reverse, &crossing, "a", "b"), None);
        // So the generator keeps the shortest path alone (no second path
        // avoids its links and its inner nodes u, v).
        let r = routes_to_nr(&links, &reverse, "a", "b").unwrap();
        assert_eq!(
            (r.first.as_slice(), r.second.as_ref()),
            (&[1, 3, 5][..], None)
        );
        // A bow tie (a ⇉ x ⇉ b through p, q and r, s): link-disjoint paths
        // that share x do not loop; x multiplies the copies (2 × 2).
        let mut links = Vec::new();
        let mut reverse = BTreeMap::new();
        for (a, b, ab, ba) in [
            ("a", "p", 1, 2),
            ("p", "x", 3, 4),
            ("a", "q", 5, 6),
            ("q", "x", 7, 8),
            ("x", "r", 9, 10),
            ("r", "b", 11, 12),
            ("x", "s", 13, 14),
            ("s", "b", 15, 16),
        ] {
            links.push((a.to_owned(), b.to_owned(), ab));
            links.push((b.to_owned(), a.to_owned(), ba));
            reverse.insert(ab, ba);
            reverse.insert(ba, ab);
        }
        links.sort_by_key(|l| l.2);
        let r = routes_to_nr(&links, &reverse, "a", "b").unwrap();
        assert_eq!(r.ids(), [1, 3, 9, 11, 5, 7, 13, 15]);
        assert_eq!(r.copies, 4);
        assert!(
            r.note("b").contains("each message 4 times"),
            "{}",
            r.note("b")
        );
        let union = r.ids().into_iter().collect();
        assert_eq!(copies(&links, &reverse, &union, "a", "b"), Some(4));
    }

    #[test]
    fn the_fabric_key_is_checked() {
        let e = err(&RFC8677.replace("fabric = \"auto\"", "fabric = \"yes\""));
        assert!(
            e.contains("`fabric`") && e.contains("\"auto\" or \"manual\""),
            "{e}"
        );
        let e = err(&RFC8677.replace("node_id = 2\n", "node_id = 2\nfabric = \"auto\"\n"));
        assert!(e.contains("\"f2\"") && e.contains("role \"nr\""), "{e}");
    }
}
