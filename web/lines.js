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

// The model's code `language` names, as `RunLanguages.code` reads it: itself, or the one
// code of `codes` it starts (an ISO 639-3 code before a script: `eng` for `eng_Latn`); an
// error naming the codes it could mean when there are several; `language` itself when it
// names none (`placedTokens` refuses it).
export function modelCode(codes, language) {
  if (codes.includes(language)) return language;
  const meant = codes.filter((code) => code.startsWith(`${language}_`)).sort();
  if (meant.length > 1) {
    throw new Error(`language '${language}' is ambiguous: the model has ${meant.join(", ")}`);
  }
  return meant[0] ?? language;
}

// Where the tokens of the languages asked for go, as kt-translate places them
// (`RunLanguages`, `litert_functions`): `first`, the id the source starts with (null: none),
// `replaces`, whether it takes the place of a language token the text starts with, and
// `forced`, the id forced first in the translation and left out of it (null: none). With the
// "source" placement (a run of `kt-train --pair`, an imported multi-target Marian model) the
// `target` language's token is first in the source, in place of the text's own (none for ""
// where the language is optional: the text as it is); with the "target" placement (NLLB-200,
// M2M-100) it is forced, and a model that reads the `source` language
// (`source_language_token`) has that one's token first in the source, before the text as it
// is. A model of one target language places none. An error names a language the model lacks,
// with the model's.
export function placedTokens(manifest, target = "", source = null) {
  const languages = manifest.languages;
  const none = {first: null, replaces: false, forced: null};
  if (!languages) return none;
  const codes = Object.keys(languages.tokens).sort();
  const id = (language, side, direction) => {
    const entry = languages.tokens[language];
    if (!entry) {
      throw new Error(`${side} language '${language ?? ""}': the model translates ` +
                      `${direction} ${codes.join(", ")} only`);
    }
    return entry.id;
  };
  if (languages.placement === "source") {
    return target === "" && languages.optional ? none
      : {first: id(target, "target", "into"), replaces: true, forced: null};
  }
  return {first: languages.source_language_token ? id(source, "source", "from") : null,
          replaces: false, forced: id(target, "target", "into")};
}

// The ids a model reads of a source's pieces, as `model_input_ids` and `litert_functions`
// give them: ids the model lacks as UNK, no PAD/BOS/EOS, the token `placed.first` first (but
// none, an empty source; in place of a language token the text starts with where
// `placed.replaces`: `placedTokens`), at most `source_length - 1` ids (`cut` counts what did
// not fit), EOS, then PAD up to `source_length` (`length`: the ids before the padding).
export function sourceIds(pieces, manifest, placed) {
  const special = manifest.special_ids;
  let ids = pieces
    .map((id) => (id < 0 || id >= manifest.vocab_size ? special.unk : id))
    .filter((id) => id !== special.pad && id !== special.bos && id !== special.eos);
  if (placed.first !== null && ids.length) {
    const own = placed.replaces
      && Object.values(manifest.languages.tokens).some((entry) => entry.id === ids[0]);
    ids = [placed.first, ...ids.slice(own ? 1 : 0)];
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
