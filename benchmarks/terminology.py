"""Terminology and confidence on a trained run: what the constrained search places, what it
costs, and how far the confidence score follows translation quality.

    python benchmarks/terminology.py RUN --src test.en --ref test.de [--sentences 1000]
        [--beam-size 5] [--seed 1] [--speed-sentences 96]

Constraints follow Post & Vilar (2018): for each sentence, 1 to 3 random phrases of 1 to 3
words of its reference, apart from each other (`reference_phrases`, seeded). The run's model
translates the sentences with the recipe's search (beam `--beam-size`), once plainly
(`translate`) and once with the phrases (`translate_with_terms`); printed as JSON lines:

- `quality`: coverage (the phrases found in the translations as whole words, of all asked;
  and those the search reports placed), sacreBLEU and chrF of both;
- `speed`: sentences per second of both at batch 1 and 32, the same sentences, in turns;
- `confidence`: the Pearson correlation of the plain translations' confidence
  (`translate_with_scores`: Bergamot's sentence score) with their sentence chrF.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import sacrebleu
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from keras_transformer.data import read_lines  # noqa: E402
from keras_transformer.decoding.translator import TERM_SEPARATOR, TranslationModule  # noqa: E402
from keras_transformer.training.loaded_run import load_run  # noqa: E402


def reference_phrases(reference: str, rng: random.Random) -> list[str]:
    """1-3 phrases of 1-3 consecutive words of `reference`, no two sharing a word."""
    words = reference.split()
    if not words:
        return []
    cuts = sorted(rng.sample(range(1, len(words)), min(2, len(words) - 1)))
    spans = [words[a:b] for a, b in zip([0, *cuts], [*cuts, len(words)])]
    rng.shuffle(spans)
    phrases = []
    for span in spans[:rng.randint(1, 3)]:
        length = min(rng.randint(1, 3), len(span))
        start = rng.randint(0, len(span) - length)
        phrases.append(" ".join(span[start:start + length]))
    return phrases


def contains(translation: str, phrase: str) -> bool:
    """Whether `phrase` is whole words of `translation`."""
    return re.search(rf"(?<!\S){re.escape(phrase)}(?!\S)", translation) is not None


def translate(function, inputs: list[list[str]], batch_size: int) -> tuple[list[dict], float]:
    """`function`'s outputs over `inputs` (parallel lists of strings) `batch_size` rows at a
    time, as one dict of lists, and the seconds it took."""
    outputs: dict[str, list] = {}
    start = time.perf_counter()
    for first in range(0, len(inputs[0]), batch_size):
        batch = [tf.constant(column[first:first + batch_size]) for column in inputs]
        for key, value in function(*batch).items():
            outputs.setdefault(key, []).extend(value.numpy().tolist())
    return outputs, time.perf_counter() - start


def texts(values: list[bytes]) -> list[str]:
    return [value.decode("utf-8") for value in values]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--speed-sentences", type=int, default=96)
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)

    loaded = load_run(args.run)
    settings = dataclasses.replace(loaded.recipe.search, beam_size=args.beam_size)
    translator = TranslationModule(loaded.model, loaded.tokenizer, settings)
    sources = read_lines(args.src)[:args.sentences]
    references = read_lines(args.ref)[:args.sentences]
    rng = random.Random(args.seed)
    phrases = [reference_phrases(reference, rng) for reference in references]
    terms = [TERM_SEPARATOR.join(row) for row in phrases]

    plain, _ = translate(translator.translate, [sources], 32)
    constrained, _ = translate(translator.translate_with_terms, [sources, terms], 32)
    plain_text, constrained_text = texts(plain["translation"]), texts(constrained["translation"])
    asked = sum(len(row) for row in phrases)
    missing = sum(len([p for p in row.decode("utf-8").split(TERM_SEPARATOR) if p])
                  for row in constrained["missing_terms"])

    def coverage(outputs: list[str]) -> float:
        found = sum(contains(out, phrase) for out, row in zip(outputs, phrases) for phrase in row)
        return round(100 * found / asked, 2)

    def scores(outputs: list[str]) -> dict:
        return {"bleu": round(sacrebleu.corpus_bleu(outputs, [references]).score, 2),
                "chrf": round(sacrebleu.corpus_chrf(outputs, [references]).score, 2)}

    print(json.dumps({
        "label": args.label, "kind": "quality", "sentences": len(sources), "phrases": asked,
        "beam_size": args.beam_size, "length_penalty": settings.length_penalty,
        "plain": {"coverage": coverage(plain_text), **scores(plain_text)},
        "constrained": {"coverage": coverage(constrained_text),
                        "reported_placed": round(100 * (asked - missing) / asked, 2),
                        **scores(constrained_text)}}), flush=True)

    speed = {}
    few = args.speed_sentences
    for batch_size in (1, 32):
        seconds = {"plain": [], "constrained": []}
        for _ in range(2):  # in turns; the first pair also traces
            seconds["plain"].append(translate(translator.translate, [sources[:few]],
                                              batch_size)[1])
            seconds["constrained"].append(translate(translator.translate_with_terms,
                                                    [sources[:few], terms[:few]],
                                                    batch_size)[1])
        speed[batch_size] = {name: round(few / min(values), 2) for name, values in
                             seconds.items()}
        speed[batch_size]["ratio"] = round(speed[batch_size]["constrained"]
                                           / speed[batch_size]["plain"], 3)
    print(json.dumps({"label": args.label, "kind": "speed", "sentences": few,
                      "sentences_per_second": speed}), flush=True)

    scored, _ = translate(translator.translate_with_scores, [sources], 32)
    assert texts(scored["translation"]) == plain_text
    chrf = [sacrebleu.sentence_chrf(out, [ref]).score for out, ref in zip(plain_text,
                                                                          references)]
    pearson = float(np.corrcoef(scored["confidence"], chrf)[0, 1])
    print(json.dumps({"label": args.label, "kind": "confidence", "sentences": len(sources),
                      "pearson_confidence_chrf": round(pearson, 3),
                      "pearson_search_score_chrf": round(float(np.corrcoef(
                          scored["score"], chrf)[0, 1]), 3),
                      "mean_sentence_chrf": round(statistics.fmean(chrf), 2)}), flush=True)


if __name__ == "__main__":
    main()
