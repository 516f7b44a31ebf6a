//! HTTP service function chaining over the nNLM (SPEC §1.4 "HTTP from local
//! SFs"; RFC 8677 §4): which (SPI, SI) an HTTP request is on, and where the
//! nNLM row for it sends the request.
//!
//! ```text
//!  request head ─► NSH: spi=<n>; si=<n> ? ──yes──────────────┐
//!                   │ no                                    ▼
//!                   ▼                              nNLM (SPI, SI) ─► name / http-service: ToName
//!                 classifier rules (first match) ─►    │              end: End
//!                   │ none                            no row, classic TE: Misdirected (421)
//!                   ▼
//!                 sfc_required ? Misdirected (421) : Unclassified (route by Host)
//! ```
//!
//! Everything here is pure: [`NshHeader`] parses and prints the `NSH`
//! request header **\[ext\]**, [`Classifier`] matches `[[nsff.classifier]]`
//! rules, and [`decide`] turns a classification and a row into a
//! [`Decision`] the node carries out (see `node.rs`). Header edits of the
//! raw request head are [`edit_head`].

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use svcroute_stack::wire::nr::Fqdn;
use svcroute_stack::wire::nsh::Spi;

use crate::classic::{NextHop, Nnlm, Te};

/// The request header that carries (SPI, SI) **\[ext\]**.
pub const NSH_HEADER: &str = "nsh";
/// The header that names the SF a request goes to, only on the
/// nSFF-to-nSFF leg (a transaction) **\[ext\]**; removed from every request
/// a client or SF sends, and by the egress before it delivers.
pub const NEXT_HOP_HEADER: &str = "nsh-next-hop";
/// Most classifier rules.
pub const MAX_RULES: usize = 4096;

/// The `NSH: spi=<n>; si=<n>` request header **\[ext\]**.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NshHeader {
    /// Service path identifier (24 bits).
    pub spi: Spi,
    /// Service index.
    pub si: u8,
}

/// Why an `NSH` header value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NshHeaderError {
    /// Not ASCII.
    #[error("NSH header is not ASCII")]
    NotAscii,
    /// A parameter that is not `name=value`.
    #[error("NSH header parameter {0:?} is not name=value")]
    Syntax(String),
    /// A parameter other than `spi` and `si`.
    #[error("NSH header parameter {0:?} is unknown (only spi and si)")]
    Unknown(String),
    /// `spi` or `si` given twice.
    #[error("NSH header gives {0} twice")]
    Twice(&'static str),
    /// `spi` or `si` missing.
    #[error("NSH header lacks {0}")]
    Missing(&'static str),
    /// `spi` not a decimal number below 2^24.
    #[error("NSH header spi {0:?} is not a number 0..=16777215")]
    Spi(String),
    /// `si` not a decimal number below 256.
    #[error("NSH header si {0:?} is not a number 0..=255")]
    Si(String),
}

impl NshHeader {
    /// Parse a header value: `spi=<n>; si=<n>` in either order, names
    /// case-insensitive, blanks around `;` and `=` allowed, decimal numbers.
    pub fn parse(value: &[u8]) -> Result<Self, NshHeaderError> {
        let s = std::str::from_utf8(value)
            .ok()
            .filter(|s| s.is_ascii())
            .ok_or(NshHeaderError::NotAscii)?;
        let (mut spi, mut si) = (None, None);
        for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| NshHeaderError::Syntax(part.to_owned()))?;
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            match k.as_str() {
                "spi" => {
                    if spi.is_some() {
                        return Err(NshHeaderError::Twice("spi"));
                    }
                    spi = Some(
                        decimal(v)
                            .and_then(Spi::new)
                            .ok_or_else(|| NshHeaderError::Spi(v.to_owned()))?,
                    );
                }
                "si" => {
                    if si.is_some() {
                        return Err(NshHeaderError::Twice("si"));
                    }
                    si = Some(
                        decimal(v)
                            .and_then(|n| u8::try_from(n).ok())
                            .ok_or_else(|| NshHeaderError::Si(v.to_owned()))?,
                    );
                }
                _ => return Err(NshHeaderError::Unknown(k)),
            }
        }
        Ok(Self {
            spi: spi.ok_or(NshHeaderError::Missing("spi"))?,
            si: si.ok_or(NshHeaderError::Missing("si"))?,
        })
    }
}

impl fmt::Display for NshHeader {
    /// The header value as the nSFF sends it: `spi=<n>; si=<n>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "spi={}; si={}", self.spi.value(), self.si)
    }
}

/// A decimal number of at most 8 digits (no sign, no blanks).
fn decimal(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 8 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// One classifier rule (`[[nsff.classifier]]`): every condition given must
/// hold; a rule with none matches every request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// The client's (source) address is in this prefix (`10.0.1.0/24`,
    /// `fd00:1::/64`; an address alone is a /32 or /128).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The request's service name (`Host` without port, or the absolute
    /// target's authority) is this name (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The request target's path starts with this (byte for byte).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    /// The SPI given to a matching request.
    pub spi: u32,
    /// The SI given to a matching request.
    pub si: u32,
}

/// A parsed rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    source: Option<(IpAddr, u8)>,
    host: Option<Fqdn>,
    path_prefix: Option<String>,
    /// Where a matching request goes.
    pub nsh: NshHeader,
}

/// A bad rule: the key to blame and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    /// The config key.
    pub key: &'static str,
    /// Why.
    pub why: String,
}

impl Rule {
    /// Check a rule from config.
    pub fn new(c: &RuleConfig) -> Result<Self, RuleError> {
        let err = |key, why: String| RuleError { key, why };
        let source = c
            .source
            .as_deref()
            .map(|s| parse_prefix(s).ok_or_else(|| err("source", format!("{s:?} is not a prefix"))))
            .transpose()?;
        let host = c
            .host
            .as_deref()
            .map(|h| {
                Fqdn::new(&h.to_ascii_lowercase())
                    .map_err(|_| err("host", format!("{h:?} is not a host name")))
            })
            .transpose()?;
        if let Some(p) = &c.path_prefix {
            if !p.starts_with('/') {
                return Err(err("path_prefix", format!("{p:?} does not start with /")));
            }
        }
        let spi =
            Spi::new(c.spi).ok_or_else(|| err("spi", format!("{} is over 24 bits", c.spi)))?;
        let si = u8::try_from(c.si).map_err(|_| err("si", format!("{} is over 255", c.si)))?;
        Ok(Self {
            source,
            host,
            path_prefix: c.path_prefix.clone(),
            nsh: NshHeader { spi, si },
        })
    }

    /// Whether a request from `src` for `host` with `path` matches.
    pub fn matches(&self, src: Option<IpAddr>, host: Option<&Fqdn>, path: &str) -> bool {
        if let Some((net, len)) = self.source {
            if !src.is_some_and(|a| in_prefix(a, net, len)) {
                return false;
            }
        }
        if let Some(h) = &self.host {
            if host != Some(h) {
                return false;
            }
        }
        if let Some(p) = &self.path_prefix {
            if !path.starts_with(p.as_str()) {
                return false;
            }
        }
        true
    }
}

/// The classifier rules, in config order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Classifier {
    rules: Vec<Rule>,
}

impl Classifier {
    /// Rules in match order.
    pub fn new(rules: Vec<Rule>) -> Self {
        Self { rules }
    }

    /// The first matching rule's (SPI, SI).
    pub fn classify(
        &self,
        src: Option<IpAddr>,
        host: Option<&Fqdn>,
        path: &str,
    ) -> Option<NshHeader> {
        self.rules
            .iter()
            .find(|r| r.matches(src, host, path))
            .map(|r| r.nsh)
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// `addr[/len]` → (network address, prefix length).
fn parse_prefix(s: &str) -> Option<(IpAddr, u8)> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a.trim().parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l.trim().parse::<u8>().ok().filter(|&l| l <= max)?,
        None => max,
    };
    Some((addr, len))
}

fn in_prefix(a: IpAddr, net: IpAddr, len: u8) -> bool {
    let (a, net, bits) = match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => (u128::from(u32::from(a)), u128::from(u32::from(n)), 32),
        (IpAddr::V6(a), IpAddr::V6(n)) => (u128::from(a), u128::from(n), 128),
        // An IPv4-mapped client against an IPv4 prefix.
        (IpAddr::V6(a), IpAddr::V4(n)) => match a.to_ipv4_mapped() {
            Some(a) => (u128::from(u32::from(a)), u128::from(u32::from(n)), 32),
            None => return false,
        },
        (IpAddr::V4(_), IpAddr::V6(_)) => return false,
    };
    if len == 0 {
        return true;
    }
    let shift = bits - u32::from(len);
    (a >> shift) == (net >> shift)
}

/// How a request was classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classified {
    /// From its `NSH` header.
    Header(NshHeader),
    /// By a classifier rule.
    Rule(NshHeader),
    /// Neither.
    None,
}

/// Why a request is answered `421 Misdirected Request`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misdirected {
    /// No `NSH` header, no rule matched, and classification is required.
    Unclassified,
    /// The nNLM has no row for (SPI, SI).
    NoRow(NshHeader),
    /// The row is a classic one (an IP or MAC next hop), not for HTTP.
    NotHttp(NshHeader, Te),
}

impl Misdirected {
    /// The counter (beside `nsff.misdirected_421`).
    pub const fn counter(&self) -> &'static str {
        match self {
            Self::Unclassified => "nsff.sfc_unclassified_421",
            Self::NoRow(_) => "nsff.sfc_no_row",
            Self::NotHttp(..) => "nsff.sfc_row_not_http",
        }
    }
}

impl fmt::Display for Misdirected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unclassified => {
                f.write_str("no SFC classification: no NSH header and no classifier rule matched")
            }
            Self::NoRow(n) => write!(f, "no nNLM row for spi {} si {}", n.spi, n.si),
            Self::NotHttp(n, te) => write!(
                f,
                "the nNLM row for spi {} si {} is a classic {te} row, not for HTTP",
                n.spi, n.si
            ),
        }
    }
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not classified (and not required to be): route by the request's own
    /// name, as without SFC; no `NSH` header goes on.
    Unclassified,
    /// The row sends it to `fqdn` (a name row, or `http-service`: the
    /// request's own name); the SF that gets it gets `NSH` with `nsh`.
    ToName {
        /// The service function's name.
        fqdn: Fqdn,
        /// (SPI, SI) as looked up.
        nsh: NshHeader,
        /// Whether the name came from the request (`http-service`).
        implicit: bool,
    },
    /// The chain ends here (`end`): the `NSH` header is removed and the
    /// request is routed by its own name.
    End(NshHeader),
    /// `http-service` but the request names no usable service.
    NoName(NshHeader),
    /// 421.
    Misdirected(Misdirected),
}

/// The decision for a request classified as `class` whose own name is
/// `name`, under `nnlm`; `required`: unclassified requests are refused.
pub fn decide(nnlm: &Nnlm, class: Classified, name: Option<&Fqdn>, required: bool) -> Decision {
    let nsh = match class {
        Classified::Header(n) | Classified::Rule(n) => n,
        Classified::None if required => return Decision::Misdirected(Misdirected::Unclassified),
        Classified::None => return Decision::Unclassified,
    };
    let Some(row) = nnlm.get(nsh.spi, nsh.si) else {
        return Decision::Misdirected(Misdirected::NoRow(nsh));
    };
    match &row.next_hop {
        NextHop::Name { fqdn, .. } => Decision::ToName {
            fqdn: fqdn.clone(),
            nsh,
            implicit: false,
        },
        NextHop::HttpService => match name {
            Some(f) => Decision::ToName {
                fqdn: f.clone(),
                nsh,
                implicit: true,
            },
            None => Decision::NoName(nsh),
        },
        NextHop::End => Decision::End(nsh),
        NextHop::Ipv4(_) | NextHop::Ipv6(_) | NextHop::Mac(_) => {
            Decision::Misdirected(Misdirected::NotHttp(nsh, row.te))
        }
    }
}

/// The end of the head at the start of `msg` (just after its empty line),
/// CRLF or bare LF line ends.
pub fn head_len(msg: &[u8]) -> Option<usize> {
    let mut start = 0;
    let mut first = true;
    while let Some(i) = msg[start..].iter().position(|&b| b == b'\n') {
        let line = &msg[start..start + i];
        let end = start + i + 1;
        if !first && (line.is_empty() || line == b"\r") {
            return Some(end);
        }
        first = false;
        start = end;
    }
    None
}

/// Remove every header line named in `remove` (lowercase names) from the
/// head at the start of `msg` and add `add` (name, value) lines at its end.
/// Returns the change in length (`None`: no complete head; nothing done).
pub fn edit_head(msg: &mut Vec<u8>, remove: &[&str], add: &[(&str, String)]) -> Option<isize> {
    let end = head_len(msg)?;
    let mut head = Vec::with_capacity(end + 64);
    let mut start = 0;
    let mut first = true;
    let mut tail = Vec::new();
    while start < end {
        let i = msg[start..end].iter().position(|&b| b == b'\n')?;
        let line = &msg[start..=start + i];
        start += i + 1;
        let bare = line.strip_suffix(b"\n").unwrap_or(line);
        let bare = bare.strip_suffix(b"\r").unwrap_or(bare);
        if first {
            first = false;
            head.extend_from_slice(line);
            continue;
        }
        if bare.is_empty() {
            tail.extend_from_slice(line);
            break;
        }
        let name = bare
            .iter()
            .position(|&b| b == b':')
            .map(|c| bare[..c].to_ascii_lowercase());
        let drop = name.is_some_and(|n| remove.iter().any(|r| r.as_bytes() == n.as_slice()));
        if !drop {
            head.extend_from_slice(line);
        }
    }
    for (name, value) in add {
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(&tail);
    let delta = head.len() as isize - end as isize;
    msg.splice(..end, head);
    Some(delta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classic::Row;

    fn nsh(spi: u32, si: u8) -> NshHeader {
        NshHeader {
            spi: Spi::new(spi).unwrap(),
            si,
        }
    }

    fn fqdn(s: &str) -> Fqdn {
        Fqdn::new(s).unwrap()
    }

    #[test]
    fn nsh_header_parses_and_prints() {
        let ok = |s: &str| NshHeader::parse(s.as_bytes());
        assert_eq!(ok("spi=10; si=255"), Ok(nsh(10, 255)));
        assert_eq!(ok("SI = 3 ;SPI=16777215"), Ok(nsh(0xff_ffff, 3)));
        assert_eq!(ok("spi=0;si=0;"), Ok(nsh(0, 0)));
        assert_eq!(nsh(10, 254).to_string(), "spi=10; si=254");
        assert_eq!(ok(&nsh(7, 1).to_string()), Ok(nsh(7, 1)));
        assert_eq!(
            ok("spi=16777216; si=1"),
            Err(NshHeaderError::Spi("16777216".into()))
        );
        assert_eq!(ok("spi=1; si=256"), Err(NshHeaderError::Si("256".into())));
        assert_eq!(ok("spi=-1; si=2"), Err(NshHeaderError::Spi("-1".into())));
        assert_eq!(
            ok("spi=0x10; si=2"),
            Err(NshHeaderError::Spi("0x10".into()))
        );
        assert_eq!(
            ok("spi=999999999; si=2"),
            Err(NshHeaderError::Spi("999999999".into()))
        );
        assert_eq!(ok("spi=1"), Err(NshHeaderError::Missing("si")));
        assert_eq!(ok("si=1"), Err(NshHeaderError::Missing("spi")));
        assert_eq!(ok(""), Err(NshHeaderError::Missing("spi")));
        assert_eq!(ok("spi=1; spi=2; si=1"), Err(NshHeaderError::Twice("spi")));
        assert_eq!(ok("spi=1; si=1; si=1"), Err(NshHeaderError::Twice("si")));
        assert_eq!(
            ok("spi=1; si=1; ttl=3"),
            Err(NshHeaderError::Unknown("ttl".into()))
        );
        assert_eq!(
            ok("spi 1; si=1"),
            Err(NshHeaderError::Syntax("spi 1".into()))
        );
        assert_eq!(
            NshHeader::parse(b"spi=1; si=\xff"),
            Err(NshHeaderError::NotAscii)
        );
    }

    fn rule(
        source: Option<&str>,
        host: Option<&str>,
        path: Option<&str>,
        spi: u32,
        si: u32,
    ) -> RuleConfig {
        RuleConfig {
            source: source.map(Into::into),
            host: host.map(Into::into),
            path_prefix: path.map(Into::into),
            spi,
            si,
        }
    }

    #[test]
    fn classifier_first_match_wins() {
        let rules = [
            rule(Some("10.0.1.0/24"), Some("WWW.A.example"), None, 1, 255),
            rule(None, Some("www.a.example"), Some("/img"), 2, 255),
            rule(Some("fd00:1::/64"), None, None, 3, 200),
            rule(None, Some("www.a.example"), None, 4, 9),
        ];
        let c = Classifier::new(rules.iter().map(|r| Rule::new(r).unwrap()).collect());
        assert_eq!(c.len(), 4);
        let a = fqdn("www.a.example");
        let v4 = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(
            c.classify(v4("10.0.1.10"), Some(&a), "/img/x"),
            Some(nsh(1, 255))
        );
        assert_eq!(
            c.classify(v4("10.0.2.10"), Some(&a), "/img/x"),
            Some(nsh(2, 255))
        );
        assert_eq!(
            c.classify(v4("10.0.2.10"), Some(&a), "/im"),
            Some(nsh(4, 9))
        );
        assert_eq!(c.classify(v4("fd00:1::5"), None, "/"), Some(nsh(3, 200)));
        assert_eq!(c.classify(v4("fd00:2::5"), None, "/"), None);
        assert_eq!(c.classify(None, Some(&fqdn("b.example")), "/"), None);
        // IPv4-mapped client address against an IPv4 prefix.
        assert_eq!(
            c.classify(v4("::ffff:10.0.1.9"), Some(&a), "/"),
            Some(nsh(1, 255))
        );
        // A rule without conditions matches everything; /0 too.
        let all = Classifier::new(vec![
            Rule::new(&rule(Some("0.0.0.0/0"), None, None, 5, 5)).unwrap()
        ]);
        assert_eq!(all.classify(v4("10.9.9.9"), None, ""), Some(nsh(5, 5)));
        assert_eq!(all.classify(v4("fd00::1"), None, ""), None);
        let host = Classifier::new(vec![
            Rule::new(&rule(Some("10.0.0.7"), None, None, 6, 6)).unwrap()
        ]);
        assert_eq!(host.classify(v4("10.0.0.7"), None, "/"), Some(nsh(6, 6)));
        assert_eq!(host.classify(v4("10.0.0.8"), None, "/"), None);
    }

    #[test]
    fn bad_rules_name_the_key() {
        let key = |r: RuleConfig| Rule::new(&r).unwrap_err().key;
        assert_eq!(key(rule(Some("10.0.0.0/33"), None, None, 1, 1)), "source");
        assert_eq!(key(rule(Some("fd00::/129"), None, None, 1, 1)), "source");
        assert_eq!(key(rule(Some("nowhere"), None, None, 1, 1)), "source");
        assert_eq!(key(rule(None, Some("bad name!"), None, 1, 1)), "host");
        assert_eq!(key(rule(None, None, Some("img"), 1, 1)), "path_prefix");
        assert_eq!(key(rule(None, None, None, 1 << 24, 1)), "spi");
        assert_eq!(key(rule(None, None, None, 1, 256)), "si");
    }

    fn table() -> Nnlm {
        let mut t = Nnlm::new();
        let rows = [
            (10, 255, "www.a.example/img", "http"),
            (10, 254, "www.b.example", "http"),
            (10, 253, "http-service", "http"),
            (10, 252, "end", "none"),
            (20, 255, "10.0.2.10", "gre"),
        ];
        for (spi, si, hop, te) in rows {
            let row = Row::new(hop, te, None, None).unwrap();
            assert!(t.insert(Spi::new(spi).unwrap(), si, row));
        }
        t
    }

    #[test]
    fn nnlm_decisions() {
        let t = table();
        let own = fqdn("www.own.example");
        let d = |c, name: Option<&Fqdn>, req| decide(&t, c, name, req);
        assert_eq!(
            d(Classified::None, Some(&own), false),
            Decision::Unclassified
        );
        assert_eq!(
            d(Classified::None, Some(&own), true),
            Decision::Misdirected(Misdirected::Unclassified)
        );
        assert_eq!(
            d(Classified::Header(nsh(10, 255)), Some(&own), true),
            Decision::ToName {
                fqdn: fqdn("www.a.example"),
                nsh: nsh(10, 255),
                implicit: false
            }
        );
        assert_eq!(
            d(Classified::Rule(nsh(10, 254)), None, false),
            Decision::ToName {
                fqdn: fqdn("www.b.example"),
                nsh: nsh(10, 254),
                implicit: false
            }
        );
        assert_eq!(
            d(Classified::Header(nsh(10, 253)), Some(&own), false),
            Decision::ToName {
                fqdn: own.clone(),
                nsh: nsh(10, 253),
                implicit: true
            }
        );
        assert_eq!(
            d(Classified::Header(nsh(10, 253)), None, false),
            Decision::NoName(nsh(10, 253))
        );
        assert_eq!(
            d(Classified::Rule(nsh(10, 252)), Some(&own), true),
            Decision::End(nsh(10, 252))
        );
        let m = d(Classified::Header(nsh(10, 251)), Some(&own), false);
        assert_eq!(m, Decision::Misdirected(Misdirected::NoRow(nsh(10, 251))));
        let m = d(Classified::Header(nsh(20, 255)), Some(&own), false);
        assert_eq!(
            m,
            Decision::Misdirected(Misdirected::NotHttp(nsh(20, 255), Te::Gre))
        );
        let Decision::Misdirected(m) = m else {
            unreachable!()
        };
        assert_eq!(
            m.to_string(),
            "the nNLM row for spi 20 si 255 is a classic gre row, not for HTTP"
        );
        assert_eq!(m.counter(), "nsff.sfc_row_not_http");
    }

    #[test]
    fn head_edits_keep_everything_else() {
        let mut m = b"GET /x HTTP/1.1\r\nHost: a\r\nNSH: spi=1; si=2\r\nnsh-next-hop: b\r\nX: nsh\r\n\r\nbody".to_vec();
        let before = m.len() as isize;
        let d = edit_head(
            &mut m,
            &[NSH_HEADER, NEXT_HOP_HEADER],
            &[("NSH", "spi=1; si=1".into())],
        );
        let want = b"GET /x HTTP/1.1\r\nHost: a\r\nX: nsh\r\nNSH: spi=1; si=1\r\n\r\nbody".to_vec();
        assert_eq!(String::from_utf8_lossy(&m), String::from_utf8_lossy(&want));
        assert_eq!(d, Some(want.len() as isize - before));
        // Bare LF heads, and the request line is never taken for a header.
        let mut m = b"NSH: / HTTP/1.1\nNsh : x\nA: b\n\n".to_vec();
        edit_head(&mut m, &[NSH_HEADER], &[]);
        assert_eq!(m, b"NSH: / HTTP/1.1\nNsh : x\nA: b\n\n");
        let mut m = b"GET / HTTP/1.1\nNSH:x\n\nrest".to_vec();
        assert_eq!(edit_head(&mut m, &[NSH_HEADER], &[]), Some(-6));
        assert_eq!(m, b"GET / HTTP/1.1\n\nrest");
        // No complete head: nothing changes.
        let mut m = b"GET / HTTP/1.1\r\nNSH: x\r\n".to_vec();
        assert_eq!(edit_head(&mut m, &[NSH_HEADER], &[]), None);
        assert_eq!(m, b"GET / HTTP/1.1\r\nNSH: x\r\n");
        assert_eq!(head_len(b"GET / HTTP/1.1\r\n\r\nx"), Some(18));
        assert_eq!(head_len(b"\r\n"), None);
    }
}
