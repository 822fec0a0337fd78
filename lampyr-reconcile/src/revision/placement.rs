//! Placing a Revision's Home on a CapacityGrant: which grant (the namespace's
//! shared grant, or the one the Revision's `lampyr.dev/capacity-grant`
//! annotation names), and whether it has room for what the Home reserves.
//!
//! Pure functions of observed state: the grant, and the Homes already placed
//! on it. A Home reserves its `min-scale` fibers across its grant's instances
//! (each fiberd instance keeps its share of them) and their guest memory; a
//! Home at `min-scale` 0 reserves nothing and only needs one fiber to fit an
//! instance. Fibers beyond the reservation take the grant's unreserved room
//! while it lasts (fiberd enforces that, and answers 503 beyond it).

use std::fmt;

use lampyr_api::{CapacityGrant, Home, Revision, keys};

/// What one Home reserves across the instances of its grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Demand {
    /// Fibers kept for it (its `min-scale`, split over the instances).
    pub min_scale: u32,
    /// Guest memory one of its fibers takes, in bytes.
    pub fiber_memory: u64,
}

impl Demand {
    /// What a placed Home reserves, from its spec.
    pub fn of_home(home: &Home) -> Self {
        Demand {
            min_scale: home.spec.policy.scaling.min_scale,
            fiber_memory: u64::try_from(home.spec.fiber_memory_bytes).unwrap_or(0).max(1),
        }
    }

    fn slots(&self) -> u64 {
        u64::from(self.min_scale)
    }

    fn memory(&self) -> u64 {
        self.slots().saturating_mul(self.fiber_memory)
    }
}

/// A grant's room, from its spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Room {
    /// The grant's name.
    pub grant: String,
    /// Fiber slots across all instances.
    pub slots: u64,
    /// Guest memory across all instances, in bytes.
    pub memory: u64,
    /// Guest memory one instance holds, in bytes.
    pub instance_memory: u64,
}

impl Room {
    /// The room `grant` declares.
    pub fn of_grant(grant: &CapacityGrant) -> Self {
        let positive = |n: i64| u64::try_from(n).unwrap_or(0);
        Room {
            grant: grant.metadata.name.clone().unwrap_or_default(),
            slots: positive(grant.spec.fiber_slots.into()),
            memory: positive(grant.spec.memory_bytes),
            instance_memory: positive(grant.spec.instance_share().1),
        }
    }
}

/// What a grant's Homes take together: the slots they reserve or fill, and the memory
/// that holds; the larger of what placement counts and what fiberd reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Fiber slots.
    pub slots: u64,
    /// Guest memory, in bytes.
    pub memory: u64,
}

impl Load {
    /// The load of Homes reserving `placed` on `grant` (its status says what fiberd reports).
    pub fn of(placed: &[Demand], grant: Option<&CapacityGrant>) -> Self {
        let status = grant.and_then(|g| g.status.as_ref());
        let reported = |n: i64| u64::try_from(n).unwrap_or(0);
        Load {
            slots: placed.iter().map(Demand::slots).sum::<u64>().max(status.map_or(0, |s| reported(s.allocated_slots.into()))),
            memory: placed.iter().map(Demand::memory).sum::<u64>().max(status.map_or(0, |s| reported(s.allocated_memory_bytes))),
        }
    }
}

/// A shared grant grows by an instance while its load fills more than this of its instances.
pub const GROW_ABOVE: f64 = 0.8;
/// It shrinks by one while one instance fewer would be filled no more than this: the band
/// between the two keeps it from flapping.
pub const SHRINK_BELOW: f64 = 0.6;

/// The instances a shared grant runs for `load`, each holding `per_instance`, starting from
/// `current`, within `min..=max`: grown while `load` fills more than [`GROW_ABOVE`] of them,
/// shrunk while one fewer would be filled no more than [`SHRINK_BELOW`].
pub fn shared_instances(load: Load, per_instance: Load, current: i32, min: i32, max: i32) -> i32 {
    let (min, max) = (min.max(1), max.max(min.max(1)));
    let fill = |n: i32| {
        let n = f64::from(n.max(1));
        let part = |used: u64, held: u64| used as f64 / (held.max(1) as f64 * n);
        part(load.slots, per_instance.slots).max(part(load.memory, per_instance.memory))
    };
    let mut n = current.clamp(min, max);
    while n < max && fill(n) > GROW_ABOVE {
        n += 1;
    }
    while n > min && fill(n - 1) <= SHRINK_BELOW {
        n -= 1;
    }
    n
}

/// Why a Home cannot be placed; the message names the grant and what is short.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unplaceable {
    /// The grant the Revision names does not exist.
    NoGrant {
        /// Its name.
        grant: String,
    },
    /// One fiber needs more memory than one instance of the grant holds.
    FiberTooLarge {
        /// The grant.
        grant: String,
        /// Memory one fiber takes.
        fiber_memory: u64,
        /// Memory one instance holds.
        instance_memory: u64,
    },
    /// The grant's unreserved slots or memory are fewer than the Home reserves.
    Full {
        /// The grant.
        grant: String,
        /// Slots the Home would reserve (its `min-scale`).
        need_slots: u64,
        /// Slots no placed Home reserves.
        free_slots: u64,
        /// Memory the Home would reserve.
        need_memory: u64,
        /// Memory no placed Home reserves.
        free_memory: u64,
    },
}

impl fmt::Display for Unplaceable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unplaceable::NoGrant { grant } => {
                write!(f, "CapacityGrant {grant:?} (named by {}) does not exist in this namespace", keys::CAPACITY_GRANT_ANNOTATION)
            }
            Unplaceable::FiberTooLarge { grant, fiber_memory, instance_memory } => write!(
                f,
                "one fiber needs {} of guest memory, more than an instance of CapacityGrant {grant:?} holds ({})",
                mib(*fiber_memory),
                mib(*instance_memory)
            ),
            Unplaceable::Full { grant, need_slots, free_slots, need_memory, free_memory } => write!(
                f,
                "CapacityGrant {grant:?} cannot reserve min-scale for this Revision: it needs {need_slots} fiber slots and {} \
                 of guest memory, {free_slots} slots and {} are unreserved",
                mib(*need_memory),
                mib(*free_memory)
            ),
        }
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

/// The grant a Revision's Home goes on: the one its annotation names, else the shared one.
pub fn grant_name(revision: &Revision) -> String {
    revision
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::CAPACITY_GRANT_ANNOTATION))
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| keys::SHARED_GRANT_NAME.to_string())
}

/// Whether `room` can take a Home with `demand` beside the Homes already placed on it.
pub fn place<'a>(demand: Demand, room: &Room, placed: impl IntoIterator<Item = &'a Demand>) -> Result<(), Unplaceable> {
    if demand.fiber_memory > room.instance_memory {
        return Err(Unplaceable::FiberTooLarge {
            grant: room.grant.clone(),
            fiber_memory: demand.fiber_memory,
            instance_memory: room.instance_memory,
        });
    }
    let (mut slots, mut memory) = (0u64, 0u64);
    for other in placed {
        slots = slots.saturating_add(other.slots());
        memory = memory.saturating_add(other.memory());
    }
    let free_slots = room.slots.saturating_sub(slots);
    let free_memory = room.memory.saturating_sub(memory);
    let (need_slots, need_memory) = (demand.slots(), demand.memory());
    if need_slots > free_slots || need_memory > free_memory {
        return Err(Unplaceable::Full { grant: room.grant.clone(), need_slots, free_slots, need_memory, free_memory });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room(instances: u64, slots: u64, memory: u64) -> Room {
        Room { grant: "lampyr-fibers".into(), slots, memory, instance_memory: memory / instances }
    }

    fn demand(min_scale: u32, fiber_memory: u64) -> Demand {
        Demand { min_scale, fiber_memory }
    }

    #[test]
    fn homes_at_zero_reserve_nothing_and_fit_while_one_fiber_fits_an_instance() {
        let room = room(2, 10, 200);
        let many: Vec<Demand> = (0..1000).map(|_| demand(0, 10)).collect();
        assert_eq!(place(demand(0, 100), &room, &many), Ok(()));
        let err = place(demand(0, 101), &room, &many).expect_err("an instance holds 100 B");
        assert!(matches!(err, Unplaceable::FiberTooLarge { instance_memory: 100, .. }), "{err:?}");
        assert!(err.to_string().contains("more than an instance of CapacityGrant \"lampyr-fibers\" holds"), "{err}");
    }

    #[test]
    fn min_scale_is_reserved_across_the_instances_and_a_full_grant_says_what_is_short() {
        let room = room(2, 10, 1000);
        let placed = [demand(4, 10), demand(3, 10)];
        // 4 + 3 = 7 of 10 slots reserved: 3 free, so min-scale 3 fits, 4 does not.
        assert_eq!(place(demand(3, 10), &room, &placed), Ok(()));
        let err = place(demand(4, 10), &room, &placed).expect_err("4 > 3");
        assert_eq!(
            err,
            Unplaceable::Full { grant: "lampyr-fibers".into(), need_slots: 4, free_slots: 3, need_memory: 40, free_memory: 930 }
        );
        let message = err.to_string();
        assert!(
            message.contains("\"lampyr-fibers\"") && message.contains("needs 4 fiber slots") && message.contains("3 slots"),
            "{message}"
        );
    }

    #[test]
    fn memory_is_reserved_as_slots_are() {
        let room = room(1, 100, 100);
        assert_eq!(place(demand(5, 20), &room, &[]), Ok(()));
        let err = place(demand(5, 20), &room, &[demand(1, 20)]).expect_err("100 B + 20 B");
        assert!(matches!(err, Unplaceable::Full { need_memory: 100, free_memory: 80, .. }), "{err:?}");
    }

    #[test]
    fn a_grants_room_is_its_spec_and_an_instance_holds_its_share_of_the_memory() {
        let grant: CapacityGrant = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g"},
            "spec": {"fiberSlots": 10, "memoryBytes": 1000, "instances": 4, "grantImage": "i", "helperImage": "h"}
        }))
        .expect("grant");
        assert_eq!(Room::of_grant(&grant), Room { grant: "g".into(), slots: 10, memory: 1000, instance_memory: 250 });
    }

    #[test]
    fn the_annotation_names_the_grant_else_the_shared_one() {
        let mut rev: Revision = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "r", "annotations": {}}, "spec": {"containers": [{"image": "x"}]}
        }))
        .expect("revision");
        assert_eq!(grant_name(&rev), keys::SHARED_GRANT_NAME);
        rev.metadata.annotations.get_or_insert_default().insert(keys::CAPACITY_GRANT_ANNOTATION.into(), " team-a ".into());
        assert_eq!(grant_name(&rev), "team-a");
    }

    #[test]
    fn a_shared_grant_grows_past_80_percent_and_shrinks_below_60_within_its_bounds() {
        let per = Load { slots: 100, memory: 1 << 30 };
        let slots = |n: u64| Load { slots: n, memory: 0 };
        assert_eq!(shared_instances(slots(80), per, 1, 1, 4), 1, "80% is not above 80%");
        assert_eq!(shared_instances(slots(81), per, 1, 1, 4), 2);
        assert_eq!(shared_instances(slots(250), per, 1, 1, 4), 4, "grown until under 80%: 250 on 4 is 62%");
        assert_eq!(shared_instances(slots(1000), per, 1, 1, 4), 4, "never past the operator's bound");
        assert_eq!(shared_instances(slots(100), per, 2, 1, 4), 2, "one instance would be 100% full");
        assert_eq!(shared_instances(slots(70), per, 2, 1, 4), 2, "70% of one is inside the band: no flapping");
        assert_eq!(shared_instances(slots(60), per, 2, 1, 4), 1, "60% of one: shrink");
        assert_eq!(shared_instances(slots(0), per, 3, 2, 4), 2, "never under the operator's bound");
        let memory = Load { slots: 1, memory: 3 << 29 };
        assert_eq!(shared_instances(memory, per, 1, 1, 4), 2, "memory counts as slots do: 1.5 GiB on 1 GiB instances");
        assert_eq!(shared_instances(slots(500), per, 1, 3, 2), 3, "a maximum below the minimum is the minimum");
    }

    #[test]
    fn the_load_is_the_larger_of_what_is_reserved_and_what_fiberd_reports() {
        let placed = [Demand { min_scale: 2, fiber_memory: 10 }, Demand { min_scale: 0, fiber_memory: 10 }];
        assert_eq!(Load::of(&placed, None), Load { slots: 2, memory: 20 });
        let spec = lampyr_api::CapacityGrantSpec {
            fiber_slots: 100,
            memory_bytes: 1000,
            instances: 1,
            placement: None,
            grant_image: String::new(),
            helper_image: String::new(),
        };
        let mut g = CapacityGrant::new(keys::SHARED_GRANT_NAME, spec);
        let status = g.status.get_or_insert_default();
        status.allocated_slots = 7;
        status.allocated_memory_bytes = 5;
        assert_eq!(Load::of(&placed, Some(&g)), Load { slots: 7, memory: 20 });
    }
}
