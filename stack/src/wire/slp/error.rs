//! SLP error codes (RFC 2608 §7) and the one parse-error enum whose every
//! variant maps to the code a DA or SA answers with (STYLE.md 11).

use core::fmt;

open_enum! {
    /// An SLP error code (RFC 2608 §7), an open enum: values this module does
    /// not name survive a round trip as [`ErrorCode::Unknown`].
    pub enum ErrorCode: u16 {
        /// 0: success.
        Ok = 0x0000,
        /// 1: data exists for the type and scope, but not in the requested language.
        LanguageNotSupported = 0x0001,
        /// 2: the message fails to obey SLP syntax.
        ParseError = 0x0002,
        /// 3: the SrvReg has problems (e.g. an omitted language tag, mixed value types).
        InvalidRegistration = 0x0003,
        /// 4: no scope of the message is supported.
        ScopeNotSupported = 0x0004,
        /// 5: a request named an unsupported SLP SPI.
        AuthenticationUnknown = 0x0005,
        /// 6: URL and attribute authentication was expected and absent.
        AuthenticationAbsent = 0x0006,
        /// 7: an authentication block did not verify.
        AuthenticationFailed = 0x0007,
        /// 9: unsupported version number in the message header.
        VerNotSupported = 0x0009,
        /// 10: the DA or SA is too sick to respond.
        InternalError = 0x000a,
        /// 11: retry later, with exponential back-off.
        DaBusyNow = 0x000b,
        /// 12: an unknown extension from the mandatory range (RFC 2608 §9.1).
        OptionNotUnderstood = 0x000c,
        /// 13: a SrvReg without FRESH for an unknown service, or with another service type.
        InvalidUpdate = 0x000d,
        /// 14: the message type is not supported.
        MsgNotSupported = 0x000e,
        /// 15: a refresh came sooner than the DA's `min-refresh-interval`.
        RefreshRejected = 0x000f,
    }
}

// `open_enum!` owns the derives, so `#[default]` cannot be used.
#[allow(clippy::derivable_impls)]
impl Default for ErrorCode {
    fn default() -> Self {
        Self::Ok
    }
}

impl ErrorCode {
    /// Whether this is [`ErrorCode::Ok`].
    pub const fn is_ok(self) -> bool {
        matches!(self, Self::Ok)
    }
}

/// Which string field failed its grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syntax {
    /// A `<scope-list>` (RFC 2608 §6.4.1) or SLP SPI list.
    ScopeList,
    /// A `<service-type>` (RFC 2608 §4.1), including an omitted one in a SrvRqst.
    ServiceType,
    /// An `<attr-list>` (RFC 2608 §5).
    AttrList,
    /// A `<tag-list>` (RFC 2608 §9.4).
    TagList,
    /// A predicate: an LDAPv3 search filter (RFC 2254, RFC 2608 §8.1).
    Predicate,
    /// A naming authority (RFC 2608 §10.1).
    NamingAuthority,
}

/// Why a SrvReg is refused with `INVALID_REGISTRATION` (RFC 2608 §5, §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Registration {
    /// The language tag is empty.
    NoLanguageTag,
    /// One attribute has values of different types (`x=4,true`).
    MixedTypes,
}

/// Why a received SLP message was refused. [`ErrorCode::from`] gives the
/// error code a DA or SA answers a unicast request with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParseError {
    /// A field or a length runs past the end of its buffer.
    Truncated,
    /// Octets are left after a structure whose extent is fixed.
    TrailingBytes,
    /// A length field is smaller than the fixed part of what it frames.
    BadLength,
    /// The header's Length is not the length of the datagram or frame.
    Length {
        /// The Length field.
        declared: u32,
        /// Octets actually received.
        actual: usize,
    },
    /// The version is not 2.
    Version(u8),
    /// An unknown function ID.
    Function(u8),
    /// Reserved header flag bits are set (the value holds them).
    ReservedFlags(u16),
    /// The language tag is not `1*8ALPHA *("-" 1*8ALNUM)`.
    LanguageTag,
    /// A string is not UTF-8.
    Utf8,
    /// A string field does not follow its grammar.
    Syntax(Syntax),
    /// A SrvReg that is well-formed but not a valid registration.
    InvalidRegistration(Registration),
    /// An extension offset points backwards, into the header, or past the end.
    ExtensionOffset,
    /// An extension from the mandatory range 0x4000–0x7FFF this module does not know.
    OptionNotUnderstood(u16),
}

impl From<ParseError> for ErrorCode {
    /// The code a DA or SA answers with (RFC 2608 §7, §9.1). Parsing never
    /// yields `LANGUAGE_NOT_SUPPORTED`: that is about stored data, which only
    /// a role knows.
    fn from(e: ParseError) -> Self {
        match e {
            ParseError::Truncated
            | ParseError::TrailingBytes
            | ParseError::BadLength
            | ParseError::Length { .. }
            | ParseError::ReservedFlags(_)
            | ParseError::LanguageTag
            | ParseError::Utf8
            | ParseError::Syntax(_)
            | ParseError::ExtensionOffset => Self::ParseError,
            ParseError::Version(_) => Self::VerNotSupported,
            ParseError::Function(_) => Self::MsgNotSupported,
            ParseError::InvalidRegistration(_) => Self::InvalidRegistration,
            ParseError::OptionNotUnderstood(_) => Self::OptionNotUnderstood,
        }
    }
}

impl ParseError {
    /// The code to answer with; the same as [`ErrorCode::from`].
    pub fn error_code(self) -> ErrorCode {
        self.into()
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("truncated SLP message"),
            Self::TrailingBytes => f.write_str("trailing bytes in SLP message"),
            Self::BadLength => f.write_str("SLP length field too small"),
            Self::Length { declared, actual } => write!(
                f,
                "SLP length field says {declared} octets, message has {actual}"
            ),
            Self::Version(v) => write!(f, "SLP version {v} not supported"),
            Self::Function(id) => write!(f, "unknown SLP function ID {id}"),
            Self::ReservedFlags(bits) => write!(f, "reserved SLP flag bits {bits:#06x} set"),
            Self::LanguageTag => f.write_str("malformed SLP language tag"),
            Self::Utf8 => f.write_str("SLP string is not UTF-8"),
            Self::Syntax(what) => write!(f, "malformed SLP {what:?}"),
            Self::InvalidRegistration(why) => write!(f, "invalid SLP registration: {why:?}"),
            Self::ExtensionOffset => f.write_str("bad SLP extension offset"),
            Self::OptionNotUnderstood(id) => {
                write!(f, "mandatory SLP extension {id:#06x} not understood")
            }
        }
    }
}

impl std::error::Error for ParseError {}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn error_code_values() {
        for v in 0..=0x20_u16 {
            assert_eq!(u16::from(ErrorCode::from(v)), v);
        }
        assert_eq!(ErrorCode::from(8), ErrorCode::Unknown(8));
        assert_eq!(ErrorCode::from(12), ErrorCode::OptionNotUnderstood);
        assert_eq!(u16::from(ErrorCode::RefreshRejected), 15);
    }

    #[test]
    fn parse_error_to_code() {
        use ParseError as P;
        let table = [
            (P::Truncated, ErrorCode::ParseError),
            (P::TrailingBytes, ErrorCode::ParseError),
            (P::Version(1), ErrorCode::VerNotSupported),
            (P::Function(13), ErrorCode::MsgNotSupported),
            (
                P::OptionNotUnderstood(0x4001),
                ErrorCode::OptionNotUnderstood,
            ),
            (
                P::InvalidRegistration(Registration::MixedTypes),
                ErrorCode::InvalidRegistration,
            ),
            (P::Syntax(Syntax::Predicate), ErrorCode::ParseError),
            (P::LanguageTag, ErrorCode::ParseError),
        ];
        for (e, code) in table {
            assert_eq!(e.error_code(), code, "{e}");
        }
    }
}
