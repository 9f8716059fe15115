// The page's HTML and Markdown (web/markup.js, web/inline.js through documents.js) against the
// Python document layer's on the same inputs: web/test/document-cases.json (document_cases.py:
// documents of random inline markup, nested and split by the translation, their sentences'
// translations and word alignments recorded), byte for byte; and word alignments made of
// subword alignments as documents/translators.py makes them.
import assert from "node:assert/strict";
import {readFileSync} from "node:fs";
import {test} from "node:test";

import {planDocument, rendered} from "../documents.js";
import {wordAlignment} from "../inline.js";

const cases = JSON.parse(readFileSync(new URL("document-cases.json", import.meta.url), "utf8"));
const tooLong = (limit) => (texts) => texts.map((text) => Array.from(text).length > limit);

for (const format of ["html", "markdown"]) {
  test(`${format}: sentences, splits and output are the Python document layer's`, () => {
    const found = cases.markup.filter((item) => item.format === format);
    assert.ok(found.length > 20 && found.some((item) => item.splits.length));
    for (const {document, limit, segments, sentences, translations, text, splits} of found) {
      const segment = (line) => {
        assert.ok(line in segments, `Python's segmenter was not asked for ${JSON.stringify(line)}`);
        return segments[line];
      };
      const plan = planDocument(document, format, {segment, tooLong: tooLong(limit)});
      assert.deepEqual(plan.sentences.map((sentence) => sentence.text), sentences, document);
      assert.deepEqual(plan.splits.map((split) => [split.line, split.parts]), splits, document);
      assert.equal(rendered(plan, translations, format), text, document);
    }
  });
}

test("a markup document is shown block by block as its sentences arrive", () => {
  const {document, limit, segments, translations, text} = cases.markup.find(
    (item) => item.format === "html" && item.translations.length > 3);
  const plan = planDocument(document, "html", {segment: (line) => segments[line],
                                               tooLong: tooLong(limit)});
  const shown = translations.map((_, count) => rendered(plan, translations.slice(0, count), "html"));
  assert.ok(shown.every((part, index) => text.startsWith(part) &&
                        (index === 0 || part.length >= shown[index - 1].length)));
  assert.equal(rendered(plan, translations, "html"), text);
});

test("word alignments of subword alignments are translators.py's", () => {
  assert.ok(cases.alignments.some((item) => item.words === null));
  assert.ok(cases.alignments.some((item) => item.words?.some((word) => word >= 0)));
  for (const {target, source, alignment, target_words, source_words, words} of cases.alignments) {
    assert.deepEqual(wordAlignment(target, source, alignment, target_words, source_words), words,
                     JSON.stringify({target, source, alignment}));
  }
});
