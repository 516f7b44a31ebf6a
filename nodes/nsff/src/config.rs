//! The `[nsff]` section of a node file.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use svcroute_stack::wire::gff::PathId;
use svcroute_stack::wire::nr::{Fqdn, NsffId};

use crate::cache::{CacheConfig, CacheConfigError};
use crate::transport::{self, TransportConfig};

/// One local service function (`[[nsff.sf]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SfConfig {
    /// The name it serves (registered at the NR).
    pub fqdn: String,
    /// Its address, reached over `sf_port`.
    pub addr: IpAddr,
    /// Its HTTP port. Default 80.
    #[serde(default = "default_http_port")]
    pub port: u16,
}

const fn default_http_port() -> u16 {
    80
}

/// nSFF settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NsffConfig {
    /// This nSFF's ID, 0..=254. Default 1.
    pub nsff_id: u8,
    /// Index of the node port on the fabric. Default 0.
    pub fabric_port: usize,
    /// Index of the port clients connect to (HTTP). Default 1.
    pub client_port: usize,
    /// Index of the port local SFs are reached over. Default: `client_port`.
    pub sf_port: Option<usize>,
    /// Link ID fwd → this nSFF: GFF frames whose pathID holds it are ours.
    pub link_in: u8,
    /// Link ID this nSFF → fwd (informational; the NR computes paths).
    pub link_out: u8,
    /// Links of the pathID to the NR (registrations, path requests).
    pub nr_links: Vec<u8>,
    /// The client-facing HTTP port (transparent: the name is `Host`).
    /// Default 80; 0 = none.
    pub http_port: u16,
    /// The explicit proxy port (absolute-form targets name the service;
    /// else `Host`). Default 3128; 0 = none.
    pub proxy_port: u16,
    /// Registrations are re-sent this often, ms (the RFC has no
    /// acknowledgement). Default 30000.
    pub register_interval_ms: u64,
    /// SF health check period (a TCP connect), ms; 0 = no checks.
    /// Default 2000.
    pub health_interval_ms: u64,
    /// A probe not connected after this long fails, ms. Default 1000.
    pub health_timeout_ms: u64,
    /// Failed probes in a row that deregister the SF's name. Default 2.
    pub health_failures: u32,
    /// A client connection with no request in progress (or not reading its
    /// response) for this long is closed, s. Default 120.
    pub client_idle_timeout_s: u64,
    /// Listening sockets kept armed. Default 4.
    pub listeners: usize,
    /// Most client connections at once. Default 1024.
    pub max_clients: usize,
    /// Local service functions.
    pub sf: Vec<SfConfig>,
    /// The transport (`[nsff.transport]`).
    pub transport: TransportConfig,
    /// The FQDN cache (`[nsff.cache]`).
    pub cache: CacheConfig,
}

impl Default for NsffConfig {
    fn default() -> Self {
        Self {
            nsff_id: 1,
            fabric_port: 0,
            client_port: 1,
            sf_port: None,
            link_in: 0,
            link_out: 0,
            nr_links: Vec::new(),
            http_port: 80,
            proxy_port: 3128,
            register_interval_ms: 30_000,
            health_interval_ms: 2000,
            health_timeout_ms: 1000,
            health_failures: 2,
            client_idle_timeout_s: 120,
            listeners: 4,
            max_clients: 1024,
            sf: Vec::new(),
            transport: TransportConfig::default(),
            cache: CacheConfig::default(),
        }
    }
}

/// A bad setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `nsff_id` is 255.
    #[error("nsff.nsff_id must be 0..=254")]
    NsffId,
    /// An SF name is not a canonical FQDN.
    #[error("nsff.sf: bad fqdn {0:?}")]
    Fqdn(String),
    /// A zero limit.
    #[error(
        "nsff: listeners, max_clients, register_interval_ms, health_timeout_ms, \
         health_failures and client_idle_timeout_s must be non-zero"
    )]
    Zero,
    /// The transport section.
    #[error("nsff.transport: {0}")]
    Transport(#[from] transport::ConfigError),
    /// The cache section.
    #[error("nsff.cache: {0}")]
    Cache(#[from] CacheConfigError),
}

impl NsffConfig {
    /// Check every setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.id()?;
        self.sfs()?;
        if self.listeners == 0
            || self.max_clients == 0
            || self.register_interval_ms == 0
            || self.health_timeout_ms == 0
            || self.health_failures == 0
            || self.client_idle_timeout_s == 0
        {
            return Err(ConfigError::Zero);
        }
        self.transport.validate()?;
        Ok(())
    }

    /// The nSFF ID.
    pub fn id(&self) -> Result<NsffId, ConfigError> {
        NsffId::new(self.nsff_id).ok_or(ConfigError::NsffId)
    }

    /// The local SFs with parsed names.
    pub fn sfs(&self) -> Result<Vec<(Fqdn, IpAddr, u16)>, ConfigError> {
        self.sf
            .iter()
            .map(|s| {
                let f = Fqdn::new(&s.fqdn.to_ascii_lowercase())
                    .map_err(|_| ConfigError::Fqdn(s.fqdn.clone()))?;
                Ok((f, s.addr, s.port))
            })
            .collect()
    }

    /// The pathID to the NR.
    pub fn nr_path(&self) -> PathId {
        self.nr_links.iter().fold(PathId::ZERO, |p, &l| p.with(l))
    }

    /// The port local SFs are reached over.
    pub fn sf_port(&self) -> usize {
        self.sf_port.unwrap_or(self.client_port)
    }
}
