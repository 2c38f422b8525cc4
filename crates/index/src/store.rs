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
                let listed: HashSet<ObjectRef> = objs.iter().map(|o| key_of(o)).collect();
                for key in stored(state) {
                    if !listed.contains(&key) {
                        delete(state, &key, touched);
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
pub(crate) fn index_insert<K: Hash + Eq>(
    map: &mut HashMap<K, BTreeSet<ObjectRef>>,
    key: K,
    value: &ObjectRef,
) {
    map.entry(key).or_default().insert(value.clone());
}

/// Removes `value` from the set of `key` in a secondary index, and the set once empty.
pub(crate) fn index_remove<K: Hash + Eq>(
    map: &mut HashMap<K, BTreeSet<ObjectRef>>,
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
