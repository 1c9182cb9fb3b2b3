//! The remote tier: [`RemoteTier`], and how it answers the [`Cache`].
//!
//! [`Cache`]: kiln_core::Cache

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use std::time::Duration;

use kiln_image::{Digest, EntryData, SigningKey, TrustedKeys};

use super::client::{Remote, Unanswered};
use super::config::RemoteConfig;
use super::{codec, naming};
use crate::Error;
use kiln_core::{Key, Owner, Tier, TierEntry};

/// Why a fetch has no entry to give.
enum Fetch {
    /// The server was not asked, or did not answer.
    Unanswered(Unanswered),
    /// The server's value was rejected.
    Rejected(Error),
}

/// A cache tier on a Redis server shared by many machines.
///
/// Add it to a [`Cache`](kiln_core::Cache) after the local disk tier: a miss
/// everywhere else asks the server (`GETRANGE`, at most
/// [`RemoteConfig::max_entry_bytes`] read), a compile is stored on it
/// (`SET`), and a remote hit is written through to the local tier given
/// with [`RemoteTier::write_through`], so the next process on this machine
/// finds it on disk.
///
/// Every value is fully verified, and must hold exactly the entry asked
/// for, before it is used; a value that fails is an error (the cache logs it
/// and compiles; a writer's compile then replaces the bad value). With
/// [`RemoteConfig::trusted_keys`], a value must also be signed by one of
/// them: others are refused (counted, one warning per tier) and compiled.
/// The tier stores only when [`RemoteConfig::writes`]: signed with
/// [`RemoteConfig::signing_key`], or unsigned with
/// [`RemoteConfig::write_unsigned`] and no trusted keys. Entries the
/// cache's background writer stores together ([`Tier::store_batch`]) are
/// signed with one batch signature, which a reader verifies once per
/// process and batch (then a few hashes per other member). A signed hit is
/// written through with its signature ([`Tier::store_signed`]). When the
/// server is unreachable, slow or failing, an operation costs at most
/// [`RemoteConfig::timeout`], the tier logs one warning and then answers
/// "miss" without asking for [`RemoteConfig::backoff`]; it never fails the
/// caller.
///
/// Cloning gives another handle to the same tier (same connections and
/// counters), e.g. to read [`RemoteTier::stats`] after adding it.
#[derive(Clone)]
pub struct RemoteTier {
    shared: Arc<Shared>,
}

struct Shared {
    remote: Remote,
    namespace: String,
    max_entry_bytes: usize,
    backoff: Duration,
    /// [`Tier::batch_window`]: the configured window when the tier signs
    /// what it stores, else zero.
    batch_window: Duration,
    trusted_keys: Option<TrustedKeys>,
    signing_key: Option<Arc<SigningKey>>,
    writes: bool,
    local: OnceLock<Arc<dyn Tier>>,
    counters: Counters,
    /// Whether the one warning about an unsigned or foreign-signed value
    /// was given.
    warned_untrusted: AtomicBool,
}

impl std::fmt::Debug for RemoteTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shared = &self.shared;
        f.debug_struct("RemoteTier")
            .field("remote", &shared.remote)
            .field("namespace", &shared.namespace)
            .field("max_entry_bytes", &shared.max_entry_bytes)
            .field("writes", &shared.writes)
            .field("signs", &shared.signing_key.is_some())
            .field(
                "trusted_keys",
                &shared.trusted_keys.as_ref().map(TrustedKeys::len),
            )
            .field(
                "write_through",
                &shared.local.get().map(|local| local.name()),
            )
            .field("stats", &self.stats())
            .finish()
    }
}

/// What a [`RemoteTier`] did since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemoteStats {
    /// Loads answered with a verified entry.
    pub hits: u64,
    /// Loads the server answered with "no such key" (or an empty value).
    pub misses: u64,
    /// Values fetched and rejected (corrupt, or not the entry asked for).
    pub rejected: u64,
    /// Values fetched, valid and of the entry asked for, refused because
    /// no trusted key signed them ([`RemoteConfig::trusted_keys`]).
    pub untrusted: u64,
    /// Compiles not stored because the tier does not write (no signing
    /// key: see [`RemoteConfig::writes`]).
    pub not_written: u64,
    /// Entries stored on the server.
    pub stored: u64,
    /// Operations that failed (unreachable, timeout, error reply).
    pub failures: u64,
    /// Operations skipped while backing off after a failure.
    pub skipped: u64,
}

#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    rejected: AtomicU64,
    untrusted: AtomicU64,
    not_written: AtomicU64,
    stored: AtomicU64,
    failures: AtomicU64,
    skipped: AtomicU64,
}

impl RemoteTier {
    /// The tier for the server of `config`. Opens no connection: the first
    /// load or store connects.
    ///
    /// # Errors
    /// [`Error::RemoteUrl`] when the URL is not a Redis URL.
    pub fn open(config: RemoteConfig) -> Result<RemoteTier, Error> {
        let writes = config.writes();
        Ok(RemoteTier {
            shared: Arc::new(Shared {
                remote: Remote::new(&config)?,
                namespace: config.namespace,
                max_entry_bytes: config.max_entry_bytes,
                backoff: config.backoff,
                batch_window: if writes && config.signing_key.is_some() {
                    config.batch_window
                } else {
                    Duration::ZERO
                },
                trusted_keys: config.trusted_keys,
                signing_key: config.signing_key.map(|signer| signer.0),
                writes,
                local: OnceLock::new(),
                counters: Counters::default(),
                warned_untrusted: AtomicBool::new(false),
            }),
        })
    }

    /// The tier `settings` configure under `trust` (see
    /// [`RemoteConfig::from_settings`]): `None` when `KILN_REMOTE_CACHE` is
    /// unset, or (after one warning) when its settings are unusable; the
    /// caller then compiles.
    pub fn from_settings(
        settings: &kiln_core::settings::Settings,
        trust: &kiln_core::trust::TrustPolicy,
    ) -> Option<RemoteTier> {
        RemoteTier::from_config(RemoteConfig::from_settings(settings, trust))
    }

    /// The tier of a configuration as read, or `None` (after one warning)
    /// for an error.
    fn from_config(config: Result<Option<RemoteConfig>, Error>) -> Option<RemoteTier> {
        match config.and_then(|config| config.map(RemoteTier::open).transpose()) {
            Ok(tier) => tier,
            Err(error) => {
                tracing::warn!(error = %kiln_core::ErrorChain(&error), "remote cache turned off");
                None
            }
        }
    }

    /// Writes every remote hit through to `local` (e.g. the disk cache,
    /// shared with the [`Cache`](kiln_core::Cache) as an `Arc`), for this handle
    /// and its clones. Only the first call has an effect.
    ///
    /// The write-through runs inside the load, on the caller's thread,
    /// unless `local` queues its stores: give it a handle from
    /// [`Cache::background`](kiln_core::Cache::background) (as
    /// [`kiln_core::add_tiers`] does) to have the cache's background
    /// writer store the hit after the caller has it.
    pub fn write_through(self, local: Arc<dyn Tier>) -> RemoteTier {
        if self.shared.local.set(local).is_err() {
            tracing::debug!("remote tier already writes through to a local tier; kept it");
        }
        self
    }

    /// The server's URL, password removed.
    pub fn server(&self) -> &str {
        self.shared.remote.server()
    }

    /// The counters since the tier was opened.
    pub fn stats(&self) -> RemoteStats {
        let c = &self.shared.counters;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        RemoteStats {
            hits: get(&c.hits),
            misses: get(&c.misses),
            rejected: get(&c.rejected),
            untrusted: get(&c.untrusted),
            not_written: get(&c.not_written),
            stored: get(&c.stored),
            failures: get(&c.failures),
            skipped: get(&c.skipped),
        }
    }

    /// The entry `(owner, key)` from the server, by the owner's digest
    /// (what a record file or an image holds), verified as a load is
    /// (a valid one-entry image of exactly that entry, signed by a trusted
    /// key when [`RemoteConfig::trusted_keys`] are set), or `None` when
    /// the server has no value for it. Counted in [`RemoteTier::stats`];
    /// not written through. For tools such as `kiln bake`, which know
    /// entries by digest; the [`Cache`](kiln_core::Cache) loads through
    /// [`Tier::load_entry`].
    ///
    /// # Errors
    /// [`Error::RemoteUnavailable`] when the server cannot be reached or
    /// fails the command, [`Error::RemoteBackingOff`] when an earlier
    /// failure is less than [`RemoteConfig::backoff`] old (the server was
    /// not asked), and the rejections of a load:
    /// [`Error::RemoteEntryCorrupt`], [`Error::RemoteEntryMismatch`],
    /// [`Error::RemoteEntryTooLarge`], [`Error::RemoteEntryUntrusted`].
    pub fn fetch(&self, owner: &Digest, key: &Digest) -> Result<Option<EntryData>, Error> {
        match self.fetch_value(owner, key) {
            Ok(found) => Ok(found.map(|(decoded, _)| decoded.entry)),
            Err(Fetch::Rejected(error)) => Err(error),
            Err(Fetch::Unanswered(Unanswered::Failed(error))) => {
                self.count(|c| &c.failures);
                Err(*error)
            }
            Err(Fetch::Unanswered(Unanswered::BackingOff)) => {
                self.count(|c| &c.skipped);
                Err(Error::RemoteBackingOff {
                    server: self.server().to_owned(),
                    backoff: self.shared.backoff,
                })
            }
        }
    }

    /// Fetches and decodes the value of `(owner, key)`, counting hits,
    /// misses and rejections (not unanswered operations: the caller does).
    fn fetch_value(
        &self,
        owner: &Digest,
        key: &Digest,
    ) -> Result<Option<(codec::Decoded, Vec<u8>)>, Fetch> {
        let shared = &self.shared;
        let name = naming::entry_key(&shared.namespace, owner, key);
        let bytes = match shared.remote.get(&name, shared.max_entry_bytes) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                self.count(|c| &c.misses);
                return Ok(None);
            }
            Err(why) => return Err(Fetch::Unanswered(why)),
        };
        let decoded = codec::decode(
            &name,
            &bytes,
            shared.max_entry_bytes,
            owner,
            key,
            shared.trusted_keys.as_ref(),
        )
        .inspect_err(|error| {
            if let Error::RemoteEntryUntrusted { .. } = error {
                self.count(|c| &c.untrusted);
                if !shared.warned_untrusted.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %kiln_core::ErrorChain(error), "remote cache entry not signed by a trusted key: refused and compiled here (further refusals are counted, not logged)");
                }
            } else {
                self.count(|c| &c.rejected);
            }
        })
        .map_err(Fetch::Rejected)?;
        self.count(|c| &c.hits);
        Ok(Some((decoded, bytes)))
    }

    fn count(&self, counter: impl FnOnce(&Counters) -> &AtomicU64) {
        counter(&self.shared.counters).fetch_add(1, Ordering::Relaxed);
    }

    fn count_unanswered(&self, why: Unanswered) {
        match why {
            Unanswered::BackingOff => self.count(|c| &c.skipped),
            Unanswered::Failed(_) => self.count(|c| &c.failures),
        }
    }
}

impl Tier for RemoteTier {
    fn name(&self) -> &str {
        "remote"
    }

    fn load_entry(&self, owner: &Owner, key: &Key) -> Result<Option<TierEntry>, kiln_core::Error> {
        let shared = &self.shared;
        let (decoded, bytes) = match self.fetch_value(&owner.digest(), key.digest()) {
            Ok(Some(found)) => found,
            Ok(None) => return Ok(None),
            Err(Fetch::Unanswered(why)) => {
                self.count_unanswered(why);
                return Ok(None);
            }
            Err(Fetch::Rejected(error)) => return Err(error.into()),
        };
        let entry = decoded.entry;
        if let Some(local) = shared.local.get() {
            // A signed value keeps its signatures on disk, to be checked
            // again by every process that reads it there; an unsigned one
            // is stored as received unsigned, never as a compile of this
            // user's (a process with trusted keys refuses it there too).
            let stored = if decoded.signed {
                local.store_signed(owner, &entry, &bytes)
            } else {
                local.store_unsigned(owner, &entry, self.name())
            };
            if let Err(error) = stored {
                tracing::debug!(tier = local.name(), %error, "remote hit not written through");
            }
        }
        Ok(Some(TierEntry::Owned(entry)))
    }

    /// A batch of one: signed directly when the tier signs.
    fn store(&self, owner: &Owner, entry: &EntryData) -> Result<(), kiln_core::Error> {
        self.store_batch(&[(owner, entry)]).pop().unwrap_or(Ok(()))
    }

    /// Stores the entries together: each encoded as [`Tier::store`] does,
    /// all of them signed with one batch signature when the tier signs
    /// (a reader then verifies one signature for the batch, and a few
    /// hashes per other member), then each `SET` on its own, each within
    /// [`RemoteConfig::timeout`] and the back-off, as a single store.
    fn store_batch(&self, items: &[(&Owner, &EntryData)]) -> Vec<Result<(), kiln_core::Error>> {
        let shared = &self.shared;
        if !shared.writes {
            return items
                .iter()
                .map(|_| {
                    self.count(|c| &c.not_written);
                    Ok(())
                })
                .collect();
        }
        let entries: Vec<&EntryData> = items.iter().map(|(_, entry)| *entry).collect();
        let values = codec::encode_batch(&entries, shared.signing_key.as_deref());
        entries
            .iter()
            .zip(values)
            .map(|(entry, value)| {
                self.put(entry, &value?);
                Ok(())
            })
            .collect()
    }

    fn batch_window(&self) -> Duration {
        self.shared.batch_window
    }
}

impl RemoteTier {
    /// `SET`s the value `bytes` of `entry` (not when it is larger than
    /// [`RemoteConfig::max_entry_bytes`]), counted.
    fn put(&self, entry: &EntryData, bytes: &[u8]) {
        let shared = &self.shared;
        if bytes.len() > shared.max_entry_bytes {
            tracing::debug!(name = %entry.name, len = bytes.len(), "entry too large for the remote cache: not stored");
            return;
        }
        let name = naming::entry_key(&shared.namespace, &entry.owner, &entry.key);
        match shared.remote.set(&name, bytes) {
            Ok(()) => self.count(|c| &c.stored),
            Err(why) => self.count_unanswered(why),
        }
    }
}
