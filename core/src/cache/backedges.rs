//! [`Backedges`]: definition name -> the in-memory entries built from it.
//!
//! The backedge map holds weak references: an entry the cache has let go
//! of (evicted) is still closed while a hit, a queued store or a delta
//! holds it, and costs nothing once nobody does. Dead references are swept
//! out whenever the map has doubled since the last sweep, so the map holds
//! at most about twice the references of the entries alive (amortized
//! O(1) per record).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use super::instance::Instance;

/// The fewest references between two sweeps of [`Backedges`].
const SWEEP_MIN: usize = 64;

/// Definition name -> the entries alive that depend on it (writer lock only).
#[derive(Default)]
pub(crate) struct Backedges {
    by_name: HashMap<String, Vec<Weak<Instance>>>,
    /// References held (dead ones included).
    held: usize,
    /// References held after the last sweep.
    swept: usize,
}

impl Backedges {
    /// Notes that `instance` depends on each of its deps.
    pub(crate) fn add(&mut self, instance: &Arc<Instance>) {
        for dep in &instance.deps {
            self.by_name
                .entry(dep.name.clone())
                .or_default()
                .push(Arc::downgrade(instance));
            self.held += 1;
        }
        if self.held > 2 * self.swept.max(SWEEP_MIN) {
            self.sweep();
        }
    }

    /// Drops the references to entries gone, and names left without any.
    fn sweep(&mut self) {
        self.by_name.retain(|_, list| {
            list.retain(|weak| weak.strong_count() > 0);
            !list.is_empty()
        });
        self.held = self.by_name.values().map(Vec::len).sum();
        self.swept = self.held;
    }

    /// The entries alive that depend on `name`.
    pub(crate) fn dependents(&self, name: &str) -> impl Iterator<Item = Arc<Instance>> + '_ {
        self.by_name
            .get(name)
            .into_iter()
            .flatten()
            .filter_map(Weak::upgrade)
    }

    /// References held (dead ones included).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use crate::{Cache, CacheConfig, Compiled, Digest, KeyBuilder, Owner};

    #[test]
    fn backedges_of_entries_gone_are_swept() {
        let cache = Cache::with_config(
            CacheConfig::default()
                .memory_max_bytes(None)
                .memory_max_entries(Some(4)),
        );
        let owner = Owner::new("test", "1", "cpu", ["-O2"]).expect("owner");
        for n in 0..10_000u64 {
            let key = KeyBuilder::new("backedges", 1).u64("n", n).finish();
            let def = format!("def{}", n % 1000);
            cache.insert(&owner, &key, Compiled::new("f").dep(def, Digest::of(b"v1")));
        }
        let writer = cache.writer();
        // 4 entries alive: the map was swept each time it passed twice
        // the references left by the last sweep (at least 64).
        assert!(writer.backedges.held() <= 2 * super::SWEEP_MIN + 1);
        assert!(writer.backedges.by_name.len() <= writer.backedges.held());
    }
}
