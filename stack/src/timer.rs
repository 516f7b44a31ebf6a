//! One timer shape for every role core (STYLE.md 5; quinn-proto
//! `connection/timer.rs`).
//!
//! A core names its timers in one enum declared with [`timers!`] and keeps
//! their deadlines in a [`TimerTable`]. The driver asks
//! [`TimerTable::next_timeout`] when the core next needs a call, and the
//! core's `handle_timeout(now)` takes what is due with
//! [`TimerTable::expire`]. A spurious call finds nothing due and does
//! nothing.
//!
//! ```text
//!   core: timers.set(Timer::Hello, now + 1 s)
//!   driver: sleep until min(core.poll_timeout(), ...)
//!   core.handle_timeout(now): while let Some(t) = timers.expire(now) { match t { ... } }
//! ```
//!
//! Timers keyed by something a core holds many of (a connection, a
//! transaction) live with that thing; the table holds the per-core ones,
//! and the core's `poll_timeout` is the earlier of the two.

use smoltcp::time::Instant;

/// An enum of a core's timers (declare it with [`timers!`]).
pub trait TimerKind: Copy + Eq + 'static {
    /// Every variant, in declaration order.
    const ALL: &'static [Self];
    /// The variant's position in [`TimerKind::ALL`].
    fn index(self) -> usize;
}

/// Declare a fieldless enum of timers and its [`TimerKind`] impl.
///
/// ```
/// svcroute_stack::timers! {
///     /// The example's timers.
///     pub enum Timer {
///         /// Send a hello.
///         Hello,
///         /// Age the table.
///         Age,
///     }
/// }
/// let mut t = svcroute_stack::timer::TimerTable::<Timer>::default();
/// t.set(Timer::Age, smoltcp::time::Instant::from_secs(3));
/// assert_eq!(t.next_timeout(), Some(smoltcp::time::Instant::from_secs(3)));
/// ```
#[macro_export]
macro_rules! timers {
    (
        $(#[$attr:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vattr:meta])* $variant:ident ),+ $(,)?
        }
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$vattr])* $variant ),+
        }

        impl $crate::timer::TimerKind for $name {
            const ALL: &'static [Self] = &[$(Self::$variant),+];
            fn index(self) -> usize {
                self as usize
            }
        }
    };
}

/// The deadlines of one core's timers: at most one per [`TimerKind`]
/// variant; setting a timer again moves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerTable<T: TimerKind> {
    at: Vec<Option<Instant>>,
    _kind: std::marker::PhantomData<T>,
}

impl<T: TimerKind> Default for TimerTable<T> {
    fn default() -> Self {
        Self {
            at: vec![None; T::ALL.len()],
            _kind: std::marker::PhantomData,
        }
    }
}

impl<T: TimerKind> TimerTable<T> {
    /// Arm `timer` for `at` (moving it if armed).
    pub fn set(&mut self, timer: T, at: Instant) {
        self.at[timer.index()] = Some(at);
    }

    /// Arm `timer` for `at` unless it is already armed earlier.
    pub fn set_earliest(&mut self, timer: T, at: Instant) {
        let slot = &mut self.at[timer.index()];
        if slot.is_none_or(|t| at < t) {
            *slot = Some(at);
        }
    }

    /// Disarm `timer`.
    pub fn stop(&mut self, timer: T) {
        self.at[timer.index()] = None;
    }

    /// When `timer` fires, if armed.
    pub fn get(&self, timer: T) -> Option<Instant> {
        self.at[timer.index()]
    }

    /// Whether `timer` is armed.
    pub fn is_armed(&self, timer: T) -> bool {
        self.get(timer).is_some()
    }

    /// Whether `timer` is armed and due at `now`.
    pub fn is_due(&self, timer: T, now: Instant) -> bool {
        self.get(timer).is_some_and(|t| t <= now)
    }

    /// The earliest armed deadline.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }

    /// Disarm and return a timer due at `now` (the earliest first; ties in
    /// declaration order), or `None` when nothing is due.
    pub fn expire(&mut self, now: Instant) -> Option<T> {
        let (i, _) = self
            .at
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.filter(|t| *t <= now).map(|t| (i, t)))
            .min_by_key(|(_, t)| *t)?;
        self.at[i] = None;
        Some(T::ALL[i])
    }

    /// Every armed timer with its deadline, in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = (T, Instant)> + '_ {
        T::ALL
            .iter()
            .filter_map(|t| self.get(*t).map(|at| (*t, at)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::timers! {
        /// Test timers.
        enum Timer {
            /// A.
            A,
            /// B.
            B,
            /// C.
            C,
        }
    }

    fn at(ms: i64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn next_timeout_is_the_earliest_armed() {
        let mut t = TimerTable::<Timer>::default();
        assert_eq!(t.next_timeout(), None);
        t.set(Timer::B, at(20));
        t.set(Timer::C, at(10));
        assert_eq!(t.next_timeout(), Some(at(10)));
        t.stop(Timer::C);
        assert_eq!(t.next_timeout(), Some(at(20)));
        t.set(Timer::B, at(30));
        assert_eq!(t.next_timeout(), Some(at(30)), "set moves a timer");
    }

    #[test]
    fn expire_takes_due_timers_earliest_first_and_disarms_them() {
        let mut t = TimerTable::<Timer>::default();
        t.set(Timer::A, at(30));
        t.set(Timer::B, at(10));
        t.set(Timer::C, at(10));
        assert_eq!(
            t.expire(at(5)),
            None,
            "nothing due: a spurious call is harmless"
        );
        assert_eq!(t.expire(at(30)), Some(Timer::B));
        assert_eq!(t.expire(at(30)), Some(Timer::C));
        assert_eq!(t.expire(at(30)), Some(Timer::A));
        assert_eq!(t.expire(at(30)), None);
        assert_eq!(t.next_timeout(), None);
    }

    #[test]
    fn set_earliest_keeps_an_earlier_deadline() {
        let mut t = TimerTable::<Timer>::default();
        t.set_earliest(Timer::A, at(20));
        t.set_earliest(Timer::A, at(30));
        assert_eq!(t.get(Timer::A), Some(at(20)));
        t.set_earliest(Timer::A, at(5));
        assert_eq!(t.get(Timer::A), Some(at(5)));
        assert!(t.is_due(Timer::A, at(5)) && !t.is_due(Timer::B, at(5)));
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![(Timer::A, at(5))]);
    }
}
