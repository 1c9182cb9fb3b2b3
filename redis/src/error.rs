//! The remote tier's error type: one enum for all of kiln-redis.
//!
//! The cache sees these through [`kiln_core::Error::Tier`] (the [`Tier`]
//! methods return kiln-core's error), logs them and goes on: a failed load is
//! a miss, a failed store is ignored.
//!
//! [`Tier`]: kiln_core::Tier

/// Everything that can go wrong in the remote tier.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `KILN_REMOTE_CACHE` (or the URL given) is not a Redis URL the client
    /// accepts.
    #[error(
        "remote cache URL {url} is not usable (give redis://[user:password@]host:port/db, \
         or rediss:// for TLS; unset KILN_REMOTE_CACHE to turn the remote tier off)"
    )]
    RemoteUrl {
        /// The URL, password removed.
        url: String,
        /// What the client reported.
        source: Box<redis::RedisError>,
    },
    /// `KILN_REMOTE_TIMEOUT_MS` is not a positive number of milliseconds.
    #[error(
        "KILN_REMOTE_TIMEOUT_MS={value:?} is not a timeout: give a positive whole number of \
         milliseconds, e.g. 500"
    )]
    RemoteTimeout {
        /// The variable's value.
        value: String,
    },
    /// `KILN_REMOTE_BATCH_MS` is not a whole number of milliseconds up to
    /// 60,000.
    #[error(
        "KILN_REMOTE_BATCH_MS={value:?} is not a batch window: give a whole number of \
         milliseconds from 0 to 60000, e.g. 1000, or 0 to sign only what is already queued \
         together"
    )]
    RemoteBatchWindow {
        /// The variable's value.
        value: String,
    },
    /// The Redis server could not be reached, or failed or refused a command
    /// (within the configured timeout). The caller compiles; the remote tier
    /// backs off unless the server merely refused the command.
    #[error(
        "remote cache {server}: cannot {action} (check that the server is up and \
         reachable and the URL's credentials; raise KILN_REMOTE_TIMEOUT_MS if it is slow)"
    )]
    RemoteUnavailable {
        /// The server's URL, password removed.
        server: String,
        /// What was being done, e.g. "connect" or "GET kiln:v3:..".
        action: String,
        /// What the client reported.
        source: Box<redis::RedisError>,
    },
    /// The server failed less than [`RemoteConfig::backoff`] ago, so it
    /// was not asked ([`RemoteTier::fetch`]).
    ///
    /// [`RemoteConfig::backoff`]: crate::RemoteConfig::backoff
    /// [`RemoteTier::fetch`]: crate::RemoteTier::fetch
    #[error(
        "remote cache {server} was not asked: it failed less than {backoff:?} ago (wait, or \
         check that the server is up)"
    )]
    RemoteBackingOff {
        /// The server's URL, password removed.
        server: String,
        /// How long the tier waits after a failure.
        backoff: std::time::Duration,
    },
    /// A value fetched from the remote cache is not a valid kiln image (bad
    /// header, checksum or structure). It was not used; the entry is
    /// compiled and the value overwritten.
    #[error(
        "remote cache value {redis_key} is not a valid kiln image and was rejected \
         (it is recompiled and overwritten)"
    )]
    RemoteEntryCorrupt {
        /// The Redis key of the value.
        redis_key: String,
        /// What verification found.
        source: Box<kiln_image::ReadError>,
    },
    /// A value fetched from the remote cache is a valid image, but not of
    /// exactly the entry requested. It was not used.
    #[error(
        "remote cache value {redis_key} was rejected: it holds {found}, not exactly the \
         requested entry (it is recompiled and overwritten)"
    )]
    RemoteEntryMismatch {
        /// The Redis key of the value.
        redis_key: String,
        /// What the value holds instead, e.g. "2 entries" or "owner .. key ..".
        found: String,
    },
    /// A value fetched from the remote cache is a valid image of exactly
    /// the requested entry, but no trusted key signed it
    /// (`KILN_TRUSTED_KEYS` is set). It was not used; the entry is compiled.
    #[error("remote cache value {redis_key} was refused (it is compiled here instead)")]
    RemoteEntryUntrusted {
        /// The Redis key of the value.
        redis_key: String,
        /// What the signature check found.
        source: Box<kiln_image::SignatureError>,
    },
    /// A value in the remote cache is larger than the tier accepts. It was
    /// not used.
    #[error(
        "remote cache value {redis_key} is larger than {limit} bytes and was rejected (raise \
         RemoteConfig::max_entry_bytes if entries are really this large)"
    )]
    RemoteEntryTooLarge {
        /// The Redis key of the value.
        redis_key: String,
        /// The limit, [`RemoteConfig::max_entry_bytes`](crate::RemoteConfig::max_entry_bytes).
        limit: usize,
    },
    /// An entry to store could not be written as a one-entry image (an
    /// invalid entry: the compile's result breaks a rule of the format).
    #[error("cannot store the entry in the remote cache: it is not a valid image entry")]
    Encode(#[from] kiln_image::WriteError),
    /// An entry to store could not be signed (`KILN_SIGNING_KEY` is set).
    #[error("cannot store the entry in the remote cache: signing it failed")]
    Sign(#[from] kiln_image::SignatureError),
}

/// What the cache sees of a remote-tier error: [`kiln_core::Error::Tier`],
/// named `remote`, with this error as its source; a value refused for its
/// signature is [`kiln_core::Error::TierUntrusted`], which the cache counts
/// in [`Stats::tier_untrusted`](kiln_core::Stats::tier_untrusted).
impl From<Error> for kiln_core::Error {
    fn from(error: Error) -> kiln_core::Error {
        match error {
            // Counted by the cache as a refusal, not a failure.
            Error::RemoteEntryUntrusted { redis_key, source } => kiln_core::Error::TierUntrusted {
                tier: "remote".to_owned(),
                what: redis_key,
                source,
            },
            error => kiln_core::Error::Tier {
                tier: "remote".to_owned(),
                source: Box::new(error),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use kiln_test_support::errors::assert_cause_not_repeated;
    use redis::{ErrorKind, RedisError};

    use super::*;

    fn redis() -> Box<RedisError> {
        Box::new(RedisError::from((ErrorKind::Io, "connection refused")))
    }

    /// Every variant that carries a cause: its message does not repeat it.
    #[test]
    fn no_message_repeats_the_cause_it_returns() {
        let read = kiln_image::ReadError::Io {
            action: "read",
            path: "/remote".into(),
            source: std::io::Error::other("short read"),
        };
        let write = kiln_image::WriteError::Io {
            action: "write",
            path: "/remote".into(),
            source: std::io::Error::other("no space"),
        };
        let samples = [
            Error::RemoteUrl {
                url: "redis://host".into(),
                source: redis(),
            },
            Error::RemoteUnavailable {
                server: "host:6379".into(),
                action: "GET".into(),
                source: redis(),
            },
            Error::RemoteEntryCorrupt {
                redis_key: "k".into(),
                source: Box::new(read),
            },
            Error::RemoteEntryUntrusted {
                redis_key: "k".into(),
                source: Box::new(kiln_image::SignatureError::Unsigned),
            },
            Error::Encode(write),
            Error::Sign(kiln_image::SignatureError::Unsigned),
        ];
        for error in &samples {
            assert_cause_not_repeated(error);
        }
    }
}
