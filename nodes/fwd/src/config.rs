//! The `[fwd]` section of a node file.

use serde::Deserialize;
use smoltcp::time::Duration;
use svcroute_stack::wire::gff::PathId;

/// Fewest milliseconds between hellos.
pub const MIN_HELLO_MS: u64 = 10;
/// Most milliseconds between hellos.
pub const MAX_HELLO_MS: u64 = 60_000;
/// Most milliseconds of silence before a link is declared down.
pub const MAX_DEAD_MS: u64 = 600_000;

/// The `[fwd]` section of a node file (SPEC §1.1).
///
/// ```toml
/// [fwd]
/// node_id = 1                 # this switch's ID in hellos (default 0)
/// link_ids = [0, 1, 2]        # outgoing link ID of each [[port]], in port order
/// hello_ms = 1000             # hello interval per port (default 1000)
/// dead_ms = 3000              # silence before a link is down (default 3000)
/// link_refresh_ms = 5000      # a down link's events again this often (0: never)
/// nr_path = "4000…00"         # optional: 64 hex digits, the pathID to the NR
/// nr_links = [1, 4]           # optional: link IDs OR-ed into nr_path
/// auth = { key_id = 1, secret = "00112233445566778899aabbccddeeff" }  # optional
/// replay_max_age_s = 60       # with auth: a hello's sequence number older than this is stale
/// ```
///
/// Unknown keys are errors. [`FwdConfig::validate`] checks the values
/// against the node's port count.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FwdConfig {
    /// This node's ID, sent in its hellos (default 0).
    pub node_id: u8,
    /// The outgoing (directed) link ID of each port, aligned with the node
    /// file's `[[port]]` list; all distinct (required: one per port).
    pub link_ids: Vec<u8>,
    /// Milliseconds between link hellos on every port (default 1000).
    pub hello_ms: u64,
    /// Milliseconds without a hello after which a link is down (default 3000;
    /// more than `hello_ms`).
    pub dead_ms: u64,
    /// Milliseconds between repeats of a down link's link events to the NR
    /// (default 5000; 0: only on the change). The NR lets a down state
    /// expire unless it is repeated (its `link_down_ttl_ms`), so a forged
    /// "down" does not last.
    pub link_refresh_ms: u64,
    /// The pathID over which link events go to the NR, 64 hex digits
    /// (default: none; see also `nr_links`).
    pub nr_path: Option<String>,
    /// Link IDs OR-ed into `nr_path` (default empty). With neither, link
    /// events are counted (`fwd.link_events_unsent`) but not sent.
    pub nr_links: Vec<u8>,
    /// Pre-shared key for hellos and link events (default: none, messages
    /// go unsigned and unsigned hellos are accepted).
    pub auth: Option<AuthConfig>,
    /// With `auth`: hellos and link events carry sequence numbers (SPEC §0
    /// replay window **\[ext\]**); a hello whose number is older (or
    /// further ahead) than this many seconds is dropped. Default 60.
    pub replay_max_age_s: u64,
    /// The wall clock at the node's monotonic time 0, µs since the UNIX
    /// epoch (not a config key: the binary reads it at start).
    #[serde(skip)]
    pub epoch_us: u64,
}

impl Default for FwdConfig {
    fn default() -> Self {
        Self {
            node_id: 0,
            link_ids: Vec::new(),
            hello_ms: 1000,
            dead_ms: 3000,
            link_refresh_ms: 5000,
            nr_path: None,
            nr_links: Vec::new(),
            auth: None,
            replay_max_age_s: svcroute_stack::wire::auth::DEFAULT_MAX_AGE_S,
            epoch_us: 0,
        }
    }
}

/// A pre-shared HMAC-SHA256 key (SPEC §0).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// The key's ID, carried in every auth tag.
    pub key_id: u8,
    /// The secret, hex (at least 16 octets).
    pub secret: String,
}

/// Fewest octets in an auth secret.
pub const MIN_SECRET_LEN: usize = 16;

/// A bad `[fwd]` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `link_ids` does not have one entry per port.
    #[error("key `link_ids`: {got} entries for {ports} [[port]]s; give one link ID per port")]
    LinkCount {
        /// Entries given.
        got: usize,
        /// Ports of the node.
        ports: usize,
    },
    /// A link ID appears twice.
    #[error("key `link_ids`: link ID {0} appears twice; every directed link has its own ID")]
    DuplicateLink(u8),
    /// A number out of range.
    #[error("key `{key}`: {value} is out of range ({range})")]
    OutOfRange {
        /// The key.
        key: &'static str,
        /// The value given.
        value: u64,
        /// The allowed range, in words.
        range: &'static str,
    },
    /// `nr_path` is not 64 hex digits.
    #[error("key `nr_path`: {0:?} is not a pathID of 64 hex digits")]
    BadPath(String),
    /// The secret is not hex or too short.
    #[error("key `auth.secret`: must be at least {MIN_SECRET_LEN} octets of hex")]
    BadSecret,
}

impl FwdConfig {
    /// Check every value for a node with `ports` ports.
    pub fn validate(&self, ports: usize) -> Result<(), ConfigError> {
        if self.link_ids.len() != ports {
            return Err(ConfigError::LinkCount {
                got: self.link_ids.len(),
                ports,
            });
        }
        let mut seen = PathId::ZERO;
        for &l in &self.link_ids {
            if seen.bit(l) {
                return Err(ConfigError::DuplicateLink(l));
            }
            seen.set_bit(l);
        }
        if !(MIN_HELLO_MS..=MAX_HELLO_MS).contains(&self.hello_ms) {
            return Err(ConfigError::OutOfRange {
                key: "hello_ms",
                value: self.hello_ms,
                range: "10..=60000",
            });
        }
        if self.dead_ms <= self.hello_ms || self.dead_ms > MAX_DEAD_MS {
            return Err(ConfigError::OutOfRange {
                key: "dead_ms",
                value: self.dead_ms,
                range: "more than hello_ms, at most 600000",
            });
        }
        if self.link_refresh_ms != 0
            && !(self.hello_ms..=MAX_DEAD_MS).contains(&self.link_refresh_ms)
        {
            return Err(ConfigError::OutOfRange {
                key: "link_refresh_ms",
                value: self.link_refresh_ms,
                range: "0, or hello_ms..=600000",
            });
        }
        self.nr_path()?;
        self.secret()?;
        Ok(())
    }

    /// The pathID to the NR: `nr_path` OR `nr_links` (zero: none).
    pub fn nr_path(&self) -> Result<PathId, ConfigError> {
        let mut path = match &self.nr_path {
            Some(hex) => parse_path(hex).ok_or_else(|| ConfigError::BadPath(hex.clone()))?,
            None => PathId::ZERO,
        };
        for &l in &self.nr_links {
            path.set_bit(l);
        }
        Ok(path)
    }

    /// The auth key, decoded.
    pub fn secret(&self) -> Result<Option<(u8, Vec<u8>)>, ConfigError> {
        let Some(auth) = &self.auth else {
            return Ok(None);
        };
        let secret = decode_hex(&auth.secret).ok_or(ConfigError::BadSecret)?;
        if secret.len() < MIN_SECRET_LEN {
            return Err(ConfigError::BadSecret);
        }
        Ok(Some((auth.key_id, secret)))
    }

    /// The hello interval.
    pub fn hello_interval(&self) -> Duration {
        Duration::from_millis(self.hello_ms)
    }

    /// The dead interval.
    pub fn dead_interval(&self) -> Duration {
        Duration::from_millis(self.dead_ms)
    }
}

/// A pathID from 64 hex digits (as [`PathId`]'s `Display` writes it).
pub fn parse_path(hex: &str) -> Option<PathId> {
    PathId::from_slice(&decode_hex(hex)?)
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod test {
    use super::*;

    fn cfg(links: &[u8]) -> FwdConfig {
        FwdConfig {
            link_ids: links.to_vec(),
            ..FwdConfig::default()
        }
    }

    #[test]
    fn defaults_follow_the_spec() {
        let c = cfg(&[0, 1]);
        assert_eq!((c.hello_ms, c.dead_ms), (1000, 3000));
        assert_eq!(c.validate(2), Ok(()));
        assert_eq!(c.nr_path(), Ok(PathId::ZERO));
    }

    #[test]
    fn bad_values_name_their_key() {
        assert_eq!(
            cfg(&[0]).validate(2),
            Err(ConfigError::LinkCount { got: 1, ports: 2 })
        );
        assert_eq!(cfg(&[3, 3]).validate(2), Err(ConfigError::DuplicateLink(3)));
        let c = FwdConfig {
            dead_ms: 500,
            ..cfg(&[0])
        };
        assert!(c.validate(1).unwrap_err().to_string().contains("dead_ms"));
        let c = FwdConfig {
            nr_path: Some("zz".into()),
            ..cfg(&[0])
        };
        assert!(matches!(c.validate(1), Err(ConfigError::BadPath(_))));
        let c = FwdConfig {
            auth: Some(AuthConfig {
                key_id: 1,
                secret: "00ff".into(),
            }),
            ..cfg(&[0])
        };
        assert_eq!(c.validate(1), Err(ConfigError::BadSecret));
    }

    #[test]
    fn nr_path_is_hex_or_links_or_both() {
        let p = PathId::link(4).with(200);
        let c = FwdConfig {
            nr_path: Some(p.to_string()),
            nr_links: vec![7],
            ..cfg(&[0])
        };
        assert_eq!(c.nr_path(), Ok(p.with(7)));
        assert_eq!(parse_path(&p.to_string()[..62]), None);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = serde_json::from_str::<FwdConfig>(r#"{"link_ids":[1],"helo_ms":5}"#);
        assert!(e.unwrap_err().to_string().contains("helo_ms"));
    }
}
