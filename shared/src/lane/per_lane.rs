//! One value per lane, indexed by [`Lane`].

use super::Lane;
use std::ops::{Index, IndexMut};

/// One `T` per lane, in the order of [`Lane::ALL`]: per-lane state without
/// a field or an array slot named after each lane.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PerLane<T>([T; Lane::ALL.len()]);

impl<T> PerLane<T> {
    /// The value `f` gives for each lane.
    pub fn from_fn(mut f: impl FnMut(Lane) -> T) -> Self {
        PerLane(Lane::ALL.map(&mut f))
    }

    /// Each lane with its value, in the order of [`Lane::ALL`].
    pub fn iter(&self) -> impl Iterator<Item = (Lane, &T)> {
        Lane::ALL.into_iter().zip(&self.0)
    }

    /// Each lane with its value, mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (Lane, &mut T)> {
        Lane::ALL.into_iter().zip(&mut self.0)
    }

    /// The value `f` makes of each lane's value.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> PerLane<U> {
        PerLane(self.0.map(&mut f))
    }
}

/// A lane's slot: its place in [`Lane::ALL`].
const fn slot(lane: Lane) -> usize {
    lane as usize
}

impl<T> Index<Lane> for PerLane<T> {
    type Output = T;

    fn index(&self, lane: Lane) -> &T {
        &self.0[slot(lane)]
    }
}

impl<T> IndexMut<Lane> for PerLane<T> {
    fn index_mut(&mut self, lane: Lane) -> &mut T {
        &mut self.0[slot(lane)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lane_has_its_own_slot_in_the_order_of_all() {
        for (index, lane) in Lane::ALL.into_iter().enumerate() {
            assert_eq!(slot(lane), index);
        }
        let mut per = PerLane::from_fn(Lane::label_value);
        assert_eq!(per[Lane::Run], "run");
        assert_eq!(per[Lane::Publish], "publish");
        per[Lane::Publish] = "p";
        let seen: Vec<_> = per.iter().map(|(lane, v)| (lane, *v)).collect();
        assert_eq!(seen, [(Lane::Run, "run"), (Lane::Publish, "p")]);
        assert_eq!(per.map(str::len)[Lane::Run], 3);
        assert_eq!(PerLane::<u32>::default(), PerLane::from_fn(|_| 0));
    }
}
