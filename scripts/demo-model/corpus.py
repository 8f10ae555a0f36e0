"""The training text: the King James Bible from Debian's bible-kjv-text package.

The `bible` program (package bible-kjv) prints every verse as "Ref text" on one
line; the reference is dropped, so the corpus is one verse per line. The
held-out split is the last books, 1 John to Revelation (about 2% of the text),
so that held-out loss measures text the model never saw.
"""

import re
import subprocess

HELD_OUT_FIRST_BOOK = "1Jn"  # the bible program's abbreviation for 1 John
_REF = re.compile(r"^([0-9]?[A-Za-z]+)([0-9]+):([0-9]+) (.*)$")


def package_version(name):
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def load_verses():
    """[(book, text)] for all 31102 verses, in order."""
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True,
                         check=True).stdout
    verses = []
    for line in out.splitlines():
        m = _REF.match(line)
        if not m:
            raise ValueError("unexpected line from bible: %r" % line[:80])
        verses.append((m.group(1), m.group(4).strip()))
    if len(verses) != 31102:
        raise ValueError("expected 31102 verses, got %d" % len(verses))
    return verses


def split_text():
    """(train_text, held_out_text): verses joined by newlines."""
    verses = load_verses()
    first = next(i for i, (book, _) in enumerate(verses) if book == HELD_OUT_FIRST_BOOK)
    train = "".join(text + "\n" for _, text in verses[:first])
    held = "".join(text + "\n" for _, text in verses[first:])
    return train, held
