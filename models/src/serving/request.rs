//! What a client asks of the engine and what the engine sends back.

use super::sampler::SamplingParams;

/// A request's id, unique within one engine.
pub type RequestId = u64;

/// One generation request: prompt tokens and how to continue them.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    /// Prompt token ids (at least one).
    pub prompt: Vec<u32>,
    /// Tokens to generate at most (at least one).
    pub max_tokens: usize,
    /// Sampling parameters.
    pub sampling: SamplingParams,
    /// Stop strings: generation ends before the first occurrence of any of them in the text.
    pub stop: Vec<String>,
    /// Report each token's log-probability and this many most likely alternatives
    /// (`None`: no log-probabilities).
    pub logprobs: Option<usize>,
}

/// A generated token's log-probability under the model's distribution (the raw logits'
/// log-softmax, before temperature, top-k and top-p), and the most likely tokens'.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The chosen token's.
    pub logprob: f32,
    /// The most likely tokens and theirs, most likely first (ties by id).
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprob {
    /// The log-probability of `token` and of the `top` most likely tokens in `logits`.
    pub fn new(logits: &[f32], token: u32, top: usize) -> Self {
        let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits.iter().map(|&l| ((l - m) as f64).exp()).sum();
        let lse = m as f64 + sum.ln();
        let lp = |l: f32| (l as f64 - lse) as f32;
        let mut order: Vec<usize> = (0..logits.len()).collect();
        let k = top.min(logits.len());
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        TokenLogprob {
            logprob: logits
                .get(token as usize)
                .map_or(f32::NEG_INFINITY, |&l| lp(l)),
            top: order[..k]
                .iter()
                .map(|&i| (i as u32, lp(logits[i])))
                .collect(),
        }
    }
}

/// Why a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens` or the model's context length.
    Length,
    /// Cancelled by the client (or the client went away) or by shutdown.
    Cancelled,
}

impl FinishReason {
    /// OpenAI's `finish_reason` string.
    pub fn as_openai(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// What the engine reports about one request, in order: tokens, then one `Finished` or `Error`.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A generated token and the text it releases (possibly empty: text that might begin a
    /// stop string or an incomplete UTF-8 character is held back).
    Token {
        /// The token id.
        token: u32,
        /// New text.
        text: String,
        /// Its log-probabilities, if the request asked.
        logprob: Option<TokenLogprob>,
    },
    /// The request is done; its blocks are free.
    Finished {
        /// Why.
        reason: FinishReason,
        /// Text held back until now (released at the end).
        text: String,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Tokens generated (a stop string's tokens included).
        completion_tokens: usize,
    },
    /// The model failed on this request's step; the request is ended and its blocks freed.
    Error(String),
}

/// Where a request's events go: returns `false` once nobody listens (the engine then cancels
/// the request and frees its blocks).
pub type EventSink = Box<dyn FnMut(Event) -> bool + Send>;

/// Turns token ids back into text (for stop strings and streamed text).
pub trait Detokenize: Send + Sync {
    /// The text of `ids`.
    fn detokenize(&self, ids: &[u32]) -> String;
}

impl Detokenize for crate::tokenizer::Tokenizer {
    /// The decoded text; a failed decode (an id the vocabulary lacks) gives U+FFFD.
    fn detokenize(&self, ids: &[u32]) -> String {
        self.decode(ids).unwrap_or_else(|_| "\u{fffd}".into())
    }
}

/// Incremental text of one request: how much of the decoded output was released, and the stop
/// strings to watch for.
#[derive(Debug, Clone, Default)]
pub struct TextState {
    stop: Vec<String>,
    sent: usize,
}

/// What [`TextState::advance`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextStep {
    /// Text to release now.
    pub text: String,
    /// A stop string was found (the text ends just before it).
    pub stopped: bool,
}

impl TextState {
    /// A state watching for `stop` (empty strings ignored).
    pub fn new(stop: &[String]) -> Self {
        TextState {
            stop: stop.iter().filter(|s| !s.is_empty()).cloned().collect(),
            sent: 0,
        }
    }

    /// Given the whole decoded output so far, the new text to release: up to a stop string
    /// (then `stopped`), else up to the longest tail that could begin a stop string or is an
    /// incomplete character (U+FFFD at the end); with `flush`, everything left.
    pub fn advance(&mut self, decoded: &str, flush: bool) -> TextStep {
        let from = self.sent.min(decoded.len());
        // A stop string may straddle released text: search from where it could start.
        let longest = self.stop.iter().map(String::len).max().unwrap_or(0);
        let mut search = from.saturating_sub(longest.saturating_sub(1));
        while !decoded.is_char_boundary(search) {
            search -= 1;
        }
        let hit = self
            .stop
            .iter()
            .filter_map(|s| decoded[search..].find(s.as_str()).map(|i| search + i))
            .min();
        if let Some(end) = hit {
            let end = end.max(from);
            let text = decoded[from..end].to_string();
            self.sent = end;
            return TextStep {
                text,
                stopped: true,
            };
        }
        let mut end = decoded.len();
        if !flush {
            if decoded.ends_with('\u{fffd}') {
                end -= '\u{fffd}'.len_utf8();
            }
            // Hold back the longest suffix that is a proper prefix of a stop string.
            let mut hold = 0;
            for s in &self.stop {
                for (k, _) in s.char_indices().skip(1) {
                    if k > hold && decoded[..end].ends_with(&s[..k]) {
                        hold = k;
                    }
                }
            }
            end -= hold;
        }
        let end = end.max(from);
        let text = decoded[from..end].to_string();
        self.sent = end;
        TextStep {
            text,
            stopped: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_hold_back_and_cut() {
        let mut t = TextState::new(&["END".into(), "xyz".into()]);
        assert_eq!(t.advance("abc", false).text, "abc");
        // "E" and "EN" might begin "END": held back.
        assert_eq!(t.advance("abc E", false).text, " ");
        assert_eq!(t.advance("abc EN", false).text, "");
        // Not a stop after all: released.
        assert_eq!(t.advance("abc ENx", false).text, "EN");
        let s = t.advance("abc ENxyz and more", false);
        assert_eq!((s.text.as_str(), s.stopped), ("", true));
        let mut t = TextState::new(&["END".into()]);
        assert_eq!(t.advance("ab\u{fffd}", false).text, "ab");
        assert_eq!(t.advance("abé", false).text, "é");
        let s = t.advance("abé fooEND", false);
        assert_eq!((s.text.as_str(), s.stopped), (" foo", true));
        let mut t = TextState::new(&[]);
        assert_eq!(t.advance("a\u{fffd}", true).text, "a\u{fffd}");
    }
}
