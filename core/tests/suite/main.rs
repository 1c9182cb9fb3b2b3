//! kiln-core's integration tests, one test binary (each file a module, as
//! cargo's own `tests/testsuite`): one link of the dependencies instead of
//! one per file. Tests are named `module::test`, e.g.
//! `cargo test -p kiln-core --all-features --test suite disk_store::`.
//!
//! `cache_*` check the cache's invariants (ARCHITECTURE.md, tests named
//! `invariantN_*` after the invariant they check), `disk_*` the disk tier,
//! `record_processes` `KILN_RECORD` across processes, `trust_*` signed
//! images and disk segments under trusted keys.
//! Tests that need several processes re-run this binary as a child running
//! the ignored test [`child`] (see `kiln_test_support::child`).

mod cache_support;
mod disk_support;

mod cache_background;
mod cache_bad_input;
mod cache_concurrency;
mod cache_determinism;
mod cache_hit;
mod cache_invalidation;
mod cache_keys;
mod cache_memory;
mod cache_merge;
mod cache_revalidation;
mod cache_snapshot_delta;
mod cache_tiers;
mod cache_zero_copy;
mod disk_evict;
mod disk_global;
mod disk_hostile;
mod disk_open;
mod disk_process;
mod disk_readonly;
#[cfg(unix)]
mod disk_second_user;
mod disk_store;
mod hit_alignment;
mod record_processes;
mod trust_disk;
mod trust_images;

/// The child process of the tests that need several: this binary re-run
/// with `--ignored --exact child` and a role variable set. Each module's
/// role runs only when its own variable is set (`KILN_DISK_TEST_ROLE` for
/// `disk_process` and `disk_readonly`, `KILN_DISK_GLOBAL_ROLE` for
/// `disk_global`, `KILN_RECORD_TESTS_ROLE` for `record_processes`,
/// `KILN_CACHE_BACKGROUND_ROLE` for `cache_background`,
/// `KILN_TRUST_IMAGES_ROLE` for `trust_images`), so in a normal run
/// this test does nothing.
#[test]
#[ignore = "helper: run in a child process by the other tests"]
fn child() {
    disk_support::run_child_role();
    #[cfg(target_os = "linux")]
    disk_global::run_child_role();
    record_processes::run_child_role();
    cache_background::run_child_role();
    trust_images::run_child_role();
}
