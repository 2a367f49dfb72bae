//! Giving freed heap pages back to the system.
//!
//! glibc's allocator returns memory to the kernel only from the top of the
//! heap. A loop that caches thousands of Jobs and then forgets most of them
//! leaves its freed blocks between long-lived ones (an Arc kept by the
//! cache, a string kept by a metric), so those pages stay resident: the
//! resident size follows the peak, not what the process holds. Trimming
//! hands every whole free page back (glibc's `malloc_trim` walks all arenas
//! and releases the inside of free chunks too).
//!
//! It is called only when a loop goes idle (at most once a second a
//! process), never between busy ticks, so a drain pays nothing for it; an
//! idle tick is rare work next to the poll interval it then sleeps. This file holds the workspace's
//! two unsafe calls (`malloc_trim` here and `mallopt` for [`map_large_blocks`]): the workspace lint
//! denies `unsafe_code` (not forbids) so that this module alone may allow it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one trim a process in this long: a trim walks every arena under
/// its lock, and a loop woken often (a Job finishing every few
/// milliseconds under churn) goes idle as often; the lease-keeper runs
/// four loops.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// When the process last trimmed.
static LAST: Mutex<Option<Instant>> = Mutex::new(None);

/// Hands the heap's free pages back to the system, unless this process
/// did so less than [`MIN_INTERVAL`] ago. Returns whether any memory was
/// released (always `false` where there is nothing to call: a non-glibc
/// target).
pub fn release_free_pages() -> bool {
    let now = Instant::now();
    {
        let mut last = LAST
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !due(*last, now) {
            return false;
        }
        *last = Some(now);
    }
    trim()
}

/// Whether a trim is due at `now` after one at `last`. Pure.
fn due(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|at| now.saturating_duration_since(at) >= MIN_INTERVAL)
}

/// From this size up a block is a mapping of its own (256 KiB): a renewal
/// or active-list body, a relist's vector, the per-Job hash tables.
pub const LARGE_BLOCK: usize = 256 * 1024;

/// Makes every block of [`LARGE_BLOCK`] or more a mapping of its own, given
/// back to the system the moment it is freed. glibc maps blocks from
/// 128 KiB by default, but each time one is freed it raises that bar to the
/// freed block's size (up to 32 MiB): after the first active list of a few
/// MiB, every later body, vector and table of that size came from the heap,
/// was freed between blocks still held, and stayed resident until a trim
/// (the lease-keeper's resident size ran some 15 MiB over its heap at
/// 100,000 Jobs). A fixed bar ends that. Called once at start-up
/// ([`crate::runtime::bootstrap`]); returns whether the allocator took it
/// (`false` where there is nothing to call).
pub fn map_large_blocks() -> bool {
    map_from(LARGE_BLOCK)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn map_from(size: usize) -> bool {
    let Ok(size) = libc::c_int::try_from(size) else {
        return false;
    };
    // SAFETY: mallopt takes two plain integers and changes only the
    // allocator's own parameters, under its own lock; any thread, any time.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, size) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn map_from(_size: usize) -> bool {
    false
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() -> bool {
    // SAFETY: malloc_trim takes a plain integer (the padding to keep at the
    // top of the heap), touches only the allocator's own state under its
    // own locks, and is safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() -> bool {
    false
}

#[cfg(test)]
mod rate {
    use super::{MIN_INTERVAL, due};
    use std::time::{Duration, Instant};

    #[test]
    fn a_trim_is_due_first_and_then_once_an_interval_has_passed() {
        let t0 = Instant::now();
        assert!(due(None, t0));
        assert!(!due(Some(t0), t0));
        assert!(!due(Some(t0), t0 + MIN_INTERVAL - Duration::from_millis(1)));
        assert!(due(Some(t0), t0 + MIN_INTERVAL));
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    // The trim itself: the rate limit is process-wide, and the tick tests
    // of this process go idle too.
    use super::trim as release_free_pages;
    use std::sync::Mutex;

    /// The tests here read the process's resident size: one at a time.
    static RESIDENT: Mutex<()> = Mutex::new(());

    /// The process's resident size in KiB, from /proc/self/status.
    fn resident_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("a VmRSS line")
    }

    #[test]
    fn free_pages_in_the_middle_of_the_heap_go_back() {
        let _one = RESIDENT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // 64 MiB of small blocks, each written so its page is resident.
        let mut blocks: Vec<Box<[u8; 1024]>> =
            (0..64 * 1024).map(|_| Box::new([7u8; 1024])).collect();
        // The newest block stays, pinning the top of the heap: without a
        // trim, freeing the rest returns nothing to the system.
        let pin = blocks.pop().expect("a block");
        drop(blocks);
        let before = resident_kib();
        assert!(release_free_pages(), "the trim released nothing");
        let after = resident_kib();
        assert!(
            after + 32 * 1024 <= before,
            "resident size went from {before} KiB to {after} KiB, expected at least 32 MiB back"
        );
        assert_eq!(pin[0], 7);
    }

    #[test]
    fn a_large_block_goes_back_as_soon_as_it_is_freed() {
        let _one = RESIDENT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        assert!(
            super::map_large_blocks(),
            "the allocator refused the setting"
        );
        // One large block freed first: by default glibc would now serve the
        // next one of this size from the heap, and keep it resident.
        drop(std::hint::black_box(vec![1u8; 16 << 20]));
        let large = std::hint::black_box(vec![1u8; 16 << 20]);
        let pin = Box::new([7u8; 1024]);
        let before = resident_kib();
        drop(large);
        let after = resident_kib();
        assert!(
            after + 12 * 1024 <= before,
            "resident size went from {before} KiB to {after} KiB, expected the 16 MiB block back"
        );
        assert_eq!(pin[0], 7);
    }
}
