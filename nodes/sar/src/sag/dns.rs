//! The SAG's stub resolver (sans-IO): AAAA then A of a name, asked of one
//! configured server over UDP, answers cached by their TTL.
//!
//! ```text
//!   lookup(now, name) ─ cached, live ─► Hit(Answer)
//!        │ not cached (or expired)
//!        ▼
//!   pending[name] ─ AAAA query ─► poll_transmit ─► (driver: UDP to the server)
//!        ▲                                                   │
//!        │ NOERROR, no AAAA: A query                          ▼
//!   handle_response(now, bytes) ─► Some((name, Answer)): cached for the TTL
//!   handle_timeout(now) ─► resend (retries), then the names that failed
//! ```
//!
//! Messages are encoded and decoded with `simple-dns`. A reply counts only
//! if it carries the ID of a pending query, the response flag, and the
//! question that was asked (name and type): anything else is dropped and
//! counted, so a stray or spoofed datagram cannot fill the cache.
//!
//! The cache holds at most `max_cache` names. At the cap, expired entries
//! go first, then the one closest to expiry (`sag.dns_cache_evicted`).
//! Prepopulated names are asked at start like any other; their answers
//! expire by TTL too (a later request asks again).

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr};

use simple_dns::rdata::RData;
use simple_dns::{Name, Packet, PacketFlag, Question, CLASS, QCLASS, QTYPE, RCODE, TYPE};
use smoltcp::time::{Duration, Instant};

use crate::counters::{Counters, Tally};

/// What a name resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Answer {
    /// An AAAA record: the address to use.
    V6(Ipv6Addr),
    /// No AAAA, but an A record (the SAG does not proxy to IPv4).
    V4Only(Ipv4Addr),
    /// NXDOMAIN, or neither AAAA nor A (cached for the negative TTL).
    NoAddress,
    /// The server failed (SERVFAIL, REFUSED, ...) or never answered: not
    /// cached.
    Failed,
}

/// Resolver limits and timers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolverConfig {
    /// Most cached names.
    pub max_cache: usize,
    /// Most names being resolved at once.
    pub max_pending: usize,
    /// How long to wait for an answer before asking again.
    pub timeout: Duration,
    /// How many times a query is sent again before the name fails.
    pub retries: u8,
    /// Seconds a name without an address stays cached.
    pub negative_ttl_s: u32,
    /// TTLs are clamped to this many seconds.
    pub max_ttl_s: u32,
    /// Query ID seed (IDs are a seeded sequence, unique among pending
    /// queries).
    pub seed: u64,
}

impl Default for ResolverConfig {
    fn default() -> Self {
        Self {
            max_cache: 4096,
            max_pending: 64,
            timeout: Duration::from_millis(1000),
            retries: 2,
            negative_ttl_s: 30,
            max_ttl_s: 3600,
            seed: 1,
        }
    }
}

/// The answer to [`Resolver::lookup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Cached and live.
    Hit(Answer),
    /// Being resolved: [`Resolver::handle_response`] or
    /// [`Resolver::handle_timeout`] will name it.
    Wait,
    /// Too many names are being resolved (`drop.sag.dns_pending_full`).
    Full,
    /// Not a DNS name (`drop.sag.bad_name`).
    BadName,
}

/// A cached answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cached {
    /// The answer.
    pub answer: Answer,
    /// When it expires.
    pub expires: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Aaaa,
    A,
}

#[derive(Debug, Clone)]
struct Query {
    stage: Stage,
    id: u16,
    sent: Instant,
    tries: u8,
}

/// The stub resolver. Call order: [`Self::lookup`] for each name; after
/// any input drain [`Self::poll_transmit`] (queries for the server); feed
/// the server's datagrams to [`Self::handle_response`]; call
/// [`Self::handle_timeout`] at [`Self::poll_timeout`] (spurious calls are
/// harmless).
#[derive(Debug)]
pub struct Resolver {
    cfg: ResolverConfig,
    cache: HashMap<String, Cached>,
    pending: HashMap<String, Query>,
    ids: HashMap<u16, String>,
    rng: u64,
    out: VecDeque<Vec<u8>>,
    tally: Tally,
}

impl Resolver {
    /// An empty resolver.
    pub fn new(cfg: ResolverConfig) -> Self {
        Self {
            rng: cfg.seed,
            cfg,
            cache: HashMap::new(),
            pending: HashMap::new(),
            ids: HashMap::new(),
            out: VecDeque::new(),
            tally: Tally::default(),
        }
    }

    /// The answer for `name` if cached and live; else start resolving it
    /// (unless already under way).
    pub fn lookup(&mut self, now: Instant, name: &str) -> Lookup {
        let Some(name) = canonical(name) else {
            self.tally.bump("drop.sag.bad_name");
            return Lookup::BadName;
        };
        if let Some(c) = self.cache.get(&name) {
            if c.expires > now {
                self.tally.bump("sag.dns_cache_hit");
                return Lookup::Hit(c.answer);
            }
            self.cache.remove(&name);
            self.tally.bump("sag.dns_cache_expired");
        }
        if self.pending.contains_key(&name) {
            return Lookup::Wait;
        }
        if self.pending.len() >= self.cfg.max_pending {
            self.tally.bump("drop.sag.dns_pending_full");
            return Lookup::Full;
        }
        self.tally.bump("sag.dns_cache_miss");
        self.ask(now, name, Stage::Aaaa, 0);
        Lookup::Wait
    }

    /// A datagram from the server. `Some` when it settles a name: the
    /// answer, already cached (unless [`Answer::Failed`] or TTL 0).
    pub fn handle_response(&mut self, now: Instant, bytes: &[u8]) -> Option<(String, Answer)> {
        let Ok(p) = Packet::parse(bytes) else {
            self.tally.bump("drop.sag.dns_malformed");
            return None;
        };
        let Some(name) = self.ids.get(&p.id()).cloned() else {
            self.tally.bump("drop.sag.dns_unexpected");
            return None;
        };
        let Some(q) = self.pending.get(&name).cloned() else {
            self.tally.bump("drop.sag.dns_unexpected");
            return None;
        };
        let want = match q.stage {
            Stage::Aaaa => TYPE::AAAA,
            Stage::A => TYPE::A,
        };
        let asked = p.questions.len() == 1
            && p.questions[0].qtype == QTYPE::TYPE(want)
            && canonical(&p.questions[0].qname.to_string()).as_deref() == Some(name.as_str());
        if !p.has_flags(PacketFlag::RESPONSE) || !asked {
            self.tally.bump("drop.sag.dns_unexpected");
            return None;
        }
        if p.has_flags(PacketFlag::TRUNCATION) {
            // No TCP fallback: an address record set never needs it here.
            self.tally.bump("sag.dns_truncated");
        }
        self.ids.remove(&q.id);
        self.tally.bump("sag.dns_answer");
        let rcode = p.rcode();
        let found = match rcode {
            RCODE::NoError => Ok(records(&p)),
            RCODE::NameError => Err(true),
            _ => Err(false),
        };
        let (answer, ttl) = match (found, q.stage) {
            (Ok((Some((v6, ttl)), _)), _) => (Answer::V6(v6), ttl),
            (Ok((None, Some((v4, ttl)))), Stage::A) => (Answer::V4Only(v4), ttl),
            (Ok(_), Stage::Aaaa) => {
                // NODATA for AAAA: ask for A.
                self.pending.remove(&name);
                self.ask(now, name, Stage::A, 0);
                return None;
            }
            (Ok(_), Stage::A) | (Err(true), _) => {
                self.tally.bump("sag.dns_no_address");
                (Answer::NoAddress, negative_ttl(&p, self.cfg.negative_ttl_s))
            }
            (Err(false), _) => {
                self.tally.bump("drop.sag.dns_server_failure");
                (Answer::Failed, 0)
            }
        };
        self.pending.remove(&name);
        if answer != Answer::Failed {
            self.insert(now, name.clone(), answer, ttl);
        }
        Some((name, answer))
    }

    /// Queries due again are sent again; names out of retries are returned
    /// (`drop.sag.dns_timeout`), not cached.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<String> {
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, q)| q.sent + self.cfg.timeout <= now)
            .map(|(n, _)| n.clone())
            .collect();
        let mut failed = Vec::new();
        for name in due {
            let Some(q) = self.pending.remove(&name) else {
                continue;
            };
            self.ids.remove(&q.id);
            if q.tries < self.cfg.retries {
                self.tally.bump("sag.dns_retry");
                self.ask(now, name, q.stage, q.tries + 1);
            } else {
                self.tally.bump("drop.sag.dns_timeout");
                failed.push(name);
            }
        }
        failed
    }

    /// The next query to send to the server.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// When [`Self::handle_timeout`] has work.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pending
            .values()
            .map(|q| q.sent + self.cfg.timeout)
            .min()
    }

    /// The cached entry of `name`, live or not.
    pub fn cached(&self, name: &str) -> Option<&Cached> {
        self.cache.get(&canonical(name)?)
    }

    /// Every cached entry.
    pub fn cache(&self) -> impl Iterator<Item = (&String, &Cached)> {
        self.cache.iter()
    }

    /// Names being resolved.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Cumulative counters.
    pub const fn counters(&self) -> &Counters {
        self.tally.total()
    }

    /// Counter increments since the last call.
    pub fn drain_counters(&mut self) -> Counters {
        let mut c = Counters::new();
        self.tally.drain_into(&mut c);
        c
    }

    fn ask(&mut self, now: Instant, name: String, stage: Stage, tries: u8) {
        let id = self.fresh_id();
        let qtype = match stage {
            Stage::Aaaa => TYPE::AAAA,
            Stage::A => TYPE::A,
        };
        let Some(bytes) = query(id, &name, qtype) else {
            self.tally.bump("drop.sag.bad_name");
            return;
        };
        self.out.push_back(bytes);
        self.tally.bump(match stage {
            Stage::Aaaa => "sag.dns_query_aaaa",
            Stage::A => "sag.dns_query_a",
        });
        self.ids.insert(id, name.clone());
        self.pending.insert(
            name,
            Query {
                stage,
                id,
                sent: now,
                tries,
            },
        );
    }

    fn fresh_id(&mut self) -> u16 {
        loop {
            // splitmix64
            self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.rng;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let id = (z ^ (z >> 31)) as u16;
            if !self.ids.contains_key(&id) {
                return id;
            }
        }
    }

    fn insert(&mut self, now: Instant, name: String, answer: Answer, ttl: u32) {
        let ttl = ttl.min(self.cfg.max_ttl_s);
        if ttl == 0 || self.cfg.max_cache == 0 {
            return;
        }
        if !self.cache.contains_key(&name) && self.cache.len() >= self.cfg.max_cache {
            self.cache.retain(|_, c| c.expires > now);
            if self.cache.len() >= self.cfg.max_cache {
                let victim = self
                    .cache
                    .iter()
                    .min_by_key(|(n, c)| (c.expires, (*n).clone()))
                    .map(|(n, _)| n.clone());
                if let Some(v) = victim {
                    self.cache.remove(&v);
                    self.tally.bump("sag.dns_cache_evicted");
                }
            }
        }
        let expires = now + Duration::from_secs(u64::from(ttl));
        self.cache.insert(name, Cached { answer, expires });
    }
}

/// The lower-cased name without a trailing dot, if it is a DNS name:
/// 1..=253 octets of letters, digits, `-`, `_` and dots, labels 1..=63.
pub fn canonical(name: &str) -> Option<String> {
    let n = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let ok = !n.is_empty()
        && n.len() <= 253
        && n.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    ok.then_some(n)
}

/// A recursive query for `name`, type `qtype`.
fn query(id: u16, name: &str, qtype: TYPE) -> Option<Vec<u8>> {
    let mut p = Packet::new_query(id);
    p.set_flags(PacketFlag::RECURSION_DESIRED);
    let qname = Name::new(name).ok()?;
    p.questions.push(Question::new(
        qname,
        QTYPE::TYPE(qtype),
        QCLASS::CLASS(CLASS::IN),
        false,
    ));
    p.build_bytes_vec().ok()
}

/// An address with its TTL.
type WithTtl<A> = Option<(A, u32)>;

/// The first AAAA and the first A in the answer section, each with the
/// smallest TTL of the answer chain (CNAMEs included).
fn records(p: &Packet<'_>) -> (WithTtl<Ipv6Addr>, WithTtl<Ipv4Addr>) {
    let chain_ttl = p.answers.iter().map(|r| r.ttl).min().unwrap_or(0);
    let mut v6 = None;
    let mut v4 = None;
    for r in &p.answers {
        match &r.rdata {
            RData::AAAA(a) if v6.is_none() => {
                v6 = Some((Ipv6Addr::from(a.address), chain_ttl.min(r.ttl)));
            }
            RData::A(a) if v4.is_none() => {
                v4 = Some((Ipv4Addr::from(a.address), chain_ttl.min(r.ttl)));
            }
            _ => {}
        }
    }
    (v6, v4)
}

/// The negative TTL (RFC 2308): the SOA's minimum and TTL in the
/// authority section, else the configured default.
fn negative_ttl(p: &Packet<'_>, default: u32) -> u32 {
    p.name_servers
        .iter()
        .find_map(|r| match &r.rdata {
            RData::SOA(soa) => Some(soa.minimum.min(r.ttl)),
            _ => None,
        })
        .unwrap_or(default)
}

#[cfg(test)]
pub(crate) mod tests {
    use simple_dns::rdata::{A, AAAA};
    use simple_dns::ResourceRecord;

    use super::*;

    fn t(s: u64) -> Instant {
        Instant::from_secs(s as i64)
    }

    fn resolver(max_cache: usize) -> Resolver {
        Resolver::new(ResolverConfig {
            max_cache,
            ..ResolverConfig::default()
        })
    }

    /// The server's answer to `query`: `v6`/`v4` records with `ttl`, or
    /// `rcode`.
    pub(crate) fn answer(
        query: &[u8],
        v6: Option<Ipv6Addr>,
        v4: Option<Ipv4Addr>,
        ttl: u32,
        rcode: RCODE,
    ) -> Vec<u8> {
        let q = Packet::parse(query).unwrap();
        let mut r = Packet::new_reply(q.id());
        *r.rcode_mut() = rcode;
        let question = q.questions[0].clone();
        let name = question.qname.clone();
        r.questions.push(question);
        if let Some(a) = v6 {
            r.answers.push(ResourceRecord::new(
                name.clone(),
                CLASS::IN,
                ttl,
                RData::AAAA(AAAA { address: a.into() }),
            ));
        }
        if let Some(a) = v4 {
            r.answers.push(ResourceRecord::new(
                name,
                CLASS::IN,
                ttl,
                RData::A(A { address: a.into() }),
            ));
        }
        r.build_bytes_vec().unwrap()
    }

    fn qtype(query: &[u8]) -> QTYPE {
        Packet::parse(query).unwrap().questions[0].qtype
    }

    const SERVER: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xe, 0, 0, 0, 0, 0, 0x80);

    #[test]
    fn query_golden_bytes() {
        let q = query(0x1234, "example.net", TYPE::AAAA).unwrap();
        let golden: &[u8] = &[
            0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, // header, RD
            0x07, b'e', b'x', b'a', b'm', b'p', b'l', b'e', 0x03, b'n', b'e', b't', 0x00, //
            0x00, 0x1c, 0x00, 0x01, // AAAA IN
        ];
        assert_eq!(q, golden);
    }

    #[test]
    fn miss_then_hit_within_ttl_then_expiry_asks_again() {
        let mut r = resolver(8);
        assert_eq!(r.lookup(t(0), "Example.NET."), Lookup::Wait);
        // A second request while pending asks nothing more.
        assert_eq!(r.lookup(t(0), "example.net"), Lookup::Wait);
        let q = r.poll_transmit().unwrap();
        assert!(r.poll_transmit().is_none());
        assert_eq!(qtype(&q), QTYPE::TYPE(TYPE::AAAA));
        let got = r.handle_response(t(0), &answer(&q, Some(SERVER), None, 5, RCODE::NoError));
        assert_eq!(got, Some(("example.net".into(), Answer::V6(SERVER))));
        assert_eq!(
            r.lookup(t(4), "example.net"),
            Lookup::Hit(Answer::V6(SERVER))
        );
        assert!(r.poll_transmit().is_none());
        // At the TTL it is gone: asked again.
        assert_eq!(r.lookup(t(5), "example.net"), Lookup::Wait);
        assert!(r.poll_transmit().is_some());
        assert_eq!(r.counters().get("sag.dns_cache_expired"), Some(&1));
        assert_eq!(r.counters().get("sag.dns_query_aaaa"), Some(&2));
    }

    #[test]
    fn nodata_aaaa_then_a_and_nxdomain() {
        let mut r = resolver(8);
        r.lookup(t(0), "v4.example");
        let q = r.poll_transmit().unwrap();
        assert_eq!(
            r.handle_response(t(0), &answer(&q, None, None, 60, RCODE::NoError)),
            None
        );
        let q = r.poll_transmit().unwrap();
        assert_eq!(qtype(&q), QTYPE::TYPE(TYPE::A));
        let v4 = Ipv4Addr::new(10, 0, 0, 80);
        let got = r.handle_response(t(0), &answer(&q, None, Some(v4), 60, RCODE::NoError));
        assert_eq!(got, Some(("v4.example".into(), Answer::V4Only(v4))));

        r.lookup(t(0), "nx.example");
        let q = r.poll_transmit().unwrap();
        let got = r.handle_response(t(0), &answer(&q, None, None, 0, RCODE::NameError));
        assert_eq!(got, Some(("nx.example".into(), Answer::NoAddress)));
        // Cached negatively for the default negative TTL (30 s).
        assert_eq!(
            r.lookup(t(29), "nx.example"),
            Lookup::Hit(Answer::NoAddress)
        );
        assert_eq!(r.lookup(t(30), "nx.example"), Lookup::Wait);
    }

    #[test]
    fn stray_and_mismatched_replies_are_refused() {
        let mut r = resolver(8);
        r.lookup(t(0), "a.example");
        let q = r.poll_transmit().unwrap();
        let mut other = answer(&q, Some(SERVER), None, 60, RCODE::NoError);
        other[0] ^= 0xff; // another ID
        assert_eq!(r.handle_response(t(0), &other), None);
        assert_eq!(r.handle_response(t(0), &[1, 2, 3]), None);
        // The query itself (no response flag).
        assert_eq!(r.handle_response(t(0), &q), None);
        assert_eq!(r.counters().get("drop.sag.dns_unexpected"), Some(&2));
        assert_eq!(r.counters().get("drop.sag.dns_malformed"), Some(&1));
        assert!(r.cached("a.example").is_none());
    }

    #[test]
    fn timeouts_retry_then_fail_uncached() {
        let mut r = resolver(8);
        r.lookup(t(0), "slow.example");
        assert!(r.poll_transmit().is_some());
        assert_eq!(r.poll_timeout(), Some(t(1)));
        assert!(r.handle_timeout(t(0)).is_empty()); // spurious
        assert!(r.handle_timeout(t(1)).is_empty());
        assert!(r.poll_transmit().is_some()); // retry 1
        assert!(r.handle_timeout(t(2)).is_empty());
        assert!(r.poll_transmit().is_some()); // retry 2
        assert_eq!(r.handle_timeout(t(3)), vec!["slow.example".to_string()]);
        assert!(r.poll_transmit().is_none());
        assert_eq!(r.pending(), 0);
        assert!(r.cached("slow.example").is_none());
        assert_eq!(r.counters().get("drop.sag.dns_timeout"), Some(&1));
    }

    #[test]
    fn cache_cap_evicts_the_soonest_expiry() {
        let mut r = resolver(2);
        for (i, ttl) in [(1u16, 100u32), (2, 50), (3, 200)] {
            let name = format!("n{i}.example");
            r.lookup(t(0), &name);
            let q = r.poll_transmit().unwrap();
            let a = Ipv6Addr::new(0xfd00, 0xe, 0, 0, 0, 0, 0, i);
            r.handle_response(t(0), &answer(&q, Some(a), None, ttl, RCODE::NoError));
        }
        assert_eq!(r.cache().count(), 2);
        assert!(r.cached("n2.example").is_none(), "the soonest expiry went");
        assert!(r.cached("n1.example").is_some() && r.cached("n3.example").is_some());
        assert_eq!(r.counters().get("sag.dns_cache_evicted"), Some(&1));
    }

    #[test]
    fn pending_cap_and_bad_names() {
        let mut r = Resolver::new(ResolverConfig {
            max_pending: 1,
            ..ResolverConfig::default()
        });
        assert_eq!(r.lookup(t(0), "a.example"), Lookup::Wait);
        assert_eq!(r.lookup(t(0), "b.example"), Lookup::Full);
        assert_eq!(r.lookup(t(0), "bad name"), Lookup::BadName);
        assert_eq!(r.lookup(t(0), "a..b"), Lookup::BadName);
        assert_eq!(canonical("A.Example."), Some("a.example".into()));
    }
}
