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
//! - `nr_links` is the endpoint's `link_out`, the fwd links of the shortest
//!   path to the NR's fwd node (breadth first, links tried in increasing ID
//!   order, as the NR does) and the NR's `link_in`.
//!
//! Everything inconsistent or ambiguous is an error naming node, port and
//! line, before anything is created.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use anyhow::{bail, Context as _, Result};

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
    let mut links: Vec<(String, String, u8)> = Vec::new();
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
    let effective_links: Vec<(String, String, u8)> = if explicit("link") {
        kept.push("link");
        let mut written: Vec<(String, String, u8)> = nr_cfg["link"]
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
            let show = |l: &[(String, String, u8)]| {
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
    let path_to_nr = |from: &str| -> Option<Vec<u8>> {
        let mut ids = shortest(&effective_links, from, &nr_attach.at)?;
        ids.push(nr_attach.link_in);
        Some(ids)
    };
    for n in &nsffs {
        let v = &nodes[n.node];
        let a = &nsff_attach[&n.id];
        let mut section = v.config.cloned().unwrap_or_default();
        let mut made = Vec::new();
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
            let mut ids = vec![own_out];
            ids.extend(path_to_nr(&a.at).with_context(|| {
                format!(
                    "{}: [[node]] {:?}: no fabric path from its fwd node {:?} to the NR's {:?}; \
                     give `nr_links` by hand",
                    v.at, v.name, a.at, nr_attach.at
                )
            })?);
            section.insert("nr_links".into(), ids_value(&ids));
            made.push("nr_links");
        }
        if !made.is_empty() {
            patches[n.node] = Some(Patch {
                section,
                notes: vec![format!(
                    "[nsff] {}: generated by the lab from its topology (NR {:?} has fabric = \
                     \"auto\")",
                    made.join(", "),
                    nr_view.name
                )],
            });
        }
    }
    for &i in link_ids.keys() {
        let v = &nodes[i];
        let cfg = v.config.cloned().unwrap_or_default();
        if cfg.contains_key("nr_links") || cfg.contains_key("nr_path") {
            continue;
        }
        let Some(ids) = path_to_nr(v.name) else {
            continue; // a fwd node with no path to the NR reports nothing
        };
        let mut section = cfg;
        section.insert("nr_links".into(), ids_value(&ids));
        patches[i] = Some(Patch {
            section,
            notes: vec![format!(
                "[fwd] nr_links: generated by the lab from its topology (NR {:?} has fabric = \
                 \"auto\")",
                nr_view.name
            )],
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

/// Link IDs of a shortest path `from → to` over directed `links`
/// (breadth first, each node's links tried in increasing ID order: the
/// NR's own choice, `nodes/nr/src/fabric.rs`).
fn shortest(links: &[(String, String, u8)], from: &str, to: &str) -> Option<Vec<u8>> {
    let mut out: BTreeMap<&str, Vec<(u8, &str)>> = BTreeMap::new();
    for (a, b, id) in links {
        out.entry(a).or_default().push((*id, b));
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
    use super::super::file::{parse, Lab};

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
        assert_eq!(ids(&n2, "nr_links"), [5, 11, 0]);
        assert_eq!(ids(&section(&lab, "f1"), "nr_links"), [0]);
        assert_eq!(ids(&section(&lab, "f2"), "nr_links"), [11, 0]);
        assert_eq!(ids(&section(&lab, "f3"), "nr_links"), [13, 0]);
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
        assert_eq!(ids(&n2, "nr_links"), [5, 11, 0]);
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
