"""A generated English->German corpus of counted things, for offline quick starts.

"I have forty-two apples" -> "ich habe zweiundvierzig Äpfel": German number words swap
units and tens and are written as one compound word, the verb of a perfect or modal sentence
moves to the end, and "one" becomes an article ("einen Apfel"). Small vocabulary, short
sentences, deterministic for a seed.
"""
from __future__ import annotations

import os
import random

DEMO_LANGS = ("en", "de")
SPLIT_SIZES = {"train": 15000, "dev": 500, "test": 500}

_EN_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
             "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_EN_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_DE_UNITS = ("null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn "
             "vierzehn fünfzehn sechzehn siebzehn achtzehn neunzehn").split()
_DE_TENS = "_ _ zwanzig dreißig vierzig fünfzig sechzig siebzig achtzig neunzig".split()

# (English singular, English plural, German singular with accusative article, German plural)
_NOUNS = (
    ("apple", "apples", "einen Apfel", "Äpfel"),
    ("dog", "dogs", "einen Hund", "Hunde"),
    ("bird", "birds", "einen Vogel", "Vögel"),
    ("chair", "chairs", "einen Stuhl", "Stühle"),
    ("cat", "cats", "eine Katze", "Katzen"),
    ("flower", "flowers", "eine Blume", "Blumen"),
    ("book", "books", "ein Buch", "Bücher"),
    ("house", "houses", "ein Haus", "Häuser"),
    ("car", "cars", "ein Auto", "Autos"),
    ("child", "children", "ein Kind", "Kinder"),
)

# English and German frames; {n} is the counted noun phrase, {be} agrees with it.
_FRAMES = (
    ("{n}", "{n}"),
    ("I have {n}", "ich habe {n}"),
    ("we see {n}", "wir sehen {n}"),
    ("she buys {n}", "sie kauft {n}"),
    ("they have sold {n}", "sie haben {n} verkauft"),
    ("he has found {n}", "er hat {n} gefunden"),
    ("you want to draw {n}", "du willst {n} malen"),
    ("I counted {n} yesterday", "ich habe gestern {n} gezählt"),
    ("there {be} {n} in the garden", "es gibt {n} im Garten"),
)

# Share of numbers with 1, 2, 3 and 4 digits.
_DIGIT_WEIGHTS = (0.1, 0.3, 0.4, 0.2)


def english_number(number: int) -> str:
    """Spell 0 <= number < 10000 in British English: 307 -> 'three hundred and seven'."""
    _check_range(number)
    if number < 20:
        return _EN_UNITS[number]
    if number < 100:
        tens, units = divmod(number, 10)
        return _EN_TENS[tens] + (f"-{_EN_UNITS[units]}" if units else "")
    if number < 1000:
        hundreds, rest = divmod(number, 100)
        head = f"{_EN_UNITS[hundreds]} hundred"
    else:
        thousands, rest = divmod(number, 1000)
        head = f"{_EN_UNITS[thousands]} thousand"
        if rest >= 100:
            head, rest = f"{head} {english_number(rest - rest % 100)}", rest % 100
    if not rest:
        return head
    return f"{head} and {english_number(rest)}"


def german_number(number: int) -> str:
    """Spell 0 <= number < 10000 as one German word: 42 -> 'zweiundvierzig'."""
    _check_range(number)
    if number < 20:
        return _DE_UNITS[number]
    if number < 100:
        tens, units = divmod(number, 10)
        prefix = ("ein" if units == 1 else _DE_UNITS[units]) + "und" if units else ""
        return prefix + _DE_TENS[tens]
    scale, unit = (1000, "tausend") if number >= 1000 else (100, "hundert")
    count, rest = divmod(number, scale)
    head = ("ein" if count == 1 else _DE_UNITS[count]) + unit
    return head + (german_number(rest) if rest else "")


def _check_range(number: int) -> None:
    if not 0 <= number < 10000:
        raise ValueError(f"number must be in [0, 10000), got {number}")


def _sample_pair(rng: random.Random) -> tuple[str, str]:
    """Draw one (English, German) sentence pair."""
    digits = rng.choices((1, 2, 3, 4), weights=_DIGIT_WEIGHTS)[0]
    number = rng.randrange(0 if digits == 1 else 10 ** (digits - 1), 10**digits)
    en_sg, en_pl, de_sg, de_pl = rng.choice(_NOUNS)
    en_frame, de_frame = rng.choice(_FRAMES)
    if number == 1:
        en_np, de_np, be = f"one {en_sg}", de_sg, "is"
    else:
        en_np, be = f"{english_number(number)} {en_pl}", "are"
        de_np = f"{german_number(number)} {de_pl}"
    return en_frame.format(n=en_np, be=be), de_frame.format(n=de_np)


def demo_pairs(seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    """Return disjoint train/dev/test lists of (English, German) pairs, fixed by ``seed``."""
    rng = random.Random(seed)
    wanted = sum(SPLIT_SIZES.values())
    unique: dict[str, str] = {}
    while len(unique) < wanted:
        english, german = _sample_pair(rng)
        unique.setdefault(english, german)
    pairs = list(unique.items())
    splits, start = {}, 0
    for split, size in SPLIT_SIZES.items():
        splits[split] = pairs[start:start + size]
        start += size
    return splits


def write_demo_corpus(directory: str | os.PathLike, seed: int = 0) -> dict[str, tuple[str, str]]:
    """Write ``<split>.en`` / ``<split>.de`` files and return split -> (src_path, tgt_path).

    The files are plain UTF-8, one sentence a line, readable with ``read_parallel``.
    """
    os.makedirs(directory, exist_ok=True)
    paths = {}
    for split, pairs in demo_pairs(seed).items():
        split_paths = []
        for side, lang in enumerate(DEMO_LANGS):
            path = os.path.join(os.fspath(directory), f"{split}.{lang}")
            with open(path, "w", encoding="utf-8") as handle:
                handle.writelines(pair[side] + "\n" for pair in pairs)
            split_paths.append(path)
        paths[split] = (split_paths[0], split_paths[1])
    return paths
