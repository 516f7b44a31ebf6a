//! `lab exec` and `lab logs`: reaching into a running lab by node or host
//! name.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::process::ExitStatusExt as _;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use super::state::{self, State};

/// What a name is in a lab.
pub(super) enum Target {
    Node,
    Host(String),
}

/// Find the lab (given or the only one) that has node or host `name`.
pub(super) fn find_target(lab: Option<&str>, name: &str) -> Result<(State, Target)> {
    state::find(lab, &format!("{name:?}"), |st| {
        if let Some(h) = st.lab.hosts.iter().find(|h| h.name == name) {
            return Ok(Target::Host(h.netns.clone()));
        }
        if st.lab.nodes.iter().any(|n| n.name == name) {
            return Ok(Target::Node);
        }
        bail!("no node or host {name:?} in lab {}", st.lab.name)
    })
}

pub(super) fn exec(lab: Option<&str>, target: &str, cmd: &[String]) -> Result<()> {
    let (st, t) = find_target(lab, target)?;
    let ns = match t {
        Target::Host(ns) => ns,
        Target::Node => st.lab.netns.clone(),
    };
    let status = Command::new("ip")
        .args(["netns", "exec", &ns])
        .args(cmd)
        .status()
        .context("running `ip netns exec`")?;
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    std::process::exit(code);
}

pub(super) fn logs(lab: Option<&str>, name: &str, follow: bool) -> Result<()> {
    let (st, _) = find_target(lab, name)?;
    let path = st.dir().join(format!("{name}.log"));
    let mut f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !follow => {
            println!("({} has no log: no commands)", name);
            return Ok(());
        }
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    let mut out = std::io::stdout().lock();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        f.read_to_end(&mut buf)?;
        out.write_all(&buf)?;
        out.flush()?;
        if !follow {
            return Ok(());
        }
        if !path.exists() {
            bail!("{} was removed (lab down?)", path.display());
        }
        std::thread::sleep(Duration::from_millis(200));
        // A truncated log starts over.
        let pos = f.stream_position()?;
        if f.metadata()?.len() < pos {
            f.seek(SeekFrom::Start(0))?;
        }
    }
}
