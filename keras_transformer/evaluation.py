"""Translating a corpus and scoring it: sacreBLEU and chrF with signatures, and the
lowercased tokenized BLEU used by published Multi30k results."""
from __future__ import annotations

import contextlib
import html
import logging
import sys
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from keras_transformer.decoding.translator import TranslationModule
from keras_transformer.serving.text_translation import length_batches


@dataclass(frozen=True)
class Score:
    """A corpus score with the sacrebleu signature that makes it reproducible."""

    name: str
    value: float
    signature: str

    def __str__(self) -> str:
        return f"{self.name} = {self.value:.2f}  ({self.signature})"


def translate_corpus(translator: TranslationModule, sources: Sequence[str], batch_size: int = 64,
                     on_batch: Optional[Callable[[int], None]] = None) -> list[str]:
    """Translations of `sources`, in order; sentences are batched by length for speed, and
    `on_batch` (if given) is called with each batch's size once it is translated."""
    if batch_size < 1:
        raise ValueError(f"batch_size: must be positive, got {batch_size}")
    hypotheses: list[str] = [""] * len(sources)
    for indices in length_batches([len(text) for text in sources], batch_size, sys.maxsize):
        outputs = translator.translate(np.array([sources[i] for i in indices], dtype=object))
        for index, text in zip(indices, outputs["translation"].numpy()):
            hypotheses[index] = text.decode("utf-8")
        if on_batch is not None:
            on_batch(len(indices))
    return hypotheses


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> list[Score]:
    """Detokenized, cased sacreBLEU (13a) and chrF. Hypotheses that look tokenized (as on
    the benchmark's Moses form, a documented protocol) are scored as they are, with one note
    per process instead of sacreBLEU's hint at every call."""
    global _NOTED_TOKENIZED
    _check_lengths(hypotheses, references)
    if not _NOTED_TOKENIZED and _looks_tokenized(hypotheses):
        _NOTED_TOKENIZED = True
        _LOG.warning("the hypotheses look tokenized (e.g. the benchmark's Moses form): BLEU "
                     "and chrF score them as they are (docs/training.md)")
    scores = []
    with _quiet_sacrebleu():
        for metric in (sacrebleu.BLEU(), sacrebleu.CHRF()):
            result = metric.corpus_score(list(hypotheses), [list(references)])
            scores.append(Score(metric.__class__.__name__, result.score,
                                str(metric.get_signature())))
    return scores


_LOG = logging.getLogger(__name__)
_NOTED_TOKENIZED = False


def sentence_bleu(hypothesis: str, reference: str) -> float:
    """One sentence's BLEU against one reference (sacreBLEU's smoothed sentence BLEU, 13a
    tokenization: idempotent on tokenized text)."""
    return sacrebleu.sentence_bleu(hypothesis, [reference]).score


def _looks_tokenized(hypotheses: Sequence[str]) -> bool:
    """The rule of sacreBLEU's hint: more than 100 lines end in a detached period."""
    return sum(line.rstrip().endswith(" .") for line in hypotheses) > 100


@contextlib.contextmanager
def _quiet_sacrebleu() -> Iterator[None]:
    """Warnings of sacreBLEU off (its "forgot to detokenize" hint), errors still shown."""
    sacrebleu_log = logging.getLogger("sacrebleu")
    level = sacrebleu_log.level
    sacrebleu_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        sacrebleu_log.setLevel(level)


def tokenized_lowercase_bleu(hypotheses: Sequence[str],
                             tokenized_references: Sequence[str]) -> Score:
    """BLEU of lowercased, 13a-tokenized hypotheses against already tokenized, lowercased
    references (e.g. Multi30k's `*.lc.norm.tok.de`; their `&quot;`/`&apos;` escapes are
    undone), scored with `--tokenize none`: the convention of published Multi30k numbers."""
    _check_lengths(hypotheses, tokenized_references)
    tokenize = Tokenizer13a()
    tokenized = [tokenize(text.lower()) for text in hypotheses]
    references = [html.unescape(text) for text in tokenized_references]
    metric = sacrebleu.BLEU(tokenize="none", lowercase=True)
    with _quiet_sacrebleu():  # its "forgot to detokenize" hint: tokenized on purpose
        result = metric.corpus_score(tokenized, [references])
    return Score("tokenized lowercase BLEU", result.score,
                 str(metric.get_signature()) + "|hyp-tok:13a")


def _check_lengths(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")


def write_lines(path: str, lines: Sequence[str]) -> None:
    """One line per hypothesis, UTF-8 (newlines inside a hypothesis become spaces)."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(line.replace("\n", " ") + "\n" for line in lines)
