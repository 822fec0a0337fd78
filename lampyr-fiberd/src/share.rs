//! This instance's share of a Home's scaling bounds when its grant runs several
//! instances: `min-scale`, `max-scale` and `initial-scale` are Revision-wide, so
//! each is split over the instances, and the instances together never exceed
//! them. Where a bound does not divide evenly, `total % count` instances take one
//! more: which ones turns with the Home (a stable hash of its key), so the
//! remainders of many Homes spread over the instances instead of piling on one.

use lampyr_api::policy::ScalingPolicy;

/// Which of its grant's instances this fiberd is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstanceShare {
    /// This instance's index, from 0.
    pub index: u32,
    /// The grant's instances.
    pub count: u32,
}

/// A bounded `max-scale` leaves this instance no fiber of the Home.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "max-scale {max_scale} is spread over the grant's {count} instances and instance {index} holds none of it; \
     the other instances serve this Revision"
)]
pub struct NoShare {
    /// The Home's `max-scale`.
    pub max_scale: u32,
    /// This instance's index.
    pub index: u32,
    /// The grant's instances.
    pub count: u32,
}

impl InstanceShare {
    /// This instance's part of `total`, for the Home whose remainders start at instance `first`.
    pub fn split(&self, total: u32, first: u32) -> u32 {
        let count = self.count.max(1);
        let position = (self.index + count - first % count) % count;
        total / count + u32::from(position < total % count)
    }

    /// The scaling bounds this instance applies to Home `key` (`namespace/name`): its share
    /// of `min-scale`, `max-scale` (unbounded stays unbounded) and `initial-scale`;
    /// `activation-scale` at most its `max-scale`.
    pub fn scaling(&self, policy: &ScalingPolicy, key: &str) -> Result<ScalingPolicy, NoShare> {
        let first = first_instance(key, self.count);
        let split = |total| self.split(total, first);
        let mut mine = policy.clone();
        if policy.max_scale > 0 {
            mine.max_scale = split(policy.max_scale);
            if mine.max_scale == 0 {
                return Err(NoShare { max_scale: policy.max_scale, index: self.index, count: self.count });
            }
            mine.activation_scale = policy.activation_scale.min(mine.max_scale);
        }
        mine.min_scale = split(policy.min_scale);
        mine.initial_scale = split(policy.initial_scale).max(mine.min_scale);
        Ok(mine)
    }
}

/// The instance that takes the first remainder of Home `key`'s bounds: FNV-1a of the key,
/// the same in every instance.
fn first_instance(key: &str, count: u32) -> u32 {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    u32::try_from(hash % u64::from(count.max(1))).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(index: u32, count: u32) -> InstanceShare {
        InstanceShare { index, count }
    }

    #[test]
    fn shares_add_up_to_the_revision_wide_bound() {
        for total in 0..20 {
            for count in 1..5 {
                for first in 0..count {
                    let sum: u32 = (0..count).map(|i| of(i, count).split(total, first)).sum();
                    assert_eq!(sum, total, "{total} over {count} from {first}");
                }
            }
        }
        assert_eq!((of(0, 2).split(3, 0), of(1, 2).split(3, 0)), (2, 1), "the remainder from the first instance on");
        assert_eq!((of(0, 2).split(3, 1), of(1, 2).split(3, 1)), (1, 2));
    }

    #[test]
    fn each_instance_applies_its_share_and_one_may_hold_none() {
        let policy = ScalingPolicy { min_scale: 3, max_scale: 3, initial_scale: 3, activation_scale: 2, ..ScalingPolicy::default() };
        let key = "ns/app-00001";
        let shares: Vec<ScalingPolicy> = (0..2).map(|i| of(i, 2).scaling(&policy, key).expect("a share")).collect();
        let bounds: Vec<(u32, u32, u32)> = shares.iter().map(|s| (s.min_scale, s.max_scale, s.initial_scale)).collect();
        assert!(bounds == [(2, 2, 2), (1, 1, 1)] || bounds == [(1, 1, 1), (2, 2, 2)], "{bounds:?}");
        assert!(shares.iter().all(|s| s.activation_scale <= s.max_scale));
        let one = ScalingPolicy { max_scale: 1, ..ScalingPolicy::default() };
        let refused: Vec<NoShare> = (0..2).filter_map(|i| of(i, 2).scaling(&one, key).err()).collect();
        assert_eq!(refused.len(), 1, "max-scale 1 over 2 instances leaves exactly one none");
        assert!(refused[0].to_string().contains("holds none of it"), "{}", refused[0]);
        let unbounded = ScalingPolicy { max_scale: 0, min_scale: 1, ..ScalingPolicy::default() };
        let maxes: Vec<u32> = (0..2).map(|i| of(i, 2).scaling(&unbounded, key).expect("unbounded").max_scale).collect();
        assert_eq!(maxes, [0, 0], "unbounded stays unbounded");
        assert_eq!(of(0, 1).scaling(&policy, key).expect("alone"), policy, "one instance applies the policy as it is");
    }

    #[test]
    fn remainders_of_many_homes_spread_over_the_instances() {
        let policy = ScalingPolicy { min_scale: 1, ..ScalingPolicy::default() };
        let reserved: Vec<u32> = (0..2)
            .map(|i| (0..100).map(|n| of(i, 2).scaling(&policy, &format!("ns/app-{n:05}")).expect("share").min_scale).sum())
            .collect();
        assert_eq!(reserved.iter().sum::<u32>(), 100);
        assert!(reserved.iter().all(|r| (30..=70).contains(r)), "not all on one instance: {reserved:?}");
    }
}
