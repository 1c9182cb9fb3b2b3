//! What runs when the process exits normally (Unix: one `atexit` hook):
//! the background writers of live caches drain their queues, then the
//! hooks registered with [`at_exit`] run (the global cache's `KILN_LOG`
//! report). The global cache is a static that is never dropped, so without
//! this a short program would lose the stores still queued when `main`
//! returns.

use std::sync::{Mutex, Once, PoisonError, Weak};

/// What drains at exit: a cache's background writer (`cache/background.rs`
/// implements it, so this module names no cache type).
pub(crate) trait FlushAtExit: Send + Sync {
    /// Runs what is queued, bounded in time.
    fn flush_at_exit(&self);
}

struct Hooks {
    queues: Vec<Weak<dyn FlushAtExit>>,
    then: Vec<fn()>,
}

static HOOKS: Mutex<Hooks> = Mutex::new(Hooks {
    queues: Vec::new(),
    then: Vec::new(),
});

fn hooks() -> std::sync::MutexGuard<'static, Hooks> {
    HOOKS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Flushes `queue` at exit while it is alive.
pub(crate) fn flush_at_exit(queue: Weak<dyn FlushAtExit>) {
    install();
    let mut hooks = hooks();
    hooks.queues.retain(|weak| weak.strong_count() > 0);
    hooks.queues.push(queue);
}

/// Runs `hook` at exit, after the queues are flushed.
pub(crate) fn at_exit(hook: fn()) {
    install();
    hooks().then.push(hook);
}

#[cfg(unix)]
fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: `atexit` only records the address of `run`, a function
        // with the C ABI and no arguments that lives for the whole program
        // and never unwinds (it catches panics); it is called at most once,
        // at normal exit.
        let failed = unsafe { libc::atexit(run) } != 0;
        if failed {
            tracing::debug!("atexit failed: queued cache stores are flushed on drop only");
        }
    });
}

#[cfg(not(unix))]
fn install() {}

/// The exit hook. Takes the hooks out first, so that nothing registered
/// meanwhile (or a lock held by a thread still running) can block it.
#[cfg(unix)]
extern "C" fn run() {
    let _ = std::panic::catch_unwind(|| {
        let (queues, then) = {
            let Ok(mut hooks) = HOOKS.try_lock() else {
                return;
            };
            (
                std::mem::take(&mut hooks.queues),
                std::mem::take(&mut hooks.then),
            )
        };
        for queue in queues.iter().filter_map(Weak::upgrade) {
            queue.flush_at_exit();
        }
        for hook in then {
            hook();
        }
    });
}
