"""The translation page (`web/`) in a real browser: headless Chromium, driven by Selenium, loads a
LiteRT export with LiteRT.js and its SentencePiece model with sentencepiece-js, and translates
what is typed into it, into the language chosen (and from the one chosen, of an NLLB-200 or
M2M-100 import), as kt-translate translates with the same export: paragraphs sentence by
sentence with their layout (`--format text`; a line longer than the model takes in parts,
nothing cut), each sentence shown as it arrives, and one sentence a
line (kt-translate's default; an empty line and a cut line included); blank lines pass through
as they are; an export LiteRT.js cannot run and a file the page cannot read are named on the
page; LiteRT's log lines stay off the console's error level; a search that fails frees its
tensors. The page's document plan (web/documents.js) is checked against Python's by
`node --test web/test/` on cases Python writes (web/test/document_cases.py), checked current
here. Skipped without Chromium, its driver, Selenium or the page's npm packages
(`npm ci --prefix web`)."""
import functools
import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
import unicodedata

import pytest

from helpers import ROOT, random_two_language_run, text_lines
from keras_transformer.data import read_parallel, write_demo_corpus
from keras_transformer.documents import document_translator, segmenter
from keras_transformer.documents.document import translatable
from keras_transformer.serving.litert_export import MANIFEST_FILE
from keras_transformer.serving.loading import load_export
from marian_models import MarianVariant, training_sentences, write_marian_model
from trainers import export, import_model, translate

webdriver = pytest.importorskip("selenium.webdriver")
pytest.importorskip("ai_edge_litert.interpreter")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
PAGE = ROOT / "web"
pytestmark = [
    pytest.mark.system,  # a real browser
    pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="no chromium and chromedriver (apt "
                       "install chromium chromium-driver)"),
    pytest.mark.skipif(not (PAGE / "node_modules").is_dir(),
                       reason="the page's packages are not installed (npm ci --prefix web)"),
]
SOURCE_LENGTH = 24  # the random model's max_length


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A static server of a folder holding the page and two exports of one random model of two
    target languages (their tokens first in the source): one of fixed shapes
    (`--source-length`), one of any source length; its address, the exports and demo
    sources."""
    root = tmp_path_factory.mktemp("site")
    run, _ = random_two_language_run(root)
    for name, extra in (("fixed", ["--source-length", str(SOURCE_LENGTH)]), ("any", [])):
        assert export.main([str(run.root), "--name", name, "--base-dir", str(root / "exports"),
                            "--beam-size", "3", "--max-decode-extra", "6", "--format", "litert",
                            *extra]) == 0
    # An imported multi-target Marian model: two SentencePiece models, `>>xx<<` tokens.
    folder = write_marian_model(root / "marian", MarianVariant(
        tied_all=False, languages=("fra", "deu"), max_length=SOURCE_LENGTH))
    assert import_model.main([str(folder), "--output-dir", str(root / "imported")]) == 0
    assert export.main([str(root / "imported"), "--name", "imported", "--base-dir",
                        str(root / "exports"), "--beam-size", "3", "--max-decode-extra", "6",
                        "--format", "litert", "--source-length", str(SOURCE_LENGTH)]) == 0
    (root / "page").symlink_to(PAGE, target_is_directory=True)
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sources = read_parallel(*write_demo_corpus(root / "demo")["test"])[0][:20]
    yield {"url": f"http://127.0.0.1:{server.server_port}", "exports": root / "exports",
           "sources": sources}
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files without a log line per request."""

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium under its driver, its console kept."""
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


def page_state(driver) -> tuple[str, bool]:
    """The page's status line and whether it reports an error."""
    status = driver.find_element(By.ID, "status")
    return status.text, "error" in (status.get_attribute("class") or "")


def open_page(driver, url: str) -> tuple[str, bool]:
    """Opens `url` and waits until the page is ready or reports an error; its state then."""
    driver.get(url)
    WebDriverWait(driver, 120).until(
        lambda d: page_state(d)[0] == "ready" or page_state(d)[1])
    return page_state(driver)


@pytest.mark.slow
def test_the_page_translates_as_kt_translate_does(site, browser, tmp_path):
    """Twenty demo sentences, an empty line and a line past the fixed source length, typed into
    the page and translated into each language it offers: its translations are kt-translate's
    of the same export (`--target-language`) line for line, and the lines cut are named, those
    kt-translate names."""
    status, error = open_page(browser, f"{site['url']}/page/index.html?model=../exports/fixed/1")
    assert (status, error) == ("ready", False), browser.get_log("browser")[-5:]
    choice = Select(browser.find_element(By.ID, "language"))
    assert [option.text for option in choice.options] == ["de", "fr"]
    Select(browser.find_element(By.ID, "format")).select_by_value("lines")
    long_line = " ".join(site["sources"][:4])
    lines = [*site["sources"], "", long_line]
    browser.find_element(By.ID, "source").send_keys("\n".join(lines))
    source = tmp_path / "typed.en"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    translated = {}
    for language in ("fr", "de"):
        choice.select_by_value(language)
        browser.find_element(By.ID, "translate").click()
        WebDriverWait(browser, 300).until(
            lambda d: page_state(d)[0].startswith("translated") or page_state(d)[1])
        status, error = page_state(browser)
        assert not error, status
        cut = load_export(site["exports"] / "fixed" / "1", target_language=language).truncated(
            [line.encode() for line in lines])
        assert [int(number) - 1 for number in re.findall(r"line (\d+): \d+ pieces past the "
                                                         r"model's length", status)] == cut
        assert cut and cut[-1] == len(lines) - 1 and len(cut) < len(lines) / 2
        translated[language] = browser.execute_script(
            "return document.getElementById('translation').textContent").split("\n")
        output = tmp_path / f"typed.{language}"
        assert translate.main([str(site["exports"] / "fixed" / "1"), str(source), "--output",
                               str(output), "--quiet", "--target-language", language]) == 0
        assert translated[language] == text_lines(output), language
        assert translated[language][len(site["sources"])] == ""
        # the next language's translations replace these: the page is read only once changed
        browser.execute_script("document.getElementById('translation').textContent = ''")
    # the translations differ, and the language token is read: the comparisons can fail
    assert len(set(translated["de"][:20])) > 10 and translated["de"] != translated["fr"]


def test_an_export_of_any_source_length_is_named_on_the_page(site, browser):
    """LiteRT.js runs fixed shapes only: the page names the export and --source-length; a
    folder that is not an export is named too, and a source language the browser's segmenter
    does not know."""
    status, error = open_page(browser, f"{site['url']}/page/index.html?model=../exports/any/1")
    assert error and "--source-length" in status and "exports/any/1" in status
    manifest = json.loads((site["exports"] / "any" / "1" / MANIFEST_FILE).read_text())
    assert manifest["source_length"] is None
    status, error = open_page(browser, f"{site['url']}/page/index.html?model=../nothere")
    assert error and "nothere/keras_transformer_litert.json: 404" in status
    status, error = open_page(
        browser, f"{site['url']}/page/index.html?model=../exports/fixed/1&source=no%20language")
    assert error and status.startswith("?source=no language: not a language"), status


@pytest.fixture(scope="module")
def forced_exports(site, tmp_path_factory):
    """Fixed-shape LiteRT exports of a random NLLB-style and M2M-100-style import (the "target"
    placement: the target language's token forced first in the translation, the source
    language's first in the source), served beside the others: their folders by style."""
    from m2m_100_models import M2MVariant, write_m2m_100_folder

    root = tmp_path_factory.mktemp("forced")
    folders = {}
    for style in ("nllb", "m2m100"):
        folder = write_m2m_100_folder(root / style, M2MVariant(style=style, encoder_layers=1))
        assert import_model.main([str(folder), "--output-dir", str(root / f"{style}-run")]) == 0
        assert export.main([str(root / f"{style}-run"), "--name", style, "--base-dir",
                            str(site["exports"]), "--beam-size", "3", "--max-decode-extra", "6",
                            "--format", "litert", "--source-length", str(SOURCE_LENGTH)]) == 0
        folders[style] = site["exports"] / style / "1"
    return folders


@pytest.mark.slow
@pytest.mark.parametrize(("style", "query", "defaults", "pairs"), [
    ("nllb", "?source=eng&target=fra_Latn", ("eng_Latn", "fra_Latn"),
     (("fra_Latn", "deu_Latn"), ("zho_Hans", "deu_Latn"), ("zho_Hans", "fra_Latn"))),
    ("m2m100", "", ("af", "am"), (("en", "zh"), ("ja", "zh"), ("ja", "fr")))])
def test_the_page_translates_between_the_languages_of_an_nllb_or_m2m_100_export(
        site, browser, forced_exports, tmp_path, style, query, defaults, pairs):
    """An NLLB-style and an M2M-100-style import's LiteRT export: the page offers the model's
    languages as sources and targets (chosen by the query, `eng` naming `eng_Latn`, or the
    first language and the first other), and its translations of each pair chosen in the
    pickers, an empty line and a line cut (the source's token counted) included, are
    kt-translate's with `--source-language` and `--target-language` on the same export, and so
    is an HTML fragment's (`--format html`: markup placed by the `alignment` signature); the
    source's token and the target's are read (the translations of two sources into one
    target differ, and of one source into two targets)."""
    folder = forced_exports[style]
    url = f"{site['url']}/page/index.html?model=../exports/{style}/1"
    status, error = open_page(browser, url + query.replace("?", "&"))
    assert (status, error) == ("ready", False), browser.get_log("browser")[-5:]
    codes = sorted(json.loads((folder / MANIFEST_FILE).read_text())["languages"]["tokens"])
    pickers = [Select(browser.find_element(By.ID, name)) for name in ("source-language",
                                                                       "language")]
    for picker, default in zip(pickers, defaults):
        assert [option.get_attribute("value") for option in picker.options] == codes
        assert picker.first_selected_option.get_attribute("value") == default
    sources = training_sentences(12, seed=7)[0]
    lines = [*sources, "", " ".join(sources[:5])]
    source = tmp_path / "typed.src"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    translated = []
    for source_language, target_language in pairs:
        pickers[0].select_by_value(source_language)
        translated.append(translated_text(browser, "\n".join(lines), target_language,
                                          "lines").split("\n"))
        status, _ = page_state(browser)
        cut = load_export(folder, target_language, source_language=source_language).truncated(
            [line.encode() for line in lines])
        assert [int(number) - 1 for number in re.findall(r"line (\d+): \d+ pieces past the "
                                                         r"model's length", status)] == cut
        assert cut == [len(lines) - 1]
        output = tmp_path / f"typed.{source_language}-{target_language}"
        assert translate.main([str(folder), str(source), "--output", str(output), "--quiet",
                               "--source-language", source_language,
                               "--target-language", target_language]) == 0
        assert translated[-1] == text_lines(output), (source_language, target_language)
    for first, second in zip(translated, translated[1:]):
        assert sum(a != b for a, b in zip(first, second)) > 3, (first, second)
    assert sum(map(bool, translated[0] + translated[1])) > len(lines)  # not empty
    # HTML: its markup placed by the `alignment` signature, the forced token aligned, left out
    document = markup_documents(site["sources"])["html"]
    source.write_text(document, encoding="utf-8")
    assert translate.main([str(folder), str(source), "--output", str(output), "--quiet",
                           "--source-language", source_language, "--target-language",
                           target_language, "--format", "html"]) == 0
    expected = output.read_bytes().decode("utf-8")
    assert "<b>" in expected and "<a href" in expected
    assert translated_text(browser, document, target_language, "html") == expected


def test_a_language_an_nllb_export_lacks_is_named_on_the_page(site, browser, forced_exports):
    """A source or target language the query names that the model lacks, or names ambiguously,
    is named on the page with the model's languages."""
    url = f"{site['url']}/page/index.html?model=../exports/nllb/1"
    for query, expected in (("source=ita_Latn", "?source=ita_Latn: the model translates from "
                             "deu_Latn, eng_Latn, fra_Latn, zho_Hans, zho_Hant only"),
                            ("target=zho", "?target=zho: language 'zho' is ambiguous: the model "
                             "has zho_Hans, zho_Hant")):
        assert open_page(browser, f"{url}&{query}") == (expected, True)


def translated_text(driver, text: str, language: str, format: str,  # noqa: A002
                    typed: bool = False, keep: bool = False) -> str:
    """`text` put into the ready page (`typed`: typed; else set, as a paste) and translated
    into `language` (an option's value) as `format` (the format choice's value): the page's
    translation (left on the page with `keep`)."""
    Select(driver.find_element(By.ID, "language")).select_by_value(language)
    Select(driver.find_element(By.ID, "format")).select_by_value(format)
    box = driver.find_element(By.ID, "source")
    # set, not typed, by default: a tab typed into the box would move the focus instead
    driver.execute_script("arguments[0].value = arguments[1]", box, "" if typed else text)
    if typed:
        assert "\t" not in text
        box.send_keys(text)
    driver.find_element(By.ID, "translate").click()
    WebDriverWait(driver, 300).until(
        lambda d: page_state(d)[0].startswith("translated") or page_state(d)[1])
    status, error = page_state(driver)
    assert not error, status
    text = driver.execute_script("return document.getElementById('translation').textContent")
    if not keep:
        driver.execute_script("document.getElementById('translation').textContent = ''")
    return text


def translated_on_the_page(driver, lines: list[str], language: str) -> list[str]:
    """`lines` translated on the ready page one sentence a line (`translated_text`)."""
    return translated_text(driver, "\n".join(lines), language, "lines").split("\n")


def intl_sentences(driver, texts: list[str]) -> list[list[str]]:
    """Each text's sentences as the page finds them (`Intl.Segmenter`, English), trimmed."""
    return driver.execute_script("""
        const segmenter = new Intl.Segmenter("en", {granularity: "sentence"});
        return arguments[0].map((text) => Array.from(
          segmenter.segment(text), (part) => part.segment.trim()).filter(Boolean));""", texts)


def python_sentences(texts: list[str]) -> list[list[str]]:
    """Each text's sentences as the document layer finds them (sentencex, English), stripped."""
    segment = segmenter("en")
    return [[part.strip() for part in segment(text) if part.strip()] for text in texts]


def kt_translate_text(export_dir, document: str, path) -> str:
    """`document` (written at `path`) translated by `kt-translate --format text` into German."""
    path.write_text(document, encoding="utf-8")
    output = path.with_suffix(".de")
    assert translate.main([str(export_dir), str(path), "--output", str(output), "--quiet",
                           "--target-language", "de", "--format", "text"]) == 0
    return output.read_bytes().decode("utf-8")


@pytest.mark.slow
def test_the_page_translates_paragraphs_as_kt_translate_format_text_does(site, browser,
                                                                         tmp_path):
    """Paragraphs of demo sentences (capitalized, ended by '.', '!' or '?': split alike by
    sentencex and Intl.Segmenter) with spaces and a tab between sentences, an empty line, a
    line of whitespace, of numbers and of a URL: the page's translation is kt-translate's
    `--format text` of the same export, and each sentence is shown as it arrives, counted."""
    status, error = open_page(browser, f"{site['url']}/page/index.html?model=../exports/fixed/1")
    assert (status, error) == ("ready", False), status
    sentences = [source[0].upper() + source[1:] + end
                 for source, end in zip(site["sources"][:9], ".!?" * 3)]
    document = ("  " + " ".join(sentences[:3]) + "\n\n" + "\t".join(sentences[3:5]) +
                "  \n \u00a0\n12 345\nhttps://example.org/a\n" + "  ".join(sentences[5:]) + "\n")
    lines = document.splitlines()
    assert intl_sentences(browser, lines) == python_sentences(lines)
    assert [text for found in python_sentences(lines) for text in found
            if translatable(text)] == sentences
    export_dir = site["exports"] / "fixed" / "1"
    expected = kt_translate_text(export_dir, document, tmp_path / "paragraphs.en")
    splits = document_translator(load_export(export_dir, target_language="de")).translate(
        document, "text").splits  # the sentences past the model's length: parts sent apart
    sent = len(sentences) + sum(split.parts - 1 for split in splits)
    browser.execute_script("""
        window.shown = [];
        const count = document.getElementById("count");
        new MutationObserver(() => window.shown.push(
            [count.textContent, document.getElementById("translation").textContent]))
          .observe(count, {childList: true, characterData: true, subtree: true});""")
    assert translated_text(browser, document, "de", "text") == expected
    shown = browser.execute_script("return window.shown")
    assert [count for count, _ in shown] == [f"{done}/{sent} sentences"
                                             for done in range(sent + 1)]
    texts = [text for _, text in shown]
    assert all(expected.startswith(text) for text in texts), texts
    assert all(len(a) < len(b) for a, b in zip(texts, texts[1:])) and texts[-1] == expected
    # the layout is kept: the space around the sentences, the lines with nothing to translate
    lines = expected.split("\n")
    assert lines[0].startswith("  ") and "\t" in lines[2] and lines[2].endswith("  ")
    assert [lines[index] for index in (1, 3, 4, 5)] == ["", " \u00a0", "12 345",
                                                        "https://example.org/a"]


@pytest.mark.slow
def test_a_line_longer_than_the_model_takes_is_translated_in_parts(site, browser, tmp_path):
    """A sentence past the export's source length (demo sentences joined by commas and a
    dash) and a word of 80 letters, typed: translated in parts as kt-translate translates them (the
    same parts: the same text), the lines and parts named as the document layer names them;
    nothing cut."""
    status, error = open_page(browser, f"{site['url']}/page/index.html?model=../exports/fixed/1")
    assert (status, error) == ("ready", False), status
    sources = site["sources"]
    long_sentence = ", ".join(sources[:3]) + " \u2014 " + " ".join(sources[3:6]) + "."
    document = f"Short one. {long_sentence.capitalize()}\n\n{'abcdefghij' * 8}.\n"
    lines = document.splitlines()
    assert intl_sentences(browser, lines) == python_sentences(lines)
    export_dir = site["exports"] / "fixed" / "1"
    splits = document_translator(load_export(export_dir, target_language="de")).translate(
        document, "text").splits
    assert [split.line for split in splits] == [1, 3] and min(s.parts for s in splits) > 1
    expected = kt_translate_text(export_dir, document, tmp_path / "long.en")
    assert translated_text(browser, document, "de", "text", typed=True) == expected
    status, _ = page_state(browser)
    assert status == "translated; in parts, nothing cut: " + ", ".join(
        f"line {split.line} ({split.parts} parts)" for split in splits)


def wrapped(sentence: str, opening: str, closing: str, start: int, count: int) -> str:
    """`sentence` with its words `start` to `start + count` between `opening` and `closing`."""
    words = sentence.split()
    return " ".join(words[:start] + [opening + " ".join(words[start:start + count]) + closing]
                    + words[start + count:])


def markup_documents(sources: list[str]) -> dict[str, str]:
    """An HTML fragment and a Markdown document of demo sentences (capitalized, ended by '.':
    split alike by sentencex and Intl.Segmenter) with inline markup, nested, and a script and
    an event handler that must never run on the page."""
    s = [source[0].upper() + source[1:] + "." for source in sources[:8]]
    link = '<a href="https://example.org/?a=1&amp;b=2">'
    image = "<img src=\"missing.png\" onerror=\"window.pwned = 'img'\">"
    html = (f"<h2>{s[0]}</h2>\n<p>{wrapped(s[1], '<b>', '</b>', 1, 2)} "
            f"{wrapped(s[2], '<i><em>', '</em></i>', 0, 2)}</p>\n"
            f"<p>{wrapped(s[3], link, '</a>', 2, 2)} {image} {s[4]}"
            "<script>window.pwned = 'script'</script></p>\n"
            f"<ul><li>{wrapped(s[5], '<span class=x>', '</span>', 1, 3)}</li></ul>\n")
    image = "<img src=x onerror=\"window.pwned = 'md'\">"
    markdown = (f"# {s[0]}\n\n{wrapped(s[1], '**', '**', 1, 2)} {wrapped(s[2], '_', '_', 0, 2)}"
                f"\n\n- {wrapped(s[3], '[', '](https://example.org)', 2, 2)} `code`\n"
                f"- {s[4]} {image} <a href=\"javascript:window.pwned='link'\">"
                f"{s[5].split()[0]}</a>\n\n"
                f"> {s[6]} {s[7]}\n")
    return {"html": html, "markdown": markdown}


def kt_translate_as(export_dir, document: str, path, format: str) -> str:  # noqa: A002
    """`document` (written at `path`) translated by `kt-translate --format FORMAT` into
    German."""
    path.write_text(document, encoding="utf-8")
    output = path.with_suffix(".de")
    assert translate.main([str(export_dir), str(path), "--output", str(output), "--quiet",
                           "--target-language", "de", "--format", format]) == 0
    return output.read_bytes().decode("utf-8")


@pytest.mark.slow
def test_the_page_translates_html_and_markdown_as_kt_translate_does(site, browser, tmp_path):
    """A paragraph typed, then an HTML fragment and a Markdown document pasted (inline markup,
    nested; a script, an onerror handler, a javascript: link): the page's translation is
    kt-translate's `--format text|html|markdown` of the same LiteRT export (markup placed by
    its `alignment` signature), every tag kept; the rendered translation is sanitized: nothing
    in it runs (no window flag set), and it holds no script, no handler, no javascript: URL."""
    status, error = open_page(browser, f"{site['url']}/page/index.html?model=../exports/fixed/1")
    assert (status, error) == ("ready", False), status
    export_dir = site["exports"] / "fixed" / "1"
    documents = markup_documents(site["sources"])
    plain = [source[0].upper() + source[1:] + "." for source in site["sources"][:8]]
    assert intl_sentences(browser, [" ".join(plain)]) == python_sentences([" ".join(plain)])
    paragraph = " ".join(plain[:3]) + "\n"
    assert translated_text(browser, paragraph, "de", "text", typed=True) == kt_translate_text(
        export_dir, paragraph, tmp_path / "typed.en")
    for format, document in documents.items():  # noqa: A001
        expected = kt_translate_as(export_dir, document, tmp_path / f"pasted.{format}", format)
        assert translated_text(browser, document, "de", format, keep=True) == expected, format
        for mark in (("<h2>", "<b>", "<i><em>", "<a href", "<span class", "<script>", "onerror")
                     if format == "html" else ("# ", "**", "_", "](https://example.org)",
                                               "`code`", "onerror", "javascript:")):
            assert mark in expected, (format, mark)
        preview = browser.find_element(By.ID, "preview")
        assert preview.is_displayed()
        found = browser.execute_script("""
            const preview = document.getElementById("preview");
            const all = [...preview.querySelectorAll("*")];
            return {scripts: preview.querySelectorAll("script").length,
                    handlers: all.flatMap((node) => [...node.attributes].map((a) => a.name))
                      .filter((name) => name.startsWith("on")),
                    links: all.map((node) => node.getAttribute("href") ?? "")
                      .filter((href) => /^\\s*javascript:/i.test(href)),
                    tags: all.map((node) => node.tagName.toLowerCase())};""")
        assert found["scripts"] == 0 and found["handlers"] == [] and found["links"] == [], found
        assert {"b", "em", "a"} <= set(found["tags"]) or {"strong", "em", "a"} <= set(
            found["tags"]), found
        browser.execute_script("document.getElementById('translation').textContent = ''")
    browser.find_element(By.ID, "source").click()  # whatever could still fire has fired
    assert browser.execute_script("return window.pwned === undefined")


def test_the_pages_document_cases_are_pythons(tmp_path):
    """web/test/document-cases.json, which `node --test web/test/` checks the page's document
    plan against, is what the Python document layer gives now."""
    written = tmp_path / "cases.json"
    subprocess.run([sys.executable, str(PAGE / "test" / "document_cases.py"), str(written)],
                   check=True, capture_output=True)
    assert written.read_bytes() == (PAGE / "test" / "document-cases.json").read_bytes(), (
        "write them anew: python web/test/document_cases.py")


def test_the_pages_letters_and_url_words_are_pythons(site, browser):
    """What the page takes for something to translate (web/documents.js `translatable`: a
    letter, not a URL or an address alone) is the document layer's over every code point
    Python's Unicode data assigns: a code point alone, and ending an address."""
    browser.get(f"{site['url']}/page/index.html?model=../exports/fixed/1")
    found = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        import(new URL("documents.js", location.href).href).then(({translatable}) => {
          const alone = [], address = [];
          for (let code = 0; code <= 0x10ffff; code++) {
            const char = String.fromCodePoint(code);
            if (translatable(char)) alone.push(code);
            if (translatable("a@b." + char)) address.push(code);
          }
          done({alone, address});
        }, (error) => done(String(error)));""")
    assigned = {code for code in range(0x110000) if unicodedata.category(chr(code)) != "Cn"}
    assert [code for code in found["alone"] if code in assigned] == [
        code for code in sorted(assigned) if translatable(chr(code))]
    assert [code for code in found["address"] if code in assigned] == [
        code for code in sorted(assigned) if translatable("a@b." + chr(code))]


@pytest.mark.slow
def test_the_page_translates_an_imported_models_export_as_kt_translate_does(site, browser,
                                                                             tmp_path):
    """An imported multi-target model's export (a source and a target SentencePiece model, our
    ids mapped to theirs, `>>xx<<` tokens): the page's translations into each language, and
    as each text says (a text's own token, or one the language asked for replaces), are
    kt-translate's of the same export."""
    status, error = open_page(browser,
                              f"{site['url']}/page/index.html?model=../exports/imported/1")
    assert (status, error) == ("ready", False), browser.get_log("browser")[-5:]
    options = Select(browser.find_element(By.ID, "language")).options
    assert [option.get_attribute("value") for option in options] == ["", "deu", "fra"]
    sources = training_sentences(24, seed=5)[0]
    lines = [*sources[:8], f">>deu<< {sources[8]}", f">>fra<<  {sources[9]}", "", *sources[10:]]
    source = tmp_path / "typed.src"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    translated = {}
    for language in ("", "fra", "deu"):
        translated[language] = translated_on_the_page(browser, lines, language)
        output = tmp_path / f"typed.{language or 'own'}"
        assert translate.main([str(site["exports"] / "imported" / "1"), str(source),
                               "--output", str(output), "--quiet",
                               *(["--target-language", language] if language else [])]) == 0
        assert translated[language] == text_lines(output), language
    assert translated["fra"] != translated["deu"] and len(set(translated["fra"])) > 10


def test_blank_lines_are_their_own_translation(site, browser, tmp_path):
    """Lines of spaces, a tab, no-break spaces or a mix come out as they went in, never sent to
    the model (which invents text for them); the lines around them are kt-translate's."""
    status, error = open_page(browser, f"{site['url']}/page/index.html?model=../exports/fixed/1")
    assert (status, error) == ("ready", False), status
    sources = site["sources"][:4]
    blanks = ["   ", "\t", "\u00a0", " \t\u00a0\u3000 "]
    lines = [sources[0], blanks[0], sources[1], blanks[1], blanks[2], sources[2], blanks[3],
             sources[3]]
    source = tmp_path / "sources.en"
    source.write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    output = tmp_path / "sources.de"
    assert translate.main([str(site["exports"] / "fixed" / "1"), str(source), "--output",
                           str(output), "--quiet", "--target-language", "de"]) == 0
    expected = iter(text_lines(output))
    assert translated_on_the_page(browser, lines, "de") == [
        line if line in blanks else next(expected) for line in lines]


def test_the_pages_blank_lines_are_those_python_strips_to_nothing(site, browser):
    """The page's rule (web/lines.js `isBlank`) takes a character for whitespace where Python's
    `str.isspace` does, over every code point (JavaScript's own whitespace class differs)."""
    browser.get(f"{site['url']}/page/index.html?model=../exports/fixed/1")
    blank = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        import(new URL("lines.js", location.href).href).then(({isBlank}) => {
          const codes = [];
          for (let code = 0; code <= 0x10ffff; code++) {
            if (isBlank(String.fromCodePoint(code))) codes.push(code);
          }
          done(codes);
        }, (error) => done(String(error)));""")
    assert blank == [code for code in range(0x110000) if chr(code).isspace()]


@pytest.mark.parametrize(("export", "file", "what"), [
    ("fixed", "model.tflite", "the model"), ("fixed", "spm.model", "the tokenizer"),
    ("fixed", MANIFEST_FILE, "the manifest"), ("imported", "vocabulary.json", "the vocabulary"),
    ("imported", "target.spm", "the target tokenizer")])
def test_a_file_the_page_cannot_read_is_named(site, browser, export, file, what):
    """An export with one file corrupt: the page names that file and what it is for."""
    folder = site["exports"] / f"corrupt-{export}-{file}"
    if not folder.exists():
        shutil.copytree(site["exports"] / export, folder)
        (folder / "1" / file).write_bytes(b"not what the page expects\n")
    status, error = open_page(
        browser, f"{site['url']}/page/index.html?model=../exports/{folder.name}/1")
    url = f"{site['url']}/exports/{folder.name}/1/{file}"
    assert error and status.startswith(f"{url}: ") and status.endswith(f"({what})"), status


def test_litert_log_lines_stay_off_the_consoles_error_level(site, browser):
    """Loading an export and translating with it prints nothing at the console's error level;
    LiteRT's own log lines are there, at their own level (INFO)."""
    browser.get_log("browser")  # what earlier pages printed
    status, error = open_page(browser, f"{site['url']}/page/index.html?model=../exports/fixed/1")
    assert (status, error) == ("ready", False), status
    translated_on_the_page(browser, site["sources"][:2], "fr")
    log = browser.get_log("browser")
    assert [entry["message"] for entry in log if entry["level"] == "SEVERE"] == []
    assert any(entry["level"] == "INFO" and "INFO: [" in entry["message"] for entry in log), log


def test_a_search_that_fails_frees_its_tensors(site, browser):
    """A model whose run throws, or whose outputs cannot be read: the error reaches the caller
    and the tensors in (and out) are freed; a second export loads beside the first."""
    status, error = open_page(browser, f"{site['url']}/page/index.html?model=../exports/fixed/1")
    assert (status, error) == ("ready", False), status
    result = browser.execute_async_script("""
        const [source, done] = arguments;
        (async () => {
          const {BrowserTranslator} = await import(new URL("translator.js", location.href).href);
          const translator = await BrowserTranslator.load(
            new URL("../exports/fixed/1/", location.href),
            new URL("node_modules/@litertjs/core/wasm/", location.href).href);
          const model = translator.model;
          const run = model.run.bind(model);
          const seen = {};
          const failure = () => translator.translate(source, "de").then(
            () => "no error", (error) => error.message);
          model.run = async (signature, inputs) => {
            seen.input = inputs.source_ids;
            throw new Error("the run failed");
          };
          const runFailed = await failure();
          model.run = async (signature, inputs) => {
            seen.outputs = await run(signature, inputs);
            seen.outputs.scores.toTypedArray = () => { throw new Error("unreadable"); };
            return seen.outputs;
          };
          const readFailed = await failure();
          return {runFailed, inputFreed: seen.input.deleted, readFailed,
                  outputsFreed: Object.values(seen.outputs).map((tensor) => tensor.deleted)};
        })().then(done, (error) => done(String(error)));""", site["sources"][0])
    assert result == {"runFailed": "the run failed", "inputFreed": True,
                      "readFailed": "unreadable", "outputsFreed": [True, True]}, result



def test_a_page_without_its_packages_says_how_to_install_them(site, browser):
    """The page's files without node_modules: the page says what is missing and the command."""
    bare = site["exports"].parent / "bare-page"
    shutil.copytree(PAGE, bare, ignore=shutil.ignore_patterns("node_modules"),
                    dirs_exist_ok=True)
    status, error = open_page(browser,
                              f"{site['url']}/bare-page/index.html?model=../exports/fixed/1")
    assert error and "npm ci --prefix web" in status, status
