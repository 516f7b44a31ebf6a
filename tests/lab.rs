//! `svcroute lab` end to end: real namespaces, bridges, TAPs, veths, node
//! processes and kernel hosts. Needs root (skips otherwise). Each test uses a
//! lab name of its own, and a guard that runs `lab down` however it ends.

mod common;

use common::{
    assert_nothing_of, lab_name, root_or_skip, svcroute, text, write_lab_file, DownOnDrop, Lab,
};

const HOST_LAB: &str = include_str!("../examples/labs/host.toml");

/// The host lab renamed to `name`, with `edit` applied.
fn host_lab(name: &str, edit: impl Fn(String) -> String) -> String {
    let renamed = HOST_LAB.replacen("name = \"host\"", &format!("name = \"{name}\""), 1);
    assert_ne!(renamed, HOST_LAB, "the host lab's name line moved");
    edit(renamed)
}

#[test]
fn up_serves_both_ways_and_down_removes_everything() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('t', 'a');
    let lab = Lab::up(&name, &host_lab(&name, |t| t));

    // Kernel client -> userspace node, IPv4 and IPv6; kernel client ->
    // kernel server over the same bridge, both families.
    for url in [
        "http://10.0.0.2/",
        "http://[fd00::2]/",
        "http://10.0.0.20:8000/",
        "http://[fd00::20]:8000/",
    ] {
        let out = lab.exec("client", 15, &["curl", "-gsf", "-m", "10", url]);
        assert!(out.status.success(), "curl {url} failed");
    }
    // Userspace node -> kernel server.
    let v = lab.ctl("h1", &["get", "http://10.0.0.20:8000/"]);
    assert_eq!(v["ok"], 1, "h1 fetched nothing: {v}");

    // Exit codes come through exec; status and logs work.
    let out = lab.exec("client", 10, &["sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let out = svcroute(&["lab", "status", &name]);
    assert!(out.status.success());
    let s = text(&out);
    assert!(
        s.contains("h1") && s.contains("yes") && s.contains(&format!("svl-{name}-web")),
        "{s}"
    );
    let out = svcroute(&["lab", "logs", "--lab", &name, "web"]);
    assert!(out.status.success() && text(&out).contains("http.server"));

    // Nothing left: namespaces, run dir, processes; a second down is a no-op.
    lab.down();
}

#[test]
fn a_malformed_lab_file_creates_nothing() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('t', 'b');
    let _guard = DownOnDrop(name.clone());
    let file = write_lab_file(
        &name,
        &host_lab(&name, |t| {
            t.replacen("segment = \"lan0\"", "segment = \"lan9\"", 1)
        }),
    );
    let out = svcroute(&["lab", "up", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("lan9") && msg.contains("segment") && msg.contains("line"),
        "{msg}"
    );
    assert_nothing_of(&name);

    let file = write_lab_file(
        &name,
        &host_lab(&name, |t| t.replacen("[[host]]", "[[host]]\nbogus = 1", 1)),
    );
    let out = svcroute(&["lab", "up", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out).contains("bogus"), "{}", text(&out));
    assert_nothing_of(&name);
}

#[test]
fn a_lab_that_does_not_get_ready_is_torn_down() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('t', 'c');
    let _guard = DownOnDrop(name.clone());
    // Nothing listens on 10.0.0.99:9, so `up` times out waiting for it.
    let file = write_lab_file(
        &name,
        &host_lab(&name, |t| {
            t.replacen("wait_tcp = [", "wait_tcp = [\"10.0.0.99:9\", ", 1)
        }),
    );
    let out = svcroute(&["lab", "up", "--timeout", "3", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("10.0.0.99:9") && msg.contains("torn down"),
        "{msg}"
    );
    assert_nothing_of(&name);
}

#[test]
fn a_host_moved_to_another_segment_is_readdressed_there() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('t', 'm');
    // The host lab with `web` on a second segment.
    let toml = host_lab(&name, |t| {
        t.replacen(
            "[[segment]]\nname = \"lan0\"",
            "[[segment]]\nname = \"lan0\"\n[[segment]]\nname = \"lan1\"",
            1,
        )
        .replace(
            "segment = \"lan0\"\naddrs = [\"10.0.0.20/24\", \"fd00::20/64\"]",
            "segment = \"lan1\"\naddrs = [\"10.0.1.20/24\", \"fd00:1::20/64\"]",
        )
        .replace(
            "wait_tcp = [\"10.0.0.20:8000\", \"[fd00::20]:8000\"]",
            "wait_tcp = [\"10.0.1.20:8000\"]",
        )
    });
    assert!(
        toml.contains("10.0.1.20/24"),
        "the host lab's web host moved"
    );
    let lab = Lab::up(&name, &toml);
    let curl = |url: &str| lab.exec("client", 10, &["curl", "-gsf", "-m", "3", url]);
    assert!(
        !curl("http://10.0.1.20:8000/").status.success(),
        "web is off-segment before"
    );
    assert!(curl("http://10.0.0.2/").status.success());

    // Refusals name the bad input and change nothing.
    for (args, why) in [
        (vec!["client", "lan7"], "no segment \"lan7\""),
        (vec!["h1", "lan1"], "role host"),
        (vec!["client:eth4", "lan1"], "no port \"eth4\""),
        (vec!["client", "lan1", "--addr", "10.0.1.10"], "--addr"),
    ] {
        let mut a = vec!["lab", "move", "--lab", &name];
        a.extend_from_slice(&args);
        let out = svcroute(&a);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(text(&out).contains(why), "{args:?}: {}", text(&out));
    }

    // The interface ID under lan1's prefix (taken from web's address).
    let out = svcroute(&["lab", "move", "--lab", &name, "client", "lan1"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("client moved to segment lan1 as 10.0.1.10/24"),
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains("as 10.0.1.10/24, fd00:1::10/64"),
        "each family's address moves: {}",
        text(&out)
    );
    for url in ["http://10.0.1.20:8000/", "http://[fd00:1::20]:8000/"] {
        assert!(
            curl(url).status.success(),
            "{url}: web is on-link after the move"
        );
    }
    assert!(
        !curl("http://10.0.0.2/").status.success(),
        "h1 is off-segment after the move"
    );
    let out = svcroute(&["lab", "status", &name, "--json"]);
    let s = text(&out);
    assert!(s.contains("10.0.1.10/24") && s.contains("\"lan1\""), "{s}");

    // And back, with an address of our choosing.
    let out = svcroute(&[
        "lab",
        "move",
        "--lab",
        &name,
        "client:eth0",
        "lan0",
        "--addr",
        "10.0.0.99/24",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(curl("http://10.0.0.2/").status.success());
    lab.down();
}
