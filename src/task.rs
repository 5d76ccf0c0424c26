//! Blocking work on libuv's thread pool, for the fs, find and grep bindings.

use napi::bindgen_prelude::{AsyncTask, ToNapiValue, TypeName};
use napi::{Env, Result, Task};

use pi_native_ops_core::Error as CoreError;

/// Blocking work run on libuv's thread pool (where Node's own `fs` runs),
/// resolving a promise with its result, or rejecting it with the core error
/// made a JS error (`crate::error`).
pub struct Blocking<T> {
    work: Option<Box<dyn FnOnce() -> pi_native_ops_core::Result<T> + Send>>,
    /// The work's error, kept for `reject`, which runs on the JS thread.
    failed: Option<CoreError>,
}

pub fn blocking<T, F>(work: F) -> AsyncTask<Blocking<T>>
where
    F: FnOnce() -> pi_native_ops_core::Result<T> + Send + 'static,
    T: ToNapiValue + TypeName + Send + 'static,
{
    AsyncTask::new(Blocking {
        work: Some(Box::new(work)),
        failed: None,
    })
}

impl<T: ToNapiValue + TypeName + Send + 'static> Task for Blocking<T> {
    type Output = T;
    type JsValue = T;

    fn compute(&mut self) -> Result<T> {
        let Some(work) = self.work.take() else {
            return Err(napi::Error::from_reason("task already ran"));
        };
        work().map_err(|err| {
            // Only a JS-thread `env` can build the JS error: `reject` does.
            let text = napi::Error::from_reason(err.to_string());
            self.failed = Some(err);
            text
        })
    }

    fn resolve(&mut self, _env: Env, output: T) -> Result<T> {
        Ok(output)
    }

    fn reject(&mut self, env: Env, err: napi::Error) -> Result<T> {
        Err(match self.failed.take() {
            Some(failed) => crate::error::to_js(&env, &failed),
            None => err,
        })
    }
}
