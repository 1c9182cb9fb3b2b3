//! kiln-redis's integration tests, one test binary (each file a module):
//! one link of the dependencies instead of one per file. Tests are named
//! `module::test`, e.g.
//! `cargo test -p kiln-redis --all-features --test suite remote_hostile::`.
//!
//! They run against real loopback `redis-server`s (`remote_support`), and
//! `remote_hostile` against a deliberately hostile fake server. Tests that
//! need several processes re-run this binary as a child running the ignored
//! test [`child`] (see `kiln_test_support::child`).

mod remote_support;

mod remote_corrupt;
mod remote_failure;
mod remote_global;
mod remote_hostile;
mod remote_provenance;
mod remote_security;
mod remote_share;
mod remote_signed;

/// The child process of the tests that need several: this binary re-run
/// with `--ignored --exact child` and a role variable set. Each role runs
/// only when its own variable is set (`KILN_REMOTE_TEST_ROLE` for
/// `remote_support`'s roles, `KILN_REMOTE_GLOBAL_ROLE` for `remote_global`,
/// `KILN_SIGNED_TEST_ROLE` for `remote_signed`,
/// `KILN_PROVENANCE_TEST_ROLE` for `remote_provenance`),
/// so in a normal run this test does nothing.
#[test]
#[ignore = "helper: run in a child process by the other tests"]
fn child() {
    remote_support::run_child_role();
    remote_global::run_child_role();
    remote_signed::run_child_role();
    remote_provenance::run_child_role();
}
