//! The FQDN → pathID cache of an nSFF (RFC 8677 §6.2 steps 5–6; SPEC
//! §1.2, §1.4), sans-IO.
//!
//! An entry maps a name to its [`Route`]: the forward pathID (us → serving
//! nSFF), the reverse pathID (serving nSFF → us) and the serving nSFF. A
//! miss starts a *pending resolution*: a path request (GFF type 4, with the
//! FQDN TLV) to the NR, retried on a timer with exponential backoff until a
//! path response (type 5) arrives or `max_retries` run out; the callers
//! waiting on the name (`W`, e.g. a proxy's request ID) come back in a
//! [`CacheEvent`]. A restarted NR simply answers a later retry; call
//! [`PathCache::retry_now`] when the NR is known to be back.
//!
//! Path updates (type 6) flush: type 0 drops entries served by a listed nSFF
//! (255 = all), type 1 drops entries whose forward *or* reverse pathID holds
//! a listed link. At `capacity` the least recently used entry is evicted.
//!
//! Call order: `resolve`/`lookup` from the application, `handle_response` /
//! `handle_update` for NR messages, `handle_timeout(now)` at
//! [`PathCache::poll_timeout`]; then drain [`PathCache::poll_transmit`] and
//! [`PathCache::poll_event`].

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use smoltcp::time::{Duration, Instant};
use svcroute_stack::wire::gff::{MessageType, PathId};
use svcroute_stack::wire::nr::{
    self, Fqdn, NsffId, PathRequest, PathResponse, PathUpdate, Tlv, Tlvs, UpdateKind, ALL_NSFFS,
};

/// A resolved name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// us → serving nSFF.
    pub forward: PathId,
    /// serving nSFF → us.
    pub reverse: PathId,
    /// The nSFF that serves the name.
    pub serving: NsffId,
}

/// A prepopulated entry (`[[nsff.cache.static]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticRoute {
    /// The name.
    pub fqdn: String,
    /// Links of the forward pathID.
    pub forward_links: Vec<u8>,
    /// Links of the reverse pathID.
    pub reverse_links: Vec<u8>,
    /// The serving nSFF.
    pub serving: u8,
}

/// Cache settings: the `[nsff.cache]` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Most cached names. Default 10000.
    pub capacity: usize,
    /// Most names being resolved at once. Default 1024.
    pub max_pending: usize,
    /// Most callers waiting on one name. Default 256.
    pub max_waiters: usize,
    /// First retry of a path request, ms (doubling). Default 500.
    pub retry_ms: u64,
    /// Retries before the callers get [`Unresolved::Timeout`]. Default 4.
    pub max_retries: u32,
    /// Prepopulated entries.
    #[serde(rename = "static")]
    pub statics: Vec<StaticRoute>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            capacity: 10_000,
            max_pending: 1024,
            max_waiters: 256,
            retry_ms: 500,
            max_retries: 4,
            statics: Vec::new(),
        }
    }
}

/// A bad cache setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheConfigError {
    /// A static entry's name is not a canonical FQDN.
    #[error("cache.static: bad fqdn {0:?}")]
    Fqdn(String),
    /// A static entry's serving nSFF is 255.
    #[error("cache.static {0}: serving nSFF must be 0..=254")]
    Serving(String),
    /// A limit is 0.
    #[error("cache: capacity, max_pending, max_waiters and retry_ms must be non-zero")]
    Zero,
}

/// The answer of [`PathCache::resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Cached.
    Hit(Route),
    /// Asked the NR (or already asking); a [`CacheEvent`] follows.
    Pending,
    /// Not taken: the pending table or the name's waiter list is full.
    Refused,
}

/// Why a name did not resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unresolved {
    /// The NR knows no nSFF for it.
    NotFound,
    /// The NR never answered.
    Timeout,
}

/// What the cache hands back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheEvent<W> {
    /// The name resolved (and is now cached).
    Resolved {
        /// The name.
        fqdn: Fqdn,
        /// Where it is.
        route: Route,
        /// Who waited.
        waiters: Vec<W>,
    },
    /// The name did not resolve.
    Failed {
        /// The name.
        fqdn: Fqdn,
        /// Why.
        reason: Unresolved,
        /// Who waited.
        waiters: Vec<W>,
    },
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that were not.
    pub misses: u64,
    /// Path requests sent (retries included).
    pub requests: u64,
    /// Retries among them.
    pub retries: u64,
    /// Names resolved.
    pub resolved: u64,
    /// Names the NR did not know.
    pub not_found: u64,
    /// Names that timed out.
    pub timeouts: u64,
    /// Entries evicted at capacity.
    pub evicted: u64,
    /// Entries flushed by path updates.
    pub flushed: u64,
    /// Path updates received.
    pub updates: u64,
    /// Resolutions refused (pending table or waiter list full).
    pub refused: u64,
    /// Responses for no pending name (or for several with one hash).
    pub unmatched: u64,
}

#[derive(Debug)]
struct Entry {
    route: Route,
    tick: u64,
}

#[derive(Debug)]
struct Pending<W> {
    waiters: Vec<W>,
    next_try: Instant,
    tries: u32,
}

/// The cache. `W` identifies whoever waits for a name.
#[derive(Debug)]
pub struct PathCache<W> {
    cfg: CacheConfig,
    me: NsffId,
    nr_path: PathId,
    auth: Option<(u8, Vec<u8>)>,
    entries: HashMap<Fqdn, Entry>,
    lru: BTreeMap<u64, Fqdn>,
    tick: u64,
    pending: BTreeMap<Fqdn, Pending<W>>,
    out: VecDeque<(PathId, MessageType, Vec<u8>)>,
    events: VecDeque<CacheEvent<W>>,
    stats: CacheStats,
}

impl<W> PathCache<W> {
    /// A cache for nSFF `me` that asks the NR over `nr_path`, prepopulated
    /// from `cfg.statics`. `auth` = (key ID, secret) signs path requests.
    pub fn new(
        me: NsffId,
        nr_path: PathId,
        cfg: CacheConfig,
        auth: Option<(u8, Vec<u8>)>,
    ) -> Result<Self, CacheConfigError> {
        if cfg.capacity == 0 || cfg.max_pending == 0 || cfg.max_waiters == 0 || cfg.retry_ms == 0 {
            return Err(CacheConfigError::Zero);
        }
        let mut cache = Self {
            cfg,
            me,
            nr_path,
            auth,
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            pending: BTreeMap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: CacheStats::default(),
        };
        cache.prepopulate()?;
        Ok(cache)
    }

    /// (Re-)install the configured static entries (e.g. after ALL NODES).
    pub fn prepopulate(&mut self) -> Result<(), CacheConfigError> {
        let statics = self.cfg.statics.clone();
        for s in &statics {
            let fqdn = Fqdn::new(&s.fqdn).map_err(|_| CacheConfigError::Fqdn(s.fqdn.clone()))?;
            let serving =
                NsffId::new(s.serving).ok_or(CacheConfigError::Serving(s.fqdn.clone()))?;
            let links = |l: &[u8]| l.iter().fold(PathId::ZERO, |p, &b| p.with(b));
            let route = Route {
                forward: links(&s.forward_links),
                reverse: links(&s.reverse_links),
                serving,
            };
            self.insert(fqdn, route);
        }
        Ok(())
    }

    /// Counters.
    pub const fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// Cached names.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Names being resolved.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Point path requests at another NR path.
    pub fn set_nr_path(&mut self, path: PathId) {
        self.nr_path = path;
    }

    /// The cached route of `fqdn`, marking it used.
    pub fn lookup(&mut self, fqdn: &Fqdn) -> Option<Route> {
        let tick = self.next_tick();
        let e = self.entries.get_mut(fqdn)?;
        self.lru.remove(&e.tick);
        e.tick = tick;
        self.lru.insert(tick, fqdn.clone());
        Some(e.route)
    }

    /// The cached route of `fqdn` without touching the LRU order.
    pub fn peek(&self, fqdn: &Fqdn) -> Option<Route> {
        self.entries.get(fqdn).map(|e| e.route)
    }

    /// Cache `route` for `fqdn` (evicting the least recently used entry at
    /// capacity).
    pub fn insert(&mut self, fqdn: Fqdn, route: Route) {
        let tick = self.next_tick();
        if let Some(old) = self.entries.remove(&fqdn) {
            self.lru.remove(&old.tick);
        }
        while self.entries.len() >= self.cfg.capacity {
            let Some((_, victim)) = self.lru.pop_first() else {
                break;
            };
            self.entries.remove(&victim);
            self.stats.evicted += 1;
        }
        self.lru.insert(tick, fqdn.clone());
        self.entries.insert(fqdn, Entry { route, tick });
    }

    /// Resolve `fqdn` for `waiter`: a hit, or a path request to the NR.
    pub fn resolve(&mut self, now: Instant, fqdn: &Fqdn, waiter: W) -> Lookup {
        if let Some(route) = self.lookup(fqdn) {
            self.stats.hits += 1;
            return Lookup::Hit(route);
        }
        self.stats.misses += 1;
        if let Some(p) = self.pending.get_mut(fqdn) {
            if p.waiters.len() >= self.cfg.max_waiters {
                self.stats.refused += 1;
                return Lookup::Refused;
            }
            p.waiters.push(waiter);
            return Lookup::Pending;
        }
        if self.pending.len() >= self.cfg.max_pending {
            self.stats.refused += 1;
            return Lookup::Refused;
        }
        self.request(fqdn);
        self.pending.insert(
            fqdn.clone(),
            Pending {
                waiters: vec![waiter],
                next_try: now + Duration::from_millis(self.cfg.retry_ms),
                tries: 0,
            },
        );
        Lookup::Pending
    }

    /// Resend every pending request now (the NR is back).
    pub fn retry_now(&mut self, now: Instant) {
        let names: Vec<Fqdn> = self.pending.keys().cloned().collect();
        for fqdn in names {
            self.request(&fqdn);
            if let Some(p) = self.pending.get_mut(&fqdn) {
                p.tries = 0;
                p.next_try = now + Duration::from_millis(self.cfg.retry_ms);
            }
        }
    }

    /// A path response from the NR. Returns whether it answered a pending
    /// name.
    pub fn handle_response(&mut self, rsp: &PathResponse<'_>) -> bool {
        let by_name = rsp.tlvs.fqdn().and_then(|n| Fqdn::new(n).ok());
        let mut matching = self
            .pending
            .keys()
            .filter(|f| f.hash() == rsp.hash && by_name.as_ref().is_none_or(|n| n == *f));
        let (Some(fqdn), None) = (matching.next().cloned(), matching.next()) else {
            self.stats.unmatched += 1;
            return false;
        };
        let Some(p) = self.pending.remove(&fqdn) else {
            return false;
        };
        match rsp.resolution {
            Some(r) => {
                let route = Route {
                    forward: r.forward,
                    // An NR that sends no reverse TLV: the path back is unknown;
                    // the zero pathID makes the egress unreachable, not wrong.
                    reverse: rsp.tlvs.reverse_path().unwrap_or(PathId::ZERO),
                    serving: r.serving,
                };
                self.insert(fqdn.clone(), route);
                self.stats.resolved += 1;
                self.events.push_back(CacheEvent::Resolved {
                    fqdn,
                    route,
                    waiters: p.waiters,
                });
            }
            None => {
                self.stats.not_found += 1;
                self.events.push_back(CacheEvent::Failed {
                    fqdn,
                    reason: Unresolved::NotFound,
                    waiters: p.waiters,
                });
            }
        }
        true
    }

    /// A path update: flush what it names. Returns how many entries went.
    pub fn handle_update(&mut self, upd: &PathUpdate<'_>) -> usize {
        self.stats.updates += 1;
        let ids = upd.ids.as_slice();
        let doomed: Vec<Fqdn> = match upd.kind {
            UpdateKind::NsffIds if ids.contains(&ALL_NSFFS) => {
                self.entries.keys().cloned().collect()
            }
            UpdateKind::NsffIds => self
                .entries
                .iter()
                .filter(|(_, e)| ids.contains(&e.route.serving.value()))
                .map(|(f, _)| f.clone())
                .collect(),
            UpdateKind::LinkIds => self
                .entries
                .iter()
                .filter(|(_, e)| {
                    ids.iter()
                        .any(|&l| e.route.forward.bit(l) || e.route.reverse.bit(l))
                })
                .map(|(f, _)| f.clone())
                .collect(),
            UpdateKind::Unknown(_) => Vec::new(),
        };
        for f in &doomed {
            if let Some(e) = self.entries.remove(f) {
                self.lru.remove(&e.tick);
            }
        }
        self.stats.flushed += doomed.len() as u64;
        doomed.len()
    }

    /// Retry due requests; time out those out of retries.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<Fqdn> = self
            .pending
            .iter()
            .filter(|(_, p)| p.next_try <= now)
            .map(|(f, _)| f.clone())
            .collect();
        for fqdn in due {
            let Some(p) = self.pending.get_mut(&fqdn) else {
                continue;
            };
            if p.tries >= self.cfg.max_retries {
                if let Some(p) = self.pending.remove(&fqdn) {
                    self.stats.timeouts += 1;
                    self.events.push_back(CacheEvent::Failed {
                        fqdn,
                        reason: Unresolved::Timeout,
                        waiters: p.waiters,
                    });
                }
                continue;
            }
            p.tries += 1;
            let wait = Duration::from_millis(self.cfg.retry_ms) * (1u32 << p.tries.min(16));
            p.next_try = now + wait;
            self.stats.retries += 1;
            self.request(&fqdn);
        }
    }

    /// The next retry deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.next_try).min()
    }

    /// The next NR message: (pathID, GFF type, payload).
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<(PathId, MessageType, Vec<u8>)> {
        self.out.pop_front()
    }

    /// The next event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<CacheEvent<W>> {
        self.events.pop_front()
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn request(&mut self, fqdn: &Fqdn) {
        let tlv = [Tlv::Fqdn(fqdn.as_str())];
        let Ok(tlvs) = Tlvs::new(&tlv) else {
            return;
        };
        let repr = nr::Repr::PathRequest(PathRequest {
            hash: fqdn.hash(),
            requester: self.me,
            tlvs,
        });
        let mut msg = vec![0; repr.buffer_len()];
        repr.emit(&mut msg);
        if let Some((key_id, secret)) = &self.auth {
            nr::append_auth(&mut msg, MessageType::PathRequest, *key_id, secret);
        }
        self.stats.requests += 1;
        self.out
            .push_back((self.nr_path, MessageType::PathRequest, msg));
    }
}

#[cfg(test)]
mod tests {
    use svcroute_stack::wire::nr::{Ids, Resolution};

    use super::*;

    fn fq(s: &str) -> Fqdn {
        Fqdn::new(s).unwrap()
    }

    fn id(v: u8) -> NsffId {
        NsffId::new(v).unwrap()
    }

    fn nr_path() -> PathId {
        PathId::link(200)
    }

    fn route(f: &[u8], r: &[u8], s: u8) -> Route {
        let links = |l: &[u8]| l.iter().fold(PathId::ZERO, |p, &b| p.with(b));
        Route {
            forward: links(f),
            reverse: links(r),
            serving: id(s),
        }
    }

    fn cache(cfg: CacheConfig) -> PathCache<u32> {
        PathCache::new(id(1), nr_path(), cfg, None).unwrap()
    }

    fn t(ms: i64) -> Instant {
        Instant::from_millis(ms)
    }

    #[track_caller]
    fn requested(c: &mut PathCache<u32>) -> Vec<String> {
        std::iter::from_fn(|| c.poll_transmit())
            .map(|(path, ty, msg)| {
                assert_eq!((path, ty), (nr_path(), MessageType::PathRequest));
                match nr::Repr::parse(ty, &msg).unwrap() {
                    nr::Repr::PathRequest(r) => {
                        let name = r.tlvs.fqdn().unwrap().to_owned();
                        assert_eq!(r.hash, nr::hash_fqdn(&name));
                        assert_eq!(r.requester, id(1));
                        name
                    }
                    other => panic!("{other:?}"),
                }
            })
            .collect()
    }

    fn response(name: &str, rt: Option<Route>) -> (Vec<Tlv<'static>>, u16, Option<Resolution>) {
        let _ = name;
        let tlvs = rt
            .map(|r| vec![Tlv::ReversePath(r.reverse)])
            .unwrap_or_default();
        let res = rt.map(|r| Resolution {
            serving: r.serving,
            forward: r.forward,
        });
        (tlvs, nr::hash_fqdn(name), res)
    }

    fn answer(c: &mut PathCache<u32>, name: &str, rt: Option<Route>) -> bool {
        let (tlvs, hash, resolution) = response(name, rt);
        let rsp = PathResponse {
            hash,
            resolution,
            tlvs: Tlvs::new(&tlvs).unwrap(),
        };
        c.handle_response(&rsp)
    }

    fn update(c: &mut PathCache<u32>, kind: UpdateKind, ids: &[u8]) -> usize {
        c.handle_update(&PathUpdate {
            kind,
            ids: Ids::new(ids).unwrap(),
            tlvs: Tlvs::EMPTY,
        })
    }

    #[test]
    fn miss_request_response_hit() {
        let mut c = cache(CacheConfig::default());
        let www = fq("www.example2.com");
        assert_eq!(c.resolve(t(0), &www, 1), Lookup::Pending);
        assert_eq!(c.resolve(t(1), &www, 2), Lookup::Pending);
        // One request for two waiters.
        assert_eq!(requested(&mut c), ["www.example2.com"]);
        let rt = route(&[1, 4, 7], &[6, 3, 0], 2);
        assert!(answer(&mut c, "www.example2.com", Some(rt)));
        assert_eq!(
            c.poll_event(),
            Some(CacheEvent::Resolved {
                fqdn: www.clone(),
                route: rt,
                waiters: vec![1, 2]
            })
        );
        assert_eq!(c.resolve(t(2), &www, 3), Lookup::Hit(rt));
        assert_eq!((c.stats().hits, c.stats().misses), (1, 2));
        // A second answer matches nothing.
        assert!(!answer(&mut c, "www.example2.com", Some(rt)));
        assert_eq!(c.stats().unmatched, 1);
    }

    #[test]
    fn not_found_fails_waiters() {
        let mut c = cache(CacheConfig::default());
        let n = fq("nope.example");
        assert_eq!(c.resolve(t(0), &n, 7), Lookup::Pending);
        assert!(answer(&mut c, "nope.example", None));
        assert_eq!(
            c.poll_event(),
            Some(CacheEvent::Failed {
                fqdn: n.clone(),
                reason: Unresolved::NotFound,
                waiters: vec![7]
            })
        );
        assert!(c.peek(&n).is_none());
    }

    #[test]
    fn retries_with_backoff_then_timeout_and_nr_restart() {
        let cfg = CacheConfig {
            retry_ms: 100,
            max_retries: 2,
            ..CacheConfig::default()
        };
        let mut c = cache(cfg);
        let n = fq("slow.example");
        c.resolve(t(0), &n, 1);
        assert_eq!(requested(&mut c).len(), 1);
        assert_eq!(c.poll_timeout(), Some(t(100)));
        c.handle_timeout(t(50));
        assert!(requested(&mut c).is_empty(), "spurious call is harmless");
        c.handle_timeout(t(100));
        assert_eq!(requested(&mut c).len(), 1);
        assert_eq!(c.poll_timeout(), Some(t(300)));
        c.handle_timeout(t(300));
        assert_eq!(requested(&mut c).len(), 1);
        c.handle_timeout(c.poll_timeout().unwrap());
        assert_eq!(
            c.poll_event(),
            Some(CacheEvent::Failed {
                fqdn: n.clone(),
                reason: Unresolved::Timeout,
                waiters: vec![1]
            })
        );
        assert_eq!((c.stats().retries, c.stats().timeouts), (2, 1));
        assert_eq!(c.pending(), 0);

        // The NR restarts while a name is pending: retry_now resends at once,
        // and the restarted NR's answer resolves it.
        c.resolve(t(1000), &n, 2);
        let _ = requested(&mut c);
        c.retry_now(t(1010));
        assert_eq!(requested(&mut c), ["slow.example"]);
        assert!(answer(&mut c, "slow.example", Some(route(&[1], &[2], 3))));
        assert!(matches!(c.poll_event(), Some(CacheEvent::Resolved { .. })));
    }

    #[test]
    fn lru_eviction_at_capacity() {
        let mut c = cache(CacheConfig {
            capacity: 2,
            ..CacheConfig::default()
        });
        let (a, b, d) = (fq("a.example"), fq("b.example"), fq("d.example"));
        c.insert(a.clone(), route(&[1], &[2], 1));
        c.insert(b.clone(), route(&[1], &[2], 1));
        assert!(c.lookup(&a).is_some()); // b is now the oldest
        c.insert(d.clone(), route(&[1], &[2], 1));
        assert_eq!(c.len(), 2);
        assert!(c.peek(&b).is_none());
        assert!(c.peek(&a).is_some() && c.peek(&d).is_some());
        assert_eq!(c.stats().evicted, 1);
    }

    #[test]
    fn pending_caps_refuse() {
        let mut c = cache(CacheConfig {
            max_pending: 1,
            max_waiters: 2,
            ..CacheConfig::default()
        });
        let (a, b) = (fq("a.example"), fq("b.example"));
        assert_eq!(c.resolve(t(0), &a, 1), Lookup::Pending);
        assert_eq!(c.resolve(t(0), &a, 2), Lookup::Pending);
        assert_eq!(c.resolve(t(0), &a, 3), Lookup::Refused);
        assert_eq!(c.resolve(t(0), &b, 4), Lookup::Refused);
        assert_eq!(c.stats().refused, 2);
    }

    #[test]
    fn prepopulated_entries_answer_without_the_nr() {
        let cfg = CacheConfig {
            statics: vec![StaticRoute {
                fqdn: "www.example2.com".into(),
                forward_links: vec![1, 4, 7],
                reverse_links: vec![6, 3, 0],
                serving: 2,
            }],
            ..CacheConfig::default()
        };
        let mut c = cache(cfg.clone());
        assert_eq!(
            c.resolve(t(0), &fq("www.example2.com"), 1),
            Lookup::Hit(route(&[1, 4, 7], &[6, 3, 0], 2))
        );
        assert!(requested(&mut c).is_empty());
        let bad = CacheConfig {
            statics: vec![StaticRoute {
                fqdn: "Bad Name".into(),
                ..cfg.statics[0].clone()
            }],
            ..cfg
        };
        assert!(PathCache::<u32>::new(id(1), nr_path(), bad, None).is_err());
    }

    #[test]
    fn updates_flush_by_nsff_and_by_link_both_directions() {
        let mut c = cache(CacheConfig::default());
        c.insert(fq("a.example"), route(&[1, 4], &[5, 2], 2));
        c.insert(fq("b.example"), route(&[1, 9], &[10, 2], 3));
        c.insert(fq("c.example"), route(&[11], &[12], 4));
        // Type 0: entries served by nSFF 3.
        assert_eq!(update(&mut c, UpdateKind::NsffIds, &[3, 77]), 1);
        assert!(c.peek(&fq("b.example")).is_none());
        // Type 1: link 5 is only on a.example's *reverse* path.
        assert_eq!(update(&mut c, UpdateKind::LinkIds, &[5]), 1);
        assert!(c.peek(&fq("a.example")).is_none());
        assert_eq!(update(&mut c, UpdateKind::LinkIds, &[99]), 0);
        assert_eq!(update(&mut c, UpdateKind::Unknown(9), &[11]), 0);
        // ALL NODES.
        c.insert(fq("d.example"), route(&[1], &[2], 9));
        assert_eq!(update(&mut c, UpdateKind::NsffIds, &[ALL_NSFFS]), 2);
        assert!(c.is_empty());
        assert_eq!((c.stats().flushed, c.stats().updates), (4, 5));
    }

    #[test]
    fn signed_requests() {
        let mut c: PathCache<u32> = PathCache::new(
            id(1),
            nr_path(),
            CacheConfig::default(),
            Some((7, b"k".to_vec())),
        )
        .unwrap();
        c.resolve(t(0), &fq("a.example"), 1);
        let (_, ty, msg) = c.poll_transmit().unwrap();
        let repr = nr::Repr::parse(ty, &msg).unwrap();
        assert_eq!(repr.tlvs().auth().map(|a| a.key_id), Some(7));
    }
}
