//! Blocking work on libuv's thread pool, for the fs, find and grep bindings;
//! and the exit hook that stops it, so no pool thread holds up the exit.

use napi::bindgen_prelude::{AsyncTask, ToNapiValue, TypeName};
use napi::{Env, Result, Task};
use napi_derive::napi;

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
        // A panic (a bug) must not unwind into libuv, which aborts Node: it
        // rejects the call instead. Nothing outlives the work but its result.
        let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
            Ok(result) => result,
            Err(panic) => {
                return Err(napi::Error::from_reason(format!(
                    "pi-native-ops failed inside this call (a bug): {}",
                    panic_text(&*panic)
                )))
            }
        };
        result.map_err(|err| {
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

/// What a panic said, when it said it as text.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    match panic.downcast_ref::<&str>() {
        Some(text) => text,
        None => panic.downcast_ref::<String>().map_or("", String::as_str),
    }
}

/// Stops every search running and any started later: JS calls it when the
/// process exits (`process.on("exit")`), since Node then waits for libuv's
/// pool threads, which would otherwise finish their walks first.
#[napi]
pub fn shutdown() {
    pi_native_ops_core::cancel::shutdown();
}
