"""tensorflow-datasets source: downloads and preparation from a local HTTP server, and mock
data (no downloads)."""
import functools
import http.server
import io
import socket
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download import downloader

from keras_transformer.data import load_tfds

TED = "ted_hrlr_translate/pt_to_en"
# Its train split as the archive holds it, a line a sentence: the builder drops the pair with
# an empty side.
TRAIN = [("bom dia", "good morning"), ("uma casa pequena", "a small house"),
         ("", "an empty Portuguese side")]


def ted_archive() -> bytes:
    """A tar.gz laid out as the TED archive that ``ted_hrlr_translate`` downloads, with
    TRAIN as its pt_to_en train split and one pair for its dev and test splits."""
    splits = {"train": TRAIN, "dev": [("obrigado", "thank you")],
              "test": [("adeus", "goodbye")]}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for split, pairs in splits.items():
            for index, lang in enumerate(("pt", "en")):
                text = "\n".join(pair[index] for pair in pairs).encode("utf-8")
                member = tarfile.TarInfo(f"datasets/pt_to_en/{lang}.{split}")
                member.size = len(text)
                archive.addfile(member, io.BytesIO(text))
    return buffer.getvalue()


def set_ted_url(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """Points the real ``ted_hrlr_translate`` builder's download at ``url``."""
    module = sys.modules[tfds.builder_cls("ted_hrlr_translate").__module__]
    monkeypatch.setattr(module, "_DATA_URL", url)


@pytest.fixture
def served_ted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Serves ``ted_archive()`` over HTTP on the loopback interface while the test runs, as
    the archive the builder downloads."""
    served = tmp_path / "served"
    served.mkdir()
    (served / "ted.tar.gz").write_bytes(ted_archive())
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=served)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    set_ted_url(monkeypatch, f"http://127.0.0.1:{server.server_address[1]}/ted.tar.gz")
    yield
    server.shutdown()
    server.server_close()


def test_a_builder_downloads_and_prepares_then_reads_without_downloading(
        served_ted: None, tmp_path: Path) -> None:
    data_dir = str(tmp_path / "tfds")
    expected = ([pt for pt, en in TRAIN if pt], [en for pt, en in TRAIN if pt])
    assert load_tfds(TED, "train", "pt", "en", data_dir=data_dir) == expected
    assert load_tfds(TED, "validation", "en", "pt", data_dir=data_dir) == (["thank you"],
                                                                           ["obrigado"])
    assert any((tmp_path / "tfds" / "downloads").iterdir())
    assert load_tfds(TED, "train", "pt", "en", data_dir=data_dir, download=False) == expected


def test_a_download_that_cannot_connect_names_the_dataset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as closed:  # a port that nothing listens on: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    set_ted_url(monkeypatch, f"http://127.0.0.1:{port}/ted.tar.gz")
    monkeypatch.setattr(downloader, "MAX_RETRIES", 0)  # tensorflow-datasets retries for minutes
    with pytest.raises(ValueError, match=f"cannot download and prepare tensorflow-datasets "
                                         f"'{TED}' into .*127.0.0.1"):
        load_tfds(TED, "train", "pt", "en", data_dir=str(tmp_path / "tfds"))


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
