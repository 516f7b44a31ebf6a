//! The ingress's Sticky-Service-Table (draft §5.1): sticky service ID +
//! flow → sticky egress, with a timer refreshed by traffic.
//!
//! ```text
//!   (service, FlowLabel(l) | Apn6(id, flow)) ─► one u64 key ─┐
//!   (service, Ue(addr)) ─► (u16, u128) key ───────────────────┼─► Entry { site, hits, last, origin }
//!                                                            │     12 octets
//!   lookup: an entry whose last packet is older than the timer is a miss
//!   sweep: drops such entries (memory only; lookups never see them)
//! ```
//!
//! A service is the index of its anycast address among those this
//! ingress has seen ([`super::Services`]); a site is an index into the
//! site registry ([`super::sites::Sites`]). Both are small integers so an
//! entry stays small: about 12 octets of value behind an 8-octet key.
//! Time is kept in whole seconds of node time. The table never grows past
//! its cap: an insert into a full table is refused (the caller counts it)
//! and the flow is steered without being remembered.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::net::Ipv6Addr;

use rustc_hash::FxHasher;

type Fx = BuildHasherDefault<FxHasher>;

/// What identifies a flow within a sticky service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FlowKey {
    /// The IPv6 flow label (scenario 1), 20 bits, non-zero.
    Label(u32),
    /// The UE's address (scenario 2).
    Ue(Ipv6Addr),
    /// The APN6 sticky ID's service and flow (draft §6.1) **\[ext\]**.
    Apn6 {
        /// StickyServiceID.
        service_id: u8,
        /// Flow ID.
        flow_id: u8,
    },
}

/// Where an entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// A first packet here: the ingress chose the egress.
    Chosen,
    /// A Sticky-Dst option named the egress.
    Option,
    /// Learned from a reply tunnelled by the egress (§5.1).
    Reply,
    /// Merged from a neighbouring ingress's flooded table (scenario 1).
    Merged,
    /// Handed over by the UE's previous ingress (scenario 2).
    Handoff,
}

impl Origin {
    /// Its name in `ctl`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Chosen => "chosen",
            Self::Option => "option",
            Self::Reply => "reply",
            Self::Merged => "merged",
            Self::Handoff => "handoff",
        }
    }

    /// Whether this ingress floods the entry to its group (entries it got
    /// from the group are not flooded back).
    pub const fn floods(self) -> bool {
        matches!(
            self,
            Self::Chosen | Self::Option | Self::Reply | Self::Handoff
        )
    }
}

/// One entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The sticky egress: an index into the site registry.
    pub site: u16,
    /// Where it came from.
    pub origin: Origin,
    /// Packets that found it.
    pub hits: u32,
    /// Node time of its last packet (or of its creation), seconds.
    pub last: u32,
    /// Node time it was created, seconds.
    pub created: u32,
}

/// The table. See the module docs.
#[derive(Debug, Clone)]
pub struct Table {
    timer_s: u32,
    max: usize,
    small: HashMap<u64, Entry, Fx>,
    ue: HashMap<(u16, u128), Entry, Fx>,
}

/// Why an insert did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

fn pack(service: u16, key: FlowKey) -> Option<u64> {
    let (kind, v) = match key {
        FlowKey::Label(l) => (1_u64, u64::from(l & 0xf_ffff)),
        FlowKey::Apn6 {
            service_id,
            flow_id,
        } => (2, u64::from(service_id) << 8 | u64::from(flow_id)),
        FlowKey::Ue(_) => return None,
    };
    Some(u64::from(service) << 32 | kind << 24 | v)
}

fn unpack(k: u64) -> (u16, FlowKey) {
    let service = (k >> 32) as u16;
    let v = (k & 0xff_ffff) as u32;
    let key = if (k >> 24) & 0xff == 2 {
        FlowKey::Apn6 {
            service_id: (v >> 8) as u8,
            flow_id: v as u8,
        }
    } else {
        FlowKey::Label(v)
    };
    (service, key)
}

impl Table {
    /// An empty table whose entries live `timer_s` after their last
    /// packet, holding at most `max`.
    pub fn new(timer_s: u32, max: usize) -> Self {
        Self {
            timer_s,
            max,
            small: HashMap::default(),
            ue: HashMap::default(),
        }
    }

    /// Entries held (live or not yet swept).
    pub fn len(&self) -> usize {
        self.small.len() + self.ue.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entry timer, seconds.
    pub const fn timer_s(&self) -> u32 {
        self.timer_s
    }

    fn live(&self, e: &Entry, now_s: u32) -> bool {
        now_s.wrapping_sub(e.last) < self.timer_s
    }

    /// The live entry of a flow, refreshed (`now_s` its last packet, one
    /// more hit).
    pub fn hit(&mut self, service: u16, key: FlowKey, now_s: u32) -> Option<Entry> {
        let timer = self.timer_s;
        let e = match (pack(service, key), key) {
            (Some(k), _) => self.small.get_mut(&k)?,
            (None, FlowKey::Ue(a)) => self.ue.get_mut(&(service, u128::from(a)))?,
            (None, _) => return None,
        };
        if now_s.wrapping_sub(e.last) >= timer {
            return None;
        }
        e.last = now_s;
        e.hits = e.hits.saturating_add(1);
        Some(*e)
    }

    /// The live entry of a flow, untouched.
    pub fn get(&self, service: u16, key: FlowKey, now_s: u32) -> Option<Entry> {
        let e = match (pack(service, key), key) {
            (Some(k), _) => self.small.get(&k)?,
            (None, FlowKey::Ue(a)) => self.ue.get(&(service, u128::from(a)))?,
            (None, _) => return None,
        };
        self.live(e, now_s).then_some(*e)
    }

    /// Set a flow's egress (a new entry, or an existing one re-pointed),
    /// with `left_s` seconds to live. `Err(Full)` if it is new and the
    /// table is at its cap.
    pub fn insert(
        &mut self,
        service: u16,
        key: FlowKey,
        site: u16,
        origin: Origin,
        now_s: u32,
        left_s: u32,
    ) -> Result<(), Full> {
        let last = now_s.wrapping_sub(self.timer_s.saturating_sub(left_s.min(self.timer_s)));
        let full = self.len() >= self.max;
        let fresh = Entry {
            site,
            origin,
            hits: 0,
            last,
            created: now_s,
        };
        let slot = match (pack(service, key), key) {
            (Some(k), _) => {
                if full && !self.small.contains_key(&k) {
                    return Err(Full);
                }
                self.small.entry(k).or_insert(fresh)
            }
            (None, FlowKey::Ue(a)) => {
                let k = (service, u128::from(a));
                if full && !self.ue.contains_key(&k) {
                    return Err(Full);
                }
                self.ue.entry(k).or_insert(fresh)
            }
            (None, _) => return Err(Full),
        };
        if slot.site != site || slot.origin != origin {
            slot.site = site;
            slot.origin = origin;
            slot.created = now_s;
        }
        slot.last = last;
        Ok(())
    }

    /// Remove a flow's entry.
    pub fn remove(&mut self, service: u16, key: FlowKey) -> Option<Entry> {
        match (pack(service, key), key) {
            (Some(k), _) => self.small.remove(&k),
            (None, FlowKey::Ue(a)) => self.ue.remove(&(service, u128::from(a))),
            (None, _) => None,
        }
    }

    /// Drop every entry whose timer ran out; how many.
    pub fn sweep(&mut self, now_s: u32) -> usize {
        let before = self.len();
        let timer = self.timer_s;
        let live = |e: &Entry| now_s.wrapping_sub(e.last) < timer;
        self.small.retain(|_, e| live(e));
        self.ue.retain(|_, e| live(e));
        before - self.len()
    }

    /// Seconds left on an entry's timer at `now_s`.
    pub fn left_s(&self, e: &Entry, now_s: u32) -> u32 {
        self.timer_s.saturating_sub(now_s.wrapping_sub(e.last))
    }

    /// Every live entry: (service, key, entry).
    pub fn iter(&self, now_s: u32) -> impl Iterator<Item = (u16, FlowKey, Entry)> + '_ {
        let small = self.small.iter().map(|(k, e)| {
            let (s, key) = unpack(*k);
            (s, key, *e)
        });
        let ue = self
            .ue
            .iter()
            .map(|((s, a), e)| (*s, FlowKey::Ue(Ipv6Addr::from(*a)), *e));
        small
            .chain(ue)
            .filter(move |(_, _, e)| now_s.wrapping_sub(e.last) < self.timer_s)
    }

    /// Re-key every live entry of UE `old` (scenario 2): they now belong to
    /// `new`, as handed-over entries. Returns the services moved.
    pub fn rekey_ue(&mut self, old: Ipv6Addr, new: Ipv6Addr, now_s: u32) -> Vec<(u16, Entry)> {
        let keys: Vec<(u16, u128)> = self
            .ue
            .iter()
            .filter(|((_, a), e)| *a == u128::from(old) && self.live(e, now_s))
            .map(|(k, _)| *k)
            .collect();
        let mut moved = Vec::new();
        for k in keys {
            if let Some(mut e) = self.ue.remove(&k) {
                e.origin = Origin::Handoff;
                self.ue.insert((k.0, u128::from(new)), e);
                moved.push((k.0, e));
            }
        }
        moved
    }

    /// Approximate octets of memory the table holds (hash table buckets
    /// with their control octets).
    pub fn heap_bytes(&self) -> usize {
        let small = size_of::<(u64, Entry)>() + 1;
        let ue = size_of::<((u16, u128), Entry)>() + 1;
        self.small.capacity() * small + self.ue.capacity() * ue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_unless_refreshed() {
        let mut t = Table::new(300, 10);
        t.insert(1, FlowKey::Label(7), 3, Origin::Chosen, 1000, 300)
            .unwrap();
        assert_eq!(t.hit(1, FlowKey::Label(7), 1299).map(|e| e.site), Some(3));
        // Refreshed at 1299: alive until 1599.
        assert!(t.get(1, FlowKey::Label(7), 1598).is_some());
        assert!(t.get(1, FlowKey::Label(7), 1599).is_none());
        assert!(
            t.hit(1, FlowKey::Label(7), 1599).is_none(),
            "an expired entry is a miss"
        );
        assert_eq!(t.sweep(1599), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn keys_do_not_collide_across_services_and_kinds() {
        let mut t = Table::new(300, 100);
        let ue: Ipv6Addr = "fd00:1::5".parse().unwrap();
        let keys = [
            (1, FlowKey::Label(0x12)),
            (2, FlowKey::Label(0x12)),
            (
                1,
                FlowKey::Apn6 {
                    service_id: 0,
                    flow_id: 0x12,
                },
            ),
            (1, FlowKey::Ue(ue)),
        ];
        for (i, (s, k)) in keys.iter().enumerate() {
            t.insert(*s, *k, i as u16, Origin::Chosen, 0, 300).unwrap();
        }
        for (i, (s, k)) in keys.iter().enumerate() {
            assert_eq!(t.get(*s, *k, 1).unwrap().site, i as u16);
        }
        let mut seen: Vec<(u16, FlowKey)> = t.iter(1).map(|(s, k, _)| (s, k)).collect();
        seen.sort();
        let mut want: Vec<(u16, FlowKey)> = keys.to_vec();
        want.sort();
        assert_eq!(seen, want, "iter gives back every key as inserted");
    }

    #[test]
    fn the_cap_holds_and_existing_entries_still_update() {
        let mut t = Table::new(300, 3);
        for l in 1..=3 {
            t.insert(0, FlowKey::Label(l), 0, Origin::Chosen, 0, 300)
                .unwrap();
        }
        assert_eq!(
            t.insert(0, FlowKey::Label(4), 0, Origin::Chosen, 0, 300),
            Err(Full)
        );
        assert_eq!(
            t.insert(
                0,
                FlowKey::Ue(Ipv6Addr::LOCALHOST),
                0,
                Origin::Chosen,
                0,
                300
            ),
            Err(Full)
        );
        t.insert(0, FlowKey::Label(2), 9, Origin::Merged, 5, 100)
            .unwrap();
        let e = t.get(0, FlowKey::Label(2), 5).unwrap();
        assert_eq!(
            (e.site, e.origin, t.left_s(&e, 5)),
            (9, Origin::Merged, 100)
        );
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn a_ue_move_rekeys_its_entries() {
        let mut t = Table::new(300, 10);
        let (old, new): (Ipv6Addr, Ipv6Addr) =
            ("fd00:1::5".parse().unwrap(), "fd00:2::5".parse().unwrap());
        t.insert(1, FlowKey::Ue(old), 4, Origin::Chosen, 0, 300)
            .unwrap();
        t.insert(2, FlowKey::Ue(old), 5, Origin::Chosen, 0, 300)
            .unwrap();
        let moved = t.rekey_ue(old, new, 10);
        assert_eq!(moved.len(), 2);
        assert!(t.get(1, FlowKey::Ue(old), 10).is_none());
        let e = t.get(2, FlowKey::Ue(new), 10).unwrap();
        assert_eq!((e.site, e.origin), (5, Origin::Handoff));
    }

    #[test]
    fn an_entry_is_small() {
        assert!(size_of::<(u64, Entry)>() <= 32);
    }
}
