//! `svcroute lab graph` and `lab ui` (docs/lab.md, "graph" and "ui").
//!
//! The picture of the default lab names every node, host, segment and
//! address (SVG read as XML, and DOT); a running lab's live page, loaded in
//! Debian's headless chromium, shows every node alive and a link cut with
//! `ip link set ... down`, both on a page that is already open (its change
//! list) and on one loaded afterwards, whose first seconds show it down.
//!
//! The page server and chromium run inside the lab's own namespace, which
//! has no route out: the browser's background requests go nowhere.

mod common;

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{have, lab_name, root_or_skip, run_bounded, svcroute, text, wait_until, Lab, BIN};

/// Names in the default lab file: nodes, hosts, segments and addresses.
struct Names {
    nodes: Vec<String>,
    hosts: Vec<String>,
    segments: Vec<String>,
    addrs: Vec<String>,
    ports: usize,
}

fn default_lab_names() -> Names {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/labs/rfc8677.toml"
    ))
    .unwrap();
    let t: toml::Table = toml::from_str(&text).unwrap();
    let names = |key: &str| -> Vec<String> {
        t.get(key)
            .and_then(toml::Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|x| x["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut addrs = Vec::new();
    let mut ports = 0;
    for (kind, sub) in [("node", "port"), ("host", "iface")] {
        for d in t[kind].as_array().unwrap() {
            for p in d.get(sub).and_then(toml::Value::as_array).unwrap() {
                ports += 1;
                for a in p
                    .get("addrs")
                    .and_then(toml::Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    addrs.push(a.as_str().unwrap().to_owned());
                }
            }
        }
    }
    Names {
        nodes: names("node"),
        hosts: names("host"),
        segments: names("segment"),
        addrs,
        ports,
    }
}

#[test]
fn svg_of_the_default_lab_has_every_node_segment_and_address() {
    let out = svcroute(&["lab", "graph"]);
    assert!(out.status.success(), "{}", text(&out));
    let svg = String::from_utf8(out.stdout).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("lab graph writes well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let by_id = |id: &str| doc.descendants().find(|n| n.attribute("id") == Some(id));
    // The words drawn inside an element.
    let words = |n: roxmltree::Node<'_, '_>| -> Vec<String> {
        n.descendants()
            .filter(|d| d.is_text() && d.parent().is_some_and(|p| p.tag_name().name() != "title"))
            .filter_map(|d| d.text())
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let names = default_lab_names();
    for (prefix, list) in [
        ("node", &names.nodes),
        ("host", &names.hosts),
        ("seg", &names.segments),
    ] {
        assert!(!list.is_empty());
        for name in list {
            let g = by_id(&format!("{prefix}-{name}"))
                .unwrap_or_else(|| panic!("no element {prefix}-{name}"));
            assert!(
                words(g).contains(name),
                "{prefix}-{name} does not show its name: {:?}",
                words(g)
            );
        }
    }
    let links: Vec<_> = doc
        .descendants()
        .filter(|n| {
            n.attribute("class")
                .is_some_and(|c| c.split(' ').any(|w| w == "link"))
        })
        .collect();
    assert_eq!(links.len(), names.ports, "one line per port");
    let drawn: Vec<String> = links.iter().flat_map(|l| words(*l)).collect();
    for a in &names.addrs {
        assert!(drawn.contains(a), "address {a} not on any link: {drawn:?}");
    }
    // A port's label names its interface: the client's veth end, a node's TAP.
    let client = by_id("link-client-0").expect("the client's veth");
    assert_eq!(client.attribute("data-device"), Some("host-client"));
    assert_eq!(client.attribute("data-to"), Some("cli"));
    assert!(words(client).contains(&"eth0".to_owned()));
    assert!(words(by_id("link-f1-2").unwrap()).contains(&"f1-2".to_owned()));
    // Roles are told apart (a class and a colour per role).
    let f1 = by_id("node-f1").unwrap();
    assert!(f1.attribute("class").unwrap().contains("role-fwd"));
    assert!(by_id("host-client")
        .unwrap()
        .attribute("class")
        .unwrap()
        .contains("host"));

    // -o FILE writes the same picture.
    let dir = std::env::temp_dir().join(format!("svcroute-graph-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("g.svg");
    let out = svcroute(&["lab", "graph", "-o", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        svg,
        "-o differs from stdout"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dot_of_the_default_lab_has_every_node_segment_and_address() {
    let out = svcroute(&["lab", "graph", "--format", "dot"]);
    assert!(out.status.success(), "{}", text(&out));
    let dot = String::from_utf8(out.stdout).unwrap();
    assert!(dot.starts_with("graph \"rfc8677\" {"), "{dot}");
    assert!(dot.trim_end().ends_with('}'));
    let names = default_lab_names();
    for n in &names.nodes {
        assert!(
            dot.contains(&format!("\"node-{n}\" [label=\"{n}\\n")),
            "node {n}"
        );
    }
    for h in &names.hosts {
        assert!(
            dot.contains(&format!("\"host-{h}\" [label=\"{h}\\nkernel host\"")),
            "host {h}"
        );
    }
    for s in &names.segments {
        assert!(
            dot.contains(&format!("\"seg-{s}\" [label=\"{s}\"")),
            "segment {s}"
        );
    }
    for a in &names.addrs {
        assert!(dot.contains(&format!("\\n{a}")), "address {a}");
    }
    assert_eq!(
        dot.matches(" -- ").count(),
        names.ports,
        "one edge per port"
    );
}

#[test]
fn graph_draws_a_lab_file_and_refuses_a_lab_that_is_not_up() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/labs/rosa-small.toml");
    let out = svcroute(&["lab", "graph", file]);
    assert!(out.status.success(), "{}", text(&out));
    let svg = String::from_utf8(out.stdout).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    // A shim's TUN is drawn straight to its kernel host.
    let tun = doc
        .descendants()
        .find(|n| n.attribute("id") == Some("tun-client"))
        .expect("the shim's TUN");
    assert_eq!(tun.attribute("data-to"), Some("cs"));

    let out = svcroute(&["lab", "graph", "nosuchlab-q"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("neither a lab file nor a lab that is up"),
        "{}",
        text(&out)
    );
}

// ---- the live page -------------------------------------------------------

/// `lab ui` running in the lab namespace; killed when dropped.
struct Ui {
    child: Child,
    url: String,
    /// `/state.json` requests served so far (from its debug log).
    polls: Arc<AtomicUsize>,
}

impl Ui {
    fn start(lab: &Lab) -> Self {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &lab.netns(), BIN, "lab", "ui", lab.name()])
            .args(["--port", "0"])
            .env("RUST_LOG", "svcroute::lab::ui=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting lab ui");
        let mut url = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut url)
            .unwrap();
        let url = url.trim().to_owned();
        assert!(
            url.starts_with("http://127.0.0.1:"),
            "lab ui printed {url:?}"
        );
        let polls = Arc::new(AtomicUsize::new(0));
        let p = polls.clone();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if line.contains("GET /state.json") {
                    p.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        Self { child, url, polls }
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh chromium profile directory, removed when dropped.
struct Profile(PathBuf);

impl Profile {
    fn new(tag: &str) -> Self {
        let d =
            std::env::temp_dir().join(format!("svcroute-chromium-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Self(d)
    }
}

impl Drop for Profile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `chromium --headless --dump-dom URL` in namespace `ns`, the page given
/// `budget_ms` of (virtual) time for its scripts.
fn chromium_args(ns: &str, profile: &Profile, budget_ms: u32, url: &str) -> Vec<String> {
    [
        "netns",
        "exec",
        ns,
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([
        format!("--user-data-dir={}", profile.0.display()),
        format!("--virtual-time-budget={budget_ms}"),
        "--dump-dom".to_owned(),
        url.to_owned(),
    ])
    .collect()
}

fn dump_dom(ns: &str, budget_ms: u32, url: &str) -> String {
    let profile = Profile::new(&budget_ms.to_string());
    let args = chromium_args(ns, &profile, budget_ms, url);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_bounded(90, "ip", &args);
    assert!(out.status.success(), "chromium failed: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The opening tag of the element with id `id` in serialized HTML.
fn tag<'a>(dom: &'a str, id: &str) -> Option<&'a str> {
    let at = dom.find(&format!(" id=\"{id}\""))?;
    let start = dom[..at].rfind('<')?;
    let end = at + dom[at..].find('>')?;
    Some(&dom[start..=end])
}

#[track_caller]
fn assert_attr(dom: &str, id: &str, attr: &str, want: &str) {
    let t = tag(dom, id).unwrap_or_else(|| panic!("no element {id} in the page"));
    assert!(
        t.contains(&format!(" {attr}=\"{want}\"")),
        "{id}: want {attr}={want:?}, have {t}"
    );
}

fn polls_of(dom: &str) -> u32 {
    tag(dom, "page")
        .and_then(|t| t.split("data-polls=\"").nth(1))
        .and_then(|r| r.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn small_lab(name: &str) -> String {
    format!(
        r#"name = "{name}"
[[segment]]
name = "lan"
[[node]]
name = "h1"
role = "host"
[[node.port]]
segment = "lan"
addrs = ["10.77.0.1/24"]
[node.config]
instance = "h1"
[[node]]
name = "h2"
role = "host"
[[node.port]]
segment = "lan"
addrs = ["10.77.0.3/24"]
[node.config]
instance = "h2"
[[host]]
name = "k1"
[[host.iface]]
segment = "lan"
addrs = ["10.77.0.2/24"]
"#
    )
}

#[test]
fn ui_shows_every_node_and_a_cut_link_in_headless_chromium() {
    if !root_or_skip() {
        return;
    }
    if !have("chromium") {
        eprintln!("SKIP: chromium is not installed (scripts/setup installs it)");
        return;
    }
    let name = lab_name('g', 'u');
    let lab = Lab::up(&name, &small_lab(&name));
    let ns = lab.netns();
    let ui = Ui::start(&lab);

    // The page shows every node and host alive, every link and segment up,
    // and refreshes (several polls in its 3 s).
    let dom = dump_dom(&ns, 3000, &ui.url);
    for id in ["node-h1", "node-h2", "host-k1"] {
        assert_attr(&dom, id, "data-alive", "true");
        assert_attr(&dom, &format!("row-{id}"), "data-alive", "true");
    }
    for id in ["link-h1-0", "link-h2-0", "link-k1-0", "seg-lan"] {
        assert_attr(&dom, id, "data-state", "up");
        assert_attr(&dom, &format!("row-{id}"), "data-state", "up");
    }
    assert!(
        polls_of(&dom) >= 2,
        "the page did not refresh: {}",
        polls_of(&dom)
    );

    // An open page: cut h1's TAP while it polls; it sees up -> down.
    let profile = Profile::new("live");
    let args = chromium_args(&ns, &profile, 60_000, &ui.url);
    let before = ui.polls.load(Ordering::SeqCst);
    let mut browser = Command::new("timeout")
        .args(["-k", "5", "90", "ip"])
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting chromium");
    assert!(
        wait_until(60, || ui.polls.load(Ordering::SeqCst) >= before + 2),
        "the page never polled"
    );
    assert!(
        browser.try_wait().unwrap().is_none(),
        "chromium ended before the cut"
    );
    let cut = run_bounded(10, "ip", &["-n", &ns, "link", "set", "h1-0", "down"]);
    assert!(cut.status.success(), "{}", text(&cut));
    let polls_at_cut = ui.polls.load(Ordering::SeqCst);
    let out = browser.wait_with_output().unwrap();
    assert!(out.status.success(), "chromium: {}", out.status);
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        ui.polls.load(Ordering::SeqCst) > polls_at_cut + 2,
        "the page stopped polling after the cut"
    );
    assert_attr(&dom, "link-h1-0", "data-state", "down");
    assert_attr(&dom, "row-link-h1-0", "data-state", "down");
    assert_attr(&dom, "link-h2-0", "data-state", "up");
    let seen = dom.split("<li ").skip(1).any(|li| {
        li.contains("data-id=\"link-h1-0\"")
            && li.contains("data-from=\"up\"")
            && li.contains("data-to=\"down\"")
    });
    assert!(
        seen,
        "the open page's change list has no link-h1-0 up -> down:\n{dom}"
    );

    // A page loaded now shows it down within its first 2 s.
    let dom = dump_dom(&ns, 2000, &ui.url);
    assert_attr(&dom, "link-h1-0", "data-state", "down");
    assert_attr(&dom, "row-link-h1-0", "data-state", "down");
    for id in ["node-h1", "node-h2", "host-k1"] {
        assert_attr(&dom, id, "data-alive", "true");
    }

    // Healed, it shows up again.
    let heal = run_bounded(10, "ip", &["-n", &ns, "link", "set", "h1-0", "up"]);
    assert!(heal.status.success(), "{}", text(&heal));
    let dom = dump_dom(&ns, 2000, &ui.url);
    assert_attr(&dom, "link-h1-0", "data-state", "up");

    // An impairment `lab link` records shows beside its link.
    let out = svcroute(&["lab", "link", "--lab", &name, "h2:0", "loss", "10"]);
    assert!(out.status.success(), "{}", text(&out));
    let dom = dump_dom(&ns, 2000, &ui.url);
    let row = dom
        .split("id=\"row-link-h2-0\"")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_default();
    assert!(
        row.contains("loss 10%"),
        "row-link-h2-0 shows no impairment: {row}"
    );

    drop(ui);
    lab.down();
}
