"""How often a float32 LiteRT export's translations equal the SavedModel's, sentence for sentence:
the beam's best ids and score of each source through the export's batched `beam` signature
(`litert_functions`, the LiteRT interpreter with XNNPACK, a batch a call) against the float32
SavedModel's `translate_ids` of the same batch, and the `greedy` signature's ids (one sentence a
call) against the greedy search of the run's `TranslationModule` (the SavedModel's graph).

    PYTHONPATH=.:benchmarks python benchmarks/litert_equality.py runs/demo --sentences 500
    PYTHONPATH=.:benchmarks python benchmarks/litert_equality.py --opus-mt --sentences 500
    PYTHONPATH=.:benchmarks python benchmarks/litert_equality.py --m2m-100 nllb --sentences 500

The model: a run directory (sources: the demo corpus's test split, as long as it lasts, then
its train split); with `--opus-mt` a random Marian folder of OPUS-MT's shape imported with
`kt-import` (sources: random word sentences); with `--m2m-100 nllb|m2m100` a random folder in
NLLB-200's or M2M-100's layout (`tests/m2m_100_models.py`, 6 + 6 layers, 512 wide) imported the
same way, translated from its first language into its second (the "target" placement: the
target's code forced first). Prints one JSON object: the sentences, how many beam and greedy id
rows are equal, the largest score difference of the equal ones, and for each beam row that
differs both systems' n-best scores and the place of LiteRT's best in the SavedModel's n-best
list.
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
    parser.add_argument("run", nargs="?", help="a run directory (or --opus-mt, --m2m-100)")
    parser.add_argument("--opus-mt", action="store_true",
                        help="a random OPUS-MT-shaped Marian model, imported")
    parser.add_argument("--m2m-100", choices=("nllb", "m2m100"),
                        help="a random model in NLLB-200's or M2M-100's layout, imported")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--workdir", help="default: a temporary directory")
    args = parser.parse_args(argv)
    if sum((bool(args.run), args.opus_mt, bool(args.m2m_100))) != 1:
        parser.error("give one of: a run directory, --opus-mt, --m2m-100")
    return args


def imported(folder: Path, run: Path) -> Path:
    """`kt-import` of `folder` into the run directory `run`."""
    from trainers import import_model

    if import_model.main([str(folder), "--output-dir", str(run)]) != 0:
        raise SystemExit("kt-import failed")
    return run


def opus_mt_run(workdir: Path, count: int) -> tuple[Path, list[str]]:
    """A random Marian folder of OPUS-MT's shape (6 + 6 layers, 512 wide, swish; a vocabulary of
    8,000 pieces) imported into a run directory, and `count` random word sentences."""
    sys.path.insert(0, str(ROOT / "tests"))
    from marian_models import MarianVariant, random_word_sentences, write_marian_model

    folder = write_marian_model(workdir / "marian", MarianVariant(
        enc_depth=6, dec_depth=6, dim_emb=512, heads=8, dim_ffn=2048, activation="swish",
        spm_vocab_size=8000))
    return imported(folder, workdir / "imported"), random_word_sentences(8000, seed=2)[0][:count]


def m2m_100_run(workdir: Path, style: str, count: int
                ) -> tuple[Path, list[str], tuple[str, str]]:
    """A random folder in the `style` layout (6 + 6 layers, 512 wide) imported into a run
    directory, `count` sentences of its writer's, and the pair translated (its first two
    languages)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from m2m_100_models import M2MVariant, training_sentences, write_m2m_100_folder

    variant = M2MVariant(style=style, encoder_layers=6, decoder_layers=6, d_model=512, heads=8,
                         ffn_dim=2048, spm_vocab_size=2000, max_positions=256)
    folder = write_m2m_100_folder(workdir / "hf", variant)
    return (imported(folder, workdir / "imported"), training_sentences(count, seed=11)[0],
            tuple(variant.languages[:2]))


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
    from keras_transformer.decoding.translator import IntoLanguage
    from keras_transformer.serving.litert_export import LITERT_FILE, litert_functions
    from keras_transformer.training.loaded_run import load_run
    from trainers import export

    workdir = Path(args.workdir or tempfile.mkdtemp())
    pair = None  # (source, target) of a model of several languages
    if args.opus_mt:
        run, sentences = opus_mt_run(workdir, args.sentences)
    elif args.m2m_100:
        run, sentences, pair = m2m_100_run(workdir, args.m2m_100, args.sentences)
    else:
        run, sentences = Path(args.run), demo_sources(args.sentences)
    search = ["--beam-size", str(args.beam_size)]
    for name, extra in (("saved", []), ("lite", ["--format", "litert"])):
        if export.main([str(run), "--name", name, "--base-dir", str(workdir / "exports"),
                        *search, *extra]) != 0:
            raise SystemExit(f"kt-export {name} failed")
    loaded = load_run(run)
    served = tf.saved_model.load(str(workdir / "exports" / "saved" / "1")).signatures[
        "translate_ids"]
    lite = workdir / "exports" / "lite" / "1"
    _, lite_ids, _, _, _ = litert_functions(lite, 2, *(reversed(pair) if pair else ()))
    greedy_signature = Interpreter(model_path=str(lite / LITERT_FILE),
                                   num_threads=2).get_signature_runner("greedy")
    greedy = loaded.translator(kt.SearchSettings.of(loaded.recipe.search, beam_size=1))
    languages = {}
    if pair:
        greedy = IntoLanguage(greedy, pair[1], pair[0])
        tokens = loaded.languages.token_ids
        languages = {"target_language": pair[1], "source_language": pair[0]}
    max_length = loaded.model.config.max_length
    counts = {"beam": 0, "greedy": 0}
    differences, differing, total = [], [], 0
    for start in range(0, len(sentences), args.batch_size):
        pieces = loaded.tokenizer.tokenize(tf.constant(sentences[start:start + args.batch_size]))
        pieces = pieces[:, :max_length - 1 - bool(pair)]
        batch = pieces.to_tensor()
        rows = len(pieces.row_lengths())
        outputs = served(source_ids=batch, **{name: tf.fill([rows], value)
                                              for name, value in languages.items()})
        found = lite_ids(batch)
        found_best, served_best = (result["nbest_ids"].numpy()[:, :1]
                                   for result in (found, outputs))
        greedy_ids = greedy.translate_ids(batch)["ids"].numpy()
        for index, row in enumerate(pieces.to_list()):
            source = ([tokens[pair[0]]] if pair else []) + row + [kt.EOS_ID]
            inputs = {"source_ids": np.array([source], np.int32)}
            if pair:
                inputs["target_tokens"] = np.array([tokens[pair[1]]], np.int32)
            ours = {"beam": found_best[index],
                    "greedy": greedy_signature(**inputs)["ids"][0, :1]}
            theirs = {"beam": served_best[index],
                      "greedy": greedy_ids[index][None]}
            for name in counts:
                width = max(ours[name].shape[-1], theirs[name].shape[-1])
                if np.array_equal(padded(ours[name], width), padded(theirs[name], width)):
                    counts[name] += 1
                    if name == "beam":
                        differences.append(abs(float(found["nbest_scores"][index, 0])
                                               - float(outputs["nbest_scores"][index, 0])))
                elif name == "beam":
                    differing.append(differing_row(total, found, outputs, index))
            total += 1
    model = ("opus-mt-shaped import" if args.opus_mt else
             f"{args.m2m_100}-style import, {pair[0]} into {pair[1]}" if pair else str(run))
    print(json.dumps({"model": model, "sentences": total, "beam_size": args.beam_size,
                      "beam_equal": counts["beam"], "greedy_equal": counts["greedy"],
                      "largest_score_difference": max(differences, default=None),
                      "differing_beam_rows": differing}))
    return 0


def differing_row(sentence: int, lite: dict, served: dict, index: int) -> dict:
    """What tells a near-tie from a fault in a beam row that differs: both systems' n-best
    scores, and where the LiteRT best hypothesis stands in the SavedModel's n-best list
    (None: not in it)."""
    best = lite["nbest_ids"].numpy()[index, 0]
    nbest = served["nbest_ids"].numpy()[index]
    width = max(best.shape[-1], nbest.shape[-1])
    rank = next((rank for rank, ids in enumerate(nbest)
                 if np.array_equal(padded(best[None], width), padded(ids[None], width))), None)
    return {"sentence": sentence, "litert_scores": lite["nbest_scores"].numpy()[index].round(
                6).tolist(),
            "savedmodel_scores": served["nbest_scores"].numpy()[index].round(6).tolist(),
            "litert_best_in_savedmodel_nbest": rank}


if __name__ == "__main__":
    sys.exit(main())
