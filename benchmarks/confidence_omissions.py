"""Whether a sentence confidence sees omissions: each test line's translation scored against
shortened copies of itself and the empty string, by the sentence score kt-score gives
(`decoding.confidence`: the mean of the word scores and of ending there) and by Bergamot's
(the mean of the word scores alone), and each score's rank correlation with sentence chrF.

    python benchmarks/confidence_omissions.py RUN_DIR --src test.en --ref test.de [--limit N]
        [--weights CHECKPOINT]

Candidates of a line: its translation by the run (its recipe's search), that translation with
its last 1, 2, ... words cut (down to one word), and "". A line counts when its translation has
at least two words; it is ranked right when its translation scores above every candidate.
Prints one markdown table.
"""
from __future__ import annotations

import argparse
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--src", required=True, help="test sources, one a line (plain or .gz)")
    parser.add_argument("--ref", required=True, help="test references, line-aligned")
    parser.add_argument("--limit", type=int, help="the first N lines only")
    parser.add_argument("--weights", help="a checkpoint of the run (default: its chosen weights)")
    return parser.parse_args(argv)


def ranks(values: list[float]) -> list[float]:
    """Each value's rank (1 = smallest), ties given their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            out[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return out


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation: Pearson's of the ranks."""
    import numpy as np

    return float(np.corrcoef(ranks(xs), ranks(ys))[0, 1])


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, REPO_ROOT)
    from sacrebleu.metrics import CHRF

    from keras_transformer.data.text_files import read_lines
    from keras_transformer.decoding.confidence import score_pairs
    from keras_transformer.evaluation import translate_corpus
    from keras_transformer.training.loaded_run import load_run

    run = load_run(args.run_dir, args.weights)
    sources, references = read_lines(args.src), read_lines(args.ref)
    if args.limit:
        sources, references = sources[:args.limit], references[:args.limit]
    translations = translate_corpus(run.translator(), sources)
    pairs, owners = [], []
    for index, translation in enumerate(translations):
        words = translation.split()
        if len(words) < 2:
            continue
        for candidate in [translation, *(" ".join(words[:cut]) for cut in
                                         range(len(words) - 1, 0, -1)), ""]:
            pairs.append((sources[index], candidate))
            owners.append(index)
    scored = score_pairs(run.model, run.tokenizer, [s for s, _ in pairs], [t for _, t in pairs])

    def bergamot(confidence) -> float:
        values = [value for _, value in confidence.words]
        return sum(values) / len(values) if values else 0.0

    rows = []
    for name, score in (("kt-score: words and ending", lambda c: c.sentence),
                        ("Bergamot: words alone", bergamot)):
        right, lines, own = 0, 0, {}
        for start in range(len(pairs)):
            if start and owners[start] == owners[start - 1]:
                continue
            end = start
            while end < len(pairs) and owners[end] == owners[start]:
                end += 1
            values = [score(scored[k]) for k in range(start, end)]
            lines += 1
            right += all(values[0] > value for value in values[1:])
            own[owners[start]] = values[0]
        chrf = CHRF()
        indices = sorted(own)
        correlation = spearman([own[i] for i in indices],
                               [chrf.sentence_score(translations[i], [references[i]]).score
                                for i in indices])
        rows.append((name, lines, right, correlation))
    print("| sentence score | lines | translation ranked above its shortened copies and \"\" "
          "| Spearman with sentence chrF |")
    print("| --- | ---: | ---: | ---: |")
    for name, lines, right, correlation in rows:
        print(f"| {name} | {lines:,} | {right:,} ({100 * right / lines:.1f}%) | "
              f"{correlation:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
