//! App-Metrics sub-TLV lists: parse → emit gives the same octets, also
//! through postcard. Body: `svcroute_stack::fuzz::appmetrics`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::appmetrics(data);
});
