"""Searching with a Transformer: beam search, greedy decoding and sampling in one graph each,
teacher-forced scoring, vocabulary shortlists, and the `TranslationModule` that exports take. The
searches themselves are model-agnostic: `keras_transformer.search`."""
from keras_transformer.decoding.shortlist import VocabularyShortlist, build_shortlist
from keras_transformer.decoding.transformer_search import (beam_search, greedy_decode,
                                                           run_search, sample, score_hypotheses,
                                                           token_log_probs)
from keras_transformer.search import DecodeResult, length_divisor

__all__ = ["DecodeResult", "VocabularyShortlist", "beam_search", "build_shortlist",
           "greedy_decode", "length_divisor", "run_search", "sample", "score_hypotheses",
           "token_log_probs"]
