//! `lab link LINK down|up|loss PCT|clear`: cut, heal and degrade a segment,
//! a node's port or a kernel host's interface of a running lab (see
//! [`super::impair`] for where the rules act).

use anyhow::Result;
use svcroute_stack::phy::impair::Shape;

use super::impair::{self, Impairment};
use super::out;
use super::state;

/// What `lab link` does to the link.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum LinkAction {
    /// Cut the link: every frame through it is dropped, both directions
    /// (nftables in the lab namespace's bridges; link states do not change).
    Down,
    /// Heal a cut (a `loss` stays until `clear`).
    Up,
    /// Drop PCT percent of the frames at random (0..100, two decimals; 0:
    /// none), and on a node's port shape what it sends: `delay MS [jitter
    /// MS]`, `reorder PCT`, `duplicate PCT`, `corrupt PCT`, `rate MBIT`.
    /// Replaces the link's earlier loss and shape (not a cut). On a port
    /// each direction loses PCT; on a segment each frame crossing it does.
    Loss {
        /// The loss percentage, e.g. 10 or 0.5.
        pct: String,
        /// delay MS, jitter MS, reorder PCT, duplicate PCT, corrupt PCT,
        /// rate MBIT (node ports only: the node's phy layer does them).
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "SHAPE"
        )]
        shape: Vec<String>,
    },
    /// Remove every impairment of the link.
    Clear,
}

pub(super) fn link(lab: Option<&str>, spec: &str, action: &LinkAction) -> Result<()> {
    // Check the input before looking for labs, so a bad percentage is the
    // error even when no lab is up.
    let (loss, shape) = match action {
        LinkAction::Loss { pct, shape } => (
            impair::parse_pct(pct)?,
            Shape::parse(shape).map_err(|e| anyhow::anyhow!("lab link {spec} loss {pct}: {e}"))?,
        ),
        _ => (0, Shape::default()),
    };
    let (st, link) = state::find(lab, &format!("link {spec:?}"), |st| {
        impair::resolve(&st.lab, spec)
    })?;
    let mut imps = impair::load(&st);
    impair::check_shape(&link, &shape)?;
    let mut cur = match imps.iter().position(|i| i.link == link.name) {
        Some(i) => imps.remove(i),
        None => Impairment::none(link.name.clone()),
    };
    match action {
        LinkAction::Down => cur.down = true,
        LinkAction::Up => cur.down = false,
        LinkAction::Loss { .. } => {
            cur.loss_bp = loss;
            cur.shape = shape;
        }
        LinkAction::Clear => cur = Impairment::none(link.name.clone()),
    }
    let text = cur.describe();
    imps.push(cur);
    impair::store(&st, &imps)?;
    if !matches!(action, LinkAction::Down) {
        impair::forget_failed_neighbours(&st)?;
    }
    out(&format!(
        "lab {}: {} {} ({} port(s)): {text}\n",
        st.lab.name,
        link.kind.name(),
        link.name,
        link.ports.len()
    ))
}
