//! Process nodes on veths over AF_PACKET (`link = "packet"`, docs/lab.md):
//! the same checks as the microVM labs (tests/microvm.rs) — the RFC 8677
//! lab with nSFF2 and SF2 on veths reached by kernel curl, a crashed node
//! reported dead, `lab down` leaving nothing; the mSLP mesh with MDA3 on a
//! veth. Needs root.

mod common;
#[path = "common/variants.rs"]
mod variants;

use common::{root_or_skip, Lab};
use variants::{crash_is_reported_dead, mslp_checks, renamed, rfc8677_checks};

#[test]
fn rfc8677_with_nsff2_and_sf2_on_veths() {
    if !root_or_skip() {
        return;
    }
    let (name, file) = renamed(variants::RFC8677_PKT, "rfc8677-pkt", 'k', 'a');
    let lab = Lab::up(&name, &file);
    rfc8677_checks(&lab, "packet");
    let pid = lab.assert_node_alive("sf2");
    crash_is_reported_dead(&lab, "sf2", pid);
    lab.down();
}

#[test]
fn mslp_mesh_with_one_mda_on_a_veth() {
    if !root_or_skip() {
        return;
    }
    let (name, file) = renamed(variants::MSLP_VM, "mslp-vm", 'k', 'b');
    let file = file.replacen("vm = true\n", "link = \"packet\"\n", 1);
    let lab = Lab::up(&name, &file);
    assert_eq!(variants::status_of(&lab, "mda3")["link"], "packet");
    mslp_checks(&lab);
    lab.down();
}
