//! Shared by the tshark cross-check tests.

/// A classic pcap file (microsecond timestamps, Ethernet link type) holding
/// `frames`, one second apart.
pub(crate) fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4_u32.to_le_bytes()); // magic, microseconds
    out.extend_from_slice(&2_u16.to_le_bytes()); // version 2.4
    out.extend_from_slice(&4_u16.to_le_bytes());
    out.extend_from_slice(&0_i32.to_le_bytes()); // thiszone
    out.extend_from_slice(&0_u32.to_le_bytes()); // sigfigs
    out.extend_from_slice(&0x0004_0000_u32.to_le_bytes()); // snaplen 256 KiB
    out.extend_from_slice(&1_u32.to_le_bytes()); // LINKTYPE_ETHERNET
    for (i, f) in frames.iter().enumerate() {
        let len = u32::try_from(f.len()).unwrap();
        out.extend_from_slice(&u32::try_from(i).unwrap().to_le_bytes()); // ts sec
        out.extend_from_slice(&0_u32.to_le_bytes()); // ts usec
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(f);
    }
    out
}

/// Write `frames` to a temporary pcap named after `tag`, run tshark on it
/// with TCP and UDP checksum validation and `-T fields` for `fields`
/// (separator `|`, multi-values joined by `,`), and return its output lines.
#[allow(dead_code)] // not every tshark test uses it
pub(crate) fn tshark_lines(tag: &str, frames: &[Vec<u8>], fields: &[&str]) -> Vec<String> {
    use std::io::Write as _;
    let path = std::env::temp_dir().join(format!("svcroute-{tag}-{}.pcap", std::process::id()));
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(&pcap(frames)))
        .unwrap();
    let mut cmd = std::process::Command::new("tshark");
    // Wireshark's view alone: no personal plugin (wireshark/svcroute.lua,
    // installed by `scripts/setup --wireshark-plugin`) under this HOME.
    cmd.env(
        "HOME",
        std::env::temp_dir().join("svcroute-tshark-no-plugins"),
    );
    cmd.arg("-r").arg(&path);
    cmd.args([
        "-o",
        "udp.check_checksum:TRUE",
        "-o",
        "tcp.check_checksum:TRUE",
    ]);
    cmd.args(["-T", "fields", "-E", "separator=|", "-E", "aggregator=,"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}
