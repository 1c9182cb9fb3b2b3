//! Child processes that are the current test binary run again: a test that
//! needs several processes (a second run starting warm, concurrent writers,
//! a process killed mid-write) starts copies of its own binary, each running
//! only the ignored test [`TEST`] in a role named by an environment
//! variable, and reads what they print.
//!
//! The test file declares the child's entry point, an ignored test named
//! `child` at the top of the test binary (`--exact child` matches no test
//! inside a module) that does nothing unless the role variable is set, and
//! its other tests start it:
//!
//! ```no_run
//! use kiln_test_support::child;
//!
//! const ROLE: &str = "MY_TESTS_ROLE";
//! let stdout = child::run(child::command(ROLE, "compile").env("MY_TESTS_KEYS", "40"));
//! let fields = child::result_line(&stdout).expect("a RESULT line");
//! ```
//!
//! Which variables a role reads and what it prints stay with the test; by
//! convention the outcome is a line `RESULT name=value ...`, found by
//! [`result_line`].

use std::process::{Child, Command, Output, Stdio};

/// The name of the ignored test a child process runs.
pub const TEST: &str = "child";

/// This test binary, set to run only the ignored test [`TEST`] (exactly
/// that name, on one thread, its output not captured) with `role_var=role`
/// in its environment and no stdin. Add the role's own variables, then
/// [`run`] it, or pipe its output, spawn it and [`wait`] for it.
pub fn command(role_var: &str, role: &str) -> Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new(exe);
    command
        .args([
            "--ignored",
            "--exact",
            TEST,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(role_var, role)
        .stdin(Stdio::null());
    command
}

/// Runs `command` to completion, asserts that it succeeded, and returns its
/// stdout (stdout and stderr are captured unless `command` says otherwise).
#[track_caller]
pub fn run(command: &mut Command) -> String {
    succeeded(command.output().expect("the child starts"))
}

/// Waits for `child` to exit, asserts that it succeeded, and returns its
/// stdout. Pipe the child's stdout (and stderr, for the failure message)
/// before spawning it, or there is nothing to return.
#[track_caller]
pub fn wait(child: Child) -> String {
    succeeded(child.wait_with_output().expect("the child runs"))
}

/// The text after `RESULT ` on the last line that has it, or `None`.
/// The marker need not start the line: libtest may already have printed
/// `test child ... ` on it.
pub fn result_line(stdout: &str) -> Option<&str> {
    stdout
        .lines()
        .rev()
        .find_map(|line| Some(&line[line.find("RESULT ")? + "RESULT ".len()..]))
}

/// `output`'s stdout, after asserting that the process succeeded (the
/// failure message shows the status, stdout and stderr).
#[track_caller]
fn succeeded(output: Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "child failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[cfg(test)]
mod tests {
    use super::result_line;

    #[test]
    fn the_last_result_line_counts_wherever_it_starts() {
        let stdout = "RESULT a=1\ntest child ... RESULT b=2 c=3\nok\n";
        assert_eq!(result_line(stdout), Some("b=2 c=3"));
        assert_eq!(result_line("no result\n"), None);
    }
}
