//! `lab status`: the live state of a lab (nodes asked over their control
//! sockets, hosts' namespaces read with `ip`) as JSON, and its rendering as
//! tables.

use std::time::Duration;

use anyhow::Result;
use serde_json::{json, Value};

use super::impair;
use super::state::{self, State};
use super::{lab_of_arg, netns, out};

pub(super) fn status(lab: Option<&str>, json: bool) -> Result<()> {
    let labs = match lab {
        Some(l) => vec![lab_of_arg(l)?],
        None => state::labs(),
    };
    let mut all = Vec::new();
    for l in &labs {
        match State::load(l) {
            Some(st) => all.push(status_json(&st)),
            None if state::dir(l).exists() => all.push(json!({
                "lab": l, "phase": "unknown",
                "error": format!("no readable state.json in {}; `svcroute lab down {l}`", state::dir(l).display()),
            })),
            None => all.push(json!({ "lab": l, "phase": "down" })),
        }
    }
    if json {
        return out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&Value::Array(all))?
        ));
    }
    if all.is_empty() {
        return out("no lab is up\n");
    }
    let text: Vec<String> = all.iter().map(render_status).collect();
    out(&text.join("\n"))
}

/// Live status of a lab as JSON: nodes with pid/alive/ready/ports, hosts with
/// interfaces and commands.
pub(super) fn status_json(st: &State) -> Value {
    let dir = st.dir();
    let nodes: Vec<Value> = st
        .lab
        .nodes
        .iter()
        .map(|n| {
            let pid = st.node_pids.get(&n.name).copied();
            let alive = pid.is_some_and(netns::alive);
            let sock = dir.join(format!("{}.sock", n.name));
            let ctl = |cmd: &str| {
                if !alive || !sock.exists() {
                    return None;
                }
                svcroute_stack::ctl::request(&sock, &[cmd.to_owned()], Duration::from_secs(2)).ok()
            };
            let live_ports = ctl("ports");
            let ports: Vec<Value> = n
                .ports
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let live = live_ports.as_ref().and_then(|v| v.get(i));
                    json!({
                        "tap": p.tap,
                        "segment": p.segment,
                        "bridge": p.bridge,
                        "name": live.and_then(|l| l["name"].as_str()),
                        "mac": live.and_then(|l| l["mac"].as_str()),
                        "addrs": live.map_or_else(|| json!(p.addrs), |l| l["addrs"].clone()),
                    })
                })
                .collect();
            let ping = ctl("ping");
            let ready = ping
                .as_ref()
                .is_some_and(|v| v["ready"] == Value::Bool(true));
            let link = match (&n.vm, n.ports.first().and_then(|p| p.peer.as_ref())) {
                (Some(_), _) => "vm",
                (None, Some(_)) => "packet",
                (None, None) => "tap",
            };
            json!({
                "name": n.name, "role": n.role, "pid": pid, "alive": alive, "ready": ready,
                "link": link, "vm": ping.as_ref().map_or(Value::Null, |v| v["vm"].clone()),
                "socket": sock, "log": dir.join(format!("{}.log", n.name)), "ports": ports,
            })
        })
        .collect();
    let hosts: Vec<Value> = st
        .lab
        .hosts
        .iter()
        .map(|h| {
            let present = netns::exists(&h.netns);
            let live = if present {
                netns::addrs(&h.netns).unwrap_or_default()
            } else {
                Vec::new()
            };
            let mut ifaces: Vec<Value> = h
                .ifaces
                .iter()
                .map(|f| {
                    let l = live.iter().find(|(name, _, _)| *name == f.name);
                    json!({
                        "name": f.name, "peer": f.peer, "segment": f.segment,
                        "mac": l.map(|(_, mac, _)| mac.clone()),
                        "addrs": l.map_or_else(|| json!(f.addrs), |(_, _, a)| json!(a)),
                    })
                })
                .collect();
            // A shim node's TUN: there once the node has set it up.
            if let Some(t) = &h.tun {
                let l = live.iter().find(|(name, _, _)| *name == t.name);
                ifaces.push(json!({
                    "name": t.name, "peer": format!("tun:{}", t.node), "segment": t.segment,
                    "mac": Value::Null,
                    "addrs": l.map_or_else(|| json!(t.addrs), |(_, _, a)| json!(a)),
                }));
            }
            let pids = st.host_pids.get(&h.name).cloned().unwrap_or_default();
            let commands: Vec<Value> = h
                .commands
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let pid = pids.get(i).copied();
                    json!({ "command": c, "pid": pid, "alive": pid.is_some_and(netns::alive) })
                })
                .collect();
            json!({
                "name": h.name, "netns": h.netns, "present": present, "ifaces": ifaces,
                "commands": commands, "log": dir.join(format!("{}.log", h.name)),
            })
        })
        .collect();
    json!({
        "lab": st.lab.name,
        "phase": st.phase,
        "source": st.source,
        "netns": st.lab.netns,
        "netns_present": netns::exists(&st.lab.netns),
        "run_dir": dir,
        "segments": st.lab.segments.iter().map(|s| json!({"name": s.name, "bridge": s.bridge})).collect::<Vec<_>>(),
        "nodes": nodes,
        "hosts": hosts,
        "machine": super::machine::status_json(&st.lab, true),
        "impairments": impair::status_json(st),
    })
}

pub(super) fn render_status(v: &Value) -> String {
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        Value::Array(a) => {
            let items: Vec<String> = a
                .iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                .collect();
            if items.is_empty() {
                "-".into()
            } else {
                items.join(", ")
            }
        }
        other => other.to_string(),
    };
    let yes = |v: &Value| {
        if v.as_bool() == Some(true) {
            "yes"
        } else {
            "no"
        }
        .to_owned()
    };
    let mut out = format!("lab {} ({})", s(&v["lab"]), s(&v["phase"]));
    if let Some(e) = v["error"].as_str() {
        out.push_str(&format!(": {e}\n"));
        return out;
    }
    if v["phase"] == "down" {
        out.push_str(": not up\n");
        return out;
    }
    out.push_str(&format!(
        " from {}; namespace {}{}; run dir {}\n",
        s(&v["source"]),
        s(&v["netns"]),
        if v["netns_present"].as_bool() == Some(true) {
            ""
        } else {
            " (MISSING)"
        },
        s(&v["run_dir"]),
    ));
    let segs: Vec<String> = v["segments"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|g| format!("{} (bridge {})", s(&g["name"]), s(&g["bridge"])))
        .collect();
    out.push_str(&format!(
        "segments: {}\n",
        if segs.is_empty() {
            "-".into()
        } else {
            segs.join(", ")
        }
    ));

    let mut rows = vec![vec![
        "NODE", "ROLE", "PID", "ALIVE", "READY", "PORT", "TAP", "SEGMENT", "MAC", "ADDRS",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>()];
    for n in v["nodes"].as_array().map(Vec::as_slice).unwrap_or_default() {
        for (i, p) in n["ports"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let first = i == 0;
            rows.push(vec![
                if first { s(&n["name"]) } else { String::new() },
                if !first {
                    String::new()
                } else if n["link"] == "tap" || n["link"].is_null() {
                    s(&n["role"])
                } else {
                    format!("{} ({})", s(&n["role"]), s(&n["link"]))
                },
                if first { s(&n["pid"]) } else { String::new() },
                if first {
                    yes(&n["alive"])
                } else {
                    String::new()
                },
                if first {
                    yes(&n["ready"])
                } else {
                    String::new()
                },
                s(&p["name"]),
                s(&p["tap"]),
                s(&p["segment"]),
                s(&p["mac"]),
                s(&p["addrs"]),
            ]);
        }
    }
    if rows.len() > 1 {
        out.push_str(&table(&rows));
    }
    let mut rows = vec![vec![
        "HOST",
        "NAMESPACE",
        "IFACE",
        "VETH",
        "SEGMENT",
        "MAC",
        "ADDRS",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>()];
    let mut cmds = String::new();
    for h in v["hosts"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let ns = format!(
            "{}{}",
            s(&h["netns"]),
            if h["present"].as_bool() == Some(true) {
                ""
            } else {
                " (MISSING)"
            }
        );
        for (i, f) in h["ifaces"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let first = i == 0;
            rows.push(vec![
                if first { s(&h["name"]) } else { String::new() },
                if first { ns.clone() } else { String::new() },
                s(&f["name"]),
                s(&f["peer"]),
                s(&f["segment"]),
                s(&f["mac"]),
                s(&f["addrs"]),
            ]);
        }
        for c in h["commands"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            cmds.push_str(&format!(
                "  {}: pid {} {}: {}\n",
                s(&h["name"]),
                s(&c["pid"]),
                if c["alive"].as_bool() == Some(true) {
                    "running"
                } else {
                    "exited"
                },
                s(&c["command"])
            ));
        }
    }
    if rows.len() > 1 {
        out.push_str(&table(&rows));
    }
    if !cmds.is_empty() {
        out.push_str("host commands:\n");
        out.push_str(&cmds);
    }
    out.push_str(&super::machine::render(v));
    let mut rows = vec![["LINK", "KIND", "IMPAIRMENT", "DROPPED"]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>()];
    for i in v["impairments"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        rows.push(vec![
            s(&i["link"]),
            s(&i["kind"]),
            s(&i["describe"]),
            s(&i["dropped"]),
        ]);
    }
    if rows.len() > 1 {
        out.push_str(&table(&rows));
    }
    out
}

/// Left-aligned columns, two spaces apart, trailing blanks trimmed.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|x| x.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: String = r
            .iter()
            .enumerate()
            .map(|(c, x)| format!("{x:<w$}  ", w = widths[c]))
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
