//! Approvals and durable executions on a [`CodeHost`]: sealing the state an
//! execution stopped with, and going on from it.

use serde_json::{json, Map, Value};

use super::offer::module_offer;
use super::protocol::ToRunner;
use super::suspension::{Body, Decision, Suspended};
use super::toolset::Toolset;
use super::{CodeHost, Execution};
use crate::error::ToolCallRecord;
use crate::error::{Error, Result};

/// What an execution was started with, kept in its suspension.
pub(crate) struct Origin {
    pub code: String,
    pub tools: Vec<String>,
    pub approval: Vec<String>,
}

impl CodeHost {
    /// Seals the state the bridge saved when the code stopped for approval.
    pub(super) async fn seal(
        &self,
        origin: &Origin,
        mut saved: Value,
        execution: &Execution,
        tools: &Toolset,
    ) -> Result<Suspended> {
        let tool = saved["tool"].as_str().unwrap_or_default().to_string();
        let args: Vec<Value> = serde_json::from_value(saved["args"].take()).unwrap_or_default();
        let kwargs: Map<String, Value> =
            serde_json::from_value(saved["kwargs"].take()).unwrap_or_default();
        let named = tools
            .get(&tool)
            .and_then(|t| t.bind(&args, &kwargs).ok())
            .map(Value::Object)
            .unwrap_or_else(|| json!({"args": args, "kwargs": kwargs}));
        let body = Body {
            id: format!("susp-{}", uuid::Uuid::new_v4().simple()),
            created: 0,
            expires: 0,
            monty: crate::image::bridge::MONTY_PACKAGE.to_string(),
            code: origin.code.clone(),
            tools: origin.tools.clone(),
            approval: origin.approval.clone(),
            tool,
            args,
            kwargs,
            named,
            stdout: execution.stdout.clone(),
            stdout_truncated: execution.stdout_truncated,
            saved,
        };
        self.config().suspensions.seal(body).await
    }

    /// Reads a suspension kept as bytes ([`Suspended::to_bytes`]) with this
    /// host's [`SuspensionStore`](super::SuspensionStore), checking its seal,
    /// format, Monty build and expiry.
    pub async fn open_suspended(&self, sealed: &[u8]) -> Result<Suspended> {
        self.config().suspensions.open(sealed).await
    }

    /// Goes on with a suspended execution (from this host or any other that
    /// shares its [`SuspensionStore`](super::SuspensionStore)), deciding the
    /// call it stopped at:
    ///
    /// - [`Decision::Approve`] runs the tool (from `tools`) with the code's
    ///   arguments, and the code goes on with its result;
    /// - [`Decision::Reject`] raises `ToolError` at the call, which the code
    ///   may catch;
    /// - [`Decision::Return`] answers the call with a value, without the tool.
    ///
    /// The returned execution's output starts with what the code printed
    /// before it stopped; it may stop again at a later call. Each
    /// suspension resumes once: it is recorded in the store before the tool
    /// runs, and a second resume is refused with
    /// [`Error::SuspensionRefused`], so a tool never runs twice for it. File
    /// and Dir handles returned by sandbox tools before the suspension do
    /// not outlive it.
    ///
    /// ```no_run
    /// # async fn demo(host: dockhand::codemode::CodeHost, tools: dockhand::codemode::Toolset) -> dockhand::Result<()> {
    /// use dockhand::codemode::Decision;
    /// let run = host.execute("r = await refund(order='A7')\nr", serde_json::json!({}), &tools).await?;
    /// if let Some(stopped) = run.suspended {
    ///     let kept = stopped.to_bytes(); // store it; later, anywhere:
    ///     let stopped = host.open_suspended(&kept).await?;
    ///     let done = host.resume(&stopped, Decision::Approve, &tools).await?;
    ///     println!("{}", done.value);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn resume(
        &self,
        suspended: &Suspended,
        decision: Decision,
        tools: &Toolset,
    ) -> Result<Execution> {
        let body = suspended.body();
        if decision == Decision::Approve && tools.get(&body.tool).is_none() {
            return Err(Error::spec(
                "resume",
                format!(
                    "the toolset has no `{}` to run for the approved call",
                    body.tool
                ),
            ));
        }
        self.config().suspensions.claim(suspended).await?;
        let (reply, earlier) = self.decide(body, decision, tools).await;
        let mut saved = body.saved.clone();
        saved["stdout"] = json!(body.stdout);
        saved["stdout_truncated"] = json!(body.stdout_truncated);
        let origin = Origin {
            code: body.code.clone(),
            tools: body.tools.clone(),
            approval: body.approval.clone(),
        };
        let (_, modules) = module_offer(tools, &body.code, false)?;
        let request = |id: String| ToRunner::Resume {
            id,
            code: body.code.clone(),
            tools: body.tools.clone(),
            approval: body.approval.clone(),
            suspended: saved,
            reply,
            modules,
        };
        self.exchange(request, tools, None, &origin, earlier).await
    }

    /// The stopped call's outcome for the bridge, and its record if the tool ran.
    async fn decide(
        &self,
        body: &Body,
        decision: Decision,
        tools: &Toolset,
    ) -> (Value, Vec<ToolCallRecord>) {
        match decision {
            Decision::Approve => {
                let scope = format!("resume:{}", body.id);
                let (_, record, reply) = self
                    .call_tool(
                        tools,
                        &scope,
                        0,
                        body.tool.clone(),
                        body.args.clone(),
                        body.kwargs.clone(),
                    )
                    .await;
                self.handles().release(&scope);
                let reply = match reply {
                    Ok(value) => json!({"ok": true, "value": value}),
                    Err(error) => json!({"ok": false, "error": error}),
                };
                (reply, vec![record])
            }
            Decision::Reject(reason) => {
                let why = if reason.trim().is_empty() {
                    "no reason given".to_string()
                } else {
                    reason
                };
                let error = format!("{}() was not approved: {why}", body.tool);
                (json!({"ok": false, "error": error}), Vec::new())
            }
            Decision::Return(value) => (json!({"ok": true, "value": value}), Vec::new()),
        }
    }
}
