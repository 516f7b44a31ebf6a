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
use svcroute_stack::runtime::{Context, ControlReply, FrameContext, Role};
use svcroute_stack::shim::{edit, Verdict};
use svcroute_stack::wire::ipv6opt::{OptionRepr, OptionType, OwnedOption, UnknownAction};

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
    /// IPv6 options this host carries, in a Destination Options header, on
    /// every TCP and UDP packet it sends over IPv6 (SPEC §0).
    pub insert_options: Vec<OptionConfig>,
}

/// One `[[host.insert_options]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptionConfig {
    /// The option type, e.g. `0x3e` (ROSA) or `0x1e` (sticky).
    #[serde(rename = "type")]
    pub option_type: u8,
    /// The option data, as hex (at most 255 bytes).
    #[serde(default)]
    pub data: String,
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
            insert_options: Vec::new(),
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
    /// An `insert_options` entry is unusable.
    #[error("key `insert_options`: {0}")]
    BadOption(String),
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
        self.option_reprs()?;
        if let Some(i) = &self.instance {
            if i.is_empty() || i.len() > 64 || !i.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(ConfigError::BadInstance(i.clone()));
            }
        }
        Ok(())
    }
}

impl HostConfig {
    /// The configured options, decoded.
    fn option_reprs(&self) -> Result<Vec<OwnedOption>, ConfigError> {
        self.insert_options
            .iter()
            .map(|o| {
                let t = OptionType::from(o.option_type);
                if t.is_padding() {
                    return Err(ConfigError::BadOption(format!("type {t} is padding")));
                }
                if t.unknown_action() != UnknownAction::Skip {
                    return Err(ConfigError::BadOption(format!(
                        "type 0x{:02x}: its action bits make peers that do not know it drop the packet; use a type with the high bits 00 (e.g. 0x1e, 0x3e)",
                        o.option_type
                    )));
                }
                let data = hex(&o.data)
                    .ok_or_else(|| ConfigError::BadOption(format!("data {:?} is not hex", o.data)))?;
                let repr = OptionRepr::new(t, &data)
                    .map_err(|e| ConfigError::BadOption(format!("type {t}: {e}")))?;
                OwnedOption::from_repr(&repr)
                    .ok_or_else(|| ConfigError::BadOption(format!("type {t} cannot be carried")))
            })
            .collect()
    }
}

fn hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Largest datagram the UDP echo returns; larger ones are dropped and counted.
pub const ECHO_MAX: usize = 2048;

/// The host role.
pub struct Host {
    cfg: HostConfig,
    server: server::Server,
    clients: client::Clients,
    echo: Vec<SocketHandle>,
    options: Vec<OwnedOption>,
    options_len: usize,
}

impl Host {
    /// A host named `node` (the default instance name).
    pub fn new(node: &str, cfg: HostConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let instance = cfg.instance.clone().unwrap_or_else(|| node.to_owned());
        let options = cfg.option_reprs()?;
        // Next header + length, the options, padded to 8 octets.
        let raw: usize = 2 + options.iter().map(|o| 2 + o.data().len()).sum::<usize>();
        let options_len = if options.is_empty() {
            0
        } else {
            raw.div_ceil(8) * 8
        };
        Ok(Self {
            options,
            options_len,
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
                let mut buf = [0u8; ECHO_MAX];
                let (n, meta) = match sock.recv_slice(&mut buf) {
                    Ok(r) => r,
                    // smoltcp dropped a datagram larger than the buffer.
                    Err(udp::RecvError::Truncated) => {
                        any = true;
                        cx.stats.drop("udp_echo_too_big");
                        continue;
                    }
                    Err(udp::RecvError::Exhausted) => break,
                };
                any = true;
                cx.stats.bump("udp_echo.datagrams");
                if sock.send_slice(&buf[..n], meta.endpoint).is_err() {
                    cx.stats.drop("udp_echo_tx_full");
                }
            }
        }
        any
    }
}

impl Host {
    /// Strip our Destination Options header (smoltcp would drop the packet
    /// with a Parameter Problem), counting what it carried.
    fn strip_options(&mut self, cx: &mut FrameContext<'_>, frame: &mut Vec<u8>) -> Verdict {
        if frame.get(12..14) != Some(&[0x86, 0xdd][..]) {
            return Verdict::Pass;
        }
        match edit::strip_dest_opts(frame) {
            Ok(None) => Verdict::Pass,
            Ok(Some(opts)) => {
                cx.stats.bump("shim.dest_opts_stripped");
                for o in &opts {
                    cx.stats.bump(match o.option_type() {
                        OptionType::Rosa => "shim.option_rx.rosa",
                        OptionType::Sticky => "shim.option_rx.sticky",
                        _ => "shim.option_rx.other",
                    });
                }
                Verdict::Pass
            }
            Err(edit::EditError::UnknownOption { .. }) => Verdict::Drop("ipv6_option_unknown"),
            Err(edit::EditError::Fragmented) => Verdict::Drop("ipv6_options_on_fragment"),
            Err(_) => Verdict::Drop("ipv6_options_malformed"),
        }
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

    fn header_reserve(&self) -> usize {
        self.options_len
    }

    /// Strip our options (see [`Host::strip_options`]) and note SYNs to our
    /// services so listeners are armed before smoltcp sees them.
    fn ingress(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        let verdict = self.strip_options(cx, frame);
        if verdict == Verdict::Pass {
            self.server.saw_syn(port, frame);
        }
        verdict
    }

    /// Carry the configured options on every TCP and UDP packet over IPv6.
    fn egress(&mut self, cx: &mut FrameContext<'_>, _port: usize, frame: &mut Vec<u8>) -> Verdict {
        if self.options.is_empty() || frame.get(12..14) != Some(&[0x86, 0xdd][..]) {
            return Verdict::Pass;
        }
        // Only transport packets: neighbour discovery and MLD stay plain.
        if !matches!(frame.get(14 + 6), Some(6 | 17)) {
            return Verdict::Pass;
        }
        let reprs: Vec<OptionRepr<'_>> = self.options.iter().map(OwnedOption::as_repr).collect();
        match edit::insert_dest_opts(frame, &reprs) {
            Ok(()) => {
                cx.stats.bump("shim.dest_opts_inserted");
                Verdict::Pass
            }
            Err(_) => Verdict::Drop("ipv6_options_insert_failed"),
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

#[cfg(test)]
mod test {
    use super::*;

    fn with_options(opts: &[(u8, &str)]) -> HostConfig {
        HostConfig {
            insert_options: opts
                .iter()
                .map(|&(t, d)| OptionConfig {
                    option_type: t,
                    data: d.into(),
                })
                .collect(),
            ..HostConfig::default()
        }
    }

    #[test]
    fn options_reserve_their_padded_header() {
        let h = Host::new("h", with_options(&[(0x3e, "1102aabbccdd")])).unwrap();
        // 2 (next header, length) + 2 + 6 = 10, padded to 16.
        assert_eq!(h.header_reserve(), 16);
        let h = Host::new("h", with_options(&[(0x1e, ""), (0x3e, "00")])).unwrap();
        assert_eq!(h.header_reserve(), 8);
        assert_eq!(
            Host::new("h", HostConfig::default())
                .unwrap()
                .header_reserve(),
            0
        );
    }

    #[test]
    fn unusable_options_are_refused_with_the_reason() {
        let err = |opts: &[(u8, &str)]| {
            Host::new("h", with_options(opts))
                .err()
                .unwrap()
                .to_string()
        };
        assert!(err(&[(0x00, "")]).contains("padding"));
        assert!(err(&[(0x01, "00")]).contains("padding"));
        // 0x5e: action bits 01, peers that do not know it drop the packet.
        assert!(err(&[(0x5e, "")]).contains("action bits"));
        assert!(err(&[(0x3e, "abc")]).contains("not hex"));
        assert!(err(&[(0x3e, "zz")]).contains("not hex"));
        assert!(
            err(&[(0x3e, &"00".repeat(256))]).contains("0x3e")
                || err(&[(0x3e, &"00".repeat(256))]).contains("ROSA")
        );
    }

    #[test]
    fn out_of_range_keys_are_named() {
        let e = Host::new(
            "h",
            HostConfig {
                listeners: 0,
                ..HostConfig::default()
            },
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("listeners"), "{e}");
        let e = Host::new(
            "h",
            HostConfig {
                instance: Some("a b".into()),
                ..HostConfig::default()
            },
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("instance"), "{e}");
    }
}
