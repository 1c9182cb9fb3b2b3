//! The background writer: tier stores off the caller's path.
//!
//! `get_or_compile` returns as soon as a compile's result is in memory; the
//! stores into the extra tiers (a disk segment written and fsynced, a `SET`
//! on the remote server) are queued for one writer thread per cache,
//! started on the first store. Tiers that write through to another tier
//! (the remote tier's hits into the disk tier) get a handle from
//! [`Cache::background`](crate::Cache::background) whose stores are queued the same way; a signed
//! store ([`Tier::store_signed`]) keeps its signed image through the queue
//! and reaches the tier as one.
//!
//! The queue is bounded: at most [`MAX_JOBS`] stores, and at most
//! [`MAX_QUEUED_BYTES`] of payloads, or the memory cap when that is lower
//! (one store always fits in an empty queue). A store that does not fit is
//! **dropped** and counted
//! ([`Stats::stores_dropped`](crate::Stats::stores_dropped)): the caller
//! never waits for the disk, and an entry not persisted is compiled again
//! by a later process, as if the store had failed. A queued store holds the
//! entry's payloads, shared with the cache while the entry is resident: an
//! entry evicted before its store ran keeps its payloads until then, so
//! the process holds at most twice the memory cap of payloads (the cap
//! plus [`MAX_QUEUED_BYTES`] when the cap is larger).
//!
//! **Batches.** When the writer takes a job, it also takes the jobs queued
//! right behind it that go to the same tiers (the same `Arc`s, in the same
//! order) and are plain stores (not [`Tier::store_signed`]), at most
//! [`MAX_BATCH_JOBS`] in all, and hands them to each tier in one
//! [`Tier::store_batch`] call, so that a tier can amortize work over them
//! (the remote tier signs them with one batch signature, which a reader
//! verifies once). For most tiers it never waits for more: a batch is what
//! was already queued, so a lone store runs as soon as the writer is free.
//! A tier with a [`Tier::batch_window`] (the remote tier when it signs)
//! lets the writer wait up to that long (at most [`MAX_BATCH_WINDOW`])
//! after taking a store for more stores to the same tiers, so that a
//! process compiling one kernel after another still publishes them in few
//! batches. Every tier of the job waits with it (the disk tier's segment
//! of a compile stored to disk and remote appears up to the window later).
//! A [`Cache::flush`](crate::Cache::flush) (and so the exit flush and the cache's drop) cuts the
//! wait short, as does a queue at half its bounds; a store for other
//! tiers, or a signed one, closes the batch. Counters
//! stay per entry and per tier (each item's result), and each tier still
//! sees the entries in the order they were queued. A batch's call runs
//! with the `tracing` dispatcher of its first job; each entry's failure is
//! logged to its own job's.
//!
//! [`Cache::flush`](crate::Cache::flush) waits until every store queued before it has run,
//! [`Cache::flush_within`](crate::Cache::flush_within) at most a given time. A
//! cache flushes when dropped; the cache itself registers nothing to run at
//! exit: whoever sets up a cache that is never dropped does (the global
//! cache's init registers its bounded flush with the process's exit hook),
//! so that a normal exit loses nothing queued. A crash loses what was
//! queued, never more, and leaves no partial file (tiers publish whole
//! files by rename).

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kiln_image::EntryData;
use tracing::Dispatch;

use super::instance::Instance;
use super::stats::bump;
use super::{Tier, TierEntry};
use crate::{Error, Key, Owner};

/// The most stores queued at once.
pub const MAX_JOBS: usize = 1024;
/// The most jobs the writer hands to a tier in one [`Tier::store_batch`]
/// call (see the module docs).
pub const MAX_BATCH_JOBS: usize = 256;
/// The longest [`Tier::batch_window`] the writer honours: a longer one is
/// cut to this.
pub const MAX_BATCH_WINDOW: Duration = Duration::from_secs(60);
/// The most payload bytes queued at once (the job running included), unless
/// the memory cap is lower: 64 MiB.
pub const MAX_QUEUED_BYTES: u64 = 64 << 20;
/// The writer thread's nice value (Linux).
#[cfg(target_os = "linux")]
const WRITER_NICE: i32 = 10;

/// One entry to store into some tiers.
pub(crate) struct Job {
    pub(crate) owner: Owner,
    pub(crate) entry: JobEntry,
    pub(crate) tiers: Vec<Arc<dyn Tier>>,
}

/// What a job stores.
pub(crate) enum JobEntry {
    /// An in-memory entry (shared with the cache while resident); the
    /// `EntryData` is built on the writer thread.
    Instance(Arc<Instance>),
    /// An owned entry (a remote hit written through).
    Data(EntryData),
    /// An owned entry and the signed one-entry image it came in (a signed
    /// remote hit written through): stored with [`Tier::store_signed`], so
    /// that the signature is kept and checked again when read back.
    Signed { data: EntryData, image: Vec<u8> },
    /// An owned entry another tier (`from`) loaded unsigned: stored with
    /// [`Tier::store_unsigned`], so that its provenance is kept.
    Unsigned { data: EntryData, from: String },
}

impl JobEntry {
    fn bytes(&self) -> u64 {
        match self {
            JobEntry::Instance(instance) => instance.body.bytes,
            JobEntry::Data(data) => data_bytes(data),
            JobEntry::Signed { data, image } => data_bytes(data) + image.len() as u64,
            JobEntry::Unsigned { data, .. } => data_bytes(data),
        }
    }
}

/// The payload bytes of an owned entry.
fn data_bytes(data: &EntryData) -> u64 {
    data.artifacts.iter().map(|a| a.bytes.len() as u64).sum()
}

/// What the writer and the callers share.
pub(crate) struct StoreQueue {
    state: Mutex<QueueState>,
    /// The writer waits here for jobs.
    work: Condvar,
    /// Flushers wait here for progress.
    progress: Condvar,
    max_bytes: u64,
    pub(crate) counters: StoreCounters,
}

#[derive(Default)]
struct QueueState {
    /// Each job with its payload bytes and the `tracing` dispatcher in
    /// force where it was queued (its events go there, as if the store
    /// had run on the caller's thread).
    jobs: VecDeque<(Job, u64, Dispatch)>,
    /// Payload bytes of the queued jobs and the one running.
    bytes: u64,
    /// Jobs ever queued, and jobs finished (run, failed or panicked).
    queued: u64,
    finished: u64,
    /// The writer thread is running (or could not start: `failed_start`).
    started: bool,
    failed_start: bool,
    /// The cache is being dropped: the writer ends once the queue is empty.
    closed: bool,
    /// Callers waiting in [`StoreQueue::flush`]: the writer gathers no
    /// batch while there are any.
    flushing: usize,
}

/// Counters of the background writer.
#[derive(Default)]
pub(crate) struct StoreCounters {
    /// Entries stored into a tier (one per tier).
    pub(crate) stored: AtomicU64,
    /// Stores a tier refused with an error (or panicked in).
    pub(crate) failures: AtomicU64,
    /// Stores dropped because the queue was full.
    pub(crate) dropped: AtomicU64,
}

impl StoreQueue {
    /// A queue for a cache with the memory cap `memory_cap`.
    pub(crate) fn new(memory_cap: Option<u64>) -> Arc<StoreQueue> {
        Arc::new(StoreQueue {
            state: Mutex::new(QueueState::default()),
            work: Condvar::new(),
            progress: Condvar::new(),
            max_bytes: memory_cap.map_or(MAX_QUEUED_BYTES, |cap| cap.min(MAX_QUEUED_BYTES)),
            counters: StoreCounters::default(),
        })
    }

    fn state(&self) -> MutexGuard<'_, QueueState> {
        // Every update of the state is complete before anything can panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores queued or running now.
    pub(crate) fn depth(&self) -> u64 {
        let state = self.state();
        state.queued - state.finished
    }

    /// Queues `job` for the writer (starting it on first use), or drops it
    /// when the queue is full. Never waits for a store.
    pub(crate) fn push(self: &Arc<StoreQueue>, job: Job) {
        if job.tiers.is_empty() {
            return;
        }
        let bytes = job.entry.bytes();
        let mut state = self.state();
        let pending = state.queued - state.finished;
        // An entry larger than the byte bound alone still goes through an
        // empty queue.
        let full = pending >= MAX_JOBS as u64
            || (pending > 0 && state.bytes.saturating_add(bytes) > self.max_bytes);
        if full {
            drop(state);
            bump(&self.counters.dropped);
            tracing::debug!(
                name = job_name(&job),
                "cache store queue full: store dropped (the entry stays in memory)"
            );
            return;
        }
        if !state.started {
            state.started = true;
            state.failed_start = !self.start();
        }
        if state.failed_start || state.closed {
            // No thread could be started, or the cache is gone and a
            // `background` handle outlived it: store on the caller's thread.
            drop(state);
            self.run(job);
            return;
        }
        let dispatch = tracing::dispatcher::get_default(Dispatch::clone);
        state.jobs.push_back((job, bytes, dispatch));
        state.bytes += bytes;
        state.queued += 1;
        drop(state);
        self.work.notify_one();
    }

    /// Starts the writer thread.
    fn start(self: &Arc<StoreQueue>) -> bool {
        let queue = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("kiln-store".into())
            .spawn(move || queue.writer());
        match spawned {
            Ok(_detached) => true,
            Err(error) => {
                tracing::warn!(%error, "kiln could not start its store thread: stores run on the caller's thread");
                false
            }
        }
    }

    /// The writer thread: runs jobs in order until the queue is closed
    /// and empty, at a lower scheduling priority than the threads that
    /// compile (on Linux, where the nice value is per thread): persistence
    /// yields the CPU to callers. Plain jobs queued together for the same
    /// tiers run as one batch (see the module docs).
    fn writer(&self) {
        #[cfg(target_os = "linux")]
        if let Err(error) = rustix::process::setpriority_process(None, WRITER_NICE) {
            tracing::debug!(%error, "kiln store thread keeps its priority");
        }
        loop {
            let group = {
                let mut state = self.state();
                let first = loop {
                    if let Some(first) = state.jobs.pop_front() {
                        break first;
                    }
                    if state.closed {
                        return;
                    }
                    state = self
                        .work
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                };
                self.gather(first, state)
            };
            let bytes: u64 = group.iter().map(|(_, bytes, _)| bytes).sum();
            let jobs = group.len() as u64;
            self.run_group(group);
            let mut state = self.state();
            state.bytes = state.bytes.saturating_sub(bytes);
            state.finished += jobs;
            drop(state);
            self.progress.notify_all();
        }
    }

    /// `first` and the jobs that join it in one batch: the plain jobs
    /// queued right behind it for the same tiers ([`take_batch`]) and, for
    /// tiers with a [`Tier::batch_window`], those queued within that window
    /// of `first` being taken (at most [`MAX_BATCH_WINDOW`]), unless a
    /// flush or the cache's drop is waiting, a job for other tiers (or a
    /// signed one) comes next, the batch is full, or the queue holds half
    /// its bounds (so that waiting never makes `push` drop stores).
    fn gather(
        &self,
        first: (Job, u64, Dispatch),
        mut state: MutexGuard<'_, QueueState>,
    ) -> Vec<(Job, u64, Dispatch)> {
        let window = if batchable(&first.0) {
            first
                .0
                .tiers
                .iter()
                .map(|tier| tier.batch_window())
                .max()
                .unwrap_or_default()
                .min(MAX_BATCH_WINDOW)
        } else {
            Duration::ZERO
        };
        let deadline = Instant::now() + window;
        let mut group = vec![first];
        loop {
            let blocked = take_batch(&mut group, &mut state.jobs);
            // Half the queue's bounds in use: waiting longer would have
            // `push` drop stores while the writer idles.
            let pressed = state.bytes.saturating_mul(2) >= self.max_bytes
                || (state.queued - state.finished).saturating_mul(2) >= MAX_JOBS as u64;
            if blocked
                || pressed
                || group.len() >= MAX_BATCH_JOBS
                || state.closed
                || state.flushing > 0
            {
                return group;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return group;
            }
            state = self
                .work
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Runs the jobs of one batch ([`StoreQueue::gather`]): one job as
    /// [`StoreQueue::run`] does, several with one [`Tier::store_batch`] per
    /// tier.
    fn run_group(&self, group: Vec<(Job, u64, Dispatch)>) {
        let mut group = group.into_iter();
        let Some((first, _, dispatch)) = group.next() else {
            return;
        };
        if group.len() == 0 {
            tracing::dispatcher::with_default(&dispatch, || self.run(first));
            return;
        }
        let tiers = first.tiers.clone();
        let mut items: Vec<(Owner, EntryData, Dispatch)> = Vec::with_capacity(group.len() + 1);
        for (job, _, dispatch) in std::iter::once((first, 0, dispatch)).chain(group) {
            let data = tracing::dispatcher::with_default(&dispatch, || plain_data(job.entry));
            if let Some(data) = data {
                items.push((job.owner, data, dispatch));
            }
        }
        let Some((_, _, batch_dispatch)) = items.first() else {
            return;
        };
        let refs: Vec<(&Owner, &EntryData)> =
            items.iter().map(|(owner, data, _)| (owner, data)).collect();
        for tier in tiers {
            let results = tracing::dispatcher::with_default(batch_dispatch, || {
                std::panic::catch_unwind(AssertUnwindSafe(|| tier.store_batch(&refs)))
            });
            match results {
                Ok(results) => {
                    let mut results = results.into_iter();
                    for (_, data, dispatch) in &items {
                        tracing::dispatcher::with_default(dispatch, || {
                            self.count_store(&*tier, &data.name, results.next());
                        });
                    }
                }
                Err(_) => {
                    for _ in &items {
                        bump(&self.counters.failures);
                    }
                    tracing::dispatcher::with_default(batch_dispatch, || {
                        tracing::warn!(
                            tier = tier.name(),
                            entries = items.len(),
                            "cache tier panicked while storing a batch; ignored"
                        );
                    });
                }
            }
        }
    }

    /// Runs one job: the entry stored into each of its tiers. A tier's
    /// error or panic is counted and logged, never propagated.
    fn run(&self, job: Job) {
        let Job {
            owner,
            entry,
            tiers,
        } = job;
        let (data, received) = match entry {
            JobEntry::Signed { data, image } => (data, Received::Signed(image)),
            JobEntry::Unsigned { data, from } => (data, Received::Unsigned(from)),
            plain => match plain_data(plain) {
                Some(data) => (data, Received::Compiled),
                None => return,
            },
        };
        for tier in tiers {
            let stored = std::panic::catch_unwind(AssertUnwindSafe(|| match &received {
                Received::Signed(image) => tier.store_signed(&owner, &data, image),
                Received::Unsigned(from) => tier.store_unsigned(&owner, &data, from),
                Received::Compiled => tier.store(&owner, &data),
            }));
            match stored {
                Ok(result) => self.count_store(&*tier, &data.name, Some(result)),
                Err(_) => {
                    bump(&self.counters.failures);
                    tracing::warn!(
                        tier = tier.name(),
                        name = data.name,
                        "cache tier panicked while storing; ignored"
                    );
                }
            }
        }
    }

    /// Counts the result of one entry's store into `tier` (`None`: the
    /// tier gave none, a failure) and logs a failure.
    fn count_store(&self, tier: &dyn Tier, name: &str, result: Option<Result<(), Error>>) {
        match result {
            Some(Ok(())) => bump(&self.counters.stored),
            Some(Err(error)) => {
                bump(&self.counters.failures);
                tracing::debug!(tier = tier.name(), name, %error, "cache tier failed to store; ignored");
            }
            None => {
                bump(&self.counters.failures);
                tracing::debug!(
                    tier = tier.name(),
                    name,
                    "cache tier gave no result for this store; counted as failed"
                );
            }
        }
    }

    /// Waits until every job queued before the call has finished, or
    /// until `limit` has passed. Returns whether the queue caught up.
    pub(crate) fn flush(&self, limit: Option<Duration>) -> bool {
        let mut state = self.state();
        // A batch being gathered is cut short: the writer runs it now.
        state.flushing += 1;
        self.work.notify_all();
        let (mut state, done) = self.wait_for_finished(state, limit);
        state.flushing -= 1;
        done
    }

    /// Waits until every job queued before the call has finished, or
    /// `limit` has passed (then `false`).
    fn wait_for_finished<'s>(
        &'s self,
        mut state: MutexGuard<'s, QueueState>,
        limit: Option<Duration>,
    ) -> (MutexGuard<'s, QueueState>, bool) {
        let deadline = limit.map(|limit| Instant::now() + limit);
        let target = state.queued;
        while state.finished < target {
            state = match deadline {
                None => self
                    .progress
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return (state, false);
                    }
                    self.progress
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        (state, true)
    }

    /// Drains the queue and ends the writer (the cache is being dropped).
    pub(crate) fn close(&self) {
        self.flush(None);
        self.state().closed = true;
        self.work.notify_all();
    }
}

/// How a job's entry reaches its tiers: as this process's compile, or as
/// what another tier received (with its provenance).
enum Received {
    Compiled,
    Signed(Vec<u8>),
    Unsigned(String),
}

/// Whether `job` may be batched with others: a plain store (a signed one
/// goes through [`Tier::store_signed`], an unsigned one received from
/// another tier through [`Tier::store_unsigned`]).
fn batchable(job: &Job) -> bool {
    !matches!(
        job.entry,
        JobEntry::Signed { .. } | JobEntry::Unsigned { .. }
    )
}

/// Whether `a` and `b` go to the same tiers: the same `Arc`s, in the same
/// order.
fn same_tiers(a: &Job, b: &Job) -> bool {
    a.tiers.len() == b.tiers.len() && a.tiers.iter().zip(&b.tiers).all(|(a, b)| Arc::ptr_eq(a, b))
}

/// Moves the plain jobs queued at the front of `jobs` for the same tiers
/// as the batch `group` (whose first job is plain) into it, up to
/// [`MAX_BATCH_JOBS`] in all. Returns whether a job that cannot join (a
/// signed one, or one for other tiers) is next in `jobs`: then the batch
/// is closed, so that every tier sees the jobs in the order queued.
fn take_batch(
    group: &mut Vec<(Job, u64, Dispatch)>,
    jobs: &mut VecDeque<(Job, u64, Dispatch)>,
) -> bool {
    if !batchable(&group[0].0) {
        return true;
    }
    while group.len() < MAX_BATCH_JOBS {
        let Some(next) = jobs.front() else {
            return false;
        };
        if !(batchable(&next.0) && same_tiers(&group[0].0, &next.0)) {
            return true;
        }
        if let Some(next) = jobs.pop_front() {
            group.push(next);
        }
    }
    false
}

/// The entry of a plain job (built from the in-memory entry for an `Instance`);
/// `None`, logged, when a payload failed its checksum. A `Signed` job's
/// entry is returned without its image.
fn plain_data(entry: JobEntry) -> Option<EntryData> {
    match entry {
        JobEntry::Instance(instance) => {
            let data = instance.to_entry_data();
            if data.is_none() {
                tracing::debug!(
                    name = instance.name,
                    "entry not stored: a payload failed its checksum"
                );
            }
            data
        }
        JobEntry::Data(data) | JobEntry::Signed { data, .. } | JobEntry::Unsigned { data, .. } => {
            Some(data)
        }
    }
}

fn job_name(job: &Job) -> &str {
    match &job.entry {
        JobEntry::Instance(instance) => &instance.name,
        JobEntry::Data(data) | JobEntry::Signed { data, .. } | JobEntry::Unsigned { data, .. } => {
            &data.name
        }
    }
}

/// A tier whose stores run on a cache's background writer; loads go
/// straight to the tier. See [`Cache::background`](crate::Cache::background).
struct Background {
    tier: Arc<dyn Tier>,
    queue: Arc<StoreQueue>,
}

impl Tier for Background {
    fn name(&self) -> &str {
        self.tier.name()
    }

    fn load_entry(&self, owner: &Owner, key: &Key) -> Result<Option<TierEntry>, Error> {
        self.tier.load_entry(owner, key)
    }

    fn store(&self, owner: &Owner, entry: &EntryData) -> Result<(), Error> {
        self.queue.push(Job {
            owner: owner.clone(),
            entry: JobEntry::Data(entry.clone()),
            tiers: vec![Arc::clone(&self.tier)],
        });
        Ok(())
    }

    fn store_signed(&self, owner: &Owner, entry: &EntryData, image: &[u8]) -> Result<(), Error> {
        self.queue.push(Job {
            owner: owner.clone(),
            entry: JobEntry::Signed {
                data: entry.clone(),
                image: image.to_vec(),
            },
            tiers: vec![Arc::clone(&self.tier)],
        });
        Ok(())
    }

    fn store_unsigned(&self, owner: &Owner, entry: &EntryData, from: &str) -> Result<(), Error> {
        self.queue.push(Job {
            owner: owner.clone(),
            entry: JobEntry::Unsigned {
                data: entry.clone(),
                from: from.to_owned(),
            },
            tiers: vec![Arc::clone(&self.tier)],
        });
        Ok(())
    }
}

impl StoreQueue {
    /// A tier handle whose stores run on this queue, and whose loads go
    /// straight to `tier`: what [`Cache::background`](crate::Cache::background) gives.
    pub(crate) fn background(self: &Arc<StoreQueue>, tier: Arc<dyn Tier>) -> Arc<dyn Tier> {
        Arc::new(Background {
            tier,
            queue: Arc::clone(self),
        })
    }
}
