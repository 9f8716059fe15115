// A LiteRT export (`kt-export --format litert`) translating in the browser as kt-translate
// translates with it: its SentencePiece model (the C++ library compiled to WebAssembly, by
// sentencepiece-js) gives the source's ids, the model's `beam` signature (LiteRT.js, its
// WebAssembly CPU kernels) the translation's, the SentencePiece model its text.
import {loadLiteRt, loadAndCompile, Tensor} from "@litertjs/core";
import {SentencePieceProcessor} from "@sctg/sentencepiece-js";

export const MANIFEST_FILE = "keras_transformer_litert.json";
export const LITERT_FILE = "model.tflite";
const TOKENIZER_FILE = "spm.model";

async function fetched(url, what) {
  const response = await fetch(url);
  if (!response.ok) {
    throw new Error(`${url}: ${response.status} ${response.statusText} (${what})`);
  }
  return response;
}

// The ids a model reads of a source's pieces, as `model_input_ids` and `litert_functions`
// give them: ids the model lacks as UNK, no PAD/BOS/EOS, the language's token first (but
// none, an empty source), at most `source_length - 1` ids (`cut` counts what did not fit),
// EOS, then PAD up to `source_length` (`length`: the ids before the padding).
export function sourceIds(pieces, manifest, token) {
  const special = manifest.special_ids;
  let ids = pieces
    .map((id) => (id < 0 || id >= manifest.vocab_size ? special.unk : id))
    .filter((id) => id !== special.pad && id !== special.bos && id !== special.eos);
  if (token !== null && ids.length) ids = [token, ...ids];
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
    if (manifest.tokenizer !== TOKENIZER_FILE) {
      throw new Error(`${modelUrl}: this page reads exports of one SentencePiece model ` +
                      `(${TOKENIZER_FILE}); this one has ${manifest.tokenizer ?? "another"}`);
    }
    progress("loading the tokenizer");
    const bytes = await (await fetched(new URL(manifest.tokenizer, modelUrl), "the tokenizer"))
      .arrayBuffer();
    const tokenizer = new SentencePieceProcessor();
    // sentencepiece-js reads a model from a file path or base64 text; a page has bytes
    await tokenizer._loadModel(new Uint8Array(bytes));
    progress("loading the LiteRT runtime");
    await loadLiteRt(wasmUrl);
    progress("loading the model");
    const model = await loadAndCompile(new URL(LITERT_FILE, modelUrl).href, {accelerator: "wasm"});
    progress("ready");
    return new Translator(manifest, model, tokenizer);
  }

  // The translation of one line of text into `language` ("" for a model of one) and how many
  // of its source pieces the model could not read: {text, score, cut}.
  async translate(text, language = "") {
    let token = null;
    if (this.languages.length) {
      const entry = this.manifest.languages.tokens[language];
      if (!entry) {
        throw new Error(`target language '${language}': the model translates into ` +
                        `${this.languages.join(", ")} only`);
      }
      token = entry.id;
    }
    const {ids, length, cut} = sourceIds(this.tokenizer.encodeIds(text), this.manifest, token);
    if (length === 1) return {text: "", score: 0, cut};  // nothing but EOS
    const input = new Tensor(ids, [1, ids.length]);
    const outputs = await this.model.run("beam", {source_ids: input});
    input.delete();
    const [, , width] = outputs.ids.type.layout.dimensions;
    const best = Array.from(outputs.ids.toTypedArray().slice(0, width));
    const score = outputs.scores.toTypedArray()[0];
    for (const tensor of Object.values(outputs)) tensor.delete();
    const kept = translationIds(best, this.manifest.special_ids);
    return {text: kept.length ? this.tokenizer.decodeIds(kept) : "", score, cut};
  }
}
