//! sticky-service option data (Sticky-Dst sub-TLVs): parse → emit gives
//! the same octets. Body: `svcroute_stack::fuzz::sticky`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::sticky(data);
});
