"""NLLB-200 and M2M-100 models in the Hugging Face layout (`facebook/nllb-200-*`,
`facebook/m2m100_*`), fairseq models mapped onto `TransformerConfig` options, their ids onto ours.
The folder's files, the mapping and how a sentence is translated: docs/importing.md, "NLLB-200 and
M2M-100: many languages in one model".
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
                                                        RowBlocks, read_json, release_beam_size,
                                                        safetensors_path)

SENTENCEPIECE_FILENAME = "sentencepiece.bpe.model"
THEIR_START, THEIR_PAD, THEIR_EOS, THEIR_UNK = 0, 1, 2, 3
THEIR_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # by their ids
NLLB_OFFSET = 1  # fairseq's: a SentencePiece id + 1 is NLLB's id
_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
# The codes of M2M-100's tokenizer by its `language_codes`, in the order it numbers them (after
# the pieces of `vocab.json`).
M2M_100_LANGUAGE_CODES = {
    "m2m100": tuple(
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl "
        "gu ha he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml "
        "mn mr ms my ne nl no ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw ta th "
        "tl tn tr uk ur uz vi wo xh yi yo zh zu".split()),
    "wmt21": ("en", "ha", "is", "ja", "cs", "ru", "zh", "de")}
_M2M_CODE = re.compile(r"__([A-Za-z][A-Za-z0-9_-]*)__")
# Where each of their rows goes in ours: their id of each of our special ids.
_THEIRS_OF_OURS = {PAD_ID: THEIR_PAD, UNK_ID: THEIR_UNK, BOS_ID: THEIR_EOS, EOS_ID: THEIR_EOS}
# Tensors a checkpoint may hold beside those read: copies of the tied embedding, and the
# sinusoids (computed, not learned).
_TIED_OR_COMPUTED = re.compile(r"lm_head\.weight|model\.(shared|(en|de)coder\.embed_tokens)"
                               r"\.weight|model\.(en|de)coder\.embed_positions\.weights?")


def read_m2m_100_folder(folder: str | Path) -> ImportedModel:
    """Reads the Hugging Face NLLB-200 or M2M-100 folder `folder`. An `ImportFormatError` names
    the file and what we cannot import (NLLB-MoE's experts, another model type, a PyTorch `.bin`
    without safetensors, encoder and decoder of different shapes, a tokenizer that does not fit
    the embeddings, ...)."""
    folder = Path(folder)
    config_path = folder / "config.json"
    config = read_json(config_path)
    _check_model_type(config, config_path)
    ours = _config(config, config_path)
    spm_path = folder / SENTENCEPIECE_FILENAME
    if not spm_path.is_file():
        raise ImportFormatError(
            f"{spm_path}: no such file (the model's SentencePiece model" + (
                "; transformers 5 saves tokenizer.json without it: copy it from the folder the "
                "tokenizer was loaded from)" if (folder / "tokenizer.json").is_file() else ")"))
    spm_model = spm_path.read_bytes()
    vocabulary_path = folder / "vocab.json"
    pieces, codes, control, tokenizer_files = _vocabulary(folder, spm_model, ours.vocab_size)
    weights_paths, tensors = read_safetensors(folder)
    arrays = _M2M100Converter(tensors, ours, weights_paths[0]).arrays()
    languages = RunLanguages("target", codes, {code: pieces[index]
                                               for code, index in codes.items()},
                             source_language_token=True)
    beam_size, generation_files = release_beam_size(folder, config)
    return ImportedModel(
        config=ours, arrays=arrays, source_pieces=pieces, target_pieces=pieces,
        source_spm=spm_model, target_spm=spm_model, beam_size=beam_size,
        files=[config_path, *generation_files, *weights_paths, spm_path, *tokenizer_files]
        + ([vocabulary_path] if vocabulary_path.is_file() else []),
        options=config, languages=languages, licence=_licence(folder), control_pieces=control)


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
_TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                    "tokenizer.json")
_MASK = "<mask>"


def _vocabulary(folder: Path, spm_model: bytes, size: int
                ) -> tuple[list[str], dict[str, int], tuple[str, ...], list[Path]]:
    """Our pieces by id (`size` of them), the language codes' ids, the pieces that are not text
    (the codes, `<mask>`, `<unk>` and rows no token names: transformers' special tokens), and
    the tokenizer files read. Each token is at the id the folder's tokenizer gives it
    (`_stated_ids`), where it gives none at the released layout's: NLLB's pieces at their
    SentencePiece ids + 1, M2M-100's at their `vocab.json` ids, the codes after them (NLLB's
    `<mask>` after the codes)."""
    import sentencepiece  # only here: reading a model is all the import needs of it

    processor = sentencepiece.SentencePieceProcessor(model_proto=spm_model)
    records = {name: _tokenizer_record(folder / name) for name in _TOKENIZER_FILES
               if (folder / name).is_file()}
    stated = _stated_ids(folder, records)
    vocabulary_path = folder / "vocab.json"
    m2m = vocabulary_path.is_file()
    if m2m:
        mapping = read_json(vocabulary_path)
        if not isinstance(mapping, dict) or not all(isinstance(index, int)
                                                    for index in mapping.values()):
            raise ImportFormatError(f"{vocabulary_path}: not a mapping of pieces to ids")
        pieces_path, first_added = vocabulary_path, len(mapping)
    else:  # NLLB: fairseq's offset over the SentencePiece ids (its <unk>, <s>, </s> left out)
        mapping = {processor.id_to_piece(index): index + NLLB_OFFSET
                   for index in range(processor.get_piece_size())
                   if not (processor.is_control(index) or processor.is_unknown(index))}
        pieces_path, first_added = folder / SENTENCEPIECE_FILENAME, processor.get_piece_size() + 1
        if "tokenizer.json" in records:
            mapping = _tokenizer_json_pieces(folder, records["tokenizer.json"], mapping)
            pieces_path = folder / "tokenizer.json"
    where = {piece: pieces_path for piece in mapping}
    by_id = {index: piece for piece, index in mapping.items()}
    if len(by_id) != len(mapping):
        raise ImportFormatError(f"{pieces_path}: two pieces share an id")
    tokens = _language_tokens(folder, records, stated, m2m)
    released = {token: first_added + number for number, token in enumerate(tokens)}
    if not m2m:
        released[_MASK] = first_added + len(tokens)  # NLLB's, after its codes
    for token, index in released.items():
        if token in stated and m2m and stated[token][0] != index:
            raise ImportFormatError(
                f"{stated[token][1]}: {token!r} is id {stated[token][0]}, but M2M-100's "
                f"tokenizer numbers its codes after vocab.json's {first_added} pieces "
                f"(id {index})")
        stated.setdefault(token, (index, pieces_path))
    for token, (index, path) in stated.items():
        if index < len(SPECIAL_PIECES) and token in THEIR_SPECIALS:
            continue
        if by_id.setdefault(index, token) != token:
            raise ImportFormatError(f"{path}: {token!r} is id {index}, which "
                                    f"{where.get(by_id[index], pieces_path).name} gives "
                                    f"{by_id[index]!r}")
        where.setdefault(token, path)
    beyond = sorted(index for index in by_id if not 0 <= index < size)
    if beyond:
        token = by_id[beyond[0]]
        raise ImportFormatError(f"{where[token]}: ids {beyond[:3]} of the tokenizer (e.g. "
                                f"{token!r}) are beyond the model's vocab_size {size} "
                                "(config.json: the embedding's rows)")
    for index in range(len(SPECIAL_PIECES)):
        by_id.pop(index, None)  # their specials: ours take these ids
    pieces = [*SPECIAL_PIECES, *(by_id.get(index, f"<unused_{index}>")
                                 for index in range(len(SPECIAL_PIECES), size))]
    index = {piece: number for number, piece in enumerate(pieces)}
    if len(index) != len(pieces):
        raise ImportFormatError(f"{pieces_path}: a piece is at two ids")
    control = (SPECIAL_PIECES[UNK_ID], *(piece for number, piece in enumerate(pieces)
                                         if number >= len(SPECIAL_PIECES)
                                         and (piece in stated or number not in by_id)))
    files = [folder / name for name in records]
    return pieces, {_language_code(token): index[token] for token in tokens}, control, files


def _tokenizer_record(path: Path) -> dict[str, Any]:
    record = read_json(path)
    if not isinstance(record, dict):
        raise ImportFormatError(f"{path}: not a JSON object")
    return record


def _content(token: Any) -> str:
    """A token as the tokenizer files write it: a string, or an object with its `content`."""
    return token["content"] if isinstance(token, dict) else str(token)


def _stated_ids(folder: Path, records: dict[str, dict[str, Any]]
                ) -> dict[str, tuple[int, Path]]:
    """The id of each added token where the folder states one, and the file stating it:
    tokenizer.json's `added_tokens`, tokenizer_config.json's `added_tokens_decoder` (transformers
    4), `added_tokens.json`; ImportFormatError naming both files when two give a token
    different ids, or an id two tokens."""
    stated: dict[str, tuple[int, Path]] = {}
    owners: dict[int, tuple[str, Path]] = {}
    for name, entries in (
            ("tokenizer.json", [(entry.get("id"), entry.get("content")) for entry in
                                records.get("tokenizer.json", {}).get("added_tokens") or []]),
            ("tokenizer_config.json", [(index, _content(token)) for index, token in (
                records.get("tokenizer_config.json", {}).get("added_tokens_decoder")
                or {}).items()]),
            ("added_tokens.json", [(index, token) for token, index in
                                   records.get("added_tokens.json", {}).items()])):
        path = folder / name
        for index, token in entries:
            try:
                index = int(index)
            except (TypeError, ValueError):
                raise ImportFormatError(f"{path}: {token!r} has no id ({index!r})") from None
            if token in stated and stated[token][0] != index:
                raise ImportFormatError(f"{path}: {token!r} is id {index}, but "
                                        f"{stated[token][1].name} gives it id {stated[token][0]}")
            if index in owners and owners[index][0] != token:
                raise ImportFormatError(f"{path}: id {index} is {token!r}, but "
                                        f"{owners[index][1].name} gives it to "
                                        f"{owners[index][0]!r}")
            stated.setdefault(token, (index, path))
            owners.setdefault(index, (token, path))
    return stated


def _tokenizer_json_pieces(folder: Path, record: dict[str, Any], pieces: dict[str, int]
                           ) -> dict[str, int]:
    """The pieces' ids tokenizer.json's model gives them (ImportFormatError naming both files
    when its pieces are not sentencepiece.bpe.model's)."""
    vocabulary = (record.get("model") or {}).get("vocab")
    if not isinstance(vocabulary, dict):
        return pieces
    theirs = {piece: int(index) for piece, index in vocabulary.items()
              if piece not in THEIR_SPECIALS}
    if set(theirs) != set(pieces):
        extra, missing = sorted(set(theirs) - set(pieces)), sorted(set(pieces) - set(theirs))
        raise ImportFormatError(
            f"{folder / 'tokenizer.json'}: its pieces are not {SENTENCEPIECE_FILENAME}'s ("
            + "; ".join(part for part in (
                f"{len(extra)} not in it, e.g. {extra[0]!r}" if extra else "",
                f"{len(missing)} of it missing, e.g. {missing[0]!r}" if missing else "")
                        if part) + ")")
    return theirs


def _language_tokens(folder: Path, records: dict[str, dict[str, Any]],
                     stated: dict[str, tuple[int, Path]], m2m: bool) -> list[str]:
    """The language codes' tokens, in the tokenizer's order: NLLB's `extra_special_tokens`
    (transformers 5) or `additional_special_tokens` (transformers 4, tokenizer_config.json or
    special_tokens_map.json), else the special tokens tokenizer.json adds; M2M-100's
    `__xx__` of each code of its `language_codes` ("m2m100" without one), which a list the
    files give must equal."""
    listed, listed_in = [], folder
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        for key in ("extra_special_tokens", "additional_special_tokens"):
            value = records.get(name, {}).get(key)
            tokens = [_content(token) for token in (
                value.values() if isinstance(value, dict) else value or [])]
            if tokens and not listed:
                listed, listed_in = tokens, folder / name
    if m2m:
        path = folder / "tokenizer_config.json"
        name = records.get("tokenizer_config.json", {}).get("language_codes", "m2m100")
        if name not in M2M_100_LANGUAGE_CODES:
            raise ImportFormatError(f"{path}: language_codes {name!r} (M2M-100's tokenizer "
                                    f"knows {', '.join(M2M_100_LANGUAGE_CODES)})")
        tokens = [f"__{code}__" for code in M2M_100_LANGUAGE_CODES[name]]
        codes_listed = [token for token in listed if _M2M_CODE.fullmatch(token)]
        if codes_listed and codes_listed != tokens:
            raise ImportFormatError(
                f"{listed_in}: its language codes ({len(codes_listed)}, {codes_listed[0]} "
                f"first) are not those of language_codes {name!r} ({len(tokens)}, {tokens[0]} "
                "first), which M2M-100's tokenizer numbers")
        return tokens
    if not listed:
        listed = [token for token, _ in sorted(stated.items(), key=lambda item: item[1][0])
                  if token not in THEIR_SPECIALS and token != _MASK]
    if not listed:
        raise ImportFormatError(f"{folder}: no language codes (extra_special_tokens or "
                                "additional_special_tokens in tokenizer_config.json or "
                                "special_tokens_map.json, or added_tokens in tokenizer.json)")
    return listed


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


class _M2M100Converter:
    """Our weights by variable path from M2M-100's PyTorch `tensors` (`[out, in]` projections
    transposed) for a model of `config`, each read when it is asked for; one method per
    sublayer, each giving its sublayer's under our path `prefix` from their names starting
    `theirs`; ImportFormatError naming `path` and a tensor that is missing or misshapen, or one
    the model does not have, before any is read. `arrays()` gives them all."""

    def __init__(self, tensors: SafetensorsFiles, config: TransformerConfig, path: Path):
        self.tensors, self.config, self.path = tensors, config, path
        self.used: set[str] = set()  # the tensors asked for

    def get(self, name: str, shape: tuple[int, ...], transposed: bool = False,
            rows: bool = False) -> Callable[[], np.ndarray | RowBlocks]:
        """A reader of their tensor `name` as `shape` (`transposed` first; `rows`: in our ids'
        order, an embedding read a block of rows at a time)."""
        tensors = self.tensors
        if name not in tensors.shapes:
            raise ImportFormatError(f"{self.path}: tensor {name} is missing")
        stored = tensors.shapes[name]
        if int(np.prod(stored)) != int(np.prod(shape)):
            raise ImportFormatError(f"{self.path}: tensor {name} has shape {stored}, expected "
                                    f"{shape[::-1] if transposed else shape}")
        self.used.add(name)

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

    def layer_norm(self, prefix: str, theirs: str) -> dict[str, Callable]:
        """The layer norm `theirs`."""
        d = self.config.d_model
        return {f"{prefix}/gamma": self.get(f"{theirs}.weight", (d,)),
                f"{prefix}/beta": self.get(f"{theirs}.bias", (d,))}

    def attention(self, prefix: str, sublayer: str, theirs: str) -> dict[str, Callable]:
        """The `sublayer` ("self" or "cross") attention of our layer `prefix` and its
        residual's layer norm."""
        d, heads, key_dim = self.config.d_model, self.config.num_heads, self.config.key_dim
        ours, weights = f"{prefix}/{sublayer}_attention", {}
        for part, dense in (("q", "query"), ("k", "key"), ("v", "value")):
            weights[f"{ours}/{dense}/kernel"] = self.get(f"{theirs}.{part}_proj.weight",
                                                         (d, heads, key_dim), transposed=True)
            weights[f"{ours}/{dense}/bias"] = self.get(f"{theirs}.{part}_proj.bias",
                                                       (heads, key_dim))
        weights[f"{ours}/output/kernel"] = self.get(f"{theirs}.out_proj.weight",
                                                    (heads, key_dim, d), transposed=True)
        weights[f"{ours}/output/bias"] = self.get(f"{theirs}.out_proj.bias", (d,))
        return {**weights, **self.layer_norm(f"{prefix}/{sublayer}_residual/layer_norm",
                                             f"{theirs}_layer_norm")}

    def feed_forward(self, prefix: str, theirs: str) -> dict[str, Callable]:
        """The feed-forward sublayer of our layer `prefix` and its residual's layer norm."""
        d, weights = self.config.d_model, {}
        for ours, their_name, shape in (("inner", "fc1", (d, self.config.d_ff)),
                                        ("outer", "fc2", (self.config.d_ff, d))):
            weights[f"{prefix}/feed_forward/{ours}/kernel"] = self.get(
                f"{theirs}.{their_name}.weight", shape, transposed=True)
            weights[f"{prefix}/feed_forward/{ours}/bias"] = self.get(
                f"{theirs}.{their_name}.bias", shape[1:])
        return {**weights, **self.layer_norm(f"{prefix}/feed_forward_residual/layer_norm",
                                             f"{theirs}.final_layer_norm")}

    def encoder_layer(self, prefix: str, theirs: str) -> dict[str, Callable]:
        """An encoder layer: self-attention and feed-forward."""
        return {**self.attention(prefix, "self", f"{theirs}.self_attn"),
                **self.feed_forward(prefix, theirs)}

    def decoder_layer(self, prefix: str, theirs: str) -> dict[str, Callable]:
        """A decoder layer: self-attention, encoder-decoder attention and feed-forward."""
        return {**self.attention(prefix, "self", f"{theirs}.self_attn"),
                **self.attention(prefix, "cross", f"{theirs}.encoder_attn"),
                **self.feed_forward(prefix, theirs)}

    def embeddings(self) -> dict[str, Callable]:
        """The shared embedding, from whichever of its tied copies the files hold."""
        config = self.config
        tied_copies = ("model.shared.weight", "model.encoder.embed_tokens.weight",
                       "model.decoder.embed_tokens.weight") + (
                           ("lm_head.weight",) if config.tie_output else ())
        embedding_name = next((name for name in tied_copies if name in self.tensors.shapes),
                              tied_copies[0])
        return {"shared_embedding/embeddings": self.get(
            embedding_name, (config.vocab_size, config.d_model), rows=True)}

    def output(self) -> dict[str, Callable]:
        """The output projection when not tied, and the output bias that keeps PAD and BOS
        from being generated."""
        config, size, weights = self.config, self.config.vocab_size, {}
        if not config.tie_output:
            weights["output_projection/kernel"] = self.get(
                "lm_head.weight", (config.d_model, size), transposed=True, rows=True)
        bias = np.zeros([size], np.float32)
        bias[[PAD_ID, BOS_ID]] = NEVER_EMITTED_BIAS
        weights["output_bias"] = lambda: bias.copy()
        return weights

    def arrays(self) -> ReadOnAccess:
        """All of our model's weights."""
        weights = {}
        for side, depth, layer in (("encoder", self.config.encoder_depth, self.encoder_layer),
                                   ("decoder", self.config.decoder_depth, self.decoder_layer)):
            for index in range(depth):
                weights.update(layer(f"{side}_layer_{index}", f"model.{side}.layers.{index}"))
            weights.update(self.layer_norm(f"{side}_norm", f"model.{side}.layer_norm"))
        weights.update({**self.embeddings(), **self.output()})
        unread = sorted(name for name in self.tensors.shapes
                        if name not in self.used and not _TIED_OR_COMPUTED.fullmatch(name))
        if unread:
            raise ImportFormatError(f"{self.path}: cannot import tensors {unread[:3]}"
                                    f"{' ...' if len(unread) > 3 else ''} (not of an M2M-100 "
                                    "model)")
        return ReadOnAccess(weights)
