"""`kt-train`'s translations of dev and test: the periodic dev evaluation's translator and
the final test pass."""
from __future__ import annotations

import argparse
import os
from typing import Callable, Optional, Sequence

from keras_transformer.config import SearchSettings
from keras_transformer.data import SubwordTokenizer
from keras_transformer.decoding.translator import Translator
from keras_transformer.evaluation import corpus_scores, translate_corpus, write_lines
from keras_transformer.model import Transformer
from keras_transformer.parsing.evaluate import parse_scores
from keras_transformer.precision import serving_copy
from keras_transformer.training.run_dir import RunDir


def dev_bleu_name(beam_size: int, sentences: int) -> str:
    """How the console names a dev BLEU figure, with its search and sentence count: `dev
    greedy BLEU (200 sentences)`, `dev BLEU (beam 4, 1,014 sentences)`."""
    search = "greedy BLEU (" if beam_size == 1 else f"BLEU (beam {beam_size}, "
    return f"dev {search}{sentences:,} sentences)"


def dev_translation(args: argparse.Namespace, model: Transformer,
                    tokenizer: SubwordTokenizer) -> Callable[[Sequence[str]], list[str]]:
    """How dev sentences are translated: `--eval-beam-size` (greedy by default)."""
    translator = Translator(model, tokenizer,
                            SearchSettings.of(args.recipe.search, beam_size=args.eval_beam_size))
    return lambda texts: translate_corpus(translator, texts)


def evaluate_test(args: argparse.Namespace, run: RunDir, model: Transformer,
                  tokenizer: SubwordTokenizer, test: tuple[list[str], list[str]],
                  gold_trees: Optional[list] = None) -> dict:
    """Beam-search translation of the test set: hypotheses file and sacreBLEU/chrF, or with
    `gold_trees` (--task parsing) the parsed trees file and bracket F1/precision/recall.
    Decoded with the weights in float32, whatever the training precision, as `kt-evaluate`
    and a float32 export decode them: one run, one test figure."""
    translator = Translator(serving_copy(model, "float32"), tokenizer,
                            SearchSettings.of(args.recipe.search, beam_size=args.test_beam_size))
    hypotheses = translate_corpus(translator, test[0])
    hypotheses_path = run.root / "test.hyp"
    write_lines(os.fspath(hypotheses_path), hypotheses)
    outputs = {"hypotheses": os.fspath(hypotheses_path)}
    if gold_trees is not None:
        trees, scores = parse_scores(hypotheses, gold_trees)
        outputs["trees"] = os.fspath(run.root / "test.parsed.tree")
        write_lines(outputs["trees"], [str(tree) for tree in trees])
    else:
        scores = corpus_scores(hypotheses, test[1])
    for score in scores:
        print(f"test {score}")
    return {**outputs, **{score.name: round(score.value, 2) for score in scores}}
