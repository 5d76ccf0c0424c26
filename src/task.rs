//! Blocking work on libuv's thread pool, for the fs, find and grep bindings.

use napi::bindgen_prelude::{AsyncTask, ToNapiValue, TypeName};
use napi::{Env, Result, Task};

/// Blocking work run on libuv's thread pool (where Node's own `fs` runs),
/// resolving a promise with its result.
pub struct Blocking<T> {
    work: Option<Box<dyn FnOnce() -> Result<T> + Send>>,
}

pub fn blocking<T, F>(work: F) -> AsyncTask<Blocking<T>>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: ToNapiValue + TypeName + Send + 'static,
{
    AsyncTask::new(Blocking {
        work: Some(Box::new(work)),
    })
}

impl<T: ToNapiValue + TypeName + Send + 'static> Task for Blocking<T> {
    type Output = T;
    type JsValue = T;

    fn compute(&mut self) -> Result<T> {
        match self.work.take() {
            Some(work) => work(),
            None => Err(napi::Error::from_reason("task already ran")),
        }
    }

    fn resolve(&mut self, _env: Env, output: T) -> Result<T> {
        Ok(output)
    }
}
