// The browser's sentence boundaries against Python's: Intl.Segmenter (ICU, built into V8 as in
// Chromium) and, given its module's path, the JavaScript port of sentencex, on the paragraphs
// that `benchmarks/sentence_splitting.py --json FILE` wrote.
//
//     node benchmarks/intl_segmenter.mjs FILE [SENTENCEX_JS]
//
// SENTENCEX_JS: the ES module of npm `sentencex` (e.g. node_modules/sentencex/dist/esm/index.js).
// Prints, per language and JavaScript segmenter, a markdown row: boundary precision, recall and
// F1 against the gold, the share of paragraphs split exactly as the Python choice in FILE splits
// them (and as each other Python segmenter does), and the newstest2014 / test_2016_flickr lines
// it splits, and its time per 10,000 sentences (best of 3 passes over the paragraphs). Offsets are
// counted in code points, as Python counts them.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [file, sentencexPath] = process.argv.slice(2);
if (!file) {
  console.error("usage: node benchmarks/intl_segmenter.mjs FILE [SENTENCEX_JS]");
  process.exit(2);
}
const data = JSON.parse(readFileSync(file, "utf8"));

// Offsets (code points) of `text` moved past whitespace, those at its end dropped.
function firstVisible(points, offsets) {
  const moved = [];
  for (let offset of offsets) {
    while (offset < points.length && /\s/u.test(points[offset])) offset += 1;
    if (offset < points.length) moved.push(offset);
  }
  return moved;
}

// Code-point offsets of the consecutive substrings `sentences` of `text`, blank ones skipped.
function startsOfSentences(text, sentences) {
  const starts = [];
  let cursor = 0;
  for (const sentence of sentences) {
    const stripped = sentence.trim();
    if (!stripped) continue;
    const start = text.indexOf(stripped, cursor);
    if (start < 0) throw new Error(`segment not found in its text: ${stripped.slice(0, 60)}`);
    starts.push([...text.slice(0, start)].length);
    cursor = start + stripped.length;
  }
  return starts;
}

function intlSegmenter(language) {
  const segmenter = new Intl.Segmenter(language, { granularity: "sentence" });
  return (text) => {
    const starts = [];
    let offset = 0;
    for (const { segment } of segmenter.segment(text)) {
      starts.push(offset);
      offset += [...segment].length;
    }
    return starts;
  };
}

const segmenters = { "Intl.Segmenter": intlSegmenter };
if (sentencexPath) {
  const sentencex = (await import(pathToFileURL(resolve(sentencexPath)).href)).default;
  segmenters["sentencex (npm)"] = (language) => (text) => startsOfSentences(text, sentencex(language, text));
}

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const percent = (x) => `${(100 * x).toFixed(2)}%`;
console.log(`Node ${process.versions.node}, ICU ${process.versions.icu}; Python's choice: ${data.choice}\n`);
const others = Object.keys(data.versions);
console.log(`| segmenter | language | precision | recall | F1 | ms per 10k sentences | same splits as ${data.choice} | `
  + `newstest2014 lines split | test_2016_flickr lines split | same splits as: ${others.join(", ")} |`);
console.log("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
for (const [language, set] of Object.entries(data.languages)) {
  for (const [name, build] of Object.entries(segmenters)) {
    const split = build(language);
    const boundaries = (text) => firstVisible([...text], split(text)).slice(1);
    let hits = 0, predicted = 0, gold = 0;
    const agree = Object.fromEntries(others.map((other) => [other, 0]));
    set.paragraphs.forEach((text, i) => {
      const found = boundaries(text);
      const truth = new Set(set.gold[i]);
      hits += found.filter((b) => truth.has(b)).length;
      predicted += found.length;
      gold += truth.size;
      for (const other of others) if (same(found, set.segmenters[other][i])) agree[other] += 1;
    });
    const splitLines = Object.fromEntries(Object.entries(set.one_sentence_lines).map(
      ([setName, lines]) => [setName, lines.filter((line) => line && boundaries(line).length > 0).length]));
    let best = Infinity;
    for (let pass = 0; pass < 3; pass += 1) {
      const begin = performance.now();
      set.paragraphs.forEach((text) => split(text));
      best = Math.min(best, performance.now() - begin);
    }
    const sentences = set.gold.reduce((sum, gold) => sum + gold.length + 1, 0);
    const precision = hits / predicted, recall = hits / gold;
    const n = set.paragraphs.length;
    console.log(`| ${name} | ${language} | ${percent(precision)} | ${percent(recall)} `
      + `| ${percent(2 * precision * recall / (precision + recall))} | ${(best / sentences * 1e4).toFixed(1)} `
      + `| ${percent(agree[data.choice] / n)} `
      + `| ${splitLines.newstest2014} | ${splitLines.test_2016_flickr} `
      + `| ${others.map((other) => percent(agree[other] / n)).join(", ")} |`);
  }
}
