//! The workspace's warm search index (`pi_native_ops_core::index`, Linux only): started by
//! `--index` or a client's `indexStart`, then read by every find and grep the server runs.
//! Elsewhere every index call answers the stats of an index that stays aside.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use pi_native_ops_core::root::Root;

#[cfg(target_os = "linux")]
use crate::wire::kind;
use crate::wire::{Answer, Failure, Op, WireError};

use pi_native_ops_core::index::Index;
#[cfg(target_os = "linux")]
use pi_native_ops_core::index::{IndexOptions, Stats};

/// What a find or grep is given: the index, when one was started.
pub type SearchIndex<'a> = Option<&'a Index>;

/// At most one index per server, for its whole life (a closed one stays closed).
#[derive(Default)]
pub struct WarmIndex {
    index: std::sync::OnceLock<Index>,
}

/// The stats as `fs.index.stats()` gives them (js/search-index.js), flat in the `ok` header.
#[cfg(target_os = "linux")]
fn stats_answer(s: Stats) -> Answer {
    fields(json!({
        "state": s.state.as_str(),
        "reason": s.reason,
        "files": s.files,
        "directories": s.directories,
        "bytesIndexed": s.bytes_indexed,
        "memoryBytes": s.memory_bytes,
        "buildMs": s.build_ms,
        "lastRefresh": s.last_refresh_unix_ms,
        "dirtyFiles": s.dirty_files,
        "unfilteredFiles": s.unfiltered_files,
        "watches": s.watches,
    }))
}

fn fields(value: Value) -> Answer {
    match value {
        Value::Object(map) => (map, Vec::new()),
        _ => (Map::new(), Vec::new()),
    }
}

impl WarmIndex {
    /// Starts the index unless one was started already.
    #[cfg(target_os = "linux")]
    pub fn start(&self, root: &Arc<Root>, max_watches: Option<f64>, max_file_bytes: Option<f64>) {
        self.index.get_or_init(|| {
            Index::start(
                Arc::clone(root),
                IndexOptions::from_raw(max_watches, max_file_bytes),
            )
        });
    }

    #[cfg(not(target_os = "linux"))]
    pub fn start(
        &self,
        _root: &Arc<Root>,
        _max_watches: Option<f64>,
        _max_file_bytes: Option<f64>,
    ) {
    }

    /// Closes the index, if one was started.
    pub fn close(&self) {
        #[cfg(target_os = "linux")]
        if let Some(index) = self.index.get() {
            index.close();
        }
    }

    pub fn search(&self) -> SearchIndex<'_> {
        self.index.get()
    }

    /// An index call (`Op::Index*`); blocks for `indexReady` until the first build ends.
    pub fn call(&self, root: &Arc<Root>, op: Op) -> Result<Answer, Failure> {
        if let Op::IndexStart {
            max_watches,
            max_file_bytes,
        } = op
        {
            self.start(root, max_watches, max_file_bytes);
            return self.call(root, Op::IndexStats);
        }
        #[cfg(target_os = "linux")]
        {
            let Some(index) = self.index.get() else {
                return Err(WireError::plain(
                    kind::NO_INDEX,
                    "no index: send indexStart first (or start the server with --index)",
                )
                .into());
            };
            match op {
                Op::IndexReady => Ok(stats_answer(index.wait_ready())),
                Op::IndexStats => Ok(stats_answer(index.stats())),
                Op::IndexClose => {
                    index.close();
                    Ok((Map::new(), Vec::new()))
                }
                _ => Err(WireError::protocol("not an index operation").into()),
            }
        }
        #[cfg(not(target_os = "linux"))]
        match op {
            Op::IndexReady | Op::IndexStats => Ok(fields(json!({
                "state": "aside",
                "reason": pi_native_ops_core::index::UNSUPPORTED,
                "files": 0,
                "directories": 0,
                "bytesIndexed": 0,
                "memoryBytes": 0,
                "buildMs": 0,
                "lastRefresh": null,
                "dirtyFiles": 0,
                "unfilteredFiles": 0,
                "watches": 0,
            }))),
            Op::IndexClose => Ok((Map::new(), Vec::new())),
            _ => Err(WireError::protocol("not an index operation").into()),
        }
    }
}
