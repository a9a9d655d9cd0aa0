//! Every recorded real stream under `shared/fixtures/sse/` through the matching adapter's
//! decoder, compared turn by turn with a table of what each stream itself says (text, tool
//! calls with parsed arguments, finish reason, usage, kept provider blocks).
//!
//! The table was produced by a separate, deliberately naive reading of the streams (one fold
//! per wire dialect over the raw JSON, written apart from the adapters) and checked by hand for
//! the accounting facts the fixtures README lists; a decoder change that alters any line fails
//! here with the line. Files holding several responses (recorded multi-turn exchanges) are
//! split at each response start, so every turn in them is checked.

use cairn::provider::anthropic::AnthropicDecoder;
use cairn::provider::openai_chat::ChatDecoder;
use cairn::provider::openai_responses::ResponsesDecoder;
use cairn::provider::sse::{SseEvent, SseParser};
use cairn::provider::{ChatEvent, StreamDecoder, decode_sse};
use cairn::{ErrorCode, Usage};

/// Where the recorded streams live: `shared/` beside the clone.
const SSE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/sse/");

/// The prompt-token estimate handed to chat decoders, used only when a stream reports no usage.
const INPUT_ESTIMATE: u64 = 100;

pub(crate) fn read(rel: &str) -> Vec<u8> {
    let path = format!("{SSE_DIR}{rel}");
    std::fs::read(&path).unwrap_or_else(|err| panic!("cannot read fixture {path}: {err}"))
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Dialect {
    Anthropic,
    Chat,
    Responses,
}

impl Dialect {
    fn of(rel: &str) -> Dialect {
        if rel.starts_with("anthropic/") || rel.contains("/anthropic/") {
            Dialect::Anthropic
        } else if rel.contains("/responses/") {
            Dialect::Responses
        } else {
            Dialect::Chat
        }
    }

    fn decoder(self) -> Box<dyn StreamDecoder> {
        match self {
            Dialect::Anthropic => Box::new(AnthropicDecoder::new("anthropic")),
            Dialect::Chat => Box::new(ChatDecoder::new("openai", INPUT_ESTIMATE)),
            Dialect::Responses => Box::new(ResponsesDecoder::new("openai", INPUT_ESTIMATE)),
        }
    }

    /// Whether `event` opens a new response in a file that records several.
    fn starts_response(self, event: &SseEvent) -> bool {
        let kind = serde_json::from_str::<serde_json::Value>(&event.data)
            .ok()
            .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned));
        match self {
            Dialect::Anthropic => kind.as_deref() == Some("message_start"),
            Dialect::Responses => kind.as_deref() == Some("response.created"),
            Dialect::Chat => false,
        }
    }
}

/// Decodes every response in a recorded file: one event list per turn, each ending in its
/// terminal event.
pub(crate) fn decode_turns(rel: &str) -> Vec<Vec<ChatEvent>> {
    let dialect = Dialect::of(rel);
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    parser.feed(&read(rel), &mut events);
    parser.finish(&mut events);
    let mut turns = Vec::new();
    let mut decoder = dialect.decoder();
    let mut current = Vec::new();
    let mut fed = false;
    let mut skipping = false;
    for event in &events {
        if skipping {
            if !dialect.starts_response(event) {
                continue;
            }
            skipping = false;
            decoder = dialect.decoder();
        }
        fed = true;
        decoder.on_event(event, &mut current);
        if let Some(end) = current.iter().position(ChatEvent::is_terminal) {
            current.truncate(end + 1);
            turns.push(std::mem::take(&mut current));
            skipping = true;
            fed = false;
        }
    }
    if fed {
        decoder.on_end(&mut current);
        if !current.iter().any(ChatEvent::is_terminal) {
            current.push(ChatEvent::Error(cairn::Error::new(ErrorCode::Transport, "truncated")));
        }
        turns.push(current);
    }
    turns
}

/// One line per turn, in the table's format.
fn render(rel: &str, index: usize, events: &[ChatEvent]) -> String {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut tools = Vec::new();
    let mut raws = Vec::new();
    let mut finish = String::from("none");
    let mut usage = Usage::default();
    for event in events {
        match event {
            ChatEvent::TextDelta(t) => text.push_str(t),
            ChatEvent::ReasoningDelta(t) => reasoning.push_str(t),
            ChatEvent::ToolCallEnd { name, arguments, .. } => {
                let canonical = serde_json_canonicalizer::to_string(arguments).unwrap();
                tools.push(format!("{name}{canonical}"));
            }
            ChatEvent::ProviderRaw { data, .. } => {
                raws.push(data.get("type").and_then(|t| t.as_str()).unwrap_or("?").to_owned());
            }
            ChatEvent::Finish { reason, usage: u } => {
                finish = reason.as_str().to_owned();
                usage = *u;
            }
            ChatEvent::Error(error) => finish = format!("error:{}", error.code),
            ChatEvent::ToolCallInvalid { name, raw_arguments, .. } => {
                tools.push(format!("{name}!{raw_arguments}"))
            }
            ChatEvent::Opened
            | ChatEvent::Unanswered
            | ChatEvent::ToolCallStart { .. }
            | ChatEvent::ToolCallDelta { .. }
            | ChatEvent::Usage(_) => {}
        }
    }
    let prefix: String = text.chars().take(20).collect();
    format!(
        "{rel}#{index} {finish} in={} out={} cr={} cw={} rs={}{} text={}:{} reasoning={} tools=[{}] raws=[{}]",
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.reasoning_tokens,
        if usage.approximate { " approx" } else { "" },
        text.chars().count(),
        serde_json::to_string(&prefix).unwrap(),
        reasoning.chars().count(),
        tools.join(" "),
        raws.join(","),
    )
}

/// The contract every decoded turn keeps, whatever the stream.
fn check_contract(rel: &str, events: &[ChatEvent]) {
    let terminals = events.iter().filter(|e| e.is_terminal()).count();
    assert_eq!(terminals, 1, "{rel}: {terminals} terminal events");
    assert!(events.last().is_some_and(ChatEvent::is_terminal), "{rel}: terminal event is not last");
    let mut started = std::collections::HashMap::new();
    for event in events {
        match event {
            ChatEvent::ToolCallStart { wire_id, .. } => {
                started.insert(wire_id.clone(), String::new());
            }
            ChatEvent::ToolCallDelta { wire_id, arguments_delta } => {
                started
                    .get_mut(wire_id)
                    .unwrap_or_else(|| panic!("{rel}: delta before start"))
                    .push_str(arguments_delta);
            }
            ChatEvent::ToolCallEnd { wire_id, arguments, .. } => {
                let streamed = started.get(wire_id).unwrap_or_else(|| panic!("{rel}: end before start"));
                if !streamed.is_empty() {
                    let parsed: serde_json::Value = serde_json::from_str(streamed).unwrap();
                    assert_eq!(&parsed, arguments, "{rel}: streamed arguments differ from the final ones");
                }
            }
            ChatEvent::Finish { usage, .. } => {
                assert!(usage.input_tokens >= usage.cache_read_tokens + usage.cache_write_tokens, "{rel}");
                assert!(usage.output_tokens >= usage.reasoning_tokens, "{rel}: reasoning outside output");
            }
            ChatEvent::Error(error) => {
                assert!(
                    error.code != ErrorCode::Transport || error.retryable,
                    "{rel}: transport errors are retryable"
                )
            }
            _ => {}
        }
    }
}

#[test]
fn every_recorded_stream_decodes_to_what_it_says() {
    let mut actual = Vec::new();
    let mut files: Vec<&str> = GOLDEN.lines().map(|l| l.split('#').next().unwrap()).collect();
    files.dedup();
    for rel in &files {
        for (index, turn) in decode_turns(rel).iter().enumerate() {
            check_contract(rel, turn);
            actual.push(render(rel, index, turn));
        }
    }
    let expected: Vec<&str> = GOLDEN.lines().collect();
    for (want, got) in expected.iter().zip(&actual) {
        assert_eq!(got, want, "decoded turn differs from the stream's own content");
    }
    assert_eq!(actual.len(), expected.len(), "turn count differs:\n{}", actual.join("\n"));
}

#[test]
fn the_table_covers_every_recorded_stream() {
    let mut found = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(SSE_DIR)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(SSE_DIR).unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                // vercel-ai holds the same streams as JSONL chunks; derived/ is their SSE form.
                if !rel.starts_with("vercel-ai") {
                    dirs.push(path);
                }
            } else if [".sse", ".txt", ".bin"].iter().any(|ext| rel.ends_with(ext)) {
                found.push(rel);
            }
        }
    }
    found.sort();
    let mut covered: Vec<&str> = GOLDEN.lines().map(|l| l.split('#').next().unwrap()).collect();
    covered.dedup();
    assert_eq!(found, covered);
}

#[test]
fn accounting_facts_from_the_fixtures_readme() {
    let finish_usage = |rel: &str, turn: usize| -> Usage {
        match decode_turns(rel)[turn].last() {
            Some(ChatEvent::Finish { usage, .. }) => *usage,
            other => panic!("{rel}: {other:?}"),
        }
    };
    // The upstream SDK reads this stream as input 377 / output 65 (the start's output 1 is a placeholder).
    let usage = finish_usage("anthropic/tests/lib/streaming/fixtures/tool_use_response.txt", 0);
    assert_eq!((usage.input_tokens, usage.output_tokens), (377, 65));
    // message_delta replaces input_tokens: 43 -> 61.
    let usage = finish_usage(
        "derived/packages/anthropic/src/__fixtures__/anthropic-message-delta-input-tokens.sse",
        0,
    );
    assert_eq!((usage.input_tokens, usage.output_tokens), (61, 2));
    // Cache reads and writes are part of the input.
    let usage = finish_usage(
        "derived/packages/anthropic/src/__fixtures__/anthropic-code-execution-20260120-prompt-cache.1.sse",
        0,
    );
    assert_eq!(
        (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens),
        (6 + 6289 + 3337, 6289, 3337)
    );
    // xAI counts reasoning outside completion: 12 + 2 + 340 = 354.
    let usage = finish_usage("derived/packages/openai-compatible/src/chat/__fixtures__/xai-text.sse", 0);
    assert_eq!((usage.input_tokens, usage.output_tokens, usage.reasoning_tokens), (12, 342, 340));
    assert_eq!(usage.total_tokens(), 354);
    // Azure/OpenAI count it inside: 15 + 78 = 93, 64 of them reasoning.
    let usage = finish_usage("derived/packages/openai/src/chat/__fixtures__/azure-model-router.1.sse", 0);
    assert_eq!((usage.input_tokens, usage.output_tokens, usage.reasoning_tokens), (15, 78, 64));
    // llama.cpp reports nothing: estimated, flagged, never a silent zero.
    let usage = finish_usage("llama-cpp-python-recorded/stream.sse", 0);
    assert!(usage.approximate && usage.input_tokens == INPUT_ESTIMATE && usage.output_tokens > 0);
}

#[test]
fn thinking_blocks_keep_their_signature_for_replay() {
    let turns = decode_turns("anthropic/tests/fixtures/fable-fallback/stream-a-refusal.sse");
    let raw = turns[0].iter().find_map(|e| match e {
        ChatEvent::ProviderRaw { provider, data } if provider == "anthropic" => Some(data.clone()),
        _ => None,
    });
    let raw = raw.expect("a thinking block");
    assert_eq!(raw["type"], "thinking");
    assert_eq!(raw["signature"], "c3ludGhldGljLXNpZ25hdHVyZS1maXh0dXJlLWEtbm90LWEtcmVhbC1zaWduYXR1cmU=");
    assert!(raw["thinking"].as_str().unwrap().starts_with("Simple educational question"));
}

#[test]
fn a_spliced_stream_fails_retryably_without_the_second_call() {
    let turns = decode_turns("derived/packages/anthropic/src/__fixtures__/spliced-message-start.sse");
    assert_eq!(turns.len(), 1);
    let Some(ChatEvent::Error(error)) = turns[0].last() else { panic!("{:?}", turns[0]) };
    assert_eq!((error.code, error.retryable), (ErrorCode::Transport, true));
    assert!(!turns[0].iter().any(|e| matches!(e, ChatEvent::ToolCallEnd { .. })));
}

#[test]
fn a_non_streamed_completion_decodes_too() {
    // Some compatible servers ignore `stream: true` and answer with one JSON document.
    let mut decoder = ChatDecoder::new("llama", INPUT_ESTIMATE);
    let mut events = Vec::new();
    decoder.on_json_body(&read("llama-cpp-python-recorded/nonstream.json"), &mut events);
    let text: String = events
        .iter()
        .filter_map(|e| if let ChatEvent::TextDelta(t) = e { Some(t.as_str()) } else { None })
        .collect();
    assert!(text.starts_with("The sea is a vast and mysterious realm"));
    let Some(ChatEvent::Finish { usage, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!((usage.input_tokens, usage.output_tokens, usage.approximate), (37, 19, false));
}

#[test]
fn any_chunking_decodes_the_same() {
    // The byte stream is cut every few bytes; decoding must not depend on where.
    for rel in [
        "anthropic/tests/fixtures/fable-fallback/stream-a-refusal.sse",
        "openai-python/chat_completions/.inline-snapshot/external/f82268f2fefd5cfbc7eeb59c297688be2f6ca0849a6e4f17851b517310841d9b.bin",
        "derived/packages/openai/src/responses/__fixtures__/openai-client-tool-search.2.sse",
    ] {
        let bytes = read(rel);
        let whole = decode_sse(&mut *Dialect::of(rel).decoder(), &bytes);
        for step in [1, 7, 64] {
            let mut decoder = Dialect::of(rel).decoder();
            let mut parser = SseParser::new();
            let mut out = Vec::new();
            let mut events = Vec::new();
            for chunk in bytes.chunks(step) {
                parser.feed(chunk, &mut events);
            }
            parser.finish(&mut events);
            for event in &events {
                decoder.on_event(event, &mut out);
                if out.iter().any(ChatEvent::is_terminal) {
                    break;
                }
            }
            assert_eq!(out, whole, "{rel} in chunks of {step}");
        }
    }
}

/// One line per decoded turn: `file#turn finish usage text=chars:prefix reasoning=chars
/// tools=[name{args}] raws=[types]`.
const GOLDEN: &str = r####"anthropic/tests/fixtures/fable-fallback/stream-a-refusal.sse#0 refusal in=28 out=106 cr=0 cw=0 rs=67 text=2:"Hi" reasoning=212 tools=[] raws=[thinking]
anthropic/tests/fixtures/fable-fallback/stream-a-toolrefusal.sse#0 refusal in=28 out=106 cr=0 cw=0 rs=67 text=54:"Here's a summary of " reasoning=0 tools=[] raws=[server_tool_use,web_search_tool_result]
anthropic/tests/fixtures/fable-fallback/stream-b-fallback.sse#0 stop in=31 out=547 cr=0 cw=0 rs=0 text=1312:" there! Happy to exp" reasoning=0 tools=[] raws=[]
anthropic/tests/lib/streaming/fixtures/basic_response.txt#0 stop in=11 out=6 cr=0 cw=0 rs=0 text=12:"Hello there!" reasoning=0 tools=[] raws=[]
anthropic/tests/lib/streaming/fixtures/compaction_response.txt#0 stop in=30 out=8 cr=0 cw=0 rs=0 text=12:"Hello there!" reasoning=0 tools=[] raws=[compaction]
anthropic/tests/lib/streaming/fixtures/fallback_credit_response.txt#0 stop in=25 out=8 cr=0 cw=0 rs=0 text=12:"Hello there!" reasoning=0 tools=[] raws=[]
anthropic/tests/lib/streaming/fixtures/fallback_response.txt#0 stop in=25 out=8 cr=0 cw=0 rs=0 text=12:"Hello there!" reasoning=0 tools=[] raws=[fallback]
anthropic/tests/lib/streaming/fixtures/incomplete_partial_json_response.txt#0 length in=450 out=124 cr=0 cw=0 rs=0 text=135:"I'll create a compre" reasoning=0 tools=[] raws=[]
anthropic/tests/lib/streaming/fixtures/refusal_response.txt#0 refusal in=20 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[]
anthropic/tests/lib/streaming/fixtures/tool_use_response.txt#0 tool_use in=377 out=65 cr=0 cw=0 rs=0 text=48:"I'll check the curre" reasoning=0 tools=[get_weather{"location":"Paris"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-advisor-20250301.1.sse#0 stop in=4727 out=3391 cr=0 cw=0 rs=0 text=11250:"# Concurrent Worker " reasoning=0 tools=[] raws=[server_tool_use,advisor_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-advisor-stop-reasons.sse#0 stop in=10 out=20 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[server_tool_use,advisor_tool_result,server_tool_use,advisor_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-clear-thinking.1.sse#0 stop in=69 out=53 cr=0 cw=0 rs=0 text=13:"925 ÷ 5 = 185" reasoning=75 tools=[] raws=[thinking]
derived/packages/anthropic/src/__fixtures__/anthropic-clear-tool-uses.1.sse#0 stop in=859 out=122 cr=0 cw=0 rs=0 text=440:"\n\nHere's a compariso" reasoning=0 tools=[] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-code-execution-20250825.1.sse#0 stop in=8050 out=771 cr=0 cw=0 rs=0 text=795:"I'll create a Python" reasoning=0 tools=[] raws=[server_tool_use,text_editor_code_execution_tool_result,server_tool_use,bash_code_execution_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-code-execution-20250825.2.sse#0 stop in=15696 out=2479 cr=0 cw=0 rs=0 text=1790:"I'll help you create" reasoning=0 tools=[] raws=[server_tool_use,text_editor_code_execution_tool_result,server_tool_use,bash_code_execution_tool_result,server_tool_use,bash_code_execution_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-code-execution-20250825.pptx-skill.sse#0 stop in=320032 out=5558 cr=0 cw=0 rs=0 text=2870:"I need to create a P" reasoning=0 tools=[] raws=[server_tool_use,text_editor_code_execution_tool_result,server_tool_use,text_editor_code_execution_tool_result,server_tool_use,text_editor_code_execution_tool_result,server_tool_use,text_editor_code_execution_tool_result,server_tool_use,text_editor_code_execution_tool_result,server_tool_use,text_editor_code_execution_tool_result,server_tool_use,text_editor_code_execution_tool_result,server_tool_use,bash_code_execution_tool_result,server_tool_use,text_editor_code_execution_tool_result,server_tool_use,bash_code_execution_tool_result,server_tool_use,text_editor_code_execution_tool_result,server_tool_use,bash_code_execution_tool_result,server_tool_use,text_editor_code_execution_tool_result,server_tool_use,bash_code_execution_tool_result,server_tool_use,bash_code_execution_tool_result,server_tool_use,bash_code_execution_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-code-execution-20260120-prompt-cache.1.sse#0 stop in=9632 out=198 cr=6289 cw=3337 rs=0 text=62:"The sum of the squar" reasoning=0 tools=[] raws=[server_tool_use,bash_code_execution_tool_result,server_tool_use,bash_code_execution_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-code-execution-file-upload.1.sse#0 stop in=11505 out=1103 cr=0 cw=0 rs=0 text=1019:"I'll analyze the CSV" reasoning=0 tools=[] raws=[server_tool_use,text_editor_code_execution_tool_result,server_tool_use,text_editor_code_execution_tool_result,server_tool_use,bash_code_execution_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-combined-context-editing.1.sse#0 stop in=50 out=485 cr=0 cw=0 rs=0 text=362:"# 25 × 37\n\nLet me br" reasoning=563 tools=[] raws=[thinking]
derived/packages/anthropic/src/__fixtures__/anthropic-compaction.1.sse#0 stop in=612 out=2819 cr=0 cw=0 rs=0 text=8512:"Based on the convers" reasoning=0 tools=[] raws=[compaction]
derived/packages/anthropic/src/__fixtures__/anthropic-fallback.sse#0 stop in=412 out=264 cr=0 cw=0 rs=0 text=66:"The printing press w" reasoning=0 tools=[] raws=[fallback]
derived/packages/anthropic/src/__fixtures__/anthropic-json-other-tool.1.sse#0 tool_use in=843 out=28 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[weather{"location":"San Francisco"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-json-output-format.1.sse#0 stop in=313 out=305 cr=0 cw=0 rs=0 text=1267:"{\"characters\":[{\"nam" reasoning=0 tools=[] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-json-tool.1.sse#0 tool_use in=849 out=47 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[json{"elements":[{"condition":"sunny","location":"San Francisco","temperature":58}]}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-json-tool.2.sse#0 tool_use in=849 out=47 cr=0 cw=0 rs=0 text=35:"I'll invoke the JSON" reasoning=0 tools=[json{"elements":[{"condition":"sunny","location":"San Francisco","temperature":58}]}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-mcp.1.sse#0 stop in=1250 out=83 cr=0 cw=0 rs=0 text=112:"The echo tool respon" reasoning=0 tools=[] raws=[mcp_tool_use,mcp_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-message-delta-input-tokens.sse#0 stop in=61 out=2 cr=0 cw=0 rs=0 text=4:"pong" reasoning=0 tools=[] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#0 tool_use in=3369 out=725 cr=0 cw=0 rs=0 text=157:"I'll help you simula" reasoning=0 tools=[rollDie{"player":"player1"}] raws=[server_tool_use]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#1 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[rollDie{"player":"player2"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#2 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[rollDie{"player":"player1"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#3 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[rollDie{"player":"player2"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#4 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[rollDie{"player":"player1"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#5 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[rollDie{"player":"player2"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#6 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[rollDie{"player":"player1"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#7 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[rollDie{"player":"player2"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#8 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[rollDie{"player":"player1"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#9 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[rollDie{"player":"player2"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#10 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[rollDie{"player":"player1"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#11 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[rollDie{"player":"player2"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#12 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[rollDie{"player":"player1"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#13 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[rollDie{"player":"player2"}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-programmatic-tool-calling.1.sse#14 stop in=4551 out=197 cr=0 cw=0 rs=0 text=675:"## Game Results\n\n**P" reasoning=0 tools=[] raws=[code_execution_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-refusal.sse#0 refusal in=18 out=5 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-text.sse#0 stop in=12 out=30 cr=0 cw=0 rs=0 text=108:"Hello! I'm doing wel" reasoning=0 tools=[] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-tool-no-args.sse#0 tool_use in=565 out=48 cr=0 cw=0 rs=0 text=35:"I'll update the issu" reasoning=0 tools=[updateIssueList{}] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-tool-search-bm25.1.sse#0 tool_use in=1630 out=158 cr=0 cw=0 rs=0 text=177:"I'll search for a we" reasoning=0 tools=[get_weather{"location":"San Francisco, CA"}] raws=[server_tool_use,tool_search_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-tool-search-bm25.1.sse#1 stop in=1040 out=41 cr=0 cw=0 rs=0 text=119:"The current weather " reasoning=0 tools=[] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-tool-search-deferred-bm25.sse#0 tool_use in=879 out=177 cr=0 cw=0 rs=0 text=156:"I'll help you with t" reasoning=0 tools=[readNoteTree{"noteId":"d10aa585-982b-4bd9-984e-420f9b3717f7"}] raws=[server_tool_use]
derived/packages/anthropic/src/__fixtures__/anthropic-tool-search-deferred-bm25.sse#1 tool_use in=1398 out=213 cr=0 cw=0 rs=0 text=225:"Perfect! I can see t" reasoning=0 tools=[executeEditorOperation{"noteId":"d10aa585-982b-4bd9-984e-420f9b3717f7","operations":[{"at":{"path":[1],"type":"path"},"op":"insert_node","text":"bye","type":"bulletedListItem"}]}] raws=[tool_search_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-tool-search-deferred-bm25.sse#2 stop in=1639 out=95 cr=0 cw=0 rs=0 text=353:"Great! I've successf" reasoning=0 tools=[] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-tool-search-deferred-regex.sse#0 tool_use in=904 out=175 cr=0 cw=0 rs=0 text=156:"I'll help you with t" reasoning=0 tools=[readNoteTree{"noteId":"d10aa585-982b-4bd9-984e-420f9b3717f7"}] raws=[server_tool_use]
derived/packages/anthropic/src/__fixtures__/anthropic-tool-search-deferred-regex.sse#1 tool_use in=1519 out=211 cr=0 cw=0 rs=0 text=223:"Perfect! I can see t" reasoning=0 tools=[executeEditorOperation{"noteId":"d10aa585-982b-4bd9-984e-420f9b3717f7","operations":[{"at":{"path":[0],"type":"after"},"op":"insert","text":"bye","type":"bulletedListItem"}]}] raws=[tool_search_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-tool-search-deferred-regex.sse#2 stop in=1758 out=118 cr=0 cw=0 rs=0 text=425:"Great! I've successf" reasoning=0 tools=[] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-tool-search-regex.1.sse#0 tool_use in=1681 out=163 cr=0 cw=0 rs=0 text=85:"Great! I found a wea" reasoning=0 tools=[get_temp_data{"location":"San Francisco, CA"}] raws=[server_tool_use,tool_search_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-tool-search-regex.1.sse#1 stop in=1071 out=67 cr=0 cw=0 rs=0 text=239:"Here's the current w" reasoning=0 tools=[] raws=[]
derived/packages/anthropic/src/__fixtures__/anthropic-web-fetch-tool-20260209.1.sse#0 stop in=7172 out=144 cr=0 cw=0 rs=0 text=194:"The page at **exampl" reasoning=0 tools=[] raws=[server_tool_use,server_tool_use,web_fetch_tool_result,code_execution_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-web-fetch-tool.1.sse#0 stop in=4230 out=446 cr=0 cw=0 rs=0 text=1664:"I'll fetch the conte" reasoning=0 tools=[] raws=[server_tool_use,web_fetch_tool_result]
derived/packages/anthropic/src/__fixtures__/anthropic-web-search-tool.1.sse#0 stop in=15665 out=795 cr=0 cw=0 rs=0 text=2402:"Based on my search r" reasoning=0 tools=[] raws=[server_tool_use,web_search_tool_result]
derived/packages/anthropic/src/__fixtures__/duplicate-message-start.sse#0 stop in=17 out=227 cr=0 cw=0 rs=0 text=13:"Hello, World!" reasoning=0 tools=[] raws=[]
derived/packages/anthropic/src/__fixtures__/spliced-message-start.sse#0 error:transport in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=21 tools=[] raws=[thinking]
derived/packages/openai-compatible/src/chat/__fixtures__/xai-text.sse#0 stop in=12 out=342 cr=11 cw=0 rs=340 text=4:"Grok" reasoning=1455 tools=[] raws=[]
derived/packages/openai-compatible/src/chat/__fixtures__/xai-tool-call.sse#0 tool_use in=307 out=253 cr=306 cw=0 rs=227 text=0:"" reasoning=1069 tools=[weather{"location":"San Francisco"}] raws=[]
derived/packages/openai/src/chat/__fixtures__/azure-model-router.1.sse#0 stop in=15 out=78 cr=0 cw=0 rs=64 text=19:"Capital of Denmark." reasoning=0 tools=[] raws=[]
derived/packages/openai/src/chat/__fixtures__/openai-text.sse#0 stop in=16 out=300 cr=0 cw=0 rs=0 text=1724:"**Holiday Name:** Ha" reasoning=0 tools=[] raws=[]
derived/packages/openai/src/responses/__fixtures__/github-copilot-id-rotation.1.sse#0 stop in=19 out=105 cr=0 cw=0 rs=44 text=138:"There are **3** lett" reasoning=34 tools=[] raws=[reasoning]
derived/packages/openai/src/responses/__fixtures__/openai-apply-patch-tool-delete.1.sse#0 stop in=24 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[apply_patch_call]
derived/packages/openai/src/responses/__fixtures__/openai-apply-patch-tool.1.sse#0 stop in=642 out=67 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[apply_patch_call]
derived/packages/openai/src/responses/__fixtures__/openai-client-tool-search.1.sse#0 stop in=65 out=31 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[tool_search_call]
derived/packages/openai/src/responses/__fixtures__/openai-client-tool-search.2.sse#0 tool_use in=467 out=26 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[get_weather{"location":"San Francisco, CA","unit":"fahrenheit"}] raws=[]
derived/packages/openai/src/responses/__fixtures__/openai-code-interpreter-tool.1.sse#0 stop in=6047 out=1623 cr=2944 cw=0 rs=1408 text=596:"Here’s a simulation " reasoning=0 tools=[] raws=[reasoning,code_interpreter_call,reasoning,code_interpreter_call,reasoning,code_interpreter_call,reasoning]
derived/packages/openai/src/responses/__fixtures__/openai-compaction.1.sse#0 stop in=51097 out=2505 cr=49792 cw=0 rs=0 text=3483:"### Testing strategi" reasoning=0 tools=[] raws=[compaction]
derived/packages/openai/src/responses/__fixtures__/openai-custom-tool.1.sse#0 stop in=50 out=20 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[custom_tool_call]
derived/packages/openai/src/responses/__fixtures__/openai-error.1.sse#0 error:provider_rate_limit in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[]
derived/packages/openai/src/responses/__fixtures__/openai-file-search-tool.1.sse#0 stop in=3737 out=621 cr=2304 cw=0 rs=512 text=383:"According to the doc" reasoning=0 tools=[] raws=[reasoning,file_search_call,reasoning]
derived/packages/openai/src/responses/__fixtures__/openai-file-search-tool.2.sse#0 stop in=3748 out=543 cr=2304 cw=0 rs=448 text=380:"The document defines" reasoning=0 tools=[] raws=[reasoning,file_search_call,reasoning]
derived/packages/openai/src/responses/__fixtures__/openai-image-generation-tool.1.sse#0 stop in=2941 out=1249 cr=1920 cw=0 rs=1024 text=0:"" reasoning=0 tools=[] raws=[reasoning,image_generation_call]
derived/packages/openai/src/responses/__fixtures__/openai-local-shell-tool.1.sse#0 stop in=407 out=151 cr=0 cw=0 rs=128 text=0:"" reasoning=0 tools=[] raws=[reasoning,local_shell_call]
derived/packages/openai/src/responses/__fixtures__/openai-mcp-tool-approval.1.sse#0 stop in=422 out=48 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[mcp_list_tools,reasoning,mcp_approval_request]
derived/packages/openai/src/responses/__fixtures__/openai-mcp-tool-approval.2.sse#0 stop in=553 out=371 cr=0 cw=0 rs=256 text=470:"I wasn’t able to cre" reasoning=0 tools=[] raws=[mcp_list_tools,reasoning]
derived/packages/openai/src/responses/__fixtures__/openai-mcp-tool-approval.3.sse#0 stop in=609 out=48 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[mcp_list_tools,reasoning,mcp_approval_request]
derived/packages/openai/src/responses/__fixtures__/openai-mcp-tool-approval.4.sse#0 stop in=779 out=69 cr=0 cw=0 rs=0 text=221:"Done — here’s your s" reasoning=0 tools=[] raws=[mcp_list_tools,mcp_call]
derived/packages/openai/src/responses/__fixtures__/openai-mcp-tool.1.sse#0 stop in=11791 out=963 cr=0 cw=0 rs=512 text=1264:"Yes — I searched the" reasoning=0 tools=[] raws=[mcp_list_tools,reasoning,mcp_call,reasoning,mcp_call,reasoning]
derived/packages/openai/src/responses/__fixtures__/openai-phase.1.sse#0 stop in=7112 out=463 cr=3072 cw=0 rs=64 text=25:"Got itHere are a few" reasoning=0 tools=[] raws=[]
derived/packages/openai/src/responses/__fixtures__/openai-reasoning-encrypted-content.1.sse#0 tool_use in=134 out=28 cr=0 cw=0 rs=0 text=0:"" reasoning=163 tools=[calculator{"a":12,"b":7,"op":"add"}] raws=[reasoning]
derived/packages/openai/src/responses/__fixtures__/openai-reasoning-encrypted-content.1.sse#1 tool_use in=221 out=26 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[calculator{"a":19,"b":3,"op":"multiply"}] raws=[]
derived/packages/openai/src/responses/__fixtures__/openai-reasoning-encrypted-content.1.sse#2 tool_use in=260 out=26 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[calculator{"a":57,"b":10,"op":"multiply"}] raws=[]
derived/packages/openai/src/responses/__fixtures__/openai-reasoning-encrypted-content.1.sse#3 stop in=299 out=12 cr=0 cw=0 rs=0 text=28:"The final result is " reasoning=0 tools=[] raws=[]
derived/packages/openai/src/responses/__fixtures__/openai-shell-container-multiturn.1.sse#0 stop in=802 out=20 cr=0 cw=0 rs=0 text=50:"The architecture is " reasoning=0 tools=[] raws=[]
derived/packages/openai/src/responses/__fixtures__/openai-shell-container.1.sse#0 stop in=200 out=120 cr=0 cw=0 rs=0 text=29:"The command ran succ" reasoning=0 tools=[] raws=[shell_call,shell_call_output]
derived/packages/openai/src/responses/__fixtures__/openai-shell-local-multiturn.1.sse#0 stop in=444 out=12 cr=0 cw=0 rs=0 text=24:"`arm64` (Apple Silic" reasoning=0 tools=[] raws=[]
derived/packages/openai/src/responses/__fixtures__/openai-shell-skills.1.sse#0 stop in=1501 out=314 cr=1024 cw=0 rs=100 text=951:"Build a STOP large s" reasoning=0 tools=[] raws=[shell_call,shell_call_output,shell_call,shell_call_output]
derived/packages/openai/src/responses/__fixtures__/openai-shell-tool.1.sse#0 stop in=145 out=41 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[shell_call]
derived/packages/openai/src/responses/__fixtures__/openai-shell-tool.1.sse#1 stop in=331 out=166 cr=0 cw=0 rs=0 text=426:"Here are the files a" reasoning=0 tools=[] raws=[]
derived/packages/openai/src/responses/__fixtures__/openai-tool-search.1.sse#0 tool_use in=640 out=46 cr=0 cw=0 rs=20 text=0:"" reasoning=0 tools=[get_weather{"location":"San Francisco, CA","unit":"fahrenheit"}] raws=[tool_search_call,tool_search_output]
derived/packages/openai/src/responses/__fixtures__/openai-web-search-tool.1.sse#0 stop in=31073 out=4416 cr=3712 cw=0 rs=3712 text=3645:"I checked today’s te" reasoning=0 tools=[] raws=[reasoning,web_search_call,reasoning,web_search_call,reasoning,web_search_call,reasoning,web_search_call,reasoning,web_search_call,reasoning,web_search_call,reasoning]
derived/packages/openai/src/responses/__fixtures__/parallel-tool-call-wrapper.1.sse#0 error:transport in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[]
derived/packages/openai/src/responses/__fixtures__/programmatic-tool-calling.1.sse#0 tool_use in=631 out=87 cr=0 cw=0 rs=37 text=0:"" reasoning=0 tools=[getInventory{"sku":"sku_123"}] raws=[reasoning,program]
derived/packages/openai/src/responses/__fixtures__/programmatic-tool-calling.2.sse#0 tool_use in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[getDemand{"sku":"sku_123"}] raws=[]
derived/packages/openai/src/responses/__fixtures__/programmatic-tool-calling.3.sse#0 stop in=757 out=35 cr=0 cw=0 rs=0 text=127:"Inventory is suffici" reasoning=0 tools=[] raws=[program_output]
llama-cpp-python-recorded/concurrent-empty.sse#0 error:provider_unavailable in=0 out=0 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[]
llama-cpp-python-recorded/stream.sse#0 stop in=100 out=4 cr=0 cw=0 rs=0 approx text=14:"1. 1\n2. 2\n3. 3" reasoning=0 tools=[] raws=[]
llama-cpp-python-recorded/toolstream.sse#0 tool_use in=100 out=8 cr=0 cw=0 rs=0 approx text=0:"" reasoning=0 tools=[get_weather{"city":"Paris"}] raws=[]
openai-python/chat_completions/.inline-snapshot/external/173417d553406f034f643e5db3f8d591fb691ebac56f5ae39a22cc7d455c5353.bin#0 refusal in=79 out=11 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[refusal]
openai-python/chat_completions/.inline-snapshot/external/2018feb66ae13fcf5333d61b95849decc68d3f63bd38172889367e1afb1e04f7.bin#0 tool_use in=44 out=16 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[get_weather{"city":"New York City"}] raws=[]
openai-python/chat_completions/.inline-snapshot/external/4cc50a6135d254573a502310e6af1246f55edb6ad95fa24059f160996b68866d.bin#0 length in=79 out=1 cr=0 cw=0 rs=0 text=2:"{\"" reasoning=0 tools=[] raws=[]
openai-python/chat_completions/.inline-snapshot/external/569c877e69429d4cbc1577d2cd6dd33878095c68badc6b6654a69769b391a1c1.bin#0 refusal in=79 out=12 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[] raws=[refusal]
openai-python/chat_completions/.inline-snapshot/external/7e5ea4d12e7cc064399b6631415e65923f182256b6e6b752950a3aaa2ad2320a.bin#0 stop in=79 out=14 cr=0 cw=0 rs=0 text=53:"{\"city\":\"San Francis" reasoning=0 tools=[] raws=[]
openai-python/chat_completions/.inline-snapshot/external/83b060bae42eb41c4f1edbb7c1542b954b37d9dfd1910b964ddebc9677e6ae85.bin#0 stop in=9 out=2 cr=0 cw=0 rs=0 text=4:"Foo!" reasoning=0 tools=[] raws=[]
openai-python/chat_completions/.inline-snapshot/external/a247c49c5fcd492bfb7a02a3306ad615ed8d8f649888ebfddfbc3ee151f44d46.bin#0 tool_use in=48 out=19 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[get_weather{"city":"San Francisco","state":"CA"}] raws=[]
openai-python/chat_completions/.inline-snapshot/external/a491adda08c3d4fde95f5b2ee3f60f7f745f1a56d82e62f58031cc2add502380.bin#0 stop in=79 out=42 cr=0 cw=0 rs=0 text=53:"{\"city\":\"San Francis" reasoning=0 tools=[] raws=[]
openai-python/chat_completions/.inline-snapshot/external/c6aa7e397b7123c3501f25df3a05d4daf7e8ad6d61ffa406ab5361fe36a8d5b1.bin#0 tool_use in=76 out=24 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[GetWeatherArgs{"city":"Edinburgh","country":"UK","units":"c"}] raws=[]
openai-python/chat_completions/.inline-snapshot/external/d615580118391ee13492193e3a8bb74642d23ac1ca13fe37cb6e889b66f759f6.bin#0 stop in=19 out=177 cr=0 cw=0 rs=0 text=608:"\n  {\n    \"location\":" reasoning=0 tools=[] raws=[]
openai-python/chat_completions/.inline-snapshot/external/e2aad469b71d1d4894ff833ea147020a9d875eb7ce644a0ff355581690a4cbfd.bin#0 stop in=14 out=30 cr=0 cw=0 rs=0 text=159:"I'm unable to provid" reasoning=0 tools=[] raws=[]
openai-python/chat_completions/.inline-snapshot/external/f82268f2fefd5cfbc7eeb59c297688be2f6ca0849a6e4f17851b517310841d9b.bin#0 tool_use in=149 out=60 cr=0 cw=0 rs=0 text=0:"" reasoning=0 tools=[GetWeatherArgs{"city":"Edinburgh","country":"GB","units":"c"} get_stock_price{"exchange":"NASDAQ","ticker":"AAPL"}] raws=[]"####;
