//! The run directory of a lab and its `state.json`.
//!
//! ```text
//! /run/svcroute/lab/<lab>/
//!   state.json        the plan and what was created so far (rewritten at every step)
//!   <node>.toml       generated node file
//!   <node>.sock       the node's control socket
//!   <node>.log        the node's stdout + stderr
//!   <host>.log        stdout + stderr of the host's commands
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use super::file::Lab;

/// Parent of all lab run directories.
pub(crate) fn root() -> PathBuf {
    Path::new(crate::CTL_DIR).join("lab")
}

/// The run directory of lab `lab`.
pub(crate) fn dir(lab: &str) -> PathBuf {
    root().join(lab)
}

/// What `lab up` has made, written as it goes so `down` and `status` know.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct State {
    /// Where the lab came from (a path or `<embedded default>`).
    pub(crate) source: String,
    /// `creating`, `up`, or `failed`.
    pub(crate) phase: String,
    /// The validated plan.
    pub(crate) lab: Lab,
    /// Namespaces created so far.
    pub(crate) netns: Vec<String>,
    /// Node name → pid.
    pub(crate) node_pids: BTreeMap<String, u32>,
    /// Host name → pids of its commands (each the leader of its own group).
    pub(crate) host_pids: BTreeMap<String, Vec<u32>>,
}

impl State {
    /// A fresh state for `lab`.
    pub(crate) fn new(lab: Lab, source: String) -> Self {
        Self {
            source,
            phase: "creating".into(),
            lab,
            netns: Vec::new(),
            node_pids: BTreeMap::new(),
            host_pids: BTreeMap::new(),
        }
    }

    /// The run directory.
    pub(crate) fn dir(&self) -> PathBuf {
        dir(&self.lab.name)
    }

    /// Write `state.json` (atomically: temp file + rename).
    pub(crate) fn save(&self) -> Result<()> {
        let d = self.dir();
        let tmp = d.join("state.json.tmp");
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, d.join("state.json"))
            .with_context(|| format!("writing {}", d.join("state.json").display()))
    }

    /// Read the state of lab `lab`, if its run directory has one.
    pub(crate) fn load(lab: &str) -> Option<Self> {
        let text = std::fs::read_to_string(dir(lab).join("state.json")).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Names of the labs with a run directory, sorted.
pub(crate) fn labs() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root())
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The lab a verb acts on and what `f` found in it: lab `lab` (a name or a
/// lab file), or else the only lab that is up in which `f` succeeds. With
/// no such lab, `f`'s own error (which names the bad input) is the answer;
/// `what` names the input when several labs have it.
pub(crate) fn find<T>(
    lab: Option<&str>,
    what: &str,
    f: impl Fn(&State) -> Result<T>,
) -> Result<(State, T)> {
    if let Some(l) = lab {
        let l = super::lab_of_arg(l)?;
        let st = State::load(&l).with_context(|| format!("lab {l} is not up"))?;
        let t = f(&st)?;
        return Ok((st, t));
    }
    let mut found = Vec::new();
    let mut errors = Vec::new();
    for l in labs() {
        let Some(st) = State::load(&l) else { continue };
        match f(&st) {
            Ok(t) => found.push((st, t)),
            Err(e) => errors.push(e),
        }
    }
    match found.len() {
        0 if errors.is_empty() => anyhow::bail!("no lab is up"),
        0 if errors.len() == 1 => Err(errors.remove(0)),
        0 => anyhow::bail!(
            "{}",
            errors
                .iter()
                .map(|e| format!("{e:#}"))
                .collect::<Vec<_>>()
                .join("\n")
        ),
        1 => Ok(found.remove(0)),
        _ => anyhow::bail!(
            "{what} is in several labs ({}); say which with --lab",
            found
                .iter()
                .map(|(s, _)| s.lab.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
