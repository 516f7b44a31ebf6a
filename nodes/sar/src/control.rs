//! The `sar` node's control-socket answers (`svcroute ctl <node> ...`):
//! the FIB, the NHIB, IGP neighbours, routes and LSDB, and role `sag`'s
//! gateway, as JSON. Read-only views of the node's parts.

use std::net::Ipv6Addr;

use serde_json::{json, Value};
use smoltcp::time::Instant;
use svcroute_stack::wire::igp::{LsaBody, RouterId};
use svcroute_stack::wire::rosa::ServiceName;

use crate::driver::SarNode;
use crate::igp::NeighborState;
use crate::router::Origin;
use crate::sag::{self, proxy};

/// Entries a control answer lists at most.
const MAX_LISTED: usize = 10_000;

/// The commands of `ctl <sar> help`.
pub(crate) fn help() -> Value {
    json!({
        "commands": {
            "ping": "liveness and readiness",
            "stats": "counters: sar.* events, drop.sar.* drops by reason",
            "ports": "ports, MACs, addresses",
            "fib": "service names and their instances",
            "instances": "NHIB instance rows (metrics, origin, expiry)",
            "neighbors": "IGP neighbours: state, RTT, cost",
            "routes": "the IPv6 routing table and the route to every SAR",
            "lsdb": "the IGP link-state database",
            "sag": "role sag: DNS cache, names being resolved, proxied flows",
            "sticky": "[sar.sticky]: the sticky-service table (ingress) and the flows (egress)",
            "sites": "[sar.sticky]: every egress site's App-Metrics and its score here; what this egress measures",
            "metrics set capacity|preference|cost ANYCAST VALUE": "[sar.sticky.egress]: change a site's advertised metric",
            "ue-moved OLD NEW NEW_INGRESS": "[sar.sticky.ingress]: hand UE OLD's entries, now keyed by NEW, to NEW_INGRESS (scenario 2)",
        }
    })
}

impl SarNode {
    pub(crate) fn sticky_json(&self, now: Instant) -> Value {
        match &self.sticky {
            Some(st) => st.table_json(now),
            None => json!({ "error": "no [sar.sticky] section" }),
        }
    }

    pub(crate) fn sites_json(&self) -> Value {
        match &self.sticky {
            Some(st) => st.sites_json(),
            None => json!({ "error": "no [sar.sticky] section" }),
        }
    }

    /// `metrics set capacity|preference|cost ANYCAST VALUE`.
    pub(crate) fn metrics_cmd(&mut self, args: &[String]) -> Value {
        let usage = "usage: metrics set capacity|preference|cost ANYCAST VALUE";
        let Some(st) = self.sticky.as_mut() else {
            return json!({ "error": "no [sar.sticky] section" });
        };
        let [set, what, anycast, value] = args else {
            return json!({ "error": usage });
        };
        if set != "set" {
            return json!({ "error": usage });
        }
        let Ok(anycast) = anycast.parse::<Ipv6Addr>() else {
            return json!({ "error": format!("{anycast:?} is not an IPv6 address") });
        };
        let Ok(value) = value.parse::<u32>() else {
            return json!({ "error": format!("{value:?} is not a number") });
        };
        match st.set_metric(what, anycast, value) {
            Ok(()) => json!({ "ok": true, "anycast": anycast.to_string(), what.as_str(): value }),
            Err(e) => json!({ "error": e }),
        }
    }

    /// `ue-moved OLD NEW NEW_INGRESS`.
    pub(crate) fn ue_moved_cmd(&mut self, now: Instant, args: &[String]) -> Value {
        let [old, new, ingress] = args else {
            return json!({ "error": "usage: ue-moved OLD_UE_ADDR NEW_UE_ADDR NEW_INGRESS (router ID or address)" });
        };
        let (Ok(old), Ok(new)) = (old.parse::<Ipv6Addr>(), new.parse::<Ipv6Addr>()) else {
            return json!({ "error": "OLD_UE_ADDR and NEW_UE_ADDR must be IPv6 addresses" });
        };
        let (Some(st), Some(core)) = (self.sticky.as_mut(), self.core.as_ref()) else {
            return json!({ "error": "no [sar.sticky] section" });
        };
        let routes = core.igp().routes();
        let known = |s: &str| {
            s.parse::<u32>()
                .is_ok_and(|id| routes.contains_key(&RouterId(id)))
                || s.parse::<Ipv6Addr>()
                    .is_ok_and(|a| routes.values().any(|r| r.addr == a))
        };
        match st.ue_moved(now, old, new, ingress, known) {
            Ok(n) => {
                json!({ "ok": true, "moved": n, "old": old.to_string(), "new": new.to_string() })
            }
            Err(e) => json!({ "error": e }),
        }
    }

    pub(crate) fn sag_json(&self, now: Instant) -> Value {
        let Some(gw) = &self.gw else {
            return json!({ "error": "not a SAG (role sag)" });
        };
        let r = gw.resolver();
        let mut cache: Vec<Value> = r
            .cache()
            .take(MAX_LISTED)
            .map(|(name, c)| {
                let answer = match c.answer {
                    sag::dns::Answer::V6(a) => a.to_string(),
                    sag::dns::Answer::V4Only(a) => format!("ipv4-only {a}"),
                    sag::dns::Answer::NoAddress => "no address".into(),
                    sag::dns::Answer::Failed => "failed".into(),
                };
                json!({
                    "name": name,
                    "answer": answer,
                    "ttl_s": (c.expires - now.min(c.expires)).secs(),
                    "live": c.expires > now,
                })
            })
            .collect();
        cache.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        let flows: Vec<Value> = gw
            .proxy()
            .flows()
            .take(MAX_LISTED)
            .map(|f| {
                json!({
                    "proto": format!("{}", f.key.proto),
                    "client": format!("[{}]:{}", f.key.client, f.key.client_port),
                    "service_port": f.key.service_port,
                    "service": display_name(&f.service),
                    "server": f.server.to_string(),
                    "proxy_port": f.proxy_port,
                    "ingress": f.ingress.to_string(),
                    "direct": f.direct,
                    "state": match f.state {
                        proxy::FlowState::Open => "open",
                        proxy::FlowState::Closed(proxy::CloseCause::Fin) => "closed_fin",
                        proxy::FlowState::Closed(proxy::CloseCause::Rst) => "closed_rst",
                    },
                    "idle_ms": (now - f.last).total_millis(),
                })
            })
            .collect();
        let handovers: Vec<Value> = gw
            .handovers()
            .take(MAX_LISTED)
            .map(|(k, h)| {
                json!({
                    "proto": format!("{}", k.proto),
                    "client": format!("[{}]:{}", k.client, k.client_port),
                    "service_port": k.service_port,
                    "ingress": h.ingress.to_string(),
                    "sag": h.sag.to_string(),
                    "udp": h.encap,
                    "idle_ms": (now - h.last).total_millis(),
                })
            })
            .collect();
        json!({
            "dns_server": self.s.gateway.as_ref().and_then(|g| g.dns_server).map(|(a, p)| format!("[{a}]:{p}")),
            "handovers": handovers,
            "cached": cache.len(),
            "cache": cache,
            "resolving": r.pending(),
            "waiting": gw.waiting(),
            "flows": flows.len(),
            "flow_list": flows,
        })
    }

    pub(crate) fn fib_json(&self) -> Value {
        let Some(core) = &self.core else {
            return json!([]);
        };
        let nhib = core.nhib();
        let list: Vec<Value> = core
            .fib()
            .iter()
            .take(MAX_LISTED)
            .map(|(name, e)| {
                json!({
                    "service": display_name(name),
                    "steering": e.steering.to_string(),
                    "instances": e.members.iter().map(|m| json!({
                        "addr": m.addr.to_string(),
                        "origin": m.origin.0,
                        "reachable": nhib.slot_cost(m.slot).is_some(),
                        "cost": nhib.slot_cost(m.slot),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({ "services": core.fib().len(), "fib": list })
    }

    pub(crate) fn instances_json(&self, now: Instant) -> Value {
        let Some(core) = &self.core else {
            return json!([]);
        };
        let me = core.router_id();
        let list: Vec<Value> = core
            .nhib()
            .iter()
            .take(MAX_LISTED)
            .map(|(_, i)| {
                json!({
                    "service": display_name(&i.name),
                    "addr": i.addr.to_string(),
                    "origin": i.origin.0,
                    "local": i.origin == me,
                    "expires_in_s": if i.expires > now { (i.expires - now).secs() } else { 0 },
                    "steering": format!("{:?}", i.steering),
                    "capability": i.metrics.capability,
                    "load": i.metrics.load,
                    "latency_us": i.metrics.latency_us,
                    "preference": i.metrics.preference,
                })
            })
            .collect();
        json!({ "instances": core.nhib().len(), "list": list })
    }

    pub(crate) fn neighbors_json(&self, names: &[String]) -> Value {
        let Some(core) = &self.core else {
            return json!([]);
        };
        let list: Vec<Value> = core
            .igp()
            .neighbors()
            .iter()
            .map(|n| {
                let cfg = self.s.neighbors.get(n.link.0 as usize);
                json!({
                    "link": n.link.0,
                    "port": cfg.and_then(|c| names.get(c.port)),
                    "addr": cfg.map(|c| c.addr.to_string()),
                    "cost": n.cost,
                    "state": match n.state {
                        NeighborState::Down => "down",
                        NeighborState::Init => "init",
                        NeighborState::Full => "full",
                    },
                    "router_id": n.router_id.map(|r| r.0),
                    "srtt_us": n.srtt_us,
                    "unacked": n.unacked,
                })
            })
            .collect();
        Value::Array(list)
    }

    pub(crate) fn routes_json(&self, names: &[String]) -> Value {
        let table: Vec<Value> = self
            .fwd
            .table()
            .routes()
            .iter()
            .map(|r| {
                let mut v = json!({
                    "prefix": r.prefix.to_string(),
                    "port": names.get(r.port),
                    "via": r.via.map(|a| a.to_string()),
                    "origin": r.origin.as_str(),
                });
                if let Origin::Igp { cost, router } = r.origin {
                    v["cost"] = json!(cost);
                    v["router"] = json!(router.0);
                }
                v
            })
            .collect();
        let sars: Vec<Value> = self
            .core
            .iter()
            .flat_map(|c| c.igp().routes().iter())
            .map(|(rid, r)| {
                json!({
                    "router": rid.0,
                    "addr": r.addr.to_string(),
                    "cost": r.cost,
                    "next_hop": r.next_hop.0,
                    "next_hop_addr": r.next_hop_addr.to_string(),
                    "link": r.link.map(|l| l.0),
                })
            })
            .collect();
        json!({ "table": table, "sars": sars })
    }

    pub(crate) fn lsdb_json(&self, now: Instant) -> Value {
        let Some(core) = &self.core else {
            return json!([]);
        };
        let igp = core.igp();
        let list: Vec<Value> = igp
            .lsas(now)
            .take(MAX_LISTED)
            .map(|l| {
                let body = match &l.body {
                    LsaBody::RouterLinks(rl) => json!({
                        "address": rl.address.to_string(),
                        "links": rl.links.iter().map(|k| json!({"neighbor": k.neighbor.0, "cost": k.cost})).collect::<Vec<_>>(),
                        "prefixes": rl.prefixes.iter().map(|p| format!("{}/{}", p.addr, p.len)).collect::<Vec<_>>(),
                    }),
                    LsaBody::Services(s) => json!({
                        "services": s.iter().map(|a| json!({
                            "service": display_name(&a.name),
                            "instance": a.instance.to_string(),
                            "lifetime_s": a.lifetime_s,
                        })).collect::<Vec<_>>(),
                    }),
                    LsaBody::AppMetrics(e) => json!({ "app_metrics": e.len() }),
                    LsaBody::Sticky(e) => json!({ "sticky": e.len() }),
                };
                json!({
                    "origin": l.origin.0,
                    "kind": format!("{:?}", l.body.kind()),
                    "part": l.part,
                    "seq": l.seq,
                    "age": l.age,
                    "body": body,
                })
            })
            .collect();
        json!({
            "lsas": igp.lsdb_len(),
            "digest": format!("{:016x}", igp.lsdb_digest(now)),
            "list": list,
        })
    }
}

fn display_name(name: &ServiceName) -> String {
    if name.is_wildcard() {
        "*".into()
    } else {
        name.to_string()
    }
}
