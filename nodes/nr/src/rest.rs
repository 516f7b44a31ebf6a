//! The orchestration REST API (SPEC §1.4, RFC 8677 registration option 2)
//! on the node's own smoltcp TCP stack.
//!
//! | request | answer |
//! |---|---|
//! | `POST /register {"fqdn","nsff_id"}` | 201 added, 200 already registered, 400 bad JSON/name/nSFF, 409 hash collision, 507 table full |
//! | `DELETE /register/<fqdn>/<nsff_id>` | 204, 404 not registered, 400 bad name/ID |
//! | `GET /names` | 200, the registration table as JSON |
//! | other paths / methods | 404 / 405 |
//!
//! Answers are JSON (`{"error": "<reason>"}` on failure).
//!
//! The server loop is the stack's [`svcroute_stack::rest::Server`], one per
//! port; this module is the handler.

use serde::Deserialize;
use serde_json::{json, Value};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpListenEndpoint};
use svcroute_stack::http::{Limits, ReceivedRequest};
use svcroute_stack::rest::{self, Count, Server};
use svcroute_stack::runtime::PortStack;
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::nr::{Fqdn, NsffId};

use crate::config::NrConfig;
use crate::core::{NrCore, Registered};

const RX: usize = 8 * 1024;
const TX: usize = 64 * 1024;
const IDLE: Duration = Duration::from_secs(30);

/// The REST server on every port of the node.
#[derive(Debug)]
pub(crate) struct Rest {
    ports: Vec<Server>,
}

impl Rest {
    pub(crate) fn new(cfg: &NrConfig, ports: usize) -> Self {
        let server = rest::Config {
            endpoint: IpListenEndpoint {
                addr: cfg.rest_addr.map(IpAddress::from),
                port: cfg.rest_port,
            },
            listeners: cfg.rest_listeners,
            max_connections: cfg.rest_max_connections,
            rx_buffer: RX,
            tx_buffer: TX,
            limits: Limits {
                max_head_bytes: 8 * 1024,
                max_body_bytes: 4 * 1024,
                ..Limits::default()
            },
            idle: IDLE,
            server: "svcroute-nr",
            names: rest::Names {
                connections: "rest.connections",
                connection_limit: "rest.connection_limit",
                requests: "rest.requests",
                body_too_large: Count::Drop("nr.rest_body_too_large"),
                head_too_large: Count::Drop("nr.rest_header_too_large"),
                malformed: Count::Drop("nr.rest_bad_request"),
                respond_failed: Some(Count::Drop("nr.rest_http_state")),
            },
        };
        Self {
            ports: (0..ports).map(|_| Server::new(server)).collect(),
        }
    }

    /// Note a TCP SYN to the REST port on `port` before smoltcp sees it.
    pub(crate) fn saw_syn(&mut self, port: usize, frame: &[u8]) {
        if let Some(p) = self.ports.get_mut(port) {
            p.note_frame(frame);
        }
    }

    /// Accept, serve and reap connections; returns whether anything happened.
    pub(crate) fn poll(
        &mut self,
        now: Instant,
        stacks: &mut [PortStack],
        stats: &mut Counters,
        core: &mut NrCore,
    ) -> bool {
        let mut any = false;
        for (server, stack) in self.ports.iter_mut().zip(stacks.iter_mut()) {
            any |= server.poll(now, &mut stack.sockets, stats, |req, stats| {
                let (status, body) = answer(req, now, core);
                stats.bump(match status {
                    200..=299 => "rest.status_2xx",
                    400..=499 => "rest.status_4xx",
                    _ => "rest.status_5xx",
                });
                (status, body)
            });
        }
        any
    }

    /// When idle connections must next be looked at.
    pub(crate) fn poll_at(&self) -> Option<Instant> {
        self.ports.iter().filter_map(Server::poll_at).min()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RegisterBody {
    fqdn: String,
    nsff_id: u8,
}

fn error(status: u16, reason: &str) -> (u16, Value) {
    (status, json!({ "error": reason }))
}

/// The status and JSON body answering `req`.
fn answer(req: &ReceivedRequest, now: Instant, core: &mut NrCore) -> (u16, Value) {
    let h = &req.head;
    let path = h.target.split('?').next().unwrap_or("");
    match (h.method.as_str(), path) {
        ("POST", "/register") => {
            let Ok(b) = serde_json::from_slice::<RegisterBody>(&req.body) else {
                return error(400, "body must be {\"fqdn\": string, \"nsff_id\": 0..254}");
            };
            let Ok(fqdn) = Fqdn::new(&b.fqdn) else {
                return error(400, "fqdn is not a host name");
            };
            let Some(nsff) = NsffId::new(b.nsff_id) else {
                return error(400, "nsff_id must be 0..254");
            };
            let hash = fqdn.hash();
            let body = json!({ "fqdn": fqdn.as_str(), "hash": hash, "nsff_id": nsff.value() });
            match core.register(now, hash, Some(fqdn), nsff) {
                Ok(Registered::Added) => (201, body),
                Ok(Registered::Refreshed) => (200, body),
                Err(r) => error(r.status(), r.reason()),
            }
        }
        ("DELETE", p) if p.starts_with("/register/") => {
            let rest = &p["/register/".len()..];
            let Some((name, id)) = rest.rsplit_once('/') else {
                return error(400, "use DELETE /register/<fqdn>/<nsff_id>");
            };
            let Ok(fqdn) = Fqdn::new(name) else {
                return error(400, "fqdn is not a host name");
            };
            let Some(nsff) = id.parse::<u8>().ok().and_then(NsffId::new) else {
                return error(400, "nsff_id must be 0..254");
            };
            match core.deregister(now, fqdn.hash(), Some(&fqdn), nsff) {
                Ok(()) => (204, Value::Null),
                Err(r) => error(r.status(), r.reason()),
            }
        }
        ("GET", "/names") => (200, crate::driver::names_json(core)),
        (_, "/register" | "/names") => error(405, "method not allowed"),
        (_, p) if p.starts_with("/register/") => error(405, "method not allowed"),
        _ => error(404, "no such resource; try POST /register, GET /names"),
    }
}
