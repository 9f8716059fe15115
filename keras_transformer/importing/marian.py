"""Marian transformer models (OPUS-MT release folders: `decoder.yml`, the `.npz` weights with the
model's options as YAML in its `special:model.yml` entry, the vocabulary YAML file(s), `source.spm`
and `target.spm`) as our config, weights and tokenizer. How Marian's options map onto
`TransformerConfig` and its ids onto ours, and where the import follows the converters rather than
Marian's own code: docs/importing.md, "What is read, and how".
"""
from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any, Optional

import numpy as np
import yaml

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, TransformerConfig, UNK_ID
from keras_transformer.data.sentencepiece_pair import SPECIAL_PIECES
from keras_transformer.importing.imported_model import (NEVER_EMITTED_BIAS, ImportedModel,
                                                        ImportFormatError)

MARIAN_EOS, MARIAN_UNK = 0, 1
LANGUAGE_TOKEN = re.compile(r">>[^<>\s]+<<")

# Options whose values we cannot represent, with the value that we can.
_REQUIRED = {"transformer-decoder-autoreg": "self-attention", "transformer-tied-layers": [],
             "transformer-no-projection": False, "right-left": False, "ulr": False,
             "output-omit-bias": False, "transformer-no-bias": False,
             "transformer-no-affine": False, "lemma-dim-emb": 0}
_NORMS = {("", "dan", ""): "post", ("n", "da", "n"): "pre"}
_EMBEDDING_NORMS = {"": False, "d": False, "n": True, "nd": True, "dn": True}
_REFUSED_WEIGHTS = (("factor_", "factored vocabularies"), ("_Wemb_lemma", "factored vocabularies"),
                    ("_rms_", "RMS normalization"), ("ffn_W3", "a feed-forward depth of 3"),
                    ("_QuantMult", "quantized weights"))


def read_marian_folder(folder: str | Path) -> ImportedModel:
    """Reads and checks the Marian release folder `folder` (`decoder.yml`, the `.npz`, its
    vocabularies, `source.spm`, `target.spm`). An `ImportFormatError` names the file and the
    option, weight or piece we cannot import (an SSRU/RNN or average-attention decoder, tied
    layers, factors, a vocabulary that does not fit the embeddings or the SentencePiece models, a
    corrupt file)."""
    folder = Path(folder)
    decoder_yml = folder / "decoder.yml"
    decoder = _read_yaml(decoder_yml)
    models, vocabularies = decoder.get("models") or [], decoder.get("vocabs") or []
    if len(models) != 1 or len(vocabularies) not in (1, 2):
        raise ImportFormatError(f"{decoder_yml}: needs one model and one or two vocabularies, "
                                f"found models {models} and vocabs {vocabularies}")
    npz_path = folder / models[0]
    arrays = _read_npz(npz_path)
    options = _model_options(arrays.pop("special:model.yml", None), npz_path)
    vocabulary_paths = [folder / vocabularies[0], folder / vocabularies[-1]]
    return marian_model(options, arrays, npz_path,
                        [_read_vocabulary(path) for path in vocabulary_paths], vocabulary_paths,
                        beam_size=int(decoder.get("beam-size", 4)), extra_files=[decoder_yml])


def marian_model(options: dict[str, Any], arrays: dict[str, np.ndarray], weights_path: Path,
                 vocabularies: list[list[str]], vocabulary_paths: list[Path], beam_size: int,
                 extra_files: list[Path]) -> ImportedModel:
    """A Marian model in our terms, checked, from its `options` (Marian's model options,
    `special:model.yml`'s keys) and `arrays` (the weights under Marian's parameter names, however
    stored, read from `weights_path`, which errors name), its `vocabularies` (the source and the
    target vocabulary, pieces in Marian's id order, the same list for a joint one, read from
    `vocabulary_paths`) and the folder's `source.spm` and `target.spm`. `beam_size` is the
    release's search setting; `extra_files` are the other files read (recorded with the model)."""
    folder = weights_path.parent
    spm_models = [_read_bytes(folder / name) for name in ("source.spm", "target.spm")]
    for vocabulary, path in zip(vocabularies, vocabulary_paths):
        _check_pieces_in_sentencepiece(vocabulary, path, spm_models)
    config = _config(options, arrays, weights_path, len(vocabularies[0]), len(vocabularies[1]))
    return ImportedModel(
        config=config, arrays=_MarianConverter(arrays, config, weights_path).arrays(),
        source_pieces=_our_pieces(vocabularies[0]), target_pieces=_our_pieces(vocabularies[1]),
        source_spm=spm_models[0], target_spm=spm_models[1], beam_size=beam_size,
        files=[*extra_files, weights_path, *dict.fromkeys(vocabulary_paths),
               folder / "source.spm", folder / "target.spm"],
        options=options)


# ------------------------------------------------------------------------------ reading files
def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise ImportFormatError(f"{path}: no such file")
    return path.read_bytes()


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        value = yaml.safe_load(_read_bytes(path).decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ImportFormatError(f"{path}: not valid YAML ({error})") from None
    if not isinstance(value, dict):
        raise ImportFormatError(f"{path}: not a YAML mapping")
    return value


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    _read_bytes(path)  # names a missing file
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as error:
        raise ImportFormatError(f"{path}: not a readable .npz archive, truncated or corrupt "
                                f"({error})") from None


def _model_options(entry: np.ndarray | None, path: Path) -> dict[str, Any]:
    """The `special:model.yml` entry: YAML bytes with trailing NULs (one, or padding)."""
    if entry is None:
        raise ImportFormatError(f"{path}: no 'special:model.yml' entry (not a Marian model)")
    text = entry.astype(np.uint8).tobytes().rstrip(b"\0").decode("utf-8", "replace")
    try:
        options = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ImportFormatError(f"{path}: special:model.yml is not valid YAML ({error})") from None
    if not isinstance(options, dict):
        raise ImportFormatError(f"{path}: special:model.yml is not a YAML mapping")
    return options


def _read_vocabulary(path: Path) -> list[str]:
    """The pieces of a Marian vocabulary file in id order (ids 0 .. V-1, `</s>` 0, `<unk>` 1).
    Keys are read as strings (YAML's base loader: `yes` stays "yes")."""
    try:
        mapping = yaml.load(_read_bytes(path).decode("utf-8"), Loader=yaml.BaseLoader)
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ImportFormatError(f"{path}: not a valid vocabulary YAML file ({error})") from None
    return pieces_by_id(mapping, path)


def pieces_by_id(mapping: Any, path: Path) -> list[str]:
    """The pieces of a vocabulary `mapping` (piece -> id, read from `path`) in id order,
    checked: ids 0 .. V-1, each once, `</s>` 0 and `<unk>` 1."""
    if not isinstance(mapping, dict) or not mapping:
        raise ImportFormatError(f"{path}: not a mapping of pieces to ids")
    try:
        by_id = {int(index): piece for piece, index in mapping.items()}
    except ValueError:
        raise ImportFormatError(f"{path}: ids must be integers") from None
    if sorted(by_id) != list(range(len(mapping))):
        raise ImportFormatError(f"{path}: ids are not 0 .. {len(mapping) - 1}, each once")
    if by_id[MARIAN_EOS] != "</s>" or by_id[MARIAN_UNK] != "<unk>":
        raise ImportFormatError(f"{path}: id 0 must be '</s>' and id 1 '<unk>', found "
                                f"{by_id[MARIAN_EOS]!r} and {by_id[MARIAN_UNK]!r}")
    return [by_id[index] for index in range(len(by_id))]


def _check_pieces_in_sentencepiece(pieces: list[str], path: Path,
                                   spm_models: list[bytes]) -> None:
    """Every piece of the vocabulary (but `</s>`, `<unk>` and `>>xx<<` language tokens) must be
    a piece of one of the SentencePiece models: else the vocabulary is another model's."""
    import sentencepiece  # only here: reading a model is all the import needs of it

    known = set()
    for spm_model in spm_models:
        processor = sentencepiece.SentencePieceProcessor(model_proto=spm_model)
        known.update(processor.id_to_piece(index) for index in range(processor.get_piece_size()))
    foreign = [piece for piece in pieces[2:]
               if piece not in known and not LANGUAGE_TOKEN.fullmatch(piece)]
    if foreign:
        raise ImportFormatError(f"{path}: {len(foreign)} pieces are not in its SentencePiece "
                                f"model (e.g. {foreign[:3]}): the vocabulary does not match "
                                "source.spm/target.spm")


# ------------------------------------------------------------------------ options to config
def _config(options: dict[str, Any], arrays: dict[str, np.ndarray], path: Path,
            source_size: int, target_size: int) -> TransformerConfig:
    """Our `TransformerConfig` of Marian's `options`, checked against the weights' shapes."""
    def option(name: str, default: Any) -> Any:
        return options.get(name, default)

    refused = [f"{name}: {option(name, wanted)!r} (we need {wanted!r})"
               for name, wanted in _REQUIRED.items() if option(name, wanted) not in (wanted, None)]
    if option("type", "amun") != "transformer":
        refused.append(f"type: {option('type', 'amun')!r} (only 'transformer' models)")
    for name in ("transformer-ffn-depth", "transformer-decoder-ffn-depth"):
        if int(option(name, 2) or 2) != 2:
            refused.append(f"{name}: {option(name, 2)} (two linear maps only)")
    if option("factors-dim-emb", 0) not in (0, None):
        refused.append(f"factors-dim-emb: {option('factors-dim-emb', 0)} (factored "
                       "vocabularies)")
    if option("transformer-attention-mask", "") not in ("", None):
        refused.append(f"transformer-attention-mask: "
                       f"{option('transformer-attention-mask', '')!r}")
    norm = _NORMS.get((option("transformer-preprocess", "") or "",
                       option("transformer-postprocess", "dan") or "",
                       option("transformer-postprocess-top", "") or ""))
    if norm is None:
        refused.append("transformer-preprocess/-postprocess/-postprocess-top: "
                       f"{option('transformer-preprocess', '')!r}/"
                       f"{option('transformer-postprocess', 'dan')!r}/"
                       f"{option('transformer-postprocess-top', '')!r} (post-norm ''/dan/'' "
                       "or pre-norm n/da/n only)")
    embedding_norm = _EMBEDDING_NORMS.get(option("transformer-postprocess-emb", "d") or "")
    if embedding_norm is None:
        refused.append(f"transformer-postprocess-emb: "
                       f"{option('transformer-postprocess-emb', 'd')!r}")
    activation = _activation(option("transformer-ffn-activation", "swish"),
                             str(option("version", "")))
    if activation is None:
        refused.append(f"transformer-ffn-activation: "
                       f"{option('transformer-ffn-activation', 'swish')!r}")
    refused += [f"weight {name} ({what})" for name in arrays for part, what in _REFUSED_WEIGHTS
                if part in name]
    refused += [f"weight {name}: dtype {array.dtype} (float32 weights only)"
                for name, array in arrays.items() if array.dtype != np.float32][:3]
    if refused:
        raise ImportFormatError(f"{path}: cannot import: " + "; ".join(refused))

    share = "Wemb" in arrays
    tie_output = bool(option("tied-embeddings", False) or option("tied-embeddings-all", False))
    source_rows = arrays["Wemb" if share else "encoder_Wemb"].shape[0]
    target_rows = arrays["Wemb" if share else "decoder_Wemb"].shape[0]
    if (source_rows, target_rows) != (source_size, target_size):
        raise ImportFormatError(f"{path}: embeddings of {source_rows}/{target_rows} rows but "
                                f"vocabularies of {source_size}/{target_size} pieces")
    if "Wpos" in arrays:
        positional = {"positional": "learned", "max_length": int(arrays["Wpos"].shape[0])}
    else:
        positional = {"positional": "sinusoidal", "sinusoid_layout": "halves",
                      "max_length": 512}
    return TransformerConfig(
        vocab_size=source_size + 2, target_vocab_size=None if share else target_size + 2,
        num_layers=int(option("enc-depth", 1)), num_encoder_layers=int(option("enc-depth", 1)),
        num_decoder_layers=int(option("dec-depth", 1)), d_model=int(option("dim-emb", 512)),
        d_ff=int(arrays["encoder_l1_ffn_W1"].shape[1]),
        num_heads=int(option("transformer-heads", 8)), dropout=0.1, attention_dropout=0.0,
        attention_bias=True, norm=norm, share_embeddings=share, tie_output=tie_output,
        layer_norm_epsilon=1e-6, activation=activation, embedding_norm=embedding_norm,
        output_bias=True, **positional)


def _activation(name: str, version: str) -> str | None:
    """Our name of Marian's feed-forward activation: `gelu` was `x sigmoid(1.702 x)` before
    Marian v1.12 and the exact form since."""
    if name == "gelu":
        found = re.match(r"v?(\d+)\.(\d+)", version)
        return "gelu" if found and tuple(map(int, found.groups())) >= (1, 12) else "gelu_sigmoid"
    return name if name in ("swish", "relu") else None


# ------------------------------------------------------------------------ weights to ours
def _our_pieces(pieces: list[str]) -> list[str]:
    """Our vocabulary: our reserved pieces, then Marian's after its `</s>` and `<unk>`."""
    return [*SPECIAL_PIECES, *pieces[2:]]


def _our_rows(matrix: np.ndarray, fill: float = 0.0) -> np.ndarray:
    """Rows (or entries) of Marian's ids in our order: padding and start `fill`, then `<unk>`,
    `</s>` and Marian's other pieces (`_our_pieces`)."""
    rows = np.full((matrix.shape[0] + 2, *matrix.shape[1:]), fill, matrix.dtype)
    rows[UNK_ID], rows[EOS_ID], rows[4:] = matrix[MARIAN_UNK], matrix[MARIAN_EOS], matrix[2:]
    assert PAD_ID == 0 and BOS_ID == 2 and EOS_ID == 3  # the order `_our_pieces` writes
    return rows


class _MarianConverter:
    """Our weights by variable path (`Transformer` variable `.path`) of a model of `config` from
    Marian's `arrays`, one method per sublayer, each giving its sublayer's under our path
    `prefix` from Marian's names starting `marian`; an `ImportFormatError` names `path` and a
    weight the model needs that is missing or misshapen. `arrays()` gives them all."""

    def __init__(self, arrays: dict[str, np.ndarray], config: TransformerConfig, path: Path):
        self.theirs, self.config, self.path = arrays, config, path
        self.pre = "_pre" if config.norm == "pre" else ""  # the layers' norms' suffix

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Marian's weight `name` as `shape`."""
        if name not in self.theirs:
            raise ImportFormatError(f"{self.path}: weight {name} is missing")
        array = self.theirs[name]
        if array.size != int(np.prod(shape)):
            raise ImportFormatError(f"{self.path}: weight {name} has shape {array.shape}, "
                                    f"expected {shape}")
        return array.reshape(shape)

    def layer_norm(self, prefix: str, marian: str,
                   suffix: Optional[str] = None) -> dict[str, np.ndarray]:
        """The layer norm `marian` (its names ending `suffix`; default: the layers' norms')."""
        suffix = self.pre if suffix is None else suffix
        d = self.config.d_model
        return {f"{prefix}/gamma": self.get(f"{marian}_scale{suffix}", (d,)),
                f"{prefix}/beta": self.get(f"{marian}_bias{suffix}", (d,))}

    def attention(self, prefix: str, sublayer: str, marian: str) -> dict[str, np.ndarray]:
        """The `sublayer` ("self" or "cross") attention of our layer `prefix` and its
        residual's layer norm."""
        d, heads, key_dim = self.config.d_model, self.config.num_heads, self.config.key_dim
        ours, weights = f"{prefix}/{sublayer}_attention", {}
        for part, dense in (("q", "query"), ("k", "key"), ("v", "value")):
            weights[f"{ours}/{dense}/kernel"] = self.get(f"{marian}_W{part}", (d, heads, key_dim))
            weights[f"{ours}/{dense}/bias"] = self.get(f"{marian}_b{part}", (heads, key_dim))
        weights[f"{ours}/output/kernel"] = self.get(f"{marian}_Wo", (heads, key_dim, d))
        weights[f"{ours}/output/bias"] = self.get(f"{marian}_bo", (d,))
        return {**weights, **self.layer_norm(f"{prefix}/{sublayer}_residual/layer_norm",
                                             f"{marian}_Wo_ln")}

    def feed_forward(self, prefix: str, marian: str) -> dict[str, np.ndarray]:
        """The feed-forward sublayer of our layer `prefix` and its residual's layer norm."""
        d, d_ff = self.config.d_model, self.config.d_ff
        weights = {f"{prefix}/feed_forward/{ours}": self.get(f"{marian}_ffn_{theirs}", shape)
                   for ours, theirs, shape in (("inner/kernel", "W1", (d, d_ff)),
                                               ("inner/bias", "b1", (d_ff,)),
                                               ("outer/kernel", "W2", (d_ff, d)),
                                               ("outer/bias", "b2", (d,)))}
        return {**weights, **self.layer_norm(f"{prefix}/feed_forward_residual/layer_norm",
                                             f"{marian}_ffn_ffn_ln")}

    def encoder_layer(self, prefix: str, marian: str) -> dict[str, np.ndarray]:
        """An encoder layer: self-attention and feed-forward."""
        return {**self.attention(prefix, "self", f"{marian}_self"),
                **self.feed_forward(prefix, marian)}

    def decoder_layer(self, prefix: str, marian: str) -> dict[str, np.ndarray]:
        """A decoder layer: self-attention, encoder-decoder attention (Marian's "context")
        and feed-forward."""
        return {**self.attention(prefix, "self", f"{marian}_self"),
                **self.attention(prefix, "cross", f"{marian}_context"),
                **self.feed_forward(prefix, marian)}

    def norms(self) -> dict[str, np.ndarray]:
        """The stacks' final layer norms (pre-norm) and the embeddings' layer norms."""
        weights = {}
        if self.config.norm == "pre":  # the top layer norms have no `_pre`
            weights.update({**self.layer_norm("encoder_norm", "encoder_top_ln", suffix=""),
                            **self.layer_norm("decoder_norm", "decoder_top_ln", suffix="")})
        if self.config.embedding_norm:  # the embeddings' layer norms always have it
            weights.update({
                **self.layer_norm("source_embedding_norm", "encoder_emb_ln", suffix="_pre"),
                **self.layer_norm("target_embedding_norm", "decoder_emb_ln", suffix="_pre")})
        return weights

    def embeddings(self) -> dict[str, np.ndarray]:
        """The token embeddings (shared or not), their rows in our ids' order (`_our_rows`)."""
        theirs = self.theirs
        if self.config.share_embeddings:
            return {"shared_embedding/embeddings": _our_rows(self.get("Wemb",
                                                                      theirs["Wemb"].shape))}
        return {"source_embedding/embeddings": _our_rows(theirs["encoder_Wemb"]),
                "target_embedding/embeddings": _our_rows(theirs["decoder_Wemb"])}

    def output(self) -> dict[str, np.ndarray]:
        """The output projection (when not tied) and the output bias, in our ids' order."""
        d, target_size = self.config.d_model, self.config.target_vocab_size - 2
        weights = {}
        if not self.config.tie_output:
            if "decoder_ff_logit_out_Wt" in self.theirs:
                kernel = self.get("decoder_ff_logit_out_Wt", (target_size, d))
            else:
                kernel = self.get("decoder_ff_logit_out_W", (d, target_size)).T
            weights["output_projection/kernel"] = _our_rows(kernel).T
        weights["output_bias"] = _our_rows(self.get("decoder_ff_logit_out_b", (target_size,)),
                                           fill=NEVER_EMITTED_BIAS)
        return weights

    def arrays(self) -> dict[str, np.ndarray]:
        """All of our model's weights (the learned positions, if any, as Marian's)."""
        config, weights = self.config, {}
        for index in range(config.encoder_depth):
            weights.update(self.encoder_layer(f"encoder_layer_{index}", f"encoder_l{index + 1}"))
        for index in range(config.decoder_depth):
            weights.update(self.decoder_layer(f"decoder_layer_{index}", f"decoder_l{index + 1}"))
        weights.update({**self.norms(), **self.embeddings(), **self.output()})
        if config.positional == "learned":
            weights["source_positions/table"] = weights["target_positions/table"] = (
                self.theirs["Wpos"])
        return weights
