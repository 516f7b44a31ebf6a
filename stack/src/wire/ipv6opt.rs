//! IPv6 options (placeholder, being written).
