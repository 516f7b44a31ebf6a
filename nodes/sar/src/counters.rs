//! Named counters: `sar.*` events and `drop.sar.*` drops and refusals, kept
//! cumulatively and as increments since the driver last drained them (the
//! mda core's shape).

use std::collections::BTreeMap;

/// Counter name → value.
pub type Counters = BTreeMap<&'static str, u64>;

/// Cumulative counters plus the increments not yet drained.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    total: Counters,
    fresh: Counters,
}

impl Tally {
    pub(crate) fn bump(&mut self, name: &'static str) {
        self.add(name, 1);
    }

    pub(crate) fn add(&mut self, name: &'static str, n: u64) {
        if n == 0 {
            return;
        }
        *self.total.entry(name).or_insert(0) += n;
        *self.fresh.entry(name).or_insert(0) += n;
    }

    pub(crate) const fn total(&self) -> &Counters {
        &self.total
    }

    pub(crate) fn drain_into(&mut self, out: &mut Counters) {
        for (k, v) in std::mem::take(&mut self.fresh) {
            *out.entry(k).or_insert(0) += v;
        }
    }
}
