//! `svcroute slp`: an SLPv2 user agent and service agent (RFC 2608) with the
//! mesh-enhanced SA's MeshFwd (RFC 3528), over the kernel's UDP and TCP
//! sockets. A client tool, not a node: it sends one kind of request, waits
//! for the answers, prints them and exits.
//!
//! ```text
//!   args ─► validate with wire::slp (URL, attrs, scopes, predicate, tags)
//!        ─► Message ─► net: --da ADDR…   unicast UDP (retry, TCP on OVERFLOW) or TCP
//!                          --multicast   DA discovery by convergence, then the DAs;
//!                                        without DAs, convergence to the SAs
//!        ─► replies ─► text or --json; exit status from error codes
//!   --spi/--bsd/--key: sign SrvReg/SrvDeReg (RFC 2608 §9.2.1, BSD 0x8001
//!   HMAC-SHA256 or 0x8002 Ed25519), ask queries for an SPI and verify the
//!   blocks of the replies
//! ```
//!
//! Exit status: 0 success, 1 other failure (socket, broken reply), 2 bad
//! input, 3 no reply in time, 4 an agent answered with an SLP error code.
//! See `docs/slp.md`.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6, ToSocketAddrs as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use svcroute_stack::wire::slp::auth::{
    bsd_from_name, bsd_name, ed25519_public, key_from_text, random_key, spi_ok, to_hex,
};
use svcroute_stack::wire::slp::{
    scope::AuthorityName, url::url_service_type, AcceptId, AttrList, AttrRqst, AttrValue,
    AuthBlocks, Body, Bsd, DaAdvert, ErrorCode, Extension, FunctionId, FwdId, Header, LangTag,
    MeshFwd, Message, NamingAuthority, Predicate, Scope, ScopeList, ServiceType, Signed, Signer,
    SlpString, SrvDeReg, SrvReg, SrvRqst, SrvTypeRqst, TagList, UrlEntry, Verifier, MCAST_V4, PORT,
};

mod net;

use net::{Net, NetError, Reply, Timing};

/// `svcroute slp` arguments.
#[derive(clap::Args)]
pub(crate) struct SlpArgs {
    // Boxed: the options outweigh every other command's arguments.
    #[command(flatten)]
    common: Box<Common>,
    #[command(subcommand)]
    cmd: SlpCmd,
}

/// Options every subcommand takes (before or after the subcommand).
#[derive(clap::Args)]
struct Common {
    /// Send to this DA (unicast; repeatable). PORT defaults to 427.
    #[arg(long, value_name = "ADDR[:PORT]", value_parser = parse_agent, global = true, help_heading = "Agent options")]
    da: Vec<SocketAddr>,
    /// No DA given: discover DAs by multicast convergence and use them; if
    /// none answers, multicast the request to SAs (RFC 2608 §6).
    #[arg(long, global = true, help_heading = "Agent options")]
    multicast: bool,
    /// Multicast over IPv6 to the RFC 3111 groups instead of 239.255.255.253.
    #[arg(long, global = true, help_heading = "Agent options")]
    ipv6: bool,
    /// IPv6 multicast scope: node, link, realm, admin, site or 1-5.
    #[arg(long, value_name = "SCOPE", default_value = "link", value_parser = parse_mcast_scope, global = true, help_heading = "Agent options")]
    mcast_scope: u16,
    /// Interface (name or index) for link- and node-local IPv6 multicast.
    #[arg(
        long,
        value_name = "IFACE",
        global = true,
        help_heading = "Agent options"
    )]
    iface: Option<String>,
    /// Send multicast requests to this address instead of the SLP group
    /// (e.g. a subnet broadcast address; tests use a unicast address).
    #[arg(long, value_name = "ADDR[:PORT]", value_parser = parse_agent, global = true, help_heading = "Agent options")]
    group: Option<SocketAddr>,
    /// IPv4 multicast TTL.
    #[arg(
        long,
        default_value_t = 255,
        global = true,
        help_heading = "Agent options"
    )]
    ttl: u32,
    /// Local address to send from (also picks the IPv4 multicast interface).
    #[arg(
        long,
        value_name = "ADDR",
        global = true,
        help_heading = "Agent options"
    )]
    bind: Option<IpAddr>,
    /// Scope list, comma separated [default: DEFAULT; `das`: all scopes].
    #[arg(
        long,
        value_name = "SCOPE,...",
        global = true,
        help_heading = "Agent options"
    )]
    scopes: Option<String>,
    /// Language tag of the requests.
    #[arg(
        long,
        default_value = "en",
        global = true,
        help_heading = "Agent options"
    )]
    lang: String,
    /// Give up after this many ms (CONFIG_RETRY_MAX / CONFIG_MC_MAX).
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 15_000,
        global = true,
        help_heading = "Agent options"
    )]
    timeout_ms: u64,
    /// First UDP retransmission after this many ms, doubling (CONFIG_RETRY).
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 2_000,
        global = true,
        help_heading = "Agent options"
    )]
    retry_ms: u64,
    /// Unicast requests over TCP (UDP replies with OVERFLOW go to TCP anyway).
    #[arg(long, global = true, help_heading = "Agent options")]
    tcp: bool,
    /// Print the replies as one JSON object.
    #[arg(long, global = true, help_heading = "Agent options")]
    json: bool,
    /// Transaction ID of the first request [default: random].
    #[arg(long, global = true, help_heading = "Agent options")]
    xid: Option<u16>,
    /// SLP SPI: queries ask for its authentication blocks (RFC 2608 §8.1,
    /// §10.3); register/deregister sign with it (needs --key).
    #[arg(
        long,
        value_name = "SPI",
        global = true,
        help_heading = "Authentication"
    )]
    spi: Option<String>,
    /// Block structure descriptor of --key: ed25519 (0x8002) or hmac-sha256 (0x8001).
    #[arg(
        long,
        value_name = "BSD",
        default_value = "ed25519",
        global = true,
        help_heading = "Authentication"
    )]
    bsd: String,
    /// Key as hex:…, base64:… or file:PATH. register/deregister: the
    /// signing key (HMAC secret, Ed25519 private key); queries: the key
    /// replies' blocks are verified with (HMAC secret, Ed25519 public key).
    #[arg(
        long,
        value_name = "KEY",
        global = true,
        requires = "spi",
        help_heading = "Authentication"
    )]
    key: Option<String>,
    /// Seconds the signatures stay valid [default: register: the lifetime;
    /// deregister: 600].
    #[arg(long, value_name = "S", global = true, help_heading = "Authentication")]
    auth_lifetime: Option<u32>,
}

#[derive(clap::Subcommand)]
enum SlpCmd {
    /// Register a service (SrvReg); prints each DA's SrvAck.
    Register {
        /// The service URL: service:TYPE://ADDR[...] or SCHEME:...
        url: String,
        /// Seconds the registration lives (1-65535).
        #[arg(long, default_value_t = 10_800, value_parser = clap::value_parser!(u16).range(1..))]
        lifetime: u16,
        /// Attribute list, e.g. '(a=1),(b=x,y),keyword'.
        #[arg(long, default_value = "")]
        attrs: String,
        /// Service type [default: the URL's].
        #[arg(long = "type", value_name = "SERVICE-TYPE")]
        service_type: Option<String>,
        /// A fresh registration, replacing any earlier one (the default).
        #[arg(long, conflicts_with = "incremental")]
        fresh: bool,
        /// An incremental registration: update the given attributes only.
        #[arg(long)]
        incremental: bool,
        /// Act as a mesh-enhanced SA: ask the MDA to forward (MeshFwd RqstFwd).
        #[arg(long)]
        mesh_fwd: bool,
        /// With --incremental: MeshFwd RqstFwd on the incremental update, so
        /// the MDA forwards it (svcroute extension of RFC 3528 §4.3).
        #[arg(long, requires = "incremental", conflicts_with = "mesh_fwd")]
        mesh_update: bool,
        /// MeshFwd version timestamp, µs since 1900 [default: now].
        #[arg(long, value_name = "MICROS")]
        version_ts: Option<u64>,
    },
    /// Deregister a service or some of its attributes (SrvDeReg).
    Deregister {
        /// The service URL.
        url: String,
        /// Remove only these attributes (tag list; `*` wildcards).
        #[arg(long, value_name = "TAG,...", default_value = "")]
        tags: String,
        /// Act as a mesh-enhanced SA: ask the MDA to forward (MeshFwd RqstFwd).
        #[arg(long)]
        mesh_fwd: bool,
        /// With --tags: MeshFwd RqstFwd on the partial deregistration, so
        /// the MDA forwards it (svcroute extension of RFC 3528 §4.3).
        #[arg(long, requires = "tags", conflicts_with = "mesh_fwd")]
        mesh_update: bool,
        /// MeshFwd version timestamp, µs since 1900 [default: now].
        #[arg(long, value_name = "MICROS")]
        version_ts: Option<u64>,
    },
    /// Find services (SrvRqst); prints URL,LIFETIME per line.
    Find {
        /// Service type, e.g. service:printer or service:printer:lpr.
        service_type: String,
        /// LDAPv3 search filter on the attributes, e.g. '(&(a=1)(b=x*))'.
        #[arg(long, default_value = "")]
        predicate: String,
    },
    /// Ask for the attributes of a service URL or type (AttrRqst).
    Attrs {
        /// A service URL, or a service type (attributes of all its services).
        target: String,
        /// Only these attributes (tag list; `*` wildcards).
        #[arg(long, value_name = "TAG,...", default_value = "")]
        tags: String,
    },
    /// List service types (SrvTypeRqst).
    Types {
        /// Naming authority: omitted = IANA types only, `*` = all.
        #[arg(long, value_name = "NA|*")]
        na: Option<String>,
    },
    /// Discover directory agents (SrvRqst for service:directory-agent).
    Das {
        /// LDAPv3 search filter on the DAs' attributes.
        #[arg(long, default_value = "")]
        predicate: String,
    },
    /// Make a key for --bsd: prints the private key (or writes it to
    /// --out) and, for Ed25519, the public key, as hex: key text.
    Keygen {
        /// Write the private key (hex: text, mode 0600) here instead.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

/// Runs `svcroute slp`; prints results and errors itself.
pub(crate) fn main(args: SlpArgs) -> ExitCode {
    let json = args.common.json;
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if json {
                if let Fail::Input(_) = e {
                    println!("{}", json!({ "error": e.name(), "message": e.to_string() }));
                }
            }
            eprintln!("svcroute: slp: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

// ---------------------------------------------------------------------------
// Errors and exit status.

/// Why a command failed; each kind has its exit status.
#[derive(Debug)]
enum Fail {
    /// Bad command-line input (exit 2).
    Input(String),
    /// No agent answered in time (exit 3).
    NoReply(String),
    /// An agent answered with a non-zero SLP error code (exit 4).
    Refused(String),
    /// Anything else: sockets, broken replies (exit 1).
    Other(String),
}

impl Fail {
    fn exit_code(&self) -> u8 {
        match self {
            Self::Other(_) => 1,
            Self::Input(_) => 2,
            Self::NoReply(_) => 3,
            Self::Refused(_) => 4,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Other(_) => "FAILED",
            Self::Input(_) => "BAD_INPUT",
            Self::NoReply(_) => "NO_REPLY",
            Self::Refused(_) => "SLP_ERROR",
        }
    }
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Input(s) | Self::NoReply(s) | Self::Refused(s) | Self::Other(s) => f.write_str(s),
        }
    }
}

fn input(s: impl Into<String>) -> Fail {
    Fail::Input(s.into())
}

/// RFC 2608 §7's name of an error code.
fn code_name(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::Ok => "OK",
        ErrorCode::LanguageNotSupported => "LANGUAGE_NOT_SUPPORTED",
        ErrorCode::ParseError => "PARSE_ERROR",
        ErrorCode::InvalidRegistration => "INVALID_REGISTRATION",
        ErrorCode::ScopeNotSupported => "SCOPE_NOT_SUPPORTED",
        ErrorCode::AuthenticationUnknown => "AUTHENTICATION_UNKNOWN",
        ErrorCode::AuthenticationAbsent => "AUTHENTICATION_ABSENT",
        ErrorCode::AuthenticationFailed => "AUTHENTICATION_FAILED",
        ErrorCode::VerNotSupported => "VER_NOT_SUPPORTED",
        ErrorCode::InternalError => "INTERNAL_ERROR",
        ErrorCode::DaBusyNow => "DA_BUSY_NOW",
        ErrorCode::OptionNotUnderstood => "OPTION_NOT_UNDERSTOOD",
        ErrorCode::InvalidUpdate => "INVALID_UPDATE",
        ErrorCode::MsgNotSupported => "MSG_NOT_SUPPORTED",
        ErrorCode::RefreshRejected => "REFRESH_REJECTED",
        ErrorCode::Unknown(_) => "UNKNOWN_ERROR",
    }
}

/// `SCOPE_NOT_SUPPORTED (4)`.
fn code_text(code: ErrorCode) -> String {
    format!("{} ({})", code_name(code), u16::from(code))
}

// ---------------------------------------------------------------------------
// Argument parsing.

/// `ADDR`, `ADDR:PORT`, `[V6]:PORT`, `V6`, `HOST`, `HOST:PORT`; port 427 by default.
fn parse_agent(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = SocketAddr::from_str(s) {
        return Ok(a);
    }
    let bare = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(s);
    if let Ok(ip) = IpAddr::from_str(bare) {
        return Ok(SocketAddr::new(ip, PORT));
    }
    let resolved = if s.contains(':') {
        s.to_socket_addrs()
    } else {
        (s, PORT).to_socket_addrs()
    };
    match resolved.map(|mut it| it.next()) {
        Ok(Some(a)) => Ok(a),
        Ok(None) => Err(format!("'{s}' resolves to no address")),
        Err(e) => Err(format!("'{s}' is not ADDR[:PORT] ({e})")),
    }
}

/// RFC 4291 multicast scope by name or number (1-5: SLP's maximum is site, RFC 3111 §4.2.2).
fn parse_mcast_scope(s: &str) -> Result<u16, String> {
    match s.to_ascii_lowercase().as_str() {
        "node" | "interface" | "1" => Ok(1),
        "link" | "2" => Ok(2),
        "realm" | "3" => Ok(3),
        "admin" | "4" => Ok(4),
        "site" | "5" => Ok(5),
        _ => Err(format!(
            "'{s}' is not an IPv6 multicast scope for SLP (node, link, realm, admin, site or 1-5)"
        )),
    }
}

fn iface_index(s: &str) -> Result<u32, Fail> {
    if let Ok(n) = s.parse::<u32>() {
        return Ok(n);
    }
    let path = format!("/sys/class/net/{s}/ifindex");
    std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .ok_or_else(|| input(format!("--iface '{s}': no such interface")))
}

fn parse_scopes(s: &str) -> Result<ScopeList, Fail> {
    ScopeList::parse(s).map_err(|e| {
        input(format!(
            "bad scope list '{s}' ({e}): want comma-separated scope names without ( ) , \\ ! < = > ~ ; * + (escape them as \\XX)"
        ))
    })
}

fn parse_service_type(s: &str) -> Result<ServiceType, Fail> {
    ServiceType::parse(s).map_err(|_| {
        input(format!(
            "bad service type '{s}': want e.g. service:printer or service:printer:lpr (no white space or reserved characters)"
        ))
    })
}

/// A service URL as an SA may register it: a scheme (`service:TYPE://` for
/// service URLs, RFC 2609), no white space or control characters.
fn parse_url(url: &str) -> Result<SlpString, Fail> {
    let bad = |why: &str| input(format!("bad URL '{url}': {why}"));
    if url.is_empty() {
        return Err(bad("empty"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("contains white space or control characters"));
    }
    let Some(st) = url_service_type(url) else {
        return Err(bad(
            "no scheme: want service:TYPE://ADDR[:PORT][/PATH] or SCHEME:...",
        ));
    };
    if ServiceType::parse(st).is_err() {
        return Err(bad(&format!("its service type '{st}' is malformed")));
    }
    SlpString::new(url).map_err(|_| bad("longer than 65535 octets"))
}

fn parse_attrs(s: &str) -> Result<AttrList, Fail> {
    let attrs = AttrList::parse(s).map_err(|_| {
        input(format!(
            "bad attribute list '{s}': want '(tag=value,...),keyword,...' with ( ) , \\ ! < = > ~ in values escaped as \\XX"
        ))
    })?;
    attrs.check_types().map_err(|_| {
        input(format!(
            "bad attribute list '{s}': an attribute mixes value types (integer, boolean, string, opaque)"
        ))
    })?;
    Ok(attrs)
}

fn parse_tags(s: &str) -> Result<TagList, Fail> {
    TagList::parse(s).map_err(|_| {
        input(format!(
            "bad tag list '{s}': want comma-separated attribute tags, `*` wildcards allowed"
        ))
    })
}

fn parse_predicate(s: &str) -> Result<Predicate, Fail> {
    Predicate::parse(s).map_err(|_| {
        input(format!(
            "bad predicate '{s}': want an LDAPv3 search filter such as (a=1), (&(a>=2)(b=x*)), (!(c=*))"
        ))
    })
}

// ---------------------------------------------------------------------------
// Clock and randomness (a driver: it reads the clock).

/// Seconds from 1900-01-01 to 1970-01-01 (NTP era 0).
const SECS_1900_TO_1970: u64 = 2_208_988_800;

#[allow(clippy::disallowed_methods)] // driver: the MSA's version timestamp is wall-clock time
fn now_since_1970() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// µs since 1900-01-01 UTC (RFC 3528 §4.2, SPEC §4).
fn micros_since_1900(since_1970: Duration) -> u64 {
    let us = u64::try_from(since_1970.as_micros()).unwrap_or(u64::MAX);
    us.saturating_add(SECS_1900_TO_1970 * 1_000_000)
}

/// A random-enough XID (RFC 2608 §6.3: "SHOULD be randomly chosen").
fn random_xid() -> u16 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(now_since_1970().as_nanos());
    h.write_u32(std::process::id());
    // Truncation intended: any 16 bits of the hash.
    (h.finish() & 0xffff) as u16
}

/// `YYYY-MM-DDTHH:MM:SSZ` of seconds since 1970 (H. Hinnant's civil_from_days).
fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

// ---------------------------------------------------------------------------
// Where requests go.

/// The IPv6 SLP groups (RFC 3111 §4.1).
const SVRLOC: u16 = 0x116;
const SVRLOC_DA: u16 = 0x123;

/// The group-id of the Service Location range for a service type (RFC 3111 §4.1).
fn slp_hash(service_type: &str) -> u16 {
    let h = service_type
        .bytes()
        .fold(0_u32, |h, b| h.wrapping_mul(33).wrapping_add(u32::from(b)));
    // Low 10 bits: 0-1023.
    (h & 0x3ff) as u16
}

/// Which multicast group a request goes to.
enum GroupFor<'a> {
    /// SrvRqst for service:directory-agent: SVRLOC-DA.
    DaDiscovery,
    /// Other SrvRqsts: FF0X::1:1000 + hash(type).
    SrvRqst(&'a str),
    /// SrvTypeRqst, AttrRqst: SVRLOC.
    Svrloc,
}

enum Dest {
    /// Unicast to these DAs.
    Das(Vec<SocketAddr>),
    /// DA discovery by multicast, then the DAs (or the SAs).
    Multicast {
        v6: Option<(u16, u32)>,
        group: Option<SocketAddr>,
    },
}

/// What every command needs.
struct Ctx {
    net: Net,
    dest: Dest,
    lang: LangTag,
    scopes: Option<String>,
    json: bool,
    next_xid: std::cell::Cell<u16>,
    auth: Option<Auth>,
}

/// `--spi`, `--bsd`, `--key`, `--auth-lifetime`.
struct Auth {
    spi: SlpString,
    bsd: Bsd,
    /// The key's octets, if `--key` was given.
    key: Option<Vec<u8>>,
    lifetime: Option<u32>,
}

impl Auth {
    fn new(c: &Common) -> Result<Option<Self>, Fail> {
        let Some(spi) = &c.spi else {
            if c.key.is_some() || c.auth_lifetime.is_some() {
                return Err(input("--key and --auth-lifetime need --spi"));
            }
            return Ok(None);
        };
        if !spi_ok(spi) {
            return Err(input(format!(
                "bad --spi '{spi}': want a scope-like name without , ( ) \\ ! < = > ~ ; * +"
            )));
        }
        let bsd = bsd_from_name(&c.bsd).ok_or_else(|| {
            input(format!(
                "bad --bsd '{}': want ed25519 or hmac-sha256",
                c.bsd
            ))
        })?;
        let key = match &c.key {
            Some(k) => Some(key_from_text(k).map_err(|e| input(format!("bad --key: {e}")))?),
            None => None,
        };
        Ok(Some(Self {
            spi: SlpString::new(spi.clone()).map_err(|_| input("--spi too long"))?,
            bsd,
            key,
            lifetime: c.auth_lifetime,
        }))
    }

    /// The signer for a registration or deregistration.
    fn signer(&self) -> Result<Signer, Fail> {
        let Some(key) = &self.key else {
            return Err(input(
                "--spi on register/deregister signs: give the signing key with --key",
            ));
        };
        Signer::new(&self.spi, self.bsd, key).map_err(|e| input(format!("bad --key: {e}")))
    }

    /// The verifier for replies, if `--key` was given.
    fn verifier(&self) -> Result<Option<Verifier>, Fail> {
        let Some(key) = &self.key else {
            return Ok(None);
        };
        let bad = |e: svcroute_stack::wire::slp::auth::KeyError| input(format!("bad --key: {e}"));
        let v = match self.bsd {
            // A public key has 32 octets; a PKCS#8 private key gives its own.
            Bsd::Ed25519 if key.len() != 32 => {
                let pk = ed25519_public(key).map_err(bad)?;
                Verifier::new(&self.spi, self.bsd, &pk)
            }
            _ => Verifier::new(&self.spi, self.bsd, key),
        };
        v.map(Some).map_err(bad)
    }

    fn json(&self, expires: u32) -> Value {
        json!({ "spi": self.spi.as_str(), "bsd": bsd_name(self.bsd), "expires": expires })
    }
}

/// Seconds since 1970 now, as authentication block timestamps count them.
fn unix_now() -> u32 {
    u32::try_from(now_since_1970().as_secs()).unwrap_or(u32::MAX)
}

/// Checks replies' blocks (`--spi` with `--key`).
struct Check {
    verifier: Verifier,
    now: u32,
}

impl Check {
    /// Whether one of `blocks` is a good block of our SPI for `what`.
    fn good(&self, blocks: &AuthBlocks, what: &Signed<'_>) -> bool {
        blocks
            .iter()
            .any(|b| self.verifier.verify(what, b, self.now).is_ok())
    }
}

/// One agent's answer, or why there was none.
struct Outcome {
    agent: SocketAddr,
    result: Result<Reply, NetError>,
}

impl Ctx {
    fn new(c: &Common) -> Result<Self, Fail> {
        let lang = LangTag::new(&c.lang).map_err(|_| {
            input(format!(
                "bad language tag '{}': want e.g. en, de-CH, es-419",
                c.lang
            ))
        })?;
        if c.retry_ms == 0 || c.timeout_ms == 0 {
            return Err(input("--retry-ms and --timeout-ms must be at least 1"));
        }
        let dest = match (c.da.is_empty(), c.multicast) {
            (false, true) => return Err(input("give either --da or --multicast, not both")),
            (true, false) => {
                return Err(input(
                    "say where to send: --da ADDR[:PORT] (repeatable) or --multicast",
                ))
            }
            (false, false) => Dest::Das(c.da.clone()),
            (true, true) => Dest::Multicast {
                v6: if c.ipv6 {
                    let idx = c.iface.as_deref().map(iface_index).transpose()?;
                    if c.mcast_scope <= 2 && idx.is_none() && c.group.is_none() {
                        return Err(input(
                            "IPv6 node- and link-local multicast needs --iface NAME|INDEX",
                        ));
                    }
                    Some((c.mcast_scope, idx.unwrap_or(0)))
                } else {
                    None
                },
                group: c.group,
            },
        };
        Ok(Self {
            net: Net {
                timing: Timing {
                    retry: Duration::from_millis(c.retry_ms),
                    max: Duration::from_millis(c.timeout_ms),
                },
                bind: c.bind,
                force_tcp: c.tcp,
                ttl: c.ttl,
            },
            dest,
            lang,
            scopes: c.scopes.clone(),
            json: c.json,
            next_xid: std::cell::Cell::new(c.xid.unwrap_or_else(random_xid)),
            auth: Auth::new(c)?,
        })
    }

    /// The SPI requests ask for (empty: none).
    fn spi(&self) -> SlpString {
        self.auth
            .as_ref()
            .map(|a| a.spi.clone())
            .unwrap_or_default()
    }

    /// Verification of replies, with `--spi` and `--key`.
    fn check(&self) -> Result<Option<Check>, Fail> {
        let Some(a) = &self.auth else {
            return Ok(None);
        };
        Ok(a.verifier()?.map(|verifier| Check {
            verifier,
            now: unix_now(),
        }))
    }

    fn scopes_or_default(&self) -> Result<ScopeList, Fail> {
        match &self.scopes {
            Some(s) => parse_scopes(s),
            None => Ok(ScopeList::default_scope()),
        }
    }

    /// A request with the next XID.
    fn message(&self, body: Body, fresh: bool, ext: Vec<Extension>) -> Result<Message, Fail> {
        let xid = self.next_xid.get();
        self.next_xid.set(xid.wrapping_add(1));
        let mut h = Header::new(xid, self.lang.clone());
        h.flags.fresh = fresh;
        Message::new(h, body, ext).map_err(|e| input(format!("the request cannot be encoded: {e}")))
    }

    fn group(
        &self,
        v6: Option<(u16, u32)>,
        over: Option<SocketAddr>,
        kind: &GroupFor<'_>,
    ) -> SocketAddr {
        if let Some(g) = over {
            return g;
        }
        match v6 {
            None => SocketAddr::new(IpAddr::from(MCAST_V4), PORT),
            Some((scope, ifindex)) => {
                let (hi, lo) = match kind {
                    GroupFor::DaDiscovery => (0, SVRLOC_DA),
                    GroupFor::Svrloc => (0, SVRLOC),
                    GroupFor::SrvRqst(t) => (1, 0x1000 + slp_hash(t)),
                };
                let a = Ipv6Addr::new(0xff00 | scope, 0, 0, 0, 0, 0, hi, lo);
                SocketAddr::V6(SocketAddrV6::new(a, PORT, 0, ifindex))
            }
        }
    }

    /// Multicast DA discovery (RFC 2608 §12.2.1): the DAAdverts of live DAs
    /// (boot timestamp not 0) answering for `scopes`, signed with `spi`
    /// if not empty (only `das` asks: a DA that cannot sign with it stays
    /// silent to a multicast request).
    fn discover(
        &self,
        v6: Option<(u16, u32)>,
        over: Option<SocketAddr>,
        scopes: &ScopeList,
        predicate: &Predicate,
        spi: SlpString,
    ) -> Result<Vec<Reply>, Fail> {
        let req = self.message(
            Body::SrvRqst(SrvRqst {
                pr_list: SlpString::default(),
                service_type: ServiceType::directory_agent(),
                scopes: scopes.clone(),
                predicate: predicate.clone(),
                spi,
            }),
            false,
            vec![],
        )?;
        let group = self.group(v6, over, &GroupFor::DaDiscovery);
        let replies = self
            .net
            .multicast(group, &req, &[FunctionId::DaAdvert])
            .map_err(|e| Fail::Other(e.to_string()))?;
        Ok(replies
            .into_iter()
            .filter(|r| match r.msg.body() {
                Body::DaAdvert(d) => {
                    if d.boot_timestamp == 0 {
                        log::info!("{}: DA {} is going down, not used", r.from, d.url);
                    }
                    d.boot_timestamp != 0
                }
                _ => false,
            })
            .collect())
    }

    /// A query: to each `--da`; or to the DAs multicast discovery finds, or
    /// without DAs by multicast convergence to the SAs.
    fn query(
        &self,
        body: Body,
        expect: &[FunctionId],
        group: &GroupFor<'_>,
    ) -> Result<Vec<Outcome>, Fail> {
        let req = self.message(body, false, vec![])?;
        let agents = match &self.dest {
            Dest::Das(das) => das.clone(),
            Dest::Multicast { v6, group: over } => {
                let scopes = match req.body() {
                    Body::SrvRqst(r) => r.scopes.clone(),
                    Body::AttrRqst(r) => r.scopes.clone(),
                    Body::SrvTypeRqst(r) => r.scopes.clone(),
                    _ => ScopeList::default(),
                };
                let das = self.discover(
                    *v6,
                    *over,
                    &scopes,
                    &Predicate::default(),
                    SlpString::default(),
                )?;
                if das.is_empty() {
                    log::info!("no DA found: asking the SAs by multicast");
                    let g = self.group(*v6, *over, group);
                    let replies = self
                        .net
                        .multicast(g, &req, expect)
                        .map_err(|e| Fail::Other(e.to_string()))?;
                    return Ok(replies
                        .into_iter()
                        .map(|r| Outcome {
                            agent: r.from,
                            result: Ok(r),
                        })
                        .collect());
                }
                das.iter().map(|r| r.from).collect()
            }
        };
        Ok(agents
            .into_iter()
            .map(|agent| Outcome {
                agent,
                result: self.net.unicast(agent, &req, expect),
            })
            .collect())
    }

    /// Where a SrvReg/SrvDeReg goes, with the scopes to put in it: `--da`
    /// with all our scopes, or each discovered DA with the scopes of ours
    /// it supports (RFC 2608 §8.3).
    fn registration_targets(
        &self,
        scopes: &ScopeList,
    ) -> Result<Vec<(SocketAddr, ScopeList)>, Fail> {
        match &self.dest {
            Dest::Das(das) => Ok(das.iter().map(|a| (*a, scopes.clone())).collect()),
            Dest::Multicast { v6, group } => {
                let das = self.discover(
                    *v6,
                    *group,
                    scopes,
                    &Predicate::default(),
                    SlpString::default(),
                )?;
                let mut out = Vec::new();
                for r in das {
                    let Body::DaAdvert(d) = r.msg.body() else {
                        continue;
                    };
                    let common: Vec<Scope> = scopes
                        .scopes()
                        .iter()
                        .filter(|s| d.scopes.contains(s))
                        .cloned()
                        .collect();
                    if common.is_empty() {
                        log::info!("DA {} ({}) serves none of our scopes", d.url, r.from);
                        continue;
                    }
                    // NOTE: a subset of a list that encoded encodes.
                    let list = ScopeList::new(common)
                        .map_err(|e| Fail::Other(format!("scope list: {e}")))?;
                    out.push((r.from, list));
                }
                if out.is_empty() {
                    return Err(Fail::NoReply(format!(
                        "multicast DA discovery found no DA for scopes {scopes}"
                    )));
                }
                Ok(out)
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Commands.

fn run(args: SlpArgs) -> Result<(), Fail> {
    if let SlpCmd::Keygen { out } = &args.cmd {
        return keygen(&args.common, out.as_deref());
    }
    let ctx = Ctx::new(&args.common)?;
    match args.cmd {
        SlpCmd::Register {
            url,
            lifetime,
            attrs,
            service_type,
            fresh: _,
            incremental,
            mesh_fwd,
            mesh_update,
            version_ts,
        } => {
            let url = parse_url(&url)?;
            let service_type = match service_type {
                Some(t) => parse_service_type(&t)?,
                // NOTE: parse_url checked that the URL has a well-formed type.
                None => parse_service_type(url_service_type(&url).unwrap_or_default())?,
            };
            let attrs = parse_attrs(&attrs)?;
            if incremental && mesh_fwd {
                return Err(input(
                    "--mesh-fwd goes only with a fresh registration (RFC 3528 §4.3), not --incremental; \
                     --mesh-update forwards an incremental one (svcroute extension)",
                ));
            }
            let scopes = registration_scopes(&ctx)?;
            let ext = mesh_ext(mesh_fwd || mesh_update, version_ts)?;
            // RFC 2608 §8.3, §9.2.1: the URL and the attribute list signed.
            let mut entry = UrlEntry::new(lifetime, url.clone());
            let mut attr_auths = AuthBlocks::default();
            let mut signed = None;
            if let Some(a) = &ctx.auth {
                if incremental {
                    return Err(input(
                        "a signed registration must be fresh: signatures cover all attributes (RFC 2608 §9.3)",
                    ));
                }
                let signer = a.signer()?;
                let expires = unix_now().saturating_add(a.lifetime.unwrap_or(u32::from(lifetime)));
                push_block(&mut entry.auths, signer.sign(&Signed::Url(&url), expires))?;
                push_block(
                    &mut attr_auths,
                    signer.sign(&Signed::Attrs(&attrs), expires),
                )?;
                signed = Some(a.json(expires));
            }
            let build = |scopes: ScopeList| {
                Body::SrvReg(SrvReg {
                    entry: entry.clone(),
                    service_type: service_type.clone(),
                    scopes,
                    attrs: attrs.clone(),
                    attr_auths: attr_auths.clone(),
                })
            };
            let what = format!("registration of {url}");
            update(
                &ctx,
                "register",
                &url,
                &scopes,
                !incremental,
                &ext,
                signed,
                build,
                &what,
                |agent, s| {
                    format!("registered {url} at {agent} (scopes {s}, lifetime {lifetime} s)")
                },
            )
        }
        SlpCmd::Deregister {
            url,
            tags,
            mesh_fwd,
            mesh_update,
            version_ts,
        } => {
            let url = parse_url(&url)?;
            let tags = parse_tags(&tags)?;
            if !tags.is_empty() && mesh_fwd {
                return Err(input(
                    "--mesh-fwd goes only with a complete deregistration (RFC 3528 §4.3), not --tags; \
                     --mesh-update forwards a partial one (svcroute extension)",
                ));
            }
            if mesh_update && tags.is_empty() {
                return Err(input(
                    "--mesh-update goes with --tags; use --mesh-fwd otherwise",
                ));
            }
            let scopes = registration_scopes(&ctx)?;
            let ext = mesh_ext(mesh_fwd || mesh_update, version_ts)?;
            // RFC 2608 §10.6: a URL block for each SPI registered with.
            let mut entry = UrlEntry::new(0, url.clone());
            let mut signed = None;
            if let Some(a) = &ctx.auth {
                if !tags.is_empty() {
                    return Err(input(
                        "a signed deregistration must be complete: no --tags (RFC 2608 §10.6)",
                    ));
                }
                let signer = a.signer()?;
                let expires = unix_now().saturating_add(a.lifetime.unwrap_or(600));
                push_block(&mut entry.auths, signer.sign(&Signed::Url(&url), expires))?;
                signed = Some(a.json(expires));
            }
            let build = |scopes: ScopeList| {
                Body::SrvDeReg(SrvDeReg {
                    scopes,
                    entry: entry.clone(),
                    tags: tags.clone(),
                })
            };
            let what = format!("deregistration of {url}");
            let t = tags.as_raw().to_owned();
            update(
                &ctx,
                "deregister",
                &url,
                &scopes,
                false,
                &ext,
                signed,
                build,
                &what,
                |agent, s| {
                    if t.is_empty() {
                        format!("deregistered {url} at {agent} (scopes {s})")
                    } else {
                        format!("deregistered attributes {t} of {url} at {agent} (scopes {s})")
                    }
                },
            )
        }
        SlpCmd::Find {
            service_type,
            predicate,
        } => {
            let st = parse_service_type(&service_type)?;
            let predicate = parse_predicate(&predicate)?;
            let scopes = ctx.scopes_or_default()?;
            let body = Body::SrvRqst(SrvRqst {
                pr_list: SlpString::default(),
                service_type: st.clone(),
                scopes,
                predicate,
                spi: ctx.spi(),
            });
            let expect = [
                FunctionId::SrvRply,
                FunctionId::DaAdvert,
                FunctionId::SaAdvert,
            ];
            let group = if st.as_str().eq_ignore_ascii_case("service:directory-agent") {
                GroupFor::DaDiscovery
            } else {
                GroupFor::SrvRqst(st.as_str())
            };
            let outcomes = ctx.query(body, &expect, &group)?;
            find_output(&ctx, &st, &outcomes)
        }
        SlpCmd::Attrs { target, tags } => {
            if ServiceType::parse(&target).is_err() || target.contains("://") {
                parse_url(&target)?;
            }
            let url = SlpString::new(target.clone()).map_err(|_| input("URL too long"))?;
            let tags = parse_tags(&tags)?;
            let body = Body::AttrRqst(AttrRqst {
                pr_list: SlpString::default(),
                url,
                scopes: ctx.scopes_or_default()?,
                tags,
                spi: ctx.spi(),
            });
            let outcomes = ctx.query(body, &[FunctionId::AttrRply], &GroupFor::Svrloc)?;
            attrs_output(&ctx, &target, &outcomes)
        }
        SlpCmd::Types { na } => {
            let naming_authority = match na.as_deref() {
                None | Some("") => NamingAuthority::Iana,
                Some("*") => NamingAuthority::All,
                Some(n) => NamingAuthority::Named(AuthorityName::new(n).map_err(|_| {
                    input(format!(
                        "bad naming authority '{n}': want a name without reserved characters, or *"
                    ))
                })?),
            };
            let body = Body::SrvTypeRqst(SrvTypeRqst {
                pr_list: SlpString::default(),
                naming_authority,
                scopes: ctx.scopes_or_default()?,
            });
            let outcomes = ctx.query(body, &[FunctionId::SrvTypeRply], &GroupFor::Svrloc)?;
            types_output(&ctx, &outcomes)
        }
        SlpCmd::Das { predicate } => {
            let predicate = parse_predicate(&predicate)?;
            // Default: every DA, whatever its scopes (RFC 2608 §6, NO SCOPE).
            let scopes = match &ctx.scopes {
                Some(s) => parse_scopes(s)?,
                None => ScopeList::default(),
            };
            let outcomes = match &ctx.dest {
                Dest::Multicast { v6, group } => ctx
                    .discover(*v6, *group, &scopes, &predicate, ctx.spi())?
                    .into_iter()
                    .map(|r| Outcome {
                        agent: r.from,
                        result: Ok(r),
                    })
                    .collect(),
                Dest::Das(_) => {
                    let body = Body::SrvRqst(SrvRqst {
                        pr_list: SlpString::default(),
                        service_type: ServiceType::directory_agent(),
                        scopes,
                        predicate,
                        spi: ctx.spi(),
                    });
                    let expect = [FunctionId::DaAdvert, FunctionId::SrvRply];
                    ctx.query(body, &expect, &GroupFor::DaDiscovery)?
                }
            };
            das_output(&ctx, &outcomes)
        }
        SlpCmd::Keygen { .. } => Ok(()),
    }
}

fn push_block(
    blocks: &mut AuthBlocks,
    b: svcroute_stack::wire::slp::AuthBlock,
) -> Result<(), Fail> {
    blocks
        .push(b)
        .map_err(|_| input("too many authentication blocks"))
}

/// `svcroute slp keygen`: fresh key material as key text.
fn keygen(c: &Common, out: Option<&std::path::Path>) -> Result<(), Fail> {
    let bsd = bsd_from_name(&c.bsd).ok_or_else(|| {
        input(format!(
            "bad --bsd '{}': want ed25519 or hmac-sha256",
            c.bsd
        ))
    })?;
    let key = random_key().ok_or_else(|| Fail::Other("the system random source failed".into()))?;
    let private = format!("hex:{}", to_hex(&key));
    let public = match bsd {
        Bsd::Ed25519 => Some(format!(
            "hex:{}",
            to_hex(&ed25519_public(&key).map_err(|e| Fail::Other(e.to_string()))?)
        )),
        _ => None,
    };
    if let Some(path) = out {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| Fail::Other(format!("{}: {e}", path.display())))?;
        writeln!(f, "{private}").map_err(|e| Fail::Other(format!("{}: {e}", path.display())))?;
    }
    let shown_private = match out {
        Some(p) => format!("file:{}", p.display()),
        None => private,
    };
    if c.json {
        println!(
            "{}",
            json!({ "bsd": bsd_name(bsd), "private": shown_private, "public": public })
        );
    } else {
        println!("bsd: {}", bsd_name(bsd));
        println!("private: {shown_private}");
        if let Some(p) = public {
            println!("public: {p}");
        }
    }
    Ok(())
}

fn registration_scopes(ctx: &Ctx) -> Result<ScopeList, Fail> {
    let scopes = ctx.scopes_or_default()?;
    if scopes.is_empty() {
        return Err(input(
            "--scopes must name at least one scope to register in",
        ));
    }
    Ok(scopes)
}

/// MeshFwd RqstFwd (RFC 3528 §4.3): version timestamp, accept timestamp 0,
/// no accept DA URL yet.
fn mesh_ext(mesh_fwd: bool, version_ts: Option<u64>) -> Result<Vec<Extension>, Fail> {
    if !mesh_fwd {
        if version_ts.is_some() {
            return Err(input("--version-ts goes with --mesh-fwd or --mesh-update"));
        }
        return Ok(vec![]);
    }
    Ok(vec![Extension::MeshFwd(MeshFwd {
        fwd: FwdId::RqstFwd,
        version: version_ts.unwrap_or_else(|| micros_since_1900(now_since_1970())),
        accept: AcceptId::default(),
    })])
}

/// SrvReg / SrvDeReg to every target; every one must acknowledge with 0
/// (an SA registers consistently with all DAs, RFC 2608 §8.3).
#[allow(clippy::too_many_arguments)]
fn update(
    ctx: &Ctx,
    op: &str,
    url: &SlpString,
    scopes: &ScopeList,
    fresh: bool,
    ext: &[Extension],
    signed: Option<Value>,
    build: impl Fn(ScopeList) -> Body,
    what: &str,
    done: impl Fn(SocketAddr, &ScopeList) -> String,
) -> Result<(), Fail> {
    let targets = ctx.registration_targets(scopes)?;
    let mut rows = Vec::new();
    let mut worst: Option<Fail> = None;
    for (agent, scopes) in targets {
        let req = ctx.message(build(scopes.clone()), fresh, ext.to_vec())?;
        let result = ctx.net.unicast(agent, &req, &[FunctionId::SrvAck]);
        let mut row = result_json(agent, &result);
        row["xid"] = json!(req.header().xid);
        row["scopes"] = json!(scope_names(&scopes));
        rows.push(row);
        let fail = match result {
            Ok(r) => match r.msg.body().error() {
                Some(ErrorCode::Ok) => {
                    if !ctx.json {
                        println!("{}", done(agent, &scopes));
                    }
                    None
                }
                Some(code) => Some(Fail::Refused(format!(
                    "{agent} refused the {what}: {}",
                    code_text(code)
                ))),
                None => Some(Fail::Other(format!("{agent}: reply without an error code"))),
            },
            Err(NetError::NoReply(s)) => Some(Fail::NoReply(s)),
            Err(NetError::Other(e)) => Some(Fail::Other(format!("{e:#}"))),
        };
        if let Some(f) = fail {
            if worst.as_ref().is_some_and(|w| rank(w) >= rank(&f)) {
                eprintln!("svcroute: slp: {f}");
            } else {
                if let Some(w) = worst.take() {
                    eprintln!("svcroute: slp: {w}");
                }
                worst = Some(f);
            }
        }
    }
    if ctx.json {
        let mut out = json!({
            "command": op,
            "url": url.as_str(),
            "results": rows,
        });
        if let Some(Extension::MeshFwd(m)) = ext.first() {
            out["mesh_fwd"] = json!({ "fwd_id": "RqstFwd", "version_timestamp": m.version });
        }
        if let Some(s) = signed {
            out["auth"] = s;
        }
        println!("{out}");
    }
    worst.map_or(Ok(()), Err)
}

/// Which failure decides the exit status: SLP error > no reply > other.
fn rank(f: &Fail) -> u8 {
    match f {
        Fail::Refused(_) => 3,
        Fail::NoReply(_) => 2,
        Fail::Other(_) | Fail::Input(_) => 1,
    }
}

/// The successful replies of a query; failures are warnings while at least
/// one agent answered with 0 (RFC 2608 §12.3: use another DA), else the
/// command fails.
fn successes<'a>(outcomes: &'a [Outcome], what: &str) -> Result<Vec<&'a Reply>, Fail> {
    let mut ok = Vec::new();
    let mut failures = Vec::new();
    for o in outcomes {
        failures.push(match &o.result {
            Ok(r) => match r.msg.body().error() {
                None | Some(ErrorCode::Ok) => {
                    ok.push(r);
                    continue;
                }
                Some(code) => Fail::Refused(format!(
                    "{} answered the {what} with {}",
                    o.agent,
                    code_text(code)
                )),
            },
            Err(NetError::NoReply(s)) => Fail::NoReply(s.clone()),
            Err(NetError::Other(e)) => Fail::Other(format!("{e:#}")),
        });
    }
    if !ok.is_empty() {
        for f in failures {
            eprintln!("svcroute: slp: warning: {f}");
        }
        return Ok(ok);
    }
    // The worst failure decides the exit status; the others are printed here.
    let Some(worst) = (0..failures.len()).max_by_key(|&i| rank(&failures[i])) else {
        return Err(Fail::NoReply(format!("no DA or SA answered the {what}")));
    };
    let worst = failures.remove(worst);
    for f in failures {
        eprintln!("svcroute: slp: {f}");
    }
    Err(worst)
}

fn transport(r: &Reply) -> &'static str {
    if r.tcp {
        "tcp"
    } else {
        "udp"
    }
}

fn outcome_json(o: &Outcome) -> Value {
    result_json(o.agent, &o.result)
}

fn result_json(agent: SocketAddr, result: &Result<Reply, NetError>) -> Value {
    match result {
        Ok(r) => {
            let code = r.msg.body().error().unwrap_or_default();
            json!({
                "agent": r.from.to_string(),
                "transport": transport(r),
                "overflow": r.overflow,
                "truncated": r.truncated,
                "error_code": u16::from(code),
                "error": code_name(code),
            })
        }
        Err(e) => json!({
            "agent": agent.to_string(),
            "error_code": Value::Null,
            "error": match e { NetError::NoReply(_) => "NO_REPLY", NetError::Other(_) => "FAILED" },
            "message": e.to_string(),
        }),
    }
}

fn scope_names(s: &ScopeList) -> Vec<String> {
    s.scopes().iter().map(|s| s.as_raw().to_owned()).collect()
}

fn value_json(v: &AttrValue) -> Value {
    match v {
        AttrValue::Integer(i) => json!(i),
        AttrValue::Boolean(b) => json!(b),
        AttrValue::String(s) => json!(s),
        AttrValue::Opaque(o) => {
            json!({ "opaque": o.iter().map(|b| format!("{b:02x}")).collect::<String>() })
        }
    }
}

fn attrs_json(a: &AttrList) -> Value {
    Value::Array(
        a.attributes()
            .iter()
            .map(|a| {
                json!({
                    "tag": a.tag(),
                    "values": a.values().iter().map(value_json).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// Whether a reply's item passes `--key` verification: `None` without a
/// key; a failing item is dropped with a warning (RFC 2608 §8.5: a UA that
/// can verify MUST discard what fails).
fn verified(
    check: Option<&Check>,
    blocks: &AuthBlocks,
    what: &Signed<'_>,
    name: &str,
) -> Option<bool> {
    let c = check?;
    let good = c.good(blocks, what);
    if !good {
        eprintln!(
            "svcroute: slp: warning: {name}: no good authentication block for SPI {}, dropped",
            c.verifier.spi()
        );
    }
    Some(good)
}

fn find_output(ctx: &Ctx, st: &ServiceType, outcomes: &[Outcome]) -> Result<(), Fail> {
    let check = ctx.check()?;
    let res = successes(outcomes, &format!("SrvRqst for {st}"));
    let mut entries: Vec<(String, u16, usize, SocketAddr, Option<bool>)> = Vec::new();
    if let Ok(ok) = &res {
        for r in ok {
            let found: Vec<(String, u16, usize, Option<bool>)> = match r.msg.body() {
                Body::SrvRply(s) => s
                    .entries
                    .iter()
                    .map(|e| {
                        let v = verified(check.as_ref(), &e.auths, &Signed::Url(&e.url), &e.url);
                        (e.url.as_str().to_owned(), e.lifetime, e.auths.len(), v)
                    })
                    .collect(),
                Body::DaAdvert(d) => {
                    let v = verified(check.as_ref(), &d.auths, &Signed::da_advert(d), &d.url);
                    vec![(d.url.as_str().to_owned(), 0, d.auths.len(), v)]
                }
                Body::SaAdvert(s) => {
                    let v = verified(check.as_ref(), &s.auths, &Signed::sa_advert(s), &s.url);
                    vec![(s.url.as_str().to_owned(), 0, s.auths.len(), v)]
                }
                _ => vec![],
            };
            for (url, lifetime, auths, v) in found {
                if v == Some(false) {
                    continue;
                }
                // URLs compare case-sensitively (RFC 2608 §6.4); keep the first.
                if !entries.iter().any(|e| e.0 == url) {
                    entries.push((url, lifetime, auths, r.from, v));
                }
            }
        }
    }
    if ctx.json {
        println!(
            "{}",
            json!({
                "command": "find",
                "service_type": st.as_str(),
                "entries": entries.iter().map(|(u, l, a, f, v)| json!({
                    "url": u, "lifetime": l, "auth_blocks": a, "verified": v, "from": f.to_string(),
                })).collect::<Vec<_>>(),
                "replies": outcomes.iter().map(outcome_json).collect::<Vec<_>>(),
            })
        );
    } else {
        for (url, lifetime, _, _, _) in &entries {
            println!("{url},{lifetime}");
        }
    }
    res.map(|_| ())
}

fn attrs_output(ctx: &Ctx, target: &str, outcomes: &[Outcome]) -> Result<(), Fail> {
    let check = ctx.check()?;
    let res = successes(outcomes, &format!("AttrRqst for {target}"));
    let mut lists: Vec<(&AttrList, SocketAddr, usize, Option<bool>)> = Vec::new();
    if let Ok(ok) = &res {
        for r in ok {
            if let Body::AttrRply(a) = r.msg.body() {
                let name = format!("attributes from {}", r.from);
                let v = verified(check.as_ref(), &a.auths, &Signed::Attrs(&a.attrs), &name);
                if v != Some(false) && !lists.iter().any(|(l, ..)| *l == &a.attrs) {
                    lists.push((&a.attrs, r.from, a.auths.len(), v));
                }
            }
        }
    }
    if ctx.json {
        println!(
            "{}",
            json!({
                "command": "attrs",
                "target": target,
                "lists": lists.iter().map(|(l, f, n, v)| json!({
                    "from": f.to_string(),
                    "attrs": l.to_string(),
                    "attributes": attrs_json(l),
                    "auth_blocks": n,
                    "verified": v,
                })).collect::<Vec<_>>(),
                "replies": outcomes.iter().map(outcome_json).collect::<Vec<_>>(),
            })
        );
    } else {
        for (l, ..) in &lists {
            println!("{l}");
        }
    }
    res.map(|_| ())
}

fn types_output(ctx: &Ctx, outcomes: &[Outcome]) -> Result<(), Fail> {
    let res = successes(outcomes, "SrvTypeRqst");
    let mut types: Vec<String> = Vec::new();
    if let Ok(ok) = &res {
        for r in ok {
            if let Body::SrvTypeRply(t) = r.msg.body() {
                for t in t.types.types() {
                    if !types.iter().any(|x| x.eq_ignore_ascii_case(t.as_str())) {
                        types.push(t.as_str().to_owned());
                    }
                }
            }
        }
    }
    if ctx.json {
        println!(
            "{}",
            json!({
                "command": "types",
                "types": types,
                "replies": outcomes.iter().map(outcome_json).collect::<Vec<_>>(),
            })
        );
    } else {
        for t in &types {
            println!("{t}");
        }
    }
    res.map(|_| ())
}

fn da_json(d: &DaAdvert, r: &Reply, verified: Option<bool>) -> Value {
    json!({
        "url": d.url.as_str(),
        "scopes": scope_names(&d.scopes),
        "attrs": d.attrs.to_string(),
        "attributes": attrs_json(&d.attrs),
        "boot_timestamp": d.boot_timestamp,
        "boot_time": rfc3339(u64::from(d.boot_timestamp)),
        "going_down": d.boot_timestamp == 0,
        "mesh_enhanced": d.attrs.is_mesh_enhanced(),
        "spi_list": d.spi_list.as_str(),
        "auth_blocks": d.auths.len(),
        "verified": verified,
        "from": r.from.to_string(),
        "transport": transport(r),
    })
}

fn das_output(ctx: &Ctx, outcomes: &[Outcome]) -> Result<(), Fail> {
    let check = ctx.check()?;
    let res = successes(outcomes, "DA discovery");
    let mut das: Vec<(&DaAdvert, &Reply, Option<bool>)> = Vec::new();
    if let Ok(ok) = &res {
        for r in ok {
            if let Body::DaAdvert(d) = r.msg.body() {
                let v = verified(check.as_ref(), &d.auths, &Signed::da_advert(d), &d.url);
                if v != Some(false) && !das.iter().any(|(x, ..)| x.url == d.url) {
                    das.push((d, r, v));
                }
            }
        }
    }
    if ctx.json {
        println!(
            "{}",
            json!({
                "command": "das",
                "das": das.iter().map(|(d, r, v)| da_json(d, r, *v)).collect::<Vec<_>>(),
                "replies": outcomes.iter().map(outcome_json).collect::<Vec<_>>(),
            })
        );
    } else {
        for (d, r, _) in &das {
            let boot = if d.boot_timestamp == 0 {
                "0 (going down)".to_owned()
            } else {
                format!(
                    "{} ({})",
                    d.boot_timestamp,
                    rfc3339(u64::from(d.boot_timestamp))
                )
            };
            println!(
                "{} scopes={} boot={boot} mesh-enhanced={} from={} attrs={}",
                d.url,
                d.scopes,
                if d.attrs.is_mesh_enhanced() {
                    "yes"
                } else {
                    "no"
                },
                r.from,
                d.attrs
            );
        }
    }
    res.map(|_| ())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn rfc3111_hash() {
        // RFC 3111 §4.2.1: slp_hash("service:service-agent") = 0x01d8.
        assert_eq!(slp_hash("service:service-agent"), 0x01d8);
        assert_eq!(slp_hash(""), 0);
    }

    #[test]
    fn agents() {
        assert_eq!(
            parse_agent("10.0.0.1").unwrap(),
            "10.0.0.1:427".parse().unwrap()
        );
        assert_eq!(
            parse_agent("10.0.0.1:4270").unwrap(),
            "10.0.0.1:4270".parse().unwrap()
        );
        assert_eq!(
            parse_agent("fd00::1").unwrap(),
            "[fd00::1]:427".parse().unwrap()
        );
        assert_eq!(
            parse_agent("[fd00::1]").unwrap(),
            "[fd00::1]:427".parse().unwrap()
        );
        assert!(parse_agent("10.0.0.1:99999").is_err());
        assert!(parse_agent("10.0.0.1:notaport").is_err());
    }

    #[test]
    fn times() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(
            micros_since_1900(Duration::from_secs(1)),
            (SECS_1900_TO_1970 + 1) * 1_000_000
        );
    }

    #[test]
    fn v6_groups() {
        let c = Ctx {
            net: Net {
                timing: Timing {
                    retry: Duration::from_secs(2),
                    max: Duration::from_secs(15),
                },
                bind: None,
                force_tcp: false,
                ttl: 255,
            },
            dest: Dest::Das(vec![]),
            lang: LangTag::en(),
            scopes: None,
            json: false,
            next_xid: std::cell::Cell::new(1),
            auth: None,
        };
        let g = |k| c.group(Some((5, 0)), None, &k).to_string();
        assert_eq!(g(GroupFor::DaDiscovery), "[ff05::123]:427");
        assert_eq!(g(GroupFor::Svrloc), "[ff05::116]:427");
        assert_eq!(
            g(GroupFor::SrvRqst("service:service-agent")),
            "[ff05::1:11d8]:427"
        );
        assert_eq!(
            c.group(None, None, &GroupFor::Svrloc).to_string(),
            "239.255.255.253:427"
        );
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: SlpArgs,
    }

    fn ctx_of(argv: &[&str]) -> Result<Ctx, Fail> {
        use clap::Parser as _;
        let mut full = vec!["slp", "--da", "127.0.0.1"];
        full.extend_from_slice(argv);
        Ctx::new(&Cli::try_parse_from(full).unwrap().args.common)
    }

    #[test]
    fn auth_options_are_checked_and_named() {
        use clap::Parser as _;
        for (argv, want) in [
            (&["--spi", "a,b", "find", "x"][..], "--spi"),
            (&["--spi", "k", "--bsd", "dsa", "find", "x"][..], "--bsd"),
            (
                &["--spi", "k", "--key", "hex:zz", "find", "x"][..],
                "bad --key",
            ),
            (
                &["--spi", "k", "--key", "0011", "find", "x"][..],
                "hex:, base64: or file:",
            ),
        ] {
            let e = ctx_of(argv).err().expect("refused");
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains(want), "{argv:?}: {e}");
        }
        // --key needs --spi (clap), --auth-lifetime too (ours).
        assert!(Cli::try_parse_from(["slp", "--key", "hex:00", "find", "x"]).is_err());
        assert!(ctx_of(&["--auth-lifetime", "5", "find", "x"]).is_err());
        // Signing needs a key; a short HMAC secret is refused when used.
        let c = ctx_of(&["--spi", "k", "find", "x"]).unwrap();
        assert!(c.auth.as_ref().unwrap().signer().is_err());
        let c = ctx_of(&[
            "--spi",
            "k",
            "--bsd",
            "hmac-sha256",
            "--key",
            "hex:00",
            "find",
            "x",
        ])
        .unwrap();
        let e = c.auth.as_ref().unwrap().signer().unwrap_err();
        assert!(e.to_string().contains("at least 16"), "{e}");
        assert_eq!(c.spi().as_str(), "k");
    }

    #[test]
    fn replies_are_verified_with_the_key() {
        let seed = [4; 32];
        let signer = Signer::new("k", Bsd::Ed25519, &seed).unwrap();
        let url = SlpString::new("service:x://h").unwrap();
        let mut blocks = AuthBlocks::default();
        blocks
            .push(signer.sign(&Signed::Url(&url), u32::MAX))
            .unwrap();
        // The public key, or the private key (its public half is derived
        // unless it is a 32-octet seed, which reads as a public key).
        let public = format!("hex:{}", to_hex(&ed25519_public(&seed).unwrap()));
        let c = ctx_of(&["--spi", "k", "--key", &public, "find", "x"]).unwrap();
        let check = c.check().unwrap().unwrap();
        assert_eq!(
            verified(Some(&check), &blocks, &Signed::Url(&url), "u"),
            Some(true)
        );
        let other = SlpString::new("service:x://evil").unwrap();
        assert_eq!(
            verified(Some(&check), &blocks, &Signed::Url(&other), "u"),
            Some(false)
        );
        assert_eq!(
            verified(
                Some(&check),
                &AuthBlocks::default(),
                &Signed::Url(&url),
                "u"
            ),
            Some(false)
        );
        assert_eq!(verified(None, &blocks, &Signed::Url(&url), "u"), None);
        // No --key: nothing to check with.
        let c = ctx_of(&["--spi", "k", "find", "x"]).unwrap();
        assert!(c.check().unwrap().is_none());
    }

    #[test]
    fn bad_input_is_named() {
        for (r, want) in [
            (parse_url("nourl").map(|_| ()), "nourl"),
            (parse_url("service:x:// h").map(|_| ()), "white space"),
            (parse_attrs("(a=1").map(|_| ()), "(a=1"),
            (parse_attrs("(a=1,true)").map(|_| ()), "mixes"),
            (parse_predicate("(a=1").map(|_| ()), "(a=1"),
            (parse_scopes("a,,b").map(|_| ()), "a,,b"),
            (parse_tags("a,,b").map(|_| ()), "a,,b"),
        ] {
            let e = r.unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains(want), "{e}");
        }
        assert!(parse_url("service:printer:lpr://p.example:515/q").is_ok());
        assert!(parse_url("http://example.org/").is_ok());
    }
}
