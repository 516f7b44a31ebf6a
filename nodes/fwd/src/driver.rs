//! The fwd node: [`Fwd`] runs a [`FwdCore`] in a node's ingress shim.
//!
//! Glue only: frames in go to [`FwdCore::process`], forwarded copies and
//! the core's own frames go out `ToWire`, counters are copied into the
//! node's, `ctl links` renders the core's link table.

use serde_json::{json, Value};
use smoltcp::time::Instant;
use smoltcp::wire::EthernetAddress;
use svcroute_stack::runtime::{Context, ControlReply, FrameContext, Role};
use svcroute_stack::shim::{Direction, Outbox, Verdict};
use svcroute_stack::stats::Counters;

use crate::config::{ConfigError, FwdConfig};
use crate::core::{self, FwdCore, LinkStatus};

/// The fwd role: [`FwdCore`] in a node's ingress shim.
///
/// Every received frame is the core's: forwarded copies are injected toward
/// the wire of their ports, everything else is consumed or dropped; smoltcp
/// sees nothing (its interfaces need no addresses).
#[derive(Debug)]
pub struct Fwd {
    core: FwdCore,
}

impl Fwd {
    /// A switch for the ports whose MACs are `macs` (in `[[port]]` order).
    pub fn new(cfg: &FwdConfig, macs: &[EthernetAddress]) -> Result<Self, ConfigError> {
        Ok(Self {
            core: FwdCore::new(cfg, macs)?,
        })
    }

    /// The core, for inspection.
    pub const fn core(&self) -> &FwdCore {
        &self.core
    }

    fn drain(&mut self, out: &mut Outbox) -> bool {
        let mut any = false;
        while let Some(t) = self.core.poll_transmit() {
            out.inject(t.port, Direction::ToWire, t.frame);
            any = true;
        }
        any
    }

    /// Per port: link ID, state, neighbour, last hello.
    pub fn links(&self, now: Instant, names: &[String]) -> Value {
        let ports = self.core.ports().iter().enumerate().map(|(i, p)| {
            let mut v = json!({
                "port": names.get(i).cloned().unwrap_or_else(|| format!("#{i}")),
                "link_id": p.link_id,
                "state": p.status.as_str(),
                "hellos_in": p.hellos_in,
            });
            if let Some(n) = p.status.neighbour() {
                v["neighbour"] = json!({
                    "node": n.node,
                    "link_id": n.link_id,
                    "mac": n.mac.to_string(),
                });
            }
            match p.status {
                LinkStatus::Up {
                    last_hello, seq, ..
                } => {
                    v["last_hello_ms_ago"] = json!((now - last_hello).total_millis());
                    v["last_seq"] = json!(seq);
                }
                LinkStatus::Down { since, .. } => {
                    v["down_for_ms"] = json!((now - since).total_millis());
                }
                LinkStatus::Unknown => {}
            }
            v
        });
        json!({
            "node_id": self.core.node_id(),
            "nr_path": self.core.nr_path().to_string(),
            "links": ports.collect::<Vec<_>>(),
        })
    }
}

/// Copy the core's counters into the node's (`fwd.*`).
fn export(core: &FwdCore, stats: &mut Counters) {
    let s = core.stats();
    for (k, v) in [
        ("fwd.forwarded", s.forwarded),
        ("fwd.copies", s.copies),
        ("fwd.hellos_in", s.hellos_in),
        ("fwd.hellos_out", s.hellos_out),
        ("fwd.links_up", s.links_up),
        ("fwd.links_down", s.links_down),
        ("fwd.link_events_out", s.events_out),
        ("fwd.link_events_unsent", s.events_unsent),
        ("fwd.queue_full", s.queue_full),
        ("fwd.link_events_refreshed", s.events_refreshed),
    ] {
        if v != 0 || stats.named.contains_key(k) {
            stats.named.insert(k.to_owned(), v);
        }
    }
}

impl Role for Fwd {
    fn name(&self) -> &'static str {
        "fwd"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        self.core.handle_timeout(cx.now);
        self.drain(cx.out);
        export(&self.core, cx.stats);
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        if self.core.poll_at().is_some_and(|t| t <= cx.now) {
            self.core.handle_timeout(cx.now);
        }
        let any = self.drain(cx.out);
        export(&self.core, cx.stats);
        any
    }

    fn poll_at(&self, _now: Instant) -> Option<Instant> {
        self.core.poll_at()
    }

    fn validate_ingress(&self) -> bool {
        false
    }

    fn ingress(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        let verdict = match self.core.process(cx.now, port, frame) {
            core::Verdict::Forward(ports) => {
                let last = ports.iter().last();
                for p in ports.iter() {
                    // The last copy takes the buffer itself.
                    let mut copy = if Some(p) == last {
                        std::mem::take(frame)
                    } else {
                        frame.clone()
                    };
                    self.core.address(p, &mut copy);
                    cx.out.inject(p, Direction::ToWire, copy);
                }
                Verdict::Consume
            }
            core::Verdict::Control => Verdict::Consume,
            core::Verdict::Drop(reason) => Verdict::Drop(reason.as_str()),
        };
        self.drain(cx.out);
        verdict
    }

    fn egress(
        &mut self,
        _cx: &mut FrameContext<'_>,
        _port: usize,
        _frame: &mut Vec<u8>,
    ) -> Verdict {
        // The ports' interfaces have no addresses; whatever smoltcp still
        // sends (MLD reports) has no business on the fabric.
        Verdict::Consume
    }

    fn control(&mut self, cx: &mut Context<'_>, _id: u64, args: &[String]) -> ControlReply {
        match args.first().map(String::as_str) {
            Some("links") => {
                let names: Vec<String> = cx.ports.iter().map(|p| p.name.clone()).collect();
                ControlReply::Now(self.links(cx.now, &names))
            }
            Some("help") => ControlReply::Now(json!({
                "commands": {
                    "ping": "liveness and readiness",
                    "stats": "counters (fwd.*), drops by reason (drop.fwd.*)",
                    "ports": "ports and MACs",
                    "links": "per port: link ID, up/down/unknown, neighbour, last hello",
                }
            })),
            _ => ControlReply::Unknown,
        }
    }
}
