//! The NR node: [`Nr`] drives an [`NrCore`] from the node loop.
//!
//! - **GFF in**: the ingress shim takes IPv6 frames with next header 253
//!   (no extension headers) off every port. A frame is *for the NR* when its
//!   pathID has the NR's own `link_in` bit set (the bit the fwd node sets on
//!   its port toward the NR; any Ethernet destination is accepted). Those go
//!   to [`NrCore::handle_message`] and are consumed; other GFF frames are
//!   dropped as `nr.gff_not_for_us`, malformed ones by their reason. smoltcp
//!   never sees GFF.
//! - **GFF out**: every [`Transmit`] becomes Ethernet (destination
//!   broadcast: the pathID, not the MAC, steers a GFF packet; source the
//!   fabric port's MAC) + IPv6 (source ‖ destination = pathID, next header
//!   253, hop limit 64) + GFF header + payload, injected `ToWire` on the
//!   fabric port.
//! - **Everything else** (ARP, NDP, IPv4/IPv6 TCP to the REST port) is
//!   checked with [`check_frame`] and passed to smoltcp.
//! - **Start announcement** (`announce_restart`): the core's
//!   ([`NrCore::boot`]); the driver tells it of every frame heard on the
//!   fabric port ([`NrCore::heard_fabric`]) and runs its timers.

use serde_json::{json, Value};
use smoltcp::time::Instant;
use smoltcp::wire::EthernetAddress;
use svcroute_stack::runtime::{check_frame, Context, ControlReply, FrameContext, Role};
use svcroute_stack::shim::{Direction, Outbox, Verdict};
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::gff::{self, PathId};

use crate::config::{ConfigError, NrConfig};
use crate::core::{NrCore, Transmit};
use crate::rest::Rest;

pub use crate::core::ANNOUNCE_FALLBACK;

/// The nr role.
#[derive(Debug)]
pub struct Nr {
    cfg: NrConfig,
    core: NrCore,
    rest: Option<Rest>,
    mac: EthernetAddress,
}

impl Nr {
    /// A resolver node for `cfg`.
    pub fn new(cfg: NrConfig) -> Result<Self, ConfigError> {
        let core = NrCore::new(&cfg)?;
        Ok(Self {
            cfg,
            core,
            rest: None,
            mac: EthernetAddress([0x02, 0, 0, 0, 0, 0]),
        })
    }

    /// The core, for tests and tables.
    pub fn core(&self) -> &NrCore {
        &self.core
    }

    /// The core, mutably (tests feed it directly).
    pub fn core_mut(&mut self) -> &mut NrCore {
        &mut self.core
    }

    /// Put the core's packets on the wire and its counters in the node's.
    fn drain(&mut self, out: &mut Outbox, stats: &mut Counters) -> bool {
        let mut any = false;
        while let Some(t) = self.core.poll_transmit() {
            out.inject(self.cfg.fabric_port, Direction::ToWire, frame(self.mac, &t));
            stats.bump("nr.gff_sent");
            any = true;
        }
        for (k, v) in self.core.take_stats().named {
            stats.add(&k, v);
        }
        any
    }
}

/// The Ethernet frame carrying `t`, from `mac`.
pub fn frame(mac: EthernetAddress, t: &Transmit) -> Vec<u8> {
    gff_frame(
        mac,
        EthernetAddress::BROADCAST,
        t.path,
        t.msg_type,
        &t.payload,
    )
}

/// An Ethernet + IPv6 + GFF frame (SPEC §1.1) with `payload`, hop limit 64.
pub fn gff_frame(
    src: EthernetAddress,
    dst: EthernetAddress,
    path: PathId,
    msg_type: gff::MessageType,
    payload: &[u8],
) -> Vec<u8> {
    gff::ethernet_frame(dst, src, path, msg_type, gff::HOP_LIMIT, payload)
}

/// The registration table as JSON (ctl `names`, REST `GET /names`).
pub fn names_json(core: &NrCore) -> Value {
    Value::Array(
        core.names()
            .iter()
            .map(|(hash, e)| {
                json!({
                    "hash": format!("{hash:#06x}"),
                    "fqdn": e.fqdn.as_ref().map(|f| f.as_str()),
                    "nsff_ids": e.nsffs.iter().map(|n| n.value()).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

fn links(p: &PathId) -> Vec<u8> {
    p.links().collect()
}

impl Role for Nr {
    fn name(&self) -> &'static str {
        "nr"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        if let Some(p) = cx.ports.get(self.cfg.fabric_port) {
            let smoltcp::wire::HardwareAddress::Ethernet(m) = p.iface.hardware_addr();
            self.mac = m;
        } else {
            log::warn!("nr: fabric_port {} does not exist", self.cfg.fabric_port);
        }
        if self.cfg.rest_port != 0 {
            self.rest = Some(Rest::new(&self.cfg, cx.ports.len()));
        }
        self.core.boot(cx.now);
        self.poll(cx);
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        if self.core.poll_timeout().is_some_and(|t| t <= cx.now) {
            self.core.handle_timeout(cx.now);
        }
        if let Some(rest) = &mut self.rest {
            any |= rest.poll(cx.now, cx.ports, cx.stats, &mut self.core);
        }
        any |= self.drain(cx.out, cx.stats);
        any
    }

    fn poll_at(&self, _now: Instant) -> Option<Instant> {
        let rest = self.rest.as_ref().and_then(Rest::poll_at);
        [rest, self.core.poll_timeout()].into_iter().flatten().min()
    }

    fn ingress(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        if port == self.cfg.fabric_port && self.core.heard_fabric(cx.now) {
            self.drain(cx.out, cx.stats);
        }
        let Some(gff) = gff::parse_ethernet_frame(frame) else {
            if let Err(reason) = check_frame(frame) {
                return Verdict::Drop(reason);
            }
            if let Some(rest) = &mut self.rest {
                rest.saw_syn(port, frame);
            }
            return Verdict::Pass;
        };
        let (repr, payload) = match gff {
            Ok(g) => (g.repr, g.payload),
            Err(e) => return Verdict::Drop(e.as_str()),
        };
        if !repr.path_id.bit(self.core.fabric().own().link_in) {
            return Verdict::Drop("nr.gff_not_for_us");
        }
        cx.stats.bump("nr.gff_received");
        // Errors are counted by the core and land in the node's counters.
        let _ = self
            .core
            .handle_message(cx.now, repr.msg_type, &frame[payload]);
        self.drain(cx.out, cx.stats);
        Verdict::Consume
    }

    fn validate_ingress(&self) -> bool {
        // GFF addresses are pathIDs, not addresses; ingress checks the rest.
        false
    }

    fn control(&mut self, cx: &mut Context<'_>, _id: u64, args: &[String]) -> ControlReply {
        let cmd = args.first().map(String::as_str).unwrap_or("");
        let v = match cmd {
            "names" => json!({ "names": names_json(&self.core) }),
            "discovery" => json!({
                "discovery": self.core.discovery().iter().map(|((hash, r), d)| json!({
                    "hash": format!("{hash:#06x}"),
                    "requester": r.value(),
                    "serving": d.serving.value(),
                    "forward_links": links(&d.forward),
                    "reverse_links": links(&d.reverse),
                    "at_ms": d.at.total_millis(),
                })).collect::<Vec<_>>(),
            }),
            "links" => {
                let f = self.core.fabric();
                let own = f.own();
                json!({
                    "nr": { "at": own.at, "link_in": own.link_in, "link_out": own.link_out },
                    "nsffs": f.nsffs().map(|(id, a)| json!({
                        "nsff": id.value(), "at": a.at, "link_in": a.link_in, "link_out": a.link_out,
                        "heard_ms": self.core.last_heard().get(&id).map(|t| t.total_millis()),
                    })).collect::<Vec<_>>(),
                    "links": f.links().map(|(from, to, id)| json!({
                        "from": from, "to": to, "id": id, "up": !f.down_links().bit(id),
                    })).collect::<Vec<_>>(),
                    "down": links(&f.down_links()),
                })
            }
            "purge-all" => {
                self.core.purge_all();
                self.drain(cx.out, cx.stats);
                json!({ "sent": "path update ALL NODES" })
            }
            "link" => {
                let (Some(id), Some(state)) = (
                    args.get(1).and_then(|s| s.parse::<u8>().ok()),
                    args.get(2).map(String::as_str),
                ) else {
                    return ControlReply::Now(json!({ "error": "usage: link <id> up|down" }));
                };
                let r = match state {
                    "up" => self.core.link_event(cx.now, id, true),
                    "down" => self.core.link_event(cx.now, id, false),
                    _ => return ControlReply::Now(json!({ "error": "usage: link <id> up|down" })),
                };
                self.drain(cx.out, cx.stats);
                match r {
                    Ok(changed) => json!({ "link": id, "state": state, "changed": changed }),
                    Err(e) => json!({ "error": e.reason() }),
                }
            }
            "help" => json!({
                "commands": [
                    "names: the registration table (hash, FQDN, nSFF IDs)",
                    "discovery: who asked for what and was told which nSFF and paths",
                    "links: the fabric model and link states",
                    "link <id> up|down: an operator link event (as if from a fwd node)",
                    "purge-all: send path update ALL NODES, forget the discovery table",
                    "help: this list (and the node commands ping, stats, ports)",
                ],
            }),
            _ => return ControlReply::Unknown,
        };
        ControlReply::Now(v)
    }
}
