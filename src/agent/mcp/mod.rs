//! The MCP client: a Model Context Protocol server (`[mcp.NAME]`) as a [`ToolSource`], on the
//! official Rust SDK (`rmcp`), over stdio or streamable HTTP.
//!
//! One session per source, and one source per engine: the CLI's engine lives for one run, a
//! worker's for all the runs it drives, so a server is started once per run or shared per
//! worker. The session connects when an agent first uses a toolset that names the server,
//! lists its tools (their names, descriptions and schemas become tool contracts, so a server
//! whose tools change re-keys the calls that use them), and ends with the engine: a stdio
//! server's process group is killed then. A session that died (the server crashed or broke
//! the protocol) is replaced at the next listing; its calls fail `tool_failed` meanwhile.

mod session;
mod spec;
mod stdio;
mod tool;

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use self::session::Session;
use self::spec::failed;
pub(crate) use self::spec::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_OUTPUT_BYTES, McpServerSpec, McpTransport,
};
use super::{Tool, ToolSource};
use crate::error::Error;

/// An MCP server's tools, listed on first use.
#[derive(Debug)]
pub(crate) struct McpSource {
    spec: Arc<McpServerSpec>,
    label: String,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    listed: Mutex<Option<Vec<Arc<dyn Tool>>>>,
}

impl McpSource {
    pub(crate) fn new(spec: McpServerSpec) -> McpSource {
        let label = format!("mcp server {}", spec.name);
        McpSource {
            spec: Arc::new(spec),
            label,
            session: tokio::sync::Mutex::new(None),
            listed: Mutex::new(None),
        }
    }

    async fn connect(&self) -> Result<(Arc<Session>, Vec<Arc<dyn Tool>>), Error> {
        let spec = self.spec.clone();
        let connecting = async {
            let session = Arc::new(Session::start(&spec).await?);
            let listed = session
                .client
                .peer()
                .list_all_tools()
                .await
                .map_err(|e| session.failure(&spec, "tools/list", &e))?;
            let tools = tool::contracts(&spec, &session, listed)?;
            Ok::<_, Error>((session, tools))
        };
        match tokio::time::timeout(spec.connect_timeout, connecting).await {
            Ok(result) => result,
            Err(_) => Err(failed(
                &spec,
                format!("did not start and list its tools within {} ms", spec.connect_timeout.as_millis()),
            )),
        }
    }
}

impl ToolSource for McpSource {
    fn name(&self) -> &str {
        &self.label
    }

    fn tools(&self) -> BoxFuture<'_, Result<Vec<Arc<dyn Tool>>, Error>> {
        Box::pin(async move {
            let mut session = self.session.lock().await;
            if let Some(live) = session.as_ref()
                && !live.client.is_closed()
                && let Some(tools) = self.listed()
            {
                return Ok(tools);
            }
            // Never started, or it died: (re)start it and list again.
            *session = None;
            let (started, tools) = self.connect().await?;
            *session = Some(started);
            *self.listed.lock().unwrap_or_else(|p| p.into_inner()) = Some(tools.clone());
            Ok(tools)
        })
    }

    fn listed(&self) -> Option<Vec<Arc<dyn Tool>>> {
        self.listed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
