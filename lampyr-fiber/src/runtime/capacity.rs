//! The fiber slots and guest memory one fiberd instance holds for its grant,
//! shared by the pools of every Home placed on it.
//!
//! Each pool has a [`CapacityAccount`]: the slots it reserves (its share of
//! `min-scale`, kept for it whether or not its fibers are warm) and the memory
//! one of its fibers takes. A fiber within the reservation always starts; a
//! fiber beyond it starts only while unreserved slots and memory are free, and
//! gives them back when it stops. A pool scaled to zero with no reservation
//! holds nothing.

use std::sync::{Arc, Mutex, PoisonError};

/// Why a fiber could not start: the instance's capacity is taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "this instance's {slots} fiber slots and {memory} B of guest memory are taken \
     ({used_slots} slots and {used_memory} B in use or reserved; one more fiber needs {fiber_memory} B)"
)]
pub struct CapacityExhausted {
    /// Slots the instance holds.
    pub slots: u32,
    /// Guest memory the instance holds, in bytes.
    pub memory: u64,
    /// Slots in use or reserved.
    pub used_slots: u32,
    /// Memory in use or reserved, in bytes.
    pub used_memory: u64,
    /// Memory the refused fiber needed, in bytes.
    pub fiber_memory: u64,
}

/// What an instance has handed out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapacityUsage {
    /// Slots reserved by accounts.
    pub reserved_slots: u32,
    /// Memory reserved by accounts, in bytes.
    pub reserved_memory: u64,
    /// Slots of fibers beyond their pool's reservation.
    pub burst_slots: u32,
    /// Memory of fibers beyond their pool's reservation, in bytes.
    pub burst_memory: u64,
}

impl CapacityUsage {
    fn slots(&self) -> u32 {
        self.reserved_slots.saturating_add(self.burst_slots)
    }

    fn memory(&self) -> u64 {
        self.reserved_memory.saturating_add(self.burst_memory)
    }
}

/// An instance's fiber slots and guest memory.
#[derive(Debug)]
pub struct Capacity {
    slots: u32,
    memory: u64,
    usage: Mutex<CapacityUsage>,
}

impl Capacity {
    /// An instance holding `slots` fiber slots and `memory` bytes of guest memory.
    pub fn new(slots: u32, memory: u64) -> Arc<Self> {
        Arc::new(Capacity { slots, memory, usage: Mutex::new(CapacityUsage::default()) })
    }

    /// Slots the instance holds.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Guest memory the instance holds, in bytes.
    pub fn memory(&self) -> u64 {
        self.memory
    }

    /// What is handed out now.
    pub fn usage(&self) -> CapacityUsage {
        *self.lock()
    }

    /// Opens an account for a pool reserving `reserved` slots of `fiber_memory` bytes each.
    /// A reservation larger than what is free is cut to what is free (placement should
    /// have prevented it); [`CapacityAccount::reserved`] says what was granted.
    pub fn account(self: &Arc<Self>, reserved: u32, fiber_memory: u64) -> CapacityAccount {
        let account =
            CapacityAccount { capacity: Arc::clone(self), fiber_memory: fiber_memory.max(1), state: Mutex::new(AccountState::default()) };
        account.set_reserved(reserved);
        account
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CapacityUsage> {
        self.usage.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What one account holds.
#[derive(Debug, Default)]
struct AccountState {
    /// Slots the pool wants reserved (its `min-scale`).
    wanted: u32,
    /// Slots reserved: `wanted`, or less while the instance has no more room.
    reserved: u32,
    /// Fibers alive; those beyond `reserved` hold burst slots.
    live: u32,
    /// Memory the pool's template holds on this instance, in bytes.
    template: u64,
}

impl AccountState {
    fn burst(&self) -> u32 {
        self.live.saturating_sub(self.reserved)
    }
}

/// One pool's share of its instance's [`Capacity`]; gives everything back when dropped.
#[derive(Debug)]
pub struct CapacityAccount {
    capacity: Arc<Capacity>,
    fiber_memory: u64,
    /// Locked before the capacity's usage, never after.
    state: Mutex<AccountState>,
}

impl CapacityAccount {
    /// Slots reserved for this pool.
    pub fn reserved(&self) -> u32 {
        self.state().reserved
    }

    /// Guest memory one fiber of this pool takes, in bytes.
    pub fn fiber_memory(&self) -> u64 {
        self.fiber_memory
    }

    /// Fibers alive under this account.
    pub fn live(&self) -> u32 {
        self.state().live
    }

    /// Changes the reservation to `want` slots (a changed `min-scale`), keeping the fibers
    /// alive; more than is free is cut to what is free, and the rest is taken by
    /// [`CapacityAccount::top_up`] when room appears. Returns the slots now reserved.
    pub fn set_reserved(&self, want: u32) -> u32 {
        let mut state = self.state();
        state.wanted = want;
        let mut usage = self.capacity.lock();
        // Slots held now are max(reserved, live); only growth beyond that needs free room.
        let held = state.reserved.max(state.live);
        let free_slots = self.capacity.slots.saturating_sub(usage.slots());
        let free_memory = self.capacity.memory.saturating_sub(usage.memory());
        let free = free_slots.min(u32::try_from(free_memory / self.fiber_memory).unwrap_or(u32::MAX));
        let granted = if want <= held { want } else { want.min(held.saturating_add(free)) };
        let (old_reserved, old_burst) = (state.reserved, state.burst());
        state.reserved = granted;
        let new_burst = state.burst();
        let memory = |slots: u32| u64::from(slots) * self.fiber_memory;
        usage.reserved_slots = usage.reserved_slots.saturating_sub(old_reserved).saturating_add(granted);
        usage.reserved_memory = usage.reserved_memory.saturating_sub(memory(old_reserved)).saturating_add(memory(granted));
        usage.burst_slots = usage.burst_slots.saturating_sub(old_burst).saturating_add(new_burst);
        usage.burst_memory = usage.burst_memory.saturating_sub(memory(old_burst)).saturating_add(memory(new_burst));
        granted
    }

    /// Reserves what the pool wants but did not get when the instance was full, as far as
    /// there is room now. Returns the slots now reserved.
    pub fn top_up(&self) -> u32 {
        let wanted = {
            let state = self.state();
            if state.reserved >= state.wanted {
                return state.reserved;
            }
            state.wanted
        };
        self.set_reserved(wanted)
    }

    /// Counts `bytes` of the instance's memory as this pool's while the account lives: a
    /// template booted on this instance holds its snapshot in memory. Counted even beyond
    /// what is free, since the memory is in use: fibers beyond reservations are then refused.
    pub fn hold_template(&self, bytes: u64) {
        let mut state = self.state();
        let mut usage = self.capacity.lock();
        usage.reserved_memory = usage.reserved_memory.saturating_sub(state.template).saturating_add(bytes);
        state.template = bytes;
    }

    /// Takes a slot for one more fiber: from the reservation while it lasts, else from
    /// what no account reserves or uses. Give it back with [`CapacityAccount::release`].
    pub fn admit(&self) -> Result<(), CapacityExhausted> {
        let mut state = self.state();
        if state.live < state.reserved {
            state.live += 1;
            return Ok(());
        }
        let mut usage = self.capacity.lock();
        let fits = usage.slots() < self.capacity.slots && usage.memory().saturating_add(self.fiber_memory) <= self.capacity.memory;
        if !fits {
            return Err(CapacityExhausted {
                slots: self.capacity.slots,
                memory: self.capacity.memory,
                used_slots: usage.slots(),
                used_memory: usage.memory(),
                fiber_memory: self.fiber_memory,
            });
        }
        usage.burst_slots += 1;
        usage.burst_memory += self.fiber_memory;
        state.live += 1;
        Ok(())
    }

    /// Gives back the slot of a fiber that stopped.
    pub fn release(&self) {
        let mut state = self.state();
        if state.live == 0 {
            return;
        }
        if state.live > state.reserved {
            let mut usage = self.capacity.lock();
            usage.burst_slots = usage.burst_slots.saturating_sub(1);
            usage.burst_memory = usage.burst_memory.saturating_sub(self.fiber_memory);
        }
        state.live -= 1;
    }

    fn state(&self) -> std::sync::MutexGuard<'_, AccountState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for CapacityAccount {
    fn drop(&mut self) {
        self.set_reserved(0);
        let mut state = self.state();
        let burst = state.burst();
        state.live = 0;
        let mut usage = self.capacity.lock();
        usage.reserved_memory = usage.reserved_memory.saturating_sub(std::mem::take(&mut state.template));
        usage.burst_slots = usage.burst_slots.saturating_sub(burst);
        usage.burst_memory = usage.burst_memory.saturating_sub(u64::from(burst) * self.fiber_memory);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fibers_within_a_reservation_always_start_and_burst_takes_what_is_free() {
        let capacity = Capacity::new(4, 400);
        let a = capacity.account(2, 100);
        let b = capacity.account(0, 100);
        assert_eq!(a.reserved(), 2);
        // b may burst into the two unreserved slots, not into a's reservation.
        b.admit().expect("first free slot");
        b.admit().expect("second free slot");
        let refused = b.admit().expect_err("a's reservation is not b's");
        assert_eq!((refused.used_slots, refused.slots), (4, 4));
        assert!(refused.to_string().contains("4 fiber slots"), "{refused}");
        a.admit().expect("reserved");
        a.admit().expect("reserved");
        assert!(a.admit().is_err(), "nothing left to burst into");
        b.release();
        a.admit().expect("a bursts into the slot b gave back");
        assert_eq!(capacity.usage(), CapacityUsage { reserved_slots: 2, reserved_memory: 200, burst_slots: 2, burst_memory: 200 });
    }

    #[test]
    fn a_template_held_in_memory_takes_room_from_fibers_until_dropped() {
        let capacity = Capacity::new(10, 400);
        let a = capacity.account(0, 100);
        a.hold_template(350);
        let b = capacity.account(0, 100);
        let refused = b.admit().expect_err("350 of 400 B are the template's");
        assert_eq!(refused.used_memory, 350);
        a.hold_template(200);
        b.admit().expect("the template shrank");
        drop(a);
        assert_eq!(capacity.usage(), CapacityUsage { reserved_slots: 0, reserved_memory: 0, burst_slots: 1, burst_memory: 100 });
    }

    #[test]
    fn memory_bounds_fibers_as_slots_do() {
        let capacity = Capacity::new(10, 250);
        let big = capacity.account(0, 100);
        big.admit().expect("100 B");
        big.admit().expect("200 B");
        let refused = big.admit().expect_err("300 B is over 250 B");
        assert_eq!((refused.used_memory, refused.fiber_memory), (200, 100));
    }

    #[test]
    fn a_reservation_is_cut_to_what_is_free_and_everything_is_given_back_on_drop() {
        let capacity = Capacity::new(3, 1000);
        let a = capacity.account(2, 10);
        let b = capacity.account(5, 10);
        assert_eq!(b.reserved(), 1, "only one slot was free");
        assert_eq!(b.top_up(), 1, "still no room");
        for _ in 0..2 {
            a.admit().expect("reserved");
        }
        drop(a);
        assert_eq!(capacity.usage(), CapacityUsage { reserved_slots: 1, reserved_memory: 10, burst_slots: 0, burst_memory: 0 });
        assert_eq!(b.top_up(), 3, "the room a gave back tops b's reservation up");
        b.set_reserved(1);
        let c = capacity.account(0, 10);
        c.admit().expect("free again");
        c.admit().expect("free again");
        drop(c);
        drop(b);
        assert_eq!(capacity.usage(), CapacityUsage::default(), "a pool gone holds nothing");
    }

    #[test]
    fn a_changed_reservation_keeps_live_fibers_and_takes_only_what_is_free() {
        let capacity = Capacity::new(4, 1000);
        let a = capacity.account(1, 10);
        for _ in 0..3 {
            a.admit().expect("one reserved, two burst");
        }
        assert_eq!(a.set_reserved(2), 2, "already held by a live fiber");
        assert_eq!(capacity.usage(), CapacityUsage { reserved_slots: 2, reserved_memory: 20, burst_slots: 1, burst_memory: 10 });
        let b = capacity.account(0, 10);
        b.admit().expect("the last free slot");
        assert_eq!(a.set_reserved(4), 3, "the fourth slot is b's");
        assert_eq!(a.set_reserved(0), 0);
        assert_eq!(capacity.usage(), CapacityUsage { reserved_slots: 0, reserved_memory: 0, burst_slots: 4, burst_memory: 40 });
        drop(a);
        drop(b);
        assert_eq!(capacity.usage(), CapacityUsage::default());
    }

    #[test]
    fn releasing_more_than_was_admitted_changes_nothing() {
        let capacity = Capacity::new(1, 10);
        let a = capacity.account(0, 10);
        a.release();
        a.admit().expect("free");
        a.release();
        a.release();
        assert_eq!(capacity.usage(), CapacityUsage::default());
        assert_eq!(a.live(), 0);
    }
}
