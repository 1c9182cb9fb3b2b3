use std::path::PathBuf;

use super::*;
use crate::env::{ALWAYS_COMPILE, DISABLE, IMAGE_PATH, LOG, MEMORY_MAX_BYTES, RECORD};

fn settings(vars: &[(&str, &str)]) -> Settings {
    Settings::from_vars(vars.iter().copied().collect())
}

#[test]
fn nothing_set_means_every_switch_at_its_default() {
    let s = settings(&[]);
    assert_eq!(s.cache, CacheSettings::default());
    assert!(!s.cache.disable && !s.cache.always_compile);
    assert_eq!(
        s.cache.memory_max_bytes,
        Some(crate::cache::DEFAULT_MEMORY_MAX_BYTES)
    );
    assert!(s.images.path.is_empty());
    assert_eq!(
        s.embedding().ok(),
        Some(Embedding::Compressed {
            level: crate::env::DEFAULT_EMBED_LEVEL
        })
    );
    assert_eq!(s.record, None);
    assert_eq!(s.build, BuildSettings::default());
    assert_eq!(s.trust, TrustPolicy::default());
    assert!(
        s.effective()
            .iter()
            .all(|(_, e)| e.source == Source::Default)
    );
}

#[test]
fn boolean_values_off_and_on() {
    for off in [
        "", "0", "false", "FALSE", "no", "Off", " 0 ", "2", "disabled",
    ] {
        assert!(
            !settings(&[(DISABLE, off)]).cache.disable,
            "{off:?} should be off"
        );
    }
    for on in ["1", "true", "yes", "on", " YES "] {
        let s = settings(&[(DISABLE, on), (ALWAYS_COMPILE, on)]);
        assert!(
            s.cache.disable && s.cache.always_compile,
            "{on:?} should be on"
        );
    }
}

#[cfg(unix)]
#[test]
fn image_path_splits_like_path_and_drops_empty_parts() {
    let s = settings(&[(IMAGE_PATH, "/a/b::/c")]);
    assert_eq!(s.images.path, [PathBuf::from("/a/b"), PathBuf::from("/c")]);
}

#[test]
fn record_names_a_file_and_empty_means_unset() {
    assert_eq!(
        settings(&[(RECORD, "/tmp/app.rec")]).record,
        Some(PathBuf::from("/tmp/app.rec"))
    );
    assert_eq!(settings(&[(RECORD, "")]).record, None);
    assert!(is_run_time(RECORD));
}

#[test]
fn memory_cap_takes_sizes_and_off() {
    let cap = |value: &str| {
        settings(&[(MEMORY_MAX_BYTES, value)])
            .cache
            .memory_max_bytes
    };
    let default = Some(crate::cache::DEFAULT_MEMORY_MAX_BYTES);
    assert_eq!(cap("4M"), Some(4 << 20));
    assert_eq!(cap(" 512k "), Some(512 << 10));
    assert_eq!(cap("123"), Some(123));
    assert_eq!(cap("2G"), Some(2 << 30));
    for off in ["off", "NONE", "unlimited"] {
        assert_eq!(cap(off), None, "{off}");
    }
    for unusable in ["", "lots", "1.5G", "-3"] {
        assert_eq!(cap(unusable), default, "{unusable:?}");
    }
}

#[test]
fn log_filter_is_trimmed_and_empty_means_unset() {
    assert_eq!(
        settings(&[(LOG, " info ")]).cache.log.as_deref(),
        Some("info")
    );
    assert_eq!(settings(&[(LOG, "  ")]).cache.log, None);
}

#[test]
fn the_disk_section_is_off_placed_capped_and_refused_as_the_variables_say() {
    use crate::disk::config::{CACHE, CACHE_DIR, CACHE_MAX_BYTES, CACHE_TRUST_DIR};
    assert_eq!(settings(&[(CACHE, "0")]).disk().ok(), Some(None));
    let s = settings(&[
        (CACHE_DIR, "/srv/kiln"),
        (CACHE_MAX_BYTES, "2M"),
        (CACHE_TRUST_DIR, "1"),
    ]);
    let config = s
        .disk()
        .ok()
        .flatten()
        .map(|c| (c.dir, c.max_bytes, c.trust_dir));
    assert_eq!(config, Some((PathBuf::from("/srv/kiln"), 2 << 20, true)));
    let error = settings(&[(CACHE_DIR, "/srv/kiln"), (CACHE_MAX_BYTES, "lots")]).disk();
    assert!(
        matches!(&error, Err(crate::Error::DiskSize { value, .. }) if value == "lots"),
        "{error:?}"
    );
}

#[test]
fn the_build_section_and_the_embedding() {
    use crate::env::{BUILD_UNVERIFIED, EMBED, IGNORE_SHIPPED, SHIP_CANDIDATE};
    let s = settings(&[
        (IGNORE_SHIPPED, "1"),
        (SHIP_CANDIDATE, "yes"),
        (BUILD_UNVERIFIED, "on"),
    ]);
    assert!(s.build.ignore_shipped && s.build.ship_candidate && s.build.build_unverified);
    assert_eq!(
        settings(&[(EMBED, "plain")]).embedding().ok(),
        Some(Embedding::Plain)
    );
    let error = settings(&[(EMBED, "plane")])
        .embedding()
        .err()
        .map(|e| e.to_string());
    assert!(error.is_some_and(|e| e.contains("KILN_EMBED") && e.contains("plane")));
}

#[derive(Debug)]
struct Counted(usize);

static PARSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Section for Counted {
    fn parse(settings: &Settings) -> Counted {
        PARSES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Counted(settings.var("KILN_TEST_SECTION").map_or(0, |v| v.len()))
    }
}

#[test]
fn a_registered_section_is_parsed_once_from_the_same_reading() {
    let s = settings(&[("KILN_TEST_SECTION", "abc")]);
    let before = PARSES.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(s.section::<Counted>().0, 3);
    assert_eq!(s.clone().section::<Counted>().0, 3);
    assert_eq!(PARSES.load(std::sync::atomic::Ordering::SeqCst), before + 1);
    // Another reading parses its own.
    assert_eq!(
        s.with_var("KILN_TEST_SECTION", "z").section::<Counted>().0,
        1
    );
}

#[test]
fn with_var_parses_again_and_keeps_the_trust_policy() {
    let s = settings(&[(DISABLE, "1")]);
    let changed = s.with_var(DISABLE, "0").with_var(LOG, "info");
    assert!(!changed.cache.disable);
    assert_eq!(changed.cache.log.as_deref(), Some("info"));
    assert!(s.cache.disable, "the original is unchanged");
    assert!(!s.without_var(DISABLE).cache.disable);
}

#[test]
fn effective_values_say_where_they_came_from() {
    let s = settings(&[
        (DISABLE, "yes"),
        (ALWAYS_COMPILE, "maybe"),
        (MEMORY_MAX_BYTES, "off"),
        (crate::env::EMBED, "plain"),
    ]);
    let effective: std::collections::BTreeMap<&str, Effective> = s
        .effective()
        .into_iter()
        .map(|(switch, effective)| (switch.name(), effective))
        .collect();
    let of = |name: &str| effective.get(name).cloned().map(|e| (e.value, e.source));
    assert_eq!(of(DISABLE), Some(("on".to_owned(), Source::Variable)));
    assert_eq!(
        of(ALWAYS_COMPILE),
        Some(("off".to_owned(), Source::Ignored("maybe".to_owned())))
    );
    assert_eq!(
        of(MEMORY_MAX_BYTES),
        Some(("off".to_owned(), Source::Variable))
    );
    assert_eq!(
        of(crate::env::EMBED),
        Some(("plain".to_owned(), Source::Variable))
    );
    assert_eq!(of(LOG), Some(("unset".to_owned(), Source::Default)));
}

#[test]
fn the_trusted_keys_come_from_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let key = kiln_image::SigningKey::from_secret_bytes([7; 32]).public_key();
    let file = dir.path().join("keys.pub");
    std::fs::write(&file, format!("{key}\n")).unwrap();
    let s = settings(&[(crate::trust::TRUSTED_KEYS, file.to_str().unwrap())]);
    assert!(
        s.trust
            .trusted_keys
            .as_ref()
            .is_some_and(|keys| keys.contains(&key))
    );
    let (_, effective) = s
        .effective()
        .into_iter()
        .find(|(switch, _)| switch.name() == crate::trust::TRUSTED_KEYS)
        .unwrap();
    assert_eq!(effective.source, Source::File);
    assert!(
        effective.value.starts_with("1 trusted keys"),
        "{effective:?}"
    );
}

#[test]
fn core_switches_are_declared_once_with_a_doc_line_and_their_phase() {
    let all = switches();
    for name in [
        DISABLE,
        ALWAYS_COMPILE,
        IMAGE_PATH,
        LOG,
        RECORD,
        MEMORY_MAX_BYTES,
    ] {
        let found: Vec<_> = all.iter().filter(|s| s.name() == name).collect();
        assert_eq!(found.len(), 1, "{name}");
        assert!(!found[0].doc_line().is_empty(), "{name}");
        assert!(is_run_time(name), "{name}");
    }
    for build_time in [
        crate::trust::TRUSTED_KEYS,
        crate::trust::SIGNING_KEY,
        crate::disk::config::CACHE_TRUST_DIR,
        crate::env::BUILD_UNVERIFIED,
        crate::env::EMBED,
    ] {
        assert!(!is_run_time(build_time), "{build_time}");
    }
    for run_time in [
        crate::trust::REMOTE_WRITE,
        crate::disk::config::CACHE,
        crate::disk::config::CACHE_DIR,
        crate::disk::config::CACHE_MAX_BYTES,
        "KILN_REMOTE_CACHE",
        "KILN_REMOTE_TIMEOUT_MS",
    ] {
        assert!(is_run_time(run_time), "{run_time}");
    }
    let table = markdown_table();
    assert!(
        table.contains("| `KILN_DISABLE` | off | run time |"),
        "{table}"
    );
}

#[test]
fn a_url_password_and_the_other_variables_never_show() {
    let s = settings(&[
        ("KILN_TEST_URL", "redis://alice:secret@cache:6379/2"),
        ("OTHER_TOKEN", "hunter2"),
    ]);
    assert_eq!(
        switches::without_password("redis://alice:secret@cache:6379/2"),
        "redis://alice:***@cache:6379/2"
    );
    assert_eq!(
        switches::without_password("rediss://:pw@h/0"),
        "rediss://:***@h/0"
    );
    assert_eq!(
        switches::without_password("redis://h:1/a@b"),
        "redis://h:1/a@b"
    );
    assert_eq!(
        switches::without_password("redis://alice@h"),
        "redis://alice@h"
    );
    let shown = format!("{s:?}");
    assert!(
        !shown.contains("secret") && !shown.contains("hunter2"),
        "{shown}"
    );
    assert!(shown.contains("OTHER_TOKEN"), "{shown}");
}
