//! The continuous-batching scheduler: which sequences run in the next forward pass and with
//! which tokens, over the paged cache manager.
//!
//! One [`Scheduler::schedule`] call is one engine step:
//!
//! 1. Running sequences, oldest first, each get their pending tokens (one for a decode, a
//!    chunk of the prompt for a prefill) while the step's token budget lasts. When the pool
//!    cannot hold a sequence's new tokens, the newest running sequence is preempted (its
//!    blocks freed, its tokens kept: it is recomputed when readmitted) until it can, or the
//!    sequence itself is preempted if it is the newest.
//! 2. If nothing was preempted, waiting requests are admitted strictly in FIFO order (the
//!    queue's head, then the next) while the budget, `max_running` and the free blocks allow;
//!    the head's prompt may be split into chunks across steps (chunked prefill).
//!
//! A preempted sequence goes back to the head of the queue, ahead of every request that
//! arrived after it, and keeps its generated tokens: nothing is lost. Because the oldest running
//! sequence always goes first and may preempt all others, and a request is only accepted if it
//! fits the whole pool alone, every request finishes.

use super::prefix::{chain_hash, PrefixCache};
use super::request::RequestId;
use crate::batch::{Batch, StepRows};
use crate::kv_cache::{CacheError, CopyBlock, PagedKvCache, SeqId};
use std::collections::VecDeque;

/// The scheduler's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Sequences in one step at most.
    pub max_running: usize,
    /// Tokens in one step at most (decodes and prefill chunks together), at least 1.
    pub max_batch_tokens: usize,
    /// Share full prompt blocks between requests through the prefix cache.
    pub prefix_caching: bool,
}

/// One sequence the scheduler tracks: its tokens (prompt, then output) and how many of them
/// are in the cache.
#[derive(Debug, Clone)]
struct Seq {
    id: RequestId,
    tokens: Vec<u32>,
    prompt_len: usize,
    computed: usize,
    cache: Option<SeqId>,
    admitted_once: bool,
    /// Prefix-cache keys of its first full, computed blocks.
    keys: Vec<u64>,
    /// The other choices of its request (`n > 1`), not yet forked: when this sequence's prompt
    /// is computed, each samples its first token from the same logits and becomes a sequence of
    /// its own on a fork of this one's cache sequence (the prompt is computed once).
    forks: Vec<RequestId>,
}

/// A sequence's part of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheduled {
    /// The request.
    pub id: RequestId,
    /// Its cache sequence.
    pub cache_seq: SeqId,
    /// Position of its first new token.
    pub start: usize,
    /// Its new tokens.
    pub tokens: Vec<u32>,
    /// The cache slots of the new tokens.
    pub slots: Vec<i64>,
    /// Whether this chunk reaches the end of its tokens (the step samples its next token).
    pub samples: bool,
}

/// One step's plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    /// The sequences that run, in row order.
    pub seqs: Vec<Scheduled>,
    /// Copy-on-write block copies to apply before the forward pass.
    pub copies: Vec<CopyBlock>,
    /// Requests preempted by this step (back in the queue, blocks freed).
    pub preempted: Vec<RequestId>,
    /// Requests admitted for the first time.
    pub admitted: Vec<RequestId>,
}

/// The scheduler: the waiting queue, the running set and the cache manager.
#[derive(Debug, Clone)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    cache: PagedKvCache,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    preemptions: u64,
    prefix: PrefixCache,
}

impl Scheduler {
    /// A scheduler over `cache` (a fresh pool; its block size is the model's).
    pub fn new(cfg: SchedulerConfig, cache: PagedKvCache) -> Self {
        Scheduler {
            cfg: SchedulerConfig {
                max_running: cfg.max_running.max(1),
                max_batch_tokens: cfg.max_batch_tokens.max(1),
                ..cfg
            },
            cache,
            waiting: VecDeque::new(),
            running: Vec::new(),
            preemptions: 0,
            prefix: PrefixCache::default(),
        }
    }

    /// The cache manager.
    pub fn cache(&self) -> &PagedKvCache {
        &self.cache
    }

    /// The limits.
    pub fn config(&self) -> SchedulerConfig {
        self.cfg
    }

    /// Requests waiting (new or preempted).
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Requests running (holding blocks).
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// The prefix cache.
    pub fn prefix_cache(&self) -> &PrefixCache {
        &self.prefix
    }

    /// Empties the prefix cache (its blocks only it held return to the pool).
    pub fn clear_prefix_cache(&mut self) {
        self.prefix.clear(&mut self.cache);
    }

    /// Preemptions so far.
    pub fn preemptions(&self) -> u64 {
        self.preemptions
    }

    /// Whether nothing waits or runs.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// Blocks `tokens` tokens need.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.cache.block_size())
    }

    /// Queues a request at the back (FIFO). `prompt` must not be empty.
    pub fn add(&mut self, id: RequestId, prompt: Vec<u32>) {
        self.add_group(&[id], prompt);
    }

    /// Queues the choices `ids` of one request (`n = ids.len()` completions of one prompt) at the
    /// back: one sequence computes the prompt for all of them, then forks into one sequence per
    /// choice (see [`Scheduler::pending_forks`]); the group is admitted when `n` running places
    /// are free, so `n` must not exceed `max_running`. `prompt` must not be empty; an empty
    /// `ids` queues nothing.
    pub fn add_group(&mut self, ids: &[RequestId], prompt: Vec<u32>) {
        let Some((&id, rest)) = ids.split_first() else {
            return;
        };
        self.waiting.push_back(Seq {
            id,
            prompt_len: prompt.len(),
            tokens: prompt,
            computed: 0,
            cache: None,
            admitted_once: false,
            keys: Vec::new(),
            forks: rest.to_vec(),
        });
    }

    /// The choices that sample their first token from `id`'s logits this step: `id`'s pending
    /// forks if its prompt is all computed after this step, else none. The engine samples one
    /// token per choice from `id`'s row and passes them all to [`Scheduler::commit`].
    pub fn pending_forks(&self, id: RequestId) -> &[RequestId] {
        self.running
            .iter()
            .find(|s| s.id == id)
            .map_or(&[], |s| &s.forks)
    }

    /// Ids of the running requests, oldest first, then the waiting ones in queue order (a
    /// sequence's pending forks right after it).
    pub fn ids(&self) -> (Vec<RequestId>, Vec<RequestId>) {
        let ids = |q: &mut dyn Iterator<Item = &Seq>| {
            q.flat_map(|s| std::iter::once(s.id).chain(s.forks.iter().copied()))
                .collect()
        };
        (ids(&mut self.running.iter()), ids(&mut self.waiting.iter()))
    }

    /// The generated tokens of `id`, if it is tracked (none yet for a pending fork).
    pub fn output(&self, id: RequestId) -> Option<&[u32]> {
        let mut all = self.running.iter().chain(self.waiting.iter());
        all.find_map(|s| {
            if s.id == id {
                Some(&s.tokens[s.prompt_len..])
            } else if s.forks.contains(&id) {
                Some(&[][..])
            } else {
                None
            }
        })
    }

    /// The cache sequence of a running request.
    pub fn cache_seq(&self, id: RequestId) -> Option<SeqId> {
        self.running
            .iter()
            .find(|s| s.id == id)
            .and_then(|s| s.cache)
    }

    /// Ends `id` wherever it is and frees its blocks; returns whether it was tracked and
    /// whether it had ever been admitted.
    pub fn finish(&mut self, id: RequestId) -> Option<bool> {
        // A pending fork leaves its group; a sequence with pending forks hands its prompt to
        // the first of them.
        let all = self.running.iter_mut().chain(self.waiting.iter_mut());
        for s in all {
            if let Some(k) = s.forks.iter().position(|&f| f == id) {
                s.forks.remove(k);
                return Some(s.admitted_once);
            }
            if s.id == id && !s.forks.is_empty() && s.tokens.len() == s.prompt_len {
                s.id = s.forks.remove(0);
                return Some(s.admitted_once);
            }
        }
        let seq = if let Some(i) = self.running.iter().position(|s| s.id == id) {
            self.running.remove(i)
        } else if let Some(i) = self.waiting.iter().position(|s| s.id == id) {
            self.waiting.remove(i)?
        } else {
            return None;
        };
        if let Some(c) = seq.cache {
            // The sequence is live in the cache (the scheduler created it): cannot fail.
            let _ = self.cache.free(c);
        }
        Some(seq.admitted_once)
    }

    fn preempt_newest(&mut self, step: &mut Step) {
        if let Some(mut s) = self.running.pop() {
            if let Some(c) = s.cache.take() {
                let _ = self.cache.free(c);
            }
            s.computed = 0;
            s.keys.clear();
            step.preempted.push(s.id);
            self.preemptions += 1;
            self.waiting.push_front(s);
        }
    }

    /// Plans the next step (see the module docs). Empty when nothing can run.
    pub fn schedule(&mut self) -> Step {
        let mut step = Step::default();
        let mut budget = self.cfg.max_batch_tokens;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let s = &self.running[i];
            let n = (s.tokens.len() - s.computed).min(budget);
            if n == 0 {
                i += 1;
                continue;
            }
            let Some(cseq) = s.cache else {
                i += 1;
                continue;
            };
            match self.cache.append(cseq, n) {
                Ok(a) => {
                    let s = &mut self.running[i];
                    step.copies.extend(a.copy);
                    step.seqs.push(Scheduled {
                        id: s.id,
                        cache_seq: cseq,
                        start: s.computed,
                        tokens: s.tokens[s.computed..s.computed + n].to_vec(),
                        slots: a.slots,
                        samples: s.computed + n == s.tokens.len(),
                    });
                    budget -= n;
                    i += 1;
                }
                Err(CacheError::OutOfBlocks { .. }) => {
                    // Free room by evicting an unused cached prefix, else by preempting the
                    // newest sequence; if that is this one, stop.
                    if self.prefix.evict_one(&mut self.cache) {
                        continue;
                    }
                    let last = self.running.len() - 1;
                    self.preempt_newest(&mut step);
                    if last == i {
                        break;
                    }
                }
                Err(_) => i += 1,
            }
        }
        if !step.preempted.is_empty() {
            return step;
        }
        // A sequence with pending forks holds a running place for each of them.
        let mut places: usize = self.running.iter().map(|s| 1 + s.forks.len()).sum();
        while budget > 0 && places < self.cfg.max_running {
            let Some(head) = self.waiting.front() else {
                break;
            };
            let group = 1 + head.forks.len();
            if places + group > self.cfg.max_running {
                break;
            }
            let bs = self.cache.block_size();
            let (blocks, keys) = if self.cfg.prefix_caching {
                self.prefix.lookup(&head.tokens, bs)
            } else {
                (Vec::new(), Vec::new())
            };
            let start = blocks.len() * bs;
            let n = (head.tokens.len() - start).min(budget);
            let total = head.tokens.len();
            let Some(cseq) = self.cache.add_sequence_with_blocks(&blocks) else {
                break;
            };
            match self.cache.append(cseq, n) {
                Ok(a) => {
                    let Some(mut s) = self.waiting.pop_front() else {
                        break;
                    };
                    if !s.admitted_once {
                        s.admitted_once = true;
                        step.admitted.push(s.id);
                        step.admitted.extend_from_slice(&s.forks);
                        self.prefix.query_tokens += total as u64;
                        self.prefix.hit_tokens += start as u64;
                    }
                    s.cache = Some(cseq);
                    s.computed = start;
                    s.keys = keys;
                    step.copies.extend(a.copy);
                    step.seqs.push(Scheduled {
                        id: s.id,
                        cache_seq: cseq,
                        start,
                        tokens: s.tokens[start..start + n].to_vec(),
                        slots: a.slots,
                        samples: start + n == s.tokens.len(),
                    });
                    budget -= n;
                    places += group;
                    self.running.push(s);
                }
                Err(_) => {
                    let _ = self.cache.free(cseq);
                    if self.prefix.evict_one(&mut self.cache) {
                        continue;
                    }
                    break;
                }
            }
        }
        step
    }

    /// The model's batch of `step`: rows in step order, each sequence's block table and the
    /// slots of all its cached positions (the cache manager's [`PagedKvCache::batch`]).
    pub fn batch(&self, step: &Step) -> Result<Batch, CacheError> {
        let parts: Vec<StepRows<'_>> = step
            .seqs
            .iter()
            .map(|s| StepRows {
                seq: s.cache_seq,
                start: s.start,
                tokens: &s.tokens,
            })
            .collect();
        self.cache.batch(&parts)
    }

    /// Records that `step` ran: its tokens are cached, and each `(id, token)` in `sampled`
    /// (for the sequences whose chunk reached their end) is appended to that request.
    pub fn commit(&mut self, step: &Step, sampled: &[(RequestId, u32)]) {
        for sch in &step.seqs {
            if let Some(s) = self.running.iter_mut().find(|s| s.id == sch.id) {
                s.computed = sch.start + sch.tokens.len();
            }
        }
        for &(id, tok) in sampled {
            if let Some(s) = self.running.iter_mut().find(|s| s.id == id) {
                s.tokens.push(tok);
            } else {
                self.fork(id, tok);
            }
        }
        if !self.cfg.prefix_caching {
            return;
        }
        // Newly full, computed blocks join the prefix cache.
        let bs = self.cache.block_size();
        for s in &mut self.running {
            let Some(cs) = s.cache else { continue };
            let Ok(table) = self.cache.block_table(cs) else {
                continue;
            };
            let table = table.to_vec();
            while s.keys.len() < s.computed / bs {
                let i = s.keys.len();
                let parent = s.keys.last().copied().unwrap_or(0);
                let tokens = &s.tokens[i * bs..(i + 1) * bs];
                let key = chain_hash(parent, tokens);
                self.prefix
                    .insert(&mut self.cache, key, parent, tokens, table[i]);
                s.keys.push(key);
            }
        }
    }

    /// Makes pending fork `id` a sequence of its own with its first token `tok`, on a fork of
    /// its group's cache sequence (the prompt's blocks shared; the first append into a shared
    /// partial block copies it). If the cache cannot fork, the choice waits at the queue's head
    /// to compute its prompt alone, as a preempted sequence does.
    fn fork(&mut self, id: RequestId, tok: u32) {
        let Some(p) = self.running.iter_mut().find(|s| s.forks.contains(&id)) else {
            return;
        };
        p.forks.retain(|&f| f != id);
        let mut tokens = p.tokens[..p.prompt_len].to_vec();
        tokens.push(tok);
        let (prompt_len, computed, keys) = (p.prompt_len, p.computed, p.keys.clone());
        let cache = p.cache.and_then(|c| self.cache.fork(c).ok());
        let child = Seq {
            id,
            tokens,
            prompt_len,
            computed: if cache.is_some() { computed } else { 0 },
            cache,
            admitted_once: true,
            keys: if cache.is_some() { keys } else { Vec::new() },
            forks: Vec::new(),
        };
        if child.cache.is_some() {
            self.running.push(child);
        } else {
            self.waiting.push_front(child);
        }
    }

    /// Checks the bookkeeping: every block is free or held, each block's reference count is the
    /// number of live sequences holding it, the cache's live sequences are exactly the running
    /// ones, and no block is held twice without being shared. Returns what is wrong.
    pub fn check_invariants(&self) -> Result<(), String> {
        let c = &self.cache;
        let mut held = vec![0u32; c.num_blocks()];
        let live: Vec<SeqId> = c.sequences().collect();
        let mut mine: Vec<SeqId> = self.running.iter().filter_map(|s| s.cache).collect();
        mine.sort_unstable();
        if live != mine {
            return Err(format!(
                "cache sequences {live:?} are not the running ones {mine:?}"
            ));
        }
        if self
            .waiting
            .iter()
            .any(|s| s.cache.is_some() || s.computed != 0)
        {
            return Err("a waiting sequence holds cache state".into());
        }
        for s in &self.running {
            let Some(cs) = s.cache else {
                return Err(format!("running request {} has no cache sequence", s.id));
            };
            let len = c.len(cs).map_err(|e| e.to_string())?;
            if len != s.computed {
                return Err(format!(
                    "request {}: {len} cached rows, {} computed",
                    s.id, s.computed
                ));
            }
            let table = c.block_table(cs).map_err(|e| e.to_string())?;
            if table.len() != self.blocks_for(len) {
                return Err(format!(
                    "request {}: {} blocks for {len} rows",
                    s.id,
                    table.len()
                ));
            }
            for &b in table {
                held[b as usize] += 1;
            }
            // Only full blocks are shared: the block a sequence still writes is its own, unless
            // it was forked with it and neither has written since (the first append copies).
            if len % c.block_size() != 0 {
                if let Some(&last) = table.last() {
                    let sharers = self
                        .running
                        .iter()
                        .filter_map(|o| o.cache.map(|oc| (o, oc)))
                        .filter(|&(_, oc)| c.block_table(oc).is_ok_and(|t| t.last() == Some(&last)))
                        .count() as u32;
                    let forks = self.running.iter().filter(|o| {
                        o.cache.is_some_and(|oc| {
                            c.block_table(oc).is_ok_and(|t| t.last() == Some(&last))
                                && c.len(oc).is_ok_and(|l| l == len)
                        })
                    });
                    let forked = forks.count() as u32 == sharers;
                    if c.refcount(last) != 1 && !(forked && c.refcount(last) == sharers) {
                        return Err(format!(
                            "request {}: its partial last block {last} is shared",
                            s.id
                        ));
                    }
                }
            }
        }
        for b in self.prefix.blocks() {
            held[b as usize] += 1;
        }
        let used = held.iter().filter(|&&h| h > 0).count();
        if used + c.free_blocks() != c.num_blocks() {
            return Err(format!(
                "{used} blocks held + {} free != {} (a leak)",
                c.free_blocks(),
                c.num_blocks()
            ));
        }
        for (b, &h) in held.iter().enumerate() {
            if h != c.refcount(b as u32) {
                return Err(format!(
                    "block {b}: held by {h} sequences, refcount {}",
                    c.refcount(b as u32)
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// A request of a prompt of this many tokens and this many choices.
        Add(usize, usize),
        Step(u32),
        Finish(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1usize..40, 1usize..4).prop_map(|(len, n)| Op::Add(len, n)),
            6 => any::<u32>().prop_map(Op::Step),
            1 => any::<usize>().prop_map(Op::Finish),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Under any mix of arrivals, steps and cancellations over a small pool: the
        /// bookkeeping holds after every call, admission is FIFO, preemption keeps every
        /// generated token, and once everything ends every block is free.
        #[test]
        fn scheduler_invariants(
            ops in proptest::collection::vec(op(), 1..120),
            blocks in 4usize..12,
            bs in 1usize..6,
            max_running in 1usize..6,
            budget in 1usize..24,
            prefix_caching in any::<bool>(),
        ) {
            let cache = PagedKvCache::new(blocks, bs).unwrap();
            let mut s = Scheduler::new(SchedulerConfig { max_running, max_batch_tokens: budget, prefix_caching }, cache);
            let mut next = 0u64;
            let mut added = Vec::new();
            let mut admitted = Vec::new();
            let mut out: std::collections::HashMap<RequestId, Vec<u32>> = Default::default();
            let drive = |s: &mut Scheduler, salt: u32, admitted: &mut Vec<RequestId>,
                         out: &mut std::collections::HashMap<RequestId, Vec<u32>>| {
                let step = s.schedule();
                admitted.extend(&step.admitted);
                // The batch is consistent with the step.
                let b = s.batch(&step).unwrap();
                assert_eq!(b.tokens.len(), step.seqs.iter().map(|x| x.tokens.len()).sum::<usize>());
                assert!(b.tokens.len() <= s.config().max_batch_tokens);
                assert!(step.seqs.len() <= s.config().max_running);
                // A sampling sequence's pending forks sample from its row too.
                let sampled: Vec<(RequestId, u32)> = step.seqs.iter().filter(|x| x.samples)
                    .flat_map(|x| std::iter::once(x.id).chain(s.pending_forks(x.id).to_vec()))
                    .map(|id| (id, salt ^ id as u32)).collect();
                s.commit(&step, &sampled);
                for (id, t) in sampled {
                    out.entry(id).or_default().push(t);
                }
            };
            for o in ops {
                match o {
                    Op::Add(len, n) => {
                        // Requests are validated to fit the pool alone.
                        if (len + 3).div_ceil(bs) > blocks || n > max_running { continue; }
                        let ids: Vec<RequestId> = (next..next + n as u64).collect();
                        s.add_group(&ids, (0..len as u32).collect());
                        added.extend(&ids);
                        next += n as u64;
                    }
                    Op::Step(salt) => drive(&mut s, salt, &mut admitted, &mut out),
                    Op::Finish(k) => {
                        let (run, wait) = s.ids();
                        let all: Vec<_> = run.into_iter().chain(wait).collect();
                        if !all.is_empty() {
                            let id = all[k % all.len()];
                            prop_assert!(s.finish(id).is_some());
                            out.remove(&id);
                        }
                    }
                }
                prop_assert_eq!(s.check_invariants(), Ok(()));
                for (id, toks) in &out {
                    if let Some(o) = s.output(*id) {
                        prop_assert_eq!(o, &toks[..]);
                    }
                }
            }
            // First admissions follow arrival order.
            let order: Vec<_> = added.iter().filter(|id| admitted.contains(id)).copied().collect();
            prop_assert_eq!(&admitted, &order);
            // Keep stepping, ending each request after 3 tokens: everything finishes.
            let mut guard = 0;
            while !s.is_idle() {
                drive(&mut s, 1, &mut admitted, &mut out);
                for (id, toks) in &out {
                    if toks.len() >= 3 && s.output(*id).is_some() { s.finish(*id); }
                }
                prop_assert_eq!(s.check_invariants(), Ok(()));
                guard += 1;
                prop_assert!(guard < 10_000, "the scheduler made no progress");
            }
            // Idle: every block is free or held only by the prefix cache (evictable).
            let held = blocks - s.cache().free_blocks();
            prop_assert_eq!(held, s.prefix_cache().evictable(s.cache()));
            prop_assert!(prefix_caching || held == 0);
            s.clear_prefix_cache();
            prop_assert_eq!(s.cache().free_blocks(), blocks);
        }
    }

    #[test]
    fn preemption_takes_the_newest_and_requeues_it_first() {
        // 4 blocks of 2: two sequences of 3 prompt tokens hold 2 blocks each.
        let mut s = Scheduler::new(
            SchedulerConfig {
                max_running: 4,
                max_batch_tokens: 16,
                prefix_caching: false,
            },
            PagedKvCache::new(4, 2).unwrap(),
        );
        s.add(0, vec![1, 2, 3]);
        s.add(1, vec![4, 5, 6]);
        s.add(2, vec![7]);
        let st = s.schedule();
        assert_eq!(st.admitted, vec![0, 1]);
        s.commit(&st, &[(0, 9), (1, 9)]);
        // Both decode into their second block's free slot.
        let st = s.schedule();
        assert_eq!(st.seqs.len(), 2);
        s.commit(&st, &[(0, 8), (1, 8)]);
        // Now each needs a third block: the newest (1) is preempted, ahead of 2 in the queue.
        let st = s.schedule();
        assert_eq!(st.preempted, vec![1]);
        assert_eq!(st.seqs.iter().map(|x| x.id).collect::<Vec<_>>(), vec![0]);
        assert_eq!(s.ids().1, vec![1, 2]);
        assert_eq!(s.output(1), Some(&[9, 8][..]));
        // Mid-step the cache is ahead of the commit; after it the books agree.
        s.commit(&st, &[(0, 7)]);
        s.check_invariants().unwrap();
        assert_eq!(s.output(0), Some(&[9, 8, 7][..]));
        s.finish(0);
        // Readmitted with its whole history (3 prompt + 2 generated) recomputed.
        let st = s.schedule();
        assert_eq!(st.seqs[0].id, 1);
        assert_eq!(st.seqs[0].tokens, vec![4, 5, 6, 9, 8]);
        assert!(st.seqs[0].samples);
    }

    #[test]
    fn a_shared_prompt_prefix_is_reused_and_evicted_when_needed() {
        let mut s = Scheduler::new(
            SchedulerConfig {
                max_running: 4,
                max_batch_tokens: 64,
                prefix_caching: true,
            },
            PagedKvCache::new(6, 4).unwrap(),
        );
        let prompt: Vec<u32> = (0..10).collect();
        s.add(0, prompt.clone());
        let st = s.schedule();
        s.commit(&st, &[(0, 99)]);
        // Two full blocks (tokens 0..8) are cached.
        assert_eq!(s.prefix_cache().len(), 2);
        let mut other = prompt[..8].to_vec();
        other.extend([50, 51, 52]);
        s.add(1, other);
        let st = s.schedule();
        // Request 0 decodes; request 1 starts after the 8 cached tokens, on the same blocks.
        let one = st.seqs.iter().find(|x| x.id == 1).unwrap();
        assert_eq!((one.start, &one.tokens[..]), (8, &[50, 51, 52][..]));
        let t0 = s.cache().block_table(s.cache_seq(0).unwrap()).unwrap()[..2].to_vec();
        let t1 = s.cache().block_table(one.cache_seq).unwrap()[..2].to_vec();
        assert_eq!(t0, t1);
        s.commit(&st, &[(0, 97), (1, 98)]);
        s.check_invariants().unwrap();
        assert_eq!(
            (s.prefix_cache().hit_tokens, s.prefix_cache().query_tokens),
            (8, 21)
        );
        s.finish(0);
        s.finish(1);
        // The shared blocks stay cached, evictable; a request that needs the room evicts them.
        assert_eq!(s.prefix_cache().evictable(s.cache()), 2);
        s.add(2, (100..123).collect());
        let st = s.schedule();
        assert_eq!(st.seqs[0].tokens.len(), 23);
        assert_eq!(s.prefix_cache().len(), 0);
        s.commit(&st, &[(2, 1)]);
        s.check_invariants().unwrap();
        assert_eq!(s.prefix_cache().len(), 5);
    }
}
