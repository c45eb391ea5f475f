//! Kernel stacks interned once each: passes keep a small id per wait or sleep instead of a
//! copy of the frames, so memory grows with distinct stacks, not with events.

use foldhash::HashMap;

pub(crate) type StackId = u32;

#[derive(Default)]
pub(crate) struct StackTable {
    ids: HashMap<Vec<u64>, StackId>,
    frames: Vec<Vec<u64>>,
}

impl StackTable {
    pub(crate) fn intern(&mut self, frames: impl Iterator<Item = u64>) -> StackId {
        let key: Vec<u64> = frames.collect();
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = self.frames.len() as StackId;
        self.frames.push(key.clone());
        self.ids.insert(key, id);
        id
    }

    /// The return addresses of `id`, innermost first (empty for an unknown id).
    pub(crate) fn frames(&self, id: StackId) -> &[u64] {
        self.frames
            .get(id as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}
