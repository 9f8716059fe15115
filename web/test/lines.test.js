// The page's pure functions (lines.js) under Node.js's own test runner: `node --test web/test/`.
// Properties over random inputs of a seeded generator; whether `isBlank` is Python's
// `str.isspace` over every code point is tests/test_web_page.py's (Python against the page).
import assert from "node:assert/strict";
import {test} from "node:test";

import {isBlank, sourceIds, translationIds} from "../lines.js";

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

// A manifest of a random vocabulary: its four special ids and two language tokens anywhere.
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
    languages: {tokens: {de: {id: first}, fr: {id: second}}},
  };
}

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
    const {ids, length, cut} = sourceIds(pieces, manifest, null);
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
    assert.deepEqual(sourceIds(noisy, manifest, token), sourceIds(withUnk, manifest, token));
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
    const {ids, length, cut} = sourceIds(pieces, manifest, token);
    assert.equal(ids[0], token);
    assert.deepEqual([...ids.slice(1, length - 1)], pieces.slice(0, room - 1));
    assert.equal(cut, Math.max(0, pieces.length + 1 - room));
    // a text's own token, either language's, is replaced: the ids are those of the text without
    assert.deepEqual(sourceIds([random.choice([token, other]), ...pieces], manifest, token),
                     sourceIds(pieces, manifest, token));
    // without a language asked for, a text's own token is read as it is
    assert.equal(sourceIds([other, ...pieces], manifest, null).ids[0], other);
  }
});

test("sourceIds of an empty source is EOS alone, without the language's token", () => {
  const random = generator(4);
  for (let trial = 0; trial < 50; trial++) {
    const manifest = randomManifest(random);
    const {pad, bos, eos} = manifest.special_ids;
    const onlySpecial = Array.from({length: random.integer(0, 4)},
                                   () => random.choice([pad, bos, eos]));
    const result = sourceIds(onlySpecial, manifest, random.choice(tokenIds(manifest)));
    assert.equal(result.length, 1);
    assert.equal(result.cut, 0);
    assert.deepEqual([...result.ids], [eos, ...Array(manifest.source_length - 1).fill(pad)]);
  }
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
