"""Fuzzed inputs (issue 25): the corpus readers on random bytes, NUL, BOMs, CR/LF mixes, invalid
UTF-8 and 1 MB lines, plain and gzipped, and the exported signatures on random byte strings and
id tensors of odd shapes. Each case gives a valid output or a clear error naming the file and
line: never a crash, a hang or a shifted line. Every case is seeded by its number, so a failure
names a case that replays.

The line contract the readers are held to is that of ``wc -l`` and sacrebleu: only LF ends a
line, a CR right before it belongs to the ending, and every other byte is content: a lone CR
(on which ``bytes.splitlines`` splits), VT, FF, 0x1c-0x1e, U+0085 and U+2028 (on which
``str.splitlines`` also splits), NUL, a UTF-8 BOM anywhere but at the start of the file
(kept: U+FEFF is not whitespace, so ``read_lines`` does not strip it; the one at the start is
dropped, as no text), invalid UTF-8. A last line without LF counts; an empty file has no line.
"""
from __future__ import annotations

import gzip
import io
import random
import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data import read_lines, read_parallel
from keras_transformer.data.text_files import read_raw_lines
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.serving.export import export_translator
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

BOM = b"\xef\xbb\xbf"
VALID_FRAGMENTS = (b"a", b"Haus", "Äpfel".encode(), "😀".encode(), b" ", b"\t", b"\x00", BOM,
                   b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1e", "\x85".encode(),
                   "\u2028".encode(), "\u3000".encode())
INVALID_FRAGMENTS = (b"\xff", b"\xc3", b"\xc3(", b"\x85", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                     b"\xc0\xaf")
# What str.strip removes: a side made only of these is empty for read_parallel.
BLANKS = ("", " ", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u00a0", "\u2028", "\u3000")
WORDS = ("I", "have", "forty-two", "apples", "she", "sees", "three", "dogs", "one", "cat")

READER_CASES = 2000
STDIN_CASES = 50
PARALLEL_CASES = 600
GZIP_CASES = 300
TEXT_CASES = 60
ID_CASES = 80
ALONE_EVERY = 2  # every 2nd signature case also translates each of its rows alone
MAX_LENGTH, BEAM = 24, 2


def random_content(rng: random.Random, invalid: bool) -> bytes:
    """One line's content (no LF): 0..6 pieces, each a valid fragment or, with `invalid`, also
    an invalid one or 1..20 random bytes."""
    fragments = VALID_FRAGMENTS + INVALID_FRAGMENTS if invalid else VALID_FRAGMENTS
    parts = [rng.randbytes(rng.randint(1, 20)) if invalid and rng.random() < 0.3
             else rng.choice(fragments) for _ in range(rng.randint(0, 6))]
    return b"".join(parts).replace(b"\n", b"")


def file_bytes(contents: list[bytes], rng: random.Random) -> bytes:
    """A file holding the lines `contents` (none with LF), each ended by LF or CR LF at random,
    the last one possibly by nothing. A content ending in CR gets CR LF, since a bare LF would
    make its CR part of the ending."""
    chunks = []
    for number, content in enumerate(contents, start=1):
        endings = [b"\n", b"\r\n"] + ([b""] if number == len(contents) and content else [])
        ending = rng.choice(endings)
        chunks.append(content + (b"\r\n" if ending == b"\n" and content.endswith(b"\r")
                                 else ending))
    return b"".join(chunks)


def write(path: Path, data: bytes, gzipped: bool) -> Path:
    """Writes `data` to `path` (through `gzip.open` when `gzipped`); returns `path`."""
    with gzip.open(path, "wb") if gzipped else open(path, "wb") as handle:
        handle.write(data)
    return path


def invalid_lines(contents: list[bytes]) -> list[int]:
    """The 1-based numbers of the `contents` that are not valid UTF-8 (those that do not survive
    a decode with replacements and an encode unchanged)."""
    return [number for number, content in enumerate(contents, start=1)
            if content.decode("utf-8", errors="replace").encode("utf-8") != content]


def read_back(contents: list[bytes]) -> list[bytes]:
    """The lines a reader gives of a file holding `contents`: the first without the BOM it may
    start with."""
    return [content.removeprefix(BOM) if number == 0 else content
            for number, content in enumerate(contents)]


def check_readers(path: Path, contents: list[bytes], case: object) -> None:
    """Asserts that both readers give the lines `contents` written to `path` (`read_back`):
    `read_raw_lines` the bytes and the invalid lines' numbers, `read_lines` the stripped text or
    a ValueError naming the file and the first invalid line."""
    contents = read_back(contents)
    invalid = invalid_lines(contents)
    assert read_raw_lines(path) == (contents, invalid), case
    if invalid:
        with pytest.raises(ValueError) as error:
            read_lines(path)
        assert str(error.value).startswith(f"{path}:{invalid[0]}: not valid UTF-8"), case
    else:
        assert read_lines(path) == [content.decode().strip() for content in contents], case


def random_lines(rng: random.Random) -> list[bytes]:
    """0..12 random line contents, valid or not, the first one starting with a BOM at times."""
    invalid = rng.random() < 0.5
    contents = [random_content(rng, invalid) for _ in range(rng.randint(0, 12))]
    if contents and rng.random() < 0.2:
        contents[0] = BOM + contents[0]
    return contents


def test_readers_return_exactly_the_lines_written(tmp_path: Path) -> None:
    for case in range(READER_CASES):
        rng = random.Random(case)
        contents = random_lines(rng)
        gzipped = case % 4 == 0
        check_readers(write(tmp_path / f"case{case % 4}.de", file_bytes(contents, rng), gzipped),
                      contents, case)


def test_standard_input_is_split_like_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    for case in range(STDIN_CASES):
        rng = random.Random(case)
        contents = random_lines(rng)
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(file_bytes(contents, rng))))
        contents = read_back(contents)
        assert read_raw_lines("-") == (contents, invalid_lines(contents)), case


@pytest.mark.parametrize("gzipped", [False, True])
def test_one_megabyte_lines_are_read_whole_and_quickly(tmp_path: Path, gzipped: bool) -> None:
    rng = random.Random(7)
    size = 1 << 20
    long_lines = {
        "random bytes": rng.randbytes(size).replace(b"\n", b""),
        "2-byte characters": "é".encode() * (size // 2),
        "lone CRs": (b"x" * 999 + b"\r") * (size // 1000),
        "BOM and NUL": BOM + (b"\x00ab" * (size // 3)),
    }
    for name, long_line in long_lines.items():
        contents = [b"short", long_line, b"", b"last"]
        path = write(tmp_path / "long.en", file_bytes(contents, rng), gzipped)
        start = time.monotonic()
        check_readers(path, contents, name)
        assert time.monotonic() - start < 10, f"{name}: {time.monotonic() - start:.1f} s"


def parallel_side(rng: random.Random, tag: str) -> bytes:
    """One side of a pair: blank at times (then dropped), else `tag` (the pair's number, so a
    shifted line shows) and valid UTF-8 noise, up to ~60 characters."""
    if rng.random() < 0.15:
        return "".join(rng.choice(BLANKS) for _ in range(rng.randint(0, 3))).encode()
    return tag.encode() + random_content(rng, invalid=False) * rng.randint(1, 3)


def test_read_parallel_keeps_pairs_aligned_and_drops_exactly_empty_or_long_ones(
    tmp_path: Path
) -> None:
    for case in range(PARALLEL_CASES):
        rng = random.Random(10_000 + case)
        count = rng.randint(0, 15)
        sources = [parallel_side(rng, f"s{index}|") for index in range(count)]
        targets = [parallel_side(rng, f"t{index}|") for index in range(count)]
        limit = rng.choice([None, rng.randint(1, 40)])
        kind = case % 5  # 1: one side a line longer, 2: one line not valid UTF-8
        sides = [sources, targets]
        spoiled = rng.randrange(2)
        if kind == 1:
            sides[spoiled].insert(rng.randint(0, count), b"extra")
        elif kind == 2 and count:
            bad_line = rng.randrange(count)
            sides[spoiled][bad_line] += rng.choice(INVALID_FRAGMENTS)
        src, tgt = (write(tmp_path / f"pair.{language}", file_bytes(side, rng),
                          gzipped=rng.random() < 0.3)
                    for language, side in (("en", sources), ("de", targets)))
        if kind == 1:
            with pytest.raises(ValueError) as error:
                read_parallel(src, tgt, limit)
            assert re.search(rf"{re.escape(str(src))} has {len(sources)} lines, "
                             rf"{re.escape(str(tgt))} has {len(targets)}$", str(error.value)), \
                (case, str(error.value))
            continue
        if kind == 2 and count:
            with pytest.raises(ValueError) as error:
                read_parallel(src, tgt, limit)
            assert str(error.value).startswith(f"{(src, tgt)[spoiled]}:{bad_line + 1}: "), case
            continue
        texts = [[line.decode().strip() for line in side] for side in (sources, targets)]
        kept = [index for index in range(count)
                if texts[0][index] and texts[1][index]
                and (limit is None or max(len(texts[0][index]), len(texts[1][index])) <= limit)]
        assert read_parallel(src, tgt, limit) == \
            ([texts[0][index] for index in kept], [texts[1][index] for index in kept]), case


def spoiled_gzip(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """`data` gzipped, then truncated, with one byte flipped (not in the magic number, which
    would make a plain file), with random bytes appended, or split in two gzip members."""
    packed = gzip.compress(data)
    kind = rng.choice(["truncated", "flipped", "appended", "two members"])
    if kind == "truncated":
        return kind, packed[:rng.randrange(2, len(packed))]
    if kind == "flipped":
        position = rng.randrange(2, len(packed))
        return kind, packed[:position] + bytes([packed[position] ^ rng.randint(1, 255)]) \
            + packed[position + 1:]
    if kind == "appended":
        return kind, packed + rng.randbytes(rng.randint(1, 30))
    middle = rng.randint(0, len(data))
    return kind, gzip.compress(data[:middle]) + gzip.compress(data[middle:])


def test_corrupt_gzip_gives_the_lines_or_an_error_naming_the_file(tmp_path: Path) -> None:
    errors = 0
    for case in range(GZIP_CASES):
        rng = random.Random(20_000 + case)
        contents = [random_content(rng, invalid=False) for _ in range(rng.randint(1, 12))]
        kind, packed = spoiled_gzip(file_bytes(contents, rng), rng)
        contents = read_back(contents)
        path = tmp_path / "spoiled.de.gz"
        path.write_bytes(packed)
        try:
            result = read_raw_lines(path)
        except ValueError as error:
            errors += 1
            assert kind != "two members", (case, str(error))
            found = re.match(rf"{re.escape(str(path))}: corrupt or truncated gzip data after "
                             rf"line (\d+) \(", str(error))
            assert found, (case, kind, str(error))
            assert kind != "truncated" or int(found.group(1)) <= len(contents), (case, kind)
            with pytest.raises(ValueError, match=re.escape(f"{path}:")):
                read_lines(path)
        else:
            assert kind != "truncated", case
            assert result == (contents, []), (case, kind)
            assert read_lines(path) == [content.decode().strip() for content in contents], case
    assert GZIP_CASES // 4 < errors < GZIP_CASES, errors


@pytest.fixture(scope="module")
def tokenizer(demo_vocab: Path) -> SubwordTokenizer:
    return SubwordTokenizer.load(demo_vocab)


@pytest.fixture(scope="module")
def signatures(tokenizer: SubwordTokenizer, tmp_path_factory: pytest.TempPathFactory
               ) -> Mapping[str, Callable[..., dict[str, tf.Tensor]]]:
    """The export of a 1-layer tiny model whose weight matrices are drawn (seeded) with std 0.3:
    at that scale its translation depends on the source, which the shifted-row check needs."""
    model = kt.Transformer(kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_length=MAX_LENGTH, num_layers=1))
    model((tf.ones([1, 2], tf.int32), tf.ones([1, 2], tf.int32)))
    rng = np.random.default_rng(0)
    model.set_weights([rng.normal(0.0, 0.3, weight.shape).astype(weight.dtype)
                       if weight.ndim > 1 else weight for weight in model.get_weights()])
    path = export_translator(model, tokenizer, "fuzz", tmp_path_factory.mktemp("exports"),
                             kt.SearchSettings(beam_size=BEAM, max_decode_extra=3))
    return tf.saved_model.load(path).signatures


def call(signature: Callable[..., dict[str, tf.Tensor]], **inputs: list) -> dict[str, np.ndarray]:
    """`signature`'s outputs as arrays, for inputs given as lists of bytes or id arrays."""
    tensors = {name: tf.constant(value, tf.string) if isinstance(value, list)
               else tf.constant(value, tf.int32) for name, value in inputs.items()}
    return {name: value.numpy() for name, value in signature(**tensors).items()}


def check_outputs(outputs: dict[str, np.ndarray], empty: np.ndarray, vocab_size: int,
                  case: object) -> None:
    """Asserts the contract of any signature's `outputs` for a batch whose rows `empty` have
    no source piece: one output row per input row (and `BEAM` n-best); texts valid UTF-8;
    scores finite and <= 0 (n-best slots left unfilled may be -inf), best first; for an empty
    source exactly 0, "" and only PAD; ids within the vocabulary (`vocab_size`), PAD only after
    the end; alignments index a real source piece, -1 exactly after the hypothesis."""
    for name, value in outputs.items():
        assert value.shape[0] == len(empty), (case, name, value.shape)
        assert not name.startswith("nbest") or value.shape[1] == BEAM, (case, name, value.shape)
    for name in ("translation", "nbest_translations", "target_pieces", "source_pieces"):
        for text in outputs.get(name, np.array([])).ravel():
            text.decode("utf-8")
    for name in ("score", "nbest_scores"):
        if name in outputs:
            scores = outputs[name] if name == "nbest_scores" else outputs[name][:, None]
            assert np.all(np.isfinite(scores[:, 0])) and not np.any(np.isnan(scores)), case
            assert np.all(scores <= 0) and np.all(scores[empty] == 0), (case, scores)
            assert np.all(scores[:, :-1] >= scores[:, 1:] - 1e-6), (case, scores)
    for name in ("translation", "nbest_translations"):
        if name in outputs:
            assert np.all(outputs[name][empty] == b""), case
    for name in ("ids", "nbest_ids"):
        if name in outputs:
            ids = outputs[name]
            assert np.all(ids[empty] == PAD_ID), case
            assert np.all((ids >= 0) & (ids < vocab_size)), case
    if "ids" in outputs:
        ids = outputs["ids"]
        assert np.all((ids[:, 1:] == PAD_ID) | (ids[:, :-1] != PAD_ID)), (case, ids)
        after_eos = np.cumsum(ids == EOS_ID, axis=1) - (ids == EOS_ID) > 0
        assert np.all(ids[after_eos] == PAD_ID), (case, ids)
    if "alignment" in outputs:
        alignment, width = outputs["alignment"], outputs["source_pieces"].shape[1]
        assert np.all((alignment == -1) == (outputs["target_pieces"] == b"")), case
        assert np.all((alignment >= -1) & (alignment < width)), case


def without_padding(value: np.ndarray, pad: object) -> object:
    """`value` as nested lists, each innermost list without its trailing `pad`."""
    if value.ndim > 1:
        return [without_padding(row, pad) for row in value]
    items = value.tolist()
    while items and items[-1] == pad:
        items.pop()
    return items


PADDING = {"ids": PAD_ID, "nbest_ids": PAD_ID, "alignment": -1, "target_pieces": b"",
           "source_pieces": b""}


def assert_row_is_alone(batched: dict[str, np.ndarray], row: int,
                        alone: dict[str, np.ndarray], case: object) -> None:
    """Asserts that row `row` of the `batched` outputs equals the one row of `alone`: texts and
    ids exactly (beyond the row's own width only padding), scores within 1e-4."""
    for name, value in alone.items():
        mine, single = batched[name][row], value[0]
        if value.dtype.kind == "f":
            np.testing.assert_allclose(mine, single, rtol=1e-4, atol=1e-4,
                                       err_msg=f"case {case}, row {row}: {name}")
        elif name in PADDING:
            assert without_padding(mine, PADDING[name]) == \
                without_padding(single, PADDING[name]), (case, row, name)
        else:
            assert np.array_equal(mine, single), (case, row, name, mine, single)


def random_text(rng: random.Random) -> bytes:
    """Empty, demo-like words, random fragments with NUL, BOM and invalid UTF-8, or 1..10k
    random bytes."""
    kind = rng.random()
    if kind < 0.15:
        return b""
    if kind < 0.45:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))).encode()
    if kind < 0.9:
        return random_content(rng, invalid=True)
    return rng.randbytes(rng.randint(1000, 10_000))


@pytest.mark.slow
def test_text_signatures_answer_every_row_as_if_alone(
    signatures: Mapping[str, Callable[..., dict[str, tf.Tensor]]],
    tokenizer: SubwordTokenizer,
) -> None:
    distinct = set()
    for case in range(TEXT_CASES):
        rng = random.Random(30_000 + case)
        texts = [random_text(rng) for _ in range(rng.randint(0, 5))]
        prefixes = [random_text(rng) for _ in texts]
        empty = np.array([text == b"" for text in texts], dtype=bool)
        requests = {"serving_default": {"text": texts}, "translate_nbest": {"text": texts},
                    "translate_with_alignment": {"text": texts},
                    "translate_with_prefix": {"text": texts, "prefix": prefixes}}
        for name, inputs in requests.items():
            outputs = call(signatures[name], **inputs)
            check_outputs(outputs, empty, tokenizer.vocab_size, (case, name))
            if case % ALONE_EVERY or len(texts) < 2:
                continue
            for row in range(len(texts)):
                alone = call(signatures[name], **{key: [value[row]]
                                                  for key, value in inputs.items()})
                assert_row_is_alone(outputs, row, alone, (case, name))
                if name == "serving_default" and not empty[row]:
                    distinct.add((alone["translation"][0], round(float(alone["score"][0]), 3)))
    assert len(distinct) >= 10, distinct  # else a shifted row could go unnoticed


def random_ids(rng: np.random.Generator, vocab_size: int) -> np.ndarray:
    """An int32 `[batch, len]` of odd shape (batch 0..5, len 0..100) mixing in-vocabulary,
    special, negative, too large and extreme ids, some rows all PAD or PAD-padded."""
    shape = (int(rng.integers(0, 6)), int(rng.choice([0, 1, 2, 5, 23, 24, 40, 100])))
    kinds = rng.integers(0, 5, size=shape)
    choices = [rng.integers(0, vocab_size, size=shape),
               rng.choice([PAD_ID, BOS_ID, EOS_ID], size=shape),
               rng.integers(-2**31, 0, size=shape),
               rng.integers(vocab_size, 2**31, size=shape),
               rng.choice([-2**31, 2**31 - 1, -1, vocab_size], size=shape)]
    ids = np.choose(kinds, choices).astype(np.int32)
    for row in range(shape[0]):
        if rng.random() < 0.2:
            ids[row] = PAD_ID
        elif rng.random() < 0.3:
            ids[row, rng.integers(0, shape[1] + 1):] = PAD_ID
    return ids


def cleaned(row: np.ndarray, vocab_size: int) -> np.ndarray:
    """`row` as the translator documents it reads ids: out-of-vocabulary ids as UNK, PAD, BOS
    and EOS dropped, at most `max_length - 1` ids kept."""
    ids = np.where((row < 0) | (row >= vocab_size), UNK_ID, row)
    ids = ids[~np.isin(ids, [PAD_ID, BOS_ID, EOS_ID])]
    return ids[:MAX_LENGTH - 1].astype(np.int32)


def test_translate_ids_reads_odd_id_tensors_row_by_row(
    signatures: Mapping[str, Callable[..., dict[str, tf.Tensor]]],
    tokenizer: SubwordTokenizer,
) -> None:
    vocab_size = tokenizer.vocab_size
    rng = np.random.default_rng(40_000)
    fixed = [np.zeros(shape, np.int32) for shape in ((0, 0), (0, 7), (3, 0), (1, 1))] + [
        np.full((2, 40), 7, np.int32), np.full((1, 1), 2**31 - 1, np.int32)]
    for case in range(ID_CASES):
        ids = fixed[case] if case < len(fixed) else random_ids(rng, vocab_size)
        rows = [cleaned(row, vocab_size) for row in ids]
        empty = np.array([not len(row) for row in rows], dtype=bool)
        outputs = call(signatures["translate_ids"], source_ids=ids)
        check_outputs(outputs, empty, vocab_size, case)
        if case % ALONE_EVERY:
            continue
        for index, row in enumerate(rows):
            alone = call(signatures["translate_ids"], source_ids=row[None])
            assert_row_is_alone(outputs, index, alone, case)
