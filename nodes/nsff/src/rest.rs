//! Local SF registration over REST (SPEC §1.4, RFC 8677 registration
//! option 1) on the nSFF's SF-facing port (`sf_port`), TCP `sf_rest_port`
//! (8080).
//!
//! | request | answer |
//! |---|---|
//! | `POST /sf {"fqdn","addr","port"[,"tls_port"]}` | 201 added, 200 the same SF again, 400 bad field, 409 conflict, 507 `max_sfs` reached |
//! | `DELETE /sf/<fqdn>` | 204 removed (deregistered at the NR), 404 unknown, 409 a config SF |
//! | `GET /sf` | 200 every local SF (config and REST) |
//! | `GET /sf/<fqdn>` | 200 that SF, 404 unknown |
//! | other methods on `/sf...` / other paths | 405 / 404 |
//! | head over 4 KiB / body over 1 KiB | 431 / 413 (and the connection closes) |
//!
//! Answers are JSON; a refusal is `{"error": "<reason>"}` plus `"field"`
//! when one field of the body is to blame.
//!
//! [`parse`] turns a request into an [`Op`] (pure, tested below);
//! [`SfRest`] is the stack's REST server ([`svcroute_stack::rest`], the
//! NR's too) with the nSFF's bounds and counter names.

use std::net::IpAddr;

use serde_json::{json, Map, Value};
use smoltcp::iface::SocketSet;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpListenEndpoint;
use svcroute_stack::http::{Limits, ReceivedRequest};
use svcroute_stack::rest::{self, Count, Server};
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::nr::Fqdn;

/// Largest request head, octets (beyond: 431).
pub const MAX_HEAD: usize = 4 * 1024;
/// Largest request body, octets (beyond: 413).
pub const MAX_BODY: u64 = 1024;
/// Connections at once (beyond: refused with a reset, counted
/// `nsff.rest_connection_limit`).
pub const MAX_CONNECTIONS: usize = 16;
const LISTENERS: usize = 2;
const RX: usize = 4 * 1024;
const TX: usize = 16 * 1024;
const IDLE: Duration = Duration::from_secs(30);

/// A local SF to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSf {
    /// Its name.
    pub fqdn: Fqdn,
    /// Its address (over `sf_port`).
    pub addr: IpAddr,
    /// Its HTTP port (default 80).
    pub port: u16,
    /// Its TLS port (default 443).
    pub tls_port: u16,
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `POST /sf`.
    Add(NewSf),
    /// `DELETE /sf/<fqdn>`.
    Remove(Fqdn),
    /// `GET /sf`.
    List,
    /// `GET /sf/<fqdn>`.
    Show(Fqdn),
}

/// A refused request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestError {
    /// HTTP status.
    pub status: u16,
    /// The body field to blame, if one is.
    pub field: Option<&'static str>,
    /// Why.
    pub reason: String,
}

impl RestError {
    /// A refusal with `status`.
    pub fn new(status: u16, reason: impl Into<String>) -> Self {
        Self {
            status,
            field: None,
            reason: reason.into(),
        }
    }

    fn field(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            status: 400,
            field: Some(field),
            reason: reason.into(),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        match self.field {
            Some(f) => json!({ "error": self.reason, "field": f }),
            None => json!({ "error": self.reason }),
        }
    }

    /// The counter.
    pub fn counter(&self) -> &'static str {
        match self.status {
            400 => "nsff.rest_bad_request",
            404 => "nsff.rest_not_found",
            405 => "nsff.rest_method_not_allowed",
            409 => "nsff.rest_conflict",
            507 => "nsff.rest_table_full",
            500 => "nsff.rest_not_saved",
            _ => "nsff.rest_other_error",
        }
    }
}

/// What `req` asks for.
pub fn parse(method: &str, target: &str, body: &[u8]) -> Result<Op, RestError> {
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("POST", "/sf") => parse_new(body).map(Op::Add),
        ("GET", "/sf" | "/sf/") => Ok(Op::List),
        (m, p) if p.starts_with("/sf/") => {
            let name = &p["/sf/".len()..];
            let fqdn = Fqdn::new(&name.trim_end_matches('.').to_ascii_lowercase())
                .map_err(|_| RestError::new(404, format!("{name:?} is not a host name")))?;
            match m {
                "DELETE" => Ok(Op::Remove(fqdn)),
                "GET" => Ok(Op::Show(fqdn)),
                _ => Err(RestError::new(405, "use GET or DELETE /sf/<fqdn>")),
            }
        }
        (_, "/sf") => Err(RestError::new(405, "use GET or POST /sf")),
        _ => Err(RestError::new(
            404,
            "no such resource; try POST /sf, GET /sf, DELETE /sf/<fqdn>",
        )),
    }
}

fn parse_new(body: &[u8]) -> Result<NewSf, RestError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| RestError::new(400, format!("body is not JSON: {e}")))?;
    let Value::Object(m) = v else {
        return Err(RestError::new(
            400,
            "body must be a JSON object {\"fqdn\", \"addr\", \"port\"}",
        ));
    };
    for k in m.keys() {
        if !["fqdn", "addr", "port", "tls_port"].contains(&k.as_str()) {
            return Err(RestError {
                status: 400,
                field: None,
                reason: format!("unknown field {k:?} (fqdn, addr, port, tls_port)"),
            });
        }
    }
    let fqdn = match m.get("fqdn") {
        None => return Err(RestError::field("fqdn", "fqdn is missing")),
        Some(Value::String(s)) => Fqdn::new(&s.trim_end_matches('.').to_ascii_lowercase())
            .map_err(|_| RestError::field("fqdn", format!("fqdn {s:?} is not a host name")))?,
        Some(_) => return Err(RestError::field("fqdn", "fqdn must be a string")),
    };
    let addr = match m.get("addr") {
        None => return Err(RestError::field("addr", "addr is missing")),
        Some(Value::String(s)) => s.parse::<IpAddr>().map_err(|_| {
            RestError::field("addr", format!("addr {s:?} is not an IPv4 or IPv6 address"))
        })?,
        Some(_) => return Err(RestError::field("addr", "addr must be a string")),
    };
    if addr.is_unspecified() || addr.is_multicast() || addr.is_loopback() {
        return Err(RestError::field(
            "addr",
            format!("addr {addr} is not a unicast address"),
        ));
    }
    Ok(NewSf {
        fqdn,
        addr,
        port: port_field(&m, "port", 80)?,
        tls_port: port_field(&m, "tls_port", 443)?,
    })
}

fn port_field(m: &Map<String, Value>, key: &'static str, default: u16) -> Result<u16, RestError> {
    match m.get(key) {
        None => Ok(default),
        Some(v) => v
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .filter(|&p| p != 0)
            .ok_or_else(|| RestError::field(key, format!("{key} must be a number 1..=65535"))),
    }
}

/// The REST server on one port's stack: the stack's
/// [`svcroute_stack::rest::Server`] with the nSFF's bounds and names.
#[derive(Debug)]
pub struct SfRest {
    server: Server,
}

impl SfRest {
    /// A server for TCP `port` (any of the stack's addresses).
    pub fn new(port: u16) -> Self {
        Self {
            server: Server::new(rest::Config {
                endpoint: IpListenEndpoint { addr: None, port },
                listeners: LISTENERS,
                max_connections: MAX_CONNECTIONS,
                rx_buffer: RX,
                tx_buffer: TX,
                limits: Limits {
                    max_head_bytes: MAX_HEAD,
                    max_body_bytes: MAX_BODY,
                    ..Limits::default()
                },
                idle: IDLE,
                server: "svcroute-nsff",
                names: rest::Names {
                    connections: "nsff.rest_connections",
                    connection_limit: "nsff.rest_connection_limit",
                    requests: "nsff.rest_requests",
                    body_too_large: Count::Bump("nsff.rest_body_too_large"),
                    head_too_large: Count::Bump("nsff.rest_head_too_large"),
                    malformed: Count::Bump("nsff.rest_malformed"),
                    respond_failed: None,
                },
            }),
        }
    }

    /// Note a frame received on the port (SYNs arm more listeners).
    pub fn note_frame(&mut self, frame: &[u8]) {
        self.server.note_frame(frame);
    }

    /// Accept, serve and reap connections; `apply` answers each parsed
    /// operation. Returns whether anything happened.
    pub fn poll(
        &mut self,
        now: Instant,
        sockets: &mut SocketSet<'static>,
        stats: &mut Counters,
        mut apply: impl FnMut(Op, &mut Counters) -> Result<(u16, Value), RestError>,
    ) -> bool {
        self.server.poll(now, sockets, stats, |req, stats| {
            answer(req, stats, &mut apply)
        })
    }

    /// When idle connections must next be looked at.
    pub fn poll_at(&self) -> Option<Instant> {
        self.server.poll_at()
    }
}

fn answer(
    req: &ReceivedRequest,
    stats: &mut Counters,
    apply: &mut impl FnMut(Op, &mut Counters) -> Result<(u16, Value), RestError>,
) -> (u16, Value) {
    let r = parse(&req.head.method, &req.head.target, &req.body).and_then(|op| apply(op, stats));
    match r {
        Ok(x) => x,
        Err(e) => {
            stats.bump(e.counter());
            log::debug!(
                "nsff: REST {} {}: {}",
                req.head.method,
                req.head.target,
                e.reason
            );
            (e.status, e.body())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fqdn(s: &str) -> Fqdn {
        Fqdn::new(s).unwrap()
    }

    #[track_caller]
    fn refused(method: &str, target: &str, body: &str) -> RestError {
        parse(method, target, body.as_bytes()).unwrap_err()
    }

    #[test]
    fn operations() {
        let add = parse(
            "POST",
            "/sf",
            br#"{"fqdn": "WWW.Kern.example.", "addr": "10.0.3.20", "port": 8000}"#,
        );
        assert_eq!(
            add,
            Ok(Op::Add(NewSf {
                fqdn: fqdn("www.kern.example"),
                addr: "10.0.3.20".parse().unwrap(),
                port: 8000,
                tls_port: 443,
            }))
        );
        let add = parse(
            "POST",
            "/sf?x=1",
            br#"{"fqdn": "a.example", "addr": "fd00:3::20", "tls_port": 8443}"#,
        )
        .unwrap();
        let Op::Add(sf) = add else { panic!() };
        assert_eq!((sf.port, sf.tls_port), (80, 8443));
        assert_eq!(parse("GET", "/sf", b""), Ok(Op::List));
        assert_eq!(parse("GET", "/sf/", b""), Ok(Op::List));
        assert_eq!(
            parse("GET", "/sf/A.example", b""),
            Ok(Op::Show(fqdn("a.example")))
        );
        assert_eq!(
            parse("DELETE", "/sf/a.example", b""),
            Ok(Op::Remove(fqdn("a.example")))
        );
    }

    #[test]
    fn refusals_name_the_field() {
        let f = |body: &str| {
            let e = refused("POST", "/sf", body);
            assert_eq!(e.status, 400, "{e:?}");
            (e.field, e.reason)
        };
        assert_eq!(f(r#"{"addr": "10.0.3.2"}"#).0, Some("fqdn"));
        assert_eq!(f(r#"{"fqdn": 5, "addr": "10.0.3.2"}"#).0, Some("fqdn"));
        assert_eq!(
            f(r#"{"fqdn": "bad name", "addr": "10.0.3.2"}"#).0,
            Some("fqdn")
        );
        assert_eq!(f(r#"{"fqdn": "a.example"}"#).0, Some("addr"));
        assert_eq!(
            f(r#"{"fqdn": "a.example", "addr": "10.0.3"}"#).0,
            Some("addr")
        );
        assert_eq!(
            f(r#"{"fqdn": "a.example", "addr": "0.0.0.0"}"#).0,
            Some("addr")
        );
        assert_eq!(
            f(r#"{"fqdn": "a.example", "addr": "ff02::1"}"#).0,
            Some("addr")
        );
        assert_eq!(f(r#"{"fqdn": "a.example", "addr": 10}"#).0, Some("addr"));
        assert_eq!(
            f(r#"{"fqdn": "a.example", "addr": "10.0.3.2", "port": 0}"#).0,
            Some("port")
        );
        assert_eq!(
            f(r#"{"fqdn": "a.example", "addr": "10.0.3.2", "port": 65536}"#).0,
            Some("port")
        );
        assert_eq!(
            f(r#"{"fqdn": "a.example", "addr": "10.0.3.2", "port": "80"}"#).0,
            Some("port")
        );
        assert_eq!(
            f(r#"{"fqdn": "a.example", "addr": "10.0.3.2", "tls_port": -1}"#).0,
            Some("tls_port")
        );
        let (field, why) = f(r#"{"fqdn": "a.example", "addr": "10.0.3.2", "prot": 80}"#);
        assert_eq!(field, None);
        assert!(why.contains("\"prot\""), "{why}");
        assert!(f("not json").1.starts_with("body is not JSON"));
        assert!(f("[1]").1.starts_with("body must be a JSON object"));
        let e = refused("POST", "/sf", r#"{"addr": "10.0.3.2"}"#);
        assert_eq!(
            e.body(),
            json!({"error": "fqdn is missing", "field": "fqdn"})
        );
        assert_eq!(e.counter(), "nsff.rest_bad_request");
        assert_eq!(refused("PUT", "/sf", "").status, 405);
        assert_eq!(refused("POST", "/sf/a.example", "").status, 405);
        assert_eq!(refused("GET", "/other", "").status, 404);
        assert_eq!(refused("DELETE", "/sf/bad name", "").status, 404);
    }
}
