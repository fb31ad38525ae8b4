//! The OpenAI-compatible HTTP server over the serving engine (`tileops_models::serving`).
//!
//! The HTTP layer only translates: it parses and checks a request, turns it into a
//! [`GenerateRequest`], submits it to the engine and turns the engine's events into OpenAI
//! responses or server-sent-event chunks. The engine decides everything else (batching,
//! admission, preemption, stopping). Routes: `POST /v1/completions`,
//! `POST /v1/chat/completions`, `GET /v1/models`, `GET /health`, `GET /metrics`.

pub mod openai;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use openai::{ChatRequest, CompletionRequest, ErrorBody, ErrorObject, Prompt, Usage};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tileops_models::serving::request::{
    Event, EventSink, FinishReason, GenerateRequest, RequestId, TokenLogprob,
};
use tileops_models::serving::sampler::SamplingParams;
use tileops_models::serving::{EngineHandle, ServingError};
use tileops_models::tokenizer::Tokenizer;
use tokio::sync::mpsc;

/// Request bodies larger than this get a 413.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Most choices (`n`) one request may ask for.
pub const MAX_CHOICES: usize = 8;

/// `max_tokens` of a completion request that gives none (OpenAI's default).
pub const DEFAULT_COMPLETION_MAX_TOKENS: usize = 16;

/// What the handlers share.
pub struct AppState {
    /// The engine.
    pub engine: EngineHandle,
    /// The tokenizer (prompts in, the engine decodes text out).
    pub tokenizer: Arc<Tokenizer>,
    /// The model id clients must name.
    pub model_name: String,
    /// A request that runs longer than this is cancelled (`None`: no limit).
    pub request_timeout: Option<Duration>,
    created: u64,
    next: AtomicU64,
}

impl AppState {
    /// The state of a server for `engine`.
    pub fn new(
        engine: EngineHandle,
        tokenizer: Arc<Tokenizer>,
        model_name: String,
        request_timeout: Option<Duration>,
    ) -> Arc<AppState> {
        Arc::new(AppState {
            engine,
            tokenizer,
            model_name,
            request_timeout,
            created: unix_now(),
            next: AtomicU64::new(0),
        })
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The router of every route.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found_error",
                "no such route",
                None,
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// An OpenAI-style error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(
        status: StatusCode,
        kind: &str,
        message: impl Into<String>,
        param: Option<&str>,
    ) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                error: ErrorObject {
                    message: message.into(),
                    kind: kind.into(),
                    param: param.map(str::to_string),
                    code: None,
                },
            },
            retry_after: None,
        }
    }

    fn bad(message: impl Into<String>, param: Option<&str>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            message,
            param,
        )
    }

    fn code(mut self, code: &str) -> Self {
        self.body.error.code = Some(code.into());
        self
    }

    fn from_serving(e: ServingError, prompt_param: &str) -> Self {
        match e {
            ServingError::Invalid { param, msg } => {
                let p = if param == "prompt" {
                    prompt_param
                } else {
                    param
                };
                let code = if msg.contains("context length") || msg.contains("KV blocks") {
                    "context_length_exceeded"
                } else {
                    "invalid_value"
                };
                Self::bad(msg, Some(p)).code(code)
            }
            ServingError::QueueFull(_) => {
                let mut e = Self::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    e.to_string(),
                    None,
                );
                e.retry_after = Some(1);
                e
            }
            ServingError::ShuttingDown => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                e.to_string(),
                None,
            ),
            ServingError::Model(_) => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                e.to_string(),
                None,
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(self.body)).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

/// Parses a JSON body: a syntax error is a 400, an unknown field a 400 naming it.
fn parse<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body =
        body.map_err(|e| ApiError::new(e.status(), "invalid_request_error", e.body_text(), None))?;
    serde_json::from_slice(&body).map_err(|e| {
        let msg = e.to_string();
        if let Some(rest) = msg.strip_prefix("unknown field `") {
            let field = rest.split('`').next().unwrap_or_default().to_string();
            return ApiError::bad(
                format!("unsupported parameter `{field}` (see docs/serving.md for the fields this server implements)"),
                Some(&field),
            )
            .code("unsupported_parameter");
        }
        ApiError::bad(format!("could not parse the JSON body: {msg}"), None)
    })
}

/// The fields both endpoints turn into a [`GenerateRequest`].
struct Params<'a> {
    model: &'a str,
    max_tokens: Option<usize>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<usize>,
    seed: Option<u64>,
    stop: Option<openai::Stop>,
    n: Option<usize>,
    logprobs: Option<usize>,
}

impl AppState {
    fn request(
        &self,
        prompt: Vec<u32>,
        p: Params<'_>,
        default_max: usize,
    ) -> Result<(GenerateRequest, usize), ApiError> {
        if p.model != self.model_name {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!(
                    "the model `{}` does not exist; this server serves `{}`",
                    p.model, self.model_name
                ),
                Some("model"),
            )
            .code("model_not_found"));
        }
        let n = p.n.unwrap_or(1);
        if !(1..=MAX_CHOICES).contains(&n) {
            return Err(
                ApiError::bad(format!("n = {n} is not in [1, {MAX_CHOICES}]"), Some("n"))
                    .code("invalid_value"),
            );
        }
        let sampling = SamplingParams {
            temperature: p.temperature.unwrap_or(1.0),
            top_p: p.top_p.unwrap_or(1.0),
            top_k: p.top_k.unwrap_or(0),
            seed: p.seed.unwrap_or(0),
        };
        let max_model_len = self.engine.config().max_model_len;
        let max_tokens = match p.max_tokens {
            Some(m) => m,
            None => default_max
                .min(max_model_len.saturating_sub(prompt.len()))
                .max(1),
        };
        let req = GenerateRequest {
            prompt,
            max_tokens,
            sampling,
            stop: p.stop.map(openai::Stop::into_vec).unwrap_or_default(),
            logprobs: p.logprobs,
        };
        Ok((req, n))
    }

    fn encode(&self, text: &str, param: &str) -> Result<Vec<u32>, ApiError> {
        self.tokenizer
            .encode(text)
            .map_err(|e| ApiError::bad(format!("cannot tokenize the prompt: {e}"), Some(param)))
    }

    fn id(&self, prefix: &str) -> String {
        format!("{prefix}-{}", self.next.fetch_add(1, Ordering::Relaxed))
    }
}

/// Cancels a request when dropped before its end (the client went away, or timed out).
struct Guard {
    engine: EngineHandle,
    id: RequestId,
    done: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.done {
            self.engine.cancel(self.id);
        }
    }
}

/// The events of a request's choices, tagged with the choice's index.
type Events = mpsc::UnboundedReceiver<(usize, Event)>;

/// Submits the `n` choices of `req` as one group (the engine computes the prompt once and forks
/// it; choice `i` samples with seed `seed + i`); every event arrives on the returned receiver
/// tagged with its choice.
fn submit(
    state: &AppState,
    req: GenerateRequest,
    n: usize,
    prompt_param: &str,
) -> Result<(Vec<Guard>, Events), ApiError> {
    let (tx, rx) = mpsc::unbounded_channel();
    let sinks: Vec<EventSink> = (0..n)
        .map(|i| {
            let tx = tx.clone();
            Box::new(move |e| tx.send((i, e)).is_ok()) as EventSink
        })
        .collect();
    let ids = state
        .engine
        .submit_choices(req, sinks)
        .map_err(|e| ApiError::from_serving(e, prompt_param))?;
    let guards = ids
        .into_iter()
        .map(|id| Guard {
            engine: state.engine.clone(),
            id,
            done: false,
        })
        .collect();
    Ok((guards, rx))
}

/// Which response shape to produce.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Completion,
    Chat,
}

/// Everything a response needs besides the text.
struct Meta {
    kind: Kind,
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    /// Choices.
    n: usize,
    /// To spell tokens in log-probabilities.
    tok: Arc<Tokenizer>,
}

impl Meta {
    fn object(&self, stream: bool) -> &'static str {
        match (self.kind, stream) {
            (Kind::Completion, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        }
    }

    /// OpenAI's `logprobs` object of `items` (token, its log-probabilities); `offset` is the
    /// completion format's running text offset (the token strings' lengths so far).
    fn logprobs(&self, items: &[(u32, TokenLogprob)], offset: &mut usize) -> Value {
        let spell = |t: u32| self.tok.decode(&[t]).unwrap_or_default();
        match self.kind {
            Kind::Completion => {
                let mut tokens = Vec::new();
                let mut offsets = Vec::new();
                for (t, _) in items {
                    let s = spell(*t);
                    offsets.push(*offset);
                    *offset += s.len();
                    tokens.push(s);
                }
                let top: Vec<Value> = items
                    .iter()
                    .map(|(_, lp)| {
                        let m: serde_json::Map<String, Value> =
                            lp.top.iter().map(|&(t, l)| (spell(t), json!(l))).collect();
                        Value::Object(m)
                    })
                    .collect();
                json!({
                    "tokens": tokens,
                    "token_logprobs": items.iter().map(|(_, lp)| lp.logprob).collect::<Vec<_>>(),
                    "top_logprobs": top,
                    "text_offset": offsets,
                })
            }
            Kind::Chat => {
                let entry = |t: u32, l: f32| {
                    let s = spell(t);
                    json!({"token": s, "logprob": l, "bytes": s.as_bytes()})
                };
                let content: Vec<Value> = items
                    .iter()
                    .map(|(t, lp)| {
                        let mut e = entry(*t, lp.logprob);
                        e["top_logprobs"] = lp
                            .top
                            .iter()
                            .map(|&(t, l)| entry(t, l))
                            .collect::<Vec<_>>()
                            .into();
                        e
                    })
                    .collect();
                json!({ "content": content })
            }
        }
    }

    fn chunk(
        &self,
        index: usize,
        text: Option<&str>,
        finish: Option<&str>,
        first: bool,
        logprobs: Option<Value>,
    ) -> Value {
        let logprobs = logprobs.unwrap_or(Value::Null);
        let choice = match self.kind {
            Kind::Completion => json!({
                "index": index, "text": text.unwrap_or(""), "logprobs": logprobs, "finish_reason": finish
            }),
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if first {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(t) = text {
                    delta.insert("content".into(), json!(t));
                }
                json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
            }
        };
        let mut v = json!({
            "id": self.id, "object": self.object(true), "created": self.created,
            "model": self.model, "choices": [choice],
        });
        if self.include_usage {
            v["usage"] = Value::Null;
        }
        v
    }

    fn whole(&self, choices: &[(String, &'static str, Option<Value>)], usage: Usage) -> Value {
        let choices: Vec<Value> = choices
            .iter()
            .enumerate()
            .map(|(i, (text, finish, lp))| match self.kind {
                Kind::Completion => json!({
                    "index": i, "text": text, "logprobs": lp, "finish_reason": finish
                }),
                Kind::Chat => json!({
                    "index": i, "message": {"role": "assistant", "content": text},
                    "logprobs": lp, "finish_reason": finish
                }),
            })
            .collect();
        json!({
            "id": self.id, "object": self.object(false), "created": self.created,
            "model": self.model, "choices": choices, "usage": usage,
        })
    }

    fn usage_chunk(&self, usage: Usage) -> Value {
        json!({
            "id": self.id, "object": self.object(true), "created": self.created,
            "model": self.model, "choices": [], "usage": usage,
        })
    }
}

fn usage(prompt: usize, completion: usize) -> Usage {
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
    }
}

async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let r: CompletionRequest = parse(body)?;
    let prompt = match &r.prompt {
        Prompt::Text(t) => state.encode(t, "prompt")?,
        Prompt::Texts(v) if v.len() == 1 => state.encode(&v[0], "prompt")?,
        Prompt::Texts(v) => {
            return Err(ApiError::bad(
                format!(
                    "{} prompts in one request are not supported (only one)",
                    v.len()
                ),
                Some("prompt"),
            ))
        }
        Prompt::Tokens(t) => t.clone(),
    };
    let include_usage = stream_usage(r.stream, r.stream_options.as_ref())?;
    let (req, n) = state.request(
        prompt,
        Params {
            model: &r.model,
            max_tokens: r.max_tokens,
            temperature: r.temperature,
            top_p: r.top_p,
            top_k: r.top_k,
            seed: r.seed,
            stop: r.stop.clone(),
            n: r.n,
            logprobs: match r.logprobs {
                Some(k) if k > 5 => {
                    return Err(ApiError::bad(
                        format!("logprobs = {k} is not in [0, 5]"),
                        Some("logprobs"),
                    )
                    .code("invalid_value"))
                }
                k => k,
            },
        },
        DEFAULT_COMPLETION_MAX_TOKENS,
    )?;
    let meta = Meta {
        kind: Kind::Completion,
        id: state.id("cmpl"),
        created: unix_now(),
        model: state.model_name.clone(),
        include_usage,
        n,
        tok: state.tokenizer.clone(),
    };
    respond(&state, req, meta, r.stream, "prompt").await
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let r: ChatRequest = parse(body)?;
    if r.messages.is_empty() {
        return Err(ApiError::bad(
            "messages must not be empty",
            Some("messages"),
        ));
    }
    let text = openai::chat_prompt(&r.messages).map_err(|i| {
        ApiError::bad(
            format!("messages[{i}].role must be system, user or assistant"),
            Some("messages"),
        )
    })?;
    let prompt = state.encode(&text, "messages")?;
    let include_usage = stream_usage(r.stream, r.stream_options.as_ref())?;
    let default_max = usize::MAX;
    let (req, n) = state.request(
        prompt,
        Params {
            model: &r.model,
            max_tokens: r.max_completion_tokens.or(r.max_tokens),
            temperature: r.temperature,
            top_p: r.top_p,
            top_k: r.top_k,
            seed: r.seed,
            stop: r.stop.clone(),
            n: r.n,
            logprobs: match (r.logprobs, r.top_logprobs) {
                (_, Some(k)) if k > 20 => {
                    return Err(ApiError::bad(
                        format!("top_logprobs = {k} is not in [0, 20]"),
                        Some("top_logprobs"),
                    )
                    .code("invalid_value"))
                }
                (Some(true), k) => Some(k.unwrap_or(0)),
                (_, Some(_)) => {
                    return Err(ApiError::bad(
                        "top_logprobs needs logprobs: true",
                        Some("top_logprobs"),
                    ))
                }
                _ => None,
            },
        },
        default_max,
    )?;
    let meta = Meta {
        kind: Kind::Chat,
        id: state.id("chatcmpl"),
        created: unix_now(),
        model: state.model_name.clone(),
        include_usage,
        n,
        tok: state.tokenizer.clone(),
    };
    respond(&state, req, meta, r.stream, "messages").await
}

fn stream_usage(stream: bool, o: Option<&openai::StreamOptions>) -> Result<bool, ApiError> {
    match o {
        Some(_) if !stream => Err(ApiError::bad(
            "stream_options is only allowed with stream: true",
            Some("stream_options"),
        )),
        Some(o) => Ok(o.include_usage),
        None => Ok(false),
    }
}

async fn respond(
    state: &Arc<AppState>,
    req: GenerateRequest,
    meta: Meta,
    stream: bool,
    prompt_param: &str,
) -> Result<Response, ApiError> {
    tracing::info!(
        id = %meta.id,
        prompt_tokens = req.prompt.len(),
        max_tokens = req.max_tokens,
        n = meta.n,
        stream,
        "request"
    );
    let req_logprobs = req.logprobs.is_some();
    let (guards, rx) = submit(state, req, meta.n, prompt_param).inspect_err(|e| {
        tracing::info!(id = %meta.id, status = e.status.as_u16(), "refused");
    })?;
    let deadline = state
        .request_timeout
        .map(|t| tokio::time::Instant::now() + t);
    if stream {
        return Ok(Sse::new(sse_stream(meta, guards, rx, deadline)).into_response());
    }
    let (mut guards, mut rx) = (guards, rx);
    let mut texts = vec![String::new(); meta.n];
    let mut lps: Vec<Vec<(u32, TokenLogprob)>> = vec![Vec::new(); meta.n];
    let mut finish: Vec<Option<&'static str>> = vec![None; meta.n];
    let (mut prompt, mut completion) = (0, 0);
    while finish.iter().any(Option::is_none) {
        let ev = match deadline {
            Some(d) => match tokio::time::timeout_at(d, rx.recv()).await {
                Ok(e) => e,
                Err(_) => {
                    return Err(ApiError::new(
                        StatusCode::GATEWAY_TIMEOUT,
                        "timeout_error",
                        "the request ran past the server's request timeout",
                        None,
                    ))
                }
            },
            None => rx.recv().await,
        };
        match ev {
            Some((
                i,
                Event::Token {
                    text: t,
                    token,
                    logprob,
                },
            )) => {
                texts[i].push_str(&t);
                if let Some(lp) = logprob {
                    lps[i].push((token, lp));
                }
            }
            Some((
                i,
                Event::Finished {
                    reason,
                    text: t,
                    prompt_tokens,
                    completion_tokens,
                },
            )) => {
                guards[i].done = true;
                texts[i].push_str(&t);
                if reason == FinishReason::Cancelled {
                    return Err(ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "server_error",
                        "the request was cancelled (server shutting down)",
                        None,
                    ));
                }
                prompt = prompt_tokens;
                completion += completion_tokens;
                finish[i] = Some(reason.as_openai());
            }
            Some((i, Event::Error(m))) => {
                guards[i].done = true;
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    m,
                    None,
                ));
            }
            None => {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    "the engine stopped",
                    None,
                ))
            }
        }
    }
    let wants_lp = req_logprobs;
    let choices: Vec<(String, &'static str, Option<Value>)> = texts
        .into_iter()
        .zip(finish)
        .zip(lps)
        .map(|((t, f), lp)| {
            let lp = wants_lp.then(|| meta.logprobs(&lp, &mut 0));
            (t, f.unwrap_or("stop"), lp)
        })
        .collect();
    Ok(Json(meta.whole(&choices, usage(prompt, completion))).into_response())
}

struct StreamState {
    meta: Meta,
    guards: Vec<Guard>,
    rx: Events,
    deadline: Option<tokio::time::Instant>,
    first: Vec<bool>,
    offsets: Vec<usize>,
    open: usize,
    prompt: usize,
    completion: usize,
    pending: VecDeque<String>,
    finished: bool,
}

fn sse_stream(
    meta: Meta,
    guards: Vec<Guard>,
    rx: Events,
    deadline: Option<tokio::time::Instant>,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let n = meta.n;
    let st = StreamState {
        meta,
        guards,
        rx,
        deadline,
        first: vec![true; n],
        offsets: vec![0; n],
        open: n,
        prompt: 0,
        completion: 0,
        pending: VecDeque::new(),
        finished: false,
    };
    stream::unfold(st, |mut st| async move {
        loop {
            if let Some(data) = st.pending.pop_front() {
                return Some((Ok(SseEvent::default().data(data)), st));
            }
            if st.finished {
                return None;
            }
            let ev = match st.deadline {
                Some(d) => tokio::time::timeout_at(d, st.rx.recv())
                    .await
                    .unwrap_or(None),
                None => st.rx.recv().await,
            };
            match ev {
                Some((
                    i,
                    Event::Token {
                        text,
                        token,
                        logprob,
                    },
                )) => {
                    if text.is_empty() && !st.first[i] && logprob.is_none() {
                        continue;
                    }
                    let lp = logprob.map(|lp| st.meta.logprobs(&[(token, lp)], &mut st.offsets[i]));
                    let c = st.meta.chunk(i, Some(&text), None, st.first[i], lp);
                    st.first[i] = false;
                    st.pending.push_back(c.to_string());
                }
                Some((
                    i,
                    Event::Finished {
                        reason,
                        text,
                        prompt_tokens,
                        completion_tokens,
                    },
                )) => {
                    st.guards[i].done = true;
                    let t = (!text.is_empty()).then_some(text.as_str());
                    let c = st
                        .meta
                        .chunk(i, t, Some(reason.as_openai()), st.first[i], None);
                    st.first[i] = false;
                    st.pending.push_back(c.to_string());
                    st.prompt = prompt_tokens;
                    st.completion += completion_tokens;
                    st.open -= 1;
                    if st.open == 0 {
                        if st.meta.include_usage {
                            let u = usage(st.prompt, st.completion);
                            st.pending.push_back(st.meta.usage_chunk(u).to_string());
                        }
                        st.pending.push_back("[DONE]".into());
                        st.finished = true;
                    }
                }
                Some((i, Event::Error(m))) => {
                    st.guards[i].done = true;
                    let e = json!({"error": {"message": m, "type": "server_error", "param": null, "code": null}});
                    st.pending.push_back(e.to_string());
                    st.pending.push_back("[DONE]".into());
                    st.finished = true;
                }
                None => {
                    // The engine went away or the timeout passed: end the stream (the guards
                    // cancel the requests still open).
                    for i in 0..st.meta.n {
                        if !st.guards[i].done {
                            let c = st.meta.chunk(i, None, Some("length"), st.first[i], None);
                            st.pending.push_back(c.to_string());
                        }
                    }
                    st.pending.push_back("[DONE]".into());
                    st.finished = true;
                }
            }
        }
    })
}

async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.model_name, "object": "model", "created": state.created,
            "owned_by": "tileops", "max_model_len": state.engine.config().max_model_len,
        }],
    }))
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    if state.engine.is_accepting() {
        (StatusCode::OK, Json(json!({"status": "ok"}))).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "shutting down"})),
        )
            .into_response()
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.engine.metrics().render(),
    )
        .into_response()
}

/// Serves `state` on `listener` until `shutdown` resolves, then drains the open connections
/// (running streams finish) and returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
