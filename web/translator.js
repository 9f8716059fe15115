// A LiteRT export (`kt-export --format litert`) translating in the browser as kt-translate
// translates with it: its SentencePiece model(s) (the C++ library compiled to WebAssembly, by
// sentencepiece-js) give the source's ids, the model's `beam` signature (LiteRT.js, its
// WebAssembly CPU kernels) the translation's, the SentencePiece model their text. What a line
// becomes on its way is lines.js's (no browser there); this module loads and runs.
import {loadLiteRt, loadAndCompile, Tensor} from "@litertjs/core";
import {SentencePieceProcessor} from "@sctg/sentencepiece-js";
import {splitWords, wordAlignment} from "./inline.js";
import {isBlank, placedTokens, sourceIds, translationIds} from "./lines.js";

export const MANIFEST_FILE = "keras_transformer_litert.json";
export const LITERT_FILE = "model.tflite";
const TOKENIZER_FILE = "spm.model";
// A leading target-language token of an imported model's text (`>>fra<<`) and the whitespace
// after it, as `SentencePiecePair.tokenize` reads it.
const LANGUAGE_TOKEN = /^(>>[^<>\t\n\f\r ]+<<)[\t\n\f\r ]*/;
// LiteRT's own log lines ("INFO: [environment.cc:36] Creating LiteRT environment ..."), which
// its WebAssembly module prints to stderr (the console's error level): the console's level of
// each line's own.
const LITERT_LOG_LINE = /^(VERBOSE|INFO|WARNING): /;
const CONSOLE_LEVEL = {VERBOSE: "debug", INFO: "info", WARNING: "warn"};
const WORD_START = "\u2581";
const EOS_PIECE = "</s>";

// What `load()` gives, or its error named by the file it reads: "URL: problem (what)".
async function named(url, what, load) {
  try {
    return await load();
  } catch (error) {
    // a script that would not load gives an event, not an error
    const problem = error instanceof Event ? "could not be loaded" : error.message ?? error;
    throw new Error(`${url}: ${problem} (${what})`);
  }
}

// The response to a GET of `url`; an error for a status that is not 2xx.
async function fetched(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
  return response;
}

function json(url, what) {
  return named(url, what, async () => (await fetched(url)).json());
}

// `bytes` as base64 text, in chunks (String.fromCharCode takes a bounded number of arguments).
function base64(bytes) {
  const chunks = [];
  for (let start = 0; start < bytes.length; start += 0x8000) {
    chunks.push(String.fromCharCode(...bytes.subarray(start, start + 0x8000)));
  }
  return btoa(chunks.join(""));
}

// A SentencePiece model read with sentencepiece-js's public API: it loads a file path (Node.js
// only) or base64 text, and says nothing of a file it could not read, which the C++
// processor's status tells.
function sentencePiece(url, what) {
  return named(url, what, async () => {
    const bytes = new Uint8Array(await (await fetched(url)).arrayBuffer());
    const processor = new SentencePieceProcessor();
    await processor.loadFromB64StringModel(base64(bytes));
    const status = processor.processor.status();
    const problem = status.ToString();
    status.delete();
    if (problem !== "OK") throw new Error(`not a SentencePiece model: ${problem}`);
    return processor;
  });
}

// LiteRT.js's WebAssembly module, loaded once for every model of the page; LiteRT's log lines
// at their own level, not the console's error level (an Emscripten module takes its
// `printErr` from the global `Module` object its loader passes in).
let liteRt = null;

function loadedLiteRt(wasmUrl) {
  liteRt ??= named(wasmUrl, "LiteRT.js's WebAssembly files", async () => {
    globalThis.Module = {
      printErr(line) {
        const level = line.match(LITERT_LOG_LINE)?.[1];
        console[CONSOLE_LEVEL[level] ?? "error"](line);
      },
    };
    try {
      return await loadLiteRt(wasmUrl);
    } finally {
      delete globalThis.Module;
    }
  }).catch((error) => {
    liteRt = null;
    throw error;
  });
  return liteRt;
}

// The tokenizer of a model trained here: one SentencePiece model whose ids are the model's.
class SharedTokenizer {
  constructor(processor, eos) {
    this.processor = processor;
    this.eos = eos;
    this.pieces = new Map();
  }

  static async load(manifest, modelUrl) {
    return new SharedTokenizer(await sentencePiece(new URL(manifest.tokenizer, modelUrl),
                                                   "the tokenizer"), manifest.special_ids.eos);
  }

  encode(text) {
    return this.processor.encodeIds(text);
  }

  decode(ids) {
    return this.processor.decodeIds(Int32Array.from(ids));
  }

  // What a word alignment reads of an id's piece (sentencepiece-js gives no piece of an id):
  // the word mark first where the piece starts with it (its text then parts from the text
  // before it: an id decoded twice is not its text twice), "</s>" for EOS.
  piece(id) {
    if (id === this.eos) return EOS_PIECE;
    if (!this.pieces.has(id)) {
      const once = this.decode([id]);
      this.pieces.set(id, this.decode([id, id]) === once + once ? once || "x"
        : WORD_START + once);
    }
    return this.pieces.get(id);
  }

  sourcePiece(id) {
    return this.piece(id);
  }

  targetPiece(id) {
    return this.piece(id);
  }
}

// The tokenizer of an imported model (`SentencePiecePair`): source pieces mapped to the
// model's ids through the vocabulary's source list (a leading `>>xx<<` token read whole),
// the model's target ids to the target model's by the manifest's `target_sentencepiece_ids`,
// the vocabulary's control pieces (an NLLB-200's language codes) left out of the text.
class PairTokenizer {
  constructor(source, target, vocabulary, targetIds, unk) {
    this.source = source;
    this.target = target;
    this.sourcePieces = vocabulary.source;
    this.targetPieces = vocabulary.target;
    this.sourceIds = new Map(vocabulary.source.map((piece, id) => [piece, id]));
    this.targetIds = targetIds;
    const control = new Set(vocabulary.control ?? []);
    this.text = vocabulary.target.map((piece) => !control.has(piece));
    this.unk = unk;
  }

  static async load(manifest, modelUrl) {
    const files = manifest.tokenizer;
    const vocabulary = await json(new URL(files.vocabulary, modelUrl), "the vocabulary");
    const [source, target] = await Promise.all(["source", "target"].map(
      (side) => sentencePiece(new URL(files[side], modelUrl), `the ${side} tokenizer`)));
    return new PairTokenizer(source, target, vocabulary, manifest.target_sentencepiece_ids,
                             manifest.special_ids.unk);
  }

  encode(text) {
    const tag = text.match(LANGUAGE_TOKEN);
    const pieces = this.source.encodePieces(tag ? text.slice(tag[0].length) : text);
    return [...(tag ? [tag[1]] : []), ...pieces]
      .map((piece) => this.sourceIds.get(piece) ?? this.unk);
  }

  decode(ids) {
    return this.target.decodeIds(Int32Array.from(
      ids.filter((id) => this.text[id] ?? true), (id) => this.targetIds[id]));
  }

  sourcePiece(id) {
    return this.sourcePieces[id];
  }

  targetPiece(id) {
    return this.targetPieces[id];
  }
}

// The `target_tokens` input of a search forced to start with the token `forced` ("target"
// placement: `placedTokens`), none for null.
function forcedInput(forced) {
  return forced === null ? {} : {target_tokens: new Tensor(Int32Array.of(forced), [1])};
}

export class BrowserTranslator {
  constructor(manifest, model, tokenizer) {
    this.manifest = manifest;
    this.model = model;
    this.tokenizer = tokenizer;
  }

  // The target languages a model of several translates into (their names), [] for one.
  get languages() {
    return Object.keys(this.manifest.languages?.tokens ?? {}).sort();
  }

  // Whether the model reads the source's language too, one of `languages` (NLLB-200,
  // M2M-100: its token first in the source).
  get readsSource() {
    return Boolean(this.manifest.languages?.source_language_token);
  }

  // Whether a text may be translated without a language, as it is (an imported multi-target
  // model, whose texts may start with their own token): the language "".
  get languageOptional() {
    return Boolean(this.manifest.languages?.optional);
  }

  // The export folder at `modelUrl` (ending in '/'), LiteRT.js's WebAssembly files at
  // `wasmUrl`; `progress(text)` hears each step.
  static async load(modelUrl, wasmUrl, progress = () => {}) {
    progress("reading the manifest");
    const manifest = await json(new URL(MANIFEST_FILE, modelUrl), "the manifest");
    if (manifest.format !== "litert") {
      throw new Error(`${new URL(MANIFEST_FILE, modelUrl)}: not a LiteRT export's manifest`);
    }
    if (!manifest.source_length) {
      throw new Error(`${modelUrl}: an export of sources of any length, whose shapes ` +
                      "LiteRT.js cannot take: export it with kt-export --format litert " +
                      "--source-length PIECES");
    }
    progress("loading the tokenizer");
    const tokenizer = await (manifest.tokenizer === TOKENIZER_FILE ? SharedTokenizer
                             : PairTokenizer).load(manifest, modelUrl);
    progress("loading the LiteRT runtime");
    await loadedLiteRt(wasmUrl);
    progress("loading the model");
    const modelFile = new URL(LITERT_FILE, modelUrl);
    const model = await named(modelFile, "the model", async () => loadAndCompile(
      new Uint8Array(await (await fetched(modelFile)).arrayBuffer()), {accelerator: "wasm"}));
    progress("ready");
    return new BrowserTranslator(manifest, model, tokenizer);
  }

  // Where the tokens of `language` (the target: "" for a model of one, or as the text says
  // where `languageOptional`) and `source` (the source's, where `readsSource`) go
  // (`placedTokens`).
  placed(language, source) {
    return placedTokens(this.manifest, language, this.readsSource ? source : null);
  }

  // Whether each text is longer than the model takes (into `language`, from `source`): pieces
  // would be cut.
  tooLong(texts, language = "", source = null) {
    const placed = this.placed(language, source);
    return texts.map(
      (text) => sourceIds(this.tokenizer.encode(text), this.manifest, placed).cut > 0);
  }

  // Whether the export gives word alignments (its `alignment` signature): markup needs them.
  get aligns() {
    return (this.manifest.signatures ?? []).includes("alignment");
  }

  // The translation of one line of text into `language` from `source` (as `placed` takes
  // them) and how many of its source pieces the model could not read: {text, score, cut};
  // the language token forced first (`placedTokens`) left out of it; with `aligned`,
  // also `alignment`: for each word of the translation, the word of `text` it is aligned to
  // (-1: none; null: not known), as kt-translate's document layer reads it of the export's
  // `alignment` signature (documents/translators.py). A blank line (`isBlank`) is its own
  // translation.
  async translate(text, language = "", aligned = false, source = null) {
    const placed = this.placed(language, source);
    if (isBlank(text)) return {text, score: 0, cut: 0, alignment: null};
    const {ids, length, cut} = sourceIds(this.tokenizer.encode(text), this.manifest, placed);
    if (length === 1) return {text: "", score: 0, cut, alignment: null};  // nothing but EOS
    const {best, score} = await this.search(ids, placed.forced);
    const kept = translationIds(best, this.manifest.special_ids);
    const translation = kept.length ? this.tokenizer.decode(kept) : "";
    if (!aligned) return {text: translation, score, cut};
    const pad = this.manifest.special_ids.pad;
    const target = best.filter((id) => id !== pad).map((id) => this.tokenizer.targetPiece(id));
    const read = Array.from(ids.slice(0, length), (id) => this.tokenizer.sourcePiece(id));
    const pieces = await this.align(ids, best, placed.forced);
    return {text: translation, score, cut, alignment: wordAlignment(
      target, read, pieces, splitWords(translation).length, splitWords(text).length)};
  }

  // The `alignment` signature's source position of each piece of `best` (a search's ids of
  // the source `ids`, `forced` the token it was forced to start with: null for none); the
  // tensors in and out freed whatever happens.
  async align(ids, best, forced = null) {
    if (!this.aligns) {
      throw new Error("this export gives no word alignment to place markup by (exported " +
                      "before its alignment signature): export it again, or translate as text");
    }
    const inputs = {source_ids: new Tensor(ids, [1, ids.length]),
                    target_ids: new Tensor(Int32Array.from(best), [1, best.length]),
                    ...forcedInput(forced)};
    let outputs;
    try {
      outputs = await this.model.run("alignment", inputs);
    } finally {
      for (const tensor of Object.values(inputs)) tensor.delete();
    }
    try {
      return Array.from(outputs.alignment.toTypedArray());
    } finally {
      for (const tensor of Object.values(outputs)) tensor.delete();
    }
  }

  // The `beam` signature's best hypothesis (its ids) and score for one row of source ids,
  // `forced` the token the translation is forced to start with (null: none); the tensors in
  // and out freed whatever happens.
  async search(ids, forced = null) {
    const inputs = {source_ids: new Tensor(ids, [1, ids.length]), ...forcedInput(forced)};
    let outputs;
    try {
      outputs = await this.model.run("beam", inputs);
    } finally {
      for (const tensor of Object.values(inputs)) tensor.delete();
    }
    try {
      const [, , width] = outputs.ids.type.layout.dimensions;
      return {best: Array.from(outputs.ids.toTypedArray().slice(0, width)),
              score: outputs.scores.toTypedArray()[0]};
    } finally {
      for (const tensor of Object.values(outputs)) tensor.delete();
    }
  }
}
