//! The nSFF's classic SFF on arbitrary frames: decapsulate, TTL, nNLM
//! lookup, re-encapsulate never panics, and what it forwards fits.
//! Body: `svcroute_nsff::classic::fuzz_process`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_nsff::classic::fuzz_process(data);
});
