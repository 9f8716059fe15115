"""Random NLLB-200 and M2M-100 model folders in the Hugging Face layout, for the importer's tests
and the parity run against transformers (`benchmarks/transformers_parity.py`).

`write_m2m_100_folder` writes what `facebook/nllb-200-*` or `facebook/m2m100_*` holds:
`config.json` (`model_type` "m2m_100"), `model.safetensors` (random weights under
`M2M100ForConditionalGeneration`'s names, PyTorch `[out, in]` projections; or two shards and
their index), `sentencepiece.bpe.model` (a tiny BPE model trained on
`marian_models.training_sentences`), and the tokenizer's files: NLLB's `tokenizer_config.json`
(language codes as `additional_special_tokens`, ids in `added_tokens_decoder`) and
`special_tokens_map.json`, or M2M-100's `vocab.json` (pieces in an order of their own, not the
SentencePiece model's) with codes `__xx__`. Both leave rows no token names at the end, as the
released models do (NLLB: 2, M2M-100: its 8 `madeupword`s).
"""
import json
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional

import numpy as np
import sentencepiece as spm

from marian_models import training_sentences

THEIR_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # fairseq's ids 0-3
NLLB_LANGUAGES = ("eng_Latn", "fra_Latn", "deu_Latn", "zho_Hans", "zho_Hant")
# M2M-100's 100 languages in the order its tokenizer numbers their codes (after the pieces).
M2M_LANGUAGES = tuple(
    "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu "
    "ha he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr "
    "ms my ne nl no ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk "
    "ur uz vi wo xh yi yo zh zu".split())


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
    else:
        ids = vocabulary(folder)
        mask = max(ids.values()) + 1
        size = mask + 1 + 2
        tokenizer = {"tokenizer_class": "NllbTokenizer", "src_lang": "eng_Latn",
                     "tgt_lang": "fra_Latn", "legacy_behaviour": False,
                     "additional_special_tokens": tokens,
                     "added_tokens_decoder": {
                         str(index): {"content": token, "special": True}
                         for token, index in [*ids.items(), ("<mask>", mask)]
                         if token in THEIR_SPECIALS or token in tokens or token == "<mask>"}}
    for token in ("bos", "eos", "unk", "pad"):
        tokenizer[f"{token}_token"] = {"bos": "<s>", "eos": "</s>", "unk": "<unk>",
                                       "pad": "<pad>"}[token]
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer, indent=1))
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
