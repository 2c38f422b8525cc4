//! How one event updates the store of one kind in an index: the part every index shares.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    hash::Hash,
    sync::Arc,
};

use crate::{model::ObjectRef, source::Event};

/// Applies `events`, in order, to one kind's store: `apply` stores an object (replacing the one
/// of its key), `delete` removes one by key. A `Reset` first deletes every stored key it does
/// not list (`stored` lists them: O(the kind), as a relist is), then applies what it lists.
pub(crate) fn apply_event<S, T, X>(
    state: &mut S,
    events: &[Event<Arc<T>>],
    touched: &mut X,
    key_of: impl Fn(&T) -> ObjectRef,
    stored: impl Fn(&S) -> Vec<ObjectRef>,
    apply: impl Fn(&mut S, &Arc<T>, &mut X),
    delete: impl Fn(&mut S, &ObjectRef, &mut X),
) {
    for event in events {
        match event {
            Event::Apply(obj) => apply(state, obj, touched),
            Event::Delete(key) => delete(state, key, touched),
            Event::Reset(objs) => {
                let stored = stored(state);
                // The first list of a kind finds nothing stored: no set of what it lists.
                if !stored.is_empty() {
                    let listed: HashSet<ObjectRef> = objs.iter().map(|o| key_of(o)).collect();
                    for key in stored {
                        if !listed.contains(&key) {
                            delete(state, &key, touched);
                        }
                    }
                }
                for obj in objs {
                    apply(state, obj, touched);
                }
            }
        }
    }
}

/// Adds `value` to the set of `key` in a secondary index.
pub(crate) fn index_insert<K: Hash + Eq, S: KeySet>(
    map: &mut HashMap<K, S>,
    key: K,
    value: &ObjectRef,
) {
    map.entry(key).or_default().insert(value.clone());
}

/// Removes `value` from the set of `key` in a secondary index, and the set once empty.
pub(crate) fn index_remove<K: Hash + Eq, S: KeySet>(
    map: &mut HashMap<K, S>,
    key: &K,
    value: &ObjectRef,
) {
    if let Some(set) = map.get_mut(key) {
        set.remove(value);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

/// The objects under one key of a secondary index.
pub(crate) trait KeySet: Default {
    fn insert(&mut self, value: ObjectRef);
    fn remove(&mut self, value: &ObjectRef);
    fn is_empty(&self) -> bool;
}

impl KeySet for BTreeSet<ObjectRef> {
    fn insert(&mut self, value: ObjectRef) {
        BTreeSet::insert(self, value);
    }

    fn remove(&mut self, value: &ObjectRef) {
        BTreeSet::remove(self, value);
    }

    fn is_empty(&self) -> bool {
        BTreeSet::is_empty(self)
    }
}

/// A sorted set of object references that usually holds one or two (the pods of one IP, the
/// slices that point at one pod), for the per-object secondary indexes: 48 bytes per
/// reference in one exactly sized allocation, where a `BTreeSet` allocates a node of about
/// 540 bytes for its first. Inserting is O(n), so the per-namespace indexes, which can hold
/// thousands, stay `BTreeSet`s.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RefSet(Vec<ObjectRef>);

impl RefSet {
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, ObjectRef> {
        self.0.iter()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

impl KeySet for RefSet {
    fn insert(&mut self, value: ObjectRef) {
        if let Err(at) = self.0.binary_search(&value) {
            self.0.reserve_exact(1);
            self.0.insert(at, value);
        }
    }

    fn remove(&mut self, value: &ObjectRef) {
        if let Ok(at) = self.0.binary_search(value) {
            self.0.remove(at);
            if self.0.capacity() > 2 * self.0.len() {
                self.0.shrink_to_fit();
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a> IntoIterator for &'a RefSet {
    type Item = &'a ObjectRef;
    type IntoIter = std::slice::Iter<'a, ObjectRef>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str) -> ObjectRef {
        ObjectRef {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[test]
    fn ref_set_is_a_sorted_set() {
        let mut index: HashMap<u8, RefSet> = HashMap::new();
        for name in ["b", "a", "c", "a"] {
            index_insert(&mut index, 1, &r(name));
        }
        let set = &index[&1];
        assert_eq!(set.iter().collect::<Vec<_>>(), [&r("a"), &r("b"), &r("c")]);
        assert_eq!(set.len(), 3);
        index_remove(&mut index, &1, &r("b"));
        index_remove(&mut index, &1, &r("z"));
        assert_eq!(index[&1].iter().collect::<Vec<_>>(), [&r("a"), &r("c")]);
        index_remove(&mut index, &1, &r("a"));
        index_remove(&mut index, &1, &r("c"));
        assert!(index.is_empty(), "an empty set leaves the index");
    }
}
