//! A value per task, kept where the task last ran so that the task's next events on that
//! CPU reach it without a hash lookup.
//!
//! Each CPU holds the value of the task it last saw; other tasks' values wait in a map.
//! A task's value is in at most one place at a time: when it shows up on another CPU its
//! value moves there from the CPU it left (found by a scan of the CPUs) or from the map,
//! and the value that CPU held goes back to the map. Memory is bounded by tasks and CPUs.

use foldhash::HashMap;

/// CPUs given a slot of their own; events of higher CPUs use the map directly.
const MAX_SLOTTED_CPUS: usize = 1024;

pub(crate) struct TaskSlots<V> {
    /// Per CPU: the task whose value it holds (`None`: no task), and that value.
    cpus: Vec<(Option<i32>, V)>,
    parked: HashMap<i32, V>,
}

impl<V: Copy + Default> Default for TaskSlots<V> {
    fn default() -> Self {
        TaskSlots {
            cpus: Vec::new(),
            parked: HashMap::default(),
        }
    }
}

impl<V: Copy + Default> TaskSlots<V> {
    /// The value of `pid` (the default when it has none yet), which just had an event on
    /// `cpu`.
    #[inline(always)]
    pub(crate) fn on(&mut self, cpu: u32, pid: i32) -> &mut V {
        let cpu = cpu as usize;
        if cpu >= MAX_SLOTTED_CPUS {
            if let Some(other) = self.cpus.iter().position(|slot| slot.0 == Some(pid)) {
                self.cpus[other].0 = None;
                self.parked.insert(pid, self.cpus[other].1);
            }
            return self.parked.entry(pid).or_default();
        }
        if self.cpus.get(cpu).is_some_and(|slot| slot.0 == Some(pid)) {
            return &mut self.cpus[cpu].1;
        }
        self.move_to(cpu, pid)
    }

    #[cold]
    fn move_to(&mut self, cpu: usize, pid: i32) -> &mut V {
        if self.cpus.len() <= cpu {
            self.cpus.resize(cpu + 1, (None, V::default()));
        }
        let value = match self.cpus.iter().position(|slot| slot.0 == Some(pid)) {
            Some(other) => {
                self.cpus[other].0 = None;
                self.cpus[other].1
            }
            None => self.parked.remove(&pid).unwrap_or_default(),
        };
        let (left, old) = std::mem::replace(&mut self.cpus[cpu], (Some(pid), value));
        if let Some(left) = left {
            self.parked.insert(left, old);
        }
        &mut self.cpus[cpu].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_follows_its_task_across_cpus_and_back_from_the_map() {
        let mut slots = TaskSlots::<u32>::default();
        *slots.on(0, 10) = 1;
        *slots.on(1, 20) = 2;
        // Task 10 moves to CPU 1 (20 is parked), then 20 comes back on CPU 0.
        assert_eq!(*slots.on(1, 10), 1);
        *slots.on(1, 10) = 3;
        assert_eq!(*slots.on(0, 20), 2);
        assert_eq!(*slots.on(5, 10), 3);
        assert_eq!(*slots.on(0, 30), 0);
        assert_eq!(*slots.on(2000, 20), 2);
        *slots.on(2000, 20) = 7;
        assert_eq!(*slots.on(3, 20), 7);
    }
}
