//! The serving engine: continuous batching over the model on a thread of its own.
//!
//! [`Engine::spawn`] moves the [`Model`] (which is not `Sync`) and a [`Scheduler`] onto a
//! dedicated thread and returns an [`EngineHandle`], cheap to clone and shareable across
//! threads, through which requests are submitted, cancelled and observed. Each request streams
//! [`Event`]s to its own [`EventSink`]; a sink that reports its listener gone cancels the
//! request, so a client that disconnects frees its blocks at the next step.
//!
//! One engine step: take the commands that arrived (submissions, cancellations), let the
//! scheduler plan the step (decodes of running sequences, chunks of prefills, FIFO
//! admission, preemption of the newest sequences when the KV pool runs out), run one forward
//! pass over all its rows, sample each finished chunk's next token with that request's own
//! sampler, and report tokens, stops and ends. See [`scheduler`] for the policy.

pub mod metrics;
pub mod prefix;
pub mod request;
pub mod sampler;
pub mod scheduler;

use crate::deepseek::config::Config;
use crate::deepseek::model::Model;
use crate::deepseek::ops::to_vec_f32;
use crate::error::ModelError;
use crate::weights::Weights;
use metrics::Metrics;
use request::{
    Detokenize, Event, EventSink, FinishReason, GenerateRequest, RequestId, TextState, TokenLogprob,
};
use sampler::Sampler;
use scheduler::{Scheduler, SchedulerConfig};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;
use tileops_ops::Backend;

/// Most stop strings a request may carry (OpenAI's limit).
pub const MAX_STOP_STRINGS: usize = 4;

/// Most choices (`n`) one request may ask for.
pub const MAX_CHOICES: usize = 8;

/// The engine's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Blocks in the KV pool.
    pub kv_blocks: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// Sequences in one step at most (at least 1).
    pub max_running: usize,
    /// Tokens in one step at most (the chunked-prefill budget; at least 1).
    pub max_batch_tokens: usize,
    /// New requests queued at most before [`ServingError::QueueFull`] (at least 1).
    pub max_waiting: usize,
    /// Longest sequence (prompt + generated); capped at the model's `max_seq_len`.
    pub max_model_len: usize,
    /// The end-of-sequence token, if the vocabulary has one (inside the model's vocabulary).
    pub eos_token: Option<u32>,
    /// The backend of every op call.
    pub backend: Backend,
    /// Let batches made only of whole fresh prompts take the dense prefill path
    /// (`Model::dense_prefill`). Off by default: then every row goes through the same sparse
    /// path whatever else is in its step, so a request's tokens do not depend on whether its
    /// prompt was prefilled alone, in chunks, or recomputed after a preemption.
    pub dense_prefill: bool,
    /// Run the model's sparse attention with the batch-invariant plan (`Model::batch_invariant`):
    /// with `dense_prefill` off, a request's logits have the same bits alone, in any batch,
    /// after a preemption's recompute and on a shared prefix. On by default.
    pub batch_invariant: bool,
    /// Share full prompt blocks between requests through the prefix cache ([`prefix`]).
    pub prefix_caching: bool,
}

impl Default for EngineConfig {
    /// 256 blocks of 16, 16 running, 256 tokens a step, 64 waiting, 512 tokens, Reference.
    fn default() -> Self {
        EngineConfig {
            kv_blocks: 256,
            block_size: 16,
            max_running: 16,
            max_batch_tokens: 256,
            max_waiting: 64,
            max_model_len: 512,
            eos_token: None,
            backend: Backend::Reference,
            dense_prefill: false,
            batch_invariant: true,
            prefix_caching: true,
        }
    }
}

/// Why the engine refused or failed something.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    /// A request or configuration parameter is out of range (`param` names it; the display is
    /// `param: msg`, the HTTP error's message `msg` alone).
    #[error("{param}: {msg}")]
    Invalid {
        /// The parameter.
        param: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// The waiting queue is full; retry later.
    #[error("the waiting queue is full ({0} requests); retry later")]
    QueueFull(usize),
    /// The engine no longer accepts requests.
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// The model could not be built.
    #[error(transparent)]
    Model(#[from] ModelError),
}

fn invalid(param: &'static str, msg: String) -> ServingError {
    ServingError::Invalid { param, msg }
}

enum Command {
    Submit {
        /// One id and one sink per choice.
        ids: Vec<RequestId>,
        req: GenerateRequest,
        sinks: Vec<EventSink>,
        arrival: Instant,
    },
    Cancel(RequestId),
    Shutdown {
        cancel: bool,
    },
}

struct Shared {
    metrics: Metrics,
    queued: AtomicUsize,
    next_id: AtomicU64,
    accepting: AtomicBool,
    cfg: EngineConfig,
    vocab: usize,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// The client side of a running engine: clone it freely.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Command>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineHandle")
            .field("cfg", &self.shared.cfg)
            .finish_non_exhaustive()
    }
}

/// The engine (see the module docs); only [`Engine::spawn`] is public.
pub struct Engine {
    model: Model,
    sched: Scheduler,
    rx: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
    detok: Arc<dyn Detokenize>,
    reqs: HashMap<RequestId, ReqState>,
    shutdown: bool,
}

struct ReqState {
    sampler: Sampler,
    text: TextState,
    sink: EventSink,
    max_tokens: usize,
    prompt_len: usize,
    logprobs: Option<usize>,
    arrival: Instant,
    last_token: Option<Instant>,
}

impl Engine {
    /// Builds the model of `model_cfg` with `weights` and a pool of `cfg.kv_blocks` blocks, and
    /// starts the engine thread.
    pub fn spawn(
        model_cfg: &Config,
        weights: &Weights,
        mut cfg: EngineConfig,
        detok: Arc<dyn Detokenize>,
    ) -> Result<EngineHandle, ServingError> {
        cfg.max_model_len = cfg.max_model_len.min(model_cfg.max_seq_len);
        if cfg.max_model_len == 0 {
            return Err(invalid("max_model_len", "must be at least 1".into()));
        }
        for (param, v) in [
            ("max_running", cfg.max_running),
            ("max_batch_tokens", cfg.max_batch_tokens),
            ("max_waiting", cfg.max_waiting),
        ] {
            if v == 0 {
                return Err(invalid(param, "must be at least 1".into()));
            }
        }
        if let Some(eos) = cfg.eos_token {
            if eos as usize >= model_cfg.vocab_size {
                return Err(invalid(
                    "eos_token",
                    format!(
                        "token {eos} is outside the vocabulary of {}",
                        model_cfg.vocab_size
                    ),
                ));
            }
        }
        // The pool's limits (slots, cache tensor elements) before any cache tensor is made: a
        // huge `kv_blocks` is an error, not an allocation failure.
        let cache = crate::engine::check_pool(model_cfg, cfg.kv_blocks, cfg.block_size)?;
        let mut model = Model::new(model_cfg, weights, cfg.kv_blocks, cfg.block_size)?;
        model.dense_prefill = cfg.dense_prefill;
        model.batch_invariant = cfg.batch_invariant;
        let sched = Scheduler::new(
            SchedulerConfig {
                max_running: cfg.max_running,
                max_batch_tokens: cfg.max_batch_tokens,
                prefix_caching: cfg.prefix_caching,
            },
            cache,
        );
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            metrics: Metrics::default(),
            queued: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            accepting: AtomicBool::new(true),
            vocab: model_cfg.vocab_size,
            cfg,
            thread: Mutex::new(None),
        });
        shared
            .metrics
            .update(|m| m.kv_blocks_free = shared.cfg.kv_blocks);
        let mut engine = Engine {
            model,
            sched,
            rx,
            shared: shared.clone(),
            detok,
            reqs: HashMap::new(),
            shutdown: false,
        };
        let t = std::thread::Builder::new()
            .name("tileops-engine".into())
            .spawn(move || engine.run())
            .map_err(|e| invalid("engine", format!("cannot start the engine thread: {e}")))?;
        *shared.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
        Ok(EngineHandle { tx, shared })
    }

    fn run(&mut self) {
        loop {
            if self.sched.is_idle() {
                if self.shutdown {
                    break;
                }
                match self.rx.recv() {
                    Ok(c) => self.command(c),
                    Err(_) => break,
                }
            }
            while let Ok(c) = self.rx.try_recv() {
                self.command(c);
            }
            if !self.sched.is_idle() {
                self.step();
            }
            self.publish();
        }
        self.publish();
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::Submit {
                ids,
                req,
                sinks,
                arrival,
            } => {
                for (i, (&id, sink)) in ids.iter().zip(sinks).enumerate() {
                    let mut sampling = req.sampling.clone();
                    sampling.seed = sampling.seed.wrapping_add(i as u64);
                    self.reqs.insert(
                        id,
                        ReqState {
                            sampler: Sampler::new(sampling),
                            text: TextState::new(&req.stop),
                            sink,
                            max_tokens: req.max_tokens,
                            prompt_len: req.prompt.len(),
                            logprobs: req.logprobs,
                            arrival,
                            last_token: None,
                        },
                    );
                }
                self.sched.add_group(&ids, req.prompt);
            }
            Command::Cancel(id) => self.end(id, FinishReason::Cancelled, String::new()),
            Command::Shutdown { cancel } => {
                self.shutdown = true;
                if cancel {
                    let (run, wait) = self.sched.ids();
                    for id in run.into_iter().chain(wait) {
                        self.end(id, FinishReason::Cancelled, String::new());
                    }
                }
            }
        }
    }

    /// Ends `id`: frees its blocks and sends `Finished` (if it is still tracked).
    fn end(&mut self, id: RequestId, reason: FinishReason, text: String) {
        let completion = self.sched.output(id).map_or(0, <[u32]>::len);
        let Some(admitted) = self.sched.finish(id) else {
            return;
        };
        if !admitted {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
        }
        let slot = match reason {
            FinishReason::Stop => 0,
            FinishReason::Length => 1,
            FinishReason::Cancelled => 2,
        };
        self.shared.metrics.update(|m| m.finished[slot] += 1);
        // The metrics show the end and the blocks free before the client hears of it.
        self.publish();
        if let Some(mut r) = self.reqs.remove(&id) {
            (r.sink)(Event::Finished {
                reason,
                text,
                prompt_tokens: r.prompt_len,
                completion_tokens: completion,
            });
        }
    }

    fn fail(&mut self, id: RequestId, msg: String) {
        if let Some(admitted) = self.sched.finish(id) {
            if !admitted {
                self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.shared.metrics.update(|m| m.finished[3] += 1);
        self.publish();
        if let Some(mut r) = self.reqs.remove(&id) {
            (r.sink)(Event::Error(msg));
        }
    }

    fn step(&mut self) {
        let step = self.sched.schedule();
        if !step.admitted.is_empty() {
            self.shared
                .queued
                .fetch_sub(step.admitted.len(), Ordering::AcqRel);
            let prompt: usize = step
                .admitted
                .iter()
                .filter_map(|id| self.reqs.get(id).map(|r| r.prompt_len))
                .sum();
            self.shared
                .metrics
                .update(|m| m.prompt_tokens += prompt as u64);
        }
        if step.seqs.is_empty() {
            // Only if the queue's head cannot fit an empty pool: never for a validated request.
            let (_, wait) = self.sched.ids();
            if self.sched.num_running() == 0 {
                if let Some(&id) = wait.first() {
                    self.fail(id, "the request does not fit the KV pool".into());
                }
            }
            return;
        }
        let logits = self.forward(&step);
        let logits = match logits {
            Ok(l) => l,
            Err(e) => {
                let msg = format!("model step failed: {e}");
                for s in &step.seqs {
                    self.fail(s.id, msg.clone());
                }
                return;
            }
        };
        let mut sampled = Vec::new();
        let mut logprobs = HashMap::new();
        let mut rows = logits.iter();
        for s in step.seqs.iter().filter(|s| s.samples) {
            let Some(l) = rows.next() else { break };
            // The sequence's own choice, then the choices forking from its prompt.
            let forks = self.sched.pending_forks(s.id).to_vec();
            for id in std::iter::once(s.id).chain(forks) {
                if let Some(r) = self.reqs.get_mut(&id) {
                    let tok = r.sampler.sample(l);
                    if let Some(k) = r.logprobs {
                        logprobs.insert(id, TokenLogprob::new(l, tok, k));
                    }
                    sampled.push((id, tok));
                }
            }
        }
        self.sched.commit(&step, &sampled);
        // The metrics show this step's state before any client sees its tokens.
        self.publish();
        let now = Instant::now();
        let max_len = self.shared.cfg.max_model_len;
        let eos = self.shared.cfg.eos_token;
        let rows: usize = step.seqs.iter().map(|s| s.tokens.len()).sum();
        self.shared.metrics.update(|m| {
            m.steps += 1;
            m.forward_tokens += rows as u64;
            m.generated_tokens += sampled.len() as u64;
        });
        for (id, tok) in sampled {
            let Some(out) = self.sched.output(id).map(<[u32]>::to_vec) else {
                continue;
            };
            let Some(r) = self.reqs.get_mut(&id) else {
                continue;
            };
            let lat = now.duration_since(r.last_token.unwrap_or(r.arrival));
            let first = r.last_token.is_none();
            self.shared.metrics.update(|m| {
                if first {
                    m.ttft.observe(lat.as_secs_f64());
                } else {
                    m.itl.observe(lat.as_secs_f64());
                }
            });
            r.last_token = Some(now);
            let is_eos = eos == Some(tok);
            let text_ids = if is_eos {
                &out[..out.len() - 1]
            } else {
                &out[..]
            };
            let decoded = self.detok.detokenize(text_ids);
            let t = r.text.advance(&decoded, false);
            let reason = if is_eos || t.stopped {
                Some(FinishReason::Stop)
            } else if out.len() >= r.max_tokens || r.prompt_len + out.len() >= max_len {
                Some(FinishReason::Length)
            } else {
                None
            };
            let tail = match reason {
                Some(FinishReason::Stop) if t.stopped => String::new(),
                Some(_) => r.text.advance(&decoded, true).text,
                None => String::new(),
            };
            let alive = (r.sink)(Event::Token {
                token: tok,
                text: t.text,
                logprob: logprobs.remove(&id),
            });
            match (alive, reason) {
                (false, _) => self.end(id, FinishReason::Cancelled, String::new()),
                (true, Some(reason)) => self.end(id, reason, tail),
                (true, None) => {}
            }
        }
    }

    fn forward(&mut self, step: &scheduler::Step) -> Result<Vec<Vec<f32>>, ModelError> {
        let backend = self.shared.cfg.backend;
        for &c in &step.copies {
            self.model.copy_block(c, backend)?;
        }
        let batch = self.sched.batch(step)?;
        let last: Vec<usize> = batch
            .seqs
            .iter()
            .zip(&step.seqs)
            .filter(|(_, s)| s.samples)
            .map(|(b, _)| b.first_row + b.rows - 1)
            .collect();
        if last.is_empty() {
            // Only prefill chunks that end mid-prompt: the rows still write the cache.
            let one: Vec<usize> = batch
                .seqs
                .first()
                .map(|s| s.first_row)
                .into_iter()
                .collect();
            self.model.forward(&batch, &one, backend)?;
            return Ok(Vec::new());
        }
        let logits = to_vec_f32(&self.model.forward(&batch, &last, backend)?)?;
        let vocab = self.model.config().vocab_size;
        Ok(logits.chunks(vocab).map(<[f32]>::to_vec).collect())
    }

    fn publish(&self) {
        let c = self.sched.cache();
        let (running, waiting) = (self.sched.num_running(), self.sched.num_waiting());
        let pre = self.sched.preemptions();
        let p = self.sched.prefix_cache();
        let (cached, evictable) = (p.len(), p.evictable(c));
        let (hits, queries) = (p.hit_tokens, p.query_tokens);
        self.shared.metrics.update(|m| {
            m.prefix_cache_blocks = cached;
            m.prefix_cache_evictable_blocks = evictable;
            m.prefix_cache_hit_tokens = hits;
            m.prefix_cache_query_tokens = queries;
            m.running = running;
            m.waiting = waiting;
            m.kv_blocks_free = c.free_blocks();
            m.kv_blocks_used = c.num_blocks() - c.free_blocks();
            m.preemptions = pre;
        });
    }
}

impl EngineHandle {
    /// The configuration in force (`max_model_len` capped at the model's).
    pub fn config(&self) -> &EngineConfig {
        &self.shared.cfg
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Checks `req` against the limits without submitting it.
    pub fn validate(&self, req: &GenerateRequest) -> Result<(), ServingError> {
        let cfg = &self.shared.cfg;
        let n = req.prompt.len();
        if n == 0 {
            return Err(invalid("prompt", "the prompt is empty".into()));
        }
        if let Some(t) = req
            .prompt
            .iter()
            .find(|&&t| t as usize >= self.shared.vocab)
        {
            return Err(invalid(
                "prompt",
                format!(
                    "token {t} is outside the vocabulary of {}",
                    self.shared.vocab
                ),
            ));
        }
        if n > cfg.max_model_len {
            return Err(invalid(
                "prompt",
                format!(
                    "the prompt has {n} tokens; the maximum context length is {}",
                    cfg.max_model_len
                ),
            ));
        }
        if req.max_tokens == 0 {
            return Err(invalid(
                "max_tokens",
                "max_tokens must be at least 1".into(),
            ));
        }
        let total = n.saturating_add(req.max_tokens);
        if total > cfg.max_model_len {
            return Err(invalid(
                "max_tokens",
                format!(
                    "the prompt's {n} tokens plus max_tokens {} exceed the maximum context length {}",
                    req.max_tokens, cfg.max_model_len
                ),
            ));
        }
        let blocks = total.div_ceil(cfg.block_size);
        if blocks > cfg.kv_blocks {
            return Err(invalid(
                "max_tokens",
                format!(
                    "the request needs {blocks} KV blocks; the pool has {}",
                    cfg.kv_blocks
                ),
            ));
        }
        req.sampling.validate().map_err(|(p, m)| invalid(p, m))?;
        if req.stop.len() > MAX_STOP_STRINGS {
            return Err(invalid(
                "stop",
                format!("at most {MAX_STOP_STRINGS} stop strings"),
            ));
        }
        Ok(())
    }

    /// Validates and queues `req`; its events go to `sink`. Returns its id.
    pub fn submit(&self, req: GenerateRequest, sink: EventSink) -> Result<RequestId, ServingError> {
        let ids = self.submit_choices(req, vec![sink])?;
        ids.first().copied().ok_or(ServingError::ShuttingDown)
    }

    /// Validates and queues `sinks.len()` completions of `req` (OpenAI's `n`), one id per choice:
    /// choice `i` samples with seed `req.sampling.seed + i` and its events go to `sinks[i]`. The
    /// prompt is computed once; when it is, every choice samples its first token from its
    /// logits and continues on a fork of its cache sequence (the prompt's blocks shared), so
    /// each choice's tokens are the ones it would get as a request of its own. Each choice takes
    /// a place in the waiting queue; cancel them one by one.
    pub fn submit_choices(
        &self,
        req: GenerateRequest,
        sinks: Vec<EventSink>,
    ) -> Result<Vec<RequestId>, ServingError> {
        if !self.shared.accepting.load(Ordering::Acquire) {
            return Err(ServingError::ShuttingDown);
        }
        self.validate(&req)?;
        let n = sinks.len();
        let most = self.shared.cfg.max_running.min(MAX_CHOICES);
        if n == 0 || n > most {
            return Err(invalid(
                "n",
                format!("{n} choices: a request has 1 to {most} (at most max_running run at once)"),
            ));
        }
        let max = self.shared.cfg.max_waiting;
        self.shared
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                q.checked_add(n).filter(|&t| t <= max)
            })
            .map_err(|_| ServingError::QueueFull(max))?;
        let first = self.shared.next_id.fetch_add(n as u64, Ordering::Relaxed);
        let ids: Vec<RequestId> = (0..n as u64).map(|i| first + i).collect();
        let cmd = Command::Submit {
            ids: ids.clone(),
            req,
            sinks,
            arrival: Instant::now(),
        };
        if self.tx.send(cmd).is_err() {
            self.shared.queued.fetch_sub(n, Ordering::AcqRel);
            return Err(ServingError::ShuttingDown);
        }
        Ok(ids)
    }

    /// Cancels `id` (a no-op if it already ended): its blocks are freed at the next step.
    pub fn cancel(&self, id: RequestId) {
        let _ = self.tx.send(Command::Cancel(id));
    }

    /// Stops accepting requests, then either lets the running and waiting ones finish
    /// (`cancel` false) or cancels them, and waits for the engine thread to end.
    pub fn shutdown(&self, cancel: bool) {
        self.shared.accepting.store(false, Ordering::Release);
        let _ = self.tx.send(Command::Shutdown { cancel });
        let t = self
            .shared
            .thread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }

    /// Stops accepting new requests (`submit` then fails with [`ServingError::ShuttingDown`]);
    /// queued and running ones go on.
    pub fn stop_accepting(&self) {
        self.shared.accepting.store(false, Ordering::Release);
    }

    /// Whether the engine accepts requests.
    pub fn is_accepting(&self) -> bool {
        self.shared.accepting.load(Ordering::Acquire)
    }
}
