//! Arbitrary bytes as pasted trace text, read by `text_import::TextReader` alone (no trace
//! directory, so that executions are fast enough to reach the line parsers' corners): the
//! kernel's layouts, trace-cmd report's default, -R and -l forms with their headers, instance
//! names, plugin and raw bodies and kernel_stack blocks, function tracer lines. Checks:
//! reading ends, every item is within the text's lines and bounded, every skipped line's
//! detail is one short line, and the same text quoted as a mail reply quotes it (`> ` and
//! `>> ` before every line) reads as the same items.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscale_trace::text::import::{
    import_text, Form, Item, TextReader, MAX_CPUS, MAX_FRAMES, MAX_LINE,
};

fuzz_target!(|data: &[u8]| {
    let mut reader = TextReader::new(data);
    let mut last_line = 0;
    for item in reader.by_ref() {
        match &item {
            Item::Event(event) => {
                assert!(event.cpu < MAX_CPUS);
                assert!(!event.name.is_empty() && !event.name.contains(char::is_whitespace));
                assert!(event.fields.iter().all(|(name, _)| !name.is_empty()));
                last_line = last_line.max(event.line);
            }
            Item::Stack(stack) => {
                assert!(stack.frames.len() <= MAX_FRAMES);
                assert!(stack.cpu < MAX_CPUS);
            }
            Item::Call(call) => assert!(call.cpu.is_none_or(|cpu| cpu < MAX_CPUS)),
            Item::Lost(lost) => assert!(lost.cpu < MAX_CPUS),
            Item::Skipped(skipped) => {
                assert!(skipped.detail.len() <= 120);
                assert!(!skipped.detail.contains('\n'));
                assert!(skipped.line >= 1);
            }
        }
    }
    assert!(last_line <= reader.lines_read());
    let forms = reader.forms();
    let described = forms.describe();
    assert!(!described.is_empty() && !described.contains('\n'));
    assert!(!forms.contains(Form::MailQuoted) || data.contains(&b'>'));

    // Quoting must not change what is read. Lines that already start with `>` lose more than
    // the reply's marks, and a line the marks push past the length limit is cut elsewhere.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines: Vec<&str> = text.split('\n').collect();
    if lines
        .iter()
        .any(|line| line.starts_with('>') || line.len() + 3 >= MAX_LINE)
    {
        return;
    }
    let quoted: String = lines
        .iter()
        .enumerate()
        .map(|(index, line)| {
            let mark = if index % 2 == 0 { "> " } else { ">> " };
            let end = if index + 1 == lines.len() { "" } else { "\n" };
            if line.is_empty() && index + 1 == lines.len() {
                String::new()
            } else {
                format!("{mark}{line}{end}")
            }
        })
        .collect();
    let plain = import_text(text);
    let reply = import_text(&quoted);
    assert_eq!(plain, reply);
});
