//! Secure by default (issue 12): at `lab up`, every lab gets its own random
//! pre-shared keys (ring's `SystemRandom`), written into the generated node
//! files and into `<rundir>/keys.toml`, unless the lab file says
//! `keys = "none"`. And the SARs of every lab take announcements only on
//! the ports their instances are on (`instance_ports`, from the topology).
//!
//! | family | written to | key |
//! |---|---|---|
//! | fabric (RFC 8677) | `[[nr.key]]`, `[[nsff.key]]`, `[fwd] auth` | one per lab, ID 1 |
//! | SAR IGP | `[sar]`/`[sag] igp_key` | one per lab |
//! | ROSA announcements | `[sar]`/`[sag] announce_keys`, `[host.rosa] key` | one per lab |
//! | mSLP mesh peers | `[[mda.keys]]` (admits peers), `[[mda.sign_keys]]` | one HMAC-SHA256 key, SPI `lab-peers` |
//!
//! A family some node of the lab file already configures (any of its keys
//! on any node) is left to the file entirely: a half-generated family
//! would split the lab. The node files and `state.json` in the run
//! directory hold the keys, so a node restarted from them keeps them;
//! `lab down` removes them with the run directory.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context as _, Result};
use ring::rand::SecureRandom as _;

use super::file::{check_node_file, Lab};

/// Octets of every generated secret.
const SECRET_LEN: usize = 32;

/// The SLP SPI of generated MDA peer keys.
pub(crate) const MDA_SPI: &str = "lab-peers";

/// The generated secrets, hex, by family.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct LabKeys {
    pub(crate) fabric: String,
    pub(crate) igp: String,
    pub(crate) announce: String,
    pub(crate) mda: String,
}

impl LabKeys {
    /// Fresh random keys.
    pub(crate) fn generate() -> Result<Self> {
        let rng = ring::rand::SystemRandom::new();
        let one = || -> Result<String> {
            let mut b = [0u8; SECRET_LEN];
            rng.fill(&mut b)
                .map_err(|_| anyhow::anyhow!("the system random source failed"))?;
            Ok(b.iter().map(|x| format!("{x:02x}")).collect())
        };
        Ok(Self {
            fabric: one()?,
            igp: one()?,
            announce: one()?,
            mda: one()?,
        })
    }
}

/// A node file split into its leading comment lines and its table.
fn split(text: &str) -> Result<(String, toml::Table)> {
    let head: String = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let table: toml::Table = toml::from_str(text).context("reading a generated node file")?;
    Ok((head, table))
}

fn has(t: &toml::Table, path: &[&str]) -> bool {
    let mut cur = t;
    for (i, k) in path.iter().enumerate() {
        match cur.get(*k) {
            None => return false,
            Some(v) if i + 1 == path.len() => {
                return !matches!(v, toml::Value::Array(a) if a.is_empty())
            }
            Some(toml::Value::Table(next)) => cur = next,
            Some(_) => return false,
        }
    }
    false
}

/// Which families some node of the lab already configures.
fn configured(lab: &Lab) -> Result<BTreeSet<&'static str>> {
    let mut set = BTreeSet::new();
    for n in &lab.nodes {
        let (_, t) = split(&n.config_text)?;
        let r = n.role.as_str();
        let checks: &[(&'static str, &[&str])] = match r {
            "nr" => &[("fabric", &["nr", "key"])],
            "nsff" => &[("fabric", &["nsff", "key"])],
            "fwd" => &[("fabric", &["fwd", "auth"])],
            "sar" => &[
                ("igp", &["sar", "igp_key"]),
                ("announce", &["sar", "announce_keys"]),
            ],
            "sag" => &[
                ("igp", &["sag", "igp_key"]),
                ("announce", &["sag", "announce_keys"]),
            ],
            "host" => &[("announce", &["host", "rosa", "key"])],
            "mda" => &[("mda", &["mda", "keys"]), ("mda", &["mda", "sign_keys"])],
            _ => &[],
        };
        for (family, path) in checks {
            if has(&t, path) {
                set.insert(*family);
            }
        }
    }
    Ok(set)
}

fn table(pairs: &[(&str, toml::Value)]) -> toml::Value {
    toml::Value::Table(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
    )
}

/// Write `keys` into every node of `lab` whose family the file leaves open.
fn apply_keys(lab: &mut Lab, keys: &LabKeys) -> Result<()> {
    let taken = configured(lab)?;
    let open = |f: &str| !taken.contains(f);
    let s = |v: &str| toml::Value::String(v.to_owned());
    for n in &mut lab.nodes {
        let (head, mut t) = split(&n.config_text)?;
        let role = n.role.clone();
        let Some(sec) = t.get_mut(&role).and_then(toml::Value::as_table_mut) else {
            continue;
        };
        let mut changed = true;
        match role.as_str() {
            "nr" | "nsff" if open("fabric") => {
                let k = table(&[
                    ("id", toml::Value::Integer(1)),
                    ("secret", s(&keys.fabric)),
                    ("hex", toml::Value::Boolean(true)),
                ]);
                sec.insert("key".into(), toml::Value::Array(vec![k]));
            }
            "fwd" if open("fabric") => {
                let k = table(&[
                    ("key_id", toml::Value::Integer(1)),
                    ("secret", s(&keys.fabric)),
                ]);
                sec.insert("auth".into(), k);
            }
            "sar" | "sag" => {
                changed = false;
                if open("igp") {
                    let k = table(&[
                        ("key_id", toml::Value::Integer(1)),
                        ("secret", s(&keys.igp)),
                    ]);
                    sec.insert("igp_key".into(), k);
                    changed = true;
                }
                if open("announce") {
                    let k = table(&[
                        ("key_id", toml::Value::Integer(1)),
                        ("secret", s(&keys.announce)),
                    ]);
                    sec.insert("announce_keys".into(), toml::Value::Array(vec![k]));
                    changed = true;
                }
            }
            "host" if open("announce") => {
                // Only hosts with a ROSA shim sign announcements.
                match sec.get_mut("rosa").and_then(toml::Value::as_table_mut) {
                    Some(rosa) => {
                        rosa.insert("key_id".into(), toml::Value::Integer(1));
                        rosa.insert("key".into(), s(&keys.announce));
                    }
                    None => changed = false,
                }
            }
            "mda" if open("mda") => {
                let text = format!("hex:{}", keys.mda);
                let verify = table(&[
                    ("spi", s(MDA_SPI)),
                    ("bsd", s("hmac-sha256")),
                    ("key", s(&text)),
                    ("admits", toml::Value::Array(vec![s("peer")])),
                ]);
                let sign = table(&[
                    ("spi", s(MDA_SPI)),
                    ("bsd", s("hmac-sha256")),
                    ("key", s(&text)),
                ]);
                sec.insert("keys".into(), toml::Value::Array(vec![verify]));
                sec.insert("sign_keys".into(), toml::Value::Array(vec![sign]));
            }
            _ => changed = false,
        }
        if changed {
            n.config_text = format!(
                "{head}{}",
                toml::to_string(&t).context("serializing a node file")?
            );
        }
    }
    Ok(())
}

/// Whether a node serves a ROSA service (announces instances): a host whose
/// `[host.rosa] serve` is not empty.
fn serves(role: &str, t: &toml::Table) -> bool {
    role == "host" && has(t, &["host", "rosa", "serve"])
}

/// Give every SAR and SAG without `instance_ports` the list of its
/// client-facing ports whose segment holds an instance.
fn apply_instance_ports(lab: &mut Lab) -> Result<()> {
    let mut instance_segments = BTreeSet::new();
    for n in &lab.nodes {
        let (_, t) = split(&n.config_text)?;
        if serves(&n.role, &t) {
            instance_segments.extend(n.ports.iter().map(|p| p.segment.clone()));
        }
    }
    for n in &mut lab.nodes {
        if n.role != "sar" && n.role != "sag" {
            continue;
        }
        let (head, mut t) = split(&n.config_text)?;
        let role = n.role.clone();
        let Some(sec) = t.get_mut(&role).and_then(toml::Value::as_table_mut) else {
            continue;
        };
        if sec.contains_key("instance_ports") {
            continue;
        }
        // Ports facing SARs: `sar_ports`, else the neighbours' ports.
        let sar_ports: BTreeSet<i64> = match sec.get("sar_ports").and_then(|v| v.as_array()) {
            Some(a) => a.iter().filter_map(toml::Value::as_integer).collect(),
            None => sec
                .get("neighbors")
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
                .filter_map(|nb| nb.get("port").and_then(toml::Value::as_integer))
                .collect(),
        };
        let list: Vec<toml::Value> = n
            .ports
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                !sar_ports.contains(&(*i as i64)) && instance_segments.contains(&p.segment)
            })
            .map(|(i, _)| toml::Value::Integer(i as i64))
            .collect();
        sec.insert("instance_ports".into(), toml::Value::Array(list));
        n.config_text = format!(
            "{head}{}",
            toml::to_string(&t).context("serializing a node file")?
        );
    }
    Ok(())
}

/// Make `lab` secure by default: instance ports always, keys unless the
/// lab file said `keys = "none"`. Returns the keys written (`None`: none).
pub(crate) fn secure(lab: &mut Lab, keys: Option<&LabKeys>) -> Result<()> {
    apply_instance_ports(lab)?;
    if let (true, Some(k)) = (lab.keyed, keys) {
        apply_keys(lab, k)?;
    }
    for n in &lab.nodes {
        check_node_file(&n.role, &n.config_text, &n.name)
            .with_context(|| format!("[[node]] {:?} with its generated keys", n.name))?;
    }
    Ok(())
}

/// At `lab up`, before anything is made: fresh keys for `lab` (if
/// keyed) and [`secure`]. The keys are for [`save`].
pub(crate) fn prepare(lab: &mut Lab) -> Result<Option<LabKeys>> {
    // Each machine would draw keys of its own, and the halves of the lab
    // could not talk: a lab across machines brings its keys in the file.
    if lab.keyed && lab.machines.this.is_some() {
        anyhow::bail!(
            "lab {}: a part of a lab across machines cannot generate keys (each machine \
             would draw its own): write the keys in the lab file's node sections, or set \
             keys = \"none\" (docs/security.md)",
            lab.name
        );
    }
    let keys = if lab.keyed {
        Some(LabKeys::generate()?)
    } else {
        None
    };
    secure(lab, keys.as_ref())?;
    Ok(keys)
}

/// Keep the keys in `dir/keys.toml` (mode 0600), for key holders' tools.
pub(crate) fn save(dir: &Path, lab: &Lab, keys: Option<&LabKeys>) -> Result<()> {
    let Some(k) = keys else {
        return Ok(());
    };
    let path = dir.join("keys.toml");
    let text = format!(
        "# Pre-shared keys of lab {:?}, generated at `lab up` (docs/security.md).\n{}",
        lab.name,
        toml::to_string(k)?
    );
    write_private(&path, &text).with_context(|| format!("writing {}", path.display()))
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::lab::file::parse;

    const RFC8677: &str = include_str!("../../examples/labs/rfc8677.toml");
    const ROSA_SMALL: &str = include_str!("../../examples/labs/rosa-small.toml");
    const MSLP: &str = include_str!("../../examples/labs/mslp.toml");

    fn keys() -> LabKeys {
        LabKeys {
            fabric: "11".repeat(32),
            igp: "22".repeat(32),
            announce: "33".repeat(32),
            mda: "44".repeat(32),
        }
    }

    fn node<'a>(lab: &'a Lab, name: &str) -> &'a str {
        &lab.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap()
            .config_text
    }

    #[test]
    fn the_rfc8677_lab_gets_one_fabric_key_everywhere() {
        let mut lab = parse(RFC8677, "t").unwrap();
        assert!(lab.keyed);
        secure(&mut lab, Some(&keys())).unwrap();
        let fabric = "11".repeat(32);
        for n in ["nr", "nsff1", "nsff2", "f1", "f2", "f3"] {
            assert!(node(&lab, n).contains(&fabric), "{n}: {}", node(&lab, n));
        }
        let nr: crate::config::NrFile = crate::config::parse_str(node(&lab, "nr"), "t").unwrap();
        assert_eq!(nr.nr.keys[0].bytes().unwrap(), vec![0x11; 32]);
        let f1: crate::config::FwdFile = crate::config::parse_str(node(&lab, "f1"), "t").unwrap();
        assert_eq!(f1.fwd.secret().unwrap().unwrap().1, vec![0x11; 32]);
        // The header comments survive.
        assert!(node(&lab, "nr").starts_with("# Generated by"));
        // The host SF has no ROSA shim: untouched.
        assert!(!node(&lab, "sf2").contains(&"33".repeat(32)));
    }

    #[test]
    fn keys_none_opts_out_and_a_configured_family_is_left_alone() {
        let text = RFC8677.replace("name = \"rfc8677\"", "name = \"rfc8677\"\nkeys = \"none\"");
        let mut lab = parse(&text, "t").unwrap();
        assert!(!lab.keyed);
        secure(&mut lab, Some(&keys())).unwrap();
        assert!(!node(&lab, "nr").contains(&"11".repeat(32)));
        assert!(parse(
            &RFC8677.replace("name = \"rfc8677\"", "name = \"x\"\nkeys = \"some\""),
            "t"
        )
        .is_err());
        // One SAR of rosa-small given an IGP key by hand: no SAR gets the
        // generated one (s1 stays unkeyed), the announcement keys are still
        // generated, for SARs and serving hosts alike.
        let own = "sar_ports = [0]\nigp_key = { key_id = 1, secret = \"5ec2e75ec2e75ec2e75ec2e75ec2e75e\" }";
        let text = ROSA_SMALL.replacen("sar_ports = [0]", own, 1);
        assert_ne!(text, ROSA_SMALL);
        let mut lab = parse(&text, "t").unwrap();
        secure(&mut lab, Some(&keys())).unwrap();
        assert!(!node(&lab, "s1").contains(&"22".repeat(32)));
        assert!(node(&lab, "s2").contains("5ec2e75ec2e75ec2e75ec2e75ec2e75e"));
        for n in ["s1", "s2", "i1", "i2"] {
            assert!(
                node(&lab, n).contains(&"33".repeat(32)),
                "{n}: {}",
                node(&lab, n)
            );
        }
    }

    #[test]
    fn sars_take_announcements_only_where_instances_are() {
        let mut lab = parse(ROSA_SMALL, "t").unwrap();
        secure(&mut lab, None).unwrap();
        // s1: port 0 faces the client segment (no instance), port 1 s2.
        let s1: crate::config::SarFile = crate::config::parse_str(node(&lab, "s1"), "t").unwrap();
        assert_eq!(s1.sar.instance_ports, Some(vec![]));
        // s2: port 0 faces s1, port 1 the instances' segment.
        let s2: crate::config::SarFile = crate::config::parse_str(node(&lab, "s2"), "t").unwrap();
        assert_eq!(s2.sar.instance_ports, Some(vec![1]));
    }

    #[test]
    fn mda_peers_get_a_signing_and_a_verifying_key() {
        let mut lab = parse(MSLP, "t").unwrap();
        secure(&mut lab, Some(&keys())).unwrap();
        let mdas: Vec<_> = lab.nodes.iter().filter(|n| n.role == "mda").collect();
        assert!(!mdas.is_empty());
        for n in mdas {
            assert!(n.config_text.contains(MDA_SPI), "{}", n.config_text);
            assert!(n.config_text.contains(&format!("hex:{}", "44".repeat(32))));
        }
    }
}
