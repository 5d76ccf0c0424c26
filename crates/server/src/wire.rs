//! The messages of docs/protocol.md as serde types, and the one place a core error becomes a wire
//! error (the core's `Error::node_fields`, as the napi binding's `src/error.rs` reads them).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use pi_native_ops_core::grep::RawQuery;
use pi_native_ops_core::policy::EventFields;
use pi_native_ops_core::{Error as CoreError, NodeClass};

/// The protocol this server speaks.
pub const PROTOCOL: u64 = 1;
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A message the client sends, once its header is known to be a JSON object.
pub enum Incoming {
    Hello {
        protocol: Option<u64>,
        client: Option<String>,
    },
    Call {
        id: u64,
        op: Result<Op, String>,
    },
    Credit {
        id: u64,
        bytes: u64,
    },
    Cancel {
        id: u64,
    },
}

/// A header that is no message: the error to answer, with the call's id when it could be read.
#[derive(Debug)]
pub struct BadHeader {
    pub id: Option<u64>,
    pub message: String,
}

/// An operation and its arguments (the `op` field and its siblings in a `call`).
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Op {
    ReadFile {
        path: String,
    },
    ReadStream {
        path: String,
    },
    Access {
        path: String,
        mode: String,
    },
    DetectImageMimeType {
        path: String,
    },
    WriteFile {
        path: String,
    },
    Mkdir {
        path: String,
    },
    Exists {
        path: String,
    },
    Stat {
        path: String,
    },
    Readdir {
        path: String,
    },
    FindExists {
        path: String,
    },
    Glob {
        pattern: String,
        cwd: String,
        #[serde(default)]
        ignore: Vec<String>,
        /// `None` is no limit.
        #[serde(default, deserialize_with = "pi_native_ops_core::js_number::option")]
        limit: Option<f64>,
    },
    /// The core's grep request, as it is (`grep::search` decides the rest).
    Grep(RawQuery),
    Exec(ExecRequest),
    /// Starts the warm search index of the root, unless one runs already (`--index`, an earlier
    /// call): its options are then ignored. Answers its stats.
    IndexStart {
        /// `None`: the core's default.
        #[serde(default)]
        max_watches: Option<f64>,
        #[serde(default)]
        max_file_bytes: Option<f64>,
    },
    /// Answers the index's stats once its first build has ended, or it stepped aside or closed.
    IndexReady,
    IndexStats,
    IndexClose,
    /// The connection's policy (connect's `policy`), before any other call: the core compiles it
    /// over the server's `--policy`. Answered on the reader's thread, so every later call sees it.
    Policy {
        /// `None`: no rules; the core reads the lists as the binding reads the JS option.
        #[serde(default)]
        deny_read: Option<Vec<String>>,
        #[serde(default)]
        deny_write: Option<Vec<String>>,
        /// `None`: the protected defaults apply.
        #[serde(default)]
        protect: Option<bool>,
        /// Whether the client wants `event` frames (it has an `onPolicyEvent`).
        #[serde(default)]
        events: bool,
    },
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecRequest {
    pub command: String,
    pub cwd: String,
    /// `KEY=VALUE` entries; `None` is the server's own environment.
    #[serde(default)]
    pub env: Option<Vec<String>>,
    /// `None`: found as pi finds it.
    #[serde(default)]
    pub shell: Option<String>,
}

/// Parses a header.
pub fn parse(header: &[u8]) -> Result<Incoming, BadHeader> {
    let bad = |id, message: String| BadHeader { id, message };
    let value: Value = serde_json::from_slice(header)
        .map_err(|e| bad(None, format!("frame header is not JSON: {e}")))?;
    let Value::Object(fields) = value else {
        return Err(bad(None, "frame header is not a JSON object".into()));
    };
    let id = fields.get("id").and_then(Value::as_u64);
    let need_id = || id.ok_or_else(|| bad(None, "message has no valid id".into()));
    match fields.get("t").and_then(Value::as_str) {
        Some("hello") => Ok(Incoming::Hello {
            protocol: fields.get("protocol").and_then(Value::as_u64),
            client: fields
                .get("client")
                .and_then(Value::as_str)
                .map(str::to_string),
        }),
        Some("call") => {
            let id = need_id()?;
            let op =
                serde_json::from_value(Value::Object(fields)).map_err(|e| format!("bad call: {e}"));
            Ok(Incoming::Call { id, op })
        }
        Some("credit") => {
            let id = need_id()?;
            let bytes = fields
                .get("bytes")
                .and_then(Value::as_u64)
                .ok_or_else(|| bad(Some(id), "credit has no valid bytes".into()))?;
            Ok(Incoming::Credit { id, bytes })
        }
        Some("cancel") => Ok(Incoming::Cancel { id: need_id()? }),
        Some(other) => Err(bad(id, format!("unknown message type \"{other}\""))),
        None => Err(bad(id, "message has no type (\"t\")".into())),
    }
}

/// A message the server sends.
#[derive(Serialize)]
#[serde(tag = "t", rename_all = "camelCase")]
pub enum Outgoing<'a> {
    Hello {
        protocol: u64,
        server: &'static str,
        root: &'a str,
        platform: &'a str,
        /// `--sandbox`: how every command is confined (`Site::hello_sandbox`); null without it.
        sandbox: Option<Value>,
    },
    Ok {
        id: u64,
        #[serde(flatten)]
        answer: Map<String, Value>,
    },
    Data {
        id: u64,
    },
    Error {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        error: &'a WireError,
    },
    /// A policy event (docs/protocol.md, "Policy"), in the shape `onPolicyEvent` receives.
    Event(&'a WireEvent),
    /// Events lost because the client did not take them fast enough (`events::EVENT_BUDGET`).
    EventsDropped {
        count: u64,
    },
}

/// A policy event as the client hands it to `onPolicyEvent`: the core's shape (`EventFields`).
pub type WireEvent = EventFields;

/// An error as the client rebuilds it (docs/protocol.md, "Errors").
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WireError {
    pub kind: String,
    /// The JS class when it is not `Error` (`RangeError`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub syscall: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The policy rule of a `Protected` refusal (set after `path`, as the binding sets it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// grep's `Aborted`: how many files the search had begun to read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files_searched: Option<u64>,
}

/// Kinds of failure the server itself decides (the core's are its `ErrorKind` names).
pub mod kind {
    /// A malformed message, or one the protocol does not allow.
    pub const PROTOCOL: &str = "Protocol";
    /// A call beyond the calls in flight one connection may have (`conn::MAX_IN_FLIGHT`).
    pub const BUSY: &str = "Busy";
    /// The server failed while running a call (a bug: its stderr has the panic).
    pub const INTERNAL: &str = "Internal";
    /// An index call before any index was started (`indexStart` or `--index`); only Linux
    /// has one to start.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub const NO_INDEX: &str = "NoIndex";
}

impl WireError {
    /// A failure with a kind and message only.
    pub fn plain(kind: &str, message: impl Into<String>) -> WireError {
        WireError {
            kind: kind.to_string(),
            name: None,
            message: message.into(),
            code: None,
            errno: None,
            syscall: None,
            path: None,
            rule: None,
            files_searched: None,
        }
    }

    pub fn protocol(message: impl Into<String>) -> WireError {
        WireError::plain(kind::PROTOCOL, message)
    }
}

impl From<&CoreError> for WireError {
    /// The core's Node fields, each present only when the local error has it; the kind is the
    /// core's `ErrorKind` name.
    fn from(err: &CoreError) -> WireError {
        let fields = err.node_fields();
        WireError {
            kind: format!("{:?}", err.kind()),
            name: (fields.class != NodeClass::Error).then(|| fields.class.name().to_string()),
            message: fields.message,
            code: fields.code.map(|c| c.into_owned()),
            errno: fields.errno,
            syscall: fields.syscall,
            path: fields.path,
            rule: fields.rule,
            files_searched: None,
        }
    }
}

impl From<CoreError> for WireError {
    fn from(err: CoreError) -> WireError {
        WireError::from(&err)
    }
}

/// What a call answers: its fields and its payload.
pub type Answer = (Map<String, Value>, Vec<u8>);

/// A failed call. Boxed: failures are the rare path, and a small `Result` keeps answers cheap to
/// move.
#[derive(Debug)]
pub struct Failure(pub Box<WireError>);

impl std::ops::Deref for Failure {
    type Target = WireError;
    fn deref(&self) -> &WireError {
        &self.0
    }
}

impl From<WireError> for Failure {
    fn from(err: WireError) -> Failure {
        Failure(Box::new(err))
    }
}

impl From<CoreError> for Failure {
    fn from(err: CoreError) -> Failure {
        Failure(Box::new(WireError::from(&err)))
    }
}

/// The platform as Node names it (`process.platform`-`process.arch`), e.g. `linux-x64`.
pub fn platform() -> String {
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        "windows" => "win32",
        other => other,
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        "x86" => "ia32",
        other => other,
    };
    format!("{os}-{arch}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pi_native_ops_core::policy::{EventTarget, PolicyEvent};
    use std::path::Path;

    fn bad(header: &str) -> BadHeader {
        match parse(header.as_bytes()) {
            Err(bad) => bad,
            Ok(_) => panic!("{header} parsed"),
        }
    }

    fn call(header: &str) -> (u64, Result<Op, String>) {
        match parse(header.as_bytes()) {
            Ok(Incoming::Call { id, op }) => (id, op),
            _ => panic!("{header} is not a call"),
        }
    }

    #[test]
    fn headers_that_are_not_messages_are_refused_with_the_id_when_readable() {
        let not_json = bad("{\"t\":");
        assert_eq!(not_json.id, None);
        assert!(not_json.message.starts_with("frame header is not JSON"));
        let array = bad("[1,2]");
        assert_eq!(
            (array.id, array.message.as_str()),
            (None, "frame header is not a JSON object")
        );
        assert_eq!(bad("\"call\"").message, "frame header is not a JSON object");
        let unknown = bad(r#"{"t":"bogus","id":4}"#);
        assert_eq!(unknown.id, Some(4));
        assert_eq!(unknown.message, "unknown message type \"bogus\"");
        assert_eq!(bad(r#"{"id":5}"#).id, Some(5));
        assert_eq!(
            bad(r#"{"t":"call","id":-1}"#).message,
            "message has no valid id"
        );
        assert_eq!(bad(r#"{"t":"credit","id":3}"#).id, Some(3));
        // Invalid UTF-8 is not JSON.
        assert!(parse(b"{\"t\":\"call\",\"id\":1,\"op\":\"stat\",\"path\":\"\xff\"}").is_err());
    }

    #[test]
    fn calls_parse_and_a_bad_op_keeps_its_id() {
        let (id, op) = call(r#"{"t":"call","id":7,"op":"readFile","path":"/w/a"}"#);
        assert_eq!(id, 7);
        assert!(matches!(op, Ok(Op::ReadFile { path }) if path == "/w/a"));
        let (id, op) = call(r#"{"t":"call","id":8,"op":"rmrf","path":"/"}"#);
        assert_eq!(id, 8);
        assert!(op.unwrap_err().contains("unknown variant `rmrf`"));
        let (id, op) = call(r#"{"t":"call","id":9,"op":"stat"}"#);
        assert_eq!(id, 9);
        assert!(op.unwrap_err().contains("missing field `path`"));
        let (_, op) = call(r#"{"t":"call","id":10,"op":"stat","path":3}"#);
        assert!(op.unwrap_err().contains("invalid type"));
        let (_, op) = call(r#"{"t":"call","id":11}"#);
        assert!(op.unwrap_err().contains("missing field `op`"));
        let (_, op) = call(
            r#"{"t":"call","id":12,"op":"grep","pattern":"x","path":"/w","displayName":"w","limit":5,"storeCap":null}"#,
        );
        let Ok(Op::Grep(grep)) = op else {
            panic!("grep")
        };
        assert_eq!(
            (grep.limit, grep.context, grep.glob),
            (Some(5.0), None, None)
        );
        // JS numbers JSON cannot hold travel as JS spells them.
        let (_, op) = call(
            r#"{"t":"call","id":16,"op":"grep","pattern":"x","path":"/w","displayName":"w","limit":"-Infinity","context":"Infinity"}"#,
        );
        let Ok(Op::Grep(grep)) = op else {
            panic!("grep")
        };
        assert_eq!(
            (grep.limit, grep.context),
            (Some(f64::NEG_INFINITY), Some(f64::INFINITY))
        );
        let (_, op) =
            call(r#"{"t":"call","id":17,"op":"glob","pattern":"*","cwd":"/w","limit":"Infinity"}"#);
        assert!(matches!(op, Ok(Op::Glob { limit: Some(l), .. }) if l == f64::INFINITY));
        let (_, op) =
            call(r#"{"t":"call","id":18,"op":"glob","pattern":"*","cwd":"/w","limit":null}"#);
        assert!(matches!(op, Ok(Op::Glob { limit: None, .. })));
        let (_, op) = call(
            r#"{"t":"call","id":19,"op":"grep","pattern":"x","path":"/w","displayName":"w","limit":"5"}"#,
        );
        assert!(op.unwrap_err().contains("expected a number"));
        let (_, op) = call(r#"{"t":"call","id":14,"op":"indexStart","maxWatches":9}"#);
        assert!(matches!(
            op,
            Ok(Op::IndexStart {
                max_watches: Some(9.0),
                max_file_bytes: None
            })
        ));
        let (_, op) = call(
            r#"{"t":"call","id":20,"op":"policy","denyRead":[".env"],"protect":false,"events":true}"#,
        );
        assert!(matches!(
            op,
            Ok(Op::Policy { deny_read: Some(r), deny_write: None, protect: Some(false), events: true })
                if r == [".env"]
        ));
        let (_, op) = call(r#"{"t":"call","id":21,"op":"policy","denyRead":".env"}"#);
        assert!(op.unwrap_err().contains("invalid type"));
        let (_, op) = call(r#"{"t":"call","id":15,"op":"indexReady"}"#);
        assert!(matches!(op, Ok(Op::IndexReady)));
        let (_, op) = call(r#"{"t":"call","id":13,"op":"exec","command":"ls","cwd":"/w"}"#);
        assert!(matches!(
            op,
            Ok(Op::Exec(ExecRequest {
                env: None,
                shell: None,
                ..
            }))
        ));
    }

    #[test]
    fn core_errors_travel_as_the_binding_shapes_them() {
        let p = Path::new("/w/x");
        let os = WireError::from(CoreError::os(2).at("open", p));
        let json = serde_json::to_string(&os).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"Os","message":"ENOENT: no such file or directory, open '/w/x'","code":"ENOENT","errno":-2,"syscall":"open","path":"/w/x"}"#
        );
        // A refusal has no code, errno, syscall or path: only its message names the path.
        let outside = WireError::from(CoreError::outside().at("open", Path::new("/etc/passwd")));
        assert_eq!(
            serde_json::to_string(&outside).unwrap(),
            r#"{"kind":"Outside","message":"path \"/etc/passwd\" is outside workspace"}"#
        );
        // Node's RangeError: its code, no errno.
        assert_eq!(
            serde_json::to_string(&WireError::from(CoreError::file_too_large(1 << 40))).unwrap(),
            r#"{"kind":"FileTooLarge","name":"RangeError","message":"File size (1099511627776) is greater than 2 GiB","code":"ERR_FS_FILE_TOO_LARGE"}"#
        );
        // A policy refusal: its rule, and no code, errno or path (the message names the path).
        let protected =
            WireError::from(CoreError::protected("*.pem").at("open", Path::new("/w/k.pem")));
        assert_eq!(
            serde_json::to_string(&protected).unwrap(),
            r#"{"kind":"Protected","message":"path \"/w/k.pem\" is protected by policy","rule":"*.pem"}"#
        );
        let spawn = WireError::from(CoreError::spawn("/bin/sh", 2));
        assert_eq!(spawn.syscall.as_deref(), Some("spawn /bin/sh"));
        assert_eq!(spawn.path.as_deref(), Some("/bin/sh"));
        // exec's preflight refusals: pi's text alone, under the core's kind.
        assert_eq!(
            serde_json::to_string(&WireError::from(CoreError::working_directory("/w/x"))).unwrap(),
            r#"{"kind":"WorkingDirectory","message":"Working directory does not exist: /w/x\nCannot execute bash commands."}"#
        );
        assert_eq!(
            serde_json::to_string(&WireError::from(CoreError::shell_not_found("/no/sh"))).unwrap(),
            r#"{"kind":"ShellNotFound","message":"Custom shell path not found: /no/sh"}"#
        );
    }

    #[test]
    fn events_travel_in_the_shape_on_policy_event_receives() {
        let event = |target, rule: Option<&str>, allowed, command: Option<&str>| {
            let e = WireEvent::from(PolicyEvent {
                tool: if command.is_some() { "bash" } else { "read" },
                command: command.map(str::to_string),
                target,
                rule: rule.map(str::to_string),
                allowed,
                time_ms: 1764787200000.5,
            });
            serde_json::to_string(&Outgoing::Event(&e)).unwrap()
        };
        assert_eq!(
            event(
                EventTarget::Read("/w/.env".into()),
                Some(".env"),
                false,
                None
            ),
            r#"{"t":"event","tool":"read","access":"read","path":"/w/.env","rule":".env","allowed":false,"time":1764787200000.5}"#
        );
        assert_eq!(
            event(
                EventTarget::Write("/w/.git/hooks/x".into()),
                Some("**/.git/hooks/"),
                false,
                Some("echo > .git/hooks/x")
            ),
            r#"{"t":"event","tool":"bash","access":"write","path":"/w/.git/hooks/x","rule":"**/.git/hooks/","allowed":false,"time":1764787200000.5,"command":"echo > .git/hooks/x"}"#
        );
        assert_eq!(
            event(
                EventTarget::Connect {
                    host: "example.com".into(),
                    port: 443
                },
                None,
                false,
                Some("curl example.com")
            ),
            r#"{"t":"event","tool":"bash","access":"connect","host":"example.com","port":443,"rule":null,"allowed":false,"time":1764787200000.5,"command":"curl example.com"}"#
        );
        assert_eq!(
            serde_json::to_string(&Outgoing::EventsDropped { count: 3 }).unwrap(),
            r#"{"t":"eventsDropped","count":3}"#
        );
    }

    #[test]
    fn answers_are_flat_objects() {
        let mut answer = Map::new();
        answer.insert("exists".into(), Value::Bool(true));
        let ok = serde_json::to_string(&Outgoing::Ok { id: 3, answer }).unwrap();
        assert_eq!(ok, r#"{"t":"ok","id":3,"exists":true}"#);
        let err = WireError::protocol("x");
        let frame = serde_json::to_string(&Outgoing::Error {
            id: None,
            error: &err,
        })
        .unwrap();
        assert_eq!(
            frame,
            r#"{"t":"error","error":{"kind":"Protocol","message":"x"}}"#
        );
    }
}
