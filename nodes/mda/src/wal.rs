// The persistence module: the one place of the crate with files (clippy.toml).
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]
// Over 800 lines: one room, the log format (framing, checksums, snapshots, the directory lock), and a third of the file is its crash and corruption tests.
//! # The write-ahead log: an acknowledged registration survives a crash
//!
//! The MDA appends every accepted update to a [`Wal`] *before* it sends the
//! SrvAck (SPEC §4, "Durability"). [`Wal::append`] returns only after the
//! record's bytes are written **and** `fdatasync`ed: that return is the
//! durability point. An update whose `append` returned `Ok` is replayed by the
//! next [`Wal::open`], even if the process is SIGKILLed or the machine loses
//! power the instant after; an update whose `append` had not returned may or
//! may not come back, and is never acknowledged.
//!
//! ```text
//!   accepted update ─► Wal::append ─► write(2) + fdatasync(2) ─► SrvAck
//!                                                                  │
//!   restart: Wal::open ─► snapshot records, then log records ─► core state
//!   state grows: Wal::compact(full state) ─► new snapshot + empty log
//! ```
//!
//! The log is generic over the record type: any `T: Serialize +
//! DeserializeOwned`, encoded with postcard. The caller decides when to
//! compact ([`Wal::len_bytes`], [`Wal::records_since_snapshot`],
//! [`Wal::should_compact`] with [`WalOptions::compact_after`]) and hands
//! [`Wal::compact`] its whole current state; replay is then that state
//! followed by the records appended since.
//!
//! ## Directory layout
//!
//! One directory per MDA; two MDAs never share it (see `lock`).
//!
//! | name                    | what                                                  |
//! |-------------------------|-------------------------------------------------------|
//! | `lock`                  | `"<pid> <start time>\n"` of the owning process         |
//! | `snapshot`              | the state at the start of log generation *g* (absent before the first compaction, which means *g* = 0) |
//! | `log-<g as 16 hex>`     | the records appended since that snapshot               |
//! | `*.tmp`                 | files being written; removed by `open`                 |
//!
//! Every file is written under a temporary name, fsynced, renamed into place,
//! and the directory fsynced, so a file under its final name always has a
//! complete header. [`Wal::compact`] moves from generation *g* to *g + 1*:
//!
//! 1. write `snapshot.tmp` (generation *g + 1*), fsync it;
//! 2. write an empty `log-<g+1>.tmp`, fsync, rename to `log-<g+1>`, fsync dir;
//! 3. rename `snapshot.tmp` to `snapshot`, fsync dir — **the commit point**;
//! 4. remove `log-<g>`, fsync dir.
//!
//! A crash anywhere leaves a directory that `open` reads unambiguously: the
//! `snapshot` names the one live log generation; older logs are superseded
//! (removed, never replayed, so nothing is duplicated) and newer ones are
//! empty leftovers of a compaction that did not commit (removed).
//!
//! ## File format
//!
//! Both kinds of file start with the same 48-byte header and continue with
//! frames; all integers little-endian.
//!
//! ```text
//!  0        8     10   11   12     16           24           32           40           48
//!  +--------+-----+----+----+------+------------+------------+------------+------------+
//!  | magic  | ver |kind|  0 |   0  | generation |    salt    |   count    |  checksum  |
//!  +--------+-----+----+----+------+------------+------------+------------+------------+
//!   magic "SVCRWAL\n", ver 1, kind 1 = log, 2 = snapshot; count = number of
//!   records (snapshot) or 0 (log); checksum = SHA-256(bytes 0..40)[..8].
//!
//!  frame:   0       4            12
//!           +-------+------------+---------------------+
//!           |  len  |  checksum  |  payload (len bytes) |   payload = postcard(T)
//!           +-------+------------+---------------------+
//!   checksum = SHA-256(salt ‖ len ‖ payload)[..8]
//! ```
//!
//! The salt is random per file. It makes a frame's checksum unforgeable by
//! whoever controls record contents (registrations come from the network),
//! so a valid-looking frame can never appear inside another record's bytes.
//!
//! ## Recovery rules
//!
//! A log is read frame by frame. At the first frame that does not check (too
//! short, length over [`WalOptions::max_record_len`], bad checksum):
//!
//! - if no valid frame starts anywhere after it and what remains is no longer
//!   than one frame, it is a **torn tail**: the append that wrote it never
//!   returned, so it was never acknowledged. `open` truncates the file there
//!   (and fsyncs) and carries on;
//! - otherwise acknowledged records follow it: that is **corruption**, and
//!   `open` fails with [`WalError::Corrupt`] naming the file and offset rather
//!   than silently drop acknowledged data.
//!
//! A frame that checks but does not decode as `T` is always an error
//! ([`WalError::Decode`]). A snapshot was fsynced before it was renamed into
//! place, so any damage in it is an error.
//!
//! Files are read whole into memory; the caller bounds them by compacting.
//!
//! ## Locking
//!
//! Without `flock` (the crate forbids `unsafe`, and `File::lock` is newer
//! than the workspace MSRV) the directory is guarded by a pid file created
//! atomically with `link(2)`. A lock whose process is gone — no
//! `/proc/<pid>`, a zombie, or a different start time (pid reused) — is stale
//! and taken over. Taking over a stale lock is not atomic against a second
//! process starting at the same instant on the same directory; the
//! supervisor starts one MDA per directory.
//!
//! ## Failures
//!
//! After a failed write or sync the file's state is unknown (a failed
//! `fsync` may have dropped dirty pages), so the [`Wal`] refuses further
//! writes with [`WalError::Poisoned`]; drop it and [`Wal::open`] again,
//! which recovers. A record whose `append` failed may or may not be replayed.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::marker::PhantomData;
use std::ops::Range;
use std::path::{Path, PathBuf};

use ring::digest;
use ring::rand::{SecureRandom, SystemRandom};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Default bound on one record's encoded size: 1 MiB.
pub const DEFAULT_MAX_RECORD_LEN: u32 = 1 << 20;

/// Tuning for a [`Wal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalOptions {
    /// Largest encoded record accepted by `append` and by replay. Replay
    /// never allocates for a length over this bound. Reopen a log with at
    /// least the bound it was written with.
    pub max_record_len: u32,
    /// Hint for [`Wal::should_compact`]: compact once this many records have
    /// been appended since the last snapshot. `None`: never suggest it.
    pub compact_after: Option<u64>,
}

impl Default for WalOptions {
    fn default() -> Self {
        Self {
            max_record_len: DEFAULT_MAX_RECORD_LEN,
            compact_after: Some(10_000),
        }
    }
}

/// A write-ahead log of `T` records in one directory.
///
/// Call order: [`Wal::open`] (feed the returned records to the core), then
/// any number of [`Wal::append`] / [`Wal::append_batch`] — each one before
/// the acknowledgement it makes durable — and from time to time
/// [`Wal::compact`] with the whole current state. Dropping the `Wal`
/// releases the directory lock.
#[derive(Debug)]
pub struct Wal<T> {
    dir: PathBuf,
    opts: WalOptions,
    generation: u64,
    log_path: PathBuf,
    log: File,
    salt: [u8; 8],
    len_bytes: u64,
    records: u64,
    poisoned: bool,
    buf: Vec<u8>,
    _lock: DirLock,
    _records: PhantomData<fn(T) -> T>,
}

impl<T: Serialize + DeserializeOwned> Wal<T> {
    /// Opens (creating if needed) the log in `dir`, takes the directory lock
    /// and recovers: returns the log, ready to append, and every record it
    /// holds — the snapshot's first, then the log's, in append order.
    ///
    /// A torn final record is truncated away; other damage is an error (see
    /// the module docs, "Recovery rules").
    pub fn open(dir: &Path, opts: WalOptions) -> Result<(Self, Vec<T>), WalError> {
        fs::create_dir_all(dir).map_err(|e| io_err(IoOp::CreateDir, dir, e))?;
        let lock = DirLock::acquire(dir)?;
        let listing = Listing::read(dir)?;
        let mut dir_changed = false;

        for tmp in &listing.temporaries {
            remove(tmp)?;
            dir_changed = true;
        }

        let mut records = Vec::new();
        let generation = match &listing.snapshot {
            Some(path) => read_snapshot(path, opts.max_record_len, &mut records)?,
            None => 0,
        };

        for &(gen, ref path) in &listing.segments {
            if gen < generation {
                // Superseded by the snapshot: a compaction committed and
                // crashed before removing it. Never replayed.
                log::info!("removing superseded log {}", path.display());
            } else if gen > generation {
                // Written by a compaction that did not commit: always empty.
                let data = read(path)?;
                Header::parse(path, &data, Kind::Log, Some(gen))?;
                if data.len() > HEADER_LEN {
                    return Err(WalError::OrphanSegment { path: path.clone() });
                }
                log::info!("removing uncommitted log {}", path.display());
            } else {
                continue;
            }
            remove(path)?;
            dir_changed = true;
        }

        let log_path = dir.join(segment_name(generation));
        let live = listing.segments.iter().any(|(gen, _)| *gen == generation);
        let (log, salt, len_bytes, count) = if live {
            let data = read(&log_path)?;
            let header = Header::parse(&log_path, &data, Kind::Log, Some(generation))?;
            let before = records.len();
            let good_end = scan_log(
                &log_path,
                &data,
                &header.salt,
                opts.max_record_len,
                &mut records,
            )?;
            let log = OpenOptions::new()
                .append(true)
                .open(&log_path)
                .map_err(|e| io_err(IoOp::Open, &log_path, e))?;
            if good_end < data.len() {
                log::warn!(
                    "{}: truncating torn tail at offset {} ({} bytes never acknowledged)",
                    log_path.display(),
                    good_end,
                    data.len() - good_end
                );
                log.set_len(good_end as u64)
                    .map_err(|e| io_err(IoOp::Truncate, &log_path, e))?;
                log.sync_all()
                    .map_err(|e| io_err(IoOp::Sync, &log_path, e))?;
            }
            (
                log,
                header.salt,
                good_end as u64,
                (records.len() - before) as u64,
            )
        } else if listing.snapshot.is_none() {
            // A fresh directory.
            let salt = new_salt()?;
            create_segment(dir, generation, salt)?;
            dir_changed = false; // create_segment fsynced the directory
            let log = OpenOptions::new()
                .append(true)
                .open(&log_path)
                .map_err(|e| io_err(IoOp::Open, &log_path, e))?;
            (log, salt, HEADER_LEN as u64, 0)
        } else {
            return Err(WalError::MissingSegment {
                path: log_path,
                generation,
            });
        };

        if dir_changed {
            sync_dir(dir)?;
        }
        let wal = Self {
            dir: dir.to_path_buf(),
            opts,
            generation,
            log_path,
            log,
            salt,
            len_bytes,
            records: count,
            poisoned: false,
            buf: Vec::new(),
            _lock: lock,
            _records: PhantomData,
        };
        Ok((wal, records))
    }

    /// Appends one record and `fdatasync`s the log before returning.
    ///
    /// **Durability point:** once this returns `Ok`, the record is on stable
    /// storage and will be replayed by every later [`Wal::open`]; only then
    /// may the caller acknowledge it (send the SrvAck). On `Err`, do not
    /// acknowledge it.
    pub fn append(&mut self, rec: &T) -> Result<(), WalError> {
        self.append_batch(std::slice::from_ref(rec))
    }

    /// Appends several records with one write and one `fdatasync`; the same
    /// durability point as [`Wal::append`], for all of them at once.
    ///
    /// A record over [`WalOptions::max_record_len`] rejects the whole batch
    /// before anything is written ([`WalError::RecordTooLarge`]).
    pub fn append_batch(&mut self, recs: &[T]) -> Result<(), WalError> {
        self.check_usable()?;
        if recs.is_empty() {
            return Ok(());
        }
        self.buf.clear();
        for rec in recs {
            encode_frame(&mut self.buf, rec, &self.salt, self.opts.max_record_len)?;
        }
        if let Err(e) = self.log.write_all(&self.buf) {
            self.poisoned = true;
            return Err(io_err(IoOp::Write, &self.log_path, e));
        }
        if let Err(e) = self.log.sync_data() {
            self.poisoned = true;
            return Err(io_err(IoOp::Sync, &self.log_path, e));
        }
        self.len_bytes += self.buf.len() as u64;
        self.records += recs.len() as u64;
        Ok(())
    }

    /// Replaces the snapshot with `snapshot` — the caller's whole current
    /// state — and starts a fresh, empty log.
    ///
    /// The new snapshot is written to a temporary file, fsynced, renamed into
    /// place and the directory fsynced; the old log is removed only after
    /// that. On return, replay yields exactly `snapshot` followed by whatever
    /// is appended next. If it fails before the rename the old snapshot and
    /// log stay in force (and the `Wal` stays usable, unless the failure was
    /// a write); after the rename the `Wal` is poisoned.
    pub fn compact(&mut self, snapshot: &[T]) -> Result<(), WalError> {
        self.check_usable()?;
        let next = self.generation + 1;

        let snap_salt = new_salt()?;
        let mut data = Header {
            kind: Kind::Snapshot,
            generation: next,
            salt: snap_salt,
            count: snapshot.len() as u64,
        }
        .emit();
        for rec in snapshot {
            encode_frame(&mut data, rec, &snap_salt, self.opts.max_record_len)?;
        }
        let log_salt = new_salt()?;

        let snap_tmp = self.dir.join(SNAPSHOT_TMP);
        write_durable(&snap_tmp, &data)?;
        create_segment(&self.dir, next, log_salt)?;
        let snap_path = self.dir.join(SNAPSHOT);
        fs::rename(&snap_tmp, &snap_path).map_err(|e| io_err(IoOp::Rename, &snap_path, e))?;

        // Past the rename, what recovery sees may differ from our fields.
        let committed = (|| {
            sync_dir(&self.dir)?;
            let log_path = self.dir.join(segment_name(next));
            let log = OpenOptions::new()
                .append(true)
                .open(&log_path)
                .map_err(|e| io_err(IoOp::Open, &log_path, e))?;
            Ok::<_, WalError>((log_path, log))
        })();
        let (log_path, log) = match committed {
            Ok(v) => v,
            Err(e) => {
                self.poisoned = true;
                return Err(e);
            }
        };
        let old = std::mem::replace(&mut self.log_path, log_path);
        self.log = log;
        self.generation = next;
        self.salt = log_salt;
        self.len_bytes = HEADER_LEN as u64;
        self.records = 0;
        // The old log is superseded; if removing it fails, open removes it.
        if let Err(e) = remove(&old).and_then(|()| sync_dir(&self.dir)) {
            log::warn!("after compaction: {e}");
        }
        Ok(())
    }

    /// Size of the current log file in bytes, header included.
    pub fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    /// Records in the current log: appended (or replayed) since the last
    /// snapshot.
    pub fn records_since_snapshot(&self) -> u64 {
        self.records
    }

    /// Whether [`WalOptions::compact_after`] says it is time to compact.
    pub fn should_compact(&self) -> bool {
        self.opts
            .compact_after
            .is_some_and(|after| self.records >= after)
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn check_usable(&self) -> Result<(), WalError> {
        if self.poisoned {
            return Err(WalError::Poisoned);
        }
        Ok(())
    }
}

/// Why a [`Wal`] operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// A file system operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: IoOp,
        /// The file or directory it was done to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Another live process holds the directory lock.
    #[error("{} is held by running process {pid}", path.display())]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The process holding it.
        pid: u32,
    },
    /// A file's header is not a valid header of the expected kind.
    #[error("{}: bad header: {problem}", path.display())]
    BadHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: HeaderProblem,
    },
    /// A damaged record with acknowledged data after it, or any damaged
    /// record in a snapshot.
    #[error("{}: corrupt record at offset {offset}: {problem}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the damaged frame.
        offset: u64,
        /// What is wrong with it.
        problem: FrameProblem,
    },
    /// A record passed its checksum but does not decode as the record type.
    #[error("{}: record at offset {offset} does not decode: {source}", path.display())]
    Decode {
        /// The file.
        path: PathBuf,
        /// Byte offset of the frame.
        offset: u64,
        /// The decoder's error.
        #[source]
        source: postcard::Error,
    },
    /// A snapshot holds fewer or more records than its header declares.
    #[error("{}: snapshot declares {declared} records, holds {found}", path.display())]
    SnapshotCount {
        /// The snapshot file.
        path: PathBuf,
        /// The header's count.
        declared: u64,
        /// Records found.
        found: u64,
    },
    /// The snapshot's log segment is missing.
    #[error("{}: missing log for snapshot generation {generation}", path.display())]
    MissingSegment {
        /// The missing file.
        path: PathBuf,
        /// The snapshot's generation.
        generation: u64,
    },
    /// A log newer than the snapshot holds records (it can only have been
    /// written by an uncommitted compaction, which leaves it empty).
    #[error("{}: log newer than the snapshot holds records", path.display())]
    OrphanSegment {
        /// The log file.
        path: PathBuf,
    },
    /// `append` or `compact` was given a record that encodes over
    /// [`WalOptions::max_record_len`]; nothing was written.
    #[error("record encodes to {len} bytes, over the {max}-byte limit")]
    RecordTooLarge {
        /// Encoded length.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// A record failed to encode; nothing was written.
    #[error("encode record: {0}")]
    Encode(#[source] postcard::Error),
    /// The system random generator failed (salting a new file).
    #[error("no randomness for a file salt")]
    Random,
    /// An earlier write or sync failed; drop the `Wal` and reopen it.
    #[error("log unusable after a failed write or sync; reopen to recover")]
    Poisoned,
}

/// The file system operation of a [`WalError::Io`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoOp {
    /// Creating the directory.
    CreateDir,
    /// Listing the directory.
    ListDir,
    /// Opening or creating a file.
    Open,
    /// Reading a file.
    Read,
    /// Writing a file.
    Write,
    /// `fsync`/`fdatasync` of a file.
    Sync,
    /// `fsync` of the directory.
    SyncDir,
    /// Truncating a torn tail.
    Truncate,
    /// Renaming a file into place.
    Rename,
    /// Removing a file.
    Remove,
    /// Taking the directory lock.
    Lock,
}

impl fmt::Display for IoOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::CreateDir => "create directory",
            Self::ListDir => "list directory",
            Self::Open => "open",
            Self::Read => "read",
            Self::Write => "write",
            Self::Sync => "fsync",
            Self::SyncDir => "fsync directory",
            Self::Truncate => "truncate",
            Self::Rename => "rename into",
            Self::Remove => "remove",
            Self::Lock => "lock",
        })
    }
}

/// What is wrong with a file header ([`WalError::BadHeader`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderProblem {
    /// Shorter than a header.
    #[error("file shorter than the {HEADER_LEN}-byte header")]
    Short,
    /// Wrong magic: not a svcroute WAL file.
    #[error("not a svcroute WAL file")]
    Magic,
    /// A format version this code does not read.
    #[error("unsupported version {0}")]
    Version(u16),
    /// A log where a snapshot was expected, or the reverse, or an unknown kind.
    #[error("wrong file kind {0:#04x}")]
    Kind(u8),
    /// The header checksum does not match.
    #[error("header checksum mismatch")]
    Checksum,
    /// The header's generation disagrees with the file name.
    #[error("generation {found} in a file named for {expected}")]
    Generation {
        /// From the file name.
        expected: u64,
        /// From the header.
        found: u64,
    },
}

/// What is wrong with a record frame ([`WalError::Corrupt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameProblem {
    /// The frame runs past the end of the file.
    #[error("frame needs {needed} bytes, {available} left")]
    Truncated {
        /// Bytes the frame needs.
        needed: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// The length field is over the record size bound.
    #[error("length {len} over the {max}-byte limit")]
    Oversize {
        /// The length field.
        len: u32,
        /// The bound.
        max: u32,
    },
    /// The checksum does not match.
    #[error("checksum mismatch")]
    Checksum,
    /// The payload decoded with bytes left over.
    #[error("{0} bytes after the record")]
    TrailingBytes(usize),
}

// ---------------------------------------------------------------------------
// File format

const MAGIC: [u8; 8] = *b"SVCRWAL\n";
const VERSION: u16 = 1;
const HEADER_LEN: usize = 48;
const FRAME_HEADER_LEN: usize = 12;
const CHECKSUM_LEN: usize = 8;

const SNAPSHOT: &str = "snapshot";
const SNAPSHOT_TMP: &str = "snapshot.tmp";
const LOCK: &str = "lock";
const TMP_SUFFIX: &str = ".tmp";
const SEGMENT_PREFIX: &str = "log-";

/// Byte ranges of the file header (diagram in the module docs).
mod field {
    use std::ops::Range;

    pub(super) const MAGIC: Range<usize> = 0..8;
    pub(super) const VERSION: Range<usize> = 8..10;
    pub(super) const KIND: usize = 10;
    pub(super) const GENERATION: Range<usize> = 16..24;
    pub(super) const SALT: Range<usize> = 24..32;
    pub(super) const COUNT: Range<usize> = 32..40;
    pub(super) const CHECKSUM: Range<usize> = 40..48;

    /// Frame fields, relative to the frame start.
    pub(super) const FRAME_LEN: Range<usize> = 0..4;
    pub(super) const FRAME_CHECKSUM: Range<usize> = 4..12;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Log = 0x01,
    Snapshot = 0x02,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    kind: Kind,
    generation: u64,
    salt: [u8; 8],
    count: u64,
}

impl Header {
    fn emit(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN];
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION].copy_from_slice(&VERSION.to_le_bytes());
        b[field::KIND] = self.kind as u8;
        b[field::GENERATION].copy_from_slice(&self.generation.to_le_bytes());
        b[field::SALT].copy_from_slice(&self.salt);
        b[field::COUNT].copy_from_slice(&self.count.to_le_bytes());
        let sum = checksum(&[&b[..field::CHECKSUM.start]]);
        b[field::CHECKSUM].copy_from_slice(&sum);
        b
    }

    fn parse(
        path: &Path,
        data: &[u8],
        kind: Kind,
        generation: Option<u64>,
    ) -> Result<Self, WalError> {
        let bad = |problem| WalError::BadHeader {
            path: path.to_path_buf(),
            problem,
        };
        let Some(b) = data.get(..HEADER_LEN) else {
            return Err(bad(HeaderProblem::Short));
        };
        if b[field::MAGIC] != MAGIC {
            return Err(bad(HeaderProblem::Magic));
        }
        if checksum(&[&b[..field::CHECKSUM.start]])[..] != b[field::CHECKSUM] {
            return Err(bad(HeaderProblem::Checksum));
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != VERSION {
            return Err(bad(HeaderProblem::Version(version)));
        }
        if b[field::KIND] != kind as u8 {
            return Err(bad(HeaderProblem::Kind(b[field::KIND])));
        }
        let header = Self {
            kind,
            generation: le_u64(&b[field::GENERATION]),
            salt: b[field::SALT].try_into().unwrap_or_default(),
            count: le_u64(&b[field::COUNT]),
        };
        if let Some(expected) = generation.filter(|g| *g != header.generation) {
            return Err(bad(HeaderProblem::Generation {
                expected,
                found: header.generation,
            }));
        }
        Ok(header)
    }
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_le_bytes(a)
}

/// SHA-256 over the concatenation of `parts`, truncated to 8 bytes.
fn checksum(parts: &[&[u8]]) -> [u8; CHECKSUM_LEN] {
    let mut ctx = digest::Context::new(&digest::SHA256);
    for p in parts {
        ctx.update(p);
    }
    let mut out = [0u8; CHECKSUM_LEN];
    out.copy_from_slice(&ctx.finish().as_ref()[..CHECKSUM_LEN]);
    out
}

fn new_salt() -> Result<[u8; 8], WalError> {
    let mut salt = [0u8; 8];
    SystemRandom::new()
        .fill(&mut salt)
        .map_err(|_| WalError::Random)?;
    Ok(salt)
}

/// Appends one frame holding `rec` to `buf`; on error `buf` is left as it was.
fn encode_frame<T: Serialize>(
    buf: &mut Vec<u8>,
    rec: &T,
    salt: &[u8; 8],
    max: u32,
) -> Result<(), WalError> {
    let start = buf.len();
    buf.extend_from_slice(&[0u8; FRAME_HEADER_LEN]);
    let mut out = postcard::to_extend(rec, std::mem::take(buf)).map_err(WalError::Encode)?;
    let len = out.len() - start - FRAME_HEADER_LEN;
    let Some(len32) = u32::try_from(len).ok().filter(|l| *l <= max) else {
        out.truncate(start);
        *buf = out;
        return Err(WalError::RecordTooLarge { len, max });
    };
    let len_bytes = len32.to_le_bytes();
    let sum = checksum(&[salt, &len_bytes, &out[start + FRAME_HEADER_LEN..]]);
    let frame = &mut out[start..start + FRAME_HEADER_LEN];
    frame[field::FRAME_LEN].copy_from_slice(&len_bytes);
    frame[field::FRAME_CHECKSUM].copy_from_slice(&sum);
    *buf = out;
    Ok(())
}

/// Checks the frame at `off`; returns its payload's range.
fn check_frame(
    data: &[u8],
    off: usize,
    salt: &[u8; 8],
    max: u32,
) -> Result<Range<usize>, FrameProblem> {
    let rest = &data[off..];
    let Some(head) = rest.get(..FRAME_HEADER_LEN) else {
        return Err(FrameProblem::Truncated {
            needed: FRAME_HEADER_LEN as u64,
            available: rest.len() as u64,
        });
    };
    let len_bytes: [u8; 4] = [head[0], head[1], head[2], head[3]];
    let len = u32::from_le_bytes(len_bytes);
    if len > max {
        return Err(FrameProblem::Oversize { len, max });
    }
    let needed = FRAME_HEADER_LEN + len as usize;
    let Some(payload) = rest.get(FRAME_HEADER_LEN..needed) else {
        return Err(FrameProblem::Truncated {
            needed: needed as u64,
            available: rest.len() as u64,
        });
    };
    if checksum(&[salt, &len_bytes, payload])[..] != head[field::FRAME_CHECKSUM] {
        return Err(FrameProblem::Checksum);
    }
    Ok(off + FRAME_HEADER_LEN..off + needed)
}

fn decode<T: DeserializeOwned>(path: &Path, data: &[u8], at: Range<usize>) -> Result<T, WalError> {
    let offset = (at.start - FRAME_HEADER_LEN) as u64;
    let (rec, rest) = postcard::take_from_bytes(&data[at]).map_err(|source| WalError::Decode {
        path: path.to_path_buf(),
        offset,
        source,
    })?;
    if !rest.is_empty() {
        return Err(WalError::Corrupt {
            path: path.to_path_buf(),
            offset,
            problem: FrameProblem::TrailingBytes(rest.len()),
        });
    }
    Ok(rec)
}

/// Reads a log's frames into `out`; returns the end of the last good frame
/// (shorter than `data` when the tail is torn).
fn scan_log<T: DeserializeOwned>(
    path: &Path,
    data: &[u8],
    salt: &[u8; 8],
    max: u32,
    out: &mut Vec<T>,
) -> Result<usize, WalError> {
    let mut off = HEADER_LEN;
    while off < data.len() {
        match check_frame(data, off, salt, max) {
            Ok(payload) => {
                let end = payload.end;
                out.push(decode(path, data, payload)?);
                off = end;
            }
            Err(_) if is_torn_tail(data, off, salt, max) => return Ok(off),
            Err(problem) => {
                return Err(WalError::Corrupt {
                    path: path.to_path_buf(),
                    offset: off as u64,
                    problem,
                })
            }
        }
    }
    Ok(off)
}

/// Upper bound on bytes hashed while proving a tail torn; past it the tail
/// counts as corrupt (an error, never a silent drop).
const TAIL_SCAN_BUDGET: usize = 64 << 20;

/// Whether the bad frame at `off` can be the unfinished last append: no more
/// bytes follow it than one frame holds, and no valid frame starts after it.
fn is_torn_tail(data: &[u8], off: usize, salt: &[u8; 8], max: u32) -> bool {
    let remaining = data.len() - off;
    if remaining > FRAME_HEADER_LEN + max as usize {
        return false;
    }
    let mut budget = TAIL_SCAN_BUDGET;
    for p in off + 1..data.len().saturating_sub(FRAME_HEADER_LEN - 1) {
        let len = u32::from_le_bytes([data[p], data[p + 1], data[p + 2], data[p + 3]]);
        if len > max || FRAME_HEADER_LEN + len as usize > data.len() - p {
            continue;
        }
        budget = match budget.checked_sub(FRAME_HEADER_LEN + len as usize) {
            Some(b) => b,
            None => return false,
        };
        if check_frame(data, p, salt, max).is_ok() {
            return false;
        }
    }
    true
}

/// Reads a snapshot into `out`, strictly; returns its generation.
fn read_snapshot<T: DeserializeOwned>(
    path: &Path,
    max: u32,
    out: &mut Vec<T>,
) -> Result<u64, WalError> {
    let data = read(path)?;
    let header = Header::parse(path, &data, Kind::Snapshot, None)?;
    let mut off = HEADER_LEN;
    let mut found = 0u64;
    while off < data.len() {
        let payload =
            check_frame(&data, off, &header.salt, max).map_err(|problem| WalError::Corrupt {
                path: path.to_path_buf(),
                offset: off as u64,
                problem,
            })?;
        off = payload.end;
        out.push(decode(path, &data, payload)?);
        found += 1;
    }
    if found != header.count {
        return Err(WalError::SnapshotCount {
            path: path.to_path_buf(),
            declared: header.count,
            found,
        });
    }
    Ok(header.generation)
}

// ---------------------------------------------------------------------------
// Directory

fn segment_name(generation: u64) -> String {
    format!("{SEGMENT_PREFIX}{generation:016x}")
}

/// What `open` finds in the directory.
struct Listing {
    snapshot: Option<PathBuf>,
    /// `(generation, path)`, unordered.
    segments: Vec<(u64, PathBuf)>,
    /// Leftovers of interrupted writes.
    temporaries: Vec<PathBuf>,
}

impl Listing {
    fn read(dir: &Path) -> Result<Self, WalError> {
        let mut listing = Self {
            snapshot: None,
            segments: Vec::new(),
            temporaries: Vec::new(),
        };
        let entries = fs::read_dir(dir).map_err(|e| io_err(IoOp::ListDir, dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err(IoOp::ListDir, dir, e))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let path = entry.path();
            if name == SNAPSHOT {
                listing.snapshot = Some(path);
            } else if let Some(gen) = parse_segment_name(&name) {
                listing.segments.push((gen, path));
            } else if let Some(pid) = parse_lock_tmp_name(&name) {
                // Another opener's lock in the making, unless it is dead.
                if !pid_exists(pid) {
                    listing.temporaries.push(path);
                }
            } else if name.ends_with(TMP_SUFFIX) {
                listing.temporaries.push(path);
            } else if name != LOCK {
                log::debug!("{}: ignoring unknown file", path.display());
            }
        }
        Ok(listing)
    }
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix(SEGMENT_PREFIX)?;
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

fn parse_lock_tmp_name(name: &str) -> Option<u32> {
    name.strip_prefix("lock.")?
        .strip_suffix(TMP_SUFFIX)?
        .parse()
        .ok()
}

/// Writes an empty log of `generation` under its final name, durably
/// (temporary file, fsync, rename, fsync directory).
fn create_segment(dir: &Path, generation: u64, salt: [u8; 8]) -> Result<(), WalError> {
    let header = Header {
        kind: Kind::Log,
        generation,
        salt,
        count: 0,
    };
    let name = segment_name(generation);
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    let path = dir.join(name);
    write_durable(&tmp, &header.emit())?;
    fs::rename(&tmp, &path).map_err(|e| io_err(IoOp::Rename, &path, e))?;
    sync_dir(dir)
}

/// Creates (or truncates) `path`, writes `data` and fsyncs it.
fn write_durable(path: &Path, data: &[u8]) -> Result<(), WalError> {
    let mut f = File::create(path).map_err(|e| io_err(IoOp::Open, path, e))?;
    f.write_all(data)
        .map_err(|e| io_err(IoOp::Write, path, e))?;
    f.sync_all().map_err(|e| io_err(IoOp::Sync, path, e))
}

fn sync_dir(dir: &Path) -> Result<(), WalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(IoOp::SyncDir, dir, e))
}

fn read(path: &Path) -> Result<Vec<u8>, WalError> {
    fs::read(path).map_err(|e| io_err(IoOp::Read, path, e))
}

fn remove(path: &Path) -> Result<(), WalError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err(IoOp::Remove, path, e)),
        _ => Ok(()),
    }
}

fn io_err(op: IoOp, path: &Path, source: io::Error) -> WalError {
    WalError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

// ---------------------------------------------------------------------------
// Lock

/// The directory lock: `lock` holds `"<pid> <start time>\n"` of its owner.
/// Removed on drop.
#[derive(Debug)]
struct DirLock {
    path: PathBuf,
}

/// A process, told apart from a later one reusing its pid by its start time
/// (field 22 of `/proc/<pid>/stat`; 0 when unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    pid: u32,
    start: u64,
}

impl DirLock {
    fn acquire(dir: &Path) -> Result<Self, WalError> {
        let path = dir.join(LOCK);
        let pid = std::process::id();
        let me = Owner {
            pid,
            start: proc_stat(pid).map_or(0, |s| s.start),
        };
        // Written whole under a private name, then linked into place: the
        // lock file never exists with partial contents.
        let tmp = dir.join(format!("lock.{pid}{TMP_SUFFIX}"));
        fs::write(&tmp, format!("{} {}\n", me.pid, me.start))
            .map_err(|e| io_err(IoOp::Lock, &tmp, e))?;
        let result = Self::link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        result
    }

    fn link(tmp: &Path, path: &Path) -> Result<Self, WalError> {
        let mut holder = 0;
        for _ in 0..3 {
            match fs::hard_link(tmp, path) {
                Ok(()) => {
                    return Ok(Self {
                        path: path.to_path_buf(),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err(IoOp::Lock, path, e)),
            }
            let text = match fs::read_to_string(path) {
                Ok(text) => text,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(IoOp::Lock, path, e)),
            };
            let Some(owner) = parse_owner(&text) else {
                log::warn!("{}: removing unreadable lock {text:?}", path.display());
                remove(path)?;
                continue;
            };
            holder = owner.pid;
            if owner_alive(owner) {
                break;
            }
            log::warn!(
                "{}: removing stale lock of dead process {}",
                path.display(),
                owner.pid
            );
            remove(path)?;
        }
        Err(WalError::Locked {
            path: path.to_path_buf(),
            pid: holder,
        })
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

fn parse_owner(text: &str) -> Option<Owner> {
    let mut words = text.split_whitespace();
    let pid = words.next()?.parse().ok()?;
    let start = words.next()?.parse().ok()?;
    Some(Owner { pid, start })
}

struct ProcStat {
    zombie: bool,
    start: u64,
}

/// `/proc/<pid>/stat`: state and start time, or `None` if unreadable.
fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ..."; comm may hold spaces and parentheses.
    let after = &text[text.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?;
    // `state` is field 3; starttime is field 22.
    let start = fields.nth(18)?.parse().ok()?;
    Some(ProcStat {
        zombie: matches!(state, "Z" | "X" | "x"),
        start,
    })
}

fn have_procfs() -> bool {
    Path::new("/proc/self/stat").exists()
}

fn pid_exists(pid: u32) -> bool {
    !have_procfs() || Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether the lock's owner still runs. Without procfs nothing can be
/// proved dead: the lock is then kept (remove it by hand).
fn owner_alive(owner: Owner) -> bool {
    match proc_stat(owner.pid) {
        Some(stat) => !stat.zombie && (owner.start == 0 || stat.start == owner.start),
        None => !have_procfs(),
    }
}

#[cfg(test)]
mod test {
    use std::sync::atomic::{AtomicU32, Ordering};

    use proptest::prelude::*;
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    struct Reg {
        seq: u64,
        url: String,
        attrs: Vec<u8>,
    }

    fn reg(seq: u64) -> Reg {
        Reg {
            seq,
            url: format!("service:printer://10.0.0.{}", seq % 250),
            attrs: vec![0xa5; (seq % 7) as usize],
        }
    }

    fn regs(range: Range<u64>) -> Vec<Reg> {
        range.map(reg).collect()
    }

    /// A fresh directory under the system temp dir, removed on drop.
    struct TestDir(PathBuf);

    impl TestDir {
        fn new(tag: &str) -> Self {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path =
                std::env::temp_dir().join(format!("svcroute-wal-{}-{tag}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&path);
            Self(path)
        }

        fn file(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }

        fn names(&self) -> Vec<String> {
            let mut names: Vec<String> = fs::read_dir(&self.0)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[track_caller]
    fn open(dir: &TestDir) -> (Wal<Reg>, Vec<Reg>) {
        Wal::open(&dir.0, WalOptions::default()).unwrap()
    }

    #[track_caller]
    fn open_err(dir: &TestDir) -> WalError {
        Wal::<Reg>::open(&dir.0, WalOptions::default()).unwrap_err()
    }

    fn log0(dir: &TestDir) -> PathBuf {
        dir.file(&segment_name(0))
    }

    /// Writes `n` records to a fresh log; returns the frame start offsets
    /// and the file length.
    fn write_records(dir: &TestDir, n: u64) -> (Vec<u64>, u64) {
        let (mut wal, got) = open(dir);
        assert!(got.is_empty());
        let mut offsets = Vec::new();
        for i in 0..n {
            offsets.push(wal.len_bytes());
            wal.append(&reg(i)).unwrap();
        }
        (offsets, wal.len_bytes())
    }

    fn patch(path: &Path, offset: u64, bytes: &[u8]) {
        let mut data = fs::read(path).unwrap();
        let at = offset as usize;
        data[at..at + bytes.len()].copy_from_slice(bytes);
        fs::write(path, data).unwrap();
    }

    fn extend(path: &Path, bytes: &[u8]) {
        let mut f = OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(bytes).unwrap();
    }

    #[test]
    fn empty_dir_opens_empty() {
        let dir = TestDir::new("empty");
        let (wal, got) = open(&dir);
        assert!(got.is_empty());
        assert_eq!(wal.len_bytes(), HEADER_LEN as u64);
        assert_eq!(wal.records_since_snapshot(), 0);
        assert_eq!(dir.names(), ["lock", "log-0000000000000000"]);
        drop(wal);
        assert_eq!(dir.names(), ["log-0000000000000000"]);
        let (_wal, got) = open(&dir);
        assert!(got.is_empty());
    }

    #[test]
    fn round_trip_and_reopen() {
        let dir = TestDir::new("roundtrip");
        let (mut wal, _) = open(&dir);
        wal.append(&reg(0)).unwrap();
        wal.append_batch(&regs(1..4)).unwrap();
        wal.append_batch(&[]).unwrap();
        wal.append(&reg(4)).unwrap();
        assert_eq!(wal.records_since_snapshot(), 5);
        let len = wal.len_bytes();
        assert_eq!(fs::metadata(log0(&dir)).unwrap().len(), len);
        drop(wal);

        let (mut wal, got) = open(&dir);
        assert_eq!(got, regs(0..5));
        assert_eq!(wal.records_since_snapshot(), 5);
        assert_eq!(wal.len_bytes(), len);
        wal.append(&reg(5)).unwrap();
        drop(wal);
        assert_eq!(open(&dir).1, regs(0..6));
    }

    #[test]
    fn compaction() {
        let dir = TestDir::new("compact");
        let opts = WalOptions {
            compact_after: Some(4),
            ..WalOptions::default()
        };
        let (mut wal, _) = Wal::open(&dir.0, opts).unwrap();
        wal.append_batch(&regs(0..3)).unwrap();
        assert!(!wal.should_compact());
        wal.append(&reg(3)).unwrap();
        assert!(wal.should_compact());

        // The state after the log: say, record 1 deregistered.
        let state = vec![reg(0), reg(2), reg(3)];
        wal.compact(&state).unwrap();
        assert_eq!(wal.records_since_snapshot(), 0);
        assert_eq!(wal.len_bytes(), HEADER_LEN as u64);
        assert!(!wal.should_compact());
        assert_eq!(dir.names(), ["lock", "log-0000000000000001", "snapshot"]);
        wal.append(&reg(10)).unwrap();
        drop(wal);

        let (mut wal, got) = Wal::<Reg>::open(&dir.0, opts).unwrap();
        assert_eq!(got, [reg(0), reg(2), reg(3), reg(10)]);
        assert_eq!(wal.records_since_snapshot(), 1);
        wal.compact(&got).unwrap();
        wal.compact(&[]).unwrap();
        wal.append(&reg(11)).unwrap();
        drop(wal);
        assert_eq!(dir.names(), ["log-0000000000000003", "snapshot"]);
        assert_eq!(open(&dir).1, [reg(11)]);
    }

    #[test]
    fn torn_tail_of_every_length_is_dropped() {
        let dir = TestDir::new("torn");
        let (offsets, end) = write_records(&dir, 3);
        let last = offsets[2];
        let pristine = fs::read(log0(&dir)).unwrap();
        for cut in last..end {
            fs::write(log0(&dir), &pristine[..cut as usize]).unwrap();
            let (mut wal, got) = open(&dir);
            assert_eq!(got, regs(0..2), "cut at {cut}");
            assert_eq!(wal.len_bytes(), last);
            assert_eq!(fs::metadata(log0(&dir)).unwrap().len(), last);
            // Appends continue right after the last good record.
            wal.append(&reg(7)).unwrap();
            drop(wal);
            assert_eq!(open(&dir).1, [reg(0), reg(1), reg(7)], "cut at {cut}");
        }
    }

    #[test]
    fn bad_checksum_at_tail_is_torn() {
        let dir = TestDir::new("tailsum");
        let (offsets, end) = write_records(&dir, 3);
        patch(&log0(&dir), end - 1, &[0xff]);
        let (wal, got) = open(&dir);
        assert_eq!(got, regs(0..2));
        assert_eq!(wal.len_bytes(), offsets[2]);
    }

    #[test]
    fn zero_filled_tail_is_torn() {
        // A power loss can leave the file extended with zeros.
        let dir = TestDir::new("zeros");
        let (_, end) = write_records(&dir, 2);
        extend(&log0(&dir), &[0; 4096]);
        let (wal, got) = open(&dir);
        assert_eq!(got, regs(0..2));
        assert_eq!(wal.len_bytes(), end);
    }

    #[test]
    fn corrupted_middle_is_an_error() {
        let dir = TestDir::new("middle");
        let (offsets, _) = write_records(&dir, 3);
        // Flip a payload byte of record 1; record 2 follows intact.
        patch(&log0(&dir), offsets[1] + FRAME_HEADER_LEN as u64, &[0xff]);
        let err = open_err(&dir);
        let WalError::Corrupt {
            path,
            offset,
            problem,
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!(*path, log0(&dir));
        assert_eq!(*offset, offsets[1]);
        assert_eq!(*problem, FrameProblem::Checksum);
        let msg = err.to_string();
        assert!(msg.contains("log-0000000000000000") && msg.contains(&offsets[1].to_string()));
        // Nothing was truncated.
        assert!(matches!(open_err(&dir), WalError::Corrupt { .. }));
    }

    #[test]
    fn length_pointing_past_the_end_in_the_middle_is_an_error() {
        let dir = TestDir::new("longlen");
        let (offsets, _) = write_records(&dir, 3);
        patch(&log0(&dir), offsets[1], &1000u32.to_le_bytes());
        let err = open_err(&dir);
        assert!(
            matches!(
                err,
                WalError::Corrupt { offset, problem: FrameProblem::Truncated { .. }, .. }
                    if offset == offsets[1]
            ),
            "{err:?}"
        );
    }

    #[test]
    fn oversize_length_is_an_error() {
        let dir = TestDir::new("oversize");
        let (offsets, _) = write_records(&dir, 3);
        patch(&log0(&dir), offsets[1], &u32::MAX.to_le_bytes());
        let err = open_err(&dir);
        assert!(
            matches!(
                err,
                WalError::Corrupt { offset, problem: FrameProblem::Oversize { len: u32::MAX, .. }, .. }
                    if offset == offsets[1]
            ),
            "{err:?}"
        );
    }

    #[test]
    fn oversize_length_with_more_than_a_frame_after_it_is_an_error() {
        // No single unfinished append leaves that much behind.
        let dir = TestDir::new("oversize-tail");
        let opts = WalOptions {
            max_record_len: 64,
            ..WalOptions::default()
        };
        let (mut wal, _) = Wal::<Reg>::open(&dir.0, opts).unwrap();
        wal.append(&reg(0)).unwrap();
        let end = wal.len_bytes();
        drop(wal);
        let mut junk = 1000u32.to_le_bytes().to_vec();
        junk.resize(200, 0x5a);
        extend(&log0(&dir), &junk);
        let err = Wal::<Reg>::open(&dir.0, opts).unwrap_err();
        assert!(
            matches!(
                err,
                WalError::Corrupt { offset, problem: FrameProblem::Oversize { len: 1000, max: 64 }, .. }
                    if offset == end
            ),
            "{err:?}"
        );
    }

    #[test]
    fn oversize_record_is_refused_and_wal_stays_usable() {
        let dir = TestDir::new("bigrec");
        let opts = WalOptions {
            max_record_len: 64,
            ..WalOptions::default()
        };
        let (mut wal, _) = Wal::<Reg>::open(&dir.0, opts).unwrap();
        let big = Reg {
            attrs: vec![1; 100],
            ..reg(0)
        };
        let err = wal.append_batch(&[reg(1), big.clone()]).unwrap_err();
        assert!(
            matches!(err, WalError::RecordTooLarge { max: 64, .. }),
            "{err:?}"
        );
        assert!(matches!(
            wal.compact(&[big]),
            Err(WalError::RecordTooLarge { .. })
        ));
        assert_eq!(wal.len_bytes(), HEADER_LEN as u64);
        wal.append(&reg(2)).unwrap();
        drop(wal);
        assert_eq!(Wal::<Reg>::open(&dir.0, opts).unwrap().1, [reg(2)]);
    }

    #[test]
    fn record_of_another_type_is_a_decode_error() {
        let dir = TestDir::new("decode");
        let (mut wal, _) = Wal::<String>::open(&dir.0, WalOptions::default()).unwrap();
        wal.append(&"\u{ff}\u{ff}".to_owned()).unwrap();
        drop(wal);
        let err = open_err(&dir);
        assert!(
            matches!(err, WalError::Decode { offset, .. } if offset == HEADER_LEN as u64)
                || matches!(
                    err,
                    WalError::Corrupt {
                        problem: FrameProblem::TrailingBytes(_),
                        ..
                    }
                ),
            "{err:?}"
        );
    }

    #[test]
    fn bad_header_is_an_error() {
        let dir = TestDir::new("header");
        write_records(&dir, 1);
        patch(&log0(&dir), 0, b"NOTAWAL!");
        let err = open_err(&dir);
        assert!(
            matches!(&err, WalError::BadHeader { problem: HeaderProblem::Magic, path } if *path == log0(&dir)),
            "{err:?}"
        );
        fs::write(log0(&dir), &MAGIC[..5]).unwrap();
        assert!(matches!(
            open_err(&dir),
            WalError::BadHeader {
                problem: HeaderProblem::Short,
                ..
            }
        ));
    }

    #[test]
    fn corrupt_snapshot_is_an_error() {
        let dir = TestDir::new("badsnap");
        let (mut wal, _) = open(&dir);
        wal.compact(&regs(0..3)).unwrap();
        drop(wal);
        let len = fs::metadata(dir.file(SNAPSHOT)).unwrap().len();
        patch(&dir.file(SNAPSHOT), len - 1, &[0xff]);
        let err = open_err(&dir);
        assert!(
            matches!(&err, WalError::Corrupt { path, problem: FrameProblem::Checksum, .. } if *path == dir.file(SNAPSHOT)),
            "{err:?}"
        );
    }

    #[test]
    fn snapshot_cut_at_a_frame_boundary_is_an_error() {
        let dir = TestDir::new("cutsnap");
        let (mut wal, _) = open(&dir);
        wal.compact(&regs(0..3)).unwrap();
        drop(wal);
        let data = fs::read(dir.file(SNAPSHOT)).unwrap();
        let first_len = u32::from_le_bytes(data[HEADER_LEN..HEADER_LEN + 4].try_into().unwrap());
        let first_end = HEADER_LEN + FRAME_HEADER_LEN + first_len as usize;
        fs::write(dir.file(SNAPSHOT), &data[..first_end]).unwrap();
        let err = open_err(&dir);
        assert!(
            matches!(
                err,
                WalError::SnapshotCount {
                    declared: 3,
                    found: 1,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn interrupted_compaction_before_commit_keeps_the_old_state() {
        let dir = TestDir::new("uncommitted");
        write_records(&dir, 3);
        // Steps 1-2 done, step 3 (rename) not: a snapshot.tmp and an empty
        // newer log lie around.
        fs::write(dir.file(SNAPSHOT_TMP), b"half a snapshot").unwrap();
        create_segment(&dir.0, 1, [7; 8]).unwrap();
        fs::write(dir.file("log-0000000000000002.tmp"), b"junk").unwrap();
        let (mut wal, got) = open(&dir);
        assert_eq!(got, regs(0..3));
        assert_eq!(dir.names(), ["lock", "log-0000000000000000"]);
        // And a later compaction reuses generation 1 cleanly.
        wal.compact(&got).unwrap();
        drop(wal);
        assert_eq!(open(&dir).1, regs(0..3));
    }

    #[test]
    fn interrupted_compaction_after_commit_does_not_duplicate() {
        let dir = TestDir::new("committed");
        write_records(&dir, 3);
        let old_log = fs::read(log0(&dir)).unwrap();
        let (mut wal, got) = open(&dir);
        wal.compact(&got).unwrap();
        wal.append(&reg(3)).unwrap();
        drop(wal);
        // Step 4 (remove the old log) did not happen.
        fs::write(log0(&dir), old_log).unwrap();
        let (_wal, got) = open(&dir);
        assert_eq!(got, regs(0..4));
        assert_eq!(dir.names(), ["lock", "log-0000000000000001", "snapshot"]);
    }

    #[test]
    fn newer_log_with_records_is_an_error() {
        let dir = TestDir::new("orphan");
        let (mut wal, _) = open(&dir);
        wal.compact(&[]).unwrap();
        wal.append(&reg(0)).unwrap();
        drop(wal);
        fs::remove_file(dir.file(SNAPSHOT)).unwrap();
        assert!(matches!(open_err(&dir), WalError::OrphanSegment { .. }));
    }

    #[test]
    fn missing_log_is_an_error() {
        let dir = TestDir::new("missing");
        let (mut wal, _) = open(&dir);
        wal.compact(&regs(0..2)).unwrap();
        drop(wal);
        fs::remove_file(dir.file(&segment_name(1))).unwrap();
        assert!(matches!(
            open_err(&dir),
            WalError::MissingSegment { generation: 1, .. }
        ));
    }

    #[test]
    fn second_open_is_refused() {
        let dir = TestDir::new("lock");
        let (wal, _) = open(&dir);
        let err = open_err(&dir);
        assert!(
            matches!(&err, WalError::Locked { pid, path } if *pid == std::process::id() && *path == dir.file(LOCK)),
            "{err:?}"
        );
        drop(wal);
        let (_wal, _) = open(&dir);
    }

    #[test]
    fn stale_lock_is_taken_over() {
        let dir = TestDir::new("stale");
        write_records(&dir, 1);
        // pid_max is at most 2^22: no such process.
        fs::write(dir.file(LOCK), "4000000000 12345\n").unwrap();
        fs::write(dir.file("lock.4000000000.tmp"), "4000000000 12345\n").unwrap();
        let (_wal, got) = open(&dir);
        assert_eq!(got, regs(0..1));
        assert_eq!(dir.names(), ["lock", "log-0000000000000000"]);
        // Our own pid with another start time: a previous process whose pid
        // we reuse.
        drop(_wal);
        fs::write(dir.file(LOCK), format!("{} 1\n", std::process::id())).unwrap();
        let (_wal, got) = open(&dir);
        assert_eq!(got, regs(0..1));
    }

    #[test]
    fn proc_stat_reads_our_start_time() {
        let me = proc_stat(std::process::id()).unwrap();
        assert!(!me.zombie);
        assert!(me.start > 0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Append(u16),
        Batch(Vec<u16>),
        /// Keep only the records whose value is not divisible by `n`.
        Compact(u16),
        Reopen,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => any::<u16>().prop_map(Op::Append),
            2 => prop::collection::vec(any::<u16>(), 0..5).prop_map(Op::Batch),
            1 => (2..5u16).prop_map(Op::Compact),
            1 => Just(Op::Reopen),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        #[test]
        fn matches_in_memory_model(ops in prop::collection::vec(op(), 0..40)) {
            let dir = TestDir::new("model");
            let opts = WalOptions::default();
            let (mut wal, got) = Wal::<u16>::open(&dir.0, opts).unwrap();
            prop_assert!(got.is_empty());
            let mut model: Vec<u16> = Vec::new();
            let mut since = 0u64;
            for op in ops {
                match op {
                    Op::Append(v) => {
                        wal.append(&v).unwrap();
                        model.push(v);
                        since += 1;
                    }
                    Op::Batch(vs) => {
                        wal.append_batch(&vs).unwrap();
                        since += vs.len() as u64;
                        model.extend(vs);
                    }
                    Op::Compact(n) => {
                        model.retain(|v| v % n != 0);
                        wal.compact(&model).unwrap();
                        since = 0;
                    }
                    Op::Reopen => {
                        drop(wal);
                        let (w, got) = Wal::<u16>::open(&dir.0, opts).unwrap();
                        wal = w;
                        prop_assert_eq!(&got, &model);
                    }
                }
                prop_assert_eq!(wal.records_since_snapshot(), since);
            }
            drop(wal);
            let (_wal, got) = Wal::<u16>::open(&dir.0, opts).unwrap();
            prop_assert_eq!(got, model);
        }
    }

    /// `cargo test -p svcroute-mda --release --lib wal::test::bench -- --ignored --nocapture`
    #[test]
    #[ignore]
    #[allow(clippy::disallowed_methods)]
    fn bench_append_fsync() {
        use std::time::Instant;

        let dir = TestDir::new("bench");
        let (mut wal, _) = open(&dir);
        let n = 2000u64;
        let t = Instant::now();
        for i in 0..n {
            wal.append(&reg(i)).unwrap();
        }
        let single = n as f64 / t.elapsed().as_secs_f64();

        let batch = regs(0..32);
        let rounds = 500u64;
        let t = Instant::now();
        for _ in 0..rounds {
            wal.append_batch(&batch).unwrap();
        }
        let batched = (rounds * 32) as f64 / t.elapsed().as_secs_f64();

        let state = regs(0..10_000);
        let t = Instant::now();
        wal.compact(&state).unwrap();
        let compact_ms = t.elapsed().as_secs_f64() * 1e3;

        drop(wal);
        let t = Instant::now();
        let (_wal, got) = open(&dir);
        let replay_ms = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(got.len(), 10_000);
        println!(
            "append+fdatasync: {single:.0} records/s; batches of 32: {batched:.0} records/s; \
             compact 10k records: {compact_ms:.1} ms; reopen 10k: {replay_ms:.1} ms"
        );
    }
}
