//! Simulated segments (placeholder, being written).
