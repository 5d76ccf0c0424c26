//! napi binding of the warm search index (`pi_native_ops_core::index`, Linux only): its options
//! in, its stats out. A `BoundRoot` made with index options owns one (`crate::fs`); elsewhere
//! js/fs.js never asks for one.

use napi_derive::napi;

use pi_native_ops_core::index::Index;
#[cfg(target_os = "linux")]
use pi_native_ops_core::index::{IndexOptions, Stats};

/// `createBoundFs`'s `index` options, validated by js/args.js (absent: the core's default).
#[napi(object)]
pub struct IndexConfig {
    pub max_watches: Option<f64>,
    pub max_file_bytes: Option<f64>,
    /// `true`: the default cache directory; a string: that directory.
    pub cache: Option<napi::Either<bool, String>>,
    pub cache_max_bytes: Option<f64>,
}

#[cfg(target_os = "linux")]
impl From<IndexConfig> for IndexOptions {
    fn from(config: IndexConfig) -> IndexOptions {
        use pi_native_ops_core::index::CacheAt;
        let cache = match &config.cache {
            Some(napi::Either::A(true)) => Some(CacheAt::Default),
            Some(napi::Either::B(dir)) => Some(CacheAt::Dir(std::path::Path::new(dir))),
            _ => None,
        };
        IndexOptions::from_raw(config.max_watches, config.max_file_bytes)
            .with_cache(cache, config.cache_max_bytes)
    }
}

/// Why this platform keeps no index, `null` where it does (the core's
/// `index::UNSUPPORTED`): js/fs.js reports it as an index that stays aside.
#[napi]
pub fn index_unsupported() -> Option<String> {
    pi_native_ops_core::index::UNSUPPORTED.map(str::to_string)
}

/// What `fs.index.stats()` reads (js/search-index.js gives every field, `null` when absent).
#[napi(object)]
pub struct IndexStats {
    #[napi(ts_type = "'building' | 'ready' | 'aside' | 'closed'")]
    pub state: String,
    pub reason: Option<String>,
    pub files: f64,
    pub directories: f64,
    pub bytes_indexed: f64,
    pub memory_bytes: f64,
    pub build_ms: f64,
    /// Milliseconds since the epoch.
    pub last_refresh: Option<f64>,
    pub dirty_files: f64,
    pub unfiltered_files: f64,
    pub watches: f64,
    pub restored_files: f64,
    /// What the last build made of the cache: "restored", or why not.
    pub cache: Option<String>,
}

#[cfg(target_os = "linux")]
impl From<Stats> for IndexStats {
    fn from(s: Stats) -> IndexStats {
        IndexStats {
            state: s.state.as_str().to_string(),
            reason: s.reason,
            files: s.files as f64,
            directories: s.directories as f64,
            bytes_indexed: s.bytes_indexed as f64,
            memory_bytes: s.memory_bytes as f64,
            build_ms: s.build_ms,
            last_refresh: s.last_refresh_unix_ms,
            dirty_files: s.dirty_files as f64,
            unfiltered_files: s.unfiltered_files as f64,
            watches: s.watches as f64,
            restored_files: s.restored_files as f64,
            cache: s.cache,
        }
    }
}

// Elsewhere `Index` has no values (no root ever has one), so these are never called.

#[cfg(target_os = "linux")]
pub fn stats_of(index: &Index) -> IndexStats {
    index.stats().into()
}
#[cfg(target_os = "linux")]
pub fn ready_of(index: &Index) -> IndexStats {
    index.wait_ready().into()
}
#[cfg(target_os = "linux")]
pub fn close(index: &Index) {
    index.close()
}

#[cfg(not(target_os = "linux"))]
pub fn stats_of(index: &Index) -> IndexStats {
    match *index {}
}
#[cfg(not(target_os = "linux"))]
pub fn ready_of(index: &Index) -> IndexStats {
    match *index {}
}
#[cfg(not(target_os = "linux"))]
pub fn close(index: &Index) {
    match *index {}
}
