//! A counting global allocator for the memory guards of the tests (issue 15: what a stream or
//! a decoded object holds, asserted on bytes rather than on process RSS).
//!
//! A test binary installs [`CountingAllocator`] as its global allocator; every allocation is
//! passed to the system allocator unchanged and its requested size (not the size class the
//! allocator rounds it to) is counted twice:
//!
//! - per thread: [`thread_live`] is what the calling thread allocated and has not freed (memory
//!   freed by another thread counts on that thread);
//! - on marked threads: [`marked_live`] is what the threads that called [`mark_thread`] (a
//!   runtime's `on_thread_start`) allocated and freed, so a server on its own runtime can be
//!   measured apart from its clients; [`reset_marked_peak`] and [`marked_peak`] give the most
//!   it held at once over a stretch (what a burst of work needs, even if freed since: the
//!   process keeps that much resident), and [`marked_live_allocations`] how many blocks they
//!   hold (what the system allocator's per-block overhead adds to the process's RSS).
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: linkerd_heap_count::CountingAllocator = linkerd_heap_count::CountingAllocator;
//! ```

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
    sync::atomic::{AtomicIsize, Ordering},
};

/// The system allocator, counting live bytes per thread and on marked threads.
pub struct CountingAllocator;

static MARKED_LIVE: AtomicIsize = AtomicIsize::new(0);
static MARKED_PEAK: AtomicIsize = AtomicIsize::new(0);
static MARKED_ALLOCATIONS: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    static THREAD_LIVE: Cell<isize> = const { Cell::new(0) };
    static MARKED: Cell<bool> = const { Cell::new(false) };
}

/// Counts `bytes` more (fewer, if negative) live, in `allocations` more (or fewer) blocks.
fn count(bytes: isize, allocations: isize) {
    // `try_with`: a thread's locals may be gone while the thread exits.
    let _ = THREAD_LIVE.try_with(|live| live.set(live.get() + bytes));
    if MARKED.try_with(Cell::get).unwrap_or(false) {
        let live = MARKED_LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
        MARKED_PEAK.fetch_max(live, Ordering::Relaxed);
        MARKED_ALLOCATIONS.fetch_add(allocations, Ordering::Relaxed);
    }
}

/// Bytes the calling thread has allocated and not freed, since it started.
pub fn thread_live() -> isize {
    THREAD_LIVE.with(Cell::get)
}

/// Counts the calling thread's allocations and frees in [`marked_live`] from now on.
pub fn mark_thread() {
    MARKED.with(|m| m.set(true));
}

/// Bytes the marked threads have allocated and not freed (frees included from the moment
/// each thread was marked).
pub fn marked_live() -> isize {
    MARKED_LIVE.load(Ordering::Relaxed)
}

/// Blocks the marked threads have allocated and not freed (each costs the system allocator
/// its header and rounding on top of its bytes: 8 to 24 bytes with glibc).
pub fn marked_live_allocations() -> isize {
    MARKED_ALLOCATIONS.load(Ordering::Relaxed)
}

/// Starts a new stretch for [`marked_peak`]: its peak is what the marked threads hold now.
pub fn reset_marked_peak() {
    MARKED_PEAK.store(MARKED_LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// The most bytes the marked threads held at once since the last [`reset_marked_peak`] (or
/// since the start).
pub fn marked_peak() -> isize {
    MARKED_PEAK.load(Ordering::Relaxed)
}

/// Marks the calling thread, runs `f` on it, and returns what `f` returned with the most bytes
/// the marked threads held at once while it ran, beyond what they held before (what judging a
/// review, say, takes at its peak). The thread is unmarked after, and such measurements take
/// turns: the counts are process-wide, and tests run in parallel.
pub fn marked_peak_during<T>(f: impl FnOnce() -> T) -> (T, isize) {
    static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = MEASURING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    mark_thread();
    let before = marked_live();
    reset_marked_peak();
    let out = f();
    let peak = marked_peak() - before;
    MARKED.with(|m| m.set(false));
    (out, peak)
}

// SAFETY: every call is passed on to the system allocator unchanged; counting allocates
// nothing (const-initialized thread locals, two atomics).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            count(layout.size() as isize, 1);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            count(layout.size() as isize, 1);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize), -1);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            count(new_size as isize - layout.size() as isize, 0);
        }
        new
    }
}
