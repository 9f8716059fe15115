"""Documents: plain text split into sentences with its layout kept, HTML and Markdown with
their markup carried by word alignment, sentences longer than the model takes translated in
parts; first with a translator whose alignment is known, then through kt-translate."""
import html.parser
import io
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from helpers import random_run
from keras_transformer.documents import DocumentTranslator, segmenter
from keras_transformer.documents import markdown as markdown_format
from keras_transformer.documents.document import translatable
from keras_transformer.documents.inline import Aligned
from keras_transformer.documents.segmentation import fitted_spans, sentence_spans
from keras_transformer.decoding.alignment import word_alignment
from keras_transformer.training.run_dir import RunDir
from trainers import translate


def reversed_upper(texts, aligned=True):
    """A translator whose alignment is known: each sentence's words upper-cased in reverse
    order, word i aligned to source word n - 1 - i."""
    out = []
    for text in texts:
        words = text.split()
        out.append(Aligned(" ".join(word.upper() for word in reversed(words)),
                           [len(words) - 1 - index for index in range(len(words))]))
    return out


def documents(too_long=None, translate=reversed_upper) -> DocumentTranslator:
    return DocumentTranslator(translate, segmenter("en"), too_long)


class Tags(html.parser.HTMLParser):
    """The start tags of a document (their source text) and whether they nest: each end tag
    closes the element opened last."""

    def __init__(self, document: str):
        super().__init__(convert_charrefs=True)
        self.starts: list[str] = []
        self.open: list[str] = []
        self.nested = True
        self.text: list[str] = []
        self.feed(document)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.starts.append(self.get_starttag_text())
        if tag not in ("br", "img", "meta", "hr", "input", "link", "wbr"):
            self.open.append(tag)

    def handle_endtag(self, tag):
        self.nested = self.nested and bool(self.open) and self.open.pop() == tag

    def handle_data(self, data):
        self.text.append(data)


def words(text: str) -> list[str]:
    return text.split()


def test_a_line_of_three_sentences_comes_back_as_their_three_translations():
    line = "they have sold nineteen cats. we see six books. they have sold nine children."
    translated = documents().translate(line + "\n").text
    assert translated == "CATS. NINETEEN SOLD HAVE THEY BOOKS. SIX SEE WE CHILDREN. NINE SOLD " \
                         "HAVE THEY\n"


def test_layout_whitespace_numbers_and_urls_pass_through_as_they_are():
    document = ("  Two  sentences here.   And here.\t\n\n \u00a0\n42 %\nhttps://example.org/a\n"
                "\r\nmixed endings.\r\nno end")
    translated = documents().translate(document).text
    assert translated == ("  HERE. SENTENCES TWO   HERE. AND\t\n\n \u00a0\n42 %\n"
                          "https://example.org/a\n\r\nENDINGS. MIXED\r\nEND NO")
    assert translatable("it is 5 pm") and not translatable("3.14 + 2") and not translatable(
        "www.example.org/x") and not translatable("me@example.org")


def test_sentences_longer_than_the_model_takes_are_split_at_clauses_then_words_never_cut():
    text = ("one two three four five, six seven eight nine ten eleven twelve thirteen fourteen "
            "fifteen sixteen seventeen")
    too_long = lambda texts: [len(t.split()) > 6 for t in texts]  # noqa: E731
    [parts] = fitted_spans(text, [(0, len(text))], too_long)
    pieces = [text[a:b] for a, b in parts]
    assert pieces[0] == "one two three four five,"  # the clause first
    assert all(len(piece.split()) <= 6 for piece in pieces)
    assert " ".join(pieces).split() == text.split()  # nothing cut, nothing dropped
    one_word = "x" * 50
    [parts] = fitted_spans(one_word, [(0, 50)], lambda texts: [len(t) > 8 for t in texts])
    assert "".join(one_word[a:b] for a, b in parts) == one_word
    translated = documents(too_long).translate(text + "\n")
    assert [(split.line, split.parts) for split in translated.splits] == [(1, len(parts := [
        p for p in fitted_spans(text, [(0, len(text))], too_long)[0]]))]
    assert sorted(words(translated.text)) == sorted(word.upper() for word in words(text))


def test_segments_a_segmenter_changed_are_never_lost():
    def changing(text):  # a segmenter that normalizes the text it returns
        return [text.replace("  ", " ")]
    text = "Two  spaces. Then more."
    assert sentence_spans(text, changing) == [(0, len(text))]
    assert sentence_spans("a. b", segmenter("en"), breaks=[2]) == [(0, 2), (3, 4)]


HTML = ('<!DOCTYPE html>\n<html><head><title>The cats</title><style>p { color: red }</style>'
        '</head>\n<body><!-- a comment --><p class="x">they have <b>sold nineteen</b> cats &amp; '
        'dogs.<br>We <a href="/x?a=1&amp;b=2">see <i>six</i></a> books.</p>\n'
        '<ul><li>Run <code>ls -l</code> now</li><li translate="no">keep this</li></ul>'
        '<pre>  keep\n  me</pre><p>2024</p></body></html>\n')


def test_html_tags_follow_their_words_and_code_comments_attributes_stay_as_they_are():
    translated = documents().translate(HTML, "html").text
    assert "<title>CATS THE</title>" in translated
    assert "<style>p { color: red }</style>" in translated
    assert '<!-- a comment --><p class="x">DOGS. &amp; CATS <b>NINETEEN SOLD</b> HAVE THEY<br>' \
        in translated
    assert 'BOOKS. <a href="/x?a=1&amp;b=2"><i>SIX</i> SEE</a> WE</p>' in translated
    # An atom goes after the target words aligned to the source words before it.
    assert "<li>NOW RUN <code>ls -l</code></li>" in translated
    assert '<li translate="no">keep this</li>' in translated
    assert "<pre>  keep\n  me</pre><p>2024</p>" in translated


def random_html(rng: random.Random) -> str:
    """A paragraph of 1-3 sentences with 1-3 inline spans of 1-3 words, nested now and then."""
    vocabulary = "the cat sees a dog we have sold nine red books and six green pears".split()
    out = []
    for _ in range(rng.randint(1, 3)):
        sentence = [rng.choice(vocabulary) for _ in range(rng.randint(3, 9))]
        for _ in range(rng.randint(1, 3)):
            start = rng.randrange(len(sentence))
            end = min(len(sentence), start + rng.randint(1, 3))
            tag = rng.choice(["b", "i", 'a href="u"', "span"])
            name = tag.split()[0]
            sentence[start] = f"<{tag}>" + sentence[start]
            sentence[end - 1] = sentence[end - 1] + f"</{name}>"
        out.append(" ".join(sentence) + ".")
    return "<p>" + " ".join(out) + "</p>"


def well_formed_span(document: str) -> bool:
    stack = []
    for match in re.finditer(r"<(/?)(\w+)[^>]*>", document):
        if match.group(1):
            if not stack or stack.pop() != match.group(2):
                return False
        else:
            stack.append(match.group(2))
    return not stack


@pytest.mark.parametrize("seed", range(3))
def test_html_output_keeps_every_tag_nested_and_its_text_is_the_plain_translation(seed):
    """Under any alignment (here a shuffled one): every source start tag is in the output,
    the output's tags nest, and its text without tags is the translation of the text
    without tags."""
    rng = random.Random(seed)

    def shuffled(texts, aligned=True):
        out = []
        for text in texts:
            words_of = text.split()
            alignment = [rng.randrange(-1, len(words_of)) for _ in words_of]
            out.append(Aligned(" ".join(w.upper() for w in words_of), alignment))
        return out
    for _ in range(20):
        source = random_html(rng)
        if not well_formed_span(source):
            continue  # spans that cross each other: not HTML
        translated = documents(translate=shuffled).translate(source, "html").text
        tags = Tags(translated)
        assert tags.nested and not tags.open, (source, translated)
        assert set(Tags(source).starts) <= set(tags.starts), (source, translated)
        plain = documents(translate=shuffled).translate(
            "".join(Tags(source).text), "text").text
        assert "".join(tags.text).split() == plain.split()


def test_a_broken_page_is_translated_as_well_as_can_be_and_loses_no_text():
    broken = ("<p>an <b>unclosed bold. a stray </i> end. 3 < 4 and x<y.</p><div>"
              + "<span>" * 1000 + "deep words" + "</span>" * 1000 + "</div>\x00\x01 binary")
    translated = documents().translate(broken, "html").text
    assert "</b>" in translated and "</i>" in translated  # closed where its block ends; copied
    assert "WORDS DEEP" in translated and translated.count("<span>") == 1000
    assert "&lt;" in translated  # the "<" of "3 < 4", read as text, written escaped



def identity(texts, aligned=True):
    """A translator that changes nothing: each word aligned to itself."""
    return [Aligned(text, list(range(len(text.split())))) for text in texts]


def big_page(megabytes: float) -> str:
    """A well-formed page of `megabytes`, as big pages are about half data for their scripts:
    paragraphs, each unlike the others (its number in it), with inline elements, attributes,
    entities, comments, `<` in text and line breaks, each followed by a script of its data;
    now and then a list and preformatted text."""
    words = "the cat sees a dog we have sold nine red books and six green pears".split()
    rng = random.Random(0)
    phrases = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) for _ in range(97)]
    parts = ["<!DOCTYPE html>\n<html><head><title>A big page</title></head><body>\n"]
    size, number = len(parts[0]), 0
    while size < megabytes * 1e6:
        first, second = phrases[number % 97], phrases[(number * 7) % 97]
        part = (f'<p class="c{number % 5}">{first} <b>{number}</b> and <a href="/p{number}?a=1'
                f'&amp;b=2">{second} <i>x</i></a>. So 3 < 4 &amp; more.<br>\n'
                f"<!-- note {number} --><span>{second}</span></p>\n"
                f'<script>data({{"id": {number}, "ok": {number} < 4, "text": "{first} '
                f'{second} {first}"}});</script>\n')
        if number % 50 == 0:
            part += (f"<ul><li>{first}</li><li><em>{second}</em> {number}</li></ul>\n"
                     f"<pre> keep\n {number}</pre>\n")
        parts.append(part)
        size += len(part)
        number += 1
    return "".join(parts) + "</body></html>\n"


def test_a_10_megabyte_page_keeps_every_tag_and_word():
    """A 10 MB page through a translator that changes nothing: every tag is in the output as
    often as in the source, nested, and the text without tags is the same words (a sentence's
    end punctuation may move inside the element of the word it follows)."""
    page = big_page(10)
    translated = documents(translate=identity).translate(page, "html").text
    tags, source = Tags(translated), Tags(page)
    assert tags.nested and not tags.open
    assert Counter(tags.starts) == Counter(source.starts)
    assert Counter(re.findall(r"</\w+>", translated)) == Counter(re.findall(r"</\w+>", page))
    assert "".join(tags.text).split() == "".join(source.text).split()
    assert translated.count("\n") == page.count("\n")


def test_1000_nested_elements_keep_every_tag():
    """1,000 nested blocks around 1,000 nested inline elements: no recursion error, every tag
    kept, nested, around the translated words."""
    page = ("<div>" * 500 + "<p>one " + "<span><b>" * 500 + "deep words" + "</b></span>" * 500
            + " here.</p>" + "</div>" * 500)
    translated = documents().translate(page, "html").text
    tags = Tags(translated)
    assert tags.nested and not tags.open
    assert Counter(tags.starts) == Counter(Tags(page).starts)
    assert Counter(re.findall(r"</\w+>", translated)) == Counter(re.findall(r"</\w+>", page))
    assert "".join(tags.text).split() == ["HERE.", "WORDS", "DEEP", "ONE"]

MARKDOWN = """---
title: front matter is copied
---
# The *red* cat

> they have **sold** [nine cats](http://example.org "title") and `ls -l` here.  
> A new line.

- one item
- two ![an image](i.png) <https://auto.example>

| name | word |
|---|---|
| cell *one* | two |

```python
print("code")
```

    indented code

<div>html block</div>
"""


def test_markdown_blocks_stay_inline_markup_follows_and_the_structure_parses_the_same():
    translated = documents().translate(MARKDOWN, "markdown").text
    assert translated.startswith("---\ntitle: front matter is copied\n---\n# CAT *RED* THE\n")
    assert '> HERE. AND [CATS NINE](http://example.org "title") **SOLD** HAVE THEY `ls -l`  \n' \
        "> LINE. NEW A\n" in translated
    assert "- ITEM ONE\n- TWO ![an image](i.png) <https://auto.example>\n" in translated
    assert "| NAME | WORD |\n|---|---|\n| *ONE* CELL | TWO |" in translated
    assert '```python\nprint("code")\n```\n\n    indented code\n\n<div>html block</div>\n' \
        in translated
    assert markdown_format.structure(translated) == markdown_format.structure(MARKDOWN)


def test_markdown_special_characters_in_translations_stay_text():
    def starred(texts, aligned=True):
        return [Aligned("*not* emphasis # [x](y) 1. - |", None) for _ in texts]
    source = "| a |\n|---|\n| b c |\n\nplain text here\n"
    translated = documents(translate=starred).translate(source, "markdown").text
    assert markdown_format.structure(translated) == markdown_format.structure(source)
    assert "\\*not\\* emphasis" in translated
    for text, written in (("12. Mai", "12\\. Mai"), ("- x", "\\- x"), ("3) y", "3\\) y")):
        assert markdown_format.escape(text) == written
        assert markdown_format.parser().parse(written)[0].type == "paragraph_open"
        rendered = markdown_format.parser().render(written)
        assert rendered == f"<p>{text}</p>\n"  # the text as it was: no backslash left


def test_word_alignment_follows_pieces_and_ignores_tokens_and_eos():
    # source "<2de> ▁they ▁ha ve ▁cats </s>"; target "▁Sie ▁ha ben ▁Katzen"
    source = ["<2de>", "\u2581they", "\u2581ha", "ve", "\u2581cats", "</s>"]
    target = ["\u2581Sie", "\u2581ha", "ben", "\u2581Katzen"]
    assert word_alignment(target, source, [1, 2, 3, 4], 3, 3) == [0, 1, 2]
    assert word_alignment(target, source, [5, 0, 0, 4], 3, 3) == [-1, -1, 2]
    assert word_alignment(target, source, [1, 2, 3, 4], 3, 4) is None  # words miscounted


@pytest.fixture(scope="module")
def run_dir(demo_vocab: Path, tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    return random_run(demo_vocab, tmp_path_factory.mktemp("run"))


def kt_translate(argv, capsys) -> tuple[int, str, str]:
    stdout = io.StringIO()
    code = translate.main(argv, stdout=stdout)
    return code, stdout.getvalue(), capsys.readouterr().err


@pytest.mark.slow
def test_kt_translate_documents_equal_their_sentences_translated_alone(run_dir, tmp_path,
                                                                        capsys):
    """Through a run: each sentence of a paragraph translates as it does alone on a line; a
    line past the model's 24 pieces is translated in parts (warned, nothing cut); HTML's text
    without its tags is the text format's translation of the page's text, its tags kept."""
    sentences = ["I have forty-two apples.", "She sees three dogs.", "One cat sleeps."]
    alone = tmp_path / "alone.txt"
    alone.write_text("\n".join(sentences) + "\n")
    code, lines, _ = kt_translate([str(run_dir.root), str(alone)], capsys)
    assert code == 0
    paragraph = tmp_path / "paragraph.txt"
    long_line = " ".join(["seventeen green pears,"] * 12)
    paragraph.write_text(" ".join(sentences) + "\n\n" + long_line + "\n")
    code, text, err = kt_translate([str(run_dir.root), str(paragraph), "--format", "text"],
                                   capsys)
    assert code == 0, err
    first, empty, parts = text.split("\n")[:3]
    assert first == " ".join(lines.splitlines()) and empty == ""
    assert "paragraph.txt: 1 sentence(s) longer than the model takes" in err and "line 3" in err
    assert parts.strip()
    page = tmp_path / "page.html"
    page.write_text("<p>I have <b>forty-two</b> apples. <i>She sees</i> three dogs.</p>\n")
    code, translated, err = kt_translate([str(run_dir.root), str(page)], capsys)
    assert code == 0, err
    tags = Tags(translated)
    assert tags.nested and {"<p>", "<b>", "<i>"} <= set(tags.starts)
    plain = tmp_path / "plain.txt"
    plain.write_text("I have forty-two apples. She sees three dogs.\n")
    assert "".join(tags.text).split() == kt_translate(
        [str(run_dir.root), str(plain), "--format", "text"], capsys)[1].split()


def test_files_with_a_byte_order_mark_binary_bytes_and_mixed_line_endings(run_dir, tmp_path,
                                                                          capsys):
    """A document's byte-order mark is dropped (said once), bytes that are not UTF-8 are
    named by line and translated with replacements, CR LF and LF endings kept line for line."""
    page = tmp_path / "page.md"
    page.write_bytes(b"\xef\xbb\xbf# Title here\r\n\r\nOne cat \xff sleeps.\n\nTwo dogs.\r\n")
    code, translated, err = kt_translate([str(run_dir.root), str(page)], capsys)
    assert code == 0, err
    assert "\ufeff" not in translated and translated.startswith("# ")
    assert [line.endswith("\r") for line in translated.split("\n")] == [
        True, True, False, False, True, False]
    assert f"{page}:3: not valid UTF-8" in err


def test_a_table_of_100_columns_keeps_its_cells():
    table = ("| " + " | ".join(f"head {i}" for i in range(100)) + " |\n|" + "---|" * 100 + "\n| "
             + " | ".join(f"word {i}" for i in range(100)) + " |\n")
    translated = documents().translate(table, "markdown").text
    assert markdown_format.structure(translated) == markdown_format.structure(table)
    assert translated.splitlines()[2] == "| " + " | ".join(f"{i} WORD" for i in range(100)) + " |"


def test_document_formats_refuse_line_options_by_name(run_dir, tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("# a\n")
    code, _, err = kt_translate([str(run_dir.root), str(page), "--nbest", "2"], capsys)
    assert code == 2 and "--nbest: only with --format lines" in err


def test_markup_needs_a_translator_with_word_alignment():
    without = DocumentTranslator(reversed_upper, segmenter("en"), aligned=False)
    assert without.translate("We see. They go.", "text").text == "SEE. WE GO. THEY"
    with pytest.raises(ValueError, match="format: html places markup by word alignment"):
        without.translate("<p>a <b>b</b></p>", "html")


DEBIAN_PAGE = Path("/usr/share/doc/base-passwd/users-and-groups.html")


@pytest.mark.slow
def test_a_real_page_and_a_real_readme_keep_every_tag_their_code_and_structure(run_dir, tmp_path,
                                                                              capsys):
    """Documents nobody here wrote, through kt-translate on a run: markdown-it-py's own README
    (from its installed metadata) parses back to the same structure with its code blocks
    untouched; a Debian package's HTML manual (where the machine has it) keeps every start tag,
    nested. The search stops 2 pieces past each source's length (the random model's
    translations are not the check)."""
    from importlib.metadata import distribution

    readme = tmp_path / "README.md"
    readme.write_text(distribution("markdown-it-py").metadata.get_payload(), encoding="utf-8")
    short = ["--max-decode-extra", "2"]
    code, translated, err = kt_translate([str(run_dir.root), str(readme), *short], capsys)
    assert code == 0, err
    source = readme.read_text(encoding="utf-8")
    assert markdown_format.structure(translated) == markdown_format.structure(source)
    fences = re.compile(r"^```.*?^```", re.S | re.M)
    assert fences.findall(translated) == fences.findall(source) != []
    if not DEBIAN_PAGE.is_file():
        pytest.skip(f"{DEBIAN_PAGE} is not on this machine")
    code, translated, err = kt_translate([str(run_dir.root), str(DEBIAN_PAGE), *short], capsys)
    assert code == 0, err
    page = DEBIAN_PAGE.read_text(encoding="utf-8")
    tags, source_tags = Tags(translated), Tags(page)
    assert tags.nested and not tags.open and set(source_tags.starts) <= set(tags.starts)


def test_an_element_whose_words_got_no_translation_takes_an_unmarked_words():
    """A translation that leaves an element's words out: the element takes the target word
    aligned nearest to its words among those of unmarked source words, so that Markdown, which
    has no empty emphasis, parses back the same."""
    def shorter(texts, aligned=True):
        # "a woman holding a bowl in a kitchen" -> five words, none aligned to "kitchen".
        return [Aligned("EINE FRAU HÄLT EINE SCHÜSSEL", [0, 1, 2, 3, 4]) for _ in texts]

    source = "a woman **holding a** bowl in a _kitchen_"
    translated = documents(translate=shorter).translate(source, "markdown").text
    assert translated == "EINE FRAU **HÄLT EINE** _SCHÜSSEL_"
    assert markdown_format.structure(translated) == markdown_format.structure(source)


@pytest.mark.parametrize("form, source", [("text", "they have 5 cats\n"),
                                         ("html", "<p>they have <b>5 cats</b></p>\n")])
def test_the_translations_own_whitespace_is_kept(form, source):
    """A no-break space the model writes between two words stays one: words are placed, not
    the translation's text rebuilt with plain spaces."""
    def numbered(texts, aligned=True):
        return [Aligned("sie haben 5\u00a0Katzen", [0, 1, 2, 3]) for _ in texts]

    translated = documents(translate=numbered).translate(source, form).text
    assert "5\u00a0Katzen" in translated or "5</b>\u00a0<b>Katzen" in translated
    assert translated.replace("<p>", "").replace("</p>", "").replace("<b>", "").replace(
        "</b>", "") == "sie haben 5\u00a0Katzen\n"
