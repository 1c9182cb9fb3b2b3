//! Checks on error types: an error prints its cause in its message or returns
//! it from `source()`, never both.

use std::error::Error;

/// Asserts that no message in `error`'s chain contains the text of the cause
/// after it (an error either prints its cause or returns it from `source()`,
/// never both), and that `error` has a cause: a sample built to check this
/// must carry one. Returns the length of the chain below `error`.
///
/// ```
/// use kiln_test_support::errors::assert_cause_not_repeated;
///
/// #[derive(Debug)]
/// struct Outer(std::io::Error);
/// impl std::fmt::Display for Outer {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         write!(f, "reading the file failed")
///     }
/// }
/// impl std::error::Error for Outer {
///     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
///         Some(&self.0)
///     }
/// }
/// let error = Outer(std::io::Error::other("disk on fire"));
/// assert_eq!(assert_cause_not_repeated(&error), 1);
/// ```
///
/// # Panics
/// When `error` has no cause, or a message repeats its cause's text.
pub fn assert_cause_not_repeated(error: &(dyn Error + 'static)) -> usize {
    let mut current = error;
    let mut depth = 0;
    while let Some(cause) = current.source() {
        let (message, repeated) = (current.to_string(), cause.to_string());
        assert!(
            repeated.is_empty() || !message.contains(&repeated),
            "{current:?}: its message {message:?} repeats the text of its source {repeated:?}; \
             print the cause or return it from source(), not both"
        );
        current = cause;
        depth += 1;
    }
    assert!(
        depth > 0,
        "{error:?} has no source: build the sample with a cause"
    );
    depth
}
