//! A small blocking QMP client: one JSON object per line each way, commands matched to
//! replies by id, asynchronous events queued until someone asks for them.
//!
//! Crates exist (qmp, qapi), but both sit on an async runtime or generated schema types for
//! one QEMU release; a scenario times each round trip on its own thread, where a blocking
//! write and read is the whole cost.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How a QMP exchange failed, before the caller adds which QEMU it was.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    #[error("QMP socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("QEMU closed its QMP socket")]
    Closed,
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// QEMU's own error reply.
    #[error("{class}: {desc}")]
    Reply { class: String, desc: String },
    #[error("unexpected QMP message: {0}")]
    Protocol(String),
}

/// A connected QMP session, capabilities negotiated.
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    /// Events that arrived while waiting for a reply, oldest first.
    events: VecDeque<Value>,
    line: String,
}

/// One command's answer and how long the exchange took (write to parsed reply).
#[derive(Debug, Clone)]
pub struct Reply {
    pub value: Value,
    pub round_trip_ns: u64,
}

impl Qmp {
    /// Reads QEMU's greeting and negotiates capabilities; QEMU accepts commands after this.
    pub fn handshake(stream: UnixStream, timeout: Duration) -> Result<Qmp, QmpError> {
        let writer = stream.try_clone()?;
        let mut qmp = Qmp {
            reader: BufReader::new(stream),
            writer,
            next_id: 0,
            events: VecDeque::new(),
            line: String::new(),
        };
        let deadline = Instant::now() + timeout;
        let greeting = qmp.read_message(deadline, timeout)?;
        if greeting.get("QMP").is_none() {
            return Err(QmpError::Protocol(format!(
                "expected the QMP greeting, got {}",
                short(&greeting)
            )));
        }
        qmp.execute("qmp_capabilities", None, timeout)?;
        Ok(qmp)
    }

    /// Runs one command and waits for its reply; events that arrive meanwhile are queued.
    pub fn execute(
        &mut self,
        command: &str,
        arguments: Option<Value>,
        timeout: Duration,
    ) -> Result<Reply, QmpError> {
        self.next_id += 1;
        let id = self.next_id;
        let mut request = json!({ "execute": command, "id": id });
        if let Some(arguments) = arguments {
            request["arguments"] = arguments;
        }
        let mut text = request.to_string();
        text.push('\n');
        let start = Instant::now();
        let deadline = start + timeout;
        self.writer.write_all(text.as_bytes())?;
        loop {
            let message = self.read_message(deadline, timeout)?;
            if message.get("event").is_some() {
                self.events.push_back(message);
                continue;
            }
            if message.get("id").and_then(Value::as_u64) != Some(id) {
                return Err(QmpError::Protocol(short(&message)));
            }
            let round_trip_ns = start.elapsed().as_nanos() as u64;
            if let Some(value) = message.get("return") {
                return Ok(Reply {
                    value: value.clone(),
                    round_trip_ns,
                });
            }
            let error = message.get("error").cloned().unwrap_or_default();
            let field = |name: &str| {
                error
                    .get(name)
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string()
            };
            return Err(QmpError::Reply {
                class: field("class"),
                desc: field("desc"),
            });
        }
    }

    /// Waits for the first event (queued or arriving) for which `wanted` holds, dropping
    /// the others before it; returns it.
    pub fn wait_event(
        &mut self,
        wanted: impl Fn(&Value) -> bool,
        timeout: Duration,
    ) -> Result<Value, QmpError> {
        while let Some(event) = self.events.pop_front() {
            if wanted(&event) {
                return Ok(event);
            }
        }
        let deadline = Instant::now() + timeout;
        loop {
            let message = self.read_message(deadline, timeout)?;
            if message.get("event").is_some() && wanted(&message) {
                return Ok(message);
            }
        }
    }

    /// Drops the queued events.
    pub fn clear_events(&mut self) {
        self.events.clear();
    }

    fn read_message(&mut self, deadline: Instant, timeout: Duration) -> Result<Value, QmpError> {
        self.line.clear();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(QmpError::Timeout(timeout));
            }
            self.reader.get_ref().set_read_timeout(Some(left))?;
            match self.reader.read_line(&mut self.line) {
                Ok(0) => return Err(QmpError::Closed),
                // A line cut by the timeout stays in `line` and is completed by the next read.
                Ok(_) if !self.line.ends_with('\n') => continue,
                Ok(_) => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(QmpError::Timeout(timeout))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
        serde_json::from_str(self.line.trim_end())
            .map_err(|e| QmpError::Protocol(format!("{e}: {}", self.line.trim_end())))
    }
}

/// A message cut to a readable length for an error line.
fn short(message: &Value) -> String {
    let text = message.to_string();
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A fake QEMU on the other end of a socket pair: the client's framing, id matching,
    /// event queueing and error replies, without a QEMU.
    fn serve(script: &'static [&'static str]) -> (UnixStream, std::thread::JoinHandle<String>) {
        let (client, mut server) = UnixStream::pair().unwrap();
        let handle = std::thread::spawn(move || {
            let mut seen = String::new();
            let mut reader = BufReader::new(server.try_clone().unwrap());
            for line in script {
                if let Some(reply) = line.strip_prefix("> ") {
                    server.write_all(reply.as_bytes()).unwrap();
                    server.write_all(b"\n").unwrap();
                } else {
                    let mut request = String::new();
                    reader.read_line(&mut request).unwrap();
                    seen.push_str(&request);
                }
            }
            let _ = reader.read_to_string(&mut seen);
            seen
        });
        (client, handle)
    }

    #[test]
    fn commands_match_replies_by_id_and_queue_events() {
        let (client, server) = serve(&[
            r#"> {"QMP": {"version": {}, "capabilities": []}}"#,
            "<",
            r#"> {"return": {}, "id": 1}"#,
            "<",
            r#"> {"event": "MIGRATION", "data": {"status": "active"}}"#,
            r#"> {"return": {"status": "running"}, "id": 2}"#,
            "<",
            r#"> {"error": {"class": "GenericError", "desc": "Duplicate ID 'd0'"}, "id": 3}"#,
        ]);
        let t = Duration::from_secs(5);
        let mut qmp = Qmp::handshake(client, t).unwrap();
        let reply = qmp.execute("query-status", None, t).unwrap();
        assert_eq!(reply.value["status"], "running");
        let error = qmp
            .execute("device_add", Some(json!({"id": "d0"})), t)
            .unwrap_err();
        assert_eq!(error.to_string(), "GenericError: Duplicate ID 'd0'");
        let event = qmp.wait_event(|e| e["event"] == "MIGRATION", t).unwrap();
        assert_eq!(event["data"]["status"], "active");
        drop(qmp);
        let seen = server.join().unwrap();
        assert!(seen.contains(r#""execute":"qmp_capabilities""#), "{seen}");
        assert!(seen.contains(r#""arguments":{"id":"d0"}"#), "{seen}");
    }

    #[test]
    fn silence_is_a_timeout_and_a_closed_socket_says_so() {
        let (client, server) = serve(&[r#"> {"QMP": {}}"#, "<"]);
        let e = Qmp::handshake(client, Duration::from_millis(50))
            .err()
            .unwrap();
        assert!(matches!(e, QmpError::Timeout(_)), "{e}");
        drop(server);
        let (client, server) = UnixStream::pair().unwrap();
        drop(server);
        let e = Qmp::handshake(client, Duration::from_secs(5))
            .err()
            .unwrap();
        assert!(matches!(e, QmpError::Closed), "{e}");
    }
}
