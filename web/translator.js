// A LiteRT export (`kt-export --format litert`) translating in the browser as kt-translate
// translates with it: its SentencePiece model(s) (the C++ library compiled to WebAssembly, by
// sentencepiece-js) give the source's ids, the model's `beam` signature (LiteRT.js, its
// WebAssembly CPU kernels) the translation's, the SentencePiece model their text.
import {loadLiteRt, loadAndCompile, Tensor} from "@litertjs/core";
import {SentencePieceProcessor} from "@sctg/sentencepiece-js";

export const MANIFEST_FILE = "keras_transformer_litert.json";
export const LITERT_FILE = "model.tflite";
const TOKENIZER_FILE = "spm.model";
// A leading target-language token of an imported model's text (`>>fra<<`) and the whitespace
// after it, as `SentencePiecePair.tokenize` reads it.
const LANGUAGE_TOKEN = /^(>>[^<>\t\n\f\r ]+<<)[\t\n\f\r ]*/;

async function fetched(url, what) {
  const response = await fetch(url);
  if (!response.ok) {
    throw new Error(`${url}: ${response.status} ${response.statusText} (${what})`);
  }
  return response;
}

async function sentencePiece(url, what) {
  const bytes = await (await fetched(url, what)).arrayBuffer();
  const processor = new SentencePieceProcessor();
  // sentencepiece-js reads a model from a file path or base64 text; a page has bytes
  await processor._loadModel(new Uint8Array(bytes));
  return processor;
}

// The tokenizer of a model trained here: one SentencePiece model whose ids are the model's.
class SharedTokenizer {
  constructor(processor) {
    this.processor = processor;
  }

  static async load(manifest, modelUrl) {
    return new SharedTokenizer(await sentencePiece(new URL(manifest.tokenizer, modelUrl),
                                                   "the tokenizer"));
  }

  encode(text) {
    return this.processor.encodeIds(text);
  }

  decode(ids) {
    return this.processor.decodeIds(Int32Array.from(ids));
  }
}

// The tokenizer of an imported model (`SentencePiecePair`): source pieces mapped to the
// model's ids through the vocabulary's source list (a leading `>>xx<<` token read whole),
// the model's target ids to the target model's by the manifest's `target_sentencepiece_ids`.
class PairTokenizer {
  constructor(source, target, sourcePieces, targetIds, unk) {
    this.source = source;
    this.target = target;
    this.sourceIds = new Map(sourcePieces.map((piece, id) => [piece, id]));
    this.targetIds = targetIds;
    this.unk = unk;
  }

  static async load(manifest, modelUrl) {
    const files = manifest.tokenizer;
    const vocabulary = await (await fetched(new URL(files.vocabulary, modelUrl),
                                            "the vocabulary")).json();
    const [source, target] = await Promise.all(["source", "target"].map(
      (side) => sentencePiece(new URL(files[side], modelUrl), `the ${side} tokenizer`)));
    return new PairTokenizer(source, target, vocabulary.source,
                             manifest.target_sentencepiece_ids, manifest.special_ids.unk);
  }

  encode(text) {
    const tag = text.match(LANGUAGE_TOKEN);
    const pieces = this.source.encodePieces(tag ? text.slice(tag[0].length) : text);
    return [...(tag ? [tag[1]] : []), ...pieces]
      .map((piece) => this.sourceIds.get(piece) ?? this.unk);
  }

  decode(ids) {
    return this.target.decodeIds(Int32Array.from(ids, (id) => this.targetIds[id]));
  }
}

// The ids a model reads of a source's pieces, as `model_input_ids` and `litert_functions`
// give them: ids the model lacks as UNK, no PAD/BOS/EOS, the language's token first (but
// none, an empty source), at most `source_length - 1` ids (`cut` counts what did not fit),
// EOS, then PAD up to `source_length` (`length`: the ids before the padding). The language's
// token takes the place of one the text starts with.
export function sourceIds(pieces, manifest, token) {
  const special = manifest.special_ids;
  let ids = pieces
    .map((id) => (id < 0 || id >= manifest.vocab_size ? special.unk : id))
    .filter((id) => id !== special.pad && id !== special.bos && id !== special.eos);
  if (token !== null && ids.length) {
    const own = Object.values(manifest.languages.tokens).some((entry) => entry.id === ids[0]);
    ids = [token, ...ids.slice(own ? 1 : 0)];
  }
  const room = manifest.source_length - 1;
  const kept = [...ids.slice(0, room), special.eos];
  const padded = Int32Array.from({length: manifest.source_length},
                                 (_, index) => kept[index] ?? special.pad);
  return {ids: padded, length: kept.length, cut: Math.max(0, ids.length - room)};
}

// The ids of a translation that its text holds: up to its first EOS, without PAD and BOS.
export function translationIds(ids, special) {
  const end = ids.indexOf(special.eos);
  return (end < 0 ? ids : ids.slice(0, end))
    .filter((id) => id !== special.pad && id !== special.bos);
}

export class Translator {
  constructor(manifest, model, tokenizer) {
    this.manifest = manifest;
    this.model = model;
    this.tokenizer = tokenizer;
  }

  // The target languages a model of several translates into (their names), [] for one.
  get languages() {
    return Object.keys(this.manifest.languages?.tokens ?? {}).sort();
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
    const manifest = await (await fetched(new URL(MANIFEST_FILE, modelUrl), "the manifest")).json();
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
    await loadLiteRt(wasmUrl);
    progress("loading the model");
    const model = await loadAndCompile(new URL(LITERT_FILE, modelUrl).href, {accelerator: "wasm"});
    progress("ready");
    return new Translator(manifest, model, tokenizer);
  }

  // The translation of one line of text into `language` ("" for a model of one, or as the
  // text says where `languageOptional`) and how many of its source pieces the model could not
  // read: {text, score, cut}.
  async translate(text, language = "") {
    let token = null;
    if (this.languages.length && !(language === "" && this.languageOptional)) {
      const entry = this.manifest.languages.tokens[language];
      if (!entry) {
        throw new Error(`target language '${language}': the model translates into ` +
                        `${this.languages.join(", ")} only`);
      }
      token = entry.id;
    }
    const {ids, length, cut} = sourceIds(this.tokenizer.encode(text), this.manifest, token);
    if (length === 1) return {text: "", score: 0, cut};  // nothing but EOS
    const input = new Tensor(ids, [1, ids.length]);
    const outputs = await this.model.run("beam", {source_ids: input});
    input.delete();
    const [, , width] = outputs.ids.type.layout.dimensions;
    const best = Array.from(outputs.ids.toTypedArray().slice(0, width));
    const score = outputs.scores.toTypedArray()[0];
    for (const tensor of Object.values(outputs)) tensor.delete();
    const kept = translationIds(best, this.manifest.special_ids);
    return {text: kept.length ? this.tokenizer.decode(kept) : "", score, cut};
  }
}
