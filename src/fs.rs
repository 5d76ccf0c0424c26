//! napi binding of the bounded root (`pi_native_ops_core::root`).

#[cfg(unix)]
use std::os::fd::IntoRawFd;
use std::path::Path;
use std::sync::Arc;

use napi::bindgen_prelude::{
    AsyncTask, Buffer, Either, External, Float64ArraySlice, FromNapiValue, TypeName,
    ValidateNapiValue,
};
use napi::{sys, Env, Error, Result, Status, ValueType};
use napi_derive::napi;

use crate::error::to_js;
use crate::index::{close, ready_of, stats_of, IndexConfig, IndexStats};
use crate::{blocking, Blocking};
use pi_native_ops_core::image::{detect_image_mime, SNIFF_BYTES};
use pi_native_ops_core::index::Index;
use pi_native_ops_core::policy::{Policy, PolicySpec};
use pi_native_ops_core::root::{Access, Root};
use pi_native_ops_core::Error as CoreError;

/// A file opened for reading; the receiver owns `fd`.
#[cfg(unix)]
#[napi(object)]
pub struct OpenedFile {
    pub fd: i32,
    pub size: f64,
    pub is_file: bool,
}

/// `createBoundFs`'s `policy` option, validated by js/args.js (absent: the
/// core's defaults, the protected paths included).
#[napi(object)]
pub struct PolicyConfig {
    pub deny_read: Option<Vec<String>>,
    pub deny_write: Option<Vec<String>>,
    pub protect: Option<bool>,
}

impl From<PolicyConfig> for PolicySpec {
    fn from(p: PolicyConfig) -> PolicySpec {
        PolicySpec::from_raw(p.deny_read, p.deny_write, p.protect)
    }
}

/// Whether two `policy` options say the same, once the core has given them its defaults.
#[napi]
pub fn same_policy(a: Option<PolicyConfig>, b: Option<PolicyConfig>) -> bool {
    let spec = |p: Option<PolicyConfig>| p.map_or_else(PolicySpec::default_raw, Into::into);
    spec(a) == spec(b)
}

/// The most entries `readdir_small` lists on the JS thread.
const SMALL_DIR: usize = 256;

fn lossy_names(names: Vec<std::ffi::OsString>) -> Vec<String> {
    names
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .collect()
}

/// A workspace root: every path is resolved beneath it, race-free.
#[napi]
pub struct BoundRoot {
    pub(crate) root: Arc<Root>,
    /// The warm search index of the root, when made with index options (Linux).
    index: Option<Index>,
}

/// A root finalized (collected) closes its index at once, so a forgotten `fs` does not keep its
/// thread, watches and memory until its last search or `ready` has let go of them too.
impl Drop for BoundRoot {
    fn drop(&mut self) {
        if let Some(index) = &self.index {
            close(index);
        }
    }
}

impl BoundRoot {
    /// The index find and grep may read (a clone, for a search that runs in the thread pool).
    pub(crate) fn search_index(&self) -> Option<Index> {
        #[cfg(target_os = "linux")]
        return self.index.clone();
        // Elsewhere `Index` has no values.
        #[cfg(not(target_os = "linux"))]
        self.index.as_ref().map(|index| match *index {})
    }

    /// The index, for `fs.index`; js/fs.js asks only of a root made with one.
    fn own_index(&self) -> Result<Index> {
        self.search_index()
            .ok_or_else(|| Error::from_reason("this root was made without an index"))
    }

    /// Runs `op` on the root in the thread pool.
    fn run<T, F>(&self, path: String, op: F) -> AsyncTask<Blocking<T>>
    where
        F: FnOnce(&Root, &Path) -> pi_native_ops_core::Result<T> + Send + 'static,
        T: napi::bindgen_prelude::ToNapiValue + napi::bindgen_prelude::TypeName + Send + 'static,
    {
        let root = self.root.clone();
        blocking(move || op(&root, Path::new(&path)))
    }
}

#[napi]
impl BoundRoot {
    /// Opens `host` (an existing directory) as the root; `runtime` is the path the agent sees.
    /// With `index`, starts building the root's warm search index in the background (Linux).
    /// `policy` (absent: the core's defaults) is asked by every operation, find and grep included.
    /// Every operation follows `host` to the directory it names then, unless `pin_root`.
    #[napi(constructor)]
    pub fn new(
        env: &Env,
        host: String,
        runtime: String,
        index: Option<IndexConfig>,
        policy: Option<PolicyConfig>,
        pin_root: Option<bool>,
    ) -> Result<Self> {
        let spec = match policy {
            Some(p) => p.into(),
            None => PolicySpec::default_raw(),
        };
        let policy = Policy::new(&spec).map_err(|e| to_js(env, &e))?;
        let root =
            Root::open(Path::new(&host), Some(Path::new(&runtime))).map_err(|e| to_js(env, &e))?;
        let root = root.pinned(pin_root.unwrap_or(false));
        let root = Arc::new(root.with_policy(Arc::new(policy)));
        #[cfg(target_os = "linux")]
        let index = index.map(|config| Index::start(root.clone(), config.into()));
        #[cfg(not(target_os = "linux"))]
        let index = index.and(None);
        Ok(BoundRoot { root, index })
    }

    /// The index's stats now. In the thread pool: the index applies pending changes first, which
    /// after a burst of them (a checkout) is more than a JS-thread call should do.
    #[napi(ts_return_type = "Promise<IndexStats>")]
    pub fn index_stats(&self) -> Result<AsyncTask<Blocking<IndexStats>>> {
        let index = self.own_index()?;
        Ok(blocking(move || Ok(stats_of(&index))))
    }

    /// Resolves once the index's first build has ended, or it stepped aside or closed.
    #[napi(ts_return_type = "Promise<IndexStats>")]
    pub fn index_ready(&self) -> Result<AsyncTask<Blocking<IndexStats>>> {
        let index = self.own_index()?;
        Ok(blocking(move || Ok(ready_of(&index))))
    }

    /// Stops the index (joins its thread); searches walk from then on. Idempotent.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn index_close(&self) -> Result<AsyncTask<Blocking<()>>> {
        let index = self.own_index()?;
        Ok(blocking(move || {
            close(&index);
            Ok(())
        }))
    }

    #[napi(ts_return_type = "Promise<Buffer>")]
    pub fn read_file(&self, path: String) -> AsyncTask<Blocking<Buffer>> {
        self.run(path, |r, p| r.read_file(p).map(Buffer::from))
    }

    #[napi(ts_return_type = "Promise<string | null>")]
    pub fn detect_image_mime_type(&self, path: String) -> AsyncTask<Blocking<Option<String>>> {
        self.run(path, |r, p| {
            r.read_head(p, SNIFF_BYTES)
                .map(|head| detect_image_mime(&head).map(str::to_string))
        })
    }

    // Metadata calls are a few syscalls (microseconds on a local disk), cheaper than a
    // thread-pool round trip, so they run synchronously; pi's tools may call them per entry.

    /// `mode` is `"r"` (R_OK) or `"rw"` (R_OK | W_OK).
    #[napi]
    pub fn access(&self, env: &Env, path: String, mode: String) -> Result<()> {
        self.root
            .access(Path::new(&path), Access::from_mode(&mode))
            .map_err(|e| to_js(env, &e))
    }

    /// What the root's view is doing (`fs.view()`): `"ready"` (a `stat` or `exists` of a path
    /// with no symlink on it is one system call), `"making"`, `"unasked"` (before the first, and
    /// after the mount table changed) or `"none"` (not on this machine or for this root).
    #[napi]
    pub fn view_state(&self) -> String {
        #[cfg(target_os = "linux")]
        let state = match self.root.view_state() {
            pi_native_ops_core::root::ViewState::Ready => "ready",
            pi_native_ops_core::root::ViewState::Making => "making",
            pi_native_ops_core::root::ViewState::Unasked => "unasked",
            pi_native_ops_core::root::ViewState::None => "none",
        };
        #[cfg(not(target_os = "linux"))]
        let state = "none";
        state.to_string()
    }

    /// The root as a plain handle for `rootStat`/`rootExists`, which pi's `ls`
    /// calls once per entry: a class method call costs napi-rs about 0.5 µs
    /// to check its receiver (as much as the stat), an External far less.
    #[napi(ts_return_type = "ExternalObject<'BoundRoot'>")]
    pub fn handle(&self) -> External<Arc<Root>> {
        External::new(self.root.clone())
    }

    /// Entry names; names that are not UTF-8 are shown lossily, as Node does.
    /// `stat` in the thread pool: `[mode, size, mtimeMs]` (`root_stat`'s).
    #[napi(ts_return_type = "Promise<number[]>")]
    pub fn stat(&self, path: String) -> AsyncTask<Blocking<Vec<f64>>> {
        self.run(path, |root, p| {
            let s = root.stat(p)?;
            Ok(vec![s.mode as f64, s.size as f64, s.mtime_ms])
        })
    }

    /// `exists_inside` in the thread pool (`root_exists`'s).
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn exists(&self, path: String) -> AsyncTask<Blocking<bool>> {
        self.run(path, |root, p| root.exists_inside(p))
    }

    #[napi(ts_return_type = "Promise<string[]>")]
    pub fn readdir(&self, path: String) -> AsyncTask<Blocking<Vec<String>>> {
        self.run(path, |r, p| r.read_dir(p).map(lossy_names))
    }

    /// Synchronous for a directory of at most `SMALL_DIR` entries (listing it
    /// costs less than the hop to the thread pool), else `null`: `readdir`
    /// lists it in the pool. The names come as one string, each followed by
    /// a NUL (no name holds one), which JS splits: one napi string instead of
    /// one per name, which cost as much as the listing.
    #[napi]
    pub fn readdir_small(&self, env: &Env, path: PathArg) -> Result<Option<String>> {
        let names = self
            .root
            .read_dir_upto(Path::new(path.as_str()), SMALL_DIR)
            .map_err(|e| to_js(env, &e))?;
        Ok(names.map(|names| {
            let mut joined = String::with_capacity(names.iter().map(|n| n.len() + 1).sum());
            for name in &names {
                joined.push_str(&name.to_string_lossy());
                joined.push('\0');
            }
            joined
        }))
    }

    /// Synchronous too: usually one `openat2` finding the directory exists.
    #[napi]
    pub fn mkdir(&self, env: &Env, path: String) -> Result<()> {
        self.root
            .mkdir_all(Path::new(&path))
            .map_err(|e| to_js(env, &e))
    }

    /// Atomic replace; the parent directory must exist.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn write_file(
        &self,
        path: String,
        content: Either<String, Buffer>,
    ) -> AsyncTask<Blocking<()>> {
        let data: Vec<u8> = match content {
            Either::A(s) => s.into_bytes(),
            Either::B(b) => b.to_vec(),
        };
        self.run(path, move |r, p| r.write_file(p, &data))
    }
}

/// How a stream gets at an opened file: unix hands Node the descriptor.
#[cfg(unix)]
#[napi]
impl BoundRoot {
    /// An open read-only descriptor of the file and its size at open time, for a
    /// stream the JS layer owns (and closes). Unix: Windows has `openReader`.
    #[napi(ts_return_type = "Promise<OpenedFile>")]
    pub fn open_read(&self, path: String) -> AsyncTask<Blocking<OpenedFile>> {
        self.run(path, |r, p| {
            let file = r.open_read(p)?;
            let meta = file
                .metadata()
                .map_err(|e| CoreError::from(e).at("open", p))?;
            Ok(OpenedFile {
                fd: file.into_raw_fd(),
                size: meta.len() as f64,
                is_file: meta.is_file(),
            })
        })
    }
}

/// Windows: a descriptor of ours would mean nothing to Node's C runtime, so
/// the stream pulls chunks through a `FileReader`.
#[cfg(windows)]
#[napi]
impl BoundRoot {
    /// The file opened for reading, for a stream the JS layer pulls chunks of
    /// and closes (Windows: a descriptor of ours would mean nothing to Node's C runtime).
    #[napi(ts_return_type = "Promise<FileReader>")]
    pub fn open_reader(&self, path: String) -> AsyncTask<Blocking<FileReader>> {
        self.run(path, |r, p| {
            let file = r.open_read(p)?;
            let meta = file
                .metadata()
                .map_err(|e| CoreError::from(e).at("open", p))?;
            Ok(FileReader {
                size: meta.len() as f64,
                is_file: meta.is_file(),
                file: Arc::new(std::sync::Mutex::new(Some(file))),
            })
        })
    }
}

/// A file opened by `openReader` (Windows): read in chunks, then closed.
#[cfg(windows)]
#[napi]
pub struct FileReader {
    /// Its size at open time.
    #[napi(readonly)]
    pub size: f64,
    #[napi(readonly)]
    pub is_file: bool,
    /// `None` once closed.
    file: Arc<std::sync::Mutex<Option<std::fs::File>>>,
}

#[cfg(windows)]
#[napi]
impl FileReader {
    /// The next at most `len` bytes (bounded by `READ_CHUNK`); empty at the end or once closed.
    #[napi(ts_return_type = "Promise<Buffer>")]
    pub fn read(&self, len: u32) -> AsyncTask<Blocking<Buffer>> {
        let file = self.file.clone();
        blocking(move || {
            use std::io::Read;
            let mut guard = file.lock().unwrap_or_else(|e| e.into_inner());
            let Some(f) = guard.as_mut() else {
                return Ok(Buffer::from(Vec::new()));
            };
            let mut buf = vec![0u8; (len as usize).min(READ_CHUNK)];
            let n = f
                .read(&mut buf)
                .map_err(|e| CoreError::read(pi_native_ops_core::error::errno_of(&e)))?;
            buf.truncate(n);
            Ok(Buffer::from(buf))
        })
    }

    /// Closes the file (idempotent).
    #[napi]
    pub fn close(&self) {
        self.file.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// The most one `FileReader.read` reads: 1 MiB, past the stream's 64 KiB chunks.
#[cfg(windows)]
const READ_CHUNK: usize = 1 << 20;

/// `stat` of `path` (symlinks followed, bounded) written into `out` as
/// `[mode, size, mtimeMs]`, when a few system calls answer it
/// (`Root::stat_quick`): filling the caller's array costs less than building
/// an object with named properties, which the JS layer then wraps. `false`:
/// not answered, the path needs the walk, which `BoundRoot.stat` runs in the
/// thread pool.
/// `trusted`: the root was checked against its path by a call moments
/// before, in the same turn of the event loop (`Root::trusting`).
#[napi(
    ts_args_type = "root: ExternalObject<'BoundRoot'>, path: string, out: Float64Array, trusted: boolean"
)]
pub fn root_stat(
    env: &Env,
    root: &External<Arc<Root>>,
    path: PathArg,
    mut out: Float64ArraySlice,
    trusted: bool,
) -> Result<bool> {
    let path = Path::new(path.as_str());
    let quick = match trusted {
        true => root.trusting(|| root.stat_quick(path)),
        false => root.stat_quick(path),
    };
    let Some(s) = quick else {
        return Ok(false);
    };
    let s = s.map_err(|e| to_js(env, &e))?;
    // SAFETY: JS is blocked in this call, so nothing else touches the array.
    match unsafe { out.as_mut() } {
        [mode, size, mtime_ms, ..] => {
            (*mode, *size, *mtime_ms) = (s.mode as f64, s.size as f64, s.mtime_ms);
            Ok(true)
        }
        _ => Err(Error::new(Status::InvalidArg, "out must hold 3 numbers")),
    }
}

/// Whether `path` exists inside the root: false when missing, the
/// workspace refusal when outside (`Root::exists_inside`), when a few system
/// calls answer it (`Root::exists_quick`); `null`: not answered, the path
/// needs the walk, which `BoundRoot.exists` runs in the thread pool.
/// `trusted` as `root_stat`'s.
#[napi(ts_args_type = "root: ExternalObject<'BoundRoot'>, path: string, trusted: boolean")]
pub fn root_exists(
    env: &Env,
    root: &External<Arc<Root>>,
    path: PathArg,
    trusted: bool,
) -> Result<Option<bool>> {
    let path = Path::new(path.as_str());
    let quick = match trusted {
        true => root.trusting(|| root.exists_quick(path)),
        false => root.exists_quick(path),
    };
    quick.transpose().map_err(|e| to_js(env, &e))
}

/// Bytes a path argument is first read into: enough for the paths pi's tools
/// pass (a longer one is read again, whole).
const PATH_ARG_BYTES: usize = 512;

/// A string argument read in one napi call: napi-rs's `String` makes two
/// (length, then copy) and zero-fills its buffer, a quarter of the cost of a
/// per-entry `stat`.
pub struct PathArg(String);

impl PathArg {
    fn as_str(&self) -> &str {
        &self.0
    }
}

impl TypeName for PathArg {
    fn type_name() -> &'static str {
        "string"
    }
    fn value_type() -> ValueType {
        ValueType::String
    }
}

impl ValidateNapiValue for PathArg {}

impl FromNapiValue for PathArg {
    /// # Safety
    ///
    /// As `FromNapiValue::from_napi_value`: `env` is the live environment of the current call on
    /// the JS thread and `value` a value of it.
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> Result<Self> {
        let mut buf = Vec::<u8>::with_capacity(PATH_ARG_BYTES);
        let mut len = 0;
        // SAFETY: `env` and `value` are live (our contract); napi writes at most `capacity` bytes
        // (a NUL included) into `buf`'s spare capacity and the length into `len`.
        let status = unsafe {
            sys::napi_get_value_string_utf8(
                env,
                value,
                buf.as_mut_ptr().cast(),
                buf.capacity(),
                &mut len,
            )
        };
        if status != sys::Status::napi_ok {
            return Err(Error::new(Status::StringExpected, "path must be a string"));
        }
        // napi keeps a byte for the NUL and stops short of a character that
        // does not fit (UTF-8 takes up to 4 bytes): this near the end, the
        // string may have been cut, so it is read whole the allocating way.
        if len + 4 >= buf.capacity() {
            // SAFETY: our own contract, passed on.
            return Ok(PathArg(unsafe { String::from_napi_value(env, value) }?));
        }
        // SAFETY: napi wrote `len` bytes (< capacity) at the start of `buf`.
        unsafe { buf.set_len(len) };
        String::from_utf8(buf)
            .map(PathArg)
            .map_err(|_| Error::new(Status::StringExpected, "path must be UTF-8"))
    }
}
