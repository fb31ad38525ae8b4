//! The engine's counters and latency histograms, rendered as Prometheus text.

use std::fmt::Write as _;
use std::sync::Mutex;

/// Upper bounds (seconds) of the latency histograms' buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A cumulative histogram over [`LATENCY_BUCKETS`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations at most each bound (not cumulative; rendered cumulatively).
    pub buckets: [u64; LATENCY_BUCKETS.len()],
    /// Observations in all.
    pub count: u64,
    /// Their sum (seconds).
    pub sum: f64,
}

impl Histogram {
    /// Records one observation of `secs`.
    pub fn observe(&mut self, secs: f64) {
        if let Some(i) = LATENCY_BUCKETS.iter().position(|&b| secs <= b) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum += secs;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut acc = 0;
        for (b, n) in LATENCY_BUCKETS.iter().zip(self.buckets) {
            acc += n;
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {acc}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", self.sum, self.count);
    }
}

/// A snapshot of the engine's state and totals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// Requests running (holding KV blocks).
    pub running: usize,
    /// Requests waiting (new or preempted).
    pub waiting: usize,
    /// KV blocks held.
    pub kv_blocks_used: usize,
    /// KV blocks free.
    pub kv_blocks_free: usize,
    /// Prompt tokens of finished-or-running requests, counted once at admission.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Blocks in the prefix cache.
    pub prefix_cache_blocks: usize,
    /// Of those, blocks only the cache holds (evictable).
    pub prefix_cache_evictable_blocks: usize,
    /// Prompt tokens found in the prefix cache at admission.
    pub prefix_cache_hit_tokens: u64,
    /// Prompt tokens looked up at admission.
    pub prefix_cache_query_tokens: u64,
    /// Requests finished, by reason: stop, length, cancelled, error.
    pub finished: [u64; 4],
    /// Forward passes run.
    pub steps: u64,
    /// Token rows run through the model (prompt chunks, recomputes and decodes).
    pub forward_tokens: u64,
    /// Time to first token (from submission).
    pub ttft: Histogram,
    /// Time between a request's successive tokens.
    pub itl: Histogram,
}

/// The engine's metrics, written by the engine thread and read by anyone.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<MetricsSnapshot>,
}

impl Metrics {
    /// Applies `f` to the counters.
    pub fn update(&self, f: impl FnOnce(&mut MetricsSnapshot)) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> MetricsSnapshot {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The counters in the Prometheus text format (names prefixed `tileops_`).
    pub fn render(&self) -> String {
        let s = self.snapshot();
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, kind: &str, v: String| {
            let _ = writeln!(
                out,
                "# HELP tileops_{name} {help}\n# TYPE tileops_{name} {kind}\ntileops_{name} {v}"
            );
        };
        gauge(
            "requests_running",
            "Requests holding KV blocks.",
            "gauge",
            s.running.to_string(),
        );
        gauge(
            "requests_waiting",
            "Requests queued (new or preempted).",
            "gauge",
            s.waiting.to_string(),
        );
        gauge(
            "kv_blocks_used",
            "KV-cache blocks held.",
            "gauge",
            s.kv_blocks_used.to_string(),
        );
        gauge(
            "kv_blocks_free",
            "KV-cache blocks free.",
            "gauge",
            s.kv_blocks_free.to_string(),
        );
        gauge(
            "prompt_tokens_total",
            "Prompt tokens admitted.",
            "counter",
            s.prompt_tokens.to_string(),
        );
        gauge(
            "generation_tokens_total",
            "Tokens generated.",
            "counter",
            s.generated_tokens.to_string(),
        );
        gauge(
            "preemptions_total",
            "Sequences preempted (to be recomputed).",
            "counter",
            s.preemptions.to_string(),
        );
        gauge(
            "engine_steps_total",
            "Forward passes run.",
            "counter",
            s.steps.to_string(),
        );
        gauge(
            "forward_tokens_total",
            "Token rows run through the model (prompt chunks, recomputes and decodes).",
            "counter",
            s.forward_tokens.to_string(),
        );
        gauge(
            "prefix_cache_blocks",
            "KV blocks in the prefix cache.",
            "gauge",
            s.prefix_cache_blocks.to_string(),
        );
        gauge(
            "prefix_cache_evictable_blocks",
            "Prefix-cache blocks no sequence holds.",
            "gauge",
            s.prefix_cache_evictable_blocks.to_string(),
        );
        gauge(
            "prefix_cache_hit_tokens_total",
            "Prompt tokens found in the prefix cache.",
            "counter",
            s.prefix_cache_hit_tokens.to_string(),
        );
        gauge(
            "prefix_cache_query_tokens_total",
            "Prompt tokens looked up in the prefix cache.",
            "counter",
            s.prefix_cache_query_tokens.to_string(),
        );
        let rate = if s.prefix_cache_query_tokens == 0 {
            0.0
        } else {
            s.prefix_cache_hit_tokens as f64 / s.prefix_cache_query_tokens as f64
        };
        gauge(
            "prefix_cache_hit_rate",
            "Prompt tokens found cached / looked up.",
            "gauge",
            rate.to_string(),
        );
        let _ = writeln!(
            out,
            "# HELP tileops_requests_finished_total Requests ended, by reason.\n# TYPE tileops_requests_finished_total counter"
        );
        for (r, n) in ["stop", "length", "cancelled", "error"]
            .iter()
            .zip(s.finished)
        {
            let _ = writeln!(out, "tileops_requests_finished_total{{reason=\"{r}\"}} {n}");
        }
        s.ttft.render(
            &mut out,
            "tileops_time_to_first_token_seconds",
            "Time from submission to the first token.",
        );
        s.itl.render(
            &mut out,
            "tileops_inter_token_latency_seconds",
            "Time between a request's successive tokens.",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_render_cumulatively() {
        let m = Metrics::default();
        m.update(|s| {
            s.ttft.observe(0.003);
            s.ttft.observe(0.2);
            s.ttft.observe(100.0);
            s.running = 2;
        });
        let text = m.render();
        assert!(text.contains("tileops_requests_running 2\n"));
        assert!(text.contains("tileops_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("tileops_time_to_first_token_seconds_bucket{le=\"0.25\"} 2\n"));
        assert!(text.contains("tileops_time_to_first_token_seconds_bucket{le=\"30\"} 2\n"));
        assert!(text.contains("tileops_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("tileops_time_to_first_token_seconds_count 3\n"));
    }
}
