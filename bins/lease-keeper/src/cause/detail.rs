//! The death detail sent to the backend: the cause's summary and the tail
//! of the dead pod's log, bounded.

use super::summary::{one_line, truncate_chars_to_bytes};
use super::{DeathCause, LOG_SEPARATOR, LOG_SEPARATOR_CUT, MAX_DETAIL_BYTES};

/// What became of the dead pod's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTail {
    /// The last lines, as read.
    Read(String),
    /// The log could not be read, and why (said in the report); a later
    /// read may do better.
    Unreadable(String),
    /// The pod, or the node whose kubelet serves its log, was gone (404):
    /// no later read can do better. Said in the report as unreadable.
    Gone(String),
}

/// The death detail sent to the backend: the summary and the log tail after
/// [`LOG_SEPARATOR`], or a line saying why there is none. At most
/// [`MAX_DETAIL_BYTES`]: a longer log keeps its END (the lines nearest the
/// death), cut on a character boundary, after [`LOG_SEPARATOR_CUT`].
pub(crate) fn death_detail(cause: &DeathCause, log: &LogTail) -> String {
    let mut detail = cause.summary();
    truncate_chars_to_bytes(&mut detail, MAX_DETAIL_BYTES / 2);
    let tail = match log {
        LogTail::Read(text) => text.trim_end_matches(['\n', '\r']),
        LogTail::Unreadable(why) | LogTail::Gone(why) => {
            let mut line = format!("\nlogs unreadable: {}", one_line(why));
            truncate_chars_to_bytes(&mut line, MAX_DETAIL_BYTES / 2);
            detail.push_str(&line);
            return detail;
        }
    };
    if tail.trim().is_empty() {
        detail.push_str("\nlog: empty");
        return detail;
    }
    let room = MAX_DETAIL_BYTES.saturating_sub(detail.len() + LOG_SEPARATOR.len());
    if tail.len() <= room {
        detail.push_str(LOG_SEPARATOR);
        detail.push_str(tail);
        return detail;
    }
    let room = MAX_DETAIL_BYTES.saturating_sub(detail.len() + LOG_SEPARATOR_CUT.len());
    let mut start = tail.len() - room;
    while !tail.is_char_boundary(start) {
        start += 1;
    }
    // Start on a whole line when one begins within the kept part.
    let kept = &tail[start..];
    let kept = match kept.find('\n') {
        Some(i) if i + 1 < kept.len() => &kept[i + 1..],
        _ => kept,
    };
    detail.push_str(LOG_SEPARATOR_CUT);
    detail.push_str(kept);
    detail
}
