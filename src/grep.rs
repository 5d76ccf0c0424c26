//! napi binding of the in-process grep (`pi_native_ops_core::grep`).

use napi::bindgen_prelude::AsyncTask;
use napi_derive::napi;

use crate::fs::BoundRoot;
use crate::{blocking, Blocking};
use pi_native_ops_core::grep::{self, RawQuery};
use pi_native_ops_core::Cancel;

/// A cancel flag a running search polls; `abort()` stops it promptly.
/// `filesSearched` tells how far the search got (final once it has settled).
#[napi]
pub struct GrepAbort {
    cancel: Cancel,
}

#[napi]
impl GrepAbort {
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        GrepAbort {
            cancel: Cancel::new(),
        }
    }

    #[napi]
    pub fn abort(&self) {
        self.cancel.cancel();
    }

    /// How many files the search has begun to read.
    #[napi(getter)]
    pub fn files_searched(&self) -> f64 {
        self.cancel.files_searched() as f64
    }
}

/// grep's options as JS gives them: the core's `RawQuery`, field for field
/// (the core decides their defaults and bounds).
#[napi(object)]
pub struct GrepOptions {
    pub pattern: String,
    /// Absolute path of the directory or file to search.
    pub path: String,
    /// Name a searched file's lines are shown under.
    pub display_name: String,
    pub ignore_case: bool,
    pub literal: bool,
    pub glob: Option<String>,
    pub context: Option<f64>,
    pub limit: Option<f64>,
    /// Store lines only while the output is under this many bytes.
    pub store_cap: Option<f64>,
}

impl From<GrepOptions> for RawQuery {
    fn from(o: GrepOptions) -> RawQuery {
        RawQuery {
            pattern: o.pattern,
            path: o.path,
            display_name: o.display_name,
            ignore_case: o.ignore_case,
            literal: o.literal,
            glob: o.glob,
            context: o.context,
            limit: o.limit,
            store_cap: o.store_cap,
        }
    }
}

/// pi's grep tool's output cut in bytes (`DEFAULT_MAX_BYTES`): the tool asks the search to store
/// lines only under it, and names it in its notice.
#[napi]
pub const GREP_MAX_OUTPUT_BYTES: u32 = grep::MAX_OUTPUT_BYTES as u32;

/// pi's grep line cut in UTF-16 units (`GREP_MAX_LINE_LENGTH`), named in the tool's notice.
#[napi]
pub const GREP_MAX_LINE_CHARS: u32 = grep::MAX_LINE_UNITS as u32;

/// The message of a cancelled operation (the core's `Aborted`).
#[napi]
pub const OPERATION_ABORTED: &str = pi_native_ops_core::error::ABORTED_MESSAGE;

#[napi(object)]
pub struct GrepLine {
    pub path: String,
    pub line_number: f64,
    pub text: String,
    pub is_match: bool,
}

#[napi(object)]
pub struct GrepResult {
    pub lines: Vec<GrepLine>,
    pub match_count: f64,
    /// The match limit the search ran with (defaults and bounds applied).
    pub limit: f64,
    pub match_limit_reached: bool,
    pub lines_truncated: bool,
    pub output_bytes: f64,
    pub output_lines: f64,
}

/// Searches like pi's grep tool; bounded by `root` when given.
#[napi(ts_return_type = "Promise<GrepResult>")]
pub fn grep_search(
    root: Option<&BoundRoot>,
    options: GrepOptions,
    abort: &GrepAbort,
) -> AsyncTask<Blocking<GrepResult>> {
    let index = root.and_then(BoundRoot::search_index);
    let root = root.map(|r| r.root.clone());
    let cancel = abort.cancel.clone();
    blocking(move || {
        let out = grep::search(root.as_deref(), options.into(), &cancel, index.as_ref())?;
        Ok(GrepResult {
            lines: out
                .lines
                .into_iter()
                .map(|l| GrepLine {
                    path: l.path.to_string(),
                    line_number: l.line_number as f64,
                    text: l.text,
                    is_match: l.is_match,
                })
                .collect(),
            match_count: out.match_count as f64,
            limit: out.limit as f64,
            match_limit_reached: out.match_limit_reached,
            lines_truncated: out.lines_truncated,
            output_bytes: out.output_bytes as f64,
            output_lines: out.output_lines as f64,
        })
    })
}
