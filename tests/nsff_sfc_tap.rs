//! Local SF registration over REST and HTTP service function chaining over
//! the nNLM, over real TAPs (SPEC §1.4; RFC 8677). Needs root and
//! `/usr/bin/python3` and `curl` (skips otherwise).
//!
//! The lab is `common::chain`'s with `Opts::sf1` (nSFF1's SF segment `s1`,
//! 10.0.3.1) plus a kernel host `kern` (10.0.3.20) on `s1` running a small
//! Python HTTP server that answers with the `NSH` header and `Host` it got.
//! nSFF1 requires SFC classification and has two classifier rules by Host:
//!
//! | rule (Host) | SPI / SI | nNLM row |
//! |---|---|---|
//! | `www.kern.example` | 1 / 255 | `http-service` (the request's own name) |
//! | `www.chain.example` | 2 / 255 | `www.example2.com` (served behind nSFF2 by `sf2`) |
//! | `www.relayed.example` | 4 / 255 | `www.relay.example` (kernel host `relay`, 10.0.3.30); row 4 / 254: `www.example2.com` |
//!
//! `kern` registers itself with `curl -X POST http://10.0.3.1:8080/sf`; a
//! request for its name reaches it with `NSH: spi=1; si=255`; `DELETE`
//! makes the name unknown again (502, gone from the NR); an unclassified
//! request gets 421; `www.chain.example` is carried to the row's name;
//! `relay`, an NSH-aware SF registered over REST, sends what it gets back
//! to nSFF1's SF-facing address with the SI one less, and the chain goes
//! on to `sf2`. Then nSFF1 is killed and restarted: both REST SFs come
//! back from its state file, and `kern` answers by name.

mod common;

use common::chain::{counters, curl, lab_file, nr_names, wait_names, Opts, TempDir};
use common::{have, lab_name, root_or_skip, wait_until, Lab};

/// `sf.py ADDR`: answer with the `NSH` header and `Host` seen.
/// `sf.py ADDR relay`: an NSH-aware SF that sends each request back to
/// nSFF1 (10.0.3.1:80) with the SI one less and relays the answer,
/// adding `X-Via: relay` and `X-Relay-Saw: <NSH it got>`.
const SF_PY: &str = r#"
import sys, http.client
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RELAY = len(sys.argv) > 2

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        nsh = self.headers.get("NSH", "none")
        if RELAY:
            p = dict(kv.strip().split("=") for kv in nsh.split(";"))
            fwd = "spi=%s; si=%d" % (p["spi"], int(p["si"]) - 1)
            c = http.client.HTTPConnection("10.0.3.1", 80, timeout=10)
            c.request("GET", self.path, headers={"Host": self.headers.get("Host"), "NSH": fwd, "X-Via": "relay"})
            r = c.getresponse()
            body = r.read()
            inst = r.getheader("X-Instance", "none")
            status = r.status
            c.close()
        else:
            body = ("kern nsh=%s host=%s\n" % (nsh, self.headers.get("Host"))).encode()
            inst = "kern"
            status = 200
        self.send_response(status)
        self.send_header("X-Instance", inst)
        self.send_header("X-Relay-Saw", nsh)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass

ThreadingHTTPServer((sys.argv[1], 80), H).serve_forever()
"#;

const NSFF1: &str = r#"sfc_required = true
[[node.config.classifier]]
host = "www.kern.example"
spi = 1
si = 255
[[node.config.classifier]]
host = "www.chain.example"
spi = 2
si = 255
[[node.config.nnlm]]
spi = 1
si = 255
next_hop = "http-service"
te = "http"
[[node.config.classifier]]
host = "www.relayed.example"
spi = 4
si = 255
[[node.config.nnlm]]
spi = 2
si = 255
next_hop = "www.example2.com"
te = "http"
[[node.config.nnlm]]
spi = 4
si = 255
next_hop = "www.relay.example"
te = "http"
[[node.config.nnlm]]
spi = 4
si = 254
next_hop = "www.example2.com"
te = "http"
"#;

/// `curl` in `kern` against nSFF1's REST: (status, body).
fn rest(lab: &Lab, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let url = format!("http://10.0.3.1:8080{path}");
    let mut args = vec![
        "curl",
        "-sS",
        "-m",
        "10",
        "-X",
        method,
        "-w",
        "\n%{http_code}",
    ];
    if let Some(b) = body {
        args.extend(["-H", "Content-Type: application/json", "-d", b]);
    }
    args.push(&url);
    let out = lab.exec("kern", 20, &args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

#[test]
fn sf_registration_rest_and_http_sfc() {
    if !root_or_skip() {
        return;
    }
    if !have("curl") || !std::path::Path::new("/usr/bin/python3").exists() {
        eprintln!("SKIP: needs curl and /usr/bin/python3");
        return;
    }
    let name = lab_name('n', 'c');
    let dir = TempDir(std::env::temp_dir().join(format!("svcroute-sfc-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let script = dir.0.join("sf.py");
    std::fs::write(&script, SF_PY).unwrap();
    let extra = format!(
        r#"
[[host]]
name = "kern"
commands = ["exec /usr/bin/python3 {0} 10.0.3.20"]
wait_tcp = ["10.0.3.20:80"]
[[host.iface]]
segment = "s1"
addrs = ["10.0.3.20/24"]

[[host]]
name = "relay"
commands = ["exec /usr/bin/python3 {0} 10.0.3.30 relay"]
wait_tcp = ["10.0.3.30:80"]
[[host.iface]]
segment = "s1"
addrs = ["10.0.3.30/24"]
"#,
        script.display()
    );
    let opts = Opts {
        sf1: true,
        nsff1: NSFF1,
        extra,
        ..Opts::default()
    };
    let lab = Lab::up(&name, &lab_file(&name, &opts));
    wait_names(
        &lab,
        &[("www.example2.com", &[2]), ("www.example.com", &[1, 2])],
    );

    // A classifier rule by Host sends the request along the row's name:
    // www.chain.example → row (2, 255) → www.example2.com behind nSFF2.
    let mut last = None;
    let ok = wait_until(15, || {
        let r = curl(&lab, "www.chain.example", "/");
        let ok = r.status == 200;
        last = Some(r);
        ok
    });
    let r = last.unwrap();
    assert!(ok, "{r:?}");
    assert_eq!(r.instance().as_deref(), Some("sf2"), "{r:?}");

    // No NSH header, no rule: 421, and nothing is forwarded.
    let r = curl(&lab, "www.example2.com", "/");
    assert_eq!(r.status, 421, "{r:?}");
    assert!(r.body_text().contains("no SFC classification"), "{r:?}");

    // The kernel SF's name is unknown before it registers.
    let r = curl(&lab, "www.kern.example", "/");
    assert_eq!(r.status, 502, "{r:?}");
    assert!(r.body_text().contains("unknown service name"), "{r:?}");

    // Registration: bad fields are named, then the real one.
    let (st, body) = rest(
        &lab,
        "POST",
        "/sf",
        Some(r#"{"fqdn":"www.kern.example","addr":"nope"}"#),
    );
    assert_eq!(st, 400, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["field"], "addr", "{v}");
    let (st, body) = rest(
        &lab,
        "POST",
        "/sf",
        Some(r#"{"fqdn":"www.kern.example","addr":"10.0.3.20","port":80}"#),
    );
    assert_eq!(st, 201, "{body}");
    let (st, body) = rest(
        &lab,
        "POST",
        "/sf",
        Some(r#"{"fqdn":"www.kern.example","addr":"10.0.3.21","port":80}"#),
    );
    assert_eq!(st, 409, "{body}");
    let (st, body) = rest(
        &lab,
        "POST",
        "/sf",
        Some(r#"{"fqdn":"www.example.com","addr":"10.0.3.20","port":80}"#),
    );
    assert_eq!(st, 409, "config SF: {body}");
    let (st, body) = rest(&lab, "GET", "/sf", None);
    assert_eq!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let sfs = v["sfs"].as_array().unwrap();
    assert_eq!(sfs.len(), 2, "{v}");
    assert_eq!(sfs[1]["fqdn"], "www.kern.example", "{v}");
    assert_eq!(sfs[1]["source"], "rest", "{v}");
    assert_eq!(sfs[0]["source"], "config", "{v}");
    wait_names(&lab, &[("www.kern.example", &[1])]);

    // A request by name reaches it, classified by the rule, with NSH.
    let r = curl(&lab, "www.kern.example", "/x");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.instance().as_deref(), Some("kern"), "{r:?}");
    assert_eq!(
        r.body_text(),
        "kern nsh=spi=1; si=255 host=www.kern.example\n",
        "{r:?}"
    );

    // DELETE: deregistered at the NR, the name is unknown again.
    let (st, body) = rest(&lab, "DELETE", "/sf/www.kern.example", None);
    assert_eq!(st, 204, "{body}");
    let mut names = nr_names(&lab);
    let gone = wait_until(10, || {
        names = nr_names(&lab);
        !names.contains_key("www.kern.example")
    });
    assert!(gone, "NR still has the name: {names:?}");
    let r = curl(&lab, "www.kern.example", "/");
    assert_eq!(r.status, 502, "{r:?}");
    let (st, _) = rest(&lab, "DELETE", "/sf/www.kern.example", None);
    assert_eq!(st, 404);
    let (st, _) = rest(&lab, "DELETE", "/sf/www.example.com", None);
    assert_eq!(st, 409);

    // A chain of two: rule → (4, 255) → the NSH-aware SF `relay` (registered
    // over REST), which sends the request back to nSFF1's SF-facing address
    // with SI 254 → row (4, 254) → www.example2.com behind nSFF2.
    let (st, body) = rest(
        &lab,
        "POST",
        "/sf",
        Some(r#"{"fqdn":"www.relay.example","addr":"10.0.3.30"}"#),
    );
    assert_eq!(st, 201, "{body}");
    let r = curl(&lab, "www.relayed.example", "/");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.instance().as_deref(), Some("sf2"), "{r:?}");
    assert_eq!(
        r.header("x-relay-saw").as_deref(),
        Some("spi=4; si=255"),
        "{r:?}"
    );

    let c = counters(
        &lab,
        "nsff1",
        &[
            "nsff.rest_sf_added",
            "nsff.rest_sf_removed",
            "nsff.rest_bad_request",
            "nsff.rest_conflict",
            "nsff.rest_not_found",
            "nsff.misdirected_421",
            "nsff.sfc_unclassified_421",
            "nsff.sfc_to_name",
            "nsff.sfc_http_service",
            "nsff.sfc_nsh_added",
            "nsff.classified_header",
            "nsff.sfc_remote",
        ],
    );
    let want: &[(&str, u64)] = &[
        ("nsff.rest_sf_added", 2),
        ("nsff.rest_sf_removed", 1),
        ("nsff.rest_bad_request", 1),
        ("nsff.rest_conflict", 3),
        ("nsff.rest_not_found", 1),
        ("nsff.misdirected_421", 1),
        ("nsff.sfc_unclassified_421", 1),
        ("nsff.sfc_http_service", 3),
        ("nsff.sfc_nsh_added", 2),
        ("nsff.classified_header", 1),
        // chain, relay → sf2, and the two unknown www.kern.example.
        ("nsff.sfc_remote", 4),
    ];
    for (k, v) in want {
        assert_eq!(c[*k], *v, "{k}: {c:?}");
    }
    assert!(c["nsff.sfc_to_name"] >= 1, "{c:?}");

    // nSFF1 dies and restarts: its REST SFs come back from its state file
    // (the lab's `<rundir>/nsff1.state/sfs.json`, written at each change)
    // and answer by name, with no SF registering again.
    let (st, body) = rest(
        &lab,
        "POST",
        "/sf",
        Some(r#"{"fqdn":"www.kern.example","addr":"10.0.3.20","port":80}"#),
    );
    assert_eq!(st, 201, "{body}");
    let state = lab.run_dir().join("nsff1.state/sfs.json");
    let saved = std::fs::read_to_string(&state).unwrap();
    assert!(
        saved.contains("www.relay.example") && saved.contains("www.kern.example"),
        "{saved}"
    );
    lab.verb("node", &["nsff1", "kill"]);
    lab.verb("node", &["nsff1", "start"]);
    let c = counters(
        &lab,
        "nsff1",
        &[
            "nsff.state_sfs_restored",
            "nsff.state_sfs_dropped",
            "nsff.rest_sf_added",
        ],
    );
    assert_eq!(c["nsff.state_sfs_restored"], 2, "{c:?}");
    assert_eq!(c["nsff.state_sfs_dropped"], 0, "{c:?}");
    assert_eq!(c["nsff.rest_sf_added"], 0, "{c:?}");
    let (st, body) = rest(&lab, "GET", "/sf", None);
    assert_eq!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let names: Vec<(&str, &str)> = v["sfs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["fqdn"].as_str().unwrap(), s["source"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("www.example.com", "config"),
            ("www.relay.example", "rest"),
            ("www.kern.example", "rest")
        ],
        "{v}"
    );
    let mut last = None;
    let ok = wait_until(15, || {
        let r = curl(&lab, "www.kern.example", "/after");
        let ok = r.status == 200;
        last = Some(r);
        ok
    });
    let r = last.unwrap();
    assert!(ok, "{r:?}");
    assert_eq!(r.instance().as_deref(), Some("kern"), "{r:?}");
    // And across the fabric at once: the restarted nSFF1 starts its
    // transaction IDs at a random counter, not at 0 again, where nSFF2
    // still remembered them as closed and the first transactions hung.
    let r = curl(&lab, "www.relayed.example", "/after");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.instance().as_deref(), Some("sf2"), "{r:?}");
    lab.down();
}
