//! How [`kiln_core::global()`] finds the remote tier: a
//! [`TierFactory`] registered with `inventory`, reading
//! `KILN_REMOTE_CACHE` (and `KILN_REMOTE_TIMEOUT_MS`), following the trust
//! policy the setup hands every tier, and writing hits through to the disk
//! tier.

use kiln_core::{Tier, TierFactory, TierSetup};

use crate::RemoteTier;

inventory::submit! { TierFactory::new("remote", remote_tier) }

/// The remote tier `setup`'s variables configure, writing its hits through
/// to the local (disk) tier; `None` when `KILN_REMOTE_CACHE` is unset, or
/// (after one warning) when the settings are unusable. No I/O: the tier
/// connects on first use.
fn remote_tier(setup: &TierSetup<'_>) -> Option<Box<dyn Tier>> {
    let remote = RemoteTier::from_settings(setup.settings(), setup.trust_policy())?;
    Some(Box::new(match setup.local() {
        Some(local) => remote.write_through(local),
        None => remote,
    }))
}
