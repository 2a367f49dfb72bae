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
//! idle tick is rare work next to the poll interval it then sleeps. This file holds the workspace's one unsafe call:
//! the workspace lint denies `unsafe_code` (not forbids) so that this module
//! alone may allow it.

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
}
