//! What runs when the process exits normally: kiln's one `atexit` hook
//! (Unix). The global cache is a static that is never dropped, so without
//! it a short program would lose what is still pending when `main`
//! returns. The hook runs, in this order:
//!
//! 1. [`Stage::Stores`]: the global cache's background writer drains its
//!    queue (bounded: registered by `global/`, see `cache/background.rs`),
//!    so that compiles reach the disk and remote tiers;
//! 2. [`Stage::RecordHits`]: live recorders (`KILN_RECORD`) write their
//!    pending hit counts;
//! 3. [`Stage::RecencyStamps`]: live disk caches append their pending
//!    recency stamps, after the stores (a store may publish a segment whose
//!    entries the stamps then cover, or compact the directory);
//! 4. the hooks given to [`then`]: the global cache's `KILN_LOG` report,
//!    which can then count every store.
//!
//! Each registration of an object is weak: what was dropped meanwhile did
//! its work on drop and is skipped. The hook never blocks on a lock a thread may still
//! hold at exit, and never unwinds.

use std::sync::{Mutex, Once, PoisonError, Weak};

/// Something with work to do at normal exit.
#[cfg_attr(
    not(any(feature = "disk", feature = "record")),
    allow(dead_code, reason = "the disk tier and the recorder register objects")
)]
pub(crate) trait AtExit: Send + Sync {
    /// Does it; never blocks without bound (locks are only tried, waits
    /// are bounded).
    fn at_exit(&self);
}

/// When, in the exit hook, a registration runs (in declaration order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    not(all(feature = "disk", feature = "record")),
    allow(dead_code, reason = "each stage is used when its part is compiled")
)]
pub(crate) enum Stage {
    /// Background writers drain their store queues.
    Stores,
    /// Recorders write their pending hit counts.
    RecordHits,
    /// Disk caches append their recency stamps.
    RecencyStamps,
}

const STAGES: usize = 3;

/// One registration in a stage.
#[cfg_attr(
    not(any(feature = "disk", feature = "record")),
    allow(dead_code, reason = "the disk tier and the recorder register objects")
)]
enum Hook {
    /// An object, while it is alive.
    Item(Weak<dyn AtExit>),
    /// A function (for what lives in a static).
    Call(fn()),
}

impl Hook {
    fn alive(&self) -> bool {
        match self {
            Hook::Item(weak) => weak.strong_count() > 0,
            Hook::Call(_) => true,
        }
    }

    fn run(&self) {
        match self {
            Hook::Item(weak) => {
                if let Some(item) = weak.upgrade() {
                    item.at_exit();
                }
            }
            Hook::Call(call) => call(),
        }
    }
}

struct Hooks {
    stages: [Vec<Hook>; STAGES],
    then: Vec<fn()>,
}

static HOOKS: Mutex<Hooks> = Mutex::new(Hooks {
    stages: [Vec::new(), Vec::new(), Vec::new()],
    then: Vec::new(),
});

fn hooks() -> std::sync::MutexGuard<'static, Hooks> {
    HOOKS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `item`'s [`AtExit::at_exit`] at exit, in `stage`, while it is
/// alive.
#[cfg_attr(
    not(any(feature = "disk", feature = "record")),
    allow(dead_code, reason = "the disk tier and the recorder register objects")
)]
pub(crate) fn register(stage: Stage, item: Weak<dyn AtExit>) {
    push(stage, Hook::Item(item));
}

/// Runs `call` at exit, in `stage`.
pub(crate) fn register_call(stage: Stage, call: fn()) {
    push(stage, Hook::Call(call));
}

fn push(stage: Stage, hook: Hook) {
    install();
    let mut hooks = hooks();
    let list = &mut hooks.stages[stage as usize];
    list.retain(Hook::alive);
    list.push(hook);
}

/// Runs `hook` at exit, after every stage.
pub(crate) fn then(hook: fn()) {
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
            tracing::debug!(
                "atexit failed: queued stores, hit counts and recency stamps are written on drop only"
            );
        }
    });
}

#[cfg(not(unix))]
fn install() {}

/// The exit hook. Takes the registrations out first, so that nothing
/// registered meanwhile (or a lock held by a thread still running) can
/// block it.
#[cfg(unix)]
extern "C" fn run() {
    let _ = std::panic::catch_unwind(|| {
        let (stages, then) = {
            let Ok(mut hooks) = HOOKS.try_lock() else {
                return;
            };
            (
                std::mem::take(&mut hooks.stages),
                std::mem::take(&mut hooks.then),
            )
        };
        for stage in stages {
            for hook in &stage {
                hook.run();
            }
        }
        for hook in then {
            hook();
        }
    });
}
