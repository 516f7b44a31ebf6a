//! Counters: every frame, every drop with its reason.

use std::collections::BTreeMap;

use serde::Serialize;

/// Named monotonically increasing counters of one node.
///
/// Hot-path counters are plain fields; everything else, above all every drop
/// reason, is a named entry so a new reason needs no schema change.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Counters {
    /// Frames received from links.
    pub rx_frames: u64,
    /// Bytes received from links.
    pub rx_bytes: u64,
    /// Frames sent to links.
    pub tx_frames: u64,
    /// Bytes sent to links.
    pub tx_bytes: u64,
    /// Named counters, e.g. `drop.rx_truncated`, `http.requests`.
    pub named: BTreeMap<String, u64>,
}

impl Counters {
    /// Add one to the counter `name`.
    pub fn bump(&mut self, name: &str) {
        self.add(name, 1);
    }

    /// Add `n` to the counter `name`.
    pub fn add(&mut self, name: &str, n: u64) {
        if let Some(v) = self.named.get_mut(name) {
            *v += n;
        } else {
            self.named.insert(name.to_owned(), n);
        }
    }

    /// Count a dropped frame or message under `drop.<reason>`.
    pub fn drop(&mut self, reason: &str) {
        let mut key = String::with_capacity(5 + reason.len());
        key.push_str("drop.");
        key.push_str(reason);
        self.add(&key, 1);
    }

    /// The value of `name` (0 if never bumped).
    pub fn get(&self, name: &str) -> u64 {
        self.named.get(name).copied().unwrap_or(0)
    }

    /// Sum of every `drop.*` counter.
    pub fn drops(&self) -> u64 {
        self.named
            .iter()
            .filter(|(k, _)| k.starts_with("drop."))
            .map(|(_, v)| v)
            .sum()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn drop_reasons_are_named_and_summed() {
        let mut c = Counters::default();
        c.drop("rx_truncated");
        c.drop("rx_truncated");
        c.drop("bad_checksum");
        c.bump("http.requests");
        assert_eq!(c.get("drop.rx_truncated"), 2);
        assert_eq!(c.drops(), 3);
        assert_eq!(c.get("nothing"), 0);
    }
}
