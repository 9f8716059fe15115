// A line's way through a LiteRT export, as kt-translate takes it: whether it is translated at
// all, the ids the model reads of its pieces, and the ids of the model's output that its
// translation's text holds. Pure functions, no browser and no model: the page's modes and the
// unit tests (web/test/) share them.

// The characters Python's `str.isspace` takes for whitespace (JavaScript's `\s` differs: it
// takes U+FEFF, leaves U+001C-U+001F and U+0085), as a character class.
export const SPACE = String.raw`[\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029` +
  String.raw`\u202f\u205f\u3000]`;
const BLANK = new RegExp(`^${SPACE}*$`);

// Whether a line holds nothing to translate (no character, or whitespace only): such a line
// is its own translation, as it is, never sent to the model (which would invent text).
export function isBlank(line) {
  return BLANK.test(line);
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
