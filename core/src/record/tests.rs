//! Unit tests of recording: what a cache records, and reading it back.

use super::format::{entry_line, seal};
use super::*;
use crate::cache::{Acquired, Observer};
use crate::{Artifact, ArtifactKind, Cache, Compiled, KeyBuilder};
use crate::{Error, Key, Owner};
use kiln_image::{Image, ImageMeta, Verification};
use kiln_test_support::Rng;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

fn owner() -> Owner {
    Owner::new("rec-compiler", "1.0", "rec-target", Vec::<String>::new()).unwrap()
}

fn key(name: &str) -> Key {
    KeyBuilder::new("kiln-core record tests", 1)
        .str("name", name)
        .finish()
}

fn compiled(name: &str) -> Compiled {
    Compiled::new(name).artifact(Artifact {
        kind: ArtifactKind::Object,
        entry_points: vec![name.to_owned()],
        bytes: name.as_bytes().to_vec(),
    })
}

/// `get_or_compile` of `name` in `cache`; whether it compiled.
fn get(cache: &Cache, name: &str) -> bool {
    let mut ran = false;
    cache
        .get_or_compile(&owner(), &key(name), || {
            ran = true;
            std::thread::sleep(Duration::from_millis(1));
            Ok(compiled(name))
        })
        .unwrap();
    ran
}

/// An image of `names`, written by `producer`.
fn image(producer: &str, names: &[&str]) -> Image {
    let cache = Cache::new();
    let before = cache.snapshot();
    for name in names {
        cache.insert(&owner(), &key(name), compiled(name));
    }
    let bytes = cache
        .delta(&before)
        .to_bytes(ImageMeta::new(producer, "1.0"))
        .unwrap();
    Image::from_bytes(&bytes, Verification::Structural).unwrap()
}

fn read(path: &Path) -> Recording {
    let mut recording = Recording::new();
    recording.read_file(path, DEFAULT_READ_LIMIT).unwrap();
    recording
}

fn used<'r>(recording: &'r Recording, name: &str) -> &'r Used {
    recording
        .get(&owner().digest(), key(name).digest())
        .unwrap_or_else(|| panic!("{name} not recorded: {recording:#?}"))
}

#[test]
fn every_source_is_recorded_once_per_process_with_its_hits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.rec");
    let cache_dir = dir.path().join("cache");
    let settings = crate::settings::Settings::from_vars(
        [("KILN_CACHE_DIR", OsString::from(&cache_dir))]
            .into_iter()
            .collect(),
    );

    // An earlier process compiled `on-disk` into the disk tier.
    let earlier = Cache::new();
    crate::add_tiers(&earlier, &settings);
    assert!(get(&earlier, "on-disk"));
    drop(earlier);

    let cache = Cache::new();
    crate::add_tiers(&cache, &settings);
    cache.merge_image(image("lib-a", &["shipped"]));
    cache.record_into(Recorder::open(&path).unwrap()).unwrap();
    cache.insert(&owner(), &key("inserted"), compiled("inserted"));
    for _ in 0..5 {
        get(&cache, "shipped");
    }
    let compiles: usize = (0..4).map(|_| usize::from(get(&cache, "new"))).sum();
    assert_eq!(compiles, 1);
    for _ in 0..3 {
        assert!(!get(&cache, "on-disk"));
    }
    get(&cache, "inserted");
    // A backend may look entries up directly: those hits count too, a
    // miss records nothing.
    for _ in 0..2 {
        assert!(cache.lookup(&owner().digest(), &key("shipped")).is_some());
    }
    assert!(cache.lookup(&owner().digest(), &key("absent")).is_none());
    let recorder = cache.recorder().unwrap();
    assert_eq!(recorder.entries(), 4);

    // Before the flush: the `E` records only, one hit each.
    let early = read(&path);
    assert_eq!(early.records(), 4);
    assert_eq!(used(&early, "shipped").hits(), 1);

    recorder.flush();
    recorder.flush(); // nothing new: nothing written
    let recording = read(&path);
    assert!(recording.damage().is_clean(), "{:?}", recording.damage());
    assert_eq!(recording.len(), 4);
    assert_eq!(
        recording.records(),
        4 + 3,
        "one H record per entry hit again"
    );

    let shipped = used(&recording, "shipped");
    assert_eq!(shipped.name, "shipped");
    assert_eq!(shipped.owner_label, owner().label());
    let image_use = &shipped.sources[&SourceKind::Image];
    assert_eq!((image_use.processes, image_use.hits), (1, 7));
    assert_eq!(
        image_use.producers.iter().collect::<Vec<_>>(),
        ["lib-a 1.0"]
    );
    assert!(shipped.from_image());

    let new = used(&recording, "new");
    assert_eq!(
        new.sources.keys().collect::<Vec<_>>(),
        [&SourceKind::Compiled]
    );
    assert_eq!((new.compiles(), new.hits()), (1, 4));
    assert!(new.compile_time() >= Duration::from_millis(1));
    assert!(!new.from_image());

    let disk = used(&recording, "on-disk");
    let disk_use = &disk.sources[&SourceKind::Tier("disk".into())];
    assert_eq!((disk_use.processes, disk_use.hits), (1, 3));
    assert_eq!(disk.compiles(), 0);

    let inserted = used(&recording, "inserted");
    assert_eq!(
        inserted.sources.keys().collect::<Vec<_>>(),
        [&SourceKind::Memory]
    );

    // A second process appends to the same file.
    drop(cache);
    let second = Cache::new();
    second.record_into(Recorder::open(&path).unwrap()).unwrap();
    get(&second, "new");
    drop(second);
    let both = read(&path);
    assert!(both.damage().is_clean());
    assert_eq!(used(&both, "new").compiles(), 2);
    assert_eq!(used(&both, "new").hits(), 5);
}

#[test]
fn a_cache_records_into_one_recorder() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new();
    assert!(cache.recorder().is_none());
    cache
        .record_into(Recorder::open(&dir.path().join("a")).unwrap())
        .unwrap();
    let refused = cache
        .record_into(Recorder::open(&dir.path().join("b")).unwrap())
        .unwrap_err();
    assert_eq!(refused.path(), dir.path().join("b"));
    assert_eq!(cache.recorder().unwrap().path(), dir.path().join("a"));
}

#[test]
fn a_cache_with_another_observer_has_no_recorder_and_refuses_one() {
    struct Quiet;
    impl Observer for Quiet {
        fn found(&self, _hit: &crate::Hit<'_>) {}
        fn acquired(&self, _owner: &Owner, _key: &Key, _name: &str, _how: Acquired<'_>) {}
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new();
    assert!(cache.observe(std::sync::Arc::new(Quiet)).is_ok());
    assert!(cache.observer().is_some());
    assert!(cache.recorder().is_none());
    let refused = cache
        .record_into(Recorder::open(&dir.path().join("a")).unwrap())
        .unwrap_err();
    assert_eq!(refused.path(), dir.path().join("a"));
    assert!(cache.recorder().is_none());
}

#[test]
fn a_recompile_after_a_tier_hit_is_a_further_source_of_the_same_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.rec");
    let recorder = Recorder::open(&path).unwrap();
    let (o, k) = (owner(), key("x"));
    recorder.acquired(
        &o,
        &k,
        "x",
        Acquired::Tier {
            index: 0,
            name: "disk",
        },
    );
    recorder.acquired(&o, &k, "x", Acquired::Compiled(Duration::from_millis(7)));
    recorder.acquired(&o, &k, "x", Acquired::Compiled(Duration::from_millis(9)));
    drop(recorder);
    let recording = read(&path);
    let x = used(&recording, "x");
    assert_eq!(x.hits(), 3);
    assert_eq!(x.compiles(), 1);
    assert_eq!(x.compile_time(), Duration::from_millis(7));
    assert_eq!(x.sources[&SourceKind::Tier("disk".into())].hits, 3);
    assert_eq!(x.sources[&SourceKind::Compiled].hits, 0);
}

#[test]
fn text_fields_are_escaped_cut_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.rec");
    let recorder = Recorder::open(&path).unwrap();
    let tricky = "tab\there\nnewline 100% \u{7f} \u{1b}[31m é";
    let long = "é".repeat(150); // 300 bytes
    recorder.acquired(
        &owner(),
        &key("a"),
        tricky,
        Acquired::Compiled(Duration::ZERO),
    );
    recorder.acquired(
        &owner(),
        &key("b"),
        &long,
        Acquired::Tier {
            index: 3,
            name: "my tier/√",
        },
    );
    drop(recorder);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.lines().all(|line| line.len() < MAX_LINE));
    let recording = read(&path);
    assert!(recording.damage().is_clean());
    assert_eq!(used(&recording, "a").name, tricky);
    let b = recording.get(&owner().digest(), key("b").digest()).unwrap();
    assert_eq!(
        b.name,
        "é".repeat(100),
        "cut at 200 bytes, on a character boundary"
    );
    assert_eq!(
        b.sources.keys().collect::<Vec<_>>(),
        [&SourceKind::Tier("my_tier__".into())]
    );
}

/// One valid `E` record of `name`.
fn record_of(name: &str) -> String {
    let (owner, key) = (owner().digest(), *key(name).digest());
    entry_line(
        &SourceKind::Compiled,
        (&owner, &key),
        1,
        5,
        name,
        "label",
        "",
    )
}

#[test]
fn damaged_lines_are_skipped_and_counted() {
    let good = record_of("good");
    let other = record_of("other");
    let mut bad_check = record_of("bad-check");
    bad_check.replace_range(bad_check.len() - 3..bad_check.len() - 1, "zz");
    let flipped = record_of("flipped").replace("label", "lAbel");
    let future = seal(format!("KR2\tE\t{}", "x".repeat(10)));
    let long = format!("{}\n", "y".repeat(MAX_LINE));
    let text = format!(
        "{good}garbage\n\n{bad_check}{flipped}{future}{long}\u{0}\u{0}\n{other}{}",
        &good[..good.len() / 2]
    );
    let mut bytes = text.into_bytes();
    bytes.extend_from_slice(b"\xff\xfe\n");
    bytes.extend_from_slice(&good.as_bytes()[..40]); // torn: no line break
    let mut recording = Recording::new();
    recording.add_bytes(&bytes);
    let damage = recording.damage();
    assert_eq!(
        damage,
        Damage {
            torn: 1,
            // garbage, bad check, flipped, NULs, the half record run
            // into the invalid UTF-8 line
            corrupt: 5,
            too_long: 1,
            unknown_version: 1,
            unread_bytes: 0,
        }
    );
    assert_eq!(recording.records(), 2);
    let names: Vec<&str> = recording.entries().map(|u| u.name.as_str()).collect();
    assert_eq!(names.len(), 2);
    assert!(
        names.contains(&"good") && names.contains(&"other"),
        "{names:?}"
    );
}

#[test]
fn reading_stops_at_the_limit_on_a_whole_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.rec");
    let lines: Vec<String> = (0..10).map(|n| record_of(&format!("k{n}"))).collect();
    std::fs::write(&path, lines.concat()).unwrap();
    let limit = (lines[0].len() * 3 + 10) as u64;
    let mut recording = Recording::new();
    recording.read_file(&path, limit).unwrap();
    assert_eq!(recording.len(), 3);
    let damage = recording.damage();
    assert_eq!(damage.torn, 0, "the limit is not a crash");
    let rest: usize = lines[3..].iter().map(String::len).sum();
    assert_eq!(damage.unread_bytes, rest as u64);
}

#[test]
fn merging_recordings_adds_them_up() {
    let mut a = Recording::new();
    a.add_bytes(record_of("x").as_bytes());
    let mut b = Recording::new();
    b.add_bytes(format!("{}{}junk\n", record_of("x"), record_of("y")).as_bytes());
    a.merge(b);
    assert_eq!(a.len(), 2);
    assert_eq!(a.records(), 3);
    assert_eq!(a.damage().corrupt, 1);
    let x = used(&a, "x");
    assert_eq!((x.compiles(), x.hits()), (2, 2));
    assert_eq!(x.compile_time(), Duration::from_nanos(10));
}

#[cfg(unix)]
#[test]
fn only_regular_files_are_opened() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    std::fs::write(&target, b"").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let fifo = dir.path().join("fifo");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    for path in [&link, &fifo, &dir.path().to_path_buf()] {
        let error = Recorder::open(path).unwrap_err();
        assert!(matches!(error, Error::RecordIo { .. }), "{error}");
        let error = Recording::new()
            .read_file(path, DEFAULT_READ_LIMIT)
            .unwrap_err();
        assert!(matches!(error, Error::RecordIo { .. }), "{error}");
    }
    let recorder = Recorder::open(&dir.path().join("new.rec")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(recorder.path())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn threads_record_each_entry_once_and_count_every_hit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.rec");
    let cache = Cache::new();
    cache.record_into(Recorder::open(&path).unwrap()).unwrap();
    const THREADS: usize = 8;
    const KEYS: usize = 50;
    const ROUNDS: usize = 20;
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                for _ in 0..ROUNDS {
                    for n in 0..KEYS {
                        get(&cache, &format!("k{n}"));
                    }
                }
            });
        }
    });
    drop(cache);
    let recording = read(&path);
    assert!(recording.damage().is_clean());
    assert_eq!(recording.len(), KEYS);
    for used in recording.entries() {
        assert_eq!(used.sources.len(), 1, "{used:?}");
        assert_eq!(used.compiles(), 1);
        assert_eq!(used.hits(), (THREADS * ROUNDS) as u64);
    }
}

#[test]
fn hostile_bytes_never_panic_and_never_invent_records() {
    let valid: String = (0..20).map(|n| record_of(&format!("k{n}"))).collect();
    let mut rng = Rng::new(0x5eed);
    for _ in 0..300 {
        let mut bytes = valid.clone().into_bytes();
        for _ in 0..1 + rng.below(8) {
            let at = rng.below(bytes.len());
            match rng.below(3) {
                0 => bytes[at] ^= 1 << rng.below(8),
                1 => bytes.truncate(at),
                _ => {
                    let len = rng.below(64);
                    bytes.splice(at..at, rng.bytes(len)).for_each(drop);
                }
            }
        }
        let mut recording = Recording::new();
        recording.add_bytes(&bytes);
        assert!(recording.records() <= 20);
        for used in recording.entries() {
            assert!(used.name.starts_with('k'), "{used:?}");
        }
    }
}
