//! A slab of objects addressed by slot.

/// A slab of objects addressed by slot: freed slots are reused.
#[derive(Debug)]
pub struct Table<T> {
    slots: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Table<T> {
    pub fn insert(&mut self, v: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(v);
                i
            }
            None => {
                self.slots.push(Some(v));
                self.slots.len() - 1
            }
        }
    }
    pub fn get(&self, i: usize) -> Option<&T> {
        self.slots.get(i).and_then(Option::as_ref)
    }
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }
    pub fn remove(&mut self, i: usize) -> Option<T> {
        let v = self.slots.get_mut(i)?.take();
        if v.is_some() {
            self.free.push(i);
        }
        v
    }
    pub fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|v| (i, v)))
    }
}
