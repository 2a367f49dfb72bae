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

    /// A mutable borrow of each lane's value.
    pub fn each_mut(&mut self) -> PerLane<&mut T> {
        PerLane(self.0.each_mut())
    }

    /// The values, in the order of [`Lane::ALL`].
    pub fn into_array(self) -> [T; Lane::ALL.len()] {
        self.0
    }

    /// Awaits each lane's future side by side (none waits for another's);
    /// their outputs, per lane.
    pub async fn join<F>(futures: PerLane<F>) -> PerLane<T>
    where
        F: Future<Output = T>,
    {
        let outputs = futures::future::join_all(futures.0).await;
        match outputs.try_into() {
            Ok(outputs) => PerLane(outputs),
            Err(_) => unreachable!("join_all gives one output per future"),
        }
    }
}

impl<T> IntoIterator for PerLane<T> {
    type Item = (Lane, T);
    type IntoIter = std::iter::Zip<
        std::array::IntoIter<Lane, { Lane::ALL.len() }>,
        std::array::IntoIter<T, { Lane::ALL.len() }>,
    >;

    /// Each lane with its value, in the order of [`Lane::ALL`].
    fn into_iter(self) -> Self::IntoIter {
        Lane::ALL.into_iter().zip(self.0)
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
        let mut counts = PerLane::<u32>::default();
        for (lane, count) in counts.each_mut() {
            *count += lane as u32 + 1;
        }
        assert_eq!(counts.into_array(), [1, 2]);
        assert_eq!(
            counts.into_iter().collect::<Vec<_>>(),
            [(Lane::Run, 1), (Lane::Publish, 2)]
        );
    }

    #[tokio::test]
    async fn join_keeps_each_output_with_its_lane() {
        let joined =
            PerLane::join(PerLane::from_fn(|lane| async move { lane.label_value() })).await;
        assert_eq!(joined, PerLane::from_fn(Lane::label_value));
    }
}
