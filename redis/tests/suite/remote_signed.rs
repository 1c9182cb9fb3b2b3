//! Signed remote entries against a real `redis-server`: a value that no
//! trusted key signed is refused and compiled (the poisoning a server, or
//! anyone who can write to it, could otherwise do); signatures bind the
//! `(owner, key)`; tampered, truncated, unknown and rotated keys; a signed
//! hit written through to the disk tier is checked again there; readers
//! without a signing key never write.
//!
//! Children are this test binary re-run with `KILN_SIGNED_TEST_ROLE` set,
//! running the suite's ignored test `child`, which uses `kiln_core::global()`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::remote_support::{RedisServer, WarnCounter, code, compile, get, key, owner};
use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_core::{ArtifactKind, Cache, Key, Owner, Source, Tier, TierEntry};
use kiln_image::header::{offsets, reseal_header};
use kiln_image::{
    BatchPosition, EntryData, Image, ImageMeta, ImageWriter, SigningKey, TrustedKeys, Verification,
    sign_image, strip_signatures,
};
use kiln_redis::{RemoteConfig, RemoteTier};
use kiln_test_support::child;

pub(crate) const EVIL: &[u8] = b"// EVIL PTX injected by the server";
const ROLE: &str = "KILN_SIGNED_TEST_ROLE";

pub(crate) fn signer(n: u8) -> Arc<SigningKey> {
    Arc::new(SigningKey::from_secret_bytes([n; 32]))
}

fn trusting(keys: &[&Arc<SigningKey>]) -> TrustedKeys {
    TrustedKeys::new(keys.iter().map(|key| key.public_key()))
}

/// A remote tier on `url`: signing with `signing`, requiring `trusted`.
fn tier(url: &str, signing: Option<&Arc<SigningKey>>, trusted: Option<TrustedKeys>) -> RemoteTier {
    let mut config = RemoteConfig::new(url)
        .timeout(Duration::from_secs(2))
        .backoff(Duration::from_secs(3600));
    if let Some(key) = signing {
        config = config.signing_key(Arc::clone(key));
    }
    if let Some(keys) = trusted {
        config = config.trusted_keys(keys);
    }
    RemoteTier::open(config).expect("a valid URL")
}

/// A disk cache in `dir` checking signatures with `trusted`.
fn disk(dir: &Path, trusted: Option<TrustedKeys>) -> Arc<DiskCache> {
    let mut config = DiskConfig::new(dir);
    config.trusted_keys = trusted;
    Arc::new(DiskCache::open(config).expect("disk cache opens"))
}

/// A cache with the disk tier of `dir` (checking `trusted`) and `remote`
/// writing through to it, as `kiln_core::add_tiers` wires them.
fn cache(dir: &Path, remote: &RemoteTier, trusted: Option<TrustedKeys>) -> Cache {
    let disk = disk(dir, trusted);
    let cache = Cache::new();
    cache.add_tier(Box::new(Arc::clone(&disk)));
    cache.add_tier(Box::new(remote.clone().write_through(disk)));
    cache
}

/// The Redis key of test kernel `i`.
pub(crate) fn redis_key(i: u64) -> String {
    format!("kiln:v3:{}:{}", owner().digest(), key(i).digest())
}

pub(crate) fn set(server: &RedisServer, name: &str, value: &[u8]) {
    let mut con = server.connection().expect("connects");
    redis::cmd("SET")
        .arg(name)
        .arg(value)
        .query::<()>(&mut con)
        .expect("SET");
}

pub(crate) fn value(server: &RedisServer, name: &str) -> Option<Vec<u8>> {
    let mut con = server.connection().expect("connects");
    redis::cmd("GET").arg(name).query(&mut con).expect("GET")
}

fn values_on(server: &RedisServer) -> usize {
    let mut con = server.connection().expect("connects");
    let names: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).expect("KEYS");
    names.len()
}

/// What an attacker who can write to the server stores for kernel `i`: a
/// well-formed one-entry image of exactly `(owner, key(i))`, every checksum
/// valid, its code [`EVIL`]; signed by `key` if given.
pub(crate) fn poisoned(i: u64, signer: Option<&SigningKey>) -> Vec<u8> {
    let mut writer = ImageWriter::new(ImageMeta::new("kiln-remote", env!("CARGO_PKG_VERSION")));
    writer.push(EntryData {
        owner: owner().digest(),
        owner_label: owner().label().to_owned(),
        key: *key(i).digest(),
        name: format!("kernel{i}"),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![],
        artifacts: vec![kiln_image::Artifact {
            kind: ArtifactKind::Object,
            entry_points: vec![format!("kernel{i}")],
            bytes: EVIL.to_vec(),
        }],
    });
    let bytes = writer.to_bytes().expect("a valid image");
    match signer {
        Some(signer) => sign_image(&bytes, signer).expect("signs"),
        None => bytes,
    }
}

/// `get_or_compile` of kernel `i`: where it came from and its bytes,
/// whatever they are.
fn fetch(cache: &Cache, i: u64, compiles: &AtomicUsize) -> (Source, Vec<u8>) {
    let hit = cache
        .get_or_compile(&owner(), &key(i), || compile(i, compiles))
        .expect("compiles");
    let bytes = hit
        .artifact(&ArtifactKind::Object)
        .expect("an object")
        .to_vec();
    (hit.source(), bytes)
}

#[test]
fn a_poisoned_entry_is_refused_with_trusted_keys_and_served_without() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let (writer_key, stranger) = (signer(1), signer(9));
    let compiles = AtomicUsize::new(0);

    // A trusted writer compiles and stores kernels 0..3, signed.
    let writer_dir = tempdir();
    let writer = tier(&url, Some(&writer_key), None);
    let w = cache(writer_dir.path(), &writer, None);
    for i in 0..3 {
        assert_eq!(get(&w, i, &compiles), Source::Memory);
    }
    assert_eq!(writer.stats().stored, 3);

    // Someone with write access to the server replaces kernel 0 with an
    // unsigned image and kernel 1 with one they signed themselves.
    set(&server, &redis_key(0), &poisoned(0, None));
    set(&server, &redis_key(1), &poisoned(1, Some(&stranger)));

    // A reader that trusts the writer's key: both refused and compiled (the
    // compile's bytes are served: `get` checks them), one warning, counted.
    let reader_dir = tempdir();
    let reader = tier(&url, None, Some(trusting(&[&writer_key])));
    let r = cache(reader_dir.path(), &reader, Some(trusting(&[&writer_key])));
    let warnings = WarnCounter::default();
    let before = compiles.load(Ordering::SeqCst);
    tracing::subscriber::with_default(warnings.clone(), || {
        assert_eq!(get(&r, 0, &compiles), Source::Memory);
        assert_eq!(get(&r, 1, &compiles), Source::Memory);
        assert_eq!(
            get(&r, 2, &compiles),
            Source::Tier,
            "the signed entry is used"
        );
    });
    assert_eq!(compiles.load(Ordering::SeqCst), before + 2);
    assert_eq!(r.stats().tier_untrusted, 2);
    let stats = reader.stats();
    assert_eq!((stats.untrusted, stats.hits, stats.rejected), (2, 1, 0));
    let refusals: Vec<String> = warnings
        .warnings()
        .into_iter()
        .filter(|w| w.contains("trusted key"))
        .collect();
    assert_eq!(refusals.len(), 1, "one warning: {refusals:?}");
    // The reader writes nothing back (no signing key): the poisoned values
    // stay until a writer replaces them, and were never written through.
    assert_eq!(stats.stored, 0);
    assert_eq!(value(&server, &redis_key(0)), Some(poisoned(0, None)));
    let fresh = cache_on_disk(reader_dir.path(), Some(trusting(&[&writer_key])));
    assert_eq!(fetch(&fresh, 0, &compiles).1, code(0));

    // Without trusted keys (as documented): checksums cannot tell a wrong
    // compile from a right one, so the poisoned entry is served, and
    // written through to the disk tier, where it outlives the value.
    let open_dir = tempdir();
    let open = tier(&url, None, None);
    let o = cache(open_dir.path(), &open, None);
    assert_eq!(fetch(&o, 0, &compiles), (Source::Tier, EVIL.to_vec()));
    set(&server, &redis_key(0), b"");
    let later = cache_on_disk(open_dir.path(), None);
    assert_eq!(fetch(&later, 0, &compiles), (Source::Tier, EVIL.to_vec()));
}

/// A fresh cache (a new process) with the disk tier of `dir` alone.
fn cache_on_disk(dir: &Path, trusted: Option<TrustedKeys>) -> Cache {
    let cache = Cache::new();
    cache.add_tier(Box::new(disk(dir, trusted)));
    cache
}

#[test]
fn a_signed_entry_is_bound_to_its_key() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let writer_key = signer(2);
    let compiles = AtomicUsize::new(0);
    let dirs = [tempdir(), tempdir(), tempdir()];
    let w = cache(dirs[0].path(), &tier(&url, Some(&writer_key), None), None);
    for i in [3, 4] {
        get(&w, i, &compiles);
    }
    let signed_3 = value(&server, &redis_key(3)).expect("stored");

    // Copied as it is under kernel 4's key: not the entry asked for.
    set(&server, &redis_key(4), &signed_3);
    let reader = tier(&url, None, Some(trusting(&[&writer_key])));
    let r = cache(dirs[1].path(), &reader, Some(trusting(&[&writer_key])));
    let before = compiles.load(Ordering::SeqCst);
    assert_eq!(get(&r, 4, &compiles), Source::Memory);
    assert_eq!(compiles.load(Ordering::SeqCst), before + 1);
    assert_eq!(reader.stats().rejected, 1);

    // Rewritten to name kernel 4 (checksums recomputed), kernel 3's
    // signature kept: the signature no longer verifies.
    let image = Image::from_bytes(&signed_3, Verification::Full).expect("valid");
    let mut data = image.entry(0).and_then(|e| e.to_data()).expect("entry");
    data.key = *key(4).digest();
    let mut writer = ImageWriter::new(image.meta());
    writer.push(data);
    let mut forged = writer.to_bytes().expect("image");
    let unsigned_3 = strip_signatures(&signed_3).expect("strips");
    assert_eq!(forged.len(), unsigned_3.len());
    forged.extend_from_slice(&signed_3[unsigned_3.len()..]);
    forged[offsets::SIGNATURE_LEN..][..4].copy_from_slice(&signed_3[offsets::SIGNATURE_LEN..][..4]);
    reseal_header(&mut forged);
    assert_eq!(
        Image::from_bytes(&forged, Verification::Full)
            .expect("a well-formed image")
            .signers(),
        [writer_key.public_key()]
    );
    set(&server, &redis_key(4), &forged);
    let reader = tier(&url, None, Some(trusting(&[&writer_key])));
    let r = cache(dirs[2].path(), &reader, Some(trusting(&[&writer_key])));
    assert_eq!(get(&r, 4, &compiles), Source::Memory);
    assert_eq!((reader.stats().untrusted, r.stats().tier_untrusted), (1, 1));
}

#[test]
fn tampered_truncated_unknown_and_rotated_signatures() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let (old, new, unknown) = (signer(3), signer(4), signer(5));
    let compiles = AtomicUsize::new(0);
    // Kernels 10, 11 signed by the old key, 12, 13 by the new one, 14 by a
    // key nobody trusts.
    let dirs = [tempdir(), tempdir(), tempdir()];
    for (i, key) in [
        (10, &old),
        (11, &old),
        (12, &new),
        (13, &new),
        (14, &unknown),
    ] {
        let w = cache(dirs[0].path(), &tier(&url, Some(key), None), None);
        get(&w, i, &compiles);
    }
    let mut tampered = value(&server, &redis_key(11)).expect("stored");
    let last = tampered.len() - 1;
    tampered[last] ^= 1; // the signature's last byte
    set(&server, &redis_key(11), &tampered);
    let truncated = value(&server, &redis_key(13)).expect("stored");
    set(&server, &redis_key(13), &truncated[..truncated.len() - 10]);

    // During a rotation both keys are trusted.
    let both = trusting(&[&old, &new]);
    let reader = tier(&url, None, Some(both.clone()));
    let r = cache(dirs[1].path(), &reader, Some(both));
    let before = compiles.load(Ordering::SeqCst);
    let sources: Vec<Source> = (10..15).map(|i| get(&r, i, &compiles)).collect();
    assert_eq!(
        sources,
        [
            Source::Tier,   // old key
            Source::Memory, // tampered signature: compiled
            Source::Tier,   // new key
            Source::Memory, // truncated: corrupt, compiled
            Source::Memory, // unknown key: compiled
        ]
    );
    assert_eq!(compiles.load(Ordering::SeqCst), before + 3);
    let stats = reader.stats();
    assert_eq!((stats.untrusted, stats.rejected), (2, 1));

    // The old key removed: what it signed is refused.
    let rotated = trusting(&[&new]);
    let reader = tier(&url, None, Some(rotated.clone()));
    let r = cache(dirs[2].path(), &reader, Some(rotated));
    assert_eq!(get(&r, 10, &compiles), Source::Memory);
    assert_eq!(get(&r, 12, &compiles), Source::Tier);
    assert_eq!(reader.stats().untrusted, 1);
}

#[test]
fn write_through_keeps_the_signature_and_the_disk_tier_checks_it_again() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let (writer_key, other) = (signer(6), signer(7));
    let compiles = AtomicUsize::new(0);
    let writer_dir = tempdir();
    let w = cache(
        writer_dir.path(),
        &tier(&url, Some(&writer_key), None),
        None,
    );
    for i in 20..23 {
        get(&w, i, &compiles);
    }
    let stored = value(&server, &redis_key(20)).expect("stored");

    // A reader trusting the key gets them remotely and writes them through.
    let dir = tempdir();
    let trusted = trusting(&[&writer_key]);
    let r = cache(
        dir.path(),
        &tier(&url, None, Some(trusted.clone())),
        Some(trusted.clone()),
    );
    for i in 20..23 {
        assert_eq!(get(&r, i, &compiles), Source::Tier);
    }
    // Each in a signed segment of its own: the value, byte for byte.
    let signed = signed_segments(dir.path());
    assert_eq!(signed.len(), 3, "{signed:?}");
    assert!(
        signed
            .iter()
            .any(|path| std::fs::read(path).expect("reads") == stored),
        "the value of kernel 20 is on disk as it was"
    );
    drop(r);
    for i in 20..23 {
        set(&server, &redis_key(i), b"");
    }

    // A new process with the remote tier off: from the disk, signature
    // checked again.
    let before = compiles.load(Ordering::SeqCst);
    let fresh = cache_on_disk(dir.path(), Some(trusted.clone()));
    for i in 20..23 {
        assert_eq!(get(&fresh, i, &compiles), Source::Tier);
    }
    assert_eq!(compiles.load(Ordering::SeqCst), before);
    // Without trusted keys the signature is not required.
    let open = cache_on_disk(dir.path(), None);
    assert_eq!(get(&open, 20, &compiles), Source::Tier);
    // The signer no longer trusted: refused, counted, compiled.
    let rotated = cache_on_disk(dir.path(), Some(trusting(&[&other])));
    assert_eq!(get(&rotated, 20, &compiles), Source::Memory);
    assert_eq!(rotated.stats().tier_untrusted, 1);
    // A signature changed on disk (replaced by rename, as every write of
    // the cache is): refused.
    for path in &signed {
        let mut bytes = std::fs::read(path).expect("reads");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        kiln_image::write_file_atomic(path, &bytes).expect("rewrites");
    }
    let tampered = cache_on_disk(dir.path(), Some(trusted));
    let before = compiles.load(Ordering::SeqCst);
    for i in 21..23 {
        assert_eq!(get(&tampered, i, &compiles), Source::Memory);
    }
    assert_eq!(compiles.load(Ordering::SeqCst), before + 2);
    assert_eq!(tampered.stats().tier_untrusted, 2);
    // Kernel 20 was compiled on this machine by the process that no longer
    // trusted its signer, and stored unsigned in this user's private
    // directory: an entry of its own, served.
    assert_eq!(get(&tampered, 20, &compiles), Source::Tier);
    assert_eq!(compiles.load(Ordering::SeqCst), before + 2);
}

/// The signed segments of the disk cache in `dir`.
fn signed_segments(dir: &Path) -> Vec<PathBuf> {
    let images = DiskConfig::new(dir).images_dir();
    let mut found: Vec<PathBuf> = std::fs::read_dir(&images)
        .expect("lists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("seg-sig"))
        })
        .collect();
    found.sort();
    found
}

#[test]
fn readers_without_a_signing_key_do_not_write_to_redis() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let compiles = AtomicUsize::new(0);
    let key = signer(8);
    // Neither a key nor KILN_REMOTE_WRITE; then trusted keys and
    // KILN_REMOTE_WRITE (unsigned values would be refused by readers like
    // it): nothing stored.
    let readers = [
        RemoteConfig::new(&url),
        RemoteConfig::new(&url)
            .trusted_keys(trusting(&[&key]))
            .write_unsigned(true),
    ];
    for (n, config) in readers.into_iter().enumerate() {
        assert!(!config.writes());
        let reader = RemoteTier::open(config).expect("valid");
        let dir = tempdir();
        let c = cache(dir.path(), &reader, None);
        for i in 30..33 {
            assert_eq!(get(&c, i, &compiles), Source::Memory);
        }
        assert_eq!(
            (reader.stats().stored, reader.stats().not_written),
            (0, 3),
            "{n}"
        );
        assert_eq!(values_on(&server), 0, "reader {n} wrote to the server");
    }
    // The same through the variables the global cache reads: only
    // KILN_REMOTE_CACHE set is a reader.
    let vars = |extra: &[(&str, &std::ffi::OsStr)]| {
        let mut vars: Vec<(String, std::ffi::OsString)> =
            vec![("KILN_REMOTE_CACHE".into(), url.clone().into())];
        vars.extend(extra.iter().map(|(k, v)| ((*k).into(), (*v).to_owned())));
        kiln_core::settings::Settings::from_vars(vars.into_iter().collect())
    };
    let settings = vars(&[]);
    let config = RemoteConfig::from_settings(&settings, &settings.trust)
        .expect("valid")
        .expect("on");
    assert!(!config.writes());
    // A signing key file makes a writer, which signs.
    let dir = tempdir();
    let key_file = dir.path().join("writer.key");
    kiln_core::trust::write_signing_key(&key, &key_file).expect("writes the key");
    let settings = vars(&[("KILN_SIGNING_KEY", key_file.as_os_str())]);
    let config = RemoteConfig::from_settings(&settings, &settings.trust)
        .expect("valid")
        .expect("on");
    assert!(config.writes());
    let writer = RemoteTier::open(config).expect("valid");
    let writer_dir = tempdir();
    let c = cache(writer_dir.path(), &writer, None);
    get(&c, 30, &compiles);
    assert_eq!(values_on(&server), 1);
    let stored = value(&server, &redis_key(30)).expect("stored");
    let image = Image::from_bytes(&stored, Verification::Full).expect("valid");
    assert_eq!(
        image.verify_signature(&trusting(&[&key])).ok(),
        Some(key.public_key())
    );
}

#[test]
fn the_global_cache_signs_and_checks_with_the_variables() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let keys = tempdir();
    let writer_key = keys.path().join("writer.key");
    let key = SigningKey::generate().expect("random");
    kiln_core::trust::write_signing_key(&key, &writer_key).expect("writes");
    let public = keys.path().join("writer.key.pub");
    std::fs::write(&public, format!("{}\n", key.public_key())).expect("writes");
    let process = |dir: &Path, vars: &[(&str, &Path)]| {
        let mut command = child::command(ROLE, "global");
        command
            .env("KILN_CACHE_DIR", dir)
            .env("KILN_REMOTE_CACHE", &url)
            .env("KILN_REMOTE_TIMEOUT_MS", "2000")
            .env_remove("KILN_CACHE")
            .env_remove("KILN_REMOTE_WRITE")
            .env_remove("KILN_TRUSTED_KEYS")
            .env_remove("KILN_SIGNING_KEY");
        for (name, value) in vars {
            command.env(name, value);
        }
        let stdout = child::run(&mut command);
        child::result_line(&stdout)
            .map(|line| line.trim().to_owned())
            .unwrap_or_else(|| panic!("no RESULT line in:\n{stdout}"))
    };
    let dirs = [tempdir(), tempdir(), tempdir()];
    // A writer with the key signs what it stores.
    assert_eq!(
        process(dirs[0].path(), &[("KILN_SIGNING_KEY", &writer_key)]),
        "compiles=4 tier_hits=0 untrusted=0"
    );
    assert_eq!(values_on(&server), 4);
    // Kernel 0 poisoned: a reader trusting the key compiles it, uses the
    // other three.
    set(&server, &redis_key(0), &poisoned(0, None));
    assert_eq!(
        process(dirs[1].path(), &[("KILN_TRUSTED_KEYS", &public)]),
        "compiles=1 tier_hits=3 untrusted=1"
    );
    // Trusting another key only: everything compiled, nothing written.
    let other = keys.path().join("other.pub");
    std::fs::write(&other, format!("{}\n", signer(42).public_key())).expect("writes");
    assert_eq!(
        process(dirs[2].path(), &[("KILN_TRUSTED_KEYS", &other)]),
        "compiles=4 tier_hits=0 untrusted=4"
    );
    assert_eq!(value(&server, &redis_key(0)), Some(poisoned(0, None)));
}

/// Holds a cache's background writer in its first store until released,
/// so that the stores queued meanwhile reach the next tiers together, as
/// they do behind any slow store. It stores nothing: the remote tier
/// behind it, and its server, are real.
#[derive(Default)]
struct Hold {
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl Hold {
    /// Waits (at most a minute) until the writer is held.
    fn wait_entered(&self) {
        let state = self.state.lock().expect("lock");
        let (state, _) = self
            .changed
            .wait_timeout_while(state, Duration::from_secs(60), |(entered, _)| !*entered)
            .expect("lock");
        assert!(state.0, "the writer never reached the held store");
    }

    fn release(&self) {
        self.state.lock().expect("lock").1 = true;
        self.changed.notify_all();
    }
}

impl Tier for Hold {
    fn name(&self) -> &str {
        "hold"
    }

    fn load_entry(&self, _: &Owner, _: &Key) -> Result<Option<TierEntry>, kiln_core::Error> {
        Ok(None)
    }

    fn store(&self, _: &Owner, _: &EntryData) -> Result<(), kiln_core::Error> {
        let mut state = self.state.lock().expect("lock");
        state.0 = true;
        self.changed.notify_all();
        let _held = self
            .changed
            .wait_timeout_while(state, Duration::from_secs(60), |(_, released)| !*released)
            .expect("lock");
        Ok(())
    }
}

/// Where the signature trailer of `value` starts.
fn trailer_at(value: &[u8]) -> usize {
    let len = u32::from_le_bytes(
        value[offsets::SIGNATURE_LEN..][..4]
            .try_into()
            .expect("four bytes"),
    );
    value.len() - len as usize
}

#[test]
fn entries_stored_together_cost_a_reader_one_verification() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let writer_key = signer(12);
    let compiles = AtomicUsize::new(0);

    // A writer with the remote tier alone (no disk tier): kernel 59 holds
    // its background writer while kernels 40..51 are compiled, so that
    // their eleven stores queue together and reach the remote tier as one
    // batch.
    let hold = Arc::new(Hold::default());
    let writer = tier(&url, Some(&writer_key), None);
    let w = Cache::new();
    w.add_tier(Box::new(Arc::clone(&hold)));
    w.add_tier(Box::new(writer.clone()));
    let compile_in = |cache: &Cache, i: u64| {
        cache
            .get_or_compile(&owner(), &key(i), || compile(i, &compiles))
            .expect("compiles");
    };
    compile_in(&w, 59);
    hold.wait_entered();
    for i in 40..51 {
        compile_in(&w, i);
    }
    assert_eq!(w.stats().store_queue_depth, 12);
    hold.release();
    w.flush();
    assert_eq!(writer.stats().stored, 12);
    let stats = w.stats();
    assert_eq!((stats.stores, stats.store_failures), (24, 0), "{stats:?}");
    for i in 40..51 {
        let stored = value(&server, &redis_key(i)).expect("stored");
        let image = Image::from_bytes(&stored, Verification::Full).expect("valid");
        assert_eq!(
            image.signature_batch(),
            Some(BatchPosition {
                index: (i - 40) as u32,
                size: 11
            })
        );
    }

    // A fresh reader trusting the key, with a disk tier written through:
    // eleven remote hits, one ed25519 verification.
    let trusted = trusting(&[&writer_key]);
    let reader = tier(&url, None, Some(trusted.clone()));
    let reader_dir = tempdir();
    let r = cache(reader_dir.path(), &reader, Some(trusting(&[&writer_key])));
    let before = compiles.load(Ordering::SeqCst);
    for i in 40..51 {
        assert_eq!(get(&r, i, &compiles), Source::Tier, "kernel {i}");
    }
    assert_eq!(compiles.load(Ordering::SeqCst), before);
    assert_eq!((reader.stats().hits, reader.stats().untrusted), (11, 0));
    assert_eq!(trusted.verifications(), 1);
    // Written through with their batch trailers and checked again from
    // disk by a new process: one verification there too.
    assert_eq!(signed_segments(reader_dir.path()).len(), 11);
    let disk_keys = trusting(&[&writer_key]);
    let from_disk = cache_on_disk(reader_dir.path(), Some(disk_keys.clone()));
    for i in 40..51 {
        assert_eq!(get(&from_disk, i, &compiles), Source::Tier, "kernel {i}");
    }
    assert_eq!(compiles.load(Ordering::SeqCst), before);
    assert_eq!(disk_keys.verifications(), 1);

    // A member copied under another member's key: not the entry asked for.
    let member_40 = value(&server, &redis_key(40)).expect("stored");
    set(&server, &redis_key(41), &member_40);
    // A member with a sibling digest of its path flipped.
    let mut member_42 = value(&server, &redis_key(42)).expect("stored");
    let path = trailer_at(&member_42) + 24;
    member_42[path] ^= 1;
    set(&server, &redis_key(42), &member_42);
    // Refused and compiled by a fresh reader, and by one that verified the
    // batch's root already (the memo does not vouch for another path).
    for warm in [false, true] {
        let keys = if warm {
            trusted.clone()
        } else {
            trusting(&[&writer_key])
        };
        let verified = keys.verifications();
        let reader = tier(&url, None, Some(keys.clone()));
        let r = Cache::new();
        r.add_tier(Box::new(reader.clone()));
        let before = compiles.load(Ordering::SeqCst);
        assert_eq!(get(&r, 41, &compiles), Source::Memory);
        assert_eq!(get(&r, 42, &compiles), Source::Memory);
        assert_eq!(get(&r, 43, &compiles), Source::Tier);
        assert_eq!(compiles.load(Ordering::SeqCst), before + 2);
        let stats = reader.stats();
        assert_eq!(
            (stats.rejected, stats.untrusted, stats.hits),
            (1, 1, 1),
            "warm {warm}"
        );
        assert_eq!(r.stats().tier_untrusted, 1);
        // Fresh: the flipped path's root (failed) and the batch's root, one
        // verification each; warm: the flipped path's root only (the copy
        // under another key is refused before any signature is checked).
        assert_eq!(
            keys.verifications() - verified,
            if warm { 1 } else { 2 },
            "warm {warm}"
        );
    }
}

/// The role of a child process of these tests (`KILN_SIGNED_TEST_ROLE`),
/// run by the suite's `child` test; nothing when the variable is unset.
pub fn run_child_role() {
    match std::env::var(ROLE).as_deref() {
        Ok("global") => {}
        _ => return,
    }
    let cache = kiln_core::global();
    let compiles = AtomicUsize::new(0);
    for i in 0..4 {
        get(cache, i, &compiles);
    }
    let stats = cache.stats();
    println!(
        "RESULT compiles={} tier_hits={} untrusted={}",
        compiles.load(Ordering::SeqCst),
        stats.hits_tier,
        stats.tier_untrusted,
    );
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

#[test]
fn a_writer_compiling_one_kernel_after_another_signs_them_in_one_batch() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let writer_key = signer(13);
    let compiles = AtomicUsize::new(0);
    // The default window (1 s) is longer than these compiles take; a long
    // one keeps the test free of timing. A tier that does not sign has no
    // window: nothing to gather for.
    let writer = RemoteTier::open(
        RemoteConfig::new(&url)
            .signing_key(Arc::clone(&writer_key))
            .batch_window(Duration::from_secs(600)),
    )
    .expect("a valid URL");
    assert_eq!(writer.batch_window(), Duration::from_secs(600));
    assert_eq!(tier(&url, None, None).batch_window(), Duration::ZERO);
    let w = Cache::new();
    w.add_tier(Box::new(writer.clone()));
    for i in 60..71 {
        w.get_or_compile(&owner(), &key(i), || compile(i, &compiles))
            .expect("compiles");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Gathered, not yet sent; the flush (as the exit hook) sends them at once.
    assert_eq!(writer.stats().stored, 0);
    w.flush();
    assert_eq!(writer.stats().stored, 11);
    for i in 60..71 {
        let stored = value(&server, &redis_key(i)).expect("stored");
        let image = Image::from_bytes(&stored, Verification::Full).expect("valid");
        assert_eq!(
            image.signature_batch(),
            Some(BatchPosition {
                index: (i - 60) as u32,
                size: 11
            })
        );
    }
    // A reader pays one verification for the eleven.
    let trusted = trusting(&[&writer_key]);
    let reader = tier(&url, None, Some(trusted.clone()));
    let r = Cache::new();
    r.add_tier(Box::new(reader.clone()));
    let before = compiles.load(Ordering::SeqCst);
    for i in 60..71 {
        assert_eq!(get(&r, i, &compiles), Source::Tier, "kernel {i}");
    }
    assert_eq!(compiles.load(Ordering::SeqCst), before);
    assert_eq!(trusted.verifications(), 1);
}
