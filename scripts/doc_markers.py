# SPDX-License-Identifier: MIT
"""The generated part of a document: the text between the lines "<!-- NAME: begin -->" and
"<!-- NAME: end -->", which the scripts that make tables from measurement files replace, so the docs
never hold a hand-typed figure."""
import sys


def replace_between(path, marker, text, program):
    """Replaces what stands between `marker`'s two lines in `path` with `text`; exits naming `program`
    and the file where either line is missing."""
    begin, end = f"<!-- {marker}: begin -->", f"<!-- {marker}: end -->"
    with open(path, encoding="utf-8") as f:
        content = f.read()
    if begin not in content or end not in content:
        sys.exit(f"{program}: {path} has no '{begin}' ... '{end}' lines to replace")
    head, rest = content.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + begin + "\n" + text.rstrip("\n") + "\n" + end + tail)
