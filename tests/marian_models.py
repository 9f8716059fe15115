"""Random Marian (OPUS-MT) model folders in Marian's native format, for the importer's tests.

`write_marian_model` writes what an OPUS-MT release folder holds: `model.npz` (random weights
under Marian's parameter names, with its `special:model.yml` entry), the vocabulary yml file(s),
`source.spm` / `target.spm` (tiny SentencePiece models trained on `training_sentences`) and
`decoder.yml`, as `keras_transformer.importing.marian` reads them.
"""
import json
import random
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional

import numpy as np
import sentencepiece as spm
import yaml

SPECIAL = ["</s>", "<unk>"]  # Marian's fixed ids 0 and 1
SOURCE_WORDS = ("one two three four five six seven eight nine ten eleven twelve twenty hundred "
                "the a red green blue yellow black white small big long short dog cat bird horse "
                "fish book house car tree river city friend teacher garden window door table "
                "sees buys has likes sells finds reads writes opens closes wants and but not very "
                "old new today tomorrow").split()
TARGET_WORDS = ("un deux trois quatre cinq six sept huit neuf dix onze douze vingt cent le la "
                "rouge vert bleu jaune noir blanc petit grand long court chien chat oiseau cheval "
                "poisson livre maison voiture arbre rivière ville ami professeur jardin fenêtre "
                "porte table voit achète a aime vend trouve lit écrit ouvre ferme veut et mais pas "
                "très vieux nouveau aujourd'hui demain").split()
SUBJECTS = [("I", "je"), ("we", "nous"), ("they", "ils"), ("she", "elle"), ("my friend", "mon ami")]
PUNCTUATION = [(".", "."), ("?", " ?"), ("!", " !"), (": yes.", " : oui."), ('"', ' "')]


@dataclass(frozen=True)
class MarianVariant:
    """One architecture: `norm` "post" (preprocess "", postprocess "dan") or "pre" ("n", "da",
    postprocess-top "n"); `activation` swish|relu|gelu; `embedding_norm` the layer norm after the
    embeddings (postprocess-emb "nd"); `learned_positions` a `Wpos` table of `max_length` rows;
    `tied_all` one vocabulary and `Wemb` for source, target and output, else `encoder_Wemb` and
    `decoder_Wemb` with separate vocabularies; `tied_output` the output layer reuses the target
    embeddings (else `decoder_ff_logit_out_Wt`); `languages` the `>>xx<<` tokens of a
    multi-target model (source side). Like OPUS-MT's, a `tied_all` config says
    `tied-embeddings: false`: Marian ties the output when either option is true."""

    enc_depth: int = 2
    dec_depth: int = 2
    dim_emb: int = 32
    heads: int = 4
    dim_ffn: int = 64
    activation: str = "swish"
    norm: str = "post"
    embedding_norm: bool = False
    learned_positions: bool = False
    tied_all: bool = True
    tied_output: bool = True
    languages: tuple[str, ...] = ()
    max_length: int = 64
    seed: int = 0
    spm_vocab_size: int = 160  # per SentencePiece model; large ones learn from random words


def training_sentences(count: int = 240, seed: int = 0) -> tuple:
    """The `count` generated (sources, targets) sentence lists the SentencePiece models train on,
    a toy English / French-like pair (same `seed`, same lists)."""
    rng = random.Random(seed)
    sources, targets = [], []
    for _ in range(count):
        subject, subject_t = rng.choice(SUBJECTS)
        picks = rng.sample(range(len(SOURCE_WORDS)), rng.randint(2, 6))
        mark, mark_t = rng.choice(PUNCTUATION)
        sources.append(" ".join([subject] + [SOURCE_WORDS[i] for i in picks]) + mark)
        targets.append(" ".join([subject_t] + [TARGET_WORDS[i] for i in picks]) + mark_t)
    return sources, targets


def random_word_sentences(vocab_size: int, seed: int = 0) -> tuple:
    """(sources, targets): sentences of random lowercase words, enough distinct text for
    SentencePiece models of about `vocab_size` pieces (an OPUS-MT-sized vocabulary)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"

    def sentence() -> str:
        return " ".join("".join(rng.choice(letters) for _ in range(rng.randint(2, 9)))
                        for _ in range(rng.randint(8, 15)))

    count = vocab_size // 2
    return [sentence() for _ in range(count)], [sentence() for _ in range(count)]


def _train_spm(lines: list, prefix: Path, vocab_size: int) -> spm.SentencePieceProcessor:
    """Trains a unigram SentencePiece model on `lines`, writes `prefix`.spm; returns it loaded."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=vocab_size,
        model_type="unigram", character_coverage=1.0, hard_vocab_limit=False, num_threads=1,
        minloglevel=2)
    Path(f"{prefix}.model").rename(f"{prefix}.spm")
    Path(f"{prefix}.vocab").unlink()
    return spm.SentencePieceProcessor(model_file=f"{prefix}.spm")


def _pieces(processor: spm.SentencePieceProcessor) -> list:
    """The normal pieces of `processor` in id order (its <unk>, <s>, </s> left out)."""
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i))]


_PLAIN = re.compile(r"[\w\u2581]+")
_YAML_WORDS = {"y", "n", "yes", "no", "true", "false", "on", "off", "null", "~"}


def _yaml_key(token: str) -> str:
    """`token` as a YAML key the way yaml-cpp writes it: bare when safe, else double-quoted."""
    plain = (_PLAIN.fullmatch(token) and token.lower() not in _YAML_WORDS
             and not re.fullmatch(r"[-+.\d]+", token))
    return token if plain else json.dumps(token, ensure_ascii=False)


def write_vocabulary(path: Path, tokens: list) -> None:
    """Writes `tokens` (id = position, `</s>` and `<unk>` first) as a Marian vocabulary yml."""
    path.write_text("".join(f"{_yaml_key(t)}: {i}\n" for i, t in enumerate(tokens)),
                    encoding="utf-8")


def model_config(variant: MarianVariant, vocab_sizes: tuple) -> dict:
    """The `special:model.yml` options Marian saves for `variant` with `vocab_sizes`."""
    pre = variant.norm == "pre"
    return {
        "type": "transformer", "dim-vocabs": list(vocab_sizes), "dim-emb": variant.dim_emb,
        "enc-depth": variant.enc_depth, "dec-depth": variant.dec_depth,
        "transformer-heads": variant.heads, "transformer-dim-ffn": variant.dim_ffn,
        "transformer-decoder-dim-ffn": 0, "transformer-ffn-depth": 2,
        "transformer-decoder-ffn-depth": 0, "transformer-ffn-activation": variant.activation,
        "transformer-preprocess": "n" if pre else "", "transformer-postprocess": "da" if pre
        else "dan", "transformer-postprocess-top": "n" if pre else "",
        "transformer-postprocess-emb": "nd" if variant.embedding_norm else "d",
        "transformer-train-position-embeddings": variant.learned_positions,
        "transformer-decoder-autoreg": "self-attention", "transformer-tied-layers": [],
        "transformer-no-projection": False, "transformer-guided-alignment-layer": "last",
        "transformer-aan-depth": 2, "transformer-aan-activation": "swish",
        "transformer-aan-nogate": False, "transformer-dim-aan": 2048,
        "tied-embeddings": variant.tied_output and not variant.tied_all,  # as OPUS-MT
        "tied-embeddings-all": variant.tied_all,
        "tied-embeddings-src": False, "layer-normalization": False, "right-left": False,
        "skip": False, "ulr": False, "ulr-dim-emb": 0, "output-omit-bias": False,
        "factors-combine": "sum", "lemma-dim-emb": 0,
        "dec-cell-base-depth": 2, "dec-cell-high-depth": 1, "version": "v1.11.0 fixture",
    }


def random_weights(variant: MarianVariant, vocab_sizes: tuple) -> dict:
    """Random float32 parameters of `variant` under Marian's names and shapes ([in, out])."""
    rng = np.random.default_rng(variant.seed)
    d, f = variant.dim_emb, variant.dim_ffn
    w = {}

    def dense(name: str, rows: int, cols: int, suffix: str = "") -> None:
        w[f"{name}_W{suffix}"] = rng.normal(0, rows ** -0.5, (rows, cols))
        w[f"{name}_b{suffix}"] = rng.normal(0, 0.1, (1, cols))

    def norm(name: str, pre: bool = variant.norm == "pre") -> None:
        w[f"{name}_ln_scale{'_pre' if pre else ''}"] = 1 + rng.normal(0, 0.1, (1, d))
        w[f"{name}_ln_bias{'_pre' if pre else ''}"] = rng.normal(0, 0.1, (1, d))

    for stack, depth in (("encoder", variant.enc_depth), ("decoder", variant.dec_depth)):
        for layer in range(1, depth + 1):
            for block in ("self", "context") if stack == "decoder" else ("self",):
                scope = f"{stack}_l{layer}_{block}"
                for part in "qkvo":
                    dense(scope, d, d, part)
                norm(f"{scope}_Wo")
            dense(f"{stack}_l{layer}_ffn", d, f, "1")
            dense(f"{stack}_l{layer}_ffn", f, d, "2")
            norm(f"{stack}_l{layer}_ffn_ffn")
        if variant.embedding_norm:
            norm(f"{stack}_emb", pre=True)
        if variant.norm == "pre":
            norm(f"{stack}_top", pre=False)
    if variant.tied_all:
        w["Wemb"] = rng.normal(0, d ** -0.5, (vocab_sizes[1], d))
    else:
        w["encoder_Wemb"] = rng.normal(0, d ** -0.5, (vocab_sizes[0], d))
        w["decoder_Wemb"] = rng.normal(0, d ** -0.5, (vocab_sizes[1], d))
    if not variant.tied_output:
        w["decoder_ff_logit_out_Wt"] = rng.normal(0, d ** -0.5, (vocab_sizes[1], d))
    w["decoder_ff_logit_out_b"] = rng.normal(0, 0.5, (1, vocab_sizes[1]))
    if variant.learned_positions:
        w["Wpos"] = rng.normal(0, 0.5, (variant.max_length, d))
    return {name: value.astype(np.float32) for name, value in w.items()}


def write_marian_model(folder, variant: MarianVariant = MarianVariant(), **changes) -> Path:
    """Writes a random OPUS-MT-style model folder of `variant` (fields overridden by `changes`)
    into `folder` (created) and returns its path."""
    variant = replace(variant, **changes)
    if variant.tied_all and not variant.tied_output:
        raise ValueError("tied-embeddings-all ties the output layer too")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sources, targets = (training_sentences() if variant.spm_vocab_size <= 1000 else
                        random_word_sentences(variant.spm_vocab_size, variant.seed))
    source_pieces = _pieces(_train_spm(sources, folder / "source", variant.spm_vocab_size))
    target_pieces = _pieces(_train_spm(targets, folder / "target", variant.spm_vocab_size))
    tags = [f">>{language}<<" for language in variant.languages]
    if variant.tied_all:
        shared = SPECIAL + tags + list(dict.fromkeys(source_pieces + target_pieces))
        vocabularies = {"opus.vocab.yml": shared}
        vocab_files = ["opus.vocab.yml", "opus.vocab.yml"]
    else:
        vocabularies = {"opus.src.vocab.yml": SPECIAL + tags + source_pieces,
                        "opus.trg.vocab.yml": SPECIAL + target_pieces}
        vocab_files = list(vocabularies)
    for name, tokens in vocabularies.items():
        write_vocabulary(folder / name, tokens)
    sizes = tuple(len(vocabularies[name]) for name in vocab_files)
    config = yaml.safe_dump(model_config(variant, sizes), sort_keys=False)
    weights = random_weights(variant, sizes)
    weights["special:model.yml"] = np.frombuffer(config.encode() + b"\0", dtype=np.int8)
    np.savez(folder / "model.npz", **weights)
    decoder = {"relative-paths": True, "models": ["model.npz"], "vocabs": vocab_files,
               "beam-size": 4, "normalize": 0.6, "word-penalty": 0, "mini-batch": 16,
               "maxi-batch": 100, "maxi-batch-sort": "src"}
    (folder / "decoder.yml").write_text(yaml.safe_dump(decoder, sort_keys=False))
    (folder / "variant.json").write_text(json.dumps(asdict(variant)))
    return folder


def read_variant(folder) -> MarianVariant:
    """The `MarianVariant` that `write_marian_model` wrote into `folder` (its variant.json)."""
    fields = json.loads((Path(folder) / "variant.json").read_text())
    return MarianVariant(**{**fields, "languages": tuple(fields["languages"])})


def tokenize(folder, sentence: str, side: str = "source",
             language: Optional[str] = None) -> list:
    """`sentence` as the token strings Marian reads (no `</s>`): the `side` ("source" or
    "target") SentencePiece pieces of model `folder`, after `>>language<<` when given."""
    processor = spm.SentencePieceProcessor(model_file=str(Path(folder) / f"{side}.spm"))
    return ([f">>{language}<<"] if language else []) + processor.encode(sentence, out_type=str)


def write_huggingface_folder(marian_folder, folder, layout: str = "transformers4") -> Path:
    """The Marian model of `marian_folder` (post-norm, sinusoidal, no embedding layer norm: what
    Hugging Face's Marian supports) written as Hugging Face's conversion lays it out:
    `config.json`, `model.safetensors` (PyTorch `[out, in]` projections, a zero `<pad>` row
    appended to the embeddings, names `model.encoder.layers.N...`), `vocab.json` (and
    `target_vocab.json`), the SentencePiece models. `layout` "transformers5": the files as
    transformers 5.25 saves the model and its tokenizer (`MarianMTModel.save_pretrained`,
    `MarianTokenizer.save_pretrained`; checked against folders it wrote,
    benchmarks/transformers_parity.py's `build`): config.json with its defaults and without
    `num_beams`, which is in `generation_config.json` (here 6), and `tokenizer_config.json`."""
    from safetensors.numpy import save_file

    marian_folder, folder = Path(marian_folder), Path(folder)
    variant = read_variant(marian_folder)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = dict(np.load(marian_folder / "model.npz"))
    decoder = yaml.safe_load((marian_folder / "decoder.yml").read_text())
    vocabularies = [yaml.load((marian_folder / name).read_text(), Loader=yaml.BaseLoader)
                    for name in decoder["vocabs"]]
    tensors = {}

    def padded(matrix):  # the conversion's extra `<pad>` row (its decoding start): zeros
        return np.concatenate([matrix, np.zeros((1, *matrix.shape[1:]), matrix.dtype)])

    for side, depth in (("encoder", variant.enc_depth), ("decoder", variant.dec_depth)):
        for index in range(depth):
            ours, theirs = f"{side}_l{index + 1}", f"model.{side}.layers.{index}"
            attentions = {"self_attn": "self", "encoder_attn": "context"}
            for attention, marian in attentions.items():
                if side == "encoder" and attention == "encoder_attn":
                    continue
                for projection, letter in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "o")):
                    name = f"{theirs}.{attention}.{projection}_proj"
                    tensors[f"{name}.weight"] = arrays[f"{ours}_{marian}_W{letter}"].T.copy()
                    tensors[f"{name}.bias"] = arrays[f"{ours}_{marian}_b{letter}"][0]
                norm = f"{theirs}.{attention}_layer_norm"
                tensors[f"{norm}.weight"] = arrays[f"{ours}_{marian}_Wo_ln_scale"][0]
                tensors[f"{norm}.bias"] = arrays[f"{ours}_{marian}_Wo_ln_bias"][0]
            for number in (1, 2):
                tensors[f"{theirs}.fc{number}.weight"] = arrays[f"{ours}_ffn_W{number}"].T.copy()
                tensors[f"{theirs}.fc{number}.bias"] = arrays[f"{ours}_ffn_b{number}"][0]
            tensors[f"{theirs}.final_layer_norm.weight"] = arrays[f"{ours}_ffn_ffn_ln_scale"][0]
            tensors[f"{theirs}.final_layer_norm.bias"] = arrays[f"{ours}_ffn_ffn_ln_bias"][0]
    if variant.tied_all:
        tensors["model.shared.weight"] = padded(arrays["Wemb"])
    else:
        tensors["model.encoder.embed_tokens.weight"] = padded(arrays["encoder_Wemb"])
        tensors["model.decoder.embed_tokens.weight"] = padded(arrays["decoder_Wemb"])
    if not variant.tied_output:
        tensors["lm_head.weight"] = padded(arrays["decoder_ff_logit_out_Wt"])
    tensors["final_logits_bias"] = padded(arrays["decoder_ff_logit_out_b"].T).T.copy()
    save_file(tensors, str(folder / "model.safetensors"))
    sizes = [len(vocabulary) for vocabulary in vocabularies]
    for name, vocabulary in zip(("vocab.json", "target_vocab.json"), vocabularies):
        if name == "vocab.json" or not variant.tied_all:
            mapping = {piece: int(index) for piece, index in vocabulary.items()}
            (folder / name).write_text(json.dumps({**mapping, "<pad>": len(mapping)}))
    config = {"model_type": "marian", "d_model": variant.dim_emb,
              "encoder_layers": variant.enc_depth, "decoder_layers": variant.dec_depth,
              "encoder_attention_heads": variant.heads, "decoder_attention_heads": variant.heads,
              "encoder_ffn_dim": variant.dim_ffn, "decoder_ffn_dim": variant.dim_ffn,
              "activation_function": variant.activation, "vocab_size": sizes[0] + 1,
              "decoder_vocab_size": sizes[-1] + 1, "pad_token_id": sizes[0],
              "decoder_start_token_id": sizes[-1], "eos_token_id": 0, "scale_embedding": True,
              "share_encoder_decoder_embeddings": variant.tied_all,
              "tie_word_embeddings": variant.tied_output, "num_beams": 4}
    if layout == "transformers5":
        config.pop("num_beams")
        config.update({
            "activation_dropout": 0.0, "architectures": ["MarianMTModel"],
            "attention_dropout": 0.0, "bos_token_id": None, "decoder_layerdrop": 0.0,
            "dropout": 0.1, "dtype": "float32", "encoder_layerdrop": 0.0,
            "forced_eos_token_id": 0, "init_std": 0.02, "is_decoder": False,
            "is_encoder_decoder": True, "max_position_embeddings": 1024,
            "transformers_version": "5.25.0", "use_cache": True})
        (folder / "generation_config.json").write_text(json.dumps({
            "_from_model_config": True, "decoder_start_token_id": sizes[-1],
            "eos_token_id": 0, "forced_eos_token_id": 0, "num_beams": 6,
            "output_attentions": False, "output_hidden_states": False,
            "pad_token_id": sizes[0], "transformers_version": "5.25.0", "use_cache": True},
            indent=2))
        (folder / "tokenizer_config.json").write_text(json.dumps({
            "added_tokens_decoder": {str(index): {
                "content": token, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": True}
                for index, token in ((0, "</s>"), (1, "<unk>"), (sizes[0], "<pad>"))},
            "backend": "custom", "eos_token": "</s>", "is_local": True,
            "local_files_only": False, "model_max_length": 512, "pad_token": "<pad>",
            "separate_vocabs": not variant.tied_all, "source_lang": None, "sp_model_kwargs": {},
            "target_lang": None, "tokenizer_class": "MarianTokenizer", "unk_token": "<unk>"},
            indent=2))
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    for name in ("source.spm", "target.spm"):
        (folder / name).write_bytes((marian_folder / name).read_bytes())
    return folder
