"""A training run's translations of dev and test: the periodic dev evaluation's translator
and the final test pass, for one pair or for each of several language pairs (their mean the
figure that decides)."""
from __future__ import annotations

import os
import sys
from typing import Callable, NamedTuple, Optional, Sequence

from keras_transformer.config import SearchSettings
from keras_transformer.data.languages import LanguagePair, LanguageTokenizer, RunLanguages
from keras_transformer.data.sentencepiece_pair import Tokenizer
from keras_transformer.decoding.translator import IntoLanguage, TranslationModule, truncated_sources
from keras_transformer.evaluation import corpus_scores, translate_corpus, write_lines
from keras_transformer.model import Transformer
from keras_transformer.parsing.evaluate import parse_scores
from keras_transformer.precision import serving_copy
from keras_transformer.serving.text_translation import truncation_warning
from keras_transformer.training.run_dir import RunDir


DEV_BLEU = "dev_bleu"  # the logs' name of the dev figure; a pair's: `dev_bleu/SRC-TGT`


class DevSet(NamedTuple):
    """A dev set and the run's tokenizer it is translated with."""

    tokenizer: Tokenizer
    sources: list[str]
    references: list[str]


def dev_bleu_name(beam_size: int, sentences: int, pairs: int = 1) -> str:
    """How the console names a dev BLEU figure, with its search and sentence count: `dev
    greedy BLEU (200 sentences)`, `dev BLEU (beam 4, 1,014 sentences)`; of several language
    pairs, their mean: `dev greedy BLEU (mean of 3 pairs, 600 sentences)`."""
    search = "greedy BLEU (" if beam_size == 1 else f"BLEU (beam {beam_size}, "
    mean = f"mean of {pairs} pairs, " if pairs > 1 else ""
    return f"dev {search}{mean}{sentences:,} sentences)"


def pair_translator(translator: TranslationModule,
                    pair: str = "") -> TranslationModule | IntoLanguage:
    """What `translate_corpus` takes to translate with `translator` into the target language
    of the language pair named `pair` (`IntoLanguage`), as kt-translate and kt-evaluate do; the
    translator itself for a run of one pair (`pair` ""). The pairs of a run share one
    translator, hence its traced searches."""
    if not pair:
        return translator
    languages, parsed = translator.languages, LanguagePair.parse(pair)
    return IntoLanguage(translator, parsed.target,
                        parsed.source if languages.source_language_token else None)


def attention_tokenizer(tokenizer: Tokenizer, languages: Optional[RunLanguages],
                        pair: str) -> Tokenizer | LanguageTokenizer:
    """What the attention plots of the dev sentences of the language pair named `pair` read
    them with: the run's `tokenizer`, with the pair's target-language token where the run
    (`languages`) puts it; the tokenizer itself for a run of one pair (`pair` "")."""
    if not pair:
        return tokenizer
    return LanguageTokenizer(tokenizer, languages.pair_prefixes(LanguagePair.parse(pair)))


def warn_of_truncated_sources(tokenizer: Tokenizer, sources: dict[str, tuple[str, Sequence[str]]],
                              max_length: int, languages: Optional[RunLanguages] = None) -> None:
    """Warns (on stderr, as kt-evaluate does) of the lines of each set kt-train translates that
    the model takes only the first `max_length - 1` subwords of (`max_length`: the model's):
    their dev and test figures score those lines' translations all the same. `sources` maps each
    set's name in the warning (its file) to (its language pair, "" for a run of one pair; its
    source sentences), tokenized by `tokenizer`, the run's; `languages` are the run's target
    languages (`RunDir.languages`), None for one."""
    for name, (pair, texts) in sources.items():
        parsed = LanguagePair.parse(pair) if pair else None
        truncated = truncated_sources(
            tokenizer, texts, max_length, languages=languages,
            language=parsed.target if parsed else None,
            source_language=parsed.source if parsed and languages.source_language_token
            else None)
        if truncated:
            print("kt-train: warning: " + truncation_warning(
                name, [index + 1 for index in truncated], max_length), file=sys.stderr)


def dev_bleu(search: SearchSettings, beam_size: int, model: Transformer, dev: dict[str, DevSet],
             languages: Optional[RunLanguages] = None
             ) -> Callable[[Optional[int]], dict[str, float]]:
    """A function giving the dev BLEU of each set of `dev` (name -> `DevSet`; one pair's is
    named "", a language pair's `SRC-TGT`, of a run of the target `languages`) on its first
    `sentences` sentences (its argument; None: all), translated with the recipe's `search`
    settings of `beam_size` (`--eval-beam-size`, 1 by default) by one `TranslationModule` per
    tokenizer (the run's: one for every pair), traced once for the evaluations during training
    and the final weights' alike."""
    settings = SearchSettings.of(search, beam_size=beam_size)
    translators: dict[int, TranslationModule] = {}
    for dev_set in dev.values():
        if id(dev_set.tokenizer) not in translators:
            translators[id(dev_set.tokenizer)] = TranslationModule(
                model, dev_set.tokenizer, settings, languages=languages)
    by_set = {name: pair_translator(translators[id(dev_set.tokenizer)], name)
              for name, dev_set in dev.items()}
    return lambda sentences=None: {
        name: corpus_scores(translate_corpus(by_set[name], dev_set.sources[:sentences]),
                            dev_set.references[:sentences])[0].value
        for name, dev_set in dev.items()}


def dev_logs(scores: dict[str, float]) -> dict[str, float]:
    """`dev_bleu`'s figures as the logs name them: one set's as `dev_bleu`; of several
    language pairs, each as `dev_bleu/SRC-TGT` and their mean (what chooses the run's
    weights) as `dev_bleu`."""
    if list(scores) == [""]:
        return {DEV_BLEU: scores[""]}
    return {DEV_BLEU: sum(scores.values()) / len(scores),
            **{f"{DEV_BLEU}/{name}": value for name, value in scores.items()}}


def test_translator(search: SearchSettings, beam_size: Optional[int], run: RunDir,
                    model: Transformer, tokenizer: Tokenizer) -> TranslationModule:
    """The final test pass's translator: the recipe's `search` with `beam_size`
    (`--test-beam-size`; None: the recipe's) and the weights in float32, whatever the training
    precision, as `kt-evaluate` and a float32 export decode them (one run, one test figure):
    `model` itself if it is float32 (its searches already traced for the dev set are not
    traced again)."""
    float32 = model if model.dtype_policy.name == "float32" else serving_copy(model, "float32")
    return TranslationModule(float32, tokenizer, SearchSettings.of(search, beam_size=beam_size),
                      languages=run.languages())


def evaluate_test(run: RunDir, translator: TranslationModule, test: tuple[list[str], list[str]],
                  gold_trees: Optional[list] = None, pair: str = "") -> dict:
    """The test set translated by `translator` (`test_translator`): hypotheses file and
    sacreBLEU/chrF, or with `gold_trees` (--task parsing) the parsed trees file and bracket
    F1/precision/recall. `pair`: the language pair (translated into its target language,
    `pair_translator`), which names the hypotheses file (`test.SRC-TGT.hyp`) and the printed
    figures."""
    translator = pair_translator(translator, pair)
    hypotheses = translate_corpus(translator, test[0])
    hypotheses_path = run.root / (f"test.{pair}.hyp" if pair else "test.hyp")
    write_lines(os.fspath(hypotheses_path), hypotheses)
    outputs = {"hypotheses": os.fspath(hypotheses_path)}
    if gold_trees is not None:
        trees, scores = parse_scores(hypotheses, gold_trees)
        outputs["trees"] = os.fspath(run.root / "test.parsed.tree")
        write_lines(outputs["trees"], [str(tree) for tree in trees])
    else:
        scores = corpus_scores(hypotheses, test[1])
    for score in scores:
        print(f"test {pair + ' ' if pair else ''}{score}")
    return {**outputs, **{score.name: round(score.value, 2) for score in scores}}
