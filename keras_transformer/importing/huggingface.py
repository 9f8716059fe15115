"""Marian models in the Hugging Face layout (`Helsinki-NLP/opus-mt-*`): `config.json`,
`model.safetensors` (or `tf_model.h5`), `vocab.json` (and `target_vocab.json` for separate
vocabularies), `source.spm`, `target.spm`.

The Hugging Face conversion of a Marian model transposes every projection (PyTorch keeps
`[out, in]`), appends a `<pad>` row to the vocabulary (its decoding start, a zero row, like
Marian's zero start vector) and renames the weights. This reader undoes exactly that, giving
Marian's arrays and options, so that the same model read from either layout is the same model
(`keras_transformer.importing.marian.marian_model` does the rest). Hugging Face's Marian is
always post-norm with sinusoidal positions and no embedding layer norm.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.importing.imported_model import (ImportedModel, ImportFormatError,
                                                        read_json, release_beam_size,
                                                        safetensors_path)
from keras_transformer.importing.marian import marian_model, pieces_by_id

# Hugging Face's `activation_function` -> Marian's `transformer-ffn-activation`.
_ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}
# Marian's name of each projection of a layer, by Hugging Face's.
_ATTENTIONS = {"self_attn": "self", "encoder_attn": "context"}
_PROJECTIONS = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "out_proj": "o"}
M2M_100_TYPES = ("m2m_100", "nllb-moe")  # `model_type`s the M2M-100 reader takes (or refuses)


def read_huggingface_folder(folder: str | Path) -> ImportedModel:
    """Reads the Hugging Face Marian folder `folder`, or an NLLB-200 / M2M-100 one
    (`config.json`'s `model_type` "m2m_100", or "nllb-moe" to be refused by name:
    `keras_transformer.importing.m2m_100`). An `ImportFormatError` names the file and what we
    cannot import (another model type, a PyTorch-only checkpoint, a vocabulary without its
    padding row last, ...)."""
    folder = Path(folder)
    config_path = folder / "config.json"
    config = read_json(config_path)
    if config.get("model_type") in M2M_100_TYPES:
        from keras_transformer.importing.m2m_100 import read_m2m_100_folder

        return read_m2m_100_folder(folder)
    if config.get("model_type") != "marian":
        raise ImportFormatError(f"{config_path}: model_type {config.get('model_type')!r} "
                                "(Marian, NLLB-200 and M2M-100 models: 'marian', 'm2m_100')")
    weights_path, tensors = read_weights(
        folder, hint=", or import the Marian release folder instead")
    source_path = folder / "vocab.json"
    target_path = folder / "target_vocab.json"
    if not target_path.is_file():
        target_path = source_path
    vocabularies = [_pieces_without_padding(read_json(path), path)
                    for path in (source_path, target_path)]
    options = _marian_options(config, config_path)
    arrays = _marian_arrays(tensors, config, weights_path, len(vocabularies[0]),
                            len(vocabularies[1]))
    beam_size, generation_files = release_beam_size(folder, config)
    return marian_model(options, arrays, weights_path, vocabularies, [source_path, target_path],
                        beam_size=beam_size, extra_files=[config_path, *generation_files])


def read_weights(folder: Path, hint: str = "") -> tuple[Path, dict[str, np.ndarray]]:
    """The weights of `model.safetensors` in `folder` (PyTorch names and layouts);
    ImportFormatError naming it when it is missing (with what the folder holds instead, and
    `hint`), truncated or corrupt."""
    path = safetensors_path(folder, hint)
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return path, load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise ImportFormatError(f"{path}: not a readable safetensors file, truncated or "
                                f"corrupt ({error})") from None


def _pieces_without_padding(mapping: Any, path: Path) -> list[str]:
    """Marian's vocabulary of a `vocab.json`: its pieces but the `<pad>` the conversion
    appended as the last id."""
    if not isinstance(mapping, dict) or mapping.get("<pad>") != len(mapping) - 1:
        raise ImportFormatError(f"{path}: expected '<pad>' as the last id, as the Marian "
                                "conversion writes it")
    return pieces_by_id({piece: index for piece, index in mapping.items() if piece != "<pad>"},
                        path)


def _marian_options(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """Marian's model options of a Hugging Face Marian `config.json`."""
    activation = _ACTIVATIONS.get(config.get("activation_function", "swish"))
    if activation is None:
        raise ImportFormatError(f"{path}: activation_function "
                                f"{config.get('activation_function')!r} (swish, relu or gelu)")
    if config.get("encoder_attention_heads") != config.get("decoder_attention_heads") or (
            config.get("encoder_ffn_dim") != config.get("decoder_ffn_dim")):
        raise ImportFormatError(f"{path}: the encoder and decoder differ in heads or "
                                "feed-forward size (one of each only)")
    if not config.get("scale_embedding", True):
        raise ImportFormatError(f"{path}: scale_embedding false (Marian scales by "
                                "sqrt(d_model))")
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    return {"type": "transformer", "dim-emb": config["d_model"],
            "enc-depth": config["encoder_layers"], "dec-depth": config["decoder_layers"],
            "transformer-heads": config["encoder_attention_heads"],
            "transformer-dim-ffn": config["encoder_ffn_dim"],
            "transformer-ffn-activation": activation,
            # Hugging Face computes gelu exactly, as Marian has since v1.12.
            "version": "v1.12 (Hugging Face layout)",
            "transformer-preprocess": "", "transformer-postprocess": "dan",
            "transformer-postprocess-emb": "d", "tied-embeddings-all": shared,
            "tied-embeddings": bool(config.get("tie_word_embeddings", True))}


def _marian_arrays(tensors: dict[str, np.ndarray], config: dict[str, Any], path: Path,
                   source_size: int, target_size: int) -> dict[str, np.ndarray]:
    """Marian's arrays of Hugging Face's tensors: projections transposed back to `[in, out]`,
    the padding row dropped from the embeddings, the output layer and its bias."""
    def get(name: str) -> np.ndarray:
        if name not in tensors:
            raise ImportFormatError(f"{path}: tensor {name} is missing")
        return np.asarray(tensors[name], np.float32)

    arrays = {}
    for side, depth in (("encoder", config["encoder_layers"]),
                        ("decoder", config["decoder_layers"])):
        for index in range(depth):
            ours, theirs = f"{side}_l{index + 1}", f"model.{side}.layers.{index}"
            for attention, marian in _ATTENTIONS.items():
                if side == "encoder" and attention == "encoder_attn":
                    continue
                for projection, letter in _PROJECTIONS.items():
                    arrays[f"{ours}_{marian}_W{letter}"] = get(
                        f"{theirs}.{attention}.{projection}.weight").T
                    arrays[f"{ours}_{marian}_b{letter}"] = get(
                        f"{theirs}.{attention}.{projection}.bias")[None]
                norm = f"{theirs}.{attention}_layer_norm"
                arrays[f"{ours}_{marian}_Wo_ln_scale"] = get(f"{norm}.weight")[None]
                arrays[f"{ours}_{marian}_Wo_ln_bias"] = get(f"{norm}.bias")[None]
            for number in (1, 2):
                arrays[f"{ours}_ffn_W{number}"] = get(f"{theirs}.fc{number}.weight").T
                arrays[f"{ours}_ffn_b{number}"] = get(f"{theirs}.fc{number}.bias")[None]
            arrays[f"{ours}_ffn_ffn_ln_scale"] = get(f"{theirs}.final_layer_norm.weight")[None]
            arrays[f"{ours}_ffn_ffn_ln_bias"] = get(f"{theirs}.final_layer_norm.bias")[None]
    if config.get("share_encoder_decoder_embeddings", True):
        arrays["Wemb"] = _embedding_or_tied(tensors, ("model.shared.weight",
                                                      "model.encoder.embed_tokens.weight"),
                                            path)[:source_size]
    else:
        arrays["encoder_Wemb"] = get("model.encoder.embed_tokens.weight")[:source_size]
        arrays["decoder_Wemb"] = get("model.decoder.embed_tokens.weight")[:target_size]
    if not config.get("tie_word_embeddings", True):
        arrays["decoder_ff_logit_out_Wt"] = get("lm_head.weight")[:target_size]
    arrays["decoder_ff_logit_out_b"] = get("final_logits_bias")[:, :target_size]
    return arrays


def _embedding_or_tied(tensors: dict[str, np.ndarray], names: tuple[str, ...],
                       path: Path) -> np.ndarray:
    """The shared embedding matrix under the first of `names` the file holds (saving may keep
    one name of tied tensors only)."""
    for name in names:
        if name in tensors:
            return np.asarray(tensors[name], np.float32)
    raise ImportFormatError(f"{path}: none of the shared embedding tensors {list(names)}")
