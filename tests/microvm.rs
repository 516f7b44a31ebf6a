//! Nodes as QEMU microVMs in labs (docs/microvm.md): the RFC 8677 lab with
//! nSFF2 and SF2 as VMs reached by kernel curl, a VM node that crashes
//! reported dead, `lab down` leaving no QEMU process, TAP or namespace; the
//! mSLP mesh with MDA3 in a VM. Needs root, qemu-system-x86 and a cloud
//! kernel (`scripts/setup --deps` installs both); builds the image from the
//! binary under test first (`qemu/build-image`, about 2 s).
//!
//! Each VM boots in about 3 s under TCG on an idle machine; these tests
//! boot three.

mod common;
#[path = "common/variants.rs"]
mod variants;

use std::sync::{Mutex, Once};

use common::{root_or_skip, run_bounded, text, wait_until, Lab, BIN};
use variants::{crash_is_reported_dead, mslp_checks, qemu_processes_of, renamed, rfc8677_checks};

/// One VM lab at a time: each VM is a QEMU emulating a CPU (TCG), and this
/// machine has two cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Build the image beside the binary under test, once per test process.
fn image() {
    static BUILD: Once = Once::new();
    BUILD.call_once(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/qemu/build-image");
        let out = run_bounded(120, script, &["--bin", BIN]);
        assert!(
            out.status.success(),
            "qemu/build-image failed (scripts/setup --deps installs qemu-system-x86 and \
             linux-image-cloud-amd64):\n{}",
            text(&out)
        );
    });
}

#[test]
fn rfc8677_with_nsff2_and_sf2_as_microvms() {
    if !root_or_skip() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    image();
    let (name, file) = renamed(variants::RFC8677_VM, "rfc8677-vm", 'v', 'a');
    // nSFF2 records its NICs (`--pcap`, QEMU's filter-dump).
    let file = file.replacen(
        "name = \"nsff2\"\nrole = \"nsff\"\nvm = true\n",
        "name = \"nsff2\"\nrole = \"nsff\"\nvm = true\npcap = true\n",
        1,
    );
    assert!(file.contains("pcap = true"), "the nsff2 node moved");
    let lab = Lab::up_within(&name, &file, 90);
    rfc8677_checks(&lab, "vm");
    // Both NICs saw the request on its way to sf2: the capture has frames
    // (more than the 24-byte pcap header), port 1 in `.pcap.1`.
    for f in ["nsff2.pcap", "nsff2.pcap.1"] {
        let path = lab.run_dir().join(f);
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        assert!(len > 24 + 16 + 60, "{}: {len} bytes", path.display());
    }
    // On the SF segment: the HTTP request nSFF2 made to sf2.
    let rows = common::tshark_fields(
        &lab.run_dir().join("nsff2.pcap.1"),
        "http.request",
        &["http.host"],
        &[],
    );
    assert!(
        rows.iter().any(|r| r[0] == "www.example2.com"),
        "no request to www.example2.com in nsff2's capture: {rows:?}"
    );

    // The control socket reaches the node inside; ping says where it runs.
    let ping = lab.ctl("nsff2", &["ping"]);
    assert_eq!(ping["guest_pid"], 1, "the node is the VM's init: {ping}");
    assert!(ping["vm"]["ready_ms"].as_u64().is_some(), "{ping}");
    let accel = ping["vm"]["accel"].as_str().unwrap_or("");
    assert!(accel == "tcg" || accel == "kvm", "{ping}");
    // `lab logs` has the host side and the guest console.
    let out = common::svcroute(&["lab", "logs", "--lab", &name, "nsff2"]);
    let log = text(&out);
    assert!(
        log.contains("init reached") && log.contains("on AF_PACKET eth0"),
        "{log}"
    );

    // A VM that dies (its QEMU killed) is a dead node.
    let sf2 = lab.ctl("sf2", &["ping"]);
    let qemu = sf2["vm"]["qemu_pid"].as_u64().expect("qemu_pid");
    crash_is_reported_dead(&lab, "sf2", qemu);

    lab.down();
    assert!(
        wait_until(10, || qemu_processes_of(&name).is_empty()),
        "QEMU left behind: {:?}",
        qemu_processes_of(&name)
    );
}

#[test]
fn mslp_mesh_with_one_mda_in_a_vm() {
    if !root_or_skip() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    image();
    let (name, file) = renamed(variants::MSLP_VM, "mslp-vm", 'v', 'b');
    let lab = Lab::up_within(&name, &file, 90);
    assert_eq!(variants::status_of(&lab, "mda3")["link"], "vm");
    mslp_checks(&lab);
    lab.down();
    assert!(wait_until(10, || qemu_processes_of(&name).is_empty()));
}
