//! Byte-preserving edits of JSON text, for `ckpt integrate`. A settings file is the user's: a
//! parse and print would round its numbers (`1e2` to `100.0`, a 30-digit integer to a float),
//! re-indent its compact objects and change its escapes. So ckpt never prints the file again; it
//! finds the exact span of the list or table it must change and splices text in or out there,
//! and every other byte stays as it was. Each splice has an exact inverse: appending an element
//! and then removing it gives the original text back byte for byte.

use serde_json::Value;

/// One JSON value in the text: its byte span and, for a table or a list, what it holds.
pub(super) struct Node {
    pub start: usize,
    pub end: usize,
    pub kind: Kind,
}

pub(super) enum Kind {
    Object(Vec<Item>),
    Array(Vec<Item>),
    Scalar,
}

/// A list element, or a table member (whose span starts at its key).
pub(super) struct Item {
    pub start: usize,
    /// A member's key, decoded, and where its text ends.
    pub key: Option<(String, usize)>,
    pub value: Node,
}

impl Node {
    pub fn items(&self) -> &[Item] {
        match &self.kind {
            Kind::Object(items) | Kind::Array(items) => items,
            Kind::Scalar => &[],
        }
    }

    pub fn is_object(&self) -> bool {
        matches!(self.kind, Kind::Object(_))
    }

    pub fn is_array(&self) -> bool {
        matches!(self.kind, Kind::Array(_))
    }

    /// The member `key` of a table: the last one of that name, as `JSON.parse` (which the
    /// agents read their settings with) and serde_json keep the last of duplicates.
    pub fn member(&self, key: &str) -> Option<(usize, &Node)> {
        match &self.kind {
            Kind::Object(items) => items
                .iter()
                .enumerate()
                .rev()
                .find(|(_, item)| item.key.as_ref().is_some_and(|(k, _)| k == key))
                .map(|(at, item)| (at, &item.value)),
            _ => None,
        }
    }

    /// This value as serde_json reads it, to compare it with what ckpt would write.
    pub fn value(&self, text: &str) -> Option<Value> {
        serde_json::from_str(text.get(self.start..self.end)?).ok()
    }
}

/// A JSON document being edited: its text, and the layout new text is written in.
pub(super) struct Doc {
    text: String,
    /// The file's line end.
    nl: &'static str,
    /// One level of the file's indentation.
    unit: String,
    /// What the file writes between a key and its value (`": "`, `":"`, ...).
    colon: String,
}

impl Doc {
    /// `text`, which must be valid JSON (serde_json judges it) whose top is a table.
    pub fn new(text: String) -> Result<Doc, String> {
        serde_json::from_str::<serde::de::IgnoredAny>(&text).map_err(|e| format!("not JSON: {e}"))?;
        let root = parse(&text)?;
        if !root.is_object() {
            return Err("not a JSON object".into());
        }
        let nl = if text.contains("\r\n") { "\r\n" } else { "\n" };
        let unit = text
            .lines()
            .skip(1)
            .map(|line| line.chars().take_while(|c| *c == ' ' || *c == '\t').collect::<String>())
            .find(|indent| !indent.is_empty())
            .unwrap_or_else(|| "  ".into());
        let colon = first_colon(&text, &root).unwrap_or_else(|| ": ".into());
        Ok(Doc { text, nl, unit, colon })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn into_text(self) -> String {
        self.text
    }

    /// The top table, parsed afresh: spans are stale after every edit.
    pub fn root(&self) -> Result<Node, String> {
        parse(&self.text)
    }

    /// Puts `value` (under `key` in a table) into `container` as its element `at`, laid out as
    /// its neighbours are (one per line, indented as they are, or all on one line).
    pub fn insert(&mut self, container: &Node, at: usize, key: Option<&str>, value: &Value) {
        let items = container.items();
        let (splice, separator) = if items.is_empty() {
            (container.start + 1..container.end - 1, None)
        } else if at >= items.len() {
            let last = &items[items.len() - 1];
            (
                last.value.end..last.value.end,
                Some(self.separator(container, items.len() - 1)),
            )
        } else {
            let next = &items[at];
            (next.start..next.start, Some(self.separator(container, at)))
        };
        let lines = match &separator {
            Some(separator) => separator.rfind('\n').map(|nl| separator[nl + 1..].to_owned()),
            // An empty table in a file written on one line stays on one line.
            None => self.text.contains('\n').then(|| {
                let own = line_indent(&self.text, container.start);
                format!("{own}{}", self.unit)
            }),
        };
        let mut element = String::new();
        if let Some(key) = key {
            element.push_str(&Value::from(key).to_string());
            element.push_str(&self.colon);
        }
        self.render(value, lines.as_deref(), &mut element);
        let with = match (separator, &lines) {
            (None, Some(indent)) => {
                let own = line_indent(&self.text, container.start);
                format!("{nl}{indent}{element}{nl}{own}", nl = self.nl)
            }
            (None, None) => element,
            (Some(separator), _) if at >= items.len() => format!("{separator}{element}"),
            (Some(separator), _) => format!("{element}{separator}"),
        };
        self.text.replace_range(splice, &with);
    }

    /// Takes element `at` out of `container` with its separator: the inverse of [`Doc::insert`].
    pub fn remove(&mut self, container: &Node, at: usize) {
        let items = container.items();
        let span = match items.len() {
            0 => return,
            // The only element: the container is left empty, as `{}` or `[]`.
            1 => container.start + 1..container.end - 1,
            n if at + 1 >= n => items[n - 2].value.end..items[n - 1].value.end,
            _ => items[at].start..items[at + 1].start,
        };
        self.text.replace_range(span, "");
    }

    /// Writes `value` where `node` stands, in its layout (on one line if it was on one).
    pub fn replace(&mut self, node: &Node, value: &Value) {
        let one_line = !self.text[node.start..node.end].contains('\n');
        let indent = line_indent(&self.text, node.start);
        let mut with = String::new();
        self.render(value, (!one_line).then_some(indent.as_str()), &mut with);
        self.text.replace_range(node.start..node.end, &with);
    }

    /// What stands between element `at` of `container` and its neighbour: the comma and the
    /// whitespace the file writes there.
    fn separator(&self, container: &Node, at: usize) -> String {
        let items = container.items();
        if items.len() >= 2 {
            let (a, b) = if at + 1 < items.len() {
                (at, at + 1)
            } else {
                (at - 1, at)
            };
            return self.text[items[a].value.end..items[b].start].to_owned();
        }
        let before_first = &self.text[container.start + 1..items[0].start];
        match before_first.rfind('\n') {
            Some(_) => format!(",{}", before_first.trim_start_matches([' ', '\t'])),
            None => self.compact_comma().to_owned(),
        }
    }

    fn compact_comma(&self) -> &'static str {
        if self.colon.ends_with(' ') {
            ", "
        } else {
            ","
        }
    }

    /// `value` as JSON: one element per line, nested levels one unit deeper than `indent`, or
    /// all on one line when there is no indent.
    fn render(&self, value: &Value, indent: Option<&str>, out: &mut String) {
        let (open, close, items): (char, char, Vec<(Option<&String>, &Value)>) = match value {
            Value::Object(map) if !map.is_empty() => ('{', '}', map.iter().map(|(k, v)| (Some(k), v)).collect()),
            Value::Array(list) if !list.is_empty() => ('[', ']', list.iter().map(|v| (None, v)).collect()),
            other => {
                out.push_str(&other.to_string());
                return;
            }
        };
        out.push(open);
        let inner = indent.map(|indent| format!("{indent}{}", self.unit));
        for (n, (key, item)) in items.iter().enumerate() {
            if n > 0 {
                out.push(',');
                if inner.is_none() {
                    out.push_str(&self.compact_comma()[1..]);
                }
            }
            if let Some(inner) = &inner {
                out.push_str(self.nl);
                out.push_str(inner);
            }
            if let Some(key) = key {
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push_str(&self.colon);
            }
            self.render(item, inner.as_deref(), out);
        }
        if let Some(indent) = indent {
            out.push_str(self.nl);
            out.push_str(indent);
        }
        out.push(close);
    }
}

/// The spaces and tabs that start the line `at` is on.
fn line_indent(text: &str, at: usize) -> String {
    let start = text[..at].rfind('\n').map_or(0, |nl| nl + 1);
    text[start..at]
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .collect()
}

/// What the file writes between its first key and that key's value.
fn first_colon(text: &str, node: &Node) -> Option<String> {
    for item in node.items() {
        if let Some((_, key_end)) = &item.key {
            return Some(text[*key_end..item.value.start].to_owned());
        }
        if let Some(colon) = first_colon(text, &item.value) {
            return Some(colon);
        }
    }
    None
}

/// The spans of `text`, a JSON value with only whitespace around it.
pub(super) fn parse(text: &str) -> Result<Node, String> {
    let mut parser = Parser {
        text,
        bytes: text.as_bytes(),
        at: 0,
    };
    let node = parser.value(0)?;
    parser.space();
    match parser.at == parser.bytes.len() {
        true => Ok(node),
        false => Err(format!("unexpected text at byte {}", parser.at)),
    }
}

/// serde_json refuses deeper nesting than this, so a file it read never recurses further here.
const MAX_DEPTH: usize = 128;

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn space(&mut self) {
        while self
            .bytes
            .get(self.at)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        self.space();
        match self.bytes.get(self.at) {
            Some(b) if *b == byte => {
                self.at += 1;
                Ok(())
            }
            _ => Err(format!("expected '{}' at byte {}", byte as char, self.at)),
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node, String> {
        if depth > MAX_DEPTH {
            return Err("nested too deeply".into());
        }
        self.space();
        let start = self.at;
        let kind = match self.bytes.get(self.at) {
            Some(b'{') => Kind::Object(self.items(b'}', true, depth)?),
            Some(b'[') => Kind::Array(self.items(b']', false, depth)?),
            Some(b'"') => {
                self.string()?;
                Kind::Scalar
            }
            Some(_) => {
                while self
                    .bytes
                    .get(self.at)
                    .is_some_and(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b',' | b']' | b'}' | b':'))
                {
                    self.at += 1;
                }
                if self.at == start {
                    return Err(format!("unexpected text at byte {start}"));
                }
                Kind::Scalar
            }
            None => return Err("unexpected end".into()),
        };
        Ok(Node {
            start,
            end: self.at,
            kind,
        })
    }

    /// The elements or members after an opening bracket, up to and including `close`.
    fn items(&mut self, close: u8, keyed: bool, depth: usize) -> Result<Vec<Item>, String> {
        self.at += 1;
        let mut items = Vec::new();
        self.space();
        if self.bytes.get(self.at) == Some(&close) {
            self.at += 1;
            return Ok(items);
        }
        loop {
            self.space();
            let start = self.at;
            let key = if keyed {
                self.string()?;
                let key: String =
                    serde_json::from_str(&self.text[start..self.at]).map_err(|e| format!("a key: {e}"))?;
                let key_end = self.at;
                self.expect(b':')?;
                Some((key, key_end))
            } else {
                None
            };
            let value = self.value(depth + 1)?;
            items.push(Item { start, key, value });
            self.space();
            match self.bytes.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b) if *b == close => {
                    self.at += 1;
                    return Ok(items);
                }
                _ => return Err(format!("expected ',' or '{}' at byte {}", close as char, self.at)),
            }
        }
    }

    fn string(&mut self) -> Result<(), String> {
        if self.bytes.get(self.at) != Some(&b'"') {
            return Err(format!("expected a string at byte {}", self.at));
        }
        self.at += 1;
        loop {
            match self.bytes.get(self.at) {
                Some(b'\\') => self.at += 2,
                Some(b'"') => {
                    self.at += 1;
                    return Ok(());
                }
                Some(_) => self.at += 1,
                None => return Err("a string without its closing quote".into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(text: &str) -> Doc {
        Doc::new(text.to_owned()).expect("json")
    }

    #[test]
    fn appending_and_removing_an_element_gives_the_text_back_byte_for_byte() {
        for text in [
            "{\"a\": [1e2, -0, 123456789012345678901234567890]}",
            "{\n\t\"a\": [\n\t\t{\"x\":1.5e-400}\n\t]\n}",
            "{\r\n  \"a\": [\r\n    \"\\u00e9\",\r\n    {}\r\n  ]\r\n}\r\n",
            "{\"a\":[]}",
            "{\n  \"a\": []\n}\n",
        ] {
            let mut d = doc(text);
            let root = d.root().expect("parse");
            let list = root.member("a").expect("a").1;
            let n = list.items().len();
            d.insert(list, n, None, &json!({"k": [1, "v"]}));
            let after = d.text().to_owned();
            assert!(after.contains("\"k\""), "{after}");
            serde_json::from_str::<Value>(&after).expect("still JSON");
            let root = d.root().expect("parse");
            let list = root.member("a").expect("a").1;
            d.remove(list, n);
            assert_eq!(d.text(), text, "from {after:?}");
        }
    }

    #[test]
    fn new_text_follows_the_layout_around_it() {
        let mut d = doc("{\n\t\"a\": 1\n}\n");
        let root = d.root().expect("parse");
        d.insert(&root, 1, Some("b"), &json!({"c": [2]}));
        assert_eq!(
            d.text(),
            "{\n\t\"a\": 1,\n\t\"b\": {\n\t\t\"c\": [\n\t\t\t2\n\t\t]\n\t}\n}\n"
        );
        let mut d = doc("{\"a\":1}");
        let root = d.root().expect("parse");
        d.insert(&root, 1, Some("b"), &json!({"c": [2, 3]}));
        assert_eq!(d.text(), "{\"a\":1,\"b\":{\"c\":[2,3]}}");
        let mut d = doc("{\"l\": [{\"a\": 1}, {\"b\": 2}]}");
        let root = d.root().expect("parse");
        let list = root.member("l").expect("l").1;
        d.insert(list, 1, None, &json!(3));
        assert_eq!(d.text(), "{\"l\": [{\"a\": 1}, 3, {\"b\": 2}]}");
        let root = d.root().expect("parse");
        let list = root.member("l").expect("l").1;
        d.replace(&list.items()[0].value, &json!({"z": [true]}));
        assert_eq!(d.text(), "{\"l\": [{\"z\": [true]}, 3, {\"b\": 2}]}");
    }

    #[test]
    fn anything_but_a_json_table_is_refused() {
        for bad in ["{ // c\n}", "[]", "", "{\"a\": 1,}", "{\"a\" 1}"] {
            assert!(Doc::new(bad.to_owned()).is_err(), "{bad}");
        }
    }
}
