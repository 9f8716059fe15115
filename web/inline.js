// Inline markup carried by word alignment, as keras_transformer/documents/inline.py carries
// it (that module says how; this one follows it step for step, so that the page's HTML and
// Markdown come out as kt-translate's): a block's text as runs, each with its stack of open
// inline elements; each target word takes the stack of the source word it is aligned to. And
// the word alignment of documents/translators.py, from a subword alignment. Pure functions:
// offsets count code points, as Python's do, and whitespace is what `str.isspace` takes.
// Elements (and the stacks Python builds as tuples) are told apart by identity.
import {SPACE} from "./lines.js";

const IS_SPACE = new RegExp(`^${SPACE}$`);
const isSpace = (char) => IS_SPACE.test(char);
// Python's empty tuple is one object; a stack of elements is a new one each time it is built.
export const EMPTY = Object.freeze([]);
// The word mark of SentencePiece pieces, and the end-of-sentence piece.
const WORD_START = "\u2581";
const EOS_PIECE = "</s>";

// An inline element as its format writes it: its opening and closing markup.
export function element(name, open, close = "") {
  return {name, open, close};
}

// A stack of open elements (outermost first) as Python builds it from a list: the empty one,
// or a new array.
export function stackOf(elements) {
  return elements.length ? [...elements] : EMPTY;
}

// Plain text under a stack, or an atom: markup copied as it is, holding no words.
export function run(text, stack = EMPTY, atom = false) {
  return {text, stack, atom};
}

const length = (text) => Array.from(text).length;

// Inline content to translate between two block boundaries (inline.py's `Block`).
export class Block {
  constructor(line = 1) {
    this.runs = [];
    this.source = [];
    this.line = line;
    this.breaks = [];
  }

  addText(raw, text, stack) {
    this.runs.push(run(text, stack));
    this.source.push(raw);
  }

  addAtom(raw, stack) {
    this.runs.push(run(raw, stack, true));
    this.source.push(raw);
  }

  addBreak(raw, stack) {
    this.breaks.push(length(plainText(this.runs)));
    this.addAtom(raw, stack);
  }
}

// The text the model reads: the runs' text, atoms left out.
export function plainText(runs) {
  return runs.filter((item) => !item.atom).map((item) => item.text).join("");
}

// The runs written out: text escaped, elements opened and closed where stacks differ.
export function serialize(runs, escape) {
  const out = [];
  const open = [];
  for (const item of runs) {
    let common = 0;
    while (common < open.length && common < item.stack.length &&
           open[common] === item.stack[common]) {
      common++;
    }
    while (open.length > common) out.push(open.pop().close);
    for (const found of item.stack.slice(common)) {
      out.push(found.open);
      open.push(found);
    }
    out.push(item.atom ? item.text : escape(item.text));
  }
  while (open.length) out.push(open.pop().close);
  return out.join("");
}

const atoms = (runs = [], spaceBefore = false, spaceAfter = false) => (
  {runs, spaceBefore, spaceAfter});

// The sentences at `spans` (code point offsets) of a block's runs: {words, trailing, text}.
export function sentences(runs, spans) {
  const found = cells(runs);
  const taken = new Set();
  return spans.map(([start, end]) => {
    const [words, trailing] = wordsOf(found, start, end, taken);
    return {words, trailing, text: words.map((word) => word.text).join(" ")};
  });
}

// A block's runs with its sentences at `spans` replaced by their `translations` ({text,
// alignment}), the text between them kept.
export function translatedRuns(runs, spans, source, translations) {
  const found = cells(runs);
  const out = [];
  let position = null;
  spans.forEach(([start, end], index) => {
    out.push(...between(found, position, start));
    out.push(...placedRuns(source[index].words, source[index].trailing, translations[index]));
    position = end;
  });
  out.push(...between(found, position, null));
  return out;
}

// One cell a code point, one an atom: [offset, char, stack, atom or null].
function cells(runs) {
  const out = [];
  let position = 0;
  for (const item of runs) {
    if (item.atom) {
      out.push([position, "", item.stack, item]);
      continue;
    }
    for (const char of item.text) out.push([position++, char, item.stack, null]);
  }
  return out;
}

// The index of the first cell at offset `start` or later.
function firstAt(found, start) {
  let low = 0;
  let high = found.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if (found[middle][0] < start) low = middle + 1;
    else high = middle;
  }
  return low;
}

function between(found, start, end) {
  const out = [];
  for (let index = start === null ? 0 : firstAt(found, start); index < found.length; index++) {
    const [position, char, stack, atom] = found[index];
    if (end !== null && position >= end) break;
    if (!(start === null || position > start || (atom === null && position === start))) {
      continue;
    }
    const last = out[out.length - 1];
    if (atom !== null) out.push(atom);
    else if (last && !last.atom && last.stack === stack) out[out.length - 1] = run(last.text + char, stack);
    else out.push(run(char, stack));
  }
  return out;
}

function wordsOf(found, start, end, taken) {
  const words = [];
  let pending = atoms();
  const chars = [];
  let space = false;
  const flush = () => {
    if (!chars.length) return;
    const counts = new Map();
    for (const [, stack] of chars) counts.set(stack, (counts.get(stack) ?? 0) + 1);
    let best = null;
    for (const [stack, count] of counts) if (best === null || count > best[1]) best = [stack, count];
    words.push({text: chars.map(([char]) => char).join(""), stack: best[0], before: pending});
    pending = atoms();
    chars.length = 0;
  };
  for (let index = firstAt(found, start); index < found.length; index++) {
    const [position, char, stack, atom] = found[index];
    if (position > end) break;
    if (atom !== null) {
      if (!taken.has(atom)) {
        taken.add(atom);
        flush();
        if (!pending.runs.length) pending.spaceBefore = space;
        pending.runs.push(atom);
        pending.spaceAfter = false;
      }
    } else if (position < end) {
      space = isSpace(char);
      if (space) {
        flush();
        pending.spaceAfter = pending.spaceAfter || pending.runs.length > 0;
      } else {
        chars.push([char, stack]);
      }
    }
  }
  flush();
  return [words, pending];
}

// A text's words, as Python's `str.split()`.
export function splitWords(text) {
  return text.split(new RegExp(`${SPACE}+`)).filter(Boolean);
}

// The translation's words as runs under the stacks of the source words they are aligned to
// (inline.py's `placed_runs`).
export function placedRuns(source, trailing, translation) {
  const target = splitWords(translation.text);
  if (!source.length) {
    return [...trailing.runs, ...(translation.text ? [run(translation.text)] : [])];
  }
  let alignment = translation.alignment;
  if (alignment == null || alignment.length !== target.length) {
    alignment = target.map((_, index) => Math.floor(index * source.length / target.length));
  }
  alignment = alignment.map((aligned) => (0 <= aligned && aligned < source.length ? aligned : -1));
  coverEveryElement(source, alignment);
  const anchors = atomAnchors(source, alignment);
  const gaps = translation.text.replace(new RegExp(`^${SPACE}+|${SPACE}+$`, "g"), "")
    .match(new RegExp(`${SPACE}+`, "g")) ?? [];
  const runs = [];
  for (let index = 0; index <= target.length; index++) {
    let found = anchors.get(index) ?? atoms();
    if (index === target.length) {
      found = atoms([...found.runs, ...trailing.runs],
                    found.runs.length ? found.spaceBefore : trailing.spaceBefore);
    }
    const wordStack = index === target.length || alignment[index] < 0 ? EMPTY
      : source[alignment[index]].stack;
    const inside = 0 < index && index < target.length;
    let before = index > 0 && (found.runs.length ? found.spaceBefore : inside);
    const after = index < target.length && found.spaceAfter && found.runs.length > 0;
    if (inside && found.runs.length && !(before || after)) before = true;
    // The translation's own whitespace between two words (a no-break space kept), once.
    let gap = inside ? gaps[index - 1] : " ";
    if (before) {
      const next = found.runs.length ? found.runs[0].stack : wordStack;
      runs.push(run(gap, shared(runs[runs.length - 1].stack, next)));
      gap = " ";
    }
    runs.push(...found.runs);
    if (after) runs.push(run(gap, shared(runs[runs.length - 1].stack, wordStack)));
    if (index < target.length) runs.push(run(target[index], wordStack));
  }
  for (const stack of uncovered(source, runs)) runs.push(run("", stack));
  return runs;
}

function shared(left, right) {
  let common = 0;
  while (common < Math.min(left.length, right.length) && left[common] === right[common]) {
    common++;
  }
  return left.slice(0, common);
}

function atomAnchors(source, alignment) {
  const anchors = new Map();
  source.forEach((word, k) => {
    if (!word.before.runs.length) return;
    const earlier = alignment.flatMap((aligned, index) => (0 <= aligned && aligned < k ? [index] : []));
    const position = earlier.length ? Math.max(...earlier) + 1 : 0;
    if (anchors.has(position)) {
      anchors.get(position).runs.push(...word.before.runs);
      anchors.get(position).spaceAfter = word.before.spaceAfter;
    } else {
      anchors.set(position, atoms([...word.before.runs], word.before.spaceBefore,
                                  word.before.spaceAfter));
    }
  });
  return anchors;
}

// The first of the items with the least `key`, as Python's `min`.
function least(items, key) {
  let best = items[0];
  for (const item of items.slice(1)) if (key(item) < key(best)) best = item;
  return best;
}

function coverEveryElement(source, alignment) {
  const elements = [...new Set(source.flatMap((word) => word.stack))];
  for (const found of elements) {
    const positions = source.flatMap((word, k) => (word.stack.includes(found) ? [k] : []));
    if (alignment.some((aligned) => positions.includes(aligned))) continue;
    const count = (value) => alignment.filter((aligned) => aligned === value).length;
    const spare = alignment.flatMap((aligned, index) => (
      aligned < 0 || count(aligned) > 1 || source[aligned].stack.length === 0 ? [index] : []));
    if (spare.length) {
      const index = least(spare, (i) => Math.min(...positions.map((k) => Math.abs(alignment[i] - k))));
      alignment[index] = least(positions, (k) => Math.abs(alignment[index] - k));
    }
  }
}

function uncovered(source, runs) {
  const present = new Set(runs.flatMap((item) => item.stack));
  const missing = new Map();
  for (const word of source) {
    word.stack.forEach((found, depth) => {
      if (!present.has(found) && !missing.has(found)) missing.set(found, word.stack.slice(0, depth + 1));
    });
  }
  return [...missing.values()];
}

// For each target word, the source word most of its pieces are aligned to (the first of a
// tie; -1: none); null when the pieces do not make as many words as the texts have
// (translators.py's `word_alignment`).
export function wordAlignment(targetPieces, sourcePieces, alignment, targetWords, sourceWords) {
  const sourceWord = pieceWords(sourcePieces);
  const targetWord = pieceWords(targetPieces);
  if (Math.max(-1, ...sourceWord) + 1 !== sourceWords ||
      Math.max(-1, ...targetWord) + 1 !== targetWords) {
    return null;
  }
  const votes = Array.from({length: targetWords}, () => new Map());
  alignment.slice(0, targetPieces.length).forEach((aligned, piece) => {
    if (targetWord[piece] >= 0 && 0 <= aligned && aligned < sourceWord.length &&
        sourceWord[aligned] >= 0) {
      const vote = votes[targetWord[piece]];
      vote.set(sourceWord[aligned], (vote.get(sourceWord[aligned]) ?? 0) + 1);
    }
  });
  return votes.map((vote) => (vote.size ? least(
    [...vote.keys()].sort((a, b) => a - b), (word) => -vote.get(word)) : -1));
}

// Each piece's word index (word_links.py's `piece_words`): a piece starting with the word mark
// starts a word, and so does the mark alone before a piece inside a word (byte pieces); the
// mark alone before another word, the end or an end-of-sentence piece is whitespace of no word
// (-1); pieces before the first word (a language token, or byte pieces the model put first),
// and an end-of-sentence piece, belong to none.
function pieceWords(pieces) {
  const found = [];
  let word = -1;
  pieces.forEach((piece, index) => {
    if (piece === EOS_PIECE) {
      found.push(-1);
      return;
    }
    if (piece === WORD_START) {
      const next = pieces[index + 1];
      if (next === undefined || next === EOS_PIECE || next.startsWith(WORD_START)) {
        found.push(-1);
        return;
      }
    }
    if (piece.startsWith(WORD_START)) {
      word++;
    }
    found.push(word);
  });
  return found;
}
