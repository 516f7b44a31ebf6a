//! ROSA option data: parse → emit gives the same octets; signing and
//! verification never panic. Body: `svcroute_stack::fuzz::rosa`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::rosa(data);
});
