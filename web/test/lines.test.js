// The page's pure functions (lines.js) under Node.js's own test runner: `node --test web/test/`.
// Properties over random inputs of a seeded generator; whether `isBlank` is Python's
// `str.isspace` over every code point is tests/system/test_web_page.py's (Python against the page).
import assert from "node:assert/strict";
import {test} from "node:test";

import {isBlank, modelCode, placedTokens, sourceIds, translationIds} from "../lines.js";

// A seeded generator (mulberry32): each test draws from its own.
function generator(seed) {
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let value = Math.imul(state ^ (state >>> 15), 1 | state);
    value ^= value + Math.imul(value ^ (value >>> 7), 61 | value);
    return ((value ^ (value >>> 14)) >>> 0) / 2 ** 32;
  };
  return {
    integer: (low, high) => low + Math.floor(next() * (high - low + 1)),  // both ends included
    choice: (items) => items[Math.floor(next() * items.length)],
  };
}

// A manifest of a random vocabulary: its four special ids and two language tokens anywhere,
// placed first in the source.
function randomManifest(random) {
  const vocabSize = random.integer(12, 40);
  const ids = Array.from({length: vocabSize}, (_, id) => id);
  for (let index = ids.length - 1; index > 0; index--) {
    const other = random.integer(0, index);
    [ids[index], ids[other]] = [ids[other], ids[index]];
  }
  const [pad, unk, bos, eos, first, second] = ids;
  return {
    vocab_size: vocabSize,
    source_length: random.integer(2, 10),
    special_ids: {pad, unk, bos, eos},
    languages: {placement: "source", tokens: {de: {id: first}, fr: {id: second}}},
  };
}

// What `placedTokens` gives: no token, or `token` first in the source, in place of the
// text's own where `replaces`.
const NONE = {first: null, replaces: false, forced: null};
const first = (token, replaces = true) => (token === null ? NONE
  : {first: token, replaces, forced: null});

const specials = (manifest) => Object.values(manifest.special_ids);
const tokenIds = (manifest) => Object.values(manifest.languages.tokens).map((entry) => entry.id);

// Ids a model reads as they are: no special id, no language token, none out of range.
function plainIds(random, manifest, length) {
  const excluded = new Set([...specials(manifest), ...tokenIds(manifest)]);
  const plain = Array.from({length: manifest.vocab_size}, (_, id) => id)
    .filter((id) => !excluded.has(id));
  return Array.from({length}, () => random.choice(plain));
}

// `ids` with `extra` ids put in at random places, in order.
function withInserted(random, ids, extra) {
  const result = [...ids];
  for (const id of extra) result.splice(random.integer(0, result.length), 0, id);
  return result;
}

test("sourceIds keeps plain ids in order up to the source length, then EOS, then PAD", () => {
  const random = generator(1);
  for (let trial = 0; trial < 300; trial++) {
    const manifest = randomManifest(random);
    const {eos, pad} = manifest.special_ids;
    const room = manifest.source_length - 1;
    const pieces = plainIds(random, manifest, random.integer(0, 14));
    const {ids, length, cut} = sourceIds(pieces, manifest, NONE);
    assert.ok(ids instanceof Int32Array);
    assert.equal(ids.length, manifest.source_length);
    assert.equal(length, Math.min(pieces.length, room) + 1);
    assert.deepEqual([...ids.slice(0, length - 1)], pieces.slice(0, room));
    assert.equal(ids[length - 1], eos);
    assert.ok(ids.slice(length).every((id) => id === pad));
    assert.equal(cut, Math.max(0, pieces.length - room));
  }
});

test("sourceIds drops PAD, BOS and EOS and reads ids out of the vocabulary as UNK", () => {
  const random = generator(2);
  for (let trial = 0; trial < 300; trial++) {
    const manifest = randomManifest(random);
    const {pad, bos, eos, unk} = manifest.special_ids;
    const plain = plainIds(random, manifest, random.integer(0, 14));
    const outside = [-1 - random.integer(0, 5), manifest.vocab_size + random.integer(0, 5)];
    const positions = plain.map((_, index) => index).filter(() => random.integer(0, 3) === 0);
    const withOutside = plain.map((id, index) => (positions.includes(index)
      ? random.choice(outside) : id));
    const withUnk = plain.map((id, index) => (positions.includes(index) ? unk : id));
    const noisy = withInserted(random, withOutside,
                               Array.from({length: random.integer(1, 5)},
                                          () => random.choice([pad, bos, eos])));
    const token = random.choice([null, ...tokenIds(manifest)]);
    const placed = first(token, random.integer(0, 1) === 1);
    assert.deepEqual(sourceIds(noisy, manifest, placed), sourceIds(withUnk, manifest, placed));
  }
});

test("sourceIds puts the language's token first, in place of one the text starts with", () => {
  const random = generator(3);
  for (let trial = 0; trial < 300; trial++) {
    const manifest = randomManifest(random);
    const room = manifest.source_length - 1;
    const [token, other] = random.integer(0, 1) ? tokenIds(manifest)
      : tokenIds(manifest).reverse();
    const pieces = plainIds(random, manifest, random.integer(1, 14));
    const {ids, length, cut} = sourceIds(pieces, manifest, first(token));
    assert.equal(ids[0], token);
    assert.deepEqual([...ids.slice(1, length - 1)], pieces.slice(0, room - 1));
    assert.equal(cut, Math.max(0, pieces.length + 1 - room));
    // a text's own token, either language's, is replaced: the ids are those of the text without
    assert.deepEqual(sourceIds([random.choice([token, other]), ...pieces], manifest, first(token)),
                     sourceIds(pieces, manifest, first(token)));
    // without a language asked for, a text's own token is read as it is
    assert.equal(sourceIds([other, ...pieces], manifest, NONE).ids[0], other);
    // a token that replaces none (a source language's) comes before the text's own
    const kept = sourceIds([other, ...pieces], manifest, first(token, false));
    assert.deepEqual([...kept.ids.slice(0, kept.length - 1)],
                     [token, other, ...pieces].slice(0, room));
    assert.equal(kept.cut, Math.max(0, pieces.length + 2 - room));
  }
});

test("sourceIds of an empty source is EOS alone, without the language's token", () => {
  const random = generator(4);
  for (let trial = 0; trial < 50; trial++) {
    const manifest = randomManifest(random);
    const {pad, bos, eos} = manifest.special_ids;
    const onlySpecial = Array.from({length: random.integer(0, 4)},
                                   () => random.choice([pad, bos, eos]));
    const result = sourceIds(onlySpecial, manifest,
                             first(random.choice(tokenIds(manifest)), random.integer(0, 1) === 1));
    assert.equal(result.length, 1);
    assert.equal(result.cut, 0);
    assert.deepEqual([...result.ids], [eos, ...Array(manifest.source_length - 1).fill(pad)]);
  }
});

// A manifest's languages of the "target" placement (NLLB-200, M2M-100) over `codes`, their
// ids from 100, the source language's token read where `readsSource`.
function forcedManifest(codes, readsSource) {
  return {languages: {placement: "target", optional: false, source_language_token: readsSource,
                      tokens: Object.fromEntries(codes.map((code, index) => [
                        code, {id: 100 + index, piece: code}]))}};
}

test("placedTokens puts the target's token first in the source with the source placement", () => {
  const random = generator(7);
  for (let trial = 0; trial < 50; trial++) {
    const manifest = randomManifest(random);
    const [de, fr] = tokenIds(manifest);
    assert.deepEqual(placedTokens(manifest, "de"), first(de));
    assert.deepEqual(placedTokens(manifest, "fr", null), first(fr));
    // "" asks for none where the language is optional (the text as it is), else is refused
    assert.throws(() => placedTokens(manifest, ""),
                  /^Error: target language '': the model translates into de, fr only$/);
    assert.deepEqual(placedTokens({...manifest, languages: {...manifest.languages, optional: true}},
                                  ""), NONE);
    assert.throws(() => placedTokens(manifest, "it"), /target language 'it': .* into de, fr only/);
  }
  assert.deepEqual(placedTokens({special_ids: {}}, ""), NONE);  // a model of one language
});

test("placedTokens forces the target's token and puts the source's first, where read", () => {
  const codes = ["deu_Latn", "eng_Latn", "fra_Latn"];
  for (const [target, source] of [["fra_Latn", "eng_Latn"], ["eng_Latn", "deu_Latn"],
                                  ["deu_Latn", "deu_Latn"]]) {
    const ids = (code) => 100 + codes.indexOf(code);
    assert.deepEqual(placedTokens(forcedManifest(codes, true), target, source),
                     {first: ids(source), replaces: false, forced: ids(target)});
    // a model that reads no source language places the target's only
    assert.deepEqual(placedTokens(forcedManifest(codes, false), target, source),
                     {first: null, replaces: false, forced: ids(target)});
  }
  const manifest = forcedManifest(codes, true);
  assert.throws(() => placedTokens(manifest, "fra_Latn", null), new RegExp(
    "^Error: source language '': the model translates from deu_Latn, eng_Latn, fra_Latn only$"));
  assert.throws(() => placedTokens(manifest, "fra_Latn", "ita_Latn"),
                /source language 'ita_Latn'/);
  assert.throws(() => placedTokens(manifest, "", "eng_Latn"),
                /target language '': .* into deu_Latn/);
});

test("sourceIds of the target placement: the source's token before the text, as it is", () => {
  const codes = ["deu_Latn", "eng_Latn", "fra_Latn"];
  const manifest = {...forcedManifest(codes, true), vocab_size: 110, source_length: 6,
                    special_ids: {pad: 0, unk: 1, bos: 2, eos: 3}};
  const placed = placedTokens(manifest, "fra_Latn", "eng_Latn");
  // the forced token is no source id; a text's own language token stays where it is
  assert.deepEqual([...sourceIds([7, 8], manifest, placed).ids], [101, 7, 8, 3, 0, 0]);
  assert.deepEqual([...sourceIds([102, 7], manifest, placed).ids], [101, 102, 7, 3, 0, 0]);
  assert.deepEqual(sourceIds([7, 8, 9, 10, 11], manifest, placed),
                   {ids: Int32Array.of(101, 7, 8, 9, 10, 3), length: 6, cut: 1});
  assert.deepEqual(sourceIds([], manifest, placed).length, 1);
});

test("modelCode reads a code as itself, or as the one code it starts", () => {
  const codes = ["eng_Latn", "fra_Latn", "zho_Hans", "zho_Hant"];
  assert.equal(modelCode(codes, "fra_Latn"), "fra_Latn");
  assert.equal(modelCode(codes, "eng"), "eng_Latn");
  assert.equal(modelCode(codes, "deu"), "deu");  // none: as it is, for placedTokens to refuse
  assert.equal(modelCode(["en", "fr"], "fr"), "fr");
  assert.throws(() => modelCode(codes, "zho"),
                /^Error: language 'zho' is ambiguous: the model has zho_Hans, zho_Hant$/);
});

test("translationIds holds the ids before the first EOS, without PAD and BOS", () => {
  const random = generator(5);
  for (let trial = 0; trial < 300; trial++) {
    const manifest = randomManifest(random);
    const special = manifest.special_ids;
    const plain = plainIds(random, manifest, random.integer(0, 12));
    assert.deepEqual(translationIds(plain, special), plain);
    const padded = withInserted(random, plain,
                                Array.from({length: random.integer(0, 4)},
                                           () => random.choice([special.pad, special.bos])));
    const after = [special.eos, ...Array.from({length: random.integer(0, 6)},
                                                () => random.integer(0, manifest.vocab_size - 1))];
    assert.deepEqual(translationIds(padded, special), plain);
    assert.deepEqual(translationIds([...padded, ...after], special), plain);
  }
});

// What JavaScript's `\s` takes and Python's `str.isspace` does not, and the other way round.
const ONLY_JAVASCRIPT = new Set(["\ufeff"]);
const ONLY_PYTHON = new Set(["\x1c", "\x1d", "\x1e", "\x1f", "\x85"]);

test("isBlank takes each whitespace character Python takes, and no other", () => {
  for (let code = 0; code <= 0x10ffff; code++) {
    if (code >= 0xd800 && code <= 0xdfff) continue;  // surrogates: no character alone
    const character = String.fromCodePoint(code);
    const python = ONLY_PYTHON.has(character)
      || (/^\s$/u.test(character) && !ONLY_JAVASCRIPT.has(character));
    assert.equal(isBlank(character), python, `U+${code.toString(16).padStart(4, "0")}`);
  }
});

test("isBlank: an empty line or whitespace alone, not a line with anything else", () => {
  const random = generator(6);
  const spaces = [" ", "\t", "\u00a0", "\u3000", "\u2009", "\x0b", "\x85", "\u2028"];
  const others = ["a", "ä", ".", "\u200b", "\ufeff", "\u00ad", "語", "😀", ">>fra<<"];
  assert.equal(isBlank(""), true);
  for (let trial = 0; trial < 300; trial++) {
    const blank = Array.from({length: random.integer(1, 8)}, () => random.choice(spaces));
    assert.equal(isBlank(blank.join("")), true, JSON.stringify(blank.join("")));
    const line = withInserted(random, blank, [random.choice(others)]).join("");
    assert.equal(isBlank(line), false, JSON.stringify(line));
  }
});
