//! napi binding of find (`pi_native_ops_core::find`): argument and error conversion only.

use std::path::Path;

use napi::bindgen_prelude::AsyncTask;
use napi_derive::napi;

use crate::fs::BoundRoot;
use crate::{blocking, Blocking};
use pi_native_ops_core::find::{self, Search};

/// Absolute runtime paths of the entries matching `pattern` below `cwd`, in
/// path order, directories with a trailing `/`, at most `limit` of them
/// (absent: none; `Search::new` decides), each followed by a NUL (no path
/// holds one): one string crosses to JS rather than one per path, which
/// cost more than a warm search.
/// Names that are not UTF-8 come back with U+FFFD replacements (as pi's own
/// find reads fd's output), never dropped.
#[napi(ts_return_type = "Promise<string>")]
pub fn find_glob(
    root: &BoundRoot,
    pattern: String,
    cwd: String,
    ignore: Vec<String>,
    limit: Option<f64>,
) -> AsyncTask<Blocking<String>> {
    let index = root.search_index();
    let root = root.root.clone();
    blocking(move || {
        let search = Search::new(&pattern, &ignore, limit);
        let paths = find::glob(&root, Path::new(&cwd), &search, index.as_ref())?;
        let mut out = String::new();
        for p in paths {
            out.push_str(&p.to_string_lossy());
            out.push('\0');
        }
        Ok(out)
    })
}

/// Whether `path` exists; rejects for a path outside the workspace.
#[napi(ts_return_type = "Promise<boolean>")]
pub fn find_exists(root: &BoundRoot, path: String) -> AsyncTask<Blocking<bool>> {
    let root = root.root.clone();
    blocking(move || root.exists_inside(Path::new(&path)))
}
