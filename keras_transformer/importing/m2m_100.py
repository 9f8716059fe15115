"""NLLB-200 and M2M-100 models in the Hugging Face layout (`facebook/nllb-200-*`,
`facebook/m2m100_*`): `config.json` (`model_type` "m2m_100"), `model.safetensors` or shards
named by `model.safetensors.index.json`, `sentencepiece.bpe.model`, and the tokenizer's files:
NLLB's `tokenizer_config.json` / `special_tokens_map.json` (its language codes, `eng_Latn`),
M2M-100's `vocab.json` besides (its codes `__en__`).

Both are fairseq models, mapped onto `TransformerConfig` options:

| theirs | ours |
|---|---|
| pre-norm layers, a layer norm ending each stack | `norm="pre"` (`encoder_norm`, `decoder_norm`) |
| `activation_function` relu / gelu / swish | `activation` |
| `scale_embedding` | `scale_embedding` |
| sines then cosines at `10000^(-j/(d/2-1))`, from position `padding_idx + 1` = 2 | `sinusoid_layout="fairseq"`, `position_offset=2` |
| biases on every projection, `nn.LayerNorm`'s epsilon | `attention_bias=True`, `layer_norm_epsilon=1e-5` |
| one shared embedding tied to `lm_head` | `share_embeddings`, `tie_output` |

Their special ids are `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3; every other id keeps its
number in ours. Our padding reads their `<pad>`'s row, our UNK their `<unk>`'s, and both our
decoding start (BOS) and EOS their `</s>`'s (their decoder starts from `</s>`); their `<s>`,
which neither decoder input nor output holds, has no id of ours, and our padding and BOS get an
output bias of `NEVER_EMITTED_BIAS`: the softmax is theirs over the ids either can emit. A
SentencePiece piece's id is its `sentencepiece.bpe.model` id + 1 (NLLB; fairseq's offset) or
its `vocab.json` id (M2M-100); the language codes follow the pieces, in the order the tokenizer
lists them (`additional_special_tokens`), each an id of its own (`added_tokens_decoder` where the
folder gives one), NLLB's `<mask>` after them, and rows no token names get a piece
`<unused_ID>`.

A sentence is translated as theirs is: `[source code] pieces </s>` in the encoder, and a
translation forced to start with the target code (`forced_bos_token_id`): the model's languages
(`RunLanguages`, "target" placement, with the source language's token first in the source).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, TransformerConfig, UNK_ID
from keras_transformer.data.languages import RunLanguages
from keras_transformer.data.sentencepiece_pair import SPECIAL_PIECES
from keras_transformer.importing.imported_model import (NEVER_EMITTED_BIAS, ImportedModel,
                                                        ImportFormatError, ReadOnAccess,
                                                        RowBlocks, read_json,
                                                        safetensors_path)

SENTENCEPIECE_FILENAME = "sentencepiece.bpe.model"
THEIR_START, THEIR_PAD, THEIR_EOS, THEIR_UNK = 0, 1, 2, 3
NLLB_OFFSET = 1  # fairseq's: a SentencePiece id + 1 is NLLB's id
_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
_M2M_CODE = re.compile(r"__([A-Za-z][A-Za-z0-9_-]*)__")
# Where each of their rows goes in ours: their id of each of our special ids.
_THEIRS_OF_OURS = {PAD_ID: THEIR_PAD, UNK_ID: THEIR_UNK, BOS_ID: THEIR_EOS, EOS_ID: THEIR_EOS}
# Tensors a checkpoint may hold beside those read: copies of the tied embedding, and the
# sinusoids (computed, not learned).
_TIED_OR_COMPUTED = re.compile(r"lm_head\.weight|model\.(shared|(en|de)coder\.embed_tokens)"
                               r"\.weight|model\.(en|de)coder\.embed_positions\.weights?")


def read_m2m_100_folder(folder: str | Path) -> ImportedModel:
    """Reads a Hugging Face NLLB-200 or M2M-100 folder.

    Raises:
        ImportFormatError: naming the file and what we cannot import (NLLB-MoE's experts,
            another model type, a PyTorch `.bin` without safetensors, encoder and decoder of
            different shapes, a tokenizer that does not fit the embeddings, ...).
    """
    folder = Path(folder)
    config_path = folder / "config.json"
    config = read_json(config_path)
    _check_model_type(config, config_path)
    ours = _config(config, config_path)
    spm_path = folder / SENTENCEPIECE_FILENAME
    if not spm_path.is_file():
        raise ImportFormatError(f"{spm_path}: no such file (the model's SentencePiece model)")
    spm_model = spm_path.read_bytes()
    vocabulary_path = folder / "vocab.json"
    pieces, codes, tokenizer_files = _vocabulary(folder, spm_model, ours.vocab_size)
    weights_paths, tensors = read_safetensors(folder)
    arrays = _our_arrays(tensors, ours, weights_paths[0])
    languages = RunLanguages("target", codes, {code: pieces[index]
                                               for code, index in codes.items()},
                             source_language_token=True)
    return ImportedModel(
        config=ours, arrays=arrays, source_pieces=pieces, target_pieces=pieces,
        source_spm=spm_model, target_spm=spm_model,
        beam_size=int(config.get("num_beams") or 4),
        files=[config_path, *weights_paths, spm_path, *tokenizer_files]
        + ([vocabulary_path] if vocabulary_path.is_file() else []),
        options=config, languages=languages, licence=_licence(folder))


class SafetensorsFiles:
    """The tensors of safetensors files by name: their shapes read from the files' headers
    (`shapes`), a tensor's data when `read`, into memory of its own (not mapped: an import
    holds each tensor once), as float32.

    A safetensors file is an 8-byte little-endian header length, a JSON header (each tensor's
    dtype, shape and byte offsets after the header) and the tensors' bytes."""

    _DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}

    def __init__(self, paths: list[Path]):
        self.where: dict[str, tuple[Path, int, str, int]] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        for path in paths:
            size = path.stat().st_size
            try:
                with open(path, "rb") as handle:
                    length = int.from_bytes(handle.read(8), "little")
                    header = json.loads(handle.read(length)) if 0 < length < size else None
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                header = None
            if not isinstance(header, dict):
                raise ImportFormatError(f"{path}: not a readable safetensors file, truncated "
                                        "or corrupt (no header)")
            for name, entry in header.items():
                if name == "__metadata__":
                    continue
                begin, finish = entry["data_offsets"]
                if entry["dtype"] not in self._DTYPES:
                    raise ImportFormatError(f"{path}: tensor {name} is {entry['dtype']} "
                                            "(float32, float16 or bfloat16 only)")
                if 8 + length + finish > size:
                    raise ImportFormatError(f"{path}: truncated (tensor {name} ends past the "
                                            "file)")
                self.where[name] = (path, 8 + length + begin, entry["dtype"],
                                    int(np.prod(entry["shape"])))
                self.shapes[name] = tuple(entry["shape"])

    def read(self, name: str) -> np.ndarray:
        """The tensor `name` as float32."""
        return self.read_rows(name, 0, self.shapes[name][0] if self.shapes[name] else 1)

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows `start` to `stop` (along the first axis) of the tensor `name`, as float32."""
        path, offset, dtype, count = self.where[name]
        shape = self.shapes[name]
        row = count // shape[0] if shape else 1
        stop = min(stop, shape[0]) if shape else 1
        item = np.dtype(self._DTYPES[dtype]).itemsize
        values = np.fromfile(path, self._DTYPES[dtype], (stop - start) * row,
                             offset=offset + start * row * item)
        if dtype == "BF16":  # the upper half of a float32
            values = (values.astype(np.uint32) << 16).view(np.float32)
        return values.astype(np.float32, copy=False).reshape((stop - start, *shape[1:]))


def read_safetensors(folder: Path) -> tuple[list[Path], SafetensorsFiles]:
    """The tensors of `model.safetensors`, or of every shard `model.safetensors.index.json`
    names (read when asked for), and the files (ImportFormatError naming a missing, corrupt or
    PyTorch-only checkpoint)."""
    index_path = folder / "model.safetensors.index.json"
    if not index_path.is_file():
        path = safetensors_path(folder)
        return [path], SafetensorsFiles([path])
    index = read_json(index_path)
    shards = sorted(set((index.get("weight_map") or {}).values()))
    if not shards:
        raise ImportFormatError(f"{index_path}: no weight_map naming the shards")
    paths = [folder / shard for shard in shards]
    for path in paths:
        if not path.is_file():
            raise ImportFormatError(f"{path}: no such file (a shard {index_path.name} names)")
    return [index_path, *paths], SafetensorsFiles(paths)


def _check_model_type(config: dict[str, Any], path: Path) -> None:
    model_type = config.get("model_type")
    if model_type == "nllb-moe" or config.get("num_experts") or config.get("moe_layers"):
        raise ImportFormatError(f"{path}: NLLB-MoE (model_type {model_type!r}, mixture-of-"
                                "experts layers) cannot be imported: dense NLLB-200 and M2M-100 "
                                "models only")
    if model_type != "m2m_100":
        raise ImportFormatError(f"{path}: model_type {model_type!r} (NLLB-200 and M2M-100 "
                                "models are 'm2m_100'; Marian models have their own reader)")


def _config(config: dict[str, Any], path: Path) -> TransformerConfig:
    """Our `TransformerConfig` of an M2M-100 `config.json`."""
    def field(name: str) -> Any:
        if name not in config:
            raise ImportFormatError(f"{path}: no {name!r}")
        return config[name]

    refused = []
    activation = _ACTIVATIONS.get(config.get("activation_function", "relu"))
    if activation is None:
        refused.append(f"activation_function {config.get('activation_function')!r} (relu, "
                       "gelu or swish)")
    for ours, theirs in (("heads", "attention_heads"), ("feed-forward sizes", "ffn_dim")):
        if field(f"encoder_{theirs}") != field(f"decoder_{theirs}"):
            refused.append(f"encoder_{theirs} {config[f'encoder_{theirs}']} and decoder_"
                           f"{theirs} {config[f'decoder_{theirs}']} differ (one size of "
                           f"{ours} only)")
    wanted = {"pad_token_id": THEIR_PAD, "eos_token_id": THEIR_EOS,
              "decoder_start_token_id": THEIR_EOS}
    refused += [f"{name} {config[name]} (we need {value})" for name, value in wanted.items()
                if config.get(name, value) != value]
    if refused:
        raise ImportFormatError(f"{path}: cannot import: " + "; ".join(refused))
    return TransformerConfig(
        vocab_size=int(field("vocab_size")), num_layers=int(field("encoder_layers")),
        num_encoder_layers=int(field("encoder_layers")),
        num_decoder_layers=int(field("decoder_layers")), d_model=int(field("d_model")),
        d_ff=int(field("encoder_ffn_dim")), num_heads=int(field("encoder_attention_heads")),
        dropout=float(config.get("dropout", 0.1)),
        attention_dropout=float(config.get("attention_dropout", 0.0)), attention_bias=True,
        norm="pre", share_embeddings=True,
        tie_output=bool(config.get("tie_word_embeddings", True)),
        max_length=int(config.get("max_position_embeddings", 1024)), layer_norm_epsilon=1e-5,
        activation=activation, sinusoid_layout="fairseq", position_offset=THEIR_PAD + 1,
        scale_embedding=bool(config.get("scale_embedding", True)), output_bias=True)


# ------------------------------------------------------------------------------- vocabulary
def _vocabulary(folder: Path, spm_model: bytes, size: int
                ) -> tuple[list[str], dict[str, int], list[Path]]:
    """Our pieces by id (`size` of them), the language codes' ids, and the tokenizer files
    read: NLLB's pieces at their SentencePiece ids + 1, or M2M-100's at their `vocab.json`
    ids; the language codes after them."""
    import sentencepiece  # only here: reading a model is all the import needs of it

    processor = sentencepiece.SentencePieceProcessor(model_proto=spm_model)
    vocabulary_path = folder / "vocab.json"
    by_id: dict[int, str] = {}
    if vocabulary_path.is_file():  # M2M-100
        mapping = read_json(vocabulary_path)
        if not isinstance(mapping, dict) or not all(isinstance(index, int)
                                                    for index in mapping.values()):
            raise ImportFormatError(f"{vocabulary_path}: not a mapping of pieces to ids")
        by_id = {index: piece for piece, index in mapping.items()}
        if len(by_id) != len(mapping):
            raise ImportFormatError(f"{vocabulary_path}: two pieces share an id")
        first_added = len(mapping)
    else:  # NLLB: fairseq's offset over the SentencePiece ids (its <unk>, <s>, </s> left out)
        by_id = {index + NLLB_OFFSET: processor.id_to_piece(index)
                 for index in range(processor.get_piece_size())
                 if not (processor.is_control(index) or processor.is_unknown(index))}
        first_added = processor.get_piece_size() + NLLB_OFFSET
    tokens, added_ids, files = _added_tokens(folder)
    for number, token in enumerate(tokens):
        by_id[added_ids.get(token, first_added + number)] = token
    if "<mask>" not in added_ids and not vocabulary_path.is_file():
        by_id.setdefault(first_added + len(tokens), "<mask>")  # NLLB's, after its codes
    for token, index in added_ids.items():
        by_id.setdefault(index, token)
    where = vocabulary_path if vocabulary_path.is_file() else folder / SENTENCEPIECE_FILENAME
    beyond = sorted(index for index in by_id if not 0 <= index < size)
    if beyond:
        raise ImportFormatError(f"{where}: ids {beyond[:3]} of the tokenizer (e.g. "
                                f"{by_id[beyond[0]]!r}) are beyond the model's vocab_size "
                                f"{size}")
    for index in range(len(SPECIAL_PIECES)):
        by_id.pop(index, None)  # their specials: ours take these ids
    pieces = [*SPECIAL_PIECES, *(by_id.get(index, f"<unused_{index}>")
                                 for index in range(len(SPECIAL_PIECES), size))]
    if not tokens:
        raise ImportFormatError(f"{folder}: no language codes (additional_special_tokens in "
                                "tokenizer_config.json or special_tokens_map.json)")
    index = {piece: number for number, piece in enumerate(pieces)}
    if len(index) != len(pieces):
        raise ImportFormatError(f"{where}: a piece is at two ids")
    return pieces, {_language_code(token): index[token] for token in tokens}, files


def _added_tokens(folder: Path) -> tuple[list[str], dict[str, int], list[Path]]:
    """The language codes the tokenizer lists (`additional_special_tokens`, in order), the ids
    the folder gives added tokens (`added_tokens_decoder`, `added_tokens.json`), and the files
    read."""
    tokens: list[str] = []
    ids: dict[str, int] = {}
    files = []
    for name in ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"):
        path = folder / name
        if not path.is_file():
            continue
        files.append(path)
        record = read_json(path)
        if not isinstance(record, dict):
            raise ImportFormatError(f"{path}: not a JSON object")
        if name == "added_tokens.json":
            ids.update({str(token): int(index) for token, index in record.items()})
            continue
        for index, token in (record.get("added_tokens_decoder") or {}).items():
            ids[token["content"] if isinstance(token, dict) else str(token)] = int(index)
        listed = [token["content"] if isinstance(token, dict) else str(token)
                  for token in record.get("additional_special_tokens") or []]
        tokens = tokens or listed
    return tokens, ids, files


def _language_code(token: str) -> str:
    """The code a request names a language by: M2M-100's `__en__` is `en`, NLLB's `eng_Latn`
    itself."""
    match = _M2M_CODE.fullmatch(token)
    return match.group(1) if match else token


def _licence(folder: Path) -> Optional[str]:
    """The `license:` of the folder's `README.md` front matter (a Hugging Face model card),
    e.g. "cc-by-nc-4.0" for NLLB-200; None without one."""
    path = folder / "README.md"
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    front = re.match(r"---\n(.*?)\n---", text, re.S)
    found = re.search(r"^license:\s*(\S+)", front.group(1), re.M) if front else None
    return found.group(1).strip("'\"") if found else None


# ---------------------------------------------------------------------------------- weights
def _our_rows(matrix: np.ndarray) -> np.ndarray:
    """`matrix` (their rows, a fresh array) with the rows of our special ids set to theirs
    (`_THEIRS_OF_OURS`), in place; every other id keeps its own."""
    special = {theirs: matrix[theirs].copy() for theirs in set(_THEIRS_OF_OURS.values())}
    for ours, theirs in _THEIRS_OF_OURS.items():
        matrix[ours] = special[theirs]
    return matrix


_SPECIAL_ROWS = 1 + max(*_THEIRS_OF_OURS, *_THEIRS_OF_OURS.values())  # the rows both use


def _our_row_block(tensors: SafetensorsFiles, name: str, start: int, stop: int) -> np.ndarray:
    """Rows `start` to `stop` of `_our_rows` of the matrix `name`, reading those rows only (and
    the special ids' first rows when the block starts among them)."""
    if start >= _SPECIAL_ROWS:
        return tensors.read_rows(name, start, stop)
    return _our_rows(tensors.read_rows(name, 0, max(stop, _SPECIAL_ROWS)))[start:stop]


def _our_arrays(tensors: SafetensorsFiles, config: TransformerConfig,
                path: Path) -> ReadOnAccess:
    """Our weights by variable path from M2M-100's PyTorch tensors (`[out, in]` projections
    transposed), each read when it is asked for; ImportFormatError naming a tensor that is
    missing or misshapen, or one the model does not have, before any is read."""
    d, heads, key_dim, ours = config.d_model, config.num_heads, config.key_dim, {}
    used = set()

    def get(name: str, shape: tuple[int, ...], transposed: bool = False,
            rows: bool = False) -> Callable[[], np.ndarray]:
        if name not in tensors.shapes:
            raise ImportFormatError(f"{path}: tensor {name} is missing")
        stored = tensors.shapes[name]
        if int(np.prod(stored)) != int(np.prod(shape)):
            raise ImportFormatError(f"{path}: tensor {name} has shape {stored}, expected "
                                    f"{shape[::-1] if transposed else shape}")
        used.add(name)

        def read() -> np.ndarray | RowBlocks:
            if rows and not transposed:  # the embedding: a block of rows at a time
                return RowBlocks(shape, lambda start, stop: _our_row_block(
                    tensors, name, start, stop))
            array = tensors.read(name)
            if rows:
                array = _our_rows(array)
            if transposed:
                array = np.ascontiguousarray(array.T)
            return array.reshape(shape)
        return read

    def norm(prefix: str, theirs: str) -> None:
        ours[f"{prefix}/gamma"] = get(f"{theirs}.weight", (d,))
        ours[f"{prefix}/beta"] = get(f"{theirs}.bias", (d,))

    def attention(prefix: str, theirs: str) -> None:
        for part, dense in (("q", "query"), ("k", "key"), ("v", "value")):
            ours[f"{prefix}/{dense}/kernel"] = get(f"{theirs}.{part}_proj.weight",
                                                   (d, heads, key_dim), transposed=True)
            ours[f"{prefix}/{dense}/bias"] = get(f"{theirs}.{part}_proj.bias", (heads, key_dim))
        ours[f"{prefix}/output/kernel"] = get(f"{theirs}.out_proj.weight", (heads, key_dim, d),
                                              transposed=True)
        ours[f"{prefix}/output/bias"] = get(f"{theirs}.out_proj.bias", (d,))

    for side, depth in (("encoder", config.encoder_depth), ("decoder", config.decoder_depth)):
        for index in range(depth):
            prefix, theirs = f"{side}_layer_{index}", f"model.{side}.layers.{index}"
            sublayers = (("self", "self_attn"),) + (
                (("cross", "encoder_attn"),) if side == "decoder" else ())
            for sublayer, their_name in sublayers:
                attention(f"{prefix}/{sublayer}_attention", f"{theirs}.{their_name}")
                norm(f"{prefix}/{sublayer}_residual/layer_norm",
                     f"{theirs}.{their_name}_layer_norm")
            for ours_name, their_name, shape in (("inner", "fc1", (d, config.d_ff)),
                                                 ("outer", "fc2", (config.d_ff, d))):
                ours[f"{prefix}/feed_forward/{ours_name}/kernel"] = get(
                    f"{theirs}.{their_name}.weight", shape, transposed=True)
                ours[f"{prefix}/feed_forward/{ours_name}/bias"] = get(
                    f"{theirs}.{their_name}.bias", shape[1:])
            norm(f"{prefix}/feed_forward_residual/layer_norm", f"{theirs}.final_layer_norm")
        norm(f"{side}_norm", f"model.{side}.layer_norm")
    size = config.vocab_size
    tied_copies = ("model.shared.weight", "model.encoder.embed_tokens.weight",
                   "model.decoder.embed_tokens.weight") + (
                       ("lm_head.weight",) if config.tie_output else ())
    embedding_name = next((name for name in tied_copies if name in tensors.shapes),
                          tied_copies[0])
    ours["shared_embedding/embeddings"] = get(embedding_name, (size, d), rows=True)
    if not config.tie_output:
        ours["output_projection/kernel"] = get("lm_head.weight", (d, size), transposed=True,
                                               rows=True)
    bias = np.zeros([size], np.float32)
    bias[[PAD_ID, BOS_ID]] = NEVER_EMITTED_BIAS
    ours["output_bias"] = lambda: bias.copy()
    unread = sorted(name for name in tensors.shapes
                    if name not in used and not _TIED_OR_COMPUTED.fullmatch(name))
    if unread:
        raise ImportFormatError(f"{path}: cannot import tensors {unread[:3]}"
                                f"{' ...' if len(unread) > 3 else ''} (not of an M2M-100 model)")
    return ReadOnAccess(ours)
