"""How well each decoder layer and head of a run aligns words, against eflomal: the layer and
heads chosen on dev, and every choice's error on test.

    python benchmarks/alignment_error.py RUN_DIR --data ../shared/data/multi30k \
        --eflomal /path/to/venv/bin/eflomal-align --work /tmp/align [--hypotheses test.hyp]
        [--record]

eflomal (2.0, a statistical aligner: Bayesian IBM models with HMM and fertility, run in its
own environment, `pip install eflomal`) aligns Multi30k's train, val and test_2016_flickr
pairs together (and test sources with `--hypotheses`, the run's translations), lower-cased,
words split at whitespace, both directions symmetrized by grow-diag-final-and. Those are the
reference links. The model's: each pair teacher-forced, each target word linked to the source
word its pieces attend to most (`decoding.alignment.attention_links`, as markup is placed) for
every layer, its heads averaged or one head alone. The choice of lowest AER on val is the one
`kt-align --record` would record (`--record` records it). Prints one markdown table.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEIGHBOURS = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--data", required=True, help="the Multi30k directory (shared data)")
    parser.add_argument("--source-language", default="en")
    parser.add_argument("--target-language", default="de")
    parser.add_argument("--eflomal", default="eflomal-align", help="eflomal's eflomal-align")
    parser.add_argument("--work", required=True, help="a directory for eflomal's files")
    parser.add_argument("--hypotheses", help="the run's translations of test, line-aligned")
    parser.add_argument("--record", action="store_true",
                        help="record the choice of lowest val AER in the run")
    return parser.parse_args(argv)


def read(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [line.strip() for line in lines]


def grow_diag_final_and(forward: set, reverse: set) -> set:
    """The symmetrized links of two directions' (source, target) links: their intersection,
    grown by union links next to it (diagonals too) that align a word not yet aligned, then
    union links whose source and target words are both still unaligned (Koehn et al. 2005)."""
    union, links = forward | reverse, forward & reverse
    source_words, target_words = {i for i, _ in links}, {j for _, j in links}

    def add(pair: tuple[int, int]) -> None:
        links.add(pair)
        source_words.add(pair[0])
        target_words.add(pair[1])

    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in NEIGHBOURS:
                pair = (i + di, j + dj)
                if pair in union and pair not in links and (
                        pair[0] not in source_words or pair[1] not in target_words):
                    add(pair)
                    grown = True
    for pair in sorted(union - links):
        if pair[0] not in source_words and pair[1] not in target_words:
            add(pair)
    return links


def eflomal_links(eflomal: str, work: Path, sources: list[str], targets: list[str]
                  ) -> list[set]:
    """The symmetrized links eflomal gives each pair."""
    work.mkdir(parents=True, exist_ok=True)
    for name, lines in (("source", sources), ("target", targets)):
        (work / name).write_text("".join(line.lower() + "\n" for line in lines),
                                 encoding="utf-8")
    subprocess.run([eflomal, "-s", str(work / "source"), "-t", str(work / "target"),
                    "-f", str(work / "forward"), "-r", str(work / "reverse"), "--overwrite"],
                   check=True)
    from keras_transformer.data.word_links import read_pharaoh
    return [grow_diag_final_and(forward, reverse) for forward, reverse in
            zip(read_pharaoh(work / "forward"), read_pharaoh(work / "reverse"))]


def write_pharaoh(path: Path, alignments: list[set]) -> None:
    path.write_text("".join(" ".join(f"{i}-{j}" for i, j in sorted(links)) + "\n"
                            for links in alignments), encoding="utf-8")


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, REPO_ROOT)
    data, work = Path(args.data), Path(args.work)
    splits = {}
    for split in ("train", "val", "test_2016_flickr"):
        splits[split] = tuple(read(data / f"{split}.{language}.gz") for language in
                              (args.source_language, args.target_language))
    if args.hypotheses:
        splits["hypotheses"] = (splits["test_2016_flickr"][0], read(Path(args.hypotheses)))
    sources = [line for pair in splits.values() for line in pair[0]]
    targets = [line for pair in splits.values() for line in pair[1]]
    links = eflomal_links(args.eflomal, work, sources, targets)
    reference, start = {}, 0
    for split, (split_sources, _) in splits.items():
        reference[split] = links[start:start + len(split_sources)]
        start += len(split_sources)
        write_pharaoh(work / f"{split}.align", reference[split])

    from keras_transformer.decoding.alignment import (alignment_error, attention_links,
                                                      candidate_heads, write_alignment_heads)
    from keras_transformer.training.loaded_run import load_run
    loaded = load_run(args.run_dir)
    choices = candidate_heads(loaded.model.config)
    errors = {}
    for split in [split for split in splits if split != "train"]:
        found = attention_links(loaded.model, loaded.tokenizer, *splits[split], choices)
        errors[split] = {choice: alignment_error(found[choice], reference[split])
                         for choice in choices}
    chosen = min(choices, key=lambda choice: errors["val"][choice]["aer"])
    if args.record:
        write_alignment_heads(args.run_dir, chosen, {"reference": "eflomal, val",
                                                     **errors["val"][chosen]})
    columns = [split for split in errors]
    print("| layer | heads | " + " | ".join(f"{split} P / R / AER" for split in columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for choice in sorted(choices, key=lambda choice: errors["val"][choice]["aer"]):
        heads = "all" if choice.heads is None else ",".join(map(str, choice.heads))
        cells = [" / ".join(f"{100 * errors[split][choice][key]:.1f}"
                            for key in ("precision", "recall", "aer")) for split in columns]
        mark = " (chosen)" if choice == chosen else ""
        print(f"| {choice.layer}{mark} | {heads} | " + " | ".join(cells) + " |")
    print(json.dumps({"chosen": chosen.to_json(), "pairs": {split: len(pair[0]) for split, pair
                                                            in splits.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
