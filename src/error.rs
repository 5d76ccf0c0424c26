//! The one place a core error becomes a JS error.
//!
//! The JS error has Node's shape: `message` is the core error's text (byte for
//! byte what users and the model have always read), and a system error (one
//! with an errno) has `errno` (negative, as Node's), `code`, and `syscall` and
//! `path` when known. Other errors are the message alone, as Node's are: a
//! refusal (`path "…" is outside workspace`) gets no `code` on purpose, so
//! pi's edit tool shows the model the message itself. A file too large to
//! read whole is Node's `RangeError` with `code: 'ERR_FS_FILE_TOO_LARGE'`.

use std::ptr;

use napi::bindgen_prelude::{JsObjectValue, Object};
use napi::{check_status, sys, Env, Error, JsValue, Result};

use pi_native_ops_core::{Error as CoreError, ErrorKind};

/// The JS error for `err`, as an `Error` napi throws or rejects with as is.
pub fn to_js(env: &Env, err: &CoreError) -> Error {
    match node_error(env, err) {
        Ok(error) => Error::from(error.to_unknown()),
        // The environment cannot build objects (it is shutting down): the text alone.
        Err(_) => Error::from_reason(err.to_string()),
    }
}

fn node_error<'env>(env: &'env Env, err: &CoreError) -> Result<Object<'env>> {
    let message = env.create_string(err.to_string())?;
    let mut raw = ptr::null_mut();
    if err.kind() == ErrorKind::FileTooLarge {
        // Node's own: a RangeError with `code` (ERR_FS_FILE_TOO_LARGE) and nothing else.
        let code = env.create_string(err.code().unwrap_or_default().as_ref())?;
        // SAFETY: `code` and `message` are live strings of this env; `raw` receives the error.
        check_status!(unsafe {
            sys::napi_create_range_error(env.raw(), code.raw(), message.raw(), &mut raw)
        })?;
        return Ok(Object::from_raw(env.raw(), raw));
    }
    // A null code: napi-rs's own errors would carry `code: "GenericFailure"`.
    // SAFETY: `message` is a live string of this env (a null code is allowed); `raw` receives the
    // error.
    check_status!(unsafe {
        sys::napi_create_error(env.raw(), ptr::null_mut(), message.raw(), &mut raw)
    })?;
    let mut error = Object::from_raw(env.raw(), raw);
    let (Some(errno), Some(code)) = (err.errno(), err.code()) else {
        // A code without an errno (ESANDBOX): the code alone.
        if let Some(code) = err.code() {
            error.set_named_property("code", code.as_ref())?;
        }
        return Ok(error);
    };
    // Node's order: errno, code, syscall, path.
    error.set_named_property("errno", -errno)?;
    error.set_named_property("code", code.as_ref())?;
    if let Some(syscall) = err.syscall() {
        error.set_named_property("syscall", syscall)?;
    }
    if let Some(path) = err.path() {
        error.set_named_property("path", path.to_string_lossy().as_ref())?;
    }
    Ok(error)
}
