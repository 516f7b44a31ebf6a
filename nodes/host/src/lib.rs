//! # The host role: an endpoint on its own smoltcp stack
//!
//! Every svcroute lab needs endpoints that are *ours* — whose TCP/IP stack we
//! own, so later roles can add ROSA and sticky-service behaviour in its shim.
//! A host node serves and fetches HTTP and echoes UDP:
//!
//! ```text
//!   kernel curl/wrk ──TCP──▶ [server] listener pool on http_port ─▶ response
//!   svcroute ctl h1 get URL ─▶ [client] job: C connections × keep-alive ─▶ kernel server
//!   any UDP peer ──datagram──▶ [echo] udp_echo_port ─▶ same datagram back
//! ```
//!
//! - [`server`]: a pool of listening TCP sockets per port (smoltcp has no
//!   `accept`), one HTTP connection state per established socket, responses
//!   naming the instance (header `X-Instance`, first body line).
//! - [`client`]: load-generating client jobs started over the control socket,
//!   with latency percentiles.
//! - UDP echo lives here in `lib.rs`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use serde::Deserialize;
use serde_json::{json, Value};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::udp;
use smoltcp::wire::IpListenEndpoint;
use svcroute_stack::runtime::{Context, ControlReply, Role};

pub mod client;
pub mod latency;
pub mod server;
pub mod url;

/// The `[host]` section of a node file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    /// TCP port of the HTTP server (0: no server).
    pub http_port: u16,
    /// Instance name returned in `X-Instance` and the body (default: node name).
    pub instance: Option<String>,
    /// Size in bytes of the default response body.
    pub body_size: usize,
    /// UDP echo port (0: no echo).
    pub udp_echo_port: u16,
    /// TCP discard port: accepts connections and throws their bytes away,
    /// counting them (0: none). The bulk-throughput sink.
    pub discard_port: u16,
    /// Listening sockets kept ready per port (connections accepted in a burst).
    pub listeners: usize,
    /// Most simultaneous server connections per port; more SYNs are refused.
    pub max_connections: usize,
    /// TCP receive buffer per connection, bytes.
    pub tcp_rx_buffer: usize,
    /// TCP send buffer per connection, bytes.
    pub tcp_tx_buffer: usize,
    /// Largest HTTP request or response head accepted, bytes.
    pub max_header_bytes: usize,
    /// Largest HTTP body accepted, bytes.
    pub max_body_bytes: usize,
    /// Largest body served by `GET /bytes/<n>`.
    pub max_generated_body: usize,
    /// Close server connections idle for this many seconds.
    pub idle_timeout_s: u64,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            http_port: 80,
            instance: None,
            body_size: 1024,
            udp_echo_port: 7,
            discard_port: 9,
            listeners: 16,
            max_connections: 2048,
            tcp_rx_buffer: 64 * 1024,
            tcp_tx_buffer: 64 * 1024,
            max_header_bytes: 16 * 1024,
            max_body_bytes: 16 * 1024 * 1024,
            max_generated_body: 1 << 30,
            idle_timeout_s: 120,
        }
    }
}

/// A configuration value the host cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A numeric key is out of its range.
    #[error("key `{key}`: {value} is out of range {range}")]
    OutOfRange {
        /// The key.
        key: &'static str,
        /// The value given.
        value: u64,
        /// The allowed range, as text.
        range: &'static str,
    },
    /// The instance name is unusable in a header.
    #[error("key `instance`: {0:?} must be 1..64 visible ASCII characters")]
    BadInstance(String),
}

impl HostConfig {
    /// Check ranges; the node refuses to start on an error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let check = |key, value: usize, lo: usize, hi: usize, range| {
            if (lo..=hi).contains(&value) {
                Ok(())
            } else {
                Err(ConfigError::OutOfRange {
                    key,
                    value: value as u64,
                    range,
                })
            }
        };
        check("listeners", self.listeners, 1, 1024, "1..=1024")?;
        check(
            "max_connections",
            self.max_connections,
            1,
            65_536,
            "1..=65536",
        )?;
        check(
            "tcp_rx_buffer",
            self.tcp_rx_buffer,
            1024,
            1 << 30,
            "1024..=2^30",
        )?;
        check(
            "tcp_tx_buffer",
            self.tcp_tx_buffer,
            1024,
            1 << 30,
            "1024..=2^30",
        )?;
        check(
            "max_header_bytes",
            self.max_header_bytes,
            256,
            1 << 20,
            "256..=2^20",
        )?;
        check("body_size", self.body_size, 0, 1 << 30, "0..=2^30")?;
        if let Some(i) = &self.instance {
            if i.is_empty() || i.len() > 64 || !i.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(ConfigError::BadInstance(i.clone()));
            }
        }
        Ok(())
    }
}

/// The host role.
pub struct Host {
    cfg: HostConfig,
    server: server::Server,
    clients: client::Clients,
    echo: Vec<SocketHandle>,
}

impl Host {
    /// A host named `node` (the default instance name).
    pub fn new(node: &str, cfg: HostConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let instance = cfg.instance.clone().unwrap_or_else(|| node.to_owned());
        Ok(Self {
            server: server::Server::new(&cfg, instance),
            clients: client::Clients::new(&cfg),
            cfg,
            echo: Vec::new(),
        })
    }

    /// The HTTP server (for tests and stats).
    pub fn server(&self) -> &server::Server {
        &self.server
    }

    /// Client jobs still running.
    pub fn jobs_running(&self) -> usize {
        self.clients.running()
    }

    fn poll_echo(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        for (port, &h) in cx.ports.iter_mut().zip(&self.echo) {
            let sock = port.sockets.get_mut::<udp::Socket>(h);
            // Echo what fits in the TX buffer; the rest waits in RX.
            while sock.can_recv() && sock.can_send() {
                let mut buf = [0u8; 2048];
                let Ok((n, meta)) = sock.recv_slice(&mut buf) else {
                    break;
                };
                any = true;
                cx.stats.bump("udp_echo.datagrams");
                if n == buf.len() {
                    // A datagram over 2 KiB was truncated: do not echo a lie.
                    cx.stats.drop("udp_echo_too_big");
                    continue;
                }
                if sock.send_slice(&buf[..n], meta.endpoint).is_err() {
                    cx.stats.drop("udp_echo_tx_full");
                }
            }
        }
        any
    }
}

impl Role for Host {
    fn name(&self) -> &'static str {
        "host"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        self.server.start(cx);
        if self.cfg.udp_echo_port != 0 {
            for port in cx.ports.iter_mut() {
                let mk = || {
                    udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 64], vec![0; 64 * 2048])
                };
                let mut sock = udp::Socket::new(mk(), mk());
                // NOTE(unwrap): a fresh socket bound to a non-zero port cannot fail.
                sock.bind(IpListenEndpoint {
                    addr: None,
                    port: self.cfg.udp_echo_port,
                })
                .unwrap();
                self.echo.push(port.sockets.add(sock));
            }
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = self.server.poll(cx);
        any |= self.clients.poll(cx);
        any |= self.poll_echo(cx);
        any
    }

    fn poll_at(&self, now: smoltcp::time::Instant) -> Option<smoltcp::time::Instant> {
        [self.server.poll_at(now), self.clients.poll_at(now)]
            .into_iter()
            .flatten()
            .min()
    }

    fn control(&mut self, cx: &mut Context<'_>, id: u64, args: &[String]) -> ControlReply {
        match args.first().map(String::as_str) {
            Some("get" | "post") => match client::JobSpec::parse(args) {
                Ok(spec) => {
                    self.clients.start_job(cx, id, spec);
                    ControlReply::Later
                }
                Err(e) => ControlReply::Now(json!({ "error": e })),
            },
            Some("help") => ControlReply::Now(help()),
            Some("server") => ControlReply::Now(self.server.summary()),
            _ => ControlReply::Unknown,
        }
    }
}

fn help() -> Value {
    json!({
        "commands": {
            "ping": "liveness and readiness",
            "stats": "counters, drops by reason",
            "ports": "ports, MACs, addresses",
            "server": "HTTP server connections and requests",
            "get URL [--requests N] [--concurrency C] [--close] [--timeout-ms T]":
                "fetch URL N times over C keep-alive connections; latency percentiles",
            "post URL --body-size B [...]": "as get, with a POST body of B bytes",
        }
    })
}
