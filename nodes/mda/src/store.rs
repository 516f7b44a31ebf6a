//! The on-disk store of a running MDA: its [`Persist`] over the
//! [write-ahead log](crate::wal).

// The state store: a persistence module, one of the places with files (clippy.toml).
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::io;
use std::path::Path;

use crate::core::Record;
use crate::driver::Persist;
use crate::wal::{Wal, WalError, WalOptions};

/// Persists every accepted update to a [`Wal`] in `dir` (fsynced before the
/// update is acknowledged) and compacts it into a snapshot when it grows.
#[derive(Debug)]
pub struct WalStore {
    wal: Wal<Record>,
}

impl WalStore {
    /// Open (or create) the store in `dir`, returning it and every record it
    /// held, to replay into a new core.
    pub fn open(dir: &Path) -> Result<(Self, Vec<Record>), WalError> {
        let (wal, records) = Wal::open(dir, WalOptions::default())?;
        Ok((Self { wal }, records))
    }
}

fn to_io(e: WalError) -> io::Error {
    io::Error::other(e.to_string())
}

impl Persist for WalStore {
    fn persist(&mut self, record: &Record) -> io::Result<()> {
        self.wal.append(record).map_err(to_io)
    }

    fn persist_batch(&mut self, records: &[Record]) -> io::Result<()> {
        self.wal.append_batch(records).map_err(to_io)
    }

    fn wants_compaction(&self) -> bool {
        self.wal.should_compact()
    }

    fn compact(&mut self, snapshot: &[Record]) -> io::Result<()> {
        self.wal.compact(snapshot).map_err(to_io)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn mark(n: u64) -> Record {
        Record::Watermark {
            accept_hwm: n,
            summary: vec![("service:directory-agent://10.0.0.1".into(), n)],
        }
    }

    fn hwm(r: &Record) -> u64 {
        match r {
            Record::Watermark { accept_hwm, .. } => *accept_hwm,
            Record::State(_) => panic!("unexpected state record"),
        }
    }

    #[test]
    fn what_was_persisted_comes_back_and_compaction_replaces_it() {
        let dir = std::env::temp_dir().join(format!("svcroute-walstore-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            let (mut st, records) = WalStore::open(&dir).unwrap();
            assert!(records.is_empty());
            for n in 1..=3 {
                st.persist(&mark(n)).unwrap();
            }
        }
        {
            let (mut st, records) = WalStore::open(&dir).unwrap();
            assert_eq!(records.iter().map(hwm).collect::<Vec<_>>(), [1, 2, 3]);
            st.persist_batch(&[mark(4), mark(5)]).unwrap();
        }
        {
            let (mut st, records) = WalStore::open(&dir).unwrap();
            assert_eq!(records.iter().map(hwm).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
            st.compact(&[mark(9)]).unwrap();
            st.persist(&mark(10)).unwrap();
        }
        let (_st, records) = WalStore::open(&dir).unwrap();
        assert_eq!(records.iter().map(hwm).collect::<Vec<_>>(), [9, 10]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
