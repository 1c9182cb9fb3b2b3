//! A global allocator that counts, per thread, the bytes allocated and not
//! yet freed, and their peak: what a reader costs in memory.
//!
//! A test binary (or fuzz target) installs it with
//! `#[global_allocator] static ALLOC: Counting = Counting;` and measures a
//! closure with [`peak_during`]. Counters are per thread, so tests running
//! in parallel threads do not see each other's allocations. The
//! `bounded_memory` fuzz target includes this file by path.
//!
//! The bound the tests assert: a reader of an image of `n` bytes never has
//! more than [`ALLOWED_FACTOR`]` × n + `[`ALLOWED_EXTRA`] bytes allocated at
//! once (the copy `Image::from_bytes` makes included), plus, for a
//! compressed image, [`ALLOWED_PER_RAW_BYTE`] per raw byte its compressed
//! groups declare (each at most 1024 per stored byte, checked at open) and
//! [`ALLOWED_DECODER`] for the decoder: [`allowed_peak_for`].

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Peak bytes allocated per byte of input that a reader may reach.
pub const ALLOWED_FACTOR: usize = 8;
/// Peak bytes a reader may allocate beyond [`ALLOWED_FACTOR`] per input byte.
pub const ALLOWED_EXTRA: usize = 64 << 10;

/// Peak bytes per declared raw byte of a compressed group: the group's
/// buffer, and the decoder's window (at most the raw length rounded up to
/// a power of two) with a block beside it.
pub const ALLOWED_PER_RAW_BYTE: usize = 4;

/// Peak bytes the zstd decoder may hold beyond its window while it decodes
/// one group (one decoder at a time): a block's literals and sequences,
/// whose sizes a frame declares up to zstd's 128 KiB block limit whatever
/// the group's raw length, and its tables. A constant, once per image that
/// has a compressed group.
pub const ALLOWED_DECODER: usize = 2 << 20;

/// The largest peak [`peak_during`] may report reading `bytes`: that of
/// [`allowed_peak`], plus [`ALLOWED_PER_RAW_BYTE`] per raw byte the
/// compressed payload groups of `bytes` declare, and [`ALLOWED_DECODER`]
/// when it declares one.
pub fn allowed_peak_for(bytes: &[u8]) -> usize {
    let declared = kiln_image::fuzz_support::declared_decompression(bytes);
    let decoder = if declared > 0 { ALLOWED_DECODER } else { 0 };
    allowed_peak(bytes.len())
        .saturating_add(ALLOWED_PER_RAW_BYTE.saturating_mul(declared as usize))
        .saturating_add(decoder)
}

/// The largest peak [`peak_during`] may report for an input of `len` bytes
/// that declares no compressed group.
pub fn allowed_peak(len: usize) -> usize {
    ALLOWED_FACTOR * len + ALLOWED_EXTRA
}

/// [`System`], counting.
pub struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn record(delta: isize) {
    // `try_with`: never panic inside the allocator, even while a thread's
    // locals are being torn down (these have no destructor, so in practice
    // they are always there).
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every method forwards its arguments unchanged to `System` and
// returns what `System` returned, so `System`'s guarantees are this
// allocator's; the only other work is updating const-initialised
// thread-local `Cell`s, which neither allocate nor unwind.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            record(layout.size() as isize);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc_zeroed`'s contract.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            record(layout.size() as isize);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract (`ptr`
        // came from this allocator, hence from `System`, with `layout`).
        unsafe { System.dealloc(ptr, layout) };
        record(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            record(new_size as isize - layout.size() as isize);
        }
        new
    }
}

/// Runs `f` and returns its result and the most bytes this thread had
/// allocated at once during the call, above what it had when `f` started.
/// Meaningful only where [`Counting`] is the global allocator.
pub fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(start));
    let out = f();
    let peak = PEAK.with(Cell::get) - start;
    (out, usize::try_from(peak).unwrap_or(0))
}
