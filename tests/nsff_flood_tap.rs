//! A half-open transport flood at a running nSFF (issue 12), over real
//! TAPs, on `common::chain`'s lab plus a kernel host `inj` on nSFF2's link
//! (`n2`). `inj` sends nSFF2 transport OPENs with distinct transaction IDs
//! whose request heads never finish — more than its `max_txns` (4096) — and
//! keeps sending for 12 s. While it does, a legitimate request from the
//! client through nSFF1 must still be answered by sf2: unfinished egress
//! transactions are evicted first (`nsff.txns_failed_evicted`). Needs root
//! and python3 (skips without root).

mod common;

use common::chain::{counter, curl, lab_file, wait_ok, Opts};
use common::{lab_name, root_or_skip, Lab};

/// `flood.py SECS`: OPENs to nSFF2 (pathID link 4, its `link_in`) from
/// origin 9, each with half a request head, as fast as it can for the first
/// 6,000 and then ~500/s until SECS pass; answers would go to link 200,
/// which no switch has. Prints how many it sent.
const FLOOD_PY: &str = r#"
import socket, struct, sys, time
secs = float(sys.argv[1])
def pid(bits):
    b = bytearray(32)
    for i in bits:
        b[i // 8] |= 0x80 >> (i % 8)
    return bytes(b)
def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
mac = bytes.fromhex(open("/sys/class/net/eth0/address").read().strip().replace(":", ""))
to, rev = pid([4]), pid([200])
head = b"GET / HTTP/1.1\r\nHost: www.example2.com\r\nX-Never: finished"
def frame(i):
    txn = (9 << 24) | i
    data = bytearray(struct.pack("!IHHIBBB", 0, 0, 16, txn, 1, 9, 32) + rev + head)
    struct.pack_into("!H", data, 4, csum(bytes(data)))
    gff = struct.pack("!H", (256 << 4) | 1) + to + bytes(data)
    ip = struct.pack("!IHBB", 0x60000000, len(gff), 253, 64) + to
    return b"\xff" * 6 + mac + b"\x86\xdd" + ip + gff
end, i = time.time() + secs, 1
while time.time() < end:
    try:
        s.send(frame(i))
    except BlockingIOError:
        time.sleep(0.001)
        continue
    i += 1
    if i > 6000:
        time.sleep(0.002)
print(i - 1)
"#;

#[test]
fn a_legitimate_request_gets_through_a_half_open_flood() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('f', 'l');
    let opts = Opts {
        extra: "\n[[host]]\nname = \"inj\"\n[[host.iface]]\nsegment = \"n2\"\n".into(),
        ..Opts::default()
    };
    let lab = Lab::up(&name, &lab_file(&name, &opts));
    lab.disable_bridge_netfilter();
    wait_ok(&lab, 30, "www.example2.com", "sf2");

    std::thread::scope(|s| {
        let flood = s.spawn(|| {
            let out = lab.exec("inj", 40, &["python3", "-c", FLOOD_PY, "12"]);
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        });
        // Let the flood fill nSFF2's transaction table first.
        assert!(
            common::wait_until(10, || counter(&lab, "nsff2", "nsff.txns_accepted") >= 4096),
            "the flood did not fill nSFF2's table: {}",
            counter(&lab, "nsff2", "nsff.txns_accepted")
        );
        let r = curl(&lab, "www.example2.com", "/");
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.instance().as_deref(), Some("sf2"));
        let sent: u64 = flood.join().unwrap().parse().unwrap_or(0);
        assert!(sent > 6000, "flood sent {sent}");
    });
    assert!(counter(&lab, "nsff2", "nsff.txns_failed_evicted") > 0);
    lab.down();
}
