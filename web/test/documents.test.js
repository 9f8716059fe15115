// The page's document plan (documents.js) against the Python document layer's on the same
// inputs: web/test/document-cases.json, written by document_cases.py (Python's sentences,
// parts and translated documents, with the segmenter's answers recorded);
// tests/system/test_web_page.py checks the file is what Python gives now.
import assert from "node:assert/strict";
import {readFileSync} from "node:fs";
import {test} from "node:test";

import {fittedSpans, planDocument, rendered, splitLines, translatable, words}
  from "../documents.js";

const cases = JSON.parse(readFileSync(new URL("document-cases.json", import.meta.url), "utf8"));

// A sentence is too long past `limit` code points (as Python's `len`).
const tooLong = (limit) => (texts) => texts.map((text) => Array.from(text).length > limit);
// The test's translator of document_cases.py: the words turned around, spaced oddly.
const translation = (text) => " " + text.split(" ").reverse().join(" \t ") + "\n";

test("fittedSpans splits a span where Python's fitted_spans does", () => {
  assert.ok(cases.fitted.some((found) => found.parts[0].length > 2));
  for (const {text, spans, limit, parts} of cases.fitted) {
    assert.deepEqual(fittedSpans(Array.from(text), spans, tooLong(limit)), parts, text);
  }
});

test("a plain-text document is planned and translated as Python's document layer does", () => {
  assert.ok(cases.documents.some((found) => found.splits.length));
  for (const {document, limit, segments, sentences, text, splits} of cases.documents) {
    const segment = (line) => {
      assert.ok(line in segments, `Python's segmenter was not asked for ${JSON.stringify(line)}`);
      return segments[line];
    };
    const plan = planDocument(document, "text", {segment, tooLong: tooLong(limit)});
    assert.deepEqual(plan.sentences.map((sentence) => sentence.text), sentences, document);
    assert.deepEqual(plan.splits.map((split) => [split.line, split.parts]), splits, document);
    assert.equal(rendered(plan, sentences.map(translation), "text"), text, document);
  }
});

test("rendered shows the document up to the first sentence not yet translated", () => {
  const plan = planDocument("One. Two.\n\nThree.\n", "text", {
    segment: (line) => line.split(/(?<=\.) /), tooLong: (texts) => texts.map(() => false)});
  assert.deepEqual(plan.sentences, [{text: "One.", line: 1}, {text: "Two.", line: 1},
                                    {text: "Three.", line: 3}]);
  const shown = [0, 1, 2, 3].map((count) => rendered(plan, ["Eins.", "Zwei.", "Drei."]
    .slice(0, count), "text"));
  assert.deepEqual(shown, ["", "Eins. ", "Eins. Zwei.\n\n", "Eins. Zwei.\n\nDrei.\n"]);
});

test("format lines: each line one sentence as it is, blank lines their own translation", () => {
  const plan = planDocument("a. b.\n \t\nc", "lines", {});
  assert.deepEqual(plan.sentences, [{text: "a. b.", line: 1}, {text: "c", line: 3}]);
  assert.equal(rendered(plan, [" x  y ", "z"], "lines"), " x  y \n \t\nz");
});

test("a format the page cannot translate is named", () => {
  assert.throws(() => planDocument("<b>x</b>", "xml", {}), /format xml/);
});

test("splitLines ends lines where Python's str.splitlines does", () => {
  assert.deepEqual(splitLines("a\r\nb\rc\u2028d\x0be\x85f\n\ng"),
                   [["a", "\r\n"], ["b", "\r"], ["c\u2028", ""], ["d\x0b", ""], ["e\x85", ""],
                    ["f", "\n"], ["", "\n"], ["g", ""]]);
  assert.deepEqual(splitLines(""), []);
});

test("translatable: a letter, not a URL or an address alone", () => {
  for (const text of ["a", "Straße 5", "猫", "see https://example.org"]) {
    assert.ok(translatable(text), text);
  }
  for (const text of ["", "42", "3.5 %", " https://example.org/a ", "www.a.b", "a@b.de",
                      "mailto:x@y.z", "🙂"]) {
    assert.ok(!translatable(text), text);
  }
  assert.deepEqual(words(" a\u00a0b\u3000c\t"), ["a", "b", "c"]);
});
