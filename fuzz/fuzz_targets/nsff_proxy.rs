//! The nSFF's sans-IO HTTP proxy core, stateful: a script of client and SF
//! connection events (bytes, FINs, resets, connects accepted or refused),
//! fabric messages and time, over a model of the driver's connections.
//! Never panics, every poll ends, and the core only works on connections
//! it holds. Body: `svcroute_nsff::core::model::fuzz_proxy`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_nsff::core::model::fuzz_proxy(data);
});
