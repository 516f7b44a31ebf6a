//! The Service Access Gateway (SPEC §2.4, draft-trossen-rtgwg-rosa-arch
//! §3.6): a SAR that originates `*` for itself, so every request whose
//! name the domain does not know ends here, and serves it from outside
//! the domain.
//!
//! ```text
//!   Service Request, FIB pick = `*` = us ─► Gateway::handle_request
//!       first name segment ─► Resolver (cache by TTL; AAAA then A via the
//!       configured server) ─ waiting requests parked per name (bounded)
//!       AAAA S ─► Proxy::request: rewritten toward the non-ROSA server S
//!       no address / IPv4 only / failure ─► dropped, counted (the driver
//!       answers the client with Destination Unreachable)
//!   plain TCP/UDP to us ─► Gateway::plain ─► Proxy::plain
//!       server → client (Service Response via the Ingress until the
//!       client talks to us directly), client → server
//! ```
//!
//! Sans-IO like the SAR core: the driver feeds frames, DNS datagrams and
//! time, and sends what comes out. See `docs/sag.md`.

pub mod dns;
pub mod encap;
pub mod proxy;

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr};

use serde::Deserialize;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpProtocol;
use svcroute_stack::shim::edit::{self, AddrField};
use svcroute_stack::wire::ipv6opt::{OptionRepr, OptionType};
use svcroute_stack::wire::rosa::{Entry, Message, ServiceName};

use crate::config::ConfigError;
use crate::counters::{Counters, Tally};
use dns::{Answer, Lookup, Resolver, ResolverConfig};
use proxy::{Proxy, ProxyConfig, Request};

/// The local UDP port the SAG asks its DNS server from.
pub const DNS_LOCAL_PORT: u16 = 7473;

/// The `gateway` table of a `sag` node's section (`[sag.gateway]`, in a
/// lab `[node.config.gateway]`). Every key is optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// The DNS server (IPv6). None: nothing is resolved and every unknown
    /// name is refused (`drop.sag.no_dns_server`).
    pub dns_server: Option<String>,
    /// Its port.
    pub dns_port: u16,
    /// Milliseconds to wait for an answer before asking again.
    pub dns_timeout_ms: u64,
    /// How many times a query is repeated before the name fails.
    pub dns_retries: u8,
    /// Most cached names.
    pub max_cache: usize,
    /// Seconds a name without an address stays cached (when the answer has
    /// no SOA to say).
    pub negative_ttl_s: u32,
    /// TTLs are clamped to this.
    pub max_ttl_s: u32,
    /// Names resolved at start (popular services).
    pub prepopulate: Vec<String>,
    /// Names being resolved at once.
    pub max_resolving: usize,
    /// Requests parked while their name is resolved.
    pub max_waiting: usize,
    /// Most proxied flows.
    pub max_flows: usize,
    /// Seconds a proxied flow may be idle.
    pub flow_idle_s: u64,
    /// Seconds a proxied TCP flow is kept after its connection closed
    /// (FIN both ways, or RST), counted from its last packet.
    pub flow_linger_s: u64,
    /// Proxy ports `[low, high]` (the SAG's ports toward servers).
    pub proxy_ports: [u16; 2],
    /// Ask `_rosa.<name>` first: its AAAA is the SAG of the ROSA domain
    /// that hosts the name, which gets the request.
    pub rosa_domains: bool,
    /// Hand requests to other domains' SAGs inside UDP (port 7471) rather
    /// than as plain IPv6 with the option.
    pub udp_encap: bool,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            dns_server: None,
            dns_port: 53,
            dns_timeout_ms: 1000,
            dns_retries: 2,
            max_cache: 4096,
            negative_ttl_s: 30,
            max_ttl_s: 3600,
            prepopulate: Vec::new(),
            max_resolving: 64,
            max_waiting: 256,
            max_flows: 4096,
            flow_idle_s: 120,
            flow_linger_s: proxy::DEFAULT_LINGER_S,
            proxy_ports: [40_000, 59_999],
            rosa_domains: true,
            udp_encap: false,
        }
    }
}

/// A validated `gateway` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewaySettings {
    /// The DNS server and port.
    pub dns_server: Option<(Ipv6Addr, u16)>,
    /// The resolver's limits.
    pub resolver: ResolverConfig,
    /// The proxy's limits.
    pub proxy: ProxyConfig,
    /// Names resolved at start.
    pub prepopulate: Vec<String>,
    /// Requests parked while their name is resolved.
    pub max_waiting: usize,
    /// Ask `_rosa.<name>` first.
    pub rosa_domains: bool,
    /// Hand requests over inside UDP 7471.
    pub udp_encap: bool,
}

impl GatewayConfig {
    /// Check every value; `seed` seeds the DNS query IDs.
    pub fn settings(&self, seed: u64) -> Result<GatewaySettings, ConfigError> {
        let dns_server = match &self.dns_server {
            None => None,
            Some(s) => {
                let a: Ipv6Addr = s.parse().map_err(|_| ConfigError::Parse {
                    key: "gateway.dns_server",
                    value: s.clone(),
                    what: "an IPv6 address (the SAR routes IPv6 only)",
                })?;
                Some((a, self.dns_port))
            }
        };
        let range = |key: &'static str, v: u64, lo: u64, hi: u64, what: &'static str| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(ConfigError::Range {
                    key,
                    value: v,
                    range: what,
                })
            }
        };
        range(
            "gateway.dns_port",
            self.dns_port.into(),
            1,
            65_535,
            "1..=65535",
        )?;
        range(
            "gateway.dns_timeout_ms",
            self.dns_timeout_ms,
            10,
            60_000,
            "10..=60000",
        )?;
        range(
            "gateway.dns_retries",
            self.dns_retries.into(),
            0,
            10,
            "0..=10",
        )?;
        range(
            "gateway.max_cache",
            self.max_cache as u64,
            0,
            10_000_000,
            "0..=10000000",
        )?;
        range(
            "gateway.max_ttl_s",
            self.max_ttl_s.into(),
            1,
            604_800,
            "1..=604800",
        )?;
        range(
            "gateway.max_resolving",
            self.max_resolving as u64,
            1,
            65_536,
            "1..=65536",
        )?;
        range(
            "gateway.max_waiting",
            self.max_waiting as u64,
            1,
            1_000_000,
            "1..=1000000",
        )?;
        range(
            "gateway.max_flows",
            self.max_flows as u64,
            1,
            1_000_000,
            "1..=1000000",
        )?;
        range(
            "gateway.flow_idle_s",
            self.flow_idle_s,
            1,
            86_400,
            "1..=86400",
        )?;
        range(
            "gateway.flow_linger_s",
            self.flow_linger_s,
            1,
            3600,
            "1..=3600",
        )?;
        let [lo, hi] = self.proxy_ports;
        if lo < 1024 || hi < lo || (lo..=hi).contains(&DNS_LOCAL_PORT) || (lo..=hi).contains(&7470)
        {
            return Err(ConfigError::Parse {
                key: "gateway.proxy_ports",
                value: format!("{:?}", self.proxy_ports),
                what: "[low, high] with 1024 <= low <= high, not holding 7470 or 7473",
            });
        }
        if self.max_flows > usize::from(hi - lo) + 1 {
            return Err(ConfigError::Range {
                key: "gateway.max_flows",
                value: self.max_flows as u64,
                range: "at most the number of proxy_ports",
            });
        }
        for n in &self.prepopulate {
            if dns::canonical(n).is_none() {
                return Err(ConfigError::Parse {
                    key: "gateway.prepopulate",
                    value: n.clone(),
                    what: "a DNS name",
                });
            }
        }
        Ok(GatewaySettings {
            dns_server,
            resolver: ResolverConfig {
                max_cache: self.max_cache,
                max_pending: self.max_resolving,
                timeout: Duration::from_millis(self.dns_timeout_ms),
                retries: self.dns_retries,
                negative_ttl_s: self.negative_ttl_s,
                max_ttl_s: self.max_ttl_s,
                seed,
            },
            proxy: ProxyConfig {
                max_flows: self.max_flows,
                idle: Duration::from_secs(self.flow_idle_s),
                linger: Duration::from_secs(self.flow_linger_s),
                port_min: lo,
                port_max: hi,
            },
            prepopulate: self.prepopulate.clone(),
            max_waiting: self.max_waiting,
            rosa_domains: self.rosa_domains,
            udp_encap: self.udp_encap,
        })
    }
}

/// A Service Request the gateway took: where it came in and what its
/// option says.
#[derive(Debug, Clone)]
pub struct Taken {
    /// The port it arrived on.
    pub port: usize,
    /// The frame as it arrived.
    pub frame: Vec<u8>,
    /// Client, Ingress, Service (the server is filled once resolved).
    pub client: Ipv6Addr,
    /// The Ingress entry.
    pub ingress: Ipv6Addr,
    /// The Service entry.
    pub service: ServiceName,
    /// The request's ROSA option.
    pub msg: Message,
    /// Which name is being asked for it.
    pub stage: Stage,
}

/// Which DNS name a request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Stage {
    /// `_rosa.<name>`: the SAG of the domain hosting the name.
    #[default]
    Domain,
    /// `<name>`: a non-ROSA server.
    Server,
}

/// What became of a request.
#[derive(Debug, Clone)]
pub struct Done {
    /// The request (its frame rewritten toward the server when `Ok`).
    pub taken: Taken,
    /// `Ok`: route the frame; `Err(counter)`: refused (counted), answer
    /// the client with Destination Unreachable.
    pub result: Result<(), &'static str>,
    /// Send the frame inside UDP 7471 to this SAG (a hand-over).
    pub encap_to: Option<Ipv6Addr>,
}

/// The gateway: resolver, parked requests, proxy. Call order: as the SAR
/// core's; after any input drain [`Self::poll_dns`], and call
/// [`Self::handle_timeout`] at [`Self::poll_timeout`].
#[derive(Debug)]
pub struct Gateway {
    resolver: Resolver,
    proxy: Proxy,
    waiting: HashMap<String, VecDeque<Taken>>,
    waiting_len: usize,
    max_waiting: usize,
    has_server: bool,
    rosa_domains: bool,
    udp_encap: bool,
    me: Ipv6Addr,
    handovers: HashMap<HandoverKey, Handover>,
    max_handovers: usize,
    handover_idle: Duration,
    tally: Tally,
}

/// A request another domain's SAG handed to us: its client's flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HandoverKey {
    /// The Client entry.
    pub client: IpAddr,
    /// The Port entry's protocol.
    pub proto: IpProtocol,
    /// The client's transport port.
    pub client_port: u16,
    /// The Port entry's port.
    pub service_port: u16,
}

/// What we replaced when we became the ingress of a handed-over request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handover {
    /// The client's ingress SAR in its own domain.
    pub ingress: IpAddr,
    /// The SAG that handed it over (the SAG entry).
    pub sag: IpAddr,
    /// It came inside UDP 7471: the response goes back so.
    pub encap: bool,
    /// Last use.
    pub last: Instant,
}

impl Gateway {
    /// A gateway at `me` (the SAG's address), resolving the prepopulated
    /// names from `now`.
    pub fn new(s: &GatewaySettings, me: Ipv6Addr, now: Instant) -> Self {
        let mut g = Self {
            resolver: Resolver::new(s.resolver.clone()),
            proxy: Proxy::new(s.proxy.clone(), me),
            waiting: HashMap::new(),
            waiting_len: 0,
            max_waiting: s.max_waiting,
            has_server: s.dns_server.is_some(),
            rosa_domains: s.rosa_domains,
            udp_encap: s.udp_encap,
            me,
            handovers: HashMap::new(),
            max_handovers: s.proxy.max_flows,
            handover_idle: s.proxy.idle,
            tally: Tally::default(),
        };
        if g.has_server {
            for n in &s.prepopulate {
                g.tally.bump("sag.dns_prepopulate");
                let _ = g.resolver.lookup(now, n);
            }
        }
        g
    }

    /// A Service Request for which the FIB chose `*` (us). `None`: parked
    /// until its name is resolved.
    pub fn handle_request(&mut self, now: Instant, mut taken: Taken) -> Option<Done> {
        self.tally.bump("sag.request");
        if taken.msg.sag().is_some() {
            // Handed over to us, and our domain has no instance for it.
            return Some(self.refuse(taken, "drop.sag.handover_no_instance"));
        }
        taken.stage = if self.rosa_domains {
            Stage::Domain
        } else {
            Stage::Server
        };
        self.resolve(now, taken)
    }

    fn resolve(&mut self, now: Instant, taken: Taken) -> Option<Done> {
        let Some(name) = first_segment(&taken.service) else {
            return Some(self.refuse(taken, "drop.sag.bad_name"));
        };
        if !self.has_server {
            return Some(self.refuse(taken, "drop.sag.no_dns_server"));
        }
        let name = match taken.stage {
            Stage::Domain => format!("_rosa.{name}"),
            Stage::Server => name,
        };
        match self.resolver.lookup(now, &name) {
            Lookup::Hit(a) => self.answer(now, taken, a),
            Lookup::Wait => {
                if self.waiting_len >= self.max_waiting {
                    return Some(self.refuse(taken, "drop.sag.waiting_full"));
                }
                let key = dns::canonical(&name).unwrap_or(name);
                self.waiting.entry(key).or_default().push_back(taken);
                self.waiting_len += 1;
                self.tally.bump("sag.request_waiting");
                None
            }
            // The resolver counted these.
            Lookup::Full | Lookup::BadName => Some(Done {
                taken,
                result: Err("drop.sag.unresolved"),
                encap_to: None,
            }),
        }
    }

    /// A datagram from the DNS server: the requests it settles.
    pub fn handle_dns(&mut self, now: Instant, bytes: &[u8]) -> Vec<Done> {
        match self.resolver.handle_response(now, bytes) {
            Some((name, answer)) => self.settle(now, &name, answer),
            None => Vec::new(),
        }
    }

    /// Timers: DNS retries and failures, idle and closed flows.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<Done> {
        self.proxy.expire(now);
        let idle = self.handover_idle;
        self.handovers.retain(|_, h| h.last + idle > now);
        let mut out = Vec::new();
        for name in self.resolver.handle_timeout(now) {
            out.extend(self.settle(now, &name, Answer::Failed));
        }
        out
    }

    /// A plain TCP/UDP packet addressed to us.
    pub fn plain(&mut self, now: Instant, frame: &mut Vec<u8>) -> proxy::Verdict {
        self.proxy.plain(now, frame)
    }

    /// The next query for the DNS server.
    #[must_use]
    pub fn poll_dns(&mut self) -> Option<Vec<u8>> {
        self.resolver.poll_transmit()
    }

    /// When [`Self::handle_timeout`] has work.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.resolver.poll_timeout(), self.proxy.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The resolver (cache, counters).
    pub const fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    /// The proxy (flows, counters).
    pub const fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// Requests parked for DNS.
    pub const fn waiting(&self) -> usize {
        self.waiting_len
    }

    /// Counter increments since the last call (resolver and proxy too).
    pub fn drain_counters(&mut self) -> Counters {
        let mut c = Counters::new();
        self.tally.drain_into(&mut c);
        for (k, v) in self
            .resolver
            .drain_counters()
            .into_iter()
            .chain(self.proxy.drain_counters())
        {
            *c.entry(k).or_insert(0) += v;
        }
        c
    }

    fn settle(&mut self, now: Instant, name: &str, answer: Answer) -> Vec<Done> {
        let Some(list) = self.waiting.remove(name) else {
            return Vec::new();
        };
        self.waiting_len -= list.len();
        list.into_iter()
            .filter_map(|t| self.answer(now, t, answer))
            .collect()
    }

    /// `None`: waiting again (the next name of the request).
    fn answer(&mut self, now: Instant, taken: Taken, answer: Answer) -> Option<Done> {
        match (taken.stage, answer) {
            (Stage::Domain, Answer::V6(sag)) => Some(self.hand_over(taken, sag)),
            (Stage::Domain, _) => {
                // No ROSA domain hosts it: a server, then.
                let taken = Taken {
                    stage: Stage::Server,
                    ..taken
                };
                self.resolve(now, taken)
            }
            (Stage::Server, _) => Some(self.proxy_to_server(now, taken, answer)),
        }
    }

    /// Hand the request to the SAG of the domain that hosts its name:
    /// add our SAG entry, send it there from our address.
    fn hand_over(&mut self, mut taken: Taken, sag: Ipv6Addr) -> Done {
        if sag == self.me {
            return self.refuse(taken, "drop.sag.handover_loop");
        }
        let mut msg = taken.msg.clone();
        msg.set(Entry::Sag(IpAddr::V6(self.me)));
        let orig = taken.frame.clone();
        let me = self.me;
        let ok = msg
            .to_bytes()
            .ok()
            .and_then(|b| {
                let opt = OptionRepr::new(OptionType::Rosa, &b).ok()?;
                edit::insert_dest_opts(&mut taken.frame, &[opt]).ok()?;
                edit::rewrite_addr(&mut taken.frame, AddrField::Dst, IpAddr::V6(sag)).ok()?;
                edit::rewrite_addr(&mut taken.frame, AddrField::Src, IpAddr::V6(me)).ok()
            })
            .is_some();
        if !ok {
            taken.frame = orig;
            return self.refuse(taken, "drop.sag.handover_edit_failed");
        }
        self.tally.bump("sag.handover_out");
        Done {
            taken,
            result: Ok(()),
            encap_to: self.udp_encap.then_some(sag),
        }
    }

    /// A request another domain's SAG handed to us (it carries a SAG entry
    /// that is not ours): we become its ingress. Remember the client's
    /// ingress and that SAG for the response; `None` if the table is full
    /// (`drop.sag.handovers_full`).
    pub fn handover_in(
        &mut self,
        now: Instant,
        key: HandoverKey,
        ingress: IpAddr,
        sag: IpAddr,
        encap: bool,
    ) -> Option<()> {
        if !self.handovers.contains_key(&key) && self.handovers.len() >= self.max_handovers {
            let idle = self.handover_idle;
            self.handovers.retain(|_, h| h.last + idle > now);
            if self.handovers.len() >= self.max_handovers {
                // The driver counts the drop (drop.sag.handovers_full).
                return None;
            }
        }
        self.handovers.insert(
            key,
            Handover {
                ingress,
                sag,
                encap,
                last: now,
            },
        );
        self.tally.bump("sag.handover_in");
        Some(())
    }

    /// The response of a handed-over request: where it goes back (the
    /// other domain's ingress, through its SAG).
    pub fn handover_back(&mut self, now: Instant, key: &HandoverKey) -> Option<Handover> {
        let Some(h) = self.handovers.get_mut(key) else {
            self.tally.bump("drop.sag.handover_unknown");
            return None;
        };
        h.last = now;
        self.tally.bump("sag.handover_back");
        Some(*h)
    }

    /// Handed-over flows remembered.
    pub fn handovers(&self) -> impl Iterator<Item = (&HandoverKey, &Handover)> {
        self.handovers.iter()
    }

    fn proxy_to_server(&mut self, now: Instant, mut taken: Taken, answer: Answer) -> Done {
        let server = match answer {
            Answer::V6(s) => s,
            Answer::V4Only(_) => return self.refuse(taken, "drop.sag.ipv4_only"),
            Answer::NoAddress => return self.refuse(taken, "drop.sag.no_address"),
            Answer::Failed => return self.refuse(taken, "drop.sag.dns_failed"),
        };
        let req = Request {
            client: taken.client,
            ingress: taken.ingress,
            service: taken.service.clone(),
            server,
        };
        let result = match self.proxy.request(now, &mut taken.frame, &req) {
            proxy::Verdict::Forward => Ok(()),
            // The proxy counted it.
            proxy::Verdict::Drop(r) => Err(r),
            proxy::Verdict::NotOurs => Err("drop.sag.proxy_not_tcp_udp"),
        };
        Done {
            taken,
            result,
            encap_to: None,
        }
    }

    fn refuse(&mut self, taken: Taken, reason: &'static str) -> Done {
        self.tally.bump(reason);
        Done {
            taken,
            result: Err(reason),
            encap_to: None,
        }
    }
}

/// The name asked of the DNS: the first segment of the service name
/// (`example.net/video` → `example.net`), if it is text.
pub fn first_segment(name: &ServiceName) -> Option<String> {
    let seg = name.segments().next()?;
    let s = std::str::from_utf8(seg).ok()?;
    dns::canonical(s)
}

#[cfg(test)]
mod tests {
    use simple_dns::RCODE;

    use super::dns::tests::answer;
    use super::proxy::tests::{request_msg, tcp};
    use super::*;

    const SAG: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xbc, 0, 0, 0, 0, 0, 2);
    const SARI: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xa, 0, 0, 0, 0, 0, 1);
    const CLIENT: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xa, 0, 0, 0, 0, 0, 0x10);
    const SERVER: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xe, 0, 0, 0, 0, 0, 0x80);

    fn t(s: u64) -> Instant {
        Instant::from_secs(s as i64)
    }

    fn gateway(prepopulate: &[&str]) -> Gateway {
        let cfg = GatewayConfig {
            dns_server: Some("fd00:e::53".into()),
            rosa_domains: false,
            prepopulate: prepopulate.iter().map(|s| (*s).to_owned()).collect(),
            ..GatewayConfig::default()
        };
        Gateway::new(&cfg.settings(7).unwrap(), SAG, t(0))
    }

    fn taken(name: &str, cport: u16) -> Taken {
        let mut m = request_msg();
        m.set(Entry::Service(name.parse().unwrap()));
        Taken {
            port: 0,
            frame: tcp(SARI, SAG, cport, 80, Some(&m)),
            client: CLIENT,
            ingress: SARI,
            service: name.parse().unwrap(),
            msg: m,
            stage: Stage::default(),
        }
    }

    #[test]
    fn prepopulated_names_are_served_without_asking() {
        let mut g = gateway(&["pre.example", "popular.example"]);
        let q1 = g.poll_dns().unwrap();
        let q2 = g.poll_dns().unwrap();
        assert!(g.poll_dns().is_none());
        assert!(g
            .handle_dns(t(0), &answer(&q1, Some(SERVER), None, 60, RCODE::NoError))
            .is_empty());
        assert!(g
            .handle_dns(t(0), &answer(&q2, Some(SERVER), None, 60, RCODE::NoError))
            .is_empty());
        // The first request for a prepopulated name goes at once.
        let d = g
            .handle_request(t(1), taken("pre.example/video", 5000))
            .unwrap();
        assert_eq!(d.result, Ok(()));
        assert_eq!(d.taken.frame, tcp(SAG, SERVER, 40000, 80, None));
        assert!(g.poll_dns().is_none(), "nothing asked");
        let c = g.drain_counters();
        assert_eq!(c.get("sag.dns_prepopulate"), Some(&2));
        assert_eq!(c.get("sag.dns_cache_hit"), Some(&1));
    }

    #[test]
    fn requests_wait_for_one_query_then_go_or_are_refused() {
        let mut g = gateway(&[]);
        assert!(g.handle_request(t(0), taken("a.example", 1)).is_none());
        assert!(g.handle_request(t(0), taken("a.example", 2)).is_none());
        assert_eq!(g.waiting(), 2);
        let q = g.poll_dns().unwrap();
        assert!(g.poll_dns().is_none(), "one query for both");
        let done = g.handle_dns(t(0), &answer(&q, Some(SERVER), None, 60, RCODE::NoError));
        assert_eq!(done.len(), 2);
        assert!(done.iter().all(|d| d.result == Ok(())));
        assert_eq!(g.waiting(), 0);
        assert_eq!(g.proxy().flows().count(), 2);

        // NXDOMAIN: refused; cached negatively, so the next is refused at once.
        assert!(g.handle_request(t(0), taken("nx.example", 3)).is_none());
        let q = g.poll_dns().unwrap();
        let done = g.handle_dns(t(0), &answer(&q, None, None, 0, RCODE::NameError));
        assert_eq!(done[0].result, Err("drop.sag.no_address"));
        assert_eq!(
            done[0].taken.frame,
            taken("nx.example", 3).frame,
            "untouched"
        );
        let d = g.handle_request(t(1), taken("nx.example", 4)).unwrap();
        assert_eq!(d.result, Err("drop.sag.no_address"));

        // A silent server: retries, then the waiting request is refused.
        assert!(g.handle_request(t(10), taken("slow.example", 5)).is_none());
        let mut refused = Vec::new();
        for s in 10..20 {
            refused.extend(g.handle_timeout(t(s)));
        }
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].result, Err("drop.sag.dns_failed"));
    }

    #[test]
    fn a_name_of_another_domain_is_handed_to_its_sag() {
        const G2: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xff, 0, 0, 0, 0, 0, 2);
        let cfg = GatewayConfig {
            dns_server: Some("fd00:e::53".into()),
            udp_encap: true,
            ..GatewayConfig::default()
        };
        let mut g = Gateway::new(&cfg.settings(7).unwrap(), SAG, t(0));
        let req = taken("shop.example/cart", 1);
        assert!(g.handle_request(t(0), req.clone()).is_none());
        let q = g.poll_dns().unwrap();
        let asked = simple_dns::Packet::parse(&q).unwrap().questions[0]
            .qname
            .to_string();
        assert_eq!(asked, "_rosa.shop.example");
        let done = g.handle_dns(t(0), &answer(&q, Some(G2), None, 60, RCODE::NoError));
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].result, Ok(()));
        assert_eq!(done[0].encap_to, Some(G2), "inside UDP, as configured");
        let mut m = req.msg.clone();
        m.set(Entry::Sag(IpAddr::V6(SAG)));
        assert_eq!(done[0].taken.frame, tcp(SAG, G2, 1, 80, Some(&m)));

        // A name no domain claims: then its own address, a server.
        assert!(g.handle_request(t(0), taken("example.net", 2)).is_none());
        let q = g.poll_dns().unwrap();
        assert!(g
            .handle_dns(t(0), &answer(&q, None, None, 0, RCODE::NameError))
            .is_empty());
        let q = g.poll_dns().unwrap();
        let done = g.handle_dns(t(0), &answer(&q, Some(SERVER), None, 60, RCODE::NoError));
        assert_eq!(done[0].result, Ok(()));
        assert_eq!(done[0].encap_to, None);
        assert_eq!(done[0].taken.frame, tcp(SAG, SERVER, 40000, 80, None));

        // A request handed over to us that our domain cannot serve.
        let mut back = taken("lost.example", 3);
        back.msg.set(Entry::Sag(IpAddr::V6(G2)));
        let d = g.handle_request(t(0), back).unwrap();
        assert_eq!(d.result, Err("drop.sag.handover_no_instance"));
    }

    #[test]
    fn handed_over_flows_are_remembered_until_idle() {
        let mut g = gateway(&[]);
        let key = HandoverKey {
            client: IpAddr::V6(CLIENT),
            proto: IpProtocol::Tcp,
            client_port: 51000,
            service_port: 80,
        };
        let sag = IpAddr::V6(Ipv6Addr::new(0xfd00, 0xab, 0, 0, 0, 0, 0, 2));
        assert!(g
            .handover_in(t(0), key, IpAddr::V6(SARI), sag, true)
            .is_some());
        let h = g.handover_back(t(60), &key).unwrap();
        assert_eq!((h.ingress, h.sag, h.encap), (IpAddr::V6(SARI), sag, true));
        // Idle for flow_idle_s (120 s) since its last use: forgotten.
        g.handle_timeout(t(180));
        assert!(g.handover_back(t(180), &key).is_none());
        let c = g.drain_counters();
        assert_eq!(c.get("drop.sag.handover_unknown"), Some(&1));
    }

    #[test]
    fn config_is_checked() {
        let bad = |c: GatewayConfig| c.settings(1).unwrap_err().to_string();
        let e = bad(GatewayConfig {
            dns_server: Some("10.0.0.53".into()),
            ..GatewayConfig::default()
        });
        assert!(e.contains("gateway.dns_server"), "{e}");
        let e = bad(GatewayConfig {
            proxy_ports: [7000, 8000],
            ..GatewayConfig::default()
        });
        assert!(e.contains("gateway.proxy_ports"), "{e}");
        let e = bad(GatewayConfig {
            proxy_ports: [40000, 40009],
            max_flows: 11,
            ..GatewayConfig::default()
        });
        assert!(e.contains("gateway.max_flows"), "{e}");
        let e = bad(GatewayConfig {
            flow_linger_s: 0,
            ..GatewayConfig::default()
        });
        assert!(e.contains("gateway.flow_linger_s"), "{e}");
        let s = GatewayConfig {
            flow_linger_s: 4,
            ..GatewayConfig::default()
        }
        .settings(1)
        .unwrap();
        assert_eq!(s.proxy.linger, Duration::from_secs(4));
        let e = bad(GatewayConfig {
            prepopulate: vec!["not a name".into()],
            ..GatewayConfig::default()
        });
        assert!(e.contains("gateway.prepopulate"), "{e}");
    }
}
