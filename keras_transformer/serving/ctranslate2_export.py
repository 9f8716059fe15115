"""CTranslate2 models of a trained Transformer, and translating with them.

`export_ctranslate2` writes a CTranslate2 model directory (`kt-export --format ctranslate2`):
the model's own weights under CTranslate2's `TransformerSpec` (quantized as asked; the
architecture options of imported models too: the feed-forward activation, the embedding layer
norm, the output bias, pre-norm, learned or sinusoidal positions in either layout, separate
source and target vocabularies), the tokenizer's files beside it so that raw text goes in and
out, and the search settings.
`CTranslate2Search` gives such a directory the calls `text_translation.LineTranslator` takes,
so `kt-translate` runs it as it runs a SavedModel.

What CTranslate2 computes differs from our search in three places, documented in
docs/decoding-and-serving.md: its length penalty divides a hypothesis' log-probability by
`length ** alpha` (ours by GNMT's `((5 + length) / 6) ** alpha`); its length limit is one per
batch (the longest source + `max_decode_extra`; ours is per sentence); and it removes PAD and
BOS before its log-softmax (`suppress_sequences` sets their logits to -inf), while ours masks
them after it, so its token log-probabilities are ours over `1 - p(PAD) - p(BOS)`. Greedy
float32 models translate alike; beam search with no length penalty alike where the model puts
no probability on PAD and BOS (a trained model), and otherwise where that renormalization does
not reorder the beam (tests/unit/serving/test_ctranslate2_export.py). CTranslate2's beam also
keeps 2 x beam candidates and stops once the best one ends, which with no length penalty returns the
same best translation as ours (an alive hypothesis' log-probability only falls).

A model of several target languages (`RunLanguages`, recorded under "languages" in the
model's `keras_transformer.json`) is asked for one by its token (`<2de>`, the piece of the id
recorded), passed as the model was trained: with the "source" placement as the first source
token (`translate_batch([["<2de>", "▁Hello", ...]])`), with "target" as the target prefix
(`translate_batch([["▁Hello", ...]], target_prefix=[["<2de>"]])`), the token then leading
each hypothesis, to be dropped. `CTranslate2Search(..., target_language="de")` does so,
as our `TranslationModule` does: the token asked for replaces one a source starts with, and an
imported model's optional language left out ("") leaves the sources as they are.

The word alignment (`decoding.alignment`) is CTranslate2's `return_attention`: the decoder's
`alignment_layer`, set at conversion to the layer chosen, averages the FIRST `alignment_heads`
heads of its encoder-decoder attention; the heads chosen are made those first by permuting that
attention's heads in the converted weights (queries, keys, values and the output projection's
inputs alike: the layer computes the same function). CTranslate2 leaves the source's EOS out of
the attention it returns; its weight is what the others leave of 1 (each row is a softmax), so
the argmax is over the same positions as a SavedModel's `translate_with_alignment`.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from keras_transformer.config import CTRANSLATE2_QUANTIZATIONS
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, SearchSettings, TransformerConfig
from keras_transformer.data.languages import RunLanguages, asked_languages
from keras_transformer.data.sentencepiece_pair import load_tokenizer, vocabulary_pieces
from keras_transformer.data.tokenizer import SubwordTokenizer, model_input_ids, text_piece_ids
from keras_transformer.decoding.alignment import AlignmentHeads
from keras_transformer.model import Transformer

SETTINGS_FILENAME = "keras_transformer.json"  # the search settings and the converted config
# What a SavedModel export does that this one cannot: recorded in its provenance (`kt-export
# --describe`) and said when kt-export writes it (kt-translate refuses either by name).
UNSUPPORTED = {"terms": "no lexically constrained search (CTranslate2 has none)",
               "scores": "no word scores (kt-score gives them from the run directory)"}
# Our feed-forward activations by the name of CTranslate2's `common_spec.Activation`.
_ACTIVATIONS = {"relu": "RELU", "swish": "SWISH", "gelu": "GELU", "gelu_sigmoid": "GELUSigmoid"}


def is_ctranslate2_model(path: str | os.PathLike) -> bool:
    """Whether `path` is a directory this module wrote (a CTranslate2 model with our files)."""
    path = Path(path)
    return (path / "model.bin").is_file() and (path / SETTINGS_FILENAME).is_file()


def check_convertible(config: TransformerConfig) -> None:
    """A ValueError naming the first architecture option CTranslate2 cannot express."""
    if config.value_dim != config.key_dim:
        raise ValueError(f"value_dim: CTranslate2 needs value_dim = key_dim, got "
                         f"{config.value_dim} and {config.key_dim}")


class SpecConverter:
    """`model`'s float32 weights under the paths of CTranslate2's `TransformerSpec`
    (`encoder.layer.0...`), one method per sublayer, each giving its sublayer's arrays under
    the path `prefix`: linear weights `[out, in]`, self-attention q/k/v and cross-attention k/v
    fused, the position encodings as our own tables (sinusoids in either layout, or learned),
    the embedding layer norms and the output bias when the model has them, so both compute the
    same function. `weights` gives them all."""

    def __init__(self, model: Transformer):
        self.model = model

    @staticmethod
    def array(variable) -> np.ndarray:
        """`variable` as a float32 array, writable (the spec is quantized in place)."""
        return np.array(tf.cast(variable, tf.float32))

    def linear(self, prefix: str, *denses) -> dict[str, np.ndarray]:
        """The `HeadsDense` layers `denses` (kernels `[in..., out...]`) as the one linear layer
        `prefix` whose output is theirs concatenated: its weight and, if they have them, its
        bias."""
        weights = {f"{prefix}.weight": np.concatenate([
            self.array(dense.kernel).reshape(-1, int(np.prod(dense.output_dims))).T
            for dense in denses])}
        if denses[0].bias is not None:
            weights[f"{prefix}.bias"] = np.concatenate(
                [self.array(dense.bias).reshape(-1) for dense in denses])
        return weights

    def layer_norm(self, prefix: str, layer_norm) -> dict[str, np.ndarray]:
        """The layer norm `layer_norm` as `prefix`'s gamma and beta; nothing for None (a model
        without that norm)."""
        if layer_norm is None:
            return {}
        return {f"{prefix}.gamma": self.array(layer_norm.gamma),
                f"{prefix}.beta": self.array(layer_norm.beta)}

    def attention(self, prefix: str, attention, residual, cross: bool) -> dict[str, np.ndarray]:
        """The attention layer `attention` and the layer norm of its `residual` connection:
        `linear.0` the queries, keys and values (`cross`: the queries alone, `linear.1` the
        keys and values), the last `linear` the output projection."""
        queries, keys_values = [attention.query_dense], [attention.key_dense,
                                                         attention.value_dense]
        inputs = (queries, keys_values) if cross else (queries + keys_values,)
        weights = self.layer_norm(f"{prefix}.layer_norm", residual.layer_norm)
        for index, denses in enumerate((*inputs, [attention.output_dense])):
            weights.update(self.linear(f"{prefix}.linear.{index}", *denses))
        return weights

    def feed_forward(self, prefix: str, layer) -> dict[str, np.ndarray]:
        """The feed-forward sublayer of the encoder or decoder layer `layer`, with its
        residual's layer norm."""
        return {**self.linear(f"{prefix}.linear_0", layer.feed_forward.inner),
                **self.linear(f"{prefix}.linear_1", layer.feed_forward.outer),
                **self.layer_norm(f"{prefix}.layer_norm", layer.feed_forward_residual.layer_norm)}

    def embeddings(self, side: str, table: str, embedding, positions,
                   layer_norm) -> dict[str, np.ndarray]:
        """The token `embedding` (as `table`), the position encodings `positions` give the
        model's `max_length` positions and the embedding `layer_norm` (None: none) of the
        `side` ("encoder" or "decoder")."""
        return {f"{table}.weight": self.array(embedding.embeddings),
                f"{side}.position_encodings.encodings": self.array(
                    positions.at(tf.range(self.model.config.max_length))),
                **self.layer_norm(f"{side}.layernorm_embedding", layer_norm)}

    def encoder_layer(self, prefix: str, layer) -> dict[str, np.ndarray]:
        """The encoder layer `layer`: self-attention and feed-forward."""
        return {**self.attention(f"{prefix}.self_attention", layer.self_attention,
                                 layer.self_residual, cross=False),
                **self.feed_forward(f"{prefix}.ffn", layer)}

    def decoder_layer(self, prefix: str, layer) -> dict[str, np.ndarray]:
        """The decoder layer `layer`: an encoder layer's sublayers and the encoder-decoder
        attention."""
        return {**self.encoder_layer(prefix, layer),
                **self.attention(f"{prefix}.attention", layer.cross_attention,
                                 layer.cross_residual, cross=True)}

    def projection(self) -> dict[str, np.ndarray]:
        """The output projection (the target embedding when tied) and the output bias, if
        any."""
        model = self.model
        weights = {"decoder.projection.weight": (
            self.array(model.target_embedding.embeddings) if model.output_projection is None
            else self.array(model.output_projection.kernel).T)}
        if model.output_bias is not None:
            weights["decoder.projection.bias"] = self.array(model.output_bias)
        return weights

    def layers(self, side: str, layers, convert: Callable, final_norm) -> dict[str, np.ndarray]:
        """The `layers` of the `side` ("encoder" or "decoder"), each as `convert` gives it,
        and the stack's `final_norm` (pre-norm models'; None: none)."""
        weights = self.layer_norm(f"{side}.layer_norm", final_norm)
        for index, layer in enumerate(layers):
            weights.update(convert(f"{side}.layer.{index}", layer))
        return weights

    def encoder(self) -> dict[str, np.ndarray]:
        """The encoder: its embeddings, layers and final layer norm."""
        model = self.model
        return {**self.embeddings("encoder", "encoder.embeddings.0", model.source_embedding,
                                  model.source_positions, model.source_embedding_norm),
                **self.layers("encoder", model.encoder_layers, self.encoder_layer,
                              model.encoder_norm)}

    def decoder(self) -> dict[str, np.ndarray]:
        """The decoder: its embeddings, layers, final layer norm and output projection."""
        model = self.model
        return {**self.embeddings("decoder", "decoder.embeddings", model.target_embedding,
                                  model.target_positions, model.target_embedding_norm),
                **self.layers("decoder", model.decoder_layers, self.decoder_layer,
                              model.decoder_norm),
                **self.projection()}

    def weights(self) -> dict[str, np.ndarray]:
        """All of the model's weights by their spec paths."""
        return {**self.encoder(), **self.decoder()}


def spec_weights(model: Transformer) -> dict[str, np.ndarray]:
    """`model`'s float32 weights under `TransformerSpec` paths (`SpecConverter`)."""
    return SpecConverter(model).weights()


def heads_first(weights: dict[str, np.ndarray], config: TransformerConfig,
                choice: AlignmentHeads) -> dict[str, np.ndarray]:
    """`spec_weights`' `weights` with the heads `choice` averages moved first in its decoder
    layer's encoder-decoder attention (in their order, the others after in theirs): the
    query, key and value projections' output rows and the output projection's input columns
    permuted alike, so the layer's output is the same (CTranslate2 aligns with the first
    heads)."""
    heads = config.num_heads
    chosen = list(range(heads)) if choice.heads is None else list(choice.heads)
    order = chosen + [head for head in range(heads) if head not in chosen]
    prefix = f"decoder.layer.{choice.layer}.attention.linear"
    widths = {"query": config.key_dim, "key": config.key_dim, "value": config.value_dim}

    def rows(value: np.ndarray, width: int) -> np.ndarray:  # [heads * width, ...]
        return value.reshape(heads, width, *value.shape[1:])[order].reshape(value.shape)

    permuted = dict(weights)
    for name in ("weight", "bias"):
        if f"{prefix}.0.{name}" not in weights:
            continue
        query, keys_values = weights[f"{prefix}.0.{name}"], weights[f"{prefix}.1.{name}"]
        keys, values = np.split(keys_values, [heads * widths["key"]])
        permuted[f"{prefix}.0.{name}"] = rows(query, widths["query"])
        permuted[f"{prefix}.1.{name}"] = np.concatenate([rows(keys, widths["key"]),
                                                         rows(values, widths["value"])])
    output = weights[f"{prefix}.2.weight"]  # [d_model, heads * d_v]
    permuted[f"{prefix}.2.weight"] = output.reshape(
        output.shape[0], heads, widths["value"])[:, order].reshape(output.shape)
    return permuted


def transformer_spec(model: Transformer, tokenizer: SubwordTokenizer,
                     alignment: Optional[AlignmentHeads] = None):
    """A `ctranslate2.specs.TransformerSpec` holding `model`'s weights, with the tokenizer's
    source and target pieces as its vocabularies and `alignment` (default:
    `AlignmentHeads.default`) as its decoder's alignment layer and first heads
    (`heads_first`); ValueError for what it cannot express (`check_convertible`, a tokenizer
    of other vocabulary sizes than the model's, an alignment choice the model lacks)."""
    from ctranslate2.specs import common_spec, transformer_spec as specs

    config = model.config
    check_convertible(config)
    alignment = (AlignmentHeads.default(config) if alignment is None
                 else alignment.check(config))
    source_pieces, target_pieces = vocabulary_pieces(tokenizer)
    if (len(source_pieces), len(target_pieces)) != (config.vocab_size,
                                                    config.target_vocab_size):
        raise ValueError(f"tokenizer: {len(source_pieces)} source and {len(target_pieces)} "
                         f"target pieces, but the model has vocab_size={config.vocab_size} and "
                         f"{config.target_vocab_size} output ids")
    options = {"pre_norm": config.norm == "pre", "layernorm_embedding": config.embedding_norm,
               "activation": common_spec.Activation[_ACTIVATIONS[config.activation]]}
    if config.key_dim * config.num_heads != config.d_model:
        options["head_dim"] = config.key_dim
    try:
        spec = specs.TransformerSpec(
            specs.TransformerEncoderSpec(config.encoder_depth, config.num_heads, **options),
            specs.TransformerDecoderSpec(
                config.decoder_depth, config.num_heads, **options,
                alignment_layer=alignment.layer,
                alignment_heads=len(alignment.heads or range(config.num_heads))))
    except TypeError:  # a CTranslate2 without head_dim
        raise ValueError(f"key_dim: this CTranslate2 needs key_dim x h = d_model, got "
                         f"{config.key_dim} x {config.num_heads}") from None
    for path, value in heads_first(spec_weights(model), config, alignment).items():
        *parents, leaf = path.split(".")
        node = spec
        for part in parents:
            node = node[int(part)] if part.isdigit() else getattr(node, part)
        setattr(node, leaf, value)
    spec.config.layer_norm_epsilon = config.layer_norm_epsilon
    spec.encoder.scale_embeddings = spec.decoder.scale_embeddings = config.scale_embedding
    spec.register_source_vocabulary(source_pieces)
    spec.register_target_vocabulary(target_pieces)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = target_pieces[1:4]
    spec.config.decoder_start_token = target_pieces[2]
    spec.config.add_source_eos = True  # our sources end with EOS
    return spec


def export_ctranslate2(model: Transformer, tokenizer: SubwordTokenizer,
                       directory: str | os.PathLike, quantization: str = "int8",
                       settings: Optional[SearchSettings] = None,
                       languages: Optional[RunLanguages] = None,
                       alignment: Optional[AlignmentHeads] = None) -> Path:
    """Writes `model` (with its SentencePiece `tokenizer`, copied beside it) as the new
    CTranslate2 model `directory` (e.g. `saved_models/NAME/VERSION`), which it returns; the
    weights stored as `quantization` says (one of `CTRANSLATE2_QUANTIZATIONS`). Recorded with
    it: the search `settings` `kt-translate` uses (default: the paper's), the target
    `languages` of a model of several, and the decoder layer and heads its word alignment reads
    (`alignment`; default: `AlignmentHeads.default`)."""
    if quantization not in CTRANSLATE2_QUANTIZATIONS:
        raise ValueError(f"quantization: {quantization!r} is not one of "
                         f"{', '.join(CTRANSLATE2_QUANTIZATIONS)}")
    if quantization == "bfloat16" and importlib.util.find_spec("torch") is None:
        raise ValueError("quantization: CTranslate2's converter writes bfloat16 through torch, "
                         "which is not installed (pip install torch); or export float16, or "
                         "float32 and run it with CTranslate2's compute_type=\"bfloat16\"")
    alignment = alignment or AlignmentHeads.default(model.config)
    spec = transformer_spec(model, tokenizer, alignment)
    spec.validate()
    spec.optimize(quantization=quantization)
    directory = Path(directory)
    directory.mkdir(parents=True)
    spec.save(os.fspath(directory))
    tokenizer.save(directory)
    settings = settings or SearchSettings()
    (directory / SETTINGS_FILENAME).write_text(json.dumps({
        "quantization": quantization, "search": dataclasses.asdict(settings),
        "max_length": model.config.max_length, "alignment": alignment.to_json(),
        **({"languages": languages.to_dict()} if languages else {})}, indent=1),
        encoding="utf-8")
    return directory


class CTranslate2Search:
    """The search of the CTranslate2 model `directory` (`export_ctranslate2`'s), with its
    recorded settings, behind the signatures of an export (tensors in, dicts of tensors out:
    `translate_text`, `translate_ids`, `translate_prefixed`, `translate_aligned`; see
    `text_translation.LineTranslator`; source ids are read as an export reads them:
    out-of-vocabulary ids as UNK, PAD, BOS and EOS dropped). `translator` is the
    `ctranslate2.Translator`, `tokenizer` the model's; `aligns` is False for a directory
    written before exports recorded their alignment choice (`translate_aligned` refuses).

    `inter_threads`: batches the `ctranslate2.Translator` runs at once (on CPU).
    `intra_threads`: threads of each batch (default: every core; on cores other work keeps
    busy, 1 avoids CTranslate2's threads waiting on each other, which costs far more than a
    second thread gains: benchmarks/RESULTS.md, "CTranslate2 exports"). `use_vmap`: restrict
    each batch's candidates with CTranslate2's vocabulary map (`vmap.txt` in `directory`).
    `target_language`: the language a model of several target languages translates into (its
    token placed as the model was trained, and left out of the outputs); None for a model of
    one. `source_language`: the sources' language, of a model that reads it
    (`RunLanguages.source_language_token`: its token first in each source).
    """

    def __init__(self, directory: str | os.PathLike, inter_threads: int = 1,
                 intra_threads: Optional[int] = None, use_vmap: bool = False,
                 target_language: Optional[str] = None, source_language: Optional[str] = None):
        import ctranslate2

        directory = Path(directory)
        recorded = json.loads((directory / SETTINGS_FILENAME).read_text(encoding="utf-8"))
        self.settings = SearchSettings(**recorded["search"])
        self.max_length = int(recorded["max_length"])
        self.aligns = "alignment" in recorded
        self.tokenizer = load_tokenizer(directory)
        if self.settings.sampling:  # read by the generators its worker threads create first
            ctranslate2.set_random_seed(self.settings.sampling_seed)
        self.translator = ctranslate2.Translator(
            os.fspath(directory), device="cpu", inter_threads=inter_threads,
            intra_threads=intra_threads or os.cpu_count() or 1)
        self.use_vmap = use_vmap
        self.source_pieces, self.target_pieces = vocabulary_pieces(self.tokenizer)
        self._ids_of = {piece: index for index, piece in enumerate(self.target_pieces)}
        languages = (RunLanguages.from_dict(recorded["languages"]) if "languages" in recorded
                     else None)
        asked = asked_languages(languages, target_language, source_language)
        # The target language's token piece where the placement puts it (none: the texts as
        # they are); the language tokens' source pieces, the one asked for replacing one a
        # source starts with; the source language's token piece.
        self._placement = None if asked.target_id is None else languages.placement
        self._token = (None if self._placement is None else
                       (self.source_pieces if self._placement == "source"
                        else self.target_pieces)[asked.target_id])
        self._own = ({self.source_pieces[index] for index in languages.token_ids.values()}
                     if languages else set())
        self._source_token = (None if asked.source_id is None
                              else self.source_pieces[asked.source_id])
        self._hypotheses = 1 if self.settings.sampling else self.settings.beam_size

    def translate_text(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """The best translation of each of `text` `[batch]` and its score."""
        return self._best(self._tokenized(text))

    def translate_ids(self, source_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        """The n-best ids `[batch, beam, len]` and scores of source ids `[batch, len]`."""
        found = self._search(self._as_pieces(source_ids, self.source_pieces),
                             nbest=self._hypotheses)
        rows = [hypothesis for found_hypotheses, _ in found for hypothesis in found_hypotheses]
        nbest = tf.reshape(_padded(rows), [len(found), self._hypotheses, -1])
        return {"nbest_ids": nbest,
                "nbest_scores": tf.constant([scores for _, scores in found], tf.float32)}

    def translate_prefixed(self, text: tf.Tensor, prefix: tf.Tensor) -> dict[str, tf.Tensor]:
        """`translate_text` with each translation starting with its `prefix` (target text)."""
        return self._best(self._tokenized(text), [row or None for row in self._as_pieces(
            self._tokenized(prefix, target=True), self.target_pieces)])

    def translate_aligned(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """`translate_text` with the pieces of each source and translation, and each
        translation piece's most attended source piece (`alignment`, -1 at padding)."""
        if not self.aligns:
            raise ValueError("this CTranslate2 export records no alignment choice (written "
                             "before exports did): export it again")
        found = self._search(self._as_pieces(self._tokenized(text), self.source_pieces),
                             attention=True)
        # The best hypothesis' pieces, each aligned (none for an empty source).
        ids = [hypotheses[0][:len(alignment)] for hypotheses, _, _, alignment in found]
        return {"translation": self.tokenizer.detokenize(_padded(ids)),
                "score": tf.constant([scores[0] for _, scores, _, _ in found], tf.float32),
                "target_pieces": _strings([[self.target_pieces[index] for index in row]
                                           for row in ids]),
                "source_pieces": _strings([source for _, _, source, _ in found]),
                "alignment": _padded([alignment for *_, alignment in found], -1)}

    def _as_pieces(self, ids: tf.Tensor, pieces: list[str]) -> list[list[str]]:
        """Each row of `ids` `[batch, len]` as `pieces`, the ids our model would read
        (`model_input_ids`: UNK's for ids out of range, special ids dropped, at most
        `max_length - 1` of them)."""
        kept = model_input_ids(tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids)),
                               len(pieces), self.max_length)
        return [[pieces[token] for token in row] for row in kept.to_list()]

    def _placed(self, source: list[str]) -> list[str]:
        """A source's pieces as the model reads them: with the "source" placement the target
        language's token first (replacing one the source starts with), the source
        language's before it."""
        if self._placement == "source":
            source = ([self._token] + source[1 if source and source[0] in self._own else 0:])[
                :self.max_length - 1]
        if self._source_token is not None:
            source = [self._source_token, *source][:self.max_length - 1]
        return source

    def _search(self, sources: list[list[str]], prefixes=None, nbest: int = 1,
                attention: bool = False) -> list[tuple]:
        """Each source's `nbest` hypotheses (ids) and scores, then, with `attention`, the
        pieces the model reads (`_placed`, and EOS) and, for each piece of the best
        hypothesis, the index of the one its alignment heads attend to most."""
        settings, max_length = self.settings, self.max_length
        empty = [not source for source in sources]  # an empty source: an empty translation
        read = [self._placed(source) + [self.source_pieces[EOS_ID]] for source in sources]
        sources = [source if is_empty else pieces[:-1] for source, pieces, is_empty
                   in zip(sources, read, empty)]
        if self._placement == "target":
            prefixes = [([self._token] + (prefix or []))[:max_length - 1]
                        for prefix in prefixes or [None] * len(sources)]
        longest = max((len(source) for source in sources), default=0) + 1  # + EOS
        # As ours, a prefix leaves room for itself and one token more (CTranslate2 counts it
        # inside its limit).
        longest_prefix = max((len(prefix) for prefix in prefixes or () if prefix), default=0)
        # Sampling: the same settings, drawn by CTranslate2's own generators, seeded when the
        # model is loaded: a fresh load given the same batches in the same order draws the
        # same samples (not ours; and a sentence's samples depend on the batches before it).
        drawing = (dict(beam_size=1, sampling_topk=settings.top_k, sampling_topp=settings.top_p,
                        sampling_temperature=settings.temperature) if settings.sampling
                   else dict(beam_size=settings.beam_size))
        # As in our search: PAD and BOS are never generated, and the end may come first (an
        # empty translation); CTranslate2 by default generates any token and never ends at the
        # first step.
        never_generated = [[self.target_pieces[PAD_ID]], [self.target_pieces[BOS_ID]]]
        results = self.translator.translate_batch(
            sources, target_prefix=prefixes, **drawing,
            num_hypotheses=nbest, length_penalty=settings.length_penalty,
            max_decoding_length=max(1, min(max(longest + settings.max_decode_extra,
                                                longest_prefix + 1), max_length)),
            suppress_sequences=never_generated, min_decoding_length=0, use_vmap=self.use_vmap,
            return_scores=True, return_end_token=True, return_attention=attention)
        forced = int(self._placement == "target")  # the token first in every hypothesis
        return [([[self._ids_of[piece] for piece in hypothesis[forced:]]
                  for hypothesis in result.hypotheses]
                 if not is_empty else [[EOS_ID]] * nbest,
                 list(result.scores) if not is_empty else [0.0] * nbest,
                 *((pieces, [] if is_empty else _attended(result.attention[0][forced:]))
                   if attention else ()))
                for result, pieces, is_empty in zip(results, read, empty)]

    def _best(self, source_ids: tf.Tensor, prefixes=None) -> dict[str, tf.Tensor]:
        found = self._search(self._as_pieces(source_ids, self.source_pieces), prefixes)
        ids = _padded([hypotheses[0] for hypotheses, _ in found])
        return {"translation": self.tokenizer.detokenize(ids),
                "score": tf.constant([scores[0] for _, scores in found], tf.float32)}

    def _tokenized(self, text: tf.Tensor, target: bool = False) -> tf.Tensor:
        return text_piece_ids(self.tokenizer, text, target).to_tensor(default_value=PAD_ID)


def _attended(rows: list[list[float]]) -> list[int]:
    """Each row's most attended source position, EOS's weight (left out by CTranslate2) being
    what the others leave of 1."""
    return [int(np.argmax([*row, 1.0 - sum(row)])) for row in rows]


def _padded(rows: list[list[int]], value: int = PAD_ID) -> tf.Tensor:
    width = max((len(row) for row in rows), default=0) or 1
    return tf.constant([row + [value] * (width - len(row)) for row in rows], tf.int32)


def _strings(rows: list[list[str]]) -> tf.Tensor:
    width = max((len(row) for row in rows), default=0) or 1
    return tf.constant([row + [""] * (width - len(row)) for row in rows], tf.string)
