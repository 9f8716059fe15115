// HTML and Markdown read into the source text copied as it is and blocks of inline runs to
// translate (web/inline.js), as keras_transformer/documents/html.py and markdown.py read them,
// so that the page's output is kt-translate's. HTML: the events of Python's `html.parser`
// (the tokenizer those read with: the same tags, comments and text at the same offsets, each
// copied byte for byte), entities decoded by `entities` (the HTML standard's table, as
// Python's `html.unescape`). Markdown: `markdown-it`, of which markdown-it-py is the port (the
// same tokens). Pure functions, no browser.
import {decodeHTML} from "entities";
import MarkdownIt from "markdown-it";

import {Block, element, run, stackOf} from "./inline.js";
import {SPACE} from "./lines.js";

const words = (text) => new Set(text.split(" "));
const INLINE = words("a abbr acronym b bdi bdo big cite data del dfn em font i ins label mark " +
                     "q rp rt ruby s small span strike strong sub sup time tt u");
const VOID = words("area base br col embed hr img input link meta param source track wbr");
const BLOCK_VOID = words("area base col embed hr input link meta param source track");
const UNTRANSLATED = words("script style code pre kbd samp var textarea svg math template");
const CDATA = words("script style");  // html.parser's elements whose content is not markup

// html.parser's patterns (Python's `\s` is Unicode whitespace: SPACE).
const S = SPACE;
const NOT_S = `[^${SPACE.slice(1)}`;
const TAG_OPEN = /^<[a-zA-Z]/;
const TAG_NAME = new RegExp(`([a-zA-Z][^\\t\\n\\r\\f />\\x00]*)(?:${S}|/(?!>))*`, "y");
const ATTRIBUTE = new RegExp(
  `((?<=['"${SPACE.slice(1, -1)}/])[^${SPACE.slice(1, -1)}/>]` +
  `[^${SPACE.slice(1, -1)}/=>]*)(${S}*=+${S}*` +
  `('[^']*'|"[^"]*"|(?!['"])[^>${SPACE.slice(1, -1)}]*))?(?:${S}|/(?!>))*`, "y");
const START_TAG_END = new RegExp(
  `<[a-zA-Z][^\\t\\n\\r\\f />\\x00]*(?:[${SPACE.slice(1, -1)}/]*` +
  `(?:(?<=['"${SPACE.slice(1, -1)}/])[^${SPACE.slice(1, -1)}/>][^${SPACE.slice(1, -1)}/=>]*` +
  `(?:${S}*=+${S}*(?:'[^']*'|"[^"]*"|(?!['"])[^>${SPACE.slice(1, -1)}]*)${S}*)?` +
  `(?:${S}|/(?!>))*)*)?${S}*`, "y");
const END_TAG = new RegExp(`</${S}*([a-zA-Z][-.a-zA-Z0-9:_]*)${S}*>`, "y");
const COMMENT_CLOSE = new RegExp(`--${S}*>`, "g");

// Translated text as HTML: `&`, `<` and `>` escaped.
export function escapeHtml(text) {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

// html.parser's events of a document: [offset, kind, value], kind "start" ([tag, attrs]),
// "void", "end" (tag), "data" (decoded text) or "other"; each event's source runs to the next.
export function htmlEvents(document) {
  const events = [];
  const n = document.length;
  let i = 0;
  let cdata = null;  // the script or style element whose content is being read
  const match = (pattern, at) => {
    pattern.lastIndex = at;
    return pattern.exec(document);
  };
  while (i < n) {
    let j;
    if (cdata === null) {
      j = document.indexOf("<", i);
      if (j < 0) j = n;
    } else {
      const close = new RegExp(`</${S}*${cdata}${S}*>`, "gi");
      close.lastIndex = i;
      const found = close.exec(document);
      if (!found) break;
      j = found.index;
    }
    if (i < j) events.push([i, "data", cdata === null ? decodeHTML(document.slice(i, j))
                                                       : document.slice(i, j)]);
    i = j;
    if (i === n) break;
    let k;
    if (TAG_OPEN.test(document.slice(i, i + 2))) {
      [k, cdata] = startTag(document, i, events, match, cdata);
    } else if (document.startsWith("</", i)) {
      [k, cdata] = endTag(document, i, events, match, cdata);
    } else if (document.startsWith("<!--", i)) {
      COMMENT_CLOSE.lastIndex = i + 4;
      const found = COMMENT_CLOSE.exec(document);
      k = found ? found.index + found[0].length : -1;
      if (found) events.push([i, "other", null]);
    } else if (document.startsWith("<?", i)) {
      const end = document.indexOf(">", i + 2);
      k = end < 0 ? -1 : end + 1;
      if (end >= 0) events.push([i, "other", null]);
    } else if (document.startsWith("<!", i)) {
      k = declaration(document, i, events);
    } else if (i + 1 < n) {
      events.push([i, "data", "<"]);
      k = i + 1;
    } else {
      break;
    }
    if (k < 0) {  // not complete before the end: text
      k = document.indexOf(">", i + 1);
      if (k < 0) {
        k = document.indexOf("<", i + 1);
        if (k < 0) k = i + 1;
      } else {
        k += 1;
      }
      events.push([i, "data", cdata === null ? decodeHTML(document.slice(i, k))
                                             : document.slice(i, k)]);
    }
    i = k;
  }
  if (i < n && cdata === null) events.push([i, "data", decodeHTML(document.slice(i))]);
  return events;
}

function startTag(document, i, events, match, cdata) {
  const located = match(START_TAG_END, i);
  let end = located.index + located[0].length;
  const next = document.slice(end, end + 1);
  if (next === ">") {
    end += 1;
  } else if (next === "/") {
    if (document.startsWith("/>", end)) end += 2;
    else return [-1, cdata];
  } else if (next === "" || /[a-zA-Z=/]/.test(next)) {
    return [-1, cdata];
  } else if (end <= i) {
    end = i + 1;
  }
  const name = match(TAG_NAME, i + 1);
  const tag = name[1].toLowerCase();
  let k = i + 1 + name[0].length;
  const attrs = {};
  while (k < end) {
    const found = match(ATTRIBUTE, k);
    if (!found) break;
    let value = found[2] ? found[3] : null;
    if (value && ((value[0] === "'" && value.endsWith("'")) ||
                  (value[0] === '"' && value.endsWith('"')))) {
      value = value.slice(1, -1);
    }
    if (value) value = decodeHTML(value);
    attrs[found[1].toLowerCase()] = value;
    k = found.index + found[0].length;
  }
  const rest = document.slice(k, end).replace(new RegExp(`^${S}+|${S}+$`, "g"), "");
  if (rest !== ">" && rest !== "/>") {
    events.push([i, "data", document.slice(i, end)]);
    return [end, cdata];
  }
  if (rest === "/>") {
    events.push([i, "void", [tag, attrs]]);
    return [end, cdata];
  }
  events.push([i, "start", [tag, attrs]]);
  return [end, CDATA.has(tag) ? tag : cdata];
}

function endTag(document, i, events, match, cdata) {
  const close = document.indexOf(">", i + 1);
  if (close < 0) return [-1, cdata];
  const gt = close + 1;
  const found = match(END_TAG, i);
  if (!found) {
    if (cdata !== null) {
      events.push([i, "data", document.slice(i, gt)]);
      return [gt, cdata];
    }
    const name = match(TAG_NAME, i + 2);
    if (!name) {
      if (document.startsWith("</>", i)) return [i + 3, cdata];
      const end = document.indexOf(">", i + 2);
      if (end < 0) return [-1, cdata];
      events.push([i, "other", null]);
      return [end + 1, cdata];
    }
    events.push([i, "end", name[1].toLowerCase()]);
    return [document.indexOf(">", i + 2 + name[0].length) + 1, cdata];
  }
  const tag = found[1].toLowerCase();
  if (cdata !== null && tag !== cdata) {
    events.push([i, "data", document.slice(i, gt)]);
    return [gt, cdata];
  }
  events.push([i, "end", tag]);
  return [gt, null];
}

// `<!...`: a comment, a marked section, a doctype or a bogus comment; -1 incomplete.
function declaration(document, i, events) {
  let end;
  if (document.startsWith("<![", i)) {
    const close = document.indexOf("]]>", i + 3);
    end = close < 0 ? -1 : close + 3;
  } else if (document.slice(i, i + 9).toLowerCase() === "<!doctype") {
    const close = document.indexOf(">", i + 9);
    end = close < 0 ? -1 : close + 1;
  } else {
    const close = document.indexOf(">", i + 2);
    end = close < 0 ? -1 : close + 1;
  }
  if (end >= 0) events.push([i, "other", null]);
  return end;
}

// An HTML document as raw text to copy and blocks to translate (html.py's `parse`).
export function parseHtml(document) {
  const events = htmlEvents(document);
  const builder = new HtmlBuilder();
  const lineStarts = [0];
  for (const found of document.matchAll(/\n/g)) lineStarts.push(found.index + 1);
  events.forEach(([offset, kind, value], index) => {
    const end = index + 1 < events.length ? events[index + 1][0] : document.length;
    builder.line = lineAt(lineStarts, offset);
    builder.event(kind, value, document.slice(offset, end));
  });
  return builder.parts();
}

// The line (from 1) of an offset, of a document whose lines start at `lineStarts`.
function lineAt(lineStarts, offset) {
  let low = 0;
  let high = lineStarts.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if (lineStarts[middle] <= offset) low = middle + 1;
    else high = middle;
  }
  return low;
}

class HtmlBuilder {
  constructor() {
    this.found = [];
    this.block = null;
    this.stack = [];
    this.copied = [];
    this.starts = [];
    this.line = 1;
  }

  event(kind, value, raw) {
    if (this.copied.length) {
      this.copy(kind, value, raw);
    } else if (kind === "start") {
      const [tag, attrs] = value;
      if (VOID.has(tag)) {
        this.void(tag, raw);
      } else if (UNTRANSLATED.has(tag) || (attrs.translate ?? "").toLowerCase() === "no") {
        this.copied.push(tag);
        this.atom(raw);
      } else if (INLINE.has(tag) || tag.includes("-")) {
        const block = this.current();
        block.source.push(raw);
        this.stack.push(element(tag, raw, `</${tag}>`));
        this.starts.push([block.runs.length, block.source.length, block.breaks.length]);
      } else {
        this.boundary(raw);
      }
    } else if (kind === "void") {
      this.void(value[0], raw);
    } else if (kind === "end") {
      this.end(value, raw);
    } else if (kind === "data") {
      this.current().addText(raw, value, stackOf(this.stack));
    } else {
      this.atom(raw);
    }
  }

  copy(kind, value, raw) {
    if (kind === "start" && !VOID.has(value[0])) {
      this.copied.push(value[0]);
    } else if (kind === "end" && this.copied.includes(value)) {
      while (this.copied.pop() !== value) { /* the elements inside it end with it */ }
    }
    this.atom(raw);
  }

  void(tag, raw) {
    if (BLOCK_VOID.has(tag)) this.boundary(raw);
    else if (tag === "br") this.current().addBreak(raw, stackOf(this.stack));
    else this.atom(raw);
  }

  end(tag, raw) {
    if (this.stack.some((found) => found.name === tag)) {
      let runs, sources, breaks;
      while (this.stack.length) {
        const found = this.stack.pop();
        [runs, sources, breaks] = this.starts.pop();
        if (found.name === tag) {
          found.close = raw;
          break;
        }
      }
      const block = this.current();
      block.source.push(raw);
      const inside = block.runs.slice(runs);
      if (inside.every((item) => item.atom || !item.text.replace(new RegExp(`${S}`, "g"), "")) &&
          block.breaks.length === breaks) {
        const space = inside.filter((item) => !item.atom).map((item) => item.text).join("");
        block.runs.splice(runs, block.runs.length - runs,
                          run(block.source.slice(sources - 1).join(""), stackOf(this.stack), true),
                          ...(space ? [run(space, stackOf(this.stack))] : []));
      }
    } else if (INLINE.has(tag) || tag.includes("-")) {
      this.atom(raw);
    } else {
      this.boundary(raw);
    }
  }

  atom(raw) {
    if (this.block === null && !this.stack.length) this.found.push(raw);
    else this.current().addAtom(raw, stackOf(this.stack));
  }

  current() {
    if (this.block === null) {
      this.block = new Block(this.line);
      this.found.push(this.block);
    }
    return this.block;
  }

  boundary(raw) {
    this.closeBlock();
    this.found.push(raw);
  }

  closeBlock() {
    this.block = null;
    this.stack = [];
    this.starts = [];
  }

  parts() {
    this.closeBlock();
    return this.found;
  }
}

// Markdown: markdown.py's rules.
const ESCAPED = /([\\`*_[\]<>|&!#~])/g;
// A list marker or a setext underline a translated text could start with: its punctuation is
// escaped (a backslash before a digit would be text).
const LINE_START = new RegExp(`^(\\p{Nd}*)([-+=]|(?<=\\p{Nd})[.)])(?=${S}|$)`, "u");
const FRONT_MATTER = /(---|\+\+\+)\r?\n[\s\S]*?(?<=\n)\1[ \t]*(?:\r?\n|$)/y;
// Python's `str.splitlines` line ends.
// The line ends of Python's `str.splitlines`.
const LINE_END = /\r\n|[\n\v\f\r\x1c-\x1e\x85\u2028\u2029]/g;

// The CommonMark parser with GitHub's tables and strikethrough.
export function markdownParser() {
  return new MarkdownIt("commonmark").enable(["table", "strikethrough"]);
}

// Translated text as Markdown: every character that could start markup escaped.
export function escapeMarkdown(text) {
  return text.replace(ESCAPED, "\\$1").replace(LINE_START, "$1\\$2");
}

// The lines of `text`, each with its line end, as Python's `str.splitlines(keepends=True)`.
export function splitLinesKeepEnds(text) {
  const lines = [];
  let start = 0;
  for (const found of text.matchAll(LINE_END)) {
    lines.push(text.slice(start, found.index + found[0].length));
    start = found.index + found[0].length;
  }
  if (start < text.length) lines.push(text.slice(start));
  return lines;
}

// A Markdown document as raw text to copy and blocks to translate (markdown.py's `parse`).
export function parseMarkdown(document, parser = markdownParser()) {
  FRONT_MATTER.lastIndex = 0;
  const front = FRONT_MATTER.exec(document);
  const start = front ? front[0].length : 0;
  const body = document.slice(start);
  const lines = splitLinesKeepEnds(body);
  const lineStarts = [0];
  for (const text of lines) lineStarts.push(lineStarts[lineStarts.length - 1] + text.length);
  const blocks = [];
  const cellEnd = new Map();
  let row = null;  // the map of the table row at hand
  for (const token of parser.parse(body, {})) {
    if (token.type === "tr_open") row = token.map;
    // a table cell's: its row's line (markdown-it-py keeps the map markdown-it 12 removed)
    if (token.type === "inline" && token.map === null && row !== null) token.map = row;
    if (token.type === "table_close") row = null;
    if (token.type !== "inline" || token.map === null || !token.children?.length) continue;
    const located = locate(token, lines, cellEnd.get(token.map[0]) ?? 0);
    if (located === null) continue;
    const [first, column] = located[0];
    const [last, lastColumn, lastText] = located[located.length - 1];
    cellEnd.set(last, lastColumn + lastText.length);
    const begin = start + lineStarts[first] + column;
    const end = start + lineStarts[last] + lastColumn + lastText.length;
    const block = markdownBlock(token, lines, located);
    block.source = [document.slice(begin, end)];
    block.line = countNewlines(document.slice(0, start)) + first + 1;
    blocks.push([begin, end, block]);
  }
  const found = [];
  let position = 0;
  for (const [begin, end, block] of blocks.sort((a, b) => a[0] - b[0])) {
    found.push(document.slice(position, begin), block);
    position = end;
  }
  found.push(document.slice(position));
  return found;
}

const countNewlines = (text) => text.split("\n").length - 1;

function locate(token, lines, searchFrom) {
  const [first, last] = token.map;
  const located = [];
  const contents = token.content.split("\n");
  for (let offset = 0; offset < contents.length; offset++) {
    const number = first + offset;
    if (number >= Math.min(last, lines.length)) return null;
    const from = offset === 0 ? searchFrom : 0;  // (Python's `find` past the end: -1)
    const column = from > lines[number].length ? -1 : lines[number].indexOf(contents[offset], from);
    if (column < 0) return null;
    located.push([number, column, contents[offset]]);
  }
  return located;
}

function markdownBlock(token, lines, located) {
  const block = new Block();
  const stack = [];
  let index = 0;
  let autolink = null;
  for (const child of token.children) {
    const kind = child.type;
    if (autolink !== null) {
      autolink.push(kind !== "link_close" ? child.content : ">");
      if (kind === "link_close") {
        block.addAtom(autolink.join(""), stackOf(stack));
        autolink = null;
      }
    } else if (kind === "link_open" && child.markup === "autolink") {
      autolink = ["<"];
    } else if (kind === "text" || kind === "softbreak") {
      block.runs.push(run(kind === "text" ? child.content : " ", stackOf(stack)));
      if (kind === "softbreak") index++;
    } else if (kind === "hardbreak") {
      const [number, column, text] = located[index];
      const kept = text.endsWith("\\") ? text.slice(0, -1) : text.replace(/ +$/, "");
      index++;
      const [following, nextColumn] = located[index];
      block.addBreak(lines[number].slice(column + kept.length) +
                     lines[following].slice(0, nextColumn), stackOf(stack));
    } else if (kind === "link_open") {
      stack.push(element("link", "[", linkEnd(child.attrGet("href"), child.attrGet("title"))));
    } else if (["em_open", "strong_open", "s_open"].includes(kind)) {
      stack.push(element(kind.slice(0, -5), child.markup, child.markup));
    } else if (["em_close", "strong_close", "s_close", "link_close"].includes(kind)) {
      stack.pop();
    } else {
      block.addAtom(markdownAtom(child), stackOf(stack));
    }
  }
  return block;
}

function linkEnd(href, title) {
  href = String(href || "");
  if (!href || new RegExp(`[()<>${SPACE.slice(1, -1)}]`).test(href)) {
    href = "<" + href.replace(/</g, "%3C").replace(/>/g, "%3E") + ">";
  }
  title = String(title || "").replace(/"/g, '\\"');
  return "](" + href + (title ? ` "${title}"` : "") + ")";
}

function markdownAtom(token) {
  if (token.type === "code_inline") {
    const content = token.content;
    const pad = ["`", " "].includes(content.slice(0, 1)) || ["`", " "].includes(content.slice(-1))
      ? " " : "";
    return `${token.markup}${pad}${content}${pad}${token.markup}`;
  }
  if (token.type === "image") {
    return `![${token.content}` + linkEnd(token.attrGet("src"), token.attrGet("title"));
  }
  return token.content;
}
