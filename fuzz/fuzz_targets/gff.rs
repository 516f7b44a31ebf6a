//! GFF header and pathID: parse → emit gives the same octets.
//! Body: `svcroute_stack::fuzz::gff`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    svcroute_stack::fuzz::gff(data);
});
