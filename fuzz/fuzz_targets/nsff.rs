//! nSFF transport data and NACK (GFF types 1, 2): parse → emit → same octets.
//! Body: `svcroute_stack::fuzz::nsff`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::nsff(data);
});
