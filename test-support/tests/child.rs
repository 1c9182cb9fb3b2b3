//! `kiln_test_support::child` run for real: this binary starts itself again
//! to run its ignored test `child` in a role, as the disk and remote tests
//! of kiln-core do. (The child test must sit at the top of a test binary:
//! `--exact child` matches no test inside a module.)

use std::process::Stdio;

use kiln_test_support::child;

/// The role variable of this binary's child test.
const ROLE: &str = "KILN_TEST_SUPPORT_ROLE";

#[test]
#[ignore = "helper: run in a child process by the other tests"]
fn child() {
    match std::env::var(ROLE).as_deref() {
        Ok("echo") => println!("RESULT role=echo value={}", std::env::var("VALUE").unwrap()),
        Ok("fail") => panic!("asked to fail"),
        _ => {} // not a child: nothing to do
    }
}

#[test]
fn a_child_runs_the_ignored_test_in_its_role() {
    let stdout = child::run(child::command(ROLE, "echo").env("VALUE", "7"));
    assert_eq!(
        child::result_line(&stdout),
        Some("role=echo value=7"),
        "{stdout}"
    );
}

#[test]
fn a_spawned_child_is_waited_for() {
    let spawned = child::command(ROLE, "echo")
        .env("VALUE", "8")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the child starts");
    let stdout = child::wait(spawned);
    assert_eq!(child::result_line(&stdout), Some("role=echo value=8"));
}

#[test]
#[should_panic(expected = "child failed")]
fn a_failed_child_fails_the_parent() {
    child::run(&mut child::command(ROLE, "fail"));
}
