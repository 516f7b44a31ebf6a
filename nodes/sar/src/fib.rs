//! The FIB: service name → value (a [`crate::core`] FIB entry: the instances
//! serving the name and their scheduling state), looked up by **longest
//! matching segment prefix** (SPEC §2.3, draft §3.4 Figure 3).
//!
//! ```text
//!   by_len[0]  {  h("")                     → *            }   the wildcard (SAG)
//!   by_len[1]  {  h(service.org)            → service.org  }
//!   by_len[2]  {  h(service.org/video)      → ...          }
//!   ...            h = SPEC §0 name hash (first 8 octets of SHA-256 of the
//!                      prefix's wire encoding), full name compared on a hit
//! ```
//!
//! One hash table per prefix length (in segments), keyed by the SPEC §0
//! name hash of the name's wire encoding. A lookup of an `n`-segment name
//! walks `n, n−1, …, 0`, skipping lengths no entry has (a bit mask), hashes
//! the prefix's wire octets ([`ServiceName::prefix_wire`] without copying)
//! and compares the full stored name on a hash hit: a hash match alone never
//! decides (SPEC §0). Colliding names chain through the slot array.
//!
//! The table holds at most `cap` names; [`Fib::insert`] of a new name at
//! the cap is refused ([`Full`]) and the caller counts it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use svcroute_stack::wire::rosa::{name_hash, ServiceName};

/// Names have at most 25 segments (`MAX_NAME_LEN` 128 octets, 5 per
/// one-octet segment), so prefix lengths are 0..=25.
const MAX_SEGMENTS: usize = 32;

/// How the FIB hashes a name (or prefix) encoding into its tables.
#[derive(Debug, Clone, Copy)]
pub enum NameHash {
    /// SPEC §0: the first 8 octets of SHA-256 (the default).
    Sha256,
    /// A seeded multiply-fold hash (a few ns instead of ~90 ns per
    /// prefix); the seed comes from config so table positions cannot be
    /// predicted from outside. Full names are compared either way.
    Keyed(u64),
    /// A test hook (e.g. a hash under which every name collides).
    #[doc(hidden)]
    Custom(fn(&[u8]) -> u64),
}

impl NameHash {
    /// The hash of `wire`.
    #[inline]
    pub fn hash(self, wire: &[u8]) -> u64 {
        match self {
            Self::Sha256 => name_hash(wire),
            Self::Keyed(seed) => keyed_hash(seed, wire),
            Self::Custom(f) => f(wire),
        }
    }
}

/// A seeded 64-bit hash in the manner of foldhash: 8 octets at a time,
/// each mixed in by a folded 64×64→128-bit multiply.
pub fn keyed_hash(seed: u64, bytes: &[u8]) -> u64 {
    const K0: u64 = 0x9e37_79b9_7f4a_7c15;
    const K1: u64 = 0xbf58_476d_1ce4_e5b9;
    let fold = |a: u64, b: u64| {
        let p = u128::from(a) * u128::from(b);
        (p as u64) ^ ((p >> 64) as u64)
    };
    let k = K1 ^ seed.rotate_left(23);
    let mut h = fold(seed ^ K0, (bytes.len() as u64) ^ K1);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = fold(h ^ w, k);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut b = [0_u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        h = fold(h ^ u64::from_le_bytes(b), k ^ K0);
    }
    fold(h, K0) ^ (h >> 29)
}

/// The FIB is at its configured maximum size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// Longest-segment-prefix table from service names to `V`.
#[derive(Debug, Clone)]
pub struct Fib<V> {
    /// `by_len[n]`: name hash → first slot of the chain of `n`-segment names.
    by_len: Vec<HashMap<u64, u32, BuildHasherDefault<IdentityHasher>>>,
    /// Bit `n` set: some entry has `n` segments.
    len_mask: u32,
    slots: Vec<Option<Slot<V>>>,
    free: Vec<u32>,
    len: usize,
    cap: usize,
    /// The name hash (SPEC §0 by default).
    hash: NameHash,
}

#[derive(Debug, Clone)]
struct Slot<V> {
    name: ServiceName,
    value: V,
    /// Next slot with the same (length, hash), a collision chain.
    next: Option<u32>,
}

impl<V> Fib<V> {
    /// An empty FIB that holds at most `cap` names, hashing them as SPEC §0
    /// says.
    pub fn new(cap: usize) -> Self {
        Self::with_hash(cap, NameHash::Sha256)
    }

    /// An empty FIB hashing names with `hash`.
    pub fn with_hash(cap: usize, hash: NameHash) -> Self {
        Self {
            hash,
            by_len: (0..MAX_SEGMENTS).map(|_| HashMap::default()).collect(),
            len_mask: 0,
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
            cap,
        }
    }

    /// Number of names.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no names.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The configured maximum.
    pub const fn capacity(&self) -> usize {
        self.cap
    }

    /// The value stored under exactly `name`.
    pub fn get(&self, name: &ServiceName) -> Option<&V> {
        let slot = self.find_exact(name.as_wire(), name.segment_count())?;
        self.slots[slot as usize].as_ref().map(|s| &s.value)
    }

    /// The value stored under exactly `name`, mutably.
    pub fn get_mut(&mut self, name: &ServiceName) -> Option<&mut V> {
        let slot = self.find_exact(name.as_wire(), name.segment_count())?;
        self.slots[slot as usize].as_mut().map(|s| &mut s.value)
    }

    /// Store `value` under `name`: the previous value if the name was
    /// there, [`Full`] (and nothing stored) for a new name at the cap.
    pub fn insert(&mut self, name: ServiceName, value: V) -> Result<Option<V>, Full> {
        if let Some(v) = self.get_mut(&name) {
            return Ok(Some(core::mem::replace(v, value)));
        }
        if self.len >= self.cap {
            return Err(Full);
        }
        let n = name.segment_count();
        let hash = self.hash.hash(name.as_wire());
        let slot = Slot {
            name,
            value,
            next: None,
        };
        let idx = if let Some(i) = self.free.pop() {
            self.slots[i as usize] = Some(slot);
            i
        } else {
            // More than u32::MAX names cannot be configured (cap is usize
            // but memory runs out long before).
            self.slots.push(Some(slot));
            (self.slots.len() - 1) as u32
        };
        let table = &mut self.by_len[n];
        if let Some(head) = table.insert(hash, idx) {
            // Collision: the new slot heads the chain.
            if let Some(s) = self.slots[idx as usize].as_mut() {
                s.next = Some(head);
            }
        }
        self.len_mask |= 1 << n;
        self.len += 1;
        Ok(None)
    }

    /// Remove `name`; its value if it was there.
    pub fn remove(&mut self, name: &ServiceName) -> Option<V> {
        let n = name.segment_count();
        let hash = self.hash.hash(name.as_wire());
        let head = *self.by_len[n].get(&hash)?;
        let mut prev: Option<u32> = None;
        let mut cur = Some(head);
        while let Some(i) = cur {
            let s = self.slots[i as usize].as_ref()?;
            if s.name.as_wire() == name.as_wire() {
                let next = s.next;
                match prev {
                    None => match next {
                        Some(nx) => {
                            self.by_len[n].insert(hash, nx);
                        }
                        None => {
                            self.by_len[n].remove(&hash);
                        }
                    },
                    Some(p) => {
                        if let Some(ps) = self.slots[p as usize].as_mut() {
                            ps.next = next;
                        }
                    }
                }
                let slot = self.slots[i as usize].take()?;
                self.free.push(i);
                self.len -= 1;
                if self.by_len[n].is_empty() {
                    self.len_mask &= !(1 << n);
                }
                return Some(slot.value);
            }
            prev = cur;
            cur = s.next;
        }
        None
    }

    /// The entry with the longest segment prefix of `name` (`*`, the empty
    /// name, matches everything).
    pub fn lookup(&self, name: &ServiceName) -> Option<(&ServiceName, &V)> {
        self.lookup_by(name, |_| true)
    }

    /// The entry with the longest segment prefix of `name` whose value
    /// satisfies `usable` (e.g. "has a reachable instance"); shorter
    /// prefixes are tried when a longer one is not usable.
    pub fn lookup_by(
        &self,
        name: &ServiceName,
        mut usable: impl FnMut(&V) -> bool,
    ) -> Option<(&ServiceName, &V)> {
        let slot = self.lookup_slot(name, |v| usable(v))?;
        self.slots[slot as usize]
            .as_ref()
            .map(|s| (&s.name, &s.value))
    }

    /// [`Self::lookup_by`], mutably (scheduling state lives in values).
    pub fn lookup_by_mut(
        &mut self,
        name: &ServiceName,
        mut usable: impl FnMut(&V) -> bool,
    ) -> Option<(&ServiceName, &mut V)> {
        let slot = self.lookup_slot(name, |v| usable(v))?;
        self.slots[slot as usize]
            .as_mut()
            .map(|s| (&s.name, &mut s.value))
    }

    /// Every name and value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&ServiceName, &V)> {
        self.slots.iter().flatten().map(|s| (&s.name, &s.value))
    }

    /// Every name and value, mutably, in no particular order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&ServiceName, &mut V)> {
        self.slots
            .iter_mut()
            .flatten()
            .map(|s| (&s.name, &mut s.value))
    }

    fn lookup_slot(&self, name: &ServiceName, mut usable: impl FnMut(&V) -> bool) -> Option<u32> {
        let wire = name.as_wire();
        // Prefix ends: ends[k] = octets of the first k segments.
        let mut ends = [0_usize; MAX_SEGMENTS];
        let mut count = 0;
        let mut pos = 0;
        for seg in name.segments() {
            pos += 4 + seg.len();
            count += 1;
            ends[count] = pos;
        }
        // Only lengths some entry has, longest first.
        let mut mask = self.len_mask & (u32::MAX >> (31 - count.min(31)));
        while mask != 0 {
            let n = 31 - mask.leading_zeros() as usize;
            mask &= !(1 << n);
            let prefix = &wire[..ends[n]];
            if let Some(slot) = self.find_in(prefix, n) {
                if let Some(s) = self.slots[slot as usize].as_ref() {
                    if usable(&s.value) {
                        return Some(slot);
                    }
                }
            }
        }
        None
    }

    fn find_exact(&self, wire: &[u8], n: usize) -> Option<u32> {
        if self.len_mask & (1 << n) == 0 {
            return None;
        }
        self.find_in(wire, n)
    }

    fn find_in(&self, prefix: &[u8], n: usize) -> Option<u32> {
        let mut cur = Some(*self.by_len[n].get(&self.hash.hash(prefix))?);
        while let Some(i) = cur {
            let s = self.slots[i as usize].as_ref()?;
            if s.name.as_wire() == prefix {
                return Some(i);
            }
            cur = s.next;
        }
        None
    }
}

/// The keys are already SHA-256 output: use them as the table hash.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn n(s: &str) -> ServiceName {
        s.parse().unwrap()
    }

    #[test]
    fn longest_prefix_and_wildcard() {
        let mut fib = Fib::new(10);
        assert_eq!(fib.lookup(&n("a.org/x")), None);
        fib.insert(n("*"), 0).unwrap();
        fib.insert(n("service.org"), 1).unwrap();
        fib.insert(n("service.org/video"), 2).unwrap();
        fib.insert(n("foo.com/a/b"), 3).unwrap();
        fn hit(fib: &Fib<i32>, s: &str) -> Option<(String, i32)> {
            fib.lookup(&n(s)).map(|(k, v)| (k.to_string(), *v))
        }
        assert_eq!(
            hit(&fib, "service.org/video/x"),
            Some(("service.org/video".into(), 2))
        );
        assert_eq!(
            hit(&fib, "service.org/video"),
            Some(("service.org/video".into(), 2))
        );
        assert_eq!(
            hit(&fib, "service.org/audio"),
            Some(("service.org".into(), 1))
        );
        assert_eq!(hit(&fib, "service.org"), Some(("service.org".into(), 1)));
        // Segment-wise, not octet-wise: "service.orgx" is another segment.
        assert_eq!(hit(&fib, "service.orgx/video"), Some(("*".into(), 0)));
        assert_eq!(hit(&fib, "foo.com/a"), Some(("*".into(), 0)));
        assert_eq!(
            hit(&fib, "foo.com/a/b/c/d"),
            Some(("foo.com/a/b".into(), 3))
        );
        assert_eq!(hit(&fib, "*"), Some(("*".into(), 0)));
        // Without `*`, unknown names miss.
        assert_eq!(fib.remove(&n("*")), Some(0));
        assert_eq!(hit(&fib, "other.net"), None);
        assert_eq!(
            hit(&fib, "service.org/video/x"),
            Some(("service.org/video".into(), 2))
        );
        // A filter falls back to shorter prefixes.
        let r = fib.lookup_by(&n("service.org/video/x"), |v| *v != 2);
        assert_eq!(r.map(|(_, v)| *v), Some(1));
        let r = fib.lookup_by(&n("service.org/video/x"), |_| false);
        assert_eq!(r, None);
        assert_eq!(fib.len(), 3);
    }

    #[test]
    fn cap_refuses_new_names_only() {
        let mut fib = Fib::new(2);
        assert_eq!(fib.insert(n("a"), 1), Ok(None));
        assert_eq!(fib.insert(n("b"), 2), Ok(None));
        assert_eq!(fib.insert(n("c"), 3), Err(Full));
        assert_eq!(fib.get(&n("c")), None);
        // Replacing an existing name is not growth.
        assert_eq!(fib.insert(n("a"), 9), Ok(Some(1)));
        assert_eq!(fib.len(), 2);
        fib.remove(&n("b"));
        assert_eq!(fib.insert(n("c"), 3), Ok(None));
        assert_eq!(fib.lookup(&n("c/d")).map(|(_, v)| *v), Some(3));
    }

    #[test]
    fn collision_chains() {
        // Every name hashes to 7: all names of one length share a chain,
        // and only the full-name comparison tells them apart.
        let mut fib = Fib::with_hash(100, NameHash::Custom(|_| 7));
        let names: Vec<ServiceName> = (0..20).map(|i| n(&format!("s{i}/v"))).collect();
        for (i, name) in names.iter().enumerate() {
            fib.insert(name.clone(), i).unwrap();
        }
        fib.insert(n("*"), 100).unwrap();
        for (i, name) in names.iter().enumerate() {
            assert_eq!(fib.get(name), Some(&i));
            let deeper = n(&format!("{name}/x"));
            assert_eq!(fib.lookup(&deeper).map(|(_, v)| *v), Some(i));
        }
        assert_eq!(fib.lookup(&n("s99/v")).map(|(_, v)| *v), Some(100));
        // Remove from the head, the middle and the tail of the chain.
        for i in [19, 10, 0] {
            assert_eq!(fib.remove(&names[i]), Some(i));
            assert_eq!(fib.get(&names[i]), None);
            assert_eq!(fib.lookup(&names[i]).map(|(_, v)| *v), Some(100));
        }
        for (i, name) in names.iter().enumerate() {
            if ![19, 10, 0].contains(&i) {
                assert_eq!(fib.get(name), Some(&i));
            }
        }
        assert_eq!(fib.len(), 18);
    }

    #[test]
    fn keyed_hash_spreads_and_depends_on_the_seed() {
        let names: Vec<String> = (0..10_000)
            .map(|i| format!("svc{i}.example/video"))
            .collect();
        let mut seen = std::collections::HashSet::new();
        for n in &names {
            assert!(seen.insert(keyed_hash(1, n.as_bytes())));
        }
        assert_ne!(keyed_hash(1, b"abc"), keyed_hash(2, b"abc"));
        assert_ne!(keyed_hash(1, b"abc"), keyed_hash(1, b"abd"));
        assert_ne!(keyed_hash(1, b""), keyed_hash(1, b"\0"));
        // The low bits (the table's bucket index) are balanced too.
        let mut buckets = [0_u32; 16];
        for n in &names {
            buckets[(keyed_hash(7, n.as_bytes()) & 15) as usize] += 1;
        }
        assert!(
            buckets.iter().all(|b| (500..=750).contains(b)),
            "{buckets:?}"
        );
    }

    fn arb_seg() -> impl Strategy<Value = String> {
        // A tiny alphabet so prefixes are shared often.
        prop_oneof![Just("a"), Just("b"), Just("c.org"), Just("d")].prop_map(str::to_owned)
    }

    fn arb_name() -> impl Strategy<Value = ServiceName> {
        proptest::collection::vec(arb_seg(), 0..5)
            .prop_map(|segs| ServiceName::from_segments(segs.iter().map(String::as_bytes)).unwrap())
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(ServiceName, u32),
        Remove(ServiceName),
        Lookup(ServiceName),
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (arb_name(), any::<u32>()).prop_map(|(n, v)| Op::Insert(n, v)),
            arb_name().prop_map(Op::Remove),
            arb_name().prop_map(Op::Lookup),
        ]
    }

    /// The naive reference: scan every entry, keep the longest prefix.
    fn naive<'a>(
        r: &'a BTreeMap<ServiceName, u32>,
        name: &ServiceName,
    ) -> Option<(&'a ServiceName, &'a u32)> {
        r.iter()
            .filter(|(k, _)| k.is_prefix_of(name))
            .max_by_key(|(k, _)| k.segment_count())
    }

    proptest! {
        #[test]
        fn matches_naive_reference(
            ops in proptest::collection::vec(arb_op(), 1..200),
            cap in 1_usize..40,
            hash in 0_u8..3,
        ) {
            let mut fib = Fib::with_hash(cap, match hash {
                0 => NameHash::Sha256,
                1 => NameHash::Keyed(0x5eed),
                _ => NameHash::Custom(|w| w.len() as u64 % 3),
            });
            let mut reference = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        let known = reference.contains_key(&k);
                        let r = fib.insert(k.clone(), v);
                        if known || reference.len() < cap {
                            prop_assert_eq!(r, Ok(reference.insert(k, v)));
                        } else {
                            prop_assert_eq!(r, Err(Full));
                        }
                    }
                    Op::Remove(k) => prop_assert_eq!(fib.remove(&k), reference.remove(&k)),
                    Op::Lookup(k) => {
                        prop_assert_eq!(fib.lookup(&k), naive(&reference, &k));
                        prop_assert_eq!(fib.get(&k), reference.get(&k));
                    }
                }
                prop_assert_eq!(fib.len(), reference.len());
            }
            let mut all: Vec<_> = fib.iter().map(|(k, v)| (k.clone(), *v)).collect();
            all.sort();
            let want: Vec<_> = reference.into_iter().collect();
            prop_assert_eq!(all, want);
        }
    }
}
