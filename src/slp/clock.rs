//! Clock and randomness (a driver: it reads the clock).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds from 1900-01-01 to 1970-01-01 (NTP era 0).
pub(super) const SECS_1900_TO_1970: u64 = 2_208_988_800;

#[allow(clippy::disallowed_methods)] // driver: the MSA's version timestamp is wall-clock time
pub(super) fn now_since_1970() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// µs since 1900-01-01 UTC (RFC 3528 §4.2, SPEC §4).
pub(super) fn micros_since_1900(since_1970: Duration) -> u64 {
    let us = u64::try_from(since_1970.as_micros()).unwrap_or(u64::MAX);
    us.saturating_add(SECS_1900_TO_1970 * 1_000_000)
}

/// A random-enough XID (RFC 2608 §6.3: "SHOULD be randomly chosen").
pub(super) fn random_xid() -> u16 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(now_since_1970().as_nanos());
    h.write_u32(std::process::id());
    // Truncation intended: any 16 bits of the hash.
    (h.finish() & 0xffff) as u16
}

/// `YYYY-MM-DDTHH:MM:SSZ` of seconds since 1970 (H. Hinnant's civil_from_days).
pub(super) fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}
