//! `lab down`: remove everything of a lab — processes, namespaces, `ip netns
//! exec` files, the run directory — whatever state it is in, without
//! touching another lab's namespaces.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};

use super::file::{lab_netns, DEFAULT_LAB_NAME};
use super::state::{self, State};
use super::{lab_of_arg, netns, out};

pub(super) fn down(arg: Option<&str>) -> Result<()> {
    let lab = match arg {
        Some(a) => lab_of_arg(a)?,
        None => {
            let labs = state::labs();
            match labs.len() {
                0 => DEFAULT_LAB_NAME.to_owned(),
                1 => labs[0].clone(),
                _ => bail!("several labs are up ({}); say which", labs.join(", ")),
            }
        }
    };
    let msg = teardown(&lab)?;
    out(&format!("{msg}\n"))?;
    Ok(())
}

/// Remove everything of lab `lab`, whatever state it is in. Returns a summary.
pub(super) fn teardown(lab: &str) -> Result<String> {
    let dir = state::dir(lab);
    let lab_ns = lab_netns(lab);
    let prefix = format!("{lab_ns}-");
    let listed = netns::list()?;
    let own = State::load(lab);
    let others: Vec<(String, Option<State>)> = state::labs()
        .into_iter()
        .filter(|l| l != lab)
        .map(|l| (l.clone(), State::load(&l)))
        .collect();
    // Another lab `<lab>-x` owns `svl-<lab>-x` and `svl-<lab>-x-*`.
    let owned_by_other = |ns: &str| {
        others.iter().any(|(o, s)| {
            let ons = lab_netns(o);
            ns == ons
                || ns.starts_with(&format!("{ons}-"))
                || s.as_ref().is_some_and(|s| s.netns.iter().any(|n| n == ns))
        })
    };
    let mut spaces: Vec<String> = Vec::new();
    let known = own
        .iter()
        .flat_map(|s| s.netns.iter().cloned().chain(s.lab.namespaces()));
    let found = listed
        .iter()
        .filter(|ns| **ns == lab_ns || ns.starts_with(&prefix))
        .cloned();
    for ns in known.chain(found) {
        let mine = own
            .as_ref()
            .is_some_and(|s| s.lab.namespaces().contains(&ns));
        if listed.contains(&ns) && !spaces.contains(&ns) && (mine || !owned_by_other(&ns)) {
            spaces.push(ns);
        }
    }
    // Host namespaces first, the lab namespace (bridges) last.
    spaces.sort_by_key(|ns| *ns == lab_ns);

    // Processes: everything inside the namespaces, a few rounds in case
    // something forks while dying.
    let mut killed = 0;
    let mut stuck = Vec::new();
    for _ in 0..3 {
        let me = std::process::id();
        let mut pids: Vec<u32> = spaces
            .iter()
            .flat_map(|ns| netns::pids(ns))
            .filter(|&p| p != me)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        if pids.is_empty() {
            break;
        }
        killed += pids.len();
        stuck = netns::terminate(&pids, Duration::from_secs(3));
    }

    let mut errors = Vec::new();
    if !stuck.is_empty() {
        errors.push(format!("processes survived SIGKILL: {stuck:?}"));
    }
    if let Some(s) = &own {
        super::machine::remove(&s.lab, &mut errors);
    }
    for ns in &spaces {
        if let Err(e) = netns::del(ns) {
            errors.push(format!("{e:#}"));
        }
    }
    // `ip netns exec` files (a shim node's hosts file) of our namespaces; the
    // shim removes its own when it stops, not when it is killed.
    let etc: Vec<String> = spaces
        .iter()
        .cloned()
        .chain(own.iter().flat_map(|s| s.lab.namespaces()))
        .collect();
    for ns in etc {
        let d = Path::new(netns::ETC_NETNS).join(&ns);
        if d.exists() {
            if let Err(e) = std::fs::remove_dir_all(&d) {
                errors.push(format!("removing {}: {e}", d.display()));
            }
        }
    }
    let had_dir = dir.exists();
    if had_dir {
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            errors.push(format!("removing {}: {e}", dir.display()));
        }
    }
    if !errors.is_empty() {
        bail!("lab {lab}: cleanup incomplete:\n  {}", errors.join("\n  "));
    }
    if spaces.is_empty() && !had_dir && killed == 0 {
        return Ok(format!("lab {lab} is not up: nothing to remove"));
    }
    Ok(format!(
        "lab {lab} down: stopped {killed} process(es), removed {} namespace(s){}",
        spaces.len(),
        if had_dir {
            format!(" and {}", dir.display())
        } else {
            String::new()
        }
    ))
}
