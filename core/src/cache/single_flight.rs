//! Single flight: concurrent callers for one `(owner, key)` compile once.
//!
//! The first caller becomes the *leader* and compiles; the others *follow*
//! and wait for the outcome. A failure reaches every follower and is not
//! cached: the flight is removed when it ends, so the next caller starts a new
//! one. A leader that panics ends its flight as panicked (through its guard's
//! `Drop`), so followers never wait forever.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use super::instance::Instance;
use super::store::SlotKey;
use crate::error::CompileFailure;

/// How a flight ended.
#[derive(Clone)]
pub(crate) enum Outcome {
    /// The result is in the cache; for an in-memory entry, the entry
    /// itself, so that followers get it even if it was evicted before they
    /// looked.
    Succeeded(Option<Arc<Instance>>),
    /// A lookup that never compiles (`Cache::get_cached`) found nothing in
    /// memory, the images or the tiers.
    Missed,
    Failed(CompileFailure),
    Panicked,
}

pub(crate) struct Flight {
    /// `None` while running.
    outcome: Mutex<Option<Outcome>>,
    done: Condvar,
}

impl Flight {
    /// Waits until the flight ends.
    pub(crate) fn wait(&self) -> Outcome {
        let mut outcome = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(ended) = &*outcome {
                return ended.clone();
            }
            outcome = self
                .done
                .wait(outcome)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// The flights in progress.
#[derive(Default)]
pub(crate) struct Flights {
    running: Mutex<HashMap<SlotKey, Arc<Flight>>>,
}

pub(crate) enum Join<'f> {
    Leader(Leader<'f>),
    Follower(Arc<Flight>),
}

/// The leader's duty to end its flight.
pub(crate) struct Leader<'f> {
    flights: &'f Flights,
    slot: SlotKey,
    flight: Arc<Flight>,
    ended: bool,
}

impl Flights {
    /// Joins the flight for `slot`, or starts one.
    pub(crate) fn join(&self, slot: SlotKey) -> Join<'_> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(flight) = running.get(&slot) {
            return Join::Follower(Arc::clone(flight));
        }
        let flight = Arc::new(Flight {
            outcome: Mutex::new(None),
            done: Condvar::new(),
        });
        running.insert(slot, Arc::clone(&flight));
        Join::Leader(Leader {
            flights: self,
            slot,
            flight,
            ended: false,
        })
    }
}

impl Leader<'_> {
    /// Ends the flight with `outcome` (the result, if any, is already cached).
    pub(crate) fn end(mut self, outcome: Outcome) {
        self.finish(outcome);
    }

    fn finish(&mut self, outcome: Outcome) {
        self.ended = true;
        self.flights
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.slot);
        *self
            .flight
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(outcome);
        self.flight.done.notify_all();
    }
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.finish(Outcome::Panicked);
        }
    }
}
