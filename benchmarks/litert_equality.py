"""How often a float32 LiteRT export's translations equal the SavedModel's, sentence for sentence:
beam (the export's settings) and greedy ids of each source, one sentence at a time through the
LiteRT interpreter (XNNPACK), against the float32 SavedModel's `translate_ids` (beam) and
`greedy_decode` (greedy) of the same batch.

    PYTHONPATH=.:benchmarks python benchmarks/litert_equality.py runs/demo --sentences 500
    PYTHONPATH=.:benchmarks python benchmarks/litert_equality.py --opus-mt --sentences 500

The model: a run directory (sources: the demo corpus's test split, as long as it lasts, then
its train split), or with `--opus-mt` a random Marian folder of OPUS-MT's shape imported with
`kt-import` (sources: random word sentences). Prints one JSON object: the sentences, how many
beam and greedy id rows are equal, the largest score difference of the equal ones, and for each
beam row that differs both systems' n-best scores and the place of LiteRT's best in the
SavedModel's n-best list.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", nargs="?", help="a run directory (or --opus-mt)")
    parser.add_argument("--opus-mt", action="store_true",
                        help="a random OPUS-MT-shaped Marian model, imported")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--workdir", help="default: a temporary directory")
    args = parser.parse_args(argv)
    if bool(args.run) == args.opus_mt:
        parser.error("give a run directory or --opus-mt")
    return args


def opus_mt_run(workdir: Path, count: int) -> tuple[Path, list[str]]:
    """A random Marian folder of OPUS-MT's shape (6 + 6 layers, 512 wide, swish; a vocabulary of
    8,000 pieces) imported into a run directory, and `count` random word sentences."""
    sys.path.insert(0, str(ROOT / "tests"))
    from marian_models import MarianVariant, random_word_sentences, write_marian_model

    from trainers import import_model

    folder = write_marian_model(workdir / "marian", MarianVariant(
        enc_depth=6, dec_depth=6, dim_emb=512, heads=8, dim_ffn=2048, activation="swish",
        spm_vocab_size=8000))
    run = workdir / "imported"
    if import_model.main([str(folder), "--output-dir", str(run)]) != 0:
        raise SystemExit("kt-import failed")
    return run, random_word_sentences(8000, seed=2)[0][:count]


def demo_sources(count: int) -> list[str]:
    """`count` demo sentences: the test split's, then the train split's."""
    from keras_transformer.data import read_parallel, write_demo_corpus

    demo = write_demo_corpus(Path(tempfile.mkdtemp()) / "demo")
    sentences = read_parallel(*demo["test"])[0] + read_parallel(*demo["train"])[0]
    return sentences[:count]


def padded(ids: np.ndarray, length: int) -> np.ndarray:
    return np.pad(ids, [(0, 0)] * (ids.ndim - 1) + [(0, length - ids.shape[-1])])


def main(argv=None) -> int:
    args = parse_args(argv)
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    import keras_transformer as kt
    from keras_transformer.decoding.transformer_search import greedy_decode
    from keras_transformer.serving.litert_export import LITERT_FILE
    from keras_transformer.training.loaded_run import load_run
    from trainers import export

    workdir = Path(args.workdir or tempfile.mkdtemp())
    if args.opus_mt:
        run, sentences = opus_mt_run(workdir, args.sentences)
    else:
        run, sentences = Path(args.run), demo_sources(args.sentences)
    search = ["--beam-size", str(args.beam_size)]
    for name, extra in (("saved", []), ("lite", ["--format", "litert"])):
        if export.main([str(run), "--name", name, "--base-dir", str(workdir / "exports"),
                        *search, *extra]) != 0:
            raise SystemExit(f"kt-export {name} failed")
    loaded = load_run(run)
    served = tf.saved_model.load(str(workdir / "exports" / "saved" / "1"))
    interpreter = Interpreter(model_path=str(workdir / "exports" / "lite" / "1" / LITERT_FILE),
                              num_threads=2)
    beam, greedy = (interpreter.get_signature_runner(name) for name in ("beam", "greedy"))
    max_length = loaded.model.config.max_length
    counts = {"beam": 0, "greedy": 0}
    differences, differing, total = [], [], 0
    for start in range(0, len(sentences), args.batch_size):
        pieces = loaded.tokenizer.tokenize(tf.constant(sentences[start:start + args.batch_size]))
        pieces = pieces[:, :max_length - 1]
        batch = tf.concat([pieces, tf.fill([pieces.nrows(), 1], kt.EOS_ID)], 1).to_tensor()
        outputs = served.signatures["translate_ids"](source_ids=batch)
        greedy_ids = greedy_decode(loaded.model, batch).ids.numpy()
        for index, row in enumerate(pieces.to_list()):
            source = np.array([row + [kt.EOS_ID]], np.int32)
            ours = {"beam": beam(source_ids=source), "greedy": greedy(source_ids=source)}
            theirs = {"beam": outputs["nbest_ids"].numpy()[index][:1],
                      "greedy": greedy_ids[index][:1]}
            for name in counts:
                width = max(ours[name]["ids"].shape[-1], theirs[name].shape[-1])
                if np.array_equal(padded(ours[name]["ids"][0, :1], width),
                                  padded(theirs[name], width)):
                    counts[name] += 1
                    if name == "beam":
                        differences.append(abs(float(ours[name]["scores"][0, 0])
                                               - float(outputs["nbest_scores"][index, 0])))
                elif name == "beam":
                    differing.append(differing_row(total, ours["beam"], outputs, index))
            total += 1
    print(json.dumps({"model": "opus-mt-shaped import" if args.opus_mt else str(run),
                      "sentences": total, "beam_size": args.beam_size,
                      "beam_equal": counts["beam"], "greedy_equal": counts["greedy"],
                      "largest_score_difference": max(differences, default=None),
                      "differing_beam_rows": differing}))
    return 0


def differing_row(sentence: int, lite: dict, served: dict, index: int) -> dict:
    """What tells a near-tie from a fault in a beam row that differs: both systems' n-best
    scores, and where the LiteRT best hypothesis stands in the SavedModel's n-best list
    (None: not in it)."""
    best = lite["ids"][0, 0]
    nbest = served["nbest_ids"].numpy()[index]
    width = max(best.shape[-1], nbest.shape[-1])
    rank = next((rank for rank, ids in enumerate(nbest)
                 if np.array_equal(padded(best[None], width), padded(ids[None], width))), None)
    return {"sentence": sentence, "litert_scores": lite["scores"][0].round(6).tolist(),
            "savedmodel_scores": served["nbest_scores"].numpy()[index].round(6).tolist(),
            "litert_best_in_savedmodel_nbest": rank}


if __name__ == "__main__":
    sys.exit(main())
