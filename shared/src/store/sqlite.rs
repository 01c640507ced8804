//! The embedded adapter: SQLite in WAL mode, durable across restarts and process kills.
//!
//! Writes go to one writer thread (SQLite has one writer anyway), which commits every write
//! that queued meanwhile as one group; reads use a small pool of read connections on tokio's
//! blocking pool so that they never queue behind writes and the async runtime never waits on
//! disk.

use super::changes::{Change, ChangeLog, ChangePage};
use super::*;
use crate::time::Ts;
use rusqlite::{params, Connection, OptionalExtension, Statement};
use std::cell::RefCell;
use std::path::Path;
use std::sync::{Arc, Mutex};

const READERS: usize = 4;

/// Pages of at most this many rows are read in place (see [`SqliteStore::read_page`]): the
/// background passes' batches (100 a shard) and a claim's look at its queue's head.
const INLINE_ROWS: usize = 128;

/// SQLite-backed [`Store`], and the [`ChangeLog`] of the tables it is told to keep one of
/// ([`SqliteStore::keep_changes`]).
#[derive(Clone)]
pub struct SqliteStore {
    writer: std::sync::mpsc::Sender<WriteJob>,
    readers: Arc<Vec<Mutex<Connection>>>,
    log: Arc<LogState>,
}

/// What the writer thread and the change log's readers share.
#[derive(Default)]
struct LogState {
    /// The tables whose writes the log keeps; none until [`SqliteStore::keep_changes`].
    streamed: std::sync::OnceLock<Vec<&'static str>>,
    /// Told after a commit that appended to the log.
    appended: Arc<tokio::sync::Notify>,
}

fn other(e: impl std::fmt::Display) -> StoreError {
    StoreError::Other(e.to_string())
}

/// How durably commits reach the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sync {
    /// WAL with `synchronous=NORMAL`: survives a killed process (only an OS crash or power
    /// loss may lose the last commits).
    #[default]
    Normal,
    /// `synchronous=FULL`: also survives power loss, at the cost of speed.
    Full,
}

fn open(path: &Path, sync: Sync) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(other)?;
    let sync = match sync {
        Sync::Normal => "NORMAL",
        Sync::Full => "FULL",
    };
    conn.execute_batch(&format!(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous={sync}; PRAGMA busy_timeout=10000; PRAGMA foreign_keys=OFF;"
    ))
    .map_err(other)?;
    // Room for every statement a connection prepares (the writer's transaction control
    // included; the default of 16 would evict and re-parse).
    conn.set_prepared_statement_cache_capacity(64);
    // Without the query-planner stability guarantee, SQLite re-prepares cached statements
    // that ORDER BY bound key columns on nearly every run (measured: 99 of 100).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map_err(other)?;
    Ok(conn)
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path`, with [`Sync::Normal`].
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, Sync::Normal)
    }

    /// Opens (creating if needed) the database file at `path`.
    pub fn open_with(path: &Path, sync: Sync) -> Result<Self, StoreError> {
        let writer = open(path, sync)?;
        writer
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS items (
                    tbl TEXT NOT NULL, pk TEXT NOT NULL, sk TEXT NOT NULL,
                    version INTEGER NOT NULL, data BLOB NOT NULL, entries BLOB,
                    PRIMARY KEY (tbl, pk, sk)) WITHOUT ROWID;
                 CREATE TABLE IF NOT EXISTS idx (
                    tbl TEXT NOT NULL, idx TEXT NOT NULL, ipk TEXT NOT NULL, isk TEXT NOT NULL,
                    pk TEXT NOT NULL, sk TEXT NOT NULL,
                    PRIMARY KEY (tbl, idx, ipk, isk, pk, sk)) WITHOUT ROWID;
                 CREATE TABLE IF NOT EXISTS changes (
                    seq INTEGER PRIMARY KEY, tbl TEXT NOT NULL, pk TEXT NOT NULL,
                    sk TEXT NOT NULL, version INTEGER NOT NULL, data BLOB NOT NULL);
                 CREATE TABLE IF NOT EXISTS change_readers (
                    reader TEXT PRIMARY KEY, seq INTEGER NOT NULL,
                    holder TEXT, held_until INTEGER) WITHOUT ROWID;",
            )
            .map_err(other)?;
        migrate_entries(&writer)?;
        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            readers.push(Mutex::new(open(path, sync)?));
        }
        let (jobs, queue) = std::sync::mpsc::channel();
        let log = Arc::new(LogState::default());
        let shared = log.clone();
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || writer_loop(writer, queue, &shared))
            .map_err(other)?;
        Ok(SqliteStore {
            writer: jobs,
            readers: Arc::new(readers),
            log,
        })
    }

    /// From now on keeps a change log of `tables` ([`ChangeLog`]) for exactly `readers`:
    /// a reader new to the file starts at the log's beginning, and the positions of readers
    /// no longer named are dropped (else what they never read would be kept for ever). Call
    /// it before the first write; a second call must name the same tables.
    pub async fn keep_changes(
        &self,
        tables: &[&'static str],
        readers: &[&'static str],
    ) -> Result<(), StoreError> {
        let streamed = self.log.streamed.get_or_init(|| tables.to_vec());
        if streamed.as_slice() != tables {
            return Err(StoreError::Validation(
                "the change log already keeps other tables".into(),
            ));
        }
        let readers: Vec<&'static str> = readers.to_vec();
        self.write_txn(move |w| {
            let known: Vec<String> = w
                .conn
                .prepare_cached("SELECT reader FROM change_readers")
                .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
                .map_err(other)?;
            for gone in known.iter().filter(|k| !readers.contains(&k.as_str())) {
                w.conn
                    .prepare_cached("DELETE FROM change_readers WHERE reader = ?1")
                    .and_then(|mut s| s.execute(params![gone]))
                    .map_err(other)?;
            }
            for r in &readers {
                w.conn
                    .prepare_cached(
                        "INSERT OR IGNORE INTO change_readers (reader, seq) VALUES (?1, 0)",
                    )
                    .and_then(|mut s| s.execute(params![r]))
                    .map_err(other)?;
            }
            trim(w)?;
            Ok(0)
        })
        .await
        .map(|_| ())
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let readers = self.readers.clone();
        tokio::task::spawn_blocking(move || {
            // Take the first free reader; if all are busy, wait on a random one.
            for r in readers.iter() {
                if let Ok(conn) = r.try_lock() {
                    return f(&conn);
                }
            }
            let i = rand::random::<u32>() as usize % readers.len();
            let conn = readers[i].lock().map_err(other)?;
            f(&conn)
        })
        .await
        .map_err(other)?
    }

    /// A point read: run in place when a reader connection is free (a cached B-tree lookup
    /// costs less than handing it to another thread), else on the blocking pool.
    async fn read_point<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        for r in self.readers.iter() {
            if let Ok(conn) = r.try_lock() {
                return f(&conn);
            }
        }
        self.read(f).await
    }

    /// A page of at most `limit` rows: in place as a point read if it is small (what handing
    /// it to another thread costs is then most of its cost), else on the blocking pool.
    async fn read_page<T: Send + 'static>(
        &self,
        limit: usize,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        if limit <= INLINE_ROWS {
            self.read_point(f).await
        } else {
            self.read(f).await
        }
    }

    /// Runs `f` on the writer thread inside its own savepoint; answers once committed.
    async fn write_txn(
        &self,
        f: impl FnOnce(&Writer<'_>) -> Result<u64, StoreError> + Send + 'static,
    ) -> Result<u64, StoreError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.writer
            .send(WriteJob {
                f: Box::new(f),
                reply,
            })
            .map_err(|_| other("the SQLite writer thread has stopped"))?;
        answer
            .await
            .map_err(|_| other("the SQLite writer thread has stopped"))?
    }
}

type WriteFn = Box<dyn FnOnce(&Writer<'_>) -> Result<u64, StoreError> + Send>;

/// The writer thread's statements, prepared once for the thread's life. Looking a statement
/// up in rusqlite's cache hashes its SQL twice (taking it out, putting it back), which came to
/// about 3 % of a life cycle's instructions; these are used by field instead.
struct Writer<'c> {
    conn: &'c Connection,
    log: &'c LogState,
    /// Set when a write of the current group appended to the change log.
    appended: std::cell::Cell<bool>,
    append_change: RefCell<Statement<'c>>,
    begin: RefCell<Statement<'c>>,
    commit: RefCell<Statement<'c>>,
    rollback: RefCell<Statement<'c>>,
    savepoint: RefCell<Statement<'c>>,
    release: RefCell<Statement<'c>>,
    rollback_to: RefCell<Statement<'c>>,
    current: RefCell<Statement<'c>>,
    delete_item: RefCell<Statement<'c>>,
    put_item: RefCell<Statement<'c>>,
    put_entry: RefCell<Statement<'c>>,
    delete_entry: RefCell<Statement<'c>>,
}

impl<'c> Writer<'c> {
    fn prepare(conn: &'c Connection, log: &'c LogState) -> rusqlite::Result<Self> {
        let s = |sql: &str| conn.prepare(sql).map(RefCell::new);
        Ok(Writer {
            conn,
            log,
            appended: std::cell::Cell::new(false),
            append_change: s("INSERT INTO changes (tbl, pk, sk, version, data) VALUES (?1, ?2, ?3, ?4, ?5)")?,
            begin: s("BEGIN IMMEDIATE")?,
            commit: s("COMMIT")?,
            rollback: s("ROLLBACK")?,
            savepoint: s("SAVEPOINT w")?,
            release: s("RELEASE w")?,
            rollback_to: s("ROLLBACK TO w")?,
            current: s("SELECT version, entries FROM items WHERE tbl=?1 AND pk=?2 AND sk=?3")?,
            delete_item: s("DELETE FROM items WHERE tbl=?1 AND pk=?2 AND sk=?3")?,
            put_item: s("INSERT OR REPLACE INTO items (tbl, pk, sk, version, data, entries) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?,
            put_entry: s("INSERT OR REPLACE INTO idx (tbl, idx, ipk, isk, pk, sk) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?,
            delete_entry: s("DELETE FROM idx WHERE tbl=?1 AND idx=?2 AND ipk=?3 AND isk=?4 AND pk=?5 AND sk=?6")?,
        })
    }
}

/// Runs one statement without parameters.
fn run(stmt: &RefCell<Statement<'_>>) -> rusqlite::Result<()> {
    stmt.borrow_mut().execute([]).map(|_| ())
}

/// One write waiting for the writer thread.
struct WriteJob {
    f: WriteFn,
    reply: tokio::sync::oneshot::Sender<Result<u64, StoreError>>,
}

/// Most writes committed together.
const GROUP_MAX: usize = 128;

/// The writer thread: group commit. Every write that queued while the previous commit ran goes
/// into one SQLite transaction, each inside its own savepoint so that a failed condition
/// rolls back only that write. Nobody hears back before the commit, so a caller's success is
/// as durable as a lone commit would have made it; if the commit fails, every write in the
/// group fails and none took effect.
fn writer_loop(conn: Connection, jobs: std::sync::mpsc::Receiver<WriteJob>, log: &LogState) {
    let w = match Writer::prepare(&conn, log) {
        Ok(w) => w,
        Err(e) => {
            // Every write is answered with why, rather than the thread vanishing.
            tracing::error!(error = %e, "the SQLite writer cannot prepare its statements");
            while let Ok(job) = jobs.recv() {
                let _ = job.reply.send(Err(other(&e)));
            }
            return;
        }
    };
    let mut group: Vec<WriteJob> = Vec::with_capacity(GROUP_MAX);
    while let Ok(first) = jobs.recv() {
        group.push(first);
        while group.len() < GROUP_MAX {
            match jobs.try_recv() {
                Ok(j) => group.push(j),
                Err(_) => break,
            }
        }
        let results = run_group(&w, &mut group);
        for (job, result) in group.drain(..).zip(results) {
            let _ = job.reply.send(result);
        }
        if w.appended.replace(false) {
            // After the commit: a reader woken now finds the changes. (A failed group's flag
            // wakes readers for nothing, which costs them a read.)
            log.appended.notify_waiters();
        }
    }
}

fn run_group(w: &Writer<'_>, group: &mut [WriteJob]) -> Vec<Result<u64, StoreError>> {
    let n = group.len();
    let fail_all = |e: rusqlite::Error| -> Vec<Result<u64, StoreError>> {
        (0..n).map(|_| Err(other(&e))).collect()
    };
    if let Err(e) = run(&w.begin) {
        return fail_all(e);
    }
    // A write alone needs no savepoint: its own failure rolls the whole transaction back.
    let alone = n == 1;
    let mut results = Vec::with_capacity(n);
    for job in group.iter_mut() {
        let f = std::mem::replace(&mut job.f, Box::new(|_| Ok(0)));
        let started = if alone {
            Ok(())
        } else {
            run(&w.savepoint).map_err(other)
        };
        // A panicking write must not take the writer thread (and every later write) down.
        let result = started.and_then(|_| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(w)))
                .unwrap_or_else(|_| Err(other("a write panicked")))
        });
        let ended = match (alone, result.is_ok()) {
            (true, _) => Ok(()),
            (false, true) => run(&w.release),
            (false, false) => run(&w.rollback_to).and_then(|_| run(&w.release)),
        };
        if let Err(e) = ended {
            let _ = run(&w.rollback);
            return fail_all(e);
        }
        results.push(result);
    }
    let end = if alone && results.iter().any(|r| r.is_err()) {
        &w.rollback
    } else {
        &w.commit
    };
    if let Err(e) = run(end) {
        let _ = run(&w.rollback);
        return fail_all(e);
    }
    results
}

/// Brings a database written before items kept their index entries up to date, in one
/// transaction: each item's entries are copied from the `idx` table into its row, and the
/// index that found them there (a second B-tree for every entry written) is dropped.
fn migrate_entries(conn: &Connection) -> Result<(), StoreError> {
    // Checked inside the write lock: another process may be migrating the same file.
    conn.execute_batch("BEGIN IMMEDIATE").map_err(other)?;
    let has_entries = conn
        .prepare("SELECT 1 FROM pragma_table_info('items') WHERE name = 'entries'")
        .and_then(|mut s| s.exists([]));
    let migrated = match has_entries {
        Ok(true) => Ok(()),
        // `length` of a blob counts bytes, as `decode_entries` reads them.
        Ok(false) => conn.execute_batch(
            "ALTER TABLE items ADD COLUMN entries BLOB;
             UPDATE items SET entries = (
                SELECT CAST(group_concat(
                    length(CAST(x.idx AS BLOB)) || ':' || x.idx ||
                    length(CAST(x.ipk AS BLOB)) || ':' || x.ipk ||
                    length(CAST(x.isk AS BLOB)) || ':' || x.isk, '') AS BLOB)
                FROM idx x WHERE x.tbl = items.tbl AND x.pk = items.pk AND x.sk = items.sk);
             DROP INDEX IF EXISTS idx_by_item;",
        ),
        Err(e) => Err(e),
    };
    match migrated {
        Ok(()) => conn.execute_batch("COMMIT").map_err(other),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(other(e))
        }
    }
}

/// An item's index entries as its row keeps them: each of index, partition key and sort key
/// as `<byte length>:<bytes>`, entry after entry (no separator can clash with a key).
fn encode_entries(entries: &[IndexEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        for part in [e.index, e.pk.as_str(), e.sk.as_str()] {
            out.extend_from_slice(part.len().to_string().as_bytes());
            out.push(b':');
            out.extend_from_slice(part.as_bytes());
        }
    }
    out
}

/// The entries [`encode_entries`] wrote, as (index, partition key, sort key), borrowed.
fn decode_entries(bytes: &[u8]) -> Result<Vec<(&str, &str, &str)>, StoreError> {
    // One UTF-8 check for the whole list, not one per part.
    let mut text = std::str::from_utf8(bytes).map_err(|_| corrupt())?;
    let mut out = Vec::new();
    while !text.is_empty() {
        out.push((part(&mut text)?, part(&mut text)?, part(&mut text)?));
    }
    Ok(out)
}

fn corrupt() -> StoreError {
    other("an item's stored index entries are corrupt")
}

/// Takes one `<byte length>:<bytes>` from the front of `text`.
fn part<'a>(text: &mut &'a str) -> Result<&'a str, StoreError> {
    let (len, rest) = text.split_once(':').ok_or_else(corrupt)?;
    let len: usize = len.parse().map_err(|_| corrupt())?;
    // `get` refuses a length that ends outside the text or inside a character.
    let part = rest.get(..len).ok_or_else(corrupt)?;
    *text = &rest[len..];
    Ok(part)
}

/// An item as it stands before a write: its version and index entries.
struct Current {
    version: u64,
    entries: Option<Vec<u8>>,
}

fn current(
    tx: &Writer<'_>,
    table: &str,
    pk: &str,
    sk: &str,
) -> Result<Option<Current>, StoreError> {
    tx.current
        .borrow_mut()
        .query_row(params![table, pk, sk], |r| {
            Ok(Current {
                version: r.get::<_, i64>(0)? as u64,
                entries: r.get(1)?,
            })
        })
        .optional()
        .map_err(other)
}

fn cond_holds(cond: Cond, current: Option<&Current>) -> bool {
    let version = current.map(|c| c.version);
    match cond {
        Cond::None => true,
        Cond::NotExists => version.is_none(),
        Cond::Exists => version.is_some(),
        Cond::Version(v) => version == Some(v),
    }
}

fn delete_entry(
    tx: &Writer<'_>,
    table: &str,
    (i, ipk, isk): &(&str, &str, &str),
    pk: &str,
    sk: &str,
) -> Result<(), StoreError> {
    tx.delete_entry
        .borrow_mut()
        .execute(params![table, i, ipk, isk, pk, sk])
        .map_err(other)
        .map(|_| ())
}

/// Applies one op whose condition already held. Returns the new version.
fn apply(
    tx: &Writer<'_>,
    op: &WriteOp,
    current: Option<Current>,
    encoded: Option<&[u8]>,
) -> Result<u64, StoreError> {
    let (table, pk, sk) = op.key();
    let version = current.as_ref().map_or(0, |c| c.version);
    // Decoded only by the ops that change entries (a condition check leaves them).
    let stored = current.as_ref().and_then(|c| c.entries.as_deref());
    let old = || decode_entries(stored.unwrap_or_default());
    match op {
        WriteOp::Check { .. } => Ok(version),
        WriteOp::Delete { .. } => {
            tx.delete_item
                .borrow_mut()
                .execute(params![table, pk, sk])
                .map_err(other)?;
            for row in &old()? {
                delete_entry(tx, table, row, pk, sk)?;
            }
            Ok(0)
        }
        WriteOp::Put { item, .. } => {
            let version = version + 1;
            tx.put_item
                .borrow_mut()
                .execute(params![
                    table,
                    pk,
                    sk,
                    version as i64,
                    encoded.unwrap_or_default(),
                    encode_entries(&item.indexes)
                ])
                .map_err(other)?;
            // Only the entries that changed are touched: most writes keep most of theirs.
            let old = old()?;
            let same = |e: &IndexEntry, (i, ipk, isk): &(&str, &str, &str)| {
                e.index == *i && e.pk == *ipk && e.sk == *isk
            };
            for row in &old {
                if !item.indexes.iter().any(|e| same(e, row)) {
                    delete_entry(tx, table, row, pk, sk)?;
                }
            }
            for e in &item.indexes {
                if old.iter().any(|row| same(e, row)) {
                    continue;
                }
                tx.put_entry
                    .borrow_mut()
                    .execute(params![table, e.index, e.pk, e.sk, pk, sk])
                    .map_err(other)?;
            }
            if tx.log.streamed.get().is_some_and(|t| t.contains(&table)) {
                // In the write's own savepoint: a write rolled back leaves no change.
                tx.append_change
                    .borrow_mut()
                    .execute(params![
                        table,
                        pk,
                        sk,
                        version as i64,
                        encoded.unwrap_or_default()
                    ])
                    .map_err(other)?;
                tx.appended.set(true);
            }
            Ok(version)
        }
    }
}

fn encode(op: &WriteOp) -> Result<Option<Vec<u8>>, StoreError> {
    match op {
        // Copied out, since the writer thread takes the op with it.
        WriteOp::Put { item, .. } => encode_item(item).map(|b| Some(b.into_owned())),
        _ => Ok(None),
    }
}

fn row_to_item(pk: String, sk: String, version: i64, data: Vec<u8>) -> Item {
    Item {
        pk,
        sk,
        version: version as u64,
        data: Data::from_bytes(data),
        indexes: vec![],
    }
}

/// `after < key` on (a, b, c) and the range's prefix/upper bound, as SQL and parameters.
fn range_sql(
    col: &str,
    range: &SkRange,
    after: Option<&Cursor>,
    keys: (&str, &str),
) -> (String, Vec<String>) {
    let mut sql = String::new();
    let mut args = Vec::new();
    if let Some(p) = &range.prefix {
        // Prefix as a half-open byte range; '\u{10FFFF}' sorts after every character we store.
        for part in [" AND ", col, " >= ? AND ", col, " < ?"] {
            sql.push_str(part);
        }
        args.push(p.clone());
        args.push(format!("{p}\u{10FFFF}"));
    }
    if let Some(u) = &range.upto {
        for part in [" AND ", col, " <= ?"] {
            sql.push_str(part);
        }
        args.push(u.clone());
    }
    if let Some((a, b, c)) = after {
        sql.push_str(&format!(" AND ({col}, {}, {}) > (?, ?, ?)", keys.0, keys.1));
        args.push(a.clone());
        args.push(b.clone());
        args.push(c.clone());
    }
    (sql, args)
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(
        &self,
        table: &'static str,
        pk: &str,
        sk: &str,
    ) -> Result<Option<Item>, StoreError> {
        let (pk, sk) = (pk.to_string(), sk.to_string());
        self.read_point(move |c| {
            let row = c
                .prepare_cached("SELECT version, data FROM items WHERE tbl=?1 AND pk=?2 AND sk=?3")
                .map_err(other)?
                .query_row(params![table, pk, sk], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
                })
                .optional()
                .map_err(other)?;
            Ok(row.map(|(v, d)| row_to_item(pk, sk, v, d)))
        })
        .await
    }

    async fn query(
        &self,
        table: &'static str,
        pk: &str,
        range: &SkRange,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        super::check_cursor(false, pk, range, after)?;
        let pk = pk.to_string();
        // The base table's cursor is (sk, pk, sk); only the first part matters.
        let (cond, args) = range_sql("sk", range, after, ("pk", "sk"));
        self.read_page(limit, move |c| {
            let sql = format!(
                "SELECT sk, version, data FROM items WHERE tbl=? AND pk=? {cond} ORDER BY sk LIMIT {}",
                limit + 1
            );
            let mut stmt = c.prepare_cached(&sql).map_err(other)?;
            let mut all: Vec<rusqlite::types::Value> = vec![table.to_string().into(), pk.clone().into()];
            all.extend(args.into_iter().map(Into::into));
            let rows = stmt
                .query_map(rusqlite::params_from_iter(all), |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, Vec<u8>>(2)?))
                })
                .map_err(other)?;
            let mut items = Vec::new();
            for row in rows {
                let (sk, v, d) = row.map_err(other)?;
                items.push(row_to_item(pk.clone(), sk, v, d));
            }
            let next = if items.len() > limit {
                items.truncate(limit);
                items.last().map(|i| (i.sk.clone(), i.pk.clone(), i.sk.clone()))
            } else {
                None
            };
            Ok(Page { items, next })
        })
        .await
    }

    async fn query_index(
        &self,
        table: &'static str,
        index: &'static str,
        pk: &str,
        range: &SkRange,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        super::check_cursor(true, pk, range, after)?;
        let ipk = pk.to_string();
        let (cond, args) = range_sql("x.isk", range, after, ("x.pk", "x.sk"));
        self.read_page(limit, move |c| {
            let sql = format!(
                "SELECT x.isk, i.pk, i.sk, i.version, i.data FROM idx x
                 JOIN items i ON i.tbl = x.tbl AND i.pk = x.pk AND i.sk = x.sk
                 WHERE x.tbl=? AND x.idx=? AND x.ipk=? {cond}
                 ORDER BY x.isk, x.pk, x.sk LIMIT {}",
                limit + 1
            );
            let mut stmt = c.prepare_cached(&sql).map_err(other)?;
            let mut all: Vec<rusqlite::types::Value> = vec![
                table.to_string().into(),
                index.to_string().into(),
                ipk.into(),
            ];
            all.extend(args.into_iter().map(Into::into));
            let rows = stmt
                .query_map(rusqlite::params_from_iter(all), |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, Vec<u8>>(4)?,
                    ))
                })
                .map_err(other)?;
            let mut items = Vec::new();
            let mut cursors = Vec::new();
            for row in rows {
                let (isk, pk, sk, v, d) = row.map_err(other)?;
                cursors.push((isk, pk.clone(), sk.clone()));
                items.push(row_to_item(pk, sk, v, d));
            }
            let next = if items.len() > limit {
                items.truncate(limit);
                cursors.into_iter().nth(limit - 1)
            } else {
                None
            };
            Ok(Page { items, next })
        })
        .await
    }

    async fn scan_index_keys(
        &self,
        table: &'static str,
        index: &'static str,
        after: Option<&IndexKey>,
        limit: usize,
    ) -> Result<KeyPage, StoreError> {
        let after = after.cloned();
        self.read(move |c| {
            let from = match &after {
                Some(_) => "AND (ipk, isk, pk, sk) > (?3, ?4, ?5, ?6)",
                None => "",
            };
            let sql = format!(
                "SELECT ipk, isk, pk, sk FROM idx WHERE tbl=?1 AND idx=?2 {from}
                 ORDER BY ipk, isk, pk, sk LIMIT {}",
                limit + 1
            );
            let mut stmt = c.prepare_cached(&sql).map_err(other)?;
            let mut args: Vec<String> = vec![table.into(), index.into()];
            if let Some(k) = after {
                args.extend([k.ipk, k.isk, k.pk, k.sk]);
            }
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args), |r| {
                    Ok(IndexKey {
                        ipk: r.get(0)?,
                        isk: r.get(1)?,
                        pk: r.get(2)?,
                        sk: r.get(3)?,
                    })
                })
                .map_err(other)?;
            let mut keys = rows.collect::<Result<Vec<_>, _>>().map_err(other)?;
            let next = if keys.len() > limit {
                keys.truncate(limit);
                keys.last().cloned()
            } else {
                None
            };
            Ok(KeyPage { keys, next })
        })
        .await
    }

    async fn count_index(
        &self,
        table: &'static str,
        index: &'static str,
        pk: &str,
        range: &SkRange,
    ) -> Result<u64, StoreError> {
        let ipk = pk.to_string();
        let (cond, args) = range_sql("isk", range, None, ("pk", "sk"));
        self.read(move |c| {
            let sql = format!("SELECT COUNT(*) FROM idx WHERE tbl=? AND idx=? AND ipk=? {cond}");
            let mut all: Vec<rusqlite::types::Value> = vec![
                table.to_string().into(),
                index.to_string().into(),
                ipk.into(),
            ];
            all.extend(args.into_iter().map(Into::into));
            c.query_row(&sql, rusqlite::params_from_iter(all), |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as u64)
            .map_err(other)
        })
        .await
    }

    async fn write(&self, op: WriteOp) -> Result<u64, StoreError> {
        if matches!(op, WriteOp::Check { .. }) {
            return Err(StoreError::Validation(
                "a condition check only exists inside a transaction".into(),
            ));
        }
        let encoded = encode(&op)?;
        self.write_txn(move |tx| {
            let (table, pk, sk) = op.key();
            let current = current(tx, table, pk, sk)?;
            if !cond_holds(op.cond(), current.as_ref()) {
                return Err(StoreError::ConditionFailed);
            }
            apply(tx, &op, current, encoded.as_deref())
        })
        .await
    }

    async fn transact(&self, ops: Vec<WriteOp>) -> Result<(), StoreError> {
        check_transaction(&ops)?;
        let encoded = ops.iter().map(encode).collect::<Result<Vec<_>, _>>()?;
        self.write_txn(move |tx| {
            let mut currents = Vec::with_capacity(ops.len());
            let mut reasons = Vec::with_capacity(ops.len());
            for op in &ops {
                let (table, pk, sk) = op.key();
                let current = current(tx, table, pk, sk)?;
                reasons.push(!cond_holds(op.cond(), current.as_ref()));
                currents.push(current);
            }
            if reasons.iter().any(|&failed| failed) {
                // Dropping the transaction rolls back; nothing was written yet anyway.
                return Err(StoreError::TransactionCancelled { reasons });
            }
            for ((op, current), enc) in ops.iter().zip(currents).zip(&encoded) {
                apply(tx, op, current, enc.as_deref())?;
            }
            Ok(0)
        })
        .await
        .map(|_| ())
    }
}

/// Forgets the changes every reader has passed, but for the last of them: the table's
/// largest `seq` stays, so that SQLite (which numbers a row one past the largest) never hands
/// out a position a reader has already passed.
fn trim(w: &Writer<'_>) -> Result<(), StoreError> {
    w.conn
        .prepare_cached("DELETE FROM changes WHERE seq < (SELECT MIN(seq) FROM change_readers)")
        .and_then(|mut s| s.execute([]))
        .map_err(other)
        .map(|_| ())
}

#[async_trait]
impl ChangeLog for SqliteStore {
    async fn position(&self, reader: &str) -> Result<u64, StoreError> {
        let reader = reader.to_string();
        self.read_point(move |c| {
            c.prepare_cached("SELECT seq FROM change_readers WHERE reader = ?1")
                .and_then(|mut s| {
                    s.query_row(params![reader], |r| r.get::<_, i64>(0))
                        .optional()
                })
                .map(|seq| seq.unwrap_or(0) as u64)
                .map_err(other)
        })
        .await
    }

    async fn changes_after(
        &self,
        after: u64,
        tables: &[&'static str],
        limit: usize,
    ) -> Result<ChangePage, StoreError> {
        let tables = tables.to_vec();
        self.read_page(limit, move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT seq, tbl, pk, sk, version, data FROM changes WHERE seq > ?1 \
                     ORDER BY seq LIMIT ?2",
                )
                .map_err(other)?;
            let mut rows = stmt
                .query(params![after as i64, limit as i64])
                .map_err(other)?;
            let mut page = ChangePage {
                next: after,
                ..ChangePage::default()
            };
            let mut read = 0;
            while let Some(row) = rows.next().map_err(other)? {
                read += 1;
                page.next = row.get::<_, i64>(0).map_err(other)? as u64;
                let tbl = row.get_ref(1).map_err(other)?.as_str().map_err(other)?;
                let Some(&table) = tables.iter().find(|t| **t == tbl) else {
                    continue;
                };
                page.changes.push(Change {
                    seq: page.next,
                    table,
                    item: row_to_item(
                        row.get(2).map_err(other)?,
                        row.get(3).map_err(other)?,
                        row.get(4).map_err(other)?,
                        row.get(5).map_err(other)?,
                    ),
                });
            }
            page.more = read == limit;
            Ok(page)
        })
        .await
    }

    async fn passed(&self, reader: &str, seq: u64) -> Result<(), StoreError> {
        let reader = reader.to_string();
        self.write_txn(move |w| {
            w.conn
                .prepare_cached("UPDATE change_readers SET seq = ?2 WHERE reader = ?1 AND seq < ?2")
                .and_then(|mut s| s.execute(params![reader, seq as i64]))
                .map_err(other)?;
            trim(w)?;
            Ok(0)
        })
        .await
        .map(|_| ())
    }

    async fn hold(
        &self,
        reader: &str,
        holder: &str,
        now: Ts,
        until: Ts,
        or_from: Option<&str>,
    ) -> Result<bool, StoreError> {
        let (reader, holder) = (reader.to_string(), holder.to_string());
        let or_from = or_from.map(str::to_string);
        self.write_txn(move |w| {
            w.conn
                .prepare_cached(
                    "UPDATE change_readers SET holder = ?2, held_until = ?4 WHERE reader = ?1 \
                     AND (holder IS NULL OR holder = ?2 OR held_until <= ?3 OR holder = ?5)",
                )
                .and_then(|mut s| s.execute(params![reader, holder, now.0, until.0, or_from]))
                .map_err(other)
                .map(|n| n as u64)
        })
        .await
        .map(|n| n == 1)
    }

    async fn holder(&self, reader: &str) -> Result<Option<(String, Ts)>, StoreError> {
        let reader = reader.to_string();
        self.read_point(move |c| {
            c.prepare_cached(
                "SELECT holder, held_until FROM change_readers \
                 WHERE reader = ?1 AND holder IS NOT NULL",
            )
            .and_then(|mut s| {
                s.query_row(params![reader], |r| {
                    Ok((r.get::<_, String>(0)?, Ts(r.get::<_, i64>(1)?)))
                })
                .optional()
            })
            .map_err(other)
        })
        .await
    }

    fn appended(&self) -> Arc<tokio::sync::Notify> {
        self.log.appended.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn passes_the_conformance_suite() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("db")).unwrap();
        super::super::conformance::run_all(Arc::new(store)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn keeps_a_change_log() {
        use crate::store::conformance::change_log_follows_writes;
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("db")).unwrap();
        store
            .keep_changes(&["conformance"], &["first", "second"])
            .await
            .unwrap();
        change_log_follows_writes(&store, &store).await;
        crate::store::conformance::a_change_log_reader_has_one_holder(&store).await;
    }

    /// Positions and unread changes survive reopening; readers no longer named are dropped,
    /// and so is what only they kept.
    #[tokio::test]
    async fn the_change_log_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let put = |pk: &str| WriteOp::Put {
            table: "t",
            item: Item::new(pk, "x", serde_json::json!({}), vec![]),
            cond: Cond::None,
        };
        let first = {
            let s = SqliteStore::open(&path).unwrap();
            s.keep_changes(&["t"], &["a", "b"]).await.unwrap();
            s.write(put("1")).await.unwrap();
            s.write(put("2")).await.unwrap();
            let page = s.changes_after(0, &["t"], 10).await.unwrap();
            s.passed("a", page.changes[0].seq).await.unwrap();
            page.changes[0].seq
        };
        let s = SqliteStore::open(&path).unwrap();
        s.keep_changes(&["t"], &["a"]).await.unwrap();
        assert_eq!(s.position("a").await.unwrap(), first);
        assert_eq!(s.position("b").await.unwrap(), 0);
        let page = s.changes_after(first, &["t"], 10).await.unwrap();
        assert_eq!(page.changes.len(), 1);
        assert_eq!(page.changes[0].item.pk, "2");
        // Only "a" remains: what it passed is forgotten (but for the last, see `trim`).
        let kept = s.changes_after(0, &["t"], 10).await.unwrap();
        assert_eq!(kept.changes.len(), 2);
        s.passed("a", page.next).await.unwrap();
        assert_eq!(
            s.changes_after(0, &["t"], 10).await.unwrap().changes.len(),
            1
        );
    }

    fn entry(index: &'static str, pk: &str, sk: &str) -> IndexEntry {
        IndexEntry {
            index,
            pk: pk.into(),
            sk: sk.into(),
        }
    }

    async fn listed(s: &SqliteStore, index: &'static str, pk: &str) -> Vec<String> {
        let page = s
            .query_index("t", index, pk, &SkRange::default(), None, 10)
            .await
            .unwrap();
        page.items.into_iter().map(|i| i.pk).collect()
    }

    /// A rewrite touches only the entries that changed; what it keeps, moves and drops reads
    /// back as written.
    #[tokio::test]
    async fn a_rewrite_keeps_moves_and_drops_entries() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("db")).unwrap();
        let put = |entries: Vec<IndexEntry>, cond| WriteOp::Put {
            table: "t",
            item: Item::new("a", "b", serde_json::json!({}), entries),
            cond,
        };
        let both = vec![entry("i", "p", "1"), entry("j", "q", "1")];
        let v = s.write(put(both.clone(), Cond::NotExists)).await.unwrap();
        let v = s.write(put(both, Cond::Version(v))).await.unwrap();
        assert_eq!(listed(&s, "i", "p").await, ["a"]);
        assert_eq!(listed(&s, "j", "q").await, ["a"]);
        let moved = vec![
            entry("i", "p", "1"),
            entry("j", "r", "1"),
            entry("k", "p", "1"),
        ];
        let v = s.write(put(moved, Cond::Version(v))).await.unwrap();
        assert_eq!(listed(&s, "i", "p").await, ["a"]);
        assert!(listed(&s, "j", "q").await.is_empty());
        assert_eq!(listed(&s, "j", "r").await, ["a"]);
        assert_eq!(listed(&s, "k", "p").await, ["a"]);
        s.write(put(vec![entry("k", "p", "1")], Cond::Version(v)))
            .await
            .unwrap();
        assert!(listed(&s, "i", "p").await.is_empty());
        assert!(listed(&s, "j", "r").await.is_empty());
        assert_eq!(listed(&s, "k", "p").await, ["a"]);
    }

    /// Writes committed together each keep their own outcome, and a lone write refused on its
    /// condition leaves nothing behind (nor an open transaction).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn writes_committed_together_keep_their_own_outcomes() {
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(SqliteStore::open(&dir.path().join("db")).unwrap());
        let put = |pk: String, cond| WriteOp::Put {
            table: "t",
            item: Item::new(pk, "x", serde_json::json!({}), vec![entry("i", "all", "x")]),
            cond,
        };
        let refused = s.write(put("lone".into(), Cond::Exists)).await;
        assert!(refused.is_err_and(|e| e.is_condition_failed()));
        assert!(s.get("t", "lone", "x").await.unwrap().is_none());
        let writes = (0..64).map(|n| {
            let (s, cond) = (
                s.clone(),
                if n % 2 == 0 {
                    Cond::NotExists
                } else {
                    Cond::Exists
                },
            );
            async move { s.write(put(format!("k{n}"), cond)).await }
        });
        let results = futures_util::future::join_all(writes).await;
        for (n, r) in results.iter().enumerate() {
            assert_eq!(r.is_ok(), n % 2 == 0, "write {n}: {r:?}");
        }
        let page = s
            .query_index("t", "i", "all", &SkRange::default(), None, 100)
            .await
            .unwrap();
        assert_eq!(page.items.len(), 32);
    }

    /// Index entries whose keys hold digits, colons and non-ASCII text come back as written.
    #[test]
    fn entries_encode_and_decode() {
        let entries = vec![entry("i", "12:3", "é:ü"), entry("j", "", ":")];
        let encoded = encode_entries(&entries);
        let back = decode_entries(&encoded).unwrap();
        let want: Vec<_> = entries
            .iter()
            .map(|e| (e.index, e.pk.as_str(), e.sk.as_str()))
            .collect();
        assert_eq!(back, want);
        assert!(decode_entries(b"").unwrap().is_empty());
        assert!(decode_entries(b"5:ab").is_err());
        assert!(decode_entries(b"1:a1:b").is_err());
        // A length that ends inside a character, one that is not a number, bytes not UTF-8.
        assert!(decode_entries("1:é1:a1:b".as_bytes()).is_err());
        assert!(decode_entries(b"x:a1:a1:b").is_err());
        assert!(decode_entries(b"1:\xff1:a1:b").is_err());
    }

    /// A database from before items kept their entries opens migrated: its entries still
    /// list, and a rewrite or a delete drops the old ones.
    #[tokio::test]
    async fn a_database_from_before_entries_in_rows_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE items (tbl TEXT NOT NULL, pk TEXT NOT NULL, sk TEXT NOT NULL,
                    version INTEGER NOT NULL, data BLOB NOT NULL,
                    PRIMARY KEY (tbl, pk, sk)) WITHOUT ROWID;
                 CREATE TABLE idx (tbl TEXT NOT NULL, idx TEXT NOT NULL, ipk TEXT NOT NULL,
                    isk TEXT NOT NULL, pk TEXT NOT NULL, sk TEXT NOT NULL,
                    PRIMARY KEY (tbl, idx, ipk, isk, pk, sk)) WITHOUT ROWID;
                 CREATE INDEX idx_by_item ON idx (tbl, pk, sk);
                 INSERT INTO items VALUES ('t', 'a', 'b', 1, X'7B7D'), ('t', 'c', 'b', 1, X'7B7D');
                 INSERT INTO idx VALUES ('t', 'i', 'p', 'é1', 'a', 'b'), ('t', 'j', 'q', '1', 'a', 'b'),
                    ('t', 'i', 'p', '2', 'c', 'b');",
            )
            .unwrap();
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(listed(&s, "i", "p").await, ["c", "a"]);
        s.write(WriteOp::Put {
            table: "t",
            item: Item::new("a", "b", serde_json::json!({}), vec![entry("k", "r", "1")]),
            cond: Cond::Version(1),
        })
        .await
        .unwrap();
        assert_eq!(listed(&s, "i", "p").await, ["c"]);
        assert!(listed(&s, "j", "q").await.is_empty());
        assert_eq!(listed(&s, "k", "r").await, ["a"]);
        s.write(WriteOp::Delete {
            table: "t",
            pk: "c".into(),
            sk: "b".into(),
            cond: Cond::None,
        })
        .await
        .unwrap();
        assert!(listed(&s, "i", "p").await.is_empty());
        drop(s);
        // Opening again finds it migrated.
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(listed(&s, "k", "r").await, ["a"]);
    }

    #[tokio::test]
    async fn data_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let s = SqliteStore::open(&path).unwrap();
            let idx = vec![IndexEntry {
                index: "i",
                pk: "p".into(),
                sk: "s".into(),
            }];
            s.write(WriteOp::Put {
                table: "t",
                item: Item::new("a", "b", serde_json::json!({"x": 1}), idx),
                cond: Cond::NotExists,
            })
            .await
            .unwrap();
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.get("t", "a", "b").await.unwrap().unwrap().data["x"], 1);
        assert_eq!(
            s.count_index("t", "i", "p", &SkRange::default())
                .await
                .unwrap(),
            1
        );
    }
}
