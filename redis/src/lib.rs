//! kiln-redis: the remote tier (`kiln::redis` with the feature `redis`):
//! compiled entries shared by a fleet of machines (a CI farm, inference
//! nodes) through a Redis server. A client of kiln-core's public API: a
//! [`Tier`](kiln_core::Tier), and a [`TierFactory`](kiln_core::TierFactory)
//! registered for [`kiln_core::global()`].
//!
//! Link this crate and set `KILN_REMOTE_CACHE=redis://host:port/db` (see
//! [`RemoteConfig`]): the global cache then asks a [`RemoteTier`] after the disk
//! tier, and writes its hits through to the disk tier. (A cache of your own
//! gets the same wiring from [`kiln_core::add_tiers`], or add a
//! [`RemoteTier`] yourself.) Then a kernel compiled on one machine is a
//! remote hit on every other:
//!
//! ```text
//! get_or_compile: memory → images → disk → remote (GETRANGE) → compile
//!                                    ↑        │hit          │
//!                                    └────────┘             └→ SET on disk and remote
//!                                 written through
//! ```
//!
//! # Values
//!
//! Each entry is stored under `<namespace>:v3:<owner hex>:<key hex>` as a
//! one-entry kiln image (the format of `kiln-image`, deterministic bytes).
//! The server is **untrusted**: a value is used only after full
//! verification (header, structure, every payload checksum) and only if it
//! holds exactly the `(owner, key)` asked for. Anything else is rejected
//! (an error the cache logs), the entry is compiled, and the compile's
//! `SET` overwrites the bad value. The cache also checks the entry's deps
//! against this process's definitions, as for every tier.
//!
//! # Failures
//!
//! Every operation (resolving the host, connecting, TLS, `AUTH`,
//! `SELECT`, the command and its whole reply, and a retry on a new
//! connection) ends by one deadline, [`RemoteConfig::timeout`] after it
//! started, however the server spreads or withholds its bytes; and a reply
//! is read up to the size its command allows and no further
//! ([`RemoteConfig::max_entry_bytes`] plus framing for a value), so a
//! server that announces a gigabyte costs a small multiple of the cap (see
//! the `client` module). A failure logs **one** warning per outage
//! (`tracing`), and for [`RemoteConfig::backoff`] the tier answers "miss"
//! at once without asking the server, so a dead server does not cost a
//! timeout per kernel. A reply that is no possible answer (another type,
//! over its cap, not RESP) is such a failure. An error reply to one
//! command (`WRONGTYPE` for one key, `OOM` for one write) costs one round
//! trip and is not an outage: one warning, no back-off. The caller
//! compiles; nothing fails. Values larger than
//! [`RemoteConfig::max_entry_bytes`] are neither stored nor read whole.
//! A [`Cache`](kiln_core::Cache) runs one load per `(owner, key)` at a time
//! (single flight): other threads asking for it wait for that load, so
//! its deadline bounds their wait for the remote tier too.
//!
//! # Security
//!
//! - `redis://user:password@host:port/db` (or `redis://:password@..` for a
//!   plain `requirepass`) authenticates with `AUTH`; the password never
//!   appears in logs or errors.
//! - `rediss://` connects with TLS (rustls; its ring provider is installed
//!   as the process default unless the program installed one). The
//!   server's certificate must be valid for the URL's host and chain to
//!   the system's roots, or to those of `SSL_CERT_FILE` / `SSL_CERT_DIR`
//!   (which replace them: the way to trust a private CA). A URL fragment
//!   `#insecure` (no certificate checks) is refused. Client certificates
//!   (mutual TLS) are not supported.
//! - A value is used only if it is a valid image of exactly the requested
//!   `(owner, key)`: whoever can write to the server can make the tier
//!   miss, but cannot make it serve corrupt bytes or another key's entry.
//!   Without signatures they can still store a valid image of a *wrong*
//!   artifact under the right key (nothing tells a wrong compile from a
//!   right one short of compiling again).
//! - **Signatures** close that: writers sign what they store
//!   (`KILN_SIGNING_KEY`, an ed25519 secret key file from `kiln keygen`),
//!   and readers with `KILN_TRUSTED_KEYS` use only values one of those keys
//!   signed; anything else is refused (counted in
//!   [`RemoteStats::untrusted`] and kiln-core's `Stats::tier_untrusted`,
//!   one warning) and compiled. The signature covers the one-entry image's
//!   header and index, which name the `(owner, key)` and the BLAKE3 of
//!   every payload: a signed value copied under another key is not the
//!   entry asked for, and one edited to name it no longer verifies.
//!   Readers hold public keys only, so no reader can forge a value another
//!   reader accepts. A signed hit is written through to the disk tier with
//!   its signature (a segment of its own), where it is checked again.
//! - **Readers are read-only by default**: the tier stores only with a
//!   signing key, or with `KILN_REMOTE_WRITE=1` when no trusted keys are
//!   configured (unsigned values, which readers that trust keys refuse).
//!   A CI farm runs trusted writers with the key and untrusted readers
//!   without it.
//!
//! # Example
//!
//! The global cache needs nothing more than this crate linked and the
//! variable set. By hand, on a cache of your own:
//!
//! ```no_run
//! use std::sync::Arc;
//! use kiln_core::Cache;
//! use kiln_core::disk::DiskCache;
//! use kiln_core::settings::Settings;
//! use kiln_redis::RemoteTier;
//!
//! let settings = Settings::process();
//! let cache = Cache::new();
//! let disk = DiskCache::from_settings(settings).map(Arc::new);
//! if let Some(disk) = &disk {
//!     cache.add_tier(Box::new(Arc::clone(disk)));
//! }
//! if let Some(mut remote) = RemoteTier::from_settings(settings, &settings.trust) {
//!     if let Some(disk) = disk {
//!         remote = remote.write_through(disk);
//!     }
//!     cache.add_tier(Box::new(remote));
//! }
//! ```

mod client;
mod codec;
mod config;
mod error;
mod factory;
mod health;
mod naming;
mod tier;

pub use config::{
    REMOTE_BATCH_MS, REMOTE_CACHE, REMOTE_TIMEOUT_MS, RemoteConfig, RemoteSettings, Signer,
};
pub use error::Error;
pub use tier::{RemoteStats, RemoteTier};
