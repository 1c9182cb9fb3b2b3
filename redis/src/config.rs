//! The remote tier's settings: the server's URL, the timeout per operation,
//! the back-off after a failure, and signatures ([`RemoteConfig`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kiln_image::{SigningKey, TrustedKeys};

use kiln_core::settings::{Kind, Phase, Section, Settings, Switch};

use crate::Error;

/// `KILN_REMOTE_CACHE`: the Redis server's URL; unset or empty: no remote tier.
pub const REMOTE_CACHE: &str = "KILN_REMOTE_CACHE";
/// `KILN_REMOTE_TIMEOUT_MS`: the timeout of one operation, in milliseconds.
pub const REMOTE_TIMEOUT_MS: &str = "KILN_REMOTE_TIMEOUT_MS";
/// `KILN_REMOTE_BATCH_MS`: how long a signing writer gathers stores into one
/// batch signature, in milliseconds (`0`: only what is already queued).
pub const REMOTE_BATCH_MS: &str = "KILN_REMOTE_BATCH_MS";

inventory::submit! {
    Switch::new(REMOTE_CACHE, "remote", Phase::RunTime, Kind::Url)
        .doc("with the feature `redis` (the crate `kiln-redis` linked): the URL of a shared remote tier after the disk tier, `redis://host:port/db` (`rediss://` for TLS, `redis://user:password@host/db` for AUTH); hits are verified, then written through to the disk tier. A process stores its compiles there only with `KILN_SIGNING_KEY`, or `KILN_REMOTE_WRITE=1`: readers are read-only by default. Without `KILN_TRUSTED_KEYS` a well-formed value is served unverified: whoever can write to the server chooses the GPU code its readers run (CUBINs, PTX, and the driver-JIT results of other machines); set the keys of your writers. A precompile block never embeds such a value (see [Shipping](shipping.md), *Builds reuse compiles*)")
}
inventory::submit! {
    Switch::new(REMOTE_TIMEOUT_MS, "remote", Phase::RunTime, Kind::Number)
        .default_text("1000")
        .doc("the most one remote operation may take, in milliseconds; a failing server costs one timeout, one warning, then a back-off")
}
inventory::submit! {
    Switch::new(REMOTE_BATCH_MS, "remote", Phase::RunTime, Kind::Number)
        .default_text("1000")
        .doc("a writer with `KILN_SIGNING_KEY` gathers its stores of up to this many ms (at most 60000; `0`: only those already queued together) under one batch signature, so its readers verify one signature per batch, not per entry; the same compiles reach the disk tier up to that much later too; a flush or the process's exit sends what is gathered at once. A value that is not such a number turns the remote tier off with one warning, as a bad `KILN_REMOTE_TIMEOUT_MS` does")
}

/// The remote tier's section of the [`Settings`]: its variables as read,
/// parsed once per reading ([`Settings::section`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemoteSettings {
    /// `KILN_REMOTE_CACHE`, trimmed; `None` when unset or empty (no remote
    /// tier).
    pub url: Option<String>,
    /// `KILN_REMOTE_TIMEOUT_MS`: `None` when unset, or the value that is
    /// not a positive number of milliseconds (trimmed).
    pub timeout: Result<Option<Duration>, String>,
    /// `KILN_REMOTE_BATCH_MS`: `None` when unset, or the value that is not
    /// a number of milliseconds up to a minute (trimmed).
    pub batch_window: Result<Option<Duration>, String>,
}

impl Section for RemoteSettings {
    fn parse(settings: &Settings) -> RemoteSettings {
        let text = |name: &str| {
            settings
                .var(name)
                .map(|value| value.to_string_lossy().trim().to_owned())
        };
        let timeout = match text(REMOTE_TIMEOUT_MS) {
            None => Ok(None),
            Some(value) => value
                .parse::<u64>()
                .ok()
                .filter(|&millis| millis > 0)
                .map(|millis| Some(Duration::from_millis(millis)))
                .ok_or(value),
        };
        let batch_window = match text(REMOTE_BATCH_MS) {
            None => Ok(None),
            Some(value) => value
                .parse::<u64>()
                .ok()
                .map(Duration::from_millis)
                .filter(|window| *window <= kiln_core::cache::MAX_BATCH_WINDOW)
                .map(Some)
                .ok_or(value),
        };
        RemoteSettings {
            url: text(REMOTE_CACHE).filter(|url| !url.is_empty()),
            timeout,
            batch_window,
        }
    }
}

/// Where the remote tier is and how long it may take.
///
/// From the settings ([`RemoteConfig::from_settings`]):
///
/// `KILN_REMOTE_CACHE`, `KILN_REMOTE_TIMEOUT_MS` and `KILN_REMOTE_BATCH_MS`,
/// with kiln-core's trust switches (`KILN_TRUSTED_KEYS`, `KILN_SIGNING_KEY`,
/// `KILN_REMOTE_WRITE`): each switch's default and meaning are in its
/// declaration (this module's, and kiln-core's), from which docs/switches.md's
/// table and `kiln settings` are generated.
///
/// An unset or empty `KILN_REMOTE_CACHE` leaves the remote tier off. A
/// process writes to the server only with a signing key, or, with no
/// trusted keys configured, with `KILN_REMOTE_WRITE=1`: readers are
/// read-only by default, so a fleet of untrusted readers (CI jobs of
/// anyone's branch) cannot fill the cache its trusted writers fill.
///
/// ```
/// use std::time::Duration;
/// use kiln_redis::RemoteConfig;
///
/// let config = RemoteConfig::new("redis://:secret@cache.internal:6379/2")
///     .timeout(Duration::from_millis(200))
///     .backoff(Duration::from_secs(60));
/// // Logs and errors never show the password.
/// assert_eq!(config.server(), "redis://:***@cache.internal:6379/2");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteConfig {
    url: String,
    /// The most one operation may take, from its start to its end:
    /// resolving the host, connecting (TCP, TLS, AUTH, `SELECT`), the
    /// command's write and its whole reply, and one retry on a new
    /// connection. A deadline for the whole, not a timeout per read: a
    /// server that trickles bytes cannot stretch it. Default 1 s.
    pub timeout: Duration,
    /// After a failure, how long the tier answers "miss" without trying the
    /// server. Default 30 s.
    pub backoff: Duration,
    /// The first part of every Redis key (`<namespace>:v3:<owner>:<key>`),
    /// to share one server among unrelated users. Default `kiln`.
    pub namespace: String,
    /// The largest value stored or fetched: larger entries are not stored,
    /// and no more than this plus one byte (and the reply's framing) is
    /// read of a value, whatever the server sends, so a hostile server
    /// cannot make the tier allocate more than a small multiple of it.
    /// Default 64 MiB.
    pub max_entry_bytes: usize,
    /// Use only values signed by one of these keys (`KILN_TRUSTED_KEYS`);
    /// others are refused and the entry compiled. `None` (the default):
    /// signatures are not required.
    pub trusted_keys: Option<TrustedKeys>,
    /// Sign every value stored with this key (`KILN_SIGNING_KEY`). Default
    /// none.
    pub signing_key: Option<Signer>,
    /// Store values unsigned when there is no signing key
    /// (`KILN_REMOTE_WRITE=1`); ignored when trusted keys are set, since
    /// readers that require signatures would refuse them. Default `false`:
    /// without a signing key the tier only reads.
    pub write_unsigned: bool,
    /// With a signing key: how long the cache's background writer may hold
    /// a store for this tier to gather later stores into the same batch
    /// signature (`KILN_REMOTE_BATCH_MS`), so that a writer compiling one
    /// kernel after another still signs them in few batches and a reader
    /// verifies one signature per batch. A store reaches the server at
    /// most this much later; `Cache::flush`, the exit hook and the cache's
    /// drop do not wait for it. Zero: a batch is only what is already
    /// queued. Default 1 s; at most 60 s
    /// ([`MAX_BATCH_WINDOW`](kiln_core::cache::MAX_BATCH_WINDOW)). The
    /// stores of the same compile into the disk tier wait with it.
    pub batch_window: Duration,
}

/// The key a [`RemoteTier`](crate::RemoteTier) signs with (shared, never
/// shown: its `Debug` is the public key).
#[derive(Clone)]
pub struct Signer(pub Arc<SigningKey>);

impl PartialEq for Signer {
    fn eq(&self, other: &Signer) -> bool {
        self.0.public_key() == other.0.public_key()
    }
}

impl Eq for Signer {}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl RemoteConfig {
    /// The default settings for the server at `url` (not checked until the
    /// tier is opened).
    pub fn new(url: impl Into<String>) -> RemoteConfig {
        RemoteConfig {
            url: url.into(),
            timeout: Duration::from_secs(1),
            backoff: Duration::from_secs(30),
            namespace: "kiln".to_owned(),
            max_entry_bytes: 64 << 20,
            trusted_keys: None,
            signing_key: None,
            write_unsigned: false,
            batch_window: Duration::from_secs(1),
        }
    }

    /// Whether the tier stores entries: with a signing key, or
    /// [`RemoteConfig::write_unsigned`] and no trusted keys.
    pub fn writes(&self) -> bool {
        self.signing_key.is_some() || (self.write_unsigned && self.trusted_keys.is_none())
    }

    /// Sets [`RemoteConfig::trusted_keys`].
    pub fn trusted_keys(mut self, keys: TrustedKeys) -> RemoteConfig {
        self.trusted_keys = Some(keys);
        self
    }

    /// Sets [`RemoteConfig::signing_key`]: the tier signs and stores.
    pub fn signing_key(mut self, key: Arc<SigningKey>) -> RemoteConfig {
        self.signing_key = Some(Signer(key));
        self
    }

    /// Sets [`RemoteConfig::write_unsigned`].
    pub fn write_unsigned(mut self, write: bool) -> RemoteConfig {
        self.write_unsigned = write;
        self
    }

    /// The configuration `settings` give (their [`RemoteSettings`]:
    /// `KILN_REMOTE_CACHE`, `KILN_REMOTE_TIMEOUT_MS`,
    /// `KILN_REMOTE_BATCH_MS`), under `trust` (the settings' own policy,
    /// [`Settings::trust`](kiln_core::settings::Settings::trust), for the
    /// global cache: its trusted keys and their memo of verified batch
    /// roots are shared; a precompile block's vouching policy for its
    /// tiers). The signing key file is read here, when the tier is
    /// configured (an unusable one gives one warning: the tier signs and
    /// writes nothing). `None` when the remote tier is off.
    ///
    /// # Errors
    /// [`Error::RemoteTimeout`] when the timeout is not a number of
    /// milliseconds, [`Error::RemoteBatchWindow`] when the batch window is
    /// not.
    pub fn from_settings(
        settings: &Settings,
        trust: &kiln_core::trust::TrustPolicy,
    ) -> Result<Option<RemoteConfig>, Error> {
        let section = settings.section::<RemoteSettings>();
        let Some(url) = section.url.clone() else {
            return Ok(None);
        };
        let mut config = RemoteConfig::new(url);
        match &section.timeout {
            Ok(Some(timeout)) => config.timeout = *timeout,
            Ok(None) => {}
            Err(value) => {
                return Err(Error::RemoteTimeout {
                    value: value.clone(),
                });
            }
        }
        match &section.batch_window {
            Ok(Some(window)) => config.batch_window = *window,
            Ok(None) => {}
            Err(value) => {
                return Err(Error::RemoteBatchWindow {
                    value: value.clone(),
                });
            }
        }
        config.trusted_keys = trust.trusted_keys.clone();
        config.signing_key = trust.signing_key().map(Signer);
        config.write_unsigned = trust.remote_write;
        Ok(Some(config))
    }

    /// Sets [`RemoteConfig::timeout`].
    pub fn timeout(mut self, timeout: Duration) -> RemoteConfig {
        self.timeout = timeout;
        self
    }

    /// Sets [`RemoteConfig::batch_window`].
    pub fn batch_window(mut self, window: Duration) -> RemoteConfig {
        self.batch_window = window;
        self
    }

    /// Sets [`RemoteConfig::backoff`].
    pub fn backoff(mut self, backoff: Duration) -> RemoteConfig {
        self.backoff = backoff;
        self
    }

    /// Sets [`RemoteConfig::max_entry_bytes`].
    pub fn max_entry_bytes(mut self, max_entry_bytes: usize) -> RemoteConfig {
        self.max_entry_bytes = max_entry_bytes;
        self
    }

    /// Sets [`RemoteConfig::namespace`].
    pub fn namespace(mut self, namespace: impl Into<String>) -> RemoteConfig {
        self.namespace = namespace.into();
        self
    }

    /// The URL as given, password included: for the client only.
    pub(super) fn url(&self) -> &str {
        &self.url
    }

    /// The URL with any password replaced by `***`, for logs and errors.
    pub fn server(&self) -> String {
        redact(&self.url)
    }
}

impl fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("server", &self.server())
            .field("timeout", &self.timeout)
            .field("backoff", &self.backoff)
            .field("namespace", &self.namespace)
            .field("max_entry_bytes", &self.max_entry_bytes)
            .field("trusted_keys", &self.trusted_keys)
            .field("signing_key", &self.signing_key)
            .field("writes", &self.writes())
            .field("batch_window", &self.batch_window)
            .finish()
    }
}

/// `url` with its password replaced by `***` (the user name stays: it says
/// which ACL user is in use). A URL that does not parse is shown only by its
/// scheme, since where its password is cannot be known.
fn redact(url: &str) -> String {
    match redis::parse_redis_url(url) {
        Some(mut parsed) => {
            if parsed.password().is_some() {
                // Cannot fail: a URL with a password has a host.
                let _ = parsed.set_password(Some("***"));
            }
            parsed.to_string()
        }
        None => match url.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://(unparsable URL)"),
            None => "(unparsable URL)".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<Option<RemoteConfig>, Error> {
        let settings = Settings::from_vars(vars.iter().copied().collect());
        RemoteConfig::from_settings(&settings, &settings.trust)
    }

    #[test]
    fn unset_or_empty_url_means_off() {
        assert_eq!(from(&[]).ok(), Some(None));
        assert_eq!(from(&[(REMOTE_CACHE, "  ")]).ok(), Some(None));
    }

    #[test]
    fn url_and_timeout_are_read() {
        let config = from(&[
            (REMOTE_CACHE, " redis://127.0.0.1:6379/3 "),
            (REMOTE_TIMEOUT_MS, "250"),
        ])
        .expect("valid")
        .expect("on");
        assert_eq!(config.url(), "redis://127.0.0.1:6379/3");
        assert_eq!(config.timeout, Duration::from_millis(250));
        assert_eq!(config.backoff, Duration::from_secs(30));
    }

    #[test]
    fn a_timeout_that_is_not_positive_milliseconds_is_an_error() {
        for bad in ["", "0", "-5", "1.5", "1s"] {
            let result = from(&[(REMOTE_CACHE, "redis://h:1"), (REMOTE_TIMEOUT_MS, bad)]);
            assert!(
                matches!(result, Err(Error::RemoteTimeout { ref value }) if value == bad.trim()),
                "{bad:?}: {result:?}"
            );
        }
    }

    #[test]
    fn the_batch_window_is_read_in_milliseconds() {
        let on = |vars: &[(&str, &str)]| from(vars).expect("valid").expect("on");
        let url = (REMOTE_CACHE, "redis://h:1");
        assert_eq!(on(&[url]).batch_window, Duration::from_secs(1));
        let zero = on(&[url, (REMOTE_BATCH_MS, " 0 ")]);
        assert_eq!(zero.batch_window, Duration::ZERO);
        let set = on(&[url, (REMOTE_BATCH_MS, "250")]);
        assert_eq!(set.batch_window, Duration::from_millis(250));
        let most = on(&[url, (REMOTE_BATCH_MS, "60000")]);
        assert_eq!(most.batch_window, Duration::from_secs(60));
        for bad in ["", "-1", "1.5", "1s", "60001", "18446744073709551615"] {
            let result = from(&[url, (REMOTE_BATCH_MS, bad)]);
            assert!(
                matches!(result, Err(Error::RemoteBatchWindow { ref value }) if value == bad.trim()),
                "{bad:?}: {result:?}"
            );
        }
    }

    #[test]
    fn passwords_never_show() {
        let cases = [
            ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
            ("rediss://alice:pw@h:1/2", "rediss://alice:***@h:1/2"),
            ("redis://h:1", "redis://h:1"),
            ("redis://alice@h:1", "redis://alice@h:1"),
            ("http://:pw@h", "http://(unparsable URL)"),
            ("pw", "(unparsable URL)"),
        ];
        for (url, shown) in cases {
            let config = RemoteConfig::new(url);
            assert_eq!(config.server(), shown);
            assert!(!format!("{config:?}").contains("pw"), "{config:?}");
        }
    }
}
