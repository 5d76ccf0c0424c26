//! napi binding of the bounded root (`pi_native_ops_core::root`).

use std::os::fd::IntoRawFd;
use std::path::Path;
use std::sync::Arc;

use napi::bindgen_prelude::{AsyncTask, Buffer, Either};
use napi::{Env, Result};
use napi_derive::napi;

use crate::error::to_js;
use crate::{blocking, Blocking};
use pi_native_ops_core::image::{detect_image_mime, SNIFF_BYTES};
use pi_native_ops_core::root::{Access, Root};
use pi_native_ops_core::Error as CoreError;

/// What `stat` returns to JS; the JS layer adds the `isDirectory()` methods.
#[napi(object)]
pub struct StatInfo {
    pub is_directory: bool,
    pub is_file: bool,
    pub is_symbolic_link: bool,
    pub size: f64,
    pub mtime_ms: f64,
    pub mode: u32,
}

/// A file opened for reading; the receiver owns `fd`.
#[napi(object)]
pub struct OpenedFile {
    pub fd: i32,
    pub size: f64,
    pub is_file: bool,
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
}

impl BoundRoot {
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
    #[napi(constructor)]
    pub fn new(env: &Env, host: String, runtime: String) -> Result<Self> {
        let root =
            Root::open(Path::new(&host), Some(Path::new(&runtime))).map_err(|e| to_js(env, &e))?;
        Ok(BoundRoot {
            root: Arc::new(root),
        })
    }

    #[napi(ts_return_type = "Promise<Buffer>")]
    pub fn read_file(&self, path: String) -> AsyncTask<Blocking<Buffer>> {
        self.run(path, |r, p| r.read_file(p).map(Buffer::from))
    }

    /// An open read-only descriptor of the file and its size at open time, for a
    /// stream the JS layer owns (and closes).
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
        let access = if mode == "rw" {
            Access::ReadWrite
        } else {
            Access::Read
        };
        self.root
            .access(Path::new(&path), access)
            .map_err(|e| to_js(env, &e))
    }

    #[napi]
    pub fn exists(&self, path: String) -> bool {
        self.root.exists(Path::new(&path))
    }

    #[napi]
    pub fn stat(&self, env: &Env, path: String) -> Result<StatInfo> {
        let s = self
            .root
            .stat(Path::new(&path))
            .map_err(|e| to_js(env, &e))?;
        Ok(StatInfo {
            is_directory: s.is_dir,
            is_file: s.is_file,
            is_symbolic_link: s.is_symlink,
            size: s.size as f64,
            mtime_ms: s.mtime_ms,
            mode: s.mode,
        })
    }

    /// Entry names; names that are not UTF-8 are shown lossily, as Node does.
    #[napi(ts_return_type = "Promise<string[]>")]
    pub fn readdir(&self, path: String) -> AsyncTask<Blocking<Vec<String>>> {
        self.run(path, |r, p| r.read_dir(p).map(lossy_names))
    }

    /// Synchronous for a directory of at most `SMALL_DIR` entries (listing it
    /// costs less than the hop to the thread pool), else `null`: `readdir`
    /// lists it in the pool.
    #[napi]
    pub fn readdir_small(&self, env: &Env, path: String) -> Result<Option<Vec<String>>> {
        self.root
            .read_dir_upto(Path::new(&path), SMALL_DIR)
            .map(|names| names.map(lossy_names))
            .map_err(|e| to_js(env, &e))
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
