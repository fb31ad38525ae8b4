//! Chrome / Perfetto trace of a timeline: one process per block, one track per pipe per core,
//! one slice per op, flags as flow arrows. Open the JSON at ui.perfetto.dev or chrome://tracing.

use super::timeline::{BlockTimeline, PIPES};
use super::trace::{core_index, CoreId, Trace};
use serde_json::{json, Value};

fn tid(core: usize, pipe: crate::ir::Pipe) -> usize {
    core * 16 + pipe.index().unwrap_or(0)
}

/// The trace as Chrome trace-event JSON; times in microseconds at `clock_ghz`.
pub fn chrome_trace(trace: &Trace, timelines: &[BlockTimeline], clock_ghz: f64) -> Value {
    let us = |cycles: f64| cycles / (clock_ghz * 1e3);
    let mut events: Vec<Value> = vec![];
    for (bt, tl) in trace.blocks.iter().zip(timelines) {
        let pid = tl.block;
        events.push(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": format!("block {pid}")}}));
        for (ci, core) in CoreId::ALL.iter().enumerate() {
            for pipe in PIPES {
                events.push(json!({
                    "ph": "M", "name": "thread_name", "pid": pid, "tid": tid(ci, pipe),
                    "args": {"name": format!("{core} {pipe}")}
                }));
                events.push(json!({
                    "ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid(ci, pipe),
                    "args": {"sort_index": tid(ci, pipe)}
                }));
            }
            for span in &tl.cores[ci] {
                let Some(e) = bt.cores[ci].events.get(span.event) else {
                    continue;
                };
                let bytes: usize = e.accesses.iter().map(|a| a.end - a.start).sum();
                events.push(json!({
                    "ph": "X", "pid": pid, "tid": tid(ci, span.pipe),
                    "name": e.op.name(),
                    "ts": us(span.start),
                    "dur": us((span.end - span.start).max(0.5)),
                    "args": {"op": e.loc.to_string(), "bytes": bytes, "pipe_busy_cycles": span.busy_until - span.start}
                }));
            }
        }
        for (i, f) in tl.flows.iter().enumerate() {
            let (fc, fi) = (core_index(f.from.0), f.from.1);
            let (tc, ti) = (core_index(f.to.0), f.to.1);
            let (Some(from), Some(to)) = (tl.cores[fc].get(fi), tl.cores[tc].get(ti)) else {
                continue;
            };
            let id = pid * 1_000_000 + i;
            events.push(json!({"ph": "s", "id": id, "pid": pid, "tid": tid(fc, from.pipe), "ts": us(from.start), "name": "flag", "cat": "sync"}));
            events.push(json!({"ph": "f", "bp": "e", "id": id, "pid": pid, "tid": tid(tc, to.pipe), "ts": us(to.start), "name": "flag", "cat": "sync"}));
        }
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns"})
}
