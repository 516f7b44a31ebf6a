//! The registration database: one state per (URL, language), with the
//! control information RFC 3528 §4.10 asks for (accept ID, version
//! timestamp, deletion flag), an expiry index, and the persisted form of a
//! state ([`Record`]).
//!
//! A state is a **base** (the latest fresh SrvReg or complete SrvDeReg by
//! version timestamp) plus the mesh's **incremental updates** ([`Update`]:
//! incremental SrvRegs and partial SrvDeRegs) with newer versions, kept in
//! version order. What a state shows ([`Reg::attrs`], its lifetime) is the
//! base with the updates applied in that order ([`Reg::settle`]), so every
//! MDA holding the same updates shows the same thing, whatever order they
//! arrived in: a late older update is applied *before* the newer ones, and
//! one older than the base is dropped (the base replaced it).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use smoltcp::time::{Duration, Instant};
use svcroute_stack::wire::slp::codec::Reader;
use svcroute_stack::wire::slp::url::{encode_auths, read_auths};
use svcroute_stack::wire::slp::{
    AcceptId, AttrList, Attribute, AuthBlocks, Filter, LangTag, ScopeList, ServiceType, SlpString,
    TagList,
};

use super::index::{Id, Index};

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

/// What an incremental update changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// An incremental SrvReg (RFC 2608 §9.3): these attributes replace
    /// those with the same tags, or are added.
    Add(AttrList),
    /// A partial SrvDeReg (RFC 2608 §10.6): attributes whose tags the list
    /// matches go.
    Remove(TagList),
}

impl Change {
    /// A total order for updates of equal version: kind, then the text.
    fn sort_key(&self) -> (u8, String) {
        match self {
            Self::Add(a) => (0, a.to_string()),
            Self::Remove(t) => (1, t.as_raw().to_owned()),
        }
    }
}

/// An incremental mesh update kept on top of a state's base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The MSA's version timestamp.
    pub version: u64,
    /// Who accepted it, when (it propagates under this accept ID).
    pub accept: AcceptId,
    /// The lifetime it came with (an incremental SrvReg refreshes the
    /// registration's lifetime; a partial SrvDeReg's is ignored).
    pub lifetime: u16,
    /// When that lifetime ends.
    pub expires: Instant,
    /// What it changes.
    pub change: Change,
}

impl Update {
    /// Whether `self` and `other` are the same update (version and change).
    pub fn same(&self, other: &Self) -> bool {
        self.version == other.version && self.change == other.change
    }

    fn order(&self, other: &Self) -> core::cmp::Ordering {
        self.version
            .cmp(&other.version)
            .then_with(|| self.change.sort_key().cmp(&other.change.sort_key()))
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
    /// Its attributes: the base's with the updates applied (see
    /// [`Reg::settle`]).
    pub attrs: AttrList,
    /// The lifetime of the newest base or update that sets it, seconds.
    pub lifetime: u16,
    /// When it expires (deleted states too: a tombstone lives until then).
    pub expires: Instant,
    /// The MSA's version timestamp of the base; 0 if it never came with
    /// MeshFwd (or there is no base yet).
    pub version: u64,
    /// The accept ID of the base; `None` for a state from a plain SA (kept
    /// locally, never propagated) or without a base.
    pub accept: Option<AcceptId>,
    /// The base is a deregistration, or there is none yet: never shown
    /// (RFC 3528 §4.5).
    pub deleted: bool,
    /// When it was last changed by an SA (for `min-refresh-interval`).
    pub updated: Instant,
    /// URL authentication blocks of the base SrvReg (RFC 2608 §9.2.1).
    pub url_auths: AuthBlocks,
    /// Attribute authentication blocks of the base SrvReg.
    pub attr_auths: AuthBlocks,
    /// The base SrvReg's attributes, as registered (what its blocks sign).
    pub base_attrs: AttrList,
    /// The base's own lifetime, seconds.
    pub base_lifetime: u16,
    /// When the base's own lifetime ends.
    pub base_expires: Instant,
    /// Mesh updates newer than the base, in version order.
    pub updates: Vec<Update>,
}

impl Reg {
    /// An empty placeholder for an update that arrives before any base
    /// registration of its URL: no attributes, lifetime 0, already expired.
    pub fn pending(
        url: SlpString,
        lang: LangTag,
        service_type: ServiceType,
        scopes: ScopeList,
        now: Instant,
    ) -> Self {
        Self::base(
            url,
            lang,
            service_type,
            scopes,
            AttrList::default(),
            0,
            now,
            now,
        )
    }

    /// A base state with no blocks and no updates: `attrs`, `lifetime` and
    /// `expires` are the base's too.
    #[allow(clippy::too_many_arguments)]
    pub fn base(
        url: SlpString,
        lang: LangTag,
        service_type: ServiceType,
        scopes: ScopeList,
        attrs: AttrList,
        lifetime: u16,
        expires: Instant,
        now: Instant,
    ) -> Self {
        Self {
            url,
            lang,
            service_type,
            scopes,
            base_attrs: attrs.clone(),
            attrs,
            lifetime,
            expires,
            version: 0,
            accept: None,
            deleted: false,
            updated: now,
            url_auths: AuthBlocks::default(),
            attr_auths: AuthBlocks::default(),
            base_lifetime: lifetime,
            base_expires: expires,
            updates: Vec::new(),
        }
    }

    /// Recompute what the state shows from its base and updates: updates
    /// not newer than the base go; the rest are applied in version order
    /// (ties by kind and text) to a live, unsigned base (RFC 2608 §9.3 has
    /// no incremental updates of signed registrations); the lifetime is the
    /// newest of the base's and the incremental SrvRegs'. A deleted state
    /// lives as long as the longest of them (its tombstone must outlive the
    /// updates it keeps).
    pub fn settle(&mut self) {
        let base = self.version;
        self.updates.retain(|u| u.version > base);
        self.updates.sort_by(Update::order);
        self.updates.dedup_by(|a, b| a.same(b));
        if self.deleted {
            self.attrs = AttrList::default();
            self.lifetime = self.base_lifetime;
            self.expires = self
                .updates
                .iter()
                .map(|u| u.expires)
                .fold(self.base_expires, Instant::max);
            return;
        }
        self.lifetime = self.base_lifetime;
        self.expires = self.base_expires;
        if !self.url_auths.is_empty() || self.updates.is_empty() {
            // Shared with the base (a reference count, not a copy).
            self.attrs = self.base_attrs.clone();
            return;
        }
        let mut attrs: Vec<Attribute> = self.base_attrs.attributes().to_vec();
        for u in &self.updates {
            let next: Vec<Attribute> = match &u.change {
                Change::Add(add) => {
                    self.lifetime = u.lifetime;
                    self.expires = u.expires;
                    merge(&attrs, add)
                }
                Change::Remove(tags) => attrs
                    .iter()
                    .filter(|a| !tags.matches(a.tag()))
                    .cloned()
                    .collect(),
            };
            // An update that would overflow the list is skipped (the same
            // one everywhere: the order is fixed).
            if AttrList::new(next.clone()).is_ok() {
                attrs = next;
            }
        }
        // NOTE(unwrap): every list kept above was checked to fit.
        self.attrs = AttrList::new(attrs).unwrap();
    }

    /// The version of the newest base or update.
    pub fn newest_version(&self) -> u64 {
        self.updates
            .iter()
            .map(|u| u.version)
            .fold(self.version, u64::max)
    }

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

/// `attrs` with `add` applied as an incremental registration (RFC 2608
/// §9.3): attributes whose tag `add` has go, then `add`'s are appended.
pub fn merge(attrs: &[Attribute], add: &AttrList) -> Vec<Attribute> {
    let mut out: Vec<Attribute> = attrs
        .iter()
        .filter(|a| !add.attributes().iter().any(|n| n.has_tag(a.tag())))
        .cloned()
        .collect();
    out.extend(add.attributes().iter().cloned());
    out
}

/// The durable form of the MDA's state: what the driver appends to its
/// write-ahead log for each [`Event::Persist`](super::Event::Persist), and
/// what [`Mda::snapshot`](super::Mda::snapshot) returns for compaction.
/// Replaying every record in order rebuilds the database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// A registration state, inserted or replaced (boxed: it is far larger
    /// than a watermark; serde encodes a box as its contents).
    State(Box<StateRecord>),
    /// Only in snapshots: the summary vector and this MDA's highest accept
    /// timestamp, which states alone may no longer show.
    Watermark {
        /// This MDA's highest accept timestamp so far.
        accept_hwm: u64,
        /// The summary vector: accept DA URL → highest accept timestamp.
        summary: Vec<(String, u64)>,
    },
}

/// An incremental update as persisted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateRecord {
    /// Version timestamp.
    pub version: u64,
    /// Accept ID: (accept timestamp, accept DA URL).
    pub accept: (u64, String),
    /// Its lifetime, seconds.
    pub lifetime: u16,
    /// When that ends, µs since 1900-01-01 UTC.
    pub expires_us: u64,
    /// `Some(attr-list)` for an incremental SrvReg.
    pub add: Option<String>,
    /// `Some(tag-list)` for a partial SrvDeReg.
    pub remove: Option<String>,
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
    /// URL auth blocks, as on the wire (count octet, blocks).
    pub url_auths: Vec<u8>,
    /// Attribute auth blocks, as on the wire.
    pub attr_auths: Vec<u8>,
    /// The base's attribute list, as on the wire.
    pub base_attrs: String,
    /// The base's lifetime, seconds.
    pub base_lifetime: u16,
    /// The base's expiry, µs since 1900-01-01 UTC.
    pub base_expires_us: u64,
    /// Incremental updates.
    pub updates: Vec<UpdateRecord>,
}

/// The database: states by key (in key order, for digests and
/// snapshots), each in a slot; an expiry index and the query indexes
/// ([`Index`]) by slot.
#[derive(Debug, Default)]
pub(super) struct Store {
    keys: BTreeMap<Key, Id>,
    slots: Vec<Option<Reg>>,
    free: Vec<Id>,
    expiry: BTreeSet<(Instant, Id)>,
    index: Index,
}

impl Store {
    /// Number of states, tombstones included.
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The state under `key`.
    pub(super) fn get(&self, key: &Key) -> Option<&Reg> {
        self.keys.get(key).and_then(|id| self.slot(*id))
    }

    fn slot(&self, id: Id) -> Option<&Reg> {
        self.slots.get(id as usize).and_then(Option::as_ref)
    }

    /// Every state, in key order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Key, &Reg)> {
        self.keys
            .iter()
            .filter_map(|(k, id)| self.slot(*id).map(|r| (k, r)))
    }

    /// The states a SrvRqst for `stype` with `predicate` may match, in key
    /// order: from the indexes (docs/mda.md, "Queries"); the caller checks
    /// each against the request.
    pub(super) fn candidates(&self, stype: &ServiceType, filter: Option<&Filter>) -> Vec<&Reg> {
        let Some(ids) = self.index.candidates(stype, filter, self.len()) else {
            return self.iter().map(|(_, r)| r).collect();
        };
        let mut regs: Vec<&Reg> = ids.into_iter().filter_map(|id| self.slot(id)).collect();
        regs.sort_by(|a, b| {
            a.url
                .as_str()
                .cmp(b.url.as_str())
                .then_with(|| Key::new("", &a.lang).lang.cmp(&Key::new("", &b.lang).lang))
        });
        regs
    }

    /// Insert or replace.
    pub(super) fn put(&mut self, key: Key, reg: Reg) {
        if let Some(&id) = self.keys.get(&key) {
            if let Some(old) = self.slots[id as usize].take() {
                self.expiry.remove(&(old.expires, id));
                if old.service_type != reg.service_type || old.attrs != reg.attrs {
                    self.index.remove(id, &old.service_type, &old.attrs);
                    self.index.add(id, &reg.service_type, &reg.attrs);
                }
            }
            self.expiry.insert((reg.expires, id));
            self.slots[id as usize] = Some(reg);
            return;
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                // NOTE: at most max_registrations (far below 2^32) slots.
                self.slots.push(None);
                (self.slots.len() - 1) as Id
            }
        };
        self.index.add(id, &reg.service_type, &reg.attrs);
        self.expiry.insert((reg.expires, id));
        self.slots[id as usize] = Some(reg);
        self.keys.insert(key, id);
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
            let Some((_, id)) = self.expiry.pop_first() else {
                break;
            };
            let Some(r) = self.slots.get_mut(id as usize).and_then(Option::take) else {
                continue;
            };
            self.index.remove(id, &r.service_type, &r.attrs);
            self.free.push(id);
            let key = Key::new(r.url.as_str(), &r.lang);
            self.keys.remove(&key);
            out.push((key, r));
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
            url_auths: auths_bytes(&reg.url_auths),
            attr_auths: auths_bytes(&reg.attr_auths),
            base_attrs: reg.base_attrs.to_string(),
            base_lifetime: reg.base_lifetime,
            base_expires_us: clock.slp_us(reg.base_expires),
            updates: reg
                .updates
                .iter()
                .map(|u| UpdateRecord {
                    version: u.version,
                    accept: (u.accept.timestamp, u.accept.da_url.as_str().to_owned()),
                    lifetime: u.lifetime,
                    expires_us: clock.slp_us(u.expires),
                    add: match &u.change {
                        Change::Add(a) => Some(a.to_string()),
                        Change::Remove(_) => None,
                    },
                    remove: match &u.change {
                        Change::Add(_) => None,
                        Change::Remove(t) => Some(t.as_raw().to_owned()),
                    },
                })
                .collect(),
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
        let updates = self
            .updates
            .iter()
            .map(|u| {
                let change = match (&u.add, &u.remove) {
                    (Some(a), None) => Change::Add(AttrList::parse(a).ok()?),
                    (None, Some(t)) => Change::Remove(TagList::parse(t).ok()?),
                    _ => return None,
                };
                Some(Update {
                    version: u.version,
                    accept: AcceptId {
                        timestamp: u.accept.0,
                        da_url: SlpString::new(u.accept.1.clone()).ok()?,
                    },
                    lifetime: u.lifetime,
                    expires: clock.instant(u.expires_us),
                    change,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let mut reg = Reg {
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
            url_auths: auths_from(&self.url_auths)?,
            attr_auths: auths_from(&self.attr_auths)?,
            base_attrs: AttrList::parse(&self.base_attrs).ok()?,
            base_lifetime: self.base_lifetime,
            base_expires: clock.instant(self.base_expires_us),
            updates,
        };
        reg.settle();
        Some((Key::new(&self.url, &reg.lang), reg))
    }
}

fn auths_bytes(a: &AuthBlocks) -> Vec<u8> {
    let mut out = Vec::new();
    encode_auths(a, &mut out);
    out
}

fn auths_from(b: &[u8]) -> Option<AuthBlocks> {
    let mut r = Reader::new(b);
    let a = read_auths(&mut r).ok()?;
    r.expect_empty().ok()?;
    Some(a)
}
