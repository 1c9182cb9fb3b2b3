//! World ages: the cache's logical clock.
//!
//! Every change of a definition bumps the world. An entry is valid in the
//! closed interval `[min_world, max_world]`; an entry whose `max_world` is
//! [`World::MAX`] is *unbounded* (still valid in every future world) and only
//! such entries are exported into images.

use std::fmt;

/// A world age: a monotonically increasing `u64`, bumped by every redefinition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct World(pub u64);

impl World {
    /// The world a new cache starts in.
    pub const FIRST: World = World(1);
    /// "Forever": the `max_world` of an unbounded entry.
    pub const MAX: World = World(u64::MAX);

    /// Whether this is [`World::MAX`], i.e. an upper bound that never closes.
    pub const fn is_unbounded(self) -> bool {
        self.0 == u64::MAX
    }
}

impl Default for World {
    fn default() -> World {
        World::FIRST
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unbounded() {
            f.write_str("world MAX")
        } else {
            write!(f, "world {}", self.0)
        }
    }
}
