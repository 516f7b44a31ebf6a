//! `lab ui` / `lab graph --serve`: the lab's picture, live, on a local web page.
//!
//! A small HTTP server (tiny_http) on 127.0.0.1 serves
//!
//! - `/`: the page (`ui/index.html`, `ui/ui.js`, `ui/ui.css`, embedded);
//! - `/graph.svg`: the picture of [`super::graph`], drawn from the running
//!   lab's `state.json` plan (so a `lab move` shows), else from the lab file
//!   the server was started with;
//! - `/state.json`: the live state, sampled afresh for every request, which
//!   the page polls every second: node liveness and readiness (the JSON of
//!   `lab status`, [`super::status::status_json`]), per-node counters (`ctl
//!   stats`), each link's and segment's state as the kernel reports it
//!   (`ip -j link show`: a TAP, veth or bridge set down shows down, a port
//!   no longer on its bridge shows detached), and impairments
//!   ([`impairments`]).
//!
//! Nothing on the page changes the lab: it only reads.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash as _, Hasher as _};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};
use serde_json::{json, Map, Value};

use super::graph::{self, Topo};
use super::state::{self, State};
use super::{file::Lab, lab_of_arg, netns, status};

const INDEX_HTML: &str = include_str!("ui/index.html");
const UI_JS: &str = include_str!("ui/ui.js");
const UI_CSS: &str = include_str!("ui/ui.css");

/// What the server shows: a lab by name, and the lab file to draw while
/// that lab is not up (if one was given).
struct Target {
    lab: String,
    file: Option<PathBuf>,
}

impl Target {
    /// The plan to draw: the running lab's, else the file's.
    fn plan(&self) -> Option<(Lab, Option<State>)> {
        if let Some(st) = State::load(&self.lab) {
            return Some((st.lab.clone(), Some(st)));
        }
        let f = self.file.as_ref()?;
        super::read_lab(Some(f)).ok().map(|(lab, _)| (lab, None))
    }
}

/// `lab ui [LAB|FILE] [--port P]`: serve until interrupted.
pub(super) fn serve(arg: Option<&str>, port: u16) -> Result<()> {
    let target = match arg {
        Some(a) => {
            let lab = lab_of_arg(a)?;
            let is_file = a.ends_with(".toml") || a.contains('/');
            Target {
                lab,
                file: is_file.then(|| PathBuf::from(a)),
            }
        }
        None => {
            let up: Vec<String> = state::labs()
                .into_iter()
                .filter(|l| State::load(l).is_some())
                .collect();
            match up.as_slice() {
                [one] => Target {
                    lab: one.clone(),
                    file: None,
                },
                [] => {
                    bail!("no lab is up; name one (`svcroute lab ui LAB|FILE`) or `lab up` first")
                }
                many => bail!("several labs are up ({}); name one", many.join(", ")),
            }
        }
    };
    let server = tiny_http::Server::http(("127.0.0.1", port))
        .map_err(|e| anyhow::anyhow!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let addr = server
        .server_addr()
        .to_ip()
        .map_or_else(|| format!("127.0.0.1:{port}"), |a| a.to_string());
    // The first line of stdout is the URL (tests and scripts read it).
    {
        let mut o = std::io::stdout().lock();
        writeln!(o, "http://{addr}/")?;
        o.flush()?;
    }
    log::info!(
        "lab ui: lab {} on http://{addr}/ (Ctrl-C to stop)",
        target.lab
    );
    let mut seq: u64 = 0;
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("/").to_owned();
        log::debug!("{} {path}", req.method());
        let (code, ctype, body) = if *req.method() != tiny_http::Method::Get {
            (405, "text/plain", "only GET\n".to_owned())
        } else {
            match path.as_str() {
                "/" | "/index.html" => (200, "text/html; charset=utf-8", INDEX_HTML.to_owned()),
                "/ui.js" => (200, "text/javascript; charset=utf-8", UI_JS.to_owned()),
                "/ui.css" => (200, "text/css; charset=utf-8", UI_CSS.to_owned()),
                "/graph.svg" => match target.plan() {
                    Some((lab, _)) => (
                        200,
                        "image/svg+xml; charset=utf-8",
                        graph::svg(&Topo::of(&lab)),
                    ),
                    None => (404, "text/plain", format!("lab {} is not up\n", target.lab)),
                },
                "/state.json" => {
                    seq += 1;
                    let v = live_state(&target, seq);
                    (200, "application/json", format!("{v}\n"))
                }
                _ => (404, "text/plain", "not found\n".to_owned()),
            }
        };
        let header = |k: &str, v: &str| {
            tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).expect("valid header")
        };
        let resp = tiny_http::Response::from_string(body)
            .with_status_code(code)
            .with_header(header("Content-Type", ctype))
            .with_header(header("Cache-Control", "no-store"));
        if let Err(e) = req.respond(resp) {
            log::debug!("responding to {path}: {e}");
        }
    }
    Ok(())
}

/// The impairments recorded for lab `lab`, by link element id (`link-<iface>`,
/// see [`super::graph`]) — the one place the live view reads them.
///
/// `lab link <segment|node:port> down|loss|delay|...` records impairments
/// in the lab's run directory (`super::impair`); this returns each as its
/// short description (e.g. `loss 5%`) under the id of every link it acts
/// on (a segment's: all of its ports).
fn impairments(lab: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let Some(st) = State::load(lab) else {
        return out;
    };
    for imp in super::impair::load(&st) {
        let Ok(link) = super::impair::resolve(&st.lab, &imp.link) else {
            continue;
        };
        for port in &link.ports {
            out.entry(format!("link-{port}"))
                .or_default()
                .push(imp.describe());
        }
    }
    out
}

/// One interface as `ip -j link show` reports it.
#[derive(Debug, Clone)]
struct KernelLink {
    admin_up: bool,
    operstate: String,
    master: Option<String>,
}

/// Interfaces of namespace `ns` by name (empty if `ns` is gone).
fn kernel_links(ns: &str) -> BTreeMap<String, KernelLink> {
    let Ok(text) = netns::ip_in(ns, &["-j", "link", "show"]) else {
        return BTreeMap::new();
    };
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    v.as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|l| {
            let name = l["ifname"].as_str()?.to_owned();
            let admin_up = l["flags"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "UP"));
            Some((
                name,
                KernelLink {
                    admin_up,
                    operstate: l["operstate"].as_str().unwrap_or("UNKNOWN").to_owned(),
                    master: l["master"].as_str().map(str::to_owned),
                },
            ))
        })
        .collect()
}

/// A link's state from its interface(s): `missing`, `down` (set down, or no
/// carrier: its peer or its process is gone), `detached` (not on its
/// bridge), else `up`. TAPs whose driver reports no operstate (`UNKNOWN`)
/// count as up.
fn link_state(k: Option<&KernelLink>, bridge: Option<&str>) -> &'static str {
    let Some(k) = k else { return "missing" };
    if !k.admin_up {
        return "down";
    }
    if matches!(
        k.operstate.as_str(),
        "DOWN" | "LOWERLAYERDOWN" | "NOTPRESENT" | "DORMANT"
    ) {
        return "down";
    }
    if bridge.is_some() && k.master.as_deref() != bridge {
        return "detached";
    }
    "up"
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The JSON `/state.json` answers (see `docs/lab.md`, "ui").
fn live_state(target: &Target, seq: u64) -> Value {
    let Some((lab, st)) = target.plan() else {
        return json!({
            "lab": target.lab, "phase": "down", "seq": seq, "time_ms": unix_ms(),
            "svg_version": Value::Null, "nodes": {}, "hosts": {}, "segments": {}, "links": {},
        });
    };
    let topo = Topo::of(&lab);
    let svg_version = {
        let mut h = DefaultHasher::new();
        graph::svg(&topo).hash(&mut h);
        format!("{:016x}", h.finish())
    };
    let status = st.as_ref().map(status::status_json);
    let phase = st.as_ref().map_or("down", |s| s.phase.as_str());
    let ids = graph::device_ids(&topo);

    let mut nodes = Map::new();
    for n in &lab.nodes {
        let s = status
            .as_ref()
            .and_then(|v| v["nodes"].as_array())
            .and_then(|a| a.iter().find(|x| x["name"] == n.name.as_str()));
        let alive = s.is_some_and(|x| x["alive"] == true);
        let counters = if alive {
            let sock = state::dir(&lab.name).join(format!("{}.sock", n.name));
            svcroute_stack::ctl::request(&sock, &["stats".to_owned()], Duration::from_secs(1))
                .ok()
                .map(|v| {
                    let drops: u64 = v["named"]
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .filter(|(k, _)| k.starts_with("drop."))
                                .filter_map(|(_, x)| x.as_u64())
                                .sum()
                        })
                        .unwrap_or(0);
                    json!({
                        "rx_frames": v["rx_frames"], "tx_frames": v["tx_frames"],
                        "rx_bytes": v["rx_bytes"], "tx_bytes": v["tx_bytes"],
                        "drops": drops, "named": v["named"],
                    })
                })
        } else {
            None
        };
        nodes.insert(
            n.name.clone(),
            json!({
                "id": ids.get(&n.name), "role": n.role, "alive": alive,
                "ready": s.is_some_and(|x| x["ready"] == true),
                "pid": s.map_or(Value::Null, |x| x["pid"].clone()),
                "counters": counters,
            }),
        );
    }
    let mut hosts = Map::new();
    for h in &lab.hosts {
        let s = status
            .as_ref()
            .and_then(|v| v["hosts"].as_array())
            .and_then(|a| a.iter().find(|x| x["name"] == h.name.as_str()));
        let cmds = s.and_then(|x| x["commands"].as_array());
        hosts.insert(
            h.name.clone(),
            json!({
                "id": ids.get(&h.name),
                "alive": s.is_some_and(|x| x["present"] == true),
                "commands": cmds.map_or(0, Vec::len),
                "commands_running": cmds.map_or(0, |c| c.iter().filter(|x| x["alive"] == true).count()),
            }),
        );
    }

    // One `ip -j link show` per namespace involved.
    let mut kernel: BTreeMap<String, BTreeMap<String, KernelLink>> = BTreeMap::new();
    let mut k = |ns: &str| {
        kernel
            .entry(ns.to_owned())
            .or_insert_with(|| {
                if st.is_some() && netns::exists(ns) {
                    kernel_links(ns)
                } else {
                    BTreeMap::new()
                }
            })
            .clone()
    };
    let lab_ns = k(&lab.netns);
    let mut segments = Map::new();
    for (name, bridge) in &topo.segments {
        let b = lab_ns.get(bridge);
        let state = match b {
            None => "missing",
            Some(b) if !b.admin_up => "down",
            Some(_) => "up",
        };
        segments.insert(
            name.clone(),
            json!({
                "id": format!("seg-{name}"), "bridge": bridge, "state": state,
                "operstate": b.map(|b| b.operstate.clone()),
            }),
        );
    }
    let imp = impairments(&lab.name);
    let mut links = Map::new();
    for l in &topo.links {
        let mut state = "up";
        let mut detail = Vec::new();
        for (ns, ifname, bridge) in &l.kernel {
            let table = k(ns);
            let kl = table.get(ifname);
            let s = link_state(kl, bridge.as_deref());
            // The worst of the interfaces is the link's state.
            let rank = |s: &str| {
                ["up", "detached", "down", "missing"]
                    .iter()
                    .position(|x| *x == s)
            };
            if rank(s) > rank(state) {
                state = s;
            }
            detail.push(json!({
                "netns": ns, "ifname": ifname, "state": s,
                "admin_up": kl.map(|x| x.admin_up), "operstate": kl.map(|x| x.operstate.clone()),
                "master": kl.and_then(|x| x.master.clone()), "bridge": bridge,
            }));
        }
        let to = match l.to {
            graph::End::Segment(s) => topo.segments[s].0.clone(),
            graph::End::Device(d) => topo.devices[d].name.clone(),
        };
        links.insert(
            l.id.clone(),
            json!({
                "device": topo.devices[l.device].name, "iface": l.iface, "to": to,
                "addrs": l.addrs, "state": state, "kernel": detail,
                "impairments": imp.get(&l.id).cloned().unwrap_or_default(),
            }),
        );
    }
    json!({
        "lab": lab.name, "phase": phase, "seq": seq, "time_ms": unix_ms(),
        "svg_version": svg_version,
        "nodes": nodes, "hosts": hosts, "segments": segments, "links": links,
    })
}

#[cfg(test)]
mod test {
    use super::*;

    fn kl(admin_up: bool, oper: &str, master: Option<&str>) -> KernelLink {
        KernelLink {
            admin_up,
            operstate: oper.to_owned(),
            master: master.map(str::to_owned),
        }
    }

    #[test]
    fn link_state_follows_the_kernel() {
        assert_eq!(link_state(None, Some("br-a")), "missing");
        assert_eq!(
            link_state(Some(&kl(false, "DOWN", Some("br-a"))), Some("br-a")),
            "down"
        );
        assert_eq!(
            link_state(
                Some(&kl(true, "LOWERLAYERDOWN", Some("br-a"))),
                Some("br-a")
            ),
            "down"
        );
        assert_eq!(
            link_state(Some(&kl(true, "UP", None)), Some("br-a")),
            "detached"
        );
        assert_eq!(
            link_state(Some(&kl(true, "UP", Some("br-b"))), Some("br-a")),
            "detached"
        );
        assert_eq!(
            link_state(Some(&kl(true, "UNKNOWN", Some("br-a"))), Some("br-a")),
            "up"
        );
        assert_eq!(link_state(Some(&kl(true, "UP", None)), None), "up");
    }

    #[test]
    fn a_lab_that_is_not_up_answers_phase_down() {
        let t = Target {
            lab: "nosuchlab-x".into(),
            file: None,
        };
        let v = live_state(&t, 7);
        assert_eq!(v["phase"], "down");
        assert_eq!(v["seq"], 7);
    }

    #[test]
    fn a_lab_file_is_drawn_while_its_lab_is_down() {
        let t = Target {
            lab: "nosuchlab-y".into(),
            file: Some(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/labs/host.toml").into()),
        };
        let v = live_state(&t, 1);
        assert_eq!(v["phase"], "down");
        assert_eq!(v["nodes"]["h1"]["alive"], false);
        assert_eq!(v["links"]["link-h1-0"]["state"], "missing");
        assert_eq!(v["segments"]["lan0"]["state"], "missing");
    }
}
