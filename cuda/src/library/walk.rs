//! The walk down a device's shipped candidates: the one definition of which
//! shipped entry serves a kernel, shared by [`KernelLibrary`] (whose entries are
//! found by the owners and keys its requests derive) and by
//! [`images`](super::images) (whose entries are found in images alone), so that
//! what a report of the images says is served is what the library serves.
//!
//! The rules (module documentation of [`KernelLibrary`]): the candidates of
//! [`select`](crate::select::select) in order (exact CUBIN, compatible CUBINs, PTX,
//! newest toolchain first within each); the first whose entry is found and whose
//! artifact holds the kernel serves; an exact CUBIN found without the kernel proves
//! the kernel does not exist for the arch. What did not serve is noted as an
//! [`Attempt`]. Where no candidate serves and nothing can be compiled, the entry
//! compiled for exactly the device's arch under a recorded toolchain whose CUBINs
//! the driver loads is looked for ([`compiled_elsewhere`]).
//!
//! [`KernelLibrary`]: super::KernelLibrary

use super::attempt::Attempt;
use crate::select::{
    Candidate, Candidates, Device, Selection, advice, cuda_version_text, holdings,
};
use crate::{BuildRecord, ServeError};

/// What a shelf found for one candidate.
pub(super) enum Found<E> {
    /// Its entry.
    Entry(E),
    /// It is in none of the places looked in.
    Absent,
    /// Passed over, with the attempt to note (if not already noted).
    Skipped(Option<Attempt>),
}

/// Where a walk finds the entries of one program (a specialization's requests).
pub(super) trait Shelf {
    /// An entry found.
    type Entry;

    /// The entry of `candidate` (its toolchain and target).
    ///
    /// # Errors
    /// An error that ends the walk (a key that cannot be derived).
    fn find(&mut self, candidate: &Candidate) -> Result<Found<Self::Entry>, ServeError>;

    /// Whether the artifact that `selection` loads from `entry` lists `kernel`
    /// as an entry point.
    fn holds(&mut self, entry: &Self::Entry, selection: Selection, kernel: &str) -> bool;
}

/// How a walk ended.
pub(super) enum Walked<E> {
    /// This candidate's entry serves.
    Served(E, Candidate),
    /// The entry built for exactly the device's arch lacks the kernel: it does not
    /// exist for that arch.
    NoSuchKernel(E, Candidate),
    /// No candidate served (the attempts say why).
    NotServed,
}

/// Walks `candidates` (those of [`select`](crate::select::select) for `device` and
/// `record`) for `kernel` (any kernel of the program when `None`), noting in
/// `tried` each step that did not serve.
///
/// # Errors
/// Those of the shelf's [`Shelf::find`].
pub(super) fn walk<S: Shelf>(
    device: &Device,
    record: &BuildRecord,
    candidates: &Candidates,
    kernel: Option<&str>,
    shelf: &mut S,
    tried: &mut Vec<Attempt>,
) -> Result<Walked<S::Entry>, ServeError> {
    for candidate in &candidates.list {
        let entry = match shelf.find(candidate)? {
            Found::Entry(entry) => entry,
            Found::Absent => {
                tried.push(Attempt::NotInImages {
                    target: candidate.target,
                    selection: candidate.selection,
                });
                continue;
            }
            Found::Skipped(attempt) => {
                tried.extend(attempt);
                continue;
            }
        };
        let holds = kernel.is_none_or(|k| shelf.holds(&entry, candidate.selection, k));
        if holds {
            return Ok(Walked::Served(entry, *candidate));
        }
        if candidate.selection == Selection::ExactCubin {
            return Ok(Walked::NoSuchKernel(entry, *candidate));
        }
        tried.push(Attempt::LacksKernel {
            target: candidate.target,
            selection: candidate.selection,
        });
    }
    if let Some(why) = &candidates.cubin_refused {
        tried.push(Attempt::CubinRefused { why: why.clone() });
    }
    if let Some(why) = &candidates.ptx_refused {
        tried.push(Attempt::PtxRefused { why: why.clone() });
    }
    if candidates.list.is_empty() {
        tried.push(Attempt::NothingLoads {
            device: describe(device),
            holds: holdings(device, record),
            advice: advice(device),
        });
    }
    Ok(Walked::NotServed)
}

/// The recorded toolchains (their indexes in `record`) under which the entry
/// compiled for exactly `device`'s arch is looked for when nothing shipped serves
/// and nothing can be compiled: each whose CUBINs the device's driver loads (every
/// one when the driver is not known), in the record's order.
pub(super) fn compiled_elsewhere(device: &Device, record: &BuildRecord) -> Vec<usize> {
    record
        .toolchains()
        .iter()
        .enumerate()
        .filter(|(_, t)| device.driver().is_none_or(|d| d >= t.cubin_driver()))
        .map(|(index, _)| index)
        .collect()
}

/// A device for people: `sm_70 with a driver for CUDA 12.8`.
pub(super) fn describe(device: &Device) -> String {
    match device.driver() {
        Some(driver) => format!(
            "{} with a driver for CUDA {}",
            device.arch(),
            cuda_version_text(driver)
        ),
        None => device.arch().to_string(),
    }
}
