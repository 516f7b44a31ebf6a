//! The host role (placeholder, being written).
