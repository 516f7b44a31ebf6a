//! Two whole SAR nodes, stateful: a script of datagrams (with arbitrary
//! Sticky-Dst options), replies, tunnel packets from chosen sources, raw
//! frames, time and control commands into a sticky ingress and an egress
//! on the simulator. Never panics, always makes progress, frames fit their
//! segment, the sticky table stays under its cap. Body:
//! `svcroute_sar::fuzz::sticky_world`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_sar::fuzz::sticky_world(data);
});
