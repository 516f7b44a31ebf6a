//! A [`Link`] wrapper that impairs what a node sends on a port: delay,
//! jitter, reordering, duplication, corruption and a rate limit, switched
//! at run time (`ctl <node> impair PORT ...`). The middleware of STYLE.md 7,
//! after smoltcp's `FaultInjector`, for a kernel without netem.
//!
//! ```text
//!   node ──send──▶ ImpairLink ──(held until due)──▶ PcapLink? ──▶ TAP
//!                     │ corrupt: one bit flipped past the Ethernet header
//!                     │ duplicate: queued twice
//!                     │ reorder PCT: sent at once, passing the delayed ones
//!                     │ delay ± jitter: held (jitter reorders too, as netem)
//!                     └ rate: held until the link is free (serialization)
//! ```
//!
//! The decisions are in [`Impairer`], which takes `now` and a seeded
//! generator (sans-IO, STYLE.md 5); [`ImpairLink`] is the thin device part
//! that reads the clock. Received frames pass untouched: impair the peer's
//! port for the other direction.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Link;

/// At most this many frames are held (netem's default `limit`); more are
/// dropped and counted.
pub const QUEUE_LIMIT: usize = 1000;

/// What a port does to the frames it sends. All zero: nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// Added to every frame, in microseconds.
    pub delay_us: u32,
    /// Uniform ± around the delay, in microseconds (at most the delay).
    pub jitter_us: u32,
    /// Frames sent at once, passing the delayed ones, in hundredths of a
    /// percent (needs a delay).
    pub reorder_bp: u16,
    /// Frames sent twice, in hundredths of a percent.
    pub duplicate_bp: u16,
    /// Frames with one bit flipped, in hundredths of a percent.
    pub corrupt_bp: u16,
    /// Rate limit in kbit/s (0: none).
    pub rate_kbit: u32,
}

impl Shape {
    /// Whether it does nothing.
    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }

    /// Parse `delay MS jitter MS reorder PCT duplicate PCT corrupt PCT rate
    /// MBIT` (any subset, any order; `clear` alone is no shape).
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut s = Self::default();
        if args.len() == 1 && args[0] == "clear" {
            return Ok(s);
        }
        let mut it = args.iter();
        while let Some(k) = it.next() {
            let v = it
                .next()
                .ok_or_else(|| format!("`{k}` needs a value"))?
                .as_str();
            match k.as_str() {
                "delay" => s.delay_us = parse_ms(k, v)?,
                "jitter" => s.jitter_us = parse_ms(k, v)?,
                "reorder" => s.reorder_bp = parse_pct(v).map_err(|e| format!("reorder: {e}"))?,
                "duplicate" => {
                    s.duplicate_bp = parse_pct(v).map_err(|e| format!("duplicate: {e}"))?;
                }
                "corrupt" => s.corrupt_bp = parse_pct(v).map_err(|e| format!("corrupt: {e}"))?,
                "rate" => s.rate_kbit = parse_mbit(v)?,
                other => {
                    return Err(format!(
                        "unknown impairment {other:?} (known: delay, jitter, reorder, \
                         duplicate, corrupt, rate)"
                    ))
                }
            }
        }
        if s.jitter_us > s.delay_us {
            return Err(format!(
                "jitter {} ms is more than the delay {} ms",
                ms(s.jitter_us),
                ms(s.delay_us)
            ));
        }
        if s.reorder_bp > 0 && s.delay_us == 0 {
            return Err(
                "reorder needs a delay (the frames it sends at once pass the delayed ones)".into(),
            );
        }
        Ok(s)
    }

    /// The arguments [`Shape::parse`] reads back into this shape.
    pub fn args(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut kv = |k: &str, val: String| {
            v.push(k.to_owned());
            v.push(val);
        };
        if self.delay_us > 0 {
            kv("delay", ms(self.delay_us));
        }
        if self.jitter_us > 0 {
            kv("jitter", ms(self.jitter_us));
        }
        for (k, bp) in [
            ("reorder", self.reorder_bp),
            ("duplicate", self.duplicate_bp),
            ("corrupt", self.corrupt_bp),
        ] {
            if bp > 0 {
                kv(k, pct(bp));
            }
        }
        if self.rate_kbit > 0 {
            kv("rate", mbit(self.rate_kbit));
        }
        v
    }

    /// `delay 10ms jitter 2ms, duplicate 1%` for people.
    pub fn describe(&self) -> String {
        let mut v = Vec::new();
        if self.delay_us > 0 {
            let mut d = format!("delay {}ms", ms(self.delay_us));
            if self.jitter_us > 0 {
                d.push_str(&format!(" jitter {}ms", ms(self.jitter_us)));
            }
            v.push(d);
        }
        for (k, bp) in [
            ("reorder", self.reorder_bp),
            ("duplicate", self.duplicate_bp),
            ("corrupt", self.corrupt_bp),
        ] {
            if bp > 0 {
                v.push(format!("{k} {}%", pct(bp)));
            }
        }
        if self.rate_kbit > 0 {
            v.push(format!("rate {}mbit", mbit(self.rate_kbit)));
        }
        v.join(", ")
    }
}

/// A percentage `0`..`100` with at most two decimals and an optional `%`,
/// in hundredths of a percent.
pub fn parse_pct(s: &str) -> Result<u16, String> {
    let bad = || format!("{s:?} is not a percentage from 0 to 100 (at most two decimals)");
    let hundredths = parse_fixed(s.trim().trim_end_matches('%'), 2, 3).ok_or_else(bad)?;
    u16::try_from(hundredths)
        .ok()
        .filter(|&b| b <= 10_000)
        .ok_or_else(bad)
}

fn parse_ms(k: &str, s: &str) -> Result<u32, String> {
    let us = parse_fixed(s.trim().trim_end_matches("ms"), 3, 5)
        .filter(|&us| us <= 60_000_000)
        .ok_or_else(|| {
            format!("{k} {s:?} is not milliseconds from 0 to 60000 (at most three decimals)")
        })?;
    // NOTE(unwrap): at most 60_000_000, checked above.
    Ok(u32::try_from(us).unwrap())
}

fn parse_mbit(s: &str) -> Result<u32, String> {
    parse_fixed(s.trim().trim_end_matches("mbit"), 3, 6)
        .and_then(|k| u32::try_from(k).ok())
        .filter(|&k| k > 0)
        .ok_or_else(|| format!("rate {s:?} is not Mbit/s above 0 (at most three decimals)"))
}

/// `12.5` with `decimals` 2 → 1250; `None` unless digits with at most
/// `decimals` after the point and `int_digits` before it.
fn parse_fixed(s: &str, decimals: usize, int_digits: usize) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || int.len() > int_digits || frac.len() > decimals {
        return None;
    }
    if !digits(int) || !digits(frac) {
        return None;
    }
    let scale = 10u64.pow(u32::try_from(decimals).ok()?);
    let frac_scaled: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().ok()? * 10u64.pow(u32::try_from(decimals - frac.len()).ok()?)
    };
    Some(int.parse::<u64>().ok()? * scale + frac_scaled)
}

/// `fixed` with `decimals` decimals, trailing zeros dropped.
fn fixed(v: u64, decimals: u32) -> String {
    let scale = 10u64.pow(decimals);
    let (i, f) = (v / scale, v % scale);
    if f == 0 {
        return i.to_string();
    }
    let f = format!("{f:0w$}", w = decimals as usize);
    format!("{i}.{}", f.trim_end_matches('0'))
}

/// Hundredths of a percent as a percentage (`1250` → `12.5`).
pub fn pct(bp: u16) -> String {
    fixed(u64::from(bp), 2)
}

fn ms(us: u32) -> String {
    fixed(u64::from(us), 3)
}

fn mbit(kbit: u32) -> String {
    fixed(u64::from(kbit), 3)
}

/// The sans-IO core: which frames leave when, given `now`.
#[derive(Debug)]
pub struct Impairer {
    shape: Shape,
    rng: u64,
    /// Held frames by (due time, arrival order).
    held: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>,
    seq: u64,
    /// When the rate-limited link is free again.
    free_at: Option<Instant>,
    stats: ImpairStats,
}

/// What an [`Impairer`] did, as counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImpairStats {
    /// Frames held for the delay.
    pub delayed: u64,
    /// Frames sent at once, passing delayed ones.
    pub reordered: u64,
    /// Frames sent twice.
    pub duplicated: u64,
    /// Frames with a bit flipped.
    pub corrupted: u64,
    /// Frames dropped: [`QUEUE_LIMIT`] frames were held.
    pub queue_full: u64,
}

impl Impairer {
    /// No shape; `seed` seeds the generator.
    pub fn new(seed: u64) -> Self {
        Self {
            shape: Shape::default(),
            rng: seed | 1,
            held: BinaryHeap::new(),
            seq: 0,
            free_at: None,
            stats: ImpairStats::default(),
        }
    }

    /// The shape in force.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Switch to `shape`; frames held so far keep their due times.
    pub fn set_shape(&mut self, shape: Shape) {
        self.shape = shape;
        if shape.rate_kbit == 0 {
            self.free_at = None;
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> ImpairStats {
        self.stats
    }

    /// Whether frames can go straight to the link: no shape, nothing held.
    pub fn is_idle(&self) -> bool {
        self.shape.is_none() && self.held.is_empty()
    }

    /// A frame the node sends at `now`.
    pub fn offer(&mut self, now: Instant, frame: &[u8]) {
        let copies = if self.chance(self.shape.duplicate_bp) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            if self.held.len() >= QUEUE_LIMIT {
                self.stats.queue_full += 1;
                return;
            }
            let mut f = frame.to_vec();
            if f.len() > 14 && self.chance(self.shape.corrupt_bp) {
                let span = (f.len() - 14) as u64;
                // NOTE: `span` > 0; the index is below f.len().
                let i = 14 + (self.next() % span) as usize;
                f[i] ^= 1 << (self.next() % 8);
                self.stats.corrupted += 1;
            }
            let mut due = now;
            if self.shape.delay_us > 0 {
                if self.chance(self.shape.reorder_bp) {
                    self.stats.reordered += 1;
                } else {
                    due += self.delay();
                    self.stats.delayed += 1;
                }
            }
            if self.shape.rate_kbit > 0 {
                let start = self.free_at.map_or(due, |f| f.max(due));
                let bits = (f.len() as u64 + 24) * 8; // preamble, FCS, gap
                let send = Duration::from_micros(bits * 1000 / u64::from(self.shape.rate_kbit));
                self.free_at = Some(start + send);
                due = start + send;
            }
            self.seq += 1;
            self.held.push(Reverse((due, self.seq, f)));
        }
    }

    /// The next frame due at `now`, if any.
    pub fn pop_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        match self.held.peek() {
            Some(Reverse((due, _, _))) if *due <= now => {
                self.held.pop().map(|Reverse((_, _, f))| f)
            }
            _ => None,
        }
    }

    /// When the next held frame is due.
    pub fn poll_at(&self) -> Option<Instant> {
        self.held.peek().map(|Reverse((due, _, _))| *due)
    }

    /// Frames held.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    fn delay(&mut self) -> Duration {
        let d = i64::from(self.shape.delay_us);
        let j = i64::from(self.shape.jitter_us);
        let off = if j == 0 {
            0
        } else {
            // NOTE: 2j+1 > 0.
            (self.next() % (2 * j as u64 + 1)) as i64 - j
        };
        Duration::from_micros((d + off).max(0) as u64)
    }

    fn chance(&mut self, bp: u16) -> bool {
        bp > 0 && (bp >= 10_000 || self.next() % 10_000 < u64::from(bp))
    }

    /// xorshift64*.
    fn next(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// The device half: `inner` with an [`Impairer`] on its send side.
pub struct ImpairLink<L> {
    inner: L,
    core: Impairer,
    not_sent: u64,
}

impl<L: Link> ImpairLink<L> {
    /// Wrap `inner`, impairing nothing until [`Link::set_shape`].
    pub fn new(inner: L, seed: u64) -> Self {
        Self {
            inner,
            core: Impairer::new(seed),
            not_sent: 0,
        }
    }

    #[allow(clippy::disallowed_methods)] // a device: held frames leave in real time
    fn now() -> Instant {
        Instant::now()
    }
}

impl<L: Link> Link for ImpairLink<L> {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.inner.recv(buf)
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        if self.core.is_idle() {
            return self.inner.send(frame);
        }
        if self.core.held() >= QUEUE_LIMIT {
            self.core.stats.queue_full += 1;
            return Ok(false);
        }
        self.core.offer(Self::now(), frame);
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        let now = Self::now();
        while let Some(f) = self.core.pop_due(now) {
            if !self.inner.send(&f)? {
                self.not_sent += 1;
            }
        }
        self.inner.flush()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.core.stats();
        // The device's own counters as it reports them; ours once they
        // count something (a port that is never impaired shows none).
        let mut v = self.inner.counters();
        v.extend(
            [
                ("impair.delayed", s.delayed),
                ("impair.reordered", s.reordered),
                ("impair.duplicated", s.duplicated),
                ("impair.corrupted", s.corrupted),
                ("drop.impair.queue_full", s.queue_full),
                ("drop.impair.tx_not_sent", self.not_sent),
            ]
            .into_iter()
            .filter(|(_, n)| *n > 0),
        );
        v
    }

    fn max_frame(&self) -> usize {
        self.inner.max_frame()
    }

    fn mtu(&self) -> usize {
        self.inner.mtu()
    }

    fn raw_fd(&self) -> Option<RawFd> {
        self.inner.raw_fd()
    }

    fn poll_at(&self) -> Option<Instant> {
        self.core.poll_at()
    }

    fn shape(&self) -> Option<Shape> {
        Some(self.core.shape())
    }

    fn set_shape(&mut self, shape: Shape) -> bool {
        self.core.set_shape(shape);
        true
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // any origin will do; time is then added
mod test {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn shapes_parse_and_print_back() {
        let s = Shape::parse(&args(
            "delay 10 jitter 2.5 reorder 25 duplicate 1 corrupt 0.01 rate 1.5",
        ))
        .unwrap();
        assert_eq!(
            s,
            Shape {
                delay_us: 10_000,
                jitter_us: 2_500,
                reorder_bp: 2_500,
                duplicate_bp: 100,
                corrupt_bp: 1,
                rate_kbit: 1_500,
            }
        );
        assert_eq!(Shape::parse(&s.args()).unwrap(), s);
        assert_eq!(
            s.describe(),
            "delay 10ms jitter 2.5ms, reorder 25%, duplicate 1%, corrupt 0.01%, rate 1.5mbit"
        );
        assert!(Shape::parse(&args("clear")).unwrap().is_none());
        assert!(Shape::parse(&[]).unwrap().is_none());
        for (bad, want) in [
            ("delay", "needs a value"),
            ("delay x", "\"x\""),
            ("delay 60001", "60000"),
            ("jitter 5", "more than the delay"),
            ("reorder 10", "needs a delay"),
            ("duplicate 101", "\"101\""),
            ("rate 0", "above 0"),
            ("latency 5", "unknown impairment \"latency\""),
        ] {
            let e = Shape::parse(&args(bad)).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
        assert_eq!(parse_pct("12.5%"), Ok(1250));
        assert_eq!(pct(1250), "12.5");
        assert!(parse_pct("1e2").is_err() && parse_pct(".5").is_err());
    }

    #[test]
    fn a_delayed_frame_leaves_when_due_and_not_before() {
        let t0 = Instant::now();
        let mut c = Impairer::new(7);
        c.set_shape(Shape {
            delay_us: 10_000,
            ..Shape::default()
        });
        c.offer(t0, b"frame one.......");
        assert_eq!(c.pop_due(t0), None);
        assert_eq!(c.poll_at(), Some(t0 + Duration::from_millis(10)));
        assert_eq!(c.pop_due(t0 + Duration::from_micros(9_999)), None);
        assert_eq!(
            c.pop_due(t0 + Duration::from_millis(10)).as_deref(),
            Some(&b"frame one......."[..])
        );
        assert_eq!(c.poll_at(), None);
        assert_eq!(c.stats().delayed, 1);
    }

    #[test]
    fn duplicate_and_corrupt_at_100_percent_do_it_to_every_frame() {
        let t0 = Instant::now();
        let mut c = Impairer::new(1);
        c.set_shape(Shape {
            duplicate_bp: 10_000,
            corrupt_bp: 10_000,
            ..Shape::default()
        });
        let frame = [0xa5u8; 60];
        c.offer(t0, &frame);
        let a = c.pop_due(t0).unwrap();
        let b = c.pop_due(t0).unwrap();
        assert_eq!(c.pop_due(t0), None);
        for f in [&a, &b] {
            assert_eq!(f[..14], frame[..14], "the Ethernet header is kept");
            let flipped: u32 = f
                .iter()
                .zip(&frame)
                .map(|(x, y)| (x ^ y).count_ones())
                .sum();
            assert_eq!(flipped, 1, "one bit flipped");
        }
        let s = c.stats();
        assert_eq!((s.duplicated, s.corrupted), (1, 2));
    }

    #[test]
    fn jitter_and_reorder_change_the_order_and_rate_spaces_frames() {
        let t0 = Instant::now();
        let mut c = Impairer::new(42);
        c.set_shape(Shape {
            delay_us: 10_000,
            jitter_us: 10_000,
            ..Shape::default()
        });
        for i in 0..50u8 {
            c.offer(t0 + Duration::from_micros(u64::from(i)), &[i; 20]);
        }
        let end = t0 + Duration::from_millis(30);
        let order: Vec<u8> = std::iter::from_fn(|| c.pop_due(end))
            .map(|f| f[0])
            .collect();
        assert_eq!(order.len(), 50);
        assert!(
            order.windows(2).any(|w| w[0] > w[1]),
            "jitter never reordered: {order:?}"
        );

        // reorder 100%: nothing waits for the delay.
        c.set_shape(Shape {
            delay_us: 10_000,
            reorder_bp: 10_000,
            ..Shape::default()
        });
        c.offer(t0, &[1; 20]);
        assert!(c.pop_due(t0).is_some());

        // 1 Mbit/s: a 101-byte frame (+24 framing) takes 1 ms on the wire.
        c.set_shape(Shape {
            rate_kbit: 1_000,
            ..Shape::default()
        });
        for _ in 0..3 {
            c.offer(t0, &[0; 101]);
        }
        let ms = |n| t0 + Duration::from_millis(n);
        assert_eq!(c.pop_due(ms(0)), None);
        assert!(c.pop_due(ms(1)).is_some() && c.pop_due(ms(1)).is_none());
        assert!(c.pop_due(ms(2)).is_some() && c.pop_due(ms(3)).is_some());
    }

    #[test]
    fn the_queue_is_bounded() {
        let t0 = Instant::now();
        let mut c = Impairer::new(3);
        c.set_shape(Shape {
            delay_us: 1_000_000,
            ..Shape::default()
        });
        for _ in 0..QUEUE_LIMIT + 5 {
            c.offer(t0, &[0; 20]);
        }
        assert_eq!(c.held(), QUEUE_LIMIT);
        assert_eq!(c.stats().queue_full, 5);
    }
}
