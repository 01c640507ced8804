//! A job's streams read from a store's [`ChangeLog`], as Lambda's event source mappings read
//! the tables' streams as deployed: batches in log order handed to the job's declared
//! [`Streams::run`](super::declare::Streams), a failing batch retried as the stream
//! declares, and the reader's position kept in the store. The local server runs its stream
//! jobs this way over the embedded store, so it runs the deployed stream code.

use super::declare::{Context, Job, Streams};
use super::{Budget, JobError};
use crate::events::drain::DrainError;
use crate::store::changes::{ChangeLog, ChangePage};
use crate::store::{Item, StoreError};
use crate::time::Ts;
use std::time::{Duration, Instant};

/// How often a follower marks its position in the store at most. What it handled since is
/// handled again after a crash (at least once, as a stream delivers), and a mark is a write.
pub const MARK_EVERY: Duration = Duration::from_secs(1);

/// How long a process holds a reader once it took it ([`ChangeLog::hold`]); it holds it again
/// once half of that has passed. A killed process's successor waits at most this long.
pub const HOLD_FOR: Duration = Duration::from_secs(10);

/// A name for this process as a holder of change-log readers ([`Follower::hold`]): its
/// host, its process id and a random part, so that [`holder_is_gone`] can tell, on the same
/// host, that the process is gone.
pub fn process_holder() -> String {
    format!(
        "{}/{}/{}",
        this_host().unwrap_or_default(),
        std::process::id(),
        crate::ids::new_slugid()
    )
}

/// True if `holder` ([`process_holder`]) names a process of this host that no longer runs.
/// Only where this can be told (Linux's `/proc`); elsewhere, and for other hosts' processes,
/// false: their holds run out instead.
pub fn holder_is_gone(holder: &str) -> bool {
    let mut parts = holder.splitn(3, '/');
    let (Some(host), Some(pid), Some(_)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let proc_fs = std::path::Path::new("/proc");
    pid.parse::<u32>().is_ok()
        && Some(host) == this_host().as_deref()
        && proc_fs.join("self").exists()
        && !proc_fs.join(pid).exists()
}

/// This host's name, where the system tells it (Linux).
fn this_host() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty() && !h.contains('/'))
}

/// One job reading its streams from a change log.
pub struct Follower<'a> {
    job: &'static Job,
    streams: &'static Streams,
    tables: Vec<&'static str>,
    log: &'a dyn ChangeLog,
    /// Where it stands: the log's position after what it handled.
    at: u64,
    /// Where the store last heard it stands.
    marked: u64,
    marked_at: Instant,
    /// Failures in a row of the batch at `at`.
    failures: u32,
    /// Until when this process holds the reader, if it does.
    held_until: Option<Ts>,
}

/// What one [`Follower::take`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Changes handed to the job.
    pub read: usize,
    /// What the job said it handled.
    pub done: usize,
    /// True if the log may hold more at once.
    pub more: bool,
}

fn store_error(e: StoreError) -> JobError {
    JobError::Drain(DrainError::Store(e))
}

impl<'a> Follower<'a> {
    /// `job`'s follower over `log`, from the position the store keeps for it; `None` for a
    /// job that reads no stream.
    pub async fn start(
        job: &'static Job,
        log: &'a dyn ChangeLog,
    ) -> Result<Option<Self>, JobError> {
        let Some(streams) = &job.streams else {
            return Ok(None);
        };
        let at = log.position(job.name).await.map_err(store_error)?;
        Ok(Some(Follower {
            job,
            streams,
            tables: streams.from.iter().map(|s| s.table).collect(),
            log,
            at,
            marked: at,
            marked_at: Instant::now(),
            failures: 0,
            held_until: None,
        }))
    }

    /// Where it stands in the log.
    pub fn position(&self) -> u64 {
        self.at
    }

    /// Reads the next page of at most `limit` changes for `followers` at once (the local
    /// server's stream jobs follow the same tables): from the earliest of their positions,
    /// of every table any of them follows. Each then [takes](Follower::take) its part.
    pub async fn read_for(
        log: &dyn ChangeLog,
        followers: &[&Follower<'_>],
        limit: usize,
    ) -> Result<ChangePage, JobError> {
        let from = followers.iter().map(|f| f.at).min().unwrap_or(0);
        let mut tables: Vec<&'static str> = vec![];
        for t in followers.iter().flat_map(|f| &f.tables) {
            if !tables.contains(t) {
                tables.push(t);
            }
        }
        log.changes_after(from, &tables, limit)
            .await
            .map_err(store_error)
    }

    /// Hands the job the changes of `page` (read from its position or before it) that are
    /// past its position and of its tables, within `budget`, then stands at the page's end.
    ///
    /// A failure that may pass (or any, for a job whose streams are the only copy of what it
    /// handles) leaves the batch to be read again at the next step, up to the streams'
    /// `retries`; past them, or at once for a failure that repeating cannot cure, the batch is
    /// given up with an error in the log, as Lambda gives it up to the failure destination
    /// (what it left is held for the job's scheduled pass or the sweeper).
    pub async fn take(
        &mut self,
        c: &Context<'_>,
        page: &ChangePage,
        budget: &Budget,
    ) -> Result<Step, JobError> {
        let items: Vec<Item> = page
            .changes
            .iter()
            .filter(|ch| ch.seq > self.at && self.tables.contains(&ch.table))
            .map(|ch| ch.item.clone())
            .collect();
        let read = items.len();
        if read == 0 {
            self.at = self.at.max(page.next);
            return Ok(Step {
                read,
                done: 0,
                more: page.more,
            });
        }
        match (self.streams.run)(c, items, Ts::now(), budget).await {
            Ok(handled) => {
                self.at = self.at.max(page.next);
                self.failures = 0;
                Ok(Step {
                    read,
                    done: handled.done,
                    more: page.more,
                })
            }
            Err(e) => {
                let retry = self.streams.only_copy || e.is_retryable();
                let retries = self
                    .streams
                    .from
                    .iter()
                    .map(|s| s.retries)
                    .max()
                    .unwrap_or(0);
                self.failures += 1;
                if retry && self.failures <= retries {
                    return Err(e);
                }
                tracing::error!(job = self.job.name, error = %e, from = self.at, to = page.next,
                    "stream batch given up; what it held waits for the scheduled pass or the sweeper");
                self.at = self.at.max(page.next);
                self.failures = 0;
                Ok(Step {
                    read,
                    done: 0,
                    more: page.more,
                })
            }
        }
    }

    /// Holds this follower's reader for `holder` at `now`, again once half of [`HOLD_FOR`]
    /// has passed; true if this process follows it. Taken anew, it goes on from the reader's
    /// marked position, which another holder may have moved meanwhile.
    pub async fn hold(&mut self, holder: &str, now: Ts) -> Result<bool, JobError> {
        let hold_ms = HOLD_FOR.as_millis() as i64;
        if self.held_until.is_some_and(|u| u.0 - now.0 > hold_ms / 2) {
            return Ok(true);
        }
        let until = Ts(now.0 + hold_ms);
        let name = self.job.name;
        let mut held = self
            .log
            .hold(name, holder, now, until, None)
            .await
            .map_err(store_error)?;
        if !held {
            // A holder this host can tell is gone (killed, and restarted as this process)
            // is succeeded at once rather than when its hold runs out.
            let other = self.log.holder(name).await.map_err(store_error)?;
            if let Some((other, _)) = other.filter(|(h, _)| h != holder && holder_is_gone(h)) {
                held = self
                    .log
                    .hold(name, holder, now, until, Some(&other))
                    .await
                    .map_err(store_error)?;
            }
        }
        if !held {
            self.held_until = None;
            return Ok(false);
        }
        // Taken anew, or again after its hold ran out (another may have held it meanwhile).
        if self.held_until.is_none_or(|u| u <= now) {
            let at = self
                .log
                .position(self.job.name)
                .await
                .map_err(store_error)?;
            (self.at, self.marked, self.failures) = (at, at, 0);
        }
        self.held_until = Some(until);
        Ok(true)
    }

    /// True while this process holds the reader ([`Follower::hold`]).
    pub fn holds(&self) -> bool {
        self.held_until.is_some()
    }

    /// Marks what was handled and lets the reader go, for a successor to follow at once.
    pub async fn release(&mut self, holder: &str, now: Ts) -> Result<(), JobError> {
        if !self.holds() {
            return Ok(());
        }
        self.mark(true).await?;
        self.held_until = None;
        self.log
            .hold(self.job.name, holder, now, now, None)
            .await
            .map_err(store_error)
            .map(|_| ())
    }

    /// Tells the store where it stands if it moved and [`MARK_EVERY`] passed since the last
    /// mark, or whenever `now_anyway`.
    pub async fn mark(&mut self, now_anyway: bool) -> Result<(), JobError> {
        let due = now_anyway || self.marked_at.elapsed() >= MARK_EVERY;
        if self.at == self.marked || !due {
            return Ok(());
        }
        self.log
            .passed(self.job.name, self.at)
            .await
            .map_err(store_error)?;
        self.marked = self.at;
        self.marked_at = Instant::now();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blobs::LocalBlobs;
    use crate::creds::IssuerCredentials;
    use crate::jobs::declare::{Local, Stream};
    use crate::queue::{Queue, QueueConfig};
    use crate::signal::LocalSignal;
    use crate::store::shard::Shards;
    use crate::store::sqlite::SqliteStore;
    use crate::store::{Cond, Item, Store, WriteOp};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    /// The versions the test job was handed, and how many of its next runs fail.
    static SEEN: Mutex<Vec<u64>> = Mutex::new(vec![]);
    static FAILING: AtomicU32 = AtomicU32::new(0);

    /// A job on table `t`'s stream alone, retrying a failed batch `retries` times.
    const fn job(
        name: &'static str,
        from: &'static [Stream],
        only_copy: bool,
        run: crate::jobs::declare::OnStream,
    ) -> Job {
        Job {
            name,
            about: "a test's",
            schedule: None,
            streams: Some(Streams {
                from,
                only_copy,
                run,
            }),
            broker: None,
            local: Local::Reapers,
            needs: &[],
            publishes: false,
            timeout_secs: 1,
            memory_mb: 128,
            failures_to: None,
        }
    }

    const fn table_t(retries: u32) -> Stream {
        Stream {
            table: "t",
            marked_by: None,
            retries,
            parallel: 1,
        }
    }

    /// Records the versions it is handed, and fails while `FAILING` says so.
    static JOB: Job = job("followerTest", &[table_t(2)], true, |_, images, _, _| {
        Box::pin(async move {
            if FAILING.load(Ordering::SeqCst) > 0 {
                FAILING.fetch_sub(1, Ordering::SeqCst);
                return Err(JobError::Event("refused".into()));
            }
            let mut seen = SEEN.lock().map_err(|e| JobError::Event(e.to_string()))?;
            seen.extend(images.iter().map(|i| i.version));
            Ok(images.len().into())
        })
    });

    /// Follows the same table and counts what it is handed.
    static COUNTED: AtomicU32 = AtomicU32::new(0);
    static OTHER: Job = job(
        "followerTestOther",
        &[table_t(0)],
        false,
        |_, images, _, _| {
            Box::pin(async move {
                COUNTED.fetch_add(images.len() as u32, Ordering::SeqCst);
                Ok(images.len().into())
            })
        },
    );

    /// The next page of at most `limit` changes read for `f` alone, taken.
    async fn step(
        f: &mut Follower<'_>,
        c: &Context<'_>,
        limit: usize,
        budget: &Budget,
    ) -> Result<Step, JobError> {
        let page = Follower::read_for(f.log, &[&*f], limit).await?;
        f.take(c, &page, budget).await
    }

    /// This process is not gone; a process id no system hands out is, on this host only.
    #[test]
    fn a_holder_is_gone_only_if_its_process_on_this_host_is() {
        let me = process_holder();
        assert!(!holder_is_gone(&me));
        let host = me.split('/').next().unwrap();
        // Above Linux's largest process id (2^22).
        let dead = format!("{host}/4194305/x");
        assert_eq!(
            holder_is_gone(&dead),
            std::path::Path::new("/proc/self").exists()
        );
        assert!(!holder_is_gone("another-host/4194305/x"));
        assert!(!holder_is_gone("p1"));
    }

    fn seen() -> Vec<u64> {
        std::mem::take(&mut *SEEN.lock().unwrap())
    }

    /// A follower hands the log's changes to its job in order, a page at a time; goes on from
    /// the position it marked; retries a failing batch as many times as its stream says, then
    /// gives it up; and, without a mark, hands the same changes again (at least once).
    #[tokio::test]
    async fn a_follower_hands_changes_on_in_order_retries_and_goes_on_from_its_mark() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("db")).unwrap();
        store
            .keep_changes(&["t"], &[JOB.name, OTHER.name])
            .await
            .unwrap();
        let queue = Queue::new(
            Arc::new(store.clone()),
            Arc::new(LocalSignal::default()),
            IssuerCredentials {
                client_id: "static/q".into(),
                access_token: "t".into(),
            },
            QueueConfig::default(),
        );
        let blobs = LocalBlobs::new(dir.path().join("blobs"), "http://127.0.0.1", "secret");
        let c = Context {
            queue: &queue,
            blobs: &blobs,
            artifact_grace_ms: 0,
            publisher: None,
            scheduler: None,
            shards: Shards::ALL,
        };
        let budget = Budget::of(Duration::from_secs(5));
        let write = || async {
            let op = WriteOp::Put {
                table: "t",
                item: Item::new("a", "b", serde_json::json!({}), vec![]),
                cond: Cond::None,
            };
            store.write(op).await.unwrap()
        };
        for _ in 0..3 {
            write().await;
        }
        let mut f = Follower::start(&JOB, &store).await.unwrap().unwrap();
        let first = step(&mut f, &c, 2, &budget).await.unwrap();
        assert_eq!((first.read, first.done, first.more), (2, 2, true));
        let second = step(&mut f, &c, 2, &budget).await.unwrap();
        assert_eq!((second.read, second.more), (1, false));
        assert_eq!(seen(), [1, 2, 3]);
        f.mark(true).await.unwrap();
        let marked = f.position();
        assert_eq!(store.position(JOB.name).await.unwrap(), marked);

        // A successor starts where it marked.
        let mut f = Follower::start(&JOB, &store).await.unwrap().unwrap();
        assert_eq!(step(&mut f, &c, 10, &budget).await.unwrap().read, 0);

        // Failing: retried twice, given up at the third failure; what follows goes on.
        FAILING.store(3, Ordering::SeqCst);
        write().await;
        assert!(step(&mut f, &c, 10, &budget).await.is_err());
        assert!(step(&mut f, &c, 10, &budget).await.is_err());
        let given_up = step(&mut f, &c, 10, &budget).await.unwrap();
        assert_eq!((given_up.read, given_up.done), (1, 0));
        write().await;
        assert_eq!(step(&mut f, &c, 10, &budget).await.unwrap().done, 1);
        assert_eq!(seen(), [5]);

        // Unmarked, the same changes come again to a successor.
        let mut again = Follower::start(&JOB, &store).await.unwrap().unwrap();
        assert_eq!(again.position(), marked);
        assert_eq!(step(&mut again, &c, 10, &budget).await.unwrap().done, 2);
        assert_eq!(seen(), [4, 5]);

        // Two followers read one page from the earlier position; each takes only what is
        // past its own.
        let mut behind = Follower::start(&OTHER, &store).await.unwrap().unwrap();
        write().await;
        let mut both = vec![again, behind];
        let page = Follower::read_for(&store, &[&both[0], &both[1]], 100)
            .await
            .unwrap();
        assert_eq!(page.changes.len(), 6);
        let (first, second) = both.split_at_mut(1);
        assert_eq!(first[0].take(&c, &page, &budget).await.unwrap().read, 1);
        assert_eq!(second[0].take(&c, &page, &budget).await.unwrap().read, 6);
        assert_eq!(seen(), [6]);
        assert_eq!(COUNTED.load(Ordering::SeqCst), 6);
        behind = both.pop().unwrap();
        assert_eq!(behind.position(), page.next);

        // One process at a time follows a reader; taking it, a process goes on from the
        // reader's marked position; a holder that lets go or stops holding is succeeded.
        let now = Ts::now();
        assert!(behind.hold("p1", now).await.unwrap());
        assert_eq!(behind.position(), 0, "from the stored position");
        let mut rival = Follower::start(&OTHER, &store).await.unwrap().unwrap();
        assert!(!rival.hold("p2", now).await.unwrap());
        assert!(!rival.holds());
        assert_eq!(step(&mut behind, &c, 100, &budget).await.unwrap().read, 6);
        behind.release("p1", now).await.unwrap();
        assert!(!behind.holds());
        assert!(rival.hold("p2", now).await.unwrap());
        assert_eq!(rival.position(), page.next, "where p1 marked");
        assert!(!behind.hold("p1", now).await.unwrap());
        write().await;
        assert_eq!(step(&mut rival, &c, 100, &budget).await.unwrap().read, 1);
        rival.mark(true).await.unwrap();
        let later = Ts(now.0 + HOLD_FOR.as_millis() as i64);
        assert!(
            behind.hold("p1", later).await.unwrap(),
            "p2 stopped holding"
        );
        assert_eq!(behind.position(), rival.position(), "where p2 marked");
        // p1's hold runs out unrenewed; p2 takes the reader, moves it on and lets it go; p1,
        // holding it again, goes on from there.
        let out = Ts(later.0 + HOLD_FOR.as_millis() as i64);
        assert!(rival.hold("p2", out).await.unwrap());
        write().await;
        assert_eq!(step(&mut rival, &c, 100, &budget).await.unwrap().read, 1);
        rival.release("p2", out).await.unwrap();
        assert!(behind.hold("p1", Ts(out.0 + 1)).await.unwrap());
        assert_eq!(behind.position(), rival.position(), "where p2 let go");
    }
}
