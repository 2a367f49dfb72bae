//! Short strings kept inside the struct that holds them.
//!
//! The Job cache holds a name and a uid per owned Job (the job id and claim
//! labels sit inside the name: `job_cache::JobNames`): as `String`s they
//! would cost 24 bytes each plus a heap block (48 bytes for a 36-character
//! uid). The values have known shapes: Kubernetes uids are 36-character
//! UUIDs, Job names at most 63 characters. An [`InlineStr<N>`] stores up to `N` bytes in
//! place and anything longer on the heap, so a well-formed value costs no
//! allocation, and any value, malformed or not, is kept exactly as it was.
//! It dereferences to `str`, so it reads like a `String`.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// A string of up to `N` bytes stored in place; longer ones on the heap.
#[derive(Clone)]
pub enum InlineStr<const N: usize> {
    /// `len` bytes of `buf`.
    Inline {
        /// How many bytes of `buf` are the string.
        len: u8,
        /// The string's bytes, then zeros.
        buf: [u8; N],
    },
    /// Longer than `N` bytes.
    Heap(Box<str>),
}

/// A Job name: at most 63 characters (the `job-name` label's limit), 62 in place.
pub type NameStr = InlineStr<62>;
/// A uid: a 36-character UUID in place (40 bytes in all).
pub type IdStr = InlineStr<38>;

impl<const N: usize> InlineStr<N> {
    /// The string.
    pub fn as_str(&self) -> &str {
        match self {
            // Built only from a `&str` cut at its length: always UTF-8.
            InlineStr::Inline { len, buf } => {
                std::str::from_utf8(&buf[..usize::from(*len)]).unwrap_or_default()
            }
            InlineStr::Heap(s) => s,
        }
    }
}

impl<const N: usize> From<&str> for InlineStr<N> {
    fn from(s: &str) -> Self {
        match u8::try_from(s.len()) {
            Ok(len) if s.len() <= N => {
                let mut buf = [0; N];
                buf[..s.len()].copy_from_slice(s.as_bytes());
                InlineStr::Inline { len, buf }
            }
            _ => InlineStr::Heap(s.into()),
        }
    }
}

impl<const N: usize> From<String> for InlineStr<N> {
    fn from(s: String) -> Self {
        if s.len() <= N {
            Self::from(s.as_str())
        } else {
            InlineStr::Heap(s.into_boxed_str())
        }
    }
}

impl<const N: usize> From<&String> for InlineStr<N> {
    fn from(s: &String) -> Self {
        Self::from(s.as_str())
    }
}

impl<const N: usize> From<InlineStr<N>> for String {
    fn from(s: InlineStr<N>) -> Self {
        s.as_str().to_owned()
    }
}

impl<const N: usize> Default for InlineStr<N> {
    fn default() -> Self {
        InlineStr::Inline {
            len: 0,
            buf: [0; N],
        }
    }
}

impl<const N: usize> Deref for InlineStr<N> {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> AsRef<str> for InlineStr<N> {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> Borrow<str> for InlineStr<N> {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> PartialEq for InlineStr<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl<const N: usize> Eq for InlineStr<N> {}

impl<const N: usize> PartialOrd for InlineStr<N> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<const N: usize> Ord for InlineStr<N> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl<const N: usize> Hash for InlineStr<N> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl<const N: usize> PartialEq<str> for InlineStr<N> {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl<const N: usize> PartialEq<&str> for InlineStr<N> {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl<const N: usize> PartialEq<String> for InlineStr<N> {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl<const N: usize> PartialEq<InlineStr<N>> for String {
    fn eq(&self, other: &InlineStr<N>) -> bool {
        self == other.as_str()
    }
}

impl<const N: usize> PartialEq<InlineStr<N>> for &str {
    fn eq(&self, other: &InlineStr<N>) -> bool {
        *self == other.as_str()
    }
}

impl<const N: usize> fmt::Debug for InlineStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<const N: usize> fmt::Display for InlineStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_stay_in_place_long_ones_go_to_the_heap_both_read_back_exactly() {
        let uuid = "0b6f7c8e-2a51-4d1c-9a0e-3f1b2c4d5e6f";
        let id = IdStr::from(uuid);
        assert!(matches!(id, InlineStr::Inline { .. }));
        assert_eq!(id, uuid);
        let long = "x".repeat(39);
        let heap = IdStr::from(long.clone());
        assert!(matches!(heap, InlineStr::Heap(_)));
        assert_eq!(heap.as_str(), long);
        for odd in ["", " ", "not a valid id!", "é-ü"] {
            assert_eq!(IdStr::from(odd).as_str(), odd, "kept as it was");
        }
        assert_eq!(IdStr::from(""), IdStr::default());
    }

    #[test]
    fn they_compare_hash_and_order_as_their_strings() {
        let (a, b) = (NameStr::from("a"), NameStr::from("b".repeat(70)));
        assert!(a < b && a.cmp(&a).is_eq());
        let set: std::collections::BTreeSet<NameStr> = [b.clone(), a.clone()].into();
        assert!(set.contains("a"));
        assert_eq!(format!("{a} {a:?}"), "a \"a\"");
    }

    #[test]
    fn sizes_are_what_the_cache_is_sized_for() {
        assert_eq!(size_of::<NameStr>(), 64);
        assert_eq!(size_of::<IdStr>(), 40);
        assert_eq!(size_of::<Option<IdStr>>(), 40);
    }
}
