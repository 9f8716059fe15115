"""The on-device export: the search as a LiteRT (TFLite) model of builtin ops only, which every
LiteRT runtime (Android, iOS, embedded Linux, LiteRT.js in a browser page) runs unchanged, and the
LiteRT interpreter's translations as an export's (`litert_functions`, for kt-translate and
kt-evaluate). The folder it writes, its signatures and why every weight is read as a constant:
docs/decoding-and-serving.md, "Translate on the device: --format litert".
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Callable, Optional

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.config import LITERT_QUANTIZATIONS
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, SearchSettings
from keras_transformer.data.languages import RunLanguages, asked_languages
from keras_transformer.data.sentencepiece_pair import (PAIR_FILENAMES, SentencePiecePair,
                                                       Tokenizer, load_tokenizer)
from keras_transformer.data.tokenizer import MODEL_FILENAME, model_input_ids, text_piece_ids
from keras_transformer.decoding.alignment import AlignmentHeads, attention_alignment
from keras_transformer.decoding.transformer_search import run_search
from keras_transformer.model import Transformer

LITERT_FILE = "model.tflite"
MANIFEST_FILE = "keras_transformer_litert.json"
SEARCHES = ("beam", "greedy")
SIGNATURES = (*SEARCHES, "alignment")
SIGNATURE_INPUT = ("source_ids [batch, length] int32 (fixed: [1, source_length]): each source's "
                   "subword ids, then EOS, then PAD; with the 'target' placement also "
                   "target_tokens [batch] int32: the token forced first in each translation; "
                   "alignment also target_ids [batch, T] int32: the ids a search gave")
# What a SavedModel export does that this one cannot (as `ctranslate2_export.UNSUPPORTED`).
UNSUPPORTED = {"terms": "no lexically constrained search (the on-device search is the plain one)",
               "scores": "no word scores (kt-score gives them from the run directory)"}


def is_litert_model(path: str | os.PathLike) -> bool:
    """Whether `path` is a directory `export_litert` wrote."""
    path = Path(path)
    return (path / LITERT_FILE).is_file() and (path / MANIFEST_FILE).is_file()


def litert_model(model: Transformer, settings: SearchSettings, quantization: str = "float32",
                 source_length: Optional[int] = None,
                 languages: Optional[RunLanguages] = None,
                 alignment: Optional[AlignmentHeads] = None) -> bytes:
    """The `.tflite` flatbuffer of `model`'s searches (docs/decoding-and-serving.md, "Translate
    on the device"): `beam` with `settings`, `greedy` with its length penalty and limit, and
    `alignment` read from the layer and heads `alignment` names (None: `AlignmentHeads.default`);
    weights stored as `quantization` says (one of `LITERT_QUANTIZATIONS`); `source_length`: the
    fixed source length of one sentence a call (None: a batch of any length); `languages`: the
    target languages of a model of several, whose "target" placement makes each signature take
    `target_tokens`."""
    if quantization not in LITERT_QUANTIZATIONS:
        raise ValueError(f"quantization: must be one of {', '.join(LITERT_QUANTIZATIONS)} for "
                         f"LiteRT, got {quantization!r}")
    if settings.sampling:
        raise ValueError("sampling: a LiteRT export holds the beam and greedy searches only")
    check_source_length(source_length, model.config.max_length)
    alignment = (AlignmentHeads.default(model.config) if alignment is None
                 else alignment.check(model.config))
    batch = None if source_length is None else 1
    width = (None if source_length is None else
             min(source_length + settings.max_decode_extra, model.config.max_length))
    inputs = [tf.TensorSpec([batch, source_length], tf.int32, name="source_ids")]
    forced = languages is not None and languages.placement == "target"
    if forced:
        inputs.append(tf.TensorSpec([batch], tf.int32, name="target_tokens"))

    def signature(name: str) -> tf.types.experimental.ConcreteFunction:
        def search(source_ids, target_tokens=None):
            result = run_search(model, source_ids, settings, greedy=name == "greedy",
                                static_shapes=True,
                                prefix_ids=(None if target_tokens is None
                                            else target_tokens[:, None]))
            ids = result.ids
            if target_tokens is not None:  # the token forced first, left out of the output
                ids = tf.pad(ids[:, :, 1:], [[0, 0], [0, 0], [0, 1]])
            if source_length is None:
                return {"ids": ids, "scores": result.scores}
            # fixed sizes: the ids padded to the longest any hypothesis can be, the scores
            # copied out of the search loop (a loop's own outputs are not tensors the
            # compiled-model API can hand over)
            hypotheses = result.scores.shape[1]
            ids = tf.pad(ids, [[0, 0], [0, 0], [0, width - tf.shape(ids)[2]]])
            return {"ids": tf.reshape(ids, [1, hypotheses, width]),
                    "scores": tf.gather(result.scores, tf.range(hypotheses), axis=1)}

        search.__name__ = name  # the signature's key in the .tflite file
        return tf.function(search, input_signature=inputs,
                           autograph=False).get_concrete_function()

    def aligned(source_ids, target_ids, target_tokens=None):
        if target_tokens is not None:  # aligned with the token forced first, then left out
            target_ids = tf.concat([target_tokens[:, None], target_ids], axis=1)
        found = attention_alignment(model, source_ids, target_ids, alignment)
        return {"alignment": found if target_tokens is None else found[:, 1:]}

    aligned.__name__ = "alignment"
    alignment_inputs = [inputs[0], tf.TensorSpec([batch, width], tf.int32, name="target_ids"),
                        *inputs[1:]]
    with keras.StatelessScope(state_mapping=[(weight, weight.numpy())
                                             for weight in model.weights]):
        functions = [signature(name) for name in SEARCHES]
        functions.append(tf.function(aligned, input_signature=alignment_inputs,
                                     autograph=False).get_concrete_function())
    converter = tf.lite.TFLiteConverter.from_concrete_functions(functions, tf.Module())
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantization != "float32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantization == "float16":
        converter.target_spec.supported_types = [tf.float16]
    return converter.convert()


def check_source_length(source_length: Optional[int], max_length: int) -> None:
    """Refuses (ValueError naming it) a fixed source length a model cannot read: below 2 (a
    piece and EOS) or past its `max_length` positions."""
    if source_length is not None and not 2 <= source_length <= max_length:
        raise ValueError(f"--source-length: must be 2 to the model's max_length {max_length}, "
                         f"got {source_length}")


def export_litert(model: Transformer, tokenizer: Tokenizer, directory: str | os.PathLike,
                  settings: Optional[SearchSettings] = None, quantization: str = "float32",
                  languages: Optional[RunLanguages] = None,
                  source_length: Optional[int] = None,
                  alignment: Optional[AlignmentHeads] = None) -> Path:
    """Writes the LiteRT export of `model` (a merged one: no LoRA adapters) and its `tokenizer`,
    whose SentencePiece files the folder ships, into the new folder `directory` (it must not exist),
    and returns the folder.

    `settings` are the search settings (default: the paper's); `quantization` says how the weights
    are stored (`LITERT_QUANTIZATIONS`). `languages` are the target languages of a model of several
    (with the "target" placement, the signatures take `target_tokens`). `source_length` PAD-pads
    every source to this many ids (None: any length). `alignment` is the decoder layer and heads the
    `alignment` signature reads (None: `AlignmentHeads.default`; kt-export passes a run's
    `read_alignment_heads`).
    """
    settings = SearchSettings() if settings is None else settings
    alignment = (AlignmentHeads.default(model.config) if alignment is None
                 else alignment.check(model.config))
    directory = Path(directory)
    flatbuffer = litert_model(model, settings, quantization, source_length, languages,
                              alignment)
    directory.mkdir(parents=True)
    try:
        (directory / LITERT_FILE).write_bytes(flatbuffer)
        tokenizer.save(directory)
        config = model.config
        manifest = {"format": "litert", "signatures": list(SIGNATURES),
                    "input": SIGNATURE_INPUT, "batch": source_length is None,
                    "special_ids": {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID},
                    "vocab_size": config.vocab_size,
                    "target_vocab_size": config.target_vocab_size,
                    "max_length": config.max_length, "source_length": source_length,
                    "search": dataclasses.asdict(settings),
                    "quantization": quantization, "tokenizer": tokenizer_files(tokenizer),
                    "alignment": alignment.to_json(),
                    **({"languages": languages.to_dict()} if languages else {}),
                    **({"target_sentencepiece_ids": tokenizer.target_sentencepiece_ids()}
                       if isinstance(tokenizer, SentencePiecePair) else {})}
        (directory / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True),
                                               encoding="utf-8")
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return directory


def tokenizer_files(tokenizer: Tokenizer) -> str | dict[str, str]:
    """The files of `tokenizer` a device reads: the shared SentencePiece model's name, or an
    imported model's source and target models and its vocabulary of our ids."""
    if isinstance(tokenizer, SentencePiecePair):
        return dict(zip(("source", "target", "vocabulary"), PAIR_FILENAMES))
    return MODEL_FILENAME


def fixed_source_length(directory: str | os.PathLike) -> Optional[int]:
    """The source length every source of the LiteRT export `directory` is padded to (its
    longest: `source_length - 1` pieces and EOS); None: any length up to `max_length`."""
    manifest = json.loads((Path(directory) / MANIFEST_FILE).read_text(encoding="utf-8"))
    return manifest.get("source_length")


def litert_functions(directory: str | os.PathLike, threads: int = 2,
                     target_language: Optional[str] = None,
                     source_language: Optional[str] = None
                     ) -> tuple[Callable, Callable, Tokenizer, object]:
    """The searches of the folder `directory` that `export_litert` wrote, run by the LiteRT
    interpreter (its XNNPACK delegate, `threads` threads): a batch a call (PAD-padded to its longest
    source), or, for an export of fixed shapes (or one written before batches), one sentence a call.
    The result is `(translate_text, translate_ids, translate_aligned, tokenizer, interpreter)`, with
    the signatures of an export's (tensors in, dicts of tensors out:
    `text_translation.LineTranslator`); `translate_aligned` is None for an export written before its
    `alignment` signature.

    `target_language` is the language a model of several translates into (its token first in each
    source, or forced first in each translation); None for a model of one. `source_language` is the
    sources' language, of a model that reads it (`RunLanguages.source_language_token`: its token
    first in each source).
    """
    from ai_edge_litert.interpreter import Interpreter

    directory = Path(directory)
    for name in (LITERT_FILE, MANIFEST_FILE):
        if not (directory / name).is_file():
            raise FileNotFoundError(f"{directory}: no {name} (not a LiteRT export)")
    manifest = json.loads((directory / MANIFEST_FILE).read_text(encoding="utf-8"))
    tokenizer = load_tokenizer(directory)
    try:
        interpreter = Interpreter(model_path=os.fspath(directory / LITERT_FILE),
                                  num_threads=threads)
    except ValueError as error:
        raise ValueError(f"{directory / LITERT_FILE}: not a LiteRT model ({error})") from None
    beam = interpreter.get_signature_runner("beam")
    alignment = (interpreter.get_signature_runner("alignment")  # not in exports before it
                 if "alignment" in interpreter.get_signature_list() else None)
    beam_size = int(beam.get_output_details()["scores"]["shape_signature"][1])
    batched = beam.get_input_details()["source_ids"]["shape_signature"][0] == -1
    vocab_size = manifest["vocab_size"]
    fixed = manifest.get("source_length")  # None: any length
    max_length = fixed or manifest["max_length"]
    languages = (RunLanguages.from_dict(manifest["languages"]) if "languages" in manifest
                 else None)
    asked = asked_languages(languages, target_language, source_language)
    token = asked.target_id
    forced = token is not None and languages.placement == "target"
    own_tokens = set(languages.token_ids.values()) if languages else set()

    def source_row(row: list[int]) -> list[int]:
        """A nonempty source's ids as the model reads them (`TranslationModule`'s `_source_ids`)."""
        if token is not None and not forced:  # in place of a token the text starts with
            row = ([token] + row[row[0] in own_tokens:])[:max_length - 1]
        if asked.source_id is not None:
            row = ([asked.source_id] + row)[:max_length - 1]
        return row + [EOS_ID]

    def search(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """The n-best ids and scores of source rows of one length."""
        inputs = {"source_ids": np.array(rows, np.int32)}
        if forced:
            inputs["target_tokens"] = np.full([len(rows)], token, np.int32)
        result = beam(**inputs)
        return result["ids"], result["scores"]

    def searched(source_ids: tf.Tensor) -> tuple[list[int], list[list[int]], np.ndarray,
                                                  np.ndarray]:
        """The rows searched (the nonempty sources), their ids as the model reads them
        (PAD-padded), and every row's n-best ids `[batch, beam, length]` and scores."""
        kept = model_input_ids(tf.RaggedTensor.from_tensor(tf.convert_to_tensor(source_ids)),
                               vocab_size, max_length).to_list()
        # an empty source: an empty translation, into any language
        rows_searched = [index for index, row in enumerate(kept) if row]
        rows = [source_row(kept[index]) for index in rows_searched]
        width = fixed or max((len(row) for row in rows), default=0)
        padded = [row + [PAD_ID] * (width - len(row)) for row in rows]
        found = ([search(padded)] if batched and padded else
                 [search([row]) for row in padded])
        length = max((ids.shape[2] for ids, _ in found), default=1)
        ids = np.full([len(kept), beam_size, length], PAD_ID, np.int32)
        scores = np.zeros([len(kept), beam_size], np.float32)
        rows_found = [(row_ids, row_scores) for part_ids, part_scores in found
                      for row_ids, row_scores in zip(part_ids, part_scores)]
        for index, (row_ids, row_scores) in zip(rows_searched, rows_found):
            ids[index, :, :row_ids.shape[1]] = row_ids
            scores[index] = row_scores
        return rows_searched, padded, ids, scores

    def translate_ids(source_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        _, _, ids, scores = searched(source_ids)
        return {"ids": tf.constant(ids[:, 0]), "score": tf.constant(scores[:, 0]),
                "nbest_ids": tf.constant(ids), "nbest_scores": tf.constant(scores)}

    def translate_text(text: tf.Tensor) -> dict[str, tf.Tensor]:
        piece_ids = text_piece_ids(tokenizer, tf.convert_to_tensor(text, tf.string))
        best = translate_ids(piece_ids.to_tensor(default_value=PAD_ID))
        return {"translation": tokenizer.detokenize(best["ids"]), "score": best["score"]}

    def aligned(rows: list[list[int]], targets: np.ndarray) -> np.ndarray:
        """The `alignment` signature's output for source rows (PAD-padded) and their best
        ids, a call for all (or, of fixed shapes, one a row)."""
        def call(sources: list[list[int]], ids: np.ndarray) -> np.ndarray:
            inputs = {"source_ids": np.array(sources, np.int32), "target_ids": ids}
            if forced:
                inputs["target_tokens"] = np.full([len(sources)], token, np.int32)
            return alignment(**inputs)["alignment"]
        if batched:
            return call(rows, targets)
        width = int(alignment.get_input_details()["target_ids"]["shape_signature"][1])
        padded = np.pad(targets[:, :width], [[0, 0], [0, max(width - targets.shape[1], 0)]])
        return np.concatenate([call([row], ids[None]) for row, ids in zip(rows, padded)]
                              )[:, :targets.shape[1]]

    def translate_aligned(text: tf.Tensor) -> dict[str, tf.Tensor]:
        """`TranslationModule.translate_with_alignment`'s outputs, the alignment the export's
        `alignment` signature gives of the best hypothesis."""
        piece_ids = text_piece_ids(tokenizer, tf.convert_to_tensor(text, tf.string))
        rows_searched, rows, ids, scores = searched(piece_ids.to_tensor(default_value=PAD_ID))
        best = ids[:, 0]
        found = np.full(best.shape, -1, np.int32)
        sources = np.full([len(best), max(map(len, rows), default=1)], PAD_ID, np.int32)
        sources[:, 0] = EOS_ID  # an empty source: EOS alone, as the SavedModel reads it
        if rows:
            found[rows_searched] = aligned(rows, best[rows_searched])
            sources[rows_searched] = rows
        return {"translation": tokenizer.detokenize(tf.constant(best)),
                "score": tf.constant(scores[:, 0]),
                "target_pieces": tf.where(best != PAD_ID, tokenizer.pieces(best), ""),
                "source_pieces": tf.where(sources != PAD_ID,
                                          tokenizer.source_pieces_of(sources), ""),
                "alignment": tf.constant(found)}

    return (translate_text, translate_ids,
            translate_aligned if alignment is not None else None, tokenizer, interpreter)
