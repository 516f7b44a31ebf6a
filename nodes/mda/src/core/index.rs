//! Query indexes over the registration database: by service type (each
//! registration under its type and, for `service:a:b`, its abstract type
//! `service:a`) and by attribute equality (folded tag and typed value, RFC
//! 2608 §6.4's rules). An index only narrows: every candidate is checked
//! with the request's real predicate, type, scopes and language, so a hash
//! collision costs time, never a wrong answer.
//!
//! ```text
//!   (&(color=red)(id=7)) ── the smaller posting of color=red, id=7 ──► candidates ──► predicate
//!   (|(id=7)(id=8))      ── the union of both postings
//!   substring, <=, >=, presence, negation ── the type's posting (a scan of the type)
//! ```

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use svcroute_stack::wire::slp::filter::Op;
use svcroute_stack::wire::slp::{fold, AttrList, AttrValue, Filter, ServiceType};

/// A state's slot in the store.
pub(super) type Id = u32;

/// Postings longer than this are a set (constant-time removal).
const FEW: usize = 32;

/// The states under one index key.
#[derive(Debug)]
enum Posting {
    Few(Vec<Id>),
    Many(HashSet<Id>),
}

impl Posting {
    fn insert(&mut self, id: Id) {
        match self {
            Self::Few(v) => {
                if !v.contains(&id) {
                    v.push(id);
                }
                if v.len() > FEW {
                    *self = Self::Many(v.drain(..).collect());
                }
            }
            Self::Many(s) => {
                s.insert(id);
            }
        }
    }

    /// Remove `id`; whether the posting is empty now.
    fn remove(&mut self, id: Id) -> bool {
        match self {
            Self::Few(v) => {
                v.retain(|x| *x != id);
                v.is_empty()
            }
            Self::Many(s) => {
                s.remove(&id);
                s.is_empty()
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Few(v) => v.len(),
            Self::Many(s) => s.len(),
        }
    }

    fn extend_into(&self, out: &mut Vec<Id>) {
        match self {
            Self::Few(v) => out.extend_from_slice(v),
            Self::Many(s) => out.extend(s.iter().copied()),
        }
    }
}

/// The type and attribute-equality indexes.
#[derive(Debug, Default)]
pub(super) struct Index {
    types: HashMap<u64, Posting>,
    eq: HashMap<u64, Posting>,
}

impl Index {
    /// Index state `id` with `service_type` and `attrs`.
    pub(super) fn add(&mut self, id: Id, service_type: &ServiceType, attrs: &AttrList) {
        for k in type_keys(service_type) {
            add(&mut self.types, k, id);
        }
        for k in attr_keys(attrs) {
            add(&mut self.eq, k, id);
        }
    }

    /// Forget state `id`, indexed with `service_type` and `attrs`.
    pub(super) fn remove(&mut self, id: Id, service_type: &ServiceType, attrs: &AttrList) {
        for k in type_keys(service_type) {
            remove(&mut self.types, k, id);
        }
        for k in attr_keys(attrs) {
            remove(&mut self.eq, k, id);
        }
    }

    /// The states a SrvRqst for `stype` with `filter` may match (unsorted,
    /// without repeats): the smallest posting the filter's equality terms
    /// allow, else the type's if it is under an eighth of the `total`
    /// states; `None`: scan them all (in key order, no sort needed).
    pub(super) fn candidates(
        &self,
        stype: &ServiceType,
        filter: Option<&Filter>,
        total: usize,
    ) -> Option<Vec<Id>> {
        let mut out = Vec::new();
        if let Some(f) = filter.filter(|f| self.plan_len(f).is_some()) {
            self.plan(f, &mut out);
            return Some(out);
        }
        let p = self.types.get(&key_of(&lower(stype.as_str())));
        match p {
            None => Some(out),
            Some(p) if p.len().saturating_mul(8) < total => {
                p.extend_into(&mut out);
                Some(out)
            }
            Some(_) => None,
        }
    }

    /// How many candidates `f`'s plan yields; `None` if it has none (a
    /// term the index cannot answer).
    fn plan_len(&self, f: &Filter) -> Option<usize> {
        match f {
            Filter::Compare(tag, Op::Eq | Op::Approx, v) => {
                Some(self.eq.get(&value_key(tag, v)).map_or(0, Posting::len))
            }
            Filter::And(fs) => fs.iter().filter_map(|f| self.plan_len(f)).min(),
            Filter::Or(fs) => fs.iter().map(|f| self.plan_len(f)).sum(),
            _ => None,
        }
    }

    /// Append `f`'s candidates (its plan must exist).
    fn plan(&self, f: &Filter, out: &mut Vec<Id>) {
        match f {
            Filter::Compare(tag, _, v) => {
                if let Some(p) = self.eq.get(&value_key(tag, v)) {
                    p.extend_into(out);
                }
            }
            Filter::And(fs) => {
                if let Some(best) = fs
                    .iter()
                    .filter_map(|f| self.plan_len(f).map(|n| (n, f)))
                    .min_by_key(|(n, _)| *n)
                {
                    self.plan(best.1, out);
                }
            }
            Filter::Or(fs) => {
                for f in fs {
                    self.plan(f, out);
                }
                out.sort_unstable();
                out.dedup();
            }
            _ => {}
        }
    }
}

fn add(map: &mut HashMap<u64, Posting>, k: u64, id: Id) {
    map.entry(k)
        .or_insert_with(|| Posting::Few(Vec::new()))
        .insert(id);
}

fn remove(map: &mut HashMap<u64, Posting>, k: u64, id: Id) {
    if map.get_mut(&k).is_some_and(|p| p.remove(id)) {
        map.remove(&k);
    }
}

fn lower(s: &str) -> String {
    s.to_ascii_lowercase()
}

fn key_of(v: &impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

/// A registration's type keys: its type, and its abstract type
/// (`service:printer` of `service:printer:lpr`), lower-cased.
fn type_keys(t: &ServiceType) -> Vec<u64> {
    let full = lower(t.as_str());
    let mut keys = vec![key_of(&full)];
    if t.is_service_scheme() {
        if let Some(i) = full[8..].find(':') {
            keys.push(key_of(&full[..8 + i].to_owned()));
        }
    }
    keys
}

/// The equality key of `tag` = `v`: what RFC 2608's comparison treats as
/// equal hashes equal (strings folded; integers by value).
fn value_key(tag: &str, v: &AttrValue) -> u64 {
    let tag = fold(tag);
    match v {
        AttrValue::Integer(i) => key_of(&(tag, 0_u8, i64::from(*i))),
        AttrValue::Boolean(b) => key_of(&(tag, 1_u8, *b)),
        AttrValue::String(s) => key_of(&(tag, 2_u8, fold(s))),
        AttrValue::Opaque(o) => key_of(&(tag, 3_u8, o.clone())),
    }
}

fn attr_keys(attrs: &AttrList) -> Vec<u64> {
    let mut keys: Vec<u64> = attrs
        .attributes()
        .iter()
        .flat_map(|a| a.values().iter().map(|v| value_key(a.tag(), v)))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

#[cfg(test)]
mod test {
    use svcroute_stack::wire::slp::Predicate;

    use super::*;

    fn st(s: &str) -> ServiceType {
        ServiceType::parse(s).unwrap()
    }

    fn cands(ix: &Index, t: &str, p: &str) -> Vec<Id> {
        let p = Predicate::new(p).unwrap();
        let mut c = ix.candidates(&st(t), p.filter(), 1000).unwrap_or_default();
        c.sort_unstable();
        c
    }

    #[test]
    fn equality_terms_narrow_and_the_rest_falls_back_to_the_type() {
        let mut ix = Index::default();
        let lpr = st("service:printer:lpr");
        for i in 0..100 {
            let a = AttrList::parse(&format!("(id={i}),(zone={}),(color=Red)", i % 10)).unwrap();
            ix.add(i, &lpr, &a);
        }
        ix.add(
            100,
            &st("service:scanner"),
            &AttrList::parse("(id=7)").unwrap(),
        );
        assert_eq!(
            cands(&ix, "service:printer", "(&(color=red)(id=7))"),
            [7, 100]
        );
        assert_eq!(cands(&ix, "service:printer", "(zone=3)").len(), 10);
        assert_eq!(cands(&ix, "service:printer", "(|(id=1)(id=2))"), [1, 2]);
        assert_eq!(
            cands(&ix, "service:printer", "(COLOR= red )").len(),
            100,
            "folded"
        );
        // Substring, range: the type's states (its abstract type included),
        // or a scan when the type holds an eighth of the table or more.
        assert_eq!(cands(&ix, "service:printer", "(id=1*)").len(), 100);
        assert_eq!(cands(&ix, "service:printer:lpr", "(id>=5)").len(), 100);
        assert_eq!(cands(&ix, "service:scanner", "").len(), 1);
        let p = Predicate::new("(id=1*)").unwrap();
        assert_eq!(ix.candidates(&lpr, p.filter(), 101), None, "a scan");
        assert_eq!(cands(&ix, "service:printer", "(id=1000)"), Vec::<Id>::new());
        // Removal.
        let a = AttrList::parse("(id=7),(zone=7),(color=Red)").unwrap();
        ix.remove(7, &lpr, &a);
        assert_eq!(cands(&ix, "service:printer", "(id=7)"), [100]);
        assert_eq!(cands(&ix, "service:printer", "").len(), 99);
    }
}
