//! The `[mda]` section of a node file: [`MdaConfig`], checked when the file
//! is read ([`ConfigError`] names the bad key). `docs/mda.md` lists every key.

use serde::{Deserialize, Serialize};

use crate::core;

/// Configuration of the `mda` role (TOML table `[mda]`). Every key is
/// optional; see `docs/mda.md`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MdaConfig {
    /// Scopes served, comma separated (default `DEFAULT`).
    pub scopes: String,
    /// DA URL (default `service:directory-agent://<first address>`).
    pub url: Option<String>,
    /// Static peer addresses.
    pub peers: Vec<String>,
    /// Mesh enhanced (default true); false: plain RFC 2608 DA.
    pub mesh: bool,
    /// Extra DAAdvert attributes, as an SLP attribute list.
    pub attrs: String,
    /// CONFIG_DA_KEEPALIVE, seconds (200).
    pub keepalive_s: u64,
    /// CONFIG_DA_TIMEOUT, seconds (300).
    pub timeout_s: u64,
    /// CONFIG_DA_BEAT, seconds (10800).
    pub beat_s: u64,
    /// CONFIG_START_WAIT, milliseconds (3000).
    pub start_wait_ms: u64,
    /// Seconds between DAAdvert probes of unpeered known peers (10).
    pub peer_retry_s: u64,
    /// Most registration states, tombstones included (100000).
    pub max_registrations: usize,
    /// Most peers (64).
    pub max_peers: usize,
    /// Most TCP connections (256).
    pub max_connections: usize,
    /// UDP reply budget: request length × this (2).
    pub amplification_factor: usize,
    /// `min-refresh-interval`, seconds (0: none).
    pub min_refresh_s: u32,
    /// Listening TCP sockets kept armed (4).
    pub listeners: usize,
    /// TCP socket buffer size each way, bytes (65536).
    pub tcp_buffer: usize,
    /// Largest SLP message accepted over TCP, bytes (65536).
    pub max_frame: usize,
    /// A TCP frame must be complete this many ms after its first octet, and
    /// an inbound connection's first message this long after the accept
    /// (5000).
    pub frame_timeout_ms: u64,
    /// Reply-byte budget per destination address, bytes: UDP replies above
    /// request × `amplification_factor` draw on it (65536).
    pub reply_budget: usize,
    /// Bytes per second the budget refills (16384).
    pub reply_budget_per_s: usize,
    /// Most destination addresses with a tracked budget (4096).
    pub reply_budget_addrs: usize,
    /// Largest queued output per connection, bytes (64 MiB).
    pub max_backlog: usize,
    /// RNG seed (0: derived from the node name).
    pub seed: u64,
    /// `[[mda.keys]]`: keys to verify SLP auth blocks with (SA
    /// registrations, peers' DAAdverts); their SPIs are our DAAdvert's SPI
    /// list. Checked when the file is read.
    pub keys: core::KeyList,
    /// `[[mda.sign_keys]]`: keys our DAAdverts are signed with.
    pub sign_keys: core::SignKeyList,
}

impl Default for MdaConfig {
    fn default() -> Self {
        Self {
            scopes: "DEFAULT".into(),
            url: None,
            peers: Vec::new(),
            mesh: true,
            attrs: String::new(),
            keepalive_s: 200,
            timeout_s: 300,
            beat_s: 10_800,
            start_wait_ms: 3000,
            peer_retry_s: 10,
            max_registrations: 100_000,
            max_peers: 64,
            max_connections: 256,
            amplification_factor: 2,
            min_refresh_s: 0,
            listeners: 4,
            tcp_buffer: 65_536,
            max_frame: 65_536,
            frame_timeout_ms: 5000,
            reply_budget: 65_536,
            reply_budget_per_s: 16_384,
            reply_budget_addrs: 4096,
            max_backlog: 64 << 20,
            seed: 0,
            keys: core::KeyList::default(),
            sign_keys: core::SignKeyList::default(),
        }
    }
}

/// Why a configuration is refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `scopes` is not a scope list.
    #[error("mda.scopes: not a scope list: {0:?}")]
    Scopes(String),
    /// `attrs` is not an attribute list.
    #[error("mda.attrs: not an attribute list: {0:?}")]
    Attrs(String),
    /// A peer is not an IP address.
    #[error("mda.peers: not an IP address: {0:?}")]
    Peer(String),
    /// A `[[mda.keys]]` or `[[mda.sign_keys]]` entry is refused.
    #[error("mda.{list} (spi {spi:?}): {problem}")]
    Key {
        /// `keys` or `sign_keys`.
        list: &'static str,
        /// The entry's SPI.
        spi: String,
        /// What is wrong, naming the field.
        problem: String,
    },
}
