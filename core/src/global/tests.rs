//! Unit tests of the global init: images, tiers, `KILN_LOG`, `KILN_RECORD`.

use super::*;
use crate::Tier;
use crate::registry::{ImageSource, TierSetup};
use crate::test_support::leak_aligned;
use crate::{Artifact, ArtifactKind, Compiled, Digest, Key, KeyBuilder, Owner, Source};
use kiln_image::{Image, ImageMeta, Verification};
use std::path::Path;

fn owner() -> Owner {
    Owner::new("test-compiler", "1.0", "test-target", Vec::<String>::new()).unwrap()
}

fn key(name: &str) -> Key {
    KeyBuilder::new("kiln-core global tests", 1)
        .str("name", name)
        .finish()
}

/// An image of one entry per name, each built against definition `ops`
/// at the fingerprint of `v1`, its artifact the name's bytes.
fn image_bytes(names: &[&str]) -> Vec<u8> {
    let cache = Cache::new();
    let before = cache.snapshot();
    for name in names {
        let compiled = Compiled::new(*name)
            .dep("ops", Digest::of(b"v1"))
            .artifact(Artifact {
                kind: ArtifactKind::Object,
                entry_points: vec![(*name).to_owned()],
                bytes: name.as_bytes().to_vec(),
            });
        cache.insert(&owner(), &key(name), compiled);
    }
    cache.delta(&before).to_bytes(ImageMeta::default()).unwrap()
}

fn write(dir: &Path, file: &str, bytes: &[u8]) {
    std::fs::write(dir.join(file), bytes).unwrap();
}

fn image_source(cache: &Cache, name: &str) -> Option<(Source, Vec<u8>)> {
    let hit = cache.lookup(&owner().digest(), &key(name))?;
    let bytes = hit.artifact(&ArtifactKind::Object)?.to_vec();
    Some((hit.source(), bytes))
}

#[test]
fn file_images_merge_in_order_and_bad_ones_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.kimg", &image_bytes(&["x", "y"]));
    write(dir.path(), "b.kimg", b"not an image");
    write(dir.path(), "c.kimg", &image_bytes(&["x", "z"]));
    let missing = dir.path().join("missing");
    let mut settings = Settings::default();
    settings.images.path = vec![missing.clone(), dir.path().to_path_buf()];

    let cache = Cache::new();
    let report = load_images(&cache, &settings, &[]);

    let sources: Vec<String> = report.images().map(|i| i.source.to_string()).collect();
    assert_eq!(
        sources,
        [
            format!("directory {}", missing.display()),
            dir.path().join("a.kimg").display().to_string(),
            dir.path().join("b.kimg").display().to_string(),
            dir.path().join("c.kimg").display().to_string(),
        ]
    );
    let skipped: Vec<&Error> = report.skipped().map(|(_, err)| err).collect();
    assert!(
        matches!(skipped[..], [Error::ImageDirectory { .. }, Error::Image(_)]),
        "{report}"
    );
    let merged: Vec<(u64, u64)> = report
        .merged()
        .map(|(_, m)| (m.inserted, m.duplicate))
        .collect();
    assert_eq!(merged, [(2, 0), (1, 1)], "the first valid entry wins");
    assert_eq!(report.inserted(), 3);
    assert_eq!(cache.image_count(), 2);
    for name in ["x", "y", "z"] {
        assert_eq!(
            image_source(&cache, name),
            Some((Source::Image, name.as_bytes().to_vec()))
        );
    }
    let text = report.to_string();
    assert!(text.contains("b.kimg: skipped:"), "{text}");
}

#[test]
fn disable_merges_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.kimg", &image_bytes(&["x"]));
    let mut settings = Settings::default();
    settings.cache.disable = true;
    settings.images.path = vec![dir.path().to_path_buf()];
    let embedded = EmbeddedImage::new("crate", "a.kimg", leak_aligned(&image_bytes(&["y"])));
    let cache = Cache::new();
    let report = load_images(&cache, &settings, &[Box::leak(Box::new(embedded))]);
    assert!(report.disabled);
    assert_eq!(report.images().count(), 0);
    assert_eq!(cache.image_count(), 0);
    assert_eq!(image_source(&cache, "x"), None);
}

#[test]
fn embedded_images_merge_before_files_checked_or_trusted() {
    let unchecked = leak_aligned(&image_bytes(&["x"]));
    let verified = leak_aligned(&image_bytes(&["y"]));
    Image::from_static(verified, Verification::Full).unwrap();
    let images: Vec<&'static EmbeddedImage> = vec![
        Box::leak(Box::new(EmbeddedImage::new("one", "x.kimg", unchecked))),
        Box::leak(Box::new(EmbeddedImage::new(
            "one",
            "junk.kimg",
            leak_aligned(b"junk"),
        ))),
        // SAFETY: `verified` passed `Verification::Full` just above, the
        // header is its own, and it is never written again.
        Box::leak(Box::new(unsafe {
            EmbeddedImage::verified_at_compile_time(
                "two",
                "y.kimg",
                verified,
                verified.first_chunk().unwrap(),
            )
        })),
    ];
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "z.kimg", &image_bytes(&["z"]));
    let mut settings = Settings::default();
    settings.images.path = vec![dir.path().to_path_buf()];

    let cache = Cache::new();
    let report = load_images(&cache, &settings, &images);
    let outcome: Vec<(String, bool)> = report
        .images()
        .map(|i| {
            (
                i.source.to_string(),
                matches!(i.outcome, ImageOutcome::Merged { .. }),
            )
        })
        .collect();
    assert_eq!(
        outcome,
        [
            ("x.kimg (embedded by one)".to_owned(), true),
            ("junk.kimg (embedded by one)".to_owned(), false),
            ("y.kimg (embedded by two)".to_owned(), true),
            (dir.path().join("z.kimg").display().to_string(), true),
        ]
    );
    for name in ["x", "y", "z"] {
        assert_eq!(
            image_source(&cache, name),
            Some((Source::Image, name.as_bytes().to_vec()))
        );
    }
}

#[test]
fn entries_built_against_another_definition_are_stale() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.kimg", &image_bytes(&["x", "y"]));
    let mut settings = Settings::default();
    settings.images.path = vec![dir.path().to_path_buf()];
    let cache = Cache::new();
    cache.define("ops", Digest::of(b"v2"));
    let report = load_images(&cache, &settings, &[]);
    let merged: Vec<(u64, u64)> = report
        .merged()
        .map(|(_, m)| (m.inserted, m.stale))
        .collect();
    assert_eq!(merged, [(0, 2)]);
    assert_eq!(image_source(&cache, "x"), None);
}

/// The global cache's construction, with `KILN_CACHE*` read from `vars`.
fn cache_with_disk(vars: &[(&str, &Path)]) -> Cache {
    let settings = Settings::from_vars(vars.iter().map(|(k, v)| (*k, v.as_os_str())).collect());
    let cache = new_cache(&settings);
    add_tiers(&cache, &settings);
    cache
}

/// `get_or_compile` of `name`: its source, and whether it compiled.
fn get_or_compile(cache: &Cache, name: &str) -> (Source, bool) {
    let mut compiled = false;
    let hit = cache
        .get_or_compile(&owner(), &key(name), || {
            compiled = true;
            Ok(Compiled::new(name).artifact(Artifact {
                kind: ArtifactKind::Object,
                entry_points: vec![name.to_owned()],
                bytes: name.as_bytes().to_vec(),
            }))
        })
        .unwrap();
    assert_eq!(hit.artifact(&ArtifactKind::Object), Some(name.as_bytes()));
    (hit.source(), compiled)
}

#[test]
fn the_disk_tier_is_opened_on_first_use_and_serves_the_next_process() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("kiln");
    let first = cache_with_disk(&[("KILN_CACHE_DIR", &dir)]);
    assert!(!dir.exists(), "building the cache touched the disk");
    assert_eq!(get_or_compile(&first, "x"), (Source::Memory, true));
    assert!(dir.exists());
    // The store runs on the background writer: wait for it.
    first.flush();

    // A new process with the same directory: a hit from the disk tier.
    let second = cache_with_disk(&[("KILN_CACHE_DIR", &dir)]);
    assert_eq!(get_or_compile(&second, "x"), (Source::Tier, false));
    assert_eq!(second.stats().hits_tier, 1);

    // KILN_CACHE=0: no disk tier, so it compiles again.
    let off = cache_with_disk(&[("KILN_CACHE_DIR", &dir), ("KILN_CACHE", Path::new("0"))]);
    assert_eq!(get_or_compile(&off, "x"), (Source::Memory, true));
}

/// A tier that serves nothing, offered by the factory below when
/// `KILN_TEST_FACTORY_TIER` is set: the way kiln-redis adds its tier.
struct Offered {
    local: Option<String>,
}

impl Tier for Offered {
    fn name(&self) -> &str {
        self.local
            .as_deref()
            .unwrap_or("offered without a local tier")
    }
    fn load_entry(&self, _: &Owner, _: &Key) -> Result<Option<crate::TierEntry>, Error> {
        Ok(None)
    }
    fn store(&self, _: &Owner, _: &kiln_image::EntryData) -> Result<(), Error> {
        Ok(())
    }
}

fn offered(setup: &TierSetup<'_>) -> Option<Box<dyn Tier>> {
    setup.var("KILN_TEST_FACTORY_TIER")?;
    let local = setup
        .local()
        .map(|local| format!("offered, writing through to {}", local.name()));
    Some(Box::new(Offered { local }))
}

inventory::submit! { crate::TierFactory::new("offered", offered) }

#[test]
fn registered_tiers_come_after_the_disk_tier_when_their_variables_say_so() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("kiln");
    let on = Path::new("1");
    let tiers = |vars: &[(&str, &Path)]| {
        let settings = Settings::from_vars(vars.iter().map(|(k, v)| (*k, v.as_os_str())).collect());
        add_tiers(&Cache::new(), &settings)
    };
    assert_eq!(tiers(&[("KILN_CACHE_DIR", &dir)]), ["disk"]);
    assert_eq!(
        tiers(&[("KILN_CACHE_DIR", &dir), ("KILN_TEST_FACTORY_TIER", on)]),
        ["disk", "offered, writing through to disk"]
    );
    assert_eq!(
        tiers(&[
            ("KILN_CACHE", Path::new("0")),
            ("KILN_TEST_FACTORY_TIER", on)
        ]),
        ["offered without a local tier"]
    );
    assert!(!dir.exists(), "adding tiers touched the disk");
}

#[test]
fn kiln_log_without_a_subscriber_prints_problems_or_everything() {
    use std::sync::{Arc, Mutex};
    use stderr_report::{Detail, StderrLog, filter_detail};

    assert_eq!(filter_detail("warn"), Some(Detail::Problems));
    assert_eq!(filter_detail(" ERROR "), Some(Detail::Problems));
    assert_eq!(filter_detail("info"), Some(Detail::Everything));
    assert_eq!(filter_detail("kiln_core=debug"), Some(Detail::Everything));
    assert_eq!(filter_detail("off"), None);
    assert_eq!(stderr_report::detail(None), None);
    assert_eq!(stderr_report::detail(Some("warn")), Some(Detail::Problems));
    // A program with a subscriber gets the events there: kiln prints nothing.
    let subscriber = tracing_subscriber::fmt()
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        assert_eq!(stderr_report::detail(Some("info")), None);
    });

    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.kimg", &image_bytes(&["x", "y"]));
    write(dir.path(), "b.kimg", b"not an image");
    let mut settings = Settings::default();
    settings.images.path = vec![dir.path().to_path_buf()];
    // The lines kiln's own subscriber prints for the events of one load.
    let printed = |detail: Detail| {
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = Arc::clone(&lines);
        let log = StderrLog::with_sink(
            detail,
            Box::new(move |line| sink.lock().unwrap().push(line.to_owned())),
        );
        tracing::subscriber::with_default(log, || {
            let cache = Cache::new();
            cache.define("ops", Digest::of(b"v2"));
            load_images(&cache, &settings, &[]);
            // Not kiln's: never printed.
            tracing::warn!(target: "other_crate", "not kiln's");
        });
        lines.lock().unwrap().clone()
    };

    let problems = printed(Detail::Problems);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems[0].starts_with("kiln: kiln image entries skipped as stale")
            && problems[0].contains("a.kimg")
            && problems[0].contains("stale=2"),
        "{problems:#?}"
    );
    assert!(
        problems[1].starts_with("kiln: skipped kiln image: ") && problems[1].contains("b.kimg"),
        "{problems:#?}"
    );

    let everything = printed(Detail::Everything);
    assert_eq!(everything.len(), 3, "{everything:#?}");
    assert!(
        everything[0].starts_with("kiln: merged kiln image (image=")
            && everything[0].contains("a.kimg")
            && everything[0].contains("entries=2"),
        "{everything:#?}"
    );
    assert_eq!(everything[1..], problems[..]);
}

#[test]
fn kiln_record_records_into_a_file_and_an_unusable_one_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = new_cache(&Settings::default());
    record_into(&cache, dir.path());
    assert!(cache.recorder().is_none(), "a directory is no record file");
    let path = dir.path().join("app.rec");
    record_into(&cache, &path);
    assert_eq!(cache.recorder().map(|r| r.path()), Some(path.as_path()));
    get_or_compile(&cache, "x");
    drop(cache);
    let mut recording = crate::record::Recording::new();
    recording
        .read_file(&path, crate::record::DEFAULT_READ_LIMIT)
        .unwrap();
    assert_eq!(recording.len(), 1);
}

#[test]
fn always_compile_reaches_the_cache_config() {
    let mut on = Settings::default();
    on.cache.always_compile = true;
    assert!(new_cache(&on).config().always_compile);
    assert!(!new_cache(&Settings::default()).config().always_compile);
}

#[test]
fn the_global_init_runs_once() {
    global();
    let first = init();
    assert!(std::ptr::eq(first, init()));
    assert!(matches!(
        init_with(|_| panic!("setup must not run")),
        Err(Error::AlreadyInitialized)
    ));
    // The registry's tests register three embedded images that are not
    // images: the init skips them and goes on.
    let skipped_embedded = first
        .skipped()
        .filter(|(source, _)| matches!(source, ImageSource::Embedded { .. }))
        .count();
    assert_eq!(skipped_embedded, 3, "{first}");
    assert_eq!(global().image_count(), first.merged().count());
}
