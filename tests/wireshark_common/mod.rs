//! Running tshark with our Lua dissectors (`wireshark/svcroute.lua`) and
//! reading what it decoded, for `tests/wireshark.rs` (golden fixtures) and
//! `tests/wireshark_labs.rs` (captures of the example labs).
//!
//! tshark runs with `HOME` pointing at an empty directory, so a copy of the
//! plugin installed by `scripts/setup --wireshark-plugin` (or any other
//! personal plugin or preference) cannot change what the tests see: only
//! the worktree's `svcroute.lua` is loaded, with `-X lua_script:`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The dissector file under test.
pub(crate) const LUA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/wireshark/svcroute.lua");

/// Our protocols' filter prefixes: an expert of these is ours.
pub(crate) const OURS: [&str; 9] = [
    "gff.",
    "nsff.",
    "nrctl.",
    "rosa.",
    "sticky.",
    "sarigp.",
    "appmetrics.",
    "mslp.",
    "sagencap.",
];

/// One decoded frame: every field as `(filter name, value)` in tree order,
/// and the expert infos.
#[derive(Debug, Default)]
pub(crate) struct Frame {
    pub(crate) number: u64,
    pub(crate) fields: Vec<(String, String)>,
    pub(crate) experts: Vec<Expert>,
}

/// One expert info: the field it was raised with and its message.
#[derive(Debug, Clone)]
pub(crate) struct Expert {
    pub(crate) field: String,
    pub(crate) message: String,
}

impl Frame {
    /// Every value of field `name`, in tree order.
    pub(crate) fn values(&self, name: &str) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Whether protocol (or field) `name` is in the frame.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.fields.iter().any(|(k, _)| k == name)
    }

    /// Experts raised as `<proto>.malformed` by our dissectors, anything
    /// Wireshark itself calls malformed (`_ws.malformed`: an exception,
    /// e.g. a read past the end), Lua errors, bad checksums and pathID
    /// mismatches of ours.
    pub(crate) fn errors(&self) -> Vec<&Expert> {
        self.experts
            .iter()
            .filter(|e| {
                e.field.starts_with("_ws.malformed")
                    || e.message.starts_with("Lua Error")
                    || (is_ours(&e.field)
                        && (e.field.ends_with(".malformed")
                            || e.field == "nsff.checksum_bad"
                            || e.field == "gff.pathid_mismatch"))
            })
            .collect()
    }

    /// Experts raised as `<proto>.unknown` by our dissectors (a code point
    /// svcroute keeps but does not know), and the built-in SLP dissector's
    /// "Unknown Function Type" (what it says of AntiEtrpRqst without us).
    pub(crate) fn unknowns(&self) -> Vec<&Expert> {
        self.experts
            .iter()
            .filter(|e| {
                (is_ours(&e.field) && e.field.ends_with(".unknown"))
                    || e.field == "srvloc.function.unknown"
            })
            .collect()
    }

    /// The fields of the frame, one per line, for failure messages.
    pub(crate) fn dump(&self) -> String {
        let mut s = format!("frame {}:\n", self.number);
        for (k, v) in &self.fields {
            s.push_str(&format!("  {k} = {v}\n"));
        }
        for e in &self.experts {
            s.push_str(&format!("  EXPERT {}: {}\n", e.field, e.message));
        }
        s
    }
}

fn is_ours(field: &str) -> bool {
    OURS.iter().any(|p| field.starts_with(p))
}

/// An empty directory used as tshark's `HOME`.
fn empty_home() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("svcroute-tshark-home-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("creating tshark's HOME");
    dir
}

/// `tshark -r pcap -X lua_script:svcroute.lua -T json`, every frame decoded.
/// Panics if tshark fails or reports a Lua error while loading the script.
pub(crate) fn decode(pcap: &Path, extra: &[&str]) -> Vec<Frame> {
    let lua = format!("lua_script:{LUA}");
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", "300", "tshark", "-n", "-r"])
        .arg(pcap)
        .args(["-X", &lua, "-T", "json", "--no-duplicate-keys"])
        .args(extra)
        .env("HOME", empty_home())
        .env_remove("XDG_CONFIG_HOME");
    let out = cmd.output().expect("running tshark");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tshark -r {}: {}\n{stderr}",
        pcap.display(),
        out.status
    );
    assert!(
        !stderr.contains("Lua") && !stderr.contains("rror"),
        "tshark complained loading {LUA}:\n{stderr}"
    );
    // Lossy: Wireshark's own dissectors (HTTP's Host, on garbage) may put
    // invalid UTF-8 into the JSON.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "tshark -T json output is not JSON ({e}): {}",
            stdout.chars().take(2000).collect::<String>()
        )
    });
    let packets = json.as_array().cloned().unwrap_or_default();
    packets
        .iter()
        .map(|p| {
            let layers = &p["_source"]["layers"];
            let mut frame = Frame::default();
            walk(layers, &mut frame);
            frame.number = frame
                .values("frame.number")
                .first()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            frame
        })
        .collect()
}

/// Collect every `key: "value"` of the tree (arrays are repeated fields,
/// objects subtrees: a subtree key is recorded with an empty value), and
/// every `_ws.expert` object as an [`Expert`].
fn walk(v: &Value, frame: &mut Frame) {
    let Some(map) = v.as_object() else {
        return;
    };
    for (k, v) in map {
        let items: Vec<&Value> = match v {
            Value::Array(a) => a.iter().collect(),
            other => vec![other],
        };
        for item in items {
            match item {
                Value::String(s) => frame.fields.push((k.clone(), s.clone())),
                Value::Object(o) => {
                    if k == "_ws.expert" {
                        frame.experts.push(expert(o));
                    }
                    if k.starts_with("_ws.malformed") {
                        frame.experts.push(Expert {
                            field: k.clone(),
                            message: format!("{item}"),
                        });
                    }
                    frame.fields.push((k.clone(), String::new()));
                    walk(item, frame);
                }
                _ => {}
            }
        }
    }
}

fn expert(o: &serde_json::Map<String, Value>) -> Expert {
    let field = o
        .keys()
        .find(|k| !k.starts_with("_ws.expert"))
        .cloned()
        .unwrap_or_default();
    let message = o
        .get("_ws.expert.message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Expert { field, message }
}

/// Frames by number.
pub(crate) fn by_number(frames: Vec<Frame>) -> BTreeMap<u64, Frame> {
    frames.into_iter().map(|f| (f.number, f)).collect()
}
