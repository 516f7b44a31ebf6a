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
//! Connections are accepted through the stack's
//! [`ListenPool`](svcroute_stack::listen::ListenPool).

use serde::Deserialize;
use serde_json::{json, Value};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpListenEndpoint};
use svcroute_stack::http::{Limits, ReceivedRequest, Response, ServerConn, ServerEvent};
use svcroute_stack::listen::{ListenConfig, ListenPool};
use svcroute_stack::runtime::PortStack;
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::nr::{Fqdn, NsffId};

use crate::config::NrConfig;
use crate::core::{NrCore, Registered};

const RX: usize = 8 * 1024;
const TX: usize = 64 * 1024;
const IDLE: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct Conn {
    handle: SocketHandle,
    http: ServerConn,
    last: Instant,
}

#[derive(Debug)]
struct PortRest {
    pool: ListenPool,
    conns: Vec<Conn>,
    closing: Vec<SocketHandle>,
}

/// The REST server on every port of the node.
#[derive(Debug)]
pub(crate) struct Rest {
    ports: Vec<PortRest>,
}

impl Rest {
    pub(crate) fn new(cfg: &NrConfig, ports: usize) -> Self {
        let endpoint = IpListenEndpoint {
            addr: cfg.rest_addr.map(IpAddress::from),
            port: cfg.rest_port,
        };
        Self {
            ports: (0..ports)
                .map(|_| PortRest {
                    pool: ListenPool::new(
                        endpoint,
                        ListenConfig {
                            listeners: cfg.rest_listeners,
                            max_connections: cfg.rest_max_connections,
                            rx_buffer: RX,
                            tx_buffer: TX,
                            timeout: Duration::from_secs(60),
                        },
                        "rest.connection_limit",
                    ),
                    conns: Vec::new(),
                    closing: Vec::new(),
                })
                .collect(),
        }
    }

    /// Note a TCP SYN to the REST port on `port` before smoltcp sees it.
    pub(crate) fn saw_syn(&mut self, port: usize, frame: &[u8]) {
        if let Some(p) = self.ports.get_mut(port) {
            p.pool.note_frame(frame);
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
        for (pr, stack) in self.ports.iter_mut().zip(stacks.iter_mut()) {
            let sockets = &mut stack.sockets;
            for handle in pr.pool.accept(sockets, stats) {
                stats.bump("rest.connections");
                pr.conns.push(Conn {
                    handle,
                    http: ServerConn::new(Limits {
                        max_head_bytes: 8 * 1024,
                        max_body_bytes: 4 * 1024,
                        ..Limits::default()
                    }),
                    last: now,
                });
                any = true;
            }
            let mut i = 0;
            while i < pr.conns.len() {
                let c = &mut pr.conns[i];
                let sock = sockets.get_mut::<tcp::Socket>(c.handle);
                let mut closed = false;
                loop {
                    match c.http.poll(sock) {
                        ServerEvent::Request(req) => {
                            any = true;
                            c.last = now;
                            stats.bump("rest.requests");
                            let (status, body) = answer(&req, now, core);
                            stats.bump(match status {
                                200..=299 => "rest.status_2xx",
                                400..=499 => "rest.status_4xx",
                                _ => "rest.status_5xx",
                            });
                            let mut resp = Response::new(status)
                                .with_header("Server", "svcroute-nr")
                                .with_header("Content-Type", "application/json");
                            if status != 204 {
                                let mut b = body.to_string().into_bytes();
                                b.push(b'\n');
                                resp = resp.with_body(b);
                            }
                            if c.http.respond(resp).is_err() {
                                stats.drop("rest_http_state");
                                closed = true;
                                break;
                            }
                        }
                        ServerEvent::Error(e) => {
                            any = true;
                            stats.drop(match e.status() {
                                413 => "rest_body_too_large",
                                431 => "rest_header_too_large",
                                _ => "rest_bad_request",
                            });
                        }
                        ServerEvent::Idle => break,
                        ServerEvent::Closed => {
                            any = true;
                            closed = true;
                            break;
                        }
                    }
                }
                let idle = now - c.last > IDLE;
                if closed || idle {
                    if idle {
                        sock.close();
                    }
                    pr.closing.push(c.handle);
                    pr.conns.swap_remove(i);
                    pr.pool.release();
                    continue;
                }
                i += 1;
            }
            pr.closing.retain(|&h| {
                if sockets.get::<tcp::Socket>(h).is_open() {
                    return true;
                }
                sockets.remove(h);
                false
            });
        }
        any
    }

    /// When idle connections must next be looked at.
    pub(crate) fn poll_at(&self) -> Option<Instant> {
        self.ports
            .iter()
            .flat_map(|p| p.conns.iter().map(|c| c.last + IDLE))
            .min()
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
