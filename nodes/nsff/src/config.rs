//! The `[nsff]` section of a node file.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use svcroute_stack::wire::gff::PathId;
use svcroute_stack::wire::nr::{Fqdn, NsffId};

use svcroute_stack::wire::nsh::Spi;

use crate::cache::{CacheConfig, CacheConfigError};
use crate::classic::{ClassicConfig, Nnlm, Row, MAX_ROWS};
use crate::sfc::{Classifier, Rule, RuleConfig, MAX_RULES};
use crate::transparent::{Interceptor, TransparentConfig};
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
    /// Its TLS port: passthrough sessions for its name connect here.
    /// Default 443.
    #[serde(default = "default_tls_port")]
    pub tls_port: u16,
}

const fn default_tls_port() -> u16 {
    443
}

const fn default_http_port() -> u16 {
    80
}

/// One nNLM row (`[[nsff.nnlm]]`, SPEC §1.4): (SPI, SI) → next hop and TE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NnlmRowConfig {
    /// Service path identifier, 0..=0xFFFFFF.
    pub spi: u32,
    /// Service index, 0..=255.
    pub si: u32,
    /// An IPv4 or IPv6 address, a MAC, a name (optionally with a `/path`),
    /// `http-service` or `end`.
    pub next_hop: String,
    /// `vxlan-gpe`, `gre`, `ethernet`, `http` or `none`.
    pub te: String,
    /// Egress port index (classic TEs; needed for a MAC next hop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<usize>,
    /// VNI for `vxlan-gpe` (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vni: Option<u32>,
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
    /// The client-facing TLS passthrough port: the ClientHello's SNI names
    /// the service, TLS is not terminated. Default 443; 0 = none.
    pub https_port: u16,
    /// Transparent interception on `client_port`: TCP to `http_port` and
    /// `https_port` of destinations that are not ours is terminated here
    /// as if addressed to us (`false`, `true` = any destination, or a list
    /// of prefixes). Default `false`.
    pub transparent: TransparentConfig,
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
    /// An SF connection kept for reuse between requests is closed after
    /// this long, s. Default 300 (the SF's own idle timeout usually ends
    /// it first).
    pub sf_idle_timeout_s: u64,
    /// TCP keep-alives on an SF connection kept for reuse (RFC 8677 §5.3:
    /// "nSFF2 may maintain the TCP connection through keep-alive
    /// messages"), every this many s; an SF that answers none within three
    /// intervals loses the connection (`nsff.sf_idle_lost`). 0: none.
    /// Default 10.
    pub sf_keepalive_s: u64,
    /// Listening sockets kept armed. Default 4.
    pub listeners: usize,
    /// Most client connections at once. Default 1024.
    pub max_clients: usize,
    /// Local service functions.
    pub sf: Vec<SfConfig>,
    /// The SF registration REST port on `sf_port` (`POST /sf`, `DELETE
    /// /sf/<fqdn>`, `GET /sf`). Default 8080; 0 = none.
    pub sf_rest_port: u16,
    /// Most local SFs, config and REST together. Default 256.
    pub max_sfs: usize,
    /// SFs registered over REST are kept in this file and registered again
    /// at start (see [`crate::store`]). Default: none (in memory only);
    /// `svcroute run --state-dir DIR` (a lab always passes one) makes it
    /// `DIR/sfs.json`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_file: Option<PathBuf>,
    /// The first transaction counter (not a config key: the process picks
    /// a random one at start; 0 in tests). A restarted nSFF that began at
    /// 0 again reused IDs its peers still remember as closed (their
    /// `closed_memory`), and its transactions to them hung.
    #[serde(skip)]
    pub first_txn: u32,
    /// Requests with neither an `NSH` header nor a matching classifier
    /// rule are answered 421 (else routed by their own name). Default
    /// false.
    pub sfc_required: bool,
    /// Classifier rules (`[[nsff.classifier]]`), first match wins.
    pub classifier: Vec<RuleConfig>,
    /// The transport (`[nsff.transport]`).
    pub transport: TransportConfig,
    /// The FQDN cache (`[nsff.cache]`).
    pub cache: CacheConfig,
    /// The nNLM (`[[nsff.nnlm]]`); its classic rows drive the classic SFF.
    pub nnlm: Vec<NnlmRowConfig>,
    /// The classic SFF (`[nsff.classic]`).
    pub classic: ClassicConfig,
    /// Pre-shared fabric keys (`[[nsff.key]]`, as `[[nr.key]]`; SPEC §0):
    /// when any is set, registrations, path requests and transport packets
    /// go sealed with the first (auth tag and sequence number), and path
    /// responses, path updates and transport packets must arrive sealed,
    /// fresh and from the NR (NR messages), else they are dropped and
    /// counted. Default none.
    #[serde(rename = "key", skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<svcroute_stack::wire::auth::KeyConfig>,
    /// With keys: a sealed message whose sequence number is older (or
    /// further ahead) than this many seconds is dropped. Default 60.
    pub replay_max_age_s: u64,
    /// The wall clock at the node's monotonic time 0, µs since the UNIX
    /// epoch (not a config key: the binary reads it at start).
    #[serde(skip)]
    pub epoch_us: u64,
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
            https_port: 443,
            transparent: TransparentConfig::Off,
            register_interval_ms: 30_000,
            health_interval_ms: 2000,
            health_timeout_ms: 1000,
            health_failures: 2,
            client_idle_timeout_s: 120,
            sf_idle_timeout_s: 300,
            sf_keepalive_s: 10,
            listeners: 4,
            max_clients: 1024,
            sf: Vec::new(),
            sf_rest_port: 8080,
            max_sfs: 256,
            state_file: None,
            first_txn: 0,
            sfc_required: false,
            classifier: Vec::new(),
            transport: TransportConfig::default(),
            cache: CacheConfig::default(),
            nnlm: Vec::new(),
            classic: ClassicConfig::default(),
            keys: Vec::new(),
            replay_max_age_s: svcroute_stack::wire::auth::DEFAULT_MAX_AGE_S,
            epoch_us: 0,
        }
    }
}

/// A bad setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `nsff_id` is 255.
    #[error("nsff.nsff_id must be 0..=254")]
    NsffId,
    /// A `[[nsff.key]]` is unusable.
    #[error("[[nsff.key]] id {0}: empty secret, bad hex, or key ID used twice")]
    BadKey(u8),
    /// An SF name is not a canonical FQDN.
    #[error("nsff.sf: bad fqdn {0:?}")]
    Fqdn(String),
    /// Two listeners on one port.
    #[error("nsff: http_port, proxy_port, https_port and sf_rest_port must differ ({0} twice)")]
    SamePort(u16),
    /// A zero limit.
    #[error(
        "nsff: listeners, max_clients, register_interval_ms, health_timeout_ms, \
         health_failures, client_idle_timeout_s and sf_idle_timeout_s must be non-zero"
    )]
    Zero,
    /// The transport section.
    #[error("nsff.transport: {0}")]
    Transport(#[from] transport::ConfigError),
    /// The cache section.
    #[error("nsff.cache: {0}")]
    Cache(#[from] CacheConfigError),
    /// A bad nNLM row (`row` counts from 0 in file order).
    #[error("nsff.nnlm[{row}] `{key}`: {why}")]
    Nnlm {
        /// Index of the row.
        row: usize,
        /// The key to blame.
        key: &'static str,
        /// Why.
        why: String,
    },
    /// More `[[nsff.sf]]` entries than `max_sfs`, or `max_sfs` 0.
    #[error("nsff: {0} local SFs configured, max_sfs must be 1.. and at least that")]
    MaxSfs(usize),
    /// A bad classifier rule (`rule` counts from 0 in file order).
    #[error("nsff.classifier[{rule}] `{key}`: {why}")]
    Classifier {
        /// Index of the rule.
        rule: usize,
        /// The key to blame.
        key: &'static str,
        /// Why.
        why: String,
    },
    /// A bad `transparent` value, or nothing to intercept.
    #[error("nsff.transparent: {0}")]
    Transparent(String),
    /// The state file could not be read, or is not valid.
    #[error("nsff.state_file: {0}")]
    StateFile(String),
    /// A classic SFF setting out of range.
    #[error(
        "nsff.classic.{0}: out of range (mtu 1280..=65535, max_pending and \
         resolve_timeout_ms non-zero)"
    )]
    Classic(&'static str),
    /// An SF connection time out of range.
    #[error("nsff.{key} = {value}: out of range ({range})")]
    SfTime {
        /// The key.
        key: &'static str,
        /// Its value.
        value: u64,
        /// What it may be.
        range: &'static str,
    },
}

impl NsffConfig {
    /// Check every setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.id()?;
        self.key_pairs()?;
        self.sfs()?;
        for (key, value, max, range) in [
            ("sf_keepalive_s", self.sf_keepalive_s, 3600, "0..=3600"),
            (
                "sf_idle_timeout_s",
                self.sf_idle_timeout_s,
                86_400,
                "1..=86400",
            ),
        ] {
            if value > max {
                return Err(ConfigError::SfTime { key, value, range });
            }
        }
        if self.listeners == 0
            || self.max_clients == 0
            || self.register_interval_ms == 0
            || self.health_timeout_ms == 0
            || self.health_failures == 0
            || self.client_idle_timeout_s == 0
            || self.sf_idle_timeout_s == 0
        {
            return Err(ConfigError::Zero);
        }
        let mut ports: Vec<u16> = self.listen_ports().iter().map(|p| p.0).collect();
        if self.sf_rest_port != 0 {
            ports.push(self.sf_rest_port);
        }
        for (i, p) in ports.iter().enumerate() {
            if ports[..i].contains(p) {
                return Err(ConfigError::SamePort(*p));
            }
        }
        if self.max_sfs == 0 || self.sf.len() > self.max_sfs {
            return Err(ConfigError::MaxSfs(self.sf.len()));
        }
        self.transport.validate()?;
        self.interceptor()?;
        self.nnlm()?;
        self.classifier()?;
        if let Some(key) = self.classic.invalid_key() {
            return Err(ConfigError::Classic(key));
        }
        Ok(())
    }

    /// The nNLM built from the `[[nsff.nnlm]]` rows; the first bad row is
    /// named by index and key.
    pub fn nnlm(&self) -> Result<Nnlm, ConfigError> {
        let mut table = Nnlm::new();
        for (i, r) in self.nnlm.iter().enumerate() {
            let err = |key, why: String| ConfigError::Nnlm { row: i, key, why };
            let spi =
                Spi::new(r.spi).ok_or_else(|| err("spi", format!("{} is over 24 bits", r.spi)))?;
            let si = u8::try_from(r.si).map_err(|_| err("si", format!("{} is over 255", r.si)))?;
            let row = Row::new(&r.next_hop, &r.te, r.port, r.vni).map_err(|e| err(e.key, e.why))?;
            if table.len() >= MAX_ROWS {
                return Err(err(
                    "spi",
                    format!("the nNLM holds at most {MAX_ROWS} rows"),
                ));
            }
            if !table.insert(spi, si, row) {
                return Err(err("si", format!("spi {spi} si {si} already has a row")));
            }
        }
        Ok(table)
    }

    /// The classifier built from the `[[nsff.classifier]]` rules; the
    /// first bad rule is named by index and key.
    pub fn classifier(&self) -> Result<Classifier, ConfigError> {
        if self.classifier.len() > MAX_RULES {
            return Err(ConfigError::Classifier {
                rule: MAX_RULES,
                key: "spi",
                why: format!("at most {MAX_RULES} rules"),
            });
        }
        let rules = self
            .classifier
            .iter()
            .enumerate()
            .map(|(i, c)| {
                Rule::new(c).map_err(|e| ConfigError::Classifier {
                    rule: i,
                    key: e.key,
                    why: e.why,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Classifier::new(rules))
    }

    /// The client port's frame filter when `transparent` is on: TCP to
    /// `http_port` and `https_port` (those not 0) is intercepted.
    pub fn interceptor(&self) -> Result<Option<Interceptor>, ConfigError> {
        let Some(scope) = self.transparent.scope().map_err(ConfigError::Transparent)? else {
            return Ok(None);
        };
        if self.http_port == 0 && self.https_port == 0 {
            return Err(ConfigError::Transparent(
                "http_port and https_port are both 0: nothing to intercept".into(),
            ));
        }
        Ok(Some(Interceptor::new(
            scope,
            &[self.http_port, self.https_port],
        )))
    }

    /// The `[[nsff.key]]`s as (ID, secret).
    pub fn key_pairs(&self) -> Result<Vec<(u8, Vec<u8>)>, ConfigError> {
        svcroute_stack::wire::auth::KeyConfig::pairs(&self.keys).map_err(ConfigError::BadKey)
    }

    /// This nSFF's ID.
    pub fn id(&self) -> Result<NsffId, ConfigError> {
        NsffId::new(self.nsff_id).ok_or(ConfigError::NsffId)
    }

    /// The local SFs with parsed names: (name, address, HTTP port).
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

    /// The listening ports on `client_port` in pool order: `http_port`,
    /// `proxy_port`, `https_port` (the TLS one flagged); 0 = not listening.
    pub fn listen_ports(&self) -> Vec<(u16, bool)> {
        [
            (self.http_port, false),
            (self.proxy_port, false),
            (self.https_port, true),
        ]
        .into_iter()
        .filter(|&(p, _)| p != 0)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(spi: u32, si: u32, next_hop: &str, te: &str) -> NnlmRowConfig {
        NnlmRowConfig {
            spi,
            si,
            next_hop: next_hop.into(),
            te: te.into(),
            port: None,
            vni: None,
        }
    }

    #[track_caller]
    fn error_of(rows: Vec<NnlmRowConfig>) -> String {
        let cfg = NsffConfig {
            nnlm: rows,
            ..NsffConfig::default()
        };
        cfg.validate().unwrap_err().to_string()
    }

    #[test]
    fn sf_connection_times_are_bounded_and_named() {
        let bad = |f: fn(&mut NsffConfig)| {
            let mut cfg = NsffConfig::default();
            f(&mut cfg);
            cfg.validate().unwrap_err().to_string()
        };
        assert_eq!(
            bad(|c| c.sf_keepalive_s = 3601),
            "nsff.sf_keepalive_s = 3601: out of range (0..=3600)"
        );
        assert!(bad(|c| c.sf_idle_timeout_s = 86_401).contains("nsff.sf_idle_timeout_s = 86401"));
        assert!(bad(|c| c.sf_idle_timeout_s = 0).contains("sf_idle_timeout_s must be non-zero"));
        let cfg = NsffConfig {
            sf_keepalive_s: 0,
            sf_idle_timeout_s: 60,
            ..NsffConfig::default()
        };
        cfg.validate().unwrap();
    }

    #[test]
    fn https_port_and_tls_port_defaults() {
        let cfg = NsffConfig::default();
        assert_eq!(cfg.https_port, 443);
        assert_eq!(
            cfg.listen_ports(),
            [(80, false), (3128, false), (443, true)]
        );
        let sf: SfConfig =
            serde_json::from_str(r#"{"fqdn": "a.example", "addr": "10.0.2.10"}"#).unwrap();
        assert_eq!((sf.port, sf.tls_port), (80, 443));
        let off = NsffConfig {
            https_port: 0,
            ..NsffConfig::default()
        };
        assert_eq!(off.listen_ports(), [(80, false), (3128, false)]);
        let same = NsffConfig {
            https_port: 80,
            ..NsffConfig::default()
        };
        assert_eq!(same.validate(), Err(ConfigError::SamePort(80)));
    }

    #[test]
    fn transparent_is_checked_and_errors_name_the_input() {
        let cfg: NsffConfig =
            serde_json::from_str(r#"{"transparent": ["fd00:99::/32", "10.99.0.0/16"]}"#).unwrap();
        let i = cfg.interceptor().unwrap().unwrap();
        assert_eq!(i.ports(), [80, 443]);
        assert_eq!(i.scope().to_string(), "fd00:99::/32, 10.99.0.0/16");
        assert_eq!(NsffConfig::default().interceptor(), Ok(None));
        let https_only = NsffConfig {
            transparent: TransparentConfig::Any,
            http_port: 0,
            ..NsffConfig::default()
        };
        assert_eq!(https_only.interceptor().unwrap().unwrap().ports(), [443]);
        let none = NsffConfig {
            https_port: 0,
            ..https_only
        };
        assert_eq!(
            none.validate().unwrap_err().to_string(),
            "nsff.transparent: http_port and https_port are both 0: nothing to intercept"
        );
        let bad = NsffConfig {
            transparent: TransparentConfig::Prefixes(vec!["10.99.0.0/33".into()]),
            ..NsffConfig::default()
        };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "nsff.transparent: \"10.99.0.0/33\" is not a prefix (ADDR/LEN, e.g. \"10.99.0.0/16\")"
        );
    }

    #[test]
    fn sfc_settings_are_checked() {
        let cfg = NsffConfig::default();
        assert_eq!(
            (cfg.sf_rest_port, cfg.max_sfs, cfg.sfc_required),
            (8080, 256, false)
        );
        let same = NsffConfig {
            sf_rest_port: 3128,
            ..NsffConfig::default()
        };
        assert_eq!(same.validate(), Err(ConfigError::SamePort(3128)));
        let sf = SfConfig {
            fqdn: "a.example".into(),
            addr: "10.0.3.2".parse().unwrap(),
            port: 80,
            tls_port: 443,
        };
        let over = NsffConfig {
            max_sfs: 1,
            sf: vec![
                sf.clone(),
                SfConfig {
                    fqdn: "b.example".into(),
                    ..sf
                },
            ],
            ..NsffConfig::default()
        };
        assert_eq!(over.validate(), Err(ConfigError::MaxSfs(2)));
        let cfg: NsffConfig = serde_json::from_str(
            r#"{"sfc_required": true, "classifier": [
                {"host": "www.a.example", "spi": 10, "si": 255},
                {"source": "10.0.1.0/24", "path_prefix": "/img", "spi": 11, "si": 3}
            ]}"#,
        )
        .unwrap();
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.classifier().unwrap().len(), 2);
        let mut bad = cfg.clone();
        bad.classifier[1].source = Some("10.0.1.0/40".into());
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "nsff.classifier[1] `source`: \"10.0.1.0/40\" is not a prefix"
        );
        let mut bad = cfg;
        bad.classifier[0].si = 300;
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "nsff.classifier[0] `si`: 300 is over 255"
        );
    }

    #[test]
    fn nnlm_rows_are_checked_and_errors_name_row_and_key() {
        let good = vec![
            row(10, 255, "10.0.2.10", "vxlan-gpe"),
            row(10, 254, "fd00:2::10", "gre"),
            row(11, 255, "www.example.com/x", "http"),
            row(11, 254, "http-service", "http"),
            row(11, 253, "end", "none"),
        ];
        let cfg = NsffConfig {
            nnlm: good.clone(),
            ..NsffConfig::default()
        };
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.nnlm().unwrap().len(), 5);

        let mut rows = good.clone();
        rows.push(row(1 << 24, 1, "10.0.0.1", "gre"));
        assert_eq!(
            error_of(rows),
            "nsff.nnlm[5] `spi`: 16777216 is over 24 bits"
        );
        assert_eq!(
            error_of(vec![row(1, 256, "10.0.0.1", "gre")]),
            "nsff.nnlm[0] `si`: 256 is over 255"
        );
        let e = error_of(vec![
            row(1, 1, "10.0.0.1", "gre"),
            row(1, 1, "10.0.0.2", "gre"),
        ]);
        assert_eq!(e, "nsff.nnlm[1] `si`: spi 1 si 1 already has a row");
        let e = error_of(vec![row(1, 1, "10.0.0.1", "udp")]);
        assert!(e.starts_with("nsff.nnlm[0] `te`: \"udp\""), "{e}");
        let e = error_of(vec![row(1, 1, "02:00:00:00:00:01", "ethernet")]);
        assert!(e.starts_with("nsff.nnlm[0] `port`"), "{e}");
        let e = error_of(vec![row(1, 1, "bad name!", "gre")]);
        assert!(e.starts_with("nsff.nnlm[0] `next_hop`"), "{e}");
        let mut r = row(1, 1, "10.0.0.1", "gre");
        r.vni = Some(5);
        assert!(error_of(vec![r]).starts_with("nsff.nnlm[0] `vni`"));

        let cfg = NsffConfig {
            classic: ClassicConfig {
                mtu: 100,
                ..ClassicConfig::default()
            },
            ..NsffConfig::default()
        };
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("nsff.classic.mtu"));
    }
}
