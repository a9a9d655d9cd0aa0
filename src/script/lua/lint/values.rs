//! What an expression statically is: literals decoded to JSON, positions, and the words Lua
//! messages use for JSON types.

use full_moon::ast::{Expression, Field, TableConstructor, UnOp, Var};
use full_moon::node::Node;
use full_moon::tokenizer::{StringLiteralQuoteType, TokenReference, TokenType};
use serde_json::Value;

use crate::script::schema_check::json_type;

/// The statically known shape of an expression.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Static {
    /// A literal whose JSON value is known.
    Known(Value),
    /// A value of known JSON type whose content is not known (`"a" .. x`, a list with a computed
    /// element).
    Type(&'static str),
    /// `{}`: an empty list or an empty map, whichever the place wants.
    EmptyTable,
    /// A function, with the index of its facts when lint walked its body.
    Function(Option<usize>),
    /// Anything computed.
    Unknown,
}

/// A 1-based line and column.
pub(super) type Pos = (u32, u32);

/// Where a token starts.
pub(super) fn token_pos(token: &TokenReference) -> Pos {
    let position = token.token().start_position();
    (clamp(position.line()), clamp(position.character()))
}

/// Where a node starts; the script's start for a node with no position.
pub(super) fn node_pos(node: &impl Node) -> Pos {
    node.start_position().map_or((1, 1), |position| (clamp(position.line()), clamp(position.character())))
}

fn clamp(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX).max(1)
}

/// The identifier a token holds (empty for any other token).
pub(super) fn ident(token: &TokenReference) -> &str {
    match token.token().token_type() {
        TokenType::Identifier { identifier } => identifier.as_str(),
        _ => "",
    }
}

/// The value of a string literal token, escapes decoded.
pub(super) fn string_literal(token: &TokenReference) -> Option<String> {
    let TokenType::StringLiteral { literal, quote_type, .. } = token.token().token_type() else {
        return None;
    };
    if *quote_type == StringLiteralQuoteType::Brackets {
        // A long string keeps its text as written, less a first newline.
        let text = literal.as_str();
        return Some(
            text.strip_prefix("\r\n").or_else(|| text.strip_prefix('\n')).unwrap_or(text).to_owned(),
        );
    }
    Some(unescape(literal.as_str()))
}

/// Decodes Lua's string escapes; an escape Lua would reject is kept as written.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(escape) = chars.next() else {
            out.push('\\');
            break;
        };
        match escape {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'v' => out.push('\u{b}'),
            '\n' => out.push('\n'),
            'z' => {
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
            }
            'x' => {
                let hex: String = (0..2).filter_map(|_| chars.next_if(char::is_ascii_hexdigit)).collect();
                match u8::from_str_radix(&hex, 16) {
                    Ok(byte) => out.push(char::from(byte)),
                    Err(_) => out.push_str(&format!("\\x{hex}")),
                }
            }
            'u' => {
                let mut code = String::new();
                if chars.next_if_eq(&'{').is_some() {
                    while let Some(digit) = chars.next_if(char::is_ascii_hexdigit) {
                        code.push(digit);
                    }
                    chars.next_if_eq(&'}');
                }
                match u32::from_str_radix(&code, 16).ok().and_then(char::from_u32) {
                    Some(decoded) => out.push(decoded),
                    None => out.push_str(&format!("\\u{{{code}}}")),
                }
            }
            digit if digit.is_ascii_digit() => {
                let mut code = String::from(digit);
                while code.len() < 3
                    && let Some(digit) = chars.next_if(char::is_ascii_digit)
                {
                    code.push(digit);
                }
                match code.parse::<u8>() {
                    Ok(byte) => out.push(char::from(byte)),
                    Err(_) => out.push_str(&format!("\\{code}")),
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The value of a number literal.
fn number_literal(text: &str) -> Static {
    let lower = text.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0x") {
        return match i64::from_str_radix(hex, 16) {
            Ok(value) => Static::Known(Value::from(value)),
            Err(_) => Static::Type("number"),
        };
    }
    if !lower.contains(['.', 'e'])
        && let Ok(value) = lower.parse::<i64>()
    {
        return Static::Known(Value::from(value));
    }
    match lower.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
        Some(number) => Static::Known(Value::Number(number)),
        None => Static::Type("number"),
    }
}

/// What a literal expression is, without walking it. Variables are resolved by the caller.
pub(super) fn peek_literal(expr: &Expression) -> Option<Static> {
    let value = match expr {
        Expression::Number(token) => number_literal(&token.token().to_string()),
        Expression::String(token) => match string_literal(token) {
            Some(text) => Static::Known(Value::String(text)),
            None => Static::Type("string"),
        },
        Expression::Symbol(token) => match token.token().to_string().as_str() {
            "true" => Static::Known(Value::Bool(true)),
            "false" => Static::Known(Value::Bool(false)),
            "nil" => Static::Known(Value::Null),
            _ => Static::Unknown,
        },
        Expression::Parentheses { expression, .. } => return peek_literal(expression),
        Expression::Function(_) => Static::Function(None),
        Expression::TableConstructor(table) => peek_table(table),
        Expression::UnaryOperator { unop, expression } => match unop {
            UnOp::Minus(_) => match peek_literal(expression) {
                Some(Static::Known(Value::Number(number))) => match (number.as_i64(), number.as_f64()) {
                    (Some(int), _) => Static::Known(Value::from(-int)),
                    (None, Some(float)) => match serde_json::Number::from_f64(-float) {
                        Some(negated) => Static::Known(Value::Number(negated)),
                        None => Static::Type("number"),
                    },
                    _ => Static::Type("number"),
                },
                _ => Static::Type("number"),
            },
            UnOp::Not(_) => Static::Type("boolean"),
            UnOp::Hash(_) => Static::Type("integer"),
            _ => Static::Unknown,
        },
        Expression::BinaryOperator { binop, lhs, rhs } => match binop.token().token().to_string().as_str() {
            ".." => Static::Type("string"),
            // Arithmetic on text is the `+`-for-concatenation slip, reported on its own.
            _ if matches!(**lhs, Expression::String(_)) || matches!(**rhs, Expression::String(_)) => {
                Static::Unknown
            }
            "+" | "-" | "*" | "/" | "%" | "^" | "//" => Static::Type("number"),
            "==" | "~=" | "<" | "<=" | ">" | ">=" => Static::Type("boolean"),
            _ => Static::Unknown,
        },
        Expression::Var(Var::Name(_)) => return None,
        _ => Static::Unknown,
    };
    Some(value)
}

/// What a table constructor is: a list, a map, or `{}`.
pub(super) fn peek_table(table: &TableConstructor) -> Static {
    if table.fields().is_empty() {
        return Static::EmptyTable;
    }
    let mut list = Vec::new();
    let mut map = serde_json::Map::new();
    let mut known = true;
    for field in table.fields() {
        let (key, value) = match field {
            Field::NoKey(value) => (None, value),
            Field::NameKey { key, value, .. } => (Some(ident(key).to_owned()), &**value),
            Field::ExpressionKey { key, value, .. } => match &**key {
                Expression::String(token) => match string_literal(token) {
                    Some(text) => (Some(text), &**value),
                    None => return Static::Unknown,
                },
                _ => return Static::Unknown,
            },
            _ => return Static::Unknown,
        };
        let value = match peek_literal(value) {
            Some(Static::Known(value)) => Some(value),
            Some(Static::EmptyTable) => Some(Value::Object(serde_json::Map::new())),
            _ => None,
        };
        known &= value.is_some();
        match key {
            None => list.push(value.unwrap_or(Value::Null)),
            Some(key) => {
                map.insert(key, value.unwrap_or(Value::Null));
            }
        }
    }
    match (list.is_empty(), map.is_empty(), known) {
        (false, true, true) => Static::Known(Value::Array(list)),
        (false, true, false) => Static::Type("array"),
        (true, false, true) => Static::Known(Value::Object(map)),
        (true, false, false) => Static::Type("object"),
        _ => Static::Unknown,
    }
}

/// A JSON type name with its article, in the words Lua scripts use.
pub(super) fn lua_article(name: &str) -> &'static str {
    match name {
        "null" => "nil",
        "boolean" => "a boolean",
        "integer" => "an integer",
        "number" => "a number",
        "string" => "a string",
        "array" => "a list",
        "object" => "a table of key = value pairs",
        _ => "a value",
    }
}

/// "an integer", "a function": what a static value is, for messages.
pub(super) fn type_phrase(value: &Static) -> &'static str {
    match value {
        Static::Known(value) => lua_article(json_type(value)),
        Static::Type(name) => lua_article(name),
        Static::EmptyTable => "an empty table",
        Static::Function(_) => "a function",
        Static::Unknown => "a computed value",
    }
}
