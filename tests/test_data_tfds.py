"""tensorflow-datasets source, on mock data (no downloads)."""
import pytest
import tensorflow_datasets as tfds

from keras_transformer.data import load_tfds


@pytest.mark.parametrize("name", ["ted_hrlr_translate/pt_to_en", "wmt14_translate/de-en"])
def test_pairs_follow_the_requested_direction(name: str) -> None:
    source_lang, target_lang = ("pt", "en") if name.startswith("ted") else ("en", "de")
    with tfds.testing.mock_data(num_examples=6):
        sources, targets = load_tfds(name, "train", source_lang, target_lang)
        reverse_targets, reverse_sources = load_tfds(name, "train", target_lang, source_lang)
    assert len(sources) == len(targets) > 0
    assert all(isinstance(text, str) and text == text.strip() for text in sources + targets)
    assert (sources, targets) == (reverse_sources, reverse_targets)
    assert sources != targets


@pytest.mark.parametrize(
    ("name", "source_lang", "message"),
    [
        ("wmt14_translat/de-en", "en", "unknown tensorflow-datasets name 'wmt14_translat'.*"
                                       "wmt14_translate"),
        ("wmt14_translate/xx-yy", "en", "cannot build tensorflow-datasets 'wmt14_translate/xx-yy'"),
        ("wmt14_translate/de-en", "fr", "source_lang='fr' is not a language"),
    ],
)
def test_bad_names_are_clear_errors(name: str, source_lang: str, message: str) -> None:
    with tfds.testing.mock_data(num_examples=2), pytest.raises(ValueError, match=message):
        load_tfds(name, "train", source_lang, "de")
