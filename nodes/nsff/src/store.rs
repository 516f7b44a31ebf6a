//! The state file: local SFs registered over REST ([`crate::rest`]), kept
//! across restarts (`state_file`).
//!
//! ```text
//!   POST /sf, DELETE /sf/<fqdn> ──► SfStore::save ──► <file>.tmp, fsync, rename, fsync dir
//!   Nsff::new ◄── SfStore::load ◄── <file> (missing: none yet)
//! ```
//!
//! The file is JSON, small and rewritten whole on every change, so that it
//! is always either the old table or the new one: a crash between the
//! write and the rename leaves the old file (and a stray `.tmp`, replaced
//! next time). A file that exists but cannot be read or parsed stops the
//! node at start, naming the file and the problem: starting with an empty
//! table would deregister every REST SF at the NR as if its owner had
//! removed it, and the next change would overwrite the evidence.
//!
//! ```json
//! {"version": 1, "sfs": [{"fqdn": "www.kern.example", "addr": "10.0.3.20", "port": 80, "tls_port": 443}]}
//! ```

// The persistence module: the state file itself.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::SfConfig;

/// The only format version so far.
const VERSION: u32 = 1;

/// The file's content.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    version: u32,
    sfs: Vec<SfConfig>,
}

/// Why the state file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading it failed (other than its absence).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// It is not a state file this version understands.
    #[error("{path} is not a valid nSFF state file: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// Writing it (or its directory) failed; the old file, if any, is
    /// unchanged.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file being written.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

/// Where REST-registered SFs are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SfStore {
    path: PathBuf,
}

impl SfStore {
    /// The store at `path` (nothing is read or created yet).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The SFs saved last; none if the file does not exist yet.
    pub fn load(&self) -> Result<Vec<SfConfig>, StoreError> {
        let text = match fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(StoreError::Read {
                    path: self.path.clone(),
                    source,
                })
            }
        };
        let invalid = |why: String| StoreError::Invalid {
            path: self.path.clone(),
            why,
        };
        let file: StateFile = serde_json::from_slice(&text).map_err(|e| invalid(e.to_string()))?;
        if file.version != VERSION {
            return Err(invalid(format!(
                "version {} (this nSFF reads version {VERSION})",
                file.version
            )));
        }
        Ok(file.sfs)
    }

    /// Replace the saved SFs with `sfs`, atomically: a temporary file
    /// beside it is written and synced, renamed over it, and the directory
    /// synced. The directory is created if missing.
    pub fn save(&self, sfs: &[SfConfig]) -> Result<(), StoreError> {
        let tmp = self.tmp_path();
        let err = |source| StoreError::Write {
            path: self.path.clone(),
            source,
        };
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        fs::create_dir_all(dir).map_err(err)?;
        let file = StateFile {
            version: VERSION,
            sfs: sfs.to_vec(),
        };
        // NOTE(unwrap): plain strings, numbers and addresses always serialize.
        let mut text = serde_json::to_vec_pretty(&file).unwrap();
        text.push(b'\n');
        let mut f = File::create(&tmp).map_err(err)?;
        f.write_all(&text).map_err(err)?;
        f.sync_all().map_err(err)?;
        drop(f);
        fs::rename(&tmp, &self.path).map_err(err)?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(err)
    }

    /// The temporary file a save writes first.
    fn tmp_path(&self) -> PathBuf {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".tmp");
        self.path.with_file_name(name)
    }
}

impl crate::core::Persist for SfStore {
    fn load(&self) -> Result<Vec<SfConfig>, String> {
        Self::load(self).map_err(|e| e.to_string())
    }

    fn save(&self, sfs: &[SfConfig]) -> Result<(), String> {
        Self::save(self, sfs).map_err(|e| e.to_string())
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system temp dir, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Self {
            let p = std::env::temp_dir()
                .join(format!("svcroute-nsff-store-{}-{tag}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            Self(p)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn sf(fqdn: &str, addr: &str) -> SfConfig {
        SfConfig {
            fqdn: fqdn.into(),
            addr: addr.parse().unwrap(),
            port: 8080,
            tls_port: 8443,
        }
    }

    #[test]
    fn round_trip_and_missing_file() {
        let d = Dir::new("rt");
        // The directory is created on the first save.
        let store = SfStore::new(d.0.join("sub/sfs.json"));
        assert_eq!(store.load().unwrap(), []);
        let sfs = [
            sf("www.a.example", "10.0.3.20"),
            sf("b.example", "fd00:3::21"),
        ];
        store.save(&sfs).unwrap();
        assert_eq!(store.load().unwrap(), sfs);
        store.save(&[]).unwrap();
        assert_eq!(store.load().unwrap(), []);
        assert!(!store.tmp_path().exists());
    }

    #[test]
    fn a_save_replaces_the_file_atomically() {
        let d = Dir::new("atomic");
        let store = SfStore::new(d.0.join("sfs.json"));
        store.save(&[sf("a.example", "10.0.3.20")]).unwrap();
        // A crash after the temporary file was written, before the rename:
        // the old table is still what loads, and the next save replaces
        // the stray temporary file.
        fs::write(store.tmp_path(), b"{\"version\": 1, \"sf").unwrap();
        assert_eq!(store.load().unwrap(), [sf("a.example", "10.0.3.20")]);
        // A reader holding the old file keeps reading the old content: the
        // new one is a new inode, not an overwrite.
        let old = File::open(store.path()).unwrap();
        store.save(&[sf("b.example", "10.0.3.21")]).unwrap();
        let mut before = String::new();
        io::Read::read_to_string(&mut &old, &mut before).unwrap();
        assert!(before.contains("a.example"), "{before}");
        assert_eq!(store.load().unwrap(), [sf("b.example", "10.0.3.21")]);
        assert!(!store.tmp_path().exists());
    }

    #[test]
    fn a_corrupt_or_unreadable_file_is_an_error_naming_it() {
        let d = Dir::new("bad");
        let path = d.0.join("sfs.json");
        let store = SfStore::new(&path);
        for (content, want) in [
            (
                &b"{\"version\": 1, \"sfs\": [{\"fqdn\": \"a.example\""[..],
                "EOF",
            ),
            (b"{\"version\": 2, \"sfs\": []}", "version 2"),
            (b"{\"version\": 1, \"sfs\": [], \"x\": 1}", "unknown field"),
            (
                b"{\"version\": 1, \"sfs\": [{\"fqdn\": \"a.example\", \"addr\": \"nope\"}]}",
                "invalid IP address",
            ),
        ] {
            fs::write(&path, content).unwrap();
            let e = store.load().unwrap_err();
            assert!(matches!(e, StoreError::Invalid { .. }), "{e:?}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!(
                    "{} is not a valid nSFF state file: ",
                    path.display()
                )),
                "{msg}"
            );
            assert!(msg.contains(want), "{msg} lacks {want:?}");
        }
        // A directory where the file should be: unreadable.
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        let e = store.load().unwrap_err();
        assert!(matches!(e, StoreError::Read { .. }), "{e:?}");
        assert!(e
            .to_string()
            .starts_with(&format!("cannot read {}", path.display())));
        // A file where its directory should be: the save fails, naming
        // the file.
        let blocker = d.0.join("file");
        fs::write(&blocker, b"").unwrap();
        let bad = blocker.join("sfs.json");
        let e = SfStore::new(&bad).save(&[]).unwrap_err();
        assert!(matches!(e, StoreError::Write { .. }), "{e:?}");
        assert!(e
            .to_string()
            .starts_with(&format!("cannot write {}", bad.display())));
    }
}
