//! Every answer the nSFF gives instead of a service's own, in one place
//! (STYLE.md 11): each way a request or a TLS session can fail maps to
//! exactly one HTTP status (and the body that says why) or one TLS alert.
//! The rooms name the failure; only this file knows what goes on the wire.

use svcroute_stack::http::ProtocolError;

use crate::sfc::{Misdirected, NshHeaderError};
use crate::tls::{self, Alert};

/// Why an HTTP request gets the nSFF's answer instead of its service's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The client's request broke HTTP/1.1 framing or a limit.
    BadRequest(ProtocolError),
    /// More than one `Host` line (RFC 9112 §3.2).
    DuplicateHost,
    /// The `NSH` request header does not parse.
    BadNshHeader(NshHeaderError),
    /// No usable `Host` (or absolute-form authority) to name the service.
    NoHost,
    /// The nNLM row is `http-service` but the request names no service.
    NoHostForRow,
    /// SFC: the request cannot be steered here (RFC 9110 §15.5.20).
    Misdirected(Misdirected),
    /// The name-resolution table is full.
    ResolveRefused,
    /// The NR does not know the name.
    UnknownName,
    /// The NR did not answer.
    NrTimeout,
    /// The NR says this nSFF serves the name, but no local SF does.
    ServedHereUnknown,
    /// The transport's transaction table is full.
    TxnsRefused,
    /// The transaction to the serving nSFF failed.
    TxnLost,
    /// No SF-facing port to reach the SF from.
    NoSfPort,
    /// The stack could not open a connection to the SF.
    SfConnect,
    /// The SF's response broke HTTP/1.1 framing.
    SfBadResponse(ProtocolError),
    /// The SF closed (or never accepted) before its response ended.
    SfClosed,
    /// Egress: no local SF has the name the request came for.
    EgressNoSf,
    /// Egress: the request over the transaction does not parse.
    EgressBadRequest(ProtocolError),
    /// Egress: the transaction ended before a request head.
    EgressEmpty,
}

impl Refusal {
    /// The status and the plain-text reason of the answer.
    pub fn answer(&self) -> (u16, String) {
        match self {
            Self::BadRequest(e) => (e.status(), format!("bad request: {e}")),
            Self::DuplicateHost => (400, "more than one Host header line".into()),
            Self::BadNshHeader(e) => (400, e.to_string()),
            Self::NoHost => (400, "no usable Host header: it names the service".into()),
            Self::NoHostForRow => (
                400,
                "the nNLM row is http-service but the request has no usable Host".into(),
            ),
            Self::Misdirected(m) => (421, m.to_string()),
            Self::ResolveRefused => (503, "too many names being resolved".into()),
            Self::UnknownName => (502, "unknown service name".into()),
            Self::NrTimeout => (504, "name resolver did not answer".into()),
            Self::ServedHereUnknown => (
                502,
                "the name resolves to this nSFF but no local SF serves it".into(),
            ),
            Self::TxnsRefused => (503, "too many transactions".into()),
            Self::TxnLost => (504, "the transaction to the serving nSFF failed".into()),
            Self::NoSfPort => (502, "no port toward the service function".into()),
            Self::SfConnect => (502, "cannot connect to the service function".into()),
            Self::SfBadResponse(e) => (502, format!("bad response from SF: {e}")),
            Self::SfClosed => (502, "service function unreachable or closed".into()),
            Self::EgressNoSf => (502, "no local service function for that name".into()),
            Self::EgressBadRequest(e) => (400, format!("bad request: {e}")),
            Self::EgressEmpty => (400, "empty request".into()),
        }
    }

    /// The complete response: status line, a plain-text body saying why,
    /// and `connection: close`.
    pub fn response(&self) -> Vec<u8> {
        let (status, why) = self.answer();
        error_response(status, &why)
    }
}

/// Why a TLS passthrough session is refused or cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsRefusal {
    /// The first bytes are not a ClientHello we pass through.
    Hello(tls::Refusal),
    /// The connection ended before its ClientHello did.
    Truncated,
    /// The SNI name is unknown (at the NR, or at the egress).
    UnknownName,
    /// The NR says this nSFF serves the name, but no local SF does.
    ServedHereUnknown,
    /// The NR did not answer.
    NrTimeout,
    /// The name-resolution table is full.
    ResolveRefused,
    /// The transport's transaction table is full.
    TxnsRefused,
    /// The connection to the SF's TLS port could not be opened.
    SfConnect,
    /// The SF or the transaction went away mid-session.
    UpstreamLost,
}

impl TlsRefusal {
    /// The fatal alert the client gets (before a close), if any.
    pub fn alert(self) -> Option<Alert> {
        match self {
            Self::Hello(r) => r.alert(),
            Self::Truncated => None,
            Self::UnknownName | Self::ServedHereUnknown => Some(Alert::UnrecognizedName),
            Self::NrTimeout
            | Self::ResolveRefused
            | Self::TxnsRefused
            | Self::SfConnect
            | Self::UpstreamLost => Some(Alert::InternalError),
        }
    }
}

/// A complete error response with a plain-text body saying why.
pub fn error_response(status: u16, why: &str) -> Vec<u8> {
    let reason = match status {
        400 => "Bad Request",
        413 => "Content Too Large",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let body = format!("nsff: {why}\n");
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
