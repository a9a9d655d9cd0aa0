//! A host function offered to a model as a tool: its `description` and its JSON Schema
//! (`accepts`) are the contract, the function (a command, bounded in time and bytes, or a
//! Rust closure) is the implementation, and its JSON result is the tool result (a string as
//! itself, anything else as compact JSON).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::Tool;
use crate::error::Error;

/// The function behind the tool: JSON arguments in, a JSON result out.
pub(crate) type HostFunction = Arc<dyn Fn(Value) -> BoxFuture<'static, Result<Value, Error>> + Send + Sync>;

/// A host function as a tool.
pub(crate) struct HostFunctionTool {
    name: String,
    description: String,
    parameters: Value,
    version: String,
    function: HostFunction,
}

impl std::fmt::Debug for HostFunctionTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostFunctionTool").field("name", &self.name).finish_non_exhaustive()
    }
}

impl HostFunctionTool {
    pub(crate) fn new(
        name: &str,
        description: &str,
        parameters: Value,
        version: Option<&str>,
        function: HostFunction,
    ) -> HostFunctionTool {
        HostFunctionTool {
            name: name.to_owned(),
            description: description.to_owned(),
            parameters,
            version: version.unwrap_or("1").to_owned(),
            function,
        }
    }
}

impl Tool for HostFunctionTool {
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

    fn qualified_name(&self) -> Option<&str> {
        None
    }

    fn call(&self, args: Value) -> BoxFuture<'static, Result<String, Error>> {
        let call = (self.function)(args);
        Box::pin(async move {
            Ok(match call.await? {
                Value::String(text) => text,
                other => other.to_string(),
            })
        })
    }
}
