//! The `[nr]` section of a node file: limits, keys, the REST endpoint and
//! the fabric model (SPEC §1.1: the NR knows the fabric from its config,
//! which `svcroute lab` generates from the lab file).
//!
//! ```toml
//! [nr]
//! fabric_port = 0            # index of the node port attached to the fabric
//! rest_port = 8080           # orchestration REST (0: none)
//! rest_addr = "10.0.0.1"     # optional: listen on this address only
//! max_names = 1024           # registration table: names
//! max_instances = 16         # registration table: nSFFs per name
//! max_discovery = 4096       # discovery table: (name, requester) entries
//! dedup_ms = 50              # the same message again within this: a copy, ignored
//! max_dedup = 1024           # messages remembered for that
//! announce_restart = true    # path update ALL NODES when the NR starts
//! link_down_ttl_ms = 15000   # a link event's "down" expires unless repeated
//!
//! replay_max_age_s = 60      # with keys: a message's sequence number older than this is stale
//!
//! [[nr.key]]                 # HMAC-SHA256 keys (SPEC §0); the first signs
//! id = 1
//! secret = "lab-secret"      # its UTF-8 octets; or hex octets with `hex = true`
//!
//! [nr.self_attach]           # where the NR itself attaches
//! at = "f1"                  # fwd node
//! link_in = 0                # link ID fwd → NR (the bit that reaches the NR)
//! link_out = 1               # link ID NR → fwd
//!
//! [[nr.attach]]              # one per nSFF
//! nsff = 1
//! at = "f1"
//! link_in = 2                # fwd → nSFF
//! link_out = 3               # nSFF → fwd
//!
//! [[nr.link]]                # one per directed link between fwd nodes
//! from = "f1"
//! to = "f2"
//! id = 4
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::Deserialize;
use svcroute_stack::wire::nr::NsffId;

use crate::fabric::{Attach, Fabric};

/// The `[nr]` section of a node file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NrConfig {
    /// Index of the node port on the fabric (GFF in and out).
    pub fabric_port: usize,
    /// TCP port of the orchestration REST API (0: none).
    pub rest_port: u16,
    /// Listen for REST on this address only (default: every address).
    pub rest_addr: Option<IpAddr>,
    /// Listening sockets kept ready for REST.
    pub rest_listeners: usize,
    /// Most simultaneous REST connections.
    pub rest_max_connections: usize,
    /// Most names in the registration table.
    pub max_names: usize,
    /// Most nSFFs registered for one name.
    pub max_instances: usize,
    /// Most (name, requester) entries in the discovery table.
    pub max_discovery: usize,
    /// A GFF message identical to one acted on less than this many ms ago
    /// is a copy (a redundant `nr_links` sends each message over two
    /// paths) and is ignored; 0: every copy is acted on. Keep it below the
    /// nSFFs' path request `retry_ms`, or a retry is taken for a copy.
    pub dedup_ms: u64,
    /// Most messages remembered for `dedup_ms`; beyond, a message is acted
    /// on without being remembered (`nr.dedup_untracked`).
    pub max_dedup: usize,
    /// Send a path update ALL NODES to every nSFF when the NR starts: once
    /// the first frame arrives on the fabric port (its link works), or
    /// [`crate::driver::ANNOUNCE_FALLBACK`] after the start at the latest.
    pub announce_restart: bool,
    /// How long a link stays down after a link event said so, unless a
    /// switch says it again (switches repeat a down link's events every
    /// `link_refresh_ms`, 5 s by default): then it is up again
    /// (`nr.link_down_expired`). One forged "down" cannot keep a link down
    /// (docs/security.md). 0: a down link stays down until an "up"
    /// (default 15000). Operator downs (`ctl link <id> down`) never expire.
    pub link_down_ttl_ms: u64,
    /// Pre-shared keys; when any is configured every NR message must carry
    /// a good tag, and the first key signs what the NR sends.
    #[serde(rename = "key")]
    pub keys: Vec<KeyConfig>,
    /// With keys: messages carry sequence numbers (SPEC §0 replay window
    /// **\[ext\]**); one older (or further ahead) than this many seconds is
    /// dropped (`drop.nr.replay_stale`). Default 60.
    pub replay_max_age_s: u64,
    /// The wall clock at the node's monotonic time 0, µs since the UNIX
    /// epoch (not a config key: the binary reads it at start; sequence
    /// numbers are taken from it).
    #[serde(skip)]
    pub epoch_us: u64,
    /// Where the NR attaches to the fabric.
    pub self_attach: Option<AttachConfig>,
    /// Where each nSFF attaches.
    #[serde(rename = "attach")]
    pub attach: Vec<NsffAttachConfig>,
    /// The directed links between fwd nodes.
    #[serde(rename = "link")]
    pub links: Vec<LinkConfig>,
}

impl Default for NrConfig {
    fn default() -> Self {
        Self {
            fabric_port: 0,
            rest_port: 8080,
            rest_addr: None,
            rest_listeners: 4,
            rest_max_connections: 64,
            max_names: 1024,
            max_instances: 16,
            max_discovery: 4096,
            dedup_ms: 50,
            max_dedup: 1024,
            announce_restart: true,
            link_down_ttl_ms: 15_000,
            keys: Vec::new(),
            replay_max_age_s: svcroute_stack::wire::auth::DEFAULT_MAX_AGE_S,
            epoch_us: 0,
            self_attach: None,
            attach: Vec::new(),
            links: Vec::new(),
        }
    }
}

/// One `[[nr.key]]` (shared with `[[nsff.key]]`).
pub use svcroute_stack::wire::auth::KeyConfig;

/// `[nr.self_attach]`: a node (the NR) on a fwd node.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachConfig {
    /// The fwd node.
    pub at: String,
    /// Link ID fwd → node.
    pub link_in: u8,
    /// Link ID node → fwd.
    pub link_out: u8,
}

/// One `[[nr.attach]]`: an nSFF on a fwd node.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NsffAttachConfig {
    /// The nSFF ID (0..=254).
    pub nsff: u8,
    /// The fwd node.
    pub at: String,
    /// Link ID fwd → nSFF.
    pub link_in: u8,
    /// Link ID nSFF → fwd.
    pub link_out: u8,
}

/// One `[[nr.link]]`: a directed link between two fwd nodes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// The fwd node it leaves.
    pub from: String,
    /// The fwd node it reaches.
    pub to: String,
    /// Its link ID (a pathID bit, 0..=255).
    pub id: u8,
}

/// A configuration the NR cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A numeric key is out of its range.
    #[error("key `{key}`: {value} is out of range {range}")]
    OutOfRange {
        /// The key.
        key: &'static str,
        /// The value given.
        value: u64,
        /// The allowed range, as text.
        range: &'static str,
    },
    /// `[nr.self_attach]` is missing.
    #[error("[nr.self_attach] is missing: the NR must know where it attaches to the fabric")]
    NoSelfAttach,
    /// A link ID is used twice.
    #[error("link ID {0} is used twice (every directed link needs its own bit)")]
    DuplicateLink(u8),
    /// An nSFF ID is out of range or attached twice.
    #[error("[[nr.attach]] nsff {0}: must be 0..=254 and attached once")]
    BadNsff(u8),
    /// A fwd node name is unusable.
    #[error("fwd node name {0:?} must be 1..32 of [A-Za-z0-9_-]")]
    BadNodeName(String),
    /// A link from a node to itself.
    #[error("[[nr.link]] id {0}: `from` and `to` are the same node")]
    SelfLink(u8),
    /// A key is unusable.
    #[error("[[nr.key]] id {0}: empty secret, bad hex, or key ID used twice")]
    BadKey(u8),
}

impl NrConfig {
    /// Check ranges and build the fabric model; the node refuses to start
    /// on an error.
    pub fn validate(&self) -> Result<Fabric, ConfigError> {
        let check = |key, value: usize, lo: usize, hi: usize, range| {
            if (lo..=hi).contains(&value) {
                Ok(())
            } else {
                Err(ConfigError::OutOfRange {
                    key,
                    value: value as u64,
                    range,
                })
            }
        };
        check("fabric_port", self.fabric_port, 0, 63, "0..=63")?;
        check("rest_listeners", self.rest_listeners, 1, 64, "1..=64")?;
        check(
            "rest_max_connections",
            self.rest_max_connections,
            1,
            4096,
            "1..=4096",
        )?;
        check("max_names", self.max_names, 1, 1 << 20, "1..=1048576")?;
        check("max_instances", self.max_instances, 1, 255, "1..=255")?;
        check(
            "max_discovery",
            self.max_discovery,
            1,
            1 << 22,
            "1..=4194304",
        )?;
        check("max_dedup", self.max_dedup, 1, 1 << 16, "1..=65536")?;
        if self.dedup_ms > 10_000 {
            return Err(ConfigError::OutOfRange {
                key: "dedup_ms",
                value: self.dedup_ms,
                range: "0..=10000",
            });
        }
        if self.link_down_ttl_ms > 3_600_000 {
            return Err(ConfigError::OutOfRange {
                key: "link_down_ttl_ms",
                value: self.link_down_ttl_ms,
                range: "0..=3600000",
            });
        }
        KeyConfig::pairs(&self.keys).map_err(ConfigError::BadKey)?;
        let own = self.self_attach.as_ref().ok_or(ConfigError::NoSelfAttach)?;
        let mut ids = BTreeSet::new();
        let mut use_id = |id: u8| {
            if ids.insert(id) {
                Ok(id)
            } else {
                Err(ConfigError::DuplicateLink(id))
            }
        };
        let name = |n: &str| {
            let ok = !n.is_empty()
                && n.len() <= 32
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if ok {
                Ok(n.to_owned())
            } else {
                Err(ConfigError::BadNodeName(n.to_owned()))
            }
        };
        let own = Attach {
            at: name(&own.at)?,
            link_in: use_id(own.link_in)?,
            link_out: use_id(own.link_out)?,
        };
        let mut nsffs = BTreeMap::new();
        for a in &self.attach {
            let id = NsffId::new(a.nsff).ok_or(ConfigError::BadNsff(a.nsff))?;
            let at = Attach {
                at: name(&a.at)?,
                link_in: use_id(a.link_in)?,
                link_out: use_id(a.link_out)?,
            };
            if nsffs.insert(id, at).is_some() {
                return Err(ConfigError::BadNsff(a.nsff));
            }
        }
        let mut links = Vec::new();
        for l in &self.links {
            if l.from == l.to {
                return Err(ConfigError::SelfLink(l.id));
            }
            links.push((name(&l.from)?, name(&l.to)?, use_id(l.id)?));
        }
        Ok(Fabric::new(own, nsffs, links))
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn cfg() -> NrConfig {
        NrConfig {
            self_attach: Some(AttachConfig {
                at: "f1".into(),
                link_in: 0,
                link_out: 1,
            }),
            attach: vec![NsffAttachConfig {
                nsff: 1,
                at: "f2".into(),
                link_in: 2,
                link_out: 3,
            }],
            links: vec![
                LinkConfig {
                    from: "f1".into(),
                    to: "f2".into(),
                    id: 4,
                },
                LinkConfig {
                    from: "f2".into(),
                    to: "f1".into(),
                    id: 5,
                },
            ],
            ..NrConfig::default()
        }
    }

    #[test]
    fn validation_names_the_problem() {
        assert!(cfg().validate().is_ok());
        let mut c = cfg();
        c.links[1].id = 2;
        assert_eq!(c.validate().unwrap_err(), ConfigError::DuplicateLink(2));
        let mut c = cfg();
        c.self_attach = None;
        assert_eq!(c.validate().unwrap_err(), ConfigError::NoSelfAttach);
        let mut c = cfg();
        c.attach[0].nsff = 255;
        assert_eq!(c.validate().unwrap_err(), ConfigError::BadNsff(255));
        let mut c = cfg();
        c.links[0].to = "f1".into();
        assert_eq!(c.validate().unwrap_err(), ConfigError::SelfLink(4));
        let mut c = cfg();
        c.max_instances = 0;
        assert!(matches!(
            c.validate().unwrap_err(),
            ConfigError::OutOfRange {
                key: "max_instances",
                ..
            }
        ));
        let mut c = cfg();
        c.dedup_ms = 60_000;
        assert!(matches!(
            c.validate().unwrap_err(),
            ConfigError::OutOfRange {
                key: "dedup_ms",
                ..
            }
        ));
        let mut c = cfg();
        c.links[0].from = "a b".into();
        assert!(matches!(
            c.validate().unwrap_err(),
            ConfigError::BadNodeName(_)
        ));
    }
}
