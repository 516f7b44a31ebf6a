//! A small JSON-over-HTTP/1.1 server on a port's smoltcp stack: the REST
//! loops of the NR (orchestration, `rest_port`) and the nSFF (SF
//! registration, `sf_rest_port`) are this one loop with their own
//! handlers, limits and counter names.
//!
//! ```text
//!   frames ──note_frame──► ListenPool (more listeners on SYNs)
//!   poll(now) ──accept──► Conn { ServerConn } ──Request──► handler(req) ──► (status, JSON)
//!                              └─ idle for `idle`, closed, or a reply that cannot be
//!                                 queued: closed, swept once the socket is shut
//! ```
//!
//! A decoding error is counted (by the role's name for it) and answered by
//! the HTTP layer ([`ServerConn`]), which closes the connection after the
//! answer. Answers carry `Server` and `Content-Type: application/json`; a
//! 204 has no body, every other answer is the JSON value and a newline.

use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpListenEndpoint;

use crate::http::{Limits, ReceivedRequest, Response, ServerConn, ServerEvent};
use crate::listen::{ListenConfig, ListenPool};
use crate::stats::Counters;

/// How an event is counted: a plain counter or a drop reason
/// (`drop.<reason>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// `stats.bump(name)`.
    Bump(&'static str),
    /// `stats.drop(reason)`.
    Drop(&'static str),
}

impl Count {
    fn apply(self, stats: &mut Counters) {
        match self {
            Self::Bump(n) => stats.bump(n),
            Self::Drop(r) => stats.drop(r),
        }
    }
}

/// The counter names a role gives the server's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Names {
    /// A connection accepted.
    pub connections: &'static str,
    /// A connection refused at `max_connections` (the pool's counter).
    pub connection_limit: &'static str,
    /// A request decoded (before the handler runs).
    pub requests: &'static str,
    /// A body over `max_body_bytes` (413).
    pub body_too_large: Count,
    /// A head over `max_head_bytes` (431).
    pub head_too_large: Count,
    /// Any other decoding error.
    pub malformed: Count,
    /// An answer the connection could not take (it closes), if counted.
    pub respond_failed: Option<Count>,
}

/// The server's bounds and names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Where it listens.
    pub endpoint: IpListenEndpoint,
    /// Listening sockets kept armed.
    pub listeners: usize,
    /// Connections at once.
    pub max_connections: usize,
    /// TCP receive buffer per connection.
    pub rx_buffer: usize,
    /// TCP transmit buffer per connection.
    pub tx_buffer: usize,
    /// Request head and body bounds.
    pub limits: Limits,
    /// A connection with no request for this long is closed.
    pub idle: Duration,
    /// The `Server` header.
    pub server: &'static str,
    /// Counter names.
    pub names: Names,
}

#[derive(Debug)]
struct Conn {
    handle: SocketHandle,
    http: ServerConn,
    last: Instant,
}

/// The server on one port's stack.
#[derive(Debug)]
pub struct Server {
    cfg: Config,
    pool: ListenPool,
    conns: Vec<Conn>,
    closing: Vec<SocketHandle>,
}

impl Server {
    /// A server for `cfg` (listening from the first [`Server::poll`]).
    pub fn new(cfg: Config) -> Self {
        Self {
            pool: ListenPool::new(
                cfg.endpoint,
                ListenConfig {
                    listeners: cfg.listeners,
                    max_connections: cfg.max_connections,
                    rx_buffer: cfg.rx_buffer,
                    tx_buffer: cfg.tx_buffer,
                    timeout: Duration::from_secs(60),
                },
                cfg.names.connection_limit,
            ),
            cfg,
            conns: Vec::new(),
            closing: Vec::new(),
        }
    }

    /// Note a frame received on the port (SYNs arm more listeners).
    pub fn note_frame(&mut self, frame: &[u8]) {
        self.pool.note_frame(frame);
    }

    /// Accept, serve and reap connections; `handler` answers each request
    /// with a status and a JSON body. Returns whether anything happened.
    pub fn poll(
        &mut self,
        now: Instant,
        sockets: &mut SocketSet<'static>,
        stats: &mut Counters,
        mut handler: impl FnMut(&ReceivedRequest, &mut Counters) -> (u16, serde_json::Value),
    ) -> bool {
        let names = self.cfg.names;
        let mut any = false;
        for handle in self.pool.accept(sockets, stats) {
            stats.bump(names.connections);
            self.conns.push(Conn {
                handle,
                http: ServerConn::new(self.cfg.limits),
                last: now,
            });
            any = true;
        }
        let mut i = 0;
        while i < self.conns.len() {
            let c = &mut self.conns[i];
            let sock = sockets.get_mut::<tcp::Socket>(c.handle);
            let mut closed = false;
            loop {
                match c.http.poll(sock) {
                    ServerEvent::Request(req) => {
                        any = true;
                        c.last = now;
                        stats.bump(names.requests);
                        let (status, body) = handler(&req, stats);
                        let mut resp = Response::new(status)
                            .with_header("Server", self.cfg.server)
                            .with_header("Content-Type", "application/json");
                        if status != 204 {
                            let mut b = body.to_string().into_bytes();
                            b.push(b'\n');
                            resp = resp.with_body(b);
                        }
                        if c.http.respond(resp).is_err() {
                            if let Some(n) = names.respond_failed {
                                n.apply(stats);
                            }
                            closed = true;
                            break;
                        }
                    }
                    ServerEvent::Error(e) => {
                        any = true;
                        match e.status() {
                            413 => names.body_too_large,
                            431 => names.head_too_large,
                            _ => names.malformed,
                        }
                        .apply(stats);
                    }
                    ServerEvent::Idle => break,
                    ServerEvent::Closed => {
                        any = true;
                        closed = true;
                        break;
                    }
                }
            }
            let idle = now - c.last > self.cfg.idle;
            if closed || idle {
                if idle {
                    sock.close();
                }
                self.closing.push(c.handle);
                self.conns.swap_remove(i);
                self.pool.release();
                continue;
            }
            i += 1;
        }
        self.closing.retain(|&h| {
            if sockets.get::<tcp::Socket>(h).is_open() {
                return true;
            }
            sockets.remove(h);
            false
        });
        any
    }

    /// When idle connections must next be looked at.
    pub fn poll_at(&self) -> Option<Instant> {
        self.conns.iter().map(|c| c.last + self.cfg.idle).min()
    }
}
