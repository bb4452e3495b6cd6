//! The JSON lines spoken with the gateway over its attach stream. Commands
//! are written one whole line at a time; a reader task routes each answer
//! to its caller by the command's id, and notices at once when the
//! gateway's output ends (it died), so the next sandbox starts a new one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::engine::{Attached, LogChunk};
use crate::error::{Error, Result};
use crate::util::{lock, LineBuffer};

/// How long the gateway may take to start, or to answer one command.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// Callers waiting for answers, by command id; `None` once the gateway died.
type Routes = Arc<Mutex<Option<HashMap<String, oneshot::Sender<Value>>>>>;

/// The channel to one gateway.
pub(crate) struct Control {
    input: tokio::sync::Mutex<std::pin::Pin<Box<dyn AsyncWrite + Send>>>,
    routes: Routes,
    next_id: AtomicU64,
    dead: Arc<AtomicBool>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Control {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// An answer on its way.
pub(crate) struct Answer(oneshot::Receiver<Value>);

impl Answer {
    /// The answer; a refusal is an error with the gateway's reason.
    pub async fn wait(self) -> Result<Value> {
        let answer = match tokio::time::timeout(ANSWER_TIMEOUT, self.0).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => return Err(gone("it exited")),
            Err(_) => {
                return Err(gone(&format!(
                    "it did not answer within {ANSWER_TIMEOUT:?}"
                )))
            }
        };
        if answer["op"] == "error" {
            return Err(gone(answer["message"].as_str().unwrap_or("it refused")));
        }
        Ok(answer)
    }
}

fn gone(reason: &str) -> Error {
    Error::EgressGateway {
        reason: reason.to_string(),
    }
}

impl Control {
    /// Starts reading the gateway's output and waits for its `started` line.
    pub async fn start(attached: Attached) -> Result<Control> {
        let routes: Routes = Arc::new(Mutex::new(Some(HashMap::new())));
        let dead = Arc::new(AtomicBool::new(false));
        let (started_tx, started_rx) = oneshot::channel();
        let reader = tokio::spawn(read_answers(
            attached.output,
            routes.clone(),
            dead.clone(),
            started_tx,
        ));
        let control = Control {
            input: tokio::sync::Mutex::new(attached.input),
            routes,
            next_id: AtomicU64::new(0),
            dead,
            reader,
        };
        Answer(started_rx).wait().await?;
        Ok(control)
    }

    /// Whether the gateway's output ended or a write to it failed.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Sends a command (given an `id` here); its answer comes through the
    /// returned [`Answer`].
    pub async fn send(&self, mut command: Value) -> Result<Answer> {
        let id = format!("c{}", self.next_id.fetch_add(1, Ordering::Relaxed) + 1);
        command["id"] = json!(id);
        let (tx, rx) = oneshot::channel();
        match lock(&self.routes).as_mut() {
            Some(routes) => routes.insert(id, tx),
            None => return Err(gone("it exited")),
        };
        self.write(command).await?;
        Ok(Answer(rx))
    }

    /// Sends a command and waits for its answer.
    pub async fn request(&self, command: Value) -> Result<Value> {
        self.send(command).await?.wait().await
    }

    /// Sends a command nobody waits for (its answer is dropped).
    pub async fn tell(&self, mut command: Value) -> Result<()> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        command["id"] = json!(format!("c{id}"));
        self.write(command).await
    }

    async fn write(&self, command: Value) -> Result<()> {
        let mut line = command.to_string();
        line.push('\n');
        let mut input = self.input.lock().await;
        let sent = async {
            input.write_all(line.as_bytes()).await?;
            input.flush().await
        };
        let failed = match tokio::time::timeout(ANSWER_TIMEOUT, sent).await {
            Ok(Ok(())) => return Ok(()),
            // The line carries secrets: the error names neither it nor them.
            Ok(Err(e)) => format!("writing to it: {e}"),
            Err(_) => "it stopped reading its commands".to_string(),
        };
        self.dead.store(true, Ordering::Release);
        Err(gone(&failed))
    }
}

/// Routes answers to their callers until the gateway's output ends.
async fn read_answers(
    mut output: std::pin::Pin<Box<dyn futures::Stream<Item = Result<LogChunk>> + Send>>,
    routes: Routes,
    dead: Arc<AtomicBool>,
    started: oneshot::Sender<Value>,
) {
    let mut started = Some(started);
    let mut lines = LineBuffer::default();
    while let Some(Ok(chunk)) = output.next().await {
        let bytes = match chunk {
            LogChunk::Stdout(bytes) => bytes,
            LogChunk::Stderr(bytes) => {
                tracing::warn!(gateway = %String::from_utf8_lossy(&bytes).trim(), "egress gateway");
                continue;
            }
        };
        for line in lines.push(&bytes) {
            let Ok(answer) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            if answer["op"] == "started" {
                if let Some(tx) = started.take() {
                    let _ = tx.send(answer);
                }
                continue;
            }
            let Some(id) = answer["id"].as_str() else {
                continue;
            };
            let waiting = lock(&routes).as_mut().and_then(|r| r.remove(id));
            if let Some(tx) = waiting {
                let _ = tx.send(answer);
            }
        }
    }
    dead.store(true, Ordering::Release);
    // Every caller still waiting hears that it is gone.
    lock(&routes).take();
}
