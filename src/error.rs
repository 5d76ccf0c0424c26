//! The one place a core error becomes a JS error: the fields the core decides
//! (`Error::node_fields`: class, message, and `errno`, `code`, `syscall`,
//! `path` when the error has them, in Node's order, then a policy refusal's
//! `rule`) set on a JS `Error` or `RangeError`, converting only.

use std::ptr;

use napi::bindgen_prelude::{JsObjectValue, Object};
use napi::{check_status, sys, Env, Error, JsValue, Result};

use pi_native_ops_core::{Error as CoreError, NodeClass};

/// The JS error for `err`, as an `Error` napi throws or rejects with as is.
pub fn to_js(env: &Env, err: &CoreError) -> Error {
    match node_error(env, err) {
        Ok(error) => Error::from(error.to_unknown()),
        // The environment cannot build objects (it is shutting down): the text alone.
        Err(_) => Error::from_reason(err.to_string()),
    }
}

fn node_error<'env>(env: &'env Env, err: &CoreError) -> Result<Object<'env>> {
    let fields = err.node_fields();
    let message = env.create_string(&fields.message)?;
    let mut raw = ptr::null_mut();
    // A null code: napi-rs's own errors would carry `code: "GenericFailure"`; the code, when
    // there is one, is set below in its place.
    // SAFETY: `message` is a live string of this env; `raw` receives the error.
    check_status!(unsafe {
        match fields.class {
            NodeClass::RangeError => {
                sys::napi_create_range_error(env.raw(), ptr::null_mut(), message.raw(), &mut raw)
            }
            NodeClass::Error => {
                sys::napi_create_error(env.raw(), ptr::null_mut(), message.raw(), &mut raw)
            }
        }
    })?;
    let mut error = Object::from_raw(env.raw(), raw);
    if let Some(errno) = fields.errno {
        error.set_named_property("errno", errno)?;
    }
    if let Some(code) = &fields.code {
        error.set_named_property("code", code.as_ref())?;
    }
    if let Some(syscall) = &fields.syscall {
        error.set_named_property("syscall", syscall.as_str())?;
    }
    if let Some(path) = &fields.path {
        error.set_named_property("path", path.as_str())?;
    }
    if let Some(rule) = &fields.rule {
        error.set_named_property("rule", rule.as_str())?;
    }
    Ok(error)
}
