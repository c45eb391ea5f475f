//! A small blocking QMP client: one JSON object per line each way, commands matched to
//! replies by id, asynchronous events queued until someone asks for them.
//!
//! Crates exist (qmp, qapi), but both sit on an async runtime or generated schema types for
//! one QEMU release; a scenario times each round trip on its own thread, where a blocking
//! write and read is the whole cost.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
    /// A line longer than [`MAX_LINE_BYTES`]: no QMP reply vmscale asks for comes near it.
    #[error("QEMU sent a line of more than {} MiB", MAX_LINE_BYTES >> 20)]
    TooLong,
    /// A signal asked vmscale to stop while it waited.
    #[error("interrupted")]
    Interrupted,
}

/// The longest QMP line accepted. vmscale's largest replies (query-memory-devices with 256
/// DIMMs, query-migrate) are tens of KiB; a peer that never ends its line must not grow
/// vmscale's memory without bound.
pub const MAX_LINE_BYTES: usize = 4 << 20;

/// Events queued while waiting for replies, at most; older ones are dropped beyond it, so
/// a peer that floods events cannot grow memory either.
pub const MAX_QUEUED_EVENTS: usize = 4096;

/// How often a wait looks at its deadline and at the interrupt flag, however the bytes
/// arrive (one at a time, or none).
const POLL: Duration = Duration::from_millis(20);

/// A connected QMP session, capabilities negotiated.
///
/// Every read is bounded: a line by [`MAX_LINE_BYTES`], a wait by its deadline (checked
/// every [`POLL`] whether or not bytes trickle in), and by the interrupt flag, which ends
/// any wait within [`POLL`].
pub struct Qmp {
    stream: UnixStream,
    next_id: u64,
    /// Events that arrived while waiting for a reply, oldest first.
    events: VecDeque<Value>,
    /// Bytes read and not yet consumed: the start of the next line(s).
    pending: Vec<u8>,
    interrupt: Option<Arc<AtomicBool>>,
}

/// One command's answer and how long the exchange took (write to parsed reply).
#[derive(Debug, Clone)]
pub struct Reply {
    pub value: Value,
    pub round_trip_ns: u64,
}

impl Qmp {
    /// Reads QEMU's greeting and negotiates capabilities; QEMU accepts commands after this.
    /// Every wait ends early, with [`QmpError::Interrupted`], once `interrupt` is set.
    pub fn handshake(
        stream: UnixStream,
        timeout: Duration,
        interrupt: Option<Arc<AtomicBool>>,
    ) -> Result<Qmp, QmpError> {
        let mut qmp = Qmp {
            stream,
            next_id: 0,
            events: VecDeque::new(),
            pending: Vec::new(),
            interrupt,
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
        self.write_all(text.as_bytes(), deadline, timeout)?;
        loop {
            let message = self.read_message(deadline, timeout)?;
            if message.get("event").is_some() {
                if self.events.len() >= MAX_QUEUED_EVENTS {
                    self.events.pop_front();
                }
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

    fn interrupted(&self) -> bool {
        self.interrupt
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
    }

    /// How long the next blocking call may wait: until the deadline, at most [`POLL`].
    fn slice(&self, deadline: Instant, timeout: Duration) -> Result<Duration, QmpError> {
        if self.interrupted() {
            return Err(QmpError::Interrupted);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(QmpError::Timeout(timeout));
        }
        Ok(left.min(POLL))
    }

    /// Writes a command; a peer that stops reading cannot block it past the deadline.
    fn write_all(
        &mut self,
        mut bytes: &[u8],
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(), QmpError> {
        while !bytes.is_empty() {
            let slice = self.slice(deadline, timeout)?;
            self.stream.set_write_timeout(Some(slice))?;
            match self.stream.write(bytes) {
                Ok(0) => return Err(QmpError::Closed),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if is_wait(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The next line as JSON. The deadline and the interrupt flag are looked at every
    /// [`POLL`] and after every read, so a peer that trickles bytes, floods one endless
    /// line or goes silent ends the wait on time.
    fn read_message(&mut self, deadline: Instant, timeout: Duration) -> Result<Value, QmpError> {
        let mut scanned = 0;
        let end = loop {
            if let Some(at) = self.pending[scanned..].iter().position(|&b| b == b'\n') {
                break scanned + at;
            }
            scanned = self.pending.len();
            if scanned > MAX_LINE_BYTES {
                return Err(QmpError::TooLong);
            }
            let slice = self.slice(deadline, timeout)?;
            self.stream.set_read_timeout(Some(slice))?;
            let mut chunk = [0u8; 64 << 10];
            let room = chunk.len().min(MAX_LINE_BYTES + 1 - scanned);
            match self.stream.read(&mut chunk[..room]) {
                Ok(0) => return Err(QmpError::Closed),
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(e) if is_wait(&e) => {}
                Err(e) => return Err(e.into()),
            }
        };
        if end > MAX_LINE_BYTES {
            return Err(QmpError::TooLong);
        }
        let line: Vec<u8> = self.pending.drain(..=end).collect();
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        serde_json::from_str(text).map_err(|e| {
            let shown: String = text.chars().take(200).collect();
            QmpError::Protocol(format!("{e}: {shown}"))
        })
    }
}

/// A read or write that found nothing to do within its slice (or a signal interrupted
/// it): the loop looks at the deadline and the flag and goes on.
fn is_wait(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
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
    use std::io::{BufRead, BufReader};

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
        let mut qmp = Qmp::handshake(client, t, None).unwrap();
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
        let e = Qmp::handshake(client, Duration::from_millis(50), None)
            .err()
            .unwrap();
        assert!(matches!(e, QmpError::Timeout(_)), "{e}");
        drop(server);
        let (client, server) = UnixStream::pair().unwrap();
        drop(server);
        let e = Qmp::handshake(client, Duration::from_secs(5), None)
            .err()
            .unwrap();
        assert!(matches!(e, QmpError::Closed), "{e}");
    }

    /// A fake QEMU that sends `greeting` and then runs `then` on its end of the socket.
    fn peer(
        then: impl FnOnce(UnixStream) + Send + 'static,
    ) -> (UnixStream, std::thread::JoinHandle<()>) {
        let (client, server) = UnixStream::pair().unwrap();
        (client, std::thread::spawn(move || then(server)))
    }

    #[test]
    fn an_endless_line_is_refused_at_the_limit_not_read_into_memory() {
        let (client, server) = peer(|mut s| {
            let junk = vec![b'x'; 1 << 20];
            // Until the client hangs up: far more than the limit if it kept reading.
            while s.write_all(&junk).is_ok() {}
        });
        let start = Instant::now();
        let e = Qmp::handshake(client, Duration::from_secs(30), None)
            .err()
            .unwrap();
        assert!(matches!(e, QmpError::TooLong), "{e}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        server.join().unwrap();
    }

    #[test]
    fn a_trickling_greeting_ends_at_the_deadline() {
        let (client, server) = peer(|mut s| {
            // One byte every 50 ms, never a whole line.
            while s.write_all(b"{").is_ok() {
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let start = Instant::now();
        let e = Qmp::handshake(client, Duration::from_millis(400), None)
            .err()
            .unwrap();
        let took = start.elapsed();
        assert!(matches!(e, QmpError::Timeout(_)), "{e}");
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_millis(900),
            "{took:?}"
        );
        server.join().unwrap();
    }

    #[test]
    fn the_interrupt_flag_ends_a_silent_or_trickling_wait_at_once() {
        for trickle in [false, true] {
            let (client, server) = peer(move |mut s| {
                if trickle {
                    while s.write_all(b" ").is_ok() {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                } else {
                    // Silent until the client hangs up.
                    let _ = s.read(&mut [0u8; 1]);
                }
            });
            let flag = Arc::new(AtomicBool::new(false));
            let setter = {
                let flag = Arc::clone(&flag);
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(200));
                    flag.store(true, Ordering::Relaxed);
                    Instant::now()
                })
            };
            let e = Qmp::handshake(client, Duration::from_secs(30), Some(flag))
                .err()
                .unwrap();
            let ended = Instant::now();
            let set = setter.join().unwrap();
            assert!(matches!(e, QmpError::Interrupted), "{e}");
            let after = ended.duration_since(set);
            assert!(
                after < Duration::from_millis(100),
                "trickle {trickle}: {after:?}"
            );
            server.join().unwrap();
        }
    }

    #[test]
    fn a_flood_of_events_is_bounded_and_the_reply_still_found() {
        let (client, server) = peer(|mut s| {
            s.write_all(b"{\"QMP\": {}}\n").unwrap();
            let mut reader = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            s.write_all(b"{\"return\": {}, \"id\": 1}\n").unwrap();
            line.clear();
            reader.read_line(&mut line).unwrap();
            let event = b"{\"event\": \"X\", \"data\": {}}\n".repeat(1000);
            for _ in 0..20 {
                s.write_all(&event).unwrap();
            }
            s.write_all(b"{\"return\": {\"status\": \"running\"}, \"id\": 2}\n")
                .unwrap();
        });
        let t = Duration::from_secs(10);
        let mut qmp = Qmp::handshake(client, t, None).unwrap();
        let reply = qmp.execute("query-status", None, t).unwrap();
        assert_eq!(reply.value["status"], "running");
        assert_eq!(qmp.events.len(), MAX_QUEUED_EVENTS);
        server.join().unwrap();
    }
}
