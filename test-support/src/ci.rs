//! The rule for tests that need something this machine may lack (NVRTC, a
//! `redis-server`): skip with a message on a developer's machine, fail in CI,
//! so that CI never counts a test that checked nothing as passed.

/// Whether this is a CI run: `CI` is set to anything but empty, `0` or
/// `false` (CI services set `CI=true`).
pub fn in_ci() -> bool {
    ci_value_means_ci(std::env::var("CI").ok().as_deref())
}

fn ci_value_means_ci(value: Option<&str>) -> bool {
    value.is_some_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// `found`'s value; or, when it is an error, a panic in CI (naming `what`
/// and the error) and elsewhere `None` after printing that the test checked
/// nothing.
///
/// ```
/// let found: Result<u32, String> = Ok(3);
/// assert_eq!(kiln_test_support::ci::required(found, "the answer"), Some(3));
/// ```
pub fn required<T, E: std::fmt::Display>(found: Result<T, E>, what: &str) -> Option<T> {
    match found {
        Ok(value) => Some(value),
        Err(error) => {
            let why = format!("{what} is not available: {error}");
            assert!(!in_ci(), "{why}; in CI it is required");
            eprintln!("SKIPPED: {why}; this test checked nothing");
            None
        }
    }
}

/// `strace`, from `/usr/bin` or `/bin`, through [`required`] (scripts/test.sh
/// installs it).
pub fn strace() -> Option<std::path::PathBuf> {
    let found = ["/usr/bin/strace", "/bin/strace"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|path| path.is_file())
        .ok_or("not in /usr/bin or /bin");
    required(found, "strace (scripts/test.sh installs it)")
}

#[cfg(test)]
mod tests {
    use super::ci_value_means_ci;

    #[test]
    fn ci_is_any_value_but_empty_zero_or_false() {
        for yes in ["true", "1", "yes", " true "] {
            assert!(ci_value_means_ci(Some(yes)), "{yes:?}");
        }
        for no in [None, Some(""), Some("0"), Some("false"), Some(" ")] {
            assert!(!ci_value_means_ci(no), "{no:?}");
        }
    }
}
