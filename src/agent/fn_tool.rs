//! `FnTool`: a tool from an async closure over typed arguments, so an embedder writes neither
//! a `Tool` impl nor a boxed future.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::tools::{Tool, ToolJournaling};
use crate::error::Error;

type Call = Arc<dyn Fn(Value) -> BoxFuture<'static, Result<String, Error>> + Send + Sync>;

/// A [`Tool`] from an async closure: the model's arguments are validated against
/// `parameters` (a JSON Schema) before the call, then deserialized into the closure's
/// argument type; what the closure returns goes back to the model (a string as it is,
/// anything else as JSON).
///
/// ```
/// use std::sync::Arc;
/// use cairn::{Error, FnTool, Toolset};
/// use serde_json::json;
///
/// #[derive(serde::Deserialize)]
/// struct Add { a: i64, b: i64 }
///
/// let add = FnTool::new(
///     "add",
///     "Adds two integers.",
///     json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
///            "required": ["a", "b"]}),
///     |args: Add| async move { Ok::<_, Error>(args.a + args.b) },
/// );
/// let math = Toolset::new("math", vec![Arc::new(add)]);
/// # let _ = math;
/// ```
///
/// # Replay
/// Each call is journaled like any tool's (see [`ToolJournaling`], `Effect` unless set): a
/// resumed agent is served the calls that completed and never runs them again. The tool's
/// contract (name, description, parameters, version) is part of the agent call's identity;
/// its closure is not, so changing the body re-keys nothing and [`FnTool::with_version`]
/// does.
#[derive(Clone)]
pub struct FnTool {
    name: String,
    description: String,
    parameters: Value,
    version: String,
    journaling: ToolJournaling,
    call: Call,
}

impl FnTool {
    /// A tool named `name` (`[a-zA-Z0-9_-]`) whose arguments `parameters` describes, run by
    /// `f`. Version `1`, journaled as an effect.
    pub fn new<A, R, F, Fut>(name: &str, description: &str, parameters: Value, f: F) -> FnTool
    where
        A: DeserializeOwned + Send + 'static,
        R: Serialize + 'static,
        F: Fn(A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, Error>> + Send + 'static,
    {
        let tool = name.to_owned();
        let call: Call = Arc::new(move |args: Value| {
            let args = serde_json::from_value::<A>(args)
                .map_err(|e| Error::validation(format!("the arguments of {tool} do not fit it: {e}")));
            let running = args.map(&f);
            let tool = tool.clone();
            Box::pin(async move {
                let value = running?.await?;
                match serde_json::to_value(value) {
                    Ok(Value::String(text)) => Ok(text),
                    Ok(other) => Ok(other.to_string()),
                    Err(e) => Err(Error::new(
                        crate::error::ErrorCode::ToolFailed,
                        format!("the result of {tool} is not JSON: {e}"),
                    )),
                }
            })
        });
        FnTool {
            name: name.to_owned(),
            description: description.to_owned(),
            parameters,
            version: "1".to_owned(),
            journaling: ToolJournaling::Effect,
            call,
        }
    }

    /// The contract's version: bump it when the tool's meaning changes, so paid calls made
    /// with the old meaning are not served again.
    pub fn with_version(mut self, version: &str) -> FnTool {
        self.version = version.to_owned();
        self
    }

    /// How its calls are journaled: [`ToolJournaling::Read`] for a tool that only reads.
    pub fn with_journaling(mut self, journaling: ToolJournaling) -> FnTool {
        self.journaling = journaling;
        self
    }
}

impl fmt::Debug for FnTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool")
            .field("name", &self.name)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl Tool for FnTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    fn version(&self) -> &str {
        &self.version
    }

    fn call(&self, args: Value) -> BoxFuture<'static, Result<String, Error>> {
        (self.call)(args)
    }

    fn journaling(&self) -> ToolJournaling {
        self.journaling
    }
}
