//! Why a command failed, and its exit status: 0 success, 1 other failure
//! (socket, broken reply), 2 bad input, 3 no reply in time, 4 an agent
//! answered with an SLP error code.

use std::fmt;

use svcroute_stack::wire::slp::ErrorCode;

/// Why a command failed; each kind has its exit status.
#[derive(Debug)]
pub(super) enum Fail {
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
    pub(super) fn exit_code(&self) -> u8 {
        match self {
            Self::Other(_) => 1,
            Self::Input(_) => 2,
            Self::NoReply(_) => 3,
            Self::Refused(_) => 4,
        }
    }

    pub(super) fn name(&self) -> &'static str {
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

pub(super) fn input(s: impl Into<String>) -> Fail {
    Fail::Input(s.into())
}

/// RFC 2608 §7's name of an error code.
pub(super) fn code_name(code: ErrorCode) -> &'static str {
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
pub(super) fn code_text(code: ErrorCode) -> String {
    format!("{} ({})", code_name(code), u16::from(code))
}

/// Which failure decides the exit status: SLP error > no reply > other.
pub(super) fn rank(f: &Fail) -> u8 {
    match f {
        Fail::Refused(_) => 3,
        Fail::NoReply(_) => 2,
        Fail::Other(_) | Fail::Input(_) => 1,
    }
}
