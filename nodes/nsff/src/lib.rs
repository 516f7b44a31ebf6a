//! The nsff role (being written).

#![forbid(unsafe_code)]
#![warn(missing_docs)]
