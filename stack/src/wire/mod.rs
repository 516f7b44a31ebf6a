//! Packet formats, one module per protocol, in smoltcp's style (STYLE.md 1–3):
//! a zero-copy `Packet<T: AsRef<[u8]>>` view with `new_checked`, field
//! accessors and setters, and a `Repr` with `parse`, `buffer_len` and `emit`.

use core::fmt;

/// An open enum over an integer type (every open code point of our wire
/// formats): named values, and `Unknown(n)` for the
/// rest, with `From` both ways (after smoltcp's `enum_with_unknown!`).
macro_rules! open_enum {
    (
        $(#[$m:meta])*
        pub enum $name:ident: $ty:ty {
            $( $(#[$vm:meta])* $var:ident = $val:literal, )+
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $( $(#[$vm])* $var, )+
            /// Any other value. Construct through `From` so that named values
            /// map to their variant.
            Unknown($ty),
        }

        impl From<$ty> for $name {
            fn from(v: $ty) -> Self {
                match v {
                    $( $val => Self::$var, )+
                    other => Self::Unknown(other),
                }
            }
        }

        impl From<$name> for $ty {
            fn from(v: $name) -> Self {
                match v {
                    $( $name::$var => $val, )+
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}

pub mod appmetrics;
pub mod auth;
pub mod checksum;
pub mod gff;
pub mod gre;
pub mod igp;
pub mod ipv6opt;
pub mod nr;
pub mod nsff;
pub mod nsh;
pub mod rosa;
pub mod slp;
pub mod sticky;
pub mod vxlan_gpe;

/// A packet could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the format requires.
    Truncated,
    /// A length or count field disagrees with the buffer or the format.
    BadLength,
    /// A field holds a value the format does not allow.
    Malformed,
    /// The value does not fit the format (e.g. option data over 255 bytes).
    TooLong,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Truncated => "truncated packet",
            Self::BadLength => "inconsistent length field",
            Self::Malformed => "malformed field",
            Self::TooLong => "value too long for the format",
        })
    }
}

impl std::error::Error for Error {}

/// Result of wire operations.
pub type Result<T> = core::result::Result<T, Error>;
