// What a typed document becomes on the page, planned before anything is translated: the
// sentences to translate and the text around them, copied as it is. Format "text" plans as
// keras_transformer/documents plans plain text (`kt-translate --format text`): each line's
// sentences found by a segmenter, those with nothing to translate (numbers, URLs) left as they
// are, those longer than the model takes split in parts (`fittedSpans`, the rule of
// segmentation.py's `fitted_spans`); format "lines" takes each line for one sentence
// (kt-translate's default); formats "html" and "markdown" read the document as
// keras_transformer/documents reads it (web/markup.js) into blocks of inline runs whose
// sentences are found and fitted as plain text's, and put the translations back with their
// markup placed by word alignment (web/inline.js). Pure functions, no browser and no model:
// offsets count code points, as Python's do, and whitespace is what Python's `str.isspace`
// takes.
import {plainText, sentences, serialize, translatedRuns} from "./inline.js";
import {SPACE, isBlank} from "./lines.js";
import {escapeHtml, escapeMarkdown, parseHtml, parseMarkdown, splitLinesKeepEnds}
  from "./markup.js";

export const FORMATS = ["text", "lines", "html", "markdown"];
// The formats whose markup is placed by word alignment: their translations are {text,
// alignment} (alignment: for each word of the text, the source word it is aligned to).
export const MARKUP = ["html", "markdown"];

const IS_SPACE = new RegExp(`^${SPACE}$`);
const SPACES = new RegExp(`${SPACE}+`);
const EDGE_SPACES = new RegExp(`^${SPACE}+|${SPACE}+$`, "g");
// A URL or an address alone (document.py's `_URL`, case-insensitive; Python's `\S` and `\w`
// are Unicode's, and its `\w` takes no case-folded letter): a URL's start followed by
// something, with no whitespace anywhere.
const NOT_SPACE = `[^${SPACE.slice(1)}`;
const URL_START = /^(?:[a-z][a-z0-9+.-]*:\/\/|www\.|mailto:)./iu;
const NO_SPACE = new RegExp(`^${NOT_SPACE}+$`, "u");
const ADDRESS = new RegExp(`^${NOT_SPACE}+@${NOT_SPACE}+\\.[\\p{L}\\p{N}_]+$`, "u");
const LETTER = /\p{L}/u;
// Where a part may end (segmentation.py): after clause punctuation, or a dash between spaces.
const CLAUSE_END = new Set([",", ";", ":", "\u2014", "\u2013", ")", "]"]);
const DASH = new Set(["-", "\u2014", "\u2013"]);

const isSpace = (char) => IS_SPACE.test(char);

// A text's words: split at whitespace, as Python's `str.split()`.
export function words(text) {
  return text.split(SPACES).filter(Boolean);
}

// Whether a text goes to the model: it has a letter and is not a URL or an address alone.
export function translatable(text) {
  const stripped = text.replace(EDGE_SPACES, "");
  const alone = (URL_START.test(stripped) && NO_SPACE.test(stripped)) || ADDRESS.test(stripped);
  return LETTER.test(text) && !alone;
}

// A document's lines as `[body, end]`, the end its line break ("" for the last line without
// one), as Python's `str.splitlines(keepends=True)` and the body without its trailing "\r"
// and "\n".
export function splitLines(document) {
  return splitLinesKeepEnds(document).map((line) => {
    const body = line.replace(/[\r\n]+$/, "");
    return [body, line.slice(body.length)];
  });
}

// The sentences of a line (`chars`: its code points) as `[start, end]` code point offsets,
// whitespace around them left out, found by `segment` (text -> its sentences, in order); a
// sentence the segmenter changed ends the search, the rest of the line one sentence.
export function sentenceSpans(chars, segment, breaks = []) {
  if (breaks.length) {
    const starts = [0, ...breaks];
    const ends = [...breaks, chars.length];
    return starts.flatMap((start, index) => sentenceSpans(chars.slice(start, ends[index]), segment)
      .map(([from, to]) => [start + from, start + to]));
  }
  const spans = [];
  let position = 0;
  if (isBlank(chars.join(""))) return spans;
  for (const piece of segment(chars.join(""))) {
    const sentence = Array.from(piece.replace(EDGE_SPACES, ""));
    if (!sentence.length) continue;
    const start = indexOf(chars, sentence, position);
    if (start < 0) break;
    spans.push([start, start + sentence.length]);
    position = start + sentence.length;
  }
  const [start, end] = stripped(chars, position, chars.length);
  if (end > start) spans.push([start, end]);
  return spans;
}

// Where `part` starts in `chars` at or after `from`, -1 nowhere.
function indexOf(chars, part, from) {
  for (let start = from; start + part.length <= chars.length; start++) {
    if (part.every((char, index) => chars[start + index] === char)) return start;
  }
  return -1;
}

// The offsets `start`-`end` without the whitespace at either end.
function stripped(chars, start, end) {
  while (start < end && isSpace(chars[start])) start++;
  while (end > start && isSpace(chars[end - 1])) end--;
  return [start, end];
}

// Each span as the parts it is translated in: itself, or, when `tooLong` says so (texts, the
// words of each joined by single spaces -> one boolean each), split in two nearest its middle
// (`halves`), the halves split again as long as they are too long.
export function fittedSpans(chars, spans, tooLong) {
  const parts = spans.map((span) => [span]);
  let pending = parts.map((_, index) => index);
  while (pending.length) {
    const flags = tooLong(pending.flatMap((index) => parts[index].map(
      ([start, end]) => words(chars.slice(start, end).join("")).join(" "))));
    let flag = 0;
    const still = [];
    for (const index of pending) {
      const split = parts[index].flatMap((span) => (
        flags[flag++] && span[1] - span[0] > 1 ? halves(chars, span) : [span]));
      if (split.length > parts[index].length) {
        parts[index] = split;
        still.push(index);
      }
    }
    pending = still;
  }
  return parts;
}

// A span split in two, nearest its middle (the earlier of two as near): after clause
// punctuation followed by whitespace, else after a word, else between code points; each
// half's outer whitespace left out.
function halves(chars, [start, end]) {
  const [first, last] = stripped(chars, start, end);  // text on both sides: first < cut <= last
  const clause = [];
  const word = [];
  for (let cut = Math.max(start, first) + 1; cut < end && cut < last; cut++) {
    if (!isSpace(chars[cut])) continue;
    const before = chars[cut - 1];
    if (CLAUSE_END.has(before) || (cut - 2 >= start && isSpace(chars[cut - 2]) &&
                                   DASH.has(before))) {
      clause.push(cut);
    }
    if (!isSpace(before)) word.push(cut);
  }
  const middle = (start + end) / 2;
  const cuts = clause.length ? clause : word;
  const cut = cuts.length ? cuts.reduce((best, cut) => (
    Math.abs(cut - middle) < Math.abs(best - middle) ? cut : best)) : Math.floor(middle);
  return [[start, stripped(chars, start, cut)[1]], [stripped(chars, cut, end)[0], end]];
}

// A document planned for translation: `pieces` (text copied as it is, or a sentence's index),
// `sentences` ({text, line}: the words joined by single spaces, the line they are on) and
// `splits` ({line, parts}: the sentences translated in parts). `format` is one of `FORMATS`;
// `segment` (text -> its sentences) and `tooLong` (texts -> whether each is longer than the
// model takes) are format "text"'s.
export function planDocument(document, format, {segment, tooLong}) {
  if (format === "text") return planText(document, segment, tooLong);
  if (format === "lines") return planLines(document);
  if (MARKUP.includes(format)) return planMarkup(document, format, segment, tooLong);
  throw new Error(`format ${format}: the page translates ${FORMATS.join(", ")}`);
}

// HTML or Markdown: the text between blocks copied, each block's sentences planned as a
// line's (document.py's `_plan`); a piece of a block is {block, spans, source, first}.
function planMarkup(document, format, segment, tooLong) {
  const plan = {pieces: [], sentences: [], splits: []};
  for (const part of format === "html" ? parseHtml(document) : parseMarkdown(document)) {
    if (typeof part === "string") {
      plan.pieces.push(part);
      continue;
    }
    const chars = Array.from(plainText(part.runs));
    const spans = sentenceSpans(chars, segment, part.breaks).filter(
      ([from, to]) => translatable(chars.slice(from, to).join("")));
    if (!spans.length) {
      plan.pieces.push(part.source.join(""));
      continue;
    }
    const fitted = fittedSpans(chars, spans, tooLong);
    const parts = fitted.flat();
    const source = sentences(part.runs, parts);
    plan.pieces.push({block: part, spans: parts, source, first: plan.sentences.length});
    for (const sentence of source) plan.sentences.push({text: sentence.text, line: part.line});
    for (const split of fitted) {
      if (split.length > 1) plan.splits.push({line: part.line, parts: split.length});
    }
  }
  return plan;
}

function planText(document, segment, tooLong) {
  const plan = {pieces: [], sentences: [], splits: []};
  for (const [index, [body, end]] of splitLines(document).entries()) {
    const chars = Array.from(body);
    const spans = sentenceSpans(chars, segment).filter(
      ([from, to]) => translatable(chars.slice(from, to).join("")));
    let position = 0;
    for (const parts of fittedSpans(chars, spans, tooLong)) {
      for (const [from, to] of parts) {
        plan.pieces.push(chars.slice(position, from).join(""), plan.sentences.length);
        plan.sentences.push({text: words(chars.slice(from, to).join("")).join(" "),
                             line: index + 1});
        position = to;
      }
      if (parts.length > 1) plan.splits.push({line: index + 1, parts: parts.length});
    }
    plan.pieces.push(chars.slice(position).join("") + end);
  }
  return plan;
}

// Each line one sentence, as it is; a blank line (`isBlank`) its own translation.
function planLines(document) {
  const plan = {pieces: [], sentences: [], splits: []};
  for (const [index, line] of document.split("\n").entries()) {
    if (index) plan.pieces.push("\n");
    if (isBlank(line)) {
      plan.pieces.push(line);
    } else {
      plan.pieces.push(plan.sentences.length);
      plan.sentences.push({text: line, line: index + 1});
    }
  }
  return plan;
}

// The planned document with its first sentences' `translations` in (each one without the
// whitespace around it in format "text", its own between its words kept; in a markup format, {text, alignment} each, a block shown
// once all its sentences are in), up to the first sentence not yet translated.
export function rendered(plan, translations, format) {
  const out = [];
  const escape = format === "html" ? escapeHtml : escapeMarkdown;
  for (const piece of plan.pieces) {
    if (typeof piece === "string") {
      out.push(piece);
    } else if (typeof piece === "object") {
      const {block, spans, source, first} = piece;
      if (first + source.length > translations.length) break;
      out.push(serialize(translatedRuns(block.runs, spans, source,
                                        translations.slice(first, first + source.length)),
                         escape));
    } else if (piece < translations.length) {
      out.push(format === "text" ? translations[piece].replace(EDGE_SPACES, "")
        : translations[piece]);
    } else {
      break;
    }
  }
  return out.join("");
}
