//! Whether the server is worth asking: after a failure the tier backs off
//! for a while, and an outage is reported once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::Error;

/// The server's state as the tier last saw it.
#[derive(Debug)]
pub(super) struct Health {
    backoff: Duration,
    state: Mutex<State>,
    /// A refused command was reported (once per tier).
    refusal_reported: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    /// While `Some(t)` and now < t, do not ask the server.
    retry_at: Option<Instant>,
    /// The last operation failed (the outage was reported).
    failing: bool,
}

impl Health {
    pub(super) fn new(backoff: Duration) -> Health {
        Health {
            backoff,
            state: Mutex::new(State::default()),
            refusal_reported: AtomicBool::new(false),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether an operation may go to the server now.
    pub(super) fn may_try(&self) -> bool {
        self.state()
            .retry_at
            .is_none_or(|retry_at| Instant::now() >= retry_at)
    }

    /// An operation succeeded: the outage, if any, is over.
    pub(super) fn succeeded(&self, server: &str) {
        let mut state = self.state();
        if state.failing {
            tracing::info!(server, "remote cache reachable again");
        }
        *state = State::default();
    }

    /// An operation failed: back off, and warn if this starts an outage
    /// (later failures of the same outage are only debug messages).
    pub(super) fn failed(&self, error: &Error) {
        let mut state = self.state();
        state.retry_at = Some(Instant::now() + self.backoff);
        if state.failing {
            tracing::debug!(%error, "remote cache still failing");
        } else {
            state.failing = true;
            tracing::warn!(
                error = %kiln_core::ErrorChain(error),
                backoff_s = self.backoff.as_secs_f64(),
                "remote cache unavailable: compiling locally; retrying after the back-off"
            );
        }
    }

    /// The server refused one command (an error reply, e.g. `WRONGTYPE`
    /// or `OOM`): a fast answer about one key or one write, not an outage,
    /// so no back-off; reported once.
    pub(super) fn refused(&self, error: &Error) {
        if self.refusal_reported.swap(true, Ordering::Relaxed) {
            tracing::debug!(%error, "remote cache refused a command");
        } else {
            tracing::warn!(error = %kiln_core::ErrorChain(error), "remote cache refused a command: compiling locally");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> Error {
        Error::RemoteTimeout { value: "x".into() }
    }

    #[test]
    fn backs_off_after_a_failure_until_the_time_is_up() {
        let health = Health::new(Duration::from_secs(3600));
        assert!(health.may_try());
        health.failed(&failure());
        assert!(!health.may_try());
        health.succeeded("s");
        assert!(health.may_try());
    }

    #[test]
    fn a_zero_backoff_retries_at_once() {
        let health = Health::new(Duration::ZERO);
        health.failed(&failure());
        assert!(health.may_try());
    }
}
