"""Random NLLB-200 and M2M-100 model folders in the Hugging Face layout, for the importer's tests
and the parity run against transformers (`benchmarks/transformers_parity.py`).

`write_m2m_100_folder` writes what `facebook/nllb-200-*` or `facebook/m2m100_*` holds:
`config.json` (`model_type` "m2m_100"), `model.safetensors` (random weights under
`M2M100ForConditionalGeneration`'s names, PyTorch `[out, in]` projections; or two shards and
their index), `sentencepiece.bpe.model` (a tiny BPE model trained on
`marian_models.training_sentences`), and the tokenizer's files as transformers 4 writes them
(`layout="transformers4"`): NLLB's `tokenizer_config.json` (language codes as
`additional_special_tokens`, ids in `added_tokens_decoder`) and `special_tokens_map.json`, or
M2M-100's `vocab.json` (pieces in an order of their own, not the SentencePiece model's) with
codes `__xx__`; or as transformers 5 writes them (`layout="transformers5"`): NLLB's codes as
`extra_special_tokens` of `tokenizer_config.json` and every added token's id in
`tokenizer.json`'s `added_tokens` (no special_tokens_map.json), M2M-100's codes by
`language_codes` "m2m100" alone. `mask_first`: NLLB's `<mask>` before the codes (the tokenizer
transformers 5 builds from a SentencePiece model), not after them (the released models').
Both leave rows no token names at the end, as the released models do (NLLB: 2, M2M-100: its 8
`madeupword`s).

The transformers 5 layout was checked against folders transformers 5.25 wrote
(`NllbTokenizer.from_pretrained` of a SentencePiece model with `extra_special_tokens`,
`M2M100Tokenizer(language_codes="m2m100")`, `save_pretrained`): the same files and keys, and
the same ids for every token. Two differences, neither read by the import: tokenizer.json's BPE
`merges` are left empty and its normalizer carries no `precompiled_charsmap`; and
`sentencepiece.bpe.model` is written beside it, which transformers 5 does not save (a folder
downloaded from the Hub has it; benchmarks/m2m_100_parity.py copies it).
"""
import json
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional

import numpy as np
import sentencepiece as spm

from keras_transformer.importing.m2m_100 import M2M_100_LANGUAGE_CODES
from marian_models import training_sentences

THEIR_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # fairseq's ids 0-3
NLLB_LANGUAGES = ("eng_Latn", "fra_Latn", "deu_Latn", "zho_Hans", "zho_Hant")
M2M_LANGUAGES = M2M_100_LANGUAGE_CODES["m2m100"]  # in the order its tokenizer numbers them


@dataclass(frozen=True)
class M2MVariant:
    """One model: `style` "nllb" or "m2m100" (the vocabulary's layout and language codes),
    the depths and sizes, `scale_embedding`, `activation`, `sharded` (two safetensors files and
    an index), `vocab_size` the embedding's rows (None: the tokenizer's tokens and the rows the
    released models leave after them; more rows name no token)."""

    style: str = "nllb"
    encoder_layers: int = 2
    decoder_layers: int = 1
    d_model: int = 32
    heads: int = 4
    ffn_dim: int = 64
    scale_embedding: bool = True
    activation: str = "relu"
    sharded: bool = False
    spm_vocab_size: int = 200
    max_positions: int = 64
    vocab_size: Optional[int] = None
    seed: int = 0
    layout: str = "transformers4"
    mask_first: bool = False

    @property
    def languages(self) -> tuple[str, ...]:
        return NLLB_LANGUAGES if self.style == "nllb" else M2M_LANGUAGES

    @property
    def language_tokens(self) -> list[str]:
        return (list(self.languages) if self.style == "nllb"
                else [f"__{code}__" for code in self.languages])


def _train_bpe(lines: list, prefix: Path, vocab_size: int) -> spm.SentencePieceProcessor:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=vocab_size,
        model_type="bpe", character_coverage=1.0, hard_vocab_limit=False, num_threads=1,
        minloglevel=2)
    Path(f"{prefix}.vocab").unlink()
    model = Path(f"{prefix}.model")
    model.rename(prefix.parent / "sentencepiece.bpe.model")
    return spm.SentencePieceProcessor(model_file=str(prefix.parent / "sentencepiece.bpe.model"))


def vocabulary(folder) -> dict[str, int]:
    """Every token of the model in `folder` and its id, as the model's own tokenizer numbers
    them (NLLB: SentencePiece id + 1; M2M-100: `vocab.json`; the codes after the pieces)."""
    folder = Path(folder)
    variant = read_variant(folder)
    if variant.style == "m2m100":
        ids = json.loads((folder / "vocab.json").read_text())
        first = len(ids)
    else:
        processor = spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.bpe.model"))
        ids = {**{token: index for index, token in enumerate(THEIR_SPECIALS)},
               **{processor.id_to_piece(index): index + 1
                  for index in range(3, processor.get_piece_size())}}
        first = processor.get_piece_size() + 1
    first += int(variant.mask_first and variant.style == "nllb")
    return {**ids, **{token: first + number
                      for number, token in enumerate(variant.language_tokens)}}


def write_m2m_100_folder(folder, variant: M2MVariant = M2MVariant(), **changes) -> Path:
    """Writes a random model folder of `variant` (fields overridden by `changes`) into `folder`
    (created); returns its path."""
    from safetensors.numpy import save_file

    variant = replace(variant, **changes)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sources, targets = training_sentences()
    processor = _train_bpe(sources + targets, folder / "spm", variant.spm_vocab_size)
    (folder / "variant.json").write_text(json.dumps(asdict(variant)))
    tokens = variant.language_tokens
    if variant.style == "m2m100":
        pieces = [processor.id_to_piece(index) for index in range(3, processor.get_piece_size())]
        random.Random(variant.seed).shuffle(pieces)  # fairseq's dictionary order, not the model's
        mapping = {**{token: index for index, token in enumerate(THEIR_SPECIALS)},
                   **{piece: 4 + index for index, piece in enumerate(pieces)}}
        (folder / "vocab.json").write_text(json.dumps(mapping, ensure_ascii=False))
        unused = 8
        size = len(mapping) + len(tokens) + unused
        tokenizer = {"tokenizer_class": "M2M100Tokenizer", "src_lang": "en", "tgt_lang": "fr",
                     "additional_special_tokens": tokens, "num_madeup_words": unused}
        if variant.layout == "transformers5":
            tokenizer = {"added_tokens_decoder": added_tokens_decoder(
                {token: index for index, token in enumerate(THEIR_SPECIALS)}),
                "backend": "custom", "extra_special_tokens": [], "language_codes": "m2m100",
                "num_madeup_words": unused, "sep_token": "</s>", "sp_model_kwargs": {},
                "src_lang": "en", "tgt_lang": "fr", "tokenizer_class": "M2M100Tokenizer"}
    else:
        ids = vocabulary(folder)
        mask = (min if variant.mask_first else max)(ids[token] for token in tokens) + (
            -1 if variant.mask_first else 1)
        size = max(mask, *ids.values()) + 1 + 2
        added = {token: index for token, index in [*ids.items(), ("<mask>", mask)]
                 if token in THEIR_SPECIALS or token in tokens or token == "<mask>"}
        tokenizer = {"tokenizer_class": "NllbTokenizer", "src_lang": "eng_Latn",
                     "tgt_lang": "fra_Latn", "legacy_behaviour": False,
                     "additional_special_tokens": tokens,
                     "added_tokens_decoder": added_tokens_decoder(added)}
        if variant.layout == "transformers5":
            tokenizer = {"backend": "tokenizers", "cls_token": "<s>",
                         "extra_special_tokens": tokens, "is_local": True,
                         "legacy_behaviour": False, "local_files_only": False,
                         "mask_token": "<mask>", "model_max_length": 10 ** 30, "sep_token": "</s>",
                         "src_lang": "eng_Latn", "tgt_lang": None,
                         "tokenizer_class": "NllbTokenizer"}
            (folder / "tokenizer.json").write_text(json.dumps(
                tokenizer_json(ids, added, tokens), ensure_ascii=False, indent=1))
    for token in ("bos", "eos", "unk", "pad"):
        tokenizer[f"{token}_token"] = {"bos": "<s>", "eos": "</s>", "unk": "<unk>",
                                       "pad": "<pad>"}[token]
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer, indent=1,
                                                             sort_keys=True))
    if variant.layout == "transformers4":
        (folder / "special_tokens_map.json").write_text(json.dumps(
            {"additional_special_tokens": tokens, "bos_token": "<s>", "eos_token": "</s>",
             "unk_token": "<unk>", "pad_token": "<pad>"}, indent=1))
    size = max(size, variant.vocab_size or 0)
    (folder / "config.json").write_text(json.dumps(model_config(variant, size), indent=1))
    tensors = random_tensors(variant, size)
    if variant.sharded:
        names = sorted(tensors)
        shards = {"model-00001-of-00002.safetensors": names[::2],
                  "model-00002-of-00002.safetensors": names[1::2]}
        for shard, shard_names in shards.items():
            save_file({name: tensors[name] for name in shard_names}, str(folder / shard))
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {}, "weight_map": {name: shard for shard, shard_names in shards.items()
                                            for name in shard_names}}))
    else:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "README.md").write_text("---\nlicense: cc-by-nc-4.0\n---\n# A random test model\n"
                                      if variant.style == "nllb" else
                                      "---\nlicense: mit\n---\n# A random test model\n")
    return folder


def added_tokens_decoder(ids: dict[str, int]) -> dict[str, dict]:
    """tokenizer_config.json's `added_tokens_decoder` of the added tokens `ids`."""
    return {str(index): {"content": token, "lstrip": token == "<mask>", "normalized":
                         token == "<mask>", "rstrip": False, "single_word": False,
                         "special": True} for token, index in ids.items()}


def tokenizer_json(ids: dict[str, int], added: dict[str, int], codes: list[str]) -> dict:
    """NLLB's tokenizer.json as transformers 5 writes it: the added tokens with their ids, the
    BPE model's vocabulary (its merges left out), the source code first and `</s>` last."""
    def processor(pair: bool) -> list[dict]:
        parts = [{"Sequence": {"id": part, "type_id": 0}} for part in ("AB" if pair else "A")]
        return [{"SpecialToken": {"id": codes[0], "type_id": 0}}, *parts,
                {"SpecialToken": {"id": "</s>", "type_id": 0}}]

    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                 "split": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": index, "content": token, "single_word": False,
                          "lstrip": token == "<mask>", "rstrip": False,
                          "normalized": token == "<mask>", "special": True}
                         for token, index in sorted(added.items(), key=lambda item: item[1])],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": metaspace,
        "post_processor": {"type": "TemplateProcessing", "single": processor(False),
                           "pair": processor(True), "special_tokens": {
                               token: {"id": token, "ids": [added[token]], "tokens": [token]}
                               for token in ("</s>", codes[0])}},
        "decoder": metaspace,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {token: index for token, index in ids.items()
                            if token not in codes}, "merges": []}}


def read_variant(folder) -> M2MVariant:
    """The variant `write_m2m_100_folder` wrote into `folder`."""
    return M2MVariant(**json.loads((Path(folder) / "variant.json").read_text()))


def model_config(variant: M2MVariant, vocab_size: int) -> dict:
    """The `config.json` transformers writes for `variant`."""
    return {"model_type": "m2m_100", "architectures": ["M2M100ForConditionalGeneration"],
            "vocab_size": vocab_size, "d_model": variant.d_model,
            "encoder_layers": variant.encoder_layers, "decoder_layers": variant.decoder_layers,
            "encoder_attention_heads": variant.heads, "decoder_attention_heads": variant.heads,
            "encoder_ffn_dim": variant.ffn_dim, "decoder_ffn_dim": variant.ffn_dim,
            "activation_function": variant.activation, "dropout": 0.1,
            "attention_dropout": 0.1, "activation_dropout": 0.0, "encoder_layerdrop": 0.0,
            "decoder_layerdrop": 0.0, "init_std": 0.02,
            "max_position_embeddings": variant.max_positions,
            "scale_embedding": variant.scale_embedding, "pad_token_id": 1, "bos_token_id": 0,
            "eos_token_id": 2, "decoder_start_token_id": 2, "is_encoder_decoder": True,
            "tie_word_embeddings": True, "use_cache": True, "num_beams": 4,
            "torch_dtype": "float32"}


def random_tensors(variant: M2MVariant, vocab_size: int) -> dict[str, np.ndarray]:
    """Random float32 tensors of `variant` under `M2M100ForConditionalGeneration`'s names;
    the embedding tied (saved once, as `model.shared.weight`), its `<pad>` row zero."""
    rng = np.random.default_rng(variant.seed)
    d, f, tensors = variant.d_model, variant.ffn_dim, {}

    def linear(name: str, rows_in: int, rows_out: int) -> None:
        tensors[f"{name}.weight"] = rng.normal(0, rows_in ** -0.5, (rows_out, rows_in))
        tensors[f"{name}.bias"] = rng.normal(0, 0.1, (rows_out,))

    def norm(name: str) -> None:
        tensors[f"{name}.weight"] = 1 + rng.normal(0, 0.1, (d,))
        tensors[f"{name}.bias"] = rng.normal(0, 0.1, (d,))

    for side, depth in (("encoder", variant.encoder_layers), ("decoder", variant.decoder_layers)):
        for index in range(depth):
            prefix = f"model.{side}.layers.{index}"
            for attention in ("self_attn", "encoder_attn") if side == "decoder" else ("self_attn",):
                for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    linear(f"{prefix}.{attention}.{projection}", d, d)
                norm(f"{prefix}.{attention}_layer_norm")
            linear(f"{prefix}.fc1", d, f)
            linear(f"{prefix}.fc2", f, d)
            norm(f"{prefix}.final_layer_norm")
        norm(f"model.{side}.layer_norm")
    scale = 1.0 if variant.scale_embedding else d ** 0.5  # comparable sizes either way
    embedding = rng.normal(0, scale * d ** -0.5, (vocab_size, d))
    embedding[1] = 0.0  # nn.Embedding(padding_idx=1)
    tensors["model.shared.weight"] = embedding
    return {name: np.ascontiguousarray(value, dtype=np.float32)
            for name, value in tensors.items()}
