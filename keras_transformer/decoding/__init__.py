"""Inference: beam search and greedy decoding in one graph each, and scoring helpers."""
from keras_transformer.decoding.beam_search import beam_search, search_beams
from keras_transformer.decoding.greedy import greedy_decode, search_greedy
from keras_transformer.decoding.length_penalty import length_divisor
from keras_transformer.decoding.result import DecodeResult
from keras_transformer.decoding.scoring import score_hypotheses
from keras_transformer.decoding.shortlist import VocabularyShortlist, build_shortlist

__all__ = ["DecodeResult", "VocabularyShortlist", "beam_search", "build_shortlist",
           "greedy_decode", "length_divisor", "score_hypotheses", "search_beams",
           "search_greedy"]
