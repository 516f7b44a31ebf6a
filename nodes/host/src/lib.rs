//! # The host role: an endpoint on its own smoltcp stack
//!
//! Every svcroute lab needs endpoints that are *ours* — whose TCP/IP stack we
//! own, so ROSA and sticky-service behaviour can live in its shim. A host
//! node serves and fetches HTTP, echoes UDP, and reaches services by name:
//!
//! ```text
//!   kernel curl/wrk ──TCP──▶ [server] listener pool on http_port ─▶ response
//!   svcroute ctl h1 get URL ─▶ [client] job: C connections × keep-alive ─▶ kernel server
//!   any UDP peer ──datagram──▶ [echo] udp_echo_port ─▶ same datagram back
//!   svcroute ctl h1 echo udp://… ─▶ [echo client] one datagram at a time
//!   smoltcp ⇄ [rosa shim] ⇄ wire: service names → virtual addresses,
//!       requests via the ingress SAR, responses via our SAR, then affinity
//! ```
//!
//! - [`server`]: a pool of listening TCP sockets per port (smoltcp has no
//!   `accept`), one HTTP connection state per established socket, responses
//!   naming the instance (header `X-Instance`, first body line).
//! - [`client`]: load-generating client jobs started over the control socket,
//!   with latency percentiles; by address, or by ROSA service name.
//! - [`echo`]: UDP echo client jobs.
//! - [`rosa`]: the ROSA endpoint shim (SPEC §2.2, `docs/shim.md`), sans-IO,
//!   driven from the role's ingress, egress and poll.
//! - [`sticky`]: the UE's part of sticky service (draft 002 §4.3): a
//!   received Sticky-Dst copied into the flow's later packets, and stable
//!   flow labels; used here and by the TUN shim.
//! - UDP echo lives here in `lib.rs`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use serde::Deserialize;
use serde_json::{json, Value};
use smoltcp::iface::{Route, SocketHandle};
use smoltcp::socket::udp;
use smoltcp::wire::{
    EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpListenEndpoint, IpProtocol,
};
use svcroute_stack::runtime::{Context, ControlReply, FrameContext, Role};
use svcroute_stack::shim::{edit, Direction, Outbox, Verdict};
use svcroute_stack::wire::ipv6opt::{OptionRepr, OptionType, OwnedOption, UnknownAction};
use svcroute_stack::wire::rosa::ServiceName;

pub mod client;
pub mod echo;
pub mod latency;
pub mod rosa;
pub mod server;
pub mod sticky;
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
    /// The ROSA endpoint shim (`[host.rosa]`, SPEC §2.2): service names for
    /// client jobs, and serving as an instance.
    pub rosa: Option<rosa::RosaConfig>,
    /// The UE's part of sticky service (`[host.sticky]`, draft 002 §4.3):
    /// Sticky-Dst copying and stable flow labels.
    pub sticky: sticky::StickyConfig,
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
            rosa: None,
            sticky: sticky::StickyConfig::default(),
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
    /// A `[host.rosa]` key is unusable (the message names it).
    #[error("{0}")]
    Rosa(String),
    /// A `[host.sticky]` key is unusable (the message names it).
    #[error("{0}")]
    Sticky(String),
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
        if let Some(r) = &self.rosa {
            r.settings()?;
        }
        self.sticky
            .validate()
            .map_err(|e| ConfigError::Sticky(e.replacen("key `", "key `sticky.", 1)))?;
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

/// A 64-bit seed from a node name (FNV-1a).
pub(crate) fn name_seed(node: &str) -> u64 {
    node.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

pub(crate) fn hex(s: &str) -> Option<Vec<u8>> {
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
    echoes: echo::Echoes,
    echo: Vec<SocketHandle>,
    options: Vec<OwnedOption>,
    options_len: usize,
    rosa: rosa::Shim,
    sticky: sticky::UeSticky,
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
            echoes: echo::Echoes::default(),
            rosa: rosa::Shim::new(cfg.rosa.as_ref())?,
            // Without a configured seed, one from the node name: reproducible
            // in simulations; the binary configures fresh randomness.
            sticky: sticky::UeSticky::new(&cfg.sticky, name_seed(node))
                .map_err(|e| ConfigError::Sticky(e.replacen("key `", "key `sticky.", 1)))?,
            cfg,
            echo: Vec::new(),
        })
    }

    /// The HTTP server (for tests and stats).
    pub fn server(&self) -> &server::Server {
        &self.server
    }

    /// The ROSA shim (for tests and stats).
    pub fn rosa(&self) -> &rosa::Shim {
        &self.rosa
    }

    /// The sticky-service state (for tests and stats).
    pub fn sticky(&self) -> &sticky::UeSticky {
        &self.sticky
    }

    /// Client jobs (HTTP and UDP echo) still running.
    pub fn jobs_running(&self) -> usize {
        self.clients.running() + self.echoes.running()
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

    /// Drive the ROSA shim's timers and hand its frames and next hops to
    /// the runtime. Returns whether it sent or asked anything.
    fn poll_rosa(&mut self, cx: &mut Context<'_>) -> bool {
        if self.rosa.poll_timeout().is_some_and(|t| t <= cx.now) {
            self.rosa.handle_timeout(cx.now, cx.stats);
        }
        self.sticky.handle_timeout(cx.now, cx.stats);
        let mut any = false;
        while let Some((port, addr)) = self.rosa.poll_resolve() {
            any = true;
            let ip = IpAddress::Ipv6(addr);
            match cx.ports.get(port).and_then(|p| p.neighbors().lookup(&ip)) {
                Some(mac) => self.rosa.learn(cx.now, port, addr, mac),
                None => cx.resolve(port, ip),
            }
        }
        any | drain_rosa(&mut self.rosa, cx.out)
    }

    /// Where a client job connects: `None` for a target given as an
    /// address; the virtual address of the service (and its port) for a
    /// service name.
    fn destination(
        &mut self,
        cx: &mut Context<'_>,
        service: Option<&str>,
        rosa: bool,
    ) -> Result<Option<client::Destination>, String> {
        let Some(text) = service else {
            return Ok(None);
        };
        if !rosa && !self.rosa.has_ingress() {
            return Err(format!(
                "{text:?} is not an IP address and a host node has no DNS: reach the service \
                 by ROSA with --rosa (ingress: the IPv6 gateway) or configure [host.rosa] ingress"
            ));
        }
        let name: ServiceName = text
            .parse()
            .map_err(|e| format!("{text:?} is not a ROSA service name: {e}"))?;
        let target = self.rosa.open(cx.now, &name).map_err(|e| {
            cx.stats.bump("rosa.open_refused");
            e.to_string()
        })?;
        // smoltcp reaches the virtual address through the ingress: have its
        // link-layer address ready for the first packet.
        cx.resolve(target.port, IpAddress::Ipv6(target.hop));
        Ok(Some(client::Destination {
            addr: IpAddress::Ipv6(target.virt),
            port: target.port,
            service: name.to_string(),
        }))
    }

    /// Drive the UDP echo jobs; answer the finished ones, with the
    /// instance their ROSA flow was bound to.
    fn poll_echoes(&mut self, cx: &mut Context<'_>) -> bool {
        let (any, done) = self.echoes.poll(cx);
        for mut f in done {
            let instance = self
                .rosa
                .bound_instance(IpProtocol::Udp, f.local_port)
                .map(|i| i.to_string());
            f.result["instance"] = json!(instance);
            cx.replies.push((f.ctl_id, f.result));
        }
        any
    }
}

/// Move the shim's outgoing frames into the runtime's outbox.
fn drain_rosa(shim: &mut rosa::Shim, out: &mut Outbox) -> bool {
    let mut any = false;
    while let Some((port, frame)) = shim.poll_transmit() {
        out.inject(port, Direction::ToWire, frame);
        any = true;
    }
    any
}

impl Host {
    /// Strip our Destination Options header (smoltcp would drop the packet
    /// with a Parameter Problem), counting what it carried; returns the
    /// options, or the verdict for a header we cannot handle.
    fn strip_options(
        cx: &mut FrameContext<'_>,
        frame: &mut Vec<u8>,
    ) -> Result<Vec<OwnedOption>, Verdict> {
        if frame.get(12..14) != Some(&[0x86, 0xdd][..]) {
            return Ok(Vec::new());
        }
        match edit::strip_dest_opts(frame) {
            Ok(None) => Ok(Vec::new()),
            Ok(Some(opts)) => {
                cx.stats.bump("shim.dest_opts_stripped");
                for o in &opts {
                    cx.stats.bump(match o.option_type() {
                        OptionType::Rosa => "shim.option_rx.rosa",
                        OptionType::Sticky => "shim.option_rx.sticky",
                        _ => "shim.option_rx.other",
                    });
                }
                Ok(opts)
            }
            Err(edit::EditError::UnknownOption { .. }) => Err(Verdict::Drop("ipv6_option_unknown")),
            Err(edit::EditError::Fragmented) => Err(Verdict::Drop("ipv6_options_on_fragment")),
            Err(_) => Err(Verdict::Drop("ipv6_options_malformed")),
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
        let ports = cx
            .ports
            .iter()
            .map(|p| rosa::PortInfo {
                mac: match p.iface.hardware_addr() {
                    HardwareAddress::Ethernet(mac) => mac,
                    #[allow(unreachable_patterns)]
                    _ => EthernetAddress([0; 6]),
                },
                addrs: p.iface.ip_addrs().to_vec(),
                gateways: p.gateways.clone(),
            })
            .collect();
        self.rosa.start(cx.now, ports, cx.stats);
        // smoltcp reaches every virtual address through the ingress SAR.
        if let Some((port, via)) = self.rosa.virtual_route() {
            let (prefix, len) = self.rosa.virtual_prefix();
            let route = Route {
                cidr: IpCidr::new(IpAddress::Ipv6(prefix), len),
                via_router: IpAddress::Ipv6(via),
                preferred_until: None,
                expires_at: None,
            };
            let mut full = false;
            cx.ports[port]
                .iface
                .routes_mut()
                .update(|r| full = r.push(route).is_err());
            if full {
                log::warn!("rosa: no room for the route of the virtual prefix");
                cx.stats.bump("rosa.route_table_full");
            }
            cx.resolve(port, IpAddress::Ipv6(via));
        }
        self.poll_rosa(cx);
    }

    fn header_reserve(&self) -> usize {
        let rosa = if self.rosa.configured() {
            rosa::HEADER_RESERVE
        } else {
            0
        };
        let sticky = if self.sticky.copies() {
            sticky::STICKY_RESERVE
        } else {
            0
        };
        self.options_len + rosa + sticky
    }

    /// Strip our options (`Host::strip_options`), let the ROSA shim
    /// rewrite what it must, remember a Sticky-Dst for the flow, and note
    /// SYNs to our services so listeners are armed before smoltcp sees
    /// them.
    fn ingress(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        let opts = match Self::strip_options(cx, frame) {
            Ok(o) => o,
            Err(v) => return v,
        };
        let rosa = opts
            .iter()
            .find(|o| o.option_type() == OptionType::Rosa)
            .map(OwnedOption::data);
        let verdict = self.rosa.ingress(cx.now, port, frame, rosa, cx.stats);
        drain_rosa(&mut self.rosa, cx.out);
        if verdict == Verdict::Pass {
            // As smoltcp will see it: after the ROSA shim's rewrite.
            self.sticky.received(cx.now, frame, &opts, cx.stats);
        }
        if verdict == Verdict::Pass && self.server.saw_syn(port, frame) {
            return Verdict::Drop("tcp_duplicate_syn");
        }
        verdict
    }

    /// Carry the configured options on every TCP and UDP packet over IPv6,
    /// pin the flow label and add a copied Sticky-Dst (as smoltcp sent the
    /// packet), then let the ROSA shim address packets of service flows.
    fn egress(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        let v6 = frame.get(12..14) == Some(&[0x86, 0xdd][..]);
        // Only transport packets: neighbour discovery and MLD stay plain.
        if !self.options.is_empty() && v6 && matches!(frame.get(14 + 6), Some(6 | 17)) {
            let reprs: Vec<OptionRepr<'_>> =
                self.options.iter().map(OwnedOption::as_repr).collect();
            match edit::insert_dest_opts(frame, &reprs) {
                Ok(()) => cx.stats.bump("shim.dest_opts_inserted"),
                Err(_) => return Verdict::Drop("ipv6_options_insert_failed"),
            }
        }
        if !v6 {
            return Verdict::Pass;
        }
        self.sticky
            .sending(cx.now, frame, sticky::STICKY_RESERVE, cx.stats);
        let verdict = self.rosa.egress(cx.now, port, frame, cx.stats);
        drain_rosa(&mut self.rosa, cx.out);
        verdict
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = self.server.poll(cx);
        any |= self.clients.poll(cx);
        any |= self.poll_echoes(cx);
        any |= self.poll_echo(cx);
        any |= self.poll_rosa(cx);
        any
    }

    fn poll_at(&self, now: smoltcp::time::Instant) -> Option<smoltcp::time::Instant> {
        [
            self.server.poll_at(now),
            self.clients.poll_at(now),
            self.echoes.poll_at(),
            self.rosa.poll_timeout(),
            self.sticky.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn control(&mut self, cx: &mut Context<'_>, id: u64, args: &[String]) -> ControlReply {
        match args.first().map(String::as_str) {
            Some("get" | "post") => {
                let started = client::JobSpec::parse(args).and_then(|spec| {
                    let dest = self.destination(cx, spec.service_name(), spec.rosa)?;
                    self.clients.start_job(cx, id, spec, dest);
                    Ok(())
                });
                match started {
                    Ok(()) => ControlReply::Later,
                    Err(e) => ControlReply::Now(json!({ "error": e })),
                }
            }
            Some("echo") => {
                let started = echo::EchoSpec::parse(args).and_then(|spec| {
                    let dest = self.destination(cx, spec.service_name(), spec.rosa)?;
                    self.echoes.start(cx, id, spec, dest)
                });
                match started {
                    Ok(()) => ControlReply::Later,
                    Err(e) => ControlReply::Now(json!({ "error": e })),
                }
            }
            Some("help") => ControlReply::Now(help()),
            Some("server") => ControlReply::Now(self.server.summary()),
            Some("rosa") => ControlReply::Now(self.rosa.summary()),
            Some("sticky") => ControlReply::Now(self.sticky.summary(cx.now)),
            _ => ControlReply::Unknown,
        }
    }

    /// Withdraw what the ROSA shim announced.
    fn stop(&mut self, cx: &mut Context<'_>) {
        self.rosa.stop(cx.stats);
        drain_rosa(&mut self.rosa, cx.out);
    }
}

fn help() -> Value {
    json!({
        "commands": {
            "ping": "liveness and readiness",
            "stats": "counters, drops by reason",
            "ports": "ports, MACs, addresses",
            "server": "HTTP server connections and requests",
            "rosa": "ROSA shim: service names, client and instance flows",
            "sticky": "sticky service (draft 002 §4.3): flows carrying a copied Sticky-Dst, flow labels",
            "get URL [--requests N] [--concurrency C] [--close] [--timeout-ms T] [--rosa] [--service NAME]":
                "fetch URL N times over C keep-alive connections; latency percentiles; \
                 http://SERVICE/ by ROSA (docs/shim.md)",
            "post URL --body-size B [...]": "as get, with a POST body of B bytes",
            "echo udp://HOST[:PORT] [--count N] [--size B] [--timeout-ms T] [--rosa] [--service NAME]":
                "send N datagrams one at a time to a UDP echo (by ROSA for a service name); echoes, losses, latency",
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
        let no_copy = |opts: &[(u8, &str)]| HostConfig {
            sticky: sticky::StickyConfig {
                copy: false,
                ..sticky::StickyConfig::default()
            },
            ..with_options(opts)
        };
        let h = Host::new("h", no_copy(&[(0x3e, "1102aabbccdd")])).unwrap();
        // 2 (next header, length) + 2 + 6 = 10, padded to 16.
        assert_eq!(h.header_reserve(), 16);
        let h = Host::new("h", no_copy(&[(0x1e, ""), (0x3e, "00")])).unwrap();
        assert_eq!(h.header_reserve(), 8);
        assert_eq!(Host::new("h", no_copy(&[])).unwrap().header_reserve(), 0);
        // Copying a Sticky-Dst (the default) reserves room for it too.
        let h = Host::new("h", with_options(&[(0x3e, "1102aabbccdd")])).unwrap();
        assert_eq!(h.header_reserve(), 16 + sticky::STICKY_RESERVE);
        assert_eq!(
            Host::new("h", HostConfig::default())
                .unwrap()
                .header_reserve(),
            sticky::STICKY_RESERVE
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
        let e = Host::new(
            "h",
            HostConfig {
                sticky: sticky::StickyConfig {
                    flow_linger_s: 0,
                    ..sticky::StickyConfig::default()
                },
                ..HostConfig::default()
            },
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("`sticky.flow_linger_s`"), "{e}");
    }
}
