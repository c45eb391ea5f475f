//! An event's body, the part its `print fmt` produced, as `(name, value)` fields.

use super::{Reject, SkipReason};

/// `name=value` pairs in print order; a body in any other format is one `("text", body)`.
pub(crate) fn parse(name: &str, body: &str) -> Result<Vec<(String, String)>, Reject> {
    match name {
        // The marker text is whatever user space wrote, even if it looks like name=value.
        "tracing_mark_write" => Ok(text_field(body)),
        "contention_begin" => parse_contention(body, "flags"),
        "contention_end" => parse_contention(body, "ret"),
        _ if looks_like_pairs(body) => Ok(parse_pairs(body)),
        _ => Ok(text_field(body)),
    }
}

/// True when a body reads as `name=value` pairs (an event's own print format, not free text).
pub(crate) fn looks_like_pairs(body: &str) -> bool {
    body.split_whitespace().next().and_then(as_pair).is_some()
}

fn text_field(body: &str) -> Vec<(String, String)> {
    vec![("text".to_string(), body.trim_end().to_string())]
}

/// The lock events print `ADDR (key=VALUE)` rather than name=value pairs.
fn parse_contention(body: &str, key: &str) -> Result<Vec<(String, String)>, Reject> {
    let bad = || Reject::new(SkipReason::Body, body);
    let (addr, rest) = body.trim().split_once(' ').ok_or_else(bad)?;
    let addr = addr.strip_prefix("0x").unwrap_or(addr);
    if addr.is_empty() || !addr.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let value = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .and_then(|r| r.strip_prefix(key))
        .and_then(|r| r.strip_prefix('='))
        .ok_or_else(bad)?;
    Ok(vec![
        ("lock_addr".to_string(), addr.to_string()),
        (key.to_string(), value.to_string()),
    ])
}

fn is_field_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn as_pair(token: &str) -> Option<(&str, &str)> {
    token
        .split_once('=')
        .filter(|(name, _)| is_field_name(name))
}

/// `a=1 b=x y c=2`: a token that is not `name=value` continues the previous value (comms
/// may hold spaces). sched_switch's `==>` separator is dropped, and the `,` some formats
/// put between pairs (`func=f, csd=0`) is trimmed off the value it ends.
fn parse_pairs(body: &str) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = Vec::new();
    for token in body.split_whitespace() {
        if token == "==>" {
            continue;
        }
        match (as_pair(token), fields.last_mut()) {
            (Some((name, value)), last) => {
                if let Some((_, previous)) = last {
                    if previous.ends_with(',') {
                        previous.pop();
                    }
                }
                fields.push((name.to_string(), value.to_string()));
            }
            (None, Some((_, previous))) => {
                previous.push(' ');
                previous.push_str(token);
            }
            // Only when the first token is not a pair, which the caller ruled out.
            (None, None) => fields.push(("text".to_string(), token.to_string())),
        }
    }
    fields
}
