"""The generated English->German demo corpus."""
from pathlib import Path

import pytest

from keras_transformer.data import DEMO_LANGS, read_parallel, write_demo_corpus
from keras_transformer.data.demo_corpus import SPLIT_SIZES, english_number, german_number


@pytest.mark.parametrize(
    ("number", "english", "german"),
    [
        (0, "zero", "null"),
        (17, "seventeen", "siebzehn"),
        (21, "twenty-one", "einundzwanzig"),
        (42, "forty-two", "zweiundvierzig"),
        (307, "three hundred and seven", "dreihundertsieben"),
        (1100, "one thousand one hundred", "eintausendeinhundert"),
        (9999, "nine thousand nine hundred and ninety-nine",
         "neuntausendneunhundertneunundneunzig"),
    ],
)
def test_number_words(number: int, english: str, german: str) -> None:
    assert (english_number(number), german_number(number)) == (english, german)


def test_number_out_of_range_is_rejected() -> None:
    with pytest.raises(ValueError, match="10000"):
        german_number(10000)


def test_same_seed_same_files_other_seed_other_files(tmp_path: Path) -> None:
    first = write_demo_corpus(tmp_path / "a", seed=3)
    again = write_demo_corpus(tmp_path / "b", seed=3)
    other = write_demo_corpus(tmp_path / "c", seed=4)
    assert set(first) == {"train", "dev", "test"}
    for split in first:
        for side in range(2):
            text = Path(first[split][side]).read_bytes()
            assert text == Path(again[split][side]).read_bytes()
            assert text != Path(other[split][side]).read_bytes()


def test_splits_are_disjoint_readable_and_small(tmp_path: Path) -> None:
    paths = write_demo_corpus(tmp_path)
    assert paths["train"][0].endswith(f"train.{DEMO_LANGS[0]}")
    splits = {split: read_parallel(*pair) for split, pair in paths.items()}
    seen: set[str] = set()
    for split, (sources, targets) in splits.items():
        assert len(sources) == len(targets) == SPLIT_SIZES[split]
        assert seen.isdisjoint(sources)
        seen.update(sources)
    sources, targets = splits["train"]
    assert max(len(s.split()) for s in sources) <= 16
    assert len({word for s in sources for word in s.replace("-", " ").split()}) < 80
    assert any("undzwanzig " in t for t in targets)  # German compounds, units first
