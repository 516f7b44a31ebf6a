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
