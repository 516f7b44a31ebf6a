//! The registration database: one state per (URL, language), with the
//! control information RFC 3528 §4.10 asks for (accept ID, version
//! timestamp, deletion flag), an expiry index, and the persisted form of a
//! state ([`Record`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use smoltcp::time::{Duration, Instant};
use svcroute_stack::wire::slp::{AcceptId, AttrList, LangTag, ScopeList, ServiceType, SlpString};

/// A registration's key: the URL and the primary language tag, lower-cased
/// (RFC 2608 §8.1: dialects are the same language).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// The service URL as registered.
    pub url: String,
    /// Primary language tag, lower case.
    pub lang: String,
}

impl Key {
    /// The key of `url` registered in `lang`.
    pub fn new(url: &str, lang: &LangTag) -> Self {
        Self {
            url: url.to_owned(),
            lang: lang.primary().to_ascii_lowercase(),
        }
    }
}

/// One registration state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reg {
    /// The URL.
    pub url: SlpString,
    /// The language the service was registered in.
    pub lang: LangTag,
    /// Its service type.
    pub service_type: ServiceType,
    /// Its scopes.
    pub scopes: ScopeList,
    /// Its attributes.
    pub attrs: AttrList,
    /// The lifetime it was registered with, seconds.
    pub lifetime: u16,
    /// When it expires (deleted states too: a tombstone lives until then).
    pub expires: Instant,
    /// The MSA's version timestamp; 0 if it never came with MeshFwd.
    pub version: u64,
    /// The accept ID of the latest mesh update applied; `None` for a state
    /// from a plain SA (kept locally, never propagated).
    pub accept: Option<AcceptId>,
    /// Deregistered: kept as a tombstone, never shown (RFC 3528 §4.5).
    pub deleted: bool,
    /// When it was last changed by an SA (for `min-refresh-interval`).
    pub updated: Instant,
}

impl Reg {
    /// Seconds left, rounded up, at most 0xffff; 0 once expired.
    pub fn remaining(&self, now: Instant) -> u16 {
        if self.expires <= now {
            return 0;
        }
        let us = (self.expires - now).total_micros();
        let s = us.div_ceil(1_000_000);
        u16::try_from(s).unwrap_or(u16::MAX)
    }

    /// Whether the state takes part in queries.
    pub fn alive(&self, now: Instant) -> bool {
        !self.deleted && self.expires > now
    }
}

/// The durable form of the MDA's state: what the driver appends to its
/// write-ahead log for each [`Event::Persist`](super::Event::Persist), and
/// what [`Mda::snapshot`](super::Mda::snapshot) returns for compaction.
/// Replaying every record in order rebuilds the database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// A registration state, inserted or replaced.
    State(StateRecord),
    /// Only in snapshots: the summary vector and this MDA's highest accept
    /// timestamp, which states alone may no longer show.
    Watermark {
        /// This MDA's highest accept timestamp so far.
        accept_hwm: u64,
        /// The summary vector: accept DA URL → highest accept timestamp.
        summary: Vec<(String, u64)>,
    },
}

/// A registration state as persisted: strings as on the wire, times as SLP
/// timestamps (µs since 1900-01-01 UTC) so a restart in another process
/// reads them right.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    /// The URL.
    pub url: String,
    /// The language tag.
    pub lang: String,
    /// The service type.
    pub service_type: String,
    /// The scope list, as on the wire.
    pub scopes: String,
    /// The attribute list, as on the wire.
    pub attrs: String,
    /// The registered lifetime, seconds.
    pub lifetime: u16,
    /// Expiry, µs since 1900-01-01 UTC.
    pub expires_us: u64,
    /// Version timestamp (0: none).
    pub version: u64,
    /// Accept ID: (accept timestamp, accept DA URL).
    pub accept: Option<(u64, String)>,
    /// Deregistered.
    pub deleted: bool,
}

/// The database: states by key, and an expiry index.
#[derive(Debug, Default)]
pub(super) struct Store {
    regs: BTreeMap<Key, Reg>,
    expiry: BTreeSet<(Instant, Key)>,
}

impl Store {
    /// Number of states, tombstones included.
    pub(super) fn len(&self) -> usize {
        self.regs.len()
    }

    /// The state under `key`.
    pub(super) fn get(&self, key: &Key) -> Option<&Reg> {
        self.regs.get(key)
    }

    /// Every state, in key order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Key, &Reg)> {
        self.regs.iter()
    }

    /// Insert or replace.
    pub(super) fn put(&mut self, key: Key, reg: Reg) {
        if let Some(old) = self.regs.get(&key) {
            self.expiry.remove(&(old.expires, key.clone()));
        }
        self.expiry.insert((reg.expires, key.clone()));
        self.regs.insert(key, reg);
    }

    /// The earliest expiry.
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        self.expiry.first().map(|(t, _)| *t)
    }

    /// Remove every state expired at `now`; returns them.
    pub(super) fn expire(&mut self, now: Instant) -> Vec<(Key, Reg)> {
        let mut out = Vec::new();
        while let Some((t, _)) = self.expiry.first() {
            if *t > now {
                break;
            }
            let Some((_, key)) = self.expiry.pop_first() else {
                break;
            };
            if let Some(r) = self.regs.remove(&key) {
                out.push((key, r));
            }
        }
        out
    }
}

/// Converts between core time (`Instant`) and SLP time (µs since 1900).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// SLP time at `Instant::ZERO`.
    pub wall_us_at_zero: u64,
}

impl Clock {
    /// SLP time at `now`.
    pub fn slp_us(self, now: Instant) -> u64 {
        self.wall_us_at_zero
            .saturating_add_signed(now.total_micros())
    }

    /// The instant of SLP time `us`.
    pub fn instant(self, us: u64) -> Instant {
        let d = i128::from(us) - i128::from(self.wall_us_at_zero);
        Instant::from_micros(i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX }))
    }

    /// Seconds since 1970 at `now`, as DAAdverts carry them.
    pub fn unix_secs(self, now: Instant) -> u32 {
        /// Seconds from 1900-01-01 to 1970-01-01.
        const EPOCH_1970: u64 = 2_208_988_800;
        let s = self.slp_us(now) / 1_000_000;
        u32::try_from(s.saturating_sub(EPOCH_1970)).unwrap_or(u32::MAX)
    }
}

impl StateRecord {
    /// The record of `reg`.
    pub fn of(reg: &Reg, clock: Clock) -> Self {
        Self {
            url: reg.url.as_str().to_owned(),
            lang: reg.lang.as_str().to_owned(),
            service_type: reg.service_type.as_str().to_owned(),
            scopes: reg.scopes.to_string(),
            attrs: reg.attrs.to_string(),
            lifetime: reg.lifetime,
            expires_us: clock.slp_us(reg.expires),
            version: reg.version,
            accept: reg
                .accept
                .as_ref()
                .map(|a| (a.timestamp, a.da_url.as_str().to_owned())),
            deleted: reg.deleted,
        }
    }

    /// The state back; `None` if a field no longer parses.
    pub fn to_reg(&self, clock: Clock, now: Instant) -> Option<(Key, Reg)> {
        let lang = LangTag::new(&self.lang).ok()?;
        let url = SlpString::new(self.url.clone()).ok()?;
        let accept = match &self.accept {
            Some((ts, u)) => Some(AcceptId {
                timestamp: *ts,
                da_url: SlpString::new(u.clone()).ok()?,
            }),
            None => None,
        };
        let reg = Reg {
            url,
            service_type: ServiceType::parse(&self.service_type).ok()?,
            scopes: ScopeList::parse(&self.scopes).ok()?,
            attrs: AttrList::parse(&self.attrs).ok()?,
            lifetime: self.lifetime,
            expires: clock.instant(self.expires_us),
            version: self.version,
            accept,
            deleted: self.deleted,
            updated: now - Duration::from_secs(u64::from(u16::MAX)),
            lang,
        };
        Some((Key::new(&self.url, &reg.lang), reg))
    }
}
