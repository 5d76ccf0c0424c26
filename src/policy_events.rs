//! Policy events to JS: the core's `EventSink` as a threadsafe function of the caller's
//! `onPolicyEvent`, and the event's plain-object form.

use std::sync::Arc;

use napi::bindgen_prelude::{Either, Function, Null};
use napi::threadsafe_function::{ThreadsafeFunctionCallMode, UnknownReturnValue};
use napi::Result;
use napi_derive::napi;

use pi_native_ops_core::policy::{EventFields, EventSink, PolicyEvent};

/// One policy event as JS sees it: the core's `EventFields`, field for field.
#[napi(object)]
pub struct PolicyEventObject {
    pub tool: String,
    /// `"read"`, `"write"` or `"connect"`.
    pub access: String,
    pub path: Option<String>,
    pub host: Option<String>,
    pub port: Option<u32>,
    pub rule: Either<String, Null>,
    pub allowed: bool,
    /// Milliseconds since the Unix epoch.
    pub time: f64,
    pub command: Option<String>,
}

impl From<PolicyEvent> for PolicyEventObject {
    fn from(e: PolicyEvent) -> Self {
        let e = EventFields::from(e);
        PolicyEventObject {
            tool: e.tool.to_string(),
            access: e.access.to_string(),
            path: e.path,
            host: e.host,
            port: e.port.map(Into::into),
            rule: match e.rule {
                Some(rule) => Either::A(rule),
                None => Either::B(Null),
            },
            allowed: e.allowed,
            time: e.time,
            command: e.command,
        }
    }
}

/// A file tool's refusal event (the core's `PolicyEvent::refusal`): `tool` refused the `access`
/// (`"read"`, `"write"`) of `path` by `rule`, now. JS reports it for both faces.
#[napi]
pub fn policy_refusal(
    tool: String,
    access: String,
    path: String,
    rule: Option<String>,
) -> Result<PolicyEventObject> {
    PolicyEvent::refusal(&tool, &access, path, rule)
        .map(Into::into)
        .ok_or_else(|| {
            napi::Error::new(
                napi::Status::InvalidArg,
                format!("no policy event of tool {tool:?} and access {access:?}"),
            )
        })
}

/// The sink that hands each event to `callback` on Node's thread: never blocks the caller (the
/// queue is unbounded; events are few), and does not keep Node alive. The face wraps the
/// caller's function so a throw is caught there.
pub fn event_sink(
    callback: Function<'_, PolicyEventObject, UnknownReturnValue>,
) -> Result<EventSink> {
    let tsfn = callback
        .build_threadsafe_function::<PolicyEvent>()
        .callee_handled::<false>()
        .weak::<true>()
        .build_callback(|ctx| Ok(PolicyEventObject::from(ctx.value)))?;
    Ok(Arc::new(move |event| {
        tsfn.call(event, ThreadsafeFunctionCallMode::NonBlocking);
    }))
}
