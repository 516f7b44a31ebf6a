//! The command line of `svcroute slp`: its options and subcommands (clap),
//! and the parsers that turn argument text into wire types with errors that
//! name the bad input.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs as _};
use std::path::PathBuf;
use std::str::FromStr as _;

use svcroute_stack::wire::slp::{
    url::url_service_type, AttrList, Predicate, ScopeList, ServiceType, SlpString, TagList, PORT,
};

use super::fail::{input, Fail};

/// `svcroute slp` arguments.
#[derive(clap::Args)]
pub(crate) struct SlpArgs {
    // Boxed: the options outweigh every other command's arguments.
    #[command(flatten)]
    pub(super) common: Box<Common>,
    #[command(subcommand)]
    pub(super) cmd: SlpCmd,
}

/// Options every subcommand takes (before or after the subcommand).
#[derive(clap::Args)]
pub(super) struct Common {
    /// Send to this DA (unicast; repeatable). PORT defaults to 427.
    #[arg(long, value_name = "ADDR[:PORT]", value_parser = parse_agent, global = true, help_heading = "Agent options")]
    pub(super) da: Vec<SocketAddr>,
    /// No DA given: discover DAs by multicast convergence and use them; if
    /// none answers, multicast the request to SAs (RFC 2608 §6).
    #[arg(long, global = true, help_heading = "Agent options")]
    pub(super) multicast: bool,
    /// Multicast over IPv6 to the RFC 3111 groups instead of 239.255.255.253.
    #[arg(long, global = true, help_heading = "Agent options")]
    pub(super) ipv6: bool,
    /// IPv6 multicast scope: node, link, realm, admin, site or 1-5.
    #[arg(long, value_name = "SCOPE", default_value = "link", value_parser = parse_mcast_scope, global = true, help_heading = "Agent options")]
    pub(super) mcast_scope: u16,
    /// Interface (name or index) for link- and node-local IPv6 multicast.
    #[arg(
        long,
        value_name = "IFACE",
        global = true,
        help_heading = "Agent options"
    )]
    pub(super) iface: Option<String>,
    /// Send multicast requests to this address instead of the SLP group
    /// (e.g. a subnet broadcast address; tests use a unicast address).
    #[arg(long, value_name = "ADDR[:PORT]", value_parser = parse_agent, global = true, help_heading = "Agent options")]
    pub(super) group: Option<SocketAddr>,
    /// IPv4 multicast TTL.
    #[arg(
        long,
        default_value_t = 255,
        global = true,
        help_heading = "Agent options"
    )]
    pub(super) ttl: u32,
    /// Local address to send from (also picks the IPv4 multicast interface).
    #[arg(
        long,
        value_name = "ADDR",
        global = true,
        help_heading = "Agent options"
    )]
    pub(super) bind: Option<IpAddr>,
    /// Scope list, comma separated [default: DEFAULT; `das`: all scopes].
    #[arg(
        long,
        value_name = "SCOPE,...",
        global = true,
        help_heading = "Agent options"
    )]
    pub(super) scopes: Option<String>,
    /// Language tag of the requests.
    #[arg(
        long,
        default_value = "en",
        global = true,
        help_heading = "Agent options"
    )]
    pub(super) lang: String,
    /// Give up after this many ms (CONFIG_RETRY_MAX / CONFIG_MC_MAX).
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 15_000,
        global = true,
        help_heading = "Agent options"
    )]
    pub(super) timeout_ms: u64,
    /// First UDP retransmission after this many ms, doubling (CONFIG_RETRY).
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 2_000,
        global = true,
        help_heading = "Agent options"
    )]
    pub(super) retry_ms: u64,
    /// Unicast requests over TCP (UDP replies with OVERFLOW go to TCP anyway).
    #[arg(long, global = true, help_heading = "Agent options")]
    pub(super) tcp: bool,
    /// Print the replies as one JSON object.
    #[arg(long, global = true, help_heading = "Agent options")]
    pub(super) json: bool,
    /// Transaction ID of the first request [default: random].
    #[arg(long, global = true, help_heading = "Agent options")]
    pub(super) xid: Option<u16>,
    /// SLP SPI: queries ask for its authentication blocks (RFC 2608 §8.1,
    /// §10.3); register/deregister sign with it (needs --key).
    #[arg(
        long,
        value_name = "SPI",
        global = true,
        help_heading = "Authentication"
    )]
    pub(super) spi: Option<String>,
    /// Block structure descriptor of --key: ed25519 (0x8002) or hmac-sha256 (0x8001).
    #[arg(
        long,
        value_name = "BSD",
        default_value = "ed25519",
        global = true,
        help_heading = "Authentication"
    )]
    pub(super) bsd: String,
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
    pub(super) key: Option<String>,
    /// Seconds the signatures stay valid [default: register: the lifetime;
    /// deregister: 600].
    #[arg(long, value_name = "S", global = true, help_heading = "Authentication")]
    pub(super) auth_lifetime: Option<u32>,
}

#[derive(clap::Subcommand)]
pub(super) enum SlpCmd {
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

// ---------------------------------------------------------------------------
// Argument parsing.

/// `ADDR`, `ADDR:PORT`, `[V6]:PORT`, `V6`, `HOST`, `HOST:PORT`; port 427 by default.
pub(super) fn parse_agent(s: &str) -> Result<SocketAddr, String> {
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
pub(super) fn parse_mcast_scope(s: &str) -> Result<u16, String> {
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

pub(super) fn iface_index(s: &str) -> Result<u32, Fail> {
    if let Ok(n) = s.parse::<u32>() {
        return Ok(n);
    }
    let path = format!("/sys/class/net/{s}/ifindex");
    std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .ok_or_else(|| input(format!("--iface '{s}': no such interface")))
}

pub(super) fn parse_scopes(s: &str) -> Result<ScopeList, Fail> {
    ScopeList::parse(s).map_err(|e| {
        input(format!(
            "bad scope list '{s}' ({e}): want comma-separated scope names without ( ) , \\ ! < = > ~ ; * + (escape them as \\XX)"
        ))
    })
}

pub(super) fn parse_service_type(s: &str) -> Result<ServiceType, Fail> {
    ServiceType::parse(s).map_err(|_| {
        input(format!(
            "bad service type '{s}': want e.g. service:printer or service:printer:lpr (no white space or reserved characters)"
        ))
    })
}

/// A service URL as an SA may register it: a scheme (`service:TYPE://` for
/// service URLs, RFC 2609), no white space or control characters.
pub(super) fn parse_url(url: &str) -> Result<SlpString, Fail> {
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

pub(super) fn parse_attrs(s: &str) -> Result<AttrList, Fail> {
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

pub(super) fn parse_tags(s: &str) -> Result<TagList, Fail> {
    TagList::parse(s).map_err(|_| {
        input(format!(
            "bad tag list '{s}': want comma-separated attribute tags, `*` wildcards allowed"
        ))
    })
}

pub(super) fn parse_predicate(s: &str) -> Result<Predicate, Fail> {
    Predicate::parse(s).map_err(|_| {
        input(format!(
            "bad predicate '{s}': want an LDAPv3 search filter such as (a=1), (&(a>=2)(b=x*)), (!(c=*))"
        ))
    })
}
