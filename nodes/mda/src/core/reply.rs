//! How big a reply may be: the list answers (URL entries, attributes,
//! service types) cut to whole items, and the reply-byte budget per
//! destination address that bounds reflection over UDP (docs/mda.md,
//! "Reply sizes").
//!
//! ```text
//!   answer ── format: ≤ 65,535 URL entries, lists ≤ 65,535 octets ──► cut + OVERFLOW (TCP too)
//!          ── UDP:   ≤ the path's UDP payload: whole
//!                    larger: whole items to the path payload, and past
//!                    libslp's 1,400 octets, OVERFLOW (a UA moves to TCP)
//!          ── above request × amplification_factor: charged to the
//!             destination's budget; without budget, cut to that, OVERFLOW
//! ```

use std::collections::BTreeMap;

use smoltcp::time::Instant;
use smoltcp::wire::IpAddress;
use svcroute_stack::wire::slp::{
    AttrList, AttrRply, Attribute, Body, ErrorCode, ServiceType, ServiceTypeList, SrvRply, UrlEntry,
};

use super::list;

/// Largest list a length field of 16 bits frames (URL count, attribute
/// list and service type list octets).
const FORMAT_MAX: usize = 0xffff;

/// Largest UDP reply we cut to when whole items below the path payload do
/// not reach past libslp's MTU: IP fragments, within smoltcp's
/// fragmentation buffer.
pub(super) const MAX_CUT: usize = 8192;

/// A list answer to a SrvRqst, AttrRqst or SrvTypeRqst, before it is cut
/// to size.
#[derive(Debug)]
pub(super) enum Answer {
    /// URL entries of a SrvRply.
    Urls(Vec<UrlEntry>),
    /// Attributes of an AttrRply.
    Attrs(Vec<Attribute>),
    /// Service types of a SrvTypeRply.
    Types(Vec<ServiceType>),
}

impl Answer {
    /// Items in the whole answer.
    pub(super) fn len(&self) -> usize {
        match self {
            Self::Urls(v) => v.len(),
            Self::Attrs(v) => v.len(),
            Self::Types(v) => v.len(),
        }
    }

    /// Body octets without any item (error code, count or length, and the
    /// AttrRply's auth block count).
    pub(super) fn fixed_len(&self) -> usize {
        match self {
            Self::Urls(_) | Self::Types(_) => 4,
            Self::Attrs(_) => 5,
        }
    }

    /// Octets each item adds, in order (list items after the first bring
    /// their comma).
    pub(super) fn item_lens(&self) -> Vec<usize> {
        let comma = |i: usize| usize::from(i > 0);
        match self {
            Self::Urls(v) => v.iter().map(UrlEntry::buffer_len).collect(),
            Self::Attrs(v) => v
                .iter()
                .enumerate()
                .map(|(i, a)| a.as_raw().len() + comma(i))
                .collect(),
            Self::Types(v) => v
                .iter()
                .enumerate()
                .map(|(i, t)| t.as_str().len() + comma(i))
                .collect(),
        }
    }

    /// The most leading items the wire format carries.
    pub(super) fn format_max(&self, lens: &[usize]) -> usize {
        match self {
            Self::Urls(v) => v.len().min(FORMAT_MAX),
            Self::Attrs(_) | Self::Types(_) => {
                let mut total = 0;
                lens.iter()
                    .take_while(|l| {
                        total += *l;
                        total <= FORMAT_MAX
                    })
                    .count()
            }
        }
    }

    /// The reply body of the first `n` items (`n` within
    /// [`Answer::format_max`]).
    pub(super) fn body(self, n: usize) -> Body {
        match self {
            Self::Urls(mut v) => {
                v.truncate(n);
                Body::SrvRply(SrvRply {
                    error: ErrorCode::Ok,
                    entries: list(v),
                })
            }
            Self::Attrs(mut v) => {
                v.truncate(n);
                Body::AttrRply(AttrRply {
                    error: ErrorCode::Ok,
                    attrs: AttrList::new(v).unwrap_or_default(),
                    auths: list(Vec::new()),
                })
            }
            Self::Types(mut v) => {
                v.truncate(n);
                Body::SrvTypeRply(svcroute_stack::wire::slp::SrvTypeRply {
                    error: ErrorCode::Ok,
                    types: ServiceTypeList::new(v).unwrap_or_default(),
                })
            }
        }
    }
}

/// How many leading items go into a UDP reply of an answer whose first
/// `k` items make `total(k)` octets: all `n` if they fit `payload`; else
/// whole items up to `payload`, and if that is no more than `libslp_mtu`,
/// more whole items until it is past it (so that a client that moves to
/// TCP only for replies longer than its MTU does), within [`MAX_CUT`].
pub(super) fn udp_items(
    total: impl Fn(usize) -> usize,
    n: usize,
    payload: usize,
    libslp_mtu: usize,
) -> usize {
    if total(n) <= payload {
        return n;
    }
    let mut k = fit(&total, n, payload);
    while total(k) <= libslp_mtu && k < n && total(k + 1) <= MAX_CUT.max(payload) {
        k += 1;
    }
    k
}

/// The most leading items (of `n`) within `limit` octets.
pub(super) fn fit(total: impl Fn(usize) -> usize, n: usize, limit: usize) -> usize {
    // total is increasing: binary search the last k with total(k) <= limit.
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if total(mid) <= limit {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// The reply-byte budget of one destination address: a token bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Octets left, in millionths (refilled per µs at `rate` octets/s).
    micro: u64,
    at: Instant,
}

/// Reply-byte budgets per destination address: UDP replies above the
/// request's length × the amplification factor are charged to their
/// destination, which may receive at most `burst` octets of them at once
/// and `rate` octets per second after. At most `max_addrs` addresses are
/// tracked; while the table is full of addresses that used their budget, a
/// new address has none.
#[derive(Debug)]
pub(super) struct Budgets {
    buckets: BTreeMap<(u8, [u8; 16]), Bucket>,
    burst: u64,
    rate: u64,
    max_addrs: usize,
}

impl Budgets {
    pub(super) fn new(burst: usize, rate: usize, max_addrs: usize) -> Self {
        Self {
            buckets: BTreeMap::new(),
            burst: burst as u64,
            rate: rate as u64,
            max_addrs,
        }
    }

    /// Charge `n` octets to `to` at `now`: whether its budget had them.
    pub(super) fn take(&mut self, now: Instant, to: IpAddress, n: usize) -> bool {
        let key = super::addr_key(to);
        let full = self.burst.saturating_mul(1_000_000);
        if !self.buckets.contains_key(&key) {
            if self.buckets.len() >= self.max_addrs {
                self.forget_full(now);
            }
            if self.buckets.len() >= self.max_addrs {
                return false;
            }
            self.buckets.insert(
                key,
                Bucket {
                    micro: full,
                    at: now,
                },
            );
        }
        let (rate, b) = (self.rate, self.buckets.get_mut(&key));
        let Some(b) = b else {
            return false;
        };
        refill(b, now, rate, full);
        let want = (n as u64).saturating_mul(1_000_000);
        if b.micro < want {
            return false;
        }
        b.micro -= want;
        true
    }

    /// Addresses tracked.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Drop the buckets that have refilled: a fresh one is the same.
    fn forget_full(&mut self, now: Instant) {
        let (rate, full) = (self.rate, self.burst.saturating_mul(1_000_000));
        self.buckets.retain(|_, b| {
            refill(b, now, rate, full);
            b.micro < full
        });
    }
}

fn refill(b: &mut Bucket, now: Instant, rate: u64, full: u64) {
    if now > b.at {
        let us = (now - b.at).total_micros();
        b.micro = b.micro.saturating_add(us.saturating_mul(rate)).min(full);
        b.at = now;
    }
}

#[cfg(test)]
mod test {
    use smoltcp::wire::Ipv4Address;

    use super::*;

    #[test]
    fn udp_items_fit_the_path_and_pass_libslps_mtu() {
        // 20 octets of header, items of 30: 47 items = 1430 ≤ 1452.
        let total = |k: usize| 20 + 30 * k;
        assert_eq!(udp_items(total, 40, 1452, 1400), 40, "all fit");
        assert_eq!(udp_items(total, 100, 1452, 1400), 47);
        // Items of 700: two (1420) fit the path and pass 1400.
        let big = |k: usize| 20 + 700 * k;
        assert_eq!(udp_items(big, 5, 1452, 1400), 2);
        // Items of 1000: one fits the path (1020) but not past 1400, so a
        // second goes in (2020, fragments) for libslp to move to TCP.
        let huge = |k: usize| 20 + 1000 * k;
        assert_eq!(udp_items(huge, 5, 1452, 1400), 2);
        // An item larger than MAX_CUT cannot be sent: none.
        let giant = |k: usize| 20 + 9000 * k;
        assert_eq!(udp_items(giant, 3, 1452, 1400), 0);
        assert_eq!(fit(total, 100, 19), 0);
    }

    #[test]
    fn budgets_bound_each_destination_and_refill() {
        let a = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1));
        let b = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 2));
        let c = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 3));
        let t0 = Instant::from_secs(10);
        let mut g = Budgets::new(3000, 1000, 2);
        assert!(g.take(t0, a, 1400) && g.take(t0, a, 1400));
        assert!(!g.take(t0, a, 1400), "a's burst is spent");
        assert!(g.take(t0, b, 1400), "b has its own");
        assert!(!g.take(t0, c, 1), "the table is full of spent budgets");
        let t1 = t0 + smoltcp::time::Duration::from_secs(2);
        assert!(g.take(t1, a, 1400), "2 s refill 2000 octets");
        assert!(!g.take(t1, a, 1400));
        let t9 = t0 + smoltcp::time::Duration::from_secs(9);
        assert!(g.take(t9, c, 1400), "refilled buckets are forgotten for c");
        assert!(g.len() <= 2);
    }
}
