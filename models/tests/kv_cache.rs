//! The cache manager under random alloc/append/fork/free sequences: no writable block is held by
//! two live sequences, reference counts match the block tables, and no block leaks.

use proptest::prelude::*;
use std::collections::HashMap;
use tileops_models::kv_cache::{CacheError, PagedKvCache};

#[derive(Debug, Clone)]
enum Op {
    Add,
    Append(usize, usize),
    Fork(usize),
    Free(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Add),
        (0usize..8, 0usize..12).prop_map(|(s, n)| Op::Append(s, n)),
        // Counts that wrap `len + n` or pass the pool: errors that change nothing.
        (0usize..8, 0usize..64).prop_map(|(s, k)| Op::Append(s, usize::MAX - k)),
        (0usize..8).prop_map(Op::Fork),
        (0usize..8).prop_map(Op::Free),
    ]
}

fn check(c: &PagedKvCache) {
    let mut holders: HashMap<u32, u32> = HashMap::new();
    for id in c.sequences() {
        let t = c.block_table(id).unwrap();
        assert_eq!(t.len(), c.len(id).unwrap().div_ceil(c.block_size()));
        for &b in t {
            *holders.entry(b).or_default() += 1;
        }
    }
    for b in 0..c.num_blocks() as u32 {
        assert_eq!(
            c.refcount(b),
            holders.get(&b).copied().unwrap_or(0),
            "block {b}"
        );
    }
    assert_eq!(
        c.free_blocks() + holders.len(),
        c.num_blocks(),
        "a block leaked"
    );
}

proptest! {
    #[test]
    fn random_ops_never_alias_or_leak(ops in proptest::collection::vec(op(), 1..60)) {
        let mut c = PagedKvCache::new(12, 4).unwrap();
        let mut live = Vec::new();
        for o in ops {
            match o {
                Op::Add => live.push(c.add_sequence().unwrap()),
                Op::Append(i, n) if !live.is_empty() => {
                    let id = live[i % live.len()];
                    let before = c.clone();
                    match c.append(id, n) {
                        Ok(w) => {
                            prop_assert_eq!(w.slots.len(), n);
                            // Every slot written lies in a block this sequence alone holds.
                            for s in &w.slots {
                                let b = (*s as usize / c.block_size()) as u32;
                                prop_assert_eq!(c.refcount(b), 1);
                                prop_assert!(c.block_table(id).unwrap().contains(&b));
                            }
                            if let Some(cp) = w.copy {
                                prop_assert!(c.refcount(cp.src) >= 1);
                            }
                        }
                        Err(CacheError::OutOfBlocks { .. } | CacheError::SequenceTooLong { .. }) => {
                            // A failed request leaves the whole manager as it was.
                            prop_assert_eq!(&c, &before);
                        }
                        Err(e) => prop_assert!(false, "{e}"),
                    }
                }
                Op::Fork(i) if !live.is_empty() => {
                    let id = live[i % live.len()];
                    live.push(c.fork(id).unwrap());
                }
                Op::Free(i) if !live.is_empty() => {
                    let id = live.remove(i % live.len());
                    c.free(id).unwrap();
                }
                _ => {}
            }
            check(&c);
        }
        for id in live {
            c.free(id).unwrap();
        }
        prop_assert_eq!(c.free_blocks(), c.num_blocks());
    }
}
