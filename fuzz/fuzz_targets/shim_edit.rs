//! Frame surgery: a random frame through walk, strip, insert and rewrite; no
//! panic, insert-then-strip gives the frame back, a rewrite and its inverse
//! too. Body: `svcroute_stack::fuzz::shim_edit`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::shim_edit(data);
});
